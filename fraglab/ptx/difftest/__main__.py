"""``python -m fraglab.ptx.difftest record|ptxas|coverage``: :mod:`.cli`."""
import sys

from .cli import main

sys.exit(main())
