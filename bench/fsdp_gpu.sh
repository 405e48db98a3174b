#!/usr/bin/env bash
# DDP against FSDP2 on a lent CUDA node (issue #39): bench/strategies.py over every GPU, one rank
# per GPU (nccl), charlm-bf16, under a time budget; the JSON lands in $OUT/strategies.json (or
# ./bench-out/strategies.json). BENCHMARKS.md ("FSDP2 against DDP") says what to read: tokens/s,
# peak memory per rank, the share of the step in collectives, the rank watch's cost.
#
#   bash bench/fsdp_gpu.sh [budget_s]     # default 420 s
#
# Needs at least two GPUs: FSDP shards over the ranks, and NCCL runs one rank per GPU, so one
# GPU has nothing to compare; the script says so and exits 2 (nothing measured).
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET="${1:-420}"
case "$BUDGET" in
    '' | *[!0-9]*) echo "fsdp_gpu.sh: budget_s must be a whole number of seconds, not '$BUDGET'" >&2; exit 2 ;;
esac
OUT="${OUT:-$PWD/bench-out}"
mkdir -p "$OUT"
PY="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
gpus=$("$PY" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)" 2>/dev/null) || {
    echo "fsdp_gpu.sh: $PY cannot import torch; PYTHON=/path/to/python picks the interpreter" >&2
    exit 2
}
if [ "$gpus" -eq 0 ]; then
    echo "fsdp_gpu.sh: no CUDA device here; run it on a GPU machine (bench/strategies.py measures the CPU)" >&2
    exit 2
fi
if [ "$gpus" -lt 2 ]; then
    echo "fsdp_gpu.sh: $gpus GPU here; DDP against FSDP needs at least 2 (one rank per GPU); nothing measured" >&2
    exit 2
fi
rm -f "$OUT/strategies.json"
rc=0
timeout --signal=TERM --kill-after=30 "$BUDGET" "$PY" bench/strategies.py --device cuda \
    --nproc "$gpus" --preset charlm-bf16 --steps 300 --log-every 50 --repeats 2 \
    > "$OUT/strategies.json" 2> "$OUT/strategies.log" || rc=$?
tail -5 "$OUT/strategies.log"
exit "$rc"
