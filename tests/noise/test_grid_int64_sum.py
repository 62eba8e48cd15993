"""add_noise_on_grid sums int64 noise of 2^53 to 2^62 grid units exactly in int64 (one cast to a
float), as the Python-integer path does element by element: the same floats, bit for bit.

Before, such noise (Laplace at epsilon 1e-6 on 1e6 coordinates: noise near 2^55 units) took the
per-element Python path, 0.7 s per 1e6 coordinates."""

from __future__ import annotations

import numpy as np
import pytest

from dpkit.noise import _grid as grid_module
from dpkit.noise import add_noise_on_grid
from dpkit.noise._grid import _grid_float


def _reference(snapped: np.ndarray, noise: np.ndarray, exponent: int) -> np.ndarray:
    units, noise_b = np.broadcast_arrays(np.ldexp(snapped, -exponent), noise)
    out = np.empty(units.shape)
    for index in np.ndindex(units.shape):
        out[index] = _grid_float(int(units[index]) + int(noise_b[index]), exponent)
    return out


@pytest.mark.parametrize("exponent", [-1022, -60, -20, 0, 40, 960, 1000])
def test_int64_sums_match_the_exact_python_sums(exponent, monkeypatch):
    rng = np.random.default_rng(exponent + 5000)
    n = 20_000
    magnitude = rng.integers(53, 62, n)
    noise = (rng.integers(1, 2**40, n) << (magnitude - 40)) * rng.choice([-1, 1], n)
    noise[:5] = [2**62 - 1, -(2**62 - 1), 2**53, -(2**53) - 1, 2**61 + 1]
    reach = min(61, 1022 - exponent)  # grid multiples stay finite (snap_to_grid's limit)
    units = rng.integers(-(2**reach), 2**reach, n).astype(np.float64)
    units[:3] = [0.0, 2.0**reach, -(2.0**reach)]
    snapped = np.ldexp(units, exponent)
    expected = _reference(snapped, noise.astype(object), exponent)

    def no_python_path(*args: object) -> float:
        raise AssertionError("the element-by-element Python path ran")

    monkeypatch.setattr(grid_module, "_grid_float", no_python_path)  # the int64 path must not need it
    assert np.array_equal(add_noise_on_grid(snapped, noise, exponent), expected)


def test_broadcast_rows_match_and_huge_units_take_the_python_path():
    rng = np.random.default_rng(3)
    snapped = np.ldexp(rng.integers(-(2**50), 2**50, 7).astype(np.float64), -30)
    noise = rng.integers(2**54, 2**60, (4, 7))
    assert np.array_equal(add_noise_on_grid(snapped, noise, -30), _reference(snapped, noise.astype(object), -30))
    big = np.array([2.0**70, -(2.0**65)])  # units beyond 2^62: exact Python integers instead
    noise = np.array([2**60, -(2**61)])
    assert np.array_equal(add_noise_on_grid(big, noise, 0), _reference(big, noise.astype(object), 0))
    tiny = np.ldexp(np.array([3.0, -5.0]), -1074)  # a grid below 2^-1022: subnormal results, Python path
    noise = np.array([2**55, 2**54 + 1])
    assert np.array_equal(add_noise_on_grid(tiny, noise, -1074), _reference(tiny, noise.astype(object), -1074))
