"""The dpkit command."""

from dpkit.cli import main


def test_sample_prints_integers(capsys):
    assert main(["sample", "--mechanism", "discrete_laplace", "--scale", "2", "-n", "5"]) == 0
    values = capsys.readouterr().out.split()
    assert len(values) == 5 and all(v.lstrip("-").isdigit() for v in values)


def test_bad_scale_is_a_clear_error(capsys):
    assert main(["sample", "--mechanism", "geometric", "--scale", "-1"]) == 2
    assert "scale: got -1.0" in capsys.readouterr().err


def test_demo_runs(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "TOTAL privacy spent" in out and "eps=1" in out
