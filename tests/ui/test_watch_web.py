"""`tuitrain watch` driven the way `textual serve` drives it: no terminal, Textual's web driver.

`textual serve` (textual-dev) starts one viewer process per browser connection with
TEXTUAL_DRIVER set to Textual's WebDriver, and speaks its packet protocol over the process's
stdin and stdout (type byte, 4-byte big-endian size, payload; "D" data, "M" meta). This test
does the same without textual-dev: the screen must come out, a `q` typed in the browser must
end the viewer with exit code 0, and the run dir must be left byte for byte as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.ui.fake_records import records

pytestmark = pytest.mark.timeout(120)

PRELUDE = b"__GANGLION__\n"


def packet(kind: bytes, payload: bytes) -> bytes:
    return kind + len(payload).to_bytes(4, "big") + payload


class Viewer:
    """A `tuitrain watch` process under the web driver, its output parsed into packets."""

    def __init__(self, *args: str, size: tuple[int, int] = (100, 30)) -> None:
        env = {
            **os.environ,
            "TEXTUAL_DRIVER": "textual.drivers.web_driver:WebDriver",
            "TEXTUAL_COLOR_SYSTEM": "truecolor",
            "COLUMNS": str(size[0]),
            "ROWS": str(size[1]),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tuitrain", "watch", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.raw = bytearray()
        self.screen = ""
        self.meta: list[dict] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := self.proc.stdout.read1(65536):
            with self._lock:
                self.raw += chunk
                self._parse()

    def _parse(self) -> None:
        start = self.raw.find(PRELUDE)
        if start < 0:
            return
        buf = self.raw[start + len(PRELUDE) :]
        screen, meta, pos = [], [], 0
        while pos + 5 <= len(buf):
            size = int.from_bytes(buf[pos + 1 : pos + 5], "big")
            if pos + 5 + size > len(buf):
                break
            kind, payload = buf[pos : pos + 1], bytes(buf[pos + 5 : pos + 5 + size])
            if kind == b"D":
                screen.append(payload.decode("utf-8", "replace"))
            elif kind == b"M":
                meta.append(json.loads(payload))
            pos += 5 + size
        self.screen, self.meta = "".join(screen), meta

    def send(self, kind: bytes, payload: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(packet(kind, payload))
        self.proc.stdin.flush()

    def wait_for(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if text in self.screen:
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        err = self.proc.stderr.read().decode() if self.proc.poll() is not None else ""
        raise AssertionError(f"{text!r} never showed (exit {self.proc.poll()}): {err[-2000:]}")

    def quit_with_q(self) -> int:
        self.send(b"M", json.dumps({"type": "focus"}).encode())
        self.send(b"D", b"q")  # the key, as the browser's terminal sends it
        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self._reader.join(timeout=5)


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def write_run(run_dir: Path, precision: str) -> Path:
    run_dir.mkdir(parents=True)
    recs = records(precision, "cpu", steps=100)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run_dir


def test_watch_under_the_web_driver_quits_on_q_and_leaves_the_run_alone(tmp_path: Path) -> None:
    run = write_run(tmp_path / "bf16-run", "bf16")
    before = digest(run)
    viewer = Viewer(str(run))
    viewer.wait_for("fashion-bf16")  # the status bar came out through the web driver
    viewer.wait_for("Throughput")
    assert viewer.quit_with_q() == 0
    assert {"type": "exit"} in viewer.meta  # the driver told the server the app ended
    assert digest(run) == before  # the viewer wrote nothing into the run dir


def test_compare_under_the_web_driver(tmp_path: Path) -> None:
    a = write_run(tmp_path / "fp32-run", "fp32")
    b = write_run(tmp_path / "bf16-run", "bf16")
    viewer = Viewer("--compare", str(a), str(b), size=(80, 24))
    viewer.wait_for("fp32-run")
    viewer.wait_for("bf16-run")
    assert viewer.quit_with_q() == 0
