"""A viewer ends when what it draws on goes away, and on a stop signal (issue #19, point 11).

`textual serve` runs one `tuitrain watch` per browser with Textual's web driver, speaking
packets over the process's stdin and stdout (type byte, 4-byte big-endian size, payload).
Stopping the server (SIGTERM from a service manager or `timeout`) left the viewer running for
ever: the web driver only stopped reading at the end of its input, and a write to an output
without a reader raised BrokenPipeError inside the app, which then neither drew nor exited;
SIGTERM and SIGINT ended it with 0 (or 1, from that error) instead of 143 and 130. Here the
test plays the server: it closes the viewer's input, or stops reading its output, or both (a
killed server), or sends a signal, and the viewer must leave within seconds with the exit
code of a hangup (129) or of the signal. In a terminal, SIGTERM must leave the screen and
the terminal's modes as they were before the viewer drew.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ui.fake_records import records
from tuitrain.core.errors import EXIT_SIGHUP, EXIT_SIGINT, EXIT_SIGTERM

pytestmark = pytest.mark.timeout(120)

PRELUDE = b"__GANGLION__\n"  # the web driver's first line, before its packets
START_S = 60.0  # a cold start imports Textual: generous on a loaded CI machine
EXIT_S = 10.0  # "within seconds"; a viewer that is fixed leaves in well under one


def write_run(run_dir: Path, precision: str = "bf16") -> Path:
    run_dir.mkdir(parents=True)
    recs = records(precision, "cpu", steps=100)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run_dir


class ServedViewer:
    """`tuitrain watch ARGS` run as textual serve runs it, with the test as its server."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        env = {
            **os.environ,
            "TEXTUAL_DRIVER": "textual.drivers.web_driver:WebDriver",
            "TEXTUAL_COLOR_SYSTEM": "truecolor",
            "COLUMNS": "100",
            "ROWS": "30",
        }
        self.stderr_path = tmp_path / "viewer-stderr.txt"
        with open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tuitrain", "watch", *args],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env,
            )  # fmt: skip
        self.raw = bytearray()

    def packets(self) -> list[tuple[bytes, bytes]]:
        start = self.raw.find(PRELUDE)
        if start < 0:
            return []
        buf, pos, out = self.raw[start + len(PRELUDE) :], 0, []
        while pos + 5 <= len(buf):
            size = int.from_bytes(buf[pos + 1 : pos + 5], "big")
            if pos + 5 + size > len(buf):
                break
            out.append((bytes(buf[pos : pos + 1]), bytes(buf[pos + 5 : pos + 5 + size])))
            pos += 5 + size
        return out

    def screen(self) -> str:
        return "".join(p.decode("utf-8", "replace") for kind, p in self.packets() if kind == b"D")

    def meta(self) -> list[dict]:
        return [json.loads(p) for kind, p in self.packets() if kind == b"M"]

    def read(self, timeout: float) -> bool:
        """Read what the viewer wrote within `timeout`; False at the end of its output."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        if select.select([fd], [], [], timeout)[0]:
            chunk = os.read(fd, 65536)
            self.raw += chunk
            return bool(chunk)
        return True

    def wait_for(self, text: str) -> None:
        deadline = time.monotonic() + START_S
        while text not in self.screen():
            more = self.read(0.1)
            if not more or time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never showed (exit {self.proc.poll()}): "
                                     f"{self.stderr_path.read_text()[-2000:]}")  # fmt: skip

    def exit_code(self) -> int | None:
        """The exit code once the viewer left within EXIT_S (its output read meanwhile, if it
        still has a reader), else None (and the viewer is killed)."""
        deadline = time.monotonic() + EXIT_S
        try:
            while self.proc.stdout is not None and not self.proc.stdout.closed:
                if not self.read(0.1) or time.monotonic() > deadline:
                    break
            return self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return None
        finally:
            self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None and not stream.closed:
                stream.close()

    def send_meta(self, meta: dict) -> None:
        assert self.proc.stdin is not None
        payload = json.dumps(meta).encode()
        self.proc.stdin.write(b"M" + len(payload).to_bytes(4, "big") + payload)
        self.proc.stdin.flush()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


@pytest.fixture
def served(tmp_path: Path):
    viewers: list[ServedViewer] = []

    def start(*args: str) -> ServedViewer:
        viewer = ServedViewer(tmp_path, *args)
        viewers.append(viewer)
        viewer.wait_for("Throughput" if "--compare" not in args else "bf16-run")
        return viewer

    yield start
    for viewer in viewers:
        viewer.close()


@pytest.mark.parametrize("closed", ["input", "output", "both"])
def test_a_served_viewer_leaves_when_its_server_goes_away(
    tmp_path: Path, served, closed: str
) -> None:
    """The server ends (input at EOF), stops reading (no reader on the output), or is killed
    (both): the viewer leaves at once with a hangup's code, the run's files untouched."""
    viewer = served(str(write_run(tmp_path / "run")))
    before = (tmp_path / "run" / "metrics.jsonl").read_bytes()
    assert viewer.proc.stdin is not None and viewer.proc.stdout is not None
    if closed in ("input", "both"):
        viewer.proc.stdin.close()
    if closed in ("output", "both"):
        viewer.proc.stdout.close()
    code = viewer.exit_code()
    assert code == EXIT_SIGHUP, f"exit {code} ({closed} closed): {viewer.stderr()[-2000:]}"
    assert "Traceback" not in viewer.stderr()
    if closed == "input":  # its output still had a reader: it said goodbye as it ended
        assert {"type": "exit"} in viewer.meta()
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == before


@pytest.mark.parametrize(
    ("signum", "code"),
    [(signal.SIGTERM, EXIT_SIGTERM), (signal.SIGINT, EXIT_SIGINT), (signal.SIGHUP, EXIT_SIGHUP)],
    ids=["SIGTERM", "SIGINT", "SIGHUP"],
)
def test_a_stop_signal_ends_a_served_viewer_with_its_code(
    tmp_path: Path, served, signum: int, code: int
) -> None:
    viewer = served(str(write_run(tmp_path / "run")))
    viewer.proc.send_signal(signum)
    assert viewer.exit_code() == code, viewer.stderr()[-2000:]
    assert {"type": "exit"} in viewer.meta()  # it ended as an app ends, not killed


@pytest.mark.slow
def test_sigterm_ends_a_served_viewer_whose_output_is_never_read(tmp_path: Path, served) -> None:
    """A server that is there but stops reading (shutting down, stopped): the viewer's next
    write blocks on the full pipe, and its event loop with it. SIGTERM was retried around
    that write for ever; it must still end the viewer within seconds."""
    viewer = served(str(write_run(tmp_path / "run")))
    output = Path(f"/proc/{viewer.proc.pid}/fd/1")
    if not output.exists():
        pytest.skip("needs Linux's /proc to fill the viewer's output pipe")
    fd = os.open(output, os.O_WRONLY | os.O_NONBLOCK)  # the same pipe, from this side
    try:
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(fd, b"\0" * 4096)  # until it is full: no write of the viewer fits
    finally:
        os.close(fd)
    viewer.send_meta({"type": "resize", "width": 90, "height": 30})  # a frame to write
    time.sleep(0.5)
    viewer.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + EXIT_S
    while viewer.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # still not reading
    assert viewer.proc.poll() == EXIT_SIGTERM, viewer.stderr()[-2000:]


def test_sigterm_ends_a_served_compare_viewer(tmp_path: Path, served) -> None:
    a, b = write_run(tmp_path / "fp32-run", "fp32"), write_run(tmp_path / "bf16-run")
    viewer = served("--compare", str(a), str(b))
    viewer.proc.send_signal(signal.SIGTERM)
    assert viewer.exit_code() == EXIT_SIGTERM, viewer.stderr()[-2000:]


def test_a_served_compare_viewer_leaves_when_its_server_is_killed(tmp_path: Path, served) -> None:
    a, b = write_run(tmp_path / "fp32-run", "fp32"), write_run(tmp_path / "bf16-run")
    viewer = served("--compare", str(a), str(b))
    assert viewer.proc.stdin is not None and viewer.proc.stdout is not None
    viewer.proc.stdin.close()
    viewer.proc.stdout.close()
    assert viewer.exit_code() == EXIT_SIGHUP, viewer.stderr()[-2000:]


def test_sigterm_ends_a_viewer_in_a_terminal_and_gives_the_terminal_back(tmp_path: Path) -> None:
    """Killed by SIGTERM's default action, the viewer left the terminal on its alternate screen
    with echo off; stopped as on q, it leaves the screen and exits 143."""
    run = write_run(tmp_path / "run")
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    env.pop("TEXTUAL_DRIVER", None)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuitrain", "watch", str(run)],
        stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    out = bytearray()

    def drain(until: bytes | None, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and (until is None or until not in out):
            if select.select([master], [], [], 0.1)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the viewer and everything on the pty is gone
                    return
                if not chunk:
                    return
                out.extend(chunk)
            elif until is None and proc.poll() is not None:
                return

    try:
        drain(b"Throughput", START_S)
        assert b"Throughput" in out, out[-2000:]
        drawn = len(out)
        proc.send_signal(signal.SIGTERM)
        drain(None, EXIT_S)
        code = proc.wait(timeout=EXIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert code == EXIT_SIGTERM, bytes(out[-2000:])
    assert b"\x1b[?1049l" in out[drawn:]  # it left the alternate screen
