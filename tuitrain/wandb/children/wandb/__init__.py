"""`import wandb` in a process that a routed script started: `python -m tuitrain.wandb` puts
this folder first on the PYTHONPATH the script's children inherit, so a launcher that runs the
script again as plain `python script.py` (Lightning's DDP, accelerate, torchrun, a
multiprocessing spawn) finds this package, which puts tuitrain's face in its place, as
`tuitrain.wandb.install()` did in the first process."""

import sys

from tuitrain.wandb import install

del sys.modules["wandb"]  # this shim; install() routes the name to the face
install()
