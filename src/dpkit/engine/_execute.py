"""Running a compiled query: backend aggregation, partition selection, noise, post-processing.

Called only after the ledger has debited the query's cost. Everything released is a function of
(a) the noisy statistics and (b) public facts, so the post-processing (means from noisy sums
and counts, counts rounded to non-negative integers, confidence intervals) costs nothing more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InternalError, InvalidParameterError
from dpkit.engine._aggregation import AggregationResult, Histogram
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
from dpkit.mechanisms import DiscreteGaussian
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
    plan = histogram_plan(compiled, statistic, None, salt)
    result = backend.run(plan)
    counts = result.histogram[0] if result.histogram else {}
    order, splits = log2_candidates()
    weights = [counts.get(b, 0) / _WEIGHT for b in order]
    mechanism = compiled.mechanism(statistic, 1)
    assert isinstance(mechanism, SelectionNoise)
    low_level, high_level = compiled.levels(statistic)
    candidates = auto_bound_candidates(splits)
    low_bin, high_bin = (_bin_with_rank(mechanism, weights, level, rng) for level in (low_level, high_level))
    return widen(candidates[low_bin], candidates[high_bin + 1], candidates)


def _bin_with_rank(mechanism: SelectionNoise, weights: Sequence[float], level: float, rng: RandomSource) -> int:
    """Exponential mechanism over the log2 bins: the index of a bin holding the ``level`` quantile.

    Bin j holds the ranks [below_j, below_j+1]; its score is minus the distance from the target
    rank level * total to that interval (0 for the bin that holds it). Adding one person moves
    below_j, below_j+1 and the total by at most their weight, so each score by at most that: the
    sensitivity of the split-point score. (Split points scored by |below - target| tie across a
    run of empty bins, and the tie spread a bound over [-2^59, 16] for ages 18 to 90.)
    """
    edges = np.concatenate(([0.0], np.cumsum(np.asarray(weights, dtype=np.float64))))
    target = level * math.fsum(weights)
    distance = np.maximum(np.maximum(edges[:-1] - target, target - edges[1:]), 0.0)
    [chosen] = mechanism.select_rows([float(j) for j in range(len(weights))], -distance[None, :], rng)
    return int(chosen)


#: The largest magnitude of an automatic bound (the fixed-point sums need |bound| <= 2^60).
_AUTO_CAP = math.ldexp(1.0, 59)


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


def _bin_weights(histograms: Sequence[Mapping[int, int]]) -> NDArray[np.float64]:
    """One row per group: the weight of each of the QUANTILE_BINS bins (counts in 2^-WEIGHT_BITS units)."""
    weights = np.zeros((len(histograms), QUANTILE_BINS), dtype=np.float64)
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
) -> list[list[float]]:
    """Exponential mechanism over split points: for each level, one selection per row of ``weights``.

    Each row is one group's histogram; the score of a split is -|(weight below it) - level * total|.
    """
    rows = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    # Running sums left to right (np.cumsum adds sequentially, as a Python loop would).
    running = np.cumsum(rows, axis=1)
    below = np.concatenate((np.zeros((len(rows), 1)), running), axis=1)[:, : len(candidates)]
    # The totals are the exactly rounded sums (math.fsum). Weighted counts are non-negative
    # multiples of 2^-WEIGHT_BITS, so while a row's total stays below 2^(53 - WEIGHT_BITS) every
    # running sum is exact and the last one is that total; other rows are summed with fsum.
    totals = running[:, -1].copy()
    units = np.ldexp(rows, Histogram.WEIGHT_BITS)
    exact = np.all((units == np.rint(units)) & (rows >= 0), axis=1) & (totals < 2.0 ** (53 - Histogram.WEIGHT_BITS))
    for row in np.flatnonzero(~exact):
        totals[row] = math.fsum(rows[row].tolist())
    return [mechanism.select_rows(candidates, -np.abs(below - level * totals[:, None]), rng) for level in levels]


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
        assert isinstance(mechanism, SelectionNoise)
        edges = [low + (high - low) * j / QUANTILE_BINS for j in range(QUANTILE_BINS + 1)]
        levels = compiled.levels(statistic)
        for level in levels:
            values[f"{statistic.key}@{level}"] = []
        # Groups in blocks, so that the weights (QUANTILE_BINS floats per group) stay small.
        for start in range(0, len(keys), _QUANTILE_BLOCK):
            block = keys[start : start + _QUANTILE_BLOCK]
            found = [index.get(canonical(key)) for key in block]
            weights = _bin_weights(
                [histogram.histogram[i] if i is not None and histogram.histogram else {} for i in found]
            )
            for level, drawn in zip(levels, _quantiles(mechanism, edges, weights, levels, rng), strict=True):
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
        # probability >= 1 - alpha the released split point's score is within
        # scale * ln(candidates / alpha) of the best one (McSherry & Talwar 2007), i.e. the number of
        # bounded rows below it is within that many rows of level * rows (plus one bin's rows).
        entry["rank_half_width"] = mechanism.scale * math.log((QUANTILE_BINS + 1) / compiled.request.alpha)
    if compiled.request.mode == "laplace":
        entry["epsilon"] = float(share)
    else:
        entry["rho"] = float(share)
    return entry


def postprocess(compiled: CompiledQuery, released: Released) -> dict[str, list[float]]:
    """The user's columns from the noisy statistics: value, low and high for each aggregate."""
    alpha = compiled.request.alpha
    values = released.values
    hw = {k[5:]: v[0] for k, v in values.items() if k.startswith("__hw:")}
    count = len(released.keys)
    out: dict[str, list[float]] = {}

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
            out[name] = [float(r) for r in rounded]
            out[f"{name}_low"] = [low for low, _ in ends]
            out[f"{name}_high"] = [high for _, high in ends]
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


def _count_interval(noisy: float, half: float, released: int) -> tuple[float, float]:
    """The interval of a released count: the integers within ``noisy +- half`` (an integer count is in
    it exactly when it is in ``noisy +- half``) and ``released``, the rounded count, never below 0."""
    if not math.isfinite(noisy - half) or not math.isfinite(noisy + half):
        return max(0.0, noisy - half), max(0.0, noisy + half)
    return float(max(0, min(math.ceil(noisy - half), released))), float(max(0, math.floor(noisy + half), released))


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
