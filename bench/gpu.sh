#!/usr/bin/env bash
# Item 7 on a lent CUDA machine: make tuitrain importable from this working tree, then run
# bench/gpu.py under a time budget; the JSON lands in $OUT/gpu.json (or ./bench-out/).
#
#   bash bench/gpu.sh [budget_s]        # default 420 s of measuring, +60 s grace
#
# Nothing here reaches the network: torch (and torchvision, for resnet18) must already be
# installed on the machine. tuitrain itself needs no install: if `import tuitrain` fails, an
# offline editable install is tried, then PYTHONPATH falls back to the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET="${1:-420}"
OUT="${OUT:-$PWD/bench-out}"
mkdir -p "$OUT"
export OUT

if ! python -c "import torch" 2>/dev/null; then
    echo "gpu.sh: torch is not installed on this machine; nothing to measure" >&2
    exit 2
fi
if ! python -c "import tuitrain" 2>/dev/null; then
    pip install --quiet --no-deps --no-index --no-build-isolation -e . 2>/dev/null \
        || export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
python - <<'PY'
import torch, tuitrain
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      "| tuitrain", tuitrain.__version__, "from", tuitrain.__file__)
PY
nvidia-smi --query-gpu=name,driver_version,memory.total,utilization.gpu --format=csv,noheader 2>/dev/null \
    || true

status=0
timeout --signal=TERM "$((BUDGET + 60))" \
    python bench/gpu.py --budget-s "$BUDGET" --out "$OUT/gpu.json" || status=$?
if [ -f "$OUT/gpu.json" ]; then
    echo "gpu.sh: gpu.py exited $status; JSON in $OUT/gpu.json" >&2
else
    echo "gpu.sh: gpu.py exited $status; no JSON written" >&2
fi
exit "$status"
