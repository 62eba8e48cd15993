"""Query engine: per-region DP count and sum, dpkit side by side with DuckDB, OpenDP, SmartNoise, PipelineDP, Tumult.

Run from the repository root (``make bench-peers-venv`` first creates the peers' environments)::

    .venv/bin/python bench/engine.py --rows 1000000 10000000              # the full run (median of 3)
    .venv/bin/python bench/engine.py --rows 100000 --repeats 1            # smoke run
    .venv/bin/python bench/engine.py --rows 1000000 --spark               # adds dpkit with backend="spark"
    .venv/bin/python bench/engine.py --rows 1000000 --methods dpkit_public duckdb_plain
    .venv/bin/python bench/engine.py --report a.json b.json                # one table from runs saved with --json
    .venv/bin/python bench/engine.py --rows 10000000 --spread --methods duckdb_plain duckdb_pergroup dpkit_public

The query (the issue's "Performance" section): per region (50, skewed), a count and a sum of income
clamped to [0, 200000]; each person bounded to 5 rows and 1 group; epsilon = 1 in total; with the 50
regions as PUBLIC keys and with PRIVATE keys (partition selection, delta = 1e-6). Data: the "people"
table of ``bench/engine_data.py`` (cached Parquet, generation is never timed).

Methods (``--methods``; each runs in a fresh subprocess, see ``bench/_peers_engine.py``):

1. ``duckdb_plain``: DuckDB ``GROUP BY region``, no bounding, no clamping, no noise: the floor (and
   exactly the truth).
2. ``duckdb_any5``: ``QUALIFY row_number() OVER (PARTITION BY person_id) <= 5``, clamped sum, no noise.
3. ``duckdb_random5``: the same with ``ORDER BY random()`` in the window, no noise.
   ``duckdb_pergroup`` (a reference): one hash aggregation per
   (person, region), each person's count capped at 5 and total at 5 x 200000, then per region; no
   bound on groups per person, no noise. The floor of any plan that aggregates per person first.
4. ``dpkit_public`` / ``dpkit_private``: ``dpkit.Session.from_parquet(...)`` then ``table().group_by
   (keys=...).bound(rows_per_group=5, groups_per_person=1).agg(count, sum).release(epsilon=1)``
   (``delta=1e-6`` and no keys for private keys). Until ``dpkit.engine`` is importable the row reads
   "not available (reason)" and the peers still run. ``dpkit_capped_public`` / ``dpkit_capped_private``:
   the same on ``DuckDBBackend(memory_limit=MEMORY_CAP)`` (100MB), which spills past the limit (less memory,
   more time).
5. ``opendp_*``: OpenDP 0.16 Polars API; identifier-based unit (``dp.unit_of(identifier="person_id")``),
   ``truncate_per_group(5)`` (random rows), one group per person declared in the unit; count and sum
   at epsilon 0.5 each (relative noise scales), OpenDP's own threshold for private keys.
6. ``smartnoise_*``: SmartNoise SQL 1.0, ``max_ids=5`` with ``sample_max_ids``; epsilon is per
   mechanism in SmartNoise: 0.5 for COUNT and SUM with public keys (``censor_dims=False``, which
   releases the keys present in the data), 1/3 for COUNT, SUM and the thresholded person count with
   private keys (``censor_dims=True``); the reported ``get_privacy_cost`` is (1, <= 1e-6).
7. ``pipelinedp_*``: PipelineDP, ``LocalBackend``, ``max_partitions_contributed=1``,
   ``max_contributions_per_partition=5``, Laplace; ``NaiveBudgetAccountant`` splits epsilon evenly
   (0.5 / 0.5; 1/3 each with partition selection).
8. ``tumult_*``: Tumult Analytics 0.21, ``AddRowsWithID("person_id")``, ``MaxGroupsPerID(1)`` and
   ``MaxRowsPerGroupPerID(5)``; count and sum are two ``evaluate`` calls at 0.5 each; private keys:
   ``get_groups`` (with ``MaxRowsPerID(1)``) at 1/3 + delta, then count and sum at 1/3 each.
9. with ``--spark``: ``spark_plain`` (Spark SQL GROUP BY on the Parquet file, the Spark floor) and
   ``dpkit_spark_public`` / ``dpkit_spark_private`` (dpkit with ``backend="spark"``).

What a timing includes: "time" is the median over ``--repeats`` runs of one complete release,
from building the query to the per-region result in Python (noise included). All of DuckDB, dpkit,
OpenDP and Spark/Tumult read the Parquet file inside every timed run (no in-memory table is kept
between runs). "setup" is timed once and reported apart: imports and connection (DuckDB, dpkit,
OpenDP, which also reads its float-sum sensitivity there), JVM start (Tumult, Spark: "+ JVM"), and
for the two peers that cannot read Parquet lazily, loading the data ("+ load"): SmartNoise's
``PandasReader`` copies the pandas frame into an in-memory SQLite database, PipelineDP's
``LocalBackend`` needs a Python list of row tuples.

Peak memory: each method runs in its own process; "peak RSS" is the larger of the process's own
peak (``VmHWM``, not ``ru_maxrss``, which Linux carries over fork and exec from the driver) and the
sum of the resident sets of its process tree (Python and, for Spark and Tumult, the JVM) sampled
every 0.1 s. "RSS after setup" is the tree's resident set when setup ended
(libraries, JVM, and the loaded data where the method loads it).

Disturbance: the machine may be shared. For each method, "other processes (cores)" is the CPU
time the whole machine spent (``/proc/stat``) minus that of the method's process tree and of this
driver, divided by the method's wall time: about 0 on a quiet machine, up to the number of cores
when something else ran alongside. The 1-minute load average before and after each method is
printed as well (it counts the method's own threads: a JVM alone pushes it above 2).

Errors: "MAE count" and "MAE sum" are the mean absolute errors over the 50 regions against the true
UNBOUNDED, unclamped per-region count and sum (so the bias of bounding counts; a region a private-key
method does not release counts as 0), averaged over the runs. The "vs 5-row truth" columns isolate
the noise (and the partition selection, and for the sum the row sampling) from the bounding bias:
the count is against the per-region count after keeping min(rows, 5) of each person (the same
whichever rows are kept), the sum against its expectation under random sampling of 5 rows, i.e.
min(n, 5) / n times each person's sum of clamped incomes. After the table, the issue's targets are
printed with the measured ratios (dpkit against plain GROUP BY, random-5 and OpenDP; peak RSS
against DuckDB; MAE against the best peer with the same kind of keys).

Environments (the choice asked for in the issue): the peers cannot share one environment on Python
3.11 with each other or with dpkit's main ``.venv`` (pandas 3, pyspark 4, polars 2, opendp 0.16):

* OpenDP 0.16's Polars API needs ``polars==1.36.1`` (it refuses plans from polars 2.1);
* SmartNoise SQL 1.0.10 needs ``opendp<0.15`` and ``pandas<3``;
* Tumult Analytics 0.21 (tmlt.core 0.19) needs ``pandas<2``, ``numpy<2``, ``pyspark<3.6`` on 3.11.

So ``make bench-peers-venv`` creates ``.venv-peers/opendp``, ``.venv-peers/smartnoise`` and
``.venv-peers/tumult`` (pinned versions; ``.venv-peers`` ignores itself with its own ``.gitignore``),
and this script runs each of those peers with its environment's Python. PipelineDP (``pipeline-dp``,
numpy, scipy) and DuckDB coexist with dpkit and run from the main ``.venv`` (the ``bench`` extra).
A peer whose environment is missing is reported as "not available".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from _peers_engine import HIGH, LOW, MARKER, MEMORY_CAP, REGIONS, ROWS_PER_PERSON  # noqa: E402
from engine_data import DEFAULT_CACHE, people_path  # noqa: E402


@dataclass(frozen=True)
class Method:
    name: str
    label: str
    env: str  # "main" or the name of a directory under .venv-peers
    keys: str  # "public", "private" or "-" (not private)


METHODS = (
    Method("duckdb_plain", "DuckDB plain GROUP BY (no bounding; floor)", "main", "-"),
    Method("duckdb_any5", "DuckDB bounded, any 5 rows", "main", "-"),
    Method("duckdb_random5", "DuckDB bounded, random 5 rows", "main", "-"),
    Method("duckdb_pergroup", "DuckDB per-(person, region) aggregation only", "main", "-"),
    Method("dpkit_public", "dpkit", "main", "public"),
    Method("dpkit_private", "dpkit", "main", "private"),
    Method("dpkit_capped_public", f"dpkit, memory_limit {MEMORY_CAP}", "main", "public"),
    Method("dpkit_capped_private", f"dpkit, memory_limit {MEMORY_CAP}", "main", "private"),
    Method("opendp_public", "OpenDP (Polars)", "opendp", "public"),
    Method("opendp_private", "OpenDP (Polars)", "opendp", "private"),
    Method("smartnoise_public", "SmartNoise SQL", "smartnoise", "public"),
    Method("smartnoise_private", "SmartNoise SQL", "smartnoise", "private"),
    Method("pipelinedp_public", "PipelineDP (LocalBackend)", "main", "public"),
    Method("pipelinedp_private", "PipelineDP (LocalBackend)", "main", "private"),
    Method("tumult_public", "Tumult Analytics", "tumult", "public"),
    Method("tumult_private", "Tumult Analytics", "tumult", "private"),
)
SPARK_METHODS = (
    Method("spark_plain", "Spark plain GROUP BY (no bounding)", "main", "-"),
    Method("dpkit_spark_public", "dpkit, backend=spark", "main", "public"),
    Method("dpkit_spark_private", "dpkit, backend=spark", "main", "private"),
)
SETUP_KIND = {"opendp": "", "smartnoise": "load", "pipelinedp": "load", "tumult": "JVM", "spark": "JVM"}


@dataclass
class Outcome:
    method: Method
    rows: int
    status: str = "ok"  # ok, unavailable, timeout, failed
    reason: str = ""
    setup_s: float = float("nan")
    times_s: list[float] = field(default_factory=list)
    peak_mib: float = float("nan")
    setup_rss_mib: float = float("nan")
    mae_count: list[float] = field(default_factory=list)
    mae_sum: list[float] = field(default_factory=list)
    mae_count_bounded: list[float] = field(default_factory=list)
    mae_sum_bounded: list[float] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    version: str = ""
    note: str = ""
    load: tuple[float, float] = (float("nan"), float("nan"))  # 1-minute load average before and after
    other_cpu: float = float("nan")  # cores busy with processes outside this method's tree (disturbance)

    @property
    def time_s(self) -> float:
        return statistics.median(self.times_s) if self.times_s else float("nan")


# ---------------------------------------------------------------------------------------------
# Truth and errors
# ---------------------------------------------------------------------------------------------


def truth(path: Path) -> tuple[dict[str, tuple[float, float]], dict[str, tuple[float, float]]]:
    """Per-region (count, sum) unbounded and unclamped, and the same after bounding each person to 5 rows.

    The bounded count keeps min(rows, 5) of each person, whichever rows are kept. The bounded sum
    is its expectation when 5 of a person's n > 5 rows are drawn at random: min(n, 5) / n times the
    person's sum of clamped incomes (which is also exactly what dpkit's bounding computes).
    """
    import duckdb

    connection = duckdb.connect()
    connection.execute("SET enable_progress_bar = false")
    source = f"read_parquet('{str(path).replace(chr(39), chr(39) * 2)}')"
    exact = {
        region: (float(count), float(total))
        for region, count, total in connection.execute(
            f"SELECT region, count(*), sum(income) FROM {source} GROUP BY region"
        ).fetchall()
    }
    k = ROWS_PER_PERSON
    bounded = {
        region: (float(count), float(total))
        for region, count, total in connection.execute(
            f"SELECT region, sum(least(n, {k})), sum(clamped * least(n, {k}) / n) FROM "
            f"(SELECT person_id, any_value(region) AS region, count(*) AS n, "
            f"sum(least(greatest(income, {LOW}), {HIGH})) AS clamped FROM {source} GROUP BY person_id) "
            "GROUP BY region"
        ).fetchall()
    }
    return exact, bounded


def errors(
    released: dict[str, list[float]], exact: dict[str, tuple[float, float]], bounded: dict[str, tuple[float, float]]
) -> tuple[float, float, float, float]:
    """MAE over the 50 regions of (count, sum) vs the unbounded truth, then vs the 5-row truth."""

    def mae(index: int, truth: dict[str, tuple[float, float]]) -> float:
        return statistics.fmean(abs(released.get(r, [0.0, 0.0])[index] - truth[r][index]) for r in REGIONS)

    return mae(0, exact), mae(1, exact), mae(0, bounded), mae(1, bounded)


# ---------------------------------------------------------------------------------------------
# Running one method in a subprocess, with its memory sampled
# ---------------------------------------------------------------------------------------------


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, CPU ticks used: utime + stime) for every process in /proc."""
    table: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return table


def tree_sample(root: int, cpu: dict[int, int]) -> float:
    """Sum of VmRSS in MiB over ``root`` and all its descendants (0 if it is gone); updates ``cpu``
    (pid -> CPU ticks) for the processes of the tree."""
    processes = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    pending, total = [root], 0
    while pending:
        pid = pending.pop()
        pending.extend(children.get(pid, ()))
        if pid in processes:
            cpu[pid] = max(cpu.get(pid, 0), processes[pid][1])
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total / 1024


def tree_rss_mib(root: int) -> float:
    """Sum of VmRSS in MiB over ``root`` and all its descendants."""
    return tree_sample(root, {})


def busy_ticks() -> int:
    """CPU ticks spent by the whole machine outside idle and iowait (/proc/stat)."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    return sum(values[:8]) - values[3] - values[4]


def python_for(method: Method, peers: Path) -> Path | None:
    if method.env == "main":
        return Path(sys.executable)
    candidate = peers / method.env / "bin" / "python"
    return candidate if candidate.exists() else None


def run_method(
    method: Method,
    path: Path,
    rows: int,
    repeats: int,
    timeout: float,
    peers: Path,
    logs: Path,
    exact: dict[str, tuple[float, float]],
    bounded: dict[str, tuple[float, float]],
) -> Outcome:
    outcome = Outcome(method, rows)
    before = os.getloadavg()[0]
    busy_before, driver_before, wall_before = busy_ticks(), os.times(), time.monotonic()
    tree_cpu: dict[int, int] = {}
    python = python_for(method, peers)
    if python is None:
        outcome.status = "unavailable"
        outcome.reason = f"{peers / method.env} missing: run `make bench-peers-venv`"
        return outcome
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{method.name}_{rows}.log"
    command = [str(python), str(BENCH / "_peers_engine.py"), method.name, str(path), "--rows", str(rows)]
    command += ["--repeats", str(repeats)]
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        peak, last, finished, own_peak, own_cpu = 0.0, time.monotonic(), False, 0.0, 0.0
        while not finished:
            try:
                line = lines.get(timeout=0.1)
            except queue.Empty:
                line = ""
            peak = max(peak, tree_sample(process.pid, tree_cpu))
            if line is None:
                finished = True
            elif line.startswith(MARKER):
                last = time.monotonic()
                event = json.loads(line[len(MARKER) :])
                kind = event["event"]
                if kind == "unavailable":
                    outcome.status, outcome.reason = "unavailable", event["reason"]
                elif kind == "setup":
                    outcome.setup_s = event["seconds"]
                    outcome.setup_rss_mib = tree_rss_mib(process.pid)
                    outcome.version, outcome.note = event["version"], event["note"]
                elif kind == "run":
                    outcome.times_s.append(event["seconds"])
                    regions = event["regions"]
                    count, total, count_bounded, sum_bounded = errors(regions, exact, bounded)
                    outcome.mae_count.append(count)
                    outcome.mae_sum.append(total)
                    outcome.mae_count_bounded.append(count_bounded)
                    outcome.mae_sum_bounded.append(sum_bounded)
                    outcome.released.append(len(regions))
                elif kind == "done":
                    own_peak = event["maxrss_mib"]
                    own_cpu = event.get("cpu_s", 0.0)
            elif line:
                log.write(line)
            if not finished and time.monotonic() - last > timeout:
                import signal

                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                outcome.status = "timeout"
                step = "setup" if outcome.setup_s != outcome.setup_s else f"run {len(outcome.times_s) + 1}"
                outcome.reason = f"{step} took more than {timeout:g} s"
                break
        process.wait()
    outcome.peak_mib = max(peak, own_peak)
    outcome.load = (before, os.getloadavg()[0])
    driver_after, ticks = os.times(), os.sysconf("SC_CLK_TCK")
    driver = (driver_after.user + driver_after.system - driver_before.user - driver_before.system) * ticks
    # The method's own process reports its CPU time at the end (the last 0.1 s escape sampling).
    tree_cpu[process.pid] = max(tree_cpu.get(process.pid, 0), round(own_cpu * ticks))
    others = busy_ticks() - busy_before - sum(tree_cpu.values()) - driver
    outcome.other_cpu = max(0.0, others / ticks / max(time.monotonic() - wall_before, 1e-9))
    if outcome.status == "ok" and (process.returncode != 0 or len(outcome.times_s) < repeats):
        outcome.status = "failed"
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
        outcome.reason = f"exit status {process.returncode}: " + " | ".join(tail)[-400:]
    return outcome


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def _seconds(value: float) -> str:
    if value != value:
        return "-"
    return f"{value:.3f} s" if value < 1 else f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def _number(value: float) -> str:
    if value != value:
        return "-"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.2e}"


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def table(outcomes: list[Outcome]) -> str:
    header = (
        "| rows | method | keys | time (median) | runs | setup | peak RSS MiB | RSS after setup MiB "
        "| MAE count | MAE sum | MAE count vs 5-row truth | MAE sum vs 5-row truth | regions released "
        "| time vs plain | time vs random-5 | peak RSS vs plain | other processes (cores) |"
    )
    lines = [header, "|" + "---|" * (header.count(" | ") + 1)]
    columns = header.count(" | ") + 1
    floors = {o.rows: o for o in outcomes if o.method.name == "duckdb_plain" and o.status == "ok"}
    randoms = {o.rows: o for o in outcomes if o.method.name == "duckdb_random5" and o.status == "ok"}
    for o in outcomes:
        family = o.method.name.split("_", 1)[0]
        if o.status in ("unavailable", "failed") or (o.status == "timeout" and not o.times_s):
            reason = " ".join(o.reason.replace("|", "/").split())[:200]
            lines.append(
                f"| {o.rows:,} | {o.method.label} | {o.method.keys} | {o.status}: {reason} |" + " |" * (columns - 4)
            )
            continue
        kind = "JVM" if "_spark_" in o.method.name else SETUP_KIND.get(family, "")
        setup = f"+ {_seconds(o.setup_s)}" + (f" ({kind})" if kind else "")
        time_text = _seconds(o.time_s) + (f" (timeout: {o.reason})" if o.status == "timeout" else "")
        floor, random5 = floors.get(o.rows), randoms.get(o.rows)
        ratio = f"{o.time_s / floor.time_s:.1f}x" if floor else "-"
        ratio_random = f"{o.time_s / random5.time_s:.2f}x" if random5 else "-"
        memory = f"{o.peak_mib / floor.peak_mib:.2f}x" if floor else "-"
        released = (
            f"{min(o.released)}-{max(o.released)}"
            if o.released and min(o.released) != max(o.released)
            else (str(o.released[0]) if o.released else "-")
        )
        lines.append(
            f"| {o.rows:,} | {o.method.label} | {o.method.keys} | {time_text} | {len(o.times_s)} | {setup} "
            f"| {o.peak_mib:.0f} "
            f"| {o.setup_rss_mib:.0f} | {_number(_mean(o.mae_count))} | {_number(_mean(o.mae_sum))} "
            f"| {_number(_mean(o.mae_count_bounded))} | {_number(_mean(o.mae_sum_bounded))} "
            f"| {released} | {ratio} | {ratio_random} | {memory} | {o.other_cpu:.2f} |"
        )
    return "\n".join(lines)


PEERS = ("opendp", "smartnoise", "pipelinedp", "tumult")


def targets(outcomes: list[Outcome]) -> str:
    """The issue's targets, per row count and key kind, from what was measured (no verdict is assumed)."""
    found = {(o.rows, o.method.name): o for o in outcomes if o.status == "ok" and o.times_s}
    lines: list[str] = []
    for rows in dict.fromkeys(o.rows for o in outcomes):
        plain, random5 = found.get((rows, "duckdb_plain")), found.get((rows, "duckdb_random5"))
        for keys in ("public", "private"):
            capped = found.get((rows, f"dpkit_capped_{keys}"))
            if capped is not None and plain:
                lines.append(
                    f"- {rows:,} rows, {keys} keys, dpkit under memory_limit {MEMORY_CAP}: "
                    f"{_seconds(capped.time_s)}, {capped.time_s / plain.time_s:.1f}x plain GROUP BY; "
                    f"peak RSS {capped.peak_mib:.0f} MiB, {capped.peak_mib / plain.peak_mib:.2f}x DuckDB plain "
                    "(target <= 2x)"
                )
            dpkit = found.get((rows, f"dpkit_{keys}"))
            if dpkit is None:
                continue
            parts = [f"{rows:,} rows, {keys} keys: dpkit {_seconds(dpkit.time_s)}"]
            if plain:
                parts.append(f"{dpkit.time_s / plain.time_s:.1f}x plain GROUP BY (target <= 3x)")
                parts.append(f"peak RSS {dpkit.peak_mib / plain.peak_mib:.2f}x DuckDB plain")
            if random5:
                parts.append(f"{dpkit.time_s / random5.time_s:.2f}x random-5")
                parts.append(f"peak RSS {dpkit.peak_mib / random5.peak_mib:.2f}x DuckDB random-5 (target <= 2x)")
                parts.append(
                    f"peak RSS above RSS after setup: dpkit {dpkit.peak_mib - dpkit.setup_rss_mib:.0f} MiB, "
                    f"DuckDB random-5 {random5.peak_mib - random5.setup_rss_mib:.0f} MiB"
                )
            opendp = found.get((rows, f"opendp_{keys}"))
            if opendp:
                parts.append(f"{dpkit.time_s / opendp.time_s:.2f}x OpenDP")
            peers = [found[(rows, f"{p}_{keys}")] for p in PEERS if (rows, f"{p}_{keys}") in found]
            for label, attribute in (
                ("count", "mae_count"),
                ("sum", "mae_sum"),
                ("count vs 5-row truth", "mae_count_bounded"),
                ("sum vs 5-row truth", "mae_sum_bounded"),
            ):
                if peers:
                    best = min(peers, key=lambda o, a=attribute: _mean(getattr(o, a)))  # type: ignore[misc]
                    mine, theirs = _mean(getattr(dpkit, attribute)), _mean(getattr(best, attribute))
                    parts.append(
                        f"MAE {label} {_number(mine)} vs best peer {_number(theirs)} ({best.method.name}): dpkit "
                        + ("<=" if mine <= theirs else ">")
                    )
            lines.append("- " + "; ".join(parts))
    return "\n".join(lines)


def notes(outcomes: list[Outcome]) -> str:
    seen: dict[str, str] = {}
    for o in outcomes:
        if o.version and o.method.name not in seen:
            seen[o.method.name] = f"- `{o.method.name}`: {o.version}; {o.note}"
    return "\n".join(seen.values())


def machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "")
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({model}), {memory:.0f} GiB RAM, Python {platform.python_version()}"


def load(paths: list[Path]) -> list[Outcome]:
    """Outcomes from files written with --json, in method order, by row count."""
    methods = {m.name: m for m in METHODS + SPARK_METHODS}
    found: dict[tuple[int, str], Outcome] = {}
    for path in paths:
        for record in json.loads(path.read_text())["results"]:
            fields = {k: v for k, v in record.items() if k in Outcome.__dataclass_fields__ and k != "method"}
            fields["load"] = tuple(fields.get("load", (float("nan"), float("nan"))))
            outcome = Outcome(method=methods[record["method"]], **fields)
            found[(outcome.rows, outcome.method.name)] = outcome
    order = {name: i for i, name in enumerate(methods)}
    return [found[key] for key in sorted(found, key=lambda key: (key[0], order[key[1]]))]


def main(argv: list[str] | None = None) -> int:
    names = [m.name for m in METHODS + SPARK_METHODS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000], help="row counts (default 1,000,000)")
    parser.add_argument(
        "--spread", action="store_true", help="data variant: region drawn per row (people in several regions)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per method, median reported (default 3)")
    parser.add_argument("--methods", nargs="+", choices=names, default=None, help="subset of methods (default all)")
    parser.add_argument("--spark", action="store_true", help="also run Spark plain and dpkit with backend='spark'")
    parser.add_argument("--timeout", type=float, default=600.0, help="limit in s for setup and for each run")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="data and logs directory (bench/.cache)")
    parser.add_argument("--peers", type=Path, default=ROOT / ".venv-peers", help="peers' environments")
    parser.add_argument("--json", type=Path, default=None, help="write the results here (default <cache>/engine.json)")
    parser.add_argument(
        "--report",
        type=Path,
        nargs="+",
        default=None,
        help="run nothing: print the table of earlier --json files (a later file replaces an earlier one's "
        "result for the same method and row count)",
    )
    args = parser.parse_args(argv)
    if args.report:
        merged = load(args.report)
        print(table(merged))
        print()
        print(targets(merged))
        print()
        print(notes(merged))
        return 0
    pool = METHODS + (SPARK_METHODS if args.spark else ())
    chosen = [m for m in pool if args.methods is None or m.name in args.methods]
    if args.methods:
        chosen += [m for m in SPARK_METHODS if m.name in args.methods and m not in chosen]
    print(f"machine: {machine()}")
    print(f"methods: {', '.join(m.name for m in chosen)}; repeats {args.repeats}; limit {args.timeout:g} s per step\n")
    outcomes: list[Outcome] = []
    for rows in args.rows:
        start = time.perf_counter()
        path = people_path(rows, args.cache, spread=args.spread)
        exact, bounded = truth(path)
        print(f"data: {path} ({rows:,} rows; ready and truth computed in {time.perf_counter() - start:.1f} s)")
        for method in chosen:
            start = time.perf_counter()
            outcome = run_method(
                method, path, rows, args.repeats, args.timeout, args.peers, args.cache / "logs", exact, bounded
            )
            outcomes.append(outcome)
            if outcome.status == "unavailable":
                print(f"  {method.name}: not available ({outcome.reason})", flush=True)
            elif outcome.status in ("failed", "timeout"):
                print(f"  {method.name}: {outcome.status} ({outcome.reason})", flush=True)
            else:
                print(
                    f"  {method.name}: {_seconds(outcome.time_s)} (setup {_seconds(outcome.setup_s)}), "
                    f"peak {outcome.peak_mib:.0f} MiB, MAE count {_number(_mean(outcome.mae_count))}, "
                    f"MAE sum {_number(_mean(outcome.mae_sum))} "
                    f"[{time.perf_counter() - start:.0f} s wall; load {outcome.load[0]:.2f} -> {outcome.load[1]:.2f}; "
                    f"other processes {outcome.other_cpu:.2f} cores]",
                    flush=True,
                )
    print()
    print(table(outcomes))
    print()
    print(targets(outcomes))
    print()
    print(notes(outcomes))
    destination = args.json or args.cache / "engine.json"
    destination.parent.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    for o in outcomes:
        record = {key: value for key, value in vars(o).items() if key != "method"}
        record.update(method=o.method.name, label=o.method.label, keys=o.method.keys, time_median_s=o.time_s)
        records.append(record)
    destination.write_text(json.dumps({"machine": machine(), "repeats": args.repeats, "results": records}, indent=1))
    print(f"\nresults: {destination}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
