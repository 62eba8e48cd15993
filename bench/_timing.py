"""Shared by the engine micro-benchmarks: the median release time of a query with one engine setting patched."""

from __future__ import annotations

import statistics
import time
from typing import Any


def median_release_seconds(query: Any, repeats: int, module: Any, setting: str, value: Any) -> float:
    """Median wall time of ``query.release(epsilon=1.0)`` over ``repeats`` runs with ``module.setting = value``.

    The setting is restored afterwards, whatever happens.
    """
    default = getattr(module, setting)
    setattr(module, setting, value)
    try:
        runs = []
        for _ in range(repeats):
            start = time.perf_counter()
            query.release(epsilon=1.0)
            runs.append(time.perf_counter() - start)
        return statistics.median(runs)
    finally:
        setattr(module, setting, default)
