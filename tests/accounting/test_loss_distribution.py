"""PLDAccountant.loss_distribution(): the public, read-only view of the composed PLD."""

import dataclasses
import math

import numpy as np
import pytest

from dpkit import InvalidParameterError
from dpkit.accounting import PLDAccountant, PrivacyLossDistribution
from dpkit.events import (
    DiscreteLaplaceEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    RandomizedResponseEvent,
    SampledWithoutReplacementEvent,
)
from dpkit.guarantees import NeighbourRelation

WORKLOADS = [
    # (name, accountant factory, number of composed events)
    ("gaussian", lambda: PLDAccountant().compose(GaussianEvent(2.0), 4), 4),
    ("laplace", lambda: PLDAccountant(discretization=1e-3).compose(LaplaceEvent(2.0), 10), 10),
    ("discrete_laplace", lambda: PLDAccountant().compose(DiscreteLaplaceEvent(scale=2.0, sensitivity=2), 3), 3),
    (
        "randomized_response",
        lambda: PLDAccountant(NeighbourRelation.REPLACE_ONE).compose(RandomizedResponseEvent(1.0, 4), 5),
        5,
    ),
    (
        "poisson_subsampled_gaussian",
        lambda: PLDAccountant(discretization=1e-3).compose(PoissonSampledEvent(0.05, GaussianEvent(1.0)), 20),
        20,
    ),
    (
        "without_replacement_laplace",
        lambda: PLDAccountant(NeighbourRelation.REPLACE_ONE, discretization=1e-3).compose(
            SampledWithoutReplacementEvent(100, 10, LaplaceEvent(1.0, neighbours=NeighbourRelation.REPLACE_ONE)), 5
        ),
        5,
    ),
    ("optimistic_gaussian", lambda: PLDAccountant(pessimistic=False).compose(GaussianEvent(2.0), 4), 4),
]


def _hockey_stick(pld: PrivacyLossDistribution, epsilon: float) -> float:
    # delta(eps) = E[(1 - e^(eps - L))_+] + P(L = +inf), written out independently of the accountant.
    terms = -np.expm1(np.minimum(epsilon - pld.losses, 0.0))
    return float(np.sum(pld.probabilities * terms)) + pld.infinity_mass


def _epsilon_from(plds: list[PrivacyLossDistribution], delta: float) -> float:
    def worst(eps: float) -> float:
        return max(_hockey_stick(p, eps) for p in plds)

    if worst(0.0) <= delta:
        return 0.0
    low, high = 0.0, max(float(p.losses[-1]) for p in plds) + 1.0
    for _ in range(200):  # delta(eps) is continuous and non-increasing: bisect
        middle = 0.5 * (low + high)
        if worst(middle) > delta:
            low = middle
        else:
            high = middle
    return high


@pytest.mark.parametrize(("name", "make", "events"), WORKLOADS, ids=[w[0] for w in WORKLOADS])
def test_probabilities_sum_to_one_minus_infinity_mass(name: str, make, events: int) -> None:  # type: ignore[no-untyped-def]
    accountant = make()
    for direction in ("remove", "add"):
        pld = accountant.loss_distribution(direction)
        assert pld.direction == direction
        assert np.all(pld.probabilities >= 0.0) and 0.0 <= pld.infinity_mass < 1e-6
        # exact up to the clipping of rounding-negative masses (about 1e-8 per composed event)
        assert float(pld.probabilities.sum()) == pytest.approx(1.0 - pld.infinity_mass, abs=5e-8 * events)


@pytest.mark.parametrize(("name", "make", "events"), WORKLOADS, ids=[w[0] for w in WORKLOADS])
def test_hockey_stick_of_the_distribution_is_the_accountants_answer(name: str, make, events: int) -> None:  # type: ignore[no-untyped-def]
    accountant = make()
    plds = [accountant.loss_distribution("remove"), accountant.loss_distribution("add")]
    if name.endswith("gaussian") and "subsampled" not in name:
        # Plain Gaussians alone are answered by their composition's exact profile; the grid
        # distribution (each event discretised) bounds it from above (pessimistic) or below.
        sign = 1.0 if accountant.pessimistic else -1.0
        for delta in (1e-3, 1e-6):
            gap = sign * (_epsilon_from(plds, delta) - accountant.epsilon(delta))
            assert -1e-12 <= gap <= events * plds[0].discretization  # (each event rounds by a step)
        for eps in (0.0, 0.3, 1.0):
            gap = sign * (max(_hockey_stick(p, eps) for p in plds) - accountant.delta(eps))
            assert -1e-15 <= gap <= 1e-3 * accountant.delta(eps)
        return
    for delta in (1e-3, 1e-6):
        expected = accountant.epsilon(delta)
        assert _epsilon_from(plds, delta) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    for eps in (0.0, 0.3, 1.0):
        assert max(_hockey_stick(p, eps) for p in plds) == pytest.approx(accountant.delta(eps), rel=1e-9, abs=1e-15)


def test_grid_and_flags() -> None:
    accountant = PLDAccountant(discretization=1e-3).compose(LaplaceEvent(2.0), 3)
    pld = accountant.loss_distribution()
    assert pld.discretization == 1e-3 and pld.pessimistic is True
    assert np.all(np.diff(pld.losses) > 0)
    steps = pld.losses / pld.discretization
    assert np.allclose(steps, np.round(steps), atol=1e-6)
    assert pld.losses.shape == pld.probabilities.shape
    assert PLDAccountant(pessimistic=False).compose(LaplaceEvent(2.0)).loss_distribution().pessimistic is False


def test_symmetric_events_give_the_same_distribution_in_both_directions() -> None:
    accountant = PLDAccountant().compose(GaussianEvent(1.5), 2)
    remove, add = accountant.loss_distribution("remove"), accountant.loss_distribution("add")
    assert np.array_equal(remove.losses, add.losses) and np.array_equal(remove.probabilities, add.probabilities)


def test_gaussian_moments_match_the_closed_form() -> None:
    # The PLD of a Gaussian with noise multiplier sigma composed k times is N(mu^2/2, mu^2), mu^2 = k/sigma^2.
    accountant = PLDAccountant().compose(GaussianEvent(2.0), 4)
    pld = accountant.loss_distribution()
    mass = float(pld.probabilities.sum())
    mean = float(np.sum(pld.probabilities * pld.losses)) / mass
    variance = float(np.sum(pld.probabilities * (pld.losses - mean) ** 2)) / mass
    assert mean == pytest.approx(0.5, abs=5 * pld.discretization)
    assert variance == pytest.approx(1.0, abs=1e-2)


def test_arrays_are_read_only_and_the_value_is_frozen() -> None:
    accountant = PLDAccountant().compose(GaussianEvent(1.0))
    pld = accountant.loss_distribution()
    before = accountant.epsilon(1e-5)
    with pytest.raises(ValueError):
        pld.probabilities[0] = 1.0
    with pytest.raises(ValueError):
        pld.losses[0] = 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        pld.infinity_mass = 0.5  # type: ignore[misc]
    assert accountant.epsilon(1e-5) == before


def test_the_distribution_follows_later_compositions() -> None:
    accountant = PLDAccountant().compose(GaussianEvent(2.0))
    first = accountant.loss_distribution()
    accountant.compose(GaussianEvent(2.0), 3)
    second = accountant.loss_distribution()
    assert float(np.sum(first.probabilities * first.losses)) == pytest.approx(0.125, abs=1e-3)
    assert float(np.sum(second.probabilities * second.losses)) == pytest.approx(0.5, abs=1e-3)


def test_nothing_composed_is_a_point_mass_at_zero() -> None:
    pld = PLDAccountant().loss_distribution()
    assert pld.losses.tolist() == [0.0] and pld.probabilities.tolist() == [1.0] and pld.infinity_mass == 0.0
    assert _hockey_stick(pld, 0.0) == 0.0 and math.isclose(_epsilon_from([pld], 1e-6), 0.0)


def test_bad_direction_names_the_parameter() -> None:
    with pytest.raises(InvalidParameterError) as info:
        PLDAccountant().compose(GaussianEvent(1.0)).loss_distribution("both")
    assert info.value.name == "direction"
