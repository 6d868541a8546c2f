"""What crosses the pipe between the grader and the process that runs a learner's code
(:mod:`.sandbox`): plain data, one JSON object a line, checked on arrival. No pickles.

A *value* on the wire is one of

* JSON's own: ``null``, ``true``/``false``, numbers (``NaN``, ``Infinity`` included), strings,
  lists, and objects whose keys are strings that do not start with ``__``;
* a tagged object, one key naming the kind:

  ====================  =========================================================================
  ``{"__nd__": [dtype, shape, b64]}``   a NumPy array: a numeric dtype of :data:`DTYPES`, its
                                        shape, its bytes (C order, little-endian) in base64
  ``{"__np__": [dtype, b64]}``          a NumPy scalar of such a dtype
  ``{"__tuple__": [...]}``              a tuple
  ``{"__set__": [...]}``                a set (of hashable values)
  ``{"__dict__": [[k, v], ...]}``       a dict whose keys are not all plain strings
  ``{"__bytes__": b64}``                bytes
  ``{"__ns__": {name: value}}``         a namespace of plain attributes (``types.SimpleNamespace``)
  ``{"__ufunc__": name}``               a NumPy ufunc, by its name in ``numpy``
  ``{"__ref__": [n, type name]}``       an object that stays in the grader: the n-th one it handed
                                        out to this child (only the grader issues these)
  ``{"__figure__": {...}}``             a matplotlib figure's content (grader to child only)
  ====================  =========================================================================

Anything else does not encode (an object of a learner's class, a function, an object array) and
does not decode (an unknown tag, a dtype outside :data:`DTYPES`, bytes that do not fill the
shape, nesting deeper than :data:`MAX_DEPTH`, a line longer than :data:`MAX_LINE`):
:class:`WireError` says what. So a value that arrives is made of types whose ``==`` is the
language's own.

A *message* is a JSON object with an ``"op"`` (a string) and fields by op (:mod:`.sandbox`
lists them). This module imports nothing of the course: the child loads it by its path.
"""
from __future__ import annotations

import base64
import json
import math
import types

import numpy as np

#: The array dtypes that may cross: numbers and booleans, nothing that holds objects.
DTYPES = frozenset(["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                    "uint64", "float16", "float32", "float64", "complex64", "complex128"])
MAX_DEPTH = 32
MAX_LINE = 256 << 20
TAGS = frozenset(["__nd__", "__np__", "__tuple__", "__set__", "__dict__", "__bytes__", "__ns__",
                  "__ufunc__", "__ref__", "__figure__"])


class WireError(ValueError):
    """A value that is not plain data, or a message that breaks the format."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _dtype_name(dt: np.dtype) -> str:
    name = np.dtype(dt).name
    if name not in DTYPES:
        raise WireError(f"an array of dtype {name} is not plain data (numbers only)")
    return name


def encode(value, ref=None, _depth: int = 0):
    """``value`` as JSON-able plain data. ``ref(obj)`` may name an object that is not plain data
    (returns ``[n, type name]``); without it, or when it returns None, such an object raises
    :class:`WireError`."""
    if _depth > MAX_DEPTH:
        raise WireError(f"data nested deeper than {MAX_DEPTH} levels")
    d = _depth + 1
    if value is None or isinstance(value, (bool, str)):
        return value
    if type(value) is int or type(value) is float:
        return value
    if type(value).__module__.startswith("cupy") and hasattr(value, "get"):
        value = value.get()                      # a GPU array crosses as its host copy
    if isinstance(value, np.ndarray):
        name = _dtype_name(value.dtype)
        a = np.ascontiguousarray(value).astype(np.dtype(name).newbyteorder("<"), copy=False)
        return {"__nd__": [name, list(a.shape), _b64(a.tobytes())]}
    if isinstance(value, np.generic):
        name = _dtype_name(value.dtype)
        return {"__np__": [name, _b64(np.asarray(value).astype(np.dtype(name).newbyteorder("<"))
                                      .tobytes())]}
    if isinstance(value, (int, float)):          # subclasses (IntEnum, ...): as the number
        return int(value) if isinstance(value, int) else float(value)
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v, ref, d) for v in value]}
    if isinstance(value, list):
        return [encode(v, ref, d) for v in value]
    if isinstance(value, (set, frozenset)):
        return {"__set__": [encode(v, ref, d) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode(v, ref, d) for k, v in value.items()}
        return {"__dict__": [[encode(k, ref, d), encode(v, ref, d)] for k, v in value.items()]}
    if isinstance(value, (bytes, bytearray)):
        return {"__bytes__": _b64(bytes(value))}
    if isinstance(value, np.ufunc) and getattr(np, value.__name__, None) is value:
        return {"__ufunc__": value.__name__}
    if type(value) is types.SimpleNamespace:
        return {"__ns__": {k: encode(v, ref, d) for k, v in vars(value).items()
                           if not k.startswith("_")}}
    named = ref(value) if ref is not None else None
    if named is not None:
        return {"__ref__": list(named)}
    raise WireError(f"an object of type {type(value).__name__} is not plain data (numbers, "
                    "strings, NumPy arrays, and lists, tuples and dicts of them)")


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise WireError(what)


def _bytes(text) -> bytes:
    _need(isinstance(text, str), "bytes must come as a base64 string")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise WireError("bytes that are not base64") from None


def _array(dtype, shape, data) -> np.ndarray:
    _need(isinstance(dtype, str) and dtype in DTYPES, f"dtype {dtype!r} is not plain data")
    _need(isinstance(shape, list) and len(shape) <= MAX_DEPTH and all(
        type(n) is int and n >= 0 for n in shape), f"shape {shape!r} is not a list of sizes")
    raw = _bytes(data)
    dt = np.dtype(dtype).newbyteorder("<")
    _need(len(raw) == math.prod(shape) * dt.itemsize,
          f"{len(raw)} bytes do not fill an array of shape {tuple(shape)} and dtype {dtype}")
    return np.frombuffer(raw, dtype=dt).astype(np.dtype(dtype), copy=True).reshape(shape)


def decode(obj, ref=None, figure=None, _depth: int = 0):
    """The value :func:`encode` made. ``ref(n, type name)`` turns a reference into an object
    (without it, references are refused); ``figure(content)`` rebuilds a figure (without it,
    figures are refused)."""
    _need(_depth <= MAX_DEPTH, f"data nested deeper than {MAX_DEPTH} levels")
    d = _depth + 1
    if obj is None or isinstance(obj, (bool, str, int, float)):
        return obj
    if isinstance(obj, list):
        return [decode(v, ref, figure, d) for v in obj]
    _need(isinstance(obj, dict), f"a value of JSON type {type(obj).__name__}")
    tags = [k for k in obj if k.startswith("__")]
    if not tags:
        return {k: decode(v, ref, figure, d) for k, v in obj.items()}
    _need(len(obj) == 1 and tags[0] in TAGS, f"unknown tagged value {sorted(obj)[:3]}")
    tag, body = tags[0], obj[tags[0]]
    if tag == "__nd__":
        _need(isinstance(body, list) and len(body) == 3, "an array is [dtype, shape, bytes]")
        return _array(*body)
    if tag == "__np__":
        _need(isinstance(body, list) and len(body) == 2, "a scalar is [dtype, bytes]")
        return _array(body[0], [], body[1])[()]
    if tag in ("__tuple__", "__set__"):
        _need(isinstance(body, list), f"{tag} holds a list")
        items = [decode(v, ref, figure, d) for v in body]
        if tag == "__tuple__":
            return tuple(items)
        try:
            return set(items)
        except TypeError:
            raise WireError("a set of values that cannot be hashed") from None
    if tag == "__dict__":
        _need(isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body),
              "__dict__ holds [key, value] pairs")
        out = {}
        for k, v in body:
            key = decode(k, ref, figure, d)
            try:
                out[key] = decode(v, ref, figure, d)
            except TypeError:
                raise WireError("a dict key that cannot be hashed") from None
        return out
    if tag == "__bytes__":
        return _bytes(body)
    if tag == "__ns__":
        _need(isinstance(body, dict) and all(k.isidentifier() and not k.startswith("_")
                                             for k in body), "a namespace of public names")
        return types.SimpleNamespace(**{k: decode(v, ref, figure, d) for k, v in body.items()})
    if tag == "__ufunc__":
        fn = getattr(np, body, None) if isinstance(body, str) else None
        _need(isinstance(fn, np.ufunc), f"{body!r} is not a NumPy ufunc")
        return fn
    if tag == "__ref__":
        _need(ref is not None, "a reference to an object of the grader, where none may come")
        _need(isinstance(body, list) and len(body) == 2 and type(body[0]) is int
              and isinstance(body[1], str), "a reference is [number, type name]")
        return ref(body[0], body[1])
    _need(figure is not None and isinstance(body, dict), "a figure, where none may come")
    return figure(decode(body, ref, figure, d))


def dumps(message: dict) -> bytes:
    """One message as one line of JSON (NaN and infinities as Python's json writes them)."""
    return (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")


def loads(line: bytes) -> dict:
    """A message read from a line: a JSON object with a string ``"op"``."""
    _need(len(line) <= MAX_LINE, f"a message longer than {MAX_LINE >> 20} MiB")
    try:
        msg = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WireError(f"a line that is not JSON ({e})") from None
    _need(isinstance(msg, dict) and isinstance(msg.get("op"), str), "a message without an op")
    return msg
