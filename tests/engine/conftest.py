"""Shared fixtures for the engine tests: a small deterministic people table."""

from __future__ import annotations

import pandas as pd
import pytest
from engine_fixtures import make_people


@pytest.fixture(scope="module")
def people() -> pd.DataFrame:
    return make_people()
