"""Privacy guarantees as frozen, validated values with exact (or safety-rounded) arithmetic.

Exactness: every parameter is kept as a :class:`fractions.Fraction` taken from the decimal the
user typed (``0.1`` is exactly 1/10), so budgets add up exactly: ``10 * PureDP(0.1) == PureDP(1)``.
Where a conversion is irrational (zCDP -> approximate DP) the result is rounded *up*, toward
a weaker, still-true claim.
"""

from __future__ import annotations

import enum
import functools
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dpkit._errors import InvalidParameterError
from dpkit._lazy import LazyModule
from dpkit._validation import as_fraction, check_delta, check_epsilon, check_integer, check_positive

optimize = LazyModule("scipy.optimize")
_mpmath = LazyModule("mpmath")

__all__ = ["ApproxDP", "ApproxZCDP", "Guarantee", "NeighbourRelation", "PureDP", "ZCDP", "round_up"]


class NeighbourRelation(enum.Enum):
    """Which datasets count as neighbours.

    ``ADD_REMOVE``: one differs from the other by adding or removing one person (unbounded DP).
    ``REPLACE_ONE``: same size, one person's record replaced (bounded DP). A replacement is an
    add followed by a remove, so an add/remove guarantee implies the replace-one guarantee of a
    group of 2.
    """

    ADD_REMOVE = "add_remove"
    REPLACE_ONE = "replace_one"


def round_up(value: float, ulps: int = 4) -> float:
    """Move a float computed with rounding error a few ulps toward +inf (safety rounding)."""
    for _ in range(ulps):
        value = math.nextafter(value, math.inf)
    return value


def float_at_most(value: Fraction) -> float:
    """The largest float whose decimal reading (how guarantees read floats) is <= ``value``."""
    try:
        result = float(value)
    except OverflowError:  # beyond the float range: the largest float is below it
        return sys.float_info.max
    while as_fraction(result) > value:
        result = math.nextafter(result, 0.0)
    return result


def _display_float(exact: Fraction, name: str, value: object) -> float:
    """``float(exact)`` for a display field; a value beyond the float range is refused by name."""
    try:
        return float(exact)
    except OverflowError:
        raise InvalidParameterError(name, value, "must be below the largest float (about 1.8e308)") from None


@functools.cache
def _context() -> Any:
    """A private mpmath context at 50 digits, for certified evaluations of irrational bounds.

    Double precision is not enough there: the terms of the CKS bound cancel (terms ~0.1 summing
    to ~1e-14), and e^(k epsilon) amplifies the rounding of k epsilon by k epsilon (~700).
    """
    context = _mpmath.ctx_mp.MPContext()
    context.dps = 50
    return context


def _mp(context: Any, value: Fraction) -> Any:
    return context.mpf(value.numerator) / value.denominator


def _check_relation(value: object) -> NeighbourRelation:
    if not isinstance(value, NeighbourRelation):
        raise InvalidParameterError("neighbours", value, "must be a dpkit.guarantees.NeighbourRelation")
    return value


def _same_relation(a: Guarantee, b: Guarantee) -> NeighbourRelation:
    if a.neighbours is not b.neighbours:
        raise InvalidParameterError(
            "neighbours", (a.neighbours, b.neighbours), "guarantees composed together must share a relation"
        )
    return a.neighbours


def _is_zero_start(value: object) -> bool:
    """Whether ``value`` is the integer 0 that ``sum()`` starts from (not a bool, a float or another number)."""
    return type(value) is int and value == 0


@dataclass(frozen=True, eq=False)
class PureDP:
    """epsilon-differential privacy: P[A(D) in S] <= e^epsilon P[A(D') in S] for neighbours D, D'.

    >>> PureDP(0.1) * 10 == PureDP(1.0) == sum([PureDP(0.1)] * 10)
    True
    >>> PureDP(0.5).group(3).epsilon
    1.5
    """

    epsilon: float
    neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE
    epsilon_exact: Fraction = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.epsilon, Fraction):
            check_epsilon(self.epsilon)
        exact = as_fraction(self.epsilon)
        if exact <= 0:
            raise InvalidParameterError("epsilon", self.epsilon, "must be a real number > 0 and finite")
        object.__setattr__(self, "epsilon_exact", exact)
        object.__setattr__(self, "epsilon", _display_float(exact, "epsilon", self.epsilon))
        _check_relation(self.neighbours)

    delta = 0.0
    delta_exact = Fraction(0)

    def __add__(self, other: Guarantee) -> Guarantee:
        """Basic sequential composition (seed 000): epsilons add, deltas add."""
        if not isinstance(other, PureDP | ApproxDP | ZCDP | ApproxZCDP):
            return NotImplemented  # Python then raises TypeError naming both operand types
        return compose(self, other)

    def __radd__(self, other: object) -> Guarantee:
        """``0 + guarantee`` is the guarantee itself, so ``sum(guarantees)`` composes them exactly as
        repeated ``+`` does; any other left operand (another number, a bool) raises TypeError."""
        if not _is_zero_start(other):
            return NotImplemented
        return self

    def __mul__(self, count: int) -> PureDP:
        """k-fold basic composition: k * epsilon."""
        k = check_integer("count", count, minimum=1)
        return PureDP(self.epsilon_exact * k, self.neighbours)  # type: ignore[arg-type]

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PureDP)
            and self.epsilon_exact == other.epsilon_exact
            and self.neighbours is other.neighbours
        )

    def __hash__(self) -> int:
        return hash(("PureDP", self.epsilon_exact, self.neighbours))

    def __repr__(self) -> str:
        relation = "" if self.neighbours is NeighbourRelation.ADD_REMOVE else f", neighbours={self.neighbours}"
        return f"PureDP(epsilon={self.epsilon!r}{relation})"

    def within(self, budget: Guarantee) -> bool:
        """True when this guarantee is at least as strong as ``budget`` (exact comparison)."""
        return _within(self, budget)

    def group(self, size: int) -> PureDP:
        """Group privacy (seed 000): an epsilon-DP algorithm is (K epsilon)-DP for groups of K."""
        k = check_integer("size", size, minimum=1)
        return PureDP(self.epsilon_exact * k, self.neighbours)  # type: ignore[arg-type]

    def to_zcdp(self) -> ZCDP:
        """epsilon-DP implies (epsilon^2 / 2)-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
        return ZCDP(self.epsilon_exact**2 / 2, self.neighbours)  # type: ignore[arg-type]

    def to_approx(self) -> ApproxDP:
        """epsilon-DP is (epsilon, 0)-DP."""
        return ApproxDP(self.epsilon_exact, Fraction(0), self.neighbours)  # type: ignore[arg-type]

    def under(self, neighbours: NeighbourRelation) -> PureDP:
        """The same mechanism's guarantee under another neighbour relation (add/remove -> replace: group of 2)."""
        return _under(self, neighbours)  # type: ignore[return-value]


@dataclass(frozen=True, eq=False)
class ApproxDP:
    """(epsilon, delta)-differential privacy: P[A(D) in S] <= e^epsilon P[A(D') in S] + delta.

    >>> grouped = ApproxDP(1.0, 1e-6).group(2)   # (2 eps, (1 + e) delta)
    >>> grouped.epsilon, round(grouped.delta * 1e6, 6)
    (2.0, 3.718282)
    """

    epsilon: float
    delta: float
    neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE
    epsilon_exact: Fraction = field(init=False, repr=False)
    delta_exact: Fraction = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.epsilon, Fraction):
            check_positive("epsilon", self.epsilon, allow_zero=True)
        if not isinstance(self.delta, Fraction):
            check_delta(self.delta)
        eps, dlt = as_fraction(self.epsilon), as_fraction(self.delta)
        if eps < 0:
            raise InvalidParameterError("epsilon", self.epsilon, "must be a real number >= 0 and finite")
        if not 0 <= dlt < 1:
            raise InvalidParameterError("delta", self.delta, "must be a real number with 0 <= delta < 1")
        object.__setattr__(self, "epsilon_exact", eps)
        object.__setattr__(self, "delta_exact", dlt)
        object.__setattr__(self, "epsilon", _display_float(eps, "epsilon", self.epsilon))
        # The float fields are for display; every safety decision uses the *_exact fractions.
        object.__setattr__(self, "delta", float(dlt))
        _check_relation(self.neighbours)

    def __add__(self, other: Guarantee) -> Guarantee:
        """Basic sequential composition (seed 000): epsilons add, deltas add."""
        if not isinstance(other, PureDP | ApproxDP | ZCDP | ApproxZCDP):
            return NotImplemented  # Python then raises TypeError naming both operand types
        return compose(self, other)

    def __radd__(self, other: object) -> Guarantee:
        """``0 + guarantee`` is the guarantee itself, so ``sum(guarantees)`` composes them exactly as
        repeated ``+`` does; any other left operand (another number, a bool) raises TypeError."""
        if not _is_zero_start(other):
            return NotImplemented
        return self

    def __mul__(self, count: int) -> ApproxDP:
        k = _composable_count(count, self.delta_exact)
        return ApproxDP(self.epsilon_exact * k, self.delta_exact * k, self.neighbours)  # type: ignore[arg-type]

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ApproxDP)
            and self.epsilon_exact == other.epsilon_exact
            and self.delta_exact == other.delta_exact
            and self.neighbours is other.neighbours
        )

    def __hash__(self) -> int:
        return hash(("ApproxDP", self.epsilon_exact, self.delta_exact, self.neighbours))

    def __repr__(self) -> str:
        relation = "" if self.neighbours is NeighbourRelation.ADD_REMOVE else f", neighbours={self.neighbours}"
        return f"ApproxDP(epsilon={self.epsilon!r}, delta={self.delta!r}{relation})"

    def within(self, budget: Guarantee) -> bool:
        """True when this guarantee is at least as strong as ``budget`` (exact comparison)."""
        return _within(self, budget)

    def group(self, size: int) -> ApproxDP:
        """Group privacy: (epsilon, delta)-DP gives (K eps, delta (1 + e^eps + ... + e^{(K-1) eps})) for
        groups of K (chaining the definition along K neighbours; Vadhan 2017, Lemma 2.2), rounded up.

        The factor is (e^{K eps} - 1) / (e^eps - 1) <= K e^{(K-1) eps}, below seed 000's K e^{K eps}
        (so the seed's statement follows from it); a group of one is the guarantee itself.
        """
        k = check_integer("size", size, minimum=1)
        if self.delta_exact == 0 or k == 1:
            return ApproxDP(self.epsilon_exact * k, self.delta_exact, self.neighbours)  # type: ignore[arg-type]
        # The factor at 50 digits from the exact epsilon: exp in doubles of the rounded k * epsilon
        # came out up to ~1e-13 relative low (its input error times k epsilon ~700).
        context = _context()
        eps = _mp(context, self.epsilon_exact)
        factor_mp = context.expm1(eps * k) / context.expm1(eps) if eps > 0 else context.mpf(k)
        if _mp(context, self.delta_exact) * factor_mp >= 1 - context.mpf(10) ** -40:
            raise InvalidParameterError("size", size, f"group privacy for {k} people leaves delta >= 1")
        if factor_mp < sys.float_info.max / 2:
            factor = Fraction(round_up(float(factor_mp)))
        else:  # only a delta far below the smallest float gets here: an exact, rounded-up ratio
            factor = Fraction(int(context.ceil(factor_mp * (1 + context.mpf(10) ** -40))))
        new_delta = self.delta_exact * factor
        if new_delta >= 1:
            raise InvalidParameterError("size", size, f"group privacy for {k} people leaves delta >= 1")
        return ApproxDP(self.epsilon_exact * k, new_delta, self.neighbours)  # type: ignore[arg-type]

    def under(self, neighbours: NeighbourRelation) -> ApproxDP:
        return _under(self, neighbours)  # type: ignore[return-value]


@dataclass(frozen=True, eq=False)
class ZCDP:
    """rho-zero-concentrated DP (Bun & Steinke 2016): D_alpha(A(D) || A(D')) <= rho * alpha for all alpha > 1.

    >>> ZCDP(0.5).to_approx(1e-6).epsilon < 0.5 + 2 * (0.5 * 13.9) ** 0.5
    True
    """

    rho: float
    neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE
    rho_exact: Fraction = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.rho, Fraction):
            check_positive("rho", self.rho)
        exact = as_fraction(self.rho)
        if exact <= 0:
            raise InvalidParameterError("rho", self.rho, "must be a real number > 0 and finite")
        object.__setattr__(self, "rho_exact", exact)
        object.__setattr__(self, "rho", _display_float(exact, "rho", self.rho))
        _check_relation(self.neighbours)

    def __add__(self, other: Guarantee) -> Guarantee:
        """zCDP composes additively in rho (Bun & Steinke 2016, Lemma 2.3)."""
        if not isinstance(other, PureDP | ApproxDP | ZCDP | ApproxZCDP):
            return NotImplemented  # Python then raises TypeError naming both operand types
        return compose(self, other)

    def __radd__(self, other: object) -> Guarantee:
        """``0 + guarantee`` is the guarantee itself, so ``sum(guarantees)`` composes them exactly as
        repeated ``+`` does; any other left operand (another number, a bool) raises TypeError."""
        if not _is_zero_start(other):
            return NotImplemented
        return self

    def __mul__(self, count: int) -> ZCDP:
        k = check_integer("count", count, minimum=1)
        return ZCDP(self.rho_exact * k, self.neighbours)  # type: ignore[arg-type]

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ZCDP) and self.rho_exact == other.rho_exact and self.neighbours is other.neighbours

    def __hash__(self) -> int:
        return hash(("ZCDP", self.rho_exact, self.neighbours))

    def __repr__(self) -> str:
        relation = "" if self.neighbours is NeighbourRelation.ADD_REMOVE else f", neighbours={self.neighbours}"
        return f"ZCDP(rho={self.rho!r}{relation})"

    def within(self, budget: Guarantee) -> bool:
        return _within(self, budget)

    def group(self, size: int) -> ZCDP:
        """rho-zCDP gives (K^2 rho)-zCDP for groups of K (Bun & Steinke 2016, Prop. 1.9)."""
        k = check_integer("size", size, minimum=1)
        return ZCDP(self.rho_exact * k * k, self.neighbours)  # type: ignore[arg-type]

    def to_approx(self, delta: float) -> ApproxDP:
        """The (epsilon, delta)-DP that rho-zCDP implies, by the tight conversion.

        Uses Canonne, Kamath & Steinke 2020, Cor. 13:
        epsilon = inf_{alpha > 1} alpha*rho + (log(1/delta) + (alpha-1) log(1 - 1/alpha) - log(alpha)) / (alpha - 1),
        never worse than Bun & Steinke's rho + 2 sqrt(rho log(1/delta)). Rounded up.
        """
        d = check_delta(delta, allow_zero=False)
        rho = max(self.rho, 5e-324)  # only to locate the optimum: the bound itself is certified below
        log_inv_delta = -math.log(d)  # finite also for a subnormal delta (1 / d overflows)

        def eps_of(alpha: float) -> float:
            return alpha * rho + (log_inv_delta + (alpha - 1) * math.log1p(-1 / alpha) - math.log(alpha)) / (alpha - 1)

        # The objective is convex in alpha; the optimum lies near 1 + sqrt(log(1/delta)/rho).
        guess = 1 + math.sqrt(min(log_inv_delta / rho, 1e300))
        result = optimize.minimize_scalar(eps_of, bounds=(1 + 1e-9, min(max(4 * guess, 2.0), 1e150)), method="bounded")
        # Any alpha gives a valid bound, so a sub-optimal search is still safe; the bound at the
        # chosen alpha is then evaluated at 50 digits from the exact rho and the claimed delta (in
        # doubles its terms cancel: epsilon came out up to 7e-5 relative low near epsilon 0). For
        # a tiny rho the bound can dip below 0: the guarantee then already holds at epsilon 0.
        context = _context()
        r, big_l = _mp(context, self.rho_exact), -context.log(_mp(context, as_fraction(d)))
        best = r + 2 * context.sqrt(r * big_l)  # Bun & Steinke's bound (CKS's is never worse)
        alpha = float(result.x) if result.success else math.nan
        if math.isfinite(alpha) and alpha > 1:
            a = context.mpf(alpha)
            best = min(best, a * r + (big_l + (a - 1) * context.log1p(-1 / a) - context.log(a)) / (a - 1))
        return ApproxDP(round_up(float(best), 8) if best > 0 else 0.0, d, self.neighbours)

    def under(self, neighbours: NeighbourRelation) -> ZCDP:
        return _under(self, neighbours)  # type: ignore[return-value]


@dataclass(frozen=True, eq=False)
class ApproxZCDP:
    """delta-approximate rho-zCDP (Bun & Steinke 2016, Def. 8.1): rho-zCDP outside events of probability <= delta.

    For neighbours D, D' there are events E, E' with P[A(D) in E], P[A(D') in E'] >= 1 - delta
    such that A(D) conditioned on E and A(D') conditioned on E' satisfy rho-zCDP against each
    other. Gaussian releases over privately selected group keys are of this kind: delta bounds the
    chance that a key present only in D' is released. It composes additively in rho and in delta,
    also when each release and its parameters are chosen after seeing earlier answers (Bun &
    Steinke 2016, Lemma 8.2; a privacy filter: Whitehouse, Ramdas, Rogers & Wu 2023, Thm. 1).
    ``ZCDP(rho)`` is ``ApproxZCDP(rho, 0)``.

    >>> spent = ApproxZCDP(0.01, 1e-7) * 3
    >>> spent.rho, spent.delta
    (0.03, 3e-07)
    >>> approx = spent.to_approx(1e-6)      # (eps, 3e-7 + 1e-6)-DP
    >>> round(approx.epsilon, 3), approx.delta
    (1.118, 1.3e-06)
    """

    rho: float
    delta: float
    neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE
    rho_exact: Fraction = field(init=False, repr=False)
    delta_exact: Fraction = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.rho, Fraction):
            check_positive("rho", self.rho, allow_zero=True)
        if not isinstance(self.delta, Fraction):
            check_delta(self.delta)
        rho, dlt = as_fraction(self.rho), as_fraction(self.delta)
        if rho < 0:
            raise InvalidParameterError("rho", self.rho, "must be a real number >= 0 and finite")
        if not 0 <= dlt < 1:
            raise InvalidParameterError("delta", self.delta, "must be a real number with 0 <= delta < 1")
        object.__setattr__(self, "rho_exact", rho)
        object.__setattr__(self, "delta_exact", dlt)
        object.__setattr__(self, "rho", _display_float(rho, "rho", self.rho))
        object.__setattr__(self, "delta", float(dlt))
        _check_relation(self.neighbours)

    def __add__(self, other: Guarantee) -> Guarantee:
        """Rho adds and delta adds (Bun & Steinke 2016, Lemma 8.2); zCDP counts as delta = 0."""
        if not isinstance(other, PureDP | ApproxDP | ZCDP | ApproxZCDP):
            return NotImplemented  # Python then raises TypeError naming both operand types
        return compose(self, other)

    def __radd__(self, other: object) -> Guarantee:
        """``0 + guarantee`` is the guarantee itself, so ``sum(guarantees)`` composes them exactly as
        repeated ``+`` does; any other left operand (another number, a bool) raises TypeError."""
        if not _is_zero_start(other):
            return NotImplemented
        return self

    def __mul__(self, count: int) -> ApproxZCDP:
        k = _composable_count(count, self.delta_exact)
        return ApproxZCDP(self.rho_exact * k, self.delta_exact * k, self.neighbours)  # type: ignore[arg-type]

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ApproxZCDP)
            and self.rho_exact == other.rho_exact
            and self.delta_exact == other.delta_exact
            and self.neighbours is other.neighbours
        )

    def __hash__(self) -> int:
        return hash(("ApproxZCDP", self.rho_exact, self.delta_exact, self.neighbours))

    def __repr__(self) -> str:
        relation = "" if self.neighbours is NeighbourRelation.ADD_REMOVE else f", neighbours={self.neighbours}"
        return f"ApproxZCDP(rho={self.rho!r}, delta={self.delta!r}{relation})"

    def within(self, budget: Guarantee) -> bool:
        """True when this guarantee is at least as strong as ``budget`` (exact comparison)."""
        return _within(self, budget)

    def group(self, size: int) -> ApproxZCDP:
        """Only the trivial group of 1: group privacy for approximate zCDP is not provided."""
        k = check_integer("size", size, minimum=1)
        if k != 1:
            raise InvalidParameterError(
                "size", size, "group privacy is not provided for approximate zCDP; convert with .to_approx(delta) first"
            )
        return self

    def to_approx(self, delta: float) -> ApproxDP:
        """(epsilon, self.delta + delta)-DP, epsilon from ``ZCDP(rho).to_approx(delta)`` plus log(1/(1 - self.delta)).

        Outside the events, the conditioned outputs are (eps0, delta)-indistinguishable; for any S,
        P[A(D) in S] <= P[S | E] + self.delta <= e^eps0 P[A(D') in S] / (1 - self.delta) + delta
        + self.delta, since conditioning on E' multiplies a probability by at most 1 / (1 - self.delta).
        Rounded up.
        """
        d = check_delta(delta, allow_zero=False)
        total = self.delta_exact + as_fraction(d)
        if total >= 1:
            raise InvalidParameterError("delta", delta, f"plus this guarantee's delta {self.delta} must stay < 1")
        base = ZCDP(self.rho_exact, self.neighbours).to_approx(d).epsilon if self.rho_exact > 0 else 0.0  # type: ignore[arg-type]
        if self.delta_exact == 0:
            return ApproxDP(base, total, self.neighbours)  # type: ignore[arg-type]
        # log(1 / (1 - delta)) from the exact 1 - delta: float(delta) near 1 loses 1 - delta (at
        # delta = 1 - 1e-16 the double 1 - 2^-53 made the penalty 0.105 too small).
        context = _context()
        penalty = -context.log(_mp(context, 1 - self.delta_exact))
        return ApproxDP(round_up(float(base + penalty), 8), total, self.neighbours)  # type: ignore[arg-type]

    def under(self, neighbours: NeighbourRelation) -> ApproxZCDP:
        """This guarantee under ``neighbours``: only its own relation (no group privacy to convert with)."""
        if _check_relation(neighbours) is not self.neighbours:
            raise InvalidParameterError(
                "neighbours", neighbours, "approximate zCDP is not converted between neighbour relations"
            )
        return self

    @classmethod
    def from_approx(
        cls,
        epsilon: float,
        delta: float,
        *,
        selection_share: float = 0.5,
        neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE,
    ) -> ApproxZCDP:
        """The largest budget ``ApproxZCDP(rho, selection_share * delta)`` whose :meth:`to_approx`
        at the rest of ``delta`` is within ``(epsilon, delta)``: a target stated in (epsilon, delta),
        spent in rho, with ``selection_share`` of delta left for private key selection.

        >>> budget = ApproxZCDP.from_approx(1.0, 1e-6)
        >>> budget.delta, budget.to_approx(5e-7).within(ApproxDP(1.0, 1e-6))
        (5e-07, True)
        """
        eps = as_fraction(check_epsilon(epsilon))
        total = as_fraction(check_delta(delta, allow_zero=False))
        share = check_positive("selection_share", selection_share, allow_zero=True)
        if share >= 1:
            raise InvalidParameterError("selection_share", selection_share, "must be in [0, 1): the rest converts rho")
        selection = total * as_fraction(share)
        conversion = float_at_most(total - selection)  # selection + conversion stays <= delta exactly
        if conversion <= 0:
            raise InvalidParameterError(
                "delta",
                delta,
                "is too small to share: the part left to convert rho underflows to 0 (give selection_share=0)",
            )
        target = ApproxDP(eps, total, neighbours)  # type: ignore[arg-type]

        def fits(rho: float) -> bool:
            return cls(rho, selection, neighbours).to_approx(conversion).within(target)  # type: ignore[arg-type]

        rho = largest_rho(fits, float(eps))
        if rho is None:
            raise InvalidParameterError("epsilon", epsilon, "is too small for zCDP at this delta")
        return cls(rho, selection, neighbours)  # type: ignore[arg-type]


def largest_rho(fits: Callable[[float], bool], start: float) -> Fraction | None:
    """The largest rho with ``fits(rho)`` (bisection, 60 halvings, rounded down), or None when none > 0 fits.

    ``fits`` must be monotone: true up to some rho, false beyond.
    """
    low, high = 0.0, start
    while fits(high):
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return as_fraction(low) if low > 0 else None


Guarantee = PureDP | ApproxDP | ZCDP | ApproxZCDP


def compose(first: Guarantee, second: Guarantee) -> Guarantee:
    """Basic composition of two guarantees of the same kind (seed 000; zCDP adds in rho).

    Mixing pure and approximate DP gives approximate DP; zCDP composes only with zCDP
    (convert explicitly, since the conversion needs a delta).
    """
    relation = _same_relation(first, second)
    if isinstance(first, ApproxZCDP) or isinstance(second, ApproxZCDP):
        if not isinstance(first, ZCDP | ApproxZCDP) or not isinstance(second, ZCDP | ApproxZCDP):
            raise InvalidParameterError(
                "other", second, "approximate zCDP composes only with zCDP; convert pure DP with .to_zcdp() first"
            )
        left, right = zcdp_parts(first), zcdp_parts(second)
        delta = left[1] + right[1]
        if delta >= 1:
            raise InvalidParameterError("delta", float(delta), "composed delta must stay < 1")
        return ApproxZCDP(left[0] + right[0], delta, relation)  # type: ignore[arg-type]
    if isinstance(first, ZCDP) and isinstance(second, ZCDP):
        return ZCDP(first.rho_exact + second.rho_exact, relation)  # type: ignore[arg-type]
    if isinstance(first, ZCDP) or isinstance(second, ZCDP):
        raise InvalidParameterError(
            "other", second, "zCDP composes only with zCDP; convert with .to_zcdp() or .to_approx(delta) first"
        )
    if isinstance(first, PureDP) and isinstance(second, PureDP):
        return PureDP(first.epsilon_exact + second.epsilon_exact, relation)  # type: ignore[arg-type]
    delta = first.delta_exact + second.delta_exact
    if delta >= 1:
        raise InvalidParameterError("delta", float(delta), "composed delta must stay < 1")
    return ApproxDP(first.epsilon_exact + second.epsilon_exact, delta, relation)  # type: ignore[arg-type]


def zcdp_parts(guarantee: object, name: str = "guarantee") -> tuple[Fraction, Fraction]:
    """(rho, delta) of a guarantee read as approximate zCDP; pure DP reads as (eps^2 / 2, 0)
    (Bun & Steinke 2016, Prop. 1.4). (epsilon, delta)-DP raises InvalidParameterError naming ``name``."""
    if isinstance(guarantee, ApproxZCDP):
        return guarantee.rho_exact, guarantee.delta_exact
    if isinstance(guarantee, ZCDP):
        return guarantee.rho_exact, Fraction(0)
    if isinstance(guarantee, PureDP):
        return guarantee.to_zcdp().rho_exact, Fraction(0)
    raise InvalidParameterError(
        name, guarantee, "approximate zCDP accepts ApproxZCDP, ZCDP and PureDP; (epsilon, delta)-DP is not zCDP"
    )


def _composable_count(count: int, delta: Fraction) -> int:
    """``count`` as an integer >= 1 whose count-fold basic composition keeps delta < 1 (refused by name)."""
    k = check_integer("count", count, minimum=1)
    if delta * k >= 1:
        raise InvalidParameterError("count", count, f"composes delta to {k} x {float(delta):g} >= 1; it must stay < 1")
    return k


def _within(spent: Guarantee, budget: Guarantee) -> bool:
    if not isinstance(budget, PureDP | ApproxDP | ZCDP | ApproxZCDP):
        raise InvalidParameterError(
            "budget", budget, "must be a dpkit guarantee (PureDP, ApproxDP, ZCDP or ApproxZCDP)"
        )
    _same_relation(spent, budget)
    if isinstance(budget, ApproxZCDP):
        if isinstance(spent, ApproxDP):
            raise InvalidParameterError(
                "budget",
                budget,
                "an approximate zCDP budget holds zCDP and pure DP only; (epsilon, delta)-DP is not zCDP",
            )
        rho, delta = zcdp_parts(spent)
        return rho <= budget.rho_exact and delta <= budget.delta_exact
    if isinstance(spent, ApproxZCDP):
        if isinstance(budget, ZCDP):
            return spent.delta_exact == 0 and spent.rho_exact <= budget.rho_exact
        raise InvalidParameterError(
            "budget", budget, "compare approximate zCDP with a zCDP or approximate zCDP budget, or convert it"
        )
    if isinstance(spent, ZCDP) or isinstance(budget, ZCDP):
        if isinstance(spent, ZCDP) and isinstance(budget, ZCDP):
            return spent.rho_exact <= budget.rho_exact
        if isinstance(spent, PureDP) and isinstance(budget, ZCDP):
            return spent.to_zcdp().rho_exact <= budget.rho_exact
        raise InvalidParameterError("budget", budget, "compare zCDP with zCDP (or pure DP against a zCDP budget)")
    return spent.epsilon_exact <= budget.epsilon_exact and spent.delta_exact <= budget.delta_exact


def _under(guarantee: Guarantee, neighbours: NeighbourRelation) -> Guarantee:
    relation = _check_relation(neighbours)
    if relation is guarantee.neighbours:
        return guarantee
    if guarantee.neighbours is NeighbourRelation.ADD_REMOVE:
        # A replacement is one removal then one addition: group privacy for 2.
        grouped = guarantee.group(2)
        if isinstance(grouped, PureDP):
            return PureDP(grouped.epsilon_exact, relation)  # type: ignore[arg-type]
        if isinstance(grouped, ApproxDP):
            return ApproxDP(grouped.epsilon_exact, grouped.delta_exact, relation)  # type: ignore[arg-type]
        return ZCDP(grouped.rho_exact, relation)  # type: ignore[arg-type]
    raise InvalidParameterError(
        "neighbours",
        neighbours,
        "a replace-one guarantee says nothing about adding or removing a person; state add/remove instead",
    )
