"""PLDAccountant: regressions from the accounting QA review (looseness and resource problems).

Each test checks validity (never below the exact answer, up to float64 rounding of the
reference) and tightness (within a stated slack of it), against references written out here
with their source named.
"""

from __future__ import annotations

import itertools
import math
import tracemalloc

import numpy as np
import pytest
from scipy.special import ndtr

from dpkit.accounting._pld import PLDAccountant
from dpkit.events import (
    ApproxDPEvent,
    DiscreteGaussianEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    PureDPEvent,
    SampledWithoutReplacementEvent,
)
from dpkit.guarantees import NeighbourRelation


def gaussian_delta(epsilon: float, mu: float) -> float:
    """Balle & Wang 2018, Thm. 8: the exact privacy profile of a Gaussian with mu = sensitivity / sigma."""
    return float(ndtr(-epsilon / mu + mu / 2) - math.exp(epsilon) * ndtr(-epsilon / mu - mu / 2))


def finite_atoms_delta(atoms: list[tuple[float, float]], count: int, epsilon: float) -> float:
    """delta(eps) = E[(1 - e^(eps - L))_+] of the count-fold composition of a PLD with finitely many
    losses (``(loss, P-mass)``, loss may be +inf), by enumerating every combination."""
    total = 0.0
    for combination in itertools.product(atoms, repeat=count):
        loss = sum(a[0] for a in combination)
        mass = math.prod(a[1] for a in combination)
        total += mass if loss == math.inf else mass * max(0.0, -math.expm1(epsilon - loss))
    return total


# -- (epsilon, delta)-DP events: the chord starts at (0, 1 - P(L = +inf)) -------------------------

# Kairouz, Oh & Viswanath 2015, Thm. 3.3 (the optimal k-fold composition of (eps0, delta0)-DP):
# delta(eps) = 1 - (1 - delta0)^k (1 - sum_l C(k, l) max(0, p^(k-l) q^l - e^eps p^l q^(k-l))),
# p = e^eps0 / (1 + e^eps0), q = 1 - p; evaluated with mpmath at 40 digits (OptimalAccountant and
# dp_accounting 0.6.0's PLD agree to the digits shown).
KOV_EXACT = [
    # (eps0, delta0, k, eps, delta)
    (2.0, 0.1, 3, 0.0, 0.94278746623162377),
    (2.0, 0.1, 3, 1.0, 0.89363383766447358),
    (1.0, 1e-3, 20, 1.0, 0.95809203381248432),
    (0.1, 1e-4, 100, 1.0, 0.13438836894755424),
    (0.5, 1e-6, 10, 2.0, 0.1454749917381987),
]


@pytest.mark.parametrize(("eps0", "delta0", "count", "epsilon", "exact"), KOV_EXACT)
def test_approx_dp_composition_is_the_optimal_one(
    eps0: float, delta0: float, count: int, epsilon: float, exact: float
) -> None:
    """Was 1.0 (the trivial bound) for 3 x (2, 0.1) at eps = 0 and 0.9764 for 20 x (1, 1e-3) at eps = 1:
    each step put its delta0 once more at the bottom of the grid."""
    got = PLDAccountant().compose(ApproxDPEvent(eps0, delta0), count).delta(epsilon)
    assert exact - 1e-12 <= got <= exact + 1e-8


def test_approx_dp_masses_sum_to_one() -> None:
    pld = PLDAccountant().compose(ApproxDPEvent(2.0, 0.1)).loss_distribution()
    assert pld.infinity_mass == pytest.approx(0.1, abs=1e-15)
    assert float(pld.probabilities.sum()) + pld.infinity_mass == pytest.approx(1.0, abs=1e-12)


def _subsampled_approx_dp_atoms(q: float, eps0: float, delta0: float, remove: bool) -> list[tuple[float, float]]:
    """Poisson subsampling of the (eps0, delta0) pair of Kairouz, Oh & Viswanath 2015 (P: delta0 at
    +inf, (1 - delta0) e^eps0 / (1 + e^eps0) at eps0, the rest at -eps0; Q the mirror image with
    delta0 at -inf), written out for (M, Q) ("remove") and (Q, M) ("add"), M = q P + (1 - q) Q
    (Zhu, Dong & Wang 2022, Prop. 30): loss log(M / Q) = log(1 - q + q e^l) atom by atom."""
    up = (1 - delta0) / (1 + math.exp(-eps0))
    down = 1 - delta0 - up
    p = {math.inf: delta0, eps0: up, -eps0: down, -math.inf: 0.0}
    qq = {math.inf: 0.0, eps0: down, -eps0: up, -math.inf: delta0}
    atoms = []
    for loss in p:
        m = q * p[loss] + (1 - q) * qq[loss]
        if loss == math.inf:
            new = math.inf
        elif loss == -math.inf:
            new = math.log1p(-q)
        else:
            new = math.log1p(q * math.expm1(loss))
        if remove and m > 0:
            atoms.append((new, m))
        elif not remove and qq[loss] > 0:
            atoms.append((-new, qq[loss]))
    return atoms


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_poisson_subsampled_approx_dp_is_exact(epsilon: float) -> None:
    """Three Poisson-subsampled (1, 1e-3)-DP steps, both directions, by enumeration (64 combinations)."""
    q, eps0, delta0, count = 0.2, 1.0, 1e-3, 3
    exact = max(
        finite_atoms_delta(_subsampled_approx_dp_atoms(q, eps0, delta0, remove), count, epsilon)
        for remove in (True, False)
    )
    accountant = PLDAccountant().compose(PoissonSampledEvent(q, ApproxDPEvent(eps0, delta0)), count)
    got = accountant.delta(epsilon)
    assert exact - 1e-12 <= got <= exact + 1e-4  # the grid 1e-4 spreads the off-grid losses
    for direction in ("remove", "add"):
        pld = accountant.loss_distribution(direction)
        assert float(pld.probabilities.sum()) + pld.infinity_mass == pytest.approx(1.0, abs=1e-10)


def test_without_replacement_of_approx_dp_masses_sum_to_one() -> None:
    inner = ApproxDPEvent(1.0, 1e-2, neighbours=NeighbourRelation.REPLACE_ONE)
    accountant = PLDAccountant(NeighbourRelation.REPLACE_ONE).compose(SampledWithoutReplacementEvent(10, 5, inner))
    pld = accountant.loss_distribution()
    assert pld.infinity_mass == pytest.approx(0.5e-2, rel=1e-9)
    # up to the clipping of rounding-negative masses of the chord (was 1 + 0.005: the +inf mass twice)
    assert float(pld.probabilities.sum()) + pld.infinity_mass == pytest.approx(1.0, abs=1e-8)


# -- no FFT rounding floor where a direct computation is exact and cheap ----------------------------


def test_one_gaussian_pays_no_fft_rounding() -> None:
    """Was delta(10) = 5.2e-9 and epsilon(1e-9) = inf (the FFT's rounding bound, paid for a single
    event). Exact delta(10) = 9.8127e-23 (Balle & Wang 2018, Thm. 8, mpmath at 40 digits); what
    remains is the truncation of the upper tail, tail_mass = 1e-15."""
    accountant = PLDAccountant().compose(GaussianEvent(1.0))
    assert 9.8127058268469559e-23 <= accountant.delta(10.0) <= 2e-15
    assert accountant.loss_distribution().infinity_mass <= 1e-15
    epsilon = accountant.epsilon(1e-9)
    assert gaussian_delta(epsilon, 1.0) <= 1e-9 < gaussian_delta(epsilon * (1 - 1e-3), 1.0)


def test_one_laplace_is_exact_at_its_largest_loss() -> None:
    """Was delta(1.0) = 8.1e-10; Laplace(b = 1) is 1-DP, delta(eps) = 1 - e^((eps - 1/b)/2) below it."""
    accountant = PLDAccountant().compose(LaplaceEvent(1.0))
    assert accountant.delta(1.0) == 0.0
    exact = -math.expm1((0.5 - 1.0) / 2)
    assert exact <= accountant.delta(0.5) <= exact + 1e-10  # 0.5 is a grid point: exact there


def _binomial_pure_dp(eps0: float, count: int) -> tuple[np.ndarray, np.ndarray]:
    """count x eps0-DP (randomized response): loss eps0 (2 U - count), U ~ Bin(count, e^eps0 / (1 + e^eps0))."""
    p = math.exp(eps0) / (1 + math.exp(eps0))
    u = np.arange(count + 1)
    masses = np.array([math.comb(count, k) * p**k * (1 - p) ** (count - k) for k in range(count + 1)])
    return eps0 * (2 * u - count), masses


def test_pure_dp_composition_has_no_floor() -> None:
    """100 x 0.5-DP: was 4.6e-9 at +inf, so epsilon(1e-9) = inf though basic composition gives 50-DP
    with delta 0. The exact PLD is binomial; every grid mass must be at least the exact one (math.comb
    in integers, powers in float64: a relative 1e-13) and within a relative 1e-9 of it."""
    eps0, count = 0.5, 100
    accountant = PLDAccountant().compose(PureDPEvent(eps0), count)
    pld = accountant.loss_distribution()
    assert pld.infinity_mass <= 1e-18  # only the trimming of masses below tail_mass * 1e-3
    assert accountant.delta(eps0 * count) <= 1e-18
    losses, masses = _binomial_pure_dp(eps0, count)
    index = np.rint((losses - pld.losses[0]) / pld.discretization).astype(int)
    inside = (index >= 0) & (index < len(pld.losses))
    got = pld.probabilities[index[inside]]
    assert np.all(got >= masses[inside] * (1 - 1e-13))
    # the lowest kept mass also holds the trimmed ones below it (lumped up: pessimistic)
    assert np.all(got[1:] <= masses[inside][1:] * (1 + 1e-9))
    assert float(pld.probabilities.sum()) - float(got.sum()) == 0.0  # nothing between the atoms

    def exact_delta(epsilon: float) -> float:
        return math.fsum(m * max(0.0, -math.expm1(epsilon - loss)) for loss, m in zip(losses, masses, strict=True))

    for epsilon in (0.0, 5.0, 20.0, 40.0):
        assert exact_delta(epsilon) * (1 - 1e-12) <= accountant.delta(epsilon) <= exact_delta(epsilon) * (1 + 1e-9)
    epsilon = accountant.epsilon(1e-9)
    assert math.isfinite(epsilon)
    assert exact_delta(epsilon) <= 1e-9 < exact_delta(epsilon - 1e-3)


def test_few_pure_dp_parts_are_composed_directly() -> None:
    """Two distinct pure-DP events (strides 3000 and 5000 grid points): no floor either, and epsilon at
    delta = 0 is the basic-composition sum 20 x 0.3 + 20 x 0.5 = 16 (Dwork & Roth 2014, Thm. 3.16)."""
    accountant = PLDAccountant().compose(PureDPEvent(0.3), 20).compose(PureDPEvent(0.5), 20)
    assert accountant.loss_distribution().infinity_mass <= 1e-18
    assert accountant.delta(16.0) <= 1e-18
    assert 15.0 < accountant.epsilon(1e-12) < 16.0


def test_long_compositions_still_use_the_fft() -> None:
    # Too large for direct summation: the FFT path, its rounding bound at +inf, as before.
    accountant = PLDAccountant().compose(GaussianEvent(1.0), 2)
    assert 0 < accountant.loss_distribution().infinity_mass < 1e-11


# -- discrete Gaussians of large sigma in bounded memory ------------------------------------------


def discrete_gaussian_delta(epsilon: float, sigma: float) -> float:
    """Canonne, Kamath & Steinke 2020, Thm. 7 (sensitivity 1): delta = P(Z > eps sigma^2 - 1/2)
    - e^eps P(Z > eps sigma^2 + 1/2), Z ~ N_Z(0, sigma^2), summed over every integer within 40
    sigma (math.fsum)."""
    reach = int(40 * sigma) + 2
    z = np.arange(-reach, reach + 1, dtype=np.float64)
    weights = np.exp(-z * z / (2 * sigma * sigma))
    total = math.fsum(weights)
    above = math.fsum(weights[z > epsilon * sigma * sigma - 0.5]) / total
    beyond = math.fsum(weights[z > epsilon * sigma * sigma + 0.5]) / total
    return above - math.exp(epsilon) * beyond


@pytest.mark.parametrize("epsilon", [0.0, 1e-4, 2e-4])
def test_large_sigma_discrete_gaussian_matches_direct_summation(epsilon: float) -> None:
    """sigma = 2e4 goes through the Euler-Maclaurin tails; the grid points are answered exactly up
    to a relative 1e-9 (the remainder is below 7e-19; the rest is float64 rounding of the tails and
    of this reference)."""
    sigma = 2e4
    exact = discrete_gaussian_delta(epsilon, sigma)
    got = PLDAccountant().compose(DiscreteGaussianEvent(sigma)).delta(epsilon)
    assert exact * (1 - 1e-9) <= got <= exact * (1 + 1e-8)


@pytest.mark.parametrize("sigma", [2e4, 1e5, 1e7, 1e9])
def test_large_sigma_discrete_gaussian_in_bounded_memory(sigma: float) -> None:
    """Was 80 sigma atoms: 1 GB at sigma = 1e5, MemoryError at 1e7. With sensitivity 1, delta(0) =
    P(Z = 0) = 1 / sum_z e^(-z^2 / 2 sigma^2) = 1 / (sigma sqrt(2 pi)) up to a relative
    2 e^(-2 pi^2 sigma^2) (Poisson summation), and it is close to the continuous Gaussian."""
    tracemalloc.start()
    try:
        accountant = PLDAccountant().compose(DiscreteGaussianEvent(sigma), 10)
        epsilon = accountant.epsilon(1e-6)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20
    # The continuous Gaussians merge into one, answered by its exact profile; the discrete one is
    # answered on the grid (step 1e-4), which resolves epsilon only to about a grid step here.
    continuous = PLDAccountant().compose(GaussianEvent(sigma), 10).epsilon(1e-6)
    assert epsilon == pytest.approx(continuous, abs=2e-4)
    exact = 1 / (sigma * math.sqrt(2 * math.pi))
    once = PLDAccountant().compose(DiscreteGaussianEvent(sigma)).delta(0.0)
    # delta(0) is a difference of two tails near 1/2: float64 rounding of those, 2e-16, is the limit
    assert exact - 2e-16 <= once <= exact * (1 + 1e-6)


def test_subsampled_large_sigma_discrete_gaussian_is_close_to_the_continuous_one() -> None:
    # Poisson subsampling needs atoms: a large sigma gets 2^20 coarse ones (losses rounded up).
    discrete = PLDAccountant().compose(PoissonSampledEvent(0.1, DiscreteGaussianEvent(2e4)), 10).epsilon(1e-6)
    continuous = PLDAccountant().compose(PoissonSampledEvent(0.1, GaussianEvent(2e4)), 10).epsilon(1e-6)
    assert continuous * (1 - 1e-4) <= discrete <= continuous * 1.002
