"""Release time of grouped quantiles: one exponential-mechanism draw per group, or all groups at once.

Run from the repository root::

    .venv/bin/python bench/engine_quantiles.py [--rows 400000] [--groups 200 2000 20000] [--repeats 3]

One table of ``--rows`` rows (100,000 people, a group column with ``--groups`` public keys, a
normal value column), MEDIAN and the 0.1 / 0.9 quantiles per group (3 selections per group),
epsilon 1. Each group count is timed (median of ``--repeats``) with the selections drawn one group
at a time (``_QUANTILE_BLOCK = 1``: a mechanism and a rejection sampler per group and level, the
path before batching) and in blocks of groups (dpkit's default); the ratio is printed. Both draw
from the same exact law (``tests/mechanisms/test_selection.py``).
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd
from _timing import median_release_seconds  # bench/ is on sys.path when a script runs

import dpkit
from dpkit import engine as E
from dpkit.engine import _execute


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--groups", type=int, nargs="+", default=[200, 2000, 20000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    default = _execute._QUANTILE_BLOCK
    print(f"{'groups':>8} {'one group at a time':>20} {'batched':>9} {'ratio':>6}")
    for groups in args.groups:
        rng = np.random.default_rng(0)
        frame = pd.DataFrame(
            {
                "pid": rng.integers(0, 100_000, args.rows),
                "g": rng.integers(0, groups, args.rows),
                "x": rng.normal(50.0, 10.0, args.rows),
            }
        )
        session = E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(1e9))
        query = (
            session.table()
            .group_by("g", keys=list(range(groups)))
            .agg(med=E.median("x", bounds=(0, 100)), tails=E.quantiles("x", [0.1, 0.9], bounds=(0, 100)))
        )
        timings = {
            label: median_release_seconds(query, args.repeats, _execute, "_QUANTILE_BLOCK", block)
            for label, block in (("single", 1), ("batched", default))
        }
        ratio = timings["single"] / timings["batched"]
        print(f"{groups:>8} {timings['single']:>19.2f}s {timings['batched']:>8.2f}s {ratio:>5.1f}x")


if __name__ == "__main__":
    main()
