#!/usr/bin/env bash
# Item 7 on a lent CUDA machine: the tree's tuitrain, bench/gpu.py under a time budget; the
# JSON lands in $OUT/gpu.json (or ./bench-out/gpu.json).
#
#   bash bench/gpu.sh [budget_s]               # default 400 s of measuring (+45 s grace):
#                                              # under 8 minutes, cold imports and compiles in
#   bash bench/gpu.sh --allow-cpu [budget_s]   # the same plumbing on a CPU, tiny sizes
#
# PYTHON=/path/to/python picks the interpreter (default: python3, else python).
# Works from a bare copy of the tree: torch must be installed (nothing here reaches the
# network), tuitrain need not be and pip need not exist. The tree goes first on PYTHONPATH,
# so every child imports this tree's tuitrain, installed or not. Exits non-zero when no run
# produced a figure; what was measured is kept when the budget or a run cuts it short.
set -euo pipefail
cd "$(dirname "$0")/.."

ALLOW_CPU=()
if [ "${1:-}" = "--allow-cpu" ]; then
    ALLOW_CPU=(--allow-cpu)
    shift
fi
BUDGET="${1:-400}"
case "$BUDGET" in
    '' | *[!0-9]*) echo "gpu.sh: budget_s must be a whole number of seconds, not '$BUDGET'" >&2; exit 2 ;;
esac
OUT="${OUT:-$PWD/bench-out}"
mkdir -p "$OUT"
export OUT
PY="${PYTHON:-$(command -v python3 || command -v python || true)}"
if [ -z "$PY" ]; then
    echo "gpu.sh: no python3 (or python) on PATH" >&2
    exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# one torch import for both the check and the versions (each costs seconds on a small CPU)
probe=0
GPU_SH_ALLOW_CPU="${#ALLOW_CPU[@]}" "$PY" - <<'PY' || probe=$?
import os, sys
try:
    import torch
except ImportError:
    sys.exit(3)
import tuitrain
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      "| tuitrain", tuitrain.__version__, "from", tuitrain.__file__, flush=True)
if not torch.cuda.is_available() and os.environ["GPU_SH_ALLOW_CPU"] == "0":
    print(f"gpu.sh: no CUDA device here (torch {torch.__version__}); run it on a GPU machine, "
          "or pass --allow-cpu to check the plumbing on this CPU", file=sys.stderr)
    sys.exit(4)
PY
if [ "$probe" -eq 3 ]; then
    echo "gpu.sh: torch is not installed for $PY; nothing to measure" >&2
    exit 2
elif [ "$probe" -eq 4 ]; then
    exit 2
elif [ "$probe" -ne 0 ]; then
    echo "gpu.sh: $PY could not import torch and tuitrain (exit $probe); nothing to measure" >&2
    exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,utilization.gpu --format=csv,noheader 2>/dev/null \
    || true

rm -f "$OUT/gpu.json"  # a stale file from an earlier run must not pass for this one's
status=0
timeout --signal=TERM --kill-after=15 "$((BUDGET + 45))" \
    "$PY" bench/gpu.py --budget-s "$BUDGET" --out "$OUT/gpu.json" ${ALLOW_CPU[@]+"${ALLOW_CPU[@]}"} || status=$?
if [ -f "$OUT/gpu.json" ]; then
    echo "gpu.sh: gpu.py exited $status; JSON in $OUT/gpu.json" >&2
else
    echo "gpu.sh: gpu.py exited $status; no JSON written" >&2
fi
if [ -f "$OUT/gpu.json" ] && "$PY" - "$OUT/gpu.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1])).get("runs", {})
done = [label for label, r in runs.items() if "samples_per_s" in r]
print("gpu.sh: figures for", ", ".join(done) if done else "no run", file=sys.stderr)
sys.exit(0 if done else 1)
PY
then
    [ "$status" -eq 0 ] || echo "gpu.sh: cut short (exit $status); the figures above are kept" >&2
    exit 0
fi
echo "gpu.sh: no run produced a figure" >&2
exit $((status ? status : 1))
