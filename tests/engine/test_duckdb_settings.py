"""DuckDB's resources, set on the backend: a memory limit, threads, and where spilled rows go.

Spilled intermediate tables hold rows of the private table, so a connection the backend creates
spills into a fresh directory only the current user can read, deleted when the backend is closed.
Every bad setting is refused by name before a connection, a ledger or a row is touched.
``Session.close`` (or ``with``) releases what the session opened, and nothing it was given.
"""

from __future__ import annotations

import gc
import json
import os
import stat
from pathlib import Path

import duckdb
import pytest

import dpkit
from dpkit import engine as E
from dpkit.cli import main
from dpkit.datasets import REGIONS, visits
from dpkit.engine._backends import memory_limit_bytes


def _setting(backend: E.DuckDBBackend, name: str) -> str:
    return backend._connection.execute(f"SELECT current_setting('{name}')").fetchall()[0][0]


@pytest.mark.parametrize(
    ("given", "size"),
    [
        ("150MB", 150_000_000),
        ("150 mb", 150_000_000),
        (" 1.5GB ", 1_500_000_000),
        ("2GiB", 2 * 2**30),
        ("65536KiB", 2**26),
        ("64MB", 64_000_000),
        ("1TB", 10**12),
        (64_000_000, 64_000_000),
        ("64000000B", 64_000_000),
    ],
)
def test_a_memory_limit_reads_decimal_and_binary_units(given: object, size: int) -> None:
    assert memory_limit_bytes(given) == size


@pytest.mark.parametrize(
    "given",
    ["63MB", 63_999_999, "10MB", "0", 0, -5, "-100MB", "150", "150XB", "MB", "1e9B", "abc", 1.5e9, True, None, b"1GB"],
)
def test_a_memory_limit_too_small_or_unreadable_is_refused_by_name(given: object) -> None:
    with pytest.raises(dpkit.InvalidParameterError, match="memory_limit.*at least 64 MB"):
        E.DuckDBBackend(memory_limit=given if given is not None else "none")


@pytest.mark.parametrize("given", [0, -1, 1.5, "2", True])
def test_threads_must_be_a_positive_integer(given: object) -> None:
    with pytest.raises(dpkit.InvalidParameterError, match="threads"):
        E.DuckDBBackend(threads=given)  # type: ignore[arg-type]


def test_a_missing_spill_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(dpkit.InvalidParameterError, match="spill_directory.*existing directory"):
        E.DuckDBBackend(spill_directory=tmp_path / "absent")


def test_the_settings_reach_duckdb_and_the_spill_directory_is_private_and_removed() -> None:
    backend = E.DuckDBBackend(memory_limit="150MB", threads=1)
    assert backend.memory_limit == 150_000_000
    assert _setting(backend, "memory_limit") == "143.0 MiB"  # DuckDB shows binary units
    assert _setting(backend, "threads") == 1
    spill = Path(_setting(backend, "temp_directory"))
    assert spill.is_dir() and spill.name.startswith("dpkit-spill-")
    assert stat.S_IMODE(spill.stat().st_mode) == 0o700  # private rows: owner only
    assert spill != Path.cwd() / ".tmp"  # not DuckDB's default, a folder in the working directory
    backend.close()
    assert not spill.exists()
    with pytest.raises(duckdb.Error):
        backend._connection.execute("SELECT 1")


def test_a_collected_backend_removes_its_spill_directory() -> None:
    backend = E.DuckDBBackend()
    spill = Path(_setting(backend, "temp_directory"))
    assert spill.is_dir()
    del backend
    gc.collect()
    assert not spill.exists()


def test_a_callers_connection_keeps_its_spill_directory_and_stays_open(tmp_path: Path) -> None:
    connection = duckdb.connect()
    before = connection.execute("SELECT current_setting('temp_directory')").fetchall()
    backend = E.DuckDBBackend(connection, memory_limit="1GB")
    assert _setting(backend, "temp_directory") == before[0][0]
    assert _setting(backend, "memory_limit") == "953.6 MiB"
    backend.close()  # the caller's connection is the caller's to close
    assert connection.execute("SELECT 1").fetchall() == [(1,)]
    E.DuckDBBackend(connection, spill_directory=tmp_path)
    assert connection.execute("SELECT current_setting('temp_directory')").fetchall() == [(str(tmp_path),)]


def test_a_session_on_a_memory_limited_backend_gives_the_unlimited_aggregates() -> None:
    from engine_fixtures import exact_aggregates

    def aggregates(backend: object) -> list[tuple[object, ...]]:
        session = dpkit.Session.from_pandas(
            visits(), name="visits", privacy_unit="person_id", budget=dpkit.PureDP(10), backend=backend
        )
        query = session.table().group_by("region", keys=list(REGIONS)).bound(rows_per_group=2)
        query = query.agg(n=E.count(), t=E.sum("spend", bounds=(0, 200)), m=E.median("spend", bounds=(0, 200)))
        _, result = exact_aggregates(session, query, epsilon=1.0)
        return sorted(zip(result.keys, *result.columns.values(), strict=True), key=repr)

    limited = E.DuckDBBackend(memory_limit="64MB", threads=1)
    assert aggregates(limited) == aggregates(None)
    limited.close()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("settings") / "people.parquet"
    visits().to_parquet(path)
    return path


QUERY = ["SELECT region, COUNT(*) FROM people GROUP BY region", "--privacy-unit", "person_id", "--epsilon", "1"]


def test_the_cli_runs_a_query_under_a_memory_limit(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys = "region=" + ",".join(REGIONS)
    assert main(["query", str(data), *QUERY, "--keys", keys, "--memory-limit", "100MB", "--json"]) == 0
    assert {row["region"] for row in json.loads(capsys.readouterr().out)["rows"]} == set(REGIONS)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--memory-limit", "10MB"], "--memory-limit: got '10MB'; must be a size of at least 64 MB"),
        (["--memory-limit", "lots"], "--memory-limit: got 'lots'"),
        (["--memory-limit", "1GB", "--backend", "spark"], "--memory-limit: got '1GB'; applies to --backend duckdb"),
    ],
)
def test_the_cli_refuses_a_bad_memory_limit_before_making_a_ledger(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    ledger = tmp_path / "budget.db"
    assert main(["query", str(data), *QUERY, *extra, "--ledger", str(ledger)]) == 2
    assert message in capsys.readouterr().err
    assert not os.path.lexists(ledger)


# -- Session.close: what a session opened, it releases ---------------------------------------------


def _visits_session(**options: object) -> dpkit.Session:
    return dpkit.Session.from_pandas(visits(), name="visits", privacy_unit="person_id", **options)


def test_closing_a_session_closes_its_ledger_and_duckdb_and_refuses_queries(tmp_path: Path) -> None:
    ledger = tmp_path / "budget.db"
    with _visits_session(budget=dpkit.PureDP(1), ledger=ledger) as session:
        session.sql("SELECT COUNT(*) FROM visits", epsilon=0.25)
        backend = session._backend
        spill = Path(_setting(backend, "temp_directory"))
    assert not spill.exists()
    with pytest.raises(duckdb.Error):
        backend._connection.execute("SELECT 1")
    for attempt in (
        lambda: session.sql("SELECT COUNT(*) FROM visits", epsilon=0.25),
        lambda: session.preview("SELECT COUNT(*) FROM visits", epsilon=0.25),
        lambda: session.table().agg(n=E.count()).release(epsilon=0.25),
        lambda: session.remaining,
    ):
        with pytest.raises(dpkit.InvalidParameterError, match=r"session: got Session\(table='visits', closed\)"):
            attempt()
    assert repr(session) == "Session(table='visits', closed)"
    session.close()  # twice is fine
    with E.Ledger(ledger) as reopened:  # the debit stayed; the refused queries spent nothing
        assert reopened.remaining == dpkit.PureDP(0.75)
        assert len(reopened.entries()) == 1


def test_closing_a_session_leaves_a_ledger_and_a_backend_passed_in_open() -> None:
    ledger = E.Ledger(None, dpkit.PureDP(1))
    backend = E.DuckDBBackend()
    session = _visits_session(ledger=ledger, backend=backend)
    session.close()
    assert ledger.remaining == dpkit.PureDP(1)
    assert backend._connection.execute("SELECT 1").fetchall() == [(1,)]
    again = _visits_session(ledger=ledger, backend=backend)
    again.sql("SELECT COUNT(*) FROM visits", epsilon=0.5)
    assert ledger.remaining == dpkit.PureDP(0.5)
    backend.close()
    ledger.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_that_exits_leaves_its_parents_spill_directory() -> None:
    backend = E.DuckDBBackend()
    spill = Path(_setting(backend, "temp_directory"))
    child = os.fork()
    if child == 0:  # the child runs its exit handlers, as a script that forks and exits would
        try:
            backend._cleanup()  # (what atexit would call)
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    assert spill.is_dir()
    backend.close()
    assert not spill.exists()
