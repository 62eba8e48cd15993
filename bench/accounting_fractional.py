"""The subsampled Gaussian's RDP at fractional orders: dpkit now, dpkit at an earlier commit,
dp_accounting (the committed reference), against the exact integral computed by mpmath.

Run from the repository root::

    .venv/bin/python bench/accounting_fractional.py 22a4d6d

Prints a Markdown table; each value is followed by its ratio to the exact one.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np
from _timing import module_at

from dpkit.accounting._rdp import poisson_sampled_gaussian_rdp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "accounting"))
from test_rdp import _sampled_gaussian_integral  # noqa: E402  (the tests' mpmath quadrature)

POINTS = [
    (256 / 60000, 1.1, 1.5),
    (0.01, 0.8, 1.1),
    (0.01, 0.8, 1.5),
    (0.05, 3.0, 1.1),
    (0.05, 3.0, 1.5),
    (0.5, 2.0, 1.1),
    (0.5, 2.0, 1.5),
    (0.9, 0.6, 1.1),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit", help="the earlier commit whose src/dpkit/accounting/_rdp.py to compare")
    args = parser.parse_args(argv)
    before = module_at(args.commit, "src/dpkit/accounting/_rdp.py", "_rdp_before")
    lines = (ROOT / "tests" / "data" / "rdp_fractional_reference.csv").read_text().splitlines()
    reference = {
        (float(r["sampling_probability"]), float(r["noise_multiplier"]), float(r["order"])): float(r["rdp"])
        for r in csv.DictReader(line for line in lines if not line.startswith("#"))
    }
    print("| q | sigma | order | exact (mpmath) | dpkit before | dpkit now | dp_accounting |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for q, sigma, order in POINTS:
        exact = _sampled_gaussian_integral(q, sigma, order)

        def cell(value: float, exact: float = exact) -> str:
            return f"{value:.6g} ({value / exact:.3f}x)" if np.isfinite(value) else "inf"

        old = before.poisson_sampled_gaussian_rdp(q, sigma, np.array([order]))[0]
        new = poisson_sampled_gaussian_rdp(q, sigma, np.array([order]))[0]
        theirs = cell(reference[(q, sigma, order)])
        print(f"| {q:.4g} | {sigma} | {order} | {exact:.6g} | {cell(old)} | {cell(new)} | {theirs} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
