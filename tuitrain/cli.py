"""The command line's entry point: the standard streams guarded, the verb dispatched to its
command module (`tuitrain.commands`; no verb: training, `commands/train.py`), Ctrl-C before a
command's own handler, and the exit code (a torchrun rank leaves without finalization)."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from tuitrain.commands import COMMANDS
from tuitrain.core.errors import EXIT_SIGINT
from tuitrain.host.stdio import guard_std_streams, say, stdout_gone


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def main(argv: Sequence[str] | None = None) -> int:
    guard_std_streams()  # `tuitrain >&-`: no None streams, no file on fd 1
    try:
        code = dispatch(argv)
    except KeyboardInterrupt:  # Ctrl-C before the run's own handler is installed (imports)
        args = list(sys.argv[1:] if argv is None else argv)
        if args[:1] and args[0] in COMMANDS:
            say(f"tuitrain {args[0]}: stopped by SIGINT.")
        else:
            say("tuitrain: stopped by SIGINT before training started.")
        code = EXIT_SIGINT
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # `| head`: the reader left; the interpreter's flush too
        stdout_gone()
    if argv is None and world_size() > 1:
        exit_rank(code)
    return code


def exit_rank(code: int) -> NoReturn:
    """A torchrun rank leaves without interpreter finalization, once its process group is
    destroyed and every file is closed: gloo's C++ threads torn down during finalization
    aborted a rank (SIGABRT, "terminate called without an active exception") after a
    completed run now and then, which torchrun reports as a failed job."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def dispatch(argv: Sequence[str] | None = None) -> int:
    """The verb's command module runs the rest of the line; no verb: training."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] and args[0] in COMMANDS:
        command = importlib.import_module(COMMANDS[args[0]][0])
        return int(command.main(args[1:]))
    from tuitrain.commands.train import main as train_main

    return train_main(args)
