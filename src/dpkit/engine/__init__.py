"""The query engine: private SQL and Python queries over DuckDB or Spark, with a persistent budget ledger.

A :class:`Session` holds the private table, the privacy unit and the budget; queries are built
with ``session.table(...)`` (an immutable builder) or written in SQL (``session.sql``). Each
query flows: plan -> privacy compiler -> ledger debit -> backend aggregation -> noise -> result.

>>> from dpkit import engine as E
>>> E.count().kind, E.mean("income", bounds=(0, 1e5)).bounds
('count', (0.0, 100000.0))
"""

from dpkit.engine._aggregation import AggregationPlan, AggregationResult
from dpkit.engine._backends import Backend, ColumnInfo, DuckDBBackend, SparkBackend
from dpkit.engine._builder import QueryBuilder
from dpkit.engine._functions import count, count_distinct, mean, median, quantiles, stddev, sum, variance
from dpkit.engine._ledger import Ledger, LedgerEntry
from dpkit.engine._plan import AUTO, Aggregate, Bin, Contribution, Derived, Join, OrderBy, Query
from dpkit.engine._result import Preview, Result
from dpkit.engine._session import Session
from dpkit.engine._sql import UnsupportedSQLError, parse_query

__all__ = [
    "AUTO",
    "Aggregate",
    "AggregationPlan",
    "AggregationResult",
    "Backend",
    "Bin",
    "ColumnInfo",
    "Contribution",
    "Derived",
    "DuckDBBackend",
    "Join",
    "Ledger",
    "LedgerEntry",
    "OrderBy",
    "Preview",
    "Query",
    "QueryBuilder",
    "Result",
    "Session",
    "SparkBackend",
    "UnsupportedSQLError",
    "count",
    "count_distinct",
    "mean",
    "median",
    "parse_query",
    "quantiles",
    "stddev",
    "sum",
    "variance",
]
