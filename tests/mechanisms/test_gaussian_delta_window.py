"""The discrete Gaussian's delta bound at tiny epsilon: rigorous, and tight enough that sigma is nominal.

Before, :func:`discrete_gaussian_delta_upper` bounded delta = P(Z >= n) - e^eps P(Z >= n + a) as the
difference of two tails each carrying a relative 1e-12 margin. At tiny epsilon delta is far below the
tails (1e-12 against 0.36 at epsilon = delta = 1e-12), so the margins outweighed delta and the
Gaussian mechanism's sigma came out 1.6% above the continuous analytic sigma at (1e-10, 1e-12), 83%
above at (1e-12, 1e-12) and 1970x above at (2^-60, 1e-12). The same difference is now also bounded as
a window, P(n <= Z < n + a) - (e^eps - 1) P(Z >= n + a), whose error is relative to delta itself.

The exact delta of N_Z(0, s^2) is computed in mpmath from the Euler-Maclaurin expansion of the
discrete tails (for s >= 1e6 grid units the normalising sum is s sqrt(2 pi) to within e^(-2 pi^2 s^2),
and the omitted terms are relatively O(s^-4)).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import Any

import mpmath
import pytest

from dpkit._errors import PrivacyWarning
from dpkit.mechanisms import Gaussian
from dpkit.mechanisms.gaussian import analytic_gaussian_sigma, discrete_gaussian_delta_upper


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        yield


def _exact_delta(sigma: float, shift: int, epsilon: float) -> Any:
    """max over splits n of P(Z >= n) - e^eps P(Z >= n + a), Z ~ N_Z(0, s^2), to ~60 digits (s >= 1e6)."""
    with mpmath.workdps(90):
        s, eps = mpmath.mpf(sigma), mpmath.mpf(epsilon)
        norm = s * mpmath.sqrt(2 * mpmath.pi)

        def at_least(n: int) -> Any:
            # sum_{z >= n} f(z) = int_n^inf f + f(n)/2 - f'(n)/12 + f'''(n)/720 - ..., f(z) = exp(-z^2 / 2s^2)
            if n <= 0:
                return 1 - at_least(1 - n)
            x = mpmath.mpf(n)
            f = mpmath.exp(-(x**2) / (2 * s**2))
            integral = norm * mpmath.ncdf(-x / s)
            first = -x / s**2 * f
            third = (3 * x / s**4 - x**3 / s**6) * f
            return (integral + f / 2 - first / 12 + third / 720) / norm

        split = int(mpmath.floor(eps * s * s / shift - mpmath.mpf(shift) / 2)) + 1
        return max(at_least(n) - mpmath.exp(eps) * at_least(n + shift) for n in (split - 1, split, split + 1))


CASES = [
    (sigma, shift, epsilon)
    for sigma in (1e6, 3.7e9, 2.0**45 + 3, 4.1e14)
    for shift in (1, 1025, 2**20 + 1)
    for epsilon in (1e-3, 1e-6, 1e-9, 1e-12, 1e-15, 2.0**-60)
    if shift < sigma / 50
]


@pytest.mark.parametrize(("sigma", "shift", "epsilon"), CASES)
def test_bound_is_above_the_exact_delta_and_within_ten_millionths(sigma, shift, epsilon):
    exact = _exact_delta(sigma, shift, epsilon)
    bound = discrete_gaussian_delta_upper(sigma, shift, epsilon)
    if exact < 1e-300:  # below the float range: the bound may round to 0 (no target is that small)
        assert bound <= 1e-300
        return
    assert exact <= bound
    # The window's slack is relatively about x h / (2a) + h^2 / 6 (h = a / s, x = n / s), times
    # window / delta where (e^eps - 1) P(Z >= n + a) takes most of the window: 3.3e-6 at s = 1e6,
    # a = 1025, eps = 1e-3. Before, the bound was up to 1e12 x delta here (1.4e-3 x in that case).
    assert bound <= exact * (1 + 1e-5)


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [(1e-8, 1e-10), (1e-10, 1e-12), (1e-12, 1e-12), (1e-15, 1e-6), (2.0**-60, 1e-12), (2.0**-60, 1e-300)],
)
def test_gaussian_sigma_is_the_continuous_analytic_sigma_at_tiny_epsilon(epsilon, delta):
    """sigma within 1e-9 of the continuous analytic sigma at the effective sensitivity (it was 1.6e-4,
    1.6e-2, 0.83, 4.9e-4 and 1970 times above for the first five)."""
    mechanism = Gaussian(1.0, epsilon, delta)
    continuous = analytic_gaussian_sigma(epsilon, delta, mechanism.effective_sensitivity)
    assert continuous <= mechanism.sigma <= continuous * (1 + 1e-9)
    units = round(math.ldexp(mechanism.effective_sensitivity, -mechanism.grid_exponent))
    sigma_units = math.ldexp(mechanism.sigma, -mechanism.grid_exponent)
    assert float(_exact_delta(sigma_units, units, epsilon)) <= delta
