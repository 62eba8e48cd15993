"""HAVING, ORDER BY, LIMIT and OFFSET: post-processing of the released (noisy) table.

They read no data and cost nothing: a query with them releases exactly the rows of the same query
without them (same seed, same debit), filtered on the noisy values, sorted and sliced. Every
condition and order names result columns, checked (and bound by DuckDB) before the debit; a bad
one spends nothing. A condition that fails on a released value hands the release back.
"""

from __future__ import annotations

import math

import pytest

import dpkit
from dpkit import engine as E
from dpkit.cli import main
from dpkit.datasets import REGIONS, visits
from dpkit.engine._plan import OrderBy, Query, arrange
from dpkit.engine._sql import parse_query
from dpkit.noise import InsecureSeededRandom


def _session(budget: dpkit.guarantees.Guarantee | None = None) -> dpkit.Session:
    return dpkit.Session.from_pandas(
        visits(),
        name="visits",
        privacy_unit="person_id",
        budget=budget or dpkit.ApproxDP(10, 1e-4),
        bounds={"spend": (0, 200)},
    )


# -- the plan -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        ("n DESC", OrderBy("n", descending=True)),
        ("2 DESC", OrderBy("n", descending=True)),
        ("COUNT(*)", OrderBy("n")),
        ("AVG(v.spend) DESC NULLS FIRST", OrderBy("avg_spend", descending=True, nulls_first=True)),
        ("v.region", OrderBy("region")),
        ("1", OrderBy("region")),
        ("n_low", OrderBy("n_low")),
    ],
)
def test_order_by_reads_names_positions_and_select_items(order: str, expected: OrderBy) -> None:
    text = f"SELECT region, COUNT(*) AS n, AVG(spend) FROM visits v GROUP BY region ORDER BY {order} LIMIT 2 OFFSET 1"
    query, _ = parse_query(text, table="visits")
    assert query.order_by == (expected,)
    assert (query.limit, query.offset) == (2, 1)


def test_a_query_without_order_has_none() -> None:
    query, _ = parse_query("SELECT region, COUNT(*) FROM visits GROUP BY region", table="visits")
    assert (query.order_by, query.limit, query.offset) == ((), None, 0)


def test_arrange_sorts_stably_with_nulls_and_nan_where_asked() -> None:
    columns = {"k": ["a", "b", None, "d", "e"], "v": [2.0, 1.0, 2.0, math.nan, 1.0]}

    def rows(*orders: OrderBy, limit: int | None = None, offset: int = 0) -> list[object]:
        return arrange(columns, Query("t", order_by=orders, limit=limit, offset=offset))["k"]

    assert rows() == ["a", "b", None, "d", "e"]
    assert rows(OrderBy("v")) == ["b", "e", "a", None, "d"]  # ties keep their order; NaN last
    assert rows(OrderBy("v", descending=True)) == ["a", None, "b", "e", "d"]  # still stable, NaN last
    assert rows(OrderBy("v", nulls_first=True)) == ["d", "b", "e", "a", None]
    assert rows(OrderBy("k", descending=True)) == ["e", "d", "b", "a", None]
    assert rows(OrderBy("k", nulls_first=True)) == [None, "a", "b", "d", "e"]
    assert rows(OrderBy("v"), OrderBy("k", descending=True)) == ["e", "b", "a", None, "d"]
    assert rows(OrderBy("v"), limit=2) == ["b", "e"]
    assert rows(OrderBy("v"), limit=2, offset=4) == ["d"]
    assert rows(limit=0) == [] and rows(offset=9) == []
    assert arrange({"k": [], "v": []}, Query("t", order_by=(OrderBy("v"),), limit=1)) == {"k": [], "v": []}


# -- a release ----------------------------------------------------------------------------------------


SQL = "SELECT region, COUNT(*) AS n, AVG(spend) AS avg FROM visits GROUP BY region"


@pytest.mark.parametrize("keys", [list(REGIONS), None])
def test_order_and_limit_release_the_same_noisy_rows_sorted_and_sliced(keys: list[str] | None) -> None:
    plain, ordered = _session(), _session()
    base = plain.sql(SQL, keys=keys, epsilon=1, delta=1e-6, rng=InsecureSeededRandom(7)).to_pandas()
    result = ordered.sql(
        f"{SQL} ORDER BY n DESC, region LIMIT 3 OFFSET 1", keys=keys, epsilon=1, delta=1e-6, rng=InsecureSeededRandom(7)
    )
    expected = base.sort_values(["n", "region"], ascending=[False, True], kind="stable").iloc[1:4]
    assert result.to_pandas().reset_index(drop=True).equals(expected.reset_index(drop=True))
    assert len(expected) == 3
    assert ordered.remaining == plain.remaining  # the order and the slice cost nothing


def test_the_builder_orders_and_limits_and_the_ledger_says_so() -> None:
    session = _session(dpkit.PureDP(2))
    query = session.table().group_by("region", keys=list(REGIONS)).agg(n=E.count(), t=E.sum("spend"))
    result = query.order_by("T", descending=True).limit(2).release(epsilon=1, rng=InsecureSeededRandom(3))
    totals = result.columns["t"]
    assert len(totals) == 2 and totals[0] >= totals[1]
    everything = query.release(epsilon=1, rng=InsecureSeededRandom(3)).columns["t"]
    assert list(totals) == sorted(everything, reverse=True)[:2]
    assert session.ledger.entries()[0].description.endswith("; order by t desc; limit 2 offset 0")


def test_a_several_level_quantile_orders_by_one_of_its_columns() -> None:
    session = _session()
    query = session.table().group_by("region", keys=list(REGIONS)).agg(q=E.quantiles("spend", [0.25, 0.75]))
    with pytest.raises(dpkit.InvalidParameterError, match="order_by: got 'q'; must be a result column.*q_p25"):
        query.order_by("q").release(epsilon=1)
    assert session.remaining == dpkit.ApproxDP(10, 1e-4)
    result = query.order_by("q_p75").release(epsilon=1, rng=InsecureSeededRandom(1))
    assert list(result.columns["q_p75"]) == sorted(result.columns["q_p75"])


@pytest.mark.parametrize(
    ("attempt", "match"),
    [
        (lambda s: s.sql(f"{SQL} ORDER BY spend", epsilon=1, delta=1e-6), "order_by: got 'spend'"),
        (lambda s: s.sql(f"{SQL} ORDER BY person_id", epsilon=1, delta=1e-6), "order_by: got 'person_id'"),
        (lambda s: s.table().agg(n=E.count()).order_by("m").release(epsilon=1), "order_by: got 'm'"),
        (lambda s: s.table().agg(n=E.count()).order_by().release(epsilon=1), "columns"),
        (lambda s: s.table().agg(n=E.count()).order_by("").release(epsilon=1), "order_by"),
        (lambda s: s.table().agg(n=E.count()).order_by("n", descending="yes").release(epsilon=1), "descending"),
        (lambda s: s.table().agg(n=E.count()).limit(-1).release(epsilon=1), "count"),
        (lambda s: s.table().agg(n=E.count()).limit(1, offset=1.5).release(epsilon=1), "offset"),
        (lambda s: s.table().agg(n=E.count()).limit(True).release(epsilon=1), "count"),
    ],
)
def test_a_bad_order_or_limit_is_refused_before_the_debit(attempt, match: str) -> None:  # noqa: ANN001
    session = _session()
    with pytest.raises(dpkit.InvalidParameterError, match=match):
        attempt(session)
    assert session.remaining == dpkit.ApproxDP(10, 1e-4) and session.ledger.entries() == ()


def test_the_cli_prints_rows_in_the_asked_order(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    path = tmp_path / "visits.parquet"
    visits().to_parquet(path)
    sql = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region ORDER BY region DESC LIMIT 2"
    keys = "region=" + ",".join(REGIONS)
    assert main(["query", str(path), sql, "--privacy-unit", "person_id", "--epsilon", "1", "--keys", keys]) == 0
    first_words = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]
    released = [word for word in first_words if word in REGIONS]
    assert released == sorted(REGIONS, reverse=True)[:2]


# -- HAVING ------------------------------------------------------------------------------------------


def test_having_keeps_the_noisy_rows_that_pass_then_orders_and_slices_them() -> None:
    plain, filtered = _session(), _session()
    base = plain.sql(SQL, keys=list(REGIONS), epsilon=1, rng=InsecureSeededRandom(11)).to_pandas()
    threshold = float(base["n"].median())
    text = f"{SQL} HAVING COUNT(*) >= {threshold} AND region <> 'West' ORDER BY avg DESC LIMIT 2"
    result = filtered.sql(text, keys=list(REGIONS), epsilon=1, rng=InsecureSeededRandom(11)).to_pandas()
    kept = base[(base["n"] >= threshold) & (base["region"] != "West")]
    expected = kept.sort_values("avg", ascending=False, kind="stable").iloc[:2]
    assert result.reset_index(drop=True).equals(expected.reset_index(drop=True))
    assert 1 <= len(expected) <= 2
    assert filtered.remaining == plain.remaining


def test_the_builder_filters_with_having_and_the_ledger_says_so() -> None:
    session = _session(dpkit.PureDP(2))
    query = session.table().group_by("region", keys=list(REGIONS)).agg(n=E.count())
    everything = query.release(epsilon=1, rng=InsecureSeededRandom(5)).columns
    cut = sorted(everything["n"])[2]
    result = query.having(f"N >= {cut}").having("n_low > 0").release(epsilon=1, rng=InsecureSeededRandom(5))
    assert list(result.columns["n"]) == [n for n in everything["n"] if n >= cut]
    assert session.ledger.entries()[1].description.endswith(f'; having "n" >= {cut} AND "n_low" > 0')


@pytest.mark.parametrize(
    ("text", "error", "match"),
    [
        (f"{SQL} HAVING SUM(spend) > 1", "UnsupportedSQLError", "HAVING.*aggregates of the SELECT list"),
        (f"{SQL} HAVING spend > 1", "InvalidParameterError", "having: got 'spend'; must be a result column"),
        (f"{SQL} HAVING n_low > 'many'", "InvalidParameterError", "having.*cannot be evaluated.*'many'"),
        (f"{SQL} HAVING region > 3", "InvalidParameterError", "having.*cannot be evaluated"),
        (f"{SQL} HAVING no_such_function(n)", "InvalidParameterError", "having.*not allowed in HAVING"),
        (f"{SQL} HAVING n > (SELECT 1)", "UnsupportedSQLError", "subquer"),
    ],
)
def test_a_bad_having_is_refused_before_the_debit(text: str, error: str, match: str) -> None:
    session = _session()
    with pytest.raises(getattr(dpkit.engine, error, dpkit.InvalidParameterError), match=match):
        session.sql(text, keys=list(REGIONS), epsilon=1)
    with pytest.raises(dpkit.InvalidParameterError, match=match):
        session.preview(text, keys=list(REGIONS), epsilon=1)
    assert session.ledger.entries() == ()


def test_a_builder_having_with_an_aggregate_is_refused() -> None:
    session = _session()
    query = session.table().group_by("region", keys=list(REGIONS)).agg(n=E.count())
    with pytest.raises(
        dpkit.InvalidParameterError, match="having.*aggregates and window functions are not allowed in HAVING"
    ):
        query.having("COUNT(*) > 3").release(epsilon=1)
    with pytest.raises(dpkit.InvalidParameterError, match="having"):
        query.having("  ")
    assert session.ledger.entries() == ()


def test_a_having_that_fails_on_a_released_value_hands_the_release_back() -> None:
    session, plain = _session(), _session()
    text = f"{SQL} HAVING CAST(region AS INTEGER) > 3"
    with pytest.raises(dpkit.InvalidParameterError, match="fails on the public keys, before anything is spent"):
        session.sql(text, keys=list(REGIONS), epsilon=1)  # public keys: checked before the debit
    assert session.ledger.entries() == ()
    with pytest.raises(dpkit.PostProcessingError, match="Could not convert string .* to INT32.*debited") as caught:
        session.sql(text, epsilon=1, delta=1e-5, rng=InsecureSeededRandom(2))  # private keys: known once released
    released = plain.sql(SQL, epsilon=1, delta=1e-5, rng=InsecureSeededRandom(2))
    assert caught.value.result.to_pandas().equals(released.to_pandas())
    assert caught.value.result.guarantee == released.guarantee
    assert len(session.ledger.entries()) == 1  # the release happened; its debit is kept
    assert isinstance(caught.value, dpkit.QueryFailedError)


def test_the_cli_prints_the_whole_release_when_having_fails_on_it(
    tmp_path,  # noqa: ANN001
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "visits.parquet"
    visits().to_parquet(path)
    ledger = tmp_path / "budget.db"
    sql = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region HAVING CAST(region AS INTEGER) > 1"
    args = ["query", str(path), sql, "--privacy-unit", "person_id", "--epsilon", "1", "--delta", "1e-6"]
    assert main([*args, "--ledger", str(ledger), "--budget", "epsilon=2,delta=1e-5"]) == 2
    captured = capsys.readouterr()
    assert "HAVING failed on the released table" in captured.err and "whole release follows" in captured.err
    first_words = {line.split()[0] for line in captured.out.splitlines() if line.strip()}
    assert set(REGIONS) <= first_words
    with E.Ledger(ledger) as kept:
        assert kept.remaining == dpkit.ApproxDP(1, 9e-6)


@pytest.mark.parametrize("condition", ["n > length(current_setting('temp_directory'))", "n > length(getenv('HOME'))"])
def test_having_keeps_to_the_filters_allowlist(condition: str) -> None:
    session = _session()
    with pytest.raises(dpkit.InvalidParameterError, match="having.*not allowed in HAVING"):
        session.sql(f"{SQL} HAVING {condition}", keys=list(REGIONS), epsilon=1)
    assert session.ledger.entries() == ()
