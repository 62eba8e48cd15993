"""Implicit randomness: the sensitivity as a random variable of the data-generating distribution.

Dandekar, Basu & Bressan, "Differential Privacy at Risk", PoPETs 2021(1), Sec. 4.2-4.3 (seed 001).
Neighbouring pairs ``(x, y)`` drawn from the data-generating distribution give a random
sensitivity ``D = |f(x) - f(y)|_1``. Its CDF ``F`` is estimated by the empirical CDF ``F_n`` of
``n`` samples; by the Dvoretzky-Kiefer-Wolfowitz inequality with Massart's constant,
``P[sup |F_n - F| > rho] <= 2 e^{-2 n rho^2}``, so the band ``F_n +- rho`` holds with confidence
``alpha = 1 - 2 e^{-2 n rho^2}``.

**Coupled confidence.** Calibrate the Laplace mechanism with ``epsilon0`` and a sensitivity
``s`` (a sampled value, by default the largest). For a pair of sensitivity ``D`` the mechanism
behaves like the ``epsilon0 D / s``-calibrated one, hence is ``epsilon``-DP with confidence
``g(D) = c_k(epsilon; epsilon0 D / s)`` (1 if ``epsilon0 D / s <= epsilon``), a non-increasing
function of ``D``. On the event that the DKW band holds (probability >= alpha), ``F >= F_n - rho``,
and the smallest value of ``E[g(D)]`` over such ``F`` is reached by the stochastically largest
one, ``max(F_n - rho, 0)`` with the missing mass ``rho`` at ``D = +inf`` (where ``g = 0``). The
**confidence** returned is ``alpha`` times that lower expectation: a lower bound on the probability
(over the sample, the pair and the noise) that the mechanism is ``epsilon``-DP.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_epsilon, check_integer, check_positive, check_probability
from dpkit.noise import RandomSource, resolve_source
from dpkit.risk._laplace import laplace_confidence

__all__ = ["SensitivityDistribution", "coupled_confidence", "dkw_confidence", "dkw_sample_size", "sampled_sensitivity"]


def dkw_sample_size(rho: float, alpha: float) -> int:
    """Returns a **sample size**: the least ``n`` with ``1 - 2 e^{-2 n rho^2} >= alpha``.

    ``n = ceil(ln(2 / (1 - alpha)) / (2 rho^2))`` (DKW inequality, Massart's constant).

    >>> dkw_sample_size(0.05, 0.95)
    738
    """
    r = check_probability("rho", rho, open_low=True, open_high=True)
    a = check_probability("alpha", alpha, open_low=True, open_high=True)
    n = math.ceil(math.log(2.0 / (1.0 - a)) / (2.0 * r * r))
    return max(1, n)


def dkw_confidence(n: int, rho: float) -> float:
    """Returns a **confidence**: ``alpha = max(0, 1 - 2 e^{-2 n rho^2})``, that the band ``F_n +- rho`` holds.

    >>> dkw_confidence(738, 0.05) >= 0.95
    True
    """
    size = check_integer("n", n, minimum=1)
    r = check_probability("rho", rho, open_low=True, open_high=True)
    return max(0.0, 1.0 - 2.0 * math.exp(-2.0 * size * r * r))


@dataclass(frozen=True)
class SensitivityDistribution:
    """An empirical distribution of sampled sensitivities with its DKW band (``rho``, ``alpha``).

    >>> dist = SensitivityDistribution(np.array([0.5, 1.0, 1.0, 2.0]), rho=0.1)
    >>> dist.cdf(1.0), dist.maximum
    (0.75, 2.0)
    """

    samples: NDArray[np.float64]
    rho: float

    def __post_init__(self) -> None:
        values = np.sort(np.asarray(self.samples, dtype=np.float64).ravel())
        if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values < 0):
            raise InvalidParameterError("samples", self.samples, "must be a non-empty array of finite values >= 0")
        check_probability("rho", self.rho, open_low=True, open_high=True)
        object.__setattr__(self, "samples", values)

    @property
    def n(self) -> int:
        return int(self.samples.size)

    @property
    def alpha(self) -> float:
        """Returns a **confidence**: that the true CDF lies within ``rho`` of the empirical one."""
        return dkw_confidence(self.n, self.rho)

    @property
    def maximum(self) -> float:
        return float(self.samples[-1])

    def cdf(self, value: float) -> float:
        """The empirical CDF ``F_n(value)``."""
        return float(np.searchsorted(self.samples, value, side="right")) / self.n

    def band(self, value: float) -> tuple[float, float]:
        """``(max(F_n - rho, 0), min(F_n + rho, 1))`` at ``value``."""
        f = self.cdf(value)
        return max(0.0, f - self.rho), min(1.0, f + self.rho)

    def quantile(self, level: float) -> float:
        """The empirical ``level``-quantile (smallest sample with ``F_n >= level``)."""
        q = check_probability("level", level)
        index = min(self.n - 1, max(0, math.ceil(q * self.n) - 1))
        return float(self.samples[index])


def sampled_sensitivity(
    query: Callable[[Any], Any],
    sampler: Callable[[RandomSource], tuple[Any, Any]],
    n: int,
    *,
    rho: float = 0.05,
    rng: RandomSource | None = None,
) -> SensitivityDistribution:
    """Returns a **distribution**: ``n`` sampled sensitivities ``|query(x) - query(y)|_1``.

    ``sampler(rng)`` draws one neighbouring pair ``(x, y)`` from the data-generating
    distribution with the dpkit random source ``rng`` (secure by default). The result carries
    the DKW band of half-width ``rho``; see :func:`dkw_sample_size` to choose ``n``.

    >>> from dpkit.noise import InsecureSeededRandom, uniform_integers
    >>> def pair(rng):
    ...     data = uniform_integers(10, 20, rng=rng)
    ...     return data, data[1:]
    >>> dist = sampled_sensitivity(lambda d: float(np.mean(d)), pair, 50, rng=InsecureSeededRandom(1))
    >>> dist.n, dist.maximum < 10
    (50, True)
    """
    size = check_integer("n", n, minimum=1)
    source = resolve_source(rng)
    values = np.empty(size, dtype=np.float64)
    for i in range(size):
        x, y = sampler(source)
        values[i] = float(
            np.sum(np.abs(np.asarray(query(x), dtype=np.float64) - np.asarray(query(y), dtype=np.float64)))
        )
    return SensitivityDistribution(values, rho)


def coupled_confidence(
    epsilon: float,
    epsilon0: float,
    distribution: SensitivityDistribution,
    calibration_sensitivity: float | None = None,
    dimension: int = 1,
) -> float:
    """Returns a **confidence**: the mechanism calibrated with a sampled sensitivity is ``epsilon``-DP.

    Both sources of randomness (the data through ``distribution``, the noise through
    :func:`laplace_confidence`) are accounted for, see the module docstring.
    ``calibration_sensitivity`` defaults to the largest sample.

    >>> dist = SensitivityDistribution(np.linspace(0.1, 1.0, 1000), rho=0.05)
    >>> 0 < coupled_confidence(0.5, 1.0, dist) < dist.alpha
    True
    """
    eps = check_positive("epsilon", epsilon, allow_zero=True)
    eps0 = check_epsilon(epsilon0, "epsilon0")
    k = check_integer("dimension", dimension, minimum=1)
    scale = distribution.maximum if calibration_sensitivity is None else calibration_sensitivity
    s = check_positive("calibration_sensitivity", scale)
    values, counts = np.unique(distribution.samples, return_counts=True)
    upper = np.cumsum(counts) / distribution.n
    lower = np.maximum(upper - distribution.rho, 0.0)  # the stochastically largest admissible CDF
    masses = np.diff(np.concatenate([[0.0], lower]))
    expectation = 0.0
    for value, mass in zip(values, masses, strict=True):
        if mass <= 0.0:
            continue
        effective = eps0 * float(value) / s
        expectation += float(mass) * (1.0 if effective <= eps else laplace_confidence(eps, effective, k))
    return distribution.alpha * min(1.0, expectation)
