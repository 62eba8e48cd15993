"""The dpkit command."""

from dpkit.cli import main


def test_sample_prints_integers(capsys):
    assert main(["sample", "--mechanism", "discrete_laplace", "--scale", "2", "-n", "5"]) == 0
    values = capsys.readouterr().out.split()
    assert len(values) == 5 and all(v.lstrip("-").isdigit() for v in values)


def test_bad_scale_is_a_clear_error(capsys):
    assert main(["sample", "--mechanism", "geometric", "--scale", "-1"]) == 2
    assert "dpkit: --scale: got -1.0" in capsys.readouterr().err
    assert main(["sample", "--mechanism", "discrete_gaussian", "--scale", "nan"]) == 2
    assert "dpkit: --scale: got nan" in capsys.readouterr().err  # (the sampler says 'sigma')


def test_refusals_name_the_option_given(tmp_path, capsys):
    """A bad --budget is named --budget (it was reported as --epsilon or --delta, options the user
    gave correctly or not at all), and a --delta the ledger's budget cannot take is --delta."""
    from dpkit.engine import Ledger
    from dpkit.guarantees import ApproxZCDP

    data = tmp_path / "people.csv"
    data.write_text("pid,region\n1,East\n2,West\n")
    query = ["query", str(data), "SELECT region, COUNT(*) FROM people GROUP BY region", "--privacy-unit", "pid"]
    query += ["--keys", "region=East,West", "--epsilon", "0.1", "--ledger", str(tmp_path / "new.db")]
    for spec, part in [("epsilon=nan", "epsilon"), ("epsilon=1,delta=1", "delta"), ("rho=0", "rho")]:
        assert main([*query, "--budget", spec]) == 2
        assert capsys.readouterr().err.startswith(f"dpkit: --budget: got {spec!r}; its {part} ")
    ledger = tmp_path / "zcdp.db"
    with Ledger(ledger, budget=ApproxZCDP(0.5, 0.5), analyst="qa"):
        pass
    assert main(["budget", "--ledger", str(ledger), "--delta", "0.5"]) == 2
    assert capsys.readouterr().err.startswith("dpkit: --delta: got 0.5")


def test_demo_runs(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "Preview of query 1" in out and out.count("spent ApproxDP(epsilon=0.5") == 3
    assert out.rstrip().endswith("remaining budget: ApproxDP(epsilon=0.5, delta=0.0)")
    # "kiosk" is used by 1 person (<= 5 bounded rows); the channel query keeps a key when its noisy
    # row count (DiscreteLaplace, scale 20) reaches 282: P[5 + Z >= 282] = e^(-277/20) / (1 + e^(-1/20)) = 5.0e-7.
    channels = out.split("3. visits per channel")[1]
    assert "kiosk" not in channels and all(c in channels for c in ("store", "web", "app"))


def test_account_dpsgd_side_by_side(capsys):
    import json

    args = ["account", "dpsgd", "--sampling-rate", str(256 / 60000), "--noise-multiplier", "1.1"]
    assert main([*args, "--steps", "14063", "--delta", "1e-5", "--json"]) == 0
    rows = {row["accountant"]: row for row in json.loads(capsys.readouterr().out)["results"]}
    pld = rows["PLD (pessimistic, certified)"]
    rdp = rows["RDP"]
    assert pld["certified"] and 2.3817 <= pld["epsilon"] <= 2.3817 * 1.001
    assert abs(rdp["epsilon"] - 2.5967) < 1e-3
    assert not rows["GDP / CLT (approximate)"]["certified"]
    assert rows["basic"]["supported"] is False


def test_account_text_and_plot(tmp_path, capsys):
    import pytest

    pytest.importorskip("matplotlib")
    path = tmp_path / "tradeoff.png"
    assert main(["account", "laplace", "--noise-multiplier", "10", "--steps", "100", "--plot", str(path)]) == 0
    out = capsys.readouterr().out
    assert "basic" in out and "PLD (pessimistic, certified)" in out
    assert path.stat().st_size > 1000


def test_account_bad_input(capsys):
    assert main(["account", "dpsgd", "--noise-multiplier", "1.1", "--sampling-rate", "1.5", "--steps", "10"]) == 2
    assert "sampling_probability" in capsys.readouterr().err


def test_risk_subcommand_json(capsys):
    import json

    assert main(["risk", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [row["epsilon0"] for row in rows] == [0.5, 0.6, 0.7]
    assert all(row["budget_with_risk"] < row["budget_without_risk"] for row in rows)


def test_python_dash_m_dpkit_is_the_console_script():
    """``python -m dpkit`` runs the CLI (it was 'No module named dpkit.__main__')."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "dpkit", "sample", "--mechanism", "geometric", "--scale", "2", "-n", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == 3 and all(word.lstrip("-").isdigit() for word in done.stdout.split())
