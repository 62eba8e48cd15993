"""Regenerate rdp_reference.csv: RDP-accountant epsilons and deltas from Google's dp_accounting.

Each row is one workload composed in dp_accounting's ``RdpAccountant`` with its default orders
(the same orders dpkit's ``RDPAccountant`` uses by default), queried for epsilon at ``delta`` or
delta at ``epsilon``. The dp_accounting version is written in the header comment.

It also writes rdp_fractional_reference.csv: dp_accounting's RDP of the Poisson-subsampled
Gaussian at fractional orders (``_compute_rdp_poisson_subsampled_gaussian``), where its series is
an upper bound but not a tight one; dpkit's must be at most these values (and at least the exact
integral, which the tests compute in mpmath). Orders where dp_accounting's series does not
converge (it then returns inf and logs a warning) are written as inf.
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


# q, sigma: the fractional orders below at each
FRACTIONAL = [(256 / 60000, 1.1), (0.01, 0.8), (0.05, 3.0), (0.5, 2.0), (0.9, 0.6), (0.001, 5.0)]
FRACTIONAL_ORDERS = [1.1, 1.25, 1.5, 1.75, 2.5, 3.5, 7.5]


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
    path = Path(__file__).with_name("rdp_fractional_reference.csv")
    with path.open("w", newline="") as handle:
        handle.write(
            f"# dp_accounting {version} _compute_rdp_poisson_subsampled_gaussian at fractional orders; "
            "made by make_rdp_reference.py\n"
        )
        writer = csv.writer(handle)
        writer.writerow(["sampling_probability", "noise_multiplier", "order", "rdp"])
        for q, sigma in FRACTIONAL:
            values = rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(q, sigma, FRACTIONAL_ORDERS)
            for order, value in zip(FRACTIONAL_ORDERS, values, strict=True):
                writer.writerow([repr(q), repr(sigma), repr(order), repr(float(value))])


if __name__ == "__main__":
    main()
