"""Checkpoints: exact resume in a new process, safe loading, crashes and full disks."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from tuitrain.engine import run
from tuitrain.engine.checkpoint import (
    CheckpointError,
    find_latest,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from tuitrain.metrics import NullSink

ROOT = Path(__file__).resolve().parents[2]
# 1024 images = 4 steps per epoch; 3 epochs = 12 steps; every step logged.
SMALL = [
    "--set",
    "data.train_samples=1024",
    "--set",
    "data.val_samples=256",
    "--epochs",
    "3",
    "--log-every",
    "1",
]


def tuitrain(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUITRAIN_NO_DOWNLOAD": "1"}
    return subprocess.run(
        [sys.executable, "-m", "tuitrain", "--no-ui", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def losses(run_dir: Path) -> dict[int, float]:
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["type"] == "train":
            out[rec["step"]] = rec["loss"]
    return out


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(find_latest(run_dir))["model"]


# the fashion presets' recipe: crops, flips and label smoothing must resume exactly too
RECIPE = ["--set", "data.crop_padding=2", "--set", "data.hflip=true"]
RECIPE += ["--set", "train.label_smoothing=0.1"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("precision", "recipe"), [("fp32", True), ("bf16", False), ("fp16", False)]
)
def test_resume_mid_epoch_is_bit_identical(tmp_path: Path, precision: str, recipe: bool) -> None:
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    args = [
        *SMALL,
        *(RECIPE if recipe else []),
        "--precision",
        precision,
        "--set",
        "checkpoint.every_steps=5",
        "--set",
        "checkpoint.keep=20",
    ]
    if precision != "fp32":  # autocast is emulated on most CPUs (slow): smaller batches
        args += ["--set", "data.batch_size=32", "--set", "data.train_samples=128"]
    proc = tuitrain(*args, "--run-dir", str(straight))
    assert proc.returncode == 0, proc.stderr
    # step 5 is mid-epoch (epoch 1, step 1 of 4): resume from it in a fresh process
    (resumed / "checkpoints").mkdir(parents=True)
    ckpt = resumed / "checkpoints" / "ckpt-step00000005.pt"
    shutil.copy(straight / "checkpoints" / "ckpt-step00000005.pt", ckpt)
    proc = tuitrain("--resume", str(ckpt))
    assert proc.returncode == 0, proc.stderr
    a, b = losses(straight), losses(resumed)
    assert sorted(b) == list(range(6, 13))  # nothing repeated, nothing skipped
    assert all(a[step] == b[step] for step in b), (a, b)  # bit-identical floats
    wa, wb = final_weights(straight), final_weights(resumed)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    if precision == "fp16":
        state = load_checkpoint(find_latest(resumed))
        assert state["scaler"]["scale"] > 0


@pytest.fixture(scope="module")
def straight_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted SMALL run, the reference both signal tests compare against."""
    straight = tmp_path_factory.mktemp("straight") / "run"
    proc = tuitrain(*SMALL, "--run-dir", str(straight))
    assert proc.returncode == 0, proc.stderr
    return straight


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_saves_and_resume_continues_at_the_next_step(
    tmp_path: Path, straight_small: Path, sig: signal.Signals, code: int
) -> None:
    straight, stopped = straight_small, tmp_path / "stopped"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tuitrain",
            "--no-ui",
            *SMALL,
            "--run-dir",
            str(stopped),
            "--set",
            "train.pace_s=0.2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not proc.stdout.readline().partition(" ")[2].startswith(
        "step     2"
    ):
        pass
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode == code
    k = load_checkpoint(find_latest(stopped))["step"]
    assert 2 <= k < 12
    proc2 = tuitrain("--resume", "auto", "--run-dir", str(stopped))
    assert proc2.returncode == 0, proc2.stderr
    records = [json.loads(x) for x in (stopped / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if r["type"] == "train"]
    assert steps == list(range(1, 13)), "a step was repeated or skipped"
    assert any(r.get("kind") == "resume" for r in records)
    a, b = losses(straight), losses(stopped)
    assert all(a[s] == b[s] for s in range(k + 1, 13))


@pytest.mark.slow
def test_pickle_payload_is_refused_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    script = textwrap.dedent(f"""
        import os, torch
        class Evil:
            def __reduce__(self):
                return (os.system, ("touch {marker}",))
        torch.save({{"model": Evil(), "step": 1}}, "{tmp_path / "evil.pt"}")
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    with pytest.raises(CheckpointError, match="was refused"):
        load_checkpoint(tmp_path / "evil.pt")
    assert not marker.exists()


@pytest.mark.parametrize(
    "garbage",
    [b"hello world" * 10, b"\x80\x02X\x05\x00\x00\x00\xff\xfe\xfd\xfc\xfb."],
)
def test_garbage_bytes_are_refused_as_no_checkpoint(tmp_path: Path, garbage: bytes) -> None:
    """Text or a bare pickle is not what torch.save writes: "not a tuitrain checkpoint", not
    "could run code" (that is for a real archive carrying objects)."""
    path = tmp_path / "ckpt-step00000001.pt"
    path.write_bytes(garbage)
    with pytest.raises(CheckpointError, match="is not a tuitrain checkpoint"):
        load_checkpoint(path)


def test_truncated_and_empty_files_are_refused(tmp_path: Path) -> None:
    good = save_checkpoint(tmp_path, {"model": {"w": torch.ones(1000)}, "step": 1}, keep=3)
    data = good.read_bytes()
    (tmp_path / "checkpoints" / "ckpt-step00000002.pt").write_bytes(data[: len(data) // 2])
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(tmp_path / "checkpoints" / "ckpt-step00000002.pt")
    with pytest.raises(CheckpointError, match="is empty"):
        load_checkpoint(tmp_path / "empty.pt")
    assert find_latest(tmp_path) == good  # auto skips the truncated newer one


def test_kill_9_during_save_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import time, torch
        from pathlib import Path
        from tuitrain.engine import checkpoint
        run_dir = Path("{tmp_path}")
        checkpoint.save_checkpoint(run_dir, {{"model": {{"w": torch.ones(10)}}, "step": 1}}, 3)
        real_save = torch.save
        def slow_save(obj, f):
            f.write(b"PK partial bytes")
            f.flush()
            print("writing", flush=True)
            time.sleep(60)
        checkpoint.torch.save = slow_save
        checkpoint.save_checkpoint(run_dir, {{"model": {{"w": torch.zeros(10)}}, "step": 2}}, 3)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    proc.kill()  # SIGKILL in the middle of the write
    proc.wait(timeout=10)
    folder = tmp_path / "checkpoints"
    assert list(folder.glob(".ckpt-step00000002.pt.tmp-*")), "the half-written temp file"
    latest = find_latest(tmp_path)
    assert latest.name == "ckpt-step00000001.pt"
    assert torch.equal(load_checkpoint(latest)["model"]["w"], torch.ones(10))
    # the next save removes the dead process's temp file
    save_checkpoint(tmp_path, {"model": {"w": torch.ones(1)}, "step": 3}, keep=3)
    assert not list(folder.glob(".ckpt-*.tmp-*"))


def test_full_disk_leaves_earlier_checkpoints_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = save_checkpoint(tmp_path, {"model": {"w": torch.ones(4)}, "step": 1}, keep=1)

    def full_disk(obj: object, f: object) -> None:
        f.write(b"some bytes")  # type: ignore[attr-defined]
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("tuitrain.engine.checkpoint.torch.save", full_disk)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path, {"model": {"w": torch.zeros(4)}, "step": 2}, keep=1)
    folder = tmp_path / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt-step00000001.pt", "latest"]
    assert torch.equal(load_checkpoint(first)["model"]["w"], torch.ones(4))


def test_failed_save_during_training_is_reported_and_training_goes_on(
    tiny_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(obj: object, f: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("tuitrain.engine.checkpoint.torch.save", full_disk)
    events: list[dict] = []

    class Capture(NullSink):
        def write(self, record: dict) -> None:
            events.append(record)

    result = run(
        tiny_config("train.max_steps=4", "checkpoint.every_steps=2"), Capture(), run_dir=tmp_path
    )
    assert result.step == 4  # training went on to its end
    failed = [e for e in events if e.get("kind") == "checkpoint_failed"]
    assert failed and "No space left on device" in failed[0]["message"]
    assert all("no checkpoint of this run is kept" in e["message"] for e in failed)
    assert not list((tmp_path / "checkpoints").glob(".ckpt-*"))
    # every write failed and none is on disk: not a success
    assert result.status == "failed" and result.exit_code == 1
    assert "no checkpoint was kept" in result.reason and events[-1]["status"] == "failed"


def test_a_failed_save_after_a_kept_one_says_the_earlier_one_is_intact(
    tiny_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_save = torch.save
    calls = [0]

    def fills_up(obj: object, f: object) -> None:
        calls[0] += 1
        if calls[0] > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(obj, f)

    monkeypatch.setattr("tuitrain.engine.checkpoint.torch.save", fills_up)
    events: list[dict] = []

    class Capture(NullSink):
        def write(self, record: dict) -> None:
            events.append(record)

    result = run(
        tiny_config("train.max_steps=4", "checkpoint.every_steps=2"), Capture(), run_dir=tmp_path
    )
    failed = [e for e in events if e.get("kind") == "checkpoint_failed"]
    assert failed and "intact (newest: ckpt-step00000002.pt)" in failed[0]["message"]
    assert result.status == "completed" and result.exit_code == 0


def test_keep_last_k(tiny_config, tmp_path: Path) -> None:
    run(
        tiny_config("train.max_steps=8", "checkpoint.every_steps=1", "checkpoint.keep=2"),
        NullSink(),
        run_dir=tmp_path,
    )
    names = [p.name for p in list_checkpoints(tmp_path / "checkpoints")]
    assert names == ["ckpt-step00000008.pt", "ckpt-step00000007.pt"]
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == names[0]
    state = load_checkpoint(find_latest(tmp_path))
    assert not any(k.startswith(("_orig_mod.", "module.")) for k in state["model"])
    assert {"optimizer", "scheduler", "rng", "config", "epoch_step", "versions"} <= set(state)


@pytest.mark.slow
def test_checkpoint_of_another_model_or_preset_is_refused(tiny_config, tmp_path: Path) -> None:
    run(tiny_config("train.max_steps=2"), NullSink(), run_dir=tmp_path)
    state = load_checkpoint(find_latest(tmp_path))
    other = run(tiny_config("model.name=mlp"), NullSink(), resume=state)
    assert other.exit_code == 2 and "does not fit this model" in other.reason
    proc = tuitrain("--resume", str(find_latest(tmp_path)), "--preset", "fashion-bf16")
    assert proc.returncode == 2
    assert "is of preset 'fashion-mini', not 'fashion-bf16'" in proc.stderr


def test_nan_leaves_the_last_good_checkpoint_untouched(tiny_config, tmp_path: Path) -> None:
    cfg = tiny_config(
        "model.name=tests.engine.models_for_tests:nan_model",
        "checkpoint.every_steps=1",
        "train.max_steps=6",
    )
    result = run(cfg, NullSink(), run_dir=tmp_path)
    assert result.exit_code == 1 and "at step 3" in result.reason
    assert load_checkpoint(find_latest(tmp_path))["step"] == 2  # saved before the NaN


def test_injected_oom_gives_advice_and_releases(tiny_config) -> None:
    cfg = tiny_config("model.name=tests.engine.models_for_tests:oom_model", "train.max_steps=6")
    events: list[dict] = []

    class Capture(NullSink):
        def write(self, record: dict) -> None:
            events.append(record)

    result = run(cfg, Capture())
    assert result.status == "failed" and result.exit_code == 1
    assert result.reason == "out of memory at step 3 (batch 256)"
    error = [e for e in events if e.get("level") == "error"][0]
    assert "batch_size" in error["hint"] and "grad_accum" in error["hint"]
    assert "bf16" in error["hint"]


def test_fp16_overflow_skips_are_counted_and_collapse_warns(tiny_config) -> None:
    events: list[dict] = []

    class Capture(NullSink):
        def write(self, record: dict) -> None:
            events.append(record)

    cfg = tiny_config(
        "model.name=tests.engine.models_for_tests:inf_grad_model",
        "train.precision=fp16",
        "train.max_steps=18",
        "train.log_every=18",
        "data.train_samples=4608",
    )
    result = run(cfg, Capture())
    assert result.status == "completed"
    train = [e for e in events if e["type"] == "train"][-1]
    assert train["skipped_steps"] == 18  # every step overflowed and was skipped
    assert train["grad_scale"] == 65536.0 / 2**18
    assert any(e.get("kind") == "alert" and e["alert"] == "scale_collapse" for e in events)


def test_refused_resume_writes_no_checkpoint(tiny_config, tmp_path: Path) -> None:
    """A resume refused before training (here: another model) must not save the fresh
    weights as a 'failure' checkpoint nor move `latest` away from the user's checkpoint."""
    run(tiny_config("train.max_steps=2"), NullSink(), run_dir=tmp_path)
    folder = tmp_path / "checkpoints"
    before, latest = sorted(p.name for p in folder.iterdir()), find_latest(tmp_path)
    state = load_checkpoint(latest)
    other = run(tiny_config("model.name=mlp"), NullSink(), run_dir=tmp_path, resume=state)
    assert other.exit_code == 2 and "does not fit this model" in other.reason
    assert sorted(p.name for p in folder.iterdir()) == before
    assert find_latest(tmp_path) == latest


def test_failure_after_training_saves_the_trained_steps(tiny_config, tmp_path: Path) -> None:
    cfg = tiny_config("model.name=tests.engine.models_for_tests:raise_in_eval")
    events: list[dict] = []

    class Capture(NullSink):
        def write(self, record: dict) -> None:
            events.append(record)

    result = run(cfg, Capture(), run_dir=tmp_path)
    assert result.status == "failed" and result.is_bug and result.step == 2  # 2 steps/epoch
    assert load_checkpoint(find_latest(tmp_path))["step"] == 2  # the trained steps are kept
    assert any("(failure)" in str(e.get("message")) for e in events if e.get("type") == "event")


def test_resume_past_the_end_says_there_is_nothing_to_train(tiny_config, tmp_path: Path) -> None:
    run(tiny_config("train.max_steps=4"), NullSink(), run_dir=tmp_path)
    events: list[dict] = []

    class Capture(NullSink):
        def write(self, record: dict) -> None:
            events.append(record)

    state = load_checkpoint(find_latest(tmp_path))
    result = run(tiny_config("train.max_steps=2"), Capture(), run_dir=tmp_path, resume=state)
    assert result.status == "completed" and result.step == 4
    said = [e for e in events if e.get("kind") == "resume_done"]
    assert len(said) == 1 and "at step 4 and this run ends at step 2" in said[0]["message"]


def test_a_disk_that_fills_during_a_save_is_an_event_not_a_failed_run(
    tiny_config, small_disk: Path
) -> None:
    """Not simulated: torch's zip writer on a full filesystem raises RuntimeError ("unexpected
    pos"), which used to end the run "looks like a bug", exit 1."""
    events: list[dict] = []

    class Capture(NullSink):
        def write(self, record: dict) -> None:
            events.append(record)

    cfg = tiny_config("train.max_steps=6", "checkpoint.every_steps=2", "checkpoint.keep=3")
    result = run(cfg, Capture(), run_dir=small_disk)
    assert result.status == "completed" and result.exit_code == 0, result.reason
    saved = [e for e in events if e.get("kind") == "checkpoint"]
    failed = [e for e in events if e.get("kind") == "checkpoint_failed"]
    assert saved and failed, [e.get("message") for e in events if e["type"] == "event"]
    assert "No space left on device" in failed[0]["message"]
    folder = small_disk / "checkpoints"
    first = Path(saved[0]["path"])
    assert first.is_file() and load_checkpoint(first)["step"] == saved[0]["step"]  # intact
    assert not list(folder.glob(".ckpt-*"))  # no temp file left behind


def test_retention_after_resuming_from_an_earlier_checkpoint(tmp_path: Path) -> None:
    """A run reached step 6 (keep 3: ckpt 4, 5, 6); resumed from 4 with keep 1, it saves 5:
    retention used to keep the highest name (6, the abandoned future) and delete 5, the one
    just saved, leaving `latest` on a deleted file."""
    for step in range(1, 7):
        save_checkpoint(tmp_path, {"model": {"w": torch.full((2,), float(step))}, "step": step}, 3)
    folder = tmp_path / "checkpoints"
    steps = [int(p.name[9:17]) for p in sorted(folder.glob("ckpt-*.pt"))]
    assert steps == [4, 5, 6]
    resumed = {"model": {"w": torch.full((2,), 50.0)}, "step": 5}  # the new line's step 5
    save_checkpoint(tmp_path, resumed, keep=1)
    names = sorted(p.name for p in folder.glob("ckpt-*.pt"))
    assert names == ["ckpt-step00000005.pt", "ckpt-step00000006.pt"]  # 4 pruned, 6 untouched
    assert (folder / "latest").read_text().strip() == "ckpt-step00000005.pt"
    latest = find_latest(tmp_path)  # --resume auto and `latest` agree: the current line
    assert latest.name == "ckpt-step00000005.pt"
    assert torch.equal(load_checkpoint(latest)["model"]["w"], torch.full((2,), 50.0))


@pytest.mark.slow
def test_resume_auto_names_a_corrupt_newest_checkpoint(tmp_path: Path) -> None:
    good = save_checkpoint(tmp_path, {"model": {"w": torch.ones(2)}, "step": 1}, keep=3)
    bad = save_checkpoint(tmp_path, {"model": {"w": torch.ones(2)}, "step": 2}, keep=3)
    bad.write_bytes(bad.read_bytes()[:40])  # cut: `latest` names a file that does not load
    skipped: list[str] = []
    assert find_latest(tmp_path, skipped) == good
    assert len(skipped) == 1 and bad.name in skipped[0] and "corrupt" in skipped[0]
    proc = tuitrain("--resume", "auto", "--run-dir", str(tmp_path), "--max-steps", "1")
    said = [line for line in proc.stderr.splitlines() if bad.name in line]
    assert len(said) == 1 and said[0].startswith("tuitrain: --resume auto skipped"), proc.stderr
