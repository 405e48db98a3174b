"""`python -m tuitrain` (also what torchrun launches with `-m tuitrain`)."""

import os
import sys

# `python -m` puts the current directory first on the import path. tuitrain imports the model
# and data factories a config names ('package.module:function'): a module lying in whatever
# directory the command was started from must not be one of them unless the user asked for it
# (PYTHONPATH=. keeps its own entry; `tuitrain`, the console script, never had it).
if not sys.flags.safe_path and sys.path and sys.path[0] == os.getcwd():
    del sys.path[0]

from tuitrain.cli import main  # noqa: E402 - after the import path is fixed

sys.exit(main())
