"""``python -m fraglab.layout_codegen``: the command line of :mod:`fraglab.layout_codegen.cli`."""
import sys

from .cli import main

sys.exit(main())
