"""Composition under privacy at risk against basic, advanced, optimal and the exact PLD epsilon."""

import math

import numpy as np
import pytest

from dpkit import InvalidParameterError
from dpkit.accounting import PLDAccountant
from dpkit.events import LaplaceEvent
from dpkit.risk import CostModel, composition, laplace_confidence


def _figure_matching_form(k: int, eps: float, eps0: float, delta: float) -> float:
    # The deviation term with epsilon in place of epsilon0: matches a figure, NOT a guarantee.
    c = laplace_confidence(eps, eps0)
    drift = c * eps * math.expm1(eps) + (1 - c) * eps0 * math.expm1(eps0)
    return math.sqrt(2 * k * math.log(1 / delta)) * eps + k * drift


def test_formula() -> None:
    k, eps, eps0, delta = 20, 0.3, 0.6, 1e-6
    c = laplace_confidence(eps, eps0)
    expected = math.sqrt(2 * k * math.log(1 / delta)) * eps0 + k * (
        c * eps * math.expm1(eps) + (1 - c) * eps0 * math.expm1(eps0)
    )
    assert composition(k, eps, eps0, delta) == pytest.approx(expected, rel=1e-14)
    assert composition(k, eps, eps0, delta, "basic") == pytest.approx(k * eps0)


@pytest.mark.parametrize("eps0", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("k", [1, 5, 50, 400])
def test_never_below_the_exact_pld_epsilon(eps0: float, k: int) -> None:
    delta = 1e-5
    exact = PLDAccountant(discretization=1e-3).compose(LaplaceEvent(1.0 / eps0), k).epsilon(delta)
    for fraction in (0.0, 0.1, 0.5, 0.9, 1.0):
        assert composition(k, fraction * eps0, eps0, delta) >= exact
    assert composition(k, 0.5 * eps0, eps0, delta, "pld") == pytest.approx(exact)
    assert composition(k, 0.5 * eps0, eps0, delta, "optimal") >= exact - 1e-9


def test_never_above_advanced_and_equal_at_zero_confidence() -> None:
    for k in (1, 10, 100):
        advanced = composition(k, 0.0, 0.5, 1e-5, "advanced")
        assert composition(k, 0.0, 0.5, 1e-5) == pytest.approx(advanced)
        best = CostModel(550_000.0).optimal_epsilon(0.5)
        assert composition(k, best, 0.5, 1e-5) < advanced


def test_drift_dominates_the_true_kl_so_the_bound_is_sound_whatever_c_means() -> None:
    # The realised per-step loss of an eps0-Laplace step has mean KL = eps0 + e^-eps0 - 1 (any
    # dimension) and lies in [-eps0, eps0]; Azuma needs drift >= KL. k = 1 is the worst case
    # (c_k <= c_1 and the drift decreases in c), checked here on a grid.
    worst = math.inf
    for eps0 in np.geomspace(1e-3, 20.0, 120):
        kl = eps0 + math.expm1(-eps0)
        for eps in np.linspace(0.0, eps0, 101):
            for k in (1, 3):
                c = laplace_confidence(eps, eps0, k)
                drift = c * eps * math.expm1(eps) + (1 - c) * eps0 * math.expm1(eps0)
                worst = min(worst, drift / kl)
    assert worst >= 1.2
    assert 2 * (1 - 2 / (3 * math.sqrt(3))) == pytest.approx(1.2302, abs=1e-4)  # the small-eps0 limit


def test_figure_matching_form_is_not_a_guarantee() -> None:
    eps0, delta, k = 0.5, 1e-5, 10
    exact = PLDAccountant(discretization=1e-3).compose(LaplaceEvent(1.0 / eps0), k).epsilon(delta)
    assert _figure_matching_form(k, 0.01, eps0, delta) < exact  # it would under-state the loss


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: composition(0, 0.1, 1.0, 1e-5), "k"),
        (lambda: composition(2.5, 0.1, 1.0, 1e-5), "k"),
        (lambda: composition(2, -0.1, 1.0, 1e-5), "epsilon"),
        (lambda: composition(2, 0.1, 0.0, 1e-5), "epsilon0"),
        (lambda: composition(2, 0.1, 1.0, 0.0), "delta"),
        (lambda: composition(2, 0.1, 1.0, 1e-5, method="magic"), "method"),
    ],
)
def test_bad_input_names_the_parameter(call, name: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidParameterError) as info:
        call()
    assert info.value.name == name
