"""Composition of events with a fixed (epsilon, delta): basic, parallel, advanced and optimal.

Every accountant here reads an event as a black-box (epsilon, delta)-DP release (a pure-DP or
approximate-DP event, Laplace, discrete Laplace, randomized response, or a group event of those)
and composes the pairs:

- :class:`BasicAccountant`: sequential composition (seeds 000 and 004) -- epsilons add, deltas
  add -- kept in exact rational arithmetic, so ten releases at 0.1 spend exactly 1.
- :func:`parallel_composition`: releases on disjoint parts of the data cost the maximum
  (seed 000, remark after the composition proposition; seed 004, Theorem 4).
- :class:`AdvancedAccountant`: the advanced composition theorem of Dwork, Rothblum & Vadhan
  (2010; Dwork & Roth 2014, Thm 3.20; seed 004), sqrt(k) growth instead of k.
- :class:`OptimalAccountant`: the exact optimal composition of k (epsilon, delta)-DP mechanisms
  (Kairouz, Oh & Viswanath 2015, Thm 3.3), for homogeneous events.

Gaussian-type events have no single (epsilon, delta) and are refused by all three; use a Renyi,
zCDP or PLD accountant for them.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from fractions import Fraction
from typing import Self

import numpy as np

from dpkit._errors import InvalidParameterError
from dpkit._lazy import LazyModule
from dpkit._validation import as_fraction, check_delta, check_epsilon, check_integer, check_positive
from dpkit.accounting._base import PrivacyAccountant, _flatten
from dpkit.events import (
    ApproxDPEvent,
    ComposedEvent,
    DiscreteLaplaceEvent,
    GroupEvent,
    LaplaceEvent,
    PrivacyEvent,
    PureDPEvent,
    RandomizedResponseEvent,
    SelfComposedEvent,
)
from dpkit.guarantees import ApproxDP, Guarantee, NeighbourRelation, PureDP, round_up

special = LazyModule("scipy.special")

__all__ = [
    "AdvancedAccountant",
    "BasicAccountant",
    "OptimalAccountant",
    "fixed_privacy",
    "optimal_composition_delta",
    "parallel_composition",
]


# -- events with a fixed (epsilon, delta) ------------------------------------------------------


def fixed_privacy(event: PrivacyEvent, neighbours: NeighbourRelation) -> tuple[Fraction, Fraction] | None:
    """The exact (epsilon, delta) that ``event`` certifies under ``neighbours``, or None.

    None means the event has no single (epsilon, delta) (a Gaussian, a zCDP release, a
    subsampled event...) or was stated under another neighbour relation.

    >>> from dpkit.events import LaplaceEvent
    >>> fixed_privacy(LaplaceEvent(4.0), NeighbourRelation.ADD_REMOVE)
    (Fraction(1, 4), Fraction(0, 1))
    """
    if isinstance(event, SelfComposedEvent):
        inner = fixed_privacy(event.event, neighbours)
        return None if inner is None else (inner[0] * event.count, inner[1] * event.count)
    if isinstance(event, ComposedEvent):
        eps, dlt = Fraction(0), Fraction(0)
        for part in event.events:
            pair = fixed_privacy(part, neighbours)
            if pair is None:
                return None
            eps, dlt = eps + pair[0], dlt + pair[1]
        return eps, dlt
    if isinstance(event, GroupEvent):
        inner = fixed_privacy(event.event, neighbours)
        if inner is None:
            return None
        return _group(inner, event.size)
    if getattr(event, "neighbours", None) is not neighbours:
        return None
    if isinstance(event, PureDPEvent | RandomizedResponseEvent):
        # k-ary randomized response with parameter epsilon is epsilon-DP (seed 000, K-RR theorem).
        return as_fraction(event.epsilon), Fraction(0)
    if isinstance(event, ApproxDPEvent):
        return as_fraction(event.epsilon), as_fraction(event.delta)
    if isinstance(event, LaplaceEvent):
        # Laplace of scale b = multiplier x sensitivity is (sensitivity / b)-DP (seed 000).
        return 1 / as_fraction(event.noise_multiplier), Fraction(0)
    if isinstance(event, DiscreteLaplaceEvent):
        # P(Z = z) / P(Z = z + a) <= exp(|a| / scale) (see dpkit.mechanisms.geometric).
        return Fraction(event.sensitivity) / as_fraction(event.scale), Fraction(0)
    return None


def _group(pair: tuple[Fraction, Fraction], size: int) -> tuple[Fraction, Fraction] | None:
    """Group privacy (``ApproxDP.group``): (eps, delta) -> (K eps, delta sum_{i<K} e^{i eps}), rounded up; None
    if delta >= 1."""
    eps, dlt = pair
    if dlt == 0:
        return eps * size, Fraction(0)
    try:
        grouped = ApproxDP(eps, dlt).group(size)  # type: ignore[arg-type]
    except InvalidParameterError:
        return None
    return grouped.epsilon_exact, grouped.delta_exact


def _as_guarantee(eps: Fraction, dlt: Fraction, neighbours: NeighbourRelation) -> PureDP | ApproxDP:
    if dlt == 0 and eps > 0:
        return PureDP(eps, neighbours)  # type: ignore[arg-type]
    if dlt >= 1:
        raise InvalidParameterError(
            "delta", float(dlt), "the composed delta is >= 1: the composition certifies nothing"
        )
    return ApproxDP(eps, dlt, neighbours)  # type: ignore[arg-type]


# -- basic composition ------------------------------------------------------------------------


class BasicAccountant(PrivacyAccountant):
    """Sequential composition (seeds 000, 004): the epsilons add and the deltas add, exactly.

    Holds also when each release's parameters are chosen adaptively (Rogers, Roth, Ullman &
    Vadhan 2016, "Privacy odometers and filters"), which is why it is the default accountant of
    :class:`dpkit.accounting.PrivacyFilter`.

    >>> from dpkit.events import LaplaceEvent
    >>> accountant = BasicAccountant().compose(LaplaceEvent(10.0), count=10)
    >>> accountant.guarantee
    PureDP(epsilon=1.0)
    >>> accountant.epsilon(0.0)
    1.0
    """

    certified = True

    def __init__(self, neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE) -> None:
        super().__init__(neighbours)
        self._epsilon_sum = Fraction(0)
        self._delta_sum = Fraction(0)

    def _supports_atomic(self, event: PrivacyEvent) -> bool:
        return fixed_privacy(event, self.neighbours) is not None

    def _compose_atomic(self, event: PrivacyEvent, count: int) -> None:
        pair = fixed_privacy(event, self.neighbours)
        assert pair is not None  # _supports_atomic said yes
        self._epsilon_sum += pair[0] * count
        self._delta_sum += pair[1] * count

    @property
    def epsilon_exact(self) -> Fraction:
        """The composed epsilon as an exact rational."""
        return self._epsilon_sum

    @property
    def delta_exact(self) -> Fraction:
        """The composed delta as an exact rational (group events round it up)."""
        return self._delta_sum

    @property
    def guarantee(self) -> PureDP | ApproxDP:
        """The composed guarantee: PureDP when no delta was spent, else ApproxDP (ApproxDP(0, 0) when empty).

        Raises InvalidParameterError when the deltas add up to 1 or more.
        """
        return _as_guarantee(self._epsilon_sum, self._delta_sum, self.neighbours)

    def _epsilon(self, delta: float) -> float:
        # Basic composition certifies a single point (eps, delta); at a smaller delta it says
        # nothing, which we report as +inf.
        if as_fraction(delta) < self._delta_sum:
            return math.inf
        return _float_up(self._epsilon_sum)

    def _delta(self, epsilon: float) -> float:
        if as_fraction(epsilon) < self._epsilon_sum:
            return 1.0
        return min(1.0, _float_up(self._delta_sum))


def _float_up(value: Fraction) -> float:
    """The float nearest ``value``, moved up if it fell below.

    "Below" is judged on the decimal the float stands for (dpkit's convention, see
    ``as_fraction``), so an exact 29/20 stays 1.45 rather than becoming 1.4500000000000002.
    """
    try:
        as_float = float(value)
    except OverflowError:  # beyond the largest float (an event with a vanishing noise multiplier)
        return math.inf
    return as_float if as_fraction(as_float) >= value else math.nextafter(as_float, math.inf)


def parallel_composition(guarantees: Iterable[Guarantee]) -> Guarantee:
    """The guarantee of releases each computed on a *disjoint* part of the data (seed 000, 004 Thm 4).

    One person touches at most one release, so the whole costs the largest epsilon and the
    largest delta (for zCDP, the largest rho). Every guarantee must share a neighbour relation.

    >>> parallel_composition([PureDP(0.5), PureDP(1.0), PureDP(0.25)])
    PureDP(epsilon=1.0)
    >>> parallel_composition([PureDP(0.5), ApproxDP(0.2, 1e-6)]).delta
    1e-06
    """
    from dpkit.guarantees import ZCDP

    items = list(guarantees)
    if not items:
        raise InvalidParameterError("guarantees", items, "must contain at least one guarantee")
    for item in items:
        if not isinstance(item, PureDP | ApproxDP | ZCDP):
            raise InvalidParameterError("guarantees", item, "must contain only PureDP, ApproxDP or ZCDP values")
    relation = items[0].neighbours
    if any(item.neighbours is not relation for item in items):
        raise InvalidParameterError("guarantees", items, "must all share one neighbour relation")
    zcdp = [item for item in items if isinstance(item, ZCDP)]
    if zcdp:
        if len(zcdp) != len(items):
            raise InvalidParameterError("guarantees", items, "cannot mix zCDP with (epsilon, delta) guarantees")
        return ZCDP(max(item.rho_exact for item in zcdp), relation)  # type: ignore[arg-type]
    eps = max(item.epsilon_exact for item in items)  # type: ignore[union-attr]
    dlt = max(item.delta_exact for item in items)  # type: ignore[union-attr]
    return _as_guarantee(eps, dlt, relation)


# -- advanced composition ---------------------------------------------------------------------


class AdvancedAccountant(PrivacyAccountant):
    """Advanced composition (Dwork, Rothblum & Vadhan 2010; Dwork & Roth 2014, Thm 3.20; seed 004).

    k releases, release i being (eps_i, delta_i)-DP, are (eps', sum delta_i + delta')-DP for every
    delta' in (0, 1] with

        eps' = sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^{eps_i} - 1),

    which for k equal releases is sqrt(2 k ln(1/delta')) eps + k eps (e^eps - 1). The
    heterogeneous form follows from Kairouz, Oh & Viswanath (2015), Thm 3.5, whose drift term
    eps_i (e^{eps_i} - 1) / (e^{eps_i} + 1) is smaller than ours. :meth:`epsilon` gives the
    whole of ``delta - sum delta_i`` to delta', and also returns basic composition whenever that
    is smaller (both bounds hold). ``delta_slack`` (optional) is the delta' that
    :attr:`guarantee` uses.

    >>> from dpkit.events import PureDPEvent
    >>> accountant = AdvancedAccountant().compose(PureDPEvent(0.01), count=10_000)
    >>> round(accountant.epsilon(1e-6), 4)   # basic composition would say 100
    6.2615
    """

    certified = True

    def __init__(
        self, delta_slack: float | None = None, neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE
    ) -> None:
        super().__init__(neighbours)
        self.delta_slack = None if delta_slack is None else check_delta(delta_slack, "delta_slack", allow_zero=False)
        self._epsilon_sum = Fraction(0)
        self._epsilon_square_sum = Fraction(0)
        self._delta_sum = Fraction(0)
        self._drift = 0.0  # sum eps_i (e^{eps_i} - 1), accumulated rounding up

    def _supports_atomic(self, event: PrivacyEvent) -> bool:
        return fixed_privacy(event, self.neighbours) is not None

    def _compose_atomic(self, event: PrivacyEvent, count: int) -> None:
        pair = fixed_privacy(event, self.neighbours)
        assert pair is not None  # _supports_atomic said yes
        eps, dlt = pair
        self._epsilon_sum += eps * count
        self._epsilon_square_sum += eps * eps * count
        self._delta_sum += dlt * count
        eps_up = _float_up(eps)
        # eps (e^eps - 1) overflows above eps ~ 709: the advanced bound is then infinite (basic wins).
        drift = math.inf if eps_up > 700.0 else round_up(eps_up * math.expm1(eps_up))
        self._drift = round_up(self._drift + round_up(count * drift))

    def _advanced_epsilon(self, slack: float) -> float:
        """eps' at delta' = ``slack`` (> 0), rounded up."""
        spread = math.sqrt(round_up(2.0 * math.log(1.0 / slack) * _float_up(self._epsilon_square_sum)))
        return round_up(round_up(spread) + self._drift)

    def _epsilon(self, delta: float) -> float:
        target = as_fraction(delta)
        if target < self._delta_sum:
            return math.inf
        basic = _float_up(self._epsilon_sum)
        slack = target - self._delta_sum
        if slack <= 0:
            return basic
        # float(slack) may round up past the exact slack; step down so delta' stays within it.
        slack_float = float(slack)
        if Fraction(slack_float) > slack:
            slack_float = math.nextafter(slack_float, 0.0)
        if slack_float <= 0:
            return basic
        return min(basic, self._advanced_epsilon(slack_float))

    def _delta(self, epsilon: float) -> float:
        base = _float_up(self._delta_sum)
        best = base if as_fraction(epsilon) >= self._epsilon_sum else 1.0
        excess = epsilon - self._drift
        if excess > 0:
            # Solve sqrt(2 ln(1/delta') S2) = eps - drift for delta'; the exponent is rounded
            # down (less negative), so delta' is rounded up.
            square_sum = _float_up(self._epsilon_square_sum)
            exponent = -(excess * excess) / (2.0 * square_sum)
            slack = round_up(math.exp(exponent * (1 - 1e-12)))
            best = min(best, round_up(base + slack))
        return min(1.0, best)

    @property
    def guarantee(self) -> ApproxDP:
        """(eps', sum delta_i + delta_slack) with eps' the smaller of advanced and basic composition."""
        if self.delta_slack is None:
            raise InvalidParameterError(
                "delta_slack", None, "set delta_slack to read .guarantee; or call epsilon(delta)"
            )
        total = self._delta_sum + as_fraction(self.delta_slack)
        if total >= 1:
            raise InvalidParameterError("delta_slack", self.delta_slack, "the composed delta would be >= 1")
        if not self._history:
            return ApproxDP(0.0, 0.0, self.neighbours)
        eps = min(_float_up(self._epsilon_sum), self._advanced_epsilon(self.delta_slack))
        return ApproxDP(eps, total, self.neighbours)  # type: ignore[arg-type]


# -- optimal homogeneous composition ----------------------------------------------------------


def _events_in(event: PrivacyEvent) -> list[PrivacyEvent]:
    """The non-composite events inside ``event`` (group events count as one)."""
    if isinstance(event, SelfComposedEvent):
        return _events_in(event.event)
    if isinstance(event, ComposedEvent):
        return [atom for part in event.events for atom in _events_in(part)]
    return [event]


def optimal_composition_delta(epsilon: float, delta: float, count: int, target_epsilon: float) -> float:
    """delta(target) of ``count``-fold composition of (epsilon, delta)-DP mechanisms, exactly (no rounding).

    Kairouz, Oh & Viswanath (2015), Thm 3.3 / 2.5: every (eps, delta)-DP mechanism is a
    post-processing of the pair P = (delta, (1-delta) p, (1-delta) q, 0), Q = (0, (1-delta) q,
    (1-delta) p, delta) with p = e^eps / (1 + e^eps), q = 1 - p, so its k-fold composition's
    privacy profile is the hockey-stick divergence of P^k against Q^k:

        delta(t) = 1 - (1-delta)^k (1 - sum_{l} C(k,l) max(0, p^{k-l} q^l - e^t p^l q^{k-l})).

    The sum runs over l < (k eps - t) / (2 eps); at t = (k - 2i) eps it is KOV's delta_i.
    Computed in log space (gammaln, logsumexp), so k = 10^4 and beyond are fast.

    ``epsilon`` must be finite and > 0, ``delta`` in [0, 1), ``count`` an integer >= 1 and
    ``target_epsilon`` >= 0 (``inf`` gives the delta atoms alone, 1 - (1-delta)^k); anything else
    raises InvalidParameterError.
    """
    eps = check_epsilon(epsilon)
    dlt = check_delta(delta)
    k = check_integer("count", count, minimum=1)
    target = check_positive("target_epsilon", target_epsilon, allow_zero=True, allow_inf=True)
    # Term l is positive where gap = (k - 2l) eps - t > 0, i.e. l < (k - t/eps) / 2 (no overflow of k eps).
    limit = (k - target / eps) / 2.0
    top = min(k, math.ceil(limit) + 1) if limit > 0 else 0
    mass = 0.0
    if top > 0:
        ell = np.arange(top, dtype=np.float64)
        with np.errstate(over="ignore"):  # l eps and (k - 2l) eps may pass the float range: -inf / inf terms
            gap = (k - 2 * ell) * eps - target
            ell, gap = ell[gap > 0], gap[gap > 0]
            if ell.size:
                log_choose = special.gammaln(k + 1.0) - special.gammaln(ell + 1.0) - special.gammaln(k - ell + 1.0)
                # p^{k-l} q^l = e^{-l eps} / (1 + e^{-eps})^k; (1 - e^{-gap}) keeps only the positive part.
                log_terms = log_choose - ell * eps - k * math.log1p(math.exp(-eps)) + np.log(-np.expm1(-gap))
                mass = min(float(np.exp(special.logsumexp(log_terms))), 1.0)
    # 1 - (1-delta)^k (1 - mass), without cancellation.
    log_keep = k * math.log1p(-dlt) + (math.log1p(-mass) if mass < 1.0 else -math.inf)
    return -math.expm1(log_keep)


class OptimalAccountant(PrivacyAccountant):
    """Optimal composition of k identical (eps, delta)-DP releases (Kairouz, Oh & Viswanath 2015, Thm 3.3).

    The answers are exact for the worst (eps, delta)-DP mechanism, so no accountant that only
    knows the pair (eps, delta) can certify less; they hold under adaptive composition. All
    events must share one (eps, delta): a release with another pair is refused (the
    heterogeneous optimum is #P-hard, Murtagh & Vadhan 2016) and the state is left unchanged.

    >>> from dpkit.events import PureDPEvent
    >>> accountant = OptimalAccountant().compose(PureDPEvent(0.01), count=10_000)
    >>> 4.88 < accountant.epsilon(1e-6) < 4.89   # advanced composition: 6.26
    True
    """

    certified = True
    #: Relative margin added to the computed delta to cover floating-point error in log space.
    _margin = 1e-9
    #: Most releases composed in all: the exact profile sums one term per release (memory and
    #: time grow linearly; 10^7 releases already take seconds per query).
    max_count = 10**8

    def __init__(self, neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE) -> None:
        super().__init__(neighbours)
        self._pair: tuple[Fraction, Fraction] | None = None
        self._count = 0

    def compose(self, event: PrivacyEvent, count: int = 1) -> Self:
        """Record ``count`` runs of ``event``; refuse, unchanged, beyond :attr:`max_count` releases in all.

        An event whose epsilon is beyond the float range (``LaplaceEvent(1e-320)``) is refused with
        InvalidParameterError: the profile is evaluated in floating point.
        """
        repeats = check_integer("count", count, minimum=1)
        added = sum(times for _, times in _flatten(event, repeats)) if isinstance(event, PrivacyEvent) else 0
        for atom in _events_in(event) if isinstance(event, PrivacyEvent) else []:
            pair = fixed_privacy(atom, self.neighbours)
            if pair is not None and not math.isfinite(_float_up(pair[0])):
                raise InvalidParameterError(
                    "event", event, "must have an epsilon within the float range (OptimalAccountant computes in floats)"
                )
        if self._count + added > self.max_count:
            raise InvalidParameterError(
                "count",
                count,
                f"would bring this accountant to {self._count + added} releases; OptimalAccountant evaluates at most "
                f"{self.max_count} (use PLDAccountant or AdvancedAccountant for more)",
            )
        return super().compose(event, repeats)

    def supports(self, event: PrivacyEvent) -> bool:
        """Whether ``event`` is (eps, delta)-DP with the same pair as everything composed so far."""
        if not super().supports(event):
            return False
        pairs = {fixed_privacy(atom, self.neighbours) for atom in _events_in(event)}
        if self._pair is not None:
            pairs.add(self._pair)
        return len(pairs) == 1

    def _supports_atomic(self, event: PrivacyEvent) -> bool:
        pair = fixed_privacy(event, self.neighbours)
        if pair is None or (self._pair is not None and pair != self._pair):
            return False
        # The profile is evaluated in floats: an epsilon beyond the float range (LaplaceEvent(1e-320))
        # is refused here rather than failing every later query with OverflowError.
        return math.isfinite(_float_up(pair[0]))

    def _compose_atomic(self, event: PrivacyEvent, count: int) -> None:
        self._pair = fixed_privacy(event, self.neighbours)
        self._count += count

    @property
    def count(self) -> int:
        """How many releases were composed."""
        return self._count

    @property
    def pair(self) -> tuple[float, float] | None:
        """The shared (eps, delta) of the releases, or None before the first."""
        return None if self._pair is None else (float(self._pair[0]), float(self._pair[1]))

    def _raw_delta(self, target_epsilon: float) -> float:
        assert self._pair is not None
        eps = float(self._pair[0])
        dlt = _float_up(self._pair[1])
        if dlt == 0.0 and as_fraction(target_epsilon) >= self._pair[0] * self._count:
            return 0.0  # pure DP at or beyond k eps: exactly zero
        value = optimal_composition_delta(eps, dlt, self._count, target_epsilon)
        # Each log-space term carries a few ulps of the largest magnitude in it (gammaln(k + 1)
        # is 1.3e7 at k = 1e6, an ulp of 1.9e-9): a fixed 1e-9 margin left the answer 1.4e-10
        # below the exact delta there. Scale the margin with those magnitudes.
        k = self._count
        magnitude = float(special.gammaln(k + 1.0)) + k * (eps + math.log1p(math.exp(min(eps, 700.0))))
        margin = self._margin + 16 * 2.2e-16 * (magnitude + abs(target_epsilon))
        if not margin < 1.0:  # k eps beyond the float range: no digit of the sum is reliable
            return 1.0
        return min(1.0, round_up(value * (1 + margin)))

    def _delta(self, epsilon: float) -> float:
        return self._raw_delta(epsilon)

    def _epsilon(self, delta: float) -> float:
        assert self._pair is not None
        eps, dlt = self._pair
        # Basic composition is also valid (and is what is left when delta sits exactly at k delta).
        basic = _float_up(eps * self._count) if as_fraction(delta) >= dlt * self._count else math.inf
        if self._raw_delta(0.0) <= delta:
            return 0.0
        high = _float_up(eps * self._count)
        if not math.isfinite(high):  # k eps beyond the float range: search up to the largest float
            high = sys.float_info.max
        if self._raw_delta(high) > delta:
            # Below 1 - (1 - delta)^k nothing can be certified: the delta atoms alone exceed it.
            return basic
        low = 0.0
        # Bisection on the decreasing profile delta(t); ``high`` always meets the target.
        for _ in range(200):
            middle = 0.5 * (low + high)
            if middle <= low or middle >= high or high - low <= 1e-12 * high:
                break
            if self._raw_delta(middle) <= delta:
                high = middle
            else:
                low = middle
        return min(basic, high)

    @property
    def guarantee(self) -> PureDP | ApproxDP:
        """Basic composition of the releases (the optimal accountant's answer at delta = k delta)."""
        if self._pair is None:
            return ApproxDP(0.0, 0.0, self.neighbours)
        return _as_guarantee(self._pair[0] * self._count, self._pair[1] * self._count, self.neighbours)
