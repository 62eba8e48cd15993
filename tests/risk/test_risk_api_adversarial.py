"""Adversarial use of the public dpkit.risk API: bad input is refused by name, boundaries and
monotonicity hold, and the formulas match their documented closed forms."""

import math

import numpy as np
import pytest

import dpkit
from dpkit.events import GaussianEvent
from dpkit.noise import InsecureSeededRandom
from dpkit.risk import (
    CostModel,
    SensitivityDistribution,
    composition,
    confidence_from_accountant,
    coupled_confidence,
    dkw_confidence,
    dkw_sample_size,
    epsilon_at_risk,
    gaussian_loss_confidence,
    laplace_confidence,
    laplace_loss_confidence,
    laplace_risk,
    sampled_sensitivity,
)

# -- gaussian_loss_confidence ---------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, -1, 1.5, True, "2", None])
def test_gaussian_loss_confidence_refuses_a_bad_count(count):
    with pytest.raises(dpkit.InvalidParameterError, match="^count"):
        gaussian_loss_confidence(0.5, 1.0, count)


def test_gaussian_loss_confidence_composes_like_one_gaussian():
    # k Gaussian steps of multiplier sigma are one Gaussian of multiplier sigma / sqrt(k)
    assert math.isclose(gaussian_loss_confidence(0.7, 2.0, 4), gaussian_loss_confidence(0.7, 1.0), rel_tol=1e-14)
    assert gaussian_loss_confidence(0.7, 2.0, np.int64(4)) == gaussian_loss_confidence(0.7, 2.0, 4)


# -- SensitivityDistribution and the coupled confidence ---------------------------------------------


@pytest.mark.parametrize("samples", [["a", "b"], [True, False], [[1.0], [2.0, 3.0]], [1 + 2j]])
def test_sensitivity_distribution_refuses_non_numbers(samples):
    with pytest.raises(dpkit.InvalidParameterError, match="^samples"):
        SensitivityDistribution(samples, rho=0.1)


def test_sensitivity_distributions_compare_without_raising():
    first = SensitivityDistribution(np.array([0.5, 1.0, 2.0]), rho=0.1)
    same = SensitivityDistribution(np.array([2.0, 0.5, 1.0]), rho=0.1)  # sorted when built
    other = SensitivityDistribution(np.array([0.5, 1.0, 3.0]), rho=0.1)
    assert first == same
    assert first != other
    assert first != SensitivityDistribution(np.array([0.5, 1.0, 2.0]), rho=0.2)
    assert first != SensitivityDistribution(np.array([0.5, 1.0]), rho=0.1)


@pytest.mark.parametrize("value", [float("nan"), "a", None, True])
def test_empirical_cdf_refuses_non_numbers(value):
    dist = SensitivityDistribution(np.array([0.5, 1.0, 2.0]), rho=0.1)
    with pytest.raises(dpkit.InvalidParameterError, match="^value"):
        dist.cdf(value)
    with pytest.raises(dpkit.InvalidParameterError, match="^value"):
        dist.band(value)


def test_empirical_cdf_at_the_boundaries():
    dist = SensitivityDistribution(np.array([0.5, 1.0, 2.0]), rho=0.1)
    assert (dist.cdf(-math.inf), dist.cdf(0.5), dist.cdf(math.inf)) == (0.0, 1 / 3, 1.0)
    assert dist.band(math.inf) == (0.9, 1.0)


@pytest.mark.parametrize("distribution", [[0.5, 1.0], np.array([0.5, 1.0]), None, 0.1])
def test_coupled_confidence_needs_a_sensitivity_distribution(distribution):
    with pytest.raises(dpkit.InvalidParameterError, match="^distribution"):
        coupled_confidence(0.5, 1.0, distribution)


def test_coupled_confidence_is_monotone_and_bounded_by_alpha():
    dist = SensitivityDistribution(np.linspace(0.1, 1.0, 1000), rho=0.05)
    values = [coupled_confidence(e, 1.0, dist) for e in np.linspace(0.0, 1.5, 31)]
    assert values[0] == 0.0
    assert all(b >= a for a, b in zip(values, values[1:], strict=False))
    assert values[-1] <= dist.alpha * (1 - dist.rho) + 1e-15


@pytest.mark.parametrize("query", [lambda x: "a", lambda x: None])
def test_sampled_sensitivity_refuses_a_query_that_does_not_return_numbers(query):
    def pair(rng):
        return np.zeros(3), np.ones(3)

    with pytest.raises(dpkit.InvalidParameterError, match="^query"):
        sampled_sensitivity(query, pair, 5, rng=InsecureSeededRandom(0))


def test_sampled_sensitivity_refuses_a_bad_sampler_or_query():
    with pytest.raises(dpkit.InvalidParameterError, match="^sampler"):
        sampled_sensitivity(lambda x: 1.0, lambda rng: 5, 5, rng=InsecureSeededRandom(0))
    with pytest.raises(dpkit.InvalidParameterError, match="^query"):
        sampled_sensitivity(5, lambda rng: (1, 2), 5, rng=InsecureSeededRandom(0))
    with pytest.raises(dpkit.InvalidParameterError, match="^sampler"):
        sampled_sensitivity(lambda x: 1.0, None, 5, rng=InsecureSeededRandom(0))
    with pytest.raises(dpkit.InvalidParameterError, match="^query"):  # shapes differ between x and y
        sampled_sensitivity(lambda x: x, lambda rng: (np.zeros(3), np.zeros(2)), 5, rng=InsecureSeededRandom(0))


# -- composition ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["basic", "advanced", "optimal", "pld", "privacy_at_risk"])
def test_composition_checks_dimension_for_every_method(method):
    with pytest.raises(dpkit.InvalidParameterError, match="^dimension"):
        composition(10, 0.3, 0.5, 1e-5, method=method, dimension=0)


def test_composition_boundaries_and_monotonicity():
    # privacy at risk with epsilon = epsilon0 (confidence 1 at epsilon0) and at epsilon = 0 (confidence 0)
    # is the advanced composition bound; in between it is smaller.
    advanced = composition(10, 0.3, 0.5, 1e-5, method="advanced")
    assert math.isclose(composition(10, 0.5, 0.5, 1e-5), advanced, rel_tol=1e-14)
    assert math.isclose(composition(10, 0.0, 0.5, 1e-5), advanced, rel_tol=1e-14)
    assert composition(10, 0.3, 0.5, 1e-5) < advanced
    for method in ("basic", "advanced", "privacy_at_risk"):
        values = [composition(k, 0.3, 0.5, 1e-5, method=method) for k in (1, 2, 5, 10, 100)]
        assert all(b > a for a, b in zip(values, values[1:], strict=False)), method
        more_epsilon0 = [composition(10, 0.3, e0, 1e-5, method=method) for e0 in (0.4, 0.5, 1.0, 2.0)]
        assert all(b > a for a, b in zip(more_epsilon0, more_epsilon0[1:], strict=False)), method


# -- Laplace privacy at risk: boundaries, monotonicity, closed form ----------------------------------


def test_laplace_confidence_boundaries():
    for k in (1, 2, 5):
        assert laplace_confidence(0.0, 1.0, k) == 0.0
        assert laplace_risk(0.0, 1.0, k) == 1.0
        assert laplace_confidence(1.0, 1.0, k) == 1.0 and laplace_risk(1.0, 1.0, k) == 0.0
        assert laplace_confidence(math.inf, 1.0, k) == 1.0
        assert epsilon_at_risk(0.0, 1.0, k) == 1.0 and epsilon_at_risk(1.0, 1.0, k) == 0.0


def test_laplace_confidence_monotonicity():
    grid = np.linspace(0.0, 2.0, 41)
    for k in (1, 2, 5):
        for epsilon0 in (0.1, 0.5, 1.0, 3.0):
            confidence = [laplace_confidence(e, epsilon0, k) for e in grid]
            assert all(
                b >= a for a, b in zip(confidence, confidence[1:], strict=False)
            )  # more epsilon, more confidence
            risk = [laplace_risk(e, epsilon0, k) for e in grid]
            assert all(b <= a for a, b in zip(risk, risk[1:], strict=False))  # ... never more risk
            assert max(abs(c + r - 1) for c, r in zip(confidence, risk, strict=True)) < 1e-12
    by_epsilon0 = [laplace_confidence(0.3, e0, 3) for e0 in (0.4, 0.5, 1.0, 2.0)]
    assert all(b < a for a, b in zip(by_epsilon0, by_epsilon0[1:], strict=False))
    by_dimension = [laplace_confidence(0.3, 1.0, k) for k in range(1, 8)]
    assert all(b < a for a, b in zip(by_dimension, by_dimension[1:], strict=False))


def test_laplace_confidence_matches_the_seed_closed_form():
    # k = 1: c_1 = (1 - e^-eps)/(1 - e^-eps0); for k = 2, |S_2| has CDF 1 - e^-x (1 + x/2)
    for epsilon, epsilon0 in ((0.1, 0.5), (0.3, 0.7), (1.0, 3.0)):
        assert math.isclose(
            laplace_confidence(epsilon, epsilon0), -math.expm1(-epsilon) / -math.expm1(-epsilon0), rel_tol=1e-14
        )

        def f2(x):
            return 1 - math.exp(-x) * (1 + x / 2)

        assert math.isclose(laplace_confidence(epsilon, epsilon0, 2), f2(epsilon) / f2(epsilon0), rel_tol=1e-12)


def test_laplace_loss_confidence_boundaries():
    assert laplace_loss_confidence(0.0, 1.0) == 0.5 * math.exp(-0.5)
    assert laplace_loss_confidence(1.0, 1.0) == 1.0
    assert confidence_from_accountant(GaussianEvent(1.0), math.inf) == 1.0


# -- cost model -----------------------------------------------------------------------------------


def test_cost_model_boundaries_and_monotonicity():
    model = CostModel(550_000.0, E_min=10.0, c=1.0)
    assert model.cost(0.0) == 10.0
    assert model.cost(math.inf) == 550_010.0
    costs = [model.cost(e) for e in np.linspace(0.0, 5.0, 51)]
    assert all(b > a for a, b in zip(costs, costs[1:], strict=False))  # more epsilon, more cost
    # seed 001, eq. (2): E_eps = E_min + E e^(-c/eps)
    assert math.isclose(model.cost(0.5), 10.0 + 550_000.0 * math.exp(-2.0), rel_tol=1e-15)
    # promising epsilon0 (confidence 1) or nothing (confidence 0) costs E_eps0
    assert model.expected_budget(0.5, 0.5) == model.cost(0.5)
    assert model.expected_budget(0.0, 0.5) == model.cost(0.5)
    best = model.optimal_epsilon(0.5)
    grid = np.linspace(1e-4, 0.5, 2001)
    assert model.expected_budget(best, 0.5) <= min(model.expected_budget(e, 0.5) for e in grid) * (1 + 1e-12)


@pytest.mark.parametrize("field", ["E", "E_min", "c"])
@pytest.mark.parametrize("bad", [float("nan"), "1", None, True, -1.0, math.inf])
def test_cost_model_refuses_bad_parameters(field, bad):
    arguments = {"E": 1.0, "E_min": 0.0, "c": 1.0, field: bad}
    with pytest.raises(dpkit.InvalidParameterError, match=f"^{field}"):
        CostModel(**arguments)


def test_dkw_sample_size_and_confidence_agree():
    for rho in (0.01, 0.05, 0.3):
        for alpha in (0.5, 0.9, 0.999999):
            n = dkw_sample_size(rho, alpha)
            assert dkw_confidence(n, rho) >= alpha
            assert n == 1 or dkw_confidence(n - 1, rho) < alpha
