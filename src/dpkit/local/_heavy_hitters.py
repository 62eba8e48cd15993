"""Heavy hitters over a large domain (up to 2^32) by prefix extension with local hashing.

PEM, the prefix extending method (Wang, Li, Jha et al. 2021, "Locally Differentially Private Heavy
Hitter Identification", IEEE TDSC; after Bassily, Nissim, Stemmer & Thakurta 2017): people are split
at random (independently of their data) into L groups; group j reports the first t_j bits of its
value, t_j = first_bits + j * bits_per_level (the last level is the whole value), through local
hashing. The collector estimates the frequencies of the 2^first_bits prefixes at level 0, keeps the
best candidates, extends each by bits_per_level bits, and continues to the full value.

Local hashing here hashes a prefix x < 2^32, written as two 16-bit halves (x_hi, x_lo), with
h(x) = ((a1 x_hi + a2 x_lo + b) mod P) mod g, P = 65537 prime, (a1, a2, b) uniform in Z_P^3 per person
(exact draws): a pairwise-independent family, so every pair x != x' collides with probability exactly
c = sum_j m_j^2 / P^2, and the k-RR-over-buckets estimator is exactly unbiased. A report is
(level, a1, a2, b, bucket): five small integers whatever the domain size. Each person sends one
report: eps-LDP.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit._validation import as_fraction, check_epsilon, check_integer, warn_if_risky
from dpkit.guarantees import NeighbourRelation, PureDP
from dpkit.local._frequency import LocalReports, _check_report_range, _one_value_per_person
from dpkit.mechanisms.randomized_response import RandomizedResponse
from dpkit.noise import RandomSource, resolve_source, uniform_integers

__all__ = ["HeavyHitterResult", "HeavyHitters"]

_PRIME = 65537


@dataclass(frozen=True)
class HeavyHitterResult:
    """Values found (largest estimated count first) and their estimated counts."""

    values: NDArray[np.int64]
    counts: NDArray[np.float64]


class HeavyHitters:
    """Prefix-extension heavy hitters (PEM) over values in 0 .. 2^domain_bits - 1.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> hh = HeavyHitters(32, 4.0, first_bits=8, bits_per_level=8)
    >>> hh.prefix_lengths
    (8, 16, 24, 32)
    >>> rng = np.random.default_rng(5)
    >>> values = np.where(rng.random(40_000) < 0.5, 123_456_789, rng.integers(0, 2**32, 40_000))
    >>> reports = hh.randomize(values, rng=InsecureSeededRandom(0))
    >>> reports.data.shape
    (40000, 5)
    >>> int(hh.estimate(reports, top_k=1).values[0])
    123456789
    """

    name = "HeavyHitters"

    def __init__(
        self, domain_bits: int, epsilon: float, *, first_bits: int = 8, bits_per_level: int = 4, g: int | None = None
    ) -> None:
        self._bits = check_integer("domain_bits", domain_bits, minimum=1)
        if self._bits > 32:
            raise InvalidParameterError("domain_bits", domain_bits, "must be at most 32")
        self._epsilon = check_epsilon(epsilon)
        warn_if_risky(self._epsilon)
        first = min(check_integer("first_bits", first_bits, minimum=1), self._bits)
        step = check_integer("bits_per_level", bits_per_level, minimum=1)
        if first > 16:  # 2^first_bits candidates are scored at the first level
            raise InvalidParameterError("first_bits", first_bits, "must be at most 16")
        if step > 12:  # each kept prefix is extended into 2^bits_per_level candidates
            raise InvalidParameterError("bits_per_level", bits_per_level, "must be at most 12")
        lengths = list(range(first, self._bits, step)) + [self._bits]
        self._lengths = tuple(sorted(set(lengths)))
        if g is None:  # round(e^eps) + 1 buckets, at most P (more buckets than residues add nothing)
            self._g = _PRIME if self._epsilon >= math.log(_PRIME) else max(2, round(math.exp(self._epsilon)) + 1)
        else:
            self._g = check_integer("g", g, minimum=2)
        if self._g > _PRIME:
            raise InvalidParameterError("g", g, f"must be at most {_PRIME}")
        self._rr = RandomizedResponse(self._epsilon, k=self._g)
        sizes = np.bincount(np.arange(_PRIME) % self._g, minlength=self._g).astype(np.float64)
        collision = float(np.sum(sizes * sizes)) / _PRIME**2
        self._p = self._rr.keep_probability
        self._q = collision * self._p + (1 - collision) * (1 - self._p) / (self._g - 1)

    @property
    def prefix_lengths(self) -> tuple[int, ...]:
        return self._lengths

    @property
    def guarantee(self) -> PureDP:
        """eps-LDP for one person's report (REPLACE_ONE)."""
        return PureDP(as_fraction(self._epsilon), NeighbourRelation.REPLACE_ONE)  # type: ignore[arg-type]

    def _parameters(self) -> tuple[Any, ...]:
        return (self._bits, self._epsilon, self._lengths, self._g)

    def hash(self, a1: Any, a2: Any, b: Any, prefixes: Any) -> NDArray[np.int64]:
        x = np.asarray(prefixes, dtype=np.int64)
        return ((a1 * (x >> 16) + a2 * (x & 0xFFFF) + b) % _PRIME) % self._g

    def randomize(self, values: Any, rng: RandomSource | None = None) -> LocalReports:
        """One report (level, a1, a2, b, bucket) per value in 0 .. 2^domain_bits - 1."""
        allowed = f"must be integers in 0..2**{self._bits} - 1"
        array = _one_value_per_person("values", values, allowed)
        if array.dtype.kind not in "iu" or isinstance(values, bool | np.bool_):
            raise InvalidParameterError("values", values, allowed)
        array = array.astype(np.int64)
        if array.size and (array.min() < 0 or array.max() >= 2**self._bits):
            raise InvalidParameterError("values", values, allowed)
        source = resolve_source(rng)
        n = array.size
        level = uniform_integers(len(self._lengths), n, rng=source)
        shift = self._bits - np.asarray(self._lengths, dtype=np.int64)[level]
        seeds = [uniform_integers(_PRIME, n, rng=source) for _ in range(3)]
        hashed = self.hash(seeds[0], seeds[1], seeds[2], array >> shift)
        bucket = np.asarray(self._rr.release(hashed, rng=source), dtype=np.int64)
        return LocalReports(self.name, self._parameters(), np.stack([level, *seeds, bucket], axis=1))

    def _level_counts(self, group: NDArray[np.int64], candidates: NDArray[np.int64], n: int) -> NDArray[np.float64]:
        support = np.zeros(candidates.size, dtype=np.int64)
        chunk = max(1, 2**22 // max(1, candidates.size))
        for start in range(0, group.shape[0], chunk):
            part = group[start : start + chunk]
            hashed = self.hash(part[:, 1:2], part[:, 2:3], part[:, 3:4], candidates[None, :])
            support += np.count_nonzero(hashed == part[:, 4:5], axis=0)
        size = group.shape[0]
        return (support - size * self._q) / (self._p - self._q) * (n / size)

    def estimate(self, reports: LocalReports, top_k: int = 10, threshold: float | None = None) -> HeavyHitterResult:
        """The ``top_k`` values with the largest estimated counts (and above ``threshold``, a count).

        At each level the best 2 * top_k prefixes are kept and extended.
        """
        if not isinstance(reports, LocalReports) or reports.oracle != self.name:
            raise InvalidParameterError("reports", type(reports).__name__, f"must be LocalReports from {self!r}")
        if reports.parameters != self._parameters():
            raise InvalidParameterError("reports", reports.parameters, f"must come from {self!r}")
        data = reports.data
        if data.ndim != 2 or data.shape[1] != 5 or data.shape[0] == 0:
            raise InvalidParameterError("reports", data.shape, "must be a non-empty (n, 5) array")
        # A row outside the output domain would be counted in n but in no level: refused, not decoded.
        levels = len(self._lengths)
        data = _check_report_range(
            data,
            0,
            np.array([levels, _PRIME, _PRIME, _PRIME, self._g]),
            f"integer (level, a1, a2, b, bucket) with level < {levels}, seeds < {_PRIME}, bucket < {self._g}",
        )
        keep = check_integer("top_k", top_k, minimum=1)
        if threshold is not None and (
            isinstance(threshold, bool | np.bool_) or not isinstance(threshold, numbers.Real) or math.isnan(threshold)
        ):
            raise InvalidParameterError("threshold", threshold, "must be None or a real number (a count)")
        n = data.shape[0]
        candidates = np.arange(2 ** self._lengths[0], dtype=np.int64)
        counts = np.zeros(0)
        for level, length in enumerate(self._lengths):
            if level > 0:
                extra = length - self._lengths[level - 1]
                candidates = (candidates[:, None] << extra | np.arange(2**extra)[None, :]).ravel()
            group = data[data[:, 0] == level]
            if group.shape[0] == 0:
                raise InvalidParameterError("reports", n, f"hold no report for level {level}: too few reports")
            counts = self._level_counts(group, candidates, n)
            order = np.argsort(-counts, kind="stable")
            width = keep if level == len(self._lengths) - 1 else 2 * keep
            order = order[:width]
            if threshold is not None and level == len(self._lengths) - 1:
                order = order[counts[order] >= threshold]
            candidates, counts = candidates[order], counts[order]
        return HeavyHitterResult(candidates, counts)

    def __repr__(self) -> str:
        return f"HeavyHitters(domain_bits={self._bits}, epsilon={self._epsilon}, prefix_lengths={self._lengths})"
