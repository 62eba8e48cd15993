"""Regenerate analytic_gaussian_reference.csv: the analytic Gaussian sigma, independently of dpkit.

Source: Balle & Wang 2018, "Improving the Gaussian mechanism for differential privacy: analytical
calibration and optimal denoising" (ICML), Theorem 8: the Gaussian mechanism N(0, sigma^2) with L2
sensitivity Delta is (epsilon, delta)-DP iff
    Phi(Delta/(2 sigma) - epsilon sigma/Delta) - e^epsilon Phi(-Delta/(2 sigma) - epsilon sigma/Delta) <= delta.
The smallest such sigma is found here with mpmath at 60 significant digits (bisection on the exact
formula with mpmath's erfc), sharing no code with dpkit. Run: python make_analytic_gaussian_reference.py
"""

from __future__ import annotations

import csv
from pathlib import Path

import mpmath

mpmath.mp.dps = 60


def delta_of(sigma: mpmath.mpf, sensitivity: mpmath.mpf, epsilon: mpmath.mpf) -> mpmath.mpf:
    def phi(x: mpmath.mpf) -> mpmath.mpf:
        return mpmath.erfc(-x / mpmath.sqrt(2)) / 2

    a = sensitivity / (2 * sigma)
    b = epsilon * sigma / sensitivity
    return phi(a - b) - mpmath.exp(epsilon) * phi(-a - b)


def sigma_of(epsilon: str, delta: str, sensitivity: str = "1") -> mpmath.mpf:
    e, d, s = mpmath.mpf(epsilon), mpmath.mpf(delta), mpmath.mpf(sensitivity)
    low, high = mpmath.mpf("1e-6"), mpmath.mpf(1)
    while delta_of(high, s, e) > d:
        high *= 2
    for _ in range(250):  # delta(sigma) is decreasing in sigma
        middle = (low + high) / 2
        if delta_of(middle, s, e) > d:
            low = middle
        else:
            high = middle
    return high


CASES = [(eps, delta, "1") for delta in ("1e-5", "1e-8") for eps in ("0.05", "0.1", "0.5", "1", "2", "5", "10")] + [
    ("1", "1e-5", "3.5"),
    ("0.5", "1e-6", "0.01"),
]


def main() -> None:
    path = Path(__file__).with_name("analytic_gaussian_reference.csv")
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epsilon", "delta", "sensitivity", "sigma"])
        for eps, delta, sens in CASES:
            writer.writerow([eps, delta, sens, mpmath.nstr(sigma_of(eps, delta, sens), 30)])


if __name__ == "__main__":
    main()
