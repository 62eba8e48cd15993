"""The bounded-aggregation SQL of an earlier commit against today's, on one DuckDB connection, interleaved.

Run from the repository root (after ``bench/engine_data.py`` wrote the data)::

    .venv/bin/python bench/engine_sql_compare.py 82595f9 bench/.cache/people_10000000.parquet
    .venv/bin/python bench/engine_sql_compare.py 82595f9 bench/.cache/people_10000000_spread.parquet
    .venv/bin/python bench/engine_sql_compare.py 82595f9 bench/.cache/people_10000000_spread.parquet \
        --memory-limit 250MB --repeats 3

Renders the SQL of ``bench/engine.py``'s query (public and private keys) with
``src/dpkit/engine/_aggregation.py`` as of the given commit and as in the working tree, then runs
the two texts and the plain GROUP BY alternately (``--repeats`` times each) and prints medians. Only
the SQL is timed: no compile, no noise, no ledger. Today's text runs as the DuckDB backend runs it
(private keys first ranked into a temporary table: ``private_keys_sql``), the earlier one as one
statement. ``--median``: the histogram plan of ``MEDIAN(income)`` instead of the count and sum;
``--groups-per-person``: g (default 1).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import duckdb
from _timing import module_at  # bench/ is on sys.path when a script runs

from dpkit import Session
from dpkit import engine as E  # noqa: N812
from dpkit.engine._aggregation import render_sql
from dpkit.engine._compiler import aggregation_plan, histogram_plan
from dpkit.guarantees import ApproxDP


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit")
    parser.add_argument("data", type=Path)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--memory-limit", default=None, help="DuckDB memory_limit, e.g. 250MB (spills to disk)")
    parser.add_argument("--median", action="store_true", help="time the MEDIAN(income) histogram plan instead")
    parser.add_argument("--groups-per-person", type=int, default=1)
    args = parser.parse_args(argv)
    then = module_at(args.commit, "src/dpkit/engine/_aggregation.py", "aggregation_then")
    session = Session.from_parquet(args.data, name="people", privacy_unit="person_id", budget=ApproxDP(100, 1e-3))
    connection = session._backend._connection
    if args.memory_limit:
        connection.execute(f"SET memory_limit = '{args.memory_limit}'")
    regions = [f"r{i:02d}" for i in range(50)]
    plain = "SELECT region, count(*), sum(income) FROM people GROUP BY region"
    for label, keys in (("public", regions), ("private", None)):
        aggregates = (
            {"m": E.median("income", bounds=(0, 200000))}
            if args.median
            else {"n": E.count(), "s": E.sum("income", bounds=(0, 200000))}
        )
        query = (
            session.table()
            .group_by("region", keys=keys)
            .bound(rows_per_group=5, groups_per_person=args.groups_per_person)
        )
        compiled = session._compile(query.agg(**aggregates), {"epsilon": 1.0, "delta": 1e-6})
        if args.median:
            histogram = next(s for s in compiled.statistics if s.kind == "hist")
            plan = histogram_plan(compiled, histogram, (0.0, 200000.0), "benchmark-salt")
        else:
            plan = aggregation_plan(compiled, compiled.bounds, "benchmark-salt")
        # (fields added since that commit are left out: the old text does not read them)
        known = then.AggregationPlan.__dataclass_fields__  # type: ignore[attr-defined]
        fields = {f: getattr(plan, f) for f in plan.__dataclass_fields__ if f in known}
        old_plan = then.AggregationPlan(**fields)  # type: ignore[attr-defined]
        old_text = then.render_sql(old_plan)  # type: ignore[attr-defined]

        def today(plan: object = plan) -> list[object]:
            with session._backend._key_table(plan, private=True) as key_table:  # type: ignore[attr-defined]
                return connection.execute(render_sql(plan, key_table)).fetchall()  # type: ignore[arg-type]

        runs = {
            args.commit: lambda text=old_text: connection.execute(text).fetchall(),
            "working tree": today,
            "plain": lambda: connection.execute(plain).fetchall(),
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        results: dict[str, object] = {}
        failed: dict[str, str] = {}
        for _ in range(args.repeats):
            for name, run in runs.items():
                if name in failed:
                    continue
                start = time.perf_counter()
                try:
                    results[name] = sorted(run(), key=repr)
                except duckdb.Error as error:  # (out of memory under --memory-limit: reported, not timed)
                    failed[name] = type(error).__name__
                    continue
                times[name].append(time.perf_counter() - start)
        same = results.get(args.commit) == results.get("working tree") if not failed else "n/a"
        medians = ", ".join(
            f"{name} failed ({failed[name]})" if name in failed else f"{name} {statistics.median(t):.3f} s"
            for name, t in times.items()
        )
        print(f"{args.data.name}, {label} keys: {medians}; identical aggregates: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
