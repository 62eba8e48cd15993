"""The selection mechanisms at tiny epsilon (down to 2**-60): nominal noise, exact laws, no internal errors.

QA found that below epsilon ~ 1e-9 Delta the score grid coarsened past the sensitivity, so the
noise was calibrated to the grid step instead of Delta (32 Delta at epsilon = 1e-10, 2048 Delta at
1e-12), and that report-noisy-max and sparse vector failed at release (a sampler scale above 2**40)
and the exponential mechanism and permute-and-flip at construction (an InternalError about the
rate) for smaller epsilons. These tests hold every accepted epsilon to the stated contract: the
effective sensitivity within 2**-20 of Delta, the noise at its nominal scale, the laws of the
continuous mechanisms of that scale.

Statistical tests use fixed seeds and thresholds from an explicit false-positive rate
(FALSE_POSITIVE_RATE) through scipy.stats.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpkit._errors import InvalidParameterError, PrivacyWarning
from dpkit.mechanisms.exponential import Exponential, sample_exponential
from dpkit.mechanisms.noisy_max import PermuteAndFlip, ReportNoisyMax
from dpkit.mechanisms.sparse_vector import SparseVector
from dpkit.noise import InsecureSeededRandom

FALSE_POSITIVE_RATE = 1e-6
# Two-sided normal quantile of the false-positive rate, for z-tests on means and proportions.
Z_THRESHOLD = float(stats.norm.isf(FALSE_POSITIVE_RATE / 2))

TINY_EPSILONS = [1e-6, 1e-8, 1e-9, 1e-10, 1e-12, 1e-15, 2.0**-60]
SENSITIVITIES = [1e-6, 1.0, 1e6]
# The documented grid rounding: U 2^k <= Delta + 2^k <= (1 + 2^-20) Delta.
GRID_SLACK = Fraction(1) + Fraction(1, 2**20)


def build(kind: str, sensitivity: float, epsilon: float):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return {
            "exponential": lambda: Exponential(sensitivity, epsilon),
            "exponential-monotonic": lambda: Exponential(sensitivity, epsilon, monotonic=True),
            "noisy-max": lambda: ReportNoisyMax(sensitivity, epsilon),
            "noisy-max-laplace": lambda: ReportNoisyMax(sensitivity, epsilon, noise="laplace"),
            "noisy-max-monotonic": lambda: ReportNoisyMax(sensitivity, epsilon, monotonic=True),
            "permute-and-flip": lambda: PermuteAndFlip(sensitivity, epsilon),
            "sparse-vector": lambda: SparseVector(sensitivity, epsilon, threshold=0.0, max_positives=2),
        }[kind]()


KINDS = [
    "exponential",
    "exponential-monotonic",
    "noisy-max",
    "noisy-max-laplace",
    "noisy-max-monotonic",
    "permute-and-flip",
    "sparse-vector",
]


def noise_scales(kind: str, mechanism, sensitivity: float, epsilon: float) -> list[tuple[Fraction, Fraction]]:
    """(actual, nominal) noise scales in score units, exactly: 1 / rate or the noise scale, times 2^k."""
    step = Fraction(2) ** mechanism.grid_exponent
    # The guarantee's exact epsilon is the decimal the user typed (as_fraction), e.g. 1/10^6.
    delta, eps = Fraction(sensitivity), Fraction(repr(epsilon))
    if kind.startswith("exponential") or kind == "permute-and-flip":
        factor = 1 if kind.endswith("monotonic") else 2
        return [(step / Fraction(mechanism._rate), factor * delta / eps)]
    if kind.startswith("noisy-max"):
        factor = 1 if kind.endswith("monotonic") else 2
        return [(Fraction(mechanism.noise_scale_units) * step, factor * delta / eps)]
    # Sparse vector, c = 2: threshold noise Delta / (epsilon / 2), query noise 2 c Delta / (epsilon / 2).
    return [
        (Fraction(mechanism.threshold_noise_scale_units) * step, delta / (eps / 2)),
        (Fraction(mechanism.query_noise_scale_units) * step, 4 * delta / (eps / 2)),
    ]


@pytest.mark.parametrize("epsilon", TINY_EPSILONS)
@pytest.mark.parametrize("sensitivity", SENSITIVITIES)
@pytest.mark.parametrize("kind", KINDS)
def test_noise_is_nominal_at_every_epsilon(kind, sensitivity, epsilon):
    """Built (no InternalError), with the effective sensitivity within 2^-20 of Delta and the noise at
    its nominal scale up to that rounding, never below it (the rate never above epsilon / (factor U)).

    Catches the noise-relative grid: effective sensitivity 1.9 Delta at epsilon = 1e-9, 32 Delta at
    1e-10, and an InternalError ("rate too small for the score grid") at 1e-15."""
    mechanism = build(kind, sensitivity, epsilon)
    effective = Fraction(mechanism.effective_sensitivity)
    assert Fraction(sensitivity) <= effective <= Fraction(sensitivity) * GRID_SLACK
    for actual, nominal in noise_scales(kind, mechanism, sensitivity, epsilon):
        # Never below the scale for the effective sensitivity (privacy), within 2^-20 (and the
        # float rounding of the rate or scale, 2^-52) above the nominal one (accuracy).
        assert actual >= nominal * effective / Fraction(sensitivity)
        assert actual <= nominal * GRID_SLACK * (1 + Fraction(1, 2**50))
    assert mechanism.guarantee.epsilon == epsilon


@pytest.mark.parametrize("epsilon", TINY_EPSILONS)
@pytest.mark.parametrize("kind", KINDS)
def test_releases_succeed_at_every_epsilon(kind, epsilon):
    """Every epsilon the constructor accepts releases: catches report-noisy-max and sparse vector
    failing at release with "scale: ... must be at most 2**40" (epsilon <= 1e-12), a scale the user
    never gave. Scores far apart (beyond the int64 gaps) and close together are both released."""
    mechanism = build(kind, 1.0, epsilon)
    rng = InsecureSeededRandom(3)
    spread = 1.0 / epsilon
    for scores in ([0.0, spread, 3 * spread, -5 * spread], [0.0, 1.0, 2.0, 1e300], [7.0, 7.0, 7.0, 7.0]):
        for _ in range(3):
            released = mechanism.release(scores, rng=rng)
            if kind == "sparse-vector":
                assert all(isinstance(flag, bool) for flag in released)
            else:
                assert released in range(4)


def textbook_exponential(scores: np.ndarray, epsilon: float, sensitivity: float) -> np.ndarray:
    logits = epsilon * (scores - scores.max()) / (2 * sensitivity)
    weights = np.exp(logits)
    return weights / weights.sum()


def textbook_permute_and_flip(scores: np.ndarray, epsilon: float, sensitivity: float) -> np.ndarray:
    """P(r) = p_r * integral_0^1 prod_{j != r} (1 - x p_j) dx, p = exp(epsilon (s - s*) / (2 Delta))."""
    accept = np.exp(epsilon * (scores - scores.max()) / (2 * sensitivity))
    law = []
    for r in range(accept.size):
        poly = np.polynomial.Polynomial([1.0])
        for j in range(accept.size):
            if j != r:
                poly = poly * np.polynomial.Polynomial([1.0, -accept[j]])
        integral = poly.integ()
        law.append(accept[r] * (integral(1.0) - integral(0.0)))
    return np.array(law)


@pytest.mark.parametrize("epsilon", [1e-10, 1e-12, 2.0**-60])
@pytest.mark.parametrize("sensitivity", [1.0, 1e6])
def test_exact_laws_match_the_textbook_laws(epsilon, sensitivity):
    """The exponential mechanism's and permute-and-flip's exact laws (on the snapped, clamped gaps)
    against the textbook laws at the stated epsilon; the score spread reaches 3 / epsilon Delta
    (gaps of about 2^60 to 2^82 grid units, beyond int64 for the smaller epsilons).

    Catches the old calibration: at epsilon = 1e-10 the laws were those of epsilon / 32."""
    scores = np.array([0.0, 1.0, 2.0, 3.0, 1e-3]) * sensitivity / epsilon
    exponential = build("exponential", sensitivity, epsilon)
    np.testing.assert_allclose(
        exponential.probabilities(scores), textbook_exponential(scores, epsilon, sensitivity), rtol=1e-5
    )
    flip = build("permute-and-flip", sensitivity, epsilon)
    np.testing.assert_allclose(
        flip.probabilities(scores), textbook_permute_and_flip(scores, epsilon, sensitivity), rtol=1e-5
    )


def chi_square_pvalue(counts: np.ndarray, probabilities: np.ndarray) -> float:
    return float(stats.chisquare(counts, probabilities * counts.sum()).pvalue)


@pytest.mark.statistical
def test_exponential_sampler_matches_the_textbook_law_at_tiny_epsilon():
    """Draws through the sampler release() uses, on Python-integer gaps (epsilon = 1e-12)."""
    epsilon = 1e-12
    scores = np.array([0.0, 1.0, 2.0, 3.0]) / epsilon
    mechanism = build("exponential", 1.0, epsilon)
    draws = sample_exponential(mechanism._gaps(scores), mechanism._rate, 50_000, InsecureSeededRandom(21))
    counts = np.bincount(draws, minlength=scores.size)
    assert chi_square_pvalue(counts, textbook_exponential(scores, epsilon, 1.0)) > FALSE_POSITIVE_RATE


@pytest.mark.statistical
def test_noisy_max_with_exponential_noise_is_permute_and_flip_in_law():
    """Report-noisy-max with exponential noise of scale 2 Delta / epsilon is permute-and-flip in law
    (Ding et al. 2021); at epsilon = 1e-10 its noise is 2^55 grid units, drawn in two exact parts.

    Catches the old grid: at effective sensitivity 32 Delta the winner's share fell from 0.76 to 0.35."""
    epsilon = 1e-10
    scores = np.array([0.0, 1.0, 2.0]) * 2 / epsilon  # 0, 1 and 2 noise scales apart
    mechanism = build("noisy-max", 1.0, epsilon)
    rng = InsecureSeededRandom(22)
    draws = np.array([mechanism.release(scores, rng=rng) for _ in range(1500)])
    counts = np.bincount(draws, minlength=scores.size)
    assert chi_square_pvalue(counts, textbook_permute_and_flip(scores, epsilon, 1.0)) > FALSE_POSITIVE_RATE


def binomial_pvalue(successes: int, trials: int, probability: float) -> float:
    return float(stats.binomtest(successes, trials, probability).pvalue)


@pytest.mark.statistical
def test_noisy_max_with_laplace_noise_matches_the_continuous_law():
    """Two candidates one noise scale b = 2 Delta / epsilon apart: the better wins with probability
    P(Z_0 - Z_1 < b) = 1 - e^-1 (1 + 1/2) / 2 for Laplace noise of scale b (epsilon = 1e-10).

    Catches the old grid: at 32 Delta the better won with probability about 0.52."""
    epsilon = 1e-10
    scale = 2.0 / epsilon
    mechanism = build("noisy-max-laplace", 1.0, epsilon)
    rng = InsecureSeededRandom(23)
    wins = sum(mechanism.release([0.0, scale], rng=rng) == 1 for _ in range(1000))
    expected = 1 - 0.5 * math.exp(-1.0) * 1.5
    assert binomial_pvalue(wins, 1000, expected) > FALSE_POSITIVE_RATE


@pytest.mark.statistical
def test_sparse_vector_matches_the_continuous_law():
    """One query a query-noise scale b_1 = 4 Delta / epsilon above the threshold (c = 1; the threshold
    noise has scale b_2 = 2 Delta / epsilon): it is reported above with probability
    1 - (b_1^2 e^-1 - b_2^2 e^-2) / (2 (b_1^2 - b_2^2)) (the difference of two Laplace laws), at
    epsilon = 1e-10 where both noises are drawn in two exact parts.

    Catches the old grid: at 64 Delta the answer was about a coin flip (0.51 instead of 0.78)."""
    epsilon = 1e-10
    mechanism = SparseVector(1.0, epsilon, threshold=0.0)
    b1, b2 = 4.0 / epsilon, 2.0 / epsilon
    rng = InsecureSeededRandom(24)
    above = sum(mechanism.release([b1], rng=rng) == [True] for _ in range(600))
    expected = 1 - (b1**2 * math.exp(-1.0) - b2**2 * math.exp(-2.0)) / (2 * (b1**2 - b2**2))
    assert binomial_pvalue(above, 600, expected) > FALSE_POSITIVE_RATE


@pytest.mark.statistical
@pytest.mark.parametrize("law", ["geometric", "discrete_laplace"])
def test_two_part_noise_has_the_exact_law(law, monkeypatch):
    """G = 2^j H + L with H geometric at scale 2^-j t and the bits of L independent: checked against
    the exact pmf at a small scale (the split threshold lowered from 2^36 to 2^2 so that the low bits
    are far from fair coins), and the mean at a real split scale (2^45)."""
    from dpkit.noise import _samplers  # the two-part samplers live in dpkit.noise

    sampler = _samplers.geometric_units if law == "geometric" else _samplers.discrete_laplace_units
    monkeypatch.setattr(_samplers, "_FAST_SCALE_BITS", 2)
    scale = 37.3  # j = 4: H at scale 2.33, four low bits
    draws = np.array(sampler(scale, 200_000, InsecureSeededRandom(25)), dtype=np.int64)
    q = math.exp(-1 / scale)
    support = np.arange(0, 400) if law == "geometric" else np.arange(-400, 401)
    pmf = (1 - q) * q ** np.abs(support) if law == "geometric" else (1 - q) / (1 + q) * q ** np.abs(support)
    top = 150  # pool the tails beyond +-150
    inside = np.abs(support) <= top
    counts = np.array([np.sum(draws == v) for v in support[inside]] + [np.sum(np.abs(draws) > top)])
    probabilities = np.append(pmf[inside], 1 - pmf[inside].sum())
    assert chi_square_pvalue(counts, probabilities) > FALSE_POSITIVE_RATE
    monkeypatch.undo()
    scale = 2.0**45 * 1.37
    draws = sampler(scale, 100_000, InsecureSeededRandom(26))
    values = np.array([float(v) for v in draws]) / scale
    q, one_minus_q = math.exp(-1 / scale), -math.expm1(-1 / scale)
    mean = q / one_minus_q / scale if law == "geometric" else 0.0  # E G = q / (1 - q); E X = 0
    variance = q if law == "geometric" else 2 * q  # times 1 / (1 - q)^2
    sd = math.sqrt(variance) / one_minus_q / scale
    assert abs(values.mean() - mean) <= Z_THRESHOLD * sd / math.sqrt(values.size)


def test_wide_gaps_are_exact():
    """Gaps beyond 2^52 grid units are exact Python integers, clamped at the cap, including scores
    whose float difference rounds or overflows."""
    from dpkit.mechanisms.exponential import gaps_below_max

    rng = np.random.default_rng(27)
    units = np.rint(np.concatenate([rng.uniform(-(2.0**70), 2.0**70, 40), [2.0**60 + 2**8, 1.0, -(2.0**90)]]))
    units = np.concatenate([units, [1e308, -1e308]])
    cap = 2**91 + 12345
    gaps = gaps_below_max(units, cap)
    top = max(int(u) for u in units)
    assert [int(g) for g in gaps] == [min(top - int(u), cap) for u in units]
    rows = gaps_below_max(np.stack([units[:20], units[20:40]]), 2**71)
    for row, source in zip(rows, (units[:20], units[20:40]), strict=True):
        best = max(int(u) for u in source)
        assert [int(g) for g in row] == [min(best - int(u), 2**71) for u in source]


def test_absurd_max_positives_refused_at_construction_by_name():
    """A query noise beyond 2^128 grid units is refused when built, naming max_positives and the
    largest allowed (not at release with an error about a sampler scale the user never gave)."""
    with pytest.raises(InvalidParameterError, match="must be at most") as caught:
        SparseVector(1.0, 2.0**-60, threshold=0.0, max_positives=2**60)
    assert caught.value.name == "max_positives"
    largest = int(caught.value.allowed.split("at most ")[1].split(" ")[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        built = SparseVector(1.0, 2.0**-60, threshold=0.0, max_positives=largest)
    # Two answers whatever the noise (max_positives >= 2 never halts early): any of the four outcomes.
    released = built.release([0.0, 1.0], rng=InsecureSeededRandom(28))
    assert len(released) == 2 and all(isinstance(answer, bool) for answer in released)
    with pytest.raises(InvalidParameterError):
        SparseVector(1.0, 2.0**-60, threshold=0.0, max_positives=largest + 1)
    # A large but sane c works at every epsilon, its noise at the nominal scale.
    many = SparseVector(1.0, 1e-3, threshold=0.0, max_positives=10**9)
    assert Fraction(many.effective_sensitivity) <= GRID_SLACK
    many.release([0.0, 5.0], rng=InsecureSeededRandom(29))
