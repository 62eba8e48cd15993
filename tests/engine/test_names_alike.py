"""Sources two of whose columns are named alike without case are refused when the session opens.

Column names in queries, bounds and the privacy unit match without case (as in DuckDB and Spark).
DuckDB renames the second of two such columns (``ID`` and ``id`` become ``ID`` and ``id_1``), so
before this check ``privacy_unit="id"`` resolved to ``ID``: a person with 100 rows was released as
100 people, each at sensitivity 1.
"""

from __future__ import annotations

import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpkit
from dpkit import engine as E

BUDGET = dpkit.PureDP(5.0)
ALIKE = {"ID": list(range(300)), "id": [1, 1, 1, 2, 2, 3] * 50}


def _refused(open_session) -> str:
    with pytest.raises(dpkit.InvalidParameterError) as caught:
        open_session()
    assert "same name without case" in str(caught.value) or "twice" in str(caught.value)
    return str(caught.value)


def test_parquet_with_id_and_ID_is_refused_not_read_as_the_other_column(tmp_path):
    path = tmp_path / "visits.parquet"
    pq.write_table(pa.table(ALIKE), path)
    message = _refused(lambda: E.Session.from_parquet(path, privacy_unit="id", budget=BUDGET))
    assert "'ID' and 'id'" in message


def test_frames_with_names_alike_are_refused():
    frame = pd.DataFrame(ALIKE)
    _refused(lambda: E.Session.from_pandas(frame, privacy_unit="id", budget=BUDGET))
    _refused(lambda: E.Session.from_arrow(pa.table(ALIKE), privacy_unit="id", budget=BUDGET))
    _refused(lambda: E.Session.from_polars(pl.DataFrame(ALIKE), privacy_unit="id", budget=BUDGET))
    _refused(lambda: E.Session.from_polars(pl.DataFrame(ALIKE).lazy(), privacy_unit="id", budget=BUDGET))


def test_a_pandas_column_named_twice_is_refused():
    frame = pd.DataFrame([[1, 2, 3]], columns=["pid", "x", "x"])
    _refused(lambda: E.Session.from_pandas(frame, privacy_unit="pid", budget=BUDGET))


def test_inferred_csv_with_names_alike_is_refused(tmp_path):
    path = tmp_path / "visits.csv"
    path.write_text("ID,id\n" + "".join(f"{i},{i % 3}\n" for i in range(30)))
    _refused(lambda: E.Session.from_csv(path, privacy_unit="id", budget=BUDGET))


def test_a_public_table_with_names_alike_is_refused_naming_the_parameter():
    session = E.Session.from_pandas(pd.DataFrame({"pid": [1, 2], "k": [1, 2]}), privacy_unit="pid", budget=BUDGET)
    with pytest.raises(dpkit.InvalidParameterError) as caught:
        session.add_public_table("lookup", pd.DataFrame({"k": [1], "K": [2]}))
    assert caught.value.name == "public_tables"


def test_distinct_names_that_only_look_renamed_are_accepted(tmp_path):
    """``ID`` beside a real ``id_1`` is not a collision; a CSV without a header is not read as names."""
    session = E.Session.from_pandas(
        pd.DataFrame({"ID": [1, 2, 3], "id_1": [1, 1, 2]}), privacy_unit="id_1", budget=BUDGET
    )
    assert list(session.columns) == ["ID", "id_1"]
    headerless = tmp_path / "plain.csv"
    headerless.write_text("".join(f"{i},{i}\n" for i in range(50)))  # DuckDB names them column0, column1
    assert len(E.Session.from_csv(headerless, budget=BUDGET).columns) == 2


def test_the_privacy_unit_still_matches_without_case_when_unambiguous():
    session = E.Session.from_pandas(
        pd.DataFrame({"Person": [1, 1, 2], "x": [1, 2, 3]}), privacy_unit="person", budget=BUDGET
    )
    assert "privacy_unit='Person'" in repr(session)
