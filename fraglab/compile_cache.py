"""The on-disk store of the builds of :func:`fraglab.toolchain.compile` (`tools.cache_dir`).

Two kinds of entry, each a folder named by the build's key:

* ``<key>/``: a whole build (PTX, cubin, ptxas's report), what any compile of that key returns;
* ``<key>-ptx/``: a deferred build's PTX alone (:func:`fraglab.toolchain.deferred_ptxas`), written
  when NVRTC made it, before ptxas ran. Another process (the next graded notebook's kernel, a
  test worker, the next ``make test-quick``) that asks for the same key inside a deferred block
  gets that PTX without NVRTC; outside one, it runs ptxas on it (the cubin NVRTC would have made,
  byte for byte, where ptxas is NVRTC's release) instead of compiling again. A build that
  ptxas assembled is stored whole, as any other.

Entries are written to a temporary folder and renamed, so a reader never sees half of one; the
oldest are pruned beyond :data:`fraglab.tools.CACHE_MAX_ENTRIES` (the two kinds together).
"""
from __future__ import annotations

import json
import os
import shutil

from .tools import cache_dir, prune_cache

#: The suffix of a PTX-only entry's folder.
PTX_ONLY = "-ptx"


def _write(name: str, files: dict[str, str | bytes], meta: dict) -> None:
    d = cache_dir() / name
    tmp = d.with_name(d.name + f".tmp{os.getpid()}")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        for fname, data in files.items():
            (tmp / fname).write_bytes(data) if isinstance(data, bytes) else \
                (tmp / fname).write_text(data)
        (tmp / "meta.json").write_text(json.dumps(meta))
        os.replace(tmp, d) if not d.exists() else shutil.rmtree(tmp)
        prune_cache()
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # a read-only cache only costs a recompile


def load(key: str, Build):
    """The whole build stored under ``key`` (a ``Build``: :class:`fraglab.toolchain.Build`, which
    imports this module), or None."""
    d = cache_dir() / key
    try:
        meta = json.loads((d / "meta.json").read_text())
        build = Build(ptx=(d / "kernel.ptx").read_text(), cubin=(d / "kernel.cubin").read_bytes(),
                      **meta)
    except (OSError, ValueError, TypeError):
        return None
    # a build stored without its ptxas report (NVRTC's own cache served it) is compiled again
    return build if set(build.kernels) <= set(build.resources) else None


def store(b) -> None:
    """Store a whole build under its key (a key already stored is left as it is)."""
    _write(b.key, {"kernel.ptx": b.ptx, "kernel.cubin": b.cubin},
           dict(name=b.name, arch=b.arch, options=list(b.options), log=b.log, key=b.key,
                resources=b.resources))


def load_ptx(key: str, source: str, Build):
    """The deferred build stored under ``key`` (its PTX and NVRTC's log; ptxas not run), or
    None. ``source`` is the compiled text (the key is its digest): a ptxas error names it."""
    d = cache_dir() / (key + PTX_ONLY)
    try:
        meta = json.loads((d / "meta.json").read_text())
        build = Build(name=meta["name"], arch=meta["arch"], options=tuple(meta["options"]),
                      ptx=(d / "kernel.ptx").read_text(), cubin=b"", log="", key=key)
        front_log = str(meta["front_log"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    build.__dict__["_deferred"] = (source, front_log)
    return build


def store_ptx(b) -> None:
    """Store a deferred build's PTX (and NVRTC's log) under its key, before ptxas runs."""
    _source, front_log = b.__dict__["_deferred"]
    _write(b.key + PTX_ONLY, {"kernel.ptx": b.ptx},
           dict(name=b.name, arch=b.arch, options=list(b.options), front_log=front_log))
