"""Deterministic "people" table for the query-engine benchmark (``bench/engine.py``).

Run from the repository root::

    .venv/bin/python bench/engine_data.py --rows 1000000 10000000   # writes bench/.cache/people_<rows>.parquet

Columns (one row per event of a person; rows shuffled, so a person's rows are not adjacent):

* ``person_id`` (int64): the privacy unit. Each person has 1 to 20 rows, drawn from a truncated
  Zipf law P(k) proportional to k^-1.5 on k = 1..20 (mean about 3.5 rows; about 57 % of the rows
  belong to people with more than 5 rows, so bounding to 5 rows per person drops about 30 % of
  the rows; measured on the 1,000,000-row table: 285,992 people).
* ``region`` (string, "r00".."r49"): 50 regions with Zipf-like popularity (P(r) proportional to
  (r + 1)^-1.1: "r00" holds about 26 % of the people and of the rows, "r49" the smallest share,
  about 0.35 % of the rows). A person lives in one region: all of a person's rows carry the same
  region.
* ``income`` (float64): log-normal, median 40,000, sigma 0.8 (about 2 % of the rows above the
  200,000 clamping bound, a few above 1,000,000).
* ``age`` (int32): 18 to 90, one value per person.

Variant ``spread=True`` (``--spread``; file ``people_<rows>_spread.parquet``): the same table except
that each row draws its region independently (same popularity law), so most people with several
rows are in several regions and bounding groups per person has real work to do.

The table is a pure function of the row count and the seed (numpy ``PCG64``), written once with
pyarrow to ``bench/.cache/people_<rows>.parquet`` (zstd, row groups of 1,000,000 rows) and
reused when present. Ten million rows take about 5 s to generate and write on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

SEED = 20240604
REGIONS = tuple(f"r{index:02d}" for index in range(50))
MAX_ROWS_PER_PERSON = 20
ROWS_EXPONENT = 1.5
REGION_EXPONENT = 1.1
DEFAULT_CACHE = Path(__file__).resolve().parent / ".cache"
ROW_GROUP_SIZE = 1_000_000

__all__ = ["REGIONS", "DEFAULT_CACHE", "generate", "people_path", "region_weights", "rows_weights"]


def rows_weights() -> np.ndarray:
    """P(a person has k rows), k = 1..20 (index k - 1)."""
    weights = np.arange(1, MAX_ROWS_PER_PERSON + 1, dtype=np.float64) ** -ROWS_EXPONENT
    return weights / weights.sum()


def region_weights() -> np.ndarray:
    """P(a person lives in region r), r = 0..49."""
    weights = np.arange(1, len(REGIONS) + 1, dtype=np.float64) ** -REGION_EXPONENT
    return weights / weights.sum()


def generate(rows: int, seed: int = SEED, spread: bool = False) -> dict[str, np.ndarray]:
    """The table as numpy columns (``region`` as int8 codes into :data:`REGIONS`); ``spread``: region per row."""
    if rows < 1:
        raise ValueError(f"rows must be positive, got {rows}")
    rng = np.random.Generator(np.random.PCG64(seed))
    probabilities = rows_weights()
    mean_rows = float(np.dot(np.arange(1, MAX_ROWS_PER_PERSON + 1), probabilities))
    people = int(rows / mean_rows * 1.05) + 32
    counts = rng.choice(MAX_ROWS_PER_PERSON, size=people, p=probabilities).astype(np.int64) + 1
    while counts.sum() < rows:  # practically never: the draw has 5 % slack
        extra = rng.choice(MAX_ROWS_PER_PERSON, size=people // 10 + 32, p=probabilities).astype(np.int64) + 1
        counts = np.concatenate([counts, extra])
    ends = np.cumsum(counts)
    people = int(np.searchsorted(ends, rows)) + 1  # the first person whose rows reach `rows`
    counts = counts[:people]
    counts[-1] -= int(ends[people - 1]) - rows  # truncate the last person to hit `rows` exactly
    person_region = rng.choice(len(REGIONS), size=people, p=region_weights()).astype(np.int8)
    person_age = rng.integers(18, 91, size=people, dtype=np.int32)
    # Person ids are a random permutation of 0..people-1 scaled, so ids carry no order information.
    person_ids = rng.permutation(people).astype(np.int64) * 7 + 1_000_003
    person_index = np.repeat(np.arange(people, dtype=np.int64), counts)
    order = rng.permutation(rows)
    person_index = person_index[order]
    income = np.round(np.exp(rng.normal(np.log(40_000.0), 0.8, size=rows)), 2)
    if spread:  # drawn after everything else: the other columns are those of the default table
        region = rng.choice(len(REGIONS), size=rows, p=region_weights()).astype(np.int8)
    else:
        region = person_region[person_index]
    return {
        "person_id": person_ids[person_index],
        "region": region,
        "income": income,
        "age": person_age[person_index],
    }


def people_path(rows: int, cache: Path | str | None = None, seed: int = SEED, spread: bool = False) -> Path:
    """Path of the Parquet file with ``rows`` rows, generating and writing it if it is not cached."""
    directory = Path(cache) if cache is not None else DEFAULT_CACHE
    suffix = ("" if seed == SEED else f"_s{seed}") + ("_spread" if spread else "")
    path = directory / f"people_{rows}{suffix}.parquet"
    if path.exists():
        return path
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    columns = generate(rows, seed, spread)
    table = pa.table(
        {
            "person_id": pa.array(columns["person_id"]),
            "region": pa.array(REGIONS, type=pa.string()).take(pa.array(columns["region"])),
            "income": pa.array(columns["income"]),
            "age": pa.array(columns["age"]),
        }
    )
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    pq.write_table(table, temporary, compression="zstd", row_group_size=ROW_GROUP_SIZE)
    os.replace(temporary, path)  # atomic: a concurrent or interrupted run never sees half a file
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000], help="row counts (default 1,000,000)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="cache directory (default bench/.cache)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--spread", action="store_true", help="region drawn per row, not per person")
    args = parser.parse_args(argv)
    for rows in args.rows:
        start = time.perf_counter()
        path = people_path(rows, args.cache, args.seed, args.spread)
        print(f"{path} ({path.stat().st_size / 2**20:.1f} MiB, {time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
