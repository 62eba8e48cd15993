"""Column types whose values could fail a query after its debit are refused before it.

Each case once failed after the debit, and whether it failed depended on one row: a WHERE
condition that is a column of another type than BOOLEAN (DuckDB casts it outside the condition's
TRY), a SUM over a LIST column (typed numeric by the prefix of its type's name), and public keys
that do not parse as the column's type (UUID text, INTERVAL text, text keys on BLOB).
"""

from __future__ import annotations

import datetime as dt
import uuid

import pyarrow as pa
import pytest

import dpkit
from dpkit import engine as E
from dpkit._errors import InvalidParameterError
from dpkit.noise import InsecureSeededRandom

TOKEN = uuid.UUID(int=1)


def _table(note: str) -> pa.Table:
    return pa.table(
        {
            "p": [1, 2, 3],
            "name": ["Alice", "Bob", "Carol"],
            "note": ["true", "false", note],
            "flag": [True, False, None],
            "badge": pa.array([b"\x01", None, b"\x02"], pa.binary()),
            "tok": pa.ExtensionArray.from_storage(pa.uuid(), pa.array([TOKEN.bytes] * 3, pa.binary(16))),
            "wait": pa.array([dt.timedelta(days=1)] * 3, pa.duration("us")),
            "scores": pa.array([[1, 2], None, [3]], pa.list_(pa.int64())),
        }
    )


def _session(note: str = "secret") -> E.Session:
    return E.Session.from_arrow(_table(note), name="t", privacy_unit="p", budget=dpkit.ApproxDP(100, 1e-3))


def _refused(session: E.Session, run, match: str) -> None:
    before = session.remaining
    with pytest.raises(InvalidParameterError, match=match):
        run()
    assert session.remaining == before


@pytest.mark.parametrize("note", ["true", "secret"])
@pytest.mark.parametrize("condition", ["note", "name = 'Alice' AND badge", "tok", "wait AND flag", "scores"])
def test_a_condition_that_is_not_boolean_is_refused_whatever_the_rows(note, condition):
    session = _session(note)
    sql = f"SELECT COUNT(*) AS n FROM t WHERE {condition}"
    _refused(session, lambda: session.sql(sql, epsilon=1.0), "not BOOLEAN")


def test_boolean_conditions_still_run():
    session = _session()
    for condition in ("flag", "NOT flag", "note = 'true'", "badge IS NULL", "flag AND name = 'Alice'", "NULL"):
        session.sql(f"SELECT COUNT(*) AS n FROM t WHERE {condition}", epsilon=1.0, rng=InsecureSeededRandom(0))
    session.table().where("flag").agg(n=E.count()).release(epsilon=1.0, rng=InsecureSeededRandom(0))


def test_the_builder_refuses_a_text_condition():
    session = _session()
    query = session.table().where("note").agg(n=E.count())
    _refused(session, lambda: query.release(epsilon=1.0), "not BOOLEAN")


@pytest.mark.parametrize("aggregate", ["SUM", "AVG", "MEDIAN"])
def test_a_list_column_is_not_numeric(aggregate):
    session = _session()
    assert not session.columns["scores"].numeric and not session.columns["scores"].integer
    sql = f"SELECT {aggregate}(scores) AS x FROM t"
    _refused(session, lambda: session.sql(sql, epsilon=1.0, bounds={"scores": (0, 10)}), "scores")


@pytest.mark.parametrize(
    ("column", "keys", "match"),
    [
        ("tok", ["not-a-uuid"], "a key must be str"),
        ("tok", [TOKEN], "has type UUID"),
        ("tok", [1], "has type int"),
        ("wait", ["soon"], "takes no public keys"),
        ("wait", [dt.timedelta(days=1)], "takes no public keys"),
        ("badge", [b"\x01", "x"], "has type str"),
        ("scores", [[1, 2]], "must be scalars"),
        ("scores", [(1, 2)], "group by scalar columns"),
    ],
)
def test_public_keys_that_the_column_cannot_hold_are_refused(column, keys, match):
    session = _session()
    sql = f"SELECT {column}, COUNT(*) AS n FROM t WHERE name = 'Alice' GROUP BY {column}"
    _refused(session, lambda: session.sql(sql, keys={column: keys}, epsilon=1.0), match)


def test_public_keys_of_uuid_and_blob_columns_match_their_rows():
    session = E.Session.from_arrow(_table("x"), name="t", privacy_unit="p", budget=dpkit.ApproxDP(1e9, 1e-3))
    for column, keys in (("tok", [str(TOKEN), str(uuid.UUID(int=2)).upper()]), ("badge", [b"\x01", b"\x03"])):
        result = session.sql(
            f"SELECT {column}, COUNT(*) AS n FROM t GROUP BY {column}",
            keys={column: keys},
            epsilon=1e8,
            rng=InsecureSeededRandom(0),
        )
        counts = dict(zip(result.columns[column], result.columns["n"], strict=True))
        assert counts == {keys[0]: 3 if column == "tok" else 1, keys[1]: 0}


FAR = 10**17  # seconds after 1970: past DuckDB's microsecond TIMESTAMP


@pytest.mark.parametrize(
    "column",
    [
        pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int32()), pa.array([FAR, 5], pa.timestamp("s"))),
        pa.DictionaryArray.from_arrays(pa.array([1, 1], pa.int32()), pa.array([FAR, 5], pa.duration("s"))),
        pa.StructArray.from_arrays([pa.array([FAR, 5], pa.timestamp("s"))], ["at"]),
        pa.array([[dt.time(1)], None], pa.list_(pa.time64("us"))),  # (fits: opens)
        pa.array([[FAR], [5]], pa.list_(pa.timestamp("ms"))),
    ],
    ids=["dictionary", "unused-dictionary-duration", "struct", "list-fits", "list"],
)
def test_a_far_instant_inside_a_nested_column_is_refused_when_the_session_opens(column, tmp_path):
    import pyarrow.parquet as pq

    table = pa.table({"p": [1, 2], "c": column})
    fits = pa.types.is_list(column.type) and pa.types.is_time(column.type.value_type)
    if fits:
        session = E.Session.from_arrow(table, privacy_unit="p", budget=dpkit.PureDP(1.0))
        session.sql("SELECT COUNT(*) AS n FROM data WHERE c IS NOT NULL", epsilon=0.5)
        return
    with pytest.raises(InvalidParameterError, match="date or time DuckDB cannot hold"):
        E.Session.from_arrow(table, privacy_unit="p", budget=dpkit.PureDP(1.0))
    if pa.types.is_list(column.type):  # (Parquet stores timestamps in ms at the coarsest)
        pq.write_table(table, tmp_path / "far.parquet")
        with pytest.raises(InvalidParameterError, match="holds a date or time"):
            E.Session.from_parquet(tmp_path / "far.parquet", privacy_unit="p", budget=dpkit.PureDP(1.0))


def test_pandas_categoricals_and_arrow_dtypes_of_far_instants():
    import numpy as np
    import pandas as pd

    categorical = pd.DataFrame({"p": [1, 2], "t": pd.Categorical(np.array([FAR, 5], dtype="datetime64[s]"))})
    with pytest.raises(InvalidParameterError, match="date or time DuckDB cannot hold"):
        E.Session.from_pandas(categorical, privacy_unit="p", budget=dpkit.PureDP(1.0))
    arrow_backed = pd.Series(pd.arrays.ArrowExtensionArray(pa.array([FAR, 5, None], pa.timestamp("s"))))
    session = E.Session.from_pandas(
        pd.DataFrame({"p": [1, 2, 3], "t": arrow_backed}), privacy_unit="p", budget=dpkit.PureDP(1.0)
    )
    rows = session._backend._connection.execute("SELECT p, t FROM data ORDER BY p").fetchall()
    assert rows == [(1, None), (2, dt.datetime(1970, 1, 1, 0, 0, 5)), (3, None)]  # the far one is NULL
    session.sql(
        "SELECT t, COUNT(*) AS n FROM data GROUP BY t", epsilon=0.5, delta=0, keys={"t": [dt.datetime(1970, 1, 1)]}
    )


def _interval_counts(with_x: bool, salt: str) -> dict[str, float]:
    from dpkit.engine._compiler import aggregation_plan, compile_query, parse_request

    day, day_as_hours, two_days = (
        pa.MonthDayNano([0, 1, 0]),
        pa.MonthDayNano([0, 0, 86_400 * 10**9]),
        pa.MonthDayNano([0, 2, 0]),
    )
    persons = [p for p in range(50) for _ in range(2)]
    values = [day, two_days] * 50
    if with_x:  # person X: one row, '24:00:00', the same interval as '1 day'
        persons, values = [999, *persons], [day_as_hours, *values]
    table = pa.table({"p": persons, "i": pa.array(values, pa.month_day_nano_interval())})
    session = E.Session.from_arrow(table, name="t", privacy_unit="p", budget=dpkit.ApproxDP(10, 1e-3))
    query = session.table().group_by("i").bound(rows_per_group=1, groups_per_person=1).agg(n=E.count())
    compiled = compile_query(query.plan, session._context(), parse_request(session.budget, epsilon=1.0, delta=1e-6))
    result = session._backend.run(aggregation_plan(compiled, {}, salt))
    return {str(key[0]): rows for key, rows in zip(result.keys, result.columns["rows"], strict=True)}


def test_equal_intervals_spelled_differently_are_one_group_that_no_person_can_reorder():
    for n in range(20):  # (before: salt4 moved 50 persons to the other group)
        without, with_x = _interval_counts(False, f"salt{n}"), _interval_counts(True, f"salt{n}")
        groups = set(without) | set(with_x)
        assert max(abs(without.get(g, 0) - with_x.get(g, 0)) for g in groups) <= 1


def test_intervals_read_alike_from_pandas_arrow_and_polars():
    import pandas as pd

    hours = [-1e-6 / 3600, -1, -23, 25]
    arrow = pa.table({"p": [1, 2, 3, 4], "d": pa.array([dt.timedelta(hours=h) for h in hours], pa.duration("us"))})
    sessions = [
        E.Session.from_arrow(arrow, privacy_unit="p", budget=dpkit.PureDP(1.0)),
        E.Session.from_pandas(
            pd.DataFrame({"p": [1, 2, 3, 4], "d": pd.to_timedelta(hours, unit="h")}),
            privacy_unit="p",
            budget=dpkit.PureDP(1.0),
        ),
    ]
    pl = pytest.importorskip("polars")
    sessions.append(E.Session.from_polars(pl.from_arrow(arrow), privacy_unit="p", budget=dpkit.PureDP(1.0)))
    seen = [
        s._backend._connection.execute("SELECT p, CAST(d AS VARCHAR), hour(d), day(d) FROM data ORDER BY p").fetchall()
        for s in sessions
    ]
    assert seen[0] == seen[1] == seen[2]
    assert seen[0][3] == (4, "25:00:00", 25, 0)


def test_a_nan_group_keeps_its_rows_with_public_and_private_keys():
    nan = float("nan")
    table = pa.table({"p": range(200), "g": [nan] * 100 + [1.5] * 100, "x": [80.0 + i / 10 for i in range(200)]})
    row_level = E.Session.from_arrow(table, name="t", privacy_unit=None, budget=dpkit.PureDP(1e9))
    result = row_level.table().group_by("g", keys=[float("nan"), 1.5]).agg(n=E.count())
    counts = result.release(epsilon=1e6, rng=InsecureSeededRandom(1)).columns["n"]  # (noise scale 1e-6)
    assert list(counts) == [100, 100]  # (the NaN group was released as 0: its key object differed)
    per_person = E.Session.from_arrow(table, name="t", privacy_unit="p", budget=dpkit.ApproxDP(1e9, 0.5))
    query = per_person.table().group_by("g").agg(m=E.median("x", bounds=(0, 100)), n=E.count())
    released = query.release(epsilon=1e6, delta=1e-3, rng=InsecureSeededRandom(2)).columns
    medians = {1.5 if key == 1.5 else "nan": m for key, m in zip(released["g"], released["m"], strict=True)}
    assert abs(medians["nan"] - 85.0) < 0.5 and abs(medians[1.5] - 95.0) < 0.5  # (bins of 100 / 1024)


_ZONED = """
import datetime as dt, pyarrow as pa, dpkit
from dpkit import engine as E
from dpkit.engine._compiler import aggregation_plan, compile_query, parse_request
UTC = dt.timezone.utc
stamps = [dt.datetime(2020, 1, 1, 2, tzinfo=UTC), dt.datetime(2020, 1, 1, 12, tzinfo=UTC)]
stamps.append(dt.datetime(2019, 12, 31, 23, tzinfo=UTC))
table = pa.table({"p": [1, 2, 3], "ts": pa.array(stamps, pa.timestamp("us", tz="Asia/Tokyo"))})
s = E.Session.from_arrow(table, name="t", privacy_unit="p", budget=dpkit.PureDP(1.0))
counts = []
for condition in ("hour(ts) = 2", "CAST(ts AS DATE) = '2020-01-01'", "date_trunc('day', ts) = '2020-01-01'"):
    query = s.table().where(condition).agg(n=E.count())
    compiled = compile_query(query.plan, s._context(), parse_request(s.budget, epsilon=1.0))
    counts.append(s._backend.run(aggregation_plan(compiled, {}, "salt")).columns["rows"][0])
print(counts)
"""


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata"])
def test_zoned_timestamps_are_read_in_utc_whatever_the_host_zone(zone):
    import os
    import subprocess
    import sys

    env = {**os.environ, "TZ": zone}
    output = subprocess.run([sys.executable, "-c", _ZONED], env=env, capture_output=True, text=True, check=True)
    assert output.stdout.strip() == "[1, 2, 2]"


UNSIGNED = pa.table(
    {
        "p": [1, 2, 3, 4],
        "age": pa.array([255, 7, 0, 30], pa.uint8()),
        "n16": pa.array([65535, 1, 0, 2], pa.uint16()),
        "n32": pa.array([2**32 - 1, 1, 0, 2], pa.uint32()),
        "n64": pa.array([2**63, 1, 0, 5], pa.uint64()),
    }
)


@pytest.mark.parametrize(
    ("condition", "kept"),
    [
        ("age + 1 > 0", 4),
        ("-age < 0", 3),
        ("age - 10 < 0", 2),
        ("n16 + 1 > 65535", 1),
        ("n32 * 2 > 2", 2),
        ("n64 * 2 > 1", 3),
        ("-n64 <= 0", 4),
    ],
)
@pytest.mark.parametrize("source", ["arrow", "parquet"])
def test_unsigned_arithmetic_in_a_filter_keeps_its_rows(condition, kept, source, tmp_path):
    """DuckDB kept UTINYINT through ``age + 1``: 255 + 1 overflowed, TRY made it NULL, the row was dropped."""
    if source == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(UNSIGNED, tmp_path / "t.parquet")
        session = E.Session.from_parquet(
            tmp_path / "t.parquet", name="t", privacy_unit="p", budget=dpkit.ApproxDP(1e9, 1e-3)
        )
    else:
        session = E.Session.from_arrow(UNSIGNED, name="t", privacy_unit="p", budget=dpkit.ApproxDP(1e9, 1e-3))
    assert [session.columns[c].type for c in ("age", "n16", "n32", "n64")] == [
        "SMALLINT",
        "INTEGER",
        "BIGINT",
        "DECIMAL(20,0)",
    ]
    query = session.table().where(condition).bound(1, 1).agg(n=E.count())
    result = session.release(query, epsilon=1e8, rng=InsecureSeededRandom(0))
    assert round(result.columns["n"][0]) == kept


@pytest.mark.parametrize(
    ("column", "match"),
    [
        (pa.array([1.0, 2.0], pa.float16()), "float16"),
        (pa.array([1, 2], pa.decimal256(50, 1)), "decimal128"),
        (pa.array([[1.0], []], pa.list_(pa.float16())), "float16"),
    ],
    ids=["float16", "decimal256", "list-of-float16"],
)
def test_arrow_types_duckdb_cannot_read_are_refused_naming_the_column(column, match):
    """The message was DuckDB's "Unsupported Internal Arrow Type e", with no column named."""
    with pytest.raises(InvalidParameterError, match=f"column 'x'.*{match}"):
        E.Session.from_arrow(pa.table({"p": [1, 2], "x": column}), privacy_unit="p", budget=dpkit.PureDP(1))


def test_type_text_keeps_enum_labels_and_empty_results_keep_column_types():
    """ENUM('low', 'High') was reported as ENUM('HIGH', 'LOW'); an empty result typed ENUM, UUID, BLOB,
    TIME and INTERVAL key columns as null."""
    import pandas as pd

    frame = pd.DataFrame(
        {
            "p": [1, 2, 3],
            "c": pd.Categorical(["low", "High", None]),
            "t": [dt.time(1)] * 3,
            "b": [b"x"] * 3,
            "u": [TOKEN] * 3,
            "i": [dt.timedelta(1)] * 3,
        }
    )
    session = E.Session.from_pandas(frame, name="t", privacy_unit="p", budget=dpkit.ApproxDP(100, 1e-3))
    assert session.columns["c"].type == "ENUM('High', 'low')"
    expected = {"c": pa.string(), "t": pa.time64("us"), "b": pa.binary(), "u": pa.uuid(), "i": pa.duration("us")}
    for column, kind in expected.items():
        query = session.table().where("p > 100").group_by(column).agg(n=E.count())
        result = session.release(query, epsilon=1.0, delta=1e-6, rng=InsecureSeededRandom(0))
        assert len(result) == 0
        assert result.to_arrow().schema.field(column).type == kind
