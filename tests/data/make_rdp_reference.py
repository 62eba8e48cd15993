"""Regenerate rdp_reference.csv: RDP-accountant epsilons and deltas from Google's dp_accounting.

Each row is one workload composed in dp_accounting's ``RdpAccountant`` with its default orders
(the same orders dpkit's ``RDPAccountant`` uses by default), queried for epsilon at ``delta`` or
delta at ``epsilon``. The dp_accounting version is written in the header comment.
Run: python make_rdp_reference.py   (needs dp-accounting installed; shares no code with dpkit)
"""

from __future__ import annotations

import csv
import importlib.metadata
from pathlib import Path

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant

# name, kind, sampling_probability, noise_multiplier, count, query, target
WORKLOADS = [
    ("W1 DP-SGD MNIST", "poisson_gaussian", 256 / 60000, 1.1, 14063, "epsilon", 1e-5),
    ("W1 DP-SGD MNIST", "poisson_gaussian", 256 / 60000, 1.1, 14063, "delta", 2.0),
    ("W2", "poisson_gaussian", 0.01, 0.8, 10000, "epsilon", 1e-5),
    ("W2", "poisson_gaussian", 0.01, 0.8, 10000, "delta", 10.0),
    ("small q", "poisson_gaussian", 0.001, 0.6, 1000, "epsilon", 1e-6),
    ("Gaussian x100", "gaussian", 1.0, 10.0, 100, "epsilon", 1e-5),
    ("Laplace x1000 eps0=0.1", "laplace", 1.0, 10.0, 1000, "epsilon", 1e-5),
    ("Laplace x1000 eps0=0.1", "laplace", 1.0, 10.0, 1000, "delta", 10.0),
]


def event_of(kind: str, q: float, sigma: float, count: int) -> dp_accounting.DpEvent:
    if kind == "poisson_gaussian":
        inner: dp_accounting.DpEvent = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    elif kind == "gaussian":
        inner = dp_accounting.GaussianDpEvent(sigma)
    else:
        inner = dp_accounting.LaplaceDpEvent(sigma)
    return dp_accounting.SelfComposedDpEvent(inner, count)


def main() -> None:
    version = importlib.metadata.version("dp-accounting")
    path = Path(__file__).with_name("rdp_reference.csv")
    with path.open("w", newline="") as handle:
        handle.write(f"# dp_accounting {version} RdpAccountant (default orders); made by make_rdp_reference.py\n")
        writer = csv.writer(handle)
        writer.writerow(
            ["name", "kind", "sampling_probability", "noise_multiplier", "count", "query", "target", "value"]
        )
        for name, kind, q, sigma, count, query, target in WORKLOADS:
            accountant = rdp_privacy_accountant.RdpAccountant()
            accountant.compose(event_of(kind, q, sigma, count))
            value = accountant.get_epsilon(target) if query == "epsilon" else accountant.get_delta(target)
            writer.writerow([name, kind, repr(q), repr(sigma), count, query, repr(target), repr(float(value))])


if __name__ == "__main__":
    main()
