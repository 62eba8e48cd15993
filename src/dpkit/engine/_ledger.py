"""The persistent privacy-budget ledger: an atomic, tamper-evident debit log in one SQLite file.

A :class:`Ledger` is the persistent, multi-process sibling of
:class:`dpkit.accounting.PrivacyFilter`. Every session and process that opens the same file
shares one budget; :meth:`Ledger.reserve` debits a cost in one ``BEGIN IMMEDIATE``
transaction, so concurrent sessions can never overspend together, and the engine calls it
*before* it runs a query, so nothing is released before its debit is committed.

Composition
-----------
Costs compose by exact basic composition in the budget's kind (Dwork, McSherry, Nissim & Smith
2006; zCDP: Bun & Steinke 2016, Lemma 2.3). Basic composition stays valid when each query is
chosen after seeing earlier answers, so the ledger is a privacy filter (Rogers, Roth, Ullman &
Vadhan 2016). Budgets and costs are kept as exact fractions, so ten spends of ``PureDP(0.1)``
exactly exhaust ``PureDP(1.0)``. Allowed pairs: a PureDP budget takes PureDP costs; an ApproxDP
budget takes PureDP and ApproxDP costs (epsilons add, deltas add); a ZCDP budget takes ZCDP costs
and PureDP costs, charged as ``epsilon**2 / 2`` (Bun & Steinke 2016, Prop. 1.4). An ApproxZCDP
budget (delta-approximate rho-zCDP) takes ApproxZCDP, ZCDP and PureDP costs: rhos add and deltas
add, which stays valid when each query's parameters are chosen after seeing earlier answers
(Bun & Steinke 2016, Lemma 8.2; the fully adaptive filter: Whitehouse, Ramdas, Rogers & Wu 2023,
Thm. 1). It is the tight budget for Gaussian queries over private group keys: each query's delta
pays only for key selection, and the zCDP-to-(epsilon, delta) conversion is paid once, by the
whole ledger (``ApproxZCDP.to_approx``), not once per query.

Zero values: ``PureDP`` and ``ZCDP`` need a positive parameter, so "nothing" is reported in the
nearest kind that has a zero, the guarantee of releasing nothing: ``ApproxDP(0, 0)`` for a PureDP
ledger (its ``.epsilon`` reads 0) and ``ApproxZCDP(0, 0)`` for a ZCDP ledger (its ``.rho`` reads 0),
as :attr:`Ledger.spent` of an empty ledger and :attr:`Ledger.remaining` of an exhausted one.
Otherwise both have the budget's kind (an ApproxZCDP ledger reports ``ApproxZCDP(0, 0)``).

What a ledger certifies is its budget: the whole interaction, however each query was chosen, is
within it. :attr:`Ledger.spent` is exact bookkeeping of the debits; for pure and (epsilon, delta)
costs it is also a bound on the privacy lost so far, but the (epsilon, delta) reading of a zCDP
spend (``spent.to_approx(d)``) assumes the queries so far were fixed in advance (with adaptively
chosen rho it would be an odometer claim, which needs more: Whitehouse et al. 2023).

Storage and durability
----------------------
The file uses SQLite's rollback journal (``journal_mode=DELETE``) with ``synchronous=EXTRA``:
a commit writes the old pages to a ``-journal`` sidecar, fsyncs it, writes the new pages into
the main file, fsyncs it, then deletes the journal and fsyncs the directory. When
:meth:`Ledger.reserve` returns, the debit is in the main file itself, so a committed debit
survives ``kill -9`` and power loss, and a copy of the main file (or a ledger whose sidecars
were lost) never lacks a debit that was committed. A process killed mid-transaction leaves a
"hot" journal that the next opener rolls back; deleting that journal instead leaves a
half-written file, which the integrity checks below refuse. (Write-ahead-log mode, used by
earlier versions, kept the newest debits only in a ``-wal`` sidecar until a checkpoint; a
ledger file still in that mode is moved to the rollback journal when first opened with no
other connection on it, and until then each debit is checkpointed into the main file.)
Readers (``dpkit budget``, :attr:`Ledger.remaining`) take a shared lock for the moment of a
read and a debit waits for them (and they for it), retrying for up to a minute. Like all
SQLite locking it needs a local file system (not NFS).

A new file is built under a temporary name and hard-linked into place, which fails if the name
exists: when two processes create one path at once exactly one creates it, the other opens it,
and no half-built ledger is ever visible under the real name.

Integrity and threat model
--------------------------
Entries form a hash chain. The genesis hash covers the format version, the budget (exact
fractions and neighbour relation), a random per-ledger salt and the creation time; each entry
stores ``H(previous hash || canonical text of the entry)``, its text including the running
total spent; a meta row keeps the head hash and the entry count. Opening a ledger checks
everything (:meth:`Ledger.verify`); every debit and every read re-checks the tail (the last
known entry, every entry appended since, head and count). A zero-length, truncated or
non-SQLite file, missing tables, a changed budget, an edited, deleted or inserted entry, or a
head or count that does not match raises :class:`~dpkit.LedgerCorruptedError`: a damaged
ledger is never read as a full budget.

What this detects: accidental corruption, truncation and naive edits (``sqlite3 ledger.db
"DELETE FROM ledger_entries ..."``). What it cannot: someone who can rewrite the whole file
can recompute every SHA-256 hash; and someone who can write the file can roll it back to a
consistent earlier state, by restoring an older copy or by deleting the newest entries and
resetting the head and count to an earlier entry's (a session that is open at the time notices
the ledger shrink; one opened afterwards cannot). Against the first, pass a secret ``key`` (or
set ``DPKIT_LEDGER_KEY``, read as UTF-8, at least 16 bytes): the chain then uses HMAC-SHA256
(RFC 2104) and cannot be recomputed without the key, and a keyed session refuses a ledger that
claims to be unkeyed. No key stops rollback by itself. Against it, keep the file where analysts cannot write it except
through dpkit (file permissions, a service account), or give an ``anchor``: a second file, kept
where those who can write the ledger cannot (another directory, owner or machine), that records
the ledger's genesis hash, entry count and head hash. Every anchored debit takes an exclusive lock
on ``<anchor>.lock``, checks that the ledger still holds the anchored entry with the anchored hash,
commits, then replaces the anchor atomically with the new count and head; opening an anchored
ledger checks it too (and creates a missing anchor from the verified file: trust on first use). A
ledger with fewer entries than its anchor records, a different entry at the anchored index, or a
different genesis is refused with :class:`~dpkit.LedgerCorruptedError`. A crash between the commit
and the anchor update leaves the anchor one debit behind, which is still consistent. Someone who
can also write the anchor can roll both back together: the anchor moves the trust, it does not
create it.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import json
import os
import re
import secrets
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from dpkit._errors import BudgetExceededError, InvalidParameterError, LedgerCorruptedError
from dpkit.guarantees import ZCDP, ApproxDP, ApproxZCDP, Guarantee, NeighbourRelation, PureDP
from dpkit.guarantees._guarantees import zcdp_parts

__all__ = ["Ledger", "LedgerEntry"]

_FORMAT = "dpkit-ledger"
_VERSION = 1
#: Ledgers with an ApproxZCDP budget are format version 2, so a dpkit that predates approximate zCDP
#: refuses them as an unknown version instead of reading their entries as malformed.
_VERSION_APPROX_ZCDP = 2


def _version(budget: Guarantee) -> int:
    return _VERSION_APPROX_ZCDP if isinstance(budget, ApproxZCDP) else _VERSION


_KEY_ENV = "DPKIT_LEDGER_KEY"
_MIN_KEY_BYTES = 16
#: How long a debit waits for other processes holding the write lock before giving up.
_BUSY_TIMEOUT_S = 60.0
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_NOTADB = 5, 6, 26
#: Access problems, not damage: SQLITE_PERM, SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_AUTH.
_SQLITE_ACCESS = (3, 8, 14, 23)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_FRACTION = re.compile(r"(0|[1-9][0-9]*)/([1-9][0-9]*)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

_SCHEMA = (
    """CREATE TABLE ledger_meta (
        singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
        format TEXT NOT NULL,
        version INTEGER NOT NULL,
        budget_kind TEXT NOT NULL,
        budget_epsilon TEXT,
        budget_delta TEXT,
        budget_rho TEXT,
        neighbours TEXT NOT NULL,
        salt TEXT NOT NULL,
        keyed INTEGER NOT NULL,
        created TEXT NOT NULL,
        genesis TEXT NOT NULL,
        head TEXT NOT NULL,
        entry_count INTEGER NOT NULL
    )""",
    """CREATE TABLE ledger_entries (
        idx INTEGER PRIMARY KEY,
        time TEXT NOT NULL,
        analyst TEXT NOT NULL,
        description TEXT NOT NULL,
        pid INTEGER NOT NULL,
        cost_kind TEXT NOT NULL,
        cost_epsilon TEXT,
        cost_delta TEXT,
        cost_rho TEXT,
        neighbours TEXT NOT NULL,
        total TEXT NOT NULL,
        hash TEXT NOT NULL
    )""",
)
_EXPECTED_OBJECTS = {("table", "ledger_meta"), ("table", "ledger_entries")}
_META_COLUMNS = (
    "format, version, budget_kind, budget_epsilon, budget_delta, budget_rho, neighbours, "
    "salt, keyed, created, genesis, head, entry_count"
)
_ENTRY_COLUMNS = (
    "idx, time, analyst, description, pid, cost_kind, cost_epsilon, cost_delta, cost_rho, neighbours, total, hash"
)

_T = TypeVar("_T")
_Totals = tuple[Fraction, ...]


@dataclass(frozen=True)
class LedgerEntry:
    """One committed debit: its position, when and by whom, what for, and what it cost."""

    index: int
    """Position in the ledger, from 0; entries are contiguous."""
    time: str
    """When the debit was made (inside its transaction), UTC ISO-8601."""
    analyst: str
    description: str
    """Free text, usually the query."""
    cost: Guarantee
    """The guarantee as requested (a PureDP cost in a zCDP ledger stays PureDP here)."""
    pid: int
    """The id of the process that made the debit."""


@dataclass(frozen=True)
class _Header:
    """The part of the meta row that never changes after creation."""

    budget: Guarantee
    salt: str
    keyed: bool
    created: str
    genesis: str


@dataclass(frozen=True)
class _Position:
    """A verified point of the chain: entries 0..count-1, the last hash, the running total."""

    count: int
    head: str
    totals: _Totals


# -- exact values and their text ------------------------------------------------------------------


def _fraction_text(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def _parse_fraction(text: object, what: str) -> Fraction:
    if not isinstance(text, str):
        raise LedgerCorruptedError(f"{what}: expected exact 'num/den' text, found {text!r}")
    match = _FRACTION.fullmatch(text)
    if match is None:
        raise LedgerCorruptedError(f"{what}: expected exact 'num/den' text, found {text[:80]!r}")
    try:
        value = Fraction(int(match.group(1)), int(match.group(2)))
    except ValueError as exc:  # more digits than Python will convert
        raise LedgerCorruptedError(f"{what}: unreadable number") from exc
    if _fraction_text(value) != text:
        raise LedgerCorruptedError(f"{what}: {text!r} is not in lowest terms")
    return value


def _fields(guarantee: Guarantee) -> dict[str, str | None]:
    """The exact, canonical text of a guarantee (what is stored and hashed)."""
    fields: dict[str, str | None] = {
        "kind": type(guarantee).__name__,
        "epsilon": None,
        "delta": None,
        "rho": None,
        "neighbours": guarantee.neighbours.value,
    }
    if isinstance(guarantee, ZCDP):
        fields["rho"] = _fraction_text(guarantee.rho_exact)
    elif isinstance(guarantee, ApproxZCDP):
        fields["rho"] = _fraction_text(guarantee.rho_exact)
        fields["delta"] = _fraction_text(guarantee.delta_exact)
    else:
        fields["epsilon"] = _fraction_text(guarantee.epsilon_exact)
        if isinstance(guarantee, ApproxDP):
            fields["delta"] = _fraction_text(guarantee.delta_exact)
    return fields


def _guarantee_from_fields(
    kind: object, epsilon: object, delta: object, rho: object, neighbours: object, what: str
) -> Guarantee:
    try:
        relation = NeighbourRelation(neighbours)
    except ValueError as exc:
        raise LedgerCorruptedError(f"{what}: unknown neighbour relation {neighbours!r}") from exc
    present = (epsilon is not None, delta is not None, rho is not None)
    try:
        if kind == "PureDP" and present == (True, False, False):
            return PureDP(_parse_fraction(epsilon, what), relation)  # type: ignore[arg-type]
        if kind == "ApproxDP" and present == (True, True, False):
            eps, dlt = _parse_fraction(epsilon, what), _parse_fraction(delta, what)
            return ApproxDP(eps, dlt, relation)  # type: ignore[arg-type]
        if kind == "ZCDP" and present == (False, False, True):
            return ZCDP(_parse_fraction(rho, what), relation)  # type: ignore[arg-type]
        if kind == "ApproxZCDP" and present == (False, True, True):
            return ApproxZCDP(_parse_fraction(rho, what), _parse_fraction(delta, what), relation)  # type: ignore[arg-type]
    except InvalidParameterError as exc:
        raise LedgerCorruptedError(f"{what}: not a valid guarantee ({exc})") from exc
    raise LedgerCorruptedError(f"{what}: malformed guarantee (kind {kind!r}, fields {present})")


def _canonical(payload: dict[str, object]) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _digest(key: bytes | None, previous: str, text: str) -> str:
    message = previous.encode("ascii") + b"\n" + text.encode("utf-8")
    if key is None:
        return hashlib.sha256(message).hexdigest()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _genesis(key: bytes | None, budget: Guarantee, salt: str, keyed: bool, created: str) -> str:
    text = _canonical(
        {
            "format": _FORMAT,
            "version": _version(budget),
            "budget": _fields(budget),
            "salt": salt,
            "keyed": keyed,
            "created": created,
        }
    )
    return _digest(key, "", text)


def _entry_text(entry: LedgerEntry, totals: _Totals) -> str:
    return _canonical(
        {
            "index": entry.index,
            "time": entry.time,
            "analyst": entry.analyst,
            "description": entry.description,
            "pid": entry.pid,
            "cost": _fields(entry.cost),
            "total": [_fraction_text(part) for part in totals],
        }
    )


# -- arithmetic in the budget's kind --------------------------------------------------------------


def _budget_components(budget: Guarantee) -> _Totals:
    if isinstance(budget, ApproxZCDP):
        return (budget.rho_exact, budget.delta_exact)
    if isinstance(budget, ZCDP):
        return (budget.rho_exact,)
    if isinstance(budget, ApproxDP):
        return (budget.epsilon_exact, budget.delta_exact)
    return (budget.epsilon_exact,)


def _charge(cost: object, budget: Guarantee) -> _Totals:
    """What ``cost`` adds to the running total of a ledger with ``budget``, or InvalidParameterError."""
    if not isinstance(cost, PureDP | ApproxDP | ZCDP | ApproxZCDP):
        raise InvalidParameterError("cost", cost, "must be a dpkit guarantee: PureDP, ApproxDP, ZCDP or ApproxZCDP")
    if cost.neighbours is not budget.neighbours:
        raise InvalidParameterError(
            "cost", cost, f"must be stated under the budget's neighbour relation {budget.neighbours.value}"
        )
    if isinstance(budget, PureDP):
        if isinstance(cost, PureDP):
            return (cost.epsilon_exact,)
        raise InvalidParameterError("cost", cost, "a PureDP budget accepts only PureDP costs")
    if isinstance(budget, ApproxZCDP):
        return zcdp_parts(cost, "cost")
    if isinstance(budget, ApproxDP):
        if isinstance(cost, PureDP | ApproxDP):
            return (cost.epsilon_exact, cost.delta_exact)
        raise InvalidParameterError(
            "cost", cost, "an ApproxDP budget accepts PureDP and ApproxDP costs; convert zCDP with .to_approx(delta)"
        )
    if isinstance(cost, ZCDP):
        return (cost.rho_exact,)
    if isinstance(cost, PureDP):
        return (cost.to_zcdp().rho_exact,)
    raise InvalidParameterError(
        "cost", cost, "a ZCDP budget accepts ZCDP and PureDP costs (approximate DP or zCDP does not imply zCDP)"
    )


def _zero(budget: Guarantee) -> _Totals:
    return tuple(Fraction(0) for _ in _budget_components(budget))


def _add(first: _Totals, second: _Totals) -> _Totals:
    return tuple(a + b for a, b in zip(first, second, strict=True))


def _within(totals: _Totals, budget: Guarantee) -> bool:
    return all(spent <= limit for spent, limit in zip(totals, _budget_components(budget), strict=True))


def _spent_guarantee(totals: _Totals, budget: Guarantee) -> Guarantee:
    relation = budget.neighbours
    if isinstance(budget, ApproxDP):
        return ApproxDP(totals[0], totals[1], relation)  # type: ignore[arg-type]
    if isinstance(budget, ApproxZCDP):  # ApproxZCDP(0, 0) is a valid value: nothing spent, or left
        return ApproxZCDP(totals[0], totals[1], relation)  # type: ignore[arg-type]
    if isinstance(budget, ZCDP):  # zero stays in the zCDP family, so .rho reads 0
        if totals[0] == 0:
            return ApproxZCDP(Fraction(0), Fraction(0), relation)  # type: ignore[arg-type]
        return ZCDP(totals[0], relation)  # type: ignore[arg-type]
    if totals[0] == 0:
        return ApproxDP(Fraction(0), Fraction(0), relation)  # type: ignore[arg-type]
    return PureDP(totals[0], relation)  # type: ignore[arg-type]


def _remaining_guarantee(totals: _Totals, budget: Guarantee) -> Guarantee:
    limits = _budget_components(budget)
    left = tuple(max(Fraction(0), limit - spent) for spent, limit in zip(totals, limits, strict=True))
    return _spent_guarantee(left, budget)


# -- argument checks ------------------------------------------------------------------------------


def _check_budget(budget: object) -> Guarantee:
    if not isinstance(budget, PureDP | ApproxDP | ZCDP | ApproxZCDP):
        raise InvalidParameterError("budget", budget, "must be a dpkit guarantee: PureDP, ApproxDP, ZCDP or ApproxZCDP")
    return budget


def _check_text(name: str, value: object, *, allow_empty: bool, one_line: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise InvalidParameterError(name, value, "must be a string" + ("" if allow_empty else ", not empty"))
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (undecodable bytes from argv): SQLite cannot store them
        raise InvalidParameterError(name, value, "must be Unicode text (it holds undecodable bytes)") from None
    if one_line and _CONTROL.search(value):
        # A name is printed as it is by `dpkit budget`: terminal escapes could hide or forge lines.
        raise InvalidParameterError(name, value, "must be printable text (no control characters)")
    return value


def _check_path(path: object) -> Path | None:
    if path is None:
        return None
    if not isinstance(path, str | os.PathLike):
        raise InvalidParameterError("path", path, "must be a file path (str or os.PathLike) or None for in-memory")
    text = os.fspath(path)
    if not isinstance(text, str) or not text or text == ":memory:":
        raise InvalidParameterError("path", path, "must be a non-empty text file path (None for an in-memory ledger)")
    return Path(text)


def _resolve_key(key: object) -> bytes | None:
    if key is None:
        from_env = os.environ.get(_KEY_ENV, "")
        if not from_env:
            return None
        key, name = from_env.encode("utf-8"), _KEY_ENV
    else:
        name = "key"
    if not isinstance(key, bytes | bytearray):
        raise InvalidParameterError(name, type(key).__name__, "must be bytes (or None for an unkeyed ledger)")
    if len(key) < _MIN_KEY_BYTES:
        # Never echo key material into an error message.
        raise InvalidParameterError(name, f"<{len(key)} bytes>", f"must be at least {_MIN_KEY_BYTES} bytes")
    return bytes(key)


def _default_analyst() -> str:
    try:
        return getpass.getuser() or "unknown"
    except Exception:  # getuser raises OSError or KeyError when no user name can be found
        return "unknown"


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


# -- SQLite plumbing ------------------------------------------------------------------------------


def _connect(database: str) -> sqlite3.Connection:
    connection = sqlite3.connect(
        database, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False, cached_statements=32
    )
    try:
        connection.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
        # EXTRA: every commit is fsynced, the journal's deletion included, before reserve() returns
        # (see the module docstring).
        connection.execute("PRAGMA synchronous = EXTRA")
        # A tampered file must not get to run functions from its schema.
        connection.execute("PRAGMA trusted_schema = OFF")
    except BaseException:
        connection.close()
        raise
    return connection


def _leave_write_ahead_log(connection: sqlite3.Connection) -> bool:
    """Move a ledger file made in WAL mode (by an earlier dpkit) to the rollback journal; True if it stays in WAL.

    SQLite allows the switch only while no other connection has the file open, so this does not
    wait: a ledger in use elsewhere stays in WAL mode (each debit then checkpointed, as before)
    and is moved by the first process that opens it alone. For a file already in rollback mode
    the pragma only sets this connection's journal mode.
    """
    connection.execute("PRAGMA busy_timeout = 0")
    try:
        (mode,) = connection.execute("PRAGMA journal_mode = DELETE").fetchone()
    except sqlite3.Error:
        mode = "wal"  # busy (another connection), or unreadable: the reads that follow report the latter
    finally:
        connection.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
    return str(mode).lower() == "wal"


def _error_code(exc: sqlite3.Error) -> int:
    return int(getattr(exc, "sqlite_errorcode", 0)) & 0xFF


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return _error_code(exc) in (_SQLITE_BUSY, _SQLITE_LOCKED) or "locked" in text or "busy" in text


def _unreadable(name: str, exc: sqlite3.Error) -> LedgerCorruptedError | InvalidParameterError:
    code = _error_code(exc)
    if code == _SQLITE_NOTADB:
        return LedgerCorruptedError(f"{name} is not a SQLite database ({exc})")
    if code in _SQLITE_ACCESS:
        # Refused all the same (never read as a full budget), but named as what it is: a damaged
        # ledger and one this user may not write call for different actions.
        return InvalidParameterError(
            "ledger",
            name,
            f"cannot be opened ({exc}): dpkit needs read and write access to the ledger file and to its "
            "directory, where SQLite keeps its -journal file beside it",
        )
    return LedgerCorruptedError(f"{name} cannot be read: {exc}")


def _initialise(connection: sqlite3.Connection, budget: Guarantee, key: bytes | None) -> None:
    salt, created = secrets.token_hex(16), _utc_now()
    genesis = _genesis(key, budget, salt, key is not None, created)
    fields = _fields(budget)
    connection.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SCHEMA:
            connection.execute(statement)
        connection.execute(
            f"INSERT INTO ledger_meta (singleton, {_META_COLUMNS}) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
            (
                _FORMAT,
                _version(budget),
                fields["kind"],
                fields["epsilon"],
                fields["delta"],
                fields["rho"],
                fields["neighbours"],
                salt,
                int(key is not None),
                created,
                genesis,
                genesis,
            ),
        )
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


def _fsync_directory(directory: Path) -> None:
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms cannot open a directory; the link is then as durable as the OS makes it
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _create_file(path: Path, budget: Guarantee, key: bytes | None) -> None:
    """Build a complete ledger under a temporary name, then link it into place unless ``path`` exists."""
    directory = path.parent
    if not directory.is_dir():
        raise InvalidParameterError("path", str(path), f"its directory {str(directory)!r} must exist")
    # Short enough that any legal ``path`` gives a legal temporary name (NAME_MAX is 255 bytes).
    temporary = directory / f".{path.name[:64]}.{secrets.token_hex(8)}.creating"
    try:
        try:
            connection = _connect(str(temporary))
            try:
                connection.execute("PRAGMA journal_mode = DELETE")
                _initialise(connection, budget, key)
            finally:
                connection.close()
            descriptor = os.open(temporary, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        except (sqlite3.Error, OSError) as exc:
            raise InvalidParameterError(
                "path", str(path), f"cannot create a ledger there ({exc}): its directory must be writable"
            ) from None
        try:
            # link() never replaces an existing name: exactly one racing creator wins.
            os.link(temporary, path)
        except FileExistsError:
            return
        except OSError as exc:
            raise InvalidParameterError(
                "path", str(path), f"must be on a file system that supports hard links ({exc.strerror})"
            ) from exc
        _fsync_directory(directory)
    finally:
        for leftover in (temporary, *(Path(f"{temporary}{suffix}") for suffix in ("-journal", "-wal", "-shm"))):
            try:
                leftover.unlink()
            except FileNotFoundError:
                pass


def _check_file(path: Path) -> None:
    """Refuse, before SQLite sees it, a path that cannot hold a ledger (SQLite reads an empty file as empty).

    Only ``stat``: opening and closing the file here would drop every POSIX lock this process
    holds on it (fcntl semantics), under another open connection's feet. SQLite itself reports
    a file that is not a database.
    """
    try:
        status = path.stat()
    except OSError as exc:
        raise LedgerCorruptedError(f"ledger {str(path)!r} cannot be read: {exc}") from exc
    if not stat.S_ISREG(status.st_mode):
        raise LedgerCorruptedError(f"ledger {str(path)!r} is not a regular file")
    if status.st_size == 0:
        raise LedgerCorruptedError(f"ledger {str(path)!r} is an empty (zero-length) file")


# -- the anchor: the newest (count, head) kept in a second file, against rollback ------------------

_ANCHOR_FORMAT = "dpkit-ledger-anchor"


@dataclass(frozen=True)
class _AnchorState:
    """What an anchor file records: the ledger it belongs to (genesis hash) and its newest known point."""

    genesis: str
    count: int
    head: str


def _check_anchor_path(anchor: object, path: Path | None) -> Path | None:
    if anchor is None:
        return None
    if not isinstance(anchor, str | os.PathLike) or not os.fspath(anchor):
        raise InvalidParameterError("anchor", anchor, "must be a file path, or None")
    if path is None:
        raise InvalidParameterError("anchor", anchor, "needs a ledger file: an in-memory ledger cannot be rolled back")
    resolved = Path(os.fspath(anchor)).absolute()
    if resolved == path.absolute():
        raise InvalidParameterError("anchor", anchor, "must be a different file from the ledger")
    if not resolved.parent.is_dir():
        raise InvalidParameterError("anchor", anchor, f"its directory {str(resolved.parent)!r} must exist")
    try:
        import fcntl  # noqa: F401 - the anchor's lock
    except ImportError:  # pragma: no cover - Windows
        raise InvalidParameterError("anchor", anchor, "needs a POSIX system (fcntl locks)") from None
    return resolved


def _read_anchor(anchor: Path) -> _AnchorState | None:
    """The anchor's state, None if the file does not exist; LedgerCorruptedError if it is unreadable or malformed."""
    try:
        text = anchor.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise LedgerCorruptedError(f"anchor {str(anchor)!r}: cannot be read ({exc})") from exc
    try:
        record = json.loads(text)
        valid = (
            isinstance(record, dict)
            and record.get("format") == _ANCHOR_FORMAT
            and record.get("version") == 1
            and isinstance(record.get("count"), int)
            and not isinstance(record.get("count"), bool)
            and record["count"] >= 0
            and all(
                isinstance(record.get(name), str) and _HEX64.fullmatch(record[name]) for name in ("genesis", "head")
            )
        )
    except ValueError:
        valid = False
    if not valid:
        raise LedgerCorruptedError(f"anchor {str(anchor)!r}: not a dpkit ledger anchor (malformed)")
    return _AnchorState(record["genesis"], record["count"], record["head"])


def _write_anchor(anchor: Path, state: _AnchorState) -> None:
    """Replace the anchor atomically (a temporary file, fsynced, renamed over it, directory fsynced)."""
    text = json.dumps(
        {"format": _ANCHOR_FORMAT, "version": 1, "genesis": state.genesis, "count": state.count, "head": state.head}
    )
    temporary = anchor.parent / f".{anchor.name[:64]}.{secrets.token_hex(8)}.writing"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, anchor)
    except OSError as exc:
        try:
            temporary.unlink()
        except OSError:
            pass
        raise LedgerCorruptedError(f"anchor {str(anchor)!r}: cannot be written ({exc})") from exc
    _fsync_directory(anchor.parent)


class _AnchorLock:
    """An exclusive ``flock`` on ``<anchor>.lock``: anchored debits and anchor updates take turns across processes."""

    def __init__(self, anchor: Path | None) -> None:
        self._lock_path = None if anchor is None else anchor.with_name(anchor.name + ".lock")
        self._descriptor: int | None = None

    def __enter__(self) -> None:
        if self._lock_path is None:
            return
        import fcntl

        try:
            self._descriptor = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise LedgerCorruptedError(f"anchor lock {str(self._lock_path)!r}: cannot be opened ({exc})") from exc
        fcntl.flock(self._descriptor, fcntl.LOCK_EX)

    def __exit__(self, *exc_info: object) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)  # closing releases the flock
            self._descriptor = None


class Ledger:
    """A persistent privacy budget shared by every session and process that opens one file.

    ``path`` names the SQLite file (``None``: a private in-memory ledger). A new file needs a
    ``budget``; an existing one stores its own, and a different ``budget`` is refused.
    ``reserve(cost)`` debits atomically or raises BudgetExceededError and records nothing.
    ``analyst`` defaults to the login name; ``key`` (or ``$DPKIT_LEDGER_KEY``) turns the hash
    chain into HMAC-SHA256 so that rewriting the file without the key is detected. ``anchor``
    names a second file that records the newest entry count and head hash: a ledger rolled back
    to an earlier state (an older copy restored, the newest entries cut) is then refused (see the
    module's threat model). Each process opens its own Ledger: one does not survive ``fork()``
    (start workers with ``spawn``, or fork while no Ledger is open).

    >>> from dpkit.guarantees import PureDP
    >>> with Ledger(budget=PureDP(1.0), analyst="alice") as ledger:
    ...     entry = ledger.reserve(PureDP(0.25), description="SELECT COUNT(*) FROM visits")
    ...     print(entry.index, entry.analyst, ledger.remaining.epsilon)
    ...     print(ledger.can_afford(PureDP(0.8)), ledger.can_afford(PureDP(0.75)))
    0 alice 0.75
    False True
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        budget: Guarantee | None = None,
        *,
        analyst: str | None = None,
        key: bytes | None = None,
        anchor: str | os.PathLike[str] | None = None,
    ) -> None:
        self._path = _check_path(path)
        self._anchor = _check_anchor_path(anchor, self._path)
        if budget is not None:
            _check_budget(budget)
        self._analyst = (
            _default_analyst() if analyst is None else _check_text("analyst", analyst, allow_empty=False, one_line=True)
        )
        self._key = _resolve_key(key)
        self._lock = threading.RLock()
        self._connection: sqlite3.Connection | None = None
        self._write_ahead = False  # a file still in WAL mode (made by an earlier version)
        self._pid = os.getpid()
        if self._path is None:
            if budget is None:
                raise InvalidParameterError("budget", None, "is required for an in-memory ledger (path=None)")
            connection = _connect(":memory:")
            try:
                _initialise(connection, budget, self._key)
            except BaseException:
                connection.close()
                raise
        else:
            if not os.path.lexists(self._path):
                if self._anchor is not None and _read_anchor(self._anchor) is not None:
                    # Deleting the file would be the simplest rollback of all: to a full budget.
                    raise LedgerCorruptedError(
                        f"ledger {str(self._path)!r} does not exist but its anchor {str(self._anchor)!r} records "
                        "one: the ledger was deleted or moved (a new ledger needs a new anchor)"
                    )
                if budget is None:
                    raise InvalidParameterError(
                        "budget", None, f"is required to create the new ledger {str(self._path)!r}"
                    )
                _create_file(self._path, budget, self._key)
            _check_file(self._path)
            try:
                connection = _connect(str(self._path))
            except sqlite3.DatabaseError as exc:
                raise _unreadable(f"ledger {str(self._path)!r}", exc) from exc
            self._write_ahead = _leave_write_ahead_log(connection)
        self._connection = connection
        try:
            self._header = self._transaction(self._read_header, immediate=False)
            self._position = _Position(0, self._header.genesis, _zero(self._header.budget))
            self.verify()
            if self._anchor is not None:
                with _AnchorLock(self._anchor):
                    position = self._transaction(self._check_anchor, immediate=False)
                    self._advance_anchor(position)
        except BaseException:
            self.close()
            raise
        if budget is not None and budget != self._header.budget:
            stored = self._header.budget
            self.close()
            raise InvalidParameterError(
                "budget", budget, f"differs from the budget stored in {str(self._path)!r}: {stored}"
            )

    # -- public reading -------------------------------------------------------------------------

    @property
    def budget(self) -> Guarantee:
        """The total budget, as stored when the ledger was created."""
        return self._header.budget

    @property
    def path(self) -> Path | None:
        """The ledger file, or None for an in-memory ledger."""
        return self._path

    @property
    def spent(self) -> Guarantee:
        """Everything debited, composed exactly in the budget's kind (a zero guarantee while nothing is)."""
        position = self._transaction(self._check_tail, immediate=False)
        return _spent_guarantee(position.totals, self.budget)

    @property
    def remaining(self) -> Guarantee:
        """Budget minus spent, exactly, clamped at 0: the budget's kind, or its zero once exhausted (module notes)."""
        position = self._transaction(self._check_tail, immediate=False)
        return _remaining_guarantee(position.totals, self.budget)

    def can_afford(self, cost: Guarantee) -> bool:
        """Whether :meth:`reserve` would accept ``cost`` now (a dry run: nothing is recorded)."""
        return self.remaining_after(cost) is not None

    def remaining_after(self, cost: Guarantee) -> Guarantee | None:
        """What :attr:`remaining` would be after debiting ``cost`` now, or None if it does not fit.

        A dry run, like :meth:`can_afford`: nothing is recorded.
        """
        charge = _charge(cost, self.budget)
        position = self._transaction(self._check_tail, immediate=False)
        after = _add(position.totals, charge)
        return _remaining_guarantee(after, self.budget) if _within(after, self.budget) else None

    def entries(self) -> tuple[LedgerEntry, ...]:
        """Every committed debit, oldest first, after checking the whole chain."""
        return self._transaction(self._verify_all, immediate=False)

    def verify(self) -> None:
        """Check the whole ledger; raise LedgerCorruptedError saying what failed."""
        if self._path is not None:
            _check_file(self._path)
        self._transaction(self._verify_all, immediate=False)

    # -- spending -------------------------------------------------------------------------------

    def reserve(self, cost: Guarantee, *, description: str = "", analyst: str | None = None) -> LedgerEntry:
        """Debit ``cost`` atomically and return its entry, or raise BudgetExceededError and record nothing.

        The debit is committed (and fsynced) before this returns: call it before releasing anything.
        """
        charge = _charge(cost, self.budget)
        text = _check_text("description", description, allow_empty=True)
        who = self._analyst if analyst is None else _check_text("analyst", analyst, allow_empty=False, one_line=True)

        def debit(connection: sqlite3.Connection) -> tuple[LedgerEntry, _Position]:
            position = self._check_anchor(connection) if self._anchor is not None else self._check_tail(connection)
            totals = _add(position.totals, charge)
            if not _within(totals, self.budget):
                remaining = _remaining_guarantee(position.totals, self.budget)
                raise BudgetExceededError(
                    cost, remaining, f"the ledger has spent {_spent_guarantee(position.totals, self.budget)}"
                )
            entry = LedgerEntry(position.count, _utc_now(), who, text, cost, os.getpid())
            digest = _digest(self._key, position.head, _entry_text(entry, totals))
            fields = _fields(cost)
            connection.execute(
                f"INSERT INTO ledger_entries ({_ENTRY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    entry.index,
                    entry.time,
                    entry.analyst,
                    entry.description,
                    entry.pid,
                    fields["kind"],
                    fields["epsilon"],
                    fields["delta"],
                    fields["rho"],
                    fields["neighbours"],
                    ",".join(_fraction_text(part) for part in totals),
                    digest,
                ),
            )
            updated = connection.execute(
                "UPDATE ledger_meta SET head = ?, entry_count = ? WHERE singleton = 1 AND head = ? AND entry_count = ?",
                (digest, entry.index + 1, position.head, position.count),
            )
            if updated.rowcount != 1:
                raise LedgerCorruptedError(f"{self._name}: the meta row changed during a debit")
            return entry, _Position(entry.index + 1, digest, totals)

        with self._lock, _AnchorLock(self._anchor):
            entry, position = self._transaction(debit, immediate=True)
            self._position = position  # only once the commit succeeded
            self._checkpoint()
            if self._anchor is not None:
                # After the commit: a crash in between leaves the anchor one debit behind, which
                # is allowed (it only ever claims entries that exist); the lock keeps it monotonic.
                self._advance_anchor(position)
        return entry

    # -- lifetime -------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the database connection (an in-memory ledger is then gone). Safe to call twice."""
        with self._lock:
            if self._connection is not None:
                connection, self._connection = self._connection, None
                connection.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "in-memory" if self._path is None else repr(str(self._path))
        budget = getattr(self, "_header", None)
        return f"Ledger({where}, budget={budget.budget if budget else None})"

    # -- internals ------------------------------------------------------------------------------

    @property
    def _name(self) -> str:
        return "in-memory ledger" if self._path is None else f"ledger {str(self._path)!r}"

    def _open_connection(self) -> sqlite3.Connection:
        if self._connection is None:
            raise InvalidParameterError("ledger", self._name, "is closed; open a new Ledger")
        if os.getpid() != self._pid:
            # SQLite connections must not cross fork(), and a forked copy of an in-memory ledger
            # would be a second, independent budget: each process opens its own Ledger.
            raise InvalidParameterError(
                "ledger", self._name, f"was opened in process {self._pid}; open a new Ledger in this process"
            )
        return self._connection

    def _checkpoint(self) -> None:
        """On a file still in WAL mode, copy committed debits from the WAL into the main file, best effort.

        A commit is durable once it is in the WAL, but until a checkpoint only the ``-wal``
        sidecar holds it: a copy of the main file alone, or a sidecar lost after a crash, would
        read as a budget with those debits never made. PASSIVE waits for no one; a checkpoint
        that cannot finish now (a reader holds an older snapshot) is completed by a later one.
        Files in the rollback-journal mode dpkit now uses need none: a commit writes the main file.
        """
        if not self._write_ahead or self._connection is None:
            return
        try:
            self._connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error:
            pass

    def _transaction(self, work: Callable[[sqlite3.Connection], _T], *, immediate: bool) -> _T:
        """Run ``work`` in one transaction, retrying while another process holds the lock."""
        deadline = time.monotonic() + _BUSY_TIMEOUT_S
        with self._lock:
            connection = self._open_connection()
            while True:
                try:
                    connection.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
                    try:
                        result = work(connection)
                        connection.execute("COMMIT")
                    except BaseException:
                        if connection.in_transaction:
                            try:
                                connection.execute("ROLLBACK")
                            except sqlite3.Error:
                                pass
                        raise
                    return result
                except sqlite3.DatabaseError as exc:
                    if _is_busy(exc):
                        if time.monotonic() < deadline:
                            time.sleep(0.001 + secrets.randbelow(19_000) / 1e6)  # jitter; not a privacy draw
                            continue
                        raise TimeoutError(f"{self._name} stayed locked for {_BUSY_TIMEOUT_S:g} s") from exc
                    raise _unreadable(self._name, exc) from exc

    def _read_header(self, connection: sqlite3.Connection) -> _Header:
        header, _, _ = self._read_meta(connection)
        return header

    def _read_meta(self, connection: sqlite3.Connection) -> tuple[_Header, int, str]:
        objects = {(kind, name) for kind, name in connection.execute("SELECT type, name FROM sqlite_master")}
        missing = _EXPECTED_OBJECTS - objects
        if missing:
            raise LedgerCorruptedError(f"{self._name}: missing table(s) {sorted(name for _, name in missing)}")
        extra = objects - _EXPECTED_OBJECTS
        if extra:
            raise LedgerCorruptedError(f"{self._name}: unexpected schema object(s) {sorted(extra)}")
        rows = connection.execute(f"SELECT {_META_COLUMNS} FROM ledger_meta").fetchall()
        if len(rows) != 1:
            raise LedgerCorruptedError(f"{self._name}: expected one meta row, found {len(rows)}")
        (form, version, kind, epsilon, delta, rho, neighbours, salt, keyed, created, genesis, head, count) = rows[0]
        if form != _FORMAT or version not in (_VERSION, _VERSION_APPROX_ZCDP):
            raise LedgerCorruptedError(f"{self._name}: unknown format {form!r} version {version!r}")
        budget = _guarantee_from_fields(kind, epsilon, delta, rho, neighbours, f"{self._name}: stored budget")
        if version != _version(budget):
            raise LedgerCorruptedError(f"{self._name}: version {version!r} does not match its {kind} budget")
        if not (isinstance(salt, str) and _HEX32.fullmatch(salt)):
            raise LedgerCorruptedError(f"{self._name}: malformed salt")
        if keyed not in (0, 1) or isinstance(keyed, float) or not isinstance(created, str):
            raise LedgerCorruptedError(f"{self._name}: malformed meta row")
        for name, value in (("genesis", genesis), ("head", head)):
            if not (isinstance(value, str) and _HEX64.fullmatch(value)):
                raise LedgerCorruptedError(f"{self._name}: malformed {name} hash")
        if not isinstance(count, int) or count < 0:
            raise LedgerCorruptedError(f"{self._name}: malformed entry count {count!r}")
        if keyed and self._key is None:
            raise InvalidParameterError(
                "key", None, f"{self._name} was created with a key: pass key= or set ${_KEY_ENV}"
            )
        if not keyed and self._key is not None:
            raise LedgerCorruptedError(
                f"{self._name} claims to be unkeyed but a key was given: it was rewritten without the key, "
                "or the key is not meant for it"
            )
        expected = _genesis(self._key, budget, salt, bool(keyed), created)
        if not hmac.compare_digest(expected, genesis):
            raise LedgerCorruptedError(
                f"{self._name}: genesis hash mismatch (the stored budget or header was changed"
                + (", or the key is wrong)" if keyed else ")")
            )
        return _Header(budget, salt, bool(keyed), created, genesis), count, head

    def _rows(self, connection: sqlite3.Connection, first: int) -> Iterator[tuple[object, ...]]:
        yield from connection.execute(
            f"SELECT {_ENTRY_COLUMNS} FROM ledger_entries WHERE idx >= ? ORDER BY idx", (first,)
        )

    def _check_row(
        self, row: tuple[object, ...], index: int, previous: str, totals: _Totals
    ) -> tuple[LedgerEntry, str, _Totals]:
        """Check one stored entry against the chain so far; return it, its hash and the new running total."""
        (idx, when, analyst, description, pid, kind, epsilon, delta, rho, neighbours, total, stored) = row
        where = f"{self._name}, entry {index}"
        if idx != index or not isinstance(idx, int):
            raise LedgerCorruptedError(f"{where}: found index {idx!r} (entries must be contiguous from 0)")
        if not (isinstance(when, str) and isinstance(analyst, str) and isinstance(description, str)):
            raise LedgerCorruptedError(f"{where}: malformed text fields")
        try:
            if datetime.fromisoformat(when).utcoffset() != timedelta(0):
                raise ValueError(when)
        except (TypeError, ValueError) as exc:
            raise LedgerCorruptedError(f"{where}: malformed time {when!r}") from exc
        if not isinstance(pid, int) or not isinstance(stored, str) or not isinstance(total, str):
            raise LedgerCorruptedError(f"{where}: malformed row")
        cost = _guarantee_from_fields(kind, epsilon, delta, rho, neighbours, f"{where}: cost")
        try:
            charge = _charge(cost, self.budget)
        except InvalidParameterError as exc:
            raise LedgerCorruptedError(f"{where}: a cost this budget cannot hold ({exc})") from exc
        parts = total.split(",")
        if len(parts) != len(totals):
            raise LedgerCorruptedError(f"{where}: malformed running total {total[:80]!r}")
        running = tuple(_parse_fraction(part, f"{where}: running total") for part in parts)
        if running != _add(totals, charge):
            raise LedgerCorruptedError(f"{where}: running total does not equal the sum of the costs")
        if not _within(running, self.budget):
            raise LedgerCorruptedError(f"{where}: the running total exceeds the budget")
        entry = LedgerEntry(idx, when, analyst, description, cost, pid)
        expected = _digest(self._key, previous, _entry_text(entry, running))
        if not hmac.compare_digest(expected, stored):
            raise LedgerCorruptedError(f"{where}: hash mismatch (the entry or one before it was changed)")
        return entry, expected, running

    def _finish(self, connection: sqlite3.Connection, count: int, head: str, position: _Position) -> _Position:
        if position.count != count:
            raise LedgerCorruptedError(
                f"{self._name}: the meta row counts {count} entries but {position.count} chain from the start"
            )
        if not hmac.compare_digest(position.head, head):
            raise LedgerCorruptedError(f"{self._name}: the head hash in the meta row does not match the last entry")
        (rows,) = connection.execute("SELECT COUNT(*) FROM ledger_entries").fetchone()
        if rows != count:
            raise LedgerCorruptedError(f"{self._name}: {rows} entry rows but the meta row counts {count}")
        return position

    def _verify_all(self, connection: sqlite3.Connection) -> tuple[LedgerEntry, ...]:
        (check,) = connection.execute("PRAGMA quick_check(1)").fetchone()
        if check != "ok":
            raise LedgerCorruptedError(f"{self._name}: SQLite integrity check failed: {check}")
        header, count, head = self._read_meta(connection)
        if header != self._header:
            raise LedgerCorruptedError(f"{self._name}: the stored header changed while the ledger was open")
        previous, totals = header.genesis, _zero(header.budget)
        entries: list[LedgerEntry] = []
        for row in self._rows(connection, 0):
            entry, previous, totals = self._check_row(row, len(entries), previous, totals)
            entries.append(entry)
        self._position = self._finish(connection, count, head, _Position(len(entries), previous, totals))
        return tuple(entries)

    def _check_tail(self, connection: sqlite3.Connection) -> _Position:
        """Re-check the last verified entry and every entry appended since; return the current position."""
        header, count, head = self._read_meta(connection)
        if header != self._header:
            raise LedgerCorruptedError(f"{self._name}: the stored header changed while the ledger was open")
        known = self._position
        if count < known.count:
            raise LedgerCorruptedError(f"{self._name}: the ledger shrank from {known.count} to {count} entries")
        if known.count > 0:
            # The last verified entry must still hash, from its stored predecessor, to the hash we verified.
            before = header.genesis
            if known.count > 1:
                found = connection.execute(
                    "SELECT hash FROM ledger_entries WHERE idx = ?", (known.count - 2,)
                ).fetchone()
                before = found[0] if found and isinstance(found[0], str) else ""
            found_row = connection.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM ledger_entries WHERE idx = ?", (known.count - 1,)
            ).fetchone()
            if found_row is None:
                raise LedgerCorruptedError(f"{self._name}: entry {known.count - 1} was deleted")
            stored = found_row[-1]
            if not (isinstance(stored, str) and hmac.compare_digest(stored, known.head)):
                raise LedgerCorruptedError(f"{self._name}: entry {known.count - 1} was changed")
            recomputed = self._recompute(found_row, before)
            if not hmac.compare_digest(recomputed, known.head):
                raise LedgerCorruptedError(f"{self._name}: entry {known.count - 1} was changed")
        position = known
        for row in self._rows(connection, known.count):
            _, digest, totals = self._check_row(row, position.count, position.head, position.totals)
            position = _Position(position.count + 1, digest, totals)
        self._position = self._finish(connection, count, head, position)
        return self._position

    def _check_anchor(self, connection: sqlite3.Connection) -> _Position:
        """The current position (tail checked), refused when the anchor records entries the file lacks."""
        position = self._check_tail(connection)
        state = None if self._anchor is None else _read_anchor(self._anchor)
        if state is None:
            return position
        where = f"{self._name} (anchor {str(self._anchor)!r})"
        if not hmac.compare_digest(state.genesis, self._header.genesis):
            raise LedgerCorruptedError(f"{where}: the anchor belongs to another ledger, or this one was replaced")
        if state.count > position.count:
            raise LedgerCorruptedError(
                f"{where}: rolled back: the anchor records {state.count} entries but the file holds {position.count}"
            )
        head = self._header.genesis
        if state.count > 0:
            found = connection.execute("SELECT hash FROM ledger_entries WHERE idx = ?", (state.count - 1,)).fetchone()
            head = found[0] if found and isinstance(found[0], str) else ""
        if not hmac.compare_digest(state.head, head):
            raise LedgerCorruptedError(
                f"{where}: entry {state.count - 1} is not the one the anchor records (the file was rolled back and "
                "written again, or replaced)"
            )
        return position

    def _advance_anchor(self, position: _Position) -> None:
        """Record ``position`` in the anchor unless it records as many entries already (anchor lock held)."""
        if self._anchor is None:
            return
        state = _read_anchor(self._anchor)
        if state is None or state.count < position.count:
            _write_anchor(self._anchor, _AnchorState(self._header.genesis, position.count, position.head))

    def _recompute(self, row: tuple[object, ...], previous: str) -> str:
        """The hash an already-verified row has when chained from ``previous`` (no running-total check)."""
        (idx, when, analyst, description, pid, kind, epsilon, delta, rho, neighbours, total, _) = row
        if not (isinstance(idx, int) and isinstance(pid, int) and isinstance(total, str)):
            raise LedgerCorruptedError(f"{self._name}: entry {idx!r} is malformed")
        cost = _guarantee_from_fields(kind, epsilon, delta, rho, neighbours, f"{self._name}, entry {idx}: cost")
        running = tuple(_parse_fraction(part, f"{self._name}, entry {idx}") for part in total.split(","))
        entry = LedgerEntry(idx, str(when), str(analyst), str(description), cost, pid)
        return _digest(self._key, previous, _entry_text(entry, running))
