"""What a query gives back: a table of noisy values with confidence intervals, and its cost."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn, SupportsIndex

from dpkit.engine._plan import Contribution
from dpkit.guarantees import Guarantee

__all__ = ["Preview", "Result"]


def _format_table(columns: dict[str, list[Any]], limit: int = 20) -> str:
    names = list(columns)
    rows = list(zip(*(columns[n] for n in names), strict=True)) if names else []

    def cell(value: Any) -> str:
        if isinstance(value, float):
            if math.isnan(value):
                return "nan"
            return f"{value:,.0f}" if abs(value) >= 1000 or value.is_integer() else f"{value:.4g}"
        return str(value)

    body = [[cell(v) for v in row] for row in rows[:limit]]
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


def _thawed(value: Any) -> Any:
    """A plain, mutable deep copy (what a Result hands out), with NaN and infinity as None (JSON has neither)."""
    if isinstance(value, dict):
        return {key: _thawed(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_thawed(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


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
    if kind == "TIME":
        return pa.time64("us")
    if kind == "INTERVAL":
        return pa.duration("us")
    if kind.startswith(("DECIMAL", "NUMERIC")) and "(" in kind:
        precision, _, scale = kind[kind.index("(") + 1 : kind.rindex(")")].partition(",")
        return pa.decimal128(int(precision), int(scale or 0))
    if kind in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ"):
        return pa.timestamp("us", tz="UTC")
    if kind in ("TIMESTAMP", "TIMESTAMP_NTZ", "DATETIME"):
        return pa.timestamp("us")
    return pa.null()


@dataclass(frozen=True)
class Result:
    """A released query: noisy values, (1 - alpha) confidence intervals, and what it cost.

    ``columns`` maps each output column to its values: the group columns, then for each
    aggregate ``name``, ``name_low`` and ``name_high``. The intervals cover the *bounded*
    statistic (after clamping and contribution bounding) with probability >= 1 - alpha each;
    quantiles have no interval on their value (NaN): their accuracy is a rank statement,
    ``rank_half_width`` in ``budget_split`` (with probability >= 1 - alpha, the number of bounded
    rows below the released value is within that many rows of ``level * rows``, plus one bin's
    rows; compare it with the row count to judge a quantile). ``guarantee`` is what the ledger was debited;
    ``budget_split`` shows how it was divided among the statistics.
    """

    columns: dict[str, list[Any]]
    guarantee: Guarantee
    alpha: float
    contribution: Contribution
    budget_split: tuple[dict[str, Any], ...]
    bounds: dict[str, tuple[float, float]]
    description: str
    entry_index: int | None = None
    #: Each group column's type as the backend names it (e.g. ``VARCHAR``, ``DATE``): a result with
    #: no rows keeps its columns' types (aggregates are always float64).
    group_types: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # What was released is what is reported: the columns, split and bounds are read-only
        # copies, so neither the caller nor code holding the inputs can change them afterwards.
        for name in ("columns", "budget_split", "bounds", "group_types"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    def _plain_columns(self) -> dict[str, list[Any]]:
        return {name: list(values) for name, values in self.columns.items()}

    def _empty_table(self) -> Any:
        """The column types of a result with no rows, as an empty pyarrow Table (None if it has rows)."""
        if len(self):
            return None
        import pyarrow as pa

        fields = [
            pa.field(name, _arrow_type(self.group_types[name]) if name in self.group_types else pa.float64())
            for name in self.columns
        ]
        return pa.schema(fields).empty_table()

    def to_pandas(self) -> Any:
        """The result as a pandas DataFrame (a copy: changing it leaves the result as released)."""
        import pandas as pd

        empty = self._empty_table()
        return pd.DataFrame(self._plain_columns()) if empty is None else empty.to_pandas()

    def to_arrow(self) -> Any:
        """The result as a pyarrow Table."""
        import pyarrow as pa

        empty = self._empty_table()
        return pa.table(self._plain_columns()) if empty is None else empty

    def to_polars(self) -> Any:
        """The result as a Polars DataFrame."""
        import polars as pl

        empty = self._empty_table()
        return pl.DataFrame(self._plain_columns()) if empty is None else pl.from_arrow(empty)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (NaN and infinity as None): rows, cost, split, bounds and contribution limits."""
        names = list(self.columns)
        rows = [dict(zip(names, values, strict=True)) for values in zip(*self.columns.values(), strict=True)]
        summary: dict[str, Any] = _thawed(
            {
                "rows": rows,
                "alpha": self.alpha,
                "bounds": {k: list(v) for k, v in self.bounds.items()},
                "budget_split": [dict(s) for s in self.budget_split],
            }
        )
        return {
            "rows": summary["rows"],
            "guarantee": repr(self.guarantee),
            "alpha": summary["alpha"],
            "rows_per_group": self.contribution.rows_per_group,
            "groups_per_person": self.contribution.groups_per_person,
            "bounds": summary["bounds"],
            "budget_split": summary["budget_split"],
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
            f"{_format_table(self.columns)}\n"
            f"spent {self.guarantee}; {int(round((1 - self.alpha) * 100))}% intervals; {limits}\n"
            f"split: {split}"
        )


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
        names = list(self.statistics[0]) if self.statistics else []
        columns = {n: [s.get(n, "") for s in self.statistics] for n in names}
        verdict = "fits the remaining budget" if self.affordable else "EXCEEDS the remaining budget"
        return f"cost {self.guarantee} ({verdict})\n{_format_table(columns)}"
