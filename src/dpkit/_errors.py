"""The dpkit error family.

Every error dpkit raises on purpose derives from :class:`DPError`; each child also
subclasses the builtin a caller would expect (``ValueError`` for bad parameters),
so ``except ValueError`` keeps working for code that does not know dpkit.
"""

from __future__ import annotations

__all__ = [
    "BudgetExceededError",
    "DPError",
    "InternalError",
    "InvalidParameterError",
    "LedgerCorruptedError",
    "PrivacyWarning",
    "QueryFailedError",
    "UnsupportedEventError",
]


class DPError(Exception):
    """Root of every error dpkit raises deliberately."""


class InvalidParameterError(DPError, ValueError):
    """A parameter or a data value is outside what is allowed.

    The message always names the parameter, the value received and what is allowed.
    """

    def __init__(self, name: str, value: object, allowed: str) -> None:
        self.name = name
        self.value = value
        self.allowed = allowed
        super().__init__(f"{name}: got {_short_repr(value)}; {allowed}")


def _short_repr(value: object, limit: int = 200) -> str:
    """repr(value), cut in the middle beyond ``limit`` characters (a long list or a huge int stays readable)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 60]}...{text[-40:]} ({len(text)} characters)"


class BudgetExceededError(DPError):
    """A spend was refused because it would exceed the remaining budget."""

    def __init__(self, requested: object, remaining: object, detail: str = "") -> None:
        self.requested = requested
        self.remaining = remaining
        message = f"privacy budget exceeded: requested {requested}, remaining {remaining}"
        super().__init__(message + (f" ({detail})" if detail else ""))


class UnsupportedEventError(DPError, TypeError):
    """An accountant or converter was given a privacy event it cannot interpret."""


class LedgerCorruptedError(DPError):
    """A persistent budget ledger failed its integrity check; it is never read as full budget."""


class InternalError(DPError, RuntimeError):
    """dpkit broke one of its own invariants: a bug to report, never a user error."""


class PrivacyWarning(UserWarning):
    """A legal but risky privacy setting (for example epsilon > 5, or delta >= 1/n)."""


class AccuracyWarning(UserWarning):
    """A release that is private as stated but less accurate than its parameters suggest (for
    example automatic bounds that reached the largest value they can take)."""


class QueryFailedError(DPError, RuntimeError):
    """A private query failed while running, after its cost was debited (the debit is kept).

    The backend's own message is withheld: it can quote the data (a value that failed to
    convert), and whether and how a query fails must not depend on one person's rows.
    """


class PostProcessingError(QueryFailedError):
    """HAVING failed on the released table (a value it could not convert), after the release.

    Nothing is lost: ``result`` holds the released table, unfiltered and unsorted, with its
    guarantee (the debit is kept). The message may quote released values, which are public.
    """

    def __init__(self, message: str, result: object) -> None:
        super().__init__(message)
        self.result = result


def first_line(error: BaseException) -> str:
    """The first line of an error's message ("" if it has none), to quote a reader's or engine's
    complaint inside a dpkit error without its multi-line context."""
    return (str(error).strip().splitlines() or [""])[0]
