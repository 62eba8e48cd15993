"""The floor under any per-person bounding: how long DuckDB and Polars take to group the rows by person.

Run from the repository root (after ``bench/engine.py`` generated the data)::

    .venv/bin/python bench/engine_floor.py bench/.cache/people_10000000.parquet

Bounding each person's contribution needs each person's rows together: a per-person aggregation
(or a sort). This prints, in one process, the median of 5 runs of the plain GROUP BY region (no
bounding), the scan of the columns a per-person plan reads (person_id and income, summed, no grouping:
the person column alone is a high-entropy int64 that costs about as much to decode as the whole plain
query), the bare per-person aggregation (COUNT alone, and COUNT and SUM, by person, nothing
else) in DuckDB and in Polars, and dpkit's whole release, each with its ratio to DuckDB's plain
query. Every per-person aggregate is read by the outer query: an aggregate nobody reads is removed
by both optimizers, and timing such a query measures less than its label says.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import duckdb
from _timing import median_seconds  # bench/ is on sys.path when a script runs

from dpkit import Session
from dpkit import engine as E
from dpkit.guarantees import PureDP


def main(path: str) -> None:
    connection = duckdb.connect()
    source = f"read_parquet('{path}')"
    runs: dict[str, Callable[[], object]] = {
        "DuckDB plain GROUP BY region": lambda: connection.execute(
            f"SELECT region, count(*), sum(income) FROM {source} GROUP BY region"
        ).fetchall(),
        "DuckDB scan person_id, income (no grouping)": lambda: connection.execute(
            f"SELECT count(*), sum(person_id), sum(income) FROM {source}"
        ).fetchall(),
        "DuckDB per person (COUNT)": lambda: connection.execute(
            f"SELECT count(*), sum(n) FROM (SELECT person_id, count(*) AS n FROM {source} GROUP BY person_id)"
        ).fetchall(),
        "DuckDB per person (COUNT, SUM)": lambda: connection.execute(
            f"SELECT count(*), sum(n), sum(s) FROM (SELECT person_id, count(*) AS n, sum(income) AS s FROM {source} "
            "GROUP BY person_id)"
        ).fetchall(),
    }
    try:
        import polars as pl

        runs["Polars plain GROUP BY region"] = lambda: (
            pl.scan_parquet(path).group_by("region").agg(pl.len(), pl.col("income").sum()).collect()
        )
        runs["Polars per person (COUNT)"] = lambda: (
            pl.scan_parquet(path)
            .group_by("person_id")
            .agg(pl.len().alias("n"))
            .select(pl.len(), pl.col("n").sum())
            .collect()
        )
        runs["Polars per person (COUNT, SUM)"] = lambda: (
            pl.scan_parquet(path)
            .group_by("person_id")
            .agg(pl.len().alias("n"), pl.col("income").sum().alias("s"))
            .select(pl.len(), pl.col("n").sum(), pl.col("s").sum())
            .collect()
        )
    except ImportError:
        print("(polars not installed: its rows are left out)")
    session = Session.from_parquet(path, name="people", privacy_unit="person_id", budget=PureDP(1e6))
    query = (
        session.table()
        .group_by("region", keys=[f"r{i:02d}" for i in range(50)])
        .bound(rows_per_group=5, groups_per_person=1)
        .agg(n=E.count(), s=E.sum("income", bounds=(0, 200_000)))
    )
    runs["dpkit release (public keys)"] = lambda: query.release(epsilon=1.0)
    results = {name: median_seconds(run) for name, run in runs.items()}
    floor = results["DuckDB plain GROUP BY region"]
    for name, seconds in results.items():
        print(f"{name:44} {seconds:7.3f} s  {seconds / floor:5.1f}x plain")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/.cache/people_10000000.parquet")
