"""Checks of the numbers users hand the simulator's public functions (prices, times, counts).

A NaN, an infinity or a negative where a price or a duration belongs does not fail by itself:
it flows on into "nan% fewer tokens per dollar" or negative dollars. These checks raise a
``ValueError`` naming the argument and the value, in PyTorch's style ("Invalid ..."), where
the number enters.
"""
from __future__ import annotations

import math
import numbers

__all__ = ["positive", "non_negative", "positive_int", "check_number"]


def check_number(name: str, value, *, minimum: float, inclusive: bool) -> float:
    """``value`` as a float, if it is a real, finite number ``>= minimum`` (``> minimum`` when
    not ``inclusive``); else a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"Invalid {name}: expected a number, got {value!r} ({type(value).__name__})")
    number = float(value)
    within = number >= minimum if inclusive else number > minimum
    if not (math.isfinite(number) and within):
        bound = f"{'>=' if inclusive else '>'} {minimum:g}"
        raise ValueError(f"Invalid {name}: {value!r} (must be a finite number {bound})")
    return number


def positive(name: str, value) -> float:
    """A finite number > 0: a price, a step time, tokens per step."""
    return check_number(name, value, minimum=0.0, inclusive=False)


def non_negative(name: str, value) -> float:
    """A finite number >= 0: a duration that may be empty."""
    return check_number(name, value, minimum=0.0, inclusive=True)


def positive_int(name: str, value) -> int:
    """An integer >= 1 (or a float that is one): a count of steps, devices, chips."""
    whole = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) \
        and float(value).is_integer()
    if not whole or value < 1:
        raise ValueError(f"Invalid {name}: {value!r} (must be an integer >= 1)")
    return int(value)
