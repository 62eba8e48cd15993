"""``dpkit account`` at extreme noise multipliers.

Within GaussianEvent's range [1e-150, 1e150] every accountant answers: a value, or "not supported",
never an internal failure (before, 1/sigma^2 overflowed or divided by zero in GDP, zCDP and RDP, and
the CLT of DP-SGD overflowed e^{1/sigma^2} below sigma ~ 0.038). Outside the range the command
refuses the noise multiplier with one line naming the option, and exit status 2.
"""

from __future__ import annotations

import json
import math

import pytest

from dpkit import accounting as A
from dpkit.cli import main
from dpkit.events import GaussianEvent, InvalidParameterError

ACCOUNTANTS = 9


def _rows(args, capsys):
    assert main([*args, "--json"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "Warning" not in captured.err
    rows = json.loads(captured.out)["results"]
    assert len(rows) == ACCOUNTANTS
    return rows


@pytest.mark.parametrize("workload", ["gaussian", "dpsgd"])
@pytest.mark.parametrize("multiplier", ["1e-150", "1e-20", "0.03", "1e20", "1e150"])
def test_every_accountant_answers_within_the_range(workload, multiplier, capsys):
    args = ["account", workload, "--noise-multiplier", multiplier]
    if workload == "dpsgd":
        args += ["--sampling-rate", "0.01", "--steps", "10"]
    for row in _rows(args, capsys):
        assert "error" not in row, row  # a value or "not supported", no internal failure
        if row["supported"]:
            epsilon = math.inf if row["epsilon"] is None else row["epsilon"]  # (JSON writes inf as null)
            if float(multiplier) >= 1e20:
                assert epsilon < 1e-6  # (almost) no cost
            elif float(multiplier) <= 1e-20:
                assert epsilon > 1e30 or math.isinf(epsilon)  # (almost) no privacy


@pytest.mark.parametrize("multiplier", ["1e-300", "1e-151", "2e150", "1e300"])
def test_a_noise_multiplier_outside_the_range_is_refused_in_one_line(multiplier, capsys):
    assert main(["account", "dpsgd", "--noise-multiplier", multiplier, "--sampling-rate", "0.01"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpkit: --noise-multiplier") and "[1e-150, 1e150]" in err
    assert len(err.strip().splitlines()) == 1
    with pytest.raises(InvalidParameterError, match="noise_multiplier"):
        GaussianEvent(float(multiplier))


def test_gdp_of_dpsgd_with_tiny_noise_is_infinite_not_an_overflow():
    """The CLT's mu^2 holds e^{1/sigma^2} - 1: past sigma ~ 0.0376 it is infinite (no privacy)."""
    accountant = A.GDPAccountant().compose(A.dpsgd_event(0.03, 0.01, 100))
    assert math.isinf(accountant.epsilon(1e-5))
    assert A.GDPAccountant().compose(A.dpsgd_event(1e150, 0.01, 100)).epsilon(1e-5) == 0.0


def test_a_group_too_large_for_the_range_is_not_supported_by_rdp():
    event = A.GroupEvent(GaussianEvent(1e-140), 10**20)
    assert not A.RDPAccountant().supports(event)


def test_bad_noise_multiplier_is_still_one_line(capsys):
    assert main(["account", "gaussian", "--noise-multiplier", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpkit: --noise-multiplier") and len(err.strip().splitlines()) == 1
