"""Backend conformance: DuckDB and Spark compute identical noiseless bounded aggregates.

The same compiled plans run on both engines; every integer aggregate and histogram must be
equal (the sums are exact fixed-point integers, so there is no rounding slack to allow). With
the same test seed, full releases are then identical too.
"""

from __future__ import annotations

import pandas as pd
import pytest
from engine_fixtures import make_people

import dpkit
from dpkit import engine as E
from dpkit.engine._aggregation import render_sql, view_steps
from dpkit.engine._compiler import aggregation_plan, compile_query, histogram_plan, parse_request
from dpkit.noise import InsecureSeededRandom

REGIONS = ["north", "south", "east", "west"]


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    data = make_people(rows=4000, people=600, seed=11)
    data.loc[data.index % 13 == 0, "region"] = None  # NULL group keys are a group like any other
    # A few people spread over several regions, so group bounding has work to do.
    data.loc[data.index % 7 == 0, "region"] = "east"
    return data


@pytest.fixture(scope="module")
def engines(frame):
    lookup = pd.DataFrame({"region": REGIONS, "country": ["N", "S", "E", "E"]})
    options = {
        "name": "people",
        "privacy_unit": "person_id",
        "budget": dpkit.ApproxDP(1000, 1e-3),
        "public_tables": {"regions": lookup},
    }
    duck = E.Session.from_pandas(frame, **options)
    spark = E.Session.from_pandas(frame, backend="spark", **options)
    yield duck, spark


QUERIES = {
    "ungrouped": lambda q: q.agg(n=E.count(), t=E.sum("income", bounds=(0, 1e5))),
    "public keys, rows bound": lambda q: (
        q.group_by("region", keys=[*REGIONS, None])
        .bound(rows_per_group=3)
        .agg(n=E.count(), m=E.mean("income", bounds=(0, 2e5)), v=E.variance("age", bounds=(0, 100)))
    ),
    "private keys, groups bound": lambda q: (
        q.group_by("region")
        .bound(rows_per_group=2, groups_per_person=2)
        .agg(n=E.count(), t=E.sum("income", bounds=(-50, 1e5)), p=E.count_distinct())
    ),
    "private keys, one group": lambda q: (
        q.group_by("region")
        .bound(rows_per_group=3, groups_per_person=1)
        .agg(n=E.count(), t=E.sum("age", bounds=(0, 99)))
    ),
    "filter and join": lambda q: (
        q.join("regions", on="region")
        .where("age BETWEEN 30 AND 60 AND income > 1000")
        .group_by("country", keys=["N", "S", "E"])
        .bound(rows_per_group=4)
        .agg(n=E.count(), t=E.sum("income", bounds=(0, 1e5)))
    ),
    "bins": lambda q: (
        q.group_by("region", bins={"age": [18, 40, 65, 90]}, keys={"region": REGIONS})
        .bound(rows_per_group=5, groups_per_person=3)
        .agg(n=E.count())
    ),
    # More keys than KEY_TABLE_THRESHOLD: both engines read the key list from a registered table.
    "many public keys": lambda q: (
        q.group_by("region", "age", keys={"region": [*REGIONS, None], "age": list(range(0, 120))})
        .bound(rows_per_group=2, groups_per_person=3)
        .agg(n=E.count(), t=E.sum("income", bounds=(0, 1e5)))
    ),
    "quantiles": lambda q: (
        q.group_by("region", keys=REGIONS).bound(rows_per_group=3).agg(med=E.median("age", bounds=(0, 100)))
    ),
    # People in several groups (age bins), g >= 2: DuckDB keeps each one's g groups of least key by
    # rounds of MIN, Spark by a window (render_sql's rank_by_window); the same groups.
    "quantiles, groups bound": lambda q: (
        q.group_by("region", bins={"age": [18, 40, 65, 90]}, keys={"region": REGIONS})
        .bound(rows_per_group=3, groups_per_person=2)
        .agg(med=E.median("income", bounds=(0, 1e5)))
    ),
    # Derived columns (computed in a subquery under TRY): text, DOUBLE and DECIMAL keys ranked privately,
    # COUNT(column), and expressions that fail on some rows (a cast of text, a BIGINT overflow, an
    # integer division by zero), where both engines must give NULL for those rows only.
    "derived keys and values": lambda q: (
        q.with_column("band", "CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'mid' ELSE 'old' END")
        .with_column("spend", "income * 1.5")
        .group_by("band")
        .bound(rows_per_group=2, groups_per_person=2)
        .agg(n=E.count(), c=E.count("income"), t=E.sum("spend", bounds=(0, 2e5)))
    ),
    "derived, failing on some rows": lambda q: (
        q.with_column("r", "CAST(region AS INTEGER)")
        .with_column("huge", "age * 1000000000000000000")
        .with_column("d", "100 // (age % 5)")
        .group_by("region", keys=[*REGIONS, None])
        .bound(rows_per_group=3)
        .agg(n=E.count(), r=E.count("r"), h=E.count("huge"), d=E.sum("d", bounds=(0, 100)))
    ),
    "derived double keys": lambda q: (
        q.with_column("q", "age / 7").group_by("q").bound(rows_per_group=2, groups_per_person=3).agg(n=E.count())
    ),
    "derived decimal keys": lambda q: (
        q.with_column("q", "CAST(age AS DECIMAL(10, 2)) * 1.5")
        .group_by("q")
        .bound(rows_per_group=2, groups_per_person=3)
        .agg(n=E.count())
    ),
    "private bins, groups bound": lambda q: (
        q.group_by("region", bins={"age": [18, 30, 45, 60, 75, 90]})
        .bound(rows_per_group=2, groups_per_person=3)
        .agg(n=E.count(), t=E.sum("income", bounds=(0, 1e5)))
    ),
}


def _sorted(result):
    rows = list(zip(result.keys, *result.columns.values(), strict=True))
    return sorted(rows, key=repr)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_identical_noiseless_aggregates(engines, name):
    _assert_identical_aggregates(*engines, QUERIES[name])


def _assert_identical_aggregates(duck, spark, build):
    compiled, bounds, plan = _compiled(duck, build)
    on_duck, on_spark = duck._backend.run(plan), spark._backend.run(plan)
    assert _sorted(on_duck) == _sorted(on_spark)
    assert sum(on_duck.columns["rows"]) > 0
    for statistic in compiled.statistics:
        if statistic.kind == "hist":
            histogram = histogram_plan(compiled, statistic, bounds[statistic.column], "a fixed salt")
            first, second = duck._backend.run(histogram), spark._backend.run(histogram)
            assert dict(zip(first.keys, first.histogram, strict=True)) == dict(
                zip(second.keys, second.histogram, strict=True)
            )


@pytest.fixture(scope="module")
def one_group_engines():
    """Each person in one region (NULL for some): nobody is in several groups, as in bench/engine.py."""
    data = make_people(rows=3000, people=500, seed=12)
    data.loc[data.person_id % 13 == 0, "region"] = None
    options = {"name": "people", "privacy_unit": "person_id", "budget": dpkit.ApproxDP(1000, 1e-3)}
    return E.Session.from_pandas(data, **options), E.Session.from_pandas(data, backend="spark", **options)


ONE_GROUP_QUERIES = {
    "public keys, g = 1": lambda q: (
        q.group_by("region", keys=[*REGIONS, None])
        .bound(rows_per_group=3, groups_per_person=1)
        .agg(n=E.count(), t=E.sum("income", bounds=(0, 1e5)))
    ),
    "private keys, g = 1": lambda q: (
        q.group_by("region")
        .bound(rows_per_group=2, groups_per_person=1)
        .agg(n=E.count(), t=E.sum("age", bounds=(0, 99)))
    ),
    "private keys, g = 2": lambda q: (
        q.group_by("region").bound(rows_per_group=4, groups_per_person=2).agg(n=E.count(), p=E.count_distinct())
    ),
    "median, g = 1": lambda q: (
        q.group_by("region", keys=REGIONS)
        .bound(rows_per_group=3, groups_per_person=1)
        .agg(m=E.median("age", bounds=(0, 100)))
    ),
}


@pytest.mark.parametrize("name", sorted(ONE_GROUP_QUERIES))
def test_identical_aggregates_when_nobody_is_in_several_groups(one_group_engines, name):
    """Spark replaces an empty cached step (here the people in several groups) by an empty relation."""
    _assert_identical_aggregates(*one_group_engines, ONE_GROUP_QUERIES[name])


class _RecordingSpark:
    """A SparkSession whose ``sql`` keeps every DataFrame it returns."""

    def __init__(self, spark):
        self.spark, self.frames = spark, []

    def sql(self, text):
        frame = self.spark.sql(text)
        self.frames.append(frame)
        return frame

    def __getattr__(self, name):
        return getattr(self.spark, name)


def _outside_cached_data(plan: str) -> str:
    """The lines of an optimised plan's text without the plans of the cached relations it reads."""
    kept, cached_at = [], None
    for line in plan.splitlines():
        indent = len(line) - len(line.lstrip(" :+-"))
        if cached_at is not None and indent > cached_at:
            continue
        cached_at = indent if "InMemoryRelation" in line else None
        kept.append(line)
    return "\n".join(kept)


def test_spark_reads_only_the_per_person_table_when_nobody_is_in_several_groups(one_group_engines):
    """The final query joins nothing: the branch of the people in several groups is gone (the data
    was scanned a second time for it, 3 of 9 s at 10 M rows)."""
    _, spark = one_group_engines
    backend = spark._backend
    recording = _RecordingSpark(backend._spark)
    backend._spark = recording
    try:
        backend.run(_plan_of(spark, ONE_GROUP_QUERIES["public keys, g = 1"]))
    finally:
        backend._spark = recording.spark
    plan = recording.frames[-1]._jdf.queryExecution().optimizedPlan().toString()
    assert "InMemoryRelation" in plan
    assert "Join" not in _outside_cached_data(plan), plan


def test_identical_releases_with_the_same_test_seed(engines):
    duck, spark = engines
    # Group bounding ranks by a salted hash; the salt comes from the (seeded) source, so a seeded
    # release is reproducible across engines.
    build = QUERIES["public keys, rows bound"]
    first = build(duck.table()).release(epsilon=1.0, rng=InsecureSeededRandom(9))
    second = build(spark.table()).release(epsilon=1.0, rng=InsecureSeededRandom(9))
    assert first.columns == second.columns


def test_identical_post_processed_releases_with_the_same_test_seed(engines):
    """HAVING, ORDER BY and LIMIT run on the released table in Python: the same on both engines,
    NULL keys included (they sort last)."""
    duck, spark = engines
    text = (
        "SELECT region, COUNT(*) AS n, AVG(income) FROM people GROUP BY 1 "
        "HAVING n > 10 AND (region IS NULL OR region <> 'north') ORDER BY region DESC, n LIMIT 3 OFFSET 1"
    )
    options = {"keys": [*REGIONS, None], "rows_per_group": 2, "bounds": {"income": (0, 1e5)}}
    first = duck.sql(text, epsilon=1.0, rng=InsecureSeededRandom(4), **options)
    second = spark.sql(text, epsilon=1.0, rng=InsecureSeededRandom(4), **options)
    assert first.columns == second.columns
    assert len(first.columns["region"]) == 3 and "north" not in first.columns["region"]


def test_schemas_agree(engines):
    duck, spark = engines
    for column in ("person_id", "income", "age", "region"):
        assert duck.columns[column].numeric == spark.columns[column].numeric
        assert duck.columns[column].integer == spark.columns[column].integer


def _plan(session, name):
    return _plan_of(session, QUERIES[name])


def _plan_of(session, build):
    return _compiled(session, build)[2]


def _compiled(session, build):
    """The query ``build`` makes, compiled (epsilon 1, delta 1e-6): (compiled, fixed bounds, plan)."""
    query = build(session.table())
    compiled = compile_query(query.plan, session._context(), parse_request(session.budget, epsilon=1.0, delta=1e-6))
    bounds = {c: b for c, b in compiled.bounds.items() if isinstance(b, tuple)}
    return compiled, bounds, aggregation_plan(compiled, bounds, "a fixed salt")


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_the_query_split_into_views_gives_the_same_rows(engines, name):
    """Spark runs its text (each person's groups ranked by a window) split at its CTEs (cached views
    first); the split, run on DuckDB, agrees."""
    duck, _ = engines
    text = render_sql(_plan(duck, name), rank_by_window=True)
    connection = duck._backend._connection
    steps, final = view_steps(text, "duckdb", "__split_test_")
    assert steps and "WITH" not in final.upper().split("SELECT")[0]
    try:
        for view, query, cache in steps:
            connection.execute(f"CREATE TEMP {'TABLE' if cache else 'VIEW'} {view} AS {query}")
        assert sorted(connection.execute(final).fetchall(), key=repr) == sorted(
            connection.execute(text).fetchall(), key=repr
        )
    finally:
        for view, _, cache in reversed(steps):
            connection.execute(f"DROP {'TABLE' if cache else 'VIEW'} IF EXISTS {view}")


def test_spark_leaves_no_views_or_cached_data_behind(engines):
    _, spark = engines
    session = spark._backend._spark
    before = {t.name for t in session.catalog.listTables()}
    spark._backend.run(_plan(spark, "private keys, one group"))
    after = {t.name for t in session.catalog.listTables()}
    assert session._jsparkSession.sharedState().cacheManager().isEmpty()  # nothing left cached
    assert after == before and not any(name.startswith("__dpkit_") for name in after)


@pytest.mark.parametrize(("columns", "repeated"), [(("region",), False), (("country",), True)])
def test_both_engines_find_repeated_lookup_keys(engines, columns, repeated):
    """The check behind refusing row-level joins that would duplicate rows ("E" is two regions' country)."""
    duck, spark = engines
    assert duck._backend.has_repeated_keys("regions", columns) is repeated
    assert spark._backend.has_repeated_keys("regions", columns) is repeated


def test_both_engines_group_signed_zero_keys_alike(engines):
    """Float group keys: -0.0 and 0.0 are one group, released as 0.0, on both engines. (NaN keys are
    checked on DuckDB only: Spark's Arrow/pandas import turns NaN into NULL.)"""
    import pyarrow as pa

    _, spark = engines
    values = [0.0, -0.0, 1.5, 0.0, -0.0, -0.0]
    table = pa.table({"person_id": pa.array(range(len(values)), pa.int64()), "v": pa.array(values, pa.float64())})
    options = {"name": "floats", "privacy_unit": "person_id", "budget": dpkit.ApproxDP(1000, 1e-3)}
    duck_s = E.Session.from_arrow(table, **options)
    spark_s = E.Session.from_arrow(table, backend=spark._backend, **options)
    results = []
    for session in (duck_s, spark_s):
        query = session.table().group_by("v").bound(rows_per_group=1, groups_per_person=1).agg(n=E.count())
        compiled = compile_query(query.plan, session._context(), parse_request(session.budget, epsilon=1.0, delta=1e-6))
        result = session._backend.run(aggregation_plan(compiled, {}, "a fixed salt"))
        results.append(sorted((repr(k[0]), n) for k, n in zip(result.keys, result.columns["rows"], strict=True)))
    assert results[0] == results[1] == [("0.0", 5), ("1.5", 1)]


def test_sessions_sharing_a_spark_session_never_run_a_query_with_ansi_on(engines, frame):
    """dpkit turns ANSI mode off around each Spark query and restores it; two sessions on one
    SparkSession take turns, so no query of one runs after the other restored the flag (a cast
    that fails on some rows would then fail the query, after its debit)."""
    from concurrent.futures import ThreadPoolExecutor

    _, spark = engines
    conf = spark._backend._spark.conf
    before = conf.get("spark.sql.ansi.enabled", None)
    conf.set("spark.sql.ansi.enabled", "true")
    try:
        options = {"name": "people", "privacy_unit": "person_id", "budget": dpkit.PureDP(100)}
        sessions = [E.Session.from_pandas(frame, backend=spark._backend, **options) for _ in range(2)]

        def ask(index):
            session = sessions[index % 2]
            query = session.table().where("CAST(region AS INTEGER) IS NULL").agg(n=E.count())
            return session.release(query, epsilon=1.0)

        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(ask, range(6)))
        assert len(results) == 6
        assert conf.get("spark.sql.ansi.enabled") == "true"  # restored
    finally:
        if before is None:
            conf.unset("spark.sql.ansi.enabled")
        else:
            conf.set("spark.sql.ansi.enabled", before)


def _person_ids(kind: str, count: int):
    """``count`` distinct person ids of Arrow type ``kind`` (texts that stress each engine's formatting)."""
    import datetime
    import decimal

    import pyarrow as pa

    ids = range(count)
    if kind == "string":
        return pa.array([f"p-{i}|é" for i in ids], pa.string())
    if kind == "double":  # shortest digits, exponents, 0.0 (with -0.0 rows below)
        return pa.array([i * 0.1 if i % 3 else i * 1e19 + 0.5 for i in ids], pa.float64())
    if kind == "decimal":
        return pa.array([decimal.Decimal(i) / 8 for i in ids], pa.decimal128(12, 3))
    if kind == "decimal8":  # Spark writes values below 1e-6 with an exponent ('1E-8', '0E-8')
        return pa.array([decimal.Decimal(i - 60) / 10**8 for i in ids], pa.decimal128(18, 8))
    if kind == "date":
        return pa.array([datetime.date(1999, 12, 1) + datetime.timedelta(days=i) for i in ids], pa.date32())
    if kind == "timestamp":
        start = datetime.datetime(2020, 1, 1, 23, 59, 59)
        return pa.array([start + datetime.timedelta(microseconds=i * 250_001) for i in ids], pa.timestamp("us"))
    if kind == "binary":
        return pa.array([bytes([i % 256, 0, 39, 255]) + str(i).encode() for i in ids], pa.binary())
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["string", "double", "decimal", "decimal8", "date", "timestamp", "binary"])
def test_both_engines_keep_the_same_groups_of_each_person(engines, kind):
    """A person in more groups than allowed keeps the first in an order hashed from the person's
    text: both engines must write that text alike for every person type they accept."""
    import numpy as np
    import pyarrow as pa

    _, spark = engines
    rng = np.random.default_rng(5)
    people = 120
    person = rng.integers(0, people, 1500)
    ids = _person_ids(kind, people).take(pa.array(person))
    if kind == "double":  # -0.0 and 0.0 are one person
        values = ids.to_pylist()
        ids = pa.array([-0.0 if i == 0 and n % 2 else values[n] for n, i in enumerate(person)])
    table = pa.table(
        {
            "pid": ids,
            "region": pa.array(np.array(REGIONS, dtype=object)[rng.integers(0, 4, person.size)]),
            "income": pa.array(rng.integers(0, 1000, person.size).astype(np.float64)),
        }
    )
    options = {"name": "spread", "privacy_unit": "pid", "budget": dpkit.ApproxDP(1000, 1e-3)}
    duck_s = E.Session.from_arrow(table, **options)
    spark_s = E.Session.from_arrow(table, backend=spark._backend, **options)
    for keys in (None, REGIONS):
        for g in (1, 2):
            query = (
                duck_s.table()
                .group_by("region", keys=keys)
                .bound(rows_per_group=2, groups_per_person=g)
                .agg(n=E.count(), t=E.sum("income", bounds=(0, 1000)))
            )
            compiled = compile_query(
                query.plan, duck_s._context(), parse_request(duck_s.budget, epsilon=1.0, delta=1e-6)
            )
            plan = aggregation_plan(compiled, {"income": (0.0, 1000.0)}, "a fixed salt")
            on_duck, on_spark = duck_s._backend.run(plan), spark_s._backend.run(plan)
            assert _sorted(on_duck) == _sorted(on_spark), (keys, g)
            assert sum(on_duck.columns["persons"]) == people * g  # everyone is in at least g groups


@pytest.mark.parametrize("kind", ["float32", "timestamp_tz"])
def test_spark_refuses_a_person_column_it_cannot_write_as_duckdb_does(engines, kind):
    import pyarrow as pa

    _, spark = engines
    arrow_type = pa.float32() if kind == "float32" else pa.timestamp("us", tz="UTC")
    values = [1.5, 2.5] if kind == "float32" else [0, 10**6]
    table = pa.table({"pid": pa.array(values, arrow_type), "region": ["a", "b"]})
    session = E.Session.from_arrow(
        table, backend=spark._backend, name="odd", privacy_unit="pid", budget=dpkit.ApproxDP(10, 1e-3)
    )
    query = session.table().group_by("region", keys=["a", "b"]).agg(n=E.count())
    with pytest.raises(dpkit.InvalidParameterError, match="privacy_unit"):
        session.release(query, epsilon=1.0)
    assert session.remaining == dpkit.ApproxDP(10, 1e-3)  # refused before the debit
    # One group per person needs no order: accepted.
    session.release(
        session.table().group_by("region", keys=["a", "b"]).bound(groups_per_person=2).agg(n=E.count()), epsilon=1.0
    )


def test_both_engines_rank_small_decimal_keys_alike(engines):
    """Private DECIMAL keys below 1e-6 are ranked by their text: Spark's must be DuckDB's
    ('0.00000001', not '1E-8'), or a person in several groups keeps other groups on Spark."""
    import decimal

    import numpy as np
    import pyarrow as pa

    _, spark = engines
    rng = np.random.default_rng(8)
    values = [decimal.Decimal(int(v)) / 10**8 for v in rng.integers(-40, 40, 900)]
    table = pa.table({"pid": pa.array(rng.integers(0, 150, 900)), "d": pa.array(values, pa.decimal128(18, 8))})
    options = {"name": "small", "privacy_unit": "pid", "budget": dpkit.ApproxDP(1000, 1e-3)}
    duck_s = E.Session.from_arrow(table, **options)
    spark_s = E.Session.from_arrow(table, backend=spark._backend, **options)
    query = duck_s.table().group_by("d").bound(groups_per_person=2).agg(n=E.count())
    compiled = compile_query(query.plan, duck_s._context(), parse_request(duck_s.budget, epsilon=1.0, delta=1e-6))
    plan = aggregation_plan(compiled, {}, "a fixed salt")
    on_duck, on_spark = duck_s._backend.run(plan), spark_s._backend.run(plan)
    # (keyed by value: the engines' Decimals may differ in their exponent, 1E-8 and 1.0E-8)
    assert dict(zip(on_duck.keys, on_duck.columns["persons"], strict=True)) == dict(
        zip(on_spark.keys, on_spark.columns["persons"], strict=True)
    )
    assert dict(zip(on_duck.keys, on_duck.columns["rows"], strict=True)) == dict(
        zip(on_spark.keys, on_spark.columns["rows"], strict=True)
    )
