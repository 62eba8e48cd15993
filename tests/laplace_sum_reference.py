"""mpmath reference for |S_k|, S_k a sum of k independent standard Laplace variables (importable:
pytest's pythonpath): a mixture of gamma laws, |S_k| ~ sum_j w_j Gamma(k - j, 1), used by the risk tests.

Evaluate inside the caller's mpmath precision (``mp_precision.precision``)."""

from __future__ import annotations

from typing import Any

from mpmath import mp


def mixture_weights(k: int) -> list[Any]:
    """w_j = C(k - 1 + j, j) 2^-(k - 1 + j), j = 0 .. k - 1: the gamma mixture's weights."""
    return [mp.binomial(k - 1 + j, j) * mp.mpf(2) ** (-(k - 1 + j)) for j in range(k)]


def laplace_sum_cdf(x: Any, k: int) -> Any:
    """F_k(x) = P[|S_k| <= x]."""
    return mp.fsum(w * mp.gammainc(k - j, 0, mp.mpf(x), regularized=True) for j, w in enumerate(mixture_weights(k)))


def laplace_sum_sf(x: Any, k: int) -> Any:
    """1 - F_k(x) = P[|S_k| > x], without cancellation."""
    return mp.fsum(
        w * mp.gammainc(k - j, mp.mpf(x), mp.inf, regularized=True) for j, w in enumerate(mixture_weights(k))
    )
