"""Test data shared by the engine tests and the backend conformance suite (importable: pytest's pythonpath)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dpkit.engine._compiler import aggregation_plan, compile_query, parse_request


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
