"""Guarantees and events at extreme parameters, against independent 50-digit mpmath references."""

from __future__ import annotations

import sys
from fractions import Fraction

import mpmath
import pytest
from mp_precision import precision

from dpkit import ZCDP, ApproxDP, ApproxZCDP, InvalidParameterError, NeighbourRelation, PureDP
from dpkit.events import ComposedEvent, GaussianEvent, LaplaceEvent, PureDPEvent
from dpkit.guarantees._guarantees import float_at_most

_precision = precision(60)


def _mp(value: Fraction) -> mpmath.mpf:
    return mpmath.mpf(value.numerator) / value.denominator


def _cks_infimum(rho: Fraction, delta: Fraction) -> mpmath.mpf:
    """inf over alpha > 1 of the CKS 2020 Cor. 13 epsilon: golden-section on t, alpha = 1 + e^t."""
    r, big_l = _mp(rho), -mpmath.log(_mp(delta))

    def f(t: mpmath.mpf) -> mpmath.mpf:
        a = 1 + mpmath.exp(t)
        return a * r + (big_l + (a - 1) * mpmath.log1p(-1 / a) - mpmath.log(a)) / (a - 1)

    ts = [mpmath.mpf(k) / 4 for k in range(-200, 400)]
    i = min(range(len(ts)), key=lambda k: f(ts[k]))
    lo, hi = ts[max(i - 1, 0)], ts[min(i + 1, len(ts) - 1)]
    g = (mpmath.sqrt(5) - 1) / 2
    c, d = hi - g * (hi - lo), lo + g * (hi - lo)
    fc, fd = f(c), f(d)
    for _ in range(200):  # a fixed number of steps: interval shrinks by 0.618^200
        if fc < fd:
            hi, d, fd = d, c, fc
            c = hi - g * (hi - lo)
            fc = f(c)
        else:
            lo, c, fc = c, d, fd
            d = lo + g * (hi - lo)
            fd = f(d)
    return min(fc, fd)


# Deltas just beyond the point where the CKS epsilon crosses 0 for rho = 0.001 and 0.1 (there
# its terms ~0.06 cancel down to 1e-11..1e-14), plus ordinary and extreme points.
CASES = [
    (0.001, 0.02712035539875762),
    (0.001, 0.027120355425850853),
    (0.1, 0.2667803242805692),
    (1.0, 0.7303885961253235),
    (0.5, 1e-6),
    (1e-15, 1e-300),
    (1e-12, 1e-10),
    (1e4, 1e-300),
    (1e4, 0.99),
    (100.0, 0.9999),
    (3.0, 1e-310),  # subnormal delta: 1 / delta overflows
]


@pytest.mark.parametrize(("rho", "delta"), CASES)
def test_zcdp_to_approx_never_claims_an_epsilon_below_the_cks_infimum(rho, delta):
    """Catches ZCDP.to_approx returning epsilon below inf_alpha of CKS Cor. 13 (a privacy bug: before
    the fix, double-precision cancellation gave 4.5737719e-14 for a true 4.5741022e-14 at rho 0.001,
    and a subnormal delta raised ValueError)."""
    claim = ZCDP(rho).to_approx(delta)
    truth = _cks_infimum(Fraction(repr(rho)), claim.delta_exact)
    assert claim.delta_exact == Fraction(repr(delta))
    assert _mp(claim.epsilon_exact) >= max(truth, 0)
    if truth > 1e-6:  # and it stays near-optimal where the optimum is well conditioned
        assert _mp(claim.epsilon_exact) <= truth * (1 + mpmath.mpf(1e-5))


def test_zcdp_to_approx_of_a_rho_below_the_float_range_is_certified_not_a_crash():
    """Catches ZeroDivisionError for a Fraction rho whose float is 0.0 (rho = 1e-400)."""
    rho = Fraction(1, 10**400)
    claim = ZCDP(rho).to_approx(1e-5)
    assert _mp(claim.epsilon_exact) >= max(_cks_infimum(rho, Fraction(1, 10**5)), 0)


@pytest.mark.parametrize(
    ("epsilon", "delta", "k"), [(52.8, 4.831531465383279e-277, 12), (345.1, 1e-301, 2), (0.1, 1e-300, 6000)]
)
def test_group_delta_is_at_least_the_chained_bound(epsilon, delta, k):
    """Catches ApproxDP.group understating delta sum_{i<k} e^{i epsilon}: math.exp of the rounded
    k * epsilon (~700) came out 9e-14 relative low (52.8, 4.83e-277, k=12)."""
    grouped = ApproxDP(epsilon, delta).group(k)
    exact_epsilon = _mp(Fraction(repr(epsilon)))
    truth = mpmath.expm1(k * exact_epsilon) / mpmath.expm1(exact_epsilon) * _mp(Fraction(repr(delta)))
    assert truth <= _mp(grouped.delta_exact) <= truth * (1 + mpmath.mpf(10) ** -12)
    assert grouped.epsilon_exact == k * Fraction(repr(epsilon))


def test_group_beyond_the_exp_range_is_exact_or_refused_by_name():
    """Catches OverflowError from math.exp when k * epsilon > 709 although delta stays < 1."""
    assert ApproxDP(740, 5e-324).group(2).delta_exact >= _mp(Fraction(repr(5e-324))) * (1 + mpmath.exp(740))
    tiny = ApproxDP(1.0, Fraction(1, 10**1000)).group(1000)
    truth = mpmath.expm1(1000) / mpmath.expm1(1) * mpmath.mpf(10) ** -1000
    assert truth <= _mp(tiny.delta_exact) <= truth * (1 + mpmath.mpf(10) ** -30)
    with pytest.raises(InvalidParameterError, match="size"):
        ApproxDP(1.0, 1e-300).group(10**6)
    replaced = ApproxDP(400, 1e-300).under(NeighbourRelation.REPLACE_ONE)  # (1 + e^400) 1e-300 < 1
    assert _mp(replaced.delta_exact) >= (1 + mpmath.exp(400)) * _mp(Fraction(repr(1e-300)))
    with pytest.raises(InvalidParameterError, match="size"):
        ApproxDP(700, 1e-300).under(NeighbourRelation.REPLACE_ONE)  # (1 + e^700) 1e-300 > 1


@pytest.mark.parametrize(
    "build",
    [
        lambda: PureDP(Fraction(10**400)),
        lambda: PureDP(1e308) + PureDP(1e308),
        lambda: PureDP(1e200).to_zcdp(),
        lambda: ZCDP(1e300).group(10**6),
        lambda: ApproxDP(Fraction(10**400), 0),
        lambda: ApproxZCDP(Fraction(10**400), 0),
    ],
)
def test_values_beyond_the_float_range_are_refused_by_name(build):
    """Catches a bare OverflowError from float() of a huge exact Fraction."""
    with pytest.raises(InvalidParameterError, match="epsilon|rho"):
        build()


def test_float_at_most_beyond_the_float_range():
    """Catches OverflowError from float_at_most on a Fraction above the float range."""
    assert float_at_most(Fraction(10**400)) == sys.float_info.max
    assert float_at_most(Fraction(1, 10**400)) == 0.0


def test_huge_fractions_add_and_compare_exactly():
    """Catches float creeping into exact sums: 1e6 parts of 1/3^40 must add to exactly 1e6/3^40."""
    part = PureDP(Fraction(1, 3**40))
    assert (part * 10**6).epsilon_exact == Fraction(10**6, 3**40)
    assert part.group(10**6) == part * 10**6
    just_over = PureDP(Fraction(10**6, 3**40) + Fraction(1, 10**200))
    assert not just_over.within(part * 10**6) and (part * 10**6).within(just_over)
    assert ApproxDP(Fraction(1, 10**300), Fraction(1, 10**300)).within(
        ApproxDP(Fraction(2, 10**300), Fraction(1, 10**300))
    )


@pytest.mark.parametrize(
    ("epsilon", "delta", "share"), [(700.0, 1e-300, 0.5), (1.0, 1e-300, 1 - 2**-53), (1e-3, 0.99, 0.0)]
)
def test_from_approx_at_extremes_fits_its_target(epsilon, delta, share):
    """Catches ValueError (infinite optimiser bounds) at a subnormal conversion delta, and a
    budget whose conversion exceeds the target."""
    budget = ApproxZCDP.from_approx(epsilon, delta, selection_share=share)
    rest = float_at_most(Fraction(repr(delta)) - budget.delta_exact)
    assert budget.to_approx(rest).within(ApproxDP(epsilon, delta))


def test_approx_zcdp_conversion_covers_the_conditioning_term_exactly():
    """Catches an epsilon below CKS(rho, d) + log(1 / (1 - delta)): with delta = 1 - 1e-16 the
    penalty came from float(delta) = 1 - 2^-53 and epsilon was 49.7807 for a true 49.8854."""
    for rho, own, d in [(1e-15, 0.9, 1e-300), (1e4, 0.5, 0.49), (1.0, 1 - 1e-16, 1e-17), (0.5, 0.999999, 1e-7)]:
        claim = ApproxZCDP(rho, own).to_approx(d)
        cks = max(_cks_infimum(Fraction(repr(rho)), Fraction(repr(d))), 0)
        assert _mp(claim.epsilon_exact) >= cks - mpmath.log1p(-_mp(Fraction(repr(own))))


@pytest.mark.parametrize(
    "build",
    [
        lambda: LaplaceEvent(1.0, neighbours=None),
        lambda: GaussianEvent(1.0, neighbours="replace_one"),
        lambda: PureDPEvent(1.0, neighbours=None),
        lambda: ComposedEvent(5),
    ],
)
def test_events_refuse_a_missing_relation_or_a_non_sequence(build):
    """Catches an event with neighbours=None being accepted (the ZCDP and PLD accountants then
    skip their relation check and account it under replace-one), and TypeError for events=5."""
    with pytest.raises(InvalidParameterError):
        build()


def test_refusals_name_the_argument_at_fault():
    """Found by the guarantees QA helper: each refusal named something else (the composed delta
    Fraction(1, 1) as 'delta', a phantom 'guarantee' parameter, a delta of 0.0 never given)."""
    from dpkit.guarantees import ApproxZCDP

    for guarantee in (ApproxDP(0.1, 0.2), ApproxZCDP(0.1, 0.2)):
        with pytest.raises(InvalidParameterError) as info:
            guarantee * 5
        assert info.value.name == "count" and info.value.value == 5
        assert (guarantee * 4).delta == pytest.approx(0.8)
    with pytest.raises(InvalidParameterError) as info:
        ApproxDP(1, 1e-5).within(ApproxZCDP(1, 0.5))
    assert info.value.name == "budget"
    with pytest.raises(InvalidParameterError) as info:
        ApproxZCDP.from_approx(1.0, 5e-324)
    assert info.value.name == "delta" and info.value.value == 5e-324
    assert ApproxZCDP.from_approx(1.0, 5e-324, selection_share=0).delta == 0.0
