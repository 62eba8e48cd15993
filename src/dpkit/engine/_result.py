"""What a query gives back: a table of noisy values with confidence intervals, and its cost."""

from __future__ import annotations

import datetime
import decimal
import math
import numbers
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, SupportsIndex

import numpy as np

from dpkit.engine._plan import Contribution
from dpkit.guarantees import Guarantee

__all__ = ["Preview", "Result", "arrow_table", "expression_types", "json_value", "keep_rows"]


def _format_table(columns: dict[str, list[Any]], limit: int = 20, keys: frozenset[str] = frozenset()) -> str:
    """The first ``limit`` rows as aligned text; released numbers with thousands separators (the
    ``keys`` columns, group keys such as a year, as they are)."""
    names = list(columns)
    rows = list(zip(*(columns[n] for n in names), strict=True)) if names else []

    def cell(value: Any, key: bool) -> str:
        if isinstance(value, float):
            if math.isnan(value):
                return "nan"
            if abs(value) >= 1e6 or value.is_integer():
                return f"{value:,.0f}"
            return f"{value:,.6g}" if abs(value) >= 1000 else f"{value:.4g}"  # 35,497.1: a tenth shows
        if isinstance(value, int) and not isinstance(value, bool) and not key:
            return f"{value:,}"
        return str(value)

    body = [[cell(v, n in keys) for v, n in zip(row, names, strict=True)] for row in rows[:limit]]
    widths = [max([len(n)] + [len(r[i]) for r in body]) for i, n in enumerate(names)]
    lines = ["  ".join(n.rjust(w) for n, w in zip(names, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in body]
    if len(rows) > limit:
        lines.append(f"... ({len(rows)} rows)")
    return "\n".join(lines)


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"a released {type(self).__name__} is read-only: copy it (list(...), dict(...)) to change it")


class ReadOnlyList(list[Any]):
    """A list that refuses every change: a released column reads and compares as a list, as before."""

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __init__(self, values: Iterable[Any] = ()) -> None:
        list.__init__(self, values)

    def __reduce__(self) -> tuple[Any, ...]:  # pickles and copies rebuild it without list.extend
        return (type(self), (list(self),))

    def copy(self) -> list[Any]:
        return list(self)

    def __getitem__(self, index: SupportsIndex | slice) -> Any:  # type: ignore[override]
        item = list.__getitem__(self, index)
        return list(item) if isinstance(index, slice) else item


class ReadOnlyDict(dict[str, Any]):
    """A dict that refuses every change (a released column mapping, split entry or bounds)."""

    __setitem__ = __delitem__ = __ior__ = _refuse
    update = pop = popitem = clear = setdefault = _refuse

    def __init__(self, items: Any = ()) -> None:
        dict.__init__(self, items)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))

    def copy(self) -> dict[str, Any]:
        return dict(self)


def _frozen(value: Any) -> Any:
    """A read-only deep copy of a released structure (lists, tuples and dicts of plain values)."""
    if isinstance(value, dict):
        return ReadOnlyDict({key: _frozen(item) for key, item in value.items()})
    if isinstance(value, list):
        return ReadOnlyList(_frozen(item) for item in value)
    if isinstance(value, tuple):
        return tuple(_frozen(item) for item in value)
    return value


def _iso_duration(value: datetime.timedelta) -> str:
    """ISO 8601 duration ``[-]PnDTnHnMn[.f]S``, exact to the nanosecond (pandas.Timedelta has them)."""
    microseconds = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    nanoseconds = microseconds * 1_000 + getattr(value, "nanoseconds", 0)
    sign = "-" if nanoseconds < 0 else ""
    days, rest = divmod(abs(nanoseconds), 86_400 * 10**9)
    hours, rest = divmod(rest, 3_600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    seconds, fraction = divmod(rest, 10**9)
    decimals = f".{fraction:09d}".rstrip("0") if fraction else ""
    return f"{sign}P{days}DT{hours}H{minutes}M{seconds}{decimals}S"


def json_value(value: Any, *, key: bool = False) -> Any:
    """``value`` as strict JSON (``json.dumps(..., allow_nan=False)`` takes it), recursively.

    The encoding ``Result.to_dict`` uses (and ``dpkit query --json`` should): it is lossless and,
    given the column's type, unambiguous:

    - None, str, bool and int as themselves (numpy scalars as the Python value);
    - a finite float as itself; a non-finite one as the strings ``"NaN"``, ``"Infinity"`` and
      ``"-Infinity"`` when ``key`` is true (a group key: NaN and NULL are different groups), and
      as None otherwise (RFC 8259 has neither: a quantile's interval ends are NaN);
    - decimal.Decimal as its exact digits, without exponent (``"1.50"``);
    - date, datetime (pandas.Timestamp included, nanoseconds kept) and time as ISO 8601
      (``"2024-01-31"``, ``"2024-01-31T10:00:00.000000001"``, ``"10:00:00+00:00"``);
    - timedelta (an INTERVAL) as an ISO 8601 duration, ``"P1DT2H3M4.5S"`` (``"-P0DT0H0M1S"``
      for minus one second);
    - uuid.UUID as its 8-4-4-4-12 lowercase hexadecimal form;
    - bytes (a BLOB) as lowercase hexadecimal, two digits per byte, no prefix (``b"\\x00\\xff"`` is
      ``"00ff"``);
    - dicts (keys as str), lists and tuples element by element; anything else as its str().
    """
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, dict):
        return {str(name): json_value(item, key=key) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(item, key=key) for item in value]
    if isinstance(value, np.datetime64 | np.timedelta64):  # (their item() can be a bare integer)
        import pandas as pd

        if np.isnat(value):
            return None
        return json_value(pd.Timestamp(value) if isinstance(value, np.datetime64) else pd.Timedelta(value))
    if isinstance(value, np.generic):
        return json_value(value.item(), key=key)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isfinite(number):
            return number
        if not key:
            return None
        return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")
    if isinstance(value, datetime.date | datetime.time | datetime.timedelta) and value != value:
        return None  # pandas.NaT
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return _iso_duration(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


_ARROW_TYPES = {
    # DuckDB's names, then Spark's.
    "BOOLEAN": "bool_", "BOOL": "bool_", "TINYINT": "int8", "SMALLINT": "int16", "INTEGER": "int32",
    "INT": "int32", "BIGINT": "int64", "UTINYINT": "uint8", "USMALLINT": "uint16", "UINTEGER": "uint32",
    "UBIGINT": "uint64", "FLOAT": "float32", "REAL": "float32", "DOUBLE": "float64", "VARCHAR": "string",
    "TEXT": "string", "DATE": "date32", "BYTE": "int8", "SHORT": "int16", "LONG": "int64", "STRING": "string",
}  # fmt: skip


def _arrow_type(sql_type: str) -> Any:
    """The pyarrow type of a backend column type (null for one without a plain counterpart)."""
    import pyarrow as pa

    kind = sql_type.strip().upper()
    if kind in _ARROW_TYPES:
        return getattr(pa, _ARROW_TYPES[kind])()
    if kind.startswith(("VARCHAR", "CHAR", "ENUM(")):
        return pa.string()
    if kind in ("BLOB", "BYTEA", "BINARY", "VARBINARY"):
        return pa.binary()
    if kind == "UUID":
        return pa.uuid()
    if kind in ("TIME", "TIME_NS"):
        return pa.time64("us" if kind == "TIME" else "ns")
    if kind == "INTERVAL":
        return pa.duration("us")
    if kind.startswith(("DECIMAL", "NUMERIC")) and "(" in kind:
        precision, _, scale = kind[kind.index("(") + 1 : kind.rindex(")")].partition(",")
        return pa.decimal128(int(precision), int(scale or 0))
    if kind in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ"):
        return pa.timestamp("us", tz="UTC")
    if kind in ("TIMESTAMP", "TIMESTAMP_NTZ", "DATETIME", "TIMESTAMP_US"):
        return pa.timestamp("us")
    if kind in _TIMESTAMP_UNITS:
        return pa.timestamp(_TIMESTAMP_UNITS[kind])
    return pa.null()


_TIMESTAMP_UNITS = {"TIMESTAMP_NS": "ns", "TIMESTAMP_MS": "ms", "TIMESTAMP_S": "s"}


def _typed_values(values: Iterable[Any], arrow_type: Any) -> list[Any]:
    """Values as a column of ``arrow_type`` holds them, so that every output shows the same key.

    A public key on a DECIMAL column may be an int or a float (``1.5``) and has the scale it was
    written with (``Decimal("2.250")``); the backend gives ``Decimal("1.50")``: each is written
    at the column's scale when that is exact. A public key on a UUID column is text; the backend
    gives uuid.UUID.
    """
    import pyarrow as pa

    if pa.types.is_decimal(arrow_type):
        quantum = decimal.Decimal(1).scaleb(-arrow_type.scale)
        context = decimal.Context(prec=80)

        def at_scale(value: Any) -> Any:
            if value is None or isinstance(value, bool) or not isinstance(value, numbers.Real | decimal.Decimal):
                return value
            number = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
            if not number.is_finite():
                return value
            scaled = number.quantize(quantum, context=context)
            return scaled if scaled == number else value

        return [at_scale(value) for value in values]
    if getattr(arrow_type, "extension_name", None) == "arrow.uuid":

        def as_uuid(value: Any) -> Any:
            try:
                return uuid.UUID(value) if isinstance(value, str) else value
            except ValueError:
                return value

        return [as_uuid(value) for value in values]
    return list(values)


def _arrow_array(values: list[Any], arrow_type: Any) -> Any:
    """A pyarrow array of ``values`` of ``arrow_type`` (inferred for a type without a counterpart).

    The inferred type is also the last resort for values the column type cannot hold (which the
    compiler's key checks should prevent): a released result always converts.
    """
    import pyarrow as pa

    if pa.types.is_null(arrow_type) and values:
        return pa.array(values)
    try:
        return pa.array(values, arrow_type)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return pa.array(values)


def _column_types(columns: Mapping[str, Any], types: Mapping[str, str]) -> dict[str, Any]:
    """Each column's pyarrow type, from the column types alone (never from the values).

    ``types`` names a column's type as the backend does: a group column's backend type (a binned
    one VARCHAR: text labels), BIGINT for a count and its interval ends; any other column (a
    released value or interval end) is float64. So a result has the same schema with or without rows.
    """
    import pyarrow as pa

    return {name: _arrow_type(types[name]) if name in types else pa.float64() for name in columns}


def arrow_table(columns: Mapping[str, list[Any]], types: Mapping[str, str]) -> Any:
    """``columns`` as a pyarrow Table, typed by ``types`` (see :func:`_column_types`)."""
    import pyarrow as pa

    types = _column_types(columns, types)
    return pa.table(
        {name: _arrow_array(_typed_values(values, types[name]), types[name]) for name, values in columns.items()}
    )


def keep_rows(
    columns: Mapping[str, list[Any]], types: Mapping[str, str], having: tuple[str, ...]
) -> dict[str, list[Any]]:
    """The released rows where every HAVING condition holds: post-processing of the noisy table.

    Each condition is DuckDB SQL over the result's columns (the compiler's canonical text, every
    column quoted), evaluated on the released table alone. A condition that fails on a row (a cast
    of a key that does not convert) raises DuckDB's error: the session then hands the unfiltered
    release back in a :class:`~dpkit.PostProcessingError`. Run it first on one row of NULLs to
    bind names and types and fold constants (the session does, before the debit).

    >>> keep_rows({"region": ["a", "b"], "n": [3.0, 12.0]}, {"region": "VARCHAR"}, ('"n" > 10',))
    {'region': ['b'], 'n': [12.0]}
    """
    if not having:
        return dict(columns)
    import duckdb
    import pyarrow as pa

    table = arrow_table(columns, types)
    count = table.num_rows
    table = table.append_column("__dpkit_row", pa.array(range(count), pa.int64()))
    condition = " AND ".join(f"({c})" for c in having)
    # A database of its own holding the released table alone, with no access to files.
    connection = duckdb.connect(":memory:", config={"enable_external_access": False})
    try:
        connection.register("__dpkit_released", table)
        kept = connection.execute(
            f"SELECT __dpkit_row FROM __dpkit_released WHERE {condition} ORDER BY __dpkit_row"
        ).fetchall()
    finally:
        connection.close()
    rows = [row for (row,) in kept]
    return {name: [values[i] for i in rows] for name, values in columns.items()}


def expression_types(columns: Iterable[str], types: Mapping[str, str], expressions: Iterable[str]) -> list[str]:
    """DuckDB's type of each SQL expression over the result's columns (``typeof``), bound on one
    row of typed NULLs (no released value is read): the session refuses a HAVING condition that is
    not BOOLEAN before the debit, since DuckDB would cast its value to BOOLEAN row by row.

    >>> expression_types(["region", "n"], {"region": "VARCHAR"}, ['"n" > 10', '"region"', '"n" - 1'])
    ['BOOLEAN', 'VARCHAR', 'DOUBLE']
    """
    import duckdb

    texts = list(expressions)
    if not texts:
        return []
    table = arrow_table({name: [None] for name in columns}, types)
    selected = ", ".join(f"typeof({text})" for text in texts)
    connection = duckdb.connect(":memory:", config={"enable_external_access": False})
    try:
        connection.register("__dpkit_released", table)
        row = connection.execute(f"SELECT {selected} FROM __dpkit_released").fetchone()
    finally:
        connection.close()
    return [str(kind) for kind in (row or ())]


@dataclass(frozen=True)
class Result:
    """A released query: noisy values, (1 - alpha) confidence intervals, and what it cost.

    ``columns`` maps each output column to its values: the group columns, then for each
    aggregate ``name``, ``name_low`` and ``name_high``. The intervals cover the *bounded*
    statistic (after clamping and contribution bounding) with probability >= 1 - alpha each,
    taken over all groups, released or not: with private keys, a group near the selection
    threshold appears mostly when its noise lifted it, so released small groups' intervals miss
    more often than alpha. A count's interval is the integers within its noisy value +- the
    half-width, with the released count. Quantiles have no interval on their value (NaN): their
    accuracy is a rank statement, ``rank_half_width`` r in ``budget_split`` (with probability
    >= 1 - alpha, fewer than ``level * rows + r`` bounded rows lie below the released value and
    fewer than ``(1 - level) * rows + r`` above it, each row counted at its nearest point of the
    quantile grid; compare r with the row count to judge a quantile).
    ``guarantee`` is what the ledger was debited; ``budget_split`` shows how it was divided among
    the statistics.
    """

    columns: dict[str, list[Any]]
    guarantee: Guarantee
    alpha: float
    contribution: Contribution
    budget_split: tuple[dict[str, Any], ...]
    bounds: dict[str, tuple[float, float]]
    description: str
    entry_index: int | None = None
    #: Each group column's type as the backend names it (e.g. ``VARCHAR``, ``DATE``): ``to_arrow``,
    #: ``to_pandas`` and ``to_polars`` take the key columns' types from it, so a result with no rows
    #: has the types of one with rows.
    group_types: dict[str, str] = field(default_factory=dict)
    #: The released columns that are not float64: ``BIGINT`` (int64) for each count and its
    #: interval ends, which are whole numbers (float64 only if one is beyond 2^63, at an epsilon
    #: below about 1e-17). Every other released value and interval end is float64. (HAVING reads
    #: counts as DOUBLE, so arithmetic on them cannot overflow int64 after the debit.)
    value_types: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # What was released is what is reported: the columns, split and bounds are read-only
        # copies, so neither the caller nor code holding the inputs can change them afterwards.
        for name in ("columns", "budget_split", "bounds", "group_types", "value_types"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    def _group_names(self) -> list[str]:
        """The group columns (``group_types`` names each one, binned columns included)."""
        return [name for name in self.columns if name in self.group_types]

    def _types(self) -> dict[str, str]:
        return {**self.group_types, **self.value_types}

    def _column_types(self) -> dict[str, Any]:
        return _column_types(self.columns, self._types())

    def _typed_columns(self) -> dict[str, list[Any]]:
        types = self._column_types()
        return {name: _typed_values(values, types[name]) for name, values in self.columns.items()}

    def to_arrow(self) -> Any:
        """The result as a pyarrow Table (its schema comes from the column types; see ``group_types``)."""
        return arrow_table(self.columns, self._types())

    def to_pandas(self) -> Any:
        """The result as a pandas DataFrame (a copy: changing it leaves the result as released).

        Converted from ``to_arrow()``: a NaN key and a NULL key both show as NaN there (use
        ``to_arrow``, ``to_polars`` or ``to_dict`` to tell them apart).
        """
        return self.to_arrow().to_pandas()

    def to_polars(self) -> Any:
        """The result as a Polars DataFrame (converted from ``to_arrow()``)."""
        import polars as pl

        return pl.from_arrow(self.to_arrow())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: rows, cost, split, bounds, contribution limits and group column types.

        Strict JSON: ``json.dumps(result.to_dict(), allow_nan=False)`` works for every column type,
        and the encoding is lossless (see ``json_value``): group keys that are dates, times and
        timestamps are ISO 8601 strings (nanoseconds kept), INTERVALs ISO 8601 durations
        (``"P1DT0H0M0.5S"``), DECIMALs their exact digits at the column's scale (``"1.50"``),
        UUIDs their canonical text, BLOBs lowercase hexadecimal; a NaN or infinite float key is
        ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` and a NULL key None, so they stay distinct.
        Released values are numbers; an interval end that is NaN (quantiles have none) is None.
        ``group_types`` names each group column's type, which tells how to read its keys back, and
        ``value_types`` the released columns that are integers (``BIGINT``: counts and their ends).
        """
        groups = set(self._group_names())
        typed = self._typed_columns()
        names = list(typed)
        encoded = [[json_value(value, key=name in groups) for value in typed[name]] for name in names]
        types = {name: self.group_types[name] for name in self._group_names()}
        return {
            "rows": [dict(zip(names, values, strict=True)) for values in zip(*encoded, strict=True)],
            "guarantee": repr(self.guarantee),
            "alpha": json_value(self.alpha),
            "rows_per_group": json_value(self.contribution.rows_per_group),
            "groups_per_person": json_value(self.contribution.groups_per_person),
            "bounds": json_value({name: list(bound) for name, bound in self.bounds.items()}),
            "budget_split": json_value([dict(split) for split in self.budget_split]),
            "group_types": types,
            "value_types": dict(self.value_types),
        }

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()), []))

    def __str__(self) -> str:
        limits = (
            f"each person: <= {self.contribution.rows_per_group} rows per group, "
            f"<= {self.contribution.groups_per_person} groups"
        )
        split = "; ".join(
            f"{s['statistic']}: {s['mechanism']} "
            + (f"eps={s['epsilon']:.4g}" if "epsilon" in s else f"rho={s.get('rho', 0):.4g}")
            + (f" (rank error <= {s['rank_half_width']:,.0f} rows)" if "rank_half_width" in s else "")
            for s in self.budget_split
        )
        return (
            f"{_format_table(self.columns, keys=frozenset(self.group_types))}\n"
            f"spent {self.guarantee}; {_level_text(self.alpha)} intervals; {limits}\n"
            f"split: {split}"
        )


def _refuse_assignment(self: object, name: str, value: object) -> NoReturn:
    raise TypeError(
        f"a released {type(self).__name__} is read-only: its {name!r} cannot be assigned "
        "(copy what you need: to_dict(), to_pandas(), dict(result.columns))"
    )


def _refuse_deletion(self: object, name: str) -> NoReturn:
    raise TypeError(f"a released {type(self).__name__} is read-only: its {name!r} cannot be deleted")


# Installed after @dataclass(frozen=True), which refuses a class that defines them and installs
# its own (they raise FrozenInstanceError, an AttributeError; the README promises TypeError).
# Construction, pickling and copying set fields with object.__setattr__ or __dict__, not these.
Result.__setattr__ = _refuse_assignment  # type: ignore[assignment,method-assign]
Result.__delattr__ = _refuse_deletion  # type: ignore[assignment,method-assign]


@dataclass(frozen=True)
class Preview:
    """The cost and expected accuracy of a query, computed from public information only.

    ``statistics``: one row per noisy statistic with its mechanism, budget share, sensitivity,
    noise scale, expected absolute error and (1 - alpha) half-width, per group.
    """

    guarantee: Guarantee
    alpha: float
    contribution: Contribution
    statistics: tuple[dict[str, Any], ...]
    remaining_after: Guarantee | None
    affordable: bool
    groups: int | None

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame(list(self.statistics))

    def __str__(self) -> str:
        # Every row's fields, in order of first appearance (a statistic whose bounds are automatic
        # has no scale or half-width yet, and listed first it hid the others' columns).
        names = list(dict.fromkeys(name for row in self.statistics for name in row))
        columns = {n: [s.get(n, "") for s in self.statistics] for n in names}
        verdict = "fits the remaining budget" if self.affordable else "EXCEEDS the remaining budget"
        return f"cost {self.guarantee} ({verdict})\n{_format_table(columns)}"


def _level_text(alpha: float) -> str:
    """The intervals' confidence 1 - alpha as a percentage, with as many digits as alpha needs:
    ``95%`` for 0.05, ``99.9%`` for 0.001, ``99.9999999%`` for 1e-9 (never a rounded ``100%``)."""
    for digits in range(0, 16):
        text = f"{(1 - alpha) * 100:.{digits}f}"
        if 0 < float(text) < 100 and abs(float(text) / 100 - (1 - alpha)) <= min(alpha, 1 - alpha) / 100:
            return f"{text}%"
    return f"1 - {alpha:g}"
