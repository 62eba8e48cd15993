"""Laplace queries (``epsilon=``) under zCDP and approximate zCDP budgets, and the epsilon > 5 warning.

Before, an ApproxZCDP or ZCDP session refused ``epsilon=`` ("is spent with rho=...") although the
README says such a budget "suits many small Laplace queries: a pure epsilon query is charged
rho = epsilon^2 / 2"; and no engine query warned at epsilon > 5 (the README: "Settings that are
legal but weak (epsilon > 5) warn with dpkit.PrivacyWarning"). Now ``epsilon=`` spends Laplace
noise, charged rho = epsilon^2 / 2 by the ledger (Bun & Steinke 2016, Prop. 1.4); with private keys
under an ApproxZCDP budget the query costs ApproxZCDP(epsilon^2 / 2, delta) (thresholded selection:
outside the delta event the release is the pure epsilon-DP one).
"""

from __future__ import annotations

import json
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpkit
from dpkit import engine as E
from dpkit._errors import BudgetExceededError, InvalidParameterError, PrivacyWarning
from dpkit.noise import InsecureSeededRandom

REGIONS = ["north", "south", "east", "west"]


@pytest.fixture(scope="module")
def people() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    n = 4000
    return pd.DataFrame(
        {
            "person_id": np.arange(n),
            "region": rng.choice(REGIONS, n),
            "income": rng.uniform(0, 1e5, n),
        }
    )


def session(frame: pd.DataFrame, budget: dpkit.guarantees.Guarantee) -> E.Session:
    return E.Session.from_pandas(
        frame, name="people", privacy_unit="person_id", budget=budget, bounds={"income": (0, 1e5)}
    )


def test_public_keys_epsilon_under_approx_zcdp_charges_half_epsilon_squared(people):
    s = session(people, dpkit.ApproxZCDP(0.05, 1e-6))
    query = s.table().group_by("region", keys=REGIONS).agg(n=E.count(), t=E.sum("income"))
    result = query.release(epsilon=0.1, rng=InsecureSeededRandom(0))
    assert result.guarantee == dpkit.PureDP(0.1)
    assert {row["mechanism"] for row in result.budget_split} == {"DiscreteLaplace", "Laplace"}
    assert s.remaining.rho_exact == Fraction(5, 100) - Fraction(1, 10) ** 2 / 2
    assert s.remaining.delta_exact == dpkit.ApproxZCDP(0.05, 1e-6).delta_exact  # no delta for public keys


def test_private_keys_epsilon_under_approx_zcdp_cost_rho_and_delta(people):
    s = session(people, dpkit.ApproxZCDP(0.05, 1e-6))
    query = s.table().group_by("region").agg(n=E.count())
    result = query.release(epsilon=0.2, delta=4e-7, rng=InsecureSeededRandom(1))
    assert result.guarantee == dpkit.ApproxZCDP(0.02, 4e-7)
    assert sorted(result.to_pandas()["region"]) == sorted(REGIONS)  # about 1000 people each
    assert any("partition selection" in row["statistic"] for row in result.budget_split)
    assert s.remaining == dpkit.ApproxZCDP(0.03, 6e-7)


def test_a_hundred_small_laplace_queries_fit_the_readme_budget_exactly(people):
    """The README's figure: 100 queries of epsilon 0.01 cost rho 0.005 in all, (0.43, 1e-6)-DP."""
    s = session(people, dpkit.ApproxZCDP(0.005, 0))
    query = s.table().agg(n=E.count())
    for _ in range(100):
        query.release(epsilon=0.01, rng=InsecureSeededRandom(2))
    assert s.remaining == dpkit.ApproxZCDP(0, 0)
    with pytest.raises(BudgetExceededError):
        query.release(epsilon=0.01)
    assert 0.42 < dpkit.ApproxZCDP(0.005, 0).to_approx(1e-6).epsilon < 0.44


def test_zcdp_budget_takes_epsilon_for_public_keys_and_refuses_delta(people):
    s = session(people, dpkit.ZCDP(0.5))
    query = s.table().group_by("region", keys=REGIONS).agg(n=E.count())
    query.release(epsilon=0.4, rng=InsecureSeededRandom(3))
    assert s.remaining == dpkit.ZCDP(Fraction(1, 2) - Fraction(2, 5) ** 2 / 2)
    private = s.table().group_by("region").agg(n=E.count())
    with pytest.raises(InvalidParameterError) as refused:
        private.release(epsilon=0.1, delta=1e-7)
    assert refused.value.name == "delta"
    assert s.remaining == dpkit.ZCDP(Fraction(1, 2) - Fraction(2, 5) ** 2 / 2)


@pytest.mark.parametrize(
    ("cost", "name"),
    [
        ({"epsilon": 0.1, "rho": 0.01}, "rho"),
        ({"epsilon": 0.1, "mechanism": "gaussian"}, "mechanism"),
        ({"rho": 0.01, "mechanism": "laplace"}, "mechanism"),
        ({"epsilon": 0.0}, "epsilon"),
    ],
)
def test_mixed_costs_under_zcdp_are_refused_by_name_and_spend_nothing(people, cost, name):
    for budget in (dpkit.ZCDP(0.5), dpkit.ApproxZCDP(0.5, 1e-6)):
        s = session(people, budget)
        with pytest.raises(InvalidParameterError) as refused:
            s.table().group_by("region", keys=REGIONS).agg(n=E.count()).release(**cost)
        assert refused.value.name == name
        assert s.remaining == budget


def test_accuracy_targets_work_under_a_zcdp_budget(people):
    s = session(people, dpkit.ZCDP(0.5))
    query = s.table().group_by("region", keys=REGIONS).agg(n=E.count())
    preview = query.preview(accuracy=20, alpha=0.05)
    assert preview.statistics[0]["half_width"] <= 20
    result = query.release(accuracy=20, alpha=0.05, rng=InsecureSeededRandom(4))
    assert result.guarantee == preview.guarantee
    assert s.remaining.rho_exact == Fraction(1, 2) - result.guarantee.epsilon_exact**2 / 2


def test_the_cli_spends_epsilon_from_a_zcdp_ledger(people, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from dpkit.cli import main

    data = tmp_path / "people.parquet"
    people.to_parquet(data)
    ledger = tmp_path / "budget.db"
    args = ["query", str(data), "SELECT region, COUNT(*) AS n FROM people GROUP BY region"]
    args += ["--privacy-unit", "person_id", "--keys", "region=" + ",".join(REGIONS), "--ledger", str(ledger)]
    assert main([*args, "--epsilon", "0.2", "--budget", "rho=0.05", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["guarantee"] == "PureDP(epsilon=0.2)"
    assert main(["budget", "--ledger", str(ledger), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["remaining"]["rho_exact"] == "3/100"  # 0.05 - 0.2^2 / 2


# -- epsilon > 5 warns -----------------------------------------------------------------------------


def _warnings_of(call) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [str(w.message) for w in caught if issubclass(w.category, PrivacyWarning)]


def test_a_weak_query_epsilon_warns_and_an_ordinary_one_does_not(people):
    s = session(people, dpkit.PureDP(1000))
    query = s.table().group_by("region", keys=REGIONS).agg(n=E.count())
    assert _warnings_of(lambda: query.release(epsilon=1.0, rng=InsecureSeededRandom(5))) == []
    assert any("epsilon=50" in text for text in _warnings_of(lambda: query.release(epsilon=50.0)))
    assert any("exceeds 5" in text for text in _warnings_of(lambda: query.preview(epsilon=6.0)))
    # An accuracy target that needs epsilon > 5 warns too (a half-width of 1e4 on a sum of values in
    # [0, 1e5] needs about 30).
    total = s.table().group_by("region", keys=REGIONS).agg(t=E.sum("income"))
    assert any("exceeds 5" in text for text in _warnings_of(lambda: total.release(accuracy=1e4)))
