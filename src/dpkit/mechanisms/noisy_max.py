"""Report-noisy-max and permute-and-flip: private selection of a high-scoring candidate.

Both run on the public score grid of :mod:`.exponential` (scores rounded to multiples of 2^k,
k = floor(log2 Delta) - 20, calibrated to the effective sensitivity U 2^k <= (1 + 2^-20) Delta
with U = floor(Delta / 2^k) + 1), with exact integer noise or exact Bernoulli trials, so their
released laws carry no floating-point gap, at every epsilon in [2^-60, 1024].
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InternalError, InvalidParameterError
from dpkit.mechanisms.exponential import (
    GridSelectionMechanism,
    bernoulli_exp_multiple,
    check_candidates,
    check_flag,
    clamp_cap,
    noise_clamp,
    rate_down,
    scale_up,
)
from dpkit.noise import (
    RandomSource,
    discrete_laplace_units,
    geometric_units,
    permutation,
    resolve_source,
    uniform_integers,
)

__all__ = ["PermuteAndFlip", "ReportNoisyMax"]

_PF_CHUNK = 256
_PF_MAX_EXACT_CANDIDATES = 4096


class _SelectionMechanism(GridSelectionMechanism):
    """Shared parameters and grid of report-noisy-max and permute-and-flip."""

    def __init__(self, sensitivity: float, epsilon: float, candidates: Sequence[Any] | None) -> None:
        super().__init__(sensitivity, epsilon)
        self._candidates = check_candidates(candidates)
        self._calibrate()

    @property
    def candidates(self) -> tuple[Any, ...] | None:
        return self._candidates


class ReportNoisyMax(_SelectionMechanism):
    """Report-noisy-max: add independent noise to every score and release the argmax (only the argmax).

    Dwork & Roth (2014), Sec. 3.3, Claim 3.9. Here the scores are rounded to the public grid
    2^k and the noise is exact integer noise in grid units of scale t = 2U / epsilon
    (U / epsilon with ``monotonic=True``), U = floor(Delta / 2^k) + 1, so t 2^k is within a
    factor 1 + 2^-20 of 2 Delta / epsilon (Delta / epsilon) at every epsilon. Scales of 2^31
    grid units and more (epsilon below about 1e-3) are drawn exactly in two parts and added to the scores
    in exact integer arithmetic (:func:`~dpkit.noise.geometric_units`):

    - ``noise="exponential"`` (default): one-sided geometric noise P(Z = z) ∝ e^{-z/t}, z >= 0,
      the discrete analogue of exponential noise. With continuous exponential noise of scale
      2 Delta / epsilon, report-noisy-max is exactly the permute-and-flip mechanism in law
      (Ding, Kifer, Steinke et al. 2021, "The permute-and-flip mechanism is identical to
      report-noisy-max with exponential noise"; McKenna & Sheldon 2020). (It is Gumbel noise
      that gives the exponential mechanism.)
    - ``noise="laplace"``: two-sided discrete Laplace noise P(Z = z) ∝ e^{-|z|/t}.

    Ties between noisy maxima (they happen with integer noise) are broken uniformly at random.

    Guarantee: epsilon-DP. Proof (Dwork & Roth's argument, adapted to ties): fix a candidate i
    and the noise Z_j of every other candidate, and let M = max_{j != i}(c_j + Z_j), T the
    number of j != i attaining M. Given Z_i = v, i is released with probability
    h(v) = 1 if c_i + v > M, 1/(T + 1) if c_i + v = M, 0 otherwise. For a neighbour c'
    (|c'_j - c_j| <= U for all j), c'_i + v + 2U >= c_i + v + U and M' <= M + U, so
    h'(v + 2U) >= h(v): the strict case is clear, and in the tie case equality forces
    c'_i = c_i - U and M' = M + U, whose attaining j (c'_j = c_j + U) are among the T that
    attained M, so T' <= T. Hence P'(i) = sum_w p(w) h'(w) >= sum_v p(v + 2U) h'(v + 2U)
    >= e^{-2U/t} sum_v p(v) h(v) = e^{-epsilon} P(i), using p(v + 2U) >= e^{-2U/t} p(v) (both
    noises; for the geometric law, for v >= 0, and the sum over w >= 2U drops only nonnegative
    terms). For monotone scores (all c'_j >= c_j, or all <=) the same steps work with a shift
    of U, whence t = U / epsilon. The other direction is symmetric.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> ReportNoisyMax(sensitivity=1.0, epsilon=1.0).release([3.0, 9.0, 4.0], rng=InsecureSeededRandom(0))
    1
    """

    def __init__(
        self,
        sensitivity: float,
        epsilon: float,
        noise: str = "exponential",
        candidates: Sequence[Any] | None = None,
        monotonic: bool = False,
    ) -> None:
        if noise not in ("exponential", "laplace"):
            raise InvalidParameterError("noise", noise, "must be 'exponential' or 'laplace'")
        self._monotonic = check_flag("monotonic", monotonic)
        factor = 1 if self._monotonic else 2
        super().__init__(sensitivity, epsilon, candidates)
        self._noise = noise
        self._scale = scale_up(factor * self._grid.sensitivity_units / self._epsilon_exact)
        self._cap = noise_clamp(self._scale)

    @property
    def noise(self) -> str:
        return self._noise

    @property
    def monotonic(self) -> bool:
        return self._monotonic

    @property
    def noise_scale_units(self) -> float:
        """t, the noise scale in grid units (>= 2U / epsilon, or U / epsilon when monotonic)."""
        return self._scale

    def release(self, value: Any, *, rng: RandomSource | None = None) -> Any:
        """The candidate (index, or label) with the largest noisy score for the score vector ``value``."""
        # Scores relative to the maximum, clamped below at -cap (2^52, or 2^15 noise scales for a
        # larger noise): max(n_o, n_max - cap) has the same sensitivity, and the argmax is
        # unchanged by the common shift. The noise is int64 below 2^62 (|relative| <= 2^52: the sum fits)
        # and Python integers beyond: exact integer arithmetic at any scale.
        relative = -self._gaps(value)
        source = resolve_source(rng)
        sampler = geometric_units if self._noise == "exponential" else discrete_laplace_units
        noisy = relative + sampler(self._scale, relative.size, source)
        winners = np.flatnonzero(noisy == noisy.max())
        if winners.size == 1:
            return self._label(int(winners[0]))
        return self._label(int(winners[uniform_integers(winners.size, 1, rng=source)[0]]))

    def __repr__(self) -> str:
        return (
            f"ReportNoisyMax(sensitivity={self._sensitivity}, epsilon={self._epsilon}, noise={self._noise!r}, "
            f"candidates={self._candidates!r}, monotonic={self._monotonic})"
        )


class PermuteAndFlip(_SelectionMechanism):
    """Permute-and-flip (McKenna & Sheldon 2020, NeurIPS, Alg. 1).

    Visit the candidates in a uniformly random order and release candidate r with probability
    exp(epsilon (s_r - s*) / (2 Delta)), s* the largest score; the best candidate always stops
    the walk. epsilon-DP (McKenna & Sheldon 2020, Thm. 1), and its expected score is never
    below the exponential mechanism's at the same epsilon (their Thm. 2). It equals
    report-noisy-max with exponential noise of scale 2 Delta / epsilon in law (Ding et al. 2021).

    As in :class:`~dpkit.mechanisms.exponential.Exponential`, scores are rounded to the public
    grid 2^k, the rate is calibrated to the effective sensitivity U 2^k <= Delta + 2^k and
    rounded down, and each flip is an exact Bernoulli(exp(-x)) trial, so the released law is
    exactly :meth:`probabilities` and its epsilon is at most ``epsilon``.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> mechanism = PermuteAndFlip(sensitivity=1.0, epsilon=1.0, candidates=["a", "b", "c"])
    >>> mechanism.release([1.0, 10.0, 2.0], rng=InsecureSeededRandom(1))
    'b'
    >>> mechanism.probabilities([1.0, 10.0, 2.0]).round(4).tolist()
    [0.0055, 0.9854, 0.0091]
    """

    def __init__(self, sensitivity: float, epsilon: float, candidates: Sequence[Any] | None = None) -> None:
        super().__init__(sensitivity, epsilon, candidates)
        self._rate = rate_down(self._epsilon_exact / (2 * self._grid.sensitivity_units))
        self._cap = clamp_cap(self._rate)

    def release(self, value: Any, *, rng: RandomSource | None = None) -> Any:
        """One candidate (index, or label) for the score vector ``value``."""
        gaps = self._gaps(value, self._cap)
        source = resolve_source(rng)
        order = permutation(gaps.size, rng=source)
        # Flips are drawn a chunk at a time; flips after the first success are never looked at,
        # so drawing them does not change the law.
        for start in range(0, order.size, _PF_CHUNK):
            visited = order[start : start + _PF_CHUNK]
            heads = np.flatnonzero(bernoulli_exp_multiple(self._rate, gaps[visited], source))
            if heads.size:
                return self._label(int(visited[heads[0]]))
        raise InternalError("permute-and-flip visited every candidate without stopping at the best one")

    def probabilities(self, scores: Any) -> NDArray[np.float64]:
        """The exact output law of :meth:`release`, as floats (at most 4096 candidates).

        With p_r = exp(-rate * gap_r), candidate r is released when it is accepted and every
        candidate visited before it was rejected. Giving each candidate an independent uniform
        arrival time x, the others precede r independently with probability x, so
        P(r) = p_r * integral_0^1 prod_{j != r} (1 - x p_j) dx. The integrand is a polynomial of
        degree n - 1, integrated exactly by Gauss-Legendre quadrature with ceil(n / 2) + 1 nodes.
        For tests and analysis only: the probabilities depend on the private scores.
        """
        gaps = self._gaps(scores, self._cap)
        n = gaps.size
        if n > _PF_MAX_EXACT_CANDIDATES:
            raise InvalidParameterError(
                "scores",
                f"<{n} scores>",
                f"probabilities are computed for at most {_PF_MAX_EXACT_CANDIDATES} candidates",
            )
        accept = np.exp(-self._rate * gaps.astype(np.float64))
        x, w = _legendre_on_unit_interval(n // 2 + 2)
        logs = np.log1p(-np.outer(accept, x))  # nodes lie strictly inside (0, 1)
        others = np.exp(logs.sum(axis=0)[None, :] - logs)
        law = accept * (others @ w)
        return law / law.sum()

    def __repr__(self) -> str:
        return (
            f"PermuteAndFlip(sensitivity={self._sensitivity}, epsilon={self._epsilon}, candidates={self._candidates!r})"
        )


@functools.lru_cache(maxsize=8)
def _legendre_on_unit_interval(count: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Gauss-Legendre nodes and weights for integrals over (0, 1) (read-only, cached by count).

    numpy's eigenvalue method up to 1,024 nodes; above, scipy's (numpy took 16 s for the 2,050
    nodes of 4,096 candidates, scipy 0.3 s; their integrals of x^4099 agree to 3e-10 relative).
    """
    if count <= 1024:
        nodes, weights = np.polynomial.legendre.leggauss(count)
    else:
        from scipy.special import roots_legendre

        nodes, weights = roots_legendre(count)
    x, w = (nodes + 1.0) / 2.0, weights / 2.0
    x.flags.writeable = w.flags.writeable = False
    return x, w
