"""The one randomness seam.

Every noise draw in dpkit goes through a :class:`RandomSource`. The default is
:class:`SecureRandom`, the operating system's CSPRNG (``getrandom``/``urandom``).
:class:`InsecureSeededRandom` exists for tests and reproducible examples only: its name, its
read-only ``secure`` flag and its ``repr`` all say so, and nothing in dpkit picks it unless asked.
"""

from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_integer

__all__ = ["InsecureSeededRandom", "RandomSource", "SecureRandom", "default_source", "resolve_source"]


@runtime_checkable
class RandomSource(Protocol):
    """A stream of independent uniform 64-bit words."""

    @property
    def secure(self) -> bool:
        """Whether the words come from a cryptographically secure generator."""
        ...

    def uint64(self, size: int) -> NDArray[np.uint64]:
        """``size`` independent uniform words in [0, 2^64)."""
        ...


class SecureRandom:
    """Words from the operating system's cryptographically secure generator (the default).

    It holds no state: copies and unpickled instances read the same OS generator, never a
    replayed stream.
    """

    __slots__ = ()

    @property
    def secure(self) -> bool:
        return True

    def uint64(self, size: int) -> NDArray[np.uint64]:
        n = check_integer("size", size)  # not a bool, float or text (True once gave one word)
        if n <= 0:
            return np.empty(0, dtype=np.uint64)
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)

    def __repr__(self) -> str:
        return "SecureRandom()"


class InsecureSeededRandom:
    """INSECURE: a seeded, reproducible stream (numpy PCG64) for tests and examples only.

    Outputs released with it are *not* private against an adversary who knows or can guess
    the seed. ``secure`` is False (read-only) and the ``repr`` says "NOT for releases".
    """

    __slots__ = ("_bits", "seed")

    def __init__(self, seed: int) -> None:
        self.seed = check_integer("seed", seed, minimum=0)
        self._bits = np.random.PCG64(self.seed)

    @property
    def secure(self) -> bool:
        return False

    def uint64(self, size: int) -> NDArray[np.uint64]:
        n = check_integer("size", size)  # not a bool, float or text (True once gave one word)
        if n <= 0:
            return np.empty(0, dtype=np.uint64)
        return np.asarray(self._bits.random_raw(n), dtype=np.uint64)

    def __repr__(self) -> str:
        return f"InsecureSeededRandom(seed={self.seed})  # NOT for releases"


class _CheckedSource:
    """A caller's own source, with each answer checked: ``size`` uint64 words, nothing else.

    A source that returned floats or too few words was used silently (floats made
    ``uniform_integers`` all zeros and ``bernoulli_rational`` all True: not noise at all).
    """

    __slots__ = ("inner",)

    def __init__(self, inner: RandomSource) -> None:
        self.inner = inner

    @property
    def secure(self) -> bool:
        return bool(self.inner.secure)

    def uint64(self, size: int) -> NDArray[np.uint64]:
        n = check_integer("size", size)
        if n <= 0:
            return np.empty(0, dtype=np.uint64)
        words = self.inner.uint64(n)
        if not isinstance(words, np.ndarray) or words.dtype != np.uint64 or words.shape != (n,):
            got = f"{type(words).__name__} {getattr(words, 'dtype', '')} {getattr(words, 'shape', '')}".strip()
            raise InvalidParameterError(
                "rng", self.inner, f"uint64({n}) must return a numpy uint64 array of shape ({n},); it returned {got}"
            )
        return words

    def __repr__(self) -> str:
        return repr(self.inner)


_DEFAULT = SecureRandom()


def default_source() -> SecureRandom:
    """The process-wide secure source used whenever no source is passed."""
    return _DEFAULT


def resolve_source(rng: RandomSource | None) -> RandomSource:
    """``rng`` if it is a dpkit source, the secure default if None; anything else is refused.

    A source of the caller's own (any object with ``secure`` and ``uint64(size)``) comes back
    wrapped so that each of its answers is checked.
    """
    if rng is None:
        return _DEFAULT
    if isinstance(rng, SecureRandom | InsecureSeededRandom | _CheckedSource):
        return rng
    if (
        not isinstance(rng, type)
        and isinstance(rng, RandomSource)
        and not isinstance(rng, np.random.Generator | np.random.RandomState)
    ):
        return _CheckedSource(rng)
    hint = " (a class was given: pass an instance, e.g. SecureRandom())" if isinstance(rng, type) else ""
    raise InvalidParameterError(
        "rng",
        rng,
        "must be None (secure default), dpkit.noise.SecureRandom() or, for tests only, "
        f"dpkit.noise.InsecureSeededRandom(seed); numpy generators are not accepted{hint}",
    )
