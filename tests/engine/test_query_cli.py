"""``dpkit query DATA "SQL"``: one private query from the command line, text or JSON, with a ledger.

The releases here use the secure source (no seed: the command has none). Statistical bounds
hold with probability >= 1 - 1e-6 per test: the counts use DiscreteLaplace with epsilon >= 1/3
and sensitivity 1 (scale <= 3), so P[|noise| > 60] <= 2 exp(-60 / 3) = 4.1e-9 per region, and
five regions give <= 2.1e-8.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpkit.cli import main
from dpkit.datasets import REGIONS, visits

SQL = "SELECT region, COUNT(*), AVG(income) FROM people GROUP BY region"
ISSUE_ARGS = ["--privacy-unit", "person_id", "--bounds", "income=0:200000", "--epsilon", "1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("query") / "people.parquet"
    visits().to_parquet(path)
    return path


def _persons_per_region() -> dict[str, int]:
    table = visits()
    return {str(k): int(v) for k, v in table.groupby("region")["person_id"].nunique().items()}


def test_the_issues_command_with_public_keys_prints_a_table_and_debits_the_ledger(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = tmp_path / "budget.db"
    keys = "region=" + ",".join(REGIONS)
    assert main(["query", str(data), SQL, *ISSUE_ARGS, "--keys", keys, "--ledger", str(ledger)]) == 0
    captured = capsys.readouterr()
    assert "created ledger" in captured.err and "PureDP(epsilon=1.0)" in captured.err
    lines = captured.out.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["region", "count"])
    assert header.split() == [
        "region",
        "count",
        "count_low",
        "count_high",
        "avg_income",
        "avg_income_low",
        "avg_income_high",
    ]
    truth = _persons_per_region()  # rows_per_group defaults to 1: COUNT(*) counts people
    rows = {line.split()[0]: line.split() for line in lines if line.split() and line.split()[0] in REGIONS}
    assert set(rows) == set(REGIONS)
    for region, cells in rows.items():
        count, low, high = (float(c.replace(",", "")) for c in cells[1:4])
        assert low <= count <= high and abs(count - truth[region]) <= 60
    assert "remaining budget: PureDP" not in captured.out  # a pure budget fully spent shows zero
    assert main(["budget", "--ledger", str(ledger), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["entries"]) == 1 and "GROUP BY region" in report["entries"][0]["description"]
    # The ledger now holds exactly epsilon 1: a second query is refused, and spends nothing.
    assert main(["query", str(data), SQL, *ISSUE_ARGS, "--keys", keys, "--ledger", str(ledger)]) == 2
    assert "budget" in capsys.readouterr().err.lower()
    assert main(["budget", "--ledger", str(ledger), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["entries"]) == 1


def test_private_keys_json_output(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["query", str(data), SQL, *ISSUE_ARGS, "--delta", "1e-6", "--json", "--progress", "always"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["guarantee"] == "ApproxDP(epsilon=1.0, delta=1e-06)"
    assert report["rows_per_group"] == 1 and report["groups_per_person"] == 1
    assert report["bounds"] == {"income": [0.0, 200000.0]}
    truth = _persons_per_region()
    # Every region has >= 480 people, far above the selection threshold (< 60): all are released
    # unless the noise exceeds 400, probability < 1e-50.
    assert sorted(row["region"] for row in report["rows"]) == sorted(REGIONS)
    for row in report["rows"]:
        assert row["count_low"] <= row["count"] <= row["count_high"]
        assert abs(row["count"] - truth[row["region"]]) <= 60
        assert 0 <= row["avg_income_low"] <= row["avg_income"] <= row["avg_income_high"] <= 200_000
    shares = {s["statistic"]: s for s in report["budget_split"]}
    assert any("partition selection" in name for name in shares)


def test_an_approximate_zcdp_ledger_spends_rho_and_the_selection_delta(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--budget rho=R,delta=D`` makes an ApproxZCDP ledger; ``--rho`` with ``--delta`` spends it, and
    the whole delta of a private-keys query goes to key selection (no per-query conversion)."""
    ledger = tmp_path / "budget.db"
    args = ["query", str(data), SQL, "--privacy-unit", "person_id", "--bounds", "income=0:200000"]
    spend = ["--rho", "0.02", "--delta", "4e-7", "--ledger", str(ledger), "--json"]
    assert main([*args, *spend, "--budget", "rho=0.05,delta=1e-6"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["guarantee"] == "ApproxZCDP(rho=0.02, delta=4e-07)"
    assert any("partition selection" in s["statistic"] and s["delta"] == 4e-7 for s in report["budget_split"])
    assert sorted(row["region"] for row in report["rows"]) == sorted(REGIONS)  # >= 480 people each
    assert main([*args, *spend]) == 0
    capsys.readouterr()
    assert main([*args, *spend]) == 2  # rho 0.06 > 0.05: refused, nothing spent
    assert "budget" in capsys.readouterr().err.lower()
    assert main(["budget", "--ledger", str(ledger), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["entries"]) == 2


def test_a_refused_query_leaves_no_new_ledger_and_says_what_to_add(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = tmp_path / "new.db"
    # Private keys under a pure budget: refused before anything is created or read.
    assert main(["query", str(data), SQL, *ISSUE_ARGS, "--ledger", str(ledger)]) == 2
    err = capsys.readouterr().err
    assert "delta" in err and "--delta 1e-6" in err and "--keys" in err
    assert not ledger.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--bounds", "income=0-200000"], "--bounds"),
        (["--bounds", "income=low:200000"], "must be a number"),
        (["--keys", "region"], "--keys"),
        (["--keys", "nowhere=a,b"], "is not a column"),
        (["--budget", "eps=1"], "--budget"),
    ],
)
def test_bad_arguments_are_typed_errors_naming_the_option(
    data: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["query", str(data), SQL, *ISSUE_ARGS, "--delta", "1e-6", *extra]) == 2
    assert message in capsys.readouterr().err


def test_data_file_must_exist_and_be_parquet_or_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", str(tmp_path / "missing.parquet"), SQL, *ISSUE_ARGS]) == 2
    assert "DATA" in capsys.readouterr().err
    other = tmp_path / "people.xlsx"
    other.write_text("x")
    assert main(["query", str(other), SQL, *ISSUE_ARGS]) == 2
    assert "Parquet" in capsys.readouterr().err


def test_csv_with_table_name_and_preview_spends_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "visits_2026.csv"
    visits(300).to_csv(path, index=False)
    ledger = tmp_path / "budget.db"
    sql = "SELECT channel, COUNT(*) AS n FROM v GROUP BY channel"
    common = ["query", str(path), sql, "--table", "v", "--privacy-unit", "person_id", "--ledger", str(ledger)]
    assert main([*common, "--budget", "epsilon=2", "--epsilon", "1", "--keys", "channel=store,web", "--preview"]) == 0
    out = capsys.readouterr().out
    assert "cost PureDP(epsilon=1.0)" in out and "fits the remaining budget" in out
    assert not ledger.exists()  # a preview creates no ledger; the release below does, with --budget
    release = [*common, "--budget", "epsilon=2", "--epsilon", "1", "--keys", "channel=store,web"]
    assert main([*release, "--rows-per-group", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["channel"] for row in report["rows"]] == ["store", "web"]
    assert report["rows_per_group"] == 3 and report["remaining"] == "PureDP(epsilon=1.0)"


def test_a_preview_never_creates_a_ledger_file(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "new.db"
    assert main(["query", str(data), SQL, *ISSUE_ARGS, "--delta", "1e-6", "--preview", "--ledger", str(ledger)]) == 0
    assert "cost" in capsys.readouterr().out.lower() and not ledger.exists()
    # ... so a later run can still choose the ledger's total budget
    args = [
        "query",
        str(data),
        SQL,
        *ISSUE_ARGS,
        "--delta",
        "1e-6",
        "--ledger",
        str(ledger),
        "--budget",
        "epsilon=5,delta=1e-5",
    ]
    assert main(args) == 0
    assert "remaining budget: ApproxDP(epsilon=4.0" in capsys.readouterr().out
