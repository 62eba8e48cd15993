"""Approximate zCDP: validation, exact arithmetic, and the conversion to (epsilon, delta)-DP checked
against the exact privacy profile of a mechanism that is delta-approximately rho-zCDP."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import pytest

from dpkit import ZCDP, ApproxDP, ApproxZCDP, InvalidParameterError, NeighbourRelation, PureDP
from dpkit.guarantees import compose
from dpkit.guarantees._guarantees import float_at_most


@pytest.mark.parametrize(
    ("rho", "delta", "name"),
    [
        (-1.0, 1e-6, "rho"),
        (float("nan"), 1e-6, "rho"),
        (float("inf"), 1e-6, "rho"),
        ("0.1", 1e-6, "rho"),
        (0.1, 1.0, "delta"),
        (0.1, -1e-9, "delta"),
        (0.1, float("nan"), "delta"),
    ],
)
def test_bad_parameters_are_refused_by_name(rho, delta, name):
    with pytest.raises(InvalidParameterError, match=name):
        ApproxZCDP(rho, delta)


def test_rho_and_delta_add_exactly():
    one = ApproxZCDP(0.01, 1e-7)
    assert one * 10 == ApproxZCDP(0.1, 1e-6)
    total = one
    for _ in range(9):
        total = total + one
    assert total == ApproxZCDP(0.1, 1e-6) and total.rho_exact == Fraction(1, 10)
    assert ZCDP(0.02) + one == ApproxZCDP(0.03, 1e-7) == compose(one, ZCDP(0.02))


@pytest.mark.parametrize("other", [PureDP(0.1), ApproxDP(0.1, 1e-6)])
def test_composition_with_epsilon_guarantees_needs_an_explicit_conversion(other):
    with pytest.raises(InvalidParameterError, match="zCDP"):
        ApproxZCDP(0.01, 1e-7) + other


def test_relations_must_match():
    replace = ApproxZCDP(0.01, 1e-7, NeighbourRelation.REPLACE_ONE)
    with pytest.raises(InvalidParameterError, match="neighbours"):
        ApproxZCDP(0.01, 1e-7) + replace


def test_within_reads_pure_dp_as_half_epsilon_squared():
    budget = ApproxZCDP(Fraction(1, 200), Fraction(0))
    assert PureDP(0.1).within(budget)  # 0.1^2 / 2 = 1/200 exactly
    assert not PureDP(0.1001).within(budget)
    assert ApproxZCDP(0.005, 0).within(budget) and not ApproxZCDP(0.005, 1e-9).within(budget)
    assert ApproxZCDP(0.005, 0).within(ZCDP(0.005)) and not ApproxZCDP(0.005, 1e-9).within(ZCDP(0.005))
    with pytest.raises(InvalidParameterError):
        ApproxDP(0.1, 1e-7).within(budget)


def test_group_privacy_and_relation_changes_are_refused_rather_than_guessed():
    assert ApproxZCDP(0.01, 1e-7).group(1) == ApproxZCDP(0.01, 1e-7)
    with pytest.raises(InvalidParameterError, match="size"):
        ApproxZCDP(0.01, 1e-7).group(2)
    assert ApproxZCDP(0.01, 1e-7).under(NeighbourRelation.ADD_REMOVE) == ApproxZCDP(0.01, 1e-7)
    with pytest.raises(InvalidParameterError, match="neighbours"):
        ApproxZCDP(0.01, 1e-7).under(NeighbourRelation.REPLACE_ONE)


def _cks_epsilon(rho: float, delta: float) -> mpmath.mpf:
    """inf over alpha > 1 of the CKS 2020 (Cor. 13) epsilon, minimised in mpmath (an independent evaluation)."""
    mpmath.mp.dps = 30
    r, d = mpmath.mpf(rho), mpmath.mpf(delta)

    def eps_of(alpha):
        return alpha * r + (mpmath.log(1 / d) + (alpha - 1) * mpmath.log(1 - 1 / alpha) - mpmath.log(alpha)) / (
            alpha - 1
        )

    guess = 1 + mpmath.sqrt(mpmath.log(1 / d) / r)
    grid = [1 + (guess - 1) * mpmath.mpf(k) / 400 for k in range(40, 1600)]
    best = min(grid, key=eps_of)
    return eps_of(mpmath.findroot(lambda a: mpmath.diff(eps_of, a), best))


@pytest.mark.parametrize(("rho", "delta", "conversion"), [(0.01, 1e-7, 1e-6), (0.5, 1e-5, 1e-6), (2.0, 0.0, 1e-9)])
def test_conversion_is_the_cks_epsilon_plus_the_conditioning_term_rounded_up(rho, delta, conversion):
    approx = ApproxZCDP(rho, delta).to_approx(conversion)
    expected = _cks_epsilon(rho, conversion) - mpmath.log1p(-mpmath.mpf(delta))
    assert approx.delta_exact == Fraction(str(delta)) + Fraction(str(conversion))
    assert expected <= approx.epsilon <= expected + mpmath.mpf(1e-9)


def _gaussian_hockey_stick(mu: mpmath.mpf, epsilon: mpmath.mpf) -> mpmath.mpf:
    """sup_S P[N(mu, 1) in S] - e^eps P[N(0, 1) in S] (the same for both orders)."""
    return mpmath.ncdf(-epsilon / mu + mu / 2) - mpmath.exp(epsilon) * mpmath.ncdf(-epsilon / mu - mu / 2)


@pytest.mark.parametrize(("releases", "sigma", "tau"), [(1, 4.0, 22.0), (10, 12.0, 64.0), (40, 30.0, 160.0)])
def test_conversion_covers_the_exact_profile_of_thresholded_gaussian_releases(releases, sigma, tau):
    """``releases`` Gaussian releases, each with one key shared by D and D' (value 0 vs 1, noise sigma)
    and one key only D' has (count 1), released when its noisy count reaches tau.

    Each release is delta_i-approximately (1 / (2 sigma^2))-zCDP with delta_i = P[1 + sigma Z >= tau]
    (outside the event that the new key shows, it is a Gaussian release of sensitivity 1). The exact
    privacy profile of the composition, in both directions, with q = (1 - delta_i)^releases the chance
    that no new key shows and mu = sqrt(releases) / sigma:
    D' against D: (1 - q) + q H(eps - log q); D against D': H(eps + log q), H the Gaussian profile.
    The conversion of the composed guarantee must cover both, and is not loose by more than 10x.
    """
    mpmath.mp.dps = 40
    p = mpmath.ncdf((1 - mpmath.mpf(tau)) / sigma)
    one = ApproxZCDP(Fraction(1) / (2 * Fraction(sigma) ** 2), Fraction(float(p)) * (1 + Fraction(1, 10**12)))
    total = one * releases
    conversion = 1e-6
    claim = total.to_approx(conversion)
    eps = mpmath.mpf(claim.epsilon)
    q = (1 - p) ** releases
    mu = mpmath.sqrt(releases) / sigma
    forward = (1 - q) + q * _gaussian_hockey_stick(mu, eps - mpmath.log(q))
    backward = _gaussian_hockey_stick(mu, eps + mpmath.log(q))
    exact = max(forward, backward)
    assert exact <= claim.delta
    assert exact >= claim.delta / 10  # the check has teeth: the claim is within 10x of the truth
    assert 1 - q > mpmath.mpf(1e-12)  # selection contributes (the delta_i terms are not vacuous)


def test_from_approx_is_the_largest_budget_within_the_target():
    target = ApproxDP(1.0, 1e-6)
    budget = ApproxZCDP.from_approx(1.0, 1e-6)
    assert budget.delta_exact == Fraction(1, 2) * Fraction(1, 10**6)
    assert budget.to_approx(5e-7).within(target)
    bigger = ApproxZCDP(budget.rho * (1 + 1e-9), budget.delta_exact)
    assert not bigger.to_approx(5e-7).within(target)
    no_selection = ApproxZCDP.from_approx(1.0, 1e-6, selection_share=0.0)
    assert no_selection.delta == 0 and no_selection.rho > budget.rho
    assert math.isclose(no_selection.rho, budget.rho, rel_tol=0.1)


@pytest.mark.parametrize(("delta", "share"), [(2**-20, 1 / 3), (1e-5, 1 / 97), (1e-6, 0.5), (3e-7, 0.1)])
def test_from_approx_splits_any_delta_exactly(delta, share):
    """selection + conversion never exceeds delta, even when the conversion is not a short decimal."""
    budget = ApproxZCDP.from_approx(1.0, delta, selection_share=share)
    rest = Fraction(str(delta)) - budget.delta_exact
    assert budget.rho > 0.01
    assert budget.to_approx(float_at_most(rest)).within(ApproxDP(1.0, delta))


def test_a_tiny_rho_converts_to_epsilon_zero_not_an_error():
    assert ZCDP(1e-12).to_approx(1e-5) == ApproxDP(0.0, 1e-5)
    tiny = ApproxZCDP(1e-12, 1e-7).to_approx(1e-5)
    assert tiny.epsilon == pytest.approx(1e-7, rel=1e-6) and tiny.delta_exact == Fraction(101, 10**7)


@pytest.mark.parametrize("share", [1.0, -0.1, float("nan")])
def test_from_approx_refuses_a_bad_selection_share(share):
    with pytest.raises(InvalidParameterError, match="selection_share"):
        ApproxZCDP.from_approx(1.0, 1e-6, selection_share=share)
