"""The bounded aggregation a backend runs, and the SQL that computes it (one text, two dialects).

Contribution bounding without a sort by person (the usual ``ROW_NUMBER() OVER (PARTITION BY
person ORDER BY random()) <= k``):

1. aggregate the filtered, clamped rows per (person, group): the row count n and the sums of
   the person's values in that group (a hash aggregation);
2. bound groups per person: people in more than g groups keep g of them, ranked by a keyed
   hash of the group (a secret salt per release); only those people are ranked at all;
3. bound rows: a person with n > k rows in a group adds k to the count. To a SUM they add
   their total, clamped to k times the row bounds (``Moment.cap_total``): at most k rows'
   worth of clamped values, so the sensitivity is the same as keeping k rows, but nothing is
   discarded from a person whose total already fits. To the moments of a mean or a variance
   they add k / n of their sums (k times their mean: the same expectation as k random rows,
   without the sampling variance), which matches the k rows they count for.

Public keys are matched by a join to the key list and grouped by the key's integer index (the
join is also the key filter); private keys are grouped by value.

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
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

from dpkit.engine._plan import Bin, GroupKey, Join

__all__ = ["AggregationPlan", "AggregationResult", "Histogram", "Moment", "render_sql", "unit_exponent"]

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
    """Per group: weighted counts of clamp(column) in ``bins`` equal bins of [low, high] (NULL/NaN -> fill).

    Weights are fixed-point integers: a person with n rows in a group adds round(c k 2^20 / n)
    to a bin holding c of their rows (``WEIGHT_BITS``).
    """

    name: str
    column: str
    low: float
    high: float
    bins: int
    fill: float
    log2: bool = False  # signed powers-of-two bins for automatic bounds (low/high/bins ignored)

    WEIGHT_BITS = 20


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

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(g.name if isinstance(g, Bin) else g for g in self.groups)

    @property
    def indexed_keys(self) -> bool:
        """Whether the public keys are matched by a join and grouped by their index (see render_sql).

        Needs a person column (the row-level path groups directly) and, for every group column, a
        key value that is not NULL (it fixes the type of the key list's column).
        """
        if self.person is None or not self.groups or not self.keys:
            return False
        return all(any(key[i] is not None for key in self.keys) for i in range(len(self.groups)))

    @functools.cached_property
    def key_order(self) -> tuple[tuple[Any, ...], ...]:
        """The distinct public keys in a salted pseudo-random order; the indexed path groups by rank.

        A person in more than g key groups keeps the g of lowest rank. The order depends on the
        salt (secret, fresh per release) and the keys only, never on the data; computing it here
        keeps the hash out of the SQL, so the engines only compare small integers.
        """

        def rank(key: tuple[Any, ...]) -> bytes:
            encoded = "".join("n" if v is None else f"v{len(repr(v))}:{v!r}" for v in key)
            return hashlib.sha256(f"{self.salt}|{encoded}".encode()).digest()

        return tuple(sorted(dict.fromkeys(self.keys or ()), key=lambda key: (rank(key), repr(key))))

    @property
    def bounds_groups(self) -> bool:
        """Whether some person could be in more groups than allowed (needs the ranking step)."""
        if self.person is None or not self.groups:
            return False
        if self.keys is not None:
            return self.groups_per_person < len(self.keys)
        return True


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
    return exp.convert(value).sql(dialect="duckdb")


def _quote(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="duckdb")  # type: ignore[no-untyped-call]


def _clamped(column: str, low: float, high: float, fill: float) -> str:
    value = f"CAST({_quote(column)} AS DOUBLE)"
    return (
        f"(CASE WHEN {value} IS NULL OR isnan({value}) THEN {_literal(fill)} "
        f"ELSE LEAST(GREATEST({value}, {_literal(low)}), {_literal(high)}) END)"
    )


def _group_expression(group: GroupKey) -> str:
    if not isinstance(group, Bin):
        return _quote(group)
    value = f"CAST({_quote(group.column)} AS DOUBLE)"
    labels = group.labels
    cases = []
    for i, (a, b) in enumerate(zip(group.edges, group.edges[1:], strict=False)):
        upper = "<=" if i == len(labels) - 1 else "<"
        cases.append(f"WHEN {value} >= {_literal(a)} AND {value} {upper} {_literal(b)} THEN {_literal(labels[i])}")
    return "(CASE " + " ".join(cases) + " END)"


def _key_filter(plan: AggregationPlan) -> list[str]:
    """Conditions on the group aliases __g0, __g1, ... keeping only public keys (and real bins).

    Applied after the per-person aggregation (HAVING), where there are far fewer rows than in
    the table; the result is the same as filtering rows first.
    """
    if plan.keys is None:
        return [f"__g{i} IS NOT NULL" for i, g in enumerate(plan.groups) if isinstance(g, Bin)]
    columns = [list(dict.fromkeys(key[i] for key in plan.keys)) for i in range(len(plan.groups))]
    if len(plan.groups) > 1 and len(set(plan.keys)) < math.prod(len(values) for values in columns):
        # Not a full product: per-column lists would also admit combinations that are not keys
        # (and spend a person's group slots on them). Match whole tuples instead.
        def equal(i: int, value: Any) -> str:
            return f"__g{i} IS NULL" if value is None else f"__g{i} = {_literal(value)}"

        tuples = [" AND ".join(equal(i, v) for i, v in enumerate(key)) for key in dict.fromkeys(plan.keys)]
        return ["(" + " OR ".join(f"({t})" for t in tuples) + ")"]
    conditions = []
    for i, values in enumerate(columns):
        present = [v for v in values if v is not None]
        parts = []
        if present:
            parts.append(f"__g{i} IN ({', '.join(_literal(v) for v in present)})")
        if len(present) < len(values):
            parts.append(f"__g{i} IS NULL")
        conditions.append("(" + " OR ".join(parts) + ")")
    return conditions


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
    width = (histogram.high - histogram.low) / histogram.bins
    return (
        f"CAST(LEAST(FLOOR(({value} - {_literal(histogram.low)}) / {_literal(width)}), {histogram.bins - 1}) AS BIGINT)"
    )


def render_sql(plan: AggregationPlan) -> str:
    """The bounded aggregation as one DuckDB-dialect statement (backends transpile it)."""
    groups = [f"__g{i}" for i in range(len(plan.groups))]
    select = [f"{_group_expression(g)} AS {name}" for g, name in zip(plan.groups, groups, strict=True)]
    person = _quote(plan.person) if plan.person is not None else None
    if person is not None:
        select.insert(0, f"{person} AS __pid")
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
    source = _quote(plan.table)
    for join in plan.joins:
        source += f" JOIN {_quote(join.table)} USING ({', '.join(_quote(c) for c in join.on)})"
    # TRY: a condition that fails on some rows (a bad cast, an overflow) excludes those rows
    # instead of failing the query: an error raised by one person's rows would reveal them.
    conditions = [f"TRY({w})" for w in plan.where]
    keep = _key_filter(plan)
    having = (" HAVING " + " AND ".join(keep)) if keep else ""
    if person is not None:
        conditions.insert(0, f"{person} IS NOT NULL")  # rows without a person are dropped (documented)
    where = (" WHERE " + " AND ".join(conditions)) if conditions else ""
    base = f"SELECT {', '.join(select or ['1 AS __one'])} FROM {source}{where}"
    group_list = ", ".join(groups)
    k = plan.rows_per_group

    if person is None:
        # One row per person: every weight is 1 and each row is in one group.
        outputs = [*groups, "COUNT(*) AS rows", "COUNT(*) AS persons"]
        outputs += [f"CAST(SUM(CAST(__v{i} AS BIGINT)) AS DECIMAL(38, 0)) AS m{i}" for i in range(len(plan.moments))]
        by = groups[:]
        if plan.histogram is not None:
            outputs = [*groups, "__b", f"COUNT(*) * {2**Histogram.WEIGHT_BITS} AS w"]
            by.append("__b")
        grouping = f" GROUP BY {', '.join(by)}{having}" if by else ""
        return f"WITH __base AS ({base}) SELECT {', '.join(outputs)} FROM __base{grouping}"

    if plan.indexed_keys:
        # Public keys: join the rows to the (small) key list and group by the key's index, an
        # integer: the join is also the key filter (whole tuples, NULL keys included), and the
        # per-person hash aggregation is much cheaper on (person, integer) than on text keys.
        literals = ", ".join(
            "(" + ", ".join([*(_literal(v) for v in key), str(rank)]) + ")" for rank, key in enumerate(plan.key_order)
        )
        names = ", ".join([*(f"__k{i}" for i in range(len(groups))), "__ki"])
        match = " AND ".join(f"__raw.{name} IS NOT DISTINCT FROM __kv.__k{i}" for i, name in enumerate(groups))
        carried = ["__raw.__pid", "__kv.__ki"] + [f"__raw.__v{i}" for i in range(len(plan.moments))]
        carried += ["__raw.__b"] if plan.histogram is not None else []
        base = (
            f"SELECT {', '.join(carried)} FROM ({base}) AS __raw JOIN (VALUES {literals}) AS __kv({names}) ON {match}"
        )
        groups, group_list, having = ["__ki"], "__ki", ""
    pg_key = ", ".join(["__pid", *groups])
    if plan.histogram is None:
        sums = "".join(f", SUM(__v{i}) AS __s{i}" for i in range(len(plan.moments)))
        ctes = [
            f"__base AS ({base})",
            f"__pg AS (SELECT {pg_key}, COUNT(*) AS __n{sums} FROM __base GROUP BY {pg_key}{having})",
        ]
    else:
        ctes = [
            f"__base AS ({base})",
            f"__pgb AS (SELECT {pg_key}, __b, COUNT(*) AS __c FROM __base GROUP BY {pg_key}, __b{having})",
            f"__pg AS (SELECT {pg_key}, SUM(__c) AS __n FROM __pgb GROUP BY {pg_key})",
        ]
    chosen = "__pg"
    if plan.bounds_groups and plan.indexed_keys and plan.groups_per_person == 1:
        # One group per person, keys ranked by the salted order: each person keeps the group of
        # lowest rank, found in one aggregation per person (no window, no join, no second pass).
        kept = ["__pid", "MIN(__ki) AS __ki", "arg_min(__n, __ki) AS __n"]
        if plan.histogram is None:
            kept += [f"arg_min(__s{i}, __ki) AS __s{i}" for i in range(len(plan.moments))]
        ctes.append(f"__chosen AS (SELECT {', '.join(kept)} FROM __pg GROUP BY __pid)")
        chosen = "__chosen"
    elif plan.bounds_groups:
        g = plan.groups_per_person
        # An injective text encoding of the group tuple: NULL is "n", a value is "v<length>:<text>",
        # so no two distinct groups (NULL vs the text '<null>', ('a|b', 'c') vs ('a', 'b|c')) share
        # an encoding. Ties of the hash are then broken by the encoding itself: the choice depends
        # on the salt and the group values only, never on row order or threads.
        encoded = ", ".join(
            f"CASE WHEN {name} IS NULL THEN 'n' ELSE concat('v', CAST(length(CAST({name} AS VARCHAR)) AS VARCHAR), "
            f"':', CAST({name} AS VARCHAR)) END"
            for name in groups
        )
        encoded = f"concat({encoded})" if groups else "''"
        columns = ", ".join(
            ["__pid", *groups, "__n"] + [f"__s{i}" for i in range(len(plan.moments))] * (plan.histogram is None)
        )
        # Only people in more than g groups are ranked; everyone else passes through an anti-join
        # against that (usually tiny) set, which is much cheaper than joining every person back.
        ctes += [
            f"__multi AS (SELECT __pid FROM __pg GROUP BY __pid HAVING COUNT(*) > {g})",
            f"__chosen AS (SELECT {columns} FROM __pg ANTI JOIN __multi USING (__pid) "
            f"UNION ALL SELECT {columns} FROM (SELECT __pg.*, ROW_NUMBER() OVER (PARTITION BY __pg.__pid "
            f"ORDER BY md5(concat({_literal(plan.salt)}, {encoded})), {encoded}) AS __rank "
            f"FROM __pg SEMI JOIN __multi USING (__pid)) AS __ranked WHERE __rank <= {g})",
        ]
        chosen = "__chosen"
    if plan.histogram is None:
        outputs = [*groups, f"SUM(LEAST(__n, {k})) AS rows", "COUNT(*) AS persons"]
        for i, moment in enumerate(plan.moments):
            if moment.cap_total and moment.power == 1 and not moment.shift and not moment.offset:
                low_cap, high_cap = moment.total_caps(k)
                capped = f"CAST(LEAST(GREATEST(__s{i}, {low_cap}.0), {high_cap}.0) AS BIGINT)"
                scaled = f"(CASE WHEN __n <= {k} THEN CAST(__s{i} AS BIGINT) ELSE {capped} END)"
            else:
                shrunk = f"CAST(ROUND(__s{i} * {k}.0 / __n) AS BIGINT)"
                scaled = f"(CASE WHEN __n <= {k} THEN CAST(__s{i} AS BIGINT) ELSE {shrunk} END)"
            outputs.append(f"CAST(SUM({scaled}) AS DECIMAL(38, 0)) AS m{i}")
        grouping = f" GROUP BY {group_list}" if groups else ""
        return f"WITH {', '.join(ctes)} SELECT {', '.join(outputs)} FROM {chosen}{grouping}"
    weight = f"CAST(ROUND(__pgb.__c * {k * 2**Histogram.WEIGHT_BITS}.0 / {chosen}.__n) AS BIGINT)"
    capped = f"(CASE WHEN {chosen}.__n <= {k} THEN __pgb.__c * {2**Histogram.WEIGHT_BITS} ELSE {weight} END)"
    join_on = " AND ".join(f"__pgb.{c} IS NOT DISTINCT FROM {chosen}.{c}" for c in ["__pid", *groups])
    qualified = [f"__pgb.{name} AS {name}" for name in groups]
    outputs = [*qualified, "__pgb.__b AS __b", f"CAST(SUM({capped}) AS DECIMAL(38, 0)) AS w"]
    keys = ", ".join([f"__pgb.{name}" for name in groups] + ["__pgb.__b"])
    return f"WITH {', '.join(ctes)} SELECT {', '.join(outputs)} FROM __pgb JOIN {chosen} ON {join_on} GROUP BY {keys}"


def to_dialect(sql: str, dialect: str) -> str:
    """Transpile the DuckDB text to another engine's dialect (sqlglot)."""
    if dialect == "duckdb":
        return sql
    # Spark has no TRY(expression); its backend runs with ANSI mode off instead, where a failing
    # cast or an overflow gives NULL (see SparkBackend.run).
    tree = sqlglot.parse_one(sql, read="duckdb").transform(
        lambda node: node.this if isinstance(node, sqlglot.exp.Try) else node
    )
    return tree.sql(dialect=dialect)
