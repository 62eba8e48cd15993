"""The Laplace mechanism (Dwork, McSherry, Nissim & Smith 2006), released on a public grid.

A query f with L1 sensitivity Delta is released as f(D) + Y with Y_i ~ Lap(Delta / epsilon)
independent; the result is epsilon-DP (seed 000, "Mecanisme de Laplace").

Floating-point safety (Mironov 2012, "On significance of the least significant bits for
differential privacy"). Textbook Laplace sampling in float leaks the input through the low bits
of the output. dpkit never samples a continuous Laplace law: the value is rounded to the public
grid 2^k and *discrete* Laplace noise (in grid units) is added, so every output is a multiple of
2^k and the released law is exactly the discrete Laplace law on that grid. Rounding moves two
neighbouring values apart by at most one grid step per coordinate, so the snapped query has L1
sensitivity at most ``U = floor(Delta / 2^k) + d`` grid units; the scale is calibrated for the
effective sensitivity ``Delta + d * 2^k`` (about one part in a million above Delta).
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InternalError, InvalidParameterError, PrivacyWarning
from dpkit._validation import as_fraction, check_data, check_epsilon, check_integer, check_positive, warn_if_risky
from dpkit.events import LaplaceEvent, PrivacyEvent
from dpkit.guarantees import PureDP, round_up
from dpkit.mechanisms._base import NumericMechanism, check_alpha, check_noise_range, check_unmasked
from dpkit.noise import RandomSource, discrete_laplace, grid_exponent, resolve_source, snap_to_grid

__all__ = ["Laplace"]


def _exact_upper(value: float) -> Fraction:
    """The larger of a float's exact binary value and the decimal the user meant by it."""
    return max(Fraction(value), as_fraction(value))


def _round_down(value: float, ulps: int = 4) -> float:
    for _ in range(ulps):
        value = math.nextafter(value, -math.inf)
    return value


def check_release_value(value: Any, dimension: int) -> tuple[NDArray[np.float64], bool]:
    """Validate a query answer before any noise is drawn: finite reals, of the declared size.

    Returns the values as a flat float array and whether the input was a scalar.
    """
    check_unmasked("value", value)
    array = check_data("value", value)
    if array.size != dimension:
        raise InvalidParameterError(
            "value",
            value,
            f"must have {dimension} coordinate(s), the dimension this mechanism was calibrated for "
            "(build the mechanism with dimension=...)",
        )
    as_float = array.astype(np.float64)
    if not np.all(np.isfinite(as_float)) or np.any(np.abs(as_float) >= 2.0**1000):
        raise InvalidParameterError("value", value, "must contain finite numbers of magnitude < 2**1000")
    return as_float.reshape(-1), array.ndim == 0


def shape_like(noisy: NDArray[np.float64], scalar: bool, value: Any) -> Any:
    """Give the released values the shape of the input (a float for a scalar input)."""
    if scalar:
        return float(noisy[0])
    return noisy.reshape(np.shape(value))


def stack_like(noisy: NDArray[np.float64], scalar: bool, value: Any) -> NDArray[np.float64]:
    """Stack ``count`` releases (rows of ``noisy``) on a first axis, each of the input's shape."""
    if scalar:
        return noisy[:, 0]
    return noisy.reshape((noisy.shape[0], *np.shape(value)))


class Laplace(NumericMechanism):
    """epsilon-DP release of a real (or real vector) query of L1 sensitivity ``sensitivity``.

    Releases ``snap(value) + 2^k * Z`` with Z discrete Laplace of scale ``scale / 2^k`` per
    coordinate, where ``scale = (sensitivity + dimension * 2^k) / epsilon`` (rounded up) and 2^k
    is the public grid (see the module docstring). Guarantee: ``PureDP(epsilon)``.

    Parameters
    ----------
    sensitivity: L1 sensitivity Delta of the query (> 0, finite).
    epsilon: privacy parameter (> 0, finite; warns above 5).
    dimension: number of coordinates released (the grid and the scale depend on it).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> mechanism = Laplace(sensitivity=1.0, epsilon=0.5)
    >>> round(mechanism.scale, 4), mechanism.guarantee.epsilon
    (2.0, 0.5)
    >>> noisy = mechanism.release(100.0, rng=InsecureSeededRandom(0))
    >>> 80 < noisy < 120
    True
    >>> low, high = mechanism.confidence_interval(0.05)
    >>> round(high, 2)
    5.99
    """

    def __init__(self, sensitivity: float, epsilon: float, *, dimension: int = 1) -> None:
        self.sensitivity = check_positive("sensitivity", sensitivity)
        self.epsilon = check_epsilon(epsilon)
        self.dimension = check_integer("dimension", dimension, minimum=1)
        check_noise_range(self.sensitivity, self.epsilon)
        warn_if_risky(self.epsilon)
        nominal = self.sensitivity / self.epsilon
        # The grid depends on public parameters only; it is fixed from the nominal scale first,
        # and the final scale is then calibrated to the sensitivity the grid implies.
        self.grid_exponent = grid_exponent(self.sensitivity, round_up(nominal), self.dimension)
        step = Fraction(2) ** self.grid_exponent
        self.effective_sensitivity = float(_exact_upper(self.sensitivity) + self.dimension * step)
        epsilon_exact = as_fraction(self.epsilon)
        # The guarantee's exact epsilon must bound (Delta + d 2^k) / scale; verify in exact arithmetic.
        needed = (_exact_upper(self.sensitivity) + self.dimension * step) / epsilon_exact
        scale = round_up(float(needed))
        while Fraction(scale) < needed:
            scale = math.nextafter(scale, math.inf)
        self.scale = scale
        self._units_scale = math.ldexp(scale, -self.grid_exponent)  # exact: a power-of-two rescaling
        self._q = math.exp(-1.0 / self._units_scale)

    @classmethod
    def from_accuracy(cls, sensitivity: float, accuracy: float, alpha: float, *, dimension: int = 1) -> Laplace:
        """The Laplace mechanism with the smallest epsilon (to a relative 1e-9) whose (1 - alpha) noise
        interval is within ``accuracy``.

        For the continuous law, P(|Y| > t) = exp(-t / b) gives epsilon = Delta ln(1/alpha) / accuracy;
        the grid makes the true scale larger (slightly, or up to twice for epsilon near 2^-30), so
        epsilon is moved until ``noise_quantile(alpha) <= accuracy`` holds for the released (discrete)
        law, then bisected down to the smallest such epsilon.

        >>> mechanism = Laplace.from_accuracy(1.0, accuracy=10.0, alpha=0.05)
        >>> mechanism.noise_quantile(0.05) <= 10.0, round(mechanism.epsilon, 3)
        (True, 0.3)
        """
        sens = check_positive("sensitivity", sensitivity)
        target = check_positive("accuracy", accuracy)
        level = check_alpha(alpha)

        def achieved(epsilon: float) -> float:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PrivacyWarning)
                return cls(sens, epsilon, dimension=dimension).noise_quantile(level)

        epsilon = sens * math.log(1 / level) / target
        for _ in range(200):
            reached = achieved(epsilon)
            if reached <= target:
                break
            epsilon = round_up(epsilon * max(reached / target, 1 + 1e-9))
        else:  # pragma: no cover
            raise InternalError("Laplace.from_accuracy did not converge")
        # The steps above can overshoot (a coarser grid at small epsilon, or a target within a few
        # grid steps): bracket the smallest epsilon from below and bisect to a relative 1e-9.
        high, low = epsilon, epsilon / 2
        while achieved(low) <= target:
            high, low = low, low / 2
            if low < 1e-300:  # pragma: no cover
                raise InternalError("Laplace.from_accuracy: accuracy reachable at every epsilon")
        while high / low > 1 + 1e-9:
            middle = math.sqrt(low * high)
            if achieved(middle) <= target:
                high = middle
            else:
                low = middle
        return cls(sens, high, dimension=dimension)  # warns once if epsilon is risky

    # -- privacy -------------------------------------------------------------------------------

    @property
    def guarantee(self) -> PureDP:
        """``PureDP(epsilon)`` for inputs at L1 distance ``sensitivity``."""
        return PureDP(self.epsilon)

    @property
    def event(self) -> PrivacyEvent:
        """Laplace event with noise multiplier scale / (effective sensitivity), rounded down.

        The grid inflates the sensitivity to Delta + d 2^k, so the multiplier is taken against
        that (it is at least 1 / epsilon).
        """
        return LaplaceEvent(noise_multiplier=_round_down(self.scale / self.effective_sensitivity))

    def privacy_map(self, d_in: float) -> PureDP:
        """epsilon for inputs at L1 distance ``d_in``: (d_in + d 2^k) / scale, bounded above by
        epsilon * (d_in + d 2^k) / (Delta + d 2^k) (exact; equal to epsilon at d_in = Delta)."""
        distance = check_positive("d_in", d_in)
        if distance == self.sensitivity:
            return self.guarantee
        step = Fraction(2) ** self.grid_exponent
        ratio = (_exact_upper(distance) + self.dimension * step) / (Fraction(self.sensitivity) + self.dimension * step)
        return PureDP(as_fraction(self.epsilon) * ratio)  # type: ignore[arg-type]

    # -- release -------------------------------------------------------------------------------

    def release(self, value: Any, *, rng: RandomSource | None = None) -> Any:
        """``value`` plus discrete Laplace noise on the grid 2^k; same shape as ``value``."""
        values, scalar = check_release_value(value, self.dimension)
        snapped = snap_to_grid(values, self.grid_exponent)  # refuses an overflowing value before any noise
        source = resolve_source(rng)
        noise = discrete_laplace(self._units_scale, values.size, rng=source)
        noisy = snapped + np.ldexp(noise.astype(np.float64), self.grid_exponent)
        return shape_like(noisy, scalar, value)

    def _release_repeated(self, value: Any, count: int, source: RandomSource) -> NDArray[Any]:
        values, scalar = check_release_value(value, self.dimension)
        snapped = snap_to_grid(values, self.grid_exponent)
        noise = discrete_laplace(self._units_scale, values.size * count, rng=source).reshape(count, values.size)
        noisy = snapped[None, :] + np.ldexp(noise.astype(np.float64), self.grid_exponent)
        return stack_like(noisy, scalar, value)

    # -- accuracy (exact, for the discrete law on the grid) ---------------------------------------

    def _tail_units(self, m: int) -> float:
        """P(|Z| >= m) = 2 q^m / (1 + q) for m >= 1, in grid units."""
        if m <= 0:
            return 1.0
        return min(1.0, 2.0 * math.exp(-m / self._units_scale) / (1.0 + self._q))

    def _smallest_units_with_tail(self, level: float) -> int:
        """Smallest integer m >= 0 with P(|Z| > m) = P(|Z| >= m + 1) <= level (1 - 1e-12)."""
        s = self._units_scale
        guess = math.ceil(s * (math.log(2.0) - math.log(level) - math.log1p(self._q))) - 1  # 2 / level may overflow
        m = max(0, guess - 2)
        # A relative margin of 1e-12 absorbs the float error of the tail (below 1e-13 relative), so
        # that the exact tail is at most ``level``.
        while self._tail_units(m + 1) > level * (1 - 1e-12):
            m += 1
        return m

    def noise_quantile(self, alpha: float) -> float:
        """Half-width h with P(|noise| <= h) >= 1 - alpha, exact for the discrete Laplace on the grid
        (the smallest grid multiple whose tail is at most alpha (1 - 1e-12))."""
        level = check_alpha(alpha)
        return math.ldexp(float(self._smallest_units_with_tail(level)), self.grid_exponent)

    @property
    def expected_error(self) -> float:
        """E|noise| per coordinate: 2^k * 2q / (1 - q^2), q = exp(-2^k / scale) (about ``scale``)."""
        # 1 - q^2 from the exponent itself: q is within 1e-16 of 1 when scale / 2^k is ~1e9, and
        # log(q) would then keep only ~7 digits of -1 / (scale / 2^k).
        return math.ldexp(2.0 * self._q / (-math.expm1(-2.0 / self._units_scale)), self.grid_exponent)

    def expected_l1_error(self, dimension: int | None = None) -> float:
        """E ||Y||_1 for K coordinates: K * E|noise| (seed 000: at most K * Delta / epsilon in the
        continuous analysis; here the effective scale (Delta + d 2^k) / epsilon replaces Delta / epsilon)."""
        k = self.dimension if dimension is None else check_integer("dimension", dimension, minimum=1)
        return k * self.expected_error

    def linf_tail_bound(self, beta: float, dimension: int | None = None) -> float:
        """t with P(||Y||_inf >= t) <= beta for K coordinates (union bound over the coordinates).

        Seed 000 states t = ln(K / beta) Delta / epsilon for the continuous law; here t is the
        exact union bound for the discrete law on the grid: the smallest grid multiple m 2^k with
        K * 2 q^m / (1 + q) <= beta.
        """
        level = check_alpha(beta)
        k = self.dimension if dimension is None else check_integer("dimension", dimension, minimum=1)
        # P(|Z| >= m) <= beta / K  <=>  P(|Z| > m - 1) <= beta / K
        m = self._smallest_units_with_tail(level / k) + 1
        return math.ldexp(float(m), self.grid_exponent)

    def __repr__(self) -> str:
        return (
            f"Laplace(sensitivity={self.sensitivity!r}, epsilon={self.epsilon!r}, "
            f"dimension={self.dimension}, scale={self.scale!r})"
        )
