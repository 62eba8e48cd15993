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

from abc import ABC, abstractmethod
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._validation import check_integer, check_positive, check_probability
from dpkit.events import PrivacyEvent
from dpkit.guarantees import ZCDP, ApproxDP, ApproxZCDP, Guarantee, PureDP
from dpkit.noise import RandomSource, resolve_source

__all__ = ["Mechanism", "NumericMechanism", "check_alpha", "guarantee_implies"]


def check_alpha(alpha: Any) -> float:
    """alpha of a confidence interval: a probability strictly between 0 and 1."""
    return check_probability("alpha", alpha, open_low=True, open_high=True)


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
    """A randomized algorithm with a stated privacy guarantee."""

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
        return guarantee_implies(self.privacy_map(d_in), d_out)

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
        (union bound over the coordinates).
        """
        level = check_alpha(alpha)
        array = None if released is None else np.asarray(released, dtype=np.float64)
        count = dimension or (array.size if array is not None else 1)
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
