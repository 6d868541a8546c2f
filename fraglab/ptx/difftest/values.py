"""Edge values for the differential test (:mod:`fraglab.ptx.difftest`): per PTX type, the bit
patterns that exercise an instruction's special cases, plus seeded random values.

Every value is a bit pattern (an unsigned NumPy array of the type's width), so NaN payloads,
signed zeros and denormals travel unchanged. Float formats are described by (exponent bits,
mantissa bits); the special set of each holds +-0, +-inf, NaNs with several payloads (quiet,
signalling, negative), the smallest and largest denormals, the smallest normal and the largest
finite values, and a few ordinary values (1, 1.5, 2.5, 1 +- ulp, powers of two where rounding
changes)."""
from __future__ import annotations

import numpy as np

WIDTH = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
         "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
         "u16x2": 4, "s16x2": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8, "pred": 4,
         "e4m3x2": 2, "e5m2x2": 2}
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
#: (exponent bits, mantissa bits) of the float formats
FORMAT = {"f16": (5, 10), "bf16": (8, 7), "f32": (8, 23), "f64": (11, 52), "tf32": (8, 23),
          "e4m3": (4, 3), "e5m2": (5, 2)}
FLOAT_NP = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def udt(t: str):
    return UINT[WIDTH[t]]


def is_float(t: str) -> bool:
    return t in FORMAT or t in ("f16x2", "bf16x2")


def half_of(t: str) -> str:
    return {"f16x2": "f16", "bf16x2": "bf16", "u16x2": "u16", "s16x2": "s16",
            "e4m3x2": "e4m3", "e5m2x2": "e5m2"}.get(t, t)


# ---- float formats -------------------------------------------------------------------------

def float_specials(t: str) -> list[int]:
    """The special bit patterns of float format `t` (see the module docstring)."""
    e, m = FORMAT[t]
    w = 1 + e + m
    sign, inf, q = 1 << (w - 1), ((1 << e) - 1) << m, 1 << (m - 1)
    bias = (1 << (e - 1)) - 1
    one = bias << m
    two = (bias + 1) << m
    big = (bias + m + 1) << m                       # 2^(m+1): the ulp is 2 there
    vals = [0, sign, inf, sign | inf,
            inf | q, inf | (2 * q - 1), inf | q | 5, inf | 1, inf | (q >> 1) | 3,   # NaNs
            sign | inf | q, sign | inf | 1 | (q >> 2),
            1, sign | 1, 2 * q - 1, sign | (2 * q - 1), q,                      # denormals
            1 << m, sign | (1 << m), inf - 1, sign | (inf - 1),                 # min normal, max
            one, sign | one, one - (1 << m), one | q, two | (q >> 1), sign | two | (q >> 1),
            one + 1, one - 1, big + 1, sign | (big - 1)]
    return list(dict.fromkeys(v & ((1 << w) - 1) for v in vals))


def to_float64(t: str, bits) -> np.ndarray:
    """Bit patterns of format `t` -> float64 values (exact)."""
    bits = np.asarray(bits)
    if t in FLOAT_NP:
        return bits.astype(udt(t)).view(FLOAT_NP[t]).astype(np.float64)
    if t == "bf16":
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    raise KeyError(t)


def from_float64(t: str, x) -> np.ndarray:
    """float64 values that are representable in `t` -> bit patterns (exact for those)."""
    x = np.asarray(x, np.float64)
    if t in FLOAT_NP:
        with np.errstate(over="ignore"):          # +-inf inputs, and values meant to overflow
            return x.astype(FLOAT_NP[t]).view(udt(t))
    if t == "bf16":
        return (x.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    raise KeyError(t)


def random_float(t: str, rng, n: int, spread: int = 12) -> np.ndarray:
    """n values of format t: a quarter uniformly random bits (any class), the rest ordinary
    numbers with an exponent within `spread` of 1 and random mantissas."""
    e, m = FORMAT[t]
    w = 1 + e + m
    bias = (1 << (e - 1)) - 1
    raw = _rand_bits(rng, n, w)
    exp = np.clip(bias + rng.integers(-spread, spread + 1, n), 1, (1 << e) - 2).astype(np.uint64)
    mant = _rand_bits(rng, n, m)
    sgn = rng.integers(0, 2, n).astype(np.uint64)
    ordinary = (sgn << np.uint64(w - 1)) | (exp << np.uint64(m)) | mant
    pick = rng.random(n) < 0.25
    return np.where(pick, raw, ordinary).astype(UINT[w // 8])


def near(t: str, a, rng) -> np.ndarray:
    """Values close to `a` (same or next exponent, random sign flips): sums and differences of
    such pairs round (and cancel) in interesting ways."""
    e, m = FORMAT[t]
    w = 1 + e + m
    a = np.asarray(a).astype(np.uint64)
    n = len(a)
    expo_mask = np.uint64(((1 << e) - 1) << m)
    shift = rng.integers(-1, 2, n).astype(np.int64)
    exp = (a & expo_mask).astype(np.int64) + (shift << m)
    exp = np.clip(exp, 1 << m, ((1 << e) - 2) << m).astype(np.uint64)
    mant = _rand_bits(rng, n, m)
    low = np.uint64((1 << min(m, 8)) - 1)
    mant = np.where(rng.random(n) < 0.5, (a & ~low & np.uint64((1 << m) - 1)) | (mant & low), mant)
    sgn = (a >> np.uint64(w - 1)) ^ (rng.random(n) < 0.5).astype(np.uint64)
    return ((sgn << np.uint64(w - 1)) | exp | mant).astype(UINT[w // 8])


def _rand_bits(rng, n, w):
    return rng.integers(0, 1 << w, n, dtype=np.uint64)


def rand_uint(t: str, rng, n: int) -> np.ndarray:
    return _rand_bits(rng, n, 8 * WIDTH[t]).astype(udt(t))


# ---- integers ------------------------------------------------------------------------------

def int_specials(t: str) -> list[int]:
    """0, +-1, +-2, the extremes (signed and unsigned), alternating bit patterns and the shift
    amounts around each power of two up to the width."""
    w = 8 * WIDTH[t]
    mask = (1 << w) - 1
    top = 1 << (w - 1)
    vals = [0, 1, 2, -1, -2, top, top + 1, top - 1, top - 2, 0x5555555555555555, 0xAAAAAAAAAAAAAAAA,
            3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 255, 256, 0x8000, 0x7FFF, 0xFFFF,
            0x12345678_9ABCDEF0]
    return list(dict.fromkeys(v & mask for v in vals))


#: shift amounts, bit positions and field lengths (u32 operands that select bits)
SHIFTS = [0, 1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 127, 128, 255, 256, 257,
          0x80000000, 0xFFFFFFFF]


def specials(t: str) -> list[int]:
    if t in ("f16x2", "bf16x2"):
        h = float_specials(half_of(t))
        return [(h[i] << 16) | h[(i * 7 + 3) % len(h)] for i in range(len(h))]
    if t in FORMAT:
        return float_specials(t)
    if t in ("u16x2", "s16x2"):
        h = int_specials("u16")
        return [(h[i] << 16) | h[(i * 5 + 2) % len(h)] for i in range(len(h))]
    if t == "pred":
        return [0, 1]
    return int_specials(t)


def random_of(t: str, rng, n: int) -> np.ndarray:
    if t in ("f16x2", "bf16x2"):
        h = half_of(t)
        return ((random_float(h, rng, n).astype(np.uint32) << np.uint32(16))
                | random_float(h, rng, n).astype(np.uint32)).astype(np.uint32)
    if t in FORMAT:
        return random_float(t, rng, n)
    if t == "pred":
        return rng.integers(0, 2, n).astype(np.uint32)
    return rand_uint(t, rng, n)


def as_bits(t: str, vals) -> np.ndarray:
    """Python ints (possibly negative) -> unsigned bit patterns of type t."""
    mask = (1 << (8 * WIDTH[t])) - 1
    if isinstance(vals, np.ndarray) and vals.dtype.kind == "u":
        return (vals.astype(np.uint64) & np.uint64(mask)).astype(udt(t))
    return np.array([int(v) & mask for v in vals], dtype=udt(t))


# ---- rounding ties for conversions ---------------------------------------------------------

def float_ties(src: str, dst: str, rng, n: int = 48) -> np.ndarray:
    """Bit patterns of `src` that sit exactly halfway between two neighbouring values of the
    narrower float format `dst`, and one `src` ulp either side, including the ties at the
    overflow threshold and in the denormal range of `dst`."""
    e, m = FORMAT[dst]
    inf = ((1 << e) - 1) << m
    lo = np.concatenate([rng.integers(1, inf - 1, n), [0, 1, 2, 3, (1 << m) - 1, 1 << m, inf - 2],
                         ((1 << (e - 1)) - 1 << m) + np.arange(4)]).astype(np.uint64)
    a = to_float64(dst, lo.astype(udt(dst)))
    b = to_float64(dst, (lo + 1).astype(udt(dst)))
    mid = (a + b) / 2
    top = to_float64(dst, np.array([inf - 1], udt(dst)))[0]
    ulp_top = top - to_float64(dst, np.array([inf - 2], udt(dst)))[0]
    mid = np.concatenate([mid, [top + ulp_top / 2]])
    mid = np.concatenate([mid, -mid[: len(mid) // 2]])
    x = from_float64(src, mid)
    up = (x.astype(np.uint64) + 1).astype(x.dtype)
    down = (x.astype(np.uint64) - 1).astype(x.dtype)
    return np.concatenate([x, up, down])


def int_ties(src: str, dst: str, rng, n: int = 40) -> np.ndarray:
    """Integers of type `src` halfway between two neighbouring values of float `dst` (and +-1),
    e.g. 2^24 + 1 for s32 -> f32."""
    e, m = FORMAT[dst]
    w = 8 * WIDTH[src]
    signed = src[0] == "s"
    hi_bit = w - 1 if signed else w
    vals = []
    for _ in range(n):
        k = int(rng.integers(m + 2, hi_bit)) if hi_bit > m + 2 else m + 2
        if k >= hi_bit:
            continue
        base = (int(rng.integers(0, 1 << (m + 1))) | (1 << m)) << (k - m)       # m+1 significant bits
        half = 1 << (k - m - 1)
        v = base + half
        if v >= 1 << hi_bit:
            continue
        vals += [v, v + 1, v - 1]
        if signed:
            vals += [-v]
    top = (1 << hi_bit) - 1
    vals += [top, top - 1, -top - 1 if signed else 0]
    return as_bits(src, vals)


def int_rounding_ties(src: str, rng, n: int = 24) -> np.ndarray:
    """Floats of format `src` at x.5 (ties of .rni) and around the integer ranges' edges."""
    k = rng.integers(0, 1 << 20, n).astype(np.float64)
    x = np.concatenate([k + 0.5, -(k + 0.5), [0.5, 1.5, 2.5, -0.5, -1.5, 0.49999997, 127.5, 128.5,
                                               255.5, 32767.5, 65535.5, 2.0**31, -2.0**31, 2.0**32,
                                               2.0**63, -2.0**63, 2.0**64, 2.0**31 - 1, 2.0**31 - 0.5,
                                               -2.0**31 - 1, 2.0**32 - 1, 2.0**53 + 2, 1e30, -1e30]])
    if src in ("f16", "bf16"):
        x = x[np.abs(x) < 60000]
    bits = from_float64(src, x)
    return np.concatenate([bits, (bits.astype(np.uint64) + 1).astype(bits.dtype),
                           (bits.astype(np.uint64) - 1).astype(bits.dtype)])
