"""The one rule every numeric option is checked by: a policy's, a tool's, an executor's, a journal's.

An option is a whole number (an ``int``) or a number (an ``int`` or a ``float``); a ``bool`` is
neither. It lies in its range: above its least value (or from it, where that value is allowed),
and at most its largest. The largest is a machine word for a whole number (the engine and the
limits keep them in one) and the largest float for a number (timers and rates are floats: an
``int`` past it has no float); an option may set a smaller one. NaN lies in no range, and
infinity only in a number option that takes it ("no limit"). Each caller raises its own error
type (``OptionError``, ``ToolDefinitionError``, ``JournalError``) with the option's name and
``numeric_fault``'s text.
"""

from __future__ import annotations

import math
import sys
from typing import Any

__all__ = ["MAX_NUMBER", "MAX_WHOLE", "numeric_fault", "shown"]

# The largest whole number an option takes: a machine word.
MAX_WHOLE = sys.maxsize

# The largest number an option takes: the largest float.
MAX_NUMBER = sys.float_info.max


def numeric_fault(
    value: Any,
    *,
    integer: bool,
    least: float = 0,
    above: bool = True,
    most: float | None = None,
    infinite: bool = False,
) -> str | None:
    """What ``value`` must be, as the end of an error message, or None when it is a fit.

    ``integer``: a whole number, else any number. ``least``: the range's lower end, itself out of
    the range with ``above``. ``most``: the upper end (``MAX_WHOLE`` or ``MAX_NUMBER`` by default).
    ``infinite``: a number option that takes ``inf``. The text reads after "must be": "a positive
    integer", "a finite number of at least 0", "at most 1,000,000".
    """
    if integer:
        kind = "an integer"
    elif infinite:
        kind = "a number"
    else:
        kind = "a finite number"
    if above and least == 0:
        wanted = f"a positive {kind.split(' ', 1)[1]}"
    elif above:
        wanted = f"{kind} greater than {least:g}"
    else:
        wanted = f"{kind} of at least {least:g}"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        return wanted
    # ``not value > least`` rather than ``value <= least``: NaN is refused too. Python compares an int of any
    # size with a float exactly, so nothing here converts (or overflows).
    if not (value > least if above else value >= least):
        return wanted
    limit = (MAX_WHOLE if integer else MAX_NUMBER) if most is None else most
    if value > limit and not (infinite and isinstance(value, float) and math.isinf(value)):
        if isinstance(value, float) and math.isinf(value):
            return wanted
        return f"at most {limit:,}"
    return None


def shown(value: Any) -> str:
    """``value`` for an error message: an integer too long to print in full (Python refuses past 4,300
    digits) is described by its size."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of {value.bit_length():,} bits"
    try:
        return repr(value)
    except Exception:
        return f"a {type(value).__name__} that cannot be shown"
