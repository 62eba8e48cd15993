"""Audits of mechanism objects: the vectorized draw path against one release() call per sample.

``estimate_epsilon`` and ``low_bit_test`` given a mechanism draw its samples with the mechanism's
own vectorized sampler where that is the law of repeated ``release`` calls (``_batch_path``); the
per-call path is what they did before (and still do for other mechanisms). Both paths run here in
one process, on the same samples count, and the ratio is printed. Also times
``PermuteAndFlip.probabilities`` at its largest size (4,096 candidates) with numpy's and with
scipy's Gauss-Legendre nodes.

    .venv/bin/python bench/audit_speed.py --samples 50000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from dpkit.audit import _estimate, estimate_epsilon, low_bit_test
from dpkit.mechanisms import DiscreteLaplace, Gaussian, Laplace, PermuteAndFlip, RandomizedResponse, Staircase
from dpkit.noise import InsecureSeededRandom


def _seconds(run: Callable[[], Any]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _per_call(run: Callable[[], Any]) -> float:
    """``run`` with every mechanism audited call by call (the path before the vectorized one)."""
    original = _estimate._batch_path
    _estimate._batch_path = lambda mechanism: None
    try:
        return _seconds(run)
    finally:
        _estimate._batch_path = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=50_000, help="samples per input (default 50,000)")
    args = parser.parse_args()
    n = args.samples
    cases: list[tuple[str, Any, Any, Any, bool]] = [
        ("Laplace(1, 1)", Laplace(1.0, 1.0), 0.0, 1.0, True),
        ("Gaussian(1, 1, 1e-5)", Gaussian(1.0, 1.0, 1e-5), 0.0, 1.0, True),
        ("Staircase(1, 1)", Staircase(1.0, 1.0), 0.0, 1.0, True),
        ("DiscreteLaplace(1, 1)", DiscreteLaplace(1, 1.0), 0, 1, True),
        ("RandomizedResponse(eps 1)", RandomizedResponse(1.0), True, False, False),
    ]
    estimate_epsilon(Laplace(1.0, 1.0), 0.0, 1.0, samples=1000, rng=InsecureSeededRandom(0))  # imports
    print(f"| audit ({n:,} samples per input) | per call | vectorized | speed-up |")
    print("|---|---:|---:|---:|")
    for name, mechanism, a, b, low_bits in cases:

        def estimate(m: Any = mechanism, a: Any = a, b: Any = b) -> Any:
            return estimate_epsilon(m, a, b, samples=n, rng=InsecureSeededRandom(1))

        before, after = _per_call(estimate), _seconds(estimate)
        print(f"| estimate_epsilon, {name} | {before:.2f} s | {after:.3f} s | {before / after:.0f}x |")
        if low_bits:

            def low(m: Any = mechanism, a: Any = a, b: Any = b) -> Any:
                return low_bit_test(m, (a, b), samples=n, rng=InsecureSeededRandom(2))

            before, after = _per_call(low), _seconds(low)
            print(f"| low_bit_test, {name} | {before:.2f} s | {after:.3f} s | {before / after:.0f}x |")

    scores = np.random.default_rng(0).integers(0, 100, 4096)
    flip = PermuteAndFlip(1.0, 1.0)
    numpy_nodes = _seconds(lambda: np.polynomial.legendre.leggauss(4096 // 2 + 2))
    first = _seconds(lambda: flip.probabilities(scores))
    again = _seconds(lambda: flip.probabilities(scores))
    print(
        f"\nPermuteAndFlip.probabilities, 4,096 candidates: numpy's nodes alone {numpy_nodes:.2f} s; "
        f"now {first:.2f} s first call, {again:.3f} s after (nodes cached)"
    )


if __name__ == "__main__":
    main()
