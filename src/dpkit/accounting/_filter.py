"""Privacy filters (a budget that refuses the release that would exceed it) and odometers.

A :class:`PrivacyFilter` checks every release against a fixed budget *before* any state
changes: it composes the event into a copy of its accountant, compares the copy with the
budget, and only then keeps the copy. A refused event leaves the filter exactly as it was.

A :class:`PrivacyOdometer` has no budget; it reports the privacy spent so far.

Adaptivity: with :class:`~dpkit.accounting.BasicAccountant` (the default) both hold when each
release's parameters are chosen after seeing earlier outputs (Rogers, Roth, Ullman & Vadhan
2016, "Privacy odometers and filters: pay-as-you-go composition"). Other accountants compose a
sequence fixed in advance; their filters are valid when the parameters do not depend on the
outputs (for Renyi DP, see Feldman & Zrnic 2021 for the fully adaptive filter).
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable
from fractions import Fraction

from dpkit._errors import BudgetExceededError, InvalidParameterError, UnsupportedEventError
from dpkit._validation import check_delta, check_integer, check_positive
from dpkit.accounting._base import PrivacyAccountant
from dpkit.accounting._composition import BasicAccountant
from dpkit.events import PrivacyEvent
from dpkit.guarantees import ZCDP, ApproxDP, Guarantee, PureDP

__all__ = ["PrivacyFilter", "PrivacyOdometer"]


class PrivacyFilter:
    """A privacy budget that refuses, unchanged, any release that would exceed it.

    ``budget`` is a PureDP or ApproxDP guarantee; ``accountant_factory`` makes the (empty)
    accountant that composes the releases (default: exact basic composition under the
    budget's neighbour relation). A PureDP budget is met when the accountant's epsilon at
    delta = 0 is within it; an ApproxDP(eps, delta) budget when its epsilon at ``delta`` is.

    A filter admits a release only on a certified upper bound: an accountant whose answers are
    approximations (``certified = False``, such as SaddlePointAccountant) is refused when the
    filter is built, and a release after which the accountant is no longer certified (a
    subsampled event in GDPAccountant, read through the central limit theorem, which can
    understate epsilon) raises UnsupportedEventError and changes nothing.

    >>> from dpkit.events import PureDPEvent
    >>> budget = PrivacyFilter(PureDP(1.0))
    >>> all(budget.try_spend(PureDPEvent(0.1)) for _ in range(10))
    True
    >>> budget.try_spend(PureDPEvent(0.1))   # refused, nothing recorded
    False
    >>> budget.spent
    PureDP(epsilon=1.0)
    """

    def __init__(
        self,
        budget: Guarantee,
        accountant_factory: Callable[[], PrivacyAccountant] | None = None,
    ) -> None:
        if isinstance(budget, ZCDP):
            raise InvalidParameterError(
                "budget", budget, "must be PureDP or ApproxDP; convert a zCDP budget with .to_approx(delta)"
            )
        if not isinstance(budget, PureDP | ApproxDP):
            raise InvalidParameterError("budget", budget, "must be a dpkit PureDP or ApproxDP guarantee")
        self.budget: PureDP | ApproxDP = budget
        if accountant_factory is None:
            # A partial, not a closure: a filter can then be pickled (saved with what it spent).
            accountant_factory = functools.partial(BasicAccountant, budget.neighbours)
        if not callable(accountant_factory):
            raise InvalidParameterError("accountant_factory", accountant_factory, "must be a callable")
        self._factory = accountant_factory
        accountant = accountant_factory()
        if not isinstance(accountant, PrivacyAccountant):
            raise InvalidParameterError(
                "accountant_factory", accountant_factory, "must return a dpkit.accounting.PrivacyAccountant"
            )
        if accountant.history:
            raise InvalidParameterError("accountant_factory", accountant_factory, "must return an empty accountant")
        if not accountant.certified:
            raise InvalidParameterError(
                "accountant_factory",
                accountant_factory,
                "must make a certified accountant (certified=True): a filter cannot admit releases on an approximation",
            )
        if accountant.neighbours is not budget.neighbours:
            raise InvalidParameterError(
                "accountant_factory",
                accountant_factory,
                f"must make accountants under the budget's relation {budget.neighbours.value}",
            )
        self._accountant = accountant

    # -- spending -----------------------------------------------------------------------------

    def _fits(self, accountant: PrivacyAccountant) -> bool:
        if isinstance(accountant, BasicAccountant):
            # Exact rational comparison: ten spends of 0.1 exactly fill a budget of 1.
            return (
                accountant.epsilon_exact <= self.budget.epsilon_exact
                and accountant.delta_exact <= self.budget.delta_exact
            )
        return accountant.epsilon(self.budget.delta) <= self.budget.epsilon

    def _composed(self, event: PrivacyEvent, count: int) -> PrivacyAccountant:
        """A copy of the accountant with ``event`` composed; refused if its answer is not certified."""
        candidate = copy.deepcopy(self._accountant)
        candidate.compose(event, check_integer("count", count, minimum=1))  # a refusal leaves self untouched
        if not candidate.certified:
            raise UnsupportedEventError(
                f"{type(candidate).__name__} can only approximate the privacy of {event!r} (certified=False), "
                "and a filter admits releases only on certified bounds; use PLDAccountant or RDPAccountant"
            )
        return candidate

    def spend(self, event: PrivacyEvent, count: int = 1) -> None:
        """Record ``count`` runs of ``event``, or raise BudgetExceededError and change nothing.

        An event the accountant cannot interpret, or can only approximate (its ``certified``
        turns False), raises UnsupportedEventError (also unchanged).
        """
        repeats = check_integer("count", count, minimum=1)
        candidate = self._composed(event, repeats)
        if not self._fits(candidate):
            raise BudgetExceededError(
                self._requested(event, repeats),
                self.remaining,
                f"{type(event).__name__} x {repeats} would exceed the budget {self.budget}",
            )
        self._accountant = candidate

    def try_spend(self, event: PrivacyEvent, count: int = 1) -> bool:
        """Like :meth:`spend`, but answer False instead of raising when the budget would be exceeded."""
        try:
            self.spend(event, count)
        except BudgetExceededError:
            return False
        return True

    def can_spend(self, event: PrivacyEvent, count: int = 1) -> bool:
        """Whether :meth:`spend` would accept the event now (a dry run; nothing is recorded).

        Raises UnsupportedEventError where :meth:`spend` would.
        """
        return self._fits(self._composed(event, count))

    def _requested(self, event: PrivacyEvent, count: int) -> object:
        alone = self._factory()
        alone.compose(event, count)
        if isinstance(alone, BasicAccountant):
            try:
                return alone.guarantee
            except InvalidParameterError:
                return event
        epsilon = alone.epsilon(self.budget.delta)
        if not math.isfinite(epsilon):  # no finite epsilon at this delta (a Gaussian under a pure budget)
            return event
        return ApproxDP(epsilon, self.budget.delta, self.budget.neighbours)

    # -- reading ------------------------------------------------------------------------------

    @property
    def accountant(self) -> PrivacyAccountant:
        """A copy of the accountant holding what was spent (changing it does not change the filter)."""
        return copy.deepcopy(self._accountant)

    @property
    def spent(self) -> PureDP | ApproxDP:
        """What was spent: exact basic composition, or (eps(budget delta), budget delta) for other accountants."""
        if isinstance(self._accountant, BasicAccountant):
            return self._accountant.guarantee
        if not self._accountant.history:
            return ApproxDP(0.0, 0.0, self.budget.neighbours)
        eps = self._accountant.epsilon(self.budget.delta)
        return ApproxDP(eps, self.budget.delta, self.budget.neighbours)

    @property
    def remaining(self) -> PureDP | ApproxDP:
        """Budget minus spent, exactly (clamped at 0).

        Same type as the budget while epsilon is left; ApproxDP(0, delta_left) once it is all
        spent. Under basic composition any release whose own guarantee fits in ``remaining``
        is accepted; other accountants may accept more.
        """
        spent = self.spent
        eps = max(Fraction(0), self.budget.epsilon_exact - spent.epsilon_exact)
        dlt = max(Fraction(0), self.budget.delta_exact - spent.delta_exact)
        if isinstance(self.budget, PureDP) and eps > 0:
            return PureDP(eps, self.budget.neighbours)  # type: ignore[arg-type]
        return ApproxDP(eps, dlt, self.budget.neighbours)  # type: ignore[arg-type]

    @property
    def exhausted(self) -> bool:
        """True when no epsilon is left."""
        return self.remaining.epsilon_exact == 0

    def __repr__(self) -> str:
        return f"PrivacyFilter(budget={self.budget}, spent={self.spent})"


class PrivacyOdometer:
    """The running privacy spend of adaptively chosen releases, with no budget set in advance.

    >>> from dpkit.events import LaplaceEvent
    >>> odometer = PrivacyOdometer(BasicAccountant())
    >>> odometer.record(LaplaceEvent(2.0))
    >>> odometer.record(LaplaceEvent(4.0))
    >>> odometer.current(delta=0.0)
    0.75
    """

    def __init__(self, accountant: PrivacyAccountant | None = None) -> None:
        accountant = BasicAccountant() if accountant is None else accountant
        if not isinstance(accountant, PrivacyAccountant):
            raise InvalidParameterError("accountant", accountant, "must be a dpkit.accounting.PrivacyAccountant")
        self._accountant = accountant

    def record(self, event: PrivacyEvent, count: int = 1) -> None:
        """Add ``count`` runs of ``event``; an unsupported event raises and changes nothing."""
        self._accountant.compose(event, count)

    def current(self, delta: float) -> float:
        """The epsilon spent so far at ``delta`` (0 before any release; inf if ``delta`` is too small)."""
        return self._accountant.epsilon(check_delta(delta))

    def current_delta(self, epsilon: float) -> float:
        """The delta spent so far at ``epsilon``."""
        return self._accountant.delta(check_positive("epsilon", epsilon, allow_zero=True))

    @property
    def history(self) -> tuple[tuple[PrivacyEvent, int], ...]:
        """The releases recorded so far, with their counts."""
        return self._accountant.history

    @property
    def accountant(self) -> PrivacyAccountant:
        """A copy of the accountant."""
        return copy.deepcopy(self._accountant)
