"""Regression tests for accounting bugs found in QA: each test failed on the code before its fix.

Reference values are exact: computed with mpmath at 60 to 80 digits from the closed forms named in
each docstring, and committed inline (17 significant digits).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from dpkit._errors import InvalidParameterError, UnsupportedEventError
from dpkit.accounting import (
    AdvancedAccountant,
    GDPAccountant,
    OptimalAccountant,
    PLDAccountant,
    PrivacyFilter,
    RDPAccountant,
    SaddlePointAccountant,
    ZCDPAccountant,
    optimal_composition_delta,
)
from dpkit.accounting._rdp import DEFAULT_ORDERS, laplace_rdp, randomized_response_rdp
from dpkit.accounting._zcdp import zcdp_delta
from dpkit.events import (
    ComposedEvent,
    GaussianEvent,
    LaplaceEvent,
    PureDPEvent,
    RandomizedResponseEvent,
    ZCDPEvent,
    dpsgd_event,
)
from dpkit.guarantees import ZCDP, ApproxDP, NeighbourRelation

# -- RDP curves of Laplace and randomized response at a tiny per-release epsilon -----------------

# Mironov 2017, Prop. 6, at 60 digits: (b, alpha, D_alpha).
LAPLACE_EXACT = [
    (1e8, 1.0001, 5.0004999833316667e-17),
    (1e8, 2.0, 9.9999999666666664e-17),
    (1e8, 10000.0, 4.9999999750008335e-13),
    (1e12, 1.0001, 5.0004999999983331e-25),
    (1e12, 1.5, 7.4999999999975e-25),
    (1e12, 2.0, 9.9999999999966667e-25),
    (1e12, 1024.0, 5.1199999999982933e-22),
    (1e15, 1.0001, 5.0004999999999983e-31),
    (1e15, 2.0, 9.9999999999999967e-31),
    (1e15, 10000.0, 4.9999999999999983e-27),
]


@pytest.mark.parametrize(("b", "alpha", "exact"), LAPLACE_EXACT)
def test_laplace_rdp_at_a_large_scale_is_not_below_the_exact_divergence(b: float, alpha: float, exact: float) -> None:
    """Before: eps + log1p(...)/(alpha-1) cancelled; laplace_rdp(1e12, 2) was 1.5e-4 low, (1e15, .) 20% low."""
    value = laplace_rdp(b, np.array([alpha]))[0]
    assert exact <= value <= exact * (1 + 1e-12)


# log((e^{alpha eps} + e^{(1-alpha) eps} + k - 2) / (e^eps + k - 1)) / (alpha - 1) at 60 digits: (eps, k, alpha, D).
RANDOMIZED_RESPONSE_EXACT = [
    (1e-17, 2, 1.0001, 5.0005000000000007e-35),
    (1e-17, 2, 64.0, 3.2000000000000005e-33),
    (1e-17, 4, 1.0001, 2.5002500000000003e-35),
    (1e-17, 4, 1.5, 3.7500000000000005e-35),
    (1e-17, 4, 10000.0, 2.5000000000000004e-31),
    (1e-17, 10**6, 1.5, 1.5000000000000002e-40),
    (1e-17, 10**6, 10000.0, 1.0000000000000001e-36),
    (1e-9, 2, 10000.0, 4.9999999999166756e-15),
    (1e-9, 4, 1.0001, 2.5002500006250628e-19),
    (1e-9, 4, 64.0, 1.6000000003999999e-17),
    (1e-9, 10**6, 1.0001, 1.0001000005000491e-24),
    (1e-9, 10**6, 10000.0, 1.0000000005083316e-20),
]


@pytest.mark.parametrize(("epsilon", "k", "alpha", "exact"), RANDOMIZED_RESPONSE_EXACT)
def test_randomized_response_rdp_at_a_tiny_epsilon_is_not_below_the_exact_divergence(
    epsilon: float, k: int, alpha: float, exact: float
) -> None:
    """Before: log-sum-exp minus log Z cancelled; randomized_response_rdp(1e-17, 4) was -2.2e-15 at some orders."""
    value = randomized_response_rdp(epsilon, k, np.array([alpha]))[0]
    assert exact <= value <= exact * (1 + 1e-12)


def _exact_laplace(b: float, alpha: float) -> mpmath.mpf:
    a, scale = mpmath.mpf(alpha), mpmath.mpf(b)
    return mpmath.log(
        a / (2 * a - 1) * mpmath.exp((a - 1) / scale) + (a - 1) / (2 * a - 1) * mpmath.exp(-a / scale)
    ) / (a - 1)


def _exact_randomized_response(epsilon: float, k: int, alpha: float) -> mpmath.mpf:
    a, e = mpmath.mpf(alpha), mpmath.mpf(epsilon)
    return mpmath.log((mpmath.exp(a * e) + mpmath.exp((1 - a) * e) + (k - 2)) / (mpmath.exp(e) + k - 1)) / (a - 1)


GRID_EPSILONS = [1e-17, 3e-15, 1e-12, 1e-9, 1e-6, 1e-4, 3e-3, 0.1, 1.0, 5.0, 20.0, 50.0]
GRID_ORDERS = np.array([1.0001, 1.001, 1.1, 1.37, 1.5, 2.0, 2.5, 3.3, 7.77, 32.0, 100.5, 1024.0, 5000.5, 1e4])


@pytest.mark.parametrize("epsilon", GRID_EPSILONS)
def test_laplace_and_randomized_response_curves_bound_the_exact_divergence_on_a_grid(epsilon: float) -> None:
    """Every value is >= 0, >= the 60-digit mpmath divergence and within 1e-12 above it.

    Before: at epsilon <= 1e-6 values fell below the exact divergence (some negative), which let
    composing more releases lower an RDP accountant's epsilon.
    """
    with mpmath.workdps(60 + int(2 * abs(math.log10(epsilon)))):
        curves = [(laplace_rdp(1 / epsilon, GRID_ORDERS), lambda a: _exact_laplace(1 / epsilon, a))]
        for k in (2, 3, 10, 1000, 10**6):
            curves.append(
                (
                    randomized_response_rdp(epsilon, k, GRID_ORDERS),
                    lambda a, k=k: _exact_randomized_response(epsilon, k, a),
                )
            )
        for values, exact in curves:
            for alpha, value in zip(GRID_ORDERS, values, strict=True):
                reference = exact(float(alpha))
                assert value >= 0
                assert reference <= value <= reference * (1 + 1e-12)


def test_rdp_accountant_on_1e31_laplace_releases_is_not_below_the_exact_curve_conversion() -> None:
    """CKS conversion of 10^31 x the exact Laplace(1e15) curve over the default orders, 80 digits: 13.15647037574277.

    Before: 11.107 (the curve was 20% low), below even the true epsilon 11.614 (sqrt(10)-GDP limit).
    """
    epsilon = RDPAccountant().compose(LaplaceEvent(1e15), 10**31).epsilon(0.01)
    assert 13.15647037574277 <= epsilon <= 13.15647037574277 * (1 + 1e-8)


def test_rdp_accountant_on_1e24_laplace_releases_matches_the_exact_curve_conversion() -> None:
    """CKS conversion of 10^24 x the exact Laplace(1e12) curve, 80 digits: 4.728507067216723. Before: 1.06e-5 off."""
    epsilon = RDPAccountant().compose(LaplaceEvent(1e12), 10**24).epsilon(1e-5)
    assert 4.728507067216723 <= epsilon <= 4.728507067216723 * (1 + 1e-8)


def test_composing_tiny_randomized_response_releases_never_lowers_rdp_epsilon() -> None:
    """Before: 10^15 more RR(1e-17, k=4) releases took a Gaussian accountant's epsilon(1e-5) from 4.7285 to 0."""
    accountant = RDPAccountant(neighbours=NeighbourRelation.REPLACE_ONE).compose(
        GaussianEvent(1.0, NeighbourRelation.REPLACE_ONE)
    )
    before = accountant.epsilon(1e-5)
    accountant.compose(RandomizedResponseEvent(1e-17, 4, NeighbourRelation.REPLACE_ONE), count=10**15)
    assert accountant.epsilon(1e-5) >= before
    assert np.all(randomized_response_rdp(1e-17, 4, np.array(DEFAULT_ORDERS)) > 0)


@pytest.mark.parametrize(("epsilon", "k"), [(0.5, 2), (1.0, 3), (2.0, 10), (5.0, 1000)])
def test_randomized_response_curve_is_unchanged_for_ordinary_parameters(epsilon: float, k: int) -> None:
    """The log-sum-exp closed form used before (accurate where the divergence is not small) agrees to 1e-12."""
    orders = np.array(DEFAULT_ORDERS)
    with np.errstate(over="ignore"):
        direct = (
            np.logaddexp(np.logaddexp(orders * epsilon, (1 - orders) * epsilon), math.log(k - 2) if k > 2 else -np.inf)
            - np.logaddexp(epsilon, math.log(k - 1))
        ) / (orders - 1)
    np.testing.assert_allclose(randomized_response_rdp(epsilon, k, orders), direct, rtol=1e-12)


# -- zCDP -> (epsilon, delta) ----------------------------------------------------------------------

# inf over alpha > 1 of exp((alpha-1)(alpha rho - eps + log(1 - 1/alpha)) - log alpha), capped by
# sqrt(1 - e^-rho): mpmath at 60 digits, the minimiser found by bisection on the derivative in
# log(alpha - 1). (rho, epsilon, delta).
ZCDP_DELTA_EXACT = [
    (1e-12, 0.0, 8.5776388496056383e-7),
    (1e-6, 0.0, 0.00085776374200007596),
    (1e-6, 1e-6, 0.00085715774720282916),
    (1e-3, 0.0, 0.027120355425877974),
    (0.01, 0.3, 0.002730780709533308),
    (0.5, 1.0, 0.24684633078294449),
    (1.0, 5.0, 0.002612034506620487),
]


@pytest.mark.parametrize(("rho", "epsilon", "exact"), ZCDP_DELTA_EXACT)
def test_zcdp_delta_reaches_the_optimum_of_the_cks_bound(rho: float, epsilon: float, exact: float) -> None:
    """Before: the alpha search stopped at ~6 near epsilon 0; delta(rho=1e-6, eps=0) was 1.0e-3 (17% loose)."""
    assert exact <= zcdp_delta(rho, epsilon) <= exact * (1 + 1e-12)
    assert exact <= ZCDPAccountant().compose(ZCDPEvent(rho)).delta(epsilon) <= exact * (1 + 1e-8)


def test_zcdp_delta_at_a_huge_epsilon_is_tiny_not_the_total_variation_cap() -> None:
    """The exact bound is below 1e-300 here; the search must not fall back to sqrt(1 - e^-rho)."""
    assert 0.0 < zcdp_delta(0.125, 1e308) <= 1e-300


# inf over alpha > 1 of alpha rho + (log(1/delta) + (alpha-1) log(1 - 1/alpha) - log alpha) / (alpha-1)
# (CKS 2020, Cor. 13), mpmath at 50 digits, ternary search in log(alpha - 1). (rho, delta, epsilon).
ZCDP_EPSILON_EXACT = [
    (1e-6, 1e-4, 0.00209082345627),
    (1e-6, 1e-9, 0.00680406082221),
    (1e-3, 1e-5, 0.157335393161),
    (0.5, 1e-6, 5.22153444453),
    (10.0, 1e-10, 39.2277572478),
]


@pytest.mark.parametrize(("rho", "delta", "exact"), ZCDP_EPSILON_EXACT)
def test_zcdp_epsilon_reaches_the_optimum_of_the_cks_bound(rho: float, delta: float, exact: float) -> None:
    """The epsilon(delta) direction of the same conversion: tight to the 12 digits of the reference."""
    assert ZCDPAccountant().compose(ZCDPEvent(rho)).epsilon(delta) == pytest.approx(exact, rel=1e-11)
    assert ZCDP(rho).to_approx(delta).epsilon >= exact * (1 - 1e-11)


# -- construction and validation ---------------------------------------------------------------------


def test_an_empty_composed_event_is_refused_at_construction() -> None:
    """Before: accepted; AdvancedAccountant/ZCDPAccountant queries then raised ZeroDivisionError."""
    for empty in ([], ()):
        with pytest.raises(InvalidParameterError, match="events"):
            ComposedEvent(empty)  # type: ignore[arg-type]


def test_optimal_accountant_refuses_an_epsilon_beyond_the_float_range() -> None:
    """Before: compose(LaplaceEvent(1e-320)) was accepted and every query raised OverflowError."""
    accountant = OptimalAccountant()
    with pytest.raises(InvalidParameterError, match="event"):
        accountant.compose(LaplaceEvent(1e-320))
    assert accountant.history == ()
    assert not accountant.supports(LaplaceEvent(1e-320))


def test_optimal_accountant_answers_at_a_huge_finite_epsilon() -> None:
    """Before: k eps = inf made epsilon() raise ValueError ("Invalid literal for Fraction: 'inf'")."""
    accountant = OptimalAccountant().compose(PureDPEvent(1e308), count=10)
    assert accountant.epsilon(1e-6) == math.inf
    assert accountant.delta(1.0) == 1.0


@pytest.mark.parametrize(
    ("arguments", "name"),
    [
        ((math.nan, 0.0, 10, 1.0), "epsilon"),
        ((-1.0, 0.0, 10, 1.0), "epsilon"),
        ((0.0, 0.0, 10, 1.0), "epsilon"),
        ((math.inf, 0.0, 10, 1.0), "epsilon"),
        ((1.0, math.nan, 10, 1.0), "delta"),
        ((1.0, -0.1, 10, 1.0), "delta"),
        ((1.0, 1.0, 10, 1.0), "delta"),
        ((1.0, 0.0, 0, 1.0), "count"),
        ((1.0, 0.0, 2.5, 1.0), "count"),
        ((1.0, 0.0, True, 1.0), "count"),
        ((1.0, 0.0, 10, math.nan), "target_epsilon"),
        ((1.0, 0.0, 10, -1.0), "target_epsilon"),
    ],
)
def test_optimal_composition_delta_validates_its_inputs(arguments: tuple[float, float, int, float], name: str) -> None:
    """Before: nothing was checked; a NaN epsilon returned delta 0.0 (perfect privacy), a NaN delta NaN."""
    with pytest.raises(InvalidParameterError) as raised:
        optimal_composition_delta(*arguments)
    assert raised.value.name == name


def test_optimal_composition_delta_is_unchanged_for_ordinary_inputs() -> None:
    """Kairouz, Oh & Viswanath 2015, Thm 3.3, summed exactly with mpmath: k = 10, eps = 0.5, delta = 1e-6, t = 1."""
    k, eps, dlt, t = 10, mpmath.mpf(0.5), mpmath.mpf(1e-6), mpmath.mpf(1.0)
    p, q = mpmath.exp(eps) / (1 + mpmath.exp(eps)), 1 / (1 + mpmath.exp(eps))
    mass = sum(
        mpmath.binomial(k, ell) * max(0, p ** (k - ell) * q**ell - mpmath.exp(t) * p**ell * q ** (k - ell))
        for ell in range(k + 1)
    )
    exact = 1 - (1 - dlt) ** k * (1 - mass)
    assert optimal_composition_delta(0.5, 1e-6, 10, 1.0) == pytest.approx(float(exact), rel=1e-12)


# -- privacy filters admit releases only on certified bounds ----------------------------------------


def test_privacy_filter_refuses_a_release_its_accountant_can_only_approximate() -> None:
    """Before: GDPAccountant's CLT answer 3.06 was admitted under ApproxDP(4, 1e-5); certified PLD says 6.48."""
    event = dpsgd_event(0.5, 0.01, 100)
    budget = PrivacyFilter(ApproxDP(4.0, 1e-5), GDPAccountant)
    assert PLDAccountant().compose(event).epsilon(1e-5) > 4.0  # the release does not fit a certified budget
    with pytest.raises(UnsupportedEventError, match="certified"):
        budget.try_spend(event)
    with pytest.raises(UnsupportedEventError, match="certified"):
        budget.can_spend(event)
    assert budget.accountant.history == ()
    assert budget.spent == ApproxDP(0.0, 0.0)


def test_privacy_filter_keeps_accepting_certified_gdp_releases() -> None:
    """Plain Gaussians keep GDPAccountant certified (exact mu-GDP), so the filter still accepts them."""
    budget = PrivacyFilter(ApproxDP(4.0, 1e-5), GDPAccountant)
    assert budget.try_spend(GaussianEvent(2.0))
    assert len(budget.accountant.history) == 1


def test_privacy_filter_refuses_an_accountant_that_is_never_certified() -> None:
    """SaddlePointAccountant is an approximation throughout (certified = False): refused when the filter is built."""
    with pytest.raises(InvalidParameterError, match="accountant_factory"):
        PrivacyFilter(ApproxDP(4.0, 1e-5), SaddlePointAccountant)


def test_advanced_accountant_still_answers_for_nonempty_compositions() -> None:
    """The refusal of empty compositions leaves non-empty ones as they were."""
    event = ComposedEvent([PureDPEvent(0.1), PureDPEvent(0.1)])
    assert AdvancedAccountant().compose(event).delta(1.0) == AdvancedAccountant().compose(PureDPEvent(0.1), 2).delta(
        1.0
    )
