"""``dpkit account`` at extreme noise multipliers: every accountant answers on its own row.

QA found ``accountant.supports(event)`` called outside the per-accountant guard: a noise multiplier
of 1e-300 (ZeroDivisionError in the GDP accountant) or 1e160 / 1e300 (OverflowError in RDP) ended
the whole command with a traceback (exit 1) instead of one row per accountant.
"""

from __future__ import annotations

import json

import pytest

from dpkit.cli import main

ACCOUNTANTS = 9


@pytest.mark.parametrize("workload", ["gaussian", "dpsgd"])
@pytest.mark.parametrize("multiplier", ["1e-300", "1e160", "1e300"])
def test_extreme_noise_multiplier_gives_one_row_per_accountant(workload, multiplier, capsys):
    args = ["account", workload, "--noise-multiplier", multiplier, "--json"]
    if workload == "dpsgd":
        args += ["--sampling-rate", "0.01", "--steps", "10"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "Warning" not in captured.err
    rows = json.loads(captured.out)["results"]
    assert len(rows) == ACCOUNTANTS
    for row in rows:
        # Each row is unsupported, a value, or a failure with its reason: never a missing row.
        assert row["supported"] is False or "epsilon" in row
        assert "error" not in row or row["epsilon"] is None


def test_extreme_noise_multiplier_text_report(capsys):
    assert main(["account", "gaussian", "--noise-multiplier", "1e300"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    lines = captured.out.splitlines()
    assert len(lines) == 1 + ACCOUNTANTS
    # A noise multiplier of 1e300 costs (almost) nothing: an accountant that answers says so.
    values = [line.split()[-3] for line in lines[1:] if line.rstrip().endswith("s)") and "failed" not in line]
    assert values and all(float(value) < 1e-6 for value in values)


def test_bad_noise_multiplier_is_still_one_line(capsys):
    assert main(["account", "gaussian", "--noise-multiplier", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpkit: --noise-multiplier") and len(err.strip().splitlines()) == 1
