"""Exact merging of plain Gaussians in the PLD accountant; the subsampled Gaussian's RDP at small
sampling rates and orders near 1. References are mpmath (in-test where cheap, else committed under
tests/data with their generators) and Google's dp_accounting."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import mpmath
import numpy as np
import pytest

from dpkit.accounting import PLDAccountant
from dpkit.accounting._rdp import poisson_sampled_gaussian_rdp
from dpkit.events import GaussianEvent, LaplaceEvent, PoissonSampledEvent, PrivacyEvent

DATA = Path(__file__).parent.parent / "data"

# -- PLD: plain Gaussians compose exactly to one Gaussian -----------------------------------------


def _distinct_sigmas(mu: float, count: int) -> list[float]:
    """``count`` distinct noise multipliers whose Gaussians compose to about mu-GDP."""
    weights = [1 + i / count for i in range(count)]
    total = sum(weights)
    return [1.0 / (mu * math.sqrt(w / total)) for w in weights]


def _exact_mu(sigmas: list[float], counts: list[int] | None = None) -> mpmath.mpf:
    """sqrt(sum_i c_i / sigma_i^2) for the float sigmas, at the working precision."""
    counts = counts or [1] * len(sigmas)
    return mpmath.sqrt(mpmath.fsum(c / mpmath.mpf(s) ** 2 for s, c in zip(sigmas, counts, strict=True)))


def _exact_delta(mu: mpmath.mpf, epsilon: float) -> mpmath.mpf:
    """Balle & Wang 2018, Thm. 8: delta(eps) of the Gaussian mechanism with mu = sensitivity / sigma."""
    e = mpmath.mpf(epsilon)
    return mpmath.ncdf(-e / mu + mu / 2) - mpmath.exp(e) * mpmath.ncdf(-e / mu - mu / 2)


@pytest.mark.parametrize("count", [2, 7, 50])
@pytest.mark.parametrize("mu", [0.1, 1.0, 3.0, 10.0])
def test_distinct_gaussians_answer_the_exact_gaussian_profile(mu: float, count: int) -> None:
    """Distinct Gaussians went through the FFT, with a floor at +inf (2.5e-12 for ten of them): delta
    at eps = mu^2/2 + 10 mu (exact ~1e-23) answered ~1e-12, epsilon(1e-12) was inf for mu = 1 from
    ten. Now delta is the exact profile of the merged Gaussian, never below it and within 1e-12."""
    sigmas = _distinct_sigmas(mu, count)
    accountant = PLDAccountant()
    for sigma in sigmas:
        accountant.compose(GaussianEvent(sigma))
    with mpmath.workdps(80):
        exact_mu = _exact_mu(sigmas)
        for spread in (-1, 0, 1, 3, 6, 10):
            epsilon = max(0.0, mu * mu / 2 + spread * mu)
            exact = _exact_delta(exact_mu, epsilon)
            got = mpmath.mpf(accountant.delta(epsilon))
            assert exact <= got <= exact * (1 + 1e-12), (epsilon, float(exact), float(got))
        for delta in (1e-3, 1e-6, 1e-9, 1e-12):
            got_epsilon = accountant.epsilon(delta)
            assert _exact_delta(exact_mu, got_epsilon) <= delta  # certified
            root = mpmath.findroot(lambda e, d=delta: mpmath.log(_exact_delta(exact_mu, e) / d), got_epsilon)
            assert got_epsilon <= root * (1 + 1e-12) + 1e-300  # and tight


def test_counts_and_unsampled_wrappers_merge_into_one_gaussian() -> None:
    """Repeats count (c / sigma^2 each) and a Poisson 'sample' of rate 1 is the plain Gaussian."""
    accountant = PLDAccountant()
    accountant.compose(GaussianEvent(1.0), 7).compose(GaussianEvent(2.5), 3)
    accountant.compose(PoissonSampledEvent(1.0, GaussianEvent(3.0)), 2)
    with mpmath.workdps(60):
        exact_mu = _exact_mu([1.0, 2.5, 3.0], [7, 3, 2])
        for epsilon in (0.0, 1.0, 5.0, 20.0):
            exact = _exact_delta(exact_mu, epsilon)
            assert exact <= accountant.delta(epsilon) <= exact * (1 + 1e-12)


def test_gaussians_beside_another_event_are_not_merged_into_one_wide_gaussian() -> None:
    """Merging the Gaussians of a mixed workload into one wide Gaussian left the FFT's rounding
    bound loose beside a single Laplace: 7.053675 at delta 1e-6 (inf at 1e-9) against 7.052352 for
    the events discretised one by one. Reference: dp_accounting 0.6.0's PLD (connect-the-dots,
    pessimistic) of the same events, 7.052352255401024 at value_discretization_interval 1e-4 and
    7.052352250145703 at 1e-5 (computed once with the merged mu, which is exact)."""
    accountant = PLDAccountant()
    accountant.compose(GaussianEvent(1.5), 4).compose(GaussianEvent(3.0)).compose(LaplaceEvent(20.0))
    coarse, fine = 7.052352255401024, 7.052352250145703
    got = accountant.epsilon(1e-6)
    assert fine - abs(coarse - fine) <= got <= fine * (1 + 1e-7)
    assert math.isfinite(accountant.epsilon(1e-9))


def test_gaussians_whose_merge_would_pass_the_loss_range_still_compose_beside_another_event() -> None:
    """Four Gaussians of mu 25 fit the grid one by one (losses up to ~510 nats) though they compose
    to mu 50 (~1650 > 700): alone they answer exactly, beside a Laplace on the grid, one by one."""
    accountant = PLDAccountant(discretization=1e-2).compose(GaussianEvent(0.04), 4).compose(LaplaceEvent(1.0))
    epsilon = accountant.epsilon(1e-6)
    alone = PLDAccountant().compose(GaussianEvent(0.04), 4).epsilon(1e-6)  # exact: mu = 50
    assert alone < epsilon <= alone + 1.0 + 0.05  # the Laplace adds at most its largest loss, 1


def _mixed_reference_rows() -> list[dict[str, str]]:
    with (DATA / "pld_mixed_reference.csv").open() as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


def test_mixed_workload_against_dp_accounting() -> None:
    """Ten distinct Gaussians, 100 Laplace and 1000 subsampled Gaussians (tests/data/
    make_pld_mixed_reference.py). dpkit is not below dp_accounting by more than dp_accounting's
    discretisation error (its 1e-4 and 1e-5 grids' difference), and at or below its 1e-4 answer but
    for the floating-point rounding dpkit counts at +inf (dp_accounting counts none): dpkit's delta
    at dp_accounting's epsilon exceeds the target by at most that mass."""
    accountant = PLDAccountant()
    for i in range(10):
        accountant.compose(GaussianEvent(1.0 + 0.1 * i))
    accountant.compose(LaplaceEvent(10.0), 100)
    accountant.compose(PoissonSampledEvent(0.01, GaussianEvent(1.0)), 1000)
    at_infinity = max(accountant.loss_distribution(d).infinity_mass for d in ("remove", "add"))
    assert at_infinity < 5e-12
    for row in _mixed_reference_rows():
        delta = float(row["delta"])
        coarse, fine = float(row["epsilon_interval_1e-4"]), float(row["epsilon_interval_1e-5"])
        got = accountant.epsilon(delta)
        assert got >= fine - abs(coarse - fine)
        assert accountant.delta(coarse) <= delta * (1 + 1e-9) + at_infinity


# -- RDP: the subsampled Gaussian at small rates, orders near 1 -----------------------------------


def _small_rate_rows() -> list[dict[str, str]]:
    with (DATA / "rdp_small_rate_reference.csv").open() as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


@pytest.mark.parametrize(
    "row",
    _small_rate_rows(),
    ids=lambda r: f"q{r['sampling_probability']}-s{r['noise_multiplier']}-a{r['order']}",
)
def test_sampled_gaussian_rdp_at_small_rates_is_a_tight_upper_bound(row: dict[str, str]) -> None:
    """Against mpmath quadrature (tests/data/make_rdp_small_rate_reference.py). At q <= 1e-5 the
    fractional orders were up to 2x the exact divergence (the float64 sums form A ~ 1 + q^2, so
    log A had no correct digit; the chord through the integer orders was used), 31% at q = 1e-3,
    sigma = 20, order 1.0001; integer orders were up to 2.6e-15 *below* it. Now never below, within
    1e-12 for q <= 1e-5 and 1e-7 (the float64 series' tolerance) at q = 1e-3."""
    q, sigma, alpha = float(row["sampling_probability"]), float(row["noise_multiplier"]), float(row["order"])
    with mpmath.workdps(40):
        exact = mpmath.mpf(row["rdp"])  # 25 digits, accurate to ~1e-28
        got = mpmath.mpf(poisson_sampled_gaussian_rdp(q, sigma, np.array([alpha]))[0])
        assert got >= exact * (1 - mpmath.mpf(10) ** -22)
        assert got <= exact * (1 + (1e-12 if q <= 1e-5 else 1e-7))


@pytest.mark.parametrize(("q", "sigma"), [(1e-7, 1.0), (1e-5, 0.5), (1e-5, 20.0), (3e-4, 2.0)])
@pytest.mark.parametrize("alpha", [2, 3, 6])
def test_sampled_gaussian_rdp_at_integer_orders_is_never_below_the_closed_form(
    q: float, sigma: float, alpha: int
) -> None:
    """A_alpha = sum_k C(alpha, k) (1-q)^(alpha-k) q^k e^((k^2 - k) / (2 sigma^2)) (Mironov, Talwar &
    Zhang 2019, Sec. 3.3); the float64 value was rounded to nearest (q = 1e-7, sigma = 1, order 2:
    2.6e-15 below). Now rounded up by its error bound."""
    with mpmath.workdps(80):
        qq, s = mpmath.mpf(q), mpmath.mpf(sigma)
        total = mpmath.fsum(
            mpmath.binomial(alpha, k) * (1 - qq) ** (alpha - k) * qq**k * mpmath.exp((k * k - k) / (2 * s * s))
            for k in range(alpha + 1)
        )
        exact = mpmath.log(total) / (alpha - 1)
        got = mpmath.mpf(poisson_sampled_gaussian_rdp(q, sigma, np.array([float(alpha)]))[0])
        assert exact <= got <= exact * (1 + 1e-12)


@pytest.mark.parametrize(
    ("q", "sigma", "alpha"),
    [
        (256 / 60000, 1.1, 1.5),
        (256 / 60000, 1.1, 5.5),
        (0.01, 0.8, 1.1),
        (0.5, 2.0, 1.3),
        (0.9, 0.6, 2.5),
        (0.2, 5.0, 7.5),
    ],
)
def test_region_sums_agree_with_the_signed_series_where_that_is_tight(q: float, sigma: float, alpha: float) -> None:
    """The high-precision region sums (used where the float64 series is loose) and the signed
    Leibniz series (used elsewhere) are two independent expansions: where the series brackets log A
    within 1e-7, the region sums' bound lies in that bracket (up to their 1e-13 accuracy)."""
    from dpkit.accounting._rdp import _log_a_fractional, _precise_fractional

    lower, upper = _log_a_fractional(q, sigma, alpha)
    assert upper - lower <= 1e-7 * upper
    (precise,) = _precise_fractional(q, sigma, [alpha])
    assert precise is not None
    assert lower / (alpha - 1) * (1 - 1e-12) <= precise <= upper / (alpha - 1) * (1 + 1e-12)


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (GaussianEvent(1.0), "inf"),  # mu = 1e200: delta 1 at every float epsilon
        (LaplaceEvent(1.0), "count"),  # on the grid: refused by name
    ],
)
def test_counts_beyond_float_range_answer_or_are_refused_by_name(event: PrivacyEvent, expected: str) -> None:
    """A count of 10**400 raised a bare OverflowError (float(count) in the merge, the direct-summation
    cost and the Chernoff window); found by the risk QA round through dpkit.risk.composition."""
    from dpkit._errors import InvalidParameterError

    accountant = PLDAccountant().compose(event, 10**400)
    if expected == "inf":
        assert accountant.epsilon(1e-5) == math.inf and accountant.delta(1e300) == 1.0
    else:
        with pytest.raises(InvalidParameterError, match="^count: .*RDPAccountant"):
            accountant.epsilon(1e-5)


def test_a_pure_dp_count_beyond_float_range_is_composed_directly() -> None:
    from dpkit.events import ApproxDPEvent, PureDPEvent

    for event in (PureDPEvent(1e-300), ApproxDPEvent(1e-300, 1e-200)):
        accountant = PLDAccountant().compose(event, 10**400)
        assert accountant.epsilon(1e-5) == math.inf and accountant.delta(1.0) == 1.0
