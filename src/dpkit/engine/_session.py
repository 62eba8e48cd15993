"""The session: a sensitive table, who a person is, a budget and its ledger, and the query entry points.

>>> import pandas as pd
>>> import dpkit
>>> from dpkit import engine as E
>>> from dpkit.noise import InsecureSeededRandom
>>> people = pd.DataFrame(
...     {"person_id": [1, 1, 2, 3], "region": ["n", "n", "s", "s"], "income": [10.0, 20.0, 30.0, 40.0]}
... )
>>> session = dpkit.Session.from_pandas(people, name="people", privacy_unit="person_id", budget=dpkit.PureDP(1.0))
>>> query = session.table("people").group_by("region", keys=["n", "s"]).agg(n=E.count())
>>> query.preview(epsilon=0.5).guarantee.epsilon
0.5
>>> result = query.release(epsilon=0.5, rng=InsecureSeededRandom(1))   # a seed is for tests only
>>> result.to_pandas().columns.tolist()
['region', 'n', 'n_low', 'n_high']
>>> session.remaining.epsilon
0.5
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dpkit._errors import DPError, InvalidParameterError, PostProcessingError, QueryFailedError, first_line
from dpkit.engine._backends import Backend, ColumnInfo, make_backend
from dpkit.engine._builder import QueryBuilder
from dpkit.engine._compiler import CompileContext, CompiledQuery, compile_query, parse_request
from dpkit.engine._csv import TypedCsv, csv_header, matching_files, typed_csv_spec
from dpkit.engine._execute import combine, describe, dry_run, execute, postprocess, selection_entry, statistic_label
from dpkit.engine._ledger import Ledger
from dpkit.engine._plan import Contribution, Query, arrange, check_bounds_mapping, spelling_resolver
from dpkit.engine._result import Preview, Result, arrow_table, expression_types, keep_rows
from dpkit.guarantees import ZCDP, ApproxDP, ApproxZCDP, Guarantee, NeighbourRelation, PureDP
from dpkit.noise import RandomSource, resolve_source

__all__ = ["Session"]


_ADD_REMOVE_ONLY = (
    "must be stated for adding or removing one person (NeighbourRelation.ADD_REMOVE): the engine "
    "calibrates every release to that relation; a replace-one budget would need the sensitivities "
    "of a replacement (a replace-one guarantee follows from add/remove by group privacy for 2)"
)


#: Arguments of SQL text that a built query states in its plan: (the builder's step, the Query's field).
_PLAN_ARGUMENTS = {
    "keys": (".group_by(..., keys=[...])", "dataclasses.replace(query, keys=...)"),
    "rows_per_group": (".bound(rows_per_group=...)", "contribution=Contribution(rows_per_group=...)"),
    "groups_per_person": (".bound(groups_per_person=...)", "contribution=Contribution(groups_per_person=...)"),
}


def _check_budget(budget: object) -> Guarantee | None:
    if budget is None:
        return None
    if not isinstance(budget, PureDP | ApproxDP | ZCDP | ApproxZCDP):
        raise InvalidParameterError(
            "budget",
            budget,
            "must be a dpkit guarantee: PureDP(eps), ApproxDP(eps, delta), ZCDP(rho) or ApproxZCDP(rho, delta)",
        )
    if budget.neighbours is not NeighbourRelation.ADD_REMOVE:  # refused before any ledger file exists
        raise InvalidParameterError("budget", budget, _ADD_REMOVE_ONLY)
    return budget


class Session:
    """A private table opened for differentially private queries under one budget.

    Build it with :meth:`from_parquet`, :meth:`from_csv`, :meth:`from_pandas`,
    :meth:`from_arrow`, :meth:`from_polars` or :meth:`from_spark`. Arguments shared by all:

    - ``name``: the table's name in SQL (default: the file's stem, or ``data`` for a frame);
    - ``privacy_unit``: the column that identifies a person (every row of one person is
      protected together), or None when each row is a different person;
    - ``budget``: the total guarantee, ``PureDP``, ``ApproxDP``, ``ZCDP`` or ``ApproxZCDP`` (the
      tightest for many Gaussian queries with private keys: rho and delta add, and the
      conversion to (epsilon, delta) is paid once for the whole ledger);
    - ``ledger``: a file path for a persistent ledger shared by every session and process that
      opens it (the budget is then stored there), or None for an in-memory ledger;
    - ``ledger_anchor``: with a ledger file, a second file that records its newest entry, so a
      ledger rolled back to an earlier state is refused (:class:`~dpkit.engine.Ledger`'s ``anchor``);
    - ``bounds``: default clamping bounds per numeric column, ``{"income": (0, 200_000)}``;
    - ``contribution``: default per-person limits (:class:`~dpkit.engine.Contribution`);
    - ``public_tables``: lookup tables that are public, ``{"regions": frame_or_path}``;
    - ``backend``: ``"duckdb"`` (default), ``"spark"``, or a :class:`~dpkit.engine.Backend`.

    Privacy contract: every release debits the ledger with the query's full cost *before* the
    backend runs or any noise is drawn; a refused or invalid query spends nothing; the
    released values are differentially private with respect to adding or removing one person
    (all rows with one ``privacy_unit`` value) under the stated cost.

    >>> import dpkit
    >>> from dpkit import engine as E
    >>> from dpkit.datasets import REGIONS, visits
    >>> session = Session.from_pandas(visits(), name="visits", privacy_unit="person_id",
    ...                               budget=dpkit.PureDP(1.0), bounds={"spend": (0, 200)})
    >>> query = session.table().group_by("region", keys=list(REGIONS)).agg(n=E.count(), avg=E.mean("spend"))
    >>> result = session.release(query, epsilon=0.5)
    >>> list(result.to_pandas().columns)
    ['region', 'n', 'n_low', 'n_high', 'avg', 'avg_low', 'avg_high']
    >>> session.remaining
    PureDP(epsilon=0.5)
    >>> session.sql("SELECT COUNT(*) AS n FROM visits", epsilon=0.6)
    Traceback (most recent call last):
    dpkit._errors.BudgetExceededError: ...
    """

    def __init__(
        self,
        source: object,
        kind: str,
        *,
        name: str,
        privacy_unit: str | None = None,
        budget: Guarantee | None = None,
        ledger: str | os.PathLike[str] | Ledger | None = None,
        ledger_anchor: str | os.PathLike[str] | None = None,
        bounds: Mapping[str, Any] | None = None,
        contribution: Contribution | None = None,
        public_tables: Mapping[str, object] | None = None,
        backend: object = None,
        analyst: str | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidParameterError("name", name, "must be a table name (letters, digits, underscores)")
        if privacy_unit is not None and (not isinstance(privacy_unit, str) or not privacy_unit):
            raise InvalidParameterError("privacy_unit", privacy_unit, "must be a column name or None (one row)")
        checked_budget = _check_budget(budget)
        if bounds is not None and not isinstance(bounds, Mapping):
            raise InvalidParameterError("bounds", bounds, "must be a mapping column -> (low, high) or 'auto'")
        self._bounds = check_bounds_mapping(bounds or {})
        if contribution is not None and not isinstance(contribution, Contribution):
            raise InvalidParameterError("contribution", contribution, "must be a dpkit.engine.Contribution")
        self._contribution = contribution or Contribution()
        if ledger_anchor is not None and (ledger is None or isinstance(ledger, Ledger)):
            raise InvalidParameterError(
                "ledger_anchor",
                ledger_anchor,
                "needs a ledger file path (for a Ledger object, pass anchor= to Ledger)",
            )
        if isinstance(ledger, Ledger):
            if checked_budget is not None and ledger.budget != checked_budget:
                raise InvalidParameterError(
                    "budget", checked_budget, f"differs from the ledger's budget {ledger.budget}"
                )
        elif ledger is None and checked_budget is None:
            raise InvalidParameterError("budget", None, "give a budget (or a ledger file that stores one)")
        self._analyst = analyst
        self._backend: Backend = make_backend(backend)
        self._name = name
        self._privacy_unit = privacy_unit
        # The tables are opened (schema only) before the ledger: a session refused for its source,
        # a public table or its privacy unit leaves no new ledger file (holding this budget) behind.
        self._columns = _open(self._backend, name, source, kind, "source")
        self._public: dict[str, dict[str, ColumnInfo]] = {}
        names = [table for table in (public_tables or {}) if isinstance(table, str)]
        if len({table.casefold() for table in names}) < len(names):
            raise InvalidParameterError(
                "public_tables",
                sorted(names),
                "two names differ only in case: the engines would read one table for both",
            )
        for table, table_source in (public_tables or {}).items():
            self.add_public_table(table, table_source)
        if privacy_unit is not None:  # matched without case, as every other column name
            privacy_unit = spelling_resolver(list(self._columns))(privacy_unit)
            self._privacy_unit = privacy_unit
        if privacy_unit is not None and privacy_unit not in self._columns:
            raise InvalidParameterError(
                "privacy_unit", privacy_unit, f"is not a column of {name!r}; columns: {', '.join(self._columns)}"
            )
        self._ledger = (
            ledger if isinstance(ledger, Ledger) else _open_ledger(ledger, checked_budget, analyst, ledger_anchor)
        )
        if self._ledger.budget.neighbours is not NeighbourRelation.ADD_REMOVE:  # a ledger file's own budget
            stored = self._ledger.budget
            if not isinstance(ledger, Ledger):
                self._ledger.close()
            raise InvalidParameterError("ledger", stored, _ADD_REMOVE_ONLY)
        self._lock = threading.Lock()
        # One backend connection serves the session: queries from several threads take turns, so
        # none fails after its debit because the connection was busy.
        self._run_lock = threading.RLock()
        # What close() releases: only what the session opened itself.
        self._owns_ledger = not isinstance(ledger, Ledger)
        self._owns_backend = backend is None or isinstance(backend, str)
        self._closed = False

    # -- constructors ------------------------------------------------------------------------------

    @classmethod
    def from_parquet(cls, path: str | os.PathLike[str], *, name: str | None = None, **options: Any) -> Session:
        """Open a Parquet file (or glob) as the private table (scanned in place: larger than memory is fine)."""
        return cls(_existing(path), "parquet", name=name or _stem(path), **options)

    @classmethod
    def from_csv(
        cls,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        types: Mapping[str, str] | None = None,
        delimiter: str | None = None,
        **options: Any,
    ) -> Session:
        """Open a CSV file (or glob) with a header row as the private table (scanned in place).

        ``types`` declares every column's type (``{"person_id": "BIGINT", "income": "DOUBLE", ...}``;
        BOOLEAN, TINYINT to BIGINT, REAL, DOUBLE, DECIMAL(p, s), VARCHAR, DATE, TIMESTAMP). Each field
        is then read as text and converted alone: a value that does not parse as its type reads as
        NULL (handled by the declared clamping), a line with the wrong number of fields is left
        out, and the dialect is fixed (``delimiter``, default ``,`` or a tab for ``.tsv``; ``"``
        quotes, as CSV writers produce). The schema, which is public, then owes nothing to the rows.

        Without ``types`` the engine infers the types and dialect from the rows: one person's
        unusual value can change a column's type, and so which queries are refused. Declare the
        types (or use Parquet) when the analysts must not learn anything from the schema.

        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "people.csv"
        >>> _ = path.write_text("person_id,income\\n1,10\\n2,N/A\\n")
        >>> types = {"person_id": "BIGINT", "income": "DOUBLE"}
        >>> session = Session.from_csv(path, types=types, privacy_unit="person_id", budget=PureDP(1))
        >>> session.columns["income"].type      # 'N/A' reads as NULL; the column stays DOUBLE
        'DOUBLE'
        """
        if types is None:
            if delimiter is not None:
                raise InvalidParameterError(
                    "delimiter", delimiter, "is used with types=...; without declared types the dialect is inferred"
                )
            return cls(_existing(path), "csv", name=name or _stem(path), **options)
        if delimiter is None:
            delimiter = "\t" if os.fspath(path).lower().endswith((".tsv", ".tsv.gz")) else ","
        spec = typed_csv_spec(_existing(path), types, delimiter)
        return cls(spec, "csv", name=name or _stem(path), **options)

    @classmethod
    def from_pandas(cls, frame: Any, *, name: str = "data", **options: Any) -> Session:
        """Use a pandas DataFrame as the private table.

        The frame is read where it is, not copied (no second copy in memory): leave it unchanged
        while the session is open. Its object columns are checked once, here; a value written into
        one later that DuckDB cannot read as the column's type would fail a release after its debit.
        """
        return cls(frame, "pandas", name=name, **options)

    @classmethod
    def from_arrow(cls, table: Any, *, name: str = "data", **options: Any) -> Session:
        """Use a pyarrow Table as the private table."""
        return cls(table, "arrow", name=name, **options)

    @classmethod
    def from_polars(cls, frame: Any, *, name: str = "data", **options: Any) -> Session:
        """Use a Polars DataFrame as the private table."""
        return cls(frame, "polars", name=name, **options)

    @classmethod
    def from_spark(cls, frame: Any, *, name: str = "data", **options: Any) -> Session:
        """Use a Spark DataFrame as the private table (runs on Spark: its session is reused)."""
        from dpkit.engine._backends import SparkBackend

        options.setdefault("backend", SparkBackend(frame.sparkSession))
        return cls(frame, "spark", name=name, **options)

    def add_public_table(self, name: str, source: object) -> None:
        """Register a public lookup table (a path to Parquet/CSV, or a frame) for joins."""
        # Table names are compared as the engines do (case-insensitively): a public table must never
        # shadow the private one.
        if not isinstance(name, str) or not name.isidentifier() or name.casefold() == self._name.casefold():
            raise InvalidParameterError("public_tables", name, "must be a table name different from the private table")
        for other in list(self._public):
            if other.casefold() == name.casefold():
                del self._public[other]  # the same table name to the engine: this replaces it
        self._public[name] = _open(self._backend, name, *_source_kind(source), "public_tables", public=True)

    # -- reading the budget ------------------------------------------------------------------------

    @property
    def ledger(self) -> Ledger:
        return self._ledger

    @property
    def budget(self) -> Guarantee:
        return self._ledger.budget

    @property
    def remaining(self) -> Guarantee:
        """What is left of the budget (read from the shared ledger)."""
        self._check_open()
        return self._ledger.remaining

    @property
    def columns(self) -> dict[str, ColumnInfo]:
        """The private table's columns, their types in DuckDB's names on every backend (as
        ``Result.group_types``: Spark's ``string`` reads VARCHAR)."""
        types = self._reported_types({name: info.type for name, info in self._columns.items()})
        return {name: replace(info, type=types[name]) for name, info in self._columns.items()}

    # -- queries -------------------------------------------------------------------------------------

    def table(self, name: str | None = None) -> QueryBuilder:
        """Start a Python query on the private table: ``session.table("people").where(...).agg(...)``.

        ``name`` (default: the private table's) is matched without case, as SQL's ``FROM`` is."""
        if name and (not isinstance(name, str) or name.casefold() != self._name.casefold()):
            raise InvalidParameterError("name", name, f"the private table of this session is {self._name!r}")
        return QueryBuilder(self, self._name)

    def sql(
        self,
        text: str,
        *,
        keys: object = None,
        rows_per_group: int | None = None,
        groups_per_person: int | None = None,
        **cost: Any,
    ) -> Result:
        """Run one SQL SELECT privately. ``cost``: epsilon / delta / rho / accuracy, alpha, bounds, mechanism, rng."""
        return self.release(text, keys=keys, rows_per_group=rows_per_group, groups_per_person=groups_per_person, **cost)

    def _parse(self, text: str, keys: object, rows_per_group: int | None, groups_per_person: int | None) -> Query:
        from dpkit.engine._sql import parse_query

        query, _ = parse_query(
            text, table=self._name, public_tables=tuple(self._public), privacy_unit=self._privacy_unit, keys=keys
        )
        if rows_per_group is not None or groups_per_person is not None:
            import dataclasses

            query = dataclasses.replace(
                query,
                contribution=Contribution(
                    rows_per_group if rows_per_group is not None else self._contribution.rows_per_group,
                    groups_per_person if groups_per_person is not None else self._contribution.groups_per_person,
                ),
            )
        return query

    def _key_columns(self, sql: str) -> dict[str, ColumnInfo]:
        """The columns public keys may be given for in ``sql``: the table's (:attr:`columns`) and the
        derived columns the query makes (``SELECT CASE ... END AS band ... GROUP BY band``), typed
        by binding their expressions (no rows read). A query that does not parse or bind adds
        nothing here: running it reports why."""
        columns = dict(self._columns)
        try:
            query = self._parse(sql, None, None, None)
            describe = getattr(self._backend, "derived_schema", None)
            if query.derived and describe is not None:
                derived = describe(query.table, query.joins, query.derived)
                columns.update({name: info for name, info in derived.items() if name not in columns})
        except DPError:
            pass
        return columns

    def _context(self) -> CompileContext:
        return CompileContext(
            table=self._name,
            columns=self._columns,
            public_tables=self._public,
            privacy_unit=self._privacy_unit,
            budget=self._ledger.budget,
            bounds=self._bounds,
            contribution=self._contribution,
            derived_schema=getattr(self._backend, "derived_schema", None),
        )

    def _compile(self, query: QueryBuilder | Query | str, cost: dict[str, Any]) -> CompiledQuery:
        self._check_open()
        if isinstance(query, str):
            query = self._parse(
                query, cost.pop("keys", None), cost.pop("rows_per_group", None), cost.pop("groups_per_person", None)
            )
        plan = query.plan if isinstance(query, QueryBuilder) else query
        if not isinstance(plan, Query):
            raise InvalidParameterError("query", query, "must be a QueryBuilder, a Query or SQL text")
        bounds = cost.pop("bounds", None)
        allowed = {"epsilon", "delta", "rho", "accuracy", "alpha", "mechanism"}
        for name, (step, field) in _PLAN_ARGUMENTS.items():
            if name in cost and cost[name] is None:
                del cost[name]  # (not given)
            elif name in cost:  # the keys and limits of a built query are steps of its builder
                where = f"the builder: {step}" if isinstance(query, QueryBuilder) else f"the Query: {field}"
                raise InvalidParameterError(
                    name,
                    cost[name],
                    f"is an argument for SQL text (session.sql(text, {name}=...)); a built query takes it from {where}",
                )
        unknown = sorted(set(cost) - allowed)
        if unknown:
            raise InvalidParameterError(
                ", ".join(unknown),
                cost[unknown[0]] if len(unknown) == 1 else {name: cost[name] for name in unknown},
                f"unknown argument; allowed: {', '.join(sorted(allowed | {'bounds', 'rng'}))}",
            )
        request = parse_request(self._ledger.budget, **cost)
        compiled = compile_query(plan, self._context(), request, bounds=bounds)
        _bind_having(compiled)
        if self._privacy_unit is None:
            # One row is one person, and rows are not bounded: a lookup key that repeats would turn
            # one private row into several. (Per person, the joined rows stay that person's rows.)
            for join in compiled.query.joins:
                if self._repeated_keys(join.table, join.on):
                    raise InvalidParameterError(
                        "join",
                        join.table,
                        f"with row-level privacy (privacy_unit=None) a lookup table needs one row per key; "
                        f"some {', '.join(join.on)} value repeats in {join.table!r}, so one private row would "
                        "count several times (deduplicate it, or give a privacy unit column)",
                    )
        return compiled

    def _repeated_keys(self, table: str, columns: tuple[str, ...]) -> bool:
        """Whether public ``table`` repeats a key of ``columns`` (a typed error if it cannot be read)."""
        try:
            return self._backend.has_repeated_keys(table, columns)
        except DPError:
            raise
        except Exception as error:  # noqa: BLE001 - a public table: its reader's message may be shown
            reason = first_line(error)
            raise InvalidParameterError(
                "public_tables", table, f"the {self._backend.name} backend cannot read it ({reason})"
            ) from None

    def preview(self, query: QueryBuilder | Query | str, **cost: Any) -> Preview:
        """Cost and expected error of ``query`` without reading data or spending budget.

        The backend binds the query first (schema only, no rows), so a query that :meth:`release`
        would refuse before its debit is refused here too. With private keys the number of groups is
        known only after selection: a sum's scale and half-width are shown for one group, and the
        release's grid term (see :class:`~dpkit.mechanisms.Laplace`) makes them at most a relative
        2^-20 larger.
        """
        cost = dict(cost)
        cost.pop("rng", None)
        with self._run_lock:
            compiled = self._compile(query, cost)
            compiled.verify()
            dry_run(compiled, self._backend)
        dimension = (
            len(compiled.query.keys) if compiled.query.keys is not None else (1 if compiled.public_keys else None)
        )
        rows: list[dict[str, Any]] = []
        for statistic in compiled.statistics:
            bounds = compiled.bounds.get(statistic.column or "") if statistic.column else None
            fixed = bounds if isinstance(bounds, tuple) else None
            if statistic.kind in ("sum", "csum", "csq") and fixed is None:
                rows.append({"statistic": statistic_label(statistic), "mechanism": "depends on private bounds"})
                continue
            if statistic.key == compiled.selection_key and compiled.selection_epsilon is not None:
                selector = compiled.selection_mechanism(dimension or 1)
                entry = selection_entry(compiled, selector, compiled.selection_threshold(selector))
                rows.append({**entry, "expected_error": float(selector.expected_error)})
                continue
            noise = compiled.mechanism(statistic, dimension or 1, fixed)
            rows.append({**describe(compiled, statistic, noise, fixed), "expected_error": noise.expected_error})
        remaining_after = self._ledger.remaining_after(compiled.cost)
        affordable = remaining_after is not None
        return Preview(
            compiled.cost,
            compiled.request.alpha,
            compiled.contribution,
            tuple(rows),
            remaining_after,
            affordable,
            dimension,
        )

    def release(self, query: QueryBuilder | Query | str, *, rng: RandomSource | None = None, **cost: Any) -> Result:
        """Spend the query's cost from the ledger, then run it and release noisy answers.

        ``cost``: ``epsilon`` (and ``delta``) for PureDP/ApproxDP budgets, ``rho`` for zCDP,
        ``rho`` and ``delta`` for ApproxZCDP (delta is charged only when private keys select);
        under a zCDP or ApproxZCDP budget ``epsilon`` (with ``delta`` for private keys) spends
        Laplace noise, charged rho = epsilon^2 / 2; or ``accuracy`` (a half-width, or a mapping
        aggregate -> half-width, at ``alpha``) instead of epsilon; ``alpha`` (default 0.05) for the
        intervals; ``bounds`` per column; ``mechanism`` ("auto", "laplace", "gaussian"). ``rng`` is
        for tests only.

        Raises BudgetExceededError (nothing spent) when the cost does not fit the remaining
        budget, InvalidParameterError for bad input (nothing spent, no data read).
        """
        with self._run_lock:
            compiled = self._compile(query, dict(cost))
            source = resolve_source(rng)
            compiled.verify()  # re-check the privacy claim before spending (a failure is our bug)
            dry_run(compiled, self._backend)  # schema errors refuse the query before anything is spent
            with self._lock:
                entry = self._ledger.reserve(
                    compiled.cost, description=compiled.query.describe(), analyst=self._analyst
                )
            try:
                released = execute(compiled, self._backend, source)
            except DPError:
                raise
            except Exception as error:  # noqa: BLE001 - withheld: the text can quote data
                raise QueryFailedError(
                    f"the query failed on the {self._backend.name} backend after its cost {compiled.cost} was "
                    f"debited (ledger entry {getattr(entry, 'index', None)}); the backend's "
                    f"{type(error).__name__} message is withheld because it can quote the data"
                ) from None
        columns = combine(released.keys, compiled.query.group_names, postprocess(compiled, released))
        value_types = released_types(compiled, columns)
        try:
            arranged = arrange(
                # (counts as DOUBLE here, as before they were int64: `n * n` must not overflow int64
                # after the debit)
                keep_rows(columns, compiled.group_types, compiled.query.having),
                compiled.query,
            )
        except Exception as error:  # noqa: BLE001 - about released (public) values only
            reason = first_line(error)
            raise PostProcessingError(
                f"HAVING failed on the released table ({reason}); the release itself is in this error's "
                f"`result` (its cost {compiled.cost} was debited)",
                self._result(compiled, released, columns, entry, value_types),
            ) from None
        return self._result(compiled, released, arranged, entry, value_types)

    def _result(
        self,
        compiled: CompiledQuery,
        released: Any,
        columns: dict[str, list[Any]],
        entry: Any,
        value_types: dict[str, str],
    ) -> Result:
        return Result(
            columns=columns,
            guarantee=compiled.cost,
            alpha=compiled.request.alpha,
            contribution=compiled.contribution,
            budget_split=tuple(released.split),
            bounds=released.bounds,
            description=compiled.query.describe(),
            entry_index=getattr(entry, "index", None),
            group_types=self._reported_types(compiled.group_types),
            value_types=value_types,
        )

    def _reported_types(self, types: Mapping[str, str]) -> dict[str, str]:
        """The group columns' types in DuckDB's names on every backend (Spark's ``string``,
        ``bigint``, ``timestamp_ntz`` are VARCHAR, BIGINT, TIMESTAMP), so a result reads the same
        whichever engine ran it; a type DuckDB has no name for keeps Spark's."""
        if self._backend.name != "spark":
            return dict(types)
        from dpkit.engine._spark_sql import duck_column_type

        return {name: duck_column_type(kind) or kind for name, kind in types.items()}

    def close(self) -> None:
        """Release what the session opened: its ledger's connection and the DuckDB database it made
        (with its spill directory). A ``Ledger`` or a backend object passed in stays open, and
        Spark's own session is never stopped. Afterwards every query is refused (nothing spent);
        the ledger file keeps every debit. Safe to call twice; ``with Session...(...) as s:`` calls it.

        >>> import dpkit
        >>> from dpkit.datasets import visits
        >>> with Session.from_pandas(visits(), privacy_unit="person_id", budget=dpkit.PureDP(1)) as session:
        ...     session.remaining
        PureDP(epsilon=1.0)
        >>> session.sql("SELECT COUNT(*) FROM data", epsilon=0.5)
        Traceback (most recent call last):
        dpkit._errors.InvalidParameterError: session: got Session(table='data', closed); is closed; open a new Session
        """
        with self._run_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            if self._owns_ledger:
                self._ledger.close()
            close = getattr(self._backend, "close", None)
            if self._owns_backend and callable(close):
                close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidParameterError("session", _ClosedSession(self._name), "is closed; open a new Session")

    @property
    def privacy_unit(self) -> str | None:
        """The column that identifies a person, as the schema spells it (None: each row is one)."""
        return self._privacy_unit

    def progress(self) -> float | None:
        """Fraction done of the backend query running now (call it from another thread), or None.

        Used by ``dpkit query`` for its progress bar; a backend without progress reporting gives None.
        """
        report = getattr(self._backend, "progress", None)
        return report() if callable(report) else None

    def __repr__(self) -> str:
        if self._closed:
            return repr(_ClosedSession(self._name))
        return (
            f"Session(table={self._name!r}, privacy_unit={self._privacy_unit!r}, "
            f"backend={self._backend.name!r}, remaining={self.remaining})"
        )


def released_types(compiled: CompiledQuery, columns: dict[str, list[Any]]) -> dict[str, str]:
    """``Result.value_types``: BIGINT for each count column that postprocessing left whole (all but
    counts beyond 2^63)."""
    counts = {name: kind for name, kind in compiled.result_types.items() if name not in compiled.group_types}
    return {name: kind for name, kind in counts.items() if all(isinstance(v, int) for v in columns.get(name, ()))}


def _bind_having(compiled: CompiledQuery) -> None:
    """Check the HAVING conditions before the debit, on no released value.

    They are run on one row of NULLs with the result's columns and types, so a condition DuckDB
    cannot bind or fold (a column compared with text of another type, ``n > 'abc'``) is refused
    here; every condition, and every operand of its AND, OR, NOT and CASE WHEN, must be BOOLEAN
    (DuckDB would cast a text or number to BOOLEAN row by row: ``HAVING region`` failed on the
    released key 'North', ``HAVING n - 752`` dropped the groups whose noisy count was 752); and
    with public keys, the conditions are run on the keys (every released value NULL), so a cast
    of a key that does not convert is refused before anything is spent. What can still fail is a
    condition on a released value (an overflow): the session then raises PostProcessingError,
    whose ``result`` is the whole release."""
    query = compiled.query
    if not query.having:
        return
    shown = " AND ".join(_shown_condition(condition) for condition in query.having)
    nulls = {name: [None] for name in query.result_columns}
    try:
        keep_rows(nulls, compiled.group_types, query.having)
        checks = [check for condition in query.having for check in _truth_operands(condition)]
        kinds = expression_types(query.result_columns, compiled.group_types, [text for text, _ in checks])
    except Exception as error:  # noqa: BLE001 - no data here: the message is about the text alone
        reason = first_line(error)
        raise InvalidParameterError("having", shown, f"cannot be evaluated on the result ({reason})") from None
    for (_, display), kind in zip(checks, kinds, strict=True):
        if kind.upper() not in ("BOOLEAN", '"NULL"', "NULL"):
            raise InvalidParameterError(
                "having",
                shown,
                f"the condition {display} is {kind}, not BOOLEAN (compare it: x = ..., x > ..., x IS NOT NULL); "
                "HAVING filters the released rows on conditions that are true or false",
            )
    keys = query.keys
    if keys is None or not query.group_by:
        return
    names = query.group_names
    rows = {name: [key[i] for key in keys] for i, name in enumerate(names)}
    rows.update({name: [None] * len(keys) for name in query.result_columns if name not in rows})
    try:
        arrow_table(rows, compiled.group_types)
    except Exception:  # noqa: BLE001 - keys this check cannot type are checked by the release itself
        return
    try:
        keep_rows(rows, compiled.group_types, query.having)
    except Exception as error:  # noqa: BLE001 - the keys are public: the message may quote them
        reason = first_line(error)
        raise InvalidParameterError(
            "having", shown, f"fails on the public keys, before anything is spent ({reason})"
        ) from None


def _truth_operands(condition: str) -> list[tuple[str, str]]:
    """The parts of a HAVING condition DuckDB reads as true or false: the condition, the operands of
    its AND, OR and NOT, and the WHEN conditions of a CASE or IF; each as (DuckDB text, text to show)."""
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(condition, read="duckdb")
    parts: list[exp.Expr] = [tree]
    for node in tree.walk():
        if isinstance(node, exp.And | exp.Or | exp.Xor):
            parts += [node.this, node.expression]
        elif isinstance(node, exp.Not):
            parts.append(node.this)
        elif isinstance(node, exp.Case) and node.this is None:
            parts += [branch.this for branch in node.args.get("ifs") or ()]
        elif isinstance(node, exp.If) and not isinstance(node.parent, exp.Case):
            parts.append(node.this)
    result = []
    for part in parts:
        display = part.copy().transform(_unquoted).sql(dialect="duckdb")
        result.append((part.sql(dialect="duckdb"), display))
    return result


def _shown_condition(condition: str) -> str:
    """A HAVING condition as a message shows it: its columns without needless quotes."""
    import sqlglot

    try:
        return sqlglot.parse_one(condition, read="duckdb").transform(_unquoted).sql(dialect="duckdb")
    except sqlglot.errors.SqlglotError:
        return condition


def _unquoted(node: Any) -> Any:
    """A column identifier without its quotes where it needs none (for messages only)."""
    from sqlglot import exp

    if isinstance(node, exp.Identifier) and node.quoted and node.name.isidentifier():
        return exp.Identifier(this=node.name, quoted=False)
    return node


def _open_ledger(
    path: str | os.PathLike[str] | None,
    budget: Guarantee | None,
    analyst: str | None,
    anchor: str | os.PathLike[str] | None,
) -> Ledger:
    """``Ledger(path, ...)``, a refusal of its file named by the Session's own argument (``ledger``,
    ``ledger_anchor``) rather than the Ledger's (``path``, ``anchor``)."""
    try:
        return Ledger(path, budget, analyst=analyst, anchor=anchor)
    except InvalidParameterError as error:
        renamed = {"path": "ledger", "anchor": "ledger_anchor"}.get(error.name)
        if renamed is None:
            raise
        raise InvalidParameterError(renamed, error.value, error.allowed) from None


@dataclass(frozen=True)
class _ClosedSession:
    """How a closed session shows in messages (its table only: it has no budget to show)."""

    table: str

    def __repr__(self) -> str:
        return f"Session(table={self.table!r}, closed)"


def _open(
    backend: Backend, name: str, source: object, kind: str, parameter: str, *, public: bool = False
) -> dict[str, ColumnInfo]:
    """Register ``source`` as table ``name`` and read its schema; a source the backend cannot open
    is an InvalidParameterError naming ``parameter`` (the file, or the frame's type: never its rows).

    A pyarrow RecordBatchReader (or RecordBatch) is read into a table first: a reader can be read
    once only, and every query after the first would fail after its debit.
    """
    if kind == "arrow":
        import pyarrow as pa

        if isinstance(source, pa.RecordBatchReader):
            source = source.read_all()
        elif isinstance(source, pa.RecordBatch):
            source = pa.Table.from_batches([source])
    try:
        _refuse_names_alike(source, kind)
        if public:
            backend.register(name, source, kind, public=True)
        else:
            backend.register(name, source, kind)
        return backend.schema(name)
    except InvalidParameterError as error:
        if error.name == "source" and parameter != "source":  # the backend's refusal, of a public table
            raise InvalidParameterError(parameter, error.value, error.allowed) from None
        raise
    except DPError:
        raise
    except Exception as error:  # noqa: BLE001 - any engine's reader error
        shown = _shown(source)
        reason = first_line(error)
        raise InvalidParameterError(
            parameter,
            shown,
            f"the {backend.name} backend cannot open it as {'an' if kind[0] in 'aeiou' else 'a'} {kind} table "
            f"({type(error).__name__}: {reason}); "
            "give a Parquet or CSV path, or a pandas / Arrow / Polars frame",
        ) from None


def _existing(path: str | os.PathLike[str]) -> str | os.PathLike[str]:
    text = os.fspath(path)
    if not any(ch in text for ch in "*?[") and not Path(text).exists():
        raise InvalidParameterError("path", text, "no such file")
    return path


def _refuse_names_alike(source: object, kind: str) -> None:
    """Refuse a source two of whose columns are named alike without case (``ID`` and ``id``, or one
    name twice).

    Queries, bounds and the privacy unit name columns without case, as DuckDB and Spark do; DuckDB
    renames the second such column (``id_1``), so ``privacy_unit="id"`` read the other column, ``ID``,
    and a person with 100 rows counted as 100 people. Only the names are read (a file's header or
    schema), never a row.
    """
    names = _source_names(source, kind)
    seen: dict[str, str] = {}
    for column in names or ():
        key = column.casefold()
        if key in seen:
            first = seen[key]
            raise InvalidParameterError(
                "source",
                _shown(source),
                (
                    f"it names column {column!r} twice"
                    if first == column
                    else f"its columns {first!r} and {column!r} have the same name without case"
                )
                + "; queries, bounds and "
                "the privacy unit name columns without case (as DuckDB and Spark do), so one would be read "
                "for the other: rename one",
            )
        seen[key] = column


def _source_names(source: object, kind: str) -> list[str] | None:
    """The column names as ``source`` itself declares them (before any engine renames one); None
    where they cannot be read apart from the engine (a declared-types CSV checks its own header)."""
    if kind in ("pandas", "spark"):
        return [str(column) for column in getattr(source, "columns", ())]
    if kind == "arrow":
        schema = getattr(source, "schema", None)
        return [str(column) for column in getattr(schema, "names", ())]
    if kind == "polars":
        collect_schema = getattr(source, "collect_schema", None)
        return [str(column) for column in (collect_schema().names() if collect_schema else source.columns)]  # type: ignore[attr-defined]
    if kind not in ("parquet", "csv") or isinstance(source, TypedCsv):
        return None
    text = os.fspath(source)  # type: ignore[call-overload]
    files = matching_files(text)
    if not files or not os.path.isfile(files[0]):
        return None  # the backend refuses it, naming the path
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return [str(column) for column in pq.read_schema(files[0]).names]
        import duckdb

        from dpkit.engine._aggregation import _literal

        with duckdb.connect() as connection:  # the dialect DuckDB reads the file with
            dialect = connection.execute(f"SELECT Delimiter, HasHeader FROM sniff_csv({_literal(files[0])})").fetchone()
        return csv_header(files[0], str(dialect[0])) if dialect and dialect[1] else None
    except InvalidParameterError:
        return None
    except Exception:  # noqa: BLE001 - an unreadable file: the backend refuses it, naming the path
        return None


def _shown(source: object) -> str:
    if isinstance(source, TypedCsv):
        source = source.path
    return os.fspath(source) if isinstance(source, str | os.PathLike) else f"<{type(source).__name__}>"


def _stem(path: str | os.PathLike[str]) -> str:
    stem = Path(os.fspath(path)).stem.split(".")[0]
    return stem if stem.isidentifier() else "data"


def _source_kind(source: object) -> tuple[object, str]:
    if isinstance(source, str | os.PathLike):
        suffix = Path(os.fspath(source)).suffix.lower()
        return _existing(source), ("csv" if suffix in (".csv", ".tsv") else "parquet")
    module = type(source).__module__.split(".")[0]
    kind = {"pandas": "pandas", "pyarrow": "arrow", "polars": "polars", "pyspark": "spark"}.get(module)
    if kind is None:
        raise InvalidParameterError(
            "public_tables", source, "must be a path, or a pandas / Arrow / Polars / Spark frame"
        )
    return source, kind
