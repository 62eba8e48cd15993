"""DuckDB's semantics on Spark: the rewrites of a plan's SQL tree that make Spark give DuckDB's answers.

The engine writes every query in DuckDB's dialect, and sqlglot transpiles it for Spark. Where the
two engines' semantics differ on values a WHERE condition or the private-key ranking can meet,
:func:`spark_semantics` rewrites the tree: DuckDB's integer types and overflow checks (after a
model of the constant rewrites DuckDB's optimizer makes first), its casts of text, its text for
DOUBLE, FLOAT, BLOB and INTERVAL keys, its division and modulo rules, and the scope in which a
failing expression nulls a condition. :func:`check_spark_keys` refuses the group keys Spark
cannot rank as DuckDB does. Used by :class:`dpkit.engine._backends.SparkBackend` only: DuckDB's
own text never passes through here.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import itertools
import re
from collections.abc import Mapping
from typing import Any

from dpkit._errors import InvalidParameterError
from dpkit.engine._aggregation import AggregationPlan, decimal_scale

__all__ = ["check_spark_keys", "duck_column_type", "spark_semantics"]


def duck_column_type(kind: str) -> str | None:
    """DuckDB's type for a column of Spark type ``kind`` (as frames reach both engines), or None."""
    lowered = kind.lower()
    simple = {
        "tinyint": "TINYINT",
        "smallint": "SMALLINT",
        "int": "INTEGER",
        "bigint": "BIGINT",
        "float": "FLOAT",
        "double": "DOUBLE",
        "string": "VARCHAR",
        "boolean": "BOOLEAN",
        "date": "DATE",
        "timestamp": "TIMESTAMPTZ",
        "timestamp_ntz": "TIMESTAMP",
        "binary": "BLOB",
    }
    if lowered in simple:
        return simple[lowered]
    if lowered.startswith("decimal"):
        return lowered.upper()
    if lowered.startswith(("varchar", "char")):
        return "VARCHAR"
    if lowered.startswith("interval"):
        return "INTERVAL"
    return None


#: Spark types whose text (cast to STRING, with ``spark_semantics``) is DuckDB's, for the person column.
_PERSON_TEXT_TYPES = frozenset(
    {"tinyint", "smallint", "int", "bigint", "double", "string", "boolean", "date", "timestamp_ntz", "binary"}
)


def check_spark_keys(plan: AggregationPlan, types: Mapping[str, str]) -> None:
    """Refuse the group keys (and person column) Spark cannot give as DuckDB does (``types``: see
    ``SparkBackend._column_types``).

    Private keys are ranked by a salted hash of their text (``_render_bounded``), which the Spark text
    writes as DuckDB does (``spark_semantics``) except for two types:

    - FLOAT (REAL): DuckDB writes most FLOATs with their shortest digits but some (about 1 in 200)
      with their exact DOUBLE digits (its float formatting falls back on a double's where its fast
      path cannot decide), which Spark cannot tell apart: a person in several groups would keep
      other groups;
    - TIMESTAMP WITH TIME ZONE: DuckDB writes (and returns) the instant in its own TimeZone setting
      with an offset, Spark in the session's time zone without one (and returns naive local times).

    Refused only where the keys come from the data (no public key list, or one that cannot be
    indexed), before anything is spent (the backend's check runs before the debit).
    """
    if plan.bounds_groups:  # (per person, by definition)
        # A person in several groups keeps the first in an order hashed from the person's text
        # (``_person_hash``), which Spark writes as DuckDB does for these types only.
        kind = types.get("__pid", "").lower()
        if kind not in _PERSON_TEXT_TYPES and not kind.startswith(("decimal", "varchar", "char")):
            raise InvalidParameterError(
                "privacy_unit",
                plan.person,
                f"is a {kind or 'nested'} column: the Spark backend bounds groups per person by a hash of the "
                "person's text, which Spark writes as DuckDB does only for integers, DECIMAL, DOUBLE, text, "
                "BOOLEAN, DATE, TIMESTAMP without time zone and binary; cast the column to one of those "
                "(BIGINT or STRING) or use the DuckDB backend",
            )
    if plan.indexed_keys:
        return  # public keys: ranked and returned from the key list, never from the data's text
    for position, group in enumerate(plan.groups):
        if not isinstance(group, str):
            continue
        kind = types.get(f"__g{position}", types.get(group.casefold(), "")).lower()
        if kind == "timestamp":
            raise InvalidParameterError(
                "group_by",
                group,
                "is a TIMESTAMP WITH TIME ZONE column: the Spark backend cannot group by it with keys taken "
                "from the data (its text and time zone differ from DuckDB's); give the public keys (keys=...), "
                "store it as a TIMESTAMP without time zone, or use the DuckDB backend",
            )
        if kind == "float" and plan.person is not None and plan.bounds_groups:
            raise InvalidParameterError(
                "group_by",
                group,
                "is a FLOAT (REAL) column: the Spark backend cannot rank private keys of this type as DuckDB does "
                "(DuckDB's text of some FLOATs differs); give the public keys (keys=...), store the column as "
                "DOUBLE, or use the DuckDB backend",
            )


# -- Spark semantics ------------------------------------------------------------------------------
# The SQL text follows DuckDB's semantics; where Spark's differ on values a filter or the group
# ranking can meet, the Spark text is adjusted to give DuckDB's results.

_INTEGER_RANGES = {
    "TINYINT": (-(2**7), 2**7),
    "SMALLINT": (-(2**15), 2**15),
    "INT": (-(2**31), 2**31),
    "BIGINT": (-(2**63), 2**63),
}

#: DuckDB's text of a DOUBLE (Python's repr: the shortest digits that read back as the same double,
#: positional for exponents -4 to 15, else d.ddde+XX; 'nan', 'inf', '-0.0'). Spark's is Java's
#: ('1.0E20', 'Infinity'). The shortest digits: the first of %.0e ... %.16e that reads back as x; an
#: integer below 9e18 is rounded from its exact digits instead (Java's own digits for it can be one
#: too many, and rounding them again can land on the other neighbour). The digits and exponent are
#: then laid out as Python does. ``__dpkit_x`` stands for the value; lambda variables have unlikely
#: names (a lambda's variable would hide a column of that name).
_DOUBLE_TEXT = """
CASE
  WHEN __dpkit_x IS NULL THEN NULL
  WHEN isnan(__dpkit_x) THEN 'nan'
  WHEN __dpkit_x = CAST('Infinity' AS DOUBLE) THEN 'inf'
  WHEN __dpkit_x = CAST('-Infinity' AS DOUBLE) THEN '-inf'
  WHEN __dpkit_x = 0 THEN CAST(__dpkit_x AS STRING)
  ELSE concat(
    CASE WHEN __dpkit_x < 0 THEN '-' ELSE '' END,
    transform(
      array(CASE
        WHEN abs(__dpkit_x) < 9.0E18 AND __dpkit_x = CAST(__dpkit_x AS BIGINT) THEN transform(
          array(CAST(abs(CAST(__dpkit_x AS BIGINT)) AS STRING)),
          __dpkit_n -> element_at(filter(transform(sequence(1, length(__dpkit_n)), __dpkit_p -> transform(
            array(CAST(CAST(substring(__dpkit_n, 1, __dpkit_p) AS BIGINT)
              + CASE WHEN substring(__dpkit_n, __dpkit_p + 1, 1) >= '5' THEN 1 ELSE 0 END AS STRING)),
            __dpkit_r -> named_struct(
              't', concat(__dpkit_r, 'e', CAST(length(__dpkit_n) - 1 + length(__dpkit_r) - __dpkit_p AS STRING)),
              'x', CAST(concat(__dpkit_r, repeat('0', length(__dpkit_n) - __dpkit_p)) AS DOUBLE)))[0]),
            __dpkit_c -> __dpkit_c.x = abs(__dpkit_x)), 1).t)[0]
        ELSE element_at(filter(
          transform(sequence(0, 16), __dpkit_p -> format_string(
            concat('%.', CAST(__dpkit_p AS STRING), 'e'), __dpkit_x)),
          __dpkit_t -> CAST(__dpkit_t AS DOUBLE) = __dpkit_x), 1)
      END),
      __dpkit_s -> transform(
        array(named_struct(
          'd', regexp_replace(regexp_replace(substring_index(__dpkit_s, 'e', 1), '[^0-9]', ''), '0+$', ''),
          'e', CAST(substring_index(__dpkit_s, 'e', -1) AS INT))),
        __dpkit_v -> CASE
          WHEN __dpkit_v.e < -4 OR __dpkit_v.e >= 16 THEN concat(
            substring(__dpkit_v.d, 1, 1),
            CASE WHEN length(__dpkit_v.d) > 1 THEN concat('.', substring(__dpkit_v.d, 2)) ELSE '' END,
            CASE WHEN __dpkit_v.e < 0 THEN 'e-' ELSE 'e+' END,
            CASE WHEN abs(__dpkit_v.e) < 10 THEN '0' ELSE '' END,
            CAST(abs(__dpkit_v.e) AS STRING))
          WHEN __dpkit_v.e < 0 THEN concat('0.', repeat('0', -__dpkit_v.e - 1), __dpkit_v.d)
          WHEN __dpkit_v.e + 1 < length(__dpkit_v.d) THEN concat(
            substring(__dpkit_v.d, 1, __dpkit_v.e + 1), '.', substring(__dpkit_v.d, __dpkit_v.e + 2))
          ELSE concat(__dpkit_v.d, repeat('0', __dpkit_v.e + 1 - length(__dpkit_v.d)), '.0')
        END)[0])[0])
END
"""


@functools.lru_cache(maxsize=1)
def _double_text_template() -> Any:
    import sqlglot

    return sqlglot.parse_one(_DOUBLE_TEXT, read="spark")


#: DuckDB's text of a FLOAT (REAL): the same layout, with the shortest digits that read back as the
#: same FLOAT (Spark writes Java's, '1.0E10', and a FLOAT's exact digits differ from its DOUBLE's).
_FLOAT_TEXT = _DOUBLE_TEXT.replace(" AS DOUBLE)", " AS FLOAT)")

#: DuckDB's text of a BLOB: printable ASCII bytes as themselves, others (and ' " \\) as \\xHH (Spark
#: decodes the bytes as UTF-8, turning every invalid sequence into the same replacement character).
_BLOB_TEXT = """
CASE WHEN __dpkit_x IS NULL THEN NULL ELSE array_join(transform(
  regexp_extract_all(hex(__dpkit_x), '(..)', 1),
  __dpkit_h -> CASE
    WHEN CAST(conv(__dpkit_h, 16, 10) AS INT) BETWEEN 32 AND 126 AND __dpkit_h NOT IN ('22', '27', '5C')
    THEN chr(CAST(conv(__dpkit_h, 16, 10) AS INT))
    ELSE concat(chr(92), 'x', __dpkit_h)
  END), '') END
"""

#: DuckDB's text of an INTERVAL read from a duration (microseconds only): [-]HH:MM:SS[.ffffff], hours
#: unbounded, trailing zeros of the fraction dropped (Spark: INTERVAL '1 01:00:00' DAY TO SECOND).
_INTERVAL_TEXT = """
CASE WHEN __dpkit_x IS NULL THEN NULL ELSE element_at(transform(array(
  CAST(extract(DAY FROM __dpkit_x) AS BIGINT) * 86400000000 + CAST(extract(HOUR FROM __dpkit_x) AS BIGINT) * 3600000000
  + CAST(extract(MINUTE FROM __dpkit_x) AS BIGINT) * 60000000
  + CAST(extract(SECOND FROM __dpkit_x) * 1000000 AS BIGINT)),
  __dpkit_m -> concat(
    CASE WHEN __dpkit_m < 0 THEN '-' ELSE '' END,
    CASE WHEN abs(__dpkit_m) < 36000000000 THEN '0' ELSE '' END,
    CAST(abs(__dpkit_m) DIV 3600000000 AS STRING), ':',
    lpad(CAST(abs(__dpkit_m) DIV 60000000 % 60 AS STRING), 2, '0'), ':',
    lpad(CAST(abs(__dpkit_m) DIV 1000000 % 60 AS STRING), 2, '0'),
    regexp_replace(concat('.', lpad(CAST(abs(__dpkit_m) % 1000000 AS STRING), 6, '0')), '[.]?0+$', ''))), 1) END
"""


@functools.lru_cache(maxsize=3)
def _text_template(kind: str) -> Any:
    """The Spark tree writing a value of Spark type ``kind`` (float, binary, a day-time interval) as DuckDB does."""
    import sqlglot

    text = {"float": _FLOAT_TEXT, "binary": _BLOB_TEXT, "interval": _INTERVAL_TEXT}[kind]
    return sqlglot.parse_one(text, read="spark")


#: DuckDB's text of a DECIMAL of scale ``{scale}`` > 0 from Spark's: Spark writes a value below 1e-6
#: as <digits>E-<n> (exact digits, at most the scale's), DuckDB as 0.<zeros><digits> padded to the scale.
_DECIMAL_TEXT = """
CASE WHEN instr(CAST(__dpkit_x AS STRING), 'E') = 0 THEN CAST(__dpkit_x AS STRING) ELSE concat(
  CASE WHEN __dpkit_x < 0 THEN '-' ELSE '' END, '0.',
  rpad(concat(
    repeat('0', -CAST(substring_index(CAST(__dpkit_x AS STRING), 'E', -1) AS INT) - 1),
    regexp_replace(substring_index(CAST(__dpkit_x AS STRING), 'E', 1), '[-.]', '')), {scale}, '0')) END
"""


@functools.lru_cache(maxsize=8)
def _decimal_text_template(scale: int | None) -> Any:
    """``_DECIMAL_TEXT`` for a scale, or for a DECIMAL whose scale is not known here (``None``: the
    value of an expression): its exponent form holds all its scale's digits, so nothing is padded."""
    import sqlglot

    if scale is None:
        return sqlglot.parse_one(
            _DECIMAL_TEXT.replace("rpad(concat(", "(concat(").replace(", {scale}, '0')", ")"), read="spark"
        )
    return sqlglot.parse_one(_DECIMAL_TEXT.format(scale=scale), read="spark")


def _with_value(template: Any, value: Any) -> Any:
    """``template`` (a tree with the column ``__dpkit_x``) with each ``__dpkit_x`` replaced by ``value``."""
    from sqlglot import exp

    tree = template.copy()
    for column in list(tree.find_all(exp.Column)):
        if column.name == "__dpkit_x" and not column.table:
            column.replace(value.copy())
    return tree


#: DuckDB's ROUND(x, d) of a DOUBLE: v = x * 10^d in double precision, rounded half away from zero,
#: except that a tie in double precision (v = n + 0.5) goes the way of the exact product x * 10^d,
#: whose error against v is computed exactly (Dekker's product: x and 10^d split into 26-bit halves);
#: a zero keeps v's sign (ROUND(-0.3) is -0.0); x itself where v overflows. Spark's ROUND of a DOUBLE
#: rounds its shortest text instead, and loses the sign of a zero.
_DOUBLE_ROUND = """
CASE
  WHEN isnan(__dpkit_x * {m}) OR abs(__dpkit_x * {m}) = CAST('Infinity' AS DOUBLE) THEN __dpkit_x
  ELSE element_at(transform(array(CAST(CASE
    WHEN __dpkit_x * {m} - FLOOR(__dpkit_x * {m}) <> CAST('0.5' AS DOUBLE) THEN ROUND(__dpkit_x * {m})
    WHEN {error} < 0 THEN FLOOR(__dpkit_x * {m})
    WHEN {error} > 0 OR __dpkit_x * {m} > 0 THEN FLOOR(__dpkit_x * {m}) + 1
    ELSE FLOOR(__dpkit_x * {m}) END AS DOUBLE)),
    __dpkit_r -> CASE WHEN __dpkit_r = 0 THEN __dpkit_x * {m} * CAST('0' AS DOUBLE) ELSE __dpkit_r END / {m}), 1)
END
"""


@functools.lru_cache(maxsize=16)
def _double_round_template(digits: int) -> Any:
    """The Spark tree of DuckDB's ROUND(__dpkit_x, ``digits``) of a DOUBLE (see ``_DOUBLE_ROUND``)."""
    import sqlglot

    def double(value: float) -> str:
        return f"CAST('{value!r}' AS DOUBLE)"

    modifier = 10.0**digits  # (C's pow, as DuckDB's std::pow)
    split = 134217729.0 * modifier
    high = split - (split - modifier)
    low = modifier - high
    x_split = "(CAST('134217729' AS DOUBLE) * __dpkit_x)"
    x_high = f"({x_split} - ({x_split} - __dpkit_x))"
    x_low = f"(__dpkit_x - {x_high})"
    error = (
        f"((({x_high} * {double(high)} - __dpkit_x * {double(modifier)}) + {x_high} * {double(low)} "
        f"+ {x_low} * {double(high)}) + {x_low} * {double(low)})"
    )
    return sqlglot.parse_one(_DOUBLE_ROUND.format(m=double(modifier), error=error), read="spark")


def _pow(node: Any) -> Any:
    """DuckDB's POW (C's pow) for Spark (Java's Math.pow): pow(1, y) is 1 for every y, NaN too, and
    pow(-1, +-inf) is 1, where Java gives NaN."""
    from sqlglot import exp

    def body(base: Any, exponent: Any) -> Any:
        one = exp.and_(
            exp.Not(this=exp.Is(this=exponent.copy(), expression=exp.Null())),
            exp.or_(
                exp.EQ(this=base.copy(), expression=_double_literal("1")),
                exp.and_(
                    exp.EQ(this=base.copy(), expression=_double_literal("-1")),
                    exp.EQ(this=exp.Abs(this=exponent.copy()), expression=_double_literal("Infinity")),
                ),
            ),
        )
        return exp.paren(
            exp.Case().when(one, _double_literal("1")).else_(exp.Pow(this=base.copy(), expression=exponent.copy()))
        )

    cast = [exp.Cast(this=part, to=exp.DataType.build("DOUBLE")) for part in (node.this, node.expression)]
    return _bound(cast, body)


#: DuckDB's SUBSTRING(s, offset, length) (codepoints), for Spark: the characters in [base, base + length)
#: (or [base + length, base) for a negative length) that lie in the text, with base = offset - 1 for
#: offset > 0, n + offset for offset < 0 (n the text's length) and -1 for offset 0; no length is
#: 2^32 - 1. An offset or a length outside [-2^32, 2^32 - 1] fails (NULL here: see failing_operands).
#: Spark's own substring reads offset 0 as 1 and gives '' for a negative length.
_SUBSTRING = """
CASE
  WHEN __dpkit_s IS NULL OR __dpkit_o IS NULL OR __dpkit_l IS NULL THEN NULL
  WHEN __dpkit_o < -4294967296 OR __dpkit_o > 4294967295 OR __dpkit_l < -4294967296 OR __dpkit_l > 4294967295
    THEN NULL
  ELSE element_at(transform(array(
    CASE WHEN __dpkit_o > 0 THEN __dpkit_o - 1 WHEN __dpkit_o < 0 THEN char_length(__dpkit_s) + __dpkit_o ELSE -1 END),
    __dpkit_b -> CASE
      WHEN GREATEST(CASE WHEN __dpkit_l > 0 THEN __dpkit_b ELSE __dpkit_b + __dpkit_l END, 0)
        >= LEAST(CASE WHEN __dpkit_l > 0 THEN __dpkit_b + __dpkit_l ELSE __dpkit_b END, char_length(__dpkit_s))
        THEN ''
      ELSE substring(__dpkit_s,
        CAST(GREATEST(CASE WHEN __dpkit_l > 0 THEN __dpkit_b ELSE __dpkit_b + __dpkit_l END, 0) + 1 AS INT),
        CAST(LEAST(CASE WHEN __dpkit_l > 0 THEN __dpkit_b + __dpkit_l ELSE __dpkit_b END, char_length(__dpkit_s))
          - GREATEST(CASE WHEN __dpkit_l > 0 THEN __dpkit_b ELSE __dpkit_b + __dpkit_l END, 0) AS INT))
    END), 1)
END
"""


@functools.lru_cache(maxsize=1)
def _substring_template() -> Any:
    import sqlglot

    return sqlglot.parse_one(_SUBSTRING, read="spark")


def _substring(node: Any, integer_positions: bool) -> Any:
    """DuckDB's SUBSTRING for Spark (``_SUBSTRING``); positions must be integers (DuckDB would round
    a DOUBLE or a DECIMAL to one), else the expression is refused on Spark."""
    from sqlglot import exp

    start, length = node.args.get("start"), node.args.get("length")
    if not integer_positions:
        raise InvalidParameterError(
            "condition",
            node.sql(dialect="duckdb"),
            "cannot run on the Spark backend as on DuckDB: give SUBSTRING integer positions (CAST them AS BIGINT)",
        )
    if start is None:
        return node
    length = length if length is not None else exp.Literal.number(4294967295)

    def body(text: Any, offset: Any, count: Any) -> Any:
        tree = _substring_template().copy()
        for column in list(tree.find_all(exp.Column)):
            if not column.table and column.name in ("__dpkit_s", "__dpkit_o", "__dpkit_l"):
                column.replace({"__dpkit_s": text, "__dpkit_o": offset, "__dpkit_l": count}[column.name].copy())
        return exp.paren(tree)

    bigint = exp.DataType.build("BIGINT")
    return _bound([node.this, exp.Cast(this=start, to=bigint), exp.Cast(this=length, to=bigint)], body)


def _double_round(node: Any) -> Any:
    """DuckDB's ROUND(x, d) of a DOUBLE, for Spark (``_DOUBLE_ROUND``): ROUND(1.115, 2) is 1.11 in
    DuckDB (the exact product is below 111.5), 1.12 in Spark."""
    from sqlglot import exp

    digits = node.args.get("decimals")  # (none: 0, and then v = x exactly)
    negative = isinstance(digits, exp.Neg)
    count = 0 if digits is None else int(float((digits.this if negative else digits).this))
    template = _double_round_template(-count if negative else count)
    return _bound(
        [exp.Cast(this=node.this, to=exp.DataType.build("DOUBLE"))], lambda value: _with_value(template, value)
    )


@functools.lru_cache(maxsize=1)
def _number_types() -> frozenset[Any]:
    """sqlglot's types of numbers (DuckDB cannot cast a date or time to one of them)."""
    from sqlglot import exp

    names: tuple[str, ...] = (
        "TINYINT",
        "SMALLINT",
        "INT",
        "BIGINT",
        "FLOAT",
        "DOUBLE",
        "DECIMAL",
        "INT128",
        "UTINYINT",
    )
    names += ("USMALLINT", "UINT", "UBIGINT", "UINT128", "BIGDECIMAL")
    return frozenset(getattr(exp.DataType.Type, name) for name in names if hasattr(exp.DataType.Type, name))


#: The most digits of a DECIMAL a DOUBLE is cast to on Spark: below 2^53 the scaled value is an exact integer.
_REAL_DECIMAL_DIGITS = 15


def _real_to_decimal(node: Any, source: str) -> Any:
    """DuckDB's CAST(x AS DECIMAL(p, s)) of a DOUBLE, for Spark: x * 10^s in double precision, rounded
    half away from zero (Spark reads the double's shortest text instead: 1.005 to DECIMAL(10, 2) is
    1.00 in DuckDB, 1.01 in Spark), NULL where it does not fit (DuckDB fails the cast: see
    ``failing_operands``). Refused for a FLOAT, and above 15 digits, where the scaled value is not
    an exact integer in double precision and Spark cannot write it out."""
    from sqlglot import exp

    parameters = [int(p.this.this) for p in node.to.expressions if isinstance(p.this, exp.Literal)]
    # (DuckDB's DECIMAL without a width is DECIMAL(18, 3); DECIMAL(p) has scale 0)
    precision, scale = (parameters + [0])[:2] if parameters else (18, 3)
    if source != "double" or precision > _REAL_DECIMAL_DIGITS:
        raise InvalidParameterError(
            "condition",
            node.sql(dialect="duckdb"),
            "cannot run on the Spark backend as on DuckDB: a "
            + (
                "FLOAT"
                if source != "double"
                else f"DOUBLE cast to a DECIMAL of more than {_REAL_DECIMAL_DIGITS} digits"
            )
            + " is rounded differently by the two engines; cast a DOUBLE to DECIMAL(15, s) or less, or use the "
            "DuckDB backend",
        )
    to = exp.DataType.build(f"DECIMAL({precision}, {scale})")

    def body(value: Any) -> Any:
        scaled = exp.Round(
            this=exp.Mul(
                this=value.copy(),
                expression=_double_literal(f"1e{scale}"),
            )
        )
        unit = exp.Cast(this=exp.Literal.string(f"1e-{scale}"), to=exp.DataType.build(f"DECIMAL({scale + 1}, {scale})"))
        whole = exp.Cast(
            this=exp.Cast(this=scaled.copy(), to=exp.DataType.build("BIGINT")),
            to=exp.DataType.build(f"DECIMAL({precision}, 0)"),
        )
        outside = exp.or_(
            exp.Anonymous(this="isnan", expressions=[value.copy()]),
            exp.GTE(
                this=exp.Abs(this=scaled),
                expression=_double_literal(f"1e{precision}"),
            ),
        )
        return exp.paren(
            exp.Case().when(outside, exp.Null()).else_(exp.Cast(this=exp.Mul(this=whole, expression=unit), to=to))
        )

    return _bound([exp.Cast(this=node.this, to=exp.DataType.build("DOUBLE"))], body)


def _double_literal(text: str) -> Any:
    """CAST('text' AS DOUBLE): a DOUBLE constant written exactly (a decimal literal is a DECIMAL in Spark)."""
    from sqlglot import exp

    return exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build("DOUBLE"))


def _value_type(node: Any, types: Mapping[str, str]) -> str | None:
    """The Spark type name of ``node`` when it is plain to see (a column, a cast), else None."""
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return _value_type(node.this, types)
    if isinstance(node, exp.Column):
        return types.get(node.name.casefold())
    if isinstance(node, exp.Cast):
        return str(node.to.sql(dialect="spark")).lower()
    return None


def spark_semantics(tree: Any, types: Mapping[str, str]) -> Any:
    """DuckDB's semantics for the nodes where Spark's differ (``types``: see ``SparkBackend._column_types``).

    - ``a / b`` divides as doubles (DuckDB divides integers and decimals as DOUBLE; Spark as DECIMAL
      for decimals, a few digits only), and inside a filter a division by zero gives DuckDB's
      IEEE result (+-inf, NaN) instead of Spark's NULL;
    - a cast to an integer type rounds (DOUBLE: half to even; DECIMAL and text: half away from zero)
      where Spark truncates, and a value out of the type's range gives NULL where Spark wraps or
      saturates (DuckDB fails the cast: the filter's TRY excludes the row);
    - FLOOR and CEIL of NaN, an infinity or a DOUBLE beyond 2^63 are that value (Spark: a clipped
      BIGINT), the sign of NaN is 0, and LEFT / RIGHT with a negative length drop characters;
    - logarithms give -inf at 0 and NaN below it, and LOG(10, x), LOG(2, x) are DuckDB's log10 and
      log2 (see ``logarithm``);
    - in a filter, a cast that fails in DuckDB (NULL from a value that is not NULL, in Spark) makes
      the whole condition NULL, as DuckDB's TRY does (see ``failing_operands``), where DuckDB computes
      it at all (CASE branches, COALESCE's later arguments and AND / OR in a CASE condition only for
      the rows that need them: see ``_failure_scope``);
    - in a filter, integer arithmetic is first rewritten as DuckDB's optimizer rewrites it
      (``_duckdb_rewrites``: ``x + 100 > 0`` is ``x > -100``, never failing), then computed with
      DuckDB's types and overflow checks (``_checked``): an overflow, an integer division or modulo
      by zero, fail the whole condition as in DuckDB (Spark wrapped around); ``//`` of DOUBLEs and
      DECIMALs divides without rounding, and x % 0 of a DOUBLE is NaN; a FLOAT beside a DECIMAL is
      computed as FLOAT (Spark: DOUBLE);
    - text is read as DuckDB reads it: casts to numbers and booleans follow DuckDB's syntax (0x1F,
      1_000, no ' true ', no Unicode digits), text compared with another type is cast as DuckDB's
      binder casts it, as is a text constant among the values of a CASE, IF, COALESCE, GREATEST or
      LEAST (``_coerced_values``), and what Spark cannot read alike (dates and times from text, TIME,
      TIMESTAMP WITH TIME ZONE) is refused (``_coerced``);
    - a DOUBLE, BLOB or duration (INTERVAL) cast to text (also by ``||`` and CONCAT) is written as
      DuckDB writes it: the private
      group keys are ranked by a hash of that text, so both engines must keep the same groups of a
      person (FLOAT and zoned timestamp keys are refused instead: ``check_spark_keys``).
    """
    from sqlglot import exp

    def double(node: Any) -> Any:
        return exp.Cast(this=node, to=exp.DataType.build("DOUBLE"))

    def call(name: str, *arguments: Any) -> Any:
        return exp.Anonymous(this=name, expressions=list(arguments))

    def logarithm(node: Any) -> Any:
        """DuckDB's logarithms: -inf at 0 and NaN below (Spark: NULL), inf at inf; base 10 and 2 as exact as
        DuckDB's log10 and log2 (Spark's LOG(2, x) is ln(x) / ln(2): FLOOR(LOG2(2^-39)) gave -40,
        putting a power of two in the next bin of the automatic bounds' histogram)."""
        if isinstance(node, exp.Ln):
            base, value = None, node.this
        else:
            base, value = node.this, node.expression
        if isinstance(base, exp.Literal) and base.this == "10":
            result = call("log10", value.copy())
        elif isinstance(base, exp.Literal) and base.this == "2":
            # e = floor(log2 x) exactly (ln(x) / ln(2) can be off by one), then e + log2(x / 2^e).
            guess = exp.Floor(
                this=exp.Div(this=exp.Ln(this=value.copy()), expression=exp.Ln(this=exp.Literal.number(2)))
            )
            power = call("pow", exp.Literal.number(2), exp.Add(this=guess.copy(), expression=exp.Literal.number(1)))
            below = call("pow", exp.Literal.number(2), guess.copy())
            exponent = exp.paren(
                exp.Add(
                    this=guess,
                    expression=exp.Case()
                    .when(exp.LTE(this=power, expression=value.copy()), exp.Literal.number(1))
                    .when(exp.GT(this=below, expression=value.copy()), exp.Literal.number(-1))
                    .else_(exp.Literal.number(0)),
                )
            )
            # m = x / 2^e in [1, 2): e + log2 m from ln m when m < 1.5, else (e + 1) + log2(m / 2) from
            # ln(m / 2): each logarithm is near 0, where it is accurate to its last bits, and is added
            # to the integer it is closest to (one rounding, as a correctly rounded log2 has).
            # (x / 2^e, not x * 2^-e: 2^1074 overflows, 2^-1074 does not; dividing by 2^e is exact)
            scaled = exp.Div(this=value.copy(), expression=call("pow", exp.Literal.number(2), exponent.copy()))
            ln2 = exp.Ln(this=exp.Literal.number(2))
            result = exp.paren(
                exp.Case()
                .when(
                    exp.LT(this=scaled.copy(), expression=exp.Literal.number(1.5)),
                    exp.Add(
                        this=exponent.copy(), expression=exp.Div(this=exp.Ln(this=scaled.copy()), expression=ln2.copy())
                    ),
                )
                .else_(
                    exp.Add(
                        this=exp.paren(exp.Add(this=exponent, expression=exp.Literal.number(1))),
                        expression=exp.Div(
                            this=exp.Ln(this=exp.Div(this=scaled, expression=exp.Literal.number(2))), expression=ln2
                        ),
                    )
                )
            )
        elif base is None:
            result = exp.Ln(this=value.copy())
        else:
            result = exp.Log(this=base, expression=value.copy())
        return exp.paren(
            exp.Case()
            .when(exp.EQ(this=value.copy(), expression=exp.Literal.number(0)), _double_literal("-Infinity"))
            .when(exp.EQ(this=value.copy(), expression=_double_literal("Infinity")), _double_literal("Infinity"))
            .when(exp.LT(this=value.copy(), expression=exp.Literal.number(0)), _double_literal("NaN"))
            .else_(result)
        )

    def adjust(node: Any) -> Any:
        duck_kind = arithmetic.get(id(node))
        if duck_kind in _DUCK_INTEGERS:
            checked = _checked(node, duck_kind)
            return node if checked is None else checked
        if duck_kind is not None and isinstance(node, exp.IntDiv):
            return _real_division(node, duck_kind)
        if duck_kind in ("DOUBLE", "FLOAT") and isinstance(node, exp.Mod):
            return _real_modulo(node)
        if duck_kind == "DOUBLE" and isinstance(node, exp.Round):
            return _double_round(node)
        if type(node) in _comparisons() and not isinstance(node, exp.NullSafeEQ | exp.NullSafeNEQ):
            for side, other in ((node.this, node.expression), (node.expression, node.this)):
                number = _int_literal(side)
                if number is not None and not _fits(number, "BIGINT") and _int_literal(other) is None:
                    # Spark answers x > -10^19 TRUE (x < -10^19 FALSE) also where x is NULL.
                    unknown = exp.Is(this=exp.paren(other.copy()), expression=exp.Null())
                    return exp.paren(exp.Case().when(unknown, exp.Null()).else_(node))
        if isinstance(node, exp.Cast) and isinstance(node.this, exp.Sum) and node.to.this == exp.DataType.Type.DECIMAL:
            # CAST(SUM(x) AS DECIMAL(38, 0)), the released sums: Spark adds BIGINTs as BIGINT and,
            # ANSI mode off, wraps past 2^63 (DuckDB adds them as a 128-bit integer). Summed as
            # DECIMAL instead; beyond 38 digits Spark gives NULL, which the backend refuses.
            summed = node.this
            return exp.Sum(this=exp.Cast(this=summed.this, to=node.to.copy()))
        if isinstance(node, exp.Ln | exp.Log):
            return logarithm(node)
        if isinstance(node, exp.Pow):
            return _pow(node)
        if isinstance(node, exp.Substring) and id(node) in substrings:
            return _substring(node, substrings[id(node)])
        if isinstance(node, exp.Floor | exp.Ceil) and node.args.get("decimals") is None:
            # Spark's FLOOR and CEIL of a DOUBLE are BIGINTs (NaN -> 0, inf and 1e20 -> 2^63 - 1);
            # DuckDB's stay DOUBLE. NaN, infinities and values beyond 2^63 are their own floor.
            value = node.this
            kept = exp.or_(
                call("isnan", value.copy()),
                exp.GTE(this=exp.Abs(this=value.copy()), expression=exp.Literal.number("9.2E18")),
            )
            if node.find_ancestor(exp.Try) is None:  # (the engine's own bins: finite values)
                return exp.paren(exp.Case().when(kept, value.copy()).else_(type(node)(this=value)))
            if id(node) not in real_floors:
                return node  # (a DECIMAL: no NaN, no infinity, no sign on its zero)
            # A zero keeps the sign of the value (CEIL(-0.5) is -0.0, as in C); of an integer, DuckDB's
            # FLOOR and CEIL are DOUBLEs too, where Spark's stay integers.
            rounded = type(node)(this=value.copy())
            zero_kept = exp.Case().when(
                exp.EQ(this=rounded.copy(), expression=exp.Literal.number(0)),
                exp.Mul(this=double(value.copy()), expression=exp.Literal.number(0)),
            )
            return double(exp.paren(exp.Case().when(kept, value.copy()).else_(exp.paren(zero_kept.else_(rounded)))))
        if isinstance(node, exp.Sign):
            # DuckDB's sign of NaN is 0; Spark's NaN. DuckDB's sign is a TINYINT; Spark's a DOUBLE.
            value = node.this
            sign = exp.Case().when(call("isnan", value.copy()), exp.Literal.number(0)).else_(exp.Sign(this=value))
            return exp.Cast(this=exp.paren(sign), to=exp.DataType.build("TINYINT"))
        if isinstance(node, exp.Left | exp.Right):
            # DuckDB: LEFT(s, -n) is s without its last n characters, RIGHT(s, -n) without its first n;
            # Spark gives ''. The count is clamped to Spark's INT positions (no text is longer), and a
            # LEFT past 2^32 - 1 characters fails in DuckDB (NULL here: see failing_operands).
            given, text = node.expression, node.this
            lowest, highest = (
                exp.Literal.number(-2147483646),
                exp.Literal.number(2147483647),
            )  # (1 - lowest fits an INT)
            count = exp.paren(  # (a CASE keeps NULL NULL: Spark's GREATEST and LEAST skip it)
                exp.Case()
                .when(exp.LT(this=given.copy(), expression=lowest.copy()), lowest.copy())
                .when(exp.GT(this=given.copy(), expression=highest.copy()), highest.copy())
                .else_(given.copy())
            )
            negative = exp.LT(this=count.copy(), expression=exp.Literal.number(0))
            if isinstance(node, exp.Left):
                length = exp.Greatest(
                    this=exp.Add(this=exp.Length(this=text.copy()), expression=count.copy()),
                    expressions=[exp.Literal.number(0)],
                )
                trimmed = exp.Substring(this=text.copy(), start=exp.Literal.number(1), length=length)
            else:
                trimmed = exp.Substring(
                    this=text.copy(), start=exp.Sub(this=exp.Literal.number(1), expression=count.copy())
                )
            kept = exp.Case().when(negative, trimmed).else_(type(node)(this=text.copy(), expression=count))
            if isinstance(node, exp.Left):
                beyond = exp.GT(this=node.expression.copy(), expression=exp.Literal.number(4294967295))
                kept = exp.Case().when(beyond, exp.Null()).else_(exp.paren(kept))
            return exp.paren(kept)
        if isinstance(node, exp.Div):
            left, right = double(node.this), double(node.expression)
            quotient = exp.Div(this=left, expression=right)
            if node.find_ancestor(exp.Try) is None:
                return quotient
            # x / 0: NaN for x 0 or NaN, else an infinity with the sign of x times the zero's sign, read
            # from its text ('-0.0'; Spark's atan2 adds 0.0 to its arguments, which drops that sign).
            positive_zero = exp.Not(
                this=exp.Anonymous(
                    this="startswith",
                    expressions=[exp.Cast(this=right.copy(), to=exp.DataType.build("STRING")), exp.Literal.string("-")],
                )
            )
            signed = exp.EQ(
                this=exp.paren(exp.GT(this=left.copy(), expression=exp.Literal.number(0))),
                expression=exp.paren(positive_zero),
            )
            ieee = (
                exp.Case()
                .when(exp.Is(this=left.copy(), expression=exp.Null()), exp.Null())
                .when(
                    exp.or_(
                        exp.EQ(this=left.copy(), expression=exp.Literal.number(0)),
                        exp.Anonymous(this="isnan", expressions=[left.copy()]),
                    ),
                    _double_literal("NaN"),
                )
                .when(signed, _double_literal("Infinity"))
                .else_(_double_literal("-Infinity"))
            )
            zero = exp.EQ(this=right.copy(), expression=exp.Literal.number(0))
            return exp.paren(exp.Case().when(zero, ieee).else_(quotient))
        if not isinstance(node, exp.Cast) or _int_constant(node) is not None:
            return node  # (an integer constant of the type needs nothing)
        target = node.to.this
        if id(node) in unsupported_casts:
            # DuckDB has no cast from a date or time to a number: it fails on every row (the filter or
            # derived value is NULL); Spark would give seconds since 1970.
            return exp.Cast(this=exp.Null(), to=node.to.copy())
        # (an operand rewritten above, e.g. checked arithmetic, has DuckDB's type, found before)
        source = _value_type(node.this, types) or cast_sources.get(id(node))
        if target == exp.DataType.Type.FLOAT and source == "double":
            # DuckDB fails to cast a finite DOUBLE beyond the FLOAT range (NULL: see failing_operands);
            # Spark gives an infinity.
            return _bound(
                [node.this],
                lambda value: exp.paren(
                    exp.Case()
                    .when(
                        exp.and_(
                            exp.Not(this=call("isnan", value.copy())),
                            exp.GT(
                                this=exp.Abs(this=value.copy()), expression=_double_literal("3.4028234663852886e38")
                            ),
                            exp.NEQ(this=exp.Abs(this=value.copy()), expression=_double_literal("Infinity")),
                        ),
                        exp.Null(),
                    )
                    .else_(exp.Cast(this=value.copy(), to=node.to.copy()))
                ),
            )
        if target in (exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR) and source == "double":
            return _with_value(_double_text_template(), node.this)
        if target in (exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR) and source is not None:
            scale = decimal_scale(source) if source != "decimal" else None  # ("decimal": an expression's)
            if scale or source == "decimal":
                # DuckDB writes a DECIMAL with all its scale's digits, never an exponent; Spark's
                # BigDecimal text has one below 1e-6 ('1E-8', '0E-8', '-1.5E-7'), written out here.
                return _with_value(_decimal_text_template(scale), node.this)
            # (FLOAT, BLOB and duration keys are ranked by this text too)
            template = "interval" if source.startswith("interval day") else source
            if template in ("float", "binary", "interval"):
                return _with_value(_text_template(template), node.this)
        if target == exp.DataType.Type.DECIMAL and source in ("double", "float"):
            return _real_to_decimal(node, source)
        textual = source is not None and (source == "string" or source.startswith(("varchar", "char")))
        if textual and target.name in ("DOUBLE", "FLOAT", "DECIMAL", "BOOLEAN"):
            # Text read as DuckDB reads it (Spark also takes '1.5d', '0x1p3', ' true ', Unicode digits...).
            return _text_cast(node)
        # DuckDB's unsigned and 128-bit integers: Spark's next wider type, with DuckDB's range.
        spark_name, bounds = _UNSIGNED_CASTS.get(target.name, (None, None))
        spark_to = exp.DataType.build(spark_name) if spark_name is not None else None
        if spark_to is not None:
            if bounds is None or source is None:
                value = node.this
                if textual:
                    value = _text_integer(value)
                elif source in ("double", "float"):
                    value = exp.Anonymous(this="bround", expressions=[value])  # DuckDB: half to even
                return type(node)(this=value, to=spark_to)
        else:
            bounds = _INTEGER_RANGES.get(str(node.to.sql(dialect="spark")).upper())
        if bounds is None or source is None:
            return node
        value = node.this
        if source in ("double", "float"):
            value = exp.Anonymous(this="bround", expressions=[value])
        elif source.startswith("decimal"):
            value = exp.Round(this=value)
        elif textual:
            value = _text_integer(value)
        elif source in _INTEGER_RANGES_BY_NAME:
            low, high = _INTEGER_RANGES[_INTEGER_RANGES_BY_NAME[source]]
            if bounds[0] <= low and high <= bounds[1]:
                # a wider type: nothing to check
                return node if spark_to is None else type(node)(this=node.this, to=spark_to)
        else:
            return node if spark_to is None else type(node)(this=node.this, to=spark_to)
        if spark_to is None:
            # A type Spark has: TRY_CAST gives NULL out of its range (and for NaN), the value computed once.
            return exp.TryCast(this=value, to=node.to.copy(), safe=True)
        return _bound(
            [value],
            lambda bound: exp.paren(
                exp.Case().when(
                    exp.and_(
                        exp.GTE(this=bound.copy(), expression=exp.Literal.number(bounds[0])),
                        exp.LT(this=bound.copy(), expression=exp.Literal.number(bounds[1])),
                    ),
                    exp.Cast(this=bound, to=spark_to),
                )
            ),
        )

    def failing_operands(node: Any) -> list[Any] | None:
        """The operands of ``node`` when it can fail in DuckDB (then, in Spark, it gives NULL from operands
        that are not NULL), else None.

        DuckDB fails a cast it cannot make (text that does not parse, a value out of range), integer
        arithmetic that overflows, and an integer division or modulo by zero (any // by zero); the
        TRY around the filter then gives NULL for the whole condition. Spark, ANSI mode off, gives
        NULL for that node alone (once rewritten), which ``x IS NULL``, ``NOT``, ``OR`` or COALESCE
        could turn into TRUE.
        """
        if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
            if node.to.this in (exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR) or _int_constant(node) is not None:
                return None  # never fails
            return [node.this]
        if isinstance(node, exp.Left):  # past 2^32 - 1 characters
            return [node.this, node.expression]
        if isinstance(node, exp.Substring):  # positions beyond +-2^32 (see _substring)
            return [part for part in (node.this, node.args.get("start"), node.args.get("length")) if part is not None]
        kind = arithmetic.get(id(node))
        if kind is None or not (
            kind in _DUCK_INTEGERS
            or isinstance(node, exp.IntDiv)
            or (kind == "DECIMAL" and isinstance(node, exp.Mod | exp.Add | exp.Sub | exp.Mul))
        ):
            return None
        return [node.this] if node.args.get("expression") is None else [node.this, node.expression]

    # DuckDB's || and CONCAT cast a number to text as DuckDB writes it ('inf', '1e+20'); Spark's as
    # Java does ('Infinity', '1.0E20'). The casts are made explicit, for the rewrite of casts to text below.
    for joined in list(tree.find_all(exp.DPipe, exp.Concat)):
        if joined.find_ancestor(exp.Try) is None:
            continue
        parts = [joined.this, joined.expression] if isinstance(joined, exp.DPipe) else list(joined.expressions)
        for part in parts:
            if _duck_kind(part, types) not in (None, "VARCHAR"):
                part.replace(exp.Cast(this=part.copy(), to=exp.DataType.build("VARCHAR")))
    # The filters as DuckDB's optimizer runs them, and DuckDB's types of their arithmetic (read before
    # any node is rewritten).
    filters = {}  # id(TRY node) -> the filter's text (for a refusal)
    for try_node in list(tree.find_all(exp.Try)):
        filters[id(try_node)] = try_node.this.sql(dialect="duckdb")
        try:
            try_node.set("this", _duckdb_rewrites(try_node.this, types))
        except _Refused as refusal:
            raise InvalidParameterError(
                "condition", filters[id(try_node)], f"cannot run on the Spark backend as on DuckDB: {refusal}"
            ) from None
    arithmetic: dict[int, str] = {}  # id(node) -> DuckDB's type, for the arithmetic in filters
    cast_sources: dict[int, str] = {}  # id(cast) -> Spark's name of its operand's DuckDB type
    substrings: dict[int, bool] = {}  # id(SUBSTRING) -> whether its positions are integers
    real_floors: set[int] = set()  # id(FLOOR or CEIL) whose DuckDB type is DOUBLE
    unsupported_casts: set[int] = set()  # id(cast) DuckDB cannot make (a date or time to a number)
    for try_node in tree.find_all(exp.Try):
        for node in try_node.this.walk():
            if _unsigned_beside_integers(node, types):
                raise InvalidParameterError(
                    "condition",
                    filters.get(id(try_node), try_node.this.sql(dialect="duckdb")),
                    "cannot run on the Spark backend as on DuckDB: it computes with a cast to an unsigned integer "
                    "type beside integers, which DuckDB types by rules of its own (UTINYINT - TINYINT is a BIGINT, "
                    "UHUGEINT - TINYINT a DOUBLE); cast to BIGINT, DECIMAL or DOUBLE, or use the DuckDB backend",
                )
            if isinstance(node, exp.Cast):
                source = _duck_kind(node.this, types)
                if source in _SPARK_NAMES:
                    cast_sources[id(node)] = _SPARK_NAMES[source]
                temporal = source in ("DATE", "TIMESTAMP", "TIMESTAMPTZ", "TIME") or isinstance(
                    _unparen(node.this), exp.DateTrunc | exp.TimestampTrunc
                )
                if temporal and node.to.this in _number_types():
                    unsupported_casts.add(id(node))
            elif isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.IntDiv | exp.Mod | exp.Neg | exp.Abs | exp.Round):
                if _int_literal(node) is not None:
                    continue
                kind = _duck_type(node, types)
                if kind is not None:
                    arithmetic[id(node)] = kind
            elif isinstance(node, exp.Floor | exp.Ceil) and _duck_type(node, types) == "DOUBLE":
                real_floors.add(id(node))
            elif isinstance(node, exp.Substring):
                positions = [node.args.get("start"), node.args.get("length")]
                substrings[id(node)] = all(
                    p is None or _int_literal(p) is not None or _duck_type(p, types) in _DUCK_INTEGERS
                    for p in positions
                )

    # DuckDB computes a FLOAT beside a DECIMAL as FLOAT (Spark: DOUBLE): the DECIMAL is cast first, and
    # Spark's FLOAT arithmetic is then DuckDB's (a sum, difference or product of two FLOATs is the same
    # rounded to FLOAT or computed in FLOAT).
    for try_node in tree.find_all(exp.Try):
        for node in list(try_node.this.walk()):
            if not isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Greatest | exp.Least | exp.Coalesce):
                continue
            if _duck_type(node, types) != "FLOAT":
                continue
            for operand in _value_operands(node):
                if operand is not None and _duck_type(operand, types) == "DECIMAL":
                    operand.replace(
                        exp.Cast(this=exp.paren(operand.copy(), copy=False), to=exp.DataType.build("FLOAT"))
                    )
    # id(TRY node) -> (the node, [(guards, operands, the node's Spark form)] for the nodes that can fail)
    failures: dict[int, tuple[Any, list[tuple[list[Any], list[Any], Any]]]] = {}
    # Children first: a node's adjusted children are kept when the node itself is replaced.
    for node in reversed(list(tree.walk())):
        operands = failing_operands(node)
        scope = _failure_scope(node) if operands is not None else None
        operands = [operand.copy() for operand in operands] if scope is not None and operands is not None else []
        replacement = adjust(node)
        if replacement is not node:
            if node is tree:
                tree = replacement
            else:
                node.replace(replacement)
        if scope is not None:
            condition, guards = scope
            failures.setdefault(id(condition), (condition, []))[1].append((guards, operands, replacement.copy()))
    for condition, failing in failures.values():
        # Any of them failed (where DuckDB computes it: ``guards``, built from the final tree): the whole
        # condition is NULL (the row is left out), as in DuckDB.
        failed = [
            exp.and_(
                *(guard() for guard in guards),
                *(
                    exp.Not(this=exp.Is(this=exp.paren(operand), expression=exp.Null()))
                    for operand in operands
                    if not (isinstance(_unparen(operand), exp.Literal) or _int_literal(operand) is not None)
                ),
                exp.Is(this=exp.paren(result), expression=exp.Null()),
            )
            for guards, operands, result in failing
        ]
        condition.set("this", exp.paren(exp.Case().when(exp.or_(*failed), exp.Null()).else_(condition.this)))
    for try_node in tree.find_all(exp.Try):
        if sum(1 for _ in try_node.walk()) > _FILTER_NODES:
            raise InvalidParameterError(
                "condition",
                filters.get(id(try_node), try_node.this.sql(dialect="duckdb")),
                "is too complex for the Spark backend once written with DuckDB's overflow and cast checks; "
                "simplify it (fewer nested integer operations and casts) or use the DuckDB backend",
            )
    return tree


def _unsigned_beside_integers(node: Any, types: Mapping[str, str]) -> bool:
    """Whether ``node`` computes with a value cast to an unsigned integer type other than in real (DOUBLE,
    FLOAT or DECIMAL) arithmetic, the case the Spark text gives as DuckDB (``f % CAST(b AS UTINYINT)``)."""
    from sqlglot import exp

    computed = (exp.Add, exp.Sub, exp.Mul, exp.IntDiv, exp.Mod, exp.Neg, exp.Abs, exp.Greatest, exp.Least, exp.Coalesce)
    if not isinstance(node, (*computed, exp.Case, exp.If)):
        return False
    if not any(operand is not None and _duck_type(operand, types) == "UNSIGNED" for operand in _value_operands(node)):
        return False
    return _duck_type(node, types) not in ("DOUBLE", "FLOAT", "DECIMAL")


def _value_operands(node: Any) -> list[Any]:
    """The operands whose types make ``node``'s value type (None where absent): a CASE's values and ELSE,
    an IF's two values (none for the branch of a CASE, typed with its CASE), an operator's or function's
    arguments."""
    from sqlglot import exp

    if isinstance(node, exp.Case):
        return [branch.args.get("true") for branch in node.args["ifs"]] + [node.args.get("default")]
    if isinstance(node, exp.If):
        return [] if node.arg_key == "ifs" else [node.args.get("true"), node.args.get("false")]
    return [node.this, node.args.get("expression"), *(node.args.get("expressions") or [])]


_INTEGER_RANGES_BY_NAME = {"tinyint": "TINYINT", "smallint": "SMALLINT", "int": "INT", "bigint": "BIGINT"}


# -- DuckDB's integer arithmetic in a filter, for Spark ---------------------------------------------
# DuckDB fails an integer operation that overflows its type (and an integer division or modulo by
# zero); the filter's TRY then makes the whole condition NULL and the row is left out. Spark, ANSI
# mode off, wraps around instead. DuckDB's optimizer first rewrites some comparisons with constants,
# though, and the rewritten ones never fail: ``x + 100 > 0`` is read as ``x > -100`` (exact for every
# x), ``x * 2 = 1`` as FALSE. The Spark text repeats those rewrites (``_duckdb_rewrites``), then
# computes the integer arithmetic left with overflow checks (``_checked``); a failed check fails the
# whole filter, as in DuckDB (see ``spark_semantics``).

#: DuckDB's signed integer types (named as sqlglot names the ones Spark shares) and their ranges [low, high).
_DUCK_INTEGERS = {
    "TINYINT": (-(2**7), 2**7),
    "SMALLINT": (-(2**15), 2**15),
    "INT": (-(2**31), 2**31),
    "BIGINT": (-(2**63), 2**63),
    "HUGEINT": (-(2**127), 2**127),
}
_DUCK_ORDER = tuple(_DUCK_INTEGERS)
#: DuckDB's type -> Spark's name of the type a value of it has in the Spark text (see ``_value_type``).
_SPARK_NAMES = {
    "TINYINT": "tinyint",
    "SMALLINT": "smallint",
    "INT": "int",
    "BIGINT": "bigint",
    "HUGEINT": "decimal(38,0)",
    "DOUBLE": "double",
    "FLOAT": "float",
    "DECIMAL": "decimal",
    "VARCHAR": "string",
    "BOOLEAN": "boolean",
}
#: A cast to a DuckDB integer type Spark lacks: sqlglot's name -> (Spark's type, DuckDB's range or None).
#: (Beyond 10^38 the DECIMAL gives NULL where DuckDB's 128-bit integers go on.)
_UNSIGNED_CASTS: dict[str, tuple[str, tuple[int, int] | None]] = {
    "UTINYINT": ("SMALLINT", (0, 2**8)),
    "USMALLINT": ("INT", (0, 2**16)),
    "UINT": ("BIGINT", (0, 2**32)),
    "UBIGINT": ("DECIMAL(20, 0)", (0, 2**64)),
    "INT128": ("DECIMAL(38, 0)", None),
    "UINT128": ("DECIMAL(38, 0)", None),
}
#: sqlglot's name of a cast's target type -> DuckDB's type, where arithmetic cares.
_DUCK_CAST_TYPES = {
    "TINYINT": "TINYINT",
    "SMALLINT": "SMALLINT",
    "INT": "INT",
    "BIGINT": "BIGINT",
    "INT128": "HUGEINT",
    "DOUBLE": "DOUBLE",
    "FLOAT": "FLOAT",
    "DECIMAL": "DECIMAL",
}
#: Spark's name of a column's type -> DuckDB's (frames reach both engines with the same types).
_SPARK_DUCK_TYPES = {
    "tinyint": "TINYINT",
    "byte": "TINYINT",
    "smallint": "SMALLINT",
    "short": "SMALLINT",
    "int": "INT",
    "integer": "INT",
    "bigint": "BIGINT",
    "long": "BIGINT",
    "double": "DOUBLE",
    "float": "FLOAT",
    "real": "FLOAT",
}
#: Functions whose DuckDB result is a BIGINT (Spark's is an INT: ``length(s) * 2000000000`` wraps there).
_BIGINT_FUNCTIONS = frozenset({"Length", "StrPosition", "Year", "Month", "Day", "Hour", "Minute", "Second"})
#: Casts DuckDB can strip from a comparison with a constant (the cast back is exact): source -> targets.
_INVERTIBLE_CASTS = {
    "TINYINT": ("SMALLINT", "INT", "BIGINT", "HUGEINT", "DOUBLE", "FLOAT"),
    "SMALLINT": ("INT", "BIGINT", "HUGEINT", "DOUBLE", "FLOAT"),
    "INT": ("BIGINT", "HUGEINT", "DOUBLE"),
    "BIGINT": ("HUGEINT",),
}


@functools.lru_cache(maxsize=1)
def _comparisons() -> dict[Any, Any]:
    """Each comparison operator -> the one with its operands swapped."""
    from sqlglot import exp

    return {
        exp.EQ: exp.EQ,
        exp.NEQ: exp.NEQ,
        exp.GT: exp.LT,
        exp.LT: exp.GT,
        exp.GTE: exp.LTE,
        exp.LTE: exp.GTE,
        exp.NullSafeEQ: exp.NullSafeEQ,
        exp.NullSafeNEQ: exp.NullSafeNEQ,
    }


def _unparen(node: Any) -> Any:
    from sqlglot import exp

    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _int_literal(node: Any) -> int | None:
    """The value of an integer literal (``-5`` included), which DuckDB types as the other operand when it fits."""
    from sqlglot import exp

    node, sign = _unparen(node), 1
    while isinstance(node, exp.Neg):
        node, sign = _unparen(node.this), -sign
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        return sign * int(node.this)
    return None


def _int_constant(node: Any) -> tuple[int, str | None] | None:
    """(value, None) for an integer literal, (value, type) for one cast to an integer type, else None."""
    from sqlglot import exp

    value = _int_literal(node)
    if value is not None:
        return value, None
    node = _unparen(node)
    if isinstance(node, exp.Cast):
        kind = _DUCK_CAST_TYPES.get(node.to.this.name)
        value = _int_literal(node.this)
        if value is not None and kind in _DUCK_INTEGERS and _fits(value, kind):
            return value, kind
    return None


def _fits(value: int, kind: str | None) -> bool:
    if kind not in _DUCK_INTEGERS:
        return False
    low, high = _DUCK_INTEGERS[kind]
    return low <= value < high


def _literal_type(value: int) -> str | None:
    """DuckDB's type of an integer literal on its own (INTEGER at least)."""
    return next((kind for kind in ("INT", "BIGINT", "HUGEINT") if _fits(value, kind)), None)


def _wider(first: str, second: str) -> str:
    return max(first, second, key=_DUCK_ORDER.index)


def _duck_type(node: Any, types: Mapping[str, str]) -> str | None:
    """DuckDB's type of ``node`` in a filter, as far as arithmetic cares: an integer type of
    ``_DUCK_INTEGERS``, DOUBLE, FLOAT, DECIMAL, UNSIGNED (a cast to one of DuckDB's unsigned or 128-bit
    unsigned integers: a real beside it still makes the arithmetic real), or None (another type, or not
    plain to see)."""
    from sqlglot import exp

    node = _unparen(node)
    constant = _int_constant(node)
    if constant is not None:
        return constant[1] or _literal_type(constant[0])
    if isinstance(node, exp.Literal):
        if node.is_string:
            return None
        return "DOUBLE" if "e" in node.this.lower() else "DECIMAL"
    if isinstance(node, exp.Column):
        spark_kind = types.get(node.name.casefold(), "").lower()
        return "DECIMAL" if spark_kind.startswith("decimal") else _SPARK_DUCK_TYPES.get(spark_kind)
    if isinstance(node, exp.Cast):
        name = node.to.this.name
        return _DUCK_CAST_TYPES.get(name) or ("UNSIGNED" if name in _UNSIGNED_CASTS else None)
    if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Mod | exp.IntDiv):
        kind = _duck_common(types, node.this, node.expression)
        # DuckDB's // divides a DOUBLE or a DECIMAL as a DOUBLE (a FLOAT as a FLOAT), without rounding.
        return "DOUBLE" if isinstance(node, exp.IntDiv) and kind == "DECIMAL" else kind
    if isinstance(node, exp.Div | exp.Pow | exp.Sqrt | exp.Ln | exp.Log | exp.Exp):
        return "DOUBLE"
    if isinstance(node, exp.Floor | exp.Ceil):
        return "DECIMAL" if _duck_type(node.this, types) == "DECIMAL" else "DOUBLE"
    if isinstance(node, exp.Neg | exp.Abs | exp.Round | exp.Nullif):
        return _duck_type(node.this, types)
    if isinstance(node, exp.Sign):
        return "TINYINT"
    if type(node).__name__ in _BIGINT_FUNCTIONS:
        return "BIGINT"
    if isinstance(node, exp.Extract):
        return None if node.name.upper() == "EPOCH" else "BIGINT"
    if isinstance(node, exp.Greatest | exp.Least | exp.Coalesce):
        return _duck_common(types, node.this, *node.expressions)
    if isinstance(node, exp.Case):
        return _duck_common(types, *(branch.args.get("true") for branch in node.args["ifs"]), node.args.get("default"))
    if isinstance(node, exp.If):
        return _duck_common(types, node.args.get("true"), node.args.get("false"))
    return None


def _duck_common(types: Mapping[str, str], *nodes: Any) -> str | None:
    """DuckDB's type of an operator or a CASE over ``nodes``: an integer literal takes the others' integer
    type when it fits it, NULL takes any type; None unless every one is numeric."""
    from sqlglot import exp

    kinds: list[str] = []
    literals: list[int] = []
    for node in nodes:
        if node is None or isinstance(_unparen(node), exp.Null):
            continue
        constant = _int_constant(node)
        if constant is not None and constant[1] is None:
            literals.append(constant[0])
            continue
        kind = _duck_type(node, types)
        if kind is None:
            return None
        kinds.append(kind)
    reals = [kind for kind in kinds if kind in ("DECIMAL", "FLOAT", "DOUBLE")]
    if reals:
        return max(reals, key=("DECIMAL", "FLOAT", "DOUBLE").index)
    if "UNSIGNED" in kinds:
        return None  # (DuckDB's unsigned arithmetic is not modelled: Spark computes it in a wider type)
    result = functools.reduce(_wider, kinds) if kinds else None
    for value in literals:
        if result is None or not _fits(value, result):
            own = _literal_type(value)
            if own is None:
                return None
            result = own if result is None else _wider(result, own)
    return result


def _number(value: int) -> Any:
    from sqlglot import exp

    return exp.Literal.number(value) if value >= 0 else exp.Neg(this=exp.Literal.number(-value))


def _typed_number(value: int, kind: str) -> Any:
    """``value`` as DuckDB's typed constant of integer type ``kind`` (a folded constant keeps its type)."""
    from sqlglot import exp

    return exp.Cast(this=_number(value), to=exp.DataType.build(kind))


def _constant_or_null(value: Any, operand: Any) -> Any:
    """DuckDB's constant_or_null(value, operand): NULL where ``operand`` is NULL, else ``value`` (``operand`` is
    still computed, and can still fail)."""
    from sqlglot import exp

    return exp.Case().when(exp.Is(this=exp.paren(operand, copy=False), expression=exp.Null()), exp.Null()).else_(value)


def _duckdb_rewrites(node: Any, types: Mapping[str, str]) -> Any:
    """``node`` (a filter, DuckDB's text) rewritten as DuckDB's optimizer rewrites it before it runs, where that
    decides whether an integer operation is computed at all (and so whether it can fail).

    Modelled on DuckDB 2.0 (its answers checked against these, children before their parent, until
    nothing changes): the rules that move, fold or remove integer arithmetic - the constants of a +
    or * chain put first, constant folding, x + 0 and the like, a widening cast stripped from a
    comparison with a constant, constants moved across a comparison - and those that drop a part
    of the filter unread: ``x OR TRUE``, ``x AND FALSE``, CASE branches with a constant condition.
    BETWEEN becomes two comparisons, as in DuckDB (each then rewritten on its own).
    """
    for _ in range(64):  # (each rule shrinks the arithmetic or orders it for good: a few rounds suffice)
        changed = False

        def visit(current: Any) -> Any:
            nonlocal changed
            for key, value in list(current.args.items()):
                if isinstance(value, list):
                    current.set(key, [visit(item) if hasattr(item, "args") else item for item in value])
                elif hasattr(value, "args"):
                    current.set(key, visit(value))
            for _ in range(64):
                replacement = _duckdb_rule(current, types)
                if replacement is None:
                    break
                current, changed = replacement, True
            return current

        node = visit(node)
        if not changed:
            break
    return node


def _duckdb_rule(node: Any, types: Mapping[str, str]) -> Any:
    """The first of DuckDB's rules (see ``_duckdb_rewrites``) that rewrites ``node``, applied; None if none does."""
    from sqlglot import exp

    if isinstance(node, exp.Paren):  # (a rule's result in parentheses: the rules go on inside)
        inner = _duckdb_rule(node.this, types)
        return None if inner is None else exp.paren(inner, copy=False)
    if isinstance(node, exp.Neg) and not isinstance(node.this, exp.Literal):
        value = _int_literal(node)
        if value is not None:
            # DuckDB reads -(-2147483648) as the literal 2147483648; Spark would negate INT_MIN (and wrap).
            return _number(value)
    if isinstance(node, exp.Between):
        tested = exp.paren(node.this, copy=False)
        return exp.paren(
            exp.and_(
                exp.GTE(this=tested.copy(), expression=node.args["low"]),
                exp.LTE(this=tested, expression=node.args["high"]),
            ),
            copy=False,
        )
    if isinstance(node, exp.And | exp.Or):
        return _simplified_conjunction(node)
    if isinstance(node, exp.Case | exp.If | exp.Coalesce | exp.Greatest | exp.Least):
        coerced = _coerced_values(node, types)  # (typed first, as DuckDB binds before it simplifies)
        if coerced is not None or isinstance(node, exp.Coalesce | exp.Greatest | exp.Least):
            return coerced
        return _simplified_case(node)
    if type(node) in _comparisons() or isinstance(node, exp.In | exp.Nullif | exp.Cast):
        coerced = _coerced(node, types)
        if coerced is not None:
            return coerced
    if type(node) in _comparisons():
        return _moved_constants(node, types)
    if not isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.IntDiv | exp.Mod | exp.Neg | exp.Abs):
        return None
    kind = _duck_type(node, types)
    if kind not in _DUCK_INTEGERS:
        return None
    if isinstance(node, exp.Add | exp.Mul):
        ordered = _constants_first(node, kind, types)
        if ordered is not None:
            return ordered
    folded = _folded(node, kind)
    if folded is not None:
        return folded
    if isinstance(node, exp.Neg | exp.Abs | exp.Mod):
        return None
    left, right = node.this, node.expression
    if isinstance(_unparen(left), exp.Null) or isinstance(_unparen(right), exp.Null):
        return exp.Null()  # any integer arithmetic with a NULL constant is NULL
    if _duck_type(left, types) not in _DUCK_INTEGERS or _duck_type(right, types) not in _DUCK_INTEGERS:
        return None
    # x + 0, 0 + x, x - 0, x * 1, 1 * x, x // 1 are x; x * 0 is 0 (NULL where x is NULL): the operator
    # is gone (the first constant operand counts, as DuckDB matches it).
    first, second = _int_constant(left), _int_constant(right)
    if first is not None:
        position, value, other = 0, first[0], right
    elif second is not None:
        position, value, other = 1, second[0], left
    else:
        return None
    gone = (
        (isinstance(node, exp.Add) and value == 0)
        or (isinstance(node, exp.Sub | exp.IntDiv) and position == 1 and value == int(isinstance(node, exp.IntDiv)))
        or (isinstance(node, exp.Mul) and value == 1)
    )
    if not gone and not (isinstance(node, exp.Mul) and value == 0):
        return None
    if _duck_type(other, types) != kind:
        other = exp.Cast(this=exp.paren(other, copy=False), to=exp.DataType.build(kind))  # DuckDB's implicit cast
    return other if gone else _constant_or_null(_typed_number(0, kind), other)


def _truth(node: Any) -> tuple[bool, bool | None]:
    """(whether ``node`` is a constant DuckDB folds, its truth value or None for NULL), for the constants
    that decide a conjunction or a CASE branch: TRUE, FALSE, NULL, NOT of one, integer constants compared."""
    from sqlglot import exp

    node = _unparen(node)
    if isinstance(node, exp.Boolean):
        return True, bool(node.this)
    if isinstance(node, exp.Null):
        return True, None
    if isinstance(node, exp.Not):
        constant, value = _truth(node.this)
        return constant, None if value is None else not value
    comparison = type(node)
    if comparison in _comparisons() and comparison not in (exp.NullSafeEQ, exp.NullSafeNEQ):
        left, right = _numeric_constant(node.this), _numeric_constant(node.expression)
        if left is not None and right is not None:
            outcome = {
                exp.EQ: left == right,
                exp.NEQ: left != right,
                exp.GT: left > right,
                exp.GTE: left >= right,
                exp.LT: left < right,
                exp.LTE: left <= right,
            }
            return True, outcome[comparison]
    return False, None


def _numeric_constant(node: Any) -> decimal.Decimal | None:
    """The value of a number DuckDB folds: a numeric literal, negated or cast to a numeric type (exactly)."""
    from sqlglot import exp

    node, sign = _unparen(node), 1
    while isinstance(node, exp.Neg):
        node, sign = _unparen(node.this), -sign
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return sign * decimal.Decimal(node.this)
        except decimal.InvalidOperation:
            return None
    if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
        kind = _DUCK_CAST_TYPES.get(node.to.this.name)
        value = _numeric_constant(node.this)
        if value is None or kind is None or kind == "DECIMAL":
            return None
        if kind in _DUCK_INTEGERS:  # (a fraction is rounded, as DuckDB does, one way or another: not folded here)
            return sign * value if value == int(value) and _fits(int(value), kind) else None
        return sign * decimal.Decimal(float(value))  # DOUBLE, FLOAT (as a double: exact for comparisons of integers)
    return None


def _simplified_conjunction(node: Any) -> Any:
    """DuckDB's ConjunctionSimplification: ``x OR TRUE`` is TRUE and ``x AND FALSE`` FALSE, without computing x
    (nor failing on it); ``x AND TRUE`` and ``x OR FALSE`` are x."""
    from sqlglot import exp

    for constant, other in ((node.this, node.expression), (node.expression, node.this)):
        known, value = _truth(constant)
        if not known or value is None:
            continue
        if value == isinstance(node, exp.Or):
            return exp.true() if value else exp.false()
        return exp.paren(other, copy=False)
    return None


def _simplified_case(node: Any) -> Any:
    """DuckDB's CaseSimplification: a branch whose condition is a constant is dropped (FALSE, NULL) or ends the
    CASE (TRUE: its value becomes the ELSE); a CASE left without branches is its ELSE."""
    from sqlglot import exp

    if isinstance(node, exp.If):
        if node.arg_key == "ifs":
            return None  # a branch of a CASE (the CASE itself is simplified)
        branches = [(node.this, node.args.get("true"))]
        default = node.args.get("false")
    elif node.this is None:
        branches = [(branch.this, branch.args.get("true")) for branch in node.args["ifs"]]
        default = node.args.get("default")
    else:
        return None
    kept: list[tuple[Any, Any]] = []
    changed = False
    for condition, value in branches:
        known, truth = _truth(condition)
        if not known:
            kept.append((condition, value))
        elif truth:
            default, changed = value, True
            break
        else:
            changed = True
    if not changed:
        return None
    if not kept:
        return exp.paren(default, copy=False) if default is not None else exp.Null()
    result = exp.Case()
    for condition, value in kept:
        result = result.when(condition, value, copy=False)
    return result.else_(default, copy=False) if default is not None else result


class _Refused(Exception):
    """A filter the Spark text cannot give DuckDB's answers for (``spark_semantics`` names it)."""


#: Spark's name of a column's type -> DuckDB's, for the types that are not numbers.
_SPARK_OTHER_TYPES = {
    "string": "VARCHAR",
    "boolean": "BOOLEAN",
    "date": "DATE",
    "timestamp_ntz": "TIMESTAMP",
    "timestamp": "TIMESTAMPTZ",
    "binary": "BLOB",
}
#: sqlglot's name of a cast's target -> DuckDB's type, for the types that are not numbers.
_CAST_OTHER_TYPES = {
    "TEXT": "VARCHAR",
    "VARCHAR": "VARCHAR",
    "CHAR": "VARCHAR",
    "BOOLEAN": "BOOLEAN",
    "DATE": "DATE",
    "TIMESTAMPNTZ": "TIMESTAMP",
    "TIMESTAMP": "TIMESTAMP",
    "DATETIME": "TIMESTAMP",
    "TIMESTAMPTZ": "TIMESTAMPTZ",
    "TIMESTAMPLTZ": "TIMESTAMPTZ",
    "TIME": "TIME",
    "TIMETZ": "TIME",
    "VARBINARY": "BLOB",
    "BINARY": "BLOB",
    "INTERVAL": "INTERVAL",
}
_STRING_FUNCTIONS = ("Lower", "Upper", "Substring", "Trim", "Left", "Right", "Concat", "DPipe")
_TIMESTAMP_TEXT = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,6}))?)?)?")


def _duck_kind(node: Any, types: Mapping[str, str]) -> str | None:
    """DuckDB's type of ``node`` as its implicit casts see it: a numeric type of ``_duck_type``, or VARCHAR,
    BOOLEAN, DATE, TIMESTAMP, TIMESTAMPTZ, TIME, BLOB, INTERVAL; None when not plain to see."""
    from sqlglot import exp

    node = _unparen(node)
    kind = _duck_type(node, types)
    if kind is not None:
        return kind
    if isinstance(node, exp.Literal) and node.is_string:
        return "VARCHAR"
    if isinstance(node, exp.Boolean | exp.Predicate | exp.Connector | exp.Not):
        return "BOOLEAN"
    if isinstance(node, exp.Column):
        spark = types.get(node.name.casefold(), "").lower()
        if spark.startswith(("varchar", "char")):
            return "VARCHAR"
        return "INTERVAL" if spark.startswith("interval") else _SPARK_OTHER_TYPES.get(spark)
    if isinstance(node, exp.Cast):
        return _CAST_OTHER_TYPES.get(node.to.this.name)
    if type(node).__name__ in _STRING_FUNCTIONS:
        return "VARCHAR"
    return None


def _duck_data_type(node: Any, types: Mapping[str, str]) -> Any:
    """DuckDB's exact type of ``node`` as a DataType (what a text operand is cast to beside it), or None."""
    from sqlglot import exp

    node = _unparen(node)
    kind = _duck_kind(node, types)
    if kind is None or kind == "VARCHAR":
        return None
    if isinstance(node, exp.Cast):
        return node.to.copy()
    if kind == "DECIMAL":
        if isinstance(node, exp.Column):
            return exp.DataType.build(types.get(node.name.casefold(), ""), dialect="spark")
        number = _unparen(node)
        while isinstance(number, exp.Neg):
            number = _unparen(number.this)
        if isinstance(number, exp.Literal) and "." in number.this:
            whole, _, fraction = number.this.partition(".")
            scale = len(fraction)
            return exp.DataType.build(f"DECIMAL({max(len(whole.lstrip('0')) + scale, scale, 1)}, {scale})")
        return None
    if kind == "INTERVAL":
        return None
    return exp.DataType.build("INT128" if kind == "HUGEINT" else kind, dialect="duckdb")


def _coerced(node: Any, types: Mapping[str, str]) -> Any:
    """DuckDB's implicit casts of text made explicit (DuckDB's binder adds them; Spark's own differ): text
    compared with (or listed beside) a value of another type is cast to that type - a text literal by
    DuckDB's rules for constants, other text (by ``=``, ``<>``, IN, NULLIF) as DuckDB reads text; a cast of
    text to a date or time, and casts to TIME or TIMESTAMP WITH TIME ZONE, are refused (``_Refused``)."""
    from sqlglot import exp

    if isinstance(node, exp.Cast):
        return _date_cast(node, types)
    if isinstance(node, exp.In):
        if node.args.get("query") is not None or node.args.get("unnest") is not None:
            return None
        operands = [node.this, *node.expressions]
    else:
        operands = [node.this, node.expression]
    kinds = [_duck_kind(operand, types) for operand in operands]
    typed = [
        (operand, kind)
        for operand, kind in zip(operands, kinds, strict=True)
        if kind not in (None, "VARCHAR") and not isinstance(_unparen(operand), exp.Null)
    ]
    texts = [i for i, kind in enumerate(kinds) if kind == "VARCHAR"]
    if not typed or not texts:
        return None
    target = _duck_data_type(max(typed, key=lambda pair: pair[1] in _DUCK_INTEGERS)[0], types)
    if target is None:
        return None
    equality = isinstance(node, exp.EQ | exp.NEQ | exp.NullSafeEQ | exp.NullSafeNEQ | exp.In | exp.Nullif)
    changed = list(operands)
    for i in texts:
        literal = isinstance(_unparen(operands[i]), exp.Literal)
        if not literal and not equality:
            return None  # (DuckDB refuses it: see SparkBackend.check)
        changed[i] = _cast_text(operands[i], target, literal=literal)
    if isinstance(node, exp.In):
        return exp.In(this=changed[0], expressions=changed[1:])
    return type(node)(this=changed[0], expression=changed[1])


def _coerced_values(node: Any, types: Mapping[str, str]) -> Any:
    """DuckDB's type for the values of a CASE, IF, COALESCE, GREATEST or LEAST made explicit where a text
    constant stands beside values of another type: DuckDB casts the constant to their type (COALESCE(x,
    '5') is an INTEGER 5, COALESCE(x, 'a') fails where x is NULL); Spark would give text, or refuse. A
    simple CASE (``CASE x WHEN v ...``) becomes the searched CASE DuckDB binds it as (``CASE WHEN x = v``),
    whose comparisons are then cast as any comparison (``_coerced``). None where nothing changes; a mix
    whose common type is not plain to see is refused (``_Refused``)."""
    from sqlglot import exp

    if isinstance(node, exp.Case) and node.this is not None:
        operand, branches = node.this, node.args["ifs"]
        compared = {_duck_kind(part, types) for part in (operand, *(branch.this for branch in branches))}
        if "VARCHAR" in compared and not compared <= {"VARCHAR", None}:
            searched = exp.Case()
            for branch in branches:
                condition = exp.EQ(this=exp.paren(operand.copy()), expression=exp.paren(branch.this.copy()))
                searched = searched.when(condition, branch.args["true"].copy(), copy=False)
            default = node.args.get("default")
            return searched.else_(default.copy(), copy=False) if default is not None else searched
    # (a branch of a CASE has no values of its own: the CASE's are typed together)
    values = _value_operands(node)
    present = [value for value in values if value is not None and not isinstance(_unparen(value), exp.Null)]
    kinds = [_duck_kind(value, types) for value in present]
    constants = [
        value
        for value, kind in zip(present, kinds, strict=True)
        if kind == "VARCHAR" and isinstance(_unparen(value), exp.Literal)
    ]
    typed = [value for value, kind in zip(present, kinds, strict=True) if kind != "VARCHAR"]
    if not constants or not typed or len(constants) + len(typed) < len(present) or None in kinds:
        return None  # (text that is not a constant makes the values text, in both engines)
    target_kind = _duck_common(types, *typed)
    if target_kind in _DUCK_INTEGERS:
        target = exp.DataType.build("INT128" if target_kind == "HUGEINT" else target_kind, dialect="duckdb")
    else:
        exact = [_duck_data_type(value, types) for value in typed]
        spelled = {None if data_type is None else data_type.sql(dialect="duckdb") for data_type in exact}
        if len(spelled) != 1 or None in spelled:
            raise _Refused(
                f"{node.sql(dialect='duckdb')} mixes text constants with values of other types, whose common type "
                "DuckDB chooses by rules the Spark backend does not repeat; cast the text constants to the type you "
                "mean, or use the DuckDB backend"
            )
        target = exact[0]
    for constant in constants:
        constant.replace(_cast_text(constant.copy(), target, literal=True))
    return node


def _cast_text(text: Any, target: Any, *, literal: bool) -> Any:
    """``CAST(text AS target)``, refused (``_Refused``) where Spark cannot read the text as DuckDB does."""
    from sqlglot import exp

    cast = exp.Cast(this=exp.paren(text, copy=False), to=target.copy())
    if target.this.name in _CAST_OTHER_TYPES and target.this.name not in ("BOOLEAN", "TEXT", "VARCHAR", "CHAR"):
        if not literal:
            raise _Refused(
                f"it compares text with a {target.sql(dialect='duckdb')} value: DuckDB and Spark read dates and "
                "times from text differently; cast a date or time column to VARCHAR instead, or use the DuckDB backend"
            )
        return _date_cast(cast, {}) or cast
    return cast


def _date_cast(node: Any, types: Mapping[str, str]) -> Any:
    """A cast to a date or time type: TIME and TIMESTAMP WITH TIME ZONE are refused (Spark has no TIME, and
    reads time zones its own way), as is text read as a date other than a literal in ISO form, which is
    written as Spark reads it (``'2020-1-3'``: ``'2020-01-03'``). None to keep the cast."""
    from sqlglot import exp

    target = _CAST_OTHER_TYPES.get(node.to.this.name)
    if target in ("TIME", "TIMESTAMPTZ"):
        raise _Refused(
            f"{node.sql(dialect='duckdb')}: the Spark backend has no {target} type like DuckDB's; compare DATE or "
            "TIMESTAMP values instead, or use the DuckDB backend"
        )
    if target not in ("DATE", "TIMESTAMP") or _duck_kind(node.this, types) != "VARCHAR":
        return None
    text = _unparen(node.this)
    if not (isinstance(text, exp.Literal) and text.is_string):
        raise _Refused(
            f"{node.sql(dialect='duckdb')}: DuckDB and Spark read dates and times from text differently "
            "('2020/01/01', 'epoch', '2020-01-01 24:00:00' ...); compare the text, or use the DuckDB backend"
        )
    match = _TIMESTAMP_TEXT.fullmatch(text.this)  # (a DATE takes a time too, and drops it, in both)
    try:
        if match is None:
            raise ValueError(text.this)
        parts = [int(part) if part else 0 for part in match.groups()[:6]]
        fraction = match.groups()[6] if target == "TIMESTAMP" else None
        hour, minute, second = parts[3:6] if target == "TIMESTAMP" else (0, 0, 0)
        value = datetime.datetime(parts[0], parts[1], parts[2], hour, minute, second)
    except ValueError:
        raise _Refused(
            f"{text.sql(dialect='duckdb')} as {target}: write dates as 'YYYY-MM-DD' and times as "
            "'YYYY-MM-DD HH:MM:SS[.ffffff]' (DuckDB and Spark read other forms differently)"
        ) from None
    canonical = value.strftime("%Y-%m-%d" if target == "DATE" else "%Y-%m-%d %H:%M:%S")
    if fraction:
        canonical += "." + fraction
    if canonical == text.this:
        return None
    return type(node)(this=exp.Literal.string(canonical), to=node.to.copy())


def _constants_first(node: Any, kind: str, types: Mapping[str, str]) -> Any:
    """DuckDB's ConstantOrderNormalization of a chain of integer + (or *) of one type: for +, two or more
    constants are put first; for *, the constants are put last, as one factor (DuckDB 2.0). None when the
    chain is already so."""
    from sqlglot import exp

    operator = type(node)
    leaves: list[Any] = []

    def flatten(current: Any) -> None:
        inner = _unparen(current)
        if type(inner) is operator and _duck_type(inner, types) == kind:
            flatten(inner.this)
            flatten(inner.expression)
        else:
            leaves.append(current)

    def chain(items: list[Any]) -> Any:
        result = items[0]
        for item in items[1:]:
            result = operator(this=result, expression=exp.paren(item, copy=False) if _compound(item) else item)
        return exp.paren(result, copy=False) if len(items) > 1 else result

    flatten(node)
    constant = [leaf.find(exp.Column) is None for leaf in leaves]
    count = sum(constant)
    if operator is exp.Add and (count < 2 or all(constant[:count])):
        return None
    if operator is exp.Mul and (count == 0 or count == len(leaves)):
        return None
    # The constants keep the type DuckDB bound them to (the chain's type); copies, until it is known
    # that the chain changes.
    constants = [
        exp.Cast(this=exp.paren(leaf.copy()), to=exp.DataType.build(kind))
        if _duck_type(leaf, types) != kind
        else leaf.copy()
        for leaf, is_constant in zip(leaves, constant, strict=True)
        if is_constant
    ]
    others = [leaf.copy() for leaf, is_constant in zip(leaves, constant, strict=True) if not is_constant]
    if operator is exp.Add:
        result = chain([*constants, *others])
    else:
        result = chain([*others, chain(constants)])
        if _unparen(result).sql() == _unparen(node).sql():
            return None
    return result


def _compound(node: Any) -> bool:
    """Whether ``node`` needs parentheses as an operand."""
    from sqlglot import exp

    return isinstance(node, exp.Binary | exp.Unary) and not isinstance(node, exp.Paren)


def _folded(node: Any, kind: str) -> Any:
    """DuckDB's constant folding of integer arithmetic on constants: the typed result, or None where DuckDB
    cannot fold it (an overflow or a division by zero, which then fails as the query runs)."""
    from sqlglot import exp

    if kind == "HUGEINT" or _int_literal(node) is not None:
        return None
    operands = [_int_constant(operand) for operand in (node.this, node.args.get("expression")) if operand is not None]
    if not operands or any(operand is None for operand in operands):
        return None
    values = [operand[0] for operand in operands if operand is not None]
    low, _ = _DUCK_INTEGERS[kind]
    if isinstance(node, exp.Neg):
        result = -values[0]
    elif isinstance(node, exp.Abs):
        result = abs(values[0])
    elif isinstance(node, exp.Add):
        result = values[0] + values[1]
    elif isinstance(node, exp.Sub):
        result = values[0] - values[1]
    elif isinstance(node, exp.Mul):
        result = values[0] * values[1]
    elif values[1] == 0 or (
        values[0] == low and values[1] == -1 and (isinstance(node, exp.IntDiv) or _duckdb_minimum_modulo_fails())
    ):
        return None
    else:  # IntDiv, Mod: truncated towards zero
        quotient = abs(values[0]) // abs(values[1]) * (1 if (values[0] < 0) == (values[1] < 0) else -1)
        result = quotient if isinstance(node, exp.IntDiv) else values[0] - quotient * values[1]
    return _typed_number(result, kind) if _fits(result, kind) else None


def _moved_constants(node: Any, types: Mapping[str, str]) -> Any:
    """DuckDB's MoveConstants rule (and its ComparisonSimplification of a widening cast): ``x + c1 > c2`` is
    ``x > c2 - c1``, ``x - c1``, ``c1 - x``, ``x * c1`` and ``-x`` alike, when the new constant fits the
    type; where it does not, ``=`` (and ``<>`` for * and -x) is decided without computing the arithmetic."""
    from sqlglot import exp

    comparison = type(node)
    left, right = _unparen(node.this), _unparen(node.expression)
    if comparison not in (exp.NullSafeEQ, exp.NullSafeNEQ) and (
        isinstance(left, exp.Null) or isinstance(right, exp.Null)
    ):
        return exp.Null()
    if _comparison_constant(right) is not None:
        side, constant = left, _comparison_constant(right)
    elif _comparison_constant(left) is not None:
        side, constant, comparison = right, _comparison_constant(left), _comparisons()[comparison]
    else:
        return None
    assert constant is not None
    value, real = constant
    while isinstance(side, exp.Cast) and not isinstance(side, exp.TryCast):  # a widening cast is stripped
        source, target = _duck_type(side.this, types), _DUCK_CAST_TYPES.get(side.to.this.name)
        if target != source and target not in _INVERTIBLE_CASTS.get(source or "", ()):
            break
        if not _fits(value, source):
            break
        side = _unparen(side.this)
    kind = _duck_type(side, types)
    if kind not in _DUCK_INTEGERS or not _fits(value, kind):
        return None
    if real and "DOUBLE" not in _INVERTIBLE_CASTS.get(kind, ()):
        return None  # compared as DOUBLE, and the cast to DOUBLE is not exact: DuckDB keeps it
    equal, unequal = comparison is exp.EQ, comparison is exp.NEQ
    flip = False
    if isinstance(side, exp.Neg) and _int_literal(side) is None:
        operand, moved = side.this, -value
        flip = True
        if not _fits(moved, kind):
            return _decided(operand, equal, unequal, unequal_too=True)
    elif isinstance(side, exp.Add | exp.Sub | exp.Mul) and _duck_type(side, types) == kind:
        first, second = _int_constant(side.this), _int_constant(side.expression)
        if first is not None:
            inner, operand, constant_first = first[0], side.expression, True
        elif second is not None:
            inner, operand, constant_first = second[0], side.this, False
        else:
            return None
        if isinstance(side, exp.Mul):
            if inner == 0:
                return None
            if value % inner:
                return _decided(operand, equal, unequal, unequal_too=True)
            moved, flip = value // inner, inner < 0
            if not _fits(moved, kind):
                return _decided(operand, equal, unequal, unequal_too=True)
        else:
            if isinstance(side, exp.Add):
                moved = value - inner
            elif constant_first:
                moved, flip = inner - value, True
            else:
                moved = value + inner
            if not _fits(moved, kind):
                return _decided(operand, equal, unequal, unequal_too=False)
    else:
        return None
    operator = _comparisons()[comparison] if flip else comparison
    return operator(this=operand, expression=_number(moved))


def _decided(operand: Any, equal: bool, unequal: bool, *, unequal_too: bool) -> Any:
    """The comparison DuckDB decides without the arithmetic: FALSE for =, TRUE for <> (when ``unequal_too``),
    NULL where ``operand`` is; None (not rewritten) for the other comparisons."""
    from sqlglot import exp

    if equal:
        return _constant_or_null(exp.false(), operand)
    if unequal and unequal_too:
        return _constant_or_null(exp.true(), operand)
    return None


def _comparison_constant(node: Any) -> tuple[int, bool] | None:
    """(value, is a DOUBLE) for a constant a comparison can move arithmetic across: an integer (literal or
    cast), or a DOUBLE literal with an integer value (``1e3``)."""
    from sqlglot import exp

    constant = _int_constant(node)
    if constant is not None:
        return constant[0], False
    node = _unparen(node)
    sign = 1
    while isinstance(node, exp.Neg):
        node, sign = _unparen(node.this), -sign
    if isinstance(node, exp.Literal) and not node.is_string and "e" in node.this.lower():
        try:
            number = float(node.this)
        except ValueError:
            return None
        if abs(number) < 2.0**127 and number == int(number):
            return sign * int(number), True
    return None


def _checked(node: Any, kind: str) -> Any:
    """Spark's form of the DuckDB integer operation ``node`` (its operands already in Spark's form), of DuckDB
    type ``kind``: DuckDB's value, or NULL where DuckDB fails (an overflow of ``kind``, an integer division or
    modulo by zero, the minimum divided by -1); None to keep ``node``."""
    from sqlglot import exp

    def call(name: str, *arguments: Any) -> Any:
        return exp.Anonymous(this=name, expressions=list(arguments))

    if kind == "HUGEINT":  # Spark's widest integer is DECIMAL(38, 0): beyond 10^38 it gives NULL
        wide = exp.DataType.build("DECIMAL(38, 0)")

        def huge(operand: Any) -> Any:
            return exp.Cast(this=exp.paren(operand, copy=False), to=wide.copy())

        if isinstance(node, exp.Add | exp.Sub | exp.Mul):
            return exp.paren(type(node)(this=huge(node.this), expression=huge(node.expression)), copy=False)
        if isinstance(node, exp.Neg):
            return exp.paren(exp.Sub(this=huge(_number(0)), expression=huge(node.this)), copy=False)
        if isinstance(node, exp.Abs):
            return exp.Abs(this=huge(node.this))
        return None
    target = exp.DataType.build(kind)

    def typed(operand: Any) -> Any:
        return exp.Cast(this=exp.paren(operand, copy=False), to=target.copy())

    operations = {exp.Add: "try_add", exp.Sub: "try_subtract", exp.Mul: "try_multiply"}
    if type(node) in operations:
        return call(operations[type(node)], typed(node.this), typed(node.expression))
    if isinstance(node, exp.Neg):
        return call("try_subtract", typed(_number(0)), typed(node.this))
    if isinstance(node, exp.Abs | exp.Round):
        if isinstance(node, exp.Round) and node.args.get("decimals") is None:
            return None
        # Computed exactly as a decimal, then back to ``kind`` (NULL when out of its range).
        exact = exp.Cast(this=exp.paren(node.this, copy=False), to=exp.DataType.build("DECIMAL(38, 0)"))
        if isinstance(node, exp.Abs):
            return exp.TryCast(this=exp.Abs(this=exact), to=target, safe=True)
        return exp.TryCast(this=exp.Round(this=exact, decimals=node.args["decimals"]), to=target, safe=True)
    if isinstance(node, exp.IntDiv) and kind != "BIGINT":
        # Exact as BIGINTs (x DIV 0 is NULL in Spark, ANSI mode off), then NULL out of ``kind``'s range.
        wide = exp.DataType.build("BIGINT")
        quotient = exp.IntDiv(
            this=exp.Cast(this=exp.paren(node.this, copy=False), to=wide),
            expression=exp.Cast(this=exp.paren(node.expression, copy=False), to=wide.copy()),
        )
        return exp.TryCast(this=quotient, to=target, safe=True)
    if isinstance(node, exp.IntDiv | exp.Mod):
        # x DIV 0 and x % 0 are NULL in Spark; the minimum DIV -1 wraps there (DuckDB fails, for % too),
        # so dividing by -1 is negating (which can fail), times 0 for %.
        def divided(left: Any, right: Any) -> Any:
            negated = call("try_subtract", typed(_number(0)), left)
            value: Any
            if isinstance(node, exp.IntDiv):
                by_minus_one, value = negated, exp.Cast(this=exp.IntDiv(this=left.copy(), expression=right), to=target)
            else:
                value = exp.Mod(this=left.copy(), expression=right)
                if not _duckdb_minimum_modulo_fails():  # DuckDB 2.0.1 and later: the minimum % -1 is 0
                    return exp.paren(value, copy=False)
                by_minus_one = call("try_multiply", negated, typed(_number(0)))
            minus_one = exp.EQ(this=right.copy(), expression=_number(-1))
            return exp.paren(exp.Case().when(minus_one, by_minus_one).else_(value), copy=False)

        return _bound([typed(node.this), typed(node.expression)], divided)
    return None


@functools.cache
def _duckdb_minimum_modulo_fails() -> bool:
    """Whether the installed DuckDB raises on an integer type's minimum % -1 (2.0.0 does; 2.0.1 gives 0).

    Asked of DuckDB itself, once, so Spark follows whichever DuckDB is installed.
    """
    import duckdb

    connection = duckdb.connect(":memory:")
    try:
        connection.execute("SELECT CAST(-128 AS TINYINT) % CAST(-1 AS TINYINT)").fetchall()
    except duckdb.Error:
        return True
    finally:
        connection.close()
    return False


def _in_condition(node: Any) -> bool:
    """Whether ``node`` (AND, OR) is part of the condition of a CASE branch or an IF, which DuckDB evaluates
    as a filter (left to right, each operand on the rows still undecided)."""
    from sqlglot import exp

    while isinstance(node.parent, exp.And | exp.Or | exp.Not | exp.Paren):
        node = node.parent
    return isinstance(node.parent, exp.If) and node.arg_key == "this"


#: DuckDB's syntax of numbers in text (casts): digits may be grouped by single underscores, the
#: text may be surrounded by ASCII whitespace; integers may also be 0x hexadecimal or 0b binary.
_DIGITS = "[0-9]+(_[0-9]+)*"
_MANTISSA = rf"({_DIGITS}([.]({_DIGITS})?)?|[.]{_DIGITS})"
_BASED = "0[xX][0-9a-fA-F]+(_[0-9a-fA-F]+)*|0[bB][01]+(_[01]+)*"
_TEXT_SYNTAX = {
    "INTEGER": rf"^\s*([+-]?{_MANTISSA}([eE][+-]?{_DIGITS})?|{_BASED})\s*$",
    "DECIMAL": rf"^\s*[+-]?{_MANTISSA}([eE][+-]?{_DIGITS})?\s*$",
    "DOUBLE": rf"^\s*[+-]?({_MANTISSA}([eE][+-]?{_DIGITS})?|[iI][nN][fF]([iI][nN][iI][tT][yY])?|[nN][aA][nN])\s*$",
}
_TRUE_TEXT = ("true", "t", "yes", "y", "1")
_FALSE_TEXT = ("false", "f", "no", "n", "0")


def _stripped(text: Any) -> Any:
    """``text`` without the ASCII whitespace around it (as DuckDB reads a number) and its underscores."""
    from sqlglot import exp

    def replaced(value: Any, pattern: str) -> Any:
        return exp.Anonymous(
            this="regexp_replace", expressions=[value, exp.Literal.string(pattern), exp.Literal.string("")]
        )

    return replaced(replaced(text, r"^\s+|\s+$"), "_")


def _text_integer(text: Any) -> Any:
    """DuckDB's reading of ``text`` as an integer, before rounding to the type: an exact DECIMAL, NULL where
    DuckDB fails (not its syntax; Spark also reads Unicode digits, DuckDB also 0x1F, 0b101, 1_000)."""
    from sqlglot import exp

    def read(value: Any) -> Any:
        clean = _stripped(value)
        prefix = exp.Lower(
            this=exp.Substring(this=clean.copy(), start=exp.Literal.number(1), length=exp.Literal.number(2))
        )
        digits = exp.Substring(this=clean.copy(), start=exp.Literal.number(3))

        def based(base: int) -> Any:
            converted = exp.Anonymous(
                this="conv", expressions=[digits.copy(), exp.Literal.number(base), exp.Literal.number(10)]
            )
            return exp.Cast(this=converted, to=exp.DataType.build("DECIMAL(38, 0)"))

        number = (
            exp.Case()
            .when(exp.EQ(this=prefix.copy(), expression=exp.Literal.string("0x")), based(16))
            .when(exp.EQ(this=prefix, expression=exp.Literal.string("0b")), based(2))
            .else_(exp.Round(this=exp.Cast(this=clean, to=exp.DataType.build("DECIMAL(38, 18)"))))
        )
        syntax = exp.RegexpLike(this=value.copy(), expression=exp.Literal.string(_TEXT_SYNTAX["INTEGER"]))
        return exp.paren(exp.Case().when(syntax, number), copy=False)

    return _bound([text], read)


def _text_cast(node: Any) -> Any:
    """Spark's form of DuckDB's cast of text to DOUBLE, FLOAT, DECIMAL or BOOLEAN (NULL where DuckDB fails)."""
    from sqlglot import exp

    name = node.to.this.name

    def read(value: Any) -> Any:
        if name == "BOOLEAN":  # (DuckDB neither trims nor takes 'on' / 'off')
            lowered = exp.Lower(this=value)
            truth = exp.Case()
            for outcome, words in ((exp.true(), _TRUE_TEXT), (exp.false(), _FALSE_TEXT)):
                listed = exp.In(this=lowered.copy(), expressions=[exp.Literal.string(word) for word in words])
                truth = truth.when(listed, outcome)
            return exp.paren(truth, copy=False)
        syntax = _TEXT_SYNTAX["DECIMAL" if name == "DECIMAL" else "DOUBLE"]
        number = exp.Cast(this=_stripped(value.copy()), to=node.to.copy())
        return exp.paren(
            exp.Case().when(exp.RegexpLike(this=value, expression=exp.Literal.string(syntax)), number), copy=False
        )

    return _bound([node.this], read)


_BOUND_NAMES = itertools.count()
#: The most expression nodes a filter may have in Spark's text (a filter of nested casts and integer
#: arithmetic grows there, with checks; Spark's planner runs out of memory on huge expressions).
_FILTER_NODES = 20_000


def _trivial(node: Any) -> bool:
    """Whether ``node`` is cheap to compute twice (a column, a constant, a cast of one)."""
    from sqlglot import exp

    node = _unparen(node)
    if isinstance(node, exp.Cast | exp.Neg):
        return _trivial(node.this)
    return isinstance(node, exp.Column | exp.Literal | exp.Null | exp.Boolean)


def _bound(values: list[Any], body: Any) -> Any:
    """``body(*values)`` with each value computed once: Spark SQL has no LET, so unless they are trivial the
    values ride in a one-element array through a lambda (``body`` may use each of its arguments twice)."""
    from sqlglot import exp

    if all(_trivial(value) for value in values):
        return body(*values)
    name = f"__dpkit_let{next(_BOUND_NAMES)}"
    fields: list[Any] = []
    for index, value in enumerate(values):
        fields += [exp.Literal.string(f"v{index}"), value]
    record = exp.Anonymous(this="named_struct", expressions=fields)
    references = [exp.column(f"v{index}", table=name) for index in range(len(values))]
    function = exp.Lambda(this=body(*references), expressions=[exp.to_identifier(name)])
    mapped = exp.Anonymous(this="transform", expressions=[exp.Anonymous(this="array", expressions=[record]), function])
    return exp.Anonymous(this="element_at", expressions=[mapped, exp.Literal.number(1)])


def _real_division(node: Any, kind: str) -> Any:
    """Spark's form of DuckDB's ``a // b`` of DOUBLE (or DECIMAL) ``a`` or ``b``: a / b as a double, not rounded
    (DuckDB's // rounds integers only), and NULL where DuckDB fails: a division by zero."""
    from sqlglot import exp

    def double(operand: Any) -> Any:
        return exp.Cast(this=exp.paren(operand, copy=False), to=exp.DataType.build("DOUBLE"))

    zero = exp.EQ(this=double(node.expression.copy()), expression=exp.Literal.number(0))
    quotient: Any = exp.Div(this=double(node.this), expression=double(node.expression))
    if kind == "FLOAT":
        quotient = exp.Cast(this=quotient, to=exp.DataType.build("FLOAT"))
    return exp.paren(exp.Case().when(zero, exp.Null()).else_(quotient), copy=False)


def _real_modulo(node: Any) -> Any:
    """Spark's form of DuckDB's ``a % b`` of doubles: NaN when b is 0 (Spark: NULL)."""
    from sqlglot import exp

    zero = exp.and_(
        exp.EQ(this=exp.paren(node.expression.copy(), copy=False), expression=exp.Literal.number(0)),
        exp.Not(this=exp.Is(this=exp.paren(node.this.copy(), copy=False), expression=exp.Null())),
    )
    nan = _double_literal("NaN")
    return exp.paren(exp.Case().when(zero, nan).else_(node), copy=False)


def _failure_scope(node: Any) -> tuple[Any, list[Any]] | None:
    """The filter (TRY node) that a failure of ``node`` fails in DuckDB, and the conditions under which DuckDB
    computes ``node`` at all (as functions building them from the final tree); None outside a filter.

    DuckDB computes AND, OR and the arguments of functions eagerly, but the branches of CASE and IF,
    and the later arguments of COALESCE, only for the rows that need them: a failure there fails the
    filter only on those rows.
    """
    from sqlglot import exp

    def not_true(condition: Any) -> Any:
        return exp.Not(this=exp.paren(exp.Coalesce(this=condition.copy(), expressions=[exp.false()]), copy=False))

    def is_true(condition: Any) -> Any:
        return exp.Coalesce(this=condition.copy(), expressions=[exp.false()])

    def all_of(*conditions: Any) -> Any:
        return exp.and_(*conditions) if conditions else exp.true()

    def case_conditions(case: Any) -> list[Any]:
        operand = case.this
        conditions = [branch.this for branch in case.args["ifs"]]
        if operand is None:
            return conditions
        return [exp.EQ(this=exp.paren(operand.copy()), expression=exp.paren(value.copy())) for value in conditions]

    guards: list[Any] = []
    child, parent = node, node.parent
    while parent is not None:
        if isinstance(parent, exp.Try):
            return parent, guards
        if isinstance(parent, exp.If) and isinstance(parent.parent, exp.Case) and parent.arg_key == "ifs":
            case, index, branch = parent.parent, parent.index, child.arg_key == "true"
            guards.append(
                lambda case=case, index=index, branch=branch: all_of(
                    *(not_true(condition) for condition in case_conditions(case)[:index]),
                    *([is_true(case_conditions(case)[index])] if branch else []),
                )
            )
            child, parent = case, case.parent
            continue
        if isinstance(parent, exp.Case) and child.arg_key == "default":
            guards.append(lambda case=parent: all_of(*map(not_true, case_conditions(case))))
        elif isinstance(parent, exp.If) and child.arg_key in ("true", "false"):
            test = is_true if child.arg_key == "true" else not_true
            guards.append(lambda owner=parent, test=test: test(owner.this))
        elif isinstance(parent, exp.And | exp.Or) and child.arg_key == "expression" and _in_condition(parent):
            # A CASE or IF condition is evaluated as a filter: AND and OR stop at their first operand.
            test = is_true if isinstance(parent, exp.And) else not_true
            guards.append(lambda owner=parent, test=test: test(owner.this))
        elif isinstance(parent, exp.Coalesce) and child.arg_key == "expressions":
            guards.append(
                lambda owner=parent, index=child.index: exp.and_(
                    *(
                        exp.Is(this=exp.paren(earlier.copy()), expression=exp.Null())
                        for earlier in [owner.this, *owner.expressions][: index + 1]
                    )
                )
            )
        child, parent = parent, parent.parent
    return None
