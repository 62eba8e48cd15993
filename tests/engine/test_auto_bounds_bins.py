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
        session.release(median, epsilon=1e-13)
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
