"""The Textual app: a live dashboard over one hosted run, plus the keys that steer it.

`run_app(cfg, overrides)` is what `tuitrain` runs in a terminal. The engine runs in the
`RunHost`'s thread; the app polls the store on timers (text 2 Hz, plots 1 Hz, each only
when the data changed) and hears about the run's end through a posted `RunEnded` message.
Built with `host=None` it only watches the store it is given (snapshot tests, `watch`).

`run_app` returns a `RunExit`: the exit code and the run dir its last run wrote (the
host's, made once: the ending and the next commands name it). Exit codes: 0 when the last
run completed; 4 (EXIT_STOPPED) when it was stopped from the UI (q, then q or enter in the
question it asks); the run's own exit code (1, or 2 for a preset/data error) when the last
run failed and the user quit; after `d` (detach), the run's own code once it ended headless.

Built without a host the app is a viewer (`tuitrain.ui.viewing`): a VIEWING badge, only the
keys that act on what it shows, `q` closes it at once.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import events
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Grid
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import Footer

from tuitrain.core.config import Config, describe_presets
from tuitrain.core.control import MEMORY_ON_CPU
from tuitrain.core.errors import EXIT_FAILED, EXIT_SIGINT
from tuitrain.host.run import RunExit, RunHost
from tuitrain.host.stdio import native_stderr_to, say
from tuitrain.metrics.format import format_duration
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.layout import OUTPUT_LOG, TRAIN_LOG, RunDir
from tuitrain.rundir.read import OutputTail
from tuitrain.rundir.state import quiet_seconds, writer_exited
from tuitrain.ui.panels import is_script_run, panel_ids, throughput_unit
from tuitrain.ui.screens.help import HelpScreen, panel_notes
from tuitrain.ui.screens.metrics import MetricsScreen
from tuitrain.ui.screens.parity import NO_PRESET, ParityScreen
from tuitrain.ui.screens.presets import PresetScreen
from tuitrain.ui.screens.profile import ProfileScreen
from tuitrain.ui.screens.quit import QuitScreen
from tuitrain.ui.session import NEEDS_ENGINE, RunEnded
from tuitrain.ui.system import HostSampler
from tuitrain.ui.view import (
    PLOT_INTERVAL_S,
    TEXT_INTERVAL_S,
    Frame,
    StepClock,
    ThreadCpuShare,
    failure,
    latest_alert,
    paused_by_records,
    progress_after_latest,
)
from tuitrain.ui.viewing import ViewingApp
from tuitrain.ui.widgets.banner import Banner, alert_text, failure_text
from tuitrain.ui.widgets.datawait import DataWaitPanel
from tuitrain.ui.widgets.events import EventLog
from tuitrain.ui.widgets.loss import LossPanel
from tuitrain.ui.widgets.memory import MemoryPanel
from tuitrain.ui.widgets.metrics_panel import MetricsPanel
from tuitrain.ui.widgets.output import OutputLog
from tuitrain.ui.widgets.overview import OverviewPanel
from tuitrain.ui.widgets.panel import Panel, compact_layout, esc
from tuitrain.ui.widgets.scaler import ScalerPanel
from tuitrain.ui.widgets.script_panels import ConfigPanel, SummaryPanel
from tuitrain.ui.widgets.status import StatusBar
from tuitrain.ui.widgets.throughput import ThroughputPanel

if TYPE_CHECKING:
    from tuitrain.engine.setup import DistInfo

PROFILE_STEPS = 20
MEMORY_STEPS = 5  # m: steps of CUDA allocator history (each alloc/free with its stack)
JOIN_TIMEOUT_S = 30.0  # after the app exits, how long run_app waits for the engine thread
QUIT_TIP = "Asks: stop and save (q again), detach (training goes on here), or cancel"

__all__ = ["RunEnded", "TuitrainApp", "run_app"]


class TuitrainApp(ViewingApp):
    """Status, six panels and an event log over a MetricStore; keys steer the hosted run."""

    hosts_script: bool = False  # ScriptApp: a script's run, whatever its header says yet
    _shown_ids: tuple[str, ...] = ()  # the panels shown (show_panels)
    step_clock: StepClock  # live: seconds a step before the first log point

    CSS_PATH = "app.tcss"
    TITLE = "tuitrain"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (30, "-tall")]
    BINDINGS = [
        Binding("p", "pick_preset", "Preset", tooltip="Pick a preset: stop this run, start it"),
        Binding("c", "parity", "Parity", tooltip="Open the fp32-vs-mixed parity check"),
        Binding(
            "C",
            "parity(True)",
            "Parity + control",
            show=False,
            tooltip="The parity check with a control: fp32 again with another seed",
        ),
        Binding("space", "toggle_pause", "Pause", tooltip="Pause at the next step boundary"),
        # the same key while the run is paused: the footer says what it does now
        Binding("space", "resume", "Resume", tooltip="Resume the paused run"),
        # "Save", not "Checkpoint": at 80 columns the footer has room for g then
        Binding("s", "checkpoint", "Save", tooltip="Save a checkpoint after this step"),
        Binding("f", "profile", "Profile", tooltip=f"Profile the next {PROFILE_STEPS} steps"),
        Binding(
            "m",
            "memory_snapshot",
            "Memory",
            show=False,  # the footer is full; ? lists it
            tooltip=f"Record CUDA memory for {MEMORY_STEPS} steps (pytorch.org/memory_viz)",
        ),
        Binding("l", "toggle_log_y", "Log y", tooltip="Loss chart: log-scale y axis, or linear"),
        Binding(
            "g",
            "metrics",
            "Metrics",
            tooltip="A chart for every series the run holds (/ filters them)",
        ),
        Binding(
            "slash",
            "filter_metrics",
            "Filter metrics",
            show=False,
            tooltip="The metrics charts, filtered by text in their names",
        ),
        Binding("question_mark", "help", "Help", tooltip="This list of keys"),
        Binding("h,f1", "help", "Help", show=False, tooltip="This list of keys"),
        Binding("ctrl+p", "command_palette", "Commands", show=False, tooltip="Command palette"),
        Binding("x", "stop_run", "Stop run", tooltip="Stop the watched run and save (asks first)"),
        Binding("escape", "back_to_runs", "Back", tooltip="Back to the runs table"),
        Binding("q", "quit", "Quit", tooltip=QUIT_TIP),
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True, tooltip=QUIT_TIP),
        # not a priority: a focused input copies with ctrl+c, text selected on screen too
        Binding("ctrl+c", "quit", "Quit", show=False, tooltip=QUIT_TIP),
    ]

    def __init__(
        self,
        store: MetricStore | None = None,
        host: RunHost | None = None,
        overrides: Sequence[str] = (),
    ) -> None:
        super().__init__(store=store, host=host, overrides=overrides)
        self.profile_wanted = False  # f was pressed: open the table when it arrives
        self.checkpoint_wanted = False  # s was pressed: say where the checkpoint went
        self.memory_wanted = False  # m was pressed: say where the snapshot went
        self.last_event: object = None  # the newest event already acted on
        self._text_version: tuple[int, bool] = (-1, False)  # (store version, compact layout)
        self._paused_shown = False  # which of space's two footer labels shows
        self.footer = Footer()
        self.ui_cpu = ThreadCpuShare()  # the UI thread's own CPU share, shown on live runs
        self.host_sampler = HostSampler()  # the Memory panel's host line (CPU, disk, network)
        self._dead = False  # watch mode: the run's writer exited (rundir.state.writer_exited)
        self._dead_checked = -math.inf

    # -- layout ----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield Banner(id="banner")
        with Grid(id="panels"):  # all of them; `show_panels` shows the six the run gets
            yield LossPanel(id="loss")
            yield ThroughputPanel(id="throughput")
            yield MemoryPanel(id="memory")
            yield ScalerPanel(id="scaler")
            yield MetricsPanel(id="metrics")
            yield DataWaitPanel(id="datawait")
            yield OverviewPanel(id="overview")
            yield ConfigPanel(id="config")
            yield SummaryPanel(id="summary")
        yield EventLog(id="events")
        yield self.footer

    def on_mount(self) -> None:
        # Kept as references: App.query looks at the active screen, a dialog while one is open.
        self.status_bar = self.query_one(StatusBar)
        self.banner = self.query_one(Banner)
        self.event_log = self.query_one(EventLog)
        self.memory_panel = self.query_one(MemoryPanel)
        self.step_clock = StepClock()
        self.all_panels: list[Panel] = list(self.query(Panel))
        self.panels: list[Panel] = []  # the ones shown (show_panels)
        self.show_panels(self.store.snapshot().header)
        if self.host is None and not self.hosts_script:
            self.follow_output_log()
        self.set_interval(TEXT_INTERVAL_S, self.poll_text)
        self.set_interval(PLOT_INTERVAL_S, self.poll_plots)
        if self.host is not None:
            self.install_signal_handlers()
            if self.host.thread is None:
                self.launch(self.host)
        else:
            self.start_viewing()
        if not in_terminal_foreground():
            self.set_interval(1.0, self.check_terminal_size)
        self.call_after_refresh(self.poll_all)

    def show_panels(self, header: Mapping[str, Any] | None) -> None:
        """Show the panels this run gets (a script's: no scaler, data wait or model size;
        its config and summary instead), hide the rest (hidden ones are not refreshed)."""
        wanted = panel_ids(header, script=self.hosts_script)
        if wanted == self._shown_ids:
            return
        self._shown_ids = wanted
        for panel in self.all_panels:
            panel.display = panel.id in wanted
            if panel.display:
                panel.reset()
        self.panels = [p for p in self.all_panels if p.display]
        self.screen.set_class(self.hosts_script or is_script_run(header), "-script")

    def follow_output_log(self) -> None:
        """`watch` over a run dir that `tuitrain run` made: its output log's tail, followed."""
        path = self.watched_path
        log_path = RunDir(path.parent).output_log if path is not None else None
        if log_path is None or not log_path.is_file():
            return
        self.output_log = OutputLog()
        self.mount(self.output_log, before=self.footer)
        self.screen.add_class("-has-output")
        self.output_tail = OutputTail(log_path)
        self.set_interval(TEXT_INTERVAL_S, self.poll_output)
        self.call_after_refresh(self.poll_output)

    def poll_output(self) -> None:
        for line in self.output_tail.read():
            self.output_log.write(line)

    def check_terminal_size(self) -> None:
        """Under torchrun this rank runs in its own session: the terminal's SIGWINCH goes to
        the launcher, not here. Poll the size and raise the signal Textual's driver handles."""
        try:
            cols, rows = os.get_terminal_size(sys.__stdout__.fileno())  # type: ignore[union-attr]
        except (OSError, AttributeError, ValueError):
            return
        if (cols, rows) != (self.size.width, self.size.height):
            os.kill(os.getpid(), signal.SIGWINCH)

    def on_resize(self, event: events.Resize) -> None:
        """Narrow terminals: a compact footer without the palette hint, so q Quit fits."""
        footer = self.footer
        footer.compact = event.size.width < 100
        footer.show_command_palette = event.size.width >= 100
        if hasattr(self, "badge"):
            self.badge.place(event.size.width)

    def reset_view(self) -> None:
        for panel in self.panels:
            panel.reset()
        self.event_log.reset()
        self.profile_wanted = self.checkpoint_wanted = False
        self.last_event = None

    def refresh_view(self) -> None:
        self.poll_all()

    # -- polling ---------------------------------------------------------------------------
    def frame(self) -> Frame:
        snap = self.store.snapshot()
        host = self.host
        if host is None:
            path = self.watched_path
            quiet = quiet_seconds(path) if path is not None else None
            now = time.monotonic()
            if path is not None and now - self._dead_checked >= 1.0:  # a probe a second
                self._dead_checked = now
                self._dead = writer_exited(path.parent, quiet)
            live_step, live_step_s = progress_after_latest(snap)
            return Frame(  # its state: the one state rule's (rundir.state), as `runs` says
                snap,
                quiet_s=quiet,
                exited=self._dead,
                live_step=live_step,
                live_step_s=live_step_s,
            )
        ctl = host.control
        elapsed = None
        if snap.end is not None and snap.end.get("elapsed_s") is not None:
            elapsed = float(snap.end["elapsed_s"])
        elif host.started_at is not None and host.alive:
            elapsed = time.monotonic() - host.started_at
        pausing = ctl.paused and ctl.state != "paused"
        return Frame(
            snap,
            ctl.state,
            pausing,
            True,
            self.host_memory,
            elapsed,
            ui_cpu_frac=self.ui_cpu.share(),
            live_step=ctl.step,
            live_step_s=self.step_clock.seconds_per_step(ctl.step),
        )

    def refresh_host_line(self) -> None:
        """The host's CPU, disk and network since the last poll, at every poll (a finished
        run's records never change; the machine does), while the Memory panel shows."""
        if self.memory_panel in self.panels:
            self.memory_panel.refresh_host(self.host_sampler.sample())

    def poll_all(self) -> None:
        self.poll_text()
        self.poll_plots()

    def poll_text(self) -> None:
        if not self.status_bar.is_attached:
            return  # a tick that lands while the app closes: its screen is already gone
        self.ui_cpu.sample()
        self.check_steering()
        frame = self.frame()
        paused = self.run_paused()
        if paused != self._paused_shown:  # space now resumes (or pauses): the footer says so
            self._paused_shown = paused
            self.refresh_bindings()
        self.status_bar.refresh_text(frame, stopping=self.pending is not None)
        self.refresh_banner(frame)
        self.refresh_host_line()
        # The summaries depend on the layout too (compact: the per-rank table is one note).
        # The screen's breakpoint classes may change after App.on_resize: key on them.
        compact = compact_layout(self.status_bar.screen)
        if (frame.snap.version, compact) == self._text_version:
            return
        self._text_version = (frame.snap.version, compact)
        self.show_panels(frame.snap.header)
        for panel in self.panels:
            panel.refresh_text(frame)
        self.event_log.refresh_text(frame)
        self.act_on_new_events(frame)

    def poll_plots(self) -> None:
        if not self.status_bar.is_attached:
            return
        snap = self.store.snapshot()
        for panel in self.panels:
            panel.refresh_plot(snap)

    def refresh_banner(self, frame: Frame) -> None:
        banner = self.banner
        latest = frame.snap.latest or {}
        last_step = latest.get("step")
        past = f" (last logged step {last_step})" if last_step is not None else ""
        if self.pending == "quit":
            banner.show(
                f"stopping: waiting for the engine to finish its current step{past} "
                "and write its files… ([b]q[/b] again to force)"
            )
        elif self.pending == "switch" and self.pending_cfg is not None:
            banner.show(
                f"switching to preset [b]{esc(self.pending_cfg.name)}[/b]: waiting for the engine "
                f"to finish its current step{past} and write its files…"
            )
        elif frame.dead:
            run_dir = (frame.snap.header or {}).get("run_dir") or "DIR"
            banner.show(
                f"the run's process is gone{past} and wrote no end record: it was killed "
                "(kill -9, the OOM killer, a lost node); its last checkpoint resumes it: "
                f"[b]tuitrain --resume auto --run-dir {esc(run_dir)}[/b]",
                "error",
            )
        elif (quiet := frame.silent_s) is not None:
            run_dir = (frame.snap.header or {}).get("run_dir") or "DIR"
            banner.show(
                f"no new record for {format_duration(quiet)}{past} and no end record: the run "
                "may have died (kill -9, the OOM killer, a lost node); its last checkpoint "
                f"resumes it: [b]tuitrain --resume auto --run-dir {esc(run_dir)}[/b]"
            )
        elif (fail := failure(frame.snap)) is not None:
            run_dir = (frame.snap.header or {}).get("run_dir") or (
                str(self.host.run_dir) if self.host and self.host.run_dir else None
            )
            script = is_script_run(frame.snap.header)
            text = failure_text(
                fail,
                run_dir,
                can_pick=self.host is not None,  # p starts a preset: the hosted dashboard
                log=log_of(run_dir, script),
            )
            banner.show(text, "error")
        elif (alert := latest_alert(frame.snap)) is not None:
            banner.show(alert_text(alert))
        else:
            banner.clear()

    def act_on_new_events(self, frame: Frame) -> None:
        """Open the profile table and confirm the checkpoint the user asked for."""
        recent = frame.snap.events
        if not recent or recent[-1] is self.last_event:
            return
        start = 0
        for i in range(len(recent) - 1, -1, -1):
            if recent[i] is self.last_event:
                start = i + 1
                break
        self.last_event = recent[-1]
        for event in recent[start:]:
            kind = event.get("kind")
            if kind == "profile" and self.profile_wanted:
                self.profile_wanted = False
                table = str(event.get("table") or "")
                self.push_screen(ProfileScreen(str(event.get("message", "")), table))
            elif kind == "memory_snapshot" and self.memory_wanted:
                self.memory_wanted = False
                warned = event.get("level") == "warning"
                level: SeverityLevel = "warning" if warned else "information"
                self.notify(str(event.get("message", "")), severity=level, timeout=8)
            elif kind == "control" and self.steering is not None:
                if self.steering.sent.pop(str(event.get("request")), None) is not None:
                    accepted = event.get("accepted") is not False
                    level = "information" if accepted else "warning"
                    self.notify(str(event.get("message", "")), severity=level, timeout=5)
            elif kind in ("checkpoint", "checkpoint_failed") and self.checkpoint_wanted:
                self.checkpoint_wanted = False
                severity: SeverityLevel = "information" if kind == "checkpoint" else "error"
                self.notify(str(event.get("message", "")), severity=severity, timeout=6)

    def on_run_ended(self, message: RunEnded) -> None:
        """Before SessionApp's handler (Textual calls both, subclass first): act on the run's
        last events, then say so if a profile that f asked for never came."""
        if message.host is not self.host:
            return
        self.poll_text()  # a profile cut short by the run's end arrives as its last event
        if self.profile_wanted:
            self.profile_wanted = False
            self.notify(
                "the run ended before the profile started: nothing was profiled",
                severity="warning",
                timeout=6,
            )

    # -- actions ---------------------------------------------------------------------------
    async def action_quit(self) -> None:
        """A live run, or one about to start (a preset switch whose old run has ended): ask
        first (stop and save, detach, cancel); q in the question stops. Nothing running, a
        viewer, or a stop already under way: leave at once."""
        if isinstance(self.screen, QuitScreen):  # ctrl+q in the question: as q there
            self.screen.dismiss("stop")
            return
        host = self.host
        starting = self.pending == "switch"  # the next preset starts when the old run ended
        if host is None or not (host.alive or starting) or self.pending == "quit":
            self.request_quit()
            return
        run_dir = host.run_dir or host.requested_run_dir
        self.push_screen(QuitScreen(str(run_dir) if run_dir else None), self.on_quit_answer)

    def on_quit_answer(self, choice: str | None) -> None:
        if choice == "stop":
            self.request_quit()
        elif choice == "detach":
            self.detach()

    def action_resume(self) -> None:
        self.action_toggle_pause()

    def action_toggle_pause(self) -> None:
        if isinstance(self.screen, ParityScreen):
            self.notify("the run stays paused during the parity check; escape closes it")
            return
        if self.host is None:
            if paused_by_records(self.store.snapshot()):
                self.steer("resume", "resume sent to the run")
            else:
                self.steer("pause", "pause sent: the run pauses at its next step boundary")
            return
        host = self.live_host()
        if host is None or self.pending:
            return
        paused = host.control.toggle_pause()
        self.notify("pausing at the next step boundary" if paused else "resuming", timeout=2)
        self.poll_text()

    def action_checkpoint(self) -> None:
        if self.host is None:
            if self.steer("checkpoint", "checkpoint requested: saved after the current step"):
                self.checkpoint_wanted = True
            return
        host = self.live_host()
        if host is None:
            return
        host.control.request_checkpoint()
        self.checkpoint_wanted = True
        self.notify("checkpoint requested: it is saved after the current step", timeout=3)

    def action_profile(self) -> None:
        if self.host is None:
            done = f"profiling the next {PROFILE_STEPS} steps; the table opens when done"
            if self.steer("profile", done, steps=PROFILE_STEPS):
                self.profile_wanted = True
            return
        host = self.live_host()
        if host is None:
            return
        host.control.request_profile(PROFILE_STEPS)
        self.profile_wanted = True
        self.notify(f"profiling the next {PROFILE_STEPS} steps; the table opens when done")

    def action_memory_snapshot(self) -> None:
        host = self.live_host()
        if host is None:
            return
        device = str((self.store.snapshot().header or {}).get("device") or "")
        if device and not device.startswith("cuda"):
            self.notify(MEMORY_ON_CPU, severity="warning", timeout=6)
            return
        host.control.request_memory_snapshot(MEMORY_STEPS)
        self.memory_wanted = True
        self.notify(f"recording CUDA memory for the next {MEMORY_STEPS} steps", timeout=3)

    def action_help(self) -> None:
        notes = panel_notes(self._shown_ids, throughput_unit(self.store.snapshot()))
        self.push_screen(HelpScreen(self.offered(), notes=notes))

    def action_toggle_log_y(self) -> None:
        for panel in self.panels:
            if isinstance(panel, LossPanel):
                panel.toggle_log_y()
        self.poll_plots()

    def action_metrics(self) -> None:
        self.push_screen(MetricsScreen())

    def action_filter_metrics(self) -> None:
        screen = MetricsScreen()
        self.push_screen(screen)
        screen.call_after_refresh(screen.action_filter)

    def action_parity(self, with_control: bool = False) -> None:
        if isinstance(self.screen, ParityScreen):
            return
        host = self.host
        if host is None:
            self.notify(NO_PRESET, severity="warning")
            return
        run_dir = RunDir(host.run_dir).parity if host.run_dir is not None else None
        self.push_screen(
            ParityScreen(host.cfg, epochs=1, host=host, run_dir=run_dir, with_control=with_control)
        )

    def action_pick_preset(self) -> None:
        if isinstance(self.screen, ParityScreen):
            self.notify("close the parity check first (escape), then press p", timeout=4)
            return
        if self.host is None:
            self.notify(NEEDS_ENGINE, severity="warning")
            return
        if self.pending == "quit" or isinstance(self.screen, PresetScreen):
            return
        current = self.host.cfg.name
        picker = PresetScreen(describe_presets(), current, self.switch_overrides())
        self.push_screen(picker, self.switch_to)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The command palette lists every key's action, from BINDINGS."""
        yield from super().get_system_commands(screen)
        seen: set[str] = set()
        for binding in self.offered():
            if binding.action in seen or binding.action == "command_palette":
                continue
            seen.add(binding.action)
            action = binding.action
            yield SystemCommand(
                f"{binding.description} ({self.get_key_display(binding)})",
                binding.tooltip or binding.description,
                lambda action=action: self.call_later(self.run_action, action),
            )


def in_terminal_foreground() -> bool:
    """True when this process is in the terminal's foreground process group (and so gets
    its SIGWINCH); False under torchrun, whose workers start in sessions of their own."""
    try:
        return os.tcgetpgrp(sys.__stdin__.fileno()) == os.getpgrp()  # type: ignore[union-attr]
    except (OSError, AttributeError, ValueError):
        return not (sys.__stdin__ and sys.__stdin__.isatty())  # no terminal: nothing to poll


def carry_on_headless(host: RunHost, error: BaseException) -> int:
    """The dashboard failed: the run is not lost. Its traceback goes to the run dir
    (UI_TRACEBACK), training goes on to its end with line logs on stdout (checkpoints, the
    metrics file as before), its end record says the UI failed, and the exit code is 1 (the
    signal's code when one stopped it)."""
    import traceback

    from tuitrain.core.safefile import write_atomic_text
    from tuitrain.host.signals import stop_run_on_signals
    from tuitrain.metrics.sinks import ConsoleSink

    failure = f"{type(error).__name__}: {error}".splitlines()[0][:300]
    where: Path | None = None
    run_dir = host.run_dir or host.requested_run_dir
    if run_dir is not None:
        try:
            where = write_atomic_text(
                RunDir(run_dir).ui_traceback, "".join(traceback.format_exception(error))
            )
        except Exception:  # noqa: BLE001 - a full disk: the message still says what failed
            where = None
    host.ui_failed(failure, where, ConsoleSink())
    saved = f"; its traceback is in {where}" if where else ""
    if not host.alive:
        say(f"tuitrain: the dashboard failed ({failure}){saved}")
        return EXIT_FAILED
    say(
        f"tuitrain: the dashboard failed ({failure}){saved}; the run goes on headless to its "
        "end (Ctrl-C stops it at a step boundary and saves)"
    )
    host.control.resume()  # paused by a key or a parity check: nothing could unpause it now
    restore = stop_run_on_signals(host.control)
    try:
        while not host.join(0.5):
            pass
    finally:
        restore()
    result = host.result
    if host.control.exit_code is not None:
        return host.control.exit_code
    if result is not None and result.status == "failed" and result.exit_code:
        return int(result.exit_code)
    return EXIT_FAILED


def run_app(
    cfg: Config,
    overrides: Sequence[str],
    dist: DistInfo | None = None,
    resume: dict[str, Any] | None = None,
) -> RunExit:
    """Run the dashboard over `cfg` (resuming `resume`, a checkpoint's state, when given)
    until the user quits; no engine thread outlives it, unless the user detached (`d`):
    then the run goes on here headless to its end. The exit code and the last run's dir.

    The host makes the run dir once, here, before the app starts: native stderr (torch's
    C++ warnings, profiler logs) goes to the first run dir's NATIVE_STDERR while the app
    draws, so it cannot scribble over the screen. Under torchrun (`dist`, rank 0) the
    engine thread runs rank 0's part of the job and tells the other ranks what to do next
    (see `RunHost`).
    """
    host = RunHost(cfg, MetricStore(), dist=dist, resume=resume, steerable=True)
    code: int | None = None
    with native_stderr_to(RunDir(host.make_run_dir()).native_stderr):
        app = TuitrainApp(host=host, overrides=overrides)
        try:
            code = app.run()
        finally:
            last = app.host or host
            if app.ui_failure is None and not app.detached:
                last.request_stop("quit from the UI")
                last.join(0.5)
    if app.ui_failure is not None:
        return RunExit(carry_on_headless(last, app.ui_failure), last.run_dir)
    if app.detached and last.alive:
        return RunExit(carry_on_detached(last), last.run_dir)
    if last.alive:
        say(
            f"tuitrain: waiting up to {JOIN_TIMEOUT_S:.0f} s for the engine to finish its step "
            "and write its files (Ctrl-C abandons it)…"
        )
        try:
            stopped = last.join(JOIN_TIMEOUT_S)
        except KeyboardInterrupt:
            stopped = False
            code = EXIT_SIGINT
        if not stopped:
            say("tuitrain: exiting without waiting for the engine")
    if last.run_dir is not None:
        say(f"tuitrain: run dir {last.run_dir}")
    return RunExit(code if isinstance(code, int) else app.exit_code(), last.run_dir)


def carry_on_detached(host: RunHost) -> int:
    """`d` in the quit question: the dashboard is gone, the run trains on in this process
    with line logs on stdout until its end; `tuitrain watch RUN_DIR` shows it again (and
    steers it). Ctrl-C stops it at a step boundary and saves (130); SIGTERM too (143). A
    hangup does not: the terminal may close (an SSH session ends) and the run goes on. It
    reads no keys (stdin is /dev/null); once the terminal is gone (checked every half
    second) stdout and stderr, native writes included, go to the run's train.log, which
    already holds every line. The run's exit code."""
    from tuitrain.host.signals import stop_run_on_signals
    from tuitrain.host.stdio import std_streams_to, stdin_from_devnull, terminal_gone
    from tuitrain.metrics.sinks import ConsoleSink
    from tuitrain.ui.terminal import clear_after_dashboard

    hangup = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup, before a word
    clear_after_dashboard()  # only the line logs from here on: no frame of the dashboard
    lines = ConsoleSink()
    snap = host.store.snapshot() if host.store is not None else None
    if snap is not None and snap.header is not None:
        lines.declare(dict(snap.header))  # how the lines read, step N/total
    if snap is not None and snap.latest is not None:
        lines.write(dict(snap.latest))  # the first line: where the run is, its figures
    host.late_sinks.append(lines)
    paused = host.control.paused
    host.control.resume()  # nothing here could unpause it; tuitrain watch can pause again
    run_dir = host.run_dir or host.requested_run_dir or "RUN_DIR"
    say(
        f"tuitrain: dashboard closed at step {host.control.step}; the run goes on here"
        f"{' (resumed)' if paused else ''} "
        f"with line logs; closing the terminal does not stop it. tuitrain watch {run_dir} "
        "shows it again; Ctrl-C stops it at a step boundary and saves"
    )
    stdin_from_devnull()
    log = Path(host.run_dir) / host.log_name if host.run_dir is not None else Path(os.devnull)
    on_terminal = True

    def leave_terminal_if_gone() -> None:
        nonlocal on_terminal
        if on_terminal and terminal_gone():
            on_terminal = False
            lines.close()  # train.log has these lines already: no second copy there
            std_streams_to(log)

    restore = stop_run_on_signals(host.control, signums=(signal.SIGINT, signal.SIGTERM))
    try:
        while not host.join(0.5):
            leave_terminal_if_gone()
    finally:
        signal.signal(signal.SIGHUP, hangup)
        restore()
    leave_terminal_if_gone()  # gone in the last half second: the last lines land there too
    if host.run_dir is not None:
        say(f"tuitrain: run dir {host.run_dir}")
    result = host.result
    if result is not None and result.status in ("failed", "stopped"):
        return int(result.exit_code or EXIT_FAILED)
    if host.control.exit_code is not None:
        return host.control.exit_code
    return 0


def log_of(run_dir: str | None, script: bool) -> str | None:
    """The run's log file a failure's traceback is in: the engine's train.log; a script's
    output.log where `tuitrain run` wrote one; None for a script run directly."""
    if not script:
        return TRAIN_LOG
    return OUTPUT_LOG if run_dir and RunDir(run_dir).output_log.is_file() else None
