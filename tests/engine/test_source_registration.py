"""Sources whose rows could fail a query later are refused when the session opens, never after a debit.

Each case once made a release fail after its debit, and whether it failed could depend on one
person's row (DuckDB skips scanning a large lookup table when no private row passes the filter):
a pandas object column that mixes kinds of values, a Parquet glob whose files disagree on a
column's type, a pyarrow RecordBatchReader (readable once). Replacing a public table registered
from a frame by a file silently kept the frame.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpkit
from dpkit import engine as E
from dpkit._errors import InvalidParameterError
from dpkit.noise import InsecureSeededRandom

PEOPLE = pd.DataFrame({"pid": [1, 2, 3, 37], "region": ["r1", "r2", "r3", "r4"], "age": [30, 40, 50, 81]})


def _session(**options):
    options.setdefault("budget", dpkit.PureDP(100.0))
    return E.Session.from_pandas(PEOPLE, name="people", privacy_unit="pid", **options)


def _count(session, sql):
    return session.sql(sql, epsilon=1.0, rng=InsecureSeededRandom(3))


def test_a_public_object_column_mixing_kinds_is_refused_when_registered():
    lookup = pd.DataFrame(
        {"region": [f"r{i}" for i in range(3000)], "code": pd.Series([7] * 2999 + [True], dtype=object)}
    )
    with pytest.raises(InvalidParameterError, match="public_tables: .* object column 'code' mixes values"):
        _session(public_tables={"lk": lookup})


def test_a_private_object_column_mixing_kinds_is_refused_and_one_kind_is_read():
    for last, refused in ((True, True), (5, False)):
        frame = pd.DataFrame({"pid": [1, 2, 3], "score": pd.Series([1, 2, last], dtype=object)})
        if refused:
            with pytest.raises(InvalidParameterError, match="object column 'score'"):
                E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(10.0))
        else:
            session = E.Session.from_pandas(frame, privacy_unit="pid", budget=dpkit.PureDP(10.0))
            assert session.columns["score"].numeric
            _count(session, "SELECT COUNT(*) AS n FROM data WHERE score > 0")


def _glob(tmp_path, second: pa.Table) -> str:
    first = pa.table({"pid": pa.array(range(100), pa.int64()), "age": pa.array([30] * 100, pa.int64())})
    pq.write_table(first, tmp_path / "part_a.parquet")
    pq.write_table(second, tmp_path / "part_b.parquet")
    return str(tmp_path / "part_*.parquet")


@pytest.mark.parametrize(
    "second",
    [
        pa.table({"pid": pa.array([137], pa.int64()), "age": pa.array(["eighty-one"], pa.string())}),
        pa.table({"pid": pa.array([137], pa.int64()), "age": pa.array([81], pa.int32())}),
        pa.table({"pid": pa.array([137], pa.int64())}),
    ],
    ids=["text", "narrower", "missing"],
)
def test_a_parquet_glob_whose_files_differ_is_refused_as_private_or_public(tmp_path, second):
    path = _glob(tmp_path, second)
    with pytest.raises(InvalidParameterError, match="do not all have the same columns and types"):
        E.Session.from_parquet(path, privacy_unit="pid", budget=dpkit.PureDP(10.0))
    with pytest.raises(InvalidParameterError, match="public_tables: .* do not all have the same columns and types"):
        _session(public_tables={"lk": path})


def test_a_parquet_glob_of_one_schema_opens(tmp_path):
    path = _glob(tmp_path, pa.table({"pid": pa.array([137], pa.int64()), "age": pa.array([81], pa.int64())}))
    session = E.Session.from_parquet(path, name="people", privacy_unit="pid", budget=dpkit.PureDP(10.0))
    assert set(session.columns) == {"pid", "age"}


def test_a_record_batch_reader_is_read_once_so_every_release_runs():
    lookup = pa.table({"region": [f"r{i}" for i in range(3000)], "code": [7] * 3000})
    reader = pa.RecordBatchReader.from_batches(lookup.schema, lookup.to_batches(max_chunksize=100))
    session = _session(public_tables={"lk": reader})
    for _ in range(3):
        _count(session, "SELECT COUNT(*) AS n FROM people JOIN lk USING (region) WHERE age > 80")
    private = pa.RecordBatchReader.from_batches(
        pa.Table.from_pandas(PEOPLE).schema, pa.Table.from_pandas(PEOPLE).to_batches()
    )
    session = E.Session.from_arrow(private, name="people", privacy_unit="pid", budget=dpkit.PureDP(10.0))
    for _ in range(2):
        _count(session, "SELECT COUNT(*) AS n FROM people")


@pytest.mark.parametrize("spelling", ["lk", "LK"])
@pytest.mark.parametrize("kind", ["parquet", "csv", "arrow"])
def test_a_public_table_replaced_by_a_file_is_the_file(tmp_path, kind, spelling):
    old = pd.DataFrame({"region": ["r1", "r4"], "country": ["OLD_1", "OLD_4"]})
    new = pa.table({"region": ["r1", "r4"], "country": ["NEW_1", "NEW_4"], "extra": [1, 2]})
    pq.write_table(new, tmp_path / "new.parquet")
    new.to_pandas().to_csv(tmp_path / "new.csv", index=False)
    replacement = {"parquet": str(tmp_path / "new.parquet"), "csv": str(tmp_path / "new.csv"), "arrow": new}[kind]
    session = _session(public_tables={"lk": old}, budget=dpkit.PureDP(1e9))
    session.add_public_table(spelling, replacement)
    result = session.sql(
        f"SELECT country, COUNT(*) AS n FROM people JOIN {spelling} USING (region) GROUP BY country",
        epsilon=1e8,
        keys={"country": ["NEW_1", "NEW_4", "OLD_1", "OLD_4"]},
        rng=InsecureSeededRandom(1),
    )
    counts = dict(zip(result.columns["country"], result.columns["n"], strict=True))
    assert counts == {"NEW_1": 1, "NEW_4": 1, "OLD_1": 0, "OLD_4": 0}  # (noise of scale 1e-8: rounded away)
    assert {"region", "country", "extra"} == set(session._public[spelling])


def test_spark_refuses_the_same_parquet_globs_and_reads_public_tables_at_registration(tmp_path):
    pytest.importorskip("pyspark")
    from dpkit.engine._backends import SparkBackend

    backend = SparkBackend()
    text = pa.table({"pid": pa.array([137], pa.int64()), "age": pa.array(["eighty-one"], pa.string())})
    path = _glob(tmp_path, text)
    with pytest.raises(InvalidParameterError, match="^source: .* schemas do not merge"):
        E.Session.from_parquet(path, privacy_unit="pid", budget=dpkit.PureDP(10.0), backend=backend)
    with pytest.raises(InvalidParameterError, match="^public_tables: .* schemas do not merge"):
        _session(public_tables={"lk": path}, backend=backend)
    lookup = pa.table({"region": ["r1", "r4"], "country": ["a", "b"]})
    session = _session(public_tables={"lk": lookup}, backend=backend, budget=dpkit.PureDP(1e9))
    result = session.sql(
        "SELECT country, COUNT(*) AS n FROM people JOIN lk USING (region) GROUP BY country",
        epsilon=1e8,
        keys={"country": ["a", "b"]},
        rng=InsecureSeededRandom(1),
    )
    assert dict(zip(result.columns["country"], result.columns["n"], strict=True)) == {"a": 1, "b": 1}
