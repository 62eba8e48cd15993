"""Monotone searches shared across dpkit: the first integer where a test holds (samplers, accuracy
bounds), and a sign change narrowed to adjacent floats (accountants, cost model)."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["bisect_floats", "first_true"]


def first_true(predicate: Callable[[int], bool], guess: int, lowest: int = 0) -> int:
    """The smallest integer m >= ``lowest`` with ``predicate(m)``, for a predicate false below some
    point and true from it on (which must exist).

    The search starts at ``guess``: it gallops up (or down) with doubling steps until the answer is
    bracketed, then bisects, so it costs O(log |answer - guess|) calls however far the guess is.
    ``predicate(lowest - 1)`` is never called (it is taken as false).

    >>> first_true(lambda m: m * m >= 1000, guess=5)
    32
    >>> first_true(lambda m: m >= 3, guess=10**9, lowest=1)
    3
    """
    guess = max(guess, lowest)
    if predicate(guess):
        high, step = guess, 1
        low = high - step
        while low >= lowest and predicate(low):
            high, step = low, 2 * step
            low = high - step
        low = max(low, lowest - 1)  # predicate(low) is false, or low is the sentinel lowest - 1
    else:
        low, step = guess, 1
        high = low + step
        while not predicate(high):
            low, step = high, 2 * step
            high = low + step
    while high - low > 1:  # predicate(high); low is false or the sentinel
        middle = (low + high) // 2
        if predicate(middle):
            high = middle
        else:
            low = middle
    return high


def bisect_floats(below: Callable[[float], bool], low: float, high: float) -> tuple[float, float]:
    """Narrow ``[low, high]`` to adjacent floats around the point where the monotone test ``below``
    turns false (``below(low)`` true, ``below(high)`` false, both taken as given and never called).

    Returns ``(low, high)`` with ``below(low)`` true and ``below(high)`` false and no float between
    them: at most about 2,100 halvings over the whole float range.

    >>> low, high = bisect_floats(lambda x: x * x < 2.0, 1.0, 2.0)
    >>> high == math.nextafter(low, 3.0), low * low < 2.0 <= high * high
    (True, True)
    """
    while True:
        width = high - low
        middle = low + width / 2 if width < math.inf else 0.5 * low + 0.5 * high  # (-1e308, 1e308): width is inf
        if not low < middle < high:
            return low, high
        if below(middle):
            low = middle
        else:
            high = middle
