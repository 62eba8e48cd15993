"""The ``dpkit`` command: a thin layer over the public API.

``dpkit demo`` runs the demo job; ``dpkit sample --mechanism discrete_laplace --scale 2 -n 5``
prints secure noise draws (useful to check an installation).
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``dpkit`` console script."""
    parser = argparse.ArgumentParser(prog="dpkit", description="Differentially private data analysis.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="release a private histogram and mean on the embedded sample table")
    sample = commands.add_parser("sample", help="print secure noise draws")
    sample.add_argument("--mechanism", choices=["discrete_laplace", "discrete_gaussian", "geometric"], required=True)
    sample.add_argument("--scale", type=float, required=True, help="scale (sigma for the discrete Gaussian)")
    sample.add_argument("-n", type=int, default=10)
    args = parser.parse_args(argv)

    from dpkit import DPError

    try:
        if args.command == "demo":
            from dpkit.demo import main as demo_main

            demo_main()
        else:
            from dpkit import noise

            draws = getattr(noise, args.mechanism)(args.scale, args.n)
            print(" ".join(str(int(x)) for x in draws))
    except DPError as error:
        print(f"dpkit: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
