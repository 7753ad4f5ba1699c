"""``python -m spillstore``: see :mod:`spillstore.cli`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
