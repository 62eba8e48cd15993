"""Aggregate constructors for the Python builder: ``count()``, ``sum("income")``, ``quantiles(...)``.

Each returns a frozen :class:`~dpkit.engine.Aggregate`; the builder's ``agg`` names them.

>>> from dpkit import engine as E
>>> E.sum("income", bounds=(0, 200_000)).kind
'sum'
>>> E.quantiles("age", [0.25, 0.5, 0.75], bounds=(0, 120)).levels
(0.25, 0.5, 0.75)
"""

from __future__ import annotations

import builtins
import numbers
from collections.abc import Sequence

from dpkit._errors import InvalidParameterError
from dpkit.engine._plan import Aggregate

__all__ = ["count", "count_distinct", "mean", "median", "quantiles", "stddev", "sum", "variance"]

Bounds = tuple[float, float] | str | None


def count(column: str | None = None, *, weight: float = 1.0) -> Aggregate:
    """Number of rows (each person's rows bounded to ``rows_per_group`` per group); with ``column``,
    of the rows where that column is not NULL (SQL's ``COUNT(column)``), same sensitivity.

    >>> count("income").column
    'income'
    """
    return Aggregate("count", column, weight=weight)


def count_distinct(*, weight: float = 1.0) -> Aggregate:
    """Number of distinct people (privacy units) in each group: COUNT(DISTINCT person)."""
    return Aggregate("count_distinct", weight=weight)


def sum(column: str, *, bounds: Bounds = None, weight: float = 1.0) -> Aggregate:  # noqa: A001
    """Sum of ``column`` clamped to ``bounds`` (NULL and NaN count as 0 clamped into the bounds)."""
    return Aggregate("sum", column, bounds, weight=weight)


def mean(column: str, *, bounds: Bounds = None, weight: float = 1.0) -> Aggregate:
    """Mean of ``column`` clamped to ``bounds``: a noisy centred sum over a noisy count (post-processing)."""
    return Aggregate("mean", column, bounds, weight=weight)


def variance(column: str, *, bounds: Bounds = None, weight: float = 1.0, sample: bool = False) -> Aggregate:
    """Variance of ``column`` clamped to ``bounds``, from noisy count, sum and sum of squares.

    The population variance (divided by n, SQL's VAR_POP) by default; ``sample=True`` divides by
    n - 1 (SQL's VARIANCE and VAR_SAMP), with n the noisy bounded count (post-processing, free).
    """
    return Aggregate("variance", column, bounds, weight=weight, sample=sample)


def stddev(column: str, *, bounds: Bounds = None, weight: float = 1.0, sample: bool = False) -> Aggregate:
    """Standard deviation of ``column`` clamped to ``bounds`` (square root of the private variance;
    ``sample=True`` for SQL's STDDEV / STDDEV_SAMP, the default is STDDEV_POP)."""
    return Aggregate("stddev", column, bounds, weight=weight, sample=sample)


def quantiles(column: str, levels: Sequence[float], *, bounds: Bounds = None, weight: float = 1.0) -> Aggregate:
    """Several quantiles of ``column`` at once (exponential mechanism on a fine public grid)."""
    if isinstance(levels, int | float):
        levels = [levels]
    allowed = "must be a level in (0, 1) or a sequence of levels, e.g. [0.25, 0.5, 0.75]"
    if isinstance(levels, str | bytes) or not isinstance(levels, Sequence):
        raise InvalidParameterError("levels", levels, allowed)
    if any(isinstance(q, str | bytes) or not isinstance(q, numbers.Real) for q in levels):
        raise InvalidParameterError("levels", levels, allowed)
    return Aggregate("quantiles", column, bounds, tuple(builtins.float(q) for q in levels), weight=weight)


def median(column: str, *, bounds: Bounds = None, weight: float = 1.0) -> Aggregate:
    """The median of ``column``: ``quantiles(column, [0.5])``."""
    return quantiles(column, [0.5], bounds=bounds, weight=weight)
