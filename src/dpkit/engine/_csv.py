"""CSV files with declared column types: the schema comes from the data holder, never from the rows.

``Session.from_csv(path, types={...})`` reads every field as text and converts it to the declared
type field by field: a value that does not parse reads as NULL (which the declared clamping
handles), and a malformed line is left out. No row can change a column's type, make the reader
fail, or change how another row is read, so the schema the analysts see (which decides which
queries are refused) and the rows the engine aggregates do not depend on any one person's data.

Both engines read a value the same way: its whole text (spaces around it allowed) must have the
type's form before the engine's own TRY_CAST runs: digits with an optional sign for an integer;
digits with an optional sign, point and exponent for DECIMAL, also NaN and [+-]Inf[inity] for a
float; an ISO date (``2024-01-02``), optionally followed by `` HH:MM[:SS[.ffffff]]`` (or ``T``) for
a timestamp. This excludes each engine's extensions (DuckDB's ``1_000``, ``0x1F``, ``12.5``
rounded to an integer, ``infinity`` as a date or a time zone offset it drops), so DuckDB and
Spark load identical tables.

>>> types = {"person_id": "bigint", "income": "double"}
>>> spec = typed_csv_spec("people.csv", types, ",", header=["person_id", "income"])
>>> spec.columns
(('person_id', 'BIGINT'), ('income', 'DOUBLE'))
"""

from __future__ import annotations

import csv
import glob
import gzip
import io
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpkit._errors import InvalidParameterError

__all__ = ["TypedCsv", "typed_csv_spec", "duckdb_select", "spark_frame", "DECLARABLE_TYPES"]

#: Declarable column types and their aliases (DuckDB spelling on the left of the mapping's values).
_ALIASES = {
    "BOOLEAN": "BOOLEAN",
    "BOOL": "BOOLEAN",
    "TINYINT": "TINYINT",
    "SMALLINT": "SMALLINT",
    "INTEGER": "INTEGER",
    "INT": "INTEGER",
    "BIGINT": "BIGINT",
    "REAL": "REAL",
    "FLOAT": "REAL",
    "DOUBLE": "DOUBLE",
    "VARCHAR": "VARCHAR",
    "TEXT": "VARCHAR",
    "STRING": "VARCHAR",
    "DATE": "DATE",
    "TIMESTAMP": "TIMESTAMP",
}
DECLARABLE_TYPES = (
    "BOOLEAN, TINYINT, SMALLINT, INTEGER, BIGINT, REAL, DOUBLE, DECIMAL(p, s) with 1 <= p <= 38 and "
    "0 <= s <= p, VARCHAR (TEXT, STRING), DATE or TIMESTAMP (without time zone)"
)
_SPARK_TYPE = {
    "BOOLEAN": "BOOLEAN",
    "TINYINT": "TINYINT",
    "SMALLINT": "SMALLINT",
    "INTEGER": "INT",
    "BIGINT": "BIGINT",
    "REAL": "FLOAT",
    "DOUBLE": "DOUBLE",
    "VARCHAR": "STRING",
    "DATE": "DATE",
    "TIMESTAMP": "TIMESTAMP_NTZ",
}
_DECIMAL = re.compile(r"(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")
_INTEGERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT")
#: The whole text a value of each family must match (spaces around it allowed), before the engine's
#: TRY_CAST runs; anything else reads as NULL. One regular expression per field: measured cheaper
#: in DuckDB than trimming, TRANSLATE or LTRIM checks.
_DECIMAL_TEXT = r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?"
_DATE_TEXT = r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}"
_PATTERNS = {
    "integer": r" *[+-]?[0-9]+ *",
    "decimal": f" *{_DECIMAL_TEXT} *",
    "float": rf" *({_DECIMAL_TEXT}|[nN][aA][nN]|[+-]?[iI][nN][fF]([iI][nN][iI][tT][yY])?) *",
    "date": f" *{_DATE_TEXT} *",
    "timestamp": rf" *{_DATE_TEXT}([ T][0-9]{{1,2}}:[0-9]{{2}}(:[0-9]{{2}}(\.[0-9]{{1,6}})?)?)? *",
}


@dataclass(frozen=True)
class TypedCsv:
    """A CSV file (or glob) with a header row, its columns in file order with declared types."""

    path: str
    columns: tuple[tuple[str, str], ...]
    delimiter: str


def _canonical_type(column: str, declared: object) -> str:
    if not isinstance(declared, str):
        raise InvalidParameterError(f"types[{column!r}]", declared, f"must be a type name: {DECLARABLE_TYPES}")
    text = " ".join(declared.upper().split())
    decimal = _DECIMAL.fullmatch(text)
    if decimal is not None:
        precision, scale = int(decimal.group(1)), int(decimal.group(2) or 0)
        if 1 <= precision <= 38 and 0 <= scale <= precision:
            return f"DECIMAL({precision}, {scale})"
    elif text in _ALIASES:
        return _ALIASES[text]
    raise InvalidParameterError(f"types[{column!r}]", declared, f"must be one of {DECLARABLE_TYPES}")


def matching_files(path: str) -> list[str]:
    """The files ``path`` names: the sorted matches of a glob, or the path itself."""
    if any(ch in path for ch in "*?["):
        return sorted(glob.glob(path))
    return [path]


def csv_header(path: str, delimiter: str) -> list[str]:
    """The names in the first line of the CSV file ``path`` (nothing else is read)."""
    opener: Any = gzip.open if path.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:  # the first line alone: later lines are never decoded here
            line = handle.readline().decode("utf-8-sig")
        return next(csv.reader(io.StringIO(line), delimiter=delimiter), [])
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise InvalidParameterError("path", path, f"cannot read its header row ({type(error).__name__})") from None


def typed_csv_spec(
    path: str | os.PathLike[str], types: object, delimiter: object, *, header: Sequence[str] | None = None
) -> TypedCsv:
    """Check ``types`` (column -> type name) against the file's header row and return the spec.

    Every column of the header must be declared, once, and nothing else (names are matched
    without case, as in queries); with a glob, every file's header must be the same. ``header``
    replaces reading the file (for tests and documentation).
    """
    text = os.fspath(path)
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '"\r\n':
        raise InvalidParameterError("delimiter", delimiter, "must be one character, not a quote or a line break")
    if not isinstance(types, Mapping) or not types:
        raise InvalidParameterError("types", types, "must be a non-empty mapping column -> type name")
    if header is None:
        files = matching_files(text)
        if not files:
            raise InvalidParameterError("path", text, "matches no file")
        headers = [csv_header(file, delimiter) for file in files]
        if any(other != headers[0] for other in headers[1:]):
            raise InvalidParameterError("path", text, "its files have different header rows")
        header = headers[0]
    if not header or any(not name for name in header):
        raise InvalidParameterError("path", text, "its header row must name every column")
    folded = [name.casefold() for name in header]
    if len(set(folded)) != len(folded):
        raise InvalidParameterError("path", text, "its header row names a column twice")
    declared: dict[str, str] = {}
    for column, kind in types.items():
        key = str(column).casefold()
        if key in declared:
            raise InvalidParameterError("types", column, "declares a column twice (names match without case)")
        declared[key] = _canonical_type(str(column), kind)
    unknown = [str(column) for column in types if str(column).casefold() not in folded]
    if unknown:
        raise InvalidParameterError(
            "types", ", ".join(unknown), f"are not columns of the file; its header: {', '.join(header)}"
        )
    missing = [name for name in header if name.casefold() not in declared]
    if missing:
        raise InvalidParameterError(
            "types",
            ", ".join(missing),
            "must be declared too: give every column's type, so no type is inferred from the rows",
        )
    return TypedCsv(text, tuple((name, declared[name.casefold()]) for name in header), delimiter)


def _family(kind: str) -> str | None:
    if kind in _INTEGERS:
        return "integer"
    if kind in ("REAL", "DOUBLE"):
        return "float"
    if kind.startswith("DECIMAL"):
        return "decimal"
    if kind in ("DATE", "TIMESTAMP"):
        return kind.lower()
    return None


def _converted(field: str, kind: str, spark: bool) -> str:
    """The SQL expression that turns text ``field`` (already quoted) into ``kind``, NULL when it does not parse."""
    if kind == "VARCHAR":
        return field
    target = _SPARK_TYPE.get(kind, kind) if spark else kind
    family = _family(kind)
    if family is None:  # BOOLEAN: both engines accept the same words, but DuckDB only once trimmed
        return f"TRY_CAST(trim({field}) AS {target})"
    pattern = _PATTERNS[family]
    if spark:  # Java regex, anchored at both ends (\z: Java's $ also matches before a final line break)
        anchored = ("^(?:" + pattern + ")\\z").replace("\\", "\\\\")  # backslashes escaped in Spark SQL text
        looks_like = f"{field} RLIKE '{anchored}'"
    else:
        looks_like = f"regexp_full_match({field}, '{pattern}')"
    return f"CASE WHEN {looks_like} THEN TRY_CAST({field} AS {target}) END"


def duckdb_select(spec: TypedCsv) -> str:
    """The SELECT that reads ``spec`` in DuckDB: every field as text, then converted by :func:`_converted`.

    Lines with too many or too few fields, or that are not UTF-8, are left out (``ignore_errors``);
    the dialect is fixed (no sniffing), with ``"`` quoting as CSV writers produce.
    """
    from dpkit.engine._aggregation import _literal, _quote

    columns = ", ".join(f"{_literal(name)}: 'VARCHAR'" for name, _ in spec.columns)
    reader = (
        f"read_csv({_literal(spec.path)}, header = true, auto_detect = false, columns = {{{columns}}}, "
        f"delim = {_literal(spec.delimiter)}, quote = '\"', escape = '\"', ignore_errors = true, "
        "null_padding = false, strict_mode = true)"
    )
    fields = ", ".join(f"{_converted(_quote(name), kind, False)} AS {_quote(name)}" for name, kind in spec.columns)
    every_field = ", ".join(_quote(name) for name, _ in spec.columns)
    # As in spark_frame: every field of every line is read whatever the query needs (DuckDB checks
    # UTF-8 only in the columns it reads), and a U+FFFD leaves its line out on both engines.
    return f"SELECT {fields} FROM {reader} WHERE NOT contains(concat_ws('', {every_field}), '\ufffd')"


def _backquoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def spark_frame(spark: Any, spec: TypedCsv) -> Any:
    """The Spark DataFrame that reads ``spec`` as :func:`duckdb_select` does in DuckDB."""
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField(name, StringType()) for name, _ in spec.columns])
    frame = spark.read.csv(
        str(Path(spec.path)),
        header=True,
        schema=schema,
        enforceSchema=True,
        sep=spec.delimiter,
        quote='"',
        escape='"',
        mode="DROPMALFORMED",
        multiLine=False,
    )
    # The filter reads every field of every line, so Spark cannot prune columns from the scan: with
    # pruning, DROPMALFORMED keeps a line with too many or too few fields whenever the query needs
    # only some columns, and the rows counted would depend on the query. It also leaves out lines
    # that are not UTF-8 (Spark reads their bytes as U+FFFD), as DuckDB does.
    every_field = ", ".join(_backquoted(name) for name, _ in spec.columns)
    whole = frame.where(f"NOT contains(concat_ws('', {every_field}), '\ufffd')")
    return whole.selectExpr(
        *(f"{_converted(_backquoted(name), kind, True)} AS {_backquoted(name)}" for name, kind in spec.columns)
    )
