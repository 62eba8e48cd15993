"""Joins to public lookup tables: names compared without case, as the engines compare them, and
the builder and SQL accepting and refusing the same joins.

Before the fix a lookup column ``PID`` beside the privacy unit ``pid`` reached DuckDB's binder (an
"Ambiguous reference" error quoting dpkit's internal SQL), a join column spelled ``REGION`` in the
lookup was refused as "not a column of both", ``join("LK")`` was refused where SQL accepted
``JOIN LK``, and the builder ran a table joined twice and ``on=["region", "region"]``.
"""

from __future__ import annotations

import pandas as pd
import pytest

import dpkit
from dpkit import engine as E
from dpkit._errors import InvalidParameterError
from dpkit.engine import UnsupportedSQLError
from dpkit.noise import InsecureSeededRandom

PEOPLE = pd.DataFrame({"pid": [1, 2, 3, 3], "region": ["n", "s", "e", "e"], "v": [1.0, 2.0, 3.0, 4.0]})
LOOKUPS = {
    "lk": pd.DataFrame({"region": ["n", "s", "e"], "country": ["N", "S", "E"]}),
    "upper": pd.DataFrame({"REGION": ["n", "s", "e"], "zone": ["a", "a", "b"]}),
    "unit": pd.DataFrame({"region": ["n", "s", "e"], "PID": [9, 9, 9], "label": ["x", "y", "z"]}),
    "value": pd.DataFrame({"Region": ["n", "s", "e"], "V": [0.0, 0.0, 0.0]}),
}


def _session() -> E.Session:
    return E.Session.from_pandas(
        PEOPLE, name="people", privacy_unit="pid", budget=dpkit.PureDP(1e7), public_tables=LOOKUPS
    )


def _released(session, query, **cost):
    if isinstance(query, str):
        return session.sql(query, epsilon=1e6, rng=InsecureSeededRandom(0), **cost)
    return session.release(query, epsilon=1e6, rng=InsecureSeededRandom(0), **cost)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT zone, COUNT(*) AS n FROM people JOIN upper USING (region) GROUP BY zone",
        "SELECT zone, COUNT(*) AS n FROM people JOIN upper ON people.region = upper.REGION GROUP BY zone",
        lambda s: s.table().join("upper", on="REGION").group_by("zone", keys=["a", "b"]).agg(n=E.count()),
        lambda s: s.table().join("UPPER", on="region").group_by("zone", keys=["a", "b"]).agg(n=E.count()),
    ],
    ids=["using", "on", "builder-column", "builder-table"],
)
def test_a_join_column_spelled_in_another_case_joins(query):
    session = _session()
    built = query(session) if callable(query) else query
    result = _released(session, built, **({} if callable(query) else {"keys": ["a", "b"]}))
    assert dict(zip(result.columns["zone"], (round(n) for n in result.columns["n"]), strict=True)) == {
        "a": 2,
        "b": 1,
    }  # (one row per person per group by default)


@pytest.mark.parametrize(
    ("query", "parameter", "column"),
    [
        ("SELECT label, COUNT(*) AS n FROM people JOIN unit USING (region) GROUP BY label", "privacy_unit", "pid"),
        ("SELECT COUNT(*) AS n, SUM(v) AS t FROM people JOIN value USING (region)", "t", "v"),
        ("SELECT COUNT(*) AS n FROM people JOIN value USING (region) WHERE V > 0", "where", "V"),
    ],
)
def test_a_lookup_column_equal_to_a_private_one_without_case_is_refused_by_name(query, parameter, column):
    session = _session()
    before = session.remaining
    with pytest.raises(InvalidParameterError) as refused:
        session.sql(query, epsilon=1.0, bounds={"v": (0, 5)})
    assert refused.value.name == parameter
    assert "is a column of both" in str(refused.value) and "Binder" not in str(refused.value)
    assert session.remaining == before


def test_the_builder_refuses_what_sql_refuses_in_joins():
    session = _session()
    with pytest.raises(UnsupportedSQLError, match="joined once"):
        session.sql("SELECT COUNT(*) AS n FROM people JOIN lk USING (region) JOIN lk USING (region)", epsilon=1.0)
    with pytest.raises(InvalidParameterError, match="joined once"):
        _released(session, session.table().join("lk", on="region").join("LK", on="region").agg(n=E.count()))
    with pytest.raises(UnsupportedSQLError, match="once"):
        session.sql("SELECT COUNT(*) AS n FROM people JOIN lk USING (region, region)", epsilon=1.0)
    with pytest.raises(InvalidParameterError, match="twice"):
        _released(session, session.table().join("lk", on=["region", "REGION"]).agg(n=E.count()))
    assert session.remaining == dpkit.PureDP(1e7)


def test_a_join_key_written_the_lookups_way_groups_and_the_unit_stays_guarded():
    """GROUP BY REGION after JOIN upper USING (region) raised a bare KeyError ('REGION'), and the
    privacy-unit guard compared names with case."""
    session = _session()
    result = _released(
        session,
        "SELECT REGION, COUNT(*) AS n FROM people JOIN upper USING (region) GROUP BY REGION",
        keys=["n", "s", "e"],
    )
    counts = dict(zip(result.columns["region"], (round(n) for n in result.columns["n"]), strict=True))
    assert counts == {"n": 1, "s": 1, "e": 1}  # (results use the schema's spelling)
    lookup = {"unitk": pd.DataFrame({"PID": [1, 2, 3], "tier": ["a", "b", "c"]})}
    keyed = E.Session.from_pandas(
        PEOPLE, name="people", privacy_unit="pid", budget=dpkit.PureDP(10), public_tables=lookup
    )
    with pytest.raises(InvalidParameterError, match="grouping by the privacy unit"):
        _released(keyed, keyed.table().join("unitk", on="pid").group_by("PID", keys=[1, 2]).agg(n=E.count()))
    assert keyed.remaining == dpkit.PureDP(10)


def test_chained_joins_and_twin_names():
    """A chained join key in another case than the earlier lookup's was refused as "not a column of
    both 'people' and ..."; two lookups sharing a column were blamed on the private table; two public
    tables named alike without case were both accepted and JOIN lk read LK's rows."""
    lookups = {
        "lk": pd.DataFrame({"region": ["n", "s", "e"], "Country": ["N", "S", "E"]}),
        "lk2": pd.DataFrame({"country": ["N", "S", "E"], "continent": ["X", "X", "Y"]}),
        "lk3": pd.DataFrame({"region": ["n", "s", "e"], "country": ["N", "S", "E"]}),
    }
    session = E.Session.from_pandas(
        PEOPLE, name="people", privacy_unit="pid", budget=dpkit.PureDP(1e7), public_tables=lookups
    )
    for query in (
        "SELECT continent, COUNT(*) AS n FROM people JOIN lk USING (region) JOIN lk2 USING (COUNTRY) "
        "GROUP BY continent",
        session.table()
        .join("lk", on="region")
        .join("lk2", on="country")
        .group_by("continent", keys=["X", "Y"])
        .agg(n=E.count()),
    ):
        result = _released(session, query, **({"keys": ["X", "Y"]} if isinstance(query, str) else {}))
        assert [round(n) for n in result.columns["n"]] == [2, 1]
    with pytest.raises(InvalidParameterError, match="both 'lk' and the lookup table 'lk3'"):
        session.sql(
            "SELECT COUNT(*) AS n FROM people JOIN lk USING (region) JOIN lk3 USING (region) WHERE country = 'N'",
            epsilon=1.0,
        )
    with pytest.raises(InvalidParameterError, match="differ only in case"):
        E.Session.from_pandas(
            PEOPLE,
            name="people",
            privacy_unit="pid",
            budget=dpkit.PureDP(1),
            public_tables={"lk": lookups["lk"], "LK": lookups["lk3"]},
        )
