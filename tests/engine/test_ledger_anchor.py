"""The ledger's anchor: a second file with the newest entry count and head hash, so that a ledger
rolled back to an earlier consistent state (which the hash chain alone cannot tell from the real
one) is refused."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpkit import InvalidParameterError, LedgerCorruptedError
from dpkit.cli import main as cli_main
from dpkit.engine import Ledger
from dpkit.guarantees import PureDP

BUDGET = PureDP(1.0)


def _spend(path: Path, anchor: Path | None, times: int) -> None:
    with Ledger(path, BUDGET, anchor=anchor) as ledger:
        for _ in range(times):
            ledger.reserve(PureDP(0.1), description="q")


def _anchor(anchor: Path) -> dict:
    return json.loads(anchor.read_text())


def test_restoring_an_older_copy_is_refused_only_with_an_anchor(tmp_path: Path) -> None:
    path, anchor, saved = tmp_path / "budget.db", tmp_path / "anchor.json", tmp_path / "saved.db"
    _spend(path, anchor, 2)
    shutil.copyfile(path, saved)
    _spend(path, anchor, 5)
    shutil.copyfile(saved, path)  # the rollback: 0.8 left instead of 0.3
    with Ledger(path) as unanchored:
        assert unanchored.remaining == PureDP(0.8)  # what the hash chain alone cannot see
    with pytest.raises(LedgerCorruptedError, match="rolled back: the anchor records 7 entries but the file holds 2"):
        Ledger(path, anchor=anchor)


def test_cutting_the_newest_entries_and_resetting_the_head_is_refused(tmp_path: Path) -> None:
    path, anchor = tmp_path / "budget.db", tmp_path / "anchor.json"
    _spend(path, anchor, 4)
    with sqlite3.connect(path) as connection:
        (head,) = connection.execute("SELECT hash FROM ledger_entries WHERE idx = 1").fetchone()
        connection.execute("DELETE FROM ledger_entries WHERE idx >= 2")
        connection.execute("UPDATE ledger_meta SET head = ?, entry_count = 2", (head,))
    Ledger(path).close()  # a consistent chain of 2 entries
    with pytest.raises(LedgerCorruptedError, match="rolled back"):
        Ledger(path, anchor=anchor)


def test_rolled_back_then_written_again_is_refused(tmp_path: Path) -> None:
    """Same count as the anchor, but a different entry at the anchored index."""
    path, anchor, saved = tmp_path / "budget.db", tmp_path / "anchor.json", tmp_path / "saved.db"
    _spend(path, anchor, 2)
    shutil.copyfile(path, saved)
    _spend(path, anchor, 3)
    shutil.copyfile(saved, path)
    _spend(path, None, 3)  # an unanchored writer brings the rolled-back file back to 5 entries
    with pytest.raises(LedgerCorruptedError, match="entry 4 is not the one the anchor records"):
        Ledger(path, anchor=anchor)


def test_a_replaced_ledger_is_refused(tmp_path: Path) -> None:
    path, anchor = tmp_path / "budget.db", tmp_path / "anchor.json"
    _spend(path, anchor, 1)
    path.unlink()
    _spend(path, None, 1)  # a fresh ledger with the same budget under the same name
    with pytest.raises(LedgerCorruptedError, match="belongs to another ledger"):
        Ledger(path, anchor=anchor)


def test_a_deleted_ledger_is_not_recreated_under_its_anchor(tmp_path: Path) -> None:
    path, anchor = tmp_path / "budget.db", tmp_path / "anchor.json"
    _spend(path, anchor, 9)
    path.unlink()
    with pytest.raises(LedgerCorruptedError, match="does not exist but its anchor"):
        Ledger(path, BUDGET, anchor=anchor)
    assert not path.exists()


def test_an_open_anchored_ledger_refuses_to_debit_a_rollback_made_behind_its_back(tmp_path: Path) -> None:
    """Opened at 2 entries; others spend to 5; the file is restored to a copy with 3. The open
    ledger's own checks pass (3 >= 2, its entries unchanged): only the anchor shows the rollback."""
    path, anchor, saved = tmp_path / "budget.db", tmp_path / "anchor.json", tmp_path / "saved.db"
    _spend(path, anchor, 2)
    with Ledger(path, anchor=anchor) as opened, Ledger(path) as unanchored:
        _spend(path, anchor, 1)
        shutil.copyfile(path, saved)
        _spend(path, anchor, 2)
        shutil.copyfile(saved, path)
        assert unanchored.remaining == PureDP(0.7)  # the rollback looks consistent to the chain
        with pytest.raises(
            LedgerCorruptedError, match="rolled back: the anchor records 5 entries but the file holds 3"
        ):
            opened.reserve(PureDP(0.1))
    with Ledger(path) as after:
        assert len(after.entries()) == 3  # the refused debit recorded nothing


def test_the_anchor_follows_every_debit_and_a_lagging_anchor_is_accepted(tmp_path: Path) -> None:
    path, anchor = tmp_path / "budget.db", tmp_path / "anchor.json"
    with Ledger(path, BUDGET, anchor=anchor) as ledger:
        record = _anchor(anchor)
        assert record["count"] == 0 and record["head"] == record["genesis"]  # made on first use
        lagging = None
        for expected in range(1, 4):
            ledger.reserve(PureDP(0.1))
            record = _anchor(anchor)
            assert record["count"] == expected
            if expected == 2:
                lagging = anchor.read_text()
    # As if a crash hit between the third commit and its anchor update: one debit behind is fine.
    anchor.write_text(lagging)
    with Ledger(path, anchor=anchor) as reopened:
        assert _anchor(anchor)["count"] == 3  # brought up to date on open
        reopened.reserve(PureDP(0.1))
    assert _anchor(anchor)["count"] == 4


def test_an_existing_ledger_gets_an_anchor_on_first_use(tmp_path: Path) -> None:
    path, anchor = tmp_path / "budget.db", tmp_path / "anchor.json"
    _spend(path, None, 3)
    with Ledger(path, anchor=anchor) as ledger:
        assert _anchor(anchor)["count"] == 3 and ledger.remaining == PureDP(0.7)


@pytest.mark.parametrize(
    "text",
    ["", "{", "[]", '{"format": "other"}', "\xff"],
)
def test_a_malformed_anchor_is_refused_naming_it(tmp_path: Path, text: str) -> None:
    path, anchor = tmp_path / "budget.db", tmp_path / "anchor.json"
    _spend(path, anchor, 1)
    record = _anchor(anchor)
    anchor.write_bytes(text.encode("latin-1"))
    with pytest.raises(LedgerCorruptedError, match="anchor"):
        Ledger(path, anchor=anchor)
    for field, value in (("count", -1), ("count", True), ("head", "x"), ("version", 2)):
        anchor.write_text(json.dumps({**record, field: value}))
        with pytest.raises(LedgerCorruptedError, match="not a dpkit ledger anchor"):
            Ledger(path, anchor=anchor)


def test_anchor_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="anchor: .*needs a ledger file"):
        Ledger(None, BUDGET, anchor=tmp_path / "a.json")
    with pytest.raises(InvalidParameterError, match="different file from the ledger"):
        Ledger(tmp_path / "b.db", BUDGET, anchor=tmp_path / "b.db")
    with pytest.raises(InvalidParameterError, match="must exist"):
        Ledger(tmp_path / "c.db", BUDGET, anchor=tmp_path / "missing" / "a.json")
    with pytest.raises(InvalidParameterError, match="file path"):
        Ledger(tmp_path / "d.db", BUDGET, anchor=3)  # type: ignore[arg-type]


def _spend_until_refused(path: str, anchor: str, barrier: object, results: object) -> None:
    from dpkit import BudgetExceededError

    granted = 0
    with Ledger(path, anchor=anchor) as ledger:
        barrier.wait()  # type: ignore[attr-defined]
        for _ in range(10):
            try:
                ledger.reserve(PureDP(0.1))
                granted += 1
            except BudgetExceededError:
                pass
    results.put(granted)  # type: ignore[attr-defined]


def test_eight_processes_spending_with_one_anchor_leave_it_at_the_final_count(tmp_path: Path) -> None:
    path, anchor = tmp_path / "budget.db", tmp_path / "anchor.json"
    Ledger(path, BUDGET, anchor=anchor).close()
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(8), context.Queue()
    workers = [
        context.Process(target=_spend_until_refused, args=(str(path), str(anchor), barrier, results)) for _ in range(8)
    ]
    for worker in workers:
        worker.start()
    granted = sum(results.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert granted == 10
    with Ledger(path, anchor=anchor) as ledger:
        assert len(ledger.entries()) == 10 and _anchor(anchor)["count"] == 10


def test_cli_anchor_for_query_and_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "people.csv"
    data.write_text("person_id,income\n" + "".join(f"{i},{i}\n" for i in range(50)))
    ledger, anchor, saved = tmp_path / "budget.db", tmp_path / "anchor.json", tmp_path / "saved.db"
    query = ["query", str(data), "SELECT COUNT(*) FROM people", "--privacy-unit", "person_id"]
    options = ["--ledger", str(ledger), "--anchor", str(anchor), "--budget", "epsilon=1"]
    assert cli_main([*query, "--epsilon", "0.25", *options]) == 0
    shutil.copyfile(ledger, saved)
    assert cli_main([*query, "--epsilon", "0.25", *options]) == 0
    capsys.readouterr()
    assert _anchor(anchor)["count"] == 2
    shutil.copyfile(saved, ledger)
    assert cli_main([*query, "--epsilon", "0.25", *options]) != 0
    assert "rolled back" in capsys.readouterr().err
    assert cli_main(["budget", "--ledger", str(ledger), "--anchor", str(anchor)]) != 0
    assert "rolled back" in capsys.readouterr().err
    assert cli_main(["budget", "--ledger", str(ledger)]) == 0  # without the anchor, the rollback goes unseen


_ANCHORED_CHILD = """
import sys
from dpkit.engine import Ledger
from dpkit.guarantees import PureDP

with Ledger(sys.argv[1], anchor=sys.argv[2]) as ledger:
    print("ready", flush=True)
    while True:
        ledger.reserve(PureDP(0.001))
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_kill_nine_between_commit_and_anchor_update_leaves_a_usable_anchored_ledger(tmp_path: Path) -> None:
    path, anchor, script = tmp_path / "budget.db", tmp_path / "anchor.json", tmp_path / "child.py"
    script.write_text(_ANCHORED_CHILD)
    Ledger(path, PureDP(1000.0), anchor=anchor).close()
    env = {k: v for k, v in os.environ.items() if k != "DPKIT_LEDGER_KEY"}
    rng = random.Random(20261124)
    for _ in range(12):
        child = subprocess.Popen([sys.executable, str(script), str(path), str(anchor)], stdout=subprocess.PIPE, env=env)
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.0, 0.2))
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
        with Ledger(path, anchor=anchor) as ledger:  # never a false "rolled back"
            count = len(ledger.entries())
            assert _anchor(anchor)["count"] == count  # brought up to date on open
    assert count >= 12
