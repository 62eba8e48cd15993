"""Adversarial use of the public dpkit.audit API: misuse is refused by name, and the reported lower
bound never exceeds the true epsilon more often than alpha (exact computation on small cases)."""

import math

import numpy as np
import pytest
from scipy.stats import binom

import dpkit
from dpkit.audit import estimate_epsilon, low_bit_test, on_grid
from dpkit.audit._estimate import _cp_lower, _cp_upper
from dpkit.noise import InsecureSeededRandom, discrete_laplace


def _coin(epsilon):
    """Randomized response on a bit: the truth with probability e^eps / (1 + e^eps)."""

    def release(bit, rng, size):
        from dpkit.noise import bernoulli_exp

        lie = bernoulli_exp(math.log1p(math.exp(epsilon)), size, rng=rng)  # P(lie) = 1/(1 + e^eps)
        return np.where(lie, 1 - bit, bit)

    return release


def _scripted(outputs_a, outputs_b):
    """A 'release' that returns fixed outputs: the first call gets outputs_a, the second outputs_b."""
    calls = iter([np.asarray(outputs_a), np.asarray(outputs_b)])

    def release(value, rng, size):
        return next(calls)

    return release


# -- misuse ---------------------------------------------------------------------------------------


def test_a_mechanism_class_instead_of_an_instance_is_refused():
    with pytest.raises(dpkit.InvalidParameterError, match="^release.*instance"):
        estimate_epsilon(dpkit.Laplace, 0, 1, samples=100, rng=InsecureSeededRandom(0))
    with pytest.raises(dpkit.InvalidParameterError, match="^release.*instance"):
        low_bit_test(dpkit.Laplace, samples=100, rng=InsecureSeededRandom(0))


@pytest.mark.parametrize(
    "events",
    [
        [],
        [("x", 5)],
        [lambda y: y > 0],
        "output >= 1",
        [("x", lambda y: y > 0, "extra")],
    ],
    ids=["empty", "not-callable", "bare-predicate", "string", "triple"],
)
def test_malformed_events_are_refused_before_any_draw(events):
    drawn = []

    def release(value, rng, size):
        drawn.append(size)
        return np.zeros(size)

    with pytest.raises(dpkit.InvalidParameterError, match="^events"):
        estimate_epsilon(release, 0, 1, samples=200, vectorized=True, events=events, rng=InsecureSeededRandom(0))
    assert drawn == []


@pytest.mark.parametrize(
    "predicate",
    [lambda y: True, lambda y: np.ones(3, dtype=bool), lambda y: y * 2, lambda y: None],
    ids=["scalar", "wrong-length", "not-boolean", "none"],
)
def test_an_event_predicate_must_return_one_boolean_per_sample(predicate):
    with pytest.raises(dpkit.InvalidParameterError, match="^events"):
        estimate_epsilon(
            _coin(1.0), 0, 1, samples=200, vectorized=True, events=[("bad", predicate)], rng=InsecureSeededRandom(0)
        )


@pytest.mark.parametrize("output", [None, object()])
def test_outputs_that_cannot_be_compared_are_refused(output):
    with pytest.raises(dpkit.InvalidParameterError, match="^release"):
        estimate_epsilon(lambda x, rng: output, 0, 1, samples=100, rng=InsecureSeededRandom(0))


def test_a_label_event_found_on_the_selection_half_is_evaluated_as_that_label():
    # Evaluation half of b: a label "a" unseen in selection, sorting before "m". The chosen event is
    # a set of labels ({label <= 'm'} or {label == 'm'}, ...), named by label, whatever the codes.
    outputs_a = ["m"] * 200
    outputs_b = ["p"] * 100 + ["a"] * 100
    result = estimate_epsilon(
        _scripted(outputs_a, outputs_b), 0, 1, samples=200, vectorized=True, rng=InsecureSeededRandom(0)
    )
    assert result.event in {"output <= 'm'", "output == 'm'", "output >= 'p'", "output == 'p'"}
    a_hits_all = result.p_a_interval[1] == 1.0
    b_hits_all = result.p_b_interval[1] == 1.0
    if result.event == "output <= 'm'":  # "a" <= "m": both halves of b hit it in evaluation
        assert a_hits_all and b_hits_all and result.epsilon_lower_bound == 0.0


def test_label_events_are_described_by_label():
    result = estimate_epsilon(
        lambda x, rng, size: np.where(_coin(2.0)(x, rng, size) == 1, "yes", "no"),
        0,
        1,
        samples=2_000,
        vectorized=True,
        rng=InsecureSeededRandom(1),
    )
    assert "'yes'" in result.event or "'no'" in result.event
    assert 0 < result.epsilon_lower_bound <= 2.0


def test_user_events_see_the_raw_labels():
    seen = []

    def is_yes(labels):
        seen.append(labels.dtype.kind)
        return labels == "yes"

    result = estimate_epsilon(
        lambda x, rng, size: np.where(_coin(2.0)(x, rng, size) == 1, "yes", "no"),
        0,
        1,
        samples=2_000,
        vectorized=True,
        events=[("said yes", is_yes)],
        rng=InsecureSeededRandom(1),
    )
    assert set(seen) == {"U"}
    assert result.event == "said yes" and 0 < result.epsilon_lower_bound <= 2.0


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_low_bit_test_refuses_non_finite_outputs(bad):
    with pytest.raises(dpkit.InvalidParameterError, match="^release.*finite"):
        low_bit_test(lambda x, rng, size: np.full(size, bad), samples=100, vectorized=True, rng=InsecureSeededRandom(0))


def test_low_bit_test_refuses_non_numeric_outputs():
    with pytest.raises(dpkit.InvalidParameterError, match="^release"):
        low_bit_test(lambda x, rng, size: np.array(["a"] * size), samples=100, vectorized=True)


def test_on_grid_refuses_non_numbers():
    with pytest.raises(dpkit.InvalidParameterError, match="^outputs"):
        on_grid(["a"], 0)
    assert on_grid(np.array([1, 2, 3]), 0)
    assert not on_grid([np.nan], 0)


# -- the reported lower bound never exceeds the true epsilon more often than alpha --------------------


@pytest.mark.parametrize("trials", [1, 3, 10, 50, 200])
@pytest.mark.parametrize("alpha", [0.5, 0.05, 1e-3, 1e-6])
def test_false_alarm_probability_is_at_most_alpha_exactly(trials, alpha):
    # For a fixed event S (the selection half is independent of the evaluation half), with
    # P[M(a) in S] = delta + e^eps P[M(b) in S] (the tightest (eps, delta) pair), the probability
    # that ln((p_a_low - delta) / p_b_high) > eps, summed exactly over both binomial counts.
    counts = np.arange(trials + 1, dtype=np.float64)
    for epsilon in (0.0, 0.5, 2.0):
        for delta in (0.0, 0.05):
            for p_b in (0.001, 0.1, 0.3):
                p_a = delta + math.exp(epsilon) * p_b
                if p_a > 1:
                    continue
                low = _cp_lower(counts, trials, alpha / 2) - delta
                high = _cp_upper(counts, trials, alpha / 2)
                with np.errstate(divide="ignore"):
                    bound = np.where(low[:, None] > 0, np.log(np.maximum(low[:, None], 1e-300) / high[None, :]), 0.0)
                law = binom.pmf(counts, trials, p_a)[:, None] * binom.pmf(counts, trials, p_b)[None, :]
                assert law[bound > epsilon].sum() <= alpha


def test_reported_bound_is_the_one_its_intervals_give():
    result = estimate_epsilon(_coin(1.0), 0, 1, samples=4_000, vectorized=True, rng=InsecureSeededRandom(2))
    low, high = (
        (result.p_a_interval[0], result.p_b_interval[1])
        if result.direction == "a>b"
        else (result.p_b_interval[0], result.p_a_interval[1])
    )
    assert result.epsilon_lower_bound == max(0.0, math.log(low / high))
    assert 0 < result.epsilon_lower_bound <= 1.0


def test_identical_laws_give_no_evidence():
    # eps = 0: the same law on both inputs; the bound should be 0 for every seed tried
    for seed in range(5):
        result = estimate_epsilon(
            lambda x, rng, size: discrete_laplace(1.0, size, rng=rng),
            0,
            1,
            samples=2_000,
            vectorized=True,
            alpha=0.05,
            rng=InsecureSeededRandom(seed),
        )
        assert result.epsilon_lower_bound == 0.0


def test_on_grid_reads_the_bits_at_every_scale():
    """Each answer equals the exact one (Fraction): scaling by 2^-exponent overflowed (1e300 on the
    grid of 2^-60 was reported off the grid, with a RuntimeWarning) or underflowed."""
    from fractions import Fraction

    generator = np.random.default_rng(7)
    values = [1e300, 2.0**1000, 3.0, 1.0, 0.0, -0.0, 2.0**-1074, 5 * 2.0**-1074, 0.1, -1.75, 1.7976931348623157e308]
    values += [
        float(x) * 2.0 ** int(e)
        for x, e in zip(generator.integers(-(10**6), 10**6, 200), generator.integers(-1050, 950, 200), strict=True)
    ]
    for value in values:
        if value == 0.0:
            continue
        exact = Fraction(value)  # numerator / 2^j: the value's lowest set bit is 2^(trailing zeros - j)
        exact_power = (exact.numerator & -exact.numerator).bit_length() - exact.denominator.bit_length()
        for exponent in (exact_power - 1, exact_power, exact_power + 1, -2000, -60, 0, 2000):
            expected = (Fraction(value) / Fraction(2) ** exponent).denominator == 1
            assert on_grid([value], exponent) is expected, (value, exponent)
    assert on_grid([0.0, -0.0], 5000) is True
