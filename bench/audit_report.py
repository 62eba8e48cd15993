"""Print the empirical privacy audit of every mechanism and of its deliberately broken variants.

Run: ``.venv/bin/python bench/audit_report.py`` (about a minute). Each line is
``dpkit.audit.estimate_epsilon``'s lower bound on epsilon (false-alarm rate alpha = 1e-6): a
correct mechanism must stay at or below its claimed epsilon, a broken one must exceed it.
The same configurations run as assertions in tests/statistical/test_mechanism_audits.py.
"""

from __future__ import annotations

import numpy as np

import dpkit
from dpkit.audit import estimate_epsilon
from dpkit.noise import InsecureSeededRandom

SCORES = {0: np.array([1.0] + [0.0] * 50), 1: np.array([0.0] + [1.0] * 50)}


def repeated(mechanism):
    return lambda value, rng, size: mechanism.release_repeated(value, size, rng=rng)


def selection(mechanism):
    return lambda which, rng: mechanism.release(SCORES[which], rng=rng)


def sparse_vector(mechanism):
    answers = {0: np.array([0.0, 0.0]), 1: np.array([1.0, 1.0])}

    def release(which, rng):
        outcome = mechanism.release(answers[which], rng=rng)
        return len(outcome) * 2 + int(outcome[-1])

    return release


def rr(mechanism, dtype):
    return lambda value, rng, size: np.asarray(mechanism.release(np.full(size, value, dtype=dtype), rng=rng)).astype(
        np.int64
    )


# (label, claimed epsilon, release, a, b, samples, vectorized, delta, expected)
CASES = [
    ("Laplace(1, eps=1)", 1.0, repeated(dpkit.Laplace(1.0, 1.0)), 0.0, 1.0, 400_000, True, 0.0, "pass"),
    ("Laplace noise scale x0.8", 1.0, repeated(dpkit.Laplace(0.8, 1.0)), 0.0, 1.0, 400_000, True, 0.0, "catch"),
    ("Laplace sensitivity x2", 1.0, repeated(dpkit.Laplace(1.0, 1.0)), 0.0, 2.0, 400_000, True, 0.0, "catch"),
    (
        "Gaussian(1, 1, 1e-5) analytic",
        1.0,
        repeated(dpkit.Gaussian(1.0, 1.0, 1e-5)),
        0.0,
        1.0,
        4_000_000,
        True,
        1e-5,
        "pass",
    ),
    ("Gaussian sigma x0.7", 1.0, repeated(dpkit.Gaussian(0.7, 1.0, 1e-5)), 0.0, 1.0, 12_000_000, True, 1e-5, "catch"),
    (
        "Gaussian(1, 0.9, 1e-5) classic",
        0.9,
        repeated(dpkit.Gaussian(1.0, 0.9, 1e-5, calibration="classic")),
        0.0,
        1.0,
        2_000_000,
        True,
        1e-5,
        "pass",
    ),
    ("DiscreteLaplace(1, eps=1)", 1.0, repeated(dpkit.DiscreteLaplace(1, 1.0)), 0, 1, 400_000, True, 0.0, "pass"),
    ("DiscreteLaplace scale x0.8", 1.0, repeated(dpkit.DiscreteLaplace(1, 1.25)), 0, 1, 400_000, True, 0.0, "catch"),
    ("DiscreteLaplace sensitivity x2", 1.0, repeated(dpkit.DiscreteLaplace(1, 1.0)), 0, 2, 400_000, True, 0.0, "catch"),
    (
        "Geometric(1, 1, [0, 10])",
        1.0,
        repeated(dpkit.Geometric(1, 1.0, lower=0, upper=10)),
        9,
        10,
        400_000,
        True,
        0.0,
        "pass",
    ),
    (
        "DiscreteGaussian(1, 1, 1e-5)",
        1.0,
        repeated(dpkit.DiscreteGaussian(1, epsilon=1.0, delta=1e-5)),
        0,
        1,
        4_000_000,
        True,
        1e-5,
        "pass",
    ),
    ("Staircase(1, eps=1)", 1.0, repeated(dpkit.Staircase(1.0, 1.0)), 0.0, 1.0, 400_000, True, 0.0, "pass"),
    ("Staircase sensitivity x2", 1.0, repeated(dpkit.Staircase(1.0, 1.0)), 0.0, 2.0, 400_000, True, 0.0, "catch"),
    (
        "RandomizedResponse(eps=1)",
        1.0,
        rr(dpkit.RandomizedResponse(1.0), bool),
        True,
        False,
        400_000,
        True,
        0.0,
        "pass",
    ),
    (
        "RandomizedResponse(eps=2, k=5)",
        2.0,
        rr(dpkit.RandomizedResponse(2.0, k=5), np.int64),
        0,
        1,
        400_000,
        True,
        0.0,
        "pass",
    ),
    ("Exponential(1, eps=1)", 1.0, selection(dpkit.Exponential(1.0, 1.0)), 0, 1, 40_000, False, 0.0, "pass"),
    ("Exponential eps x2", 1.0, selection(dpkit.Exponential(1.0, 2.0)), 0, 1, 40_000, False, 0.0, "catch"),
    ("ReportNoisyMax(1, eps=1)", 1.0, selection(dpkit.ReportNoisyMax(1.0, 1.0)), 0, 1, 40_000, False, 0.0, "pass"),
    ("PermuteAndFlip(1, eps=1)", 1.0, selection(dpkit.PermuteAndFlip(1.0, 1.0)), 0, 1, 40_000, False, 0.0, "pass"),
    (
        "SparseVector(1, eps=1, T=0)",
        1.0,
        sparse_vector(dpkit.SparseVector(1.0, 1.0, threshold=0.0)),
        0,
        1,
        40_000,
        False,
        0.0,
        "pass",
    ),
]


def main() -> None:
    print(f"{'mechanism':34} {'claimed':>8} {'audit lower bound':>18} {'samples':>11}  verdict")
    for seed, (label, claimed, release, a, b, samples, vectorized, delta, expected) in enumerate(CASES):
        result = estimate_epsilon(
            release,
            a,
            b,
            samples=samples,
            delta=delta,
            alpha=1e-6,
            rng=InsecureSeededRandom(100 + seed),
            vectorized=vectorized,
            selection_fraction=0.3 if samples > 5_000_000 else 0.5,
        )
        bound = result.epsilon_lower_bound
        ok = bound <= claimed if expected == "pass" else bound > claimed
        verdict = ("passes" if expected == "pass" else "caught") if ok else "UNEXPECTED"
        print(f"{label:34} {claimed:8.2f} {bound:18.4f} {samples:11,d}  {verdict}")


if __name__ == "__main__":
    main()
