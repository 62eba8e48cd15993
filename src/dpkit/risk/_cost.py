"""The cost model: from a privacy level to a compensation budget (GDPR illustration).

Dandekar, Basu & Bressan, "Differential Privacy at Risk", PoPETs 2021(1), Sec. 5 (seed 001,
eq. (2)): a breach of data processed under ``epsilon``-DP costs each stakeholder

    E_epsilon = E_min + E e^{-c / epsilon},

increasing in ``epsilon`` (from ``E_min`` towards ``E_min + E``), convex for ``epsilon <= c / 2``.
Promising ``epsilon`` for the ``epsilon0``-calibrated Laplace mechanism holds with confidence
``c_1(epsilon)``; otherwise the fallback guarantee ``epsilon0`` applies, so the expected budget is

    B(epsilon) = c_1(epsilon) E_epsilon + (1 - c_1(epsilon)) E_{epsilon0}.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpkit._lazy import LazyModule
from dpkit._validation import check_epsilon, check_integer, check_positive
from dpkit.risk._laplace import laplace_confidence

optimize = LazyModule("scipy.optimize")

__all__ = ["CostModel"]


@dataclass(frozen=True)
class CostModel:
    """Compensation cost of a breach as a function of the privacy level (validated when built).

    ``E`` (> 0) is the compensation without any privacy guarantee, ``E_min`` (>= 0) the floor,
    ``c`` (> 0) the steepness.

    >>> model = CostModel(550_000.0)
    >>> round(model.cost(1.0), 2)     # 550000 / e
    202333.69
    >>> eps = model.optimal_epsilon(0.5)
    >>> 0 < eps < 0.5 and model.expected_budget(eps, 0.5) < model.cost(0.5)
    True
    """

    E: float
    E_min: float = 0.0
    c: float = 1.0

    def __post_init__(self) -> None:
        check_positive("E", self.E)
        check_positive("E_min", self.E_min, allow_zero=True)
        check_positive("c", self.c)

    def cost(self, epsilon: float) -> float:
        """Returns a **cost**: ``E_min + E e^{-c / epsilon}`` (``E_min`` at ``epsilon = 0``).

        >>> CostModel(100.0, E_min=5.0).cost(0.0)
        5.0
        """
        eps = check_positive("epsilon", epsilon, allow_zero=True, allow_inf=True)
        if eps == 0.0:
            return float(self.E_min)
        return float(self.E_min) + float(self.E) * math.exp(-float(self.c) / eps)

    def _derivative(self, epsilon: float) -> float:
        scaled = math.exp(-float(self.c) / epsilon)
        if scaled == 0.0:  # underflow: E' vanishes faster than any power of epsilon
            return 0.0
        return float(self.E) * scaled * float(self.c) / epsilon / epsilon

    def expected_budget(self, epsilon: float, epsilon0: float, dimension: int = 1) -> float:
        """Returns a **budget**: ``c_k(eps) E_eps + (1 - c_k(eps)) E_eps0`` (paper, Sec. 5).

        Uses the confidence of :func:`dpkit.risk.laplace_confidence` (``k = dimension``). An
        ``epsilon`` above ``epsilon0`` is read as ``epsilon0`` (the mechanism is ``epsilon0``-DP, so
        the budget is ``E_eps0``, not ``E_eps`` of the larger epsilon).

        >>> model = CostModel(550_000.0)
        >>> model.expected_budget(0.5, 0.5) == model.cost(0.5)
        True
        """
        eps0 = check_epsilon(epsilon0, "epsilon0")
        eps = check_positive("epsilon", epsilon, allow_zero=True, allow_inf=True)
        confidence = laplace_confidence(min(eps, eps0), eps0, dimension)
        return confidence * self.cost(min(eps, eps0)) + (1.0 - confidence) * self.cost(eps0)

    def optimal_epsilon(self, epsilon0: float, dimension: int = 1) -> float:
        """Returns an **epsilon**: the unique minimiser of :meth:`expected_budget` on ``(0, epsilon0]``.

        Proof of existence and uniqueness (``k = 1``). With ``c_1 = (1 - e^-eps)/(1 - e^-eps0)``,
        ``B'(eps) = c_1'(eps) h(eps)`` where ``c_1' > 0`` and

            h(eps) = (e^eps - 1) E'(eps) + E(eps) - E(eps0)      (as c_1 / c_1' = e^eps - 1).

        ``h(0+) = E_min - E(eps0) < 0`` and ``h(eps0) = (e^eps0 - 1) E'(eps0) > 0``; and
        ``h'(eps) = E'(eps) [e^eps + 1 + (e^eps - 1)(c - 2 eps) / eps^2]``, where
        ``E''/E' = (c - 2 eps) / eps^2 > -2 / eps``, so the bracket exceeds
        ``e^eps + 1 - 2 (e^eps - 1) / eps > 0`` (that is ``eps > 2 tanh(eps / 2)``). So ``h`` is
        strictly increasing, ``B`` decreases then increases, and the root of ``h`` found by
        bracketing (Brent) on ``(0, eps0)`` is the unique minimiser, for every ``E, E_min, c``.
        For ``k > 1`` (uniqueness not proved here) the least ``B`` on a grid of step 0.1 in ``log eps``,
        from ``e^-60 min(eps0, c)`` to ``eps0``, is refined by bounded minimisation between its neighbours.

        >>> round(CostModel(550_000.0).optimal_epsilon(0.5), 4)
        0.2741
        """
        eps0 = check_epsilon(epsilon0, "epsilon0")
        k = check_integer("dimension", dimension, minimum=1)
        if k == 1:
            c = float(self.c)

            # h has the sign of g = ln(1 + h / (E e^(-c/eps0))) = c/eps0 - c/eps + ln(1 + (e^eps - 1) c/eps^2),
            # which neither underflows (e^(-c/eps) for small eps or large c) nor overflows (e^eps).
            def g(eps: float) -> float:
                log_growth = eps + math.log(-math.expm1(-eps))  # ln(e^eps - 1)
                return c / eps0 - c / eps + float(np.logaddexp(0.0, log_growth + math.log(c) - 2 * math.log(eps)))

            low = eps0 / 2
            while g(low) >= 0:  # g -> -inf as eps -> 0: at most ~1100 halvings
                low /= 2
            return float(optimize.brentq(g, low, eps0, xtol=1e-300, rtol=1e-15, maxiter=500))
        # k > 1: the least budget on a grid of step 0.1 in log(eps), from e^-60 below both eps0 and the
        # steepness c (the cost's own scale) up to eps0, then bounded minimisation between the grid's
        # neighbours of that point (a linear search from eps0 * 1e-12 missed an optimum near 1.46
        # for eps0 = 1e13, far below its lower end).
        top = math.log(eps0)
        bottom = min(top, math.log(float(self.c))) - 60.0
        logs = np.linspace(bottom, top, int(math.ceil((top - bottom) / 0.1)) + 1)
        budgets = [self.expected_budget(math.exp(u), eps0, k) for u in logs]
        best = int(np.argmin(budgets))
        low, high = math.exp(logs[max(best - 1, 0)]), min(math.exp(logs[min(best + 1, len(logs) - 1)]), eps0)
        result = optimize.minimize_scalar(
            lambda e: self.expected_budget(e, eps0, k),
            bounds=(low, high),
            method="bounded",
            options={"xatol": low * 1e-10},
        )
        found = float(result.x)
        return found if self.expected_budget(found, eps0, k) <= budgets[best] else math.exp(logs[best])
