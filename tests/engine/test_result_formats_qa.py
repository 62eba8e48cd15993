"""A Result's outputs agree: to_dict is strict, lossless JSON; the frames' types do not depend on the rows.

Before: to_dict held date and Decimal objects (json.dumps failed) and turned NaN keys into None
(a NaN group and a NULL group looked alike); to_arrow / to_pandas / to_polars inferred the key
types from the values when there were rows (INTEGER -> int64, DECIMAL(10,2) -> decimal128(3, 2),
TIMESTAMP_NS -> microseconds) but took them from the column types when there were none; and
assigning an attribute raised FrozenInstanceError where the README promises TypeError.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import decimal
import json
import math
import pickle
import uuid
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import dpkit
from dpkit import engine as E
from dpkit.engine._result import Result, json_value
from dpkit.noise import InsecureSeededRandom

PEOPLE = 40
NAN, INF = float("nan"), float("inf")
TOKEN = uuid.UUID("0123abcd-0000-4000-8000-00000000ffff")


def _column(values: list[Any], kind: pa.DataType) -> pa.Array:
    return pa.array([values[i % len(values)] for i in range(PEOPLE)], kind)


TABLE = pa.table(
    {
        "pid": pa.array(range(PEOPLE), pa.int64()),
        "i32": _column([1, 2], pa.int32()),
        "i64": _column([1, 2**40], pa.int64()),
        "f": _column([1.5, NAN, INF, -INF, None], pa.float64()),
        "dec": _column([decimal.Decimal("1.50"), decimal.Decimal("2.25")], pa.decimal128(10, 2)),
        "s": _column(["a", "NaN"], pa.string()),
        "b": _column([True, False], pa.bool_()),
        "d": _column([dt.date(2024, 1, 31), dt.date(2024, 2, 1)], pa.date32()),
        "ts": _column([dt.datetime(2024, 1, 31, 10, 0, 0, 5), dt.datetime(2024, 2, 1)], pa.timestamp("us")),
        "tsns": _column([1_700_000_000_123_456_789, 0], pa.timestamp("ns")),
        "t": _column([dt.time(1, 2, 3, 4), dt.time(23, 59)], pa.time64("us")),
        "blob": _column([b"\x00\xff", b"A"], pa.binary()),
        "iv": _column([dt.timedelta(days=1, microseconds=5), dt.timedelta(seconds=-1)], pa.duration("us")),
        "x": pa.array(np.linspace(0.0, 1.0, PEOPLE)),
    }
)


def _session() -> E.Session:
    return E.Session.from_arrow(TABLE, name="t", privacy_unit="pid", budget=dpkit.ApproxDP(1e9, 0.5))


def _uuid_session() -> E.Session:
    frame = pd.DataFrame({"pid": range(PEOPLE), "u": [TOKEN] * PEOPLE, "x": np.linspace(0.0, 1.0, PEOPLE)})
    return E.Session.from_pandas(frame, name="t", privacy_unit="pid", budget=dpkit.ApproxDP(1e9, 0.5))


def _release(session: E.Session, query: Any) -> Result:
    return session.release(query, epsilon=1e4, delta=1e-3, rng=InsecureSeededRandom(0), bounds={"x": (0, 1)})


def _strict(summary: dict[str, Any]) -> Any:
    """``summary`` through RFC 8259 JSON: NaN, Infinity and non-JSON objects are refused."""
    return json.loads(json.dumps(summary, allow_nan=False))


# -- to_dict is strict JSON, lossless and unambiguous ---------------------------------------------

# Public keys (column, keys, how to_dict writes them): each type the engine takes keys of.
PUBLIC = [
    ("i32", [1, 2, None], [1, 2, None]),
    ("i64", [2**40, np.int64(1)], [2**40, 1]),
    ("f", [1.5, NAN, INF, -INF, None], [1.5, "NaN", "Infinity", "-Infinity", None]),
    ("dec", [decimal.Decimal("1.50"), 2.25, 3, None], ["1.50", "2.25", "3.00", None]),
    ("s", ["a", "NaN", None], ["a", "NaN", None]),
    ("b", [True, False, None], [True, False, None]),
    ("d", [dt.date(2024, 1, 31), None], ["2024-01-31", None]),
    ("ts", [dt.datetime(2024, 1, 31, 10, 0, 0, 5)], ["2024-01-31T10:00:00.000005"]),
    ("tsns", [pd.Timestamp(1_700_000_000_123_456_789)], ["2023-11-14T22:13:20.123456789"]),
    ("t", [dt.time(1, 2, 3, 4)], ["01:02:03.000004"]),
    ("blob", [b"\x00\xff", b"A"], ["00ff", "41"]),
]


@pytest.mark.parametrize(("column", "keys", "expected"), PUBLIC, ids=[case[0] for case in PUBLIC])
def test_to_dict_is_strict_json_and_writes_public_keys_losslessly(column, keys, expected):
    session = _session()
    result = _release(session, session.table().group_by(column, keys=keys).agg(n=E.count(), m=E.median("x")))
    summary = result.to_dict()
    assert _strict(summary) == summary
    assert [row[column] for row in summary["rows"]] == expected
    assert summary["group_types"] == {column: session.columns[column].type}
    # released values stay numbers (a count an integer); a quantile's interval ends (NaN) are null
    assert all(type(row["n"]) is int and type(row["n_high"]) is int for row in summary["rows"])
    assert all(isinstance(row["m"], float) and row["m_low"] is None for row in summary["rows"])
    assert summary["value_types"] == {"n": "BIGINT", "n_low": "BIGINT", "n_high": "BIGINT"}


def test_a_nan_key_and_a_null_key_stay_distinct_in_to_dict():
    session = _session()
    result = _release(session, session.table().group_by("f", keys=[1.5, NAN, None]).agg(n=E.count()))
    keys = [row["f"] for row in result.to_dict()["rows"]]
    assert keys == [1.5, "NaN", None]
    assert len(set(map(repr, keys))) == 3


PRIVATE = [
    ("f", "DOUBLE", {1.5, "NaN", "Infinity", "-Infinity", None}),
    ("dec", "DECIMAL(10,2)", {"1.50", "2.25"}),
    ("d", "DATE", {"2024-01-31", "2024-02-01"}),
    ("ts", "TIMESTAMP", {"2024-01-31T10:00:00.000005", "2024-02-01T00:00:00"}),
    ("t", "TIME", {"01:02:03.000004", "23:59:00"}),
    ("blob", "BLOB", {"00ff", "41"}),
    ("iv", "INTERVAL", {"P1DT0H0M0.000005S", "-P0DT0H0M1S"}),
]


@pytest.mark.parametrize(("column", "kind", "expected"), PRIVATE, ids=[case[0] for case in PRIVATE])
def test_to_dict_writes_keys_the_backend_gives_back_as_strict_json(column, kind, expected):
    session = _session()
    result = _release(session, session.table().group_by(column).agg(n=E.count()))
    summary = result.to_dict()
    assert _strict(summary) == summary
    assert {row[column] for row in summary["rows"]} == expected
    assert summary["group_types"] == {column: kind}


def test_uuid_keys_are_canonical_text_whether_public_or_selected():
    session = _uuid_session()
    selected = _release(session, session.table().group_by("u").agg(n=E.count()))
    public = _release(session, session.table().group_by("u", keys=[str(TOKEN), None]).agg(n=E.count()))
    assert [row["u"] for row in _strict(selected.to_dict())["rows"]] == [str(TOKEN)]
    assert [row["u"] for row in _strict(public.to_dict())["rows"]] == [str(TOKEN), None]
    assert selected.to_arrow().schema.field("u").type == public.to_arrow().schema.field("u").type == pa.uuid()


def test_binned_keys_are_text_in_to_dict():
    session = _session()
    result = _release(session, session.table().group_by(bins={"x": [0, 0.5, 1]}).agg(n=E.count()))
    summary = _strict(result.to_dict())
    assert [row["x_bin"] for row in summary["rows"]] == ["[0, 0.5)", "[0.5, 1]"]
    assert summary["group_types"] == {"x_bin": "VARCHAR"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (np.int32(7), 7),
        (np.bool_(True), True),
        (2**80, 2**80),
        (np.float32(0.5), 0.5),
        (decimal.Decimal("1E+2"), "100"),
        (decimal.Decimal("0E-10"), "0.0000000000"),
        (dt.datetime(2024, 1, 31, 10, tzinfo=dt.UTC), "2024-01-31T10:00:00+00:00"),
        (pd.Timestamp("2024-01-31 00:00:00.000000001"), "2024-01-31T00:00:00.000000001"),
        (np.datetime64("2024-01-31T00:00:00.000000001"), "2024-01-31T00:00:00.000000001"),
        (pd.NaT, None),
        (np.datetime64("NaT"), None),
        (dt.timedelta(0), "P0DT0H0M0S"),
        (dt.timedelta(days=-1), "-P1DT0H0M0S"),
        (dt.timedelta(hours=25, minutes=3, seconds=4, microseconds=500_000), "P1DT1H3M4.5S"),
        (pd.Timedelta(nanoseconds=-1), "-P0DT0H0M0.000000001S"),
        (np.timedelta64(90, "s"), "P0DT0H1M30S"),
        (TOKEN, str(TOKEN)),
        (bytearray(b"\x01\xab"), "01ab"),
        ({1: (NAN, [INF])}, {"1": [None, [None]]}),
    ],
)
def test_json_value_encodings(value, expected):
    assert json_value(value) == expected
    json.dumps(json_value(value), allow_nan=False)


def test_json_value_writes_non_finite_keys_as_strings_and_values_as_null():
    assert json_value([NAN, INF, -INF, None, -0.0], key=True) == ["NaN", "Infinity", "-Infinity", None, -0.0]
    assert json_value([NAN, INF, -INF, None], key=False) == [None, None, None, None]
    # every value the duration form writes reads back exactly (nanoseconds included)
    for nanoseconds in (1, -1, 86_400 * 10**9 + 5, -(3_600 * 10**9) - 7, 123_456_789_012_345):
        text = json_value(pd.Timedelta(nanoseconds=nanoseconds))
        assert pd.Timedelta(text).value == nanoseconds


# -- one schema, with or without rows ------------------------------------------------------------

GROUPS = ["i32", "i64", "f", "dec", "s", "b", "d", "ts", "tsns", "t", "blob", "iv"]
EXPECTED_TYPES = {
    "i32": pa.int32(),
    "i64": pa.int64(),
    "f": pa.float64(),
    "dec": pa.decimal128(10, 2),
    "s": pa.string(),
    "b": pa.bool_(),
    "d": pa.date32(),
    "ts": pa.timestamp("us"),
    "tsns": pa.timestamp("ns"),
    "t": pa.time64("us"),
    "blob": pa.binary(),
    "iv": pa.duration("us"),
}


def _with_and_without_rows(session: E.Session, group: Any) -> tuple[Result, Result]:
    def query(table: Any) -> Any:
        # (bins alone are public keys: with a private key column beside them, none may be selected)
        grouped = table.group_by("s", bins={"x": [0, 0.5, 1]}) if group == "bins" else table.group_by(group)
        return grouped.agg(n=E.count(), m=E.quantiles("x", [0.25, 0.75]))

    full = _release(session, query(session.table()))
    empty = _release(session, query(session.table().where("pid < 0")))
    assert len(full) > 0 and len(empty) == 0
    return full, empty


@pytest.mark.parametrize("column", [*GROUPS, "bins"])
def test_the_frames_have_the_same_types_with_and_without_rows(column):
    full, empty = _with_and_without_rows(_session(), column)
    schema = full.to_arrow().schema
    assert schema == empty.to_arrow().schema
    key = "x_bin" if column == "bins" else column
    assert schema.field(key).type == (pa.string() if column == "bins" else EXPECTED_TYPES[column])
    keys = {key, "s"} if column == "bins" else {key}
    counts = {name for name in schema.names if name.split("_")[0] == "n"} - keys
    assert counts and all(schema.field(name).type == pa.int64() for name in counts)
    assert all(schema.field(name).type == pa.float64() for name in schema.names if name not in keys | counts)
    assert full.to_polars().schema == empty.to_polars().schema == pl.from_arrow(schema.empty_table()).schema
    assert dict(full.to_pandas().dtypes) == dict(empty.to_pandas().dtypes)


def test_a_uuid_key_column_has_one_type_with_and_without_rows():
    full, empty = _with_and_without_rows(_uuid_session(), "u")
    assert full.to_arrow().schema == empty.to_arrow().schema
    assert full.to_arrow().schema.field("u").type == pa.uuid()


def test_public_keys_written_differently_convert_to_the_column_type():
    # a DECIMAL(10,2) column's keys given as a float, an int and a Decimal of another scale;
    # TIMESTAMP_NS keys that differ by one nanosecond (microseconds would merge them)
    session = _session()
    decimals = _release(
        session, session.table().group_by("dec", keys=[1.5, 2, decimal.Decimal("2.250")]).agg(n=E.count())
    )
    assert decimals.to_arrow().column("dec").to_pylist() == [decimal.Decimal(v) for v in ("1.50", "2.00", "2.25")]
    assert decimals.to_arrow().schema.field("dec").type == pa.decimal128(10, 2)
    instants = [pd.Timestamp(1_700_000_000_123_456_789), pd.Timestamp(1_700_000_000_123_456_788)]
    stamps = _release(session, session.table().group_by("tsns", keys=instants).agg(n=E.count()))
    assert stamps.to_arrow().column("tsns").to_pylist() == instants
    assert stamps.to_polars()["tsns"].dt.nanosecond().to_list() == [123_456_789, 123_456_788]


@pytest.mark.parametrize("column", GROUPS)
def test_pandas_arrow_polars_and_to_dict_agree(column):
    session = _session()
    result = _release(session, session.table().group_by(column).agg(n=E.count()))
    table = result.to_arrow()
    summary = result.to_dict()
    for name in result.columns:
        from_arrow = [json_value(value, key=name == column) for value in table.column(name).to_pylist()]
        assert [row[name] for row in summary["rows"]] == from_arrow
    assert result.to_polars().equals(pl.from_arrow(table))
    assert result.to_pandas().equals(table.to_pandas())
    polars_keys = result.to_polars()[column].to_list()
    if column == "f":  # pandas cannot hold a NaN key apart from a NULL one; Arrow and Polars do
        assert sum(1 for v in polars_keys if v is None) == 1
        assert sum(1 for v in polars_keys if isinstance(v, float) and math.isnan(v)) == 1


# -- read-only ---------------------------------------------------------------------------------


def _small_result() -> Result:
    session = _session()
    return _release(session, session.table().group_by("s", keys=["a"]).agg(n=E.count()))


@pytest.mark.parametrize(
    "name", [field.name for field in dataclasses.fields(Result)] + ["not_a_field", "__dict__", "__class__"]
)
def test_assigning_or_deleting_any_attribute_raises_type_error(name):
    result = _small_result()
    before = result.to_dict()
    with pytest.raises(TypeError, match="read-only"):
        setattr(result, name, None)
    with pytest.raises(TypeError, match="read-only"):
        delattr(result, name)
    assert result.to_dict() == before


def test_a_read_only_result_still_copies_pickles_and_replaces():
    result = _small_result()
    for twin in (copy.copy(result), copy.deepcopy(result), pickle.loads(pickle.dumps(result))):
        assert twin == result and twin.to_dict() == result.to_dict()
        with pytest.raises(TypeError, match="read-only"):
            twin.alpha = 0.5  # type: ignore[misc]
    changed = dataclasses.replace(result, alpha=0.5)
    assert changed.alpha == 0.5 and result.alpha != 0.5


def test_counts_are_int64_and_fall_back_to_float64_only_beyond_two_to_the_63():
    session = _session()
    counted = _release(session, session.table().agg(n=E.count()))
    assert counted.value_types == {"n": "BIGINT", "n_low": "BIGINT", "n_high": "BIGINT"}
    assert all(type(counted.columns[name][0]) is int for name in ("n", "n_low", "n_high"))
    assert str(counted.to_pandas()["n"].dtype) == "int64"
    # At epsilon 1e-30 the count's noise (scale 1e30) is beyond int64: floats, typed DOUBLE.
    huge = session.table().agg(n=E.count()).release(epsilon=1e-30, rng=InsecureSeededRandom(3))
    assert huge.value_types == {} and all(type(huge.columns[n][0]) is float for n in ("n", "n_low", "n_high"))
    assert huge.to_arrow().schema.field("n_high").type == pa.float64() and huge.columns["n_high"][0] > 2.0**63
