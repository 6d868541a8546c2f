"""``python -m fraglab.microbenchmark ...``: see :mod:`fraglab.microbenchmark.cli`."""
import sys

from .cli import main

sys.exit(main())
