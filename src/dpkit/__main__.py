"""``python -m dpkit``: the same command as the ``dpkit`` console script (see :mod:`dpkit.cli`)."""

from __future__ import annotations

import sys

from dpkit.cli import main

if __name__ == "__main__":
    sys.exit(main())
