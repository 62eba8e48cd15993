"""Sensitivity helpers: formulas, the float-summation correction, refusals and post-processing."""

import functools
import math
import operator
from fractions import Fraction

import numpy as np
import pytest

from dpkit import InvalidParameterError
from dpkit.guarantees import NeighbourRelation
from dpkit.mechanisms.sensitivity import (
    bounded_sum_sensitivity,
    clamp,
    count_sensitivity,
    float_sum_error,
    histogram_sensitivity,
    mean_sensitivity,
    noisy_mean,
    nonnegative,
)

ADD_REMOVE = NeighbourRelation.ADD_REMOVE
REPLACE_ONE = NeighbourRelation.REPLACE_ONE
U = 2.0**-53


def sequential_sum(values: list[float]) -> float:
    # Left-to-right float addition (Python's sum() is compensated since 3.12, so not used here).
    return functools.reduce(operator.add, values, 0.0)


# ---------------------------------------------------------------------------------------------
# Formulas
# ---------------------------------------------------------------------------------------------


def test_count_sensitivity() -> None:
    assert count_sensitivity() == 1
    assert count_sensitivity(4) == 4
    assert count_sensitivity(2, neighbours=REPLACE_ONE) == 2


@pytest.mark.parametrize(
    ("lower", "upper", "k", "neighbours", "expected"),
    [
        (0, 10, 1, ADD_REMOVE, 10),
        (-7, 3, 1, ADD_REMOVE, 7),
        (-7, 3, 2, ADD_REMOVE, 14),
        (-7, 3, 1, REPLACE_ONE, 10),
        (2, 5, 3, REPLACE_ONE, 9),
    ],
)
def test_integer_sum_has_the_ideal_sensitivity(lower, upper, k, neighbours, expected) -> None:
    got = bounded_sum_sensitivity(lower, upper, max_contributions=k, neighbours=neighbours, dtype=np.int64)
    assert got == expected
    # With a size the overflow check passes and the value is the same.
    assert (
        bounded_sum_sensitivity(lower, upper, max_contributions=k, neighbours=neighbours, size=1000, dtype=np.int64)
        == expected
    )


def test_float_sum_adds_twice_the_rounding_error() -> None:
    n, magnitude = 1000, 10.0
    gamma = Fraction(n - 1) * Fraction(U) / (1 - Fraction(n - 1) * Fraction(U))
    error = gamma * n * Fraction(magnitude)
    assert float_sum_error(n, magnitude) >= error
    assert float_sum_error(n, magnitude) == pytest.approx(float(error), rel=1e-12)
    got = bounded_sum_sensitivity(-3.0, magnitude, size=n)
    assert Fraction(got) >= 10 + 2 * error
    assert got == pytest.approx(10 + 2 * (n - 1) * U * n * magnitude, rel=1e-12)
    replace = bounded_sum_sensitivity(-3.0, magnitude, size=n, neighbours=REPLACE_ONE)
    assert Fraction(replace) >= 13 + 2 * error
    # The correction is about 2 n^2 u M: negligible for small n, dominant for huge n.
    assert bounded_sum_sensitivity(0.0, 1.0, size=2**40) > 200.0


def test_float32_sum_uses_its_own_roundoff() -> None:
    wide = bounded_sum_sensitivity(0.0, 1.0, size=1000, dtype=np.float32)
    narrow = bounded_sum_sensitivity(0.0, 1.0, size=1000, dtype=np.float64)
    assert wide > narrow > 1.0
    assert wide == pytest.approx(1 + 2 * 999 * 1000 * 2.0**-24, rel=1e-4)  # gamma_{n-1} = (n-1)u / (1 - (n-1)u)


def test_single_term_float_sum_has_no_rounding() -> None:
    assert float_sum_error(1, 1e300) == 0.0
    assert bounded_sum_sensitivity(0.0, 4.0, size=1) == 4.0


def test_mean_sensitivity() -> None:
    assert mean_sensitivity(0, 1, 100, dtype=np.int64) == pytest.approx(0.01, rel=1e-12)
    assert mean_sensitivity(0, 1, 100, dtype=np.int64) >= 0.01
    assert mean_sensitivity(-1.0, 3.0, 8, max_contributions=2) == pytest.approx(1.0, rel=1e-12)
    assert mean_sensitivity(-1.0, 3.0, 8, max_contributions=2) > 1.0
    with pytest.raises(InvalidParameterError, match="noisy_mean"):
        mean_sensitivity(0.0, 1.0, 10, neighbours=ADD_REMOVE)


@pytest.mark.parametrize(
    ("k", "norm", "neighbours", "distinct", "expected"),
    [
        (1, 1, ADD_REMOVE, False, 1.0),
        (5, 1, ADD_REMOVE, True, 5.0),
        (5, 1, REPLACE_ONE, False, 10.0),
        (4, 2, ADD_REMOVE, True, 2.0),
        (4, 2, ADD_REMOVE, False, 4.0),
        (8, 2, REPLACE_ONE, True, 4.0),
        (1, 2, REPLACE_ONE, True, math.sqrt(2)),
        (3, 2, REPLACE_ONE, False, 3 * math.sqrt(2)),
    ],
)
def test_histogram_sensitivity(k, norm, neighbours, distinct, expected) -> None:
    got = histogram_sensitivity(k, norm, neighbours, distinct_bins=distinct)
    assert got == pytest.approx(expected, rel=1e-15)


def test_histogram_l2_is_rounded_up() -> None:
    for k in range(1, 200):
        for neighbours in (ADD_REMOVE, REPLACE_ONE):
            for distinct in (True, False):
                got = Fraction(histogram_sensitivity(k, 2, neighbours, distinct_bins=distinct))
                squared = (2 if neighbours is REPLACE_ONE else 1) * (k if distinct else k * k)
                assert got * got >= squared


def test_histogram_l2_matches_the_worst_change_vector() -> None:
    k = 3
    distinct_add = np.zeros(10)
    distinct_add[:k] = 1
    assert np.linalg.norm(distinct_add) <= histogram_sensitivity(k, 2, distinct_bins=True)
    shared_replace = np.zeros(10)
    shared_replace[0], shared_replace[1] = -k, k
    assert np.linalg.norm(shared_replace) <= histogram_sensitivity(k, 2, REPLACE_ONE)


# ---------------------------------------------------------------------------------------------
# Floating-point summation: the naive sensitivity is exceeded, the corrected one is not
# ---------------------------------------------------------------------------------------------


def test_replace_one_float_sums_differ_by_twice_the_naive_sensitivity() -> None:
    # Values in [2^52, 2^52 + 1]: naive replace-one sensitivity 1. Around 2^53 the float grid
    # step is 2, so 2^53 + 1 rounds (ties to even) down to 2^53 while 2^53 + 2 is exact.
    lower, upper = 2.0**52, 2.0**52 + 1
    x = [lower, upper]
    x_prime = [upper, upper]
    difference = abs(sequential_sum(x) - sequential_sum(x_prime))
    assert abs(float(np.sum(x)) - float(np.sum(x_prime))) == difference
    naive = upper - lower
    assert difference == 2.0 > naive
    assert bounded_sum_sensitivity(lower, upper, neighbours=REPLACE_ONE, size=2) >= difference


def test_add_remove_float_sums_exceed_the_naive_sensitivity() -> None:
    # Values in [0, 0.5]: naive add/remove sensitivity 0.5. t = 1.25 ulp(0.5) rounds down to
    # one ulp after 0.5, but 0.625 ulp(1) rounds up to a whole ulp after 1.0.
    tiny = 5 * 2.0**-55
    x = [0.5, tiny]
    x_prime = [0.5, 0.5, tiny]
    difference = sequential_sum(x_prime) - sequential_sum(x)
    assert difference == 0.5 + 2.0**-53 > 0.5
    assert bounded_sum_sensitivity(0.0, 0.5, size=3) >= difference


def _adversarial_dataset(generator: np.random.Generator, n: int, lower: float, upper: float) -> np.ndarray:
    kind = generator.integers(4)
    if kind == 0:  # uniform
        values = generator.uniform(lower, upper, n)
    elif kind == 1:  # the extremes only
        values = generator.choice([lower, upper], n)
    elif kind == 2:  # big values then many tiny ones, which rounding swallows
        values = np.concatenate([np.full(n // 4, upper), generator.uniform(0, 1e-9, n - n // 4) * upper])
    else:  # values just off the grid of the running sum
        values = upper * (1 - generator.integers(0, 8, n) * 2.0**-52) - generator.uniform(0, 1, n) * 2.0**-40
    return np.clip(values, lower, upper)


@pytest.mark.parametrize("seed", range(5))
def test_corrected_bound_holds_over_adversarial_trials(seed: int) -> None:
    generator = np.random.default_rng(seed)
    for _ in range(40):
        n = int(generator.integers(2, 400))
        lower, upper = sorted(
            generator.choice([-(2.0**52), -1.0, 0.0, 1e-3, 3.0, 2.0**30, 2.0**52 + 1], 2, replace=False)
        )
        x = _adversarial_dataset(generator, n, lower, upper)
        for neighbours in (ADD_REMOVE, REPLACE_ONE):
            x_prime = x.copy()
            index = int(generator.integers(n))
            if neighbours is ADD_REMOVE:
                x_prime = np.delete(x_prime, index)
            else:
                x_prime[index] = lower if x[index] > (lower + upper) / 2 else upper
            bound = bounded_sum_sensitivity(lower, upper, neighbours=neighbours, size=n)
            for total in (lambda v: float(np.cumsum(v)[-1]), lambda v: float(np.sum(v))):
                assert abs(total(x) - total(x_prime)) <= bound
            error = float_sum_error(n, max(abs(lower), abs(upper)))
            assert abs(Fraction(float(np.cumsum(x)[-1])) - sum(map(Fraction, x.tolist()))) <= error


# ---------------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lower", "upper"),
    [(5.0, 1.0), (1.0, 1.0), (math.nan, 1.0), (0.0, math.inf), (-math.inf, 0.0), (None, 1.0), (0.0, "1"), (True, 2)],
)
def test_bad_bounds_are_refused(lower, upper) -> None:
    with pytest.raises(InvalidParameterError, match="bounds"):
        bounded_sum_sensitivity(lower, upper, size=10)
    with pytest.raises(InvalidParameterError, match="bounds"):
        mean_sensitivity(lower, upper, 10)
    with pytest.raises(InvalidParameterError, match="bounds"):
        clamp([1.0], lower, upper)


@pytest.mark.parametrize("k", [0, -1, 1.5, None, True, math.nan])
def test_bad_contribution_limits_are_refused(k) -> None:
    with pytest.raises(InvalidParameterError, match="max_contributions"):
        count_sensitivity(k)
    with pytest.raises(InvalidParameterError, match="max_contributions"):
        bounded_sum_sensitivity(0, 1, max_contributions=k, dtype=np.int64)
    with pytest.raises(InvalidParameterError, match="max_contributions"):
        histogram_sensitivity(k)


def test_float_sum_without_size_explains_why() -> None:
    with pytest.raises(InvalidParameterError, match="size") as info:
        bounded_sum_sensitivity(0.0, 1.0)
    assert "rounding" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("size", [0, -3, 2.5, None, True])
def test_bad_sizes_are_refused(size) -> None:
    with pytest.raises(InvalidParameterError, match="size"):
        mean_sensitivity(0.0, 1.0, size)
    if size is not None:
        with pytest.raises(InvalidParameterError, match="size"):
            bounded_sum_sensitivity(0.0, 1.0, size=size)


def test_integer_sums_refuse_overflow_and_fractional_bounds() -> None:
    with pytest.raises(InvalidParameterError, match="overflow"):
        bounded_sum_sensitivity(0, 2**40, size=2**24, dtype=np.int64)
    assert bounded_sum_sensitivity(0, 2**40, size=2**22, dtype=np.int64) == 2.0**40
    with pytest.raises(InvalidParameterError, match="overflow"):
        bounded_sum_sensitivity(0, 200, size=200, dtype=np.int16)
    with pytest.raises(InvalidParameterError, match="integer"):
        bounded_sum_sensitivity(0.5, 2, dtype=np.int64)
    with pytest.raises(InvalidParameterError, match="range"):
        bounded_sum_sensitivity(-1, 2, dtype=np.uint32)


def test_float_sums_refuse_overflow_and_huge_sizes() -> None:
    with pytest.raises(InvalidParameterError, match="overflow"):
        bounded_sum_sensitivity(0.0, 1e300, size=10**10)
    with pytest.raises(InvalidParameterError, match="size"):
        bounded_sum_sensitivity(0.0, 1.0, size=2**60)
    with pytest.raises(InvalidParameterError, match="size"):
        bounded_sum_sensitivity(0.0, 1.0, size=1, max_contributions=2)


def test_bad_relation_norm_and_dtype_are_refused() -> None:
    with pytest.raises(InvalidParameterError, match="neighbours"):
        count_sensitivity(neighbours="add_remove")
    with pytest.raises(InvalidParameterError, match="neighbours"):
        bounded_sum_sensitivity(0, 1, neighbours=None, dtype=np.int64)
    for norm in (0, 3, math.inf, True, "1"):
        with pytest.raises(InvalidParameterError, match="norm"):
            histogram_sensitivity(1, norm)
    with pytest.raises(InvalidParameterError, match="distinct_bins"):
        histogram_sensitivity(1, 2, distinct_bins=1)
    for dtype in (bool, object, str, "not a dtype"):
        with pytest.raises(InvalidParameterError, match="dtype"):
            bounded_sum_sensitivity(0, 1, size=3, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# Clamping and post-processing
# ---------------------------------------------------------------------------------------------


def test_clamp() -> None:
    assert clamp([-3, 0, 2, 9], 0, 5).tolist() == [0, 0, 2, 5]
    assert clamp(np.array([-3, 9], dtype=np.int32), 0, 5).dtype == np.int64
    assert clamp([-3, 9], 0, 2.5).tolist() == [0.0, 2.5]
    assert clamp(7.0, 0.0, 1.0).tolist() == 1.0


@pytest.mark.parametrize(
    "values", [[1.0, math.nan], [math.inf], None, [None, 1.0], ["a"], [True, False], [[1], [1, 2]]]
)
def test_clamp_refuses_bad_values(values) -> None:
    with pytest.raises(InvalidParameterError, match="values"):
        clamp(values, 0.0, 1.0)


def test_nonnegative() -> None:
    assert nonnegative([-2.4, 0.6, 3.0, 7]).tolist() == [0, 1, 3, 7]
    assert nonnegative(np.array([-5, 5])).dtype == np.int64
    for bad in ([math.nan], [2.0**70], None):
        with pytest.raises(InvalidParameterError, match="counts"):
            nonnegative(bad)


def test_noisy_mean() -> None:
    assert noisy_mean(52.0, 10.0, 0.0, 10.0) == pytest.approx(5.2)
    assert noisy_mean(30.0, -1.0, 0.0, 10.0) == 10.0  # count floored at 1, ratio clipped
    assert noisy_mean(-30.0, 0.2, -1.0, 1.0) == -1.0
    assert noisy_mean([1.0, -9.0], [4, 3], 0.0, 1.0).tolist() == [0.25, 0.0]
    with pytest.raises(InvalidParameterError, match="noisy_count"):
        noisy_mean([1.0, 2.0, 3.0], [1.0, 2.0], 0.0, 1.0)
    with pytest.raises(InvalidParameterError, match="noisy_sum"):
        noisy_mean(math.nan, 1.0, 0.0, 1.0)
    with pytest.raises(InvalidParameterError, match="bounds"):
        noisy_mean(1.0, 1.0, 1.0, 0.0)
