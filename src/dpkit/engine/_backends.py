"""Backends: where the bounded aggregation runs. One small protocol, two engines, one conformance suite.

A backend registers the private table (and public lookup tables), reports column types (public
metadata, read without touching rows), and runs an :class:`AggregationPlan`, returning exact
integer aggregates. Noise is never drawn here.

DuckDB (embedded) is the default; Spark (``pyspark``) runs the very same SQL text, transpiled
by sqlglot, with the CTEs DuckDB materialises cached as temporary views first, and adjusted where
Spark's semantics differ from DuckDB's (``_spark_semantics``). Both load lazily, with an install
hint when missing.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from dpkit._errors import InvalidParameterError
from dpkit.engine._aggregation import (
    AggregationPlan,
    AggregationResult,
    key_table_columns,
    render_sql,
    repeated_keys_sql,
    view_steps,
)
from dpkit.engine._csv import TypedCsv, duckdb_select, spark_frame

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

        if kind == "csv" and isinstance(source, TypedCsv):  # declared types: nothing inferred from the rows
            self._connection.execute(f"CREATE OR REPLACE VIEW {_quote(name)} AS {duckdb_select(source)}")
        elif kind in ("parquet", "csv"):
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
            if importlib.util.find_spec("pytz") is not None:
                return  # (DESCRIBE plans the query a second time: only when the answer matters)
            zoned = any(
                "TIME ZONE" in str(row[1]).upper() for row in self._connection.execute("DESCRIBE " + sql).fetchall()
            )
            if zoned:
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

    Each table is a Spark temporary view of its own, under a name unique to this backend: two
    dpkit sessions sharing one SparkSession never read each other's tables (nor replace a view of
    the caller's). ``from_spark`` registers an existing DataFrame; frames (pandas, Arrow, Polars)
    go through Arrow with their declared types, NaN kept apart from NULL and naive timestamps as
    TIMESTAMP_NTZ (as DuckDB reads them, whatever the session's time zone).
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
        # The session's tables (kept while it lives), apart from the per-query views ("__dpkit_...").
        self._prefix = f"_dpkit_table_{uuid.uuid4().hex}_"
        #: table name (case-folded, as the engines match names) -> (its temporary view, its column types)
        self._tables: dict[str, tuple[str, dict[str, str]]] = {}

    def register(self, name: str, source: object, kind: str) -> None:
        reader = self._spark.read
        if kind == "parquet":
            frame = reader.parquet(str(Path(os.fspath(source))))  # type: ignore[call-overload]
        elif kind == "csv" and isinstance(source, TypedCsv):
            frame = spark_frame(self._spark, source)
        elif kind == "csv":
            frame = reader.csv(str(Path(os.fspath(source))), header=True, inferSchema=True)  # type: ignore[call-overload]
        elif kind in ("pandas", "arrow", "polars"):
            frame = self._from_frame(source, kind)
        elif kind == "spark":
            frame = source
        else:  # pragma: no cover - guarded by Session
            raise InvalidParameterError("kind", kind, "must be parquet, csv, pandas, arrow, polars or spark")
        view = f"{self._prefix}{len(self._tables)}_{uuid.uuid4().hex[:8]}"
        frame.createOrReplaceTempView(view)
        types = {str(column): str(kind_) for column, kind_ in frame.dtypes}
        previous = self._tables.get(name.casefold())
        self._tables[name.casefold()] = (view, types)
        if previous is not None:
            self._spark.catalog.dropTempView(previous[0])

    def _from_frame(self, source: Any, kind: str) -> Any:
        """A Spark DataFrame from a pandas, Arrow or Polars frame, through Arrow when it can.

        (Spark's own pandas import turns NaN into NULL, infers a column's type from its rows, fails
        on an empty frame, turns uint64 values above 2^63 into NULL and shifts naive timestamps by
        the session's time zone; ``to_pandas`` loses NaN and Polars dates.)
        """
        try:
            if kind == "pandas":
                import pyarrow as pa

                table = pa.Table.from_pandas(source, preserve_index=False)
            elif kind == "polars":
                table = source.to_arrow()
            else:
                table = source
            return _spark_from_arrow(self._spark, table)
        except (ImportError, TypeError, ValueError, NotImplementedError, AttributeError):
            # pyspark before 4, or types Arrow or Spark's Arrow import cannot take: Spark's own import.
            return self._spark.createDataFrame(source if kind == "pandas" else source.to_pandas())

    def _view(self, name: str) -> str:
        entry = self._tables.get(name.casefold())
        return entry[0] if entry is not None else name

    def _views(self) -> dict[str, str]:
        return {name: view for name, (view, _) in self._tables.items()}

    def schema(self, name: str) -> dict[str, ColumnInfo]:
        result = {}
        for column, kind in self._spark.table(f"`{self._view(name)}`").dtypes:
            lowered = kind.lower()
            integer = lowered in ("tinyint", "smallint", "int", "bigint", "byte", "short", "long")
            numeric = integer or lowered in ("float", "double") or lowered.startswith("decimal")
            result[column] = ColumnInfo(column, kind, numeric, integer)
        return result

    def _column_types(self, plan: AggregationPlan) -> dict[str, str]:
        """Spark type per column name (case-folded) of the tables ``plan`` reads, and per group alias ``__g<i>``."""
        types: dict[str, str] = {}
        for table in (*(join.table for join in reversed(plan.joins)), plan.table):
            entry = self._tables.get(table.casefold())
            if entry is not None:
                types.update({column.casefold(): kind for column, kind in entry[1].items()})
        for i, group in enumerate(plan.groups):
            if isinstance(group, str) and group.casefold() in types:
                types[f"__g{i}"] = types[group.casefold()]
        return types

    def _steps(self, plan: AggregationPlan, sql: str) -> tuple[list[tuple[str, str, bool]], str]:
        rewrite = functools.partial(_spark_semantics, types=self._column_types(plan))
        return view_steps(sql, "spark", f"__dpkit_{uuid.uuid4().hex}_", tables=self._views(), rewrite=rewrite)

    def run(self, plan: AggregationPlan) -> AggregationResult:
        # ANSI mode off for this query: a failing cast or overflow in a WHERE condition gives NULL
        # (the row is excluded) instead of an error that one person's rows could trigger.
        # The CTEs DuckDB materialises (the per-person table, the people in several groups, the
        # private key list) are cached here as temporary views first: Spark would otherwise compute
        # each once per reference, and it sizes (and broadcasts) a cached view by its real rows.
        with self._key_table(plan) as key_table:
            steps, final = self._steps(plan, render_sql(plan, key_table))
            with _SPARK_RUN_LOCK:  # the ANSI flag is per SparkSession: sessions sharing one take turns
                rows = self._run_steps(steps, final, execute=True)
        # Group keys come back as Spark gives them (a DECIMAL key stays a Decimal, as from DuckDB);
        # _collect turns the aggregates (DECIMAL(38, 0) sums) into integers.
        return _collect([tuple(row) for row in rows], plan)

    @contextlib.contextmanager
    def _key_table(self, plan: AggregationPlan) -> Iterator[str | None]:
        """A long public key list as a temporary view for one query (None: use VALUES).

        Built through Arrow as DuckDB's is (same column types: a naive datetime key is a
        TIMESTAMP_NTZ, as the column it is matched with).
        """
        columns = key_table_columns(plan)
        frame = None
        if columns is not None:
            try:
                import pyarrow as pa

                table = pa.table({name: pa.array(values) for name, values in columns.items()})
                frame = _spark_from_arrow(self._spark, table)
            except (ImportError, TypeError, ValueError, NotImplementedError, OverflowError):
                frame = None  # keys Arrow or Spark cannot type as one column (mixed kinds): the VALUES list
        if frame is None:
            yield None
            return
        name = f"__dpkit_keys_{uuid.uuid4().hex}"
        frame.createOrReplaceTempView(name)
        try:
            yield name
        finally:
            self._spark.catalog.dropTempView(name)

    def _run_steps(self, steps: list[tuple[str, str, bool]], final: str, *, execute: bool) -> list[Any]:
        """Register each step as a view (cached and computed when ``execute``), then run the final query
        (``execute``) or only analyse it; ANSI mode off throughout, as the query runs. Needs the lock."""
        views: list[str] = []
        previous = self._spark.conf.get("spark.sql.ansi.enabled", None)
        self._spark.conf.set("spark.sql.ansi.enabled", "false")
        try:
            for view, text, cache in steps:
                frame = self._spark.sql(text)
                frame.createOrReplaceTempView(view)
                views.append(view)
                if cache and execute:
                    frame.persist().count()  # computed once, before the queries that read it
            query = self._spark.sql(final)
            return list(query.collect()) if execute else []
        finally:
            for view in views:
                self._spark.catalog.dropTempView(view)  # also uncaches it
            if previous is None:
                self._spark.conf.unset("spark.sql.ansi.enabled")
            else:
                self._spark.conf.set("spark.sql.ansi.enabled", previous)

    def check(self, plan: AggregationPlan) -> None:
        """Analyse ``plan`` without running it (Spark plans lazily); raises on schema errors.

        Analyses the very texts :meth:`run` runs (the same views, ANSI mode off as then), so that a
        query that passes here does not fail on its schema after the debit.
        """
        with self._key_table(plan) as key_table:
            steps, final = self._steps(plan, render_sql(plan, key_table))
            with _SPARK_RUN_LOCK:
                self._run_steps(steps, final, execute=False)

    def has_repeated_keys(self, table: str, columns: tuple[str, ...]) -> bool:
        _, final = view_steps(repeated_keys_sql(table, columns), "spark", "", tables=self._views())
        return bool(self._spark.sql(final).collect())

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


def _spark_from_arrow(spark: Any, table: Any) -> Any:
    """A Spark DataFrame holding an Arrow table: declared types (those Spark lacks widened), NaN kept
    apart from NULL, and naive timestamps as TIMESTAMP_NTZ. Needs pyspark 4 (TypeError before)."""
    import pyarrow as pa
    import pyspark
    from pyspark.sql.pandas.types import from_arrow_schema

    if int(pyspark.__version__.split(".")[0]) < 4:
        raise TypeError("pyspark before 4 cannot read an Arrow table")
    fields = []
    for field in table.schema:
        kind = field.type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        if getattr(pa.types, "is_string_view", lambda _: False)(kind):
            kind = pa.large_string()
        elif getattr(pa.types, "is_binary_view", lambda _: False)(kind):
            kind = pa.large_binary()
        kind = {
            pa.uint8(): pa.int16(),
            pa.uint16(): pa.int32(),
            pa.uint32(): pa.int64(),
            pa.uint64(): pa.decimal128(20, 0),
            pa.float16(): pa.float32(),
            pa.date64(): pa.date32(),
        }.get(kind, kind)
        fields.append(pa.field(field.name, kind, field.nullable))
    schema = pa.schema(fields)
    if schema != table.schema:
        table = table.cast(schema)
    return spark.createDataFrame(table, schema=from_arrow_schema(table.schema, prefer_timestamp_ntz=True))


# -- Spark semantics ------------------------------------------------------------------------------
# The SQL text follows DuckDB's semantics; where Spark's differ on values a filter or the group
# ranking can meet, the Spark text is adjusted to give DuckDB's results.

_INTEGER_RANGES = {
    "TINYINT": (-(2**7), 2**7),
    "SMALLINT": (-(2**15), 2**15),
    "INT": (-(2**31), 2**31),
    "BIGINT": (-(2**63), 2**63),
}

#: DuckDB's text of a DOUBLE (Python's repr: the shortest digits that read back as the same double,
#: positional for exponents -4 to 15, else d.ddde+XX; 'nan', 'inf', '-0.0'). Spark's is Java's
#: ('1.0E20', 'Infinity'). The shortest digits: the first of %.0e ... %.16e that reads back as x; an
#: integer below 9e18 is rounded from its exact digits instead (Java's own digits for it can be one
#: too many, and rounding them again can land on the other neighbour). The digits and exponent are
#: then laid out as Python does. ``__dpkit_x`` stands for the value; lambda variables have unlikely
#: names (a lambda's variable would hide a column of that name).
_DOUBLE_TEXT = """
CASE
  WHEN __dpkit_x IS NULL THEN NULL
  WHEN isnan(__dpkit_x) THEN 'nan'
  WHEN __dpkit_x = CAST('Infinity' AS DOUBLE) THEN 'inf'
  WHEN __dpkit_x = CAST('-Infinity' AS DOUBLE) THEN '-inf'
  WHEN __dpkit_x = 0 THEN CAST(__dpkit_x AS STRING)
  ELSE concat(
    CASE WHEN __dpkit_x < 0 THEN '-' ELSE '' END,
    transform(
      array(CASE
        WHEN abs(__dpkit_x) < 9.0E18 AND __dpkit_x = CAST(__dpkit_x AS BIGINT) THEN transform(
          array(CAST(abs(CAST(__dpkit_x AS BIGINT)) AS STRING)),
          __dpkit_n -> element_at(filter(transform(sequence(1, length(__dpkit_n)), __dpkit_p -> transform(
            array(CAST(CAST(substring(__dpkit_n, 1, __dpkit_p) AS BIGINT)
              + CASE WHEN substring(__dpkit_n, __dpkit_p + 1, 1) >= '5' THEN 1 ELSE 0 END AS STRING)),
            __dpkit_r -> named_struct(
              't', concat(__dpkit_r, 'e', CAST(length(__dpkit_n) - 1 + length(__dpkit_r) - __dpkit_p AS STRING)),
              'x', CAST(concat(__dpkit_r, repeat('0', length(__dpkit_n) - __dpkit_p)) AS DOUBLE)))[0]),
            __dpkit_c -> __dpkit_c.x = abs(__dpkit_x)), 1).t)[0]
        ELSE element_at(filter(
          transform(sequence(0, 16), __dpkit_p -> format_string(
            concat('%.', CAST(__dpkit_p AS STRING), 'e'), __dpkit_x)),
          __dpkit_t -> CAST(__dpkit_t AS DOUBLE) = __dpkit_x), 1)
      END),
      __dpkit_s -> transform(
        array(named_struct(
          'd', regexp_replace(regexp_replace(substring_index(__dpkit_s, 'e', 1), '[^0-9]', ''), '0+$', ''),
          'e', CAST(substring_index(__dpkit_s, 'e', -1) AS INT))),
        __dpkit_v -> CASE
          WHEN __dpkit_v.e < -4 OR __dpkit_v.e >= 16 THEN concat(
            substring(__dpkit_v.d, 1, 1),
            CASE WHEN length(__dpkit_v.d) > 1 THEN concat('.', substring(__dpkit_v.d, 2)) ELSE '' END,
            CASE WHEN __dpkit_v.e < 0 THEN 'e-' ELSE 'e+' END,
            CASE WHEN abs(__dpkit_v.e) < 10 THEN '0' ELSE '' END,
            CAST(abs(__dpkit_v.e) AS STRING))
          WHEN __dpkit_v.e < 0 THEN concat('0.', repeat('0', -__dpkit_v.e - 1), __dpkit_v.d)
          WHEN __dpkit_v.e + 1 < length(__dpkit_v.d) THEN concat(
            substring(__dpkit_v.d, 1, __dpkit_v.e + 1), '.', substring(__dpkit_v.d, __dpkit_v.e + 2))
          ELSE concat(__dpkit_v.d, repeat('0', __dpkit_v.e + 1 - length(__dpkit_v.d)), '.0')
        END)[0])[0])
END
"""


@functools.lru_cache(maxsize=1)
def _double_text_template() -> Any:
    import sqlglot

    return sqlglot.parse_one(_DOUBLE_TEXT, read="spark")


def _with_value(template: Any, value: Any) -> Any:
    """``template`` (a tree with the column ``__dpkit_x``) with each ``__dpkit_x`` replaced by ``value``."""
    from sqlglot import exp

    tree = template.copy()
    for column in list(tree.find_all(exp.Column)):
        if column.name == "__dpkit_x" and not column.table:
            column.replace(value.copy())
    return tree


def _value_type(node: Any, types: Mapping[str, str]) -> str | None:
    """The Spark type name of ``node`` when it is plain to see (a column, a cast), else None."""
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return _value_type(node.this, types)
    if isinstance(node, exp.Column):
        return types.get(node.name.casefold())
    if isinstance(node, exp.Cast):
        return str(node.to.sql(dialect="spark")).lower()
    return None


def _spark_semantics(tree: Any, types: Mapping[str, str]) -> Any:
    """DuckDB's semantics for the nodes where Spark's differ (``types``: see ``SparkBackend._column_types``).

    - ``a / b`` divides as doubles (DuckDB divides integers and decimals as DOUBLE; Spark as DECIMAL
      for decimals, a few digits only), and inside a filter a division by zero gives DuckDB's
      IEEE result (+-inf, NaN) instead of Spark's NULL;
    - a cast to an integer type rounds (DOUBLE: half to even; DECIMAL and text: half away from zero)
      where Spark truncates, and a value out of the type's range gives NULL where Spark wraps or
      saturates (DuckDB fails the cast: the filter's TRY excludes the row);
    - FLOOR and CEIL of NaN, an infinity or a DOUBLE beyond 2^63 are that value (Spark: a clipped
      BIGINT), the sign of NaN is 0, and LEFT / RIGHT with a negative length drop characters;
    - logarithms give -inf at 0 and NaN below it, and LOG(10, x), LOG(2, x) are DuckDB's log10 and
      log2 (see ``logarithm``);
    - in a filter, a cast that fails in DuckDB (NULL from a value that is not NULL, in Spark) makes
      the whole condition NULL, as DuckDB's TRY does (see ``failing_condition``);
    - a DOUBLE cast to text is written as DuckDB writes it: the private group keys are ranked by a
      hash of that text, so both engines must keep the same groups of a person.
    """
    from sqlglot import exp

    def double(node: Any) -> Any:
        return exp.Cast(this=node, to=exp.DataType.build("DOUBLE"))

    def literal(value: str) -> Any:
        return exp.Cast(this=exp.Literal.string(value), to=exp.DataType.build("DOUBLE"))

    def call(name: str, *arguments: Any) -> Any:
        return exp.Anonymous(this=name, expressions=list(arguments))

    def logarithm(node: Any) -> Any:
        """DuckDB's logarithms: -inf at 0 and NaN below (Spark: NULL), inf at inf; base 10 and 2 as exact as
        DuckDB's log10 and log2 (Spark's LOG(2, x) is ln(x) / ln(2): FLOOR(LOG2(2^-39)) gave -40,
        putting a power of two in the next bin of the automatic bounds' histogram)."""
        if isinstance(node, exp.Ln):
            base, value = None, node.this
        else:
            base, value = node.this, node.expression
        if isinstance(base, exp.Literal) and base.this == "10":
            result = call("log10", value.copy())
        elif isinstance(base, exp.Literal) and base.this == "2":
            # e = floor(log2 x) exactly (ln(x) / ln(2) can be off by one), then e + log2(x / 2^e).
            guess = exp.Floor(
                this=exp.Div(this=exp.Ln(this=value.copy()), expression=exp.Ln(this=exp.Literal.number(2)))
            )
            power = call("pow", exp.Literal.number(2), exp.Add(this=guess.copy(), expression=exp.Literal.number(1)))
            below = call("pow", exp.Literal.number(2), guess.copy())
            exponent = exp.paren(
                exp.Add(
                    this=guess,
                    expression=exp.Case()
                    .when(exp.LTE(this=power, expression=value.copy()), exp.Literal.number(1))
                    .when(exp.GT(this=below, expression=value.copy()), exp.Literal.number(-1))
                    .else_(exp.Literal.number(0)),
                )
            )
            # m = x / 2^e in [1, 2): e + log2 m from ln m when m < 1.5, else (e + 1) + log2(m / 2) from
            # ln(m / 2): each logarithm is near 0, where it is accurate to its last bits, and is added
            # to the integer it is closest to (one rounding, as a correctly rounded log2 has).
            # (x / 2^e, not x * 2^-e: 2^1074 overflows, 2^-1074 does not; dividing by 2^e is exact)
            scaled = exp.Div(this=value.copy(), expression=call("pow", exp.Literal.number(2), exponent.copy()))
            ln2 = exp.Ln(this=exp.Literal.number(2))
            result = exp.paren(
                exp.Case()
                .when(
                    exp.LT(this=scaled.copy(), expression=exp.Literal.number(1.5)),
                    exp.Add(
                        this=exponent.copy(), expression=exp.Div(this=exp.Ln(this=scaled.copy()), expression=ln2.copy())
                    ),
                )
                .else_(
                    exp.Add(
                        this=exp.paren(exp.Add(this=exponent, expression=exp.Literal.number(1))),
                        expression=exp.Div(
                            this=exp.Ln(this=exp.Div(this=scaled, expression=exp.Literal.number(2))), expression=ln2
                        ),
                    )
                )
            )
        elif base is None:
            result = exp.Ln(this=value.copy())
        else:
            result = exp.Log(this=base, expression=value.copy())
        return exp.paren(
            exp.Case()
            .when(exp.EQ(this=value.copy(), expression=exp.Literal.number(0)), literal("-Infinity"))
            .when(exp.EQ(this=value.copy(), expression=literal("Infinity")), literal("Infinity"))
            .when(exp.LT(this=value.copy(), expression=exp.Literal.number(0)), literal("NaN"))
            .else_(result)
        )

    def adjust(node: Any) -> Any:
        if isinstance(node, exp.Cast) and isinstance(node.this, exp.Sum) and node.to.this == exp.DataType.Type.DECIMAL:
            # CAST(SUM(x) AS DECIMAL(38, 0)), the released sums: Spark adds BIGINTs as BIGINT and,
            # ANSI mode off, wraps past 2^63 (DuckDB adds them as a 128-bit integer). Summed as
            # DECIMAL instead; beyond 38 digits Spark gives NULL, which the backend refuses.
            summed = node.this
            return exp.Sum(this=exp.Cast(this=summed.this, to=node.to.copy()))
        if isinstance(node, exp.Ln | exp.Log):
            return logarithm(node)
        if isinstance(node, exp.Floor | exp.Ceil) and node.args.get("decimals") is None:
            # Spark's FLOOR and CEIL of a DOUBLE are BIGINTs (NaN -> 0, inf and 1e20 -> 2^63 - 1);
            # DuckDB's stay DOUBLE. NaN, infinities and values beyond 2^63 are their own floor.
            value = node.this
            kept = exp.or_(
                call("isnan", value.copy()),
                exp.GTE(this=exp.Abs(this=value.copy()), expression=exp.Literal.number("9.2E18")),
            )
            return exp.paren(exp.Case().when(kept, value.copy()).else_(type(node)(this=value)))
        if isinstance(node, exp.Sign):
            # DuckDB's sign of NaN is 0; Spark's NaN.
            value = node.this
            return exp.paren(
                exp.Case().when(call("isnan", value.copy()), exp.Literal.number(0)).else_(exp.Sign(this=value))
            )
        if isinstance(node, exp.Left | exp.Right):
            # DuckDB: LEFT(s, -n) is s without its last n characters, RIGHT(s, -n) without its first n;
            # Spark gives ''.
            text, count = node.this, node.expression
            negative = exp.LT(this=count.copy(), expression=exp.Literal.number(0))
            if isinstance(node, exp.Left):
                length = exp.Greatest(
                    this=exp.Add(this=exp.Length(this=text.copy()), expression=count.copy()),
                    expressions=[exp.Literal.number(0)],
                )
                trimmed = exp.Substring(this=text.copy(), start=exp.Literal.number(1), length=length)
            else:
                trimmed = exp.Substring(
                    this=text.copy(), start=exp.Sub(this=exp.Literal.number(1), expression=count.copy())
                )
            return exp.paren(exp.Case().when(negative, trimmed).else_(type(node)(this=text, expression=count)))
        if isinstance(node, exp.Div):
            left, right = double(node.this), double(node.expression)
            quotient = exp.Div(this=left, expression=right)
            if node.find_ancestor(exp.Try) is None:
                return quotient
            # x / 0: NaN for x 0 or NaN, else an infinity with the sign of x times the zero's sign
            # (atan2(-0.0, -1) < 0 < atan2(0.0, -1)).
            signed = exp.EQ(
                this=exp.paren(exp.GT(this=left.copy(), expression=exp.Literal.number(0))),
                expression=exp.paren(
                    exp.GT(
                        this=exp.Anonymous(this="atan2", expressions=[right.copy(), exp.Literal.number(-1)]),
                        expression=exp.Literal.number(0),
                    )
                ),
            )
            ieee = (
                exp.Case()
                .when(exp.Is(this=left.copy(), expression=exp.Null()), exp.Null())
                .when(
                    exp.or_(
                        exp.EQ(this=left.copy(), expression=exp.Literal.number(0)),
                        exp.Anonymous(this="isnan", expressions=[left.copy()]),
                    ),
                    literal("NaN"),
                )
                .when(signed, literal("Infinity"))
                .else_(literal("-Infinity"))
            )
            zero = exp.EQ(this=right.copy(), expression=exp.Literal.number(0))
            return exp.paren(exp.Case().when(zero, ieee).else_(quotient))
        if not isinstance(node, exp.Cast):
            return node
        target = node.to.this
        source = _value_type(node.this, types)
        if target in (exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR) and source == "double":
            return _with_value(_double_text_template(), node.this)
        bounds = _INTEGER_RANGES.get(str(node.to.sql(dialect="spark")).upper())
        if bounds is None or source is None:
            return node
        value = node.this
        if source in ("double", "float"):
            value = exp.Anonymous(this="bround", expressions=[value])
        elif source.startswith("decimal"):
            value = exp.Round(this=value)
        elif source == "string" or source.startswith(("varchar", "char")):
            value = exp.Round(this=exp.Cast(this=value, to=exp.DataType.build("DECIMAL(38, 18)")))
        elif source in _INTEGER_RANGES_BY_NAME:
            low, high = _INTEGER_RANGES[_INTEGER_RANGES_BY_NAME[source]]
            if bounds[0] <= low and high <= bounds[1]:
                return node  # a wider type: nothing to check
        else:
            return node
        inside = exp.and_(
            exp.GTE(this=value.copy(), expression=exp.Literal.number(bounds[0])),
            exp.LT(this=value.copy(), expression=exp.Literal.number(bounds[1])),
        )
        kind = type(node)
        return exp.paren(exp.Case().when(inside, kind(this=value, to=node.to.copy())))

    def failing_condition(node: Any) -> Any:
        """The filter (TRY node) that a failure of ``node`` fails as a whole in DuckDB, or None.

        DuckDB fails a cast it cannot make (text that does not parse, a value out of range) and the
        TRY around the filter then gives NULL for the whole condition; Spark, ANSI mode off, gives
        NULL for the cast alone, which ``x IS NULL``, ``NOT``, ``OR`` or COALESCE could turn into
        TRUE. DuckDB evaluates AND, OR and function arguments eagerly, but the branches of CASE and
        IF, and COALESCE's later arguments, only where they are needed: a cast below them is left
        to give NULL alone (its failure cannot be told from the branch not being taken).
        """
        if not isinstance(node, exp.Cast) or isinstance(node, exp.TryCast):
            return None
        if node.to.this in (exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR):
            return None  # never fails
        parent = node.parent
        while parent is not None:
            if isinstance(parent, exp.Try):
                return parent
            if isinstance(parent, exp.Case | exp.If | exp.Coalesce):
                return None
            parent = parent.parent
        return None

    failures: dict[int, tuple[Any, list[Any]]] = {}  # id(TRY node) -> (the node, failure conditions)
    # Children first: a node's adjusted children are kept when the node itself is replaced.
    for node in reversed(list(tree.walk())):
        condition = failing_condition(node)
        operand = node.this.copy() if condition is not None else None
        replacement = adjust(node)
        if replacement is not node:
            if node is tree:
                tree = replacement
            else:
                node.replace(replacement)
        if condition is not None:
            failed = exp.and_(
                exp.Not(this=exp.Is(this=operand, expression=exp.Null())),
                exp.Is(this=replacement.copy(), expression=exp.Null()),
            )
            failures.setdefault(id(condition), (condition, []))[1].append(failed)
    for condition, failed_casts in failures.values():
        # Any cast failed: the whole condition is NULL (the row is left out), as in DuckDB.
        condition.set("this", exp.paren(exp.Case().when(exp.or_(*failed_casts), exp.Null()).else_(condition.this)))
    return tree


_INTEGER_RANGES_BY_NAME = {"tinyint": "TINYINT", "smallint": "SMALLINT", "int": "INT", "bigint": "BIGINT"}


def make_backend(backend: object) -> Backend:
    """A backend from a name (``"duckdb"``, ``"spark"``) or an object following :class:`Backend`."""
    if backend is None or backend == "duckdb":
        return DuckDBBackend()
    if backend == "spark":
        return SparkBackend()
    if isinstance(backend, Backend):
        return backend
    raise InvalidParameterError("backend", backend, "must be 'duckdb', 'spark' or a dpkit.engine.Backend")
