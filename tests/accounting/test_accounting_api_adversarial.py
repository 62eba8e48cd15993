"""Adversarial use of the public accounting, guarantee and event API.

Each test pins a defect found by probing dpkit.accounting, dpkit.guarantees and dpkit.events
the way a demanding dp_accounting / OpenDP user would: odd inputs must be refused with a typed
error, state must not be shared or mutable from outside, and no answer may be silently wrong.
"""

from __future__ import annotations

import copy
import math
import pickle
from collections.abc import Callable
from fractions import Fraction

import pytest

from dpkit._errors import BudgetExceededError, InvalidParameterError, UnsupportedEventError
from dpkit.accounting import (
    AdvancedAccountant,
    BasicAccountant,
    GDPAccountant,
    OptimalAccountant,
    PLDAccountant,
    PrivacyAccountant,
    PrivacyFilter,
    RDPAccountant,
    SaddlePointAccountant,
    ZCDPAccountant,
    gaussian_delta,
)
from dpkit.events import ComposedEvent, GaussianEvent, LaplaceEvent, PrivacyEvent, PureDPEvent
from dpkit.guarantees import ZCDP, ApproxDP, ApproxZCDP, PureDP

ACCOUNTANTS: list[tuple[Callable[[], PrivacyAccountant], PrivacyEvent]] = [
    (BasicAccountant, LaplaceEvent(2.0)),
    (AdvancedAccountant, LaplaceEvent(2.0)),
    (OptimalAccountant, LaplaceEvent(2.0)),
    (RDPAccountant, GaussianEvent(2.0)),
    (ZCDPAccountant, GaussianEvent(2.0)),
    (PLDAccountant, GaussianEvent(2.0)),
    (GDPAccountant, GaussianEvent(2.0)),
    (SaddlePointAccountant, GaussianEvent(2.0)),
]
IDS = [factory.__name__ for factory, _ in ACCOUNTANTS]  # type: ignore[attr-defined]


# -- events are immutable values -------------------------------------------------------------------


def test_composed_event_copies_a_list_into_a_tuple() -> None:
    # Before: ComposedEvent kept the caller's list, so appending to it after composing rewrote
    # the accountant's history (and the "frozen" event was unhashable).
    parts: list[PrivacyEvent] = [LaplaceEvent(1.0)]
    event = ComposedEvent(parts)  # type: ignore[arg-type]
    accountant = BasicAccountant().compose(event)
    parts.append(LaplaceEvent(0.001))
    assert event.events == (LaplaceEvent(1.0),)
    assert accountant.history == ((ComposedEvent((LaplaceEvent(1.0),)), 1),)
    assert event == ComposedEvent((LaplaceEvent(1.0),))
    assert hash(event) == hash(ComposedEvent((LaplaceEvent(1.0),)))


# -- copies of accountants do not share state --------------------------------------------------------


@pytest.mark.parametrize(("factory", "event"), ACCOUNTANTS, ids=IDS)
def test_copy_of_an_accountant_is_independent(factory: Callable[[], PrivacyAccountant], event: PrivacyEvent) -> None:
    # Before: copy.copy shared the history list (and, for PLD and saddle point, the composed
    # state), so composing into the copy changed the original's history but not its answers.
    original = factory().compose(event)
    before = (original.history, original.epsilon(1e-5))
    duplicate = copy.copy(original)
    duplicate.compose(event, 3)
    assert (original.history, original.epsilon(1e-5)) == before
    assert len(duplicate.history) == 2
    assert duplicate.epsilon(1e-5) > before[1]


# -- queries at the edges answer with numbers or typed errors ----------------------------------------


def test_delta_at_a_huge_epsilon_is_a_number() -> None:
    # Before: ZCDPAccountant.delta(1e308) raised scipy's ValueError ("bounds must be finite") and
    # GDPAccountant.delta(1e308) mpmath's OverflowError.
    for factory in (ZCDPAccountant, GDPAccountant, RDPAccountant):
        delta = factory().compose(GaussianEvent(2.0)).delta(1e308)
        assert 0.0 <= delta <= 1e-300
    # The pessimistic PLD keeps its truncated tail mass: a valid, looser bound.
    assert 0.0 <= PLDAccountant().compose(GaussianEvent(2.0)).delta(1e308) <= 1e-6
    assert gaussian_delta(1.0, 1e308) <= 1e-300


def test_optimal_accountant_refuses_a_count_it_cannot_evaluate() -> None:
    # Before: compose(count=10**30) was accepted and every later query raised numpy's ValueError.
    accountant = OptimalAccountant().compose(LaplaceEvent(2.0))
    with pytest.raises(InvalidParameterError, match="count"):
        accountant.compose(LaplaceEvent(2.0), 10**30)
    assert accountant.count == 1
    assert accountant.epsilon(0.0) == 0.5


@pytest.mark.parametrize("multiplier", [1e-200, 1e-320])
def test_zcdp_accountant_refuses_an_event_with_infinite_rho(multiplier: float) -> None:
    # Before: rho = 0.5 / multiplier**2 raised ZeroDivisionError out of compose().
    accountant = ZCDPAccountant()
    assert not accountant.supports(LaplaceEvent(multiplier))
    with pytest.raises(UnsupportedEventError):
        accountant.compose(LaplaceEvent(multiplier))
    with pytest.raises(InvalidParameterError, match="noise_multiplier"):  # below GaussianEvent's range
        GaussianEvent(multiplier)
    assert accountant.history == ()


def test_basic_accountant_reports_an_epsilon_beyond_the_float_range_as_inf() -> None:
    # Before: epsilon(0) raised OverflowError converting the exact 1e320 to a float.
    accountant = BasicAccountant().compose(LaplaceEvent(1e-320))
    assert accountant.epsilon(0.0) == math.inf
    assert accountant.delta(1.0) == 1.0


# -- privacy filters -------------------------------------------------------------------------------


def test_filter_refuses_an_unbounded_spend_as_over_budget() -> None:
    # Before: with a pure budget and the RDP accountant, a Gaussian (infinite epsilon at delta 0)
    # made try_spend raise InvalidParameterError("epsilon: got inf") instead of answering False.
    budget = PrivacyFilter(PureDP(1.0), RDPAccountant)
    assert not budget.try_spend(GaussianEvent(10.0))
    with pytest.raises(BudgetExceededError):
        budget.spend(GaussianEvent(10.0))
    assert budget.accountant.history == ()


def test_filter_survives_pickle() -> None:
    budget = PrivacyFilter(PureDP(1.0))
    budget.spend(PureDPEvent(0.25))
    restored = pickle.loads(pickle.dumps(budget))
    assert restored.spent == PureDP(0.25)
    restored.spend(PureDPEvent(0.75))
    assert restored.exhausted and not budget.exhausted


# -- guarantees ------------------------------------------------------------------------------------

GUARANTEES = [PureDP(1.0), ApproxDP(1.0, 1e-6), ZCDP(0.5), ApproxZCDP(0.5, 1e-6)]


@pytest.mark.parametrize("guarantee", GUARANTEES, ids=repr)
@pytest.mark.parametrize("other", [1, 0.5, "x", None, Fraction(1, 2)], ids=repr)
def test_guarantee_arithmetic_with_a_non_guarantee_is_a_type_error(guarantee: PureDP, other: object) -> None:
    # Before: PureDP(1.0) + 1 raised AttributeError ("'int' object has no attribute 'neighbours'").
    with pytest.raises(TypeError):
        guarantee + other  # type: ignore[operator]
    with pytest.raises(TypeError):
        other + guarantee  # type: ignore[operator]


@pytest.mark.parametrize("guarantee", GUARANTEES, ids=repr)
def test_within_a_non_guarantee_is_refused_by_name(guarantee: PureDP) -> None:
    with pytest.raises(InvalidParameterError, match="budget"):
        guarantee.within("epsilon=1")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="budget"):
        guarantee.within(None)  # type: ignore[arg-type]


def test_saddle_point_accountant_pickles_and_deep_copies() -> None:
    """Its cumulant functions were closures ("Can't pickle local object"); now bound partials."""
    import copy
    import pickle

    from dpkit.accounting import LaplaceEvent, PoissonSampledEvent, SaddlePointAccountant

    accountant = SaddlePointAccountant().compose(GaussianEvent(1.0), 3)
    accountant.compose(LaplaceEvent(2.0)).compose(PoissonSampledEvent(0.1, GaussianEvent(1.0)), 5)
    for clone in (pickle.loads(pickle.dumps(accountant)), copy.deepcopy(accountant)):
        assert clone.epsilon(1e-5) == accountant.epsilon(1e-5)


def test_advanced_and_saddle_point_survive_extreme_events() -> None:
    """AdvancedAccountant overflowed on e^eps for eps = 1e300 (basic composition answers); the
    saddle-point accountant leaked scipy's 'f(a) and f(b) must have different signs' for 1e12 Laplace
    steps (epsilon below the mean loss: delta is 1 there)."""
    from dpkit.accounting import AdvancedAccountant, LaplaceEvent, SaddlePointAccountant

    assert AdvancedAccountant().compose(LaplaceEvent(1e-300)).epsilon(1e-6) == pytest.approx(1e300)
    huge = SaddlePointAccountant().compose(LaplaceEvent(1.0), 10**12)
    assert huge.delta(1.0) == 1.0
    assert huge.epsilon(1e-5) == math.inf
