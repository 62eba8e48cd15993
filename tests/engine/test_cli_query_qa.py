"""``dpkit query``: a refused query never creates a new ledger, a new ledger holds exactly the cost the
query spends, and options are read as their help says (findings of a CLI QA round).

Releases use the secure source; the count bound below holds with probability >= 1 - 1e-6: the
count uses DiscreteLaplace with epsilon 5 (scale 0.2), P[|noise| > 5] <= 2 exp(-25) = 2.8e-11.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dpkit.cli import main
from dpkit.engine import Ledger

SQL = "SELECT region, COUNT(*) AS n FROM people GROUP BY region"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cliqa") / "people.parquet"
    regions = ["North", "South", "East,West"]
    pd.DataFrame(
        {
            "person_id": range(300),
            "region": [regions[i % 3] for i in range(300)],
            "income": [float(i) for i in range(300)],
        }
    ).to_parquet(path)
    return path


def _run(*args: str) -> int:
    return main(["query", *args])


def test_a_query_over_the_new_ledgers_budget_creates_no_ledger(data: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "new.db"
    code = _run(
        str(data), SQL, "--keys", "region=North", "--epsilon", "1", "--budget", "epsilon=0.5", "--ledger", str(ledger)
    )
    assert code == 2 and not ledger.exists()
    code = _run(
        str(data), SQL, "--keys", "region=North", "--rho", "0.1", "--budget", "rho=0.01", "--ledger", str(ledger)
    )
    assert code == 2 and not ledger.exists()


def test_a_query_the_backend_refuses_creates_no_ledger_and_preview_refuses_it(data: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "new.db"
    bad = "SELECT region, COUNT(*) AS n FROM people WHERE region GROUP BY region"  # WHERE on text
    assert _run(str(data), bad, "--keys", "region=North", "--epsilon", "1", "--ledger", str(ledger)) == 2
    assert not ledger.exists()
    assert _run(str(data), bad, "--keys", "region=North", "--epsilon", "1", "--preview") == 2


def test_a_new_ledger_holds_exactly_the_cost_spent(data: Path, tmp_path: Path) -> None:
    """With public keys and Laplace noise no delta is spent: the ledger's total has none either."""
    ledger = tmp_path / "exact.db"
    args = ["--privacy-unit", "person_id", "--keys", "region=North", "--epsilon", "1", "--delta", "1e-6"]
    assert _run(str(data), SQL, *args, "--ledger", str(ledger)) == 0
    with Ledger(ledger) as opened:
        assert opened.budget.delta == 0.0 and opened.budget.epsilon == 1.0
        assert opened.remaining.epsilon == 0.0


def test_bounds_given_twice_in_different_case_are_refused(data: Path) -> None:
    sql = "SELECT SUM(income) AS s FROM people"
    assert _run(str(data), sql, "--bounds", "INCOME=0:10000", "--bounds", "income=0:10", "--epsilon", "1") == 2


def test_keys_read_as_a_csv_line(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys = 'region=North, South,"East,West"'
    assert _run(str(data), SQL, "--privacy-unit", "person_id", "--keys", keys, "--epsilon", "5", "--json") == 0
    released = json.loads(capsys.readouterr().out)
    rows = released["rows"]
    assert sorted(row["region"] for row in rows) == ["East,West", "North", "South"]
    for row in rows:
        assert abs(row["n"] - 100) <= 5


def test_an_empty_table_name_is_refused(data: Path) -> None:
    assert _run(str(data), "SELECT COUNT(*) AS n FROM people", "--table", "", "--epsilon", "1") == 2


def test_rho_with_delta_zero_is_a_zcdp_query(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(str(data), "SELECT COUNT(*) AS n FROM people", "--rho", "0.5", "--delta", "0", "--json") == 0
    assert "ZCDP" in json.loads(capsys.readouterr().out)["guarantee"]


def test_refusals_name_the_command_line_option(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(str(data), "SELECT SUM(income) AS s FROM people", "--epsilon", "1") == 2
    assert "--bounds income=LOW:HIGH" in capsys.readouterr().err
    assert _run(str(data), "SELECT COUNT(*) AS n FROM people", "--table", "1x", "--epsilon", "1") == 2
    assert capsys.readouterr().err.startswith("dpkit: --table:")


def test_auto_bounds_from_the_command_line(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT SUM(income) AS s FROM people"
    args = ["--privacy-unit", "person_id", "--bounds", "income=auto", "--epsilon", "1", "--delta", "1e-6", "--json"]
    assert _run(str(data), sql, *args) == 0
    assert "automatic bounds of income" in capsys.readouterr().out


def test_the_header_spells_the_privacy_unit_as_the_schema_and_tiny_alpha_is_not_100(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--privacy-unit", "PERSON_ID", "--keys", "region=North", "--epsilon", "5", "--alpha", "1e-9"]
    assert _run(str(data), SQL, *args) == 0
    out = capsys.readouterr().out
    assert "privacy unit 'person_id'" in out
    assert "99.9999999% intervals" in out


def test_an_unquoted_null_key_is_the_null_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "people.parquet"
    regions = ["North", None, "NULL"]  # a NULL region and a region whose text is NULL
    pd.DataFrame({"person_id": range(300), "region": [regions[i % 3] for i in range(300)]}).to_parquet(path)
    args = ["--privacy-unit", "person_id", "--epsilon", "5", "--json"]
    assert _run(str(path), SQL, "--keys", 'region=North, null,"NULL"', *args) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert sorted(repr(row["region"]) for row in rows) == ["'NULL'", "'North'", "None"]
    for row in rows:
        assert abs(row["n"] - 100) <= 5  # the NULL group holds the 100 rows without a region


@pytest.mark.parametrize("keys", ['region="North', 'region="North"x,South', 'region=No"rth'])
def test_malformed_quotes_in_keys_are_refused(data: Path, keys: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(str(data), SQL, "--privacy-unit", "person_id", "--keys", keys, "--epsilon", "1") == 2
    assert capsys.readouterr().err.startswith("dpkit: --keys:")
