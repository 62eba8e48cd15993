"""What derived columns cost: the benchmark query with a stored column against the same with a
column computed from each row (``SUM(income * 1.1)``, a ``CASE`` group key, ``COUNT(income)``,
a filter on a derived column against the same filter written inline, the count of a derived
column), beside plain DuckDB SQL computing the same expressions without privacy.

Run from the repository root (after ``bench/engine.py`` generated the data)::

    .venv/bin/python bench/engine_derived.py bench/.cache/people_10000000.parquet

Prints the median of 5 releases (after a warm-up) of each query: per group, 5 rows per person,
epsilon 1, public keys; and the ratio of each derived query to its stored twin. The stored twin
of the CASE key reads a copy of the table with the key written out (made once, beside the data).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
from _timing import median_seconds  # bench/ is on sys.path when a script runs

from dpkit import Session
from dpkit import engine as E
from dpkit.guarantees import PureDP

REGIONS = [f"r{i:02d}" for i in range(50)]
BAND = "CASE WHEN age < 40 THEN 'young' WHEN age < 65 THEN 'middle' ELSE 'old' END"


def main(parquet: str) -> None:
    banded = Path(parquet).with_name(Path(parquet).stem + "_band.parquet")
    if not banded.exists():
        duckdb.sql(f"COPY (SELECT *, {BAND} AS band FROM read_parquet('{parquet}')) TO '{banded}'")
    options = {"name": "people", "privacy_unit": "person_id", "budget": PureDP(1e9)}
    session, stored_band = Session.from_parquet(parquet, **options), Session.from_parquet(banded, **options)

    def release(query: E.QueryBuilder) -> Callable[[], object]:
        return lambda: query.release(epsilon=1.0)

    def grouped(query: E.QueryBuilder, key: str = "region", column: str = "income") -> E.QueryBuilder:
        """``query`` per ``key`` (public keys), 5 rows per person: count and sum of ``column``."""
        keys = REGIONS if key == "region" else ["young", "middle", "old"]
        high = 220_000 if column == "taxed" else 200_000
        return (
            query.group_by(key, keys=keys).bound(rows_per_group=5).agg(n=E.count(), t=E.sum(column, bounds=(0, high)))
        )

    by_region = session.table().group_by("region", keys=REGIONS).bound(rows_per_group=5)
    taxed = session.table().with_column("taxed", "income * 1.1")
    rows = {
        "SUM(income), stored": release(grouped(session.table())),
        "SUM(income * 1.1), derived": release(grouped(taxed, column="taxed")),
        "COUNT(*)": release(by_region.agg(n=E.count())),
        "COUNT(income)": release(by_region.agg(n=E.count("income"))),
        "band key, stored": release(grouped(stored_band.table(), "band")),
        "band key, derived (CASE)": release(grouped(session.table().with_column("band", BAND), "band")),
        "filter written inline": release(grouped(session.table().where("income * 1.1 > 20000"))),
        "filter on a derived column": release(grouped(taxed.where("taxed > 20000"))),
        "COUNT(derived column)": release(
            taxed.group_by("region", keys=REGIONS).bound(rows_per_group=5).agg(n=E.count("taxed"))
        ),
    }
    plain = duckdb.connect()
    plain_sql = {
        "DuckDB plain, SUM(income)": "SELECT region, COUNT(*), SUM(income) FROM read_parquet(?) GROUP BY region",
        "DuckDB plain, SUM(income * 1.1)": (
            "SELECT region, COUNT(*), SUM(income * 1.1) FROM read_parquet(?) GROUP BY region"
        ),
        "DuckDB plain, CASE key": f"SELECT {BAND} AS band, COUNT(*), SUM(income) FROM read_parquet(?) GROUP BY band",
    }
    seconds = {name: median_seconds(run) for name, run in rows.items()}
    seconds |= {
        name: median_seconds(lambda sql=sql: plain.execute(sql, [parquet]).fetchall())
        for name, sql in plain_sql.items()
    }
    twins = {
        "SUM(income * 1.1), derived": "SUM(income), stored",
        "COUNT(income)": "COUNT(*)",
        "band key, derived (CASE)": "band key, stored",
        "DuckDB plain, SUM(income * 1.1)": "DuckDB plain, SUM(income)",
        "filter on a derived column": "filter written inline",
        "COUNT(derived column)": "COUNT(income)",
    }
    print(f"{parquet}: median of 5 (dpkit: release with public keys, 5 rows per person, epsilon 1)")
    for name, value in seconds.items():
        ratio = f"  {value / seconds[twins[name]]:.2f}x {twins[name]}" if name in twins else ""
        print(f"{name:34} {value:7.3f} s{ratio}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/.cache/people_1000000.parquet")
