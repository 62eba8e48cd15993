"""Local differential privacy: each person randomizes their own value; no trusted curator.

Frequency oracles over k categories (indices 0..k-1), each with ``randomize(values, rng)``,
``estimate(reports)`` (unbiased COUNTS per category, summing to n in expectation),
``variance(n)`` (variance of one category's estimated count), ``confidence_interval`` and
``guarantee`` (``PureDP(eps, REPLACE_ONE)``, i.e. eps-LDP):

* :class:`KRR`: k-ary randomized response (seed 000; k = 2 is binary randomized response);
* :class:`SUE` / :class:`OUE`: symmetric (basic RAPPOR) and optimized unary encoding;
* :class:`OLH`: optimized local hashing; :class:`HadamardResponse`.

All from Wang, Blocki, Li & Jha (2017), "Locally differentially private protocols for frequency
estimation", except Hadamard response (Acharya, Sun & Zhang 2019). Means of values in [-1, 1]:
:class:`DuchiMechanism` (Duchi, Jordan & Wainwright 2018) and :class:`PiecewiseMechanism`
(Wang et al. 2019). Large domains: :class:`HeavyHitters` (prefix extension). :func:`choose` picks
an oracle; :func:`ldp_vs_central_error` prices local against central DP;
:func:`simulate_statistical_queries` runs the statistical-query view of seed 000.

>>> import numpy as np
>>> from dpkit.local import choose
>>> from dpkit.noise import InsecureSeededRandom
>>> values = np.random.default_rng(1).integers(0, 4, 10_000)
>>> oracle = choose(4, 2.0, values.size).oracle
>>> counts = oracle.estimate(oracle.randomize(values, rng=InsecureSeededRandom(0)))
>>> bool(np.all(np.abs(counts - np.bincount(values)) < 5 * np.sqrt(oracle.variance(values.size, 2500))))
True
"""

from dpkit.local._choose import LDPvsCentral, OracleChoice, choose, ldp_vs_central_error, plot_ldp_vs_central
from dpkit.local._frequency import (
    KRR,
    OLH,
    OUE,
    SUE,
    FrequencyOracle,
    HadamardResponse,
    LocalReports,
    fast_walsh_hadamard,
)
from dpkit.local._heavy_hitters import HeavyHitterResult, HeavyHitters
from dpkit.local._numeric import DuchiMechanism, PiecewiseMechanism
from dpkit.local._statistical_queries import StatisticalQueryAnswers, samples_needed, simulate_statistical_queries

__all__ = [
    "KRR",
    "OLH",
    "OUE",
    "SUE",
    "DuchiMechanism",
    "FrequencyOracle",
    "HadamardResponse",
    "HeavyHitterResult",
    "HeavyHitters",
    "LDPvsCentral",
    "LocalReports",
    "OracleChoice",
    "PiecewiseMechanism",
    "StatisticalQueryAnswers",
    "choose",
    "fast_walsh_hadamard",
    "ldp_vs_central_error",
    "plot_ldp_vs_central",
    "samples_needed",
    "simulate_statistical_queries",
]
