"""Tensor cores, bit for bit: ``mma.sync`` (m16n8k16 / m16n8k8 with f16 and bf16, m16n8k8 /
m16n8k4 with tf32) and ``wgmma.mma_async`` (m64nNk16, f16 and bf16, A from registers) on the GPU
and on the interpreter, on input classes chosen to expose the arithmetic: random values, long
accumulation chains (many instructions into one accumulator), cancellation, wide exponent
ranges, subnormals, and a sprinkling of infinities and NaNs.

Each test is one PTX kernel per instruction form (written here, not compiled from CUDA): a
block per instance reads its accumulator fragment, then for each step its A and B fragments (for
wgmma: A registers and a B image copied into shared memory, canonical K-major layout without
swizzle), executes the instruction into the same accumulator, and stores the fragment. The
GPU's raw output words are compared with the interpreter's word for word, and the GPU's results
with :mod:`.tcmodel` on the host for every neighbouring model (:data:`.tcmodel.NEIGHBOURS`), so a
run also says which variant of the published model the hardware follows.

Entry point: :func:`run` (``python -m fraglab.ptx.difftest.hw`` runs it with the fuzzer)."""
from __future__ import annotations

import hashlib
import time

import numpy as np

from ...dtypes import from_bf16, to_bf16
from .. import tcmodel
from ..tensor import mma_layout
from ..wgmma import d_layout, encode_descriptor, operand_offsets

LBO, SBO = 128, 256                       # B image: K halves 128 bytes apart, 8-row groups 256


def _form(kind: str, shape: tuple, itype: str, ctype: str) -> tuple:
    """(name, kind, (m, n, k), input type, accumulator type), the name as PTX spells the form."""
    m, n, k = shape
    return (f"{kind}.m{m}n{n}k{k}.{ctype}.{itype}", kind, shape, itype, ctype)


#: The forms: mma with f16 and bf16 inputs at k16 and k8, with tf32 at k8 and k4; wgmma at
#: n = 8, 64 and 256 (A from registers).
FORMS = ([_form("mma", (16, 8, k), i, c) for k in (16, 8)
          for i, c in (("f16", "f32"), ("f16", "f16"), ("bf16", "f32"))]
         + [_form("mma", (16, 8, k), "tf32", "f32") for k in (8, 4)]
         + [_form("wgmma", (64, n, 16), i, c)
            for n, i, c in ((8, "f16", "f32"), (64, "bf16", "f32"), (64, "f16", "f16"), (256, "f16", "f32"))])
#: input classes: (name, steps for mma, steps for wgmma)
CLASSES = [("random", 1, 1), ("chain", 48, 12), ("cancel", 1, 1), ("wide", 1, 1),
           ("subnormal", 1, 1), ("specials", 1, 1), ("zeros", 1, 1), ("subnormal_scaled", 1, 1)]


# ---- values ------------------------------------------------------------------------------------

def to_type(x, t: str) -> np.ndarray:
    """float values -> the nearest values of input type t (float64)."""
    x = np.asarray(x, np.float64)
    if t == "f16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float64)
    if t == "bf16":
        return from_bf16(to_bf16(x.astype(np.float32))).astype(np.float64)
    if t in ("tf32", "f32"):
        with np.errstate(over="ignore"):
            f = x.astype(np.float32)
        if t == "tf32":
            f = (f.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
        return f.astype(np.float64)
    raise KeyError(t)


def _spread(rng, shape, lo, hi):
    """Random signs and significands times 2^uniform(lo, hi)."""
    return rng.choice([-1.0, 1.0], shape) * rng.uniform(1, 2, shape) * np.exp2(rng.integers(lo, hi + 1, shape))


def _subnormal(rng, shape, t):
    if t == "f16":
        bits = rng.integers(1, 0x400, shape).astype(np.uint16) | (rng.integers(0, 2, shape) << 15).astype(np.uint16)
        v = bits.view(np.float16).astype(np.float64)
        return np.where(rng.random(shape) < 0.3, rng.standard_normal(shape) * 2.0**-12, v)
    return _spread(rng, shape, -135, -118)        # bf16 / tf32: around the f32 subnormal edge


def inputs(cls: str, t: str, ct: str, shape, inst: int, steps: int, seed: int):
    """(A (inst, steps, M, K), B (inst, steps, K, N), C (inst, M, N)) float64 values of the
    input and accumulator types, for input class ``cls``."""
    m, n, k = shape
    rng = np.random.default_rng(seed)
    sa, sb, sc = (inst, steps, m, k), (inst, steps, k, n), (inst, m, n)
    if cls in ("random", "chain"):
        A, B, C = rng.standard_normal(sa), rng.standard_normal(sb), rng.standard_normal(sc)
        if cls == "random" and t == "tf32":          # low significand bits set: the hardware ignores them
            A = np.asarray(A, np.float32).astype(np.float64)
    elif cls == "cancel":
        A, B = rng.standard_normal(sa), rng.standard_normal(sb)
        h = k // 2
        A[..., h:] = A[..., :h] * np.where(rng.random(A[..., :h].shape) < 0.8, 1.0, 1 + 2.0**-8)
        B[..., h:, :] = -B[..., :h, :]
        A, B = to_type(A, t), to_type(B, t)
        exact = np.einsum("ismk,iskn->imn", A, B)
        C = -exact + rng.standard_normal(sc) * 2.0**-20 * (rng.random(sc) < 0.5)
    elif cls == "wide":
        lo, hi = (-12, 7) if t == "f16" else (-60, 60)
        A, B = _spread(rng, sa, lo, hi), _spread(rng, sb, lo, hi)
        C = _spread(rng, sc, 2 * lo, 2 * hi) * (rng.random(sc) < 0.8)
    elif cls == "subnormal":
        A, B = _subnormal(rng, sa, t), _subnormal(rng, sb, t)
        C = np.where(rng.random(sc) < 0.5, _spread(rng, sc, -149, -127), 0.0)
        C = np.where(rng.random(sc) < 0.2, -0.0, C)
    elif cls == "subnormal_scaled":
        # subnormal A times large B: products in the normal range, so that flushing the
        # subnormal inputs (bf16/tf32: not yet measured, the subnormal class's products underflow)
        # would change every result
        lo, hi = (3, 14) if t == "f16" else (105, 126)
        A, B = _subnormal(rng, sa, t), _spread(rng, sb, lo, hi)
        C = np.where(rng.random(sc) < 0.5, _spread(rng, sc, -12, 4), 0.0)
    elif cls == "zeros":
        # the sign of a sum of zeros: rows of A all +0 or all -0, columns of B all positive or all
        # negative, C +-0, so that every product and C can be -0 (IEEE: -0), or mixed (+0)
        A, B = np.abs(rng.standard_normal(sa)), np.abs(rng.standard_normal(sb))
        A *= np.where(rng.random(sa[:3] + (1,)) < 0.6, 0.0, 1.0) * rng.choice([-1.0, 1.0], sa[:3] + (1,))
        B *= rng.choice([-1.0, 1.0], sb[:2] + (1, n))
        B = np.where(rng.random(sb) < 0.1, -B, B)
        C = np.where(rng.random(sc) < 0.7, 0.0, rng.standard_normal(sc) * 2.0**-20) * rng.choice([-1.0, 1.0], sc)
    elif cls == "specials":
        A, B, C = rng.standard_normal(sa), rng.standard_normal(sb), rng.standard_normal(sc)
        pick = [np.inf, -np.inf, np.nan, 0.0, -0.0]
        for X in (A, B, C):
            hit = rng.random(X.shape) < 0.01
            X[hit] = rng.choice(pick, int(hit.sum()))
    else:
        raise KeyError(cls)
    if t == "tf32" and cls == "random":
        A2 = A                                        # keep the f32 low bits of A
    else:
        A2 = to_type(A, t)
    return A2, to_type(B, t), to_type(C, ct)


# ---- registers ---------------------------------------------------------------------------------

def _bits(vals, t: str) -> np.ndarray:
    """float64 values -> raw element bits (uint16 for 16-bit types, uint32 otherwise)."""
    if t == "f16":
        return vals.astype(np.float16).view(np.uint16)
    if t == "bf16":
        return to_bf16(vals.astype(np.float32))
    return vals.astype(np.float32).view(np.uint32)


def _words(elems: np.ndarray) -> np.ndarray:
    """(..., ne) element bits -> (..., words) uint32, two 16-bit elements per word (low first)."""
    e = np.ascontiguousarray(elems)
    return e.view(np.uint32) if e.dtype == np.uint16 else e


def _unwords(words: np.ndarray, t: str) -> np.ndarray:
    w = np.ascontiguousarray(words, np.uint32)
    return w.view(np.uint16) if t in ("f16", "bf16") else w


def _frag(mat, lay, t):
    """(inst, ..., rows, cols) matrices -> (inst, ..., 32, words) fragment words for layout lay."""
    return _words(_bits(mat[..., lay[..., 0], lay[..., 1]], t))


def _acc_layout(kind, shape, ct):
    """(threads, elements, 2) (row, col) of the accumulator fragment of each thread."""
    if kind == "mma":
        return mma_layout(shape, "d", ct)
    lay = d_layout(shape[1])
    return np.concatenate([lay + np.array([16 * w, 0]) for w in range(4)])


def _a_layout(kind, shape, t):
    if kind == "mma":
        return mma_layout(shape, "a", t)
    lay = mma_layout((16, 8, 16), "a", t)
    return np.concatenate([lay + np.array([16 * w, 0]) for w in range(4)])


def b_image(B, t):
    """(..., K=16, N) B values -> (..., N*8) words of the shared-memory image (K-major, no swizzle)."""
    n = B.shape[-1]
    off = operand_offsets(n, 16, 2, False, dict(start=0, lbo=LBO, sbo=SBO, swizzle=0))
    img = np.zeros(B.shape[:-2] + (n * 16,), np.uint16)
    img[..., off // 2] = _bits(np.swapaxes(B, -1, -2), t)
    return img.view(np.uint32)


def pack(form, A, B, C):
    """The kernel's input words, block after block: accumulator words (thread-major), then per step
    the A words (thread-major), the B words (mma: thread-major; wgmma: the shared image)."""
    _, kind, shape, t, ct = form
    inst, steps = A.shape[:2]
    cw = _frag(C, _acc_layout(kind, shape, ct), ct).reshape(inst, -1)
    aw = _frag(A, _a_layout(kind, shape, t), t).reshape(inst, steps, -1)
    if kind == "mma":
        bw = _frag(B, mma_layout(shape, "b", t), t).reshape(inst, steps, -1)
    else:
        bw = b_image(B, t).reshape(inst, steps, -1)
    per_step = np.concatenate([aw, bw], axis=2).reshape(inst, -1)
    return np.ascontiguousarray(np.concatenate([cw, per_step], axis=1)).ravel(), cw.shape[1], \
        aw.shape[2], bw.shape[2]


def unpack(form, out: np.ndarray, inst: int) -> np.ndarray:
    """Output words -> (inst, M, N) element bits of the accumulator type."""
    _, kind, shape, t, ct = form
    lay = _acc_layout(kind, shape, ct)
    el = _unwords(out.reshape(inst, lay.shape[0], -1), ct)
    mat = np.zeros((inst, shape[0], shape[1]), el.dtype)
    mat[:, lay[..., 0], lay[..., 1]] = el
    return mat


# ---- kernels -----------------------------------------------------------------------------------

_HEAD = ".version 8.8\n.target {arch}\n.address_size 64\n\n"


def _regs(prefix, n):
    return "{" + ", ".join(f"%{prefix}{i}" for i in range(n)) + "}"


def _loads(prefix, n, ptr, t="b32"):
    return "".join(f"\tld.global.{t} %{prefix}{i}, [{ptr}+{4 * i}];\n" for i in range(n))


def kernel(form, name: str, nc: int, na: int, nb: int) -> str:
    """The PTX of one form's kernel (params: in, out, steps)."""
    _, kind, (m, n, k), t, ct = form
    threads = 32 if kind == "mma" else 128
    dt = "f32" if ct == "f32" else "b32"
    step_words = threads * na + (threads * nb if kind == "mma" else nb)
    head = (f".visible .entry {name}(.param .u64 p_in, .param .u64 p_out, .param .u32 p_steps)\n{{\n"
            f"\t.reg .{dt} %c<{nc}>;\n\t.reg .b32 %a<{na}>;\n\t.reg .b32 %b<{max(nb, 1)}>;\n"
            "\t.reg .b32 %r<16>;\n\t.reg .b64 %rd<16>;\n\t.reg .pred %p<4>;\n")
    if kind == "wgmma":
        head += f"\t.shared .align 128 .b8 sB[{nb * 4}];\n"
    body = ("\tld.param.u64 %rd1, [p_in];\n\tcvta.to.global.u64 %rd1, %rd1;\n"
            "\tld.param.u64 %rd2, [p_out];\n\tcvta.to.global.u64 %rd2, %rd2;\n"
            "\tld.param.u32 %r1, [p_steps];\n\tmov.u32 %r2, %tid.x;\n\tmov.u32 %r3, %ctaid.x;\n"
            f"\tmul.lo.u32 %r4, %r1, {step_words};\n\tadd.u32 %r4, %r4, {threads * nc};\n"
            "\tmul.wide.u32 %rd3, %r4, %r3;\n\tshl.b64 %rd3, %rd3, 2;\n\tadd.u64 %rd4, %rd1, %rd3;\n"
            f"\tmul.wide.u32 %rd5, %r2, {4 * nc};\n\tadd.u64 %rd5, %rd4, %rd5;\n"
            + _loads("c", nc, "%rd5", dt) +
            f"\tadd.u64 %rd6, %rd4, {4 * threads * nc};\n\tmov.u32 %r7, 0;\n")
    shape = f"m{m}n{n}k{k}"
    if kind == "mma":
        loop = (f"\tmul.wide.u32 %rd8, %r2, {4 * na};\n\tadd.u64 %rd8, %rd6, %rd8;\n" + _loads("a", na, "%rd8")
                + f"\tmul.wide.u32 %rd9, %r2, {4 * nb};\n\tadd.u64 %rd9, %rd6, %rd9;\n"
                f"\tadd.u64 %rd9, %rd9, {4 * threads * na};\n" + _loads("b", nb, "%rd9")
                + f"\tmma.sync.aligned.{shape}.row.col.{ct}.{t}.{t}.{ct} {_regs('c', nc)}, "
                f"{_regs('a', na)}, {_regs('b', nb)}, {_regs('c', nc)};\n")
    else:
        desc = encode_descriptor(0, LBO, SBO)
        copy = ""
        for i in range(-(-nb // threads)):
            copy += (f"\tadd.u32 %r8, %r2, {threads * i};\n\tsetp.lt.u32 %p2, %r8, {nb};\n"
                     "\tmul.wide.u32 %rd10, %r8, 4;\n\tadd.u64 %rd10, %rd10, %rd11;\n"
                     "\tshl.b32 %r9, %r8, 2;\n\tadd.u32 %r9, %r9, %r5;\n"
                     "\t@%p2 ld.global.b32 %r10, [%rd10];\n\t@%p2 st.shared.b32 [%r9], %r10;\n")
        body += ("\tmov.u32 %r5, sB;\n\tshr.u32 %r6, %r5, 4;\n\tand.b32 %r6, %r6, 16383;\n"
                 f"\tcvt.u64.u32 %rd7, %r6;\n\tor.b64 %rd7, %rd7, {desc};\n\tsetp.eq.u32 %p3, %r2, %r2;\n")
        loop = (f"\tmul.wide.u32 %rd8, %r2, {4 * na};\n\tadd.u64 %rd8, %rd6, %rd8;\n" + _loads("a", na, "%rd8")
                + f"\tadd.u64 %rd11, %rd6, {4 * threads * na};\n\tbar.sync 0;\n" + copy
                + "\tfence.proxy.async.shared::cta;\n\tbar.sync 0;\n\twgmma.fence.sync.aligned;\n"
                f"\twgmma.mma_async.sync.aligned.{shape}.{ct}.{t}.{t} {_regs('c', nc)}, {_regs('a', na)}, "
                "%rd7, %p3, 1, 1, 0;\n\twgmma.commit_group.sync.aligned;\n\twgmma.wait_group.sync.aligned 0;\n")
    body += ("LOOP:\n\tsetp.ge.u32 %p1, %r7, %r1;\n\t@%p1 bra DONE;\n" + loop
             + f"\tadd.u64 %rd6, %rd6, {4 * step_words};\n\tadd.u32 %r7, %r7, 1;\n\tbra LOOP;\nDONE:\n"
             f"\tmul.lo.u32 %r11, %r3, {threads * nc};\n\tmad.lo.u32 %r11, %r2, {nc}, %r11;\n"
             "\tmul.wide.u32 %rd12, %r11, 4;\n\tadd.u64 %rd12, %rd2, %rd12;\n"
             + "".join(f"\tst.global.{dt} [%rd12+{4 * i}], %c{i};\n" for i in range(nc)) + "\tret;\n}\n")
    return head + body


# ---- one test: the GPU, the interpreter, the host model ----------------------------------------

def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "little")


class Test:
    """One (form, class): inputs, packed words, the kernel."""

    def __init__(self, form, cls, inst, steps):
        self.form, self.cls, self.inst, self.steps = form, cls, inst, steps
        _, kind, shape, t, ct = form
        self.kind, self.shape, self.t, self.ct = kind, shape, t, ct
        self.threads = 32 if kind == "mma" else 128
        self.A, self.B, self.C = inputs(cls, t, ct, shape, inst, steps, _seed(form[0], cls))
        self.buf, nc, na, nb = pack(form, self.A, self.B, self.C)
        self.nc = nc // self.threads
        self.name = "tc_" + form[0].replace(".", "_")
        self.arch = "sm_80" if kind == "mma" else "sm_90a"
        self.ptx = _HEAD.format(arch=self.arch) + kernel(form, self.name, self.nc, na // self.threads,
                                                        nb // self.threads if kind == "mma" else nb)

    def out_words(self, inst):
        return np.zeros(inst * self.threads * self.nc, np.uint32)

    def model(self, var) -> np.ndarray:
        """(inst, M, N) element bits of the host model's result under variant ``var``."""
        D = self.C
        for s in range(self.steps):
            D = tcmodel.matmul(to_type(self.A[:, s], self.t), self.B[:, s], D, self.t, self.ct, var)
        return _bits(D, self.ct)


def run_gpu(test: Test) -> np.ndarray:
    import cupy
    mod = cupy.cuda.function.Module()
    mod.load(test.ptx.encode())
    fn = mod.get_function(test.name)
    dbuf, dout = cupy.asarray(test.buf), cupy.asarray(test.out_words(test.inst))
    fn((test.inst, 1, 1), (test.threads, 1, 1), (dbuf, dout, np.uint32(test.steps)))
    cupy.cuda.get_current_stream().synchronize()
    return dout.get()


def run_interp(test: Test, inst: int) -> np.ndarray:
    from ..program import Program, launch
    out = test.out_words(inst)
    launch(Program(test.ptx), test.name, inst, test.threads,
           (test.buf.copy(), out, np.uint32(test.steps)), echo_printf=False)
    return out


def _sizes(kind, steps, quick):
    """(instances on the GPU, instances on the interpreter)."""
    if kind == "mma":
        return (16, 4) if quick else ((32, 8) if steps > 1 else (256, 64))
    return (2, 1) if quick else ((4, 2) if steps > 1 else (16, 4))


def check(form, cls, steps, gpu, quick: bool = False, examples: int = 4) -> dict:
    """One (form, class): the GPU against the interpreter (word for word) and against the host
    model's variants (element for element); without a GPU, the interpreter against the model.
    ``gpu="fake"`` runs the interpreter in the GPU's place (a self-test of the pipeline)."""
    n_gpu, n_int = _sizes(form[1], steps, quick)
    test = Test(form, cls, n_gpu if gpu else n_int, steps)
    t0 = time.time()
    res = {"form": form[0], "class": cls, "steps": steps, "instances": test.inst}
    mine = run_interp(test, min(n_int, test.inst))
    res["interp_s"] = round(time.time() - t0, 2)
    models = {k: test.model(v) for k, v in tcmodel.NEIGHBOURS.items()}
    mine_el = unpack(form, mine, len(mine) // (test.threads * test.nc))
    res["interp_vs_model_h100"] = int((mine_el != models["h100"][:len(mine_el)]).sum())
    if not gpu:
        return res
    try:
        hw = run_interp(test, test.inst) if gpu == "fake" else run_gpu(test)
    except Exception as e:                                         # noqa: BLE001
        res["gpu_error"] = f"{type(e).__name__}: {str(e)[:400]}"
        return res
    hw_el = unpack(form, hw, test.inst)
    res["elements"] = int(hw_el.size)
    res["interp_elements"] = int(mine_el.size)
    diff = np.argwhere(hw_el[:len(mine_el)] != mine_el)
    res["interp_vs_gpu"] = int(len(diff))
    res["model_vs_gpu"] = {k: int((v != hw_el).sum()) for k, v in models.items()}
    with tcmodel.model("exact"):
        res["model_vs_gpu"]["exact_rn"] = int((test.model(None) != hw_el).sum())
    res["examples"] = []
    for i, r, c in diff[:examples]:
        ex = {"instance": int(i), "row": int(r), "col": int(c), "gpu": hex(int(hw_el[i, r, c])),
              "interp": hex(int(mine_el[i, r, c]))}
        if steps == 1:
            ex["a_row"] = [hex(int(x)) for x in _bits(to_type(test.A[i, 0, r], test.t), test.t)]
            ex["b_col"] = [hex(int(x)) for x in _bits(test.B[i, 0, :, c], test.t)]
            ex["c"] = hex(int(_bits(test.C[i, r, c], test.ct)))
        res["examples"].append(ex)
    res["gpu_bits"] = hw_el
    return res


def run(gpu, quick: bool = False, log=print) -> list:
    """Every form x class; returns the per-test results (``gpu_bits`` arrays included). Logs one
    line per form: the differing elements of each class (interpreter vs GPU, or vs the model)."""
    out = []
    for form in FORMS:
        line = []
        for cls, s_mma, s_wg in CLASSES:
            steps = s_mma if form[1] == "mma" else s_wg
            try:
                r = check(form, cls, steps, gpu or None, quick)
            except Exception as e:                                 # noqa: BLE001
                r = {"form": form[0], "class": cls, "steps": steps,
                     "error": f"{type(e).__name__}: {str(e)[:400]}"}
            out.append(r)
            bad = r.get("interp_vs_gpu", r.get("interp_vs_model_h100", "?"))
            line.append(f"{cls} {bad}" + (f" (ERROR {r['error'][:150]})" if "error" in r else "")
                        + (f" (GPU ERROR {r['gpu_error'][:150]})" if "gpu_error" in r else ""))
        log(f"  {form[0]:26s} " + ", ".join(line))
    return out


# ---- the published validation vectors ----------------------------------------------------------

def published(root, gpus=("H100", "H200")) -> dict:
    """Score :mod:`.tcmodel` on the H100/H200 test vectors Khattak and Mikaitis published with
    their models (``model_validation/<GPU>/<fp16|bf16|tf32>/`` of
    github.com/north-numerical-computing/MATLAB-tensor-core: per line, one row of A and one column
    of B as f32 hex words, converted to the input type as their CUDA bench does, C and the
    tensor core's D as 32-character bit strings). Returns {"GPU type out": (vectors, differing)}."""
    from pathlib import Path

    def hexes(p):
        return np.array([[int(x, 16) for x in ln.split()] for ln in open(p)], np.uint32) \
            .view(np.float32).astype(np.float64)

    def bitstr(p):
        return np.array([int(ln.strip(), 2) for ln in open(p) if ln.strip()], np.uint32)
    out = {}
    for g in gpus:
        for t, it in (("fp16", "f16"), ("bf16", "bf16"), ("tf32", "tf32")):
            d = Path(root) / g / t
            if not (d / f"a_{g}_{t}.txt").exists():
                continue
            A, B = to_type(hexes(d / f"a_{g}_{t}.txt"), it), to_type(hexes(d / f"b_{g}_{t}.txt"), it)
            C = bitstr(d / f"c_{g}_fp32.txt").view(np.float32).astype(np.float64)
            for o, ct in (("fp32", "f32"), ("fp16", "f16")):
                f = d / f"d_{g}_{o}.txt"
                if not f.exists():
                    continue
                c = C if ct == "f32" else to_type(C, "f16")
                D = tcmodel.matmul(A[:, None, :], B[:, :, None], c[:, None, None], it, ct)[:, 0, 0]
                D = D.astype(np.float32) if ct == "f32" else D.astype(np.float16).astype(np.float32)
                want = bitstr(f)
                out[f"{g} {t} {o}"] = (len(want), int((D.view(np.uint32) != want).sum()))
    return out


# ---- regression data from a hardware record ----------------------------------------------------

def regression_record(gpu_bits, out, old=None, per_test: int = 48, keep: int = 16) -> dict:
    """Compact regression data from a GPU run's ``tensor_cores_gpu_bits.npz``: for every
    one-step (form, class) where the GPU differs from ``old`` (a function (test) -> model bits;
    default: the current model), ``per_test`` differing elements and ``keep`` agreeing ones, each
    as its row of A, column of B (input bits), C and the GPU's D (accumulator bits), plus the
    GPU's words of instance 0 (``<key>|inst0``, to replay the kernel on the interpreter). Writes
    ``out`` (npz, compressed) and returns {key: differing elements}."""
    z = np.load(gpu_bits)
    rng = np.random.default_rng(0)
    arrays, counts = {}, {}
    for form in FORMS:
        for cls, s_mma, s_wg in CLASSES:
            steps = s_mma if form[1] == "mma" else s_wg
            key = f"{form[0]}|{cls}"
            if steps != 1 or key not in z.files:
                continue
            hw = z[key]
            test = Test(form, cls, hw.shape[0], steps)
            bad = hw != (old(test) if old else test.model(tcmodel.H100))
            if not bad.any():
                continue
            counts[key] = int(bad.sum())
            pick = []
            for mask, n in ((bad, per_test), (~bad, keep)):
                idx = np.argwhere(mask)
                pick.append(idx[rng.choice(len(idx), min(n, len(idx)), replace=False)])
            i, r, c = np.concatenate(pick).T
            A = to_type(test.A[:, 0], test.t)
            arrays[key + "|a"] = _bits(A[i, r, :], test.t)
            arrays[key + "|b"] = _bits(test.B[i, 0, :, c], test.t)
            arrays[key + "|c"] = _bits(test.C[i, r, c], test.ct)
            arrays[key + "|d"] = hw[i, r, c]
            arrays[key + "|inst0"] = hw[0]
    np.savez_compressed(out, **arrays)
    return counts
