"""The engine's confidence intervals cover what they claim, and preview tells what a release does.

Contract (``dpkit.engine.Result``): each ``name_low .. name_high`` interval covers the *bounded*
statistic (after clamping and contribution bounding) with probability at least 1 - alpha.

The bounded statistic is computed here independently, in pandas, from the documented definition
(``bounded_truth``), and checked once against a near-noiseless release, so the coverage checks do
not take the engine's own aggregation as the truth. Then many seeded releases of one query over
50 groups give, for every aggregate, a number of intervals that miss the truth:

- counts (integer truth, integer noise): a miss is exactly ``|noise| > half_width``, so the number
  of misses is Binomial(N, p) with p the noise's exact tail (``tail_probability``). The test
  checks both sides at a combined false-positive rate of 1e-6: an interval that is too narrow
  and one that is needlessly wide both fail.
- sums, means, variances and standard deviations: their intervals are conservative (a union bound
  over the noisy count and moments for the ratios), so the test checks one side: misses at most
  the (1 - 1e-6) quantile of Binomial(N, alpha). A correct engine fails it with probability at
  most 1e-6.

Seeds are fixed, so every test is deterministic.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats

import dpkit
from dpkit import engine as E
from dpkit.noise import InsecureSeededRandom

FALSE_POSITIVE = 1e-6
GROUPS = 50
LOW, HIGH = 0.0, 100.0
K = 2  # rows per group per person
KEYS = [f"g{g:02d}" for g in range(GROUPS)]
AGGREGATES = ("n", "d", "t", "m", "v", "sd")


def make_table(seed: int = 11, smallest: int = 20, largest: int = 400) -> pd.DataFrame:
    """50 groups of ``smallest`` to ``largest`` people; each person 1 to 4 rows in one group.

    Values are integers in [-20, 130]: some fall outside the bounds [0, 100] and are clamped, and
    people with more than K rows are bounded.
    """
    rng = np.random.default_rng(seed)
    rows: list[tuple[int, str, float]] = []
    person = 0
    for key, size in zip(KEYS, np.linspace(smallest, largest, GROUPS).astype(int), strict=True):
        centre = rng.uniform(20, 80)
        for _ in range(size):
            for _ in range(int(rng.integers(1, 5))):
                rows.append((person, key, float(np.round(rng.normal(centre, 30)).clip(-20, 130))))
            person += 1
    return pd.DataFrame(rows, columns=["pid", "grp", "x"])


def bounded_truth(frame: pd.DataFrame) -> pd.DataFrame:
    """Each aggregate of the query on the bounded table, from the documented definition.

    A person with n rows in a group counts min(n, K) rows; their SUM is their total of clamped
    values, clamped to [K * min(LOW, 0), K * max(HIGH, 0)]; the moments of MEAN and VARIANCE
    (centred at the bounds' midpoint) are scaled by min(n, K) / n.
    """
    mid, reach = (LOW + HIGH) / 2, (HIGH - LOW) / 2
    x = frame.x.clip(LOW, HIGH)
    per = (
        frame.assign(c=x - mid, q=(x - mid) ** 2 - reach**2 / 2, x=x)
        .groupby(["grp", "pid"])
        .agg(n=("x", "size"), s=("x", "sum"), c=("c", "sum"), q=("q", "sum"))
    )
    used = np.minimum(per.n, K)
    per = per.assign(
        rows=used,
        total=per.s.clip(K * min(LOW, 0), K * max(HIGH, 0)),
        c=per.c * used / per.n,
        q=per.q * used / per.n,
    )
    g = per.groupby("grp").agg(
        n=("rows", "sum"), d=("rows", "size"), t=("total", "sum"), c=("c", "sum"), q=("q", "sum")
    )
    mean = mid + g.c / g.n
    variance = g.q / g.n + reach**2 / 2 - (g.c / g.n) ** 2
    return pd.DataFrame({"n": g.n, "d": g.d, "t": g.t, "m": mean, "v": variance, "sd": np.sqrt(variance)})


def query(session: E.Session, keys: list[str] | None = KEYS) -> Any:
    bounds = (LOW, HIGH)
    return (
        session.table()
        .group_by("grp", keys=keys)
        .bound(rows_per_group=K, groups_per_person=1)
        .agg(
            n=E.count(),
            d=E.count_distinct(),
            t=E.sum("x", bounds=bounds),
            m=E.mean("x", bounds=bounds),
            v=E.variance("x", bounds=bounds),
            sd=E.stddev("x", bounds=bounds),
        )
    )


def misses(frames: list[pd.DataFrame], truth: pd.DataFrame, name: str) -> tuple[int, int]:
    """(intervals that miss the truth, intervals) for aggregate ``name`` over every release."""
    missed = total = 0
    for frame in frames:
        indexed = frame.set_index("grp")
        exact = truth.loc[indexed.index, name]
        missed += int(((exact < indexed[f"{name}_low"]) | (exact > indexed[f"{name}_high"])).sum())
        total += len(indexed)
    return missed, total


def at_most(trials: int, level: float) -> int:
    """Largest miss count a (1 - level) interval allows: P(Binomial(trials, level) > it) <= 1e-6."""
    return int(stats.binom.isf(FALSE_POSITIVE, trials, level))


def exact_count_bounds(trials: int, tail: float) -> tuple[int, int]:
    """Two-sided acceptance region of Binomial(trials, tail) at a combined rate of 1e-6."""
    return int(stats.binom.ppf(FALSE_POSITIVE / 2, trials, tail)), int(
        stats.binom.isf(FALSE_POSITIVE / 2, trials, tail)
    )


def count_tail(session: E.Session, builder: Any, key: str, **cost: Any) -> tuple[float, float]:
    """(half-width, exact P(|noise| > half-width)) of the count statistic ``key`` of a release."""
    compiled = session._compile(builder, dict(cost))
    if key == compiled.selection_key and compiled.selection_epsilon is not None:
        mechanism: Any = compiled.selection_mechanism(GROUPS)
    else:
        statistic = next(s for s in compiled.statistics if s.key == key)
        mechanism = compiled.mechanism(statistic, GROUPS).mechanism
    half = float(mechanism.noise_quantile(compiled.request.alpha))
    if isinstance(mechanism, dpkit.mechanisms.DiscreteLaplace):
        return half, mechanism.tail_probability(int(half) + 1)  # P(|Z| >= h + 1)
    return half, mechanism.tail_probability(int(half))  # discrete Gaussian: P(|Z| > h)


def sum_tail(session: E.Session, builder: Any, **cost: Any) -> tuple[float, float]:
    """(half-width, the continuous law's P(|noise| > half-width)) of the SUM of x in a release.

    Laplace: exp(-h / b); Gaussian: 2 Q(h / sigma). The engine's noise is discrete on a grid of
    ``unit``; the test checks that the grid and the fixed-point rounding of the rows (at most
    ``rows * unit / 2`` in all) move the truth by less than 1e-3 of the half-width, which moves
    the tail by well under 1% at these levels.
    """
    compiled = session._compile(builder, dict(cost))
    statistic = next(s for s in compiled.statistics if s.key == "sum:x")
    noise = compiled.mechanism(statistic, GROUPS, (LOW, HIGH))
    half = noise.half_width(compiled.request.alpha)
    inner = noise.mechanism
    if compiled.request.mode == "laplace":
        unit = math.ldexp(1.0, inner.grid_exponent)
        tail = math.exp(-half / noise.scale)
    else:
        unit = noise._scale
        tail = 2 * stats.norm.sf(half / noise.scale)
    assert (1 + len(session_rows(session))) * unit < 1e-3 * half
    return half, tail


def session_rows(session: E.Session) -> list[Any]:
    return session._backend._connection.execute("SELECT 1 FROM data").fetchall()


def releases(session: E.Session, builder: Any, repeats: int, seed: int, **cost: Any) -> list[pd.DataFrame]:
    return [builder.release(rng=InsecureSeededRandom(seed + i), **cost).to_pandas() for i in range(repeats)]


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return make_table()


@pytest.fixture(scope="module")
def truth(table: pd.DataFrame) -> pd.DataFrame:
    return bounded_truth(table)


def test_the_definition_of_the_bounded_statistic_is_what_the_engine_releases(table, truth):
    """A release with a huge epsilon is the bounded statistic up to tiny noise: the truth used below is right."""
    session = E.Session.from_pandas(table, privacy_unit="pid", budget=dpkit.PureDP(1e12))
    frame = query(session).release(epsilon=1e9, rng=InsecureSeededRandom(0)).to_pandas().set_index("grp")
    assert frame.index.tolist() == KEYS
    for name in AGGREGATES:
        np.testing.assert_allclose(frame[name], truth.loc[KEYS, name], rtol=1e-6, atol=1e-3, err_msg=name)
    # The bounding matters on this table, so the check above is not of the unbounded statistic.
    assert (truth.n < table.groupby("grp").size()).all()
    assert (truth.t < table.x.clip(LOW, HIGH).groupby(table.grp).sum()).any()


CASES = {
    # name: (budget, cost, repeats)
    "laplace": (dpkit.PureDP(1e6), {"epsilon": 1.0, "alpha": 0.05}, 80),
    "gaussian": (dpkit.ZCDP(1e6), {"rho": 0.5, "alpha": 0.1}, 60),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_intervals_cover_the_bounded_statistic_at_their_level(table, truth, case):
    budget, cost, repeats = CASES[case]
    session = E.Session.from_pandas(table, privacy_unit="pid", budget=budget)
    builder = query(session)
    frames = releases(session, builder, repeats, seed=1000, **cost)
    alpha = cost["alpha"]
    # Shown with pytest -s (docs/benchmarks.md quotes these figures).
    print(case, alpha, {name: misses(frames, truth, name) for name in AGGREGATES})
    for name in ("n", "d"):
        missed, trials = misses(frames, truth, name)
        half, tail = count_tail(session, builder, "rows" if name == "n" else "persons", **cost)
        assert tail <= alpha
        low, high = exact_count_bounds(trials, tail)
        assert low <= missed <= high, (name, missed, trials, tail, half)
        # A released count is an integer, its interval exactly +- the half-width (where not clipped at 0).
        released = pd.concat(frames)
        positive = released[released[name] > 0]
        assert len(positive) > 0.99 * len(released)
        assert (positive[f"{name}_high"] - positive[name] == half).all()
    # The sum: its noise is the continuous law's up to a grid (and fixed-point rounding) far finer
    # than the half-width, so the miss rate is the law's tail at the half-width within 2%.
    half, tail = sum_tail(session, builder, **cost)
    assert tail <= alpha * 1.001  # the exact discrete tail is <= alpha; the continuous one within 0.1%
    missed, trials = misses(frames, truth, "t")
    low, high = exact_count_bounds(trials, tail * 0.98)[0], exact_count_bounds(trials, tail * 1.02)[1]
    assert low <= missed <= high, ("t", missed, trials, tail, half)
    for name in ("m", "v", "sd"):
        missed, trials = misses(frames, truth, name)
        assert missed <= at_most(trials, alpha), (name, missed, trials)
    # Not vacuous: the intervals are informative for large groups (narrower than the bounds allow).
    last = frames[-1].set_index("grp").loc[KEYS[-10:]]
    assert ((last.m_high - last.m_low) < (HIGH - LOW) / 2).all()
    assert ((last.sd_high - last.sd_low) < (HIGH - LOW) / 4).all()


def test_intervals_with_private_keys_cover_every_released_group(table, truth):
    """Private keys: the count is the noisy count used for selection; every group here is far above the threshold."""
    big = make_table(seed=12, smallest=300, largest=600)
    exact = bounded_truth(big)
    session = E.Session.from_pandas(big, privacy_unit="pid", budget=dpkit.ApproxDP(1e6, 0.5))
    builder = query(session, keys=None)
    cost = {"epsilon": 1.0, "delta": 1e-6, "alpha": 0.05}
    compiled = session._compile(builder, dict(cost))
    selector = compiled.selection_mechanism(GROUPS)
    threshold = compiled.selection_threshold(selector)
    # P(some group of the smallest size is dropped in a release) <= GROUPS * P(noise < threshold - size).
    gap = int(exact.n.min()) - threshold if compiled.selection_key == "rows" else int(exact.d.min()) - threshold
    assert gap > 0 and GROUPS * selector.tail_probability(gap) < 1e-9
    repeats = 40
    frames = releases(session, builder, repeats, seed=2000, **cost)
    assert all(frame.grp.tolist() == KEYS for frame in frames)
    half, tail = count_tail(session, builder, compiled.selection_key, **cost)
    selected = "n" if compiled.selection_key == "rows" else "d"
    missed, trials = misses(frames, exact, selected)
    low, high = exact_count_bounds(trials, tail)
    assert low <= missed <= high, (selected, missed, trials, tail)
    for name in ("t", "m", "v", "sd"):
        missed, trials = misses(frames, exact, name)
        assert missed <= at_most(trials, 0.05), (name, missed, trials)


def test_an_accuracy_target_is_met_and_its_intervals_cover(table, truth):
    session = E.Session.from_pandas(table, privacy_unit="pid", budget=dpkit.PureDP(1e6))
    builder = (
        session.table()
        .group_by("grp", keys=KEYS)
        .bound(rows_per_group=K, groups_per_person=1)
        .agg(n=E.count(), t=E.sum("x", bounds=(LOW, HIGH)))
    )
    targets = {"n": 12.0, "t": 800.0}
    frames = releases(session, builder, 60, seed=3000, accuracy=targets, alpha=0.05)
    released = pd.concat(frames)
    for name, target in targets.items():
        widths = (released[f"{name}_high"] - released[f"{name}_low"]) / 2
        assert (widths <= target).all(), name
        # Not more noise than needed: the target is met with less than 25% to spare.
        assert (widths > 0.75 * target).all(), name
        missed, trials = misses(frames, truth, name)
        assert missed <= at_most(trials, 0.05), (name, missed, trials)


def _mean_of_abs_bounds(q: float, trials: int) -> tuple[float, float]:
    """Chernoff bounds (each side 5e-7) on the mean of ``trials`` draws of |Z|, Z discrete Laplace(q).

    |Z| = 0 with probability (1 - q) / (1 + q) and k >= 1 with 2 (1 - q) q^k / (1 + q), so
    E exp(t |Z|) = (1 - q) / (1 + q) * (1 + 2 q e^t / (1 - q e^t)) for q e^t < 1.
    """

    def log_mgf(t: float) -> float:
        r = q * math.exp(t)
        return math.log((1 - q) / (1 + q) * (1 + 2 * r / (1 - r)))

    def bound(side: float) -> float:
        def excess(a: float) -> float:
            # log P(mean >= a) (side +1) or log P(mean <= a) (side -1) <= -trials * rate(a)
            if side > 0:
                upper_t = -math.log(q) * (1 - 1e-9)
                res = optimize.minimize_scalar(lambda t: -(t * a - log_mgf(t)), bounds=(0, upper_t), method="bounded")
            else:
                res = optimize.minimize_scalar(lambda t: -(t * a - log_mgf(t)), bounds=(-50, 0), method="bounded")
            return -trials * -res.fun - math.log(FALSE_POSITIVE / 2)

        mean = 2 * q / (1 - q * q)
        start, step = mean, mean * side * 0.001
        a = start
        while excess(a) > 0:  # move away from the mean until the tail probability is below 5e-7
            a += step
        return a

    return bound(-1.0), bound(1.0)


def test_preview_matches_the_release_and_its_expected_error_is_measured(table, truth):
    """Preview (no data) gives the release's scale and half-width; the measured mean |error| agrees."""
    session = E.Session.from_pandas(table, privacy_unit="pid", budget=dpkit.PureDP(1e6))
    builder = query(session)
    cost = {"epsilon": 1.0, "alpha": 0.05}
    preview = session.preview(builder, **cost)
    result = builder.release(rng=InsecureSeededRandom(7), **cost)
    released = {entry["statistic"]: entry for entry in result.budget_split}
    previewed = {row["statistic"]: row for row in preview.statistics}
    for label in ("count of rows", "count of people", "sum of x"):
        for field in ("scale", "half_width", "epsilon", "sensitivity"):
            assert previewed[label][field] == released[label][field], (label, field)
    assert preview.guarantee == result.guarantee
    # The count's expected absolute error, measured over 4,000 intervals, within Chernoff bounds.
    frames = releases(session, builder, 80, seed=4000, **cost)
    errors = np.concatenate([np.abs(f.set_index("grp").n - truth.loc[f.grp, "n"].to_numpy()) for f in frames])
    compiled = session._compile(builder, dict(cost))
    mechanism = compiled.mechanism(next(s for s in compiled.statistics if s.key == "rows"), GROUPS).mechanism
    assert previewed["count of rows"]["expected_error"] == pytest.approx(mechanism.expected_error, rel=1e-12)
    low, high = _mean_of_abs_bounds(mechanism.q, len(errors))
    assert low <= errors.mean() <= high, (errors.mean(), low, high, mechanism.expected_error)


def test_quantile_rank_statement_holds():
    """Quantiles: with probability >= 1 - alpha, fewer than level * rows + ``rank_half_width`` rows lie
    below the released value and fewer than (1 - level) * rows + ``rank_half_width`` above it, rows
    counting at their nearest grid point (Result's contract; here every value is a grid point)."""
    rng = np.random.default_rng(5)
    groups, size = 10, 3000
    frame = pd.DataFrame(
        {
            "pid": np.arange(groups * size),
            "grp": np.repeat([f"h{g}" for g in range(groups)], size),
            # skewed values with ties, so bins hold very different numbers of rows
            "x": np.round(rng.gamma(2.0, 8.0, groups * size), 1),
        }
    )
    session = E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(1e6))
    levels = (0.1, 0.5, 0.9)
    builder = (
        session.table()
        .group_by("grp", keys=[f"h{g}" for g in range(groups)])
        .bound(rows_per_group=1, groups_per_person=1)
        .agg(q=E.quantiles("x", levels, bounds=(0, 100)))
    )
    alpha, repeats = 0.05, 30
    missed = trials = 0
    for i in range(repeats):
        result = builder.release(epsilon=1.0, alpha=alpha, rng=InsecureSeededRandom(5000 + i))
        allowance = next(s["rank_half_width"] for s in result.budget_split if "rank_half_width" in s)
        released = result.to_pandas().set_index("grp")
        for key, values in frame.groupby("grp").x:
            clamped = np.sort(values.clip(0, 100).to_numpy())
            for level in levels:
                v = released.loc[key, f"q_{'p' + str(int(level * 100))}"]
                # x has one decimal place and (0, 100) a grid of step 0.1: every row is at a grid point
                below = np.searchsorted(clamped, v, side="left")
                above = len(clamped) - np.searchsorted(clamped, v, side="right")
                trials += 1
                missed += below >= level * len(clamped) + allowance or above >= (1 - level) * len(clamped) + allowance
    assert missed <= at_most(trials, alpha), (missed, trials)
    # Not vacuous: the allowance is far below the group size (the statement says something).
    assert allowance < 0.05 * size
