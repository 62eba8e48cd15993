"""Sensitivity of common queries, and post-processing that keeps a release private.

Every sensitivity helper is a pure function of *public* parameters (bounds, contribution
limits, a public bound on the dataset size). None of them reads data. Results are rounded
toward +inf, so a mechanism calibrated with them never adds too little noise.

Floating-point sums
-------------------
A sum computed in floating point is not the real sum: each addition rounds. Casacuberta,
Shoemate, Vadhan & Wagaman (2022), "Widespread underestimation of sensitivity in
differentially private libraries and how to fix it" (ACM CCS), show that the rounding can make
two neighbouring datasets' float sums differ by more than the textbook sensitivity, so noise
calibrated to the textbook value does not give the claimed guarantee. :func:`bounded_sum_sensitivity`
adds the rounding error explicitly, which needs a public bound on the number of terms.

Post-processing
---------------
:func:`nonnegative` and :func:`noisy_mean` only transform already-released noisy values (and
public bounds), so by the post-processing property of differential privacy (Dwork & Roth 2014,
Proposition 2.1) their outputs carry exactly the guarantee of their inputs and cost nothing.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import DTypeLike, NDArray

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_bounds, check_data, check_integer, check_positive
from dpkit.guarantees import NeighbourRelation

__all__ = [
    "bounded_sum_sensitivity",
    "clamp",
    "count_sensitivity",
    "float_sum_error",
    "histogram_sensitivity",
    "mean_sensitivity",
    "noisy_mean",
    "nonnegative",
]


# ---------------------------------------------------------------------------------------------
# Exact arithmetic, rounded up at the end
# ---------------------------------------------------------------------------------------------


def _float_up(value: Fraction) -> float:
    """The smallest float >= ``value`` (``float()`` rounds to nearest, possibly down)."""
    result = float(value)
    if Fraction(result) < value:
        result = math.nextafter(result, math.inf)
    return result


def _sqrt_up(value: Fraction) -> float:
    """The smallest float whose square is >= ``value`` (an upper bound on sqrt(value))."""
    result = math.sqrt(value)
    while Fraction(result) ** 2 < value:
        result = math.nextafter(result, math.inf)
    return result


def _check_relation(value: object) -> NeighbourRelation:
    if not isinstance(value, NeighbourRelation):
        raise InvalidParameterError("neighbours", value, "must be a dpkit.guarantees.NeighbourRelation")
    return value


def _check_contributions(value: Any) -> int:
    return check_integer("max_contributions", value, minimum=1)


def _check_dtype(value: Any) -> np.dtype[Any]:
    try:
        dtype = np.dtype(value)
    except TypeError as exc:
        raise InvalidParameterError("dtype", value, "must be a numpy integer or floating dtype") from exc
    if dtype.kind not in "iuf":
        raise InvalidParameterError("dtype", value, "must be a numpy integer or floating dtype")
    return dtype


# ---------------------------------------------------------------------------------------------
# Counts
# ---------------------------------------------------------------------------------------------


def count_sensitivity(
    max_contributions: int = 1, *, neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE
) -> int:
    """Sensitivity of a count of records (optionally of those matching a public predicate).

    Under add/remove one person adds or removes at most ``max_contributions`` = k records, so
    the count moves by at most k. Under replace-one the person's k records are replaced by k
    others: the count of *all* records does not move (it is the public size), but the count of
    records matching a predicate moves by at most k, which is what is returned.

    Source: Dwork & Roth (2014), "The Algorithmic Foundations of Differential Privacy", Sec. 3.3.

    >>> count_sensitivity()
    1
    >>> count_sensitivity(3, neighbours=NeighbourRelation.REPLACE_ONE)
    3
    """
    _check_relation(neighbours)
    return _check_contributions(max_contributions)


# ---------------------------------------------------------------------------------------------
# Sums
# ---------------------------------------------------------------------------------------------


def float_sum_error(size: int, magnitude: float, dtype: DTypeLike = np.float64) -> float:
    """Upper bound on |fl(x_1 + ... + x_n) - (x_1 + ... + x_n)| for n <= ``size`` terms with |x_i| <= ``magnitude``.

    With unit roundoff u (2^-53 for float64), any order of pairwise additions (sequential, or
    numpy's pairwise summation) has error at most gamma_{n-1} * sum |x_i|, where
    gamma_k = k u / (1 - k u) (Higham 2002, "Accuracy and Stability of Numerical Algorithms",
    Sec. 4.2, eq. 4.4-4.6). So the error is at most gamma_{n-1} * n * magnitude. Float
    additions whose result is subnormal are exact, so underflow does not break the bound;
    overflow is refused.

    >>> float_sum_error(1, 5.0)
    0.0
    >>> float_sum_error(1000, 1.0) < 1000 * 1000 * 2.0**-53
    True
    """
    n = check_integer("size", size, minimum=1)
    dtype = _check_dtype(dtype)
    if dtype.kind != "f":
        return 0.0
    bound = Fraction(check_positive("magnitude", magnitude, allow_zero=True))
    unit_roundoff = Fraction(float(np.finfo(dtype).eps)) / 2
    steps = (n - 1) * unit_roundoff
    if steps >= Fraction(1, 2):
        raise InvalidParameterError(
            "size", size, f"must be below 1/(2u) = {float(1 / (2 * unit_roundoff)):g} for a {dtype} sum"
        )
    largest = Fraction(float(np.finfo(dtype).max))
    if n * bound * (1 + 2 * steps) >= largest:
        raise InvalidParameterError(
            "size", size, f"times the bound {float(bound):g} would overflow {dtype}; lower the bounds or the size"
        )
    gamma = steps / (1 - steps)
    return _float_up(gamma * n * bound)


def bounded_sum_sensitivity(
    lower: float,
    upper: float,
    *,
    max_contributions: int = 1,
    neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE,
    size: int | None = None,
    dtype: DTypeLike = np.float64,
) -> float:
    """L1 sensitivity of the sum of values clamped to [``lower``, ``upper``], as the computer computes it.

    Ideal (real-number) sensitivity with k = ``max_contributions`` records per person:

    - add/remove: k * max(|lower|, |upper|) (the person's records appear or vanish);
    - replace-one: k * (upper - lower) (each record moves across the whole range).

    Floating-point dtypes add the rounding error of *both* neighbouring sums (Casacuberta,
    Shoemate, Vadhan & Wagaman 2022, CCS, Sec. 4): each is off by at most
    gamma_{n-1} * n * M with M = max(|lower|, |upper|), u the unit roundoff, n <= ``size``
    (see :func:`float_sum_error`), so the result is ideal + 2 * gamma_{n-1} * n * M, about
    ideal + 2 n^2 u M. ``size``, a public upper bound on the number of terms in either
    dataset, is therefore required for floats. Integer sums are exact if they cannot
    overflow: with ``size`` given, size * M must fit in ``dtype`` (checked); without it the
    caller must guarantee that.

    >>> bounded_sum_sensitivity(0, 10, size=1000) > 10.0
    True
    >>> bounded_sum_sensitivity(-2, 5, max_contributions=3, dtype=np.int64)
    15.0
    >>> bounded_sum_sensitivity(-2, 5, neighbours=NeighbourRelation.REPLACE_ONE, dtype=np.int64)
    7.0
    """
    low, high = check_bounds(lower, upper)
    k = _check_contributions(max_contributions)
    relation = _check_relation(neighbours)
    kind = _check_dtype(dtype)
    n = None if size is None else check_integer("size", size, minimum=1)
    if kind.kind == "f":
        # Clamped values are stored in ``dtype``: a bound that rounds outward there widens the range.
        with np.errstate(over="ignore"):
            low = min(low, float(np.asarray(low, dtype=kind)))
            high = max(high, float(np.asarray(high, dtype=kind)))
        if not (math.isfinite(low) and math.isfinite(high)):
            raise InvalidParameterError("bounds", (lower, upper), f"must be finite in {kind}")
    magnitude = max(abs(Fraction(low)), abs(Fraction(high)))
    if relation is NeighbourRelation.ADD_REMOVE:
        ideal = k * magnitude
    else:
        ideal = k * (Fraction(high) - Fraction(low))
    if n is not None and k > n:
        raise InvalidParameterError("size", size, f"must be at least max_contributions={k}")

    if kind.kind in "iu":
        for part, value in (("lower", low), ("upper", high)):
            if value != math.floor(value):
                raise InvalidParameterError(part, value, f"must be an integer for an integer dtype ({kind})")
        info = np.iinfo(kind)
        if low < info.min or high > info.max:
            raise InvalidParameterError("bounds", (lower, upper), f"must lie within the range of {kind}")
        if n is not None and n * magnitude > info.max:
            raise InvalidParameterError(
                "size", size, f"times max(|lower|, |upper|) = {magnitude} would overflow {kind} (max {info.max})"
            )
        return _float_up(ideal)

    if n is None:
        raise InvalidParameterError(
            "size",
            None,
            "a public upper bound on the number of terms is required for a floating-point sum: rounding "
            "makes the float sum's sensitivity grow with n (Casacuberta et al. 2022), so without it no "
            "finite sensitivity holds; pass size=, or sum integers",
        )
    error = Fraction(float_sum_error(n, float(magnitude), kind))
    return _float_up(ideal + 2 * error)


def mean_sensitivity(
    lower: float,
    upper: float,
    size: int,
    *,
    max_contributions: int = 1,
    neighbours: NeighbourRelation = NeighbourRelation.REPLACE_ONE,
    dtype: DTypeLike = np.float64,
) -> float:
    """Sensitivity of the mean of values in [``lower``, ``upper``] over a PUBLIC dataset size n = ``size``.

    Under replace-one the size is fixed and public, and replacing k = ``max_contributions``
    records moves the mean by at most k (upper - lower) / n. For floats the computed mean
    fl(fl(sum) / n) also carries the sum's rounding error (see :func:`bounded_sum_sensitivity`)
    divided by n, plus the division's own rounding, at most u * |fl(sum)| / n <= u M (1 + gamma_{n-1})
    for each neighbour.

    Under add/remove the size is private, so no mean over a public n exists: release a noisy
    sum and a noisy count and combine them with :func:`noisy_mean` (post-processing). This
    function refuses ``NeighbourRelation.ADD_REMOVE`` for that reason.

    Source: Dwork & Roth (2014), Sec. 3.3; float error as in Casacuberta et al. (2022, CCS).

    >>> mean_sensitivity(0, 1, 100, dtype=np.int64)  # 1/100 plus the division's rounding
    0.010000000000000222
    >>> 0.01 < mean_sensitivity(0, 1, 100) < 0.0100001
    True
    """
    relation = _check_relation(neighbours)
    if relation is not NeighbourRelation.REPLACE_ONE:
        raise InvalidParameterError(
            "neighbours",
            neighbours,
            "a mean over a public size needs NeighbourRelation.REPLACE_ONE; under ADD_REMOVE the size is "
            "private: release a noisy sum and a noisy count and combine them with noisy_mean()",
        )
    n = check_integer("size", size, minimum=1)
    kind = _check_dtype(dtype)
    sum_sensitivity = Fraction(
        bounded_sum_sensitivity(
            lower, upper, max_contributions=max_contributions, neighbours=relation, size=n, dtype=kind
        )
    )
    result = sum_sensitivity / n
    # An integer sum is exact and its division rounds in float64; a float sum divides in its own dtype.
    division = Fraction(float(np.finfo(np.float64 if kind.kind in "iu" else kind).eps)) / 2
    low, high = check_bounds(lower, upper)
    magnitude = max(abs(Fraction(low)), abs(Fraction(high)))
    steps = (n - 1) * division
    gamma = steps / (1 - steps)
    # Rounding of the division, for each of the two neighbouring means.
    result += 2 * division * magnitude * (1 + gamma)
    return _float_up(result)


# ---------------------------------------------------------------------------------------------
# Histograms
# ---------------------------------------------------------------------------------------------


def histogram_sensitivity(
    max_contributions: int = 1,
    norm: int = 1,
    neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE,
    *,
    distinct_bins: bool = False,
) -> float:
    """L1 or L2 sensitivity of a histogram of counts over a PUBLIC set of bins.

    A person contributes at most k = ``max_contributions`` records; ``distinct_bins=True``
    promises that a person's records fall in k *different* bins (for example after keeping
    one record per person and bin). The change vector between neighbouring histograms is:

    ==============  =====================  ========================  ==============
    neighbours      norm 1                 norm 2, distinct bins     norm 2, any
    ==============  =====================  ========================  ==============
    add/remove      k                      sqrt(k)                   k
    replace-one     2k                     sqrt(2k)                  sqrt(2) k
    ==============  =====================  ========================  ==============

    Add/remove changes up to k bins by 1 each (distinct), or one bin by k. Replace-one removes
    the person's k records and adds k others: -1 on k bins and +1 on k other bins (distinct),
    or -k on one bin and +k on another. The bins must not depend on the data: releasing a bin
    only because it is non-empty needs a thresholded mechanism instead.

    Source: Dwork & Roth (2014), Sec. 3.3 (histogram queries); L2 as in Wilson et al. (2020),
    "Differentially Private SQL with Bounded User Contribution", Sec. 3.

    >>> histogram_sensitivity()
    1.0
    >>> histogram_sensitivity(4, norm=2, distinct_bins=True)
    2.0
    >>> histogram_sensitivity(3, norm=1, neighbours=NeighbourRelation.REPLACE_ONE)
    6.0
    """
    k = _check_contributions(max_contributions)
    relation = _check_relation(neighbours)
    if isinstance(norm, bool) or norm not in (1, 2):
        raise InvalidParameterError("norm", norm, "must be 1 (L1) or 2 (L2)")
    if not isinstance(distinct_bins, bool):
        raise InvalidParameterError("distinct_bins", distinct_bins, "must be a bool")
    replace = relation is NeighbourRelation.REPLACE_ONE
    if norm == 1:
        return float(2 * k if replace else k)
    if distinct_bins:
        squared = Fraction(2 * k if replace else k)
    else:
        squared = Fraction(2 * k * k if replace else k * k)
    return _sqrt_up(squared)


# ---------------------------------------------------------------------------------------------
# Clamping and post-processing
# ---------------------------------------------------------------------------------------------


def clamp(values: Any, lower: float, upper: float) -> NDArray[Any]:
    """Clamp each value into [``lower``, ``upper``]: the step that makes a sum's sensitivity finite.

    NaN, infinities, None and non-numbers are refused (a NaN would pass through the clamp
    and poison the sum). Integer data with integer bounds stays integer; everything else is
    returned as float64.

    >>> clamp([-3, 0, 2, 9], 0, 5).tolist()
    [0, 0, 2, 5]
    >>> clamp([0.5, 7.25], 1.0, 2.0).tolist()
    [1.0, 2.0]
    """
    low, high = check_bounds(lower, upper)
    array = check_data("values", values)
    if array.dtype.kind in "iu" and low.is_integer() and high.is_integer():
        return np.clip(array.astype(np.int64), int(low), int(high))
    return np.clip(array.astype(np.float64), low, high)


def nonnegative(counts: Any) -> NDArray[np.int64]:
    """Post-process noisy counts: round to the nearest integer and clip at 0.

    Post-processing of a private release (Dwork & Roth 2014, Prop. 2.1): costs no privacy and
    keeps the guarantee of ``counts``. Clipping biases small counts upward.

    >>> nonnegative([-2.4, 0.6, 3.0, 7]).tolist()
    [0, 1, 3, 7]
    """
    array = check_data("counts", counts)
    if array.dtype.kind == "f" and np.any(np.abs(array) >= 2.0**62):
        raise InvalidParameterError("counts", counts, "must have |value| < 2**62")
    return np.maximum(np.rint(array), 0).astype(np.int64)


def noisy_mean(noisy_sum: Any, noisy_count: Any, lower: float, upper: float) -> NDArray[np.float64] | float:
    """Post-process a noisy sum and a noisy count into a mean in [``lower``, ``upper``].

    The count is floored at 1 (a noisy count can be 0 or negative) and the ratio is clipped
    into the public bounds. Both inputs must already be private releases; the result is
    post-processing (Dwork & Roth 2014, Prop. 2.1) and carries their combined guarantee
    (sum composed with count), no more. This is the way to release a mean under add/remove,
    where the size is private.

    >>> noisy_mean(52.0, 10.0, 0.0, 10.0)
    5.2
    >>> noisy_mean(30.0, -1.0, 0.0, 10.0)
    10.0
    >>> noisy_mean([1.0, -9.0], [4, 3], 0.0, 1.0).tolist()
    [0.25, 0.0]
    """
    low, high = check_bounds(lower, upper)
    total = check_data("noisy_sum", noisy_sum).astype(np.float64)
    count = check_data("noisy_count", noisy_count).astype(np.float64)
    try:
        ratio = np.clip(total / np.maximum(count, 1.0), low, high)
    except ValueError as exc:
        raise InvalidParameterError(
            "noisy_count", noisy_count, f"must have a shape compatible with noisy_sum {total.shape}"
        ) from exc
    if ratio.ndim == 0:
        return float(ratio)
    return ratio
