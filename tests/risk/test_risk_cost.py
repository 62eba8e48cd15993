"""The cost model: formula, optimum against a brute-force grid, GDPR illustration, bad input."""

import math

import numpy as np
import pytest

from dpkit import InvalidParameterError
from dpkit.risk import CostModel, laplace_confidence


def test_cost_formula_and_shape() -> None:
    model = CostModel(1000.0, E_min=10.0, c=2.0)
    assert model.cost(1.0) == pytest.approx(10.0 + 1000.0 * math.exp(-2.0))
    grid = np.linspace(0.1, 5.0, 200)
    costs = np.array([model.cost(e) for e in grid])
    assert np.all(np.diff(costs) > 0)  # increasing
    convex_part = costs[grid <= 1.0]  # convex for epsilon <= c / 2
    assert np.all(np.diff(convex_part, 2) >= -1e-9)


def test_expected_budget_formula() -> None:
    model = CostModel(550_000.0)
    for eps0 in (0.5, 0.7):
        for eps in (0.1, 0.3):
            conf = laplace_confidence(eps, eps0)
            expected = conf * model.cost(eps) + (1 - conf) * model.cost(eps0)
            assert model.expected_budget(eps, eps0) == pytest.approx(expected, rel=1e-14)


@pytest.mark.parametrize(
    ("E", "E_min", "c", "eps0"),
    [
        (550_000.0, 0.0, 1.0, 0.5),
        (550_000.0, 0.0, 1.0, 0.6),
        (550_000.0, 0.0, 1.0, 0.7),
        (1.0, 0.3, 0.2, 2.0),
        (10.0, 0.0, 5.0, 4.0),
        (3.0, 1.0, 1.0, 8.0),
    ],
)
def test_optimum_against_brute_force_grid(E: float, E_min: float, c: float, eps0: float) -> None:
    model = CostModel(E, E_min=E_min, c=c)
    best = model.optimal_epsilon(eps0)
    grid = np.linspace(eps0 * 1e-4, eps0, 20_001)
    budgets = np.array([model.expected_budget(e, eps0) for e in grid])
    grid_best = grid[int(np.argmin(budgets))]
    assert abs(best - grid_best) <= 2 * (grid[1] - grid[0])
    assert model.expected_budget(best, eps0) <= budgets.min() + 1e-9 * E
    # uniqueness, checked: the budget decreases then increases
    slope_sign = np.sign(np.diff(budgets))
    changes = np.count_nonzero(np.diff(slope_sign[slope_sign != 0]))
    assert changes == 1


def test_optimum_in_two_dimensions_against_grid() -> None:
    model = CostModel(550_000.0)
    best = model.optimal_epsilon(0.6, dimension=2)
    grid = np.linspace(1e-4, 0.6, 6001)
    budgets = [model.expected_budget(e, 0.6, 2) for e in grid]
    assert abs(best - grid[int(np.argmin(budgets))]) <= 2e-4


def test_gdpr_privacy_at_risk_avoids_over_estimating_the_budget() -> None:
    model = CostModel(550_000.0, c=1.0)
    for eps0 in (0.5, 0.6, 0.7):
        best = model.optimal_epsilon(eps0)
        assert model.expected_budget(best, eps0) < model.cost(eps0)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: CostModel(0.0), "E"),
        (lambda: CostModel(-1.0), "E"),
        (lambda: CostModel(1.0, c=0.0), "c"),
        (lambda: CostModel(1.0, c=-2.0), "c"),
        (lambda: CostModel(1.0, E_min=-1.0), "E_min"),
        (lambda: CostModel(1.0).cost(-0.1), "epsilon"),
        (lambda: CostModel(1.0).optimal_epsilon(0.0), "epsilon0"),
        (lambda: CostModel(1.0).expected_budget(0.1, -1.0), "epsilon0"),
    ],
)
def test_bad_input_names_the_parameter(call, name: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidParameterError) as info:
        call()
    assert info.value.name == name


def test_optimal_epsilon_of_several_releases_is_found_whatever_epsilon0() -> None:
    """Found by the risk QA helper: for k > 1 the search ran linearly from eps0 * 1e-12, so at
    eps0 = 1e13 it returned 584.9 (budget 0.998) where a grid finds 1.4617 (budget 0.7034)."""
    import numpy as np

    model = CostModel(1.0)
    grid = np.geomspace(0.01, 100.0, 20001)
    best = grid[int(np.argmin([model.expected_budget(e, 1e5, 2) for e in grid]))]
    for eps0 in (1e5, 1e13, 1e300):
        found = model.optimal_epsilon(eps0, dimension=2)
        assert abs(found - best) <= 1e-3 * best, (eps0, found, best)
        assert model.expected_budget(found, eps0, 2) <= model.expected_budget(best, eps0, 2) + 1e-12
