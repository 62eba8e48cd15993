"""Calibration by bisection, with any accountant; answers always on the safe side."""

from __future__ import annotations

import math

import pytest

from dpkit._errors import InvalidParameterError, UnsupportedEventError
from dpkit.accounting._base import PrivacyAccountant
from dpkit.accounting._calibrate import calibrate_dpsgd_noise, calibrate_parameter
from dpkit.accounting._composition import BasicAccountant
from dpkit.events import (
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PureDPEvent,
    SelfComposedEvent,
)


class _ToyGaussianZCDP(PrivacyAccountant):
    """Gaussian events through zCDP (Bun & Steinke 2016): rho = 1 / (2 sigma^2), eps = rho + 2 sqrt(rho ln 1/delta).

    A Poisson-sampled Gaussian is accounted as the Gaussian itself (sampling never hurts), so
    the answers are loose but valid. Defined here so the tests need no other accountant.
    """

    def __init__(self) -> None:
        super().__init__()
        self.rho = 0.0

    def _supports_atomic(self, event: PrivacyEvent) -> bool:
        if isinstance(event, PoissonSampledEvent):
            return isinstance(event.event, GaussianEvent)
        return isinstance(event, GaussianEvent)

    def _compose_atomic(self, event: PrivacyEvent, count: int) -> None:
        gaussian = event.event if isinstance(event, PoissonSampledEvent) else event
        assert isinstance(gaussian, GaussianEvent)
        self.rho += count / (2 * gaussian.noise_multiplier**2)

    def _epsilon(self, delta: float) -> float:
        return math.inf if delta == 0 else self.rho + 2 * math.sqrt(self.rho * math.log(1 / delta))

    def _delta(self, epsilon: float) -> float:
        raise NotImplementedError


def _toy_sigma(target_epsilon: float, delta: float, steps: int) -> float:
    # Solve rho + 2 sqrt(rho L) = eps for rho: sqrt(rho) = sqrt(L + eps) - sqrt(L).
    log_term = math.log(1 / delta)
    rho = (math.sqrt(log_term + target_epsilon) - math.sqrt(log_term)) ** 2
    return math.sqrt(steps / (2 * rho))


@pytest.mark.parametrize("count", [1, 7, 100, 1000])
def test_laplace_multiplier_is_the_count(count: int) -> None:
    found = calibrate_parameter(
        1.0, 0.0, BasicAccountant, lambda b: SelfComposedEvent(LaplaceEvent(b), count), tolerance=1e-9
    )
    assert count <= found <= count * (1 + 1e-8)
    assert BasicAccountant().compose(LaplaceEvent(found), count).epsilon(0.0) <= 1.0


def test_increasing_parameter_largest_count() -> None:
    # The largest per-release epsilon with 8 releases within 2: epsilon = 0.25.
    found = calibrate_parameter(
        2.0, 0.0, BasicAccountant, lambda e: SelfComposedEvent(PureDPEvent(e), 8), bounds=(0.01, 0.02), increasing=True
    )
    assert 0.25 * (1 - 1e-5) <= found <= 0.25
    assert BasicAccountant().compose(PureDPEvent(found), 8).epsilon(0.0) <= 2.0


@pytest.mark.parametrize(("epsilon", "steps"), [(1.0, 1), (3.0, 100), (8.0, 1000)])
def test_gaussian_with_a_custom_accountant(epsilon: float, steps: int) -> None:
    delta = 1e-5
    found = calibrate_parameter(
        epsilon, delta, _ToyGaussianZCDP, lambda s: SelfComposedEvent(GaussianEvent(s), steps), tolerance=1e-9
    )
    expected = _toy_sigma(epsilon, delta, steps)
    assert found == pytest.approx(expected, rel=1e-7)
    assert _ToyGaussianZCDP().compose(GaussianEvent(found), steps).epsilon(delta) <= epsilon


def test_dpsgd_noise() -> None:
    found = calibrate_dpsgd_noise(5.0, 1e-5, 0.01, 500, _ToyGaussianZCDP)
    assert found == pytest.approx(_toy_sigma(5.0, 1e-5, 500), rel=1e-3)
    accountant = _ToyGaussianZCDP().compose(PoissonSampledEvent(0.01, GaussianEvent(found)), 500)
    assert accountant.epsilon(1e-5) <= 5.0
    with pytest.raises(InvalidParameterError):
        calibrate_dpsgd_noise(5.0, 1e-5, 0.0, 500, _ToyGaussianZCDP)
    with pytest.raises(InvalidParameterError):
        calibrate_dpsgd_noise(5.0, 1e-5, 0.01, 0, _ToyGaussianZCDP)
    with pytest.raises(InvalidParameterError):
        calibrate_dpsgd_noise(5.0, 0.0, 0.01, 10, _ToyGaussianZCDP)


def test_bracket_expands_both_ways() -> None:
    def make(b: float) -> PrivacyEvent:
        return SelfComposedEvent(LaplaceEvent(b), 10)

    high = calibrate_parameter(0.001, 0.0, BasicAccountant, make, bounds=(1.0, 2.0))
    assert 10_000 <= high <= 10_000 * (1 + 1e-5)
    low = calibrate_parameter(1000.0, 0.0, BasicAccountant, make, bounds=(1.0, 2.0))
    assert 0.01 <= low <= 0.01 * (1 + 1e-5)


def test_domain_errors_count_as_not_meeting() -> None:
    # Sampling rates above 1 are invalid events; the largest rate that fits is 1 itself.
    def make(q: float) -> PrivacyEvent:
        return PoissonSampledEvent(q, GaussianEvent(100.0))

    found = calibrate_parameter(10.0, 1e-5, _ToyGaussianZCDP, make, bounds=(0.1, 0.5), increasing=True)
    assert 1 - 1e-5 <= found <= 1.0


def test_unreachable_target_and_bad_inputs() -> None:
    def make(e: float) -> PrivacyEvent:
        return PureDPEvent(1.0)  # epsilon does not depend on the parameter

    with pytest.raises(InvalidParameterError):
        calibrate_parameter(0.5, 0.0, BasicAccountant, make)
    laplace = lambda b: LaplaceEvent(b)  # noqa: E731
    for bad in (dict(target_epsilon=-1.0), dict(target_epsilon=math.nan), dict(target_delta=1.0)):
        arguments = dict(target_epsilon=1.0, target_delta=0.0, make_accountant=BasicAccountant, make_event=laplace)
        arguments.update(bad)
        with pytest.raises(InvalidParameterError):
            calibrate_parameter(**arguments)  # type: ignore[arg-type]
    for bounds in ((2.0, 1.0), (0.0, 1.0), (1.0,), (1.0, math.inf)):
        with pytest.raises(InvalidParameterError):
            calibrate_parameter(1.0, 0.0, BasicAccountant, laplace, bounds)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        calibrate_parameter(1.0, 0.0, BasicAccountant, laplace, tolerance=0.0)
    with pytest.raises(InvalidParameterError):
        calibrate_parameter(1.0, 0.0, "basic", laplace)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        calibrate_parameter(1.0, 0.0, BasicAccountant, laplace, increasing="yes")  # type: ignore[arg-type]
    with pytest.raises(UnsupportedEventError):
        calibrate_parameter(1.0, 1e-5, BasicAccountant, lambda s: GaussianEvent(s))
