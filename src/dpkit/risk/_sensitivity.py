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

**The paper's form.** :func:`paper_coupled_confidence` is the paper's ``gamma_3`` as the authors
compute it (``formulae.py::calculate_gamma`` of github.com/ashishdandekar/Privacy-at-risk):
``alpha c_k(epsilon; (1 + 2 rho / Delta*) epsilon0)``. It assumes that every neighbouring pair has
sensitivity at most ``Delta* + 2 rho``, which the DKW band does not give; it is kept for comparison
and reproduction, and :func:`coupled_confidence` is the bound to rely on (see its docstring).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_epsilon, check_integer, check_positive, check_probability
from dpkit.noise import RandomSource, resolve_source
from dpkit.risk._laplace import check_dimension, confidence_unchecked
from dpkit.risk._numeric import scaled_product

__all__ = [
    "SensitivityDistribution",
    "coupled_confidence",
    "dkw_confidence",
    "dkw_sample_size",
    "paper_coupled_confidence",
    "sampled_sensitivity",
]


def dkw_sample_size(rho: float, alpha: float) -> int:
    """Returns a **sample size**: the least ``n`` with ``1 - 2 e^{-2 n rho^2} >= alpha``.

    ``n = ceil(ln(2 / (1 - alpha)) / (2 rho^2))`` (DKW inequality, Massart's constant).

    >>> dkw_sample_size(0.05, 0.95)
    738
    """
    r = check_probability("rho", rho, open_low=True, open_high=True)
    a = check_probability("alpha", alpha, open_low=True, open_high=True)
    log_term = math.log(2.0 / (1.0 - a))
    if r >= 1e-150:
        # a relative margin of 1e-13 covers the rounding of the quotient: n is never one short
        n = math.ceil(log_term / (2.0 * r * r) * (1.0 + 1e-13))
    else:  # 2 rho^2 underflows (ZeroDivisionError): the same quotient in exact rationals, n beyond 1e299
        n = math.ceil(Fraction(log_term) / (2 * Fraction(r) ** 2) * (1 + Fraction(1, 10**13)))
    return max(1, n)


def dkw_confidence(n: int, rho: float) -> float:
    """Returns a **confidence**: ``alpha = max(0, 1 - 2 e^{-2 n rho^2})``, that the band ``F_n +- rho`` holds.

    >>> dkw_confidence(738, 0.05) >= 0.95
    True
    """
    size = check_integer("n", n, minimum=1)
    r = check_probability("rho", rho, open_low=True, open_high=True)
    # the exponent 2 n rho^2 as an exact rational rounded once: n may be any Python int (float(10**400)
    # raised OverflowError) and rho^2 may underflow (an n of 10**400 times 0.0). Rounded down (a
    # confidence is a lower bound): the exponent is shrunk by a relative 1e-15, more than its rounding
    # and exp's, and the difference is stepped one ulp towards 0 (1.0, when 2 e^{-2 n rho^2} < 2^-54,
    # is kept: alpha = 1 is allowed for large n)
    try:
        exponent = float(2 * size * Fraction(r) ** 2)
    except OverflowError:
        exponent = math.inf
    value = 1.0 - 2.0 * math.exp(-exponent * (1.0 - 1e-15))
    return max(0.0, value if value == 1.0 else math.nextafter(value, -math.inf))


@dataclass(frozen=True, eq=False)
class SensitivityDistribution:
    """An empirical distribution of sampled sensitivities with its DKW band (``rho``, ``alpha``).

    >>> dist = SensitivityDistribution(np.array([0.5, 1.0, 1.0, 2.0]), rho=0.1)
    >>> dist.cdf(1.0), dist.maximum
    (0.75, 2.0)
    """

    samples: NDArray[np.float64]
    rho: float

    def __post_init__(self) -> None:
        allowed = "must be a non-empty array of finite real values >= 0"
        try:
            array = np.asarray(self.samples)
        except (TypeError, ValueError) as exc:  # ragged
            raise InvalidParameterError("samples", self.samples, allowed) from exc
        if array.dtype.kind not in "iuf":  # strings, booleans, complex numbers, objects
            raise InvalidParameterError("samples", self.samples, allowed)
        values = np.sort(array.astype(np.float64).ravel())
        if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values < 0):
            raise InvalidParameterError("samples", self.samples, allowed)
        check_probability("rho", self.rho, open_low=True, open_high=True)
        object.__setattr__(self, "samples", values)

    def __eq__(self, other: object) -> bool:
        # the generated __eq__ would compare the arrays element-wise and raise on their truth value
        if not isinstance(other, SensitivityDistribution):
            return NotImplemented
        return self.rho == other.rho and np.array_equal(self.samples, other.samples)

    __hash__ = None  # type: ignore[assignment]

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
        """The empirical CDF ``F_n(value)`` (``value`` a real number, +-inf allowed)."""
        allowed = "must be a real number (not NaN)"
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
            raise InvalidParameterError("value", value, allowed)
        try:
            point = float(value)
        except OverflowError:  # an int or Fraction beyond the float range (math.isnan raised) is beyond every sample
            point = math.inf if value > 0 else -math.inf
        if math.isnan(point):
            raise InvalidParameterError("value", value, allowed)
        return float(np.searchsorted(self.samples, point, side="right")) / self.n

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
    if not callable(query):
        raise InvalidParameterError("query", query, "must be a callable dataset -> number or array of numbers")
    if not callable(sampler):
        raise InvalidParameterError("sampler", sampler, "must be a callable rng -> (x, y), a neighbouring pair")
    check_probability("rho", rho, open_low=True, open_high=True)
    source = resolve_source(rng)
    values = np.empty(size, dtype=np.float64)
    for i in range(size):
        pair = sampler(source)
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise InvalidParameterError("sampler", sampler, f"must return a pair (x, y); returned {pair!r}")
        answer_x, answer_y = _query_answer(query, pair[0]), _query_answer(query, pair[1])
        if answer_x.shape != answer_y.shape:
            raise InvalidParameterError(
                "query",
                query,
                f"must answer both datasets with the same shape; got {answer_x.shape} and {answer_y.shape}",
            )
        with np.errstate(over="ignore", invalid="ignore"):
            values[i] = float(np.sum(np.abs(answer_x - answer_y)))
        if not math.isfinite(values[i]):  # NaN or infinite answers, or a distance beyond the float range
            raise InvalidParameterError(
                "query",
                query,
                f"must answer with finite values at a finite L1 distance; the pair {i} is at {values[i]}",
            )
    return SensitivityDistribution(values, rho)


def _query_answer(query: Callable[[Any], Any], dataset: Any) -> NDArray[np.float64]:
    allowed = "must return a real number or an array of real numbers"
    answer = query(dataset)
    try:
        array = np.asarray(answer)
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError("query", query, f"{allowed}; returned {answer!r}") from exc
    if array.dtype.kind not in "iuf":
        raise InvalidParameterError("query", query, f"{allowed}; returned {answer!r}")
    return array.astype(np.float64)


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
    k = check_dimension(dimension)
    if not isinstance(distribution, SensitivityDistribution):
        raise InvalidParameterError(
            "distribution", distribution, "must be a SensitivityDistribution (see sampled_sensitivity)"
        )
    if calibration_sensitivity is None:
        if distribution.maximum == 0.0:  # the default calibration: named as the user gave it
            raise InvalidParameterError(
                "distribution",
                distribution,
                "must have a positive sample to calibrate with (all are 0); or pass calibration_sensitivity > 0",
            )
        s = distribution.maximum
    else:
        s = check_positive("calibration_sensitivity", calibration_sensitivity)
    values, counts = np.unique(distribution.samples, return_counts=True)
    upper = np.cumsum(counts) / distribution.n
    lower = np.maximum(upper - distribution.rho, 0.0)  # the stochastically largest admissible CDF
    masses = np.diff(np.concatenate([[0.0], lower]))
    expectation = 0.0
    for value, mass in zip(values, masses, strict=True):
        if mass <= 0.0:
            continue
        expectation += float(mass) * _pair_confidence(eps, eps0, float(value), s, k)
    return distribution.alpha * min(1.0, expectation)


def _pair_confidence(eps: float, eps0: float, sensitivity: float, calibration: float, k: int) -> float:
    """``c_k(eps; eps0 D / s)`` for a pair of sensitivity ``D``: 1 for ``D = 0``.

    The calibration ``eps0 D / s`` may leave the float range: beyond it (inf) the confidence is the
    limit ``F_k(eps)``, rounded down; below it (0.0 for a true value under 2.5e-324) the pair is
    ``eps``-DP for every ``eps > 0``, and for ``eps = 0`` the confidence is 0 (``F_k(0) = 0``), not 1.
    """
    if sensitivity == 0.0:
        return 1.0
    effective = scaled_product((eps0, sensitivity), (calibration,))
    if effective == 0.0:
        return 1.0 if eps > 0.0 else 0.0
    return confidence_unchecked(eps, effective, k)


def paper_coupled_confidence(
    epsilon: float,
    epsilon0: float,
    sampled_sensitivity: float,
    rho: float,
    alpha: float,
    dimension: int = 1,
) -> float:
    """Returns a **confidence**: the paper's form of the coupled confidence ``gamma_3``, as the authors compute it.

    **Formula (the paper's form).** With ``Delta* = sampled_sensitivity`` (the sensitivity the
    ``epsilon0``-Laplace mechanism is calibrated with), ``rho`` the DKW tolerance and ``alpha``
    the DKW confidence,

        eta = 1 + 2 rho / Delta*,
        gamma_3 = alpha * c_k(epsilon; eta epsilon0) = alpha * F_k(epsilon) / F_k(eta epsilon0),

    ``c_k`` = :func:`dpkit.risk.laplace_confidence` (the paper's ``gamma_1``), ``F_k`` =
    :func:`dpkit.risk.abs_laplace_sum_cdf`, ``k = dimension``.

    **Source.** Dandekar, Basu & Bressan, PoPETs 2021(1) (arXiv:2003.00973), Sec. 4.3; the
    theorem's text was not available to us, the formula is the authors' code,
    github.com/ashishdandekar/Privacy-at-risk, ``formulae.py``, function
    ``calculate_gamma(e1, e2, rho, delta, alpha, n)`` ("computes gamma_3"; ``delta``: sampled
    sensitivity, ``alpha``: accuracy parameter): ``alpha`` times the ratio of the closed form
    ``integral`` (proportional to ``F_k``) at ``e1`` and at ``e2 (1 + 2 rho / delta)``. Re-typed
    and evaluated with mpmath: ``tests/data/paper_coupled_reference.csv`` (agreement 1e-12). One
    deliberate difference: the authors' ratio is not clipped, so for ``epsilon > eta epsilon0``
    their value exceeds ``alpha``; here it is ``alpha`` (``c_k = 1`` there, as in
    :func:`dpkit.risk.laplace_confidence`).

    **Assumptions.** The form reads as "with confidence ``alpha`` the mechanism is ``eta
    epsilon0``-DP", i.e. every neighbouring pair has sensitivity at most ``Delta* + 2 rho``, and
    then applies ``gamma_1`` at ``eta epsilon0``. Under that assumption it is a lower bound (each
    pair's confidence ``c_k(epsilon; epsilon0 D / Delta*)`` is at least ``c_k(epsilon; eta
    epsilon0)``, by monotonicity). The DKW band does not give it: the band bounds the CDF
    vertically by ``rho`` (a probability), not the sensitivity horizontally, so ``2 rho / Delta*``
    adds a probability to a sensitivity, and the value changes when the query is rescaled
    (``f -> lambda f``, ``Delta* -> lambda Delta*``), which changes nothing about the mechanism's
    privacy.

    **Relation with** :func:`coupled_confidence` (checked in ``tests/risk/test_risk_paper_coupled.py``).
    ``coupled_confidence`` uses only the DKW band (no bound on the sensitivity) and is invariant
    under rescaling; it is the sound one. Neither is uniformly more conservative:

    * for ``epsilon >= eta epsilon0`` the paper's form is ``alpha``, above ``coupled_confidence``
      (at most ``alpha (1 - rho)``);
    * below, it depends on ``Delta* / rho`` and on the spread of the sensitivity. As ``Delta* /
      rho -> inf`` the paper's form increases to ``alpha c_k(epsilon; epsilon0)``, the larger for a
      nearly constant sensitivity (for a point mass ``coupled_confidence`` is ``alpha (1 - rho)
      c_k(epsilon; epsilon0)``) or for ``epsilon`` near ``epsilon0``. As ``Delta* / rho -> 0`` it
      decreases to ``alpha F_k(epsilon)``, the smaller for ``0 < epsilon < epsilon0`` whenever
      ``F_k(epsilon0) < 1 - rho`` (calibrated with the largest sample, ``coupled_confidence >=
      alpha (1 - rho) c_k(epsilon; epsilon0)``). On the test grid (four laws of the sensitivity,
      each as its ``dkw_sample_size(rho, 0.95)`` quantiles: a point mass, uniform, exponential, and
      ``1`` w.p. 0.99 / ``10`` w.p. 0.01; ``rho`` in {0.05, 0.1}; scales 0.01, 0.1, 1, 10, 100;
      ``k`` in {1, 3}; ``epsilon0`` in {0.5, 2}; seven ``epsilon / epsilon0`` from 0.05 to 1.2;
      1120 points) it exceeds ``coupled_confidence`` at 335 points (30 %), 231 of them below ``eta
      epsilon0``, by up to 0.095 (``alpha rho`` at ``rho = 0.1``), and is below it at the others,
      by up to 0.77; for the three spread-out laws it never exceeds it at ``epsilon <= epsilon0 /
      2``;
    * where it exceeds it, it can overstate the confidence: sensitivities 100 with probability
      0.997 and 1e5 with probability 0.003, ``n = 738``, ``rho = 0.05`` (``alpha = 0.950``),
      ``epsilon = 0.9``, ``epsilon0 = 1``: the sample misses 1e5 with probability ``0.997^738 =
      0.109``, then ``Delta* = 100`` and ``gamma_3 / alpha = c_1(0.9; 1.001) = 0.93825`` exceeds the
      true confidence ``0.997 c_1(0.9; 1) + 0.003 c_1(0.9; 1000) = 0.93776``, so the statement
      "with confidence ``alpha``, at least ``gamma_3 / alpha``" holds with probability 0.891 <
      ``alpha``; ``coupled_confidence``'s statement holds for every sample, i.e. with probability 1.

    Raises :class:`dpkit.InvalidParameterError` for ``epsilon < 0`` or NaN (``epsilon = inf``
    gives ``alpha``), ``epsilon0 <= 0``, infinite or NaN, ``sampled_sensitivity <= 0``, infinite
    or NaN, ``rho`` outside (0, 1), ``alpha`` outside (0, 1] (1 is allowed: ``1 - 2 e^{-2 n
    rho^2}`` rounds to 1.0 for large ``n``), and a ``dimension`` that is not an integer >= 1
    (booleans are refused everywhere).

    >>> round(paper_coupled_confidence(0.5, 1.0, sampled_sensitivity=0.15, rho=0.01, alpha=0.95), 4)
    0.5513
    >>> paper_coupled_confidence(1.2, 1.0, sampled_sensitivity=0.15, rho=0.01, alpha=0.95)
    0.95
    >>> for scale in (0.1, 10.0):   # the same law of the sensitivity in two units
    ...     dist = SensitivityDistribution(np.full(738, scale), rho=0.05)
    ...     paper = paper_coupled_confidence(0.9, 1.0, dist.maximum, dist.rho, dist.alpha)
    ...     print(scale, round(paper, 4), round(coupled_confidence(0.9, 1.0, dist), 4))
    0.1 0.652 0.8473
    10.0 0.8868 0.8473
    """
    eps = check_positive("epsilon", epsilon, allow_zero=True, allow_inf=True)
    eps0 = check_epsilon(epsilon0, "epsilon0")
    s = check_positive("sampled_sensitivity", sampled_sensitivity)
    r = check_probability("rho", rho, open_low=True, open_high=True)
    a = check_probability("alpha", alpha, open_low=True)
    k = check_dimension(dimension)
    # eta epsilon0 = epsilon0 + epsilon0 (2 rho) / Delta*; beyond the float range it is inf and c_k is its
    # limit F_k(epsilon), rounded down (eta * epsilon0 overflowed and was refused as "epsilon0: got inf")
    effective = eps0 + scaled_product((eps0, 2.0 * r), (s,))
    return a * confidence_unchecked(eps, effective, k)
