"""Samplers at ordinary and extreme parameters: exact laws, draw counts, typed errors, sources.

Every statistical test uses a fixed seed (InsecureSeededRandom, tests only) and a threshold
derived from an explicit false-positive rate ALPHA = 1e-6 (exact chi-square / binomial
quantiles), so a correct sampler fails with probability <= 1e-6 per test and the seeded
run is deterministic. Termination is checked by counting words drawn, never by timing.
"""

import math
import os
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from dpkit import InvalidParameterError
from dpkit.noise import (
    MAX_SCALE,
    InsecureSeededRandom,
    SecureRandom,
    bernoulli_exp,
    bernoulli_logistic,
    bernoulli_rational,
    discrete_gaussian,
    discrete_laplace,
    discrete_laplace_units,
    geometric,
    grid_exponent,
    resolve_source,
    snap_to_grid,
    uniform_integers,
)

ALPHA = 1e-6


class CountingSource:
    """A seeded test source that counts the 64-bit words drawn."""

    secure = False

    def __init__(self, seed, scripted=()):
        self.inner = InsecureSeededRandom(seed)
        self.scripted = [np.uint64(w) for w in scripted]
        self.words = 0

    def uint64(self, size):
        self.words += max(size, 0)
        head, self.scripted = self.scripted[:size], self.scripted[size:]
        return np.concatenate([np.array(head, dtype=np.uint64), self.inner.uint64(size - len(head))])


def _chi_square_ok(samples, pmf):
    """Pearson chi-square on the support cells with expected count >= 5 plus one tail cell."""
    values, counts = np.unique(samples, return_counts=True)
    observed = dict(zip(values.tolist(), counts.tolist(), strict=True))
    n = len(samples)
    cells, expected = [], []
    for x, p in pmf.items():
        if n * p >= 5:
            cells.append(observed.get(x, 0))
            expected.append(n * p)
    tail_expected = n - sum(expected)
    tail_observed = n - sum(cells)
    if tail_expected >= 5:
        cells.append(tail_observed)
        expected.append(tail_expected)
    else:  # too small for the chi-square approximation: merge with the last cell
        cells[-1] += tail_observed
        expected[-1] += tail_expected
    statistic = sum((o - e) ** 2 / e for o, e in zip(cells, expected, strict=True))
    return statistic, float(stats.chi2.isf(ALPHA, len(cells) - 1))


def _binomial_ok(successes, n, p):
    """Two-sided exact binomial acceptance region at level ALPHA."""
    low = stats.binom.ppf(ALPHA / 2, n, p)
    high = stats.binom.isf(ALPHA / 2, n, p)
    return low <= successes <= high, (low, high)


def _laplace_pmf(scale, radius):
    mpmath.mp.prec = 120
    q = mpmath.exp(-1 / mpmath.mpf(scale))
    return {x: float((1 - q) / (1 + q) * q ** abs(x)) for x in range(-radius, radius + 1)}


@pytest.mark.parametrize("scale", [0.3, 1.5, 7.0])
def test_discrete_laplace_law_chi_square(scale):
    """Catches discrete_laplace deviating from (1-q)/(1+q) q^|x| (sign bias, off-by-one count, wrong c)."""
    samples = discrete_laplace(scale, 200_000, rng=InsecureSeededRandom(11))
    statistic, limit = _chi_square_ok(samples, _laplace_pmf(scale, int(60 * scale) + 10))
    assert statistic <= limit, (statistic, limit)


@pytest.mark.parametrize("scale", [0.25, 2.0])
def test_geometric_law_chi_square(scale):
    """Catches geometric deviating from (1-q) q^m (e.g. counting thresholds from m = 0 or a wrong q)."""
    mpmath.mp.prec = 120
    q = mpmath.exp(-1 / mpmath.mpf(scale))
    pmf = {m: float((1 - q) * q**m) for m in range(int(80 * scale) + 10)}
    samples = geometric(scale, 200_000, rng=InsecureSeededRandom(12))
    assert samples.min() >= 0
    statistic, limit = _chi_square_ok(samples, pmf)
    assert statistic <= limit, (statistic, limit)


@pytest.mark.parametrize("sigma", [0.4, 1.0, 3.7])
def test_discrete_gaussian_law_chi_square(sigma):
    """Catches a wrong acceptance exponent or Laplace scale in discrete_gaussian (law != exp(-x^2/2s^2)/Z)."""
    mpmath.mp.prec = 120
    radius = int(12 * sigma) + 5
    weights = {x: mpmath.exp(-(mpmath.mpf(x) ** 2) / (2 * mpmath.mpf(sigma) ** 2)) for x in range(-radius, radius + 1)}
    total = mpmath.fsum(weights.values())
    pmf = {x: float(w / total) for x, w in weights.items()}
    samples = discrete_gaussian(sigma, 150_000, rng=InsecureSeededRandom(13))
    statistic, limit = _chi_square_ok(samples, pmf)
    assert statistic <= limit, (statistic, limit)


@pytest.mark.parametrize(
    "p",
    [
        Fraction(1, 3),
        Fraction(10**40 + 7, 3 * 10**40 + 1),  # huge numerator / denominator
        Fraction(2**64 - 1, 2**65),  # one ulp of the 64-bit cut below 1/2
        Fraction(999_999, 1_000_000),
    ],
)
def test_bernoulli_rational_frequency(p):
    """Catches bernoulli_rational rounding p through a float or a truncated cut (exact binomial band)."""
    n = 400_000
    hits = int(bernoulli_rational(p, n, rng=InsecureSeededRandom(14)).sum())
    ok, band = _binomial_ok(hits, n, float(p))
    assert ok, (hits, band)


def test_bernoulli_rational_near_zero_and_one():
    """Catches a float shortcut at extreme p: p = 1e-30 gives no success in 1e6 draws (P(any) < 1e-23).

    Likewise p = 1 - 1e-30 gives no failure.
    """
    tiny = Fraction(1, 10**30)
    assert not bernoulli_rational(tiny, 1_000_000, rng=InsecureSeededRandom(15)).any()
    assert bernoulli_rational(1 - tiny, 1_000_000, rng=InsecureSeededRandom(16)).all()
    # A subnormal-sized dyadic p, as a string: still exact, still zero successes.
    assert not bernoulli_rational("1/" + str(2**1074), 100_000, rng=InsecureSeededRandom(17)).any()


def test_bernoulli_rational_dyadic_tie_is_decided_exactly():
    """With p = k / 2^64 and a first word equal to k, U >= p always: catches '<=' instead of '<' at the cut."""
    k = 2**63 + 12345
    p = Fraction(k, 2**64)
    for seed in range(8):
        assert not bernoulli_rational(p, 1, rng=CountingSource(seed, scripted=[k]))[0]


@pytest.mark.parametrize("x", [0.5, 3.0, 20.0])
def test_bernoulli_exp_frequency(x):
    """Catches bernoulli_exp deciding U < exp(-x) with the wrong sign or a wrong margin (exact binomial band)."""
    n = 400_000
    hits = int(bernoulli_exp(x, n, rng=InsecureSeededRandom(18)).sum())
    ok, band = _binomial_ok(hits, n, math.exp(-x))
    assert ok, (hits, band)


def test_bernoulli_exp_subnormal_threshold_exact_path():
    """U's first 53 bits zero, exp(-x) subnormal (x = 740): the exact path agrees with a direct comparison."""
    for seed in range(6):
        source = CountingSource(seed, scripted=[0])
        result = bool(bernoulli_exp(740.0, 1, rng=source)[0])
        replay = InsecureSeededRandom(seed)
        u = Fraction(int(replay.uint64(1)[0]), 2**117)  # U = 0.(53 zeros)(next 64 bits)...
        mpmath.mp.prec = 200
        exact = mpmath.mpf(u.numerator) / u.denominator < mpmath.exp(-740)
        assert result == bool(exact)  # exp(-740) ~ 2^-1067 < 2^-117: always False
        assert source.words == 2  # one extension decides it


def test_bernoulli_exp_array_and_zero_size():
    """Catches per-element x being ignored (array input) and crashes at size 0 / 1."""
    x = np.array([0.0, 1e-300, 50.0, 1e4])
    out = bernoulli_exp(np.tile(x, 2000), rng=InsecureSeededRandom(19)).reshape(2000, 4)
    assert out[:, 0].all() and out[:, 1].all()  # P(fail) = 1 - exp(-1e-300) ~ 1e-300
    assert not out[:, 2].any() and not out[:, 3].any()  # exp(-50) ~ 2e-22
    assert bernoulli_exp(1.0, 0).size == 0
    assert bernoulli_exp(1.0, 1).shape == (1,)


def test_bernoulli_logistic_frequency():
    """Catches bernoulli_logistic using a wrong threshold 1 / (1 + r e^-eps) (k-ary RR keep coin)."""
    n = 400_000
    hits = int(bernoulli_logistic(Fraction(1), Fraction(3, 2), n, rng=InsecureSeededRandom(20)).sum())
    ok, band = _binomial_ok(hits, n, 1 / (1 + 1.5 * math.exp(-1)))
    assert ok, (hits, band)


def test_uniform_integers_law_and_draws():
    """Catches modulo bias (non-multiple acceptance limit) and unbounded rejection at the largest upper."""
    samples = uniform_integers(7, 210_000, rng=InsecureSeededRandom(21))
    statistic, limit = _chi_square_ok(samples, {v: 1 / 7 for v in range(7)})
    assert statistic <= limit
    # upper = 2^62 + ... worst accepted acceptance is >= 3/4: at most a few extra rounds.
    for upper in (2**62, 2**61 + 1, 3):
        source = CountingSource(22)
        values = uniform_integers(upper, 100_000, rng=source)
        assert values.min() >= 0 and values.max() < upper
        assert source.words <= 100_000 * 4 // 3 + 10_000
    assert uniform_integers(1, 5).tolist() == [0] * 5


@pytest.mark.parametrize("scale", [1e-300, 1e-3, 1.0, 1e6, 2.0**30])
def test_laplace_and_geometric_one_word_per_draw(scale):
    """Catches extra words on the fast path (scales tiny to 2^30): 10^5 draws should cost ~10^5 words."""
    for sampler in (discrete_laplace, geometric):
        source = CountingSource(23)
        out = sampler(scale, 100_000, rng=source)
        assert out.shape == (100_000,)
        # Exact-path extensions are rare (~scale * 2^-43 per draw): allow 1 % slack.
        assert source.words <= 101_000, (sampler.__name__, source.words)
        if scale <= 1e-3:
            assert not out.any()  # P(|X| >= 1) <= 2 e^{-1000}


@pytest.mark.parametrize("sigma", [1e-3, 0.5, 1.0, 10.0, 2.0**20, MAX_SCALE / 2])
def test_discrete_gaussian_draws_per_sample_bounded(sigma):
    """Catches a rejection loop with acceptance collapsing at extreme sigma: <= 6 words per output on average."""
    source = CountingSource(24)
    out = discrete_gaussian(sigma, 20_000, rng=source)
    assert out.shape == (20_000,)
    assert source.words <= 6 * 20_000, source.words


def test_discrete_gaussian_large_sigma_moments():
    """At sigma = 2^30 the sample variance must match sigma^2 (chi-square band on the variance, level 1e-6)."""
    sigma = 2.0**30
    n = 20_000
    out = discrete_gaussian(sigma, n, rng=InsecureSeededRandom(25)).astype(np.float64)
    statistic = float(np.sum(out**2)) / sigma**2  # ~ chi2(n) for a Gaussian this wide
    assert stats.chi2.ppf(ALPHA / 2, n) <= statistic <= stats.chi2.isf(ALPHA / 2, n)


def test_laplace_size_one_million():
    """Catches batching bugs at size 10^6 (> _BATCH boundary alignment) and a wrong sign split."""
    out = discrete_laplace(2.0, 1_000_000, rng=InsecureSeededRandom(26))
    positive = int((out > 0).sum())
    negative = int((out < 0).sum())
    ok, band = _binomial_ok(positive, positive + negative, 0.5)
    assert ok, (positive, negative, band)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: discrete_laplace(1.0, -1), "size"),
        (lambda: discrete_laplace(1.0, 2.5), "size"),
        (lambda: geometric(1.0, True), "size"),
        (lambda: discrete_gaussian(1.0, "3"), "size"),
        (lambda: bernoulli_exp(np.array([0.1, 0.2]), 2), "size"),
        (lambda: bernoulli_exp(float("inf"), 2), "x"),
        (lambda: bernoulli_exp(-1e-300, 2), "x"),
        (lambda: bernoulli_rational("1/0", 2), "p"),
        (lambda: bernoulli_rational(Fraction(-1, 10**40), 2), "p"),
        (lambda: bernoulli_rational(1 + Fraction(1, 10**40), 2), "p"),
        (lambda: bernoulli_rational(np.float64(0.5), 2), "p"),
        (lambda: uniform_integers(2**62 + 1, 2), "upper"),
        (lambda: uniform_integers(True, 2), "upper"),
        (lambda: uniform_integers(-3, 2), "upper"),
        (lambda: bernoulli_logistic(-1, 1, 2), "epsilon"),
        (lambda: bernoulli_logistic(float("nan"), 1, 2), "epsilon"),
        (lambda: bernoulli_logistic(1, 0, 2), "ratio"),
        (lambda: bernoulli_logistic(1, True, 2), "ratio"),
        (lambda: InsecureSeededRandom("7"), "seed"),
        (lambda: InsecureSeededRandom(True), "seed"),
        (lambda: grid_exponent(0.0, 1.0), "sensitivity"),
        (lambda: grid_exponent(1.0, float("inf")), "noise_scale"),
        (lambda: grid_exponent(1.0, 1.0, 0), "dimension"),
        (lambda: discrete_laplace(MAX_SCALE * (1 + 2**-52), 1, constant_time=True), "scale"),
        (lambda: discrete_gaussian(5e-324 * 0, 1), "sigma"),
    ],
)
def test_bad_input_is_typed_and_named(call, name):
    """Catches bad input slipping through or raising a bare TypeError/ValueError without the parameter's name."""
    with pytest.raises(InvalidParameterError) as info:
        call()
    assert info.value.name == name


@pytest.mark.parametrize("scale", [5e-324, 1e-300, MAX_SCALE])
def test_extreme_accepted_scales_run(scale):
    """The smallest positive float and MAX_SCALE itself are accepted by Laplace and geometric (no error, right size)."""
    assert discrete_laplace(scale, 1000, rng=InsecureSeededRandom(27)).shape == (1000,)
    assert geometric(scale, 1000, rng=InsecureSeededRandom(28)).shape == (1000,)


def test_default_source_reads_os_csprng(monkeypatch):
    """Catches the default source not being os.urandom (e.g. a numpy generator) and SecureRandom taking a seed."""
    calls = []
    real = os.urandom

    def spy(n):
        calls.append(n)
        return real(n)

    monkeypatch.setattr(os, "urandom", spy)
    out = discrete_laplace(1.0, 10)
    assert out.shape == (10,) and calls and sum(calls) >= 80
    assert isinstance(resolve_source(None), SecureRandom) and resolve_source(None).secure
    with pytest.raises(TypeError):
        SecureRandom(1)  # type: ignore[call-arg]
    assert SecureRandom().uint64(0).size == 0 and SecureRandom().uint64(-3).size == 0


def test_seeded_streams_differ_by_seed_and_are_flagged():
    """Catches a seed being ignored (all seeds give one stream) or the insecure source claiming to be secure."""
    a = InsecureSeededRandom(1).uint64(4)
    b = InsecureSeededRandom(2).uint64(4)
    assert not np.array_equal(a, b)
    assert InsecureSeededRandom(np.int64(3)).secure is False


@pytest.mark.parametrize("sensitivity", [5e-324, 1e-300, 1.0, 1e300])
@pytest.mark.parametrize("noise_scale", [1e-300, 1.0, 2.0**40, 1e300])
def test_grid_exponent_bounds(sensitivity, noise_scale):
    """Catches a grid coarser than needed or noise above 2^30 grid units, down to subnormal inputs."""
    k = grid_exponent(sensitivity, noise_scale)
    assert noise_scale / 2.0**k <= 2.0**30 or math.ldexp(noise_scale, -k) <= 2.0**30
    assert k >= math.floor(math.log2(sensitivity)) - 20
    if math.log2(noise_scale) - 30 <= math.log2(sensitivity) - 20:
        assert k == math.floor(math.log2(sensitivity)) - 20


def test_snap_to_grid_subnormal_and_huge():
    """Catches snap_to_grid losing exactness on a subnormal grid (2^-1074) or rounding huge values on a coarse grid."""
    values = np.array([5e-324, 3e-323, -1e-310, 1e-300, -0.0])
    assert np.array_equal(snap_to_grid(values, -1074), values)  # every float is a multiple of 2^-1074
    coarse = snap_to_grid(np.array([1e300, 3.0, 5e-324]), 10)
    assert coarse[1] == 0.0 and coarse[2] == 0.0
    assert coarse[0] == math.ldexp(round(math.ldexp(1e300, -10)), 10)


@pytest.mark.parametrize("exponent", [-1074, -1017, -60, -20, 0, 30, 900, 960])
def test_grid_value_limit_keeps_every_release_finite(exponent):
    """At the limit, the value in grid units and its sum with any int64 noise are finite; just above, refused.

    Catches the old behaviour: Laplace(1e-300, 1).release(1e10) returned inf (the value overflowed
    in grid units) instead of refusing it.
    """
    from dpkit.noise._grid import grid_value_limit

    limit = grid_value_limit(exponent)
    assert limit > 0
    with np.errstate(over="raise"):
        snapped = snap_to_grid(np.array([limit, -limit]), exponent)
        extreme = math.ldexp(float(2**63 - 1), exponent)
        assert np.all(np.isfinite(snapped + extreme)) and np.all(np.isfinite(snapped - extreme))
    with pytest.raises(InvalidParameterError, match="value"):
        snap_to_grid(np.array([math.nextafter(limit, math.inf)]), exponent)


def test_releases_refuse_overflowing_values_before_drawing_noise():
    from dpkit.mechanisms import Gaussian, Laplace, Staircase

    tiny = [Laplace(1e-300, 1.0), Gaussian(1e-300, 1.0, 1e-6), Staircase(1e-300, 1.0)]
    for mechanism in tiny:
        source = CountingSource(0)
        with pytest.raises(InvalidParameterError, match="value"):
            mechanism.release(1e10, rng=source)
        assert source.words == 0
        assert mechanism.release(1.0, rng=InsecureSeededRandom(0)) == 1.0  # noise of ~1e-300 vanishes
    # Noise of scale 1e305 (beyond 2**1007) could overflow whatever the value: refused when the
    # mechanism is built, naming epsilon (it used to be built, then refuse every release).
    with pytest.raises(InvalidParameterError, match=r"2\*\*1007") as caught:
        Laplace(1e300, 1e-5)
    assert caught.value.name == "epsilon"
    ordinary = Laplace(1.0, 1.0)
    assert np.isfinite(ordinary.release(1e300, rng=InsecureSeededRandom(0)))


@pytest.mark.parametrize("t", [0.3, 1.0, 7.0, 1e3, 1e6, 2.0**30, 1.09e12, 2.0**40])
def test_discrete_laplace_log_c_has_full_relative_accuracy(t):
    """ln c, c = 2 / (1 + e^{-1/t}), to 1e-15 relative against mpmath. Catches ln 2 - log1p(e^{-1/t}),
    which kept ~1e-16 absolute of a value ~1/(2t) (1.8e-4 relative at t = 1.09e12): the float count
    t (ln c - ln U) then erred by ~1e-4 while the sampler's margin is ~6e-14, so draws next to a
    threshold took the wrong answer (law error ~2e-10 per draw at t = 2^30, 2e-7 near MAX_SCALE)."""
    from dpkit.noise._samplers import _discrete_laplace_constant

    log_c, _ = _discrete_laplace_constant(t)
    with mpmath.workdps(50):
        exact = mpmath.log(2) - mpmath.log(1 + mpmath.exp(-1 / mpmath.mpf(t)))
        assert abs(log_c - exact) / exact < 1e-15


def test_discrete_laplace_sends_a_draw_next_to_a_threshold_to_the_exact_path():
    """t = 1.09e12, a first word whose 53-bit prefix straddles the threshold c q (the exact count y of
    the prefix's interval is [0.99991, 1.00003]): with all-zero continuation bits U is below c q, so
    |X| = 1. The cancelled ln c gave float y [0.99978, 0.99991] and answered 0 with no exact check."""

    from dpkit.noise import discrete_laplace

    word = (9007199254736860 << 11) | 0  # sign bit 0
    value = discrete_laplace(1089998810988.2351, 1, rng=_Scripted([word], then_zeros=True))
    assert abs(int(value[0])) == 1


class _Scripted:
    """A test source: the listed 64-bit words first, then zeros or a seeded stream."""

    secure = False

    def __init__(self, words, *, then_zeros=False):
        self._words = [np.uint64(w) for w in words]
        self._zeros = then_zeros
        self._rest = InsecureSeededRandom(0)

    def uint64(self, size):
        head, self._words = self._words[:size], self._words[size:]
        tail = np.zeros(size - len(head), dtype=np.uint64) if self._zeros else self._rest.uint64(size - len(head))
        return np.concatenate([np.array(head, dtype=np.uint64), tail])


@pytest.mark.parametrize(
    ("sampler", "scale", "most"),
    [
        ("geometric", 1e3, 40),
        ("geometric", 1e9, 80),
        ("discrete_laplace", 1e9, 80),
        ("discrete_laplace", 1e-300, 2),
        ("geometric", 1e-300, 2),
        ("bernoulli_exp", 1e300, 2),
        ("bernoulli_exp", 1e8, 2),
    ],
)
def test_a_zero_53_bit_prefix_is_decided_in_few_exact_comparisons(sampler, scale, most, monkeypatch):
    """U's first 53 bits all zero (probability 2^-53): the exact path must not scan linearly (37,000
    comparisons at scale 1e3, a hang at 1e9) nor convert e^-(10^300) to a Fraction (a hang at scale
    1e-300, or bernoulli_exp(1e300)). Counts the exact threshold evaluations."""
    from dpkit.noise import _samplers

    calls = [0]
    original = _samplers.exp_neg_interval

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(_samplers, "exp_neg_interval", counted)
    function = getattr(_samplers, sampler)
    function(scale, 1, rng=_Scripted([0]))
    assert calls[0] <= most, calls[0]


def test_constant_time_draws_with_a_zero_prefix_stay_in_the_support():
    """Constant-time mode reads U from two words (53 + 53 bits). With the first prefix 0 the count
    must come from the second word (U = s 2^-106: 143 at scale 2 for s = 5, i.e. floor(2 (106 ln 2 -
    ln 5))); with both 0 it must be capped, not cast from infinity to INT64_MIN (a negative sample)."""
    from dpkit.noise import discrete_laplace, geometric

    assert geometric(2.0, 1, rng=_Scripted([0, 5 << 11], then_zeros=True), constant_time=True)[0] == 143
    for sampler in (geometric, discrete_laplace):
        value = int(sampler(2.0, 1, rng=_Scripted([0, 0], then_zeros=True), constant_time=True)[0])
        assert 0 <= value <= 2**62


def test_grid_exponent_accepts_the_smallest_noise_scales():
    """noise_scale / 2^30 underflows to 0 below ~5e-315; log2(0) raised a bare ValueError."""
    from dpkit.noise import grid_exponent

    assert grid_exponent(1.0, 5e-324) == grid_exponent(1.0, 1.0)  # the sensitivity's grid decides
    assert grid_exponent(1e-300, 5e-324) == math.floor(math.log2(1e-300)) - 20


def test_bernoulli_logistic_decides_the_top_word_exactly():
    """p = 1 / (1 + e^-50) is within 2^-64 of 1, so the top word 2^64 - 1 (U in [1 - 2^-64, 1)) must draw
    more bits: followed by zero bits, U = 1 - 2^-64 < p and the trial succeeds. Catches the old cut at
    min(ceil(hi 2^64), 2^64 - 1), which answered False for that word without looking further."""
    top = 2**64 - 1
    assert bool(bernoulli_logistic(50, 1, 1, rng=_Scripted([top], then_zeros=True))[0])
    # Followed by all-one bits, U is within 2^-2560 of 1, above p: the trial fails.
    assert not bool(bernoulli_logistic(50, 1, 1, rng=_Scripted([top] * 40))[0])


@pytest.mark.parametrize("sigma", [1e-170, 1e-300, 5e-324])
def test_discrete_gaussian_below_the_square_root_of_the_smallest_float_is_zero_without_warnings(sigma):
    """sigma^2 underflows to 0 there: the acceptance step divided by it (0/0 at Y = 0, four
    RuntimeWarnings on stderr); P(X != 0) is below e^-1e300, so every draw is 0."""
    import warnings

    from dpkit.noise import InsecureSeededRandom, discrete_gaussian

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        draws = discrete_gaussian(sigma, 2000, rng=InsecureSeededRandom(3))
    assert draws.tolist() == [0] * 2000


def test_discrete_gaussian_samples_up_to_the_largest_sigma():
    """Found by the selection QA helper: sigma in (2**40 - 1, 2**40] was accepted, then its proposal
    scale floor(sigma) + 1 = 2**40 + 1 was refused by the discrete Laplace sampler ('scale: got ...')."""
    from dpkit import DiscreteGaussian
    from dpkit.noise import InsecureSeededRandom, discrete_gaussian

    draws = discrete_gaussian(2.0**40, 4000, rng=InsecureSeededRandom(2))
    # |mean| of 4000 draws of sd 2^40: beyond 5.3 standard errors has probability < 1e-6
    assert abs(float(np.mean(draws))) < 5.3 * 2.0**40 / math.sqrt(4000)
    assert 0.9 < float(np.std(draws)) / 2.0**40 < 1.1
    assert isinstance(DiscreteGaussian(1, sigma=2**40).release(0, rng=InsecureSeededRandom(3)), int)


@pytest.mark.parametrize("scale", [MAX_SCALE * (1 + 2**-52), 2.0**50, 1e300])
def test_discrete_laplace_above_max_scale_is_the_any_scale_sampler(scale):
    """Above 2**40 (not constant time) discrete_laplace draws discrete_laplace_units' law (the same
    draws from the same seed), as discrete_gaussian serves any sigma; it used to refuse."""
    draws = discrete_laplace(scale, 64, rng=InsecureSeededRandom(31))
    expected = discrete_laplace_units(scale, 64, rng=InsecureSeededRandom(31))
    assert [int(v) for v in draws] == [int(v) for v in expected]
    with pytest.raises(InvalidParameterError, match="constant_time=True"):
        discrete_laplace(scale, 1, constant_time=True)
