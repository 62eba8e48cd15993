"""Row-level privacy (no person column) with public group keys.

Before the fix the row-level path returned each group's value as DuckDB read it and looked the public
keys up in those values by Python equality: a key DuckDB matched but Python did not equal (a date on
a TIMESTAMP column, 0.1 on a DECIMAL, a UUID's text) was released as noise around 0 while its rows
were counted. Now both paths return each group's rank in the key list, and a row matching two keys
that the engine compares equal is counted once (the row-level sensitivity holds).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import uuid

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import dpkit
from dpkit import engine as E
from dpkit._errors import InvalidParameterError
from dpkit.engine._compiler import aggregation_plan, compile_query, histogram_plan, parse_request
from dpkit.noise import InsecureSeededRandom

UTC = dt.UTC
TOKEN = uuid.UUID(int=10)
CASES = {
    "timestamp-date-key": (pa.array([dt.datetime(2020, 1, 1)] * 3, pa.timestamp("us")), [dt.date(2020, 1, 1)]),
    "decimal-float-key": (pa.array([decimal.Decimal("0.10")] * 3, pa.decimal128(10, 2)), [0.1]),
    "zoned-naive-key": (
        pa.array([dt.datetime(2020, 1, 1, tzinfo=UTC)] * 3, pa.timestamp("us", tz="UTC")),
        [dt.datetime(2020, 1, 1)],
    ),
    "uuid-text-key": (
        pa.ExtensionArray.from_storage(pa.uuid(), pa.array([TOKEN.bytes] * 3, pa.binary(16))),
        [str(TOKEN).upper()],
    ),
}


def _session(column: pa.Array, unit: str | None) -> E.Session:
    table = pa.table({"p": [1, 2, 3], "c": column, "x": [1.0, 2.0, 4.0]})
    return E.Session.from_arrow(table, name="t", privacy_unit=unit, budget=dpkit.ApproxDP(1e9, 1e-3))


@pytest.mark.parametrize("unit", ["p", None])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_key_the_engine_matches_is_released_under_the_key_as_given(case, unit):
    column, keys = CASES[case]
    session = _session(column, unit)
    query = session.table().group_by("c", keys=keys)
    query = (query.bound(3, 1) if unit else query).agg(n=E.count(), total=E.sum("x", bounds=(0, 10)))
    result = session.release(query, epsilon=1e8, rng=InsecureSeededRandom(0))
    assert result.columns["c"] == keys
    assert round(result.columns["n"][0]) == 3
    assert round(result.columns["total"][0]) == 7


@pytest.mark.parametrize(
    ("column", "keys"),
    [
        (pa.array([dt.datetime(2020, 1, 1)] * 3, pa.timestamp("us")), [dt.date(2020, 1, 1), dt.datetime(2020, 1, 1)]),
        (
            pa.ExtensionArray.from_storage(pa.uuid(), pa.array([TOKEN.bytes] * 3, pa.binary(16))),
            [str(TOKEN), str(TOKEN).upper()],
        ),
        (pa.array([decimal.Decimal("0.10")] * 3, pa.decimal128(10, 2)), [0.1, decimal.Decimal("0.1")]),
        (
            pa.array([dt.datetime(2020, 1, 1, 12)] * 3, pa.timestamp("us")),
            [dt.datetime(2020, 1, 1, 12), dt.datetime(2020, 1, 1, 13, tzinfo=dt.timezone(dt.timedelta(hours=1)))],
        ),
        (pa.array([2.0**53] * 3), [2**53 + 1, 2.0**53]),
    ],
    ids=[
        "date-and-datetime",
        "uuid-cases",
        "float-and-decimal",
        "naive-and-aware",
        "int-and-double",
    ],
)
def test_keys_the_engine_sees_as_one_value_are_refused_before_the_debit(column, keys):
    """Counted under both keys, one row would move two released counts (row level: sensitivity 2, not 1)."""
    for unit in ("p", None):
        session = _session(column, unit)
        before = session.remaining
        with pytest.raises(InvalidParameterError, match="compares these as one value"):
            session.release(session.table().group_by("c", keys=keys).agg(n=E.count()), epsilon=1.0)
        assert session.remaining == before


@pytest.mark.parametrize(
    ("column", "keys"),
    [
        (pa.array([dt.datetime(2020, 1, 1)] * 3, pa.timestamp("us")), [dt.date(2020, 1, 1), dt.datetime(2020, 1, 1)]),
        (
            pa.ExtensionArray.from_storage(pa.uuid(), pa.array([TOKEN.bytes] * 3, pa.binary(16))),
            [str(TOKEN), str(TOKEN).upper()],
        ),
    ],
    ids=["date-and-datetime", "uuid-cases"],
)
def test_the_row_level_sql_counts_a_row_under_one_key_even_given_two_equal_keys(column, keys):
    """The SQL holds on its own, whatever the compiler lets through: each value joins one key."""
    session = _session(column, None)
    query = session.table().group_by("c", keys=keys[:1]).agg(n=E.count())
    compiled = compile_query(query.plan, session._context(), parse_request(session.budget, epsilon=1.0))
    plan = dataclasses.replace(aggregation_plan(compiled, {}, "salt"), keys=tuple((k,) for k in keys))
    result = session._backend.run(plan)
    assert sum(result.columns["rows"]) == 3
    assert len(result.keys) == 1  # the key of lowest rank in the salted order holds the rows


def test_row_level_histograms_over_public_keys_count_each_row_once():
    column = pa.array([dt.datetime(2020, 1, 1)] * 3, pa.timestamp("us"))
    session = _session(column, None)
    keys = [dt.date(2020, 1, 1), dt.datetime(2020, 1, 1), dt.date(2021, 1, 1)]
    query = session.table().group_by("c", keys=keys[2:]).agg(m=E.median("x", bounds=(0, 8)))
    compiled = compile_query(query.plan, session._context(), parse_request(session.budget, epsilon=1.0))
    statistic = next(s for s in compiled.statistics if s.kind == "hist")
    plan = histogram_plan(compiled, statistic, (0.0, 8.0), "salt")
    result = session._backend.run(dataclasses.replace(plan, keys=tuple((k,) for k in keys)))
    assert result.histogram is not None
    weights = [sum(h.values()) for h in result.histogram]
    assert len(weights) == 1
    assert weights[0] == 3 * 2**E._aggregation.Histogram.WEIGHT_BITS


@pytest.mark.parametrize("unit", ["p", None])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_key_column_of_nulls_alone_does_not_turn_off_the_ranks(case, unit):
    """With every key of one column NULL, keys were looked up by Python equality again (released 0)."""
    column, keys = CASES[case]
    table = pa.table({"p": [1, 2, 3], "a": pa.array([None] * 3, pa.string()), "c": column, "x": [1.0, 2.0, 4.0]})
    session = E.Session.from_arrow(table, name="t", privacy_unit=unit, budget=dpkit.ApproxDP(1e9, 1e-3))
    query = session.table().group_by("a", "c", keys=[(None, keys[0])])
    query = (query.bound(3, 1) if unit else query).agg(n=E.count())
    result = session.release(query, epsilon=1e8, rng=InsecureSeededRandom(0))
    assert result.columns["c"] == [keys[0]]
    assert round(result.columns["n"][0]) == 3


@pytest.mark.parametrize("unit", ["p", None])
def test_a_long_key_list_mixing_dates_and_datetimes_keeps_each_key(unit):
    """Above 256 keys the list went through Arrow, typed by its first key: a date first made the
    column DATE and cut every datetime key to its day (the 12:00 key counted the midnight rows)."""
    noon = dt.datetime(2020, 1, 2, 12)
    rows = [dt.datetime(2020, 1, 2)] * 3 + [noon] * 2
    table = pa.table({"p": range(5), "c": pa.array(rows, pa.timestamp("us")), "x": [1.0] * 5})
    session = E.Session.from_arrow(table, name="t", privacy_unit=unit, budget=dpkit.ApproxDP(1e12, 1e-3))
    keys = [dt.date(2000, 1, 1) + dt.timedelta(days=i) for i in range(300)] + [noon]
    for seed in range(5):  # (the salted order, so the first key, changes with every release)
        query = session.table().group_by("c", keys=keys)
        query = (query.bound(1, 1) if unit else query).agg(n=E.count())
        result = session.release(query, epsilon=1e8, rng=InsecureSeededRandom(seed))
        assert round(dict(zip(result.columns["c"], result.columns["n"], strict=True))[noon]) == 2


FAR_DAY = pa.array([365 * 1_000_000, 18262], pa.int32()).cast(pa.date32())  # year ~1,002,000 and 2020-01-01


@pytest.mark.parametrize(
    ("column", "key", "match"),
    [
        (
            pa.array([decimal.Decimal(10**37), decimal.Decimal(1)], pa.decimal128(38, 0)),
            decimal.Decimal("0.5"),
            "decimal places",
        ),
        (pa.array([decimal.Decimal("1.00")] * 2, pa.decimal128(38, 2)), decimal.Decimal("0.001"), "decimal places"),
        (pa.array([decimal.Decimal("1.00")] * 2, pa.decimal128(10, 2)), decimal.Decimal("NaN"), "finite"),
        (pa.array([decimal.Decimal("1.00")] * 2, pa.decimal128(10, 2)), decimal.Decimal("1" * 40), "38 digits"),
        (FAR_DAY, dt.datetime(2020, 1, 1), "datetime.date keys"),
        (pa.array([dt.datetime(2020, 1, 1)] * 2, pa.timestamp("ns")), dt.date(3000, 1, 1), "nanosecond"),
        (pa.array([dt.time(1)] * 2, pa.time64("us")), dt.time(1, tzinfo=dt.UTC), "without a time zone"),
        (pa.array([0.5, 1.0]), 10**29, "beyond 64 bits"),
        (pa.array(["a", "b"]), "\ud800", "Unicode"),
        (pa.array([1, 2], pa.int64()), 2**127, "2\\*\\*127"),
    ],
    ids=[
        "scale-0",
        "scale-2",
        "nan",
        "40-digits",
        "datetime-on-date",
        "ns-range",
        "aware-time",
        "huge-int",
        "surrogate",
        "past-128-bits",
    ],
)
def test_a_key_the_column_type_cannot_hold_is_refused_before_the_debit(column, key, match):
    """Each failed after the debit, at run time, when a large or far row reached the key join
    (DuckDB compared in the key's type, casting the column), or with the engine's message."""
    table = pa.table({"p": [1, 2], "c": column, "name": ["big", "small"]})
    for unit in ("p", None):
        session = E.Session.from_arrow(table, name="t", privacy_unit=unit, budget=dpkit.ApproxDP(1e9, 1e-3))
        before = session.remaining
        query = session.table().where("name = 'big'").group_by("c", keys=[key]).agg(n=E.count())
        with pytest.raises(InvalidParameterError, match=match):
            session.release(query, epsilon=1.0)
        assert session.remaining == before


def test_float_and_numpy_keys_on_wide_decimal_columns_run():
    """A float key was the literal 0.5, a DECIMAL(2, 1): the 38-digit column was cast to DECIMAL(38, 1)
    and its value 10**37 overflowed after the debit. NumPy scalars are keys as Python's."""
    table = pa.table({"p": [1, 2], "c": pa.array([decimal.Decimal(10**37), decimal.Decimal(1)], pa.decimal128(38, 0))})
    session = E.Session.from_arrow(table, name="t", privacy_unit="p", budget=dpkit.ApproxDP(1e9, 1e-3))
    keys = [0.5, np.float64(1.0), np.int64(7), decimal.Decimal(10**37)]
    result = session.release(
        session.table().group_by("c", keys=keys).agg(n=E.count()), epsilon=1e8, rng=InsecureSeededRandom(0)
    )
    counts = {key: round(n) for key, n in zip(result.columns["c"], result.columns["n"], strict=True)}
    assert counts == {0.5: 0, 1.0: 1, 7: 0, decimal.Decimal(10**37): 1}
    assert all(type(key) in (float, int, decimal.Decimal) for key in result.columns["c"])


@pytest.mark.parametrize("extra", [0, 300])
def test_nanosecond_keys_on_a_nanosecond_column_each_count_their_row(extra):
    """Two Timestamps 1 ns apart were refused as one value, and a key with nanoseconds was written as
    a microsecond TIMESTAMP: it matched the row 1 ns before it and its own row was counted nowhere."""
    frame = pd.DataFrame(
        {"p": [1, 2], "c": pd.to_datetime(["2020-01-01 00:00:00.000000000", "2020-01-01 00:00:00.000000001"])}
    )
    first, second = pd.Timestamp("2020-01-01"), pd.Timestamp("2020-01-01 00:00:00.000000001")
    keys = [first, second] + [first + pd.Timedelta(days=1 + i) for i in range(extra)]
    for unit in ("p", None):
        session = E.Session.from_pandas(frame, name="t", privacy_unit=unit, budget=dpkit.PureDP(1e12))
        assert session.columns["c"].type == "TIMESTAMP_NS"
        result = session.release(
            session.table().group_by("c", keys=keys).agg(n=E.count()), epsilon=1e9, rng=InsecureSeededRandom(0)
        )
        counts = dict(zip(result.columns["c"], result.columns["n"], strict=True))
        assert (round(counts[first]), round(counts[second])) == (1, 1)
    arrow = E.Session.from_arrow(
        pa.table({"p": [1], "c": pa.array([dt.datetime(2020, 1, 1)], pa.timestamp("us"))}),
        name="t",
        privacy_unit="p",
        budget=dpkit.PureDP(1),
    )
    with pytest.raises(InvalidParameterError, match="nanoseconds"):
        arrow.release(arrow.table().group_by("c", keys=[second]).agg(n=E.count()), epsilon=1.0)


@pytest.mark.parametrize("unit", ["p", None])
@pytest.mark.parametrize("keys", [[5], list(range(300)), ["[0, 5)", 7]])
def test_keys_of_a_binned_column_are_its_labels(unit, keys):
    """An int key on a Bin was compared with the bins' text labels: DuckDB cast every binned row's
    label to INTEGER and failed after the debit, only if some row fell in a bin."""
    from dpkit.engine._plan import Bin

    table = pa.table({"p": [1, 2], "name": ["alice", "bob"], "x": [3.0, 50.0]})
    session = E.Session.from_arrow(table, name="t", privacy_unit=unit, budget=dpkit.PureDP(10))
    query = session.table().where("name = 'alice'").group_by(Bin("x", (0, 5, 10)), keys=keys)
    query = (query.bound(1, 1) if unit else query).agg(n=E.count())
    with pytest.raises(InvalidParameterError, match="one of its labels"):
        session.release(query, epsilon=1.0)
    assert session.remaining == dpkit.PureDP(10)


@pytest.mark.parametrize("unit", ["p", None])
@pytest.mark.parametrize("extra", [0, 300])
def test_keys_of_a_float32_column_are_compared_as_float32(unit, extra):
    """Keys written as DOUBLE literals compared the column widened to DOUBLE (0.10000000149011612)
    with 0.1: the rows holding 0.1 were released as an empty group."""
    table = pa.table({"p": [1, 2, 3], "f": pa.array([0.1, 0.1, 0.5], pa.float32())})
    session = E.Session.from_arrow(table, name="t", privacy_unit=unit, budget=dpkit.PureDP(1e12))
    keys = [0.1, 0.5, float("inf")] + [1000.5 + i for i in range(extra)]
    result = session.release(
        session.table().group_by("f", keys=keys).agg(n=E.count()), epsilon=1e9, rng=InsecureSeededRandom(1)
    )
    counts = dict(zip(result.columns["f"], result.columns["n"], strict=True))
    assert (round(counts[0.1]), round(counts[0.5]), round(counts[float("inf")])) == (2, 1, 0)
    with pytest.raises(InvalidParameterError, match="compares these as one value"):
        session.release(session.table().group_by("f", keys=[0.1, np.float32(0.1)]).agg(n=E.count()), epsilon=1.0)


def test_keys_with_a_binned_column_are_checked_for_collisions():
    """With a Bin among the group columns the check was skipped: a date and its midnight on a
    TIMESTAMP column each counted every row (3 rows released as 3 + 3)."""
    from dpkit.engine._plan import Bin

    table = pa.table(
        {"p": [1, 2, 3], "x": [1.0, 2.0, 3.0], "t": pa.array([dt.datetime(2020, 1, 1)] * 3, pa.timestamp("us"))}
    )
    session = E.Session.from_arrow(table, name="t", privacy_unit="p", budget=dpkit.PureDP(10))
    keys = {"x_bin": ["[0, 10]"], "t": [dt.date(2020, 1, 1), dt.datetime(2020, 1, 1)]}
    query = session.table().group_by(Bin("x", (0, 10)), "t", keys=keys).bound(1, 2).agg(n=E.count())
    with pytest.raises(InvalidParameterError, match="compares these as one value"):
        session.release(query, epsilon=1.0)
    assert session.remaining == dpkit.PureDP(10)
