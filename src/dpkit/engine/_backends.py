"""Backends: where the bounded aggregation runs. One small protocol, two engines, one conformance suite.

A backend registers the private table (and public lookup tables), reports column types (public
metadata, read without touching rows), and runs an :class:`AggregationPlan`, returning exact
integer aggregates. Noise is never drawn here.

DuckDB (embedded) is the default; Spark (``pyspark``) runs the very same SQL text, transpiled
by sqlglot, with the CTEs DuckDB materialises cached as temporary views first, and adjusted where
Spark's semantics differ from DuckDB's (``dpkit.engine._spark_sql``). Both load lazily, with an install
hint when missing.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
import re
import shutil
import tempfile
import threading
import uuid
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from dpkit._errors import InvalidParameterError, first_line
from dpkit._validation import check_integer
from dpkit.engine._aggregation import (
    AggregationPlan,
    AggregationResult,
    conditions_sql,
    decimal_scale,
    derived_sql,
    key_table_columns,
    private_keys_sql,
    render_sql,
    repeated_keys_sql,
    view_steps,
)
from dpkit.engine._csv import TypedCsv, duckdb_select, spark_frame
from dpkit.engine._plan import Derived, Join, canonical
from dpkit.engine._spark_sql import check_spark_keys, duck_column_type, spark_semantics

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


#: The types a derived column may have (DuckDB's name -> Spark's): both engines compute and compare
#: them alike. Others (unsigned and 128-bit integers, dates with times, intervals, blobs, nested
#: values) are refused: cast the expression to one of these.
DERIVED_TYPES = {
    "BOOLEAN": "boolean",
    "TINYINT": "tinyint",
    "SMALLINT": "smallint",
    "INTEGER": "int",
    "BIGINT": "bigint",
    "FLOAT": "float",
    "DOUBLE": "double",
    "DECIMAL": "decimal",
    "VARCHAR": "string",
    "DATE": "date",
}


def _spark_type_name(kind: str) -> str:
    """Spark's name for a derived column's type, named by DuckDB (``DERIVED_TYPES``) or by Spark already."""
    base = kind.split("(")[0].strip().upper()
    if base == "DECIMAL":
        return kind.lower().replace(" ", "")
    return DERIVED_TYPES.get(base, kind.lower())


def _duckdb_decimal(value: Any, scale: int) -> Any:
    """A DECIMAL value of scale ``scale`` as DuckDB hands it to Python: its unscaled integer scaled
    by 10^-scale (``Decimal('2E-10')``, where Spark gives ``Decimal('2.00E-10')``: equal, but
    written otherwise); other values (NULL) unchanged."""
    import decimal

    if not isinstance(value, decimal.Decimal) or not value.is_finite():
        return value
    with decimal.localcontext() as context:
        context.prec = 80  # (38 digits and a scale of up to 38 fit exactly)
        return decimal.Decimal(int(value.scaleb(scale))).scaleb(-scale)


def _duckdb_column(column: str, text: str) -> ColumnInfo:
    """The :class:`ColumnInfo` of a column DuckDB types as ``text``."""
    kind = text.upper()
    # (only scalars: BIGINT[] and STRUCT(a BIGINT) start with a numeric type's name too)
    scalar = not kind.endswith("]") and not kind.startswith(("STRUCT", "MAP", "UNION"))
    integer = scalar and kind.split("(")[0] in _DUCKDB_INTEGER
    return ColumnInfo(column, text, integer or (scalar and kind.startswith(_DUCKDB_REAL)), integer)


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

    def register(self, name: str, source: object, kind: str, *, public: bool = False) -> None:
        """Make ``source`` (a path or a frame, per ``kind``) queryable as table ``name``, replacing any
        table of that name. A source some of whose rows could not be read later is refused here (a
        read failing mid-query would fail a release after its debit, because of those rows).
        ``public``: the rows are public; a backend may read them whole now (and keep them).
        """

    def schema(self, name: str) -> dict[str, ColumnInfo]:
        """Column names and types of table ``name`` (metadata only; no rows are read)."""

    def run(self, plan: AggregationPlan) -> AggregationResult:
        """Run the bounded aggregation; exact integer results."""

    def has_repeated_keys(self, table: str, columns: tuple[str, ...]) -> bool:
        """Whether a (public) table holds some non-NULL combination of ``columns`` twice."""

    def derived_schema(
        self, table: str, joins: tuple[Join, ...], derived: tuple[Derived, ...]
    ) -> dict[str, ColumnInfo]:
        """Name and type of each derived column over ``table`` and its ``joins`` (binding only, no rows
        read); a type outside :data:`DERIVED_TYPES` or an expression that does not bind is refused by name."""


def _collect(rows: list[tuple[Any, ...]], plan: AggregationPlan) -> AggregationResult:
    width = len(plan.groups)
    if plan.indexed_keys:  # the first column is the public key's rank in plan.key_order
        public = plan.key_order
        rows = [(*public[int(row[0])], *row[1:]) for row in rows]
    if plan.histogram is not None:
        index: dict[tuple[Any, ...], int] = {}
        histograms: list[dict[int, int]] = []
        keys: list[tuple[Any, ...]] = []
        for row in rows:
            key = tuple(row[:width])
            if canonical(key) not in index:  # (each NaN DuckDB returns is a new object)
                index[canonical(key)] = len(histograms)
                histograms.append({})
                keys.append(key)
            histograms[index[canonical(key)]][int(row[width])] = int(row[width + 1])
        return AggregationResult(keys, {}, histograms)
    names = ["rows", "persons"] + [f"m{i}" for i in range(len(plan.moments))]
    columns: dict[str, list[int]] = {name: [] for name in names}
    keys = []  # (one row per group: no lookup here)
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
#: Unsigned integer types and the signed type each is read as (Spark's reading of them too).
_DUCKDB_WIDER = {"UTINYINT": "SMALLINT", "USMALLINT": "INTEGER", "UINTEGER": "BIGINT", "UBIGINT": "DECIMAL(20, 0)"}


#: Instants DuckDB's TIMESTAMP holds, in microseconds since 1970 (years -288,000 to 294,000, inside
#: its range of about -290,308 to 294,247). Coarser units reach beyond it.
_TIMESTAMP_US = (-9_150_000_000_000_000_000, 9_220_000_000_000_000_000)
_PER_US = {"s": 10**6, "ms": 10**3}
_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}


def _temporal_limits(kind: Any) -> tuple[int, int] | None:
    """The values (as int64 in the type's unit) DuckDB can read for Arrow type ``kind``, or None when all fit."""
    import pyarrow as pa

    if (pa.types.is_timestamp(kind) or pa.types.is_duration(kind)) and kind.unit in _PER_US:
        scale = _PER_US[kind.unit]
        return -(-_TIMESTAMP_US[0] // scale), _TIMESTAMP_US[1] // scale
    if pa.types.is_time(kind):  # a time of day: DuckDB's TIME stops before 24:00
        return 0, _DAY[kind.unit] - 1
    if pa.types.is_date64(kind):  # milliseconds; DuckDB's DATE is 32-bit days
        return -(2**31 - 2) * _DAY["ms"], (2**31 - 2) * _DAY["ms"]
    return None


def _nulled_outside(column: Any, limits: tuple[int, int]) -> Any:
    """``column`` with its values outside ``limits`` NULL, and 0 under every NULL.

    DuckDB converts the stored value under a NULL too (a duration there still fails), so the
    values are replaced before the NULLs are set.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    values = pc.cast(column, pa.int64() if column.type.bit_width == 64 else pa.int32())
    outside = pc.fill_null(pc.or_(pc.less(values, limits[0]), pc.greater(values, limits[1])), False)
    zero = pa.scalar(0, values.type)
    cleaned = pc.cast(pc.fill_null(pc.if_else(outside, zero, values), zero), column.type)
    return pc.if_else(pc.and_(pc.invert(outside), pc.is_valid(column)), cleaned, pa.scalar(None, column.type))


def _within_duckdb_ranges(source: Any, kind: str) -> Any:
    """``source`` with date and time values DuckDB cannot hold set to NULL (the rest unchanged).

    pandas, Arrow and Polars keep instants in seconds or milliseconds far beyond DuckDB's
    microsecond TIMESTAMP (and times of day past 24:00); DuckDB reads them, but casting one to
    text (as private keys are ranked) raises an error TRY cannot catch and invalidates the
    connection, and scanning some fails mid-query. One person's value would then make a release
    fail after its debit. Each such value is NULL instead, a change to that row alone. Frames
    without such column types are returned as they are (no copy).
    """
    if kind == "pandas":
        return _pandas_within_ranges(source)
    import pyarrow as pa

    table = source.to_arrow() if kind == "polars" else source
    if not isinstance(table, pa.Table):
        return source
    for field in table.schema:
        _refuse_far_inside(field.name, field.type, table.column(field.name))
    fixes = {i: limits for i, field in enumerate(table.schema) if (limits := _temporal_limits(field.type))}
    intervals = [i for i, field in enumerate(table.schema) if pa.types.is_interval(field.type)]
    if not fixes and not intervals:
        return source
    for i, limits in fixes.items():
        table = table.set_column(i, table.schema.field(i), _nulled_outside(table.column(i), limits))
    for i in intervals:
        table = table.set_column(i, table.schema.field(i), _intervals_within_timedelta(table.column(i)))
    return table


def _refuse_far_inside(name: str, kind: Any, column: Any) -> None:
    """Refuse a nested column (dictionary, struct, list, map) holding a date or time DuckDB cannot hold.

    The values inside are not set to NULL as top-level ones are: such a column is refused, before
    any ledger exists. (DuckDB converts a dictionary whole, and a value under a NULL too.)
    """
    import pyarrow as pa

    nested = pa.types.is_dictionary(kind) or pa.types.is_nested(kind)
    if nested and _far_inside(column, kind):
        raise InvalidParameterError(
            "source",
            f"column {name!r} ({kind})",
            "holds, inside its values, a date or time DuckDB cannot hold (an instant or duration in s or ms "
            "past its microsecond range, a time past 24:00, a date64 past its dates): write such values as NULL",
        )


def _far_inside(array: Any, kind: Any) -> bool:
    """Whether Arrow ``array`` of type ``kind`` stores, at any depth, a value outside :func:`_temporal_limits`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.ChunkedArray):
        return any(_far_inside(chunk, kind) for chunk in array.chunks)
    if pa.types.is_dictionary(kind):
        return _far_inside(array.dictionary, kind.value_type)
    if pa.types.is_struct(kind):
        return any(_far_inside(array.field(i), kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _far_inside(array.keys, kind.key_type) or _far_inside(array.items, kind.item_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _far_inside(array.values, kind.value_type)  # (every value stored, under a NULL too)
    if pa.types.is_nested(kind):  # list views, unions...: DuckDB's own reader decides
        return False
    limits = _temporal_limits(kind)
    if limits is None or len(array) == 0:
        return False
    width = pa.int64() if kind.bit_width == 64 else pa.int32()
    stored = pa.Array.from_buffers(width, len(array), [None, array.buffers()[1]], offset=array.offset)
    return bool(pc.any(pc.or_(pc.less(stored, limits[0]), pc.greater(stored, limits[1]))).as_py())


#: DuckDB returns an INTERVAL to Python as a timedelta of months * 30 + days days, which overflows
#: past 999,999,999 days (a private group key is returned so).
_INTERVAL_DAYS = 999_000_000


def _intervals_within_timedelta(column: Any) -> Any:
    """Arrow month_day_nano ``column`` with the intervals a Python timedelta cannot hold as NULL (in Python:
    a rare type)."""
    import pyarrow as pa

    def fits(value: Any) -> bool:
        months, days, nanoseconds = value
        return abs(months) * 31 + abs(days) + abs(nanoseconds) // 86_400_000_000_000 <= _INTERVAL_DAYS

    values = column.to_pylist()
    if all(value is None or fits(value) for value in values):
        return column
    return pa.array([value if value is None or fits(value) else None for value in values], column.type)


def _pandas_within_ranges(frame: Any) -> Any:
    """:func:`_within_duckdb_ranges` for a pandas frame: datetime64 / timedelta64 in s or ms, as NaT."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    copy = None
    for position, dtype in enumerate(frame.dtypes):
        column = frame.iloc[:, position]
        if isinstance(dtype, pd.ArrowDtype):  # pyarrow-backed: as an Arrow column
            arrow = column.array.__arrow_array__()
            _refuse_far_inside(str(frame.columns[position]), arrow.type, arrow)
            limits = _temporal_limits(arrow.type)
            if limits is not None and _far_inside(arrow, arrow.type):
                copy = frame.copy(deep=False) if copy is None else copy
                cleaned = pd.arrays.ArrowExtensionArray(_nulled_outside(arrow, limits))
                copy.isetitem(position, pd.Series(cleaned, index=column.index, name=column.name))
            continue
        if isinstance(dtype, pd.CategoricalDtype):  # categories of dates and times: as a dictionary
            encoded = pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array(dtype.categories))
            _refuse_far_inside(str(frame.columns[position]), encoded.type, encoded)
            continue
        if getattr(dtype, "kind", None) not in ("M", "m"):
            continue
        unit = getattr(dtype, "unit", None) or np.datetime_data(dtype)[0]
        if unit not in _PER_US:
            continue
        limits = _temporal_limits(pa.timestamp(unit) if dtype.kind == "M" else pa.duration(unit))
        if limits is None:  # pragma: no cover - every s / ms type has limits
            continue
        ticks = column.array.asi8  # NaT is the int64 minimum: excluded by ``present``
        outside = ~column.isna().to_numpy() & ((ticks < limits[0]) | (ticks > limits[1]))
        if outside.any():
            copy = frame.copy(deep=False) if copy is None else copy
            copy.isetitem(position, column.mask(outside))
    return frame if copy is None else copy


def _keep_in_lists_inside_try(connection: Any) -> None:
    """Turn off DuckDB's IN-clause rewriter on ``connection`` (other disabled optimizers stay off).

    The rewriter turns ``expr IN (5 or more constants)`` into a MARK join on ``expr``, outside the
    ``TRY(...)`` that wraps every WHERE condition: ``CAST(s AS INTEGER) IN (0, 1, 2, 3, 4)`` then
    raises on one row whose ``s`` is not a number (DuckDB 2.0, pandas, Arrow and Polars sources),
    and a query failing after its debit because of one row would reveal that row. Without the
    rewriter, IN is evaluated per row, inside TRY.
    """
    (current,) = connection.execute("SELECT current_setting('disabled_optimizers')").fetchone()
    names = [name.strip() for name in str(current or "").split(",") if name.strip()]
    if "in_clause" not in names:
        connection.execute(f"SET disabled_optimizers = '{','.join([*names, 'in_clause'])}'")


def _refuse_unreadable_arrow_types(table: Any) -> None:
    """Refuse, naming the column, an Arrow type DuckDB cannot read (half floats, 256-bit decimals)."""
    import pyarrow as pa

    def unreadable(kind: Any) -> str | None:
        if pa.types.is_float16(kind):
            return "float16 (half precision), which DuckDB cannot read: cast it to float32"
        if pa.types.is_decimal256(kind):
            return f"{kind} (a 256-bit decimal), which DuckDB cannot read: cast it to decimal128 (precision <= 38)"
        inner = [kind.field(i).type for i in range(kind.num_fields)] if hasattr(kind, "num_fields") else []
        inner += [getattr(kind, name) for name in ("value_type", "index_type") if hasattr(kind, name)]
        return next((reason for reason in map(unreadable, inner) if reason), None)

    schema = getattr(table, "schema", None)
    for field in schema if isinstance(schema, pa.Schema) else []:
        reason = unreadable(field.type)
        if reason is not None:
            raise InvalidParameterError("source", f"column {field.name!r}", f"is {reason}")


#: Size units DuckDB reads in a memory limit: decimal (KB = 1000 bytes) and binary (KiB = 1024).
_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE_PATTERN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*", re.IGNORECASE)
#: The smallest memory limit a DuckDB session takes. Below it the per-bin table of a median (about
#: 64 MB on millions of rows) can run out of memory after the query's debit, which is kept.
MIN_MEMORY_LIMIT = 64 * 10**6


def _remove_spill_directory(path: Path, owner: int) -> None:
    """Delete a backend's spill directory, from the process that made it only (a forked child
    that exits must not delete the directory its parent's database still writes to)."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def _check_spill_directory(value: object) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike) or not os.path.isdir(value):
        raise InvalidParameterError("spill_directory", value, "must be an existing directory (or None)")
    return Path(value)


def memory_limit_bytes(value: object) -> int:
    """``value`` (bytes as an int, or text such as ``"150MB"`` or ``"1.5 GiB"``) in bytes, checked.

    >>> memory_limit_bytes("150MB"), memory_limit_bytes("1 GiB"), memory_limit_bytes(2**27)
    (150000000, 1073741824, 134217728)
    """
    allowed = (
        f"must be a size of at least {MIN_MEMORY_LIMIT // 10**6} MB: bytes as an int, or text "
        "such as '150MB' or '2GiB' (units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
    )
    if isinstance(value, bool):
        raise InvalidParameterError("memory_limit", value, allowed)
    if isinstance(value, int):
        size = value
    elif isinstance(value, str) and (match := _SIZE_PATTERN.fullmatch(value)) is not None:
        unit = _SIZE_UNITS.get(match.group(2).lower())
        if unit is None:
            raise InvalidParameterError("memory_limit", value, allowed)
        size = int(Fraction(match.group(1)) * unit)
    else:
        raise InvalidParameterError("memory_limit", value, allowed)
    if size < MIN_MEMORY_LIMIT:
        raise InvalidParameterError("memory_limit", value, allowed)
    return size


class DuckDBBackend:
    """DuckDB, embedded: Parquet, CSV, pandas, Polars or Arrow in; the aggregation runs as SQL inside DuckDB.

    Parquet and CSV files are scanned in place (views), so data larger than memory streams.

    - ``connection``: a DuckDB connection to run on (default: a new in-memory database);
    - ``threads``: DuckDB's worker threads (default: one per core);
    - ``memory_limit``: the most memory DuckDB may hold (bytes, or text such as ``"150MB"``; at
      least 64 MB). Past it DuckDB writes intermediate tables to disk: a query runs slower but
      completes, and the process's peak memory stays near the limit plus the interpreter's own;
    - ``spill_directory``: where DuckDB writes them. Those files hold rows of the private table:
      for a connection it creates, the backend makes a fresh directory only the current user can
      read (inside the system's temporary directory, ``TMPDIR``) and deletes it when the backend
      is closed or collected. Give a directory to spill elsewhere (it must exist).

    The settings apply to the whole DuckDB database behind ``connection``.

    >>> backend = DuckDBBackend(memory_limit="150MB", threads=1)
    >>> backend.memory_limit
    150000000
    >>> backend.close()
    """

    name = "duckdb"

    def __init__(
        self,
        connection: Any = None,
        *,
        threads: int | None = None,
        memory_limit: int | str | None = None,
        spill_directory: str | os.PathLike[str] | None = None,
    ) -> None:
        checked_threads = None if threads is None else check_integer("threads", threads, minimum=1)
        self.memory_limit = None if memory_limit is None else memory_limit_bytes(memory_limit)
        spill = _check_spill_directory(spill_directory)
        duckdb = _require("duckdb", "engine")
        owned = connection is None
        if connection is None:
            connection = duckdb.connect(":memory:")
            # Track progress for progress() but never print DuckDB's own bar on stdout (it would
            # mix with the caller's output, e.g. ``dpkit query --json``).
            connection.execute("SET enable_progress_bar = true")
            connection.execute("SET enable_progress_bar_print = false")
            # TIMESTAMP WITH TIME ZONE values are read (hour(ts), CAST(ts AS DATE), their text) in
            # UTC, whatever the host's zone: the same query keeps the same rows on every machine.
            connection.execute("SET TimeZone = 'UTC'")
        self._connection = connection
        #: table name (case-folded) -> the name its source is registered under, where the table is a
        #: view over it (see ``_register_canonical``)
        self._raw: dict[str, str] = {}
        _keep_in_lists_inside_try(connection)
        if checked_threads is not None:
            self._connection.execute(f"SET threads = {checked_threads}")
        if spill is None and owned:
            spill = Path(tempfile.mkdtemp(prefix="dpkit-spill-"))  # mode 0700
            self._cleanup = weakref.finalize(self, _remove_spill_directory, spill, os.getpid())
        if spill is not None:
            self._connection.execute("SET temp_directory = ?", [str(spill)])
        if self.memory_limit is not None:
            self._connection.execute(f"SET memory_limit = '{self.memory_limit}B'")

    def close(self) -> None:
        """Close the connection this backend created (a caller's connection stays open) and
        delete the spill directory it made."""
        cleanup = getattr(self, "_cleanup", None)
        if cleanup is not None:
            with contextlib.suppress(Exception):
                self._connection.close()
            cleanup()

    def register(self, name: str, source: object, kind: str, *, public: bool = False) -> None:
        """Register ``source`` as table ``name`` (a view over the file or frame; a public table is
        copied into DuckDB whole, so that it is read once, here, and never changes afterwards)."""
        from dpkit.engine._aggregation import _quote

        self._forget(name)
        if not public:
            self._register_canonical(name, source, kind)
            return
        staging = f"__dpkit_public_{uuid.uuid4().hex}"
        self._register_canonical(staging, source, kind)
        try:
            self._connection.execute(f"CREATE TEMP TABLE {_quote(name)} AS SELECT * FROM {_quote(staging)}")
        finally:
            self._forget(staging)

    def _register_canonical(self, name: str, source: object, kind: str) -> None:
        """:meth:`_register`, with INTERVAL and unsigned integer columns read in one canonical form.

        INTERVAL: a number of microseconds. DuckDB holds an interval as months, days and
        microseconds, and compares them normalised ('1 day' = '24:00:00', '1 month' = '30 days')
        but shows each row's own form: a group of equal intervals would show (and its salted rank
        would hash) the form of whichever row came first, so one person's row could reorder every
        group. pandas also gives days where Arrow gives microseconds. An interval beyond the
        microsecond range (about 292,000 years) is NULL.

        Unsigned integers: the next signed type that holds them (UTINYINT as SMALLINT, ..., UBIGINT
        as DECIMAL(20, 0)), as Spark reads them. DuckDB keeps an unsigned type through arithmetic,
        so ``age + 1`` on 255 or ``-age`` overflowed, and the condition's TRY silently dropped the row.
        """
        from dpkit.engine._aggregation import _quote

        self._register(name, source, kind)
        replaced = {}
        for column, info in self.schema(name).items():
            if info.type == "INTERVAL":
                replaced[column] = f"TRY(to_microseconds(epoch_us({_quote(column)})))"
            elif info.type in _DUCKDB_WIDER:
                replaced[column] = f"CAST({_quote(column)} AS {_DUCKDB_WIDER[info.type]})"
        if not replaced:
            return
        raw = f"__dpkit_raw_{uuid.uuid4().hex}"
        self._forget(name)
        self._register(raw, source, kind)
        self._raw[name.casefold()] = raw
        canonical = ", ".join(f"{expression} AS {_quote(column)}" for column, expression in replaced.items())
        self._connection.execute(
            f"CREATE TEMP VIEW {_quote(name)} AS SELECT * REPLACE ({canonical}) FROM {_quote(raw)}"
        )

    def _forget(self, name: str) -> None:
        """Drop whatever table ``name`` is now (a registered frame shadows a view of the same name)."""
        from dpkit.engine._aggregation import _quote

        with contextlib.suppress(Exception):
            self._connection.unregister(name)
        raw = self._raw.pop(name.casefold(), None)
        for statement in ("DROP VIEW IF EXISTS", "DROP TABLE IF EXISTS"):
            for schema in ("temp", "main"):
                with contextlib.suppress(Exception):  # (the name is the other kind of object there)
                    self._connection.execute(f"{statement} {schema}.{_quote(name)}")
        if raw is not None:
            self._forget(raw)

    def _register(self, name: str, source: object, kind: str) -> None:
        from dpkit.engine._aggregation import _literal, _quote

        if kind == "csv" and isinstance(source, TypedCsv):  # declared types: nothing inferred from the rows
            self._connection.execute(f"CREATE OR REPLACE VIEW {_quote(name)} AS {duckdb_select(source)}")
        elif kind in ("parquet", "csv"):
            path = os.fspath(source)  # type: ignore[call-overload]
            reader = "read_parquet" if kind == "parquet" else "read_csv_auto"
            # Inferred CSV: the types and dialect come from a sample of the rows (at bind time, in
            # check() too); a later line that does not fit them (text in a BIGINT column, a field
            # too many, bytes that are not UTF-8) would make the reader raise mid-query, after the
            # debit, because of that one line. ignore_errors leaves such a line out instead (same
            # types, no measurable cost).
            options = ", ignore_errors = true" if kind == "csv" else ""
            # Parquet writers leave NaN out of a column's min/max (as the format asks), and DuckDB
            # 2.0 by default trusts them: `x = 'NaN'::DOUBLE`, `x > max`, even isnan(x) inside the
            # clamping were folded to false, so NaN rows were dropped from WHERE or clamped to the
            # upper bound instead of the fill value, unlike the same table from Arrow or pandas
            # (duckdb/duckdb#25521). can_have_nan keeps NaN possible outside min/max.
            if kind == "parquet":
                options = ", can_have_nan = true"
            if kind == "parquet":
                self._refuse_mixed_parquet_schemas(path)
            self._connection.execute(
                f"CREATE OR REPLACE VIEW {_quote(name)} AS SELECT * FROM {reader}({_literal(path)}{options})"
            )
            if kind == "parquet":
                self._refuse_unreadable_times(name, path)
        elif kind in ("pandas", "arrow", "polars"):
            if kind == "arrow":
                _refuse_unreadable_arrow_types(source)
            self._connection.register(name, _within_duckdb_ranges(source, kind))
            if kind == "pandas":
                self._refuse_mixed_objects(name, source)
        else:  # pragma: no cover - guarded by Session
            raise InvalidParameterError("kind", kind, "must be parquet, csv, pandas, arrow or polars for DuckDB")

    def _refuse_mixed_parquet_schemas(self, path: str) -> None:
        """Refuse a Parquet glob whose files do not all have the same columns and types.

        DuckDB takes the schema from the first file; a later file storing a column with another
        type (or without it) fails the scan when a query reaches it, which row-group pruning can make
        depend on the rows. Only the files' metadata is read.
        """
        from dpkit.engine._aggregation import _literal

        signatures = self._connection.execute(
            "SELECT signature, min(file_name) FROM (SELECT file_name, string_agg(name || ' ' || "
            "coalesce(duckdb_type, type, '') || ' ' || coalesce(num_children, 0), ', ' ORDER BY column_id) "
            f"AS signature FROM parquet_schema({_literal(path)}) WHERE column_id > 0 GROUP BY file_name) "
            "GROUP BY signature ORDER BY 2"
        ).fetchall()
        if len(signatures) > 1:
            first, second = (str(row[1]) for row in signatures[:2])
            raise InvalidParameterError(
                "source",
                path,
                f"its files do not all have the same columns and types ({first!r} and {second!r} differ); "
                "one schema is needed, or a file's rows would fail queries that read them",
            )

    def _refuse_mixed_objects(self, name: str, frame: Any) -> None:
        """Refuse a pandas frame with an object column DuckDB cannot read whole as the type it gave it.

        DuckDB types an object column from a sample of its values; a value of another kind further
        on (a bool among ints, a str among dates) makes every scan of the column raise, after the
        debit. Object columns are read once here.
        """
        import numpy as np

        from dpkit.engine._aggregation import _quote

        objects = [str(c) for c, dtype in zip(frame.columns, frame.dtypes, strict=True) if dtype is np.dtype(object)]
        for column in objects:
            try:
                self._connection.execute(
                    f"SELECT count(CAST({_quote(column)} AS VARCHAR)) FROM {_quote(name)}"
                ).fetchall()
            except Exception:  # noqa: BLE001 - whatever the conversion raised
                self._forget(name)
                raise InvalidParameterError(
                    "source",
                    f"<{type(frame).__name__}>",
                    f"object column {column!r} mixes values DuckDB cannot read as one type (it typed the column "
                    "from a sample); give the column one type (e.g. frame[column].astype(...))",
                ) from None

    def _refuse_unreadable_times(self, name: str, path: str) -> None:
        """Refuse a Parquet source whose date or time columns hold a value DuckDB cannot read.

        A Parquet TIMESTAMP in milliseconds past DuckDB's range, or a TIME past 24:00, makes the
        scan raise whenever a query reads the column: after the debit, because of one row. Such
        columns are read once here, on a connection of their own, before the session exists.
        """
        import duckdb

        from dpkit.engine._aggregation import _literal, _quote

        schema = self.schema(name)
        words = ("TIMESTAMP", "TIME", "DATE", "INTERVAL")  # (also inside a STRUCT, a LIST or a MAP)
        temporal = [c for c, info in schema.items() if any(word in info.type for word in words)]
        if not temporal:
            return
        probe = duckdb.connect(":memory:")
        try:
            for column in temporal:
                quoted = _quote(column)
                read = f"count(CAST({quoted} AS VARCHAR))"
                if schema[column].type == "INTERVAL":  # and the longest must convert to a Python timedelta
                    read += f", max_by({quoted}, abs(epoch({quoted})))"
                try:
                    probe.execute(f"SELECT {read} FROM read_parquet({_literal(path)})").fetchall()
                except (duckdb.Error, OverflowError):
                    raise InvalidParameterError(
                        "source",
                        path,
                        f"column {column!r} holds a date or time DuckDB cannot read (past its range, a time past "
                        "24:00, or an interval past 999,000,000 days): one such row would fail every query "
                        "reading it; write those values as NULL",
                    ) from None
        finally:
            probe.close()

    def schema(self, name: str) -> dict[str, ColumnInfo]:
        from dpkit.engine._aggregation import _quote

        rows = self._connection.execute(f"DESCRIBE SELECT * FROM {_quote(name)}").fetchall()
        # DuckDB writes type names in capitals; ENUM labels and STRUCT field names keep their own case.
        return {str(row[0]): _duckdb_column(str(row[0]), str(row[1])) for row in rows}

    def derived_schema(
        self, table: str, joins: tuple[Join, ...], derived: tuple[Derived, ...]
    ) -> dict[str, ColumnInfo]:
        import duckdb

        try:
            rows = self._connection.execute("DESCRIBE " + derived_sql(table, joins, derived)).fetchall()
        except duckdb.Error as error:
            # (binding only: the message names columns and types, never a row's value)
            names = ", ".join(d.name for d in derived)
            raise InvalidParameterError(
                "derived", names, f"the derived columns do not bind on DuckDB: {first_line(error)}"
            ) from None
        result = {}
        for column, row in zip(derived, rows, strict=True):
            text = str(row[1])
            if text.split("(")[0].upper() not in DERIVED_TYPES:
                raise InvalidParameterError(
                    column.name,
                    column.expression,
                    f"a derived column's value is {text}; it must be one of {', '.join(DERIVED_TYPES)} "
                    "(CAST the expression to one of them)",
                )
            result[column.name] = _duckdb_column(column.name, text)
        return result

    def run(self, plan: AggregationPlan) -> AggregationResult:
        with self._key_table(plan, private=True) as key_table:
            sql = render_sql(plan, key_table)
            nanos = [] if plan.indexed_keys or not plan.groups else self._nanosecond_keys(sql, len(plan.groups))
            if nanos:
                from dpkit.engine._aggregation import _quote

                text = ", ".join(f"CAST({_quote(name)} AS VARCHAR) AS {_quote(name)}" for _, name in nanos)
                sql = f"SELECT * REPLACE ({text}) FROM ({sql}) AS __ns"
            rows = self._connection.execute(sql).fetchall()
        if nanos:
            import pandas as pd

            positions = [position for position, _ in nanos]
            rows = [
                tuple(pd.Timestamp(v) if i in positions and v is not None else v for i, v in enumerate(row))
                for row in rows
            ]
        return _collect(rows, plan)

    def _nanosecond_keys(self, sql: str, width: int) -> list[tuple[int, str]]:
        """The group key columns of ``sql`` typed TIMESTAMP_NS (position, name): DuckDB hands them to
        Python as datetimes, cut to the microsecond, so two groups a nanosecond apart showed one key.
        They are read as text and parsed to pandas Timestamps (binding only: no rows read here)."""
        described = self._connection.execute("DESCRIBE " + sql).fetchall()[:width]
        return [(i, str(row[0])) for i, row in enumerate(described) if str(row[1]).upper() == "TIMESTAMP_NS"]

    def check(self, plan: AggregationPlan) -> None:
        """Bind and plan ``plan`` without reading rows (EXPLAIN); raises what running it would on schema errors."""
        with self._key_table(plan) as key_table:
            sql = render_sql(plan, key_table)
            self._connection.execute("EXPLAIN " + sql).fetchall()
            self._check_conditions(plan)
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

    def _check_conditions(self, plan: AggregationPlan) -> None:
        """Refuse a WHERE condition that is not BOOLEAN: DuckDB would cast its value to BOOLEAN
        outside the condition's TRY, so one row's value (a text other than 'true' or 'false', any
        BLOB or LIST) would fail the query after its debit."""
        sql = conditions_sql(plan)
        if sql is None:
            return
        rows = self._connection.execute("DESCRIBE " + sql).fetchall()
        for condition, row in zip(plan.where, rows, strict=True):
            kind = str(row[1]).upper()
            if kind not in ("BOOLEAN", '"NULL"', "NULL"):
                raise TypeError(
                    f"the condition {condition} is {kind}, not BOOLEAN (compare it: x = ..., x IS NOT NULL)"
                )

    @contextlib.contextmanager
    def _key_table(self, plan: AggregationPlan, *, private: bool = False) -> Iterator[str | None]:
        """A long public key list registered as an Arrow table for one statement (None: use VALUES).

        ``private``: a plan's private groups present (``private_keys_sql``), computed into a
        temporary table first (this reads the data: only when running). DuckDB then knows the
        list's size; as a CTE it is estimated at the table's row count, and the join of the rows of
        people in several groups to it was built on the wrong side (all those rows in a hash table).
        """
        ranking = private_keys_sql(plan) if private else None
        if ranking is not None:
            from dpkit.engine._aggregation import _quote

            name = f"__dpkit_keys_{uuid.uuid4().hex}"
            try:
                self._connection.execute(f"CREATE TEMP TABLE {_quote(name)} AS {ranking}")
                yield name
            finally:
                with contextlib.suppress(Exception):  # (never hides the query's own error)
                    self._connection.execute(f"DROP TABLE IF EXISTS temp.main.{_quote(name)}")
            return
        columns = key_table_columns(plan)
        table = None
        if columns is not None:
            import pyarrow as pa

            try:
                table = pa.table(
                    {
                        name: values if isinstance(values, pa.Array) else pa.array(values)
                        for name, values in columns.items()
                    }
                )
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


#: Spark settings while dpkit's queries run (the caller's are restored after): ANSI mode off (see
#: ``render_sql``), dates and times with a zone read in UTC, as DuckDB's TimeZone is set, and
#: DECIMAL arithmetic without rounding.
_SPARK_SETTINGS = {
    "spark.sql.ansi.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    # DECIMAL arithmetic past 38 digits keeps its scale (and gives NULL where the value does not fit),
    # as DuckDB's does: Spark would otherwise round DECIMAL(38, 20) products to 6 decimal places.
    "spark.sql.decimalOperations.allowPrecisionLoss": "false",
    # Spark's SQL parser (ANTLR) keeps a cache of parsing decisions that only grows; the engine's long,
    # always different SQL grew it by about 2 MB a query, until the driver ran out of heap (after 267
    # queries of a random-expression run with the default 1 GB driver). Spark flushes it past 10 % of the
    # driver's memory with these settings (Spark 4.1 and later; an older Spark keeps them as unused keys).
    "spark.sql.parser.manageParserCaches": "true",
    "spark.sql.parser.parserDfaCacheFlushRatio": "10",
    # Parquet min/max statistics leave NaN out; with filters pushed into the Parquet reader, Spark
    # skipped the row groups holding the NaN rows of `x = CAST('NaN' AS DOUBLE)` or `x > max`.
    "spark.sql.parquet.filterPushdown": "false",
}


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

    def register(self, name: str, source: object, kind: str, *, public: bool = False) -> None:
        """Register ``source`` as table ``name`` (a temporary view; a public table is read whole now and
        kept, so that it is read once, here)."""
        reader = self._spark.read
        if kind == "parquet":
            path = str(Path(os.fspath(source)))  # type: ignore[call-overload]
            frame = reader.parquet(path)
            _refuse_mixed_parquet_schemas(reader, path, frame)
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
        if public:
            frame = frame.localCheckpoint(eager=True)
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
        the session's time zone; ``to_pandas`` loses NaN and Polars dates.) Date and time values
        DuckDB cannot hold are NULL here too (:func:`_within_duckdb_ranges`), so both engines read
        the same rows; Spark's import would otherwise refuse the whole frame.
        """
        source = _within_duckdb_ranges(source, kind)
        if kind == "polars" and not hasattr(source, "to_arrow"):  # an Arrow table once values were nulled
            kind = "arrow"
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
        """Spark type per column name (case-folded) of the tables ``plan`` reads, per group alias ``__g<i>``
        and for the person alias ``__pid``."""
        types: dict[str, str] = {}
        for table in (*(join.table for join in reversed(plan.joins)), plan.table):
            entry = self._tables.get(table.casefold())
            if entry is not None:
                types.update({column.casefold(): kind for column, kind in entry[1].items()})
        types.update(
            {
                d.name.casefold(): _spark_type_name(kind)
                for d, kind in zip(plan.derived, plan.derived_types, strict=True)
            }
        )
        for i, group in enumerate(plan.groups):
            if isinstance(group, str) and group.casefold() in types:
                types[f"__g{i}"] = types[group.casefold()]
        if plan.person is not None and plan.person.casefold() in types:
            types["__pid"] = types[plan.person.casefold()]
        return types

    def _steps(self, sql: str, types: dict[str, str]) -> tuple[list[tuple[str, str, bool]], str]:
        """``sql`` as Spark steps (views, then the final query), written with DuckDB's semantics for
        columns of ``types`` (:meth:`_column_types`)."""
        rewrite = functools.partial(spark_semantics, types=types)
        return view_steps(sql, "spark", f"__dpkit_{uuid.uuid4().hex}_", tables=self._views(), rewrite=rewrite)

    def run(self, plan: AggregationPlan) -> AggregationResult:
        # ANSI mode off for this query: a failing cast or overflow in a WHERE condition gives NULL
        # (the row is excluded) instead of an error that one person's rows could trigger.
        # The CTEs DuckDB materialises (the per-person table, the people in several groups, the
        # private key list) are cached here as temporary views first: Spark would otherwise compute
        # each once per reference, and it sizes (and broadcasts) a cached view by its real rows.
        types = self._column_types(plan)
        check_spark_keys(plan, types)
        with self._key_table(plan) as key_table:
            steps, final = self._steps(render_sql(plan, key_table, rank_by_window=True), types)
            with _SPARK_RUN_LOCK:  # the ANSI flag is per SparkSession: sessions sharing one take turns
                rows = self._run_steps(steps, final, execute=True)
        # Group keys come back as Spark gives them (a DECIMAL key stays a Decimal, as from DuckDB, and is
        # written as DuckDB writes it: see _duckdb_decimal); _collect turns the aggregates (DECIMAL(38, 0)
        # sums) into integers.
        result = [tuple(row) for row in rows]
        if not plan.indexed_keys:
            found = {i: decimal_scale(types.get(f"__g{i}", "")) for i in range(len(plan.groups))}
            scales = {i: scale for i, scale in found.items() if scale is not None}
            if scales:
                result = [
                    tuple(_duckdb_decimal(v, scales[i]) if i in scales else v for i, v in enumerate(row))
                    for row in result
                ]
        return _collect(result, plan)

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

                table = pa.table(
                    {
                        name: values if isinstance(values, pa.Array) else pa.array(values)
                        for name, values in columns.items()
                    }
                )
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
        """Register each step as a view (cached and computed when ``execute``; an empty one becomes an
        empty relation), then run the final query (``execute``) or only analyse it; ``_SPARK_SETTINGS``
        throughout (ANSI mode off, UTC), as the query runs. Needs the lock."""
        views: list[str] = []
        previous = {key: self._spark.conf.get(key, None) for key in _SPARK_SETTINGS}
        for key, value in _SPARK_SETTINGS.items():
            self._spark.conf.set(key, value)
        try:
            for view, text, cache in steps:
                frame = self._spark.sql(text)
                frame.createOrReplaceTempView(view)
                views.append(view)
                if cache and execute and frame.persist().count() == 0:  # computed once, before its readers
                    # Empty (the people in several groups, where everyone has one): the view becomes
                    # a relation Spark's optimizer knows is empty, and it removes the joins and the
                    # union branch that read it. (Of a cached view it cannot tell: it scanned the
                    # data again for them.)
                    frame.unpersist()
                    frame.where("false").createOrReplaceTempView(view)
            query = self._spark.sql(final)
            return list(query.collect()) if execute else []
        finally:
            for view in views:
                self._spark.catalog.dropTempView(view)  # also uncaches it
            for key, value in previous.items():
                if value is None:
                    self._spark.conf.unset(key)
                else:
                    self._spark.conf.set(key, value)

    def check(self, plan: AggregationPlan) -> None:
        """Analyse ``plan`` without running it (Spark plans lazily); raises on schema errors.

        Analyses the very texts :meth:`run` runs (the same views, ANSI mode off as then), so that a
        query that passes here does not fail on its schema after the debit. The DuckDB text is first
        bound by DuckDB itself, on empty tables of the same types: what DuckDB's binder refuses (text
        compared with a number by < or >, text in arithmetic, LIKE on a number...) is refused here
        too, where Spark would have cast it its own way and answered.
        """
        types = self._column_types(plan)
        check_spark_keys(plan, types)
        self._duckdb_check(plan)
        with self._key_table(plan) as key_table:
            steps, final = self._steps(render_sql(plan, key_table, rank_by_window=True), types)
            with _SPARK_RUN_LOCK:
                self._run_steps(steps, final, execute=False)

    def _duckdb_check(self, plan: AggregationPlan) -> None:
        """:meth:`DuckDBBackend.check` of ``plan`` on empty DuckDB tables with this backend's column types
        (skipped where a type has no DuckDB counterpart here: nested types)."""
        with self._duckdb_mirror(complete=True) as mirror:
            if mirror is not None:
                mirror.check(plan)

    @contextlib.contextmanager
    def _duckdb_mirror(self, *, complete: bool) -> Iterator[DuckDBBackend | None]:
        """A DuckDB backend over empty tables with this backend's tables and column types. A column
        whose type has no DuckDB counterpart here (nested types) is left out, or, when ``complete``,
        no mirror is made (None)."""
        import duckdb

        from dpkit.engine._aggregation import _quote

        statements = []
        for name, (_, column_types) in self._tables.items():
            columns = []
            for column, kind in column_types.items():
                duck = duck_column_type(kind)
                if duck is None and complete:
                    yield None
                    return
                if duck is not None:
                    columns.append(f"{_quote(column)} {duck}")
            statements.append(f"CREATE TABLE {_quote(name)} ({', '.join(columns) or '__none INTEGER'})")
        connection = duckdb.connect(":memory:")
        try:
            for statement in statements:
                connection.execute(statement)
            yield DuckDBBackend(connection)
        finally:
            connection.close()

    def derived_schema(
        self, table: str, joins: tuple[Join, ...], derived: tuple[Derived, ...]
    ) -> dict[str, ColumnInfo]:
        """The derived columns' types as DuckDB binds them (on empty tables of this backend's types),
        named as Spark names them: the Spark text computes them as DuckDB does (``spark_semantics``)."""
        with self._duckdb_mirror(complete=False) as mirror:
            assert mirror is not None  # (a partial mirror is always made)
            described = mirror.derived_schema(table, joins, derived)
        return {
            name: ColumnInfo(name, _spark_type_name(info.type), info.numeric, info.integer)
            for name, info in described.items()
        }

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


def _refuse_mixed_parquet_schemas(reader: Any, path: str, frame: Any) -> None:
    """Refuse Parquet files that do not all have the schema Spark took for them (see
    ``DuckDBBackend._refuse_mixed_parquet_schemas``): their footers, merged, must give that schema."""
    try:
        merged = reader.option("mergeSchema", "true").parquet(path).schema
    except Exception as error:  # noqa: BLE001 - Spark's "failed to merge incompatible data types"
        reason = first_line(error)
        raise InvalidParameterError("source", path, f"its files' schemas do not merge ({reason})") from None
    if merged != frame.schema:
        raise InvalidParameterError(
            "source",
            path,
            "its files do not all have the same columns and types; one schema is needed, or a file's rows "
            "would fail queries that read them",
        )


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


def make_backend(backend: object) -> Backend:
    """A backend from a name (``"duckdb"``, ``"spark"``) or an object following :class:`Backend`."""
    if backend is None or backend == "duckdb":
        return DuckDBBackend()
    if backend == "spark":
        return SparkBackend()
    if isinstance(backend, Backend):
        return backend
    raise InvalidParameterError("backend", backend, "must be 'duckdb', 'spark' or a dpkit.engine.Backend")
