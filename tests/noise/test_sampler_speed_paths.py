"""The fast paths of the exact integer samplers in the middle scale range (2^31 and up).

geometric_units / discrete_laplace_units draw G = 2^j H + L from 2^31 on (H geometric below 2^31,
L's chunks by exact rejection from uniform proposals), assemble it in int64 while every draw is
below 2^62, and discrete_gaussian proposes from them from sigma 2^31 on (outside constant-time
mode). Checked here: the int64 and Python-integer assemblies give the same integers; the laws are
the exact ones (against exact probabilities, at real scales across the split and at small scales
where the low part is far from uniform); the dtype rules; the routing.

Statistical tests use fixed seeds and thresholds from an explicit false-positive rate
(FALSE_POSITIVE_RATE, per test: split evenly between the assertions of a test).
"""

from __future__ import annotations

import math
from typing import Any

import mpmath
import numpy as np
import pytest
from scipy import stats

from dpkit.noise import (
    InsecureSeededRandom,
    _samplers,
    discrete_gaussian,
    discrete_laplace,
    discrete_laplace_units,
    geometric,
    geometric_units,
)

FALSE_POSITIVE_RATE = 1e-6


def chi_square_ok(counts: np.ndarray, probabilities: np.ndarray, rate: float) -> bool:
    """Pearson chi-square of ``counts`` against exact ``probabilities`` (summing to 1), at level ``rate``.

    Cells with an expected count below 5 are pooled into one (with the smallest other cell if the pool
    is still below 5): the usual condition of the chi-square approximation. The pooling depends on the
    exact probabilities only, not on the counts.
    """
    counts = np.asarray(counts, dtype=np.float64)
    probabilities = np.asarray(probabilities, dtype=np.float64)
    assert counts.shape == probabilities.shape
    assert abs(probabilities.sum() - 1.0) < 1e-9
    expected = probabilities * counts.sum()
    small = expected < 5
    if small.any():
        counts = np.append(counts[~small], counts[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
        if expected[-1] < 5:
            smallest = int(np.argmin(expected[:-1]))
            counts[smallest] += counts[-1]
            expected[smallest] += expected[-1]
            counts, expected = counts[:-1], expected[:-1]
    assert counts.size >= 2
    statistic = float(np.sum((counts - expected) ** 2 / expected))
    return statistic <= float(stats.chi2.isf(rate, counts.size - 1))


def bit_probability(bit: int, scale: float) -> float:
    """P(bit i of G is 1) for G geometric with q = exp(-1/scale): q^(2^i) / (1 + q^(2^i))."""
    return 1.0 / (1.0 + math.exp(math.ldexp(1.0, bit) / scale))


def window_pmf(low: int, width: int, scale: float) -> np.ndarray:
    """Exact law of (G >> low) mod 2^width: the bits of a geometric G are independent
    (P(G = g) is proportional to prod_i q^(2^i b_i))."""
    pmf = np.ones(1 << width)
    values = np.arange(1 << width)
    for offset in range(width):
        p = bit_probability(low + offset, scale)
        pmf *= np.where((values >> offset) & 1, p, 1.0 - p)
    return pmf


def window_counts(draws: np.ndarray, low: int, width: int) -> np.ndarray:
    return np.bincount(((draws >> low) & ((1 << width) - 1)).astype(np.int64), minlength=1 << width)


def check_geometric_law(draws: np.ndarray, scale: float, rate: float) -> None:
    """Bit windows of G (lowest bits, around the two-part split j, around log2(scale)) against their
    exact laws, and floor(G / scale) against exact tail differences q^ceil(k t) - q^ceil((k+1) t)."""
    assert draws.dtype == np.int64 and draws.min() >= 0
    split = _samplers._split_bits(scale)
    top = math.frexp(scale)[1]  # 2^(top - 1) <= scale < 2^top
    windows = [(0, 8), (max(0, split - 3), 6), (top - 4, 7)]
    per = rate / (len(windows) + 1)
    for low, width in windows:
        assert chi_square_ok(window_counts(draws, low, width), window_pmf(low, width, scale), per), (low, width)
    # floor(G / t) = k  <=>  ceil(k t) <= G < ceil((k + 1) t); P(G >= m) = q^m = exp(-m / t).
    edges = [math.ceil(k * scale) for k in range(9)]
    tails = [math.exp(-m / scale) for m in edges]
    probabilities = np.array([tails[k] - tails[k + 1] for k in range(8)] + [tails[8]])
    bins = np.searchsorted(np.array(edges[1:]), draws, side="right")
    assert chi_square_ok(np.bincount(bins, minlength=9), probabilities, per)


# ---------------------------------------------------------------------------------------------
# (a) int64 and Python-integer assembly give the same integers
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [2.0**31, 2.0**32 * 1.37, 2.0**45, 2.0**55 * 1.9])
@pytest.mark.parametrize("sampler", [geometric_units, discrete_laplace_units])
def test_int64_and_object_assembly_give_the_same_draws(sampler, scale, monkeypatch):
    """The same seed, with the int64 assembly disabled (no draw counts as fitting), gives the same
    integers as an object array: the assembly is post-processing of the same draws."""
    fast = sampler(scale, 20_000, InsecureSeededRandom(7))
    assert fast.dtype == np.int64
    monkeypatch.setattr(_samplers, "_INT64_RESULT_BITS", 0)
    slow = sampler(scale, 20_000, InsecureSeededRandom(7))
    assert slow.dtype == object and all(type(v) is int for v in slow)
    assert slow.tolist() == fast.tolist()


def test_discrete_gaussian_int64_and_object_proposals_give_the_same_draws(monkeypatch):
    fast = discrete_gaussian(2.0**35 * 1.3, 20_000, rng=InsecureSeededRandom(8))
    assert fast.dtype == np.int64
    monkeypatch.setattr(_samplers, "_INT64_RESULT_BITS", 0)
    slow = discrete_gaussian(2.0**35 * 1.3, 20_000, rng=InsecureSeededRandom(8))
    assert [int(v) for v in slow] == fast.tolist()


def test_object_assembly_over_several_chunks_returns_int64_when_it_fits(monkeypatch):
    """L in chunks of 5 bits (the path of scales beyond 2^92, where L has more than 62 bits) is
    assembled in Python integers and returned as int64 when every draw is below 2^62 (the dtype is
    a function of the values), with the same integers as when kept as Python integers."""
    monkeypatch.setattr(_samplers, "_CHUNK_BITS", 5)
    chunked = geometric_units(2.0**45, 5000, InsecureSeededRandom(9))
    assert chunked.dtype == np.int64  # assembled in Python integers, every value below 2^62
    monkeypatch.setattr(_samplers, "_INT64_RESULT_BITS", 0)
    assert geometric_units(2.0**45, 5000, InsecureSeededRandom(9)).tolist() == chunked.tolist()


# ---------------------------------------------------------------------------------------------
# (b) The exact laws at real scales across the split
# ---------------------------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("scale", [2.0**30 * 1.9, 2.0**31, 2.0**32, 2.0**33 * 1.37, 2.0**37 * 1.01, 2.0**45 * 1.7])
def test_geometric_units_law_across_the_split(scale):
    draws = geometric_units(scale, 200_000, InsecureSeededRandom(10))
    check_geometric_law(draws, scale, FALSE_POSITIVE_RATE)


@pytest.mark.statistical
@pytest.mark.parametrize("scale", [2.0**31 * 1.5, 2.0**33, 2.0**37 * 1.37, 2.0**45 * 1.01, 2.0**55])
def test_discrete_laplace_units_law_across_the_split(scale):
    """Sign fair, P(X = 0) = (1 - q) / (1 + q) (about 1 / (2 t): essentially never), and |X| - 1
    given X != 0 geometric of the same q (P(|X| = m) = 2 (1 - q) / (1 + q) q^m for m >= 1)."""
    n = 200_000
    draws = discrete_laplace_units(scale, n, InsecureSeededRandom(11))
    assert draws.dtype == np.int64
    q = math.exp(-1.0 / scale)
    zero = int(np.sum(draws == 0))
    rate = FALSE_POSITIVE_RATE / 3
    assert stats.binom.sf(zero - 1, n, (1 - q) / (1 + q)) > rate
    nonzero = draws[draws != 0]
    positive = int(np.sum(nonzero > 0))
    assert stats.binomtest(positive, nonzero.size, 0.5).pvalue > rate
    check_geometric_law(np.abs(nonzero) - 1, scale, rate)


def normal_bins(sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """Integer bin edges near +-{0.25, 0.5, 1, 1.5, 2, 3} sigma and the exact N_Z(0, sigma^2) mass of
    each bin. At sigma >= 2^30 the mass of [a, b) is Phi((b - 1/2) / sigma) - Phi((a - 1/2) / sigma) to a
    relative O(sigma^-2) (midpoint rule; Poisson summation), far below what 2e5 draws resolve."""
    multiples = [0.25, 0.5, 1.0, 1.5, 2.0, 3.0]
    edges = np.array(sorted({-math.ceil(m * sigma) for m in multiples} | {math.ceil(m * sigma) for m in multiples}))
    with mpmath.workdps(30):
        s = mpmath.mpf(sigma)

        def below(x: int) -> Any:  # P(X < x)
            return mpmath.ncdf((mpmath.mpf(int(x)) - mpmath.mpf(1) / 2) / s)

        cdf = [mpmath.mpf(0)] + [below(int(e)) for e in edges] + [mpmath.mpf(1)]
        probabilities = np.array([float(cdf[i + 1] - cdf[i]) for i in range(len(cdf) - 1)])
    return edges, probabilities


@pytest.mark.statistical
@pytest.mark.parametrize("sigma", [2.0**29 * 1.9, 2.0**31 * 1.37, 2.0**35, 2.0**39 * 1.5, 2.0**45 * 1.1])
def test_discrete_gaussian_law_across_the_split(sigma):
    """Bins of X / sigma against the exact masses, X mod 256 uniform (to within e^(-2 pi^2 sigma^2 / 2^16)),
    and the sum of X^2 / sigma^2 in its chi-square(n) band (Var X = sigma^2 to a relative e^(-2 pi^2 sigma^2))."""
    n = 200_000
    draws = discrete_gaussian(sigma, n, rng=InsecureSeededRandom(12))
    assert draws.dtype == np.int64
    rate = FALSE_POSITIVE_RATE / 4
    edges, probabilities = normal_bins(sigma)
    assert chi_square_ok(
        np.bincount(np.searchsorted(edges, draws, side="right"), minlength=edges.size + 1), probabilities, rate
    )
    assert chi_square_ok(np.bincount(draws & 255, minlength=256), np.full(256, 1 / 256), rate)
    statistic = float(np.sum((draws.astype(np.float64) / sigma) ** 2))
    assert stats.chi2.ppf(rate / 2, n) <= statistic <= stats.chi2.isf(rate / 2, n)
    assert stats.binomtest(int(np.sum(draws > 0)), int(np.sum(draws != 0)), 0.5).pvalue > rate


# ---------------------------------------------------------------------------------------------
# The exact laws at small scales, where the low part is far from uniform
# ---------------------------------------------------------------------------------------------


def geometric_pmf_bins(scale: float, top: int) -> np.ndarray:
    q = math.exp(-1.0 / scale)
    pmf = (1 - q) * q ** np.arange(top)
    return np.append(pmf, q**top)  # P(G >= top)


@pytest.mark.statistical
@pytest.mark.parametrize("chunk_bits", [2, 62])
def test_two_part_geometric_law_at_a_small_scale(chunk_bits, monkeypatch):
    """Split lowered to 2^3 so that scale 192 draws H at scale 6 and 5 low bits whose law is tilted by
    e^(-32/192) (15%, the rejection step's acceptance far from 1, many exact decisions), in one chunk or
    in chunks of 2 bits: G against its exact pmf, and G mod 32 (the low part) against its exact law."""
    monkeypatch.setattr(_samplers, "_FAST_SCALE_BITS", 3)
    monkeypatch.setattr(_samplers, "_CHUNK_BITS", chunk_bits)
    scale = 192.0
    assert _samplers._split_bits(scale) == 5
    draws = geometric_units(scale, 100_000, InsecureSeededRandom(13))
    assert draws.dtype == np.int64
    top = 1500  # P(G >= 1500) = 4e-4
    counts = np.bincount(np.minimum(draws, top), minlength=top + 1)
    rate = FALSE_POSITIVE_RATE / 2
    assert chi_square_ok(counts, geometric_pmf_bins(scale, top), rate)
    assert chi_square_ok(window_counts(draws, 0, 5), window_pmf(0, 5, scale), rate)


@pytest.mark.statistical
def test_two_part_discrete_laplace_law_at_a_small_scale(monkeypatch):
    """The same split at scale 192: X = S G with (-1, 0) rejected. P(X = 0) = 1/384 would double without
    the rejection, and the sign would not be fair if it were not independent of G."""
    monkeypatch.setattr(_samplers, "_FAST_SCALE_BITS", 3)
    scale = 192.0
    draws = discrete_laplace_units(scale, 100_000, InsecureSeededRandom(14))
    q = math.exp(-1.0 / scale)
    top = 1500
    values = np.arange(-top + 1, top)
    pmf = (1 - q) / (1 + q) * q ** np.abs(values)
    tail = (1 - pmf.sum()) / 2
    counts = np.bincount(np.clip(draws, -top, top) + top, minlength=2 * top + 1)
    probabilities = np.concatenate([[tail], pmf, [tail]])
    rate = FALSE_POSITIVE_RATE / 2
    assert chi_square_ok(counts, probabilities, rate)
    zero = int(np.sum(draws == 0))
    assert stats.binomtest(zero, draws.size, (1 - q) / (1 + q)).pvalue > rate


@pytest.mark.statistical
def test_discrete_gaussian_routed_through_the_two_part_proposals_at_a_small_sigma(monkeypatch):
    """With the split at 2^3 (MAX_SCALE untouched), sigma 37.3 takes the any-sigma path (proposals at
    t = 38: H at scale 4.75 and 3 tilted low bits): against the exact pmf of N_Z(0, 37.3^2)."""
    monkeypatch.setattr(_samplers, "_FAST_SCALE_BITS", 3)
    called = []
    original = _samplers._discrete_gaussian_any_sigma
    monkeypatch.setattr(_samplers, "_discrete_gaussian_any_sigma", lambda *args: called.append(args) or original(*args))
    sigma = 37.3
    n = 60_000
    draws = discrete_gaussian(sigma, n, rng=InsecureSeededRandom(15))
    assert called
    support = np.arange(-400, 401)
    with mpmath.workdps(30):
        weights = [mpmath.exp(-(mpmath.mpf(int(x)) ** 2) / (2 * mpmath.mpf(sigma) ** 2)) for x in support]
        total = mpmath.fsum(weights)
        pmf = np.array([float(w / total) for w in weights])
    edge = 100  # +-2.7 sigma: every value inside has an expected count >= 5
    inside = np.abs(support) <= edge
    counts = np.array(
        [int(np.sum(draws < -edge))] + [int(np.sum(draws == v)) for v in support[inside]] + [int(np.sum(draws > edge))]
    )
    probabilities = np.concatenate([[pmf[support < -edge].sum()], pmf[inside], [pmf[support > edge].sum()]])
    assert chi_square_ok(counts, probabilities / probabilities.sum(), FALSE_POSITIVE_RATE)


# ---------------------------------------------------------------------------------------------
# (c) dtypes, the documented contracts, routing
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [2.0**31, 2.0**36, 2.0**40, 2.0**50, 2.0**55])
def test_two_part_draws_are_int64_in_the_fitting_range(scale):
    assert geometric_units(scale, 10_000, InsecureSeededRandom(16)).dtype == np.int64
    assert discrete_laplace_units(scale, 10_000, InsecureSeededRandom(16)).dtype == np.int64
    assert discrete_gaussian(scale, 10_000, rng=InsecureSeededRandom(16)).dtype == np.int64
    assert geometric_units(scale, 0, InsecureSeededRandom(16)).dtype == np.int64


def test_draws_beyond_2_62_are_python_integers():
    draws = discrete_laplace_units(2.0**70, 1000, InsecureSeededRandom(17))
    assert draws.dtype == object and all(type(v) is int for v in draws)
    assert max(abs(v) for v in draws) >= 2**62


def test_int64_results_stay_below_2_62():
    """The int64 rule: every magnitude below 2^62 (room to add another such int64), else Python integers."""
    fit = _samplers._fits_int64_result
    assert fit(np.array([2**62 - 1, -(2**62 - 1), 0], dtype=object)).dtype == np.int64
    assert fit(np.array([2**62, 0], dtype=object)).dtype == object
    assert fit(np.array([-(2**62), 0], dtype=object)).dtype == object
    assert fit(np.array([2**62], dtype=np.int64)).dtype == object
    assert fit(np.array([], dtype=object)).dtype == np.int64


def test_below_the_split_the_one_part_samplers_draw():
    """The documented contract: below 2^31, geometric_units / discrete_laplace_units are geometric /
    discrete_laplace, draw for draw; discrete_gaussian keeps its one-part path."""
    scale = 2.0**31 * 0.99
    assert _samplers._split_bits(scale) == 0 and _samplers._split_bits(2.0**31) == 1
    assert np.array_equal(
        geometric_units(scale, 5000, InsecureSeededRandom(18)), geometric(scale, 5000, rng=InsecureSeededRandom(18))
    )
    assert np.array_equal(
        discrete_laplace_units(scale, 5000, InsecureSeededRandom(18)),
        discrete_laplace(scale, 5000, rng=InsecureSeededRandom(18)),
    )


def test_discrete_gaussian_routing(monkeypatch):
    """sigma >= 2^31 takes the two-part proposals, except in constant-time mode (no exact fallback there:
    its one-part path up to 2^40 is unchanged); below 2^31 the one-part path."""
    called: list[float] = []
    original = _samplers._discrete_gaussian_any_sigma
    monkeypatch.setattr(
        _samplers, "_discrete_gaussian_any_sigma", lambda sig, *rest: called.append(sig) or original(sig, *rest)
    )
    discrete_gaussian(2.0**31 * 0.999, 10, rng=InsecureSeededRandom(19))
    assert called == []
    discrete_gaussian(2.0**31, 10, rng=InsecureSeededRandom(19))
    assert called == [2.0**31]
    constant = discrete_gaussian(2.0**35, 10, rng=InsecureSeededRandom(19), constant_time=True)
    assert called == [2.0**31] and constant.dtype == np.int64
    discrete_gaussian(2.0**41, 10, rng=InsecureSeededRandom(19))
    assert called == [2.0**31, 2.0**41]
