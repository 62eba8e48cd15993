"""Means of numeric values in [-1, 1] under eps-LDP: Duchi et al.'s mechanism and the piecewise mechanism.

Both release one value per person whose expectation is that person's value, so the average of the
reports is an unbiased estimate of the mean, with variance sum_i Var(report_i) / n^2.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_integer, check_probability
from dpkit.local._coins import bernoulli_dyadic
from dpkit.local._frequency import LocalReports, _normal_quantile
from dpkit.local._randomizer import LocalRandomizer
from dpkit.mechanisms.randomized_response import bernoulli_keep
from dpkit.noise import RandomSource, bernoulli_logistic, resolve_source, uniform_integers

__all__ = ["DuchiMechanism", "PiecewiseMechanism"]


class _MeanMechanism(LocalRandomizer, ABC):
    name: ClassVar[str] = "mean"

    def _values(self, values: Any) -> NDArray[np.float64]:
        array = np.asarray(values)
        allowed = "must be real numbers in [-1, 1]"
        if array.dtype.kind not in "iuf" or isinstance(values, bool | np.bool_):
            raise InvalidParameterError("values", values, allowed)
        array = array.astype(np.float64).reshape(-1)
        if not np.all(np.isfinite(array)) or np.any(np.abs(array) > 1):
            raise InvalidParameterError("values", values, allowed)
        return array

    def _reports(self, reports: Any) -> NDArray[np.float64]:
        if not isinstance(reports, LocalReports) or reports.oracle != self.name:
            raise InvalidParameterError("reports", type(reports).__name__, f"must be LocalReports from {self!r}")
        if reports.parameters != (self._epsilon,):
            raise InvalidParameterError("reports", reports.parameters, f"must come from epsilon={self._epsilon}")
        if len(reports) == 0 or reports.data.ndim != 1:
            raise InvalidParameterError("reports", reports.data.shape, "must be a non-empty 1-d array")
        return np.asarray(reports.data, dtype=np.float64)

    def randomize(self, values: Any, rng: RandomSource | None = None) -> LocalReports:
        """One eps-LDP report per value in [-1, 1]."""
        data = self._randomize(self._values(values), resolve_source(rng))
        return LocalReports(self.name, (self._epsilon,), data)

    @abstractmethod
    def _randomize(self, values: NDArray[np.float64], source: RandomSource) -> NDArray[np.float64]:
        raise NotImplementedError

    def estimate(self, reports: LocalReports) -> float:
        """Unbiased estimate of the mean of the reporters' values."""
        return float(np.mean(self._reports(reports)))

    @abstractmethod
    def report_variance(self, value: Any) -> Any:
        """Var(report | value): the variance of one report."""
        raise NotImplementedError

    def variance(self, n: int, mean_square: float | None = None) -> float:
        """Variance of the mean estimate from n reports: worst case over values in [-1, 1], or exact
        for inputs whose mean of x^2 is ``mean_square`` (both mechanisms' variance is affine in x^2)."""
        m = check_integer("n", n, minimum=1)
        if mean_square is None:
            return max(float(self.report_variance(0.0)), float(self.report_variance(1.0))) / m
        s = check_probability("mean_square", mean_square)
        v0, v1 = float(self.report_variance(0.0)), float(self.report_variance(1.0))
        return (v0 + (v1 - v0) * s) / m

    def confidence_interval(self, reports: LocalReports, alpha: float = 0.05) -> tuple[float, float]:
        """Normal-approximation (1 - alpha) interval on the mean, with the worst-case variance."""
        level = check_probability("alpha", alpha, open_low=True, open_high=True)
        estimate = self.estimate(reports)
        half = _normal_quantile(level) * math.sqrt(self.variance(len(reports)))
        return estimate - half, estimate + half

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self._epsilon})"


class DuchiMechanism(_MeanMechanism):
    """Duchi, Jordan & Wainwright (2018, "Minimax optimal procedures for locally private estimation",
    JASA), one-dimensional: report +B or -B, B = (e^eps + 1)/(e^eps - 1), with
    P(+B | x) = 1/2 + x (e^eps - 1) / (2 (e^eps + 1)), so E = x and Var = B^2 - x^2.

    Exact draw: with t = (1 + x)/2, Z ~ Bernoulli(t) (a dyadic rational) and a coin
    W ~ Bernoulli(e^eps/(e^eps + 1)); report +B iff Z = W, which has exactly the law above.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> duchi = DuchiMechanism(1.0)
    >>> reports = duchi.randomize(np.array([0.5, -1.0, 0.0]), rng=InsecureSeededRandom(0))
    >>> np.round(reports.data, 3).tolist()
    [2.164, 2.164, -2.164]
    >>> round(duchi.variance(1000), 6)
    0.004683
    """

    name = "DuchiMechanism"

    @property
    def bound(self) -> float:
        """B = (e^eps + 1) / (e^eps - 1)."""
        return (math.exp(self._epsilon) + 1) / math.expm1(self._epsilon)

    def plus_probability(self, value: Any) -> Any:
        x = np.asarray(value, dtype=np.float64)
        return 0.5 + x * math.expm1(self._epsilon) / (2 * (math.exp(self._epsilon) + 1))

    def _randomize(self, values: NDArray[np.float64], source: RandomSource) -> NDArray[np.float64]:
        z = bernoulli_dyadic((1.0 + values) / 2.0, source)  # (1 + x)/2 is exact in floating point
        w = bernoulli_keep(self._epsilon_exact, 2, values.size, rng=source)
        return np.where(z == w, self.bound, -self.bound)

    def report_variance(self, value: Any) -> Any:
        x = np.asarray(value, dtype=np.float64)
        return self.bound**2 - x * x


class PiecewiseMechanism(_MeanMechanism):
    """The piecewise mechanism (Wang, Xiao, Yang, Zhao, Hui, Shin, Shin & Yu 2019, "Collecting and
    Analyzing Multidimensional Data with Local Differential Privacy", ICDE, Sec. III-B), on a grid.

    Continuous PM: output in [-C, C], C = (e^(eps/2) + 1)/(e^(eps/2) - 1), density e^eps times higher
    on a window of length C - 1 that slides with x than elsewhere. Released here on a PUBLIC GRID:
    [-C, C] is cut into N = 2^20 cells of width 2C/N and the report is a cell midpoint
    -C + (i + 1/2) 2C/N. The window is M = round(N / (e^(eps/2) + 1)) cells starting at cell s, where
    s = floor(s*) + Bernoulli(frac(s*)), s* = (1 + x)/2 (N - M) (so E[s] = s*, linear in x). Given s,
    P(cell i) is proportional to e^eps inside the window and 1 outside: the window is chosen with
    probability 1/(1 + ((N - M)/M) e^-eps) (exact coin), then a cell uniformly inside (or outside) it
    (exact uniform integers). Every cell's probability is e^eps or 1 times a common factor for every
    x and s, so the ratio is at most e^eps. E[report | x] is affine in x; the estimator inverts it,
    so it is unbiased, with variance close to the continuous PM's
    x^2/(e^(eps/2) - 1) + (e^(eps/2) + 3)/(3 (e^(eps/2) - 1)^2).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> pm = PiecewiseMechanism(1.0)
    >>> reports = pm.randomize(np.array([0.5, -1.0, 0.0]), rng=InsecureSeededRandom(0))
    >>> np.round(reports.data, 3).tolist()
    [1.815, 3.519, -1.556]
    >>> round(pm.variance(1000), 5)
    0.00522
    """

    name = "PiecewiseMechanism"
    cells: ClassVar[int] = 2**20

    def __init__(self, epsilon: float) -> None:
        super().__init__(epsilon)
        half = math.exp(self._epsilon / 2)
        self._c = (half + 1) / (half - 1)
        n = self.cells
        self._window = min(n - 1, max(1, round(n / (half + 1))))
        self._ratio = Fraction(n - self._window, self._window)
        e = math.exp(self._epsilon)
        self._inside = 1.0 / (1.0 + float(self._ratio) / e)
        # E[cell midpoint (in cell units) | s] = slope * s + offset (module docstring).
        m, big = self._window, n
        pi = self._inside
        self._slope_s = pi - (1 - pi) * m / (big - m)
        self._offset_s = pi * m / 2 + (1 - pi) * (big * big / 2 - m * m / 2) / (big - m)

    @property
    def bound(self) -> float:
        """C: reports lie in [-C, C]."""
        return self._c

    @property
    def grid_step(self) -> float:
        return 2 * self._c / self.cells

    def _to_value(self, cell_midpoint: Any) -> Any:
        return -self._c + np.asarray(cell_midpoint) * self.grid_step

    def _randomize(self, values: NDArray[np.float64], source: RandomSource) -> NDArray[np.float64]:
        n, m, count = self.cells, self._window, values.size
        target = (1.0 + values) / 2.0 * (n - m)
        base = np.floor(target)
        start = base.astype(np.int64) + bernoulli_dyadic(target - base, source)
        inside = bernoulli_logistic(self._epsilon_exact, self._ratio, count, rng=source)
        within = uniform_integers(m, count, rng=source)
        outside = uniform_integers(n - m, count, rng=source)
        outside = np.where(outside < start, outside, outside + m)  # skip the window
        cell = np.where(inside, start + within, outside)
        return np.asarray(self._to_value(cell + 0.5), dtype=np.float64)

    def _mean_given_value(self, x: Any) -> Any:
        s = (1.0 + np.asarray(x, dtype=np.float64)) / 2.0 * (self.cells - self._window)
        return self._to_value(self._slope_s * s + self._offset_s)

    def estimate(self, reports: LocalReports) -> float:
        """Unbiased mean estimate: invert E[report | x] = alpha x + beta."""
        mean = float(np.mean(self._reports(reports)))
        beta = float(self._mean_given_value(0.0))
        alpha = float(self._mean_given_value(1.0)) - beta
        return (mean - beta) / alpha

    def report_variance(self, value: Any) -> Any:
        """Var of one *debiased* report given x, exact for the grid law."""
        x = np.asarray(value, dtype=np.float64)
        n, m, pi = self.cells, self._window, self._inside
        target = (1.0 + x) / 2.0 * (n - m)
        base = np.floor(target)
        frac = target - base

        def square_sum(lo: Any, hi: Any) -> Any:  # sum of (i + 1/2)^2 for i in [lo, hi)
            def f(t: Any) -> Any:
                return t**3 / 3 - t / 12  # sum_{i < t} (i + 1/2)^2 = t^3/3 - t/12

            return f(hi) - f(lo)

        def second_moment(s: Any) -> Any:
            inside = square_sum(s, s + m) / m
            outside = (square_sum(0, n) - square_sum(s, s + m)) / (n - m)
            return pi * inside + (1 - pi) * outside

        def first_moment(s: Any) -> Any:
            return self._slope_s * s + self._offset_s

        e2 = (1 - frac) * second_moment(base) + frac * second_moment(base + 1)
        e1 = (1 - frac) * first_moment(base) + frac * first_moment(base + 1)
        variance_cells = e2 - e1 * e1
        alpha = float(self._mean_given_value(1.0) - self._mean_given_value(0.0))
        return variance_cells * self.grid_step**2 / alpha**2

    def continuous_variance(self, value: Any) -> Any:
        """The continuous PM's variance (Wang et al. 2019, Lemma 1), for comparison."""
        x = np.asarray(value, dtype=np.float64)
        h = math.exp(self._epsilon / 2)
        return x * x / (h - 1) + (h + 3) / (3 * (h - 1) ** 2)
