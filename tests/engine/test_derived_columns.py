"""Derived columns: aggregates and group keys over row-level expressions, and COUNT(column).

A derived column (``QueryBuilder.with_column``, or an expression in SQL) must give exactly what
the same column stored in the table gives: the same bounded aggregates, the same groups kept per
person, at the same cost. ``count(column)`` must count the rows where the column is not NULL,
with a count's sensitivity. Bad derived columns are refused by name before anything is spent.
"""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import duckdb
import numpy as np
import pandas as pd
import pytest
from engine_fixtures import exact_aggregates

import dpkit
from dpkit import engine as E
from dpkit._errors import InvalidParameterError
from dpkit.engine import UnsupportedSQLError
from dpkit.engine._compiler import compile_query, nonnull_column, parse_request

BAND = "CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'mid' ELSE 'old' END"


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    rows = 3000
    person = rng.integers(0, 500, rows)
    age = rng.integers(18, 90, rows).astype(np.int64)
    income = rng.lognormal(10, 1, rows)
    income[::11] = np.nan  # NaN is a value: COUNT(income) counts it (SQL), sums read it as the fill
    code = np.array([str(a % 7) for a in age], dtype=object)
    code[::13] = "x"  # does not parse as an integer: CAST(code AS INTEGER) fails on these rows only
    region = np.array(["north", "south", "east", "west"], dtype=object)[rng.integers(0, 4, rows)]
    frame = pd.DataFrame({"pid": person, "age": age, "income": income, "code": code, "region": region})
    frame["income"] = frame["income"].astype("Float64")
    frame.loc[frame.index % 17 == 0, "income"] = pd.NA  # NULL: not counted by COUNT(income)
    return frame


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return _frame()


def _session(frame: pd.DataFrame, privacy_unit: str | None = "pid") -> E.Session:
    return E.Session.from_pandas(frame, name="people", privacy_unit=privacy_unit, budget=dpkit.ApproxDP(100, 1e-3))


def _materialised(frame: pd.DataFrame, name: str, expression: str) -> pd.DataFrame:
    """``frame`` with column ``name`` = ``expression`` computed by plain DuckDB (TRY: NULL where it fails)."""
    connection = duckdb.connect()
    connection.register("people", frame)
    out = connection.execute(f"SELECT *, TRY({expression}) AS {name} FROM people").df()
    connection.close()
    return out


def _rows(result) -> list:
    return sorted(zip(result.keys, *result.columns.values(), strict=True), key=repr)


@pytest.mark.parametrize(
    ("groups", "keys", "rows_per_group", "groups_per_person"),
    [
        ((), None, 3, 1),  # ungrouped
        (("band",), ["young", "mid", "old"], 3, 1),  # public keys; people in several bands keep one
        (("band",), None, 2, 2),  # private keys, two groups per person
        (("band", "region"), None, 2, 3),  # a derived key beside a stored one
    ],
)
def test_a_derived_column_gives_what_the_stored_column_gives(frame, groups, keys, rows_per_group, groups_per_person):
    derived = _session(frame)
    stored = _session(_materialised(_materialised(frame, "band", BAND), "spend", "income * 1.5"))

    def build(session: E.Session, with_columns: bool) -> E.QueryBuilder:
        query = session.table()
        if with_columns:
            query = query.with_column("band", BAND).with_column("spend", "income * 1.5")
        if groups:
            query = query.group_by(*groups, keys=keys)
        return query.bound(rows_per_group=rows_per_group, groups_per_person=groups_per_person).agg(
            n=E.count(), t=E.sum("spend", bounds=(0, 2e5)), m=E.mean("spend", bounds=(0, 2e5))
        )

    cost = {"epsilon": 1.0, "delta": 1e-6}
    first_compiled, first = exact_aggregates(derived, build(derived, True), **cost)
    second_compiled, second = exact_aggregates(stored, build(stored, False), **cost)
    assert _rows(first) == _rows(second)
    assert sum(first.columns["rows"]) > 0
    assert first_compiled.cost == second_compiled.cost


def test_count_of_a_column_counts_its_rows_that_are_not_null(frame):
    """Row-level privacy (nothing bounded): the exact aggregates are plain SQL's COUNT(*), COUNT(col)."""
    session = _session(frame, privacy_unit=None)
    query = (
        session.table()
        .with_column("band", BAND)
        .with_column("parsed", "CAST(code AS INTEGER)")
        .group_by("band", keys=["young", "mid", "old"])
        .agg(n=E.count(), with_income=E.count("income"), parsed=E.count("parsed"), p=E.sum("parsed", bounds=(0, 6)))
    )
    compiled, result = exact_aggregates(session, query)
    connection = duckdb.connect()
    connection.register("people", frame)
    expected = {
        band: (n, with_income, parsed, total)
        for band, n, with_income, parsed, total in connection.execute(
            f"SELECT {BAND} AS band, COUNT(*), COUNT(income), COUNT(TRY_CAST(code AS INTEGER)), "
            "SUM(TRY_CAST(code AS INTEGER)) FROM people GROUP BY band"
        ).fetchall()
    }
    connection.close()
    moments = {s.column: f"m{i}" for i, s in enumerate(s for s in compiled.statistics if s.kind == "sum")}
    unit = {column: 2.0**-30 * (8 if column == "parsed" else 1) for column in moments}  # bound 6 -> 2^3 2^-30
    for i, (band,) in enumerate(result.keys):
        n, with_income, parsed, total = expected[band]
        assert result.columns["rows"][i] == n
        assert result.columns[moments[nonnull_column("income")]][i] * unit[nonnull_column("income")] == with_income
        assert result.columns[moments[nonnull_column("parsed")]][i] * unit[nonnull_column("parsed")] == parsed
        assert result.columns[moments["parsed"]][i] * unit["parsed"] == total
    # The NULLs and the failed casts are really there: each count is below the row count.
    assert all(expected[b][1] < expected[b][0] and expected[b][2] < expected[b][0] for b in expected)


@pytest.mark.parametrize(
    ("keys", "groups_per_person"),
    [(None, 2), (["low", "high"], 1)],  # private keys; public keys
)
def test_derived_columns_read_earlier_ones_and_filters_read_them(frame, keys, groups_per_person):
    """A chain of derived columns (each reading the one before) and a filter on one give what the
    same columns stored in the table give; a failing first step is NULL in the next, as stored."""
    steps = [
        ("parsed", "CAST(code AS INTEGER)"),  # fails on the rows with code 'x'
        ("score", "COALESCE(parsed, -1) * 10 + age"),
        ("level", "CASE WHEN score > 70 THEN 'high' ELSE 'low' END"),
    ]
    derived = _session(frame)
    table = frame
    for name, expression in steps:
        table = _materialised(table, name, expression)
    stored = _session(table)

    def build(session: E.Session, with_columns: bool) -> E.QueryBuilder:
        query = session.table()
        if with_columns:
            for name, expression in steps:
                query = query.with_column(name, expression)
        return (
            query.where("score >= 20")
            .group_by("level", keys=keys)
            .bound(rows_per_group=3, groups_per_person=groups_per_person)
            .agg(n=E.count(), t=E.sum("score", bounds=(0, 160)), c=E.count("parsed"))
        )

    cost = {"epsilon": 1.0, "delta": 1e-6}
    first_compiled, first = exact_aggregates(derived, build(derived, True), **cost)
    second_compiled, second = exact_aggregates(stored, build(stored, False), **cost)
    assert _rows(first) == _rows(second)
    assert len(first.keys) == 2 and min(first.columns["rows"]) > 0
    assert first_compiled.cost == second_compiled.cost
    # The filter and the failed casts are really there: each leaves out rows.
    connection = duckdb.connect()
    connection.register("people", table)
    kept, parsed, everything = connection.execute(
        "SELECT COUNT(*) FILTER (WHERE score >= 20), COUNT(parsed), COUNT(*) FROM people"
    ).fetchone()
    connection.close()
    assert kept < everything and parsed < everything


def test_sql_filters_on_a_group_key_named_in_select(frame):
    """WHERE may read a group key's alias (DuckDB does); it filters the rows of that key."""
    session = _session(frame)
    text = f"SELECT {BAND} AS band, COUNT(*) AS n FROM people WHERE band <> 'old' GROUP BY band"
    query, _ = E.parse_query(text, table="people", privacy_unit="pid", keys=["young", "mid", "old"])
    assert query.where == ("band <> 'old'",)
    _, exact = exact_aggregates(
        session, SimpleNamespace(plan=dataclasses.replace(query, contribution=E.Contribution(3, 1)))
    )
    rows = {key[0]: n for key, n in zip(exact.keys, exact.columns["rows"], strict=True)}
    assert rows.get("old", 0) == 0 and rows["young"] > 0 and rows["mid"] > 0


def test_session_bounds_may_name_derived_columns(frame):
    """Bounds given to the session for a derived column serve the queries that define it; the
    others are not refused for them."""
    session = E.Session.from_pandas(
        frame, name="people", privacy_unit="pid", budget=dpkit.PureDP(10), bounds={"spend": (0, 1e5)}
    )
    with_spend = session.table().with_column("spend", "income * 1.5").agg(t=E.sum("spend"))
    assert with_spend.preview(epsilon=1.0) is not None
    session.table().agg(n=E.count()).release(epsilon=1.0)
    with pytest.raises(InvalidParameterError, match="name no column of this query: spend"):
        session.table().agg(t=E.sum("income")).release(epsilon=1.0)
    assert session.remaining == dpkit.PureDP(9)


def test_count_of_a_column_has_the_sensitivity_of_a_count(frame):
    session = _session(frame)
    query = session.table().group_by("region").bound(rows_per_group=4, groups_per_person=2).agg(c=E.count("income"))
    compiled = compile_query(query.plan, session._context(), parse_request(session.budget, epsilon=1.0, delta=1e-6))
    (statistic,) = [s for s in compiled.statistics if s.kind == "sum"]
    l1, _ = compiled.sensitivity(statistic, compiled.bounds[statistic.column])
    assert 8 <= l1 <= 8 * (1 + 1e-6)  # k * g rows, each adding at most 1 (plus the fixed-point grid's term)
    released = query.release(epsilon=1.0, delta=1e-6, rng=dpkit.noise.InsecureSeededRandom(1)).columns["c"]
    assert all(float(v).is_integer() and v >= 0 for v in released)


SQL_FORMS = [
    f"SELECT {BAND} AS band, COUNT(*) AS n, SUM(income * 1.5) AS spend FROM people GROUP BY band",
    f"SELECT {BAND} AS band, COUNT(*) AS n, SUM(income * 1.5) AS spend FROM people GROUP BY 1",
    f"SELECT {BAND} AS band, COUNT(*) AS n, SUM(p.income * 1.5) AS spend FROM people p GROUP BY {BAND}",
]


@pytest.mark.parametrize("text", SQL_FORMS)
def test_sql_expressions_become_the_builders_derived_columns(frame, text):
    query, columns = E.parse_query(text, table="people", privacy_unit="pid")
    expected = (
        E.QueryBuilder(None, "people")
        .with_column("band", BAND)
        .with_column("spend", "income * 1.5")
        .group_by("band")
        .agg(n=E.count(), spend=E.sum("spend"))
        .plan
    )
    assert columns == ("band", "n", "spend")
    assert {d.name: d.expression for d in query.derived} == {d.name: d.expression for d in expected.derived}
    assert (query.group_by, query.aggregates) == (expected.group_by, expected.aggregates)


def test_sql_count_forms(frame):
    query, columns = E.parse_query(
        "SELECT COUNT(income), COUNT(CASE WHEN age > 60 THEN 1 END) AS old FROM people", table="people"
    )
    assert columns == ("count_income", "old")
    assert query.aggregates == (("count_income", E.count("income")), ("old", E.count("old")))
    assert [(d.name, d.expression) for d in query.derived] == [("old", "CASE WHEN age > 60 THEN 1 END")]


def test_sql_release_with_derived_columns_and_their_bounds(frame):
    session = _session(frame)
    result = session.sql(
        f"SELECT {BAND} AS band, COUNT(income) AS c, AVG(income / 1000) AS k FROM people GROUP BY band",
        epsilon=1.0,
        delta=1e-6,
        keys=["young", "mid", "old"],
        bounds={"k": (0, 100)},
        rows_per_group=3,
    )
    assert sorted(result.columns["band"]) == ["mid", "old", "young"]
    assert all(0 <= v <= 100 for v in result.columns["k"])
    assert "count of rows where income IS NOT NULL" in str(result)


def _refused(session, build, match: str, error=InvalidParameterError) -> None:
    before = session.remaining
    with pytest.raises(error, match=match):
        build(session)
    assert session.remaining == before


def _sum_of(session, column: str, *steps: tuple[str, str], bounds=(0, 1)):
    """Release the sum of ``column`` after adding the derived columns ``steps`` (name, expression) in order."""
    query = session.table()
    for name, expression in steps:
        query = query.with_column(name, expression)
    return query.agg(t=E.sum(column, bounds=bounds)).release(epsilon=1)


REFUSALS = {
    "unnamed expression in SQL": (
        lambda s: s.sql("SELECT SUM(income * 2) FROM people", epsilon=1, bounds={"income": (0, 1)}),
        "needs a name",
    ),
    "name of a stored column": (
        lambda s: _sum_of(s, "age", ("age", "age + 1"), bounds=(0, 99)),
        "also a column of the tables",
    ),
    "a derived column reading one defined after it": (
        lambda s: _sum_of(s, "b", ("b", "a * 2"), ("a", "age + 1")),
        "not 'a', defined after it",
    ),
    "a stored column's name given to a later derived column": (
        lambda s: _sum_of(s, "a", ("a", "age + 1"), ("age", "a * 2")),
        "also a column of the tables",
    ),
    "a derived column reading itself": (lambda s: _sum_of(s, "a", ("a", "a + 1")), "not itself"),
    "date arithmetic on a derived date": (
        lambda s: (
            s.table()
            .with_column("day", "DATE '2020-01-01'")
            .with_column("later", "day + 1")
            .group_by("later")
            .agg(n=E.count())
            .release(epsilon=1, delta=1e-6)
        ),
        "date and time arithmetic",
    ),
    "SQL filtering on an aggregate's name": (
        lambda s: s.sql("SELECT SUM(age * 2) AS a2 FROM people WHERE a2 > 3", epsilon=1),
        "names an aggregate of this SELECT",
    ),
    "a function outside the allowlist": (
        lambda s: s.table().with_column("a", "getenv('HOME')"),
        "not allowed in a derived column",
    ),
    "an aggregate": (lambda s: s.table().with_column("a", "SUM(age)"), "aggregates and window functions"),
    "a type both engines do not share": (
        lambda s: s.table().with_column("a", "CAST(code AS BLOB)").group_by("a").agg(n=E.count()).release(epsilon=1),
        "BLOB",
    ),
    "an expression that does not bind": (
        lambda s: s.table().with_column("a", "region - 1").agg(t=E.sum("a", bounds=(0, 1))).release(epsilon=1),
        "do not bind",
    ),
    "a derived column without bounds": (
        lambda s: s.table().with_column("a", "age * 2").agg(t=E.sum("a")).release(epsilon=1),
        "needs clamping bounds",
    ),
    "a sum of text": (
        lambda s: s.table().with_column("a", "upper(region)").agg(t=E.sum("a", bounds=(0, 1))).release(epsilon=1),
        "needs a numeric column",
    ),
    "a name given twice": (
        lambda s: s.table().with_column("a", "age").with_column("A", "age + 1"),
        "exists",
    ),
    "SQL grouping by an unnamed expression": (
        lambda s: s.sql("SELECT COUNT(*) FROM people GROUP BY age % 3", epsilon=1),
        "GROUP BY name",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_bad_derived_columns_are_refused_by_name_before_any_spend(frame, case):
    build, match = REFUSALS[case]
    _refused(_session(frame), build, match)


def test_sql_refusals_are_unsupported_sql_errors(frame):
    _refused(
        _session(frame),
        lambda s: s.sql("SELECT COUNT(*) FROM people GROUP BY age % 3", epsilon=1),
        "GROUP BY",
        UnsupportedSQLError,
    )


def test_count_distinct_takes_no_column_and_counts_take_no_bounds():
    with pytest.raises(InvalidParameterError, match="takes no column"):
        E.Aggregate("count_distinct", "region")
    with pytest.raises(InvalidParameterError, match="only numeric aggregates take bounds"):
        E.Aggregate("count", bounds=(0, 1))
    with pytest.raises(InvalidParameterError, match="column"):
        E.count("")


def test_a_failing_expression_nulls_its_rows_and_the_release_goes_on(frame):
    session = _session(frame)
    result = (
        session.table()
        .with_column("parsed", "CAST(code AS INTEGER) * 1000000000000000000")  # overflows for code >= 10: none
        .with_column("huge", "age * 1000000000000000000")  # BIGINT overflow on every row with age >= 10
        .agg(c=E.count("parsed"), h=E.count("huge"))
        .bound(rows_per_group=2)
        .release(epsilon=5.0, rng=dpkit.noise.InsecureSeededRandom(2))
    )
    assert result.columns["h"][0] <= result.columns["h_high"][0] and result.columns["h_low"][0] <= 5


def test_preview_prices_a_derived_column_as_the_stored_one(frame):
    derived = _session(frame).table().with_column("spend", "income * 1.5").agg(t=E.sum("spend", bounds=(0, 1e5)))
    stored_session = _session(_materialised(frame, "spend", "income * 1.5"))
    stored = stored_session.table().agg(t=E.sum("spend", bounds=(0, 1e5)))
    first, second = derived.preview(epsilon=1.0), stored.preview(epsilon=1.0)
    assert first.guarantee == second.guarantee
    assert first.statistics == second.statistics


def test_describe_names_the_derived_columns():
    plan = E.QueryBuilder(None, "people").with_column("band", BAND).agg(n=E.count()).plan
    assert f"with band = {BAND}" in plan.describe()


def test_automatic_bounds_of_a_derived_column(frame):
    result = (
        _session(frame)
        .table()
        .with_column("spend", "income * 1.5")
        .bound(rows_per_group=3)
        .agg(m=E.mean("spend"))
        .release(epsilon=2.0, bounds={"spend": "auto"}, rng=dpkit.noise.InsecureSeededRandom(3))
    )
    low, high = result.bounds["spend"]
    assert low < high and any("automatic bounds of spend" in row["statistic"] for row in result.budget_split)


def test_the_cli_takes_public_keys_and_bounds_for_derived_columns(tmp_path, capsys):
    from dpkit.cli import main
    from dpkit.datasets import visits

    data = tmp_path / "visits.parquet"
    visits().to_parquet(data)
    sql = "SELECT age % 3 AS m, COUNT(spend) AS n, SUM(spend * 1.2) AS t FROM visits GROUP BY m"
    options = ["--privacy-unit", "person_id", "--bounds", "t=0:240", "--epsilon", "1", "--json"]
    assert main(["query", str(data), sql, *options, "--keys", "m=0,1,2"]) == 0
    released = json.loads(capsys.readouterr().out)
    assert [row["m"] for row in released["rows"]] == [0, 1, 2]  # typed as the derived column (BIGINT)
    assert main(["query", str(data), sql, *options, "--keys", "m=0,x"]) == 2
    assert "values of 'm' (BIGINT) must be integers" in capsys.readouterr().err


def test_only_a_count_of_a_column_is_labelled_as_a_count(frame):
    """A derived column whose name ends like count(column)'s 0/1 column is summed as itself."""
    session = _session(frame)
    query = session.table().with_column("age IS NOT NULL", "age * 2").agg(t=E.sum("age IS NOT NULL", bounds=(0, 200)))
    labels = [s["statistic"] for s in query.preview(epsilon=1.0).statistics]
    assert labels == ["sum of age IS NOT NULL"]
    labels = [s["statistic"] for s in session.table().agg(c=E.count("age")).preview(epsilon=1.0).statistics]
    assert labels == ["count of rows where age IS NOT NULL"]
