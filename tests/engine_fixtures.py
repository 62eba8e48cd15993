"""Test data shared by the engine tests and the backend conformance suite (importable: pytest's pythonpath)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd

from dpkit.engine._compiler import aggregation_plan, compile_query, histogram_plan, parse_request


def make_people(rows: int = 3000, people: int = 400, seed: int = 7) -> pd.DataFrame:
    """person_id, region (4 values), income (some NaN / inf / huge), age; people live in one region."""
    rng = np.random.default_rng(seed)
    person = rng.integers(0, people, rows)
    region = np.array(["north", "south", "east", "west"], dtype=object)[person % 4]
    income = rng.lognormal(10, 1, rows)
    income[::97] = np.nan
    income[5] = np.inf
    income[6] = -np.inf
    income[7] = 5e9
    age = rng.integers(18, 90, rows).astype(np.int64)
    return pd.DataFrame({"person_id": person, "region": region, "income": income, "age": age})


def exact_aggregates(session, query, bounds=None, *, salt: str = "salt", **cost):
    """Compile ``query`` (default epsilon 1) and run its noiseless bounded aggregation: (compiled, result)."""
    request = parse_request(session.budget, **(cost or {"epsilon": 1.0}))
    compiled = compile_query(query.plan, session._context(), request, bounds=bounds)
    resolved = {k: v for k, v in compiled.bounds.items() if isinstance(v, tuple)}
    return compiled, session._backend.run(aggregation_plan(compiled, resolved, salt))


def exact_releases(session, query, *, salt: str = "salt", **cost) -> list[list[str]]:
    """Every noiseless aggregation ``query`` runs (its sums and counts, then one histogram per
    quantile column), each as the sorted reprs of its rows: comparable across processes."""
    compiled, first = exact_aggregates(session, query, salt=salt, **cost)
    resolved = {k: v for k, v in compiled.bounds.items() if isinstance(v, tuple)}
    quantile_plans = [
        histogram_plan(compiled, s, resolved[s.column or ""], salt) for s in compiled.statistics if s.kind == "hist"
    ]
    out = []
    for result in [first, *(session._backend.run(plan) for plan in quantile_plans)]:
        histograms = [sorted(h.items()) for h in result.histogram or []]
        rows = zip(result.keys, *result.columns.values(), *([histograms] if histograms else []), strict=True)
        out.append(sorted(repr(row) for row in rows))
    return out


def far_instants(kind: str, unit: str = "pid"):
    """Three rows whose column ``c`` holds, in row 2, an instant 1e17 s after 1970 (past DuckDB's
    microsecond TIMESTAMP), as a ``kind`` frame ("pandas", "arrow", "polars"), with the Session
    constructor for that kind. ``unit`` names the person column (values 1, 2, 3)."""
    import pytest

    from dpkit import engine as E

    frame = pd.DataFrame({unit: [1, 2, 3], "c": np.array([1, 10**17, 5], dtype="datetime64[s]")})
    if kind == "arrow":
        import pyarrow as pa

        source = pa.Table.from_pandas(frame, preserve_index=False)
    elif kind == "polars":
        source = pytest.importorskip("polars").from_pandas(frame)
    else:
        source = frame
    opener = {"pandas": E.Session.from_pandas, "arrow": E.Session.from_arrow, "polars": E.Session.from_polars}[kind]
    return source, opener


def exact_rank_scores(cells: list[Fraction], level: float, factor: float, floor: float = 0.0) -> list[Fraction]:
    """The quantile / automatic-bounds scores in exact arithmetic: -factor * dist(target, [below_j,
    below_j + cell_j]), the target level * total clipped to [min(floor, total / 2), max(total - floor,
    total / 2)] (the automatic bounds' floor; none for quantiles)."""
    total = sum(cells, Fraction(0))
    target = Fraction(level) * total
    if floor:
        half = total / 2
        target = min(max(target, min(Fraction(floor), half)), max(total - Fraction(floor), half))
    scores, below = [], Fraction(0)
    for weight in cells:
        scores.append(-Fraction(factor) * max(below - target, target - below - weight, Fraction(0)))
        below += weight
    return scores
