"""Every rank's figures in rank 0's run (tuitrain.client.ranks): the other ranks of a torchrun
job report their step time and memory, rank 0's train records carry them as per-rank lists;
the job never waits for it, and a job that logs from rank 0 only is written as before."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tuitrain.client import core as client
from tuitrain.client import ranks

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(__file__).resolve().parent / "scripts" / "every_rank_reports.py")


def trains(run_dir: Path) -> list[dict]:
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    return [r for r in recs if r["type"] == "train"]


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A two-rank torchrun job's environment, the test's folder as the working dir."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TUITRAIN_RUN_DIR", raising=False)
    for key, value in {
        "WORLD_SIZE": "2",
        "TORCHELASTIC_RUN_ID": "job42",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "MASTER_PORT": "29512",
    }.items():
        monkeypatch.setenv(key, value)  # fmt: skip
    return tmp_path


def start(rank: int, monkeypatch: pytest.MonkeyPatch, run_dir: str | None) -> object:
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setattr(ranks, "_runs", 0)  # each "process" counts its own runs
    monkeypatch.setattr(client, "_current", None)  # rank 0's run is another process's
    return client.init(run_dir, flush_s=3600)


def test_another_ranks_figures_reach_rank_0s_records(
    job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    zero = start(0, monkeypatch, "exp")
    other = start(1, monkeypatch, "exp")
    assert isinstance(zero, client.Run) and isinstance(other, client.OtherRankRun)
    assert len(list((job / ranks.POINTER_DIR).glob("*.json"))) == 1  # rank 0's pointer
    for step in range(4):
        other.log({"loss": 1.0}, step=step)
    assert other._reporter is not None
    other._reporter.report()  # what its thread does every second
    for step in range(4):
        zero.log({"loss": 1.0}, step=step)
    other.finish()
    zero.finish()
    last = trains(job / "exp")[-1]
    assert last["step"] == 3 and len(last["rank_step_time_s"]) == 2
    assert all(v is not None and v > 0 for v in last["rank_host_rss_bytes"])
    assert last["rank_step_time_s"][1] is not None and last["rank_step_time_s"][1] >= 0
    assert "rank_mem_peak_bytes" not in last  # no rank on CUDA: the field does not apply
    assert not list((job / ranks.POINTER_DIR).iterdir())  # rank 0 took its pointer away


def test_rank_0_alone_logging_writes_what_it_wrote_before(
    job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    zero = start(0, monkeypatch, "exp")
    other = start(1, monkeypatch, "exp")
    for step in range(3):
        zero.log({"loss": 1.0}, step=step)
    other.finish()
    zero.finish()
    assert not any(k.startswith("rank_") for r in trains(job / "exp") for k in r)
    assert not (job / "exp" / ranks.RANKS_DIR).exists()  # the empty folder went at finish


def test_a_rank_ahead_waits_for_rank_0s_step_and_a_quiet_rank_is_null(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = ranks.RankReader(tmp_path, 3)
    with (tmp_path / "rank-1.jsonl").open("w") as f:
        for step, rss in ((4, 100), (9, 200)):
            f.write(json.dumps({"step": step, "step_time_s": 0.5, "host_rss_bytes": rss}) + "\n")
        f.write('{"step": 12, "step_ti')  # a line still being written: read later
    own = {"step_time_s": 0.4, "host_rss_bytes": 50}
    lists = reader.lists(5, own)
    assert lists is not None
    assert lists["rank_host_rss_bytes"][:2] == [50.0, 100.0]  # step 9 waits for rank 0's
    assert math.isnan(lists["rank_host_rss_bytes"][2])  # rank 2 wrote nothing
    assert reader.lists(9, own)["rank_host_rss_bytes"][1] == 200.0  # type: ignore[index]
    with (tmp_path / "rank-1.jsonl").open("a") as f:
        f.write('me_s": 0.5, "host_rss_bytes": 300}\n')
    assert reader.lists(12, own)["rank_host_rss_bytes"][1] == 300.0  # type: ignore[index]
    monkeypatch.setattr(ranks, "STALE_S", -1.0)  # rank 1 said nothing since ...
    slow = {"step_time_s": 60.0, "host_rss_bytes": 50}  # ... but rank 0's steps take 60 s
    assert reader.lists(13, slow)["rank_host_rss_bytes"][1] == 300.0  # type: ignore[index]
    quick = {"step_time_s": 0.0, "host_rss_bytes": 50}  # ... and here that is silence
    assert math.isnan(reader.lists(14, quick)["rank_host_rss_bytes"][1])  # type: ignore[index]


def test_a_pointer_from_an_older_job_or_to_a_link_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "old" / ranks.RANKS_DIR).mkdir(parents=True)
    pointer = tmp_path / "job.json"
    assert ranks.write_pointer(pointer, tmp_path / "old")
    assert ranks.read_pointer(pointer, started=None) == tmp_path / "old" / ranks.RANKS_DIR
    later = json.loads(pointer.read_text())["time"] + ranks.START_SLACK_S + 1
    assert ranks.read_pointer(pointer, started=later) is None
    (tmp_path / "old" / ranks.RANKS_DIR).rmdir()
    (tmp_path / "old" / ranks.RANKS_DIR).symlink_to(tmp_path)  # planted: never written through
    assert ranks.read_pointer(pointer, started=None) is None


def check_both_ranks(run_dir: Path) -> None:
    recs = trains(run_dir)
    both = [r for r in recs if len(r.get("rank_step_time_s") or ()) == 2
            and all(isinstance(v, (int, float)) and math.isfinite(v)
                    for k in ("rank_step_time_s", "rank_host_rss_bytes")
                    for v in r[k])]  # fmt: skip
    assert both, [r.get("rank_step_time_s") for r in recs]
    rss = both[-1]["rank_host_rss_bytes"]
    assert rss[1] > rss[0] + 32 * 2**20  # rank 1's own figure: it holds 64 MiB more
    assert all(len(r.get("rank_host_rss_bytes", [0, 0])) == 2 for r in recs)


@pytest.mark.slow
def test_every_rank_logging_under_torchrun_fills_the_per_rank_lists(tmp_path: Path) -> None:
    """Directly under torchrun (no tuitrain run): rank 1 finds rank 0's run dir through the
    pointer beside the runs folder; one run dir, both ranks' figures."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("TUITRAIN_RUN_DIR", None)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         SCRIPT, "runs/exp"],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [".tuitrain-jobs", "exp"]
    check_both_ranks(tmp_path / "runs" / "exp")


@pytest.mark.slow
def test_every_rank_logging_under_tuitrain_run_fills_the_per_rank_lists(tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    assert torchrun is not None
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "tuitrain", "run", "--no-ui", "--run-dir", str(tmp_path / "run"),
         "--", torchrun, "--standalone", "--nproc_per_node", "2", SCRIPT],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "rank 1 of 2 done" in done.stdout
    check_both_ranks(tmp_path / "run")
    assert not list(tmp_path.glob("run-*"))  # one run dir


def test_a_reporter_follows_rank_0s_pointer_when_it_replaces_a_crashed_jobs(
    tmp_path: Path,
) -> None:
    """Plain torchrun gives a rerun the same job key: a pointer a crashed job left moments
    before this process started may be read first; once this job's rank 0 writes its own,
    the reports go to its run dir, not the dead one's."""
    for name in ("old", "new"):
        (tmp_path / name / ranks.RANKS_DIR).mkdir(parents=True)
    pointer = tmp_path / "job.json"
    assert ranks.write_pointer(pointer, tmp_path / "old")
    reporter = ranks.RankReporter(1, pointer)
    try:
        reporter.note(1)
        reporter.note(2)
        reporter.report()
        assert reporter.folder == tmp_path / "old" / ranks.RANKS_DIR
        assert ranks.write_pointer(pointer, tmp_path / "new")  # this job's rank 0, later
        reporter.note(3)
        reporter.report()
        assert reporter.folder == tmp_path / "new" / ranks.RANKS_DIR
        assert (tmp_path / "new" / ranks.RANKS_DIR / "rank-1.jsonl").read_text().count("\n") == 1
        pointer.unlink()  # rank 0 finished: the last report still goes to its run dir
        reporter.note(4)
        reporter.report()
        assert (tmp_path / "new" / ranks.RANKS_DIR / "rank-1.jsonl").read_text().count("\n") == 2
    finally:
        reporter.close()
