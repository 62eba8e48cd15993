"""VARIANCE / VAR_SAMP / STDDEV / STDDEV_SAMP are the sample forms (divided by n - 1), as in DuckDB,
Spark and the SQL standard; VAR_POP / STDDEV_POP and the builder's default divide by n.

Before, every form released the population variance: 2.0 instead of 2.5 for the values 1..5.
"""

from __future__ import annotations

import math
import warnings

import pandas as pd
import pytest

import dpkit
from dpkit import engine as E
from dpkit.engine._execute import _bessel
from dpkit.noise import InsecureSeededRandom

FRAME = pd.DataFrame({"g": ["a"] * 5 + ["b"] * 8, "x": [1.0, 2.0, 3.0, 4.0, 5.0] + [0, 10, 0, 10, 0, 10, 5, 5]})


def _session() -> E.Session:
    return E.Session.from_pandas(FRAME, name="t", budget=dpkit.PureDP(1e9), bounds={"x": (0, 10)})


def _release(sql: str) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _session().sql(sql, keys=["a", "b"], epsilon=1e7, rng=InsecureSeededRandom(3)).columns


@pytest.mark.parametrize(
    ("function", "ddof", "root"),
    [
        ("VARIANCE", 1, False),
        ("VAR_SAMP", 1, False),
        ("VAR_POP", 0, False),
        ("STDDEV", 1, True),
        ("STDDEV_SAMP", 1, True),
        ("STDDEV_POP", 0, True),
    ],
)
def test_sql_variance_forms_match_pandas_at_a_huge_epsilon(function, ddof, root):
    columns = _release(f"SELECT g, {function}(x) AS v FROM t GROUP BY g")
    for group, value, low, high in zip(columns["g"], columns["v"], columns["v_low"], columns["v_high"], strict=True):
        exact = FRAME[FRAME.g == group].x.var(ddof=ddof)
        exact = math.sqrt(exact) if root else exact
        assert value == pytest.approx(exact, rel=1e-4)
        assert low <= exact <= high


def test_builder_takes_sample_and_defaults_to_population():
    session = _session()
    query = (
        session.table()
        .group_by("g", keys=["a", "b"])
        .agg(pop=E.variance("x"), samp=E.variance("x", sample=True), sd=E.stddev("x", sample=True))
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        columns = session.release(query, epsilon=1e7, rng=InsecureSeededRandom(4)).columns
    assert columns["pop"][0] == pytest.approx(2.0, rel=1e-4)
    assert columns["samp"][0] == pytest.approx(2.5, rel=1e-4)
    assert columns["sd"][1] == pytest.approx(FRAME[FRAME.g == "b"].x.std(ddof=1), rel=1e-4)


def test_sample_is_refused_on_other_aggregates():
    with pytest.raises(dpkit.InvalidParameterError, match="sample"):
        E.Aggregate("mean", "x", sample=True)
    with pytest.raises(dpkit.InvalidParameterError, match="sample"):
        E.variance("x", sample=1)


def test_sample_interval_is_the_population_one_scaled_at_the_count_interval_ends():
    """Same seed, same noise: the sample interval is [low * f(n_hi), high * f(n_lo)] of the population
    one, f(n) = n / (n - 1) falling in n, so it covers whenever the population interval and the
    count interval do (the event they already share)."""
    session = E.Session.from_pandas(FRAME, name="t", budget=dpkit.PureDP(1e9), bounds={"x": (0, 10)})
    outputs = {}
    for sample in (False, True):
        query = session.table().group_by("g", keys=["a", "b"]).agg(v=E.variance("x", sample=sample), n=E.count())
        outputs[sample] = session.release(query, epsilon=2.0, rng=InsecureSeededRandom(11)).columns
    pop, samp = outputs[False], outputs[True]
    assert pop["n"] == samp["n"]
    for i in range(2):
        assert samp["v_low"][i] <= pop["v_low"][i] * 1.0000001
        assert samp["v_high"][i] >= pop["v_high"][i]
        assert samp["v_high"][i] <= 2 * 25.0 + 1e-9  # the largest sample variance of values in [0, 10]


def test_bessel_factor_is_non_increasing_and_at_most_two():
    values = [_bessel(n) for n in (0.0, 1.0, 1.5, 2.0, 2.5, 3.0, 10.0, 1e9)]
    assert values == sorted(values, reverse=True)
    assert max(values) == 2.0
    assert _bessel(5.0) == pytest.approx(1.25)
