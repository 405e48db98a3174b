"""`tuitrain run` under hostile input (issue "Hostile input, round 4", classes 3, 4 and 7):
it owns its run dir and its children, copes with output of any size, and its end record
says what happened. The fast tier sweeps the pieces in-process (no child or a tiny one);
the slow tier runs `tuitrain run` over real children."""

from __future__ import annotations

import json
import os
import random
import re
import socket
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tuitrain.client import parent
from tuitrain.client.parent import (
    LINE_CAP,
    AlertActions,
    LineCutter,
    ensure_end,
    last_records,
)
from tuitrain.commands import run as run_cmd
from tuitrain.metrics.records import MAX_HEADER_BYTES
from tuitrain.rundir.read import LineTail, OutputTail
from tuitrain.ui.script_app import LineQueue

ROOT = Path(__file__).resolve().parents[2]
CUT = re.compile(r" … \[cut: (\d+) bytes\]$")


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def last_end(recs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What readers take: the last end record (tuitrain.commands.runs reads the tail reversed)."""
    return next((r for r in reversed(recs) if r.get("type") == "end"), None)


def gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for its reaper counts as exited)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return text[text.rfind(")") + 2 :].split()[0] in ("Z", "X")


def wait_until(condition: Callable[[], object], what: str, timeout: float = 60) -> None:
    """A safety net, not a measurement: fail only when `condition` never comes true."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


# --------------------------------------------------------------------------- class 4: output


def cut_apart(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


SAMPLES: dict[str, bytes] = {
    "empty": b"",
    "one line": b"hello\n",
    "no newline at all": b"x" * 10,
    "exactly the cap": b"a" * 64 + b"\n",
    "one over the cap": b"a" * 65 + b"\n",
    "far over the cap, no newline": b"b" * 5000,
    "progress bar with \\r": b"".join(b"\r%3d%% |" % i + b"#" * i for i in range(0, 101, 7)),
    "\\r\\n line ends": b"one\r\ntwo\r\n\r\nthree",
    "lone \\r then \\n": b"a\rb\n\rc\r\r\n",
    "only \\r": b"\r" * 300,
    "blank lines": b"\n\n\r\n\n",
    "runs of \\r": b"a\r\r\r\nb\r\r\rc\r\r\n\r\r\r\n\r\r",
    "multibyte text": ("é" * 40 + "\n" + "日本" * 30 + "\r").encode(),
    "binary": random.Random(4).randbytes(3000),
}


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("chunk", [1, 2, 7, 64, 4096])
def test_lines_for_the_screen_whatever_the_bytes_and_chunks(name: str, chunk: int) -> None:
    """Every kind of output, read in chunks of every size (a \\r\\n split between two reads
    included): the same lines as splitting it whole, each at most the cap plus a marker
    counting exactly the bytes left out, and never more than the cap held."""
    data, cap = SAMPLES[name], 64
    cutter = LineCutter(cap)
    got = [line for piece in cut_apart(data, chunk) for line in cutter.feed(piece)]
    got += cutter.flush()
    parts = re.split(rb"(\r*\n|\r+)", data)  # piece, line end, piece, ..., last piece
    pieces = [p for p, end in zip(parts[::2], parts[1::2], strict=False) if p or end[-1:] != b"\r"]
    pieces += [parts[-1]] if parts[-1] else []  # the last line, without a line end
    assert len(got) == len(pieces)
    for line, piece in zip(got, pieces, strict=True):
        marker = CUT.search(line)
        if len(piece) <= cap:
            assert marker is None and line == piece.decode("utf-8", "replace")
            continue
        assert marker is not None  # cut, and the marker counts exactly what is not shown
        if name != "binary":  # (undecodable bytes are shown as U+FFFD: no byte count)
            shown = line[: marker.start()].encode()
            assert piece.startswith(shown) and len(shown) + int(marker.group(1)) == len(piece)
    assert cutter.most_held <= cap


def test_a_character_split_by_the_cap_is_left_out_whole() -> None:
    cutter = LineCutter(5)
    (line,) = cutter.feed("abcdé and more\n".encode())  # é is bytes 5 and 6: cap 5 splits it
    assert line == "abcd … [cut: 11 bytes]"  # 15 bytes, 4 shown


@pytest.mark.parametrize("count", [0, 1, 99, 100, 101, 10_000])
def test_the_pane_queue_is_bounded_and_counts_what_it_drops(count: int) -> None:
    queue = LineQueue(cap=100)
    for i in range(count):
        queue.put(f"line {i}")
    skipped, lines = queue.take(limit=30)
    assert queue.most <= 100
    assert skipped + len(lines) == count  # nothing lost without being counted
    assert lines == [f"line {i}" for i in range(max(count - 30, 0), count)]  # the newest
    assert queue.take(limit=30) == (0, [])


@pytest.mark.parametrize("sizes", [[10] * 20, [4096] * 20, [1, 50_000, 2], [100_000]])
def test_a_drain_writes_at_most_its_characters_and_always_the_newest_line(
    sizes: list[int],
) -> None:
    queue = LineQueue(cap=100)
    for i, size in enumerate(sizes):
        queue.put(str(i % 10) * size)
    skipped, lines = queue.take(limit=250, max_chars=10_000)
    assert lines and lines[-1] == str((len(sizes) - 1) % 10) * sizes[-1]  # the newest
    assert len(lines) == 1 or sum(map(len, lines)) <= 10_000
    assert skipped + len(lines) == len(sizes)


@pytest.mark.parametrize(
    ("shell", "expect_bytes"),
    [
        ("head -c 3000000 /dev/zero | tr '\\0' x", 3_000_000),  # one line, no newline
        ("head -c 2000000 /dev/zero | tr '\\0' '\\r'", 2_000_000),  # only \r
        ("yes 'a line' | head -n 200000", 200_000 * 7),  # many short lines
        ("head -c 1000000 /dev/urandom | tee copy.bin", 1_000_000),  # binary
    ],
    ids=["3MB-line", "2MB-of-CR", "200k-lines", "1MB-binary"],
)
def test_output_log_keeps_every_byte_and_the_screen_gets_cut_lines(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    shell: str,
    expect_bytes: int,
) -> None:
    run_dir = tmp_path / "run"
    monkeypatch.chdir(tmp_path)
    code = run_cmd.main(["--run-dir", str(run_dir), "--no-ui", "--", "sh", "-c", shell])
    out = capsys.readouterr().out
    assert code == 0
    log = (run_dir / "output.log").read_bytes()
    assert len(log) == expect_bytes
    if (tmp_path / "copy.bin").exists():
        assert log == (tmp_path / "copy.bin").read_bytes()
    script_lines = [line for line in out.split("\n") if not line.startswith("[tuitrain]")]
    longest = max(len(line.encode()) for line in script_lines)
    assert longest <= LINE_CAP * 3 + len(" … [cut: 99999999999 bytes]")  # U+FFFD is 3 bytes
    if "'\\r'" in shell:
        assert script_lines == [""]  # a bare \r shows nothing: no line for it
    if shell.startswith("head -c 3000000 /dev/zero"):
        assert f"… [cut: {3_000_000 - LINE_CAP} bytes]" in out


# --------------------------------------------------------------------------- class 7: end


def plant(metrics: Path, kind: str, steps: int = 8) -> None:
    """A metrics.jsonl as a script leaves it: nothing, records only, or records and an end."""
    if kind == "nothing":
        return
    lines = [{"type": "header", "preset": "w", "config": {}}]
    lines += [{"type": "train", "step": s, "loss": 1.0} for s in range(steps)]
    lines.append({"type": "event", "level": "info", "message": "no step here"})
    if kind in ("completed", "failed"):
        lines.append({"type": "end", "status": kind, "reason": "r", "step": steps - 1,
                      "summary": {"best": 1}})  # fmt: skip
    metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))


def check_end(recs: list[dict[str, Any]], kind: str, code: int, signalled: bool) -> None:
    """The contract of class 7 for one (what the script left, how it exited) case."""
    end = last_end(recs)
    assert end is not None
    assert recs[0]["type"] == "header"
    if code != 0:
        assert end["status"] != "completed"  # a non-zero exit is never "completed"
    if kind == "failed" or (kind == "completed" and code == 0):
        assert end["reason"] == "r" and end["status"] == kind  # the script's own verdict
        assert end["summary"] == {"best": 1} and end["exit_code"] == code  # the code added
        assert sum(r["type"] == "end" for r in recs) == 2
        return
    assert end["exit_code"] == code and f"code {code}" in end["reason"]
    assert end["step"] == (7 if kind != "nothing" else 0)  # the last step seen, not 0
    if signalled:
        assert end["status"] == "stopped"
    else:
        assert end["status"] == ("completed" if code == 0 else "failed")
    if kind == "completed":  # corrected: a later end record, the script's totals kept
        assert sum(r["type"] == "end" for r in recs) == 2
        assert end["summary"] == {"best": 1} and '"completed"' in end["reason"]
    if kind == "nothing":
        assert "logged nothing" in end["reason"]


@pytest.mark.parametrize("kind", ["nothing", "records", "completed", "failed"])
@pytest.mark.parametrize(("code", "signalled"), [(0, False), (1, False), (4, False),
                                                 (255, False), (137, True), (143, True),
                                                 (130, False)])  # fmt: skip
def test_the_end_record_says_what_happened(
    tmp_path: Path, kind: str, code: int, signalled: bool
) -> None:
    metrics = tmp_path / "metrics.jsonl"
    plant(metrics, kind)
    ensure_end(metrics, code, ["python", "w.py"], 1.5, signalled=signalled)
    check_end(records(metrics), kind, code, signalled)


def test_the_last_step_is_found_in_a_file_of_any_size(tmp_path: Path) -> None:
    """Read backwards in small chunks: past a long run of records without a step, past a line
    longer than any record, and through a line split between two chunks."""
    metrics = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"type": "header"})]
    lines += [json.dumps({"type": "train", "step": s, "pad": "p" * 50}) for s in range(300)]
    lines.append("z" * (MAX_HEADER_BYTES + 10))  # not a record
    lines += [json.dumps({"type": "event", "message": f"e{i}"}) for i in range(2000)]
    metrics.write_text("\n".join(lines) + "\n")
    for chunk in (4096, 1 << 20):
        last, step = last_records(metrics, chunk=chunk)
        assert last == {"type": "event", "message": "e1999"} and step == 299
    small = [{"type": "header"}, {"type": "eval", "step": 3}, {"type": "event", "step": True}]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in small))
    for chunk in (1, 7, 4096):  # a bool is no step; lines split across chunks everywhere
        assert last_records(metrics, chunk=chunk) == ({"type": "event"}, 3)  # cleaned
    metrics.write_text(json.dumps({"type": "header"}) + "\n")
    assert last_records(metrics) == ({"type": "header"}, None)
    metrics.write_text("garbage\n[1, 2]\n")
    assert last_records(metrics) == (None, None)


# --------------------------------------------------------------------------- class 3: files


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_dir(path: Path) -> None:
    path.mkdir()


def make_socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()


def make_device(path: Path) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError:
        path.symlink_to("/dev/zero")


def make_link(path: Path) -> None:
    victim = path.parent.parent / "victim"
    victim.write_bytes(b"precious\n")
    path.symlink_to(victim)


KINDS = {"fifo": make_fifo, "directory": make_dir, "socket": make_socket,
         "device": make_device, "symlink": make_link}  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["output.log", "metrics.jsonl", ".tuitrain-run.lock"])
def test_a_special_file_in_the_run_dir_is_refused_before_the_script_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, name: str
) -> None:
    run_dir = tmp_path / "shared" / "run"
    run_dir.mkdir(parents=True)
    KINDS[kind](run_dir / name)
    marker = tmp_path / "started"
    code = run_cmd.main(["--run-dir", str(run_dir), "--no-ui", "--", "touch", str(marker)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and str(run_dir / name) in err  # one sentence naming it
    assert re.search(r"is a symbolic link|not a regular file|that is not a file", err)
    assert not marker.exists()  # refused before the script started
    if kind == "symlink":
        assert (tmp_path / "shared" / "victim").read_bytes() == b"precious\n"


def test_readers_never_wait_on_a_fifo_or_follow_a_link(tmp_path: Path) -> None:
    fifo, link = tmp_path / "fifo.jsonl", tmp_path / "link.jsonl"
    os.mkfifo(fifo)
    (tmp_path / "real.jsonl").write_text(json.dumps({"type": "header"}) + "\n")
    link.symlink_to(tmp_path / "real.jsonl")
    for path in (fifo, link):
        assert LineTail(path).read() == []
        assert last_records(path) == (None, None)
        assert OutputTail(path).read() == []  # watch's Output pane over a run's output log


class _Exited:
    notes: list[str] = []

    class proc:  # noqa: N801 - stands in for Popen
        @staticmethod
        def poll() -> int:
            return 0


@pytest.mark.slow
def test_an_on_alert_hook_that_runs_too_long_is_killed_with_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parent, "HOOK_TIMEOUT_S", 5.0)
    pids = tmp_path / "pids"
    said: list[str] = []
    hook = f"sleep 300 & echo $! > {pids}; (trap '' TERM; exec sleep 301) & echo $! >> {pids}; wait"
    actions = AlertActions(_Exited(), hook, said.append)  # type: ignore[arg-type]
    actions.see({"type": "event", "kind": "alert", "alert": "loss_spike", "action": "warn"})
    actions.close(grace_s=30)  # its own time limit (5 s) comes first
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2  # both started within the 5 s
    wait_until(lambda: all(gone(p) for p in started), "the hook's children ended")
    assert said and "killed, with everything it started" in said[0]


SPIKE_THEN_EXIT = (
    "import time, tuitrain\nrun = tuitrain.init(flush_s=0.2)\n"
    "for s in range(60):\n    run.log({'loss': 100.0 if s == 30 else 1.0}, step=s)\n"
    "time.sleep(1.0)\nrun.finish()\n"
)


@pytest.mark.slow
def test_a_hook_still_running_when_the_script_ends_gets_a_short_grace_not_a_minute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hung --on-alert hook does not hold tuitrain run's exit for HOOK_TIMEOUT_S after the
    script is done: HOOK_GRACE_S, then it is ended with what it started, in one line."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pids = tmp_path / "pids"
    hook = f"sleep 300 & echo $! > {pids}; echo $$ >> {pids}; sleep 301"
    began = time.monotonic()
    code = run_cmd.main(["--run-dir", str(tmp_path / "run"), "--no-ui", "--alert",
                         "loss_spike=warn", "--alert", "divergence=off", "--on-alert", hook,
                         "--", sys.executable, "-c", SPIKE_THEN_EXIT])  # fmt: skip
    took = time.monotonic() - began
    out, err = capsys.readouterr()
    assert code == 0, (out, err)
    assert "alert loss_spike" in out and "--on-alert failed" not in out + err
    (line,) = [x for x in err.splitlines() if "--on-alert hook" in x]
    assert f"1 --on-alert hook still running {parent.HOOK_GRACE_S:g} s after" in line
    assert "ended (SIGKILL), with everything it started" in line
    started = [int(p) for p in pids.read_text().split()]
    wait_until(lambda: all(gone(p) for p in started), "the hook and its child ended", 10)
    assert took < parent.HOOK_TIMEOUT_S  # the old wait: the hook's whole time limit


def test_output_before_the_first_listener_is_not_lost(tmp_path: Path) -> None:
    """The pump starts with the script; lines it reads before the UI (or --no-ui's printer)
    listens are kept for it."""
    script = run_cmd.Script(["sh", "-c", "echo early; printf 'no newline'"], tmp_path / "r", 1.0)
    script.proc.wait()
    script.pump.join(timeout=30)
    got: list[str] = []
    script.listen(got.append, lambda n: got.append(f"[{n} dropped]"))
    assert got == ["early", "no newline"]  # nothing let go: no count said
    assert script.finish() == 0


def test_output_the_first_listener_never_gets_is_counted(tmp_path: Path) -> None:
    """More lines than the backlog keeps before anyone listens: the first listener gets the
    newest BACKLOG and is told how many came before (the dashboard counts them as skipped,
    output.log has them); a later listener is told nothing."""
    total = parent.BACKLOG + 1234
    child = f"for i in range({total}): print(i)"
    script = run_cmd.Script([sys.executable, "-c", child], tmp_path / "r", 1.0)
    script.proc.wait()
    script.pump.join(timeout=30)
    got: list[str] = []
    script.listen(got.append, lambda n: got.append(f"[{n} dropped]"))
    assert got == ["[1234 dropped]", *(str(i) for i in range(1234, total))]  # said first
    later: list[str] = []
    script.listen(later.append, lambda n: later.append(f"[{n} dropped]"))
    assert later == []  # a later listener is told nothing
    assert script.finish() == 0
    assert (tmp_path / "r" / "output.log").read_text().count("\n") == total
