"""Automatic bounds choose a log2 bin holding each quantile, and a share too small to select is refused.

Scored by split point, a run of empty bins tied: for ages 18 to 90 the 1% bound was any split in
[-2^59, 16] (mean 4 for a true 54), whatever the epsilon. Scored by bin (minus the distance from
the target rank to the bin's ranks), only the bin holding the quantile scores 0.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import dpkit
from dpkit import engine as E
from dpkit._errors import InvalidParameterError
from dpkit.noise import InsecureSeededRandom

PEOPLE = 5000
SEEDS = 10


def test_automatic_bounds_of_ages_are_the_bins_holding_the_1st_and_99th_percentiles():
    ages = np.random.default_rng(0).integers(18, 91, PEOPLE).astype(float)
    frame = pd.DataFrame({"p": range(PEOPLE), "age": ages})
    session = E.Session.from_pandas(frame, privacy_unit="p", budget=dpkit.PureDP(1e6))
    query = session.table().agg(m=E.mean("age", bounds="auto"))
    compiled = session._compile(query, {"epsilon": 10.0})
    [auto] = [s for s in compiled.statistics if s.kind == "auto"]
    mechanism = compiled.mechanism(auto, 1)
    # P(a bin other than the one holding the target rank) <= sum over the other 206 bins of
    # exp(-epsilon d / (2 sensitivity)), d >= 1% of the people (50) for every other bin here.
    miss = 206 * math.exp(-mechanism.epsilon * 0.01 * PEOPLE / (2 * mechanism.sensitivity))
    assert 2 * SEEDS * miss <= 1e-6  # the false-positive rate of this test
    for seed in range(SEEDS):
        result = query.release(epsilon=10.0, rng=InsecureSeededRandom(seed))
        assert result.bounds["age"] == (16.0, 128.0)
        assert abs(float(result.columns["m"][0]) - ages.mean()) < 1.0


def test_a_share_too_small_for_the_exponential_mechanism_is_refused_before_the_debit():
    frame = pd.DataFrame({"p": range(50), "x": np.linspace(0, 100, 50)})
    session = E.Session.from_pandas(frame, privacy_unit="p", budget=dpkit.PureDP(10))
    tiny_share = session.table().agg(t=E.sum("x", bounds="auto", weight=1e25))
    for run in (lambda: session.preview(tiny_share, epsilon=1.0), lambda: session.release(tiny_share, epsilon=1.0)):
        with pytest.raises(InvalidParameterError, match="too small for an exponential mechanism"):
            run()
    median = session.table().agg(m=E.median("x", bounds=(0, 100)))
    with pytest.raises(InvalidParameterError, match="too small for an exponential mechanism"):
        session.release(median, epsilon=1e-19)  # below 2**-60, the mechanisms' smallest epsilon
    assert session.remaining == dpkit.PureDP(10) and len(session.ledger.entries()) == 0


@pytest.mark.parametrize(
    ("accuracy", "match"),
    [(1e308, "cannot be met for 'n'"), ({"n": 5, "nn": 1}, "names no aggregate")],
)
def test_accuracy_targets_that_cannot_be_met_or_name_nothing_are_refused(accuracy, match):
    frame = pd.DataFrame({"p": range(50), "x": np.linspace(0, 100, 50)})
    session = E.Session.from_pandas(frame, privacy_unit="p", budget=dpkit.PureDP(10))
    query = session.table().agg(n=E.count())
    with pytest.raises(InvalidParameterError, match=match):
        session.release(query, accuracy=accuracy)
    with pytest.raises(InvalidParameterError, match="must be 0 with a pure-DP budget"):
        session.release(query, accuracy=5.0, delta=1e-6)
    assert len(session.ledger.entries()) == 0


@pytest.mark.parametrize(("keys", "reached"), [(None, 1), (["a", "b"], 2), (["a", "b", "c", "d", "e"], 4)])
def test_automatic_bounds_keep_the_rows_of_the_groups_a_person_can_reach(keys, reached):
    """The auto histogram kept k x groups_per_person rows per person (and had that sensitivity) even
    when the query reaches fewer groups: with groups_per_person=1000 and no GROUP BY, 1000 x the noise."""
    from dpkit.engine._compiler import compile_query, histogram_plan, parse_request

    frame = pd.DataFrame({"pid": np.repeat(np.arange(20), 30), "g": list("abcde") * 120, "x": np.arange(600.0)})
    session = E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(10))
    query = session.table()
    if keys is not None:
        query = query.group_by("g", keys=keys)
    query = query.bound(rows_per_group=2, groups_per_person=4).agg(t=E.sum("x", bounds="auto"))
    compiled = compile_query(query.plan, session._context(), parse_request(session.budget, epsilon=1.0))
    auto = next(s for s in compiled.statistics if s.kind == "auto")
    assert compiled._k_g(auto) == (2 * reached, 1)
    result = session._backend.run(histogram_plan(compiled, auto, None, "salt"))
    assert result.histogram is not None
    weight = sum(result.histogram[0].values()) / 2**E._aggregation.Histogram.WEIGHT_BITS
    assert weight == 20 * 2 * reached  # every person has 30 rows: each keeps exactly the cap
    released = session.release(query, epsilon=1.0, rng=InsecureSeededRandom(0))
    split = next(e for e in released.budget_split if "automatic" in e["statistic"])
    assert split["sensitivity"] == pytest.approx(2 * reached, rel=1e-3)


def test_the_quantile_mechanism_check_names_a_bad_sensitivity_not_epsilon():
    """SelectionNoise turned every refusal of the exponential mechanism into 'epsilon ... too small'."""
    from dpkit.engine._compiler import SelectionNoise

    with pytest.raises(InvalidParameterError, match="^sensitivity: "):
        SelectionNoise(1e-305, 1.0, 1, "rows")
    with pytest.raises(InvalidParameterError, match="^epsilon: .*too small for an exponential mechanism"):
        SelectionNoise(1.0, 1e-19, 1, "rows")
