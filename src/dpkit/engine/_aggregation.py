"""The bounded aggregation a backend runs, and the SQL that computes it (one text, two dialects).

Contribution bounding without a sort by person (the usual ``ROW_NUMBER() OVER (PARTITION BY
person ORDER BY random()) <= k``):

1. give every group an integer index, its rank in a salted pseudo-random order (a secret salt
   per release): public keys in a VALUES list, private keys ranked in SQL from the distinct
   groups present. The rows join that list, so the steps below compare small integers;
2. aggregate the filtered, clamped rows per person (a hash aggregation): the row count n, the
   sums, and the lowest and highest group index. People in one group are done. Only the people
   in several groups are hashed, and each keeps the g groups first in an order of their own (a
   salted hash of the person and the group: ``_keyed``), so each of their groups is equally
   likely to be kept; with g = 1 that group is found first and only its rows are aggregated,
   otherwise their rows are aggregated per (person, group) and each keeps the pairs up to their
   g-th least key (found in g rounds of MIN, which spill to disk where a window would not);
3. bound rows: a person with n > k rows in a group adds k to the count. To a SUM they add
   their total, clamped to k times the row bounds (``Moment.cap_total``): at most k rows'
   worth of clamped values, so the sensitivity is the same as keeping k rows, but nothing is
   discarded from a person whose total already fits. To the moments of a mean or a variance
   they add k / n of their sums (k times their mean: the same expectation as k random rows,
   without the sampling variance), which matches the k rows they count for.

Exactness: values are clamped, then converted to integers in a public unit ``2^e`` (the unit
chosen from the bounds alone, at most 2^30 units per row). A person's sum in a group is kept as
an integer-valued DOUBLE, exact up to 2^23 rows per person and group; after bounding, the
per-group sums are exact integer sums (DECIMAL(38)). The k / n scaling is rounded to an integer
per person, which moves a person's contribution by at most one unit (counted in the
sensitivity). Sums are therefore identical on every backend and free of floating-point
accumulation effects.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import sqlglot
from sqlglot import exp

from dpkit.engine._plan import Bin, Derived, GroupKey, Join, distinct

__all__ = [
    "AggregationPlan",
    "AggregationResult",
    "Histogram",
    "KEY_TABLE_THRESHOLD",
    "chooses_groups",
    "Moment",
    "QuantileGrid",
    "conditions_sql",
    "decimal_scale",
    "key_table_columns",
    "private_keys_sql",
    "quantile_grid",
    "render_sql",
    "unit_exponent",
]

#: Integer units per value bound: 2^30, so one row's value fits 31 bits and per-person sums fit int64.
_UNIT_BITS = 30


def unit_exponent(bound: float) -> int:
    """Exponent e of the integer unit 2^e for values of magnitude at most ``bound`` (public)."""
    return math.ceil(math.log2(max(bound, 2.0**-1000))) - _UNIT_BITS


@dataclass(frozen=True)
class Moment:
    """Per group: sum over bounded contributions of ((clamp(column) - shift) / 2^unit)^power, as an integer.

    ``fill`` replaces NULL and NaN (before clamping). ``power`` is 1 or 2. The released value is
    ``unit_scale * integer_sum`` (see ``unit_scale``).
    """

    name: str
    column: str
    low: float
    high: float
    shift: float
    power: int
    fill: float
    offset: float = 0.0
    #: Bound a heavy person's total, not their rows: the sum of a person with n > k rows in a
    #: group is clamped to [k * min(row low, 0), k * max(row high, 0)] (in units) instead of scaled
    #: by k / n. Same sensitivity (one person still moves the sum by at most k row bounds), and
    #: nothing is discarded from a person whose total is already within it. Used for SUM; the
    #: moments of a mean or a variance keep the k / n scaling, which matches their row count.
    cap_total: bool = False

    @property
    def bound(self) -> float:
        """Largest |(clamp(x) - shift)^power - offset| of one row."""
        reach = max(abs(self.low - self.shift), abs(self.high - self.shift))
        if self.power == 1:
            return reach + abs(self.offset)
        low = (
            0.0
            if self.low <= self.shift <= self.high
            else min(abs(self.low - self.shift), abs(self.high - self.shift)) ** 2
        )
        return max(abs(low - self.offset), abs(reach**2 - self.offset))

    @property
    def unit(self) -> int:
        return unit_exponent(self.bound)

    def total_caps(self, k: int) -> tuple[int, int]:
        """The integer range a person's per-group total is clamped to when ``cap_total``.

        One row's value in units is ``ROUND(clamp(x) / 2^unit)`` (half away from zero, in DuckDB
        and Spark alike), between the rounded ends of the bounds; k such rows stay within
        ``k`` times those ends (and 0, which a person with fewer rows can also reach).
        """

        def rounded(x: float) -> int:
            return int(math.copysign(math.floor(abs(x) + 0.5), x))

        low, high = rounded(self.low / self.unit_scale), rounded(self.high / self.unit_scale)
        return k * min(low, 0), k * max(high, 0)

    @property
    def unit_scale(self) -> float:
        return math.ldexp(1.0, self.unit)


@dataclass(frozen=True)
class Histogram:
    """Per group: weighted counts of clamp(column) by the nearest point of a public grid (NULL/NaN -> fill).

    The grid (:func:`quantile_grid`) has at most ``bins`` points: ``low``, ``high``, and the
    multiples of a round step strictly between them; bin j counts the clamped values whose nearest
    grid point is point j (``low`` and ``high`` themselves, where clamped values land, are bins 0
    and last). Weights are fixed-point integers: a person with n rows in a group adds
    round(c k 2^20 / n) to a bin holding c of their rows (``WEIGHT_BITS``).
    """

    name: str
    column: str
    low: float
    high: float
    bins: int
    fill: float
    log2: bool = False  # signed powers-of-two bins for automatic bounds (low/high/bins ignored)

    WEIGHT_BITS = 20

    def grid(self) -> QuantileGrid:
        """The grid whose points are this histogram's bins (and the quantiles' candidates)."""
        return quantile_grid(self.low, self.high, self.bins)


#: Steps of the quantile grid are m 10^e for these mantissas: a step below 1 divides 1 (1/8, 1/5,
#: 1/4, 1/2 of a power of ten), so whole numbers, and decimals of as many places as the step has,
#: are grid points; consecutive steps are at most twice apart.
_GRID_MANTISSAS = (Fraction(1), Fraction(5, 4), Fraction(2), Fraction(5, 2), Fraction(5))


@dataclass(frozen=True)
class QuantileGrid:
    """The public grid of a quantile histogram: ``points`` (low, the multiples of ``step`` strictly
    between low and high, high), strictly increasing."""

    step: Fraction
    #: low / step - first + 3/2 for ``first`` the multiple that is point 1: the nearest point of a
    #: value v in (low, high) is point floor((v - low) / step + offset), capped at the last one
    #: (floor(v / step + 1/2) - first + 1; see ``_bin_expression``).
    offset: Fraction
    points: tuple[float, ...]


@functools.lru_cache(maxsize=1024)
def quantile_grid(low: float, high: float, most: int) -> QuantileGrid:
    """The finest grid of at most ``most`` points for the bounds [low, high] (public: bounds only).

    Its step is the smallest m 10^e (m in 1, 1.25, 2, 2.5, 5) that leaves at most ``most`` - 2
    multiples of it strictly inside (low, high); the points are those multiples, each the double
    nearest to its exact value (so 0.3 is 0.3, not 3 * 0.1), with low and high at the ends.
    Whole numbers and short decimals are grid points whenever the step divides them: a value that
    many rows share is then a candidate of its own and can be released exactly.
    """
    if not (low < high and most >= 3):
        raise ValueError(f"no quantile grid for [{low}, {high}] with {most} points")
    lo, hi = Fraction(low), Fraction(high)
    exponent = math.floor(math.log10((high - low) / (most - 1))) - 1  # (a decade below the smallest fit)
    while True:
        for mantissa in _GRID_MANTISSAS:
            step = mantissa * Fraction(10) ** exponent
            first, last = math.floor(lo / step) + 1, math.ceil(hi / step) - 1  # multiples strictly inside
            if last - first + 3 > most:
                continue
            # (as doubles too: a multiple within half an ulp of a bound would repeat it)
            first += float(first * step) <= low
            last -= float(last * step) >= high
            inside = tuple(float(i * step) for i in range(first, last + 1))
            # Point j >= 1 is multiple first + j - 1; v's nearest multiple is floor(v / step + 1/2).
            return QuantileGrid(step, lo / step - first + Fraction(3, 2), (low, *inside, high))
        exponent += 1


@dataclass(frozen=True)
class AggregationPlan:
    """Everything a backend needs to compute the noiseless bounded aggregates of one query."""

    table: str
    joins: tuple[Join, ...]
    where: tuple[str, ...]
    groups: tuple[GroupKey, ...]
    keys: tuple[tuple[Any, ...], ...] | None
    person: str | None
    rows_per_group: int
    groups_per_person: int
    moments: tuple[Moment, ...] = ()
    histogram: Histogram | None = None
    salt: str = ""
    #: Group columns of a floating type: their zero is written one way (see ``_group_expression``).
    float_groups: frozenset[str] = frozenset()
    #: The 32-bit (FLOAT) ones among them: their public keys are FLOATs in the key list, so that a
    #: key 0.1 is the column's 0.1 (as a DOUBLE the column's value is 0.10000000149011612).
    real_groups: frozenset[str] = frozenset()
    #: The person column's kind for the group-choice hash (``_person_hash``): "integer" (integer types
    #: and DECIMAL(p, 0): arithmetic), "float" (FLOAT, DOUBLE: its -0.0 is read as 0.0 and every NaN
    #: alike, so that one person has one text) or "text" (hashed by its text).
    person_kind: str = "text"
    #: Columns computed from each row (``Query.derived``), each with its type as the backend names it.
    derived: tuple[Derived, ...] = ()
    derived_types: tuple[str, ...] = ()

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(g.name if isinstance(g, Bin) else g for g in self.groups)

    @property
    def indexed_keys(self) -> bool:
        """Whether the group index list is the public keys as a VALUES list (see ``_render_bounded``).

        Always, given public keys; otherwise (private keys) the list is built in SQL from the groups
        present. Either path returns each group's rank, never the value the engine read: a key the
        engine matches (a date on a TIMESTAMP column, 0.1 on a DECIMAL, a UUID's text) is released
        under the key as given, whatever Python's equality says.
        """
        return bool(self.groups) and bool(self.keys)

    @property
    def null_key_columns(self) -> frozenset[int]:
        """Positions of the group columns whose public keys are all NULL (matched by IS NULL: a
        list column of NULLs alone would have no type to compare with)."""
        keys = self.keys or ()
        return frozenset(i for i in range(len(self.groups)) if keys and all(key[i] is None for key in keys))

    @functools.cached_property
    def key_order(self) -> tuple[tuple[Any, ...], ...]:
        """The distinct public keys in a salted pseudo-random order; the VALUES list gives each its rank.

        The rank is each key's group index (and, for a person in more than g key groups, the group
        in that person's own order: see ``_keyed``). The order depends on the salt (secret, fresh
        per release) and the keys only, never on the data; computing it here keeps the hash out of
        the SQL, so the engines only compare small integers.
        """
        return _salted_order(self.salt, self.keys or ())

    @property
    def bounds_groups(self) -> bool:
        """Whether some person could be in more groups than allowed (needs the ranking step)."""
        return chooses_groups(self.person, self.groups, self.keys, self.groups_per_person)


def chooses_groups(
    person: str | None, groups: tuple[Any, ...], keys: tuple[Any, ...] | None, groups_per_person: int
) -> bool:
    """Whether a person could be in more groups than ``groups_per_person`` allows, so that the bounding
    chooses which groups they keep (by ``_keyed``): per person, grouped, and not within the public keys."""
    if person is None or not groups:
        return False
    return keys is None or groups_per_person < len(keys)


def decimal_scale(kind: str) -> int | None:
    """The scale of a DECIMAL type name (DuckDB's 'DECIMAL(18,8)' or Spark's 'decimal(18,8)'), else None."""
    match = re.fullmatch(r"decimal\(\s*\d+\s*,\s*(\d+)\s*\)", kind.strip().lower())
    return int(match.group(1)) if match else None


@functools.lru_cache(maxsize=4)
def _salted_order(salt: str, keys: tuple[tuple[Any, ...], ...]) -> tuple[tuple[Any, ...], ...]:
    """:attr:`AggregationPlan.key_order`, shared by the plans of one release (same salt, same keys)."""
    salted = hashlib.sha256(f"{salt}|".encode())

    def rank(key: tuple[Any, ...]) -> tuple[bytes, str]:
        # An injective encoding of the key (NULL "n", a value "v<length>:<repr>") breaks hash ties.
        encoded = "".join("n" if v is None else f"v{len(text)}:{text}" for v in key for text in (repr(v),))
        digest = salted.copy()
        digest.update(encoded.encode())
        return digest.digest(), encoded

    return tuple(sorted(distinct(list(keys)), key=rank))


@dataclass(frozen=True)
class AggregationResult:
    """Noiseless bounded aggregates, one row per group present in the data (keys as tuples).

    ``columns``: ``rows`` (bounded row count), ``persons`` (people after bounding) and one
    integer column per moment; ``histogram``: per group, a dict bin index -> weighted count.
    """

    keys: list[tuple[Any, ...]]
    columns: dict[str, list[int]]
    histogram: list[dict[int, int]] | None = None


# -- SQL ----------------------------------------------------------------------------------------


def _literal(value: Any) -> str:
    # Fast paths for the common key types (a public key list can hold 1e5 values; sqlglot takes
    # ~30 us per literal): the same text sqlglot writes (tests/engine/test_sql.py checks it).
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is str and "\x00" not in value:
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, float) and not math.isfinite(value):
        # sqlglot writes NaN as NULL (a NaN key would match the NULL group) and inf as a name.
        text = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return f"CAST('{text}' AS DOUBLE)"
    return exp.convert(value).sql(dialect="duckdb")


def _key_literal(value: Any, real: bool = False) -> str:
    """A public key as a literal of the list ``__kv``: a float is a DOUBLE (a plain 0.5 would be a
    DECIMAL(2, 1), and comparing a wide DECIMAL column in that type overflows on large values), or
    a FLOAT for a ``real`` (32-bit) column."""
    if real and type(value) in (float, int):
        number = float(value)
        text = (
            repr(number) if math.isfinite(number) else "NaN" if math.isnan(number) else f"{'-' * (number < 0)}Infinity"
        )
        return f"CAST('{text}' AS FLOAT)"
    if type(value) is float and math.isfinite(value):
        return f"CAST('{value!r}' AS DOUBLE)"
    if getattr(value, "nanosecond", 0):  # a pandas Timestamp finer than a microsecond (naive: checked)
        return f"CAST('{value.isoformat(sep=' ')}' AS TIMESTAMP_NS)"
    return _literal(value)


def _quote(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="duckdb")  # type: ignore[no-untyped-call]


def _clamped(column: str, low: float, high: float, fill: float) -> str:
    value = f"CAST({_quote(column)} AS DOUBLE)"
    return (
        f"(CASE WHEN {value} IS NULL OR isnan({value}) THEN {_literal(fill)} "
        f"ELSE LEAST(GREATEST({value}, {_literal(low)}), {_literal(high)}) END)"
    )


def repeated_keys_sql(table: str, columns: tuple[str, ...]) -> str:
    """A query with a row when some non-NULL combination of ``columns`` appears twice in ``table``."""
    names = ", ".join(_quote(c) for c in columns)
    present = " AND ".join(f"{_quote(c)} IS NOT NULL" for c in columns)
    return f"SELECT 1 FROM {_quote(table)} WHERE {present} GROUP BY {names} HAVING COUNT(*) > 1 LIMIT 1"


def _group_expression(group: GroupKey, float_groups: frozenset[str] = frozenset()) -> str:
    if not isinstance(group, Bin):
        if group in float_groups:
            # -0.0 and 0.0 are one group, and so are NaN and -NaN; which form a group shows (and so
            # its text, which the salted ranking hashes) must not depend on which rows are present.
            column = _quote(group)
            return f"(CASE WHEN {column} = 0 OR isnan({column}) THEN abs({column}) ELSE {column} END)"
        return _quote(group)
    value = f"CAST({_quote(group.column)} AS DOUBLE)"
    labels = group.labels
    cases = []
    for i, (a, b) in enumerate(zip(group.edges, group.edges[1:], strict=False)):
        upper = "<=" if i == len(labels) - 1 else "<"
        cases.append(f"WHEN {value} >= {_literal(a)} AND {value} {upper} {_literal(b)} THEN {_literal(labels[i])}")
    return "(CASE " + " ".join(cases) + " END)"


def _key_filter(plan: AggregationPlan) -> list[str]:
    """Conditions on the group aliases __g0, __g1, ... keeping only the real bins (private keys).

    Row-level privacy: a HAVING after the aggregation (the same result as filtering rows first).
    Per person: the filter on the list of groups present, built in SQL. (Public keys are matched
    by the join to their list instead: see ``_key_list``.)
    """
    return [f"__g{i} IS NOT NULL" for i, g in enumerate(plan.groups) if isinstance(g, Bin)]


def _bin_expression(histogram: Histogram) -> str:
    value = _clamped(histogram.column, histogram.low, histogram.high, histogram.fill)
    if histogram.log2:
        raw = f"CAST({_quote(histogram.column)} AS DOUBLE)"
        # 0 -> 0; x > 0 -> 1 + clip(floor(log2 x), -40, 62) + 40; x < 0 the negative of that.
        magnitude = f"(LEAST(GREATEST(FLOOR(LOG2(ABS({raw}))), -40), 62) + 41)"
        return (
            f"(CASE WHEN {raw} IS NULL OR isnan({raw}) OR {raw} = 0 THEN 0 "
            f"WHEN {raw} > 0 THEN CAST({magnitude} AS BIGINT) ELSE -CAST({magnitude} AS BIGINT) END)"
        )
    grid = histogram.grid()
    last = len(grid.points) - 1
    low, high = _literal(histogram.low), _literal(histogram.high)
    # Clamped values at the bounds are the bounds' bins; the others go to their nearest grid point,
    # floor((v - low) / step + offset) (v - low keeps the quotient small: no overflow of BIGINT).
    nearest = f"FLOOR(({value} - {low}) / {_literal(float(grid.step))} + {_literal(float(grid.offset))})"
    return (
        f"(CASE WHEN {value} <= {low} THEN 0 WHEN {value} >= {high} THEN {last} "
        f"ELSE CAST(LEAST({nearest}, {last}) AS BIGINT) END)"
    )


#: Above this many public keys a backend may pass the key list as a registered table instead of
#: a VALUES list in the SQL text (parsing is ~25 us per VALUES row in DuckDB, more in sqlglot).
KEY_TABLE_THRESHOLD = 256


def key_table_columns(plan: AggregationPlan) -> dict[str, list[Any]] | None:
    """The indexed key list as columns ``__k0, __k1, ..., __ki`` (rank), for a backend to register.

    None when the plan has no indexed keys or too few for a table to pay off
    (:data:`KEY_TABLE_THRESHOLD`); :func:`render_sql` then writes a VALUES list.
    """
    if not plan.indexed_keys or len(plan.key_order) <= KEY_TABLE_THRESHOLD:
        return None
    columns: dict[str, list[Any]] = {}
    for i in range(len(plan.groups)):
        if i in plan.null_key_columns:
            continue
        values = [key[i] for key in plan.key_order]
        if any(getattr(v, "nanosecond", 0) for v in values):
            return None  # (nanosecond keys: typed as such in VALUES, see _key_literal)
        if len({type(v) for v in values if v is not None}) > 1:
            # Mixed kinds (a date among datetimes): Arrow would type the column from the first
            # key and silently cut the others (every datetime to its day); VALUES unifies as SQL does.
            return None
        group = plan.groups[i]
        if isinstance(group, str) and group in plan.real_groups:
            import pyarrow as pa

            try:  # a FLOAT column's keys are FLOATs (see _key_literal)
                columns[f"__k{i}"] = pa.array(values, pa.float32())
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                return None
            continue
        columns[f"__k{i}"] = values
    columns["__ki"] = list(range(len(plan.key_order)))
    return columns


def source_sql(table: str, joins: tuple[Join, ...], derived: tuple[Derived, ...] = ()) -> str:
    """The FROM clause of a query over ``table``, its ``joins`` and its ``derived`` columns.

    Derived columns are computed in a subquery named as the table (``SELECT *, TRY(expression) AS
    name``): every later step reads them as columns. TRY makes a row on which one fails NULL there
    instead of failing the query (one person's value must not fail a release), as in a filter.
    A derived column that reads others is computed in a subquery around theirs (``derived_layers``).
    """
    source = _quote(table)
    for join in joins:
        source += f" JOIN {_quote(join.table)} USING ({', '.join(_quote(c) for c in join.on)})"
    for layer in derived_layers(derived):
        computed = ", ".join(f"TRY({d.expression}) AS {_quote(d.name)}" for d in layer)
        source = f"(SELECT *, {computed} FROM {source}) AS {_quote(table)}"
    return source


def derived_layers(derived: tuple[Derived, ...]) -> list[tuple[Derived, ...]]:
    """``derived`` in layers: the first reads only the tables' columns, each next one also the
    derived columns of the layers before it (a column reads only columns defined before it).

    >>> [[d.name for d in layer] for layer in derived_layers(
    ...     (Derived("a", "x + 1"), Derived("b", "y * 2"), Derived("c", "a + b"), Derived("d", "x - c")))]
    [['a', 'b'], ['c'], ['d']]
    """
    depth: dict[str, int] = {}  # case-folded name -> its layer
    layers: list[list[Derived]] = []
    for column in derived:
        references = sqlglot.parse_one(column.expression, read="duckdb").find_all(exp.Column)
        layer = max((depth[r.name.casefold()] + 1 for r in references if r.name.casefold() in depth), default=0)
        depth[column.name.casefold()] = layer
        if layer == len(layers):
            layers.append([])
        layers[layer].append(column)
    return [tuple(layer) for layer in layers]


def derived_sql(table: str, joins: tuple[Join, ...], derived: tuple[Derived, ...]) -> str:
    """A query whose columns are the ``derived`` columns (for their types: bind it, never run it)."""
    columns = ", ".join(_quote(d.name) for d in derived)
    return f"SELECT {columns} FROM {source_sql(table, joins, derived)}"


def _source(plan: AggregationPlan) -> str:
    return source_sql(plan.table, plan.joins, plan.derived)


def conditions_sql(plan: AggregationPlan) -> str | None:
    """A query whose columns are ``plan``'s WHERE conditions, over its tables (for their types), or None."""
    if not plan.where:
        return None
    return f"SELECT {', '.join(f'({w}) AS __c{i}' for i, w in enumerate(plan.where))} FROM {_source(plan)}"


def render_sql(plan: AggregationPlan, key_table: str | None = None, *, rank_by_window: bool = False) -> str:
    """The bounded aggregation as one DuckDB-dialect statement (backends transpile it).

    ``key_table``: a table the backend filled with the key list, read instead of computing it in
    the statement (same rows, same ranks): for indexed public keys, :func:`key_table_columns`
    (otherwise written as VALUES); for private keys, the result of :func:`private_keys_sql`
    (otherwise a MATERIALIZED CTE, whose size DuckDB cannot see when it orders the joins).
    ``rank_by_window``: people keep their g groups of least key by a window per person instead of
    g rounds of MIN (see :func:`_least_keys`; the same groups): for Spark, which spills windows
    and pays a shuffle per round.
    """
    base, groups, keep = _rows(plan)
    if plan.person is None:
        # One row per person: every weight is 1 and each row is in one group.
        sums = [f"CAST(SUM(CAST(__v{i} AS BIGINT)) AS DECIMAL(38, 0)) AS m{i}" for i in range(len(plan.moments))]
        if plan.indexed_keys:
            return _render_row_level_indexed(plan, base, groups, key_table)
        having = (" HAVING " + " AND ".join(keep)) if keep else ""
        outputs = [*groups, "COUNT(*) AS rows", "COUNT(*) AS persons", *sums]
        by = groups[:]
        if plan.histogram is not None:
            outputs = [*groups, "__b", f"COUNT(*) * {2**Histogram.WEIGHT_BITS} AS w"]
            by.append("__b")
        grouping = f" GROUP BY {', '.join(by)}{having}" if by else ""
        return f"WITH __base AS ({base}) SELECT {', '.join(outputs)} FROM __base{grouping}"

    return _render_bounded(plan, base, groups, keep, key_table, rank_by_window)


def private_keys_sql(plan: AggregationPlan) -> str | None:
    """The query of the private groups present, ranked (``__k0, ..., __kh, __ki``: see
    :func:`_render_bounded`), for a backend to store in a table and pass to :func:`render_sql` as
    ``key_table``; None for plans that rank no private keys (public keys, no groups, no person).
    Reads the data: run it after the debit only."""
    if plan.person is None or not plan.groups or plan.indexed_keys:
        return None
    base, groups, keep = _rows(plan)
    return f"WITH __raw AS ({base}) {_private_key_list(groups, keep, plan.salt)}"


def _rows(plan: AggregationPlan) -> tuple[str, list[str], list[str]]:
    """The filtered rows with their person, group, value and bin aliases (a SELECT), the group
    aliases, and the key-set conditions the groups must meet (private keys; empty otherwise)."""
    groups = [f"__g{i}" for i in range(len(plan.groups))]
    select = [
        f"{_group_expression(g, plan.float_groups)} AS {name}" for g, name in zip(plan.groups, groups, strict=True)
    ]
    person = _quote(plan.person) if plan.person is not None else None
    if person is not None:
        value = person
        if plan.person_kind == "float":  # one text (see _person_hash) for 0.0 and -0.0, which are one person
            value = f"(CASE WHEN {person} = 0 OR isnan({person}) THEN abs({person}) ELSE {person} END)"
        select.insert(0, f"{value} AS __pid")
    for i, moment in enumerate(plan.moments):
        clamped = _clamped(moment.column, moment.low, moment.high, moment.fill)
        shifted = f"({clamped} - {_literal(moment.shift)})" if moment.shift else clamped
        powered = shifted if moment.power == 1 else f"({shifted} * {shifted})"
        if moment.offset:
            powered = f"({powered} - {_literal(moment.offset)})"
        # An integer number of units, kept as a DOUBLE: one row is at most 2^30 units, so a
        # person's sum in a group is exact in double precision up to 2^23 rows, and a DOUBLE
        # sum keeps DuckDB's per-person hash table much lighter than a 128-bit integer sum.
        select.append(f"ROUND({powered} / {_literal(moment.unit_scale)}) AS __v{i}")
    if plan.histogram is not None:
        select.append(f"{_bin_expression(plan.histogram)} AS __b")
    source = _source(plan)
    # TRY: a condition that fails on some rows (a bad cast, an overflow) excludes those rows
    # instead of failing the query: an error raised by one person's rows would reveal them.
    conditions = [f"TRY({w})" for w in plan.where]
    # Indexed public keys are filtered by the join to their list (below); the conditions are only
    # written where they are used (a key list can be long).
    keep = [] if plan.indexed_keys else _key_filter(plan)
    if person is not None:
        conditions.insert(0, f"{person} IS NOT NULL")  # rows without a person are dropped (documented)
    where = (" WHERE " + " AND ".join(conditions)) if conditions else ""
    return f"SELECT {', '.join(select or ['1 AS __one'])} FROM {source}{where}", groups, keep


def _render_row_level_indexed(plan: AggregationPlan, base: str, groups: list[str], key_table: str | None) -> str:
    """The row-level path with indexed public keys: each group's rank first, then its aggregates.

    The rows are aggregated by value first; each distinct value then joins the key list and keeps
    only the matching key of lowest rank. Two keys the engine compares equal (a date and a
    datetime on a TIMESTAMP column, a UUID's text in two cases) thus never count one row twice:
    every row is in at most one released group, as the row-level sensitivity requires.
    """
    histogram = plan.histogram is not None
    values = [*groups, *(["__b"] if histogram else [])]
    sums = [f"CAST(SUM(CAST(__v{i} AS BIGINT)) AS DECIMAL(38, 0)) AS __s{i}" for i in range(len(plan.moments))]
    hits = ", ".join(f"__vals.{name}" for name in values)
    carried = ["__n", *(f"__s{i}" for i in range(len(plan.moments)))]
    ctes = [
        f"__base AS ({base})",
        _key_list(plan, key_table),
        f"__vals AS (SELECT {', '.join([*values, 'COUNT(*) AS __n', *sums])} FROM __base GROUP BY {', '.join(values)})",
        f"__hit AS (SELECT {hits}, {', '.join(f'__vals.{c}' for c in carried)}, __kv.__ki, "
        f"MIN(__kv.__ki) OVER (PARTITION BY {', '.join(f'__vals.{g}' for g in groups)}) AS __first "
        f"FROM __vals JOIN __kv ON {_key_match(plan, '__vals', groups)})",
    ]
    if histogram:
        outputs = ["__ki", "__b", f"SUM(__n) * {2**Histogram.WEIGHT_BITS} AS w"]
        by = "__ki, __b"
    else:
        outputs = ["__ki", "SUM(__n) AS rows", "SUM(__n) AS persons"]
        outputs += [f"CAST(SUM(__s{i}) AS DECIMAL(38, 0)) AS m{i}" for i in range(len(plan.moments))]
        by = "__ki"
    return f"WITH {', '.join(ctes)} SELECT {', '.join(outputs)} FROM __hit WHERE __ki = __first GROUP BY {by}"


def _key_list(plan: AggregationPlan, key_table: str | None) -> str:
    """The CTE ``__kv(__k0, ..., __ki)``: the indexed public keys, each with its rank in ``key_order``."""
    names = [*(f"__k{i}" for i in range(len(plan.groups))), "__ki"]
    if key_table is not None:  # (a column of NULL keys alone is not in the table: never compared)
        read = [f"NULL AS {n}" if n[3:].isdigit() and int(n[3:]) in plan.null_key_columns else n for n in names]
        return f"__kv AS (SELECT {', '.join(read)} FROM {_quote(key_table)})"
    real = [isinstance(g, str) and g in plan.real_groups for g in plan.groups]
    literals = ", ".join(
        "(" + ", ".join([*(_key_literal(v, r) for v, r in zip(key, real, strict=True)), str(rank)]) + ")"
        for rank, key in enumerate(plan.key_order)
    )
    return f"__kv AS (SELECT * FROM (VALUES {literals}) AS __kv({', '.join(names)}))"


def _key_match(plan: AggregationPlan, rows: str, groups: list[str]) -> str:
    """The join condition of ``rows``' group aliases to the key list ``__kv`` (NULL matches NULL)."""
    return " AND ".join(
        f"{rows}.{name} IS NULL" if i in plan.null_key_columns else f"{rows}.{name} IS NOT DISTINCT FROM __kv.__k{i}"
        for i, name in enumerate(groups)
    )


def _private_key_list(groups: list[str], keep: list[str], salt: str) -> str:
    """The distinct groups of ``__raw`` that meet ``keep``, as ``__k0, ..., __kh, __ki`` (a SELECT).

    ``__kt``, the group's salted md5, ranks it (``__ki``); ``__kh``, an integer of its first digits,
    enters each person's order of their groups (see :func:`_keyed`). An integer: rows that carry
    text through the per-person steps make DuckDB run out of a small memory limit.
    """
    encoded = _encoded(groups)
    present = f"SELECT DISTINCT {', '.join(groups)} FROM __raw" + (f" WHERE {' AND '.join(keep)}" if keep else "")
    renamed = ", ".join(f"{name} AS __k{i}" for i, name in enumerate(groups))
    keys = ", ".join(f"__k{i}" for i in range(len(groups)))
    return (
        f"SELECT {keys}, {_hex_integer('__kt', _GROUP_HASH_DIGITS)} AS __kh, "
        "CAST(ROW_NUMBER() OVER (ORDER BY __kt, __ke) - 1 AS INTEGER) AS __ki FROM (SELECT "
        f"{renamed}, md5(concat({_literal(salt)}, {encoded})) AS __kt, {encoded} AS __ke "
        f"FROM ({present}) AS __present) AS __hashed"
    )


def _encoded(names: list[str]) -> str:
    """An injective text encoding of a group tuple: NULL is "n", a value is "v<length>:<text>".

    No two distinct groups (NULL vs the text '<null>', ('a|b', 'c') vs ('a', 'b|c')) share an
    encoding, so ties of the salted hash below are broken by the encoding itself.
    """
    parts = [
        f"CASE WHEN {name} IS NULL THEN 'n' ELSE concat('v', CAST(length(CAST({name} AS VARCHAR)) AS VARCHAR), "
        f"':', CAST({name} AS VARCHAR)) END"
        for name in names
    ]
    return f"concat({', '.join(parts)})"


#: Hex digits of a private group's hash ``__kh`` (of its salted md5): 60 bits, an integer in a BIGINT.
_GROUP_HASH_DIGITS = 15
#: Hex digits of a person's hash from the md5 of their text: 28 bits, below the prime.
_PERSON_HASH_DIGITS = 7
#: The prime modulus of the group-choice hash (2^31 - 1): products of two residues fit a BIGINT.
_PRIME = 2**31 - 1
_ORDER_SHIFT = 2**31
#: A second prime below 2^31 (2^31 - 19): an integer person's residues modulo both tell apart ids
#: up to about 2^62.
_SECOND_PRIME = 2**31 - 19


def _hex_integer(text: str, digits: int) -> str:
    """The integer of the first ``digits`` hex digits of ``text`` (a lowercase md5), digit by digit in
    BIGINT: SQL both engines compute alike (Spark does not read DuckDB's '0x' text, and multiplies INT
    by INT in INT)."""
    terms = [
        f"(CAST(instr('0123456789abcdef', substr({text}, {i + 1}, 1)) AS BIGINT) - 1) * {16 ** (digits - 1 - i)}"
        for i in range(digits)
    ]
    return f"CAST(({' + '.join(terms)}) AS BIGINT)"


def choice_constants(salt: str) -> tuple[int, ...]:
    """Six residues in [1, prime) from ``salt``: the secret coefficients of the group-choice hash."""
    digest = hashlib.sha256(f"{salt}|group choice".encode()).digest()
    return tuple(1 + int.from_bytes(digest[4 * i : 4 * i + 4], "big") % (_PRIME - 1) for i in range(6))


def _person_hash(plan: AggregationPlan, person: str) -> str:
    """A person's hash, a residue modulo the prime, from the salt and the person only (SQL, BIGINT).

    An integer-valued person column (integers, DECIMAL(p, 0)) is reduced modulo the prime and mixed
    by arithmetic; any other type hashes its text (md5), which both engines write alike for the
    types they accept (see ``check_spark_keys``).
    """
    c = choice_constants(plan.salt)
    if plan.person_kind == "integer":
        # Residues modulo p and a second prime q (x % m computed in the column's own type, in (-m, m),
        # then made non-negative in BIGINT): ids that differ by a multiple of p alone still differ.
        residues = [f"((CAST({person} % {m} AS BIGINT) + {m}) % {m})" for m in (_PRIME, _SECOND_PRIME)]
        return f"(({residues[0]} * {c[0]} % {_PRIME} + {residues[1]} * {c[5]} % {_PRIME} + {c[1]}) % {_PRIME})"
    text = f"md5(concat({_literal(plan.salt)}, ':', CAST({person} AS VARCHAR)))"
    return _hex_integer(text, _PERSON_HASH_DIGITS)


def _keyed(plan: AggregationPlan, source: str, table: str, names: list[str], person_hash: str) -> str:
    """``SELECT names, __o FROM source`` as a subquery (each name read from ``table``): ``__o`` is, per
    (person, group) row, the integer whose order is the person's own order of their groups (BIGINT).

    ``u = h(person) + c * group (mod p)``, where the group is its rank in the public key list or
    (private keys) its salted hash ``__kh``, never its rank among the groups present (that
    rank depends on other people's rows). ``u`` then goes through two rounds of x -> x^5 (a
    permutation modulo p, as 5 does not divide p - 1) with an affine step between: for a person, the
    order of the results is a pseudo-random order of their groups, different for each person and
    each salt, and two groups never tie (the map is one-to-one in the group). The group index
    ``__ki`` (below 2^31) is added in the low bits: the key is unique among a person's groups.
    Each round is its own subquery, so that no engine computes a power's operand more than once.
    """
    c = choice_constants(plan.salt)
    index = f"CAST({table}.__ki AS BIGINT)"
    group = index if plan.indexed_keys else f"({table}.__kh % {_PRIME})"
    selected = ", ".join(f"{table}.{name} AS {name}" for name in names)
    listed = ", ".join(names)
    mixed = f"({person_hash} + {group} * {c[2]} % {_PRIME}) % {_PRIME}"
    u = f"SELECT {selected}, {index} AS __i, {mixed} AS __u FROM {source}"
    v = f"SELECT {listed}, __i, ({_fifth_power('__u')} * {c[3]} + {c[4]}) % {_PRIME} AS __v FROM ({u}) AS __round1"
    return f"(SELECT {listed}, {_fifth_power('__v')} * {_ORDER_SHIFT} + __i AS __o FROM ({v}) AS __round2)"


#: Up to this many groups per person, the rounds of :func:`_least_keys` are written out one CTE
#: each (DuckDB spills them under the smallest memory limits); above, a recursive CTE, whose plan
#: does not grow with g (written out, DuckDB's planning took 0.6 s at g = 50 and 21 s at g = 200).
CHAINED_ROUNDS = 16


def _least_keys(table: str, g: int, columns: list[str], *, rank_by_window: bool) -> list[str]:
    """CTEs ending in ``__kept(columns)``: the rows of ``table`` (one per person and group, with the
    group's key ``__o``, unique among the person's groups) whose key is among their person's g least.

    By default the g-th least key of each person in more than g groups is found in g rounds of
    MIN, each a hash join and a hash aggregation, which DuckDB spills to disk (a window ranking
    each person's groups does not: the query failed under a small memory limit). Up to
    :data:`CHAINED_ROUNDS` the rounds are one CTE each; above, one recursive CTE (the statement
    must then open with ``WITH RECURSIVE``). ``rank_by_window``: by ``ROW_NUMBER()`` per person
    instead, for an engine that spills windows (Spark, where each round would cost a shuffle).
    All keep the same rows.
    """
    listed = ", ".join(f"{table}.{c}" for c in columns)
    if rank_by_window:
        return [
            f"__kept AS (SELECT {listed} FROM (SELECT {table}.*, ROW_NUMBER() OVER (PARTITION BY __pid "
            f"ORDER BY __o) AS __rank FROM {table}) AS {table} WHERE __rank <= {g})"
        ]
    above = _ORDER_SHIFT * _PRIME  # every key is below (p - 1) * 2^31 + 2^31
    ctes = [f"__c AS (SELECT __pid, MIN(__o) AS __t, COUNT(*) AS __c FROM {table} GROUP BY __pid)"]
    if g <= CHAINED_ROUNDS:  # __t<j>: the j-th least key of each person in more than g groups
        ctes.append(f"__t1 AS (SELECT __pid, __t FROM __c WHERE __c > {g})")
        ctes += [
            f"__t{j} AS (SELECT {table}.__pid, MIN({table}.__o) AS __t FROM {table} JOIN __t{j - 1} "
            f"ON {table}.__pid = __t{j - 1}.__pid AND {table}.__o > __t{j - 1}.__t GROUP BY {table}.__pid)"
            for j in range(2, g + 1)
        ]
        last = f"SELECT __pid, __t FROM __t{g}"
    else:  # __r: (person, j-th least key, j) for j = 1..g, people in more than g groups only
        ctes.append(
            f"__r(__pid, __t, __j) AS (SELECT __pid, __t, 1 FROM __c WHERE __c > {g} UNION ALL "
            f"SELECT {table}.__pid, MIN({table}.__o), __r.__j + 1 FROM {table} JOIN __r ON {table}.__pid = __r.__pid "
            f"AND {table}.__o > __r.__t WHERE __r.__j < {g} GROUP BY {table}.__pid, __r.__j)"
        )
        last = f"SELECT __pid, __t FROM __r WHERE __j = {g}"
    ctes.append(f"__th AS ({last} UNION ALL SELECT __pid, {above} AS __t FROM __c WHERE __c <= {g})")
    ctes.append(
        f"__kept AS (SELECT {listed} FROM {table} JOIN __th ON {table}.__pid = __th.__pid AND {table}.__o <= __th.__t)"
    )
    return ctes


def _fifth_power(x: str) -> str:
    """x^5 modulo the prime for a residue ``x`` (each product of two residues fits a BIGINT)."""
    square = f"({x} * {x} % {_PRIME})"
    return f"({square} * {square} % {_PRIME} * {x} % {_PRIME})"


def _render_bounded(
    plan: AggregationPlan,
    raw: str,
    groups: list[str],
    keep: list[str],
    key_table: str | None = None,
    rank_by_window: bool = False,
) -> str:
    """The per-person path of :func:`render_sql`: bound each person, then aggregate by group index.

    Every group is first given an integer index ``__ki``: its rank in a salted pseudo-random order
    of the groups. Public keys carry it in a small VALUES list (``AggregationPlan.key_order``);
    otherwise the list is built in SQL from the distinct groups present, ranked by a salted md5 of
    their injective encoding (and carry that hash as an integer, ``__kh``). Either way, whether one
    group ranks below another depends on the salt and the two groups only, never on the data. The
    rows join the list (the join is also the key filter), so every per-person step below compares
    small integers instead of group values.

    Groups per person are bounded without a second pass over everyone: one hash aggregation per
    person computes the row count, the sums and the lowest and highest group index. A person whose
    rows are all in one group (lowest = highest, the common case when grouping by an attribute of
    the person) is then complete. The people in several groups (``__m``, with their hash) keep the
    g groups of least key in their own order (``_keyed``): with g = 1 a pass over their rows finds
    each one's group (``__pick``) and a second aggregates that group's rows only; with g > 1 (and
    with ``rank_by_window``, at any g) their rows are aggregated per (person, group) and the pairs
    up to each one's g-th least key are kept (:func:`_least_keys`).

    Private keys are ranked in a MATERIALIZED CTE, or read from ``key_table`` where the backend
    stored :func:`private_keys_sql`'s rows first (DuckDB: its planner then knows their number).
    """
    k, g = plan.rows_per_group, plan.groups_per_person
    recursive = plan.bounds_groups and g > CHAINED_ROUNDS and not rank_by_window  # (see _least_keys)
    head = "WITH RECURSIVE" if recursive else "WITH"
    read_by_rounds = "" if rank_by_window else " MATERIALIZED"  # (the per-(person, group) table _least_keys reads)
    values = [f"__v{i}" for i in range(len(plan.moments))] + (["__b"] if plan.histogram is not None else [])
    ctes = [f"__raw AS NOT MATERIALIZED ({raw})"]
    key_names = [f"__k{i}" for i in range(len(groups))]
    if not groups:
        base = f"SELECT __pid, 0 AS __ki{''.join(', ' + v for v in values)} FROM __raw"
    else:
        if plan.indexed_keys:
            ctes.append(_key_list(plan, key_table))
        elif key_table is not None:  # the backend stored private_keys_sql's rows
            ctes.append(f"__kv AS (SELECT {', '.join([*key_names, '__kh', '__ki'])} FROM {_quote(key_table)})")
        else:
            ctes.append(f"__kv AS MATERIALIZED ({_private_key_list(groups, keep, plan.salt)})")
        # (Private keys: each row also carries its group's hash __kh, which only the rows of people in
        # several groups read: engines drop it from the other reads of __base.)
        hashed = [] if plan.indexed_keys else ["__kv.__kh"]
        carried = ", ".join(["__raw.__pid", "__kv.__ki", *hashed, *(f"__raw.{v}" for v in values)])
        base = f"SELECT {carried} FROM __raw JOIN __kv ON {_key_match(plan, '__raw', groups)}"
    ctes.append(f"__base AS NOT MATERIALIZED ({base})")
    # (a histogram's pairs of person and group carry the group's hash too: one value per group)
    carried_hash = "" if plan.indexed_keys or not groups else ", MIN(__kh) AS __kh"

    if plan.histogram is None:
        sums = "".join(f", SUM(__v{i}) AS __s{i}" for i in range(len(plan.moments)))
        kept = "".join(f", __s{i}" for i in range(len(plan.moments)))
        if not plan.bounds_groups:
            ctes.append(f"__chosen AS (SELECT __pid, __ki, COUNT(*) AS __n{sums} FROM __base GROUP BY __pid, __ki)")
        else:
            ctes.append(
                f"__pp AS MATERIALIZED (SELECT __pid, MIN(__ki) AS __lo, MAX(__ki) AS __hi, COUNT(*) AS __n{sums} "
                "FROM __base GROUP BY __pid)"
            )
            # The people in several groups, usually few, with their hash: materialised on its own, so that
            # an engine that plans each CTE reference afresh (Spark) can see its real size and broadcast it.
            ctes.append(
                f"__m AS MATERIALIZED (SELECT __pid, {_person_hash(plan, '__pid')} AS __ph FROM __pp "
                "WHERE __lo <> __hi)"
            )
            joined = "__base JOIN __m ON __base.__pid = __m.__pid"
            # g = 1: each keeps their group of least key, found in a first pass over their rows; a
            # second aggregates that group's rows only. Spark, which shuffles the rows in each pass,
            # aggregates them once per (person, group) and ranks those by a window, as for g > 1
            # (10 M rows, half the people in several groups: 20 s -> 13 s); DuckDB's passes are cheaper.
            if g == 1 and not rank_by_window:
                keyed = _keyed(plan, joined, "__base", ["__pid"], "__m.__ph")
                # (Materialised: otherwise, under a filter DuckDB cannot push into the scan, its planner
                # built the second pass's hash table on all the rows instead of on these few people:
                # 10 M rows, WHERE income * 1.1 > 20000, 1.03 s -> 0.59 s; bench/engine_derived.py.)
                ctes.append(
                    f"__pick AS MATERIALIZED (SELECT __pid, MIN(__o) AS __o FROM {keyed} AS __keyed GROUP BY __pid)"
                )
                mixed = (
                    f"SELECT __r.__ki, COUNT(*) AS __n{sums} FROM __base AS __r SEMI JOIN __pick "
                    f"ON __r.__pid = __pick.__pid AND __r.__ki = __pick.__o % {_ORDER_SHIFT} "
                    "GROUP BY __r.__pid, __r.__ki"
                )
            else:
                names = ["__pid", "__ki", *(f"__v{i}" for i in range(len(plan.moments)))]
                keyed = _keyed(plan, joined, "__base", names, "__m.__ph")
                ctes.append(
                    f"__mpg AS{read_by_rounds} (SELECT __pid, __ki, MIN(__o) AS __o, COUNT(*) AS __n{sums} "
                    f"FROM {keyed} AS __keyed GROUP BY __pid, __ki)"
                )
                moments = [f"__s{i}" for i in range(len(plan.moments))]
                ctes += _least_keys("__mpg", g, ["__ki", "__n", *moments], rank_by_window=rank_by_window)
                mixed = f"SELECT __ki, __n{kept} FROM __kept"
            ctes.append(f"__chosen AS (SELECT __lo AS __ki, __n{kept} FROM __pp WHERE __lo = __hi UNION ALL {mixed})")
        outputs = [f"SUM(LEAST(__n, {k})) AS rows", "COUNT(*) AS persons"]
        for i, moment in enumerate(plan.moments):
            if moment.cap_total and moment.power == 1 and not moment.shift and not moment.offset:
                low_cap, high_cap = moment.total_caps(k)
                capped = f"CAST(LEAST(GREATEST(__s{i}, {low_cap}.0), {high_cap}.0) AS BIGINT)"
                scaled = f"(CASE WHEN __n <= {k} THEN CAST(__s{i} AS BIGINT) ELSE {capped} END)"
            else:
                shrunk = f"CAST(ROUND(__s{i} * {k}.0 / __n) AS BIGINT)"
                scaled = f"(CASE WHEN __n <= {k} THEN CAST(__s{i} AS BIGINT) ELSE {shrunk} END)"
            outputs.append(f"CAST(SUM({scaled}) AS DECIMAL(38, 0)) AS m{i}")
        columns = ["rows", "persons", *(f"m{i}" for i in range(len(plan.moments)))]
        if not groups:
            return f"{head} {', '.join(ctes)} SELECT {', '.join(outputs)} FROM __chosen"
        aggregated = f"SELECT __ki, {', '.join(outputs)} FROM __chosen GROUP BY __ki"
    else:
        ctes += [
            f"__pgb AS (SELECT __pid, __ki, __b{carried_hash}, COUNT(*) AS __c FROM __base GROUP BY __pid, __ki, __b)",
            f"__pg AS (SELECT __pid, __ki{carried_hash}, SUM(__c) AS __n FROM __pgb GROUP BY __pid, __ki)",
        ]
        if not plan.bounds_groups:
            chosen = "(SELECT * FROM __pg)"
        else:
            # Each person's own order of their groups (_keyed).
            keyed = _keyed(plan, "__pg", "__pg", ["__pid", "__ki", "__n"], _person_hash(plan, "__pg.__pid"))
            if g == 1:
                chosen = (
                    f"(SELECT __pid, arg_min(__ki, __o) AS __ki, arg_min(__n, __o) AS __n FROM {keyed} AS __keyed "
                    "GROUP BY __pid)"
                )
            else:
                ctes.append(f"__pgk AS{read_by_rounds} (SELECT * FROM {keyed} AS __keyed)")
                ctes += _least_keys("__pgk", g, ["__pid", "__ki", "__n"], rank_by_window=rank_by_window)
                chosen = "(SELECT __pid, __ki, __n FROM __kept)"
        ctes.append(f"__chosen AS {chosen}")
        weight = f"CAST(ROUND(__pgb.__c * {k * 2**Histogram.WEIGHT_BITS}.0 / __chosen.__n) AS BIGINT)"
        capped = f"(CASE WHEN __chosen.__n <= {k} THEN __pgb.__c * {2**Histogram.WEIGHT_BITS} ELSE {weight} END)"
        aggregated = (
            f"SELECT __pgb.__ki AS __ki, __pgb.__b AS __b, CAST(SUM({capped}) AS DECIMAL(38, 0)) AS w "
            "FROM __pgb JOIN __chosen ON __pgb.__pid = __chosen.__pid AND __pgb.__ki = __chosen.__ki "
            "GROUP BY __pgb.__ki, __pgb.__b"
        )
        columns = ["__b", "w"]
        if not groups:
            return f"{head} {', '.join(ctes)} SELECT {', '.join(columns)} FROM ({aggregated}) AS __agg"
    if plan.indexed_keys:  # the first column is the key's rank; the backend maps it to the key
        return f"{head} {', '.join(ctes)} {aggregated}"
    keys = [f"__kv.{key} AS __g{i}" for i, key in enumerate(key_names)]
    return (
        f"{head} {', '.join(ctes)} SELECT {', '.join([*keys, *(f'__agg.{c}' for c in columns)])} "
        f"FROM ({aggregated}) AS __agg JOIN __kv ON __agg.__ki = __kv.__ki"
    )


def _foreign_tree(sql: str, rewrite: Any = None, dialect: str = "spark") -> exp.Expression:
    """The DuckDB text as a sqlglot tree meant for another engine.

    ``rewrite``: None, or a function from tree to tree with the target engine's own adjustments
    (see ``SparkBackend``), applied while the filters are still marked by their TRY nodes.
    """

    def base_ten(node: exp.Expression) -> exp.Expression:
        # DuckDB's one-argument LOG is base 10; sqlglot keeps it as LOG(x), which Spark (and Hive)
        # read as the natural logarithm. The base is written out.
        if isinstance(node, exp.Log) and node.args.get("expression") is None:
            return exp.Log(this=exp.Literal.number(10), expression=node.this)
        return node

    tree = sqlglot.parse_one(sql, read="duckdb").transform(base_ten)
    if rewrite is not None:
        tree = rewrite(tree)
    # Spark has no TRY(expression); its backend runs with ANSI mode off instead, where a failing
    # cast or an overflow gives NULL (see SparkBackend.run). The argument keeps its parentheses:
    # TRY(a) AND TRY(b OR c) is a AND (b OR c), never a AND b OR c. (DuckDB itself keeps them.)
    if dialect == "duckdb":
        return tree
    return tree.transform(lambda node: exp.Paren(this=node.this) if isinstance(node, exp.Try) else node)


def _without_hints(tree: exp.Expression, dialect: str) -> str:
    # Nor does Spark take MATERIALIZED hints on CTEs: it plans each reference itself.
    for cte in tree.find_all(exp.CTE):
        cte.set("materialized", None)
    # A name outside ASCII ("données.x" in a filter) is a plain identifier to DuckDB but must be
    # quoted in Spark, which reads only ASCII letters, digits and underscores unquoted.
    for identifier in tree.find_all(exp.Identifier):
        if not identifier.quoted and not identifier.name.isascii():
            identifier.set("quoted", True)
    return tree.sql(dialect=dialect)


def to_dialect(sql: str, dialect: str, *, rewrite: Any = None) -> str:
    """Transpile the DuckDB text to another engine's dialect (sqlglot); ``rewrite`` as in :func:`view_steps`."""
    if dialect == "duckdb":
        return sql
    return _without_hints(_foreign_tree(sql, rewrite, dialect), dialect)


def view_steps(
    sql: str,
    dialect: str,
    prefix: str,
    *,
    tables: Mapping[str, str] | None = None,
    rewrite: Any = None,
) -> tuple[list[tuple[str, str, bool]], str]:
    """The DuckDB text split into one query per CTE, for an engine that plans each CTE reference afresh.

    Returns ``[(view, query, cache), ...]`` and the final query, all in ``dialect`` and with no WITH
    clause: the caller registers each query in order as a temporary view named ``view`` (``prefix``
    + the CTE's name; later queries read it under that name), computed once and cached when
    ``cache`` (the CTE was MATERIALIZED), then runs the final query. The result is the same as
    :func:`to_dialect`'s single query.

    ``tables``: the engine's own name for a table of the text (keyed by the name case-folded; a
    backend that keeps each table in a view of its own), read under the text's name as alias.
    ``rewrite``: the engine's adjustments to the whole tree (see :func:`_foreign_tree`).
    """
    tree = _foreign_tree(sql, rewrite, dialect)
    clause = tree.args.get("with_")
    steps: list[tuple[str, str, bool]] = []
    names: dict[str, str] = {}
    for cte in clause.expressions if clause is not None else []:
        view = f"{prefix}{cte.alias}"
        body = _read_views(cte.this.copy(), names, tables)
        steps.append((view, _without_hints(body, dialect), bool(cte.args.get("materialized"))))
        names[cte.alias] = view
    tree.set("with_", None)
    return steps, _without_hints(_read_views(tree, names, tables), dialect)


def _read_views(
    tree: exp.Expression, names: Mapping[str, str], tables: Mapping[str, str] | None = None
) -> exp.Expression:
    """``tree`` with each reference to a CTE in ``names`` reading its view (under the CTE's name as alias).

    A reference to another table (no CTE of that name: a CTE shadows a table, as in DuckDB) reads
    ``tables[name.casefold()]`` when ``tables`` has it, under its own name as alias.
    """
    for table in list(tree.find_all(exp.Table)):
        if table.args.get("db"):
            continue
        if table.name in names:
            target = names[table.name]
        elif tables is not None and table.name.casefold() in tables:
            target = tables[table.name.casefold()]
        else:
            continue
        # The alias keeps the reference's own identifier, quoted as it was (a table name such as
        # "données" must stay quoted in Spark).
        alias = table.args.get("alias")
        name = alias.this if alias is not None and alias.this is not None else table.this
        table.set("alias", exp.TableAlias(this=name.copy()))
        table.set("this", exp.to_identifier(target))
    return tree
