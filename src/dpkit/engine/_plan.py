"""The query plan: frozen values that say *what* to compute, never how or at what privacy cost.

A :class:`Query` is built by the Python builder (:mod:`dpkit.engine._builder`) or by the SQL
front end (:mod:`dpkit.engine._sql`); both produce the same plan, which the privacy compiler
(:mod:`dpkit.engine._compiler`) turns into a bounded aggregation and a set of mechanisms.
Every value here is public: column names, bounds, key sets, contribution limits.

Filters are kept as SQL text in DuckDB's dialect (validated by parsing with sqlglot); each
backend transpiles them to its own dialect.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_integer, check_positive, check_probability

__all__ = [
    "AUTO",
    "Aggregate",
    "AggregateKind",
    "Bin",
    "Contribution",
    "Derived",
    "GroupKey",
    "Join",
    "OrderBy",
    "Query",
    "arrange",
    "check_bounds_mapping",
    "check_bounds_pair",
    "distinct",
]

AggregateKind = Literal["count", "count_distinct", "sum", "mean", "variance", "stddev", "quantiles"]
AGGREGATE_KINDS: tuple[str, ...] = ("count", "count_distinct", "sum", "mean", "variance", "stddev", "quantiles")
NUMERIC_KINDS = frozenset({"sum", "mean", "variance", "stddev", "quantiles"})

#: Ask for clamping bounds to be estimated privately (a charged release).
AUTO = "auto"


def canonical(value: Any) -> Any:
    """``value`` (a key or a tuple of them) as a dict key equal where the engines see equal values:
    every float NaN is one value (two NaN objects are different dict keys in Python)."""
    if isinstance(value, tuple):
        return tuple(canonical(v) for v in value)
    return ("<nan>",) if isinstance(value, float) and math.isnan(value) else value


def distinct(values: Sequence[Any]) -> list[Any]:
    """``values`` without repeats as the engines compare them, first occurrence kept, order kept.

    Like ``dict.fromkeys`` (so 0.0 and -0.0 are one value), except that every float NaN (in a
    tuple too) is one value, as NaN equals NaN in DuckDB and Spark comparisons.
    """

    first: dict[Any, Any] = {}
    for value in values:
        first.setdefault(canonical(value), value)
    return list(first.values())


def spelling_resolver(names: list[str]) -> Callable[[str], str]:
    """Map a column name to its spelling among ``names``: itself if present, else the one name equal to it
    without case (DuckDB and Spark match identifiers, quoted or not, without case), else itself."""
    exact = set(names)
    folded: dict[str, list[str]] = {}
    for name in names:
        folded.setdefault(name.casefold(), []).append(name)

    def resolve(column: str) -> str:
        if column in exact:
            return column
        matches = folded.get(column.casefold(), [])
        return matches[0] if len(matches) == 1 else column

    return resolve


def check_bounds_pair(name: str, bounds: Any) -> tuple[float, float] | str:
    """Clamping bounds: a pair (low, high) of finite reals with low < high, or ``"auto"``."""
    if bounds == AUTO and isinstance(bounds, str):
        return AUTO
    allowed = "must be a pair (low, high) of finite real numbers with low < high, or 'auto'"
    if isinstance(bounds, str | bytes) or not isinstance(bounds, Sequence) or len(bounds) != 2:
        raise InvalidParameterError(name, bounds, allowed)
    low, high = bounds
    if isinstance(low, str | bytes) or isinstance(high, str | bytes):  # float("1e3") would pass
        raise InvalidParameterError(name, bounds, allowed)
    try:
        low_f, high_f = float(low), float(high)
    except (TypeError, ValueError):
        raise InvalidParameterError(name, bounds, allowed) from None
    if isinstance(low, bool) or isinstance(high, bool) or not (math.isfinite(low_f) and math.isfinite(high_f)):
        raise InvalidParameterError(name, bounds, allowed)
    if not low_f < high_f:
        raise InvalidParameterError(name, bounds, allowed)
    if max(abs(low_f), abs(high_f)) >= 2.0**60:
        raise InvalidParameterError(name, bounds, "bounds must have magnitude below 2**60")
    if high_f - low_f < 2.0**-500:  # the noise mechanisms calibrate to sensitivities of at least 2**-1000
        raise InvalidParameterError(name, bounds, "bounds must be at least 2**-500 apart (rescale the column)")
    return (low_f, high_f)


def check_bounds_mapping(bounds: Mapping[Any, Any]) -> dict[str, tuple[float, float] | str]:
    """``bounds={column: (low, high) or "auto"}``, each pair checked; a column named twice (names
    match without case, so ``INCOME`` and ``income`` are one column) is refused, not one silently kept."""
    checked: dict[str, tuple[float, float] | str] = {}
    given: set[str] = set()
    for column, value in bounds.items():
        key = str(column).casefold()
        if key in given:
            raise InvalidParameterError(
                "bounds", column, "names a column a second time (names match without case): give each column once"
            )
        given.add(key)
        checked[str(column)] = check_bounds_pair(f"bounds[{column!r}]", value)
    return checked


@dataclass(frozen=True)
class Aggregate:
    """One requested statistic: kind, column, clamping bounds, quantile levels and budget weight.

    ``column`` of a count: count the rows where it is not NULL (SQL's ``COUNT(col)``); None counts
    every row. ``bounds`` None means "use the session's or the call's bounds for this column"; the compiler
    refuses a numeric aggregate whose column has no bounds anywhere. ``weight`` is this
    aggregate's share of the query budget relative to the others (default 1). ``sample`` (variance
    and stddev only): divide by n - 1 (SQL's VARIANCE / VAR_SAMP) instead of n (VAR_POP).
    """

    kind: AggregateKind
    column: str | None = None
    bounds: tuple[float, float] | str | None = None
    levels: tuple[float, ...] = ()
    weight: float = 1.0
    sample: bool = False

    def __post_init__(self) -> None:
        if self.kind not in AGGREGATE_KINDS:
            raise InvalidParameterError("kind", self.kind, f"must be one of {', '.join(AGGREGATE_KINDS)}")
        if self.kind in NUMERIC_KINDS:
            if not isinstance(self.column, str) or not self.column:
                raise InvalidParameterError("column", self.column, f"{self.kind} needs a column name (a string)")
        elif self.column is not None and self.kind == "count":
            if not isinstance(self.column, str) or not self.column:
                raise InvalidParameterError(
                    "column", self.column, "must be a column name (count its non-NULL rows) or None"
                )
        elif self.column is not None:
            raise InvalidParameterError(
                "column", self.column, "count_distinct counts people (the privacy unit) and takes no column"
            )
        if self.bounds is not None and self.kind not in NUMERIC_KINDS:
            raise InvalidParameterError("bounds", self.bounds, f"only numeric aggregates take bounds, not {self.kind}")
        if self.bounds is not None:
            object.__setattr__(self, "bounds", check_bounds_pair("bounds", self.bounds))
        if self.kind == "quantiles":
            if not self.levels:
                raise InvalidParameterError("levels", self.levels, "quantiles need at least one level in (0, 1)")
            levels = tuple(check_probability("levels", q, open_low=True, open_high=True) for q in self.levels)
            # A level asked twice is released once (one selection, one column).
            object.__setattr__(self, "levels", tuple(dict.fromkeys(levels)))
        elif self.levels:
            raise InvalidParameterError("levels", self.levels, f"only quantiles take levels, not {self.kind}")
        if not isinstance(self.sample, bool):
            raise InvalidParameterError("sample", self.sample, "must be True or False")
        if self.sample and self.kind not in ("variance", "stddev"):
            raise InvalidParameterError(
                "sample", self.sample, f"only variance and stddev take sample=, not {self.kind}"
            )
        object.__setattr__(self, "weight", check_positive("weight", self.weight))


def level_label(level: float) -> str:
    """The suffix naming one quantile level's columns: ``p50`` for 0.5, ``q0.125`` for 0.125."""
    percent = level * 100
    return f"p{int(percent)}" if float(percent).is_integer() else f"q{level:g}"


def output_columns(name: str, aggregate: Aggregate) -> list[str]:
    """The result columns released for aggregate ``name``: a value, its low and its high end (per level)."""
    if aggregate.kind == "quantiles" and len(aggregate.levels) > 1:
        labels = [f"{name}_{level_label(level)}" for level in aggregate.levels]
    else:
        labels = [name]
    return [column for label in labels for column in (label, f"{label}_low", f"{label}_high")]


@dataclass(frozen=True)
class OrderBy:
    """Sort the released rows by one result column (a group column, an aggregate's value or an
    interval end), ascending unless ``descending``; NULL keys (and NaN ends) go last unless
    ``nulls_first``. Ordering, like a limit, is post-processing of the noisy table: it costs nothing
    and reads no data, and it orders by the *noisy* values.

    >>> OrderBy("n", descending=True)
    OrderBy(column='n', descending=True, nulls_first=False)
    """

    column: str
    descending: bool = False
    nulls_first: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.column, str) or not self.column:
            raise InvalidParameterError("order_by", self.column, "must name a result column")
        for name in ("descending", "nulls_first"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidParameterError(name, getattr(self, name), "must be True or False")

    def describe(self) -> str:
        return self.column + (" desc" if self.descending else "") + (" nulls first" if self.nulls_first else "")


def arrange(columns: Mapping[str, list[Any]], query: Query) -> dict[str, list[Any]]:
    """The released table's rows sorted by ``query.order_by`` (stable: ties keep the key order),
    then sliced by ``query.offset`` and ``query.limit``. Post-processing: no data, no budget.

    >>> plan = Query("t", order_by=(OrderBy("n", descending=True),), limit=2)
    >>> arrange({"region": ["a", "b", "c"], "n": [5.0, 9.0, 7.0]}, plan)
    {'region': ['b', 'c'], 'n': [9.0, 7.0]}
    """
    count = len(next(iter(columns.values()), []))
    rows = list(range(count))
    for order in reversed(query.order_by):
        values = columns[order.column]
        missing = [i for i in rows if values[i] is None or values[i] != values[i]]  # NULL or NaN
        present = [i for i in rows if not (values[i] is None or values[i] != values[i])]
        present.sort(key=values.__getitem__, reverse=order.descending)  # stable either way
        rows = missing + present if order.nulls_first else present + missing
    end = None if query.limit is None else query.offset + query.limit
    rows = rows[query.offset : end]
    return {name: [values[i] for i in rows] for name, values in columns.items()}


@dataclass(frozen=True)
class Bin:
    """A group key made by binning a numeric column at public edges: [e0, e1), [e1, e2), ..., [e_{m-1}, e_m].

    Values below e0 or above e_m (and NULL / NaN) fall in no bin and are dropped. The keys of a
    binned column are public (the bins), so it never needs partition selection. The key of a
    row is the bin's label, ``"[e_i, e_{i+1})"`` (the last bin is closed).
    """

    column: str
    edges: tuple[float, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.column, str) or not self.column:
            raise InvalidParameterError("column", self.column, "must be a column name")
        try:
            edges = tuple(float(e) for e in self.edges)
        except (TypeError, ValueError):
            raise InvalidParameterError("bins", self.edges, "must be a sequence of finite numbers") from None
        if len(edges) < 2 or not all(math.isfinite(e) for e in edges):
            raise InvalidParameterError("bins", self.edges, "needs at least two finite edges")
        if any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
            raise InvalidParameterError("bins", self.edges, "edges must be strictly increasing")
        object.__setattr__(self, "edges", edges)

    @property
    def name(self) -> str:
        return f"{self.column}_bin"

    @property
    def labels(self) -> tuple[str, ...]:
        last = len(self.edges) - 2
        return tuple(
            f"[{_fmt(a)}, {_fmt(b)}{']' if i == last else ')'}"
            for i, (a, b) in enumerate(zip(self.edges, self.edges[1:], strict=False))
        )


def _fmt(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


GroupKey = str | Bin


@dataclass(frozen=True)
class Join:
    """An inner join of the private table with a *public* lookup table on shared column names."""

    table: str
    on: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.table, str) or not self.table:
            raise InvalidParameterError("table", self.table, "must be the name of a public table")
        if not self.on or not all(isinstance(c, str) and c for c in self.on):
            raise InvalidParameterError("on", self.on, "must name one or more shared columns")


@dataclass(frozen=True)
class Derived:
    """A column computed from each row of the private table (and its joined lookups): ``name`` is
    ``expression``, a row-level SQL expression in DuckDB's dialect (``"spend * 1.2"``,
    ``"CASE WHEN age < 18 THEN 'minor' ELSE 'adult' END"``).

    Aggregates and group keys use it as a column; bounds and public keys name it. The expression
    obeys the WHERE rules (the same function allowlist, no aggregates, windows or subqueries) and
    reads the table's columns only. A row on which it fails (a cast that does not parse, an integer
    overflow) gets NULL there, as a failing filter excludes its row: a query never fails on one
    person's value.
    """

    name: str
    expression: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidParameterError("name", self.name, "a derived column needs a name (a non-empty string)")
        if not isinstance(self.expression, str) or not self.expression.strip():
            raise InvalidParameterError("expression", self.expression, "must be a non-empty SQL expression")


#: The largest per-person limit accepted (beyond it no budget gives useful noise; it also keeps
#: sensitivities far from float overflow).
_MAX_LIMIT = 10**9


@dataclass(frozen=True)
class Contribution:
    """Per-person contribution limits: at most ``rows_per_group`` rows in any group, ``groups_per_person`` groups.

    Rows beyond the limit are not dropped at random: a person with n > k rows in a group
    contributes k / n of each row (their statistics scaled by k / n), which keeps the same
    sensitivity while using all of their data (see :mod:`dpkit.engine._compiler`).
    """

    rows_per_group: int = 1
    groups_per_person: int = 1

    def __post_init__(self) -> None:
        for name in ("rows_per_group", "groups_per_person"):
            value = check_integer(name, getattr(self, name), minimum=1)
            if value > _MAX_LIMIT:
                raise InvalidParameterError(name, value, f"must be at most {_MAX_LIMIT:,} (the noise grows with it)")
            object.__setattr__(self, name, value)


@dataclass(frozen=True)
class Query:
    """What to compute: source table, joins, filters, grouping, public keys, aggregates, limits.

    ``keys`` is the public key set, one tuple per group (in ``group_by`` order), or None for
    private keys (selected with thresholded partition selection, which needs delta > 0). A query
    grouped only by :class:`Bin` keys is always public.
    """

    table: str
    joins: tuple[Join, ...] = ()
    where: tuple[str, ...] = ()
    #: Columns computed from each row (see :class:`Derived`), usable by aggregates and group keys.
    derived: tuple[Derived, ...] = ()
    group_by: tuple[GroupKey, ...] = ()
    keys: tuple[tuple[Any, ...], ...] | None = None
    aggregates: tuple[tuple[str, Aggregate], ...] = ()
    contribution: Contribution | None = None
    text: str = field(default="", compare=False)
    #: Post-processing of the released table (no cost): conditions on its columns (HAVING), its
    #: row order and a slice of its rows, applied in that order.
    having: tuple[str, ...] = ()
    order_by: tuple[OrderBy, ...] = ()
    limit: int | None = None
    offset: int = 0

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(g.name if isinstance(g, Bin) else g for g in self.group_by)

    @property
    def result_columns(self) -> list[str]:
        """The released table's columns: the group columns, then each aggregate's (see :func:`output_columns`)."""
        return [*self.group_names, *(c for name, a in self.aggregates for c in output_columns(name, a))]

    @property
    def public_keys(self) -> bool:
        """Whether the group keys are public (given, or all groups are bins, or no grouping)."""
        return not self.group_by or self.keys is not None or all(isinstance(g, Bin) for g in self.group_by)

    def describe(self) -> str:
        """A one-line description for the ledger (the SQL text when the query came from SQL)."""
        if self.text:
            return self.text
        parts = [f"table {self.table}"]
        if self.joins:
            parts.append("join " + ", ".join(j.table for j in self.joins))
        if self.derived:
            parts.append("with " + ", ".join(f"{d.name} = {d.expression}" for d in self.derived))
        if self.where:
            parts.append("where " + " AND ".join(self.where))
        if self.group_by:
            parts.append("group by " + ", ".join(self.group_names) + (" (public keys)" if self.public_keys else ""))
        parts.append(
            "agg "
            + ", ".join(
                f"{name}={a.kind}{'_samp' if a.sample else ''}"
                f"({a.column or ''}{', ' + ','.join(map(str, a.levels)) if a.levels else ''})"
                for name, a in self.aggregates
            )
        )
        if self.having:
            parts.append("having " + " AND ".join(self.having))
        if self.order_by:
            parts.append("order by " + ", ".join(order.describe() for order in self.order_by))
        if self.limit is not None or self.offset:
            parts.append(f"limit {self.limit if self.limit is not None else 'all'} offset {self.offset}")
        return "; ".join(parts)
