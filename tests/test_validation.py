"""The shared parameter checks (``dpkit._validation``) and the typed error they raise."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpkit import InvalidParameterError
from dpkit._validation import check_bounds, check_delta, check_positive, check_probability
from dpkit.guarantees import PureDP
from dpkit.mechanisms import Laplace

HUGE = 10**400  # an int beyond the float range: float(HUGE) raises OverflowError


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: check_positive("epsilon", HUGE), "epsilon"),
        (lambda: check_positive("scale", -HUGE, allow_inf=True), "scale"),
        (lambda: check_delta(HUGE), "delta"),
        (lambda: check_probability("p", Fraction(HUGE, 3)), "p"),
        (lambda: check_bounds(0, HUGE), "bounds.upper"),
        (lambda: Laplace(HUGE, 1.0), "sensitivity"),
        (lambda: PureDP(HUGE), "epsilon"),
    ],
)
def test_numbers_beyond_the_float_range_are_refused_by_name(call, name):
    """Catches the bare OverflowError that float(10**400) raised inside the checks."""
    with pytest.raises(InvalidParameterError) as info:
        call()
    assert info.value.name == name


def test_a_huge_int_is_infinite_where_infinity_is_allowed():
    assert check_positive("x", HUGE, allow_inf=True) == math.inf


def test_long_values_are_shortened_in_the_message():
    """A 10,000-element list or a 400-digit int is cut in the middle; the parameter and rule stay readable."""
    with pytest.raises(InvalidParameterError) as info:
        check_positive("epsilon", HUGE)
    message = str(info.value)
    assert message.startswith("epsilon: got 1000") and message.endswith("must be a real number > 0 and finite")
    assert "(401 characters)" in message and len(message) < 300
    assert info.value.value == HUGE  # the value itself is kept whole on the exception
    with pytest.raises(InvalidParameterError, match=r"^epsilon: got -0\.5; must") as short:
        check_positive("epsilon", -0.5)
    assert short.value.value == -0.5


def test_masked_entries_are_refused_everywhere_data_is_read():
    """check_data exposed the hidden values of masked (missing) entries; the selection mechanisms read
    scores through it (the numeric mechanisms already refused masked arrays)."""
    import numpy as np

    from dpkit._validation import check_data
    from dpkit.mechanisms import Exponential, PermuteAndFlip

    masked = np.ma.masked_array([1.0, 50.0], mask=[False, True])
    for call in (lambda: check_data("x", masked), lambda: Exponential(1.0, 1.0).release(masked)):
        with pytest.raises(InvalidParameterError, match="masked"):
            call()
    with pytest.raises(InvalidParameterError, match="masked"):
        PermuteAndFlip(1.0, 1.0).release(masked)
    assert check_data("x", np.ma.masked_array([1.0, 2.0])).tolist() == [1.0, 2.0]  # nothing masked: fine


def test_draw_counts_beyond_any_memory_are_refused_by_name():
    from dpkit.noise import discrete_laplace

    with pytest.raises(InvalidParameterError, match="size"):
        discrete_laplace(1.0, 2**41)
    with pytest.raises(InvalidParameterError, match="count"):
        Laplace(1.0, 1.0).release_repeated(1.0, 10**20)
