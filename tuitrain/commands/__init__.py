"""One module per command (`tuitrain VERB`): parse, call, exit code. `tuitrain/cli.py`
dispatches to them; `train` (no verb: `tuitrain --preset ...`) is the default.

The table: verb -> (the module whose main(argv) runs it, one line for --help). A new command
is one module and one line here.
"""

from __future__ import annotations

COMMANDS: dict[str, tuple[str, str]] = {
    "watch": ("tuitrain.commands.watch", "attach to a run dir, or compare 2 to 8 runs"),
    "run": ("tuitrain.commands.run", "run your script (after --) and watch what it logs"),
    "runs": ("tuitrain.commands.runs", "the runs under a folder: a table, watch, compare"),
    "parity": ("tuitrain.commands.parity", "fp32-vs-mixed-precision check"),
    "export": ("tuitrain.commands.export", "a run's records as CSV or TensorBoard"),
    "gate": ("tuitrain.commands.gate", "CI gate: a candidate run against a baseline"),
}
