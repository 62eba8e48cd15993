"""The engine end to end on DuckDB: bounding is exact, errors spend nothing, budgets are exact."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from engine_fixtures import exact_aggregates

import dpkit
from dpkit import engine as E
from dpkit._errors import BudgetExceededError, InvalidParameterError
from dpkit.engine._compiler import compile_query, parse_request
from dpkit.noise import InsecureSeededRandom

REGIONS = ["north", "south", "east", "west"]


def session(frame: pd.DataFrame, budget: dpkit.guarantees.Guarantee | None = None, **options) -> E.Session:
    return E.Session.from_pandas(
        frame, name="people", privacy_unit="person_id", budget=budget or dpkit.ApproxDP(1000, 1e-3), **options
    )


# -- bounding is what the docs say -----------------------------------------------------------------


def test_rows_bounding_scales_heavy_contributors_exactly():
    frame = pd.DataFrame(
        {
            "person_id": [1] * 7 + [2] * 2,
            "region": ["a"] * 9,
            "income": [10.0, 20, 30, 40, 50, 60, 70, 100, 300],
        }
    )
    s = session(frame)
    query = s.table().group_by("region", keys=["a"]).bound(rows_per_group=5).agg(n=E.count(), t=E.sum("income"))
    compiled, result = exact_aggregates(s, query, bounds={"income": (0, 1000)})
    assert result.columns["rows"] == [5 + 2]
    assert result.columns["persons"] == [2]
    unit = compiled.moment(compiled.statistics[1], (0, 1000)).unit_scale
    # SUM caps a heavy person's total at 5 x 1000: person 1's 280 is kept whole; person 2: 400.
    assert result.columns["m0"][0] * unit == pytest.approx(680, abs=2 * unit)
    compiled, result = exact_aggregates(s, query, bounds={"income": (0, 40)})
    unit = compiled.moment(compiled.statistics[1], (0, 40)).unit_scale
    # Rows clamp to 10, 20, 30, 40, 40, 40, 40 = 220 > 5 x 40: person 1 adds 200; person 2 adds 80.
    assert result.columns["m0"][0] * unit == pytest.approx(280, abs=2 * unit)
    mean_query = s.table().group_by("region", keys=["a"]).bound(rows_per_group=5).agg(m=E.mean("income"))
    compiled, result = exact_aggregates(s, mean_query, bounds={"income": (0, 1000)})
    csum = compiled.moment(compiled.statistics[1], (0, 1000))
    # A mean keeps the k / n scaling (it matches the row count 5): person 1 adds 5 x (40 - 500).
    assert result.columns["m0"][0] * csum.unit_scale == pytest.approx(
        5 * (40 - 500) + (100 - 500) + (300 - 500), abs=2 * csum.unit_scale
    )


def test_group_bounding_keeps_at_most_g_groups_per_person():
    frame = pd.DataFrame({"person_id": [1, 1, 1, 2, 3, 3], "region": ["a", "b", "c", "a", "b", "c"]})
    s = session(frame)
    query = s.table().group_by("region", keys=["a", "b", "c"]).bound(groups_per_person=2).agg(n=E.count())
    _, result = exact_aggregates(s, query)
    assert sum(result.columns["persons"]) == 2 + 1 + 2  # person 1 keeps 2 of its 3 groups
    assert sum(result.columns["rows"]) == 5


def test_nan_inf_null_are_clamped_as_documented():
    frame = pd.DataFrame(
        {"person_id": [1, 2, 3, 4, 5], "income": [np.nan, np.inf, -np.inf, None, 50.0], "region": ["a"] * 5}
    )
    s = session(frame)
    query = s.table().agg(t=E.sum("income", bounds=(10, 100)))
    compiled, result = exact_aggregates(s, query)
    unit = compiled.moment(compiled.statistics[0], (10, 100)).unit_scale
    # NaN and NULL -> 0 clamped into [10, 100] = 10; +inf -> 100; -inf -> 10; 50 stays.
    assert result.columns["m0"][0] * unit == pytest.approx(10 + 100 + 10 + 10 + 50, abs=5 * unit)


def test_filters_and_lookup_join(people):
    lookup = pd.DataFrame({"region": REGIONS, "country": ["N", "S", "E", "E"]})
    s = session(people, public_tables={"regions": lookup})
    query = (
        s.table()
        .join("regions", on="region")
        .where("age >= 40")
        .group_by("country", keys=["N", "S", "E"])
        .bound(rows_per_group=1000)
        .agg(n=E.count())
    )
    _, result = exact_aggregates(s, query)
    truth = people[people.age >= 40].merge(lookup).groupby("country").size()
    assert dict(zip([k[0] for k in result.keys], result.columns["rows"], strict=True)) == truth.to_dict()


# -- releases -----------------------------------------------------------------------------------------


def test_release_public_keys_has_every_key_and_intervals(people):
    s = session(people)
    query = s.table().group_by("region", keys=[*REGIONS, "nowhere"]).bound(rows_per_group=3)
    result = query.agg(n=E.count(), mean_income=E.mean("income", bounds=(0, 2e5))).release(
        epsilon=1.0, alpha=1e-7, rng=InsecureSeededRandom(3)
    )
    frame = result.to_pandas()
    assert frame.region.tolist() == [*REGIONS, "nowhere"]
    compiled, exact = exact_aggregates(s, query.agg(n=E.count()))
    truth = dict(zip([k[0] for k in exact.keys], exact.columns["rows"], strict=True))
    for _, row in frame.iterrows():
        assert row.n_low <= truth.get(row.region, 0) <= row.n_high  # fails with probability <= 1e-7
        assert 0 <= row.mean_income_low <= row.mean_income <= row.mean_income_high <= 2e5
    assert (frame.n >= 0).all() and (frame.n == frame.n.round()).all()
    assert result.contribution.rows_per_group == 3
    assert len(result.to_arrow()) == 5 and result.to_polars().height == 5
    assert result.to_dict()["rows"][0]["region"] == "north"


def test_private_keys_need_delta_and_release_sorted_keys(people):
    s = session(people)
    query = s.table().group_by("region").bound(rows_per_group=2).agg(n=E.count())
    before = s.remaining
    with pytest.raises(InvalidParameterError, match="delta"):
        query.release(epsilon=1.0)
    assert s.remaining == before
    result = query.release(epsilon=1.0, delta=1e-6, rng=InsecureSeededRandom(0))
    assert result.to_pandas().region.tolist() == sorted(REGIONS)
    assert result.guarantee == dpkit.ApproxDP(1.0, 1e-6)


def test_partition_selection_threshold_meets_delta(people):
    s = session(people)
    query = s.table().group_by("region").bound(groups_per_person=3).agg(n=E.count())
    compiled = compile_query(query.plan, s._context(), parse_request(s.budget, epsilon=0.7, delta=1e-7))
    mechanism = compiled.selection_mechanism(4)
    tau = compiled.selection_threshold(mechanism)
    q = math.exp(-1 / mechanism.scale)
    target = 1e-7 / 3
    assert q ** (tau - 1) / (1 + q) <= target < q ** (tau - 2) / (1 + q)


def test_quantiles_variance_and_histogram(people):
    s = session(people)
    result = (
        s.table()
        .bound(rows_per_group=50)
        .agg(
            q=E.quantiles("age", [0.25, 0.75], bounds=(0, 100)),
            sd=E.stddev("age", bounds=(0, 100)),
        )
        .release(epsilon=4.0, rng=InsecureSeededRandom(1))
    )
    frame = result.to_pandas()
    assert 25 <= frame.q_p25[0] <= 45 and 60 <= frame.q_p75[0] <= 80
    assert frame.sd_low[0] <= frame.sd[0] <= frame.sd_high[0]
    assert 10 < frame.sd[0] < 30
    histogram = s.table().bound(rows_per_group=50).histogram("age", [0, 30, 60, 90]).release(epsilon=1.0)
    assert histogram.to_pandas().age_bin.tolist() == ["[0, 30)", "[30, 60)", "[60, 90]"]


def test_quantile_accuracy_is_stated_in_ranks(people):
    from dpkit.engine._aggregation import quantile_grid
    from dpkit.engine._compiler import QUANTILE_BINS

    s = session(people)
    result = (
        s.table()
        .bound(rows_per_group=50)
        .agg(m=E.median("age", bounds=(0, 100)))
        .release(epsilon=0.5, rng=InsecureSeededRandom(3))
    )
    (entry,) = result.budget_split
    # McSherry-Talwar: the score is within (2 sensitivity / epsilon) ln(points / alpha) of the best
    # (0); the median's scores are doubled (a person moves its rank by half their weight), so the
    # width in rows is half that. (0, 100) has a grid of step 0.1: 1,001 points.
    points = len(quantile_grid(0.0, 100.0, QUANTILE_BINS).points)
    assert points == 1001
    expected = 2 * entry["sensitivity"] / entry["epsilon"] * math.log(points / 0.05) / 2
    assert entry["rank_half_width"] == pytest.approx(expected, rel=1e-3)
    assert math.isnan(result.to_pandas().m_low[0]) and "rank error <=" in str(result)
    ages = people["age"].to_numpy()  # every person has <= 50 rows here: no row is scaled down
    released = result.to_pandas().m[0]
    # Rows count at their nearest grid point: those below the released one lie below released - 0.05.
    below = np.count_nonzero(ages < released - 0.05)
    above = np.count_nonzero(ages > released + 0.05)
    assert below < ages.size / 2 + entry["rank_half_width"] and above < ages.size / 2 + entry["rank_half_width"]


def test_quantile_scores_are_the_distance_to_each_points_ranks():
    """The batched quantile path scores point j of every row as -f dist(level * total, [below_j, below_j +
    weight_j]), f = quantile_factor(level): within 2^-17 of the exact value for rows of multiples of
    2^-WEIGHT_BITS (the others are scored exactly: tests/engine/test_quantile_ties.py)."""
    from dpkit.engine._compiler import SelectionNoise
    from dpkit.engine._execute import _quantiles, quantile_factor

    seen = []

    class Recorder(SelectionNoise):
        def select_rows(self, candidates, scores, rng):
            seen.append(np.array(scores))
            return [0.0] * len(scores)

    unit = 2.0**-20
    rows = np.array([[3 * unit, 0.0, 5.0, 2.0**20, 0.0, 0.0], [0.0, 7.0, 7.0, 0.0, 1.0, 0.0]])
    candidates = [float(j) for j in range(6)]
    drawn = _quantiles(Recorder(1.0, 1.0, 1, "laplace"), candidates, rows, [0.5, 0.9], rng=None)
    assert drawn == [[0.0] * 2, [0.0] * 2]
    for level, scores in zip([0.5, 0.9], seen, strict=True):
        for row, got in zip(rows.tolist(), scores, strict=True):
            target = Fraction(level) * sum(map(Fraction, row))
            below = [sum(map(Fraction, row[:j]), Fraction(0)) for j in range(len(row))]
            expected = [
                -Fraction(quantile_factor(level)) * max(b - target, target - b - Fraction(w), Fraction(0))
                for b, w in zip(below, row, strict=True)
            ]
            assert max(abs(Fraction(g) - e) for g, e in zip(got.tolist(), expected, strict=True)) <= 2.0**-17


def test_auto_bounds_are_charged_and_reported(people):
    s = session(people)
    result = s.table().agg(m=E.mean("income", bounds="auto")).release(epsilon=1.0, rng=InsecureSeededRandom(2))
    low, high = result.bounds["income"]
    assert low < high and math.log2(high).is_integer()
    assert any("automatic bounds" in entry["statistic"] for entry in result.budget_split)


def test_zcdp_and_gaussian_budgets(people):
    s = session(people, budget=dpkit.ZCDP(1.0))
    query = s.table().group_by("region", keys=REGIONS).agg(n=E.count(), t=E.sum("income", bounds=(0, 1e5)))
    with pytest.raises(InvalidParameterError, match="rho"):
        query.release(epsilon=1.0, rho=0.1)
    result = query.release(rho=0.25, rng=InsecureSeededRandom(0))
    assert result.guarantee == dpkit.ZCDP(0.25)
    assert s.remaining == dpkit.ZCDP(0.75)
    # epsilon= spends Laplace noise, charged rho = epsilon^2 / 2 (Bun & Steinke 2016, Prop. 1.4).
    laplace = query.release(epsilon=0.5, rng=InsecureSeededRandom(1))
    assert laplace.guarantee == dpkit.PureDP(0.5)
    assert laplace.budget_split[0]["mechanism"] == "DiscreteLaplace"
    assert s.remaining == dpkit.ZCDP(0.625)
    approx = session(people)
    gaussian = approx.table().group_by("region", keys=REGIONS).agg(n=E.count())
    released = gaussian.release(epsilon=1.0, delta=1e-6, mechanism="gaussian", rng=InsecureSeededRandom(0))
    assert released.guarantee == dpkit.ApproxDP(1.0, 1e-6)
    assert released.budget_split[0]["mechanism"] == "DiscreteGaussian"


def test_accuracy_target_gives_the_smallest_epsilon_meeting_it(people):
    s = session(people, budget=dpkit.PureDP(10))
    query = s.table().group_by("region", keys=REGIONS).agg(n=E.count())
    preview = query.preview(accuracy=20, alpha=0.05)
    assert preview.statistics[0]["half_width"] <= 20
    assert preview.guarantee.epsilon < 0.5
    result = query.release(accuracy=20, alpha=0.05)
    assert result.guarantee == preview.guarantee


# -- the budget -----------------------------------------------------------------------------------


def test_ten_tenths_exhaust_one_and_the_eleventh_is_refused(people):
    s = session(people, budget=dpkit.PureDP(1.0))
    query = s.table().agg(n=E.count())
    for _ in range(10):
        query.release(epsilon=0.1)
    with pytest.raises(BudgetExceededError) as error:
        query.release(epsilon=0.1)
    assert error.value.requested == dpkit.PureDP(0.1)


def test_preview_spends_nothing_and_predicts_the_cost(people):
    s = session(people, budget=dpkit.PureDP(2.0))
    query = s.table().group_by("region", keys=REGIONS).agg(n=E.count(), t=E.sum("income", bounds=(0, 1e5)))
    preview = query.preview(epsilon=0.5)
    assert s.remaining == dpkit.PureDP(2.0)
    assert preview.affordable and preview.remaining_after == dpkit.PureDP(1.5)
    assert {row["statistic"] for row in preview.statistics} == {"count of rows", "sum of income"}
    assert query.release(epsilon=0.5).guarantee == preview.guarantee
    assert not query.preview(epsilon=5.0).affordable
    assert query.preview(epsilon=5.0).remaining_after is None


def test_preview_shows_what_remains_when_the_cost_is_of_another_kind_than_the_budget(people):
    """A ZCDP cost against an ApproxZCDP budget (public keys spend no delta): the ledger's own arithmetic."""
    s = session(people, budget=dpkit.ApproxZCDP(0.5, 1e-6))
    query = s.table().group_by("region", keys=REGIONS).agg(n=E.count())
    preview = query.preview(rho=0.125)
    assert preview.affordable and preview.remaining_after == dpkit.ApproxZCDP(0.375, 1e-6)
    query.release(rho=0.125)
    assert s.remaining == preview.remaining_after


@pytest.mark.parametrize(
    ("build", "cost", "match"),
    [
        (lambda q: q.agg(t=E.sum("salary", bounds=(0, 1))), {"epsilon": 1}, "unknown column"),
        (lambda q: q.agg(t=E.sum("income")), {"epsilon": 1}, "needs clamping bounds"),
        (lambda q: q.agg(t=E.sum("region", bounds=(0, 1))), {"epsilon": 1}, "numeric"),
        (lambda q: q.where("height > 3").agg(n=E.count()), {"epsilon": 1}, "unknown column"),
        (lambda q: q.group_by("person_id", keys=[1]).agg(n=E.count()), {"epsilon": 1}, "privacy unit"),
        (lambda q: q.agg(n=E.count()), {"epsilon": -1}, "epsilon"),
        (lambda q: q.agg(n=E.count()), {"epsilon": 1, "delta": 1.5}, "delta"),
        (lambda q: q.agg(n=E.count()), {"epsilon": 1, "colour": 2}, "unknown argument"),
        (lambda q: q.join("secret", on="region").agg(n=E.count()), {"epsilon": 1}, "public lookup"),
        (lambda q: q, {"epsilon": 1}, "no aggregates"),
    ],
)
def test_bad_input_is_refused_before_spending(people, build, cost, match):
    s = session(people, budget=dpkit.ApproxDP(1.0, 1e-6))
    with pytest.raises(InvalidParameterError, match=match):
        build(s.table()).release(**cost)
    assert s.remaining == dpkit.ApproxDP(1.0, 1e-6)
    assert s.ledger.entries() == ()


def test_budget_exceeded_names_requested_and_remaining(people):
    s = session(people, budget=dpkit.PureDP(1.0))
    with pytest.raises(BudgetExceededError) as error:
        s.table().agg(n=E.count()).release(epsilon=1.5)
    assert error.value.requested == dpkit.PureDP(1.5)
    assert s.ledger.entries() == ()


def test_unsupported_sql_is_refused_before_spending(people):
    s = session(people, budget=dpkit.PureDP(1.0))
    with pytest.raises(E.UnsupportedSQLError, match="HAVING"):
        s.sql("SELECT region, COUNT(*) FROM people GROUP BY region HAVING SUM(income) > 3", epsilon=1, keys=REGIONS)
    assert s.ledger.entries() == ()


def test_sql_and_builder_agree(people):
    s = session(people)
    sql = "SELECT region, COUNT(*) AS n, AVG(income) AS m FROM people WHERE age > 30 GROUP BY region"
    from_sql = s.sql(sql, epsilon=1, keys=REGIONS, bounds={"income": (0, 1e5)}, rng=InsecureSeededRandom(5))
    built = (
        s.table()
        .where("age > 30")
        .group_by("region", keys=REGIONS)
        .agg(n=E.count(), m=E.mean("income", bounds=(0, 1e5)))
        .release(epsilon=1, rng=InsecureSeededRandom(5))
    )
    assert from_sql.columns == built.columns
    assert s.ledger.entries()[0].description == sql


def test_sessions_on_one_ledger_file_share_the_budget(people, tmp_path):
    ledger = tmp_path / "budget.db"
    first = session(people, budget=dpkit.PureDP(1.0), ledger=ledger)
    second = E.Session.from_pandas(people, name="people", privacy_unit="person_id", ledger=ledger)
    first.table().agg(n=E.count()).release(epsilon=0.6)
    with pytest.raises(BudgetExceededError):
        second.table().agg(n=E.count()).release(epsilon=0.6)
    assert second.remaining == dpkit.PureDP(0.4)


def test_file_sources(people, tmp_path):
    clean = people.assign(income=people.income.where(np.isfinite(people.income)))
    clean.to_parquet(tmp_path / "people.parquet")
    clean.to_csv(tmp_path / "people.csv", index=False)
    persons, rows = people.person_id.nunique(), len(people)
    for opened, truth in (
        (
            E.Session.from_parquet(tmp_path / "people.parquet", privacy_unit="person_id", budget=dpkit.PureDP(1)),
            persons,
        ),
        (E.Session.from_csv(tmp_path / "people.csv", privacy_unit="person_id", budget=dpkit.PureDP(1)), persons),
        (
            E.Session.from_arrow(__import__("pyarrow").Table.from_pandas(clean), name="people", budget=dpkit.PureDP(1)),
            rows,
        ),
    ):
        # One row per person by default: the count is the number of people (or rows without a unit).
        result = opened.sql("SELECT COUNT(*) AS n FROM people", epsilon=0.5, alpha=1e-7, rng=InsecureSeededRandom(0))
        assert result.columns["n_low"][0] <= truth <= result.columns["n_high"][0]
    with pytest.raises(InvalidParameterError, match="no such file"):
        E.Session.from_parquet(tmp_path / "missing.parquet", budget=dpkit.PureDP(1))
    with pytest.raises(InvalidParameterError, match="privacy_unit"):
        E.Session.from_pandas(people, privacy_unit="nobody", budget=dpkit.PureDP(1))


def test_builder_is_immutable(people):
    s = session(people)
    base = s.table()
    grouped = base.group_by("region", keys=REGIONS)
    assert base.plan.group_by == () and grouped.plan.group_by == ("region",)
    assert grouped.agg(n=E.count()).plan.aggregates != grouped.plan.aggregates


def test_schema_errors_are_refused_before_the_debit(people):
    s = session(people, budget=dpkit.PureDP(1.0))
    for condition, message in (
        ("error('boom') IS NULL", "not allowed in a filter"),  # refused by name before the backend sees it
        ("no_such_function(age) > 1", "not allowed in a filter"),
        ("age > 'abc'::DATE", "backend cannot run it"),
    ):
        with pytest.raises(InvalidParameterError, match=message):
            s.table().where(condition).agg(n=E.count()).release(epsilon=0.5)
    assert s.remaining == dpkit.PureDP(1.0) and len(s.ledger.entries()) == 0


def test_a_failure_after_the_debit_keeps_it_and_withholds_the_backend_message(people, monkeypatch):
    s = session(people, budget=dpkit.PureDP(1.0))

    def fail(plan):
        raise RuntimeError("Could not convert string 'alice-secret' to INT32")

    monkeypatch.setattr(s._backend, "run", fail)
    with pytest.raises(dpkit.QueryFailedError) as caught:
        s.table().agg(n=E.count()).release(epsilon=0.25)
    assert "alice-secret" not in str(caught.value) and "RuntimeError" in str(caught.value)
    assert s.remaining == dpkit.PureDP(0.75)


def test_private_keys_threshold_the_released_count_when_there_is_one(people):
    """Laplace mode, COUNT and SUM with private keys: the noisy COUNT selects the keys (no persons share)."""
    s = session(people, budget=dpkit.ApproxDP(1.0, 1e-6))
    query = s.table().group_by("region").bound(rows_per_group=3, groups_per_person=2)
    query = query.agg(n=E.count(), t=E.sum("income", bounds=(0, 1e5)))
    compiled = compile_query(query.plan, s._context(), parse_request(s.budget, epsilon=1.0, delta=1e-6))
    assert compiled.selection_key == "rows" and "persons" not in compiled.shares
    assert compiled.shares["rows"] == compiled.selection_epsilon == Fraction(1, 2)
    mechanism = compiled.selection_mechanism(4)
    assert mechanism.sensitivity == 2 * 3 and mechanism.scale == pytest.approx(12)  # g k / epsilon
    # A group only the new person is in gets at most k = 3 rows; it is released with probability
    # P[3 + Z >= tau] <= delta / g, and tau is the smallest such threshold.
    tau = compiled.selection_threshold(mechanism)
    q = math.exp(-1 / mechanism.scale)
    assert q ** (tau - 3) / (1 + q) <= 1e-6 / 2 < q ** (tau - 4) / (1 + q)
    result = s.release(query, epsilon=1.0, delta=1e-6, rng=InsecureSeededRandom(4))
    assert result.guarantee == dpkit.ApproxDP(1.0, 1e-6)
    assert [entry["statistic"] for entry in result.budget_split][0] == "count of rows + partition selection"
    frame = result.to_pandas()
    assert sorted(frame.region) == sorted(REGIONS)  # every region has hundreds of rows, tau < 80
    assert (frame.n_low <= frame.n).all() and (frame.n <= frame.n_high).all()
    # With COUNT(DISTINCT person) requested, its noisy person count selects instead (free as well).
    distinct = s.table().group_by("region").agg(people=E.count_distinct(), n=E.count())
    compiled = compile_query(distinct.plan, s._context(), parse_request(s.budget, epsilon=1.0, delta=1e-6))
    assert compiled.selection_key == "persons"


def assert_threshold_meets_the_exact_tail(sigma: float, tau: int, *, base: int, target: float) -> None:
    """tau is the smallest threshold with P[base + Z >= tau] <= target, Z discrete Gaussian (mpmath tail sums)."""
    import mpmath

    mpmath.mp.dps = 30
    s2 = mpmath.mpf(sigma) ** 2

    def weight(x):
        return mpmath.exp(-(mpmath.mpf(x) ** 2) / (2 * s2))

    total = 1 + 2 * mpmath.nsum(weight, [1, mpmath.inf])

    def at_least(m):  # P[Z >= m]
        return mpmath.nsum(weight, [m, mpmath.inf]) / total

    bound = mpmath.mpf(target)
    assert at_least(tau - base) <= bound < at_least(tau - base - 1) * (1 + mpmath.mpf(1e-5))


def test_private_keys_threshold_the_released_gaussian_count(people):
    """Gaussian mode, COUNT and SUM with private keys: the discrete Gaussian COUNT selects the keys.

    No pure-DP share: the whole epsilon goes to the zCDP part (converted at delta / 2) and the
    selection costs delta / 2. Threshold checked against the discrete Gaussian's tail summed in mpmath.
    """

    from dpkit.mechanisms import DiscreteGaussian

    s = session(people, budget=dpkit.ApproxDP(1.0, 1e-6))
    query = s.table().group_by("region").bound(rows_per_group=3, groups_per_person=2)
    query = query.agg(n=E.count(), t=E.sum("income", bounds=(0, 1e5)))
    request = parse_request(s.budget, epsilon=1.0, delta=1e-6, mechanism="gaussian")
    compiled = compile_query(query.plan, s._context(), request)
    assert compiled.gaussian_selection and compiled.selection_key == "rows" and "persons" not in compiled.shares
    assert compiled.selection_epsilon == 0 and compiled.selection_delta == Fraction(1, 2) * Fraction(1, 10**6)
    rho = sum(compiled.shares.values(), Fraction(0))
    assert set(compiled.shares) == {"rows", "sum:income"}
    assert dpkit.ZCDP(float(rho)).to_approx(5e-7).epsilon <= 1.0
    assert dpkit.ZCDP(float(rho) * 1.01).to_approx(5e-7).epsilon > 1.0  # all of epsilon is used
    mechanism = compiled.selection_mechanism(4)
    assert isinstance(mechanism, DiscreteGaussian)
    assert mechanism.sensitivity == pytest.approx(math.sqrt(2) * 3)  # sqrt(g) k
    count_noise = compiled.mechanism(compiled.statistics[0], 4)
    assert count_noise.mechanism.sigma == mechanism.sigma  # the released COUNT is the selection count
    tau = compiled.selection_threshold(mechanism)
    assert_threshold_meets_the_exact_tail(mechanism.sigma, tau, base=3, target=1e-6 / 2 / 2)  # delta/2, g = 2
    result = s.release(query, epsilon=1.0, delta=1e-6, mechanism="gaussian", rng=InsecureSeededRandom(5))
    assert result.guarantee == dpkit.ApproxDP(1.0, 1e-6)
    entry = result.budget_split[0]
    assert entry["statistic"] == "count of rows + partition selection"
    assert entry["mechanism"] == f"DiscreteGaussian + threshold {tau}" and "rho" in entry and "epsilon" not in entry
    frame = result.to_pandas()
    assert sorted(frame.region) == sorted(REGIONS)
    assert (frame.n_low <= frame.n).all() and (frame.n <= frame.n_high).all()


@pytest.mark.parametrize("released", [True, False])
def test_private_keys_in_gaussian_mode_select_on_a_gaussian_person_count(people, released):
    """COUNT(DISTINCT person) (released) or SUM alone (a person count for selection only), Gaussian
    mode: the person count's discrete Gaussian selects, L2 sensitivity sqrt(g), one person adds 1;
    no pure-DP share, the whole epsilon goes to zCDP. Threshold checked against an mpmath tail sum.
    """

    from dpkit.mechanisms import DiscreteGaussian

    s = session(people, budget=dpkit.ApproxDP(1.0, 1e-6))
    query = s.table().group_by("region").bound(rows_per_group=3, groups_per_person=2)
    if released:
        query = query.agg(people=E.count_distinct(), n=E.count())
    else:
        query = query.agg(t=E.sum("income", bounds=(0, 1e5)))
    request = parse_request(s.budget, epsilon=1.0, delta=1e-6, mechanism="gaussian")
    compiled = compile_query(query.plan, s._context(), request)
    assert compiled.gaussian_selection and compiled.selection_key == "persons"
    assert compiled.selection_epsilon == 0 and compiled.selection_delta == Fraction(1, 2) * Fraction(1, 10**6)
    rho = sum(compiled.shares.values(), Fraction(0))
    assert dpkit.ZCDP(float(rho)).to_approx(5e-7).epsilon <= 1.0
    assert dpkit.ZCDP(float(rho) * 1.01).to_approx(5e-7).epsilon > 1.0  # all of epsilon is used
    mechanism = compiled.selection_mechanism(4)
    assert isinstance(mechanism, DiscreteGaussian)
    assert mechanism.sensitivity == pytest.approx(math.sqrt(2))  # sqrt(g), one person per group
    assert mechanism.rho == pytest.approx(float(compiled.shares["persons"]))
    tau = compiled.selection_threshold(mechanism)
    assert_threshold_meets_the_exact_tail(mechanism.sigma, tau, base=1, target=1e-6 / 2 / 2)  # delta/2, g = 2
    result = s.release(query, epsilon=1.0, delta=1e-6, mechanism="gaussian", rng=InsecureSeededRandom(5))
    assert result.guarantee == dpkit.ApproxDP(1.0, 1e-6)
    entry = result.budget_split[0]
    assert entry["statistic"] == "partition selection (persons)"
    assert entry["mechanism"] == f"DiscreteGaussian + threshold {tau}" and "rho" in entry and "epsilon" not in entry
    assert all("epsilon" not in e for e in result.budget_split)
    frame = result.to_pandas()
    assert sorted(frame.region) == sorted(REGIONS)
    assert ("people" in frame.columns) is released and "persons" not in frame.columns


def test_an_approximate_zcdp_budget_gives_selection_the_whole_delta_and_charges_rho(people):
    """ApproxZCDP budget, private keys: the statistics share rho, the query's whole delta goes to key
    selection (no per-query conversion), and the cost is ApproxZCDP(rho, delta), debited exactly.
    Threshold checked against an mpmath tail sum at the whole delta over g."""
    from dpkit.mechanisms import DiscreteGaussian

    s = session(people, budget=dpkit.ApproxZCDP(0.05, 1e-6))
    query = s.table().group_by("region").bound(rows_per_group=3, groups_per_person=2)
    query = query.agg(n=E.count(), t=E.sum("income", bounds=(0, 1e5)))
    compiled = compile_query(query.plan, s._context(), parse_request(s.budget, rho=0.01, delta=4e-7))
    assert compiled.cost == dpkit.ApproxZCDP(0.01, 4e-7) and compiled.gaussian_selection
    assert compiled.selection_delta == Fraction(4, 10**7) and compiled.gaussian_delta == 0
    assert sum(compiled.shares.values(), Fraction(0)) == Fraction(1, 100)
    mechanism = compiled.selection_mechanism(4)
    assert isinstance(mechanism, DiscreteGaussian) and mechanism.rho == pytest.approx(0.005)
    tau = compiled.selection_threshold(mechanism)
    assert_threshold_meets_the_exact_tail(mechanism.sigma, tau, base=3, target=4e-7 / 2)  # whole delta, g = 2
    result = s.release(query, rho=0.01, delta=4e-7, rng=InsecureSeededRandom(5))
    assert result.guarantee == dpkit.ApproxZCDP(0.01, 4e-7)
    assert sorted(result.to_pandas().region) == sorted(REGIONS)
    assert s.remaining == dpkit.ApproxZCDP(0.04, 6e-7)
    # Public keys need no delta: the cost has none, whatever delta was offered.
    public = s.table().group_by("region", keys=REGIONS).agg(n=E.count())
    assert s.preview(public, rho=0.01, delta=1e-7).guarantee == dpkit.ApproxZCDP(0.01, 0)
    # delta runs out before rho: refused with nothing spent.
    s.release(query, rho=0.01, delta=6e-7, rng=InsecureSeededRandom(6))
    with pytest.raises(BudgetExceededError):
        s.release(query, rho=0.01, delta=1e-9)
    assert s.remaining == dpkit.ApproxZCDP(0.03, 0)
    s.release(public, rho=0.03, rng=InsecureSeededRandom(7))  # exactly the rest of rho
    assert s.remaining == dpkit.ApproxZCDP(0, 0)


@pytest.mark.parametrize(
    ("cost", "name"),
    [
        ({"epsilon": 0.1, "rho": 0.01}, "rho"),
        ({"epsilon": 0.1, "mechanism": "gaussian"}, "mechanism"),
        ({"delta": 1e-7}, "rho"),
        ({"rho": 0.01, "delta": 1e-7, "mechanism": "laplace"}, "mechanism"),
        ({"accuracy": 10.0}, "accuracy"),
        ({"rho": 0.0, "delta": 1e-7}, "rho"),
    ],
)
def test_an_approximate_zcdp_budget_refuses_other_costs_by_name_and_spends_nothing(people, cost, name):
    s = session(people, budget=dpkit.ApproxZCDP(0.05, 1e-6))
    query = s.table().group_by("region").agg(n=E.count())
    with pytest.raises(InvalidParameterError) as refused:
        s.release(query, **cost)
    assert refused.value.name == name
    assert s.remaining == dpkit.ApproxZCDP(0.05, 1e-6)


@pytest.mark.parametrize(
    ("budget", "cost", "target"),
    [
        (dpkit.ApproxDP(10.0, 0.5), {"epsilon": 1.0, "delta": 0.2, "mechanism": "gaussian"}, 0.2 / 2 / 2),
        (dpkit.ApproxZCDP(1.0, 0.5), {"rho": 0.05, "delta": 0.1}, 0.1 / 2),
    ],
    ids=["approx-dp: delta / 2 selects", "approx-zcdp: all of delta selects"],
)
def test_gaussian_selection_releases_a_one_person_group_at_most_at_the_stated_rate(people, budget, cost, target):
    """Empirical: with delta large enough to measure, a group of one person (k rows) passes the threshold
    at most (selection delta) / g of the time (Hoeffding margin at false-positive rate 1e-6), and two
    steps lower it would not.
    """
    s = session(people, budget=budget)
    query = s.table().group_by("region").bound(rows_per_group=3, groups_per_person=2).agg(n=E.count())
    compiled = compile_query(query.plan, s._context(), parse_request(s.budget, **cost))
    mechanism = compiled.selection_mechanism(1)
    tau = compiled.selection_threshold(mechanism)
    draws = 400_000
    noisy = np.asarray(mechanism.release([3] * draws, rng=InsecureSeededRandom(11)), dtype=np.float64)
    margin = math.sqrt(math.log(1e6) / (2 * draws))  # target: selection delta over g = 2 groups
    assert (noisy >= tau).mean() <= target + margin
    assert (noisy >= tau - 2).mean() > target + margin  # a threshold two steps lower would break the claim


@pytest.mark.parametrize(
    "budget",
    [
        dpkit.PureDP(1.0, dpkit.NeighbourRelation.REPLACE_ONE),
        dpkit.ApproxDP(1.0, 1e-6, dpkit.NeighbourRelation.REPLACE_ONE),
        dpkit.ZCDP(0.5, dpkit.NeighbourRelation.REPLACE_ONE),
        dpkit.ApproxZCDP(0.5, 1e-6, dpkit.NeighbourRelation.REPLACE_ONE),
    ],
)
def test_a_replace_one_budget_is_refused_since_releases_are_calibrated_to_add_remove(people, budget, tmp_path):
    """Sensitivities are those of adding or removing a person; a replacement moves a person's rows
    between groups (twice the L1 change), so a replace-one label would understate the cost."""
    with pytest.raises(InvalidParameterError) as refused:
        session(people, budget=budget)
    assert refused.value.name == "budget" and "ADD_REMOVE" in str(refused.value)
    path = tmp_path / "replace.db"
    E.Ledger(path, budget).close()
    with pytest.raises(InvalidParameterError) as refused:
        E.Session.from_pandas(people, name="people", privacy_unit="person_id", ledger=path)
    assert refused.value.name == "ledger"
    with E.Ledger(path) as ledger:
        assert ledger.entries() == ()


@pytest.mark.parametrize("salt", [f"s{i}" for i in range(8)])
@pytest.mark.parametrize("keys", ["private", "public, ranked in SQL"])
@pytest.mark.parametrize(("value", "other_form"), [(0.0, -0.0), (math.nan, -math.nan)], ids=["zero", "nan"])
def test_a_signed_zero_or_nan_group_key_cannot_reorder_other_peoples_groups(salt, keys, value, other_form):
    """-0.0 and 0.0 are one group, and so are NaN and -NaN. Which form a table holds must not change
    the group's salted rank: otherwise one added person (a row in the other form) flips which group
    everyone in two groups keeps (k = g = 1). Arrow input keeps NaN as NaN (pandas would give NULL)."""
    import pyarrow as pa

    base = [(p, v) for p in range(20) for v in (value, 1.0)]
    neighbour = [(999, other_form), *base]
    results = []
    for rows in (base, neighbour):
        table = pa.table(
            {
                "person_id": pa.array([p for p, _ in rows], pa.int64()),
                "c": pa.array([None] * len(rows), pa.float64()),
                "v": pa.array([v for _, v in rows], pa.float64()),
            }
        )
        s = E.Session.from_arrow(table, name="people", privacy_unit="person_id", budget=dpkit.ApproxDP(10, 1e-3))
        if keys == "private":
            grouped = s.table().group_by("v")
        else:  # a key column with only NULL keys: the key list is built from the groups present
            grouped = s.table().group_by("c", "v", keys=[(None, value), (None, 1.0)])
        query = grouped.bound(rows_per_group=1, groups_per_person=1).agg(n=E.count(), p=E.count_distinct())
        _, result = exact_aggregates(s, query, salt=salt, epsilon=1.0, delta=1e-6)
        counts = zip(result.columns["rows"], result.columns["persons"], strict=True)
        results.append({repr(key[-1]): pair for key, pair in zip(result.keys, counts, strict=True)})
        assert all(math.copysign(1.0, key[-1]) > 0 for key in result.keys)  # released as 0.0 / nan, never signed
    before, after = results
    for position in (0, 1):
        change = sum(abs(after.get(k, (0, 0))[position] - before.get(k, (0, 0))[position]) for k in {*before, *after})
        assert change <= 1  # k = g = 1: one added person moves one count by one


def test_row_level_privacy_refuses_a_lookup_whose_join_key_repeats():
    """privacy_unit=None: rows are not bounded, so a repeated lookup key would count one private row
    several times (L1 2 for one added row where 1 is claimed). Refused by name, nothing spent; a
    lookup with one row per key, or a privacy unit column (rows are then bounded per person), is fine."""
    private = pd.DataFrame({"person_id": [1, 2, 3], "region": ["a", "b", "b"], "x": [1.0, 2.0, 3.0]})
    repeated = pd.DataFrame({"region": ["a", "a", "b", None, None], "country": ["A", "A2", "B", "X", "Y"]})
    unique = pd.DataFrame({"region": ["a", "b", None, None], "country": ["A", "B", "X", "Y"]})  # NULLs never join
    budget = dpkit.ApproxDP(10, 1e-3)

    def rows_session(lookup, unit=None):
        return E.Session.from_pandas(
            private, name="people", privacy_unit=unit, budget=budget, public_tables={"lookup": lookup}
        )

    s = rows_session(repeated)
    query = s.table().join("lookup", on="region").group_by("country", keys=["A", "A2", "B"]).agg(n=E.count())
    for attempt in (lambda: s.preview(query, epsilon=1.0), lambda: s.release(query, epsilon=1.0)):
        with pytest.raises(InvalidParameterError) as refused:
            attempt()
        assert refused.value.name == "join" and "region" in str(refused.value)
    assert s.remaining == budget
    s = rows_session(unique)
    s.release(s.table().join("lookup", on="region").agg(n=E.count()), epsilon=1.0, rng=InsecureSeededRandom(3))
    s = rows_session(repeated, unit="person_id")
    s.release(s.table().join("lookup", on="region").agg(n=E.count()), epsilon=1.0, rng=InsecureSeededRandom(3))


def test_automatic_bounds_candidates_are_sorted_and_always_give_low_below_high():
    """Post-processing of the two released split points: sorted, within +-2^59, and widened to
    low < high even when both land on the lowest or the highest candidate (found in review)."""
    from dpkit.engine._compiler import log2_candidates
    from dpkit.engine._execute import auto_bound_candidates, widen

    order, splits = log2_candidates()
    candidates = auto_bound_candidates(splits)
    assert len(candidates) == len(order) + 1 and candidates == sorted(candidates)
    assert candidates[0] == -(2.0**59) and candidates[-1] == 2.0**59
    for value in (candidates[0], candidates[1], 0.0, candidates[-2], candidates[-1]):
        low, high = widen(value, value, candidates)
        assert -(2.0**59) <= low < high <= 2.0**59 and value in (low, high)
    assert widen(-1.0, 3.0, candidates) == (-1.0, 3.0)


@pytest.mark.parametrize(
    "condition",
    [
        "error('x') IS NULL",  # DuckDB: raises on purpose
        "assert_true(NOT (person_id = 37 AND age > 80)) IS NULL",  # Spark
        "raise_error('x') IS NULL",
        "java_method('java.lang.Integer', 'parseInt', region) > 0",
        "reflect('java.lang.Integer', 'parseInt', region) > 0",
        "length(repeat(region, 100000000)) > 0",  # running time or memory depends on the row
        "regexp_matches(region, '(a+)+$')",
    ],
)
def test_a_filter_that_could_fail_call_out_or_run_long_on_one_row_is_refused(people, condition):
    """Whether a query fails, or how long it runs, must not depend on one person's row: such functions
    are refused by name before anything is read or spent, also in a Query built by hand."""
    from dpkit.engine._plan import Query

    s = session(people, budget=dpkit.PureDP(1.0))
    with pytest.raises(InvalidParameterError) as refused:
        s.table().where(condition)
    assert refused.value.name == "condition" and "not allowed in a filter" in str(refused.value)
    by_hand = dataclasses.replace(s.table().agg(n=E.count()).plan, where=(condition,))
    assert isinstance(by_hand, Query)
    with pytest.raises(InvalidParameterError, match="not allowed in a filter"):
        s.release(by_hand, epsilon=0.5)
    assert s.remaining == dpkit.PureDP(1.0)


def test_a_hand_built_query_cannot_put_a_subquery_in_its_filter(people):
    s = session(people, budget=dpkit.PureDP(1.0))
    plan = s.table().agg(n=E.count()).plan
    by_hand = dataclasses.replace(plan, where=("(SELECT max(age) FROM people WHERE person_id = 37) > 80",))
    with pytest.raises(InvalidParameterError, match="subqueries"):
        s.release(by_hand, epsilon=0.5)
    assert s.remaining == dpkit.PureDP(1.0)


def test_filters_with_common_functions_still_run(people):
    s = session(people, budget=dpkit.PureDP(10.0))
    condition = (
        "lower(region) IN ('north', 'south') AND CAST(age AS DOUBLE) BETWEEN 18 AND 90 "
        "AND coalesce(income, 0) >= 0 AND length(region) > 2 AND region LIKE '%th' AND contains(region, 'o') "
        "AND abs(age) % 2 = 0 AND round(income, 2) >= 0"
    )
    result = s.table().where(condition).agg(n=E.count()).release(epsilon=1.0, rng=InsecureSeededRandom(1))
    assert result.columns["n"][0] >= 0


def test_a_join_on_columns_of_different_types_is_refused_before_the_debit():
    """A cast the engine would add for the join sits outside the filter's TRY: one person's value that
    fails it would fail the query (found in review). Refused by name, nothing spent."""
    private = pd.DataFrame({"person_id": [36, 37], "code": ["1", "X"]})
    codes = pd.DataFrame({"code": [1, 2], "label": ["one", "two"]})
    s = E.Session.from_pandas(
        private, name="people", privacy_unit="person_id", budget=dpkit.PureDP(1.0), public_tables={"codes": codes}
    )
    with pytest.raises(InvalidParameterError) as refused:
        s.sql("SELECT COUNT(*) FROM people JOIN codes USING (code) WHERE person_id = 37", epsilon=0.5)
    assert refused.value.name == "on" and "type" in str(refused.value)
    assert s.remaining == dpkit.PureDP(1.0)


def test_a_public_table_cannot_shadow_the_private_one_by_case(people):
    s = session(people, budget=dpkit.PureDP(1.0))
    for name in ("PEOPLE", "People"):
        with pytest.raises(InvalidParameterError) as refused:
            s.add_public_table(name, pd.DataFrame({"person_id": [1], "region": ["x"]}))
        assert refused.value.name == "public_tables"
    assert s.table().agg(n=E.count()).release(epsilon=0.5, rng=InsecureSeededRandom(2)).columns["n"][0] > 100


def test_grouping_by_a_struct_or_list_column_is_refused_before_the_debit():
    frame = pd.DataFrame({"person_id": [1, 2], "tags": [[1, 2], [3]], "region": ["a", "b"]})
    s = E.Session.from_pandas(frame, name="people", privacy_unit="person_id", budget=dpkit.ApproxDP(1.0, 1e-6))
    with pytest.raises(InvalidParameterError) as refused:
        s.table().group_by("tags").agg(n=E.count()).release(epsilon=0.5, delta=1e-6)
    assert refused.value.name == "group_by"
    assert s.remaining == dpkit.ApproxDP(1.0, 1e-6)


def test_one_session_shared_by_threads_never_fails_a_debited_query(people):
    """Queries from several threads take turns on the session's one connection: every debit is a
    release, and every release is debited (found in review: concurrent queries used to fail after
    their debit when the connection was busy)."""
    from concurrent.futures import ThreadPoolExecutor

    s = session(people, budget=dpkit.PureDP(100.0))
    query = s.table().group_by("region", keys=REGIONS).agg(n=E.count())

    def ask(_):
        return s.release(query, epsilon=0.5)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(ask, range(48)))
    assert len(results) == 48 and len(s.ledger.entries()) == 48
    assert s.remaining == dpkit.PureDP(76.0)


def test_nan_and_infinite_public_keys_match_their_own_rows_not_null():
    """sqlglot writes NaN as NULL and inf as a name: keys are written as typed literals instead."""
    import pyarrow as pa

    values = [math.nan, math.nan, None, math.inf, 1.0, -math.inf]
    table = pa.table({"person_id": pa.array(range(6), pa.int64()), "v": pa.array(values, pa.float64())})
    s = E.Session.from_arrow(table, name="people", privacy_unit="person_id", budget=dpkit.PureDP(100))
    query = s.table().group_by("v", keys=[math.nan, None, math.inf, -math.inf, 1.0]).agg(n=E.count())
    _, result = exact_aggregates(s, query)
    counts = {repr(key[0]): rows for key, rows in zip(result.keys, result.columns["rows"], strict=True)}
    assert counts == {"nan": 2, "None": 1, "inf": 1, "-inf": 1, "1.0": 1}


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda s: s.release(s.table().agg(n=E.count()), epsilon=1.0, bounds="x"), "bounds"),
        (lambda s: s.table().group_by("region", keys=[["north"]]), "keys"),
        (lambda s: s.table().group_by("region", keys=REGIONS).bound(rows_per_group=10**30), "rows_per_group"),
        (lambda s: s.table().group_by("region", keys=REGIONS).bound(groups_per_person=10**10), "groups_per_person"),
    ],
)
def test_more_bad_input_is_refused_by_name_before_anything_is_spent(people, call, name):
    s = session(people, budget=dpkit.PureDP(1.0))
    with pytest.raises(InvalidParameterError) as refused:
        call(s)
    assert refused.value.name == name
    assert s.remaining == dpkit.PureDP(1.0)


ROW = "(person_id = 37 AND age > 80)"


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        # nested replace: output size exponential in the nesting, so time and memory reveal the row
        (f"length(replace(CASE WHEN {ROW} THEN 'x' ELSE '' END, 'x', 'xxxxxxxxxx')) >= 0", "not allowed"),
        # a pattern from the row, or a backslash (Spark's default escape): malformed on some rows only
        (f"region LIKE CASE WHEN {ROW} THEN 'a\\' ELSE 'a' END", "fixed text pattern"),
        ("region ILIKE 'a\\b'", "fixed text pattern"),
        # Spark's LIKE is a backtracking regex: '%a%a%...b' took 50x longer on one long row
        (f"CASE WHEN {ROW} THEN region LIKE '%a%a%a%a%a%a%a%a%a%a%b' ELSE TRUE END", "one '%'"),
        # Spark raises on a huge ROUND scale whatever ANSI says, for the rows that reach it
        (f"CASE WHEN {ROW} THEN ROUND(CAST(age AS DOUBLE), 1000000000) > 0 ELSE TRUE END", "digits"),
        (f"CASE WHEN {ROW} THEN ROUND(age, -2147483647) > 0 ELSE TRUE END", "digits"),
        # date and time arithmetic: Spark raises on its overflow whatever the ANSI setting
        (f"YEAR(ts + INTERVAL 100000000 YEAR * CASE WHEN {ROW} THEN 100 ELSE 0 END) > 0", "not allowed"),
        (f"(ts - CAST('1970-01-01' AS TIMESTAMP)) * CASE WHEN {ROW} THEN 100000000 ELSE 1 END IS NOT NULL", "date"),
        ("(d - CAST('1970-01-01' AS DATE)) * 2 IS NOT NULL", "date"),
        (f"ts + CAST(CASE WHEN {ROW} THEN '290000 years' ELSE '1 day' END AS INTERVAL) IS NOT NULL", "date"),
    ],
)
def test_filters_whose_failure_or_cost_could_depend_on_one_row_are_refused(condition, message):
    """Bypasses of the filter allowlist found in review (each failed or ran long only when person
    37's row was present); refused by name before anything is read or spent."""
    frame = pd.DataFrame(
        {
            "person_id": [36, 37],
            "age": [40, 85],
            "region": ["a", "b"],
            "ts": pd.to_datetime(["2020-01-01", "2021-01-01"]),
            "d": pd.to_datetime(["2020-01-01", "2021-01-01"]).date,
        }
    )
    s = E.Session.from_pandas(frame, name="people", privacy_unit="person_id", budget=dpkit.PureDP(1.0))
    with pytest.raises(InvalidParameterError) as refused:
        s.release(s.table().where(condition).agg(n=E.count()), epsilon=0.5)
    assert refused.value.name == "condition" and message in str(refused.value)
    assert s.remaining == dpkit.PureDP(1.0)
    for allowed in ("YEAR(ts) + 1 > 2020", "ts >= CAST('2020-06-01' AS TIMESTAMP)", "region LIKE 'a%'"):
        s.table().where(allowed)  # date comparisons, YEAR(...) and fixed patterns stay allowed


def test_a_long_public_key_list_is_read_from_a_registered_table_with_the_same_result(people, monkeypatch):
    """Above KEY_TABLE_THRESHOLD keys the list is an Arrow table, not VALUES (parsing 1e5 VALUES rows took
    seconds); the aggregates are those of the VALUES path exactly, and nothing stays registered."""
    from dpkit.engine import _aggregation

    s = session(people)
    keys = {"region": REGIONS, "age": list(range(0, 100))}
    query = s.table().group_by("region", "age", keys=keys).bound(rows_per_group=2, groups_per_person=2)
    query = query.agg(n=E.count(), t=E.sum("income", bounds=(0, 1e5)))
    compiled, by_table = exact_aggregates(s, query)
    assert _aggregation.key_table_columns(_aggregation_plan(compiled)) is not None
    monkeypatch.setattr(_aggregation, "KEY_TABLE_THRESHOLD", 10**9)
    _, by_values = exact_aggregates(s, query)
    assert sorted(zip(by_table.keys, *by_table.columns.values(), strict=True)) == sorted(
        zip(by_values.keys, *by_values.columns.values(), strict=True)
    )
    assert sum(by_table.columns["rows"]) > 0
    listed = "SELECT table_name FROM duckdb_tables() UNION ALL SELECT view_name FROM duckdb_views() WHERE NOT internal"
    tables = s._backend._connection.execute(listed).fetchall()
    assert not [t for (t,) in tables if t.startswith("__dpkit_keys_")]


def test_private_keys_are_ranked_into_a_temporary_table_with_the_same_result(people, monkeypatch):
    """DuckDB runs private keys' ranking first, into a table whose size its planner sees (as a CTE it
    was estimated at the table's row count); the aggregates are those of the one-statement text, and
    the table is dropped after the query, also when the query fails."""
    import duckdb

    from dpkit.engine import _backends

    s = E.Session.from_pandas(people, name="people", privacy_unit="person_id", budget=dpkit.ApproxDP(10, 1e-3))
    query = s.table().group_by("region").bound(rows_per_group=2, groups_per_person=2)
    query = query.agg(n=E.count(), t=E.sum("income", bounds=(0, 1e5)))
    compiled, by_table = exact_aggregates(s, query, epsilon=1.0, delta=1e-6)
    plan = _aggregation_plan(compiled)
    assert _backends.private_keys_sql(plan) is not None
    connection = s._backend._connection
    inline = connection.execute(_backends.render_sql(plan)).fetchall()  # the key list as a CTE
    columns = by_table.columns.values()
    assert sorted(inline) == sorted((key[0], *rest) for key, *rest in zip(by_table.keys, *columns, strict=True))
    assert len(inline) == len(REGIONS)
    listed = "SELECT table_name FROM duckdb_tables()"
    assert not [t for (t,) in connection.execute(listed).fetchall() if t.startswith("__dpkit_keys_")]
    monkeypatch.setattr(_backends, "render_sql", lambda plan, key_table=None: f"SELECT * FROM {key_table}, nowhere")
    with pytest.raises(duckdb.CatalogException):
        s._backend.run(plan)
    assert not [t for (t,) in connection.execute(listed).fetchall() if t.startswith("__dpkit_keys_")]


def test_a_long_key_list_arrow_cannot_type_falls_back_to_values():
    """Keys of mixed kinds in one column (ints and a string) make no Arrow column: VALUES is used."""
    from types import SimpleNamespace

    from dpkit.engine._backends import DuckDBBackend

    plan = SimpleNamespace(
        indexed_keys=True,
        null_key_columns=frozenset(),
        groups=("tag",),
        key_order=tuple([(i,) for i in range(300)] + [("x",)]),
    )
    with DuckDBBackend()._key_table(plan) as name:  # type: ignore[arg-type]
        assert name is None


def _aggregation_plan(compiled):
    from dpkit.engine._compiler import aggregation_plan

    return aggregation_plan(compiled, {c: b for c, b in compiled.bounds.items() if isinstance(b, tuple)}, "salt")


def test_released_private_keys_are_in_one_order_whatever_their_types():
    """The fast tuple order for plain keys is _sort_key's order; mixed kinds, NULL and NaN use _sort_key."""
    from dpkit.engine._execute import _in_key_order, _sort_key

    cases = [
        [(3,), (1,), (2,)],
        [("b", 2), ("a", 9), ("a", 1)],
        [(2.5,), (-1.0,), (0.0,)],
        [(1,), ("a",), (None,), (0,)],
        [(float("nan"),), (1.0,), (0.5,)],
        [(True,), (1,), (0,)],
    ]
    for keys in cases:
        indices = list(range(len(keys)))
        assert _in_key_order(keys, indices) == sorted(indices, key=lambda i: _sort_key(keys[i])), keys


def test_laplace_with_public_keys_is_not_charged_an_unused_delta(people):
    """Laplace noise is pure DP: a delta given to a public-key query pays for nothing and is not debited
    (it was: the ledger lost 1e-6 per query). With private keys the delta pays for key selection."""
    s = session(people, budget=dpkit.ApproxDP(10.0, 1e-5))
    public = (
        s.table()
        .group_by("region", keys=sorted(people["region"].unique()))
        .agg(n=E.count())
        .release(epsilon=1.0, delta=1e-6, rng=InsecureSeededRandom(4))
    )
    assert public.guarantee == dpkit.ApproxDP(1.0, 0.0)
    assert s.remaining == dpkit.ApproxDP(9.0, 1e-5)
    private = (
        s.table().group_by("region").agg(n=E.count()).release(epsilon=1.0, delta=1e-6, rng=InsecureSeededRandom(5))
    )
    assert private.guarantee == dpkit.ApproxDP(1.0, 1e-6)
    assert s.remaining == dpkit.ApproxDP(8.0, 9e-6)
