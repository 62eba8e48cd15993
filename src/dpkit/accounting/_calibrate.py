"""Calibration: the noise (or other parameter) that meets a target (epsilon, delta), with any accountant.

Following dp_accounting's design, the search takes two factories -- a fresh accountant, and an
event built from the parameter -- so one bisection serves every accountant and event family.
The answer is always on the safe side: the returned parameter was itself checked against the
target, never interpolated.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_delta, check_epsilon, check_integer, check_positive, check_probability
from dpkit.accounting._base import PrivacyAccountant
from dpkit.events import PrivacyEvent, dpsgd_event

__all__ = ["calibrate_dpsgd_noise", "calibrate_parameter"]

#: How many times a bracket end may be doubled (or halved) while looking for a sign change.
_MAX_EXPANSIONS = 64


def calibrate_parameter(
    target_epsilon: float,
    target_delta: float,
    make_accountant: Callable[[], PrivacyAccountant],
    make_event: Callable[[float], PrivacyEvent],
    bounds: tuple[float, float] = (0.1, 10.0),
    *,
    increasing: bool = False,
    tolerance: float = 1e-6,
) -> float:
    """The best parameter whose composed epsilon at ``target_delta`` is at most ``target_epsilon``.

    ``make_event(x)`` describes the whole workload for parameter ``x`` (use
    :class:`~dpkit.events.SelfComposedEvent` for a count); each trial composes it into a fresh
    ``make_accountant()``. With ``increasing=False`` (epsilon falls as ``x`` grows: a noise
    multiplier) the *smallest* such ``x`` is returned; with ``increasing=True`` (epsilon grows with
    ``x``: a sampling rate, a number of steps) the *largest*. Epsilon must be monotone in ``x``.

    ``bounds`` is the starting bracket, widened geometrically (doubling up, halving down) when
    the answer lies outside it. Bisection stops when the bracket is narrower than ``tolerance``
    times the answer. The returned value was checked and meets the target; a parameter for
    which ``make_event`` raises InvalidParameterError counts as not meeting it.

    Raises InvalidParameterError for bad inputs or a target no parameter in reach can meet.

    >>> from dpkit.accounting._composition import BasicAccountant
    >>> from dpkit.events import LaplaceEvent, SelfComposedEvent
    >>> multiplier = calibrate_parameter(
    ...     1.0, 0.0, BasicAccountant, lambda b: SelfComposedEvent(LaplaceEvent(b), 20), bounds=(1.0, 2.0)
    ... )
    >>> 20.0 <= multiplier < 20.0001
    True
    """
    target_eps = check_epsilon(target_epsilon, "target_epsilon")
    target_dlt = check_delta(target_delta, "target_delta")
    if not callable(make_accountant):
        raise InvalidParameterError("make_accountant", make_accountant, "must be a callable returning an accountant")
    if not callable(make_event):
        raise InvalidParameterError("make_event", make_event, "must be a callable from a float to a PrivacyEvent")
    if not isinstance(increasing, bool):
        raise InvalidParameterError("increasing", increasing, "must be True or False")
    tol = check_positive("tolerance", tolerance)
    if not isinstance(bounds, tuple) or len(bounds) != 2:
        raise InvalidParameterError("bounds", bounds, "must be a pair (low, high) with 0 < low < high")
    low = check_positive("bounds.low", bounds[0])
    high = check_positive("bounds.high", bounds[1])
    if not low < high:
        raise InvalidParameterError("bounds", bounds, "must satisfy low < high")

    def meets(parameter: float) -> bool:
        try:
            event = make_event(parameter)
        except InvalidParameterError:
            return False
        accountant = make_accountant()
        if not isinstance(accountant, PrivacyAccountant):
            raise InvalidParameterError("make_accountant", make_accountant, "must return a PrivacyAccountant")
        epsilon = accountant.compose(event).epsilon(target_dlt)
        return epsilon <= target_eps

    # ``good`` meets the target, ``bad`` does not; the answer lies between them.
    def double(value: float) -> float:
        return value * 2.0

    def halve(value: float) -> float:
        return value / 2.0

    if increasing:
        good, bad = low, high
        grow, shrink = double, halve
    else:
        good, bad = high, low
        grow, shrink = halve, double
    # ``grow`` moves ``bad`` further from the answer; ``shrink`` moves ``good`` to the safe side.
    if meets(bad):
        for _ in range(_MAX_EXPANSIONS):
            good, bad = bad, grow(bad)
            if not meets(bad):
                break
        else:
            return good
    if not meets(good):
        for _ in range(_MAX_EXPANSIONS):
            bad, good = good, shrink(good)
            if meets(good):
                break
        else:
            raise InvalidParameterError(
                "target_epsilon",
                target_epsilon,
                f"is not reached for any parameter tried up to {good!r} (epsilon may not be monotone)",
            )
    while abs(good - bad) > tol * abs(good):
        middle = 0.5 * (good + bad)
        if middle in (good, bad) or not math.isfinite(middle):
            break
        if meets(middle):
            good = middle
        else:
            bad = middle
    return good


def calibrate_dpsgd_noise(
    target_epsilon: float,
    delta: float,
    sampling_probability: float,
    steps: int,
    make_accountant: Callable[[], PrivacyAccountant],
    *,
    bounds: tuple[float, float] = (0.5, 5.0),
    tolerance: float = 1e-4,
) -> float:
    """The smallest DP-SGD noise multiplier reaching ``target_epsilon`` at ``delta``.

    The workload is :func:`dpkit.events.dpsgd_event`: ``steps`` Poisson-sampled Gaussian steps at
    rate ``sampling_probability`` (Abadi et al. 2016). ``make_accountant`` must support that event
    (an RDP or PLD accountant). The returned multiplier meets the target when re-checked.
    """
    check_probability("sampling_probability", sampling_probability, open_low=True)
    check_integer("steps", steps, minimum=1)
    return calibrate_parameter(
        target_epsilon,
        check_delta(delta, allow_zero=False),
        make_accountant,
        lambda sigma: dpsgd_event(sigma, sampling_probability, steps),
        bounds,
        increasing=False,
        tolerance=tolerance,
    )
