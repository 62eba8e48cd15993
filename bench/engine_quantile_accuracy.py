"""Accuracy of the engine's released quantiles: continuous data and data with ties (one process).

Run from the repository root (``PYTHONPATH=<worktree>/src`` measures another state)::

    .venv/bin/python bench/engine_quantile_accuracy.py

Continuous: per group of n normal(50, 10) values clamped to [0, 100], the 10th, 50th and 90th
percentiles at epsilon 1; printed are the mean absolute error of the released value and of its
rank (rows below it against level * n), over groups and seeded repetitions. Ties: ratings 1 to 5
(probabilities .05 .1 .2 .4 .25, true median 4) and a column of 70% zeros (true median 0), bounds
[0, 10], 5,000 people, median at epsilon 1: the share of releases equal to the true median and the
mean absolute error. Seeds are fixed (``InsecureSeededRandom``: for measurement only).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

import dpkit
from dpkit import engine as E
from dpkit.noise import InsecureSeededRandom

LEVELS = (0.1, 0.5, 0.9)


def continuous(n: int, groups: int, repeats: int, epsilon: float) -> str:
    rng = np.random.default_rng(n + groups)
    frame = pd.DataFrame(
        {"pid": np.arange(n * groups), "g": np.repeat(np.arange(groups), n), "x": rng.normal(50, 10, n * groups)}
    )
    session = E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(1e12))
    query = session.table().group_by("g", keys=list(range(groups))).agg(q=E.quantiles("x", LEVELS, bounds=(0, 100)))
    values = {g: np.sort(np.clip(v.to_numpy(), 0, 100)) for g, v in frame.groupby("g").x}
    errors: dict[float, list[float]] = {level: [] for level in LEVELS}
    ranks: dict[float, list[float]] = {level: [] for level in LEVELS}
    for repeat in range(repeats):
        out = query.release(epsilon=epsilon, rng=InsecureSeededRandom(1000 + repeat)).to_pandas().set_index("g")
        for g in range(groups):
            for level in LEVELS:
                released = out.loc[g, f"q_p{int(level * 100)}"]
                errors[level].append(abs(released - np.quantile(values[g], level)))
                ranks[level].append(abs(np.searchsorted(values[g], released) - level * n))
    cells = [f"{np.mean(errors[level]):.3f} / {np.mean(ranks[level]):.1f}" for level in LEVELS]
    return f"| continuous, n = {n:,} | {' | '.join(cells)} |"


def ties(repeats: int = 40) -> str:
    rng = np.random.default_rng(1)
    n = 5000
    frame = pd.DataFrame(
        {
            "pid": np.arange(n),
            "rating": rng.choice([1, 2, 3, 4, 5], n, p=[0.05, 0.1, 0.2, 0.4, 0.25]).astype(float),
            "zeros": np.where(rng.random(n) < 0.7, 0.0, rng.uniform(0, 10, n)),
        }
    )
    bounds = {"rating": (0, 10), "zeros": (0, 10)}
    session = E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(1e12), bounds=bounds)
    text = "SELECT MEDIAN(rating) AS r, MEDIAN(zeros) AS z FROM data"
    rating, zeros = [], []
    for repeat in range(repeats):
        out = session.sql(text, epsilon=1.0, rng=InsecureSeededRandom(repeat)).to_pandas()
        rating.append(float(out["r"].iloc[0]))
        zeros.append(float(out["z"].iloc[0]))
    r, z = np.array(rating), np.array(zeros)
    return (
        f"| ties, median, n = 5,000 | rating (true 4): exact in {np.mean(r == 4.0):.0%}, MAE {np.mean(abs(r - 4)):.3f} "
        f"| 70% zeros (true 0): exact in {np.mean(z == 0.0):.0%}, MAE {np.mean(abs(z)):.3f} | |"
    )


def main() -> None:
    warnings.simplefilter("ignore")
    print("| case | p10 MAE / rank error | p50 MAE / rank error | p90 MAE / rank error |")
    print("|---|---:|---:|---:|")
    for n, groups, repeats in ((100, 200, 5), (1000, 200, 3), (20000, 30, 2)):
        print(continuous(n, groups, repeats, 1.0), flush=True)
    print(ties(), flush=True)


if __name__ == "__main__":
    main()
