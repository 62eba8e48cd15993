"""Findings of the review of the any-scale noise (session of 2026-11-25): the output grid's
exponent is floor(log2 share) exactly, and the exact path saturates where the numpy path does."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpkit.noise import add_noise_on_grid, sensitivity_grid_exponent


@pytest.mark.parametrize(
    ("sensitivity", "dimension"),
    [(math.nextafter(2.0**1000, 0.0), 1), (math.nextafter(4.0, 0.0), 2**40), (math.nextafter(1.0, 0.0), 3)],
)
def test_the_grid_is_at_most_two_to_the_minus_20_of_the_share(sensitivity: float, dimension: int) -> None:
    """math.log2 rounded a share just below a power of two up, so d 2^k was 2^-20 Delta (1 + 2^-52)."""
    k = sensitivity_grid_exponent(sensitivity, dimension)
    assert dimension * Fraction(2) ** k <= Fraction(sensitivity) / 2**20
    assert dimension * Fraction(2) ** (k + 1) > Fraction(sensitivity) / 2**20 * (1 - Fraction(1, 2**50))


def test_both_paths_saturate_at_the_largest_float() -> None:
    """On a grid 2^k with k > 971 the exact path clamped to floor(max / 2^k) 2^k, below the largest
    float the numpy path gives: one exact n + z had two outputs, depending on the noise's dtype."""
    exponent = 980
    snapped = np.array([np.finfo(np.float64).max])
    big = np.array([2**60], dtype=object)  # the exact (Python integer) path
    small = np.array([2**40], dtype=np.int64)  # numpy's path
    assert add_noise_on_grid(snapped, big, exponent)[0] == add_noise_on_grid(snapped, small, exponent)[0]
    assert add_noise_on_grid(-snapped, -big, exponent)[0] == -np.finfo(np.float64).max
