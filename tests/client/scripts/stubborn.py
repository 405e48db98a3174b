"""Logs and ignores SIGINT: only SIGTERM (from tuitrain run's escalation) ends it."""

import signal
import time

import tuitrain

signal.signal(signal.SIGINT, signal.SIG_IGN)
run = tuitrain.init()
step = 0
while True:
    run.log({"loss": 1.0})
    step += 1
    time.sleep(0.02)
