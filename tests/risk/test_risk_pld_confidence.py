"""Beyond the paper: c(epsilon) = P[L <= epsilon] from closed forms and from the PLD accountant."""

import math

import mpmath
import numpy as np
import pytest

from dpkit import UnsupportedEventError
from dpkit.accounting import PLDAccountant
from dpkit.events import (
    DiscreteLaplaceEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
    ZCDPEvent,
)
from dpkit.risk import confidence_from_accountant, gaussian_loss_confidence, laplace_loss_confidence


@pytest.mark.parametrize("eps0", [0.5, 1.0, 2.0])
def test_laplace_loss_confidence_matches_mpmath_integral(eps0: float) -> None:
    b = 1.0 / eps0  # P = Lap(1, b), Q = Lap(0, b)

    def density(y: mpmath.mpf) -> mpmath.mpf:
        return mpmath.exp(-abs(y - 1) / b) / (2 * b)

    for eps in (0.0, 0.3 * eps0, 0.8 * eps0):
        threshold = (1 + b * eps) / 2  # L(y) = (|y| - |y - 1|) / b <= eps  <=>  y <= threshold
        integral = mpmath.quad(density, [-mpmath.inf, 0, threshold])
        assert laplace_loss_confidence(eps, eps0) == pytest.approx(float(integral), rel=1e-10)
        assert confidence_from_accountant(LaplaceEvent(b), eps) == pytest.approx(float(integral), rel=1e-10)
        via_pld = confidence_from_accountant(PLDAccountant().compose(LaplaceEvent(b)), eps)
        assert via_pld == pytest.approx(float(integral), abs=2e-3)
    assert laplace_loss_confidence(eps0, eps0) == 1.0


@pytest.mark.parametrize("sigma", [0.8, 2.0, 5.0])
def test_gaussian_closed_form_and_pld_agree(sigma: float) -> None:
    mu = 1.0 / sigma
    for eps in (0.0, 0.1, 0.5, 1.5):
        closed = float(mpmath.ncdf((eps - mu * mu / 2) / mu))
        assert gaussian_loss_confidence(eps, sigma) == pytest.approx(closed, rel=1e-12, abs=1e-15)
        assert confidence_from_accountant(GaussianEvent(sigma), eps) == pytest.approx(closed, rel=1e-12, abs=1e-15)
        via_pld = confidence_from_accountant(PLDAccountant().compose(GaussianEvent(sigma)), eps)
        assert via_pld == pytest.approx(closed, abs=2e-3)


def test_composed_gaussian_through_the_accountant() -> None:
    accountant = PLDAccountant().compose(GaussianEvent(2.0), 4)  # mu = sqrt(4) / 2 = 1
    for eps in (0.0, 0.5, 1.0, 2.0):
        expected = float(mpmath.ncdf(eps - 0.5))
        assert confidence_from_accountant(accountant, eps) == pytest.approx(expected, abs=2e-3)
        assert confidence_from_accountant(SelfComposedEvent(GaussianEvent(2.0), 4), eps) == pytest.approx(expected)


def test_discrete_laplace_against_enumeration() -> None:
    scale, sensitivity = 2.0, 2
    a = math.exp(-1.0 / scale)
    z = np.arange(-200, 201)
    weights = a ** np.abs(z) * (1 - a) / (1 + a)
    y = z + sensitivity
    losses = (np.abs(y) - np.abs(y - sensitivity)) / scale
    event = DiscreteLaplaceEvent(scale=scale, sensitivity=sensitivity)
    for eps in (0.25, 0.5, 0.75):  # between the atoms -1, -0.5, 0, 0.5, 1 (grid effects excluded)
        expected = float(np.sum(weights[losses <= eps]))
        assert confidence_from_accountant(event, eps) == pytest.approx(expected, abs=1e-6)


def test_subsampling_raises_the_confidence_and_it_is_monotone() -> None:
    inner = GaussianEvent(1.0)
    sampled = PoissonSampledEvent(0.1, inner)
    values = [confidence_from_accountant(sampled, e) for e in (0.0, 0.1, 0.3, 1.0)]
    assert all(b >= a - 1e-12 for a, b in zip(values, values[1:], strict=False))
    for eps in (0.1, 0.3):
        assert confidence_from_accountant(sampled, eps) >= confidence_from_accountant(inner, eps)


def test_unsupported_inputs() -> None:
    with pytest.raises(UnsupportedEventError):
        confidence_from_accountant(ZCDPEvent(0.5), 0.1)
    with pytest.raises(UnsupportedEventError):
        confidence_from_accountant(PLDAccountant(), 0.1)
    with pytest.raises(UnsupportedEventError):
        confidence_from_accountant("gaussian", 0.1)  # type: ignore[arg-type]
