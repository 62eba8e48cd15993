"""Local randomizers and estimators at extreme parameters, against mpmath (60+ digits) references."""

import math
import warnings

import mpmath as mp
import numpy as np
import pytest
from mp_precision import precision

from dpkit import InvalidParameterError
from dpkit.local import (
    KRR,
    OLH,
    OUE,
    SUE,
    DuchiMechanism,
    HadamardResponse,
    HeavyHitters,
    PiecewiseMechanism,
    choose,
    ldp_vs_central_error,
    samples_needed,
)

_precision = precision(60)


pytestmark = pytest.mark.filterwarnings("ignore::dpkit.PrivacyWarning")


def _pq(oracle):
    e = mp.exp(mp.mpf(oracle.epsilon))
    k = oracle.k
    if isinstance(oracle, KRR):
        return e / (e + k - 1), 1 / (e + k - 1)
    if isinstance(oracle, SUE):
        h = mp.sqrt(e)
        return h / (h + 1), 1 / (h + 1)
    if isinstance(oracle, OUE):
        return mp.mpf(1) / 2, 1 / (e + 1)
    if isinstance(oracle, HadamardResponse):
        return e / (e + 1), mp.mpf(1) / 2
    g, prime = oracle.g, oracle.prime  # OLH: collision probability by counting residues
    if g <= 10**5:
        sizes = [len(range(j, prime, g)) for j in range(g)]
        pairs = sum(m * (m - 1) for m in sizes)
    else:  # too many buckets to list: P = base g + rest
        base, rest = divmod(prime, g)
        pairs = rest * (base + 1) * base + (g - rest) * base * (base - 1)
    c = mp.mpf(pairs) / (prime * (prime - 1))
    p = e / (e + g - 1)
    return p, c * p + (1 - c) * (1 - p) / (g - 1)


def _rel(got, exact):
    """Relative error; below the float range (|exact| < 1e-300) an absolute error under 1e-300 counts as 0."""
    exact = mp.mpf(exact)
    if abs(exact) < mp.mpf("1e-300"):
        return 0.0 if abs(mp.mpf(got) - exact) < mp.mpf("1e-300") else 1.0
    return float(abs((mp.mpf(got) - exact) / exact))


GRID = [
    (cls, k, eps)
    for cls in (KRR, SUE, OUE, HadamardResponse, OLH)
    for k in (2, 3, 1000, 10**6)
    for eps in (1e-6, 1e-3, 1.0, 20.0, 100.0, 400.0, 709.0, 800.0)
    if not (cls is OLH and (k > 1000 or eps > 20))
]


@pytest.mark.parametrize(("cls", "k", "eps"), GRID)
def test_oracle_variances_exact(cls, k, eps):
    """p, q and both count variances to 1e-13 relative. Catches: p - q cancelling at eps = 1e-6 (1e-9
    relative error), 1 - p - q evaluated as 1 - 1 - q at eps >= 40 (variance(n, n_v) 0.0 for KRR k=2,
    100% wrong), and OverflowError of e^eps above eps ~ 709 (KRR, OUE)."""
    oracle = cls(k, eps)
    n, nv = 10**9, 5 * 10**8
    with mp.workdps(800):  # 1 - p - q ~ e^-709 needs 800 digits
        p, q = _pq(oracle)
        assert _rel(oracle.p, p) < 1e-14 and _rel(oracle.q, q) < 1e-14
        exact = n * q * (1 - q) / (p - q) ** 2
        assert _rel(oracle.variance(n), exact) < 1e-13
        assert _rel(oracle.variance(n, nv), exact + nv * (1 - p - q) / (p - q)) < 1e-13


@pytest.mark.parametrize("cls", [KRR, SUE, OUE, HadamardResponse, OLH])
@pytest.mark.parametrize("eps", [1e-6, 3.0, 15.0, 800.0])
def test_transition_matrix_is_exactly_ldp(cls, eps):
    """Every column ratio of the report law is at most e^eps (checked in logs, exact to float
    rounding), rows sum to 1, and the matrix is finite. Catches a privacy violation or an overflow
    (HadamardResponse.transition_matrix raised OverflowError at eps = 800)."""
    if cls is OLH and eps > 5:
        pytest.skip("OLH lists its reports only for small P g (large eps tested below)")
    oracle = cls(3, eps)
    matrix = oracle.transition_matrix()
    assert np.all(np.isfinite(matrix)) and np.allclose(matrix.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    positive = matrix[:, (matrix > 0).all(axis=0)]  # at eps = 800, e^-eps underflows to 0
    if positive.size:
        log_ratio = np.log(positive.max(axis=0)) - np.log(positive.min(axis=0))
        assert log_ratio.max() <= eps * (1 + 1e-12) + 1e-12


def test_olh_large_epsilon_is_refused_fast_and_named():
    """OLH's default g = round(e^eps) + 1 used to allocate P integers (4.8e8 at eps = 20), loop
    forever at eps = 50 and raise OverflowError at eps = 800, or blame ``k`` at eps = 30; now
    eps > ln(2^31) is refused naming epsilon, and the collision count is a closed form."""
    for eps in (21.5, 50.0, 800.0):
        with pytest.raises(InvalidParameterError, match="epsilon"):
            OLH(4, eps)
    olh = OLH(4, 20.0)  # g = 485165196: built without listing the residues
    p, q = _pq(olh)
    assert _rel(olh.q, q) < 1e-14


@pytest.mark.parametrize("eps", [1e-6, 1.0, 30.0, 400.0, 800.0])
def test_choose_and_ldp_vs_central_at_extremes(eps):
    """choose() hung (OLH) from eps ~ 22 and raised OverflowError at 800; ldp_vs_central_error
    returned 0 above eps ~ 355 ((e^eps - 1)^2 overflow) and raised OverflowError at 400."""
    choice = choose(10, eps, 1000)
    assert math.isfinite(choice.variances[choice.oracle_name])
    result = ldp_vs_central_error(10, eps, 1000)
    e = mp.exp(mp.mpf(eps))
    assert _rel(result.ldp_mse, (10 - 2 + e) / (1000 * (e - 1) ** 2)) < 1e-13
    assert _rel(result.central_mse, 2 / (mp.mpf(1000) ** 2 * mp.mpf(eps) ** 2)) < 1e-14


@pytest.mark.parametrize("eps", [1e-6, 1.0, 50.0, 709.5, 800.0])
def test_duchi_probabilities_and_variance(eps):
    """Duchi: P(+B | x) and Var = B^2 - x^2 to 1e-13. Catches plus_probability(1) = 0.5 instead of
    1 at eps = 709.5 (overflow to inf in the denominator), report_variance(1) = 0.0 instead of
    1/sinh^2(eps/2) = 7.7e-22 at eps = 50, and OverflowError at eps = 800."""
    duchi = DuchiMechanism(eps)
    e = mp.exp(mp.mpf(eps))
    bound = (e + 1) / (e - 1)
    assert _rel(duchi.bound, bound) < 1e-14
    for x in (-1.0, -0.25, 0.0, 1.0):
        assert _rel(duchi.plus_probability(x), mp.mpf(1) / 2 + x * (e - 1) / (2 * (e + 1))) < 1e-14
        assert _rel(duchi.report_variance(x), bound**2 - mp.mpf(x) ** 2) < 1e-13
    assert _rel(duchi.variance(10, 1.0), (bound**2 - 1) / 10) < 1e-13


class _SmallPM(PiecewiseMechanism):
    cells = 64


def _pm_exact(pm, x):
    """Mean and variance of one report by enumerating the grid law (float target, as sampled)."""
    n, m = pm.cells, pm._window
    small = mp.exp(-mp.mpf(pm.epsilon))
    inside = m / (m + (n - m) * small)
    target = mp.mpf((1.0 + x) / 2.0 * (n - m))
    base = int(mp.floor(target))
    frac = target - base
    c = 1 / mp.tanh(mp.mpf(pm.epsilon) / 4)
    values = [-c + (i + mp.mpf(1) / 2) * 2 * c / n for i in range(n)]
    law = [mp.mpf(0)] * n
    for s, ws in ((base, 1 - frac), (base + 1, frac)):
        if ws == 0:
            continue
        for i in range(n):
            law[i] += ws * (inside / m if s <= i < s + m else (1 - inside) / (n - m))
    mean = mp.fsum(p * v for p, v in zip(law, values, strict=True))
    return mean, mp.fsum(p * (v - mean) ** 2 for p, v in zip(law, values, strict=True))


@pytest.mark.parametrize("eps", [1e-6, 0.5, 5.0, 30.0, 100.0, 800.0])
def test_piecewise_unbiased_and_variance_exact(eps):
    """Piecewise mechanism (64-cell grid, whole law enumerated): the estimator's E[report]/alpha = x
    and report_variance exact to 1e-13. Catches the e2 - e1^2 cancellation (variance 0.0, or
    -9.1e-13 at x = 1, for 2^20 cells at eps = 50) and OverflowError of e^eps at eps = 800."""
    pm = _SmallPM(eps)
    for x in (-1.0, -0.3, 0.0, 0.7, 1.0):
        mean, variance = _pm_exact(pm, x)
        alpha = pm._alpha
        assert float(abs(mean / alpha - x)) < 1e-13
        assert _rel(pm.report_variance(x), variance / mp.mpf(alpha) ** 2) < 1e-13


def test_piecewise_full_grid_variance_positive_and_exact():
    """2^20 cells: report_variance used to return 0.0 (x = 0) and -9.09e-13 (x = 1) at eps = 50,
    exact 9.0956e-13 and 2.6966e-16; with ~12 digits lost at eps = 30 (3.2707e-08 vs 3.2708e-08)."""
    pm = PiecewiseMechanism(50.0)
    assert pm.report_variance(0.0) == pytest.approx(9.0956385132082201e-13, rel=1e-13)
    assert pm.report_variance(1.0) == pytest.approx(2.6965890199392758e-16, rel=1e-13)
    assert PiecewiseMechanism(30.0).report_variance(0.0) == pytest.approx(3.2708237963957859e-8, rel=1e-13)
    h = mp.exp(mp.mpf(800) / 2)
    continuous = PiecewiseMechanism(800.0).continuous_variance(1.0)
    assert _rel(continuous, 1 / (h - 1) + (h + 3) / (3 * (h - 1) ** 2)) < 1e-13


def test_samples_needed_never_one_short_and_no_overflow():
    """m must satisfy Hoeffding exactly: 2t exp(-2 m tau^2 / W^2) <= beta. With tau chosen so that
    W^2 ln(2t/beta)/(2 tau^2) is just above an integer, ceil of the rounded value was one short
    (3727344 instead of 3727345 at t=39, eps=3.3, tau=0.001180417538317699, beta=0.01); and
    eps = 800 raised OverflowError."""
    assert samples_needed(39, 3.3, 0.001180417538317699, 0.01) >= 3727345
    rng = np.random.default_rng(7)
    for _ in range(300):
        t, eps, beta = int(rng.integers(1, 50)), float(rng.choice([0.1, 1.0, 3.3])), 0.05
        m_real = int(rng.integers(10**4, 10**7))
        width = 1 / mp.tanh(mp.mpf(eps) / 2)
        tau = float(mp.sqrt(width**2 * mp.log(2 * mp.mpf(t) / beta) / (2 * m_real)))
        for candidate in (tau, math.nextafter(tau, 0.0), math.nextafter(tau, 1.0)):
            m = samples_needed(t, eps, candidate, beta)
            assert 2 * t * mp.exp(-2 * m * mp.mpf(candidate) ** 2 / width**2) <= beta
    assert samples_needed(3, 800.0, 0.1) == samples_needed(3, 700.0, 0.1)


def test_heavy_hitters_default_g_at_large_epsilon():
    """HeavyHitters at eps >= ln 65537 ~ 11.1 raised InvalidParameterError naming ``g`` (which the
    caller never passed) and OverflowError at eps = 800; the default g is now capped at P."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for eps in (12.0, 800.0):
            assert HeavyHitters(16, eps)._g == 65537
        assert HeavyHitters(16, 2.0)._g == round(math.exp(2.0)) + 1
