"""Release time against the number of public group keys: key list as VALUES text vs a registered table.

Run from the repository root::

    .venv/bin/python bench/engine_keys.py [--rows 1000000] [--keys 1000 30000 100000] [--repeats 3]

One table of ``--rows`` rows (300,000 people, group column with 200,000 values), one COUNT per
public key, epsilon 1. For each key count the release is timed (median of ``--repeats``) with
the key list written as a VALUES list in the SQL (``KEY_TABLE_THRESHOLD`` raised) and read from a
registered Arrow table (dpkit's default above 256 keys); the ratio is printed.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd
from _timing import median_release_seconds  # bench/ is on sys.path when a script runs

import dpkit
from dpkit import engine as E
from dpkit.engine import _aggregation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, nargs="+", default=[1000, 30000, 100000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"pid": rng.integers(0, 300_000, args.rows), "g": rng.integers(0, 200_000, args.rows)})
    session = E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(1e9))
    default = _aggregation.KEY_TABLE_THRESHOLD
    print(f"{'keys':>8} {'VALUES text':>12} {'key table':>10} {'ratio':>6}")
    for count in args.keys:
        query = session.table().group_by("g", keys=list(range(count))).agg(n=E.count())
        timings = {
            label: median_release_seconds(query, args.repeats, _aggregation, "KEY_TABLE_THRESHOLD", threshold)
            for label, threshold in (("values", 10**12), ("table", default))
        }
        ratio = timings["values"] / timings["table"]
        print(f"{count:>8} {timings['values']:>11.2f}s {timings['table']:>9.2f}s {ratio:>5.1f}x")


if __name__ == "__main__":
    main()
