"""The stop-signal handlers, in-process: what `nohup` set up is kept, the rest is put back."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tuitrain.host.signals import EARLY_SIGNALS, defer_signals, early_signal, on_stop_signals


@pytest.fixture
def saved_handlers() -> Iterator[None]:
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {signum: signal.getsignal(signum) for signum in stops}
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)
    EARLY_SIGNALS.clear()


def test_a_nohup_ignore_of_sighup_is_kept_and_sigterm_still_stops(saved_handlers) -> None:
    """Under `nohup` the run must outlive the SSH session: SIGHUP stays ignored (a hang-up
    does nothing), while SIGTERM still reaches the callback; restore puts SIGTERM back."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    seen: list[tuple[str, int]] = []
    restore = on_stop_signals(lambda name, code: seen.append((name, code)))
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    signal.raise_signal(signal.SIGHUP)  # ignored: no callback, the process lives on
    signal.raise_signal(signal.SIGTERM)
    assert seen == [("SIGTERM", 143)]
    restore()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN


def test_without_nohup_a_hangup_stops_with_129(saved_handlers) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    seen: list[tuple[str, int]] = []
    restore = on_stop_signals(lambda name, code: seen.append((name, code)))
    signal.raise_signal(signal.SIGHUP)
    restore()
    assert seen == [("SIGHUP", 129)]
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL


def test_before_the_run_an_ignored_hangup_is_not_noted(saved_handlers) -> None:
    """defer_signals (while torch imports) must not turn a nohup's ignore into a stop."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    EARLY_SIGNALS.clear()
    defer_signals()
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    signal.raise_signal(signal.SIGHUP)
    assert early_signal() is None
    signal.raise_signal(signal.SIGTERM)
    assert early_signal(pop=True) == ("SIGTERM", 143)
