"""A result names its column types alike on DuckDB and Spark (DuckDB's names: VARCHAR, BIGINT,
TIMESTAMP...), with the same Arrow schema and the same JSON rows (QA round 19: Spark's results said
``string``, ``bigint``, ``timestamp_ntz`` beside dpkit's own ``VARCHAR`` bins and ``BIGINT`` counts)."""

from __future__ import annotations

import datetime
import decimal
import json
import warnings

import pyarrow as pa
import pytest

import dpkit
from dpkit import engine as E
from dpkit.noise import InsecureSeededRandom

pytest.importorskip("pyspark")

PEOPLE = 40
COLUMNS = {
    "s": (pa.string(), ["a", "b"], "VARCHAR"),
    "i64": (pa.int64(), [1, 2], "BIGINT"),
    "i32": (pa.int32(), [1, 2], "INTEGER"),
    "f": (pa.float64(), [1.5, 2.5], "DOUBLE"),
    "b": (pa.bool_(), [True, False], "BOOLEAN"),
    "d": (pa.date32(), [datetime.date(2020, 1, 1), datetime.date(2020, 1, 2)], "DATE"),
    "ts": (pa.timestamp("us"), [datetime.datetime(2020, 1, 1, 10), datetime.datetime(2020, 1, 1, 11)], "TIMESTAMP"),
    "dec": (pa.decimal128(10, 2), [decimal.Decimal("1.50"), decimal.Decimal("2.25")], "DECIMAL(10,2)"),
    "bin": (pa.binary(), [b"\x00", b"\xff"], "BLOB"),
}


@pytest.fixture(scope="module")
def sessions() -> dict[str, dpkit.Session]:
    data = {"pid": pa.array(range(PEOPLE), pa.int64())}
    data.update({name: pa.array(values * (PEOPLE // 2), kind) for name, (kind, values, _) in COLUMNS.items()})
    data["x"] = pa.array([0.5] * PEOPLE, pa.float64())
    table = pa.table(data)
    options = {"name": "t", "privacy_unit": "pid", "budget": dpkit.ApproxDP(1e6, 1e-3)}
    return {backend: E.Session.from_arrow(table, backend=backend, **options) for backend in ("duckdb", "spark")}


@pytest.mark.parametrize("column", list(COLUMNS))
def test_both_engines_report_one_type_vocabulary(sessions: dict[str, dpkit.Session], column: str) -> None:
    reports = []
    for session in sessions.values():
        query = session.table().group_by(column).agg(n=E.count(), m=E.mean("x", bounds=(0, 1)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dpkit.PrivacyWarning)
            result = query.release(epsilon=1e4, delta=1e-5, rng=InsecureSeededRandom(0))
        summary = result.to_dict()
        reports.append(
            (result.group_types, result.to_arrow().schema, json.dumps(summary["rows"]), summary["value_types"])
        )
    assert reports[0] == reports[1]
    assert reports[0][0] == {column: COLUMNS[column][2]}
    assert {s.columns[column].type for s in sessions.values()} == {COLUMNS[column][2]}


def test_binned_columns_and_counts_share_the_vocabulary(sessions: dict[str, dpkit.Session]) -> None:
    for session in sessions.values():
        result = session.table().group_by(bins={"f": [0, 2, 3]}).agg(n=E.count()).release(epsilon=1.0)
        assert result.group_types == {"f_bin": "VARCHAR"}
        assert result.value_types == {"n": "BIGINT", "n_low": "BIGINT", "n_high": "BIGINT"}
