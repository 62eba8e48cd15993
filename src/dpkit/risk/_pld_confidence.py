"""Beyond the paper: the confidence ``c(epsilon) = P[L <= epsilon]`` of any accountable mechanism.

For a dominating pair ``(P, Q)`` of a mechanism (the worst-case neighbouring pair), the privacy
loss ``L = ln (dP/dQ)(Y)``, ``Y ~ P``, has a distribution (the PLD; Sommer, Meiser & Mohammadi
2019). The **confidence** that the realised loss is at most ``epsilon`` is ``P[L <= epsilon]``, the
**risk** ``P[L > epsilon]``. This extends the privacy at risk of Dandekar, Basu & Bressan
(PoPETs 2021) from the Laplace mechanism to every mechanism dpkit can account for.

* Gaussian (noise multiplier ``sigma``, ``mu = 1 / sigma``): ``L ~ N(mu^2 / 2, mu^2)``, so
  ``c = Phi((epsilon - mu^2 / 2) / mu)`` (Balle & Wang 2018). Composition of ``k`` of them is
  Gaussian with ``mu = sqrt(k) / sigma``.
* Laplace (scale ``b = Delta / epsilon0``): under ``P = Lap(Delta, b)``, ``Q = Lap(0, b)`` the
  loss is ``epsilon0`` with probability 1/2, ``-epsilon0`` with probability ``e^-epsilon0 / 2`` and
  ``epsilon0 (2 y / Delta - 1)`` in between, so ``c = e^{-(epsilon0 - epsilon) / 2} / 2`` for
  ``-epsilon0 <= epsilon < epsilon0`` (0 below, 1 from ``epsilon0``).
* Anything else a :class:`dpkit.accounting.PLDAccountant` supports (discrete mechanisms,
  randomised response, subsampled and composed events): read from the accountant's
  discretised PLD (:meth:`dpkit.accounting.PLDAccountant.loss_distribution`, grid ``h``), mass
  at losses ``<= epsilon``; with both add and remove directions the smaller confidence is
  returned. The value is accurate to the grid (losses move by at most ``h``, compositions
  spread that error; the pessimistic grid may also carry rounding mass of about ``1e-8`` per
  event), so it is an estimate, not a certified bound.

**Not the paper's c_1.** For Laplace this worst-case-pair confidence is at most 1/2 below
``epsilon0`` (the loss equals ``epsilon0`` on half of the outputs), while the paper's
:func:`dpkit.risk.laplace_confidence` conditions on the noise ``T <= epsilon0`` and goes up to 1;
both are reported, under their own names.
"""

from __future__ import annotations

import math

import numpy as np

from dpkit._errors import UnsupportedEventError
from dpkit._lazy import LazyModule
from dpkit._validation import check_epsilon, check_integer, check_positive
from dpkit.accounting import PLDAccountant
from dpkit.events import GaussianEvent, LaplaceEvent, PrivacyEvent, SelfComposedEvent
from dpkit.risk._numeric import scaled_product, sqrt_count

special = LazyModule("scipy.special")

__all__ = ["confidence_from_accountant", "gaussian_loss_confidence", "laplace_loss_confidence"]


def _check_loss_threshold(epsilon: float) -> float:
    # P[L <= epsilon] is defined for every real epsilon; the public API keeps epsilon >= 0.
    return check_positive("epsilon", epsilon, allow_zero=True, allow_inf=True)


def gaussian_loss_confidence(epsilon: float, noise_multiplier: float, count: int = 1) -> float:
    """Returns a **confidence**: ``P[L <= epsilon]`` for ``count`` Gaussian steps of ``noise_multiplier``.

    >>> round(gaussian_loss_confidence(0.5, 1.0), 6)   # Phi(0)
    0.5
    """
    eps = _check_loss_threshold(epsilon)
    sigma = check_epsilon(noise_multiplier, "noise_multiplier")
    steps = check_integer("count", count, minimum=1)
    if math.isinf(eps):
        return 1.0
    # mu = sqrt(count) / sigma for any Python int count (math.sqrt(10**400) raised OverflowError), inf
    # beyond the float range; the argument eps / mu - mu / 2 of Phi is then -inf (confidence 0), where
    # (eps - mu^2 / 2) / mu was NaN (mu^2 overflowed for a tiny sigma)
    root, shift = sqrt_count(steps)
    mu = scaled_product((root,), (sigma,), exponent=shift)
    return float(special.ndtr(eps / mu - mu / 2.0))


def laplace_loss_confidence(epsilon: float, epsilon0: float) -> float:
    """Returns a **confidence**: ``P[L <= epsilon]`` of the ``epsilon0``-Laplace mechanism's worst pair.

    >>> round(laplace_loss_confidence(0.0, 1.0), 6)   # e^-0.5 / 2
    0.303265
    >>> laplace_loss_confidence(1.0, 1.0)
    1.0
    """
    eps = _check_loss_threshold(epsilon)
    eps0 = check_epsilon(epsilon0, "epsilon0")
    return _laplace_loss_confidence(eps, eps0)


def _laplace_loss_confidence(eps: float, eps0: float) -> float:
    # eps0 = inf stands for a LaplaceEvent whose 1 / noise_multiplier overflows: the limit, 0 below eps = inf
    if eps >= eps0:
        return 1.0
    return 0.5 * math.exp(-(eps0 - eps) / 2.0)


def _pld_confidence(accountant: PLDAccountant, epsilon: float) -> float:
    values = []
    for direction in ("remove", "add"):
        pld = accountant.loss_distribution(direction)
        tolerance = 1e-12 * pld.discretization  # a loss on the grid point epsilon counts as <= epsilon
        values.append(float(np.sum(pld.probabilities[pld.losses <= epsilon + tolerance])))
    return min(1.0, max(0.0, min(values)))


def confidence_from_accountant(accountant_or_event: PLDAccountant | PrivacyEvent, epsilon: float) -> float:
    """Returns a **confidence**: ``c(epsilon) = P[L <= epsilon]`` under the worst-case pair.

    Closed forms for a single :class:`GaussianEvent` or :class:`LaplaceEvent` (and a
    :class:`SelfComposedEvent` of a Gaussian one); any other event, or a
    :class:`dpkit.accounting.PLDAccountant` with composed events, through the discretised PLD
    (see the module docstring).

    >>> from dpkit.events import GaussianEvent, DiscreteLaplaceEvent
    >>> round(confidence_from_accountant(GaussianEvent(2.0), 0.125), 6)
    0.5
    >>> accountant = PLDAccountant().compose(GaussianEvent(2.0), 4)
    >>> round(confidence_from_accountant(accountant, 0.5), 3)
    0.5
    >>> 0 < confidence_from_accountant(DiscreteLaplaceEvent(scale=2.0, sensitivity=1), 0.3) < 1
    True
    """
    eps = _check_loss_threshold(epsilon)
    return _confidence_from_accountant(accountant_or_event, eps)


def _confidence_from_accountant(accountant_or_event: PLDAccountant | PrivacyEvent, eps: float) -> float:
    if isinstance(accountant_or_event, PLDAccountant):
        if not accountant_or_event.history:
            raise UnsupportedEventError("the accountant has composed nothing: its loss is 0")
        return _pld_confidence(accountant_or_event, eps)
    if not isinstance(accountant_or_event, PrivacyEvent):
        raise UnsupportedEventError(f"expected a PLDAccountant or a PrivacyEvent, got {accountant_or_event!r}")
    event = accountant_or_event
    if isinstance(event, GaussianEvent):
        return gaussian_loss_confidence(eps, event.noise_multiplier)
    if isinstance(event, LaplaceEvent):  # 1 / noise_multiplier may overflow (it was refused as "epsilon0: got inf")
        return _laplace_loss_confidence(eps, 1.0 / float(event.noise_multiplier))
    if isinstance(event, SelfComposedEvent) and isinstance(event.event, GaussianEvent):
        return gaussian_loss_confidence(eps, event.event.noise_multiplier, event.count)
    accountant = PLDAccountant(getattr(event, "neighbours", PLDAccountant().neighbours))
    if not accountant.supports(event):
        raise UnsupportedEventError(f"no privacy loss distribution for {event!r}")
    return _pld_confidence(accountant.compose(event), eps)
