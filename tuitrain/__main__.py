"""`python -m tuitrain` (also what torchrun launches with `-m tuitrain`)."""

import sys

from tuitrain.cli import main

sys.exit(main())
