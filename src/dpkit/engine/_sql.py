"""The SQL front end: one DuckDB-dialect SELECT parsed with sqlglot into a :class:`~dpkit.engine.Query`.

The supported language is deliberately small, because every accepted clause must have a
privacy analysis in the compiler:

* ``FROM <private table> [alias]``, then any number of inner joins with *public* tables:
  ``JOIN lookup USING (col, ...)`` or ``JOIN lookup ON a.col = b.col [AND ...]`` (same column
  name on both sides);
* ``WHERE`` with any row-level boolean expression (no subqueries, aggregates or windows);
* ``GROUP BY`` columns (named, or by their SELECT position: ``GROUP BY 1``) and named
  expressions (``SELECT CASE ... END AS band ... GROUP BY band``: a derived column); a group
  column renamed in SELECT (``SELECT region AS r``) is released as ``r`` whether GROUP BY names
  ``r``, ``region`` or ``1`` (a derived column ``r`` = ``region``; public keys may name either);
* ``SELECT`` group columns and aggregates, each optionally aliased: ``COUNT(*)``, ``COUNT(col)``
  (its rows that are not NULL), ``COUNT(DISTINCT <privacy unit>)``, ``SUM``, ``AVG`` / ``MEAN``,
  ``VARIANCE`` / ``VAR_SAMP`` / ``VAR_POP``, ``STDDEV`` / ``STDDEV_SAMP`` / ``STDDEV_POP``,
  ``MEDIAN``, ``QUANTILE_CONT`` / ``QUANTILE_DISC`` / ``QUANTILE`` / ``APPROX_QUANTILE`` (one level
  or a list) and
  ``PERCENTILE_CONT`` / ``PERCENTILE_DISC ... WITHIN GROUP (ORDER BY col)``; an aggregate of an
  expression (``SUM(price * quantity) AS revenue``) aggregates a derived column named as the item
  (see :class:`~dpkit.engine.Derived`), whose bounds are given under that name;
* ``HAVING`` on the released columns (an aggregate there must repeat one of the SELECT list),
  ``ORDER BY`` result columns (by name, position or SELECT item), ``LIMIT n`` and ``OFFSET n``:
  post-processing that filters, sorts and slices the released, noisy table (no privacy cost).

Everything else is refused with :class:`UnsupportedSQLError`, whose message names the clause
and says why. Column existence is not checked here; the compiler checks names against the
schema.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp

from dpkit._errors import InvalidParameterError
from dpkit.engine._builder import normalise_condition, normalise_expression, normalise_keys
from dpkit.engine._plan import Aggregate, AggregateKind, Derived, GroupKey, Join, OrderBy, Query

__all__ = ["UnsupportedSQLError", "parse_query"]

SUPPORTED_AGGREGATES = (
    "COUNT(*), COUNT(col), COUNT(DISTINCT <privacy unit>), SUM, AVG, VARIANCE, STDDEV, MEDIAN, "
    "QUANTILE_CONT(col, q or [q1, q2, ...]), PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY col)"
)

# Clauses of a SELECT that have no privacy analysis, with the reason given to the user.
_REFUSED_CLAUSES: dict[str, tuple[str, str]] = {
    "with_": ("WITH", "common table expressions (subqueries) are not supported; query the table directly"),
    "distinct": ("SELECT DISTINCT", "releasing the distinct values themselves is not supported; use GROUP BY"),
    "into": ("SELECT INTO", "a private query cannot write a table"),
    "qualify": ("QUALIFY", "window functions are not supported"),
    "windows": ("WINDOW", "window functions are not supported"),
    "sort": ("SORT BY", "not supported; use ORDER BY (it sorts the released table)"),
    "sample": ("USING SAMPLE", "sampling is not supported (its privacy amplification is not analysed here)"),
    "laterals": ("LATERAL", "lateral joins are not supported"),
    "pivots": ("PIVOT", "pivots are not supported; group by both columns instead"),
    "prewhere": ("PREWHERE", "not supported; use WHERE"),
    "connect": ("CONNECT BY", "recursive queries are not supported"),
    "distribute": ("DISTRIBUTE BY", "not supported"),
    "cluster": ("CLUSTER BY", "not supported"),
    "locks": ("FOR UPDATE", "locking clauses are not supported"),
}

_CLAUSE_OF_ARG = {"expressions": "SELECT", "from_": "FROM", "joins": "JOIN", "where": "WHERE", "group": "GROUP BY"}

# Aggregate functions with one plain-column argument: sqlglot class -> (kind, default-name prefix,
# sample). VARIANCE and STDDEV are the sample forms (divided by n - 1), as in DuckDB, Spark and
# the SQL standard; VAR_POP and STDDEV_POP divide by n.
_SIMPLE_AGGREGATES: dict[type[exp.Expr], tuple[AggregateKind, str, bool]] = {
    exp.Sum: ("sum", "sum", False),
    exp.Avg: ("mean", "avg", False),
    exp.Variance: ("variance", "variance", True),
    exp.VariancePop: ("variance", "variance", False),
    exp.Stddev: ("stddev", "stddev", True),
    exp.StddevSamp: ("stddev", "stddev", True),
    exp.StddevPop: ("stddev", "stddev", False),
}
# Quantile functions written ``f(col, levels)``: sqlglot class -> the argument holding the levels.
_QUANTILE_FUNCTIONS: dict[type[exp.Expr], str] = {
    exp.PercentileCont: "expression",
    exp.PercentileDisc: "expression",
    exp.Quantile: "quantile",
    exp.ApproxQuantile: "quantile",
}


class UnsupportedSQLError(InvalidParameterError):
    """A SQL query uses a clause or form the engine does not support; the message names the clause and why.

    ``name`` is always ``"sql"``, ``value`` the offending fragment of SQL, ``clause`` the clause.
    """

    def __init__(self, clause: str, fragment: str, reason: str) -> None:
        self.clause = clause
        super().__init__("sql", fragment, f"unsupported {clause}: {reason}")


def parse_query(
    text: str,
    *,
    table: str,
    public_tables: Collection[str] = (),
    privacy_unit: str | None = None,
    keys: object = None,
) -> tuple[Query, tuple[str, ...]]:
    """Parse one SELECT into a Query; returns (query, output column order).

    ``table`` is the session's private table (the only table FROM may name),
    ``public_tables`` the lookup tables that may be joined, ``privacy_unit`` the column that
    identifies a person (None: one row is one person) and ``keys`` an optional public key
    set for the GROUP BY columns (see :func:`~dpkit.engine._builder.normalise_keys`; None
    means the keys are private). The output order lists the SELECT items' names. Nothing is
    released here: the plan says what to compute, the compiler decides how and at what cost.

    >>> query, columns = parse_query(
    ...     "SELECT region, COUNT(*) AS n, AVG(p.income) FROM people p WHERE age >= 18 GROUP BY region",
    ...     table="people",
    ... )
    >>> columns
    ('region', 'n', 'avg_income')
    >>> query.where, query.group_by, [(name, a.kind, a.column) for name, a in query.aggregates]
    (('age >= 18',), ('region',), [('n', 'count', None), ('avg_income', 'mean', 'income')])
    >>> parse_query("SELECT COUNT(*) FROM people QUALIFY 1 = 1", table="people")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dpkit.engine._sql.UnsupportedSQLError: sql: got 'QUALIFY 1 = 1'; unsupported QUALIFY: ...
    """
    if not isinstance(text, str):
        raise InvalidParameterError("sql", text, "must be SQL text (a string)")
    if not isinstance(table, str) or not table:
        raise InvalidParameterError("table", table, "must be the name of the session's private table")
    if isinstance(public_tables, str) or not all(isinstance(t, str) for t in public_tables):
        raise InvalidParameterError("public_tables", public_tables, "must be a collection of table names")
    if privacy_unit is not None and (not isinstance(privacy_unit, str) or not privacy_unit):
        raise InvalidParameterError("privacy_unit", privacy_unit, "must be a column name or None")

    select = _single_select(text)
    _refuse_clauses(select)
    qualifiers, from_name = _from_clause(select, table)
    joins = _join_clauses(select, table, from_name, public_tables, qualifiers)
    where = _where_clause(select, qualifiers)
    scope = _Scope(qualifiers)
    group_by = _group_by_clause(select, scope, privacy_unit)
    renames = _renamed_groups(scope, group_by)
    aggregates, columns = _select_list(select, scope, group_by, privacy_unit, renames)
    _check_where_names(where, scope, aggregates)
    query = Query(
        table=table,
        joins=joins,
        where=where,
        derived=tuple(scope.derived.values()),
        group_by=group_by,
        keys=normalise_keys(group_by, _renamed_keys(keys, group_by, renames)),
        aggregates=aggregates,
        text=text,
        having=_having_clause(select, qualifiers, columns, renames),
        order_by=_order_clause(select, qualifiers, columns, renames),
        limit=_whole_number(select, "limit"),
        offset=_whole_number(select, "offset") or 0,
    )
    return query, columns


# --- statement and clauses ---------------------------------------------------------------------


def _fragment(node: exp.Expr | None) -> str:
    return "" if node is None else node.sql(dialect="duckdb")


def _single_select(text: str) -> exp.Select:
    try:
        statements = [s for s in sqlglot.parse(text, read="duckdb") if s is not None]
    except sqlglot.errors.ParseError as error:
        details = error.errors[0] if error.errors else {}
        where = f" at line {details.get('line')}, column {details.get('col')}" if details else ""
        reason = f"could not parse it{where}: {details.get('description', str(error))}"
        raise UnsupportedSQLError("SQL text", text, reason) from None
    except sqlglot.errors.SqlglotError as error:
        raise UnsupportedSQLError("SQL text", text, f"could not parse it: {error}") from None
    if not statements:
        raise UnsupportedSQLError("SQL text", text, "it holds no statement; give one SELECT")
    if len(statements) > 1:
        raise UnsupportedSQLError(
            "several statements", text, f"got {len(statements)} statements; give exactly one SELECT"
        )
    statement = statements[0]
    if isinstance(statement, exp.SetOperation):
        raise UnsupportedSQLError(
            statement.key.upper(),
            _fragment(statement),
            "set operations combine several queries, each needing its own budget; run them separately",
        )
    if isinstance(statement, exp.Subquery):
        raise UnsupportedSQLError("subquery", _fragment(statement), "give the SELECT without enclosing parentheses")
    if not isinstance(statement, exp.Select):
        kind = statement.name.upper() if isinstance(statement, exp.Command) else statement.key.upper()
        raise UnsupportedSQLError(
            f"{kind} statement", _fragment(statement), "only a single SELECT is supported (the engine never writes)"
        )
    return statement


def _refuse_clauses(select: exp.Select) -> None:
    for arg, (clause, reason) in _REFUSED_CLAUSES.items():
        value = select.args.get(arg)
        if value:
            node = value[0] if isinstance(value, list) else value
            fragment = _fragment(node) if isinstance(node, exp.Expression) else clause
            raise UnsupportedSQLError(clause, fragment, reason)
    allowed = {"expressions", "from_", "joins", "where", "group", "having", "order", "limit", "offset"}
    allowed |= set(_REFUSED_CLAUSES)
    for arg, value in select.args.items():
        if value and arg not in allowed:
            raise UnsupportedSQLError(arg.rstrip("_").upper(), _fragment(select), "this clause is not supported")
    # Subqueries and window functions, wherever they are.
    for node in select.walk():
        if node is select:
            continue
        if isinstance(node, exp.Query | exp.Exists):
            raise UnsupportedSQLError(
                f"subquery in {_clause_of(node, select)}",
                _fragment(node),
                "subqueries are not supported; a private query reads the private table once",
            )
        if isinstance(node, exp.Window):
            raise UnsupportedSQLError(
                f"window function in {_clause_of(node, select)}",
                _fragment(node),
                "window functions (OVER) are not supported; use GROUP BY with aggregates",
            )


def _clause_of(node: exp.Expr, select: exp.Select) -> str:
    while node.parent is not None and node.parent is not select:
        node = node.parent
    key = node.arg_key or ""
    return _CLAUSE_OF_ARG.get(key, key.upper())


def _table_parts(node: exp.Table, clause: str) -> tuple[str, str | None]:
    """Name and alias of a plain table reference; anything more is refused."""
    if not isinstance(node.this, exp.Identifier):
        raise UnsupportedSQLError(
            clause, _fragment(node), "must name a table; table functions and file reads are not supported"
        )
    extra = [k for k, v in node.args.items() if v and k not in ("this", "alias")]
    if extra:
        what = "qualified table names" if set(extra) & {"db", "catalog"} else f"table options ({', '.join(extra)})"
        raise UnsupportedSQLError(clause, _fragment(node), f"{what} are not supported; name the table alone")
    alias = node.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        raise UnsupportedSQLError(clause, _fragment(node), "column aliases on a table are not supported")
    return node.this.name, (alias.name if alias is not None else None) or None


def _from_clause(select: exp.Select, table: str) -> tuple[set[str], str]:
    source = select.args.get("from_")
    if source is None:
        raise UnsupportedSQLError("FROM", _fragment(select), f"a query must read the private table {table!r}")
    node = source.this
    if isinstance(node, exp.Subquery):
        raise UnsupportedSQLError(
            "subquery in FROM",
            _fragment(node),
            "subqueries are not supported; a private query reads the table directly",
        )
    if not isinstance(node, exp.Table):
        raise UnsupportedSQLError("FROM", _fragment(node), f"must name the private table {table!r}")
    name, alias = _table_parts(node, "FROM")
    if name.casefold() != table.casefold():
        raise UnsupportedSQLError(
            "FROM",
            _fragment(node),
            f"queries read this session's private table {table!r}, not {name!r} (public tables are joined to it)",
        )
    qualifiers = {name.casefold()}
    if alias:
        qualifiers.add(alias.casefold())
    return qualifiers, name


def _join_clauses(
    select: exp.Select, table: str, from_name: str, public_tables: Collection[str], qualifiers: set[str]
) -> tuple[Join, ...]:
    public = {t.casefold(): t for t in public_tables}
    joins: list[Join] = []
    for join in select.args.get("joins") or []:
        fragment = _fragment(join)
        target = join.this
        if isinstance(target, exp.Subquery | exp.Lateral | exp.Query):
            raise UnsupportedSQLError("subquery in JOIN", fragment, "only public tables can be joined, not subqueries")
        if not isinstance(target, exp.Table):
            raise UnsupportedSQLError("JOIN", fragment, "only public tables can be joined")
        method, side, kind = join.args.get("method"), join.args.get("side"), join.args.get("kind")
        if method:
            raise UnsupportedSQLError(
                f"{str(method).upper()} JOIN", fragment, "only inner joins with USING (...) or ON a.col = b.col"
            )
        if side:
            raise UnsupportedSQLError(
                f"{str(side).upper()} JOIN",
                fragment,
                "outer joins are not supported; only inner joins with a public table (unmatched rows are dropped)",
            )
        if kind and str(kind).upper() != "INNER":
            raise UnsupportedSQLError(
                f"{str(kind).upper()} JOIN",
                fragment,
                "only inner joins with a public table on shared columns are supported",
            )
        using, on = join.args.get("using"), join.args.get("on")
        if not using and on is None:
            raise UnsupportedSQLError(
                "CROSS JOIN",
                fragment,
                "cross joins (and comma-separated FROM lists) are not supported; join a public table "
                "with USING (...) or ON a.col = b.col",
            )
        name, alias = _table_parts(target, "JOIN")
        if name.casefold() == table.casefold() or name.casefold() == from_name.casefold():
            raise UnsupportedSQLError(
                "JOIN", fragment, "joining the private table to itself is not supported (a self-join multiplies rows)"
            )
        if name.casefold() not in public:
            raise UnsupportedSQLError(
                "JOIN",
                fragment,
                f"{name!r} is not a registered public table; only public lookup tables can be joined "
                "(joining another private table would need its own privacy analysis)",
            )
        canonical = public[name.casefold()]
        if any(j.table == canonical for j in joins):
            raise UnsupportedSQLError("JOIN", fragment, f"the public table {canonical!r} may be joined once")
        join_qualifiers = {name.casefold(), *([alias.casefold()] if alias else [])}
        if using:
            columns = [_identifier_name(u, "JOIN ... USING", fragment) for u in using]
        else:
            columns = _on_columns(on, fragment, join_qualifiers, qualifiers)
        if len({c.casefold() for c in columns}) != len(columns):
            raise UnsupportedSQLError("JOIN", fragment, "each join column may appear once")
        joins.append(Join(canonical, tuple(columns)))
        qualifiers |= join_qualifiers
    return tuple(joins)


def _identifier_name(node: exp.Expr, clause: str, fragment: str) -> str:
    if isinstance(node, exp.Identifier):
        return node.name
    if isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier):
        return node.name
    raise UnsupportedSQLError(clause, fragment, "must list plain column names")


def _conjuncts(node: exp.Expr) -> Iterator[exp.Expr]:
    """The operands of top-level ANDs (looking through parentheses); each keeps its own parentheses."""
    inner = node.unnest()
    if isinstance(inner, exp.And):
        yield from _conjuncts(inner.this)
        yield from _conjuncts(inner.expression)
    else:
        yield node


def _on_columns(on: exp.Expr, fragment: str, joined: set[str], earlier: set[str]) -> list[str]:
    """Columns of ``ON a.col = b.col [AND ...]``: one side the joined table, the other an earlier table."""
    columns: list[str] = []
    for condition in _conjuncts(on):
        condition = condition.unnest()
        left, right = (condition.this, condition.expression) if isinstance(condition, exp.EQ) else (None, None)
        left = left.unnest() if left is not None else None
        right = right.unnest() if right is not None else None
        if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
            raise UnsupportedSQLError(
                "JOIN ... ON",
                fragment,
                "only equalities of same-named columns joined with AND (a.col = b.col) are supported",
            )
        if left.name.casefold() != right.name.casefold():
            raise UnsupportedSQLError(
                "JOIN ... ON",
                fragment,
                f"joins on different column names ({_fragment(condition)}) are not supported; "
                "join on a column with the same name in both tables (rename it in the public table)",
            )
        sides = {left.table.casefold(), right.table.casefold()}
        if (
            left.args.get("db")
            or right.args.get("db")
            or len(sides) != 2
            or not (sides & joined)
            or not ((sides - joined) <= earlier and sides - joined)
        ):
            raise UnsupportedSQLError(
                "JOIN ... ON",
                fragment,
                f"{_fragment(condition)} must compare a column of the joined table with the same column of a "
                "table before it, both qualified (people.col = lookup.col); or write USING (col)",
            )
        columns.append(left.name)
    return columns


def _strip_qualifiers(node: exp.Expr, qualifiers: set[str]) -> exp.Expr:
    """A copy of ``node`` whose column references drop a leading table name or alias.

    The backend renders ``FROM table JOIN lookup USING (...)`` without aliases, so a column is
    referred to by its name alone. A leading part that names no table (``s.field`` on a struct
    column) is kept.
    """

    def strip(part: exp.Expr) -> exp.Expr:
        if isinstance(part, exp.Column):
            parts = part.parts
            if len(parts) >= 2 and parts[0].name.casefold() in qualifiers:
                rest = parts[1:]
                return exp.Column(
                    this=rest[-1],
                    table=rest[-2] if len(rest) >= 2 else None,
                    db=rest[-3] if len(rest) >= 3 else None,
                )
        return part

    return node.transform(strip)


def _where_clause(select: exp.Select, qualifiers: set[str]) -> tuple[str, ...]:
    where = select.args.get("where")
    if where is None:
        return ()
    condition = _strip_qualifiers(where.this, qualifiers)
    aggregate = condition.find(exp.AggFunc) or next(
        (n for n in condition.walk() if isinstance(n, exp.Anonymous) and n.name.upper() == "MEAN"), None
    )
    if aggregate is not None:
        raise UnsupportedSQLError(
            "aggregate in WHERE", _fragment(aggregate), "WHERE filters single rows; aggregates are not allowed there"
        )
    # Split the top-level ANDs so each filter reads like the builder's .where(...) calls. Only OR
    # binds more loosely than AND, so an OR keeps its parentheses (the filters are AND-ed again
    # by the backend); any other conjunct drops redundant ones.
    filters: list[str] = []
    for part in _conjuncts(condition):
        conjunct = part if isinstance(part.unnest(), exp.Or) else part.unnest()
        try:
            filters.append(normalise_condition(_fragment(conjunct)))
        except InvalidParameterError as error:
            raise UnsupportedSQLError("WHERE", _fragment(conjunct), error.allowed) from None
    return tuple(filters)


def _check_where_names(where: tuple[str, ...], scope: _Scope, aggregates: tuple[tuple[str, Aggregate], ...]) -> None:
    """WHERE reads each row: the tables' columns and a group key named in SELECT (``CASE ... END AS
    band ... WHERE band = 'old'``, as DuckDB reads it), never an aggregate's result by its name."""
    results = {name.casefold() for name, _ in aggregates}
    for condition in where:
        for reference in sqlglot.parse_one(condition, read="duckdb").find_all(exp.Column):
            if reference.name.casefold() in results and reference.name.casefold() in scope.derived:
                raise UnsupportedSQLError(
                    "WHERE",
                    condition,
                    f"{reference.name!r} names an aggregate of this SELECT; WHERE filters rows before they are "
                    "aggregated (write the expression itself, or filter results with HAVING)",
                )


@dataclass
class _Scope:
    """What the SELECT list and GROUP BY share: the table's qualifiers, and the derived columns made
    from expressions (an aggregate's argument, a group key), keyed by their name case-folded."""

    qualifiers: set[str]
    derived: dict[str, Derived] = field(default_factory=dict)

    def derive(self, name: str | None, node: exp.Expr, clause: str, what: str) -> str:
        """The derived column ``name`` = ``node`` (a row-level expression); ``what`` says, in a refusal
        for a missing name, how to write one."""
        fragment = _fragment(node)
        if not name:
            raise UnsupportedSQLError(clause, fragment, f"an expression needs a name here: {what}")
        try:
            expression = normalise_expression(_fragment(_strip_qualifiers(node.unnest(), self.qualifiers)))
        except InvalidParameterError as error:
            raise UnsupportedSQLError(clause, fragment, error.allowed) from None
        previous = self.derived.get(name.casefold())
        if previous is not None and previous.expression != expression:
            raise UnsupportedSQLError(clause, fragment, f"the name {name!r} is given to two different expressions")
        self.derived[name.casefold()] = Derived(name, expression)
        return name


def _group_by_clause(select: exp.Select, scope: _Scope, privacy_unit: str | None) -> tuple[GroupKey, ...]:
    group = select.args.get("group")
    if group is None:
        return ()
    for arg, clause in (
        ("all", "GROUP BY ALL"),
        ("grouping_sets", "GROUPING SETS"),
        ("rollup", "ROLLUP"),
        ("cube", "CUBE"),
        ("totals", "WITH TOTALS"),
    ):
        if group.args.get(arg):
            raise UnsupportedSQLError(
                clause, _fragment(group), "each set of groups is a separate release; run one query per grouping"
            )
    names: list[str] = []
    for item in group.expressions:
        item = item.unnest()
        if isinstance(item, exp.GroupingSets | exp.Rollup | exp.Cube):
            clause = {exp.GroupingSets: "GROUPING SETS", exp.Rollup: "ROLLUP", exp.Cube: "CUBE"}[type(item)]
            raise UnsupportedSQLError(
                clause, _fragment(item), "each set of groups is a separate release; run one query per grouping"
            )
        column = _group_item(select, item, scope)
        source = _derived_source(scope, column)
        if privacy_unit is not None and privacy_unit.casefold() in (column.casefold(), (source or "").casefold()):
            raise UnsupportedSQLError(
                "GROUP BY",
                _fragment(item),
                f"grouping by the privacy unit {privacy_unit!r} would release one statistic per person; "
                "group by a coarser column",
            )
        if column.casefold() in {n.casefold() for n in names}:
            raise UnsupportedSQLError("GROUP BY", _fragment(group), f"column {column!r} appears twice")
        names.append(column)
    return tuple(names)


def _group_item(select: exp.Select, item: exp.Expr, scope: _Scope) -> str:
    """The group column of one GROUP BY item: a column, or a derived column for an expression.

    An expression is grouped by under the name the SELECT list gives it: ``SELECT CASE ... END AS
    band ... GROUP BY band`` (or ``GROUP BY 1``, or the expression repeated). A name that is the
    alias of a SELECT expression means that expression (the compiler refuses the name if the table
    also has such a column).
    """
    qualifiers = scope.qualifiers
    expressions = {
        entry.alias.casefold(): entry
        for entry in select.expressions
        if isinstance(entry, exp.Alias)
        and (_plain_column(entry.this, qualifiers) is None or _renamed_column(entry, qualifiers) is not None)
        and entry.this.find(exp.AggFunc) is None
        and not _has_mean(entry.this)
    }
    # A group column renamed in SELECT (``region AS r``): grouped by under its new name, whether
    # GROUP BY names the alias, the column or the position (as DuckDB reads each).
    renamed = {
        column.casefold(): entry
        for entry in select.expressions
        if (column := _renamed_column(entry, qualifiers)) is not None
    }
    if isinstance(item, exp.Literal) and not item.is_string:
        items = select.expressions
        index = int(item.this) if item.this.isdigit() else 0
        if not 1 <= index <= len(items):
            raise UnsupportedSQLError("GROUP BY", _fragment(item), f"a position must be 1 to {len(items)}")
        item = items[index - 1]
        if isinstance(item, exp.Alias) and (
            _plain_column(item.this, qualifiers) is None or _renamed_column(item, qualifiers) is not None
        ):
            expressions = {item.alias.casefold(): item}
            item = exp.column(item.alias)
        else:
            item = _unaliased(item)
    column = _plain_column(item, qualifiers)
    if column is not None and column.casefold() not in expressions and column.casefold() in renamed:
        entry = renamed[column.casefold()]
        return scope.derive(entry.alias, entry.this, "GROUP BY", "SELECT <column> AS name ... GROUP BY name")
    if column is not None and column.casefold() not in expressions:
        return column
    named: exp.Alias | None
    if column is not None:
        named = expressions[column.casefold()]
    else:
        shape = _strip_qualifiers(item.unnest(), qualifiers)
        named = next((e for e in expressions.values() if _strip_qualifiers(e.this.unnest(), qualifiers) == shape), None)
        if named is None:
            raise UnsupportedSQLError(
                "GROUP BY",
                _fragment(item),
                "an expression is grouped by under the name the SELECT list gives it: "
                f"SELECT {_fragment(item)} AS name, ... GROUP BY name",
            )
    return scope.derive(named.alias, named.this, "GROUP BY", "SELECT <expression> AS name ... GROUP BY name")


def _renamed_column(entry: exp.Expr, qualifiers: set[str]) -> str | None:
    """The column of a SELECT item that renames a plain column (``region AS r``), else None."""
    if not isinstance(entry, exp.Alias):
        return None
    column = _plain_column(entry.this, qualifiers)
    return column if column is not None and column.casefold() != entry.alias.casefold() else None


def _plain_column(node: exp.Expr, qualifiers: set[str]) -> str | None:
    """The column name if ``node`` is a plain (possibly qualified) column reference, else None."""
    node = _strip_qualifiers(node.unnest(), qualifiers)
    if isinstance(node, exp.Column) and isinstance(node.this, exp.Identifier) and not node.table:
        return node.name
    return None


# --- the SELECT list ---------------------------------------------------------------------------


def _derived_source(scope: _Scope, name: str) -> str | None:
    """The column a derived column ``name`` merely renames (``SELECT region AS r``), else None."""
    derived = scope.derived.get(name.casefold())
    if derived is None:
        return None
    return _plain_column(sqlglot.parse_one(derived.expression, read="duckdb"), set())


def _renamed_groups(scope: _Scope, group_by: tuple[GroupKey, ...]) -> dict[str, str]:
    """The group columns renamed in SELECT: the column's name case-folded -> its output name."""
    renames = {}
    for group in group_by:
        source = _derived_source(scope, str(group))
        if source is not None:
            renames[source.casefold()] = str(group)
    return renames


def _renamed_keys(keys: object, group_by: tuple[GroupKey, ...], renames: dict[str, str]) -> object:
    """A ``keys`` mapping may name a renamed group column by the column's own name (``keys={"region":
    [...]}`` for ``SELECT region AS r ... GROUP BY region``) or by its output name."""
    if not renames or not isinstance(keys, Mapping):
        return keys
    groups = {str(g).casefold() for g in group_by}
    result = {}
    for column, values in keys.items():
        folded = column.casefold() if isinstance(column, str) else None
        target = renames.get(folded) if folded is not None and folded not in groups else None
        if target is not None and any(isinstance(c, str) and c.casefold() == target.casefold() for c in keys):
            raise InvalidParameterError(
                "keys", sorted(map(str, keys)), f"names the group column {target!r} twice (also as {column!r})"
            )
        result[target if target is not None else column] = values
    return result


def _select_list(
    select: exp.Select,
    scope: _Scope,
    group_by: tuple[GroupKey, ...],
    privacy_unit: str | None,
    renames: dict[str, str],
) -> tuple[tuple[tuple[str, Aggregate], ...], tuple[str, ...]]:
    qualifiers = scope.qualifiers
    items = select.expressions
    if not items:
        raise UnsupportedSQLError("SELECT", _fragment(select), "name at least one aggregate")
    group_names = {str(g).casefold(): str(g) for g in group_by}
    # Each entry: (explicit output name or None, group column name or (aggregate, default name)).
    entries: list[tuple[str | None, str | tuple[Aggregate, str]]] = []
    for item in items:
        alias = item.alias if isinstance(item, exp.Alias) else None
        node = _unaliased(item)
        if _is_star(node):
            raise UnsupportedSQLError("SELECT *", _fragment(item), "name the group columns and aggregates to release")
        column = _plain_column(node, qualifiers)
        renamed = alias is not None and column is not None and alias.casefold() != column.casefold()
        if alias and renamed and alias.casefold() in scope.derived and alias.casefold() in group_names:
            entries.append((None, group_names[alias.casefold()]))  # a renamed group column (see _group_item)
            continue
        if column is not None:
            entries.append((None, _group_column(column, alias, item, group_names, privacy_unit, renames)))
            continue
        if alias and alias.casefold() in scope.derived and alias.casefold() in group_names:
            entries.append((None, group_names[alias.casefold()]))  # an expression grouped by (see _group_item)
            continue
        entries.append((alias or None, _aggregate(node.unnest(), scope, privacy_unit, alias or None)))
    if not any(isinstance(value, tuple) for _, value in entries):
        raise UnsupportedSQLError("SELECT", _fragment(select), f"name at least one aggregate ({SUPPORTED_AGGREGATES})")

    taken: dict[str, str] = {}

    def claim(name: str) -> None:
        if name.casefold() in taken:
            raise UnsupportedSQLError("SELECT", _fragment(select), f"the output column name {name!r} is used twice")
        taken[name.casefold()] = name

    for explicit, value in entries:
        if isinstance(value, str):
            claim(value)
        elif explicit is not None:
            claim(explicit)
    aggregates: list[tuple[str, Aggregate]] = []
    columns: list[str] = []
    for explicit, value in entries:
        if isinstance(value, str):
            columns.append(value)
            continue
        aggregate, default = value
        name = explicit if explicit is not None else _unique(default, taken)
        aggregates.append((name, aggregate))
        columns.append(name)
    return tuple(aggregates), tuple(columns)


def _unaliased(item: exp.Expr) -> exp.Expr:
    """A SELECT item without its ``AS name``."""
    return item.this if isinstance(item, exp.Alias) else item


def _repeated_item(node: exp.Expr, select: exp.Select, qualifiers: set[str], columns: tuple[str, ...]) -> str | None:
    """The output column of the SELECT item that ``node`` repeats (table qualifiers aside), or None."""
    shape = _strip_qualifiers(node.unnest(), qualifiers)
    for item, column in zip(select.expressions, columns, strict=True):
        if _strip_qualifiers(_unaliased(item).unnest(), qualifiers) == shape:
            return column
    return None


def _order_clause(
    select: exp.Select, qualifiers: set[str], columns: tuple[str, ...], renames: dict[str, str]
) -> tuple[OrderBy, ...]:
    """ORDER BY as post-processing of the released table: each item names a result column (an
    output name, a group column, an interval end such as ``n_low``), a SELECT position, or repeats a
    SELECT item (``ORDER BY COUNT(*) DESC``). The compiler checks the names."""
    order = select.args.get("order")
    if order is None:
        return ()
    orders = []
    for ordered in order.expressions:
        target = ordered.this
        fragment = _fragment(ordered)
        if isinstance(target, exp.Literal) and not target.is_string:
            position = int(target.this) if target.this.isdigit() else 0
            if not 1 <= position <= len(columns):
                raise UnsupportedSQLError("ORDER BY", fragment, f"a position must be 1 to {len(columns)}")
            column = columns[position - 1]
        elif (name := _plain_column(target, qualifiers)) is not None:
            column = _output_name(name, columns, renames)
        else:
            column = _repeated_item(target, select, qualifiers, columns) or ""
            if not column:
                raise UnsupportedSQLError(
                    "ORDER BY",
                    fragment,
                    "order by a result column's name, a SELECT position or an item of the SELECT list "
                    "(the released table is sorted; nothing else is computed)",
                )
        desc = bool(ordered.args.get("desc"))
        orders.append(OrderBy(column, descending=desc, nulls_first=bool(ordered.args.get("nulls_first"))))
    return tuple(orders)


def _output_name(name: str, columns: tuple[str, ...], renames: dict[str, str]) -> str:
    """A name in HAVING or ORDER BY as a result column: a renamed group column's own name (``region``
    for ``SELECT region AS r``) reads its output column ``r``, unless a result column is so named."""
    if name.casefold() in renames and name.casefold() not in {c.casefold() for c in columns}:
        return renames[name.casefold()]
    return name


def _having_clause(
    select: exp.Select, qualifiers: set[str], columns: tuple[str, ...], renames: dict[str, str]
) -> tuple[str, ...]:
    """HAVING as post-processing of the released table: each aggregate in it must repeat an item of
    the SELECT list and is read as that item's released column (``HAVING COUNT(*) > 10`` keeps
    the rows whose noisy count exceeds 10); other names are result columns (checked by the compiler)."""
    having = select.args.get("having")
    if having is None:
        return ()

    def released(node: exp.Expr) -> exp.Expr:
        name = _plain_column(node, qualifiers) if isinstance(node, exp.Column) else None
        if name is not None:
            return exp.column(_output_name(name, columns, renames))
        if isinstance(node, exp.AggFunc | exp.WithinGroup | exp.Anonymous):
            column = _repeated_item(node, select, qualifiers, columns)
            if column is not None:
                return exp.column(column)
            if not isinstance(node, exp.Anonymous):
                raise UnsupportedSQLError(
                    "HAVING",
                    _fragment(node),
                    "may use only aggregates of the SELECT list (each one is released, and HAVING filters "
                    "the released rows); add it to SELECT",
                )
        return node

    return (having.this.transform(released).sql(dialect="duckdb"),)


def _whole_number(select: exp.Select, clause: str) -> int | None:
    """LIMIT or OFFSET: a whole number written out (they slice the released table), or None."""
    node = select.args.get(clause)
    if node is None:
        return None
    if isinstance(node, exp.Fetch):
        raise UnsupportedSQLError("FETCH", _fragment(node), "write LIMIT n (it slices the released rows)")
    value = node.args.get("expression") if isinstance(node, exp.Limit | exp.Offset) else None
    options = node.args.get("limit_options")
    if options is not None and (options.args.get("percent") or options.args.get("with_ties")):
        value = None  # a percentage of the rows, or ties: not a plain count
    if not (isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit()):
        raise UnsupportedSQLError(clause.upper(), _fragment(node), "give a whole number (it slices the released rows)")
    return int(value.this)


def _unique(name: str, taken: dict[str, str]) -> str:
    candidate, suffix = name, 2
    while candidate.casefold() in taken:
        candidate, suffix = f"{name}_{suffix}", suffix + 1
    taken[candidate.casefold()] = candidate
    return candidate


def _is_star(node: exp.Expr) -> bool:
    return isinstance(node, exp.Star | exp.Columns) or (
        isinstance(node, exp.Column) and isinstance(node.this, exp.Star)
    )


def _group_column(
    column: str,
    alias: str | None,
    item: exp.Expr,
    group_names: dict[str, str],
    privacy_unit: str | None,
    renames: dict[str, str],
) -> str:
    if privacy_unit is not None and column.casefold() == privacy_unit.casefold():
        raise UnsupportedSQLError(
            "SELECT",
            _fragment(item),
            f"the privacy unit column {privacy_unit!r} cannot be released; use COUNT(DISTINCT ...) to count people",
        )
    if column.casefold() in renames and column.casefold() not in group_names:
        raise UnsupportedSQLError(
            "SELECT",
            _fragment(item),
            f"the group column {column!r} is released as {renames[column.casefold()]!r} already; "
            "select each group column once",
        )
    if column.casefold() not in group_names:
        raise UnsupportedSQLError(
            "SELECT",
            _fragment(item),
            f"column {column!r} is neither aggregated nor in GROUP BY; raw values are never released",
        )
    return group_names[column.casefold()]


def _aggregate(node: exp.Expr, scope: _Scope, privacy_unit: str | None, alias: str | None) -> tuple[Aggregate, str]:
    """The plan aggregate for one SELECT item (named ``alias``, if given) and its default output name.

    An aggregate of an expression (``SUM(price * quantity) AS revenue``) aggregates a derived column
    named as the item (its bounds are given under that name)."""
    fragment = _fragment(node)
    arguments = _Arguments(scope, alias)
    if isinstance(node, exp.Filter):
        raise UnsupportedSQLError(
            "FILTER", fragment, "aggregate FILTER clauses are not supported; use WHERE (one query per filter)"
        )
    if isinstance(node, exp.Count):
        return _count(node, arguments, privacy_unit)
    if isinstance(node, exp.Anonymous) and node.name.upper() == "MEAN":
        if len(node.expressions) != 1:
            raise UnsupportedSQLError("SELECT", fragment, "MEAN takes one column")
        return _numeric(("mean", "avg", False), node.expressions[0], node, arguments)
    simple = _SIMPLE_AGGREGATES.get(type(node))
    if simple is not None:
        return _numeric(simple, node.this, node, arguments)
    if isinstance(node, exp.Median):
        column = arguments.column(node.this, node)
        return Aggregate("quantiles", column, levels=(0.5,)), f"median_{column}"
    levels_arg = _QUANTILE_FUNCTIONS.get(type(node))
    if levels_arg is not None:
        extra = [k for k, v in node.args.items() if v and k not in ("this", levels_arg)]
        if extra:
            raise UnsupportedSQLError("SELECT", fragment, f"the options {', '.join(extra)} are not supported")
        column = arguments.column(node.this, node)
        levels = _levels(node.args.get(levels_arg), node)
        return Aggregate("quantiles", column, levels=levels), f"quantile_{column}"
    if isinstance(node, exp.WithinGroup):
        return _within_group(node, arguments)
    if isinstance(node, exp.AggFunc):
        name = node.sql_name() if isinstance(node, exp.Func) else node.key.upper()
        raise UnsupportedSQLError(
            "SELECT", fragment, f"{name} is not a supported aggregate; supported: {SUPPORTED_AGGREGATES}"
        )
    if node.find(exp.AggFunc) is not None or _has_mean(node):
        raise UnsupportedSQLError(
            "SELECT",
            fragment,
            "arithmetic on aggregates and nested aggregates are not supported; compute it from the "
            "released columns (post-processing is free; AVG is provided)",
        )
    raise UnsupportedSQLError(
        "SELECT",
        fragment,
        f"each item must be a GROUP BY column or a supported aggregate ({SUPPORTED_AGGREGATES}); "
        f"to group by an expression, name it and group by the name: SELECT {fragment} AS name ... GROUP BY name",
    )


def _has_mean(node: exp.Expr) -> bool:
    return any(isinstance(n, exp.Anonymous) and n.name.upper() == "MEAN" for n in node.walk())


def _count(node: exp.Count, arguments: _Arguments, privacy_unit: str | None) -> tuple[Aggregate, str]:
    qualifiers = arguments.scope.qualifiers
    fragment = _fragment(node)
    argument = node.this
    if node.expressions:
        raise UnsupportedSQLError("SELECT", fragment, "COUNT takes * or one argument")
    if argument is None or isinstance(argument, exp.Star):
        return Aggregate("count"), "count"
    argument = argument.unnest()
    if isinstance(argument, exp.Literal) and not argument.is_string:
        return Aggregate("count"), "count"
    if isinstance(argument, exp.Distinct):
        if len(argument.expressions) != 1 or argument.args.get("on") is not None:
            raise UnsupportedSQLError("COUNT(DISTINCT ...)", fragment, "only COUNT(DISTINCT <privacy unit>)")
        column = _plain_column(argument.expressions[0], qualifiers)
        if privacy_unit is None:
            raise UnsupportedSQLError(
                "COUNT(DISTINCT ...)",
                fragment,
                "this session has no privacy-unit column (each row is one person); use COUNT(*)",
            )
        if column is None or column.casefold() != privacy_unit.casefold():
            raise UnsupportedSQLError(
                "COUNT(DISTINCT ...)",
                fragment,
                f"only COUNT(DISTINCT {privacy_unit}) (the privacy unit) is supported: distinct counts of other "
                "columns have unbounded sensitivity (one person can add many distinct values)",
            )
        return Aggregate("count_distinct"), "count_distinct"
    # COUNT(col): the rows where it is not NULL; COUNT(expression): a derived column's.
    column = arguments.column(argument, node)
    return Aggregate("count", column), f"count_{column}"


def _numeric(
    simple: tuple[AggregateKind, str, bool], argument: exp.Expr | None, node: exp.Expr, arguments: _Arguments
) -> tuple[Aggregate, str]:
    kind, prefix, sample = simple
    column = arguments.column(argument, node)
    return Aggregate(kind, column, sample=sample), f"{prefix}_{column}"


def _function_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return node.name.upper()
    return node.sql_name() if isinstance(node, exp.Func) else node.key.upper()


@dataclass(frozen=True)
class _Arguments:
    """Reads an aggregate's argument as a column: a plain column, or an expression made a derived
    column named as the SELECT item (``alias``)."""

    scope: _Scope
    alias: str | None

    def column(self, argument: exp.Expr | None, node: exp.Expr) -> str:
        name = _function_name(node)
        if argument is None:
            raise UnsupportedSQLError("SELECT", _fragment(node), f"{name} needs a column")
        argument = argument.unnest()
        if isinstance(argument, exp.Distinct):
            raise UnsupportedSQLError(
                f"DISTINCT in {name}",
                _fragment(node),
                "DISTINCT inside an aggregate is not supported (one person could add many distinct values)",
            )
        column = _plain_column(argument, self.scope.qualifiers)
        if column is not None:
            return column
        if argument.find(exp.AggFunc) is not None or _has_mean(argument):
            raise UnsupportedSQLError("SELECT", _fragment(node), "aggregates cannot be nested")
        return self.scope.derive(
            self.alias,
            argument,
            "SELECT",
            f"{_fragment(node)} AS name (an aggregate of an expression reads a derived column of that name, "
            "and its clamping bounds are given under that name)",
        )


def _levels(argument: exp.Expr | None, node: exp.Expr) -> tuple[float, ...]:
    name, fragment = _function_name(node), _fragment(node)
    if argument is None:
        raise UnsupportedSQLError("SELECT", fragment, f"{name} needs a quantile level, e.g. 0.5 or [0.25, 0.75]")
    argument = argument.unnest()
    items = argument.expressions if isinstance(argument, exp.Array) else [argument]
    if not items:
        raise UnsupportedSQLError("SELECT", fragment, f"{name} needs at least one quantile level")
    levels: list[float] = []
    for item in items:
        value = _number(item.unnest())
        if value is None or not 0.0 < value < 1.0:
            raise UnsupportedSQLError(
                "SELECT",
                fragment,
                f"quantile levels must be numbers strictly between 0 and 1 (a number or a list [q1, q2, ...]), "
                f"got {_fragment(item)}",
            )
        levels.append(value)
    return tuple(levels)


def _number(node: exp.Expr) -> float | None:
    if isinstance(node, exp.Neg):
        inner = _number(node.this.unnest())
        return None if inner is None else -inner
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return float(node.this)
        except ValueError:
            return None
    return None


def _within_group(node: exp.WithinGroup, arguments: _Arguments) -> tuple[Aggregate, str]:
    fragment = _fragment(node)
    function, order = node.this, node.expression
    if not isinstance(function, exp.PercentileCont | exp.PercentileDisc):
        raise UnsupportedSQLError(
            "WITHIN GROUP", fragment, "only PERCENTILE_CONT / PERCENTILE_DISC (q) WITHIN GROUP (ORDER BY col)"
        )
    if function.args.get("expression") is not None:
        raise UnsupportedSQLError("WITHIN GROUP", fragment, f"{_function_name(function)} takes only the level(s)")
    ordered = order.expressions if isinstance(order, exp.Order) else []
    if len(ordered) != 1 or not isinstance(ordered[0], exp.Ordered):
        raise UnsupportedSQLError("WITHIN GROUP", fragment, "ORDER BY exactly one column")
    if ordered[0].args.get("desc"):
        raise UnsupportedSQLError(
            "WITHIN GROUP", fragment, "ORDER BY ... DESC is not supported; order ascending and use level 1 - q"
        )
    column = arguments.column(ordered[0].this, function)
    levels = _levels(function.this, function)
    return Aggregate("quantiles", column, levels=levels), f"quantile_{column}"
