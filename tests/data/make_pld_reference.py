"""Regenerate tests/data/pld_reference.csv from Google's dp_accounting and Microsoft's prv_accountant.

Run: .venv/bin/python tests/data/make_pld_reference.py > tests/data/pld_reference.csv

Each row: a workload, delta, and epsilon from dp_accounting's PLD accountant (pessimistic =
certified upper bound, optimistic = lower estimate) and, for subsampled Gaussians, prv_accountant's
(lower, estimate, upper) at eps_error 0.01. The truth lies between dp_accounting's two figures.
"""

from __future__ import annotations

import importlib.metadata as md

from dp_accounting.pld import privacy_loss_distribution as pld_lib
from prv_accountant import PRVAccountant
from prv_accountant.privacy_random_variables import PoissonSubsampledGaussianMechanism

WORKLOADS = [
    # name, kind, sampling rate, noise multiplier, count
    ("dpsgd_small", "subsampled_gaussian", 0.01, 1.0, 1000),
    ("dpsgd_w1", "subsampled_gaussian", 256 / 60000, 1.1, 14063),
    ("laplace_100", "laplace", 1.0, 10.0, 100),
    ("subsampled_laplace", "subsampled_laplace", 0.05, 2.0, 500),
    ("gaussian_50", "gaussian", 1.0, 5.0, 50),
]
DELTA = 1e-5


def main() -> None:
    print(f"# dp_accounting {md.version('dp-accounting')}, prv_accountant {md.version('prv-accountant')}")
    print("# dp_accounting privacy_loss_distribution.from_*_mechanism(value_discretization_interval=1e-5)")
    print("# .self_compose(count); prv_accountant eps_error=0.01")
    print(
        "name,kind,sampling_rate,noise_multiplier,count,delta,dpa_pessimistic,dpa_optimistic,prv_lower,prv_estimate,prv_upper"
    )
    for name, kind, q, noise, count in WORKLOADS:
        figures = []
        for pessimistic in (True, False):
            make = pld_lib.from_laplace_mechanism if "laplace" in kind else pld_lib.from_gaussian_mechanism
            single = make(noise, pessimistic_estimate=pessimistic, value_discretization_interval=1e-5, sampling_prob=q)
            figures.append(single.self_compose(count).get_epsilon_for_delta(DELTA))
        prv = ["", "", ""]
        if kind == "subsampled_gaussian":
            accountant = PRVAccountant(
                prvs=[PoissonSubsampledGaussianMechanism(sampling_probability=q, noise_multiplier=noise)],
                max_self_compositions=[count],
                eps_error=0.01,
                delta_error=DELTA / 1000,
            )
            prv = [f"{v:.6f}" for v in accountant.compute_epsilon(DELTA, num_self_compositions=[count])]
        print(f"{name},{kind},{q!r},{noise!r},{count},{DELTA!r},{figures[0]:.6f},{figures[1]:.6f},{','.join(prv)}")


if __name__ == "__main__":
    main()
