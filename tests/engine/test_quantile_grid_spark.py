"""The quantile histogram's grid bins on Spark are DuckDB's: every value at the same grid point.

The bins are the nearest points of a round grid (``quantile_grid``): low and high hold the clamped
values, the others floor((v - low) / step + offset). Both engines evaluate that in IEEE doubles;
this checks it value by value on grid points, midpoints, random values, NULL, NaN and +-inf.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

import dpkit
from dpkit import engine as E
from dpkit.engine._aggregation import quantile_grid
from dpkit.engine._compiler import QUANTILE_BINS, histogram_plan

pytest.importorskip("pyspark")

from dpkit.engine._backends import SparkBackend  # noqa: E402


@pytest.mark.parametrize("bounds", [(0.0, 10.0), (-3.7, 12.2), (0.1, 0.7), (18.0, 90.0), (3.3, 1e5)])
def test_spark_and_duckdb_bin_every_value_alike(bounds):
    low, high = bounds
    points = quantile_grid(low, high, QUANTILE_BINS).points
    rng = np.random.default_rng(7)
    middles = [(a + b) / 2 for a, b in zip(points, points[1:], strict=False)]
    specials = [None, math.nan, math.inf, -math.inf, low - 1, high + 1, 0.0, -0.0]
    values = [*points, *middles, *rng.uniform(low, high, 2000).tolist(), *specials]
    # Two rows per person and rows_per_group=1: each row weighs 1/2 (the k / n weights, rounded).
    table = pa.table({"pid": [i // 2 for i in range(len(values))], "x": pa.array(values, pa.float64())})
    options = {"name": "t", "privacy_unit": "pid", "budget": dpkit.PureDP(10)}
    duck = E.Session.from_arrow(table, **options)
    spark = E.Session.from_arrow(table, backend=SparkBackend(), **options)
    histograms = []
    for session in (duck, spark):
        compiled = session._compile(session.table().agg(m=E.median("x", bounds=bounds)), {"epsilon": 1.0})
        statistic = next(s for s in compiled.statistics if s.kind == "hist")
        histograms.append(session._backend.run(histogram_plan(compiled, statistic, bounds, "salt")).histogram)
    assert histograms[0] == histograms[1]
    [counts] = histograms[0]
    assert max(counts) < len(points) and min(counts) >= 0
