"""format_value: a metric keeps its significant digits at every magnitude (a sweep)."""

from __future__ import annotations

import math

import pytest

from tuitrain.metrics.numbers import DASH, SIG_DIGITS, format_value

MANTISSAS = (1.0, 1.0005, 1.2345, 2.5, 5.55555, 9.87654, 9.9994, 9.99996)


def parsed(text: str) -> float:
    return float(text.replace(",", "").removesuffix("%"))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_every_magnitude_keeps_four_significant_digits(sign: float) -> None:
    for exponent in range(-307, 308):
        for mantissa in MANTISSAS:
            value = sign * mantissa * 10.0**exponent
            if not math.isfinite(value) or value == 0:
                continue
            text = format_value(value)
            # the value read back is within half a unit of the 4th significant digit
            assert parsed(text) == pytest.approx(value, rel=5.01 * 10.0**-SIG_DIGITS), text
            assert len(text) <= 11, text  # fits a panel's column whatever the magnitude
            assert text.startswith("-") == (sign < 0), text


def test_shares_keep_their_digits_too() -> None:
    for exponent in range(-300, 300):
        value = 0.123456 * 10.0**exponent
        text = format_value(value, "pct")
        assert text.endswith("%")
        assert parsed(text) == pytest.approx(value * 100, rel=5.01e-4), text


def test_the_forms_people_read() -> None:
    assert format_value(6e-11) == "6.000e-11"  # never 0.0000
    assert format_value(0.4539) == "0.4539"
    assert format_value(2.6008) == "2.601"
    assert format_value(9.99996) == "10.00"  # rounded before the form is chosen
    assert format_value(9999.6) == "10,000"
    assert format_value(28652.3) == "28,652"  # integer digits are all kept
    assert format_value(1.2e9) == "1.200e9"
    assert format_value(0.8531, "pct") == "85.31%"
    assert format_value(12) == "12"  # a count stays a count
    assert format_value(0.0) == "0"


def test_what_is_not_a_number() -> None:
    assert format_value(None) == DASH
    assert format_value(math.nan) == "nan"
    assert format_value(math.inf) == "inf"
    assert format_value(-math.inf, "pct") == "-inf"
    assert format_value(10**400) == "inf"  # an int beyond a float
    assert format_value("n/a") == "n/a"
