"""Adversarial checks of the Spark backend against DuckDB: the same plans give the same noiseless
aggregates, on data and filters where the two engines' own semantics differ.

Every test here failed before its fix (see the docstrings). One SparkSession serves the module.
"""

from __future__ import annotations

import datetime
import decimal
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from engine_fixtures import exact_aggregates

import dpkit
from dpkit import engine as E
from dpkit.engine._aggregation import render_sql, to_dialect
from dpkit.engine._compiler import compile_query, histogram_plan, parse_request

pytest.importorskip("pyspark")

from dpkit.engine._backends import SparkBackend  # noqa: E402

BUDGET = dpkit.ApproxDP(1000, 1e-3)


@pytest.fixture(scope="module")
def spark():
    return SparkBackend()._spark


def _pair(spark, frame, kind="pandas", **options):
    """The same frame opened on DuckDB and on Spark (a backend of its own)."""
    options = {"name": "t", "privacy_unit": "pid", "budget": BUDGET, **options}
    open_ = {"pandas": E.Session.from_pandas, "arrow": E.Session.from_arrow, "polars": E.Session.from_polars}[kind]
    return open_(frame, **options), open_(frame, backend=SparkBackend(spark), **options)


def _rows(result):
    def key(value):
        return "nan" if isinstance(value, float) and math.isnan(value) else value

    rows = zip(result.keys, *result.columns.values(), strict=True)
    return sorted(((tuple(key(v) for v in k), *rest) for k, *rest in rows), key=repr)


def _same(duck, spark_session, build, **cost):
    """Noiseless aggregates of ``build(table)`` on both engines: equal, and returned."""
    cost = cost or {"epsilon": 1.0, "delta": 1e-6}
    first = _rows(exact_aggregates(duck, build(duck.table()), **cost)[1])
    second = _rows(exact_aggregates(spark_session, build(spark_session.table()), **cost)[1])
    assert first == second
    return first


def test_two_sessions_on_one_spark_session_keep_their_own_tables(spark):
    """Each Spark session registered its table as a temporary view named after the table ("data" by
    default): a second session with the same name replaced the first one's view, and the first
    session's queries (and budget) silently ran on the second session's data."""
    first = E.Session.from_spark(
        spark.createDataFrame(pd.DataFrame({"pid": range(100), "x": [1] * 100})), privacy_unit="pid", budget=BUDGET
    )
    E.Session.from_spark(
        spark.createDataFrame(pd.DataFrame({"pid": range(5), "x": [2] * 5})), privacy_unit="pid", budget=BUDGET
    )
    E.Session.from_pandas(
        pd.DataFrame({"pid": range(7), "x": [3] * 7}), backend="spark", privacy_unit="pid", budget=BUDGET
    )
    _, result = exact_aggregates(first, first.table().agg(n=E.count(), t=E.sum("x", bounds=(0, 10))))
    assert result.columns["rows"] == [100]
    assert result.columns["m0"][0] == 100 * 2**26  # x = 1 in units of 2^-26 (bounds up to 10)
    # The caller's own view of that name is left alone too.
    spark.createDataFrame(pd.DataFrame({"v": [1]})).createOrReplaceTempView("data")
    try:
        E.Session.from_spark(spark.createDataFrame(pd.DataFrame({"pid": [1]})), privacy_unit="pid", budget=BUDGET)
        assert spark.table("data").columns == ["v"]
    finally:
        spark.catalog.dropTempView("data")


def test_decimal_group_keys_are_not_truncated(spark):
    """Spark returned DECIMAL group keys converted to int: 1.50 and 1.75 both came back as key 1
    (two released rows with one key), and with row-level privacy public Decimal keys matched nothing."""
    frame = pd.DataFrame(
        {
            "pid": range(12),
            "dec": [decimal.Decimal(v) for v in ["1.50", "1.75", "-2.25", "3.00"] * 3],
        }
    )
    duck, on_spark = _pair(spark, frame)
    rows = _same(duck, on_spark, lambda q: q.group_by("dec").agg(n=E.count()))
    assert [row[0] for row in rows] == [(decimal.Decimal(v),) for v in ["-2.25", "1.50", "1.75", "3.00"]]
    duck, on_spark = _pair(spark, frame, privacy_unit=None)
    keys = [decimal.Decimal("1.5"), decimal.Decimal("-2.25")]
    rows = _same(duck, on_spark, lambda q: q.group_by("dec", keys=keys).agg(n=E.count()))
    assert [row[1] for row in rows] == [3, 3]


def test_frames_reach_spark_with_their_values_and_types(spark):
    """Frames went to Spark through pandas: Arrow's NaN became NULL (one group with NULL), declared
    decimals were re-inferred from the rows, uint64 values above 2^63 became NULL, Polars dates became
    timestamps, and an empty pandas frame could not be opened at all."""
    table = pa.table(
        {
            "pid": pa.array(range(8), pa.int64()),
            "f": pa.array([math.nan, None, 1.5, math.nan, None, 2.0, -0.0, 1.5], pa.float64()),
            "dec": pa.array([decimal.Decimal("1.50")] * 8, pa.decimal128(10, 2)),
        }
    )
    duck, on_spark = _pair(spark, table, kind="arrow")
    assert on_spark.columns["dec"].type == duck.columns["dec"].type == "DECIMAL(10,2)"  # DuckDB's names
    rows = _same(duck, on_spark, lambda q: q.group_by("f").agg(n=E.count()))
    assert ("nan",) in [row[0] for row in rows] and (None,) in [row[0] for row in rows]

    big = pd.DataFrame({"pid": [1, 2, 3], "u": np.array([1, 2**63 + 5, 2**64 - 1], dtype=np.uint64)})
    duck, on_spark = _pair(spark, big, privacy_unit=None)
    _same(duck, on_spark, lambda q: q.where("u > 9223372036854775807").agg(n=E.count()))
    assert exact_aggregates(on_spark, on_spark.table().where("u > 9223372036854775807").agg(n=E.count()))[1].columns[
        "rows"
    ] == [2]

    polars = pytest.importorskip("polars")
    dates = polars.DataFrame({"pid": [1, 2], "d": [datetime.date(2020, 1, 1), datetime.date(2020, 1, 2)]})
    assert (
        E.Session.from_polars(dates, backend=SparkBackend(spark), privacy_unit="pid", budget=BUDGET).columns["d"].type
        == "DATE"
    )

    empty = pd.DataFrame({"pid": pd.Series([], dtype="int64"), "x": pd.Series([], dtype="float64")})
    duck, on_spark = _pair(spark, empty)
    assert _same(duck, on_spark, lambda q: q.agg(n=E.count(), t=E.sum("x", bounds=(0, 1)))) == [((), 0, 0, 0)]


def test_naive_timestamps_do_not_move_with_the_session_time_zone(spark):
    """Naive timestamps became Spark TIMESTAMPs (an instant, read in the session's time zone): under
    America/New_York a time in the DST gap moved by an hour and one in the overlap was read another way,
    so group keys, public keys and filters on them differed from DuckDB's (whose TIMESTAMP is naive)."""
    times = [
        datetime.datetime(2021, 3, 14, 2, 30),
        datetime.datetime(2021, 11, 7, 1, 30),
        datetime.datetime(2020, 1, 1),
    ]
    frame = pd.DataFrame(
        {"pid": np.arange(30) % 7, "ts": pd.Series([times[i % 3] for i in range(30)], dtype="datetime64[us]")}
    )
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        duck, on_spark = _pair(spark, frame)
        rows = _same(
            duck, on_spark, lambda q: q.group_by("ts").bound(rows_per_group=2, groups_per_person=3).agg(n=E.count())
        )
        assert sorted(row[0][0] for row in rows) == sorted(times)
        public = _same(
            duck, on_spark, lambda q: q.group_by("ts", keys=times).bound(groups_per_person=3).agg(n=E.count())
        )
        assert [row[1] for row in public] == [7, 7, 7]
        window = "ts >= TIMESTAMP '2021-03-14 02:00:00' AND ts < TIMESTAMP '2021-03-14 03:00:00'"
        assert _same(duck, on_spark, lambda q: q.where(window).agg(n=E.count()))[0][1] == 7
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)


def test_float_group_keys_are_ranked_as_on_duckdb(spark):
    """Private keys are ranked by a hash of their text, and Spark wrote doubles as Java does ('1.0E20',
    'Infinity'), DuckDB as Python does ('1e+20', 'inf'): people in several groups kept other groups on
    Spark, so the aggregates differed."""
    values = [
        1e20,
        0.1,
        1 / 3,
        1e-7,
        123456789.125,
        math.inf,
        -math.inf,
        2.0,
        1e16,
        1e15,
        -2.5e-5,
        1.4421123051581972e18,
    ]
    frame = pd.DataFrame({"pid": np.arange(240) % 9, "v": [values[i % len(values)] for i in range(240)]})
    duck, on_spark = _pair(spark, frame)
    for g in (1, 2):
        _same(
            duck, on_spark, lambda q, g=g: q.group_by("v").bound(rows_per_group=3, groups_per_person=g).agg(n=E.count())
        )


def test_the_double_text_is_duckdbs(spark):
    """The Spark text of a DOUBLE (which private key ranks hash) is DuckDB's, on awkward values too."""
    import duckdb

    from dpkit.engine._spark_sql import spark_semantics

    rng = np.random.default_rng(3)
    values = [float(v) for v in rng.standard_normal(300) * 10.0 ** rng.integers(-30, 30, 300)]
    values += [2.0**k for k in range(-60, 70, 7)] + [1e16, 1e15, 1e-4, 1e-5, 5e-324, 1.7976931348623157e308]
    values += [9007199254740993.0, 1.4421123051581972e18, 1.3674243334605076e18, -9.291884188845172e17, 0.0, -0.0]
    frame = pd.DataFrame({"x": values})
    text = to_dialect(
        "SELECT CAST(x AS VARCHAR) AS s FROM v", "spark", rewrite=lambda t: spark_semantics(t, {"x": "double"})
    )
    spark.createDataFrame(frame).createOrReplaceTempView("__dpkit_test_doubles")
    try:
        got = [row[0] for row in spark.sql(text.replace(" FROM v", " FROM __dpkit_test_doubles")).collect()]
    finally:
        spark.catalog.dropTempView("__dpkit_test_doubles")
    connection = duckdb.connect()
    connection.register("v", frame)
    assert got == [row[0] for row in connection.execute("SELECT CAST(x AS VARCHAR) FROM v").fetchall()]


@pytest.fixture(scope="module")
def filtered(spark):
    table = pa.table(
        {
            "pid": pa.array(range(8), pa.int64()),
            "f": pa.array([1.5, 2.5, -2.5, 100.0, math.nan, 1e20, 0.0, 3.7], pa.float64()),
            "dec": pa.array(
                [decimal.Decimal(v) for v in ["1.50", "2.50", "-2.50", "0.50", "1", "2", "3", "100"]],
                pa.decimal128(9, 2),
            ),
            "s": pa.array(["1", "1.5", "abc", "", None, "1e3", " 7 ", "-2.5"]),
            "i": pa.array([1, 300, -200, 0, 5, 127, -128, 2**31 - 1], pa.int32()),
        }
    )
    return _pair(spark, table, kind="arrow", privacy_unit=None)


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        # DuckDB's one-argument LOG is base 10; Spark read it as ln.
        ("log(f) = 2", 1),
        ("log(f) > 0.3", 6),  # NaN is above every number in both engines
        # Casts to integers: DuckDB rounds (a double half to even, a decimal or text half away from
        # zero) where Spark truncated; out of range Spark wrapped (300 -> 44, 2^31 - 1 -> -1).
        ("CAST(f AS INTEGER) = 2", 2),
        ("CAST(dec AS INTEGER) = 3", 2),
        ("CAST(s AS INTEGER) = 2", 1),
        ("CAST(i AS TINYINT) = 44 OR CAST(i AS TINYINT) = -1", 0),
        # A cast that fails in DuckDB leaves its row out (the filter's TRY); Spark's NULL made IS NULL true.
        ("CAST(s AS INTEGER) IS NULL", 1),
        # Division by zero: +-inf or NaN in DuckDB, NULL in Spark; decimals divide as doubles in DuckDB
        # (Spark kept 6 decimals: 2.5 / 3 = 0.833333).
        ("f / 0 > 1e308", 7),  # five infinities and two NaN
        ("i / 0 IS NULL", 0),
        ("dec / 3 > 0.8333333", 3),
        # FLOOR of NaN or 1e20 is that DOUBLE in DuckDB, a clipped BIGINT in Spark; sign(NaN) is 0.
        ("floor(f) > 1e19", 2),
        ("sign(f) = 0", 2),
        # LEFT with a negative length drops characters in DuckDB; Spark gave ''.
        ("left(s, -1) = '1e'", 1),
    ],
)
def test_filters_give_duckdbs_answers(filtered, condition, expected):
    """Filters that Spark answered otherwise than DuckDB (noiseless counts, row-level privacy)."""
    duck, on_spark = filtered
    rows = _same(duck, on_spark, lambda q: q.where(condition).agg(n=E.count()))
    assert rows[0][1] == expected


def test_automatic_bounds_histogram_bins_powers_of_two_alike(spark):
    """FLOOR(LOG2(x)) became FLOOR(LOG(2, x)) = floor(ln x / ln 2) in Spark, which puts 2^-39, 2^-31 and
    2^-29 one bin low: the histogram of the automatic bounds differed between the engines."""
    values = [2.0**k for k in range(-40, 60)] + [0.49999999999999994, 3.9999999999999996, 0.0, -8.0]
    values += [math.inf, -math.inf, 1e300, 5e-324]
    frame = pd.DataFrame({"pid": range(len(values)), "x": values})
    duck, on_spark = _pair(spark, frame)
    histograms = []
    for session in (duck, on_spark):
        query = session.table().agg(t=E.sum("x", bounds="auto"))
        compiled = compile_query(query.plan, session._context(), parse_request(session.budget, epsilon=1.0))
        plan = histogram_plan(compiled, next(s for s in compiled.statistics if s.kind == "auto"), None, "salt")
        assert plan.histogram is not None and plan.histogram.log2 and "LOG2" in render_sql(plan).upper()
        histograms.append(session._backend.run(plan).histogram)
    assert histograms[0] == histograms[1]


def test_a_filter_is_checked_before_the_debit_as_spark_runs_it(spark):
    """The pre-debit check analysed the query with the SparkSession's ANSI mode (on by default in
    Spark 4) while the query runs with it off: a filter the run accepts (a BOOLEAN compared with 1) was
    refused on Spark only. It now analyses the very view texts the run executes, ANSI mode off."""
    frame = pd.DataFrame({"pid": range(6), "b": [True, False, True, None, True, False]})
    duck, on_spark = _pair(spark, frame)
    previous = spark.conf.get("spark.sql.ansi.enabled", None)
    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        assert _same(duck, on_spark, lambda q: q.where("b = 1").agg(n=E.count()))[0][1] == 3
        before = on_spark.remaining
        on_spark.release(on_spark.table().where("b = 1").agg(n=E.count()), epsilon=1.0)
        assert on_spark.remaining != before
        assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    finally:
        if previous is None:
            spark.conf.unset("spark.sql.ansi.enabled")
        else:
            spark.conf.set("spark.sql.ansi.enabled", previous)


def test_tables_named_outside_ascii_run_on_spark(spark):
    """A table name is any Python identifier ("données"): Spark refused such a view name (the session
    could not be opened on Spark while DuckDB ran it); now the views have names of their own and the
    text's name, quoted, is their alias."""
    frame = pd.DataFrame({"pid": range(40), "x": np.arange(40) % 5})
    lookup = pd.DataFrame({"x": [0, 1, 2, 3, 4], "étiquette": ["a", "b", "a", "b", "c"]})
    duck, on_spark = _pair(spark, frame, name="données", public_tables={"régions": lookup})
    rows = _same(
        duck,
        on_spark,
        lambda q: (
            q.join("régions", on="x")
            .where("données.x > 0 AND étiquette <> 'c'")
            .group_by("étiquette", keys=["a", "b"])
            .agg(n=E.count())
        ),
    )
    assert [row[1] for row in rows] == [8, 16]


def test_released_sums_past_two_to_the_63_do_not_wrap_on_spark(spark):
    # The released sums are CAST(SUM(bigint) AS DECIMAL(38, 0)). One row is at most 2^30 grid
    # units, so wrapping needs about 8.6e9 rows at the bound: the text is checked on two rows
    # at 2^63 - 1 instead, run as the backend runs it (ANSI mode off).
    from dpkit.engine._aggregation import to_dialect
    from dpkit.engine._spark_sql import spark_semantics

    top = 2**63 - 1
    sql = f"SELECT CAST(SUM(x) AS DECIMAL(38, 0)) AS s FROM (VALUES ({top}), ({top})) AS t(x)"
    text = to_dialect(sql, "spark", rewrite=lambda tree: spark_semantics(tree, {}))
    previous = spark.conf.get("spark.sql.ansi.enabled", None)
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        (row,) = spark.sql(text).collect()
    finally:
        if previous is None:
            spark.conf.unset("spark.sql.ansi.enabled")
        else:
            spark.conf.set("spark.sql.ansi.enabled", previous)
    assert int(row[0]) == 2 * top


def test_row_level_public_keys_come_back_as_ranks_on_spark(spark):
    """Row-level public keys are returned by rank on both engines (date keys on a TIMESTAMP column
    were looked up by Python equality in the values read back, and released as 0)."""
    frame = pd.DataFrame(
        {
            "pid": range(6),
            "day": pd.to_datetime(["2020-01-01"] * 4 + ["2020-01-02"] * 2),
            "x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        }
    )
    duck, on_spark = _pair(spark, frame, privacy_unit=None)
    keys = [datetime.date(2020, 1, 1), datetime.date(2020, 1, 2), datetime.date(2020, 1, 3)]
    rows = _same(duck, on_spark, lambda t: t.group_by("day", keys=keys).agg(n=E.count(), s=E.sum("x", bounds=(0, 10))))
    assert {row[0][0]: row[1] for row in rows} == {datetime.date(2020, 1, 1): 4, datetime.date(2020, 1, 2): 2}


def test_conditions_keep_their_parentheses_on_spark(spark):
    """TRY(a) AND TRY(b OR c) lost its TRYs for Spark and became a AND b OR c: rows failing the first
    condition (and rows without a person) were counted whenever the OR held."""
    frame = pd.DataFrame(
        {
            "pid": [1.0, 2.0, 3.0, 4.0, None, None],
            "gb": [True, False, False, None, True, True],
            "gi": [1, 2, 3, 4, 1, 1],
            "x": [1.0, 2.0, None, 100.0, 1.0, None],
        }
    )
    duck, on_spark = _pair(spark, frame)
    rows = _same(
        duck,
        on_spark,
        lambda t: t.where("gb").where("x IS NULL OR x < 50").group_by("gi", keys=[1, 2, 3, 4]).agg(n=E.count()),
    )
    assert rows == [((1,), 1, 1)]
    rows = _same(duck, on_spark, lambda t: t.where("x IS NULL OR x < 50").group_by("gi", keys=[1]).agg(n=E.count()))
    assert rows == [((1,), 1, 1)]  # (the rows without a person are left out)


def test_float32_keys_match_alike_on_spark(spark):
    """Public keys of a FLOAT column are FLOAT literals (VALUES) or a float32 key table on both engines."""
    frame = pa.table({"pid": [1, 2, 3], "f": pa.array([0.1, 0.1, 0.5], pa.float32())})
    for unit in ("pid", None):
        duck, on_spark = _pair(spark, frame, kind="arrow", privacy_unit=unit)
        for keys in ([0.1, 0.5], [0.1, 0.5] + [1000.5 + i for i in range(300)]):
            rows = _same(duck, on_spark, lambda t, keys=keys: t.group_by("f", keys=keys).agg(n=E.count()))
            assert [row[1] for row in rows if row[0][0] in (0.1, 0.5)] == [2, 1]


def test_spark_frame_with_column_names_alike_is_refused(spark):
    frame = spark.createDataFrame(pd.DataFrame({"ID": range(30), "id": [1, 2, 3] * 10}))
    with pytest.raises(dpkit.InvalidParameterError, match="same name without case"):
        E.Session.from_spark(frame, privacy_unit="id", budget=BUDGET)


def test_every_setting_a_query_runs_under_is_one_this_spark_knows(spark):
    """The settings each query runs under (ANSI mode off, UTC, DECIMAL precision, and the parser-cache
    flush without which long runs of the engine's ever different SQL filled the driver's heap: an
    OutOfMemoryError after 267 queries of a random-expression run) are SQL settings of this Spark that
    a session may change: a misspelt key would be kept and silently do nothing."""
    from dpkit.engine._backends import _SPARK_SETTINGS

    conf = spark._jsparkSession.sessionState().conf()
    assert not conf.isModifiable("spark.sql.parser.noSuchSetting")
    assert [key for key in _SPARK_SETTINGS if not conf.isModifiable(key)] == []
    assert "spark.sql.parser.manageParserCaches" in _SPARK_SETTINGS
