"""Child side of ``bench/engine.py``: one method, one data file, a few timed runs, in this process.

``bench/engine.py`` starts this module as a fresh subprocess per (method, row count), with the
Python of the virtual environment that method needs, e.g.::

    .venv-peers/tumult/bin/python bench/_peers_engine.py tumult_public bench/.cache/people_1000000.parquet --repeats 3

It imports nothing beyond the standard library at the top, so it runs in every environment; each
method imports its own library. It reports on stdout, one JSON object per line after the marker
``@@engine``:

* ``{"event": "setup", "seconds": ..., "version": ..., "note": ...}`` once the untimed part is done
  (imports, JVM start, loading data where the method needs it loaded);
* ``{"event": "run", "repeat": i, "seconds": ..., "regions": {region: [count, sum]}}`` per timed run;
* ``{"event": "done", "maxrss_mib": ..., "cpu_s": ...}`` at the end (this process's own peak RSS,
  VmHWM, and its CPU time, all threads);
* ``{"event": "unavailable", "reason": ...}`` instead, when the library cannot be imported or lacks
  the API (the run stops there, with exit status 0).

What each timing includes is documented at the top of ``bench/engine.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MARKER = "@@engine "
REGIONS = tuple(f"r{index:02d}" for index in range(50))
EPSILON = 1.0
DELTA = 1e-6
ROWS_PER_PERSON = 5
GROUPS_PER_PERSON = 1
LOW, HIGH = 0.0, 200_000.0
SPARK_DRIVER_MEMORY = "6g"
#: DuckDB's memory limit for the ``dpkit_capped_*`` methods: the peak memory target (2x the plain
#: GROUP BY's) met by spilling, at a cost in time
MEMORY_CAP = "100MB"

Regions = dict[str, list[float]]
Run = Callable[[], Regions]


class Unavailable(Exception):
    """The method's library is missing or lacks the API it is called with."""


def emit(event: str, **fields: Any) -> None:
    print(MARKER + json.dumps({"event": event, **fields}), flush=True)


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{distribution} {version(distribution)}"
    except PackageNotFoundError:
        return f"{distribution} (version unknown)"


def _regions_from_rows(rows: Any) -> Regions:
    """{region: [count, sum]} from an iterable of (region, count, sum) with None as 0."""
    out: Regions = {}
    for region, count, total in rows:
        out[str(region)] = [float(count or 0), float(total or 0)]
    return out


# ---------------------------------------------------------------------------------------------
# DuckDB references (not private): plain GROUP BY, the naive ROW_NUMBER() bounding, and the
# per-(person, region) aggregation alone (rows capped at k, groups per person not bounded).
# DuckDB 2.0 refuses a volatile ORDER BY in a window ("ORDER BY random()"), so the random key is
# drawn in a subquery first: the same plan (a sort of every row by person and key).
# ---------------------------------------------------------------------------------------------

DUCKDB_QUERIES = {
    "duckdb_plain": """
        SELECT region, count(*), sum(income) FROM read_parquet('{path}') GROUP BY region""",
    "duckdb_any5": """
        SELECT region, count(*), sum(least(greatest(income, {low}), {high}))
        FROM (SELECT region, income FROM read_parquet('{path}')
              QUALIFY row_number() OVER (PARTITION BY person_id) <= {k})
        GROUP BY region""",
    "duckdb_pergroup": """
        SELECT region, sum(least(n, {k})), sum(least(total, {k} * {high}))
        FROM (SELECT person_id, region, count(*) AS n, sum(least(greatest(income, {low}), {high})) AS total
              FROM read_parquet('{path}') GROUP BY person_id, region)
        GROUP BY region""",
    "duckdb_random5": """
        SELECT region, count(*), sum(least(greatest(income, {low}), {high}))
        FROM (SELECT region, income FROM (SELECT *, random() AS draw FROM read_parquet('{path}'))
              QUALIFY row_number() OVER (PARTITION BY person_id ORDER BY draw) <= {k})
        GROUP BY region""",
}


def setup_duckdb(method: str, path: str, rows: int) -> tuple[Run, str, str]:
    try:
        import duckdb
    except ImportError as error:
        raise Unavailable(f"duckdb not importable: {error}") from None
    connection = duckdb.connect()
    connection.execute("SET enable_progress_bar = false")
    sql = DUCKDB_QUERIES[method].format(path=path.replace("'", "''"), low=LOW, high=HIGH, k=ROWS_PER_PERSON)

    def run() -> Regions:
        return _regions_from_rows(connection.execute(sql).fetchall())

    return run, _version("duckdb"), "query on the Parquet file, in-memory DuckDB, default threads"


# ---------------------------------------------------------------------------------------------
# dpkit (DuckDB backend by default, Spark with backend="spark").
# ---------------------------------------------------------------------------------------------


def setup_dpkit(method: str, path: str, rows: int) -> tuple[Run, str, str]:
    private = method.endswith("_private")
    spark = "_spark_" in method
    try:
        import dpkit
        from dpkit import engine as E  # noqa: N812

        if spark:
            _spark_session()  # JVM start in the untimed setup; dpkit's backend reuses it (getOrCreate)
        budget = dpkit.ApproxDP(1000.0, 1e-3) if private else dpkit.PureDP(1000.0)
        options: dict[str, Any] = {"name": "people", "privacy_unit": "person_id", "budget": budget}
        if spark:
            options["backend"] = "spark"
        elif "_capped_" in method:  # DuckDB spills past the cap: less memory, more time
            options["backend"] = E.DuckDBBackend(memory_limit=MEMORY_CAP)
        session = dpkit.Session.from_parquet(path, **options)
        aggregates = {"count": E.count(), "income": E.sum("income", bounds=(LOW, HIGH))}
    except (ImportError, AttributeError) as error:
        raise Unavailable(f"{type(error).__name__}: {error}") from None

    def run() -> Regions:
        table = session.table("people")
        grouped = table.group_by("region") if private else table.group_by("region", keys=list(REGIONS))
        query = grouped.bound(rows_per_group=ROWS_PER_PERSON, groups_per_person=GROUPS_PER_PERSON).agg(**aggregates)
        result = query.release(epsilon=EPSILON, delta=DELTA) if private else query.release(epsilon=EPSILON)
        frame = result.to_pandas()
        return _regions_from_rows(zip(frame["region"], frame["count"], frame["income"], strict=True))

    backend = "Spark backend (local[2])" if spark else "DuckDB backend"
    version = f"dpkit {getattr(dpkit, '__version__', '?')} (engine source sha256 {_source_digest(E.__file__)})"
    return run, version, f"{backend}; Session.from_parquet in setup"


def _source_digest(init: str) -> str:
    """First 12 hex digits of the SHA-256 of a package's .py files: which engine a result measured."""
    import hashlib

    digest = hashlib.sha256()
    for source in sorted(Path(init).parent.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:12]


def _spark_session() -> Any:
    """A local[2] SparkSession with this interpreter on the workers and a throwaway warehouse."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    scratch = tempfile.mkdtemp(prefix="dpkit-bench-spark-")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("dpkit-bench-engine")
        .config("spark.driver.memory", SPARK_DRIVER_MEMORY)
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", os.path.join(scratch, "warehouse"))
        .config("spark.local.dir", scratch)
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={scratch}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def setup_spark_plain(method: str, path: str, rows: int) -> tuple[Run, str, str]:
    try:
        from pyspark.sql import functions as F  # noqa: N812
    except ImportError as error:
        raise Unavailable(f"pyspark not importable: {error}") from None
    spark = _spark_session()

    def run() -> Regions:
        frame = spark.read.parquet(path).groupBy("region").agg(F.count("*"), F.sum("income"))
        return _regions_from_rows(tuple(row) for row in frame.collect())

    return run, _version("pyspark"), "Spark SQL on the Parquet file, local[2]; JVM start in setup"


# ---------------------------------------------------------------------------------------------
# OpenDP 0.16, Polars API (needs polars==1.36.1: its own environment).
# ---------------------------------------------------------------------------------------------


def setup_opendp(method: str, path: str, rows: int) -> tuple[Run, str, str]:
    private = method.endswith("_private")
    try:
        import opendp.prelude as dp
        import polars as pl

        dp.enable_features("contrib")
        bound = dp.polars.Bound
        # A person lives in one region: a public fact of this table, declared in the unit (OpenDP
        # trusts it and does no work for it). Enforcing it is not possible here: OpenDP 0.16's
        # truncate_num_groups(k) fails at release with polars 1.36.1 (its filter builds
        # pl.struct(struct.hash(), struct), two fields named "region": DuplicateError), and its
        # filter rank("dense") < k would keep k - 1 groups since dense ranks start at 1.
        unit = dp.unit_of(
            contributions=[bound(per_group=1), bound(by=["region"], per_group=1, num_groups=GROUPS_PER_PERSON)],
            identifier="person_id",
        )
        keys = pl.LazyFrame({"region": list(REGIONS)})

        def query(count_scale: float | None, sum_scale: float | None, with_count: bool = True) -> Any:
            private_keys = private and with_count  # a private-key release needs the dp.len() to threshold
            margin = dp.polars.Margin(
                by=["region"], invariant=None if private_keys else "keys", max_length=rows, max_groups=len(REGIONS)
            )
            loss = dp.loss_of(epsilon=EPSILON, delta=DELTA) if private_keys else dp.loss_of(epsilon=EPSILON)
            context = dp.Context.compositor(
                data=pl.scan_parquet(path), privacy_unit=unit, privacy_loss=loss, split_evenly_over=1, margins=[margin]
            )
            aggregates = [pl.col("income").fill_null(0.0).dp.sum((LOW, HIGH), scale=sum_scale).alias("income")]
            if with_count:
                aggregates.insert(0, dp.len(scale=count_scale, signed=True).alias("count"))
            bounded = context.query().truncate_per_group(ROWS_PER_PERSON, by=["region"])
            plan = bounded.group_by("region").agg(*aggregates)
            return plan if private_keys else plan.with_keys(keys)

        # Even split: relative scales 5 : S, where S is OpenDP's own sensitivity of the float sum
        # (5 x 200000 plus its allowance for floating-point rounding), read from the Laplace scale
        # of a sum-only query at epsilon = 1. OpenDP then multiplies both by one factor (2).
        summary = query(None, None, with_count=False).summarize()
        sensitivity = float(summary["scale"][0])
        count_scale = float(ROWS_PER_PERSON * GROUPS_PER_PERSON)
        resolved = query(count_scale, sensitivity).summarize()  # the scales OpenDP will use, for the note
        pairs = zip(resolved["column"], resolved["scale"], strict=True)
        scales = ", ".join(f"{name} {scale:.4g}" for name, scale in pairs)
        if private:
            scales += f", threshold {resolved['threshold'][0]}"
    except (ImportError, AttributeError) as error:
        raise Unavailable(f"{type(error).__name__}: {error}") from None

    def run() -> Regions:
        frame = query(count_scale, sensitivity).release().collect()
        return _regions_from_rows(frame.select("region", "count", "income").iter_rows())

    note = (
        f"pl.scan_parquet + Context.compositor + release().collect() per run; noise scales {scales} "
        f"(epsilon 0.5 each); truncate_per_group({ROWS_PER_PERSON}, keep='sample')"
    )
    return run, f"{_version('opendp')}, {_version('polars')}", note


# ---------------------------------------------------------------------------------------------
# SmartNoise SQL (pandas reader: the table is loaded into an in-memory SQLite in setup).
# ---------------------------------------------------------------------------------------------


def setup_smartnoise(method: str, path: str, rows: int) -> tuple[Run, str, str]:
    private = method.endswith("_private")
    try:
        import pandas as pd
        import snsql
        from snsql import Privacy
    except ImportError as error:
        raise Unavailable(f"{type(error).__name__}: {error}") from None
    table = {
        "max_ids": ROWS_PER_PERSON,  # rows per person, over all groups; a person lives in one region
        "row_privacy": False,
        "sample_max_ids": True,  # keep a random max_ids rows of each person (ROW_NUMBER() ORDER BY RANDOM())
        "censor_dims": private,  # private keys: threshold on a noisy count of persons (tau-thresholding)
        "person_id": {"type": "int", "private_id": True},
        "region": {"type": "string"},
        "income": {"type": "float", "lower": LOW, "upper": HIGH},
        "age": {"type": "int"},
    }
    metadata = {"people": {"people": {"people": table}}}
    sql = "SELECT region, COUNT(*) AS n, SUM(income) AS income FROM people.people GROUP BY region"
    frame = pd.read_parquet(path)
    # SmartNoise's epsilon is per mechanism: COUNT and SUM (public keys), plus the person count
    # behind the threshold (private keys); delta is scaled so that the reported cost is <= 1e-6.
    if private:
        epsilon = EPSILON / 3
        probe = snsql.from_df(frame.head(1000), privacy=Privacy(epsilon=epsilon, delta=DELTA), metadata=metadata)
        _, cost_delta = probe.get_privacy_cost(sql)
        delta = DELTA * DELTA / float(cost_delta) * (1 - 1e-9)
    else:
        epsilon, delta = EPSILON / 2, 0.0
    reader = snsql.from_df(frame, privacy=Privacy(epsilon=epsilon, delta=delta), metadata=metadata)
    cost = reader.get_privacy_cost(sql)
    del frame

    def run() -> Regions:
        result = reader.execute_df(sql)
        return _regions_from_rows(zip(result["region"], result["n"], result["income"], strict=True))

    note = (
        f"PandasReader (pandas -> in-memory SQLite) built in setup; epsilon {epsilon:.3g} per mechanism, "
        f"cost reported by get_privacy_cost: ({float(cost[0]):.3g}, {float(cost[1]):.3g}); "
        + ("censor_dims=True" if private else "censor_dims=False (releases the keys present in the data)")
    )
    return run, f"{_version('smartnoise-sql')}, {_version('opendp')}, {_version('pandas')}", note


# ---------------------------------------------------------------------------------------------
# PipelineDP (LocalBackend: pure Python over a list of rows).
# ---------------------------------------------------------------------------------------------


def setup_pipelinedp(method: str, path: str, rows: int) -> tuple[Run, str, str]:
    private = method.endswith("_private")
    try:
        import pipeline_dp
        import pyarrow.parquet as pq
    except ImportError as error:
        raise Unavailable(f"{type(error).__name__}: {error}") from None
    table = pq.read_table(path, columns=["person_id", "region", "income"])
    data = list(
        zip(
            table.column("person_id").to_pylist(),
            table.column("region").to_pylist(),
            table.column("income").to_pylist(),
            strict=True,
        )
    )
    del table
    extractors = pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda row: row[0],
        partition_extractor=lambda row: row[1],
        value_extractor=lambda row: row[2],
    )
    params = pipeline_dp.AggregateParams(
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        metrics=[pipeline_dp.Metrics.COUNT, pipeline_dp.Metrics.SUM],
        max_partitions_contributed=GROUPS_PER_PERSON,
        max_contributions_per_partition=ROWS_PER_PERSON,
        min_value=LOW,
        max_value=HIGH,
    )

    def run() -> Regions:
        accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=DELTA if private else 0.0)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
        result = engine.aggregate(data, params, extractors, public_partitions=None if private else list(REGIONS))
        accountant.compute_budgets()
        return _regions_from_rows((key, metrics.count, metrics.sum) for key, metrics in result)

    split = "1/3 each for COUNT, SUM and partition selection (delta)" if private else "0.5 each for COUNT and SUM"
    note = f"list of Python tuples built in setup; NaiveBudgetAccountant splits epsilon {split}"
    return run, _version("pipeline-dp"), note


# ---------------------------------------------------------------------------------------------
# Tumult Analytics (Spark; pandas < 2 and pyspark < 3.6 on Python 3.11: its own environment).
# ---------------------------------------------------------------------------------------------


def setup_tumult(method: str, path: str, rows: int) -> tuple[Run, str, str]:
    private = method.endswith("_private")
    try:
        import tmlt.analytics as ta
    except ImportError as error:
        raise Unavailable(f"{type(error).__name__}: {error}") from None
    spark = _spark_session()

    def bounded() -> Any:
        return (
            ta.QueryBuilder("people")
            .enforce(ta.MaxGroupsPerID("region", GROUPS_PER_PERSON))
            .enforce(ta.MaxRowsPerGroupPerID("region", ROWS_PER_PERSON))
        )

    def run() -> Regions:
        budget = ta.ApproxDPBudget(EPSILON, DELTA) if private else ta.PureDPBudget(EPSILON)
        session = ta.Session.from_dataframe(
            privacy_budget=budget,
            source_id="people",
            dataframe=spark.read.parquet(path),
            protected_change=ta.AddRowsWithID("person_id"),
        )
        if private:
            share = EPSILON / 3
            groups = ta.QueryBuilder("people").enforce(ta.MaxRowsPerID(1)).get_groups(["region"])
            keys = ta.KeySet.from_dataframe(session.evaluate(groups, ta.ApproxDPBudget(share, DELTA)))
            each: Any = ta.ApproxDPBudget(share, 0.0)
        else:
            keys = ta.KeySet.from_dict({"region": list(REGIONS)})
            each = ta.PureDPBudget(EPSILON / 2)
        counts = session.evaluate(bounded().groupby(keys).count(), each).toPandas()
        sums = session.evaluate(bounded().groupby(keys).sum("income", LOW, HIGH, name="income"), each).toPandas()
        merged = counts.merge(sums, on="region", how="outer")
        return _regions_from_rows(zip(merged["region"], merged["count"], merged["income"], strict=True))

    split = (
        "get_groups (MaxRowsPerID(1)) epsilon 1/3 + delta, COUNT 1/3, SUM 1/3"
        if private
        else "COUNT 0.5, SUM 0.5 (two evaluate calls)"
    )
    note = f"JVM start (SparkSession local[2]) in setup; per run: Session.from_dataframe on spark.read.parquet, {split}"
    return run, f"{_version('tmlt.analytics')}, {_version('pyspark')}, {_version('pandas')}", note


SETUPS: dict[str, Callable[[str, str, int], tuple[Run, str, str]]] = {
    "duckdb": setup_duckdb,
    "dpkit": setup_dpkit,
    "spark": setup_spark_plain,
    "opendp": setup_opendp,
    "smartnoise": setup_smartnoise,
    "pipelinedp": setup_pipelinedp,
    "tumult": setup_tumult,
}


def _rss_mib() -> float:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _peak_rss_mib() -> float:
    """This process's peak resident set since its exec (VmHWM).

    Not ``ru_maxrss``: on Linux that survives fork and exec, so it would report the parent's peak
    (the driver, which has computed the truth with DuckDB) when the method itself used less.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method")
    parser.add_argument("path")
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    family = args.method.split("_", 1)[0]
    start = time.perf_counter()
    try:
        run, version, note = SETUPS[family](args.method, os.path.abspath(args.path), args.rows)
    except Unavailable as reason:
        emit("unavailable", reason=str(reason))
        return 0
    emit("setup", seconds=time.perf_counter() - start, version=version, note=note, rss_mib=_rss_mib())
    for repeat in range(args.repeats):
        start = time.perf_counter()
        try:
            regions = run()
        except (ImportError, AttributeError) as error:
            if family != "dpkit":
                raise
            emit("unavailable", reason=f"{type(error).__name__}: {error}")
            return 0
        emit("run", repeat=repeat, seconds=time.perf_counter() - start, regions=regions)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    emit("done", maxrss_mib=_peak_rss_mib(), cpu_s=usage.ru_utime + usage.ru_stime)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
