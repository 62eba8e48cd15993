"""Empirical privacy auditing: lower bounds on epsilon from samples on two neighbouring inputs.

The method is the standard black-box audit (Jagielski, Ullman & Oprea 2020, "Auditing
Differentially Private Machine Learning: How Private is Private SGD?"; Nasr, Song, Thakurta,
Papernot & Carlini 2021, "Adversary Instantiation"): run the mechanism many times on two
neighbouring inputs, pick a test event S, bound P[M(a) in S] from below and P[M(b) in S] from
above with exact Clopper-Pearson intervals, and read off the smallest epsilon those bounds allow.

A second audit, :func:`low_bit_test`, looks for the floating-point leak of Mironov (2012, "On
Significance of the Least Significant Bits for Differential Privacy"): a textbook float Laplace
release ``x + Laplace(b)`` carries ``x`` in the low bits of its output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_delta, check_integer, check_probability
from dpkit.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    Exponential,
    Gaussian,
    Geometric,
    Laplace,
    Mechanism,
    NumericMechanism,
    RandomizedResponse,
    Staircase,
)
from dpkit.noise import RandomSource, resolve_source

__all__ = ["AuditResult", "LowBitResult", "estimate_epsilon", "low_bit_test", "on_grid"]

#: A user-supplied candidate event: a description and a predicate on the per-sample statistics.
Event = tuple[str, Callable[[NDArray[Any]], NDArray[np.bool_]]]

# Candidate events: every distinct value is a threshold when there are at most this many...
_MAX_EXACT_THRESHOLDS = 4096
# ...single values are events when there are at most this many distinct outputs.
_MAX_SINGLETONS = 64
# Otherwise thresholds sit at this many ranks from each tail (geometric spacing) and in the body.
_TAIL_RANKS = 400
_BODY_RANKS = 200


@dataclass(frozen=True)
class AuditResult:
    """The outcome of :func:`estimate_epsilon`.

    ``p_a_interval`` and ``p_b_interval`` are Clopper-Pearson intervals for P[M(input_a) in S]
    and P[M(input_b) in S], each end one-sided at confidence 1 - alpha/2, computed on the
    evaluation half. ``direction`` is ``"a>b"`` when the bound is ln((p_a_low - delta) / p_b_high)
    and ``"b>a"`` when the roles are swapped.
    """

    epsilon_lower_bound: float
    event: str
    direction: str
    p_a_interval: tuple[float, float]
    p_b_interval: tuple[float, float]
    samples: int
    evaluation_samples: int
    alpha: float
    delta: float

    def __repr__(self) -> str:
        return (
            f"AuditResult(epsilon_lower_bound={self.epsilon_lower_bound:.4f}, event={self.event!r}, "
            f"direction={self.direction!r}, "
            f"p_a in [{self.p_a_interval[0]:.4g}, {self.p_a_interval[1]:.4g}], "
            f"p_b in [{self.p_b_interval[0]:.4g}, {self.p_b_interval[1]:.4g}], "
            f"samples={self.samples}, alpha={self.alpha:g}, delta={self.delta:g})"
        )


@dataclass(frozen=True)
class LowBitResult:
    """The outcome of :func:`low_bit_test`: a G-test of equal low-bit distributions."""

    p_value: float
    statistic: float
    degrees_of_freedom: int
    passed: bool
    samples: int
    alpha: float

    def __repr__(self) -> str:
        verdict = "passed" if self.passed else "FAILED: the low bits depend on the input"
        return (
            f"LowBitResult({verdict}; p_value={self.p_value:.3g}, G={self.statistic:.4g}, "
            f"dof={self.degrees_of_freedom}, samples={self.samples}, alpha={self.alpha:g})"
        )


# ---------------------------------------------------------------------------------------------
# Drawing outputs
# ---------------------------------------------------------------------------------------------


def _check_release(release: Any) -> None:
    if isinstance(release, type):  # a class is callable, but calling it builds a mechanism, not an output
        raise InvalidParameterError(
            "release", release, "must be a Mechanism instance (e.g. Laplace(sensitivity=1, epsilon=1)), not a class"
        )
    if not (isinstance(release, Mechanism) or callable(release)):
        raise InvalidParameterError(
            "release", release, "must be a dpkit Mechanism or a callable (value, rng) -> output"
        )


def _check_events(events: Any) -> list[_Candidate] | None:
    """The user's events as candidates, checked before anything is drawn."""
    if events is None:
        return None
    allowed = "must be None or a non-empty sequence of (description, predicate) pairs"
    if isinstance(events, str | bytes) or not isinstance(events, Sequence) or len(events) == 0:
        raise InvalidParameterError("events", events, allowed)
    candidates = []
    for event in events:
        if not isinstance(event, tuple | list) or len(event) != 2 or not callable(event[1]):
            raise InvalidParameterError("events", event, allowed)
        candidates.append(_Candidate(str(event[0]), event[1]))
    return candidates


def _hits(candidate: _Candidate, values: NDArray[Any], user: bool) -> int:
    """How many samples fall in the event; a user predicate must give one boolean per sample."""
    mask = candidate.predicate(values)
    if user:
        mask = np.asarray(mask)
        if mask.dtype.kind != "b" or mask.shape != (values.shape[0],):
            raise InvalidParameterError(
                "events",
                candidate.description,
                f"each predicate must return a boolean mask of shape ({values.shape[0]},), one entry per sample; "
                f"got {type(mask).__name__} of dtype {mask.dtype} and shape {mask.shape}",
            )
    return int(np.count_nonzero(mask))


# Mechanism classes whose ``release_repeated`` was checked against their ``release``: the same
# validation of the value, the same snapping to the public grid, the same exact integer noise
# sampler (independent draws, so one call for ``count`` draws has the law of ``count`` calls), the
# same rounding of each exact sum (``add_noise_on_grid`` rounds every coordinate on its own) and,
# for Geometric, the same clamping (its repeated release calls its own ``release`` on a batch).
# Exact types only: a subclass may override ``release`` without the vectorized helper following.
_REPEATABLE: frozenset[type[Mechanism]] = frozenset(
    {Laplace, Gaussian, Staircase, DiscreteGaussian, DiscreteLaplace, Geometric}
)

# Score cells (rows x candidates) handed to one ``Exponential.release_rows`` call: bounds its memory.
_ROWS_CELLS = 1 << 21


def _batch_path(mechanism: Mechanism) -> str | None:
    """Which vectorized form of ``mechanism`` draws exactly the law of repeated ``release`` calls.

    ``"repeated"``: ``release_repeated(value, count)``; ``"batch"``: randomized response on a batch
    of copies of one category (its ``release`` reports every entry of a batch independently);
    ``"rows"``: ``Exponential.release_rows`` on copies of one score vector (each row has exactly the
    law of ``release``); None: one ``release`` call per sample.
    """
    kind = type(mechanism)
    # A method patched onto the instance (a wrapped or deliberately broken release) is what must be
    # audited: the class's vectorized helpers would bypass it.
    if any(callable(getattr(kind, name, None)) for name in getattr(mechanism, "__dict__", {})):
        return None
    if kind in _REPEATABLE:
        # Constant-time discrete Laplace refuses batches larger than its ``dimension``.
        if isinstance(mechanism, DiscreteLaplace) and mechanism.constant_time:
            return None
        return "repeated"
    if kind is RandomizedResponse:
        # numpy reads a batch of tuple labels as a 2-D array: keep their per-call stacking.
        return None if getattr(mechanism, "_tuple_labels", True) else "batch"
    if kind is Exponential:
        return "rows"
    return None


def _draw_mechanism(mechanism: Mechanism, value: Any, count: int, source: RandomSource) -> NDArray[Any]:
    """``count`` independent outputs of ``mechanism.release(value)``, vectorized where the law allows.

    Every path draws from ``source``, so a seeded source still makes the audit reproducible. The
    batch and row paths take the first sample from ``release`` itself, which validates ``value``
    exactly as a plain call does (same error) and tells a single category or score vector apart.
    """
    path = _batch_path(mechanism)
    if path == "repeated" and isinstance(mechanism, NumericMechanism):
        return np.asarray(mechanism.release_repeated(value, count, rng=source))
    if path is None:
        return np.asarray([mechanism.release(value, rng=source) for _ in range(count)])
    first = mechanism.release(value, rng=source)
    rest = count - 1
    if path == "batch" and isinstance(mechanism, RandomizedResponse) and np.ndim(first) == 0:
        batch = np.asarray(mechanism.release([value] * rest, rng=source))
        if batch.shape == (rest,):
            # Stacked from Python labels, as the per-call outputs are: the same array and dtype.
            return np.asarray([first, *batch.tolist()])
    if path == "rows" and isinstance(mechanism, Exponential):
        scores = np.asarray(value)
        if scores.ndim == 1:
            per_call = max(1, _ROWS_CELLS // scores.size)
            outputs = [first]
            for start in range(0, rest, per_call):
                rows = np.broadcast_to(scores, (min(per_call, rest - start), scores.size))
                outputs.extend(mechanism.release_rows(rows, rng=source))
            return np.asarray(outputs)
    # A batch dropped above was dropped for its shape, which the value fixes, not the draws: the
    # samples kept are still independent draws of the release's law.
    return np.asarray([first, *(mechanism.release(value, rng=source) for _ in range(rest))])


def _draw(release: Any, value: Any, count: int, source: RandomSource, vectorized: bool) -> NDArray[Any]:
    """``count`` outputs of ``release`` on ``value``, stacked along the first axis."""
    if isinstance(release, Mechanism):
        return _draw_mechanism(release, value, count, source)
    if vectorized:
        batch = np.asarray(release(value, source, count))
        if batch.ndim == 0 or batch.shape[0] != count:
            raise InvalidParameterError(
                "release", release, f"with vectorized=True must return {count} outputs stacked on the first axis"
            )
        return batch
    return np.asarray([release(value, source) for _ in range(count)])


def _to_statistic(outputs: NDArray[Any], statistic: Callable[[NDArray[Any]], Any] | None) -> NDArray[Any]:
    if statistic is not None:
        values = np.asarray(statistic(outputs))
        if values.shape != (outputs.shape[0],):
            raise InvalidParameterError(
                "statistic",
                statistic,
                f"must map the stacked outputs to one number per sample, shape ({outputs.shape[0]},)",
            )
        return values
    if outputs.ndim > 1:  # default for vector outputs: the first coordinate
        return outputs.reshape(outputs.shape[0], -1)[:, 0]
    return outputs


# ---------------------------------------------------------------------------------------------
# Clopper-Pearson bounds and the epsilon they imply
# ---------------------------------------------------------------------------------------------


# Relative slack taken off each Clopper-Pearson bound (toward the safe side) to absorb the error of
# scipy's incomplete-beta inverse (observed <= ~1e-13 relative on the side it is computed on).
_CP_SLACK = 1e-10


def _cp_lower(successes: float | NDArray[np.float64], trials: float, level: float) -> NDArray[np.float64]:
    """One-sided Clopper-Pearson lower bound at confidence 1 - level (0 when there is no success).

    Each bound is computed on the side where it is small (p, or 1 - p through the failures), then
    moved outward by a relative ``_CP_SLACK``: near 1 a double holds 1 - p only to ~1e-16 absolute.
    """
    from scipy.stats import beta

    successes = np.asarray(successes, dtype=np.float64)
    failures = trials - successes
    with np.errstate(invalid="ignore", divide="ignore"):
        direct = beta.ppf(level, np.maximum(successes, 1e-300), failures + 1.0) * (1.0 - _CP_SLACK)
        # 1 - (upper bound on the failure probability): beta.isf keeps a small level exact,
        # where 1 - level in doubles loses ~1e-4 of a level 5e-13.
        complement = beta.isf(level, failures + 1.0, np.maximum(successes, 1e-300)) * (1.0 + _CP_SLACK)
        via_failures = np.nextafter(1.0 - np.minimum(complement, 1.0), 0.0)
    bound = np.where(successes <= failures, direct, via_failures)
    return np.where(successes > 0, np.clip(bound, 0.0, 1.0), 0.0)


def _cp_upper(successes: float | NDArray[np.float64], trials: float, level: float) -> NDArray[np.float64]:
    """One-sided Clopper-Pearson upper bound at confidence 1 - level (1 when every trial succeeds)."""
    failures = np.asarray(trials - np.asarray(successes, dtype=np.float64), dtype=np.float64)
    # By symmetry: P[success] <= 1 - (lower bound on the failure probability).
    with np.errstate(invalid="ignore"):
        bound = np.nextafter(1.0 - _cp_lower(failures, trials, level), 2.0)
    return np.where(failures > 0, np.minimum(bound, 1.0), 1.0)


def _epsilon_from_counts(
    numerator: NDArray[np.float64], denominator: NDArray[np.float64], trials: float, alpha: float, delta: float
) -> NDArray[np.float64]:
    """ln((p_num_low - delta) / p_den_high), 0 where not positive; each bound at 1 - alpha/2."""
    low = _cp_lower(numerator, trials, alpha / 2.0) - delta
    high = _cp_upper(denominator, trials, alpha / 2.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(low > 0, np.log(np.maximum(low, 1e-300) / high), 0.0)
    return np.maximum(ratio, 0.0)


# ---------------------------------------------------------------------------------------------
# Candidate events
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    description: str
    predicate: Callable[[NDArray[Any]], NDArray[np.bool_]]


def _compare(operator: Any, cut: Any) -> Callable[[NDArray[Any]], NDArray[np.bool_]]:
    def predicate(values: NDArray[Any]) -> NDArray[np.bool_]:
        return np.asarray(operator(values, cut), dtype=bool)

    return predicate


def _show(value: Any, labels: NDArray[Any] | None = None) -> str:
    if labels is not None:  # value is the code of a label: show the label
        value = labels[int(value)]
    return repr(value.item() if isinstance(value, np.generic) else value)


def _threshold_cuts(pooled_sorted: NDArray[Any]) -> NDArray[Any]:
    distinct = np.unique(pooled_sorted)
    if distinct.size <= _MAX_EXACT_THRESHOLDS:
        return distinct
    n = pooled_sorted.size
    tail = np.unique(np.round(np.geomspace(1, n / 2, _TAIL_RANKS)).astype(np.int64))
    ranks = np.concatenate([tail - 1, n - tail, np.linspace(0, n - 1, _BODY_RANKS).astype(np.int64)])
    return np.unique(pooled_sorted[np.clip(ranks, 0, n - 1)])


def _select_event(
    stat_a: NDArray[Any],
    stat_b: NDArray[Any],
    evaluation_size: int,
    alpha: float,
    delta: float,
    events: list[_Candidate] | None,
    labels: NDArray[Any] | None = None,
) -> tuple[_Candidate, str]:
    """The candidate event and direction with the best predicted lower bound on the selection half.

    The prediction is the bound the evaluation half would give if its frequencies equalled the
    selection half's: the plug-in log ratio, discounted for the sampling error of rare events.
    ``labels`` (for coded label outputs) names each code in the event descriptions.
    """
    n_sel = stat_a.shape[0]
    scale = evaluation_size / n_sel
    candidates: list[_Candidate] = []
    count_a: list[NDArray[np.float64]] = []
    count_b: list[NDArray[np.float64]] = []
    if events is not None:
        for candidate in events:
            candidates.append(candidate)
            count_a.append(np.array([_hits(candidate, stat_a, True)], dtype=np.float64))
            count_b.append(np.array([_hits(candidate, stat_b, True)], dtype=np.float64))
    else:
        sorted_a, sorted_b = np.sort(stat_a), np.sort(stat_b)
        cuts = _threshold_cuts(np.sort(np.concatenate([sorted_a, sorted_b])))
        # {y >= c}
        for c in cuts:
            candidates.append(_Candidate(f"output >= {_show(c, labels)}", _compare(np.greater_equal, c)))
        count_a.append((n_sel - np.searchsorted(sorted_a, cuts, side="left")).astype(np.float64))
        count_b.append((n_sel - np.searchsorted(sorted_b, cuts, side="left")).astype(np.float64))
        # {y <= c}
        for c in cuts:
            candidates.append(_Candidate(f"output <= {_show(c, labels)}", _compare(np.less_equal, c)))
        count_a.append(np.searchsorted(sorted_a, cuts, side="right").astype(np.float64))
        count_b.append(np.searchsorted(sorted_b, cuts, side="right").astype(np.float64))
        if cuts.size <= _MAX_SINGLETONS:
            for c in cuts:
                candidates.append(_Candidate(f"output == {_show(c, labels)}", _compare(np.equal, c)))
            count_a.append(
                (np.searchsorted(sorted_a, cuts, side="right") - np.searchsorted(sorted_a, cuts, side="left")).astype(
                    np.float64
                )
            )
            count_b.append(
                (np.searchsorted(sorted_b, cuts, side="right") - np.searchsorted(sorted_b, cuts, side="left")).astype(
                    np.float64
                )
            )
    all_a = np.concatenate(count_a) * scale
    all_b = np.concatenate(count_b) * scale
    forward = _epsilon_from_counts(all_a, all_b, float(evaluation_size), alpha, delta)
    backward = _epsilon_from_counts(all_b, all_a, float(evaluation_size), alpha, delta)
    if forward.max() >= backward.max():
        return candidates[int(np.argmax(forward))], "a>b"
    return candidates[int(np.argmax(backward))], "b>a"


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def estimate_epsilon(
    release: Any,
    input_a: Any,
    input_b: Any,
    *,
    samples: int = 200_000,
    delta: float = 0.0,
    alpha: float = 1e-6,
    rng: RandomSource | None = None,
    events: Sequence[Event] | None = None,
    statistic: Callable[[NDArray[Any]], Any] | None = None,
    vectorized: bool = False,
    selection_fraction: float = 0.5,
) -> AuditResult:
    """An empirical lower bound on the epsilon of ``release`` at the neighbouring inputs a and b.

    Method (Jagielski et al. 2020; Nasr et al. 2021): draw ``samples`` outputs on each input and
    split each set into a selection part (``selection_fraction``) and an evaluation part. On the
    selection part choose a test event S and a direction: among the threshold sets {y >= c},
    {y <= c} and, for outputs with few distinct values, single values {y == c} (or among the
    user's ``events``), in both directions a>b and b>a, take the one with the largest predicted
    bound (the plug-in log ratio, discounted for the sampling error of rare events). On the
    evaluation part compute exact Clopper-Pearson bounds p_a_low <= P[M(a) in S] and
    p_b_high >= P[M(b) in S], each at confidence 1 - alpha/2, and report
    ``ln((p_a_low - delta) / p_b_high)`` (0 when that is not positive).

    Contract: if ``release`` is (epsilon, delta)-DP for the pair (a, b) in both orders, then
    P[epsilon_lower_bound > epsilon] <= alpha. Proof sketch: S and the direction are functions
    of the selection part only, which is independent of the evaluation part; given S, each
    Clopper-Pearson bound fails with probability at most alpha/2, so both hold at once with
    probability >= 1 - alpha (union bound). When they hold, DP gives
    p_a_low - delta <= P[M(a) in S] - delta <= e^epsilon P[M(b) in S] <= e^epsilon p_b_high.
    A lower bound above the claimed epsilon therefore refutes the claim at level alpha.

    Parameters
    ----------
    release:
        A dpkit :class:`~dpkit.mechanisms.Mechanism`, or a callable ``(value, rng) -> output``;
        with ``vectorized=True`` a callable ``(value, rng, size) -> outputs`` returning ``size``
        independent outputs stacked on the first axis (much faster for large ``samples``).
        A mechanism's samples are drawn with its own vectorized sampler where one draws exactly
        the law of ``samples`` independent ``release(value, rng=rng)`` calls (the same
        validation, grid snapping, exact integer noise, rounding and clamping), so the contract
        below is unchanged: :class:`~dpkit.mechanisms.Laplace`, ``Gaussian``, ``Staircase``,
        ``DiscreteGaussian``, ``DiscreteLaplace`` and ``Geometric`` through ``release_repeated``
        (except constant-time discrete Laplace and geometric); ``RandomizedResponse`` on one
        category (without tuple labels) through one ``release`` of a batch of copies;
        ``Exponential`` on one score vector through ``release_rows`` on copies of it. Any other
        mechanism (subclasses included), or an instance with a method patched onto it, is called
        once per sample: ``release.release(value, rng=rng)``. ``vectorized`` is ignored for a
        mechanism.
    input_a, input_b:
        The two neighbouring inputs.
    samples:
        Outputs drawn on each input (at least 100).
    delta:
        The delta of the claim being audited (0 for pure DP).
    alpha:
        Probability of a false alarm (a bound above the true epsilon), in (0, 1).
    rng:
        The random source passed to ``release``; an :class:`~dpkit.noise.InsecureSeededRandom`
        makes the audit reproducible. Default: the secure source.
    events:
        Optional candidate events, as ``(description, predicate)`` pairs whose predicate maps
        the array of per-sample statistics (as the release returned them, labels included) to a
        boolean mask with one entry per sample; they replace the automatic ones. Automatic
        events on label outputs (strings, ...) are thresholds on the labels' sorted order and
        single labels, described by label.
    statistic:
        Maps the stacked outputs (first axis = samples) to one real number per sample; the
        default is the output itself, or the first coordinate of a vector output.
    vectorized:
        Whether ``release`` takes a third argument ``size`` (see above).
    selection_fraction:
        Share of the samples used to choose the event, in (0, 1).

    >>> from dpkit.noise import InsecureSeededRandom, discrete_laplace
    >>> def noisy_count(x, rng, size):
    ...     return x + discrete_laplace(1.0, size, rng=rng)
    >>> result = estimate_epsilon(noisy_count, 0, 1, samples=20_000, vectorized=True,
    ...                           rng=InsecureSeededRandom(7))
    >>> 0.0 < result.epsilon_lower_bound <= 1.0
    True
    """
    _check_release(release)
    n = check_integer("samples", samples, minimum=100)
    alpha_ = check_probability("alpha", alpha, open_low=True, open_high=True)
    delta_ = check_delta(delta)
    user_events = _check_events(events)
    fraction = check_probability("selection_fraction", selection_fraction, open_low=True, open_high=True)
    n_sel = min(max(1, int(round(n * fraction))), n - 1)
    if statistic is not None and not callable(statistic):
        raise InvalidParameterError("statistic", statistic, "must be None or a callable")
    source = resolve_source(rng)

    stat_a = _to_statistic(_draw(release, input_a, n, source, vectorized), statistic)
    stat_b = _to_statistic(_draw(release, input_b, n, source, vectorized), statistic)
    labels = None
    if user_events is None:  # the automatic events order the outputs; user predicates see them as they are
        if stat_a.dtype.kind == "b":
            stat_a, stat_b = stat_a.astype(np.int64), stat_b.astype(np.int64)
        if stat_a.dtype.kind not in "iuf" or stat_b.dtype.kind not in "iuf":
            # Labels of any other kind: code them by their sorted order (a threshold on a code is a
            # threshold on the label); single-value events stay meaningful; events are named by label.
            try:
                labels, codes = np.unique(np.concatenate([stat_a, stat_b]), return_inverse=True)
            except TypeError as exc:
                raise InvalidParameterError(
                    "release", release, "must return numbers, booleans or labels that can be sorted (e.g. strings)"
                ) from exc
            stat_a, stat_b = codes[:n], codes[n:]

    n_eval = n - n_sel
    chosen, direction = _select_event(stat_a[:n_sel], stat_b[:n_sel], n_eval, alpha_, delta_, user_events, labels)
    user = user_events is not None
    hits_a = float(_hits(chosen, stat_a[n_sel:], user))
    hits_b = float(_hits(chosen, stat_b[n_sel:], user))
    half = alpha_ / 2.0
    interval_a = (float(_cp_lower(hits_a, n_eval, half)), float(_cp_upper(hits_a, n_eval, half)))
    interval_b = (float(_cp_lower(hits_b, n_eval, half)), float(_cp_upper(hits_b, n_eval, half)))
    numerator, denominator = (interval_a[0], interval_b[1]) if direction == "a>b" else (interval_b[0], interval_a[1])
    bound = math.log((numerator - delta_) / denominator) if numerator - delta_ > 0 else 0.0
    return AuditResult(
        epsilon_lower_bound=max(0.0, bound),
        event=chosen.description,
        direction=direction,
        p_a_interval=interval_a,
        p_b_interval=interval_b,
        samples=n,
        evaluation_samples=n_eval,
        alpha=alpha_,
        delta=delta_,
    )


_ZERO = np.iinfo(np.int64).min  # the lowest-bit category of the output 0


def _float_outputs(release: Any, outputs: NDArray[Any]) -> NDArray[np.float64]:
    """The outputs as finite floats: NaN and infinities have no lowest set bit to compare."""
    if outputs.dtype.kind not in "iuf":
        raise InvalidParameterError("release", release, f"must return real numbers; got dtype {outputs.dtype}")
    values = outputs.astype(np.float64)
    if not np.all(np.isfinite(values)):
        raise InvalidParameterError(
            "release", release, "returned NaN or infinite outputs: the low-bit test needs finite numbers"
        )
    return values


def _lowest_bit_exponents(values: NDArray[Any]) -> NDArray[np.int64]:
    """For each float, the exponent j of its lowest set bit (value = odd * 2^j); zero maps to a sentinel."""
    floats = np.asarray(values, dtype=np.float64).ravel()
    mantissa, exponent = np.frexp(floats)  # floats = mantissa * 2^exponent, 0.5 <= |mantissa| < 1
    integer = np.abs(np.ldexp(mantissa, 53)).astype(np.int64)  # exact: an integer below 2^53
    nonzero = integer != 0
    lowest = np.zeros_like(integer)
    # trailing zeros of integer = log2(integer & -integer), exact for powers of two below 2^53
    lowest[nonzero] = np.log2((integer[nonzero] & -integer[nonzero]).astype(np.float64)).astype(np.int64)
    result = exponent.astype(np.int64) - 53 + lowest
    return np.where(nonzero, result, _ZERO)


def low_bit_test(
    release: Any,
    inputs: tuple[Any, Any] = (0.0, 1.0),
    *,
    samples: int = 200_000,
    alpha: float = 1e-6,
    rng: RandomSource | None = None,
    vectorized: bool = False,
) -> LowBitResult:
    """Test whether the low bits of float outputs depend on the input (Mironov 2012's attack).

    Draws ``samples`` outputs on each of the two ``inputs`` and compares the distributions of
    the position j of the lowest set bit (each output written as odd * 2^j) with a G-test of
    homogeneity on the 2 x K table, pooling categories whose expected count is below 5. Bits
    at or above the scale of the input difference, j >= floor(log2 |a - b|), and the output 0
    form one category: their law may legitimately differ by the e^epsilon factor of any event.

    Contract: a release on a public grid of spacing 2^k <= |a - b| whose inputs lie on the
    grid (``snap_to_grid`` plus integer noise, as dpkit's mechanisms do) has *exactly* the same
    law of pooled categories on both inputs: adding a multiple of 2^cutoff to an integer
    multiple of 2^k leaves every bit below 2^cutoff unchanged. It therefore passes with
    probability >= 1 - alpha (up to the chi-square approximation of the G statistic). A naive
    float release ``x + Laplace(b)`` fails: ``x + Y`` is rounded to the spacing of floats near
    ``x`` while ``Y`` alone keeps bits far below it near 0.

    ``passed`` is ``p_value >= alpha``. ``release``, ``rng`` and ``vectorized`` are as for
    :func:`estimate_epsilon` (a mechanism's outputs come from its vectorized sampler where that
    draws the law of its ``release``, as described there); vector outputs contribute every
    coordinate.

    >>> from dpkit.noise import InsecureSeededRandom, discrete_laplace, snap_to_grid
    >>> def grid_release(x, rng, size):
    ...     return snap_to_grid(np.full(size, x), -10) + np.ldexp(discrete_laplace(2.0**10, size, rng=rng), -10)
    >>> low_bit_test(grid_release, samples=5_000, vectorized=True, rng=InsecureSeededRandom(3)).passed
    True
    """
    from scipy.stats import chi2

    _check_release(release)
    n = check_integer("samples", samples, minimum=100)
    alpha_ = check_probability("alpha", alpha, open_low=True, open_high=True)
    if not isinstance(inputs, Sequence) or len(inputs) != 2:
        raise InvalidParameterError("inputs", inputs, "must be a pair of neighbouring inputs")
    try:
        gap = float(np.max(np.abs(np.asarray(inputs[0], dtype=np.float64) - np.asarray(inputs[1], dtype=np.float64))))
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError("inputs", inputs, "must be two numbers or two arrays of the same shape") from exc
    if not (math.isfinite(gap) and gap > 0):
        raise InvalidParameterError("inputs", inputs, "must be two different finite inputs")
    # Bits at or above the scale of the input difference (and the output 0) may legitimately
    # differ by the e^epsilon factor; below it a correct release's bits are translation invariant.
    cutoff = math.floor(math.log2(gap))
    source = resolve_source(rng)
    bits_a = _lowest_bit_exponents(_float_outputs(release, _draw(release, inputs[0], n, source, vectorized)))
    bits_b = _lowest_bit_exponents(_float_outputs(release, _draw(release, inputs[1], n, source, vectorized)))
    bits_a = np.where(bits_a >= cutoff, cutoff, bits_a)  # zero's sentinel is below every cutoff...
    bits_b = np.where(bits_b >= cutoff, cutoff, bits_b)
    bits_a[bits_a == _ZERO] = cutoff  # ...so pool it explicitly
    bits_b[bits_b == _ZERO] = cutoff
    categories, codes = np.unique(np.concatenate([bits_a, bits_b]), return_inverse=True)
    table = np.zeros((2, categories.size), dtype=np.float64)
    np.add.at(table[0], codes[: bits_a.size], 1.0)
    np.add.at(table[1], codes[bits_a.size :], 1.0)
    # Pool rare categories (in order of j) until each pooled column expects >= 5 in both rows.
    row_share = table.sum(axis=1, keepdims=True) / table.sum()
    pooled: list[NDArray[np.float64]] = []
    current = np.zeros(2)
    for column in table.T:
        current = current + column
        if np.all(current.sum() * row_share.ravel() >= 5.0):
            pooled.append(current)
            current = np.zeros(2)
    if current.sum() > 0:
        if pooled:
            pooled[-1] = pooled[-1] + current
        else:
            pooled.append(current)
    observed = np.array(pooled).T
    if observed.shape[1] < 2:
        return LowBitResult(1.0, 0.0, 0, True, n, alpha_)
    expected = observed.sum(axis=0, keepdims=True) * row_share
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(observed > 0, observed * np.log(observed / expected), 0.0)
    g_statistic = float(2.0 * terms.sum())
    dof = observed.shape[1] - 1
    p_value = float(chi2.sf(g_statistic, dof))
    return LowBitResult(p_value, g_statistic, dof, p_value >= alpha_, n, alpha_)


def on_grid(outputs: Any, exponent: int) -> bool:
    """Whether every output is a finite multiple of 2^exponent (a release on a public grid).

    >>> on_grid(np.array([0.25, -1.75, 3.0]), -2)
    True
    >>> on_grid(np.array([0.1]), -2)
    False
    >>> on_grid([1e300], -60), on_grid([3.0], -2000), on_grid([2.0**-1074], -1074), on_grid([2.0**-1074], -1073)
    (True, True, True, False)
    """
    k = check_integer("exponent", exponent)
    try:
        values = np.asarray(outputs)
    except (TypeError, ValueError) as exc:  # ragged
        raise InvalidParameterError("outputs", outputs, "must be a regular array of real numbers") from exc
    if values.dtype.kind not in "iuf":
        raise InvalidParameterError("outputs", outputs, "must be real numbers")
    values = values.astype(np.float64)
    if not np.all(np.isfinite(values)):
        return False
    # v = s 2^(e - 53) with an integer significand s (|s| < 2^53): v is a multiple of 2^k iff v = 0 or
    # its lowest set bit, 2^(e - 53 + trailing zeros of s), is at least 2^k. Read from the bits, not by
    # scaling v by 2^-k, which overflowed (1e300 on the grid of 2^-60) or underflowed.
    fraction, power = np.frexp(values)
    significand = np.abs(np.ldexp(fraction, 53)).astype(np.int64)
    nonzero = significand != 0
    lowest = np.where(nonzero, significand & -significand, 1)
    trailing = np.log2(lowest.astype(np.float64)).astype(np.int64)  # exact: a power of two
    return bool(np.all(~nonzero | (power.astype(np.int64) - 53 + trailing >= k)))
