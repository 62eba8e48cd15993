"""Prefix-extension heavy hitters over a 2^32 domain."""

import numpy as np
import pytest

import dpkit
from dpkit.local import HeavyHitters
from dpkit.noise import InsecureSeededRandom


def test_finds_heavy_hitters_in_2_to_32():
    rng = np.random.default_rng(1)
    heavy = np.array([3_000_000_001, 17, 2**31 + 5])
    n = 120_000
    draw = rng.random(n)
    values = rng.integers(0, 2**32, n)
    values[draw < 0.25] = heavy[0]
    values[(draw >= 0.25) & (draw < 0.45)] = heavy[1]
    values[(draw >= 0.45) & (draw < 0.6)] = heavy[2]
    hh = HeavyHitters(32, 3.0, first_bits=8, bits_per_level=8)
    reports = hh.randomize(values, rng=InsecureSeededRandom(3))
    assert reports.data.shape == (n, 5)  # constant-size messages, not 2^32-sized
    result = hh.estimate(reports, top_k=3)
    assert set(result.values.tolist()) == set(heavy.tolist())
    counts = dict(zip(result.values.tolist(), result.counts.tolist(), strict=True))
    assert counts[int(heavy[0])] == pytest.approx(0.25 * n, rel=0.15)
    thresholded = hh.estimate(reports, top_k=3, threshold=0.22 * n)
    assert thresholded.values.tolist() == [int(heavy[0])]


def test_guarantee_and_bad_input():
    hh = HeavyHitters(16, 1.0)
    assert hh.guarantee.epsilon == 1.0
    with pytest.raises(dpkit.InvalidParameterError, match="domain_bits"):
        HeavyHitters(33, 1.0)
    with pytest.raises(dpkit.InvalidParameterError, match="epsilon"):
        HeavyHitters(16, float("nan"))
    with pytest.raises(dpkit.InvalidParameterError, match="values"):
        hh.randomize(np.array([2**16]))
    with pytest.raises(dpkit.InvalidParameterError, match="reports"):
        hh.estimate(HeavyHitters(16, 2.0).randomize(np.array([1, 2])))
