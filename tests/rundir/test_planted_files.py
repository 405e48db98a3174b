"""The run dir's files that are not records, against what another local user (or a process
that outlived its run) may plant or hold: the lock is its user's and never held hostage, the
control dir belongs to the run that reads it, the rank pointer and reports are never
followed through links or waited on, and the stalled-rank stacks never write through a link
(tuitrain.rundir.lock, .control, .ranks; tuitrain.engine.rankwatch)."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tuitrain.client import core as client
from tuitrain.client import ranks
from tuitrain.core.control import Control
from tuitrain.core.errors import UserError
from tuitrain.host.steer import Listener
from tuitrain.rundir import ranks as rank_files
from tuitrain.rundir.control import OWNER_NAME, send_request, steerable
from tuitrain.rundir.layout import LOCK_NAME, RANKS_LOCK_NAME, RunDir
from tuitrain.rundir.lock import RunDirLock, refuse_if_held, start_ticks, writer_gone, writer_id

ROOT = Path(__file__).resolve().parents[2]
PRECIOUS = b"precious: a file the run must never touch\n"
NOBODY = 65534  # another local user

pytestmark = pytest.mark.timeout(60)

HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)  # read-only, as a stranger could while it was 0644
fcntl.flock(fd, fcntl.LOCK_EX if sys.argv[2] == "exclusive" else fcntl.LOCK_SH)
print("held", flush=True)
sys.stdin.read()
"""


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(proc.stdout)


@pytest.fixture
def hold() -> Iterator[Callable[[Path, str], subprocess.Popen[str]]]:
    """Start a process that holds a flock on a file (it never wrote there); killed after."""
    procs: list[subprocess.Popen[str]] = []

    def start(path: Path, kind: str) -> subprocess.Popen[str]:
        args = [sys.executable, "-c", HOLD, str(path), kind]
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.communicate()


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("a file of another user takes root to make (CI runs as root)")


# -- 1. the lock ---------------------------------------------------------------------------


def test_a_lock_file_is_its_users_alone(tmp_path: Path) -> None:
    """A new lock file is made 0600; one an older tuitrain left world-readable is tightened."""
    RunDirLock(tmp_path).release()
    for name in (LOCK_NAME, RANKS_LOCK_NAME):
        assert stat.S_IMODE(os.lstat(tmp_path / name).st_mode) == 0o600, name
    older = tmp_path / "older"
    older.mkdir()
    (older / LOCK_NAME).write_text("")
    os.chmod(older / LOCK_NAME, 0o644)
    RunDirLock(older).release()
    assert stat.S_IMODE(os.lstat(older / LOCK_NAME).st_mode) == 0o600


@pytest.mark.parametrize("name", [LOCK_NAME, RANKS_LOCK_NAME])
def test_a_lock_file_of_another_user_is_refused_in_one_sentence(tmp_path: Path, name: str) -> None:
    needs_root()
    (tmp_path / name).write_text("")
    os.chown(tmp_path / name, NOBODY, NOBODY)
    with pytest.raises(UserError) as refused:
        RunDirLock(tmp_path)
    message = str(refused.value)
    assert f"{tmp_path / name} belongs to user" in message and f"uid {NOBODY}" in message
    assert "remove it" in message and "--run-dir" in message and "\n" not in message
    assert os.lstat(tmp_path / name).st_uid == NOBODY  # left for the user to look at
    assert not (tmp_path / "metrics.jsonl").exists()


@pytest.mark.parametrize("kind", ["shared", "exclusive"])
def test_a_lock_held_while_its_writer_is_dead_is_a_hostage_not_a_run(
    tmp_path: Path, kind: str, hold: Callable[[Path, str], subprocess.Popen[str]]
) -> None:
    """A second process holds a flock on the lock file while the pid inside is dead: the run
    is gone for a viewer, the owner's next run is not refused, and it takes a fresh lock file
    (a new inode) that is a real lock."""
    lock = tmp_path / LOCK_NAME
    lock.write_text(f"{dead_pid()} {socket.gethostname()}")
    hostage = os.lstat(lock).st_ino
    hold(lock, kind)
    assert writer_gone(tmp_path), "a killed run must not look running (and steerable)"
    refuse_if_held(tmp_path)  # the early probe lets the owner's run start
    taken = RunDirLock(tmp_path)
    try:
        assert os.lstat(lock).st_ino != hostage
        assert lock.read_text() == writer_id()
        assert stat.S_IMODE(os.lstat(lock).st_mode) == 0o600
        assert not writer_gone(tmp_path)
        with pytest.raises(UserError, match=rf"in use by a running tuitrain \(pid {os.getpid()}\)"):
            RunDirLock(tmp_path)  # the fresh file is locked: a second writer is refused
    finally:
        taken.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_NAME, RANKS_LOCK_NAME]


def test_tuitrain_runs_claim_follows_the_run_locks_rules(
    tmp_path: Path, hold: Callable[[Path, str], subprocess.Popen[str]]
) -> None:
    """`tuitrain run`'s claim on its run dir (RUN_LOCK_NAME) is made 0600; a stranger who
    holds it (shared) while the pid inside is dead does not keep the owner out; a live holder
    is one sentence; another user's file is refused."""
    from tuitrain.client.parent import claim_run_dir
    from tuitrain.rundir.layout import RUN_LOCK_NAME

    claim = tmp_path / RUN_LOCK_NAME
    claim_run_dir(tmp_path).release()
    assert stat.S_IMODE(os.lstat(claim).st_mode) == 0o600
    claim.write_text(f"{dead_pid()} {socket.gethostname()}")
    hostage = os.lstat(claim).st_ino
    hold(claim, "shared")
    taken = claim_run_dir(tmp_path)  # before: refused for as long as the stranger held it
    try:
        assert os.lstat(claim).st_ino != hostage
        assert claim.read_text() == writer_id()
        with pytest.raises(UserError, match=rf"another tuitrain run \(pid {os.getpid()}\)"):
            claim_run_dir(tmp_path)
    finally:
        taken.release()
    if os.geteuid() == 0:
        os.chown(claim, NOBODY, NOBODY)
        with pytest.raises(UserError, match=f"uid {NOBODY}"):
            claim_run_dir(tmp_path)


def test_a_lock_held_by_a_live_writer_or_on_another_host_is_not_a_hostage(
    tmp_path: Path, hold: Callable[[Path, str], subprocess.Popen[str]]
) -> None:
    lock = tmp_path / LOCK_NAME
    lock.write_text("")
    holder = hold(lock, "exclusive")
    lock.write_text(f"{holder.pid} {socket.gethostname()}")  # the holder is the writer: alive
    assert not writer_gone(tmp_path)
    with pytest.raises(UserError, match=rf"\(pid {holder.pid}\)"):
        RunDirLock(tmp_path)
    lock.write_text(f"{dead_pid()} some-other-node")  # NFS: the holder may be over there
    assert not writer_gone(tmp_path)
    with pytest.raises(UserError, match="in use by a running tuitrain"):
        RunDirLock(tmp_path)


def test_a_pid_that_now_names_another_users_process_is_no_writer(
    tmp_path: Path, hold: Callable[[Path, str], subprocess.Popen[str]]
) -> None:
    """The dead writer's pid taken by another user's process (reused, or on purpose): the
    lock file is this user's, so its writer was too; the hold is a hostage."""
    needs_root()
    stranger = subprocess.Popen(["sleep", "60"], user=NOBODY)
    try:
        lock = tmp_path / LOCK_NAME
        lock.write_text(f"{stranger.pid} {socket.gethostname()}")
        hold(lock, "shared")
        assert writer_gone(tmp_path)
        RunDirLock(tmp_path).release()
    finally:
        stranger.kill()
        stranger.wait()


def test_a_pid_that_now_names_another_process_of_this_user_is_no_writer(
    tmp_path: Path, hold: Callable[[Path, str], subprocess.Popen[str]]
) -> None:
    """The dead writer's pid given to a later process of the same user (pid reuse): the start
    tick in the lock names another process, so the hold is a hostage; the same pid at its own
    start tick is the writer."""
    later = subprocess.Popen(["sleep", "60"])  # stands for the process that got the pid
    try:
        started = start_ticks(later.pid)
        assert started.isdigit()
        lock = tmp_path / LOCK_NAME
        lock.write_text(f"{later.pid} {socket.gethostname()} {int(started) - 1}")
        hold(lock, "exclusive")  # as the writer would: a shared probe cannot take it
        assert writer_gone(tmp_path)
        lock.write_text(f"{later.pid} {socket.gethostname()} {started}")  # it is the writer
        assert not writer_gone(tmp_path)
        with pytest.raises(UserError, match=rf"\(pid {later.pid}\)"):
            RunDirLock(tmp_path)
        lock.write_text(f"{later.pid} {socket.gethostname()} {int(started) - 1}")
        RunDirLock(tmp_path).release()  # the owner's next run takes a fresh lock
    finally:
        later.kill()
        later.wait()


def test_a_lock_written_in_another_pid_namespace_is_never_judged_here(
    tmp_path: Path, hold: Callable[[Path, str], subprocess.Popen[str]]
) -> None:
    """A writer in a container that shares the host's name: its pid (dead here, or another
    process here) says nothing in this namespace, so its held lock is a run, not a hostage,
    and a second writer is refused."""
    lock = tmp_path / LOCK_NAME
    lock.write_text(f"{dead_pid()} {socket.gethostname()} 12345 4026599999")
    hold(lock, "exclusive")
    assert not writer_gone(tmp_path)
    with pytest.raises(UserError, match="in use by a running tuitrain"):
        RunDirLock(tmp_path)
    lock.write_text(f"{dead_pid()} {socket.gethostname()} 12345 {writer_id().split()[3]}")
    assert writer_gone(tmp_path)  # the same text in this namespace: a hostage


# -- 2. the control dir --------------------------------------------------------------------

KILLED_HOST = """
import sys, time
from pathlib import Path
from tuitrain.rundir.control import Inbox
from tuitrain.rundir.lock import RunDirLock
lock = RunDirLock(Path(sys.argv[1]))
inbox = Inbox(Path(sys.argv[1]))
print("listening", flush=True)
time.sleep(120)
"""


def test_a_killed_runs_control_dir_is_stale_under_a_later_script_run(tmp_path: Path) -> None:
    """A hosted run killed with its control dir in place; a script run (the client: the same
    lock, no control dir read) in the same run dir must not look steerable, and removes it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    host = subprocess.Popen([sys.executable, "-c", KILLED_HOST, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    assert host.stdout is not None and host.stdout.readline().strip() == "listening"
    assert steerable(tmp_path)  # live: its own mark, its own lock
    host.kill()
    host.communicate()
    control = RunDir(tmp_path).control
    assert control.is_dir() and not steerable(tmp_path)
    writer = RunDirLock(tmp_path)  # a writer that reads no requests (as a script's run does)
    try:
        assert not steerable(tmp_path), "nothing reads the requests: no keys to offer"
    finally:
        writer.release()
    run = client.Run(tmp_path, flush_s=3600)
    try:
        assert not control.exists(), "a new writer removes the stale control dir"
    finally:
        run.finish()


def ending(kind: str) -> Callable[..., object]:
    """An engine (host, sink) that checks the run listens, then ends as `kind` says."""

    def engine(host: object, sink: object) -> object:
        run_dir = host.run_dir  # type: ignore[attr-defined]
        assert steerable(run_dir) and (RunDir(run_dir).control / OWNER_NAME).is_file()
        if kind == "user error":
            raise UserError("the data is missing; pass --data-dir.")
        if kind == "crash":
            raise RuntimeError("a bug")
        return type("Result", (), {"status": kind, "traceback": ""})()

    return engine


@pytest.mark.parametrize("kind", ["completed", "stopped", "user error", "crash", "refused"])
def test_the_control_dir_goes_at_every_ending(
    tmp_path: Path, kind: str, tiny_config: Callable[..., Any]
) -> None:
    from tuitrain.host.run import RunHost

    stale = RunDir(tmp_path).control
    stale.mkdir(mode=0o700)  # a killed run's, left behind: replaced by this run's own
    (stale / OWNER_NAME).write_text(f"{dead_pid()} {socket.gethostname()}")
    if kind == "refused":  # refused at its start, once it holds the lock: no engine, no inbox
        (tmp_path / "config.toml").mkdir()
    host = RunHost(tiny_config(), run_dir=tmp_path, engine=ending(kind), steerable=True)
    try:
        host.run()
    except (UserError, RuntimeError):
        assert kind in ("user error", "crash", "refused")
    else:
        assert kind in ("completed", "stopped")
    assert not stale.exists()


DETACHED = """
import sys, threading, time
from tuitrain.core.config import load_preset
from tuitrain.host.run import RunHost
from tuitrain.rundir.control import steerable

def engine(host, sink):
    threading.Event().wait()  # trains on: the process leaves without waiting for it

cfg = load_preset("fashion-mini", [])
host = RunHost(cfg, run_dir=sys.argv[1], engine=engine, steerable=True)
host.start()
while not steerable(sys.argv[1]):
    time.sleep(0.05)
print("listening", flush=True)
"""


def test_the_control_dir_goes_when_the_process_leaves_its_engine_thread_running(
    tmp_path: Path,
) -> None:
    """A dashboard that exits without waiting for its engine (Ctrl-C while it waits) ends
    the process with the run's thread still in the engine: the exit hook removes the dir."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", DETACHED, str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert done.returncode == 0 and "listening" in done.stdout, done.stderr
    assert not RunDir(tmp_path).control.exists()


def test_an_entry_that_cannot_be_deleted_is_refused_once(tmp_path: Path) -> None:
    written: list[dict] = []
    control = Control()
    listener = Listener(tmp_path, control, written.append)
    listener._done.set()  # polled by hand
    try:
        stuck = RunDir(tmp_path).control / "req-stuck.json"
        stuck.mkdir()  # a directory: unlink cannot delete it
        for _ in range(5):
            listener.poll()
        assert len(written) == 1 and written[0]["accepted"] is False
        assert "not a regular file" in written[0]["message"]
        assert "cannot be deleted" in written[0]["message"]
        send_request(tmp_path, "pause")  # the channel still works
        listener.poll()
        assert control.paused and len(written) == 2 and written[1]["accepted"] is True
        assert stuck.is_dir()  # left in place, unread
    finally:
        listener.close()


# -- 3. the rank pointer and the reports ---------------------------------------------------


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A two-rank torchrun job's environment, rank 0 in this process."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TUITRAIN_RUN_DIR", raising=False)
    for key in ranks.JOB_ENV:
        monkeypatch.delenv(key, raising=False)
    env = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(ranks, "_runs", 0)
    monkeypatch.setattr(client, "_current", None)
    return tmp_path


def test_a_fifo_planted_as_the_pointer_does_not_hang_finish(job: Path) -> None:
    zero = client.init("exp", flush_s=3600)
    assert isinstance(zero, client.Run) and zero._pointer is not None
    pointer = zero._pointer
    pointer.unlink()
    os.mkfifo(pointer)
    finisher = threading.Thread(target=zero.finish, daemon=True)
    finisher.start()
    finisher.join(15)
    if finisher.is_alive():  # old code: blocked opening the FIFO; a writer frees it
        os.close(os.open(pointer, os.O_WRONLY | os.O_NONBLOCK))
        finisher.join(5)
        pytest.fail("finish() hung on a FIFO planted as the rank pointer")
    assert zero.finished and stat.S_ISFIFO(os.lstat(pointer).st_mode)  # not ours: left


def test_a_link_planted_as_pointer_or_report_is_not_followed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "ranks").mkdir(parents=True)
    good = tmp_path / "good.json"
    assert ranks.write_pointer(good, run_dir)
    assert stat.S_IMODE(os.lstat(good).st_mode) == 0o600
    assert ranks.read_pointer(good, started=None) == run_dir / "ranks"
    pointer = tmp_path / "jobs" / "key.json"
    pointer.parent.mkdir()
    pointer.symlink_to(good)  # a link to a pointer that would lead somewhere
    assert ranks.read_pointer(pointer, started=None) is None, "a linked pointer is followed"
    victim = tmp_path / "victim.txt"
    victim.write_bytes(PRECIOUS)
    pointer.unlink()
    pointer.symlink_to(victim)
    assert ranks.write_pointer(pointer, run_dir)  # replaced, never written through
    assert victim.read_bytes() == PRECIOUS and not pointer.is_symlink()
    # reports: a link where rank 1 appends is not written through, nor read by rank 0
    report = run_dir / "ranks" / "rank-1.jsonl"
    report.symlink_to(victim)
    assert not rank_files.append_report(run_dir / "ranks", 1, b'{"step": 1}\n')
    assert victim.read_bytes() == PRECIOUS
    lines = tmp_path / "lines.jsonl"
    lines.write_text(json.dumps({"step": 1, "step_time_s": 0.5, "host_rss_bytes": 7}) + "\n")
    report.unlink()
    report.symlink_to(lines)
    reader = ranks.RankReader(run_dir / "ranks", 2)
    assert reader.lists(1, {"step_time_s": 0.4, "host_rss_bytes": 5}) is None, "read via a link"


def test_a_pointer_or_report_of_another_user_is_not_trusted(tmp_path: Path) -> None:
    needs_root()
    run_dir = tmp_path / "run"
    (run_dir / "ranks").mkdir(parents=True)
    pointer = tmp_path / "key.json"
    assert ranks.write_pointer(pointer, run_dir)
    os.chown(pointer, NOBODY, NOBODY)  # planted by a stranger in a shared runs/ folder
    assert ranks.read_pointer(pointer, started=None) is None
    report = run_dir / "ranks" / "rank-1.jsonl"
    report.write_text(json.dumps({"step": 1, "step_time_s": 0.5, "host_rss_bytes": 7}) + "\n")
    os.chown(report, NOBODY, NOBODY)
    assert ranks.RankReader(run_dir / "ranks", 2).lists(1, {"host_rss_bytes": 5}) is None


def test_the_first_report_is_made_whole_and_private(tmp_path: Path) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    assert rank_files.append_report(folder, 1, b"one\n")
    assert rank_files.append_report(folder, 1, b"two\n")
    report = folder / "rank-1.jsonl"
    assert report.read_bytes() == b"one\ntwo\n"
    assert stat.S_IMODE(os.lstat(report).st_mode) == 0o600
    assert sorted(p.name for p in folder.iterdir()) == ["rank-1.jsonl"]  # no temp left


def key(monkeypatch: pytest.MonkeyPatch, host: str, **env: str) -> str | None:
    """The job key a rank computes on `host` with `env` (its process's first run)."""
    for name in ranks.JOB_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(socket, "gethostname", lambda: host)
    monkeypatch.setattr(ranks, "_runs", 0)
    return ranks.next_job_key()


def test_two_jobs_never_share_a_job_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain torchrun on two nodes sharing runs/: the same run id ("none"), 127.0.0.1:29500,
    restart 0, yet two jobs. Two SLURM jobs likewise. One job's ranks agree."""
    plain = {"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}  # fmt: skip
    a, b = key(monkeypatch, "node01", **plain), key(monkeypatch, "node02", **plain)
    assert a is not None and b is not None and a != b
    assert key(monkeypatch, "node01", **plain) == a  # the other rank on node01: the same
    multi = {**plain, "MASTER_ADDR": "node01"}  # one job on two nodes: rank 0's node named
    assert key(monkeypatch, "node01", **multi) == key(monkeypatch, "node02", **multi)
    first, second = {**multi, "SLURM_JOB_ID": "101"}, {**multi, "SLURM_JOB_ID": "102"}
    assert key(monkeypatch, "n", **first) != key(monkeypatch, "n", **second)
    assert key(monkeypatch, "n", SLURM_JOB_ID="7") is not None  # srun alone names a job too
    assert key(monkeypatch, "n") is None  # nothing names it: no pointer


# -- 4. the stalled-rank stacks ------------------------------------------------------------


def test_the_stacks_never_write_through_a_planted_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Links at every name the writer uses, the old predictable temp name included (the temp
    name is now a fresh random one made with O_EXCL, see core.safefile.temp_beside): the
    files outside are unchanged and the stacks and the NCCL trace are written."""
    import torch

    from tuitrain.engine.rankwatch import Beat, write_stacks

    c10d = torch._C._distributed_c10d
    monkeypatch.setattr(c10d, "_dump_nccl_trace", lambda: b"trace", raising=False)  # no NCCL here
    stacks = RunDir(tmp_path / "run").stacks
    stacks.mkdir(parents=True)
    names = ["rank-0.txt", f".rank-0.txt.{os.getpid()}", "nccl-trace-rank-0.pkl"]
    victims = {}
    for name in names:
        victims[name] = tmp_path / f"victim-{name.strip('.')}"
        victims[name].write_bytes(PRECIOUS)
        (stacks / name).symlink_to(victims[name])
    write_stacks(stacks, 0, Beat(1, 2, "forward", 3), nccl=True)
    assert all(v.read_bytes() == PRECIOUS for v in victims.values())
    text = (stacks / "rank-0.txt").read_text()
    assert not (stacks / "rank-0.txt").is_symlink() and text.startswith("rank 0 pid")
    assert "test_planted_files.py" in text  # this test's frames
    assert (stacks / "nccl-trace-rank-0.pkl").read_bytes() == b"trace"
    assert not [p for p in stacks.iterdir() if ".tmp-" in p.name]  # no temp left behind


def test_a_stacks_folder_that_is_a_link_is_not_written_into(tmp_path: Path) -> None:
    from tuitrain.core.safefile import LinkRefused
    from tuitrain.engine.rankwatch import Beat, flight_recorder_env, write_stacks

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    stacks = RunDir(tmp_path / "run").stacks
    stacks.parent.mkdir()
    stacks.symlink_to(elsewhere)
    with pytest.raises(LinkRefused, match="is a symbolic link"):
        write_stacks(stacks, 0, Beat(1, 2, "forward", 3), nccl=False)
    assert list(elsewhere.iterdir()) == []
    assert "TORCH_FR_DUMP_TEMP_FILE" not in flight_recorder_env({}, stacks)
