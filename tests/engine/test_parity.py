"""The fp32-vs-mixed parity check: identical starts, a real PASS, a real FAIL, ERROR, cancel.

Sizing of the PASS (measured on this 2-core AVX512-BF16 CPU, torch 2.14, fashion-mini 6,000 /
1,000 images, bf16 vs fp32, one epoch; results are bit-identical from run to run):

* at the preset's lr (3e-3) the gap over seeds 0-5 was +1.3, -0.5, +1.2, +0.3, -0.5, +0.6
  points: three of six would FAIL. The two runs disagree on ~20 of the 1,000 images, so the
  gap's spread (~sqrt(20) images = 0.45 point) is as large as the threshold;
* at lr 3e-4 the runs disagree on 1-13 images (median 8); over seeds 0-9 the gaps were
  -0.1, -0.1, +0.2, +0.1, -0.1, 0.0, -0.3, +0.5, -0.1, -0.1: ten PASS.

So the test trains at lr 3e-4 with seed 4, where fp32 and bf16 disagree on 3 images only: the
gap is at most 0.3 point whichever way those images go, and the run is deterministic.
On a 2-core AVX2 CPU (bf16 emulated, other rounding) the same setup passes too (2026-12-01).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tuitrain.core.config import Config, load_preset
from tuitrain.core.control import Control
from tuitrain.core.errors import EXIT_FAILED, EXIT_OK, EXIT_PARITY_FAIL, UserError
from tuitrain.engine import precision as precision_mod
from tuitrain.engine.parity import parity, parity_configs, resolve_mixed
from tuitrain.engine.runner import run
from tuitrain.engine.setup import DistInfo, build_parts
from tuitrain.metrics.parity_report import (
    EARLY_WARN_REL_DIFF,
    EpochRow,
    ParityResult,
    ParityStores,
    count_test_images,
    max_rel_diff,
    parity_result_of,
)
from tuitrain.metrics.sinks import FanOutSink, Sink

# the sizing measured on both kinds of CPU (docstring): all 6k images of fashion-mini
PASS_SETUP = ["optim.lr=3e-4", "train.seed=4"]
FRAGILE = 'model.name="tests.engine.parity_fragile:make_model"'
OVERFLOW = 'model.name="tests.engine.parity_fragile:make_overflow_model"'
# 4 steps at a high lr: fp32 reaches ~40%, fp16 stays at chance (fp16 on a CPU is slow)
FRAGILE_SETUP = [FRAGILE, "data.train_samples=1024", "data.val_samples=500"]
FRAGILE_SETUP += ["optim.warmup_steps=0", "optim.lr=1e-2"]


class ListSink(Sink):
    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, record: dict) -> None:
        self.records.append(dict(record))

    def parity_events(self) -> list[dict]:
        return [r for r in self.records if r.get("kind") == "parity"]


def mini(*overrides: str) -> Config:
    return load_preset("fashion-mini", list(overrides))


# --------------------------------------------------------------------------- same start


def test_both_runs_start_from_the_same_weights_and_batches() -> None:
    configs = parity_configs(mini("data.train_samples=1024"), epochs=2, mixed="bf16")
    fp32, mixed = (build_parts(configs[name], DistInfo()) for name in ("fp32", "mixed"))
    assert fp32.precision.name == "fp32" and mixed.precision.name == "bf16"
    a, b = fp32.model.state_dict(), mixed.model.state_dict()
    assert list(a) == list(b)
    assert all(torch.equal(a[k], b[k]) for k in a)
    for epoch in (0, 1):
        assert torch.equal(fp32.data.train.indices(epoch), mixed.data.train.indices(epoch))
    assert not torch.equal(fp32.data.train.indices(0), fp32.data.train.indices(1))


def test_only_the_precision_differs_between_the_two_configs() -> None:
    cfg = mini("train.max_steps=10", "train.profile_steps=3")
    configs = parity_configs(cfg, epochs=2, mixed="fp16")
    fp32, mixed = configs["fp32"], configs["mixed"]
    assert fp32.train.precision == "fp32" and not fp32.train.tf32  # the reference is real fp32
    assert mixed.train.precision == "fp16" and mixed.train.tf32 == cfg.train.tf32
    normalise = replace(mixed.train, precision="fp32", tf32=False)
    assert replace(mixed, train=normalise) == fp32
    assert fp32.train.epochs == 2 and fp32.train.eval_every_epoch
    assert fp32.train.profile_steps == 0 and not fp32.checkpoint.at_epoch_end
    assert not fp32.checkpoint.on_stop and fp32.checkpoint.every_steps == 0
    # a step cap becomes a shorter epoch, so every epoch still ends with an evaluation
    assert fp32.train.max_steps == 0 and fp32.data.train_samples == 5 * 256


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_run_is_bit_identical_when_repeated(tiny_config, precision: str) -> None:
    small = ["data.batch_size=64"] if precision != "fp32" else []  # emulated autocast is slow
    cfg = tiny_config(
        f"train.precision={precision}", "train.max_steps=4", "train.log_every=1", *small
    )
    losses, digests = [], []
    for _ in range(2):
        sink = ListSink()
        assert run(cfg, sink).status == "completed"
        losses.append([r["loss"] for r in sink.records if r["type"] == "train"])
        digests.append(sink.records[-1].get("weights_digest"))
    assert len(losses[0]) == 4 and losses[0] == losses[1]
    assert digests[0] == digests[1]  # bit-identical final weights (None before the digest)


# --------------------------------------------------------------------------- PASS


@pytest.mark.slow
def test_bf16_passes_against_fp32_on_the_mini_subset(tmp_path: Path) -> None:
    stores, records = ParityStores(), ListSink()
    result = parity(
        mini(*PASS_SETUP, "train.log_every=5"), epochs=1, mixed="bf16",
        sink=FanOutSink(stores.sink(), records), run_dir=tmp_path, early_steps=5,
    )  # fmt: skip
    assert result.status == "completed", result.message
    assert result.verdict == "PASS" and result.exit_code == EXIT_OK
    assert result.test_set_size == 1000 and result.one_image_points == pytest.approx(0.1)
    assert abs(result.gap_points) <= 0.3  # 3 images disagree at this seed
    [row] = result.per_epoch
    assert row.epoch == 1 and 0.6 < row.fp32_acc < 0.8 and 0.6 < row.mixed_acc < 0.8
    assert row.gap_points == pytest.approx(100 * (row.fp32_acc - row.mixed_acc))
    assert result.speedup and result.speedup > 0
    assert result.early_max_rel_loss_diff < EARLY_WARN_REL_DIFF
    early = result.early_losses
    assert len(early["fp32"]) == len(early["mixed"]) == 5
    assert early["fp32"][0] == pytest.approx(early["mixed"][0], rel=1e-2)
    # the early check replays the full runs' first steps: logged every 5 here
    for name in ("fp32", "mixed"):
        first_logged = result.train_loss[name][0]
        assert first_logged[0] == 5
        assert first_logged[1] == pytest.approx(sum(early[name]) / 5, rel=1e-5)
    saved = json.loads((tmp_path / "parity.json").read_text())
    assert saved == json.loads(json.dumps(result.to_json()))
    assert saved["verdict"] == "PASS" and saved["per_epoch"][0]["epoch"] == 1
    # the noise: both runs' last evaluations paired on the same 1,000 images
    paired, discordant = saved["paired"], saved["discordant"]
    assert sum(paired.values()) == 1000
    assert discordant == {k: paired[k] for k in ("fp32_only", "mixed_only")}
    assert 0 < discordant["fp32_only"] + discordant["mixed_only"] <= 20  # a few images
    # the pairs agree with the accuracies: fp32 right = both + fp32_only, out of 1,000
    assert paired["both"] + paired["fp32_only"] == round(1000 * row.fp32_acc)
    assert paired["both"] + paired["mixed_only"] == round(1000 * row.mixed_acc)
    assert 0 < saved["p_value"] <= 1
    low, high = saved["gap_ci95_points"]
    assert low <= saved["gap_points"] <= high and low < high
    check_stores(stores, result)
    phases = [e["phase"] for e in records.parity_events()]
    assert phases == ["start", "early", "run", "run", "done"]


def check_stores(stores: ParityStores, result: ParityResult) -> None:
    """What a UI needs: each run's own header, loss curve and evals; the verdict."""
    fp32, mixed = stores.fp32.snapshot(), stores.mixed.snapshot()
    assert fp32.header["precision"] == "fp32" and mixed.header["precision"] == "bf16"
    assert fp32.header["total_steps"] == mixed.header["total_steps"] == 23
    assert fp32.get("loss").xs == mixed.get("loss").xs  # same log points: overlay them
    assert list(fp32.get("loss").ys) == [loss for _, loss in result.train_loss["fp32"]]
    assert [e["val_acc"] for e in mixed.evals] == [result.per_epoch[0].mixed_acc]
    assert fp32.end["status"] == "completed" and fp32.end["run"] == "fp32"
    for snap in (fp32, mixed):
        assert all(not e.get("early") for e in snap.events)  # early-check records stay out
        phases = [e["phase"] for e in snap.events if e.get("kind") == "parity"]
        assert phases == ["start", "early", "run", "run", "done"]  # in both stores
        done = parity_result_of(snap)
        assert done is not None and done["verdict"] == "PASS"


# --------------------------------------------------------------------------- FAIL, ERROR


@pytest.mark.slow
def test_a_fragile_layer_really_fails_under_fp16(tmp_path: Path) -> None:
    records = ListSink()
    result = parity(mini(*FRAGILE_SETUP), epochs=1, mixed="fp16", sink=records, run_dir=tmp_path,
                    early_steps=4)  # fmt: skip
    assert result.status == "completed" and result.message == ""  # both runs trained
    assert result.verdict == "FAIL" and result.exit_code == EXIT_PARITY_FAIL
    assert result.test_set_size == 500 and result.one_image_points == pytest.approx(0.2)
    fp32_acc, fp16_acc = result.per_epoch[0].fp32_acc, result.per_epoch[0].mixed_acc
    assert fp32_acc > 0.3 and fp16_acc < 0.15 and result.gap_points > 20
    # fp16 learned nothing: every weight of the pooling underflowed, the loss stays at ln(10)
    fp16_losses = [loss for _, loss in result.train_loss["mixed"]]
    assert all(abs(loss - math.log(10)) < 0.02 for loss in fp16_losses)
    assert all(math.isfinite(loss) for loss in fp16_losses)
    early = next(e for e in records.parity_events() if e["phase"] == "early")
    assert early["level"] == "warning" and early["early_max_rel_loss_diff"] > EARLY_WARN_REL_DIFF
    done = records.parity_events()[-1]
    assert done["verdict"] == "FAIL" and done["level"] == "warning"
    saved = json.loads((tmp_path / "parity.json").read_text())
    assert saved["verdict"] == "FAIL"
    # far outside noise: fp32 got well over 100 more images right, the interval is all > 0.5
    assert saved["discordant"]["fp32_only"] - saved["discordant"]["mixed_only"] > 100
    assert saved["p_value"] < 1e-6 and saved["noise_note"] is None
    low, high = saved["gap_ci95_points"]
    assert 0.5 < low <= saved["gap_points"] <= high


def test_a_run_that_fails_is_an_error_not_a_verdict(tmp_path: Path) -> None:
    cfg = mini(OVERFLOW, "data.train_samples=1024", "data.val_samples=256")
    records = ListSink()
    result = parity(cfg, epochs=1, mixed="fp16", sink=records, run_dir=tmp_path, early_steps=2)
    assert result.status == "failed" and result.verdict == "ERROR"
    assert result.exit_code == EXIT_FAILED
    assert "fp16 run failed in the early check" in result.message and "nan" in result.message
    assert result.per_epoch == []  # stopped before the full runs
    assert result.paired is None and result.to_json()["gap_ci95_points"] is None
    runs = [e.get("run") for e in records.records if e["type"] == "header"]
    assert runs == ["fp32", "mixed"]  # the early check: fp32 went through, fp16 did not
    assert records.parity_events()[-1]["level"] == "error"
    assert json.loads((tmp_path / "parity.json").read_text())["verdict"] == "ERROR"


# --------------------------------------------------------------------------- cancel, input


class StopAtFirstTrain(ListSink):
    """Cancels (like Escape in the UI) at the first train record of the early check or of
    the full fp32 run."""

    def __init__(self, control: Control, early: bool) -> None:
        super().__init__()
        self.control, self.early = control, early

    def write(self, record: dict) -> None:
        super().write(record)
        if record["type"] == "train" and bool(record.get("early")) == self.early:
            self.control.request_stop("cancelled by the user")


@pytest.mark.parametrize("early", [True, False], ids=["in-early-check", "in-fp32-run"])
def test_cancel_stops_the_check_without_a_verdict(tmp_path: Path, early: bool) -> None:
    control = Control()
    sink = StopAtFirstTrain(control, early)
    cfg = mini("data.train_samples=2048", "train.log_every=2")
    result = parity(
        cfg, epochs=2, mixed="bf16", sink=sink, control=control, run_dir=tmp_path, early_steps=3
    )
    assert result.status == "cancelled" and result.verdict is None
    assert result.message == "cancelled by the user" and result.exit_code == EXIT_FAILED
    headers = [(r["run"], bool(r.get("early"))) for r in sink.records if r["type"] == "header"]
    full = [("fp32", True), ("mixed", True), ("fp32", False)]
    assert headers == (full[:1] if early else full)
    assert [r["status"] for r in sink.records if r["type"] == "end"][-1] == "stopped"
    assert sink.parity_events()[-1]["phase"] == "cancelled"
    saved = json.loads((tmp_path / "parity.json").read_text())
    assert saved["status"] == "cancelled" and saved["verdict"] is None


def test_the_mixed_precision_is_resolved_or_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_mixed(load_preset("fashion-fp16")) == "fp16"  # the preset's own mode
    assert resolve_mixed(load_preset("fashion-bf16"), "fp16") == "fp16"
    if precision_mod.bf16_supported(torch.device("cpu")):
        assert resolve_mixed(load_preset("fashion-fp32")) == "bf16"  # auto
    with pytest.raises(UserError, match="choose bf16 or fp16"):
        resolve_mixed(mini(), "fp8")
    monkeypatch.setattr(precision_mod, "bf16_supported", lambda device: False)
    with pytest.raises(UserError, match="no native mixed precision .* --mixed bf16"):
        resolve_mixed(load_preset("fashion-fp32"))
    with pytest.raises(UserError, match="at least 1 epoch"):
        parity(mini(), epochs=0, mixed="bf16")


# --------------------------------------------------------------------------- pieces


def test_verdict_gap_and_resolution() -> None:
    def result(fp32: float, mixed: float, n: int = 1000) -> ParityResult:
        r = ParityResult(preset="p", mixed="bf16", device="cpu", epochs=1, seed=0)
        r.per_epoch = [EpochRow(1, fp32, mixed, 0.5, 0.5)]
        r.test_set_size, r.fp32_samples_per_s, r.mixed_samples_per_s = n, 100.0, 150.0
        return r

    assert result(0.781, 0.776).gap_points == 0.5 and result(0.781, 0.776).verdict == "PASS"
    assert result(0.781, 0.775).verdict == "FAIL" and result(0.781, 0.775).exit_code == 3
    assert result(0.775, 0.781).gap_points == -0.6 and result(0.775, 0.781).verdict == "FAIL"
    r = result(0.9, 0.9, n=10_000)
    assert r.speedup == 1.5 and r.one_image_points == 0.01 and r.exit_code == 0
    assert "10,000 test images, one image = 0.01 point" in r.summary()
    fields = r.to_json()
    for key in ["fp32_val_acc", "mixed_val_acc", "gap_points", "verdict", "speedup",
                "per_epoch", "test_set_size", "one_image_points", "epochs", "mixed",
                "fp32_samples_per_s", "mixed_samples_per_s", "early_max_rel_loss_diff",
                "early_steps", "status", "train_loss"]:  # fmt: skip
        assert key in fields
    r.status = "cancelled"
    assert r.verdict is None and r.to_json()["verdict"] is None


def test_helpers() -> None:
    assert max_rel_diff([2.0, 1.0], [2.2, 1.0, 5.0]) == pytest.approx(0.1)
    assert max_rel_diff([], [1.0]) is None
    assert count_test_images({"data": "Fashion-MNIST (6,000 train / 1,000 val)"}) == 1000
    assert count_test_images({"val_samples": 512, "data": "x (1 train / 2 val)"}) == 512
    assert count_test_images({"data": "something else"}) is None
