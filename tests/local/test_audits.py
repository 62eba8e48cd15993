"""The empirical audit (dpkit.audit.estimate_epsilon) of every local randomizer stays at or below epsilon."""

import numpy as np
import pytest

from dpkit.audit import estimate_epsilon
from dpkit.local import KRR, OLH, OUE, SUE, DuchiMechanism, HadamardResponse, HeavyHitters, PiecewiseMechanism
from dpkit.noise import InsecureSeededRandom

EPSILON = 1.0
SAMPLES = 100_000


def _audit(randomize, statistic, a, b, seed):
    def release(value, rng, size):
        return statistic(randomize(np.full(size, value), rng))

    return estimate_epsilon(release, a, b, samples=SAMPLES, vectorized=True, rng=InsecureSeededRandom(seed))


def _olh_support(oracle):
    def statistic(reports):
        data = reports.data.astype(np.int64)
        return (oracle.hash(data[:, 0], data[:, 1], 0) == data[:, 2]).astype(np.int64)

    return statistic


def _hr_support(reports):
    return ((np.bitwise_count(reports.data & 1) & 1) == 0).astype(np.int64)


CASES = {
    "KRR": (KRR(4, EPSILON), lambda r: r.data, 0, 1),
    "SUE": (SUE(4, EPSILON), lambda r: r.data[:, 0].astype(np.int64) - r.data[:, 1], 0, 1),
    "OUE": (OUE(4, EPSILON), lambda r: r.data[:, 0].astype(np.int64) - r.data[:, 1], 0, 1),
    "OLH": (OLH(16, EPSILON), None, 0, 1),
    "HadamardResponse": (HadamardResponse(8, EPSILON), _hr_support, 0, 1),
    "Duchi": (DuchiMechanism(EPSILON), lambda r: r.data, -1.0, 1.0),
    "Piecewise": (PiecewiseMechanism(EPSILON), lambda r: r.data, -1.0, 1.0),
}


@pytest.mark.statistical
@pytest.mark.parametrize("name", sorted(CASES))
def test_audit_stays_below_epsilon(name):
    oracle, statistic, a, b = CASES[name]
    statistic = statistic or _olh_support(oracle)
    result = _audit(lambda values, rng: oracle.randomize(values, rng=rng), statistic, a, b, seed=5)
    assert result.epsilon_lower_bound <= EPSILON
    # The audit is not vacuous: it sees a good share of the budget.
    assert result.epsilon_lower_bound >= 0.5 * EPSILON


@pytest.mark.statistical
def test_heavy_hitters_audit():
    hh = HeavyHitters(8, EPSILON, first_bits=8)

    def statistic(reports):
        d = reports.data
        return (hh.hash(d[:, 1], d[:, 2], d[:, 3], 0) == d[:, 4]).astype(np.int64)

    result = _audit(lambda values, rng: hh.randomize(values, rng=rng), statistic, 0, 1, seed=6)
    assert 0.5 * EPSILON <= result.epsilon_lower_bound <= EPSILON
