"""`python -m tuitrain.wandb SCRIPT [ARGS...]`: run SCRIPT unchanged with `import wandb` routed
to tuitrain (`tuitrain.wandb.install()` first), e.g. `tuitrain run -- python -m tuitrain.wandb
train.py --lr 3e-4` for a script whose frameworks report to wandb."""

from __future__ import annotations

import sys

from tuitrain.wandb._routing import run_routed


def main(argv: list[str] | None = None) -> int:
    from tuitrain.wandb import install

    return run_routed("wandb", install, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
