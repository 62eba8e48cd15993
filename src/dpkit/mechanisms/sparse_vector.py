"""The sparse vector technique: answer "above or below the threshold?" for a stream of queries.

Only the queries found above a (noisy) threshold cost privacy: a run answers any number of
queries and stops after ``max_positives`` (c) positive answers, for epsilon in total.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_data, check_integer
from dpkit.mechanisms.exponential import (
    GridSelectionMechanism,
    check_flag,
    check_scores,
    noise_clamp,
    scale_up,
)
from dpkit.noise import RandomSource, discrete_laplace_units, resolve_source

__all__ = ["SparseVector", "SparseVectorRun"]

# The query noise may reach 2^128 grid units: each query then draws about 2 x 92 exact bits
# beyond the sampler's own 2^31 (see dpkit.noise.geometric_units). Only a max_positives beyond any use
# (above 2^45 at epsilon = 2^-60, 2^105 at epsilon = 1) needs more, and is refused.
_MAX_NOISE_UNITS = 2**128


class SparseVector(GridSelectionMechanism):
    """Sparse vector (AboveThreshold for c = 1): report which queries exceed a threshold, up to c of them.

    The version of Lyu, Su & Li (2017), "Understanding the sparse vector technique for
    differential privacy" (PVLDB), Alg. 1 and Thm. 2; AboveThreshold is Dwork & Roth (2014),
    Alg. 1. With epsilon_1 = epsilon_2 = epsilon / 2: the threshold gets noise rho of scale
    Delta / epsilon_1, drawn once per run (not redrawn after a positive), and each query
    noise nu_i of scale 2 c Delta / epsilon_2 (c Delta / epsilon_2 when ``monotonic=True``:
    all queries move in the same direction between neighbours). Query i is reported above
    when q_i + nu_i >= T + rho. After c positive answers the run refuses further queries.
    Queries may be chosen adaptively. Guarantee: epsilon-DP for a whole run, whatever the
    number of negative answers.

    Exactness: answers and threshold are rounded to the public grid 2^k (k = floor(log2 Delta)
    - 20, from the sensitivity only), the noises are exact discrete Laplace draws in grid units
    with scales rounded up from the formulas above with Delta replaced by U = floor(Delta / 2^k)
    + 1 grid units (U 2^k <= (1 + 2^-20) Delta at every epsilon), and comparisons are exact
    integer comparisons (a noise scale of 2^31 units or more is drawn in two exact parts, see
    :func:`~dpkit.noise.geometric_units`; Python integers where the draws leave int64). Answers minus the
    threshold are clipped to +-max(2^52, 2^15 t) units, t the larger noise scale: a 1-Lipschitz
    map, so the sensitivity is kept. Lyu et al.'s proof carries over
    to integers unchanged: fixing the noise of the negative queries, a shift of rho by U costs
    e^{epsilon_1} and keeps every negative answer negative on the neighbour, and a shift of each
    positive query's noise by 2U (U when monotonic) costs e^{epsilon_2 / c} and keeps it
    positive; all shifts are by whole grid units and the discrete Laplace law of scale t
    satisfies p(z) <= e^{d / t} p(z + d).

    ``epsilon`` may be anything in [2^-60, 1024]; ``max_positives`` must keep the query noise
    scale 4 c U / epsilon (2 c U / epsilon when monotonic) within 2^128 grid units, which only a
    c beyond any practical use exceeds (it is refused at construction, naming the largest c).

    Use: ``release(answers)`` runs a fresh run over a list of answers and returns the answers up
    to and including the c-th positive; interactively, ``run = mechanism.start()`` then
    ``run.process(answer)`` (``mechanism.process`` forwards to the run last started). Every
    run costs epsilon.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> mechanism = SparseVector(sensitivity=1.0, epsilon=1.0, threshold=50.0, max_positives=2)
    >>> mechanism.release([3.0, 80.0, 10.0, 95.0, 99.0], rng=InsecureSeededRandom(0))
    [False, True, False, True]
    """

    def __init__(
        self,
        sensitivity: float,
        epsilon: float,
        threshold: float,
        max_positives: int = 1,
        monotonic: bool = False,
    ) -> None:
        super().__init__(sensitivity, epsilon)
        threshold_array = check_data("threshold", threshold)
        if threshold_array.ndim != 0:
            raise InvalidParameterError("threshold", threshold, "must be a single finite real number")
        self._threshold = float(threshold_array)
        self._max_positives = check_integer("max_positives", max_positives, minimum=1)
        self._monotonic = check_flag("monotonic", monotonic)
        threshold_share = self._epsilon_exact / 2
        query_share = self._epsilon_exact - threshold_share
        factor = (1 if self._monotonic else 2) * self._max_positives
        self._calibrate()
        units = self._grid.sensitivity_units
        query_scale = factor * units / query_share
        if query_scale > _MAX_NOISE_UNITS:
            largest = Fraction(_MAX_NOISE_UNITS) * query_share / ((1 if self._monotonic else 2) * units)
            raise InvalidParameterError(
                "max_positives",
                max_positives,
                f"must be at most {math.floor(largest)} at epsilon={self._epsilon!r} and sensitivity="
                f"{self._sensitivity!r} (beyond, the query noise scale would exceed 2**128 grid steps)",
            )
        self._threshold_scale = scale_up(units / threshold_share)
        self._query_scale = scale_up(query_scale)
        self._clip = noise_clamp(max(self._threshold_scale, self._query_scale))
        self._threshold_units = int(self._grid.snap("threshold", np.asarray([self._threshold]))[0])
        self._current: SparseVectorRun | None = None

    @property
    def threshold(self) -> float:
        return self._threshold

    @property
    def max_positives(self) -> int:
        return self._max_positives

    @property
    def monotonic(self) -> bool:
        return self._monotonic

    @property
    def threshold_noise_scale_units(self) -> float:
        """Scale of the threshold's discrete Laplace noise, in grid units (>= U / (epsilon / 2))."""
        return self._threshold_scale

    @property
    def query_noise_scale_units(self) -> float:
        """Each query's discrete Laplace noise scale, grid units: >= 2cU / (eps / 2) (cU / (eps / 2) if monotonic)."""
        return self._query_scale

    def start(self, *, rng: RandomSource | None = None) -> SparseVectorRun:
        """Begin a new run (draws the threshold noise; costs epsilon) and make it the current one."""
        run = SparseVectorRun(self, resolve_source(rng))
        self._current = run
        return run

    def process(self, query_answer: Any) -> bool:
        """Answer one query in the run last started by :meth:`start`."""
        if self._current is None:
            raise InvalidParameterError("query_answer", query_answer, "no run started: call start() first")
        return self._current.process(query_answer)

    def release(self, value: Any, *, rng: RandomSource | None = None) -> list[bool]:
        """A fresh run over the answers ``value``: the above/below answers up to the c-th positive.

        All answers are validated before any noise is drawn. Costs epsilon.
        """
        answers = check_scores(value, "query_answers")
        run = SparseVectorRun(self, resolve_source(rng))
        results: list[bool] = []
        for answer in answers:
            results.append(run.process(answer))
            if run.exhausted:
                break
        return results

    def __repr__(self) -> str:
        return (
            f"SparseVector(sensitivity={self._sensitivity}, epsilon={self._epsilon}, threshold={self._threshold}, "
            f"max_positives={self._max_positives}, monotonic={self._monotonic})"
        )


class SparseVectorRun:
    """One run of a :class:`SparseVector`: holds the noisy threshold and the count of positives."""

    def __init__(self, mechanism: SparseVector, rng: RandomSource) -> None:
        self._mechanism = mechanism
        self._rng = rng
        self._threshold_noise = int(discrete_laplace_units(mechanism._threshold_scale, 1, rng)[0])
        self._positives = 0
        self._answered = 0

    @property
    def positives(self) -> int:
        """Number of positive answers given so far."""
        return self._positives

    @property
    def answered(self) -> int:
        """Number of queries answered so far."""
        return self._answered

    @property
    def exhausted(self) -> bool:
        """True once c positive answers were given: the run answers no more queries."""
        return self._positives >= self._mechanism._max_positives

    def process(self, query_answer: Any) -> bool:
        """True when the noisy answer is at or above the noisy threshold."""
        mechanism = self._mechanism
        if self.exhausted:
            raise InvalidParameterError(
                "query_answer",
                query_answer,
                f"this sparse vector run already gave its {mechanism._max_positives} positive answer(s) "
                "(max_positives) and answers no more queries; start a new run, which costs another epsilon",
            )
        value = check_data("query_answer", query_answer)
        if value.ndim != 0 or (value.dtype.kind in "iu" and abs(int(value)) >= 2**53):
            raise InvalidParameterError(
                "query_answer", query_answer, "must be a single finite real number (|x| < 2**53)"
            )
        units = int(mechanism._grid.snap("query_answer", np.asarray([value], dtype=np.float64))[0])
        # (q - T) in grid units, clipped to +-clip: exact Python integers, and 1-Lipschitz in q.
        clip = mechanism._clip
        relative = max(-clip, min(clip, units - mechanism._threshold_units))
        noise = int(discrete_laplace_units(mechanism._query_scale, 1, self._rng)[0])
        above = relative + noise >= self._threshold_noise
        self._answered += 1
        if above:
            self._positives += 1
        return bool(above)
