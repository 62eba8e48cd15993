"""choose(), the LDP-vs-central comparison and the statistical-query simulator."""

import math

import numpy as np
import pytest

import dpkit
from dpkit.local import KRR, choose, ldp_vs_central_error, samples_needed, simulate_statistical_queries
from dpkit.noise import InsecureSeededRandom


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
def test_choose_follows_the_threshold(epsilon):
    threshold = 3 * math.exp(epsilon) + 2
    small = max(2, math.floor(threshold / 2))
    assert choose(small, epsilon, 1000).oracle_name == "KRR"
    large = math.ceil(threshold) + 2
    choice = choose(large, epsilon, 1000)
    assert choice.oracle_name in ("OUE", "OLH")
    assert choice.variances[choice.oracle_name] <= 1.05 * min(choice.variances.values())
    assert "3e^eps + 2" in choice.reason
    assert isinstance(choose(2, 1.0, 10).oracle, KRR)


def test_choose_bad_input():
    with pytest.raises(dpkit.InvalidParameterError, match="^k"):
        choose(1, 1.0, 10)
    with pytest.raises(dpkit.InvalidParameterError, match="epsilon"):
        choose(3, -1.0, 10)
    with pytest.raises(dpkit.InvalidParameterError, match="^n"):
        choose(3, 1.0, 0)


def test_ldp_error_is_about_n_times_central():
    small_n = ldp_vs_central_error(10, 0.1, 1_000)
    large_n = ldp_vs_central_error(10, 0.1, 100_000)
    assert large_n.ratio / small_n.ratio == pytest.approx(100)
    assert small_n.ldp_mse == pytest.approx(KRR(10, 0.1).frequency_variance(1_000))


def test_queries_within_tolerance_with_stated_probability():
    epsilon, tolerance, beta, t = 1.0, 0.1, 0.05, 3
    m = samples_needed(t, epsilon, tolerance, beta)
    # D: x uniform on [0, 1); queries with known answers E f = 1/2, 1/4 and 0.3.
    queries = [lambda x: x, lambda x: x * x * 0.75, lambda x: (x < 0.3).astype(float)]
    truth = np.array([0.5, 0.25, 0.3])
    data_rng = np.random.default_rng(2024)
    source = InsecureSeededRandom(99)
    repetitions, failures = 200, 0
    for _ in range(repetitions):
        result = simulate_statistical_queries(queries, data_rng.random(t * m), epsilon, tolerance, rng=source)
        failures += int(np.any(np.abs(result.answers - truth) > tolerance))
    # P(Binomial(200, 0.05) > 28) < 1e-6: the stated failure rate holds (Hoeffding is conservative).
    assert failures <= 28
    assert result.samples_used == t * m
    assert m < 2 * (math.e + 1) ** 2 / (math.e - 1) ** 2 * math.log(2 * t / beta) / tolerance**2


def test_queries_bad_input():
    data = np.zeros(10)
    with pytest.raises(dpkit.InvalidParameterError, match="data"):
        simulate_statistical_queries([lambda x: x], data, 1.0, 0.1)
    with pytest.raises(dpkit.InvalidParameterError, match="queries"):
        simulate_statistical_queries([], data, 1.0, 0.1)
    with pytest.raises(dpkit.InvalidParameterError, match="epsilon"):
        simulate_statistical_queries([lambda x: x], data, 0.0, 0.1)
    with pytest.raises(dpkit.InvalidParameterError, match="queries"):
        simulate_statistical_queries([lambda x: x + 2], np.zeros(100_000), 1.0, 0.1)


def test_plot_ldp_vs_central():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from dpkit.local import plot_ldp_vs_central

    ax = plot_ldp_vs_central(10, 1.0, [100, 1_000, 10_000])
    assert len(ax.get_lines()) == 2


def test_public_surface():
    import dpkit.local

    for name in dpkit.local.__all__:
        assert hasattr(dpkit.local, name)
    public = {n for n, v in vars(dpkit.local).items() if not n.startswith("_") and hasattr(v, "__module__")}
    assert public <= set(dpkit.local.__all__)
