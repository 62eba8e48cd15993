"""Private TIMESTAMP_NS group keys come back with their nanoseconds.

DuckDB hands TIMESTAMP_NS values to Python as datetimes cut to the microsecond: two groups one
nanosecond apart were released as two rows with the same key.
"""

from __future__ import annotations

import warnings

import pandas as pd
import pyarrow as pa
import pytest

import dpkit
from dpkit.noise import InsecureSeededRandom

STAMPS = ["2024-01-01 00:00:00.000000001", "2024-01-01 00:00:00.000000002"]


@pytest.mark.parametrize("aggregate", ["COUNT(*) AS n", "MEDIAN(x) AS n"])
def test_groups_a_nanosecond_apart_keep_their_own_keys(aggregate):
    stamps = pd.to_datetime(STAMPS * 50 + [None] * 10)
    table = pa.table({"pid": list(range(110)), "t": pa.array(stamps, pa.timestamp("ns")), "x": [1.0] * 110})
    session = dpkit.Session.from_arrow(table, privacy_unit="pid", budget=dpkit.ApproxDP(1e6, 1e-3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = session.sql(
            f"SELECT t, {aggregate} FROM data GROUP BY t",
            epsilon=1e5,
            delta=1e-6,
            bounds={"x": (0, 2)},
            rng=InsecureSeededRandom(1),
        )
    keys = result.columns["t"]
    assert keys[:2] == [pd.Timestamp(STAMPS[0]), pd.Timestamp(STAMPS[1])]
    assert keys[2] is None
    assert result.to_arrow().column("t").type == pa.timestamp("ns")
