"""Shared fixtures for the engine tests: a small deterministic people table, and no ambient ledger key."""

from __future__ import annotations

import pandas as pd
import pytest
from engine_fixtures import make_people


@pytest.fixture(scope="module")
def people() -> pd.DataFrame:
    return make_people()


@pytest.fixture(autouse=True)
def _no_ambient_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A DPKIT_LEDGER_KEY set where the tests run would key every ledger they make."""
    monkeypatch.delenv("DPKIT_LEDGER_KEY", raising=False)
