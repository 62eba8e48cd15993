"""Quantiles of data with ties: the value many rows share is a candidate and wins when it holds the target rank.

Scored by split point (-|rows below - level * rows|), every split between two tied values had
the same score, so the median of ratings 1..5 (true median 4) came out uniform over [3, 4]
(3.58, 3.62, 3.90, never 4), the median of a constant column anywhere in its bounds, and the
released value could have 1,773 rows below it for a target of 2,500 while ``rank_half_width``
said 19.9. Each grid point now scores minus the distance from the target rank to the ranks of
the rows at that point (``_Ranks.scores``); the grid (``quantile_grid``) holds whole numbers and
short decimals, so a tied value is released exactly.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from engine_fixtures import exact_rank_scores
from scipy import stats

import dpkit
from dpkit import engine as E
from dpkit.engine._aggregation import Histogram
from dpkit.engine._compiler import QUANTILE_BINS, SelectionNoise, histogram_plan
from dpkit.noise import InsecureSeededRandom

FALSE_POSITIVE = 1e-6
UNIT = 1 << Histogram.WEIGHT_BITS


def ratings_frame(n: int = 5000, seed: int = 1) -> pd.DataFrame:
    """The QA reproducer: ratings 1..5 (median 4), a constant 5.0, and a column that is 70% zeros."""
    rng = np.random.default_rng(seed)
    zeros = np.where(rng.random(n) < 0.7, 0.0, rng.uniform(3, 9, n))
    return pd.DataFrame(
        {
            "pid": np.arange(n),
            "rating": rng.choice([1, 2, 3, 4, 5], n, p=[0.05, 0.1, 0.2, 0.4, 0.25]).astype(float),
            "const": 5.0,
            "zeros": zeros,
        }
    )


def miss_bound(mechanism: SelectionNoise, points: int, distance: float) -> float:
    """P(a point other than the best) <= points exp(-epsilon (1 - 2^-12) d / (2 sensitivity)), for d the
    nearest other point's distance from the target rank (its scores are scaled by at least 1 - 2^-12;
    one grid step of the mechanism spare)."""
    scale = 2 * mechanism.sensitivity * (1 + 2.0**-19) / mechanism.epsilon
    return points * math.exp(-((1 - 2.0**-12) * distance - 1e-3) / scale)


@pytest.mark.parametrize("bounds", [(0.0, 10.0), (-3.7, 12.2), (0.0, 100.0)])
def test_a_tied_median_is_released_exactly(bounds):
    frame = ratings_frame()
    session = E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(1e6))
    query = session.table().agg(
        m=E.median("rating", bounds=bounds), c=E.median("const", bounds=bounds), z=E.median("zeros", bounds=bounds)
    )
    compiled = session._compile(query, {"epsilon": 1.0})
    mechanism = next(compiled.mechanism(s, 1) for s in compiled.statistics if s.kind == "hist")
    # The nearest rival of each true median (the empty points just below or above it) is at least
    # 750 rows (ratings: 1,750 rows below 4, 1,250 above), 2,500 (constant) or 1,000 (zeros) away.
    assert 30 * miss_bound(mechanism, QUANTILE_BINS, 750) <= FALSE_POSITIVE
    for seed in range(10):
        result = query.release(epsilon=1.0, rng=InsecureSeededRandom(seed))
        assert (result.columns["m"][0], result.columns["c"][0], result.columns["z"][0]) == (4.0, 5.0, 0.0), seed


def test_a_tie_off_the_grid_is_released_at_its_nearest_grid_point():
    """1/3 is no grid point: its rows are the nearest point's, which then holds the median rank."""
    from dpkit.engine._aggregation import quantile_grid

    frame = pd.DataFrame({"pid": np.arange(3000), "x": np.repeat([0.1, 1 / 3, 0.9], [1000, 1200, 800])})
    session = E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(1e6))
    grid = quantile_grid(0.0, 1.0, QUANTILE_BINS)
    nearest = min(grid.points, key=lambda p: abs(p - 1 / 3))
    assert nearest != 1 / 3 and abs(nearest - 1 / 3) <= float(grid.step) / 2
    for seed in range(5):
        result = (
            session.table().agg(m=E.median("x", bounds=(0, 1))).release(epsilon=1.0, rng=InsecureSeededRandom(seed))
        )
        assert result.columns["m"][0] == nearest


@pytest.mark.parametrize(
    ("low", "high"),
    [(0.0, 10.0), (0.0, 100.0), (18.0, 90.0), (0.0, 20.5), (-1.0, 1.0), (0.1, 0.7), (3.3, 1e5), (0.0, 2.0**59)],
)
def test_the_grid_holds_round_values_and_at_most_quantile_bins_points(low, high):
    from dpkit.engine._aggregation import quantile_grid

    grid = quantile_grid(low, high, QUANTILE_BINS)
    points = grid.points
    assert len(points) <= QUANTILE_BINS and points[0] == low and points[-1] == high
    assert all(a < b for a, b in zip(points, points[1:], strict=False))
    assert len(points) > QUANTILE_BINS // 2 - 2  # steps are at most twice apart: never much coarser
    step = grid.step
    assert step >= 1 or (1 / step).denominator == 1  # a step below 1 divides 1
    for point in points[1:-1]:  # each the double nearest to a multiple of the step
        assert point == float(round(Fraction(point) / step) * step)
    if step <= 1:  # so whole numbers inside the bounds are grid points
        whole = range(math.floor(low) + 1, math.ceil(high))
        assert set(map(float, whole)) <= set(points)


def test_the_backend_puts_each_value_at_its_nearest_grid_point():
    """The SQL bin of a value is its nearest grid point (the bounds for clamped values): grid values
    exactly, and random values as Python finds them in exact arithmetic (away from the midpoints)."""
    from dpkit.engine._aggregation import quantile_grid

    rng = np.random.default_rng(3)
    low, high = -3.7, 12.2
    grid = quantile_grid(low, high, QUANTILE_BINS)
    values = [*grid.points, -50.0, 50.0, *rng.uniform(low, high, 3000).tolist()]
    frame = pd.DataFrame({"pid": np.arange(len(values)), "x": values})
    session = E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(1e6))
    compiled = session._compile(session.table().agg(m=E.median("x", bounds=(low, high))), {"epsilon": 1.0})
    statistic = next(s for s in compiled.statistics if s.kind == "hist")
    result = session._backend.run(histogram_plan(compiled, statistic, (low, high), "salt"))
    [got] = result.histogram
    expected: dict[int, int] = {}
    exact = [Fraction(p) for p in grid.points]
    for value in values:
        clamped = Fraction(min(max(value, low), high))
        index = min(range(len(exact)), key=lambda j: (abs(exact[j] - clamped), -j))
        expected[index] = expected.get(index, 0) + UNIT
    assert got == expected


def exact_scores(cells: list[int], level: float, factor: float, floor: float = 0.0) -> list[Fraction]:
    """-factor * dist(target, [below_j, below_j + cell_j]) in exact arithmetic (cells in 2^-20 units)."""
    return exact_rank_scores([Fraction(c, UNIT) for c in cells], level, factor, floor)


@pytest.mark.parametrize("k", [1, 3])
def test_scores_are_within_the_sensitivity_and_the_rounding_allowance(k):
    """Adding a person of weight <= Delta moves every computed score by at most (1 - 2^-12) Delta + 2^-16
    (<= Delta), and the computed scores are within 2^-17 of the exact ones (rationals)."""
    from dpkit.engine._execute import _SLACK, _Ranks, quantile_factor

    rng = np.random.default_rng(k)
    sensitivity = k + QUANTILE_BINS * 2.0**-21
    mechanism = SelectionNoise(sensitivity, 1.0, 1, "laplace")
    width = 64
    for trial in range(40):
        base = rng.integers(0, 3 * UNIT, width) * (rng.random(width) < 0.4)
        if trial % 4 == 0:
            base[rng.integers(width)] += rng.integers(1, 2**12) * UNIT  # a heavy tie
        person = np.zeros(width, dtype=np.int64)
        spots = rng.choice(width, rng.integers(1, 6), replace=False)
        person[spots] = rng.multinomial(int(sensitivity * UNIT), np.ones(len(spots)) / len(spots))
        rows = np.stack([base, base + person]).astype(np.float64) / UNIT
        ranks = _Ranks(rows)
        for level, floor in [(0.5, 0.0), (0.1, 0.0), (0.9, 0.0), (0.37, 0.0), (0.01, 30.0), (0.99, 30.0)]:
            factor = quantile_factor(level) if not floor else 1 - _SLACK
            scores = ranks.scores(mechanism, level, factor, floor)
            for row, cells in enumerate((base, base + person)):
                exact = exact_scores(cells.tolist(), level, factor, floor)
                assert max(abs(Fraction(s) - e) for s, e in zip(scores[row].tolist(), exact, strict=True)) <= 2.0**-17
            moved = np.max(np.abs(scores[1] - scores[0]))
            assert moved <= (1 - _SLACK) * sensitivity + 2.0**-16 <= sensitivity, (trial, level, moved)


def test_rows_too_large_for_doubles_are_scored_exactly_on_the_mechanisms_grid():
    """A total of 2^33 rows or more (running sums no longer exact in doubles) is scored in rationals:
    each score rounded to the nearest unit of the mechanism's grid, passed on as its gap below the best."""
    from dpkit.engine._execute import _Ranks, quantile_factor
    from dpkit.mechanisms.exponential import SelectionGrid

    mechanism = SelectionNoise(1.0 + QUANTILE_BINS * 2.0**-21, 0.5, 1, "laplace")
    exponent = SelectionGrid.for_sensitivity(mechanism.sensitivity).exponent
    cells = [3 * UNIT, 0, 2**34 * UNIT + 5, 7, 0, 2**33 * UNIT, 11 * UNIT, 1]
    units = [{j: c for j, c in enumerate(cells) if c}]
    rows = np.array([cells], dtype=np.float64) / UNIT
    for level in (0.5, 0.2, 0.999):
        factor = quantile_factor(level)
        [got] = _Ranks(rows, units).scores(mechanism, level, factor)
        snapped = [math.floor(s / Fraction(2) ** exponent + Fraction(1, 2)) for s in exact_scores(cells, level, factor)]
        best = max(snapped)
        assert got.tolist() == [-math.ldexp(float(min(best - n, 2**52)), exponent) for n in snapped]


def test_rank_half_width_is_the_utility_bound_over_the_scale_of_the_scores():
    from dpkit.engine._execute import _SLACK, _utility_gap, quantile_rank_half_width

    frame = ratings_frame(500)
    session = E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(1e6))
    for levels in ([0.5], [0.1, 0.5], [0.25, 0.75]):
        query = session.table().agg(q=E.quantiles("rating", levels, bounds=(0, 10)))
        result = query.release(epsilon=0.5, alpha=0.1, rng=InsecureSeededRandom(0))
        [entry] = [s for s in result.budget_split if "rank_half_width" in s]
        compiled = session._compile(query, {"epsilon": 0.5, "alpha": 0.1})
        mechanism = next(compiled.mechanism(s, 1) for s in compiled.statistics if s.kind == "hist")
        gap = _utility_gap(mechanism, 1001, 0.1)  # (0, 10): a grid of step 0.01
        most = max(max(level, 1 - level) for level in levels)
        assert entry["rank_half_width"] == pytest.approx((gap + 2.0**-16) * most / (1 - _SLACK), rel=1e-12)
        assert entry["rank_half_width"] == max(quantile_rank_half_width(mechanism, 1001, 0.1, lv) for lv in levels)
    # The median's scores are doubled (its rank moves by half a person's weight): half the width.
    assert quantile_rank_half_width(mechanism, 1001, 0.1, 0.5) < 0.56 * mechanism.scale * math.log(1001 / 0.1)


def rank_misses(frame: pd.DataFrame, levels: list[float], alpha: float, seeds: range) -> tuple[int, int, float]:
    """(misses, trials, widest allowance r) for bounds (0, 10), whose grid step is 0.01: a miss is a
    released value v with level * rows + r or more rows below v - 0.005 (at grid points below v), or
    (1 - level) * rows + r or more above v + 0.005."""
    session = E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(1e9))
    groups = sorted(frame.grp.unique())
    values = {key: np.sort(x.to_numpy()) for key, x in frame.groupby("grp").x}
    misses = trials = 0
    widest = 0.0
    for level in levels:  # one level per query: its own allowance
        query = session.table().group_by("grp", keys=groups).agg(q=E.quantiles("x", [level], bounds=(0, 10)))
        for seed in seeds:
            result = query.release(epsilon=1.0, alpha=alpha, rng=InsecureSeededRandom(seed))
            allowance = next(s["rank_half_width"] for s in result.budget_split if "rank_half_width" in s)
            widest = max(widest, allowance)
            for key, v in zip(result.columns["grp"], result.columns["q"], strict=True):
                x = values[key]
                below = np.searchsorted(x, v - 0.005, side="left")
                above = x.size - np.searchsorted(x, v + 0.005, side="right")
                trials += 1
                misses += below >= level * x.size + allowance or above >= (1 - level) * x.size + allowance
    return misses, trials, widest


@pytest.mark.parametrize("kind", ["ties", "continuous", "mixed"])
def test_rank_half_width_holds_at_its_stated_level(kind):
    """With probability >= 1 - alpha the released point is within rank_half_width of the target rank
    (counting rows by the grid point they round to); checked over 20 groups x 3 levels x 8 releases."""
    rng = np.random.default_rng(11)
    groups, size = 20, 2000
    if kind == "ties":
        x = rng.choice([1, 2, 3, 4, 5], groups * size, p=[0.05, 0.1, 0.2, 0.4, 0.25]).astype(float)
    elif kind == "continuous":
        x = rng.gamma(2.0, 1.5, groups * size)
    else:  # continuous data with atoms: 20% at 0 (holding the 10th percentile), 30% at 2 (the median)
        x = rng.choice([0.0, 2.0, math.nan], groups * size, p=[0.2, 0.3, 0.5])
        x[np.isnan(x)] = rng.gamma(2.0, 1.5, np.count_nonzero(np.isnan(x)))
    x = np.minimum(x, 10.0)  # (inside the bounds: the rows are counted as the engine clamps them)
    frame = pd.DataFrame({"pid": np.arange(groups * size), "grp": np.repeat(np.arange(groups), size), "x": x})
    alpha = 0.2
    misses, trials, widest = rank_misses(frame, [0.1, 0.5, 0.9], alpha, range(8))
    assert misses <= stats.binom.isf(FALSE_POSITIVE, trials, alpha), (misses, trials)
    assert widest < 0.02 * size  # not vacuous: the allowance is a small share of a group


def test_rows_of_other_fractions_are_scored_exactly_too():
    """Weights that are not multiples of 2^-20 (never from a backend) take the exact path as well."""
    from dpkit.engine._execute import _Ranks, quantile_factor
    from dpkit.mechanisms.exponential import SelectionGrid

    mechanism = SelectionNoise(1.5, 1.0, 1, "laplace")
    exponent = SelectionGrid.for_sensitivity(1.5).exponent
    rows = np.array([[0.1] * 10, [0.0, 3.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    scores = _Ranks(rows).scores(mechanism, 0.3, quantile_factor(0.3))
    weights = [Fraction(0.1)] * 10
    total, below, snapped = sum(weights, Fraction(0)), Fraction(0), []
    for w in weights:
        distance = max(below - Fraction(0.3) * total, Fraction(0.3) * total - below - w, Fraction(0))
        snapped.append(
            math.floor(-Fraction(quantile_factor(0.3)) * distance / Fraction(2) ** exponent + Fraction(1, 2))
        )
        below += w
    assert scores[0].tolist() == [-math.ldexp(float(max(snapped) - n), exponent) for n in snapped]
    exact = exact_scores([int(w * UNIT) for w in rows[1]], 0.3, quantile_factor(0.3))
    assert max(abs(Fraction(s) - e) for s, e in zip(scores[1].tolist(), exact, strict=True)) <= 2.0**-17


def test_below_epsilon_2_to_the_minus_19_every_row_passes_gaps_clamped_at_2_to_the_52():
    from dpkit.engine._execute import _Ranks, quantile_factor
    from dpkit.mechanisms.exponential import SelectionGrid

    sensitivity = 1 + QUANTILE_BINS * 2.0**-21
    exponent = SelectionGrid.for_sensitivity(sensitivity).exponent
    rng = np.random.default_rng(5)
    rows = np.vstack([rng.integers(0, 2**30, 40) * 2.0**10, rng.integers(0, 5, 40) * 1.0])  # one total ~ 2^44
    units = [{j: int(v * UNIT) for j, v in enumerate(row) if v} for row in rows]
    plain = _Ranks(rows, units).scores(SelectionNoise(sensitivity, 1.0, 1, "laplace"), 0.5, quantile_factor(0.5))
    tiny = _Ranks(rows, units).scores(SelectionNoise(sensitivity, 2.0**-25, 1, "laplace"), 0.5, quantile_factor(0.5))
    snapped = np.rint(np.ldexp(plain, -exponent))
    gaps = np.minimum(snapped.max(axis=1, keepdims=True) - snapped, 2.0**52)
    assert np.array_equal(tiny, -np.ldexp(gaps, exponent))
    assert gaps[0].max() == 2.0**52 and gaps[1].max() < 2.0**52  # the large row is clamped, the other not
    frame = pd.DataFrame({"pid": np.arange(200), "x": np.arange(200) / 20})
    session = E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(1))
    result = session.table().agg(m=E.median("x", bounds=(0, 10))).release(epsilon=2.0**-22, rng=InsecureSeededRandom(0))
    assert 0 <= result.columns["m"][0] <= 10 and result.budget_split[0]["rank_half_width"] > 1e6
