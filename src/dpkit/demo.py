"""``python -m dpkit.demo``: a private histogram and a private mean, with confidence intervals.

The job: a statistics office holds the (synthetic) people table and publishes
1. the number of people per region (a histogram over the public region list), and
2. the mean yearly income,
spending a total budget of epsilon = 1 (add/remove-one neighbours), and prints each released
value with its 95% confidence interval and the privacy spent.
"""

from __future__ import annotations

import numpy as np

from dpkit.datasets import REGIONS, people
from dpkit.guarantees import PureDP, compose
from dpkit.mechanisms.geometric import DiscreteLaplace
from dpkit.mechanisms.laplace import Laplace
from dpkit.mechanisms.sensitivity import clamp, noisy_mean
from dpkit.noise import RandomSource

__all__ = ["main", "run"]

INCOME_BOUNDS = (0.0, 250_000.0)  # public clamping bounds, declared before looking at the data
ALPHA = 0.05


def run(rng: RandomSource | None = None) -> list[tuple[str, float, float, float, str]]:
    """Run the demo job; return rows (statistic, released value, CI low, CI high, privacy spent)."""
    table = people()
    rows: list[tuple[str, float, float, float, str]] = []

    # 1. Histogram: each person is in exactly one region, so adding or removing a person
    #    changes the count vector by 1 in L1 norm: one discrete Laplace release covers all bins.
    histogram_mechanism = DiscreteLaplace(sensitivity=1, epsilon=0.5)
    counts = np.bincount(table.region, minlength=len(REGIONS))
    noisy_counts = histogram_mechanism.release(counts, rng=rng)
    low, high = histogram_mechanism.confidence_interval(ALPHA, noisy_counts)
    for name, value, lo, hi in zip(REGIONS, noisy_counts, low, high, strict=True):
        rows.append((f"people in {name}", float(value), float(lo), float(hi), "(shared)"))
    rows.append(("  histogram total cost", float("nan"), float("nan"), float("nan"), "eps=0.5"))

    # 2. Mean income = noisy clamped sum / noisy count (post-processing of two releases).
    lower, upper = INCOME_BOUNDS
    clamped = clamp(table.income, lower, upper)
    sum_mechanism = Laplace(sensitivity=max(abs(lower), abs(upper)), epsilon=0.25)
    count_mechanism = DiscreteLaplace(sensitivity=1, epsilon=0.25)
    noisy_sum = sum_mechanism.release(float(np.sum(clamped)), rng=rng)
    noisy_count = count_mechanism.release(len(table), rng=rng)
    mean = float(noisy_mean(noisy_sum, noisy_count, lower, upper))
    # Each interval at alpha/2: both hold together with probability >= 1 - alpha (union bound).
    sum_low, sum_high = sum_mechanism.confidence_interval(ALPHA / 2, noisy_sum)
    count_low, count_high = count_mechanism.confidence_interval(ALPHA / 2, noisy_count)
    mean_low = max(lower, sum_low / max(count_high, 1))
    mean_high = min(upper, sum_high / max(count_low, 1))
    rows.append(("mean income", mean, mean_low, mean_high, "eps=0.5"))

    total = compose(compose(histogram_mechanism.guarantee, sum_mechanism.guarantee), count_mechanism.guarantee)
    assert isinstance(total, PureDP)
    rows.append(("TOTAL privacy spent", float("nan"), float("nan"), float("nan"), f"eps={total.epsilon:g}"))
    return rows


def _format(value: float) -> str:
    return "" if np.isnan(value) else f"{value:,.1f}"


def main() -> None:
    """Print the demo's releases as a table."""
    table = people()
    print(f"dpkit demo: {len(table)} synthetic people (region, age, income); neighbours: add/remove one person")
    print(f"Releases with {int((1 - ALPHA) * 100)}% confidence intervals, noise from the OS CSPRNG.\n")
    header = ("statistic", "released", "CI low", "CI high", "privacy")
    rows = [(name, _format(v), _format(lo), _format(hi), cost) for name, v, lo, hi, cost in run()]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(5)]
    line = "  ".join(f"{{:<{widths[0]}}}" if i == 0 else f"{{:>{widths[i]}}}" for i in range(5))
    print(line.format(*header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line.format(*row))


if __name__ == "__main__":
    main()
