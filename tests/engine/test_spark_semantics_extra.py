"""More DuckDB-vs-Spark differences, fixed or refused: integer overflow in filters, the text of private
keys (FLOAT, TIMESTAMP WITH TIME ZONE, BLOB, INTERVAL), and text compared with or cast to other types.

DuckDB's answers are the reference. Each test failed before its fix (see the docstrings). One
SparkSession serves the module; most checks run many filters in one Spark query.
"""

from __future__ import annotations

import datetime
import decimal
import math

import numpy as np
import pyarrow as pa
import pytest
from engine_fixtures import exact_aggregates

import dpkit
from dpkit import engine as E
from dpkit.engine._aggregation import to_dialect

pytest.importorskip("pyspark")

from dpkit.engine._backends import SparkBackend, _spark_from_arrow  # noqa: E402
from dpkit.engine._spark_sql import spark_semantics  # noqa: E402

BUDGET = dpkit.ApproxDP(1000, 1e-3)


@pytest.fixture(scope="module")
def spark():
    return SparkBackend()._spark


def _spark_types(table: pa.Table, spark) -> dict[str, str]:
    return {name.casefold(): kind for name, kind in _spark_from_arrow(spark, table).dtypes}


def _compare(spark, table: pa.Table, expressions: list[str], *, filters: bool = True) -> None:
    """Each expression (a filter, ``filters``, or a value) computed by DuckDB (in TRY, as the engine runs a
    filter) and by Spark from the rewritten text, in one query each: the same values row by row."""
    import duckdb

    connection = duckdb.connect()
    connection.register("t", table)
    columns = ", ".join(f"TRY({e}) AS c{i}" for i, e in enumerate(expressions))
    sql = f"SELECT {columns} FROM t ORDER BY id"
    if filters:  # as the engine runs them: in WHERE (DuckDB's optimizer rewrites a filter's comparisons)
        kept = [
            [row[0] for row in connection.execute(f"SELECT id FROM t WHERE TRY({condition}) ORDER BY id").fetchall()]
            for condition in expressions
        ]
    else:
        duck = connection.execute(sql).fetchall()
    types = _spark_types(table, spark)
    text = to_dialect(sql, "spark", rewrite=lambda tree: spark_semantics(tree, types))
    view = f"__dpkit_extra_{abs(hash(tuple(expressions)))}"
    _spark_from_arrow(spark, table).createOrReplaceTempView(view)
    previous = spark.conf.get("spark.sql.ansi.enabled", None)
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        got = [tuple(row) for row in spark.sql(text.replace(" FROM t ", f" FROM {view} ")).collect()]
    finally:
        spark.catalog.dropTempView(view)
        if previous is None:
            spark.conf.unset("spark.sql.ansi.enabled")
        else:
            spark.conf.set("spark.sql.ansi.enabled", previous)

    def same(value):
        if isinstance(value, float) and math.isnan(value):
            return "nan"
        return value.normalize() if isinstance(value, decimal.Decimal) else value

    for i, expression in enumerate(expressions):
        if filters:
            assert [row for row, values in enumerate(got) if values[i] is True] == kept[i], expression
        else:
            assert [same(row[i]) for row in got] == [same(row[i]) for row in duck], expression


def _pair(spark, table, **options):
    options = {"name": "t", "privacy_unit": "pid", "budget": BUDGET, **options}
    return E.Session.from_arrow(table, **options), E.Session.from_arrow(table, backend=SparkBackend(spark), **options)


def _rows(result):
    return sorted(zip(result.keys, *result.columns.values(), strict=True), key=repr)


# -- 1. integer overflow in filters ---------------------------------------------------------------

INTEGERS = pa.table(
    {
        "id": pa.array(range(8), pa.int64()),
        "a8": pa.array([100, -128, 127, 0, None, -5, 64, 1], pa.int8()),
        "a16": pa.array([30000, -32768, 1, 0, None, -5, 200, 2], pa.int16()),
        "a32": pa.array([2_000_000_000, -(2**31), 2**31 - 1, 0, None, -5, 70_000, 3], pa.int32()),
        "a64": pa.array([9 * 10**18, -(2**63), 2**63 - 1, 0, None, -5, 2**40, 4], pa.int64()),
        "f": pa.array([7.5, -7.5, 1e300, 0.0, None, math.nan, 2.0, -0.0], pa.float64()),
        "d": pa.array([decimal.Decimal(v) for v in ["1.50", "2", "0", "3", "4", "5", "6", "7"]], pa.decimal128(9, 2)),
        "s": pa.array(["abc", "", "xxxxx", "1", None, "-5", "xy", "z"]),
    }
)


def test_integer_overflow_in_filters_gives_duckdbs_rows(spark):
    """DuckDB fails integer arithmetic that overflows its type (and // or % by zero), and the filter's TRY
    leaves the row out; Spark (ANSI mode off) wrapped around: a8 + a8 gave -56 for 100, -a32 of -2^31
    stayed negative, length(s) * 2000000000 wrapped an INT, a8 // 0 was NULL. DuckDB's optimizer first
    moves constants across comparisons (a64 * 3e18 > 0 is a64 > 0, exact), drops x OR TRUE unread, and
    keeps typing literals its own way; the Spark text now does the same, then checks the rest."""
    conditions = [
        "a8 + a8 > 0",
        "(a8 + a8) IS NULL",
        "coalesce(a8 + a8, 0) = 0",
        "a8 * 2 > 1",
        "-a8 >= -128",
        "abs(a32) > 0",
        "a8 // -1 > 0",
        "a8 % -1 = 0",
        "a8 // 0 IS NULL",
        "a32 % 0 IS NULL",
        "a64 // -1 > 0",
        "a32 + 2000000000 > 0",
        "a32 * a32 > 0",
        "a64 + a64 > 0",
        "a64 * 3000000000000000000 > 0",
        "a64 * 3000000000000000000 > 1",
        "a64 - 1 < 0",
        "-a64 > 0",
        "a32 * 3000000000000000000 > 0",
        "length(s) * 2000000000 > 0",
        "length(s) * 9223372036854775807 > 1",
        "sign(a32) * 100 + 100 > 0",
        "100 + a8 + 100 > 0",
        "a8 - 100 = 100",
        "a8 + a8 > 0 OR TRUE",
        "CASE WHEN a8 < 0 THEN a8 + a8 ELSE 0 END = 0",
        "CASE WHEN a8 > 0 THEN 1 ELSE a8 * a8 END IS NULL",
        "CAST(a32 + 0 AS TINYINT) IS NULL",
        "CAST(a32 * 2 AS SMALLINT) IS NULL",
        "CAST(a8 AS UTINYINT) IS NULL",
        "round(a8, -1) IS NULL",
        "a32 > -10000000000000000000",
        "-(-2147483648) < a8",
        "a16 * a16 + a8 < 0",
        "(a64 * a16) * (0 * a64) IS NULL",
        # Not integers: a DOUBLE or DECIMAL // divides without rounding (and fails by zero); x % 0
        # of a DOUBLE is NaN; DOUBLE overflow is left alone (inf in both).
        "f // 2 = 3.75",
        "f // 0 IS NULL",
        "f % 0 IS NULL",
        "d // 0 IS NULL",
        "d % 0 IS NULL",
        "f * 1e300 > 0",
    ]
    _compare(spark, INTEGERS, conditions)


def test_overflow_in_a_released_filter_leaves_the_rows_duckdb_leaves(spark):
    """End to end (noiseless aggregates of the same plan): Spark counted the rows whose overflow wrapped."""
    duck, on_spark = _pair(spark, INTEGERS, privacy_unit=None)
    for condition, expected in [("a8 + a8 > 0", 1), ("(a64 + a64) IS NULL", 1), ("a64 * 3000000000000000000 > 0", 4)]:
        rows = [_rows(exact_aggregates(s, s.table().where(condition).agg(n=E.count()))[1]) for s in (duck, on_spark)]
        assert rows[0] == rows[1] and rows[0][0][1] == expected, condition


# -- 2. private keys ranked by their text ---------------------------------------------------------


def test_blob_and_interval_keys_are_written_as_duckdb_writes_them(spark):
    """Private keys are ranked by a hash of CAST(key AS VARCHAR): Spark wrote a BLOB as its bytes decoded
    as UTF-8 (every invalid byte the same replacement character) and a duration as INTERVAL '1 01:00:00'
    DAY TO SECOND, DuckDB as \\xFF escapes and 25:00:00."""
    rng = np.random.default_rng(11)
    blobs = [bytes(rng.integers(0, 256, rng.integers(0, 6)).astype(np.uint8)) for _ in range(120)]
    blobs += [b"", None, b"'\"\\ ~\x7f", b"abc"]
    blobs += [b"\x00", b"\xff\xfe", b"\\x41", b"Z"]
    micros = [int(v) for v in rng.integers(-(10**13), 10**13, 120)] + [0, 400 * 86_400 * 10**6, 59_500_000, -1]
    durations = [datetime.timedelta(microseconds=v) for v in micros] + [None] * 4
    table = pa.table(
        {
            "id": pa.array(range(len(blobs)), pa.int64()),
            "b": pa.array(blobs, pa.binary()),
            "i": pa.array(durations, pa.duration("us")),
        }
    )
    _compare(spark, table, ["CAST(b AS VARCHAR)", "CAST(i AS VARCHAR)"], filters=False)


@pytest.mark.parametrize(
    "column",
    [
        pa.array([bytes([i, 255 - i, 92, 39]) if i % 3 else b"abc" + bytes([i]) for i in range(12)] * 20, pa.binary()),
        pa.array(
            [datetime.timedelta(days=i % 3, hours=i, microseconds=7 * i) for i in range(12)] * 20, pa.duration("us")
        ),
    ],
    ids=["blob", "interval"],
)
def test_blob_and_interval_private_keys_select_the_groups_duckdb_selects(spark, column):
    """People in several groups kept other groups on Spark (the ranking text differed), so the aggregates
    differed; now the same groups are kept and released with the same values."""
    table = pa.table({"pid": pa.array(np.arange(240) % 9, pa.int64()), "k": column})
    duck, on_spark = _pair(spark, table)
    for g in (1, 2):
        results = [
            _rows(
                exact_aggregates(
                    s,
                    s.table().group_by("k").bound(rows_per_group=3, groups_per_person=g).agg(n=E.count()),
                    epsilon=1.0,
                    delta=1e-6,
                )[1]
            )
            for s in (duck, on_spark)
        ]
        assert results[0] == results[1]
        assert {type(key[0][0]) for key in results[1]} == {type(key[0][0]) for key in results[0]}


@pytest.mark.parametrize(
    ("column", "kind"),
    [
        (pa.array(np.array([0.1, 1e20, 1 / 3, 4096378.25, 2.5, -7.0] * 20, dtype=np.float32)), "FLOAT"),
        (
            pa.array(
                [datetime.datetime(2021, 1, 1, h, tzinfo=datetime.UTC) for h in range(6)] * 20,
                pa.timestamp("us", tz="UTC"),
            ),
            "TIMESTAMP WITH TIME ZONE",
        ),
    ],
    ids=["float", "timestamptz"],
)
def test_float_and_zoned_timestamp_private_keys_are_refused_on_spark(spark, column, kind):
    """DuckDB writes some FLOATs with their DOUBLE digits (4096378.25, where the shortest is 4096378.2), and
    a zoned timestamp in its own time zone with an offset; Spark ranked (and returned) them its own way,
    keeping other groups. They are refused on Spark, naming the column, before anything is spent; public
    keys (ranked in Python) still run."""
    table = pa.table({"pid": pa.array(np.arange(120) % 7, pa.int64()), "Key": column})
    _, on_spark = _pair(spark, table)
    before = on_spark.remaining
    with pytest.raises(dpkit.InvalidParameterError, match=rf"group_by: got 'Key'; is a {kind}"):
        on_spark.release(
            on_spark.table().group_by("Key").bound(groups_per_person=2).agg(n=E.count()), epsilon=1.0, delta=1e-6
        )
    assert on_spark.remaining == before
    keys = sorted(set(column.to_pylist()), key=repr)[:3]
    result = on_spark.release(
        on_spark.table().group_by("Key", keys=keys).bound(groups_per_person=2).agg(n=E.count()), epsilon=1.0
    )
    assert len(result.columns["n"]) == 3


# -- 3. text compared with, or cast to, other types -------------------------------------------------

TEXTS = [
    "1e3", " 12 ", "+5", "0x1F", "0b101", "1_000", "1.5", "2.5", "-2.5", "1e400", "", "١٢", "１２", "5.", ".5", "12abc",
    "\t12\n", "007", "1__0", "_1", "1e1_0", "-0x10", "0x1_F", "1.2_5", "inf", "-Infinity", "nan", "0x1p3", "1.5f",
    "1.5d", "true", "t", "yes", "y", "1", "on", " true ", "TRUE", "no", "0", "off", "9223372036854775808", None,
]  # fmt: skip


def test_text_is_cast_as_duckdb_reads_it(spark):
    """Casts of text: DuckDB reads 0x1F, 0b101, 1_000 and 1e1_0 and rounds '2.5' to 3; it refuses Unicode
    digits, '1.5d', '0x1p3' and ' true ', which Spark read (and '0x1F', '1_000' it did not)."""
    table = pa.table({"id": pa.array(range(len(TEXTS)), pa.int64()), "s": pa.array(TEXTS)})
    targets = ["TINYINT", "INTEGER", "BIGINT", "UTINYINT", "HUGEINT", "DOUBLE", "FLOAT", "DECIMAL(10, 2)", "BOOLEAN"]
    _compare(spark, table, [f"CAST(s AS {target})" for target in targets], filters=False)


STRINGS = pa.table(
    {
        "id": pa.array(range(9), pa.int64()),
        "s": pa.array(["10", "1_0", " 5 ", "5.0", "abc", "1e3", "", None, "true"]),
        "i": pa.array([10, 9, 5, 5, 0, 1000, 0, None, 1], pa.int32()),
        "b": pa.array([True, False, True, False, True, False, True, None, True]),
        "d": pa.array([datetime.date(2020, 1, i + 1) for i in range(8)] + [None], pa.date32()),
    }
)


def test_text_compared_with_other_types_gives_duckdbs_rows(spark):
    """DuckDB casts text beside a number, a boolean or a date to that type (s = 10 reads '1_0' as 10, '1e3' =
    1000; i > 'x' fails, so the whole filter is NULL); Spark cast it its own way ('1_0' NULL, ' true '
    TRUE, 'x' NULL alone)."""
    conditions = [
        "s = 10",
        "s IN (10, 5)",
        "s = 1000",
        "s = i",
        "nullif(s, 10) IS NULL",
        "s = TRUE",
        "i = '1_0'",
        "i IN ('10', '0x9')",
        "b = ' true '",
        "b = 'yes'",
        "s = 'abc' OR i > 'x'",
        "d > '2020-1-3'",
        "d < '2020-01-05 12:00:00'",
        "'10' > 9",
    ]
    _compare(spark, STRINGS, conditions)


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        # DuckDB's binder refuses these: Spark cast the text its own way and answered.
        ("s < 10", "Cannot compare values of type VARCHAR"),
        ("i + '1' > 10", "Binder Error"),
        ("i LIKE '1%'", "Binder Error"),
        ("coalesce(s, 0) = 10", "Binder Error"),
        # Dates and times from text: the engines read different forms ('2020/01/01', 'epoch',
        # '2020-01-01 24:00:00'), Spark's TIME is a TIMESTAMP, and a zone is read in another time zone.
        ("CAST(s AS DATE) = DATE '2020-01-01'", "read dates and times from text differently"),
        ("s = d", "read dates and times from text differently"),
        ("d = '2020/01/01'", "write dates as 'YYYY-MM-DD'"),
        ("CAST(d AS TIME) IS NULL", "no TIME type"),
        ("CAST(s AS TIMESTAMPTZ) IS NULL", "no TIMESTAMPTZ type"),
    ],
)
def test_text_spark_cannot_read_as_duckdb_is_refused_before_spending(spark, condition, message):
    """Refused on Spark (a typed error naming the filter), with nothing spent."""
    _, on_spark = _pair(spark, STRINGS, privacy_unit=None)
    before = on_spark.remaining
    with pytest.raises(dpkit.InvalidParameterError, match=message):
        on_spark.release(on_spark.table().where(condition).agg(n=E.count()), epsilon=1.0)
    assert on_spark.remaining == before


@pytest.mark.parametrize("kind", ["pandas", "arrow", "polars"])
def test_dates_duckdb_cannot_hold_are_null_on_spark_too(spark, kind):
    """A frame's instant past DuckDB's microsecond range reads as NULL on both engines (Spark's
    import refused the whole frame before), so both release the same rows."""
    from engine_fixtures import far_instants

    source, opener = far_instants(kind)
    options = {"name": "t", "privacy_unit": "pid", "budget": dpkit.ApproxDP(10, 1e-3)}
    duck, on_spark = opener(source, **options), opener(source, backend=SparkBackend(spark), **options)
    rows = [
        sorted(
            exact_aggregates(session, session.table().group_by("c").agg(n=E.count()), epsilon=1.0, delta=1e-6)[1].keys,
            key=repr,
        )
        for session in (duck, on_spark)
    ]
    assert rows[0] == rows[1]
    assert (None,) in rows[0] and len(rows[0]) == 3
