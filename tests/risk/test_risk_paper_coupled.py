"""The paper's gamma_3 (paper_coupled_confidence): reference values, shape, and its relation with coupled_confidence."""

import csv
import functools
import math
from collections.abc import Callable
from pathlib import Path

import mpmath
import numpy as np
import pytest

from dpkit import InvalidParameterError
from dpkit.risk import (
    SensitivityDistribution,
    abs_laplace_sum_cdf,
    coupled_confidence,
    dkw_confidence,
    dkw_sample_size,
    laplace_confidence,
    paper_coupled_confidence,
)

REFERENCE = Path(__file__).parent.parent / "data" / "paper_coupled_reference.csv"


def _reference_rows() -> list[dict[str, str]]:
    lines = [line for line in REFERENCE.read_text().splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines))


def test_matches_the_authors_gamma_3_reference_values() -> None:
    # gamma_3 re-typed from the authors' formulae.py::calculate_gamma, mpmath at 80 digits
    # (make_paper_coupled_reference.py); the CSV keeps the authors' raw, unclipped ratio.
    rows = _reference_rows()
    assert len(rows) == 340
    clipped = 0
    for row in rows:
        k, eps, eps0 = int(row["dimension"]), float(row["epsilon"]), float(row["epsilon0"])
        sensitivity, rho, alpha = float(row["sampled_sensitivity"]), float(row["rho"]), float(row["alpha"])
        raw = float(row["gamma_3"])
        value = paper_coupled_confidence(eps, eps0, sensitivity, rho, alpha, k)
        eta = 1.0 + 2.0 * rho / sensitivity
        # the authors' value exceeds alpha exactly where epsilon > eta epsilon0 (no exact ties on the grid)
        assert (raw > alpha) == (eps > eta * eps0)
        if raw > alpha:
            clipped += 1
            assert value == alpha
        else:
            assert value == pytest.approx(raw, rel=1e-12)
            assert value < alpha
    assert clipped == 54  # the rows with epsilon = 1.5 epsilon0


def test_figure_3_parameters() -> None:
    # the authors' plots.py, Fig. 3: k = 1, epsilon0 = 1, rho = 0.01, Delta* = 0.15, n = 10 000 ... 25 000
    rows = [row for row in _reference_rows() if row["sampled_sensitivity"] == "0.15" and len(row["alpha"]) > 10]
    assert len(rows) == 16
    for row in rows:
        n_alpha = float(row["alpha"])
        assert any(
            dkw_confidence(n, 0.01) == pytest.approx(n_alpha, rel=1e-15) for n in (10_000, 15_000, 20_000, 25_000)
        )
        value = paper_coupled_confidence(float(row["epsilon"]), 1.0, 0.15, 0.01, n_alpha)
        assert value == pytest.approx(float(row["gamma_3"]), rel=1e-12)


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize(("eps0", "sensitivity", "rho"), [(0.5, 0.15, 0.01), (1.0, 1.0, 0.05), (2.0, 0.05, 0.1)])
def test_increasing_in_epsilon_and_alpha_from_eta_epsilon0(k: int, eps0: float, sensitivity: float, rho: float) -> None:
    alpha = 0.93
    eta = 1.0 + 2.0 * rho / sensitivity
    grid = np.linspace(0.0, 1.3 * eta * eps0, 131)
    values = [paper_coupled_confidence(float(e), eps0, sensitivity, rho, alpha, k) for e in grid]
    assert values[0] == 0.0
    assert all(b > a for a, b in zip(values, values[1:], strict=False) if b < alpha)
    assert all(b >= a for a, b in zip(values, values[1:], strict=False))
    for e, v in zip(grid, values, strict=True):
        assert (v == alpha) == (e >= eta * eps0)
        ratio = abs_laplace_sum_cdf(float(e), k) / abs_laplace_sum_cdf(eta * eps0, k)
        assert v == pytest.approx(alpha * min(1.0, ratio), rel=1e-12, abs=1e-300)
    assert paper_coupled_confidence(eta * eps0, eps0, sensitivity, rho, alpha, k) == alpha
    assert paper_coupled_confidence(math.inf, eps0, sensitivity, rho, alpha, k) == alpha


def test_monotone_in_the_other_parameters() -> None:
    eps, eps0, sensitivity, rho, alpha = 0.6, 1.0, 0.5, 0.05, 0.9
    by_sensitivity = [paper_coupled_confidence(eps, eps0, s, rho, alpha) for s in (0.01, 0.1, 1.0, 10.0)]
    assert all(b > a for a, b in zip(by_sensitivity, by_sensitivity[1:], strict=False))
    by_rho = [paper_coupled_confidence(eps, eps0, sensitivity, r, alpha) for r in (0.01, 0.05, 0.2, 0.5)]
    assert all(b < a for a, b in zip(by_rho, by_rho[1:], strict=False))
    by_eps0 = [paper_coupled_confidence(eps, e0, sensitivity, rho, alpha) for e0 in (0.7, 1.0, 2.0)]
    assert all(b < a for a, b in zip(by_eps0, by_eps0[1:], strict=False))
    by_k = [paper_coupled_confidence(eps, eps0, sensitivity, rho, alpha, k) for k in (1, 2, 5)]
    assert all(b < a for a, b in zip(by_k, by_k[1:], strict=False))
    # alpha is a factor; alpha = 1 is allowed (1 - 2 e^{-2 n rho^2} rounds to 1.0 for large n)
    one = paper_coupled_confidence(eps, eps0, sensitivity, rho, 1.0)
    assert one == pytest.approx(laplace_confidence(eps, 1.2 * eps0), rel=1e-15)
    assert one == pytest.approx((1 - math.exp(-0.6)) / (1 - math.exp(-1.2)), rel=1e-14)
    assert paper_coupled_confidence(eps, eps0, sensitivity, rho, alpha) == pytest.approx(alpha * one, rel=1e-15)
    assert dkw_confidence(10**6, 0.05) == 1.0


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("eps", [0.05, 0.4, 0.9, 0.99])
def test_limits_in_sensitivity_over_rho(k: int, eps: float) -> None:
    eps0, rho, alpha = 1.0, 0.05, 0.95
    # Delta* / rho -> inf: alpha c_k(epsilon; epsilon0)
    large = paper_coupled_confidence(eps, eps0, 1e10 * rho, rho, alpha, k)
    assert large == pytest.approx(alpha * laplace_confidence(eps, eps0, k), rel=1e-9)
    assert large < alpha * laplace_confidence(eps, eps0, k)
    # Delta* / rho -> 0: alpha F_k(epsilon)
    small = paper_coupled_confidence(eps, eps0, 1e-10 * rho, rho, alpha, k)
    assert small == pytest.approx(alpha * abs_laplace_sum_cdf(eps, k), rel=1e-12)
    steps = [paper_coupled_confidence(eps, eps0, ratio * rho, rho, alpha, k) for ratio in (1e-3, 0.1, 1.0, 10.0, 1e3)]
    assert small <= steps[0] and all(b > a for a, b in zip(steps, steps[1:], strict=False)) and steps[-1] < large


@pytest.mark.parametrize("k", [1, 3])
def test_a_lower_bound_when_every_sensitivity_is_at_most_delta_plus_2_rho(k: int) -> None:
    # the form's assumption: each pair's confidence c_k(eps; eps0 D / Delta*) >= gamma_3 / alpha for D <= Delta* + 2 rho
    eps0, sensitivity, rho, alpha = 1.0, 0.4, 0.05, 0.9
    eta = 1.0 + 2.0 * rho / sensitivity
    for eps in (0.1, 0.5, 0.9, 1.1, 1.3):
        bound = paper_coupled_confidence(eps, eps0, sensitivity, rho, alpha, k) / alpha
        pairs = [
            laplace_confidence(eps, eps0 * d / sensitivity, k) for d in np.linspace(1e-6, sensitivity + 2 * rho, 50)
        ]
        assert min(pairs) >= bound * (1 - 1e-12)
        assert min(pairs) == pytest.approx(bound, rel=1e-12)  # reached at D = Delta* + 2 rho
        # just above, a pair falls below the bound (epsilon < eta epsilon0): the assumption is needed
        if eps < eta * eps0:
            assert laplace_confidence(eps, eps0 * (sensitivity + 2.5 * rho) / sensitivity, k) < bound


def test_rescaling_changes_the_papers_form_not_coupled_confidence() -> None:
    # f -> lambda f multiplies every sensitivity by lambda and changes nothing about privacy
    base = np.linspace(0.2, 1.0, 738)
    papers, coupled = [], []
    for scale in (0.01, 0.1, 1.0, 10.0, 100.0):
        dist = SensitivityDistribution(scale * base, rho=0.05)
        papers.append(paper_coupled_confidence(0.9, 1.0, dist.maximum, dist.rho, dist.alpha))
        coupled.append(coupled_confidence(0.9, 1.0, dist))
    assert max(coupled) - min(coupled) <= 1e-12
    assert all(b > a for a, b in zip(papers, papers[1:], strict=False))
    assert papers[0] == pytest.approx(0.5638, abs=5e-5) and papers[-1] == pytest.approx(0.8914, abs=5e-5)
    assert coupled[0] == pytest.approx(0.8987, abs=5e-5)
    # the docstring's example: a point mass in two units
    alpha = dkw_confidence(738, 0.05)
    for scale, paper in ((0.1, 0.652), (10.0, 0.8868)):
        dist = SensitivityDistribution(np.full(738, scale), rho=0.05)
        value = paper_coupled_confidence(0.9, 1.0, dist.maximum, dist.rho, dist.alpha)
        eta = 1.0 + 0.1 / scale
        assert value == pytest.approx(alpha * math.expm1(-0.9) / math.expm1(-eta), rel=1e-13)
        assert round(value, 4) == paper
        assert round(coupled_confidence(0.9, 1.0, dist), 4) == 0.8473


# The comparison grid quoted in paper_coupled_confidence's docstring: four laws of the sensitivity,
# each given by its n = dkw_sample_size(rho, 0.95) quantiles (i + 1/2) / n.
LAWS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "point mass": lambda u: np.ones_like(u),
    "uniform": lambda u: u,
    "exponential": lambda u: -np.log1p(-u),
    "two-point": lambda u: np.where(u < 0.99, 1.0, 10.0),  # 1 w.p. 0.99, 10 w.p. 0.01
}
RHOS = (0.05, 0.1)
SCALES = (0.01, 0.1, 1.0, 10.0, 100.0)
DIMENSIONS = (1, 3)
EPSILON0S = (0.5, 2.0)
FRACTIONS = (0.05, 0.25, 0.5, 0.75, 0.9, 1.0, 1.2)


@functools.cache
def _comparison_grid() -> tuple[tuple[str, float, float, int, float, float, float, float, float, float], ...]:
    rows = []
    for law, quantile in LAWS.items():
        for rho in RHOS:
            n = dkw_sample_size(rho, 0.95)
            base = quantile((np.arange(n) + 0.5) / n)
            for k in DIMENSIONS:
                for eps0 in EPSILON0S:
                    for fraction in FRACTIONS:
                        eps = fraction * eps0
                        # coupled_confidence does not depend on the scale: computed once
                        coupled = coupled_confidence(eps, eps0, SensitivityDistribution(base, rho), dimension=k)
                        for scale in SCALES:
                            dist = SensitivityDistribution(scale * base, rho)
                            paper = paper_coupled_confidence(eps, eps0, dist.maximum, rho, dist.alpha, k)
                            eta = 1.0 + 2.0 * rho / dist.maximum
                            rows.append((law, rho, scale, k, eps0, fraction, eta, dist.alpha, paper, coupled))
    return tuple(rows)


def test_neither_is_uniformly_more_conservative() -> None:
    rows = _comparison_grid()
    assert len(rows) == 1120
    differences = np.array([paper - coupled for *_, paper, coupled in rows])
    assert np.min(np.abs(differences)) > 1e-4  # no near-ties: the count below is exact
    assert int(np.sum(differences > 0)) == 335  # 30 %
    assert float(np.max(differences)) == pytest.approx(0.0951, abs=5e-5)  # alpha rho at rho = 0.1
    assert float(np.min(differences)) == pytest.approx(-0.7709, abs=5e-5)
    for law, rho, _scale, _k, eps0, fraction, eta, alpha, paper, coupled in rows:
        assert coupled <= alpha * (1 - rho) + 1e-12
        if fraction * eps0 >= eta * eps0:  # the paper's form is alpha, above coupled_confidence
            assert paper == alpha > coupled
        if law != "point mass" and fraction <= 0.5:  # spread-out laws, epsilon <= epsilon0 / 2
            assert paper < coupled
    # the Delta* / rho -> 0 limit alpha F_k(epsilon) is below coupled_confidence for 0 < epsilon < epsilon0
    # when F_k(epsilon0) < 1 - rho (all of the grid), since coupled_confidence >= alpha (1 - rho) c_k(epsilon; epsilon0)
    for _law, rho, _scale, k, eps0, fraction, _eta, alpha, paper, coupled in rows:
        if fraction < 1.0:
            eps = fraction * eps0
            assert abs_laplace_sum_cdf(eps0, k) < 1 - rho
            floor = alpha * (1 - rho) * laplace_confidence(eps, eps0, k)
            assert coupled >= floor * (1 - 1e-12)
            assert floor > alpha * abs_laplace_sum_cdf(eps, k)
            assert paper >= alpha * abs_laplace_sum_cdf(eps, k) * (1 - 1e-12)  # the limit is approached from above
    # below eta epsilon0 it still exceeds it, by up to alpha rho as epsilon -> epsilon0
    below = [row[8] - row[9] for row in rows if row[5] * row[4] < row[6] * row[4]]
    assert sum(d > 0 for d in below) == 231 and max(below) == pytest.approx(0.0950, abs=5e-5)


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("eps", [0.1, 0.5, 0.9])
def test_point_mass_limit_exceeds_coupled_confidence(k: int, eps: float) -> None:
    # for a point mass coupled_confidence is alpha (1 - rho) c_k(eps; eps0); the paper's form tends to alpha c_k
    dist = SensitivityDistribution(np.full(738, 1e6), rho=0.05)
    coupled = coupled_confidence(eps, 1.0, dist, dimension=k)
    assert coupled == pytest.approx(dist.alpha * 0.95 * laplace_confidence(eps, 1.0, k), rel=1e-12)
    paper = paper_coupled_confidence(eps, 1.0, dist.maximum, dist.rho, dist.alpha, k)
    assert paper > coupled
    assert paper == pytest.approx(dist.alpha * laplace_confidence(eps, 1.0, k), rel=1e-6)
    # the same law in small units (Delta* / rho = 0.02): the paper's form is near alpha F_k(epsilon), below
    small = SensitivityDistribution(np.full(738, 1e-3), rho=0.05)
    assert coupled_confidence(eps, 1.0, small, dimension=k) == pytest.approx(coupled, rel=1e-12)
    paper_small = paper_coupled_confidence(eps, 1.0, small.maximum, small.rho, small.alpha, k)
    assert paper_small == pytest.approx(small.alpha * abs_laplace_sum_cdf(eps, k), rel=1e-12)
    assert paper_small < coupled


def _c1(eps: mpmath.mpf, eps0: mpmath.mpf) -> mpmath.mpf:
    return mpmath.mpf(1) if eps >= eps0 else (1 - mpmath.exp(-eps)) / (1 - mpmath.exp(-eps0))


def test_counter_example_numbers() -> None:
    # sensitivities 100 w.p. 0.997 and 1e5 w.p. 0.003, n = 738, rho = 0.05, epsilon = 0.9, epsilon0 = 1
    n, rho, eps, eps0 = 738, 0.05, 0.9, 1.0
    with mpmath.workdps(40):
        alpha = 1 - 2 * mpmath.exp(-2 * n * mpmath.mpf("0.05") ** 2)
        missing = mpmath.mpf("0.997") ** n
        e, e0 = mpmath.mpf("0.9"), mpmath.mpf(1)
        paper_ratio = _c1(e, e0 * (1 + 2 * mpmath.mpf("0.05") / 100))  # Delta* = 100
        truth = mpmath.mpf("0.997") * _c1(e, e0) + mpmath.mpf("0.003") * _c1(e, e0 * 1000)
    assert float(alpha) == pytest.approx(dkw_confidence(n, rho), rel=1e-15)
    assert round(float(alpha), 3) == 0.950
    assert round(float(missing), 3) == 0.109 and round(float(1 - missing), 3) == 0.891
    assert round(float(paper_ratio), 5) == 0.93825
    assert round(float(truth), 5) == 0.93776
    assert paper_ratio > truth
    assert 1 - missing < alpha
    dist = SensitivityDistribution(np.full(n, 100.0), rho=rho)
    value = paper_coupled_confidence(eps, eps0, dist.maximum, dist.rho, dist.alpha)
    assert value / dist.alpha == pytest.approx(float(paper_ratio), rel=1e-13)


def test_counter_example_over_every_sample() -> None:
    # A sample is summed up by the number m of draws equal to 1e5 (binomial(738, 0.003)); the mechanism is
    # calibrated with Delta* = the largest draw. Each statement "with confidence alpha, at least value / alpha"
    # is checked against the true confidence E_D[c_1(0.9; epsilon0 D / Delta*)].
    n, rho, eps, eps0 = 738, 0.05, 0.9, 1.0
    paper_holds = np.zeros(n + 1, dtype=bool)
    for m in range(n + 1):
        dist = SensitivityDistribution(np.array([100.0] * (n - m) + [1e5] * m), rho=rho)
        delta = dist.maximum
        truth = 0.997 * laplace_confidence(eps, eps0 * 100.0 / delta) + 0.003 * laplace_confidence(
            eps, eps0 * 1e5 / delta
        )
        assert coupled_confidence(eps, eps0, dist) / dist.alpha <= truth  # coupled_confidence: every sample
        paper_holds[m] = paper_coupled_confidence(eps, eps0, delta, rho, dist.alpha) / dist.alpha <= truth
    assert not paper_holds[0] and bool(np.all(paper_holds[1:]))  # the paper's form: fails iff 1e5 is missed
    probability = 1.0 - 0.997**n
    assert probability == pytest.approx(0.8911, abs=5e-5) and probability < dkw_confidence(n, rho)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"epsilon": -0.1}, "epsilon"),
        ({"epsilon": math.nan}, "epsilon"),
        ({"epsilon": True}, "epsilon"),
        ({"epsilon0": 0.0}, "epsilon0"),
        ({"epsilon0": -1.0}, "epsilon0"),
        ({"epsilon0": math.inf}, "epsilon0"),
        ({"sampled_sensitivity": 0.0}, "sampled_sensitivity"),
        ({"sampled_sensitivity": -1.0}, "sampled_sensitivity"),
        ({"sampled_sensitivity": math.inf}, "sampled_sensitivity"),
        ({"sampled_sensitivity": math.nan}, "sampled_sensitivity"),
        ({"rho": 0.0}, "rho"),
        ({"rho": 1.0}, "rho"),
        ({"rho": -0.1}, "rho"),
        ({"rho": math.nan}, "rho"),
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": -0.1}, "alpha"),
        ({"alpha": 1.1}, "alpha"),
        ({"alpha": math.nan}, "alpha"),
        ({"dimension": 0}, "dimension"),
        ({"dimension": 1.5}, "dimension"),
        ({"dimension": True}, "dimension"),
        ({"epsilon0": True}, "epsilon0"),
        ({"sampled_sensitivity": True}, "sampled_sensitivity"),
        ({"rho": False}, "rho"),
        ({"alpha": True}, "alpha"),
        ({"epsilon": "0.5"}, "epsilon"),
    ],
)
def test_bad_input_names_the_parameter(kwargs: dict[str, object], name: str) -> None:
    arguments: dict[str, object] = {
        "epsilon": 0.5,
        "epsilon0": 1.0,
        "sampled_sensitivity": 0.15,
        "rho": 0.01,
        "alpha": 0.95,
        "dimension": 1,
    }
    assert 0 < paper_coupled_confidence(**arguments) < 0.95  # type: ignore[arg-type]
    arguments.update(kwargs)
    with pytest.raises(InvalidParameterError) as info:
        paper_coupled_confidence(**arguments)  # type: ignore[arg-type]
    assert info.value.name == name
