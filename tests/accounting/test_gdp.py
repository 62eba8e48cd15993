"""GDP / central-limit and saddle-point accountants: exactness for Gaussians, labels, refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from dpkit._errors import InvalidParameterError, UnsupportedEventError
from dpkit.accounting._gdp import (
    GDPAccountant,
    SaddlePointAccountant,
    _laplace_cumulants,
    _subsampled_gaussian_cumulants,
)
from dpkit.accounting._hypothesis import gaussian_delta, gaussian_epsilon
from dpkit.events import (
    ApproxDPEvent,
    ComposedEvent,
    GaussianEvent,
    GroupEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    PureDPEvent,
    SampledWithoutReplacementEvent,
    SelfComposedEvent,
    ZCDPEvent,
    dpsgd_event,
)
from dpkit.guarantees import NeighbourRelation

ACCOUNTANTS = [GDPAccountant, SaddlePointAccountant]


# -- GDP ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("count", [1, 4, 100])
def test_k_gaussians_are_one_gaussian_with_sigma_over_root_k(sigma: float, count: int) -> None:
    composed = GDPAccountant().compose(GaussianEvent(sigma), count=count)
    single = GDPAccountant().compose(GaussianEvent(sigma / math.sqrt(count)))
    assert composed.mu == pytest.approx(single.mu, rel=1e-14)
    assert composed.certified and single.certified
    for epsilon in (0.0, 0.5, 2.0):
        assert composed.delta(epsilon) == pytest.approx(single.delta(epsilon), rel=1e-12)
        assert composed.delta(epsilon) == pytest.approx(gaussian_delta(math.sqrt(count) / sigma, epsilon), rel=1e-12)
    for delta in (1e-3, 1e-6):
        assert composed.epsilon(delta) == pytest.approx(single.epsilon(delta), rel=1e-9)


def test_heterogeneous_gaussians_compose_as_a_norm() -> None:
    accountant = GDPAccountant().compose(ComposedEvent((GaussianEvent(1.0), GaussianEvent(2.0), GaussianEvent(2.0))))
    assert accountant.mu == pytest.approx(math.sqrt(1 + 0.25 + 0.25))
    assert accountant.epsilon(1e-5) == pytest.approx(gaussian_epsilon(math.sqrt(1.5), 1e-5))


def test_gaussian_delta_against_the_exact_privacy_loss_integral() -> None:
    # k Gaussians: L ~ N(mu^2/2, mu^2), delta = E[(1 - e^{eps - L})^+] (Sarwate et al. 2024, Sec. 3)
    mu, epsilon = 1.7, 1.2
    loss = stats.norm(mu * mu / 2, mu)
    numeric = integrate.quad(lambda x: (1 - math.exp(epsilon - x)) * loss.pdf(x), epsilon, 40)[0]
    accountant = GDPAccountant().compose(GaussianEvent(1 / mu))
    assert accountant.delta(epsilon) == pytest.approx(numeric, rel=1e-8)


def test_group_of_gaussians() -> None:
    accountant = GDPAccountant().compose(GroupEvent(GaussianEvent(2.0), size=3))
    assert accountant.mu == pytest.approx(1.5) and accountant.certified


def test_subsampled_gaussian_uses_the_clt_and_is_labelled_approximate() -> None:
    q, sigma, steps = 256 / 60000, 1.1, 14063
    accountant = GDPAccountant().compose(GaussianEvent(5.0))
    assert accountant.certified
    accountant.compose(dpsgd_event(sigma, q, steps))
    assert accountant.certified is False
    expected = math.sqrt(1 / 25 + q * q * steps * math.expm1(1 / sigma**2))
    assert accountant.mu == pytest.approx(expected, rel=1e-12)
    # the CLT under-estimates W1 (true eps ~ 2.3817 at delta = 1e-5): why it is never certified
    clt = GDPAccountant().compose(dpsgd_event(sigma, q, steps))
    assert clt.epsilon(1e-5) < 2.3817
    # a rate of 1 is a plain Gaussian, exactly
    full = GDPAccountant().compose(PoissonSampledEvent(1.0, GaussianEvent(2.0)))
    assert full.mu == pytest.approx(0.5) and full.certified


def test_sampling_without_replacement_under_replace_one() -> None:
    event = SampledWithoutReplacementEvent(1000, 10, GaussianEvent(1.0, NeighbourRelation.REPLACE_ONE))
    accountant = GDPAccountant(NeighbourRelation.REPLACE_ONE).compose(event, count=100)
    assert accountant.mu == pytest.approx(0.01 * math.sqrt(100 * math.expm1(1.0)))
    assert not accountant.certified
    assert not GDPAccountant().supports(event)


def test_no_events_and_delta_zero() -> None:
    accountant = GDPAccountant()
    assert accountant.mu == 0.0 and accountant.epsilon(1e-5) == 0.0 and accountant.delta(1.0) == 0.0
    accountant.compose(GaussianEvent(1.0))
    assert accountant.epsilon(0.0) == math.inf


def test_gdp_is_monotone_in_count() -> None:
    epsilons = [GDPAccountant().compose(GaussianEvent(3.0), count=n).epsilon(1e-6) for n in (1, 2, 5, 50)]
    assert epsilons == sorted(epsilons) and len(set(epsilons)) == 4


# -- refusal and bad input ---------------------------------------------------------------------------


UNSUPPORTED = [
    PureDPEvent(1.0),
    ApproxDPEvent(1.0, 1e-6),
    ZCDPEvent(0.5),
    GaussianEvent(1.0, NeighbourRelation.REPLACE_ONE),
    PoissonSampledEvent(0.1, LaplaceEvent(1.0)),
    ComposedEvent((GaussianEvent(1.0), PureDPEvent(1.0))),
    SelfComposedEvent(ComposedEvent((GaussianEvent(1.0), ZCDPEvent(0.1))), 3),
]


@pytest.mark.parametrize("make", ACCOUNTANTS)
@pytest.mark.parametrize("event", UNSUPPORTED, ids=lambda e: type(e).__name__)
def test_unsupported_events_are_refused_without_state_change(make, event) -> None:
    accountant = make().compose(GaussianEvent(2.0), count=3)
    before = (accountant.history, accountant.delta(1.0), accountant.epsilon(1e-5), accountant.certified)
    assert not accountant.supports(event)
    with pytest.raises(UnsupportedEventError):
        accountant.compose(event)
    assert (accountant.history, accountant.delta(1.0), accountant.epsilon(1e-5), accountant.certified) == before


def test_gdp_refuses_laplace_but_saddle_point_supports_it() -> None:
    assert not GDPAccountant().supports(LaplaceEvent(1.0))
    assert SaddlePointAccountant().supports(LaplaceEvent(1.0))


@pytest.mark.parametrize("make", ACCOUNTANTS)
def test_bad_parameters_raise_before_state_changes(make) -> None:
    accountant = make().compose(GaussianEvent(1.0))
    history = accountant.history
    for call in (
        lambda: accountant.compose(GaussianEvent(1.0), count=0),
        lambda: accountant.epsilon(1.0),
        lambda: accountant.epsilon(math.nan),
        lambda: accountant.delta(-1.0),
        lambda: GaussianEvent(-1.0),
        lambda: PoissonSampledEvent(1.5, GaussianEvent(1.0)),
        lambda: make(neighbours="add_remove"),
    ):
        with pytest.raises(InvalidParameterError):
            call()
    assert accountant.history == history


# -- saddle point --------------------------------------------------------------------------------------


def test_saddle_point_is_labelled_approximate_and_close_for_gaussians() -> None:
    accountant = SaddlePointAccountant().compose(GaussianEvent(10.0), count=400)  # mu = 2
    assert accountant.certified is False
    for epsilon in (2.0, 4.0, 6.0):
        assert accountant.delta(epsilon) == pytest.approx(gaussian_delta(2.0, epsilon), rel=0.05)
    assert accountant.epsilon(1e-5) == pytest.approx(gaussian_epsilon(2.0, 1e-5), rel=0.01)


def test_saddle_point_dpsgd_workloads_against_the_known_values() -> None:
    # W1 and W2 of the accounting issue: tight PLD values 2.3817 and ~10.054 at delta = 1e-5
    w1 = SaddlePointAccountant().compose(dpsgd_event(1.1, 256 / 60000, 14063)).epsilon(1e-5)
    w2 = SaddlePointAccountant().compose(dpsgd_event(0.8, 0.01, 10000)).epsilon(1e-5)
    assert w1 == pytest.approx(2.3817, rel=2e-3)
    assert w2 == pytest.approx(10.054, rel=2e-3)


def test_saddle_point_laplace_is_close_to_the_exact_composition() -> None:
    # one Laplace release is a poor regime for an asymptotic method, many are a good one: compare
    # 50 releases of scale 10 with the exact delta from a fine numerical convolution of the loss.
    b, count, epsilon = 10.0, 50, 1.0
    a = 1 / b
    grid = np.linspace(-a, a, 2001)
    # exact PLD of one Laplace release on the grid (atoms at +-a, density between)
    step = grid[1] - grid[0]
    mass = 0.25 * math.exp(-a / 2) * np.exp(grid / 2) * step
    mass[0], mass[-1] = mass[0] / 2 + 0.5 * math.exp(-a), mass[-1] / 2 + 0.5
    mass /= mass.sum()
    total = np.array([1.0])
    for _ in range(count):
        total = np.convolve(total, mass)
    losses = -count * a + step * np.arange(total.size)
    exact = float(np.sum(total * np.maximum(1 - np.exp(epsilon - losses), 0)))
    spa = SaddlePointAccountant().compose(LaplaceEvent(b), count=count).delta(epsilon)
    assert spa == pytest.approx(exact, rel=0.05)


@pytest.mark.parametrize("t", [0.2, 2.0, 15.0])
def test_laplace_cumulants_by_quadrature(t: float) -> None:
    b = 0.5
    loss = lambda y: (abs(y - 1) - abs(y)) / b  # noqa: E731
    density = lambda y: math.exp(-abs(y) / b) / (2 * b)  # noqa: E731
    pieces = [(-40, 0), (0, 1), (1, 40)]
    moments = [
        sum(
            integrate.quad(lambda y, k=k: density(y) * math.exp(t * loss(y)) * loss(y) ** k, lo, hi)[0]
            for lo, hi in pieces
        )
        for k in range(3)
    ]
    mean = moments[1] / moments[0]
    expected = (math.log(moments[0]), mean, moments[2] / moments[0] - mean * mean)
    assert _laplace_cumulants(b)(t) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("remove", [True, False])
@pytest.mark.parametrize("t", [0.5, 3.0])
def test_subsampled_gaussian_cumulants_by_quadrature(remove: bool, t: float) -> None:
    q, sigma = 0.01, 0.8

    def remove_loss(y: float) -> float:
        return float(np.logaddexp(math.log1p(-q), math.log(q) + (2 * y - 1) / (2 * sigma**2)))

    if remove:
        density = lambda y: (1 - q) * stats.norm.pdf(y, 0, sigma) + q * stats.norm.pdf(y, 1, sigma)  # noqa: E731
        loss = remove_loss
    else:
        density = lambda y: stats.norm.pdf(y, 0, sigma)  # noqa: E731
        loss = lambda y: -remove_loss(y)  # noqa: E731
    moments = [
        integrate.quad(
            lambda y, k=k: density(y) * math.exp(t * loss(y)) * loss(y) ** k, -40, 60, limit=400, points=[0, 1]
        )[0]
        for k in range(3)
    ]
    mean = moments[1] / moments[0]
    expected = (math.log(moments[0]), mean, moments[2] / moments[0] - mean * mean)
    assert _subsampled_gaussian_cumulants(q, sigma, remove)(t) == pytest.approx(expected, rel=1e-7)
