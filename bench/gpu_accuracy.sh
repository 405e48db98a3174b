#!/usr/bin/env bash
# Issue #18's accuracy figures on a lent CUDA machine, in one go under a time budget: the
# fashion presets' 10 epochs over seeds 0-2 (fp32, native bf16, fp16 + GradScaler) and the
# ResNet-18 GPU preset (fashion-resnet18-bf16, its own 30 epochs, seed 0), all at once on the
# one GPU (bench/preset_accuracy.py, the real command line per run).
#
#   bash bench/gpu_accuracy.sh [budget_s]      # default 420 s, then the runs are stopped
#   bash bench/gpu_accuracy.sh --allow-cpu [budget_s]   # the same plumbing on a CPU: the
#                                  # shipped subset, a step or two, seed 0, fashion-fp32
#                                  # and the ResNet (tests use it)
#
# Fashion-MNIST must be on that machine: $TUITRAIN_DATA, else bench-data/fashion-mnist in the
# tree (git-ignored; 30 MB: `mkdir -p bench-data && cp -r /usr/share/datasets/fashion-mnist
# bench-data/` here, then carry bench-data to the device machine).
# RESNET_SEEDS="0 1 2" widens the ResNet runs; PYTHON picks the interpreter.
#
# Output: $OUT/gpu_accuracy.json (or ./bench-out/): the summary, written also after a cut, where
# a run the budget stopped appears with the epochs it finished (complete: false); and
# $OUT/runs/PRESET-seedS.jsonl, each run's metrics. Exits 2 when it cannot start (no data, no
# torch, no CUDA), 1 when no run finished an epoch.
set -euo pipefail
cd "$(dirname "$0")/.."

CPU_CHECK=0
if [ "${1:-}" = "--allow-cpu" ]; then
    CPU_CHECK=1
    shift
fi
BUDGET="${1:-420}"
case "$BUDGET" in
    '' | *[!0-9]*) echo "gpu_accuracy.sh: budget_s must be a whole number of seconds, not '$BUDGET'" >&2; exit 2 ;;
esac
OUT="${OUT:-$PWD/bench-out}"
DATA="${TUITRAIN_DATA:-$PWD/bench-data/fashion-mnist}"
if [ "$CPU_CHECK" -eq 0 ] && ! ls "$DATA"/train-images-idx3-ubyte* > /dev/null 2>&1; then
    echo "gpu_accuracy.sh: Fashion-MNIST is not in $DATA; copy its four IDX files there" \
        "(cp -r /usr/share/datasets/fashion-mnist bench-data/) or set TUITRAIN_DATA=DIR" >&2
    exit 2
fi
PY="${PYTHON:-$(command -v python3 || command -v python || true)}"
probe=0
[ -n "$PY" ] && "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)" \
    2>/dev/null || probe=$?
[ -n "$PY" ] || probe=1
if [ "$probe" -eq 3 ] && [ "$CPU_CHECK" -eq 0 ]; then
    echo "gpu_accuracy.sh: no CUDA GPU here; these runs take hours on a CPU" \
        "(use bench/preset_accuracy.py there)" >&2
    exit 2
elif [ "$probe" -ne 0 ] && [ "$probe" -ne 3 ]; then
    echo "gpu_accuracy.sh: no python with torch (set PYTHON=/path/to/python); nothing measured" >&2
    exit 2
fi
export TUITRAIN_DATA="$DATA" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true

SEEDS=(0 1 2)
CNN_PRESETS=(fashion-fp32 fashion-bf16 fashion-fp16)
CNN_SMALL=()
RESNET_SMALL=()
if [ "$CPU_CHECK" -eq 1 ]; then
    SEEDS=(0)
    CNN_PRESETS=(fashion-fp32)  # the same path as its two siblings, at a third of the cost
    CNN_SMALL=(--set data.name=fashion_mini --set train.max_steps=2 --set data.val_samples=128)
    RESNET_SMALL=(--set data.name=fashion_mini --set train.max_steps=1 --set data.batch_size=4
        --set data.val_samples=16 --set train.precision=fp32)
fi

RUNS="$(mktemp -d "${TMPDIR:-/tmp}/tuitrain-gpu-acc.XXXXXX")"
trap 'rm -rf "$RUNS"' EXIT  # checkpoints; each run's metrics are copied to $OUT/runs first
mkdir -p "$OUT/runs"
rm -f "$OUT/gpu_accuracy.json"  # a stale file from an earlier run must not pass for this one's
# shellcheck disable=SC2086  # RESNET_SEEDS is a list of seeds
timeout --signal=TERM --kill-after=30 "$BUDGET" \
    "$PY" bench/preset_accuracy.py --presets "${CNN_PRESETS[@]}" \
    --seeds "${SEEDS[@]}" --epochs 10 --parallel 9 --threads 1 --runs-dir "$RUNS" \
    ${CNN_SMALL[@]+"${CNN_SMALL[@]}"} > /dev/null &
cnn=$!
timeout --signal=TERM --kill-after=30 "$BUDGET" \
    "$PY" bench/preset_accuracy.py --presets fashion-resnet18-bf16 --seeds ${RESNET_SEEDS:-0} \
    --epochs 0 --parallel 3 --threads 2 --runs-dir "$RUNS" \
    ${RESNET_SMALL[@]+"${RESNET_SMALL[@]}"} > /dev/null &
resnet=$!
status=0
wait "$cnn" || status=$?
wait "$resnet" || status=$((status ? status : $?))
echo "gpu_accuracy.sh: runs ended (exit $status); summarising $RUNS" >&2

for metrics in "$RUNS"/*/metrics.jsonl; do
    [ -f "$metrics" ] && cp "$metrics" "$OUT/runs/$(basename "$(dirname "$metrics")").jsonl"
done
"$PY" bench/preset_accuracy.py --summarise "$RUNS" > "$OUT/gpu_accuracy.json"
"$PY" - "$OUT/gpu_accuracy.json" <<'PY'
import json, sys
presets = json.load(open(sys.argv[1]))["presets"]
for name, p in presets.items():
    cut = [r["seed"] for r in p["runs"] if not r.get("complete")]
    print(f"gpu_accuracy.sh: {name}: {p['final_acc_pct']} mean {p['mean_pct']}"
          f" ({p['s_per_epoch']} s/epoch)" + (f"; cut short: seeds {cut}" if cut else ""),
          file=sys.stderr)
sys.exit(0 if any(r.get("epochs_done") for p in presets.values() for r in p["runs"]) else 1)
PY
