"""Epsilon at small deltas: dpkit's certified PLD against the exact profile and dp_accounting's PLD.

Run from the repository root::

    .venv/bin/python bench/accounting_tiny_delta.py

Two workloads: ten Gaussian mechanisms of noise multiplier 1 (mu = sqrt 10 Gaussian DP, whose
exact epsilon(delta) is known in closed form) and DP-SGD W1 (q = 256/60000, sigma = 1.1, 14,063
steps; no closed form: dpkit's RDP bound is printed as the loose reference). Both PLDs use the
grid 1e-4. dpkit's answer is a certified upper bound (pessimistic discretisation, truncation and
rounding counted in delta); dp_accounting's PLD is pessimistic in its discretisation but does not
account for floating-point rounding.
"""

from __future__ import annotations

import math

from dpkit.accounting import GaussianEvent, PLDAccountant, RDPAccountant, gaussian_epsilon
from dpkit.events import dpsgd_event

DELTAS = (1e-5, 1e-7, 1e-9, 1e-10, 1e-11, 1e-12)


def _dp_accounting(workload: str):
    try:
        from dp_accounting.pld import privacy_loss_distribution as pld
    except ImportError:
        return None
    if workload == "gaussian":
        return pld.from_gaussian_mechanism(1.0, value_discretization_interval=1e-4).self_compose(10)
    return pld.from_gaussian_mechanism(1.1, sampling_prob=256 / 60000, value_discretization_interval=1e-4).self_compose(
        14063
    )


def main() -> None:
    print("| workload | delta | dpkit PLD (certified) | dp_accounting PLD | reference |")
    print("|---|---:|---:|---:|---:|")
    for workload in ("gaussian", "dpsgd"):
        if workload == "gaussian":
            ours = PLDAccountant().compose(GaussianEvent(1.0), 10)
            label = "10 x Gaussian, sigma 1"
        else:
            ours = PLDAccountant().compose(dpsgd_event(1.1, 256 / 60000, 14063))
            rdp = RDPAccountant().compose(dpsgd_event(1.1, 256 / 60000, 14063))
            label = "DP-SGD W1"
        theirs = _dp_accounting(workload)
        for delta in DELTAS:
            if workload == "gaussian":
                reference = f"{gaussian_epsilon(math.sqrt(10), delta):.4f} (exact)"
            else:
                reference = f"{rdp.epsilon(delta):.4f} (RDP)"
            peer = "n/a" if theirs is None else f"{theirs.get_epsilon_for_delta(delta):.4f}"
            print(f"| {label} | {delta:g} | {ours.epsilon(delta):.4f} | {peer} | {reference} |")


if __name__ == "__main__":
    main()
