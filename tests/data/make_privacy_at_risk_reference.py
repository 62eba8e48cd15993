"""Regenerate privacy_at_risk_reference.csv: the paper's gamma_1 for the k-dimensional Laplace mechanism.

Source: Dandekar, Basu & Bressan, "Differential Privacy at Risk: Bridging Randomness and Privacy
Budget", PoPETs 2021(1) (arXiv:2003.00973, hal-02942997), Sec. 4.1 (Theorem 4, privacy at risk of
the Laplace mechanism with k-dimensional output). The theorem's text was not available to us; its
formula is taken from the authors' reference code, github.com/ashishdandekar/Privacy-at-risk,
``formulae.py``, function ``bound(e1, e2, n)`` ("computes gamma_1 ... n denotes the dimension of
the output of the Laplace mechanism"): gamma_1(eps; eps0, k) = G_k(eps) / G_k(eps0) with the
closed form (in terms of the regularised hypergeometric function 1F2~)

    G_k(x) = sqrt(pi) 4^k x 1F2~(1/2; 3/2 - k, 3/2; x^2/4) - 2 x^(2k) Gamma(k) 1F2~(k; k + 1/2, k + 1; x^2/4).

It is evaluated here with mpmath at 80 significant digits (checked against 120 digits), sharing no
code with dpkit and none with the authors (the formula is re-typed from its mathematical form).
Run: python make_privacy_at_risk_reference.py
"""

from __future__ import annotations

import csv
from pathlib import Path

import mpmath

DIMENSIONS = (1, 2, 3, 5, 8, 12)
EPSILON0S = ("0.5", "1", "2")
FRACTIONS = ("0.05", "0.25", "0.5", "0.9")


def _regularised_1f2(a: mpmath.mpf, b1: mpmath.mpf, b2: mpmath.mpf, z: mpmath.mpf) -> mpmath.mpf:
    return mpmath.hyp1f2(a, b1, b2, z) / (mpmath.gamma(b1) * mpmath.gamma(b2))


def g(x: mpmath.mpf, k: int) -> mpmath.mpf:
    z = x * x / 4
    half = mpmath.mpf(1) / 2
    first = mpmath.sqrt(mpmath.pi) * mpmath.mpf(4) ** k * x * _regularised_1f2(half, 3 * half - k, 3 * half, z)
    second = 2 * x ** (2 * k) * mpmath.gamma(k) * _regularised_1f2(mpmath.mpf(k), k + half, k + 1, z)
    return first - second


def gamma_1(epsilon: str, epsilon0: str, k: int, digits: int) -> mpmath.mpf:
    with mpmath.workdps(digits):
        return g(mpmath.mpf(epsilon), k) / g(mpmath.mpf(epsilon0), k)


def main() -> None:
    path = Path(__file__).with_name("privacy_at_risk_reference.csv")
    with path.open("w", newline="") as handle:
        handle.write("# gamma_1 of Dandekar, Basu & Bressan (PoPETs 2021, Thm. 4) from the closed form of the\n")
        handle.write("# authors' formulae.py::bound (github.com/ashishdandekar/Privacy-at-risk); mpmath, 80 digits\n")
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["dimension", "epsilon", "epsilon0", "gamma_1"])
        for k in DIMENSIONS:
            for eps0 in EPSILON0S:
                for fraction in FRACTIONS:
                    with mpmath.workdps(80):
                        eps = mpmath.nstr(mpmath.mpf(fraction) * mpmath.mpf(eps0), 15)
                    value = gamma_1(eps, eps0, k, 80)
                    check = gamma_1(eps, eps0, k, 120)
                    if abs(value - check) > mpmath.mpf("1e-40"):
                        raise SystemExit(f"unstable at k={k}, eps={eps}, eps0={eps0}")
                    if not 0 < value < 1:
                        raise SystemExit(f"gamma_1 outside (0, 1) at k={k}, eps={eps}, eps0={eps0}")
                    writer.writerow([k, eps, eps0, mpmath.nstr(value, 30)])


if __name__ == "__main__":
    main()
