#!/usr/bin/env bash
# The charlm-bf16 preset (nanoGPT's shakespeare-char shape) on a lent CUDA machine, headless,
# under a time budget; the run's metrics.jsonl and log land in $OUT/charlm-bf16/ (or
# ./bench-out/charlm-bf16/). BENCHMARKS.md ("charlm") says what to read from them: tokens/s,
# MFU and val loss over time.
#
#   bash bench/charlm_gpu.sh [budget_s]     # default 420 s; the run stops there (SIGTERM,
#                                           # a checkpoint and an end record are kept)
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET="${1:-420}"
case "$BUDGET" in
    '' | *[!0-9]*) echo "charlm_gpu.sh: budget_s must be a whole number of seconds, not '$BUDGET'" >&2; exit 2 ;;
esac
OUT="${OUT:-$PWD/bench-out}"
mkdir -p "$OUT"
PY="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 4)" || {
    echo "charlm_gpu.sh: no CUDA device here; run it on a GPU machine" >&2
    exit 2
}
rc=0
timeout --signal=TERM --kill-after=60 "$BUDGET" "$PY" -m tuitrain --preset charlm-bf16 --no-ui \
    --run-dir "$OUT/charlm-bf16" > "$OUT/charlm-bf16.log" 2>&1 || rc=$?
tail -5 "$OUT/charlm-bf16.log"
# 0: all epochs done; 124/143: the budget ended it (what was measured is kept)
case "$rc" in 0 | 124 | 143) exit 0 ;; *) exit "$rc" ;; esac
