"""Progress for long runs: a line updated in place (terminal, Jupyter) and a flushed log.

    bar = Progress(len(items))
    for i, item in enumerate(items, 1):
        bar.show(i, f"{item} ...", final=False)   # in place only
        ...
        bar.show(i, f"{item}: 3.2 ms")            # in place, or one line per step in a file/pipe
    bar.close()

    log = Log(path)            # print, flushed, and append to ``path``
    log.phase("fresh processes")   # "[  12.3 s] == fresh processes"
"""
from __future__ import annotations

import sys
import time
from pathlib import Path


def _supports_cr(stream) -> bool:
    """True where '\\r' rewrites the line: a terminal, or a Jupyter (ipykernel) output."""
    if type(stream).__module__.startswith("ipykernel"):
        return True
    try:
        return bool(stream.isatty())
    except Exception:
        return False


class Progress:
    """A dependency-free progress line: updated in place on a TTY/Jupyter, else one line per step."""

    def __init__(self, total: int, enabled: bool = True, stream=None):
        self.total, self.enabled = total, enabled
        self.stream = stream if stream is not None else sys.stdout
        self.inplace = _supports_cr(self.stream)
        self._width = 0

    def show(self, i: int, text: str, final: bool = True) -> None:
        if not self.enabled:
            return
        line = f"[{i}/{self.total}] {text}"
        if self.inplace:
            self.stream.write("\r" + line + " " * max(0, self._width - len(line)))
            self._width = len(line)
        elif final:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.inplace and self._width:
            self.stream.write("\n")
            self.stream.flush()


class Log:
    """Print (flushed) and, with a ``path``, append to a log file; ``phase`` stamps the time."""

    def __init__(self, path: Path | None = None, *, quiet: bool = False):
        self.path, self.quiet = path, quiet
        self.t0 = time.perf_counter()
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text("")

    def __call__(self, msg: str = "") -> None:
        if not self.quiet:
            print(msg, flush=True)
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(msg + "\n")

    def phase(self, name: str) -> None:
        self(f"[{time.perf_counter() - self.t0:6.1f} s] == {name}")
