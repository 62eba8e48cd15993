"""Privacy at risk: a probabilistic privacy level of the Laplace mechanism, and its cost.

Reference implementation of Dandekar, Basu & Bressan, "Differential Privacy at Risk: Bridging
Randomness and Privacy Budget", PoPETs 2021(1) (short French version: Dandekar, Basu, Senellart
& Bressan, BDA 2020). Two names are kept apart: the **confidence** ``c(epsilon)`` and the
**risk** ``1 - c(epsilon)``; every function says which it returns, and of what. The paper's
(:func:`laplace_confidence`, :func:`laplace_risk`) are about the noise statistic
``T = (epsilon0 / Delta) |eta_1 + ... + eta_k|``, ``P[T <= epsilon | T <= epsilon0]``: they are not
the probability that the realised privacy loss is at most ``epsilon``, which the ``*_loss_confidence``
functions and :func:`confidence_from_accountant` return.

>>> from dpkit.risk import laplace_confidence, epsilon_at_risk, CostModel
>>> round(laplace_confidence(0.3, 0.5), 4)
0.6587
>>> round(epsilon_at_risk(1 - 0.6587, 0.5), 3)
0.3
"""

from dpkit.risk._composition import COMPOSITION_METHODS, composition
from dpkit.risk._cost import CostModel
from dpkit.risk._laplace import abs_laplace_sum_cdf, epsilon_at_risk, laplace_confidence, laplace_risk
from dpkit.risk._pld_confidence import confidence_from_accountant, gaussian_loss_confidence, laplace_loss_confidence
from dpkit.risk._report import cli_main, gdpr_example, report
from dpkit.risk._sensitivity import (
    SensitivityDistribution,
    coupled_confidence,
    dkw_confidence,
    dkw_sample_size,
    paper_coupled_confidence,
    sampled_sensitivity,
)

__all__ = [
    "COMPOSITION_METHODS",
    "CostModel",
    "SensitivityDistribution",
    "abs_laplace_sum_cdf",
    "cli_main",
    "composition",
    "confidence_from_accountant",
    "coupled_confidence",
    "dkw_confidence",
    "dkw_sample_size",
    "epsilon_at_risk",
    "gaussian_loss_confidence",
    "gdpr_example",
    "laplace_confidence",
    "laplace_loss_confidence",
    "laplace_risk",
    "paper_coupled_confidence",
    "report",
    "sampled_sensitivity",
]
