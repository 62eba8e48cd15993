"""The randomness seam and the samplers' contracts (the statistical fits live in tests/statistical)."""

from fractions import Fraction

import numpy as np
import pytest

from dpkit import InvalidParameterError
from dpkit.noise import (
    InsecureSeededRandom,
    SecureRandom,
    bernoulli_exp,
    bernoulli_rational,
    constant_time_tv_bound,
    default_source,
    discrete_gaussian,
    discrete_laplace,
    geometric,
    grid_exponent,
    permutation,
    resolve_source,
    snap_to_grid,
    uniform_integers,
)
from dpkit.noise._exact import LazyUniform, exp_neg_interval


class ScriptedSource:
    """A test source: scripted words first, then a seeded stream."""

    secure = False

    def __init__(self, scripted, seed=0):
        self.scripted = [np.uint64(w) for w in scripted]
        self.rest = InsecureSeededRandom(seed)

    def uint64(self, size):
        head = self.scripted[:size]
        self.scripted = self.scripted[size:]
        tail = self.rest.uint64(size - len(head))
        return np.concatenate([np.array(head, dtype=np.uint64), tail])


def test_default_is_secure():
    assert isinstance(default_source(), SecureRandom) and default_source().secure
    assert resolve_source(None) is default_source()
    assert not InsecureSeededRandom(1).secure
    assert "NOT" in repr(InsecureSeededRandom(1))


@pytest.mark.parametrize("bad", [np.random.default_rng(0), 42, "secure", np.random.RandomState(0)])
def test_numpy_generators_refused(bad):
    with pytest.raises(InvalidParameterError, match="rng"):
        discrete_laplace(1.0, 3, rng=bad)


def test_seeded_source_reproducible():
    a = discrete_laplace(3.0, 100, rng=InsecureSeededRandom(7))
    b = discrete_laplace(3.0, 100, rng=InsecureSeededRandom(7))
    assert np.array_equal(a, b)


@pytest.mark.parametrize("sampler", [discrete_laplace, discrete_gaussian, geometric])
@pytest.mark.parametrize("scale", [0, -1, float("nan"), float("inf"), "1", True, 2.0**41])
def test_samplers_refuse_bad_scale(sampler, scale):
    if sampler in (discrete_gaussian, discrete_laplace) and scale == 2.0**41:
        # The discrete Gaussian and Laplace take any finite scale (beyond 2**40 drawn in two exact
        # parts); only their constant-time modes stop at 2**40.
        assert sampler(scale, 3).shape == (3,)
        scale, kwargs = 2.0**41, {"constant_time": True}
    else:
        kwargs = {}
    with pytest.raises(InvalidParameterError):
        sampler(scale, 3, **kwargs)


def test_samplers_return_integers_of_requested_size():
    for sampler in (discrete_laplace, discrete_gaussian, geometric):
        out = sampler(2.5, 1000)
        assert out.dtype == np.int64 and out.shape == (1000,)
    assert discrete_laplace(1.0, 0).size == 0


def _threshold_word(value: float) -> int:
    """A word whose 53-bit prefix brackets ``value``: the draw is ambiguous at that threshold."""
    return int(np.floor(value * 2.0**53)) << 11


def test_geometric_exact_path_decides_ambiguous_draws():
    # U's first 53 bits sit exactly on q^1 = e^{-1/2}: the float path cannot decide; the exact
    # path draws more bits. Whatever the next bits, the answer must match an exact comparison.
    scale = 2.0
    for seed in range(20):
        source = ScriptedSource([_threshold_word(np.exp(-1 / scale))], seed=seed)
        value = int(geometric(scale, 1, rng=source)[0])
        # Recompute U from the same bits and decide with mpmath at high precision.
        replay = ScriptedSource([_threshold_word(np.exp(-1 / scale))], seed=seed)
        word = int(replay.uint64(1)[0]) >> 11
        uniform = LazyUniform(word, 53, replay)
        expected = 0
        while uniform.less_than(exp_neg_interval(Fraction(expected + 1) / Fraction(scale))):
            expected += 1
        assert value == expected
        assert value in (0, 1)


def test_bernoulli_rational_exact_path():
    cut = (1 << 64) // 3  # floor(2^64 / 3): the first word ties with the threshold 1/3
    outcomes = {bool(bernoulli_rational(Fraction(1, 3), 1, rng=ScriptedSource([cut], seed=s))[0]) for s in range(40)}
    assert outcomes == {True, False}


def test_bernoulli_rational_edges_and_errors():
    assert not bernoulli_rational(0, 100).any()
    assert bernoulli_rational(1, 100).all()
    for bad in [1.5, -1, "a", 0.5, Fraction(3, 2), True, False, np.bool_(True), None]:
        with pytest.raises(InvalidParameterError, match="p"):
            bernoulli_rational(bad, 3)


def test_bernoulli_exp_edges_and_errors():
    assert bernoulli_exp(0.0, 100).all()
    assert not bernoulli_exp(800.0, 100).any()
    with pytest.raises(InvalidParameterError):
        bernoulli_exp(-1.0, 3)
    with pytest.raises(InvalidParameterError):
        bernoulli_exp(np.array([0.1, np.nan]))
    # Bools and text are refused by name (they used to be read as 1.0 and as the parsed number).
    for bad in [True, np.bool_(False), "1.0", b"1", np.array(["0.5"]), np.array([True, False]), [0.1, None], None]:
        with pytest.raises(InvalidParameterError, match="x"):
            bernoulli_exp(bad, 3) if np.ndim(bad) == 0 else bernoulli_exp(bad)


def test_uniform_integers_and_permutation():
    values = uniform_integers(7, 10_000, rng=InsecureSeededRandom(1))
    assert values.min() == 0 and values.max() == 6
    perm = permutation(50, rng=InsecureSeededRandom(2))
    assert sorted(perm.tolist()) == list(range(50))
    with pytest.raises(InvalidParameterError):
        uniform_integers(0, 3)


def test_constant_time_mode_and_tv_bound():
    out = discrete_laplace(3.0, 1000, constant_time=True, rng=InsecureSeededRandom(3))
    assert out.dtype == np.int64
    assert 0 < constant_time_tv_bound(1.0) < 1e-10
    assert constant_time_tv_bound(1e6) > constant_time_tv_bound(1.0)
    assert constant_time_tv_bound(2.0, "discrete_gaussian") < 1e-9
    with pytest.raises(InvalidParameterError):
        constant_time_tv_bound(1.0, "laplace")


def test_grid_is_public_and_exact():
    k = grid_exponent(1.0, 10.0)
    assert k == -20
    values = np.array([0.1, 1 / 3, -7.25, 1e10])
    snapped = snap_to_grid(values, k)
    assert np.all(np.ldexp(snapped, -k) == np.rint(np.ldexp(snapped, -k)))
    assert np.all(np.abs(snapped - values) <= 2.0 ** (k - 1))
    # Coarser grid when the noise is huge compared with the sensitivity.
    assert grid_exponent(1.0, 2.0**40) >= 10


def test_no_release_path_uses_an_insecure_generator():
    """Only the test-only seeded source and the synthetic sample data may touch numpy's RNG.

    Docstring examples (lines starting with >>> or ...) may make up synthetic input data.
    """
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2] / "src" / "dpkit"
    allowed = {"noise/_random.py", "datasets.py"}
    pattern = re.compile(r"np\.random|numpy\.random|^import random|^from random ")
    offenders = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root).as_posix()
        for line in path.read_text().splitlines():
            if line.strip().startswith((">>>", "...")):
                continue
            if pattern.search(line.strip()) and relative not in allowed:
                offenders.append(f"{relative}: {line.strip()}")
    assert offenders == []
