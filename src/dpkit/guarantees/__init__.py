"""Privacy guarantees as values: ``PureDP``, ``ApproxDP``, ``ZCDP`` and the neighbour relations."""

from dpkit.guarantees._guarantees import (
    ZCDP,
    ApproxDP,
    Guarantee,
    NeighbourRelation,
    PureDP,
    compose,
    round_up,
)

__all__ = ["ApproxDP", "Guarantee", "NeighbourRelation", "PureDP", "ZCDP", "compose", "round_up"]
