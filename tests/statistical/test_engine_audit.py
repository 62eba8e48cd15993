"""The query engine's privacy, proved three ways: exact sensitivity, an empirical audit, and budget safety.

1. Exact sensitivity. For many random pairs of neighbouring tables D and D' = D + one heavy
   person (more than k rows in several groups, with NULL and NaN values, +-inf, values far
   outside the bounds and NULL group keys; D' lists its rows in another order, since a table
   has no row order), the engine's *noiseless* bounded aggregation (``Backend.run`` of the
   compiled plan, exactly what ``execute`` feeds to the noise) is run on both, and the change
   of every statistic's vector over groups is compared, in exact rational arithmetic, with
   the sensitivity the compiler calibrated the noise to: the L1 norm for Laplace noise (pure
   DP), the L2 norm for Gaussian noise (zCDP, on the integer grid the engine snaps to), the
   per-group score sensitivity and the number of changed groups for the exponential-mechanism
   quantiles and automatic bounds, and "+1 in at most g groups" for the person counts of
   partition selection (private keys). Cases: COUNT, COUNT(DISTINCT), SUM, MEAN, VARIANCE,
   quantiles, automatic bounds; ungrouped, public keys (one and two columns), private keys
   (one and two columns), histogram bins, a join with a public table, a filter; k in {1, 3, 5},
   g in {1, 2}; 3 random pairs each (144 pairs).

2. Empirical audit. COUNT and a clamped SUM are released on D and D' many times through the
   engine's own noise objects (``CompiledQuery.mechanism``) and post-processing
   (``_execute.postprocess``), on the aggregate computed once per table by DuckDB; a separate
   test checks sample by sample that this fast path gives exactly what ``Session.release``
   gives for the same seed. ``dpkit.audit.estimate_epsilon`` then returns a lower bound on
   epsilon that exceeds the true epsilon with probability at most ALPHA = 1e-6 (its contract:
   exact Clopper-Pearson bounds, event chosen on an independent half of the samples). The
   engine passes if the bound is at most the epsilon it claims, so a correct engine fails a
   pass test with probability at most 1e-6. A negative control, the same release with every
   statistic's share doubled (noise scale halved, true epsilon 2 for a claim of 1), must be
   caught (bound > 1), which shows the audit can fail. With 200,000 samples per table the
   worst-case heavy person gives bounds of about 0.93 (COUNT) and 0.96 (SUM) for the correct
   release and about 1.9 for the broken one; the pass tests also require a bound >= 0.85, so
   an audit that has stopped seeing the heavy person (no power) fails too.

3. Budget. A query refused before running (bad or missing bounds, unsupported SQL, ...)
   spends nothing.

Seeds are fixed, so every test is deterministic. Engine bugs found while writing these tests
are pinned by ``xfail(strict=True)`` tests at the end of the file.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from engine_fixtures import exact_rank_scores

import dpkit
from dpkit import engine as E
from dpkit._errors import BudgetExceededError, InvalidParameterError
from dpkit.audit import estimate_epsilon
from dpkit.engine._aggregation import AggregationPlan, AggregationResult, Histogram, quantile_grid
from dpkit.engine._backends import DuckDBBackend
from dpkit.engine._compiler import (
    QUANTILE_BINS,
    CompileContext,
    CompiledQuery,
    SelectionNoise,
    Statistic,
    VectorNoise,
    aggregation_plan,
    compile_query,
    histogram_plan,
    log2_candidates,
    parse_request,
)
from dpkit.engine._execute import _AUTO_FACTOR, _SLACK, Released, auto_rank_floor, postprocess, quantile_factor
from dpkit.mechanisms import DiscreteGaussian, DiscreteLaplace, Laplace
from dpkit.noise import InsecureSeededRandom, snap_to_grid

pytestmark = pytest.mark.statistical

#: False-alarm probability of every audit: P[lower bound > true epsilon] <= ALPHA (estimate_epsilon's contract).
ALPHA = 1e-6

# ============================================================================================
# Random neighbouring tables
# ============================================================================================

# Not "<null>": the group hash cannot tell it from NULL (see test_group_choice_does_not_depend_on_row_order).
REGIONS = ["a", "b", "c", "d", "e", None]
KINDS = ["x", "y", None]
X_BOUNDS = (-5.0, 20.0)  # straddles 0: NULL / NaN fill with 0, inside the bounds
Y_BOUNDS = (3.0, 1000.0)  # excludes 0: NULL fills with 3, the low bound
X_SPECIAL = [None, math.nan, math.inf, -math.inf, 1e300, -1e300, 1e15, -1e15, 20.0, -5.0, 0.0, 7.25]
Y_SPECIAL = [None, 2**62, -(2**62), 0, 3, 1000, 10**12]
BIN_EDGES = (-10.0, 0.0, 5.0, 10.0, 50.0)
LOOKUP = {"region": ["a", "a", "b", "c", "e"], "country": ["A", "A2", "B", "C", "E"]}  # 'a' is in two countries
SCHEMA = pa.schema(
    [("person_id", pa.int64()), ("region", pa.string()), ("kind", pa.string()), ("x", pa.float64()), ("y", pa.int64())]
)


def _x_value(rng: np.random.Generator) -> float | None:
    if rng.random() < 0.45:
        return X_SPECIAL[rng.integers(len(X_SPECIAL))]
    return float(rng.normal(5.0, 15.0))


def _y_value(rng: np.random.Generator) -> int | None:
    if rng.random() < 0.35:
        return Y_SPECIAL[rng.integers(len(Y_SPECIAL))]
    return int(rng.integers(-50, 2000))


def _row(rng: np.random.Generator, person: int | None, region: str | None) -> dict[str, Any]:
    return {
        "person_id": person,
        "region": region,
        "kind": KINDS[rng.integers(len(KINDS))],
        "x": _x_value(rng),
        "y": _y_value(rng),
    }


def random_base(rng: np.random.Generator) -> list[dict[str, Any]]:
    """15-40 people with 1-12 rows each in random regions, and a few rows with no person."""
    rows = []
    for person in range(int(rng.integers(15, 40))):
        for _ in range(int(rng.integers(1, 13))):
            rows.append(_row(rng, person, REGIONS[rng.integers(len(REGIONS))]))
    for _ in range(int(rng.integers(0, 5))):
        rows.append(_row(rng, None, REGIONS[rng.integers(len(REGIONS))]))  # dropped by the engine
    return rows


def random_heavy(rng: np.random.Generator, person: int, k: int, g: int) -> list[dict[str, Any]]:
    """One person with rows in more than g regions, the NULL region always among them, > k rows in some.

    Their values always include NULL, NaN, +-inf and values far outside the bounds.
    """
    others = [i for i, region in enumerate(REGIONS) if region is not None]
    chosen = rng.choice(others, size=int(rng.integers(g, len(others) + 1)), replace=False)
    regions = [REGIONS.index(None), *chosen]
    counts = rng.integers(1, 3 * k + 5, size=len(regions))
    counts[rng.integers(len(counts))] = rng.integers(k + 1, 3 * k + 5)  # more than k rows in one group at least
    rows = [_row(rng, person, REGIONS[r]) for r, n in zip(regions, counts, strict=True) for _ in range(int(n))]
    for row, x in zip(rows, [None, math.nan, math.inf, -math.inf, 1e300, -1e300], strict=False):
        row["x"] = x
    for row, y in zip(rows[::-1], [None, 2**62, -(2**62)], strict=False):
        row["y"] = y
    rng.shuffle(rows)
    return rows


def arrow(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


# ============================================================================================
# Compiling against a shared DuckDB backend and running the noiseless aggregation
# ============================================================================================

_names = itertools.count()


class Tables:
    """One DuckDB backend holding many private tables; plans are pointed at one of them to run."""

    def __init__(self) -> None:
        self.backend = DuckDBBackend(threads=1)
        self.backend.register("people", arrow([_row(np.random.default_rng(0), 0, "a")]), "arrow")
        self.backend.register("lookup", pa.table(LOOKUP), "arrow")
        self.columns = self.backend.schema("people")
        self.lookup_columns = self.backend.schema("lookup")

    def add(self, rows: list[dict[str, Any]]) -> str:
        name = f"t{next(_names)}"
        self.backend.register(name, arrow(rows), "arrow")
        return name

    def context(self, budget: dpkit.guarantees.Guarantee) -> CompileContext:
        return CompileContext(
            table="people",
            columns=self.columns,
            public_tables={"lookup": self.lookup_columns},
            privacy_unit="person_id",
            budget=budget,
            bounds={},
            contribution=E.Contribution(),
        )

    def run(self, plan: AggregationPlan, table: str) -> AggregationResult:
        return self.backend.run(dataclasses.replace(plan, table=table))


@pytest.fixture(scope="module")
def tables() -> Tables:
    return Tables()


def grouped(kind: str, k: int, g: int) -> E.QueryBuilder:
    """The query builder of one grouping variant with contribution limits (k, g)."""
    base = E.QueryBuilder(None, "people")
    if kind == "public":
        base = base.group_by("region", keys=["a", "b", "c", None, "e", "absent"])
    elif kind == "private":
        base = base.group_by("region")
    elif kind == "public2":
        keys = [("a", "x"), ("a", None), (None, "y"), ("b", "y"), ("e", "x"), ("zz", "x")]  # not a product
        base = base.group_by("region", "kind", keys=keys)
    elif kind == "private2":
        base = base.group_by("region", "kind")
    elif kind == "bins":
        base = base.group_by(E.Bin("x", BIN_EDGES))  # histogram bins: public keys
    elif kind == "join":
        base = base.join("lookup", on="region").group_by("country")  # lookup duplicates 'a' rows
    elif kind == "filtered":
        base = base.where("y IS NULL OR y > -10").group_by("region", keys=["a", "b", "c", "d"])
    elif kind != "ungrouped":
        raise AssertionError(kind)
    return base.bound(rows_per_group=k, groups_per_person=g)


# Integer weights keep every compiled share an exact fraction of the request (see the weight bug below).
AGGREGATES = {
    "n": E.count(),
    "people": E.count_distinct(),
    "total": E.sum("x", bounds=X_BOUNDS),
    "average": E.mean("x", bounds=X_BOUNDS, weight=2.0),
    "spread": E.variance("y", bounds=Y_BOUNDS, weight=3.0),
    "quartiles": E.quantiles("x", [0.25, 0.5], bounds=X_BOUNDS),
}


def compile_modes(tables: Tables, builder: E.QueryBuilder) -> dict[str, CompiledQuery]:
    """The query compiled for Laplace noise (pure DP) and for Gaussian noise (zCDP)."""
    plan = builder.agg(**AGGREGATES).plan
    if plan.public_keys:
        laplace_budget, laplace_cost = dpkit.PureDP(100.0), {"epsilon": 1.0}
        gaussian_budget, gaussian_cost = dpkit.ZCDP(100.0), {"rho": 0.5}
    else:  # partition selection needs an (epsilon, delta) budget
        laplace_budget, laplace_cost = dpkit.ApproxDP(100.0, 1e-3), {"epsilon": 1.0, "delta": 1e-6}
        gaussian_budget = laplace_budget
        gaussian_cost = {"epsilon": 1.0, "delta": 1e-6, "mechanism": "gaussian"}
    out = {}
    for mode, budget, cost in (("laplace", laplace_budget, laplace_cost), ("gaussian", gaussian_budget, gaussian_cost)):
        compiled = compile_query(plan, tables.context(budget), parse_request(budget, **cost))
        assert compiled.request.mode == mode
        out[mode] = compiled
    return out


def fixed_bounds(compiled: CompiledQuery) -> dict[str, tuple[float, float]]:
    return {c: v for c, v in compiled.bounds.items() if isinstance(v, tuple)}


# ============================================================================================
# Exact norms of the change
# ============================================================================================


def union_keys(a: AggregationResult, b: AggregationResult, compiled: CompiledQuery) -> list[tuple[Any, ...]]:
    """The released key set: the public keys, or every key present in either table (private keys)."""
    if compiled.public_keys:
        return list(compiled.query.keys) if compiled.query.keys is not None else [()]
    return list(dict.fromkeys([*a.keys, *b.keys]))


def column(result: AggregationResult, keys: list[tuple[Any, ...]], name: str) -> list[int]:
    index = {key: i for i, key in enumerate(result.keys)}
    assert len(index) == len(result.keys), "the backend returned a group twice"
    values = result.columns[name]
    return [values[index[key]] if key in index else 0 for key in keys]


def exact_values(
    compiled: CompiledQuery, result: AggregationResult, keys: list, statistic: Statistic
) -> list[Fraction]:
    """The noiseless values of one statistic as exact rationals (moments: integer units times 2^e)."""
    if statistic.kind in ("rows", "persons"):
        return [Fraction(v) for v in column(result, keys, statistic.kind)]
    bounds = fixed_bounds(compiled)[statistic.column or ""]
    plan = aggregation_plan(compiled, fixed_bounds(compiled), "")
    position = [m.name for m in plan.moments].index(statistic.key)
    unit = Fraction(compiled.moment(statistic, bounds).unit_scale)
    return [Fraction(v) * unit for v in column(result, keys, f"m{position}")]


def norms(before: list[Fraction], after: list[Fraction]) -> tuple[Fraction, Fraction, int]:
    """Exact L1 norm, squared L2 norm and number of changed coordinates of after - before."""
    change = [b - a for a, b in zip(before, after, strict=True)]
    return (
        sum((abs(c) for c in change), Fraction(0)),
        sum((c * c for c in change), Fraction(0)),
        sum(c != 0 for c in change),
    )


def exact_scores(
    weights: dict[int, int], bins: list[int], level: float, factor: float, floor: float = 0.0
) -> list[Fraction]:
    """The exponential mechanism's scores at every bin, exactly: -factor * dist(target, [below_b, below_b + w_b]).

    Weights are in 2^-20 units; the target is level * total, clipped to [min(floor, total / 2),
    max(total - floor, total / 2)] (automatic bounds' floor; none for quantiles).
    """
    cells = [Fraction(weights.get(b, 0), 2**Histogram.WEIGHT_BITS) for b in bins]
    return exact_rank_scores(cells, level, factor, floor)


# ============================================================================================
# 1. Exact sensitivity
# ============================================================================================

GROUPINGS = ["ungrouped", "public", "private", "public2", "private2", "bins", "join", "filtered"]
TRIALS = 3


def check_moments_and_counts(
    modes: dict[str, CompiledQuery], before: AggregationResult, after: AggregationResult, label: str
) -> None:
    laplace, gaussian = modes["laplace"], modes["gaussian"]
    keys = union_keys(before, after, laplace)
    dimension = max(len(keys), 1)
    for statistic in laplace.statistics:
        if statistic.kind in ("hist", "auto"):
            continue
        a = exact_values(laplace, before, keys, statistic)
        b = exact_values(laplace, after, keys, statistic)
        l1, l2_squared, changed = norms(a, b)
        where = f"{label} {statistic.key}: values {[float(v) for v in a]} -> {[float(v) for v in b]}"
        if statistic.key == "persons" and laplace.selection_epsilon is not None:
            # Partition selection: person counts move by +1 in at most g groups.
            selector = laplace.selection_mechanism(dimension)
            assert all(y - x in (0, 1) for x, y in zip(a, b, strict=True)), where
            assert changed <= laplace.groups_bound, where
            assert l1 <= selector.sensitivity, where
            # Gaussian mode selects on the same counts with a discrete Gaussian: the L2 norm.
            gaussian_selector = gaussian.selection_mechanism(dimension)
            assert isinstance(gaussian_selector, DiscreteGaussian), where
            assert l2_squared <= Fraction(gaussian_selector.sensitivity) ** 2, where
            continue
        bounds = fixed_bounds(laplace).get(statistic.column or "") if statistic.column else None
        sens_l1, sens_l2 = laplace.sensitivity(statistic, bounds)
        assert changed <= laplace.groups_bound, where
        assert l1 <= Fraction(sens_l1), (where, float(l1), sens_l1)
        assert l2_squared <= Fraction(sens_l2) ** 2, (where, math.sqrt(l2_squared), sens_l2)
        # What the Laplace noise was actually calibrated to (the mechanism object the engine builds).
        noise = laplace.mechanism(statistic, dimension, bounds)
        assert isinstance(noise, VectorNoise)
        assert isinstance(noise.mechanism, DiscreteLaplace | Laplace)
        assert l1 <= Fraction(noise.mechanism.sensitivity), where
        # And the Gaussian noise: the L2 norm, on the integer grid the engine snaps real values to.
        noise = gaussian.mechanism(statistic, dimension, bounds)
        assert isinstance(noise, VectorNoise) and isinstance(noise.mechanism, DiscreteGaussian)
        if noise._exponent:
            exponent = noise._exponent
            grid_a = snap_to_grid(np.array([float(v) for v in a]), exponent)
            grid_b = snap_to_grid(np.array([float(v) for v in b]), exponent)
            units = [Fraction(int(u)) for u in np.ldexp(grid_b - grid_a, -exponent)]
            _, units_l2_squared, _ = norms([Fraction(0)] * len(units), units)
            assert units_l2_squared <= Fraction(noise.mechanism.sensitivity) ** 2, where
        else:
            assert l2_squared <= Fraction(noise.mechanism.sensitivity) ** 2, where


def check_histograms(
    compiled: CompiledQuery, statistic: Statistic, before: AggregationResult, after: AggregationResult, label: str
) -> None:
    """Quantile / automatic-bounds histograms: per-group score sensitivity, and at most g groups change."""
    noise = compiled.mechanism(statistic, 1)
    assert isinstance(noise, SelectionNoise)
    levels = compiled.levels(statistic)
    if statistic.kind == "auto":  # signed log2 bins, floored targets
        bins, floor = log2_candidates()[0], auto_rank_floor(noise, len(log2_candidates()[0]))
    else:  # the grid points of the bounds
        bins, floor = list(range(len(quantile_grid(*X_BOUNDS, QUANTILE_BINS).points))), 0.0
    groups = noise.count // len(levels)  # the selections are composed over this many groups
    index_a = {key: i for i, key in enumerate(before.keys)}
    index_b = {key: i for i, key in enumerate(after.keys)}
    assert before.histogram is not None and after.histogram is not None
    changed = 0
    for key in dict.fromkeys([*before.keys, *after.keys]):
        a = before.histogram[index_a[key]] if key in index_a else {}
        b = after.histogram[index_b[key]] if key in index_b else {}
        if a == b:
            continue
        changed += 1
        for level in levels:
            factor = _AUTO_FACTOR if statistic.kind == "auto" else quantile_factor(level)
            score_a, score_b = (exact_scores(h, bins, level, factor, floor) for h in (a, b))
            worst = max(abs(y - x) for x, y in zip(score_a, score_b, strict=True))
            # (1 - 2^-12) Delta: the rest of Delta is the allowance for the scores' rounding
            assert worst <= (1 - Fraction(_SLACK)) * Fraction(noise.sensitivity), (label, statistic.key, key, level)
    assert changed <= groups, (label, statistic.key, changed)


@pytest.mark.parametrize("g", [1, 2])
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("grouping", GROUPINGS)
def test_change_of_noiseless_aggregates_is_within_the_calibrated_sensitivity(tables, grouping, k, g):
    """Adding one heavy person changes every noiseless statistic by at most the sensitivity used for its noise."""
    modes = compile_modes(tables, grouped(grouping, k, g))
    compiled = modes["laplace"]
    auto = compile_query(
        grouped(grouping, k, g).agg(total=E.sum("y", bounds="auto")).plan,
        tables.context(dpkit.ApproxDP(100.0, 1e-3)),
        parse_request(dpkit.ApproxDP(100.0, 1e-3), epsilon=1.0, delta=1e-6),
    )
    auto_statistic = next(s for s in auto.statistics if s.kind == "auto")
    quantile_statistic = next(s for s in compiled.statistics if s.kind == "hist")
    rng = np.random.default_rng([GROUPINGS.index(grouping), k, g])
    for trial in range(TRIALS):
        base = random_base(rng)
        heavy = random_heavy(rng, 1000 + trial, k, g)
        combined = base + heavy
        order = rng.permutation(len(combined))  # a table has no row order: D' lists its rows in any order
        without, with_heavy = tables.add(base), tables.add([combined[i] for i in order])
        salt = "".join(f"{int(w):016x}" for w in rng.integers(0, 2**63, 2))  # public, shared by both runs
        label = f"{grouping} k={k} g={g} trial={trial}"

        plan = aggregation_plan(compiled, fixed_bounds(compiled), salt)
        check_moments_and_counts(modes, tables.run(plan, without), tables.run(plan, with_heavy), label)

        plan = histogram_plan(compiled, quantile_statistic, X_BOUNDS, salt)
        check_histograms(compiled, quantile_statistic, tables.run(plan, without), tables.run(plan, with_heavy), label)

        plan = histogram_plan(auto, auto_statistic, None, salt)
        check_histograms(auto, auto_statistic, tables.run(plan, without), tables.run(plan, with_heavy), label)


def test_heavy_person_reaches_the_sensitivity_so_the_check_is_tight(tables):
    """Sanity check of the harness: a worst-case heavy person moves COUNT and SUM by exactly k per group."""
    k, g = 3, 2
    modes = compile_modes(tables, grouped("public", k, g))
    compiled = modes["laplace"]
    base = random_base(np.random.default_rng(99))
    heavy = [
        {"person_id": 5000, "region": region, "kind": "x", "x": value, "y": 1000}
        for region in ("a", "b")
        for value in (math.inf, 1e300, 20.0, 21.0, 1e15, math.inf, 25.0)  # 7 > k rows, all clamp to 20
    ]
    plan = aggregation_plan(compiled, fixed_bounds(compiled), "salt")
    before = tables.run(plan, tables.add(base))
    after = tables.run(plan, tables.add(base + heavy))
    keys = union_keys(before, after, compiled)
    for key, expected in (("rows", k * g), ("sum:x", k * g * X_BOUNDS[1])):
        statistic = next(s for s in compiled.statistics if s.key == key)
        l1, _, changed = norms(*(exact_values(compiled, r, keys, statistic) for r in (before, after)))
        assert changed == g
        assert abs(l1 - expected) <= 1, (key, float(l1))  # rounding to integer units moves it by < 1 unit each


# ============================================================================================
# 2. Empirical privacy audit
# ============================================================================================


def with_noise_scale_halved(compiled: CompiledQuery) -> CompiledQuery:
    """A deliberately broken query: each statistic gets twice its share, so half the noise scale.

    It still claims the original cost, so its true epsilon is twice the claim.
    """
    return dataclasses.replace(compiled, shares={key: 2 * share for key, share in compiled.shares.items()})


class Cached:
    """A backend that returns precomputed aggregates (so the noise can be drawn without DuckDB)."""

    name = "cached"

    def __init__(self, result: AggregationResult) -> None:
        self.result = result

    def run(self, plan: AggregationPlan) -> AggregationResult:
        return self.result


def engine_release(compiled: CompiledQuery) -> Callable[..., np.ndarray]:
    """``(which, rng, size) -> outputs``: ``size`` independent releases of one aggregate by the engine's own code.

    The noise is the VectorNoise that ``execute`` builds (``compiled.mechanism``) applied to the
    exact aggregate the backend returned, and the released column is ``postprocess``'s output;
    ``size`` releases are drawn at once as ``size`` independent coordinates (identically
    distributed to one release each; checked by ``test_fast_path_is_the_engine_release``).
    """
    keys = list(compiled.query.keys) if compiled.query.keys is not None else [()]
    (name, aggregate), *others = compiled.query.aggregates
    assert not others and aggregate.kind in ("count", "sum")
    statistic = compiled.statistics[0]
    bounds = fixed_bounds(compiled).get(statistic.column or "") if statistic.column else None
    noise = compiled.mechanism(statistic, len(keys), bounds)
    assert isinstance(noise, VectorNoise)

    def values_of(table: AggregationResult) -> list[float]:
        if statistic.kind == "rows":
            return [float(v) for v in column(table, keys, "rows")]
        unit = compiled.moment(statistic, bounds or (0.0, 1.0)).unit_scale
        return [float(v) * unit for v in column(table, keys, "m0")]

    def release(table: AggregationResult, rng: InsecureSeededRandom, size: int) -> np.ndarray:
        values = values_of(table)
        if isinstance(noise.mechanism, DiscreteLaplace):
            noisy = noise.release(values * size, rng)  # the engine's call, on size copies of the vector
        else:  # Laplace on a grid checks its dimension: draw repeated releases of the same vector
            assert isinstance(noise.mechanism, Laplace) and not noise._exponent
            noisy = [float(v) for v in np.asarray(noise.mechanism.release_repeated(values, size, rng=rng)).ravel()]
        half_width = noise.half_width(compiled.request.alpha)
        released = Released(
            [()] * (size * len(keys)),
            {statistic.key: noisy, f"__hw:{statistic.key}": [half_width]},
            fixed_bounds(compiled),
            [],
        )
        out = postprocess(compiled, released)[name]
        return np.asarray(out, dtype=np.float64).reshape(size, len(keys))

    return release


def audit_session(
    rows: list[dict[str, Any]], heavy: list[dict[str, Any]], builder: Callable[[E.QueryBuilder], E.QueryBuilder]
) -> tuple[CompiledQuery, AggregationResult, AggregationResult]:
    """Compile the query in a session on D and aggregate D and D' = D + heavy once each (DuckDB)."""
    session = E.Session.from_arrow(arrow(rows), name="people", privacy_unit="person_id", budget=dpkit.PureDP(10.0))
    compiled = session._compile(builder(session.table()), {"epsilon": 1.0})
    plan = aggregation_plan(compiled, fixed_bounds(compiled), "salt")
    before = session._backend.run(plan)
    session._backend.register("people_and_heavy", arrow(rows + heavy), "arrow")
    after = session._backend.run(dataclasses.replace(plan, table="people_and_heavy"))
    return compiled, before, after


def count_query(q: E.QueryBuilder) -> E.QueryBuilder:
    return q.group_by("region", keys=["a", "b"]).bound(rows_per_group=3, groups_per_person=2).agg(n=E.count())


def sum_query(q: E.QueryBuilder) -> E.QueryBuilder:
    return q.bound(rows_per_group=3).agg(total=E.sum("x", bounds=(0.0, 10.0)))


def heavy_rows(regions: tuple[str | None, ...], per_region: int) -> list[dict[str, Any]]:
    """A heavy person: per_region rows in each region, every x at or beyond the upper bound 10."""
    values = [math.inf, 1e300, 10.0, 11.0, 1e15, 12.5, math.inf, 99.0]
    return [
        {"person_id": 777, "region": region, "kind": None, "x": values[i % len(values)], "y": None}
        for region in regions
        for i in range(per_region)
    ]


@pytest.fixture(scope="module")
def count_audit() -> tuple[CompiledQuery, AggregationResult, AggregationResult]:
    rows = random_base(np.random.default_rng(2024))
    # 9 rows in a and in b (k = 3 each count), 4 in c and NULL (not public keys): the count moves by (3, 3).
    return audit_session(rows, heavy_rows(("a", "b", "c", None), 9), count_query)


@pytest.fixture(scope="module")
def sum_audit() -> tuple[CompiledQuery, AggregationResult, AggregationResult]:
    rows = random_base(np.random.default_rng(2025))
    # 8 rows clamped to 10 in three regions (ungrouped: one group, k = 3): the sum moves by 3 * 10.
    return audit_session(rows, heavy_rows(("a", None, "c"), 8), sum_query)


def llr_statistic(before: np.ndarray, shift: int) -> Callable[[np.ndarray], np.ndarray]:
    """For a count vector moved by ``shift`` per coordinate: sum of clip(y - before, 0, shift) (orders like the LLR)."""
    return lambda outputs: np.clip(outputs - before[None, :], 0, shift).sum(axis=1)


def run_audit(compiled, before, after, *, samples, seed, statistic=None):
    release = engine_release(compiled)
    result = estimate_epsilon(
        release,
        before,
        after,
        samples=samples,
        alpha=ALPHA,
        delta=0.0,
        rng=InsecureSeededRandom(seed),
        vectorized=True,
        statistic=statistic,
    )
    return result.epsilon_lower_bound, result


def test_count_release_passes_the_audit(count_audit):
    compiled, before, after = count_audit
    claimed = compiled.cost.epsilon
    exact = np.array(column(before, list(compiled.query.keys), "rows"), dtype=np.float64)
    assert (np.array(column(after, list(compiled.query.keys), "rows")) - exact).tolist() == [3, 3]
    bound, result = run_audit(compiled, before, after, samples=200_000, seed=1, statistic=llr_statistic(exact, 3))
    assert bound <= claimed, result  # fails with probability <= ALPHA if the engine is right
    assert bound >= 0.85 * claimed, result  # the heavy person is (nearly) the worst case: the audit is tight


def test_count_release_with_half_the_noise_is_caught(count_audit):
    compiled, before, after = count_audit
    claimed = compiled.cost.epsilon
    broken = with_noise_scale_halved(compiled)
    exact = np.array(column(before, list(compiled.query.keys), "rows"), dtype=np.float64)
    bound, result = run_audit(broken, before, after, samples=200_000, seed=2, statistic=llr_statistic(exact, 3))
    assert bound > claimed, result


def test_sum_release_passes_the_audit(sum_audit):
    compiled, before, after = sum_audit
    claimed = compiled.cost.epsilon
    unit = compiled.moment(compiled.statistics[0], (0.0, 10.0)).unit_scale
    assert abs((after.columns["m0"][0] - before.columns["m0"][0]) * unit - 30.0) <= unit
    bound, result = run_audit(compiled, before, after, samples=200_000, seed=3)
    assert bound <= claimed, result
    assert bound >= 0.85 * claimed, result


def test_sum_release_with_half_the_noise_is_caught(sum_audit):
    compiled, before, after = sum_audit
    bound, result = run_audit(with_noise_scale_halved(compiled), before, after, samples=200_000, seed=4)
    assert bound > compiled.cost.epsilon, result


@pytest.mark.parametrize("which", ["count", "sum"])
def test_fast_path_is_the_engine_release(count_audit, sum_audit, monkeypatch, which):
    """For the same seed, the audit's fast path returns exactly what Session.release returns."""
    compiled, before, _ = count_audit if which == "count" else sum_audit
    release = engine_release(compiled)
    session = E.Session.from_arrow(
        arrow(random_base(np.random.default_rng(1))), name="people", privacy_unit="person_id", budget=dpkit.PureDP(1e6)
    )
    monkeypatch.setattr(session, "_backend", Cached(before))
    query = (count_query if which == "count" else sum_query)(session.table())
    name = compiled.query.aggregates[0][0]
    for seed in range(40):
        released = session.release(query, epsilon=1.0, rng=InsecureSeededRandom(seed)).to_pandas()[name].to_numpy()
        source = InsecureSeededRandom(seed)
        source.uint64(2)  # execute draws the grouping salt first
        assert release(before, source, 1)[0].tolist() == released.tolist()


# ============================================================================================
# 3. Budget: a failed query spends nothing
# ============================================================================================


def budget_session(budget: dpkit.guarantees.Guarantee) -> E.Session:
    rows = random_base(np.random.default_rng(5)) + heavy_rows(("a", "b"), 6)
    return E.Session.from_arrow(arrow(rows), name="people", privacy_unit="person_id", budget=budget)


def builder_sum(**cost: Any) -> Callable[[E.Session], Any]:
    return lambda s: s.table().agg(t=E.sum("x")).release(epsilon=0.5, **cost)


def sql(text: str, **cost: Any) -> Callable[[E.Session], Any]:
    return lambda s: s.sql(text, epsilon=0.5, **cost)


# (label, attempt, a fragment of the refusal's message)
FAILURES = [
    ("low above high", builder_sum(bounds={"x": (10, 0)}), "low < high"),
    ("equal bounds", builder_sum(bounds={"x": (1, 1)}), "low < high"),
    ("infinite bound", builder_sum(bounds={"x": (0, math.inf)}), "finite"),
    ("NaN bound", builder_sum(bounds={"x": (math.nan, 1)}), "finite"),
    ("huge bound", builder_sum(bounds={"x": (0, 2.0**61)}), "2\\*\\*60"),
    ("text bound", builder_sum(bounds={"x": "wide"}), "pair"),
    ("bad bounds (SQL)", sql("SELECT SUM(x) FROM people", bounds={"x": (5, -5)}), "low < high"),
    ("missing bounds", builder_sum(), "needs clamping bounds"),
    ("missing bounds (SQL)", sql("SELECT AVG(x) FROM people"), "needs clamping bounds"),
    (
        "two bounds",
        lambda s: s.table().agg(a=E.sum("x", bounds=(0, 1)), b=E.mean("x", bounds=(0, 2))).release(epsilon=0.5),
        "two different bounds",
    ),
    ("HAVING", sql("SELECT region, COUNT(*) FROM people GROUP BY region HAVING SUM(x) > 2", keys=["a"]), "HAVING"),
    (
        "HAVING that cannot bind",
        sql("SELECT region, COUNT(*) AS n FROM people GROUP BY region HAVING n > 'many'", keys=["a"]),
        "having",
    ),
    ("LIMIT", sql("SELECT COUNT(*) FROM people LIMIT 1 + 1"), "LIMIT"),
    ("ORDER BY", sql("SELECT region, COUNT(*) FROM people GROUP BY region ORDER BY 3", keys=["a"]), "ORDER BY"),
    (
        "ORDER BY a column not released",
        sql("SELECT region, COUNT(*) FROM people GROUP BY region ORDER BY x", keys=["a"]),
        "order_by.*result column",
    ),
    ("negative limit", lambda s: s.table().agg(n=E.count()).limit(-1).release(epsilon=0.5), "count"),
    ("subquery", sql("SELECT COUNT(*) FROM (SELECT * FROM people)"), "subquer"),
    ("window", sql("SELECT SUM(x) OVER () FROM people", bounds={"x": (0, 1)}), "window"),
    ("DISTINCT", sql("SELECT DISTINCT region FROM people"), "DISTINCT"),
    ("COUNT(DISTINCT other)", sql("SELECT COUNT(DISTINCT region) FROM people"), "privacy unit"),
    ("other table", sql("SELECT COUNT(*) FROM secrets"), "secrets"),
    ("unknown column", sql("SELECT SUM(salary) FROM people", bounds={"salary": (0, 1)}), "unknown column"),
    ("not SQL", sql("SELEKT nothing"), "single SELECT"),
    ("private keys, no delta", lambda s: s.table().group_by("region").agg(n=E.count()).release(epsilon=0.5), "delta"),
    ("negative epsilon", lambda s: s.table().agg(n=E.count()).release(epsilon=-0.5), "epsilon"),
    ("over budget", lambda s: s.table().agg(n=E.count()).release(epsilon=5.0), "budget exceeded"),
    ("bad filter", lambda s: s.table().where("x >").agg(n=E.count()).release(epsilon=0.5), "not a valid SQL"),
]


@pytest.mark.parametrize(("label", "attempt", "match"), FAILURES, ids=[f[0] for f in FAILURES])
def test_a_refused_query_spends_nothing(label, attempt, match):
    """A query refused for bad or missing bounds, unsupported SQL or bad parameters leaves the budget whole."""
    session = budget_session(dpkit.ApproxDP(1.0, 1e-6))
    before = session.remaining
    with pytest.raises((InvalidParameterError, BudgetExceededError), match=match):
        attempt(session)
    assert session.remaining == before
    assert session.ledger.entries() == ()
    # The budget is still whole: the full amount can be spent afterwards.
    session.table().agg(n=E.count()).release(epsilon=1.0, rng=InsecureSeededRandom(0))
    assert session.remaining.epsilon == 0.0


def test_a_refused_zcdp_query_spends_nothing():
    session = budget_session(dpkit.ZCDP(0.5))
    for attempt in (
        lambda: session.table().agg(t=E.sum("x")).release(rho=0.1),
        lambda: session.table().agg(n=E.count()).release(epsilon=0.1, rho=0.1),  # (epsilon alone: Laplace)
        lambda: session.table().group_by("region").agg(n=E.count()).release(rho=0.1),
        lambda: session.table().agg(n=E.count()).release(rho=0.6),
        lambda: session.sql("SELECT COUNT(*) FROM people LIMIT 1 + 1", rho=0.1),
    ):
        with pytest.raises((InvalidParameterError, BudgetExceededError)):
            attempt()
    assert session.remaining == dpkit.ZCDP(0.5)
    assert session.ledger.entries() == ()


def test_preview_spends_nothing_and_release_spends_exactly_the_cost():
    session = budget_session(dpkit.PureDP(1.0))
    query = session.table().group_by("region", keys=["a", "b"]).agg(n=E.count(), t=E.sum("x", bounds=X_BOUNDS))
    query.preview(epsilon=0.3)
    assert session.remaining == dpkit.PureDP(1.0)
    query.release(epsilon=0.3, rng=InsecureSeededRandom(0))
    assert session.remaining == dpkit.PureDP(0.7)


# ============================================================================================
# Engine bugs found by these tests (pinned: each fails today; strict, so a fix is noticed)
# ============================================================================================


def one_row(person: int, region: str | None, kind: str | None = None, x: float | None = 1.0) -> dict[str, Any]:
    return {"person_id": person, "region": region, "kind": kind, "x": x, "y": 1}


def test_group_choice_does_not_depend_on_row_order(tables):
    builder = E.QueryBuilder(None, "people").group_by("region", keys=[None, "<null>"]).bound(1, 1)
    compiled = compile_modes(tables, builder)["laplace"]
    people = range(50)
    base = [one_row(p, region) for p in people for region in (None, "<null>")]
    # D' = D + one person (in a group outside the keys); its rows happen to be listed in another order.
    neighbour = [one_row(p, region) for p in people for region in ("<null>", None)] + [one_row(999, "zz")]
    plan = aggregation_plan(compiled, fixed_bounds(compiled), "salt")
    before, after = tables.run(plan, tables.add(base)), tables.run(plan, tables.add(neighbour))
    statistic = next(s for s in compiled.statistics if s.key == "rows")
    keys = union_keys(before, after, compiled)
    l1, _, _ = norms(*(exact_values(compiled, r, keys, statistic) for r in (before, after)))
    assert l1 <= compiled.sensitivity(statistic)[0], f"COUNT moved by {float(l1)} for one added person"


def test_l2_sensitivity_is_rounded_up(tables):
    builder = E.QueryBuilder(None, "people").group_by("region", keys=["a", "b", "c"]).bound(1, 3)
    plan = builder.agg(n=E.count(), people=E.count_distinct()).plan
    budget = dpkit.ZCDP(1.0)
    compiled = compile_query(plan, tables.context(budget), parse_request(budget, rho=0.5))
    base = random_base(np.random.default_rng(3))
    heavy = [one_row(4242, region) for region in ("a", "b", "c")]
    aggregation = aggregation_plan(compiled, {}, "salt")
    before, after = tables.run(aggregation, tables.add(base)), tables.run(aggregation, tables.add(base + heavy))
    keys = union_keys(before, after, compiled)
    for statistic in compiled.statistics:
        _, l2_squared, _ = norms(*(exact_values(compiled, r, keys, statistic) for r in (before, after)))
        assert l2_squared == 3  # +1 in each of the three groups
        noise = compiled.mechanism(statistic, len(keys))
        assert l2_squared <= Fraction(noise.mechanism.sensitivity) ** 2, (statistic.key, noise.mechanism.sensitivity)


def test_a_filter_failing_on_one_persons_rows_does_not_reveal_them():
    condition = "CAST(CASE WHEN person_id = 777 THEN 'boom' ELSE '1' END AS INTEGER) = 1"
    base = random_base(np.random.default_rng(8))
    outcomes = []
    for rows in (base, base + heavy_rows(("a",), 2)):
        session = E.Session.from_arrow(arrow(rows), name="people", privacy_unit="person_id", budget=dpkit.PureDP(1))
        try:
            session.table().where(condition).agg(n=E.count()).release(epsilon=0.5, rng=InsecureSeededRandom(0))
            outcomes.append("released")
        except Exception as error:  # noqa: BLE001 - the outcome an analyst observes
            outcomes.append(type(error).__name__)
    assert outcomes[0] == outcomes[1], outcomes


def test_a_query_failing_on_an_ambiguous_joined_column_spends_nothing():
    lookup = pa.table({"region": ["a", "b"], "x": [1.0, 2.0]})
    session = E.Session.from_arrow(
        arrow(random_base(np.random.default_rng(9))),
        name="people",
        privacy_unit="person_id",
        budget=dpkit.PureDP(1.0),
        public_tables={"lookup": lookup},
    )
    with pytest.raises(Exception):  # noqa: B017 - any refusal will do, as long as it spends nothing
        session.table().join("lookup", on="region").agg(t=E.sum("x", bounds=(0, 10))).release(epsilon=0.5)
    assert session.remaining == dpkit.PureDP(1.0)


def test_count_with_variance_compiles():
    session = budget_session(dpkit.PureDP(1.0))
    session.table().agg(n=E.count(), v=E.variance("x", bounds=(0, 10))).preview(epsilon=1.0)


def test_non_product_public_keys_do_not_spend_group_slots_on_other_combinations(tables):
    builder = E.QueryBuilder(None, "people").group_by("region", "kind", keys=[("a", "x"), ("b", "y")]).bound(1, 1)
    compiled = compile_modes(tables, builder)["laplace"]
    table = tables.add([one_row(1, "a", "x"), one_row(1, "a", "y")])  # ("a", "y") is not a key
    counts = []
    for salt in range(16):
        result = tables.run(aggregation_plan(compiled, fixed_bounds(compiled), f"salt{salt}"), table)
        counts.append(column(result, [("a", "x")], "rows")[0])
    assert counts == [1] * 16


def test_public_keys_of_another_type_are_refused_or_matched():
    rows = [one_row(p, "a") | {"y": 1} for p in range(1000)]
    session = E.Session.from_arrow(arrow(rows), name="people", privacy_unit="person_id", budget=dpkit.PureDP(10))
    try:
        result = session.table().group_by("y", keys=["1"]).agg(n=E.count()).release(epsilon=1.0)
    except InvalidParameterError:
        return
    assert result.to_pandas().n.iloc[0] > 900
