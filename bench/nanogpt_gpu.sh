#!/usr/bin/env bash
# nanoGPT's own train.py against the engine on a lent CUDA machine (issue #40, item 1): the same
# shape as on the CPU (4 layers, 4 heads, 128 wide, context 128, batch 32), fp32 with TF32
# matmuls on both sides, one interleaved pair per configuration, each pair's JSON lines in
# $OUT/nanogpt-NAME.jsonl (or ./bench-out/), its logs under $OUT/nanogpt-NAME/ (one pair:
# nanoGPT runs first; each configuration gets an equal share of what is left of the budget):
#
#   compiled  nanoGPT --compile=True (its GPU default) / engine train.compile=on
#   graphs    nanoGPT --compile=True / engine compile_mode=reduce-overhead (CUDA graphs)
#   eager     both without compile
#
#   NANOGPT=DIR bash bench/nanogpt_gpu.sh [budget_s]   # default 480 s for the three
#
# DIR is a checkout of karpathy/nanoGPT (default bench-data/nanogpt: copy one there and carry
# it to the device machine); its data/tuitrain_char/ is written from tuitrain's shipped text.
# The tree's root goes first on PYTHONPATH (no tuitrain install needed; torch and numpy are).
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET="${1:-480}"
case "$BUDGET" in
    '' | *[!0-9]*) echo "nanogpt_gpu.sh: budget_s must be a whole number of seconds, not '$BUDGET'" >&2; exit 2 ;;
esac
NANOGPT="${NANOGPT:-$PWD/bench-data/nanogpt}"
if [ ! -f "$NANOGPT/train.py" ] || [ ! -f "$NANOGPT/model.py" ]; then
    echo "nanogpt_gpu.sh: no nanoGPT checkout at $NANOGPT (train.py, model.py); put one there or set NANOGPT=DIR" >&2
    exit 2
fi
OUT="${OUT:-$PWD/bench-out}"
mkdir -p "$OUT"
if [ "$BUDGET" -lt 180 ]; then
    echo "nanogpt_gpu.sh: a budget of $BUDGET s is too short for three pairs; give at least 180" >&2
    exit 2
fi
PY="${PYTHON:-$(command -v python3 || command -v python || true)}"
if [ -z "$PY" ]; then
    echo "nanogpt_gpu.sh: no python3 or python here; set PYTHON=/path/to/python" >&2
    exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
cuda=0
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 4)" || cuda=$?
if [ "$cuda" -eq 4 ]; then
    echo "nanogpt_gpu.sh: no CUDA device here; run it on a GPU machine" >&2
    exit 2
elif [ "$cuda" -ne 0 ]; then
    echo "nanogpt_gpu.sh: $PY cannot import torch; install it or set PYTHON=/path/to/python" >&2
    exit 2
fi
deadline=$((SECONDS + BUDGET))
measured=0
pairs_left=3
pair() {  # NAME, then bench/nanogpt.py's arguments
    local name="$1" left share
    shift
    left=$((deadline - SECONDS))
    share=$((left / pairs_left))
    pairs_left=$((pairs_left - 1))
    if [ "$share" -lt 60 ]; then
        echo "$name: not run (budget spent)"
        return 0
    fi
    local rc=0
    timeout --signal=TERM --kill-after=20 "$share" "$PY" bench/nanogpt.py --nanogpt "$NANOGPT" \
        --python "$PY" throughput --device cuda --pairs 1 --steps 2000 \
        --work "$OUT/nanogpt-$name" "$@" > "$OUT/nanogpt-$name.jsonl" 2> "$OUT/nanogpt-$name.err" || rc=$?
    if [ "$rc" -eq 0 ]; then
        measured=$((measured + 1))
        echo "$name: $(tail -1 "$OUT/nanogpt-$name.jsonl" | cut -c1-400)"
    else
        echo "$name: exit $rc; $(tail -3 "$OUT/nanogpt-$name.err")"
    fi
}
pair compiled --set 'train.compile="on"' --np-arg=--compile=True
pair graphs --set 'train.compile="on"' --set 'train.compile_mode="reduce-overhead"' --np-arg=--compile=True
pair eager
if [ "$measured" -eq 0 ]; then
    echo "nanogpt_gpu.sh: no pair measured; the .err files under $OUT say why" >&2
    exit 1
fi
