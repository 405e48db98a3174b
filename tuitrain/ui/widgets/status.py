"""Status bar: preset, device, precision, compile, world size, progress with ETA, run state."""

from __future__ import annotations

from textual.widgets import Static

from tuitrain.metrics.format import (
    DASH,
    format_duration,
    format_number,
    precision_label,
    world_label,
)
from tuitrain.ui.panels import is_script_run
from tuitrain.ui.view import (
    Frame,
    format_seconds,
    progress,
    progress_bar,
)
from tuitrain.ui.widgets.panel import esc

STATE_STYLE = {
    "starting": "$accent",
    "compiling": "$accent",
    "running": "$success",
    "evaluating": "$secondary",
    "pausing": "$warning",
    "paused": "$warning",
    "stopping": "$warning",
    "completed": "$success",
    "stopped": "$warning",
    "failed": "$error",
    "silent": "$warning",
    "crashed": "$error",
}


class StatusBar(Static):
    """Two lines at the top: what runs where, and how far it got."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self._text: str | None = None

    def refresh_text(self, frame: Frame, *, stopping: bool = False) -> None:
        text = self.render_text(frame, stopping=stopping)
        if text != self._text:
            self._text = text
            self.update(text, layout=False)

    def render_text(self, frame: Frame, *, stopping: bool = False) -> str:
        snap = frame.snap
        header = snap.header or {}
        state = frame.state  # the state rule's (rundir.state), the viewer's own on top
        if stopping and state not in ("completed", "stopped", "failed"):
            state = "stopping"
        style = STATE_STYLE.get(state, "$foreground")
        badge = f"[b reverse {style}] {esc(state.upper())} [/]"
        device = str(header.get("device") or DASH)
        name = header.get("device_name")
        device_text = f"{esc(device)} · {esc(name)}" if name and name != device else esc(device)
        compile_on = header.get("compile")
        compile_text = DASH if compile_on is None else ("on" if compile_on else "off")
        if compile_on and state == "compiling":
            compile_text = "compiling…"
        if is_script_run(snap.header):  # a script: no precision or compile to speak of
            argv = header.get("argv")
            script = esc(argv[0]) if isinstance(argv, list) and argv else "script"
            sep = " · " if self.size.width and self.size.width < 100 else "  "
            return (
                f"{badge} [b]{esc(header.get('preset') or DASH)}[/b]{sep}{device_text}{sep}"
                f"[$foreground-muted]script[/] {script}\n" + self.progress_line(frame)
            )
        if self.size.width and self.size.width < 100:  # compact: values only
            return (
                f"{badge} [b]{esc(header.get('preset') or DASH)}[/b] · {esc(device)} · "
                f"[b]{esc(precision_label(header))}[/b] · compile {compile_text} · "
                f"world {esc(world_label(header))}\n" + self.progress_line(frame)
            )
        line1 = (
            f"{badge} [b]{esc(header.get('preset') or DASH)}[/b]  "
            f"[$foreground-muted]device[/] {device_text}  "
            f"[$foreground-muted]precision[/] [b]{esc(precision_label(header))}[/b]  "
            f"[$foreground-muted]compile[/] {compile_text}  "
            f"[$foreground-muted]world[/] {esc(world_label(header))}"
        )
        return line1 + "\n" + self.progress_line(frame)

    def progress_line(self, frame: Frame) -> str:
        prog = progress(frame.snap)
        step = prog.step if prog.step is not None else 0
        live = frame.live_step is not None and frame.live_step > step
        if live:  # steps the engine finished since the last log point: a sign of life
            step = frame.live_step or 0
        total = prog.total_steps
        frac = max(0.0, min(1.0, step / total)) if total else None
        eta = None if frame.silent_s is not None or frame.dead else prog.eta_s
        if eta is None and total and frame.live_step_s is not None and frame.snap.end is None:
            eta = max(0, total - step) * frame.live_step_s
        elapsed = (
            f"  [$foreground-muted]elapsed[/] {format_duration(frame.elapsed_s)}"
            if frame.elapsed_s is not None
            else ""
        )
        parts = []
        if prog.epoch is not None or prog.epochs is not None:
            epoch = format_number(prog.epoch) if prog.epoch is not None else DASH
            epochs = prog.epochs if prog.epochs is not None else DASH
            parts.append(f"[$foreground-muted]epoch[/] {esc(epoch)}/{esc(epochs)}  ")
        of = f"/{esc(total)}" if total else ""
        parts.append(f"[$foreground-muted]step[/] {esc(step)}{of}")
        if frame.live_step_s is not None and (live or frame.snap.latest is None):
            parts.append(f" [$foreground-muted]({format_seconds(frame.live_step_s)}/step)[/]")
        if total:
            width = max(10, min(40, self.size.width - 66)) if self.size.width else 20
            pct = f"{frac * 100:3.0f}%" if frac is not None else "  —"
            parts.append(f"  [$primary]{progress_bar(frac, width)}[/] {pct}  ")
            parts.append(f"[$foreground-muted]ETA[/] [b]{format_duration(eta)}[/b]")
        return "".join(parts) + elapsed
