"""Several runs in one process: a k-fold loop, a second `init` after a `with` block, two
inits in the same second, HF's second `train()`: each run a folder of its own, directly and
under `tuitrain run` (the first run in its run dir, later ones beside it, each with an
honest end record); and a script that ends by SystemExit without `finish`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tuitrain.client import core as client
from tuitrain.rundir import manifest as rundirs

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
KFOLD = str(SCRIPTS / "kfold.py")


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]


def kinds(run_dir: Path) -> list[str]:
    return [r["type"] for r in records(run_dir)]


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's own folder as the working dir (runs/ lands there), no tuitrain run around."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TUITRAIN_RUN_DIR", raising=False)
    return tmp_path


def test_a_kfold_loop_writes_one_run_dir_a_fold(in_tmp: Path) -> None:
    for fold in range(3):
        run = client.init(config={"fold": fold}, name="kfold")
        for step in range(4):
            run.log({"loss": 1.0 / (step + 1 + fold)})
        run.finish()
    made = sorted((in_tmp / "runs").iterdir())
    assert len(made) == 3  # in one second or not: three folders
    for run_dir in made:
        assert kinds(run_dir)[0] == "header" and kinds(run_dir).count("header") == 1
        assert kinds(run_dir)[-1] == "end" and kinds(run_dir).count("end") == 1
        assert [r["step"] for r in records(run_dir) if r["type"] == "train"] == [0, 1, 2, 3]
    folds = sorted(records(d)[0]["config"]["script"]["fold"] for d in made)
    assert folds == [0, 1, 2]


def test_a_second_init_after_a_with_block_is_a_run_of_its_own(in_tmp: Path) -> None:
    with client.init(name="twice") as first:
        first.log({"loss": 1.0})
    second = client.init(name="twice")
    second.log({"loss": 2.0})
    second.finish()
    assert first.dir != second.dir
    for run in (first, second):
        assert kinds(run.dir) == ["header", "train", "end"]
        assert records(run.dir)[-1]["status"] == "completed"


def test_two_inits_in_the_same_second_get_two_folders(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    same = Path("runs") / "same-20260101-000000"  # the clock stands still
    monkeypatch.setattr(rundirs, "default_name", lambda name: same)
    a, b = client.Run(name="same"), client.Run(name="same")  # both open at once
    c = client.Run(name="same")
    for run in (a, b, c):
        run.finish()
    assert [run.dir.name for run in (a, b, c)] == [
        "same-20260101-000000",
        "same-20260101-000000-2",
        "same-20260101-000000-3",
    ]
    assert all(kinds(run.dir) == ["header", "end"] for run in (a, b, c))


def test_a_run_dir_this_process_finished_a_run_in_is_not_reused(in_tmp: Path) -> None:
    first = client.Run(in_tmp / "exp")
    first.finish()
    second = client.Run(in_tmp / "exp")  # a loop passing the same run_dir
    second.finish()
    assert second.dir == in_tmp / "exp-2"
    moved = [r for r in records(second.dir) if r["type"] == "event"]
    assert "holds an earlier run of this process" in moved[0]["message"]
    assert kinds(first.dir) == ["header", "end"]  # the first run's file untouched


def test_under_tuitrain_run_later_runs_go_beside_the_first_and_are_listed(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forced = in_tmp / "runs" / "train-1"
    forced.mkdir(parents=True)
    rundirs.start_manifest(forced)  # what tuitrain run does before starting the script
    monkeypatch.setenv("TUITRAIN_RUN_DIR", str(forced))
    made = []
    for fold in range(3):
        run = client.init(config={"fold": fold})
        run.log({"loss": float(fold)})
        run.finish()
        made.append((run.dir, run.number))
    assert made == [(forced, 1), (in_tmp / "runs" / "train-1-2", 2),
                    (in_tmp / "runs" / "train-1-3", 3)]  # fmt: skip
    assert rundirs.read_manifest(forced) == [made[1][0], made[2][0]]
    assert all(kinds(d) == ["header", "train", "end"] or kinds(d)[0] == "header" for d, _ in made)
    said = [r["message"] for r in records(made[1][0]) if r["type"] == "event"]
    assert any("run 2 of this tuitrain run" in m for m in said)


def test_the_manifest_reader_keeps_to_folders_beside_the_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    lines = [
        {"run": 1, "dir": "r"},
        {"run": 2, "dir": "r-2"},
        {"run": 3, "dir": "../escape"},
        {"run": 4, "dir": ".."},
        {"run": 5, "dir": 7},
        "not json",
    ]
    text = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines)
    (run_dir / rundirs.MANIFEST_NAME).write_text(text + '\n{"run": 6, "dir": "r-3"')
    assert rundirs.read_manifest(run_dir) == [tmp_path / "r-2"]  # the half line waits


def test_hf_each_train_is_a_run_of_its_own_evaluate_after_it_lands_in_it(
    tmp_path: Path,
) -> None:
    transformers = pytest.importorskip("transformers")
    from tuitrain.hf import TuitrainCallback

    class Regressor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def forward(self, x, labels=None):
            pred = self.net(x).squeeze(-1)
            return {"loss": torch.nn.functional.mse_loss(pred, labels), "logits": pred}

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    rows = [{"x": a, "labels": b} for a, b in zip(x, x @ torch.linspace(-1, 1, 8), strict=True)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf-out"), max_steps=6, per_device_train_batch_size=16,
        logging_steps=3, report_to="none", use_cpu=True, save_strategy="no",
        disable_tqdm=True, learning_rate=0.05,
    )  # fmt: skip
    callback = TuitrainCallback(run_dir=str(tmp_path / "hf"))
    trainer = transformers.Trainer(
        model=Regressor(), args=args, train_dataset=rows, eval_dataset=rows[:32],
        callbacks=[callback],
    )  # fmt: skip
    trainer.train()
    trainer.evaluate()
    first = callback.run
    trainer.train()  # steps start at 0 again: a run of its own
    trainer.evaluate()
    assert callback.run is not None
    callback.run.finish()  # what the exit hook does at interpreter exit
    assert first is not None and first.finished and callback.runs == [first, callback.run]
    assert [r.dir for r in callback.runs] == [tmp_path / "hf", tmp_path / "hf-2"]
    for run in callback.runs:
        recs = records(run.dir)
        assert [r["type"] for r in recs].count("header") == 1 and recs[-1]["type"] == "end"
        assert [r["step"] for r in recs if r["type"] == "train" and "loss" in r] == [3, 6]
        assert [r["step"] for r in recs if r["type"] == "eval"] == [6]  # its evaluate()
        assert recs[-1]["status"] == "completed" and "dropped_rows" not in recs[-1]
        assert recs[-1]["summary"]["train_loss"] > 0


# ---------------------------------------------------------------- in processes of their own
def env() -> dict[str, str]:
    out = {**os.environ, "PYTHONPATH": str(ROOT)}
    out.pop("TUITRAIN_RUN_DIR", None)
    return out


def tuitrain_run(run_dir: Path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuitrain", "run", "--run-dir", str(run_dir), "--no-ui", "--",
         *command],
        capture_output=True, text=True, timeout=180, env=env(), cwd=run_dir.parent,
    )  # fmt: skip


def ends(run_dir: Path) -> list[dict]:
    return [r for r in records(run_dir) if r["type"] == "end"]


@pytest.mark.slow
def test_a_kfold_loop_under_tuitrain_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "kf"
    done = tuitrain_run(run_dir, sys.executable, KFOLD, "--crash", "2")
    assert done.returncode == 1, done.stderr
    dirs = [run_dir, tmp_path / "kf-2", tmp_path / "kf-3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kf", "kf-2", "kf-3"]
    for fold, d in enumerate(dirs):
        assert records(d)[0]["type"] == "header"
        assert records(d)[0]["config"]["script"]["fold"] == fold
    # the folds the script finished keep their own end; the crash is the last one's
    assert [len(ends(d)) for d in dirs] == [1, 1, 1]
    assert [ends(d)[0]["status"] for d in dirs] == ["completed", "completed", "failed"]
    assert ends(dirs[2])[0]["reason"] == "RuntimeError: fold 2 diverged"
    assert f"run 2 started: {dirs[1].name}" in done.stdout.replace(str(tmp_path) + "/", "")
    assert "run 3 started" in done.stdout
    assert re.search(r"run 3: \d\d:\d\d:\d\d end   failed", done.stdout)
    assert "the script wrote 3 runs:" in done.stderr
    for d, status in zip(dirs, ["completed", "completed", "failed"], strict=True):
        assert any(str(d) in line and status in line for line in done.stderr.splitlines())
    listed = subprocess.run(
        [sys.executable, "-m", "tuitrain", "runs", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=60, env=env(),
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row["status"] for row in json.loads(listed.stdout)}
    assert rows == {"kf": "completed", "kf-2": "completed", "kf-3": "failed"}


@pytest.mark.slow
def test_a_run_left_open_by_a_hard_exit_gets_the_failure_earlier_ones_keep_theirs(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "hard"
    done = tuitrain_run(run_dir, sys.executable, KFOLD, "--hard", "1")
    assert done.returncode == 3, done.stderr
    first, second = ends(run_dir), ends(tmp_path / "hard-2")
    assert [e["status"] for e in first] == ["completed"]  # its own, untouched
    assert [e["status"] for e in second] == ["failed"] and second[0]["exit_code"] == 3
    assert second[0]["reason"].startswith("the script exited with code 3")
    assert not (tmp_path / "hard-3").exists()


@pytest.mark.slow
def test_a_run_whose_writer_died_while_the_script_went_on_is_failed(tmp_path: Path) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import subprocess, sys\nimport tuitrain\n"
        f"subprocess.run([sys.executable, {KFOLD!r}, '--folds', '1', '--hard', '0'])\n"
        "run = tuitrain.init()\nrun.log({'loss': 1.0})\nrun.finish()\n"
    )
    done = tuitrain_run(tmp_path / "drv", sys.executable, str(driver))
    assert done.returncode == 0, done.stderr
    (died,) = ends(tmp_path / "drv")  # the worker's run: os._exit(3), no end of its own
    assert died["status"] == "failed" and "its writer ended without an end record" in died["reason"]
    driver_ends = ends(tmp_path / "drv-2")  # the driver's: its finish(), then the exit code
    assert [e["status"] for e in driver_ends] == ["completed", "completed"]
    assert driver_ends[-1]["exit_code"] == 0


SYSTEM_EXITS = {
    "raise_message": ('raise SystemExit("bad data")', 1, "failed", "code 1: bad data"),
    "sys_exit_2": ("sys.exit(2)", 2, "failed", "code 2"),
    "exit_builtin": ("exit(4)", 4, "failed", "code 4"),
    "raise_zero": ("raise SystemExit(0)", 0, "completed", "finished"),
}


def exiting_script(tmp_path: Path, last_line: str) -> Path:
    script = tmp_path / "ends.py"
    script.write_text(
        "import sys\nimport tuitrain\n"
        "run = tuitrain.init()\nrun.log({'loss': 1.0})\n" + last_line + "\n"
    )
    return script


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(SYSTEM_EXITS))
def test_a_script_ending_by_system_exit_without_finish(tmp_path: Path, case: str) -> None:
    line, code, status, reason = SYSTEM_EXITS[case]
    script = exiting_script(tmp_path, line)
    direct = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120, env=env(), cwd=tmp_path)  # fmt: skip
    assert direct.returncode == code, direct.stderr
    (made,) = (tmp_path / "runs").iterdir()
    end = ends(made)
    assert len(end) == 1 and end[0]["status"] == status and reason in end[0]["reason"]
    assert end[0]["exit_code"] == code
    hosted = tuitrain_run(tmp_path / "hosted", sys.executable, str(script))
    assert hosted.returncode == code, hosted.stderr
    end = ends(tmp_path / "hosted")
    assert end[-1]["status"] == status and reason in end[-1]["reason"]
    assert end[-1]["exit_code"] == code and len(end) == 1  # the client's was right


@pytest.mark.slow
def test_a_system_exit_the_client_cannot_read_is_settled_by_tuitrain_run(tmp_path: Path) -> None:
    script = exiting_script(tmp_path, "def main():\n    raise SystemExit(0)\nmain()")
    direct = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120, env=env(), cwd=tmp_path)  # fmt: skip
    assert direct.returncode == 0, direct.stderr
    (made,) = (tmp_path / "runs").iterdir()
    (end,) = ends(made)  # raised inside a function: the client cannot tell its code
    assert end["status"] == "failed" and end["exit_code"] is None
    assert "ended at ends.py:7 without returning" in end["reason"]
    hosted = tuitrain_run(tmp_path / "hosted", sys.executable, str(script))
    assert hosted.returncode == 0, hosted.stderr
    told = ends(tmp_path / "hosted")
    assert [e["status"] for e in told] == ["failed", "completed"]  # readers take the last
    assert told[-1]["exit_code"] == 0 and "could not tell the exit code" in told[-1]["reason"]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_dashboard_follows_the_newest_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.ui.pilot_tools import wait_for
    from tuitrain.client.parent import Script
    from tuitrain.ui.script_app import ScriptApp

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("TUITRAIN_RUN_DIR", raising=False)
    script = Script([sys.executable, KFOLD], tmp_path / "kf", 5.0)
    app = ScriptApp(script)

    def events_text() -> str:
        return "\n".join(strip.text for strip in app.event_log.lines)

    async def drive() -> None:
        async with app.run_test(size=(140, 44)) as pilot:
            await wait_for(pilot, lambda: app.ended, 120, "the script's end")
            await wait_for(pilot, lambda: "run 3 started" in events_text(), 30, "run 3's line")
            assert app.watched_path == tmp_path / "kf-3" / "metrics.jsonl"
            await wait_for(pilot, lambda: app.store.snapshot().end is not None, 30, "its end")
            assert app.store.snapshot().header["config"]["script"]["fold"] == 2
            await pilot.press("q")
            await wait_for(pilot, lambda: not app.is_running, 30, "the exit")

    asyncio.run(drive())
    assert script.finish() == 0
    for d in (tmp_path / "kf", tmp_path / "kf-2"):
        assert [e["status"] for e in ends(d)] == ["completed"]
    # the newest run's own end (run.finish()) could not know the exit code; tuitrain run's can
    told = ends(tmp_path / "kf-3")
    assert [e["status"] for e in told] == ["completed", "completed"]
    assert told[-1]["exit_code"] == 0


def test_a_run_dir_named_dot_has_siblings_too(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = in_tmp / "here"
    here.mkdir()
    monkeypatch.chdir(here)  # tuitrain run --run-dir .
    rundirs.start_manifest(Path("."))
    monkeypatch.setenv("TUITRAIN_RUN_DIR", ".")
    first = client.init()
    first.finish()
    second = client.init()
    second.finish()
    assert first.dir == Path(".") and second.dir == in_tmp / "here-2"
    assert rundirs.read_manifest(Path(".")) == [in_tmp / "here-2"]


def test_a_rank_other_than_0_writes_nothing_and_never_takes_the_run_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every rank calling init/log (the naive DDP port): rank 0's run is the job's one run;
    another rank's calls are accepted and write nothing, through the client and its faces."""
    import tuitrain.trackio as trackio
    import tuitrain.wandb as wandb
    from tuitrain.client import core as client

    monkeypatch.setenv("TUITRAIN_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("RANK", "1")
    run = client.init(config={"lr": 0.1})
    assert isinstance(run, client.OtherRankRun) and run.rank == 1
    run.log({"loss": 1.0})
    client.log({"loss": 0.5})  # the module's log too
    assert run.step == 2 and run.config["lr"] == 0.1
    run.finish()
    w = wandb.init(project="p", config={"a": 1})
    wandb.log({"loss": 1.0})
    wandb.finish()
    t = trackio.init(project="p", config={"b": 2})
    trackio.log({"train_loss": 1.0})
    trackio.finish()
    assert w is not None and t is not None
    assert not (tmp_path / "run").exists()  # nothing written, no lock taken
    monkeypatch.setenv("RANK", "0")
    with client.init() as zero:  # rank 0 writes the run
        zero.log({"loss": 1.0})
    assert (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.slow
def test_every_rank_logging_under_tuitrain_run_is_one_run_and_the_job_lives(
    tmp_path: Path,
) -> None:
    """`tuitrain run -- torchrun --nproc_per_node 2 script.py` where each rank calls
    init/log: the job ends 0 (before: rank 1's init met rank 0's lock, gloo tore the job
    down, exit 1) and the run dir holds rank 0's run."""
    import shutil

    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    assert torchrun is not None
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "tuitrain", "run", "--no-ui", "--run-dir", str(run_dir), "--",
         torchrun, "--standalone", "--nproc_per_node", "2",
         str(SCRIPTS / "every_rank.py")],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "rank 0 of 2 done" in done.stdout and "rank 1 of 2 done" in done.stdout
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    assert recs[0]["type"] == "header" and recs[0]["config"]["script"]["world"] == 2
    trains = [r for r in recs if r["type"] == "train"]
    assert [r["step"] for r in trains] == list(range(6))
    assert all(r["rank_seen"] == 0.0 for r in trains)  # rank 0's rows only
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "completed"
    assert not list(tmp_path.glob("run-*"))  # no second run beside it


@pytest.mark.slow
def test_a_run_the_script_finished_itself_gets_the_exit_code_tuitrain_run_saw(
    tmp_path: Path,
) -> None:
    """`wandb.finish()` writes an end record with no exit code (the process has not ended);
    under `tuitrain run`, which sees the real one, the run's last end record carries it."""
    script = tmp_path / "finished.py"
    script.write_text(
        "import wandb\nwandb.init(project='p')\nwandb.log({'loss': 1.0})\nwandb.finish()\n"
    )
    hosted = tuitrain_run(tmp_path / "hosted", sys.executable, "-m", "tuitrain.wandb", str(script))
    assert hosted.returncode == 0, hosted.stderr
    told = ends(tmp_path / "hosted")
    assert told[0]["status"] == "completed" and told[0].get("exit_code") is None
    assert told[-1]["status"] == "completed" and told[-1]["exit_code"] == 0
