"""The GDPR illustration, the report, the command-line entry point and the public surface."""

import json
import math

import pytest

import dpkit.risk
from dpkit.risk import CostModel, cli_main, gdpr_example, report


def test_public_surface_matches_all() -> None:
    for name in dpkit.risk.__all__:
        assert hasattr(dpkit.risk, name)
    exported = {name for name in vars(dpkit.risk) if not name.startswith("_")}
    assert exported - {"annotations"} <= set(dpkit.risk.__all__)
    for name in (
        "laplace_confidence",
        "laplace_risk",
        "epsilon_at_risk",
        "dkw_sample_size",
        "CostModel",
        "composition",
    ):
        assert name in dpkit.risk.__all__


def test_gdpr_numbers() -> None:
    numbers = gdpr_example()
    assert [row["epsilon0"] for row in numbers["rows"]] == [0.5, 0.6, 0.7]
    for row in numbers["rows"]:
        assert 0 < row["optimal_epsilon"] < row["epsilon0"]
        assert row["budget_without_risk"] == pytest.approx(550_000 * math.exp(-1 / row["epsilon0"]))
        assert row["budget_with_risk"] < row["budget_without_risk"]
        assert row["budget_with_risk"] == pytest.approx(
            CostModel(550_000.0).expected_budget(row["optimal_epsilon"], row["epsilon0"])
        )
        comp = row["composition_100"]
        assert comp["pld"] <= comp["privacy_at_risk"] < comp["advanced"]


def test_report_writes_the_plot(tmp_path) -> None:  # type: ignore[no-untyped-def]
    numbers = report(tmp_path / "par")
    path = tmp_path / "par_cost.png"
    assert path.exists() and path.stat().st_size > 10_000
    assert numbers["plot"] == str(path)


def test_cli_json_and_text(capsys) -> None:  # type: ignore[no-untyped-def]
    assert cli_main(["--json"]) == 0
    parsed = json.loads(capsys.readouterr().out)
    assert len(parsed["rows"]) == 3
    assert cli_main([]) == 0
    assert "eps*" in capsys.readouterr().out


def test_walkthrough_examples_run() -> None:
    import doctest
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "docs" / "privacy_at_risk.md"
    result = doctest.testfile(str(path), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted >= 3


def test_an_empty_plot_prefix_is_refused() -> None:
    """Found by the risk QA helper: ``dpkit risk --plot ''`` exited 0 and wrote nothing."""
    import pytest

    from dpkit import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="--plot"):
        cli_main(["--plot", ""])
