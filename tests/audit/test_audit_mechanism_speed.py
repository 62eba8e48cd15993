"""The audit draws a mechanism's samples with its vectorized sampler, from the law of ``release``.

``estimate_epsilon`` and ``low_bit_test`` used to call ``release`` once per sample (about 270
times slower than ``release_repeated``). These tests pin the fast path without timing it: they
count the ``release`` calls, check that the vectorized samples have the law of per-call samples
(two-sample tests at a false-alarm rate of 1e-7, fixed seeds), and that the audit's bounds are
what they were.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from scipy.stats import ks_2samp

from dpkit import InvalidParameterError
from dpkit.audit import estimate_epsilon, low_bit_test, on_grid
from dpkit.audit._estimate import _draw_mechanism
from dpkit.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    Exponential,
    Gaussian,
    Geometric,
    Laplace,
    Mechanism,
    PermuteAndFlip,
    RandomizedResponse,
    Staircase,
)
from dpkit.noise import InsecureSeededRandom

# False-alarm rate of each two-sample test (split over the coordinates of a vector output).
TWO_SAMPLE_ALPHA = 1e-7


def _mechanisms() -> list[tuple[str, Mechanism, object]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [
            ("laplace", Laplace(1.0, 1.0), 0.3),  # off the grid: snapping is part of the law
            ("laplace-vector", Laplace(1.0, 1.0, dimension=3), [0.3, -1.2, 5.0]),
            ("gaussian", Gaussian(1.0, 1.0, 1e-5), 0.3),
            ("staircase", Staircase(1.0, 1.0), 0.3),
            ("discrete-gaussian", DiscreteGaussian(1, sigma=2.0), 3),
            ("discrete-laplace", DiscreteLaplace(1, 1.0), 3),
            ("geometric-clamped", Geometric(1, 0.5, lower=0, upper=5), 1),  # clamping is part of the law
            ("rr-labels", RandomizedResponse(1.0, ["a", "b", "c"]), "b"),
            ("rr-binary", RandomizedResponse(1.0), True),
            ("rr-indices", RandomizedResponse(1.0, k=4), 2),
            ("exponential", Exponential(1.0, 1.0, candidates=["x", "y", "z"]), [1.0, 2.0, 0.5]),
        ]


MECHANISMS = _mechanisms()
IDS = [name for name, _, _ in MECHANISMS]


def _per_call(mechanism: Mechanism, value: object, count: int, seed: int) -> np.ndarray:
    source = InsecureSeededRandom(seed)
    return np.asarray([mechanism.release(value, rng=source) for _ in range(count)])


def _codes(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Labels as codes of their sorted order (the same coding for both samples)."""
    _, codes = np.unique(np.concatenate([first, second]), return_inverse=True)
    return codes[: first.shape[0]], codes[first.shape[0] :]


@pytest.mark.statistical
@pytest.mark.parametrize(("name", "mechanism", "value"), MECHANISMS, ids=IDS)
def test_vectorized_samples_have_the_law_of_per_call_releases(name, mechanism, value):
    fast = _draw_mechanism(mechanism, value, 40_000, InsecureSeededRandom(11))
    slow = _per_call(mechanism, value, 4_000, seed=12)
    # The same shape per sample and the same kind of value (numbers stay numbers, labels labels).
    assert fast.shape[1:] == slow.shape[1:]
    assert fast.dtype.kind == slow.dtype.kind
    if isinstance(mechanism, Laplace | Gaussian | Staircase):
        assert on_grid(fast, mechanism.grid_exponent)
    if isinstance(mechanism, Geometric):
        assert fast.min() >= 0 and fast.max() <= 5
    if fast.dtype.kind not in "iuf":
        fast, slow = _codes(fast, slow)
    fast = fast.reshape(fast.shape[0], -1).astype(np.float64)
    slow = slow.reshape(slow.shape[0], -1).astype(np.float64)
    for column in range(fast.shape[1]):
        # For discrete laws the KS test is conservative: P(p-value <= a) <= a under equal laws.
        p_value = ks_2samp(fast[:, column], slow[:, column]).pvalue
        assert p_value >= TWO_SAMPLE_ALPHA / fast.shape[1], (name, column, p_value)


def _count_releases(monkeypatch: pytest.MonkeyPatch, kind: type[Mechanism]) -> list[int]:
    """Wrap ``kind.release`` (on the class, as the audit finds it) to count its calls."""
    calls = [0]
    original = kind.release

    @functools.wraps(original)
    def counting(self, value, *, rng=None):
        calls[0] += 1
        return original(self, value, rng=rng)

    monkeypatch.setattr(kind, "release", counting)
    return calls


@pytest.mark.parametrize(("name", "mechanism", "value"), MECHANISMS, ids=IDS)
def test_audit_of_a_mechanism_makes_a_constant_number_of_release_calls(monkeypatch, name, mechanism, value):
    calls = _count_releases(monkeypatch, type(mechanism))
    samples = 5_000
    if name.startswith("rr"):
        other = {"rr-labels": "a", "rr-binary": False, "rr-indices": 1}[name]
    elif name == "exponential":
        other = [2.0, 1.0, 0.5]
    elif name == "laplace-vector":
        other = [1.3, -1.2, 5.0]
    else:
        other = value + 1
    estimate_epsilon(mechanism, value, other, samples=samples, rng=InsecureSeededRandom(3))
    # The per-call audit made 2 * samples calls; the vectorized one at most two per input.
    assert calls[0] <= 4
    if not (name.startswith("rr") or name == "exponential"):
        calls[0] = 0
        low_bit_test(mechanism, (value, other), samples=samples, rng=InsecureSeededRandom(4))
        assert calls[0] <= 4


def test_vectorized_path_honours_the_seeded_source():
    mechanism = Laplace(1.0, 1.0)
    first = estimate_epsilon(mechanism, 0.0, 1.0, samples=50_000, rng=InsecureSeededRandom(5))
    second = estimate_epsilon(mechanism, 0.0, 1.0, samples=50_000, rng=InsecureSeededRandom(5))
    assert first == second
    fast = _draw_mechanism(RandomizedResponse(1.0, k=3), 1, 1_000, InsecureSeededRandom(6))
    again = _draw_mechanism(RandomizedResponse(1.0, k=3), 1, 1_000, InsecureSeededRandom(6))
    assert np.array_equal(fast, again)


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("mechanism", "a", "b", "low"),
    [
        (Laplace(1.0, 1.0), 0.0, 1.0, 0.85),
        (DiscreteLaplace(1, 1.0), 0, 1, 0.85),
        (RandomizedResponse(1.0), False, True, 0.85),
        (RandomizedResponse(1.0, ["a", "b", "c"]), "a", "b", 0.8),
        # Two candidates, scores swapped: the law's log-ratio is epsilon / 2 (the mechanism's factor 2).
        (Exponential(1.0, 1.0), [0.0, 1.0], [1.0, 0.0], 0.4),
    ],
    ids=["laplace", "discrete-laplace", "rr-binary", "rr-labels", "exponential"],
)
def test_audit_bound_from_a_mechanism_is_as_before(mechanism, a, b, low):
    """A correct epsilon = 1 mechanism: the bound is at most 1 and near the law's log-ratio at 200k samples."""
    result = estimate_epsilon(mechanism, a, b, samples=200_000, rng=InsecureSeededRandom(7))
    assert low < result.epsilon_lower_bound <= 1.0


@pytest.mark.statistical
def test_gaussian_and_low_bit_audits_pass_through_the_vectorized_path():
    gaussian = Gaussian(1.0, 1.0, 1e-5)
    result = estimate_epsilon(gaussian, 0.0, 1.0, samples=200_000, delta=1e-5, rng=InsecureSeededRandom(8))
    assert 0.0 < result.epsilon_lower_bound <= 1.0
    for mechanism in (Laplace(1.0, 1.0), gaussian, DiscreteLaplace(1, 1.0), Staircase(1.0, 1.0)):
        assert low_bit_test(mechanism, samples=200_000, rng=InsecureSeededRandom(9)).passed


# -- where the audit keeps one release call per sample ------------------------------------------


class _LeakyLaplace(Laplace):
    """A subclass whose release leaks (four times the value): its own release must be audited."""

    def release(self, value, *, rng=None):
        return super().release(4 * np.asarray(value, dtype=np.float64), rng=rng)


def test_subclass_overriding_release_is_audited_call_by_call(monkeypatch):
    calls = _count_releases(monkeypatch, _LeakyLaplace)
    result = estimate_epsilon(_LeakyLaplace(1.0, 1.0), 0.0, 1.0, samples=2_000, rng=InsecureSeededRandom(10))
    assert calls[0] == 4_000
    assert result.epsilon_lower_bound > 1.0  # the leak (true epsilon 4) is caught


def test_release_patched_on_the_instance_is_audited_call_by_call():
    mechanism = Laplace(1.0, 1.0)
    calls = [0]
    original = mechanism.release

    def leaky(value, *, rng=None):
        calls[0] += 1
        return original(4 * value, rng=rng)

    mechanism.release = leaky
    result = estimate_epsilon(mechanism, 0.0, 1.0, samples=2_000, rng=InsecureSeededRandom(10))
    assert calls[0] == 4_000
    assert result.epsilon_lower_bound > 1.0


@pytest.mark.parametrize(
    ("mechanism", "a", "b"),
    [
        (DiscreteLaplace(1, 1.0, constant_time=True), 0, 1),  # refuses batches beyond its dimension
        (RandomizedResponse(1.0, [(0, 1), (1, 0)]), (0, 1), (1, 0)),  # tuple labels
        (PermuteAndFlip(1.0, 1.0), [0.0, 1.0], [1.0, 0.0]),  # no vectorized form
    ],
    ids=["constant-time", "tuple-labels", "permute-and-flip"],
)
def test_mechanisms_without_a_faithful_vectorized_form_keep_one_call_per_sample(monkeypatch, mechanism, a, b):
    calls = _count_releases(monkeypatch, type(mechanism))
    estimate_epsilon(mechanism, a, b, samples=300, rng=InsecureSeededRandom(11))
    assert calls[0] == 600


@pytest.mark.parametrize(
    ("mechanism", "value"),
    [
        (Laplace(1.0, 1.0), [0.0, 1.0]),  # a vector for a scalar mechanism
        (Geometric(1, 1.0, lower=0, upper=5), 9),  # outside the bounds
        (RandomizedResponse(1.0, ["a", "b"]), "c"),  # not a category
        (RandomizedResponse(1.0, k=3), 7),
        (Exponential(1.0, 1.0), [[0.0, 1.0]]),  # not one score vector
        (Exponential(1.0, 1.0), [0.0, np.nan]),
    ],
)
def test_bad_values_are_refused_as_release_refuses_them(mechanism, value):
    with pytest.raises(InvalidParameterError) as direct:
        mechanism.release(value, rng=InsecureSeededRandom(0))
    with pytest.raises(InvalidParameterError) as audited:
        estimate_epsilon(mechanism, value, value, samples=100, rng=InsecureSeededRandom(0))
    assert str(audited.value) == str(direct.value)
