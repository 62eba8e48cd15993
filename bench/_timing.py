"""Shared by the engine micro-benchmarks: the median time of a run, the median release time of a query
with one engine setting patched, and an engine module as of an earlier commit (for the before/after
comparisons)."""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
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


def median_seconds(run: Callable[[], object], repeats: int = 5) -> float:
    """Median wall time of ``run()`` over ``repeats`` runs, after one run that warms the file cache
    and the engines."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return sorted(times)[repeats // 2]


def module_at(commit: str, source: str, name: str) -> Any:
    """The module in file ``source`` (from the repository root) as of ``commit``, imported as ``name``.

    It imports the rest of dpkit as it is now: only that file is taken from the commit.
    """
    text = subprocess.run(["git", "show", f"{commit}:{source}"], check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
