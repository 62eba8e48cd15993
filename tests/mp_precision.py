"""A shared autouse fixture for tests whose references are computed in mpmath (importable: pytest's pythonpath)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import mpmath
import pytest


def precision(digits: int) -> Callable[[], Iterator[None]]:
    """An autouse fixture running each test of a module at ``digits`` mpmath digits.

    Set in a module as ``_precision = precision(60)``: other tests leave mpmath's global precision
    wherever they set it, so a module-level ``mp.dps = ...`` would depend on test order.
    """

    @pytest.fixture(autouse=True)
    def _precision() -> Iterator[None]:
        with mpmath.workdps(digits):
            yield

    return _precision
