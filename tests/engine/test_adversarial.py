"""Adversarial QA of the query engine: bad input is refused by name before anything is read or spent,
and nothing is released silently wrong.

Each test pins a defect found by exercising the engine as a demanding user would (odd names, edge-case
data, key types, repeated quantile levels, broken sources, extreme parameters, the command line).
"""

from __future__ import annotations

import datetime
import decimal
import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

import dpkit
from dpkit import engine as E
from dpkit._errors import InvalidParameterError
from dpkit.cli import main
from dpkit.noise import InsecureSeededRandom

BUDGET = dpkit.ApproxDP(10.0, 1e-5)

# Several tests spend a huge epsilon on purpose, to compare released counts with exact ones.
pytestmark = pytest.mark.filterwarnings("ignore::dpkit.PrivacyWarning")


def frame() -> pd.DataFrame:
    """Ten people over thirty rows; every column kind a user might group by."""
    return pd.DataFrame(
        {
            "pid": [1, 1, 2, 3, 4, 5, 6, 7, 8, 9] * 3,
            "region": ["n", "s", "n", "e", "w", "n", "s", "e", "w", "n"] * 3,
            "age": list(range(30)),
            "flag": [True, False] * 15,
            "day": [datetime.date(2020, 1, 1), datetime.date(2021, 6, 1)] * 15,
            "at": pd.to_datetime(["2020-01-01 10:00", "2021-06-01 00:00"] * 15),
            "price": [decimal.Decimal("1.5"), decimal.Decimal("2.5")] * 15,
        }
    )


def session(privacy_unit: str | None = "pid", **options: object) -> dpkit.Session:
    options.setdefault("budget", BUDGET)
    return dpkit.Session.from_pandas(frame(), name="t", privacy_unit=privacy_unit, **options)  # type: ignore[arg-type]


# -- quantiles: a level asked twice ------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT QUANTILE_CONT(age, [0.5, 0.5]) FROM t",
        "SELECT MEDIAN(age), QUANTILE_CONT(age, [0.5, 0.9]) FROM t",
        "SELECT QUANTILE_CONT(age, 0.5) AS a, QUANTILE_CONT(age, 0.5) AS b FROM t",
    ],
)
def test_a_quantile_level_asked_twice_gives_one_value_per_group(sql: str) -> None:
    """Each repeat of a level drew (and appended) another value: columns of different lengths,
    a table that could not be built, after the debit."""
    s = session(bounds={"age": (0, 30)})
    result = s.sql(sql, epsilon=1.0, rng=InsecureSeededRandom(1))
    assert {len(values) for values in result.columns.values()} == {1}
    assert len(result.to_pandas()) == 1


def test_repeated_levels_of_one_aggregate_are_released_once() -> None:
    assert E.quantiles("age", [0.25, 0.25, 0.75]).levels == (0.25, 0.75)
    s = session()
    result = (
        s.table()
        .agg(q=E.quantiles("age", [0.25, 0.25], bounds=(0, 30)))
        .release(epsilon=1.0, rng=InsecureSeededRandom(1))
    )
    assert list(result.columns) == ["q", "q_low", "q_high"]


def test_quantile_levels_given_as_text_are_a_parameter_error() -> None:
    with pytest.raises(InvalidParameterError) as refused:
        E.quantiles("age", "0.5")  # type: ignore[arg-type]
    assert refused.value.name == "levels"
    with pytest.raises(InvalidParameterError):
        E.quantiles("age", [0.5, "x"])  # type: ignore[list-item]


# -- public keys must have the column's type ---------------------------------------------------------


@pytest.mark.parametrize("privacy_unit", ["pid", None])
@pytest.mark.parametrize(
    ("column", "keys", "expected"),
    [
        ("flag", ["true", "false"], "bool"),
        ("day", ["2020-01-01", "2021-06-01"], "datetime.date"),
        ("day", ["2020-01-01", "junk"], "datetime.date"),
        ("at", ["2020-01-01 10:00:00"], "datetime"),
        ("flag", [1, 0], "bool"),
        ("age", [True], "int"),
    ],
)
def test_public_keys_of_another_type_are_refused_before_anything_is_spent(
    privacy_unit: str | None, column: str, keys: list[object], expected: str
) -> None:
    """A text key on a BOOLEAN or DATE column matched nothing on the row-level path (zero counts,
    silently), and an unparseable one failed the query after its debit."""
    s = session(privacy_unit)
    with pytest.raises(InvalidParameterError) as refused:
        s.sql(f"SELECT {column}, COUNT(*) FROM t GROUP BY {column}", keys=keys, epsilon=1.0)
    assert refused.value.name == "keys" and expected in str(refused.value) and column in str(refused.value)
    assert s.remaining == BUDGET


@pytest.mark.parametrize("privacy_unit", ["pid", None])
@pytest.mark.parametrize(
    ("column", "keys"),
    [
        ("flag", [True, False]),
        ("day", [datetime.date(2020, 1, 1), datetime.date(2021, 6, 1)]),
        ("at", [datetime.datetime(2020, 1, 1, 10), pd.Timestamp("2021-06-01")]),
        ("price", [decimal.Decimal("1.5"), decimal.Decimal("2.5")]),
        ("price", [1.5, 2.5]),
    ],
)
def test_keys_of_the_columns_type_count_every_row(privacy_unit: str | None, column: str, keys: list[object]) -> None:
    """Booleans, dates, timestamps and decimals (Decimal keys were refused for a DECIMAL column)."""
    s = session(privacy_unit, budget=dpkit.PureDP(1e6))
    result = s.sql(
        f"SELECT {column}, COUNT(*) AS n FROM t GROUP BY {column}",
        keys=keys,
        epsilon=1e4,
        rows_per_group=3 if privacy_unit else None,
        groups_per_person=2 if privacy_unit else None,
        rng=InsecureSeededRandom(2),
    )
    assert result.columns[column] == keys
    assert result.columns["n"] == [15.0, 15.0]  # each person's rows share one key: nothing is cut


# -- failures after the debit that public facts decide -----------------------------------------------


def test_private_keys_at_a_huge_epsilon_do_not_fail_after_the_debit() -> None:
    """The selection threshold took log(q) with q = exp(-1 / scale) underflowing to 0."""
    s = session(budget=dpkit.ApproxDP(1e6, 1e-5))
    result = s.sql(
        "SELECT region, COUNT(*) AS n FROM t GROUP BY region",
        epsilon=1e4,
        delta=1e-6,
        rows_per_group=3,
        groups_per_person=2,
        rng=InsecureSeededRandom(3),
    )
    assert sorted(result.columns["region"]) == ["e", "n", "s", "w"]


@pytest.mark.skipif(importlib.util.find_spec("pytz") is not None, reason="pytz is installed")
def test_time_zone_keys_without_pytz_are_refused_before_the_debit() -> None:
    """DuckDB needs pytz to hand back TIMESTAMP WITH TIME ZONE values: the query failed after its debit."""
    zoned = frame().assign(at=pd.to_datetime(["2020-01-01", "2021-06-01"] * 15).tz_localize("UTC"))
    s = dpkit.Session.from_pandas(zoned, name="t", privacy_unit=None, budget=BUDGET)
    with pytest.raises(InvalidParameterError) as refused:
        s.sql("SELECT at, COUNT(*) FROM t GROUP BY at", epsilon=1.0, delta=1e-6)
    assert "pytz" in str(refused.value)
    assert s.remaining == BUDGET
    # Public keys come back as their ranks, never as DuckDB's values: no pytz needed.
    released = s.sql("SELECT at, COUNT(*) FROM t GROUP BY at", keys=[datetime.datetime(2020, 1, 1)], epsilon=1.0)
    assert released.columns["at"] == [datetime.datetime(2020, 1, 1)]


# -- result columns must not overwrite each other ---------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) AS n, SUM(age) AS n_low FROM t",
        "SELECT COUNT(*) AS count_low, COUNT(*) FROM t",
        "SELECT QUANTILE_CONT(age, [0.5, 0.9]) AS q, COUNT(*) AS q_p50 FROM t",
    ],
)
def test_sql_result_columns_that_would_overwrite_each_other_are_refused(sql: str) -> None:
    """The second column silently replaced the first (the count's lower end became the sum)."""
    s = session(bounds={"age": (0, 30)})
    with pytest.raises(InvalidParameterError) as refused:
        s.sql(sql, epsilon=1.0)
    assert "result column" in str(refused.value)
    assert s.remaining == BUDGET


def test_builder_aggregates_named_like_a_group_column_are_refused() -> None:
    s = session()
    for query in (
        s.table().group_by("region", keys=["n"]).agg(region=E.count()),
        s.table().group_by(bins={"age": [0, 10, 30]}).agg(age_bin=E.count()),
        s.table().agg(n=E.count(), n_high=E.sum("age", bounds=(0, 30))),
    ):
        with pytest.raises(InvalidParameterError):
            query.release(epsilon=1.0)
    assert s.remaining == BUDGET


# -- names: SQL matches identifiers without case ----------------------------------------------------


def test_columns_are_matched_without_case_as_the_engines_do() -> None:
    """SUM(income) on a column Income was refused as an unknown column (DuckDB and Spark accept it)."""
    mixed = pd.DataFrame({"pid": [1, 2, 3, 4] * 5, "Income": [1.0, 2.0, 3.0, 4.0] * 5, "Region": ["n", "s"] * 10})
    s = dpkit.Session.from_pandas(mixed, name="t", privacy_unit="pid", budget=dpkit.PureDP(1e6))
    result = s.sql(
        "SELECT region, COUNT(*) AS n, SUM(INCOME) AS total FROM t WHERE REGION <> 'x' GROUP BY Region",
        keys=["n", "s"],
        bounds={"income": (0, 10)},
        rows_per_group=5,
        epsilon=1e4,
        rng=InsecureSeededRandom(4),
    )
    assert result.columns["Region"] == ["n", "s"] and result.columns["n"] == [10.0, 10.0]
    assert [round(t) for t in result.columns["total"]] == [20, 30]
    builder = s.table().group_by("REGION", keys=["n"]).agg(m=E.mean("income", bounds=(0, 10)))
    assert s.preview(builder, epsilon=1.0).guarantee == dpkit.PureDP(1.0)
    with pytest.raises(InvalidParameterError):
        s.table().group_by("PID", keys=[1]).agg(n=E.count()).preview(epsilon=1.0)  # still the privacy unit


def test_keys_mapping_privacy_unit_and_cli_keys_are_matched_without_case(tmp_path: Path, capsys) -> None:
    """The three places that still compared names exactly: keys={"region": ...} with GROUP BY REGION,
    privacy_unit="PID" for a column pid, and dpkit query --keys Region=... for a column region."""
    s = dpkit.Session.from_pandas(frame(), name="t", privacy_unit="PID", budget=BUDGET)
    result = s.sql(
        "SELECT REGION, COUNT(*) AS n FROM t GROUP BY REGION",
        keys={"region": ["n", "s"]},
        epsilon=1.0,
        rng=InsecureSeededRandom(6),
    )
    assert result.columns["region"] == ["n", "s"]  # named as the schema spells it
    builder = s.table().group_by("Region", keys={"REGION": ["n"]}).agg(n=E.count())
    assert s.preview(builder, epsilon=1.0).guarantee == dpkit.ApproxDP(1.0, 0.0)
    assert "PID" not in repr(s) and "'pid'" in repr(s)
    path = tmp_path / "t.parquet"
    frame()[["pid", "region"]].to_parquet(path)
    code = main(
        [
            "query",
            str(path),
            "SELECT region, COUNT(*) AS n FROM t GROUP BY region",
            "--privacy-unit",
            "PID",
            "--keys",
            "Region=n,s",
            "--epsilon",
            "1",
            "--json",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert [row["region"] for row in json.loads(capsys.readouterr().out)["rows"]] == ["n", "s"]


def test_date_arithmetic_is_refused_whatever_the_case_of_the_column() -> None:
    s = session()
    with pytest.raises(InvalidParameterError) as refused:
        s.table().where("(DAY - CAST('1970-01-01' AS DATE)) * 2 IS NOT NULL").agg(n=E.count()).release(epsilon=1.0)
    assert "date and time arithmetic" in str(refused.value)
    assert s.remaining == BUDGET


# -- sources and arguments that raised untyped errors ------------------------------------------------


@pytest.mark.parametrize("source", [[1, 2, 3], {"a": [1]}, None])
def test_a_source_that_is_not_a_frame_is_a_parameter_error(source: object) -> None:
    with pytest.raises(InvalidParameterError) as refused:
        dpkit.Session.from_pandas(source, name="t", budget=BUDGET)
    assert refused.value.name == "source"


def test_a_file_that_cannot_be_read_is_a_parameter_error(tmp_path: Path) -> None:
    text = tmp_path / "people.csv"
    text.write_text("a,b\n1,2\n")
    with pytest.raises(InvalidParameterError) as refused:
        dpkit.Session.from_parquet(text, budget=BUDGET)  # not Parquet
    assert refused.value.name == "source"
    with pytest.raises(InvalidParameterError):
        dpkit.Session.from_parquet(tmp_path / "nothing*.parquet", budget=BUDGET)  # a glob matching nothing


def test_session_bounds_must_be_a_mapping_of_numeric_pairs() -> None:
    with pytest.raises(InvalidParameterError) as refused:
        session(bounds=[("age", (0, 1))])
    assert refused.value.name == "bounds"
    with pytest.raises(InvalidParameterError):
        E.sum("age", bounds=("0", "10"))  # type: ignore[arg-type]


def test_join_columns_must_be_names() -> None:
    with pytest.raises(InvalidParameterError) as refused:
        session().table().join("lookup", 3)  # type: ignore[arg-type]
    assert refused.value.name == "on"


# -- the command line --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("adversarial") / "people.parquet"
    frame().drop(columns=["price"]).to_parquet(path)
    return path


@pytest.mark.parametrize(
    ("keys", "column", "expected"),
    [
        ("flag=true,false", "flag", [True, False]),
        ("day=2020-01-01,2021-06-01", "day", ["2020-01-01", "2021-06-01"]),
    ],
)
def test_cli_keys_are_typed_for_boolean_and_date_columns(
    data: Path, capsys: pytest.CaptureFixture[str], keys: str, column: str, expected: list[object]
) -> None:
    """--keys gave text values: a row-level count of a BOOLEAN or DATE column matched no row."""
    sql = f"SELECT {column}, COUNT(*) AS n FROM people GROUP BY {column}"
    assert main(["query", str(data), sql, "--epsilon", "1000", "--keys", keys, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [row[column] for row in rows] == expected
    assert [row["n"] for row in rows] == [15, 15]


def test_cli_keys_that_do_not_parse_as_the_column_type_are_refused(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql = "SELECT day, COUNT(*) FROM people GROUP BY day"
    assert main(["query", str(data), sql, "--epsilon", "1", "--keys", "day=2020-13-45"]) == 2
    captured = capsys.readouterr()
    assert "--keys" in captured.err and "Traceback" not in captured.err


def test_a_result_with_no_rows_keeps_its_column_types() -> None:
    # Private keys that select nothing used to give columns of no type (pyarrow null, Polars Null,
    # pandas float64 for a text key), so concatenating it with a later result changed the types.
    import polars as pl
    import pyarrow as pa

    def table(people: int) -> pa.Table:
        return pa.table(
            {
                "pid": pa.array(range(people), pa.int64()),
                "region": pa.array(["n"] * people, pa.string()),
                "flag": pa.array([True] * people, pa.bool_()),
                "day": pa.array([datetime.date(2020, 1, 1)] * people, pa.date32()),
                "at": pa.array([datetime.datetime(2020, 1, 1, 10)] * people, pa.timestamp("us")),
                "code": pa.array([7] * people, pa.int64()),
                "price": pa.array([decimal.Decimal("1.50")] * people, pa.decimal128(10, 2)),
                "x": pa.array([1.0] * people, pa.float64()),
            }
        )

    keys = "region, flag, day, at, code, price"
    sql = f"SELECT {keys}, COUNT(*) AS n, AVG(x) AS m FROM t GROUP BY {keys}"
    expected = pa.schema(
        [
            ("region", pa.string()),
            ("flag", pa.bool_()),
            ("day", pa.date32()),
            ("at", pa.timestamp("us")),
            ("code", pa.int64()),
            ("price", pa.decimal128(10, 2)),
            *((name, pa.int64()) for name in ("n", "n_low", "n_high")),  # counts are whole numbers
            *((name, pa.float64()) for name in ("m", "m_low", "m_high")),
        ]
    )
    empty = dpkit.Session.from_arrow(table(3), name="t", privacy_unit="pid", budget=BUDGET).sql(
        sql, epsilon=1.0, delta=1e-6, bounds={"x": (0, 2)}, rng=InsecureSeededRandom(1)
    )
    assert len(empty) == 0
    assert empty.to_arrow().schema == expected
    assert empty.to_polars().schema == pl.from_arrow(expected.empty_table()).schema
    frame = empty.to_pandas()
    assert list(frame.columns) == expected.names
    assert frame["code"].dtype == "int64" and frame["flag"].dtype == bool and frame["n"].dtype == "int64"

    full = dpkit.Session.from_arrow(table(2000), name="t", privacy_unit="pid", budget=BUDGET).sql(
        sql, epsilon=1.0, delta=1e-6, bounds={"x": (0, 2)}, rng=InsecureSeededRandom(1)
    )
    assert len(full) == 1
    # The same types as a result with rows (decimal keys come back as Python Decimals of any scale).
    assert full.to_arrow().schema.remove(5) == expected.remove(5)


@pytest.mark.parametrize("kind", ["pandas", "arrow", "polars"])
@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("CAST(s AS INTEGER) IN (0, 1, 2, 3, 4)", 20),  # 'x' does not cast
        ("i + 100 IN (101, 102, 103, 104, 105)", 20),  # 2^31 - 1 + 100 overflows
        ("NOT (CAST(s AS INTEGER) IN (5, 6, 7, 8, 9, 10))", 20),
    ],
)
def test_an_in_list_of_five_or_more_stays_inside_try(kind: str, condition: str, expected: int) -> None:
    """DuckDB's IN-clause rewriter made ``expr IN (5+ constants)`` a join on ``expr`` outside TRY:
    one row that fails to cast (or overflows) made the whole release fail after its debit, which
    reveals that row. The backend turns the rewriter off; the failing rows are left out."""
    from engine_fixtures import exact_aggregates

    frame = pd.DataFrame({"pid": range(30), "s": ["1", "x", "3"] * 10, "i": [1, 2**31 - 1, 3] * 10})
    frame["i"] = frame["i"].astype("int32")
    source = {"pandas": frame, "arrow": None, "polars": None}[kind]
    if kind == "arrow":
        source = pytest.importorskip("pyarrow").Table.from_pandas(frame, preserve_index=False)
    elif kind == "polars":
        source = pytest.importorskip("polars").from_pandas(frame)
    opener = {"pandas": E.Session.from_pandas, "arrow": E.Session.from_arrow, "polars": E.Session.from_polars}[kind]
    session = opener(source, name="t", privacy_unit="pid", budget=BUDGET)
    query = session.table().where(condition).agg(n=E.count())
    _, result = exact_aggregates(session, query)
    assert list(result.columns.values())[0][0] == expected
    session.release(query, epsilon=1.0, rng=InsecureSeededRandom(5))  # a seed is for tests only


def test_bounds_narrower_than_the_mechanisms_calibrate_for_are_refused_by_name():
    """Bounds 1e-305 wide gave a Laplace sensitivity below 2**-1000, refused naming 'sensitivity'."""
    frame = pd.DataFrame({"pid": range(10), "x": [0.0] * 10})
    session = E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(1.0))
    with pytest.raises(dpkit.InvalidParameterError, match=r"bounds\['x'\].*2\*\*-500 apart"):
        session.sql("SELECT SUM(x) FROM data", epsilon=0.5, bounds={"x": (0, 1e-305)})
    assert session.remaining == dpkit.PureDP(1.0)


@pytest.mark.parametrize(
    ("column", "key"), [("big", 2**70), ("big", -(2**63) - 1), ("i32", 2**40), ("i8", 300), ("i8", -129)]
)
def test_an_int_key_outside_the_columns_integer_range_is_refused_before_the_debit(column, key):
    """Found by the engine semantics QA helper: such a key was charged, and the result's pandas,
    Arrow and Polars forms then raised OverflowError (2**70 on a BIGINT column)."""
    import pyarrow as pa

    frame = pa.table(
        {
            "pid": pa.array(range(10), pa.int64()),
            "big": pa.array(range(10), pa.int64()),
            "i32": pa.array(range(10), pa.int32()),
            "i8": pa.array(range(10), pa.int8()),
        }
    )
    session = E.Session.from_arrow(frame, name="t", privacy_unit="pid", budget=dpkit.ApproxDP(10, 0.5))
    query = session.table().group_by(column, keys=[1, key]).agg(n=E.count())
    with pytest.raises(dpkit.InvalidParameterError, match="range"):
        session.release(query, epsilon=1.0)
    assert session.remaining == dpkit.ApproxDP(10, 0.5)
    edge = {"big": 2**63 - 1, "i32": 2**31 - 1, "i8": 127}[column]
    assert session.release(session.table().group_by(column, keys=[1, edge]).agg(n=E.count()), epsilon=1.0)


def test_a_null_key_of_a_binned_column_is_refused():
    """Found by the engine semantics QA helper: a NULL key of a binned column was allowed and its
    group counted the rows that fall in no bin, which the Bin's contract says are dropped."""
    frame = pd.DataFrame({"pid": range(6), "x": [1.0, 6.0, 20.0, -3.0, None, 7.0]})
    session = E.Session.from_pandas(frame, name="t", privacy_unit="pid", budget=dpkit.ApproxDP(10, 0.5))
    query = session.table().group_by(bins={"x": [0, 5, 10]}, keys=[None, "[0, 5)", "[5, 10]"]).agg(n=E.count())
    with pytest.raises(dpkit.InvalidParameterError, match="no NULL bin"):
        session.release(query, epsilon=1.0)
    assert session.remaining == dpkit.ApproxDP(10, 0.5)


@pytest.mark.parametrize("written", ["log2(x)", "LOG(2, x)", "log10(x)", "LOG(10, x)"])
def test_base_two_and_ten_logarithms_are_duckdbs_log2_and_log10(written):
    """Found by the engine semantics QA helper: sqlglot reads LOG2(x) as LOG(2, x), which DuckDB
    computes as ln(x) / ln(2) (log2(5) gave 2.3219280948873626, DuckDB's log2 2.321928094887362), so
    derived keys and filters at the boundary differed from plain DuckDB's."""
    import duckdb

    from dpkit.engine._compiler import aggregation_plan, compile_query, parse_request

    frame = pd.DataFrame({"x": [0.63, 3.0, 5.0, 6.0, 7.0, 11.0, 1e-300, 1e300]})
    session = E.Session.from_pandas(frame, name="t", privacy_unit=None, budget=dpkit.ApproxDP(1e6, 0.5))
    query = session.table().with_column("v", written).group_by("v").agg(n=E.count())
    compiled = compile_query(query.plan, session._context(), parse_request(session.budget, epsilon=1.0, delta=0.1))
    released = sorted(key[0] for key in session._backend.run(aggregation_plan(compiled, {}, "a salt")).keys)
    own = "log2" if "2" in written else "log10"
    plain = sorted(value for (value,) in duckdb.execute(f"SELECT {own}(x) FROM frame").fetchall())
    assert released == plain


def test_released_groups_with_a_nan_key_are_in_key_order():
    """Found by the engine semantics QA helper: NaN compares false with every key, so sorting left
    the backend's (salted hash) order: (1.0, nan, 0.5) in one release, another order in the next."""
    from dpkit.engine._execute import _in_key_order

    nan = float("nan")
    for keys in ([(1.0,), (nan,), (0.5,)], [(0.5,), (nan,), (1.0,)], [(nan,), (1.0,), (0.5,)], [(None,), (nan,), (2,)]):
        ordered = [keys[i][0] for i in _in_key_order(keys, list(range(3)))]
        finite = [value for value in ordered if value is not None and value == value]
        assert finite == sorted(finite)
        assert ordered.index(finite[-1]) < [i for i, v in enumerate(ordered) if v != v][0]  # NaN after numbers
        assert None not in ordered or ordered[-1] is None  # NULL last


def test_a_released_count_lies_in_its_interval_of_integers():
    """Found by the engine accuracy QA helper: at a large epsilon (half-width below 0.5) the rounded
    count fell outside v +- h (nx = 20, interval [20.0099, 20.3095]); the interval is now the integers
    within v +- h, with the released count, so the same true counts are covered."""
    from dpkit.engine._execute import _count_interval

    assert _count_interval(20.16, 0.15, 20) == (20.0, 20.0)
    assert _count_interval(20.4, 3.0, 20) == (18.0, 23.0)
    assert _count_interval(-0.7, 0.2, 0) == (0.0, 0.0)
    frame = pd.DataFrame({"pid": range(40), "grp": ["a", "b"] * 20, "x": [1.0, None] * 20})
    session = E.Session.from_pandas(frame, name="t", privacy_unit="pid", budget=dpkit.ApproxDP(1e4, 0.5))
    for seed in range(40):
        result = session.sql(
            "SELECT grp, COUNT(x) AS nx, COUNT(*) AS n FROM t GROUP BY grp",
            keys=["a", "b"],
            epsilon=20.0,
            rng=InsecureSeededRandom(seed),
        )
        for name in ("nx", "n"):
            for low, value, high in zip(
                result.columns[f"{name}_low"], result.columns[name], result.columns[f"{name}_high"], strict=True
            ):
                assert low <= value <= high and low == int(low) and high == int(high)
