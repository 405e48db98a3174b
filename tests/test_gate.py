"""`tuitrain gate`: noise-aware throughput and metric checks, exit codes, the CI summary."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tuitrain.commands.gate import bootstrap_ratio, main, median_draws

ROOT = Path(__file__).resolve().parents[1]


def fake_run(path: Path, rate: float, acc: float | None, *, noise: float = 0.08, seed: int = 0,
             points: int = 30, status: str | None = "completed", header: dict | None = None,
             extra: list[dict] | None = None) -> Path:  # fmt: skip
    """A run's records as the engine writes them: header, train records with samples/s that
    scatter by `noise` around `rate`, one eval at the end (none when `acc` is None), then
    `extra` records and the end record (none when `status` is None)."""
    rng = random.Random(seed)
    path.mkdir(parents=True)
    lines = [header or {"type": "header", "preset": "fashion-mini", "config": {}}]
    for step in range(1, points + 1):
        lines.append({"type": "train", "step": step, "loss": 1.0,
                      "samples_per_s": rate * (1 + rng.gauss(0, noise))})  # fmt: skip
    if acc is not None:
        lines.append({"type": "eval", "step": points, "val_loss": 0.4, "val_acc": acc})
    lines += extra or []
    if status is not None:
        lines.append({"type": "end", "status": status, "reason": "", "step": points})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_two_noisy_runs_of_one_config_pass(tmp_path: Path, capsys) -> None:
    a = fake_run(tmp_path / "a", 1000, 0.85, seed=1)
    b = fake_run(tmp_path / "b", 960, 0.848, seed=2)  # 4% slower, 0.2 point: noise
    assert main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "| median samples/s |" in out and "bootstrap 95% interval" in out
    assert out.count("| pass |") == 3  # throughput, metric, both runs ended cleanly


def test_a_slower_candidate_fails_and_the_summary_is_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    a = fake_run(tmp_path / "a", 1000, 0.85, seed=1)
    b = fake_run(tmp_path / "b", 700, 0.85, seed=2)  # 30% slower
    assert main([str(a), str(b)]) == 1
    assert "tuitrain gate: FAIL" in summary.read_text()
    assert main([str(a), str(b), "--max-slowdown", "50"]) == 0  # within a looser limit
    capsys.readouterr()


def test_a_worse_metric_fails_in_its_units(tmp_path: Path, capsys) -> None:
    a = fake_run(tmp_path / "a", 1000, 0.85, seed=1)
    b = fake_run(tmp_path / "b", 1000, 0.838, seed=1)  # 1.2 points worse
    assert main([str(a), str(b), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    metric = result["checks"][1]
    assert metric["verdict"] == "FAIL" and metric["worse_by"] == pytest.approx(1.2)
    assert main([str(a), str(b), "--max-drop", "2"]) == 0


def test_a_missing_run_exits_2(tmp_path: Path, capsys) -> None:
    a = fake_run(tmp_path / "a", 1000, 0.85)
    assert main([str(a), str(tmp_path / "nowhere")]) == 2
    assert "no run there" in capsys.readouterr().err


@pytest.mark.slow
def test_two_real_runs_of_one_config_are_judged(tmp_path: Path) -> None:
    """Two real runs of one seeded config: the metric and the ending checks pass (the runs
    are the same computation), and the throughput check is made, with an interval. Its
    verdict is not asserted: a busy machine may make either run slower, and then the gate's
    FAIL is right (a fresh clone's suite once saw one run 14x slower)."""
    args = ["--no-ui", "--set", "data.train_samples=1024", "--set", "data.val_samples=256",
            "--set", "data.batch_size=64", "--set", "train.log_every=2", "--epochs", "3",
            "--precision", "fp32"]  # fmt: skip
    for name in ("a", "b"):
        done = subprocess.run(
            [sys.executable, "-m", "tuitrain", *args, "--run-dir", str(tmp_path / name)],
            capture_output=True, text=True, timeout=300, cwd=ROOT,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "tuitrain", "gate", str(tmp_path / "a"), str(tmp_path / "b"),
         "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr
    throughput, metric, ending = json.loads(done.stdout)["checks"]
    assert metric["what"] == "val_acc (max, last evaluation)" and metric["verdict"] == "pass"
    assert metric["baseline"] == metric["candidate"]  # seeded: the same accuracy
    assert ending["verdict"] == "pass"
    lo, hi = throughput["interval"]
    assert 0 < lo <= throughput["ratio"] <= hi
    assert done.returncode == (0 if throughput["verdict"] == "pass" else 1)


# Each run the gate cannot judge, as a baseline or a candidate: (name, fake_run's arguments,
# the check that fails, words its row says). Every one fails (exit 1), never passes.
def nan_loss_at_5(path: Path) -> Path:
    run = fake_run(path, 1000, 0.85, status="failed")
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[5] = json.dumps({"type": "train", "step": 5, "loss": float("nan"),
                           "samples_per_s": 1000.0})  # fmt: skip
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return run


UNJUDGEABLE = {
    "nan loss at step 5": (nan_loss_at_5, "run ended cleanly", "NaN or inf at step 5"),
    "nonfinite-loss alert": (
        lambda p: fake_run(
            p,
            1000,
            0.85,
            extra=[
                {
                    "type": "event",
                    "level": "warning",
                    "kind": "alert",
                    "alert": "nonfinite_loss",
                    "message": "alert nonfinite_loss",
                    "step": 7,
                }
            ],
        ),  # fmt: skip
        "run ended cleanly",
        "NaN or inf at step 7",
    ),
    "ended failed": (
        lambda p: fake_run(p, 1000, 0.85, status="failed"),
        "run ended cleanly",
        "ended failed",
    ),  # fmt: skip
    "no end record": (
        lambda p: fake_run(p, 1000, 0.85, status=None),
        "run ended cleanly",
        "no end record",
    ),  # fmt: skip
    "no log point after warm-up": (
        lambda p: fake_run(p, 1000, 0.85, points=3),
        "median samples/s",
        "0 log point(s)",
    ),  # fmt: skip
    "one slow log point": (
        lambda p: fake_run(p, 10, 0.85, points=4),
        "median samples/s",
        "1 log point(s)",
    ),  # fmt: skip
    "no evaluation": (
        lambda p: fake_run(p, 1000, None),
        "val_acc",
        "has no evaluation of val_acc",
    ),  # fmt: skip
    "nan last evaluation": (
        lambda p: fake_run(
            p,
            1000,
            0.86,
            extra=[{"type": "eval", "step": 31, "val_loss": 0.4, "val_acc": float("nan")}],
        ),
        "val_acc",
        "last evaluation of val_acc (step 31) is not finite",
    ),  # fmt: skip
    "null last evaluation": (
        lambda p: fake_run(
            p, 1000, 0.86, extra=[{"type": "eval", "step": 31, "val_loss": 0.4, "val_acc": None}]
        ),
        "val_acc",
        "is not finite",
    ),  # fmt: skip
}


@pytest.mark.parametrize("side", ["candidate", "baseline"])
@pytest.mark.parametrize("case", list(UNJUDGEABLE))
def test_what_cannot_be_judged_fails_and_the_table_says_why(
    tmp_path: Path, capsys, case: str, side: str
) -> None:
    make, check, words = UNJUDGEABLE[case]
    good = fake_run(tmp_path / "good", 1000, 0.85, seed=1)
    bad = make(tmp_path / "bad")
    pair = [good, bad] if side == "candidate" else [bad, good]
    assert main([*map(str, pair), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["verdict"] == "FAIL"
    row = next(r for r in result["checks"] if r["what"].startswith(check))
    assert row["verdict"] == "FAIL" and words in row["why"] and f"the {side}" in row["why"]
    assert main(list(map(str, pair))) == 1  # the markdown table names it too
    out = capsys.readouterr().out
    assert "tuitrain gate: FAIL" in out and words in out


def test_every_check_says_pass_or_fail_never_na(tmp_path: Path, capsys) -> None:
    """The healthy pair: three rows, each pass; no row is skipped as n/a."""
    a = fake_run(tmp_path / "a", 1000, 0.85, seed=1)
    b = fake_run(tmp_path / "b", 1000, 0.85, seed=2)
    assert main([str(a), str(b), "--json"]) == 0
    checks = json.loads(capsys.readouterr().out)["checks"]
    assert [r["verdict"] for r in checks] == ["pass", "pass", "pass"]
    assert [r["what"] for r in checks][2] == "run ended cleanly"


def test_a_stopped_run_is_judged_on_its_figures(tmp_path: Path, capsys) -> None:
    a = fake_run(tmp_path / "a", 1000, 0.85, seed=1)
    b = fake_run(tmp_path / "b", 1000, 0.85, seed=2, status="stopped")
    assert main([str(a), str(b)]) == 0
    capsys.readouterr()


def test_runs_of_different_tasks_are_unusable_input(tmp_path: Path, capsys) -> None:
    lm = {
        "type": "header",
        "preset": "charlm-mini",
        "config": {},
        "task": {"name": "charlm", "primary": "val_loss", "mode": "min", "metrics": []},
    }
    other = {**lm, "task": {**lm["task"], "name": "regression"}}
    a = fake_run(tmp_path / "a", 1000, 0.85)
    b = fake_run(tmp_path / "b", 1000, 0.85, header=lm)
    c = fake_run(tmp_path / "c", 1000, 0.85, header=other)
    for pair in ((a, b), (b, a), (b, c)):
        assert main([str(pair[0]), str(pair[1])]) == 2
        err = capsys.readouterr().err
        assert "different tasks" in err and len(err.strip().splitlines()) == 1
    assert main([str(b), str(b)]) == 0  # one task: judged
    capsys.readouterr()


def test_a_reason_from_the_run_stays_in_its_table_cell(tmp_path: Path, capsys) -> None:
    a = fake_run(tmp_path / "a", 1000, 0.85, seed=1)
    b = fake_run(tmp_path / "b", 1000, 0.85, seed=2, status=None, extra=[
        {"type": "end", "status": "failed", "reason": "a | b\n| c |", "step": 30}])  # fmt: skip
    assert main([str(a), str(b)]) == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if "ended failed" in line)
    assert row.count(" | ") == 5  # six cells: the reason's pipes are escaped, no newline


@pytest.mark.parametrize("n", [1, 2, 7, 8])
def test_the_medians_drawn_have_the_law_of_resampled_medians(n: int) -> None:
    """median_draws (one sort) against resampling itself, 20,000 seeded draws each: the same
    law of the bootstrap median, to the resolution of the draws."""
    values = [float(v) for v in random.Random(n).sample(range(1000), n)]
    rng = random.Random(1)
    draws = median_draws(values, random.Random(2), 20_000)
    direct = []
    for _ in range(20_000):
        pick = sorted(rng.choices(values, k=n))
        direct.append((pick[(n - 1) // 2] + pick[n // 2]) / 2)
    # the same probability of each possible median (a seeded comparison: no flakiness)
    got, want = Counter(draws), Counter(direct)
    assert max(abs(got[v] - want[v]) for v in {*got, *want}) / 20_000 < 0.02
    assert set(draws) <= {(a + b) / 2 for a in values for b in values}


def test_the_interval_is_seeded_and_brackets_the_ratio() -> None:
    rng = random.Random(3)
    base = [1000 * (1 + rng.gauss(0, 0.05)) for _ in range(200)]
    cand = [800 * (1 + rng.gauss(0, 0.05)) for _ in range(300)]
    low, high = bootstrap_ratio(base, cand)
    assert (low, high) == bootstrap_ratio(base, cand)
    assert 0.75 < low < 0.8 < high < 0.85


@pytest.mark.parametrize(
    ("worse", "unit", "words"),
    [(0.4, " pt", "worse by 0.4 pt"), (-0.4, " pt", "better by 0.4 pt"), (0.0, "", "no change"),
     (-0.0123, "", "better by 0.0123")],
)  # fmt: skip
def test_change_words_never_carry_a_sign(worse: float, unit: str, words: str) -> None:
    from tuitrain.commands.gate import change_words

    assert change_words(worse, unit) == words


@pytest.mark.parametrize("mode", ["max", "min"])
@pytest.mark.parametrize("better", [True, False])
def test_the_table_says_better_or_worse_for_both_goals(
    tmp_path: Path, capsys, mode: str, better: bool
) -> None:
    """A max metric (accuracy, in points beside its %) and a min metric (a loss): the
    candidate's change reads "better by" or "worse by", never "worse by -0.4"."""
    header = None
    if mode == "min":
        header = {
            "type": "header", "preset": "p", "config": {},
            "task": {"name": "charlm", "primary": "val_acc", "mode": "min", "metrics": []},
        }  # fmt: skip
    up = 0.854 if better == (mode == "max") else 0.846
    a = fake_run(tmp_path / "a", 1000, 0.85, seed=1, header=header)
    b = fake_run(tmp_path / "b", 1000, up, seed=1, header=header)
    assert main([str(a), str(b), "--max-drop", "5"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| val_acc"))
    word = "better" if better else "worse"
    if mode == "max":  # a share: points, and the values with their unit
        assert f"| {word} by 0.4 pt |" in row and "| 85.00% | " in row
        assert "worse by at most 5 pt" in row
    else:
        assert f"| {word} by 0.004 |" in row and "| 0.85 | " in row
    assert "-" not in row.split("|")[4]  # no signed change


def test_one_task_judged_by_different_primary_metrics_is_refused(tmp_path: Path, capsys) -> None:
    def header(primary: str) -> dict:
        task = {"name": "charlm", "primary": primary, "mode": "min", "metrics": []}
        return {"type": "header", "preset": "p", "config": {}, "task": task}

    a = fake_run(tmp_path / "a", 1000, 0.85, header=header("val_loss"))
    b = fake_run(tmp_path / "b", 1000, 0.85, header=header("val_bpc"))
    assert main([str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "val_loss" in err and "val_bpc" in err
    assert "different primary metrics" in err
