"""The table of opcode handlers: ``@handler("add", "sub")`` registers a decoder for base
opcodes. The ``ops_*``, :mod:`.collectives`, :mod:`.tensor` and :mod:`.calls` modules register
theirs when imported (:func:`fraglab.ptx.opset.table` imports them all)."""
from __future__ import annotations

HANDLERS: dict = {}


def handler(*names):
    def deco(fn):
        for n in names:
            HANDLERS[n] = fn
        return fn
    return deco
