"""Logs until stopped; a KeyboardInterrupt (SIGINT) finishes the run cleanly."""

import time

import tuitrain

run = tuitrain.init()
step = 0
try:
    while True:
        run.log({"loss": 1.0 / (step + 1)})
        step += 1
        if step % 10 == 0:
            print(f"step {step}", flush=True)
        time.sleep(0.02)
except KeyboardInterrupt:
    print(f"interrupted at step {step}", flush=True)
    run.finish()
