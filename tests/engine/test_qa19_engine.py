"""Engine QA, round 19: automatic bounds at their cap, where warnings point, accuracy refusals, previews.

Automatic bounds cannot pass +-2^59 (the fixed-point sums need |bound| <= 2^60): nanosecond
timestamps (about 1.7e18) came back bounded at 5.8e17 and averaged three times too small, with no
word. The PrivacyWarning for a large epsilon pointed at dpkit's own session code.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import dpkit
from dpkit.noise import InsecureSeededRandom


def _session(values: np.ndarray) -> dpkit.Session:
    frame = pd.DataFrame({"pid": np.arange(len(values)), "v": values})
    return dpkit.Session.from_pandas(frame, name="t", privacy_unit="pid", budget=dpkit.PureDP(100))


def test_automatic_bounds_at_the_cap_warn_naming_the_column_at_the_callers_line() -> None:
    stamps = pd.date_range("2024-01-01", periods=5000, freq="min").asi8 * 1000  # ns since 1970
    session = _session(stamps)
    with pytest.warns(dpkit.AccuracyWarning, match=r"automatic bounds for 'v' .*2\^59") as caught:
        result = session.sql("SELECT AVG(v) AS a FROM t", epsilon=4, bounds={"v": "auto"}, rng=InsecureSeededRandom(1))
    assert result.bounds["v"][1] == 2.0**59
    assert [w.filename for w in caught if issubclass(w.category, dpkit.AccuracyWarning)] == [__file__]


def test_automatic_bounds_inside_the_cap_do_not_warn() -> None:
    session = _session(np.linspace(18, 90, 5000))
    with warnings.catch_warnings():
        warnings.simplefilter("error", dpkit.AccuracyWarning)
        result = session.sql("SELECT AVG(v) AS a FROM t", epsilon=4, bounds={"v": "auto"}, rng=InsecureSeededRandom(1))
    assert result.bounds["v"][1] <= 256


def test_a_large_epsilon_warns_at_the_callers_line() -> None:
    session = _session(np.arange(100.0))
    with pytest.warns(dpkit.PrivacyWarning, match="exceeds 5") as caught:
        session.sql("SELECT COUNT(*) AS n FROM t", epsilon=10)
    with pytest.warns(dpkit.PrivacyWarning, match="exceeds 5") as direct:
        dpkit.Laplace(1.0, 10.0)
    assert {w.filename for w in [*caught, *direct]} == {__file__}


def test_an_accuracy_target_beside_a_mean_is_refused_naming_the_mean_and_what_to_do() -> None:
    session = _session(np.arange(100.0))
    before = session.remaining
    with pytest.raises(dpkit.InvalidParameterError, match=r"'a' is a mean \(AVG\).*give epsilon= instead"):
        session.sql("SELECT COUNT(*) AS n, AVG(v) AS a FROM t", accuracy={"n": 10}, bounds={"v": (0, 100)})
    assert session.remaining == before


def test_a_preview_shows_every_statistics_columns_when_the_first_has_automatic_bounds() -> None:
    session = _session(np.arange(100.0))
    preview = session.preview("SELECT SUM(v) AS s, COUNT(*) AS n FROM t", epsilon=1, bounds={"v": "auto"})
    header = str(preview).splitlines()[1].split()
    assert set(header) == set(preview.to_pandas().columns)
    assert "epsilon" in header and len(header) > 2


def test_having_arithmetic_on_a_huge_noisy_count_does_not_overflow_after_the_debit() -> None:
    # At epsilon 1e-12 the count's noise is about 1e12: n * n passes int64. HAVING reads counts as
    # DOUBLE (the released columns are int64), so the condition runs instead of failing after the debit.
    session = _session(np.arange(100.0))
    result = session.sql(
        "SELECT COUNT(*) AS n FROM t HAVING n * n >= 0 OR n * n < 0", epsilon=1e-12, rng=InsecureSeededRandom(4)
    )
    assert len(result) == 1 and abs(result.columns["n"][0]) > 2**32 and result.value_types["n"] == "BIGINT"
