"""Charts draw any finite numbers: every scale and tick computation returns, quickly, for
equal, one-float-step-apart, subnormal, huge (near 1.8e308) and mixed values; the chart
widget draws them in linear and log y without raising. A regression fails here, it does
not hang: each call runs under a deadline."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from textual.app import App, ComposeResult

from tuitrain.ui.widgets.chart import (
    Line,
    MetricChart,
    drawable_range,
    format_tick,
    log_ticks,
    nice_step,
    nice_ticks,
)

DEADLINE_S = 2.0
EXTREMES = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-300, 1.0, 1e300,
            1.7976931348623157e308, -1.7976931348623157e308, 1e308]  # fmt: skip
any_finite = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(EXTREMES),
    st.floats(min_value=0.999, max_value=1.001),  # near-equal pairs
)


def within_deadline(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args), failing (not hanging) when it does not return in DEADLINE_S."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            out.append(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the test below
            errors.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    assert not thread.is_alive(), f"{fn.__name__}{args} did not return in {DEADLINE_S} s"
    if errors:
        raise errors[0]
    return out[0]


@given(a=any_finite, b=any_finite, count=st.integers(min_value=1, max_value=12))
@settings(max_examples=400, deadline=None)
def test_ticks_return_few_finite_values_within_the_range(a: float, b: float, count: int) -> None:
    lo, hi = min(a, b), max(a, b)
    ticks = within_deadline(nice_ticks, lo, hi, count)
    assert 1 <= len(ticks) <= 64
    assert all(math.isfinite(t) for t in ticks)
    slack = (hi - lo) * 1e-6 if math.isfinite(hi - lo) else abs(hi) * 1e-6
    assert all(lo - slack <= t <= hi + slack for t in ticks), (lo, hi, ticks)
    assert ticks == sorted(ticks)
    step = within_deadline(nice_step, hi - lo if math.isfinite(hi - lo) else math.inf, count)
    assert step > 0 and math.isfinite(step)
    for t in ticks:
        label = format_tick(t)
        assert 1 <= len(label) <= 10, label


@given(a=any_finite.filter(lambda v: v > 0), b=any_finite.filter(lambda v: v > 0))
@settings(max_examples=300, deadline=None)
def test_log_ticks_return_few_positive_values(a: float, b: float) -> None:
    lo, hi = min(a, b), max(a, b)
    ticks = within_deadline(log_ticks, lo, hi, 5)
    assert 1 <= len(ticks) <= 64
    assert all(math.isfinite(t) and t >= 0 for t in ticks)


@given(a=any_finite, b=any_finite, log=st.booleans())
@settings(max_examples=400, deadline=None)
def test_drawable_range_is_finite_ordered_and_wide_enough(a: float, b: float, log: bool) -> None:
    if log and not (a > 0 and b > 0):
        a, b = abs(a) or 1.0, abs(b) or 1.0
    lo, hi = within_deadline(drawable_range, a, b, log)
    assert math.isfinite(lo) and math.isfinite(hi) and lo < hi
    assert math.isfinite(hi - lo)
    if log:
        assert lo > 0 and math.isfinite(math.log10(hi) - math.log10(lo))
    else:
        assert hi - lo >= 1e-300


def test_a_stuck_loss_one_float_step_wide_gets_ticks_at_once() -> None:
    """The reported freeze: two smoothed losses one float step apart."""
    ticks = within_deadline(nice_ticks, 1.0, math.nextafter(1.0, 2.0), 5)
    assert ticks and len(ticks) <= 64


class ChartApp(App[None]):
    def compose(self) -> ComposeResult:
        yield MetricChart(id="chart")


ys_lists = st.one_of(
    st.lists(any_finite, min_size=1, max_size=30),
    any_finite.map(lambda v: [v, v, v]),  # equal values
    st.sampled_from(
        [
            [1.0, math.nextafter(1.0, 2.0)],
            [5e-324, 1e-323, 0.0],
            [-1.7976931348623157e308, 1.7976931348623157e308, 5e-324, 0.0],
            [1e308, 1.7e308],
        ]
    ),
)


async def test_the_chart_draws_any_finite_values_in_linear_and_log_y() -> None:
    app = ChartApp()
    async with app.run_test(size=(60, 16)) as pilot:
        await pilot.pause()
        chart = app.query_one(MetricChart)

        @given(ys=ys_lists, log=st.booleans())
        @settings(
            max_examples=80,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        def check(ys: list[float], log: bool) -> None:
            chart.log_y = log
            xs = [float(i) for i in range(len(ys))]

            def draw_and_build() -> int:
                chart.draw([Line(xs, ys)], hlines=[(ys[0], "warning")])
                strips = chart.render_strips(60, 14, chart.visual_style)
                return len(strips)

            assert within_deadline(draw_and_build) > 0

        check()
        await pilot.pause()
        assert app._exception is None
