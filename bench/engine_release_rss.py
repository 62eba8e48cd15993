"""Time and peak memory of one whole release, in a process of its own (run it once per case).

Run from the repository root (after ``bench/engine_data.py --rows 10000000 --spread``)::

    .venv/bin/python bench/engine_release_rss.py bench/.cache/people_10000000_spread.parquet \
        --groups-per-person 2 --keys private

Opens a Session on the file, releases the count and the sum of income in [0, 200000] per region
(k = 5 rows per person and group, g groups per person, epsilon 1, delta 1e-6) and prints the
release's time and the process's peak resident memory (``ru_maxrss``). To compare with an earlier
commit, run it with ``PYTHONPATH`` on a worktree of that commit's ``src``. ``--backend spark``: on
local Spark, timing a second release after a first that starts the JVM (RSS then counts the
Python process only). ``--memory-limit 100MB``: on ``DuckDBBackend(memory_limit=...)``.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from dpkit import Session
from dpkit import engine as E  # noqa: N812
from dpkit.guarantees import ApproxDP


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--groups-per-person", type=int, default=1)
    parser.add_argument("--keys", choices=["public", "private"], default="public")
    parser.add_argument("--backend", choices=["duckdb", "spark"], default="duckdb")
    parser.add_argument("--memory-limit", help="DuckDB's memory limit, e.g. 100MB (DuckDBBackend(memory_limit=...))")
    args = parser.parse_args(argv)
    backend = args.backend if args.memory_limit is None else E.DuckDBBackend(memory_limit=args.memory_limit)
    session = Session.from_parquet(
        args.data, name="people", privacy_unit="person_id", budget=ApproxDP(100, 1e-3), backend=backend
    )
    keys = [f"r{i:02d}" for i in range(50)] if args.keys == "public" else None
    query = session.table().group_by("region", keys=keys)
    query = query.bound(rows_per_group=5, groups_per_person=args.groups_per_person)
    query = query.agg(n=E.count(), t=E.sum("income", bounds=(0, 200000)))
    if args.backend == "spark":
        session.release(query, epsilon=1.0, delta=1e-6)  # (starts the JVM; not timed)
    start = time.perf_counter()
    session.release(query, epsilon=1.0, delta=1e-6)
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"g = {args.groups_per_person}, {args.keys} keys: {elapsed:.2f} s, peak RSS {peak:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
