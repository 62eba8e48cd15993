"""Guarantees: validation, exact budget arithmetic, conversions, group privacy."""

import math
from fractions import Fraction

import pytest

from dpkit import ZCDP, ApproxDP, DPError, InvalidParameterError, NeighbourRelation, PureDP
from dpkit.guarantees import compose

BAD_EPSILONS = [0, -1, float("nan"), float("inf"), -float("inf"), "1", True, None]
BAD_DELTAS = [-0.1, float("nan"), 1, 1.5, "0.1", None]


@pytest.mark.parametrize("epsilon", BAD_EPSILONS)
def test_pure_dp_refuses_bad_epsilon(epsilon):
    with pytest.raises(InvalidParameterError) as info:
        PureDP(epsilon)
    assert "epsilon" in str(info.value) and "got" in str(info.value)
    assert isinstance(info.value, DPError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("delta", BAD_DELTAS)
def test_approx_dp_refuses_bad_delta(delta):
    with pytest.raises(InvalidParameterError, match="delta"):
        ApproxDP(1.0, delta)


@pytest.mark.parametrize("rho", [0, -1, float("nan"), float("inf"), "1", True])
def test_zcdp_refuses_bad_rho(rho):
    with pytest.raises(InvalidParameterError, match="rho"):
        ZCDP(rho)


def test_guarantees_are_frozen():
    guarantee = PureDP(1.0)
    with pytest.raises(AttributeError):
        guarantee.epsilon = 2.0  # type: ignore[misc]


def test_ten_tenths_exhaust_one_exactly():
    spent = PureDP(0.1)
    for _ in range(9):
        spent = spent + PureDP(0.1)
    assert spent == PureDP(1.0)
    assert spent.epsilon_exact == 1
    assert spent.within(PureDP(1.0))
    assert not (spent + PureDP(0.1)).within(PureDP(1.0))
    assert PureDP(0.1) * 10 == PureDP(1)


def test_approx_budget_arithmetic_is_exact():
    total = ApproxDP(0.1, 1e-7) * 10
    assert total.epsilon_exact == 1 and total.delta_exact == Fraction(1, 10**6)
    assert total.within(ApproxDP(1.0, 1e-6))


def test_mixed_composition_gives_approx_dp():
    total = compose(PureDP(0.5), ApproxDP(0.25, 1e-6))
    assert isinstance(total, ApproxDP) and total.epsilon == 0.75 and total.delta_exact == Fraction(1, 10**6)


def test_zcdp_composes_only_with_zcdp():
    assert ZCDP(0.1) + ZCDP(0.2) == ZCDP(0.3)
    with pytest.raises(InvalidParameterError):
        compose(ZCDP(0.1), PureDP(1.0))


def test_relations_must_match():
    with pytest.raises(InvalidParameterError, match="neighbours"):
        compose(PureDP(1.0), PureDP(1.0, NeighbourRelation.REPLACE_ONE))


def test_group_privacy_matches_seed_000():
    # Chaining the definition along K neighbours: (eps, delta) -> (K eps, delta sum_{i<K} e^{i eps}),
    # within seed 000's Prop. (Group-DP) bound (K eps, K e^{K eps} delta); a group of one is itself.
    grouped = ApproxDP(0.5, 1e-6).group(3)
    assert grouped.epsilon == 1.5
    tight = (1 + math.exp(0.5) + math.exp(1.0)) * 1e-6  # 5.367...e-6 (was 3 e^1.5 1e-6 = 1.34e-5)
    assert tight * (1 - 1e-15) <= grouped.delta < tight * (1 + 1e-12)
    assert grouped.delta < 3 * math.exp(1.5) * 1e-6
    assert ApproxDP(0.5, 1e-6).group(1) == ApproxDP(0.5, 1e-6)
    replaced = ApproxDP(1.0, 1e-6).under(NeighbourRelation.REPLACE_ONE)  # a removal then an addition
    assert replaced.epsilon == 2.0 and replaced.delta == pytest.approx((1 + math.e) * 1e-6, rel=1e-12)
    assert PureDP(0.5).group(4) == PureDP(2.0)
    assert ZCDP(0.1).group(3).rho == pytest.approx(0.9)


def test_group_privacy_refuses_delta_at_one():
    with pytest.raises(InvalidParameterError, match="size"):
        ApproxDP(2.0, 0.01).group(10)


def test_pure_to_zcdp_to_approx():
    rho = PureDP(1.0).to_zcdp()
    assert rho == ZCDP(0.5)
    approx = rho.to_approx(1e-6)
    classic = 0.5 + 2 * math.sqrt(0.5 * math.log(1e6))
    # The CKS conversion is never worse than Bun-Steinke's and stays above the trivial bound rho.
    assert 0.5 < approx.epsilon <= classic
    # Reference: the minimizing alpha for rho = 0.5, delta = 1e-6 computed with mpmath.
    import mpmath

    mpmath.mp.dps = 40
    f = lambda a: a * 0.5 + (mpmath.log(1e6) + (a - 1) * mpmath.log(1 - 1 / a) - mpmath.log(a)) / (a - 1)  # noqa: E731
    best = mpmath.findroot(lambda a: mpmath.diff(f, a), 5)
    assert approx.epsilon >= float(f(best))
    assert approx.epsilon <= float(f(best)) * (1 + 1e-6)


def test_replace_one_from_add_remove_is_group_of_two():
    assert PureDP(1.0).under(NeighbourRelation.REPLACE_ONE) == PureDP(2.0, NeighbourRelation.REPLACE_ONE)
    with pytest.raises(InvalidParameterError):
        PureDP(1.0, NeighbourRelation.REPLACE_ONE).under(NeighbourRelation.ADD_REMOVE)


def test_zcdp_to_approx_refuses_bad_delta():
    with pytest.raises(InvalidParameterError, match="delta"):
        ZCDP(1.0).to_approx(0)
