"""Two test runs' outcomes, test by test, from their JUnit XML files (``--junitxml``)::

    python tests/outcomes.py A.xml B.xml     # exit 1, listing each test whose outcome differs

``make test-suspects`` compares a run on two workers with one serial run of the same seed: a
test seeded by its node id (tests/conftest.py) draws the same inputs in any worker and any
order, so the outcomes must agree."""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def outcomes(path: str) -> dict[str, str]:
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kind = next((k for k in ("failure", "error", "skipped") if case.find(k) is not None), "passed")
        out[name] = kind
    return out


def main(a: str, b: str) -> int:
    x, y = outcomes(a), outcomes(b)
    differ = sorted(n for n in x.keys() | y.keys() if x.get(n) != y.get(n))
    for n in differ:
        print(f"differs: {n}: {x.get(n, 'not run')} / {y.get(n, 'not run')}")
    print(f"{len(x)} tests: {'the same outcomes' if not differ else f'{len(differ)} outcomes differ'}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
