"""Regenerate pld_mixed_reference.csv: epsilons of a mixed workload from Google's dp_accounting.

The workload: ten Gaussians of distinct noise multipliers 1.0, 1.1, ..., 1.9, a Laplace mechanism of
scale 10 run 100 times and a Poisson-subsampled Gaussian (rate 0.01, noise multiplier 1) run 1000
times, under add/remove neighbours. dp_accounting's PLDAccountant (connect-the-dots, pessimistic)
at value_discretization_interval 1e-4 and 1e-5: their difference estimates its discretisation
error. dp_accounting does not count floating-point rounding; dpkit's certified answer may exceed
it by what dpkit's own rounding bound puts at +inf. The version is written in the header.
Run: python make_pld_mixed_reference.py   (about a minute; needs dp-accounting, shares no code with dpkit)
"""

from __future__ import annotations

import csv
import importlib.metadata
from pathlib import Path

from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

DELTAS = [1e-6, 1e-9]


def workload() -> dp_event.DpEvent:
    events: list[dp_event.DpEvent] = [dp_event.GaussianDpEvent(1.0 + 0.1 * i) for i in range(10)]
    events.append(dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(10.0), 100))
    sampled = dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.0))
    events.append(dp_event.SelfComposedDpEvent(sampled, 1000))
    return dp_event.ComposedDpEvent(events)


def main() -> None:
    epsilons = {}
    for interval in (1e-4, 1e-5):
        accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=interval)
        accountant.compose(workload())
        epsilons[interval] = [accountant.get_epsilon(delta) for delta in DELTAS]
    path = Path(__file__).with_name("pld_mixed_reference.csv")
    with path.open("w", newline="") as handle:
        version = importlib.metadata.version("dp-accounting")
        handle.write(f"# dp_accounting {version} PLDAccountant; made by make_pld_mixed_reference.py\n")
        writer = csv.writer(handle)
        writer.writerow(["delta", "epsilon_interval_1e-4", "epsilon_interval_1e-5"])
        for index, delta in enumerate(DELTAS):
            writer.writerow([delta, repr(epsilons[1e-4][index]), repr(epsilons[1e-5][index])])


if __name__ == "__main__":
    main()
