"""Empirical privacy audit of every public mechanism, and of deliberately broken variants.

For each mechanism, ``dpkit.audit.estimate_epsilon`` runs it on two neighbouring inputs and
returns a lower bound on epsilon that exceeds the true epsilon with probability at most
alpha = 1e-6 (its contract). A correct mechanism must stay at or below its claimed epsilon; a
broken one (noise scale x 0.8, sensitivity x 2, Gaussian sigma x 0.7) must be caught, i.e. its
lower bound must exceed the epsilon it claims. Seeds are fixed, so the tests are deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

import dpkit
from dpkit.audit import estimate_epsilon
from dpkit.noise import InsecureSeededRandom

pytestmark = pytest.mark.statistical

ALPHA = 1e-6


def repeated(mechanism):
    """A vectorized release: ``size`` independent releases of the same scalar query."""
    return lambda value, rng, size: mechanism.release_repeated(value, size, rng=rng)


def audit(release, a, b, *, samples, seed, vectorized=False, delta=0.0, **kwargs):
    result = estimate_epsilon(
        release,
        a,
        b,
        samples=samples,
        alpha=ALPHA,
        delta=delta,
        rng=InsecureSeededRandom(seed),
        vectorized=vectorized,
        **kwargs,
    )
    return result.epsilon_lower_bound, result


# ----------------------------------------------------------------------------- integer noise


def test_discrete_laplace_passes():
    mechanism = dpkit.DiscreteLaplace(sensitivity=1, epsilon=1.0)
    bound, result = audit(repeated(mechanism), 0, 1, samples=400_000, seed=1, vectorized=True)
    assert bound <= 1.0, result
    assert bound >= 0.85, result  # the audit is tight enough to mean something


def test_discrete_laplace_scale_times_0_8_is_caught():
    # Noise scale 0.8 / epsilon while claiming epsilon = 1: true epsilon 1.25.
    broken = dpkit.DiscreteLaplace(sensitivity=1, epsilon=1.25)
    bound, result = audit(repeated(broken), 0, 1, samples=400_000, seed=2, vectorized=True)
    assert bound > 1.0, result


def test_discrete_laplace_sensitivity_times_2_is_caught():
    # Calibrated for sensitivity 1 but the query moves by 2: true epsilon 2.
    broken = dpkit.DiscreteLaplace(sensitivity=1, epsilon=1.0)
    bound, result = audit(repeated(broken), 0, 2, samples=400_000, seed=3, vectorized=True)
    assert bound > 1.0, result


def test_truncated_geometric_passes():
    mechanism = dpkit.Geometric(sensitivity=1, epsilon=1.0, lower=0, upper=10)
    bound, result = audit(repeated(mechanism), 9, 10, samples=400_000, seed=4, vectorized=True)
    assert bound <= 1.0, result
    assert bound >= 0.85, result


def test_discrete_gaussian_passes():
    mechanism = dpkit.DiscreteGaussian(1, epsilon=1.0, delta=1e-5)
    bound, result = audit(repeated(mechanism), 0, 1, samples=4_000_000, seed=5, vectorized=True, delta=1e-5)
    assert bound <= 1.0, result
    assert bound > 0.6, result


def test_discrete_gaussian_sigma_times_0_7_is_caught():
    reference = dpkit.DiscreteGaussian(1, epsilon=1.0, delta=1e-5)
    broken = dpkit.DiscreteGaussian(1, sigma=0.7 * reference.sigma)
    bound, result = audit(
        repeated(broken), 0, 1, samples=12_000_000, seed=6, vectorized=True, delta=1e-5, selection_fraction=0.3
    )
    assert bound > 1.0, result


# ----------------------------------------------------------------------------- real-valued, on a grid


def test_laplace_passes():
    mechanism = dpkit.Laplace(sensitivity=1.0, epsilon=1.0)
    bound, result = audit(repeated(mechanism), 0.0, 1.0, samples=400_000, seed=12, vectorized=True)
    assert bound <= 1.0, result
    assert bound >= 0.85, result


def test_laplace_scale_times_0_8_is_caught():
    broken = dpkit.Laplace(sensitivity=0.8, epsilon=1.0)  # noise scale 0.8 for a query of sensitivity 1
    bound, result = audit(repeated(broken), 0.0, 1.0, samples=400_000, seed=13, vectorized=True)
    assert bound > 1.0, result


def test_laplace_sensitivity_times_2_is_caught():
    mechanism = dpkit.Laplace(sensitivity=1.0, epsilon=1.0)
    bound, result = audit(repeated(mechanism), 0.0, 2.0, samples=400_000, seed=14, vectorized=True)
    assert bound > 1.0, result


def test_gaussian_passes():
    mechanism = dpkit.Gaussian(sensitivity=1.0, epsilon=1.0, delta=1e-5)
    bound, result = audit(repeated(mechanism), 0.0, 1.0, samples=4_000_000, seed=15, vectorized=True, delta=1e-5)
    assert bound <= 1.0, result
    assert bound > 0.6, result


def test_gaussian_sigma_times_0_7_is_caught():
    reference = dpkit.Gaussian(sensitivity=1.0, epsilon=1.0, delta=1e-5)
    broken = dpkit.Gaussian(sensitivity=0.7, epsilon=1.0, delta=1e-5)  # sigma about 0.7x the right one
    assert broken.sigma <= 0.71 * reference.sigma
    bound, result = audit(
        repeated(broken), 0.0, 1.0, samples=12_000_000, seed=16, vectorized=True, delta=1e-5, selection_fraction=0.3
    )
    assert bound > 1.0, result


def test_classic_gaussian_passes():
    mechanism = dpkit.Gaussian(sensitivity=1.0, epsilon=0.9, delta=1e-5, calibration="classic")
    bound, result = audit(repeated(mechanism), 0.0, 1.0, samples=2_000_000, seed=17, vectorized=True, delta=1e-5)
    assert bound <= 0.9, result


def test_staircase_passes():
    mechanism = dpkit.Staircase(sensitivity=1.0, epsilon=1.0)
    bound, result = audit(repeated(mechanism), 0.0, 1.0, samples=400_000, seed=18, vectorized=True)
    assert bound <= 1.0, result
    assert bound >= 0.85, result


def test_staircase_with_doubled_sensitivity_is_caught():
    mechanism = dpkit.Staircase(sensitivity=1.0, epsilon=1.0)
    bound, result = audit(repeated(mechanism), 0.0, 2.0, samples=400_000, seed=19, vectorized=True)
    assert bound > 1.0, result


def test_randomized_response_passes_and_is_tight():
    mechanism = dpkit.RandomizedResponse(epsilon=1.0)

    def release(value, rng, size):
        return np.asarray(mechanism.release(np.full(size, value, dtype=bool), rng=rng)).astype(np.int64)

    bound, result = audit(release, True, False, samples=400_000, seed=7, vectorized=True)
    assert 0.9 <= bound <= 1.0, result


def test_k_ary_randomized_response_passes():
    mechanism = dpkit.RandomizedResponse(epsilon=2.0, k=5)

    def release(value, rng, size):
        return np.asarray(mechanism.release(np.full(size, value), rng=rng))

    bound, result = audit(release, 0, 1, samples=400_000, seed=8, vectorized=True)
    assert 1.7 <= bound <= 2.0, result


# ----------------------------------------------------------------------------- selection

# Neighbouring score vectors (every score moves by the sensitivity 1): candidate 0 gains while
# 50 others lose, so the privacy loss of the exponential mechanism on output 0 approaches
# epsilon (e^{eps/2} from the numerator, nearly e^{eps/2} from the normalizer).
WORST_CASE_SCORES = {0: np.array([1.0] + [0.0] * 50), 1: np.array([0.0] + [1.0] * 50)}


@pytest.mark.parametrize(
    "factory",
    [
        lambda: dpkit.Exponential(sensitivity=1.0, epsilon=1.0),
        lambda: dpkit.ReportNoisyMax(sensitivity=1.0, epsilon=1.0),
        lambda: dpkit.PermuteAndFlip(sensitivity=1.0, epsilon=1.0),
    ],
    ids=["exponential", "report_noisy_max", "permute_and_flip"],
)
def test_selection_mechanisms_pass(factory):
    mechanism = factory()
    scores = WORST_CASE_SCORES

    def release(which, rng):
        return mechanism.release(scores[which], rng=rng)

    bound, result = audit(release, 0, 1, samples=40_000, seed=9)
    assert bound <= 1.0, result
    assert bound >= 0.3, result


def test_exponential_with_halved_epsilon_calibration_is_caught():
    # Claims epsilon = 1 but weights with 2x the exponent: true epsilon 2.
    broken = dpkit.Exponential(sensitivity=1.0, epsilon=2.0)
    scores = WORST_CASE_SCORES
    bound, result = audit(lambda which, rng: broken.release(scores[which], rng=rng), 0, 1, samples=40_000, seed=10)
    assert bound > 1.0, result


def test_sparse_vector_passes():
    mechanism = dpkit.SparseVector(sensitivity=1.0, epsilon=1.0, threshold=0.0)
    answers = {0: np.array([0.0, 0.0]), 1: np.array([1.0, 1.0])}

    def release(which, rng):
        outcome = mechanism.release(answers[which], rng=rng)
        return len(outcome) * 2 + int(outcome[-1])  # which query fired, if any

    bound, result = audit(release, 0, 1, samples=40_000, seed=11)
    assert bound <= 1.0, result
