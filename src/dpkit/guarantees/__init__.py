"""Privacy guarantees as values: ``PureDP``, ``ApproxDP``, ``ZCDP``, ``ApproxZCDP`` and the neighbour relations."""

from dpkit.guarantees._guarantees import (
    ZCDP,
    ApproxDP,
    ApproxZCDP,
    Guarantee,
    NeighbourRelation,
    PureDP,
    compose,
    round_up,
)

__all__ = ["ApproxDP", "ApproxZCDP", "Guarantee", "NeighbourRelation", "PureDP", "ZCDP", "compose", "round_up"]
