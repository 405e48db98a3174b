"""A loss spike at step 30, then a loop that never polls run.should_stop: only tuitrain run's
SIGINT (an alert whose action is stop) ends it."""

import time

import tuitrain

run = tuitrain.init()
step = 0
try:
    while True:
        run.log({"loss": 100.0 if step == 30 else 1.0})
        step += 1
        time.sleep(0.01)
except KeyboardInterrupt:
    print(f"stopped at step {step}, should_stop={run.should_stop}", flush=True)
    run.finish()
