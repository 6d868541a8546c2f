"""``python -m fraglab.flash_attention bench --out DIR`` (see :mod:`.cli`)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
