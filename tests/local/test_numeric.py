"""Duchi et al.'s and the piecewise mechanism: exact LDP ratio, unbiasedness, variance."""

import math

import numpy as np
import pytest

import dpkit
from dpkit.local import DuchiMechanism, LocalReports, PiecewiseMechanism
from dpkit.noise import InsecureSeededRandom

Z = 5.5  # two-sided, false-positive rate < 1e-7 per check


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 3.0])
def test_duchi_exact_ratio(epsilon):
    mechanism = DuchiMechanism(epsilon)
    xs = np.linspace(-1, 1, 201)
    plus = mechanism.plus_probability(xs)
    for probability in (plus, 1 - plus):
        assert probability.max() / probability.min() <= math.exp(epsilon) * (1 + 1e-12)


def _piecewise_law(mechanism, x):
    """P(cell | x) from the definition: mixture over the window start s of (e^eps inside, 1 outside)."""
    n, m = mechanism.cells, mechanism._window
    target = (1 + x) / 2 * (n - m)
    base = math.floor(target)
    frac = target - base
    e = math.exp(mechanism.epsilon)
    law = np.zeros(n)
    for start, weight in ((base, 1 - frac), (base + 1, frac)):
        if weight == 0:
            continue
        cell = np.ones(n)
        cell[start : start + m] = e
        law += weight * cell / (m * e + n - m)
    return law


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_piecewise_exact_ratio(epsilon):
    mechanism = PiecewiseMechanism(epsilon)
    laws = np.stack([_piecewise_law(mechanism, x) for x in (-1.0, -0.3, 0.0, 0.77, 1.0)])
    assert np.allclose(laws.sum(axis=1), 1.0)
    assert (laws.max(axis=0) / laws.min(axis=0)).max() <= math.exp(epsilon) * (1 + 1e-12)
    # The centre coin's probability is the law's mass on the window.
    assert laws[0, : mechanism._window].sum() == pytest.approx(mechanism._inside, rel=1e-12)


def test_piecewise_grid_is_public():
    mechanism = PiecewiseMechanism(1.0)
    reports = mechanism.randomize(np.linspace(-1, 1, 1000), rng=InsecureSeededRandom(1)).data
    cells = (reports + mechanism.bound) / mechanism.grid_step - 0.5
    assert np.allclose(cells, np.round(cells), atol=1e-6)
    assert np.all(np.abs(reports) <= mechanism.bound)


@pytest.mark.parametrize("cls", [DuchiMechanism, PiecewiseMechanism])
@pytest.mark.parametrize("x", [-1.0, -0.2, 0.6, 1.0])
def test_unbiased_and_variance(cls, x):
    mechanism = cls(1.0)
    n = 200_000
    reports = mechanism.randomize(np.full(n, x), rng=InsecureSeededRandom(7))
    per_report = float(mechanism.report_variance(x))
    assert abs(mechanism.estimate(reports) - x) <= Z * math.sqrt(per_report / n)
    if cls is DuchiMechanism:
        sample_variance = float(np.var(reports.data, ddof=1))
    else:
        beta = float(mechanism._mean_given_value(0.0))
        alpha = float(mechanism._mean_given_value(1.0)) - beta
        sample_variance = float(np.var((reports.data - beta) / alpha, ddof=1))
    # Var(s^2) = (mu4 - sigma^4)/n; the reports are bounded by B, so mu4 <= (2B)^2 sigma^2.
    bound = mechanism.bound + 1
    assert abs(sample_variance - per_report) <= Z * math.sqrt(4 * bound**2 * per_report / n)


def test_variances_match_published():
    e = math.exp(1.0)
    duchi = DuchiMechanism(1.0)
    assert duchi.variance(10) == pytest.approx(((e + 1) / (e - 1)) ** 2 / 10)
    piecewise = PiecewiseMechanism(1.0)
    xs = np.array([0.0, 0.5, 1.0])
    assert np.allclose(piecewise.report_variance(xs), piecewise.continuous_variance(xs), rtol=1e-5)
    h = math.exp(0.5)
    assert piecewise.continuous_variance(0.0) == pytest.approx((h + 3) / (3 * (h - 1) ** 2))


def test_confidence_interval():
    mechanism = DuchiMechanism(2.0)
    values = np.random.default_rng(8).uniform(-1, 1, 5000)
    low, high = mechanism.confidence_interval(mechanism.randomize(values, rng=InsecureSeededRandom(3)), 1e-6)
    assert low <= values.mean() <= high


@pytest.mark.parametrize("cls", [DuchiMechanism, PiecewiseMechanism])
def test_bad_input(cls):
    for epsilon in (0, -2, float("inf"), float("nan")):
        with pytest.raises(dpkit.InvalidParameterError, match="epsilon"):
            cls(epsilon)
    mechanism = cls(1.0)
    for bad in (np.array([1.5]), np.array([np.nan]), "x"):
        with pytest.raises(dpkit.InvalidParameterError, match="values"):
            mechanism.randomize(bad)
    other = DuchiMechanism(1.0) if cls is PiecewiseMechanism else PiecewiseMechanism(1.0)
    with pytest.raises(dpkit.InvalidParameterError, match="reports"):
        mechanism.estimate(other.randomize(np.array([0.0])))
    with pytest.raises(dpkit.InvalidParameterError, match="reports"):
        mechanism.estimate(cls(2.0).randomize(np.array([0.0])))
    with pytest.raises(dpkit.InvalidParameterError, match="reports"):
        mechanism.estimate(LocalReports(mechanism.name, (1.0,), np.zeros((2, 2))))


@pytest.mark.parametrize("x", [-1.0, 0.3])
def test_piecewise_sampler_follows_its_law(x):
    from scipy.stats import chisquare

    mechanism = PiecewiseMechanism(1.0)
    n, bins = 200_000, 64
    reports = mechanism.randomize(np.full(n, x), rng=InsecureSeededRandom(31)).data
    cells = np.rint((reports + mechanism.bound) / mechanism.grid_step - 0.5).astype(np.int64)
    observed = np.bincount(cells // (mechanism.cells // bins), minlength=bins)
    expected = _piecewise_law(mechanism, x).reshape(bins, -1).sum(axis=1) * n
    assert chisquare(observed, expected).pvalue > 1e-7


def test_duchi_sampler_follows_its_law():
    mechanism = DuchiMechanism(1.0)
    n = 200_000
    for x in (-0.7, 0.25):
        reports = mechanism.randomize(np.full(n, x), rng=InsecureSeededRandom(32)).data
        p = float(mechanism.plus_probability(x))
        assert abs(np.mean(reports > 0) - p) <= Z * math.sqrt(p * (1 - p) / n)
