"""Before/after equality for speed work on the PTX interpreter: a faster interpreter must give the
same bits, the same refusals and the same error messages. Run it on the old code, then on the new,
and compare (not a test file: pytest does not collect it).

    python tests/interp_equality.py tc OUT.npz       # tcmodel.matmul / block_fma on random blocks:
                                                     # every format, accumulator, variant, shape
    python tests/interp_equality.py cmp A.npz B.npz  # every array byte-equal?
    FRAGLAB_DIGEST=FILE PYTHONPATH=tests pytest -p interp_equality tests/...
        # one line per interpreter launch: test, kernel, steps or the error, SHA-256 of the arrays
        # (compare two such files with cmp)
"""
from __future__ import annotations

import hashlib
import os
import sys

import numpy as np

FMT = {"f16": (np.uint16, np.float16), "bf16": (np.uint16, None), "tf32": (np.uint32, np.float32)}


def _values(rng, t, shape, cls):
    from fraglab.dtypes import from_bf16
    if cls == "bits":                       # any bit pattern: inf, NaN, subnormals included
        u = rng.integers(0, 1 << (16 if t != "tf32" else 32), size=shape, dtype=np.uint64)
    elif cls == "narrow":                   # nearby exponents: cancellation, carries
        v = rng.integers(-64, 65, size=shape) * 2.0 ** rng.integers(-4, 4, size=shape)
        return v.astype(np.float64)
    elif cls == "zeros":
        v = rng.choice([0.0, -0.0, 1.0, -2.0, 2.0 ** -24, -(2.0 ** -14)], size=shape)
        return v.astype(np.float64)
    else:                                   # finite, wide exponent spread
        u = rng.integers(0, 1 << (16 if t != "tf32" else 32), size=shape, dtype=np.uint64)
        mask = {"f16": 0x7BFF, "bf16": 0x7F7F, "tf32": 0x7F7FE000}[t]
        u = u & np.uint64(mask | (0x8000 if t != "tf32" else 0x80000000))
    if t == "f16":
        return u.astype(np.uint16).view(np.float16).astype(np.float64)
    if t == "bf16":
        return from_bf16(u.astype(np.uint16)).astype(np.float64)
    return (u.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def _acc(rng, ct, shape, cls):
    if cls == "zeros":
        return rng.choice([0.0, -0.0, 1.0], size=shape)
    if ct == "f16":
        return _values(rng, "f16", shape, cls)
    u = rng.integers(0, 1 << 32, size=shape, dtype=np.uint64).astype(np.uint32)
    if cls != "bits":
        u &= np.uint32(0xBF7FFFFF if cls == "wide" else 0x8000FFFF | 0x41000000)
    return u.view(np.float32).astype(np.float64)


def tc(out):
    from fraglab.ptx import tcmodel
    rng = np.random.default_rng(1234)
    res = {}
    shapes = [(16, 8, 16), (16, 8, 8), (16, 8, 4), (16, 16, 16), (16, 64, 16), (8, 8, 32),
              (16, 8, 48), (1, 1, 16), (3, 2, 5)]
    n = 0
    for it in ("f16", "bf16", "tf32"):
        for ct in ("f32", "f16"):
            for (m, nn, k) in shapes:
                for cls in ("bits", "narrow", "zeros", "wide"):
                    for rep in range(3):
                        A = _values(rng, it, (m, k), cls)
                        B = _values(rng, it, (k, nn), cls)
                        C = _acc(rng, ct, (m, nn), cls)
                        for vn, var in list(tcmodel.NEIGHBOURS.items()) + [("none", None)]:
                            D = tcmodel.matmul(A, B, C, it, ct, var)
                            res[f"{it}_{ct}_{m}x{nn}x{k}_{cls}{rep}_{vn}"] = np.asarray(D)
                            n += 1
                        with tcmodel.model("exact"):
                            res[f"{it}_{ct}_{m}x{nn}x{k}_{cls}{rep}_exact"] = tcmodel.matmul(A, B, C, it, ct)
                        # batched blocks (leading dims), as block_fma allows
                        if k <= 16 and rep == 0:
                            A3 = np.stack([A, A[::-1]]); B3 = np.stack([B, -B]); C3 = np.stack([C, C])
                            res[f"{it}_{ct}_{m}x{nn}x{k}_{cls}_b3"] = tcmodel.block_fma(
                                A3, B3, C3, it, ct)
    np.savez(out, **res)
    print(len(res), "arrays")


def cmp(a, b):
    A, B = np.load(a), np.load(b)
    ka, kb = set(A.files), set(B.files)
    bad = [k for k in sorted(ka & kb) if A[k].dtype != B[k].dtype or A[k].shape != B[k].shape
           or A[k].tobytes() != B[k].tobytes()]
    print(f"{len(ka & kb)} compared, {len(bad)} differ, keys only in one: {len(ka ^ kb)}")
    for k in bad[:20]:
        print("DIFF", k)
    return 1 if bad or ka ^ kb else 0


# ---- pytest plugin: digests of every interpreter launch ---------------------------------------

def pytest_configure(config):
    from fraglab.ptx import program
    orig = program.launch
    path = os.environ.get("FRAGLAB_DIGEST")
    if not path:
        return
    state = {"test": ""}

    def launch(prog, kernel, *a, **kw):
        args = kw.get("args", a[2] if len(a) > 2 else ())
        try:
            L = orig(prog, kernel, *a, **kw)
            rec = f"ok steps={L.steps}"
        except Exception as e:          # the same refusal / error message
            L, rec, err = None, f"{type(e).__name__}: {e}", e
        h = hashlib.sha256()
        for x in args:
            if isinstance(x, np.ndarray):
                h.update(np.ascontiguousarray(x).tobytes())
        with open(path, "a") as f:
            f.write(f"{state['test']} {kernel} {rec[:3000]!r} {h.hexdigest()}\n")
        if L is None:
            raise err
        return L
    program.launch = launch
    import fraglab.ptx as ptx
    ptx.launch = launch
    config._digest_state = state


def pytest_runtest_setup(item):
    st = getattr(item.config, "_digest_state", None)
    if st is not None:
        st["test"] = item.nodeid


if __name__ == "__main__":
    if sys.argv[1] == "tc":
        tc(sys.argv[2])
    else:
        sys.exit(cmp(sys.argv[2], sys.argv[3]))
