"""dpkit's Spark backend as of an earlier commit against today's, in one warm JVM, interleaved.

Run from the repository root (after ``bench/engine_data.py`` wrote the data)::

    .venv/bin/python bench/engine_spark_compare.py 34bde0d bench/.cache/people_10000000.parquet --keys public
    .venv/bin/python bench/engine_spark_compare.py 34bde0d bench/.cache/people_10000000.parquet --keys private

Releases ``bench/engine.py``'s query (per region, count and sum of income, 5 rows and 1 group per
person, epsilon 1) on a local[2] SparkSession, alternately with ``SparkBackend._run_steps`` as of
the given commit and as in the working tree (``--runs`` times each, after one warm-up release),
and prints medians. Only that method is swapped: the SQL text and the rest of the backend are
today's. ``bench/engine.py`` reports the median of 3 releases in a fresh JVM, where the first
runs are slowed by the JIT; here both sides run warm, so the difference is the change's.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import _peers_engine as peers  # noqa: E402

import dpkit  # noqa: E402
from dpkit import engine as E  # noqa: E402, N812
from dpkit.engine import _backends  # noqa: E402


def _run_steps_at(commit: str) -> Any:
    text = subprocess.run(
        ["git", "show", f"{commit}:src/dpkit/engine/_backends.py"], check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "backends_then.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("backends_then", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["backends_then"] = module
    spec.loader.exec_module(module)
    return module.SparkBackend._run_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit")
    parser.add_argument("data")
    parser.add_argument("--keys", choices=["public", "private"], default="public")
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()

    private = args.keys == "private"
    peers._spark_session()  # local[2]; the backend reuses it (getOrCreate)
    budget = dpkit.ApproxDP(1e6, 1e-3) if private else dpkit.PureDP(1e6)
    session = dpkit.Session.from_parquet(
        args.data, name="people", privacy_unit="person_id", budget=budget, backend="spark"
    )

    def release() -> float:
        table = session.table("people")
        grouped = table.group_by("region") if private else table.group_by("region", keys=list(peers.REGIONS))
        query = grouped.bound(rows_per_group=5, groups_per_person=1).agg(
            count=E.count(), income=E.sum("income", bounds=(0, 200000))
        )
        start = time.perf_counter()
        query.release(epsilon=1.0, delta=1e-6) if private else query.release(epsilon=1.0)
        return time.perf_counter() - start

    sides = {args.commit: _run_steps_at(args.commit), "working tree": _backends.SparkBackend._run_steps}
    times: dict[str, list[float]] = {name: [] for name in sides}
    release()  # warm-up (JVM start, JIT)
    for _ in range(args.runs):
        for name, run_steps in sides.items():
            _backends.SparkBackend._run_steps = run_steps  # type: ignore[method-assign]
            times[name].append(release())
    name = Path(args.data).name
    summary = ", ".join(f"{side} {statistics.median(t):.2f} s" for side, t in times.items())
    print(f"{name}, {args.keys} keys, Spark local[2], median of {args.runs}: {summary}")
    for side, t in times.items():
        print(f"  {side}: {', '.join(f'{x:.2f}' for x in t)}")


if __name__ == "__main__":
    main()
