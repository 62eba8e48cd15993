"""Regenerate paper_coupled_reference.csv: the paper's gamma_3 (noise and sampled sensitivity coupled).

Source: Dandekar, Basu & Bressan, "Differential Privacy at Risk: Bridging Randomness and Privacy
Budget", PoPETs 2021(1) (arXiv:2003.00973, hal-02942997), Sec. 4.3 (privacy at risk of the Laplace
mechanism calibrated with a sampled sensitivity, both sources of randomness). The theorem's text
was not available to us; the formula is taken from the authors' reference code,
github.com/ashishdandekar/Privacy-at-risk, ``formulae.py``, function
``calculate_gamma(e1, e2, rho, delta, alpha, n)`` ("computes gamma_3 ... rho: tolerance parameter,
delta: sampled sensitivity, alpha: accuracy parameter"; ``n`` the output dimension):

    eta     = 1 + 2 rho / Delta*
    gamma_3 = alpha * G_k(epsilon) / G_k(eta * epsilon0)

with the closed form of the same file's ``integral(x, n)`` (also used by ``bound``, the paper's
gamma_1; see make_privacy_at_risk_reference.py), 1F2~ the regularised hypergeometric function:

    G_k(x) = sqrt(pi) 4^k x 1F2~(1/2; 3/2 - k, 3/2; x^2/4) - 2 x^(2k) Gamma(k) 1F2~(k; k + 1/2, k + 1; x^2/4).

The authors' expression is not clipped: for epsilon > eta * epsilon0 the ratio exceeds 1 and
gamma_3 exceeds alpha; the CSV keeps that raw value (dpkit returns alpha there, see the tests).

Rows: a grid (k, epsilon0, (Delta*, rho), alpha, epsilon / epsilon0), plus the parameters of the
paper's Fig. 3 as the authors' ``plots.py`` draws it (k = 1, epsilon0 = 1, rho = 0.01,
Delta* = 0.15, alpha = 1 - 2 exp(-2 rho^2 n) for n in 10 000 ... 25 000).

Evaluated with mpmath at 80 significant digits (checked against 120 digits), sharing no code with
dpkit and none with the authors (the formula is re-typed from its mathematical form).
Run: python make_paper_coupled_reference.py
"""

from __future__ import annotations

import csv
from pathlib import Path

import mpmath
from make_privacy_at_risk_reference import g  # the same closed form (formulae.py::integral), one copy

DIMENSIONS = (1, 3, 8)
EPSILON0S = ("0.5", "1", "2")
SENSITIVITY_RHO = (("0.15", "0.01"), ("1", "0.05"), ("10", "0.05"))
ALPHAS = ("0.9", "0.99")
FRACTIONS = ("0.05", "0.25", "0.5", "0.9", "1", "1.5")
FIGURE_3_SAMPLE_SIZES = (10_000, 15_000, 20_000, 25_000)
FIGURE_3_EPSILONS = ("0.1", "0.5", "0.9", "1")


def gamma_3(epsilon: str, epsilon0: str, sensitivity: str, rho: str, alpha: str, k: int, digits: int) -> mpmath.mpf:
    with mpmath.workdps(digits):
        eta = 1 + 2 * mpmath.mpf(rho) / mpmath.mpf(sensitivity)
        return mpmath.mpf(alpha) * g(mpmath.mpf(epsilon), k) / g(eta * mpmath.mpf(epsilon0), k)


def _rows() -> list[tuple[int, str, str, str, str, str]]:
    rows = []
    for k in DIMENSIONS:
        for eps0 in EPSILON0S:
            for sensitivity, rho in SENSITIVITY_RHO:
                for alpha in ALPHAS:
                    for fraction in FRACTIONS:
                        with mpmath.workdps(80):
                            eps = mpmath.nstr(mpmath.mpf(fraction) * mpmath.mpf(eps0), 15)
                        rows.append((k, eps, eps0, sensitivity, rho, alpha))
    for n in FIGURE_3_SAMPLE_SIZES:
        with mpmath.workdps(80):
            alpha = mpmath.nstr(1 - 2 * mpmath.exp(-2 * mpmath.mpf("0.01") ** 2 * n), 30)
        for eps in FIGURE_3_EPSILONS:
            rows.append((1, eps, "1", "0.15", "0.01", alpha))
    return rows


def main() -> None:
    path = Path(__file__).with_name("paper_coupled_reference.csv")
    with path.open("w", newline="") as handle:
        handle.write("# gamma_3 of Dandekar, Basu & Bressan (PoPETs 2021, Sec. 4.3) re-typed from the authors'\n")
        handle.write("# formulae.py::calculate_gamma (github.com/ashishdandekar/Privacy-at-risk); mpmath, 80 digits;\n")
        handle.write("# raw (unclipped) values: above alpha when epsilon > (1 + 2 rho / Delta*) epsilon0\n")
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["dimension", "epsilon", "epsilon0", "sampled_sensitivity", "rho", "alpha", "gamma_3"])
        for k, eps, eps0, sensitivity, rho, alpha in _rows():
            value = gamma_3(eps, eps0, sensitivity, rho, alpha, k, 80)
            check = gamma_3(eps, eps0, sensitivity, rho, alpha, k, 120)
            if abs(value - check) > mpmath.mpf("1e-40"):
                raise SystemExit(f"unstable at k={k}, eps={eps}, eps0={eps0}, Delta*={sensitivity}, rho={rho}")
            if not value > 0:
                raise SystemExit(f"gamma_3 not positive at k={k}, eps={eps}, eps0={eps0}")
            writer.writerow([k, eps, eps0, sensitivity, rho, alpha, mpmath.nstr(value, 30)])


if __name__ == "__main__":
    main()
