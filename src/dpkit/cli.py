"""The ``dpkit`` command: a thin layer over the public API.

``dpkit demo`` runs the demo job; ``dpkit sample --mechanism discrete_laplace --scale 2 -n 5``
prints secure noise draws (useful to check an installation); ``dpkit account dpsgd
--sampling-rate 0.0043 --noise-multiplier 1.1 --steps 14063 --delta 1e-5`` prints what every
accountant says about a workload, side by side (``--json`` for scripts, ``--plot FILE.png`` for
the trade-off curve); ``dpkit budget --ledger FILE`` prints a persistent ledger's budget, what
was spent, what remains and every debit (``--json`` for scripts; ``--delta D`` also shows a zCDP
or approximate zCDP budget, and the spend, as (epsilon, delta)-DP); ``dpkit query DATA "SQL"
--privacy-unit COL --bounds COL=LO:HI --epsilon E [--delta D] [--ledger FILE]`` runs one private
query over a Parquet or CSV file (see ``dpkit query --help``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpkit.accounting import PrivacyAccountant

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``dpkit`` console script."""
    parser = argparse.ArgumentParser(prog="dpkit", description="Differentially private data analysis.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run the demo job: private queries with the engine on the embedded sample table")
    sample = commands.add_parser("sample", help="print secure noise draws")
    sample.add_argument("--mechanism", choices=["discrete_laplace", "discrete_gaussian", "geometric"], required=True)
    sample.add_argument("--scale", type=float, required=True, help="scale (sigma for the discrete Gaussian)")
    sample.add_argument("-n", type=int, default=10)
    account = commands.add_parser("account", help="epsilon (or delta) of a workload, by every accountant")
    account.add_argument("workload", choices=["dpsgd", "gaussian", "laplace"])
    account.add_argument("--noise-multiplier", type=float, required=True, help="noise scale / sensitivity")
    account.add_argument(
        "--sampling-rate", type=float, default=None, help="Poisson sampling rate (dpsgd only; default 1)"
    )
    account.add_argument("--steps", type=int, default=1, help="number of releases / steps")
    target = account.add_mutually_exclusive_group()
    target.add_argument("--delta", type=float, default=None, help="report epsilon at this delta (default 1e-5)")
    target.add_argument("--epsilon", type=float, default=None, help="report delta at this epsilon")
    account.add_argument("--json", action="store_true", help="print JSON")
    account.add_argument("--plot", metavar="FILE.png", help="draw the trade-off curve (needs matplotlib)")
    budget = commands.add_parser("budget", help="a persistent ledger's budget, spending and debits")
    budget.add_argument("--ledger", metavar="FILE", required=True, help="the ledger file (never created)")
    budget.add_argument(
        "--anchor", metavar="FILE", help="the ledger's anchor file: refuse a ledger rolled back behind it"
    )
    budget.add_argument("--json", action="store_true", help="print JSON")
    budget.add_argument(
        "--delta",
        type=float,
        help="also show a zCDP or approximate zCDP budget and spend as (epsilon, delta)-DP, converting at this delta",
    )
    from dpkit.engine._cli import add_query_parser

    add_query_parser(commands)
    commands.add_parser("risk", help="privacy at risk and the cost model (see `dpkit risk --help`)", add_help=False)
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "risk":
        return _guarded(_risk, argv[1:])
    args = parser.parse_args(argv)
    return _guarded(_run, args)


def _guarded(command: Callable[[Any], int], args: Any) -> int:
    """Run ``command``: a dpkit error is one line on stderr and exit status 2; a closed pipe
    (``dpkit sample -n 1000000 | head``) ends the command quietly instead of a traceback."""
    from dpkit import DPError

    try:
        return command(args)
    except DPError as error:
        print(f"dpkit: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        try:  # Python would flush stdout again at exit and fail once more: point it at devnull
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 1


def _risk(argv: list[str]) -> int:
    from dpkit.risk import cli_main

    try:
        return cli_main(argv)
    except ImportError as error:
        print(f"dpkit risk: --plot needs matplotlib (pip install dpkit[plot]): {error}", file=sys.stderr)
    except OSError as error:
        if isinstance(error, BrokenPipeError):
            raise
        print(f"dpkit risk: --plot: cannot write the plot: {error}", file=sys.stderr)
    return 2


#: Draws per call of ``dpkit sample``: any -n streams in bounded memory.
_SAMPLE_CHUNK = 1 << 16


def _sample(args: argparse.Namespace) -> int:
    from dpkit import InvalidParameterError, noise
    from dpkit._validation import check_integer

    total = check_integer("-n", args.n, minimum=0)
    sampler = getattr(noise, args.mechanism)
    try:
        sampler(args.scale, 0)  # checks --scale before anything is printed
    except InvalidParameterError as error:  # named as the option (the sampler says 'scale' or 'sigma')
        raise InvalidParameterError("--scale", args.scale, error.allowed) from None
    written = 0
    while written < total:
        size = min(_SAMPLE_CHUNK, total - written)
        draws = sampler(args.scale, size)
        sys.stdout.write((" " if written else "") + " ".join(str(int(x)) for x in draws))
        written += size
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.command == "account":
        return _account(args)
    if args.command == "budget":
        return _budget(args)
    if args.command == "query":
        from dpkit.engine._cli import run_query

        return run_query(args)
    if args.command == "demo":
        from dpkit.demo import main as demo_main

        demo_main()
        return 0
    return _sample(args)


#: The accounting API's parameter names, as ``dpkit account``'s options.
_ACCOUNT_OPTIONS = {
    "noise_multiplier": "--noise-multiplier",
    "sampling_probability": "--sampling-rate",
    "count": "--steps",
    "steps": "--steps",
}


def _workload_event(args: argparse.Namespace) -> Any:
    from dpkit import InvalidParameterError, events

    try:
        if args.workload == "dpsgd":
            rate = 1.0 if args.sampling_rate is None else args.sampling_rate
            return events.dpsgd_event(args.noise_multiplier, rate, args.steps)
        if args.sampling_rate is not None:
            raise InvalidParameterError(
                "--sampling-rate", args.sampling_rate, f"applies to the dpsgd workload only, not {args.workload}"
            )
        single = (events.GaussianEvent if args.workload == "gaussian" else events.LaplaceEvent)(args.noise_multiplier)
        return events.SelfComposedEvent(single, args.steps)
    except InvalidParameterError as error:
        option = _ACCOUNT_OPTIONS.get(error.name)
        if option is None:
            raise
        # The option first, the API's name in brackets (for a search of the docs).
        raise InvalidParameterError(f"{option} ({error.name})", error.value, error.allowed) from error


def _plot_path(path: str) -> str:
    """``--plot``'s file, checked before any work: a format matplotlib writes, in an existing folder."""
    import os

    from dpkit import InvalidParameterError

    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError as error:
        raise InvalidParameterError("--plot", path, "needs matplotlib: pip install dpkit[plot]") from error
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    suffix = os.path.splitext(path)[1].lower().lstrip(".")
    if suffix not in formats:
        raise InvalidParameterError("--plot", path, f"must end in a plot format: .{', .'.join(formats)}")
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) or not os.path.isdir(folder):
        raise InvalidParameterError("--plot", path, "must be a file name in an existing folder")
    return path


def _finite_or_none(value: Any) -> Any:
    """JSON has no NaN or infinity (RFC 8259): a non-finite float becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _account(args: argparse.Namespace) -> int:
    from dpkit import DPError, InvalidParameterError, accounting
    from dpkit._validation import check_delta, check_positive

    event = _workload_event(args)
    if args.delta is not None:
        check_delta(args.delta, "--delta")
    if args.epsilon is not None:
        check_positive("--epsilon", args.epsilon, allow_zero=True)
    plot = _plot_path(args.plot) if args.plot else None
    delta = 1e-5 if args.delta is None and args.epsilon is None else args.delta
    what = "epsilon" if delta is not None else "delta"
    factories: dict[str, Callable[[], PrivacyAccountant]] = {
        "PLD (pessimistic, certified)": lambda: accounting.PLDAccountant(),
        "PLD (optimistic estimate)": lambda: accounting.PLDAccountant(pessimistic=False),
        "RDP": accounting.RDPAccountant,
        "zCDP": accounting.ZCDPAccountant,
        "optimal (KOV)": accounting.OptimalAccountant,
        "advanced (DRV)": accounting.AdvancedAccountant,
        "basic": accounting.BasicAccountant,
        "saddle point (approximate)": accounting.SaddlePointAccountant,
        "GDP / CLT (approximate)": accounting.GDPAccountant,
    }
    rows: list[dict[str, Any]] = []
    for name, factory in factories.items():
        start = time.perf_counter()
        accountant = factory()
        # One accountant refusing (PLD at 10^12 steps) or failing, even in supports() (an extreme
        # noise multiplier), must not hide what the others say: each outcome stays on its own row.
        outcome: dict[str, Any]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # float warnings: the row shows the outcome
                if not accountant.supports(event):
                    rows.append({"accountant": name, "supported": False})
                    continue
                accountant.compose(event)
                value = accountant.epsilon(delta) if delta is not None else accountant.delta(args.epsilon)
            outcome = {what: float(value)}
        except DPError as error:
            outcome = {what: None, "error": str(error)}
        except (ArithmeticError, ValueError) as error:  # a bug in that accountant: shown on its row
            outcome = {what: None, "error": f"{type(error).__name__}: {error} (an internal error of this accountant)"}
        # certified is read after composing: an approximate accountant says so once it has composed.
        row = {"accountant": name, "supported": True, "certified": bool(accountant.certified), **outcome}
        row["seconds"] = round(time.perf_counter() - start, 4)
        rows.append(row)
    if args.json:
        workload = vars(args) | {"delta": delta}
        report = {"workload": workload, "results": [{k: _finite_or_none(v) for k, v in r.items()} for r in rows]}
        print(json.dumps(report, indent=2, default=str, allow_nan=False))
    else:
        shown_what = f"epsilon at delta={delta:g}" if delta is not None else f"delta at epsilon={args.epsilon:g}"
        rate = "" if args.sampling_rate is None else f", rate {args.sampling_rate}"
        print(f"{args.workload}: noise multiplier {args.noise_multiplier}{rate}, {args.steps} steps; {shown_what}")
        for row in rows:
            if not row["supported"]:
                print(f"  {row['accountant']:30} not supported")
                continue
            if "error" in row:
                print(f"  {row['accountant']:30} {'failed':>12}  ({_printable(row['error'])})")
                continue
            value = float(row[what])
            shown = "inf" if math.isinf(value) else f"{value:.6g}"
            print(f"  {row['accountant']:30} {shown:>12}  ({row['seconds']:.3f} s)")
    if plot is not None:
        try:
            _plot_tradeoff(event, plot)
        except OSError as error:
            raise InvalidParameterError("--plot", plot, f"could not be written: {error}") from error
    return 0


def _budget(args: argparse.Namespace) -> int:
    import os

    from dpkit import InvalidParameterError
    from dpkit.engine import Ledger

    if args.delta is not None and not 0 < args.delta < 1:
        raise InvalidParameterError("--delta", args.delta, "must be a real number with 0 < delta < 1")
    if not os.path.lexists(args.ledger):  # reading a budget must never create a ledger
        raise InvalidParameterError("--ledger", args.ledger, "must name an existing ledger file")
    with Ledger(args.ledger, anchor=args.anchor) as ledger:
        entries = ledger.entries()
        budget, spent, remaining = ledger.budget, ledger.spent, ledger.remaining
    # The filter certifies the budget, whatever the queries; the spend's conversion holds for
    # queries fixed in advance (for adaptively chosen rho it would be an odometer claim).
    certified, spent_converted = _as_approx(budget, args.delta), _as_approx(spent, args.delta)
    conversions = {}
    if certified is not None:
        conversions = {
            "budget_as_approx_dp": _guarantee_json(certified),
            "spent_as_approx_dp_if_not_adaptive": _guarantee_json(spent_converted),
        }
    if args.json:
        report = {
            "ledger": args.ledger,
            "budget": _guarantee_json(budget),
            "spent": _guarantee_json(spent),
            "remaining": _guarantee_json(remaining),
            **conversions,
            "entries": [
                {
                    "index": entry.index,
                    "time": entry.time,
                    "analyst": entry.analyst,
                    "pid": entry.pid,
                    "cost": _guarantee_json(entry.cost),
                    "description": entry.description,
                }
                for entry in entries
            ],
        }
        print(json.dumps(report, indent=2))
        return 0
    print(f"ledger:    {args.ledger} ({budget.neighbours.value} neighbours)")
    print(f"budget:    {_guarantee_text(budget)}")
    if certified is not None:
        print(f"           as (epsilon, delta)-DP: {_guarantee_text(certified)} (whatever the queries)")
    print(f"spent:     {_guarantee_text(spent)}")
    if spent_converted is not None:
        print(f"           as (epsilon, delta)-DP: {_guarantee_text(spent_converted)} (if not chosen adaptively)")
    print(f"remaining: {_guarantee_text(remaining)}")
    print(f"entries:   {len(entries)}")
    for entry in entries:
        description = _printable(" ".join(entry.description.split()))  # one line per entry
        analyst = _printable(entry.analyst)
        print(f"  {entry.index:>5}  {entry.time}  {analyst}  {_guarantee_text(entry.cost)}  {description}")
    return 0


def _printable(text: str) -> str:
    """``text`` with every non-printable character escaped (a query's text could hold terminal
    escapes that hide or forge lines of the report)."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _as_approx(guarantee: Any, delta: float | None) -> Any:
    """A zCDP or approximate zCDP ``guarantee`` converted to (epsilon, delta)-DP at ``delta`` (``--delta``),
    or None without one; ``--delta`` for another kind of ledger is refused by name."""
    from dpkit import InvalidParameterError
    from dpkit.guarantees import ZCDP, ApproxDP, ApproxZCDP

    if delta is None:
        return None
    if isinstance(guarantee, ZCDP | ApproxZCDP):
        try:
            return guarantee.to_approx(delta)
        except InvalidParameterError as error:  # named as the option (the API says 'delta')
            raise InvalidParameterError("--delta", delta, error.allowed) from None
    if isinstance(guarantee, ApproxDP) and guarantee.epsilon_exact == 0 and guarantee.delta_exact == 0:
        return guarantee  # nothing (an empty zCDP ledger)
    raise InvalidParameterError("--delta", delta, "converts the budget of a zCDP or approximate zCDP ledger only")


def _exact_parts(guarantee: Any) -> dict[str, Fraction]:
    from dpkit.guarantees import ZCDP, ApproxZCDP, PureDP

    if isinstance(guarantee, ZCDP):
        return {"rho": guarantee.rho_exact}
    if isinstance(guarantee, ApproxZCDP):
        return {"rho": guarantee.rho_exact, "delta": guarantee.delta_exact}
    if isinstance(guarantee, PureDP):
        return {"epsilon": guarantee.epsilon_exact}
    return {"epsilon": guarantee.epsilon_exact, "delta": guarantee.delta_exact}


def _guarantee_text(guarantee: Any) -> str:
    """``PureDP(epsilon=0.1)``; a value no float shows exactly (1/3) is written as a fraction."""
    shown = []
    for name, value in _exact_parts(guarantee).items():
        as_float = float(value)
        exact = Fraction(repr(as_float)) == value
        shown.append(f"{name}={as_float!r}" if exact else f"{name}={value.numerator}/{value.denominator}")
    return f"{type(guarantee).__name__}({', '.join(shown)})"


def _guarantee_json(guarantee: Any) -> dict[str, Any]:
    """The guarantee's kind, float values for reading, and exact "num/den" text for checking."""
    report: dict[str, Any] = {"kind": type(guarantee).__name__, "neighbours": guarantee.neighbours.value}
    for name, value in _exact_parts(guarantee).items():
        report[name] = float(value)
        report[f"{name}_exact"] = f"{value.numerator}/{value.denominator}"
    return report


def _plot_tradeoff(event: Any, path: str) -> None:
    import numpy as np

    from dpkit import accounting

    accountant = accounting.PLDAccountant().compose(event)
    epsilons = np.linspace(0.0, max(8.0, 2 * accountant.epsilon(1e-5)), 200)
    deltas = np.array([accountant.delta(float(e)) for e in epsilons])
    alpha = np.linspace(0.0, 1.0, 401)
    beta = accounting.tradeoff_from_profile(epsilons, deltas, alpha)
    accounting.plot_tradeoff({"PLD (pessimistic)": (alpha, beta)}, path=path)
    print(f"trade-off curve written to {path}")


if __name__ == "__main__":
    sys.exit(main())
