"""The immutable Python query builder: every call returns a new builder holding a new plan.

>>> from dpkit.engine._builder import QueryBuilder
>>> from dpkit import engine as E
>>> base = QueryBuilder(None, "people")
>>> adults = base.where("age >= 18")
>>> base.plan.where, adults.plan.where          # the first builder is unchanged
((), ('age >= 18',))
>>> plan = adults.group_by("region").bound(rows_per_group=5).agg(n=E.count()).plan
>>> plan.group_by, plan.contribution.rows_per_group, plan.public_keys
(('region',), 5, False)
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlglot
from sqlglot import exp

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_integer
from dpkit.engine._plan import (
    Aggregate,
    Bin,
    Contribution,
    Derived,
    GroupKey,
    Join,
    OrderBy,
    Query,
    distinct,
    spelling_resolver,
)

if TYPE_CHECKING:  # pragma: no cover
    from dpkit.engine._result import Preview, Result
    from dpkit.engine._session import Session

__all__ = ["QueryBuilder", "normalise_condition", "normalise_expression", "normalise_keys"]


#: The expression nodes a WHERE condition may use: comparisons, logic, arithmetic, casts, CASE and
#: a list of cheap scalar functions. Anything else is refused: a function that can raise on
#: purpose (DuckDB ``error``, Spark ``assert_true``, ``raise_error``), call out (``java_method``,
#: ``reflect``) or take data-dependent time or memory (``repeat``, nested ``replace``, regular
#: expressions) would let a query's failure or running time reveal one person's row. Intervals are
#: left out too, and :func:`check_filter_types` refuses date and time arithmetic (Spark raises on
#: its overflow whatever the ANSI setting).
ALLOWED_IN_WHERE = frozenset(
    {
        *("Column", "Identifier", "Literal", "Boolean", "Null", "Paren", "Tuple", "Var"),
        *("And", "Or", "Not", "EQ", "NEQ", "GT", "GTE", "LT", "LTE", "Is", "In", "Between"),
        *("Like", "ILike", "NullSafeEQ", "NullSafeNEQ"),
        *("Add", "Sub", "Mul", "Div", "IntDiv", "Mod", "Neg", "Cast", "TryCast", "DataType", "DataTypeParam"),
        *("Case", "If", "Coalesce", "Nullif", "Greatest", "Least"),
        *("Lower", "Upper", "Length", "Substring", "Trim", "Left", "Right", "Concat", "DPipe"),
        *("StartsWith", "EndsWith", "Contains", "StrPosition"),
        *("Abs", "Round", "Floor", "Ceil", "Sign", "Sqrt", "Ln", "Log", "Exp", "Pow"),
        *("Year", "Month", "Day", "Hour", "Minute", "Second", "Extract", "DateTrunc", "TimestampTrunc"),
    }
)


def normalise_condition(condition: object) -> str:
    """Parse a boolean SQL expression (DuckDB dialect) and return its canonical text.

    Refuses anything that is not a single scalar expression (subqueries, aggregates, window
    functions), since a filter must act on each row alone, and any function outside
    :data:`ALLOWED_IN_WHERE`.
    """
    return _row_expression(condition, "condition", "a filter")


def normalise_expression(expression: object) -> str:
    """Parse the SQL expression of a derived column (DuckDB dialect) and return its canonical text:
    the rules of a filter (:func:`normalise_condition`), any value type.

    >>> normalise_expression("spend  *  1.2")
    'spend * 1.2'
    """
    return _row_expression(expression, "expression", "a derived column")


def _row_expression(condition: object, parameter: str, place: str) -> str:
    """``condition``, a row-level SQL expression, in canonical form; refused by name (``parameter``)
    when it is not one scalar expression over one row's columns built from :data:`ALLOWED_IN_WHERE`."""
    if not isinstance(condition, str) or not condition.strip():
        allowed = "must be a non-empty SQL " + ("boolean expression" if place == "a filter" else "expression")
        raise InvalidParameterError(parameter, condition, allowed)
    try:
        tree = sqlglot.parse_one(condition, read="duckdb")
    except sqlglot.errors.ParseError as error:
        raise InvalidParameterError(parameter, condition, f"is not a valid SQL expression ({error})") from None
    if isinstance(tree, exp.Query) or tree.find(exp.Subquery, exp.Select) is not None:
        raise InvalidParameterError(parameter, condition, f"subqueries are not allowed in {place}")
    if tree.find(exp.AggFunc) is not None or tree.find(exp.Window) is not None:
        raise InvalidParameterError(
            parameter, condition, f"aggregates and window functions are not allowed in {place} (it reads one row)"
        )
    for node in tree.walk():
        if isinstance(node, exp.Like | exp.ILike):
            pattern = node.expression
            if not (isinstance(pattern, exp.Literal) and pattern.is_string) or "\\" in pattern.this:
                # A pattern from the row could be malformed on some rows only (Spark's default
                # escape is a backslash): only a fixed pattern without backslashes is allowed.
                raise InvalidParameterError(parameter, condition, "LIKE needs a fixed text pattern without backslashes")
            if pattern.this.count("%") > 1:
                # Spark matches LIKE with a backtracking regex: '%a%a%...b' takes time polynomial
                # in one row's length, with the number of '%' as the degree.
                raise InvalidParameterError(
                    parameter,
                    condition,
                    "LIKE may use one '%' at most (a prefix or suffix test); for a substring use "
                    "contains(column, 'text'), starts_with(...) or ends_with(...)",
                )
        if isinstance(node, exp.Round | exp.Ceil | exp.Floor) and node.args.get("decimals") is not None:
            digits = node.args["decimals"]
            number = digits.this if isinstance(digits, exp.Neg) else digits
            if not (isinstance(number, exp.Literal) and not number.is_string and abs(int(float(number.this))) <= 38):
                # Spark raises on a huge scale whatever the ANSI setting, for the rows that reach it.
                raise InvalidParameterError(
                    parameter, condition, "ROUND, CEIL and FLOOR take a fixed number of digits between -38 and 38"
                )
        if type(node).__name__ not in ALLOWED_IN_WHERE:
            raise InvalidParameterError(
                parameter,
                condition,
                f"{_refused_name(node)} is not allowed in {place} (it may use comparisons, AND/OR/NOT, IN, "
                "BETWEEN, LIKE, IS NULL, arithmetic, CAST, CASE, COALESCE and simple string, math and "
                f"date functions): {_refusal_reason(node)}",
            )
    for node in list(tree.find_all(exp.Log)):
        base = node.this if node.expression is not None else None
        if isinstance(base, exp.Literal) and not base.is_string and base.this in ("2", "10"):
            # sqlglot reads LOG2(x) as LOG(2, x), which DuckDB computes as ln(x) / ln(2), off in the
            # last bit (log2(5) = 2.3219280948873626): written back as DuckDB's own LOG2 / LOG10,
            # which the Spark text repeats (see _spark_sql.spark_semantics).
            own = exp.Anonymous(this=f"LOG{base.this}", expressions=[node.expression])
            tree = own if node is tree else tree
            node.replace(own)
    return tree.sql(dialect="duckdb")


_FUNCTION_TEXT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(\(?)")
#: Why a function that looks harmless is refused, and what to write instead (both engines agree on it).
_REFUSAL_REASONS = {
    "IsNan": "Spark's isnan(NULL) is false where DuckDB's is NULL, so NOT isnan(x) differs; write "
    "x = CAST('NaN' AS DOUBLE) (NaN equals NaN in both engines)",
    "IsInf": "Spark has no isinf; write x IN (CAST('Infinity' AS DOUBLE), CAST('-Infinity' AS DOUBLE))",
}


def _refused_name(node: exp.Expr) -> str:
    """How a refusal names a node outside the allowlist: the function as the SQL calls it
    (``the function random()``), else the expression's own text (``the expression age << 2``),
    never sqlglot's class name."""
    text = node.sql(dialect="duckdb")
    if isinstance(node, exp.Func):
        match = _FUNCTION_TEXT.fullmatch(text) or _FUNCTION_TEXT.match(text)
        if match is not None and (match.group(2) or match.end() == len(text)):
            return f"the function {match.group(1).lower()}{'()' if match.group(2) else ''}"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"the expression {text}"


def _refusal_reason(node: exp.Expr) -> str:
    return _REFUSAL_REASONS.get(
        type(node).__name__,
        "a function that can fail, call out or run long on one row would reveal it",
    )


_TEMPORAL = ("DATE", "TIME", "INTERVAL")  # DATE, DATETIME, TIME, TIMESTAMP..., INTERVAL
_TEMPORAL_PASS_THROUGH = (exp.Paren, exp.Neg, exp.Case, exp.If, exp.Coalesce, exp.Nullif, exp.Greatest, exp.Least)


def _is_temporal_type(text: str) -> bool:
    upper = text.upper()
    return any(word in upper for word in _TEMPORAL)


def _temporal(node: exp.Expr, types: Mapping[str, str]) -> bool:
    """Whether ``node`` has a date, time, timestamp or interval value (conservatively)."""
    if isinstance(node, exp.Column):
        return _is_temporal_type(types.get(node.name, types.get(node.name.casefold(), "")))
    if isinstance(node, exp.Cast | exp.TryCast):
        return _is_temporal_type(node.to.sql())
    if isinstance(node, exp.Interval | exp.DateTrunc | exp.TimestampTrunc):
        return True
    if isinstance(node, exp.Binary) and not isinstance(node, exp.Predicate | exp.Connector):
        return _temporal(node.left, types) or _temporal(node.right, types)
    if isinstance(node, _TEMPORAL_PASS_THROUGH):
        return any(_temporal(child, types) for child in node.iter_expressions())
    return False


def check_filter_types(tree: exp.Expr, condition: str, types: Mapping[str, str], parameter: str = "condition") -> None:
    """Refuse date and time arithmetic in a filter (``tree``: ``condition`` parsed; ``types``: column -> type name).

    Spark computes date, timestamp and interval arithmetic exactly and raises on overflow even with
    ANSI mode off, so such a filter could fail on one person's row alone. Comparisons, YEAR(...),
    EXTRACT(...) and casts of dates stay allowed.
    """
    for node in tree.walk():
        arithmetic = isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div | exp.IntDiv | exp.Mod | exp.Neg)
        if arithmetic and _temporal(node, types):
            raise InvalidParameterError(
                parameter,
                condition,
                "date and time arithmetic is not allowed in a filter or a derived column (it can overflow on one row); "
                "compare dates directly, or use YEAR(...), MONTH(...) or EXTRACT(...)",
            )


def normalise_keys(group_by: tuple[GroupKey, ...], keys: object) -> tuple[tuple[Any, ...], ...] | None:
    """Public key set as tuples in ``group_by`` order (see :func:`_normalise_keys`); key values must be
    hashable scalars (an unhashable one is refused by name)."""
    try:
        return _normalise_keys(group_by, keys)
    except TypeError as error:
        raise InvalidParameterError(
            "keys", keys, f"key values must be scalars (numbers, text, dates): {error}"
        ) from None


def _normalise_keys(group_by: tuple[GroupKey, ...], keys: object) -> tuple[tuple[Any, ...], ...] | None:
    """Public key set as tuples in ``group_by`` order.

    ``keys`` may be a list of values (one group column), a mapping column -> values (the
    cartesian product; binned columns take their bins), or a list of tuples.
    """
    if keys is None:
        if group_by and all(isinstance(g, Bin) for g in group_by):
            return tuple(itertools.product(*(g.labels for g in group_by if isinstance(g, Bin))))
        return None
    if not group_by:
        raise InvalidParameterError("keys", keys, "public keys need group_by columns")
    names = [g.name if isinstance(g, Bin) else g for g in group_by]
    if isinstance(keys, Mapping):
        # Column names are matched without case, as everywhere else in the engine.
        resolve = spelling_resolver(names)
        spelled = [(resolve(column) if isinstance(column, str) else column, values) for column, values in keys.items()]
        if len({column for column, _ in spelled}) == len(spelled):
            keys = dict(spelled)
        unknown = set(keys) - set(names)
        if unknown:
            raise InvalidParameterError("keys", sorted(unknown), f"name group columns; grouped by {names}")
        per_column: list[Sequence[Any]] = []
        for group in group_by:
            if isinstance(group, Bin):
                per_column.append(group.labels)
            elif group in keys:
                values = keys[group]
                if isinstance(values, str | bytes) or not isinstance(values, Iterable):
                    raise InvalidParameterError(f"keys[{group!r}]", values, "must be a list of key values")
                per_column.append(distinct(list(values)))
            else:
                raise InvalidParameterError("keys", keys, f"must give the public values of group column {group!r}")
        result = tuple(itertools.product(*per_column))
    else:
        if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
            raise InvalidParameterError("keys", keys, "must be a list of key values, a mapping, or a list of tuples")
        items = list(keys)
        if len(group_by) == 1:
            result = tuple((k[0],) if isinstance(k, tuple) and len(k) == 1 else (k,) for k in items)
        else:
            if not all(isinstance(k, tuple) and len(k) == len(group_by) for k in items):
                raise InvalidParameterError(
                    "keys", keys, f"must be tuples of {len(group_by)} values (one per group column) or a mapping"
                )
            result = tuple(items)
        result = tuple(distinct(result))
    if not result:
        raise InvalidParameterError("keys", keys, "must contain at least one key")
    if any(isinstance(v, np.bool_ | np.integer | np.floating) for key in result for v in key):
        # NumPy scalars as Python's (np.float32(0.1) was written as the literal 0.1, a key it is not)
        result = tuple(distinct([tuple(_python_scalar(v) for v in key) for key in result]))
    return result


def _python_scalar(value: Any) -> Any:
    return value.item() if isinstance(value, np.bool_ | np.integer | np.floating) else value


class QueryBuilder:
    """Builds a :class:`~dpkit.engine.Query` step by step; each method returns a new builder.

    Obtain one from :meth:`dpkit.Session.table`; finish with :meth:`agg` and run with
    :meth:`release` (spends budget) or :meth:`preview` (spends nothing, reads no data).
    """

    __slots__ = ("_plan", "_session")

    def __init__(self, session: Session | None, table: str | Query) -> None:
        self._session = session
        if isinstance(table, Query):
            self._plan = table
        else:
            if not isinstance(table, str) or not table:
                raise InvalidParameterError("table", table, "must be a table name")
            self._plan = Query(table=table)

    @property
    def plan(self) -> Query:
        """The frozen plan built so far."""
        return self._plan

    def _with(self, **changes: Any) -> QueryBuilder:
        return QueryBuilder(self._session, dataclasses.replace(self._plan, **changes))

    def where(self, condition: str) -> QueryBuilder:
        """Keep rows where the SQL boolean ``condition`` holds (filters are AND-ed)."""
        return self._with(where=(*self._plan.where, normalise_condition(condition)))

    def with_column(self, name: str, expression: str) -> QueryBuilder:
        """Add a column computed from each row, ``name`` = ``expression`` (SQL, DuckDB's dialect), for
        aggregates and group keys to use like any column; bounds and public keys name it.

        The expression follows the rules of :meth:`where` (the same functions; no aggregates) and
        reads the tables' columns and the derived columns added before it; filters may read it.
        Where it fails on a row (a cast that does not parse, an overflow) the value is NULL, as a
        NULL in the data (see ``sum``), also in the columns that read it.

        >>> b = QueryBuilder(None, "people").with_column("years", "age + 1")
        >>> b = b.with_column("band", "CASE WHEN years < 18 THEN 'minor' ELSE 'adult' END").where("years > 3")
        >>> [d.expression for d in b.plan.derived], b.plan.where
        (['age + 1', "CASE WHEN years < 18 THEN 'minor' ELSE 'adult' END"], ('years > 3',))
        """
        column = Derived(name, normalise_expression(expression))
        if any(d.name.casefold() == column.name.casefold() for d in self._plan.derived):
            raise InvalidParameterError("name", name, "a derived column of this name exists; choose another name")
        return self._with(derived=(*self._plan.derived, column))

    def join(self, table: str, on: str | Sequence[str]) -> QueryBuilder:
        """Inner-join a public lookup table (registered with ``Session(public_tables=...)``) on shared columns."""
        if not isinstance(on, str) and not (isinstance(on, Sequence) and not isinstance(on, bytes)):
            raise InvalidParameterError("on", on, "must name one or more shared columns (a name or a list of names)")
        columns = (on,) if isinstance(on, str) else tuple(on)
        return self._with(joins=(*self._plan.joins, Join(table, columns)))

    def group_by(
        self, *columns: str | Bin, keys: object = None, bins: Mapping[str, Sequence[float]] | None = None
    ) -> QueryBuilder:
        """Group by columns (and binned columns). ``keys`` makes the key set public (see ``normalise_keys``);
        without it the keys are private and selected with thresholded partition selection.

        A query is grouped once: a second ``group_by`` (or :meth:`histogram`) is refused, since it
        would drop the first one's columns and keys; give every group column, and the keys of all,
        in one call (``group_by("a", "b", keys={"a": [...], "b": [...]})``).

        >>> QueryBuilder(None, "people").group_by("region").group_by("age")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        dpkit._errors.InvalidParameterError: group_by: got ('age',); the query is grouped by region already: ...
        """
        if self._plan.group_by:
            raise InvalidParameterError(
                "group_by",
                tuple(c.name if isinstance(c, Bin) else c for c in columns) + tuple(f"{c}_bin" for c in bins or {}),
                f"the query is grouped by {', '.join(self._plan.group_names)} already: give every group column "
                "(and the keys of all) in one group_by call",
            )
        groups: list[GroupKey] = []
        for column in columns:
            if isinstance(column, Bin):
                groups.append(column)
            elif isinstance(column, str) and column:
                groups.append(column)
            else:
                raise InvalidParameterError("columns", column, "must be column names or dpkit.engine.Bin")
        for column, edges in (bins or {}).items():
            groups.append(Bin(column, tuple(edges)))
        if not groups:
            raise InvalidParameterError("columns", columns, "group_by needs at least one column")
        names = [g.name if isinstance(g, Bin) else g for g in groups]
        if len(set(names)) != len(names):
            raise InvalidParameterError("columns", names, "each group column may appear once")
        group_tuple = tuple(groups)
        return self._with(group_by=group_tuple, keys=normalise_keys(group_tuple, keys))

    def histogram(self, column: str, bins: Sequence[float]) -> QueryBuilder:
        """A histogram of ``column`` on public bin edges: grouped by the bins, with a count."""
        from dpkit.engine._functions import count

        return self.group_by(Bin(column, tuple(bins))).agg(count=count())

    def bound(self, rows_per_group: int | None = None, groups_per_person: int | None = None) -> QueryBuilder:
        """Per-person contribution limits (shown in the result). A limit not given keeps the one an
        earlier ``bound`` set, else 1: ``.bound(rows_per_group=3).bound(groups_per_person=2)``
        bounds both. Without any ``bound`` the session's ``contribution`` applies.

        >>> QueryBuilder(None, "people").bound(rows_per_group=3).bound(groups_per_person=2).plan.contribution
        Contribution(rows_per_group=3, groups_per_person=2)
        """
        earlier = self._plan.contribution or Contribution()
        return self._with(
            contribution=Contribution(
                earlier.rows_per_group if rows_per_group is None else rows_per_group,
                earlier.groups_per_person if groups_per_person is None else groups_per_person,
            )
        )

    def agg(self, **aggregates: Aggregate) -> QueryBuilder:
        """Name the statistics to release: ``agg(n=count(), income=sum("income", bounds=(0, 1e5)))``.

        A second ``agg`` adds its statistics to the first's; a name given before (matched without
        case, as result columns are) is refused rather than silently replaced.

        >>> from dpkit import engine as E
        >>> QueryBuilder(None, "people").agg(n=E.count()).agg(N=E.count_distinct())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        dpkit._errors.InvalidParameterError: aggregates: got 'N'; names an aggregate already named 'n' ...
        """
        if not aggregates:
            raise InvalidParameterError("aggregates", aggregates, "give at least one named aggregate")
        for name, aggregate in aggregates.items():
            if not isinstance(aggregate, Aggregate):
                raise InvalidParameterError(
                    name, aggregate, "must be an aggregate from dpkit.engine (count(), sum(...))"
                )
        earlier = {name.casefold(): name for name, _ in self._plan.aggregates}
        given: dict[str, str] = {}
        for name in aggregates:
            if name.casefold() in earlier or name.casefold() in given:
                other = earlier.get(name.casefold()) or given[name.casefold()]
                where = " (by an earlier agg)" if name.casefold() in earlier else ""
                raise InvalidParameterError(
                    "aggregates", name, f"names an aggregate already named {other!r}{where}: choose another name"
                )
            given[name.casefold()] = name
        return self._with(aggregates=(*self._plan.aggregates, *aggregates.items()))

    def having(self, condition: str) -> QueryBuilder:
        """Keep the released rows where ``condition`` holds, a SQL expression over the result's
        columns (``"n > 100 AND region <> 'North'"``; conditions are AND-ed). Post-processing of the
        noisy table: it filters on the *noisy* values, costs nothing and reads no data.

        >>> QueryBuilder(None, "people").having("n > 100").having("t_low > 0").plan.having
        ('n > 100', 't_low > 0')
        """
        if not isinstance(condition, str) or not condition.strip():
            raise InvalidParameterError("having", condition, "must be a SQL condition on the result's columns")
        return self._with(having=(*self._plan.having, condition))

    def order_by(self, *columns: str | OrderBy, descending: bool = False, nulls_first: bool = False) -> QueryBuilder:
        """Sort the released rows by result columns (group columns, aggregate values or interval ends);
        ``descending`` and ``nulls_first`` apply to the names given as text (an :class:`OrderBy`
        carries its own). Post-processing of the noisy table: no cost. A second ``order_by`` replaces
        the first (as a second sort does in pandas and Polars): give every sort column in one call.

        >>> from dpkit import engine as E
        >>> plan = QueryBuilder(None, "people").order_by("n", E.OrderBy("region")).plan
        >>> [(o.column, o.descending) for o in plan.order_by]
        [('n', False), ('region', False)]
        """
        if not columns:
            raise InvalidParameterError("columns", columns, "order_by needs at least one result column")
        orders = tuple(
            c if isinstance(c, OrderBy) else OrderBy(c, descending=descending, nulls_first=nulls_first) for c in columns
        )
        return self._with(order_by=orders)

    def limit(self, count: int | None, offset: int = 0) -> QueryBuilder:
        """Keep ``count`` released rows (None: all) after skipping ``offset``, in the result's order
        (:meth:`order_by`, else the keys' order). Post-processing of the noisy table: no cost. A
        second ``limit`` replaces the first (SQL has one LIMIT)."""
        checked = None if count is None else check_integer("count", count, minimum=0)
        return self._with(limit=checked, offset=check_integer("offset", offset, minimum=0))

    def _require_session(self) -> Session:
        if self._session is None:
            raise InvalidParameterError("session", None, "this builder is not attached to a Session")
        return self._session

    def release(self, **cost: Any) -> Result:
        """Spend budget and release the query: see :meth:`dpkit.Session.release` for the arguments."""
        return self._require_session().release(self, **cost)

    def preview(self, **cost: Any) -> Preview:
        """Expected error and cost, without reading data or spending: see :meth:`dpkit.Session.preview`."""
        return self._require_session().preview(self, **cost)

    def __repr__(self) -> str:
        return f"QueryBuilder({self._plan.describe()})"
