"""Embedded sample data: a synthetic but realistic table of people, generated deterministically.

The table is *synthetic*: no real person is in it. It is generated with numpy's seeded generator
because it is test data, not noise; no release path draws from that generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._validation import check_integer

__all__ = ["CHANNELS", "REGIONS", "PeopleTable", "people", "visits"]

#: The public list of regions (a public key set: it does not depend on the data).
REGIONS: tuple[str, ...] = ("North", "South", "East", "West", "Centre")

#: Shopping channels of the visits table (used as *private* group keys in the demo).
CHANNELS: tuple[str, ...] = ("store", "web", "app", "phone", "kiosk")
_CHANNEL_WEIGHTS = np.array([0.45, 0.30, 0.20, 0.0498, 0.0002])

_REGION_WEIGHTS = np.array([0.18, 0.27, 0.21, 0.22, 0.12])
_REGION_INCOME_FACTOR = np.array([0.95, 0.85, 1.0, 1.1, 1.3])


@dataclass(frozen=True)
class PeopleTable:
    """Columns of the people table; row i is one person."""

    person_id: NDArray[np.int64]
    region: NDArray[np.int64]  # index into REGIONS
    age: NDArray[np.int64]
    income: NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.person_id.size)


def people(rows: int = 4000, *, seed: int = 20261123) -> PeopleTable:
    """A deterministic synthetic table of ``rows`` people with region, age and yearly income.

    >>> table = people(100)
    >>> len(table), int(table.age.min()) >= 18
    (100, True)
    """
    n = check_integer("rows", rows, minimum=1)
    # None would draw a fresh, unreproducible table: the promise is a deterministic one.
    generator = np.random.default_rng(
        check_integer("seed", seed, minimum=0)
    )  # synthetic data generation, not a release path
    region = generator.choice(len(REGIONS), size=n, p=_REGION_WEIGHTS)
    age = np.clip(np.rint(generator.normal(44, 15, size=n)), 18, 90).astype(np.int64)
    # Income rises with age until ~55 and varies log-normally; a few very high earners.
    age_effect = 1 + 0.5 * np.exp(-(((age - 55) / 18.0) ** 2))
    income = generator.lognormal(mean=np.log(30_000), sigma=0.55, size=n) * age_effect
    income *= _REGION_INCOME_FACTOR[region]
    return PeopleTable(
        person_id=np.arange(1, n + 1, dtype=np.int64),
        region=region.astype(np.int64),
        age=age,
        income=np.round(income, 2),
    )


def visits(persons: int = 4000, *, seed: int = 20261123) -> Any:
    """A deterministic synthetic table of shop visits: several rows per person, as a pandas DataFrame.

    Columns: ``person_id`` (the privacy unit), ``region`` (the person's region, a name from
    :data:`REGIONS`), ``age`` and ``income`` (the person's, from :func:`people`), ``channel``
    (from :data:`CHANNELS`, "kiosk" is rare) and ``spend`` (the visit's amount, log-normal,
    median 40). Each person has 1 to 20 visits, heavy-tailed (P(k) proportional to k^-1.5), so
    per-person contribution bounding matters.

    >>> table = visits(100)
    >>> table["person_id"].nunique(), len(table) > 100, sorted(table.columns)
    (100, True, ['age', 'channel', 'income', 'person_id', 'region', 'spend'])
    """
    import pandas as pd

    base = people(check_integer("persons", persons, minimum=1), seed=seed)
    generator = np.random.default_rng(int(seed) + 1)  # synthetic data generation, not a release path
    weights = np.arange(1, 21, dtype=np.float64) ** -1.5
    per_person = generator.choice(np.arange(1, 21), size=len(base), p=weights / weights.sum())
    owner = np.repeat(np.arange(len(base)), per_person)
    return pd.DataFrame(
        {
            "person_id": base.person_id[owner],
            "region": np.asarray(REGIONS, dtype=object)[base.region[owner]],
            "age": base.age[owner],
            "income": base.income[owner],
            "channel": np.asarray(CHANNELS, dtype=object)[
                generator.choice(len(CHANNELS), size=owner.size, p=_CHANNEL_WEIGHTS)
            ],
            "spend": np.round(generator.lognormal(np.log(40.0), 0.9, size=owner.size), 2),
        }
    )
