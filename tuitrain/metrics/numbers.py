"""The one number format: a metric's value as every screen, line log and table shows it.
Torch-free and below the contract module (records.format_metric uses it), so nothing in
metrics/ imports in a circle."""

from __future__ import annotations

import math
from typing import Any

DASH = "—"
SIG_DIGITS = 4  # significant digits a metric keeps on screen, whatever its magnitude


def format_value(value: Any, fmt: str = "float", digits: int = SIG_DIGITS) -> str:
    """A metric's value with `digits` significant digits at every magnitude: ``0.4539``,
    ``2.601``, ``123.4``, ``28,652``, ``6.000e-11``, ``1.399e9``; a share (`fmt` "pct")
    as ``85.31%``; None as a dash, NaN and infinities as ``nan``, ``inf``, ``-inf``.

    Fixed notation from 1e-3 to 1e7 (trailing zeros kept, so a live value does not jitter
    in width), thousands separators from 1e4 (no decimals there: the digits are significant
    already), scientific notation outside: a 6e-11 loss never reads 0.0000. Panels, the
    metrics screen and the event log all format through this."""
    if value is None:
        return DASH
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) and fmt != "pct" and abs(value) < 10**7:
        return f"{value:,}"  # a count: 12, 28,652
    try:
        number = float(value) * (100 if fmt == "pct" else 1)
    except OverflowError:  # an int beyond a float
        number = math.inf if value > 0 else -math.inf
    if not math.isfinite(number):
        return "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")
    digits = max(1, digits)
    sci = f"{number:.{digits - 1}e}"
    rounded = float(sci)  # the branch by the rounded value: 9.99996 is 10.00, not 9.9999
    mag = abs(rounded)
    if number == 0:
        text = "0"
    elif 1e-3 <= mag < 1e4:
        text = f"{rounded:.{max(0, digits - 1 - math.floor(math.log10(mag)))}f}"
    elif 1e4 <= mag < 1e7:
        text = f"{number:,.0f}"  # every integer digit kept: 28,652
    else:
        mantissa, _, exponent = sci.partition("e")
        text = f"{mantissa}e{int(exponent)}"
    return f"{text}%" if fmt == "pct" else text
