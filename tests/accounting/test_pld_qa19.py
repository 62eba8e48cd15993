"""PLDAccountant: regressions from QA review 19 (sampling with probability 1, grids too fine to
build, group privacy).

References are written out here with their source named; every comparison is deterministic.
"""

from __future__ import annotations

import math
import tracemalloc

import mpmath
import pytest

from dpkit._errors import InvalidParameterError, UnsupportedEventError
from dpkit.accounting import PrivacyFilter
from dpkit.accounting._pld import PLDAccountant
from dpkit.accounting._rdp import RDPAccountant
from dpkit.accounting._zcdp import ZCDPAccountant
from dpkit.events import (
    ApproxDPEvent,
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    GroupEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PureDPEvent,
    RandomizedResponseEvent,
    SelfComposedEvent,
    ZCDPEvent,
)
from dpkit.guarantees import ApproxDP, NeighbourRelation


def gaussian_delta(epsilon: float, mu: float) -> mpmath.mpf:
    """The exact profile of mu-GDP (Dong, Roth & Su 2022, Cor. 2.13; Balle & Wang 2018, Thm. 8), at 50 digits:
    delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)."""
    with mpmath.workdps(50):
        eps, m = mpmath.mpf(epsilon), mpmath.mpf(mu)
        return mpmath.ncdf(-eps / m + m / 2) - mpmath.exp(eps) * mpmath.ncdf(-eps / m - m / 2)


# -- 1. Poisson sampling with probability 1 ---------------------------------------------------------

# Events whose PLD is built from atoms: log1p(-q) raised "math domain error" for them at q = 1.
ATOM_EVENTS = [
    PureDPEvent(1.0),
    ApproxDPEvent(1.0, 1e-6),
    DiscreteLaplaceEvent(1.0),
    DiscreteGaussianEvent(2.0),
    RandomizedResponseEvent(1.0, 3, NeighbourRelation.ADD_REMOVE),
]


@pytest.mark.parametrize("inner", ATOM_EVENTS, ids=lambda event: type(event).__name__)
def test_sampling_everyone_is_the_inner_event(inner: PrivacyEvent) -> None:
    # Keeping each record with probability 1 is no subsampling: the same PLD, the same answers.
    sampled = PoissonSampledEvent(1.0, inner)
    accountant = PLDAccountant()
    assert accountant.supports(sampled)
    accountant.compose(sampled, 3)
    reference = PLDAccountant().compose(inner, 3)
    assert accountant.epsilon(1e-5) == reference.epsilon(1e-5)
    for epsilon in (0.0, 0.5, 2.0):
        assert accountant.delta(epsilon) == reference.delta(epsilon)


@pytest.mark.parametrize("inner", ATOM_EVENTS, ids=lambda event: type(event).__name__)
def test_sampling_nearly_everyone_is_close_and_not_above(inner: PrivacyEvent) -> None:
    # Subsampling only amplifies privacy, so q < 1 may not answer more than q = 1 beyond the grid's
    # own error (connect-the-dots moves each event's losses by at most one step h), and q close to
    # 1 answers close to it.
    count, h = 3, 1e-4
    full = PLDAccountant(discretization=h).compose(PoissonSampledEvent(1.0, inner), count)
    for q, closeness in ((0.999, 1e-2), (1 - 1e-9, 1e-3)):
        nearly = PLDAccountant(discretization=h).compose(PoissonSampledEvent(q, inner), count)
        assert nearly.epsilon(1e-5) <= full.epsilon(1e-5) + count * h
        assert nearly.epsilon(1e-5) >= full.epsilon(1e-5) - closeness
        for epsilon in (0.5, 2.0):
            assert nearly.delta(epsilon) <= full.delta(epsilon) * (1 + 1e-4)
            assert nearly.delta(epsilon) >= full.delta(epsilon) - closeness


def test_filter_spends_sampling_everyone() -> None:
    budget = PrivacyFilter(ApproxDP(5.0, 1e-5), PLDAccountant)
    budget.spend(PoissonSampledEvent(1.0, PureDPEvent(1.0)), 2)
    budget.spend(PoissonSampledEvent(1.0, DiscreteLaplaceEvent(1.0)))
    alone = PLDAccountant().compose(PureDPEvent(1.0), 2).compose(DiscreteLaplaceEvent(1.0))
    assert budget.spent.epsilon == alone.epsilon(1e-5)


# -- 2. grids too fine to build are refused before they are built ------------------------------------


@pytest.mark.parametrize("discretization", [1e-8, 1e-9])
@pytest.mark.parametrize(
    "event",
    [
        LaplaceEvent(1.0),
        PureDPEvent(1.0),
        DiscreteGaussianEvent(1.0),
        PoissonSampledEvent(0.01, GaussianEvent(1.0)),
        ComposedEvent((GaussianEvent(1.0), LaplaceEvent(2.0))),
    ],
    ids=lambda event: type(event).__name__,
)
def test_too_fine_grid_refused_fast_in_little_memory(event: PrivacyEvent, discretization: float) -> None:
    PLDAccountant().supports(event)  # (imports scipy outside the measurement)
    accountant = PLDAccountant(discretization=discretization)
    # Asked first: the old code said yes here, then tried 1.5 GB (1e-8) or 15 GB (1e-9) at epsilon().
    assert not accountant.supports(event)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidParameterError, match="discretization") as raised:
            accountant.compose(event).epsilon(1e-6)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert raised.value.name == "discretization"
    assert "16777216" in str(raised.value)
    assert peak < 200e6  # refused before the grid is built (the old code tried 1.5 GB at 1e-8)
    assert accountant.history == ()
    assert accountant.epsilon(1e-6) == 0.0


def test_gaussians_need_no_grid_until_something_else_joins_them() -> None:
    # Plain Gaussians alone are answered by their exact profile, on no grid: still accepted at 1e-9.
    accountant = PLDAccountant(discretization=1e-9).compose(GaussianEvent(1.0), 3)
    exact = float(gaussian_delta(1.0, math.sqrt(3)))
    assert exact <= accountant.delta(1.0) <= exact * (1 + 1e-12)
    # A Laplace event beside them would put them on a grid of ~1.6e10 points: refused, unchanged.
    assert not accountant.supports(LaplaceEvent(1.0))
    with pytest.raises(InvalidParameterError, match="discretization"):
        accountant.compose(LaplaceEvent(1.0))
    assert accountant.history == ((GaussianEvent(1.0), 3),)
    assert exact <= accountant.delta(1.0) <= exact * (1 + 1e-12)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidParameterError, match="discretization"):
            accountant.loss_distribution()
        assert tracemalloc.get_traced_memory()[1] < 200e6  # refused before the grid is built
    finally:
        tracemalloc.stop()


# -- 3. group privacy ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("sigma", "size"), [(4.0, 2), (3.0, 3), (10.0, 7)])
def test_group_of_gaussian_is_gaussian_with_scaled_sensitivity(sigma: float, size: int) -> None:
    group = PLDAccountant().compose(GroupEvent(GaussianEvent(sigma), size))
    scaled = PLDAccountant().compose(GaussianEvent(sigma / size))
    # On the grid too (a tiny pure DP event beside it: delta lies between the Gaussian's at eps and
    # at eps - 1e-9).
    beside = PLDAccountant().compose(ComposedEvent((GroupEvent(GaussianEvent(sigma), size), PureDPEvent(1e-9))))
    mu = size / sigma
    for epsilon in (0.0, 0.5, 1.0, 3.0):
        exact = gaussian_delta(epsilon, mu)
        assert group.delta(epsilon) >= exact  # pessimistic: never below the exact profile
        assert group.delta(epsilon) <= exact * (1 + 1e-12)
        assert group.delta(epsilon) == pytest.approx(scaled.delta(epsilon), rel=1e-14)
        assert beside.delta(epsilon) >= exact
        assert beside.delta(epsilon) <= gaussian_delta(max(epsilon - 1e-9, 0.0), mu) * (1 + 1e-4)
    assert group.epsilon(1e-6) == pytest.approx(scaled.epsilon(1e-6), rel=1e-12)


@pytest.mark.parametrize(("scale", "size"), [(2.0, 2), (3.0, 3), (10.0, 4)])
def test_group_of_laplace_is_laplace_with_scaled_sensitivity(scale: float, size: int) -> None:
    group = PLDAccountant().compose(GroupEvent(LaplaceEvent(scale), size), 5)
    scaled = PLDAccountant().compose(LaplaceEvent(scale / size), 5)
    assert group.epsilon(1e-6) == scaled.epsilon(1e-6)
    for epsilon in (0.0, 1.0, 4.0):
        assert group.delta(epsilon) == scaled.delta(epsilon)


@pytest.mark.parametrize(
    ("group", "equivalent"),
    [
        (GroupEvent(PureDPEvent(0.5), 3), PureDPEvent(1.5)),
        (GroupEvent(DiscreteLaplaceEvent(2.0), 3), DiscreteLaplaceEvent(2.0, 3)),
        (GroupEvent(DiscreteGaussianEvent(3.0), 2), DiscreteGaussianEvent(3.0, 2.0)),
        (GroupEvent(GroupEvent(GaussianEvent(6.0), 2), 3), GaussianEvent(1.0)),
        (GroupEvent(SelfComposedEvent(LaplaceEvent(10.0), 5), 2), SelfComposedEvent(LaplaceEvent(5.0), 5)),
        (
            GroupEvent(ComposedEvent((PureDPEvent(0.25), GaussianEvent(4.0))), 2),
            ComposedEvent((PureDPEvent(0.5), GaussianEvent(2.0))),
        ),
    ],
    ids=["pure", "discrete-laplace", "discrete-gaussian", "nested", "self-composed", "composed"],
)
def test_group_is_the_scaled_event(group: GroupEvent, equivalent: PrivacyEvent) -> None:
    accountant = PLDAccountant()
    assert accountant.supports(group)
    accountant.compose(group, 2)
    reference = PLDAccountant().compose(equivalent, 2)
    assert accountant.epsilon(1e-6) == reference.epsilon(1e-6)
    for epsilon in (0.0, 1.0, 3.0):
        assert accountant.delta(epsilon) == reference.delta(epsilon)


def test_group_of_approximate_dp() -> None:
    # (eps, delta)-DP gives (k eps, delta (1 + e^eps + ... + e^((k-1) eps)))-DP to groups of k
    # (Vadhan 2017, Lemma 2.2); the accountant reads that guarantee's dominating pair.
    accountant = PLDAccountant().compose(GroupEvent(ApproxDPEvent(0.5, 1e-6), 3))
    with mpmath.workdps(50):
        tight = float(mpmath.mpf(1e-6) * (1 + mpmath.exp(0.5) + mpmath.exp(1)))
    assert accountant.delta(1.5) >= tight
    assert accountant.delta(1.5) == pytest.approx(tight, rel=1e-9)
    assert accountant.epsilon(tight * (1 + 1e-9)) == pytest.approx(1.5, abs=1e-4)
    assert accountant.epsilon(tight * (1 - 1e-6)) == math.inf


@pytest.mark.parametrize(
    ("group", "message"),
    [
        (GroupEvent(PoissonSampledEvent(0.1, GaussianEvent(1.0)), 2), "only for Gaussian, Laplace"),
        (GroupEvent(ZCDPEvent(0.1), 2), "only for Gaussian, Laplace"),
        (GroupEvent(ComposedEvent((LaplaceEvent(1.0), ZCDPEvent(0.1))), 2), "only for Gaussian, Laplace"),
        (GroupEvent(ApproxDPEvent(2.0, 0.1), 5), "delta >= 1"),
    ],
    ids=["subsampled", "zcdp", "composed", "vacuous"],
)
def test_group_without_exact_pld_refused_with_reason(group: GroupEvent, message: str) -> None:
    accountant = PLDAccountant().compose(PureDPEvent(0.5))
    assert not accountant.supports(group)
    with pytest.raises(UnsupportedEventError, match=message):
        accountant.compose(group)
    assert accountant.history == ((PureDPEvent(0.5), 1),)


@pytest.mark.parametrize("accountant", [PLDAccountant, RDPAccountant, ZCDPAccountant])
def test_a_group_of_a_poisson_sample_at_q_one_is_the_group_of_the_event(accountant) -> None:
    inner = GaussianEvent(4.0)
    sampled = accountant().compose(GroupEvent(PoissonSampledEvent(1.0, inner), 2))
    plain = accountant().compose(GroupEvent(inner, 2))
    assert sampled.epsilon(1e-6) == plain.epsilon(1e-6)
