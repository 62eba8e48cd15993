"""Laplace, Gaussian and staircase mechanisms: parameters, guarantees, grid safety, exact accuracy."""

from __future__ import annotations

import csv
import math
import warnings
from fractions import Fraction
from pathlib import Path

import mpmath
import numpy as np
import pytest
from scipy import stats

from dpkit._errors import InvalidParameterError, PrivacyWarning
from dpkit.events import GaussianEvent, LaplaceEvent, PureDPEvent
from dpkit.guarantees import ApproxDP, PureDP
from dpkit.mechanisms.gaussian import (
    Gaussian,
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    discrete_gaussian_delta_upper,
)
from dpkit.mechanisms.laplace import Laplace
from dpkit.mechanisms.staircase import (
    _LN2_UPPER,
    Staircase,
    optimal_gamma_l1,
    optimal_gamma_l2,
    staircase_expected_amplitude,
    staircase_noise_power,
)
from dpkit.noise import InsecureSeededRandom, snap_to_grid

REFERENCE = Path(__file__).parent.parent / "data" / "analytic_gaussian_reference.csv"
FALSE_POSITIVE = 1e-6  # every statistical threshold below is a quantile at this level

BAD_EPSILONS = [0, -1, math.nan, math.inf, -math.inf, "1", True, None]
BAD_DELTAS = [-0.1, math.nan, 1, 1.5, 0, "0.1"]
BAD_SENSITIVITIES = [0, -1, math.nan, math.inf, "1", True]


class CountingSource:
    """An insecure source that counts the words drawn (to prove nothing is drawn before validation)."""

    secure = False

    def __init__(self) -> None:
        self.inner = InsecureSeededRandom(0)
        self.drawn = 0

    def uint64(self, size: int) -> np.ndarray:
        self.drawn += max(size, 0)
        return self.inner.uint64(size)


def makers():
    return {
        "laplace": lambda: Laplace(1.0, 1.0),
        "gaussian": lambda: Gaussian(1.0, 1.0, 1e-6),
        "staircase": lambda: Staircase(1.0, 1.0),
    }


# ---------------------------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", BAD_EPSILONS)
def test_bad_epsilon_refused(epsilon):
    for build in (
        lambda: Laplace(1.0, epsilon),
        lambda: Gaussian(1.0, epsilon, 1e-6),
        lambda: Staircase(1.0, epsilon),
    ):
        with pytest.raises(InvalidParameterError) as info:
            build()
        assert info.value.name == "epsilon"


@pytest.mark.parametrize("delta", BAD_DELTAS)
def test_bad_delta_refused(delta):
    with pytest.raises(InvalidParameterError) as info:
        Gaussian(1.0, 1.0, delta)
    assert info.value.name == "delta"


@pytest.mark.parametrize("sensitivity", BAD_SENSITIVITIES)
def test_bad_sensitivity_refused(sensitivity):
    for build in (
        lambda: Laplace(sensitivity, 1.0),
        lambda: Gaussian(sensitivity, 1.0, 1e-6),
        lambda: Staircase(sensitivity, 1.0),
    ):
        with pytest.raises(InvalidParameterError) as info:
            build()
        assert info.value.name == "sensitivity"


def test_other_bad_parameters_refused():
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(InvalidParameterError, match="dimension"):
            Laplace(1.0, 1.0, dimension=bad)
        with pytest.raises(InvalidParameterError, match="dimension"):
            Gaussian(1.0, 1.0, 1e-6, dimension=bad)
    for bad in (-0.1, 1.1, math.nan, "0.5"):
        with pytest.raises(InvalidParameterError, match="gamma"):
            Staircase(1.0, 1.0, gamma=bad)
    with pytest.raises(InvalidParameterError, match="calibration"):
        Gaussian(1.0, 1.0, 1e-6, calibration="optimal")


def test_risky_epsilon_warns():
    for build in (lambda: Laplace(1.0, 6.0), lambda: Gaussian(1.0, 6.0, 1e-6), lambda: Staircase(1.0, 6.0)):
        with pytest.warns(PrivacyWarning):
            build()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Laplace(1.0, 5.0)


@pytest.mark.parametrize("name", ["laplace", "gaussian", "staircase"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, None, "3", True, [1.0, math.nan]])
def test_bad_data_refused_before_any_noise(name, value):
    mechanism = makers()[name]()
    source = CountingSource()
    with pytest.raises(InvalidParameterError) as info:
        mechanism.release(value, rng=source)
    assert info.value.name == "value"
    assert source.drawn == 0


def test_release_of_wrong_dimension_refused():
    source = CountingSource()
    with pytest.raises(InvalidParameterError, match="dimension"):
        Laplace(1.0, 1.0, dimension=3).release([1.0, 2.0], rng=source)
    with pytest.raises(InvalidParameterError, match="dimension"):
        Gaussian(1.0, 1.0, 1e-6).release([1.0, 2.0], rng=source)
    with pytest.raises(InvalidParameterError, match="dimension"):
        Staircase(1.0, 1.0).release([1.0, 2.0], rng=source)
    assert source.drawn == 0


def test_numpy_generator_refused():
    with pytest.raises(InvalidParameterError, match="rng"):
        Laplace(1.0, 1.0).release(1.0, rng=np.random.default_rng(0))


# ---------------------------------------------------------------------------------------------
# Guarantees, events, privacy maps
# ---------------------------------------------------------------------------------------------


def test_laplace_guarantee_and_exact_calibration():
    for sens, eps, dim in [(1.0, 0.1, 1), (0.3, 1.0, 5), (7.0, 2.5, 1000), (1e-9, 0.01, 2)]:
        mechanism = Laplace(sens, eps, dimension=dim)
        assert mechanism.guarantee == PureDP(eps)
        assert mechanism.privacy_map(sens) == mechanism.guarantee
        step = Fraction(2) ** mechanism.grid_exponent
        # The released law is eps_eff-DP with eps_eff = (Delta + d 2^k) / scale <= eps, exactly.
        assert (max(Fraction(sens), Fraction(repr(sens))) + dim * step) / Fraction(mechanism.scale) <= Fraction(
            repr(eps)
        )
        assert mechanism.scale <= (sens + dim * float(step)) / eps * (1 + 1e-12)
        assert isinstance(mechanism.event, LaplaceEvent)
        assert mechanism.event.noise_multiplier * mechanism.effective_sensitivity <= mechanism.scale
        assert mechanism.check(sens, PureDP(eps))
        assert not mechanism.check(2 * sens, PureDP(eps))
        assert mechanism.privacy_map(2 * sens).epsilon <= 2 * eps
        assert mechanism.privacy_map(sens / 2).epsilon < eps


def test_gaussian_guarantee_event_and_maps():
    mechanism = Gaussian(2.0, 0.8, 1e-6)
    assert mechanism.guarantee == ApproxDP(0.8, 1e-6)
    assert mechanism.privacy_map(2.0) == mechanism.guarantee
    assert isinstance(mechanism.event, GaussianEvent)
    assert mechanism.event.noise_multiplier * mechanism.effective_sensitivity <= mechanism.sigma
    assert mechanism.event.noise_multiplier > 0.999 * mechanism.sigma / 2.0
    assert mechanism.rho == pytest.approx(mechanism.effective_sensitivity**2 / (2 * mechanism.sigma**2), rel=1e-12)
    assert mechanism.rho >= 2.0**2 / (2 * mechanism.sigma**2)
    assert mechanism.privacy_map(1.0).delta < 1e-6
    assert mechanism.privacy_map(4.0).delta > 1e-6
    assert mechanism.privacy_map(4.0).epsilon == 0.8
    assert mechanism.check(2.0, ApproxDP(0.8, 1e-6))
    assert not mechanism.check(4.0, ApproxDP(0.8, 1e-6))
    with pytest.raises(InvalidParameterError, match="d_in"):
        mechanism.privacy_map(1e6)
    vector = Gaussian(1.0, 1.0, 1e-6, dimension=10)
    assert vector.privacy_map(1.0) == vector.guarantee
    assert vector.privacy_map(0.5).delta <= 1e-6


def test_staircase_guarantee_event_and_map():
    mechanism = Staircase(1.0, 2.0)
    assert mechanism.guarantee == PureDP(2.0)
    assert mechanism.event == PureDPEvent(2.0)
    assert mechanism.privacy_map(1.0) == PureDP(2.0)
    assert mechanism.privacy_map(0.5) == PureDP(2.0)
    assert mechanism.privacy_map(2.5) == PureDP(6.0)


@pytest.mark.parametrize("epsilon", [0.01, 0.5, 1.0, 3.0, 20.0])
@pytest.mark.parametrize("gamma", [None, 0.0, 0.3, 1.0])
def test_staircase_discrete_law_is_epsilon_dp(epsilon, gamma):
    """v(j + W) = q v(j), v non-increasing, q >= e^-eps exactly: every shift <= W costs <= eps."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        mechanism = Staircase(0.7, epsilon, gamma=gamma)
    t = Fraction(mechanism._step_scale)
    assert 1 / t <= Fraction(repr(epsilon))  # q = e^{-1/t} >= e^{-eps}
    # b' = 2^-j e^-y with j ln 2 + y <= 1/t, so q <= b' <= 1
    assert mechanism._halvings * _LN2_UPPER + Fraction(mechanism._coin_exponent) <= 1 / t
    assert mechanism._coin_exponent >= 0
    assert mechanism.step_units == math.floor(math.ldexp(0.7, -mechanism.grid_exponent)) + 1
    assert 0 <= mechanism.high_units <= mechanism.step_units


# ---------------------------------------------------------------------------------------------
# The public grid (Mironov 2012)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["laplace", "gaussian", "staircase"])
def test_outputs_lie_on_the_grid_and_low_bits_carry_no_input(name):
    build = makers()[name]
    first, second = build(), build()
    k = first.grid_exponent
    for value in (0.0, 1.0 / 3.0, -123.456789, 1e6 + 0.1):
        out = first.release(value, rng=InsecureSeededRandom(7))
        assert math.ldexp(out, -k) == round(math.ldexp(out, -k))
        # Two inputs that round to the same grid point give bit-identical outputs.
        nudged = value + math.ldexp(0.1, k)
        if snap_to_grid(np.array([nudged]), k)[0] == snap_to_grid(np.array([value]), k)[0]:
            assert second.release(nudged, rng=InsecureSeededRandom(7)) == out


def test_vector_release_keeps_shape_and_grid():
    mechanism = Laplace(1.0, 1.0, dimension=6)
    out = mechanism.release(np.arange(6.0).reshape(2, 3) / 7, rng=InsecureSeededRandom(1))
    assert out.shape == (2, 3)
    assert np.all(np.ldexp(out, -mechanism.grid_exponent) == np.rint(np.ldexp(out, -mechanism.grid_exponent)))
    gaussian = Gaussian(1.0, 1.0, 1e-6, dimension=3)
    assert gaussian.release([1, 2, 3], rng=InsecureSeededRandom(2)).shape == (3,)  # integers are reals too
    assert isinstance(Laplace(1.0, 1.0).release(5, rng=InsecureSeededRandom(3)), float)


# ---------------------------------------------------------------------------------------------
# Laplace accuracy, exact for the discrete law
# ---------------------------------------------------------------------------------------------


def test_discrete_laplace_tail_closed_form_matches_pmf_sums():
    """Direct sums of the pmf (truncated where the rest is below e^-200) against the closed forms."""
    mpmath.mp.dps = 40
    for s in (0.7, 3.0, 25.0):
        q = mpmath.exp(-1 / mpmath.mpf(s))
        pmf = [(1 - q) / (1 + q) * q**z for z in range(int(200 * s) + 50)]
        for m in (1, 2, 5, 40):
            assert float(2 * mpmath.fsum(pmf[m:])) == pytest.approx(float(2 * q**m / (1 + q)), rel=1e-12)
        mean_abs = 2 * mpmath.fsum(z * p for z, p in enumerate(pmf))
        assert float(mean_abs) == pytest.approx(float(2 * q / (1 - q**2)), rel=1e-12)


@pytest.mark.parametrize("alpha", [0.5, 0.05, 1e-3, 1e-9])
def test_laplace_quantile_is_the_exact_smallest_grid_point(alpha):
    mechanism = Laplace(1.0, 0.5)
    h = mechanism.noise_quantile(alpha)
    m = round(math.ldexp(h, -mechanism.grid_exponent))
    s = mpmath.mpf(math.ldexp(mechanism.scale, -mechanism.grid_exponent))
    q = mpmath.exp(-1 / s)
    tail = lambda n: 2 * q**n / (1 + q)  # noqa: E731  P(|Z| >= n), n >= 1
    assert tail(m + 1) <= alpha < (tail(m) if m >= 1 else 1)
    # close to the continuous b ln(1/alpha)
    assert h == pytest.approx(mechanism.scale * math.log(1 / alpha), abs=2 * math.ldexp(1.0, mechanism.grid_exponent))


def test_laplace_accuracy_statements():
    mechanism = Laplace(1.0, 0.5, dimension=4)
    assert mechanism.expected_error == pytest.approx(mechanism.scale, rel=1e-9)
    assert mechanism.expected_l1_error() == pytest.approx(4 * mechanism.scale, rel=1e-9)
    assert mechanism.expected_l1_error(2) == pytest.approx(2 * mechanism.scale, rel=1e-9)
    # seed 000: ln(K/beta) Delta/eps, here with the effective scale (plus the discrete law's factor 2/(1+q))
    t = mechanism.linf_tail_bound(0.05)
    assert t == pytest.approx(mechanism.scale * math.log(4 / 0.05), rel=1e-5)
    s = math.ldexp(mechanism.scale, -mechanism.grid_exponent)
    q = math.exp(-1 / s)
    assert 4 * 2 * math.exp(-math.ldexp(t, -mechanism.grid_exponent) / s) / (1 + q) <= 0.05


@pytest.mark.statistical
def test_laplace_empirical_coverage_and_spread():
    n, alpha = 200_000, 0.05
    mechanism = Laplace(1.0, 0.5, dimension=n)
    noise = mechanism.release(np.zeros(n), rng=InsecureSeededRandom(11))
    h = mechanism.noise_quantile(alpha)
    s = math.ldexp(mechanism.scale, -mechanism.grid_exponent)
    m = round(math.ldexp(h, -mechanism.grid_exponent))
    exact_miss = 2 * math.exp(-(m + 1) / s) / (1 + math.exp(-1 / s))
    misses = int(np.sum(np.abs(noise) > h))
    assert (
        stats.binom.ppf(FALSE_POSITIVE / 2, n, exact_miss)
        <= misses
        <= stats.binom.ppf(1 - FALSE_POSITIVE / 2, n, exact_miss)
    )
    # mean |noise| within a CLT band at the same level (|Z| has sd below its mean times 1.5)
    z = stats.norm.ppf(1 - FALSE_POSITIVE / 2)
    assert abs(np.mean(np.abs(noise)) - mechanism.expected_error) <= z * 1.5 * mechanism.expected_error / math.sqrt(n)


def test_laplace_from_accuracy_round_trip():
    for sens, accuracy, alpha in [(1.0, 10.0, 0.05), (3.0, 5.0, 0.01), (0.01, 1.0, 0.2)]:
        mechanism = Laplace.from_accuracy(sens, accuracy, alpha)
        assert mechanism.noise_quantile(alpha) <= accuracy
        slightly_less = Laplace(sens, mechanism.epsilon * (1 - 1e-4))
        assert slightly_less.noise_quantile(alpha) > accuracy
        assert mechanism.epsilon == pytest.approx(sens * math.log(1 / alpha) / accuracy, rel=1e-4)
    with pytest.raises(InvalidParameterError, match="alpha"):
        Laplace.from_accuracy(1.0, 1.0, 1.0)


# ---------------------------------------------------------------------------------------------
# Gaussian calibration
# ---------------------------------------------------------------------------------------------


def _reference_rows():
    with REFERENCE.open() as handle:
        return [
            (float(r["epsilon"]), float(r["delta"]), float(r["sensitivity"]), float(r["sigma"]))
            for r in csv.DictReader(handle)
        ]


@pytest.mark.parametrize("epsilon, delta, sensitivity, sigma", _reference_rows())
def test_analytic_sigma_matches_independent_mpmath_reference(epsilon, delta, sensitivity, sigma):
    computed = analytic_gaussian_sigma(epsilon, delta, sensitivity)
    assert sigma <= computed <= sigma * (1 + 1e-10)
    assert analytic_gaussian_delta(computed, sensitivity, epsilon) <= delta
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        mechanism = Gaussian(sensitivity, epsilon, delta)
    # calibrated for the effective sensitivity Delta + 2^k, against a rigorous discrete bound
    assert mechanism.sigma >= sigma * mechanism.effective_sensitivity / sensitivity
    assert mechanism.sigma <= sigma * (1 + 1e-5)


def test_reference_values_against_balle_wang_curve_in_mpmath():
    """The committed sigmas sit exactly on the (epsilon, delta) curve (the script is re-run in miniature)."""
    mpmath.mp.dps = 40
    for epsilon, delta, sensitivity, sigma in _reference_rows()[:4]:
        s, d, e = mpmath.mpf(sigma), mpmath.mpf(sensitivity), mpmath.mpf(epsilon)
        phi = lambda x: mpmath.erfc(-x / mpmath.sqrt(2)) / 2  # noqa: E731
        value = phi(d / (2 * s) - e * s / d) - mpmath.exp(e) * phi(-d / (2 * s) - e * s / d)
        assert float(value) == pytest.approx(delta, rel=1e-20 + 1e-12)


def test_classic_refuses_large_epsilon_and_is_looser_than_analytic():
    for eps in (1, 1.0, 2.0, 10.0):
        with pytest.raises(InvalidParameterError, match="epsilon"):
            Gaussian(1.0, eps, 1e-5, calibration="classic")
        with pytest.raises(InvalidParameterError, match="epsilon"):
            classic_gaussian_sigma(eps, 1e-5)
    for eps in (0.01, 0.1, 0.5, 0.99):
        for delta in (1e-3, 1e-5, 1e-10):
            classic = Gaussian(1.0, eps, delta, calibration="classic")
            analytic = Gaussian(1.0, eps, delta)
            assert analytic.sigma < classic.sigma
            assert classic.sigma >= classic_gaussian_sigma(eps, delta, classic.effective_sensitivity) * (1 - 1e-15)
            assert classic.guarantee == analytic.guarantee == ApproxDP(eps, delta)


def _exact_discrete_delta(sigma: float, shift: int, epsilon: float) -> mpmath.mpf:
    """sum_z max(0, p(z) - e^eps p(z - a)) for the discrete Gaussian, summed exactly in mpmath."""
    mpmath.mp.dps = 50
    s2 = 2 * mpmath.mpf(sigma) ** 2
    reach = int(shift + 60 * sigma) + 10
    weights = {z: mpmath.exp(-(mpmath.mpf(z) ** 2) / s2) for z in range(-reach - shift, reach + shift + 1)}
    norm = mpmath.fsum(weights[z] for z in range(-reach - shift, reach + shift + 1))
    factor = mpmath.exp(epsilon)
    total = mpmath.fsum(max(0, weights[z] - factor * weights[z - shift]) for z in range(-reach, reach + 1))
    return total / norm


@pytest.mark.parametrize(
    "sigma, shift, epsilon",
    [(3.0, 1, 0.5), (10.0, 3, 1.0), (40.0, 10, 0.3), (25.0, 20, 2.0), (2.0, 5, 1.0), (200.0, 50, 1.0)],
)
def test_discrete_gaussian_delta_bound_holds_against_exact_sums(sigma, shift, epsilon):
    exact = _exact_discrete_delta(sigma, shift, epsilon)
    bound = discrete_gaussian_delta_upper(sigma, shift, epsilon)
    assert float(exact) <= bound
    # and the bound tightens as sigma grows in grid units (the mechanism works at sigma ~ 2^20 units)
    assert bound <= float(exact) * (1 + 5 / sigma)


def test_discrete_vs_continuous_delta_recorded():
    """For these lattice parameters the discrete Gaussian's delta is within a fraction of a percent of the
    continuous one, sometimes above it: hence dpkit calibrates against a discrete bound, not the formula."""
    ratios = [
        float(_exact_discrete_delta(s, a, e)) / analytic_gaussian_delta(s, a, e)
        for s, a, e in [(10.0, 3, 1.0), (40.0, 10, 0.3), (25.0, 20, 2.0)]
    ]
    assert all(abs(r - 1) < 0.05 for r in ratios)
    assert any(r > 1 for r in ratios)  # e.g. sigma = 25, a = 20, eps = 2: the discrete delta is 0.06% larger


def test_gaussian_mechanism_meets_delta_by_its_own_rigorous_bound():
    for eps, delta in [(0.1, 1e-5), (1.0, 1e-8), (3.0, 1e-3)]:
        mechanism = Gaussian(1.0, eps, delta)
        units = round(math.ldexp(mechanism.effective_sensitivity, -mechanism.grid_exponent))
        sigma_units = math.ldexp(mechanism.sigma, -mechanism.grid_exponent)
        assert discrete_gaussian_delta_upper(sigma_units, units, eps) <= delta


def test_gaussian_vector_calibration_uses_zcdp_and_is_rigorous():
    mechanism = Gaussian(1.0, 1.0, 1e-5, dimension=100)
    scalar = Gaussian(1.0, 1.0, 1e-5)
    assert mechanism.sigma > scalar.sigma  # zCDP route: a little more noise
    assert mechanism.sigma < 1.3 * scalar.sigma
    from dpkit.guarantees import ZCDP

    assert ZCDP(mechanism.rho).to_approx(1e-5).epsilon <= 1.0 + 1e-9


def test_gaussian_quantile_and_tail_bounds():
    mechanism = Gaussian(1.0, 1.0, 1e-5, dimension=3)
    for alpha in (0.5, 0.05, 1e-6):
        h = mechanism.noise_quantile(alpha)
        continuous = mechanism.sigma * stats.norm.ppf(1 - alpha / 2)
        step = math.ldexp(1.0, mechanism.grid_exponent)
        assert continuous - step <= h <= continuous + 3 * step
    assert mechanism.expected_error == pytest.approx(mechanism.sigma * math.sqrt(2 / math.pi), rel=1e-9)
    t = mechanism.linf_tail_bound(0.05)
    assert t == pytest.approx(mechanism.sigma * stats.norm.ppf(1 - 0.05 / 6), rel=1e-5)
    # the seed's sqrt(2 ln(1.25/delta)) ln(K/beta) Delta/eps is not a valid tail bound for every (K, beta)
    assert 2 * stats.norm.sf(math.log(1 / 0.9)) > 0.9


@pytest.mark.statistical
def test_gaussian_empirical_coverage():
    n, alpha = 200_000, 0.05
    mechanism = Gaussian(1.0, 1.0, 1e-5, dimension=n)
    noise = mechanism.release(np.zeros(n), rng=InsecureSeededRandom(12))
    h = mechanism.noise_quantile(alpha)
    misses = int(np.sum(np.abs(noise) > h))
    p = 2 * stats.norm.sf(h / mechanism.sigma)  # the discrete law's tail agrees to ~1e-6 relative here
    assert stats.binom.ppf(FALSE_POSITIVE / 2, n, p) <= misses <= stats.binom.ppf(1 - FALSE_POSITIVE / 2, n, p)
    chi_low = stats.chi2.ppf(FALSE_POSITIVE / 2, n) / n
    chi_high = stats.chi2.ppf(1 - FALSE_POSITIVE / 2, n) / n
    assert chi_low <= np.mean(noise**2) / mechanism.sigma**2 <= chi_high


def test_gaussian_from_accuracy_round_trip():
    for calibration, accuracy in (("analytic", 10.0), ("classic", 20.0), ("analytic", 2.0)):
        mechanism = Gaussian.from_accuracy(1.0, accuracy, 0.05, 1e-6, calibration=calibration)
        assert mechanism.noise_quantile(0.05) <= accuracy
        assert mechanism.calibration == calibration
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            less = Gaussian(1.0, mechanism.epsilon * (1 - 1e-6), 1e-6, calibration)
        assert less.noise_quantile(0.05) > accuracy
    with pytest.raises(InvalidParameterError, match="accuracy"):
        Gaussian.from_accuracy(1.0, 1.0, 0.05, 1e-6, calibration="classic")


# ---------------------------------------------------------------------------------------------
# Staircase
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 2.0, 5.0, 10.0])
def test_staircase_closed_forms_match_the_paper(epsilon):
    b = math.exp(-epsilon)
    # Geng & Viswanath 2016: min E|X| = Delta e^{eps/2} / (e^eps - 1) at gamma* = 1/(1 + e^{eps/2})
    assert staircase_expected_amplitude(epsilon, 2.0) == pytest.approx(
        2.0 * math.exp(epsilon / 2) / math.expm1(epsilon)
    )
    # min E[X^2] = Delta^2 (2^{-2/3} b^{2/3} (1+b)^{2/3} + b) / (1-b)^2 at the l2-optimal gamma
    power = (2 ** (-2 / 3) * b ** (2 / 3) * (1 + b) ** (2 / 3) + b) / (1 - b) ** 2
    assert staircase_noise_power(epsilon, 3.0) == pytest.approx(9.0 * power, rel=1e-9)
    # the optimal gammas are minimisers of their costs
    for gamma, cost in (
        (optimal_gamma_l1(epsilon), staircase_expected_amplitude),
        (optimal_gamma_l2(epsilon), staircase_noise_power),
    ):
        for other in (gamma * 0.9, min(1.0, gamma * 1.1), 0.0, 0.5, 1.0):
            assert cost(epsilon, 1.0, gamma) <= cost(epsilon, 1.0, other) * (1 + 1e-12)


def test_staircase_moments_against_numerical_integration_of_the_density():
    from scipy import integrate

    epsilon, delta, gamma = 1.3, 1.0, 0.35
    b = math.exp(-epsilon)
    a = (1 - b) / (2 * delta * (gamma + (1 - gamma) * b))

    def density(x: float) -> float:
        k = math.floor(abs(x) / delta)
        return a * b**k * (1.0 if abs(x) - k * delta < gamma * delta else b)

    pieces = [p * delta for p in np.arange(0, 60) for p in (p, p + gamma)]
    mass = 2 * sum(integrate.quad(density, lo, hi)[0] for lo, hi in zip(pieces, pieces[1:], strict=False))
    first = 2 * sum(
        integrate.quad(lambda x: x * density(x), lo, hi)[0] for lo, hi in zip(pieces, pieces[1:], strict=False)
    )
    second = 2 * sum(
        integrate.quad(lambda x: x * x * density(x), lo, hi)[0] for lo, hi in zip(pieces, pieces[1:], strict=False)
    )
    assert mass == pytest.approx(1.0, rel=1e-9)
    assert staircase_expected_amplitude(epsilon, delta, gamma) == pytest.approx(first, rel=1e-9)
    assert staircase_noise_power(epsilon, delta, gamma) == pytest.approx(second, rel=1e-9)


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 5.0])
def test_released_staircase_law_is_close_to_the_continuous_one(epsilon):
    mechanism = Staircase(1.0, epsilon)
    continuous_error = staircase_expected_amplitude(epsilon, mechanism.effective_sensitivity, mechanism.gamma)
    continuous_power = staircase_noise_power(epsilon, mechanism.effective_sensitivity, mechanism.gamma)
    assert mechanism.expected_error == pytest.approx(continuous_error, rel=1e-5)
    assert mechanism.variance == pytest.approx(continuous_power, rel=1e-5)


def test_staircase_beats_laplace_at_large_epsilon():
    for epsilon in (5.0, 3.0):
        staircase = Staircase(1.0, epsilon)
        l2 = Staircase(1.0, epsilon, gamma=optimal_gamma_l2(epsilon))
        laplace_variance = 2 * (1.0 / epsilon) ** 2
        assert staircase.variance < laplace_variance
        assert l2.variance < staircase.variance
        assert staircase.expected_error < Laplace(1.0, epsilon).expected_error
    # and at epsilon = 5 by more than half
    assert Staircase(1.0, 5.0).variance < 0.5 * 2 * (1 / 5) ** 2


def test_staircase_quantile_from_the_exact_tail():
    mechanism = Staircase(1.0, 1.0)
    for alpha in (0.5, 0.1, 0.01, 1e-8):
        h = mechanism.noise_quantile(alpha)
        n = round(math.ldexp(h, -mechanism.grid_exponent))
        assert mechanism._tail_units(n + 1) <= alpha < mechanism._tail_units(n)
    # tail at whole steps: P(|Z| >= g W) = 2 q^g (per-step mass / (1 - q)) / total
    q = mechanism._q
    total, _, _, per_step = mechanism._sums()
    assert mechanism._tail_units(mechanism.step_units * 3) == pytest.approx(
        2 * q**3 * per_step / (1 - q) / total, rel=1e-9
    )
    assert mechanism._tail_units(1) == pytest.approx(1 - 1 / mechanism._sums()[0], rel=1e-12)


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon, gamma", [(1.0, None), (5.0, None), (2.0, 0.0), (0.5, 1.0)])
def test_staircase_sampler_matches_its_law(epsilon, gamma):
    """Chi-squared test on (step, sub-step, sign) cells against the exact discrete staircase law."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        mechanism = Staircase(1.0, epsilon, gamma=gamma)
    n = 100_000
    z = mechanism._sample_units(n, InsecureSeededRandom(21))
    w, m = mechanism.step_units, mechanism.high_units
    magnitude = np.abs(z)
    step, position = magnitude // w, magnitude % w
    high = position < m
    steps_kept = 4
    observed, expected = [], []
    total, _, _, per_step = mechanism._sums()
    for g in range(steps_kept):
        for is_high in (True, False):
            for sign in (1, -1):
                cell = (step == g) & (high == is_high) & (np.sign(z) == sign)
                count = (m if is_high else (w - m) * mechanism._low_weight) * mechanism._q**g
                if g == 0 and (is_high if m >= 1 else not is_high):
                    count -= 1.0 if m >= 1 else mechanism._low_weight  # z = 0 has its own cell
                observed.append(int(cell.sum()))
                expected.append(n * count / total)
    zeros = int(np.sum(z == 0))
    observed.append(zeros)
    expected.append(n * (1.0 if m >= 1 else mechanism._low_weight) / total)
    observed.append(n - sum(observed))
    expected.append(n - sum(expected))
    observed_arr, expected_arr = np.array(observed, float), np.array(expected, float)
    keep = expected_arr > 5
    statistic = np.sum((observed_arr[keep] - expected_arr[keep]) ** 2 / expected_arr[keep])
    assert statistic <= stats.chi2.ppf(1 - FALSE_POSITIVE, int(keep.sum()) - 1)
    # uniform position within a sub-step: mean offset inside the high parts is (m - 1)/2
    if m > 1 and np.sum(high) > 1000:
        offsets = position[high]
        sd = m / math.sqrt(12)
        assert abs(offsets.mean() - (m - 1) / 2) <= stats.norm.ppf(1 - FALSE_POSITIVE / 2) * sd / math.sqrt(
            offsets.size
        )


def test_analytic_sigma_matches_diffprivlib():
    """Peer reference: diffprivlib's GaussianAnalytic (values committed with its version)."""
    import csv
    import pathlib

    from dpkit.mechanisms import analytic_gaussian_sigma

    path = pathlib.Path(__file__).resolve().parents[1] / "data" / "analytic_gaussian_diffprivlib.csv"
    rows = list(csv.DictReader(line for line in path.read_text().splitlines() if not line.startswith("#")))
    assert len(rows) == 16
    for row in rows:
        ours = analytic_gaussian_sigma(float(row["epsilon"]), float(row["delta"]), float(row["sensitivity"]))
        # diffprivlib stops its search at a relative tolerance of about 1e-6; ours is exact to 1e-12.
        assert abs(ours / float(row["sigma"]) - 1) < 1e-6, row
