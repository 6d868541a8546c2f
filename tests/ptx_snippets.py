"""Sources that several of the interpreter's tests build on, in one place: the CUDA helpers of
Hopper's mbarriers and bulk copies (test_ptx_hopper.py, test_ptx_hazards.py), and a one-warp PTX
kernel that hands each lane its operands from memory and stores one result a lane
(test_ptx_numerics_h100.py, test_ptx_numerics_h100_cvt.py, test_ptx_accepted.py), and an sm_80
kernel of one pointer parameter (test_ptx_headers.py, test_ptx_semantics.py)."""
from __future__ import annotations

import numpy as np

from fraglab import ptx

#: The short integer types, and the shared-memory address of a generic pointer (sm_90a snippets).
TYPES = r"""
typedef unsigned int u32; typedef unsigned long long u64; typedef unsigned short u16;
__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }
"""

#: One helper per instruction: mbarrier init, arrive (its state token returned), arrive with an
#: expected transaction count, try_wait.parity (and a spin on it), and a bulk copy completing on
#: an mbarrier. Needs :data:`TYPES` before it.
MBARRIER = r"""
__device__ void init(u32 b, u32 n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(b), "r"(n)); }
__device__ u64 arrive(u32 b) {
    u64 s; asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(s) : "r"(b) : "memory"); return s; }
__device__ void arrive_tx(u32 b, u32 tx) {
    asm volatile("{\n.reg .b64 s;\nmbarrier.arrive.expect_tx.shared::cta.b64 s, [%0], %1;\n}" :: "r"(b), "r"(tx) : "memory"); }
__device__ u32 try_parity(u32 b, u32 ph) {
    u32 r; asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                        : "=r"(r) : "r"(b), "r"(ph) : "memory"); return r; }
__device__ void wait(u32 b, u32 ph) { while (!try_parity(b, ph)) {} }
__device__ void bulk(u32 dst, const void* src, u32 n, u32 b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(n), "r"(b) : "memory"); }
"""


def lane_kernel(head: str, regs: str, body: str, out: str, store: str, srcs=(), n_in: int = 0) -> str:
    """PTX text: `head` (version, target, address size and any module-level declarations), then
    kernel ``k(out_p, in_p)`` for one warp. Lane i finds its input words (64 bits each: one per
    source, or `n_in`) at %rd4 = ``in_p + 8 n i``; the sources are loaded into %s0, %s1, ..
    (registers of the types `srcs`, such as ``b32``); then `body` runs, and register `out` is
    stored (``st.global.<store>``) at ``out_p + 8 i``. `regs` declares the other registers, those
    of the frame too: %r1 (the lane) and %rd1 to %rd6."""
    n = len(srcs) or n_in
    decl = "".join(f"\n    .reg .{t} %s{i};" for i, t in enumerate(srcs))
    loads = "".join(f"    ld.global.{t} %s{i}, [%rd4+{8 * i}];\n" for i, t in enumerate(srcs))
    return head + f""".visible .entry k(.param .u64 out_p, .param .u64 in_p)
{{
{regs}{decl}
    ld.param.u64 %rd1, [out_p];
    ld.param.u64 %rd2, [in_p];
    mov.u32 %r1, %laneid;
    mul.wide.u32 %rd3, %r1, {8 * n};
    add.s64 %rd4, %rd2, %rd3;
{loads}{body}
    mul.wide.u32 %rd5, %r1, 8;
    add.s64 %rd6, %rd1, %rd5;
    st.global.{store} [%rd6], {out};
    ret;
}}"""


def pointer_kernel(regs: str, body: str, param: str = "out_p") -> str:
    """PTX text for sm_80: kernel ``k`` of one pointer parameter `param`, which is loaded into
    %rd1 after the declarations `regs` (each line indented, as written); then `body` and ``ret``."""
    return f""".version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 {param})
{{
{regs}
    ld.param.u64 %rd1, [{param}];
{body}
    ret;
}}"""


def run_lanes(prog: ptx.Program, ins: np.ndarray) -> np.ndarray:
    """Launch :func:`lane_kernel`'s ``k`` on one warp with the (32, n_in) 64-bit words `ins`;
    the 32 stored words."""
    out = np.zeros(32, np.uint64)
    ptx.launch(prog, "k", 1, 32, (out, np.ascontiguousarray(ins, np.uint64)))
    return out
