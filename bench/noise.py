"""Noise samplers: samples per second on one core, dpkit against OpenDP and numpy.

Run from the repository root::

    .venv/bin/python bench/noise.py            # full run (batch 1,000,000, best of 3)
    .venv/bin/python bench/noise.py --quick    # smoke run (batch 20,000, one repeat)

Every sampler is timed in this one process. A timing is the best of ``--repeats`` batches,
with more batches taken until at least ``--min-time`` seconds were spent; a sampler whose
single batch already takes longer than ``--slow`` seconds is timed once (OpenDP's Python
bindings convert each sample to a Python int, so its batches take seconds).

numpy's ``Generator.laplace`` and ``Generator.normal`` are continuous, floating-point and not
cryptographically secure; they are a reference for raw speed, never an alternative.
"""

from __future__ import annotations

import os

# One core: pin every threaded numeric library before numpy is imported.
for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

import dpkit.noise as noise  # noqa: E402

SCALES = (1.0, 100.0, 1e4)


def _pin_to_one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        except OSError:
            pass


def time_sampler(draw: Callable[[int], object], batch: int, repeats: int, min_time: float, slow: float) -> float:
    """Best samples per second over ``repeats`` batches (more until ``min_time`` seconds are spent)."""
    best = float("inf")
    spent = 0.0
    runs = 0
    while runs < repeats or spent < min_time:
        start = time.perf_counter()
        draw(batch)
        elapsed = time.perf_counter() - start
        best = min(best, elapsed)
        spent += elapsed
        runs += 1
        if elapsed > slow:
            break
    return batch / best


def _opendp_samplers() -> tuple[dict[str, Callable[[float], Callable[[int], object]]], str]:
    """OpenDP's integer Laplace and Gaussian on a vector of zeros, or an empty dict and why not."""
    try:
        import opendp
        import opendp.prelude as dp
    except ImportError as exc:  # the peer is optional
        return {}, f"OpenDP not importable ({exc}); skipped"
    dp.enable_features("contrib")
    domain = dp.vector_domain(dp.atom_domain(T=int))

    def laplace(scale: float) -> Callable[[int], object]:
        measurement = dp.m.make_laplace(domain, dp.l1_distance(T=int), scale)
        return lambda size: measurement([0] * size)

    def gaussian(scale: float) -> Callable[[int], object]:
        measurement = dp.m.make_gaussian(domain, dp.l2_distance(T=int), scale)
        return lambda size: measurement([0] * size)

    version = getattr(opendp, "__version__", None)
    if version is None:
        from importlib.metadata import version as package_version

        version = package_version("opendp")
    return {"discrete_laplace": laplace, "discrete_gaussian": gaussian}, f"opendp {version}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: small batch, one repeat")
    parser.add_argument("--batch", type=int, default=None, help="samples per batch (default 1,000,000)")
    parser.add_argument("--repeats", type=int, default=None, help="batches per timing, best kept (default 3)")
    parser.add_argument("--min-time", type=float, default=None, help="seconds to spend per timing (default 0.5)")
    parser.add_argument("--slow", type=float, default=2.0, help="a batch slower than this is timed once")
    parser.add_argument("--no-opendp", action="store_true", help="skip OpenDP even if importable")
    args = parser.parse_args(argv)
    batch = args.batch or (20_000 if args.quick else 1_000_000)
    repeats = args.repeats or (1 if args.quick else 3)
    min_time = args.min_time if args.min_time is not None else (0.0 if args.quick else 0.5)
    _pin_to_one_core()

    opendp_samplers, opendp_note = ({}, "OpenDP skipped (--no-opendp)") if args.no_opendp else _opendp_samplers()
    generator = np.random.default_rng()
    print(f"python {platform.python_version()}, numpy {np.__version__}, {opendp_note}")
    print(f"batch {batch:,}, best of {repeats} (at least {min_time} s per timing), one core\n")

    rows: list[tuple[str, str, float, float, float]] = []
    for kind in ("discrete_laplace", "discrete_gaussian"):
        sampler = getattr(noise, kind)
        for scale in SCALES:
            reference = time_sampler(lambda n, s=scale, f=sampler: f(s, n), batch, repeats, min_time, args.slow)
            rows.append((f"dpkit {kind}", "secure", scale, reference, reference))
            constant = time_sampler(
                lambda n, s=scale, f=sampler: f(s, n, constant_time=True), batch, repeats, min_time, args.slow
            )
            rows.append((f"dpkit {kind}", "secure, constant_time", scale, constant, reference))
            if kind in opendp_samplers:
                draw = opendp_samplers[kind](scale)
                rate = time_sampler(draw, batch, repeats, min_time, args.slow)
                rows.append((f"opendp {kind}", "OpenDP default", scale, rate, reference))
            numpy_draw = (
                (lambda n, s=scale: generator.laplace(0.0, s, n))
                if kind == "discrete_laplace"
                else (lambda n, s=scale: generator.normal(0.0, s, n))
            )
            rate = time_sampler(numpy_draw, batch, repeats, min_time, args.slow)
            name = "numpy Generator.laplace" if kind == "discrete_laplace" else "numpy Generator.normal"
            rows.append((name, "INSECURE, continuous", scale, rate, reference))

    header = f"| {'sampler':<32} | {'source':<22} | {'scale':>7} | {'M samples/s':>11} | {'vs dpkit':>8} |"
    print(header)
    print("|" + "|".join("-" * (len(part)) for part in header.split("|")[1:-1]) + "|")
    for name, source, scale, rate, reference in rows:
        print(f"| {name:<32} | {source:<22} | {scale:>7g} | {rate / 1e6:>11.3f} | {rate / reference:>7.3f}x |")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
