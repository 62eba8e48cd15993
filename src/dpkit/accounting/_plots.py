"""Plots for the hypothesis-testing view: trade-off curves, privacy loss distributions, epsilon vs steps.

matplotlib is optional (``pip install dpkit[plot]``) and imported only when a plot is drawn. Figures are
built without pyplot, on the non-interactive Agg canvas, so plotting works on servers and in CI
and never touches a user's pyplot state.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from dpkit._errors import InvalidParameterError

__all__ = ["plot_epsilon_vs_steps", "plot_privacy_loss_distribution", "plot_tradeoff"]


def _new_figure(width: float, height: float) -> tuple[Any, Any]:
    """A Figure with one Axes, built without pyplot: no global state, no GUI, Agg rendering."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("dpkit plotting needs matplotlib: pip install dpkit[plot]") from exc
    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    return figure, figure.subplots()


def _xy(label: str, pair: Any) -> tuple[Any, Any]:
    try:
        x, y = pair
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(label, pair, "must be a pair (x values, y values)") from exc
    x_array, y_array = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x_array.ndim != 1 or x_array.shape != y_array.shape or x_array.size == 0:
        raise InvalidParameterError(label, pair, "must hold two 1-D arrays of the same, non-zero length")
    return x_array, y_array


def _finish(figure: Any, path: str | Path | None) -> Any:
    figure.tight_layout()
    if path is not None:
        figure.savefig(Path(path))
    return figure


def plot_tradeoff(curves: Mapping[str, tuple[ArrayLike, ArrayLike]], path: str | Path | None = None) -> Any:
    """Draw trade-off curves beta(alpha), one per label, with the no-privacy diagonal 1 - alpha.

    Returns the matplotlib Figure; saves it to ``path`` when given.

    >>> import pytest; _ = pytest.importorskip("matplotlib")
    >>> from dpkit.accounting._hypothesis import gaussian_tradeoff
    >>> alpha = np.linspace(0, 1, 101)
    >>> figure = plot_tradeoff({"1-GDP": (alpha, gaussian_tradeoff(1.0, alpha))})
    >>> len(figure.axes)
    1
    """
    checked = {str(label): _xy(str(label), pair) for label, pair in curves.items()}
    figure, axes = _new_figure(5, 5)
    diagonal = np.linspace(0.0, 1.0, 2)
    axes.plot(diagonal, 1 - diagonal, linestyle=":", color="grey", label="perfect privacy")
    for label, (alpha, beta) in checked.items():
        axes.plot(alpha, beta, label=label)
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1)
    axes.set_aspect("equal")
    axes.set_xlabel("type I error α")
    axes.set_ylabel("type II error β")
    axes.set_title("Trade-off curves")
    axes.legend()
    return _finish(figure, path)


def plot_privacy_loss_distribution(losses: ArrayLike, probabilities: ArrayLike, path: str | Path | None = None) -> Any:
    """Draw a discrete privacy loss distribution (loss values and their probabilities) as stems.

    >>> import pytest; _ = pytest.importorskip("matplotlib")
    >>> figure = plot_privacy_loss_distribution([-1.0, 1.0], [0.25, 0.75])
    >>> figure.axes[0].get_xlabel()
    'privacy loss L = log(dP/dQ)'
    """
    loss, probability = _xy("losses/probabilities", (losses, probabilities))
    if not np.all(np.isfinite(loss)) or np.any(probability < 0) or not np.all(np.isfinite(probability)):
        raise InvalidParameterError("probabilities", probabilities, "must be finite and >= 0, at finite losses")
    figure, axes = _new_figure(6, 4)
    axes.vlines(loss, 0, probability, linewidth=1)
    axes.plot(loss, probability, "o", markersize=2)
    axes.set_xlabel("privacy loss L = log(dP/dQ)")
    axes.set_ylabel("probability")
    axes.set_title("Privacy loss distribution")
    return _finish(figure, path)


def plot_epsilon_vs_steps(results: Mapping[str, tuple[ArrayLike, ArrayLike]], path: str | Path | None = None) -> Any:
    """Draw epsilon against the number of steps, one line per accountant (log-scaled steps).

    >>> import pytest; _ = pytest.importorskip("matplotlib")
    >>> figure = plot_epsilon_vs_steps({"basic": ([1, 10, 100], [0.1, 1.0, 10.0])})
    >>> figure.axes[0].get_xscale()
    'log'
    """
    checked = {str(label): _xy(str(label), pair) for label, pair in results.items()}
    figure, axes = _new_figure(6, 4)
    for label, (steps, epsilons) in checked.items():
        axes.plot(steps, epsilons, marker=".", label=label)
    axes.set_xscale("log")
    axes.set_xlabel("steps")
    axes.set_ylabel("ε")
    axes.set_title("ε as a function of steps")
    axes.legend()
    return _finish(figure, path)
