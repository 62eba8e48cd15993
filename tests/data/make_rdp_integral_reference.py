"""Regenerate rdp_integral_reference.csv: the exact Rényi divergence of the Poisson-subsampled
Gaussian at the points where tests/accounting/test_rdp.py checks dpkit's curve, independently of dpkit.

The value is the mpmath quadrature of ``renyi`` in make_rdp_small_rate_reference.py (60 significant
digits, breakpoints around the two peaks of the mixture), so the tests compare against a committed
integral instead of integrating for minutes at every run. Points: the integer orders 2, 3, 8 and 32
at four (q, sigma) pairs (against which dpkit's binomial sum must be exact), and every fractional-order
row of rdp_fractional_reference.csv (where dpkit's signed series must be a tight upper bound).
Run: python make_rdp_integral_reference.py   (a few minutes; shares no code with dpkit)
"""

from __future__ import annotations

import csv
from pathlib import Path

import mpmath
from make_rdp_small_rate_reference import renyi

INTEGER_PAIRS = [(256 / 60000, 1.1), (0.01, 0.8), (0.2, 1.5), (0.9, 0.6)]
INTEGER_ORDERS = [2.0, 3.0, 8.0, 32.0]


def points() -> list[tuple[float, float, float]]:
    here = Path(__file__).parent
    with (here / "rdp_fractional_reference.csv").open() as handle:
        rows = list(csv.DictReader(line for line in handle if not line.startswith("#")))
    fractional = [(float(r["sampling_probability"]), float(r["noise_multiplier"]), float(r["order"])) for r in rows]
    return [(q, s, a) for q, s in INTEGER_PAIRS for a in INTEGER_ORDERS] + fractional


def main() -> None:
    path = Path(__file__).with_name("rdp_integral_reference.csv")
    with path.open("w", newline="") as handle:
        handle.write(
            "# mpmath quadrature at 60 digits (renyi of make_rdp_small_rate_reference.py);"
            " made by make_rdp_integral_reference.py\n"
        )
        writer = csv.writer(handle)
        writer.writerow(["sampling_probability", "noise_multiplier", "order", "rdp"])
        for q, sigma, alpha in points():
            writer.writerow([repr(q), repr(sigma), repr(alpha), mpmath.nstr(renyi(q, sigma, alpha), 25)])


if __name__ == "__main__":
    main()
