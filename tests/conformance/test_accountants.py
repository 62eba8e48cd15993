"""The conformance suite every accountant passes (STYLE.md: one suite, no half-implemented interface).

For each accountant: zero with no events; an unsupported event is refused with
UnsupportedEventError and leaves the state exactly as it was; epsilon(delta) is non-decreasing in
the number of events; bad counts and bad queries are typed errors; an event under another
neighbour relation is refused.
"""

from __future__ import annotations

import pytest

from dpkit import InvalidParameterError, UnsupportedEventError
from dpkit.accounting import (
    AdvancedAccountant,
    ApproxDPEvent,
    BasicAccountant,
    GaussianEvent,
    GDPAccountant,
    OptimalAccountant,
    PLDAccountant,
    PoissonSampledEvent,
    PureDPEvent,
    RDPAccountant,
    SaddlePointAccountant,
    ZCDPAccountant,
    ZCDPEvent,
)
from dpkit.guarantees import NeighbourRelation

# (factory, a supported event, an unsupported event)
CASES = {
    "basic": (BasicAccountant, PureDPEvent(0.5), GaussianEvent(1.0)),
    "advanced": (AdvancedAccountant, PureDPEvent(0.5), GaussianEvent(1.0)),
    "optimal": (OptimalAccountant, PureDPEvent(0.5), GaussianEvent(1.0)),
    "rdp": (RDPAccountant, GaussianEvent(2.0), ApproxDPEvent(1.0, 1e-6)),
    "zcdp": (ZCDPAccountant, GaussianEvent(2.0), PoissonSampledEvent(0.1, GaussianEvent(1.0))),
    "pld": (PLDAccountant, GaussianEvent(2.0), ZCDPEvent(0.5)),
    "gdp": (GDPAccountant, GaussianEvent(2.0), PureDPEvent(1.0)),
    "saddle_point": (SaddlePointAccountant, GaussianEvent(2.0), PureDPEvent(1.0)),
}


@pytest.fixture(params=sorted(CASES), ids=sorted(CASES))
def case(request):
    return CASES[request.param]


def test_zero_for_no_events(case):
    factory, _, _ = case
    accountant = factory()
    assert accountant.epsilon(1e-6) == 0.0
    assert accountant.delta(1.0) == 0.0


def test_refusal_leaves_state_unchanged(case):
    factory, supported, unsupported = case
    accountant = factory()
    accountant.compose(supported, 3)
    before = (accountant.history, accountant.epsilon(1e-6), accountant.delta(1.0))
    assert not accountant.supports(unsupported)
    with pytest.raises(UnsupportedEventError):
        accountant.compose(unsupported)
    assert (accountant.history, accountant.epsilon(1e-6), accountant.delta(1.0)) == before


def test_monotone_in_count(case):
    factory, supported, _ = case
    epsilons = [factory().compose(supported, count).epsilon(1e-6) for count in (1, 2, 4, 8, 16)]
    assert all(a <= b for a, b in zip(epsilons, epsilons[1:], strict=False)), epsilons
    assert epsilons[0] > 0


@pytest.mark.parametrize("count", [0, -1, 1.5, True, None])
def test_bad_count_is_refused_without_state_change(case, count):
    factory, supported, _ = case
    accountant = factory()
    with pytest.raises(InvalidParameterError, match="count"):
        accountant.compose(supported, count)
    assert accountant.history == ()


@pytest.mark.parametrize("delta", [-0.1, 1.0, float("nan"), "0.1"])
def test_bad_delta_query(case, delta):
    factory, supported, _ = case
    with pytest.raises(InvalidParameterError, match="delta"):
        factory().compose(supported).epsilon(delta)


def test_other_neighbour_relation_is_refused(case):
    factory, supported, _ = case
    accountant = factory(neighbours=NeighbourRelation.REPLACE_ONE)
    if getattr(supported, "neighbours", None) is None:
        pytest.skip("event carries no relation")
    with pytest.raises(UnsupportedEventError):
        accountant.compose(supported)
    assert accountant.history == ()
