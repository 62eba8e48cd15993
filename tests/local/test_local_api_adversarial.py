"""Adversarial use of the public dpkit.local API: malformed inputs and reports are refused by name.

Reports reach a collector from clients (over a network, from storage), so an estimator must refuse
report data outside the randomizer's output domain instead of decoding it into a wrong answer.
"""

import itertools
import math

import numpy as np
import pandas as pd
import pytest

import dpkit
from dpkit.local import (
    KRR,
    OLH,
    OUE,
    SUE,
    DuchiMechanism,
    HadamardResponse,
    HeavyHitters,
    LocalReports,
    PiecewiseMechanism,
    samples_needed,
)
from dpkit.noise import InsecureSeededRandom

ORACLES = [KRR, SUE, OUE, OLH, HadamardResponse]


def _forged(oracle, data):
    """Reports with the right tag but arbitrary data (what a collector builds from received messages)."""
    name = oracle.name
    parameters = oracle._parameters() if hasattr(oracle, "_parameters") else (oracle.epsilon,)
    return LocalReports(name, parameters, np.asarray(data))


# -- values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", ORACLES)
def test_ragged_values_are_refused_by_name(cls):
    with pytest.raises(dpkit.InvalidParameterError, match="^values"):
        cls(4, 1.0).randomize([[0, 1], [2]], rng=InsecureSeededRandom(0))


@pytest.mark.parametrize("cls", ORACLES)
def test_two_dimensional_values_are_refused(cls):
    # A 2-d input would give a person one report per column, each spending epsilon.
    with pytest.raises(dpkit.InvalidParameterError, match="(?s)^values.*1-d"):
        cls(4, 1.0).randomize(np.array([[0, 1], [2, 3]]), rng=InsecureSeededRandom(0))
    with pytest.raises(dpkit.InvalidParameterError, match="(?s)^values.*1-d"):
        cls(4, 1.0).randomize(pd.DataFrame({"a": [0, 1], "b": [2, 3]}), rng=InsecureSeededRandom(0))


@pytest.mark.parametrize("cls", [DuchiMechanism, PiecewiseMechanism])
def test_mean_mechanisms_refuse_two_dimensional_and_ragged_values(cls):
    with pytest.raises(dpkit.InvalidParameterError, match="(?s)^values.*1-d"):
        cls(1.0).randomize(np.zeros((2, 2)), rng=InsecureSeededRandom(0))
    with pytest.raises(dpkit.InvalidParameterError, match="^values"):
        cls(1.0).randomize([[0.1], [0.2, 0.3]], rng=InsecureSeededRandom(0))


def test_heavy_hitters_refuse_two_dimensional_values():
    with pytest.raises(dpkit.InvalidParameterError, match="(?s)^values.*1-d"):
        HeavyHitters(8, 1.0).randomize(np.zeros((2, 2), dtype=np.int64), rng=InsecureSeededRandom(0))


@pytest.mark.parametrize("cls", ORACLES)
def test_scalars_series_and_empty_lists_are_accepted(cls):
    oracle = cls(4, 1.0)
    assert len(oracle.randomize(np.int64(2), rng=InsecureSeededRandom(0))) == 1
    assert len(oracle.randomize(np.array(2), rng=InsecureSeededRandom(0))) == 1
    assert len(oracle.randomize(pd.Series([0, 1, 3]), rng=InsecureSeededRandom(0))) == 3
    # an empty batch is an empty batch (as for the mean mechanisms), not "non-integer values"
    assert len(oracle.randomize([], rng=InsecureSeededRandom(0))) == 0


def test_heavy_hitters_accept_an_empty_list():
    assert len(HeavyHitters(8, 1.0).randomize([], rng=InsecureSeededRandom(0))) == 0


@pytest.mark.parametrize("cls", ORACLES)
@pytest.mark.parametrize("bad", ["3", True, [np.nan, 2.0], float("nan"), [-1.0], 11])
def test_variance_true_count_must_be_numbers(cls, bad):
    with pytest.raises(dpkit.InvalidParameterError, match="^true_count"):
        cls(4, 1.0).variance(10, bad)


@pytest.mark.parametrize("cls", [DuchiMechanism, PiecewiseMechanism])
def test_report_variance_refuses_values_outside_the_domain(cls):
    mechanism = cls(1.0)
    for bad in (2.0, -1.5, float("nan"), "0.5"):
        with pytest.raises(dpkit.InvalidParameterError, match="^value"):
            mechanism.report_variance(bad)
    assert np.shape(mechanism.report_variance(np.array([0.0, 1.0]))) == (2,)


def test_duchi_plus_probability_refuses_values_outside_the_domain():
    with pytest.raises(dpkit.InvalidParameterError, match="^value"):
        DuchiMechanism(1.0).plus_probability(2.0)


# -- reports --------------------------------------------------------------------------------------


def test_local_reports_data_is_an_array():
    reports = LocalReports("KRR", (4, 1.0), [0, 1, 2])
    assert isinstance(reports.data, np.ndarray)
    assert KRR(4, 1.0).estimate(reports).shape == (4,)
    with pytest.raises(dpkit.InvalidParameterError, match="^data"):
        LocalReports("KRR", (4, 1.0), [[0, 1], [2]])


@pytest.mark.parametrize(
    "data",
    [[0, 7], [0, -1], [0.0, 1.5], [True, False], [0.0, 1.0]],
    ids=["above-k", "negative", "fractional", "bool", "float"],
)
def test_krr_refuses_reports_outside_its_output_domain(data):
    with pytest.raises(dpkit.InvalidParameterError, match="^reports"):
        KRR(4, 1.0).estimate(_forged(KRR(4, 1.0), data))


@pytest.mark.parametrize(
    "data",
    [[0, 9], [0, 8], [0, -1], [0.0, 1.0]],
    ids=["far-above", "size", "negative", "float"],
)
def test_hadamard_refuses_reports_outside_its_output_domain(data):
    oracle = HadamardResponse(4, 1.0)  # reports lie in 0..7
    with pytest.raises(dpkit.InvalidParameterError, match="^reports"):
        oracle.estimate(_forged(oracle, data))


@pytest.mark.parametrize("cls", [SUE, OUE])
@pytest.mark.parametrize(
    "row",
    [[2, 0, 0, 0], [0.5, 0, 0, 0], [np.nan, 0, 0, 0], [-1, 0, 0, 0]],
    ids=["two", "half", "nan", "negative"],
)
def test_unary_encodings_refuse_non_bit_reports(cls, row):
    oracle = cls(4, 1.0)
    with pytest.raises(dpkit.InvalidParameterError, match="^reports"):
        oracle.estimate(_forged(oracle, [row]))


@pytest.mark.parametrize("cls", [SUE, OUE])
def test_unary_encodings_accept_zero_one_integers(cls):
    oracle = cls(4, 1.0)
    reports = oracle.randomize(np.array([0, 1, 2]), rng=InsecureSeededRandom(3))
    as_int = _forged(oracle, reports.data.astype(np.int64))
    assert np.array_equal(oracle.estimate(as_int), oracle.estimate(reports))


@pytest.mark.parametrize(
    "row",
    [[0, 1, 1], [5, 1, 1], [1, 5, 1], [1, -1, 1], [1, 1, 4], [1, 1, -1], [1.5, 1, 1]],
    ids=["a=0", "a=P", "b=P", "b<0", "bucket=g", "bucket<0", "float"],
)
def test_olh_refuses_reports_outside_its_output_domain(row):
    oracle = OLH(4, 1.0)  # P = 5, g = 4
    assert (oracle.prime, oracle.g) == (5, 4)
    with pytest.raises(dpkit.InvalidParameterError, match="^reports"):
        oracle.estimate(_forged(oracle, [row]))


def test_olh_a_zero_would_support_every_category():
    # Why the check matters: with a = 0 the hash is constant, so one forged report would add
    # 1/(p - q) to every category at once.
    oracle = OLH(4, 1.0)
    assert np.all(oracle.hash(0, 1, np.arange(4)) == oracle.hash(0, 1, 0))


@pytest.mark.parametrize("value", [0.3, 5.0, np.nan, np.inf])
def test_duchi_refuses_reports_that_are_not_plus_or_minus_b(value):
    mechanism = DuchiMechanism(1.0)
    with pytest.raises(dpkit.InvalidParameterError, match="^reports"):
        mechanism.estimate(_forged(mechanism, [mechanism.bound, value]))


def test_duchi_accepts_its_own_reports_and_their_float_round_trip():
    mechanism = DuchiMechanism(1.0)
    reports = mechanism.randomize(np.array([0.5, -1.0, 0.0]), rng=InsecureSeededRandom(0))
    round_trip = _forged(mechanism, [float(repr(float(x))) for x in reports.data])
    assert mechanism.estimate(round_trip) == mechanism.estimate(reports)


@pytest.mark.parametrize("value", [1e9, -1e9, np.nan, np.inf, "a"])
def test_piecewise_refuses_reports_outside_its_range(value):
    mechanism = PiecewiseMechanism(1.0)
    with pytest.raises(dpkit.InvalidParameterError, match="^reports"):
        mechanism.estimate(_forged(mechanism, np.array([0.0, value], dtype=object).tolist()))


def _heavy_hitter_reports():
    hitters = HeavyHitters(8, 2.0, first_bits=4, bits_per_level=2)
    values = np.random.default_rng(0).integers(0, 256, 600)
    return hitters, hitters.randomize(values, rng=InsecureSeededRandom(0))


@pytest.mark.parametrize(
    "row",
    [[9, 0, 0, 0, 0], [-1, 0, 0, 0, 0], [0, -5, 0, 0, 0], [0, 65537, 0, 0, 0], [0, 0, 0, 0, 99]],
    ids=["level-high", "level-negative", "seed-negative", "seed-P", "bucket-g"],
)
def test_heavy_hitters_refuse_reports_outside_their_output_domain(row):
    hitters, reports = _heavy_hitter_reports()
    forged = LocalReports(reports.oracle, reports.parameters, np.vstack([reports.data, [row]]))
    with pytest.raises(dpkit.InvalidParameterError, match="^reports"):
        hitters.estimate(forged)


@pytest.mark.parametrize("threshold", [float("nan"), "5", True])
def test_heavy_hitters_threshold_must_be_a_number(threshold):
    hitters, reports = _heavy_hitter_reports()
    with pytest.raises(dpkit.InvalidParameterError, match="^threshold"):
        hitters.estimate(reports, top_k=3, threshold=threshold)


def test_heavy_hitters_name_first_bits_when_it_is_too_large():
    with pytest.raises(dpkit.InvalidParameterError, match="^first_bits"):
        HeavyHitters(32, 1.0, first_bits=20)


def test_concatenate_refuses_non_reports_and_mismatched_shapes():
    reports = KRR(4, 1.0).randomize([1], rng=InsecureSeededRandom(0))
    with pytest.raises(dpkit.InvalidParameterError, match="^parts"):
        LocalReports.concatenate([reports, 2])
    with pytest.raises(dpkit.InvalidParameterError, match="^parts"):
        LocalReports.concatenate([reports, LocalReports("KRR", (4, 1.0), np.array([[1, 2]]))])
    assert len(LocalReports.concatenate((reports, reports))) == 2


def test_samples_needed_accepts_numpy_integers():
    assert samples_needed(np.int64(5), 1.0, 0.1) == samples_needed(5, 1.0, 0.1)


# -- exact unbiasedness and variance (enumerating each randomizer's output law) --------------------


def _every_report(oracle):
    columns = oracle.transition_matrix().shape[1]
    if isinstance(oracle, KRR | HadamardResponse):
        return [np.array([y]) for y in range(columns)]
    if isinstance(oracle, SUE | OUE):
        return [((np.array([y]) >> np.arange(oracle.k)) & 1).astype(bool)[None, :] for y in range(columns)]
    return [
        np.array([[a, b, j]])
        for a, b, j in itertools.product(range(1, oracle.prime), range(oracle.prime), range(oracle.g))
    ]


@pytest.mark.parametrize(
    "oracle",
    [
        KRR(3, 0.7),
        SUE(3, 1.0),
        OUE(4, 0.5),
        OLH(5, 1.0),
        OLH(7, 0.3),
        HadamardResponse(3, 1.0),
        HadamardResponse(5, 0.4),
    ],
    ids=repr,
)
def test_estimator_is_exactly_unbiased_with_its_stated_variance(oracle):
    law = oracle.transition_matrix()  # (k values, every report)
    single = np.array([oracle.estimate(_forged(oracle, report)) for report in _every_report(oracle)])
    mean = law @ single
    assert np.allclose(mean, np.eye(oracle.k), rtol=0, atol=1e-12)
    variance = law @ single**2 - mean**2
    stated = np.array([[oracle.variance(1, float(v == x)) for v in range(oracle.k)] for x in range(oracle.k)])
    assert np.allclose(variance, stated, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 4.0])
def test_duchi_is_exactly_unbiased(epsilon):
    mechanism = DuchiMechanism(epsilon)
    for x in (-1.0, -0.3, 0.0, 0.7, 1.0):
        plus = mechanism.plus_probability(x)
        mean = mechanism.bound * (2 * plus - 1)
        assert math.isclose(mean, x, rel_tol=1e-12, abs_tol=1e-12)
        variance = mechanism.bound**2 - mean**2
        assert math.isclose(variance, float(mechanism.report_variance(x)), rel_tol=1e-12)


def test_choose_never_recommends_an_oracle_that_cannot_run() -> None:
    """choose(k=2**40) recommended OUE, whose k-bit messages (and k-count estimate) cannot be held:
    unary encodings are not offered above 2**24 categories, and k above 2**31 is refused by name."""
    from dpkit.local import choose

    large = choose(2**25, 1.0, 10_000)
    assert large.oracle_name in ("OLH", "HadamardResponse") and "OUE" not in large.variances
    assert "k-bit messages too long" in large.reason
    with pytest.raises(dpkit.InvalidParameterError, match="HeavyHitters"):
        choose(2**40, 1.0, 10_000)
    assert choose(1024, 1.0, 10_000).oracle_name == "OLH"  # ordinary domains unchanged
