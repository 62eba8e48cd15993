"""Picking a frequency oracle, and the price of local DP against central DP.

Variances compared are those of one category's estimated count at true count 0, n q (1 - q)/(p - q)^2
(Wang, Blocki, Li & Jha 2017, "Locally differentially private protocols for frequency estimation",
Sec. 5: k-RR wins when k < 3 e^eps + 2, otherwise OUE and OLH, which tie at g = e^eps + 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_epsilon, check_integer
from dpkit.local._frequency import KRR, OLH, OUE, SUE, FrequencyOracle, HadamardResponse

__all__ = ["LDPvsCentral", "OracleChoice", "choose", "ldp_vs_central_error", "plot_ldp_vs_central"]

# OLH sends O(log k) bits, OUE k bits: within this factor of OUE's variance OLH is preferred.
_COMMUNICATION_SLACK = 1.05
# Frequency oracles estimate one count per category: beyond this the estimate cannot be held.
_MAX_CATEGORIES = 2**31
# Unary encodings send k bits per person: beyond 2**24 (2 MiB per message) they are not offered.
_MAX_UNARY_CATEGORIES = 2**24
# OLH's default g = round(e^eps) + 1 must be below 2**31 (see OLH).
_OLH_MAX_EPSILON = math.log(2.0**31 - 2)


@dataclass(frozen=True)
class OracleChoice:
    """The chosen oracle, the count variance of every candidate, and why."""

    oracle_name: str
    oracle: FrequencyOracle
    variances: dict[str, float]
    reason: str


def choose(k: int, epsilon: float, n: int) -> OracleChoice:
    """The frequency oracle with the lowest count variance for k categories, epsilon and n reports.

    Ties within 5% between OUE and OLH go to OLH (messages of O(log k) bits instead of k bits).

    >>> choice = choose(4, 1.0, 10_000)
    >>> choice.oracle_name
    'KRR'
    >>> choice.reason[:60]
    'KRR has the lowest count variance (1.598e+04; k-RR 1.598e+04'
    >>> choice.reason[-43:]
    'rule k < 3e^eps + 2 = 10.15 holds for k = 4'
    >>> choose(1024, 1.0, 10_000).oracle_name
    'OLH'
    """
    categories = check_integer("k", k, minimum=2)
    if categories > _MAX_CATEGORIES:
        raise InvalidParameterError(
            "k",
            k,
            f"must be at most 2**31 ({_MAX_CATEGORIES}): an estimate holds one count per category; "
            "for larger domains find the frequent items with dpkit.local.HeavyHitters",
        )
    eps = check_epsilon(epsilon)
    count = check_integer("n", n, minimum=1)
    candidates: dict[str, FrequencyOracle] = {
        "KRR": KRR(categories, eps),
        "HadamardResponse": HadamardResponse(categories, eps),
    }
    if categories <= _MAX_UNARY_CATEGORIES:  # unary encodings send k bits per person
        candidates["SUE"] = SUE(categories, eps)
        candidates["OUE"] = OUE(categories, eps)
    if eps <= _OLH_MAX_EPSILON and categories < 2**31:  # OLH's g = round(e^eps) + 1 buckets stay below 2**31
        candidates["OLH"] = OLH(categories, eps)
    variances = {name: float(oracle.variance(count)) for name, oracle in candidates.items()}
    best = min(variances, key=variances.__getitem__)
    threshold = 3 * math.exp(eps) + 2 if eps < 700 else math.inf  # e^eps overflows above ~709
    if best == "OUE" and variances.get("OLH", math.inf) <= _COMMUNICATION_SLACK * variances["OUE"]:
        best = "OLH"
    rule = "holds" if categories < threshold else "fails"
    olh = f"{variances['OLH']:.4g}" if "OLH" in variances else "n/a (its g or k would reach 2**31)"
    oue = f"{variances['OUE']:.4g}" if "OUE" in variances else "n/a (k-bit messages too long)"
    reason = (
        f"{best} has the lowest count variance ({variances[best]:.4g}; k-RR {variances['KRR']:.4g}, "
        f"OUE {oue}, OLH {olh}); Wang et al.'s rule "
        f"k < 3e^eps + 2 = {threshold:.2f} {rule} for k = {categories}"
    )
    if best == "OLH" and categories < threshold:
        reason += " (OLH's small hash prime makes collisions rarer than 1/g, which beats k-RR here)"
    elif best == "OLH":
        reason += " (OLH preferred to OUE: within 5% and O(log k)-bit messages)"
    return OracleChoice(best, candidates[best], variances, reason)


@dataclass(frozen=True)
class LDPvsCentral:
    """Mean squared error of one category's estimated frequency, local (k-RR) and central (Laplace)."""

    ldp_mse: float
    central_mse: float

    @property
    def ratio(self) -> float:
        return self.ldp_mse / self.central_mse


def ldp_vs_central_error(k: int, epsilon: float, n: int) -> LDPvsCentral:
    """Seed 000's comparison: k-RR's frequency MSE (k - 2 + e^eps)/(n (e^eps - 1)^2) against the central
    Laplace histogram's 2/(n^2 eps^2) (counts + Laplace(1/eps), add/remove neighbours, divided by n).

    The ratio grows like n: for small eps it is about n (k - 2 + e^eps) / 2.

    >>> result = ldp_vs_central_error(10, 1.0, 10_000)
    >>> f"{result.ldp_mse:.3g} {result.central_mse:.3g} {result.ratio:.0f}"
    '0.000363 2e-08 18151'
    """
    categories = check_integer("k", k, minimum=2)
    eps = check_epsilon(epsilon)
    count = check_integer("n", n, minimum=1)
    # (k - 2 + e^eps)/(e^eps - 1)^2 = e^-eps (1 + (k - 2) e^-eps)/(1 - e^-eps)^2: no overflow above eps ~ 355
    small = math.exp(-eps)
    ldp = small * (1.0 + (categories - 2) * small) / -math.expm1(-eps) / -math.expm1(-eps) / count
    central = 2.0 / (count * eps) / (count * eps)
    return LDPvsCentral(ldp, central)


def plot_ldp_vs_central(k: int, epsilon: float, ns: Sequence[int], ax: Any = None) -> Any:
    """Plot (log-log) both frequency MSEs of :func:`ldp_vs_central_error` against n; needs matplotlib.

    The local curve falls like 1/n, the central one like 1/n^2: the gap widens by a factor n.
    Returns the matplotlib axes.
    """
    import matplotlib.pyplot as plt  # optional dependency: imported only when plotting

    results = [ldp_vs_central_error(k, epsilon, n) for n in ns]
    if ax is None:
        _figure, ax = plt.subplots()
    ax.loglog(list(ns), [r.ldp_mse for r in results], marker="o", label="local (k-RR)")
    ax.loglog(list(ns), [r.central_mse for r in results], marker="s", label="central (Laplace histogram)")
    ax.set_xlabel("n (people)")
    ax.set_ylabel("MSE of one frequency")
    ax.set_title(f"k = {k}, epsilon = {epsilon}")
    ax.legend()
    return ax
