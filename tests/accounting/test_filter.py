"""Privacy filter and odometer: refuse before spending, exact budgets, no state change on refusal."""

from __future__ import annotations

import math

import pytest

from dpkit._errors import BudgetExceededError, InvalidParameterError, UnsupportedEventError
from dpkit.accounting._composition import AdvancedAccountant, BasicAccountant, OptimalAccountant
from dpkit.accounting._filter import PrivacyFilter, PrivacyOdometer
from dpkit.events import ApproxDPEvent, GaussianEvent, LaplaceEvent, PureDPEvent
from dpkit.guarantees import ZCDP, ApproxDP, NeighbourRelation, PureDP


def test_ten_tenths_exactly_exhaust_a_unit_budget() -> None:
    budget = PrivacyFilter(PureDP(1.0))
    for _ in range(10):
        budget.spend(PureDPEvent(0.1))
    assert budget.spent == PureDP(1.0)
    assert budget.exhausted
    assert budget.remaining == ApproxDP(0.0, 0.0)
    history = budget.accountant.history
    with pytest.raises(BudgetExceededError) as refused:
        budget.spend(PureDPEvent(0.1))
    assert refused.value.requested == PureDP(0.1)
    assert refused.value.remaining == ApproxDP(0.0, 0.0)
    assert budget.accountant.history == history
    assert budget.spent == PureDP(1.0)
    assert not budget.try_spend(PureDPEvent(0.1))


def test_refusal_changes_nothing_and_smaller_spend_still_fits() -> None:
    budget = PrivacyFilter(PureDP(1.0))
    budget.spend(LaplaceEvent(2.0))  # 0.5
    assert budget.remaining == PureDP(0.5)
    assert not budget.try_spend(PureDPEvent(0.2), count=3)
    assert budget.remaining == PureDP(0.5)
    assert not budget.can_spend(PureDPEvent(0.6))
    assert budget.can_spend(PureDPEvent(0.5))
    assert budget.remaining == PureDP(0.5)  # a dry run records nothing
    assert budget.try_spend(PureDPEvent(0.25), count=2)
    assert budget.exhausted


def test_approx_budget() -> None:
    budget = PrivacyFilter(ApproxDP(1.0, 1e-5))
    budget.spend(ApproxDPEvent(0.5, 4e-6))
    assert budget.remaining == ApproxDP(0.5, 6e-6)
    with pytest.raises(BudgetExceededError):
        budget.spend(ApproxDPEvent(0.1, 7e-6))  # epsilon fits, delta does not
    assert budget.spent == ApproxDP(0.5, 4e-6)
    budget.spend(PureDPEvent(0.5))
    assert budget.remaining == ApproxDP(0.0, 6e-6)
    # A pure budget refuses any delta.
    pure = PrivacyFilter(PureDP(5.0))
    assert not pure.try_spend(ApproxDPEvent(0.1, 1e-12))


def test_unsupported_event_raises_and_changes_nothing() -> None:
    budget = PrivacyFilter(PureDP(1.0))
    budget.spend(PureDPEvent(0.3))
    with pytest.raises(UnsupportedEventError):
        budget.spend(GaussianEvent(1.0))
    with pytest.raises(UnsupportedEventError):
        budget.try_spend(GaussianEvent(1.0))
    assert budget.spent == PureDP(0.3)


def test_filter_with_another_accountant() -> None:
    budget = PrivacyFilter(ApproxDP(1.0, 1e-6), OptimalAccountant)
    spent = 0
    while budget.try_spend(PureDPEvent(0.01), count=25):
        spent += 25
    # Basic composition allows 100 spends; optimal composition allows many more.
    assert spent > 150
    accountant = budget.accountant
    assert accountant.epsilon(1e-6) <= 1.0
    assert accountant.compose(PureDPEvent(0.01), count=25).epsilon(1e-6) > 1.0
    assert budget.spent.epsilon <= 1.0
    advanced = PrivacyFilter(ApproxDP(1.0, 1e-6), AdvancedAccountant)
    advanced.spend(PureDPEvent(0.01), count=100)
    assert advanced.spent.delta == 1e-6


def test_bad_construction() -> None:
    with pytest.raises(InvalidParameterError):
        PrivacyFilter(ZCDP(0.5))
    with pytest.raises(InvalidParameterError):
        PrivacyFilter(1.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        PrivacyFilter(PureDP(1.0), lambda: BasicAccountant(NeighbourRelation.REPLACE_ONE))
    with pytest.raises(InvalidParameterError):
        PrivacyFilter(PureDP(1.0), lambda: BasicAccountant().compose(PureDPEvent(0.1)))
    with pytest.raises(InvalidParameterError):
        PrivacyFilter(PureDP(1.0), lambda: "not an accountant")  # type: ignore[arg-type, return-value]
    with pytest.raises(InvalidParameterError):
        PrivacyFilter(PureDP(1.0)).spend(PureDPEvent(0.1), count=0)


def test_filter_accountant_is_a_copy() -> None:
    budget = PrivacyFilter(PureDP(1.0))
    budget.accountant.compose(PureDPEvent(0.9))
    assert budget.spent == ApproxDP(0.0, 0.0)


def test_odometer() -> None:
    odometer = PrivacyOdometer()
    assert odometer.current(0.0) == 0.0
    odometer.record(PureDPEvent(0.1), count=10)
    odometer.record(ApproxDPEvent(0.5, 1e-6))
    assert odometer.current(1e-6) == 1.5
    assert odometer.current(0.0) == math.inf
    assert odometer.current_delta(1.5) == 1e-6
    with pytest.raises(UnsupportedEventError):
        odometer.record(GaussianEvent(1.0))
    assert len(odometer.history) == 2
    with pytest.raises(InvalidParameterError):
        odometer.current(1.0)
    with pytest.raises(InvalidParameterError):
        PrivacyOdometer("basic")  # type: ignore[arg-type]
