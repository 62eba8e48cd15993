"""Automatic bounds with few people: the target ranks are floored, so an empty far bin is not chosen.

Every empty bin beyond the data scored -0.01 n against 0 for the bin holding the 1st percentile;
with ~200 bins the exponential mechanism chose an empty far one unless epsilon 0.01 n /
(2 sensitivity) >> ln 200. At n = 4,000 and epsilon 1 (the bounds' share 0.5) the age bounds were
right in 20 of 40 runs, the others like (-2.25e15, 128), and AVG(income) came out -4.5e11. The
targets are now max(0.01 n, c) and min(0.99 n, n - c), c = ``auto_rank_floor`` (a public constant of
the mechanism: a bin scoring c below the best is chosen with probability below 1e-3).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

import dpkit
from dpkit import engine as E
from dpkit.noise import InsecureSeededRandom

FALSE_POSITIVE = 1e-6
BETA = 1e-3  # the floor's miss probability per bound (dpkit.engine._execute.AUTO_BETA)


def ages_session(n: int, seed: int = 0) -> tuple[E.Session, np.ndarray]:
    rng = np.random.default_rng(seed)
    ages = rng.integers(18, 91, n).astype(float)
    frame = pd.DataFrame({"p": np.arange(n), "age": ages, "income": rng.lognormal(10.5, 0.6, n)})
    return E.Session.from_pandas(frame, privacy_unit="p", budget=dpkit.PureDP(1e9)), ages


def right(bounds: tuple[float, float]) -> bool:
    """Ages 18 to 90 bounded within a factor 2, as the README says: low in [9, 18], high in [90, 180]."""
    low, high = bounds
    return 9 <= low <= 18 and 90 <= high <= 180


def test_bounds_of_4000_ages_at_epsilon_1_are_right_as_often_as_the_floor_promises():
    session, ages = ages_session(4000)
    query = session.table().agg(m=E.mean("age", bounds="auto"))
    runs = 200
    wrong = [
        seed
        for seed in range(runs)
        if not right(query.release(epsilon=1.0, rng=InsecureSeededRandom(seed)).bounds["age"])
    ]
    # Each bound misses its guarantee with probability <= BETA, and a run whose two bounds keep it is
    # right here (the bins [16, 32) and [64, 128) hold 770 and 1,480 people, more than the targets
    # plus c): P(wrong run) <= 2 BETA.
    assert len(wrong) <= stats.binom.isf(FALSE_POSITIVE, runs, 2 * BETA), wrong
    means = [query.release(epsilon=1.0, rng=InsecureSeededRandom(1000 + s)).columns["m"][0] for s in range(5)]
    assert all(abs(m - ages.mean()) < 5 for m in means), means


def test_the_floor_bounds_the_chance_of_a_bin_far_from_its_target_exactly():
    """The exact law of the selection (Exponential.probabilities on the scores the release uses): the
    bins at distance >= c from their target rank have probability <= 1e-3 together, and every empty
    bin below (above) the data is among them."""
    from dpkit.engine._compiler import histogram_plan, log2_candidates
    from dpkit.engine._execute import _AUTO_FACTOR, AUTO_BETA, _bin_weights, _Ranks, auto_rank_floor
    from dpkit.mechanisms import Exponential

    assert AUTO_BETA == BETA
    session, _ = ages_session(4000)
    compiled = session._compile(session.table().agg(m=E.mean("age", bounds="auto")), {"epsilon": 1.0})
    [statistic] = [s for s in compiled.statistics if s.kind == "auto"]
    mechanism = compiled.mechanism(statistic, 1)
    order, _ = log2_candidates()
    counts = session._backend.run(histogram_plan(compiled, statistic, None, "salt")).histogram[0]
    units = {j: counts[b] for j, b in enumerate(order) if counts.get(b)}
    weights = _bin_weights([units], len(order))[0]
    floor = auto_rank_floor(mechanism, len(order))
    assert 50 < floor < 0.05 * 4000  # about 98 rows at this epsilon (0.25 per bound)
    below = np.concatenate(([0.0], np.cumsum(weights)[:-1]))
    total = weights.sum()
    exponential = Exponential(mechanism.sensitivity, mechanism.epsilon)
    for level, target in ((0.01, max(0.01 * total, floor)), (0.99, min(0.99 * total, total - floor))):
        scores = _Ranks(weights[None, :], [units]).scores(mechanism, level, _AUTO_FACTOR, floor)[0]
        distance = np.maximum(np.maximum(below - target, target - below - weights), 0.0)
        assert np.allclose(scores, -_AUTO_FACTOR * distance, rtol=0, atol=1e-9)
        far = distance >= floor * (1 - 1e-9)  # (an empty bin beyond the data can be exactly c away)
        probability = exponential.probabilities(scores)
        assert probability[far].sum() <= BETA
        empty_beyond = (np.cumsum(weights) == 0) | (below == total)
        assert far[empty_beyond].all()


def test_large_samples_keep_the_bins_of_the_1st_and_99th_percentiles():
    """At n = 10^5 the floor (about 98 rows) is below 1% of the people: the scores and bounds are unchanged."""
    from dpkit.engine._compiler import histogram_plan, log2_candidates
    from dpkit.engine._execute import _AUTO_FACTOR, _bin_weights, _Ranks, auto_rank_floor

    session, _ = ages_session(100_000)
    query = session.table().agg(m=E.mean("age", bounds="auto"))
    compiled = session._compile(query, {"epsilon": 1.0})
    [statistic] = [s for s in compiled.statistics if s.kind == "auto"]
    mechanism = compiled.mechanism(statistic, 1)
    order, _ = log2_candidates()
    counts = session._backend.run(histogram_plan(compiled, statistic, None, "salt")).histogram[0]
    units = {j: counts[b] for j, b in enumerate(order) if counts.get(b)}
    ranks = _Ranks(_bin_weights([units], len(order)), [units])
    floor = auto_rank_floor(mechanism, len(order))
    assert floor < 1000
    for level in (0.01, 0.99):
        floored = ranks.scores(mechanism, level, _AUTO_FACTOR, floor)
        assert np.array_equal(floored, ranks.scores(mechanism, level, _AUTO_FACTOR))
    # Every other bin is 1,000 rows (1% of the people) or more from its target: P(miss) <= 206 e^-61.
    assert 5 * 2 * 206 * math.exp(-_AUTO_FACTOR * 1000 * mechanism.epsilon / (2.0001 * mechanism.sensitivity)) < 1e-6
    for seed in range(5):
        assert query.release(epsilon=1.0, rng=InsecureSeededRandom(seed)).bounds["age"] == (16.0, 128.0)


def test_tiny_samples_target_the_middle_and_still_give_bounds():
    """Below 2c people both targets are n / 2: the bounds hold the median's bin (widened to two bins)."""
    session, _ = ages_session(60)
    for seed in range(5):
        low, high = (
            session.table()
            .agg(m=E.mean("age", bounds="auto"))
            .release(epsilon=1.0, rng=InsecureSeededRandom(seed))
            .bounds["age"]
        )
        assert low < high and math.isfinite(low) and math.isfinite(high)
