"""Integer-valued noise for integer queries: the discrete Laplace and (truncated) geometric mechanisms.

A count is an integer, and the Laplace mechanism turns it into a real number (seed 000 notes
that this is "peu satisfaisant" and points to truncated geometric laws instead). Adding
two-sided geometric noise keeps the answer an integer with the same pure-DP guarantee:

- :class:`DiscreteLaplace` adds Z with P(Z = z) = (1 - q) / (1 + q) q^|z|, q = exp(-1 / scale),
  scale >= Delta / epsilon. For neighbours whose answers differ by a (|a| <= Delta),
  P(Z = z) / P(Z = z + a) = q^(|z| - |z + a|) <= exp(|a| / scale) <= exp(epsilon).
- :class:`Geometric` is the geometric mechanism of Ghosh, Roughgarden & Sundararajan (2009,
  "Universally utility-maximizing privacy mechanisms"): the two-sided geometric law with
  alpha = exp(-epsilon / Delta), which is the discrete Laplace law above. Given public bounds
  [lower, upper] it is their *truncated* geometric mechanism: the noisy answer is clamped to
  the range, i.e. the mass beyond each end is piled on that end. Clamping is post-processing,
  so the guarantee is unchanged; :meth:`Geometric.output_distribution` gives the exact law.

The noise is drawn exactly by :func:`dpkit.noise.discrete_laplace_units` (no floating-point gap;
from a noise scale of 2^31 on in two exact parts, as Python integers where the draws leave int64),
so every epsilon is accepted whose noise scale stays below :data:`dpkit.noise.MAX_RELEASE_SCALE`
(2^1007, where intervals and quantiles stay within float64). Constant-time mode
(``constant_time=True``) uses :func:`dpkit.noise.discrete_laplace`'s fixed-work sampler, up to 2^40.
Releases are int64 while they fit, Python integers (object arrays) beyond.
"""

from __future__ import annotations

import math
import numbers
import struct
import sys
import warnings
from abc import abstractmethod
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError, PrivacyWarning
from dpkit._lazy import LazyModule
from dpkit._search import first_true
from dpkit._validation import (
    as_fraction,
    check_epsilon,
    check_integer,
    check_positive,
    warn_if_risky,
)
from dpkit.events import DiscreteLaplaceEvent
from dpkit.guarantees import ApproxDP, PureDP, round_up
from dpkit.mechanisms._base import NumericMechanism, check_alpha, check_integer_values
from dpkit.noise import (
    MAX_RELEASE_SCALE,
    MAX_SCALE,
    RandomSource,
    constant_time_tv_bound,
    discrete_laplace,
    discrete_laplace_units,
    resolve_source,
)

optimize = LazyModule("scipy.optimize")

__all__ = ["DiscreteLaplace", "Geometric", "check_integer_sensitivity"]

# int64 range of released integers; floats hold every integer below 2^53 exactly.
_INT64_LOW, _INT64_HIGH = -(2**63), 2**63
_EXACT_FLOAT_INTEGER = 2**53
_LARGEST_FLOAT_INTEGER = int(sys.float_info.max)


def check_integer_sensitivity(value: Any, name: str = "sensitivity") -> int:
    """An integer sensitivity >= 1 (an integral float such as 2.0 is accepted; 1.5, NaN, inf are not)."""
    allowed = "must be an integer >= 1 (integer-valued queries move by whole units)"
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise InvalidParameterError(name, value, allowed)
    as_float = float(value)
    if not math.isfinite(as_float) or as_float != math.floor(as_float) or as_float < 1:
        raise InvalidParameterError(name, value, allowed)
    return int(as_float)


def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidParameterError(name, value, "must be True or False")
    return value


def _scale_up(value: Fraction) -> float:
    """The smallest float >= value (a noise scale must never fall below its exact value); inf beyond
    the float range (a subnormal epsilon), for the caller's limit check to refuse."""
    try:
        scale = float(value)
    except OverflowError:
        return math.inf
    if Fraction(scale) < value:
        scale = math.nextafter(scale, math.inf)
    return scale


def _scale_allowed(scale: float, constant_time: bool) -> bool:
    """Whether a noise scale is accepted: below 2^1007, and at most 2^40 in constant-time mode."""
    return scale <= MAX_SCALE if constant_time else scale < MAX_RELEASE_SCALE


def _smallest_epsilon(sensitivity: int, constant_time: bool = False) -> float:
    """The least float epsilon whose noise scale (sensitivity / epsilon, rounded up) is accepted."""
    epsilon = sensitivity / (MAX_SCALE if constant_time else MAX_RELEASE_SCALE)
    while not _scale_allowed(_scale_up(Fraction(sensitivity) / as_fraction(epsilon)), constant_time):
        epsilon = math.nextafter(epsilon, math.inf)
    while _scale_allowed(_scale_up(Fraction(sensitivity) / as_fraction(math.nextafter(epsilon, 0.0))), constant_time):
        epsilon = math.nextafter(epsilon, 0.0)
    return epsilon


def int64_if_fits(values: NDArray[Any]) -> NDArray[Any]:
    """Integers (an int64 or object array) as int64 when every one fits, else an object array of
    Python integers. The choice depends on the released values only (post-processing)."""
    if values.dtype != object:
        return values
    if values.size == 0 or (_INT64_LOW <= min(values.flat) and max(values.flat) < _INT64_HIGH):
        return values.astype(np.int64)
    return values


def _float_down(value: int) -> float:
    """The largest float <= an integer (-inf below the float range)."""
    if value > _LARGEST_FLOAT_INTEGER:
        return sys.float_info.max
    if value < -_LARGEST_FLOAT_INTEGER:
        return -math.inf
    result = float(value)
    return math.nextafter(result, -math.inf) if int(result) > value else result


def float_up(value: int) -> float:
    """The smallest float >= an integer (+inf above the float range): a half-width never rounds down."""
    if value < -_LARGEST_FLOAT_INTEGER:
        return -sys.float_info.max
    if value > _LARGEST_FLOAT_INTEGER:
        return math.inf
    result = float(value)
    return math.nextafter(result, math.inf) if int(result) < value else result


def _wide_integers(released: Any) -> NDArray[Any] | None:
    """``released`` as an object array of Python integers when float64 cannot hold it exactly (Python
    integers beyond int64, as released at huge scales, or integers of 2^53 and more); None otherwise."""
    if released is None or isinstance(released, bool | np.bool_):
        return None
    try:
        array = np.asarray(released)
    except (TypeError, ValueError):
        return None
    if array.dtype.kind in "iu" and array.size:
        wide = int(np.max(array)) >= _EXACT_FLOAT_INTEGER or int(np.min(array)) <= -_EXACT_FLOAT_INTEGER
        return array.astype(object) if wide else None
    if (
        array.dtype == object
        and array.size
        and all(isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_) for v in array.flat)
    ):
        return np.vectorize(int, otypes=[object])(array)  # type: ignore[no-any-return]
    return None


def integer_confidence_interval(
    quantile_units: Any, alpha: float, released: Any, simultaneous: bool, dimension: int | None
) -> tuple[Any, Any] | None:
    """The interval released -+ h of an integer mechanism, computed exactly in integers and rounded
    outward to floats, for released integers that float64 cannot hold exactly (:func:`_wide_integers`);
    None for any other ``released`` (the base class's interval then applies). ``quantile_units(level)``
    is the integer half-width h with P(|Z| > h) <= level. The union bound over coordinates is the
    base class's (:meth:`NumericMechanism.confidence_interval`)."""
    values = _wide_integers(released)
    if values is None:
        return None
    level = check_alpha(alpha)
    if not isinstance(simultaneous, bool):
        raise InvalidParameterError("simultaneous", simultaneous, "must be True or False")
    count = values.size
    if dimension is not None:
        count = check_integer("dimension", dimension, minimum=1)
        if count < values.size:
            raise InvalidParameterError(
                "dimension",
                dimension,
                f"must be at least the number of released coordinates ({values.size}): a simultaneous "
                "interval over fewer coordinates than it covers would not hold",
            )
    if simultaneous and count > 1:
        level = level / count
    half_width = int(quantile_units(level))
    low = np.array([_float_down(int(v) - half_width) for v in values.flat], dtype=np.float64)
    high = np.array([float_up(int(v) + half_width) for v in values.flat], dtype=np.float64)
    if values.ndim == 0:
        return (float(low[0]), float(high[0]))
    return (low.reshape(values.shape), high.reshape(values.shape))


class IntegerNoiseMechanism(NumericMechanism):
    """Base of the integer mechanisms (discrete Laplace, geometric, discrete Gaussian): their accuracy
    from ``_quantile_units(level)``, the smallest integer half-width h with P(|Z| > h) <= level."""

    @abstractmethod
    def _quantile_units(self, level: float) -> int:
        """The smallest integer h >= 0 with P(|Z| > h) <= level, for this mechanism's law."""

    def noise_quantile(self, alpha: float) -> float:
        """The smallest integer h >= 0 with P(|Z| > h) <= alpha (integer half-width; as a float rounded
        up where h passes 2^53)."""
        return float_up(self._quantile_units(check_alpha(alpha)))

    def confidence_interval(
        self, alpha: float, released: Any = None, *, simultaneous: bool = False, dimension: int | None = None
    ) -> tuple[Any, Any]:
        """Interval that contains the true value with probability >= 1 - alpha (see
        :meth:`NumericMechanism.confidence_interval`). Released integers float64 cannot hold exactly
        (Python integers from huge scales) are taken exactly, the ends rounded outward."""
        wide = integer_confidence_interval(self._quantile_units, alpha, released, simultaneous, dimension)
        if wide is not None:
            return wide
        return super().confidence_interval(alpha, released, simultaneous=simultaneous, dimension=dimension)


def _bits_of_float(value: float) -> int:
    """The IEEE 754 bit pattern of a positive float: an integer ordered as the floats are."""
    return int(struct.unpack("<q", struct.pack("<d", value))[0])


def _float_of_bits(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<q", bits))[0])


def _as_output(array: NDArray[Any], scalar: bool) -> Any:
    return int(array.reshape(-1)[0]) if scalar else array


class DiscreteLaplace(IntegerNoiseMechanism):
    """Add discrete Laplace noise to an integer query: epsilon-DP, integer output.

    Releases x + Z with P(Z = z) = (1 - q) / (1 + q) q^|z|, q = exp(-1 / scale), scale the
    smallest float >= sensitivity / epsilon. Guarantee: ``PureDP(epsilon)`` (add/remove
    neighbours) for queries of integer L1 sensitivity ``sensitivity`` (vectors: the L1 norm of
    the change; each coordinate gets independent noise). Reference: Ghosh, Roughgarden &
    Sundararajan (2009); Canonne, Kamath & Steinke (2020), Sec. 2 (the same law, as "discrete
    Laplace").

    ``constant_time=True`` draws every sample with fixed work (no timing side channel from the
    rare exact refinement step). Those samples are within total variation
    tau = :func:`dpkit.noise.constant_time_tv_bound` (scale) of the exact law per coordinate, so
    the guarantee becomes ``ApproxDP(epsilon, (1 + e^epsilon) * dimension * tau)``: if the ideal
    mechanism is (epsilon, 0)-DP and the real one is within tau' in total variation,
    P[M(x) in S] <= e^eps P[M(x') in S] + (1 + e^eps) tau'. ``dimension`` (default 1) is the
    largest number of coordinates one release may have in that mode.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> mechanism = DiscreteLaplace(sensitivity=1, epsilon=1.0)
    >>> mechanism.guarantee
    PureDP(epsilon=1.0)
    >>> mechanism.release(42, rng=InsecureSeededRandom(0))
    42
    >>> mechanism.confidence_interval(0.05)
    (-3.0, 3.0)
    """

    def __init__(self, sensitivity: int, epsilon: float, *, constant_time: bool = False, dimension: int = 1) -> None:
        self._sensitivity = check_integer_sensitivity(sensitivity)
        self._epsilon = check_epsilon(epsilon)
        self._constant_time = _check_flag("constant_time", constant_time)
        self._dimension = check_integer("dimension", dimension, minimum=1)
        warn_if_risky(self._epsilon)
        self._epsilon_exact = as_fraction(self._epsilon)
        # Rounded up: q^{-Delta} = exp(Delta / scale) <= exp(epsilon) for the exact epsilon claimed.
        self._scale = _scale_up(Fraction(self._sensitivity) / self._epsilon_exact)
        if not self._scale < MAX_RELEASE_SCALE:
            raise InvalidParameterError(
                "epsilon",
                epsilon,
                f"gives noise scale {self._scale:g}: it must stay below 2**1007 ({MAX_RELEASE_SCALE:.4g}) for "
                "intervals and quantiles to stay within float64 (raise epsilon)",
            )
        if self._constant_time and self._scale > MAX_SCALE:
            raise InvalidParameterError(
                "epsilon",
                epsilon,
                f"gives noise scale {self._scale:g} above the constant-time sampler's limit {MAX_SCALE:g} (2**40); "
                "raise epsilon or use constant_time=False",
            )
        if self._constant_time and self._timing_delta(self._epsilon_exact) >= 1:
            raise InvalidParameterError(
                "epsilon",
                epsilon,
                "is so large that the constant-time delta (1 + e^epsilon) * dimension * tau reaches 1",
            )

    # -- parameters --------------------------------------------------------------------------

    @property
    def sensitivity(self) -> int:
        return self._sensitivity

    @property
    def epsilon(self) -> float:
        return self._epsilon

    @property
    def scale(self) -> float:
        """The noise scale t (q = exp(-1/t)); the smallest float >= sensitivity / epsilon."""
        return self._scale

    @property
    def q(self) -> float:
        """q = exp(-1 / scale): P(Z = z) is proportional to q^|z|."""
        return math.exp(-1.0 / self._scale)

    @property
    def constant_time(self) -> bool:
        return self._constant_time

    # -- privacy -----------------------------------------------------------------------------

    def _timing_delta(self, epsilon: Fraction) -> Fraction:
        tau = constant_time_tv_bound(self._scale, "discrete_laplace")
        if float(epsilon) > 700:  # e^epsilon overflows; tau >= 2^-40, so the delta is far above 1
            return Fraction(1)
        return Fraction(round_up((1.0 + math.exp(float(epsilon))) * self._dimension * tau, 8))

    def privacy_map(self, d_in: float) -> PureDP | ApproxDP:  # type: ignore[override]
        """epsilon * d_in / sensitivity (the ratio bound exp(d_in / scale) is at most that).

        In constant-time mode, plus the delta of the constant-time samplers (class docstring).
        """
        distance = as_fraction(check_positive("d_in", d_in))
        epsilon = self._epsilon_exact * distance / self._sensitivity
        if not self._constant_time:
            return PureDP(epsilon)  # type: ignore[arg-type]
        delta = self._timing_delta(epsilon)
        if delta >= 1:
            raise InvalidParameterError("d_in", d_in, "is so large that the constant-time delta reaches 1")
        return ApproxDP(epsilon, delta)  # type: ignore[arg-type]

    @property
    def guarantee(self) -> PureDP | ApproxDP:  # type: ignore[override]
        return self.privacy_map(self._sensitivity)

    @property
    def event(self) -> DiscreteLaplaceEvent:
        return DiscreteLaplaceEvent(self._scale, self._sensitivity)

    # -- release -----------------------------------------------------------------------------

    def _check_values(self, value: Any) -> NDArray[np.int64]:
        array = check_integer_values("value", value)
        if self._constant_time and array.size > self._dimension:
            raise InvalidParameterError(
                "value", value, f"has {array.size} coordinates; this constant-time mechanism allows {self._dimension}"
            )
        return array

    def _noise(self, count: int, rng: RandomSource | None) -> NDArray[Any]:
        """Exact discrete Laplace noise: int64 while it fits, Python integers beyond (scales near 2^57).
        Constant-time mode (scales up to 2^40) has its own fixed-work sampler; otherwise
        :func:`dpkit.noise.discrete_laplace_units` picks the fastest exact path for the scale."""
        source = resolve_source(rng)
        if self._constant_time:
            return discrete_laplace(self._scale, count, rng=source, constant_time=True)
        return discrete_laplace_units(self._scale, count, source)

    def release(self, value: Any, *, rng: RandomSource | None = None) -> Any:
        """x + Z for an integer (or array of integers) x; an int for a scalar, an int64 array otherwise
        (an object array of Python integers when a value leaves the int64 range: scales beyond ~2^57)."""
        array = self._check_values(value)
        noisy = array + self._noise(array.size, rng).reshape(array.shape)
        return _as_output(self._integers(noisy), array.ndim == 0)

    def _integers(self, noisy: Any) -> Any:
        """int64 results as before up to scale 2^40; beyond, Python integers, as int64 where they fit."""
        return noisy if self._scale <= MAX_SCALE else int64_if_fits(np.asarray(noisy, dtype=object))

    def _release_repeated(self, value: Any, count: int, source: RandomSource) -> NDArray[Any]:
        array = self._check_values(value)
        if array.ndim != 0 or self._constant_time:  # (constant time: at most `dimension` coordinates a call)
            return np.stack([np.asarray(self.release(array, rng=source)) for _ in range(count)])
        return np.asarray(self.release(np.full(count, int(array)), rng=source))

    # -- accuracy ----------------------------------------------------------------------------

    def tail_probability(self, m: int) -> float:
        """P(|Z| >= m) = 2 q^m / (1 + q) for an integer m >= 1 (1 for m <= 0)."""
        threshold = check_integer("m", m)
        if threshold <= 0:
            return 1.0
        q = self.q
        try:
            exponent = threshold / self._scale
        except OverflowError:  # m beyond the float range: m / scale > 2^1024 / 2^1007, the tail underflows
            return 0.0
        return 2.0 * math.exp(-exponent) / (1.0 + q)

    def _quantile_units(self, level: float) -> int:
        """The smallest integer h >= 0 with P(|Z| > h) <= level (1 - 1e-12) (exact law)."""
        q = self.q
        # P(|Z| > h) = 2 q^(h+1) / (1 + q) <= alpha  <=>  h + 1 >= scale * ln(2 / (alpha (1 + q))).
        guess = max(0, math.ceil(self._scale * (math.log(2.0 / (1.0 + q)) - math.log(level))) - 1)
        # Correct a float misstep either way (galloping: where the tail underflows, at alpha ~1e-320,
        # the guess can be off by many units); the check keeps a relative safety margin, which also
        # absorbs the float error of the tail at huge scales (m / scale is off by 2^-53 relative, so
        # the tail by at most 745 * 2^-52 = 1.7e-13 relative where it does not underflow).
        return first_true(lambda h: self.tail_probability(h + 1) <= level * (1 - 1e-12), guess)

    @property
    def expected_error(self) -> float:
        """E|Z| = 2 q / (1 - q^2)."""
        q = self.q
        one_minus_q = -math.expm1(-1.0 / self._scale)
        return 2.0 * q / (one_minus_q * (1.0 + q))

    @property
    def variance(self) -> float:
        """Var Z = E Z^2 = 2 q / (1 - q)^2 (inf where it passes the float range, scales beyond ~1e154)."""
        one_minus_q = -math.expm1(-1.0 / self._scale)
        if one_minus_q > 1e-150:
            return 2.0 * self.q / one_minus_q**2
        inverse = 1.0 / one_minus_q  # (1 - q)^2 would underflow; 1 / (1 - q) is at most ~2^1007
        return 2.0 * self.q * inverse * inverse  # a float product overflows to inf, never raises

    def pmf(self, z: Any) -> NDArray[np.float64]:
        """P(Z = z) = (1 - q)/(1 + q) q^|z| for integers z (floats, for analysis and tests)."""
        values = np.abs(np.asarray(z, dtype=np.float64))
        q = self.q
        return (-math.expm1(-1.0 / self._scale) / (1.0 + q)) * np.exp(-values / self._scale)

    @classmethod
    def from_accuracy(
        cls, sensitivity: int, accuracy: float, alpha: float, *, constant_time: bool = False
    ) -> DiscreteLaplace:
        """The mechanism with the smallest epsilon whose (1 - alpha) noise interval is within +-accuracy.

        The arguments are ordered as ``Laplace.from_accuracy``'s and ``Gaussian.from_accuracy``'s
        (sensitivity, accuracy, alpha).

        That is, ``noise_quantile(alpha) <= accuracy`` (P(|Z| > accuracy) <= alpha for the exact
        discrete law; ``accuracy`` >= 0, only its integer part matters since Z is an integer), for
        every alpha in (0, 1). The epsilon returned is the least float with that property: the
        next float below it misses the target. When even the smallest epsilon the mechanism accepts
        (noise scale below 2^1007; at most 2^40 in constant-time mode) meets the target, the least
        epsilon lies below that limit and the target is refused with an
        :class:`~dpkit.InvalidParameterError` naming ``accuracy``.

        >>> mechanism = DiscreteLaplace.from_accuracy(1, accuracy=10, alpha=0.05)
        >>> mechanism.noise_quantile(0.05) <= 10, round(mechanism.epsilon, 4)
        (True, 0.2843)
        """
        bound = check_positive("accuracy", accuracy, allow_zero=True)
        level = check_alpha(alpha)
        delta = check_integer_sensitivity(sensitivity)
        _check_flag("constant_time", constant_time)
        m = math.floor(bound) + 1

        def meets(epsilon: float) -> bool:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PrivacyWarning)
                return cls(delta, epsilon, constant_time=constant_time).noise_quantile(level) <= bound

        def excess(log_scale: float) -> float:
            t = math.exp(log_scale)
            return math.log(2.0) - m / t - math.log1p(math.exp(-1.0 / t)) - math.log(level)

        # excess is increasing in the scale; P(|Z| >= m) -> 2/(1+q) > 1 > alpha as the scale grows.
        low, high = -10.0, 0.0
        while excess(high) < 0 and high < 700.0:  # scales up to e^700 (2^1007 is e^698)
            low, high = high, high + 5.0
        while excess(low) > 0:
            low -= 10.0
        # The root is a first guess only: near alpha = 1 the float excess cancels to a few digits,
        # and noise_quantile keeps a 1e-12 margin on alpha. The exact answer is searched below.
        guess = delta / math.exp(optimize.brentq(excess, low, high, xtol=1e-14)) if excess(high) >= 0 else 0.0
        smallest = _smallest_epsilon(delta, constant_time)
        if meets(smallest):
            limit = f"at most {MAX_SCALE:g}" if constant_time else f"below 2**1007 ({MAX_RELEASE_SCALE:.4g})"
            raise InvalidParameterError(
                "accuracy",
                accuracy,
                f"is met even at the smallest epsilon the mechanism accepts ({smallest:g}, noise scale "
                f"{limit}); the smallest epsilon meeting it lies below that limit",
            )
        # Positive floats are ordered as their bit patterns: the least float epsilon meeting the target
        # is the first integer pattern where the (monotone) test holds, galloping from the guess.
        least = first_true(
            lambda bits: meets(_float_of_bits(bits)), _bits_of_float(max(guess, smallest)), _bits_of_float(smallest)
        )
        return cls(delta, _float_of_bits(least), constant_time=constant_time)  # warns once if epsilon is risky

    def __repr__(self) -> str:
        extra = f", constant_time=True, dimension={self._dimension}" if self._constant_time else ""
        return f"{type(self).__name__}(sensitivity={self._sensitivity}, epsilon={self._epsilon}{extra})"


class Geometric(DiscreteLaplace):
    """The (truncated) geometric mechanism of Ghosh, Roughgarden & Sundararajan (2009).

    Without bounds: x + Z with Z two-sided geometric, P(Z = z) proportional to alpha^|z|,
    alpha = exp(-epsilon / Delta) (up to rounding the scale Delta/epsilon up): exactly
    :class:`DiscreteLaplace`. With public integer bounds ``lower`` and/or ``upper`` (a count
    known to lie in [lower, upper]): clamp(x + Z, lower, upper), the truncated geometric
    mechanism, whose output law puts P(Z <= lower - x) on ``lower`` and P(Z >= upper - x) on
    ``upper``. Clamping is post-processing: the guarantee is still ``PureDP(epsilon)``.
    Values outside [lower, upper] are refused before any noise is drawn. Confidence intervals
    are intersected with [lower, upper] (still covering: clamping never moves the output away
    from a true value inside the range).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> mechanism = Geometric(sensitivity=1, epsilon=0.5, lower=0, upper=10)
    >>> mechanism.release(1, rng=InsecureSeededRandom(0))
    0
    >>> mechanism.confidence_interval(0.1, released=1)
    (0.0, 6.0)
    >>> round(sum(mechanism.output_distribution(5).values()), 12)
    1.0
    """

    def __init__(
        self,
        sensitivity: int,
        epsilon: float,
        lower: int | None = None,
        upper: int | None = None,
        *,
        constant_time: bool = False,
        dimension: int = 1,
    ) -> None:
        super().__init__(sensitivity, epsilon, constant_time=constant_time, dimension=dimension)
        self._lower = None if lower is None else check_integer("lower", lower)
        self._upper = None if upper is None else check_integer("upper", upper)
        if self._lower is not None and self._upper is not None and not self._lower < self._upper:
            raise InvalidParameterError("upper", upper, f"must be greater than lower ({lower})")
        for name, bound in (("lower", self._lower), ("upper", self._upper)):
            if bound is not None and abs(bound) >= 2**62:
                raise InvalidParameterError(name, bound, "must be below 2**62 in magnitude")

    @property
    def lower(self) -> int | None:
        return self._lower

    @property
    def upper(self) -> int | None:
        return self._upper

    @property
    def alpha(self) -> float:
        """GRS's alpha = exp(-1 / scale) >= exp(-epsilon / sensitivity)."""
        return self.q

    def _check_values(self, value: Any) -> NDArray[np.int64]:
        array = super()._check_values(value)
        if self._lower is not None and np.any(array < self._lower):
            raise InvalidParameterError("value", value, f"must be >= lower ({self._lower})")
        if self._upper is not None and np.any(array > self._upper):
            raise InvalidParameterError("value", value, f"must be <= upper ({self._upper})")
        return array

    def _clamp(self, array: NDArray[Any]) -> NDArray[Any]:
        if array.dtype == object:  # Python integers (huge scales): numpy's min/max would cast them to C longs
            return np.vectorize(self._clamp_one, otypes=[object])(array)  # type: ignore[no-any-return]
        if self._lower is not None:
            array = np.maximum(array, self._lower)
        if self._upper is not None:
            array = np.minimum(array, self._upper)
        return array

    def _clamp_one(self, value: int) -> int:
        if self._lower is not None and value < self._lower:
            return self._lower
        if self._upper is not None and value > self._upper:
            return self._upper
        return value

    def release(self, value: Any, *, rng: RandomSource | None = None) -> Any:
        """clamp(x + Z, lower, upper) for integer x in [lower, upper] (an int for a scalar x)."""
        array = self._check_values(value)
        noisy = array + self._noise(array.size, rng).reshape(array.shape)
        if self._scale > MAX_SCALE:  # Python integers: clamped as objects (numpy would cast them to C longs)
            return _as_output(self._integers(self._clamp(np.asarray(noisy, dtype=object))), array.ndim == 0)
        return _as_output(self._clamp(noisy).astype(np.int64), array.ndim == 0)

    def confidence_interval(
        self, alpha: float, released: Any = None, *, simultaneous: bool = False, dimension: int | None = None
    ) -> tuple[Any, Any]:
        """The noise interval around ``released``, intersected with [lower, upper]."""
        low, high = super().confidence_interval(alpha, released, simultaneous=simultaneous, dimension=dimension)
        if released is None:
            return (low, high)
        low_array = self._clamp(np.asarray(low, dtype=np.float64))
        high_array = self._clamp(np.asarray(high, dtype=np.float64))
        if low_array.ndim == 0:
            return (float(low_array), float(high_array))
        return (low_array, high_array)

    def output_distribution(self, value: int) -> dict[int, float]:
        """The exact law of :meth:`release` (value) over lower..upper, as {output: probability}.

        Needs both bounds. Probabilities are floats computed from the closed forms
        P(Z = z) = (1-q)/(1+q) q^|z|, P(Z >= m) = q^m / (1+q) (m >= 0),
        P(Z <= -m) = q^m / (1+q) (m >= 0). For analysis and tests: it depends on the value.
        """
        if self._lower is None or self._upper is None:
            bounds = (self._lower, self._upper)
            raise InvalidParameterError("bounds", bounds, "output_distribution needs lower and upper")
        x = int(self._check_values(check_integer("value", value)))
        q = self.q

        def at_least(m: int) -> float:  # P(Z >= m)
            if m >= 0:
                return math.exp(-m / self._scale) / (1.0 + q)
            return 1.0 - math.exp(-(1 - m) / self._scale) / (1.0 + q)

        outputs = range(self._lower, self._upper + 1)
        inner = self.pmf(np.arange(self._lower - x, self._upper - x + 1))
        law = {y: float(p) for y, p in zip(outputs, inner, strict=True)}
        law[self._lower] = at_least(x - self._lower)  # P(Z <= lower - x) = P(Z >= x - lower)
        law[self._upper] = at_least(self._upper - x)
        return law

    def __repr__(self) -> str:
        bounds = f", lower={self._lower}, upper={self._upper}" if (self._lower, self._upper) != (None, None) else ""
        return super().__repr__()[:-1] + bounds + ")"
