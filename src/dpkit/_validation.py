"""Parameter checks shared by every layer: one message shape, raised before data is read."""

from __future__ import annotations

import math
import numbers
import os
import sys
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError, PrivacyWarning

__all__ = [
    "RISKY_EPSILON",
    "as_fraction",
    "check_bounds",
    "check_data",
    "check_delta",
    "check_epsilon",
    "check_integer",
    "check_positive",
    "check_probability",
    "outside_stacklevel",
    "warn_if_risky",
]

#: Above this epsilon a release warns (OpenDP's threshold as well).
RISKY_EPSILON = 5.0


def _is_real_number(value: object) -> bool:
    # bool is an int subclass; a flag passed as epsilon is a bug, never a budget.
    if isinstance(value, bool | np.bool_):
        return False
    return isinstance(value, numbers.Real)


def _to_float(value: Any) -> float:
    """float(value) for a real number, with +-inf (not OverflowError) for an int or Fraction beyond the float range."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def check_positive(name: str, value: Any, *, allow_zero: bool = False, allow_inf: bool = False) -> float:
    """Return ``value`` as a float after checking it is a real number > 0 (or >= 0), finite."""
    allowed = f"must be a real number {'>=' if allow_zero else '>'} 0" + ("" if allow_inf else " and finite")
    if not _is_real_number(value):
        raise InvalidParameterError(name, value, allowed)
    as_float = _to_float(value)
    if math.isnan(as_float) or (math.isinf(as_float) and not allow_inf):
        raise InvalidParameterError(name, value, allowed)
    if as_float < 0 or (as_float == 0 and not allow_zero):
        raise InvalidParameterError(name, value, allowed)
    return as_float


def check_epsilon(value: Any, name: str = "epsilon") -> float:
    """Check a privacy parameter epsilon: a real number, 0 < epsilon < inf."""
    return check_positive(name, value)


def check_delta(value: Any, name: str = "delta", *, allow_zero: bool = True) -> float:
    """Check a privacy parameter delta: a real number with 0 <= delta < 1 (or 0 < delta < 1)."""
    allowed = f"must be a real number with {'0 <=' if allow_zero else '0 <'} {name} < 1"
    if not _is_real_number(value):
        raise InvalidParameterError(name, value, allowed)
    as_float = _to_float(value)
    if math.isnan(as_float) or as_float >= 1 or as_float < 0 or (as_float == 0 and not allow_zero):
        raise InvalidParameterError(name, value, allowed)
    return as_float


def check_probability(name: str, value: Any, *, open_low: bool = False, open_high: bool = False) -> float:
    """Check a probability in [0, 1] (ends optionally excluded)."""
    low, high = ("(" if open_low else "["), (")" if open_high else "]")
    allowed = f"must be a real number in {low}0, 1{high}"
    if not _is_real_number(value):
        raise InvalidParameterError(name, value, allowed)
    as_float = _to_float(value)
    if math.isnan(as_float) or as_float < 0 or as_float > 1:
        raise InvalidParameterError(name, value, allowed)
    if (open_low and as_float == 0) or (open_high and as_float == 1):
        raise InvalidParameterError(name, value, allowed)
    return as_float


def check_integer(name: str, value: Any, *, minimum: int | None = None) -> int:
    """Check an integer (not a bool) at least ``minimum``."""
    allowed = "must be an integer" + (f" >= {minimum}" if minimum is not None else "")
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise InvalidParameterError(name, value, allowed)
    as_int = int(value)
    if minimum is not None and as_int < minimum:
        raise InvalidParameterError(name, value, allowed)
    return as_int


def check_bounds(lower: Any, upper: Any, *, name: str = "bounds") -> tuple[float, float]:
    """Check clamping bounds: finite reals with lower < upper."""
    for part, value in ((f"{name}.lower", lower), (f"{name}.upper", upper)):
        if not _is_real_number(value) or not math.isfinite(_to_float(value)):
            raise InvalidParameterError(part, value, "must be a finite real number")
    if not float(lower) < float(upper):
        raise InvalidParameterError(name, (lower, upper), "must satisfy lower < upper")
    return float(lower), float(upper)


def check_data(name: str, value: Any, *, integer: bool = False) -> NDArray[Any]:
    """Convert data to a numpy array, refusing None, NaN, infinities and non-numbers.

    ``integer=True`` also refuses non-integral values (for integer-noise mechanisms).
    """
    if value is None:
        raise InvalidParameterError(name, value, "must be a number or an array of numbers, not None")
    if isinstance(value, bool | np.bool_):
        raise InvalidParameterError(name, value, "must be a number or an array of numbers, not a bool")
    if isinstance(value, np.ma.MaskedArray) and np.ma.is_masked(value):
        # np.asarray would expose the hidden data of the masked (missing) entries.
        raise InvalidParameterError(name, value, "must have no masked entries (fill or drop missing data first)")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:  # ragged input
        raise InvalidParameterError(name, value, "must be a number or a regular array of numbers") from exc
    if array.dtype == object or array.dtype.kind not in "iuf":
        raise InvalidParameterError(name, value, "must contain only real numbers (no None, strings or booleans)")
    if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
        raise InvalidParameterError(name, value, "must contain only finite numbers (no NaN or infinity)")
    if integer and array.dtype.kind == "f":
        if not np.all(array == np.round(array)) or np.any(np.abs(array) >= 2.0**62):
            raise InvalidParameterError(name, value, "must contain integers (with |value| < 2**62)")
        array = array.astype(np.int64)
    return array


def as_fraction(value: float | int | Fraction) -> Fraction:
    """The exact rational a user meant by ``value``: 0.1 is 1/10, not the nearest binary double.

    Floats go through their shortest round-trip decimal (``repr``), so budgets typed in
    decimal add up exactly (10 x 0.1 == 1).
    """
    if isinstance(value, Fraction):
        return value
    if isinstance(value, numbers.Integral):
        return Fraction(int(value))
    return Fraction(repr(float(value)))


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def outside_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` made by the caller of this function that points at
    the first frame outside dpkit: the user's line, however deep inside dpkit the warning arose."""
    frame = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level


def warn_if_risky(epsilon: float, *, delta: float = 0.0, n: int | None = None) -> None:
    """Warn (PrivacyWarning, at the caller's line outside dpkit) for settings that are legal but
    weak: epsilon > 5 or delta >= 1/n."""
    if epsilon > RISKY_EPSILON:
        message = f"epsilon={epsilon} exceeds {RISKY_EPSILON}: the guarantee is weak"
        warnings.warn(message, PrivacyWarning, stacklevel=outside_stacklevel())
    if n is not None and n > 0 and delta >= 1.0 / n:
        message = f"delta={delta} >= 1/n={1.0 / n}: a mechanism could publish a whole record"
        warnings.warn(message, PrivacyWarning, stacklevel=outside_stacklevel())
