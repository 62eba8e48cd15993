"""Frequency oracles: epsilon-local-DP randomizers over k categories with unbiased count estimators.

Every oracle here is a "pure" protocol (Wang, Blocki, Li & Jha 2017, "Locally differentially
private protocols for frequency estimation", USENIX Security, Sec. 3): a report y *supports* a
set of categories, a person holding v supports v with probability p and any other category u
with probability q < p, so with C_v the number of reports supporting v among n,

    c_v = (C_v - n q) / (p - q)

is an unbiased estimate of the number of people holding v, and (Wang et al. 2017, Eq. 2)

    Var[c_v] = n q (1 - q) / (p - q)^2 + n_v (1 - p - q) / (p - q)   (n_v = true count).

``variance(n)`` returns the first term, the variance of a *count* whose true value is 0 (the
published formulas; divide by n^2 for a frequency: ``frequency_variance(n)``);
``variance(n, true_count)`` the exact one.

Every random draw is exact (:mod:`dpkit.noise` and
:func:`dpkit.mechanisms.randomized_response.bernoulli_keep`), so each report's law is exactly
the one :meth:`transition_matrix` lists, whose column ratios are at most e^eps: eps-LDP, i.e.
``PureDP(eps, REPLACE_ONE)`` for one person's report.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_integer, check_probability
from dpkit.local._randomizer import LocalRandomizer
from dpkit.mechanisms.randomized_response import RandomizedResponse, bernoulli_keep
from dpkit.noise import RandomSource, resolve_source, uniform_integers

__all__ = ["KRR", "OLH", "OUE", "SUE", "FrequencyOracle", "HadamardResponse", "LocalReports", "fast_walsh_hadamard"]


@dataclass(frozen=True, eq=False)
class LocalReports:
    """The reports of n people, tagged with the oracle and parameters that produced them.

    ``data`` holds one row per person: category indices (k-RR, Hadamard response), bit vectors
    (unary encodings) or (a, b, bucket) triples (OLH). Estimators refuse reports whose tag differs,
    and reports whose data lie outside the oracle's output domain (a forged or corrupted message is
    refused with :class:`dpkit.InvalidParameterError`, never decoded into a wrong count).
    """

    oracle: str
    parameters: tuple[Any, ...]
    data: NDArray[Any]

    def __post_init__(self) -> None:
        # Reports built by a collector from received messages may arrive as lists; the estimators
        # check their shape and output domain (a forged or corrupted report is refused, not decoded).
        object.__setattr__(self, "data", _as_array("data", self.data, "must be a regular array of reports"))
        if self.data.ndim == 0:
            raise InvalidParameterError("data", self.data, "must hold one report per row, not a scalar")

    def __len__(self) -> int:
        return int(self.data.shape[0])

    @staticmethod
    def concatenate(parts: list[LocalReports]) -> LocalReports:
        """Join report batches of one oracle (for chunked collection)."""
        allowed = "must be a non-empty list of reports of one oracle, with rows of one shape"
        if not parts or not all(isinstance(p, LocalReports) for p in parts):
            raise InvalidParameterError("parts", parts, allowed)
        first = parts[0]
        if any(
            p.oracle != first.oracle or p.parameters != first.parameters or p.data.shape[1:] != first.data.shape[1:]
            for p in parts
        ):
            raise InvalidParameterError("parts", [f"{p.oracle}{p.parameters}{p.data.shape}" for p in parts], allowed)
        return LocalReports(first.oracle, first.parameters, np.concatenate([p.data for p in parts]))


def _as_array(name: str, values: Any, allowed: str) -> NDArray[Any]:
    """np.asarray(values), with a ragged input refused by name instead of numpy's ValueError."""
    try:
        return np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(name, values, allowed) from exc


def _one_value_per_person(name: str, values: Any, allowed: str) -> NDArray[Any]:
    """``values`` as a 1-d array (a scalar is one person; an empty list is an empty batch of integers).

    A 2-d input is refused: read as one report per entry, it would give each person (a row) one
    report per column, each spending the full epsilon.
    """
    array = _as_array(name, values, allowed)
    if array.ndim > 1:
        raise InvalidParameterError(name, values, f"{allowed}, as a scalar or a 1-d array (one value per person)")
    if array.size == 0 and array.dtype.kind == "f":
        return np.zeros(0, dtype=np.int64)
    return array.reshape(-1)


def _check_report_range(data: NDArray[Any], low: Any, high: Any, what: str) -> NDArray[np.int64]:
    """Integer report data with ``low <= data < high`` (per column when low and high are arrays)."""
    allowed = f"must hold {what}"
    if data.dtype.kind not in "iu":
        raise InvalidParameterError("reports", f"data of dtype {data.dtype}", allowed)
    outside = (data < low) | (data >= high)
    if np.any(outside):
        row = int(np.flatnonzero(outside.reshape(data.shape[0], -1).any(axis=1))[0])
        raise InvalidParameterError("reports", f"row {row}: {data[row].tolist()}", allowed)
    return data.astype(np.int64)


def _threshold(alpha: float, n: int) -> float:
    """alpha / 2, less a margin for the rounding of the tail sums (relative 1e-7, and 2^-50 per report)."""
    return alpha / 2 * (1 - 1e-7) - n * 2.0**-50


def _support_tail_bound(m: NDArray[np.int64], c: NDArray[np.int64], n: int, p: float, q: float, *, upper: bool) -> Any:
    """Upper bounds on P(C >= c) (``upper``) or P(C <= c), C ~ Binomial(m, p) + Binomial(n - m, q), per row.

    P(C <= c) is P(n - C >= n - c), n - C ~ Binomial(m, 1 - p) + Binomial(n - m, 1 - q). Then
    P(C >= c) = sum_x P(X = x) P(Y >= c - x), X the summand of smaller variance and Y the other;
    x runs over X's mean +- (7 sd + 8) and P(X outside that window) is added, so the result
    bounds the tail from above whatever the window.
    """
    from scipy import stats

    if not upper:
        return _support_tail_bound(m, n - c, n, 1.0 - p, 1.0 - q, upper=True)
    sd_a = np.sqrt(m * (p * (1 - p)))
    sd_b = np.sqrt((n - m) * (q * (1 - q)))
    by_a = sd_a <= sd_b
    trials = np.where(by_a, m, n - m)
    prob = np.where(by_a, p, q)
    other_trials = n - trials
    other_prob = np.where(by_a, q, p)
    half = np.ceil(7 * np.minimum(sd_a, sd_b) + 8)
    first = np.maximum(0, np.floor(trials * prob - half)).astype(np.int64)
    last = np.minimum(trials, np.ceil(trials * prob + half)).astype(np.int64)
    out = stats.binom.cdf(first - 1, trials, prob) + stats.binom.sf(last, trials, prob)
    # P(Y >= c - x) for x = first + j: P(Y > c - first) plus Y's pmf summed from c - first down.
    base = stats.binom.sf(c - first, other_trials, other_prob)
    order = np.argsort(last - first, kind="stable")  # rows of similar width share a chunk
    widths = (last - first + 1)[order]
    start = 0
    while start < order.size:
        # the widest row of a chunk is its last; at most about 2**16 cells (8 arrays of 512 KiB) per
        # chunk, so the passes over a chunk run in cache (three times faster than 2**20 cells)
        stop = start + max(1, int(np.searchsorted(widths[start:] * np.arange(1, order.size - start + 1), 2**16)))
        rows = order[start:stop]
        width = int(widths[stop - 1])
        offset = np.arange(width)[None, :]
        x = first[rows, None] + offset
        inside = x <= last[rows, None]
        t, r = trials[rows, None], prob[rows, None]
        s, w = other_trials[rows, None], other_prob[rows, None]
        y = c[rows, None] - x  # Y's value for each x: falls by one per step
        with np.errstate(divide="ignore", invalid="ignore"):
            # log pmfs by their ratio recurrences from one exact anchor per row (W terms, not W special
            # function calls); a degenerate probability (0 or 1 in floating point) goes the direct way.
            regular = (r > 0) & (r < 1) & (w > 0) & (w < 1)
            step_x = np.log(np.maximum(t - x + 1, 1)) - np.log(x) + (np.log(r) - np.log1p(-r))
            step_x[:, :1] = 0.0
            log_px = stats.binom.logpmf(first[rows, None], t, r) + np.cumsum(np.where(inside, step_x, 0.0), axis=1)
            anchor = np.clip(y[:, :1], 0, s)
            in_support = (y >= 0) & (y <= s)
            step_y = np.log(y + 1.0) - np.log(s - y) + (np.log1p(-w) - np.log(w))  # log pY(y) - log pY(y + 1)
            step_y = np.where(in_support & (y < anchor), step_y, 0.0)
            log_py = stats.binom.logpmf(anchor, s, w) + np.cumsum(step_y, axis=1)
            py = np.where(in_support & inside, np.exp(log_py), 0.0)
            survival = base[rows, None] + np.cumsum(py, axis=1)
            terms = np.where(inside, np.exp(log_px) * np.minimum(survival, 1.0), 0.0)
            direct = ~regular[:, 0]
            if np.any(direct):
                d = np.flatnonzero(direct)
                exact_px = stats.binom.pmf(x[d], t[d], r[d])
                exact_sy = stats.binom.sf(y[d] - 1, s[d], w[d])
                terms[d] = np.where(inside[d], exact_px * exact_sy, 0.0)
        out[rows] += np.sum(terms, axis=1)
        start = stop
    return out


def _boundary(
    start: NDArray[np.int64],
    end: int,
    guess: NDArray[np.float64],
    spread: NDArray[np.float64],
    tail: Any,
    threshold: float,
) -> NDArray[np.int64]:
    """Per row, the kept m nearest ``end`` before a monotone test starts rejecting, searched from ``start``.

    The test rejects m where ``tail(m, rows)`` (an upper bound on a tail probability, for candidates
    of the given rows at once) is <= ``threshold``, and it rejects every m beyond some boundary in
    the direction of ``end`` (-1 or n + 1, where all is rejected); ``start`` counts as kept. Each
    row keeps its nearest kept and rejected m and probes strictly between them, so a row moves past
    m only once m is kept or a probe beyond it is rejected: the answer (a kept m next to a rejected
    one) is never short of the true boundary when ``tail`` bounds the tail from above, wherever the
    probes fall. They fall where the boundary is expected, to take few tail evaluations: first at
    ``guess`` (a normal approximation), then where the tails seen so far cross the threshold on the
    probit scale -ndtri(tail), nearly linear in m: by the secant once both sides have been seen,
    before that by a step from the one seen (``spread``: the change in m per unit of that scale),
    with an overshoot that doubles each time the step falls short. After two secant probes that
    moved the same side (the secant stalling), or where an end's tail bound is 0 or >= 1 (no
    score), a bisection; so every row ends within O(log n) rounds.
    """
    from scipy.special import ndtri

    sign = 1 if end > 0 else -1
    kept = start.copy()  # not known rejected: the answer is at least this far out
    rejected = np.full(start.shape, end, dtype=np.int64)
    score_kept = np.full(start.shape, np.nan)  # -ndtri(tail) at the two ends, where evaluated
    score_rejected = np.full(start.shape, np.nan)
    target = float(-ndtri(threshold))
    overshoot = np.ones(start.shape)
    streak = np.zeros(start.shape, dtype=np.int64)  # secant probes in a row that moved the same side
    last_side = np.zeros(start.shape, dtype=bool)
    while True:
        rows = np.flatnonzero(sign * (rejected - kept) > 1)
        if rows.size == 0:
            return kept
        near, far = kept[rows], rejected[rows]
        seen_near, seen_far = score_kept[rows], score_rejected[rows]
        finite_near, finite_far = np.isfinite(seen_near), np.isfinite(seen_far)
        unseen_near, unseen_far = np.isnan(seen_near), np.isnan(seen_far)
        secant = finite_near & finite_far & (streak[rows] < 2)
        middle = (near + far) / 2
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            point = np.select(
                [secant, finite_near & unseen_far, finite_far & unseen_near, unseen_near & unseen_far],
                [
                    near + (target - seen_near) / (seen_far - seen_near) * (far - near),
                    near + sign * ((target - seen_near) * spread[rows] + overshoot[rows]),
                    far - sign * ((seen_far - target) * spread[rows] + overshoot[rows]),
                    guess[rows],
                ],
                middle,  # a stalled secant, or an end whose tail was 0 or >= 1: bisect
            )
        point = np.where(np.isfinite(point), point, middle)
        low, high = np.minimum(near + sign, far - sign), np.maximum(near + sign, far - sign)
        probe = np.floor(np.clip(point, low, high) + 0.5).astype(np.int64)  # strictly between near and far
        bound = np.asarray(tail(probe, rows), dtype=np.float64)
        out = bound <= threshold
        with np.errstate(divide="ignore"):
            score = -ndtri(np.minimum(bound, 1.0))  # inf where the bound is 0, -inf where it is 1 or more
        rejected[rows[out]], score_rejected[rows[out]] = probe[out], score[out]
        kept[rows[~out]], score_kept[rows[~out]] = probe[~out], score[~out]
        # a step from one side that fell short of the other: the next one goes further
        overshoot[rows[(finite_near & unseen_far & ~out) | (finite_far & unseen_near & out)]] *= 2
        streak[rows] = np.where(secant, np.where(out == last_side[rows], streak[rows] + 1, 1), 0)
        last_side[rows] = out


class FrequencyOracle(LocalRandomizer, ABC):
    """Shared interface: ``randomize``, ``estimate``, ``variance``, ``confidence_interval``, ``guarantee``."""

    name: ClassVar[str] = "oracle"

    def __init__(self, k: int, epsilon: float) -> None:
        self._k = check_integer("k", k, minimum=2)
        super().__init__(epsilon)

    @property
    def k(self) -> int:
        return self._k

    # -- the support probabilities (Wang et al. 2017, Sec. 3) ---------------------------------------
    @property
    @abstractmethod
    def p(self) -> float:
        """P(a report supports the reporter's own category)."""
        raise NotImplementedError

    @property
    @abstractmethod
    def q(self) -> float:
        """P(a report supports a given other category)."""
        raise NotImplementedError

    # p - q, 1 - q and 1 - p - q, accurate to a few ulps (no cancellation for epsilon near 0, no
    # overflow for large epsilon): subclasses with closed forms override them.
    @property
    def _gap(self) -> float:
        return self.p - self.q

    @property
    def _one_minus_q(self) -> float:
        return 1.0 - self.q

    @property
    def _one_minus_p_minus_q(self) -> float:
        return 1.0 - self.p - self.q

    def _parameters(self) -> tuple[Any, ...]:
        return (self._k, self._epsilon)

    def _values(self, values: Any) -> NDArray[np.int64]:
        allowed = f"must be integer category indices in 0..{self._k - 1}"
        array = _one_value_per_person("values", values, allowed)
        if array.dtype.kind not in "iu" or isinstance(values, bool | np.bool_):
            raise InvalidParameterError("values", values, allowed)
        if array.size and (array.min() < 0 or array.max() >= self._k):
            raise InvalidParameterError("values", values, allowed)
        return array.astype(np.int64)

    def _reports(self, reports: Any) -> NDArray[Any]:
        if not isinstance(reports, LocalReports):
            raise InvalidParameterError("reports", type(reports).__name__, f"must be LocalReports from {self!r}")
        if reports.oracle != self.name or reports.parameters != self._parameters():
            raise InvalidParameterError(
                "reports", f"{reports.oracle}{reports.parameters}", f"must come from {self.name}{self._parameters()}"
            )
        if len(reports) == 0:
            raise InvalidParameterError("reports", 0, "must hold at least one report")
        return reports.data

    def randomize(self, values: Any, rng: RandomSource | None = None) -> LocalReports:
        """One eps-LDP report per value (category indices 0..k-1; a client passes its one value).

        ``values``: a scalar or a 1-d array, one value per person (a 2-d input is refused: it would
        give a person one report, and one epsilon, per column). ``rng``: the secure source by
        default; :class:`dpkit.noise.InsecureSeededRandom` is for tests only.
        """
        data = self._randomize(self._values(values), resolve_source(rng))
        return LocalReports(self.name, self._parameters(), data)

    @abstractmethod
    def _randomize(self, values: NDArray[np.int64], source: RandomSource) -> NDArray[Any]:
        raise NotImplementedError

    @abstractmethod
    def support_counts(self, reports: LocalReports) -> NDArray[np.int64]:
        """C_v: how many reports support each category v."""
        raise NotImplementedError

    def estimate(self, reports: LocalReports) -> NDArray[np.float64]:
        """Unbiased estimates of the number of people in each category (they sum to n in expectation).

        c_v = (C_v - n q) / (p - q) (Wang et al. 2017, Sec. 3); estimates can be negative. Post-processing
        of eps-LDP reports: no further privacy cost. Reports from another oracle or parameters, or
        outside this oracle's output domain, are refused.
        """
        counts = self.support_counts(reports)
        n = len(reports)
        return np.asarray((counts - n * self.q) / self._gap, dtype=np.float64)

    def variance(self, n: int, true_count: Any = None) -> Any:
        """Variance of one category's estimated COUNT from n reports.

        Without ``true_count``: n q (1 - q) / (p - q)^2, exact for a category nobody holds (the
        published formulas times n^2). With ``true_count`` n_v (a number or array), the exact
        variance n q (1 - q)/(p - q)^2 + n_v (1 - p - q)/(p - q) (Wang et al. 2017, Eq. 2).
        """
        m = check_integer("n", n, minimum=1)
        gap = self._gap
        base = m * self.q * self._one_minus_q / gap / gap
        if true_count is None:
            return base
        allowed = f"must be a number or an array of numbers in [0, n={m}]"
        counts = _as_array("true_count", true_count, allowed)
        if counts.dtype.kind not in "iuf" or isinstance(true_count, bool | np.bool_):
            raise InvalidParameterError("true_count", true_count, allowed)
        nv = counts.astype(np.float64)
        if not np.all(np.isfinite(nv)) or np.any(nv < 0) or np.any(nv > m):
            raise InvalidParameterError("true_count", true_count, allowed)
        result = base + nv * self._one_minus_p_minus_q / gap
        return float(result) if nv.ndim == 0 else result

    def frequency_variance(self, n: int) -> float:
        """Variance of one category's estimated FREQUENCY (count / n) at true frequency 0."""
        m = check_integer("n", n, minimum=1)
        return float(self.variance(m)) / (m * m)

    def confidence_interval(self, reports: LocalReports, alpha: float = 0.05) -> NDArray[np.float64]:
        """Two-sided (1 - alpha) intervals on each category's true count, shape (k, 2): exact, conservative.

        Each report supports category v independently, with probability p if its sender holds v and
        q otherwise, so the support count is C_v ~ Binomial(n_v, p) + Binomial(n - n_v, q), a law
        known for every candidate count n_v. The interval holds the counts m in 0..n that neither
        one-sided exact test rejects at level alpha/2 (P_m(C_v >= c) <= alpha/2 or
        P_m(C_v <= c) <= alpha/2, c the observed count): Clopper & Pearson's (1934) inversion, for
        this law. Both tails are monotone in m (p > q), so the set is an interval, found by bisection;
        the tails are bounded from above (the neglected mass of the summed binomial is added, with
        a margin for rounding), so each interval covers its count with probability >= 1 - alpha for
        every n, epsilon and true count (a normal approximation does not when n q is small).
        Bounds are integers in [0, n]; the estimate may lie outside (it can be negative).

        >>> from dpkit.noise import InsecureSeededRandom
        >>> oracle = KRR(2, 5.0)
        >>> oracle.confidence_interval(oracle.randomize(np.zeros(22, dtype=int), rng=InsecureSeededRandom(0))).tolist()
        [[22.0, 22.0], [0.0, 0.0]]
        """
        level = check_probability("alpha", alpha, open_low=True, open_high=True)
        return self._count_intervals(self.support_counts(reports), len(reports), level)

    def _count_intervals(self, support: NDArray[np.int64], n: int, alpha: float) -> NDArray[np.float64]:
        """The (k, 2) intervals of :meth:`confidence_interval` from the support counts of n reports."""
        unique, inverse = np.unique(np.asarray(support, dtype=np.int64), return_inverse=True)
        p, q, gap = self.p, self.q, self._gap
        estimate = np.clip(np.nan_to_num((unique - n * q) / gap), 0, n)
        threshold = _threshold(alpha, n)
        if threshold <= 0:  # alpha below the rounding margin: no count is rejected
            return np.tile(np.array([0.0, float(n)]), (inverse.size, 1))
        from scipy.special import ndtri

        z = float(-ndtri(threshold))  # the normal quantile of the threshold, upper tail

        def normal_guess(shift: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
            """Where the normal approximation (continuity-corrected) puts the boundary: the m with
            m p + (n - m) q = c + shift sd_m, sd_m^2 = m p (1 - p) + (n - m) q (1 - q) (fixed point,
            three rounds); and the spread sd_m / (p - q), m's change per unit of the normal scale."""
            m = estimate
            for _ in range(3):
                m_in = np.clip(m, 0, n)
                sd = np.sqrt(m_in * (p * (1 - p)) + (n - m_in) * (q * (1 - q)))
                m = (unique + np.sign(shift) * 0.5 + shift * sd - n * q) / gap
            return np.nan_to_num(m), np.maximum(np.nan_to_num(sd / gap), 1e-3)

        # Lower bound: P_m(C >= c) grows with m (p > q); every m below the boundary is rejected.
        guess, spread = normal_guess(-z)
        lower = _boundary(
            np.ceil(estimate).astype(np.int64),
            -1,
            guess,
            spread,
            lambda m, rows: _support_tail_bound(m, unique[rows], n, p, q, upper=True),
            threshold,
        )
        # Upper bound: P_m(C <= c) falls as m grows; every m above the boundary is rejected.
        guess, spread = normal_guess(z)
        upper = _boundary(
            np.floor(estimate).astype(np.int64),
            n + 1,
            guess,
            spread,
            lambda m, rows: _support_tail_bound(m, unique[rows], n, p, q, upper=False),
            threshold,
        )
        # The two tests cannot both reject one m, but their accepted sets may just fail to meet
        # (discreteness): the hull of the two ends is then returned (wider, still valid).
        low, high = np.minimum(lower, upper), np.maximum(lower, upper)
        return np.stack([low, high], axis=1).astype(np.float64)[inverse.reshape(-1)]

    @abstractmethod
    def transition_matrix(self) -> NDArray[np.float64]:
        """P(report = y | value = x) for every x (rows) and every possible report y (columns)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.name}(k={self._k}, epsilon={self._epsilon})"


class KRR(FrequencyOracle):
    """k-ary randomized response (seed 000): report the truth with probability e^eps / (e^eps + k - 1).

    Reuses :class:`dpkit.mechanisms.RandomizedResponse` (exact draws). k = 2 is binary randomized
    response (Warner 1965). Count variance n (k - 2 + e^eps) / (e^eps - 1)^2 (seed 000; Wang et al. 2017).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> krr = KRR(4, 1.0)
    >>> reports = krr.randomize(np.array([0, 1, 2, 3, 0]), rng=InsecureSeededRandom(0))
    >>> reports.data.tolist()
    [2, 1, 2, 3, 1]
    >>> round(krr.variance(1000), 2)
    1598.07
    """

    name = "KRR"

    def __init__(self, k: int, epsilon: float) -> None:
        super().__init__(k, epsilon)
        self._mechanism = RandomizedResponse(self._epsilon, k=self._k)

    @property
    def p(self) -> float:
        return 1.0 / (1.0 + (self._k - 1) * math.exp(-self._epsilon))

    @property
    def q(self) -> float:
        small = math.exp(-self._epsilon)  # 1/(e^eps + k - 1) without overflow above eps ~ 709
        return small / (1.0 + (self._k - 1) * small)

    @property
    def _gap(self) -> float:
        return -math.expm1(-self._epsilon) / (1.0 + (self._k - 1) * math.exp(-self._epsilon))

    @property
    def _one_minus_q(self) -> float:
        small = math.exp(-self._epsilon)
        return (1.0 + (self._k - 2) * small) / (1.0 + (self._k - 1) * small)

    @property
    def _one_minus_p_minus_q(self) -> float:
        small = math.exp(-self._epsilon)
        return (self._k - 2) * small / (1.0 + (self._k - 1) * small)

    def _randomize(self, values: NDArray[np.int64], source: RandomSource) -> NDArray[Any]:
        return np.asarray(self._mechanism.release(values, rng=source), dtype=np.int64)

    def support_counts(self, reports: LocalReports) -> NDArray[np.int64]:
        data = self._reports(reports)
        if data.ndim != 1:
            raise InvalidParameterError("reports", data.shape, "must be a 1-d array of categories")
        data = _check_report_range(data, 0, self._k, f"integer categories in 0..{self._k - 1}")
        return np.bincount(data, minlength=self._k)

    def transition_matrix(self) -> NDArray[np.float64]:
        return self._mechanism.output_probabilities()


class _UnaryEncoding(FrequencyOracle):
    """Unary encoding: the value as a one-hot k-bit vector, bit j kept at 1 with probability p if j is
    the value and set to 1 with probability q otherwise (Wang et al. 2017, Sec. 4.3)."""

    def _randomize(self, values: NDArray[np.int64], source: RandomSource) -> NDArray[Any]:
        n, k = values.size, self._k
        out = np.empty((n, k), dtype=bool)
        step = max(1, 2**21 // k)  # about 2 million coins (16 MiB of random words) at a time
        for start in range(0, n, step):
            part = values[start : start + step]
            block = self._other_bits(part.size * k, source).reshape(part.size, k)
            block[np.arange(part.size), part] = self._own_bits(part.size, source)
            out[start : start + part.size] = block
        return out

    @abstractmethod
    def _own_bits(self, size: int, source: RandomSource) -> NDArray[np.bool_]:
        raise NotImplementedError

    @abstractmethod
    def _other_bits(self, size: int, source: RandomSource) -> NDArray[np.bool_]:
        raise NotImplementedError

    def support_counts(self, reports: LocalReports) -> NDArray[np.int64]:
        data = self._reports(reports)
        if data.ndim != 2 or data.shape[1] != self._k:
            raise InvalidParameterError("reports", data.shape, f"must be an (n, {self._k}) bit matrix")
        if data.dtype.kind != "b":
            data = _check_report_range(data, 0, 2, "bits (booleans, or integers 0 and 1)")
        return np.count_nonzero(data, axis=0).astype(np.int64)

    def transition_matrix(self) -> NDArray[np.float64]:
        """Over all 2^k bit vectors (k <= 12), column y = the vector with bits of y's binary digits."""
        if self._k > 12:
            raise InvalidParameterError("k", self._k, "must be <= 12 to list all 2^k reports")
        bits = (np.arange(2**self._k)[:, None] >> np.arange(self._k)[None, :]) & 1  # (2^k, k)
        out = np.empty((self._k, 2**self._k))
        for x in range(self._k):
            prob = np.full(self._k, self.q)
            prob[x] = self.p
            out[x] = np.prod(np.where(bits == 1, prob, 1 - prob), axis=1)
        return out


class SUE(_UnaryEncoding):
    """Symmetric unary encoding (basic one-time RAPPOR; Erlingsson, Pihur & Korolova 2014):
    p = e^(eps/2) / (e^(eps/2) + 1), q = 1 - p.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> SUE(3, 2.0).randomize(np.array([0, 2]), rng=InsecureSeededRandom(0)).data.astype(int).tolist()
    [[1, 0, 0], [0, 1, 1]]
    """

    name = "SUE"

    @property
    def p(self) -> float:
        return 1.0 / (1.0 + math.exp(-self._epsilon / 2))

    @property
    def q(self) -> float:
        return 1.0 / (1.0 + math.exp(self._epsilon / 2))

    @property
    def _gap(self) -> float:
        return math.tanh(self._epsilon / 4)

    @property
    def _one_minus_q(self) -> float:
        return self.p

    @property
    def _one_minus_p_minus_q(self) -> float:
        return 0.0

    def _own_bits(self, size: int, source: RandomSource) -> NDArray[np.bool_]:
        return bernoulli_keep(self._epsilon_exact / 2, 2, size, rng=source)

    def _other_bits(self, size: int, source: RandomSource) -> NDArray[np.bool_]:
        return ~bernoulli_keep(self._epsilon_exact / 2, 2, size, rng=source)


class OUE(_UnaryEncoding):
    """Optimized unary encoding (Wang et al. 2017, Sec. 4.4): p = 1/2, q = 1/(e^eps + 1).

    Count variance 4 n e^eps / (e^eps - 1)^2 (Wang et al. 2017, Eq. 9).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> OUE(3, 2.0).randomize(np.array([0, 2]), rng=InsecureSeededRandom(0)).data.astype(int).tolist()
    [[0, 0, 0], [0, 0, 0]]
    >>> round(OUE(3, 1.0).frequency_variance(1000), 6)
    0.003683
    """

    name = "OUE"

    @property
    def p(self) -> float:
        return 0.5

    @property
    def q(self) -> float:
        small = math.exp(-self._epsilon)  # 1/(1 + e^eps) without overflow
        return small / (1.0 + small)

    @property
    def _gap(self) -> float:
        return math.tanh(self._epsilon / 2) / 2

    @property
    def _one_minus_p_minus_q(self) -> float:
        return math.tanh(self._epsilon / 2) / 2

    def _own_bits(self, size: int, source: RandomSource) -> NDArray[np.bool_]:
        from dpkit.noise import bernoulli_rational

        return bernoulli_rational(Fraction(1, 2), size, rng=source)

    def _other_bits(self, size: int, source: RandomSource) -> NDArray[np.bool_]:
        return ~bernoulli_keep(self._epsilon_exact, 2, size, rng=source)


def _smallest_prime_at_least(m: int) -> int:
    candidate = max(2, m)
    while any(candidate % d == 0 for d in range(2, math.isqrt(candidate) + 1)):
        candidate += 1
    return candidate


class OLH(FrequencyOracle):
    """Optimized local hashing (Wang et al. 2017, Sec. 4.4): hash the value into g = round(e^eps) + 1
    buckets with a fresh public hash, then k-RR over the g buckets.

    Hash family: h_(a,b)(x) = ((a x + b) mod P) mod g, P the smallest prime >= max(k, g), a uniform
    in 1..P-1, b uniform in 0..P-1, drawn exactly per person (Carter & Wegman 1979). For x != x'
    the pair ((a x + b) mod P, (a x' + b) mod P) is uniform over distinct residue pairs, so the
    collision probability is exactly c = sum_j m_j (m_j - 1) / (P (P - 1)) (m_j = #{r < P: r mod g = j}),
    and q = c p' + (1 - c)(1 - p')/(g - 1) exactly, p' = e^eps / (e^eps + g - 1): the estimator is
    exactly unbiased. Report: (a, b, bucket), O(log k) bits.

    Aggregation without a loop per report: reports are counted per (a, b, bucket) cell and, for each
    a, the cyclic correlation over b with the bucket pattern is one FFT (cost O(P^2 g log P), not
    O(n k)); beyond 2^24 cells it falls back to chunked broadcasting over (reports x categories).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> olh = OLH(5, 1.0)
    >>> olh.g, olh.prime
    (4, 5)
    >>> olh.randomize(np.array([0, 4]), rng=InsecureSeededRandom(0)).data.tolist()
    [[4, 0, 0], [2, 4, 2]]
    """

    name = "OLH"

    def __init__(self, k: int, epsilon: float, *, g: int | None = None) -> None:
        super().__init__(k, epsilon)
        if g is None:
            # g = round(e^eps) + 1 must stay below 2**31 (checked before e^eps can overflow)
            if self._epsilon > math.log(2.0**31 - 2):
                raise InvalidParameterError(
                    "epsilon", epsilon, "must be at most ln(2**31) ~ 21.49 for OLH's default g (pass g)"
                )
            self._g = max(2, round(math.exp(self._epsilon)) + 1)
        else:
            self._g = check_integer("g", g, minimum=2)
            if self._g >= 2**31:
                raise InvalidParameterError("g", g, "must be below 2**31 for OLH")
        if self._k >= 2**31:
            raise InvalidParameterError("k", k, "must be below 2**31 for OLH")
        self._prime = _smallest_prime_at_least(max(self._k, self._g))
        if self._prime >= 2**31:
            raise InvalidParameterError("k", k, "must be below 2**31 for OLH")
        self._bucket_rr = RandomizedResponse(self._epsilon, k=self._g)
        # m_j = #{r < P : r mod g = j}: `rest` buckets of size `base` + 1, the others of size `base`
        base, rest = divmod(self._prime, self._g)
        pairs = rest * (base + 1) * base + (self._g - rest) * base * (base - 1)
        self._collision = pairs / (self._prime * (self._prime - 1))

    @property
    def g(self) -> int:
        return self._g

    @property
    def prime(self) -> int:
        return self._prime

    def _parameters(self) -> tuple[Any, ...]:
        return (self._k, self._epsilon, self._g)

    @property
    def p(self) -> float:
        return 1.0 / (1.0 + (self._g - 1) * math.exp(-self._epsilon))

    @property
    def q(self) -> float:
        keep = self.p
        c = self._collision
        return c * keep + (1 - c) * self._bucket_other

    @property
    def _bucket_other(self) -> float:
        """P(k-RR over g buckets reports a given other bucket) = 1/(e^eps + g - 1)."""
        small = math.exp(-self._epsilon)
        return small / (1.0 + (self._g - 1) * small)

    @property
    def _gap(self) -> float:
        # p - q = (1 - c)(p - 1/(e^eps + g - 1)) = (1 - c)(1 - e^-eps)/(1 + (g - 1) e^-eps)
        return (1 - self._collision) * -math.expm1(-self._epsilon) / (1.0 + (self._g - 1) * math.exp(-self._epsilon))

    @property
    def _one_minus_p_minus_q(self) -> float:
        other, c = self._bucket_other, self._collision
        # 1 - p = (g - 1) other, so 1 - p - q = (g - 2 + c) other - c p
        return (self._g - 2 + c) * other - c * self.p

    def hash(self, a: Any, b: Any, values: Any) -> NDArray[np.int64]:
        """h_(a,b)(x) = ((a x + b) mod P) mod g (broadcasting)."""
        return ((np.asarray(a, np.int64) * np.asarray(values, np.int64) + b) % self._prime) % self._g

    def _randomize(self, values: NDArray[np.int64], source: RandomSource) -> NDArray[Any]:
        n = values.size
        a = uniform_integers(self._prime - 1, n, rng=source) + 1
        b = uniform_integers(self._prime, n, rng=source)
        buckets = np.asarray(self._bucket_rr.release(self.hash(a, b, values), rng=source), dtype=np.int64)
        return np.stack([a, b, buckets], axis=1).astype(np.int32)

    def support_counts(self, reports: LocalReports) -> NDArray[np.int64]:
        data = self._reports(reports)
        if data.ndim != 2 or data.shape[1] != 3:
            raise InvalidParameterError("reports", data.shape, "must be an (n, 3) array of (a, b, bucket)")
        # a = 0 would make the hash constant: one such report would support every category at once
        data = _check_report_range(
            data,
            np.array([1, 0, 0]),
            np.array([self._prime, self._prime, self._g]),
            f"integer (a, b, bucket) with 1 <= a < {self._prime}, 0 <= b < {self._prime}, 0 <= bucket < {self._g}",
        )
        cells = (self._prime - 1) * self._prime * self._g
        if cells <= 2**24 and data.shape[0] * self._k > 8 * cells:
            return self._support_grouped(data)
        return self._support_broadcast(data)

    def _support_broadcast(self, data: NDArray[Any]) -> NDArray[np.int64]:
        values = np.arange(self._k, dtype=np.int64)
        chunk = max(1, 2**22 // self._k)
        out = np.zeros(self._k, dtype=np.int64)
        for start in range(0, data.shape[0], chunk):
            part = data[start : start + chunk].astype(np.int64)
            hashed = self.hash(part[:, 0:1], part[:, 1:2], values[None, :])
            out += np.count_nonzero(hashed == part[:, 2:3], axis=0)
        return out

    def _support_grouped(self, data: NDArray[Any]) -> NDArray[np.int64]:
        prime, g = self._prime, self._g
        flat = ((data[:, 0].astype(np.int64) - 1) * prime + data[:, 1]) * g + data[:, 2]
        table = np.bincount(flat, minlength=(prime - 1) * prime * g).reshape(prime - 1, prime, g)
        # S_a(r) = sum_b sum_j table[a, b, j] [((r + b) mod P) mod g == j]: a cyclic correlation in b.
        pattern = (np.arange(prime)[:, None] % g == np.arange(g)[None, :]).astype(np.float64)
        spectrum = np.einsum("abj,bj->ab", np.conj(np.fft.rfft(table, axis=1)), np.fft.rfft(pattern, axis=0))
        correlation = np.fft.irfft(spectrum, n=prime, axis=1)
        a = np.arange(1, prime, dtype=np.int64)
        residues = (a[:, None] * np.arange(self._k, dtype=np.int64)[None, :]) % prime
        gathered = np.take_along_axis(correlation, residues, axis=1).sum(axis=0)
        return np.rint(gathered).astype(np.int64)

    def transition_matrix(self) -> NDArray[np.float64]:
        """Columns: every (a, b, bucket) report, P(seed) P(bucket | h_seed(x)) (small P only)."""
        prime, g = self._prime, self._g
        if (prime - 1) * prime * g > 2**20:
            raise InvalidParameterError("k", self._k, "is too large to list all OLH reports")
        grid_a, grid_b = np.meshgrid(np.arange(1, prime), np.arange(prime), indexing="ij")
        a, b = grid_a.ravel(), grid_b.ravel()
        seed_probability = 1.0 / ((prime - 1) * prime)
        bucket_law = self._bucket_rr.output_probabilities()  # (g, g)
        out = np.empty((self._k, a.size * g))
        for x in range(self._k):
            hashed = self.hash(a, b, x)
            out[x] = (seed_probability * bucket_law[hashed]).ravel()
        return out

    def __repr__(self) -> str:
        return f"OLH(k={self._k}, epsilon={self._epsilon}, g={self._g})"


def fast_walsh_hadamard(vector: NDArray[Any]) -> NDArray[np.float64]:
    """The Sylvester-Hadamard transform H v (length a power of two), in O(K log K).

    >>> fast_walsh_hadamard(np.array([1.0, 0.0, 0.0, 0.0])).tolist()
    [1.0, 1.0, 1.0, 1.0]
    """
    out = np.array(vector, dtype=np.float64)
    size = out.size
    h = 1
    while h < size:
        view = out.reshape(-1, 2, h)
        top, bottom = view[:, 0, :].copy(), view[:, 1, :].copy()
        view[:, 0, :] = top + bottom
        view[:, 1, :] = top - bottom
        h *= 2
    return out


class HadamardResponse(FrequencyOracle):
    """Hadamard response (Acharya, Sun & Zhang 2019, "Hadamard Response: Estimating Distributions
    Privately, Efficiently, and with Little Communication", AISTATS, Sec. 4, the basic scheme).

    K = the smallest power of two > k; value x owns the set C_x = {y : H[x+1, y] = +1} (row x+1 of
    the Sylvester-Hadamard matrix, K/2 elements). The report is uniform on C_x with probability
    e^eps/(e^eps + 1), uniform on its complement otherwise: P(y | x) is 2e^eps/(K(e^eps + 1)) or
    2/(K(e^eps + 1)), ratio e^eps. Rows are orthogonal, so another value's report lands in C_v with
    probability exactly q = 1/2; p = e^eps/(e^eps + 1). Counts C_v = (n + (H hist)[v+1]) / 2 come from
    one fast Walsh-Hadamard transform of the histogram of reports. Message: log2 K bits.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> hr = HadamardResponse(3, 1.0)
    >>> hr.size
    4
    >>> hr.randomize(np.array([0, 1, 2]), rng=InsecureSeededRandom(0)).data.tolist()
    [0, 1, 3]
    """

    name = "HadamardResponse"

    def __init__(self, k: int, epsilon: float) -> None:
        super().__init__(k, epsilon)
        self._size = 1 << self._k.bit_length()  # smallest power of two > k

    @property
    def size(self) -> int:
        return self._size

    @property
    def p(self) -> float:
        return 1.0 / (1.0 + math.exp(-self._epsilon))

    @property
    def q(self) -> float:
        return 0.5

    @property
    def _gap(self) -> float:
        return math.tanh(self._epsilon / 2) / 2

    @property
    def _one_minus_p_minus_q(self) -> float:
        return -math.tanh(self._epsilon / 2) / 2

    def _randomize(self, values: NDArray[np.int64], source: RandomSource) -> NDArray[Any]:
        rows = values + 1
        inside = bernoulli_keep(self._epsilon_exact, 2, values.size, rng=source)
        candidate = uniform_integers(self._size, values.size, rng=source)
        odd = (np.bitwise_count(candidate & rows) & 1).astype(bool)  # H[row, y] = -1
        # XOR with the row's lowest set bit flips the parity: a bijection between C_x and its complement.
        flip = odd == inside
        lowest = rows & -rows
        return np.where(flip, candidate ^ lowest, candidate)

    def support_counts(self, reports: LocalReports) -> NDArray[np.int64]:
        data = self._reports(reports)
        if data.ndim != 1:
            raise InvalidParameterError("reports", data.shape, "must be a 1-d array of indices")
        data = _check_report_range(data, 0, self._size, f"integer indices in 0..{self._size - 1}")
        transformed = fast_walsh_hadamard(np.bincount(data, minlength=self._size))
        return np.rint((data.size + transformed[1 : self._k + 1]) / 2).astype(np.int64)

    def transition_matrix(self) -> NDArray[np.float64]:
        y = np.arange(self._size)
        out = np.empty((self._k, self._size))
        small = math.exp(-self._epsilon)  # 2 e^eps / (K (e^eps + 1)) and 2 / (K (e^eps + 1)), no overflow
        for x in range(self._k):
            plus = (np.bitwise_count(y & (x + 1)) & 1) == 0
            out[x] = np.where(plus, 2.0, 2.0 * small) / (self._size * (1.0 + small))
        return out
