"""mma.sync (every shape and type the interpreter implements), ldmatrix x1/x2/x4 (.trans) and
cp.async (.ca/.cg, zero fill, wait_all) on hand-checked fragment layouts from the PTX ISA. CPU only."""
from __future__ import annotations

import numpy as np
import pytest

from fraglab import ptx
from fraglab.dtypes import from_bf16, to_bf16

from test_ptx_semantics import build

G, C = np.arange(32) // 4, np.arange(32) % 4      # groupID, threadID_in_group


def a_coords(shape, t):
    """(32, elements) rows and cols of the A fragment (PTX ISA figures)."""
    if t == "tf32":
        rows = [G, G + 8, G, G + 8]
        cols = [C, C, C + 4, C + 4]
    elif shape == "m16n8k16":
        rows = [G, G, G + 8, G + 8, G, G, G + 8, G + 8]
        cols = [2 * C, 2 * C + 1, 2 * C, 2 * C + 1, 2 * C + 8, 2 * C + 9, 2 * C + 8, 2 * C + 9]
    else:
        rows = [G, G, G + 8, G + 8]
        cols = [2 * C, 2 * C + 1, 2 * C, 2 * C + 1]
    return np.stack(rows, 1), np.stack(cols, 1)


def b_coords(shape, t):
    if t == "tf32":
        rows, cols = [C, C + 4], [G, G]
    elif shape == "m16n8k16":
        rows, cols = [2 * C, 2 * C + 1, 2 * C + 8, 2 * C + 9], [G] * 4
    else:
        rows, cols = [2 * C, 2 * C + 1], [G, G]
    return np.stack(rows, 1), np.stack(cols, 1)


CD_ROWS = np.stack([G, G, G + 8, G + 8], 1)
CD_COLS = np.stack([2 * C, 2 * C + 1, 2 * C, 2 * C + 1], 1)


def _regs(values, t):
    """(32, elements) values -> (32, registers) uint32, packing 16-bit types two per register."""
    if t == "f16":
        return np.ascontiguousarray(values.astype(np.float16)).view(np.uint32)
    if t == "bf16":
        return np.ascontiguousarray(to_bf16(values)).view(np.uint32)
    return np.ascontiguousarray(values.astype(np.float32)).view(np.uint32)


def _kernel(shape, dt, at, ct):
    na = {"m16n8k16": 4, "m16n8k8": 2}[shape] if at != "tf32" else 4
    nb = {"m16n8k16": 2, "m16n8k8": 1}[shape] if at != "tf32" else 2
    ncd = 2 if dt == "f16" else 4
    regs = [f"%{i}" for i in range(ncd + na + nb + ncd)]
    d, a = regs[:ncd], regs[ncd:ncd + na]
    b, c = regs[ncd + na:ncd + na + nb], regs[ncd + na + nb:]
    opcode = f"mma.sync.aligned.{shape}.row.col.{dt}.{at}.{at}.{ct}"
    asm = f"{opcode} {{{', '.join(d)}}}, {{{', '.join(a)}}}, {{{', '.join(b)}}}, {{{', '.join(c)}}};"
    outs = ", ".join(f'"=r"(d[{i}])' for i in range(ncd))
    ins = ", ".join([f'"r"(a[{i}])' for i in range(na)] + [f'"r"(b[{i}])' for i in range(nb)]
                    + [f'"r"(c[{i}])' for i in range(ncd)])
    return f'''
extern "C" __global__ void k(const unsigned* A, const unsigned* B, const unsigned* Cm, unsigned* D)
{{
    int l = threadIdx.x;
    unsigned a[{na}], b[{nb}], c[{ncd}], d[{ncd}];
    for (int i = 0; i < {na}; ++i) a[i] = A[{na} * l + i];
    for (int i = 0; i < {nb}; ++i) b[i] = B[{nb} * l + i];
    for (int i = 0; i < {ncd}; ++i) c[i] = Cm[{ncd} * l + i];
    asm volatile("{asm}" : {outs} : {ins});
    for (int i = 0; i < {ncd}; ++i) D[{ncd} * l + i] = d[i];
}}'''


@pytest.mark.parametrize("shape,dt,at,ct", [
    ("m16n8k16", "f32", "f16", "f32"), ("m16n8k16", "f32", "bf16", "f32"),
    ("m16n8k16", "f16", "f16", "f16"), ("m16n8k8", "f32", "f16", "f32"),
    ("m16n8k8", "f32", "bf16", "f32"), ("m16n8k8", "f16", "f16", "f16"),
    ("m16n8k8", "f32", "tf32", "f32")])
def test_mma_sync(shape, dt, at, ct):
    k = int(shape.split("k")[1])
    rng = np.random.default_rng(20)
    A = rng.standard_normal((16, k)).astype(np.float32)
    B = rng.standard_normal((k, 8)).astype(np.float32)
    Cm = rng.standard_normal((16, 8)).astype(np.float32)
    if at == "f16":
        A, B = A.astype(np.float16).astype(np.float32), B.astype(np.float16).astype(np.float32)
    elif at == "bf16":
        A, B = from_bf16(to_bf16(A)), from_bf16(to_bf16(B))
    else:
        A = (A.view(np.uint32) & 0xFFFFE000).view(np.float32)
        B = (B.view(np.uint32) & 0xFFFFE000).view(np.float32)
    if ct == "f16":
        Cm = Cm.astype(np.float16).astype(np.float32)
    ar, ac = a_coords(shape, at)
    br, bc = b_coords(shape, at)
    D = np.zeros(32 * (2 if dt == "f16" else 4), np.uint32)
    ptx.launch(build(_kernel(shape, dt, at, ct)), "k", 1, 32,
               (_regs(A[ar, ac], at), _regs(B[br, bc], at),
                _regs(Cm[CD_ROWS, CD_COLS], ct), D))
    got = np.zeros((16, 8))
    vals = D.view(np.float16).reshape(32, 4) if dt == "f16" else D.view(np.float32).reshape(32, 4)
    got[CD_ROWS, CD_COLS] = vals
    ref = A.astype(np.float64) @ B + Cm
    tol = 2e-3 if dt == "f16" else 1e-5
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


LDMATRIX = r'''
extern "C" __global__ void k(const unsigned short* src, unsigned* out)
{
    __shared__ __align__(16) unsigned short tile[4 * 64];
    for (int i = threadIdx.x; i < 256; i += 32) tile[i] = src[i];
    __syncwarp();
    int l = threadIdx.x;
    unsigned addr = (unsigned)__cvta_generic_to_shared(tile + (l / 8) * 64 + (l % 8) * 8);
    unsigned r[4] = {0, 0, 0, 0};
    asm volatile("ASM" : OUTS : "r"(addr));
    for (int i = 0; i < 4; ++i) out[4 * l + i] = r[i];
}'''


@pytest.mark.parametrize("x", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix(x, trans):
    regs = ", ".join(f"%{i}" for i in range(x))
    asm = f"ldmatrix.sync.aligned.m8n8.x{x}{'.trans' if trans else ''}.shared.b16 {{{regs}}}, [%{x}];"
    outs = ", ".join(f'"=r"(r[{i}])' for i in range(x))
    src = LDMATRIX.replace("ASM", asm).replace("OUTS", outs)
    vals = np.arange(256, dtype=np.uint16)
    out = np.zeros((32, 4), np.uint32)
    ptx.launch(build(src), "k", 1, 32, (vals, out))
    mats = vals.reshape(4, 8, 8)
    for i in range(x):
        m = mats[i].T if trans else mats[i]
        lo, hi = m[G, 2 * C], m[G, 2 * C + 1]
        assert (out[:, i] == lo.astype(np.uint32) | (hi.astype(np.uint32) << 16)).all(), i
    assert (out[:, x:] == 0).all()


def test_cp_async_sizes_zero_fill_and_wait_all():
    prog = build(r'''
extern "C" __global__ void k(const int* src, int* out, int valid)
{
    __shared__ __align__(16) int s[32 * 8];
    int l = threadIdx.x;
    unsigned d = (unsigned)__cvta_generic_to_shared(s + 8 * l);
    int n = l < valid ? 16 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(d), "l"(src + 8 * l));
    s[8 * l + 1] = -1;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" :: "r"(d + 8), "l"(src + 8 * l + 2));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(d + 16), "l"(src + 8 * l + 4), "r"(n));
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_all;");
    __syncwarp();
    for (int i = 0; i < 8; ++i) out[8 * l + i] = s[8 * l + i];
}''')
    src = np.arange(1, 32 * 8 + 1, dtype=np.int32)
    out = np.zeros(32 * 8, np.int32)
    ptx.launch(prog, "k", 1, 32, (src, out, np.int32(20)))
    want = src.reshape(32, 8).copy()
    want[:, 1] = -1
    want[20:, 4:] = 0
    assert (out.reshape(32, 8) == want).all()
