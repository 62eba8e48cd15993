"""Shared fixtures for the engine tests: a small deterministic people table, and no ambient ledger key."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest
from engine_fixtures import make_people


@pytest.fixture(scope="module")
def people() -> pd.DataFrame:
    return make_people()


@pytest.fixture(scope="session", autouse=True)
def _no_ambient_key() -> Iterator[None]:
    """A DPKIT_LEDGER_KEY set where the tests run would key every ledger they make.

    Session-scoped, so it is cleared before the module-scoped fixtures open their ledgers too.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("DPKIT_LEDGER_KEY", raising=False)
        yield
