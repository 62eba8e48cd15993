"""The contract every mechanism honours.

A mechanism is built from public parameters (sensitivity, privacy parameter or target
accuracy), validates them at construction, and then offers:

- ``guarantee``: what one ``release`` costs, as a :mod:`dpkit.guarantees` value;
- ``privacy_map(d_in)``: the guarantee for inputs whose query values are ``d_in`` apart in the
  mechanism's input metric (``guarantee == privacy_map(sensitivity)``); ``check(d_in, d_out)``
  answers whether a claimed guarantee holds (OpenDP's contract);
- ``event``: the privacy event an accountant composes;
- ``release(value, rng=None)``: the noisy answer, drawn from the secure source unless a test
  passes an :class:`~dpkit.noise.InsecureSeededRandom`;
- for numeric outputs, ``confidence_interval(alpha, released)`` and ``expected_error``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_data, check_integer, check_positive, check_probability
from dpkit.events import PrivacyEvent
from dpkit.guarantees import ZCDP, ApproxDP, ApproxZCDP, Guarantee, PureDP
from dpkit.noise import RandomSource, resolve_source

__all__ = [
    "Mechanism",
    "NumericMechanism",
    "check_alpha",
    "check_integer_values",
    "check_noise_range",
    "check_unmasked",
    "guarantee_implies",
]

#: Integer query answers must stay below this magnitude (room for the noise within int64).
MAX_INTEGER_VALUE = 2**62


def check_alpha(alpha: Any) -> float:
    """alpha of a confidence interval: a probability strictly between 0 and 1."""
    return check_probability("alpha", alpha, open_low=True, open_high=True)


#: The grid mechanisms (Laplace, Gaussian, Staircase and the selection mechanisms) calibrate for
#: sensitivities in [2**-1000, 2**1000] and epsilons of at least 2**-60: beyond, their grid arithmetic
#: (2^k steps, e^{-1/scale}, tail sums) leaves the float range. Some also cap epsilon (e^epsilon).
_SENSITIVITY_RANGE = (2.0**-1000, 2.0**1000)
_SMALLEST_EPSILON = 2.0**-60


def check_noise_range(sensitivity: float, epsilon: float, *, largest_epsilon: float = math.inf) -> None:
    """Refuse an already validated ``sensitivity`` outside [2**-1000, 2**1000] or ``epsilon`` outside
    [2**-60, ``largest_epsilon``], the range the grid mechanisms calibrate for, naming the parameter
    at fault (an :class:`~dpkit.InvalidParameterError`, never an OverflowError)."""
    low, high = _SENSITIVITY_RANGE
    if not low <= sensitivity <= high:
        raise InvalidParameterError(
            "sensitivity", sensitivity, "must lie in [2**-1000, 2**1000] (about 9.3e-302 to 1.07e301)"
        )
    if not _SMALLEST_EPSILON <= epsilon <= largest_epsilon:
        top = "" if math.isinf(largest_epsilon) else f" and at most {largest_epsilon:g}"
        raise InvalidParameterError("epsilon", epsilon, f"must be at least 2**-60 (about 8.7e-19){top} here")


def check_unmasked(name: str, value: Any) -> None:
    """Refuse a numpy masked array with masked entries: its hidden data is not a value to release."""
    if isinstance(value, np.ma.MaskedArray) and np.ma.is_masked(value):
        raise InvalidParameterError(
            name, value, "must have no masked entries (a masked entry is missing data: fill or drop it first)"
        )


def check_integer_values(name: str, value: Any) -> NDArray[np.int64]:
    """Integer query answers as int64, each with |value| < 2**62, checked before any cast.

    The range is checked on the input's own dtype: a uint64 of 2**63 or an int64 of -2**63
    would otherwise wrap (or overflow ``abs``) on the way to int64 and pass as another number.
    An empty answer is refused by name, whatever its dtype, as the grid mechanisms (Laplace,
    Gaussian, Staircase) refuse one: a query answer has at least one coordinate.
    """
    check_unmasked(name, value)
    array = check_data(name, value, integer=True)
    if array.size == 0:
        raise InvalidParameterError(name, value, "must hold at least one integer (an empty query answer)")
    too_low = array.dtype.kind == "i" and array.min() <= -MAX_INTEGER_VALUE
    if array.max() >= MAX_INTEGER_VALUE or too_low:
        raise InvalidParameterError(name, value, "must contain integers with |value| < 2**62")
    return array.astype(np.int64)


def _check_guarantee(name: str, value: Any) -> Guarantee:
    if not isinstance(value, PureDP | ApproxDP | ZCDP | ApproxZCDP):
        raise InvalidParameterError(name, value, "must be a dpkit guarantee (PureDP, ApproxDP, ZCDP or ApproxZCDP)")
    return value


def guarantee_implies(have: Guarantee, want: Guarantee) -> bool:
    """Whether guarantee ``have`` implies ``want`` (same neighbour relation, exact comparison)."""
    if have.neighbours is not want.neighbours:
        return False
    if isinstance(want, ApproxZCDP):
        return not isinstance(have, ApproxDP) and have.within(want)  # the guarantees' own comparison
    if isinstance(have, ApproxZCDP):
        if isinstance(want, ZCDP):
            return have.within(want)
        spare = want.delta_exact - have.delta_exact
        if spare <= 0:
            return False
        return have.to_approx(float(spare)).within(want)
    if isinstance(want, ZCDP):
        if isinstance(have, ZCDP):
            return have.rho_exact <= want.rho_exact
        if isinstance(have, PureDP):
            return have.to_zcdp().rho_exact <= want.rho_exact
        return False
    if isinstance(have, ZCDP):
        if want.delta_exact == 0:
            return False
        return have.to_approx(want.delta).epsilon_exact <= want.epsilon_exact
    return have.epsilon_exact <= want.epsilon_exact and have.delta_exact <= want.delta_exact


class Mechanism(ABC):
    """A randomized algorithm with a stated privacy guarantee.

    Its public parameters are fixed once set: reassigning ``epsilon`` (or ``scale``...) would
    change the stated guarantee without recalibrating the noise, so it raises AttributeError;
    build a new mechanism instead.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and name in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}.{name} is fixed at construction (the noise is calibrated to it); "
                "build a new mechanism instead"
            )
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if not name.startswith("_"):
            raise AttributeError(f"{type(self).__name__}.{name} is fixed at construction and cannot be deleted")
        super().__delattr__(name)

    @property
    @abstractmethod
    def guarantee(self) -> Guarantee:
        """What one release costs."""

    @property
    @abstractmethod
    def event(self) -> PrivacyEvent:
        """The privacy event of one release, for an accountant."""

    @abstractmethod
    def privacy_map(self, d_in: float) -> Guarantee:
        """The guarantee for two inputs at distance ``d_in`` in the input metric."""

    def check(self, d_in: float, d_out: Guarantee) -> bool:
        """True when inputs at distance ``d_in`` get a guarantee at least as strong as ``d_out``."""
        check_positive("d_in", d_in)
        return guarantee_implies(self.privacy_map(d_in), _check_guarantee("d_out", d_out))

    @abstractmethod
    def release(self, value: Any, *, rng: RandomSource | None = None) -> Any:
        """Release ``value`` (the exact query answer) privately."""


class NumericMechanism(Mechanism):
    """A mechanism whose output is the query value plus zero-median noise."""

    def release_repeated(self, value: Any, count: int, *, rng: RandomSource | None = None) -> NDArray[Any]:
        """``count`` independent releases of the same query answer, stacked on the first axis.

        Each release costs :attr:`guarantee` (so ``count`` of them cost ``count`` times as much);
        this exists for simulation, accuracy studies and audits, and is vectorized where the
        mechanism allows.
        """
        repeats = check_integer("count", count, minimum=1)
        if repeats > 2**40:
            raise InvalidParameterError("count", count, "must be at most 2**40 releases per call")
        return self._release_repeated(value, repeats, resolve_source(rng))

    def _release_repeated(self, value: Any, count: int, source: RandomSource) -> NDArray[Any]:
        return np.asarray([self.release(value, rng=source) for _ in range(count)])

    @abstractmethod
    def noise_quantile(self, alpha: float) -> float:
        """Half-width h with P(|noise| <= h) >= 1 - alpha for one coordinate."""

    @property
    @abstractmethod
    def expected_error(self) -> float:
        """E|noise| for one coordinate."""

    def confidence_interval(
        self, alpha: float, released: Any = None, *, simultaneous: bool = False, dimension: int | None = None
    ) -> tuple[Any, Any]:
        """Interval that contains the true value with probability >= 1 - alpha.

        With ``released`` (the output of :meth:`release`), the interval is around it; without,
        it is the interval of the noise itself, (-h, h). For a vector, each coordinate is
        covered with probability 1 - alpha, or all of them at once with ``simultaneous=True``
        (union bound over the coordinates). ``dimension`` is the number of coordinates the union
        bound covers: by default the size of ``released``, or without it the mechanism's own
        ``dimension``; it may exceed the released size (a wider, still valid interval) but not
        fall below it. A ``released`` value that is not finite is refused.
        """
        level = check_alpha(alpha)
        if not isinstance(simultaneous, bool):
            raise InvalidParameterError("simultaneous", simultaneous, "must be True or False")
        array = None
        if released is not None:
            check_unmasked("released", released)
            array = check_data("released", released).astype(np.float64)
        if dimension is not None:
            count = check_integer("dimension", dimension, minimum=1)
            if array is not None and count < array.size:
                raise InvalidParameterError(
                    "dimension",
                    dimension,
                    f"must be at least the number of released coordinates ({array.size}): a simultaneous "
                    "interval over fewer coordinates than it covers would not hold",
                )
        elif array is not None:
            count = array.size
        else:
            # The noise interval of a release of this mechanism: all its calibrated coordinates.
            count = getattr(self, "dimension", 1)
        if simultaneous and count > 1:
            level = level / count
        half_width = self.noise_quantile(level)
        if array is None:
            return (-half_width, half_width)
        low: NDArray[np.float64] | float = array - half_width
        high: NDArray[np.float64] | float = array + half_width
        if array.ndim == 0:
            return (float(low), float(high))
        return (low, high)
