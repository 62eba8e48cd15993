"""NaN in a Parquet file is read as the same table from Arrow: filters and clamping see every NaN.

Parquet writers leave NaN out of a column's min/max statistics (the format asks them to). DuckDB
2.0 trusted those statistics by default, so on a Parquet source ``x = CAST('NaN' AS DOUBLE)`` and
``x > max`` matched nothing and ``isnan(x)`` inside the clamping was folded to false (NaN rows were
clamped to the upper bound instead of taking the fill value, 0); Spark's Parquet filter pushdown
skipped the row groups holding them. The releases here are at epsilon 1e6 with a test seed: the
count noise is 0 and the sum noise below 1e-3 except with probability below e^-400.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpkit
from dpkit.noise import InsecureSeededRandom

VALUES = [1.5, 2.5, math.nan] * 100  # 100 NaN rows, min 1.5 and max 2.5 in the file's statistics
CONDITIONS = {
    "x = CAST('NaN' AS DOUBLE)": 100,
    "x <> CAST('NaN' AS DOUBLE)": 200,
    "x > 2.5": 100,  # NaN is above every number in both engines
    "x >= 2": 200,
    "x IN (2.5, CAST('NaN' AS DOUBLE))": 200,
    "x BETWEEN 2 AND CAST('NaN' AS DOUBLE)": 200,
}
# Clamped to [0, 2]: 1.5 stays, 2.5 becomes 2, NaN takes the fill value, 0 (the bounds hold it).
TRUE_SUM = 100 * 1.5 + 100 * 2.0 + 100 * 0.0


@pytest.fixture(scope="module")
def table() -> pa.Table:
    return pa.table({"pid": list(range(len(VALUES))), "x": pa.array(VALUES, pa.float64())})


@pytest.fixture(scope="module")
def path(table: pa.Table, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("nan") / "t.parquet"
    pq.write_table(table, target)
    statistics = pq.ParquetFile(target).metadata.row_group(0).column(1).statistics
    assert (statistics.min, statistics.max) == (1.5, 2.5)  # the NaN rows are outside them
    return target


def _sessions(path: Path, table: pa.Table, backend: str) -> list[dpkit.Session]:
    options = {"name": "t", "privacy_unit": "pid", "budget": dpkit.PureDP(1e9), "backend": backend}
    return [dpkit.Session.from_parquet(path, **options), dpkit.Session.from_arrow(table, **options)]


def _released(session: dpkit.Session, sql: str, **cost: object) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpkit.PrivacyWarning)  # epsilon 1e6, on purpose
        result = session.sql(sql, epsilon=1e6, rng=InsecureSeededRandom(5), **cost)
    (value,) = next(iter(result.columns.values()))
    return value


@pytest.mark.parametrize("backend", ["duckdb", "spark"])
def test_parquet_and_arrow_sources_keep_the_same_nan_rows(path: Path, table: pa.Table, backend: str) -> None:
    if backend == "spark":
        pytest.importorskip("pyspark")
    for session in _sessions(path, table, backend):
        for condition, expected in CONDITIONS.items():
            assert _released(session, f"SELECT COUNT(*) AS n FROM t WHERE {condition}") == expected, condition
        total = _released(session, "SELECT SUM(x) AS s FROM t", bounds={"x": (0, 2)})
        assert abs(total - TRUE_SUM) < 1e-3
