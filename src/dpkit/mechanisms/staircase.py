"""The staircase mechanism (Geng & Viswanath 2016), sampled exactly on a public grid.

Geng & Viswanath, "The optimal noise-adding mechanism in differential privacy", IEEE Trans. Inf.
Theory 62(2), 2016, show that among all epsilon-DP noise-adding mechanisms for a real query of
sensitivity Delta, the cost-optimal noise has a *staircase* density: piecewise constant on steps of
width Delta, decaying by b = e^-epsilon from step to step, each step split at a fraction gamma into a
higher and a lower part:

    f(x) = a(gamma)            for |x| in [0, gamma Delta)
           e^-eps a(gamma)     for |x| in [gamma Delta, Delta)
           e^-k eps f(|x| - k Delta) for |x| in [k Delta, (k + 1) Delta).

The optimal split is gamma* = 1 / (1 + e^{eps/2}) for the cost |x| (their Thm 4), and
gamma* = -b/(1 - b) + (b - 2b^2 + 2b^4 - b^5)^{1/3} / (2^{1/3} (1 - b)^2) for the cost x^2 (Thm 5).
The minimum E|X| is Delta e^{eps/2} / (e^eps - 1); for large epsilon it decays like Delta e^{-eps/2},
against Delta / epsilon for Laplace (their headline).

Floating-point safety. dpkit releases the *discrete* staircase on the grid 2^k (Mironov 2012): the
value is snapped to the grid and integer noise Z is added with P(Z = z) proportional to v(|z|),
v(g W + r) = q^g (1 if r < m else b'), for a step of W = floor(Delta / 2^k) + 1 grid units (the
sensitivity of the snapped value), m = round(gamma W) high positions per step (at least 1 when
gamma > 0), q = exp(-1/t)
with t >= 1/epsilon (so q >= e^-epsilon), and b' in [q, 1]. v is non-increasing and v(j + W) = q v(j),
so any shift of at most W units changes P(Z = z) by a factor at most 1/q <= e^epsilon: the release
is epsilon-DP exactly.
Sampling is exact: a geometric number of steps (:func:`dpkit.noise.geometric_units`: drawn in two
exact parts from a step scale t of 2^31, epsilon below about 5e-10), the sub-step by the
two-coin rejection (a rational coin from :func:`dpkit.noise.bernoulli_rational` and an exact
Bernoulli(e^-y) from :func:`dpkit.noise.bernoulli_exp`, b' = 2^-j e^-y), a uniform position in the
sub-step (:func:`dpkit.noise.uniform_integers`) and a fair sign, with (0, -) rejected so that 0 is
not counted twice. The noise is an exact integer (a Python integer where int64 could overflow), and
the value plus the noise is rounded once to a float (:func:`dpkit.noise.add_noise_on_grid`).

The grid is 2^-20 of the sensitivity, k = floor(log2 Delta) - 20, at every epsilon, so the step is
W = floor(Delta / 2^k) + 1 in (2^20, 2^21] grid units and the effective sensitivity W 2^k is at most
Delta + 2^k <= (1 + 2^-20) Delta. (A grid coarsened with the noise made W one unit, and the
effective sensitivity the grid step: 16 Delta at epsilon 1e-10.) Every epsilon in [2^-60, 1024] is
accepted whose noise, about Delta / epsilon, stays below :data:`dpkit.noise.MAX_RELEASE_SCALE`
(2^1007, so that outputs stay within float64).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit._search import first_true
from dpkit._validation import as_fraction, check_epsilon, check_positive, check_probability, warn_if_risky
from dpkit.events import PrivacyEvent, PureDPEvent
from dpkit.guarantees import PureDP, round_up
from dpkit.mechanisms._base import NumericMechanism, check_alpha, check_noise_range
from dpkit.mechanisms.laplace import check_release_value, shape_like, stack_like
from dpkit.noise import (
    MAX_RELEASE_SCALE,
    RandomSource,
    add_noise_on_grid,
    bernoulli_exp,
    bernoulli_rational,
    geometric_units,
    resolve_source,
    sensitivity_grid_exponent,
    snap_to_grid,
    uniform_integers,
)

__all__ = [
    "Staircase",
    "optimal_gamma_l1",
    "optimal_gamma_l2",
    "staircase_expected_amplitude",
    "staircase_noise_power",
]

# An upper bound on ln 2 (0.69314718055994530941... < 0.6931471805599454).
_LN2_UPPER = Fraction(6931471805599454, 10**16)
# Noise magnitudes steps * W + position stay int64 while steps < 2^62 / W; beyond, Python integers.
_INT64_MAGNITUDE = 2**62


def optimal_gamma_l1(epsilon: float) -> float:
    """gamma* = 1 / (1 + e^{eps/2}), the split minimising E|X| (Geng & Viswanath 2016, Thm 4)."""
    e = check_epsilon(epsilon)
    return 1.0 / (1.0 + math.exp(e / 2))


def optimal_gamma_l2(epsilon: float) -> float:
    """gamma* minimising E[X^2] (Geng & Viswanath 2016, Thm 5), b = e^-eps:
    -b/(1-b) + (b - 2b^2 + 2b^4 - b^5)^{1/3} / (2^{1/3} (1-b)^2).

    Computed without cancellation: b - 2b^2 + 2b^4 - b^5 = b (1 - b)^3 (1 + b), so gamma* = (u - b) / (1 - b)
    with u = (b (1 + b) / 2)^{1/3}, and u - b = (u^3 - b^3) / (u^2 + u b + b^2) with
    u^3 - b^3 = b (1 - b) (1 + 2b) / 2: gamma* = b (1 + 2b) / (2 (u^2 + u b + b^2)). (The textbook form
    lost every digit below epsilon ~1e-6: complex at 1e-8, -1e12 at 1e-12; the limit is 1/2.)

    >>> round(optimal_gamma_l2(1.0), 6), round(optimal_gamma_l2(1e-12), 6)
    (0.416737, 0.5)
    """
    b = math.exp(-check_epsilon(epsilon))
    u = (b * (1 + b) / 2) ** (1 / 3)
    return b * (1 + 2 * b) / (2 * (u * u + u * b + b * b))


def _continuous_moments(epsilon: float, sensitivity: float, gamma: float) -> tuple[float, float]:
    # From the sampling representation (Geng & Viswanath 2016, Sec. III-D): |X| = Delta (G + offset),
    # G ~ Geometric(b), offset uniform on [0, gamma) w.p. p0 = gamma / (gamma + (1 - gamma) b), else
    # uniform on [gamma, 1).
    b = math.exp(-epsilon)
    one_minus_b = -math.expm1(-epsilon)  # 1 - b to full precision (it kept ~4 digits at epsilon 1e-12)
    p0 = gamma / (gamma + (1 - gamma) * b)
    mean_g = b / one_minus_b
    second_g = b * (1 + b) / one_minus_b**2
    mean_offset = p0 * gamma / 2 + (1 - p0) * (1 + gamma) / 2
    second_offset = p0 * gamma**2 / 3 + (1 - p0) * (1 + gamma + gamma**2) / 3
    amplitude = sensitivity * (mean_g + mean_offset)
    power = sensitivity**2 * (second_g + 2 * mean_g * mean_offset + second_offset)
    return amplitude, power


def staircase_expected_amplitude(epsilon: float, sensitivity: float = 1.0, gamma: float | None = None) -> float:
    """E|X| for the continuous staircase density (default gamma: the l1-optimal one).

    >>> round(staircase_expected_amplitude(1.0), 4)   # Delta e^{eps/2} / (e^eps - 1)
    0.9595
    """
    e = check_epsilon(epsilon)
    g = optimal_gamma_l1(e) if gamma is None else check_probability("gamma", gamma)
    return _continuous_moments(e, check_positive("sensitivity", sensitivity), g)[0]


def staircase_noise_power(epsilon: float, sensitivity: float = 1.0, gamma: float | None = None) -> float:
    """E[X^2] (the variance) for the continuous staircase density (default gamma: the l2-optimal one)."""
    e = check_epsilon(epsilon)
    g = optimal_gamma_l2(e) if gamma is None else check_probability("gamma", gamma)
    return _continuous_moments(e, check_positive("sensitivity", sensitivity), g)[1]


class Staircase(NumericMechanism):
    """epsilon-DP release of a real scalar query of sensitivity ``sensitivity`` with staircase noise.

    Releases ``snap(value) + 2^k Z`` with Z the discrete staircase law on the grid 2^k (module
    docstring). Guarantee: ``PureDP(epsilon)``. Less noise than Laplace for large epsilon
    (Geng & Viswanath 2016).

    Parameters
    ----------
    sensitivity: |f(D) - f(D')| bound Delta (in [2**-1000, 2**1000]).
    epsilon: in [2**-60, 1024], with sensitivity / epsilon below about 2**1007 (warns above 5).
    gamma: split of each step in [0, 1]; default the l1-optimal 1 / (1 + e^{eps/2}).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> mechanism = Staircase(1.0, 5.0)
    >>> noisy = mechanism.release(3.0, rng=InsecureSeededRandom(0))
    >>> bool(abs(noisy - 3.0) < 5), round(mechanism.expected_error, 4), round(2 * (1 / 5.0) ** 2, 4)
    (True, 0.0826, 0.08)
    >>> round(mechanism.variance, 4)
    0.037
    """

    def __init__(self, sensitivity: float, epsilon: float, gamma: float | None = None) -> None:
        self.sensitivity = check_positive("sensitivity", sensitivity)
        self.epsilon = check_epsilon(epsilon)
        check_noise_range(self.sensitivity, self.epsilon, largest_epsilon=1024.0)  # e^{epsilon/2} below
        self.gamma = optimal_gamma_l1(self.epsilon) if gamma is None else check_probability("gamma", gamma)
        warn_if_risky(self.epsilon)
        # The grid depends on the sensitivity only (module docstring).
        self.grid_exponent = sensitivity_grid_exponent(self.sensitivity)
        # Snapped neighbours differ by at most floor(Delta / 2^k) + 1 grid units: that is the step width.
        self.step_units = math.floor(math.ldexp(self.sensitivity, -self.grid_exponent)) + 1
        self.effective_sensitivity = math.ldexp(float(self.step_units), self.grid_exponent)
        # At least one high position for gamma > 0: at large epsilon gamma* W rounds to 0 (gamma* is
        # 1.4e-11 at epsilon 50), which would make the first step uniform (E|X| = Delta / 2, worse than
        # Laplace's Delta / epsilon). Any m in [0, W] keeps the release epsilon-DP (see above).
        rounded = round(self.gamma * self.step_units)
        self.high_units = min(self.step_units, max(1 if self.gamma > 0 else 0, rounded))
        # Geometric scale t with 1/t <= epsilon exactly (the decay per step is q = e^{-1/t} >= e^-eps).
        epsilon_exact = as_fraction(self.epsilon)
        t = round_up(1.0 / self.epsilon)
        while Fraction(t) * epsilon_exact < 1:
            t = math.nextafter(t, math.inf)
        self._step_scale = t
        # The noise is about t steps of W units: its scale t W 2^k (compared by exponents, as it may
        # overflow) must stay below 2^1007 to keep releases within float64.
        if math.frexp(t * self.step_units)[1] - 1 + self.grid_exponent >= math.frexp(MAX_RELEASE_SCALE)[1] - 1:
            raise InvalidParameterError(
                "epsilon",
                epsilon,
                f"must be greater than {self.effective_sensitivity / MAX_RELEASE_SCALE:.6g} for sensitivity "
                f"{self.sensitivity!r}: the noise scale (about sensitivity / epsilon) must stay below 2**1007 "
                f"({MAX_RELEASE_SCALE:.4g}) for the releases to stay within float64",
            )
        self._units_scale = t * self.step_units  # (about) the noise scale in grid units, for the value limit
        self._q = math.exp(-1.0 / t)
        # The lower sub-step's relative weight b' = 2^-j e^-y with j ln 2 + y <= 1/t (so q <= b' <= 1),
        # written this way so that the acceptance coin e^-y stays above 1/4.
        inverse_t = 1 / Fraction(t)
        j = max(0, math.floor(float(inverse_t) / math.log(2)) - 1)
        y = max(0.0, float(inverse_t - j * _LN2_UPPER))
        while j * _LN2_UPPER + Fraction(y) > inverse_t:
            y = math.nextafter(y, -math.inf)
        self._halvings, self._coin_exponent = j, max(y, 0.0)
        self._low_weight = math.ldexp(math.exp(-self._coin_exponent), -j)  # b', for the moments
        high_weight = Fraction(self.high_units * 2**j)
        self._p_high_branch = high_weight / (high_weight + (self.step_units - self.high_units))

    # -- privacy ---------------------------------------------------------------------------------

    @property
    def guarantee(self) -> PureDP:
        """``PureDP(epsilon)`` for inputs at distance ``sensitivity``."""
        return PureDP(self.epsilon)

    @property
    def event(self) -> PrivacyEvent:
        return PureDPEvent(self.epsilon)

    def privacy_map(self, d_in: float) -> PureDP:
        """epsilon * ceil(units(d_in) / W): a shift of c steps costs at most c epsilon (group privacy)."""
        distance = check_positive("d_in", d_in)
        units = math.floor(math.ldexp(distance, -self.grid_exponent)) + 1
        steps = -(-units // self.step_units)
        return PureDP(as_fraction(self.epsilon) * steps)  # type: ignore[arg-type]

    # -- sampling --------------------------------------------------------------------------------

    def _sample_units(self, size: int, source: RandomSource) -> NDArray[Any]:
        """``size`` exact draws of the discrete staircase law, in grid units (int64, or Python integers)."""
        chunks: list[NDArray[Any]] = []
        filled = 0
        m, width = self.high_units, self.step_units
        while filled < size:
            batch = 2 * (size - filled) + 16
            high_branch = bernoulli_rational(self._p_high_branch, batch, rng=source)
            # The lower sub-step is kept with probability e^-y (two-coin rejection).
            keep = high_branch | bernoulli_exp(self._coin_exponent, batch, rng=source)
            # int64 while the draws fit (two exact parts from a step scale of 2^31); Python integers beyond.
            steps = geometric_units(self._step_scale, batch, source)
            if steps.dtype != object and int(steps.max()) >= _INT64_MAGNITUDE // width:
                steps = steps.astype(object)  # steps * W could pass int64: exact integers instead
            position = np.empty(batch, dtype=np.int64)
            n_high = int(high_branch.sum())
            if n_high:
                position[high_branch] = uniform_integers(m, n_high, rng=source)
            if batch - n_high:
                position[~high_branch] = m + uniform_integers(width - m, batch - n_high, rng=source)
            negative = uniform_integers(2, batch, rng=source).astype(bool)
            magnitude = steps * width + (position.astype(object) if steps.dtype == object else position)
            keep &= ~(negative & (magnitude == 0))  # 0 has one sign only
            values = np.where(negative, -magnitude, magnitude)[keep][: size - filled]
            chunks.append(values)
            filled += values.size
        return np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)

    def release(self, value: Any, *, rng: RandomSource | None = None) -> Any:
        """``value`` plus discrete staircase noise on the grid 2^k (a scalar query)."""
        values, scalar = check_release_value(value, 1)
        # Refuses an overflowing value before any noise is drawn.
        snapped = snap_to_grid(values, self.grid_exponent, noise_scale=self._units_scale)
        source = resolve_source(rng)
        noise = self._sample_units(1, source)
        noisy = add_noise_on_grid(snapped, noise, self.grid_exponent)
        return shape_like(noisy, scalar, value)

    def _release_repeated(self, value: Any, count: int, source: RandomSource) -> NDArray[Any]:
        values, scalar = check_release_value(value, 1)
        snapped = snap_to_grid(values, self.grid_exponent, noise_scale=self._units_scale)
        noise = self._sample_units(count, source)
        noisy = add_noise_on_grid(snapped, noise, self.grid_exponent)
        return stack_like(noisy.reshape(count, 1), scalar, value)

    # -- the released law, exactly ------------------------------------------------------------------

    def _sums(self) -> tuple[float, float, float, float]:
        """(total mass, sum j v(j), sum j^2 v(j), sum v(j)) over j >= 0, v unnormalised (grid units)."""
        q, bp, m, w = self._q, self._low_weight, self.high_units, self.step_units
        one_minus_q = -math.expm1(-1.0 / self._step_scale)
        per_step = m + (w - m) * bp
        first = m * (m - 1) / 2 + bp * (w * (w - 1) / 2 - m * (m - 1) / 2)

        def squares(n: int) -> float:
            return (n - 1) * n * (2 * n - 1) / 6

        second = squares(m) + bp * (squares(w) - squares(m))
        s0, s1, s2 = 1 / one_minus_q, q / one_minus_q**2, q * (1 + q) / one_minus_q**3
        half_mass = per_step * s0
        total = 2 * half_mass - (1.0 if m >= 1 else bp)
        sum_j = w * per_step * s1 + first * s0
        sum_j2 = w * w * per_step * s2 + 2 * w * first * s1 + second * s0
        return total, sum_j, sum_j2, per_step

    @property
    def expected_error(self) -> float:
        """E|noise| of the released (discrete) law, exactly (close to the continuous staircase's E|X|)."""
        total, sum_j, _, _ = self._sums()
        return math.ldexp(2 * sum_j / total, self.grid_exponent)

    @property
    def variance(self) -> float:
        """E[noise^2] of the released (discrete) law, exactly (close to the continuous staircase's)."""
        total, _, sum_j2, _ = self._sums()
        return math.ldexp(2 * sum_j2 / total, 2 * self.grid_exponent)

    def _tail_units(self, n: int) -> float:
        """P(|Z| >= n) for an integer n >= 1."""
        return min(1.0, math.exp(self._log_tail_units(n)))

    def _log_tail_units(self, n: int) -> float:
        """log P(|Z| >= n): in logs, so that tails below the normal float range (alpha ~1e-310) keep their digits."""
        if n <= 0:
            return 0.0
        total, _, _, per_step = self._sums()
        m, w, bp = self.high_units, self.step_units, self._low_weight
        g, r = divmod(n, w)
        rest_of_step = max(0, m - r) + bp * (w - max(r, m))
        one_minus_q = -math.expm1(-1.0 / self._step_scale)
        # The O(1) ratio first, then the factor q^g: the product of q^g and the unnormalised mass
        # (both tiny at large epsilon) would pass through subnormal floats and lose digits.
        ratio = 2 * (rest_of_step + self._q * per_step / one_minus_q) / total
        return min(0.0, math.log(ratio) - g / self._step_scale) if ratio > 0 else -math.inf

    def noise_quantile(self, alpha: float) -> float:
        """Half-width h with P(|noise| <= h) >= 1 - alpha, from the exact tail of the released law
        (the smallest grid multiple whose tail is at most alpha (1 - 1e-12))."""
        level = check_alpha(alpha)
        # A relative margin of 1e-12 absorbs the float error of the tail (below 1e-13 relative);
        # compared in logs, which stay exact where alpha and the tail are subnormal floats.
        target = math.log(level) + math.log1p(-1e-12)
        # The smallest n with P(|Z| > n) <= alpha (1 - 1e-12), searched from one step of the staircase.
        units = first_true(lambda n: self._log_tail_units(n + 1) <= target, self.step_units)
        return math.ldexp(float(units), self.grid_exponent)

    def __repr__(self) -> str:
        return f"Staircase(sensitivity={self.sensitivity!r}, epsilon={self.epsilon!r}, gamma={self.gamma!r})"
