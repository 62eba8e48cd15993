"""Backends: where the bounded aggregation runs. One small protocol, two engines, one conformance suite.

A backend registers the private table (and public lookup tables), reports column types (public
metadata, read without touching rows), and runs an :class:`AggregationPlan`, returning exact
integer aggregates. Noise is never drawn here.

DuckDB (embedded) is the default; Spark (``pyspark``) runs the very same SQL text, transpiled
by sqlglot, with the CTEs DuckDB materialises cached as temporary views first. Both load lazily,
with an install hint when missing.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from dpkit._errors import InvalidParameterError
from dpkit.engine._aggregation import (
    AggregationPlan,
    AggregationResult,
    key_table_columns,
    render_sql,
    repeated_keys_sql,
    to_dialect,
    view_steps,
)

__all__ = ["Backend", "ColumnInfo", "DuckDBBackend", "SparkBackend", "make_backend"]

#: dpkit turns Spark's ANSI mode off around each query and restores it after; the flag belongs to
#: the SparkSession, so two dpkit sessions on one SparkSession must not interleave that sequence.
_SPARK_RUN_LOCK = threading.Lock()


@dataclass(frozen=True)
class ColumnInfo:
    """A column's name and whether it is numeric (summable) and integer-valued."""

    name: str
    type: str
    numeric: bool
    integer: bool


def _require(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:  # pragma: no cover - exercised only without the optional dependency
        raise ImportError(
            f"dpkit.engine needs {module!r}: pip install 'dpkit[{extra}]' (or pip install {module})"
        ) from None


@runtime_checkable
class Backend(Protocol):
    """What the engine needs from an execution engine."""

    name: str

    def register(self, name: str, source: object, kind: str) -> None:
        """Make ``source`` (a path or a frame, per ``kind``) queryable as table ``name``."""

    def schema(self, name: str) -> dict[str, ColumnInfo]:
        """Column names and types of table ``name`` (metadata only; no rows are read)."""

    def run(self, plan: AggregationPlan) -> AggregationResult:
        """Run the bounded aggregation; exact integer results."""

    def has_repeated_keys(self, table: str, columns: tuple[str, ...]) -> bool:
        """Whether a (public) table holds some non-NULL combination of ``columns`` twice."""


def _collect(rows: list[tuple[Any, ...]], plan: AggregationPlan) -> AggregationResult:
    width = len(plan.groups)
    if plan.indexed_keys:  # the first column is the public key's rank in plan.key_order
        public = plan.key_order
        rows = [(*public[int(row[0])], *row[1:]) for row in rows]
    if plan.histogram is not None:
        index: dict[tuple[Any, ...], int] = {}
        histograms: list[dict[int, int]] = []
        for row in rows:
            key = tuple(row[:width])
            if key not in index:
                index[key] = len(histograms)
                histograms.append({})
            histograms[index[key]][int(row[width])] = int(row[width + 1])
        return AggregationResult(list(index), {}, histograms)
    names = ["rows", "persons"] + [f"m{i}" for i in range(len(plan.moments))]
    columns: dict[str, list[int]] = {name: [] for name in names}
    keys = []
    for row in rows:
        keys.append(tuple(row[:width]))
        for name, value in zip(names, row[width:], strict=True):
            columns[name].append(int(value) if value is not None else 0)
    return AggregationResult(keys, columns)


_DUCKDB_INTEGER = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
)
_DUCKDB_REAL = ("FLOAT", "DOUBLE", "REAL", "DECIMAL")


class DuckDBBackend:
    """DuckDB, embedded: Parquet, CSV, pandas, Polars or Arrow in; the aggregation runs as SQL inside DuckDB.

    Parquet and CSV files are scanned in place (views), so data larger than memory streams.
    """

    name = "duckdb"

    def __init__(self, connection: Any = None, *, threads: int | None = None) -> None:
        duckdb = _require("duckdb", "engine")
        if connection is None:
            connection = duckdb.connect(":memory:")
            # Track progress for progress() but never print DuckDB's own bar on stdout (it would
            # mix with the caller's output, e.g. ``dpkit query --json``).
            connection.execute("SET enable_progress_bar = true")
            connection.execute("SET enable_progress_bar_print = false")
        self._connection = connection
        if threads is not None:
            self._connection.execute(f"SET threads = {int(threads)}")

    def register(self, name: str, source: object, kind: str) -> None:
        from dpkit.engine._aggregation import _literal, _quote

        if kind in ("parquet", "csv"):
            path = os.fspath(source)  # type: ignore[call-overload]
            reader = "read_parquet" if kind == "parquet" else "read_csv_auto"
            self._connection.execute(
                f"CREATE OR REPLACE VIEW {_quote(name)} AS SELECT * FROM {reader}({_literal(path)})"
            )
        elif kind in ("pandas", "arrow", "polars"):
            self._connection.register(name, source)
        else:  # pragma: no cover - guarded by Session
            raise InvalidParameterError("kind", kind, "must be parquet, csv, pandas, arrow or polars for DuckDB")

    def schema(self, name: str) -> dict[str, ColumnInfo]:
        from dpkit.engine._aggregation import _quote

        rows = self._connection.execute(f"DESCRIBE SELECT * FROM {_quote(name)}").fetchall()
        result = {}
        for row in rows:
            column, kind = str(row[0]), str(row[1]).upper()
            integer = kind.startswith(_DUCKDB_INTEGER)
            result[column] = ColumnInfo(column, kind, integer or kind.startswith(_DUCKDB_REAL), integer)
        return result

    def run(self, plan: AggregationPlan) -> AggregationResult:
        with self._key_table(plan) as key_table:
            rows = self._connection.execute(render_sql(plan, key_table)).fetchall()
        return _collect(rows, plan)

    def check(self, plan: AggregationPlan) -> None:
        """Bind and plan ``plan`` without reading rows (EXPLAIN); raises what running it would on schema errors."""
        with self._key_table(plan) as key_table:
            sql = render_sql(plan, key_table)
            self._connection.execute("EXPLAIN " + sql).fetchall()
            # DuckDB hands TIMESTAMP WITH TIME ZONE values to Python through pytz: without it the
            # query would bind here but fail when its group keys are read back, after the debit.
            zoned = any(
                "TIME ZONE" in str(row[1]).upper() for row in self._connection.execute("DESCRIBE " + sql).fetchall()
            )
            if zoned and importlib.util.find_spec("pytz") is None:
                raise RuntimeError(
                    "reading TIMESTAMP WITH TIME ZONE group keys back from DuckDB needs the pytz module: "
                    "pip install pytz, or group by the column cast to TIMESTAMP in a view of the data"
                )

    @contextlib.contextmanager
    def _key_table(self, plan: AggregationPlan) -> Iterator[str | None]:
        """A long public key list registered as an Arrow table for one statement (None: use VALUES)."""
        columns = key_table_columns(plan)
        table = None
        if columns is not None:
            import pyarrow as pa

            try:
                table = pa.table({name: pa.array(values) for name, values in columns.items()})
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, OverflowError):
                table = None  # keys Arrow cannot type as one column (mixed kinds): the VALUES list
        if table is None:
            yield None
            return
        name = f"__dpkit_keys_{uuid.uuid4().hex}"
        self._connection.register(name, table)
        try:
            yield name
        finally:
            self._connection.unregister(name)

    def has_repeated_keys(self, table: str, columns: tuple[str, ...]) -> bool:
        return bool(self._connection.execute(repeated_keys_sql(table, columns)).fetchall())

    def progress(self) -> float | None:
        """Fraction done of the query running now (from another thread), or None if unknown."""
        value = float(self._connection.query_progress())
        return None if value < 0 else min(1.0, value / 100.0)


class SparkBackend:
    """Apache Spark through pyspark: the same bounded aggregation, transpiled to Spark SQL.

    Tables are Spark temporary views; ``from_spark`` registers an existing DataFrame.
    """

    name = "spark"

    def __init__(self, spark: Any = None) -> None:
        if spark is None:
            pyspark_sql = _require("pyspark.sql", "spark")
            spark = (
                pyspark_sql.SparkSession.builder.master("local[*]")
                .appName("dpkit")
                .config("spark.sql.shuffle.partitions", "8")
                .config("spark.ui.enabled", "false")
                .getOrCreate()
            )
        self._spark = spark

    def register(self, name: str, source: object, kind: str) -> None:
        reader = self._spark.read
        if kind == "parquet":
            frame = reader.parquet(str(Path(os.fspath(source))))  # type: ignore[call-overload]
        elif kind == "csv":
            frame = reader.csv(str(Path(os.fspath(source))), header=True, inferSchema=True)  # type: ignore[call-overload]
        elif kind == "pandas":
            frame = self._spark.createDataFrame(source)
        elif kind == "arrow":
            frame = self._spark.createDataFrame(source.to_pandas())  # type: ignore[attr-defined]
        elif kind == "polars":
            frame = self._spark.createDataFrame(source.to_pandas())  # type: ignore[attr-defined]
        elif kind == "spark":
            frame = source
        else:  # pragma: no cover - guarded by Session
            raise InvalidParameterError("kind", kind, "must be parquet, csv, pandas, arrow, polars or spark")
        frame.createOrReplaceTempView(name)

    def schema(self, name: str) -> dict[str, ColumnInfo]:
        result = {}
        for column, kind in self._spark.table(f"`{name}`").dtypes:
            lowered = kind.lower()
            integer = lowered in ("tinyint", "smallint", "int", "bigint", "byte", "short", "long")
            numeric = integer or lowered in ("float", "double") or lowered.startswith("decimal")
            result[column] = ColumnInfo(column, kind, numeric, integer)
        return result

    def run(self, plan: AggregationPlan) -> AggregationResult:
        # ANSI mode off for this query: a failing cast or overflow in a WHERE condition gives NULL
        # (the row is excluded) instead of an error that one person's rows could trigger.
        # The CTEs DuckDB materialises (the per-person table, the people in several groups, the
        # private key list) are cached here as temporary views first: Spark would otherwise compute
        # each once per reference, and it sizes (and broadcasts) a cached view by its real rows.
        with self._key_table(plan) as key_table:
            steps, final = view_steps(render_sql(plan, key_table), "spark", f"__dpkit_{uuid.uuid4().hex}_")
            with _SPARK_RUN_LOCK:  # the ANSI flag is per SparkSession: sessions sharing one take turns
                return self._run_steps(plan, steps, final)

    @contextlib.contextmanager
    def _key_table(self, plan: AggregationPlan) -> Iterator[str | None]:
        """A long public key list as a temporary view for one query (None: use VALUES)."""
        columns = key_table_columns(plan)
        frame = None
        if columns is not None:
            rows = list(zip(*columns.values(), strict=True))
            try:
                frame = self._spark.createDataFrame(rows, schema=list(columns))
            except (TypeError, ValueError):
                frame = None  # keys Spark cannot type as one column (mixed kinds): the VALUES list
        if frame is None:
            yield None
            return
        name = f"__dpkit_keys_{uuid.uuid4().hex}"
        frame.createOrReplaceTempView(name)
        try:
            yield name
        finally:
            self._spark.catalog.dropTempView(name)

    def _run_steps(self, plan: AggregationPlan, steps: list[tuple[str, str, bool]], final: str) -> AggregationResult:
        views: list[str] = []
        previous = self._spark.conf.get("spark.sql.ansi.enabled", None)
        self._spark.conf.set("spark.sql.ansi.enabled", "false")
        try:
            for view, text, cache in steps:
                frame = self._spark.sql(text)
                frame.createOrReplaceTempView(view)
                views.append(view)
                if cache:
                    frame.persist().count()  # computed once, before the queries that read it
            rows = self._spark.sql(final).collect()
        finally:
            for view in views:
                self._spark.catalog.dropTempView(view)  # also uncaches it
            if previous is None:
                self._spark.conf.unset("spark.sql.ansi.enabled")
            else:
                self._spark.conf.set("spark.sql.ansi.enabled", previous)
        return _collect([tuple(_plain(v) for v in row) for row in rows], plan)

    def check(self, plan: AggregationPlan) -> None:
        """Analyse ``plan`` without running it (Spark plans lazily); raises on schema errors."""
        with self._key_table(plan) as key_table:
            self._spark.sql(to_dialect(render_sql(plan, key_table), "spark"))

    def has_repeated_keys(self, table: str, columns: tuple[str, ...]) -> bool:
        return bool(self._spark.sql(to_dialect(repeated_keys_sql(table, columns), "spark")).collect())

    def progress(self) -> float | None:
        """Fraction of the active stages' tasks completed (from another thread), or None if idle."""
        tracker = self._spark.sparkContext.statusTracker()
        total = done = 0
        for stage in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage)
            if info is not None:
                total += info.numTasks
                done += info.numCompletedTasks
        return done / total if total else None


def _plain(value: Any) -> Any:
    return int(value) if isinstance(value, Decimal) else value


def make_backend(backend: object) -> Backend:
    """A backend from a name (``"duckdb"``, ``"spark"``) or an object following :class:`Backend`."""
    if backend is None or backend == "duckdb":
        return DuckDBBackend()
    if backend == "spark":
        return SparkBackend()
    if isinstance(backend, Backend):
        return backend
    raise InvalidParameterError("backend", backend, "must be 'duckdb', 'spark' or a dpkit.engine.Backend")
