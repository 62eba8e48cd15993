"""Adversarial use of the public mechanism API: odd types, shapes and misuse.

Each test here pins a defect found by probing the API the way a demanding OpenDP /
dp_accounting user would: a bad input must be refused with a typed error before any noise is
drawn, and nothing may be released (or claimed) silently wrong.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit.guarantees import PureDP
from dpkit.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    Exponential,
    Gaussian,
    Geometric,
    Laplace,
    Staircase,
)
from dpkit.noise import InsecureSeededRandom


class NoDraws:
    """A random source that fails the test if any noise is drawn from it."""

    secure = True

    def uint64(self, size: int) -> NDArray[np.uint64]:
        raise AssertionError("noise was drawn for an input that must be refused first")


def integer_mechanisms() -> list[DiscreteLaplace | DiscreteGaussian]:
    return [
        DiscreteLaplace(1, 1.0),
        Geometric(1, 1.0),
        DiscreteGaussian(1, 2.0),
        DiscreteGaussian(1, epsilon=1.0, delta=1e-6),
    ]


# -- integer inputs beyond int64 wrap around silently ----------------------------------------------

WRAPPING_VALUES = [
    -(2**63),
    np.int64(-(2**63)),
    [-(2**63)],
    np.array([-(2**63)], dtype=np.int64),
    np.uint64(2**63),
    np.uint64(2**64 - 1),
    np.array([2**63], dtype=np.uint64),
    2**63,
]


@pytest.mark.parametrize("value", WRAPPING_VALUES, ids=repr)
@pytest.mark.parametrize("mechanism", integer_mechanisms(), ids=repr)
def test_integer_release_refuses_values_outside_int64(mechanism: DiscreteLaplace, value: object) -> None:
    # Before: DiscreteLaplace.release(2**63) returned -9223372036854775808 (the uint64 input was
    # cast to int64 and wrapped; |int64 min| overflows so the magnitude check passed).
    with pytest.raises(InvalidParameterError, match="value"):
        mechanism.release(value, rng=NoDraws())
    with pytest.raises(InvalidParameterError, match="value"):
        mechanism.release_repeated(value, 3, rng=NoDraws())


@pytest.mark.parametrize("mechanism", integer_mechanisms(), ids=repr)
def test_integer_release_keeps_large_in_range_values(mechanism: DiscreteLaplace) -> None:
    value = 2**62 - 10**6
    released = mechanism.release(np.uint64(value), rng=InsecureSeededRandom(0))
    assert abs(released - value) < 1000


# -- confidence intervals -----------------------------------------------------------------------


def numeric_mechanisms() -> list[object]:
    return [
        Laplace(1.0, 1.0, dimension=3),
        Gaussian(1.0, 1.0, 1e-6, dimension=3),
        DiscreteLaplace(1, 1.0),
        Geometric(1, 1.0, 0, 10),
        DiscreteGaussian(1, 2.0),
        Staircase(1.0, 1.0),
    ]


@pytest.mark.parametrize("dimension", [0, -5, 2.5, True, "3", np.float64(3.0)], ids=repr)
@pytest.mark.parametrize("mechanism", numeric_mechanisms(), ids=repr)
def test_confidence_interval_refuses_a_bad_dimension(mechanism: Laplace, dimension: object) -> None:
    # Before: dimension=-5 or True silently gave per-coordinate (not simultaneous) intervals.
    with pytest.raises(InvalidParameterError, match="dimension"):
        mechanism.confidence_interval(0.05, [1.0, 2.0, 3.0], simultaneous=True, dimension=dimension)  # type: ignore[arg-type]


@pytest.mark.parametrize("mechanism", numeric_mechanisms(), ids=repr)
def test_simultaneous_interval_never_covers_fewer_coordinates_than_released(mechanism: Laplace) -> None:
    with pytest.raises(InvalidParameterError, match="dimension"):
        mechanism.confidence_interval(0.05, [1.0, 2.0, 3.0], simultaneous=True, dimension=2)
    # More coordinates than released is a wider, still valid union bound.
    low, high = mechanism.confidence_interval(0.05, [1.0, 2.0], simultaneous=True, dimension=3)
    wide_low, wide_high = mechanism.confidence_interval(0.05, [1.0, 2.0, 3.0], simultaneous=True)
    np.testing.assert_array_equal(low, wide_low[:2])
    np.testing.assert_array_equal(high, wide_high[:2])


@pytest.mark.parametrize("flag", ["yes", 1, None, np.bool_(True)], ids=repr)
def test_confidence_interval_simultaneous_must_be_a_bool(flag: object) -> None:
    with pytest.raises(InvalidParameterError, match="simultaneous"):
        Laplace(1.0, 1.0).confidence_interval(0.05, [1.0, 2.0], simultaneous=flag)  # type: ignore[arg-type]


@pytest.mark.parametrize("released", [float("nan"), [1.0, float("inf")], "abc", [[1.0], [2.0, 3.0]], True], ids=repr)
@pytest.mark.parametrize("mechanism", numeric_mechanisms(), ids=repr)
def test_confidence_interval_refuses_a_bad_released_value(mechanism: Laplace, released: object) -> None:
    # Before: NaN gave (nan, nan) silently and "abc" a bare ValueError from numpy.
    with pytest.raises(InvalidParameterError, match="released"):
        mechanism.confidence_interval(0.05, released)


@pytest.mark.parametrize("mechanism", [Laplace(1.0, 1.0, dimension=3), Gaussian(1.0, 1.0, 1e-6, dimension=3)], ids=repr)
def test_simultaneous_noise_interval_covers_the_calibrated_dimension(mechanism: Laplace) -> None:
    # Without a released value the mechanism's own dimension is the number of coordinates: the
    # interval of a 3-coordinate release must not be the one-coordinate interval.
    assert mechanism.confidence_interval(0.05, simultaneous=True) == mechanism.confidence_interval(
        0.05, simultaneous=True, dimension=3
    )
    assert mechanism.confidence_interval(0.05, simultaneous=True)[1] > mechanism.confidence_interval(0.05)[1]


# -- release_repeated shapes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "mechanism",
    [Laplace(1.0, 1.0, dimension=3), Gaussian(1.0, 1.0, 1e-6, dimension=3), DiscreteLaplace(1, 1.0)],
    ids=repr,
)
@pytest.mark.parametrize("value", [[1, 2, 3], [[1, 2, 3]], [[1], [2], [3]]], ids=repr)
def test_release_repeated_stacks_releases_of_the_value_shape(mechanism: Laplace, value: object) -> None:
    one = np.asarray(mechanism.release(value, rng=InsecureSeededRandom(1)))
    many = mechanism.release_repeated(value, 4, rng=InsecureSeededRandom(1))
    assert many.shape == (4, *one.shape)
    assert many.dtype == one.dtype


# -- mechanisms are immutable once built ----------------------------------------------------------


@pytest.mark.parametrize(
    ("mechanism", "name"),
    [
        (Laplace(1.0, 1.0), "epsilon"),
        (Laplace(1.0, 1.0), "scale"),
        (Gaussian(1.0, 1.0, 1e-6), "delta"),
        (Gaussian(1.0, 1.0, 1e-6), "sigma"),
        (Staircase(1.0, 1.0), "epsilon"),
        (DiscreteLaplace(1, 1.0), "epsilon"),
    ],
    ids=repr,
)
def test_public_parameters_cannot_be_reassigned(mechanism: Laplace, name: str) -> None:
    # Before: ``laplace.epsilon = 0.01`` was accepted; the guarantee then claimed 0.01 while
    # the noise stayed calibrated for the original epsilon.
    before = mechanism.guarantee
    with pytest.raises(AttributeError):
        setattr(mechanism, name, 0.01)
    assert mechanism.guarantee == before


def test_check_refuses_something_that_is_not_a_guarantee() -> None:
    for mechanism in (Laplace(1.0, 1.0), Exponential(1.0, 1.0)):
        with pytest.raises(InvalidParameterError, match="d_out"):
            mechanism.check(1.0, "epsilon=1")  # type: ignore[arg-type]
        assert mechanism.check(1.0, PureDP(1.0))


# -- masked arrays hide values, they do not remove them -------------------------------------------


@pytest.mark.parametrize(
    "mechanism", [Laplace(1.0, 1.0, dimension=2), DiscreteLaplace(1, 1.0), DiscreteGaussian(1, 2.0)], ids=repr
)
def test_release_refuses_masked_entries(mechanism: Laplace) -> None:
    # Before: the masked (missing) entry's hidden data was released as if it were present.
    masked = np.ma.array([1, 2], mask=[False, True])
    with pytest.raises(InvalidParameterError, match="masked"):
        mechanism.release(masked, rng=NoDraws())
    unmasked = np.ma.array([1, 2], mask=[False, False])
    assert np.asarray(mechanism.release(unmasked, rng=InsecureSeededRandom(0))).shape == (2,)
