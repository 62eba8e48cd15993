"""Local-DP benchmark: randomize and aggregate reports over k = 1024 categories for each oracle.

Run: ``.venv/bin/python bench/local.py`` (10 million reports for k-RR, OLH and Hadamard response;
unary encodings draw k = 1024 exact coins per report, so they run on 200,000 reports) or
``--quick`` (1 million / 20,000). Reports are drawn with the secure source (os.urandom), in chunks
of one million. Throughput is reports per second on one core; memory is the tracemalloc peak of
each phase (numpy buffers included). The 95 % intervals are ``oracle.confidence_interval`` (exact and
conservative: see its docstring), timed on all reports; "counts covered" is the share of the k true
counts inside their interval.

``--large-domain`` times only OUE's intervals at k = 65,536 categories and n = 1 million reports
(zipf and uniform values). The reports themselves (65 G bits) are not drawn: each category's
support count is drawn from its exact law, Binomial(n_v, p) + Binomial(n - n_v, q), and the
intervals (which depend on the counts alone) are computed from those, best of three runs.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
import scipy.stats  # noqa: F401  (the intervals use it; imported here, so that no timing includes the import)

from dpkit.local import KRR, OLH, OUE, SUE, HadamardResponse, LocalReports

K = 1024
EPSILON = 1.0
CHUNK = 1_000_000


def run(name: str, oracle, n: int) -> tuple[str, int, float, float, float, float, float, float, float]:
    values = np.random.default_rng(0).zipf(1.3, n) % K
    tracemalloc.start()
    start = time.perf_counter()
    parts = [oracle.randomize(values[i : i + CHUNK]) for i in range(0, n, CHUNK)]
    reports = LocalReports.concatenate(parts)
    randomize_s = time.perf_counter() - start
    randomize_peak = tracemalloc.get_traced_memory()[1]
    del parts
    tracemalloc.reset_peak()
    start = time.perf_counter()
    estimate = oracle.estimate(reports)
    aggregate_s = time.perf_counter() - start
    aggregate_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    start = time.perf_counter()
    intervals = oracle.confidence_interval(reports, 0.05)
    interval_s = time.perf_counter() - start
    true = np.bincount(values, minlength=K)
    error = float(np.sqrt(np.mean((estimate - true) ** 2)) / np.sqrt(oracle.variance(n)))
    covered = float(np.mean((intervals[:, 0] <= true) & (true <= intervals[:, 1])))
    mem_r, mem_a = randomize_peak / 2**20, aggregate_peak / 2**20
    return name, n, n / randomize_s, n / aggregate_s, mem_r, mem_a, error, interval_s, covered


def measured_variances(batches: int) -> list[tuple[str, float, float, float, str]]:
    """Empirical variance of a zero-count category's estimated frequency over independent batches."""
    k, m = 16, 2_000
    pattern = np.repeat(np.arange(k - 1), m // (k - 1) + 1)[:m]  # category k-1 has true count 0
    e = np.exp(EPSILON)
    published = {
        "KRR": ((k - 2 + e) / (m * (e - 1) ** 2), "(k - 2 + e^eps) / (n (e^eps - 1)^2)"),
        "SUE": (e**0.5 / (m * (e**0.5 - 1) ** 2), "e^(eps/2) / (n (e^(eps/2) - 1)^2)"),
        "OUE": (4 * e / (m * (e - 1) ** 2), "4 e^eps / (n (e^eps - 1)^2)"),
        "OLH": (4 * e / (m * (e - 1) ** 2), "4 e^eps / (n (e^eps - 1)^2) at g = e^eps + 1"),
        "HadamardResponse": ((e + 1) ** 2 / (m * (e - 1) ** 2), "(e^eps + 1)^2 / (n (e^eps - 1)^2)"),
    }
    rows = []
    for cls in (KRR, SUE, OUE, OLH, HadamardResponse):
        oracle = cls(k, EPSILON)
        reports = oracle.randomize(np.tile(pattern, batches))
        estimates = [
            oracle.estimate(LocalReports(reports.oracle, reports.parameters, reports.data[i * m : (i + 1) * m]))[k - 1]
            for i in range(batches)
        ]
        measured = float(np.var(estimates, ddof=1)) / m**2
        formula, text = published[cls.name]
        rows.append((cls.name, measured, oracle.frequency_variance(m), formula, text))
    return rows


def large_domain_intervals(k: int = 65_536, n: int = 1_000_000) -> list[tuple[str, int, float, float]]:
    """(values, distinct support counts, seconds, counts covered) for OUE's 95 % intervals at k, n."""
    oracle = OUE(k, EPSILON)
    rows = []
    for name in ("zipf", "uniform"):
        rng = np.random.default_rng(0)
        values = rng.zipf(1.3, n) % k if name == "zipf" else rng.integers(0, k, n)
        true = np.bincount(values, minlength=k)
        support = rng.binomial(true, oracle.p) + rng.binomial(n - true, oracle.q)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            intervals = oracle._count_intervals(support, n, 0.05)
            times.append(time.perf_counter() - start)
        covered = float(np.mean((intervals[:, 0] <= true) & (true <= intervals[:, 1])))
        rows.append((name, int(np.unique(support).size), min(times), covered))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1M reports (20k for unary encodings)")
    parser.add_argument(
        "--large-domain", action="store_true", help="only OUE's intervals at k = 65,536, n = 1M (counts drawn)"
    )
    args = parser.parse_args()
    if args.large_domain:
        print(f"OUE, k = 65,536, epsilon = {EPSILON}, n = 1,000,000, support counts drawn from their law")
        print("| values | distinct counts | 95 % intervals (s, best of 3) | counts covered |")
        print("|---|---|---|---|")
        for name, distinct, seconds, covered in large_domain_intervals():
            print(f"| {name} | {distinct:,} | {seconds:.2f} | {covered:.3f} |")
        return
    big, unary = (1_000_000, 20_000) if args.quick else (10_000_000, 200_000)
    rows = [
        run("KRR", KRR(K, EPSILON), big),
        run("OLH", OLH(K, EPSILON), big),
        run("HadamardResponse", HadamardResponse(K, EPSILON), big),
        run("SUE", SUE(K, EPSILON), unary),
        run("OUE", OUE(K, EPSILON), unary),
    ]
    print(f"k = {K}, epsilon = {EPSILON}, secure source, one process")
    print(
        "| oracle | reports | randomize (reports/s) | aggregate (reports/s) | peak MiB randomize | "
        "peak MiB aggregate | RMSE / sqrt(variance(n)) | 95 % intervals (s) | counts covered |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, n, rand, agg, mem_r, mem_a, error, interval_s, covered in rows:
        print(
            f"| {name} | {n:,} | {rand / 1e6:.2f} M | {agg / 1e6:.2f} M | {mem_r:.0f} | {mem_a:.0f} | {error:.2f} "
            f"| {interval_s:.2f} | {covered:.3f} |"
        )
    batches = 100 if args.quick else 1000
    print(f"\nFrequency variance, k = 16, epsilon = {EPSILON}, n = 2000 per batch, {batches} batches")
    print("| oracle | measured | dpkit variance(n) / n^2 | measured / dpkit | published | published formula |")
    print("|---|---|---|---|---|---|")
    for name, measured, exact, formula, text in measured_variances(batches):
        print(f"| {name} | {measured:.4e} | {exact:.4e} | {measured / exact:.3f} | {formula:.4e} | {text} |")


if __name__ == "__main__":
    main()
