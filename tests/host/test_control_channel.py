"""The control channel's host end: only the run's own user's well-formed requests are obeyed,
each is answered by an event record, and links, strangers' files and open directories are
refused (tuitrain.rundir.control, tuitrain.host.steer)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tuitrain.core.control import Control
from tuitrain.core.errors import EXIT_STOPPED
from tuitrain.host.steer import Listener
from tuitrain.rundir.control import (
    CONTROL_DIR,
    OWNER_NAME,
    ChannelError,
    Inbox,
    send_request,
    steerable,
)
from tuitrain.rundir.lock import RunDirLock


def listener(run_dir: Path) -> tuple[Listener, Control, list[dict]]:
    written: list[dict] = []
    control = Control()
    found = Listener(run_dir, control, written.append)
    found._done.set()  # the test polls by hand: no thread racing it
    return found, control, written


def test_the_channel_is_a_private_directory_removed_at_the_end(tmp_path: Path) -> None:
    got, _, _ = listener(tmp_path)
    folder = tmp_path / CONTROL_DIR
    mode = os.lstat(folder).st_mode
    assert stat.S_ISDIR(mode) and stat.S_IMODE(mode) == 0o700
    got.close()
    assert not folder.exists()


def test_requests_reach_the_control_and_are_answered(tmp_path: Path) -> None:
    got, control, written = listener(tmp_path)
    pause = send_request(tmp_path, "pause")
    send_request(tmp_path, "checkpoint")
    send_request(tmp_path, "profile", steps=3)
    got.poll()
    assert control.paused and control.take_checkpoint_request()
    assert control.take_profile_request() == 3
    assert [e["command"] for e in written] == ["pause", "checkpoint", "profile"]
    assert all(e["type"] == "event" and e["kind"] == "control" for e in written)
    assert written[0]["request"] == pause and written[0]["accepted"] is True
    assert written[0]["paused"] is True
    assert os.listdir(tmp_path / CONTROL_DIR) == [OWNER_NAME], "each request is deleted once read"
    send_request(tmp_path, "resume")
    send_request(tmp_path, "stop")
    got.poll()
    assert not control.paused and control.stop_requested
    assert control.exit_code == EXIT_STOPPED and "tuitrain watch" in control.stop_reason
    send_request(tmp_path, "pause")
    got.poll()
    assert written[-1]["accepted"] is False and "stopping" in written[-1]["message"]
    got.close()


def test_bad_requests_are_refused_and_deleted(tmp_path: Path) -> None:
    got, control, written = listener(tmp_path)
    folder = tmp_path / CONTROL_DIR
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"command": "stop"}))
    os.symlink(target, folder / "req-link.json")  # a link: never followed
    os.link(target, folder / "req-hard.json")  # a hard link to another file
    (folder / "req-junk.json").write_text("not json")
    (folder / "req-what.json").write_text(json.dumps({"command": "rm -rf"}))
    (folder / "req-big.json").write_text(json.dumps({"command": "stop", "pad": "x" * 5000}))
    (folder / "req-steps.json").write_text(json.dumps({"command": "profile", "steps": 10**9}))
    os.mkfifo(folder / "req-fifo.json")  # never blocks the host
    got.poll()
    assert not control.stop_requested and control.take_profile_request() == 0
    assert len(written) == 7 and all(e["accepted"] is False for e in written)
    assert all(e["level"] == "warning" for e in written)
    reasons = " ".join(e["message"] for e in written)
    for why in ("symbolic link", "other links", "not JSON", "unknown command", "too long",
                "out of range", "not a regular file"):  # fmt: skip
        assert why in reasons, why
    assert os.listdir(folder) == [OWNER_NAME], "each is deleted"
    assert target.exists(), "the link's target is left alone"
    got.close()


def test_a_directory_opened_up_later_is_no_longer_read(tmp_path: Path) -> None:
    got, control, written = listener(tmp_path)
    folder = tmp_path / CONTROL_DIR
    send_request(tmp_path, "stop")
    os.chmod(folder, 0o777)  # anyone may write in it now: nothing in it is obeyed
    got.poll()
    assert not control.stop_requested
    assert "closed" in written[-1]["message"] and written[-1]["accepted"] is False
    got.poll()  # closed: nothing more
    assert len(written) == 1
    got.close()


@pytest.mark.parametrize("kind", ["link", "open", "file"])
def test_an_unsafe_channel_is_not_used(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / CONTROL_DIR
    if kind == "link":
        (tmp_path / "real").mkdir(mode=0o700)
        os.symlink(tmp_path / "real", folder)
    elif kind == "open":
        folder.mkdir()
        os.chmod(folder, 0o777)
    else:
        folder.write_text("")
    got, control, written = listener(tmp_path)
    assert got.inbox is None
    assert (
        written
        and written[0]["level"] == "warning"
        and "no control channel" in (written[0]["message"])
    )
    with pytest.raises(ChannelError):  # the viewer refuses to write there as well
        send_request(tmp_path, "stop")
    assert not steerable(tmp_path)
    got.close()


def test_a_previous_runs_requests_are_dropped(tmp_path: Path) -> None:
    folder = tmp_path / CONTROL_DIR
    folder.mkdir(mode=0o700)
    (folder / "req-old.json").write_text(json.dumps({"command": "stop"}))
    got, control, written = listener(tmp_path)
    got.poll()
    assert not control.stop_requested and written == []
    got.close()


def test_steerable_needs_a_live_lock_and_the_channel(tmp_path: Path) -> None:
    assert not steerable(tmp_path)
    inbox = Inbox(tmp_path)
    assert not steerable(tmp_path), "no process holds the run dir's lock"
    lock = RunDirLock(tmp_path)
    try:
        assert steerable(tmp_path)
    finally:
        lock.release()
        inbox.close()
    assert not steerable(tmp_path)


def test_a_headless_run_listens_on_its_channel(tmp_path: Path) -> None:
    """A real (tiny) hosted run: a stop dropped in its channel ends it with EXIT_STOPPED,
    the answer is in its metrics.jsonl, the channel is gone afterwards."""
    from tuitrain.core.config import load_preset
    from tuitrain.host.run import RunHost

    run_dir = tmp_path / "run"
    cfg = load_preset(
        "fashion-mini",
        ["train.device=cpu", "train.pace_s=0.2", "train.epochs=20", "train.log_every=1",
         "data.train_samples=512", "data.val_samples=256", f'run.run_dir="{run_dir}"'],
    )  # fmt: skip
    host = RunHost(cfg, steerable=True)
    host.start()
    try:
        import time

        deadline = time.monotonic() + 60
        while not steerable(run_dir) or host.control.step < 1:
            assert time.monotonic() < deadline, "the run never listened"
            time.sleep(0.1)
        send_request(run_dir, "stop")
        assert host.join(60)
    finally:
        host.request_stop("test over")
        host.join(30)
    assert host.result.status == "stopped" and host.result.exit_code == EXIT_STOPPED
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    answers = [r for r in records if r.get("kind") == "control"]
    assert answers and answers[0]["accepted"] is True and answers[0]["command"] == "stop"
    assert records[-1]["type"] == "end" and records[-1]["reason"] == "stopped from tuitrain watch"
    assert not (run_dir / CONTROL_DIR).exists()
