"""Privacy at risk and the cost model at extreme parameters, against mpmath (60 digits) references."""

import math

import mpmath as mp
import numpy as np
import pytest
from laplace_sum_reference import laplace_sum_cdf, laplace_sum_sf
from mp_precision import precision

from dpkit import InvalidParameterError
from dpkit.risk import (
    CostModel,
    composition,
    dkw_confidence,
    dkw_sample_size,
    epsilon_at_risk,
    laplace_confidence,
    laplace_risk,
)

_precision = precision(60)


_cdf, _sf = laplace_sum_cdf, laplace_sum_sf


def _rel(got, exact):
    exact = mp.mpf(exact)
    return float(abs((mp.mpf(got) - exact) / exact))


@pytest.mark.parametrize("k", [1, 3, 10])
@pytest.mark.parametrize("eps0", [1e-6, 1.0, 30.0, 200.0, 700.0])
@pytest.mark.parametrize("fraction", [1e-6, 0.5, 0.9, 1 - 1e-9])
def test_confidence_and_risk_exact(k, eps0, fraction):
    """c_k and 1 - c_k to 1e-12 relative. Catches the risk computed as 1 - c_k for k > 1: 0.0 for an
    exact 3.4e-34 (k=10, eps0=200, eps=100), 3.5e-2 relative error at eps0=30, 1e-6 when eps is
    within 1e-9 of eps0."""
    eps = eps0 * fraction
    confidence = _cdf(eps, k) / _cdf(eps0, k)
    risk = (_sf(eps, k) - _sf(eps0, k)) / _cdf(eps0, k)
    assert _rel(laplace_confidence(eps, eps0, k), confidence) < 1e-12
    assert _rel(laplace_risk(eps, eps0, k), risk) < 1e-12


@pytest.mark.parametrize("k", [1, 3, 10])
@pytest.mark.parametrize("eps0", [1e-6, 1e-3, 1.0, 30.0, 200.0, 700.0])
@pytest.mark.parametrize("gamma", [1e-12, 1e-3, 0.3, 0.9, 1 - 1e-9])
def test_epsilon_at_risk_exact_and_valid(k, eps0, gamma):
    """The returned epsilon has (exact) risk <= gamma and is within 1e-11 of the exact root. Catches
    brentq's absolute xtol = 1e-14 (0.0 returned for an exact 1e-15 at k=10, eps0=1e-6,
    gamma=1-1e-9, whose risk is 1 > gamma), the root of 1 - c_k near c_k = 1 (4.6e-5 relative error
    at k=10, eps0=200, gamma=1e-12) and 1 - gamma losing gamma's digits (k=1: 8e-7)."""
    got = epsilon_at_risk(gamma, eps0, k)
    assert 0.0 <= got <= eps0
    risk_at = (_sf(got, k) - _sf(eps0, k)) / _cdf(eps0, k)
    assert risk_at <= gamma
    low, high = mp.mpf(0), mp.mpf(eps0)  # bisection on the confidence c_k(t) >= 1 - gamma
    total, target = _cdf(eps0, k), 1 - mp.mpf(gamma)
    for _ in range(80):
        middle = (low + high) / 2
        above = (_sf(middle, k) - _sf(eps0, k)) / total <= gamma if gamma < 0.5 else _cdf(middle, k) / total >= target
        low, high = (low, middle) if above else (middle, high)
    assert _rel(got, high) < 1e-11


def _optimum(c, eps0):
    c, eps0 = mp.mpf(c), mp.mpf(eps0)

    def g(e):  # sign of B'(eps), from seed 001's E_eps = E_min + E e^(-c/eps)
        return c / eps0 - c / e + mp.log1p(mp.expm1(e) * c / e**2)

    low = eps0 / 2
    while g(low) >= 0:
        low /= 2
    return mp.findroot(g, (low, eps0), solver="anderson", tol=mp.mpf(10) ** -40)


@pytest.mark.parametrize("c", [1e-3, 1.0, 100.0, 1e6])
@pytest.mark.parametrize("eps0", [1e-6, 1e-3, 0.5, 5.0, 50.0, 800.0])
def test_optimal_epsilon_exact(c, eps0):
    """The cost-optimal epsilon (k = 1) to 1e-12 and a true minimiser of the budget. Catches the
    "gives no interior optimum" InvalidParameterError whenever E e^(-c/eps0) underflows (eps0 = 1e-3,
    c = 1; eps0 = 0.5, c = 1e6) and OverflowError of e^eps0 at eps0 = 800."""
    model = CostModel(550_000.0, E_min=10.0, c=c)
    got = model.optimal_epsilon(eps0)
    assert _rel(got, _optimum(c, eps0)) < 1e-12
    assert model.expected_budget(got, eps0) <= model.expected_budget(eps0, eps0)


def test_optimal_epsilon_gdpr_unchanged():
    """Seed 001's GDPR example (E = 550000, c = 1): the optimum at eps0 = 0.5 stays 0.2741 (4 digits
    as published in the module doctest), now 0.27411528355759 to 1e-12 of the mpmath root."""
    got = CostModel(550_000.0).optimal_epsilon(0.5)
    assert round(got, 4) == 0.2741
    assert _rel(got, _optimum(1.0, 0.5)) < 1e-12


def test_optimal_epsilon_dimension_two_tiny_eps0():
    """k > 1 used bounds (1e-12, eps0): scipy's ValueError for eps0 < 1e-12 and only 1e-4 relative
    accuracy (xatol 1e-10) at eps0 = 1e-6; the bounds and tolerance now scale with eps0."""
    model = CostModel(550_000.0)
    got = model.optimal_epsilon(1e-13, dimension=2)
    assert 0 < got <= 1e-13


def test_composition_overflow_is_named():
    """advanced / privacy_at_risk used math.expm1(eps0): OverflowError above eps0 ~ 709.78."""
    for method in ("advanced", "privacy_at_risk"):
        with pytest.raises(InvalidParameterError, match="epsilon0"):
            composition(10, 400.0, 800.0, 1e-5, method=method)
    assert composition(10, 400.0, 800.0, 1e-5, method="basic") == 8000.0


def test_dkw_margins():
    """dkw_sample_size must give 1 - 2 e^(-2 n rho^2) >= alpha exactly: it was one short in 944 of
    9000 adversarial cases (e.g. rho = 0.003523960839187645, alpha = 0.99 gave 213327); and
    dkw_confidence, a lower bound, exceeded the exact value by up to 5.9e-17."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        alpha = float(rng.choice([0.9, 0.95, 0.99, 0.999]))
        n_real = int(rng.integers(10, 10**6))
        rho = float(mp.sqrt(mp.log(2 / (1 - mp.mpf(alpha))) / (2 * n_real)))
        for r in (rho, math.nextafter(rho, 0.0), math.nextafter(rho, 1.0)):
            n = dkw_sample_size(r, alpha)
            assert 1 - 2 * mp.exp(-2 * n * mp.mpf(r) ** 2) >= alpha
    for _ in range(300):
        n, r = int(rng.integers(1, 10**4)), float(rng.random() * 0.05)
        value = dkw_confidence(n, r)
        if value < 1.0:  # 1.0 is kept when 2 e^(-2 n rho^2) < 2^-54 (existing contract)
            assert value <= max(0, 1 - 2 * mp.exp(-2 * n * mp.mpf(r) ** 2))
