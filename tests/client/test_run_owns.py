"""`tuitrain run` over real children (slow tier): the end record for every way a script
exits, what it leaves running, a second `tuitrain run` on the same run dir, another writer
there, and a script that logs to a run dir of its own."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.test_run_hostile import check_end, gone, last_end, records, wait_until
from tuitrain.commands import run as run_cmd
from tuitrain.rundir.lock import RunDirLock

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

# writes what a script would leave (see test_run_hostile.plant), then exits or is killed
WRITER = r"""
import json, os, signal, sys
kind, code = sys.argv[1], int(sys.argv[2])
lines = []
if kind != "nothing":
    lines = [{"type": "header", "preset": "w", "config": {}}]
    lines += [{"type": "train", "step": s, "loss": 1.0} for s in range(8)]
    lines.append({"type": "event", "level": "info", "message": "no step here"})
    if kind in ("completed", "failed"):
        lines.append({"type": "end", "status": kind, "reason": "r", "step": 7,
                      "summary": {"best": 1}})
with open(os.path.join(os.environ["TUITRAIN_RUN_DIR"], "metrics.jsonl"), "a") as f:
    f.write("".join(json.dumps(line) + "\n" for line in lines))
if code < 0:
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def tuitrain_run(run_dir: Path, *command: str, grace: str = "1") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tuitrain", "run", "--run-dir", str(run_dir), "--no-ui",
         "--grace-s", grace, "--", *command],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["nothing", "records", "completed", "failed"])
@pytest.mark.parametrize("exit_with", [0, 4, 255, -9])
def test_every_way_a_script_exits_gets_a_true_end_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, exit_with: int
) -> None:
    run_dir = tmp_path / "run"
    code = run_cmd.main(["--run-dir", str(run_dir), "--no-ui", "--",
                         sys.executable, "-c", WRITER, kind, str(exit_with)])  # fmt: skip
    capsys.readouterr()
    expected = 128 + 9 if exit_with == -9 else exit_with
    assert code == expected  # tuitrain run exits with the script's code
    check_end(records(run_dir / "metrics.jsonl"), kind, expected, signalled=exit_with < 0)


def test_a_client_script_that_calls_sys_exit_4_is_not_completed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    run_dir = tmp_path / "run"
    body = (
        "import sys, tuitrain\nrun = tuitrain.init()\n"
        "for s in range(5):\n    run.log({'loss': 1.0 / (s + 1)}, step=s)\nsys.exit(4)\n"
    )
    code = run_cmd.main(["--run-dir", str(run_dir), "--no-ui", "--", sys.executable, "-c", body])
    capsys.readouterr()
    assert code == 4
    end = last_end(records(run_dir / "metrics.jsonl"))
    assert end is not None and end["status"] == "failed"  # whichever wrote it
    assert end["exit_code"] == 4 and end["step"] == 4


def test_what_the_script_leaves_in_its_group_is_ended_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two processes left holding its output pipe, one ignoring SIGTERM: both ended (SIGKILL
    after the grace), a warning event names them, the end record still comes last."""
    run_dir, pids = tmp_path / "run", tmp_path / "pids"
    shell = (f"sleep 300 & echo $! > {pids}; (trap '' TERM; exec sleep 301) & "
             f"echo $! >> {pids}; echo bye; exit 3")  # fmt: skip
    code = run_cmd.main(["--run-dir", str(run_dir), "--no-ui", "--grace-s", "0.5", "--",
                         "sh", "-c", shell])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 3 and "bye" in out, (out, (run_dir / "output.log").read_bytes())
    left = [int(p) for p in pids.read_text().split()]
    wait_until(lambda: all(gone(p) for p in left), "the leftovers ended")
    recs = records(run_dir / "metrics.jsonl")
    (event,) = [r for r in recs if r.get("kind") == "leftover_processes"]
    assert event["processes"] == 2 and event["level"] == "warning"
    assert sorted(event["commands"]) == ["sleep 300", "sleep 301"]
    assert "left 2 processes" in err
    assert recs[-1]["type"] == "end" and recs[-1]["exit_code"] == 3


# leaves three helpers outside its process group: a new session, a double fork with setsid
# (reparented away at once), and a new session with an empty environment, seen while it ran
ESCAPER = r"""
import os, subprocess, sys, time
pids = open(sys.argv[1], "w")
a = subprocess.Popen(["sleep", "310"], start_new_session=True)
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    child = os.fork()
    if child == 0:
        os.execvp("sleep", ["sleep", "311"])
    os.write(w, str(child).encode())
    os._exit(0)
os.close(w)
b = int(os.read(r, 64))
c = subprocess.Popen(["sleep", "312"], start_new_session=True, env={"PATH": "/bin:/usr/bin"})
pids.write(f"{a.pid} {b} {c.pid}")
pids.close()
time.sleep(2)  # long enough for tuitrain run to see the one without the environment
print("bye", flush=True)
"""


def test_helpers_outside_the_process_group_are_ended_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new session and a double fork escape the process group's kill: tuitrain run finds
    them (its environment variable, the tree it saw), ends them, and says so in one line
    and in the leftover event."""
    run_dir, pids = tmp_path / "run", tmp_path / "pids"
    try:
        code = run_cmd.main(["--run-dir", str(run_dir), "--no-ui", "--grace-s", "0.5", "--",
                             sys.executable, "-c", ESCAPER, str(pids)])  # fmt: skip
        out, err = capsys.readouterr()
        assert code == 0 and "bye" in out, (out, err)
        left = [int(p) for p in pids.read_text().split()]
        wait_until(lambda: all(gone(p) for p in left), "the helpers ended", timeout=10)
    finally:
        for pid in [int(p) for p in pids.read_text().split()] if pids.exists() else []:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
    recs = records(run_dir / "metrics.jsonl")
    (event,) = [r for r in recs if r.get("kind") == "leftover_processes"]
    assert event["processes"] == 3 and event["outside_group"] == 3
    assert sorted(event["commands"]) == ["sleep 310", "sleep 311", "sleep 312"]
    (line,) = [x for x in err.splitlines() if "left 3 processes" in x]
    assert "outside its process group" in line and "ended them" in line
    assert recs[-1]["type"] == "end" and recs[-1]["exit_code"] == 0


def test_a_second_tuitrain_run_on_a_live_run_dir_is_refused_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The window before the script takes the writer lock: the first `tuitrain run` holds
    its own lock from the start, so the second one is refused and appends nothing."""
    run_dir, go = tmp_path / "run", tmp_path / "go"
    first = tuitrain_run(run_dir, "sh", "-c", f"touch {tmp_path}/a; while [ ! -e {go} ]; do "
                         "sleep 0.05; done; exit 1")  # fmt: skip
    try:
        wait_until(lambda: (tmp_path / "a").exists(), "the first script started")
        code = run_cmd.main(["--run-dir", str(run_dir), "--no-ui", "--",
                             "touch", str(tmp_path / "b")])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and "is in use by another tuitrain run" in err
        assert not (tmp_path / "b").exists()
        assert records(run_dir / "metrics.jsonl") == []  # nothing appended to the live run
        go.touch()
        assert first.wait(timeout=60) == 1
    finally:
        first.kill()
        first.communicate()
    recs = records(run_dir / "metrics.jsonl")
    assert [r["type"] for r in recs] == ["header", "end"] and recs[-1]["exit_code"] == 1


def test_no_end_record_lands_in_a_run_another_writer_holds(tmp_path: Path) -> None:
    """The run dir's writer lock taken by someone else before the script took it (the script
    failed on it): tuitrain run does not append an end record to that writer's run."""
    run_dir, go = tmp_path / "run", tmp_path / "go"
    first = tuitrain_run(run_dir, "sh", "-c", f"touch {tmp_path}/a; while [ ! -e {go} ]; do "
                         "sleep 0.05; done; exit 1")  # fmt: skip
    try:
        wait_until(lambda: (tmp_path / "a").exists(), "the script started")
        other = RunDirLock(run_dir)  # another writer, e.g. a script run on its own
        try:
            go.touch()
            _, err = first.communicate(timeout=60)
        finally:
            other.release()
    finally:
        first.kill()
    assert first.returncode == 1
    assert "no end record written" in err and "in use" in err
    assert records(run_dir / "metrics.jsonl") == []


def test_a_script_that_logs_to_a_run_dir_of_its_own_is_named(tmp_path: Path) -> None:
    """No client change needed to see it: the script's tree holds another metrics.jsonl."""
    run_dir, other, go = tmp_path / "run", tmp_path / "mine", tmp_path / "go"
    other.mkdir()
    body = (f"import os, time\nf = open({str(other / 'metrics.jsonl')!r}, 'a')\n"
            "f.write('{\"type\": \"header\"}\\n'); f.flush()\n"
            f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n")  # fmt: skip
    proc = tuitrain_run(run_dir, sys.executable, "-c", body)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "writes its records to" in line:
                assert str(other / "metrics.jsonl") in line
                break
        go.touch()
        assert proc.wait(timeout=60) == 0
    finally:
        go.touch()
        proc.kill()
        proc.communicate()
    end = last_end(records(run_dir / "metrics.jsonl"))
    assert end is not None and "logged nothing" not in end["reason"]
    assert f"it logged to {other / 'metrics.jsonl'}, not to this run dir" in end["reason"]
