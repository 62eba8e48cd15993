"""``import dpkit`` stays light: scipy and mpmath are loaded on first use only."""

import importlib
import pkgutil
import subprocess
import sys

import dpkit
from dpkit._lazy import LazyModule

HEAVY = ("scipy", "mpmath")


def test_import_dpkit_loads_neither_scipy_nor_mpmath():
    code = (
        "import sys, dpkit, dpkit.engine, dpkit.cli; "
        f"print(sorted({{m.split('.')[0] for m in sys.modules if m.startswith({HEAVY!r})}}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_lazy_module_imports_on_first_use():
    lazy = LazyModule("fractions")
    assert "not loaded" in repr(lazy)
    assert lazy.Fraction(1, 2) == importlib.import_module("fractions").Fraction(1, 2)
    assert lazy.load() is importlib.import_module("fractions") and "(loaded)" in repr(lazy)
    assert not hasattr(LazyModule("no_such_module_dpkit"), "__wrapped__")  # probes do not import


def test_every_lazy_module_names_a_real_module():
    lazies = [
        value
        for info in pkgutil.walk_packages(dpkit.__path__, "dpkit.")
        for value in vars(importlib.import_module(info.name)).values()
        if isinstance(value, LazyModule)
    ]
    assert len(lazies) >= 13
    for lazy in lazies:
        assert lazy.load().__name__.startswith(HEAVY)
