"""`tuitrain watch`: dashboards fed from runs' metrics files, never touching the runs.

    tuitrain watch RUN_DIR|METRICS_FILE          the dashboard of one run
    tuitrain watch --compare A B                 two runs overlaid (fp32 against bf16, say)

Follows a live headless run (new lines as they come, a replaced file starts over), replays a
finished one, reads a DDP run through rank 0's file. A long file opens fast and in bounded
memory (`JsonlFollower`'s catch-up). The viewer reads the run's records and offers only the
keys that act on them; `q` closes it at once and leaves the run alone. A live run that
tuitrain hosts (the dashboard's, or a headless one) listens on its control dir, a directory
only its user may write: there the viewer's space (pause/resume), s (checkpoint), f
(profile) and x (stop, asked first) steer it (`tuitrain.rundir.control`). It draws on a
terminal, or through the driver that
TEXTUAL_DRIVER names: `textual serve --command "tuitrain watch RUN_DIR"` (textual-dev) sets it
to Textual's web driver and serves the viewer to browsers over pipes, one process per
connection. Without either it is refused (a viewer has nothing to fall back to).

Bad targets (no such path, a folder that is no run dir, a file that is no metrics file:
`rundir.read.head_state`), a
--poll not above 0 and at most an hour, and a missing terminal are refused with one sentence
and exit code 2. The viewer leaves on SIGTERM (143), SIGINT (130) and SIGHUP (129), and when
its terminal or textual serve's connection goes away (129: the input ends, or nothing reads
the output); a viewer still there seconds later is ended (`tuitrain.ui.stopping`).
"""

from __future__ import annotations

import argparse
import math
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

from tuitrain.core.errors import EXIT_USAGE, OneLineParser, UserError, usable_path
from tuitrain.core.safefile import NotRegular, kind_of
from tuitrain.rundir.layout import CONFIG_NAME, METRICS_NAME, TRAIN_LOG
from tuitrain.rundir.read import has_run_files, head_state, metrics_path

MAX_POLL_S = 3600.0  # --poll: seconds between file checks, above 0 and at most this
FORCE_EXIT_S = 5.0  # a viewer asked to stop (signal, server gone) still here then is ended
PASS_RUN = f"pass the --run-dir of a run, or its {METRICS_NAME}."


class WatchError(Exception):
    """A target that cannot be watched: one sentence naming it and the fix."""


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="tuitrain watch",
        description="Attach the dashboard to a headless or finished run, or compare two runs\n"
        "(loss and samples/s overlaid, B/A median throughput, validation-accuracy gap).\n"
        f"Reads the runs' {METRICS_NAME}; live runs keep updating. A live run that tuitrain hosts\n"
        "(dashboard or --no-ui) can be steered from the viewer by its own user: space pauses or\n"
        "resumes, s saves a checkpoint, f profiles, x stops it (asked first); q closes the\n"
        "viewer and leaves the run alone.",
        epilog="examples:\n"
        "  tuitrain watch runs/fashion-bf16-20261129-120000\n"
        f"  tuitrain watch --compare runs/fp32-run runs/bf16-run/{METRICS_NAME}\n"
        '  textual serve --command "tuitrain watch runs/x"   in a browser (textual-dev)\n'
        "\nexit codes: 0 quit, 2 bad target or arguments, or no terminal (stdin and stderr\n"
        "must be a TTY unless TEXTUAL_DRIVER names a driver, as textual serve does),\n"
        "129 SIGHUP or the terminal or textual serve's connection gone, 130 SIGINT, 143 SIGTERM",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "target",
        nargs="*",
        default=[],
        metavar="RUN",
        help=f"a run dir or its {METRICS_NAME} (after --, a name that starts with - is a run: "
        "tuitrain watch -- -h)",
    )
    p.add_argument(
        "--compare",
        nargs="*",
        metavar="RUN",
        help=f"compare 2 to 8 runs (run dirs or {METRICS_NAME} files): A, B, C ...; ratios and"
        " gaps are each run against A (tuitrain watch --compare -- A B: names after --)",
    )
    p.add_argument(
        "--poll", type=positive_seconds, default=0.25, help="seconds between file checks"
    )
    return p


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_POLL_S:  # nan fails too; a huge wait overflows the thread's timer
        raise argparse.ArgumentTypeError(
            f"{text} is not a number of seconds above 0 and at most {MAX_POLL_S:g}; "
            "pass one like 0.25"
        )
    return value


def check_target(target: str, *, strict: bool) -> Path:
    """The metrics file of `target`, or WatchError. `strict` (compare) also refuses a folder
    without any run file; one run may be watched before its run starts writing."""
    try:
        given = usable_path(target, "watch target")
    except UserError as exc:
        raise WatchError(str(exc)) from None
    path = metrics_path(given)  # a file is the file, a folder its metrics file
    if given.exists() and not (given.is_dir() or given.is_file()):
        raise WatchError(
            f"{target} is not a run dir or a metrics file (it is a {file_kind(given)}); " + PASS_RUN
        )
    if not given.exists():
        # The metrics file of a run that is starting may not exist yet: wait for it.
        starting = path == given and has_run_files(path.parent)
        if not (starting if strict else path.parent.is_dir()):
            raise WatchError(
                f"{target} is not a run dir or a {METRICS_NAME} (no such path); " + PASS_RUN
            )
    if given.is_dir() and strict and not has_run_files(given):
        raise WatchError(
            f"{target} is not a run dir (it has no {METRICS_NAME}, {CONFIG_NAME} or "
            f"{TRAIN_LOG}); " + PASS_RUN
        )
    if path.is_dir():
        raise WatchError(f"{path} is a folder, not a metrics file; pass the run dir above it.")
    if path.exists() and not path.is_file():
        raise WatchError(
            f"{path} is {kind_of(path.stat().st_mode)}, not a regular file; a run writes "
            f"its {METRICS_NAME} as a file: pass the run dir of a run."
        )
    if path.is_file():
        try:
            head = head_state(path)
        except NotRegular as exc:
            raise WatchError(str(exc)) from None
        except OSError as exc:
            raise WatchError(
                f"{path} cannot be read ({exc.strerror or type(exc).__name__}); "
                "check its permissions."
            ) from exc
        if head == "empty" and path.suffix != ".jsonl":
            raise WatchError(
                f"{path} is an empty file, not a metrics file; pass a run dir, "
                f"or the {METRICS_NAME} in it."
            )
        if head == "other":
            raise WatchError(
                f"{path} is not a tuitrain metrics file (its first line is not a JSON record "
                f'with a "type"); pass a run dir, or the {METRICS_NAME} in it.'
            )
    return path


def file_kind(path: Path) -> str:
    mode = path.stat().st_mode
    kinds = {stat.S_ISFIFO: "pipe", stat.S_ISCHR: "device", stat.S_ISBLK: "device"}
    return next((name for test, name in kinds.items() if test(mode)), "special file")


def check_terminal() -> None:
    """WatchError unless the viewer can draw (`stdio.can_draw_ui`, the check every command
    makes): a terminal on stdin and stderr (where Textual's Linux driver reads keys and
    writes the screen) with a usable TERM, or a driver named by TEXTUAL_DRIVER (the web
    driver of `textual serve` speaks over pipes and needs none)."""
    from tuitrain.host.stdio import can_draw_ui

    if why := can_draw_ui(stdout=False):
        raise WatchError(
            f"the viewer cannot draw here: {why}; it needs a terminal to draw on (TERM set, "
            "e.g. xterm-256color): run it in one, serve it to a browser with textual serve "
            '--command "tuitrain watch RUN_DIR", or read its records directly '
            "(tuitrain export RUN_DIR --format csv)."
        )


def main(argv: Sequence[str] | None = None, back_to: str | None = None) -> int:
    """`back_to`: the view was opened from that table (`tuitrain runs`): Escape closes it
    too, and the table comes back."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.compare is not None:  # the positional RUNs after --compare's own (or after --)
        args.compare.extend(args.target)
        args.target = None
    elif len(args.target) > 1:
        parser.error(
            f"pass one run dir (or its {METRICS_NAME}), or --compare with 2 to 8 runs; got "
            f"{len(args.target)} runs"
        )
    else:
        args.target = args.target[0] if args.target else None
    if args.compare is not None and not 2 <= len(args.compare) <= 8:
        parser.error(
            f"--compare takes 2 to 8 runs, got {len(args.compare)}"
            + (": add one to compare with" if len(args.compare) < 2 else ": drop some")
        )
    if not args.compare and not args.target:
        parser.error(f"pass a run dir (or its {METRICS_NAME}), or --compare A B")
    try:
        if args.compare:
            paths = [check_target(t, strict=True) for t in args.compare]
            check_terminal()
            return compare(paths, args.poll, back_to)
        path = check_target(args.target, strict=False)
        check_terminal()
        return watch_one(path, args.poll, back_to)
    except WatchError as exc:
        print(f"tuitrain watch: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def watch_one(path: Path, poll_s: float, back_to: str | None = None) -> int:
    from tuitrain.metrics import MetricStore
    from tuitrain.rundir.follow import JsonlFollower

    store = MetricStore()
    follower = JsonlFollower(path, store, poll_s=poll_s)
    follower.poll()  # a finished run shows at once
    if not path.exists():
        print(f"tuitrain watch: waiting for {path} to appear…", file=sys.stderr)
    follower.start()
    try:
        from tuitrain.ui.app import TuitrainApp

        app = TuitrainApp(store=store)
        app.title = f"tuitrain watch {path}"
        app.watched_path = path  # a run that goes silent without an end record is flagged
        app.force_exit_s = FORCE_EXIT_S  # this process ends with the viewer
        app.back_to = back_to  # opened from `tuitrain runs`: Escape goes back to it
        code = exit_code(app.run(), app.return_code)
    finally:
        follower.stop()
    if path.name == METRICS_NAME and back_to is None:  # the viewer is gone: what happened
        from tuitrain.rundir.ending import print_ending

        print_ending(path.parent, "tuitrain watch")
    return code


def compare(paths: Sequence[Path], poll_s: float, back_to: str | None = None) -> int:
    from tuitrain.metrics import MetricStore
    from tuitrain.rundir.follow import JsonlFollower
    from tuitrain.ui.compare import COLORS, NAMES, CompareApp, Source

    sources = [
        Source(name, path, MetricStore(), color)
        for name, path, color in zip(NAMES, paths, COLORS, strict=False)
    ]
    followers = [JsonlFollower(s.path, s.store, poll_s=poll_s) for s in sources]
    for follower in followers:
        follower.poll()  # finished runs show at once
        follower.start()
    try:
        app = CompareApp(sources)
        app.title = f"tuitrain watch --compare {' '.join(map(str, paths))}"
        app.force_exit_s = FORCE_EXIT_S
        app.back_to = back_to
        code = exit_code(app.run(), app.return_code)
    finally:
        for follower in followers:
            follower.stop()
    if all(path.name == METRICS_NAME for path in paths):  # the viewer is gone: each run's end
        from tuitrain.rundir.ending import print_ending

        print_ending(None, compare=[path.parent for path in paths])
    return code


def exit_code(result: int | None, return_code: int | None) -> int:
    """The viewer's exit code: the code it exited with (a signal's, 129 when its terminal
    or server went away), else Textual's (0, or 1 after an error in the app)."""
    return result if isinstance(result, int) else return_code or 0
