"""QA reports on mechanism inputs: empty integer answers, tuple labels in randomized response."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dpkit import DiscreteGaussian, DiscreteLaplace, Geometric, InvalidParameterError, Laplace, RandomizedResponse
from dpkit.noise import InsecureSeededRandom

INTEGER_MECHANISMS = [
    lambda: DiscreteLaplace(1, 1.0),
    lambda: DiscreteLaplace(1, 1.0, constant_time=True, dimension=2),
    lambda: Geometric(1, 1.0, lower=0, upper=5),
    lambda: DiscreteGaussian(1, sigma=2.0),
    lambda: DiscreteGaussian(1, epsilon=1.0, delta=1e-6),
]
EMPTY = [[], (), np.array([], dtype=np.int64), np.array([], dtype=np.uint8), np.zeros((0, 3), dtype=np.int32)]


@pytest.mark.parametrize("build", INTEGER_MECHANISMS)
@pytest.mark.parametrize("empty", EMPTY, ids=repr)
def test_integer_mechanisms_refuse_an_empty_answer_by_name(build, empty) -> None:
    """As Laplace does (and whatever the dtype: an empty uint8 array used to pass, an int64 one to
    raise numpy's reduction error)."""
    with pytest.raises(InvalidParameterError) as info:
        build().release(empty, rng=InsecureSeededRandom(0))
    assert info.value.name == "value"
    with pytest.raises(InvalidParameterError) as laplace:
        Laplace(1.0, 1.0).release(empty, rng=InsecureSeededRandom(0))
    assert laplace.value.name == "value"


@pytest.mark.parametrize("build", INTEGER_MECHANISMS)
def test_integer_mechanisms_refuse_an_empty_answer_in_repeated_releases(build) -> None:
    with pytest.raises(InvalidParameterError):
        build().release_repeated([], 3, rng=InsecureSeededRandom(0))


def test_randomized_response_takes_an_empty_batch_in_either_domain() -> None:
    """A batch of reports may be empty (the local oracles rely on it); an empty list used to be
    refused with indices only."""
    for mechanism in (RandomizedResponse(1.0), RandomizedResponse(1.0, k=3)):
        for empty in ([], np.array([], dtype=np.int64)):
            assert len(mechanism.release(empty, rng=InsecureSeededRandom(0))) == 0


def tuple_mechanism(categories: list[object]) -> RandomizedResponse:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return RandomizedResponse(1.0, categories=categories)


def test_tuple_labels_release_one_label() -> None:
    mechanism = tuple_mechanism([(0, 1), (1, 0)])
    for seed in range(20):
        assert mechanism.release((0, 1), rng=InsecureSeededRandom(seed)) in {(0, 1), (1, 0)}


def test_tuple_labels_release_a_batch_of_the_same_shape() -> None:
    mechanism = tuple_mechanism([(0, 1), (1, 0), "other"])
    out = mechanism.release([(0, 1), (1, 0), "other", (0, 1)], rng=InsecureSeededRandom(0))
    assert out.shape == (4,)
    assert all(label in mechanism.categories for label in out.tolist())
    grid = mechanism.release([[(0, 1), "other"], [(1, 0), (1, 0)]], rng=InsecureSeededRandom(1))
    assert grid.shape == (2, 2)


def test_tuple_labels_keep_the_law_of_k_randomized_response() -> None:
    """Reports of (0, 1) are (0, 1) with probability e/(e + 1) (k = 2, eps = 1); 20000 exact draws.

    Two-sided binomial acceptance region at false-positive rate 1e-6 (fixed seed)."""
    from scipy import stats

    mechanism = tuple_mechanism([(0, 1), (1, 0)])
    reports = mechanism.release([(0, 1)] * 20000, rng=InsecureSeededRandom(5))
    kept = sum(report == (0, 1) for report in reports.tolist())
    law = stats.binom(20000, mechanism.keep_probability)
    assert law.ppf(0.5e-6) <= kept <= law.isf(0.5e-6)


def test_tuple_labels_estimate_and_refuse_unknown_values() -> None:
    mechanism = tuple_mechanism([(0, 1), (1, 0)])
    assert mechanism.estimate_frequencies([(0, 1), (0, 1), (1, 0)]).shape == (2,)
    assert mechanism.output_probabilities((1, 0)).shape == (2,)
    with pytest.raises(InvalidParameterError):
        mechanism.release((2, 2), rng=InsecureSeededRandom(0))
    with pytest.raises(InvalidParameterError):
        mechanism.release([(0, 1), [(0, 1), (1, 0)]], rng=InsecureSeededRandom(0))


def test_a_gaussian_whose_noise_outgrows_the_sampler_is_refused_when_built() -> None:
    """Found by the selection QA helper: Gaussian(1, 1e-15, 1e-15) was built (its interval shown),
    then every release raised 'sigma: got 3.29e15', a parameter the user never gave. It was then refused
    when built; now the discrete Gaussian sampler takes any sigma, so it builds and releases, and only
    noise beyond float64 (sigma 2**1007) is refused when built, naming epsilon."""
    from dpkit import Gaussian

    assert isinstance(Gaussian(1.0, 1e-15, 1e-15).release(0.0, rng=InsecureSeededRandom(0)), float)
    with pytest.raises(InvalidParameterError) as info:
        Gaussian(2.0**1000, 1e-10, 1e-12)
    assert info.value.name == "epsilon"
    assert isinstance(Gaussian(1.0, 1e-10, 1e-12).release(0.0, rng=InsecureSeededRandom(0)), float)
