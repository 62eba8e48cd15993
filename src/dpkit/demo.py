"""``python -m dpkit.demo``: three private queries on the embedded visits table, through the engine.

The job: a retailer holds a (synthetic) table of shop visits, several rows per person, and
publishes under one budget of (epsilon = 2, delta = 1e-6), each person protected with all their
visits:

1. per region (public key list): the number of customers and the mean spend per visit, in SQL,
   previewed before it is run (cost and expected error, computed without reading the data);
2. the median income and the mean age of customers, with the Python builder;
3. the number of visits per shopping channel, with *private* keys: a channel is published only
   if enough people used it (thresholded partition selection, which spends delta).

Each answer comes with its 95% confidence interval, and the budget left is printed at the end.
"""

from __future__ import annotations

from dpkit._errors import InvalidParameterError
from dpkit.datasets import REGIONS, visits
from dpkit.engine import Result, Session, mean, median
from dpkit.guarantees import ApproxDP
from dpkit.noise import RandomSource

__all__ = ["BUDGET", "main", "run"]

BUDGET = ApproxDP(2.0, 1e-6)
#: Public clamping bounds, declared before looking at the data.
BOUNDS = {"spend": (0.0, 500.0), "income": (0.0, 250_000.0), "age": (18.0, 90.0)}

REGION_SQL = (
    "SELECT region, COUNT(DISTINCT person_id) AS customers, AVG(spend) AS mean_spend FROM visits GROUP BY region"
)
CHANNEL_SQL = "SELECT channel, COUNT(*) AS visits FROM visits GROUP BY channel"


def open_session() -> Session:
    """The demo's session: the visits table, one person = one ``person_id``, budget :data:`BUDGET`."""
    return Session.from_pandas(visits(), name="visits", privacy_unit="person_id", budget=BUDGET, bounds=BOUNDS)


def run(session: Session | None = None, rng: RandomSource | None = None) -> list[tuple[str, Result]]:
    """Run the three releases (``rng`` is for tests only); return (title, result) pairs."""
    if session is None:
        session = open_session()
    elif not isinstance(session, Session):
        raise InvalidParameterError("session", session, "must be None (the demo's own session) or a dpkit Session")
    by_region = session.sql(REGION_SQL, keys=list(REGIONS), rows_per_group=5, epsilon=0.5, rng=rng)
    customers = session.release(
        session.table().agg(median_income=median("income"), mean_age=mean("age")), epsilon=0.5, rng=rng
    )
    by_channel = session.sql(CHANNEL_SQL, rows_per_group=5, groups_per_person=2, epsilon=0.5, delta=1e-6, rng=rng)
    return [
        ("1. customers and mean spend per region (SQL, public keys)", by_region),
        ("2. median income and mean age of customers (builder)", customers),
        ("3. visits per channel (SQL, private keys: rare channels are suppressed)", by_channel),
    ]


def main() -> None:
    """Print the demo's preview, releases and remaining budget."""
    session = open_session()
    table = visits()
    print(
        f"dpkit demo: {len(table):,} synthetic visits by {table['person_id'].nunique():,} people; "
        f"budget {BUDGET}; each person protected with all their visits; noise from the OS CSPRNG.\n"
    )
    print("Preview of query 1 (no data read, nothing spent):")
    print(session.preview(REGION_SQL, keys=list(REGIONS), rows_per_group=5, epsilon=0.5), end="\n\n")
    for title, result in run(session):
        print(title)
        print(result, end="\n\n")
    print(f"remaining budget: {session.remaining}")


if __name__ == "__main__":
    main()
