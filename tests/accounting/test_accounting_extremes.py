"""Accountants at extreme parameters, against mpmath references (the accounting audit).

Every test here failed before the fix it guards; each docstring says which wrong answer it catches.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from mp_precision import precision

from dpkit._errors import UnsupportedEventError
from dpkit.accounting import (
    AdvancedAccountant,
    BasicAccountant,
    GaussianEvent,
    GDPAccountant,
    GroupEvent,
    LaplaceEvent,
    OptimalAccountant,
    PLDAccountant,
    PoissonSampledEvent,
    PureDPEvent,
    RDPAccountant,
    ZCDPAccountant,
    gaussian_delta,
    gaussian_epsilon,
    laplace_renyi,
)
from dpkit.accounting._rdp import discrete_laplace_rdp, poisson_sampled_gaussian_rdp
from dpkit.guarantees import NeighbourRelation

_precision = precision(50)


def _gdp_delta(mu: float, epsilon: float) -> mpmath.mpf:
    """Balle & Wang 2018 / DRS 2022: delta(eps) of mu-GDP, at 50+ digits."""
    with mpmath.workdps(80):
        m, e = mpmath.mpf(mu), mpmath.mpf(epsilon)
        return mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2)


@pytest.mark.parametrize(("mu", "epsilon"), [(1e-9, 0.0), (1e-6, 1e-6), (1e-3, 2e-3), (1.0, 30.0)])
def test_gaussian_delta_keeps_its_digits_for_small_mu(mu: float, epsilon: float) -> None:
    """gaussian_delta(1e-9, 0) was 3.98942213e-10 vs exact 3.98942280e-10 (1.7e-7 low, log_ndtr cancellation)."""
    exact = _gdp_delta(mu, epsilon)
    assert float(abs(gaussian_delta(mu, epsilon) - exact) / exact) < 1e-13


@pytest.mark.parametrize("mu", [1e-6, 1e-3, 0.3, 1.0, 10.0])
@pytest.mark.parametrize("delta", [1e-300, 1e-100, 1e-10, 1e-5, 0.1])
def test_gaussian_epsilon_is_never_below_the_true_epsilon(mu: float, delta: float) -> None:
    """gaussian_epsilon(1e-6, 1e-300) was an epsilon whose true delta is 1.0000012e-300 (> target).

    GDPAccountant (certified=True) reports it: an epsilon below the truth is a privacy bug.
    """
    eps = gaussian_epsilon(mu, delta)
    if eps == 0.0:
        assert _gdp_delta(mu, 0.0) <= delta
        return
    assert _gdp_delta(mu, eps) <= delta
    assert _gdp_delta(mu, eps * (1 - 1e-9)) > delta  # and tight


def test_gdp_accountant_epsilon_is_certified_for_huge_noise() -> None:
    """GDPAccountant with sigma = 1e6 (mu = 1e-6) certified an epsilon 1e-6 (relative) too small in delta."""
    accountant = GDPAccountant().compose(GaussianEvent(1e6))
    eps = accountant.epsilon(1e-100)
    assert _gdp_delta(1e-6, eps) <= 1e-100
    assert float(_gdp_delta(1e-6, 0.0)) == pytest.approx(accountant.delta(0.0), rel=1e-13)


def _sampled_gaussian_log_a(q: float, sigma: float, alpha: float) -> mpmath.mpf:
    """log E_{z~N(0,s^2)}[((1-q) + q e^{(2z-1)/(2 s^2)})^alpha] (Mironov, Talwar & Zhang 2019) by quadrature."""
    qq, s, a = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(alpha)

    def integrand(z: mpmath.mpf) -> mpmath.mpf:
        return mpmath.npdf(z, 0, s) * ((1 - qq) + qq * mpmath.exp((2 * z - 1) / (2 * s * s))) ** a

    return mpmath.log(mpmath.quad(integrand, [-mpmath.inf, -20 * s, 0, 0.5, 1, 20 * s + 1, mpmath.inf]))


@pytest.mark.parametrize(
    ("q", "sigma", "alpha"),
    [(1e-9, 1.0, 1.5), (1e-9, 1.0, 2.0), (1e-6, 0.8, 2.5), (1e-6, 0.8, 3.0), (1e-4, 2.0, 1.1), (1e-3, 10.0, 3.3)],
)
def test_subsampled_gaussian_rdp_is_an_upper_bound_for_tiny_rates(q: float, sigma: float, alpha: float) -> None:
    """The curve was below the exact RDP: q = 1e-9 alpha 1.5 gave 0 (exact 1.29e-18), alpha 2 was
    1.1e-6 low; q = 1e-6 sigma 0.8 alpha 2.5 was 2.2e-6 low (log of a sum within 1e-12 of 1)."""
    exact = _sampled_gaussian_log_a(q, sigma, alpha) / (alpha - 1)
    value = poisson_sampled_gaussian_rdp(q, sigma, np.array([alpha]))[0]
    assert value >= exact * (1 - 1e-14)  # rounding to nearest at the integer orders; the accountant adds slack
    assert value <= exact * 1.4  # the integer orders are exact; fractional ones use the chord


def test_subsampled_gaussian_integer_rdp_is_tight_at_tiny_rates() -> None:
    """Integer orders: sum_k C(a,k)(1-q)^(a-k) q^k (e^{(k^2-k)/(2s^2)} - 1) in closed form; was 1.1e-6 low."""
    q, sigma = 1e-9, 1.0
    for alpha in (2, 3, 10):
        with mpmath.workdps(60):
            exact = mpmath.log(
                mpmath.fsum(
                    mpmath.binomial(alpha, k)
                    * (1 - mpmath.mpf(q)) ** (alpha - k)
                    * mpmath.mpf(q) ** k
                    * mpmath.exp(mpmath.mpf(k * k - k) / (2 * sigma**2))
                    for k in range(alpha + 1)
                )
            ) / (alpha - 1)
        value = poisson_sampled_gaussian_rdp(q, sigma, np.array([float(alpha)]))[0]
        assert float(abs(value - exact) / exact) < 1e-12


@pytest.mark.parametrize(("scale", "sensitivity", "alpha"), [(1e6, 1, 1.5), (1e4, 3, 2.0), (1.0, 5, 1.0001)])
def test_discrete_laplace_rdp_is_an_upper_bound_for_large_scales(scale: float, sensitivity: int, alpha: float) -> None:
    """discrete_laplace_rdp(1e6, 1, 1.5) was 7.4962e-13 vs exact 7.5e-13 (5e-4 low: an invalid bound)."""
    with mpmath.workdps(80):
        r = mpmath.exp(-1 / mpmath.mpf(scale))
        a = mpmath.mpf(alpha)

        def p(x: int) -> mpmath.mpf:
            return (1 - r) / (1 + r) * r ** abs(x)

        # x <= 0 and x >= sensitivity are geometric; the middle is finite.
        total = (r ** ((1 - a) * sensitivity) + r ** (a * sensitivity)) / (1 + r)
        total += mpmath.fsum(p(x) ** a * p(x - sensitivity) ** (1 - a) for x in range(1, sensitivity))
        exact = mpmath.log(total) / (a - 1)
    value = discrete_laplace_rdp(scale, sensitivity, np.array([alpha]))[0]
    assert exact <= value <= exact * (1 + 1e-12)


def test_rdp_delta_has_no_absolute_floor() -> None:
    """RDPAccountant.delta added 1e-12 to every answer: a Gaussian (sigma 1) at eps 20 said delta = 1e-12
    (the RDP bound itself is below 1e-80), inconsistent with epsilon(1e-300) = 37.5."""
    accountant = RDPAccountant().compose(GaussianEvent(1.0))
    orders, curve = accountant.rdp_curve()
    log_delta = (orders - 1) * (curve - 20.0 + np.log1p(-1 / orders)) - np.log(orders)
    bound = math.exp(float(np.min(log_delta)))
    assert bound < 1e-80
    assert bound <= accountant.delta(20.0) <= bound * (1 + 1e-5)
    eps = accountant.epsilon(1e-300)
    assert accountant.delta(eps) <= 1e-300 * (1 + 1e-5)


@pytest.mark.parametrize(("b", "alpha"), [(1e-3, 2.0), (1e-3, 1e4), (1.0, 1 + 1e-9), (1e6, 1.5)])
def test_laplace_renyi_has_no_overflow_and_no_cancellation(b: float, alpha: float) -> None:
    """laplace_renyi(1e-3, 2) raised OverflowError; near alpha = 1 the log of a sum near 1 lost 7 digits."""
    with mpmath.workdps(80):
        bb, a = mpmath.mpf(b), mpmath.mpf(alpha)
        exact = mpmath.log(a / (2 * a - 1) * mpmath.exp((a - 1) / bb) + (a - 1) / (2 * a - 1) * mpmath.exp(-a / bb))
        exact /= a - 1
    assert float(abs(laplace_renyi(b, alpha) - exact) / exact) < 1e-9


def _kov_delta(eps: float, k: int, t: float, start: int) -> mpmath.mpf:
    """Kairouz, Oh & Viswanath 2015: delta(t) of k-fold eps-DP, sum over l >= start (earlier terms < e^-200)."""
    e, tt = mpmath.mpf(eps), mpmath.mpf(t)
    log_norm = k * mpmath.log(1 + mpmath.exp(e))
    log_k = mpmath.loggamma(k + 1)
    total, ell = mpmath.mpf(0), start
    while (k - ell) * e > tt + ell * e:
        log_choose = log_k - mpmath.loggamma(ell + 1) - mpmath.loggamma(k - ell + 1)
        total += mpmath.exp(log_choose + (k - ell) * e - log_norm) * (1 - mpmath.exp(tt + ell * e - (k - ell) * e))
        ell += 1
    return total


def test_optimal_composition_of_a_million_events_is_certified() -> None:
    """OptimalAccountant, PureDP(0.003) x 1e6 at eps 28: delta was 1.4e-10 (relative) below the exact
    KOV value (gammaln(1e6 + 1) = 1.3e7 carries ulps of 1.9e-9; the margin was a fixed 1e-9)."""
    accountant = OptimalAccountant().compose(PureDPEvent(0.003), 10**6)
    exact = _kov_delta(0.003, 10**6, 28.0, 485_000)
    value = accountant.delta(28.0)
    assert exact <= value <= exact * (1 + 1e-6)


@pytest.mark.parametrize("event", [GaussianEvent(1e-2), LaplaceEvent(1e-3), PureDPEvent(800.0)])
def test_pld_refuses_losses_it_cannot_grid(event: object) -> None:
    """PLD of GaussianEvent(0.01) raised ValueError('cannot convert float NaN to integer') at query time
    (e^loss overflowed); PureDPEvent(800) raised OverflowError. Now refused up front, state unchanged."""
    accountant = PLDAccountant().compose(GaussianEvent(1.0))
    before = accountant.delta(1.0)
    assert not accountant.supports(event)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedEventError):
        accountant.compose(event)  # type: ignore[arg-type]
    assert accountant.delta(1.0) == before
    assert len(accountant.history) == 1


def test_pld_still_accepts_large_but_finite_losses() -> None:
    """The refusal must not catch gridable events: sigma = 0.05 (losses up to about 400) still works."""
    accountant = PLDAccountant(discretization=1e-3).compose(GaussianEvent(0.05))
    eps = accountant.epsilon(1e-5)
    assert _gdp_delta(20.0, eps) <= 1e-5
    assert eps < 300


def test_pld_delta_far_beyond_the_grid_is_the_mass_at_infinity():
    """delta(eps) for eps hundreds of nats above the largest grid loss: nothing finite is above it.
    Catches the OverflowError of e^(eps - l) at the top of the grid (weight 0 there)."""
    from dpkit.accounting import PLDAccountant
    from dpkit.events import GaussianEvent

    accountant = PLDAccountant().compose(GaussianEvent(1.0))
    far = accountant.delta(1e6)
    assert far == accountant.delta(750.0) == accountant.delta(700.0)
    assert 0.0 <= far <= accountant.delta(5.0)


def _without_relation(event: object) -> object:
    """``event`` with its ``neighbours`` erased (as a custom event that never declared one would be)."""
    object.__setattr__(event, "neighbours", None)
    return event


@pytest.mark.parametrize(
    "factory",
    [
        BasicAccountant,
        AdvancedAccountant,
        OptimalAccountant,
        RDPAccountant,
        ZCDPAccountant,
        PLDAccountant,
        GDPAccountant,
    ],
)
def test_events_without_a_declared_relation_are_refused(factory: type) -> None:
    """Fail closed: an event must state the neighbour relation it holds under, also inside wrappers.

    Catches the old base check, which skipped events whose ``neighbours`` was missing (and left the
    decision to each accountant's type dispatch).
    """
    from dpkit.events import SelfComposedEvent

    accountant = factory()
    plain = [_without_relation(PureDPEvent(0.5)), _without_relation(GaussianEvent(2.0))]
    wrapped = [
        PoissonSampledEvent(0.1, _without_relation(GaussianEvent(2.0))),
        GroupEvent(_without_relation(PureDPEvent(0.5)), 2),
        SelfComposedEvent(_without_relation(GaussianEvent(2.0)), 3),
        PoissonSampledEvent(0.1, GaussianEvent(2.0, NeighbourRelation.REPLACE_ONE)),
    ]
    for event in plain + wrapped:
        assert not accountant.supports(event)
        with pytest.raises(UnsupportedEventError):
            accountant.compose(event)
    assert accountant.history == ()
    # The same events with their relation are still accepted where the accountant handles them.
    assert accountant.supports(GaussianEvent(2.0)) or accountant.supports(PureDPEvent(0.5))


def test_pure_dp_rdp_of_a_huge_epsilon_and_pld_of_a_huge_count_are_answered_or_refused() -> None:
    """RDPAccountant on PureDPEvent(1e200) raised a bare OverflowError (e^eps); its RDP is eps. A PLD of
    1e9 or 1e30 Gaussian events tried to allocate terabytes (or overflowed a C size): now a typed
    error naming the discretization, raised at query time, with the events kept. (Plain Gaussians
    alone are merged into one and answered exactly; with another event the grid is needed.)"""
    from dpkit._errors import InvalidParameterError

    assert RDPAccountant().compose(PureDPEvent(1e200)).epsilon(1e-5) == pytest.approx(1e200, rel=1e-8)
    for count in (10**9, 10**30):
        alone = PLDAccountant().compose(GaussianEvent(1.0), count)
        assert alone.epsilon(1e-5) == pytest.approx(gaussian_epsilon(math.sqrt(count), 1e-5), rel=1e-12)
        with pytest.raises(InvalidParameterError, match="discretization"):
            alone.loss_distribution()
        accountant = PLDAccountant().compose(GaussianEvent(1.0), count).compose(LaplaceEvent(1.0))
        with pytest.raises(InvalidParameterError, match="discretization"):
            accountant.epsilon(1e-5)
        assert accountant.history == ((GaussianEvent(1.0), count), (LaplaceEvent(1.0), 1))
