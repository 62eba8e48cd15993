"""Accounting benchmark: dpkit's PLD accountant side by side with dp_accounting and prv_accountant.

Run: .venv/bin/python bench/accounting.py   (all in one process; times are wall-clock seconds for
building the accountant, composing and one epsilon(delta=1e-5) query, best of a few runs for the
fast ones).
"""

# The lambdas below capture loop variables on purpose: each is run within its own iteration.
# ruff: noqa: B023

from __future__ import annotations

import importlib.metadata as md
import time
from collections.abc import Callable

from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dpkit.accounting._pld import PLDAccountant
from dpkit.events import ComposedEvent, GaussianEvent, LaplaceEvent, PoissonSampledEvent, SelfComposedEvent

DELTA = 1e-5
Result = tuple[float, float]


def timed(run: Callable[[], float], repeats: int) -> Result:
    best, value = float("inf"), float("nan")
    for _ in range(repeats):
        start = time.perf_counter()
        value = run()
        best = min(best, time.perf_counter() - start)
    return value, best


def workloads() -> dict[str, tuple[object, object]]:
    """name -> (dpkit event, dp_accounting event)."""

    def dpsgd(q: float, sigma: float, steps: int) -> tuple[object, object]:
        ours = SelfComposedEvent(PoissonSampledEvent(q, GaussianEvent(sigma)), steps)
        theirs = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
        return ours, theirs

    mix_ours = ComposedEvent((SelfComposedEvent(LaplaceEvent(10.0), 500), SelfComposedEvent(GaussianEvent(20.0), 500)))
    mix_theirs = dp_event.ComposedDpEvent(
        [
            dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(10.0), 500),
            dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(20.0), 500),
        ]
    )
    return {
        "W1 q=256/60000 s=1.1 T=14063": dpsgd(256 / 60000, 1.1, 14063),
        "W2 q=0.01 s=0.8 T=10000": dpsgd(0.01, 0.8, 10000),
        "1000 x Laplace eps0=0.1": (
            SelfComposedEvent(LaplaceEvent(10.0), 1000),
            dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(10.0), 1000),
        ),
        "500 Laplace + 500 Gaussian": (mix_ours, mix_theirs),
    }


def main() -> None:
    print(f"dp_accounting {md.version('dp-accounting')}, prv_accountant {md.version('prv-accountant')}")
    try:
        from dpkit.accounting._rdp import RDPAccountant  # written by another helper; optional here
    except ImportError:
        RDPAccountant = None  # noqa: N806
    rows: list[tuple[str, str, float, float]] = []
    for name, (ours, theirs) in workloads().items():
        runs: dict[str, tuple[Callable[[], float], int]] = {
            "dpkit PLD pessimistic (h=1e-4)": (lambda: PLDAccountant().compose(ours).epsilon(DELTA), 5),  # type: ignore[arg-type]
            "dpkit PLD optimistic (h=1e-4)": (
                lambda: PLDAccountant(pessimistic=False).compose(ours).epsilon(DELTA),  # type: ignore[arg-type]
                5,
            ),
            "dp_accounting RDP": (lambda: rdp_privacy_accountant.RdpAccountant().compose(theirs).get_epsilon(DELTA), 3),  # type: ignore[arg-type]
            "dp_accounting PLD (1e-4)": (
                lambda: (
                    pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
                    .compose(theirs)  # type: ignore[arg-type]
                    .get_epsilon(DELTA)
                ),
                1,
            ),
        }
        if RDPAccountant is not None:
            runs["dpkit RDP"] = (lambda: RDPAccountant().compose(ours).epsilon(DELTA), 3)
        if name.startswith("W"):
            q, sigma, steps = (256 / 60000, 1.1, 14063) if name.startswith("W1") else (0.01, 0.8, 10000)
            for error in (0.01, 0.001):
                runs[f"prv_accountant (eps_error={error}) upper"] = (
                    lambda error=error, q=q, sigma=sigma, steps=steps: prv(q, sigma, steps, error),
                    1,
                )
        for label, (run, repeats) in runs.items():
            try:
                value, seconds = timed(run, repeats)
            except Exception as exc:  # noqa: BLE001 - a peer failing must not hide the others
                print(f"  {label}: failed ({exc!r})")
                continue
            rows.append((name, label, value, seconds))
    print("\n| workload | accountant | epsilon (delta=1e-5) | seconds | time vs dpkit pessimistic |")
    print("|---|---|---:|---:|---:|")
    reference: dict[str, float] = {}
    for name, label, value, seconds in rows:
        if label.startswith("dpkit PLD pessimistic"):
            reference[name] = seconds
        ratio = seconds / reference[name] if name in reference else float("nan")
        print(f"| {name} | {label} | {value:.4f} | {seconds:.3f} | {ratio:.1f}x |")


def prv(q: float, sigma: float, steps: int, error: float) -> float:
    from prv_accountant import PRVAccountant
    from prv_accountant.privacy_random_variables import PoissonSubsampledGaussianMechanism

    accountant = PRVAccountant(
        prvs=[PoissonSubsampledGaussianMechanism(sampling_probability=q, noise_multiplier=sigma)],
        max_self_compositions=[steps],
        eps_error=error,
        delta_error=DELTA / 1000,
    )
    _, _, upper = accountant.compute_epsilon(DELTA, num_self_compositions=[steps])
    return float(upper)


if __name__ == "__main__":
    main()
