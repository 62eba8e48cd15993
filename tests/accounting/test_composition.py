"""Basic, parallel, advanced and optimal composition: exact formulas and brute-force checks."""

from __future__ import annotations

import copy
import itertools
import math
from fractions import Fraction

import pytest

from dpkit._errors import InvalidParameterError, UnsupportedEventError
from dpkit.accounting._base import PrivacyAccountant
from dpkit.accounting._composition import (
    AdvancedAccountant,
    BasicAccountant,
    OptimalAccountant,
    fixed_privacy,
    optimal_composition_delta,
    parallel_composition,
)
from dpkit.events import (
    ApproxDPEvent,
    ComposedEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    GroupEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    PureDPEvent,
    RandomizedResponseEvent,
    SelfComposedEvent,
    ZCDPEvent,
)
from dpkit.guarantees import ZCDP, ApproxDP, NeighbourRelation, PureDP

ACCOUNTANTS = [BasicAccountant, AdvancedAccountant, OptimalAccountant]


def _state(accountant: object) -> dict[str, object]:
    return copy.deepcopy(vars(accountant))


# -- conformance (every accountant here) ------------------------------------------------------


@pytest.mark.parametrize("factory", ACCOUNTANTS)
class TestConformance:
    def test_zero_for_no_events(self, factory: type) -> None:
        accountant = factory()
        assert accountant.epsilon(1e-6) == 0.0
        assert accountant.epsilon(0.0) == 0.0
        assert accountant.delta(0.5) == 0.0

    @pytest.mark.parametrize(
        "event",
        [
            GaussianEvent(1.0),
            ZCDPEvent(0.1),
            PoissonSampledEvent(0.1, LaplaceEvent(1.0)),
            PureDPEvent(0.5, NeighbourRelation.REPLACE_ONE),
            GroupEvent(GaussianEvent(1.0), 2),
            ComposedEvent((PureDPEvent(0.5), GaussianEvent(1.0))),
            SelfComposedEvent(GaussianEvent(1.0), 3),
        ],
    )
    def test_unknown_events_refused_without_state_change(self, factory: type, event: object) -> None:
        accountant = factory().compose(PureDPEvent(0.5))
        before = _state(accountant)
        assert not accountant.supports(event)
        with pytest.raises(UnsupportedEventError):
            accountant.compose(event)
        assert _state(accountant) == before

    def test_monotone_in_count(self, factory: type) -> None:
        values = [factory().compose(ApproxDPEvent(0.2, 1e-8), count=k).epsilon(1e-5) for k in (1, 2, 5, 20, 100)]
        assert values == sorted(values)
        deltas = [factory().compose(ApproxDPEvent(0.2, 1e-8), count=k).delta(1.0) for k in (1, 2, 5, 20, 100)]
        assert deltas == sorted(deltas)

    @pytest.mark.parametrize("count", [0, -1, 1.5, True])
    def test_bad_count(self, factory: type, count: object) -> None:
        accountant = factory()
        with pytest.raises(InvalidParameterError):
            accountant.compose(PureDPEvent(0.1), count=count)
        assert accountant.history == ()

    @pytest.mark.parametrize("delta", [-0.1, 1.0, 1.5, math.nan, "0.1"])
    def test_bad_delta(self, factory: type, delta: object) -> None:
        with pytest.raises(InvalidParameterError):
            factory().compose(PureDPEvent(0.1)).epsilon(delta)

    @pytest.mark.parametrize("epsilon", [-0.1, math.nan, math.inf])
    def test_bad_epsilon(self, factory: type, epsilon: float) -> None:
        with pytest.raises(InvalidParameterError):
            factory().compose(PureDPEvent(0.1)).delta(epsilon)

    def test_certified(self, factory: type[PrivacyAccountant]) -> None:
        assert factory.certified is True

    def test_never_above_basic(self, factory: type) -> None:
        accountant = factory().compose(ApproxDPEvent(0.3, 1e-7), count=40)
        assert accountant.epsilon(4e-6) <= 12.0 + 1e-12

    def test_epsilon_delta_consistent(self, factory: type) -> None:
        accountant = factory().compose(ApproxDPEvent(0.05, 1e-9), count=400)
        eps = accountant.epsilon(1e-5)
        assert accountant.delta(eps) <= 1e-5 * (1 + 1e-6)


# -- events with a fixed (epsilon, delta) -------------------------------------------------------


def test_fixed_privacy_of_each_event() -> None:
    add_remove = NeighbourRelation.ADD_REMOVE
    assert fixed_privacy(PureDPEvent(0.3), add_remove) == (Fraction(3, 10), 0)
    assert fixed_privacy(ApproxDPEvent(0.3, 1e-6), add_remove) == (Fraction(3, 10), Fraction(1, 10**6))
    assert fixed_privacy(LaplaceEvent(3.0), add_remove) == (Fraction(1, 3), 0)
    assert fixed_privacy(DiscreteLaplaceEvent(4.0, sensitivity=2), add_remove) == (Fraction(1, 2), 0)
    replace = NeighbourRelation.REPLACE_ONE
    assert fixed_privacy(RandomizedResponseEvent(1.5, k=4), replace) == (Fraction(3, 2), 0)
    assert fixed_privacy(RandomizedResponseEvent(1.5), add_remove) is None
    assert fixed_privacy(GaussianEvent(1.0), add_remove) is None


def test_group_privacy() -> None:
    # (eps, delta) gives (K eps, delta sum_{i<K} e^{i eps}) for groups of K (within seed 000's K e^{K eps} delta).
    relation = NeighbourRelation.ADD_REMOVE
    assert fixed_privacy(GroupEvent(PureDPEvent(0.25), 4), relation) == (Fraction(1), 0)
    eps, dlt = fixed_privacy(GroupEvent(ApproxDPEvent(0.5, 1e-6), 3), relation)  # type: ignore[misc]
    assert eps == Fraction(3, 2)
    tight = (1 + math.exp(0.5) + math.exp(1.0)) * 1e-6
    assert float(dlt) >= tight * (1 - 1e-15)
    assert float(dlt) == pytest.approx(tight, rel=1e-12)
    # A group of a composite: compose first, then group.
    nested = GroupEvent(SelfComposedEvent(LaplaceEvent(10.0), 5), 2)
    assert fixed_privacy(nested, relation) == (Fraction(1), 0)
    # delta >= 1 after grouping: no guarantee, so refused.
    assert fixed_privacy(GroupEvent(ApproxDPEvent(2.0, 0.1), 5), relation) is None


# -- basic composition ------------------------------------------------------------------------


def test_basic_exact_arithmetic() -> None:
    accountant = BasicAccountant()
    for _ in range(10):
        accountant.compose(PureDPEvent(0.1))
    assert accountant.epsilon_exact == 1
    assert accountant.guarantee == PureDP(1.0)
    assert accountant.epsilon(0.0) == 1.0


def test_basic_adds_epsilons_and_deltas() -> None:
    accountant = BasicAccountant()
    accountant.compose(LaplaceEvent(2.0)).compose(ApproxDPEvent(0.25, 1e-6), count=3)
    accountant.compose(ComposedEvent((PureDPEvent(0.1), DiscreteLaplaceEvent(10.0))))
    assert accountant.epsilon_exact == Fraction(1, 2) + Fraction(3, 4) + Fraction(1, 10) + Fraction(1, 10)
    assert accountant.delta_exact == Fraction(3, 10**6)
    assert accountant.guarantee == ApproxDP(1.45, 3e-6)
    assert accountant.epsilon(3e-6) == 1.45
    assert accountant.epsilon(1e-3) == 1.45
    assert accountant.epsilon(2.9e-6) == math.inf
    assert accountant.delta(1.45) == 3e-6
    assert accountant.delta(1.44) == 1.0


def test_basic_empty_guarantee_and_delta_overflow() -> None:
    assert BasicAccountant().guarantee == ApproxDP(0.0, 0.0)
    full = BasicAccountant()
    full.compose(ApproxDPEvent(0.1, 0.4), count=3)
    assert full.delta(5.0) == 1.0
    with pytest.raises(InvalidParameterError):
        _ = full.guarantee


def test_basic_replace_one_relation() -> None:
    accountant = BasicAccountant(NeighbourRelation.REPLACE_ONE)
    accountant.compose(RandomizedResponseEvent(0.5), count=4)
    assert accountant.guarantee == PureDP(2.0, NeighbourRelation.REPLACE_ONE)
    with pytest.raises(UnsupportedEventError):
        accountant.compose(PureDPEvent(0.5))


# -- parallel composition -----------------------------------------------------------------------


def test_parallel_composition() -> None:
    assert parallel_composition([PureDP(0.1), PureDP(0.3), PureDP(0.2)]) == PureDP(0.3)
    assert parallel_composition([ApproxDP(0.1, 1e-5), PureDP(0.3)]) == ApproxDP(0.3, 1e-5)
    assert parallel_composition(iter([ZCDP(0.1), ZCDP(0.5)])) == ZCDP(0.5)
    with pytest.raises(InvalidParameterError):
        parallel_composition([])
    with pytest.raises(InvalidParameterError):
        parallel_composition([ZCDP(0.1), PureDP(1.0)])
    with pytest.raises(InvalidParameterError):
        parallel_composition([PureDP(1.0), PureDP(1.0, NeighbourRelation.REPLACE_ONE)])
    with pytest.raises(InvalidParameterError):
        parallel_composition([1.0])  # type: ignore[list-item]


# -- advanced composition -----------------------------------------------------------------------


def _drv(eps: float, k: int, slack: float) -> float:
    return math.sqrt(2 * k * math.log(1 / slack)) * eps + k * eps * math.expm1(eps)


def test_advanced_homogeneous_formula() -> None:
    accountant = AdvancedAccountant().compose(ApproxDPEvent(0.01, 1e-9), count=5000)
    # delta' = 1e-5 - 5000 * 1e-9 = 5e-6.
    expected = _drv(0.01, 5000, 5e-6)
    assert accountant.epsilon(1e-5) == pytest.approx(expected, rel=1e-12)
    assert accountant.epsilon(1e-5) >= expected


def test_advanced_heterogeneous_formula() -> None:
    accountant = AdvancedAccountant().compose(PureDPEvent(0.01), count=3000).compose(LaplaceEvent(50.0), count=2000)
    square_sum = 3000 * 0.01**2 + 2000 * 0.02**2
    drift = 3000 * 0.01 * math.expm1(0.01) + 2000 * 0.02 * math.expm1(0.02)
    expected = math.sqrt(2 * math.log(1e6) * square_sum) + drift
    assert accountant.epsilon(1e-6) == pytest.approx(expected, rel=1e-12)


def test_advanced_vs_basic() -> None:
    many_small = AdvancedAccountant().compose(PureDPEvent(0.01), count=10_000)
    assert many_small.epsilon(1e-6) < 0.1 * 100  # advanced wins by far
    few_large = AdvancedAccountant().compose(PureDPEvent(1.0), count=3)
    assert few_large.epsilon(1e-6) == 3.0  # basic is smaller, and is returned
    # At delta exactly sum delta_i only basic composition applies; below it nothing does.
    tight = AdvancedAccountant().compose(ApproxDPEvent(0.01, 1e-7), count=100)
    assert tight.epsilon(1e-5) == pytest.approx(1.0)
    assert tight.epsilon(9e-6) == math.inf


def test_advanced_delta_inverts_epsilon() -> None:
    accountant = AdvancedAccountant().compose(ApproxDPEvent(0.02, 1e-10), count=2000)
    for target in (1e-6, 1e-5, 1e-4):
        eps = accountant.epsilon(target)
        assert accountant.delta(eps) == pytest.approx(target, rel=1e-6)
        assert accountant.delta(eps * 1.01) < target


def test_advanced_guarantee_uses_slack() -> None:
    accountant = AdvancedAccountant(delta_slack=1e-6)
    accountant.compose(PureDPEvent(0.01), count=10_000)
    guarantee = accountant.guarantee
    assert guarantee.delta == pytest.approx(1e-6)
    assert guarantee.epsilon == pytest.approx(accountant.epsilon(1e-6))
    with pytest.raises(InvalidParameterError):
        _ = AdvancedAccountant().guarantee
    with pytest.raises(InvalidParameterError):
        AdvancedAccountant(delta_slack=0.0)


# -- optimal composition (Kairouz, Oh & Viswanath 2015) -----------------------------------------


def _brute_force_delta(p: Fraction, delta: Fraction, k: int, threshold: Fraction) -> Fraction:
    """Hockey-stick sum over every outcome of k copies of KOV's four-outcome pair, exactly."""
    q = 1 - p
    good = 1 - delta
    first = (delta, good * p, good * q, Fraction(0))
    second = (Fraction(0), good * q, good * p, delta)
    total = Fraction(0)
    outcomes = (1, 2) if delta == 0 else (0, 1, 2, 3)
    for outcome in itertools.product(outcomes, repeat=k):
        mass_p = math.prod(first[o] for o in outcome)
        mass_q = math.prod(second[o] for o in outcome)
        total += max(Fraction(0), mass_p - threshold * mass_q)
    return total


@pytest.mark.parametrize("k", [1, 2, 5, 8, 12])
@pytest.mark.parametrize("threshold", [1, 2, 3, 4, 7, 16])
def test_optimal_pure_matches_brute_force(k: int, threshold: int) -> None:
    # eps = ln 2 makes p = 2/3 and e^t rational, so the brute force is exact.
    accountant = OptimalAccountant().compose(PureDPEvent(math.log(2)), count=k)
    exact = _brute_force_delta(Fraction(2, 3), Fraction(0), k, Fraction(threshold))
    computed = accountant.delta(math.log(threshold))
    assert computed >= float(exact) * (1 - 1e-12)
    assert computed == pytest.approx(float(exact), rel=1e-8, abs=1e-300)


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("threshold", [1, 2, 5])
def test_optimal_approx_matches_brute_force(k: int, threshold: int) -> None:
    accountant = OptimalAccountant().compose(ApproxDPEvent(math.log(2), 0.01), count=k)
    exact = _brute_force_delta(Fraction(2, 3), Fraction(1, 100), k, Fraction(threshold))
    assert accountant.delta(math.log(threshold)) == pytest.approx(float(exact), rel=1e-8)


@pytest.mark.parametrize("k", [4, 9, 30])
def test_optimal_matches_kov_grid_formula(k: int) -> None:
    # KOV Thm 3.3: ((k - 2i) eps, 1 - (1 - delta)^k (1 - delta_i)) for i = 0..floor(k/2).
    eps, delta = 0.3, 1e-4
    accountant = OptimalAccountant().compose(ApproxDPEvent(eps, delta), count=k)
    for i in range(k // 2 + 1):
        delta_i = (
            sum(math.comb(k, ell) * (math.exp((k - ell) * eps) - math.exp((k - 2 * i + ell) * eps)) for ell in range(i))
            / (1 + math.exp(eps)) ** k
        )
        expected = 1 - (1 - delta) ** k * (1 - delta_i)
        assert accountant.delta((k - 2 * i) * eps) == pytest.approx(expected, rel=1e-7)


def test_optimal_below_advanced_and_basic() -> None:
    for eps, k in ((0.01, 10_000), (0.1, 500), (0.5, 20)):
        optimal = OptimalAccountant().compose(PureDPEvent(eps), count=k).epsilon(1e-6)
        advanced = AdvancedAccountant().compose(PureDPEvent(eps), count=k).epsilon(1e-6)
        assert optimal <= advanced <= eps * k + 1e-12


def test_optimal_large_count() -> None:
    # (speed belongs in benchmarks: bench/accounting.py)
    accountant = OptimalAccountant().compose(ApproxDPEvent(0.01, 1e-10), count=20_000)
    eps = accountant.epsilon(1e-5)
    assert 0 < eps < AdvancedAccountant().compose(ApproxDPEvent(0.01, 1e-10), count=20_000).epsilon(1e-5)
    assert accountant.delta(eps) <= 1e-5


def test_optimal_pure_at_delta_zero_is_basic() -> None:
    accountant = OptimalAccountant().compose(PureDPEvent(0.2), count=7)
    assert accountant.epsilon(0.0) == pytest.approx(1.4)
    assert accountant.delta(1.4) == 0.0
    assert accountant.delta(1.5) == 0.0
    assert accountant.delta(1.3) > 0.0


def test_optimal_delta_floor() -> None:
    # Below 1 - (1 - delta)^k no epsilon works.
    accountant = OptimalAccountant().compose(ApproxDPEvent(0.1, 1e-3), count=10)
    assert accountant.epsilon(5e-3) == math.inf
    assert accountant.epsilon(1e-2) <= 1.0 + 1e-12


def test_optimal_refuses_other_pairs_unchanged() -> None:
    accountant = OptimalAccountant()
    accountant.compose(LaplaceEvent(10.0), count=5)
    assert accountant.supports(PureDPEvent(0.1))  # same pair as Laplace(10)
    before = _state(accountant)
    for event in (PureDPEvent(0.2), ApproxDPEvent(0.1, 1e-9), ComposedEvent((PureDPEvent(0.1), PureDPEvent(0.2)))):
        with pytest.raises(UnsupportedEventError):
            accountant.compose(event)
        assert _state(accountant) == before
    accountant.compose(ComposedEvent((PureDPEvent(0.1), LaplaceEvent(10.0))))
    assert accountant.count == 7
    assert accountant.pair == (0.1, 0.0)
    assert accountant.guarantee == PureDP(0.7)


def test_optimal_refuses_mixed_composite_on_empty_state() -> None:
    accountant = OptimalAccountant()
    with pytest.raises(UnsupportedEventError):
        accountant.compose(ComposedEvent((PureDPEvent(0.1), PureDPEvent(0.2))))
    assert accountant.history == () and accountant.pair is None


def test_optimal_composition_delta_function() -> None:
    # One eps-DP release: delta(t) = (e^eps - e^t) / (1 + e^eps) for t < eps.
    eps, t = 1.0, 0.4
    assert optimal_composition_delta(eps, 0.0, 1, t) == pytest.approx((math.e - math.exp(t)) / (1 + math.e))
    assert optimal_composition_delta(eps, 0.0, 1, 1.0) == 0.0
