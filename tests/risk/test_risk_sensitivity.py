"""Implicit randomness: DKW sample size, sampled sensitivity, coupled confidence."""

import math

import numpy as np
import pytest

from dpkit import InvalidParameterError
from dpkit.noise import InsecureSeededRandom, uniform_integers
from dpkit.risk import (
    SensitivityDistribution,
    coupled_confidence,
    dkw_confidence,
    dkw_sample_size,
    laplace_confidence,
    sampled_sensitivity,
)


@pytest.mark.parametrize(("rho", "alpha"), [(0.05, 0.95), (0.01, 0.99), (0.2, 0.5), (0.1, 0.999)])
def test_dkw_sample_size_is_the_least_n(rho: float, alpha: float) -> None:
    n = dkw_sample_size(rho, alpha)
    assert n == math.ceil(math.log(2 / (1 - alpha)) / (2 * rho * rho))
    assert 1 - 2 * math.exp(-2 * n * rho * rho) >= alpha - 1e-12
    if n > 1:
        assert 1 - 2 * math.exp(-2 * (n - 1) * rho * rho) < alpha
    assert dkw_confidence(n, rho) >= alpha - 1e-12


def test_sampled_sensitivity_of_a_mean() -> None:
    def pair(rng):  # type: ignore[no-untyped-def]
        data = uniform_integers(100, 30, rng=rng).astype(float)
        return data, data[:-1]  # remove one record

    dist = sampled_sensitivity(lambda d: np.mean(d), pair, 200, rho=0.1, rng=InsecureSeededRandom(7))
    again = sampled_sensitivity(lambda d: np.mean(d), pair, 200, rho=0.1, rng=InsecureSeededRandom(7))
    assert np.array_equal(dist.samples, again.samples)
    assert dist.n == 200 and np.all(np.diff(dist.samples) >= 0)
    assert dist.maximum <= 99 / 30 + 1e-12  # the worst case of a mean of 30 values in [0, 99]
    low, high = dist.band(dist.quantile(0.5))
    assert low <= 0.5 <= high
    assert dist.alpha == pytest.approx(1 - 2 * math.exp(-2 * 200 * 0.01))


def test_coupled_confidence_point_mass_is_exact() -> None:
    dist = SensitivityDistribution(np.full(1000, 2.0), rho=0.05)
    value = coupled_confidence(0.3, 1.0, dist)
    assert value == pytest.approx(dist.alpha * (1 - 0.05) * laplace_confidence(0.3, 1.0))


def test_coupled_confidence_is_at_most_alpha_and_increasing() -> None:
    dist = SensitivityDistribution(np.linspace(0.05, 1.0, 2000), rho=0.03)
    values = [coupled_confidence(e, 1.0, dist) for e in (0.05, 0.2, 0.5, 0.9, 1.0)]
    assert all(b >= a for a, b in zip(values, values[1:], strict=False))
    assert values[-1] <= dist.alpha * (1 - 0.03) + 1e-12
    # smaller sensitivities than the calibration one make epsilon-DP more likely than the noise alone says
    assert coupled_confidence(0.5, 1.0, dist) > dist.alpha * (1 - 0.03) * laplace_confidence(0.5, 1.0)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: dkw_sample_size(0.0, 0.9), "rho"),
        (lambda: dkw_sample_size(1.0, 0.9), "rho"),
        (lambda: dkw_sample_size(0.1, 0.0), "alpha"),
        (lambda: dkw_sample_size(0.1, 1.0), "alpha"),
        (lambda: dkw_sample_size(0.1, 1.5), "alpha"),
        (lambda: SensitivityDistribution(np.array([1.0]), rho=0.0), "rho"),
        (lambda: SensitivityDistribution(np.array([-1.0]), rho=0.1), "samples"),
        (lambda: coupled_confidence(-0.1, 1.0, SensitivityDistribution(np.ones(3), 0.1)), "epsilon"),
        (lambda: coupled_confidence(0.1, 0.0, SensitivityDistribution(np.ones(3), 0.1)), "epsilon0"),
    ],
)
def test_bad_input_names_the_parameter(call, name: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidParameterError) as info:
        call()
    assert info.value.name == name
