"""Every ``from_accuracy`` takes (sensitivity, accuracy, alpha) in that order, and constant-time
discrete Laplace releases repeated draws of one value (QA, round 19)."""

from __future__ import annotations

import numpy as np
import pytest

from dpkit.mechanisms import DiscreteLaplace, Gaussian, Geometric, Laplace
from dpkit.noise import InsecureSeededRandom


@pytest.mark.parametrize("kind", [DiscreteLaplace, Geometric])
def test_discrete_from_accuracy_takes_the_sensitivity_first_like_laplace(kind: type[DiscreteLaplace]) -> None:
    mechanism = kind.from_accuracy(3, 10, 0.05)
    assert mechanism.sensitivity == 3 and mechanism.noise_quantile(0.05) <= 10
    assert kind.from_accuracy(3, accuracy=10, alpha=0.05).epsilon == mechanism.epsilon
    continuous = Laplace.from_accuracy(3, 10, 0.05)
    assert continuous.sensitivity == 3 and continuous.noise_quantile(0.05) <= 10
    assert Gaussian.from_accuracy(3, 10, 0.05, 1e-6).noise_quantile(0.05) <= 10


def test_the_old_discrete_order_is_refused_not_misread() -> None:
    with pytest.raises(TypeError):
        DiscreteLaplace.from_accuracy(10, 0.05)  # type: ignore[call-arg]  # (accuracy, alpha): alpha is missing
    with pytest.raises(TypeError):
        DiscreteLaplace.from_accuracy(10, 0.05, sensitivity=3)  # type: ignore[call-arg]


def test_constant_time_discrete_laplace_releases_repeated_draws() -> None:
    mechanism = DiscreteLaplace(1, 1.0, constant_time=True)
    draws = mechanism.release_repeated(5, 200, rng=InsecureSeededRandom(2))
    assert draws.shape == (200,) and np.issubdtype(draws.dtype, np.integer)
    assert len(set(draws.tolist())) > 3 and abs(float(np.median(draws)) - 5) <= 2
