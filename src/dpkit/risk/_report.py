"""The GDPR-style illustration of Dandekar, Basu & Bressan (PoPETs 2021, Sec. 5.2) and its report.

A company budgets the compensation it would owe each stakeholder after a breach: ``E = 550 000``,
``c = 1``, ``E_min = 0``, Laplace mechanism calibrated with ``epsilon0`` in {0.5, 0.6, 0.7}.
Without privacy at risk it budgets ``E_{epsilon0}``; with it, it promises the cost-optimal
``epsilon*`` and budgets ``B(epsilon*) = c_1 E_{epsilon*} + (1 - c_1) E_{epsilon0}``, which is
smaller: the plain budget over-estimates.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_delta, check_epsilon
from dpkit.risk._composition import composition
from dpkit.risk._cost import CostModel
from dpkit.risk._laplace import laplace_confidence

__all__ = ["cli_main", "gdpr_example", "report"]

GDPR_E = 550_000.0
GDPR_EPSILON0 = (0.5, 0.6, 0.7)

#: What the ``confidence`` of a row is, in words (printed by ``dpkit risk``).
CONFIDENCE_MEANING = (
    "c1(eps*) = P[T <= eps* | T <= eps0], the paper's confidence about the noise statistic "
    "T = (eps0 / Delta) |eta|; not the probability that the realised privacy loss is at most eps*"
)


def _check_epsilon0s(epsilon0s: Any) -> tuple[float, ...]:
    allowed = "must be a sequence of real numbers in (0, 700] (e^epsilon0 overflows in the compositions above 709.78)"
    if isinstance(epsilon0s, str | bytes) or not isinstance(epsilon0s, Iterable):
        raise InvalidParameterError("epsilon0s", epsilon0s, allowed)
    values = []
    for value in epsilon0s:
        try:
            checked = check_epsilon(value, "epsilon0s")
        except InvalidParameterError:
            raise InvalidParameterError("epsilon0s", epsilon0s, allowed) from None
        if checked > 700:
            raise InvalidParameterError("epsilon0s", epsilon0s, allowed)
        values.append(checked)
    return tuple(values)


def gdpr_example(
    E: float = GDPR_E, c: float = 1.0, epsilon0s: tuple[float, ...] = GDPR_EPSILON0, delta: float = 1e-5
) -> dict[str, Any]:
    """Returns the **numbers** of the GDPR illustration: optimum, budgets and savings per ``epsilon0``.

    Each row's ``confidence`` is the paper's noise confidence ``c_1(eps*) = P[T <= eps* | T <= eps0]``
    (:func:`dpkit.risk.laplace_confidence`), not the probability that the realised privacy loss is at
    most ``eps*``. Every parameter is checked before any computation: ``E`` and ``c`` as in
    :class:`CostModel`, each of ``epsilon0s`` in ``(0, 700]``, ``0 < delta < 1``.

    >>> rows = gdpr_example()["rows"]
    >>> [round(r["optimal_epsilon"], 4) for r in rows]
    [0.2741, 0.3093, 0.3412]
    >>> all(r["budget_with_risk"] < r["budget_without_risk"] for r in rows)
    True
    """
    model = CostModel(E, c=c)
    levels = _check_epsilon0s(epsilon0s)
    check_delta(delta, allow_zero=False)
    rows = []
    for eps0 in levels:
        best = model.optimal_epsilon(eps0)
        with_risk = model.expected_budget(best, eps0)
        without = model.cost(eps0)
        rows.append(
            {
                "epsilon0": eps0,
                "optimal_epsilon": best,
                "confidence": laplace_confidence(best, eps0),
                "cost_at_optimal_epsilon": model.cost(best),
                "budget_with_risk": with_risk,
                "budget_without_risk": without,
                "saving": without - with_risk,
                "composition_100": {
                    method: composition(100, best, eps0, delta, method)
                    for method in ("privacy_at_risk", "basic", "advanced", "optimal", "pld")
                },
            }
        )
    return {"E": E, "E_min": 0.0, "c": c, "delta": delta, "rows": rows}


def report(path_prefix: str | Path) -> dict[str, Any]:
    """Write ``<path_prefix>_cost.png`` (three panels) and return the :func:`gdpr_example` numbers.

    Panels: confidence vs epsilon for several epsilon0; the expected budget vs epsilon with its
    minimum marked (and the plain budget ``E_{epsilon0}``); composition (basic, advanced, optimal,
    PLD, privacy at risk) vs the number of queries. matplotlib is imported here only.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numbers = gdpr_example()
    model = CostModel(numbers["E"], c=numbers["c"])
    figure, (ax_conf, ax_cost, ax_comp) = plt.subplots(1, 3, figsize=(16, 4.8))
    for eps0 in (0.5, 1.0, 1.5, 2.0):
        grid = np.linspace(0.0, eps0 * 1.2, 200)
        solid = ax_conf.plot(grid, [laplace_confidence(e, eps0) for e in grid], "-", label=f"ε₀={eps0}")[0]
        ax_conf.plot(grid, [laplace_confidence(e, eps0, 3) for e in grid], "--", color=solid.get_color())
    ax_conf.set(
        xlabel="ε",
        ylabel="noise confidence P[T ≤ ε | T ≤ ε₀]",
        title="Laplace noise statistic T, not the privacy loss (dashed: k=3)",
    )
    ax_conf.legend(fontsize=8)
    for row in numbers["rows"]:
        eps0 = row["epsilon0"]
        grid = np.linspace(1e-3, eps0, 300)
        line = ax_cost.plot(grid, [model.expected_budget(e, eps0) for e in grid], label=f"B(ε), ε₀={eps0}")[0]
        ax_cost.plot([row["optimal_epsilon"]], [row["budget_with_risk"]], "o", color=line.get_color())
        ax_cost.axhline(row["budget_without_risk"], color=line.get_color(), linestyle=":", linewidth=1)
    ax_cost.set(xlabel="promised ε", ylabel="expected budget", title="GDPR budget (E=550 000, c=1); dotted: E_ε₀")
    ax_cost.legend(fontsize=8)
    row = numbers["rows"][0]
    ks = np.unique(np.geomspace(1, 1000, 25).astype(int))
    for method in ("basic", "advanced", "optimal", "pld", "privacy_at_risk"):
        ax_comp.plot(
            ks,
            [composition(int(k), row["optimal_epsilon"], row["epsilon0"], numbers["delta"], method) for k in ks],
            label=method,
        )
    ax_comp.set(
        xscale="log",
        yscale="log",
        xlabel="number of queries k",
        ylabel="ε' at δ=1e-5",
        title=f"composition, ε₀={row['epsilon0']}, ε*={row['optimal_epsilon']:.3f}",
    )
    ax_comp.legend(fontsize=8)
    figure.tight_layout()
    path = Path(f"{path_prefix}_cost.png")
    figure.savefig(path, dpi=110)
    plt.close(figure)
    numbers["plot"] = str(path)
    return numbers


def cli_main(argv: list[str] | None = None) -> int:
    """``dpkit risk``: print the GDPR illustration (``--json`` for scripts, ``--plot PREFIX`` for the PNG).

    >>> cli_main(["--json"]) == 0  # doctest: +ELLIPSIS
    {...}
    True
    """
    parser = argparse.ArgumentParser(prog="dpkit risk", description="privacy at risk and the GDPR cost model")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--plot", metavar="PREFIX", help="also write PREFIX_cost.png")
    args = parser.parse_args(argv)
    if args.plot is not None and not args.plot.strip():
        raise InvalidParameterError("--plot", args.plot, "must be a file prefix (an empty one wrote nothing)")
    numbers = report(args.plot) if args.plot else gdpr_example()
    if args.json:
        print(json.dumps(numbers, sort_keys=True))
        return 0
    print(f"GDPR illustration: E = {numbers['E']:.0f}, c = {numbers['c']}, E_min = {numbers['E_min']}")
    print(f"{'eps0':>5} {'eps*':>7} {'c1(eps*)':>8} {'budget w/o risk':>16} {'budget w/ risk':>15} {'saving':>10}")
    for row in numbers["rows"]:
        print(
            f"{row['epsilon0']:>5} {row['optimal_epsilon']:>7.4f} {row['confidence']:>8.3f} "
            f"{row['budget_without_risk']:>16.2f} {row['budget_with_risk']:>15.2f} {row['saving']:>10.2f}"
        )
    print(CONFIDENCE_MEANING)
    if args.plot:
        print(f"plot: {numbers['plot']}")
    return 0
