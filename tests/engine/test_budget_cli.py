"""``dpkit budget --ledger FILE``: a persistent ledger's budget, spending and debits, as text or JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpkit.cli import main
from dpkit.engine import Ledger
from dpkit.guarantees import ZCDP, ApproxDP, ApproxZCDP, PureDP


@pytest.fixture
def ledger_file(tmp_path: Path) -> Path:
    path = tmp_path / "budget.db"
    with Ledger(path, ApproxDP(1.0, 1e-6), analyst="alice") as ledger:
        ledger.reserve(PureDP(0.25), description="SELECT COUNT(*)\nFROM visits")
        ledger.reserve(ApproxDP(1 / 3, 1e-7), description="SELECT AVG(age) FROM people", analyst="bob")
    return path


def test_text_report_lists_budget_spent_remaining_and_every_entry(
    ledger_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["budget", "--ledger", str(ledger_file)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "budget:    ApproxDP(epsilon=1.0, delta=1e-06)" in lines
    assert "spent:     ApproxDP(epsilon=0.5833333333333333, delta=1e-07)" in lines
    assert "remaining: ApproxDP(epsilon=0.4166666666666667, delta=9e-07)" in lines
    assert "entries:   2" in lines
    first, second = lines[-2].split(), lines[-1].split()
    assert first[0] == "0" and first[2] == "alice" and "PureDP(epsilon=0.25)" in lines[-2]
    assert lines[-2].endswith("SELECT COUNT(*) FROM visits")  # one line per entry
    assert second[0] == "1" and second[2] == "bob" and lines[-1].endswith("SELECT AVG(age) FROM people")
    assert first[1].endswith("+00:00")


def test_json_report_carries_exact_values(ledger_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", "--ledger", str(ledger_file), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["budget"] == {
        "kind": "ApproxDP",
        "neighbours": "add_remove",
        "epsilon": 1.0,
        "epsilon_exact": "1/1",
        "delta": 1e-06,
        "delta_exact": "1/1000000",
    }
    assert report["spent"]["epsilon_exact"] == "5833333333333333/10000000000000000"
    assert report["remaining"]["delta_exact"] == "9/10000000"
    assert [entry["index"] for entry in report["entries"]] == [0, 1]
    first = report["entries"][0]
    assert first["analyst"] == "alice" and first["description"] == "SELECT COUNT(*)\nFROM visits"
    assert first["cost"] == {"kind": "PureDP", "neighbours": "add_remove", "epsilon": 0.25, "epsilon_exact": "1/4"}
    assert isinstance(first["pid"], int) and first["time"].endswith("+00:00")


def test_an_empty_zcdp_ledger_reports_nothing_spent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "zcdp.db"
    Ledger(path, ZCDP(0.5)).close()
    assert main(["budget", "--ledger", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["budget"]["rho_exact"] == "1/2"
    assert report["spent"]["kind"] == "ApproxZCDP" and report["spent"]["rho"] == 0.0
    assert report["remaining"]["kind"] == "ZCDP" and report["entries"] == []


def test_an_approximate_zcdp_budget_and_spend_are_shown_as_epsilon_delta_at_the_given_delta(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The budget's conversion is what the filter certifies; the spend's holds for queries fixed in advance."""
    path = tmp_path / "azcdp.db"
    with Ledger(path, ApproxZCDP(0.05, 1e-6)) as ledger:
        ledger.reserve(ApproxZCDP(0.01, 1e-7), description="SELECT region, COUNT(*) FROM t GROUP BY region")
    certified, spent = ApproxZCDP(0.05, 1e-6).to_approx(1e-6), ApproxZCDP(0.01, 1e-7).to_approx(1e-6)
    assert main(["budget", "--ledger", str(path), "--delta", "1e-6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "spent:     ApproxZCDP(rho=0.01, delta=1e-07)" in lines
    budget_line = f"           as (epsilon, delta)-DP: ApproxDP(epsilon={certified.epsilon!r}, delta=2e-06)"
    assert budget_line + " (whatever the queries)" in lines
    spent_line = f"           as (epsilon, delta)-DP: ApproxDP(epsilon={spent.epsilon!r}, delta=1.1e-06)"
    assert spent_line + " (if not chosen adaptively)" in lines
    assert main(["budget", "--ledger", str(path), "--delta", "1e-6", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["budget_as_approx_dp"]["epsilon"] == certified.epsilon
    assert report["spent_as_approx_dp_if_not_adaptive"]["delta_exact"] == "11/10000000"
    assert main(["budget", "--ledger", str(path), "--json"]) == 0
    assert "budget_as_approx_dp" not in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("delta", ["0", "1", "nan", "-1e-6"])
def test_a_bad_conversion_delta_is_refused_by_name(
    ledger_file: Path, delta: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["budget", "--ledger", str(ledger_file), f"--delta={delta}"]) == 2
    assert "--delta" in capsys.readouterr().err


def test_an_epsilon_delta_spend_is_not_converted(ledger_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", "--ledger", str(ledger_file), "--delta", "1e-6"]) == 2
    error = capsys.readouterr().err
    assert "--delta" in error and "zCDP" in error


def test_a_missing_ledger_is_an_error_and_is_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nothing.db"
    assert main(["budget", "--ledger", str(path)]) == 2
    assert "--ledger" in capsys.readouterr().err
    assert not path.exists()


def test_a_damaged_ledger_is_an_error_not_a_full_budget(ledger_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger_file.write_bytes(ledger_file.read_bytes()[:1000])
    assert main(["budget", "--ledger", str(ledger_file), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("dpkit: ledger")


def test_a_keyed_ledger_reads_its_key_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, key = tmp_path / "keyed.db", b"k" * 32
    with Ledger(path, PureDP(2.0), key=key) as ledger:
        ledger.reserve(PureDP(1 / 3))
    assert main(["budget", "--ledger", str(path)]) == 2
    assert "DPKIT_LEDGER_KEY" in capsys.readouterr().err
    monkeypatch.setenv("DPKIT_LEDGER_KEY", key.decode())
    assert main(["budget", "--ledger", str(path)]) == 0
    out = capsys.readouterr().out
    assert "remaining: PureDP(epsilon=1.6666666666666667)" in out


def test_terminal_escapes_in_a_query_are_shown_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A query's text is stored as given; printed raw, an escape sequence could hide or forge report lines."""
    path = tmp_path / "escapes.db"
    with Ledger(path, PureDP(1.0), analyst="alice") as ledger:
        ledger.reserve(PureDP(0.5), description="SELECT 1\x1b[2K\x1b[1A  forged line\x07")
    assert main(["budget", "--ledger", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert out.splitlines()[-1].endswith("SELECT 1\\x1b[2K\\x1b[1A forged line\\x07")
