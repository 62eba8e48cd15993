"""``dpkit._search``: first_true finds the answer for every kind of start in logarithmically many calls;
bisect_floats ends on adjacent floats."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpkit._search import bisect_floats, first_true


def _counted(answer: int):
    calls: list[int] = []

    def predicate(m: int) -> bool:
        calls.append(m)
        return m >= answer

    return predicate, calls


@pytest.mark.parametrize("lowest", [0, 1, -5])
def test_first_true_finds_the_answer_from_any_guess_in_log_calls(lowest):
    # Test-only generator of answers and guesses (no privacy noise involved).
    generator = np.random.default_rng(0)
    cases = [(lowest, lowest), (lowest, lowest + 1000), (lowest + 1, lowest), (10**18, lowest), (lowest, 10**18)]
    cases += [(int(a), int(g)) for a, g in generator.integers(lowest, lowest + 10**6, size=(300, 2))]
    for answer, guess in cases:
        predicate, calls = _counted(answer)
        assert first_true(predicate, guess, lowest) == answer
        assert min(calls) >= lowest  # the sentinel lowest - 1 is never evaluated
        distance = abs(answer - max(guess, lowest)) + 2
        assert len(calls) <= 2 * math.ceil(math.log2(distance)) + 3, (answer, guess, len(calls))


def test_first_true_guess_below_lowest_is_raised_to_it():
    predicate, calls = _counted(7)
    assert first_true(predicate, -100, lowest=3) == 7
    assert calls[0] == 3


@pytest.mark.parametrize(
    ("root", "low", "high"),
    [(math.sqrt(2.0), 1.0, 2.0), (1e-300, -1.0, 1.0), (-3.5, -700.0, 700.0), (0.0, -1e308, 1e308)],
)
def test_bisect_floats_ends_on_adjacent_floats_either_side_of_the_switch(root, low, high):
    calls = []

    def below(x: float) -> bool:
        calls.append(x)
        return x < root

    left, right = bisect_floats(below, low, high)
    assert left < root <= right and math.nextafter(left, math.inf) == right
    assert low not in calls and high not in calls  # the ends are taken as given
    assert len(calls) <= 2100
