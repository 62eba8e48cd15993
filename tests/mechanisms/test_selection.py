"""Tests of the selection mechanisms: exponential, report-noisy-max, permute-and-flip, sparse vector.

Statistical tests use fixed seeds and thresholds from an explicit false-positive rate
(FALSE_POSITIVE_RATE) through scipy.stats.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpkit._errors import DPError, InvalidParameterError, PrivacyWarning
from dpkit.events import PureDPEvent
from dpkit.guarantees import PureDP
from dpkit.mechanisms.exponential import Exponential, sample_exponential
from dpkit.mechanisms.noisy_max import PermuteAndFlip, ReportNoisyMax
from dpkit.mechanisms.sparse_vector import SparseVector
from dpkit.noise import InsecureSeededRandom

FALSE_POSITIVE_RATE = 1e-6
# Float slack on ratios of float probabilities (the laws themselves are exact).
FLOAT_SLACK = 1e-9

BAD_EPSILONS = [0, -1, float("nan"), float("inf"), float("-inf"), "1", True, None]
BAD_SENSITIVITIES = [0, -1, float("nan"), float("inf"), "1", True]
BAD_SCORES = [
    None,
    [],
    [[1.0, 2.0], [3.0, 4.0]],
    [1.0, float("nan")],
    [1.0, float("inf")],
    [1.0, None],
    ["a", "b"],
    True,
    [True, False],
    5.0,
    [2**60, 1],
]


class ExplodingSource:
    """A random source that fails the test if any randomness is drawn."""

    secure = False

    def uint64(self, size: int) -> np.ndarray:
        raise AssertionError("randomness drawn before validation finished")


def selection_factories():
    return [
        lambda s, e: Exponential(s, e),
        lambda s, e: ReportNoisyMax(s, e),
        lambda s, e: ReportNoisyMax(s, e, noise="laplace"),
        lambda s, e: PermuteAndFlip(s, e),
    ]


def all_factories():
    return [*selection_factories(), lambda s, e: SparseVector(s, e, threshold=0.0)]


def chi_square_ok(counts: np.ndarray, probabilities: np.ndarray) -> float:
    expected = probabilities * counts.sum()
    return float(stats.chisquare(counts, expected).pvalue)


# ---------------------------------------------------------------------------------------------
# Parameter and data validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("factory", all_factories())
@pytest.mark.parametrize("epsilon", BAD_EPSILONS)
def test_bad_epsilon_refused(factory, epsilon):
    with pytest.raises(InvalidParameterError) as info:
        factory(1.0, epsilon)
    assert info.value.name == "epsilon"


@pytest.mark.parametrize("factory", all_factories())
@pytest.mark.parametrize("sensitivity", BAD_SENSITIVITIES)
def test_bad_sensitivity_refused(factory, sensitivity):
    with pytest.raises(InvalidParameterError) as info:
        factory(sensitivity, 1.0)
    assert info.value.name == "sensitivity"


@pytest.mark.parametrize("factory", all_factories())
def test_large_epsilon_warns(factory):
    with pytest.warns(PrivacyWarning):
        factory(1.0, 6.0)


@pytest.mark.parametrize("factory", selection_factories())
@pytest.mark.parametrize("scores", BAD_SCORES)
def test_bad_scores_refused_before_noise(factory, scores):
    mechanism = factory(1.0, 1.0)
    with pytest.raises(InvalidParameterError) as info:
        mechanism.release(scores, rng=ExplodingSource())
    assert isinstance(info.value, DPError) and isinstance(info.value, ValueError)


def test_other_bad_parameters():
    with pytest.raises(InvalidParameterError, match="noise"):
        ReportNoisyMax(1.0, 1.0, noise="gumbel")
    with pytest.raises(InvalidParameterError, match="monotonic"):
        Exponential(1.0, 1.0, monotonic=1)
    with pytest.raises(InvalidParameterError, match="candidates"):
        Exponential(1.0, 1.0, candidates=[])
    with pytest.raises(InvalidParameterError, match="candidates"):
        Exponential(1.0, 1.0, candidates="abc")
    with pytest.raises(InvalidParameterError, match="max_positives"):
        SparseVector(1.0, 1.0, threshold=0.0, max_positives=0)
    with pytest.raises(InvalidParameterError, match="max_positives"):
        SparseVector(1.0, 1.0, threshold=0.0, max_positives=1.5)
    for threshold in (float("nan"), float("inf"), None, "1", [1.0, 2.0]):
        with pytest.raises(InvalidParameterError, match="threshold"):
            SparseVector(1.0, 1.0, threshold=threshold)
    with pytest.raises(InvalidParameterError, match="one score per candidate"):
        Exponential(1.0, 1.0, candidates=["a", "b"]).release([1.0, 2.0, 3.0], rng=ExplodingSource())
    with pytest.raises(InvalidParameterError, match="rng"):
        Exponential(1.0, 1.0).release([1.0, 2.0], rng=np.random.default_rng(0))


def test_utility_bound_parameters():
    mechanism = Exponential(1.0, 1.0)
    for kwargs in (
        {"num_candidates": 0, "t": 1.0},
        {"num_candidates": 3, "t": 0.0},
        {"num_candidates": 3, "t": 1.0, "num_optimal": 4},
    ):
        with pytest.raises(InvalidParameterError):
            mechanism.utility_bound(**kwargs)
    with pytest.raises(InvalidParameterError, match="t"):
        mechanism.utility_bound(10, t=2000.0)


# ---------------------------------------------------------------------------------------------
# Guarantees, events, privacy maps
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("factory", all_factories())
def test_guarantee_event_and_privacy_map(factory):
    mechanism = factory(2.0, 0.5)
    assert mechanism.guarantee == PureDP(0.5)
    assert mechanism.event == PureDPEvent(0.5)
    assert mechanism.privacy_map(2.0) == PureDP(0.5)
    assert mechanism.check(2.0, PureDP(0.5))
    assert not mechanism.check(2.0, PureDP(0.49))
    # epsilon * u(d) / u(Delta) with u(d) = floor(d / 2^k) + 1 grid units: proportional up to the grid.
    tolerance = Fraction(1, 10**5)
    doubled = mechanism.privacy_map(4.0).epsilon_exact
    assert abs(doubled - 1) <= tolerance
    half = mechanism.privacy_map(1.0).epsilon_exact
    assert Fraction(1, 4) <= half <= Fraction(1, 4) * (1 + tolerance)
    grid = mechanism._grid
    assert doubled == Fraction(1, 2) * grid.units(4.0) / grid.units(2.0)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0, 1e-6])
@pytest.mark.parametrize("sensitivity", [1.0, 0.3, 1e6])
def test_rates_never_exceed_the_stated_epsilon(epsilon, sensitivity):
    exact = Fraction(repr(epsilon))
    for monotonic, factor in ((False, 2), (True, 1)):
        mechanism = Exponential(sensitivity, epsilon, monotonic=monotonic)
        units = mechanism._grid.sensitivity_units
        assert factor * Fraction(mechanism._rate) * units <= exact
        assert mechanism.effective_sensitivity <= sensitivity + 2.0**mechanism.grid_exponent
        assert mechanism.effective_sensitivity >= sensitivity
    flip = PermuteAndFlip(sensitivity, epsilon)
    assert 2 * Fraction(flip._rate) * flip._grid.sensitivity_units <= exact
    noisy_max = ReportNoisyMax(sensitivity, epsilon)
    assert Fraction(noisy_max.noise_scale_units) >= 2 * noisy_max._grid.sensitivity_units / exact
    sparse = SparseVector(sensitivity, epsilon, threshold=0.0, max_positives=3)
    units = sparse._grid.sensitivity_units
    assert Fraction(sparse.threshold_noise_scale_units) >= units / (exact / 2)
    assert Fraction(sparse.query_noise_scale_units) >= 2 * 3 * units / (exact / 2)


# ---------------------------------------------------------------------------------------------
# Exponential mechanism
# ---------------------------------------------------------------------------------------------


def test_exponential_probabilities_match_the_textbook_law():
    scores = np.array([0.0, 1.5, 3.0, -2.0, 2.9])
    mechanism = Exponential(1.0, 1.0)
    ideal = np.exp(scores / 2.0)
    ideal /= ideal.sum()
    np.testing.assert_allclose(mechanism.probabilities(scores), ideal, rtol=1e-5)
    monotonic = Exponential(1.0, 1.0, monotonic=True)
    ideal = np.exp(scores)
    ideal /= ideal.sum()
    np.testing.assert_allclose(monotonic.probabilities(scores), ideal, rtol=1e-5)


@pytest.mark.statistical
def test_exponential_goodness_of_fit():
    scores = np.array([0.0, 1.5, 3.0, -2.0, 2.9])
    mechanism = Exponential(1.0, 1.0)
    probabilities = mechanism.probabilities(scores)
    # 200000 independent draws through the sampler release() uses.
    draws = sample_exponential(mechanism._gaps(scores), mechanism._rate, 200_000, InsecureSeededRandom(11))
    counts = np.bincount(draws, minlength=scores.size)
    assert chi_square_ok(counts, probabilities) > FALSE_POSITIVE_RATE
    # And through release() itself.
    rng = InsecureSeededRandom(12)
    released = [mechanism.release(scores, rng=rng) for _ in range(20_000)]
    counts = np.bincount(released, minlength=scores.size)
    assert chi_square_ok(counts, probabilities) > FALSE_POSITIVE_RATE


# Score vectors for the row sampler: flat (acceptance near 1), peaked (acceptance near 1 / n, so
# rows need many proposals and some need a second round) and in between.
ROW_SCORES = np.array(
    [
        [0.0, 0.1, 0.2, 0.0, 0.1, 0.0],
        [0.0, 0.0, 30.0, 0.0, 29.0, 0.0],
        [0.0, 1.5, 3.0, -2.0, 2.9, 1.0],
    ]
)


@pytest.mark.statistical
@pytest.mark.parametrize("round_proposals", [None, 7])
def test_exponential_release_rows_law_and_independence(monkeypatch, round_proposals):
    """Each row has exactly the law of release() on it, and consecutive rows are independent.

    ``round_proposals=7`` forces rounds smaller than one row's proposals, so rows are split over
    many rounds and carried to the next: the law must not change.
    """
    from dpkit.mechanisms import exponential

    if round_proposals is not None:
        monkeypatch.setattr(exponential, "_ROUND_PROPOSALS", round_proposals)
    mechanism = Exponential(1.0, 1.0)
    repeats = 12_000 if round_proposals is None else 3_000
    rows = np.tile(ROW_SCORES, (repeats, 1))  # row i has the scores ROW_SCORES[i % 3]
    draws = np.array(mechanism.release_rows(rows, rng=InsecureSeededRandom(21 + (round_proposals or 0))))
    assert draws.shape == (rows.shape[0],)
    n = ROW_SCORES.shape[1]
    laws = [mechanism.probabilities(scores) for scores in ROW_SCORES]
    checks = len(ROW_SCORES) + 1
    for which, law in enumerate(laws):
        counts = np.bincount(draws[which::3], minlength=n)
        assert chi_square_ok(counts, law) > FALSE_POSITIVE_RATE / checks
    # Independence: the pair (flat row, in-between row) of each triple against the product law.
    pairs = draws[0::3] * n + draws[2::3]
    joint = np.outer(laws[0], laws[2]).ravel()
    assert chi_square_ok(np.bincount(pairs, minlength=n * n), joint) > FALSE_POSITIVE_RATE / checks


def test_exponential_release_rows_labels_validation_and_no_rows():
    mechanism = Exponential(1.0, 1.0, candidates=["low", "high", "mid"])
    rows = [[0.0, 40.0, 10.0], [40.0, 0.0, 10.0], [0.0, 10.0, 40.0]]
    assert mechanism.release_rows(rows, rng=InsecureSeededRandom(3)) == ["high", "low", "mid"]
    assert mechanism.release_rows(np.zeros((0, 3)), rng=ExplodingSource()) == []
    bad = [
        [0.0, 1.0, 2.0],  # 1-D
        [[0.0, 1.0]],  # not one score per candidate
        [[0.0, 1.0, float("nan")]],
        [[0.0, 1.0, None]],
        np.zeros((2, 0)),
        [[2**60, 1, 0]],
        None,
    ]
    for scores in bad:
        with pytest.raises(InvalidParameterError, match="scores"):
            mechanism.release_rows(scores, rng=ExplodingSource())


def test_exponential_returns_labels_and_prefers_the_best():
    mechanism = Exponential(1.0, 1.0, candidates=["low", "high", "mid"])
    rng = InsecureSeededRandom(3)
    outputs = [mechanism.release([0.0, 40.0, 10.0], rng=rng) for _ in range(200)]
    assert set(outputs) == {"high"}  # the others have probability below e^-15 each


def test_exponential_handles_extreme_scores():
    mechanism = Exponential(1.0, 1.0)
    scores = np.array([1e300, -1e300, 1e300 - 1e290, 0.0])
    probabilities = mechanism.probabilities(scores)
    assert probabilities[0] == 1.0
    assert mechanism.release(scores, rng=InsecureSeededRandom(0)) == 0
    integers = np.array([2**52, 0, -(2**52)])
    assert mechanism.release(integers, rng=InsecureSeededRandom(0)) == 0


def neighbour_shifts(rng: np.random.Generator, size: int, count: int, sensitivity: float):
    """Score shifts bounded by the sensitivity: random ones and every corner of the box."""
    shifts = [sensitivity * rng.uniform(-1, 1, size) for _ in range(count)]
    shifts += [sensitivity * np.array(corner) for corner in itertools.product([-1.0, 1.0], repeat=size)]
    return shifts


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 2.5])
def test_exponential_privacy_ratio(epsilon):
    # Test-only data generator (numpy's RNG picks test inputs, never mechanism noise).
    generator = np.random.default_rng(5)
    sensitivity = 1.7
    mechanism = Exponential(sensitivity, epsilon)
    bound = math.exp(epsilon) * (1 + FLOAT_SLACK)
    worst = 0.0
    for _ in range(5):
        scores = generator.uniform(-5, 5, 5)
        base = mechanism.probabilities(scores)
        for shift in neighbour_shifts(generator, 5, 20, sensitivity):
            other = mechanism.probabilities(scores + shift)
            worst = max(worst, float(np.max(base / other)), float(np.max(other / base)))
    assert worst <= bound
    assert worst >= math.exp(epsilon) * 0.9  # the corners come close to the bound


def test_monotonic_exponential_privacy_ratio():
    generator = np.random.default_rng(6)
    epsilon, sensitivity = 1.0, 1.0
    mechanism = Exponential(sensitivity, epsilon, monotonic=True)
    worst = 0.0
    for _ in range(20):
        scores = generator.integers(0, 10, 4).astype(float)
        base = mechanism.probabilities(scores)
        for sign in (-1.0, 1.0):
            for shift in itertools.product([0.0, 1.0], repeat=4):
                other = mechanism.probabilities(scores + sign * np.array(shift))
                worst = max(worst, float(np.max(base / other)), float(np.max(other / base)))
    assert worst <= math.exp(epsilon) * (1 + FLOAT_SLACK)


@pytest.mark.parametrize("t", [0.5, 2.0, 5.0])
def test_exponential_utility_theorem(t):
    generator = np.random.default_rng(7)
    sensitivity, epsilon = 2.0, 0.8
    mechanism = Exponential(sensitivity, epsilon)
    scores = generator.uniform(0, 30, 50)
    scores[[3, 17]] = scores.max() + 1.0  # two optimal candidates
    optimum = scores.max()
    gap = mechanism.utility_bound(scores.size, t, num_optimal=2)
    textbook = 2 * sensitivity / epsilon * (math.log(scores.size / 2) + t)
    assert textbook <= gap <= textbook * (1 + 1e-5) + 2.0**mechanism.grid_exponent * 2
    # Exactly, from the law...
    bad = scores <= optimum - gap
    assert mechanism.probabilities(scores)[bad].sum() <= math.exp(-t)
    # ...and empirically: the count of bad outputs is at most binomial(n, e^-t).
    n = 20_000
    draws = sample_exponential(mechanism._gaps(scores), mechanism._rate, n, InsecureSeededRandom(8))
    bad_count = int(bad[draws].sum())
    assert bad_count <= stats.binom.ppf(1 - FALSE_POSITIVE_RATE, n, math.exp(-t))


# ---------------------------------------------------------------------------------------------
# Permute-and-flip
# ---------------------------------------------------------------------------------------------


def enumerated_permute_and_flip(accept: np.ndarray) -> np.ndarray:
    """The law of permute-and-flip by enumerating every visiting order."""
    n = accept.size
    law = np.zeros(n)
    orders = list(itertools.permutations(range(n)))
    for order in orders:
        still_walking = 1.0
        for candidate in order:
            law[candidate] += still_walking * accept[candidate] / len(orders)
            still_walking *= 1.0 - accept[candidate]
    return law


def test_permute_and_flip_closed_form_matches_enumeration():
    generator = np.random.default_rng(9)
    mechanism = PermuteAndFlip(1.0, 1.0)
    for size in (1, 2, 4, 6):
        scores = generator.uniform(-3, 3, size)
        accept = np.exp(-mechanism._rate * mechanism._gaps(scores, mechanism._cap).astype(float))
        np.testing.assert_allclose(
            mechanism.probabilities(scores), enumerated_permute_and_flip(accept), rtol=1e-10, atol=1e-15
        )


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 2.0])
def test_permute_and_flip_privacy_and_dominance(epsilon):
    generator = np.random.default_rng(10)
    sensitivity = 1.0
    flip = PermuteAndFlip(sensitivity, epsilon)
    exponential = Exponential(sensitivity, epsilon)
    worst = 0.0
    for _ in range(10):
        scores = generator.uniform(-4, 4, 4)
        accept = np.exp(-flip._rate * flip._gaps(scores, flip._cap).astype(float))
        base = enumerated_permute_and_flip(accept)
        # Expected score never below the exponential mechanism's (McKenna & Sheldon 2020, Thm. 2).
        assert base @ scores >= exponential.probabilities(scores) @ scores - 1e-12
        for shift in neighbour_shifts(generator, 4, 10, sensitivity):
            shifted = scores + shift
            accept = np.exp(-flip._rate * flip._gaps(shifted, flip._cap).astype(float))
            other = enumerated_permute_and_flip(accept)
            worst = max(worst, float(np.max(base / other)), float(np.max(other / base)))
    assert worst <= math.exp(epsilon) * (1 + FLOAT_SLACK)


@pytest.mark.statistical
def test_permute_and_flip_goodness_of_fit():
    scores = np.array([0.0, 1.0, 2.5, 2.5, -1.0])
    mechanism = PermuteAndFlip(1.0, 1.0)
    rng = InsecureSeededRandom(13)
    counts = np.bincount([mechanism.release(scores, rng=rng) for _ in range(20_000)], minlength=scores.size)
    assert chi_square_ok(counts, mechanism.probabilities(scores)) > FALSE_POSITIVE_RATE


def test_permute_and_flip_many_candidates():
    mechanism = PermuteAndFlip(1.0, 2.0, candidates=list(range(3000)))
    scores = np.zeros(3000)
    scores[1234] = 100.0
    assert mechanism.release(scores, rng=InsecureSeededRandom(1)) == 1234
    assert abs(mechanism.probabilities(scores).sum() - 1.0) < 1e-9


# ---------------------------------------------------------------------------------------------
# Report-noisy-max
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("noise", ["exponential", "laplace"])
def test_report_noisy_max_finds_the_max_with_large_epsilon(noise):
    with pytest.warns(PrivacyWarning):
        mechanism = ReportNoisyMax(1.0, 50.0, noise=noise, candidates=["a", "b", "c", "d"])
    rng = InsecureSeededRandom(14)
    assert {mechanism.release([1.0, 5.0, 4.0, -3.0], rng=rng) for _ in range(200)} == {"b"}


@pytest.mark.statistical
def test_report_noisy_max_with_exponential_noise_is_permute_and_flip():
    # Ding et al. 2021: same law (up to the grid, a relative error far below what 20000 draws see).
    scores = np.array([0.0, 1.0, 2.5, 2.5, -1.0])
    noisy_max = ReportNoisyMax(1.0, 1.0)
    rng = InsecureSeededRandom(15)
    counts = np.bincount([noisy_max.release(scores, rng=rng) for _ in range(20_000)], minlength=scores.size)
    assert chi_square_ok(counts, PermuteAndFlip(1.0, 1.0).probabilities(scores)) > FALSE_POSITIVE_RATE


@pytest.mark.parametrize("noise", ["exponential", "laplace"])
def test_report_noisy_max_ties_are_uniform(noise):
    # Equal scores: by symmetry every candidate is equally likely, ties included.
    mechanism = ReportNoisyMax(1.0, 1.0, noise=noise)
    rng = InsecureSeededRandom(16)
    counts = np.bincount([mechanism.release([7.0, 7.0, 7.0], rng=rng) for _ in range(15_000)], minlength=3)
    assert chi_square_ok(counts, np.full(3, 1 / 3)) > FALSE_POSITIVE_RATE


def discrete_noisy_max_law(scores, pmf_support, pmf):
    """Exact law of argmax(scores + noise) with uniform tie-breaking, by enumeration."""
    n = len(scores)
    grids = np.meshgrid(*([pmf_support] * n), indexing="ij")
    weights = np.ones_like(grids[0], dtype=float)
    for axis in range(n):
        weights = weights * np.meshgrid(*([pmf] * n), indexing="ij")[axis]
    noisy = np.stack([scores[i] + grids[i] for i in range(n)])
    top = noisy.max(axis=0)
    winners = noisy == top
    share = winners / winners.sum(axis=0)
    return np.array([(share[i] * weights).sum() for i in range(n)])


@pytest.mark.parametrize("noise", ["exponential", "laplace"])
@pytest.mark.parametrize("monotonic", [False, True])
def test_discrete_noisy_max_with_random_ties_is_private(noise, monotonic):
    """The proof in ReportNoisyMax's docstring, checked by exact enumeration on small integers.

    Sensitivity U = 1 grid unit, epsilon = 2: noise scale t = 2U / epsilon = 1 (U / epsilon =
    0.5 for monotone scores), as the mechanism uses in grid units.
    """
    epsilon = 2.0
    mechanism = ReportNoisyMax(1.0, epsilon, noise=noise, monotonic=monotonic)
    factor = 1 if monotonic else 2
    units = mechanism._grid.sensitivity_units
    assert mechanism.noise_scale_units == pytest.approx(factor * units / epsilon, rel=1e-12)
    scale = factor / epsilon
    q = math.exp(-1 / scale)
    support = np.arange(0, 60) if noise == "exponential" else np.arange(-40, 41)
    pmf = q ** np.abs(support)
    pmf = pmf / pmf.sum()
    worst = 0.0
    for scores in ([0, 0, 0], [0, 1, 1], [2, 0, 1], [0, 3, 3]):
        base = discrete_noisy_max_law(np.array(scores), support, pmf)
        corners = [np.array(s) for s in itertools.product([-1, 0, 1], repeat=3)]
        if monotonic:
            corners = [s for s in corners if (s >= 0).all() or (s <= 0).all()]
        for shift in corners:
            other = discrete_noisy_max_law(np.array(scores) + shift, support, pmf)
            worst = max(worst, float(np.max(base / other)), float(np.max(other / base)))
    assert worst <= math.exp(epsilon) * (1 + 1e-9)


# ---------------------------------------------------------------------------------------------
# Sparse vector
# ---------------------------------------------------------------------------------------------


def test_sparse_vector_finds_the_right_queries_and_stops():
    with pytest.warns(PrivacyWarning):
        mechanism = SparseVector(1.0, 60.0, threshold=10.0, max_positives=2)
    answers = [1.0, 2.0, 20.0, 3.0, 30.0, 40.0, 50.0]
    for seed in range(20):
        assert mechanism.release(answers, rng=InsecureSeededRandom(seed)) == [False, False, True, False, True]
    run = mechanism.start(rng=InsecureSeededRandom(0))
    assert [mechanism.process(a) for a in (0.0, 25.0, 1.0, 99.0)] == [False, True, False, True]
    assert run.exhausted and run.positives == 2 and run.answered == 4
    with pytest.raises(InvalidParameterError, match="positive answer"):
        mechanism.process(100.0)
    with pytest.raises(InvalidParameterError, match="positive answer"):
        run.process(100.0)


def test_sparse_vector_above_threshold_single_positive():
    with pytest.warns(PrivacyWarning):
        mechanism = SparseVector(1.0, 40.0, threshold=0.0, monotonic=True)
    assert mechanism.release([-5.0, -9.0, 5.0, 9.0], rng=InsecureSeededRandom(1)) == [False, False, True]
    assert mechanism.release([-5.0, -9.0], rng=InsecureSeededRandom(1)) == [False, False]


def test_sparse_vector_state_errors_and_validation():
    mechanism = SparseVector(1.0, 1.0, threshold=0.0)
    with pytest.raises(InvalidParameterError, match="start"):
        mechanism.process(1.0)
    # All answers are checked before any noise is drawn.
    for answers in ([1.0, float("nan")], [], None, [[1.0]], [1.0, None]):
        with pytest.raises(InvalidParameterError):
            mechanism.release(answers, rng=ExplodingSource())
    run = mechanism.start(rng=InsecureSeededRandom(0))
    for bad in (float("nan"), None, [1.0, 2.0], "x", float("inf")):
        with pytest.raises(InvalidParameterError):
            run.process(bad)
    assert run.answered == 0


def discrete_laplace_at_least(k: np.ndarray, scale: float) -> np.ndarray:
    """P(X >= k) for the discrete Laplace law of this scale."""
    q = math.exp(-1 / scale)
    k = np.asarray(k, dtype=float)
    upper = q ** np.maximum(k, 1) / (1 + q)  # P(X >= k), k >= 1
    lower = 1 - q ** np.maximum(1 - k, 1) / (1 + q)  # 1 - P(X >= 1 - k), k <= 0
    return np.where(k >= 1, upper, lower)


def sparse_vector_law(answers, threshold_scale, query_scale, max_positives):
    """Exact law of the released answer prefixes of the discrete sparse vector (threshold 0)."""
    rho = np.arange(-80, 81)
    q = math.exp(-1 / threshold_scale)
    rho_pmf = (1 - q) / (1 + q) * q ** np.abs(rho)
    above = np.stack([discrete_laplace_at_least(rho - a, query_scale) for a in answers])
    law: dict[tuple[bool, ...], float] = {}
    for pattern in itertools.product([False, True], repeat=len(answers)):
        probability = rho_pmf.copy()
        for i, flag in enumerate(pattern):
            probability = probability * (above[i] if flag else 1 - above[i])
        released, positives = [], 0
        for flag in pattern:
            released.append(flag)
            positives += flag
            if positives == max_positives:
                break
        key = tuple(released)
        law[key] = law.get(key, 0.0) + float(probability.sum())
    return law


@pytest.mark.parametrize("monotonic", [False, True])
def test_discrete_sparse_vector_is_private(monotonic):
    """Lyu et al.'s scales on the integer grid, checked by exact computation (U = 1, epsilon = 2, c = 2)."""
    epsilon, c = 2.0, 2
    mechanism = SparseVector(1.0, epsilon, threshold=0.0, max_positives=c, monotonic=monotonic)
    units = mechanism._grid.sensitivity_units
    factor = 1 if monotonic else 2
    assert mechanism.threshold_noise_scale_units == pytest.approx(units / (epsilon / 2), rel=1e-12)
    assert mechanism.query_noise_scale_units == pytest.approx(factor * c * units / (epsilon / 2), rel=1e-12)
    threshold_scale, query_scale = 1 / (epsilon / 2), factor * c / (epsilon / 2)
    worst = 0.0
    for answers in ([0, 1, -1], [2, 0, 0], [-1, -1, 3]):
        base = sparse_vector_law(answers, threshold_scale, query_scale, c)
        shifts = [np.array(s) for s in itertools.product([-1, 0, 1], repeat=3)]
        if monotonic:
            shifts = [s for s in shifts if (s >= 0).all() or (s <= 0).all()]
        for shift in shifts:
            other = sparse_vector_law(list(np.array(answers) + shift), threshold_scale, query_scale, c)
            for key, value in base.items():
                worst = max(worst, value / other[key], other[key] / value)
    assert worst <= math.exp(epsilon) * (1 + 1e-9)


def test_discrete_sparse_vector_check_detects_too_little_noise():
    # The exact check above is sharp enough to catch query noise of a quarter of the required
    # scale (c Delta / (2 epsilon_2) instead of 2 c Delta / epsilon_2).
    epsilon, c = 2.0, 2
    base = sparse_vector_law([-2, 2, 2], 1.0, c / 2.0, c)
    other = sparse_vector_law([-3, 3, 3], 1.0, c / 2.0, c)
    worst = max(max(v / other[k], other[k] / v) for k, v in base.items())
    assert worst > math.exp(epsilon)


@pytest.mark.parametrize("size", [1000, 4096])  # numpy's quadrature nodes, then scipy's (above 2,046 candidates)
def test_permute_and_flip_law_at_many_candidates_matches_mpmath(size):
    # Two score levels: `top` candidates at the best score (accepted with probability 1) and the
    # rest 3 below it (probability p). A best candidate is released with probability
    # integral_0^1 (1 - x)^(top - 1) (1 - p x)^(size - top) dx (the closed form in probabilities()).
    import mpmath

    mechanism = PermuteAndFlip(1.0, 1.0)
    top = 3
    scores = np.array([10.0] * top + [7.0] * (size - top))
    p = mpmath.exp(-mechanism._rate * int(mechanism._gaps(scores, mechanism._cap)[-1]))
    with mpmath.workdps(40):
        best = mpmath.quad(lambda x: (1 - x) ** (top - 1) * (1 - p * x) ** (size - top), [0, 1])
    law = mechanism.probabilities(scores)
    np.testing.assert_allclose(law[:top], float(best), rtol=1e-8)
    np.testing.assert_allclose(law[top:], (1 - top * float(best)) / (size - top), rtol=1e-8)
