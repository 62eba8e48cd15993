"""Where dpkit's engine spends its time: DuckDB's profile of the bounded aggregation of bench/engine.py's query.

Run from the repository root (after ``bench/engine.py`` generated the data)::

    .venv/bin/python bench/engine_profile.py bench/.cache/people_10000000.parquet

Prints the median of 3 runs of dpkit's SQL and of the plain GROUP BY, then each DuckDB operator's
CPU time (summed over threads) and output rows.
"""

import json
import sys
import time

from dpkit import Session
from dpkit import engine as E
from dpkit.engine._aggregation import render_sql
from dpkit.engine._compiler import aggregation_plan
from dpkit.guarantees import ApproxDP

path = sys.argv[1]
s = Session.from_parquet(path, name="people", privacy_unit="person_id", budget=ApproxDP(100, 1e-3))
regions = [f"r{i:02d}" for i in range(50)]
q = (
    s.table()
    .group_by("region", keys=regions)
    .bound(rows_per_group=5, groups_per_person=1)
    .agg(n=E.count(), s=E.sum("income", bounds=(0, 200000)))
)
c = s._compile(q, {"epsilon": 1.0})
sql = render_sql(aggregation_plan(c, c.bounds, "SALT"))
con = s._backend._connection
for name, text in [("dpkit", sql), ("plain", "SELECT region, count(*), sum(income) FROM people GROUP BY region")]:
    ts = []
    for _ in range(3):
        t = time.perf_counter()
        con.execute(text).fetchall()
        ts.append(time.perf_counter() - t)
    print(name, sorted(ts)[1])
t = time.perf_counter()
s.release(q, epsilon=1.0)
print("release", time.perf_counter() - t)
con.execute("PRAGMA enable_profiling='json'")
con.execute("PRAGMA profiling_output='bench/.cache/engine_profile.json'")
con.execute(sql).fetchall()
con.execute("PRAGMA disable_profiling")
profile = json.load(open("bench/.cache/engine_profile.json"))


def walk(node, depth=0):
    if node["timing"] >= 0.005:
        print(
            f"{'  ' * depth}{node['type']:<16} {node['timing']:.3f} s CPU  {node.get('intermediate_rows', 0):>10,} rows"
        )
    for child in node.get("children", []):
        walk(child, depth + 1)


for operator in profile["operator"]:
    walk(operator)
print(f"total CPU {profile['query']['cpu_time']:.3f} s, wall {profile['query']['total_time']:.3f} s")
