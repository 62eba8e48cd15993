"""Privacy at risk of the Laplace mechanism: closed forms, simulation, monotonicity, bad input."""

import csv
import math
from pathlib import Path

import mpmath
import numpy as np
import pytest
import scipy.special

from dpkit import InvalidParameterError
from dpkit.risk import abs_laplace_sum_cdf, epsilon_at_risk, laplace_confidence, laplace_loss_confidence, laplace_risk


def _abs_sum_cdf_mpmath(x: float, k: int) -> float:
    # density of a sum of k standard Laplace variables: |t|^(k-1/2) K_{k-1/2}(|t|) / (2^(k-1/2) sqrt(pi) Gamma(k))
    def density(t: mpmath.mpf) -> mpmath.mpf:
        if t == 0:
            return (
                mpmath.mpf(1) / (2 * (2 * k - 1))
                if k == 1
                else mpmath.gamma(k - 0.5) / (2 * mpmath.sqrt(mpmath.pi) * mpmath.gamma(k))
            )
        return t ** (k - 0.5) * mpmath.besselk(k - 0.5, t) / (2 ** (k - 0.5) * mpmath.sqrt(mpmath.pi) * mpmath.gamma(k))

    return float(2 * mpmath.quad(density, [0, x]))


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("x", [0.05, 0.5, 1.3, 4.0])
def test_abs_sum_cdf_matches_mpmath_bessel_integral(k: int, x: float) -> None:
    assert abs_laplace_sum_cdf(x, k) == pytest.approx(_abs_sum_cdf_mpmath(x, k), rel=1e-9, abs=1e-14)


def test_one_dimensional_closed_form_matches_integral_of_laplace_noise() -> None:
    for eps0 in (0.5, 1.0, 3.0):
        for eps in (0.0, 0.1, 0.4, eps0 * 0.99):
            # T = |eta| eps0 / Delta has density e^-t on [0, inf): integrate it with mpmath.
            numerator = mpmath.quad(lambda t: mpmath.exp(-t), [0, eps])
            denominator = mpmath.quad(lambda t: mpmath.exp(-t), [0, eps0])
            assert laplace_confidence(eps, eps0) == pytest.approx(float(numerator / denominator), rel=1e-12, abs=1e-15)
            assert laplace_confidence(eps, eps0) == pytest.approx(math.expm1(-eps) / math.expm1(-eps0), rel=1e-12)
            assert laplace_risk(eps, eps0) == pytest.approx(1.0 - laplace_confidence(eps, eps0), abs=1e-13)


REFERENCE = Path(__file__).parent.parent / "data" / "privacy_at_risk_reference.csv"

# Simulations: a check fails by chance with probability at most FALSE_ALARM in all (Hoeffding's
# inequality P[|mean - p| >= t] <= 2 exp(-2 n t^2) with a union bound over the checks).
FALSE_ALARM = 1e-6
SIMULATED_DIMENSIONS = (1, 2, 4, 10)
SIMULATED_EPSILONS = (0.2, 0.7, 1.2)
CHECKS = 2 * len(SIMULATED_DIMENSIONS) * len(SIMULATED_EPSILONS) + 2 * 4


def _hoeffding_threshold(n: int) -> float:
    return math.sqrt(math.log(2.0 * CHECKS / FALSE_ALARM) / (2.0 * n))


def _reference_rows() -> list[dict[str, str]]:
    lines = [line for line in REFERENCE.read_text().splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines))


def test_matches_the_papers_gamma_1_reference_values() -> None:
    # gamma_1 from the closed form of the authors' code (mpmath, 80 digits; make_privacy_at_risk_reference.py)
    rows = _reference_rows()
    assert len(rows) == 72
    for row in rows:
        k, eps, eps0 = int(row["dimension"]), float(row["epsilon"]), float(row["epsilon0"])
        expected = float(row["gamma_1"])
        assert laplace_confidence(eps, eps0, k) == pytest.approx(expected, rel=1e-12)
        assert laplace_risk(eps, eps0, k) == pytest.approx(1.0 - expected, rel=1e-11)
        assert epsilon_at_risk(1.0 - expected, eps0, k) == pytest.approx(eps, rel=1e-9)


@pytest.mark.parametrize("k", SIMULATED_DIMENSIONS)
def test_k_dimensional_confidence_against_simulation(k: int) -> None:
    # The implemented statement: c_k(eps) = P[T <= eps | T <= eps0], T = (eps0/Delta)|eta_1 + ... + eta_k|,
    # eta_i ~ Laplace(Delta/eps0). Simulation is not a release path: numpy's seeded generator is fine here.
    generator = np.random.default_rng(20260001 + k)
    eps0, sensitivity = 1.5, 2.0
    noise = generator.laplace(0.0, sensitivity / eps0, size=(400_000, k))
    t = np.abs(noise.sum(axis=1)) * eps0 / sensitivity
    kept = t[t <= eps0]  # given their number, iid draws from the law of T given T <= eps0
    threshold = _hoeffding_threshold(kept.size)
    l1 = np.abs(noise).sum(axis=1) * eps0 / sensitivity  # another reading: the L1 norm of the noise
    l1_kept = l1[l1 <= eps0]
    for eps in SIMULATED_EPSILONS:
        observed = float(np.mean(kept <= eps))
        assert abs(observed - laplace_confidence(eps, eps0, k)) <= threshold
        # the simulation has the power to tell readings apart: for k >= 2 the L1-norm reading
        # (a Gamma(k) law) gives another value, and the same test rejects it
        gamma_reading = float(scipy.special.gammainc(k, eps) / scipy.special.gammainc(k, eps0))
        assert abs(float(np.mean(l1_kept <= eps)) - gamma_reading) <= _hoeffding_threshold(l1_kept.size)
        if k >= 2:
            assert abs(observed - gamma_reading) > 3 * threshold


@pytest.mark.parametrize("k", [1, 3])
def test_first_principles_privacy_loss_is_not_the_papers_confidence(k: int) -> None:
    # Realised privacy loss of the k-dimensional mechanism for f(x) - f(y) = v = Delta e_1:
    # L = (eps0/Delta) sum_i (|eta_i + v_i| - |eta_i|); P[L <= eps] = e^{-(eps0 - eps)/2} / 2 for any k.
    generator = np.random.default_rng(20269001 + k)
    eps0, sensitivity = 1.0, 1.0
    noise = generator.laplace(0.0, sensitivity / eps0, size=(400_000, k))
    v = np.zeros(k)
    v[0] = sensitivity
    loss = (np.abs(noise + v) - np.abs(noise)).sum(axis=1) * eps0 / sensitivity
    assert np.all(np.abs(loss) <= eps0 + 1e-12)  # the mechanism is eps0-DP on every output
    threshold = _hoeffding_threshold(loss.size)
    for eps in (0.0, 0.3, 0.6, 0.9):
        observed = float(np.mean(loss <= eps))
        assert abs(observed - laplace_loss_confidence(eps, eps0)) <= threshold
        if eps > 0.3:  # the paper's c_k is a different quantity: it exceeds 1/2 there
            assert laplace_confidence(eps, eps0, k) > 0.5 > observed + threshold


def test_monotonicity() -> None:
    eps_grid = np.linspace(0.0, 2.0, 41)
    for k in (1, 2, 5):
        values = [laplace_confidence(e, 2.0, k) for e in eps_grid]
        assert all(b >= a for a, b in zip(values, values[1:], strict=False))
        assert values[-1] == 1.0 and values[0] == 0.0
    for eps in (0.1, 0.4, 0.8):
        by_eps0 = [laplace_confidence(eps, e0) for e0 in (0.9, 1.0, 1.5, 3.0)]
        assert all(b <= a for a, b in zip(by_eps0, by_eps0[1:], strict=False))
        by_k = [laplace_confidence(eps, 1.0, k) for k in range(1, 16)]
        assert all(b <= a + 1e-15 for a, b in zip(by_k, by_k[1:], strict=False))


@pytest.mark.parametrize("k", [1, 2, 7])
def test_epsilon_at_risk_inverts_the_risk(k: int) -> None:
    for risk in (0.01, 0.2, 0.5, 0.9):
        eps = epsilon_at_risk(risk, 0.8, k)
        assert 0 < eps < 0.8
        assert laplace_risk(eps, 0.8, k) == pytest.approx(risk, abs=1e-10)
    assert epsilon_at_risk(0.0, 0.8, k) == 0.8
    assert epsilon_at_risk(1.0, 0.8, k) == 0.0


def test_large_dimension_is_finite() -> None:
    value = laplace_confidence(5.0, 10.0, 400)
    assert 0.0 <= value <= 1.0


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: laplace_confidence(-0.1, 1.0), "epsilon"),
        (lambda: laplace_confidence(0.1, 0.0), "epsilon0"),
        (lambda: laplace_confidence(0.1, -1.0), "epsilon0"),
        (lambda: laplace_confidence(0.1, 1.0, 0), "dimension"),
        (lambda: laplace_confidence(0.1, 1.0, 1.5), "dimension"),
        (lambda: laplace_risk(0.1, 1.0, True), "dimension"),
        (lambda: epsilon_at_risk(-0.1, 1.0), "risk"),
        (lambda: epsilon_at_risk(1.1, 1.0), "risk"),
        (lambda: epsilon_at_risk(0.1, 0.0), "epsilon0"),
        (lambda: epsilon_at_risk(0.1, 1.0, 0), "dimension"),
    ],
)
def test_bad_input_names_the_parameter(call, name: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidParameterError) as info:
        call()
    assert info.value.name == name
