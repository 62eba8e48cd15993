"""QA round on dpkit.risk at extreme but valid inputs, against mpmath references.

Each test failed on the code before this round (the failure is quoted in its docstring; in a
parametrised test, the parameters it names: the others are controls, e.g. c >= 1 for the optimum,
epsilon0 = 1e-25 where F_3 does not underflow). The rule checked: for every input its validation
accepts, a public function either returns a correct value (or one rounded in the safe direction:
an epsilon or a budget up, a confidence down) or refuses it up front with an InvalidParameterError
naming the parameter the caller passed.
"""

import math

import mpmath as mp
import numpy as np
import pytest
from laplace_sum_reference import laplace_sum_cdf, mixture_weights
from mp_precision import precision

from dpkit import InvalidParameterError
from dpkit.events import LaplaceEvent, SelfComposedEvent
from dpkit.risk import (
    CostModel,
    SensitivityDistribution,
    abs_laplace_sum_cdf,
    cli_main,
    composition,
    confidence_from_accountant,
    coupled_confidence,
    dkw_confidence,
    dkw_sample_size,
    epsilon_at_risk,
    gaussian_loss_confidence,
    gdpr_example,
    laplace_confidence,
    laplace_risk,
    paper_coupled_confidence,
    sampled_sensitivity,
)

_precision = precision(60)


_weights, _cdf = mixture_weights, laplace_sum_cdf


def _rel(got, exact):
    exact = mp.mpf(exact)
    return float(abs((mp.mpf(got) - exact) / exact))


# -- 1. products beyond the float range: the value, not "epsilon0: got inf" ------------------------


@pytest.mark.parametrize("k", [1, 3])
def test_coupled_confidence_with_a_calibration_beyond_the_float_range(k):
    """epsilon0 = 1e300 with calibration sensitivity 1e-10: eps0 D / s = 1e310 overflowed and was
    refused as "epsilon0: got inf", a value never given. Its confidence is the limit F_k(eps)."""
    dist = SensitivityDistribution(np.repeat([1.0, 2.0], 500), rho=0.05)  # alpha = 1 - 2 e^-5
    got = coupled_confidence(0.5, 1e300, dist, calibration_sensitivity=1e-10, dimension=k)
    # lower CDF max(F_n - rho, 0): masses 0.45 at 1 and 0.5 at 2; calibrations 1e310 and 2e310
    expected = mp.mpf(dist.alpha) * (
        mp.mpf("0.45") * _cdf(0.5, k) / _cdf(mp.mpf("1e310"), k) + mp.mpf("0.5") * _cdf(0.5, k) / _cdf(2e310, k)
    )
    assert _rel(got, expected) < 1e-14


def test_coupled_confidence_pair_underflow_at_epsilon_zero():
    """eps0 D / s below the least float (1e-300 * 1e-300 / 1e300) read as 0.0 would make the pair
    0-DP with confidence 1; F_k(0) = 0, so the confidence at epsilon = 0 is 0."""
    dist = SensitivityDistribution(np.full(1000, 1e-300), rho=0.05)
    assert coupled_confidence(0.0, 1e-300, dist, calibration_sensitivity=1e300) == 0.0
    assert coupled_confidence(1e-300, 1e-300, dist, calibration_sensitivity=1e300) > 0.0


@pytest.mark.parametrize("k", [1, 3])
def test_paper_coupled_confidence_eta_beyond_the_float_range(k):
    """eta epsilon0 = 1e300 (1 + 2 * 0.05 / 1e-300) overflowed: "epsilon0: got inf". The paper's form
    is then alpha F_k(eps) / F_k(1e599) = alpha F_k(eps)."""
    got = paper_coupled_confidence(0.5, 1e300, sampled_sensitivity=1e-300, rho=0.05, alpha=0.95, dimension=k)
    eta_eps0 = mp.mpf(1e300) * (1 + 2 * mp.mpf(0.05) / mp.mpf(1e-300))
    assert _rel(got, mp.mpf(0.95) * _cdf(0.5, k) / _cdf(eta_eps0, k)) < 1e-14


@pytest.mark.parametrize("eps0", [1e-310, 1e-300, 1e-25])
def test_dimension_above_one_with_a_tiny_epsilon0(eps0):
    """F_3(1e-310) underflowed to 0: laplace_confidence / laplace_risk / epsilon_at_risk raised
    ZeroDivisionError for k = 3 and a subnormal epsilon0."""
    eps = eps0 * 0.4
    confidence = _cdf(eps, 3) / _cdf(eps0, 3)
    assert _rel(laplace_confidence(eps, eps0, 3), confidence) < 1e-14
    assert _rel(laplace_risk(eps, eps0, 3), 1 - confidence) < 1e-14
    got = epsilon_at_risk(0.3, eps0, 3)
    assert 0 < got <= eps0
    assert 1 - _cdf(got, 3) / _cdf(eps0, 3) <= 0.3  # its risk is at most the one asked for
    exact = -mp.log1p((1 - mp.mpf(0.3)) * mp.expm1(-mp.mpf(eps0)))  # c_3 = c_1 to a relative eps0 / 2
    assert _rel(got, exact) < 1e-12


# -- 1. counts beyond the float range (Python ints) -------------------------------------------------


def test_composition_with_k_beyond_the_float_range():
    """k = 10**400: float(k) raised a bare OverflowError in every method but optimal and pld."""
    k, eps0, delta = 10**400, 1e-300, 1e-5
    assert _rel(composition(k, 0.5, eps0, delta, "basic"), mp.mpf(k) * mp.mpf(eps0)) < 1e-15
    spread = mp.sqrt(2 * mp.mpf(k) * mp.log(1 / mp.mpf(delta))) * mp.mpf(eps0)
    advanced = spread + mp.mpf(k) * mp.mpf(eps0) * mp.expm1(mp.mpf(eps0))
    assert _rel(composition(k, 0.5, eps0, delta, "advanced"), advanced) < 1e-14
    assert _rel(composition(k, 0.5, eps0, delta, "privacy_at_risk"), advanced) < 1e-14  # epsilon >= epsilon0
    assert composition(k, 0.3, 0.5, delta, "basic") == math.inf  # 5e399: an epsilon rounded up
    k = 10**700  # sqrt(k) = 1e350 is beyond the float range, sqrt(k) eps0 is not
    spread = mp.sqrt(2 * mp.mpf(k) * mp.log(1 / mp.mpf(delta))) * mp.mpf(eps0)
    advanced = spread + mp.mpf(k) * mp.mpf(eps0) * mp.expm1(mp.mpf(eps0))
    assert _rel(composition(k, 0.5, eps0, delta, "advanced"), advanced) < 1e-14
    assert _rel(composition(10**600, 0.5, 1e-300, 0.5, "basic"), mp.mpf(10**600) * mp.mpf(1e-300)) < 1e-15


def test_composition_names_k_or_epsilon0_for_the_accountants():
    """optimal: the accountant's "count: got ..." (a name the caller never used); pld: "discretization:
    got 0.001" or a bare OverflowError for a huge k, UnsupportedEventError above epsilon0 = 700."""
    with pytest.raises(InvalidParameterError, match="^k: "):
        composition(10**9, 0.3, 0.5, 1e-5, "optimal")
    for k in (10**9, 10**400):
        with pytest.raises(InvalidParameterError, match="^k: "):
            composition(k, 0.3, 0.5, 1e-5, "pld")
    with pytest.raises(InvalidParameterError, match="^epsilon0: "):
        composition(10, 0.3, 800.0, 1e-5, "pld")
    assert composition(10, 0.3, 700.0, 1e-5, "pld") > 0  # the boundary itself is accepted


def test_dkw_with_n_or_rho_beyond_the_float_range():
    """dkw_confidence(10**400, .) raised OverflowError (float(n)); dkw_sample_size(1e-200, .) raised
    ZeroDivisionError (2 rho^2 underflows)."""
    assert dkw_confidence(10**400, 0.05) == 1.0
    exponent = 2 * mp.mpf(10**400) * mp.mpf(1e-300) ** 2  # 2e-200: alpha = 1 - 2 e^-2e-200 < 0
    assert 1 - 2 * mp.exp(-exponent) < 0 and dkw_confidence(10**400, 1e-300) == 0.0
    for rho in (1e-150, 1e-200, 5e-324):
        n = dkw_sample_size(rho, 0.95)
        assert isinstance(n, int)
        exact = mp.log(2 / (1 - mp.mpf(0.95))) / (2 * mp.mpf(rho) ** 2)
        assert 1 - 2 * mp.exp(-2 * n * mp.mpf(rho) ** 2) >= 0.95  # enough samples
        assert n <= exact * (1 + mp.mpf(2e-13)) + 1  # and not more than the margin


def test_gaussian_loss_confidence_huge_count_and_tiny_sigma():
    """count = 10**400 raised OverflowError (math.sqrt of the int); sigma = 1e-300 gave NaN
    ((eps - mu^2 / 2) / mu with mu^2 = inf)."""
    got = gaussian_loss_confidence(1.0, 1e200, 10**400)  # mu = 1: Phi(1 - 1/2)
    assert _rel(got, mp.ncdf(mp.mpf(0.5))) < 1e-14
    assert gaussian_loss_confidence(1.0, 1e-300) == 0.0  # mu = 1e300: Phi(-5e299)
    assert gaussian_loss_confidence(1.0, 1.0, 10**800) == 0.0  # mu beyond the float range
    assert gaussian_loss_confidence(5000.0, 1e308, 10**620) == 0.5  # sqrt(count) = 1e310, mu = 100: Phi(0)
    assert gaussian_loss_confidence(0.0, 1e300) == 0.5  # mu = 1e-300: Phi(-5e-301)


def test_dimension_beyond_the_limit_is_refused_by_name():
    """dimension = 10**400 raised numpy's ValueError "Maximum allowed size exceeded" (np.arange), and
    10**9 would allocate gigabytes; it is refused as dimension, in every function that takes it."""
    calls = [
        lambda d: laplace_confidence(0.3, 0.5, d),
        lambda d: laplace_risk(0.3, 0.5, d),
        lambda d: epsilon_at_risk(0.3, 0.5, d),
        lambda d: abs_laplace_sum_cdf(0.3, d),
        lambda d: composition(10, 0.3, 0.5, 1e-5, "basic", d),
        lambda d: paper_coupled_confidence(0.3, 0.5, 1.0, 0.05, 0.95, d),
        lambda d: CostModel(1.0).optimal_epsilon(0.5, d),
        lambda d: CostModel(1.0).expected_budget(0.3, 0.5, d),
    ]
    for call in calls:
        for dimension in (10**400, 10**9):
            with pytest.raises(InvalidParameterError, match="^dimension: "):
                call(dimension)


def test_sensitivity_distribution_cdf_of_a_huge_int():
    """cdf(10**400) raised OverflowError (math.isnan of the int)."""
    dist = SensitivityDistribution(np.array([1.0, 2.0]), rho=0.05)
    assert dist.cdf(10**400) == 1.0 and dist.cdf(-(10**400)) == 0.0
    assert dist.band(10**400) == (0.95, 1.0)


def test_confidence_from_accountant_at_the_edges():
    """LaplaceEvent(1e-310): 1 / noise_multiplier overflowed and was refused as "epsilon0: got inf";
    a count of 10**400 raised a bare OverflowError inside the PLD accountant; it refuses that count by
    name now (on the grid, at query time)."""
    assert confidence_from_accountant(LaplaceEvent(1e-310), 1.0) == 0.0  # 0.5 e^{-(1e310 - 1) / 2}
    assert confidence_from_accountant(LaplaceEvent(1e-310), math.inf) == 1.0
    with pytest.raises(InvalidParameterError, match="^count: .*RDPAccountant"):
        confidence_from_accountant(SelfComposedEvent(LaplaceEvent(1.0), 10**400), 1.0)


def test_refusals_name_the_parameter_the_caller_passed():
    """gdpr_example(epsilon0s=(800,)) said "epsilon0: ..."; coupled_confidence with all-zero samples said
    "calibration_sensitivity: got 0.0" (not passed); sampled_sensitivity with answers 1e308 and -1e308
    (distance inf) said "samples: ..."."""
    with pytest.raises(InvalidParameterError, match="^epsilon0s: "):
        gdpr_example(epsilon0s=(800.0,))
    with pytest.raises(InvalidParameterError, match="^epsilon0s: "):
        gdpr_example(epsilon0s=(0.5, math.nan))
    with pytest.raises(InvalidParameterError, match="^distribution: "):
        coupled_confidence(0.5, 1.0, SensitivityDistribution(np.zeros(3), rho=0.05))
    with pytest.raises(InvalidParameterError, match="^query: "):
        sampled_sensitivity(lambda d: d, lambda rng: (np.array([1e308]), np.array([-1e308])), 3)


def test_expected_budget_beyond_the_float_range_is_not_nan():
    """E_min + E over the float range: confidence * inf + 0 * inf was NaN; the budget is inf (rounded up)."""
    model = CostModel(1.7e308, E_min=1.7e308, c=0.5)
    assert model.expected_budget(1.0, 0.5) == math.inf
    assert model.expected_budget(0.25, 1.0) == math.inf
    # and below the range it is the exact E_min + E [c e^(-c/eps) + (1 - c) e^(-c/eps0)]
    model = CostModel(1e307, E_min=1e307, c=0.5)
    eps, eps0 = mp.mpf(0.25), mp.mpf(1.0)
    conf = mp.expm1(-eps) / mp.expm1(-eps0)
    exact = mp.mpf(1e307) + mp.mpf(1e307) * (conf * mp.exp(-0.5 / eps) + (1 - conf) * mp.exp(-0.5 / eps0))
    assert _rel(model.expected_budget(0.25, 1.0), exact) < 1e-14


# -- 2. the cost-optimal epsilon to float rounding ----------------------------------------------------


def _optimum(c, eps0, k=1):
    """The root of g(e) = c/eps0 - c/e + ln(1 + c R_k(e) / e^2), R_k = F_k / f_k (R_1 = e^e - 1), by
    bisection at enough digits for g ~ c to survive the cancellation of c/e and ln(1 + ...)."""
    with mp.workdps(60 + int(max(0, -math.log10(c))) + 40):
        c, eps0 = mp.mpf(c), mp.mpf(eps0)
        if k == 1:
            ratio = mp.expm1
        else:
            w = _weights(k)

            def ratio(x):
                cdf = mp.fsum(wj * mp.gammainc(k - j, 0, x, regularized=True) for j, wj in enumerate(w))
                density = mp.fsum(
                    wj * x ** (k - j - 1) * mp.exp(-x) / mp.factorial(k - j - 1) for j, wj in enumerate(w)
                )
                return cdf / density

        def g(e):
            return c / eps0 - c / e + mp.log1p(c * ratio(e) / e**2)

        low, high = eps0 / 2, eps0
        while g(low) >= 0:
            low, high = low / 2, low
        while (high - low) / high > mp.mpf(10) ** -30:
            middle = (low + high) / 2
            low, high = (middle, high) if g(middle) < 0 else (low, middle)
        return (low + high) / 2


@pytest.mark.parametrize("c", [1e-300, 1e-100, 1e-40, 1e-25, 1e-20, 1e-15, 1e-10, 1e-3, 1.0, 1e6, 1e300, 1.7e308])
@pytest.mark.parametrize("eps0", [1e-3, 0.5, 5.0, 800.0, 1e300])
def test_optimal_epsilon_to_float_rounding(c, eps0):
    """Against mpmath: 4e-11 relative error at c = 1e-10, 9e-6 at 1e-20, 4e-3 at 1e-25, and 3.6e-15
    for an exact 4.5e-21 at c = 1e-40 (eps0 = 0.5), because c/eps and ln(1 + (e^eps - 1) c / eps^2)
    are both ~ sqrt(c) and cancel to g ~ c; RuntimeError (no convergence) for eps0 = 1e300 and
    c <= 1e-10; NaN in brentq for c = 1.7e308. Now below 4 * 2^-52 relative (a few ulps; worst seen
    1 ulp)."""
    got = CostModel(550_000.0, E_min=10.0, c=c).optimal_epsilon(eps0)
    assert _rel(got, _optimum(c, eps0)) < 4 * 2.0**-52


@pytest.mark.parametrize("c", [1e-300, 1e-20, 1e-6, 1.0, 1e6])
@pytest.mark.parametrize("eps0", [0.5, 800.0])
@pytest.mark.parametrize("k", [2, 5])
def test_optimal_epsilon_dimension_above_one_to_float_rounding(c, eps0, k):
    """k > 1 minimised B on a grid: 3e-8 to 1e-3 relative error for c from 1 to 1e-20 and 3e-17 for
    an exact 5e-151 at c = 1e-300 (B is flat to float precision there). Now the root of B' as for k = 1."""
    got = CostModel(550_000.0, c=c).optimal_epsilon(eps0, dimension=k)
    assert _rel(got, _optimum(c, eps0, k)) < 4 * 2.0**-52


@pytest.mark.parametrize("eps0", [5e-324, 1e-310])
def test_optimal_epsilon_subnormal_epsilon0(eps0):
    """eps0 = 5e-324: eps0 / 2 = 0 and math.log(0) raised "math domain error"; brentq on subnormal
    brackets did not converge. The answer is in (0, eps0] (eps0 itself when nothing is below it)."""
    for k in (1, 2):
        got = CostModel(550_000.0, c=1e-300).optimal_epsilon(eps0, dimension=k)
        assert 0 < got <= eps0


# -- 3. what laplace_risk (and the report) call the paper's gamma ------------------------------------


def test_laplace_risk_headline_says_what_it_is():
    """The headline was "Returns a **risk**: ``1 - laplace_confidence(...)``", read as the probability
    that the privacy loss exceeds epsilon; it is a probability about the noise statistic T."""
    headline = laplace_risk.__doc__.strip().splitlines()[0]
    assert "P[T > epsilon | T <= epsilon0]" in headline and "not ``P[loss > epsilon]``" in headline
    headline = laplace_confidence.__doc__.strip().splitlines()[0]
    assert "P[T <= epsilon | T <= epsilon0]" in headline and "not ``P[loss <= epsilon]``" in headline
    assert "is ``epsilon``-DP" not in headline  # the old claim


def test_cli_report_says_what_its_confidence_is(capsys):
    """``dpkit risk`` printed a bare "conf" column."""
    assert cli_main([]) == 0
    out = capsys.readouterr().out
    assert "c1(eps*)" in out and "P[T <= eps* | T <= eps0]" in out
    assert "not the probability that the realised privacy loss" in out
