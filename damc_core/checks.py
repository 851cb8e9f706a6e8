"""Checks of setting values shared by every stage's configuration.

A setting read from a config file arrives as text (``"0.3"``), and one computed may be NaN, which
passes every range check; each check here says whether a value is a number of the kind a setting
takes, so the setting is refused where it is made, not at the first decision that compares it.
"""

from __future__ import annotations

import math
import numbers
from typing import TypeGuard


def whole_number(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an int (NumPy's too, which compares and converts as one), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def finite_number(value: object) -> TypeGuard[float]:
    """Whether ``value`` is a finite number (NumPy's too), not a bool."""
    try:
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:  # an int past a float's range
        return False


def in_unit(value: object) -> bool:
    """Whether ``value`` is a number in [0, 1] (``finite_number`` and in range)."""
    return finite_number(value) and 0 <= value <= 1
