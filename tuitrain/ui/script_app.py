"""The dashboard of `tuitrain run -- CMD`: `watch`'s view over the script's run, and an Output
pane with the script's stdout and stderr. `q` asks the script to stop (SIGINT, then SIGTERM
after the grace period); the app stays open on the ended run until `q` again.

The pane keeps up whatever the script prints: lines reach it through a bounded queue (the
oldest dropped and counted: "[N lines skipped]"), at most DRAIN_MAX lines (DRAIN_CHARS
characters) a tick, each
already cut to tuitrain.client.parent.LINE_CAP bytes; output.log keeps everything."""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from typing import TYPE_CHECKING

from tuitrain.client.proctree import TreeSampler
from tuitrain.core.text import strip_controls
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.follow import JsonlFollower
from tuitrain.rundir.layout import OUTPUT_LOG, RunDir
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.widgets.output import MAX_OUTPUT_LINES, OutputLog

if TYPE_CHECKING:
    from tuitrain.client.parent import Script

QUEUE_MAX = MAX_OUTPUT_LINES  # more lines than the pane keeps would never be seen
# The pane takes new lines twice a second: each take repaints it (a few ms of the UI thread
# on a small VM, CPU that a watched script's training threads lose on a 2-core machine).
DRAIN_INTERVAL_S = 0.5
DRAIN_MAX = 250  # lines written to the pane per tick ...
DRAIN_CHARS = 64_000  # ... and characters (Textual wraps ~1 µs a character: ~60 ms a tick)


class LineQueue:
    """Lines from the output pump (a thread) to the UI: at most `cap` kept; a put beyond that
    drops the oldest line and counts it. Never blocks the pump for longer than an append."""

    def __init__(self, cap: int = QUEUE_MAX) -> None:
        self.cap = cap
        self._lines: deque[str] = deque()
        self._lock = threading.Lock()
        self.skipped = 0
        self.most = 0  # the most lines ever queued (tests check the bound)

    def put(self, line: str) -> None:
        with self._lock:
            if len(self._lines) >= self.cap:
                self._lines.popleft()
                self.skipped += 1
            self._lines.append(line)
            self.most = max(self.most, len(self._lines))

    def skip(self, count: int) -> None:
        """`count` lines that never reached the queue, counted as dropped."""
        with self._lock:
            self.skipped += count

    def take(self, limit: int, max_chars: int | None = None) -> tuple[int, list[str]]:
        """(lines dropped since the last take, the newest queued lines: at most `limit`, and
        no more than `max_chars` characters together, though always the newest one), emptied;
        the older ones are counted as dropped."""
        with self._lock:
            lines, skipped = list(self._lines), self.skipped
            self._lines.clear()
            self.skipped = 0
        keep, chars = 0, 0
        for line in reversed(lines[-limit:] if limit else []):
            chars += len(line)
            if keep and max_chars is not None and chars > max_chars:
                break
            keep += 1
        skipped += len(lines) - keep
        return skipped, lines[len(lines) - keep :]


class ScriptApp(TuitrainApp):
    """TuitrainApp in watch mode over a child script's run, with its output."""

    hosts_script = True  # a script's panels (config, summary) before its header comes

    def __init__(self, script: Script, on_alert: str | None = None) -> None:
        store = MetricStore()
        super().__init__(store=store)
        self.script = script
        self.follower = JsonlFollower(script.metrics, store)
        self.lines = LineQueue()
        self.finishing: threading.Thread | None = None
        self.lines_shown = self.lines_skipped = 0  # the script's lines, written or dropped
        self.quit_wanted = False
        self.tree_sampler = TreeSampler(script.proc.pid)
        from tuitrain.client.parent import AlertActions

        self.actions = AlertActions(script, on_alert, self.say)
        self.alerts_seen = 0
        self.runs_seen = 1  # the script's runs this view knows of: it follows the newest
        self.ended = False
        self.title = f"tuitrain run {' '.join(script.command)}"
        self.watched_path = script.metrics
        # the pump thread never waits for the UI; lines it let go before now count as skipped
        script.listen(self.lines.put, self.lines.skip)

    @property
    def viewing(self) -> bool:
        """A viewer once the script has ended: the VIEWING badge, `q` closes at once."""
        return bool(getattr(self, "ended", False))

    def on_mount(self) -> None:
        # No super().on_mount(): Textual calls every class's on_mount itself (this one
        # first); calling it here too ran the dashboard's twice (its timers, its badge).
        self.output_log = OutputLog()
        self.mount(self.output_log, before=self.footer)
        self.screen.add_class("-has-output")  # the compact layout leaves it room
        self.follower.start()
        self.set_interval(DRAIN_INTERVAL_S, self.drain)
        self.set_interval(0.5, self.watch_script)
        self.set_interval(2.0, self.sample_tree)

    def say(self, text: str) -> None:
        """A notification, from the UI thread or another (an --on-alert hook's)."""
        if self._thread_id == threading.get_ident():
            self.notify(text, timeout=8)
        else:
            with contextlib.suppress(Exception):  # the app is gone
                self.call_from_thread(self.notify, text, timeout=8)

    def sample_tree(self) -> None:
        """The script's process tree (RSS, CPU, GPU memory): the Output pane's subtitle; and
        whether the script writes its records to a run dir of its own."""
        if not self.ended:
            self.output_log.border_subtitle = self.tree_sampler.sample().text()
            if note := self.script.look_elsewhere():
                self.notify(note, severity="warning", timeout=30)

    def on_unmount(self) -> None:
        self.follower.stop()

    def drain(self) -> None:
        skipped, lines = self.lines.take(DRAIN_MAX, DRAIN_CHARS)
        self.lines_skipped += skipped
        self.lines_shown += len(lines)
        if skipped:
            self.output_log.write(f"[{skipped} lines skipped; {OUTPUT_LOG} has them]")
        for line in lines:
            self.output_log.write(strip_controls(line))

    def follow_newest_run(self) -> None:
        """A later run of the script (a k-fold loop's next fold, a second `train()`): the
        view follows it, its event log saying which run started where."""
        runs = self.script.runs()
        if len(runs) <= self.runs_seen:
            return
        self.follower.poll()  # the last records of the run left behind (for its alerts)
        self.see_alerts()
        previous, self.runs_seen = runs[self.runs_seen - 1], len(runs)
        newest = runs[-1]
        self.follower.stop()
        self.store.reset()
        self.watched_path = RunDir(newest).metrics
        self.follower = JsonlFollower(self.watched_path, self.store)
        self.alerts_seen = 0
        self.reset_view()
        self._text_version = (-1, False)
        self.event_log.add(None, f"run {len(runs) - 1} is behind, in {previous}")
        self.event_log.add(None, f"run {len(runs)} started: {newest}")
        self.follower.start()

    def see_alerts(self) -> None:
        """The client's alert events since the last look: acted on (stop, --on-alert)."""
        alerts = [e for e in self.store.snapshot().events if e.get("kind") == "alert"]
        for event in alerts[self.alerts_seen :]:
            self.actions.see(dict(event))
        self.alerts_seen = len(alerts)

    def watch_script(self) -> None:
        script = self.script
        self.follow_newest_run()
        self.see_alerts()
        script.escalate()
        if self.ended or script.proc.poll() is None:
            return
        if self.finishing is None:  # ending leftovers may take the grace period: not here
            self.finishing = threading.Thread(target=script.finish, name="tuitrain-finish",
                                              daemon=True)  # fmt: skip
            self.finishing.start()
        if self.finishing.is_alive():
            return
        self.ended = True
        code = script.finish()  # done already: the end record exists from here on
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
