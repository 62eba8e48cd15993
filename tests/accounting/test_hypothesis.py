"""The hypothesis-testing view: privacy profiles, trade-off curves, the (eps, delta) region, divergences, plots."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import integrate, stats

from dpkit._errors import InvalidParameterError
from dpkit.accounting._hypothesis import (
    gaussian_delta,
    gaussian_epsilon,
    gaussian_kl,
    gaussian_renyi,
    gaussian_tradeoff,
    hockey_stick,
    kl_bound_pure,
    kl_bound_pure_tight,
    kl_divergence,
    laplace_delta,
    laplace_kl,
    laplace_renyi,
    laplace_tradeoff,
    max_divergence,
    privacy_profile,
    renyi_divergence,
    satisfies_region,
    tradeoff_from_epsilon_delta,
    tradeoff_from_pair,
    tradeoff_from_profile,
)
from dpkit.events import GaussianEvent, LaplaceEvent

ALPHAS = np.linspace(0.0, 1.0, 401)


def randomized_response(epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    keep = math.exp(epsilon) / (1 + math.exp(epsilon))
    return np.array([keep, 1 - keep]), np.array([1 - keep, keep])


def discretized_gaussian(mu: float, points: int = 4001) -> tuple[np.ndarray, np.ndarray]:
    y = np.linspace(-12, 12 + mu, points)
    p, q = stats.norm.pdf(y), stats.norm.pdf(y, loc=mu)
    return p / p.sum(), q / q.sum()


# -- privacy profiles against numerical integration ---------------------------------------------


def _hockey_stick_integral(p_density, q_density, epsilon: float, breakpoints: list[float]) -> float:
    def integrand(y: float) -> float:
        return max(p_density(y) - math.exp(epsilon) * q_density(y), 0.0)

    edges = [-60.0, *breakpoints, 60.0]
    return sum(
        integrate.quad(integrand, a, b, limit=200, epsabs=1e-13)[0] for a, b in zip(edges[:-1], edges[1:], strict=True)
    )


@pytest.mark.parametrize("mu", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("epsilon", [0.0, 0.5, 1.0, 3.0])
def test_gaussian_delta_matches_the_hockey_stick_integral(mu: float, epsilon: float) -> None:
    # the loss exceeds eps on y < mu/2 - eps/mu (P = N(0,1), Q = N(mu,1)): split there for quad.
    split = mu / 2 - epsilon / mu
    numeric = _hockey_stick_integral(stats.norm(0, 1).pdf, stats.norm(mu, 1).pdf, epsilon, [split])
    assert gaussian_delta(mu, epsilon) == pytest.approx(numeric, rel=1e-7, abs=1e-13)


def test_gaussian_delta_matches_mpmath_at_high_precision_in_the_tail() -> None:
    mpmath.mp.dps = 50
    mu, epsilon = 0.5, 6.0
    exact = mpmath.ncdf(-epsilon / mu + mu / 2) - mpmath.e**epsilon * mpmath.ncdf(-epsilon / mu - mu / 2)
    assert gaussian_delta(mu, epsilon) == pytest.approx(float(exact), rel=1e-8)
    assert 0 < gaussian_delta(mu, epsilon) < 1e-30


@pytest.mark.parametrize("b", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.4, 1.5, 2.5])
def test_laplace_delta_matches_the_hockey_stick_integral(b: float, epsilon: float) -> None:
    def laplace(loc: float):
        return lambda y: math.exp(-abs(y - loc) / b) / (2 * b)

    numeric = _hockey_stick_integral(laplace(0.0), laplace(1.0), epsilon, [0.0, (1 - b * epsilon) / 2, 1.0])
    assert laplace_delta(b, epsilon) == pytest.approx(numeric, rel=1e-7, abs=1e-12)
    if epsilon >= 1 / b:
        assert laplace_delta(b, epsilon) == 0.0


def test_gaussian_epsilon_inverts_the_profile() -> None:
    for mu in (0.1, 1.0, 5.0):
        for delta in (1e-2, 1e-5, 1e-10):
            epsilon = gaussian_epsilon(mu, delta)
            assert gaussian_delta(mu, epsilon) == pytest.approx(delta, rel=1e-8)
    assert gaussian_epsilon(1.0, 0.0) == math.inf
    assert gaussian_epsilon(1.0, 0.9) == 0.0


def test_hockey_stick_and_privacy_profile_on_finite_pairs() -> None:
    p, q = randomized_response(1.0)
    assert hockey_stick(p, q, 1.0) == pytest.approx(0.0, abs=1e-15)
    assert hockey_stick(p, q, 0.0) == pytest.approx(p[0] - q[0])
    # not absolutely continuous: the mass of P outside Q's support is a delta at every epsilon
    assert hockey_stick([0.5, 0.5], [1.0, 0.0], 10.0) == pytest.approx(0.5)
    epsilons = np.array([0.0, 0.5, 1.0, 2.0])
    profile = privacy_profile((p, q), epsilons)
    assert profile.tolist() == pytest.approx([hockey_stick(p, q, e) for e in epsilons])
    # asymmetric pair: the symmetric profile takes both orders
    a, b = [0.6, 0.4, 0.0], [0.3, 0.3, 0.4]
    assert privacy_profile((a, b), [0.1], symmetric=False)[0] == pytest.approx(hockey_stick(a, b, 0.1))
    assert privacy_profile((a, b), [0.1])[0] == pytest.approx(max(hockey_stick(a, b, 0.1), hockey_stick(b, a, 0.1)))


def test_privacy_profile_of_events_and_accountants() -> None:
    epsilons = [0.0, 1.0, 2.0]
    assert privacy_profile(GaussianEvent(2.0), epsilons).tolist() == pytest.approx(
        [gaussian_delta(0.5, e) for e in epsilons]
    )
    assert privacy_profile(LaplaceEvent(2.0), epsilons).tolist() == pytest.approx(
        [laplace_delta(2.0, e) for e in epsilons]
    )

    class Fixed:
        def delta(self, epsilon: float) -> float:
            return 0.5 * math.exp(-epsilon)

    assert privacy_profile(Fixed(), [0.0, 1.0]).tolist() == pytest.approx([0.5, 0.5 / math.e])
    with pytest.raises(InvalidParameterError):
        privacy_profile("gaussian", [1.0])


def test_discretized_gaussian_profile_approaches_the_closed_form() -> None:
    p, q = discretized_gaussian(1.0)
    for epsilon in (0.0, 1.0, 2.0):
        assert privacy_profile((p, q), [epsilon])[0] == pytest.approx(gaussian_delta(1.0, epsilon), abs=2e-3)


# -- trade-off curves -------------------------------------------------------------------------------


def _assert_tradeoff_function(beta: np.ndarray, alphas: np.ndarray) -> None:
    """DRS 2022 Prop. 2.2: convex, continuous, non-increasing, beta(alpha) <= 1 - alpha."""
    assert np.all(np.diff(beta) <= 1e-12)
    assert np.all(beta <= 1 - alphas + 1e-12) and np.all(beta >= 0)
    slopes = np.diff(beta) / np.diff(alphas)
    assert np.all(np.diff(slopes) >= -1e-6)


@pytest.mark.parametrize(
    "curve",
    [
        lambda a: gaussian_tradeoff(1.0, a),
        lambda a: gaussian_tradeoff(0.0, a),
        lambda a: laplace_tradeoff(0.7, a),
        lambda a: tradeoff_from_epsilon_delta(1.0, 1e-3, a),
        lambda a: tradeoff_from_pair(*randomized_response(1.2), a),
        lambda a: tradeoff_from_pair(*discretized_gaussian(1.5, 801), a),
        lambda a: tradeoff_from_profile(np.linspace(0, 4, 50), gaussian_delta(1.0, np.linspace(0, 4, 50)), a),
    ],
)
def test_every_tradeoff_curve_is_a_tradeoff_function(curve) -> None:
    _assert_tradeoff_function(np.asarray(curve(ALPHAS)), ALPHAS)


def test_tradeoff_curves_are_symmetric_for_symmetric_pairs() -> None:
    # a symmetric trade-off function is its own inverse: f(f(alpha)) = alpha (DRS 2022, Sec. 2.1)
    inner = ALPHAS[1:-1]
    for curve in (lambda a: gaussian_tradeoff(1.3, a), lambda a: laplace_tradeoff(0.8, a)):
        assert curve(curve(inner)) == pytest.approx(inner, abs=1e-9)
    p, q = randomized_response(0.9)
    assert tradeoff_from_pair(p, q, ALPHAS) == pytest.approx(tradeoff_from_pair(q, p, ALPHAS))
    f = tradeoff_from_pair(p, q, ALPHAS)
    assert tradeoff_from_pair(p, q, f) == pytest.approx(ALPHAS, abs=1e-12)


def test_randomized_response_tradeoff_is_the_pure_dp_curve() -> None:
    # binary randomized response is the extremal eps-DP pair (Kairouz, Oh & Viswanath 2015)
    p, q = randomized_response(1.0)
    assert tradeoff_from_pair(p, q, ALPHAS) == pytest.approx(tradeoff_from_epsilon_delta(1.0, 0.0, ALPHAS), abs=1e-12)


def test_laplace_tradeoff_matches_neyman_pearson_on_a_fine_grid() -> None:
    b = 0.8
    y = np.linspace(-40, 41, 200001)
    p, q = np.exp(-np.abs(y) / b), np.exp(-np.abs(y - 1) / b)
    beta = tradeoff_from_pair(p / p.sum(), q / q.sum(), ALPHAS)
    assert beta == pytest.approx(laplace_tradeoff(b, ALPHAS), abs=1e-3)


def test_gaussian_tradeoff_matches_neyman_pearson_and_the_profile() -> None:
    beta = tradeoff_from_pair(*discretized_gaussian(1.0), ALPHAS)
    assert beta == pytest.approx(gaussian_tradeoff(1.0, ALPHAS), abs=2e-3)
    epsilons = np.linspace(0, 8, 400)
    dual = tradeoff_from_profile(epsilons, gaussian_delta(1.0, epsilons), ALPHAS)
    assert dual == pytest.approx(gaussian_tradeoff(1.0, ALPHAS), abs=2e-3)
    assert np.all(dual <= gaussian_tradeoff(1.0, ALPHAS) + 1e-12)  # an envelope of lower bounds


def test_a_mechanism_satisfying_eps_delta_lies_above_its_bound() -> None:
    for mu, delta in ((0.5, 1e-5), (1.0, 1e-3), (2.0, 1e-2)):
        epsilon = gaussian_epsilon(mu, delta)
        assert np.all(gaussian_tradeoff(mu, ALPHAS) >= tradeoff_from_epsilon_delta(epsilon, delta, ALPHAS) - 1e-9)
    b = 0.5
    assert np.all(laplace_tradeoff(b, ALPHAS) >= tradeoff_from_epsilon_delta(1 / b, 0.0, ALPHAS) - 1e-12)
    assert np.all(
        laplace_tradeoff(b, ALPHAS) >= tradeoff_from_epsilon_delta(1.0, laplace_delta(b, 1.0), ALPHAS) - 1e-12
    )


def test_tradeoff_edge_values_and_scalars() -> None:
    assert gaussian_tradeoff(1.0, 0.0) == 1.0 and gaussian_tradeoff(1.0, 1.0) == 0.0
    assert laplace_tradeoff(1.0, 0.0) == 1.0 and laplace_tradeoff(1.0, 1.0) == 0.0
    assert isinstance(tradeoff_from_pair([0.5, 0.5], [0.5, 0.5], 0.25), float)
    assert tradeoff_from_pair([0.5, 0.5], [0.5, 0.5], 0.25) == pytest.approx(0.75)
    # disjoint supports: perfect test
    assert tradeoff_from_pair([1.0, 0.0], [0.0, 1.0], [0.0, 0.5]).tolist() == [0.0, 0.0]


# -- the (eps, delta) region ------------------------------------------------------------------------


def test_region_check() -> None:
    epsilon, delta = 1.0, 0.01
    # every point of the (eps, delta) trade-off curve is on the boundary, hence inside
    beta = tradeoff_from_epsilon_delta(epsilon, delta, ALPHAS)
    assert np.all(satisfies_region(ALPHAS, beta, epsilon, delta))
    # and strictly below it is outside
    inner = ALPHAS < 0.3
    assert not np.any(satisfies_region(ALPHAS[inner], beta[inner] - 0.01, epsilon, delta))
    # the symmetric inequality matters: a point that only violates e^eps P_FA + P_MD >= 1 - delta
    assert not satisfies_region(0.01, 0.9, 1.0, 0.0)
    assert satisfies_region(0.9, 0.01, 1.0, 0.0) is False
    assert satisfies_region(0.5, 0.5, 0.0, 0.0) is True


# -- divergences ------------------------------------------------------------------------------------


def test_finite_divergences_on_randomized_response() -> None:
    epsilon = 0.7
    p, q = randomized_response(epsilon)
    assert max_divergence(p, q) == pytest.approx(epsilon)
    assert renyi_divergence(p, q, math.inf) == pytest.approx(epsilon)
    assert kl_divergence(p, q) == pytest.approx(kl_bound_pure_tight(epsilon))  # attains the tight bound
    orders = [0.5, 2.0, 10.0, 100.0]
    values = [renyi_divergence(p, q, a) for a in orders]
    assert values == sorted(values) and values[-1] <= epsilon
    assert renyi_divergence(p, q, 1.0000001) == pytest.approx(kl_divergence(p, q), rel=1e-5)
    assert kl_divergence([0.5, 0.5], [1.0, 0.0]) == math.inf
    assert max_divergence([0.5, 0.5], [1.0, 0.0]) == math.inf
    assert renyi_divergence([0.5, 0.5], [1.0, 0.0], 2.0) == math.inf


def test_gaussian_and_laplace_closed_form_divergences_by_integration() -> None:
    mu, b = 1.3, 0.7
    gaussian_p, gaussian_q = discretized_gaussian(mu, 20001)
    assert kl_divergence(gaussian_p, gaussian_q) == pytest.approx(gaussian_kl(mu), rel=1e-6)
    assert renyi_divergence(gaussian_p, gaussian_q, 3.0) == pytest.approx(gaussian_renyi(mu, 3.0), rel=1e-6)

    def laplace(loc: float):
        return lambda y: math.exp(-abs(y - loc) / b) / (2 * b)

    p, q = laplace(0.0), laplace(1.0)
    pieces = [(-60, 0), (0, 1), (1, 60)]
    kl = sum(integrate.quad(lambda y: p(y) * math.log(p(y) / q(y)), lo, hi)[0] for lo, hi in pieces)
    assert laplace_kl(b) == pytest.approx(kl, rel=1e-9)
    for order in (0.3, 0.5, 0.8, 2.0, 5.0):
        mass = sum(
            integrate.quad(lambda y, order=order: p(y) ** order * q(y) ** (1 - order), lo, hi)[0] for lo, hi in pieces
        )
        assert laplace_renyi(b, order) == pytest.approx(math.log(mass) / (order - 1), rel=1e-8)
    assert laplace_renyi(b, 1.0) == laplace_kl(b)
    assert laplace_renyi(b, math.inf) == pytest.approx(1 / b)


def test_kl_bounds_for_pure_dp_pairs() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        size = int(rng.integers(2, 8))
        p, q = rng.dirichlet(np.ones(size)), rng.dirichlet(np.ones(size))
        epsilon = max(max_divergence(p, q), max_divergence(q, p))
        kl = kl_divergence(p, q)
        assert kl <= kl_bound_pure_tight(epsilon) + 1e-12
        assert kl_bound_pure_tight(epsilon) <= kl_bound_pure(epsilon)
        assert kl_bound_pure_tight(epsilon) <= epsilon**2 / 2 + 1e-15
    for epsilon in (0.01, 0.5, 1.0, 3.0, 8.0):
        # randomized response is the worst case: it attains the tight bound, below seed 003's bound
        kl = kl_divergence(*randomized_response(epsilon))
        assert kl == pytest.approx(kl_bound_pure_tight(epsilon), rel=1e-9)
        assert kl <= kl_bound_pure(epsilon)


# -- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: gaussian_delta(-1.0, 1.0),
        lambda: gaussian_delta(math.nan, 1.0),
        lambda: gaussian_delta(1.0, -0.1),
        lambda: gaussian_delta(1.0, [0.1, math.nan]),
        lambda: gaussian_epsilon(1.0, 1.0),
        lambda: gaussian_epsilon(1.0, -1e-5),
        lambda: laplace_delta(0.0, 1.0),
        lambda: laplace_delta(True, 1.0),
        lambda: gaussian_tradeoff(1.0, 1.5),
        lambda: laplace_tradeoff(1.0, -0.1),
        lambda: tradeoff_from_epsilon_delta(1.0, 1.0, 0.5),
        lambda: tradeoff_from_profile([0.0, 1.0], [0.1], 0.5),
        lambda: tradeoff_from_pair([0.5, 0.5], [1.0], 0.5),
        lambda: tradeoff_from_pair([0.5, 0.6], [0.5, 0.5], 0.5),
        lambda: hockey_stick([0.5, -0.5, 1.0], [0.5, 0.25, 0.25], 0.0),
        lambda: hockey_stick([[0.5, 0.5]], [[0.5, 0.5]], 0.0),
        lambda: hockey_stick([0.5, 0.5], [0.5, 0.5], math.nan),
        lambda: kl_divergence([], []),
        lambda: renyi_divergence([0.5, 0.5], [0.5, 0.5], 0.0),
        lambda: satisfies_region(0.5, 1.2, 1.0, 0.0),
        lambda: satisfies_region(0.5, 0.5, 1.0, math.nan),
        lambda: kl_bound_pure(-1.0),
        lambda: laplace_renyi(1.0, -2.0),
    ],
)
def test_bad_inputs_raise_invalid_parameter_error(call) -> None:
    with pytest.raises(InvalidParameterError):
        call()


# -- plots ----------------------------------------------------------------------------------------------


def test_plots_write_non_empty_pngs(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from dpkit.accounting._plots import plot_epsilon_vs_steps, plot_privacy_loss_distribution, plot_tradeoff

    tradeoff = tmp_path / "tradeoff.png"
    figure = plot_tradeoff(
        {"1-GDP": (ALPHAS, gaussian_tradeoff(1.0, ALPHAS)), "Laplace b=1": (ALPHAS, laplace_tradeoff(1.0, ALPHAS))},
        path=tradeoff,
    )
    assert len(figure.axes[0].lines) == 3  # two curves and the diagonal
    losses = tmp_path / "pld.png"
    plot_privacy_loss_distribution([-1.0, 0.0, 1.0], [0.2, 0.3, 0.5], path=losses)
    steps = tmp_path / "steps.png"
    plot_epsilon_vs_steps({"GDP": ([1, 10, 100], [0.5, 1.6, 5.0]), "basic": ([1, 10, 100], [1, 10, 100])}, path=steps)
    for path in (tradeoff, losses, steps):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 1000


def test_plots_refuse_malformed_series() -> None:
    pytest.importorskip("matplotlib")
    from dpkit.accounting._plots import plot_privacy_loss_distribution, plot_tradeoff

    with pytest.raises(InvalidParameterError):
        plot_tradeoff({"bad": ([0.0, 1.0], [1.0])})
    with pytest.raises(InvalidParameterError):
        plot_tradeoff({"bad": 3})
    with pytest.raises(InvalidParameterError):
        plot_privacy_loss_distribution([0.0, 1.0], [0.5, -0.5])
