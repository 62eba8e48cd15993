"""Empirical privacy auditing: lower bounds on epsilon and floating-point leak checks."""

from dpkit.audit._estimate import AuditResult, LowBitResult, estimate_epsilon, low_bit_test, on_grid

__all__ = ["AuditResult", "LowBitResult", "estimate_epsilon", "low_bit_test", "on_grid"]
