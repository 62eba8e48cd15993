"""CSV files with declared types (``Session.from_csv(path, types=...)``): the schema and the rows
read owe nothing to any one row, bad declarations are refused before anything is spent, and
DuckDB and Spark load identical tables."""

from __future__ import annotations

import datetime
import decimal
import gzip
import math
from pathlib import Path

import pytest

import dpkit
from dpkit import engine as E
from dpkit.cli import main as cli_main
from dpkit.engine._csv import typed_csv_spec

BUDGET = dpkit.PureDP(10)
TYPES = {"person_id": "BIGINT", "region": "VARCHAR", "income": "DOUBLE", "day": "DATE"}


def _write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def _table(session: E.Session) -> list[tuple]:
    rows = session._backend._connection.execute(f'SELECT * FROM "{session._name}"').fetchall()
    return sorted(rows, key=repr)


# -- the schema is declared, never inferred ------------------------------------------------------


def test_one_persons_odd_value_changes_the_inferred_schema_but_not_the_declared_one(tmp_path: Path) -> None:
    """Without types, a single 'N/A' income turns the column into text (SUM is then refused, which
    tells the analyst some row holds a non-number); with types, both files give the same schema."""
    clean = _write(tmp_path / "clean.csv", "person_id,region,income,day\n1,n,10,2024-01-02\n2,s,20,2024-01-03\n")
    odd = _write(tmp_path / "odd.csv", "person_id,region,income,day\n1,n,10,2024-01-02\n2,s,N/A,2024-01-03\n")
    inferred = [E.Session.from_csv(p, privacy_unit="person_id", budget=BUDGET).columns["income"] for p in (clean, odd)]
    assert inferred[0].numeric and not inferred[1].numeric  # the side channel types= closes
    declared = [
        E.Session.from_csv(p, types=TYPES, privacy_unit="person_id", budget=BUDGET).columns for p in (clean, odd)
    ]
    assert declared[0] == declared[1]
    assert [c.type for c in declared[0].values()] == ["BIGINT", "VARCHAR", "DOUBLE", "DATE"]


def test_a_value_that_does_not_parse_reads_as_null_and_the_clamping_handles_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "people.csv", "person_id,region,income,day\n1,n,10,2024-01-02\n2,n,N/A,x\n3,n,abc,\n")
    session = E.Session.from_csv(path, types=TYPES, privacy_unit="person_id", budget=BUDGET)
    assert _table(session) == [(1, "n", 10.0, datetime.date(2024, 1, 2)), (2, "n", None, None), (3, "n", None, None)]
    query = session.table().group_by("region", keys=["n"]).agg(n=E.count(), s=E.sum("income", bounds=(0, 100)))
    result = query.release(epsilon=1.0, rng=dpkit.noise.InsecureSeededRandom(3))  # a seed is for tests only
    assert result.to_pandas()["region"].tolist() == ["n"]


@pytest.mark.parametrize(
    ("kind", "values", "expected"),
    [
        (
            "INTEGER",
            ["12", " 12 ", "+7", "-0", "007", "12.5", "1e3", "0x1F", "1_000", "", "abc", "99999999999", "1,5"],
            [12, 12, 7, 0, 7, None, None, None, None, None, None, None, None],
        ),
        (
            "BIGINT",
            ["99999999999", "-9223372036854775808", "9223372036854775808", "12.0"],
            [99999999999, -(2**63), None, None],
        ),
        ("SMALLINT", ["32767", "32768", "-32768"], [32767, None, -32768]),
        (
            "DOUBLE",
            ["1.5", " -2e3 ", ".5", "NaN", "inf", "-Infinity", "1_000", "0x1F", "1,5", "e", "1e400"],
            [1.5, -2000.0, 0.5, math.nan, math.inf, -math.inf, None, None, None, None, math.inf],
        ),
        (
            "DECIMAL(6, 2)",
            ["12.34", "-0.5", "1234.5", "12345", "1_0", "NaN"],
            [decimal.Decimal("12.34"), decimal.Decimal("-0.50"), decimal.Decimal("1234.50"), None, None, None],
        ),
        ("BOOLEAN", ["true", "FALSE", "t", "0", "1", "yes", "maybe"], [True, False, True, False, True, True, None]),
        (
            "DATE",
            ["2024-01-02", " 2024-02-29 ", "2023-02-29", "infinity", "-infinity", "02/01/2024", "2024-01-02T00:00"],
            [datetime.date(2024, 1, 2), datetime.date(2024, 2, 29), None, None, None, None, None],
        ),
        (
            "TIMESTAMP",
            [
                "2024-01-02 03:04:05",
                "2024-01-02T03:04:05.5",
                "2024-01-02 03:04:05+02",
                "2024-01-02T03:04:05Z",
                "infinity",
            ],
            [
                datetime.datetime(2024, 1, 2, 3, 4, 5),
                datetime.datetime(2024, 1, 2, 3, 4, 5, 500000),
                None,
                None,
                None,
            ],
        ),
        ("VARCHAR", [" padded ", "with, comma", 'a "quote"'], [" padded ", "with, comma", 'a "quote"']),
    ],
)
def test_each_declared_type_reads_its_values_field_by_field(tmp_path: Path, kind, values, expected) -> None:
    def quoted(value: str) -> str:
        return '"' + value.replace('"', '""') + '"' if any(c in value for c in ',"') else value

    lines = "".join(f"{i},{quoted(v)}\n" for i, v in enumerate(values))
    path = _write(tmp_path / "values.csv", "i,v\n" + lines)
    session = E.Session.from_csv(path, types={"i": "INTEGER", "v": kind}, privacy_unit="i", budget=BUDGET)
    got = [v for _, v in sorted(session._backend._connection.execute('SELECT i, v FROM "values"').fetchall())]
    assert len(got) == len(expected)
    for value, want, text in zip(got, expected, values, strict=True):
        if isinstance(want, float) and math.isnan(want):
            assert isinstance(value, float) and math.isnan(value), text
        else:
            assert value == want and type(value) is type(want), text


def test_a_malformed_line_is_left_out_whatever_columns_the_query_reads(tmp_path: Path) -> None:
    """Too few or too many fields, bytes that are not UTF-8, or a U+FFFD: the line is left out,
    for SELECT * and for COUNT(*) alike (DuckDB checks UTF-8 only in the columns a query reads)."""
    text = (
        b"person_id,region,income,day\n1,n,10,2024-01-02\n2,s\n3,s,1,2024-01-02,extra\n"
        b'4,\xff\xfe,7,2024-01-02\n5,\xef\xbf\xbd,7,2024-01-02\n6,"s,t",8,2024-01-04\n'
    )
    session = E.Session.from_csv(_write(tmp_path / "p.csv", text), types=TYPES, privacy_unit="person_id", budget=BUDGET)
    connection = session._backend._connection
    assert _table(session) == [(1, "n", 10.0, datetime.date(2024, 1, 2)), (6, "s,t", 8.0, datetime.date(2024, 1, 4))]
    assert connection.execute('SELECT count(*) FROM "p"').fetchone() == (2,)
    assert connection.execute('SELECT count(person_id) FROM "p"').fetchone() == (2,)


def test_tsv_gzip_and_glob_files(tmp_path: Path) -> None:
    rows = "person_id\tregion\tincome\tday\n1\tn\t10\t2024-01-02\n"
    with gzip.open(tmp_path / "a.tsv.gz", "wt") as handle:
        handle.write(rows)
    session = E.Session.from_csv(tmp_path / "a.tsv.gz", types=TYPES, privacy_unit="person_id", budget=BUDGET)
    assert session._name == "a" and _table(session) == [(1, "n", 10.0, datetime.date(2024, 1, 2))]
    for part in (1, 2):
        _write(tmp_path / f"part{part}.csv", f"person_id;region;income;day\n{part};n;{part}.5;2024-01-0{part}\n")
    both = E.Session.from_csv(
        str(tmp_path / "part*.csv"), name="parts", types=TYPES, delimiter=";", privacy_unit="person_id", budget=BUDGET
    )
    assert [row[:3] for row in _table(both)] == [(1, "n", 1.5), (2, "n", 2.5)]


def test_windows_line_ends_and_a_byte_order_mark(tmp_path: Path) -> None:
    text = b'\xef\xbb\xbfperson_id,region,income,day\r\n1,n,10,2024-01-02\r\n2,"s",20.5,2024-01-03\r\n'
    session = E.Session.from_csv(
        _write(tmp_path / "win.csv", text), types=TYPES, privacy_unit="person_id", budget=BUDGET
    )
    assert _table(session) == [(1, "n", 10.0, datetime.date(2024, 1, 2)), (2, "s", 20.5, datetime.date(2024, 1, 3))]


def test_column_names_need_no_quoting_care(tmp_path: Path) -> None:
    path = _write(tmp_path / "odd.csv", '"person id","o\'brien","a""b"\n1,x,2\n')
    session = E.Session.from_csv(
        path, types={"person id": "INT", "O'Brien": "text", 'a"b': "real"}, privacy_unit="person id", budget=BUDGET
    )
    assert list(session.columns) == ["person id", "o'brien", 'a"b'] and _table(session) == [(1, "x", 2.0)]


# -- refusals, before any ledger file exists -----------------------------------------------------


@pytest.mark.parametrize(
    ("types", "delimiter", "parameter", "words"),
    [
        ({"person_id": "BIGINT", "region": "VARCHAR", "income": "DOUBLE"}, None, "types", "must be declared too"),
        ({**TYPES, "age": "INTEGER"}, None, "types", "not columns of the file"),
        ({**TYPES, "income": "MONEY"}, None, "types['income']", "must be one of"),
        ({**TYPES, "income": "DECIMAL(40, 2)"}, None, "types['income']", "must be one of"),
        ({**TYPES, "income": 3}, None, "types['income']", "must be a type name"),
        ({**TYPES, "INCOME": "DOUBLE"}, None, "types", "declares a column twice"),
        ({}, None, "types", "non-empty mapping"),
        (TYPES, ";;", "delimiter", "one character"),
        (TYPES, '"', "delimiter", "one character"),
    ],
)
def test_bad_declarations_are_refused_by_name_before_a_ledger_exists(
    tmp_path: Path, types, delimiter, parameter, words
) -> None:
    path = _write(tmp_path / "people.csv", "person_id,region,income,day\n1,n,10,2024-01-02\n")
    ledger = tmp_path / "budget.db"
    with pytest.raises(dpkit.InvalidParameterError) as caught:
        E.Session.from_csv(
            path, types=types, delimiter=delimiter, privacy_unit="person_id", budget=BUDGET, ledger=ledger
        )
    assert caught.value.name == parameter and words in str(caught.value)
    assert not ledger.exists()


def test_bad_files_are_refused_by_name(tmp_path: Path) -> None:
    options = {"types": TYPES, "privacy_unit": "person_id", "budget": BUDGET}
    with pytest.raises(dpkit.InvalidParameterError, match="different header rows"):
        _write(tmp_path / "x1.csv", "person_id,region,income,day\n")
        _write(tmp_path / "x2.csv", "person_id,region,day,income\n")
        E.Session.from_csv(str(tmp_path / "x*.csv"), name="x", **options)
    with pytest.raises(dpkit.InvalidParameterError, match="name every column"):
        E.Session.from_csv(_write(tmp_path / "blank.csv", "person_id,,income,day\n"), **options)
    with pytest.raises(dpkit.InvalidParameterError, match="names a column twice"):
        E.Session.from_csv(_write(tmp_path / "twice.csv", "person_id,region,Region,day\n"), **options)
    with pytest.raises(dpkit.InvalidParameterError, match="header row"):
        E.Session.from_csv(_write(tmp_path / "latin.csv", b"person_id,r\xe9gion,income,day\n"), **options)
    with pytest.raises(dpkit.InvalidParameterError, match="matches no file"):
        E.Session.from_csv(str(tmp_path / "none*.csv"), name="none", **options)
    with pytest.raises(dpkit.InvalidParameterError, match="inferred") as caught:
        E.Session.from_csv(tmp_path / "x1.csv", delimiter=";", privacy_unit="person_id", budget=BUDGET)
    assert caught.value.name == "delimiter"


def test_spec_matches_header_names_without_case_and_keeps_the_files_spelling() -> None:
    spec = typed_csv_spec("f.csv", {"ID": "int", "Income": "numeric(10)"}, ",", header=["id", "income"])
    assert spec.columns == (("id", "INTEGER"), ("income", "DECIMAL(10, 0)"))


# -- the CLI -------------------------------------------------------------------------------------


def test_cli_types_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "people.csv", "person_id,region,income,day\n" + "1,n,10,2024-01-02\n" * 3)
    argv = ["query", str(path), "SELECT COUNT(*) AS n FROM people", "--privacy-unit", "person_id", "--epsilon", "1"]
    types = ["--types", "person_id=BIGINT", "--types", "region=VARCHAR", "--types", "income=DECIMAL(10, 2)"]
    assert cli_main([*argv, *types, "--types", "day=DATE", "--json"]) == 0
    assert '"n"' in capsys.readouterr().out
    assert cli_main([*argv, *types]) == 2  # day is not declared
    assert "day" in capsys.readouterr().err
    assert cli_main([*argv, "--types", "person_id"]) == 2
    assert "COLUMN=TYPE" in capsys.readouterr().err


# -- DuckDB and Spark load the same table --------------------------------------------------------


def test_duckdb_and_spark_load_identical_tables(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from dpkit.engine._backends import SparkBackend

    columns = {
        "pid": "BIGINT",
        "i": "INTEGER",
        "f": "DOUBLE",
        "d": "DECIMAL(6, 2)",
        "b": "BOOLEAN",
        "day": "DATE",
        "at": "TIMESTAMP",
        "s": "VARCHAR",
    }
    fields = {
        "i": [
            "12",
            " 12 ",
            "+7",
            "12.5",
            "1e3",
            "0x1F",
            "1_000",
            "",
            "abc",
            "99999999999",
            "-2147483648",
            "1 2",
            "007",
        ],
        "f": ["1.5", " -2e3 ", ".5", "NaN", "inf", "-Infinity", "1_000", "0x1F", "e", "1e400", "-0", "+nan", "-nan"],
        "d": ["12.34", "-0.5", "1234.5", "12345", "1_0", "NaN", "1e2", "0.005", " 3 ", "", "x", "5.", "-.5"],
        "b": ["true", "FALSE", "t", "0", "1", "yes", "maybe", " true ", "", "on", "n", "F", "no"],
        "day": ["2024-01-02", " 2024-02-29 ", "2023-02-29", "infinity", "02/01/2024", "", "2024-1-2", "x"],
        "at": [
            *("2024-01-02 03:04:05", "2024-01-02T03:04:05.5", "2024-01-02 03:04:05+02", "Z", "infinity", ""),
            *("2024-01-02", "x", "2024-01-02 3:4:5", "2024-01-02 03:04", "2024-01-02 03:04:05.123456789"),
            *("2024-01-02 03:04:05.123456", " 2024-01-02 03:04:05 "),
        ],
        "s": [" padded ", "with, comma", 'a "quote"', "", "é", "x", "y", "z", "NULL", "null", "\\N", "  ", "0"],
    }
    more = {"f": ["INF", "+Infinity", "InFiNiTy", "infinit", "nan1"], "day": ["0001-01-01", "9999-12-31", "-1"]}
    for column, extra in more.items():
        fields[column] += extra
    rows = max(len(values) for values in fields.values())
    for column in fields:
        fields[column] = (fields[column] + [""] * rows)[:rows]
    assert all(len(values) == rows for values in fields.values())

    def quoted(value: str) -> str:
        return '"' + value.replace('"', '""') + '"' if any(c in value for c in ',"') else value

    lines = ["pid," + ",".join(list(columns)[1:])]
    lines += [",".join([str(row), *(quoted(fields[c][row]) for c in list(columns)[1:])]) for row in range(rows)]
    lines += ["98,1", "99," + ",".join(["1"] * 9)]  # too few and too many fields: left out by both
    path = _write(tmp_path / "mixed.csv", "\n".join(lines) + "\n")
    duck = E.Session.from_csv(path, types=columns, privacy_unit="pid", budget=BUDGET)
    spark = E.Session.from_csv(path, types=columns, privacy_unit="pid", budget=BUDGET, backend=SparkBackend())
    flags = [[(c.numeric, c.integer) for c in session.columns.values()] for session in (duck, spark)]
    assert flags[0] == flags[1]

    def canonical(row):
        return tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in row)

    backend = spark._backend
    spark_rows = [tuple(r) for r in backend._spark.table(f"`{backend._view('mixed')}`").collect()]
    duck_rows = duck._backend._connection.execute('SELECT * FROM "mixed"').fetchall()
    assert sorted(map(canonical, spark_rows), key=repr) == sorted(map(canonical, duck_rows), key=repr)
    assert len(duck_rows) == rows
    for count in ('SELECT count(*) FROM "mixed"', 'SELECT count(pid) FROM "mixed"'):
        assert duck._backend._connection.execute(count).fetchone() == (rows,)
    assert backend._spark.sql(f"SELECT count(*) FROM `{backend._view('mixed')}`").collect()[0][0] == rows
