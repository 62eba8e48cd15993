"""Frequency oracles: exact LDP ratios, published variances, unbiasedness and variance by simulation."""

import math

import numpy as np
import pytest

import dpkit
from dpkit.guarantees import NeighbourRelation, PureDP
from dpkit.local import KRR, OLH, OUE, SUE, HadamardResponse, LocalReports, fast_walsh_hadamard
from dpkit.noise import InsecureSeededRandom

ORACLES = [KRR, SUE, OUE, OLH, HadamardResponse]
# Two-sided normal quantile for a false-positive rate below 1e-6 per check (P(|Z| > 5.5) = 3.8e-8,
# and no test makes more than 20 such checks).
Z = 5.5


@pytest.mark.parametrize("cls", ORACLES)
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_exact_ldp_ratio(cls, epsilon):
    matrix = cls(5, epsilon).transition_matrix()
    assert np.allclose(matrix.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(matrix > 0)
    ratio = (matrix.max(axis=0) / matrix.min(axis=0)).max()
    assert ratio <= math.exp(epsilon) * (1 + 1e-12)
    # The bound is attained (these protocols spend the whole budget).
    assert ratio >= math.exp(epsilon) * (1 - 1e-9)


@pytest.mark.parametrize("cls", ORACLES)
def test_guarantee_is_ldp(cls):
    assert cls(4, 1.0).guarantee == PureDP(1.0, NeighbourRelation.REPLACE_ONE)


@pytest.mark.parametrize("cls", ORACLES)
def test_support_probabilities_match_transition_matrix(cls):
    """p and q as the estimators use them, recomputed from the report law itself."""
    oracle = cls(5, 1.0)
    matrix = oracle.transition_matrix()
    sample = oracle.randomize(np.zeros(1, dtype=np.int64), rng=InsecureSeededRandom(0))
    del sample
    if cls is KRR:
        supports = np.eye(5, dtype=bool)
    elif cls in (SUE, OUE):
        outputs = (np.arange(32)[:, None] >> np.arange(5)[None, :]) & 1
        supports = outputs.T.astype(bool)
    elif cls is OLH:
        prime, g = oracle.prime, oracle.g
        a, b = np.meshgrid(np.arange(1, prime), np.arange(prime), indexing="ij")
        a, b = a.ravel(), b.ravel()
        supports = np.stack([(oracle.hash(a, b, v)[:, None] == np.arange(g)[None, :]).ravel() for v in range(5)])
    else:
        y = np.arange(oracle.size)
        supports = np.stack([(np.bitwise_count(y & (v + 1)) & 1) == 0 for v in range(5)])
    support_probability = matrix @ supports.T.astype(float)  # [x, v] = P(report supports v | x)
    assert np.allclose(np.diag(support_probability), oracle.p, rtol=1e-12)
    off = support_probability[~np.eye(5, dtype=bool)]
    assert np.allclose(off, oracle.q, rtol=1e-12)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 3.0])
def test_published_variances(epsilon):
    e, n, k = math.exp(epsilon), 1000, 64
    assert KRR(k, epsilon).frequency_variance(n) == pytest.approx((k - 2 + e) / (n * (e - 1) ** 2), rel=1e-12)
    assert OUE(k, epsilon).frequency_variance(n) == pytest.approx(4 * e / (n * (e - 1) ** 2), rel=1e-12)
    # OLH's variance q(1 - q)/(p - q)^2 with q = 1/g, p = e/(e + g - 1) equals OUE's at the real optimum g = e + 1.
    g = e + 1
    p, q = e / (e + g - 1), 1 / g
    assert q * (1 - q) / (n * (p - q) ** 2) == pytest.approx(4 * e / (n * (e - 1) ** 2), rel=1e-12)


def test_olh_close_to_published_at_integer_g():
    # e^eps = 3 gives g = 4 = e^eps + 1; the finite hash family moves q by O(1/P) only.
    oracle = OLH(1024, math.log(3.0))
    assert oracle.g == 4
    assert oracle.frequency_variance(1000) == pytest.approx(4 * 3 / (1000 * 4), rel=1e-2)


def test_hadamard_variance_formula():
    e = math.exp(1.0)
    assert HadamardResponse(10, 1.0).variance(100) == pytest.approx(100 * (e + 1) ** 2 / (e - 1) ** 2)


def test_fwht_matches_matrix():
    from scipy.linalg import hadamard

    vector = np.arange(16.0)
    assert np.allclose(fast_walsh_hadamard(vector), hadamard(16) @ vector)


def _batches(oracle, pattern, batches, seed):
    values = np.tile(pattern, batches)
    reports = oracle.randomize(values, rng=InsecureSeededRandom(seed))
    m = pattern.size
    return np.array(
        [
            oracle.estimate(LocalReports(reports.oracle, reports.parameters, reports.data[i * m : (i + 1) * m]))
            for i in range(batches)
        ]
    ), reports


@pytest.mark.parametrize("cls", ORACLES)
def test_unbiased_and_variance_by_simulation(cls):
    k, epsilon, batches = 6, 1.0, 400
    pattern = np.repeat(np.arange(k), [100, 60, 40, 0, 20, 30])  # m = 250 people per batch
    oracle = cls(k, epsilon)
    estimates, reports = _batches(oracle, pattern, batches, seed=11)
    true = np.bincount(pattern, minlength=k).astype(float)
    exact = oracle.variance(pattern.size, true)
    # Unbiased: the estimate from all reports is within Z standard deviations of the truth.
    total = oracle.estimate(reports)
    assert np.all(np.abs(total - batches * true) <= Z * np.sqrt(batches * exact))
    # Variance: s^2 / sigma^2 has sd sqrt(2/(B-1) + kappa/B), kappa the excess kurtosis of one batch
    # estimate: a sum of 250 independent bounded reports, so kappa is below 1/250 of one report's
    # (at most about 4 here); the 0.05 margin covers it and the normal approximation of s^2.
    sample_variance = estimates.var(axis=0, ddof=1)
    assert np.all(np.abs(sample_variance / exact - 1) <= Z * math.sqrt(2 / (batches - 1)) + 0.05)
    # Counts sum to n in expectation; sd(sum) <= sum of the sds (Cauchy-Schwarz).
    assert abs(total.sum() - len(reports)) <= Z * float(np.sum(np.sqrt(batches * exact)))


def test_olh_grouped_and_broadcast_aggregation_agree():
    oracle = OLH(40, 1.0)
    values = np.random.default_rng(3).integers(0, 40, 20_000)
    reports = oracle.randomize(values, rng=InsecureSeededRandom(2))
    assert np.array_equal(oracle._support_grouped(reports.data), oracle._support_broadcast(reports.data))


def test_confidence_interval_covers():
    oracle = KRR(4, 1.0)
    values = np.repeat(np.arange(4), [500, 300, 200, 0])
    intervals = oracle.confidence_interval(oracle.randomize(values, rng=InsecureSeededRandom(4)), alpha=1e-6)
    true = np.bincount(values, minlength=4)
    assert intervals.shape == (4, 2)
    assert np.all((intervals[:, 0] <= true) & (true <= intervals[:, 1]))


def test_binary_randomized_response_is_krr_with_two_categories():
    oracle = KRR(2, 1.0)
    assert oracle.p == pytest.approx(math.e / (math.e + 1))
    assert oracle.randomize(np.array([0, 1, 1]), rng=InsecureSeededRandom(0)).data.shape == (3,)


@pytest.mark.parametrize("cls", ORACLES)
def test_bad_input(cls):
    for epsilon in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(dpkit.InvalidParameterError, match="epsilon"):
            cls(4, epsilon)
    with pytest.raises(dpkit.InvalidParameterError, match="^k"):
        cls(1, 1.0)
    oracle = cls(4, 1.0)
    for bad in (np.array([0, 4]), np.array([-1]), np.array([0.5]), "a"):
        with pytest.raises(dpkit.InvalidParameterError, match="values"):
            oracle.randomize(bad)
    other = KRR(4, 1.0) if cls is not KRR else OUE(4, 1.0)
    with pytest.raises(dpkit.InvalidParameterError, match="reports"):
        oracle.estimate(other.randomize(np.array([0, 1])))
    with pytest.raises(dpkit.InvalidParameterError, match="reports"):
        oracle.estimate(cls(5, 1.0).randomize(np.array([0, 1])))
    with pytest.raises(dpkit.InvalidParameterError, match="reports"):
        oracle.estimate(np.array([0, 1]))
    good = oracle.randomize(np.array([0, 1]))
    with pytest.raises(dpkit.InvalidParameterError, match="reports"):
        oracle.estimate(LocalReports(good.oracle, good.parameters, good.data[..., None]))
    with pytest.raises(dpkit.InvalidParameterError, match="reports"):
        oracle.estimate(LocalReports(good.oracle, good.parameters, good.data[:0]))


def _report_index(oracle, data):
    """Column of transition_matrix() for each report."""
    if isinstance(oracle, KRR | HadamardResponse):
        return data
    if isinstance(oracle, SUE | OUE):
        return (data.astype(np.int64) << np.arange(oracle.k)).sum(axis=1)
    a, b, bucket = (data[:, i].astype(np.int64) for i in range(3))
    return ((a - 1) * oracle.prime + b) * oracle.g + bucket


@pytest.mark.parametrize("cls", ORACLES)
def test_randomize_follows_the_stated_law(cls):
    from scipy.stats import chisquare

    oracle = cls(3, 1.0)
    matrix = oracle.transition_matrix()
    n = 100_000
    for value in range(3):
        data = oracle.randomize(np.full(n, value), rng=InsecureSeededRandom(20 + value)).data
        observed = np.bincount(_report_index(oracle, data), minlength=matrix.shape[1])
        assert chisquare(observed, n * matrix[value]).pvalue > 1e-7  # three checks: false alarm < 1e-6
