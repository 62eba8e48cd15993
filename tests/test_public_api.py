"""The curated public surface: __all__ matches what each package exports, and imports stay light."""

import importlib
import subprocess
import sys

import pytest

PACKAGES = [
    "dpkit",
    "dpkit.guarantees",
    "dpkit.noise",
    "dpkit.mechanisms",
    "dpkit.audit",
    "dpkit.events",
    "dpkit.accounting",
    "dpkit.local",
    "dpkit.risk",
    "dpkit.engine",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_matches_exports(name):
    module = importlib.import_module(name)
    exported = set(module.__all__)
    # A public name is one defined in this package (or, for the top level, anywhere in dpkit).
    prefix = "dpkit." if name == "dpkit" else name + "."
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and not isinstance(value, type(sys))
        and (getattr(value, "__module__", "") or "").startswith((prefix, name + "._"))
        or (not attr.startswith("_") and getattr(value, "__module__", None) == name and callable(value))
    }
    # Every public class or function the package defines is listed; every listed name exists.
    assert public <= exported, public - exported
    for attr in exported:
        assert hasattr(module, attr)


def test_top_level_names_from_the_issue():
    import dpkit

    for name in [
        "Laplace",
        "Gaussian",
        "DiscreteLaplace",
        "DiscreteGaussian",
        "Geometric",
        "Exponential",
        "ReportNoisyMax",
        "PermuteAndFlip",
        "SparseVector",
        "RandomizedResponse",
        "Staircase",
        "PureDP",
        "ApproxDP",
        "ZCDP",
        "NeighbourRelation",
        "DPError",
        "InvalidParameterError",
    ]:
        assert hasattr(dpkit, name), name
    assert callable(dpkit.audit.estimate_epsilon)


def test_import_is_light():
    code = (
        "import sys, dpkit; "
        "heavy = {'matplotlib', 'duckdb', 'pyspark', 'pandas'} & set(sys.modules); print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
