"""Discrete Laplace, (truncated) geometric, discrete Gaussian and randomized response.

Statistical thresholds come from an explicit false-positive rate FPR = 1e-6 (scipy quantiles);
every random test uses a fixed seed.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from dpkit._errors import InvalidParameterError, PrivacyWarning
from dpkit.events import DiscreteGaussianEvent, DiscreteLaplaceEvent, RandomizedResponseEvent
from dpkit.guarantees import ZCDP, ApproxDP, NeighbourRelation, PureDP
from dpkit.mechanisms.discrete_gaussian import DiscreteGaussian, discrete_gaussian_delta
from dpkit.mechanisms.geometric import DiscreteLaplace, Geometric
from dpkit.mechanisms.randomized_response import RandomizedResponse, bernoulli_keep
from dpkit.noise import InsecureSeededRandom, constant_time_tv_bound

FPR = 1e-6
Z = stats.norm.isf(FPR / 2)  # two-sided z quantile for the false-positive rate

BAD_EPSILONS = [0, -1, float("nan"), float("inf"), -float("inf"), "1", True, None]
BAD_DELTAS = [-0.1, float("nan"), 1, 1.5]
BAD_SENSITIVITIES = [0, -1, float("nan"), float("inf")]


def rng(seed: int = 0) -> InsecureSeededRandom:
    return InsecureSeededRandom(seed)


def chi_square_ok(observed: np.ndarray, expected_probabilities: np.ndarray) -> bool:
    """Goodness of fit at false-positive rate FPR; cells with small expectation are pooled."""
    n = observed.sum()
    expected = expected_probabilities * n
    big = expected >= 20
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
    statistic = float(np.sum((obs - exp) ** 2 / exp))
    return statistic <= stats.chi2.isf(FPR, df=len(obs) - 1)


# ---------------------------------------------------------------------------------------------
# Parameter validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", BAD_EPSILONS)
def test_bad_epsilon_refused_everywhere(epsilon):
    for build in (
        lambda: DiscreteLaplace(1, epsilon),
        lambda: Geometric(1, epsilon, 0, 10),
        lambda: DiscreteGaussian(1, epsilon=epsilon, delta=1e-6),
        lambda: RandomizedResponse(epsilon),
    ):
        with pytest.raises(InvalidParameterError) as info:
            build()
        assert info.value.name == "epsilon"


@pytest.mark.parametrize("delta", BAD_DELTAS)
def test_bad_delta_refused(delta):
    with pytest.raises(InvalidParameterError) as info:
        DiscreteGaussian(1, epsilon=1.0, delta=delta)
    assert info.value.name == "delta"


@pytest.mark.parametrize("sensitivity", BAD_SENSITIVITIES + [1.5, True, "1"])
def test_bad_sensitivity_refused(sensitivity):
    for build in (
        lambda: DiscreteLaplace(sensitivity, 1.0),
        lambda: Geometric(sensitivity, 1.0),
        lambda: DiscreteGaussian(sensitivity, epsilon=1.0, delta=1e-6),
    ):
        with pytest.raises(InvalidParameterError) as info:
            build()
        assert info.value.name == "sensitivity"


@pytest.mark.parametrize("sensitivity", BAD_SENSITIVITIES)
def test_bad_l2_sensitivity_refused(sensitivity):
    with pytest.raises(InvalidParameterError, match="sensitivity"):
        DiscreteGaussian(sensitivity, sigma=1.0)


def test_discrete_gaussian_needs_exactly_one_mode():
    for kwargs in ({}, {"sigma": 1.0, "rho": 0.5}, {"sigma": 1.0, "epsilon": 1.0, "delta": 1e-6}, {"epsilon": 1.0}):
        with pytest.raises(InvalidParameterError):
            DiscreteGaussian(1, **kwargs)
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidParameterError, match="sigma"):
            DiscreteGaussian(1, sigma=bad)
        with pytest.raises(InvalidParameterError, match="rho"):
            DiscreteGaussian(1, rho=bad)


def test_randomized_response_domain_refused():
    for categories in ([], ["a"], ["a", "a"], "ab", 3):
        with pytest.raises(InvalidParameterError, match="categories"):
            RandomizedResponse(1.0, categories)
    for k in (0, 1, 2.0, True):
        with pytest.raises(InvalidParameterError, match="k"):
            RandomizedResponse(1.0, k=k)
    with pytest.raises(InvalidParameterError):
        RandomizedResponse(1.0, ["a", "b"], k=2)


def test_geometric_bounds_refused():
    for lower, upper in ((5, 5), (6, 5), (0.5, 3), (0, float("inf")), (None, float("nan"))):
        with pytest.raises(InvalidParameterError):
            Geometric(1, 1.0, lower, upper)


def test_risky_epsilon_warns():
    for build in (
        lambda: DiscreteLaplace(1, 6.0),
        lambda: RandomizedResponse(6.0),
        lambda: DiscreteGaussian(1, epsilon=6.0, delta=1e-6),
    ):
        with pytest.warns(PrivacyWarning):
            build()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), None, "3", 1.5, [1, None], True])
def test_bad_data_refused_before_noise(value):
    class Exploding:
        secure = False

        def uint64(self, size):
            raise AssertionError("noise drawn before validation")

    for mechanism in (DiscreteLaplace(1, 1.0), Geometric(1, 1.0, 0, 10), DiscreteGaussian(1, sigma=2.0)):
        with pytest.raises(InvalidParameterError):
            mechanism.release(value, rng=Exploding())


def test_geometric_out_of_range_refused():
    mechanism = Geometric(1, 1.0, lower=0, upper=10)
    for value in (-1, 11, [3, 12]):
        with pytest.raises(InvalidParameterError, match="value"):
            mechanism.release(value, rng=rng())


def test_randomized_response_bad_values_refused():
    rr = RandomizedResponse(1.0, ["a", "b", "c"])
    for value in ("d", ["a", "z"], None, 1):
        with pytest.raises(InvalidParameterError):
            rr.release(value, rng=rng())
    indexed = RandomizedResponse(1.0, k=3)
    for value in (3, -1, [0, 5], 1.0, "a", None):
        with pytest.raises(InvalidParameterError):
            indexed.release(value, rng=rng())
    binary = RandomizedResponse(1.0)
    for value in (0, 1, "True"):  # True and 1 are different things here
        with pytest.raises(InvalidParameterError):
            binary.release(value, rng=rng())


def test_numpy_generator_refused():
    with pytest.raises(InvalidParameterError, match="rng"):
        DiscreteLaplace(1, 1.0).release(3, rng=np.random.default_rng(0))


# ---------------------------------------------------------------------------------------------
# Guarantees, events, privacy maps
# ---------------------------------------------------------------------------------------------


def test_discrete_laplace_guarantee_and_scale():
    mechanism = DiscreteLaplace(3, 0.7)
    assert mechanism.guarantee == PureDP(0.7)
    assert mechanism.scale >= 3 / 0.7 and math.nextafter(mechanism.scale, 0) < 3 / 0.7 + 1e-12
    assert mechanism.event == DiscreteLaplaceEvent(mechanism.scale, 3)
    assert mechanism.privacy_map(3) == mechanism.guarantee
    assert mechanism.check(3, PureDP(0.7)) and not mechanism.check(3, PureDP(0.69))
    # The realised ratio bound exp(Delta / scale) never exceeds exp(epsilon).
    assert 3 / mechanism.scale <= 0.7


def test_constant_time_guarantee_adds_delta():
    mechanism = DiscreteLaplace(1, 1.0, constant_time=True, dimension=4)
    guarantee = mechanism.guarantee
    assert isinstance(guarantee, ApproxDP) and guarantee.epsilon == 1.0
    tau = constant_time_tv_bound(mechanism.scale)
    assert guarantee.delta >= (1 + math.e) * 4 * tau
    assert guarantee.delta < 1e-9
    out = mechanism.release([1, 2, 3, 4], rng=rng(1))
    assert out.shape == (4,)
    with pytest.raises(InvalidParameterError, match="value"):
        mechanism.release([1, 2, 3, 4, 5], rng=rng(1))


def test_discrete_gaussian_guarantees():
    from_sigma = DiscreteGaussian(2, sigma=3.0)
    assert from_sigma.guarantee.rho_exact == Fraction(2, 9)
    assert from_sigma.guarantee.rho_exact == from_sigma.privacy_map(2).rho_exact
    assert abs(from_sigma.rho - 4 / 18) < 1e-15
    assert from_sigma.event == DiscreteGaussianEvent(3.0, 2.0)
    from_rho = DiscreteGaussian(1, rho=0.5)
    assert from_rho.guarantee == ZCDP(0.5)
    assert from_rho.sigma >= 1.0 and from_rho.sigma < 1.0 + 1e-12
    assert from_rho.privacy_map(2) == ZCDP(2.0)
    calibrated = DiscreteGaussian(1, epsilon=1.0, delta=1e-6)
    assert calibrated.guarantee == ApproxDP(1.0, 1e-6)
    assert discrete_gaussian_delta(calibrated.sigma, 1.0, 1) <= 1e-6
    # Optimal to about 1e-9: a slightly smaller sigma breaks the target.
    assert discrete_gaussian_delta(calibrated.sigma * (1 - 1e-6), 1.0, 1) > 1e-6
    with pytest.raises(InvalidParameterError, match="value"):
        calibrated.release([1, 2], rng=rng())


def test_randomized_response_guarantee():
    rr = RandomizedResponse(0.8, k=5)
    assert rr.guarantee == PureDP(0.8, NeighbourRelation.REPLACE_ONE)
    assert rr.event == RandomizedResponseEvent(0.8, 5)
    assert rr.privacy_map(2) == PureDP(1.6, NeighbourRelation.REPLACE_ONE)


# ---------------------------------------------------------------------------------------------
# Exact DP ratios from exact output laws
# ---------------------------------------------------------------------------------------------


def _mp_truncated_geometric(x: int, lower: int, upper: int, scale: float) -> list:
    """Independent reference with mpmath: the truncated two-sided geometric law."""
    q = mpmath.exp(-1 / mpmath.mpf(scale))

    def pmf(z: int):
        return (1 - q) / (1 + q) * q ** abs(z)

    law = [pmf(y - x) for y in range(lower, upper + 1)]
    law[0] = mpmath.nsum(lambda z: pmf(int(z)), [-mpmath.inf, lower - x])
    law[-1] = mpmath.nsum(lambda z: pmf(int(z)), [upper - x, mpmath.inf])
    return law


@pytest.mark.parametrize("sensitivity,epsilon", [(1, 0.5), (1, 2.0), (2, 1.0)])
def test_truncated_geometric_exact_ratio(sensitivity, epsilon):
    mpmath.mp.dps = 40
    lower, upper = 0, 12
    mechanism = Geometric(sensitivity, epsilon, lower, upper)
    # e^eps, plus 1e-30 relative for mpmath's rounding (the bound is attained with equality).
    bound = mpmath.exp(mpmath.mpf(epsilon)) * (1 + mpmath.mpf(10) ** -30)
    for x in range(lower, upper - sensitivity + 1):
        reference = _mp_truncated_geometric(x, lower, upper, mechanism.scale)
        neighbour = _mp_truncated_geometric(x + sensitivity, lower, upper, mechanism.scale)
        assert abs(mpmath.fsum(reference) - 1) < mpmath.mpf(10) ** -30
        ours = mechanism.output_distribution(x)
        for y, p in zip(range(lower, upper + 1), reference, strict=True):
            assert ours[y] == pytest.approx(float(p), rel=1e-12)
        for p, p_neighbour in zip(reference, neighbour, strict=True):
            assert p <= bound * p_neighbour and p_neighbour <= bound * p


def test_k_rr_exact_ratio():
    mpmath.mp.dps = 40
    for epsilon, k in ((0.1, 2), (1.0, 3), (2.5, 10)):
        rr = RandomizedResponse(epsilon, k=k)
        e = mpmath.exp(mpmath.mpf(epsilon))
        exact = [[(e if i == j else 1) / (e + k - 1) for j in range(k)] for i in range(k)]
        matrix = rr.output_probabilities()
        assert np.allclose(matrix.sum(axis=1), 1.0, atol=1e-14)
        for i in range(k):
            for j in range(k):
                assert matrix[i, j] == pytest.approx(float(exact[i][j]), rel=1e-13)
                for i2 in range(k):
                    assert exact[i][j] <= e * exact[i2][j] * (1 + mpmath.mpf(10) ** -30)
        # Seed 000's two-step description gives the same law.
        keep = 1 - mpmath.mpf(k) / (e + k - 1) + mpmath.mpf(1) / (e + k - 1)
        assert float(keep) == pytest.approx(rr.keep_probability, rel=1e-13)


def _mp_discrete_gaussian_delta(sigma: float, epsilon: float, sensitivity: int):
    """Brute force: sum_z max(0, p(z) - e^eps p(z - Delta)) with mpmath."""
    mpmath.mp.dps = 40
    s = mpmath.mpf(sigma)
    normalizer = mpmath.nsum(lambda x: mpmath.exp(-(x**2) / (2 * s**2)), [-mpmath.inf, mpmath.inf])

    def p(z: int):
        return mpmath.exp(-(mpmath.mpf(z) ** 2) / (2 * s**2)) / normalizer

    reach = int(50 * sigma) + sensitivity + 5
    e = mpmath.exp(mpmath.mpf(epsilon))
    return mpmath.fsum(max(0, p(z) - e * p(z - sensitivity)) for z in range(-reach, reach + 1))


@pytest.mark.parametrize(
    "sigma,epsilon,sensitivity", [(0.7, 0.5, 1), (3.0, 1.0, 1), (2.5, 0.5, 3), (5.0, 2.0, 2), (10.0, 0.3, 1)]
)
def test_cks_delta_matches_brute_force(sigma, epsilon, sensitivity):
    ours = discrete_gaussian_delta(sigma, epsilon, sensitivity)
    reference = float(_mp_discrete_gaussian_delta(sigma, epsilon, sensitivity))
    assert ours == pytest.approx(reference, rel=1e-9, abs=1e-300)


def test_calibrated_sigma_meets_delta_by_brute_force():
    mechanism = DiscreteGaussian(1, epsilon=0.5, delta=1e-5)
    assert float(_mp_discrete_gaussian_delta(mechanism.sigma, 0.5, 1)) <= 1e-5


# ---------------------------------------------------------------------------------------------
# Accuracy: confidence intervals, expected error, variance (exact)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.1, 0.7, 3.0])
@pytest.mark.parametrize("alpha", [0.5, 0.05, 1e-4])
def test_discrete_laplace_interval_exact(epsilon, alpha):
    mpmath.mp.dps = 40
    mechanism = DiscreteLaplace(1, epsilon)
    h = int(mechanism.noise_quantile(alpha))
    q = mpmath.exp(-1 / mpmath.mpf(mechanism.scale))

    def tail(m: int):  # P(|Z| > m)
        return 2 * q ** (m + 1) / (1 + q)

    assert tail(h) <= alpha
    assert h == 0 or tail(h - 1) > alpha
    assert mechanism.expected_error == pytest.approx(float(2 * q / (1 - q**2)), rel=1e-12)
    assert mechanism.variance == pytest.approx(float(2 * q / (1 - q) ** 2), rel=1e-12)


@pytest.mark.parametrize("sigma", [0.4, 1.0, 3.7, 25.0])
@pytest.mark.parametrize("alpha", [0.3, 0.05, 1e-5])
def test_discrete_gaussian_interval_exact(sigma, alpha):
    mpmath.mp.dps = 40
    mechanism = DiscreteGaussian(1, sigma=sigma)
    s = mpmath.mpf(sigma)
    normalizer = mpmath.nsum(lambda x: mpmath.exp(-(x**2) / (2 * s**2)), [-mpmath.inf, mpmath.inf])

    def tail(h: int):
        return 2 * mpmath.nsum(lambda x: mpmath.exp(-(x**2) / (2 * s**2)), [h + 1, mpmath.inf]) / normalizer

    h = int(mechanism.noise_quantile(alpha))
    assert tail(h) <= alpha
    assert h == 0 or tail(h - 1) > alpha * (1 + 1e-8)
    variance = 2 * mpmath.nsum(lambda x: x**2 * mpmath.exp(-(x**2) / (2 * s**2)), [1, mpmath.inf]) / normalizer
    error = 2 * mpmath.nsum(lambda x: x * mpmath.exp(-(x**2) / (2 * s**2)), [1, mpmath.inf]) / normalizer
    assert mechanism.variance == pytest.approx(float(variance), rel=1e-10)
    assert mechanism.variance <= sigma**2 * (1 + 1e-12)  # CKS
    assert mechanism.expected_error == pytest.approx(float(error), rel=1e-10)


def test_truncated_interval_is_clipped_and_covers():
    mechanism = Geometric(1, 0.5, lower=0, upper=20)
    low, high = mechanism.confidence_interval(0.05, released=np.array([0, 10, 20]))
    assert low[0] == 0 and high[2] == 20
    # Exact coverage: for each true x, P(x in CI(release)) >= 1 - alpha from the exact law.
    for x in range(0, 21):
        law = mechanism.output_distribution(x)
        covered = 0.0
        for y, p in law.items():
            lo, hi = mechanism.confidence_interval(0.05, released=y)
            covered += p if lo <= x <= hi else 0.0
        assert covered >= 0.95 - 1e-12


def test_from_accuracy_is_tight():
    for accuracy, alpha in ((10, 0.05), (3, 0.01), (0, 0.4)):
        mechanism = DiscreteLaplace.from_accuracy(1, accuracy, alpha)
        assert mechanism.noise_quantile(alpha) <= accuracy
        weaker = DiscreteLaplace(1, mechanism.epsilon * (1 - 1e-6))
        assert weaker.noise_quantile(alpha) > accuracy


@pytest.mark.statistical
def test_interval_coverage_by_simulation():
    mechanism = DiscreteLaplace(2, 0.5)
    n = 200_000
    released = mechanism.release(np.full(n, 7), rng=rng(11))
    low, high = mechanism.confidence_interval(0.1, released)
    misses = int(np.sum((low > 7) | (high < 7)))
    true_rate = mechanism.tail_probability(int(mechanism.noise_quantile(0.1)) + 1)
    assert true_rate <= 0.1
    limit = stats.binom.isf(FPR, n, true_rate)
    assert misses <= limit


# ---------------------------------------------------------------------------------------------
# Samplers against their exact laws (chi-square at FPR)
# ---------------------------------------------------------------------------------------------


@pytest.mark.statistical
def test_truncated_geometric_goodness_of_fit():
    mechanism = Geometric(1, 0.6, lower=0, upper=15)
    for x, seed in ((0, 1), (7, 2), (15, 3)):
        released = mechanism.release(np.full(100_000, x), rng=rng(seed))
        law = mechanism.output_distribution(x)
        observed = np.bincount(released, minlength=16).astype(float)
        assert chi_square_ok(observed, np.array([law[y] for y in range(16)]))


@pytest.mark.statistical
def test_discrete_gaussian_goodness_of_fit():
    mechanism = DiscreteGaussian(1, sigma=2.5)
    released = mechanism.release(np.zeros(100_000, dtype=int), rng=rng(4))
    support = np.arange(-30, 31)
    observed = np.array([(released == z).sum() for z in support], dtype=float)
    assert observed.sum() == released.size
    assert chi_square_ok(observed, mechanism.pmf(support))


@pytest.mark.statistical
def test_randomized_response_goodness_of_fit():
    rr = RandomizedResponse(1.2, ["a", "b", "c", "d"])
    for label, seed in (("a", 5), ("c", 6)):
        released = rr.release([label] * 100_000, rng=rng(seed))
        observed = np.array([(released == c).sum() for c in "abcd"], dtype=float)
        assert chi_square_ok(observed, rr.output_probabilities(label))


@pytest.mark.statistical
def test_bernoulli_keep_rate():
    n = 400_000
    for epsilon, k in ((0.3, 2), (2.0, 7)):
        keep = bernoulli_keep(epsilon, k, n, rng=rng(7))
        p = math.exp(epsilon) / (math.exp(epsilon) + k - 1)
        low, high = stats.binom.ppf(FPR / 2, n, p), stats.binom.isf(FPR / 2, n, p)
        assert low <= keep.sum() <= high


# ---------------------------------------------------------------------------------------------
# k-RR estimator: unbiasedness and variance
# ---------------------------------------------------------------------------------------------


def test_estimator_formulas():
    rr = RandomizedResponse(1.0, k=4)
    e = math.e
    assert rr.estimator_variance(100) == pytest.approx((4 - 2 + e) / (100 * (e - 1) ** 2))
    # Exact multinomial variance from first principles.
    q, r = e / (e + 3), 1 / (e + 3)
    for h in (0.0, 0.3, 1.0):
        direct = (h * q * (1 - q) + (1 - h) * r * (1 - r)) / (50 * (q - r) ** 2)
        assert rr.estimator_variance(50, true_frequency=h) == pytest.approx(direct, rel=1e-12)
    # Binary: the variance does not depend on h.
    binary = RandomizedResponse(0.5)
    assert binary.estimator_variance(10, 0.9) == pytest.approx(binary.estimator_variance(10))
    # Seed 000's closed form equals (f - (1-p)/K) / p with p = (e^eps - 1)/(e^eps + K - 1).
    p = (e - 1) / (e + 3)
    reports = [0] * 5 + [1] * 3 + [2] * 2 + [3] * 10
    f = np.bincount(reports, minlength=4) / len(reports)
    assert np.allclose(rr.estimate_frequencies(reports), (f - (1 - p) / 4) / p)
    assert rr.estimate_frequencies(reports).sum() == pytest.approx(1.0)


@pytest.mark.statistical
def test_estimator_unbiased_and_variance_by_simulation():
    epsilon, k, m = 1.0, 4, 100_000
    rr = RandomizedResponse(epsilon, k=k)
    truth = np.repeat(np.arange(k), [10_000, 20_000, 30_000, 40_000])
    h = np.bincount(truth) / m
    repetitions = 200
    source = rng(12)
    estimates = np.array([rr.estimate_frequencies(rr.release(truth, rng=source)) for _ in range(repetitions)])
    variance = rr.estimator_variance(m, true_frequency=h)
    # Mean of the estimates: within z_{FPR} standard errors of the truth.
    assert np.all(np.abs(estimates.mean(axis=0) - h) <= Z * np.sqrt(variance / repetitions))
    # Sample variance: chi-square interval at FPR (estimates are near-Gaussian at this m).
    sample_variance = estimates.var(axis=0, ddof=1)
    low = stats.chi2.ppf(FPR / 2, repetitions - 1) / (repetitions - 1)
    high = stats.chi2.isf(FPR / 2, repetitions - 1) / (repetitions - 1)
    assert np.all((sample_variance >= low * variance) & (sample_variance <= high * variance))


# ---------------------------------------------------------------------------------------------
# Shapes, types, reproducibility
# ---------------------------------------------------------------------------------------------


def test_release_shapes_and_types():
    assert isinstance(DiscreteLaplace(1, 1.0).release(5, rng=rng()), int)
    assert DiscreteLaplace(1, 1.0).release(np.zeros((2, 3), dtype=int), rng=rng()).shape == (2, 3)
    assert isinstance(DiscreteGaussian(1, sigma=1.0).release(5.0, rng=rng()), int)
    out = Geometric(1, 1.0, lower=0).release(np.zeros(1000, dtype=int), rng=rng())
    assert out.min() >= 0 and out.max() > 0
    rr = RandomizedResponse(1.0)
    assert isinstance(rr.release(True, rng=rng()), bool)
    assert rr.release([True, False], rng=rng()).dtype == bool
    indexed = RandomizedResponse(1.0, k=6)
    assert indexed.release(np.arange(6), rng=rng()).dtype == np.int64
    assert set(indexed.release(np.zeros(5000, dtype=int), rng=rng()).tolist()) == set(range(6))


def test_reproducible_with_seed():
    mechanism = DiscreteLaplace(1, 0.5)
    first = mechanism.release(np.arange(20), rng=rng(9))
    second = mechanism.release(np.arange(20), rng=rng(9))
    assert np.array_equal(first, second)


def test_no_warnings_at_moderate_epsilon():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DiscreteLaplace(1, 1.0)
        Geometric(1, 1.0, 0, 3)
        DiscreteGaussian(1, epsilon=1.0, delta=1e-6)
        RandomizedResponse(1.0)


@pytest.mark.parametrize("sigma", [2e5, 3.2e7, 1e10])
@pytest.mark.parametrize("alpha", [0.3, 0.05, 1e-6])
def test_discrete_gaussian_interval_for_huge_sigma_is_a_tight_upper_bound(sigma, alpha):
    """Above sigma = 1e5 (no term-by-term sums) the tail is a bound: valid, and within 1 / sigma of exact.

    Reference (mpmath, 40 digits): by Euler-Maclaurin, sum_{x >= m} f(x) = integral_m^inf f + f(m) / 2
    - f'(m) / 12 + O(f''' ) with f(x) = exp(-x^2 / (2 sigma^2)), f'(m) = -(m / sigma^2) f(m); the
    dropped terms are O(f(m) / sigma^3), and the normaliser is sqrt(2 pi) sigma (1 + 2 exp(-2 pi^2
    sigma^2) + ...), i.e. sqrt(2 pi) sigma to any precision at these sigmas. A half-width from the
    subgaussian bound alone (the earlier rule) was 49% wider than needed at alpha = 0.1.
    """
    mpmath.mp.dps = 40
    mechanism = DiscreteGaussian(1, sigma=sigma)
    s = mpmath.mpf(sigma)

    def tail(h: int):
        m = mpmath.mpf(h + 1)
        f = mpmath.exp(-(m**2) / (2 * s**2))
        upper_sum = mpmath.sqrt(mpmath.pi / 2) * s * mpmath.erfc(m / (s * mpmath.sqrt(2))) + f / 2 + m * f / (12 * s**2)
        return 2 * upper_sum / (mpmath.sqrt(2 * mpmath.pi) * s)

    def slack(h: int):
        """The bound's allowance over the exact tail: 2 f(m) / (sqrt(2 pi) sigma) and the 1e-9 float margin."""
        m = mpmath.mpf(h + 1)
        return 2 * mpmath.exp(-(m**2) / (2 * s**2)) / (mpmath.sqrt(2 * mpmath.pi) * s) + 2e-9 * tail(h)

    h = int(mechanism.noise_quantile(alpha))
    for k in (h - 1, h, h + 1):
        assert tail(k) <= mechanism.tail_probability(k) <= tail(k) + slack(k)
    assert tail(h) <= alpha
    # The smallest such h up to that slack: the exact tail at h - 1 is above alpha, or within the slack.
    assert tail(h - 1) + slack(h - 1) > alpha
    z = stats.norm.isf(alpha / 2)  # the continuous Gaussian's two-sided quantile
    assert abs(h / sigma - z) < 1e-6 * z + 2 / sigma
