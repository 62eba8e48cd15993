"""Empirical privacy audit of the whole engine: session -> bounding SQL -> noise, end to end.

The mechanisms and the bounding SQL have exact tests of their own; this checks what a user gets.
The neighbouring pair: a person X with many more rows than the contribution limits allow, values
at a clamping bound, present or absent. To draw thousands of samples from few releases, one table
holds many independent *units*, each its own group (or groups) with an identical copy of the
background people; X is present in the even units and absent from the odd ones. With public keys
(or threshold selection, which is per group) a unit's released values depend only on its own rows
and its own noise, so one release gives one independent sample per unit: even units are draws of
the release on "with X", odd units on "without X", for a neighbouring pair that differs by X.

:func:`dpkit.audit.estimate_epsilon` turns the samples into an empirical lower bound on epsilon
(exact Clopper-Pearson intervals). If the engine keeps its claim, the bound exceeds the claimed
epsilon with probability at most ``ALPHA`` = 1e-6 per audit, so ``bound <= claimed`` fails only on
a real violation. The same audit against an engine whose SQL keeps twice the rows it was
calibrated for reports a bound above the claim: the audits can catch a factor-two error.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit
from dpkit import engine as E
from dpkit.audit import AuditResult, estimate_epsilon
from dpkit.engine import _execute
from dpkit.noise import InsecureSeededRandom

ALPHA = 1e-6
UNITS = 2000  # per table: 1000 samples of each side per release
SAMPLES = 10_000  # per side
BOUNDS = (-4.0, 10.0)
BACKGROUND = [(0, -4.0), (0, 3.0), (1, 7.0), (2, 0.0), (2, 10.0), (2, 5.0), (3, 1.0), (4, 9.0), (5, 2.0)]
HUGE = dpkit.ApproxDP(1e9, 0.5)  # many releases; each is audited against its own claim


def unit_table(groups_per_unit: int, background: list[tuple[int, float]] = BACKGROUND) -> pd.DataFrame:
    """UNITS units of ``groups_per_unit`` groups; X has 8 rows at the upper bound in each group of an even unit."""
    rows = []
    for unit in range(UNITS):
        for part in range(groups_per_unit):
            group = f"u{unit}_{part}"
            rows += [(unit * 1000 + person, group, value) for person, value in background]
            if unit % 2 == 0:
                rows += [(unit * 1000 + 999, group, BOUNDS[1])] * 8
    return pd.DataFrame(rows, columns=["pid", "g", "x"])


def audit(
    query: Callable[[Any], Any],
    column: str,
    *,
    seed: int,
    groups_per_unit: int = 1,
    public_keys: bool = True,
    background: list[tuple[int, float]] = BACKGROUND,
    **cost: Any,
) -> AuditResult:
    """Audit ``query`` (a function of the grouped builder) released at ``cost``.

    The statistic of a unit is ``column`` summed over the unit's groups.
    """
    frame = unit_table(groups_per_unit, background)
    session = dpkit.Session.from_pandas(frame, name="t", privacy_unit="pid", budget=HUGE)
    keys = [f"u{u}_{p}" for u in range(UNITS) for p in range(groups_per_unit)]
    built = query(session.table().group_by("g", keys=keys if public_keys else None))
    claimed: list[dpkit.Guarantee] = []

    def release(side: int, rng: Any, size: int) -> np.ndarray:
        samples: list[float] = []
        while len(samples) < size:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", dpkit.PrivacyWarning)
                result = session.release(built, rng=rng, **cost)
            claimed.append(result.guarantee)
            values = dict(zip(result.columns["g"], result.columns[column], strict=True))
            for unit in range(side, UNITS, 2):  # a unit whose groups were not released reads as a sentinel
                parts = [values.get(f"u{unit}_{p}") for p in range(groups_per_unit)]
                samples.append(-1e9 if None in parts else float(sum(parts)))
        return np.asarray(samples[:size])

    epsilon, delta = float(cost["epsilon"]), float(cost.get("delta", 0.0))
    result = estimate_epsilon(
        release, 0, 1, samples=SAMPLES, delta=delta, alpha=ALPHA, rng=InsecureSeededRandom(seed), vectorized=True
    )
    assert {(g.epsilon, getattr(g, "delta", 0.0)) for g in claimed} == {(epsilon, delta)}  # what was audited
    return result


def bounded(k: int, g: int, **aggregates: Any) -> Callable[[Any], Any]:
    return lambda grouped: grouped.bound(rows_per_group=k, groups_per_person=g).agg(**aggregates)


@pytest.mark.parametrize(
    "query, column",
    [(bounded(2, 1, n=E.count()), "n"), (bounded(2, 1, s=E.sum("x", bounds=BOUNDS)), "s")],
    ids=["count", "sum"],
)
def test_bounded_laplace_releases_stay_within_epsilon(query: Any, column: str) -> None:
    result = audit(query, column, seed=1, epsilon=1.0)
    assert result.epsilon_lower_bound <= 1.0, result
    assert result.epsilon_lower_bound > 0.5, result  # the audit sees most of the loss (seeded)


def test_the_audit_catches_an_engine_that_keeps_twice_the_rows_it_was_calibrated_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    honest = _execute.aggregation_plan

    def doubled(*args: Any, **kwargs: Any) -> Any:
        plan = honest(*args, **kwargs)
        return dataclasses.replace(plan, rows_per_group=2 * plan.rows_per_group)

    monkeypatch.setattr(_execute, "aggregation_plan", doubled)
    result = audit(bounded(2, 1, n=E.count()), "n", seed=1, epsilon=1.0)
    assert result.epsilon_lower_bound > 1.0, result


@pytest.mark.parametrize("g", [1, 2])
def test_a_person_in_every_group_is_cut_to_g_groups(g: int) -> None:
    # X has 8 rows in each of a unit's 3 groups; the unit's total moves by at most g * k.
    result = audit(bounded(2, g, n=E.count()), "n", seed=10 + g, groups_per_unit=3, epsilon=1.0)
    assert result.epsilon_lower_bound <= 1.0, result


def test_gaussian_releases_stay_within_their_guarantee() -> None:
    result = audit(bounded(2, 1, n=E.count()), "n", seed=3, epsilon=1.0, delta=1e-6, mechanism="gaussian")
    assert result.epsilon_lower_bound <= 1.0, result


def test_private_keys_stay_within_their_guarantee() -> None:
    # Selection by noisy threshold is per group: a unit near the threshold (29 rows) is released
    # or not depending on X, and its count moves with X.
    crowd = [(person, 1.0) for person in range(28)]
    result = audit(
        bounded(2, 1, n=E.count()), "n", seed=4, public_keys=False, background=crowd, epsilon=1.0, delta=1e-6
    )
    assert result.epsilon_lower_bound <= 1.0, result
    assert result.epsilon_lower_bound > 0.5, result  # released or not is the informative event (seeded)


def test_a_median_stays_within_epsilon() -> None:
    result = audit(bounded(2, 1, m=E.median("x", bounds=BOUNDS)), "m", seed=5, epsilon=1.0)
    assert result.epsilon_lower_bound <= 1.0, result
