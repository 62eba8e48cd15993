"""Mechanisms: each turns a query of known sensitivity into a private release."""

from dpkit.mechanisms._base import Mechanism, NumericMechanism, guarantee_implies

__all__ = ["Mechanism", "NumericMechanism", "guarantee_implies"]
