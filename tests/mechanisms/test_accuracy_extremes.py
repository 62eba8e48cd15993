"""Accuracy reporting at extreme parameters, against mpmath references of the law actually sampled.

Every mechanism reports accuracy for the noise it really adds (integer noise on a public grid). The
regimes where that law is handled differently (huge noise in grid units at small epsilon, q = e^{-1/s} within
1e-9 of 1, tails of 1e-300, huge sigmas summed in closed form) are where the reported numbers have
gone wrong before; each test below names the wrong answer it catches. References are computed with
40-50 significant digits (mpmath), from the pmf of the released law, independently of the code
under test. No randomness is used.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import mpmath
import numpy as np
import pytest

from dpkit._errors import InvalidParameterError, PrivacyWarning
from dpkit.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    Exponential,
    Gaussian,
    Laplace,
    PermuteAndFlip,
    RandomizedResponse,
    Staircase,
)
from dpkit.mechanisms import gaussian as gaussian_module
from dpkit.mechanisms.discrete_gaussian import _large_sigma_tail

DPS = 50


@pytest.fixture(autouse=True)
def _quiet_and_precise() -> Iterator[None]:
    with warnings.catch_warnings(), mpmath.workdps(DPS):
        warnings.simplefilter("ignore", PrivacyWarning)
        yield


def timed(call: Callable[[], Any]) -> Any:
    """Run ``call`` (no timing: speed belongs in benchmarks; ``counting_tails`` checks the work done)."""
    return call()


@contextlib.contextmanager
def counting_tails() -> Iterator[list[int]]:
    """Count the Gaussian tail evaluations made inside the block (the work of a quantile search)."""
    calls = [0]
    original = gaussian_module._tail_bounds

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return original(*args)

    gaussian_module._tail_bounds = counted
    try:
        yield calls
    finally:
        gaussian_module._tail_bounds = original


def units(mechanism: Any, value: float) -> int:
    """A grid multiple, in grid units (exact: a power-of-two rescaling)."""
    count = math.ldexp(value, -mechanism.grid_exponent)
    assert count == int(count)
    return int(count)


def below(value: mpmath.mpf) -> float:
    """The largest float strictly below an exact value (an alpha just under a tail probability)."""
    candidate = float(value)
    return math.nextafter(candidate, 0.0) if candidate >= value else candidate


# ---------------------------------------------------------------------------------------------
# Laplace: discrete Laplace of units scale s = scale / 2^k on the grid 2^k
# ---------------------------------------------------------------------------------------------

LAPLACE_CASES = [
    (1.0, 1e-6, 1),  # s ~ 1e9: q = e^{-1/s} within 1e-9 of 1
    (1e12, 1e-6, 1),
    (1e-6, 50.0, 1),
    (1.0, 1.0, 10**6),
    (3.3, 1e-3, 7),  # non-integer sensitivity, noise of about 2^34 grid units
    (1.0, 1e-9, 1),  # noise of 2^50 grid units, drawn in two exact parts (the old grid doubled the scale)
]


def _laplace_law(mechanism: Laplace) -> tuple[mpmath.mpf, Callable[[int], mpmath.mpf]]:
    s = mpmath.ldexp(mpmath.mpf(mechanism.scale), -mechanism.grid_exponent)
    q = mpmath.exp(-1 / s)

    def at_least(n: int) -> mpmath.mpf:  # P(|Z| >= n), summed pmf (1-q)/(1+q) q^|z| in closed form
        return mpmath.mpf(1) if n <= 0 else 2 * q**n / (1 + q)

    return q, at_least


@pytest.mark.parametrize("sensitivity, epsilon, dimension", LAPLACE_CASES)
def test_laplace_moments_exact_at_extreme_scales(sensitivity, epsilon, dimension):
    """E|noise| = 2^k 2q / (1 - q^2). Catches 1 - q^2 taken from log(q) of the rounded q: at s ~ 1e9
    that keeps ~8 digits (E|noise| was 5.3e-8 relative off at Laplace(1, 1e-6))."""
    mechanism = Laplace(sensitivity, epsilon, dimension=dimension)
    q, _ = _laplace_law(mechanism)
    exact = mpmath.ldexp(2 * q / (1 - q**2), mechanism.grid_exponent)
    assert mechanism.expected_error == pytest.approx(float(exact), rel=1e-12)
    assert mechanism.expected_l1_error() == pytest.approx(float(dimension * exact), rel=1e-12)


@pytest.mark.parametrize("sensitivity, epsilon, dimension", LAPLACE_CASES)
@pytest.mark.parametrize("alpha", [0.9, 0.05, 1e-12, 1e-300])
def test_laplace_quantile_and_linf_are_valid_and_smallest(sensitivity, epsilon, dimension, alpha):
    """h = noise_quantile: P(|Z| > h) <= alpha exactly, and h - 2^k fails (up to the stated 1e-12 margin on
    alpha); linf_tail_bound t: K P(|Z| >= t) <= beta, t - 2^k fails. Catches an off-by-one or a guess that
    is never corrected downward, and any crash or slow scan at these alphas."""
    mechanism = Laplace(sensitivity, epsilon, dimension=dimension)
    _, at_least = _laplace_law(mechanism)
    h = units(mechanism, timed(lambda: mechanism.noise_quantile(alpha)))
    assert at_least(h + 1) <= alpha
    assert h == 0 or at_least(h) > alpha * (1 - 1e-11)
    t = units(mechanism, timed(lambda: mechanism.linf_tail_bound(alpha)))
    assert dimension * at_least(t) <= alpha
    assert dimension * at_least(t - 1) > alpha * (1 - 1e-11)
    low, high = mechanism.confidence_interval(alpha, 5.0, simultaneous=True, dimension=dimension)
    assert high - 5.0 == 5.0 - low == mechanism.noise_quantile(alpha / dimension)


def test_laplace_quantile_is_valid_for_alphas_at_the_tail_values():
    """alpha just below an exact tail value P(|Z| >= n): the reported h must be >= n. Catches a float
    comparison without margin (it returned h = n - 1, invalid by ~1e-16 relative, at 239 of 480 such
    alphas), and the overflow of 2 / alpha for subnormal alphas."""
    for mechanism in (Laplace(1.0, 1e-6), Laplace(1.0, 0.5), Laplace(1e-3, 3.0, dimension=5)):
        s = float(mpmath.ldexp(mpmath.mpf(mechanism.scale), -mechanism.grid_exponent))
        _, at_least = _laplace_law(mechanism)
        for depth in (0.3, 1.0, 20.0, 300.0, 690.0):  # tails e^-0.3 .. e^-690
            for n in range(int(s * depth), int(s * depth) + 12):
                alpha = below(at_least(n))
                h = units(mechanism, mechanism.noise_quantile(alpha))
                assert at_least(h + 1) <= alpha
        assert math.isfinite(mechanism.noise_quantile(5e-324))


@pytest.mark.parametrize(
    "sensitivity, accuracy, alpha, dimension",
    [
        (1.0, 10.0, 0.05, 1),
        (1.0, 1e-6, 0.05, 1),  # about one grid step (2^-20)
        (1.0, 3e-6, 0.9, 1),
        (1.0, 1e-12, 0.05, 1),  # below one grid step: h must be 0
        (0.37, 5e-7, 0.5, 1),
        (1.0, 1e9, 0.05, 1),  # noise of about 2^48 grid units
        (1.0, 1e12, 0.05, 1),  # about 2^58 grid units (the old grid step 16 made the sensitivity 17)
        (1.0, 1.0, 1e-12, 10**6),
    ],
)
def test_laplace_from_accuracy_gives_the_smallest_epsilon(sensitivity, accuracy, alpha, dimension):
    """The accuracy holds, and does not at epsilon (1 - 1e-6). Catches the multiplicative search that
    stopped at the first epsilon meeting the target: 62% above the smallest at accuracy 1e-6, 19% at
    1e9, 26 times at 1e12, 8e5 times at 1e-12."""
    mechanism = timed(lambda: Laplace.from_accuracy(sensitivity, accuracy, alpha, dimension=dimension))
    assert mechanism.noise_quantile(alpha) <= accuracy
    weaker = Laplace(sensitivity, mechanism.epsilon * (1 - 1e-6), dimension=dimension)
    assert weaker.noise_quantile(alpha) > accuracy


# ---------------------------------------------------------------------------------------------
# Gaussian: discrete Gaussian of units sigma s on the grid 2^k (s >= ~1e5 in every regime)
# ---------------------------------------------------------------------------------------------


def _gaussian_at_least(s: mpmath.mpf) -> Callable[[int], mpmath.mpf]:
    """P(Z >= n), n >= 1, Z ~ N_Z(0, s^2), s >= 1e4: Euler-Maclaurin to f''' (the rest is O(f / s^5))
    over the normaliser s sqrt(2 pi) (Poisson summation; the correction 2 e^{-2 pi^2 s^2} is nil)."""

    def at_least(n: int) -> mpmath.mpf:
        m = mpmath.mpf(n)
        f = mpmath.exp(-(m**2) / (2 * s**2))
        d1 = -m / s**2 * f
        d3 = (-(m**3) / s**6 + 3 * m / s**4) * f
        total = mpmath.sqrt(mpmath.pi / 2) * s * mpmath.erfc(m / (s * mpmath.sqrt(2))) + f / 2 - d1 / 12 + d3 / 720
        return total / (mpmath.sqrt(2 * mpmath.pi) * s)

    return at_least


GAUSSIAN_CASES = [
    (1.0, 1.0, 1e-5, "analytic", 1),
    (1.0, 1e-6, 1e-5, "analytic", 1),
    (1e12, 50.0, 0.5, "analytic", 1),
    (1e-6, 0.5, 1e-10, "classic", 1),
    (1.0, 1.0, 1e-5, "analytic", 10**6),
]


@pytest.mark.parametrize("args", GAUSSIAN_CASES)
def test_gaussian_quantile_for_tiny_alphas(args):
    """noise_quantile at alpha down to 5e-324 and linf_tail_bound(1e-12) over 10^6 coordinates (alpha
    1e-18 per coordinate): valid, within one grid step of the smallest, in at most 200 tail evaluations. Catches the
    start from Phi^{-1}(1 - alpha / 2): 1 - alpha / 2 rounds to 1 below alpha ~1e-16 (OverflowError), and
    just above it the start was so low that a unit-by-unit scan took 40-66 s (alpha = 1e-15)."""
    mechanism = Gaussian(*args)
    s = mpmath.ldexp(mpmath.mpf(mechanism.sigma), -mechanism.grid_exponent)
    at_least = _gaussian_at_least(s)
    for alpha in (0.9, 0.05, 1e-12, 1e-15, 1e-18, 1e-300, 5e-324):
        with counting_tails() as calls:
            h = units(mechanism, mechanism.noise_quantile(alpha))
        assert calls[0] <= 200, calls  # a logarithmic search, not a unit-by-unit scan
        assert 2 * at_least(h + 1) <= alpha
        assert h <= 1 or 2 * at_least(h - 1) > alpha  # docstring: "plus one grid step" at most
    t = units(mechanism, timed(lambda: mechanism.linf_tail_bound(1e-12, dimension=10**6)))
    assert 10**6 * 2 * at_least(t) <= 1e-12 < 10**6 * 2 * at_least(t - 2)
    timed(lambda: mechanism.confidence_interval(1e-12, np.zeros(3), simultaneous=True, dimension=10**6))


def test_gaussian_expected_error_at_extremes():
    """E|noise| against the Euler-Maclaurin sum 2 (s^2 - 1/12 - 1/(240 s^2)) / (s sqrt(2 pi)) grid units;
    catches a wrong constant or a continuous-law shortcut (sigma sqrt(2/pi) is 1/(12 s^2) relative off)."""
    for args in GAUSSIAN_CASES:
        mechanism = Gaussian(*args)
        s = mpmath.ldexp(mpmath.mpf(mechanism.sigma), -mechanism.grid_exponent)
        exact = 2 * (s**2 - mpmath.mpf(1) / 12 - 1 / (240 * s**2)) / (mpmath.sqrt(2 * mpmath.pi) * s)
        assert mechanism.expected_error == pytest.approx(float(mpmath.ldexp(exact, mechanism.grid_exponent)), rel=1e-12)


def test_gaussian_from_accuracy_met_at_every_epsilon_is_a_parameter_error():
    """At fixed delta sigma stays bounded as epsilon -> 0 (about 4e5 for delta = 1e-6), so accuracy 1e9
    holds at every epsilon and there is no smallest one. Catches the InternalError (an internal-bug
    signal) it raised for this user input; a reachable accuracy still returns the smallest epsilon."""
    with pytest.raises(InvalidParameterError, match="accuracy"):
        timed(lambda: Gaussian.from_accuracy(1.0, 1e9, 0.05, 1e-6))
    mechanism = timed(lambda: Gaussian.from_accuracy(1.0, 5.0, 1e-12, 1e-10, dimension=3))
    assert mechanism.noise_quantile(1e-12) <= 5.0
    assert Gaussian(1.0, mechanism.epsilon * (1 - 1e-6), 1e-10, dimension=3).noise_quantile(1e-12) > 5.0


# ---------------------------------------------------------------------------------------------
# Discrete Laplace
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sensitivity, epsilon", [(1, 1e-6), (1, 1e-12), (1, 50.0), (3, 0.37), (1, 700.0)])
def test_discrete_laplace_at_extremes(sensitivity, epsilon):
    """Moments to 1e-12 and half-widths valid and smallest up to the stated 1e-12 margin on alpha, for
    scales 1e-3 .. 1e12; catches a cancellation in 1 - q near q = 1 or an overflow at scale 1e12."""
    mechanism = DiscreteLaplace(sensitivity, epsilon)
    t = mpmath.mpf(mechanism.scale)
    q = mpmath.exp(-1 / t)
    assert mechanism.expected_error == pytest.approx(float(2 * q / (1 - q**2)), rel=1e-12)
    assert mechanism.variance == pytest.approx(float(2 * q / (1 - q) ** 2), rel=1e-12)

    def above(h: int) -> mpmath.mpf:  # P(|Z| > h)
        return 2 * q ** (h + 1) / (1 + q)

    for alpha in (0.9, 0.05, 1e-12, 1e-300):
        h = int(timed(lambda: mechanism.noise_quantile(alpha)))  # noqa: B023
        assert above(h) <= alpha
        assert h == 0 or above(h - 1) > alpha * (1 - 1e-11)
        assert mechanism.tail_probability(h + 1) == pytest.approx(float(above(h)), rel=1e-12)


@pytest.mark.parametrize(
    "accuracy, alpha, sensitivity", [(0, 1e-12, 1), (0, 0.9, 1), (1e11, 0.05, 1), (1e12, 1e-12, 3)]
)
def test_discrete_laplace_from_accuracy_at_extremes(accuracy, alpha, sensitivity):
    """Smallest epsilon (to 1e-9) at accuracies 0 .. 1e12; catches a bracket that misses the root."""
    mechanism = timed(lambda: DiscreteLaplace.from_accuracy(sensitivity, accuracy, alpha))
    assert mechanism.noise_quantile(alpha) <= accuracy
    assert DiscreteLaplace(sensitivity, mechanism.epsilon * (1 - 1e-9)).noise_quantile(alpha) > accuracy


# ---------------------------------------------------------------------------------------------
# Discrete Gaussian
# ---------------------------------------------------------------------------------------------


def test_discrete_gaussian_large_sigma_tail_bound_is_rigorous():
    """``_large_sigma_tail`` (second-order Euler-Maclaurin with its remainder bound) against direct pmf
    sums at sigmas where they are feasible: it must never be below the exact tail (a remainder of the
    wrong sign or size would be) and its relative excess must stay within (t^2 + 2) / (3 sigma^2)."""
    for sigma in (0.5, 1.0, 3.0, 57.3, 300.0):
        s = mpmath.mpf(sigma)
        limit = int(45 * sigma) + 50
        weights = [mpmath.exp(-(mpmath.mpf(x) ** 2) / (2 * s * s)) for x in range(limit)]
        normaliser = 2 * mpmath.fsum(weights) - 1
        tail = mpmath.mpf(0)
        tails = [mpmath.mpf(0)] * (limit + 1)
        for x in range(limit - 1, -1, -1):
            tail += weights[x]
            tails[x] = tail
        for h in range(int(38 * sigma)):
            exact = 2 * tails[h + 1] / normaliser
            bound = _large_sigma_tail(sigma, h)
            assert bound >= exact
            t = (h + 1) / sigma
            assert bound <= exact * (1 + 2e-9 + (t * t + 2) / (3 * sigma * sigma)) + 1e-300


@pytest.mark.parametrize("sigma", [1e5, 100001.0, 3e7, 1e12])
@pytest.mark.parametrize("alpha", [0.9, 0.05, 1e-12, 1e-300])
def test_discrete_gaussian_quantile_tight_across_the_summing_boundary(sigma, alpha):
    """Either side of sigma = 1e5 (sums below, a closed-form bound above), h is the smallest valid
    half-width up to the stated relative 1e-7. Catches the first-order bound (f(m) where the sum has
    f(m) / 2): just above 1e5 it gave h one unit too wide at alpha = 0.9, a relative 8e-5, above the
    docstring's 1e-5."""
    mechanism = DiscreteGaussian(1, sigma=sigma)
    at_least = _gaussian_at_least(mpmath.mpf(sigma))
    h = int(timed(lambda: mechanism.noise_quantile(alpha)))
    assert 2 * at_least(h + 1) <= alpha
    slack = max(1, int(1e-7 * h))
    assert 2 * at_least(h + 1 - slack) > alpha
    exact = float(2 * at_least(h + 1))
    assert exact * (1 - 1e-12) <= mechanism.tail_probability(h) <= exact * (1 + 1e-7)


@pytest.mark.parametrize("sigma", [1e-6, 0.3, 99999.0, 1e5, 100001.0, 1e12])
def test_discrete_gaussian_moments_across_regimes(sigma):
    """E|X| and Var X to 1e-12 relative (1e-300 absolute for sigma = 1e-6, where both are e^-5e11);
    catches the variance of the continuous law or a truncated sum near the 1e5 boundary."""
    mechanism = DiscreteGaussian(1, sigma=sigma)
    s = mpmath.mpf(sigma)
    if sigma < 1e3:
        f = [mpmath.exp(-(mpmath.mpf(x) ** 2) / (2 * s * s)) for x in range(int(60 * sigma) + 60)]
        normaliser = 2 * mpmath.fsum(f) - 1
        error = 2 * mpmath.fsum(x * w for x, w in enumerate(f)) / normaliser
        variance = 2 * mpmath.fsum(x * x * w for x, w in enumerate(f)) / normaliser
    else:  # Euler-Maclaurin; Poisson summation makes the variance s^2 up to e^{-2 pi^2 s^2}
        error = 2 * (s**2 - mpmath.mpf(1) / 12 - 1 / (240 * s**2)) / (mpmath.sqrt(2 * mpmath.pi) * s)
        variance = s**2
    assert timed(lambda: mechanism.expected_error) == pytest.approx(float(error), rel=1e-12, abs=1e-300)
    assert timed(lambda: mechanism.variance) == pytest.approx(float(variance), rel=1e-12, abs=1e-300)


# ---------------------------------------------------------------------------------------------
# Staircase
# ---------------------------------------------------------------------------------------------


def _staircase_law(mechanism: Staircase) -> tuple[mpmath.mpf, mpmath.mpf, Callable[[int], mpmath.mpf]]:
    """Exact E|Z| 2^k, E Z^2 4^k and P(|Z| >= n): v(gW + r) = q^g (1 if r < m else b'), b' = 2^-j e^-y."""
    w, m = mechanism.step_units, mechanism.high_units
    q = mpmath.exp(-1 / mpmath.mpf(mechanism._step_scale))
    low = mpmath.ldexp(mpmath.exp(-mpmath.mpf(mechanism._coin_exponent)), -mechanism._halvings)

    def power_sum(n: int, p: int) -> mpmath.mpf:  # sum_{r < n} r^p
        return mpmath.mpf([n, n * (n - 1) // 2, (n - 1) * n * (2 * n - 1) // 6][p])

    step = [power_sum(m, p) + low * (power_sum(w, p) - power_sum(m, p)) for p in range(3)]
    g0, g1, g2 = 1 / (1 - q), q / (1 - q) ** 2, q * (1 + q) / (1 - q) ** 3  # sum_g g^p q^g
    total = 2 * step[0] * g0 - (1 if m >= 1 else low)
    first = w * step[0] * g1 + step[1] * g0
    second = w * w * step[0] * g2 + 2 * w * step[1] * g1 + step[2] * g0

    def at_least(n: int) -> mpmath.mpf:
        if n <= 0:
            return mpmath.mpf(1)
        g, r = divmod(n, w)
        rest = max(0, m - r) + low * (w - max(r, m))
        return 2 * q**g * (rest + step[0] * q / (1 - q)) / total

    return (
        mpmath.ldexp(2 * first / total, mechanism.grid_exponent),
        mpmath.ldexp(2 * second / total, 2 * mechanism.grid_exponent),
        at_least,
    )


STAIRCASE_CASES = [
    (1.0, 1.0, None),
    (1.0, 1e-6, None),
    (1.0, 1e-9, None),  # two grid units per step
    (1.0, 1e-12, None),  # one unit per step, no high part
    (1.0, 50.0, None),  # gamma W < 1/2: one high position (at least one when gamma > 0)
    (1e-6, 5.0, None),
    (1e12, 0.3, 0.0),
    (3.3, 1e-3, 0.25),
]


@pytest.mark.parametrize("sensitivity, epsilon, gamma", STAIRCASE_CASES)
def test_staircase_accuracy_at_extremes(sensitivity, epsilon, gamma):
    """Moments to 1e-12, half-widths valid and smallest (up to the 1e-12 margin on alpha) down to alpha
    1e-300; catches a wrong normaliser when the high part is empty or the step is one unit."""
    mechanism = Staircase(sensitivity, epsilon, gamma)
    error, power, at_least = _staircase_law(mechanism)
    assert mechanism.expected_error == pytest.approx(float(error), rel=1e-12)
    assert mechanism.variance == pytest.approx(float(power), rel=1e-12)
    for alpha in (0.9, 0.05, 1e-12, 1e-300):
        n = units(mechanism, timed(lambda: mechanism.noise_quantile(alpha)))  # noqa: B023
        assert at_least(n + 1) <= alpha
        assert n == 0 or at_least(n) > alpha * (1 - 1e-11)


def test_staircase_quantile_is_valid_for_alphas_at_the_tail_values():
    """alpha just below an exact tail P(|Z| >= n): h must be >= n. Catches the comparison without a
    float margin (invalid by ~1e-16), and at epsilon = 50 the tail's product q^g * mass passing through
    subnormal floats (alpha ~1e-304: h one unit short, the tail 6.7e-6 relative above alpha)."""
    for sensitivity, epsilon, gamma in ((1.0, 1.0, None), (1.0, 50.0, None), (3.3, 1e-3, 0.25)):
        mechanism = Staircase(sensitivity, epsilon, gamma)
        _, _, at_least = _staircase_law(mechanism)
        w = mechanism.step_units
        starts = (1, w // 3, w + 7, int(300 * w * mechanism._step_scale), int(700 * w * mechanism._step_scale))
        for start in starts:
            for n in range(start, start + 8):
                alpha = below(at_least(n))
                if not 0 < alpha < 1:
                    continue
                h = units(mechanism, mechanism.noise_quantile(alpha))
                assert at_least(h + 1) <= alpha


# ---------------------------------------------------------------------------------------------
# Selection mechanisms and randomized response
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [1e-6, 1.0, 50.0])
def test_selection_laws_at_extreme_epsilons(epsilon):
    """Permute-and-flip's quadrature and the exponential mechanism's softmax against exact sums over
    the (clamped, snapped) gaps; catches too few quadrature nodes or an unstable normalisation."""
    pf = PermuteAndFlip(1.0, epsilon)
    for scores in ([0.0, 1.0, 2.0, 10.0], [0.0] * 7 + [3e-6], list(np.linspace(0.0, 5 / epsilon, 12))):
        gaps = pf._gaps(np.asarray(scores), pf._cap)
        p = [mpmath.exp(-mpmath.mpf(pf._rate) * int(g)) for g in gaps]
        law = []
        for r in range(len(p)):
            poly = [mpmath.mpf(1)]  # prod_{j != r} (1 - x p_j), integrated over [0, 1] exactly
            for j in range(len(p)):
                if j != r:
                    poly = [a - b * p[j] for a, b in zip([*poly, 0], [0, *poly], strict=True)]
            law.append(p[r] * mpmath.fsum(c / (i + 1) for i, c in enumerate(poly)))
        normaliser = mpmath.fsum(law)
        got = pf.probabilities(np.asarray(scores))
        for value, exact in zip(got, law, strict=True):
            assert value == pytest.approx(float(exact / normaliser), rel=1e-12, abs=1e-300)
    exponential = Exponential(1.0, epsilon)
    scores = np.linspace(0.0, 3000 / epsilon, 50)  # gaps beyond the 1024-nat clamp included
    weights = [mpmath.exp(-mpmath.mpf(exponential._rate) * int(g)) for g in exponential._gaps(scores)]
    total = mpmath.fsum(weights)
    for value, weight in zip(exponential.probabilities(scores), weights, strict=True):
        assert value == pytest.approx(float(weight / total), rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("epsilon", [1e-6, 1.0, 50.0, 400.0, 1000.0])
@pytest.mark.parametrize("k", [2, 3, 1000])
def test_randomized_response_estimator_variance_at_extremes(epsilon, k):
    """[h q(1-q) + (1-h) r(1-r)] / (m p^2) in exact arithmetic. Catches (e^eps - 1)^2 overflowing (an
    OverflowError for every epsilon above ~355) and cancellation at epsilon = 1e-6."""
    mechanism = RandomizedResponse(epsilon, k=k)
    with mpmath.workdps(1000):  # 1 - q is e^-1000 at epsilon = 1000
        e = mpmath.exp(mpmath.mpf(epsilon))
        d = e + k - 1
        keep, other = e / d, 1 / d
        for h in (0.0, 0.3, 1.0):
            exact = (h * keep * (1 - keep) + (1 - h) * other * (1 - other)) / (1000 * (keep - other) ** 2)
            assert mechanism.estimator_variance(1000, h) == pytest.approx(float(exact), rel=1e-12, abs=1e-300)
        base = (d - 1) / (1000 * (e - 1) ** 2)  # seed 000's formula: the variance at h = 0
        assert mechanism.estimator_variance(1000) == pytest.approx(float(base), rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("epsilon", [29.0, 35.0, 50.0])
def test_staircase_at_large_epsilon_keeps_a_high_part(epsilon):
    """gamma* W rounds to 0 from epsilon ~29 on; with no high position the first step was uniform and
    E|X| was Delta / 2 (25x Laplace's at epsilon 50). Catches that: E|X| must stay below Laplace's and
    within one grid unit of the continuous optimum Delta e^{eps/2} / (e^eps - 1); releases stay exact."""
    mechanism = Staircase(1.0, epsilon)
    assert mechanism.high_units == 1
    unit = math.ldexp(1.0, mechanism.grid_exponent)
    optimum = math.exp(epsilon / 2) / math.expm1(epsilon)
    assert mechanism.expected_error < Laplace(1.0, epsilon).expected_error
    assert mechanism.expected_error <= optimum + unit
    from dpkit.noise import InsecureSeededRandom

    rng = InsecureSeededRandom(3)  # a seed: tests only
    noisy = [mechanism.release(0.25, rng=rng) for _ in range(200)]
    assert all(value == 0.25 for value in noisy)  # P(|noise| >= one unit) = about W e^-eps: below 1e-6 here


@pytest.mark.parametrize("epsilon", [1e-6, 1.0, 700.0, 800.0])
def test_randomized_response_frequency_estimates_at_extreme_epsilons(epsilon):
    """The unbiased estimator (f_k - (1 - p)/K) / p against mpmath, K = 3. Catches the OverflowError
    of e^eps above epsilon ~709 (the estimator was written in e^eps, not e^-eps)."""
    mechanism = RandomizedResponse(epsilon, [0, 1, 2])
    reports = np.array([0] * 10 + [1] * 30 + [2] * 60)
    e = mpmath.exp(mpmath.mpf(epsilon))
    p = (e - 1) / (e + 2)
    expected = [float((f - (1 - p) / 3) / p) for f in (mpmath.mpf("0.1"), mpmath.mpf("0.3"), mpmath.mpf("0.6"))]
    np.testing.assert_allclose(mechanism.estimate_frequencies(reports), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("epsilon", [1e-9, 1e-6, 1e-4, 1e-2, 1.0, 20.0])
def test_analytic_gaussian_sigma_is_private_and_tight_against_mpmath(epsilon):
    """The calibrated sigma's exact delta (Balle & Wang 2018, Thm 8, at 80 digits) is at most the target,
    and 1e-9 less sigma exceeds it. Catches the double-precision cancellation of the two terms for
    small epsilon: sigma(1e-6, 1e-100) gave an exact delta 1.3e-5 (relative) above the target."""
    from dpkit.mechanisms.gaussian import analytic_gaussian_sigma

    def exact(sigma: float) -> Any:
        with mpmath.workdps(80):
            s, e = mpmath.mpf(sigma), mpmath.mpf(epsilon)
            return mpmath.ncdf(1 / (2 * s) - e * s) - mpmath.exp(e) * mpmath.ncdf(-1 / (2 * s) - e * s)

    for delta in (0.3, 1e-6, 1e-12, 1e-50, 1e-100, 1e-300):
        sigma = analytic_gaussian_sigma(epsilon, delta)
        assert exact(sigma) <= delta, (epsilon, delta)
        assert exact(sigma * (1 - 1e-9)) > delta, (epsilon, delta)
