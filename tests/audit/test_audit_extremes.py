"""Clopper-Pearson bounds of the audit against exact binomial tails (mpmath, 60 digits)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from mp_precision import precision

from dpkit.audit import estimate_epsilon
from dpkit.audit._estimate import _cp_lower, _cp_upper
from dpkit.noise import InsecureSeededRandom

_precision = precision(60)


LEVELS = [0.25, 1e-3, 1e-6, 5e-13]


def _terms(n: int, p: mpmath.mpf, js: range) -> mpmath.mpf:
    return mpmath.fsum(mpmath.binomial(n, j) * p**j * (1 - p) ** (n - j) for j in js)


def _tail_at_least(n: int, x: int, p: float) -> mpmath.mpf:
    """P[Bin(n, p) >= x] exactly, summing whichever side has fewer terms."""
    q = mpmath.mpf(p)
    return 1 - _terms(n, q, range(x)) if x <= n - x else _terms(n, q, range(x, n + 1))


def _tail_at_most(n: int, x: int, p: float) -> mpmath.mpf:
    q = mpmath.mpf(p)
    return _terms(n, q, range(x + 1)) if x <= n - x else 1 - _terms(n, q, range(x + 1, n + 1))


def _counts():
    for n in [100, 1000, 10**5, 10**7, 10**9]:
        middle = [n // 3, n // 2] if n <= 1000 else []
        for x in sorted({0, 1, 2, 5, n - 5, n - 2, n - 1, n, *middle}):
            yield n, x


@pytest.mark.parametrize(("n", "x"), list(_counts()))
def test_clopper_pearson_bounds_hold_exactly(n, x):
    """Catches a lower bound above, or an upper bound below, the exact Clopper-Pearson bound (a
    false-alarm rate above alpha): beta.ppf(1 - level) lost 1e-4 of a level 5e-13 (the tail at the
    old upper bound was 8.9e-5 relative above the level), and near p = 1 it was 11% above."""
    for level in LEVELS:
        low, high = float(_cp_lower(float(x), float(n), level)), float(_cp_upper(float(x), float(n), level))
        assert 0.0 <= low <= high <= 1.0 and math.isfinite(low) and math.isfinite(high)
        if x > 0:
            assert _tail_at_least(n, x, low) <= level
            assert _tail_at_least(n, x, low) >= level * (1 - 1e-3)  # not absurdly loose either
        else:
            assert low == 0.0
        if x < n:
            assert _tail_at_most(n, x, high) <= level
        else:
            assert high == 1.0


def test_vectorised_bounds_equal_the_scalar_ones():
    """Catches the array path (used to choose the event, with fractional counts) diverging from
    the scalar path or returning NaN at counts 0 and n."""
    counts = np.array([0.0, 0.5, 1.0, 499.5, 999.0, 1000.0])
    lows, highs = _cp_lower(counts, 1000.0, 1e-9), _cp_upper(counts, 1000.0, 1e-9)
    assert np.all(np.isfinite(lows)) and np.all(np.isfinite(highs)) and np.all(lows <= highs)
    for c, low, high in zip(counts, lows, highs, strict=True):
        assert low == float(_cp_lower(c, 1000.0, 1e-9)) and high == float(_cp_upper(c, 1000.0, 1e-9))


def test_audit_of_randomized_response_near_certainty_stays_below_the_true_epsilon():
    """Catches a lower bound above the true epsilon for events of probability near 1 and 0
    (randomized response with epsilon = 12: the flip probability is 6e-6), at alpha = 1e-12."""
    epsilon = 12.0
    flip = int(2**53 / (1 + math.exp(epsilon)))  # flip with probability flip / 2^53 ~ 6.1e-6 <= 1/(1+e^eps)

    def release(x, rng, size):
        return np.where((rng.uint64(size) >> np.uint64(11)) < np.uint64(flip), 1 - x, x)

    for seed in range(3):
        result = estimate_epsilon(
            release, 0, 1, samples=200_000, alpha=1e-12, vectorized=True, rng=InsecureSeededRandom(seed)
        )
        assert 0.0 <= result.epsilon_lower_bound <= math.log((2**53 - flip) / flip)
        assert result.epsilon_lower_bound > 5.0  # and the audit still sees most of it
