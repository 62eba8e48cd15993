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
effective sensitivity ``Delta + d * 2^k``.

The grid is 2^-20 of the per-coordinate share Delta / d (:func:`dpkit.noise.sensitivity_grid_exponent`)
while the noise stays within 2^30 grid units; beyond, it coarsens with the noise (fewer, faster
draws) but by at most 10 bits (:func:`dpkit.noise.capped_grid_exponent`), so
``Delta + d 2^k <= (1 + 2^-10) Delta`` at every epsilon. (Unbounded coarsening made the step
exceed Delta / d at small epsilon, and the effective sensitivity d times the step: 16.7 Delta at
epsilon 1e-10.) A small epsilon then means a large noise in grid units, up to about 2^10 d /
epsilon: scales from 2^31 units are drawn exactly in two parts
(:func:`dpkit.noise.discrete_laplace_units`), and the value plus the noise is an exact integer,
rounded once to a float (:func:`dpkit.noise.add_noise_on_grid`,
post-processing). Every epsilon in [2^-60, inf) is accepted whose noise scale stays below
:data:`dpkit.noise.MAX_RELEASE_SCALE` (2^1007, so that outputs stay within float64).
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InternalError, InvalidParameterError, PrivacyWarning
from dpkit._search import first_true
from dpkit._validation import as_fraction, check_data, check_epsilon, check_integer, check_positive, warn_if_risky
from dpkit.events import LaplaceEvent, PrivacyEvent
from dpkit.guarantees import PureDP, round_up
from dpkit.mechanisms._base import NumericMechanism, check_alpha, check_noise_range, check_unmasked
from dpkit.noise import (
    MAX_RELEASE_SCALE,
    RandomSource,
    add_noise_on_grid,
    discrete_laplace_units,
    resolve_source,
    snap_to_grid,
)
from dpkit.noise._grid import capped_grid_exponent

__all__ = ["Laplace"]

#: Most coordinates one release draws noise for (the samplers' per-call limit: 2**40 draws).
MAX_DIMENSION = 2**40


def _exact_upper(value: float) -> Fraction:
    """The larger of a float's exact binary value and the decimal the user meant by it."""
    return max(Fraction(value), as_fraction(value))


def _round_down(value: float, ulps: int = 4) -> float:
    for _ in range(ulps):
        value = math.nextafter(value, -math.inf)
    return value


def check_dimension(dimension: Any) -> int:
    """The number of coordinates of a vector release: an integer in [1, 2**40]."""
    d = check_integer("dimension", dimension, minimum=1)
    if d > MAX_DIMENSION:
        raise InvalidParameterError(
            "dimension", dimension, "must be at most 2**40 (the most coordinates one release draws noise for)"
        )
    return d


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


def _smallest_epsilon(sensitivity: float, dimension: int) -> float:
    """The smallest float epsilon :class:`Laplace` accepts for this sensitivity and dimension.

    At least 2^-60, and large enough that the noise scale (Delta + d 2^k) / epsilon stays below
    :data:`~dpkit.noise.MAX_RELEASE_SCALE` (epsilon read as the decimal it was typed as).
    """
    step = Fraction(2) ** capped_grid_exponent(sensitivity, math.inf, dimension)  # (the coarsest grid)
    bound = (_exact_upper(sensitivity) + dimension * step) / Fraction(MAX_RELEASE_SCALE)
    candidate = float(bound)
    while as_fraction(candidate) <= bound:
        candidate = math.nextafter(candidate, math.inf)
    return max(2.0**-60, candidate)


class Laplace(NumericMechanism):
    """epsilon-DP release of a real (or real vector) query of L1 sensitivity ``sensitivity``.

    Releases ``snap(value) + 2^k * Z`` with Z discrete Laplace of scale ``scale / 2^k`` per
    coordinate, where ``scale = (sensitivity + dimension * 2^k) / epsilon`` (rounded up) and 2^k
    is the public grid (see the module docstring). Guarantee: ``PureDP(epsilon)``.

    Parameters
    ----------
    sensitivity: L1 sensitivity Delta of the query (in [2**-1000, 2**1000]).
    epsilon: privacy parameter (at least 2**-60, with sensitivity / epsilon below about 2**1007; warns above 5).
    dimension: number of coordinates released (at most 2**40; the grid and the scale depend on it).

    The effective sensitivity Delta + d 2^k is at most (1 + 2^-10) Delta for every accepted epsilon,
    and (1 + 2^-20) Delta while the noise is within 2^30 grid units of the fine grid.

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
        self.dimension = check_dimension(dimension)
        check_noise_range(self.sensitivity, self.epsilon)
        warn_if_risky(self.epsilon)
        # The grid depends on public parameters only (module docstring); the scale is calibrated to
        # the sensitivity the grid implies.
        nominal = self.sensitivity / self.epsilon  # (inf when it overflows: refused below)
        self.grid_exponent = capped_grid_exponent(self.sensitivity, round_up(nominal), self.dimension)
        step = Fraction(2) ** self.grid_exponent
        effective = _exact_upper(self.sensitivity) + self.dimension * step
        self.effective_sensitivity = float(effective)
        epsilon_exact = as_fraction(self.epsilon)
        # The guarantee's exact epsilon must bound (Delta + d 2^k) / scale; verify in exact arithmetic.
        needed = effective / epsilon_exact
        if needed >= Fraction(MAX_RELEASE_SCALE):
            raise InvalidParameterError(
                "epsilon",
                epsilon,
                f"must be greater than {float(effective / Fraction(MAX_RELEASE_SCALE)):.6g} for sensitivity "
                f"{self.sensitivity!r}: the noise scale (about sensitivity / epsilon) must stay below "
                f"2**1007 ({MAX_RELEASE_SCALE:.4g}) for the releases to stay within float64",
            )
        scale = round_up(float(needed))
        while Fraction(scale) < needed:
            scale = math.nextafter(scale, math.inf)
        self.scale = scale
        # Exact (a power-of-two rescaling); at most about 2^11 d / epsilon grid units.
        self._units_scale = math.ldexp(scale, -self.grid_exponent)
        self._q = math.exp(-1.0 / self._units_scale)

    @classmethod
    def from_accuracy(cls, sensitivity: float, accuracy: float, alpha: float, *, dimension: int = 1) -> Laplace:
        """The Laplace mechanism with the smallest epsilon (to a relative 1e-9) whose (1 - alpha) noise
        interval is within ``accuracy``.

        For the continuous law, P(|Y| > t) = exp(-t / b) gives epsilon = Delta ln(1/alpha) / accuracy;
        the grid makes the true scale slightly larger (by at most a factor 1 + 2^-10, at every epsilon:
        see the module docstring) and the released law is discrete, so epsilon is moved until
        ``noise_quantile(alpha) <= accuracy`` holds for the released law, then bisected down to the
        smallest such epsilon. A target met even at the smallest epsilon the mechanism accepts
        (2^-60, or the one keeping the noise scale below 2^1007) has no smallest epsilon in range and
        is refused with an :class:`~dpkit.InvalidParameterError` naming ``accuracy``.

        >>> mechanism = Laplace.from_accuracy(1.0, accuracy=10.0, alpha=0.05)
        >>> mechanism.noise_quantile(0.05) <= 10.0, round(mechanism.epsilon, 3)
        (True, 0.3)
        """
        sens = check_positive("sensitivity", sensitivity)
        target = check_positive("accuracy", accuracy)
        level = check_alpha(alpha)
        d = check_dimension(dimension)
        smallest = _smallest_epsilon(sens, d)

        def achieved(epsilon: float) -> float:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PrivacyWarning)
                return cls(sens, epsilon, dimension=d).noise_quantile(level)

        if achieved(smallest) <= target:
            raise InvalidParameterError(
                "accuracy",
                accuracy,
                f"is met even at the smallest epsilon this mechanism accepts for sensitivity {sens!r} "
                f"({smallest:g}); the smallest epsilon meeting it lies below that limit",
            )
        epsilon = max(sens * math.log(1 / level) / target, smallest)
        for _ in range(200):
            reached = achieved(epsilon)
            if reached <= target:
                break
            epsilon = round_up(epsilon * max(reached / target, 1 + 1e-9))
        else:  # pragma: no cover
            raise InternalError("Laplace.from_accuracy did not converge")
        # The steps above can overshoot (a target within a few grid steps, where the discrete
        # quantile jumps): bracket the smallest epsilon from below and bisect to a relative 1e-9.
        # The target is missed at ``smallest`` (checked above), so the bracket stops there.
        high, low = epsilon, max(epsilon / 2, smallest)
        while low > smallest and achieved(low) <= target:
            high, low = low, max(low / 2, smallest)
        while high / low > 1 + 1e-9:
            middle = math.sqrt(low * high)
            if achieved(middle) <= target:
                high = middle
            else:
                low = middle
        return cls(sens, high, dimension=d)  # warns once if epsilon is risky

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
        # Refuses an overflowing value before any noise is drawn.
        snapped = snap_to_grid(values, self.grid_exponent, noise_scale=self._units_scale)
        source = resolve_source(rng)
        noise = discrete_laplace_units(self._units_scale, values.size, source)
        noisy = add_noise_on_grid(snapped, noise, self.grid_exponent)
        return shape_like(noisy, scalar, value)

    def _release_repeated(self, value: Any, count: int, source: RandomSource) -> NDArray[Any]:
        values, scalar = check_release_value(value, self.dimension)
        snapped = snap_to_grid(values, self.grid_exponent, noise_scale=self._units_scale)
        noise = discrete_laplace_units(self._units_scale, values.size * count, source).reshape(count, values.size)
        noisy = add_noise_on_grid(snapped[None, :], noise, self.grid_exponent)
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
        # A relative margin of 1e-12 absorbs the float error of the tail (below 1e-13 relative), so
        # that the exact tail is at most ``level``. The guess is off by about s |ln level| 2^-52 units,
        # far below one up to s = 2^31 (where the grid used to coarsen): there the search only steps
        # up from guess - 2, as before; at larger scales (a small epsilon, units up to 2^121) it
        # gallops and bisects from the guess, in O(log) tail evaluations.
        fits = lambda m: self._tail_units(m + 1) <= level * (1 - 1e-12)  # noqa: E731
        return first_true(fits, max(0, guess - 2))

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
