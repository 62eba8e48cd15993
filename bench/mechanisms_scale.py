"""Release time of the real-valued mechanisms from ordinary to tiny epsilon (one process, one core).

Run from the repository root::

    .venv/bin/python bench/mechanisms_scale.py

Each row is the best of 5 releases of a vector of 1,000,000 coordinates (Laplace, Gaussian) or of a
score vector of 10,000 candidates (ReportNoisyMax), with the secure source. It also prints each
mechanism's effective sensitivity over the sensitivity (the noise above nominal that the output grid
costs): since the any-scale samplers, at most 1 + 2^-10 for Laplace and the Gaussian at every epsilon.
A second table gives the one-coordinate Gaussian's sigma over the continuous analytic sigma (Balle &
Wang) at its effective sensitivity: the price of its rigorous discrete delta bound.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import numpy as np

from dpkit import PrivacyWarning
from dpkit.mechanisms import Gaussian, Laplace, ReportNoisyMax
from dpkit.mechanisms.gaussian import analytic_gaussian_sigma


def best_of(run: Callable[[], object], repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    warnings.simplefilter("ignore", PrivacyWarning)
    values = np.random.default_rng(0).random(1_000_000)
    scores = np.random.default_rng(1).random(10_000)
    print("| mechanism | epsilon | coordinates | time (best of 5) | effective sensitivity / sensitivity |")
    print("|---|---:|---:|---:|---:|")
    for epsilon in (1.0, 1e-3, 1e-6, 1e-10):
        for name, mechanism in (
            ("Laplace", Laplace(1.0, epsilon, dimension=values.size)),
            ("Gaussian, delta 1e-9", Gaussian(1.0, epsilon, 1e-9, dimension=values.size)),
        ):
            ratio = mechanism.effective_sensitivity
            try:
                seconds = best_of(lambda m=mechanism: m.release(values))
            except Exception as error:  # (an older dpkit, run through PYTHONPATH, refused some releases)
                print(f"| {name} | {epsilon:g} | {values.size:,} | failed: {type(error).__name__} | {ratio:.7g} |")
                continue
            print(f"| {name} | {epsilon:g} | {values.size:,} | {seconds:.3f} s | {ratio:.7g} |")
        selection = ReportNoisyMax(1.0, epsilon)
        seconds = best_of(lambda s=selection: s.release(scores))
        print(f"| ReportNoisyMax | {epsilon:g} | {scores.size:,} | {seconds:.4f} s | - |")
    print()
    print("| Gaussian, one coordinate | epsilon | delta | sigma / continuous analytic sigma - 1 |")
    print("|---|---:|---:|---:|")
    for epsilon, delta in ((1.0, 1e-9), (1e-3, 1e-9), (1e-6, 1e-12), (1e-10, 1e-12), (1e-12, 1e-12), (2.0**-60, 1e-12)):
        scalar = Gaussian(1.0, epsilon, delta)
        continuous = analytic_gaussian_sigma(epsilon, delta, scalar.effective_sensitivity)
        print(f"| | {epsilon:g} | {delta:g} | {scalar.sigma / continuous - 1:.2e} |")


if __name__ == "__main__":
    main()
