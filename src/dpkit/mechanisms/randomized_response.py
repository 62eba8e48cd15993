"""Randomized response, binary and k-ary (k-RR), drawn exactly, with its unbiased frequency estimator.

k-RR as seed 000 defines it, over a domain of K categories: draw B ~ Bernoulli(K / (e^eps + K - 1));
if B = 0 report the true value x, else report a uniform element of the domain. The report is
x with probability e^eps / (e^eps + K - 1) and each other category with probability
1 / (e^eps + K - 1), a ratio of e^eps: (epsilon, 0)-local DP (seed 000, Thm.; Warner 1965 for
K = 2; Kairouz, Oh & Viswanath 2014 / Wang et al. 2017 "Locally differentially private
protocols for frequency estimation" for k-RR).

Exactness: the keep probability 1 / (1 + (K - 1) e^-eps) is irrational. It is drawn by comparing
a uniform U (64 bits at a time, extended lazily) with that threshold bracketed by mpmath interval
arithmetic, so the decision is exactly U < threshold. The other category is an exact uniform
choice among the K - 1 others (:func:`dpkit.noise.uniform_integers`). The released law is
therefore exactly the one :meth:`RandomizedResponse.output_probabilities` reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit._validation import as_fraction, check_epsilon, check_integer, check_positive, warn_if_risky
from dpkit.events import RandomizedResponseEvent
from dpkit.guarantees import NeighbourRelation, PureDP
from dpkit.mechanisms._base import Mechanism
from dpkit.noise import RandomSource, bernoulli_logistic, resolve_source, uniform_integers

__all__ = ["RandomizedResponse", "bernoulli_keep"]

_DOMAIN_RULE = "must be a sequence of at least 2 distinct labels"


def bernoulli_keep(
    epsilon: float | Fraction, k: int, size: int, *, rng: RandomSource | None = None
) -> NDArray[np.bool_]:
    """Exact Bernoulli(e^eps / (e^eps + k - 1)) trials: the "report the truth" coin of k-RR.

    Each trial compares a uniform U, known first by one 64-bit word w (U in [w, w+1) 2^-64), with
    the threshold's rigorous bounds [lo, hi]; only words with lo <= (w or w+1) 2^-64 <= hi (about
    2^-60 of them) draw more bits. ``epsilon`` is taken as the decimal the user typed (0.1 is 1/10).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> bernoulli_keep(1.0, 2, 8, rng=InsecureSeededRandom(0)).astype(int).tolist()
    [1, 1, 1, 1, 0, 0, 1, 1]
    """
    eps = epsilon if isinstance(epsilon, Fraction) else as_fraction(check_epsilon(epsilon))
    categories = check_integer("k", k, minimum=2)
    n = check_integer("size", size, minimum=0)
    return bernoulli_logistic(eps, Fraction(categories - 1), n, rng=rng)


class RandomizedResponse(Mechanism):
    """k-ary randomized response (seed 000's K-RR): epsilon-local DP for one person's categorical value.

    Reports the true category with probability e^eps / (e^eps + K - 1), otherwise a uniformly
    chosen *other* category (equivalently: with probability K / (e^eps + K - 1) a uniform
    category from the whole domain, as seed 000 writes it). Guarantee: ``PureDP(epsilon)``
    under ``NeighbourRelation.REPLACE_ONE`` (one person's value changed), i.e. epsilon-LDP.

    ``categories``: the labels of the domain (default ``(False, True)``: binary randomized
    response, Warner 1965), any distinct hashable values, or ``k``: the domain is the indices
    0..k-1. ``release`` takes one value or an array/sequence of values (vectorized) and returns
    the same shape. A tuple that is a label is one value (``release((0, 1))`` with the label
    ``(0, 1)`` returns one label); a batch of tuple labels is a list of them, released as a 1-d
    object array.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> rr = RandomizedResponse(epsilon=1.0, categories=["a", "b", "c"])
    >>> rr.guarantee
    PureDP(epsilon=1.0, neighbours=NeighbourRelation.REPLACE_ONE)
    >>> rr.release(["a", "b", "c", "a"], rng=InsecureSeededRandom(0)).tolist()
    ['c', 'b', 'c', 'a']
    >>> round(rr.estimator_variance(1000), 6)
    0.001259
    """

    def __init__(self, epsilon: float, categories: Sequence[Any] | None = None, *, k: int | None = None) -> None:
        self._epsilon = check_epsilon(epsilon)
        if k is not None and categories is not None:
            raise InvalidParameterError("k", k, "give either categories or k, not both")
        if k is not None:
            self._k = check_integer("k", k, minimum=2)
            self._labels: tuple[Any, ...] | None = None
        else:
            labels = (False, True) if categories is None else categories
            if isinstance(labels, str | bytes) or not isinstance(labels, Sequence | np.ndarray):
                raise InvalidParameterError("categories", categories, _DOMAIN_RULE)
            self._labels = tuple(labels)
            try:
                distinct = len(set(self._labels)) == len(self._labels)
            except TypeError as exc:
                raise InvalidParameterError("categories", categories, "labels must be hashable") from exc
            if len(self._labels) < 2 or not distinct:
                raise InvalidParameterError("categories", categories, _DOMAIN_RULE)
            self._k = len(self._labels)
        warn_if_risky(self._epsilon)
        self._epsilon_exact = as_fraction(self._epsilon)
        self._index = None if self._labels is None else {label: i for i, label in enumerate(self._labels)}
        # Tuple labels (hashable, so accepted) need their own reading of a batch: see _flatten.
        self._tuple_labels = self._labels is not None and any(isinstance(label, tuple) for label in self._labels)

    # -- parameters --------------------------------------------------------------------------

    @property
    def epsilon(self) -> float:
        return self._epsilon

    @property
    def k(self) -> int:
        return self._k

    @property
    def categories(self) -> tuple[Any, ...]:
        return self._labels if self._labels is not None else tuple(range(self._k))

    @property
    def keep_probability(self) -> float:
        """P(report = true value) = e^eps / (e^eps + K - 1)."""
        return 1.0 / (1.0 + (self._k - 1) * math.exp(-self._epsilon))

    @property
    def other_probability(self) -> float:
        """P(report = a given other value) = 1 / (e^eps + K - 1)."""
        return math.exp(-self._epsilon) / (1.0 + (self._k - 1) * math.exp(-self._epsilon))

    # -- privacy -----------------------------------------------------------------------------

    @property
    def guarantee(self) -> PureDP:
        return PureDP(self._epsilon_exact, NeighbourRelation.REPLACE_ONE)  # type: ignore[arg-type]

    def privacy_map(self, d_in: float) -> PureDP:
        """ceil(d_in) * epsilon: d_in people's values replaced (group privacy for independent reports)."""
        distance = check_positive("d_in", d_in)
        return PureDP(self._epsilon_exact * math.ceil(distance), NeighbourRelation.REPLACE_ONE)  # type: ignore[arg-type]

    @property
    def event(self) -> RandomizedResponseEvent:
        return RandomizedResponseEvent(self._epsilon, self._k)

    # -- values <-> indices ------------------------------------------------------------------

    def _indices(self, name: str, values: Any) -> tuple[NDArray[np.int64], tuple[int, ...], bool]:
        """Category indices of ``values``, their shape, and whether a single value was given."""
        if values is None:
            raise InvalidParameterError(name, values, "must be a category or an array of categories")
        if self._index is None:
            array = np.asarray(values)
            if array.size == 0 and array.dtype.kind == "f":
                array = array.astype(np.int64)  # an empty list is an empty batch, as with labels
            if array.dtype.kind not in "iu" or isinstance(values, bool | np.bool_):
                raise InvalidParameterError(name, values, f"must be integer category indices in 0..{self._k - 1}")
            if np.any(array < 0) or np.any(array >= self._k):
                raise InvalidParameterError(name, values, f"must be integer category indices in 0..{self._k - 1}")
            return array.astype(np.int64).reshape(-1), array.shape, array.ndim == 0
        if self._tuple_labels:
            flat, shape = self._flatten(name, values)
            single = shape == ()
        else:
            single = not isinstance(values, list | tuple | np.ndarray)
            flat = [values] if single else list(np.asarray(values, dtype=object).reshape(-1))
            shape = () if single else np.asarray(values, dtype=object).shape
        out = np.empty(len(flat), dtype=np.int64)
        for i, value in enumerate(flat):
            index = self._lookup(value)
            if index is None:
                raise InvalidParameterError(name, value, f"must be one of the categories {self._labels!r}")
            out[i] = index
        return out, shape, single

    def _flatten(self, name: str, values: Any) -> tuple[list[Any], tuple[int, ...]]:
        """The labels in ``values`` and their shape, when some labels are tuples.

        numpy would read a tuple label as a sequence of values, so the batch is walked by hand: a
        value that is a label is one value (even a tuple), a list, tuple or array of them is a batch.
        """
        if self._lookup(values) is not None or not isinstance(values, list | tuple | np.ndarray):
            return [values], ()
        parts = [self._flatten(name, item) for item in values]
        shapes = {shape for _flat, shape in parts}
        if len(shapes) > 1:
            raise InvalidParameterError(name, values, "must be a label or a regular array of labels")
        inner = shapes.pop() if shapes else ()
        return [label for flat, _shape in parts for label in flat], (len(parts), *inner)

    def _lookup(self, value: Any) -> int | None:
        assert self._index is not None
        # Keep True/1 and False/0 apart: a label matches only a value of a compatible type.
        if isinstance(value, np.generic):
            value = value.item()
        try:
            index = self._index.get(value)
        except TypeError:
            return None
        if index is None:
            return None
        label = self._labels[index]  # type: ignore[index]
        if isinstance(label, bool) != isinstance(value, bool):
            return None
        return index

    def _labels_of(self, indices: NDArray[np.int64], shape: tuple[int, ...], single: bool) -> Any:
        if self._labels is None:
            return int(indices[0]) if single else indices.reshape(shape)
        if single:
            return self._labels[int(indices[0])]
        out = np.empty(indices.size, dtype=object)
        for i, index in enumerate(indices):
            out[i] = self._labels[int(index)]
        try:
            typed = np.array(out.tolist())
            if typed.dtype != object and typed.shape == out.shape:
                return typed.reshape(shape)
        except (TypeError, ValueError):
            pass
        return out.reshape(shape)

    # -- release -----------------------------------------------------------------------------

    def release(self, value: Any, *, rng: RandomSource | None = None) -> Any:
        """Randomized reports: one per value (a label, or an array of labels of the same shape)."""
        indices, shape, single = self._indices("value", value)
        source = resolve_source(rng)
        keep = bernoulli_keep(self._epsilon_exact, self._k, indices.size, rng=source)
        changed = np.flatnonzero(~keep)
        # Uniform among the K - 1 other categories: draw j in 0..K-2 and skip the true one.
        others = uniform_integers(self._k - 1, changed.size, rng=source)
        reports = indices.copy()
        reports[changed] = others + (others >= indices[changed])
        return self._labels_of(reports, shape, single)

    def output_probabilities(self, value: Any = None) -> NDArray[np.float64]:
        """P(report = j | value = i): the K x K matrix (row i), or the row for ``value``.

        Diagonal e^eps / (e^eps + K - 1), elsewhere 1 / (e^eps + K - 1) (floats, for tests).
        """
        matrix = np.full((self._k, self._k), self.other_probability)
        np.fill_diagonal(matrix, self.keep_probability)
        if value is None:
            return matrix
        indices, _shape, single = self._indices("value", value)
        if not single:
            raise InvalidParameterError("value", value, "must be a single category")
        return matrix[int(indices[0])]

    # -- estimation --------------------------------------------------------------------------

    def estimate_frequencies(self, reports: Any) -> NDArray[np.float64]:
        """Unbiased estimates of the true category frequencies h_1..h_K from m reports (seed 000).

        With f_k the observed frequency of category k and p = (e^eps - 1)/(e^eps + K - 1),
        E f_k = p h_k + (1 - p)/K, so h_k = (f_k - (1 - p)/K) / p
        = (e^eps + K - 1)/(e^eps - 1) (f_k - 1/(e^eps + K - 1)). (Seed 000 prints the
        denominator as p - (1 - p)/K; its right-hand closed form, used here, is the unbiased one.)
        Estimates can be negative; they sum to 1.
        """
        indices, _shape, single = self._indices("reports", reports)
        if single or indices.size == 0:
            raise InvalidParameterError("reports", reports, "must be a non-empty array of reports")
        frequencies = np.bincount(indices, minlength=self._k) / indices.size
        # The same in u = e^-eps (no overflow for large epsilon): (1 + (K-1) u)/(1 - u) (f_k - u/(1 + (K-1) u)).
        u = math.exp(-self._epsilon)
        spread = 1.0 + (self._k - 1) * u
        return spread / -math.expm1(-self._epsilon) * (frequencies - u / spread)

    def estimator_variance(self, m: int, true_frequency: Any = None) -> Any:
        """Variance of one estimate h_k from m reports.

        With ``true_frequency`` h (a number or array in [0, 1]), the exact variance over the
        mechanism's randomness: Var = [h q(1 - q) + (1 - h) r(1 - r)] / (m p^2), with
        q = e^eps/(e^eps+K-1), r = 1/(e^eps+K-1), p = q - r, which simplifies to
            (K - 2 + e^eps) / (m (e^eps - 1)^2) + h (K - 2) / (m (e^eps - 1)).
        Without it, seed 000's formula (K - 2 + e^eps) / (m (e^eps - 1)^2): the exact variance for
        a category of true frequency 0 (and for every category when K = 2), a lower bound otherwise.
        """
        count = check_integer("m", m, minimum=1)
        # In terms of u = e^-eps (numerator and denominator divided by e^{2 eps}), so that large
        # epsilons do not overflow: (e^eps - 1)^2 exceeds the float range from epsilon ~355 on.
        u = math.exp(-self._epsilon)
        one_minus_u = -math.expm1(-self._epsilon)
        base = ((self._k - 2) * u * u + u) / (count * one_minus_u**2)
        if true_frequency is None:
            return base
        h = np.asarray(true_frequency, dtype=np.float64)
        if not np.all(np.isfinite(h)) or np.any(h < 0) or np.any(h > 1):
            raise InvalidParameterError("true_frequency", true_frequency, "must be in [0, 1]")
        result = base + h * (self._k - 2) * u / (count * one_minus_u)
        return float(result) if h.ndim == 0 else result

    def __repr__(self) -> str:
        domain = f"k={self._k}" if self._labels is None else f"categories={self._labels!r}"
        return f"RandomizedResponse(epsilon={self._epsilon}, {domain})"
