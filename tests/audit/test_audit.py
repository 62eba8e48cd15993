"""The empirical audit: no false alarm on correct releases, and it catches broken ones."""

import dataclasses
import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from dpkit import InvalidParameterError
from dpkit.audit import AuditResult, LowBitResult, estimate_epsilon, low_bit_test, on_grid
from dpkit.events import PureDPEvent
from dpkit.guarantees import PureDP
from dpkit.mechanisms import Mechanism
from dpkit.noise import InsecureSeededRandom, discrete_gaussian, discrete_laplace, snap_to_grid

EPSILON = 1.0
GRID = -10  # outputs live on multiples of 2^-10


def grid_laplace(scale):
    """x + Laplace(scale) on the grid 2^GRID, built from the exact discrete Laplace sampler."""

    def release(x, rng, size):
        units = discrete_laplace(scale * 2.0**-GRID, size, rng=rng)
        return snap_to_grid(np.full(size, float(x)), GRID) + np.ldexp(units, GRID)

    return release


def grid_gaussian(sigma):
    def release(x, rng, size):
        units = discrete_gaussian(sigma * 2.0**-GRID, size, rng=rng)
        return snap_to_grid(np.full(size, float(x)), GRID) + np.ldexp(units, GRID)

    return release


def analytic_gaussian_sigma(epsilon, delta, sensitivity=1.0):
    """Balle & Wang (2018), Theorem 8: the smallest sigma with an exact (epsilon, delta) guarantee."""

    def excess(sigma):
        a = sensitivity / (2 * sigma)
        b = epsilon * sigma / sensitivity
        return norm.cdf(a - b) - math.exp(epsilon) * norm.cdf(-a - b) - delta

    return brentq(excess, 1e-3, 1e3, xtol=1e-12)


# ---------------------------------------------------------------------------------------------
# estimate_epsilon
# ---------------------------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_correct_laplace_is_not_flagged_and_bound_is_tight(seed):
    result = estimate_epsilon(
        grid_laplace(1 / EPSILON), 0.0, 1.0, samples=400_000, vectorized=True, rng=InsecureSeededRandom(seed)
    )
    assert result.epsilon_lower_bound <= EPSILON  # false alarm probability <= alpha = 1e-6
    assert result.epsilon_lower_bound >= 0.6 * EPSILON


@pytest.mark.statistical
def test_catches_scale_too_small():
    # scale 0.8 / epsilon: the true epsilon is 1.25
    result = estimate_epsilon(
        grid_laplace(0.8 / EPSILON), 0.0, 1.0, samples=400_000, vectorized=True, rng=InsecureSeededRandom(11)
    )
    assert result.epsilon_lower_bound > EPSILON


@pytest.mark.statistical
def test_catches_sensitivity_underestimated():
    # the query moves by 2 but the noise is calibrated for sensitivity 1: true epsilon is 2
    result = estimate_epsilon(
        grid_laplace(1 / EPSILON), 0.0, 2.0, samples=400_000, vectorized=True, rng=InsecureSeededRandom(12)
    )
    assert result.epsilon_lower_bound > EPSILON
    assert result.direction == "b>a"


@pytest.mark.statistical
def test_catches_gaussian_with_too_little_noise():
    delta = 1e-5
    sigma = analytic_gaussian_sigma(EPSILON, delta)
    assert 3.7 < sigma < 3.8  # Balle & Wang's value for (1, 1e-5) and sensitivity 1
    # 0.7 sigma is really (1.48, 1e-5)-DP; its extreme events are rare, so many samples are needed.
    result = estimate_epsilon(
        grid_gaussian(0.7 * sigma),
        0.0,
        1.0,
        samples=12_000_000,
        delta=delta,
        vectorized=True,
        rng=InsecureSeededRandom(13),
        selection_fraction=0.3,  # the event is easy to find; the evaluation needs the samples
    )
    assert result.epsilon_lower_bound > EPSILON


@pytest.mark.statistical
def test_correct_gaussian_is_not_flagged():
    delta = 1e-5
    sigma = analytic_gaussian_sigma(EPSILON, delta)
    result = estimate_epsilon(
        grid_gaussian(sigma), 0.0, 1.0, samples=4_000_000, delta=delta, vectorized=True, rng=InsecureSeededRandom(14)
    )
    assert result.epsilon_lower_bound <= EPSILON


def test_result_is_frozen_and_reproducible():
    def release(x, rng, size):
        return x + discrete_laplace(1.0, size, rng=rng)

    first = estimate_epsilon(release, 0, 1, samples=20_000, vectorized=True, rng=InsecureSeededRandom(5))
    second = estimate_epsilon(release, 0, 1, samples=20_000, vectorized=True, rng=InsecureSeededRandom(5))
    assert first == second
    assert isinstance(first, AuditResult)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.epsilon_lower_bound = 3.0  # type: ignore[misc]
    low_a, high_a = first.p_a_interval
    low_b, high_b = first.p_b_interval
    assert 0 <= low_a <= high_a <= 1 and 0 <= low_b <= high_b <= 1
    text = repr(first)
    assert "epsilon_lower_bound=" in text and first.event in text
    assert first.samples == 20_000 and first.evaluation_samples == 10_000


def test_per_call_release_with_integer_outputs():
    def release(x, rng):  # one output per call
        return x + int(discrete_laplace(1.0, 1, rng=rng)[0])

    result = estimate_epsilon(release, 0, 1, samples=4_000, rng=InsecureSeededRandom(6))
    assert 0.0 <= result.epsilon_lower_bound <= 1.0
    assert result.event.startswith("output")


def test_randomized_response_bound():
    true_epsilon = math.log(3.0)

    def randomized_response(bit, rng, size):
        from dpkit.noise import bernoulli_rational

        truthful = bernoulli_rational("3/4", size, rng=rng)
        return np.where(truthful, bit, 1 - bit)

    result = estimate_epsilon(randomized_response, 0, 1, samples=200_000, vectorized=True, rng=InsecureSeededRandom(8))
    assert 0.8 * true_epsilon <= result.epsilon_lower_bound <= true_epsilon


def test_vector_outputs_use_statistic():
    def release(x, rng, size):
        noise = discrete_laplace(1.0, 2 * size, rng=rng).reshape(size, 2)
        return noise + np.array([0.0, x])  # only the second coordinate depends on x

    rng = InsecureSeededRandom(9)
    first_coordinate = estimate_epsilon(release, 0, 1, samples=50_000, vectorized=True, rng=rng)
    assert first_coordinate.epsilon_lower_bound < 0.2  # the default statistic sees no signal
    second = estimate_epsilon(
        release, 0, 1, samples=50_000, vectorized=True, rng=rng, statistic=lambda outputs: outputs[:, 1]
    )
    assert 0.5 < second.epsilon_lower_bound <= 1.0


def test_user_events():
    def release(x, rng, size):
        return x + discrete_laplace(1.0, size, rng=rng)

    events = [("output >= 1", lambda y: y >= 1), ("output <= 0", lambda y: y <= 0)]
    result = estimate_epsilon(
        release, 0, 1, samples=50_000, vectorized=True, rng=InsecureSeededRandom(10), events=events
    )
    assert result.event in {"output >= 1", "output <= 0"}
    assert 0.7 < result.epsilon_lower_bound <= 1.0


class _CoinMechanism(Mechanism):
    """A tiny epsilon-DP mechanism for the Mechanism path: randomized response with P(truth) = e/(1+e)."""

    @property
    def guarantee(self):
        return PureDP(1.0)

    @property
    def event(self):
        return PureDPEvent(1.0)

    def privacy_map(self, d_in):
        return PureDP(1.0 * d_in)

    def release(self, value, *, rng=None):
        from dpkit.noise import bernoulli_exp

        lie = bernoulli_exp(math.log1p(math.e), 1, rng=rng)[0]  # P(lie) = 1 / (1 + e)
        return 1 - value if lie else value


def test_mechanism_release_path():
    result = estimate_epsilon(_CoinMechanism(), 0, 1, samples=4_000, rng=InsecureSeededRandom(15))
    assert 0.0 <= result.epsilon_lower_bound <= 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"samples": 99},
        {"samples": 0},
        {"samples": 1000.0},
        {"alpha": 0.0},
        {"alpha": 1.0},
        {"alpha": -0.1},
        {"alpha": 1.5},
        {"delta": 1.0},
        {"delta": -1e-9},
        {"rng": np.random.default_rng(0)},
    ],
)
def test_bad_parameters(kwargs):
    def release(x, rng):
        return x

    with pytest.raises(InvalidParameterError):
        estimate_epsilon(release, 0, 1, **kwargs)


@pytest.mark.parametrize("release", [None, 3.0, "laplace", [1, 2]])
def test_release_must_be_callable(release):
    with pytest.raises(InvalidParameterError, match="release"):
        estimate_epsilon(release, 0, 1, samples=100)


def test_vectorized_release_with_wrong_length_is_refused():
    with pytest.raises(InvalidParameterError, match="vectorized"):
        estimate_epsilon(lambda x, rng, size: np.zeros(3), 0, 1, samples=100, vectorized=True)


# ---------------------------------------------------------------------------------------------
# Floating-point leaks (Mironov 2012)
# ---------------------------------------------------------------------------------------------


def naive_float_laplace(x, rng, size):
    """The textbook (broken) release: x + numpy Laplace noise, in plain floating point."""
    generator = np.random.default_rng(int(rng.uint64(1)[0]))
    return x + generator.laplace(scale=1.0, size=size)


@pytest.mark.statistical
def test_low_bit_test_detects_naive_float_laplace():
    result = low_bit_test(
        naive_float_laplace, (0.0, 1.0), samples=200_000, vectorized=True, rng=InsecureSeededRandom(20)
    )
    assert isinstance(result, LowBitResult)
    assert not result.passed
    assert result.p_value < 1e-6
    assert "FAILED" in repr(result)


@pytest.mark.statistical
def test_low_bit_test_passes_grid_release():
    result = low_bit_test(grid_laplace(1.0), (0.0, 1.0), samples=200_000, vectorized=True, rng=InsecureSeededRandom(21))
    assert result.passed
    assert result.degrees_of_freedom >= 5
    assert on_grid(grid_laplace(1.0)(0.3, InsecureSeededRandom(22), 1000), GRID)


def test_low_bit_test_small_and_bad_parameters():
    result = low_bit_test(grid_laplace(1.0), samples=2_000, vectorized=True, rng=InsecureSeededRandom(23))
    assert result.passed
    with pytest.raises(InvalidParameterError):
        low_bit_test(grid_laplace(1.0), samples=10, vectorized=True)
    with pytest.raises(InvalidParameterError):
        low_bit_test(grid_laplace(1.0), inputs=(0.0,), vectorized=True)
    with pytest.raises(InvalidParameterError):
        low_bit_test(42)


def test_on_grid():
    assert on_grid(np.array([0.0, 0.25, -1.75, 1024.0]), -2)
    assert on_grid([4.0, -8.0], 2)
    assert not on_grid([2.0], 2)
    assert not on_grid(np.array([0.1]), -10)
    assert not on_grid([np.nan], 0)
    assert not on_grid([np.inf], 0)
    assert on_grid(np.ldexp(np.arange(-5, 5), -30), -30)
    assert not on_grid(np.ldexp(np.array([1.0]), -31), -30)
    with pytest.raises(InvalidParameterError):
        on_grid([1.0], 0.5)
