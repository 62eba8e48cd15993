"""The privacy compiler: from a plan and public facts to statistics, mechanisms and a cost.

Everything here is decided from public information only: the schema, the privacy unit, the
declared bounds, contribution limits and public keys, and the privacy parameters of the
request. No row is read. The result, a :class:`CompiledQuery`, says which noiseless
statistics the backend computes, how much of the budget each gets, which mechanism adds the
noise, and what the whole query costs; :meth:`CompiledQuery.verify` re-derives the cost from
the mechanisms before anything is spent (a failure there is an :class:`InternalError`).

Sensitivities (add/remove one person; k rows per group, g groups per person):

=================  ==============================  =====================
statistic          per group, one person           over all groups
=================  ==============================  =====================
rows (COUNT)       k                               L1 g k, L2 sqrt(g) k
persons            1                               L1 g, L2 sqrt(g)
moment (sums)      k B + u (k/2 + 1)               g times / sqrt(g) times
histogram          k + bins 2^-21 (score units)    one EM per group at eps / g
=================  ==============================  =====================

where B bounds one row's (shifted, clamped) value and u = 2^e is the integer unit of the exact
sums (:mod:`dpkit.engine._aggregation`). A person with n > k rows in a group adds min(n, k) to
COUNT; to SUM, their total clamped to k times the row bounds (``Moment.cap_total``); to the
moments of a mean or variance, their sum scaled by k / n. Each stays within the table above.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import math
import numbers
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InternalError, InvalidParameterError, PrivacyWarning
from dpkit._validation import (
    as_fraction,
    check_delta,
    check_epsilon,
    check_integer,
    check_positive,
    check_probability,
    warn_if_risky,
)
from dpkit.engine._aggregation import AggregationPlan, Histogram, Moment, chooses_groups, decimal_scale
from dpkit.engine._backends import ColumnInfo
from dpkit.engine._plan import (
    AUTO,
    NUMERIC_KINDS,
    Aggregate,
    Bin,
    Contribution,
    Derived,
    Join,
    OrderBy,
    Query,
    canonical,
    check_bounds_mapping,
    distinct,
    output_columns,
    spelling_resolver,
)
from dpkit.guarantees import ZCDP, ApproxDP, ApproxZCDP, Guarantee, PureDP
from dpkit.guarantees._guarantees import float_at_most as _round_down
from dpkit.guarantees._guarantees import largest_rho
from dpkit.mechanisms import DiscreteGaussian, DiscreteLaplace, Exponential, Laplace
from dpkit.noise import RandomSource, grid_exponent, snap_to_grid

__all__ = ["CompileContext", "CompiledQuery", "Statistic", "compile_query", "QUANTILE_BINS", "AUTO_LEVELS"]

#: Resolution of quantiles: equal bins of the clamping range.
QUANTILE_BINS = 1024
#: Quantile levels of the data used as automatic bounds.
AUTO_LEVELS = (0.01, 0.99)
_LOG2_BINS = 103  # signed bins |x| in [2^(b-41), 2^(b-40)), b = 1..103, and 0


@dataclass(frozen=True)
class CompileContext:
    """Public facts about the session: schema, privacy unit, bounds, limits, budget kind."""

    table: str
    columns: Mapping[str, ColumnInfo]
    public_tables: Mapping[str, Mapping[str, ColumnInfo]]
    privacy_unit: str | None
    budget: Guarantee
    bounds: Mapping[str, tuple[float, float] | str]
    contribution: Contribution
    #: The backend's ``derived_schema`` (table, joins, derived columns -> their ColumnInfo), which types
    #: derived columns by binding them (no rows read); None: derived columns are refused.
    derived_schema: Callable[[str, tuple[Join, ...], tuple[Derived, ...]], Mapping[str, ColumnInfo]] | None = None


#: How the name of a ``count(column)``'s 0/1 column ends (see :func:`nonnull_column`).
NONNULL_SUFFIX = " IS NOT NULL"


def nonnull_column(column: str) -> str:
    """The name of the derived 0/1 column a ``count(column)`` sums: 1 where ``column`` is not NULL.

    >>> nonnull_column("income")
    'income IS NOT NULL'
    """
    return column + NONNULL_SUFFIX


@dataclass(frozen=True)
class Statistic:
    """One noiseless statistic the backend computes and a mechanism releases."""

    key: str  # rows | persons | sum:c | csum:c | csq:c | hist:c | auto:c
    column: str | None
    weight: float
    #: For the sum of a ``count(column)``'s 0/1 column (see :func:`nonnull_column`): the column counted.
    counts: str | None = None

    @property
    def kind(self) -> str:
        return self.key.split(":")[0]


@dataclass(frozen=True)
class Request:
    """The privacy parameters of one query, checked against the budget's kind."""

    mode: str  # "laplace" (pure DP per statistic) or "gaussian" (zCDP per statistic)
    epsilon: Fraction | None
    delta: Fraction
    rho: Fraction | None
    accuracy: float | dict[str, float] | None
    alpha: float


def parse_request(
    budget: Guarantee,
    *,
    epsilon: Any = None,
    delta: Any = None,
    rho: Any = None,
    accuracy: Any = None,
    alpha: Any = 0.05,
    mechanism: Any = "auto",
) -> Request:
    """Check the cost arguments of a query against the kind of budget (before any data is read).

    A zCDP or approximate zCDP budget is spent with ``rho=`` (Gaussian noise) or with ``epsilon=``
    (Laplace noise, pure DP, charged rho = epsilon^2 / 2: Bun & Steinke 2016, Prop. 1.4). A query
    epsilon above 5 warns (PrivacyWarning): legal but weak.
    """
    level = check_probability("alpha", alpha, open_low=True, open_high=True)
    if mechanism not in ("auto", "laplace", "gaussian"):
        raise InvalidParameterError("mechanism", mechanism, "must be 'auto', 'laplace' or 'gaussian'")
    dlt = Fraction(0) if delta is None else as_fraction(check_delta(delta))
    if accuracy is not None:
        if epsilon is not None or rho is not None:
            raise InvalidParameterError("accuracy", accuracy, "give either accuracy or epsilon/rho, not both")
        if mechanism == "gaussian":
            raise InvalidParameterError(
                "accuracy", accuracy, "accuracy targets use Laplace noise: mechanism='gaussian' takes none"
            )
        if isinstance(budget, PureDP | ZCDP) and dlt > 0:
            kind = "pure-DP" if isinstance(budget, PureDP) else "zCDP"
            raise InvalidParameterError("delta", delta, f"must be 0 with a {kind} budget")
        if isinstance(accuracy, Mapping):
            targets = {str(k): check_positive(f"accuracy[{k!r}]", v) for k, v in accuracy.items()}
            return Request("laplace", None, dlt, None, targets, level)
        return Request("laplace", None, dlt, None, check_positive("accuracy", accuracy), level)
    if isinstance(budget, ZCDP | ApproxZCDP) and epsilon is not None:
        return _laplace_in_zcdp(budget, epsilon, dlt, rho, mechanism, level)
    if isinstance(budget, ZCDP):
        if dlt != 0:
            raise InvalidParameterError("delta", delta, "must be 0 (or omitted) with a zCDP budget")
        if rho is None:
            raise InvalidParameterError("rho", rho, "give rho (> 0) for Gaussian noise, or epsilon (> 0) for Laplace")
        if mechanism == "laplace":
            raise InvalidParameterError("mechanism", mechanism, "Laplace noise is spent with epsilon=..., not rho")
        return Request("gaussian", None, Fraction(0), as_fraction(check_positive("rho", rho)), None, level)
    if isinstance(budget, ApproxZCDP):
        if rho is None:
            raise InvalidParameterError("rho", rho, "give rho (> 0) for Gaussian noise, or epsilon (> 0) for Laplace")
        if mechanism == "laplace":
            raise InvalidParameterError("mechanism", mechanism, "Laplace noise is spent with epsilon=..., not rho")
        return Request("gaussian", None, dlt, as_fraction(check_positive("rho", rho)), None, level)
    if rho is not None:
        raise InvalidParameterError("rho", rho, f"rho spends a zCDP budget; this session's budget is {budget}")
    if epsilon is None:
        raise InvalidParameterError("epsilon", epsilon, "give epsilon (> 0), or a target accuracy")
    eps = as_fraction(check_epsilon(epsilon))
    if isinstance(budget, PureDP) and dlt > 0:
        raise InvalidParameterError("delta", delta, "must be 0 with a pure-DP budget")
    if mechanism == "gaussian" and dlt == 0:
        raise InvalidParameterError("delta", delta, "Gaussian noise needs delta > 0")
    warn_if_risky(float(eps))
    return Request("gaussian" if mechanism == "gaussian" else "laplace", eps, dlt, None, None, level)


def _laplace_in_zcdp(budget: Guarantee, epsilon: Any, dlt: Fraction, rho: Any, mechanism: str, level: float) -> Request:
    """``epsilon=`` with a (approximate) zCDP budget: Laplace noise, charged rho = epsilon^2 / 2 by the ledger."""
    if rho is not None:
        raise InvalidParameterError("rho", rho, "give rho (Gaussian noise) or epsilon (Laplace noise), not both")
    if mechanism == "gaussian":
        raise InvalidParameterError(
            "mechanism", mechanism, "Gaussian noise under a zCDP budget is spent with rho=..., not epsilon"
        )
    eps = as_fraction(check_epsilon(epsilon))
    if isinstance(budget, ZCDP) and dlt != 0:
        raise InvalidParameterError("delta", float(dlt), "must be 0 (or omitted) with a ZCDP budget")
    warn_if_risky(float(eps))
    return Request("laplace", eps, dlt, None, None, level)


# -- the compiled query -------------------------------------------------------------------------


@dataclass(frozen=True)
class CompiledQuery:
    """A query made private: statistics, budget split, mechanisms' parameters and total cost."""

    query: Query
    request: Request
    person: str | None
    contribution: Contribution
    groups_bound: int  # g after using public keys (min(g, number of keys))
    bounds: Mapping[str, tuple[float, float] | str]
    statistics: tuple[Statistic, ...]
    shares: Mapping[str, Fraction]  # statistic key -> epsilon (laplace) or rho (gaussian)
    selection_epsilon: Fraction | None
    selection_delta: Fraction
    gaussian_delta: Fraction  # delta used to convert the zCDP part to (eps, delta)
    cost: Guarantee
    split: tuple[tuple[str, str, str], ...] = field(default=())  # (statistic, mechanism, share) for display
    #: The statistic whose noisy values select private keys: "rows" (the released COUNT itself, no
    #: budget share of its own) or "persons" (the count of people: released for COUNT(DISTINCT),
    #: otherwise computed for selection only). Laplace mode: discrete Laplace at
    #: ``selection_epsilon``; Gaussian mode: the statistic's discrete Gaussian at its rho share.
    selection_key: str = "persons"
    #: Group columns of a floating type (their -0.0 is grouped, ranked and released as 0.0).
    float_groups: frozenset[str] = frozenset()
    #: The 32-bit (FLOAT) ones among them: their public keys are written as FLOAT (see AggregationPlan).
    real_groups: frozenset[str] = frozenset()
    #: The person column's kind for the group-choice hash (see ``AggregationPlan.person_kind``).
    person_kind: str = "text"
    #: Each group column's type as the backend names it (bins left out): the types of a result
    #: that has no rows (private keys, none selected).
    group_types: Mapping[str, str] = field(default_factory=dict)
    #: The columns computed from each row: the query's own, then the 0/1 column of each ``count(column)``
    #: (see :func:`nonnull_column`), with their types as the backend names them.
    derived: tuple[Derived, ...] = ()
    derived_types: tuple[str, ...] = ()

    @property
    def public_keys(self) -> bool:
        return self.query.public_keys

    @property
    def result_types(self) -> dict[str, str]:
        """The released table's column types where they are not DOUBLE: each group column's
        (``group_types``) and BIGINT for a count and its interval ends (whole numbers)."""
        counts = {
            column: "BIGINT"
            for name, aggregate in self.query.aggregates
            if aggregate.kind in ("count", "count_distinct")
            for column in output_columns(name, aggregate)
        }
        return {**self.group_types, **counts}

    # -- mechanisms ---------------------------------------------------------------------------

    def _k_g(self, statistic: Statistic) -> tuple[int, int]:
        k, g = self.contribution.rows_per_group, self.groups_bound
        if statistic.kind == "auto":  # one ungrouped histogram: the rows a person adds to the g groups it reaches
            return k * g, 1
        return k, g

    def moment(self, statistic: Statistic, bounds: tuple[float, float]) -> Moment:
        """The backend moment computing ``statistic`` given its column's bounds."""
        low, high = bounds
        mid = (low + high) / 2
        fill = min(max(0.0, low), high)
        column = statistic.column or ""
        if statistic.kind == "sum":
            return Moment(statistic.key, column, low, high, 0.0, 1, fill, cap_total=True)
        if statistic.kind == "csum":
            return Moment(statistic.key, column, low, high, mid, 1, fill)
        reach = (high - low) / 2
        return Moment(statistic.key, column, low, high, mid, 2, fill, offset=reach * reach / 2)

    def sensitivity(self, statistic: Statistic, bounds: tuple[float, float] | None = None) -> tuple[float, float]:
        """(L1, L2) sensitivity of the statistic's vector over groups."""
        k, g = self._k_g(statistic)
        if statistic.kind == "rows":
            per_group = float(k)
        elif statistic.kind == "persons":
            per_group = 1.0
        elif statistic.kind in ("hist", "auto"):
            bins = QUANTILE_BINS if statistic.kind == "hist" else 2 * _LOG2_BINS + 1
            per_group = k + bins * 2.0**-21
        else:
            if bounds is None:  # pragma: no cover - guarded by callers
                raise InternalError("moment sensitivity needs bounds")
            moment = self.moment(statistic, bounds)
            unit = moment.unit_scale
            per_group = math.nextafter(k * moment.bound + unit * (k / 2 + 1), math.inf)
        return (g * per_group, _sqrt_times_up(g, per_group))

    def mechanism(
        self, statistic: Statistic, dimension: int, bounds: tuple[float, float] | None = None
    ) -> NoiseMechanism:
        """The mechanism that releases ``statistic`` over ``dimension`` groups."""
        l1, l2 = self.sensitivity(statistic, bounds)
        share = self.shares[statistic.key]
        k, g = self._k_g(statistic)
        if statistic.kind in ("hist", "auto"):
            levels = self.levels(statistic)
            per_level = share / (g * len(levels))
            if self.request.mode == "laplace":
                epsilon = _round_down(per_level)
            else:
                # The exponential mechanism is (eps^2 / 8)-zCDP (Cesar & Rogers 2021, bounded range).
                epsilon = _round_down(as_fraction(math.sqrt(8 * float(per_level))) * Fraction(999999, 1000000))
            return SelectionNoise(l1 / g, epsilon, len(levels) * g, self.request.mode)
        integer = statistic.kind in ("rows", "persons")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            if self.request.mode == "laplace":
                if integer:
                    return VectorNoise(DiscreteLaplace(int(l1), _round_down(share), dimension=dimension), 1.0, 0)
                return VectorNoise(Laplace(l1, _round_down(share), dimension=dimension), 1.0, 0)
            if integer:
                return VectorNoise(DiscreteGaussian(l2, rho=_round_down(share)), 1.0, 0)
            return grid_gaussian(l2, share, dimension)

    def levels(self, statistic: Statistic) -> tuple[float, ...]:
        if statistic.kind == "auto":
            return AUTO_LEVELS
        levels: list[float] = []
        for _, aggregate in self.query.aggregates:
            if aggregate.kind == "quantiles" and aggregate.column == statistic.column:
                levels.extend(aggregate.levels)
        # A level shared by several aggregates (MEDIAN and a list holding 0.5) is selected once and
        # released under each name: one value per group and level.
        return tuple(dict.fromkeys(levels))

    @property
    def selection_base(self) -> int:
        """The most one person adds to one group's selection count (k rows, or 1 person)."""
        return self.contribution.rows_per_group if self.selection_key == "rows" else 1

    @property
    def gaussian_selection(self) -> bool:
        """Whether private keys are selected with discrete Gaussian noise (Gaussian mode: no pure-DP share)."""
        return self.selection_epsilon is not None and self.request.mode != "laplace"

    def selection_mechanism(self, dimension: int) -> DiscreteLaplace | DiscreteGaussian:
        """Noise on the per-group counts (rows or persons, ``selection_key``) that select private keys.

        Laplace mode: discrete Laplace at ``selection_epsilon`` (L1 sensitivity g b). Gaussian mode:
        the selecting statistic's own discrete Gaussian (L2 sensitivity sqrt(g) b, its rho share,
        part of the query's zCDP total).
        """
        if self.selection_epsilon is None:  # pragma: no cover - guarded by callers
            raise InternalError("no partition selection in this query")
        if self.gaussian_selection:
            chosen = next(s for s in self.statistics if s.key == self.selection_key)
            noise = self.mechanism(chosen, dimension)  # the count's own release mechanism
            if not isinstance(noise, VectorNoise) or not isinstance(noise.mechanism, DiscreteGaussian):
                raise InternalError(f"selection count has mechanism {noise.name}, expected DiscreteGaussian")
            return noise.mechanism
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            sensitivity = self.groups_bound * self.selection_base
            return DiscreteLaplace(sensitivity, _round_down(self.selection_epsilon), dimension=max(dimension, 1))

    @property
    def selection_share(self) -> dict[str, float]:
        """What the selection statistic spends, for display: ``{"epsilon": ...}`` or ``{"rho": ...}``."""
        if self.gaussian_selection:
            return {"rho": float(self.shares[self.selection_key])}
        return {"epsilon": float(self.selection_epsilon or 0)}

    def selection_threshold(self, mechanism: DiscreteLaplace | DiscreteGaussian) -> int:
        """Smallest tau with P[b + Z >= tau] <= delta / g for Z the selection noise (Korolova et al. 2009).

        b = :attr:`selection_base`: a person alone in a group adds at most b to its count and
        makes it appear; with at most g such groups per person the chance that any of them is
        released is at most delta. Discrete Laplace: P[Z >= m] = q^m / (1 + q) for m >= 1.
        Discrete Gaussian: P[Z >= m] = P[|Z| > m - 1] / 2 by symmetry, an exact tail sum (with a
        relative safety margin). On the groups present in both neighbours, the noise is calibrated
        to the count's full sensitivity (g b in L1, or sqrt(g) b in L2 within the zCDP budget).
        """
        base = self.selection_base
        target = float(self.selection_delta) / self.groups_bound * (1 - 1e-9)
        if isinstance(mechanism, DiscreteGaussian):
            # Smallest m >= 1 with P[|Z| > m - 1] <= 2 target: one more than the two-sided quantile
            # (its own bisection over the exact tail), with a further relative margin of 1e-6.
            return base + 1 + int(mechanism.noise_quantile(2 * target / (1 + 1e-6)))
        q = math.exp(-1.0 / mechanism.scale)
        if q == 0.0:  # a tiny scale (huge epsilon): P[Z >= 1] = q / (1 + q) underflows below any target
            return base + 1
        tau = base + max(1, math.ceil(math.log(target * (1 + q)) / math.log(q)))
        while q ** (tau - base) / (1 + q) > target:
            tau += 1
        return tau

    # -- the cost, re-derived --------------------------------------------------------------------

    def verify(self, bounds: Mapping[str, tuple[float, float]] | None = None) -> None:
        """Recompute the cost from the mechanisms themselves; raise InternalError if it exceeds ``cost``."""
        pure = Fraction(0)
        rho = Fraction(0)
        for statistic in self.statistics:
            if statistic.key == self.selection_key and self.selection_epsilon is not None:
                continue
            column_bounds = None
            if statistic.kind in ("sum", "csum", "csq"):
                given = (bounds or {}).get(statistic.column or "") or self.bounds.get(statistic.column or "")
                if not isinstance(given, tuple):
                    given = (0.0, 1.0)  # automatic bounds: the share does not depend on them
                column_bounds = given
            noise = self.mechanism(statistic, 1, column_bounds)
            if self.request.mode == "laplace":
                pure += noise.epsilon_spent
            else:
                rho += noise.rho_spent
        if self.selection_epsilon is not None:
            selector = self.selection_mechanism(1)
            if isinstance(selector, DiscreteGaussian):
                spent = selector.guarantee
                if not isinstance(spent, ZCDP):  # pragma: no cover - a discrete Gaussian built from rho
                    raise InternalError(f"selection noise has guarantee {spent}, expected zCDP")
                rho += spent.rho_exact
            else:
                pure += as_fraction(selector.epsilon)
        cost = self.cost
        if isinstance(cost, ApproxZCDP):
            as_rho = rho + (PureDP(pure).to_zcdp().rho_exact if pure > 0 else Fraction(0))  # type: ignore[arg-type]
            ok = as_rho <= cost.rho_exact and (pure == 0 or rho == 0) and self.selection_delta <= cost.delta_exact
        elif isinstance(cost, ZCDP):
            ok = rho <= cost.rho_exact and pure == 0
        elif self.request.mode == "laplace":
            ok = pure <= cost.epsilon_exact and self.selection_delta <= cost.delta_exact
        else:
            converted = Fraction(0)
            if rho > 0:
                converted = ZCDP(rho).to_approx(float(self.gaussian_delta)).epsilon_exact  # type: ignore[arg-type]
            ok = (
                pure + converted <= cost.epsilon_exact
                and self.selection_delta + self.gaussian_delta <= cost.delta_exact
            )
        if not ok:
            raise InternalError(f"compiled query spends more than its declared cost {cost}; please report this bug")


class VectorNoise:
    """A numeric mechanism over the group vector, possibly on an integer grid of step ``scale``."""

    def __init__(self, mechanism: Any, scale: float, exponent: int) -> None:
        self.mechanism = mechanism
        self._scale = scale
        self._exponent = exponent

    @property
    def name(self) -> str:
        return type(self.mechanism).__name__

    @property
    def epsilon_spent(self) -> Fraction:
        return self.mechanism.guarantee.epsilon_exact  # type: ignore[no-any-return]

    @property
    def rho_spent(self) -> Fraction:
        return self.mechanism.guarantee.rho_exact  # type: ignore[no-any-return]

    def release(self, values: list[float], rng: RandomSource) -> list[float]:
        if not values:
            return []
        if self._exponent:
            units = snap_to_grid(values, self._exponent) / self._scale  # type: ignore[arg-type]
            noisy = self.mechanism.release([int(u) for u in units], rng=rng)
            return [float(v) * self._scale for v in noisy]
        out = self.mechanism.release(list(values), rng=rng)
        return [float(v) for v in out]

    def half_width(self, alpha: float) -> float:
        return float(self.mechanism.noise_quantile(alpha)) * self._scale

    @property
    def expected_error(self) -> float:
        return float(self.mechanism.expected_error) * self._scale

    @property
    def scale(self) -> float:
        inner: Any = getattr(self.mechanism, "scale", None) or getattr(self.mechanism, "sigma", 0.0)
        return float(inner) * self._scale


def grid_gaussian(l2: float, rho: Fraction, dimension: int) -> VectorNoise:
    """Discrete Gaussian noise for real values: snapped to a public grid 2^e, integer noise in grid units.

    Snapping moves each coordinate by at most half a unit, so the integer vectors of neighbours
    differ by at most l2 / 2^e + sqrt(d) in L2 (the Gaussian's own argument, dpkit.mechanisms).
    """
    sigma = l2 / math.sqrt(2 * float(rho))
    exponent = grid_exponent(l2, sigma, dimension, norm=2)
    unit = math.ldexp(1.0, exponent)
    sensitivity_units = math.nextafter(l2 / unit + math.sqrt(dimension), math.inf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        mechanism = DiscreteGaussian(sensitivity_units, rho=_round_down(rho))
    return VectorNoise(mechanism, unit, exponent)


class SelectionNoise:
    """Exponential-mechanism quantiles: one selection per (group, level) at ``epsilon`` each."""

    def __init__(self, sensitivity: float, epsilon: float, count: int, mode: str) -> None:
        self.sensitivity = sensitivity
        self.epsilon = epsilon
        self.count = count
        self.mode = mode
        self.name = "Exponential"
        try:  # built here, before any debit: an epsilon below the mechanism's range (2**-60) is refused now
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PrivacyWarning)
                Exponential(sensitivity, epsilon, candidates=[0.0, 1.0])
        except InvalidParameterError as error:
            if error.name != "epsilon":  # (a sensitivity outside [2**-1000, 2**1000] keeps its own name)
                raise
            raise InvalidParameterError(
                "epsilon",
                epsilon,
                f"is too small for an exponential mechanism of sensitivity {sensitivity} (a quantile's or an "
                "automatic bound's share): give a larger epsilon, or less weight to the other aggregates",
            ) from None

    @property
    def epsilon_spent(self) -> Fraction:
        return as_fraction(self.epsilon) * self.count

    @property
    def rho_spent(self) -> Fraction:
        return as_fraction(self.epsilon) ** 2 / 8 * self.count

    def select_rows(self, candidates: list[float], scores: NDArray[np.float64], rng: RandomSource) -> list[float]:
        """One independent selection among ``candidates`` per row of ``scores`` (one row per group)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            mechanism = Exponential(self.sensitivity, self.epsilon, candidates=candidates)
        return [float(value) for value in mechanism.release_rows(scores, rng=rng)]

    @property
    def scale(self) -> float:
        return 2 * self.sensitivity / self.epsilon

    @property
    def expected_error(self) -> float:
        return math.nan

    def half_width(self, alpha: float) -> float:
        return math.nan


NoiseMechanism = VectorNoise | SelectionNoise


# -- compiling ----------------------------------------------------------------------------------


def _sqrt_times_up(g: int, value: float) -> float:
    """The smallest float >= sqrt(g) * value (exactly; an L2 sensitivity must never round down)."""
    result = math.sqrt(g) * value
    target = g * Fraction(value) ** 2
    while Fraction(result) ** 2 < target:
        result = math.nextafter(result, math.inf)
    return result


def _statistics_for(aggregate: Aggregate, unit: str | None) -> list[str]:
    column = aggregate.column
    if aggregate.kind == "count" and column is not None:
        return [f"sum:{nonnull_column(column)}"]  # the rows where it is not NULL: a sum of 0s and 1s
    return {
        "count": ["rows"],
        "count_distinct": ["persons"],
        "sum": [f"sum:{column}"],
        "mean": ["rows", f"csum:{column}"],
        "variance": ["rows", f"csum:{column}", f"csq:{column}"],
        "stddev": ["rows", f"csum:{column}", f"csq:{column}"],
        "quantiles": [f"hist:{column}"],
    }[aggregate.kind]


_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _key_types(info: ColumnInfo) -> tuple[tuple[type, ...], str] | None:
    """The Python types a public key of a column may have, and their name for messages (None: unchecked).

    DuckDB and Spark compare a key of another type by casting one side: a text key on a BOOLEAN
    or DATE column matches nothing on some paths, and one that does not parse fails the query
    after its debit. So every column type with a natural Python type asks for it.
    """
    kind = info.type.upper()
    if info.integer:
        return (numbers.Integral,), "int"
    if kind.startswith(("DECIMAL", "NUMERIC")):
        return (numbers.Real, decimal.Decimal), "int, float or decimal.Decimal"
    if info.numeric:
        return (numbers.Real,), "int or float"
    if kind in ("VARCHAR", "STRING", "TEXT") or kind.startswith(("VARCHAR", "CHAR")):
        return (str,), "str"
    if kind.startswith("BOOL"):
        return (bool, np.bool_), "bool"
    if kind == "DATE":
        return (datetime.date,), "datetime.date"
    if kind.startswith("TIMESTAMP") or kind == "DATETIME":
        return (datetime.date,), "datetime.datetime (or pandas.Timestamp)"
    if kind.startswith("TIME"):  # TIME, TIME_NS, TIME WITH TIME ZONE (TIMESTAMP: above)
        return (datetime.time,), "datetime.time"
    if kind in ("BLOB", "BYTEA", "BINARY", "VARBINARY"):
        return (bytes,), "bytes"
    if kind == "UUID":
        return (str,), "str (a UUID as 8-4-4-4-12 hexadecimal digits)"
    if kind.startswith("ENUM"):
        return (str,), "str"
    # Nothing else has keys every engine reads alike (a text key on an INTERVAL column that does
    # not parse fails the query when a row reaches it, after the debit): only NULL is a key here.
    return (), "none"


def _check_key_types(column: str, info: ColumnInfo, values: list[Any]) -> None:
    """Public keys must have the column's type: a key '1' never equals the integer 1 in the results."""
    expected = _key_types(info)
    if expected is None:
        return
    allowed, names = expected
    boolean = bool in allowed
    uuid = info.type.upper() == "UUID"
    for value in values:
        if value is None:
            continue
        if not allowed:
            raise InvalidParameterError(
                "keys", value, f"column {column!r} is {info.type}: it takes no public keys (group it by private keys)"
            )
        if not isinstance(value, allowed) or (isinstance(value, bool | np.bool_) and not boolean):
            raise InvalidParameterError(
                "keys",
                value,
                f"has type {type(value).__name__}, but column {column!r} is {info.type}: use {names} keys",
            )
        if uuid and _UUID.fullmatch(str(value)) is None:
            raise InvalidParameterError("keys", value, f"column {column!r} is UUID: a key must be {names}")
        problem = _key_outside_type(info, value)
        if problem is not None:
            raise InvalidParameterError("keys", value, f"column {column!r} is {info.type}: {problem}")


#: The instants a TIMESTAMP_NS column holds (64-bit nanoseconds since 1970).
_NS_RANGE = (
    datetime.datetime(1677, 9, 21, 0, 12, 43, 145225),
    datetime.datetime(2262, 4, 11, 23, 47, 16, 854775),
)


#: DuckDB's integer types and the values they hold.
_INTEGER_TYPE_RANGES = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INTEGER": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
    "HUGEINT": (-(2**127), 2**127 - 1),
    "UTINYINT": (0, 2**8 - 1),
    "USMALLINT": (0, 2**16 - 1),
    "UINTEGER": (0, 2**32 - 1),
    "UBIGINT": (0, 2**64 - 1),
    "UHUGEINT": (0, 2**128 - 1),
}


def _key_outside_type(info: ColumnInfo, value: Any) -> str | None:
    """Why a key of the right Python type still cannot be compared with the column, or None.

    The engine compares a key and a column in a type holding both; a key that widens it (more
    decimal places than a DECIMAL column, a datetime on a DATE column) makes the engine cast the
    *column* there, which fails on large or far values: after the debit, and only if such a row
    exists. A key past the column type's range fails when the first row reaches it.
    """
    kind = info.type.upper()
    if isinstance(value, str) and not _encodes(value):
        return "a text key must be valid Unicode (it holds a lone surrogate)"
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return "a decimal key must be finite"
        if len(value.as_tuple().digits) > 38:
            return "a decimal key has at most 38 digits"
    if isinstance(value, int) and not -(2**127) < value < 2**127:
        return "an int key must lie strictly between -2**127 and 2**127 (the engines' widest integer)"
    limits = _INTEGER_TYPE_RANGES.get(kind)
    if limits is not None and isinstance(value, int) and not isinstance(value, bool):
        if not limits[0] <= value <= limits[1]:
            return f"an int key must lie in the {kind} column's range [{limits[0]}, {limits[1]}] (no value is outside)"
    decimal_column = kind.startswith(("DECIMAL", "NUMERIC"))
    if isinstance(value, int) and abs(value) >= 2**63 and info.numeric and not info.integer and not decimal_column:
        return "an int key beyond 64 bits cannot be compared with it (write it as a float or a Decimal)"
    if decimal_column and "(" in kind and isinstance(value, int | decimal.Decimal):
        precision, _, scale_text = kind[kind.index("(") + 1 : kind.rindex(")")].partition(",")
        scale = int(scale_text or 0)
        exact = decimal.Decimal(value)
        _, digits, exponent = exact.normalize().as_tuple()
        places = max(0, -int(exponent)) if exact else 0
        whole = max(0, len(digits) + int(exponent)) if exact else 0
        if places > scale or whole > int(precision) - scale:
            return "the key has more decimal places or digits than the type holds (it can be no value of the column)"
    if isinstance(value, datetime.datetime) and int(getattr(value, "nanosecond", 0)):
        if kind != "TIMESTAMP_NS":
            return "the key has nanoseconds, finer than the column holds (only a TIMESTAMP_NS column does)"
        if value.tzinfo is not None:
            return "a key with nanoseconds must be naive (without a time zone), as the column is"
    if kind == "DATE" and isinstance(value, datetime.datetime):
        return "use datetime.date keys (a datetime would make the engine read every date as a timestamp)"
    if kind == "TIMESTAMP_NS" and isinstance(value, datetime.date):
        instant = value if isinstance(value, datetime.datetime) else datetime.datetime.combine(value, datetime.time())
        if instant.tzinfo is not None:
            instant = instant.astimezone(datetime.UTC).replace(tzinfo=None)
        if not _NS_RANGE[0] <= instant <= _NS_RANGE[1]:
            return "a key must lie between 1677-09-21 and 2262-04-11 (the nanosecond timestamp range)"
    if kind in ("TIME", "TIME_NS") and isinstance(value, datetime.time) and value.tzinfo is not None:
        return "use time keys without a time zone"
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _engine_value(info: ColumnInfo, value: Any, floats: bool) -> Any:
    """A public key as the engine compares it with column ``info`` (for finding keys it sees as one).
    A FLOAT (32-bit) column's keys are compared as FLOATs.

    UUID text in any case is one UUID; on a DATE or TIMESTAMP column a date is its midnight, a
    time is cut to the microsecond, and a naive and an aware time are compared in UTC (the
    session's zone); a DOUBLE or FLOAT key is a double (2**53 + 1 is 2.0**53); a DECIMAL key is
    compared as a double when some key of the column is a float, else exactly.
    """
    import uuid as uuid_module

    kind = info.type.upper()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return canonical(value)
    if kind == "UUID":
        return uuid_module.UUID(str(value))
    if kind.startswith(("TIMESTAMP", "DATE")) and isinstance(value, datetime.date):
        if not isinstance(value, datetime.datetime):
            return datetime.datetime.combine(value, datetime.time())
        if kind == "TIMESTAMP_NS":  # nanoseconds kept: a key is its instant in ns since 1970 (UTC)
            import pandas as pd

            instant = pd.Timestamp(value)
            return (instant.tz_convert("UTC").tz_localize(None) if instant.tzinfo is not None else instant).value
        to_python = getattr(value, "to_pydatetime", None)  # (a pandas Timestamp: nanoseconds cut)
        if to_python is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = to_python()
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC).replace(tzinfo=None)
        return value
    if kind in ("FLOAT", "REAL", "FLOAT4") and isinstance(value, float | int):
        return float(np.float32(value))  # (keys of a FLOAT column are FLOATs: see _key_list)
    if kind.startswith(("DOUBLE", "FLOAT", "REAL")) and isinstance(value, float | int):
        return float(value)
    if kind.startswith("DECIMAL") and isinstance(value, decimal.Decimal | float | int):
        return float(value) if floats else decimal.Decimal(value)
    return value


def _check_key_collisions(query: Query, infos: list[ColumnInfo]) -> None:
    """Refuse two public keys the engine sees as one value (a row would join both: counted twice)."""
    if query.keys is None:
        return
    floats = [any(isinstance(key[i], float) for key in query.keys) for i in range(len(infos))]
    first: dict[Any, Any] = {}
    for key in distinct(list(query.keys)):
        seen = tuple(_engine_value(info, v, f) for info, v, f in zip(infos, key, floats, strict=True))
        if seen in first:
            columns = ", ".join(repr(info.name) for info in infos)
            raise InvalidParameterError(
                "keys",
                [first[seen], key] if len(infos) > 1 else [first[seen][0], key[0]],
                f"the engine compares these as one value of {columns}: give each key once",
            )
        first[seen] = key


def _schema_spelling(query: Query, context: CompileContext) -> Query:
    """``query`` with its group, aggregate and join columns spelled as the schema spells them
    (``SUM(income)`` on a column ``Income``), so that bounds, keys and results use one name."""
    table = spelling_resolver(list(context.public_tables))
    names = list(context.columns)
    joins = []
    for join in query.joins:
        # A join column is spelled as the tables joined before it spell it (the private table or
        # an earlier lookup); a lookup's columns equal to earlier ones without case add no spelling
        # (as join keys they are one column; otherwise they are ambiguous, see _check_columns).
        earlier = spelling_resolver(names)
        joins.append(Join(table(join.table), tuple(earlier(c) for c in join.on)))
        folded = {n.casefold() for n in names}
        names += [n for n in context.public_tables.get(table(join.table), {}) if n.casefold() not in folded]
    folded = {n.casefold() for n in names}
    names += [d.name for d in query.derived if d.name.casefold() not in folded]
    resolve = spelling_resolver(names)
    return dataclasses.replace(
        query,
        joins=tuple(joins),
        group_by=tuple(Bin(resolve(g.column), g.edges) if isinstance(g, Bin) else resolve(g) for g in query.group_by),
        aggregates=tuple(
            (name, a if a.column is None else dataclasses.replace(a, column=resolve(a.column)))
            for name, a in query.aggregates
        ),
    )


def _check_output_names(query: Query) -> None:
    """Every released column must have its own name: ``COUNT(*) AS n, SUM(x) AS n_low`` would
    overwrite the count's lower end with the sum (and a group column named like an aggregate, its keys)."""
    owners: dict[str, str] = {group: f"the group column {group!r}" for group in query.group_names}
    for name, aggregate in query.aggregates:
        for column in output_columns(name, aggregate):
            if column in owners:
                raise InvalidParameterError(
                    "aggregates",
                    name,
                    f"its result column {column!r} is also {owners[column]}; give the aggregates names "
                    "whose columns (name, name_low, name_high; name_p50, ... for several quantiles) differ",
                )
            owners[column] = f"a result column of aggregate {name!r}"


def _check_arrangement(query: Query) -> Query:
    """HAVING and ORDER BY name result columns (matched without case where that is unambiguous, as
    the group columns are); LIMIT and OFFSET are whole numbers. Checked before any debit; HAVING
    becomes canonical DuckDB text with every column quoted (``keep_rows`` evaluates it)."""
    released = query.result_columns

    def resolve(parameter: str, name: str) -> str:
        alike = [c for c in released if c.casefold() == name.casefold()]
        column = name if name in released else alike[0] if len(alike) == 1 else None
        if column is None:
            raise InvalidParameterError(
                parameter, name, f"must be a result column of this query: {', '.join(released)}"
            )
        return column

    having = tuple(_having_text(condition, resolve) for condition in query.having)
    orders = []
    for order in query.order_by:
        if not isinstance(order, OrderBy):
            raise InvalidParameterError("order_by", order, "must be a dpkit.engine.OrderBy")
        orders.append(dataclasses.replace(order, column=resolve("order_by", order.column)))
    if query.limit is not None:
        check_integer("limit", query.limit, minimum=0)
    check_integer("offset", query.offset, minimum=0)
    return dataclasses.replace(query, having=having, order_by=tuple(orders))


def _having_text(condition: object, resolve: Callable[[str, str], str]) -> str:
    """One HAVING condition as canonical DuckDB text over result columns (quoted), or a typed error.

    It keeps to the filters' rules (:func:`~dpkit.engine._builder.normalise_condition`): no
    aggregates, windows or subqueries, and only the allowlisted functions (nothing that reads
    files, settings or the environment)."""
    import sqlglot
    from sqlglot import exp

    from dpkit.engine._builder import normalise_condition

    try:
        text = normalise_condition(condition)
    except InvalidParameterError as error:
        reason = error.allowed.split("): a function")[0].replace("a filter", "HAVING")
        reason = reason.replace("in WHERE", "in HAVING (in SQL, HAVING may repeat an aggregate of the SELECT list)")
        raise InvalidParameterError(
            "having", condition, reason + (")" if "): a function" in error.allowed else "")
        ) from None
    tree = sqlglot.parse_one(text, read="duckdb")

    def quote(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column):
            if node.table or not isinstance(node.this, exp.Identifier):
                raise InvalidParameterError("having", node.sql(dialect="duckdb"), "must name a result column")
            return exp.column(resolve("having", node.name), quoted=True)
        return node

    return tree.transform(quote).sql(dialect="duckdb")


def _floating(column: ColumnInfo | None) -> bool:
    """Whether ``column`` is of a floating type (FLOAT or DOUBLE: numeric, neither integer nor DECIMAL)."""
    return (
        column is not None and column.numeric and not column.integer and not column.type.lower().startswith("decimal")
    )


def _check_person_for_group_choice(context: CompileContext, query: Query, groups_per_person: int) -> None:
    """Refuse a person column whose text is not one per person where groups per person are bounded.

    A person in more groups than allowed keeps groups in an order hashed from the person's text
    (``AggregationPlan.person_kind``). The engines group a list or struct holding 0.0 and -0.0, or
    the intervals '1 month' and '30 days', as one person, but write either text, whichever row they
    read first: the person's choice could then move with other people's rows.
    """
    if not chooses_groups(context.privacy_unit, query.group_by, query.keys, groups_per_person):
        return
    column = context.columns.get(context.privacy_unit or "")
    kind = "" if column is None else str(column.type).upper()
    if kind.endswith("]") or kind.startswith(("STRUCT", "MAP", "UNION", "INTERVAL", "ARRAY")):
        raise InvalidParameterError(
            "privacy_unit",
            context.privacy_unit,
            f"is a {column.type if column else kind} column: a person in several groups keeps groups chosen by a "
            "hash of the person's text, which this type does not have one of per person; use a scalar id "
            "(integer, text, date...), or public keys with groups_per_person at least their number",
        )


def _person_kind(column: ColumnInfo | None) -> str:
    """How the group choice hashes a person (``AggregationPlan.person_kind``): "integer", "float" or "text"."""
    if column is not None and (column.integer or decimal_scale(column.type) == 0):
        return "integer"
    return "float" if _floating(column) else "text"


def _check_columns(
    query: Query, context: CompileContext
) -> tuple[dict[str, ColumnInfo], tuple[Derived, ...], tuple[str, ...]]:
    """The columns the query may read (the table's, its lookups' and its derived ones), every name it
    uses checked against them, and the derived columns to compute with their types (``_check_derived``)."""
    available = dict(context.columns)
    # Column names compared without case, as DuckDB and Spark compare identifiers.
    ambiguous: dict[str, str] = {}  # case-folded column -> "'t1' and the lookup table 't2'" sharing it
    owner = {name.casefold(): context.table for name in available}  # case-folded column -> its first table
    joined: set[str] = set()
    for join in query.joins:
        if join.table not in context.public_tables:
            raise InvalidParameterError(
                "join", join.table, f"must be a public lookup table; registered: {sorted(context.public_tables)}"
            )
        if join.table.casefold() in joined:
            raise InvalidParameterError("join", join.table, "a public table may be joined once")
        joined.add(join.table.casefold())
        lookup = context.public_tables[join.table]
        theirs_spelling = spelling_resolver(list(lookup))
        if len({c.casefold() for c in join.on}) < len(join.on):
            raise InvalidParameterError("on", list(join.on), "names a column twice")
        for column in join.on:
            if column.casefold() in ambiguous:
                raise InvalidParameterError(
                    "on",
                    column,
                    f"is a column of both {ambiguous[column.casefold()]}; rename it in the lookup table",
                )
            if column not in available or theirs_spelling(column) not in lookup:
                raise InvalidParameterError(
                    "on", column, f"must be a column of both {context.table!r} and {join.table!r}"
                )
            ours, theirs = available[column].type, lookup[theirs_spelling(column)].type
            if ours.lower() != theirs.lower():
                # The engine would insert a cast outside the filter's TRY: a private value that
                # fails it would make the query fail, revealing that row.
                raise InvalidParameterError(
                    "on",
                    column,
                    f"is {ours} in {context.table!r} but {theirs} in {join.table!r}: a join needs the same "
                    "type on both sides (cast the lookup table's column)",
                )
        folded = {name.casefold() for name in available}
        keys = {column.casefold() for column in join.on}
        for name, info in lookup.items():
            if name.casefold() in keys:
                continue  # (the join column: one column after USING)
            if name.casefold() in folded:
                ambiguous[name.casefold()] = f"{owner[name.casefold()]!r} and the lookup table {join.table!r}"
            owner.setdefault(name.casefold(), join.table)
            available.setdefault(name, info)

    def need(column: str, what: str) -> ColumnInfo:
        column = spelling_resolver(list(available))(column)
        if column.casefold() in ambiguous:
            raise InvalidParameterError(
                what,
                column,
                f"is a column of both {ambiguous[column.casefold()]}; rename it in the lookup table",
            )
        if column not in available:
            raise InvalidParameterError(what, column, f"unknown column; available: {', '.join(sorted(available))}")
        return available[column]

    derived, derived_types = _check_derived(query, context, available, need)
    for condition in query.where:  # (after the derived columns, which a filter may read)
        import sqlglot
        from sqlglot import exp

        from dpkit.engine._builder import check_filter_types

        # ``condition`` is already canonical and allowlisted (compile_query normalised it).
        tree = sqlglot.parse_one(condition, read="duckdb")
        for reference in tree.find_all(exp.Column):
            need(reference.name, "where")
        check_filter_types(tree, condition, _type_names(available))
    infos: list[ColumnInfo] = []
    for position, group in enumerate(query.group_by):
        info = need(group.column if isinstance(group, Bin) else group, "group_by")
        if any(marker in info.type.upper() for marker in ("STRUCT", "MAP", "[]", "LIST", "ARRAY", "UNION")):
            raise InvalidParameterError(
                "group_by", info.name, f"is {info.type}: group by scalar columns (numbers, text, dates, booleans)"
            )
        if isinstance(group, Bin) and not info.numeric:
            raise InvalidParameterError("bins", group.column, f"binning needs a numeric column; it is {info.type}")
        if isinstance(group, Bin) and query.keys is not None:
            for key in query.keys:  # (any other key would be compared with the bins' text labels)
                if not (isinstance(key[position], str) and key[position] in group.labels):
                    raise InvalidParameterError(
                        "keys",
                        key[position],
                        f"a key of the binned column {group.name!r} is one of its labels {list(group.labels)} "
                        "(a value in no bin, NULL included, is dropped: there is no NULL bin)",
                    )
        if not isinstance(group, Bin) and query.keys is not None:
            _check_key_types(group, info, [key[position] for key in query.keys])
        infos.append(info)
    if query.keys is not None:
        _check_key_collisions(query, infos)
    for name, aggregate in query.aggregates:
        if aggregate.column is not None:
            info = need(aggregate.column, name)
            if aggregate.kind in NUMERIC_KINDS and not info.numeric:
                raise InvalidParameterError(
                    name,
                    aggregate.column,
                    f"{aggregate.kind} needs a numeric column; {aggregate.column!r} is {info.type}",
                )
    if context.privacy_unit is not None:
        need(context.privacy_unit, "privacy_unit")
        grouped = {g.casefold() for g in query.group_by if isinstance(g, str)}
        if context.privacy_unit.casefold() in grouped:
            raise InvalidParameterError(
                "group_by", context.privacy_unit, "grouping by the privacy unit would release each person"
            )
    return available, derived, derived_types


def _type_names(columns: Mapping[str, ColumnInfo]) -> dict[str, str]:
    """Each column's type name, keyed by its spelling and its case-folded one (a filter may write D for
    column d): what :func:`~dpkit.engine._builder.check_filter_types` reads."""
    types = {name: info.type for name, info in columns.items()}
    types.update({name.casefold(): info.type for name, info in columns.items() if name.casefold() not in types})
    return types


def _check_derived(
    query: Query, context: CompileContext, available: dict[str, ColumnInfo], need: Callable[[str, str], ColumnInfo]
) -> tuple[tuple[Derived, ...], tuple[str, ...]]:
    """Check and type the query's derived columns, add them to ``available`` (the columns of the table
    and its lookups), and return them with the 0/1 column of each ``count(column)`` and their types.

    A derived column's name is new (no column of the tables, no other derived column) and its
    expression reads the tables' columns and the derived columns defined before it, without date
    and time arithmetic (as a filter). Its type comes from the backend binding the expressions (no
    rows read); ``source_sql`` computes them in layers, each reading the ones before.
    """
    import sqlglot
    from sqlglot import exp

    from dpkit.engine._aggregation import _quote
    from dpkit.engine._builder import check_filter_types

    types = _type_names(available)
    taken = {name.casefold() for name in available}
    for column in query.derived:  # (every name first: an expression's reference is then unambiguous)
        if column.name.casefold() in taken:
            other = "a column of the tables" if column.name.casefold() in types else "another derived column's name"
            raise InvalidParameterError(
                "derived", column.name, f"names a derived column, but it is also {other}; choose a new name"
            )
        taken.add(column.name.casefold())
    names = {d.name.casefold(): d.name for d in query.derived}
    defined: set[str] = set()  # case-folded names of the derived columns checked so far
    unchecked = []  # (column, tree) of those reading derived columns: type-checked once these are typed
    for column in query.derived:
        tree = sqlglot.parse_one(column.expression, read="duckdb")  # (canonical and allowlisted already)
        reads_derived = False
        for reference in tree.find_all(exp.Column):
            folded = reference.name.casefold()
            if folded in defined:
                reads_derived = True
            elif folded in names:
                where = "itself" if folded == column.name.casefold() else f"{names[folded]!r}, defined after it"
                raise InvalidParameterError(
                    column.name,
                    reference.name,
                    f"a derived column reads the tables' columns and the derived columns defined before it, "
                    f"not {where}",
                )
            else:
                need(reference.name, column.name)
        defined.add(column.name.casefold())
        if reads_derived:
            unchecked.append((column, tree))
        else:
            check_filter_types(tree, column.expression, types, parameter=column.name)
    # count(column): a 0/1 column, 1 where the column (stored or derived) is not NULL.
    indicators: dict[str, Derived] = {}
    for _, aggregate in query.aggregates:
        if aggregate.kind != "count" or aggregate.column is None:
            continue
        counted = aggregate.column if aggregate.column.casefold() in names else need(aggregate.column, "count").name
        name = nonnull_column(aggregate.column)
        if name.casefold() in taken and name not in indicators:
            raise InvalidParameterError(
                "count", aggregate.column, f"the name {name!r} of its 0/1 column is taken; rename it"
            )
        taken.add(name.casefold())
        indicators[name] = Derived(name, f"CASE WHEN {_quote(counted)} IS NULL THEN 0 ELSE 1 END")
    derived = (*query.derived, *indicators.values())
    if not derived:
        return (), ()
    if context.derived_schema is None:
        raise InvalidParameterError("derived", [d.name for d in derived], "this session cannot type derived columns")
    described = context.derived_schema(query.table, query.joins, derived)
    for column in query.derived:
        available[column.name] = described[column.name]
    types = _type_names(available)
    for column, tree in unchecked:
        check_filter_types(tree, column.expression, types, parameter=column.name)
    return derived, tuple(described[d.name].type for d in derived)


def compile_query(
    query: Query, context: CompileContext, request: Request, *, bounds: Mapping[str, Any] | None = None
) -> CompiledQuery:
    """Make ``query`` private under ``request`` (see the module docstring); no data is read."""
    if not query.aggregates:
        raise InvalidParameterError("aggregates", (), "the query has no aggregates; add .agg(...) or SELECT one")
    if query.table != context.table:
        raise InvalidParameterError("table", query.table, f"this session's private table is {context.table!r}")
    # Every filter is checked here (the allowlist), also a hand-built Query's, and the backend runs
    # its canonical text (as sqlglot read and checked it), never the raw text.
    from dpkit.engine._builder import normalise_condition, normalise_expression

    query = dataclasses.replace(
        query,
        where=tuple(normalise_condition(w) for w in query.where),
        derived=tuple(Derived(d.name, normalise_expression(d.expression)) for d in query.derived),
    )
    query = _schema_spelling(query, context)
    _check_output_names(query)
    query = _check_arrangement(query)
    available, derived, derived_types = _check_columns(query, context)
    float_groups = frozenset(g for g in query.group_by if isinstance(g, str) and _floating(available[g]))
    real_groups = frozenset(g for g in float_groups if available[g].type.upper() in ("FLOAT", "REAL", "FLOAT4"))
    contribution = query.contribution or context.contribution
    if context.privacy_unit is None and (contribution.rows_per_group, contribution.groups_per_person) != (1, 1):
        if query.contribution is not None:
            raise InvalidParameterError(
                "contribution", contribution, "with row-level privacy (privacy_unit=None) each person is one row"
            )
        contribution = Contribution(1, 1)
    groups_bound = contribution.groups_per_person
    if query.keys is not None:
        groups_bound = min(groups_bound, len(query.keys))
    if not query.group_by:
        groups_bound = 1
    _check_person_for_group_choice(context, query, contribution.groups_per_person)

    # Bounds: the aggregate's own, then the call's, then the session's.
    if bounds is not None and not isinstance(bounds, Mapping):
        raise InvalidParameterError("bounds", bounds, "must be a mapping column -> (low, high) or 'auto'")
    # Keyed without case (column names match without case): the call's bounds replace the
    # session's for the same column however either spells it.
    call = check_bounds_mapping(bounds or {})
    merged: dict[str, tuple[str, tuple[float, float] | str]] = {}
    for origin in (check_bounds_mapping(context.bounds), call):
        for column, pair in origin.items():
            merged[column.casefold()] = (column, pair)
    known = {name.casefold() for name in context.columns}
    known.update(name.casefold() for table in context.public_tables.values() for name in table)
    known.update(d.name.casefold() for d in query.derived)
    # The session's bounds may name derived columns of other queries: one naming no column here
    # is only listed when a column lacks bounds. The call's bounds are for this query's columns.
    unused = sorted(column for key, (column, _) in merged.items() if key not in known)
    for column in call:
        if column.casefold() not in known:  # a misspelt name would leave its column unbounded
            raise InvalidParameterError(
                "bounds",
                column,
                f"is not a column of {context.table!r}, of a public table or a derived column of this query; columns: "
                f"{', '.join(sorted(context.columns))}",
            )
    resolved: dict[str, tuple[float, float] | str] = {}
    for name, aggregate in query.aggregates:
        if aggregate.kind == "count" and aggregate.column is not None:
            resolved[nonnull_column(aggregate.column)] = (0.0, 1.0)
        if aggregate.kind not in NUMERIC_KINDS or aggregate.column is None:
            continue
        value = (
            aggregate.bounds
            if aggregate.bounds is not None
            else merged.get(aggregate.column.casefold(), (aggregate.column, None))[1]
        )
        if value is None:
            raise InvalidParameterError(
                "bounds",
                aggregate.column,
                f"column {aggregate.column!r} (aggregate {name!r}) needs clamping bounds: pass "
                f"bounds={{{aggregate.column!r}: (low, high)}}, or {{{aggregate.column!r}: 'auto'}} "
                "to estimate them privately (charged)"
                + (f"; the session's bounds name no column of this query: {', '.join(unused)}" if unused else ""),
            )
        previous = resolved.get(aggregate.column)
        if previous is not None and previous != value:
            raise InvalidParameterError(
                "bounds", aggregate.column, f"two different bounds given: {previous} and {value}"
            )
        resolved[aggregate.column] = value

    # Statistics and weights: an aggregate's weight is shared among the statistics it needs.
    weights: dict[str, float] = {}
    for _, aggregate in query.aggregates:
        keys = _statistics_for(aggregate, context.privacy_unit)
        for key in keys:
            weights[key] = weights.get(key, 0.0) + aggregate.weight / len(keys)
    for column, value in resolved.items():
        if value == AUTO:
            weights[f"auto:{column}"] = 1.0
    selection = not query.public_keys
    selection_key = "persons"
    if request.accuracy is not None and (selection or any(v == AUTO for v in resolved.values())):
        raise InvalidParameterError(
            "accuracy", request.accuracy, "accuracy targets need public keys and explicit bounds"
        )
    if selection:
        if isinstance(context.budget, ZCDP) or request.delta == 0:
            raise InvalidParameterError(
                "delta",
                float(request.delta),
                "private group keys are selected with thresholded partition selection, which needs an "
                "ApproxDP(epsilon, delta) or ApproxZCDP(rho, delta) budget and delta > 0, e.g. delta=1e-6 "
                "(dpkit query: --delta 1e-6); "
                "or give the public keys (keys=...; dpkit query: --keys COL=V1,V2)",
            )
        if "rows" in weights and "persons" not in weights:
            selection_key = "rows"  # threshold the released COUNT itself: no separate share
        else:
            weights.setdefault("persons", 1.0)
    # The sums of count(column)'s 0/1 columns, each with the column it counts (for its label).
    counted = {
        f"sum:{nonnull_column(a.column)}": a.column for _, a in query.aggregates if a.kind == "count" and a.column
    }
    statistics = tuple(
        Statistic(key, key.split(":")[1] if ":" in key else None, w, counted.get(key)) for key, w in weights.items()
    )

    shares, selection_epsilon, gaussian_delta, selection_delta, cost = _allocate(
        statistics, query, context, request, selection, contribution, groups_bound, resolved, selection_key
    )
    compiled = CompiledQuery(
        query=query,
        request=request,
        person=context.privacy_unit,
        contribution=contribution,
        groups_bound=groups_bound,
        bounds=resolved,
        statistics=statistics,
        shares=shares,
        selection_epsilon=selection_epsilon,
        selection_delta=selection_delta,
        gaussian_delta=gaussian_delta,
        cost=cost,
        selection_key=selection_key,
        float_groups=float_groups,
        real_groups=real_groups,
        person_kind=_person_kind(context.columns.get(context.privacy_unit or "")),
        # Every group column's type; a binned column holds text labels.
        group_types={
            g.name if isinstance(g, Bin) else g: "VARCHAR" if isinstance(g, Bin) else available[g].type
            for g in query.group_by
        },
        derived=derived,
        derived_types=derived_types,
    )
    compiled.verify()
    return compiled


def _allocate(
    statistics: tuple[Statistic, ...],
    query: Query,
    context: CompileContext,
    request: Request,
    selection: bool,
    contribution: Contribution,
    groups_bound: int,
    resolved: Mapping[str, tuple[float, float] | str],
    selection_key: str = "persons",
) -> tuple[dict[str, Fraction], Fraction | None, Fraction, Fraction, Guarantee]:
    relation = context.budget.neighbours
    total_weight = sum((as_fraction(s.weight) for s in statistics), Fraction(0))  # exact: shares sum to 1
    if request.accuracy is not None:
        shares = _accuracy_shares(statistics, query, request, contribution, groups_bound, resolved)
        epsilon = sum(shares.values(), Fraction(0))
        warn_if_risky(float(epsilon))  # the epsilon the accuracy target asked for
        cost: Guarantee = PureDP(epsilon, relation)  # type: ignore[arg-type]
        if isinstance(context.budget, ApproxDP):
            cost = ApproxDP(epsilon, Fraction(0), relation)  # type: ignore[arg-type]
        return shares, None, Fraction(0), Fraction(0), cost
    fractions = {s.key: as_fraction(s.weight) / total_weight for s in statistics}
    if request.mode == "laplace":
        eps = request.epsilon or Fraction(0)
        shares = {key: eps * f for key, f in fractions.items()}
        selection_epsilon = shares[selection_key] if selection else None
        # Laplace noise is pure DP: delta pays for private key selection only, and is not
        # charged when the keys are public (the query then costs (epsilon, 0)).
        selection_delta = request.delta if selection else Fraction(0)
        if isinstance(context.budget, PureDP | ZCDP) or (isinstance(context.budget, ApproxZCDP) and not selection):
            cost = PureDP(eps, relation)  # type: ignore[arg-type]  # (a zCDP ledger charges eps^2 / 2)
        elif isinstance(context.budget, ApproxZCDP):
            # Thresholded selection with Laplace noise is delta-approximately (eps^2 / 2)-zCDP: outside
            # the event (probability <= delta) that a group of the added person alone is released,
            # the release is the pure eps-DP one (its other groups' noise is independent of that event).
            cost = ApproxZCDP(PureDP(eps).to_zcdp().rho_exact, selection_delta, relation)  # type: ignore[arg-type]
        else:
            cost = ApproxDP(eps, selection_delta, relation)  # type: ignore[arg-type]
        return shares, selection_epsilon, Fraction(0), selection_delta, cost
    if isinstance(context.budget, ZCDP):
        rho = request.rho or Fraction(0)
        return {key: rho * f for key, f in fractions.items()}, None, Fraction(0), Fraction(0), ZCDP(rho, relation)  # type: ignore[arg-type]
    if isinstance(context.budget, ApproxZCDP):
        # Approximate zCDP: the statistics (the selecting count among them) share rho, and delta
        # pays only for key selection; no per-query conversion to (epsilon, delta).
        rho = request.rho or Fraction(0)
        shares = {key: rho * f for key, f in fractions.items()}
        selection_delta = request.delta if selection else Fraction(0)
        cost = ApproxZCDP(rho, selection_delta, relation)  # type: ignore[arg-type]
        return shares, Fraction(0) if selection else None, Fraction(0), selection_delta, cost
    # Gaussian noise under an (epsilon, delta) budget: the statistics compose in zCDP (tight), and
    # the total rho is converted once at half the delta; partition selection adds the other half.
    # The selecting count (the released COUNT of rows, or the count of people, released or not) is
    # one of those statistics, with discrete Gaussian noise: no pure-DP share.
    eps = request.epsilon or Fraction(0)
    selection_epsilon = Fraction(0) if selection else None
    selection_delta = request.delta / 2 if selection else Fraction(0)
    gaussian_delta = request.delta - selection_delta
    rho_total = _rho_for(eps, gaussian_delta)
    shares = {key: rho_total * f for key, f in fractions.items()}
    return shares, selection_epsilon, gaussian_delta, selection_delta, ApproxDP(eps, request.delta, relation)  # type: ignore[arg-type]


def _rho_for(epsilon: Fraction, delta: Fraction) -> Fraction:
    """Largest rho (found by bisection, rounded down) whose zCDP implies (epsilon, delta)-DP."""
    rho = largest_rho(lambda r: ZCDP(r).to_approx(float(delta)).epsilon_exact <= epsilon, float(epsilon))
    if rho is None:
        raise InvalidParameterError("epsilon", float(epsilon), "is too small for Gaussian noise at this delta")
    return rho


_KIND_NAMES = {"mean": "mean (AVG)", "variance": "variance", "stddev": "standard deviation", "quantiles": "quantile"}


def _accuracy_shares(
    statistics: tuple[Statistic, ...],
    query: Query,
    request: Request,
    contribution: Contribution,
    groups_bound: int,
    resolved: Mapping[str, tuple[float, float] | str],
) -> dict[str, Fraction]:
    targets = request.accuracy
    shares: dict[str, Fraction] = {}
    by_statistic: dict[str, tuple[str, float]] = {}
    if isinstance(targets, dict):
        unknown = sorted(set(targets) - {name for name, _ in query.aggregates})
        if unknown:
            names = ", ".join(name for name, _ in query.aggregates)
            raise InvalidParameterError("accuracy", targets, f"names no aggregate: {unknown} (aggregates: {names})")
    for name, aggregate in query.aggregates:
        if aggregate.kind not in ("count", "count_distinct", "sum"):
            raise InvalidParameterError(
                "accuracy",
                targets,
                f"accuracy targets apply to queries of counts and sums only, whose noise does not depend on "
                f"the data; this query's {name!r} is a {_KIND_NAMES.get(aggregate.kind, aggregate.kind)}, "
                "whose interval does: give epsilon= instead, or ask for its SUM and COUNT with targets and divide",
            )
        target = targets.get(name) if isinstance(targets, dict) else targets
        if target is None:
            raise InvalidParameterError("accuracy", targets, f"give a target for {name!r}")
        key = _statistics_for(aggregate, None)[0]
        previous = by_statistic.get(key)
        by_statistic[key] = (name, target if previous is None else min(previous[1], target))
    for key, (name, target) in by_statistic.items():
        try:
            shares[key] = _accuracy_epsilon(key, target, query, request, contribution, groups_bound, resolved)
        except (OverflowError, ValueError) as error:  # (InvalidParameterError included: about epsilon)
            raise InvalidParameterError(
                "accuracy", target, f"cannot be met for {name!r}: no epsilon gives that noise ({error})"
            ) from None
    return shares


def _accuracy_epsilon(
    key: str,
    target: float,
    query: Query,
    request: Request,
    contribution: Contribution,
    groups_bound: int,
    resolved: Mapping[str, tuple[float, float] | str],
) -> Fraction:
    """The epsilon of statistic ``key`` whose noise interval is ``target`` wide (Laplace)."""
    dimension = len(query.keys) if query.keys is not None else 1
    k, g = contribution.rows_per_group, groups_bound
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        if key in ("rows", "persons"):
            sensitivity = g * (k if key == "rows" else 1)
            epsilon = DiscreteLaplace.from_accuracy(sensitivity, target, request.alpha).epsilon
        else:
            column = key.split(":")[1]
            given = resolved[column]
            if not isinstance(given, tuple):  # pragma: no cover - refused above
                raise InternalError("accuracy targets need explicit bounds")
            low, high = given
            stub = CompiledQuery(
                query,
                request,
                None,
                contribution,
                groups_bound,
                resolved,
                (),
                {},
                None,
                Fraction(0),
                Fraction(0),
                PureDP(1),
            )
            l1, _ = stub.sensitivity(Statistic(key, column, 1.0), (low, high))
            epsilon = Laplace.from_accuracy(l1, target, request.alpha, dimension=dimension).epsilon
    return as_fraction(epsilon)


def _plan(compiled: CompiledQuery, salt: str, **fields: Any) -> AggregationPlan:
    """The backend plan of ``compiled``'s query and contribution limits, with ``fields`` replaced."""
    query = compiled.query
    base: dict[str, Any] = {
        "table": query.table,
        "joins": query.joins,
        "where": query.where,
        "groups": query.group_by,
        "keys": query.keys,
        "person": compiled.person,
        "rows_per_group": compiled.contribution.rows_per_group,
        "groups_per_person": compiled.contribution.groups_per_person,
        "salt": salt,
        "float_groups": compiled.float_groups,
        "real_groups": compiled.real_groups,
        "person_kind": compiled.person_kind,
        "derived": compiled.derived,
        "derived_types": compiled.derived_types,
    }
    return AggregationPlan(**(base | fields))


def aggregation_plan(compiled: CompiledQuery, bounds: Mapping[str, tuple[float, float]], salt: str) -> AggregationPlan:
    """The backend plan for all moment statistics of ``compiled`` (rows and persons always come along)."""
    moments = tuple(
        compiled.moment(s, bounds[s.column or ""]) for s in compiled.statistics if s.kind in ("sum", "csum", "csq")
    )
    return _plan(compiled, salt, moments=moments)


def histogram_plan(
    compiled: CompiledQuery, statistic: Statistic, bounds: tuple[float, float] | None, salt: str
) -> AggregationPlan:
    """The backend plan of a quantile histogram (``hist``) or of automatic bounds (``auto``, ungrouped)."""
    column = statistic.column or ""
    if statistic.kind == "auto":
        histogram = Histogram(statistic.key, column, 0.0, 1.0, 2 * _LOG2_BINS + 1, 0.0, log2=True)
        # k rows in each of the groups_bound groups a person can reach (1 without GROUP BY): the
        # cap in the SQL is the sensitivity of CompiledQuery._k_g.
        return _plan(
            compiled,
            salt,
            groups=(),
            keys=None,
            rows_per_group=compiled.contribution.rows_per_group * compiled.groups_bound,
            groups_per_person=1,
            histogram=histogram,
        )
    if bounds is None:  # pragma: no cover - guarded by callers
        raise InternalError("histogram needs bounds")
    low, high = bounds
    histogram = Histogram(statistic.key, column, low, high, QUANTILE_BINS, min(max(0.0, low), high))
    return _plan(compiled, salt, histogram=histogram)


def log2_candidates() -> tuple[list[int], list[float]]:
    """Ordered signed log2 bins and the split value after each (candidates for automatic bounds)."""
    order = list(range(-_LOG2_BINS, _LOG2_BINS + 1))
    splits = []
    for b in order:
        if b < 0:
            splits.append(-math.ldexp(1.0, -b - 41))
        elif b == 0:
            splits.append(0.0)
        else:
            splits.append(math.ldexp(1.0, b - 40))
    return order, splits
