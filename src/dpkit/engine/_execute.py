"""Running a compiled query: backend aggregation, partition selection, noise, post-processing.

Called only after the ledger has debited the query's cost. Everything released is a function of
(a) the noisy statistics and (b) public facts, so the post-processing (means from noisy sums
and counts, counts rounded to non-negative integers, confidence intervals) costs nothing more.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import AccuracyWarning, InternalError, InvalidParameterError, PrivacyWarning
from dpkit._validation import outside_stacklevel
from dpkit.engine._aggregation import AggregationResult, Histogram, quantile_grid
from dpkit.engine._backends import Backend
from dpkit.engine._compiler import (
    QUANTILE_BINS,
    CompiledQuery,
    SelectionNoise,
    Statistic,
    VectorNoise,
    aggregation_plan,
    histogram_plan,
    log2_candidates,
    nonnull_column,
)
from dpkit.engine._plan import AUTO, canonical, level_label
from dpkit.mechanisms import DiscreteGaussian, Exponential
from dpkit.mechanisms.exponential import SelectionGrid
from dpkit.noise import RandomSource

__all__ = ["Released", "execute"]

_WEIGHT = float(2**Histogram.WEIGHT_BITS)
#: Groups whose quantiles are drawn together (their bin weights: 8 MiB).
_QUANTILE_BLOCK = 1024


class Released:
    """The noisy outcome of one query, before it is shaped into a table."""

    def __init__(
        self,
        keys: list[tuple[Any, ...]],
        values: dict[str, list[float]],
        bounds: dict[str, tuple[float, float]],
        split: list[dict[str, Any]],
    ) -> None:
        self.keys = keys
        self.values = values  # column name -> values (aligned with keys)
        self.bounds = bounds
        self.split = split


def _salt(rng: RandomSource) -> str:
    return "".join(f"{int(x):016x}" for x in rng.uint64(2))


def _auto_bounds(
    compiled: CompiledQuery, statistic: Statistic, backend: Backend, salt: str, rng: RandomSource
) -> tuple[float, float]:
    """Private bounds: the log2 bins (:func:`_bin_with_rank`) holding the ``AUTO_LEVELS`` quantiles.

    Each target rank is floored at the public ``c = auto_rank_floor(...)``: the lower one is
    max(0.01 n, c) and the upper one min(0.99 n, n - c) (both n / 2 when n < 2c), for n the total
    weight. A bin whose rank interval is c or more away from its target is chosen with probability
    below ``AUTO_BETA`` (the exponential mechanism's utility bound), so with probability at least
    1 - AUTO_BETA for each bound, when n >= 2c:

    * the lower bound's bin, or one below it, holds data (the bound is never in an empty bin below
      all the data: it is at least the lower edge of the smallest value's bin, within a factor 2 of
      that value), and fewer than max(0.01 n, c) + c of the weight lies in bins below it;
    * likewise the upper bound is at most the upper edge of the largest value's bin, and fewer
      than max(0.01 n, c) + c of the weight lies in bins above it.

    Without the floor, every empty bin beyond the data scored -0.01 n, the best bin 0: with 200
    bins the mechanism chose an empty far bin unless epsilon 0.01 n / (2 sensitivity) >> ln 200
    (n = 4000 at epsilon 1: half of the runs gave bounds like -2.25e15). The floor costs nothing
    (a max or min with a public constant keeps the sensitivity) and changes nothing once 0.01 n
    exceeds c (c is about 98 rows at epsilon 1 with the default split).
    """
    plan = histogram_plan(compiled, statistic, None, salt)
    result = backend.run(plan)
    counts = result.histogram[0] if result.histogram else {}
    order, splits = log2_candidates()
    mechanism = compiled.mechanism(statistic, 1)
    assert isinstance(mechanism, SelectionNoise)
    units = {j: counts[b] for j, b in enumerate(order) if counts.get(b)}
    weights = _bin_weights([units], len(order))
    floor = auto_rank_floor(mechanism, len(order))
    low_level, high_level = compiled.levels(statistic)
    candidates = auto_bound_candidates(splits)
    low_bin, high_bin = (
        _bin_with_rank(mechanism, weights, level, rng, floor=floor, units=[units]) for level in (low_level, high_level)
    )
    return widen(candidates[low_bin], candidates[high_bin + 1], candidates)


#: The largest magnitude of an automatic bound (the fixed-point sums need |bound| <= 2^60).
_AUTO_CAP = math.ldexp(1.0, 59)


def _warn_at_cap(column: str, bounds: tuple[float, float]) -> None:
    """AccuracyWarning when an automatic bound is +-2^59, the largest it can be: the column's values
    may lie beyond it, and the release then clamps them there (post-processing of the bounds)."""
    if max(abs(bounds[0]), abs(bounds[1])) >= _AUTO_CAP:
        warnings.warn(
            f"automatic bounds for {column!r} are {bounds}, at the largest an automatic bound can be "
            f"(+-2^59, since the fixed-point sums need |bound| <= 2^60): values beyond it were clamped "
            f"there; rescale it in the query (e.g. AVG({column} / 1e9), with bounds named after the aggregate)",
            AccuracyWarning,
            stacklevel=outside_stacklevel(),
        )


def auto_bound_candidates(splits: list[float]) -> list[float]:
    """Split point i has the weight of bins 0 .. i-1 below it: the edges, then each bin's upper split,
    clipped to +-2^59; sorted (equal values at the clipped ends)."""
    inner = [min(max(value, -_AUTO_CAP), _AUTO_CAP) for value in splits[:-1]]
    return [-_AUTO_CAP, *inner, _AUTO_CAP]


def widen(low: float, high: float, candidates: list[float]) -> tuple[float, float]:
    """``(low, high)`` if low < high; else the next candidate above ``low`` as high, or, at the top,
    the next candidate below as low (post-processing of the two released split points)."""
    if low < high:
        return (low, high)
    above = [c for c in candidates if c > low]
    if above:
        return (low, above[0])
    return (max(c for c in candidates if c < low), low)


#: The probability with which an automatic bound may miss its guarantee (see :func:`_auto_bounds`).
AUTO_BETA = 1e-3


def auto_rank_floor(mechanism: SelectionNoise, bins: int, beta: float = AUTO_BETA) -> float:
    """c: a bin whose score is -c or less is chosen with probability below ``beta``.

    The exponential mechanism picks bin o with probability proportional to
    exp(epsilon s_o / (2 sensitivity)) (at most exp(-epsilon (s_max - s_o) / (2 sensitivity))),
    so all bins scoring g below the best one together have probability at most
    bins exp(-epsilon g / (2 sensitivity)) = beta for g = (2 sensitivity / epsilon) ln(bins / beta):
    :meth:`~dpkit.mechanisms.Exponential.utility_bound` gives that g for the law actually released
    (effective sensitivity, score grid). The best bin scores 0 (it holds the target rank); divided
    by the scores' scale factor and with the rounding allowance of :meth:`_Ranks.scores`, c bounds
    the distance from the target rank to the chosen bin's ranks. Public: epsilon, sensitivity, bins.
    """
    gap = _utility_gap(mechanism, bins, beta)
    return (gap + _ROUNDING_ALLOWANCE) / _AUTO_FACTOR


def _bin_with_rank(
    mechanism: SelectionNoise,
    weights: Sequence[float] | NDArray[np.float64],
    level: float,
    rng: RandomSource,
    *,
    floor: float = 0.0,
    units: Sequence[Mapping[int, int]] | None = None,
) -> int:
    """Exponential mechanism over the log2 bins: the index of a bin holding the ``level`` quantile.

    Bin j holds the ranks [below_j, below_j+1]; its score is minus the distance from the target
    rank (level * total, floored at ``floor``: see :func:`_auto_bounds`) to that interval (0 for
    the bin that holds it). Adding one person of weight w moves below_j, below_j+1, the total and
    the target by at most w (the target by between 0 and w), so each score by at most w: the
    sensitivity. (Split points scored by |below - target| tie across a run of empty bins, and the
    tie spread a bound over [-2^59, 16] for ages 18 to 90.) See :meth:`_Ranks.scores` for rounding.
    """
    rows = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    scores = _Ranks(rows, units).scores(mechanism, level, _AUTO_FACTOR, floor)
    [chosen] = mechanism.select_rows([float(j) for j in range(rows.shape[1])], scores, rng)
    return int(chosen)


#: Most grid units of the clamped gaps that rows scored exactly pass on (see :meth:`_Ranks.scores`).
_GAP_CLAMP = 2**52
#: Below this epsilon the exponential mechanism's own gap clamp can exceed _GAP_CLAMP: every row's
#: gaps are then clamped at _GAP_CLAMP, so that all rows share one (public) clamp.
_TINY_EPSILON = 2.0**-19
#: The exact scores are scaled to (1 - _SLACK) times the sensitivity; the slack absorbs the rounding.
_SLACK = 2.0**-12
#: Twice the largest rounding error of a score computed in double precision (2^-17 each).
_ROUNDING_ALLOWANCE = 2.0**-16
#: Rows of total weight below this are scored in double precision: every running sum is exact.
_EXACT_TOTAL = 2.0 ** (53 - Histogram.WEIGHT_BITS)
#: The scale of the automatic bounds' scores (their distance has sensitivity 1 per unit of weight).
_AUTO_FACTOR = 1.0 - _SLACK


@functools.lru_cache(maxsize=256)
def quantile_factor(level: float) -> float:
    """The scale f of a quantile's scores: the largest float with f max(level, 1 - level) <= 1 - _SLACK.

    The distance from level * total to a bin's ranks [below, below + weight] moves by at most
    max(level, 1 - level) w when a person of weight w is added or removed (below by u, the bin by
    v, the rows above by w - u - v: below - level total moves by u - level w, level total - below -
    weight by level w - u - v, each within [-max, max] w), so f times it moves by at most
    (1 - _SLACK) w: the median's scores are doubled, and so is its accuracy.
    """
    exact = Fraction(level)
    most = max(exact, 1 - exact)
    factor = (1.0 - _SLACK) / float(most)
    while Fraction(factor) * most > 1 - Fraction(_SLACK):
        factor = math.nextafter(factor, 0.0)
    return factor


def _utility_gap(mechanism: SelectionNoise, candidates: int, probability: float) -> float:
    """g: the chosen candidate scores at least g below the best one with probability <= ``probability``.

    Infinite where g exceeds the gaps that :meth:`_Ranks.scores` can pass on (epsilon below ~1e-6).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        exponential = Exponential(mechanism.sensitivity, mechanism.epsilon)
    gap = exponential.utility_bound(candidates, t=math.log(1 / probability))
    return gap if gap <= math.ldexp(_GAP_CLAMP, exponential.grid_exponent) else math.inf


def quantile_rank_half_width(mechanism: SelectionNoise, candidates: int, alpha: float, level: float) -> float:
    """r: with probability >= 1 - alpha the released point's ranks come within r of level * total.

    The best candidate scores 0 (its bin holds the target rank); the chosen one scores at least
    ``_utility_gap`` below it with probability at most alpha; both scores may be off by the
    rounding allowance; dividing by the scale f of the scores gives the distance in rows.
    """
    return (_utility_gap(mechanism, candidates, alpha) + _ROUNDING_ALLOWANCE) / quantile_factor(level)


class _Ranks:
    """Histograms prepared for :meth:`scores`: one per row, weights in 2^-WEIGHT_BITS units of rows.

    ``units``, where given, holds the same weights as exact integers (bin -> units), for the rows
    that are scored exactly.
    """

    def __init__(self, rows: NDArray[np.float64], units: Sequence[Mapping[int, int]] | None = None) -> None:
        self.rows = rows
        self.units = units
        self.running = np.cumsum(rows, axis=1)  # sequential sums: exact for the rows scored in floats
        self.below = self.running - rows  # below_j (exact there: a difference of exact running sums)
        self.totals = self.running[:, -1:]
        scaled = np.ldexp(rows, Histogram.WEIGHT_BITS)
        whole = np.all((scaled == np.rint(scaled)) & (rows >= 0), axis=1)
        self.inexact = np.flatnonzero(~(whole & (self.totals[:, 0] < _EXACT_TOTAL)))

    def scores(self, mechanism: SelectionNoise, level: float, factor: float, floor: float = 0.0) -> NDArray[np.float64]:
        """Scores of the bins of each row: -factor * distance(target, [below_j, below_j + weight_j]).

        The target rank is level * total, clipped to [min(floor, total / 2), max(total - floor,
        total / 2)] (``floor`` is public; 0 for quantiles, where the clip changes nothing).

        Sensitivity. A person's weight w in a group is at most the mechanism's sensitivity Delta (k
        rows, plus the rounding of the k / n scaling: ``CompiledQuery.sensitivity``). Adding them
        moves below_j by u, the bin by v, the total by w, and the target by between 0 and w (by
        level w without a floor); below_j - target then moves by u - (0 .. w) and target - below_j -
        weight_j by (0 .. w) - u - v, each within [-w, w] (within [-max(level, 1 - level) w,
        max(level, 1 - level) w] without a floor), and so does their maximum with 0. ``factor`` is
        at most (1 - _SLACK) / max(level, 1 - level) (:func:`quantile_factor`), or 1 - _SLACK with a
        floor, so every score moves by at most (1 - _SLACK) Delta.

        Rounding. For a row of total T < 2^(53 - WEIGHT_BITS) made of multiples of 2^-WEIGHT_BITS
        (what backends return), below_j and the running sums are exact, and the score computed in
        double precision is within 3.01 * 2^-53 * factor * T < 2^-17 of the exact one (the target's
        product or clip, two differences and the scaling round once each; factor < 2). Two
        neighbouring datasets' computed scores then differ by at most (1 - _SLACK) Delta + 2^-16 <=
        Delta, as Delta >= 1/16 (checked), and the mechanism rounds them to its grid 2^k, each within
        half a unit, so they differ by at most floor(Delta / 2^k) + 1 units: its effective
        sensitivity. Other rows are scored exactly (rationals), rounded to the nearest unit of that
        grid and passed on as their gaps below the row's best, clamped at 2^52 units (exact doubles):
        again within half a unit of the exact score, so the same bound holds between rows scored
        either way. Subtracting a row's best (a whole number of units) changes no selection, and a
        clamp of the gaps at a public level keeps the sensitivity (the mechanism's own clamp, at
        e^-1024 of the best weight, is below 2^52 units from epsilon 2^-19 up; under it every row's
        gaps are clamped at 2^52, so that all rows share one clamp).
        """
        if mechanism.sensitivity < 1 / 16:  # pragma: no cover - sensitivities are k + bins 2^-21 >= 1
            raise InternalError(f"the rank scores need a sensitivity >= 1/16, not {mechanism.sensitivity}")
        target = level * self.totals
        if floor > 0:
            half = self.totals / 2
            target = np.clip(target, np.minimum(floor, half), np.maximum(self.totals - floor, half))
        scores = np.subtract(self.below, target)
        np.maximum(scores, np.subtract(target, self.running), out=scores)
        np.maximum(scores, 0.0, out=scores)
        scores *= -factor
        if mechanism.epsilon >= _TINY_EPSILON and not self.inexact.size:
            return scores
        exponent = SelectionGrid.for_sensitivity(mechanism.sensitivity).exponent
        if mechanism.epsilon < _TINY_EPSILON:
            snapped = np.rint(np.ldexp(scores, -exponent))  # the mechanism's own rounding
            gaps = np.minimum(snapped.max(axis=1, keepdims=True) - snapped, float(_GAP_CLAMP))
            scores = -np.ldexp(gaps, exponent)
        width = self.rows.shape[1]
        for row in self.inexact.tolist():
            if self.units is not None:
                cells = [Fraction(self.units[row].get(j, 0), 1 << Histogram.WEIGHT_BITS) for j in range(width)]
            else:
                cells = [Fraction(x) for x in self.rows[row].tolist()]
            scores[row] = _exact_gaps(cells, level, factor, floor, exponent)
        return scores


def _exact_gaps(cells: list[Fraction], level: float, factor: float, floor: float, exponent: int) -> NDArray[np.float64]:
    """One row of :meth:`_Ranks.scores` in exact arithmetic: minus the gaps (in grid units 2^exponent,
    clamped at 2^52) of the scores rounded to the nearest unit below the row's best, as doubles."""
    total = sum(cells, Fraction(0))
    target = Fraction(level) * total
    if floor > 0:
        half = total / 2
        target = min(max(target, min(Fraction(floor), half)), max(total - Fraction(floor), half))
    unit = Fraction(2) ** exponent
    snapped, below = [], Fraction(0)
    for weight in cells:
        distance = max(below - target, target - below - weight, Fraction(0))
        snapped.append(math.floor(-Fraction(factor) * distance / unit + Fraction(1, 2)))
        below += weight
    best = max(snapped)
    return -np.ldexp(np.array([float(min(best - n, _GAP_CLAMP)) for n in snapped]), exponent)


def _bin_weights(histograms: Sequence[Mapping[int, int]], bins: int = QUANTILE_BINS) -> NDArray[np.float64]:
    """One row per group: the weight of each of the ``bins`` bins (counts in 2^-WEIGHT_BITS units)."""
    weights = np.zeros((len(histograms), bins), dtype=np.float64)
    for row, counts in zip(weights, histograms, strict=True):
        if counts:
            row[np.fromiter(counts.keys(), dtype=np.int64)] = np.fromiter(counts.values(), dtype=np.float64)
    return weights / _WEIGHT


def _quantiles(
    mechanism: SelectionNoise,
    candidates: list[float],
    weights: Sequence[float] | NDArray[np.float64],
    levels: Sequence[float],
    rng: RandomSource,
    units: Sequence[Mapping[int, int]] | None = None,
) -> list[list[float]]:
    """Exponential mechanism over grid points: for each level, one selection per row of ``weights``.

    Each row is one group's histogram over the grid points ``candidates`` (bin j holds the values
    nearest point j). Point j scores -f * dist(level * total, [below_j, below_j + weight_j]), the
    distance from the target rank to the ranks of the rows at that point (0 for the point holding
    it), with f = :func:`quantile_factor` (level): see :meth:`_Ranks.scores` for the sensitivity and
    the rounding. A value that many rows share holds a long run of ranks, so it wins whenever the
    target falls inside the run; scored by split point, the splits on either side of such a run
    tied (-|below - level total| is the same across a run of empty bins), and the choice spread
    uniformly over the gap to the next value (a median of 3.6 for data whose median is 4).
    Guarantee (:func:`quantile_rank_half_width`): with probability >= 1 - alpha, fewer than
    level * total + r of the weight lies at grid points below the released one, and fewer than
    (1 - level) * total + r at points above it.
    """
    ranks = _Ranks(np.atleast_2d(np.asarray(weights, dtype=np.float64)), units)
    return [
        mechanism.select_rows(candidates, ranks.scores(mechanism, level, quantile_factor(level)), rng)
        for level in levels
    ]


def _align(result: AggregationResult, keys: list[tuple[Any, ...]], column: str) -> list[int]:
    index = {canonical(key): i for i, key in enumerate(result.keys)}
    values = result.columns[column]
    return [values[index[canonical(key)]] if canonical(key) in index else 0 for key in keys]


def dry_run(compiled: CompiledQuery, backend: Backend) -> None:
    """Have the backend bind and plan every query of ``compiled`` without reading rows.

    Called before the ledger is debited: an error that depends only on the schema (an unknown
    function, a type mismatch in a WHERE condition, a volatile function inside it) then refuses
    the query with nothing spent. Automatic bounds are replaced by placeholders (same SQL shape).
    """
    check = getattr(backend, "check", None)
    if not callable(check):
        return
    bounds = {column: (value if isinstance(value, tuple) else (0.0, 1.0)) for column, value in compiled.bounds.items()}
    plans = [aggregation_plan(compiled, bounds, "dry-run")]
    plans += [
        histogram_plan(compiled, s, bounds.get(s.column or "") if s.kind == "hist" else None, "dry-run")
        for s in compiled.statistics
        if s.kind in ("hist", "auto")
    ]
    for plan in plans:
        try:
            check(plan)
        except Exception as error:  # noqa: BLE001 - any engine's binder error
            raise InvalidParameterError(
                "query", compiled.query.describe(), f"the {backend.name} backend cannot run it: {error}"
            ) from None


def execute(compiled: CompiledQuery, backend: Backend, rng: RandomSource) -> Released:
    """Run ``compiled`` on ``backend`` and release it (the cost must already be debited)."""
    salt = _salt(rng)
    split: list[dict[str, Any]] = []
    bounds: dict[str, tuple[float, float]] = {}
    for column, value in compiled.bounds.items():
        if value != AUTO and isinstance(value, tuple):
            bounds[column] = value
    for statistic in compiled.statistics:
        if statistic.kind == "auto":
            bounds[statistic.column or ""] = _auto_bounds(compiled, statistic, backend, salt, rng)
            split.append(describe(compiled, statistic, compiled.mechanism(statistic, 1), None))
            _warn_at_cap(statistic.column or "", bounds[statistic.column or ""])

    plan = aggregation_plan(compiled, bounds, salt)
    result = backend.run(plan)
    values: dict[str, list[float]] = {}
    if compiled.public_keys:
        keys = list(compiled.query.keys) if compiled.query.keys is not None else [()]
    else:
        keys = list(result.keys)
        selector = compiled.selection_mechanism(len(keys))
        chosen = compiled.selection_key
        noisy = selector.release(result.columns[chosen], rng=rng) if keys else []
        threshold = compiled.selection_threshold(selector)
        # Released groups are listed in key order (not the backend's hash order).
        kept = _in_key_order(keys, [i for i, value in enumerate(noisy) if value >= threshold])
        keys = [keys[i] for i in kept]
        values[chosen] = [float(noisy[i]) for i in kept]
        split.append(selection_entry(compiled, selector, threshold))
        if len(keys) == 0:
            keys = []
    moment_index = {m.name: i for i, m in enumerate(plan.moments)}
    half_widths: dict[str, float] = {}
    for statistic in compiled.statistics:
        selected = statistic.key == compiled.selection_key and compiled.selection_epsilon is not None
        if statistic.kind in ("auto", "hist") or (selected and statistic.key in values):
            if selected:
                selector = compiled.selection_mechanism(max(len(keys), 1))
                half_widths[statistic.key] = float(selector.noise_quantile(compiled.request.alpha))
            continue
        column_bounds = bounds.get(statistic.column or "") if statistic.column else None
        mechanism = compiled.mechanism(statistic, max(len(keys), 1), column_bounds)
        assert isinstance(mechanism, VectorNoise)
        if statistic.kind in ("rows", "persons"):
            exact = [float(v) for v in _align(result, keys, statistic.kind)]
        else:
            moment = compiled.moment(statistic, column_bounds or (0.0, 1.0))
            integers = _align(result, keys, f"m{moment_index[statistic.key]}")
            exact = [float(v) * moment.unit_scale for v in integers]
        values[statistic.key] = mechanism.release(exact, rng) if keys else []
        half_widths[statistic.key] = mechanism.half_width(compiled.request.alpha)
        split.append(describe(compiled, statistic, mechanism, column_bounds))

    for statistic in compiled.statistics:
        if statistic.kind != "hist":
            continue
        column = statistic.column or ""
        low, high = bounds[column]
        plan = histogram_plan(compiled, statistic, (low, high), salt)
        histogram = backend.run(plan)
        index = {canonical(key): i for i, key in enumerate(histogram.keys)}
        mechanism = compiled.mechanism(statistic, max(len(keys), 1))
        assert isinstance(mechanism, SelectionNoise) and plan.histogram is not None
        points = list(plan.histogram.grid().points)
        levels = compiled.levels(statistic)
        for level in levels:
            values[f"{statistic.key}@{level}"] = []
        # Groups in blocks, so that the weights (QUANTILE_BINS floats per group) stay small.
        for start in range(0, len(keys), _QUANTILE_BLOCK):
            block = keys[start : start + _QUANTILE_BLOCK]
            found = [index.get(canonical(key)) for key in block]
            counts = [histogram.histogram[i] if i is not None and histogram.histogram else {} for i in found]
            weights = _bin_weights(counts, len(points))
            for level, drawn in zip(levels, _quantiles(mechanism, points, weights, levels, rng, counts), strict=True):
                values[f"{statistic.key}@{level}"] += drawn
        split.append(describe(compiled, statistic, mechanism, (low, high)))
    values.update({f"__hw:{k}": [v] for k, v in half_widths.items()})
    return Released(keys, values, bounds, split)


def selection_entry(compiled: CompiledQuery, selector: Any, threshold: Any) -> dict[str, Any]:
    """The budget-split row of partition selection (the release's, and the preview's)."""
    return {
        "statistic": "partition selection (persons)"
        if compiled.selection_key == "persons"
        else "count of rows + partition selection",
        "mechanism": f"{type(selector).__name__} + threshold {threshold}",
        **compiled.selection_share,
        "delta": float(compiled.selection_delta),
        "threshold": threshold,
        "sensitivity": float(selector.sensitivity),  # L1 (Laplace) or L2 (Gaussian)
        "scale": float(selector.sigma if isinstance(selector, DiscreteGaussian) else selector.scale),
        "half_width": float(selector.noise_quantile(compiled.request.alpha)),
    }


def statistic_label(statistic: Statistic) -> str:
    """How the budget split (and the preview) names a noisy statistic."""
    if statistic.counts is not None:
        return f"count of rows where {statistic.column}"  # (count(column): see nonnull_column)
    return {
        "rows": "count of rows",
        "persons": "count of people",
        "sum": f"sum of {statistic.column}",
        "csum": f"centred sum of {statistic.column}",
        "csq": f"centred sum of squares of {statistic.column}",
        "hist": f"quantiles of {statistic.column}",
        "auto": f"automatic bounds of {statistic.column}",
    }[statistic.kind]


def describe(
    compiled: CompiledQuery,
    statistic: Statistic,
    mechanism: VectorNoise | SelectionNoise,
    bounds: tuple[float, float] | None,
) -> dict[str, Any]:
    """The budget-split row of one noisy statistic: mechanism, share, sensitivity, scale, half-width."""
    share = compiled.shares[statistic.key]
    l1, l2 = (
        compiled.sensitivity(statistic, bounds)
        if statistic.kind in ("rows", "persons", "hist", "auto") or bounds
        else (math.nan, math.nan)
    )
    entry: dict[str, Any] = {
        "statistic": statistic_label(statistic),
        "mechanism": mechanism.name,
        "sensitivity": l2 if compiled.request.mode == "gaussian" else l1,
        "scale": mechanism.scale,
        "half_width": mechanism.half_width(compiled.request.alpha),
    }
    if statistic.kind == "hist" and isinstance(mechanism, SelectionNoise):
        # The exponential mechanism's accuracy is a statement about ranks, not values: with
        # probability >= 1 - alpha the released point's score is within the utility bound
        # (2 sensitivity / epsilon) ln(points / alpha) of the best one, 0 (McSherry & Talwar 2007),
        # so the rows at grid points below it are fewer than level * rows + r and those above it
        # fewer than (1 - level) * rows + r (see _quantiles); the widest r of the column's levels.
        points = len(quantile_grid(bounds[0], bounds[1], QUANTILE_BINS).points) if bounds else QUANTILE_BINS
        entry["rank_half_width"] = max(
            quantile_rank_half_width(mechanism, points, compiled.request.alpha, level)
            for level in compiled.levels(statistic)
        )
    if compiled.request.mode == "laplace":
        entry["epsilon"] = float(share)
    else:
        entry["rho"] = float(share)
    return entry


def postprocess(compiled: CompiledQuery, released: Released) -> dict[str, list[Any]]:
    """The user's columns from the noisy statistics: value, low and high for each aggregate
    (counts as ints, everything else as floats)."""
    alpha = compiled.request.alpha
    values = released.values
    hw = {k[5:]: v[0] for k, v in values.items() if k.startswith("__hw:")}
    count = len(released.keys)
    out: dict[str, list[Any]] = {}

    def half(key: str, level: float) -> float:
        """Half-width at another level for the same statistic (recomputed from the mechanism)."""
        statistic = next(s for s in compiled.statistics if s.key == key)
        if key == compiled.selection_key and compiled.selection_epsilon is not None:
            return float(compiled.selection_mechanism(max(count, 1)).noise_quantile(level))
        column_bounds = released.bounds.get(statistic.column or "") if statistic.column else None
        mechanism = compiled.mechanism(statistic, max(count, 1), column_bounds)
        return mechanism.half_width(level)

    for name, aggregate in compiled.query.aggregates:
        column = aggregate.column or ""
        if aggregate.kind in ("count", "count_distinct"):
            key = "rows" if aggregate.kind == "count" else "persons"
            if aggregate.column is not None:  # count(column): the sum of its 0/1 column
                key = f"sum:{nonnull_column(aggregate.column)}"
            h = hw[key]
            noisy = values[key]
            # The count is an integer: its interval holds the integers within v +- h (the same
            # coverage) and the released count itself (which v +- h missed where h < 0.5).
            rounded = [max(0, round(v)) for v in noisy]
            ends = [_count_interval(v, h, r) for v, r in zip(noisy, rounded, strict=True)]
            counts: tuple[list[Any], ...] = (rounded, [low for low, _ in ends], [high for _, high in ends])
            # Whole numbers, released as int64 (see Result.value_types), unless one of them does
            # not fit (noise beyond 2^63, at an epsilon below about 1e-17): then all as float64.
            if not all(isinstance(c, int) and abs(c) < 2**63 for column in counts for c in column):
                counts = tuple([float(c) for c in column] for column in counts)
            out[name], out[f"{name}_low"], out[f"{name}_high"] = counts
        elif aggregate.kind == "sum":
            key = f"sum:{column}"
            h = hw[key]
            out[name] = list(values[key])
            out[f"{name}_low"] = [v - h for v in values[key]]
            out[f"{name}_high"] = [v + h for v in values[key]]
        elif aggregate.kind == "mean":
            low, high = released.bounds[column]
            mid = (low + high) / 2
            h_n, h_s = half("rows", alpha / 2), half(f"csum:{column}", alpha / 2)
            est, lo_list, hi_list = [], [], []
            for n, s in zip(values["rows"], values[f"csum:{column}"], strict=True):
                est.append(min(max(mid + s / max(n, 1.0), low), high))
                n_lo, n_hi = max(n - h_n, 1.0), max(n + h_n, 1.0)
                if n + h_n < 1:
                    lo_list.append(low)
                    hi_list.append(high)
                    continue
                ratios = _quotients(s, h_s, n_lo, n_hi)
                lo_list.append(min(max(mid + min(ratios), low), high))
                hi_list.append(min(max(mid + max(ratios), low), high))
            out[name], out[f"{name}_low"], out[f"{name}_high"] = est, lo_list, hi_list
        elif aggregate.kind in ("variance", "stddev"):
            low, high = released.bounds[column]
            reach = (high - low) / 2
            h_n, h_s, h_q = half("rows", alpha / 3), half(f"csum:{column}", alpha / 3), half(f"csq:{column}", alpha / 3)
            # The sample variance is the population one times n / (n - 1), a factor that falls with
            # n: the interval takes it at the count interval's ends (the same event, no more alpha).
            bessel = _bessel if aggregate.sample else (lambda n: 1.0)
            est, lo_list, hi_list = [], [], []
            for n, s, q in zip(values["rows"], values[f"csum:{column}"], values[f"csq:{column}"], strict=True):
                n_used = max(n, 1.0)
                variance = q / n_used + reach**2 / 2 - (s / n_used) ** 2
                est.append(min(max(variance, 0.0), reach**2) * bessel(n_used))
                if n + h_n < 1:
                    lo_list.append(0.0)
                    hi_list.append(reach**2 * bessel(1.0))
                    continue
                n_lo, n_hi = max(n - h_n, 1.0), max(n + h_n, 1.0)
                second, means = _quotients(q, h_q, n_lo, n_hi), _quotients(s, h_s, n_lo, n_hi)
                square_high = max(m * m for m in means)
                square_low = 0.0 if min(means) <= 0 <= max(means) else min(m * m for m in means)
                lo_list.append(min(max(min(second) + reach**2 / 2 - square_high, 0.0), reach**2) * bessel(n_hi))
                hi_list.append(min(max(max(second) + reach**2 / 2 - square_low, 0.0), reach**2) * bessel(n_lo))
            if aggregate.kind == "stddev":
                est, lo_list, hi_list = ([math.sqrt(v) for v in lst] for lst in (est, lo_list, hi_list))
            out[name], out[f"{name}_low"], out[f"{name}_high"] = est, lo_list, hi_list
        elif aggregate.kind == "quantiles":
            key = f"hist:{column}"
            for level in aggregate.levels:
                label = name if len(aggregate.levels) == 1 else f"{name}_{level_label(level)}"
                out[label] = list(values[f"{key}@{level}"])
                out[f"{label}_low"] = [math.nan] * count
                out[f"{label}_high"] = [math.nan] * count
        else:  # pragma: no cover - every kind is handled above
            raise InternalError(f"unhandled aggregate {aggregate.kind}")
    return out


def _bessel(n: float) -> float:
    """n / (n - 1), the sample variance's factor over the population one; 2 below n = 2 (its largest
    value for a real count, which is a whole number of rows and at least 2 for a sample variance)."""
    return n / (n - 1) if n >= 2 else 2.0


def _quotients(value: float, half: float, n_low: float, n_high: float) -> list[float]:
    """The corners of [value - half, value + half] / [n_low, n_high] (interval division, n > 0)."""
    return [(value - half) / n_low, (value - half) / n_high, (value + half) / n_low, (value + half) / n_high]


def _count_interval(noisy: float, half: float, released: int) -> tuple[int | float, int | float]:
    """The interval of a released count: the integers within ``noisy +- half`` (an integer count is in
    it exactly when it is in ``noisy +- half``) and ``released``, the rounded count, never below 0.
    Its ends are ints; floats only where ``noisy +- half`` is not finite."""
    if not math.isfinite(noisy - half) or not math.isfinite(noisy + half):
        return max(0.0, noisy - half), max(0.0, noisy + half)
    return max(0, min(math.ceil(noisy - half), released)), max(0, math.floor(noisy + half), released)


def _in_key_order(keys: list[tuple[Any, ...]], indices: list[int]) -> list[int]:
    """``indices`` sorted by their keys in :func:`_sort_key`'s order.

    When every column holds values of one plain type (int, str, or float without NaN) and no
    NULL, that order is the keys' own tuple order, which sorts several times faster.
    """
    chosen = [keys[i] for i in indices]
    if chosen and all(_plain(column) for column in zip(*chosen, strict=True)):
        return [i for _, i in sorted(zip(chosen, indices, strict=True))]
    return sorted(indices, key=lambda i: _sort_key(keys[i]))


def _plain(column: tuple[Any, ...]) -> bool:
    """Values all of one type among int, str and float, with no NaN (so ``<`` orders them totally)."""
    kind = type(column[0])
    return kind in (int, str, float) and all(type(v) is kind and v == v for v in column)


def _sort_key(key: tuple[Any, ...]) -> tuple[tuple[int, str, Any], ...]:
    """Order keys of mixed types and NULLs deterministically (NaN after the numbers of its type, NULL
    last: NaN compares false with everything, which left the backend's order in place)."""
    return tuple(
        (2, "", "") if v is None else (1, type(v).__name__, 0) if _is_nan(v) else (0, type(v).__name__, v) for v in key
    )


def _is_nan(value: Any) -> bool:
    try:
        return bool(value != value)
    except (TypeError, ValueError):  # (a value without an equality of its own, e.g. an array)
        return False


def combine(
    keys: list[tuple[Any, ...]], names: tuple[str, ...], columns: Mapping[str, list[float]]
) -> dict[str, list[Any]]:
    """Group columns followed by the released columns, as a column mapping."""
    table: dict[str, list[Any]] = {name: [key[i] for key in keys] for i, name in enumerate(names)}
    table.update(columns)
    return table
