"""Which groups people in several groups keep: each region's people after bounding against its fair share.

Run from the repository root (after ``bench/engine_data.py --spread`` wrote the data)::

    .venv/bin/python bench/engine_group_choice.py bench/.cache/people_1000000_spread.parquet

With ``groups_per_person=1`` a person in k regions can count in one. Were the region chosen
uniformly among the person's own regions, region r would keep in expectation its *fair share*
sum over its people of 1 / k(person). The script computes that share exactly (DuckDB, no noise),
runs dpkit's noiseless bounded aggregation (the counts before noise) for three salts, with
public and with private keys, and prints per query the smallest and largest ratio kept / fair
share over the regions and the largest absolute gap in people.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import duckdb

from dpkit import Session
from dpkit import engine as E  # noqa: N812
from dpkit.engine._compiler import aggregation_plan, compile_query, parse_request
from dpkit.guarantees import ApproxDP


def fair_shares(path: Path) -> dict[str, float]:
    """Per region: the sum over its people of 1 / (number of regions the person is in)."""
    query = f"""
        WITH pairs AS (SELECT DISTINCT person_id, region FROM read_parquet('{path}')),
             spread AS (SELECT person_id, COUNT(*) AS k FROM pairs GROUP BY person_id)
        SELECT region, SUM(1.0 / k) FROM pairs JOIN spread USING (person_id) GROUP BY region
    """
    return {region: float(share) for region, share in duckdb.sql(query).fetchall()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="a people table (bench/engine_data.py --spread)")
    parser.add_argument("--salts", nargs="+", default=["s1", "s2", "s3"])
    args = parser.parse_args()
    fair = fair_shares(args.data)
    regions = sorted(fair)
    session = Session.from_parquet(args.data, name="people", privacy_unit="person_id", budget=ApproxDP(10, 1e-3))
    for label, keys in (("public", regions), ("private", None)):
        query = session.table().group_by("region", keys=keys).bound(groups_per_person=1).agg(n=E.count_distinct())
        compiled = compile_query(query.plan, session._context(), parse_request(session.budget, epsilon=1.0, delta=1e-6))
        for salt in args.salts:
            result = session._backend.run(aggregation_plan(compiled, {}, salt))
            kept = dict(zip((key[0] for key in result.keys), result.columns["persons"], strict=True))
            ratios = [kept.get(region, 0) / fair[region] for region in regions]
            gap = max(abs(kept.get(region, 0) - fair[region]) for region in regions)
            print(
                f"{args.data.name}, {label} keys, salt {salt!r}: kept / fair share per region "
                f"{min(ratios):.3f} to {max(ratios):.3f}, largest gap {gap:,.0f} people"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
