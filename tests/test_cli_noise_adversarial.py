"""Adversarial checks of the top-level CLI (sample, account, risk), dpkit.noise's random sources,
dpkit.datasets and dpkit.demo: bad input gets one clear, typed error naming the parameter."""

from __future__ import annotations

import copy
import json
import pickle

import numpy as np
import pytest

from dpkit import InvalidParameterError, noise
from dpkit.cli import main
from dpkit.noise import InsecureSeededRandom, SecureRandom, resolve_source


def _strict_json(text: str) -> object:
    def refuse(constant: str) -> object:
        raise AssertionError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


# --------------------------------------------------------------------------------------------
# dpkit account
# --------------------------------------------------------------------------------------------


def test_account_json_has_no_infinity(capsys):
    """Catches `Infinity` in --json output (epsilon at delta = 0 is infinite for the Gaussian)."""
    assert main(["account", "gaussian", "--noise-multiplier", "1", "--delta", "0", "--json"]) == 0
    report = _strict_json(capsys.readouterr().out)
    assert isinstance(report, dict)
    rdp = next(row for row in report["results"] if row["accountant"] == "RDP")
    assert rdp["epsilon"] is None


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["laplace", "--noise-multiplier", "1", "--steps", "0"], "--steps"),
        (["dpsgd", "--noise-multiplier", "1", "--sampling-rate", "0.1", "--steps", "-2"], "--steps"),
        (["gaussian", "--noise-multiplier", "0"], "--noise-multiplier"),
        (["gaussian", "--noise-multiplier", "1", "--delta", "1"], "--delta"),
        (["gaussian", "--noise-multiplier", "1", "--delta", "nan"], "--delta"),
        (["gaussian", "--noise-multiplier", "1", "--epsilon", "-1"], "--epsilon"),
        (["gaussian", "--noise-multiplier", "1", "--sampling-rate", "0.5"], "--sampling-rate"),
        (["laplace", "--noise-multiplier", "1", "--sampling-rate", "0.5"], "--sampling-rate"),
    ],
)
def test_account_errors_name_the_option(capsys, args, option):
    """Catches messages naming an internal parameter (`count: got 0`) instead of the option, and a
    --sampling-rate silently ignored (and printed as if used) for a workload without sampling."""
    assert main(["account", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dpkit: {option}") and "Traceback" not in err


def test_account_one_refusing_accountant_does_not_hide_the_others(capsys):
    """Catches the whole comparison failing because the PLD accountant refuses 10^12 steps."""
    args = ["account", "laplace", "--noise-multiplier", "1", "--steps", str(10**12), "--json"]
    assert main(args) == 0
    rows = {row["accountant"]: row for row in _strict_json(capsys.readouterr().out)["results"]}
    assert rows["RDP"]["epsilon"] > 0 and "error" not in rows["RDP"]
    assert "discretization" in rows["PLD (pessimistic, certified)"]["error"]
    assert rows["PLD (pessimistic, certified)"]["epsilon"] is None


def test_account_accountant_crash_is_reported_not_a_traceback(capsys):
    """Catches an OverflowError traceback (advanced composition at epsilon = 1e300)."""
    assert main(["account", "laplace", "--noise-multiplier", "1e-300"]) == 0
    out = capsys.readouterr().out
    assert "advanced (DRV)" in out and "failed" in out


def test_account_plot_path_checked_before_work(tmp_path, capsys):
    """Catches a FileNotFoundError / ValueError traceback, and FILE silently written as FILE.png."""
    pytest.importorskip("matplotlib")
    for path in (tmp_path / "missing" / "curve.png", tmp_path / "curve", tmp_path / "curve.txt", tmp_path):
        assert main(["account", "laplace", "--noise-multiplier", "10", "--plot", str(path)]) == 2
        captured = capsys.readouterr()
        assert captured.err.startswith("dpkit: --plot") and captured.out == ""
    assert not (tmp_path / "curve.png").exists()


def test_risk_plot_unwritable_is_a_clear_error(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main(["risk", "--plot", str(tmp_path / "missing" / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpkit risk: --plot") and "Traceback" not in err


# --------------------------------------------------------------------------------------------
# dpkit sample
# --------------------------------------------------------------------------------------------


def test_sample_bad_count_names_the_option(capsys):
    assert main(["sample", "--mechanism", "geometric", "--scale", "2", "-n", "-3"]) == 2
    assert capsys.readouterr().err.startswith("dpkit: -n: got -3")


def test_sample_draws_in_bounded_chunks(monkeypatch, capsys):
    """Catches -n 10^12 allocating 8 TB at once (a MemoryError traceback): draws are streamed."""
    sizes: list[int] = []

    def fake(scale, size, **_kwargs):
        sizes.append(size)
        return np.zeros(size, dtype=np.int64)

    monkeypatch.setattr(noise, "discrete_laplace", fake)
    n = 3 * 65536 + 5
    assert main(["sample", "--mechanism", "discrete_laplace", "--scale", "2", "-n", str(n)]) == 0
    assert sum(sizes) == n and max(sizes) <= 65536
    assert capsys.readouterr().out.split() == ["0"] * n


def test_sample_closed_pipe_is_not_a_traceback(monkeypatch):
    """Catches BrokenPipeError escaping when the output is piped into `head`."""

    class ClosedPipe:
        def write(self, _text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert main(["sample", "--mechanism", "geometric", "--scale", "2", "-n", "5"]) != 0


# --------------------------------------------------------------------------------------------
# dpkit.noise random sources
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [SecureRandom, InsecureSeededRandom])
def test_a_source_class_is_refused_by_name(cls):
    """Catches `rng=SecureRandom` (the class) failing deep inside with 'missing argument size'."""
    with pytest.raises(InvalidParameterError, match="^rng: "):
        resolve_source(cls)
    with pytest.raises(InvalidParameterError, match="^rng: "):
        noise.discrete_laplace(1.0, 3, rng=cls)


@pytest.mark.parametrize("seed", [-1, np.int8(-3), 1.5, None, True])
def test_bad_seed_is_typed(seed):
    with pytest.raises(InvalidParameterError, match="^seed: "):
        InsecureSeededRandom(seed)


@pytest.mark.parametrize("source", [SecureRandom(), InsecureSeededRandom(1)])
@pytest.mark.parametrize("size", [2.5, True, "3", None, np.float64(2)])
def test_source_uint64_bad_size_is_typed(source, size):
    """Catches uint64(True) returning one word and raw TypeErrors for a float or text size."""
    with pytest.raises(InvalidParameterError, match="^size: "):
        source.uint64(size)


@pytest.mark.parametrize("source", [SecureRandom(), InsecureSeededRandom(1)])
def test_source_uint64_sizes(source):
    assert source.uint64(0).shape == (0,) and source.uint64(-3).shape == (0,)  # as before: no words
    assert source.uint64(np.int64(3)).dtype == np.uint64


def test_secure_flag_cannot_be_flipped():
    """Catches a seeded source made to claim `secure = True` by plain attribute assignment."""
    seeded = InsecureSeededRandom(1)
    with pytest.raises(AttributeError):
        seeded.secure = True  # type: ignore[misc]
    assert seeded.secure is False and "NOT for releases" in repr(seeded)
    with pytest.raises(AttributeError):
        SecureRandom().secure = False  # type: ignore[misc]


def test_copied_and_unpickled_secure_sources_do_not_repeat():
    source = SecureRandom()
    copies = [copy.copy(source), copy.deepcopy(source), pickle.loads(pickle.dumps(source))]
    streams = {tuple(s.uint64(4).tolist()) for s in [source, *copies]}
    assert len(streams) == 4 and all(s.secure for s in copies)
    seeded = pickle.loads(pickle.dumps(InsecureSeededRandom(3)))
    assert seeded.secure is False and "NOT for releases" in repr(seeded)


class _FloatSource:
    secure = True

    def uint64(self, size):
        return np.full(size, 0.5)


class _ShortSource:
    secure = True

    def uint64(self, size):
        return np.zeros(1, dtype=np.uint64) + np.uint64(12345)


@pytest.mark.parametrize("source", [_FloatSource(), _ShortSource()])
@pytest.mark.parametrize(
    "draw",
    [
        lambda rng: noise.uniform_integers(6, 5, rng=rng),
        lambda rng: noise.bernoulli_rational("1/3", 5, rng=rng),
        lambda rng: noise.discrete_laplace(2.0, 5, rng=rng),
        lambda rng: noise.permutation(5, rng=rng),
    ],
)
def test_custom_source_with_wrong_words_is_refused(source, draw):
    """Catches a custom source returning floats (uniform_integers gave all zeros, bernoulli all True)
    or too few words (a result of the wrong size) being used silently."""
    with pytest.raises(InvalidParameterError, match="^rng: "):
        draw(source)


def test_custom_source_is_still_accepted():
    class Words:
        secure = True

        def uint64(self, size):
            return SecureRandom().uint64(size)

    assert noise.discrete_laplace(1.0, 4, rng=Words()).shape == (4,)


# --------------------------------------------------------------------------------------------
# dpkit.datasets and dpkit.demo
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [None, -1, 1.5, "x", True])
def test_dataset_seed_is_checked(seed):
    """Catches seed=None silently giving a non-deterministic 'deterministic' table, and raw numpy errors."""
    from dpkit.datasets import people, visits

    with pytest.raises(InvalidParameterError, match="^seed: "):
        people(5, seed=seed)
    with pytest.raises(InvalidParameterError, match="^seed: "):
        visits(5, seed=seed)


def test_visits_names_its_own_parameter():
    from dpkit.datasets import visits

    with pytest.raises(InvalidParameterError, match="^persons: got 0"):
        visits(0)


def test_demo_run_refuses_a_non_session():
    from dpkit.demo import run

    with pytest.raises(InvalidParameterError, match="^session: "):
        run(session=5)  # type: ignore[arg-type]
