"""Deterministic records made by the contract's own builders, for snapshot tests and demos.

No randomness and no clock: the same calls give the same records, so screenshots of an
engine-less app fed with them are stable.
"""

from __future__ import annotations

import math
from typing import Any

from tuitrain.metrics.records import eval_record, event_record, header_record, train_record
from tuitrain.metrics.sinks import TimelineStoreSink
from tuitrain.metrics.store import MetricStore

GiB = 1 << 30


def header(precision: str = "fp16", device: str = "cuda", total_steps: int = 600) -> dict:
    on_cuda = device.startswith("cuda")
    return header_record(
        **{
            "preset": f"fashion-{precision}",
            "config": {
                "preset": {"description": "deterministic test records"},
                "model": {"name": "fashion_cnn", "dropout": 0.5, "channels_last": False},
                "data": {
                    "name": "fashion_mnist",
                    "loader": "dataloader" if on_cuda else "device",
                    "batch_size": 256,
                    "num_workers": 2,
                    "pin_memory": True,
                },
                "optim": {
                    "name": "adamw",
                    "lr": 3e-3,
                    "schedule": "cosine",
                    "warmup_steps": 50,
                    "grad_accum": 1,
                },
                "train": {"epochs": 3, "log_every": 2},
                "run": {"run_dir": ""},
            },
            "device": "cuda:0" if on_cuda else "cpu",
            "device_name": "NVIDIA H200" if on_cuda else "CPU (AVX512, 2 threads)",
            "device_memory_bytes": 140 * GiB if on_cuda else None,
            "precision": precision,
            "tf32": on_cuda,  # an H200: fp32 matmuls as TF32 (train.tf32 on)
            "compile": on_cuda,
            "world_size": 1,
            "torch": "2.14.1",
            "tuitrain": "0.1.0",
            "python": "3.11.7",
            "time": "2026-01-01T00:00:00+00:00",
            "data": "Fashion-MNIST (60,000 train / 10,000 val)",
            "params": 824458,
            "global_batch": 256,
            "steps_per_epoch": 200,
            "total_steps": total_steps,
            "run_dir": "runs/snapshot-run",
            "flops_per_sample": FLOPS_PER_SAMPLE,
            "peak_tflops": H200_PEAK[precision] if on_cuda else None,
            "peak_source": f"table: H200 {precision} dense" if on_cuda else "none known for cpu",
        }
    )


def train(step: int, precision: str, on_cuda: bool) -> dict[str, Any]:
    loss = 0.35 + 1.9 * math.exp(-step / 60) + 0.06 * math.sin(step / 3.0)
    wait = 0.04 + 0.1 * (step / 400) + 0.03 * math.sin(step / 7.0)
    scale = None
    skipped = None
    if precision == "fp16":
        overflows = [150, 260, 330]
        skipped = sum(1 for s in overflows if s <= step)
        scale = 65536.0 * 2 ** (step // 100) / 2**skipped
    alloc = (1.2 + 0.05 * math.sin(step / 9)) * GiB
    return train_record(
        step=step,
        epoch=step / 200,
        samples=step * 256,
        loss=loss,
        lr=3e-3 * 0.5 * (1 + math.cos(math.pi * step / 600)),
        samples_per_s=41000 + 3000 * math.sin(step / 11.0) + (0 if step > 20 else -15000),
        step_time_s=256 / 41000,
        data_wait_s=wait * 0.0125,
        data_wait_frac=wait,
        telemetry={
            "mem_alloc_bytes": alloc if on_cuda else None,
            "mem_reserved_bytes": 2.0 * GiB if on_cuda else None,
            "mem_peak_bytes": 1.6 * GiB if on_cuda else None,
            "host_rss_bytes": 812 * (1 << 20) + step * 4096,
            "gpu_util_pct": 87.0 if on_cuda else None,
            "gpu_mem_used_bytes": 2.6 * GiB if on_cuda else None,
        },
        grad_scale=scale,
        skipped_steps=skipped,
        grad_norm=1.5 + 2.0 * math.exp(-step / 80),
        monitor=flops_fields(step, precision, on_cuda),
    )


FLOPS_PER_SAMPLE = 27_411_456.0  # the seeds' CNN, forward + backward (FlopCounterMode)
H200_PEAK = {"bf16": 989.4, "fp16": 989.4, "fp32": 494.7}  # dense; fp32 runs as TF32


def flops_fields(step: int, precision: str, on_cuda: bool) -> dict[str, Any]:
    """Achieved TFLOP/s from the fake samples/s, MFU on the fake H200, the monitor's cost."""
    rate = 41000 + 3000 * math.sin(step / 11.0) + (0 if step > 20 else -15000)
    tflops = FLOPS_PER_SAMPLE * rate / 1e12
    return {
        "tflops": tflops,
        "mfu": tflops / H200_PEAK[precision] if on_cuda else None,
        "host_syncs": 1,
        "syncs_per_step": 0.5,
        "monitor_s": 0.0001,
        "monitor_frac": 0.0001 / (2 * 256 / 41000),
    }


def records(precision: str = "fp16", device: str = "cuda", steps: int = 400) -> list[dict]:
    """A header, a train record every 2 steps up to `steps`, evals per epoch and events."""
    on_cuda = device.startswith("cuda")
    out: list[dict[str, Any]] = [header(precision, device)]
    if on_cuda:
        out.append(
            event_record(
                "torch.compile done in 21.4 s (first step, not counted in throughput)",
                kind="compile_done",
                seconds=21.4,
            )
        )
    for step in range(2, steps + 1, 2):
        out.append(train(step, precision, on_cuda))
        if step == 4:
            out.append(
                event_record(
                    "data wait 12% of step time (warning): raise data.num_workers",
                    level="warning",
                    kind="data_wait",
                )
            )
        if step % 200 == 0:
            epoch = step // 200
            metrics = {"loss": 0.52 - 0.1 * epoch, "acc": 0.81 + 0.03 * epoch}
            out.append(eval_record(step, metrics, epoch=float(epoch)))
            out.append(
                event_record(f"checkpoint saved at step {step} (epoch end)", kind="checkpoint")
            )
    return out


def filled_store(precision: str = "fp16", device: str = "cuda", steps: int = 400) -> MetricStore:
    """A store fed through the UI's own sink (so events carry their arrival order)."""
    store = MetricStore()
    sink = TimelineStoreSink(store)
    for rec in records(precision, device, steps):
        sink.write(rec)
    return store


# --------------------------------------------------------------------------- other runs
CHARLM_TASK = {
    "name": "charlm", "primary": "val_loss", "mode": "min", "tolerance": None, "tokens": True,
    "metrics": [
        {"name": "val_loss", "split": "val", "goal": "min", "format": "float",
         "unit": "nats/char"},
        {"name": "val_bpc", "split": "val", "goal": "min", "format": "float",
         "unit": "bits/char"},
    ],
}  # fmt: skip
SAMPLE_TEXT = "ROMEO:\nWhat say'st thou, friar?\n\nJULIET:\nGood night, good night."


def charlm_records(steps: int = 120) -> list[dict]:
    """A charlm-mini run on a CPU: tokens/s, a val loss in nats/char every 40 steps, a
    sample text with line breaks after each evaluation."""
    out: list[dict[str, Any]] = [
        header_record(
            preset="charlm-mini",
            config={
                "model": {"name": "gpt", "layers": 4, "heads": 4, "width": 128},
                "data": {"name": "shakespeare", "loader": "device", "batch_size": 32},
                "optim": {
                    "name": "adamw",
                    "lr": 3e-3,
                    "schedule": "cosine",
                    "warmup_steps": 100,
                    "grad_accum": 1,
                },
                "train": {"epochs": 6, "log_every": 5},
            },  # fmt: skip
            device="cpu",
            device_name="CPU (AVX512, 2 threads)",
            precision="fp32",
            tf32=False,
            compile=False,
            world_size=1,
            torch="2.14.1",
            tuitrain="0.1.0",
            python="3.11.7",
            time="2026-01-01T00:00:00+00:00",
            data="Shakespeare, nine plays shipped with tuitrain",
            params=818304,
            global_batch=32,
            steps_per_epoch=242,
            total_steps=150,
            run_dir="runs/charlm",
            task=CHARLM_TASK,
        )  # fmt: skip
    ]
    for step in range(5, steps + 1, 5):
        out.append(
            train_record(
                step=step,
                epoch=step / 242,
                samples=step * 32,
                loss=1.6 + 2.6 * math.exp(-step / 40) + 0.03 * math.sin(step),
                lr=3e-3 * min(1.0, step / 100),
                samples_per_s=13.3 + 0.1 * math.sin(step),
                step_time_s=2.4,
                data_wait_s=0.001,
                data_wait_frac=0.0004,
                telemetry={"host_rss_bytes": 893 * (1 << 20)},
                grad_scale=None,
                skipped_steps=None,
                grad_norm=0.9 + math.exp(-step / 30),
                tokens_per_s=1701.0 + 10 * math.sin(step),
            )  # fmt: skip
        )
        if step % 40 == 0:
            loss = 1.7 + 2.4 * math.exp(-step / 40)
            out.append(eval_record(step, {"loss": loss, "bpc": loss / math.log(2)},
                                   epoch=step / 242))  # fmt: skip
            out.append(event_record(f"sample at step {step}: {SAMPLE_TEXT!r}", kind="sample",
                                    text=SAMPLE_TEXT))  # fmt: skip
    return out


def script_records(steps: int = 200, end: bool = True) -> list[dict]:
    """A wandb-style script's run as tuitrain's client writes it: no engine fields, its own
    keys (one of them 6e-11 small), an eval every 50 steps, a summary at the end."""
    from tuitrain.metrics.records import end_record, script_train_record

    out: list[dict[str, Any]] = [
        header_record(
            preset="toy-script",
            config={
                "script": {"lr": 0.05, "batch": 32, "model": "mlp"},
                "meta": {"project": "demo"},
            },  # fmt: skip
            device="cpu",
            device_name="x86_64",
            precision=None,
            compile=None,
            world_size=1,
            torch=None,
            tuitrain="0.1.0",
            python="3.11.7",
            time="2026-01-01T00:00:00+00:00",
            run_dir="runs/toy-script",
            hostname="box",
            argv=["train.py"],
            client=True,
            task={
                "name": "script",
                "primary": None,
                "mode": "min",
                "tolerance": None,
                "tokens": False,
                "metrics": [],
            },
        )  # fmt: skip
    ]
    for step in range(steps):
        loss = 2.0 * math.exp(-step / 50) + 0.1 + 0.02 * math.sin(step)
        values = {
            "loss": loss, "lr": 0.05 * (1 - step / steps), "grad_norm": 1 + math.exp(-step / 30),
            "train/acc": 1 - loss / 2.2, "tiny": 6e-11 * (1 + step / 100),
        }  # fmt: skip
        rec = script_train_record(step, values, 0.0102 if step else None)
        if step % 20 == 19:
            rec["host_rss_bytes"] = 23 * (1 << 20) + step * 4096
        out.append(rec)
        if step % 50 == 49:
            out.append(eval_record(step, {"loss": loss * 1.1, "acc": 1 - loss / 2.0}))
    if end:
        last = out[-2] if out[-1].get("type") == "eval" else out[-1]
        summary = {"train/loss": last["loss"], "tiny": last["tiny"], "best_acc": 0.93}
        out.append(end_record("completed", "finished", steps - 1, summary=summary))
    return out


def store_of(recs: list[dict]) -> MetricStore:
    """A store fed `recs` through the UI's own sink."""
    store = MetricStore()
    sink = TimelineStoreSink(store)
    for rec in recs:
        sink.write(rec)
    return store
