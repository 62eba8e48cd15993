"""The base of every local randomizer: epsilon validated at construction, the eps-LDP guarantee."""

from __future__ import annotations

from dpkit._validation import as_fraction, check_epsilon, warn_if_risky
from dpkit.guarantees import NeighbourRelation, PureDP

__all__ = ["LocalRandomizer"]


class LocalRandomizer:
    """A randomizer each person runs on their own value: eps-LDP, i.e. PureDP(eps) under REPLACE_ONE."""

    def __init__(self, epsilon: float) -> None:
        self._epsilon = check_epsilon(epsilon)
        warn_if_risky(self._epsilon)
        self._epsilon_exact = as_fraction(self._epsilon)

    @property
    def epsilon(self) -> float:
        return self._epsilon

    @property
    def guarantee(self) -> PureDP:
        """eps-LDP: one person's report, for any two values of theirs (REPLACE_ONE)."""
        return PureDP(self._epsilon_exact, NeighbourRelation.REPLACE_ONE)  # type: ignore[arg-type]
