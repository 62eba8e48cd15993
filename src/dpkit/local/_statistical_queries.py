"""Simulating statistical queries under local DP (seed 000, "Statistical Queries"; Kasiviswanathan,
Lee, Nissim, Raskhodnikova & Smith 2011, "What can we learn privately?", Sec. 5).

A statistical query f: X -> [0, 1] asks for E_D[f(x)] within a tolerance tau. Each query is answered
from its own disjoint batch of m people: person i draws b_i ~ Bernoulli(f(x_i)) (exactly), sends b_i
through binary randomized response (keep with probability pi = e^eps/(e^eps + 1), exact), and the
collector debiases: (y_i - (1 - pi)) / (2 pi - 1) has mean E_D f and lies in an interval of width
W = (e^eps + 1)/(e^eps - 1). Hoeffding's inequality with a union bound over t queries: with
m = ceil(W^2 ln(2t / beta) / (2 tau^2)), every answer is within tau with probability >= 1 - beta.
n = t m is about 2 t ln(2t/beta) / (eps^2 tau^2) for small eps. Each person answers one query once:
eps-LDP.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_epsilon, check_integer, check_probability
from dpkit.local._coins import bernoulli_dyadic
from dpkit.mechanisms.randomized_response import bernoulli_keep
from dpkit.noise import RandomSource, resolve_source

__all__ = ["StatisticalQueryAnswers", "samples_needed", "simulate_statistical_queries"]


@dataclass(frozen=True)
class StatisticalQueryAnswers:
    """Answers (one per query), the batch size m, people used, and the failure probability beta."""

    answers: NDArray[np.float64]
    batch_size: int
    samples_used: int
    failure_probability: float


def samples_needed(queries: int, epsilon: float, tolerance: float, failure_probability: float = 0.05) -> int:
    """People per query, m = ceil(W^2 ln(2t/beta) / (2 tau^2)), W = (e^eps + 1)/(e^eps - 1).

    >>> samples_needed(5, 1.0, 0.1)
    1241
    """
    queries = check_integer("queries", queries, minimum=1)
    eps = check_epsilon(epsilon)
    tau = check_probability("tolerance", tolerance, open_low=True)
    beta = check_probability("failure_probability", failure_probability, open_low=True, open_high=True)
    width = 1.0 / math.tanh(eps / 2)  # (e^eps + 1)/(e^eps - 1), without overflow above eps ~ 709
    needed = width * width * math.log(2 * queries / beta) / (2 * tau * tau)
    # a relative margin of 1e-13 covers the few ulps of rounding above, so that m is never one short
    return math.ceil(needed * (1.0 + 1e-13))


def simulate_statistical_queries(
    queries: Sequence[Callable[[NDArray[Any]], Any]],
    data: Any,
    epsilon: float,
    tolerance: float,
    rng: RandomSource | None = None,
    *,
    failure_probability: float = 0.05,
) -> StatisticalQueryAnswers:
    """Answer t statistical queries (each maps the rows of ``data`` to values in [0, 1]) under eps-LDP.

    Uses the first t * m rows of ``data`` (rows are people, samples of D); query j sees rows
    j m .. (j + 1) m - 1 only. All answers are within ``tolerance`` of E_D f_j with probability
    at least 1 - ``failure_probability``.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> data = np.random.default_rng(12345).random(20_000)
    >>> result = simulate_statistical_queries([lambda x: x, lambda x: x > 0.5], data, 1.0, 0.1,
    ...                                       rng=InsecureSeededRandom(0))
    >>> result.batch_size, bool(np.all(np.abs(result.answers - 0.5) < 0.1))
    (1026, True)
    """
    if callable(queries) or not isinstance(queries, Sequence) or not queries or not all(callable(q) for q in queries):
        raise InvalidParameterError("queries", queries, "must be a non-empty sequence of callables")
    rows = np.asarray(data)
    if rows.ndim == 0:
        raise InvalidParameterError("data", data, "must be an array of rows")
    eps = check_epsilon(epsilon)
    m = samples_needed(len(queries), eps, tolerance, failure_probability)
    needed = m * len(queries)
    if rows.shape[0] < needed:
        raise InvalidParameterError("data", rows.shape[0], f"needs at least t * m = {needed} rows")
    source = resolve_source(rng)
    keep = 1.0 / (1.0 + math.exp(-eps))
    contrast = math.tanh(eps / 2)  # 2 keep - 1, without cancellation at small epsilon
    answers = np.empty(len(queries))
    for j, query in enumerate(queries):
        batch = rows[j * m : (j + 1) * m]
        values = np.asarray(query(batch), dtype=np.float64).reshape(-1)
        if values.size != m or not np.all((values >= 0) & (values <= 1)):
            raise InvalidParameterError(f"queries[{j}]", query, "must map each row to a value in [0, 1]")
        bits = bernoulli_dyadic(values, source)
        kept = bernoulli_keep(eps, 2, m, rng=source)
        reports = np.where(kept, bits, ~bits)
        answers[j] = (np.mean(reports) - (1 - keep)) / contrast
    return StatisticalQueryAnswers(answers, m, needed, failure_probability)
