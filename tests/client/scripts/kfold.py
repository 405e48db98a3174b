"""A k-fold loop: one run a fold (tests run it directly and under `tuitrain run`).

--crash K: fold K raises before finishing; --hard K: fold K ends the process with
os._exit(3) (no exit hook, no end record); --exit CODE: sys.exit(CODE) in the last fold,
without finishing it; --with: the first fold in `with tuitrain.init() as run:`."""

import argparse
import os
import sys

import tuitrain

parser = argparse.ArgumentParser()
parser.add_argument("--folds", type=int, default=3)
parser.add_argument("--crash", type=int, default=-1)
parser.add_argument("--hard", type=int, default=-1)
parser.add_argument("--exit", type=int, default=None)
parser.add_argument("--with", dest="with_block", action="store_true")
args = parser.parse_args()

for fold in range(args.folds):
    if fold == 0 and args.with_block:
        with tuitrain.init(config={"fold": fold}) as run:
            run.log({"loss": 1.0})
        continue
    run = tuitrain.init(config={"fold": fold})
    for step in range(5):
        run.log({"loss": 1.0 / (step + 1 + fold), "fold": fold})
    print(f"fold {fold} done", flush=True)
    if fold == args.hard:
        os._exit(3)
    if fold == args.crash:
        raise RuntimeError(f"fold {fold} diverged")
    if args.exit is not None and fold == args.folds - 1:
        sys.exit(args.exit)
    run.finish()
