"""Composition under privacy at risk, compared with basic, advanced, optimal and PLD composition.

Dandekar, Basu & Bressan, "Differential Privacy at Risk", PoPETs 2021(1), Sec. 4.4 (seed 001).

**The bound (a guarantee).** ``k`` adaptive steps, each the ``epsilon0``-DP Laplace mechanism that
is ``epsilon``-DP with confidence ``c = c_k(epsilon; epsilon0)``, compose to ``(epsilon', delta)``-DP with

    epsilon' = sqrt(2 k ln(1/delta)) epsilon0 + k [c epsilon (e^epsilon - 1) + (1 - c) epsilon0 (e^epsilon0 - 1)].

Proof sketch (Dwork, Rothblum & Vadhan 2010; Dwork & Roth 2014, Thm. 3.20): the total privacy
loss is a sum of per-step losses ``L_i`` with ``|L_i| <= epsilon0`` (each step is ``epsilon0``-DP).
Under the privacy-at-risk model a step is ``epsilon``-DP with probability ``c`` and otherwise
``epsilon0``-DP, so the conditional expectation of ``L_i`` given the past (a KL divergence) is at
most ``c epsilon (e^epsilon - 1) + (1 - c) epsilon0 (e^epsilon0 - 1)`` (the DRV bound
``KL <= eta (e^eta - 1)`` of an ``eta``-DP step, averaged). The centred losses form a
martingale with increments bounded by ``epsilon0``, so Azuma-Hoeffding gives
``P[sum L_i > k drift + sqrt(2 k ln(1/delta)) epsilon0] <= delta``. The bound is
``advanced`` at ``c = 0`` and never larger.

**Sound whatever ``c`` means.** ``c`` is the paper's noise-statistic confidence (see
:mod:`dpkit.risk._laplace`), not a probability of the realised loss; the bound is a guarantee
for another reason. Each step's realised loss lies in ``[-epsilon0, epsilon0]`` and its
conditional mean is the KL divergence of the step's pair, at most ``phi(epsilon0) = epsilon0 +
e^-epsilon0 - 1`` for an ``epsilon0``-Laplace step in any dimension (``phi`` is convex with
``phi(0) = 0``, so ``sum_i phi(a_i) <= phi(sum_i a_i)``). The drift is at least ``phi(epsilon0)``:
it decreases in ``c`` and ``c_k <= c_1``, so ``k = 1`` is the worst case, and there the ratio
drift / ``phi(epsilon0)`` is at least 1.23 on a grid of ``epsilon0`` in ``[1e-3, 20]`` and
``epsilon`` in ``[0, epsilon0]`` (its small-``epsilon0`` limit is ``2 (1 - 2 / (3 sqrt 3)) ~ 1.230``;
checked in ``tests/risk/test_risk_composition.py``). Azuma with the true drift then applies.

A form in the paper whose deviation term uses ``epsilon`` in place of ``epsilon0`` only matches
one of its figures; it is **not** implemented here, because the increments of the martingale are
bounded by ``epsilon0``, not ``epsilon``, and the tests show such a form falls below the exact PLD
epsilon of the same mechanisms.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_delta, check_epsilon, check_integer, check_positive
from dpkit.accounting import OptimalAccountant, PLDAccountant
from dpkit.events import LaplaceEvent, PureDPEvent
from dpkit.risk._laplace import check_dimension, confidence_unchecked, risk_unchecked
from dpkit.risk._numeric import rational_to_float, scaled_product, sqrt_count

__all__ = ["COMPOSITION_METHODS", "composition"]

#: The methods :func:`composition` knows.
COMPOSITION_METHODS = ("privacy_at_risk", "basic", "advanced", "optimal", "pld")


def composition(
    k: int,
    epsilon: float,
    epsilon0: float,
    delta: float,
    method: str = "privacy_at_risk",
    dimension: int = 1,
) -> float:
    """Returns an **epsilon**: the ``epsilon'`` of ``k`` ``epsilon0``-Laplace steps at ``delta``.

    ``method``: ``"privacy_at_risk"`` (the bound of the module docstring, with
    ``c = laplace_confidence(epsilon, epsilon0, dimension)``), ``"basic"`` (``k epsilon0``),
    ``"advanced"`` (DRV, ``sqrt(2 k ln(1/delta)) epsilon0 + k epsilon0 (e^epsilon0 - 1)``),
    ``"optimal"`` (Kairouz, Oh & Viswanath 2015, :class:`dpkit.accounting.OptimalAccountant`) or
    ``"pld"`` (the tight value of the Laplace mechanism, :class:`dpkit.accounting.PLDAccountant`).
    ``epsilon`` only matters for ``"privacy_at_risk"``.

    >>> round(composition(10, 0.3, 0.5, 1e-5), 3)
    9.386
    >>> composition(10, 0.3, 0.5, 1e-5, method="basic")
    5.0
    """
    steps = check_integer("k", k, minimum=1)
    eps = check_positive("epsilon", epsilon, allow_zero=True)
    eps0 = check_epsilon(epsilon0, "epsilon0")
    dlt = check_delta(delta, allow_zero=False)
    k_noise = check_dimension(dimension)  # used by privacy_at_risk only, checked for every method
    if method not in COMPOSITION_METHODS:
        raise InvalidParameterError("method", method, f"must be one of {COMPOSITION_METHODS}")
    if method in ("advanced", "privacy_at_risk", "pld") and eps0 > 700:
        # e^epsilon0 overflows above ~709.78; PLDAccountant takes Laplace scales from 1/700 up
        raise InvalidParameterError(
            "epsilon0",
            epsilon0,
            f"must be at most 700 for method={method!r} "
            + ("(the PLD accountant's Laplace range)" if method == "pld" else "(e^epsilon0 overflows)"),
        )
    if method == "optimal" and steps > OptimalAccountant.max_count:
        raise InvalidParameterError(
            "k", k, f"must be at most {OptimalAccountant.max_count} for method='optimal' (its cost grows with k)"
        )
    # k is any Python int (10**400 included): products with k are exact rationals rounded once, to
    # inf beyond the float range (an epsilon rounded up), never float(k) (OverflowError) or inf * 0
    if method == "basic":
        return rational_to_float(steps * Fraction(eps0))
    root, shift = sqrt_count(steps)
    # sqrt(2 k ln(1/delta)) epsilon0, with sqrt(k) = root 2^shift for any int k
    spread = scaled_product((math.sqrt(2.0 * math.log(1.0 / dlt)), root, eps0), exponent=shift)
    if method == "advanced":
        return spread + rational_to_float(steps * Fraction(eps0) * Fraction(math.expm1(eps0)))
    if method == "privacy_at_risk":
        eps = min(eps, eps0)
        # c and 1 - c each to full relative precision (1.0 - c lost the digits of a small risk)
        c, risk = confidence_unchecked(eps, eps0, k_noise), risk_unchecked(eps, eps0, k_noise)
        promised = Fraction(c) * Fraction(eps) * Fraction(math.expm1(eps))
        fallback = Fraction(risk) * Fraction(eps0) * Fraction(math.expm1(eps0))
        return spread + rational_to_float(steps * (promised + fallback))
    if method == "optimal":
        return float(OptimalAccountant().compose(PureDPEvent(eps0), steps).epsilon(dlt))
    # the Laplace scale 1/epsilon0; the largest float where 1/epsilon0 overflows (epsilon0 below 5.6e-309):
    # less noise, the mechanism of a larger epsilon0, so a larger epsilon' (LaplaceEvent refused inf)
    scale = min(1.0 / eps0, sys.float_info.max)
    try:
        return float(PLDAccountant(discretization=1e-3).compose(LaplaceEvent(scale), steps).epsilon(dlt))
    except (InvalidParameterError, OverflowError) as error:
        # the accountant names its own parameters (discretization, count) or overflows on a huge count
        detail = error.allowed if isinstance(error, InvalidParameterError) else "the count overflows a float"
        raise InvalidParameterError(
            "k", k, f"is too large for method='pld' at epsilon0={eps0!r} ({detail}); use another method"
        ) from error
