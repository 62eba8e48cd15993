"""The persistent budget ledger: exact debits, persistence, concurrency, crash safety, tamper evidence."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from dpkit import BudgetExceededError, InvalidParameterError, LedgerCorruptedError
from dpkit.engine import Ledger, LedgerEntry
from dpkit.guarantees import ZCDP, ApproxDP, ApproxZCDP, NeighbourRelation, PureDP

REPLACE = NeighbourRelation.REPLACE_ONE
KEY = b"0123456789abcdef0123456789abcdef"
NOTHING = ApproxDP(0.0, 0.0)
NO_RHO = ApproxZCDP(0.0, 0.0)  # nothing, in the zCDP family


def _fork_context() -> multiprocessing.context.BaseContext:
    # forkserver forks each child from a clean, single-threaded server: a plain fork of this
    # pytest worker could copy a lock held by one of its other threads (DuckDB, Spark, thread
    # pools of earlier tests) and hang the child. spawn where forkserver is missing.
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["dpkit.engine"])
        return context
    return multiprocessing.get_context("spawn")


def _open(where: str, tmp_path: Path, budget: ApproxDP | PureDP | ZCDP) -> Ledger:
    return Ledger(None if where == "memory" else tmp_path / "ledger.db", budget)


def _row_count(path: Path) -> int:
    with sqlite3.connect(path) as raw:
        (count,) = raw.execute("SELECT COUNT(*) FROM ledger_entries").fetchone()
    raw.close()
    return int(count)


# -- 1. exactness -----------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["memory", "file"])
def test_ten_tenths_exactly_exhaust_one_and_the_eleventh_records_nothing(where: str, tmp_path: Path) -> None:
    with _open(where, tmp_path, PureDP(1.0)) as ledger:
        assert ledger.spent == NOTHING and ledger.remaining == PureDP(1.0)
        granted = [ledger.reserve(PureDP(0.1), description=f"query {i}") for i in range(10)]
        assert [entry.index for entry in granted] == list(range(10))
        assert ledger.spent == PureDP(1.0)
        assert ledger.remaining == NOTHING
        assert not ledger.can_afford(PureDP(0.1))
        with pytest.raises(BudgetExceededError) as refused:
            ledger.reserve(PureDP(0.1), description="one too many")
        assert refused.value.requested == PureDP(0.1)
        assert refused.value.remaining == NOTHING
        assert ledger.entries() == tuple(granted)
        assert ledger.spent == PureDP(1.0)
        ledger.verify()


def test_approximate_budget_adds_epsilons_and_deltas_exactly() -> None:
    with Ledger(budget=ApproxDP(1.0, 1e-5)) as ledger:
        ledger.reserve(PureDP(0.5))  # a pure cost is (0.5, 0)
        for _ in range(5):
            ledger.reserve(ApproxDP(0.1, 2e-6))
        assert ledger.spent == ApproxDP(1.0, 1e-5)
        assert ledger.remaining == ApproxDP(0.0, 0.0)
        with pytest.raises(BudgetExceededError) as refused:
            ledger.reserve(ApproxDP(0.1, 2e-6))
        assert refused.value.requested == ApproxDP(0.1, 2e-6)
        assert refused.value.remaining == ApproxDP(0.0, 0.0)
        assert len(ledger.entries()) == 6
    # delta runs out first: epsilon left over does not help
    with Ledger(budget=ApproxDP(10.0, 1e-6)) as ledger:
        for _ in range(10):
            ledger.reserve(ApproxDP(0.1, 1e-7))
        assert ledger.remaining == ApproxDP(9.0, 0.0)
        with pytest.raises(BudgetExceededError):
            ledger.reserve(ApproxDP(0.1, 1e-7))
        ledger.reserve(PureDP(9.0))  # pure costs need no delta
        assert ledger.remaining == ApproxDP(0.0, 0.0) and len(ledger.entries()) == 11


def test_zcdp_budget_adds_rho_and_charges_pure_costs_eps_squared_over_two() -> None:
    with Ledger(budget=ZCDP(0.5)) as ledger:
        for _ in range(10):
            ledger.reserve(ZCDP(0.05))
        assert ledger.spent == ZCDP(0.5) and ledger.remaining == NO_RHO
        assert ledger.remaining.rho == 0.0  # an exhausted zCDP ledger still reads as rho
        with pytest.raises(BudgetExceededError) as refused:
            ledger.reserve(ZCDP(0.05))
        assert refused.value.requested == ZCDP(0.05) and refused.value.remaining == NO_RHO
        assert len(ledger.entries()) == 10
    with Ledger(budget=ZCDP(0.5)) as ledger:
        ledger.reserve(PureDP(0.6))  # 0.18
        assert ledger.remaining == ZCDP(0.32)
        assert not ledger.can_afford(PureDP(0.81))  # 0.32805 > 0.32
        assert ledger.can_afford(PureDP(0.8))  # exactly 0.32
        assert ledger.remaining_after(PureDP(0.81)) is None
        assert ledger.remaining_after(PureDP(0.2)) == ZCDP(0.3)  # 0.32 - 0.02, exactly
        assert ledger.remaining_after(PureDP(0.8)) == NO_RHO and len(ledger.entries()) == 1
        entry = ledger.reserve(PureDP(0.8), description="exactly the rest")
        assert entry.cost == PureDP(0.8)  # the entry keeps the cost as requested
        assert ledger.spent == ZCDP(0.5)


@pytest.mark.parametrize("where", ["memory", "file"])
def test_approximate_zcdp_budget_adds_rho_and_delta_exactly_and_survives_reopening(where: str, tmp_path: Path) -> None:
    budget = ApproxZCDP(0.1, 1e-6)
    with _open(where, tmp_path, budget) as ledger:  # type: ignore[arg-type]
        for _ in range(10):
            ledger.reserve(ApproxZCDP(0.009, 1e-7), description="gaussian, private keys")
        assert ledger.spent == ApproxZCDP(0.09, 1e-6)
        assert ledger.remaining == ApproxZCDP(0.01, 0.0)
        # delta is exhausted: a cost with any delta is refused, one without still fits
        assert not ledger.can_afford(ApproxZCDP(0.001, 1e-12))
        with pytest.raises(BudgetExceededError) as refused:
            ledger.reserve(ApproxZCDP(0.001, 1e-12))
        assert refused.value.requested == ApproxZCDP(0.001, 1e-12)
        ledger.reserve(ZCDP(0.005))
        ledger.reserve(PureDP(0.1))  # 0.1^2 / 2 = 0.005 exactly
        assert ledger.spent == ApproxZCDP(0.1, 1e-6) and ledger.remaining == ApproxZCDP(0, 0)
        assert ledger.spent.within(ledger.budget) and not ledger.can_afford(ZCDP(1e-9))
        assert [entry.cost for entry in ledger.entries()[-2:]] == [ZCDP(0.005), PureDP(0.1)]
    if where == "file":
        with Ledger(tmp_path / "ledger.db", budget) as reopened:
            reopened.verify()
            assert reopened.budget == budget and reopened.spent == ApproxZCDP(0.1, 1e-6)
            assert len(reopened.entries()) == 12
        with pytest.raises(InvalidParameterError, match="budget"):
            Ledger(tmp_path / "ledger.db", ApproxZCDP(0.1, 2e-6))
        with sqlite3.connect(tmp_path / "ledger.db") as raw:
            assert raw.execute("SELECT version FROM ledger_meta").fetchone() == (2,)
        raw.close()


def test_an_empty_approximate_zcdp_ledger_reports_zero_of_its_own_kind() -> None:
    with Ledger(budget=ApproxZCDP(0.1, 1e-6)) as ledger:
        assert ledger.spent == ApproxZCDP(0, 0) and ledger.spent.within(ledger.budget)
        assert ledger.remaining == ApproxZCDP(0.1, 1e-6)


@pytest.mark.parametrize(("budget", "version"), [(ApproxZCDP(0.1, 1e-6), 1), (ZCDP(0.1), 2), (PureDP(1.0), 2)])
def test_a_version_that_does_not_match_the_budget_kind_is_corrupted(
    tmp_path: Path, budget: object, version: int
) -> None:
    """Version 2 marks ledgers that may hold approximate zCDP (older dpkit refuses them as unknown)."""
    path = tmp_path / "ledger.db"
    Ledger(path, budget).close()  # type: ignore[arg-type]
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE ledger_meta SET version = ?", (version,))
    raw.close()
    with pytest.raises(LedgerCorruptedError, match="version"):
        Ledger(path, budget)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("budget", "cost"),
    [
        (ApproxZCDP(1.0, 1e-6), ApproxDP(0.1, 1e-9)),
        (ZCDP(1.0), ApproxZCDP(0.01, 1e-9)),
        (ZCDP(1.0), ApproxZCDP(0.01, 0.0)),
        (ApproxDP(1.0, 1e-6), ApproxZCDP(0.01, 1e-9)),
        (PureDP(1.0), ApproxDP(0.1, 0.0)),
        (PureDP(1.0), ApproxDP(0.1, 1e-9)),
        (PureDP(1.0), ZCDP(0.01)),
        (ApproxDP(1.0, 1e-6), ZCDP(0.01)),
        (ZCDP(1.0), ApproxDP(0.1, 1e-9)),
        (PureDP(1.0), PureDP(0.1, REPLACE)),
        (ApproxDP(1.0, 1e-6, REPLACE), ApproxDP(0.1, 1e-9)),
        (ZCDP(1.0), PureDP(0.1, REPLACE)),
        (PureDP(1.0), 0.1),
        (PureDP(1.0), None),
    ],
)
def test_mismatched_kinds_and_relations_are_refused_and_record_nothing(budget: object, cost: object) -> None:
    with Ledger(budget=budget) as ledger:  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError) as refused:
            ledger.reserve(cost)  # type: ignore[arg-type]
        assert refused.value.name == "cost"
        assert "accepts" in str(refused.value) or "relation" in str(refused.value) or "guarantee" in str(refused.value)
        with pytest.raises(InvalidParameterError):
            ledger.can_afford(cost)  # type: ignore[arg-type]
        assert ledger.entries() == ()


def test_entries_record_analyst_description_pid_and_utc_time() -> None:
    import getpass

    with Ledger(budget=PureDP(1.0), analyst="alice") as ledger:
        first = ledger.reserve(PureDP(0.25), description="SELECT COUNT(*) FROM visits")
        second = ledger.reserve(PureDP(0.25), analyst="bob")
        assert isinstance(first, LedgerEntry)
        assert (first.analyst, first.description, first.pid) == ("alice", "SELECT COUNT(*) FROM visits", os.getpid())
        assert (second.analyst, second.description) == ("bob", "")
        stamp = datetime.fromisoformat(first.time)
        assert stamp.utcoffset() == timedelta(0)
        assert abs((datetime.now(stamp.tzinfo) - stamp).total_seconds()) < 60
    with Ledger(budget=PureDP(1.0)) as ledger:
        try:
            expected = getpass.getuser()
        except Exception:
            expected = "unknown"
        assert ledger.reserve(PureDP(0.1)).analyst == expected


def test_arguments_are_validated_up_front(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    cases = [
        ("budget", lambda: Ledger(budget=1.0)),  # type: ignore[arg-type]
        ("budget", lambda: Ledger()),
        ("budget", lambda: Ledger(path)),  # a new file needs a budget
        ("path", lambda: Ledger(12, PureDP(1.0))),  # type: ignore[arg-type]
        ("path", lambda: Ledger("", PureDP(1.0))),
        ("path", lambda: Ledger(tmp_path / "missing" / "ledger.db", PureDP(1.0))),
        ("analyst", lambda: Ledger(budget=PureDP(1.0), analyst="")),
        ("analyst", lambda: Ledger(budget=PureDP(1.0), analyst=3)),  # type: ignore[arg-type]
        ("key", lambda: Ledger(budget=PureDP(1.0), key=b"short")),
        ("key", lambda: Ledger(budget=PureDP(1.0), key="a text key of enough length")),  # type: ignore[arg-type]
    ]
    for name, make in cases:
        with pytest.raises(InvalidParameterError) as refused:
            make()
        assert refused.value.name == name
    assert not path.exists()
    with pytest.raises(InvalidParameterError) as refused:
        Ledger(budget=PureDP(1.0), key=b"short")
    assert b"short".decode() not in str(refused.value)  # key material is never echoed
    with Ledger(budget=PureDP(1.0)) as ledger:
        for bad in [{"description": 5}, {"analyst": ""}]:
            with pytest.raises(InvalidParameterError):
                ledger.reserve(PureDP(0.1), **bad)  # type: ignore[arg-type]
        assert ledger.entries() == ()
    ledger = Ledger(budget=PureDP(1.0))
    ledger.close()
    ledger.close()
    with pytest.raises(InvalidParameterError, match="closed"):
        ledger.reserve(PureDP(0.1))


# -- 2. persistence ---------------------------------------------------------------------------


def test_reopening_shows_the_same_entries_and_remaining(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path, ApproxDP(1.0, 1e-6), analyst="alice") as ledger:
        ledger.reserve(PureDP(0.3), description="SELECT 1")
        ledger.reserve(ApproxDP(0.2, 1e-7), description="SELECT 2", analyst="bob")
        before, remaining = ledger.entries(), ledger.remaining
    assert ledger.path == path
    with Ledger(str(path)) as reopened:
        assert reopened.budget == ApproxDP(1.0, 1e-6)
        assert reopened.entries() == before
        assert reopened.remaining == remaining == ApproxDP(0.5, 9e-7)
        reopened.reserve(PureDP(0.5))
    with Ledger(path, ApproxDP(1.0, 1e-6)) as again:  # the same budget is fine
        assert len(again.entries()) == 3 and again.remaining == ApproxDP(0.0, 9e-7)


@pytest.mark.parametrize("other", [PureDP(1.0), ApproxDP(2.0, 1e-6), ApproxDP(1.0, 1e-6, REPLACE), ZCDP(1.0)])
def test_a_different_budget_on_reopen_is_refused_naming_both(tmp_path: Path, other: object) -> None:
    path = tmp_path / "ledger.db"
    Ledger(path, ApproxDP(1.0, 1e-6)).close()
    with pytest.raises(InvalidParameterError) as refused:
        Ledger(path, other)  # type: ignore[arg-type]
    assert refused.value.name == "budget"
    assert repr(other) in str(refused.value) and repr(ApproxDP(1.0, 1e-6)) in str(refused.value)


def test_two_sessions_on_one_file_share_the_budget(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path, PureDP(1.0)) as first, Ledger(path) as second:
        first.reserve(PureDP(0.6))
        assert second.remaining == PureDP(0.4)
        with pytest.raises(BudgetExceededError):
            second.reserve(PureDP(0.5))
        second.reserve(PureDP(0.4))
        assert first.remaining == NOTHING
        assert [entry.index for entry in first.entries()] == [0, 1]


# -- 3. concurrency ---------------------------------------------------------------------------


def _spend_many(path: str, barrier: object, results: object, attempts: int, cost: PureDP) -> None:
    try:
        ledger = Ledger(path)
        barrier.wait()  # type: ignore[attr-defined]
        granted = 0
        for attempt in range(attempts):
            if attempt % 2:
                # Other sessions opening, checking and closing the file mid-debit must not disturb the locks.
                with Ledger(path) as other:
                    other.verify()
            try:
                ledger.reserve(cost, description=f"pid {os.getpid()} attempt {attempt}")
                granted += 1
            except BudgetExceededError:
                pass
        ledger.close()
        results.put(granted)  # type: ignore[attr-defined]
    except Exception as error:  # reported, so that the parent fails at once and says why
        results.put(repr(error))  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("cost", "budget", "expected"),
    [(PureDP(0.1), PureDP(1.0), 10), (PureDP(0.001), PureDP(0.3), 300)],
    ids=["ten-grants", "three-hundred-grants"],
)
def test_sixteen_processes_can_never_overspend_together(
    tmp_path: Path, cost: PureDP, budget: PureDP, expected: int
) -> None:
    path = tmp_path / "ledger.db"
    Ledger(path, budget).close()
    context = _fork_context()
    barrier, results = context.Barrier(16), context.Queue()
    workers = [context.Process(target=_spend_many, args=(str(path), barrier, results, 40, cost)) for _ in range(16)]
    for worker in workers:
        worker.start()
    grants = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert all(isinstance(granted, int) for granted in grants), grants
    assert sum(grants) == expected
    assert _row_count(path) == expected
    with Ledger(path) as ledger:
        ledger.verify()
        assert ledger.spent == budget
        assert [entry.index for entry in ledger.entries()] == list(range(expected))


def test_threads_sharing_or_not_sharing_a_ledger_never_overspend(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    shared = Ledger(path, PureDP(1.0))

    def spend(own: bool) -> int:
        ledger = Ledger(path) if own else shared
        granted = sum(ledger.can_afford(PureDP(0.1)) and _try(ledger) for _ in range(20))
        if own:
            ledger.close()
        return granted

    with ThreadPoolExecutor(8) as pool:
        grants = list(pool.map(spend, [True, False] * 4))
    assert sum(grants) == 10
    assert len(shared.entries()) == 10
    shared.close()


def _try(ledger: Ledger) -> bool:
    try:
        ledger.reserve(PureDP(0.1))
    except BudgetExceededError:
        return False
    return True


def _create_racing(path: str, budget: PureDP, barrier: object, results: object) -> None:
    barrier.wait()  # type: ignore[attr-defined]
    try:
        with Ledger(path, budget) as ledger:
            ledger.reserve(PureDP(0.01))
        results.put("opened")  # type: ignore[attr-defined]
    except InvalidParameterError as error:
        results.put(f"refused: {error.name}")  # type: ignore[attr-defined]
    except Exception as error:
        results.put(repr(error))  # type: ignore[attr-defined]


def test_racing_creators_make_exactly_one_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    context = _fork_context()
    for budgets in ([PureDP(1.0)] * 8, [PureDP(1.0 + i) for i in range(8)]):
        if path.exists():
            path.unlink()
        barrier, results = context.Barrier(8), context.Queue()
        workers = [context.Process(target=_create_racing, args=(str(path), b, barrier, results)) for b in budgets]
        for worker in workers:
            worker.start()
        outcomes = sorted(results.get(timeout=60) for _ in workers)
        for worker in workers:
            worker.join(timeout=60)
        if len(set(budgets)) == 1:
            assert outcomes == ["opened"] * 8  # one created, seven opened it
        else:
            assert outcomes == ["opened"] + ["refused: budget"] * 7  # exactly one creator's budget won
        with Ledger(path) as ledger:
            assert len(ledger.entries()) == outcomes.count("opened")
            assert ledger.budget in budgets
        assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("ledger.db")) == []


# -- 4. crash robustness ----------------------------------------------------------------------

CRASH_CHILD = textwrap.dedent(
    """
    import os, sys
    from dpkit.engine import Ledger
    from dpkit.guarantees import PureDP

    ledger = Ledger(sys.argv[1])
    log = os.open(sys.argv[2], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    print("ready", flush=True)
    while True:
        entry = ledger.reserve(PureDP(0.001), description="crash test")
        # released only after reserve() returned, i.e. after the debit was committed
        os.write(log, f"{entry.index}\\n".encode())
        os.fsync(log)
    """
)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_kill_nine_at_random_moments_never_loses_a_released_debit(tmp_path: Path) -> None:
    path, released_log, script = tmp_path / "ledger.db", tmp_path / "released.log", tmp_path / "child.py"
    script.write_text(CRASH_CHILD)
    Ledger(path, PureDP(1000.0)).close()
    rng = random.Random(20240611)
    delays = [rng.uniform(0.0, 0.3) for _ in range(30)]
    env = {k: v for k, v in os.environ.items() if k != "DPKIT_LEDGER_KEY"}

    def cycle(delay: float) -> int:
        child = subprocess.Popen(
            [sys.executable, str(script), str(path), str(released_log)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert child.stdout is not None and child.stderr is not None
        if child.stdout.readline() != b"ready\n":  # it could not even open the ledger
            child.wait(timeout=30)
            pytest.fail(child.stderr.read().decode(errors="replace")[-2000:])
        time.sleep(delay)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
        child.stderr.close()
        return child.returncode

    # Cycles overlap three at a time (the children also race each other for the lock), which
    # keeps the interpreter start-up of 30 processes within a few seconds.
    with ThreadPoolExecutor(3) as pool:
        codes = list(pool.map(cycle, delays))
    assert codes == [-signal.SIGKILL] * 30  # every child died by kill -9, mid-loop

    released = [int(line) for line in released_log.read_bytes().split(b"\n")[:-1]] if released_log.exists() else []
    with Ledger(path) as ledger:
        ledger.verify()
        entries = ledger.entries()
        assert [entry.index for entry in entries] == list(range(len(entries)))  # contiguous
        assert ledger.spent.within(ledger.budget)
        assert ledger.spent == (PureDP(0.001) * len(entries) if entries else NOTHING)
        assert set(released) <= {entry.index for entry in entries}  # nothing released without its debit
        assert len(released) == len(set(released))
        ledger.reserve(PureDP(0.001))  # and the ledger still works
    assert len(entries) >= 30  # the children did real work before dying


# -- 5. tampering -----------------------------------------------------------------------------


@pytest.fixture
def used_ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.db"
    with Ledger(path, PureDP(1.0), analyst="alice") as ledger:
        for i in range(5):
            ledger.reserve(PureDP(0.1), description=f"query {i}")
    return path


def _raw(path: Path, *statements: str) -> None:
    raw = sqlite3.connect(path)
    with raw:
        for statement in statements:
            raw.execute(statement)
    raw.close()


def _assert_corrupted(path: Path, match: str | None = None, **kwargs: object) -> None:
    with pytest.raises(LedgerCorruptedError, match=match):
        Ledger(path, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(LedgerCorruptedError, match=match):  # passing the budget does not re-create it
        Ledger(path, PureDP(1.0), **kwargs)  # type: ignore[arg-type]


def test_zero_length_truncated_and_foreign_files_are_corrupted(used_ledger: Path, tmp_path: Path) -> None:
    data = used_ledger.read_bytes()
    assert len(data) >= 4096 * 2
    used_ledger.write_bytes(b"")
    _assert_corrupted(used_ledger, "zero-length")
    assert used_ledger.stat().st_size == 0  # and it is left as it is
    for size in (50, 100, 2048, len(data) // 2, len(data) - 4096):
        used_ledger.write_bytes(data[:size])
        _assert_corrupted(used_ledger)
    used_ledger.write_bytes(random.Random(7).randbytes(len(data)))
    _assert_corrupted(used_ledger, "not a SQLite database")
    used_ledger.write_bytes(data)
    with Ledger(used_ledger) as ledger:  # the intact bytes are still a good ledger
        assert ledger.remaining == PureDP(0.5)
    foreign = tmp_path / "foreign.db"
    _raw(foreign, "CREATE TABLE something (x)")
    _assert_corrupted(foreign, "missing table")
    directory = tmp_path / "a_directory"
    directory.mkdir()
    _assert_corrupted(directory, "not a regular file")


@pytest.mark.parametrize(
    ("statements", "match"),
    [
        (["UPDATE ledger_entries SET cost_epsilon = '1/1000' WHERE idx = 2"], "entry 2"),
        (["UPDATE ledger_entries SET description = 'harmless' WHERE idx = 0"], "entry 0: hash mismatch"),
        (["UPDATE ledger_entries SET total = '1/100' WHERE idx = 4"], "entry 4"),
        (["DELETE FROM ledger_entries WHERE idx = 2"], "entry 2|contiguous"),
        (["DELETE FROM ledger_entries WHERE idx = 4"], "count"),
        (["DELETE FROM ledger_entries"], "count"),
        (
            [
                "INSERT INTO ledger_entries SELECT 5, time, analyst, description, pid, cost_kind, cost_epsilon,"
                " cost_delta, cost_rho, neighbours, total, hash FROM ledger_entries WHERE idx = 4"
            ],
            "entry 5|count",
        ),
        (["UPDATE ledger_meta SET budget_epsilon = '2/1'"], "genesis"),
        (["UPDATE ledger_meta SET budget_kind = 'ZCDP', budget_rho = '1/1', budget_epsilon = NULL"], "genesis"),
        (["UPDATE ledger_meta SET head = genesis"], "head"),
        (["UPDATE ledger_meta SET entry_count = 3"], "count"),
        (["UPDATE ledger_meta SET entry_count = 0, head = genesis"], "count"),
        (["DROP TABLE ledger_meta"], "missing table"),
        (["DELETE FROM ledger_meta"], "meta row"),
        (["CREATE TRIGGER sneaky AFTER INSERT ON ledger_entries BEGIN SELECT 1; END"], "unexpected"),
        (["UPDATE ledger_meta SET keyed = 1"], "key"),
    ],
)
def test_edited_deleted_or_inserted_rows_are_corrupted(used_ledger: Path, statements: list[str], match: str) -> None:
    _raw(used_ledger, *statements)
    if "keyed = 1" in statements[0]:
        # claiming a key it never had: refused as needing a key, or as a wrong key
        with pytest.raises((InvalidParameterError, LedgerCorruptedError)):
            Ledger(used_ledger)
        _assert_corrupted(used_ledger, "genesis", key=KEY)
        return
    _assert_corrupted(used_ledger, match)


def test_an_open_ledger_notices_tampering_before_the_next_debit(used_ledger: Path, tmp_path: Path) -> None:
    with Ledger(used_ledger) as ledger:
        assert ledger.remaining == PureDP(0.5)
        _raw(used_ledger, "UPDATE ledger_entries SET cost_epsilon = '1/1000', total = '401/1000' WHERE idx = 4")
        with pytest.raises(LedgerCorruptedError, match="entry 4"):
            ledger.reserve(PureDP(0.1))
        with pytest.raises(LedgerCorruptedError):
            _ = ledger.remaining
        with pytest.raises(LedgerCorruptedError):
            ledger.verify()
    assert _row_count(used_ledger) == 5  # nothing was debited on top of a damaged ledger
    other = tmp_path / "other.db"
    with Ledger(other, PureDP(1.0)) as ledger:
        for _ in range(5):
            ledger.reserve(PureDP(0.1))
        # a consistent-looking roll-back of the newest entries, done while the session is open
        _raw(other, "DELETE FROM ledger_entries WHERE idx >= 3", "UPDATE ledger_meta SET entry_count = 3")
        with pytest.raises(LedgerCorruptedError, match="shrank|deleted"):
            ledger.can_afford(PureDP(0.1))
        _raw(other, "UPDATE ledger_meta SET budget_epsilon = '2/1'")
        with pytest.raises(LedgerCorruptedError, match="genesis"):
            ledger.reserve(PureDP(0.1))
    assert _row_count(other) == 3


def test_a_ledger_is_not_carried_across_fork(tmp_path: Path) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("fork")
    context = multiprocessing.get_context("fork")
    for ledger in (Ledger(tmp_path / "ledger.db", PureDP(1.0)), Ledger(budget=PureDP(1.0))):
        results = context.Queue()

        def child(ledger: Ledger = ledger, results: object = results) -> None:
            try:
                ledger.reserve(PureDP(0.5))
                results.put("spent")  # type: ignore[attr-defined]
            except InvalidParameterError as error:
                results.put(str(error))  # type: ignore[attr-defined]

        worker = context.Process(target=child)
        worker.start()
        outcome = results.get(timeout=30)
        worker.join(timeout=30)
        assert "open a new Ledger in this process" in outcome
        assert ledger.remaining == PureDP(1.0)
        ledger.close()


def test_a_keyed_ledger_detects_a_rewrite_by_someone_without_the_key(tmp_path: Path) -> None:
    path, forged = tmp_path / "ledger.db", tmp_path / "forged.db"
    with Ledger(path, PureDP(1.0), key=KEY) as ledger:
        for _ in range(10):
            ledger.reserve(PureDP(0.1))
    with pytest.raises(InvalidParameterError) as refused:
        Ledger(path)  # a keyed ledger needs its key
    assert refused.value.name == "key"
    with pytest.raises(LedgerCorruptedError, match="key is wrong"):
        Ledger(path, key=b"the wrong key, long enough......")
    # Someone without the key rebuilds the file from scratch with dpkit itself, either with a key
    # of their own or unkeyed, refunding most of the spend.
    for attacker_key in (None, b"an attacker's key of 32 bytes..."):
        forged.unlink(missing_ok=True)
        with Ledger(forged, PureDP(1.0), key=attacker_key) as fake:
            fake.reserve(PureDP(0.1))
        os.replace(forged, path)
        with pytest.raises(LedgerCorruptedError):
            Ledger(path, key=KEY)


def test_an_unkeyed_chain_can_be_rebuilt_by_someone_who_can_write_the_file(tmp_path: Path) -> None:
    # The documented limit of the unkeyed chain: it catches damage and naive edits, not a rewrite.
    path, forged = tmp_path / "ledger.db", tmp_path / "forged.db"
    with Ledger(path, PureDP(1.0)) as ledger:
        for _ in range(10):
            ledger.reserve(PureDP(0.1))
    with Ledger(forged, PureDP(1.0)) as fake:
        fake.reserve(PureDP(0.1))
    os.replace(forged, path)
    with Ledger(path) as ledger:
        assert ledger.remaining == PureDP(0.9)


def test_the_key_can_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledger.db"
    monkeypatch.setenv("DPKIT_LEDGER_KEY", KEY.decode())
    with Ledger(path, PureDP(1.0)) as ledger:
        ledger.reserve(PureDP(0.5))
    with Ledger(path, key=KEY) as ledger:
        assert ledger.remaining == PureDP(0.5)
    monkeypatch.delenv("DPKIT_LEDGER_KEY")
    with pytest.raises(InvalidParameterError):
        Ledger(path)
    Ledger(tmp_path / "plain.db", PureDP(1.0)).close()
    monkeypatch.setenv("DPKIT_LEDGER_KEY", KEY.decode())
    with pytest.raises(LedgerCorruptedError, match="unkeyed"):
        Ledger(tmp_path / "plain.db")  # a keyed session refuses a ledger that claims to have no key
    monkeypatch.setenv("DPKIT_LEDGER_KEY", "short")
    with pytest.raises(InvalidParameterError) as refused:
        Ledger(budget=PureDP(1.0))
    assert refused.value.name == "DPKIT_LEDGER_KEY"


# -- 7. what the main file alone holds ------------------------------------------------------------


def _journal_mode(path: Path) -> str:
    raw = sqlite3.connect(path)
    try:
        (mode,) = raw.execute("PRAGMA journal_mode").fetchone()
    finally:
        raw.close()
    return str(mode).lower()


def test_a_debit_is_in_the_main_file_when_reserve_returns_even_with_no_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process killed right after its commit never runs anything more: here nothing after the
    # commit runs either (no checkpoint), and the main file alone, without any sidecar, must
    # already hold every debit. In WAL mode the debits would sit in the -wal only.
    monkeypatch.setattr(Ledger, "_checkpoint", lambda self: None)
    path = tmp_path / "ledger.db"
    with Ledger(path, PureDP(1.0)) as ledger, Ledger(path) as reader:
        for _ in range(3):
            ledger.reserve(PureDP(0.1))
            assert reader.remaining.epsilon < 1.0  # another connection reads between debits
        assert _journal_mode(path) == "delete"
        assert not Path(f"{path}-wal").exists()
        copy = tmp_path / "copy.db"
        copy.write_bytes(path.read_bytes())  # the main file alone, while both are open
    with Ledger(copy) as reopened:
        assert len(reopened.entries()) == 3
        assert reopened.remaining == PureDP(0.7)


def test_a_ledger_made_in_wal_mode_is_moved_to_the_journal_when_opened_alone(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path, PureDP(1.0)) as ledger:
        ledger.reserve(PureDP(0.25))
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA journal_mode = WAL")
    raw.close()
    assert _journal_mode(path) == "wal"  # as an earlier dpkit left it

    holder = sqlite3.connect(path)  # another connection: the switch must wait, and nothing breaks
    holder.execute("SELECT COUNT(*) FROM ledger_entries").fetchone()
    try:
        with Ledger(path) as busy:
            busy.reserve(PureDP(0.25))
            copy = tmp_path / "copy.db"
            copy.write_bytes(path.read_bytes())  # still WAL: the debit was checkpointed into the file
            assert _journal_mode(path) == "wal"
    finally:
        holder.close()
    raw = sqlite3.connect(copy)
    raw.execute("PRAGMA journal_mode = DELETE")
    raw.close()
    with Ledger(copy) as reopened:
        assert reopened.remaining == PureDP(0.5)

    with Ledger(path) as alone:
        assert alone.remaining == PureDP(0.5)
        assert len(alone.entries()) == 2
    assert _journal_mode(path) == "delete"
    assert not Path(f"{path}-wal").exists()
