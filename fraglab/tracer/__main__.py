"""``python -m fraglab.tracer``: see :mod:`fraglab.tracer.cli`."""
import sys

from .cli import main

sys.exit(main())
