"""Lazy imports, so that ``import dpkit`` does not pay for scipy and mpmath until they are used."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = ["LazyModule"]


class LazyModule:
    """Stand-in for the module ``name``: imported on first attribute access, then cached.

    >>> math = LazyModule("math")
    >>> math.floor(2.5)
    2
    """

    __slots__ = ("_module", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def load(self) -> ModuleType:
        """The real module (imported now if it was not yet)."""
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return self._module

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # probes such as copy's or inspect's (``__wrapped__``) must not import
            raise AttributeError(attr)
        return getattr(self.load(), attr)

    def __repr__(self) -> str:
        state = "loaded" if self._module is not None else "not loaded"
        return f"<LazyModule {self._name!r} ({state})>"
