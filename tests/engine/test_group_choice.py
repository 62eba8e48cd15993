"""Which groups a person in too many groups keeps: each person's own salted order of their groups.

Before, every person kept the groups earliest in one salted order shared by all persons, so with
g = 1 the first group of that order kept every person who was also elsewhere and the last kept
almost nobody (a region's count could drop to 13 % of its people while another kept 100 %). Now
the order is a salted hash of (group, person): each of a person's groups is equally likely to be
kept, and the choice depends on that person's rows only.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from engine_fixtures import exact_aggregates

import dpkit
from dpkit import engine as E

GROUPS = ["a", "b", "c", "d"]
PEOPLE = 4000
SALTS = ("first salt", "second salt")
KEYS = {"public": GROUPS, "private": None}
GROUP_LIMITS = (1, 2)

# Each person is in all four groups and keeps g of them. Were the order of each person's groups a
# uniformly random permutation, a group's count of persons would be Binomial(PEOPLE, g / 4). The
# test checks every count within `SLACK` of its mean: by Hoeffding, P(|X - np| >= t) <= 2 exp(-2 t^2 / n),
# and a union over all the counts checked keeps the false-positive rate at most 1e-6.
CHECKS = len(SALTS) * len(KEYS) * len(GROUP_LIMITS) * len(GROUPS)
SLACK = math.ceil(math.sqrt(PEOPLE / 2 * math.log(2 * CHECKS / 1e-6)))


def test_the_slack_is_what_the_false_positive_rate_allows():
    assert 2 * math.exp(-2 * SLACK**2 / PEOPLE) * CHECKS <= 1e-6
    assert SLACK < 200  # the old shared order gave 0 or PEOPLE: far outside


@pytest.fixture(scope="module")
def everyone_everywhere() -> pd.DataFrame:
    people = np.repeat(np.arange(PEOPLE), len(GROUPS))
    return pd.DataFrame({"person_id": people, "g": np.tile(GROUPS, PEOPLE), "x": 1.0})


@pytest.mark.parametrize("salt", SALTS)
@pytest.mark.parametrize("keys", sorted(KEYS))
@pytest.mark.parametrize("g", GROUP_LIMITS)
def test_each_of_a_persons_groups_is_equally_likely_to_be_kept(everyone_everywhere, salt, keys, g):
    session = E.Session.from_pandas(
        everyone_everywhere, name="t", privacy_unit="person_id", budget=dpkit.ApproxDP(10, 1e-3)
    )
    query = session.table().group_by("g", keys=KEYS[keys]).bound(groups_per_person=g).agg(n=E.count())
    _, result = exact_aggregates(session, query, salt=salt, epsilon=1.0, delta=1e-6)
    persons = dict(zip((key[0] for key in result.keys), result.columns["persons"], strict=True))
    assert sum(persons.values()) == PEOPLE * g  # every person keeps exactly g groups
    mean = PEOPLE * g / len(GROUPS)
    for group in GROUPS:
        assert abs(persons.get(group, 0) - mean) <= SLACK, (group, persons)


def _spread(seed: int, extra: bool) -> pd.DataFrame:
    """People 0..299 each in 2-4 of ten groups; with ``extra``, one more person in 40 other groups."""
    rng = np.random.default_rng(seed)
    rows = []
    for person in range(300):
        for group in rng.choice(10, size=int(rng.integers(2, 5)), replace=False):
            rows += [(person, f"g{group}", float(rng.integers(0, 50)))] * int(rng.integers(1, 4))
    if extra:
        rows += [(10_000, f"h{group:02d}", 1.0) for group in range(40)]
    return pd.DataFrame(rows, columns=["person_id", "g", "x"])


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("g", [1, 2])
def test_a_persons_choice_does_not_depend_on_anyone_elses_groups(seed, g):
    """Private keys: another person's new groups change every group's rank among the groups present,
    but no one else's choice (it hashes each group's own salted hash, never its rank)."""
    results = []
    for extra in (False, True):
        session = E.Session.from_pandas(
            _spread(seed, extra), name="t", privacy_unit="person_id", budget=dpkit.ApproxDP(10, 1e-3)
        )
        query = session.table().group_by("g").bound(rows_per_group=2, groups_per_person=g)
        query = query.agg(n=E.count(), t=E.sum("x", bounds=(0, 50)))
        _, result = exact_aggregates(session, query, salt=f"salt {seed}", epsilon=1.0, delta=1e-6)
        rows = zip(result.keys, result.columns["rows"], result.columns["persons"], result.columns["m0"], strict=True)
        results.append({key: values for key, *values in rows if key[0].startswith("g")})
    assert results[0] == results[1]
    assert len(results[0]) == 10


def test_integer_ids_a_multiple_of_the_prime_apart_are_still_spread():
    """Ids i * (2^31 - 1) share their residue modulo 2^31 - 1; the second prime tells them apart
    (before, all 4,000 people kept the same group). Same Hoeffding slack as above (one check per group)."""
    people = np.repeat(np.arange(PEOPLE, dtype=np.int64) * (2**31 - 1), len(GROUPS))
    frame = pd.DataFrame({"person_id": people, "g": np.tile(GROUPS, PEOPLE)})
    session = E.Session.from_pandas(frame, name="t", privacy_unit="person_id", budget=dpkit.ApproxDP(10, 1e-3))
    query = session.table().group_by("g", keys=GROUPS).agg(n=E.count())
    _, result = exact_aggregates(session, query, salt=SALTS[0], epsilon=1.0)
    persons = dict(zip((key[0] for key in result.keys), result.columns["persons"], strict=True))
    for group in GROUPS:
        assert abs(persons.get(group, 0) - PEOPLE / len(GROUPS)) <= SLACK, persons


@pytest.mark.parametrize(
    "column",
    [
        pa.array([[0.0], [-0.0], [1.0]], pa.list_(pa.float64())),
        pa.array([{"a": 0.0}, {"a": -0.0}, {"a": 1.0}], pa.struct([("a", pa.float64())])),
        pa.array([(1, 0, 0), (0, 30, 0), (0, 1, 0)], pa.month_day_nano_interval()),
    ],
    ids=["list", "struct", "interval"],
)
def test_a_person_column_without_one_text_per_person_is_refused_where_groups_are_chosen(column):
    """DuckDB groups [0.0] and [-0.0] (or the intervals 1 month and 30 days) as one person but writes
    either text: the hashed choice of that person's groups could move with other people's rows."""
    table = pa.table({"pid": column, "g": ["a", "b", "a"]})
    session = E.Session.from_arrow(table, name="t", privacy_unit="pid", budget=dpkit.ApproxDP(10, 1e-3))
    with pytest.raises(dpkit.InvalidParameterError, match="privacy_unit"):
        session.release(session.table().group_by("g").agg(n=E.count()), epsilon=1.0, delta=1e-6)
    with pytest.raises(dpkit.InvalidParameterError, match="privacy_unit"):
        session.release(session.table().group_by("g", keys=["a", "b"]).agg(n=E.count()), epsilon=1.0)
    assert session.remaining == dpkit.ApproxDP(10, 1e-3)  # refused before the debit
    # No choice to make: one public key per allowed group, or no groups at all.
    session.release(
        session.table().group_by("g", keys=["a", "b"]).bound(groups_per_person=2).agg(n=E.count()), epsilon=1.0
    )
    session.release(session.table().agg(n=E.count()), epsilon=1.0)
