"""ZCDPAccountant: rho adds; conversions agree with the Gaussian's RDP curve and the CKS bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpkit._errors import InvalidParameterError, UnsupportedEventError
from dpkit.accounting._rdp import RDPAccountant
from dpkit.accounting._zcdp import ZCDPAccountant, zcdp_delta
from dpkit.events import (
    ApproxDPEvent,
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    GroupEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    PureDPEvent,
    RandomizedResponseEvent,
    SampledWithoutReplacementEvent,
    SelfComposedEvent,
    ZCDPEvent,
)
from dpkit.guarantees import ZCDP, NeighbourRelation


@pytest.mark.parametrize(
    ("event", "rho"),
    [
        (GaussianEvent(2.0), 1 / 8),
        (DiscreteGaussianEvent(3.0, 2.0), 4 / 18),
        (LaplaceEvent(4.0), 1 / 32),
        (DiscreteLaplaceEvent(2.0, 3), 9 / 8),
        (PureDPEvent(0.5), 0.125),
        (ZCDPEvent(0.3), 0.3),
        (GroupEvent(GaussianEvent(2.0), 3), 9 / 8),
        (GroupEvent(PureDPEvent(0.5), 2), 0.5),
        (ComposedEvent((GaussianEvent(1.0), ZCDPEvent(0.5))), 1.0),
    ],
)
def test_rho_of_each_event(event, rho: float) -> None:
    accountant = ZCDPAccountant().compose(event)
    assert accountant.rho == pytest.approx(rho, rel=1e-14)
    assert accountant.rho >= rho  # rounded up
    assert accountant.guarantee == ZCDP(accountant.rho)


def test_randomized_response_under_replace_one() -> None:
    accountant = ZCDPAccountant(NeighbourRelation.REPLACE_ONE).compose(RandomizedResponseEvent(1.0, 4))
    assert accountant.rho == pytest.approx(0.5)
    assert accountant.guarantee is not None and accountant.guarantee.neighbours is NeighbourRelation.REPLACE_ONE


@pytest.mark.parametrize("k", [2, 7, 100])
def test_k_gaussians_equal_one_of_sigma_over_sqrt_k(k: int) -> None:
    sigma = 3.0
    many = ZCDPAccountant().compose(GaussianEvent(sigma), count=k)
    one = ZCDPAccountant().compose(GaussianEvent(sigma / math.sqrt(k)))
    assert many.rho == pytest.approx(one.rho, rel=1e-13)
    assert many.epsilon(1e-6) == pytest.approx(one.epsilon(1e-6), rel=1e-8)
    assert many.delta(1.0) == pytest.approx(one.delta(1.0), rel=1e-8)


def test_gaussian_agrees_with_rdp_on_a_fine_grid() -> None:
    # For a Gaussian, zCDP and RDP carry the same curve rho * alpha; a fine order grid in the RDP
    # accountant must approach the zCDP answer from above (the zCDP one optimises alpha continuously).
    orders = np.concatenate([1 + np.arange(1, 4000) / 1000, np.arange(5, 200, 0.25)])
    for sigma in (0.8, 2.0, 10.0):
        zcdp = ZCDPAccountant().compose(GaussianEvent(sigma), count=10)
        rdp = RDPAccountant(orders).compose(GaussianEvent(sigma), count=10)
        for delta in (1e-3, 1e-6, 1e-9):
            assert rdp.epsilon(delta) == pytest.approx(zcdp.epsilon(delta), rel=1e-4)
            assert zcdp.epsilon(delta) <= rdp.epsilon(delta) * (1 + 1e-7)
        for epsilon in (0.5, 2.0, 8.0):
            # delta is exponential in alpha, so a 0.25-spaced grid costs up to ~1% there.
            assert rdp.delta(epsilon) == pytest.approx(zcdp.delta(epsilon), rel=2e-2)
            assert zcdp.delta(epsilon) <= rdp.delta(epsilon) * (1 + 1e-6)


def test_delta_inverts_epsilon() -> None:
    accountant = ZCDPAccountant().compose(ZCDPEvent(0.2))
    for delta in (1e-3, 1e-7):
        eps = accountant.epsilon(delta)
        assert accountant.delta(eps) <= delta * (1 + 1e-6)
        assert accountant.delta(eps * 0.99) > delta


def test_never_worse_than_bun_steinke() -> None:
    for rho in (0.01, 0.5, 4.0):
        accountant = ZCDPAccountant().compose(ZCDPEvent(rho))
        delta = 1e-6
        assert accountant.epsilon(delta) <= rho + 2 * math.sqrt(rho * math.log(1 / delta))
        # Bun & Steinke Lemma 3.5 style bound on delta, which the CKS bound improves on.
        assert zcdp_delta(rho, 3.0) <= math.exp(-((3.0 - rho) ** 2) / (4 * rho)) * 1.0000001 or rho > 3.0


def test_tiny_rho_gives_zero_epsilon_for_large_delta() -> None:
    # delta >= sqrt(1 - e^{-rho}) bounds the total variation distance: epsilon = 0 holds.
    accountant = ZCDPAccountant().compose(ZCDPEvent(1e-6))
    assert accountant.epsilon(0.01) == 0.0
    assert accountant.delta(0.0) <= math.sqrt(1e-6) * (1 + 1e-6)
    assert accountant.epsilon(0.0) == math.inf


@pytest.mark.parametrize(
    "event",
    [
        PoissonSampledEvent(0.1, GaussianEvent(1.0)),
        SampledWithoutReplacementEvent(100, 10, GaussianEvent(1.0)),
        ApproxDPEvent(1.0, 1e-6),
        GaussianEvent(1.0, NeighbourRelation.REPLACE_ONE),
        ComposedEvent((GaussianEvent(1.0), ApproxDPEvent(1.0, 1e-6))),
        SelfComposedEvent(PoissonSampledEvent(0.5, GaussianEvent(1.0)), 3),
        RandomizedResponseEvent(1.0),  # replace-one event, add/remove accountant
    ],
)
def test_refusal_leaves_state_unchanged(event) -> None:
    accountant = ZCDPAccountant().compose(GaussianEvent(2.0))
    assert not accountant.supports(event)
    with pytest.raises(UnsupportedEventError):
        accountant.compose(event)
    assert accountant.rho == pytest.approx(0.125)
    assert len(accountant.history) == 1


def test_monotone_in_count_and_zero_without_events() -> None:
    empty = ZCDPAccountant()
    assert empty.epsilon(1e-5) == 0.0 and empty.delta(1.0) == 0.0 and empty.rho == 0.0
    assert empty.guarantee is None
    epsilons = [ZCDPAccountant().compose(LaplaceEvent(10.0), count=n).epsilon(1e-5) for n in (1, 10, 100, 1000)]
    deltas = [ZCDPAccountant().compose(LaplaceEvent(10.0), count=n).delta(1.0) for n in (1, 10, 100, 1000)]
    assert epsilons == sorted(epsilons) and len(set(epsilons)) == 4
    assert deltas == sorted(deltas)


def test_bad_inputs_raise() -> None:
    accountant = ZCDPAccountant().compose(GaussianEvent(1.0))
    for bad in (math.nan, -0.1, 1.0, 2.0):
        with pytest.raises(InvalidParameterError):
            accountant.epsilon(bad)
    for bad in (math.nan, -1.0, math.inf):
        with pytest.raises(InvalidParameterError):
            accountant.delta(bad)
    with pytest.raises(InvalidParameterError):
        accountant.compose(GaussianEvent(1.0), count=-1)
    with pytest.raises(InvalidParameterError):
        ZCDPAccountant("add_remove")  # type: ignore[arg-type]
    assert accountant.rho == pytest.approx(0.5)
