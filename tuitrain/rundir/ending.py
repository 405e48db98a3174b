"""What an interactive command prints when its dashboard has gone: what happened to the run
(result, stop reason, steps, best metric, duration, where its files are) and the next
commands that apply to it (watch, resume, export, compare). The alternate screen takes the
dashboard with it; these lines stay in the terminal's scrollback.

`ending_lines(run_dir)` reads the run through rundir.summary (every segment it resumed, from
its last header and tail, never the whole file) and returns the lines; the command prints
them on stdout. A failed `tuitrain run` adds the script's last output lines (from output.log)
and where its last traceback points (the script's own file and line, a library's only when
no frame is the script's).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import textwrap
from collections.abc import Sequence
from pathlib import Path

from tuitrain.core.safefile import NotRegular, open_regular
from tuitrain.core.text import strip_controls
from tuitrain.metrics.format import format_duration
from tuitrain.metrics.records import MAX_HEADER_BYTES, format_metric
from tuitrain.rundir.layout import (
    CKPT_DIR,
    CONFIG_NAME,
    METRICS_NAME,
    OUTPUT_LOG,
    TRAIN_LOG,
    RunDir,
)
from tuitrain.rundir.read import output_tail, parse_line
from tuitrain.rundir.summary import RunSummary, run_end, summarize_run

LAST_OUTPUT_LINES = 10  # a failed script's output shown at the end
LINE_WIDTH = 200  # a longer output line is cut when shown (output.log keeps it whole)
TRACEBACK = "Traceback (most recent call last):"
FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>\S+))?')
COMMAND_INDENT = "    "  # a next command's line
WHY_INDENT = "      # "  # its reason's, on the line below when both do not fit on one
LIBRARY_MARKS = ("site-packages", "dist-packages", "/lib/python3", "\\lib\\python3")


def ending_lines(
    run_dir: str | Path, prog: str = "tuitrain", width: int | None = None
) -> list[str]:
    """The lines that close an interactive command over the run in `run_dir`: what
    happened, its files, and the next commands (none when the folder holds no run), the
    commands laid out for a terminal `width` columns wide (None: no limit)."""
    run_dir = Path(run_dir)
    summary = summarize_run(run_dir)
    if summary is None:
        return [f"{prog}: no run was written in {run_dir} (no {METRICS_NAME} with a header)."]
    end = run_end(run_dir) or {}
    script = RunDir(run_dir).output_log.is_file()
    lines = [f"{prog}: {outcome(summary, end)}", f"  {figures(summary, end)}"]
    lines.append(f"  files: {run_dir} ({', '.join(run_files(run_dir))})")
    if script and summary.status in ("failed", "crashed"):
        lines += failure_lines(output_tail(run_dir))
    lines.append("  next:")
    lines += command_lines(next_commands(run_dir, summary, script), width)
    return [strip_controls(line, one_line=True) for line in lines]


def command_lines(steps: Sequence[tuple[str, str]], width: int | None = None) -> list[str]:
    """(command, why) pairs as lines a user copies from: a table (commands in a column,
    `# why` beside them) when every row fits `width`; otherwise each command on a line of
    its own whole (never cut: a copied command must run) with its `# why` beside it where
    that fits, else on the next line, wrapped at words."""
    column = max(len(command) for command, _ in steps)
    table = [f"{COMMAND_INDENT}{command:<{column}}  # {why}" for command, why in steps]
    if width is None or all(len(line) <= width for line in table):
        return table
    lines = []
    for command, why in steps:
        line = f"{COMMAND_INDENT}{command}  # {why}"
        if len(line) <= width:
            lines.append(line)
            continue
        lines.append(f"{COMMAND_INDENT}{command}")
        lines += textwrap.wrap(
            why,
            width=max(width, len(WHY_INDENT) + 20),
            initial_indent=WHY_INDENT,
            subsequent_indent=WHY_INDENT,
            break_long_words=False,
            break_on_hyphens=False,
        )
    return lines


def terminal_width() -> int | None:
    """The width of the terminal stdout shows in (COLUMNS where set); None when stdout is
    no terminal (a pipe, a file: nothing wraps there)."""
    columns = shutil.get_terminal_size((0, 0)).columns
    return columns if columns > 0 else None


def compare_lines(
    run_dirs: Sequence[Path], prog: str = "tuitrain watch --compare", width: int | None = None
) -> list[str]:
    """The ending of a comparison: one line per run (what happened, its figures), then the
    next commands (the gate between the first two, each run's own view), laid out for
    `width` columns as `ending_lines` does."""
    lines = [f"{prog}:"]
    width = max(len(str(d)) for d in run_dirs)
    for run_dir in run_dirs:
        summary = summarize_run(run_dir)
        if summary is None:
            lines.append(f"  {str(run_dir):<{width}}  no run")
            continue
        end = run_end(run_dir) or {}
        said = f"{outcome(summary, end)} · {figures(summary, end)}"
        lines.append(f"  {str(run_dir):<{width}}  {said}")
    first, second = (shlex.quote(str(d)) for d in run_dirs[:2])
    lines.append("  next:")
    steps = [
        (f"tuitrain gate {first} {second}", "is the second slower or worse? (CI)"),
        (f"tuitrain watch {second}", "one run's own dashboard"),
    ]
    lines += command_lines(steps, width)
    return [strip_controls(line, one_line=True) for line in lines]


def print_ending(
    run_dir: str | Path | None, prog: str = "tuitrain", compare: Sequence[Path] = ()
) -> None:
    """`ending_lines` (or `compare_lines` for `compare`) on stdout, after the dashboard has
    gone (nothing for no run dir; a stdout nobody reads any more is no error)."""
    if os.environ.get("TEXTUAL_DRIVER"):  # served (textual serve): stdout was the driver's
        return
    width = terminal_width()
    if compare:
        lines = compare_lines(compare, width=width)
    elif run_dir is not None:
        lines = ending_lines(run_dir, prog, width)
    else:
        return
    with contextlib.suppress(OSError, ValueError):
        print("\n".join(lines), flush=True)


def outcome(summary: RunSummary, end: dict) -> str:
    """`run completed (max_steps reached)`, `run still running` ..."""
    status = summary.status
    reason = str(end.get("reason") or "").strip()
    words = {
        "running": "run still running (the viewer closed, the training goes on)",
        "silent": "run silent: nothing written for a while, and no end record",
        "crashed": "run crashed: its process is gone and it wrote no end record",
    }
    text = words.get(status, f"run {status}")
    return text + (f" ({reason[:300]})" if reason and status not in words else "")


def figures(summary: RunSummary, end: dict) -> str:
    """`steps 1,000 · best val_loss 0.3128 · took 2:31 (resumed once) · exit code 1`: the
    whole run (every segment it resumed)."""
    parts = ["steps " + ("–" if summary.steps is None else f"{summary.steps:,}")]
    if summary.best is not None and summary.best_metric:
        best = format_metric(summary.best, summary.best_format)
        parts.append(f"best {summary.best_metric} {best}")
    else:
        parts.append("no evaluation")
    if summary.duration_s is not None:
        parts.append(f"took {format_duration(summary.duration_s)}{resumed_text(summary)}")
    elif summary.segments > 1:
        parts.append(resumed_text(summary).strip(" ()"))
    code = end.get("exit_code")
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        parts.append(f"exit code {code}")
    return " · ".join(parts)


def resumed_text(summary: RunSummary) -> str:
    """` (resumed once)`, ` (resumed 3 times)`: the run's duration sums its segments."""
    times = summary.segments - 1
    if times < 1:
        return ""
    return " (resumed once)" if times == 1 else f" (resumed {times} times)"


def run_files(run_dir: Path) -> list[str]:
    """The files a user looks for in the run dir, those that are there."""
    names = [n for n in (METRICS_NAME, TRAIN_LOG, OUTPUT_LOG, CONFIG_NAME)
             if (run_dir / n).is_file()]  # fmt: skip
    checkpoints = checkpoint_count(run_dir)
    if checkpoints:
        names.append(f"{CKPT_DIR}/ ({checkpoints})")
    return names


def checkpoint_count(run_dir: Path) -> int:
    try:
        # whole files and sharded (FSDP) checkpoint folders
        return sum(1 for p in RunDir(run_dir).checkpoints.iterdir() if p.suffix in (".pt", ".dcp"))
    except OSError:
        return 0


def failure_lines(output: Sequence[str]) -> list[str]:
    """A failed script's last output lines and where its last traceback points."""
    if not output:
        return [f"  the script printed nothing ({OUTPUT_LOG} is empty)"]
    shown = [line.rstrip() for line in output[-LAST_OUTPUT_LINES:]]
    lines = [f"  last output ({OUTPUT_LOG}):"]
    lines += [f"    | {line[:LINE_WIDTH]}{'…' if len(line) > LINE_WIDTH else ''}" for line in shown]
    if where := traceback_site(output):
        lines.append(f"  traceback points at {where}")
    return lines


def traceback_site(output: Sequence[str]) -> str | None:
    """`path:line (in func)` of the last traceback in `output`: its innermost frame in the
    script's own code (not site-packages or the standard library), else its innermost
    frame; None without a traceback."""
    starts = [i for i, line in enumerate(output) if line.strip().startswith(TRACEBACK)]
    if not starts:
        return None
    frames = [m for line in output[starts[-1] :] if (m := FRAME.match(line))]
    if not frames:
        return None
    own = [m for m in frames if not is_library(m["path"])]
    frame = (own or frames)[-1]
    where = f"{frame['path']}:{frame['line']}"
    return where + (f" (in {frame['func']})" if frame["func"] else "")


def is_library(path: str) -> bool:
    return path.startswith("<") or any(mark in path for mark in LIBRARY_MARKS)


def next_commands(run_dir: Path, summary: RunSummary, script: bool) -> list[tuple[str, str]]:
    """(command, why) for each next step that applies to this run."""
    here = shlex.quote(str(run_dir))
    steps = []
    if summary.status in ("running", "silent"):
        steps.append((f"tuitrain watch {here}", "follow it again"))
    else:
        steps.append((f"tuitrain watch {here}", "its dashboard again, from its files"))
    resumable = summary.status in ("stopped", "failed", "crashed", "silent")
    if not script and resumable and checkpoint_count(run_dir):
        steps.append(
            (f"tuitrain --resume auto --run-dir {here}", "continue from its last checkpoint")
        )
    csv = shlex.quote(f"{run_dir.name}.csv")
    steps.append((f"tuitrain export {here} --format csv > {csv}", "its metrics as CSV"))
    other = sibling_run(run_dir)
    if other is not None:
        steps.append(
            (
                f"tuitrain watch --compare {shlex.quote(str(other))} {here}",
                f"beside {other.name}, the run before it",
            )
        )
    else:
        steps.append((f"tuitrain runs {shlex.quote(str(run_dir.parent))}", "every run beside it"))
    return steps


SIBLINGS_READ = 50  # headers read, newest first, looking for a run of the same kind


def sibling_run(run_dir: Path) -> Path | None:
    """The newest other run in the same folder (by its metrics file's time) of the same
    preset and task (a fashion run is not compared with a script's), or None."""
    kind = run_kind(run_dir)
    found: list[tuple[float, Path]] = []
    try:
        children = list(run_dir.parent.iterdir())
    except OSError:
        return None
    for child in children[:10_000]:
        if child.name == run_dir.name:
            continue
        try:
            found.append((RunDir(child).metrics.stat().st_mtime, child))
        except OSError:
            continue
    found.sort(reverse=True)
    for _, child in found[:SIBLINGS_READ]:
        if kind is not None and run_kind(child) == kind:
            return child
    return None


def run_kind(run_dir: Path) -> tuple[object, object] | None:
    """(preset, task) from the run's header line, None when it has none."""
    try:
        with open_regular(RunDir(run_dir).metrics, "rb") as f:
            header = parse_line(f.readline(MAX_HEADER_BYTES + 1).rstrip(b"\n"))
    except (OSError, NotRegular):
        return None
    if header is None or header.get("type") != "header":
        return None
    return header.get("preset"), header.get("task")
