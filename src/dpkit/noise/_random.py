"""The one randomness seam.

Every noise draw in dpkit goes through a :class:`RandomSource`. The default is
:class:`SecureRandom`, the operating system's CSPRNG (``getrandom``/``urandom``).
:class:`InsecureSeededRandom` exists for tests and reproducible examples only: its name, its
``secure`` flag and its ``repr`` all say so, and nothing in dpkit picks it unless asked.
"""

from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError

__all__ = ["InsecureSeededRandom", "RandomSource", "SecureRandom", "default_source", "resolve_source"]


@runtime_checkable
class RandomSource(Protocol):
    """A stream of independent uniform 64-bit words."""

    secure: bool

    def uint64(self, size: int) -> NDArray[np.uint64]:
        """``size`` independent uniform words in [0, 2^64)."""
        ...


class SecureRandom:
    """Words from the operating system's cryptographically secure generator (the default)."""

    secure = True

    def uint64(self, size: int) -> NDArray[np.uint64]:
        if size <= 0:
            return np.empty(0, dtype=np.uint64)
        return np.frombuffer(os.urandom(8 * size), dtype=np.uint64)

    def __repr__(self) -> str:
        return "SecureRandom()"


class InsecureSeededRandom:
    """INSECURE: a seeded, reproducible stream (numpy PCG64) for tests and examples only.

    Outputs released with it are *not* private against an adversary who knows or can guess
    the seed. ``secure`` is False and results produced with it say so.
    """

    secure = False

    def __init__(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
            raise InvalidParameterError("seed", seed, "must be an integer")
        self.seed = int(seed)
        self._bits = np.random.PCG64(self.seed)

    def uint64(self, size: int) -> NDArray[np.uint64]:
        if size <= 0:
            return np.empty(0, dtype=np.uint64)
        return np.asarray(self._bits.random_raw(size), dtype=np.uint64)

    def __repr__(self) -> str:
        return f"InsecureSeededRandom(seed={self.seed})  # NOT for releases"


_DEFAULT = SecureRandom()


def default_source() -> SecureRandom:
    """The process-wide secure source used whenever no source is passed."""
    return _DEFAULT


def resolve_source(rng: RandomSource | None) -> RandomSource:
    """``rng`` if it is a dpkit source, the secure default if None; anything else is refused."""
    if rng is None:
        return _DEFAULT
    if isinstance(rng, SecureRandom | InsecureSeededRandom) or (
        isinstance(rng, RandomSource) and not isinstance(rng, np.random.Generator | np.random.RandomState)
    ):
        return rng
    raise InvalidParameterError(
        "rng",
        rng,
        "must be None (secure default), dpkit.noise.SecureRandom() or, for tests only, "
        "dpkit.noise.InsecureSeededRandom(seed); numpy generators are not accepted",
    )
