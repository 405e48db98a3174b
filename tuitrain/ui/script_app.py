"""The dashboard of `tuitrain run -- CMD`: `watch`'s view over the script's run, and an Output
pane with the script's stdout and stderr. `q` asks the script to stop (SIGINT, then SIGTERM
after the grace period); the app stays open on the ended run until `q` again."""

from __future__ import annotations

import queue
from typing import TYPE_CHECKING

from textual.widgets import RichLog

from tuitrain.metrics.follow import JsonlFollower
from tuitrain.metrics.store import MetricStore
from tuitrain.proctree import TreeSampler
from tuitrain.text import strip_controls
from tuitrain.ui.app import TuitrainApp

if TYPE_CHECKING:
    from tuitrain.script import Script

MAX_OUTPUT_LINES = 2000


class OutputLog(RichLog):
    """The script's own output, as text (never markup), newest at the bottom."""

    DEFAULT_CSS = """
    OutputLog {
        height: 1fr;
        min-height: 5;
        border: round $secondary-muted;
        border-title-color: $text-secondary;
        background: $background;
    }
    """

    def __init__(self) -> None:
        super().__init__(id="output", wrap=True, markup=False, highlight=False,
                         max_lines=MAX_OUTPUT_LINES)  # fmt: skip
        self.border_title = "Output"


class ScriptApp(TuitrainApp):
    """TuitrainApp in watch mode over a child script's run, with its output."""

    def __init__(self, script: Script, on_alert: str | None = None) -> None:
        store = MetricStore()
        super().__init__(store=store)
        self.script = script
        self.follower = JsonlFollower(script.metrics, store)
        self.lines: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.quit_wanted = False
        self.tree_sampler = TreeSampler(script.proc.pid)
        from tuitrain.script import AlertActions

        self.actions = AlertActions(script, on_alert, lambda text: self.notify(text, timeout=8))
        self.alerts_seen = 0
        self.ended = False
        self.title = f"tuitrain run {' '.join(script.command)}"
        self.watched_path = script.metrics
        script.listeners.append(self.lines.put)  # the pump thread never waits for the UI

    def on_mount(self) -> None:
        super().on_mount()
        self.output_log = OutputLog()
        self.mount(self.output_log, before=self.footer)
        self.follower.start()
        self.set_interval(0.2, self.drain)
        self.set_interval(0.5, self.watch_script)
        self.set_interval(2.0, self.sample_tree)

    def sample_tree(self) -> None:
        """The script's process tree (RSS, CPU, GPU memory): the Output pane's subtitle."""
        if not self.ended:
            self.output_log.border_subtitle = self.tree_sampler.sample().text()

    def on_unmount(self) -> None:
        self.follower.stop()

    def drain(self) -> None:
        for _ in range(500):
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                break
            self.output_log.write(strip_controls(line))

    def watch_script(self) -> None:
        script = self.script
        alerts = [e for e in self.store.snapshot().events if e.get("kind") == "alert"]
        for event in alerts[self.alerts_seen :]:  # what the client raised since the last look
            self.actions.see(dict(event))
        self.alerts_seen = len(alerts)
        script.escalate()
        if self.ended or script.proc.poll() is None:
            return
        self.ended = True
        code = script.finish()  # the end record exists from here on
        self.follower.poll()
        self.drain()
        self.notify(
            f"the script exited with code {code}; q closes the view",
            severity="information" if code == 0 else "error",
            timeout=10,
        )
        if self.quit_wanted:
            self.exit(code)

    def request_quit(self) -> None:
        """First q: ask the script to stop (SIGINT), and leave once it has; then: leave now."""
        script = self.script
        if self.ended or self.quit_wanted:
            self.exit(script.exit_code() if script.proc.poll() is not None else None)
            return
        self.quit_wanted = True
        script.request_stop()
        self.notify(
            f"asked the script to stop (SIGINT; SIGTERM after {script.grace_s:g} s); "
            "q again leaves now",
            timeout=5,
        )
