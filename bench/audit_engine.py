"""The engine's end-to-end privacy audits (tests/engine/test_engine_release_audit.py), printed as a table.

Run from the repository root::

    .venv/bin/python bench/audit_engine.py

Each row is one audit with the tests' harness and seeds: 10,000 samples per side drawn from
releases of a table of 2,000 independent units (see the tests' module docstring).
"""

import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "engine"))

import test_engine_release_audit as T  # noqa: E402 - the tests' harness, so the figures are the tests'

from dpkit import engine as E  # noqa: E402
from dpkit.engine import _execute  # noqa: E402

warnings.simplefilter("ignore")
count, bounded = E.count(), T.bounded
crowd = [(person, 1.0) for person in range(28)]
honest = _execute.aggregation_plan


def doubled(*args, **kwargs):
    import dataclasses

    plan = honest(*args, **kwargs)
    return dataclasses.replace(plan, rows_per_group=2 * plan.rows_per_group)


rows = [
    ("COUNT, k=2, g=1, Laplace", lambda: T.audit(bounded(2, 1, n=count), "n", seed=1, epsilon=1.0), 1.0, 0.0),
    (
        "SUM [-4, 10], k=2, g=1, Laplace",
        lambda: T.audit(bounded(2, 1, s=E.sum("x", bounds=T.BOUNDS)), "s", seed=1, epsilon=1.0),
        1.0,
        0.0,
    ),
    (
        "COUNT, X in 3 groups, g=1",
        lambda: T.audit(bounded(2, 1, n=count), "n", seed=11, groups_per_unit=3, epsilon=1.0),
        1.0,
        0.0,
    ),
    (
        "COUNT, X in 3 groups, g=2",
        lambda: T.audit(bounded(2, 2, n=count), "n", seed=12, groups_per_unit=3, epsilon=1.0),
        1.0,
        0.0,
    ),
    (
        "COUNT, Gaussian",
        lambda: T.audit(bounded(2, 1, n=count), "n", seed=3, epsilon=1.0, delta=1e-6, mechanism="gaussian"),
        1.0,
        1e-6,
    ),
    (
        "COUNT, private keys (threshold)",
        lambda: T.audit(
            bounded(2, 1, n=count), "n", seed=4, public_keys=False, background=crowd, epsilon=1.0, delta=1e-6
        ),
        1.0,
        1e-6,
    ),
    (
        "MEDIAN [-4, 10], k=2, g=1",
        lambda: T.audit(bounded(2, 1, m=E.median("x", bounds=T.BOUNDS)), "m", seed=5, epsilon=1.0),
        1.0,
        0.0,
    ),
]
print(f"{'query':<36} {'claimed':>12} {'audit lower bound':>18} {'samples':>9}  verdict")
start = time.perf_counter()
for name, run, epsilon, delta in rows:
    result = run()
    claim = f"{epsilon:g}" + (f", {delta:g}" if delta else "")
    verdict = "passes" if result.epsilon_lower_bound <= epsilon else "VIOLATION"
    print(f"{name:<36} {claim:>12} {result.epsilon_lower_bound:>18.4f} {result.samples:>9,}  {verdict}")
_execute.aggregation_plan = doubled
result = T.audit(bounded(2, 1, n=count), "n", seed=1, epsilon=1.0)
verdict = "caught" if result.epsilon_lower_bound > 1.0 else "MISSED"
name = "COUNT, SQL keeps 2k rows (broken)"
print(f"{name:<36} {'1':>12} {result.epsilon_lower_bound:>18.4f} {result.samples:>9,}  {verdict}")
_execute.aggregation_plan = honest
print(f"({time.perf_counter() - start:.0f} s)")
