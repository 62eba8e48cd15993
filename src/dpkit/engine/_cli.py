"""``dpkit query``: one private SQL query over a Parquet or CSV file, from the command line.

    dpkit query people.parquet "SELECT region, COUNT(*), AVG(income) FROM people GROUP BY region" \\
        --privacy-unit person_id --bounds income=0:200000 --epsilon 1 --delta 1e-6 --ledger budget.db

Privacy contract: the same as :meth:`dpkit.Session.release` (the command is a thin layer over
it): every argument is checked and the query compiled before the file is read; the ledger is
debited before the aggregation runs; a refused or invalid query spends nothing.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from dpkit._errors import BudgetExceededError, InvalidParameterError, PostProcessingError
from dpkit.engine._csv import typed_csv_spec
from dpkit.engine._plan import spelling_resolver
from dpkit.guarantees import ZCDP, ApproxDP, ApproxZCDP, Guarantee, PureDP

__all__ = ["add_query_parser", "run_query"]

_PARQUET = (".parquet", ".parq", ".pq")
_CSV = (".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz")


def add_query_parser(commands: Any) -> None:
    """Register the ``query`` sub-command on an ``argparse`` sub-parsers object."""
    query = commands.add_parser(
        "query",
        help="run one private SQL query over a Parquet or CSV file",
        description="Run one differentially private SQL query over a Parquet or CSV file and print "
        "the noisy answers with confidence intervals.",
    )
    query.add_argument(
        "data",
        help="a .parquet or .csv file (the table is named by its stem up to the first dot, e.g. people for "
        "people.v2.parquet, or 'data' when that is not an identifier; or --table)",
    )
    query.add_argument("sql", help='a SELECT, e.g. "SELECT region, COUNT(*) FROM people GROUP BY region"')
    query.add_argument("--table", help="the table's name in the SQL (default: the file's stem)")
    query.add_argument("--privacy-unit", metavar="COLUMN", help="the column that identifies a person (default: a row)")
    query.add_argument(
        "--bounds",
        metavar="COL=LO:HI",
        action="append",
        default=[],
        help="clamping bounds (repeatable); COL=auto estimates them privately (charged)",
    )
    query.add_argument(
        "--types",
        metavar="COL=TYPE",
        action="append",
        default=[],
        help="declared type of every CSV column, e.g. income=DOUBLE (repeatable; nothing is inferred from the rows)",
    )
    query.add_argument(
        "--keys",
        metavar="COL=V1,V2,...",
        action="append",
        default=[],
        help="public group keys, comma-separated as in a CSV line (spaces after a comma are ignored; quote a value "
        'holding a comma: region=\'"East,West",North\'; an unquoted NULL is the NULL key, a quoted "NULL" the '
        "text; repeatable per column)",
    )
    query.add_argument("--epsilon", type=float, help="epsilon spent by this query")
    query.add_argument("--delta", type=float, help="delta spent (needed for private group keys)")
    query.add_argument(
        "--rho", type=float, help="zCDP rho spent (zCDP budget; with --delta, an approximate zCDP budget)"
    )
    query.add_argument("--accuracy", type=float, help="target half-width instead of --epsilon")
    query.add_argument("--alpha", type=float, default=0.05, help="1 - confidence of the intervals (0.05)")
    query.add_argument("--mechanism", choices=["auto", "laplace", "gaussian"], default="auto")
    query.add_argument("--rows-per-group", type=int, help="at most this many rows per person and group (1)")
    query.add_argument("--groups-per-person", type=int, help="at most this many groups per person (1)")
    query.add_argument(
        "--budget",
        metavar="SPEC",
        help="total budget of a new ledger: epsilon=3 | epsilon=3,delta=1e-6 | rho=0.5 | rho=0.05,delta=1e-6",
    )
    query.add_argument("--ledger", metavar="FILE", help="persistent budget ledger (default: this query only)")
    query.add_argument(
        "--anchor",
        metavar="FILE",
        help="the ledger's anchor: a second file recording its newest entry, kept where the ledger's writers "
        "cannot write; a ledger rolled back behind it is refused",
    )
    query.add_argument("--analyst", help="name recorded in the ledger (default: the login name)")
    query.add_argument("--backend", choices=["duckdb", "spark"], default="duckdb")
    query.add_argument(
        "--memory-limit",
        metavar="SIZE",
        help="DuckDB: the most memory the query may hold, e.g. 150MB or 2GiB (at least 64MB); "
        "past it intermediate tables spill to a private temporary directory",
    )
    query.add_argument("--preview", action="store_true", help="show cost and expected error; spend nothing")
    query.add_argument("--json", action="store_true", help="print JSON")
    query.add_argument(
        "--progress", choices=["auto", "always", "never"], default="auto", help="progress bar on stderr (auto: tty)"
    )


def _number(parameter: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InvalidParameterError(parameter, text, "must be a number") from None


def parse_bounds(items: list[str]) -> dict[str, tuple[float, float] | str]:
    """``["income=0:200000", "age=-1:120"]`` -> ``{"income": (0.0, 200000.0), "age": (-1.0, 120.0)}``;
    ``COLUMN=auto`` asks for private automatic bounds (charged to the query).

    >>> parse_bounds(["income=0:2e5", "t=-10:40"])
    {'income': (0.0, 200000.0), 't': (-10.0, 40.0)}
    """
    bounds: dict[str, tuple[float, float] | str] = {}
    for item in items:
        column, equals, interval = item.partition("=")
        low, colon, high = interval.partition(":")
        pair: tuple[float, float] | str
        if equals and column and interval.strip().lower() == "auto":
            pair = "auto"  # estimated privately by the query (charged)
        elif not equals or not colon or not column:
            raise InvalidParameterError(
                "--bounds", item, "must be COLUMN=LOW:HIGH, e.g. income=0:200000, or COLUMN=auto"
            )
        else:
            pair = (_number(f"--bounds {column}", low), _number(f"--bounds {column}", high))
        if column.casefold() in {name.casefold() for name in bounds}:
            raise InvalidParameterError(
                "--bounds", item, f"gives {column!r} twice (names match without case); give each column once"
            )
        bounds[column] = pair
    return bounds


def parse_types(items: list[str]) -> dict[str, str]:
    """``["income=DOUBLE", "price=DECIMAL(10, 2)"]`` -> ``{"income": "DOUBLE", "price": "DECIMAL(10, 2)"}``.

    >>> parse_types(["person_id=BIGINT", "price=DECIMAL(10, 2)"])
    {'person_id': 'BIGINT', 'price': 'DECIMAL(10, 2)'}
    """
    types: dict[str, str] = {}
    for item in items:
        column, equals, kind = item.partition("=")
        if not equals or not column or not kind.strip():
            raise InvalidParameterError("--types", item, "must be COLUMN=TYPE, e.g. income=DOUBLE")
        if column in types:
            raise InvalidParameterError("--types", item, f"gives {column!r} twice; give each column once")
        types[column] = kind
    return types


_BUDGET_FORMS = "must be epsilon=E, epsilon=E,delta=D, rho=R or rho=R,delta=D"


def parse_budget(spec: str) -> Guarantee:
    """``"epsilon=3"`` -> PureDP, ``"epsilon=3,delta=1e-6"`` -> ApproxDP, ``"rho=0.5"`` -> ZCDP,
    ``"rho=0.5,delta=1e-6"`` -> ApproxZCDP.

    >>> parse_budget("epsilon=3,delta=1e-6")
    ApproxDP(epsilon=3.0, delta=1e-06)
    """
    parts: dict[str, float] = {}
    for item in spec.split(","):
        name, equals, value = item.strip().partition("=")
        if not equals or name not in ("epsilon", "delta", "rho") or name in parts:
            raise InvalidParameterError("--budget", spec, _BUDGET_FORMS)
        parts[name] = _number("--budget", value)
    kinds: dict[frozenset[str], Callable[[], Guarantee]] = {
        frozenset({"epsilon"}): lambda: PureDP(parts["epsilon"]),
        frozenset({"epsilon", "delta"}): lambda: ApproxDP(parts["epsilon"], parts["delta"]),
        frozenset({"rho"}): lambda: ZCDP(parts["rho"]),
        frozenset({"rho", "delta"}): lambda: ApproxZCDP(parts["rho"], parts["delta"]),
    }
    make = kinds.get(frozenset(parts))
    if make is None:
        raise InvalidParameterError("--budget", spec, _BUDGET_FORMS)
    try:
        return make()
    except InvalidParameterError as error:  # named by --budget, not as the query's own --epsilon / --delta
        raise InvalidParameterError("--budget", spec, f"its {error.name} {error.allowed}") from None


def _default_budget(args: argparse.Namespace) -> Guarantee:
    """The budget of a ledger created for this query alone: exactly the query's requested cost."""
    if args.rho is not None:
        return ApproxZCDP(args.rho, args.delta) if args.delta else ZCDP(args.rho)
    if args.epsilon is None:
        if args.accuracy is None:
            raise InvalidParameterError(
                "--epsilon", None, "give the query's cost: --epsilon (and --delta), --rho, or --accuracy with --budget"
            )
        raise InvalidParameterError("--budget", None, "is required with --accuracy (or give --epsilon)")
    if args.delta is not None and args.delta > 0:
        return ApproxDP(args.epsilon, args.delta)
    return PureDP(args.epsilon)


def _table_kind(path: str) -> str:
    lowered = path.lower()
    if lowered.endswith(_PARQUET):
        return "parquet"
    if lowered.endswith(_CSV):
        return "csv"
    raise InvalidParameterError("DATA", path, f"must be a Parquet ({', '.join(_PARQUET)}) or CSV file")


def _typed_keys(items: list[str], columns: dict[str, Any]) -> dict[str, list[Any]] | None:
    if not items:
        return None
    keys: dict[str, list[Any]] = {}
    for item in items:
        column, equals, values = item.partition("=")
        if not equals or not column or not values:
            raise InvalidParameterError("--keys", item, "must be COLUMN=V1,V2,... e.g. region=North,South")
        column = spelling_resolver(list(columns))(column)  # matched without case, as in the SQL
        if column in keys:  # a second list would silently replace the first
            raise InvalidParameterError(
                "--keys", item, f"gives {column!r} twice; list all its values once: {column}=V1,V2,..."
            )
        info = columns.get(column)
        if info is None:
            raise InvalidParameterError("--keys", item, f"{column!r} is not a column; columns: {', '.join(columns)}")
        cast, kind = _key_parser(info)
        try:
            keys[column] = [None if v is None else cast(v) for v in _key_fields(values)]
        except (ValueError, ArithmeticError):
            raise InvalidParameterError(
                "--keys", item, f"values of {column!r} ({info.type}) must be {kind}, or NULL unquoted"
            ) from None
    return keys


def _key_fields(line: str) -> list[str | None]:
    """The fields of a --keys value read as a CSV line (quotes "..." with "" inside, spaces after a
    comma dropped), where an unquoted NULL (any case) is the NULL key and a quoted "NULL" the text."""
    fields: list[str | None] = []
    position, size = 0, len(line)
    while True:
        while position < size and line[position] == " ":  # (spaces after a comma, as skipinitialspace)
            position += 1
        if position < size and line[position] == '"':
            text, position = [], position + 1
            while True:
                end = line.find('"', position)
                if end < 0:
                    raise ValueError("a quote is not closed")
                text.append(line[position:end])
                if line.startswith('""', end):
                    text.append('"')
                    position = end + 2
                    continue
                position = end + 1
                break
            field: str | None = "".join(text)
            if position < size and line[position] != ",":
                raise ValueError("text after a closing quote")
        else:
            end = line.find(",", position)
            end = size if end < 0 else end
            raw = line[position:end]
            if '"' in raw:
                raise ValueError("a quote inside an unquoted value")
            field = None if raw.upper() == "NULL" else raw
            position = end
        fields.append(field)
        if position >= size:
            return fields
        position += 1  # the comma


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise ValueError(text)


def _key_parser(info: Any) -> tuple[Any, str]:
    """How to read a --keys value for a column: the column's own Python type (the engine refuses others)."""
    kind = str(info.type).upper()
    if info.integer:
        return int, "integers"
    if kind.startswith(("DECIMAL", "NUMERIC")):
        return decimal.Decimal, "decimal numbers"
    if info.numeric:
        return float, "numbers"
    if kind.startswith("BOOL"):
        return _boolean, "true or false"
    if kind == "DATE":
        return datetime.date.fromisoformat, "dates YYYY-MM-DD"
    if kind.startswith("TIMESTAMP") or kind == "DATETIME":
        return datetime.datetime.fromisoformat, "timestamps YYYY-MM-DD[ HH:MM[:SS]]"
    if kind == "TIME" or kind.startswith("TIME "):
        return datetime.time.fromisoformat, "times HH:MM[:SS]"
    return str, "text"


class _ProgressBar:
    """Draws the backend's progress on stderr from a background thread, once a query runs > 0.5 s."""

    def __init__(self, session: Any, enabled: bool) -> None:
        self._session = session
        self._enabled = enabled
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._draw, daemon=True)
        self._shown = False

    def __enter__(self) -> _ProgressBar:
        if self._enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._enabled:
            self._thread.join()
        if self._shown:
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()

    def _draw(self) -> None:
        start = time.monotonic()
        while not self._stop.wait(0.1):
            if time.monotonic() - start < 0.5:
                continue
            try:
                fraction = self._session.progress()
            except Exception:  # noqa: BLE001 - a progress bar must never break a query
                return
            elapsed = time.monotonic() - start
            done = 0 if fraction is None else int(fraction * 30)
            shown = "  ?%" if fraction is None else f"{fraction * 100:3.0f}%"
            sys.stderr.write(f"\r[{'#' * done}{'.' * (30 - done)}] {shown} aggregating, {elapsed:.0f} s")
            sys.stderr.flush()
            self._shown = True


# The Session / query parameter each command-line option sets, for error messages.
_OPTION_OF = {
    "name": "--table",
    "privacy_unit": "--privacy-unit",
    "epsilon": "--epsilon",
    "delta": "--delta",
    "rho": "--rho",
    "accuracy": "--accuracy",
    "alpha": "--alpha",
    "mechanism": "--mechanism",
    "budget": "--budget",
    "ledger": "--ledger",
    "ledger_anchor": "--anchor",
    "keys": "--keys",
    "rows_per_group": "--rows-per-group",
    "groups_per_person": "--groups-per-person",
    "analyst": "--analyst",
    "backend": "--backend",
    "memory_limit": "--memory-limit",
    "source": "DATA",
    "types": "--types",
}


def _indexed_option(name: str) -> str | None:
    """The option of a parameter named with its column, ``bounds['income']`` or ``types['pid']``:
    ``--bounds income`` or ``--types pid``, as the option is written on the command line."""
    for parameter in ("bounds", "types"):
        if name == parameter or name.startswith(parameter + "["):
            column = name[len(parameter) :].strip("[]")
            if len(column) >= 2 and column[0] == column[-1] and column[0] in "'\"":
                column = column[1:-1]
            return f"--{parameter} {column}".rstrip()
    return None


def run_query(args: argparse.Namespace) -> int:
    """Run ``dpkit query`` with parsed arguments; print the result; return the exit status.

    A refusal names the command-line option (``--table``, not the API's ``name``) and, for a column
    without clamping bounds, the ``--bounds COLUMN=LOW:HIGH`` that fixes it.
    """
    try:
        return _run_query(args)
    except InvalidParameterError as error:
        if error.name == "bounds" and "needs clamping bounds" in error.allowed:
            raise InvalidParameterError(
                "--bounds",
                error.value,
                f"column {error.value!r} needs clamping bounds: pass --bounds {error.value}=LOW:HIGH "
                f"(or {error.value}=auto to estimate them privately, charged)",
            ) from None
        option = _OPTION_OF.get(error.name) or _indexed_option(error.name)
        if option is None:
            raise
        raise InvalidParameterError(option, error.value, error.allowed) from None


def _run_query(args: argparse.Namespace) -> int:
    from dpkit.engine._backends import DuckDBBackend, memory_limit_bytes
    from dpkit.engine._result import json_value
    from dpkit.engine._session import Session, _stem

    path = os.fspath(args.data)
    kind = _table_kind(path)
    if not os.path.isfile(path):
        raise InvalidParameterError("DATA", path, "must be an existing file")
    bounds = parse_bounds(args.bounds)
    if args.anchor is not None and args.ledger is None:
        raise InvalidParameterError(
            "--anchor", args.anchor, "needs --ledger (a query without one spends nothing lasting)"
        )
    source: object = path
    if args.types:
        if kind != "csv":
            raise InvalidParameterError("--types", args.types, "applies to CSV files (Parquet files carry their types)")
        delimiter = "\t" if path.lower().endswith((".tsv", ".tsv.gz")) else ","
        source = typed_csv_spec(path, parse_types(args.types), delimiter)
    if args.memory_limit is not None:
        if args.backend != "duckdb":
            raise InvalidParameterError(
                "--memory-limit",
                args.memory_limit,
                "applies to --backend duckdb (set Spark's memory in its own configuration)",
            )
        memory_limit_bytes(args.memory_limit)  # checked before any ledger file is made
    new_ledger = args.ledger is None or not os.path.lexists(args.ledger)
    budget = parse_budget(args.budget) if args.budget is not None else (_default_budget(args) if new_ledger else None)

    def open_session(ledger: str | None) -> Session:
        return Session(
            source,
            kind,
            name=args.table if args.table is not None else _stem(path),
            privacy_unit=args.privacy_unit,
            budget=budget,
            ledger=ledger,
            ledger_anchor=args.anchor if ledger is not None else None,
            backend=args.backend if args.memory_limit is None else DuckDBBackend(memory_limit=args.memory_limit),
            analyst=args.analyst,
        )

    cost: dict[str, Any] = {
        name: getattr(args, name) for name in ("epsilon", "delta", "rho", "accuracy") if getattr(args, name) is not None
    }
    # The query's own bounds (a name that is none of its columns is refused, as a misspelling).
    cost.update(alpha=args.alpha, mechanism=args.mechanism, bounds=bounds)
    contribution: dict[str, Any] = {"rows_per_group": args.rows_per_group, "groups_per_person": args.groups_per_person}
    if args.ledger is not None and new_ledger:
        # Check the whole query against an in-memory ledger first (schema only, no rows read):
        # a query that would be refused never leaves a new ledger file behind.
        trial = open_session(None)
        contribution["keys"] = _typed_keys(args.keys, trial._key_columns(args.sql))
        with trial:
            planned = trial.preview(args.sql, **contribution, **cost)
        if not planned.affordable and not args.preview:
            raise BudgetExceededError(planned.guarantee, budget, "the new ledger's --budget; nothing was created")
        if args.budget is None and planned.guarantee != budget:
            # Exactly this query's cost (delta it would not spend, with public keys, left out);
            # the query is then checked again against the ledger made with it.
            budget = planned.guarantee
    # A preview spends nothing and never creates a ledger file: with a new --ledger it is checked
    # against the budget that file would get, in memory.
    session = open_session(None if args.preview and new_ledger else args.ledger)
    if args.ledger is not None and new_ledger and args.budget is None and not args.preview:
        print(
            f"dpkit: created ledger {args.ledger} with budget {budget} (this query's cost); "
            "pass --budget to set a larger total",
            file=sys.stderr,
        )
    if "keys" not in contribution:  # typed once, against the same schema
        contribution["keys"] = _typed_keys(args.keys, session._key_columns(args.sql))
    if args.preview:
        preview = session.preview(args.sql, **contribution, **cost)
        if args.json:
            report = {
                "guarantee": repr(preview.guarantee),
                "affordable": preview.affordable,
                "remaining_after": None if preview.remaining_after is None else repr(preview.remaining_after),
                "statistics": list(preview.statistics),
            }
            print(json.dumps(json_value(report), indent=2, allow_nan=False))
        else:
            print(preview)
        return 0
    show_progress = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
    status = 0
    with _ProgressBar(session, show_progress):
        try:
            result = session.release(args.sql, **contribution, **cost)
        except PostProcessingError as error:  # released and debited: show the table, then the error
            result, status = error.result, 2  # type: ignore[assignment]
            print(f"dpkit: {error}; the whole release follows, unfiltered", file=sys.stderr)
    if args.json:
        summary: dict[str, Any] = result.to_dict()
        summary["remaining"] = repr(session.remaining)
        print(json.dumps(json_value(summary), indent=2, allow_nan=False))
    else:
        unit = f"privacy unit {session.privacy_unit!r}" if session.privacy_unit else "privacy unit: one row"
        table = args.table if args.table is not None else _stem(path)
        print(f"table {table!r} ({args.backend}), {unit}; {result.description}\n")
        print(result)
        print(f"remaining budget: {session.remaining}")
    return status
