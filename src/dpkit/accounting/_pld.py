"""Privacy-loss-distribution (PLD) accounting: tight, certified composition by FFT.

A PLD is the distribution of the privacy loss ``L = log(dP/dQ)(Y)`` for ``Y ~ P`` where (P, Q)
is a dominating pair of a mechanism (Meiser & Mohammadi 2018; Sommer, Meiser & Mohammadi 2019).
Composition adds independent losses, so PLDs convolve (Koskela, Jälkö & Honkela 2020), and the
privacy profile is the hockey-stick divergence

    delta(eps) = E[(1 - e^(eps - L))_+] + P(L = +inf).

How this module keeps the answer a *certified* upper bound (``pessimistic=True``):

1. Each event's pair is discretised on the grid ``{j h}`` by "connecting the dots" (Doroshenko,
   Ghazi, Kamath, Kumar & Manurangsi 2022, Sec. 3): ``delta`` is convex in ``x = e^eps``, so the
   chord through the exact points ``(e^(j h), delta(j h))`` lies above it; that chord is the
   hockey-stick curve of a grid-supported PLD which we compute exactly. The discrete PLD thus
   *dominates* the true one for every eps (below the grid the chord runs to (0, 1 - P(L = +inf));
   above it the remaining delta is put at +inf). Finitely many losses are split atom by atom
   (``_split_atoms``), the same chord without its rounding noise; a large-sigma discrete Gaussian
   goes through its tails (Euler-Maclaurin, remainder bounded), in memory independent of sigma.
   Unlike rounding losses up, this has no per-step bias, so the error does not grow like
   ``count * h``.
2. Dominance survives composition (Zhu, Dong & Wang 2022, "Optimal accounting of differential
   privacy via characteristic function", Thm. 10): ``delta_{A*B}(eps) = E_A[delta_B(eps - L)]``
   with a non-decreasing integrand.
3. All events are convolved in the Fourier domain at once (one forward FFT per distinct event,
   pointwise powers for repeats, one inverse FFT). The FFT is cyclic: mass below the window
   wraps *up* (harmless for an upper bound); mass above it wraps down, so a Chernoff bound on it
   (from the exact moment generating function of the discrete PLDs) is added to the +inf mass.
4. For Poisson subsampling under add/remove both directions are composed and the larger delta is
   reported (Zhu, Dong & Wang 2022, Prop. 30; as Google's dp_accounting does).
5. For sampling m of n records without replacement under replace-one, with (P, Q) the inner
   pair and q = m/n, every ordered pair of neighbours has H_a <= H_a(A || Q), A = q P + (1-q) Q,
   for a >= 1 (Balle, Barthe & Gaboardi 2018, Thm. 10, advanced joint convexity), hence, as the
   relation is symmetric, H_a <= H_a(Q || A) for a < 1. Composing (A, Q) and (Q, A) separately
   would not be sound (neither dominates for all a; cf. Lebeda, Regehr, Kamath & Steinke 2024),
   so we use the one symmetric pair S whose profile is exactly that bound: its losses above 0
   are those of (A, Q) under A, below 0 the negated ones under Q, plus an atom at 0. The bound
   is convex (so S exists) when the inner pair is symmetric, as all supported ones are.

``pessimistic=False`` rounds every loss *down* to the grid instead: an optimistic estimate (a
lower bound in exact arithmetic), labelled ``certified = False``.

A workload of plain Gaussians only (no subsampling) never reaches the grid: Gaussians with
mu_i = sensitivity_i / sigma_i compose *exactly* to the Gaussian with mu = sqrt(sum_i mu_i^2)
(Dong, Roth & Su 2022, Cor. 3.3; their losses are N(mu_i^2 / 2, mu_i^2) and add), so all of
them, counts included, answer as that one Gaussian, mu rounded up (a larger mu only raises
delta) while nothing else is composed: its exact profile (Balle & Wang 2018, Thm. 8, at 60
digits or more, rounded up), no grid, no floor. Beside other events they are discretised one by
one as any event (one wide merged Gaussian left the FFT's rounding bound looser).

Floating-point rounding. The FFT's rounding error is bounded a posteriori from the computed
spectra under the standard error model of a floating-point FFT (Higham 2002, Sec. 24.1; see
``_convolve``, doubled for safety) and that mass is moved to +inf. A power c amplifies relative
errors c times, so for repeated events the forward transform runs in extended precision where the
platform has it (x86 long double, unit roundoff 2^-64) and its cast to float64 is corrected to
first order inside the power; each distribution is centred first so the powers' phases stay
small. The queries' own sums (tail sums
and a first-order recurrence over the grid) are rounded outward by a relative 2 (n + 2) u. The
bound is worst-case (1e2 to 1e7 times the error measured against a long-double recomputation)
yet small: the whole mass at +inf was 2.6e-13 for ten Gaussian events at discretization 1e-4
(mostly the inverse transform's bound; alone, they are now answered exactly, see above) and is 1.6e-11 for
DP-SGD's 14,063 subsampled steps (mostly ``tail_mass`` per step), so deltas down to about 1e-10
for DP-SGD are answered tightly
(``bench/accounting_tiny_delta.py``). It replaced an allowance of 1e-15 per grid point, not a
proved bound, under which every delta below about 5e-10 answered infinity.

Where direct summation is cheap (one event used once; a few events of small or sparse support,
such as pure or approximate DP composed hundreds of times, up to ``_DIRECT_BUDGET`` multiply-adds)
no FFT runs: convolving non-negative masses directly has only relative rounding, which is bounded
and rounded up mass by mass (``_compose_exactly``), so nothing is moved to +inf for it. The floor
that remains there is the truncation of unbounded losses, ``tail_mass`` (1e-15) per distinct event
at +inf, plus at most ``tail_mass * 1e-3`` per trimming of negligible ends: one Gaussian answers
delta(10) = 1e-15 (exact 1e-22), 100 x 0.5-DP answers delta(50) = 2e-19 (exact 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InternalError, InvalidParameterError, UnsupportedEventError
from dpkit._lazy import LazyModule
from dpkit._validation import check_integer, check_positive
from dpkit.accounting._base import PrivacyAccountant, _flatten, grouped_event
from dpkit.accounting._hypothesis import _mp_gaussian_delta, gaussian_epsilon
from dpkit.events import (
    ApproxDPEvent,
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    GroupEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PureDPEvent,
    RandomizedResponseEvent,
    SampledWithoutReplacementEvent,
    SelfComposedEvent,
    ZCDPEvent,
)
from dpkit.guarantees import NeighbourRelation

fft = LazyModule("scipy.fft")
signal = LazyModule("scipy.signal")
special = LazyModule("scipy.special")

__all__ = ["PLDAccountant", "PrivacyLossDistribution"]

FloatArray = NDArray[np.float64]
# tails(eps) -> (P(L > eps), Q(L > eps)) for the pair (P, Q), vectorised.
Tails = Callable[[FloatArray], tuple[FloatArray, FloatArray]]


@dataclass(frozen=True)
class _Pair:
    """A dominating pair described by its loss tails, with the loss range that matters."""

    tails: Tails
    low: float  # losses below are lumped (pessimistic: up to the grid start)
    high: float  # may be inf: the grid end is then searched so that delta(high) <= tail_mass
    infinity_mass: float = 0.0  # P(L = +inf), not included in ``tails``
    atoms: tuple[FloatArray, FloatArray] | None = None  # (losses, P-masses) when finitely many


@dataclass
class _Pld:
    """Masses ``probs[i]`` at loss ``(start + i) * h`` plus ``infinity`` at +inf."""

    start: int
    probs: FloatArray
    infinity: float


@dataclass(frozen=True)
class PrivacyLossDistribution:
    """A composed privacy-loss distribution (PLD), as returned by :meth:`PLDAccountant.loss_distribution`.

    The distribution of the privacy loss ``L = log(dP/dQ)(Y)``, ``Y ~ P``, of the dominating pair
    ``(P, Q)`` of everything the accountant composed, on the grid of step ``discretization``:
    mass ``probabilities[j]`` at loss ``losses[j]`` (increasing, multiples of ``discretization``)
    and ``infinity_mass`` at ``L = +inf``. Both arrays are read-only.

    ``pessimistic=True``: the grid distribution *dominates* the true one (connect-the-dots
    discretisation, truncated tails moved to ``+inf``; see the module docstring), so its
    hockey-stick divergence ``delta(eps) = sum_j p_j (1 - e^(eps - l_j))_+ + infinity_mass`` is a
    certified upper bound; ``infinity_mass`` then includes the bound on the FFT's rounding error,
    so this formula gives what :meth:`PLDAccountant.delta` and :meth:`PLDAccountant.epsilon`
    report (they also round their own sums outward, by a relative 2 (n + 2) u), except when only
    plain Gaussians were composed: they report the merged Gaussian's exact profile, which this
    grid distribution (of that one Gaussian) bounds from above. In exact arithmetic
    ``probabilities.sum() == 1 - infinity_mass``; in floating point the pessimistic
    discretisation clips rounding-negative masses to 0, which adds mass (about ``1e-8`` per
    composed Gaussian event at ``discretization=1e-4``, growing linearly with the number of
    events) and can only raise delta. ``pessimistic=False``: losses rounded down to the grid, an
    optimistic estimate. ``direction`` is ``"remove"`` or ``"add"`` (the two coincide except for
    Poisson subsampling; the accountant reports the larger delta of the two).
    """

    discretization: float
    losses: FloatArray
    probabilities: FloatArray
    infinity_mass: float
    pessimistic: bool
    direction: str


# -- pairs of the supported events ----------------------------------------------------------------


def _norm_sf(z: FloatArray) -> FloatArray:
    return np.asarray(special.ndtr(-z), dtype=np.float64)


def _gaussian_pair(sigma: float) -> _Pair:
    # P = N(1, s^2), Q = N(0, s^2): L = (2y - 1) / (2 s^2), L > eps  <=>  y > s^2 eps + 1/2.
    def tails(eps: FloatArray) -> tuple[FloatArray, FloatArray]:
        t = sigma * sigma * eps + 0.5
        return _norm_sf((t - 1.0) / sigma), _norm_sf(t / sigma)

    return _Pair(tails, low=-math.inf, high=math.inf)


def _laplace_pair(b: float) -> _Pair:
    # P = Lap(1, b), Q = Lap(0, b): L = (|y| - |y - 1|) / b in [-1/b, 1/b], atoms at both ends.
    def tails(eps: FloatArray) -> tuple[FloatArray, FloatArray]:
        t = np.clip((1.0 + b * eps) / 2.0, 0.0, 1.0)
        p = 1.0 - 0.5 * np.exp(-(1.0 - t) / b)
        q = 0.5 * np.exp(-t / b)
        p = np.where(eps < -1.0 / b, 1.0, np.where(eps >= 1.0 / b, 0.0, p))
        q = np.where(eps < -1.0 / b, 1.0, np.where(eps >= 1.0 / b, 0.0, q))
        return p, q

    return _Pair(tails, low=-1.0 / b, high=1.0 / b)


def _atoms_pair(losses: FloatArray, masses: FloatArray, infinity: float = 0.0) -> _Pair:
    """A pair with finitely many losses (P-masses ``masses``; Q-mass is ``masses * e^-loss``)."""
    order = np.argsort(losses)
    losses, masses = losses[order], masses[order]
    q_masses = masses * np.exp(-losses)
    # suffix sums: tail_p[i] = sum_{j >= i} masses[j]
    tail_p = np.concatenate([np.cumsum(masses[::-1])[::-1], [0.0]])
    tail_q = np.concatenate([np.cumsum(q_masses[::-1])[::-1], [0.0]])

    def tails(eps: FloatArray) -> tuple[FloatArray, FloatArray]:
        first_above = np.searchsorted(losses, eps, side="right")
        return tail_p[first_above], tail_q[first_above]

    return _Pair(tails, float(losses[0]), float(losses[-1]), infinity, (losses, masses))


def _randomized_response_pair(epsilon: float, k: int) -> _Pair:
    norm = math.exp(epsilon) + k - 1
    losses = np.array([epsilon, -epsilon, 0.0])
    masses = np.array([math.exp(epsilon) / norm, 1.0 / norm, (k - 2) / norm])
    keep = masses > 0
    return _atoms_pair(losses[keep], masses[keep])


def _approx_dp_pair(epsilon: float, delta: float) -> _Pair:
    # The dominating pair of (eps, delta)-DP: mass delta at +inf, then randomised response
    # (Kairouz, Oh & Viswanath 2015; dp_accounting's from_privacy_parameters).
    p_up = (1.0 - delta) / (1.0 + math.exp(-epsilon))
    return _atoms_pair(np.array([epsilon, -epsilon]), np.array([p_up, 1.0 - delta - p_up]), delta)


def _discrete_laplace_pair(scale: float, sensitivity: int) -> _Pair:
    # P = s + Z, Q = Z, Z ~ DLap(a = e^(-1/scale)); L(y) = (|y| - |y - s|) / scale.
    a = math.exp(-1.0 / scale)
    y = np.arange(1, sensitivity, dtype=np.float64)
    losses = np.concatenate([[sensitivity / scale, -sensitivity / scale], (2.0 * y - sensitivity) / scale])
    middle = (1.0 - a) / (1.0 + a) * a ** (sensitivity - y)
    masses = np.concatenate([[1.0 / (1.0 + a), a**sensitivity / (1.0 + a)], middle])
    return _atoms_pair(losses, masses)


#: From this sigma on a discrete Gaussian is not summed atom by atom (80 sigma atoms: 0.8 M here,
#: 1 GB of arrays at sigma = 1e5) but through :func:`_discrete_gaussian_tail`, in bounded memory.
_SUMMED_SIGMA_LIMIT = 1e4

#: Largest root of the Hermite polynomial He_4(u) = u^4 - 6 u^2 + 3 (sqrt(3 + sqrt 6) = 2.3344...).
_HE4_ROOT = 2.3345


def _discrete_gaussian_tail(m: FloatArray, sigma: float) -> tuple[FloatArray, FloatArray]:
    """``(T, R)``: P(Z >= m) for Z ~ N_Z(0, sigma^2) and integers m is within R of T.

    Euler-Maclaurin to order 4 for f(x) = e^(-x^2 / 2 sigma^2) (e.g. DLMF 2.10.1; Apostol 1999):
    sum_{z >= m} f(z) = int_m^inf f + f(m)/2 - f'(m)/12 + f^(3)(m)/720 + R, |R| <= (1/720)
    int_m^inf |f^(4)|, and f^(k)(x) = (-1/sigma)^k He_k(x/sigma) f(x). Divided by the normaliser
    sum_z f(z) = sigma sqrt(2 pi) (1 + 2 sum_k e^(-2 pi^2 sigma^2 k^2)) (Poisson summation; the
    sum is below e^(-1e9) for sigma >= _SUMMED_SIGMA_LIMIT, so sigma sqrt(2 pi) is exact to far
    below float64), with u = m / sigma and phi the standard normal density:
    T = Phi(-u) + phi(u)/sigma (1/2 + u/(12 sigma) - He_3(u)/(720 sigma^3)) and
    R = sigma^-4 / 720 int_u^inf |He_4| phi, which is He_3(u) phi(u) past He_4's largest root
    (d/du (He_3 phi) = -He_4 phi) and at most sqrt(E He_4^2) = sqrt(24) < 4.9 before it. So R is
    relatively O(u^4 / sigma^4) in the tails and below 7e-19 anywhere for sigma >= 1e4.
    """
    u = m / sigma
    inverse = 1.0 / sigma
    with np.errstate(invalid="ignore", over="ignore"):
        density = np.exp(-0.5 * u * u) / math.sqrt(2.0 * math.pi)
        hermite3 = np.where(density > 0, u * (u * u - 3.0), 0.0)
        correction = density * inverse * (0.5 + u * inverse / 12.0 - hermite3 * inverse**3 / 720.0)
    tail = _norm_sf(u) + np.where(density > 0, correction, 0.0)
    remainder = inverse**4 / 720.0 * np.where(u >= _HE4_ROOT, hermite3 * density, 4.9)
    return tail, remainder


def _discrete_gaussian_pair(sigma: float, sensitivity: int) -> _Pair:
    # P = s + Z, Q = Z, Z ~ N_Z(0, sigma^2) (Canonne, Kamath & Steinke 2020): L(y) = (2 y s - s^2)/(2 sigma^2).
    if sigma >= _SUMMED_SIGMA_LIMIT:
        return _large_discrete_gaussian_pair(sigma, sensitivity)
    # Exact by summation over the integers; beyond 40 sigma the mass is below e^-800.
    reach = int(math.ceil(40.0 * sigma)) + 2
    z = np.arange(-reach, reach + 1, dtype=np.float64)
    weights = np.exp(-(z * z) / (2.0 * sigma * sigma))
    weights /= weights.sum()
    y = z + sensitivity  # P(y) = weights(z)
    losses = (2.0 * y * sensitivity - sensitivity * sensitivity) / (2.0 * sigma * sigma)
    return _atoms_pair(losses, weights)


def _large_discrete_gaussian_pair(sigma: float, sensitivity: int) -> _Pair:
    """The discrete Gaussian's pair through its tails: L > eps <=> y > t = sigma^2 eps / s + s/2,
    P(L > eps) = P(Z >= floor(t - s) + 1), Q(L > eps) = P(Z >= floor(t) + 1) (Canonne, Kamath &
    Steinke 2020, Thm. 7). P's tail is rounded up and Q's down by the Euler-Maclaurin remainder,
    so delta = P - e^eps Q is an upper bound at every grid point and the chord through it
    dominates the pair; with no atoms nothing of size sigma is built."""

    def tails(eps: FloatArray) -> tuple[FloatArray, FloatArray]:
        eps = np.asarray(eps, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            t = np.where(np.isfinite(eps), sigma * sigma * eps / sensitivity + 0.5 * sensitivity, eps)
        t = np.nan_to_num(t, nan=-np.inf)
        p_tail, p_error = _discrete_gaussian_tail(np.floor(t - sensitivity) + 1.0, sigma)
        q_tail, q_error = _discrete_gaussian_tail(np.floor(t) + 1.0, sigma)
        p_tail = np.where(t == -np.inf, 1.0, np.where(t == np.inf, 0.0, p_tail + p_error))
        q_tail = np.where(t == -np.inf, 1.0, np.where(t == np.inf, 0.0, q_tail - q_error))
        return np.clip(p_tail, 0.0, 1.0), np.clip(q_tail, 0.0, 1.0)

    return _Pair(tails, low=-math.inf, high=math.inf)


def _coarse_discrete_gaussian_pair(sigma: float, sensitivity: int, buckets: int = 2**20) -> _Pair:
    """Atoms for a large-sigma discrete Gaussian, for the subsampling of atoms: the integers in
    [-40 sigma, 40 sigma] cut into ``buckets`` runs of consecutive z, each run one atom at its
    largest loss (losses rounded up: a dominating PLD) with its P-mass rounded up by the
    Euler-Maclaurin remainder (more mass only raises delta). Losses move up by at most
    80 s / (sigma buckets), 8e-9 s at sigma = 1e4. The rounding leaves Q-mass 1 - sum p e^-l (at most
    about that shift) where P has none, which the "add" direction of Poisson subsampling puts at
    its largest loss: delta there is looser by up to about 5e-10 than for the continuous Gaussian."""
    reach = math.ceil(40.0 * sigma)
    width = math.ceil((2 * reach + 1) / buckets)
    edges = -reach + width * np.arange(buckets + 1, dtype=np.float64)  # run k: edges[k] <= z < edges[k+1]
    lower, upper = edges[:-1], edges[1:]
    # sum over [a, b) = T(a) - T(b); for b <= 0 mirrored, = T(1 - b) - T(1 - a), to keep precision.
    mirrored = upper <= 0
    start = np.where(mirrored, 1.0 - upper, lower)
    stop = np.where(mirrored, 1.0 - lower, upper)
    tail_start, error_start = _discrete_gaussian_tail(start, sigma)
    tail_stop, error_stop = _discrete_gaussian_tail(stop, sigma)
    masses = np.maximum(tail_start - tail_stop + error_start + error_stop, 0.0)
    y = upper - 1.0 + sensitivity  # the run's largest y, hence its largest loss
    losses = (2.0 * y * sensitivity - sensitivity * sensitivity) / (2.0 * sigma * sigma)
    keep = masses > 0
    return _atoms_pair(losses[keep], masses[keep])


def _subsampled_gaussian_pair(q: float, sigma: float, *, remove: bool) -> _Pair:
    # Poisson subsampling (Zhu, Dong & Wang 2022, Prop. 30): with M = q N(1,s^2) + (1-q) N(0,s^2),
    # "remove" is (M, N(0, s^2)) and "add" is (N(0, s^2), M). The loss is monotone in y.
    log1mq = math.log1p(-q)
    s2 = sigma * sigma
    if remove:

        def tails(eps: FloatArray) -> tuple[FloatArray, FloatArray]:
            # L = log(1 - q + q e^l), l = (2y - 1)/(2 s^2): L > eps <=> y > s^2 c + 1/2.
            arg = np.expm1(eps) + q
            with np.errstate(divide="ignore", invalid="ignore"):
                c = np.log(np.where(arg > 0, arg, 1.0) / q)
            t = np.where(arg > 0, s2 * c + 0.5, -np.inf)
            qt = _norm_sf(t / sigma)
            return q * _norm_sf((t - 1.0) / sigma) + (1.0 - q) * qt, qt

        return _Pair(tails, low=log1mq, high=math.inf)

    def tails_add(eps: FloatArray) -> tuple[FloatArray, FloatArray]:
        # L = -log(1 - q + q e^l) under N(0, s^2): L > eps <=> y < s^2 c' + 1/2.
        arg = np.expm1(-eps) + q
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.log(np.where(arg > 0, arg, 1.0) / q)
        t = np.where(arg > 0, s2 * c + 0.5, -np.inf)
        p_below = np.asarray(special.ndtr(t / sigma), dtype=np.float64)
        return p_below, q * np.asarray(special.ndtr((t - 1.0) / sigma)) + (1.0 - q) * p_below

    # lower end: y beyond 12 sigma under N(0, s^2) has mass < 1e-32; lumped upward.
    y_far = 12.0 * sigma + 1.0
    low = -math.log1p(q * math.expm1((2.0 * y_far - 1.0) / (2.0 * s2)))
    return _Pair(tails_add, low=low, high=-log1mq)


def _subsampled_laplace_pair(q: float, b: float, *, remove: bool) -> _Pair:
    # As above with P = Lap(1, b), Q = Lap(0, b); l(y) = (|y| - |y - 1|)/b is clipped to [-1/b, 1/b].
    inner_low, inner_high = -1.0 / b, 1.0 / b
    if remove:

        def tails(eps: FloatArray) -> tuple[FloatArray, FloatArray]:
            arg = np.expm1(eps) + q
            with np.errstate(divide="ignore", invalid="ignore"):
                c = np.log(np.where(arg > 0, arg, 1.0) / q)
            c = np.where(arg > 0, c, -np.inf)
            t = np.clip((1.0 + b * c) / 2.0, 0.0, 1.0)
            qt = 0.5 * np.exp(-t / b)
            pt = q * (1.0 - 0.5 * np.exp(-(1.0 - t) / b)) + (1.0 - q) * qt
            everything = c < inner_low
            nothing = c >= inner_high
            pt = np.where(everything, 1.0, np.where(nothing, 0.0, pt))
            qt = np.where(everything, 1.0, np.where(nothing, 0.0, qt))
            return pt, qt

        return _Pair(tails, low=math.log1p(q * math.expm1(inner_low)), high=math.log1p(q * math.expm1(inner_high)))

    def tails_add(eps: FloatArray) -> tuple[FloatArray, FloatArray]:
        arg = np.expm1(-eps) + q
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.log(np.where(arg > 0, arg, 1.0) / q)
        c = np.where(arg > 0, c, -np.inf)
        t = np.clip((1.0 + b * c) / 2.0, 0.0, 1.0)
        pt = 1.0 - 0.5 * np.exp(-t / b)  # Q(y < t)
        qt = q * 0.5 * np.exp(-(1.0 - t) / b) + (1.0 - q) * pt
        everything = c > inner_high
        nothing = c <= inner_low
        pt = np.where(everything, 1.0, np.where(nothing, 0.0, pt))
        qt = np.where(everything, 1.0, np.where(nothing, 0.0, qt))
        return pt, qt

    return _Pair(tails_add, low=-math.log1p(q * math.expm1(inner_high)), high=-math.log1p(q * math.expm1(inner_low)))


def _subsampled_atoms_pair(q: float, inner: _Pair, *, remove: bool) -> _Pair:
    """Poisson subsampling of a pair with finitely many losses, exactly (Zhu, Dong & Wang 2022)."""
    if inner.atoms is None:
        raise InternalError("subsampling of atoms needs the atoms")
    losses, p_mass = inner.atoms
    q_mass = p_mass * np.exp(-losses)
    q_minus_inf = max(0.0, 1.0 - float(q_mass.sum()))  # Q-mass where P = 0 (loss -inf)
    mix = q * p_mass + (1.0 - q) * q_mass  # M-mass of each atom
    if remove:  # (M, Q): loss log(1 - q + q e^l); atoms with P = 0 sit at log(1 - q)
        new_losses = np.concatenate([np.log1p(q * np.expm1(losses)), [math.log1p(-q)]])
        new_p = np.concatenate([mix, [(1.0 - q) * q_minus_inf]])
        return _atoms_pair(new_losses, new_p, q * inner.infinity_mass)
    # (Q, M): loss -log(1 - q + q e^l) with P-mass Q(atom); +inf atoms of P have Q-mass 0.
    keep = q_mass > 0
    new_losses = np.concatenate([-np.log1p(q * np.expm1(losses[keep])), [-math.log1p(-q)]])
    new_p = np.concatenate([q_mass[keep], [q_minus_inf]])
    keep2 = new_p > 0
    return _atoms_pair(new_losses[keep2], new_p[keep2], 0.0)


def _symmetrised_pair(base: _Pair) -> _Pair:
    """The symmetric pair S with delta_S = delta_(A||B) for eps >= 0, delta_(B||A) below (see 5.).

    For eps >= 0 the tails of S are those of (A, B); for eps < 0, P_S(L <= eps) = B(L_AB >= -eps)
    and Q_S(L <= eps) = A(-eps <= L_AB < inf) (the mirror image), A's +inf mass sitting at +inf
    for P_S and at -inf for Q_S. The rest, 1 - A(+inf) - A(L_AB > 0) - B(L_AB >= 0), is an atom
    at 0; it must not be negative (the profile is then convex, a genuine pair).
    """
    infinity = base.infinity_mass

    def tails(eps: FloatArray) -> tuple[FloatArray, FloatArray]:
        eps = np.asarray(eps, dtype=np.float64)
        a_gt, b_gt = base.tails(eps)
        # A(L_AB >= t), B(L_AB >= t) at t = -eps: the tails just below t.
        a_ge, b_ge = base.tails(np.nextafter(-eps, -np.inf))
        positive = eps >= 0
        p = np.where(positive, a_gt, 1.0 - infinity - b_ge)
        q = np.where(positive, b_gt, 1.0 - infinity - a_ge)
        return np.clip(p, 0.0, 1.0), np.clip(q, 0.0, 1.0)

    a0, _ = base.tails(np.array([0.0]))
    _, b0 = base.tails(np.array([np.nextafter(0.0, -np.inf)]))
    if 1.0 - infinity - float(a0[0]) - float(b0[0]) < -1e-12:
        raise InternalError("the without-replacement profile is not convex for this inner pair")
    low = -base.high if math.isfinite(base.high) else -math.inf
    return _Pair(tails, low=low, high=base.high, infinity_mass=infinity)


# -- discretisation --------------------------------------------------------------------------------


def _delta_of(pair: _Pair, eps: FloatArray) -> FloatArray:
    p_tail, q_tail = pair.tails(eps)
    with np.errstate(over="ignore", invalid="ignore"):  # e^eps = inf past 709: NaN, read as "not above"
        return np.maximum(p_tail - np.exp(eps) * q_tail, 0.0) + pair.infinity_mass


def _upper_end(pair: _Pair, tail_mass: float) -> float:
    """A loss above which the pair's finite part has delta <= tail_mass."""
    if math.isfinite(pair.high):
        return pair.high
    low, high = 0.0, 1.0
    while _delta_of(pair, np.array([high]))[0] - pair.infinity_mass > tail_mass:
        low, high = high, 2.0 * high
        if high > 1e6:
            raise InvalidParameterError("event", pair, "has a privacy loss too large to discretise")
    for _ in range(60):
        middle = 0.5 * (low + high)
        if _delta_of(pair, np.array([middle]))[0] - pair.infinity_mass > tail_mass:
            low = middle
        else:
            high = middle
    return high


#: Largest |privacy loss| a single event may need on the grid (e^700 is still a finite float).
_MAX_LOSS = 700.0


def _loss_reach(pair: _Pair, tail_mass: float) -> float:
    """The largest |loss| the grid of ``pair`` must cover."""
    top = _upper_end(pair, tail_mass)
    bottom = pair.low if math.isfinite(pair.low) else -top
    return max(abs(top), abs(bottom))


def _grid_points(pair: _Pair, h: float, tail_mass: float) -> int:
    """The grid points the discretised ``pair`` needs (after trimming), from its ends alone.

    Nothing of the grid's size is built, so a grid too fine for ``_MAX_GRID_POINTS`` is refused
    in microseconds rather than after gigabytes (one Laplace event at ``discretization=1e-8`` tried
    1.5 GB). A continuous pair is discretised from its lowest loss (or ``-top``) to ``top``, where
    its delta falls below ``tail_mass``, and that whole grid is allocated and kept (trimming drops
    only masses below ``tail_mass * 1e-3``, none there in practice). Atoms far out with negligible
    mass (a discrete Gaussian's reach to 40 sigma) are trimmed, so for atoms this counts only the
    span between the outermost atoms with more than ``tail_mass`` of P-mass beyond them (not
    ``tail_mass * 1e-3``: the composition's window, cut by Chernoff bounds at ``tail_mass``, may be
    narrower than the trimmed grid): a lower bound, so that what was accepted before still is.
    """
    if pair.atoms is not None:
        losses, masses = pair.atoms  # sorted by loss
        from_bottom = np.cumsum(masses)
        from_top = np.cumsum(masses[::-1])[::-1]
        lowest = np.flatnonzero(from_bottom > tail_mass)
        highest = np.flatnonzero(from_top > tail_mass)
        if len(lowest) == 0 or len(highest) == 0:
            return 1
        span = math.floor(float(losses[highest[-1]]) / h) - math.floor(float(losses[lowest[0]]) / h)
        return max(span, 1)
    top = _upper_end(pair, tail_mass)
    bottom = pair.low if math.isfinite(pair.low) else -top
    return math.ceil(top / h) - math.floor(bottom / h) + 1


def _too_fine_error(h: float, points: int, event: PrivacyEvent) -> InvalidParameterError:
    return InvalidParameterError(
        "discretization",
        h,
        f"is too fine for {event!r}: its privacy-loss distribution spans {points} grid points (at most "
        f"{_MAX_GRID_POINTS}); use a coarser discretization",
    )


def _discretise(pair: _Pair, h: float, tail_mass: float, pessimistic: bool) -> _Pld:
    top = _upper_end(pair, tail_mass)
    bottom = pair.low if math.isfinite(pair.low) else -top  # Gaussian: symmetric range
    if _loss_reach(pair, tail_mass) > _MAX_LOSS:
        # e^loss overflows past ~709 and the chord below became NaN ("cannot convert float NaN
        # to integer"); such an event is (eps, delta)-DP only for eps in the hundreds anyway.
        raise InvalidParameterError(
            "event", pair, f"has privacy losses beyond {_MAX_LOSS:g} nats, too large for a PLD; use RDPAccountant"
        )
    j_low, j_high = math.floor(bottom / h), math.ceil(top / h)
    if j_high <= j_low:
        j_high = j_low + 1
    j = np.arange(j_low, j_high + 1, dtype=np.float64)
    eps = j * h
    if not pessimistic:
        # Round each loss down to the grid: masses P(eps_j < L <= eps_{j+1}); the top point keeps
        # the upper tail, the lower tail is dropped (an under-estimate of delta).
        p_tail, _ = pair.tails(eps)
        probs = np.empty_like(eps)
        probs[:-1] = p_tail[:-1] - p_tail[1:]
        probs[-1] = p_tail[-1]
        if math.isfinite(pair.low):  # all finite losses are >= low >= the grid start
            probs[0] += max(0.0, 1.0 - pair.infinity_mass - float(p_tail[0]))
        return _trim(_Pld(j_low, np.maximum(probs, 0.0), pair.infinity_mass), tail_mass, pessimistic)
    if pair.atoms is not None:
        return _trim(_split_atoms(*pair.atoms, pair.infinity_mass, h), tail_mass, pessimistic)
    # Connect the dots (Doroshenko et al. 2022, Alg. 1): the chord of delta(x), x = e^eps, through
    # the exact grid values; its slope jumps are the grid masses times e^-eps. d is the finite
    # part's delta, so at x = 0 it is that part's P-mass, 1 - P(L = +inf) (not 1: starting there
    # would add the +inf mass once more at the bottom of the grid).
    d = _delta_of(pair, eps) - pair.infinity_mass
    x = np.exp(eps)
    slopes = np.empty(len(eps) + 1)
    slopes[0] = (d[0] - (1.0 - pair.infinity_mass)) / x[0]  # chord from (0, 1 - P(L = +inf))
    slopes[1:-1] = (d[1:] - d[:-1]) / (x[:-1] * math.expm1(h))
    slopes[-1] = 0.0  # above the grid, the remaining d[-1] sits at +inf
    probs = np.maximum(x * (slopes[1:] - slopes[:-1]), 0.0)
    return _trim(_Pld(j_low, probs, pair.infinity_mass + float(d[-1])), tail_mass, pessimistic)


def _split_atoms(losses: FloatArray, masses: FloatArray, infinity: float, h: float) -> _Pld:
    """Connect the dots for finitely many losses, atom by atom (Doroshenko et al. 2022, Sec. 3).

    Between two grid points the chord replaces the atoms by masses at both ends with the same P-
    and Q-mass: an atom p at l = l_j + a, 0 <= a <= h, becomes p (1 - e^-a) / (1 - e^-h) at l_{j+1}
    and the rest at l_j. Same PLD as the chord through the tails, without its rounding noise
    (which leaves masses of ~1e-13 at every grid point in between), so the support stays as
    sparse as the atoms and :func:`_compose_exactly` can use it. Atoms that float rounding puts
    a hair (1e-9 h) off a grid point are not split over two: one just below goes up to it (a
    larger loss: pessimistic); one just above keeps p e^-a at it and puts p (1 - e^-a) <= 1e-9 h p
    at +inf, the chord between l_j and +inf (same P- and Q-mass, so it dominates as well).
    """
    below = np.floor(losses / h)
    offset = np.clip(losses - below * h, 0.0, h)
    hair = 1e-9 * h
    offset = np.where(offset >= h - hair, h, offset)
    just_above = (offset > 0) & (offset <= hair)
    up = np.clip(masses * (np.expm1(-offset) / math.expm1(-h)), 0.0, masses)
    up = np.where(just_above, 0.0, up)
    lifted = np.where(just_above, -masses * np.expm1(-offset), 0.0)
    j_low = int(below.min())
    probs = np.zeros(int(below.max()) - j_low + 2)
    index = (below - j_low).astype(np.int64)
    np.add.at(probs, index, masses - up - lifted)
    np.add.at(probs, index + 1, up)
    return _Pld(j_low, probs, infinity + float(np.sum(lifted)))


# -- composition -----------------------------------------------------------------------------------

_LAMBDAS = np.geomspace(1e-2, 100.0, 24)


def _log_mgf(pld: _Pld, h: float, lambdas: FloatArray) -> FloatArray:
    """log E[e^(lambda L); L finite] for each lambda (exact for the discrete PLD, up to rounding)."""
    nonzero = np.nonzero(pld.probs)[0]
    if len(nonzero) == 0:
        return np.full(len(lambdas), -np.inf)
    probs = pld.probs[nonzero]
    losses = (pld.start + nonzero) * h
    # shift each exponent by its maximum over the support, so that no term overflows
    reference = np.where(lambdas > 0, losses[-1], losses[0])
    # a few lambdas at a time: all 24 rows at once over 2^24 losses took 3.2 GB
    rows = max(1, _MGF_CHUNK // len(losses))
    sums = np.empty(len(lambdas))
    for first in range(0, len(lambdas), rows):
        chunk = slice(first, first + rows)
        exponent = np.exp(lambdas[chunk, None] * (losses[None, :] - reference[chunk, None]))
        sums[chunk] = exponent @ probs
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(sums) + lambdas * reference, dtype=np.float64)


#: Most entries of the lambda-by-loss matrix :func:`_log_mgf` builds at once (32 MB).
_MGF_CHUNK = 2**22


def _fold(probs: FloatArray, n: int) -> FloatArray:
    if len(probs) <= n:
        return probs
    padded = np.zeros(-(-len(probs) // n) * n)
    padded[: len(probs)] = probs
    return np.asarray(padded.reshape(-1, n).sum(axis=0))


#: Most multiply-adds :func:`_compose_exactly` spends (about 20 ms; np.convolve runs near 5e9 a second)
#: before leaving the work to the FFT.
_DIRECT_BUDGET = 1e8


def _strided(pld: _Pld) -> tuple[int, int, FloatArray] | None:
    """``(first, stride, values)``: the nonzero masses of ``pld`` lie at ``first + stride k``
    (stride 0 for a single one); ``values[k]`` is the mass there. None when all masses are 0."""
    nonzero = np.flatnonzero(pld.probs)
    if len(nonzero) == 0:
        return None
    stride = int(np.gcd.reduce(np.diff(nonzero))) if len(nonzero) > 1 else 0
    values = pld.probs[nonzero[0] : nonzero[-1] + 1 : max(stride, 1)]
    return pld.start + int(nonzero[0]), stride, np.asarray(values, dtype=np.float64)


def _times_count(count: int, value: float) -> float:
    """count * value in float, for any int count (10**400 times a float raised OverflowError)."""
    if value == 0.0 or count < 2**1000:
        return count * value
    return math.copysign(math.exp(math.log(count) + math.log(abs(value))), value)


def _powers_cost(length: int, count: int) -> tuple[float, int]:
    """Multiply-adds and result length of ``count``-fold self-convolution by repeated squaring."""
    cost, result, square = 0.0, 0, length
    while count:
        if square > 2**60:  # (a count like 10**400: no direct summation; floats of it would overflow)
            return math.inf, 0
        if count & 1:
            cost += float(result) * square
            result = square if result == 0 else result + square - 1
        count >>= 1
        if count:
            cost += float(square) * square
            square = 2 * square - 1
    return cost, result


def _compose_exactly(parts: list[tuple[_Pld, int]], tail_mass: float, pessimistic: bool) -> _Pld | None:
    """The convolution of ``pld ** count`` over ``parts`` by direct summation, where that is cheap.

    Direct convolution of non-negative masses (repeated squaring for the powers, on the common
    stride of the supports, so that the c-fold composition of a pure DP pair costs O(c^2) on its
    c + 1 atoms) has no cancellation: every computed mass is within a relative gamma_k = k u /
    (1 - k u) of the exact sum of its k products whatever the order of summation (Higham 2002,
    Sec. 3.1 and 4.2), and such errors compose multiplicatively. The pessimistic result multiplies
    every mass by 1 + 2 rho + 4u >= 1 / ((1 - rho)(1 - u)), rho the accumulated relative bound,
    which can only raise delta; no mass is moved to +inf, so no floor is paid (a lone event used
    once is returned as it is). None when the work would exceed ``_DIRECT_BUDGET`` multiply-adds
    or the grid ``_MAX_GRID_POINTS``: the FFT is used then.
    """
    strided = [(_strided(p), c) for p, c in parts]
    if any(s is None for s, _c in strided):
        return None
    stride = 0
    for s, _c in strided:
        stride = math.gcd(stride, s[1])  # type: ignore[index]
    stride = max(stride, 1)
    expanded: list[tuple[FloatArray, int]] = []
    cost, length, start = 0.0, 0, 0
    for s, c in strided:
        first, own, values = s  # type: ignore[misc]
        if own > stride:  # re-express on the common stride
            spaced = np.zeros((len(values) - 1) * (own // stride) + 1)
            spaced[:: own // stride] = values
            values = spaced
        part_cost, part_length = _powers_cost(len(values), c)
        cost += part_cost + float(length) * part_length
        length = part_length if length == 0 else length + part_length - 1
        start += c * first
        expanded.append((values, c))
    if cost > _DIRECT_BUDGET:
        return None
    u = float(np.finfo(np.float64).eps) / 2

    def convolve(a: tuple[FloatArray, float], b: tuple[FloatArray, float]) -> tuple[FloatArray, float]:
        k = min(len(a[0]), len(b[0]))
        gamma = k * u / (1 - k * u)  # k products summed (one product: its rounding, u)
        return np.convolve(a[0], b[0]), (1 + a[1]) * (1 + b[1]) * (1 + gamma) - 1

    total: tuple[FloatArray, float] | None = None
    for values, c in expanded:
        power: tuple[FloatArray, float] | None = None
        square: tuple[FloatArray, float] = (values, 0.0)
        while c:
            if c & 1:
                power = square if power is None else convolve(power, square)
            c >>= 1
            if c:
                square = convolve(square, square)
        if power is not None:
            total = power if total is None else convolve(total, power)
    if total is None:
        raise InternalError("nothing to compose")
    values, relative = total
    if pessimistic and relative > 0:
        values = values * (1 + 2 * relative + 4 * u)
    infinity = 0.0
    if any(p.infinity > 0 for p, _c in parts):
        # 1 - prod (1 - inf_p)^c_p, each step within a few u: rounded up by a relative 2 (k + 6) u.
        exact = -math.expm1(sum(_times_count(c, math.log1p(-p.infinity)) for p, c in parts))
        infinity = min(1.0, exact * (1 + 2 * (len(parts) + 6) * u) if pessimistic else exact)
    trimmed = _trim(_Pld(0, values, infinity), tail_mass, pessimistic)  # on the stride, before spreading
    if (len(trimmed.probs) - 1) * stride + 1 > _MAX_GRID_POINTS:
        return None
    probs = np.zeros((len(trimmed.probs) - 1) * stride + 1)
    probs[::stride] = trimmed.probs
    return _Pld(start + trimmed.start * stride, probs, trimmed.infinity)


def _compose_all(parts: list[tuple[_Pld, int]], h: float, tail_mass: float, pessimistic: bool) -> _Pld:
    """The convolution of ``pld ** count`` over ``parts``: directly where that is cheap (see
    :func:`_compose_exactly`), else in one inverse FFT (Koskela et al. 2020)."""
    exactly = _compose_exactly(parts, tail_mass, pessimistic)
    if exactly is not None:
        return exactly
    for _p, c in parts:
        if c > _MAX_GRID_COUNT:  # (10**400 raised OverflowError in the Chernoff bounds below)
            raise InvalidParameterError(
                "count", c, "must be at most 2**1000 for an event composed on the PLD grid; use RDPAccountant"
            )
    base = sum(p.start * c for p, c in parts)
    top = sum((p.start + len(p.probs) - 1) * c for p, c in parts)
    survive = 1.0
    for p, c in parts:
        survive *= (1.0 - p.infinity) ** c if c < 2**53 else math.exp(_times_count(c, math.log1p(-p.infinity)))
    # Chernoff bounds on the sum of the finite parts (sub-probability measures; Markov's inequality
    # holds for them as well): P(S >= u) <= exp(log M(l) - l u).
    up = sum(c * _log_mgf(p, h, _LAMBDAS) for p, c in parts)
    down = sum(c * _log_mgf(p, h, -_LAMBDAS) for p, c in parts)
    log_tail = math.log(tail_mass)
    upper = min(top, math.ceil(float(np.min((up - log_tail) / _LAMBDAS)) / h))
    lower = max(base, math.floor(float(np.max((log_tail - down) / _LAMBDAS)) / h))
    upper = max(upper, base)
    lower = min(lower, upper)
    upper_tail = 0.0
    if upper < top:
        upper_tail = float(np.exp(np.min(up - _LAMBDAS * (upper + 1) * h)))
    if upper - lower + 1 > _MAX_GRID_POINTS:
        raise InvalidParameterError(
            "discretization",
            h,
            f"is too fine for this composition: its losses span {upper - lower + 1} grid points (at most "
            f"{_MAX_GRID_POINTS}); use a coarser discretization, or RDPAccountant for very long compositions",
        )
    n = fft.next_fast_len(upper - lower + 1, real=True)
    folded = [(_fold(p.probs, n), c) for p, c in parts]
    # Optimistic answers carry no rounding allowance: plain float64, no bound.
    cyclic, rounding = _convolve(folded, n, upper - lower + 1, _FFT_DTYPE) if pessimistic else (_cyclic(folded, n), 0.0)
    # cyclic[r] holds the mass of losses (base + r + m n) h for all m; read the window [lower, ...).
    window = np.roll(cyclic, -((lower - base) % n))[: upper - lower + 1]
    window = np.maximum(window, 0.0)
    infinity = 1.0 - survive
    if pessimistic:
        infinity += upper_tail  # mass above the window wrapped down: count it at +inf
        infinity += rounding  # the FFT's rounding error over the window, also at +inf
    return _trim(_Pld(lower, window, min(infinity, 1.0)), tail_mass, pessimistic)


#: Most times one event may be composed on the grid (its count enters float arithmetic there).
_MAX_GRID_COUNT = 2**1000

#: Most grid points of a composed PLD (its long-double spectra then take about 0.3 GB).
_MAX_GRID_POINTS = 2**24

#: The forward transforms run in extended precision where the platform has it (x86 long double:
#: unit roundoff 2^-64, 2048 times smaller than float64's). Their error is what the powers
#: c_p amplify (Y^c errs by about c times Y's error), so this is where precision pays; the powers,
#: products and the inverse transform stay in float64, whose errors are not amplified.
_FFT_DTYPE = np.longdouble if np.finfo(np.longdouble).eps < np.finfo(np.float64).eps else np.float64

#: Relative rounding error per FFT stage, in units of the unit roundoff u (a butterfly a + w b
#: with a rounded twiddle w adds at most about 7u: Higham 2002, Sec. 24.1, eta = mu + gamma_4
#: (sqrt 2 + mu)); taken as 8u, and the whole bound is doubled (_FFT_SAFETY) for the mixed radices
#: and real-input passes of pocketfft.
_FFT_STAGE_ERROR = 8
_FFT_SAFETY = 2.0


def _convolve(
    parts: list[tuple[FloatArray, int]], n: int, width: int, forward_dtype: type = np.float64
) -> tuple[FloatArray, float]:
    """irfft(prod_p rfft(x_p)^c_p) over n points (a cyclic convolution), with a bound on the L1
    rounding error of any ``width`` consecutive outputs.

    Each part is first rolled so that its mean sits at index 0 (the output is rolled back by the
    same total, exactly): its spectrum's phase is then small wherever its magnitude matters, which
    keeps the rounding of the powers small. For a part used c > 1 times the forward transform is
    taken in ``forward_dtype`` and, wherever |Y^c| > e^-700, its cast to complex128 corrected to
    first order in the power; the rest runs in float64.

    Error model (entrywise, evaluated from the computed values; Higham 2002, Sec. 24.1): an FFT
    output errs by at most g sum|input| with g = stages * _FFT_STAGE_ERROR * u, since every output
    is a combination of the inputs with weights of modulus 1 through ``stages`` rounded
    butterflies. So each spectrum entry Y_p is within E_p = g_fwd s_p (+ 2u |Y_p| where its cast
    is not corrected) of the exact DFT (s_p = sum x_p). A product of powers then errs by at most
    sum_p c_p E_p A_p^(c_p - 1) prod_{q != p} A_q^c_q with A = |Y| + E (the mean value theorem),
    plus the rounding of the powers themselves (relative (c_p |log Y_p| + 4) u, computed as
    exp(c log z); 6u + c u^2 more for the correction) and of the product; the inverse
    transform adds g (1/n) sum |Z| to each output and passes on (1/n) sum |dZ|. Every output is
    bounded alike, so ``width`` outputs err by at most ``width`` times that, doubled for safety.
    The bound is 1e2 to 1e7 times the error measured against a long-double recomputation
    (tests/accounting/test_pld.py), and still small: about 2.5e-13 for ten Gaussian events at
    discretization 1e-4, 6e-12 for DP-SGD's 14,063 subsampled steps (both directions).
    """
    u = float(np.finfo(np.float64).eps) / 2
    stages = max(1, math.ceil(math.log2(n)))
    g = stages * _FFT_STAGE_ERROR * u
    g_forward = stages * _FFT_STAGE_ERROR * float(np.finfo(forward_dtype).eps) / 2
    spectrum: NDArray[np.complex128] | None = None
    shift_total = 0
    pieces: list[tuple[FloatArray, FloatArray, FloatArray, int]] = []
    for x, c in parts:
        total = float(np.sum(x))
        shift = round(float(np.dot(np.arange(len(x), dtype=np.float64), x)) / total) if total > 0 else 0
        # Only a power amplifies the forward transform's error: a part used once stays in float64.
        padded: NDArray[np.floating[Any]] = np.zeros(n, dtype=forward_dtype if c > 1 else np.float64)
        padded[: len(x)] = x  # len(x) <= n (folded): the roll must wrap over all n points
        forward = np.asarray(fft.rfft(np.roll(padded, -shift)))
        one = np.asarray(forward, dtype=np.complex128)
        magnitude = np.abs(one)
        if c == 1:
            error = np.full(len(one), g * total)  # the forward transform's error
            pieces.append((magnitude, error, np.zeros(len(one)), c))
            spectrum = one if spectrum is None else spectrum * one
            shift_total += shift
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            log_size = np.minimum(np.abs(np.log(one)), 1e300)  # |log Y| = |ln|Y| + i arg Y|
            # A power amplifies a relative error c times, so the cast of Y to complex128 (relative
            # u) would cost c u. Where Y^c is within float64's range it is corrected to first order:
            # Y^c = Y_hi^c (1 + r)^c ~ Y_hi^c e^(c r), r = (Y - Y_hi) / Y_hi, |r| <= u, leaving a
            # relative c r^2 / 2 <= c u^2. Elsewhere |Y^c| < e^-700 and the cast is harmless.
            wide = c * np.log(magnitude) > -700.0
            residual = np.asarray(forward[wide] - one[wide], dtype=np.complex128) / one[wide]
        powered = one**c
        powered[wide] *= np.exp(c * residual)
        # The forward transform's error (in its own precision), plus the cast where uncorrected.
        error = g_forward * total + np.where(wide, 0.0, 2 * u * magnitude)
        # Relative error of the power (exp(c log z) in float64), of the correction (a division, a
        # product, an exp and a multiplication: 6u, and c u^2 from its first order).
        relative = (c * log_size + 4) * u + np.where(wide, 6 * u + c * u * u, 0.0)
        pieces.append((magnitude, error, relative, c))
        spectrum = powered if spectrum is None else spectrum * powered
        shift_total += c * shift
    if spectrum is None:
        raise InternalError("nothing to compose")
    cyclic = np.roll(np.asarray(fft.irfft(spectrum, n), dtype=np.float64), shift_total % n)
    return cyclic, _rounding_bound(pieces, np.abs(spectrum), n, width, u, g)


def _cyclic(parts: list[tuple[FloatArray, int]], n: int) -> FloatArray:
    """irfft(prod_p rfft(x_p)^c_p) over n points in float64, without a rounding bound."""
    spectrum: NDArray[np.complex128] | None = None
    for x, c in parts:
        one = np.asarray(fft.rfft(x, n))
        powered = one**c if c > 1 else one
        spectrum = powered if spectrum is None else spectrum * powered
    if spectrum is None:
        raise InternalError("nothing to compose")
    return np.asarray(fft.irfft(spectrum, n), dtype=np.float64)


def _rounding_bound(
    pieces: list[tuple[FloatArray, FloatArray, FloatArray, int]],
    result: FloatArray,
    n: int,
    width: int,
    u: float,
    g: float,
) -> float:
    """The bound of :func:`_convolve`: ``pieces`` hold per part |Y_p|, E_p, the relative rounding
    error of the power Y_p^c_p and c_p; ``result`` is |prod_p Y_p^c_p| as computed."""
    # Each rfft entry m < n / 2 stands for two entries of the full spectrum (m and n - m).
    weights = np.full(len(result), 2.0)
    weights[0] = 1.0
    if n % 2 == 0:
        weights[-1] = 1.0
    with np.errstate(divide="ignore"):
        envelopes = [c * np.log(magnitude + error) for magnitude, error, _log, c in pieces]  # c ln A
    all_envelopes = np.sum(envelopes, axis=0)
    per_entry = (len(pieces) + 1) * u * result  # the products and the final multiplication
    for (_magnitude, error, relative, c), envelope in zip(pieces, envelopes, strict=True):
        # c_p E_p A_p^(c_p - 1) prod_{q != p} A_q^c_q, in logs (no overflow).
        with np.errstate(divide="ignore"):
            slope = math.log(c) + all_envelopes - envelope / c + np.log(error)
        per_entry = per_entry + np.exp(slope) + relative * result  # and the power's own rounding
    propagated = float(np.sum(weights * per_entry))
    inverse = g * float(np.sum(weights * result))
    return _FFT_SAFETY * width * (propagated + inverse) / n


def _trim(pld: _Pld, tail_mass: float, pessimistic: bool) -> _Pld:
    """Drop negligible ends: bottom mass lumped up (safe), top mass moved to +inf (pessimistic)."""
    probs = pld.probs
    cum_top = np.cumsum(probs[::-1])
    drop_top = int(np.searchsorted(cum_top, tail_mass * 1e-3, side="right"))
    cum_bottom = np.cumsum(probs)
    drop_bottom = int(np.searchsorted(cum_bottom, tail_mass * 1e-3, side="right"))
    if drop_top + drop_bottom >= len(probs):
        return pld
    kept = probs[drop_bottom : len(probs) - drop_top].copy()
    infinity = pld.infinity
    if drop_top:
        moved = float(cum_top[drop_top - 1])
        if pessimistic:
            infinity += moved
        else:
            kept[-1] += moved
    if drop_bottom:
        kept[0] += float(cum_bottom[drop_bottom - 1]) if pessimistic else 0.0
    return _Pld(pld.start + drop_bottom, kept, infinity)


# -- queries ---------------------------------------------------------------------------------------


def _profile(pld: _Pld, h: float, allowance: float = 0.0) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Grid losses l_j, A_j = P(l_j < L < inf), B_j = sum_{l_i > l_j} p_i e^(l_j - l_i).

    ``allowance`` rho > 0 (pessimistic answers) returns A (1 + rho) and B (1 - rho), so that
    A - B e^(eps - l) stays an upper bound despite the rounding of the two sums.
    """
    probs = pld.probs
    losses = np.asarray((pld.start + np.arange(len(probs))) * h, dtype=np.float64)
    above = np.concatenate([np.cumsum(probs[::-1])[::-1][1:], [0.0]])
    # B_j = e^-h (p_{j+1} + B_{j+1}): a stable first-order recurrence, run backwards.
    decay = math.exp(-h)
    reversed_probs = probs[::-1]
    shifted = np.concatenate([[0.0], reversed_probs[:-1]])
    weighted = np.asarray(signal.lfilter([decay], [1.0, -decay], shifted))[::-1]
    if allowance:
        above, weighted = above * (1 + allowance), weighted * (1 - allowance)
    return losses, above, weighted


def _sum_allowance(pld: _Pld) -> float:
    """rho for :func:`_profile`: A and B are sums of at most n + 1 non-negative terms (a running
    sum and a first-order recurrence), each with a relative error below (n + 1) u; doubled."""
    return 2 * (len(pld.probs) + 2) * float(np.finfo(np.float64).eps)


def _delta_at(pld: _Pld, h: float, epsilon: float, allowance: float = 0.0) -> float:
    losses, above, weighted = _profile(pld, h, allowance)
    if epsilon < losses[0]:
        # below the grid every finite loss is above epsilon
        total_q = (float(pld.probs[0]) + float(weighted[0])) * math.exp(epsilon - float(losses[0]))
        return min(1.0, max(0.0, float(np.sum(pld.probs)) - total_q) + pld.infinity)
    j = min(int(np.searchsorted(losses, epsilon, side="right")) - 1, len(losses) - 1)
    # Past the top loss nothing finite is above epsilon (weighted is 0 there, and e^(epsilon - l)
    # would overflow for epsilon hundreds of nats beyond the grid).
    below = float(weighted[j]) * math.exp(epsilon - float(losses[j])) if weighted[j] > 0 else 0.0
    value = float(above[j]) - below
    return min(1.0, max(0.0, value) + pld.infinity)


def _epsilon_at(pld: _Pld, h: float, delta: float, allowance: float = 0.0) -> float:
    if pld.infinity > delta:
        return math.inf
    losses, above, weighted = _profile(pld, h, allowance)
    grid_delta = above - weighted + pld.infinity  # delta at each grid loss, non-increasing
    ok = np.nonzero(grid_delta <= delta)[0]
    j = int(ok[0]) if len(ok) else len(losses) - 1
    if j == 0:
        # delta(eps) = S - e^(eps - l_0) (p_0 + B_0) + inf below the grid; solve exactly.
        total_q = float(pld.probs[0]) + float(weighted[0])
        rest = float(np.sum(pld.probs)) + pld.infinity - delta
        eps = float(losses[0]) + math.log(rest / total_q) if rest > 0 and total_q > 0 else -math.inf
        return max(0.0, eps)
    # Between l_{j-1} and l_j delta(eps) = A - e^(eps - l_{j-1}) B exactly: solve for eps.
    a, b = float(above[j - 1]) + pld.infinity - delta, float(weighted[j - 1])
    eps = float(losses[j - 1]) + math.log(a / b) if a > 0 and b > 0 else float(losses[j])
    return max(0.0, min(eps, float(losses[j])))


# -- group privacy ---------------------------------------------------------------------------------

_GROUPABLE_TYPES = (
    GaussianEvent,
    LaplaceEvent,
    DiscreteLaplaceEvent,
    DiscreteGaussianEvent,
    PureDPEvent,
    RandomizedResponseEvent,
    ApproxDPEvent,
)
_GROUPABLE = (
    "Gaussian, Laplace, discrete Laplace, discrete Gaussian, pure DP, randomized response and "
    "approximate DP events and compositions of them"
)


def _grouped(event: PrivacyEvent, size: int) -> PrivacyEvent | None:
    """What a group of ``size`` sees (:func:`~dpkit.accounting._base.grouped_event`); a zCDP event
    has no PLD here, so its group has none either."""
    grouped = grouped_event(event, size)
    return None if grouped is None or _has_zcdp(grouped) else grouped


def _has_zcdp(event: PrivacyEvent) -> bool:
    if isinstance(event, SelfComposedEvent):
        return _has_zcdp(event.event)
    if isinstance(event, ComposedEvent):
        return any(_has_zcdp(part) for part in event.events)
    return isinstance(event, ZCDPEvent)


def _atomic_events(event: PrivacyEvent) -> list[PrivacyEvent]:
    """The non-composite events ``event`` composes, group events replaced by what the group sees."""
    if isinstance(event, SelfComposedEvent):
        return _atomic_events(event.event)
    if isinstance(event, ComposedEvent):
        return [atomic for part in event.events for atomic in _atomic_events(part)]
    if isinstance(event, GroupEvent):
        grouped = _grouped(event.event, event.size)
        return [] if grouped is None else _atomic_events(grouped)
    return [event]


def _ungroupable(event: PrivacyEvent, size: int = 1) -> str | None:
    """Why a group event inside ``event`` (``size``: the enclosing groups) has no exact PLD form;
    None if every one has."""
    if isinstance(event, SelfComposedEvent):
        return _ungroupable(event.event, size)
    if isinstance(event, ComposedEvent):
        for part in event.events:
            found = _ungroupable(part, size)
            if found is not None:
                return found
        return None
    if isinstance(event, GroupEvent):
        return _ungroupable(event.event, size * event.size)
    if size == 1 or _grouped(event, size) is not None:
        return None
    if isinstance(event, _GROUPABLE_TYPES):
        return f"for a group of {size}, {event!r} leaves the events' range (delta >= 1 or noise below 1e-150)"
    return f"group privacy has an exact PLD only for {_GROUPABLE}, not for {event!r} (in a group of {size})"


# -- the accountant --------------------------------------------------------------------------------


class PLDAccountant(PrivacyAccountant):
    """Privacy-loss-distribution accountant: tight (epsilon, delta) by FFT convolution.

    ``pessimistic=True`` (default) returns certified upper bounds (connect-the-dots
    discretisation, Doroshenko et al. 2022; truncated tails counted in delta);
    ``pessimistic=False`` an optimistic estimate (losses rounded down; ``certified`` is False).
    When only plain Gaussian events are composed, the answers are the exact profile (Balle & Wang
    2018) of the one Gaussian they compose to (Dong, Roth & Su 2022, Cor. 3.3).
    ``discretization`` is the grid spacing of the loss; ``tail_mass`` the largest mass each
    truncation may move to +inf. Supports Gaussian, Laplace, discrete Laplace and Gaussian
    (integer sensitivity), randomized response, pure and approximate DP events, Poisson
    subsampling (add/remove) and sampling without replacement (replace-one) of any of them, and
    group privacy (``GroupEvent``) of the unsampled ones and their compositions (sensitivity
    scaled by the group size; pure and approximate DP through their group guarantees). A grid
    of more than 2^24 points is refused when the event is composed (``InvalidParameterError``
    naming ``discretization``), before it is built.

    >>> from dpkit.events import dpsgd_event
    >>> accountant = PLDAccountant().compose(dpsgd_event(1.1, 256 / 60000, 14063))
    >>> round(accountant.epsilon(1e-5), 2)
    2.38
    """

    def __init__(
        self,
        neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE,
        *,
        discretization: float = 1e-4,
        pessimistic: bool = True,
        tail_mass: float = 1e-15,
    ) -> None:
        super().__init__(neighbours)
        self.discretization = check_positive("discretization", discretization)
        if self.discretization > 1.0:
            raise InvalidParameterError("discretization", discretization, "must be a real number in (0, 1]")
        if not isinstance(pessimistic, bool):
            raise InvalidParameterError("pessimistic", pessimistic, "must be a bool")
        self.pessimistic = pessimistic
        self.certified = pessimistic
        self.tail_mass = check_positive("tail_mass", tail_mass)
        if self.tail_mass >= 1e-3:
            raise InvalidParameterError("tail_mass", tail_mass, "must be a real number in (0, 1e-3)")
        # Plain Gaussian events are kept apart while nothing else is composed: then the answers
        # are the exact profile of the one Gaussian they compose to (see _gaussian_mu). Once any
        # other event comes they join the pending events and are discretised one by one as
        # before: a merged Gaussian beside few other events left the FFT's rounding bound loose
        # (7.05367 against 7.05235 at delta 1e-6 for 4 x G(1.5), G(3) and Laplace(20), and
        # infinity at 1e-9), so merging is kept to the workloads it answers exactly.
        self._gaussians: dict[PrivacyEvent, int] = {}
        self._pending: dict[PrivacyEvent, int] = {}
        self._state: tuple[_Pld, _Pld | None] | None = None  # (remove, add or None if identical)
        self._cache: dict[tuple[PrivacyEvent, bool], _Pld] = {}
        self._points: dict[PrivacyEvent, int] = {}  # grid points each event needs (see _grid_points)

    # -- events -> pairs ----------------------------------------------------------------------

    def _pair(self, event: PrivacyEvent, remove: bool) -> _Pair | None:
        if isinstance(event, GaussianEvent):
            return _gaussian_pair(event.noise_multiplier)
        if isinstance(event, LaplaceEvent):
            return _laplace_pair(event.noise_multiplier)
        atoms = self._atoms(event)
        if atoms is not None:
            return atoms
        if isinstance(event, PoissonSampledEvent):
            inner = event.event
            if self.neighbours is not NeighbourRelation.ADD_REMOVE:
                return None
            if getattr(inner, "neighbours", self.neighbours) is not self.neighbours:
                return None
            q = event.sampling_probability
            if q == 1.0:
                # Keeping every record is no subsampling: the inner event's own pair, exactly
                # (the subsampled formulas take log(1 - q)).
                if isinstance(inner, GaussianEvent):
                    return _gaussian_pair(inner.noise_multiplier)
                if isinstance(inner, LaplaceEvent):
                    return _laplace_pair(inner.noise_multiplier)
                return self._atoms(inner)
            if isinstance(inner, GaussianEvent):
                return _subsampled_gaussian_pair(q, inner.noise_multiplier, remove=remove)
            if isinstance(inner, LaplaceEvent):
                return _subsampled_laplace_pair(q, inner.noise_multiplier, remove=remove)
            inner_atoms = self._atoms(inner, coarse=True)
            if inner_atoms is not None:
                return _subsampled_atoms_pair(q, inner_atoms, remove=remove)
        if isinstance(event, SampledWithoutReplacementEvent):
            return self._without_replacement_pair(event)
        return None

    def _without_replacement_pair(self, event: SampledWithoutReplacementEvent) -> _Pair | None:
        # Replace-one only (the sample size reveals the data size under add/remove).
        inner = event.event
        if self.neighbours is not NeighbourRelation.REPLACE_ONE:
            return None
        if getattr(inner, "neighbours", None) is not self.neighbours:
            return None
        q = event.sample_size / event.source_size
        base: _Pair | None = None
        if isinstance(inner, GaussianEvent):
            if q == 1.0:
                return _gaussian_pair(inner.noise_multiplier)
            base = _subsampled_gaussian_pair(q, inner.noise_multiplier, remove=True)
        elif isinstance(inner, LaplaceEvent):
            if q == 1.0:
                return _laplace_pair(inner.noise_multiplier)
            base = _subsampled_laplace_pair(q, inner.noise_multiplier, remove=True)
        else:
            inner_atoms = self._atoms(inner, coarse=True)
            if inner_atoms is None:
                return None
            if q == 1.0:
                return self._atoms(inner)
            base = _subsampled_atoms_pair(q, inner_atoms, remove=True)
        return _symmetrised_pair(base)

    @staticmethod
    def _atoms(event: PrivacyEvent, *, coarse: bool = False) -> _Pair | None:
        # ``coarse``: the subsampling of atoms needs atoms, so a large-sigma discrete Gaussian is
        # given its coarse (pessimistic) atoms; alone it keeps the tighter pair through its tails.
        pair: _Pair | None = None
        if isinstance(event, PureDPEvent):
            pair = _randomized_response_pair(event.epsilon, 2)
        elif isinstance(event, RandomizedResponseEvent):
            pair = _randomized_response_pair(event.epsilon, event.k)
        elif isinstance(event, ApproxDPEvent):
            pair = _approx_dp_pair(event.epsilon, event.delta)
        elif isinstance(event, DiscreteLaplaceEvent):
            pair = _discrete_laplace_pair(event.scale, event.sensitivity)
        elif isinstance(event, DiscreteGaussianEvent):
            if float(event.sensitivity) != int(event.sensitivity):
                return None
            if coarse and event.sigma >= _SUMMED_SIGMA_LIMIT:
                pair = _coarse_discrete_gaussian_pair(event.sigma, int(event.sensitivity))
            else:
                pair = _discrete_gaussian_pair(event.sigma, int(event.sensitivity))
        if pair is None:
            return None
        return pair

    @staticmethod
    def _asymmetric(event: PrivacyEvent) -> bool:
        return isinstance(event, PoissonSampledEvent) and event.sampling_probability < 1.0

    # -- PrivacyAccountant --------------------------------------------------------------------

    def supports(self, event: PrivacyEvent) -> bool:
        """Whether :meth:`compose` would accept ``event``: an event it can interpret, on a grid of
        at most ``_MAX_GRID_POINTS`` points at this ``discretization`` (with what is composed)."""
        return self._interprets(event) and self._too_fine(event) is None

    def _interprets(self, event: PrivacyEvent) -> bool:
        """:meth:`PrivacyAccountant.supports` without the grid's size: whether the events can be
        put on some grid (the base class's recursion would call :meth:`supports` on the parts,
        and refuse a too fine grid as an unsupported event)."""
        if isinstance(event, ComposedEvent):
            return all(self._interprets(part) for part in event.events)
        if isinstance(event, SelfComposedEvent):
            return self._interprets(event.event)
        if not isinstance(event, PrivacyEvent) or not self._same_relation(event):
            return False
        return self._supports_atomic(event)

    def compose(self, event: PrivacyEvent, count: int = 1) -> Self:
        """Record ``count`` runs of ``event``; refuse it, unchanged, if it is not supported.

        An event whose privacy-loss distribution would need more than ``_MAX_GRID_POINTS`` grid
        points raises :class:`InvalidParameterError` naming ``discretization``, before anything
        of the grid's size is allocated; a group event without an exact PLD form raises
        :class:`UnsupportedEventError` saying which group events are supported.
        """
        repeats = check_integer("count", count, minimum=1)
        if self._interprets(event):
            too_fine = self._too_fine(event)
            if too_fine is not None:
                raise _too_fine_error(self.discretization, too_fine[1], too_fine[0])
        else:
            reason = _ungroupable(event)
            if reason is not None:
                raise UnsupportedEventError(f"{type(self).__name__} cannot account for {event!r}: {reason}")
        return super().compose(event, repeats)

    def _too_fine(self, event: PrivacyEvent) -> tuple[PrivacyEvent, int] | None:
        """The first event that composing ``event`` would put on a grid of more than
        ``_MAX_GRID_POINTS`` points, with that number; None if there is none.

        Plain Gaussians are answered without a grid while nothing else is composed, so they are
        counted only once something else is (then the ones already composed are counted too).
        """
        events = _atomic_events(event)
        mixed = bool(self._pending) or self._state is not None
        mixed = mixed or any(_plain_gaussian(atomic) is None for atomic in events)
        if not mixed:
            return None
        for atomic in [*events, *self._gaussians]:
            points = self._event_grid_points(atomic)
            if points > _MAX_GRID_POINTS:
                return atomic, points
        return None

    def _event_grid_points(self, event: PrivacyEvent) -> int:
        """The grid points ``event`` needs in either direction (0 if it has no pair: refused elsewhere)."""
        if event not in self._points:
            try:
                pairs = [self._pair(event, remove) for remove in (True, False)]
                self._points[event] = max(
                    _grid_points(pair, self.discretization, self.tail_mass) for pair in pairs if pair is not None
                )
            except (ValueError, OverflowError):  # (max of nothing; losses too large: refused elsewhere)
                self._points[event] = 0
        return self._points[event]

    def _supports_atomic(self, event: PrivacyEvent) -> bool:
        if isinstance(event, GroupEvent):
            # What the group sees, where that is exact (see _grouped); checked like any event.
            grouped = _grouped(event.event, event.size)
            return grouped is not None and self._interprets(grouped)
        # An event whose losses exceed _MAX_LOSS (or whose e^eps overflows) cannot be put on the
        # grid: refuse it here, leaving the state unchanged, rather than fail at query time.
        try:
            pairs = [self._pair(event, remove) for remove in (True, False)]
            return all(pair is not None and _loss_reach(pair, self.tail_mass) <= _MAX_LOSS for pair in pairs)
        except (OverflowError, InvalidParameterError):
            return False

    def _compose_atomic(self, event: PrivacyEvent, count: int) -> None:
        if isinstance(event, GroupEvent):
            grouped = _grouped(event.event, event.size)
            if grouped is None:
                raise InternalError(f"supported group event {event!r} has no grouped form")
            for atomic, times in _flatten(grouped, count):
                self._compose_atomic(atomic, times)
            return
        # Composition commutes: group repeats of one event and convolve lazily, at query time.
        if _plain_gaussian(event) is not None:
            self._gaussians[event] = self._gaussians.get(event, 0) + count
        else:
            self._pending[event] = self._pending.get(event, 0) + count

    def _gaussian_mu(self) -> float:
        """mu of the one Gaussian that all plain Gaussian runs compose to, rounded up (0.0 if none).

        Gaussians of noise multipliers sigma_i compose to the Gaussian with mu^2 = sum_i c_i /
        sigma_i^2 exactly (Dong, Roth & Su 2022, Cor. 3.3: their privacy losses are normal,
        N(mu_i^2 / 2, mu_i^2), and add). A larger mu only raises delta at every epsilon, so mu is
        rounded up: each c / sigma^2 (two roundings, and the count's) is moved up by a relative
        8u and one ulp, math.fsum (correctly rounded) and the square root (correctly rounded)
        by one ulp each: about 1e-15 above the exact value in all.
        """
        if not self._gaussians:
            return 0.0
        sigmas = {event: _plain_gaussian(event) or math.inf for event in self._gaussians}
        if max(self._gaussians.values()) > 2**900:
            # Counts beyond float range (10**400 raised OverflowError): sum in logs, scaled by the
            # largest term, and round up by a relative 1e-12, far above these few roundings.
            logs = [math.log(count) - 2 * math.log(sigmas[event]) for event, count in self._gaussians.items()]
            top = max(logs)
            log_mu = (top + math.log(math.fsum(math.exp(x - top) for x in logs))) / 2
            return math.exp(log_mu) * (1 + 1e-12) if log_mu < 709 else math.inf
        terms = [
            math.nextafter(float(count) / (sigmas[event] * sigmas[event]) * (1 + 8 * _UNIT_ROUNDOFF), math.inf)
            for event, count in self._gaussians.items()
        ]
        return math.nextafter(math.sqrt(math.nextafter(math.fsum(terms), math.inf)), math.inf)

    def _single(self, event: PrivacyEvent, remove: bool) -> _Pld:
        key = (event, remove)
        if key not in self._cache:
            pair = self._pair(event, remove)
            if pair is None:
                raise InternalError(f"supported event {event!r} has no pair")
            # (compose refuses such grids; plain Gaussians, answered without one, reach here from
            # loss_distribution)
            points = _grid_points(pair, self.discretization, self.tail_mass)
            if points > _MAX_GRID_POINTS:
                raise _too_fine_error(self.discretization, points, event)
            self._cache[key] = _discretise(pair, self.discretization, self.tail_mass, self.pessimistic)
        return self._cache[key]

    def _materialise(self) -> tuple[_Pld, _Pld | None]:
        """The composed PLDs (remove, add or None if identical) of everything composed so far."""
        if self._only_gaussians():
            # (the answers read the exact profile; this grid distribution, not kept, bounds it)
            return self._compose(self._gaussians, None)
        if self._gaussians:
            for event, count in self._gaussians.items():
                self._pending[event] = self._pending.get(event, 0) + count
            self._gaussians = {}
        if self._pending:
            self._state = self._compose(self._pending, self._state)
            self._pending = {}
        if self._state is None:
            raise InternalError("nothing composed")
        return self._state

    def _compose(
        self, events: dict[PrivacyEvent, int], state: tuple[_Pld, _Pld | None] | None
    ) -> tuple[_Pld, _Pld | None]:
        """``events`` composed with ``state``, in each direction."""
        asymmetric = any(self._asymmetric(e) for e in events) or (state is not None and state[1] is not None)
        results: list[_Pld] = []
        for remove in (True, False) if asymmetric else (True,):
            parts = [(self._single(e, remove), c) for e, c in events.items()]
            if state is not None:
                previous = state[0] if remove or state[1] is None else state[1]
                parts.append((previous, 1))
            results.append(_compose_all(parts, self.discretization, self.tail_mass, self.pessimistic))
        return results[0], results[1] if asymmetric else None

    def _only_gaussians(self) -> bool:
        return not self._pending and self._state is None and bool(self._gaussians)

    def loss_distribution(self, direction: str = "remove") -> PrivacyLossDistribution:
        """Returns the **composed privacy-loss distribution** of everything composed so far.

        The pessimistic (certified, the default) or optimistic discretisation on the grid of step
        ``discretization``; see :class:`PrivacyLossDistribution` for the fields. Its hockey-stick
        divergence is exactly what :meth:`delta` and :meth:`epsilon` report (the larger over the
        two directions), except with only plain Gaussians composed: they are then answered by the
        merged Gaussian's exact profile, which this distribution bounds. ``direction``
        (``"remove"`` or ``"add"``) picks the neighbouring direction; the two coincide except for
        Poisson subsampling. With nothing composed the loss is 0.

        >>> import math
        >>> from dpkit.events import LaplaceEvent
        >>> accountant = PLDAccountant(discretization=1e-3).compose(LaplaceEvent(2.0), 3)
        >>> pld = accountant.loss_distribution()
        >>> abs(float(pld.probabilities.sum()) + pld.infinity_mass - 1.0) < 1e-6
        True
        >>> eps = 1.0  # the hockey-stick divergence gives the accountant's delta
        >>> hockey = float((pld.probabilities * -np.expm1(np.minimum(eps - pld.losses, 0.0))).sum())
        >>> math.isclose(hockey + pld.infinity_mass, accountant.delta(eps), rel_tol=1e-9)
        True
        """
        if direction not in ("remove", "add"):
            raise InvalidParameterError("direction", direction, "must be 'remove' or 'add'")
        h = self.discretization
        if not self._history:
            zero = np.ones(1, dtype=np.float64)
            pld = _Pld(0, zero, 0.0)
        else:
            remove, add = self._materialise()
            pld = remove if direction == "remove" or add is None else add
        losses = np.asarray((pld.start + np.arange(len(pld.probs))) * h, dtype=np.float64)
        probabilities = np.array(pld.probs, dtype=np.float64, copy=True)
        losses.flags.writeable = False
        probabilities.flags.writeable = False
        return PrivacyLossDistribution(h, losses, probabilities, float(pld.infinity), self.pessimistic, direction)

    def _allowance(self, pld: _Pld) -> float:
        # Pessimistic answers round the query's own sums outward (the FFT's rounding is already
        # counted at +inf, see _fft_rounding_bound).
        return _sum_allowance(pld) if self.pessimistic else 0.0

    def _delta(self, epsilon: float) -> float:
        if self._only_gaussians():
            # The composition is one Gaussian: its exact profile (Balle & Wang 2018, Thm. 8) at
            # 60 digits or more, rounded up (pessimistic) or to nearest.
            mu = self._gaussian_mu()
            if mu > _HUGE_MU:
                return 1.0
            exact = float(_mp_gaussian_delta(mu, epsilon))
            return min(1.0, math.nextafter(exact, math.inf) if self.pessimistic else exact)
        h = self.discretization
        return max(_delta_at(p, h, epsilon, self._allowance(p)) for p in self._materialise() if p is not None)

    def _epsilon(self, delta: float) -> float:
        if self._only_gaussians():
            mu = self._gaussian_mu()
            return math.inf if mu > _HUGE_MU else _gaussian_epsilon(mu, delta)
        h = self.discretization
        return max(_epsilon_at(p, h, delta, self._allowance(p)) for p in self._materialise() if p is not None)


def _plain_gaussian(event: PrivacyEvent) -> float | None:
    """The noise multiplier of an event whose pair is the plain Gaussian's (no subsampling), else None."""
    inner: PrivacyEvent | None = None
    if isinstance(event, GaussianEvent):
        return event.noise_multiplier
    if isinstance(event, PoissonSampledEvent) and event.sampling_probability == 1.0:
        inner = event.event
    elif isinstance(event, SampledWithoutReplacementEvent) and event.sample_size == event.source_size:
        inner = event.event
    return inner.noise_multiplier if isinstance(inner, GaussianEvent) else None


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """The smallest epsilon whose exact Gaussian delta (60-digit profile) is at most ``delta``."""
    if delta == 0.0:
        return math.inf
    if _mp_gaussian_delta(mu, 0.0) <= delta:
        return 0.0
    # gaussian_epsilon confirms its root in the same high-precision profile; its own test at 0
    # reads the profile in float, so an answer of 0 is stepped up (delta(0) > delta here).
    epsilon = gaussian_epsilon(mu, delta)
    step = 1e-300
    while _mp_gaussian_delta(mu, epsilon) > delta:
        epsilon, step = epsilon + step, step * 2.0
    return epsilon


_UNIT_ROUNDOFF = 2.0**-53

#: Above this mu (mu^2 / 2 > 2e308, beyond every float epsilon) the profile's first term is
#: Phi(mu / 2 - eps / mu) = 1 to float precision and the second is below e^-(1e150): delta is 1
#: (rounded up) at every epsilon and epsilon is inf at every delta < 1. (mpmath's erfc raises
#: OverflowError near mu = 1e155, a composition of 10**310 Gaussians.)
_HUGE_MU = 2e154
