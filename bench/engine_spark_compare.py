"""dpkit's Spark backend as of an earlier commit against today's, in one warm JVM, interleaved.

Run from the repository root (after ``bench/engine_data.py`` wrote the data)::

    .venv/bin/python bench/engine_spark_compare.py 34bde0d bench/.cache/people_10000000.parquet --keys public
    .venv/bin/python bench/engine_spark_compare.py 34bde0d bench/.cache/people_10000000.parquet --keys private

Releases ``bench/engine.py``'s query (per region, count and sum of income, 5 rows and
``--groups-per-person`` groups per person, epsilon 1) on a local[2] SparkSession, alternately with
the Spark path as of the given commit and as in the working tree (``--runs`` times each, after one
warm-up release), and prints medians. What is swapped: ``SparkBackend._run_steps`` and the SQL
renderer (``render_sql``, ``view_steps``) of that commit; the rest of the backend is today's.
``bench/engine.py`` reports the median of 3 releases in a fresh JVM, where the first runs are
slowed by the JIT; here both sides run warm, so the difference is the change's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import _peers_engine as peers  # bench/ is on sys.path when a script runs
from _timing import module_at

from dpkit.engine import _backends


def _spark_path_at(commit: str) -> dict[str, Any]:
    """The swapped names, as of ``commit``."""
    aggregation = module_at(commit, "src/dpkit/engine/_aggregation.py", "aggregation_then")
    backends = module_at(commit, "src/dpkit/engine/_backends.py", "backends_then")
    return {
        "_run_steps": backends.SparkBackend._run_steps,
        "render_sql": aggregation.render_sql,
        "view_steps": aggregation.view_steps,
    }


def _install(path: dict[str, Any]) -> None:
    _backends.SparkBackend._run_steps = path["_run_steps"]  # type: ignore[method-assign]
    _backends.render_sql = path["render_sql"]
    _backends.view_steps = path["view_steps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit")
    parser.add_argument("data")
    parser.add_argument("--keys", choices=["public", "private"], default="public")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--groups-per-person", type=int, default=1)
    args = parser.parse_args()

    peers.GROUPS_PER_PERSON = args.groups_per_person  # (read by each release)
    # bench/engine.py's dpkit-on-Spark method: local[2] SparkSession, the query, its release
    run, _, _ = peers.setup_dpkit(f"dpkit_spark_{args.keys}", args.data, 0)

    def release() -> float:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    today = {
        "_run_steps": _backends.SparkBackend._run_steps,
        "render_sql": _backends.render_sql,
        "view_steps": _backends.view_steps,
    }
    sides = {args.commit: _spark_path_at(args.commit), "working tree": today}
    times: dict[str, list[float]] = {name: [] for name in sides}
    release()  # warm-up (JVM start, JIT)
    for _ in range(args.runs):
        for name, path in sides.items():
            _install(path)
            times[name].append(release())
    name = Path(args.data).name
    summary = ", ".join(f"{side} {statistics.median(t):.2f} s" for side, t in times.items())
    print(f"{name}, {args.keys} keys, g = {args.groups_per_person}, Spark local[2], median of {args.runs}: {summary}")
    for side, t in times.items():
        print(f"  {side}: {', '.join(f'{x:.2f}' for x in t)}")


if __name__ == "__main__":
    main()
