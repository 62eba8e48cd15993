"""Findings of an engine QA round: refusals come before any debit and say what the user wrote.

- HAVING: a condition that is not BOOLEAN (``HAVING region``, ``HAVING n - 752``, an operand of
  AND / OR / NOT / CASE WHEN) is refused before the debit (DuckDB cast it to BOOLEAN row by row:
  'North' failed after the debit, and ``n - 752`` dropped the groups whose noisy count was 752); so
  is a condition that fails on a public key. One that fails on a private key raises
  PostProcessingError carrying the whole release.
- A group column renamed in SELECT (``SELECT region AS r``) is grouped by under its new name,
  whether GROUP BY names the alias, the column or the position, on DuckDB and Spark.
- A refused function is named as the SQL writes it (``random()``), never as sqlglot's class.
- ``keys=`` / ``rows_per_group=`` given to ``release`` with a built query show the value and the
  builder step that takes it; ``dpkit query`` names ``--types`` and ``--ledger``.
- Builder steps: a second ``group_by`` and an aggregate name given twice are refused; ``bound``
  keeps the limits it is not given; ``session.table`` matches the table name without case.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

import dpkit
from dpkit import engine as E
from dpkit.cli import main
from dpkit.datasets import REGIONS, visits
from dpkit.engine._sql import UnsupportedSQLError
from dpkit.noise import InsecureSeededRandom

SQL = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return visits()


@pytest.fixture
def session(frame: pd.DataFrame) -> E.Session:
    return E.Session.from_pandas(
        frame,
        name="visits",
        privacy_unit="person_id",
        budget=dpkit.ApproxDP(100.0, 1e-3),
        bounds={"spend": (0, 100)},
    )


# --- 1. HAVING is checked, to the type of every condition, before the debit -----------------------


@pytest.mark.parametrize(
    ("having", "part", "kind"),
    [
        ("region", "region", "VARCHAR"),
        ("n - 752", "n - 752", "DOUBLE"),
        ("n > 1 AND region", "region", "VARCHAR"),
        ("NOT region", "region", "VARCHAR"),
        ("CASE WHEN region THEN TRUE END", "region", "VARCHAR"),
        ("n > 500 OR n_low", "n_low", "DOUBLE"),
        ("IF(n, TRUE, FALSE)", "n", "DOUBLE"),
        ("COUNT(*)", "n", "DOUBLE"),  # the released count itself
    ],
)
@pytest.mark.parametrize("keys", ["public", "private"])
def test_a_having_condition_that_is_not_boolean_is_refused_before_the_debit(
    session: E.Session, having: str, part: str, kind: str, keys: str
) -> None:
    before = session.remaining
    cost = {"keys": list(REGIONS), "epsilon": 1.0} if keys == "public" else {"epsilon": 1.0, "delta": 1e-5}
    with pytest.raises(dpkit.InvalidParameterError, match="having") as caught:
        session.sql(f"{SQL} HAVING {having}", **cost)
    assert f"the condition {part} is {kind}, not BOOLEAN" in str(caught.value)
    assert session.remaining == before
    with pytest.raises(dpkit.InvalidParameterError, match="not BOOLEAN"):
        session.preview(f"{SQL} HAVING {having}", **cost)


def test_a_builder_having_that_is_not_boolean_is_refused_before_the_debit(session: E.Session) -> None:
    before = session.remaining
    query = session.table().group_by("region", keys=list(REGIONS)).agg(n=E.count()).having("n")
    with pytest.raises(dpkit.InvalidParameterError, match="the condition n is DOUBLE, not BOOLEAN"):
        query.release(epsilon=1.0)
    assert session.remaining == before


@pytest.mark.parametrize(
    "having",
    [
        "n > 0",
        "region = 'North' OR n > 1e9",
        "CASE region WHEN 'North' THEN TRUE ELSE FALSE END",
        "NOT (n < 0)",
        "NULL",
    ],
)
def test_boolean_having_conditions_still_run(session: E.Session, having: str) -> None:
    result = session.sql(f"{SQL} HAVING {having}", keys=list(REGIONS), epsilon=1.0)
    assert set(result.columns["region"]) <= set(REGIONS)


def test_having_failing_on_a_public_key_is_refused_before_the_debit(session: E.Session) -> None:
    before = session.remaining
    for having in ("CAST(region AS INTEGER) > 0", "region = 5"):
        with pytest.raises(dpkit.InvalidParameterError, match="fails on the public keys, before anything is spent"):
            session.sql(f"{SQL} HAVING {having}", keys=list(REGIONS), epsilon=1.0)
    assert session.remaining == before


def test_having_failing_on_a_private_key_hands_back_the_whole_release(session: E.Session) -> None:
    """The keys are known only once released: the failure comes after the debit, and the release is
    in the error (nothing spent is lost), as the README documents."""
    before = session.remaining
    with pytest.raises(dpkit.PostProcessingError) as caught:
        session.sql(f"{SQL} HAVING CAST(region AS INTEGER) > 0", epsilon=1.0, delta=1e-5)
    result = caught.value.result
    assert sorted(result.columns["region"]) == sorted(REGIONS)  # >= 480 people each: all selected
    assert result.guarantee == dpkit.ApproxDP(1.0, 1e-5)
    assert session.remaining.epsilon == pytest.approx(before.epsilon - 1.0)


# --- 2. renaming a group column ---------------------------------------------------------------------


RENAMED = [
    "SELECT region AS r, COUNT(*) AS n FROM visits GROUP BY r",
    "SELECT region AS r, COUNT(*) AS n FROM visits GROUP BY region",
    "SELECT region AS r, COUNT(*) AS n FROM visits GROUP BY 1",
    "SELECT v.region AS r, COUNT(*) AS n FROM visits AS v GROUP BY v.region",
]


@pytest.mark.parametrize("sql", RENAMED)
@pytest.mark.parametrize("keys", [list(REGIONS), {"r": list(REGIONS)}, {"region": list(REGIONS)}])
def test_a_renamed_group_column_is_released_under_its_new_name(session: E.Session, sql: str, keys: object) -> None:
    renamed = session.sql(sql, keys=keys, epsilon=1.0, rng=InsecureSeededRandom(5))
    plain = session.sql(SQL, keys=list(REGIONS), epsilon=1.0, rng=InsecureSeededRandom(5))
    assert list(renamed.columns) == ["r", "n", "n_low", "n_high"]
    assert renamed.group_types == {"r": "VARCHAR"}
    assert renamed.columns["r"] == plain.columns["region"]
    assert renamed.columns["n"] == plain.columns["n"]
    assert list(renamed.to_pandas().columns) == ["r", "n", "n_low", "n_high"]


def test_a_renamed_group_column_with_private_keys_having_and_order(session: E.Session) -> None:
    sql = (
        "SELECT region AS r, COUNT(*) AS n FROM visits GROUP BY region "
        "HAVING region <> 'North' AND r <> 'South' ORDER BY region DESC"
    )
    result = session.sql(sql, epsilon=1.0, delta=1e-5)
    assert result.columns["r"] == sorted(set(REGIONS) - {"North", "South"}, reverse=True)


def test_a_renamed_group_column_reads_the_column_in_where(session: E.Session) -> None:
    sql = "SELECT region AS r, COUNT(*) AS n FROM visits WHERE r = 'North' GROUP BY r"
    result = session.sql(sql, epsilon=1.0, delta=1e-5)
    assert result.columns["r"] == ["North"]


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT region, region AS r, COUNT(*) AS n FROM visits GROUP BY region",
            "the group column 'region' is released as 'r' already",
        ),
        (
            "SELECT region AS a, region AS b, COUNT(*) AS n FROM visits GROUP BY a",
            "the group column 'region' is released as 'a' already",
        ),
        ("SELECT person_id AS p, COUNT(*) AS n FROM visits GROUP BY p", "privacy unit"),
        ("SELECT person_id AS p, COUNT(*) AS n FROM visits GROUP BY person_id", "privacy unit"),
        ("SELECT region AS r, COUNT(*) AS n FROM visits GROUP BY channel", "neither aggregated nor in GROUP BY"),
    ],
)
def test_renamings_that_stay_refused(session: E.Session, sql: str, message: str) -> None:
    with pytest.raises(UnsupportedSQLError, match=message):
        session.sql(sql, keys=list(REGIONS), epsilon=1.0)


def test_keys_may_not_name_a_renamed_column_twice(session: E.Session) -> None:
    sql = "SELECT region AS r, COUNT(*) AS n FROM visits GROUP BY region"
    with pytest.raises(dpkit.InvalidParameterError, match="names the group column 'r' twice"):
        session.sql(sql, keys={"region": ["North"], "r": ["South"]}, epsilon=1.0)


def test_a_renamed_group_column_runs_alike_on_spark(frame: pd.DataFrame) -> None:
    """The rename is a derived column, computed by both engines: the same noiseless aggregates as
    the query grouped by the column itself, on DuckDB and on Spark."""
    pytest.importorskip("pyspark")
    from engine_fixtures import exact_releases

    options = {"name": "visits", "privacy_unit": "person_id", "budget": dpkit.ApproxDP(100.0, 1e-3)}
    queries = {
        "public": ("SELECT region AS r, channel, COUNT(*) AS n FROM visits GROUP BY region, 2", True),
        "private": ("SELECT channel AS c, region AS r, COUNT(*) AS n FROM visits GROUP BY 1, r", False),
    }
    plain = {
        "public": "SELECT region, channel, COUNT(*) AS n FROM visits GROUP BY region, channel",
        "private": "SELECT channel, region, COUNT(*) AS n FROM visits GROUP BY channel, region",
    }
    channels = sorted(frame["channel"].dropna().unique())
    answers = []
    for backend in ("duckdb", "spark"):
        session = E.Session.from_pandas(frame, backend=backend, **options)
        with session:
            for name, (sql, public) in queries.items():
                keys = {"region": list(REGIONS), "channel": channels} if public else None
                cost = {"epsilon": 1.0} if public else {"epsilon": 1.0, "delta": 1e-5}

                renamed = exact_releases(session, _Planned(session._parse(sql, keys, 2, 2)), **cost)
                unrenamed = exact_releases(session, _Planned(session._parse(plain[name], keys, 2, 2)), **cost)
                assert renamed == unrenamed
                answers.append(renamed)
    assert answers[:2] == answers[2:]


@dataclasses.dataclass
class _Planned:
    plan: object


# --- 3. refusals name the user's SQL, not sqlglot's classes -------------------------------------------


@pytest.mark.parametrize(
    ("condition", "shown", "hidden"),
    [
        ("random() > 0.5", "the function random()", "Rand "),
        ("regexp_matches(region, 'N')", "the function regexp_matches()", "RegexpLike"),
        ("isnan(spend)", "the function isnan()", "IsNan"),
        ("isinf(spend)", "the function isinf()", "IsInf"),
        ("current_date > DATE '2020-01-01'", "the function current_date", "CurrentDate"),
        ("lpad(region, 3, 'x') = 'a'", "the function lpad()", "Pad "),
        ("make_date(2020, 1, 1) IS NULL", "the function make_date()", "DateFromParts"),
        ("to_timestamp(age) IS NULL", "the function to_timestamp()", "UnixToTime"),
        ("chr(age) = 'a'", "the function chr()", "Chr "),
        ("(age << 2) > 3", "the expression age << 2", "BitwiseLeftShift"),
        ("md5(region) = 'a'", "the function md5()", "MD5 "),
    ],
)
def test_a_refused_function_is_named_as_written(session: E.Session, condition: str, shown: str, hidden: str) -> None:
    with pytest.raises(UnsupportedSQLError) as caught:
        session.sql(f"SELECT COUNT(*) AS n FROM visits WHERE {condition}", epsilon=1.0)
    assert shown in str(caught.value) and hidden not in str(caught.value)
    with pytest.raises(dpkit.InvalidParameterError) as built:
        session.table().where(condition).agg(n=E.count()).preview(epsilon=1.0)
    assert shown in str(built.value) and hidden not in str(built.value)


def test_a_refused_function_in_having_is_named_as_written(session: E.Session) -> None:
    with pytest.raises(dpkit.InvalidParameterError, match=r"the function random\(\) is not allowed in HAVING"):
        session.sql(f"{SQL} HAVING random() > 0.5", keys=list(REGIONS), epsilon=1.0)


def test_isnan_and_isinf_say_what_to_write_instead_and_that_works() -> None:
    """isnan / isinf stay refused (Spark's isnan(NULL) is false, and Spark has no isinf); the
    comparisons the message gives are TRUE, FALSE and NULL where they would be, on both engines."""
    import pyarrow as pa
    from engine_fixtures import exact_aggregates

    spend = [1.0, float("nan"), float("inf"), -float("inf"), None, 2.0, float("nan")]
    data = pa.table({"pid": pa.array(range(len(spend)), pa.int64()), "spend": pa.array(spend, pa.float64())})
    with pytest.raises(dpkit.InvalidParameterError, match=r"x = CAST\('NaN' AS DOUBLE\)"):
        E.Session.from_arrow(data, privacy_unit="pid", budget=dpkit.PureDP(1)).sql(
            "SELECT COUNT(*) FROM data WHERE isnan(spend)", epsilon=1
        )
    conditions = {
        "spend = CAST('NaN' AS DOUBLE)": {True: 2, False: 4, None: 1},
        "spend IN (CAST('Infinity' AS DOUBLE), CAST('-Infinity' AS DOUBLE))": {True: 2, False: 4, None: 1},
    }
    backends = ["duckdb"]
    try:
        import pyspark  # noqa: F401

        backends.append("spark")
    except ImportError:
        pass
    for backend in backends:
        session = E.Session.from_arrow(data, privacy_unit="pid", budget=dpkit.PureDP(1e6), backend=backend)
        with session:
            for condition, expected in conditions.items():
                query = session.table().with_column("t", condition).group_by("t", keys=[True, False, None])
                _, result = exact_aggregates(session, query.agg(n=E.count()))
                counts = {key[0]: rows for key, rows in zip(result.keys, result.columns["rows"], strict=True)}
                assert counts == expected, (backend, condition)


# --- 4. arguments of SQL text given with a built query -------------------------------------------------


@pytest.mark.parametrize(
    ("argument", "value", "step"),
    [
        ("keys", ["North"], ".group_by(..., keys=[...])"),
        ("rows_per_group", 3, ".bound(rows_per_group=...)"),
        ("groups_per_person", 2, ".bound(groups_per_person=...)"),
    ],
)
def test_sql_arguments_with_a_built_query_show_the_value_and_the_builder_step(
    session: E.Session, argument: str, value: object, step: str
) -> None:
    before = session.remaining
    query = session.table().group_by("region").agg(n=E.count())
    with pytest.raises(dpkit.InvalidParameterError) as caught:
        session.release(query, epsilon=1.0, delta=1e-5, **{argument: value})
    assert caught.value.name == argument and caught.value.value == value
    assert step in str(caught.value)
    with pytest.raises(dpkit.InvalidParameterError, match="the Query: "):
        session.release(query.plan, epsilon=1.0, delta=1e-5, **{argument: value})
    assert session.remaining == before


def test_an_unknown_argument_shows_its_value(session: E.Session) -> None:
    query = session.table().agg(n=E.count())
    with pytest.raises(dpkit.InvalidParameterError, match="epsilom: got 1.0; unknown argument"):
        session.release(query, epsilom=1.0)
    result = session.release(query, keys=None, rows_per_group=None, epsilon=1.0)  # None: not given
    assert list(result.columns) == ["n", "n_low", "n_high"]


# --- 5. dpkit query names its options ----------------------------------------------------------------


@pytest.fixture(scope="module")
def csv_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("qa_refusals") / "people.csv"
    pd.DataFrame({"pid": range(50), "region": ["a", "b"] * 25, "income": [1.0] * 50}).to_csv(path, index=False)
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--types", "pid=BIGINT"], "dpkit: --types: got 'region, income'"),
        (
            ["--types", "pid=BIGINTX", "--types", "region=VARCHAR", "--types", "income=DOUBLE"],
            "dpkit: --types pid: got 'BIGINTX'",
        ),
        (["--ledger", "/nonexistent/dir/x.db"], "dpkit: --ledger: got '/nonexistent/dir/x.db'"),
        (["--ledger", "/nonexistent/dir/x.db", "--budget", "epsilon=3"], "dpkit: --ledger: got"),
    ],
)
def test_cli_refusals_name_the_option(
    csv_file: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["query", str(csv_file), "SELECT COUNT(*) FROM people", "--privacy-unit", "pid", "--epsilon", "1"]
    assert main([*args, *extra]) == 2
    assert message in capsys.readouterr().err


def test_cli_anchor_refusal_names_the_option(
    csv_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["query", str(csv_file), "SELECT COUNT(*) FROM people", "--privacy-unit", "pid", "--epsilon", "1"]
    ledger = tmp_path / "l.db"
    assert main([*args, "--ledger", str(ledger), "--budget", "epsilon=3", "--anchor", "/nonexistent/dir/a"]) == 2
    assert "dpkit: --anchor: got '/nonexistent/dir/a'" in capsys.readouterr().err


def test_session_ledger_refusals_name_the_sessions_arguments(frame: pd.DataFrame, tmp_path: Path) -> None:
    with pytest.raises(dpkit.InvalidParameterError) as caught:
        E.Session.from_pandas(frame, budget=dpkit.PureDP(1), ledger="/nonexistent/dir/x.db")
    assert caught.value.name == "ledger"
    with pytest.raises(dpkit.InvalidParameterError) as anchored:
        E.Session.from_pandas(
            frame, budget=dpkit.PureDP(1), ledger=tmp_path / "l.db", ledger_anchor="/nonexistent/dir/a"
        )
    assert anchored.value.name == "ledger_anchor"


# --- 6. builder steps given twice -----------------------------------------------------------------------


def test_a_second_group_by_is_refused(session: E.Session) -> None:
    grouped = session.table().group_by("region", keys=list(REGIONS))
    with pytest.raises(dpkit.InvalidParameterError, match="grouped by region already") as caught:
        grouped.group_by("channel")
    assert caught.value.name == "group_by"
    with pytest.raises(dpkit.InvalidParameterError, match="grouped by region already"):
        grouped.histogram("age", [0, 50, 100])
    both = session.table().group_by("region", "channel", keys={"region": ["North"], "channel": ["web"]})
    assert both.plan.group_by == ("region", "channel") and both.plan.keys == (("North", "web"),)


@pytest.mark.parametrize("second", ["n", "N"])
def test_an_aggregate_name_given_twice_is_refused(session: E.Session, second: str) -> None:
    counted = session.table().agg(n=E.count())
    with pytest.raises(dpkit.InvalidParameterError, match="names an aggregate already named 'n'"):
        counted.agg(**{second: E.sum("spend")})
    added = counted.agg(total=E.sum("spend"))
    assert [name for name, _ in added.plan.aggregates] == ["n", "total"]


def test_bound_keeps_the_limits_it_is_not_given(session: E.Session) -> None:
    plan = session.table().bound(rows_per_group=3).bound(groups_per_person=2).plan
    assert plan.contribution == E.Contribution(rows_per_group=3, groups_per_person=2)
    assert session.table().bound(rows_per_group=4).plan.contribution == E.Contribution(4, 1)
    assert session.table().bound().plan.contribution == E.Contribution(1, 1)


def test_order_by_replaces_and_having_and_where_add(session: E.Session) -> None:
    plan = session.table().order_by("n").order_by("region", descending=True).plan
    assert plan.order_by == (E.OrderBy("region", descending=True),)
    plan = session.table().having("n > 1").having("n < 1e9").where("age > 1").where("age < 200").plan
    assert plan.having == ("n > 1", "n < 1e9") and plan.where == ("age > 1", "age < 200")


def test_table_names_match_without_case_as_in_sql(session: E.Session) -> None:
    query = session.table("VISITS").group_by("region", keys=list(REGIONS)).agg(n=E.count())
    assert query.plan.table == "visits"
    assert query.preview(epsilon=1.0).guarantee == dpkit.ApproxDP(1.0, 0.0)
    with pytest.raises(dpkit.InvalidParameterError, match="the private table of this session is 'visits'"):
        session.table("people")
