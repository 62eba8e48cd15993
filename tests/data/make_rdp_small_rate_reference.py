"""Regenerate rdp_small_rate_reference.csv: the Rényi divergence of the Poisson-subsampled Gaussian
at small sampling rates and orders near 1, independently of dpkit.

D_alpha(M || Q) for M = (1-q) N(0, s^2) + q N(1, s^2) and Q = N(0, s^2) (Mironov, Talwar & Zhang
2019) is log(A) / (alpha - 1) with A = E_Q[L^alpha], L = 1 + q (e^l - 1), l = (2z - 1) / (2 s^2).
For small q, A - 1 is of order q^2 (alpha - 1): to keep its digits the integrand is written
L^alpha - 1 - alpha (L - 1) (E_Q[L] = 1, so its integral is A - 1 exactly) and integrated by mpmath
quadrature at 60 significant digits, with breakpoints around z0 = s^2 log(1/q - 1) + 1/2 (where
the two parts of the mixture are equal) and alpha - 1/2 (the peak of the second part), then
log1p. Cross-checked once against a 90-digit series (three regions of geometric binomial
expansions): agreement to 1e-28 relative. Shares no code with dpkit.
Run: python make_rdp_small_rate_reference.py   (about a minute)
"""

from __future__ import annotations

import csv
from pathlib import Path

import mpmath

RATES = ["1e-9", "1e-7", "1e-5", "1e-3"]
NOISE_MULTIPLIERS = ["0.5", "1", "4", "20"]
ORDERS = ["1.0001", "1.001", "1.01", "1.1", "1.5", "2", "3.5"]


def renyi(q: float, sigma: float, alpha: float) -> mpmath.mpf:
    """D_alpha for the float parameters (as the library receives them), at 60 digits."""
    with mpmath.workdps(60):
        qq, s, a = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(alpha)

        def integrand(z: mpmath.mpf) -> mpmath.mpf:
            excess = mpmath.expm1((2 * z - 1) / (2 * s * s))  # e^l - 1
            ratio = 1 + qq * excess
            return mpmath.npdf(z, 0, s) * (ratio**a - 1 - a * qq * excess)

        z0 = s * s * mpmath.log(1 / qq - 1) + mpmath.mpf(1) / 2
        centres = [z0 + k * s for k in range(-8, 9)] + [a - mpmath.mpf(1) / 2 + k * s for k in range(-8, 9)]
        points = sorted({-mpmath.inf, -20 * s, mpmath.mpf(0), mpmath.mpf(1) / 2, mpmath.mpf(1), *centres, mpmath.inf})
        excess_moment = mpmath.quad(integrand, points, maxdegree=10)
        return mpmath.log1p(excess_moment) / (a - 1)


def main() -> None:
    path = Path(__file__).with_name("rdp_small_rate_reference.csv")
    with path.open("w", newline="") as handle:
        handle.write("# mpmath quadrature at 60 digits; made by make_rdp_small_rate_reference.py\n")
        writer = csv.writer(handle)
        writer.writerow(["sampling_probability", "noise_multiplier", "order", "rdp"])
        for q in RATES:
            for sigma in NOISE_MULTIPLIERS:
                for alpha in ORDERS:
                    value = renyi(float(q), float(sigma), float(alpha))
                    writer.writerow([q, sigma, alpha, mpmath.nstr(value, 25)])


if __name__ == "__main__":
    main()
