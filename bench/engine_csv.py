"""What declared CSV types cost: the benchmark query over one table as Parquet, as CSV with inferred types
and as CSV with declared types (``Session.from_csv(path, types=...)``).

Run from the repository root (after ``bench/engine.py`` generated the data)::

    .venv/bin/python bench/engine_csv.py bench/.cache/people_1000000.parquet

Writes the Parquet file's rows to a CSV file beside it once, then prints the median of 5 releases
(after a warm-up) of the per-region count and sum, 5 rows per person, epsilon 1, public keys.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import duckdb

from dpkit import Session
from dpkit import engine as E
from dpkit.guarantees import PureDP

TYPES = {"person_id": "BIGINT", "region": "VARCHAR", "income": "DOUBLE", "age": "INTEGER"}


def release_seconds(session: Session, repeats: int = 5) -> float:
    query = (
        session.table()
        .group_by("region", keys=[f"r{i:02d}" for i in range(50)])
        .bound(rows_per_group=5, groups_per_person=1)
        .agg(n=E.count(), s=E.sum("income", bounds=(0, 200_000)))
    )
    query.release(epsilon=1.0)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        query.release(epsilon=1.0)
        times.append(time.perf_counter() - start)
    return sorted(times)[repeats // 2]


def main(parquet: str) -> None:
    csv = Path(parquet).with_suffix(".csv")
    if not csv.exists():
        duckdb.sql(f"COPY (SELECT * FROM read_parquet('{parquet}')) TO '{csv}' (HEADER)")
    options = {"name": "people", "privacy_unit": "person_id", "budget": PureDP(1e6)}
    results = {
        "Parquet": release_seconds(Session.from_parquet(parquet, **options)),
        "CSV, types inferred": release_seconds(Session.from_csv(csv, **options)),
        "CSV, types declared": release_seconds(Session.from_csv(csv, types=TYPES, **options)),
    }
    for name, seconds in results.items():
        print(f"{name:22} {seconds:6.3f} s  {seconds / results['Parquet']:4.1f}x Parquet")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/.cache/people_1000000.parquet")
