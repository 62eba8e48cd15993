"""Column types whose values could fail a query after its debit are refused before it.

Each case once failed after the debit, and whether it failed depended on one row: a WHERE
condition that is a column of another type than BOOLEAN (DuckDB casts it outside the condition's
TRY), a SUM over a LIST column (typed numeric by the prefix of its type's name), and public keys
that do not parse as the column's type (UUID text, INTERVAL text, text keys on BLOB).
"""

from __future__ import annotations

import datetime as dt
import uuid

import pyarrow as pa
import pytest

import dpkit
from dpkit import engine as E
from dpkit._errors import InvalidParameterError
from dpkit.noise import InsecureSeededRandom

TOKEN = uuid.UUID(int=1)


def _table(note: str) -> pa.Table:
    return pa.table(
        {
            "p": [1, 2, 3],
            "name": ["Alice", "Bob", "Carol"],
            "note": ["true", "false", note],
            "flag": [True, False, None],
            "badge": pa.array([b"\x01", None, b"\x02"], pa.binary()),
            "tok": pa.ExtensionArray.from_storage(pa.uuid(), pa.array([TOKEN.bytes] * 3, pa.binary(16))),
            "wait": pa.array([dt.timedelta(days=1)] * 3, pa.duration("us")),
            "scores": pa.array([[1, 2], None, [3]], pa.list_(pa.int64())),
        }
    )


def _session(note: str = "secret") -> E.Session:
    return E.Session.from_arrow(_table(note), name="t", privacy_unit="p", budget=dpkit.ApproxDP(100, 1e-3))


def _refused(session: E.Session, run, match: str) -> None:
    before = session.remaining
    with pytest.raises(InvalidParameterError, match=match):
        run()
    assert session.remaining == before


@pytest.mark.parametrize("note", ["true", "secret"])
@pytest.mark.parametrize("condition", ["note", "name = 'Alice' AND badge", "tok", "wait AND flag", "scores"])
def test_a_condition_that_is_not_boolean_is_refused_whatever_the_rows(note, condition):
    session = _session(note)
    sql = f"SELECT COUNT(*) AS n FROM t WHERE {condition}"
    _refused(session, lambda: session.sql(sql, epsilon=1.0), "not BOOLEAN")


def test_boolean_conditions_still_run():
    session = _session()
    for condition in ("flag", "NOT flag", "note = 'true'", "badge IS NULL", "flag AND name = 'Alice'", "NULL"):
        session.sql(f"SELECT COUNT(*) AS n FROM t WHERE {condition}", epsilon=1.0, rng=InsecureSeededRandom(0))
    session.table().where("flag").agg(n=E.count()).release(epsilon=1.0, rng=InsecureSeededRandom(0))


def test_the_builder_refuses_a_text_condition():
    session = _session()
    query = session.table().where("note").agg(n=E.count())
    _refused(session, lambda: query.release(epsilon=1.0), "not BOOLEAN")


@pytest.mark.parametrize("aggregate", ["SUM", "AVG", "MEDIAN"])
def test_a_list_column_is_not_numeric(aggregate):
    session = _session()
    assert not session.columns["scores"].numeric and not session.columns["scores"].integer
    sql = f"SELECT {aggregate}(scores) AS x FROM t"
    _refused(session, lambda: session.sql(sql, epsilon=1.0, bounds={"scores": (0, 10)}), "scores")


@pytest.mark.parametrize(
    ("column", "keys", "match"),
    [
        ("tok", ["not-a-uuid"], "a key must be str"),
        ("tok", [TOKEN], "has type UUID"),
        ("tok", [1], "has type int"),
        ("wait", ["soon"], "takes no public keys"),
        ("wait", [dt.timedelta(days=1)], "takes no public keys"),
        ("badge", [b"\x01", "x"], "has type str"),
        ("scores", [[1, 2]], "must be scalars"),
        ("scores", [(1, 2)], "group by scalar columns"),
    ],
)
def test_public_keys_that_the_column_cannot_hold_are_refused(column, keys, match):
    session = _session()
    sql = f"SELECT {column}, COUNT(*) AS n FROM t WHERE name = 'Alice' GROUP BY {column}"
    _refused(session, lambda: session.sql(sql, keys={column: keys}, epsilon=1.0), match)


def test_public_keys_of_uuid_and_blob_columns_match_their_rows():
    session = E.Session.from_arrow(_table("x"), name="t", privacy_unit="p", budget=dpkit.ApproxDP(1e9, 1e-3))
    for column, keys in (("tok", [str(TOKEN), str(uuid.UUID(int=2)).upper()]), ("badge", [b"\x01", b"\x03"])):
        result = session.sql(
            f"SELECT {column}, COUNT(*) AS n FROM t GROUP BY {column}",
            keys={column: keys},
            epsilon=1e8,
            rng=InsecureSeededRandom(0),
        )
        counts = dict(zip(result.columns[column], result.columns["n"], strict=True))
        assert counts == {keys[0]: 3 if column == "tok" else 1, keys[1]: 0}
