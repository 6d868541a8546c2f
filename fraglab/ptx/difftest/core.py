"""Differential testing of the PTX interpreter against the hardware, one small generated kernel
per accepted instruction combination (opcode x modifiers x types).

``python -m fraglab.ptx.difftest record --out DIR`` (on a GPU machine, from the repository
root, ``PYTHONPATH=.``) runs every generated kernel on the GPU through CuPy and on the
interpreter (a process pool), and writes ``DIR/ptx_differential.npz`` (the GPU's outputs, LZMA
compressed, with each combination's input hash) and ``DIR/differences.json`` (every combination
where the two differ, with examples); it prints progress, the differences and the coverage.
``tests/test_ptx_differential.py`` replays the record on the CPU (``tests/data/``).

Generators: :mod:`.gen` (data path), :mod:`.mem` (memory, collectives);
inputs: :mod:`.values`; comparison: :mod:`.rules`; kernel layout:
:mod:`.case`. Combinations that a one-instruction kernel cannot test meaningfully
(control flow, barriers, asynchronous copies, tensor-core and matrix instructions, calls) are
mapped to the GPU test that covers them in :data:`COVERED_BY`."""
from __future__ import annotations

import json
import lzma
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

from . import gen as difftest_gen, mem as difftest_mem, misc as difftest_misc, rules as difftest_rules
from .case import Case, module, pack, split_outputs
from .gen import NoTest

#: the committed H100 record (FRAGLAB_PTX_RECORD overrides, e.g. to replay a fresh one)
RECORD = Path(os.environ.get("FRAGLAB_PTX_RECORD")
              or Path(__file__).resolve().parents[3] / "tests" / "data" / "ptx_differential.npz")
CHUNK = 48                   # combinations per module (and per CPU test unit)

#: opcode (or regular expression over the full opcode) -> the GPU test that checks it against
#: the hardware, for what a one-instruction kernel cannot test (tests/test_ptx_differential.py
#: checks that each named test exists and mentions the opcode)
COVERED_BY = {
    # entries: test, or (test, word, ...) where the test must mention one of the words (the
    # opcode by default; bar.arrive is barrier.arrive.aligned)
    "bar.arrive": ("tests/test_ptx_hopper.py::test_named_barrier_orders_producer_and_consumer", "bar.arrive"),
    r"barrier(\.cta)?\.arrive(\.aligned)?": (
        "tests/test_ptx_hopper.py::test_named_barrier_orders_producer_and_consumer", "bar.arrive"),
    "mma": "tests/test_ptx_gpu.py::test_mma_f64_and_s8_match_the_gpu",
    "wmma": "tests/test_ptx_gpu.py::test_wmma_products_close_to_the_gpu",
    "setmaxnreg": "tests/test_ptx_hopper.py::test_elect_setmaxnreg_stmatrix_griddepcontrol",
    "wgmma": "tests/test_ptx_hopper.py::test_wgmma_shapes_types_and_scales",
    "mbarrier": "tests/test_ptx_hopper.py::test_mbarrier_phases_tokens_parity_and_transactions",
    # the TMA: a tensor map and a box, not one instruction's inputs (the building block's cases)
    r"cp\.async\.bulk\.tensor[\w.:]*": (
        "tests/test_10_fa3_pipelining_tma_tile.py::test_tma_tile_on_the_gpu", "cp.async.bulk.tensor"),
    "prefetch.tensormap": (
        "tests/test_10_fa3_pipelining_tma_tile.py::test_tma_tile_on_the_gpu", "prefetch.tensormap"),
    r"cp\.async\.(bulk|mbarrier)[\w.:]*": (
        "tests/test_ptx_hopper.py::test_producer_consumer_ring_through_bulk_copies", "cp.async.bulk"),
}


# ---- the combinations ------------------------------------------------------------------------

def _standin() -> list[str]:
    """A small list of combinations, used until :mod:`fraglab.ptx.accepted` exists."""
    out = []
    for op in ("add", "sub", "mul"):
        out += [f"{op}{r}{f}{s}.f32" for r in ("", ".rn", ".rz", ".rm", ".rp") for f in ("", ".ftz")
                for s in ("", ".sat")]
        out += [f"{op}{r}.f64" for r in ("", ".rn", ".rz", ".rm", ".rp")]
        out += [f"{op}{r}{f}.{t}" for t in ("f16", "f16x2") for r in ("", ".rn") for f in ("", ".ftz")]
        out += [f"{op}{r}.{t}" for t in ("bf16", "bf16x2") for r in ("", ".rn")]
        lo = ".lo" if op == "mul" else ""
        out += [f"{op}{lo}.{t}" for t in ("s16", "u16", "s32", "u32", "s64", "u64")]
    out += ["add.sat.s32", "sub.sat.s32", "mul.hi.s32", "mul.hi.u64", "mul.wide.s32", "mul.wide.u16",
            "mul24.lo.s32", "mul24.hi.u32", "mad.lo.s32", "mad.wide.u32", "mad.hi.s64", "mad24.lo.s32"]
    out += [f"fma.{r}{f}{s}.f32" for r in ("rn", "rz", "rm", "rp") for f in ("", ".ftz") for s in ("", ".sat")]
    out += ["fma.rn.f64", "fma.rz.f64", "fma.rn.f16", "fma.rn.f16x2", "fma.rn.bf16", "fma.rn.bf16x2",
            "fma.rn.relu.f16", "fma.rn.relu.bf16x2", "mad.rn.f32"]
    out += [f"div.{m}.f32" for m in ("rn", "rz", "rm", "rp", "approx", "full", "approx.ftz", "full.ftz",
                                     "rn.ftz")] + ["div.rn.f64", "div.s32", "div.u64", "rem.s32", "rem.u16"]
    out += [f"{op}{n}.{t}" for op in ("min", "max") for n in ("", ".NaN") for t in ("f32", "f16", "bf16x2")]
    out += ["min.f64", "max.ftz.f32", "min.xorsign.abs.f32", "min.s32", "max.u64", "min.s16"]
    out += [f"{op}.approx{f}.f32" for op in ("ex2", "lg2", "sin", "cos", "rcp", "sqrt", "rsqrt")
            for f in ("", ".ftz")]
    out += ["tanh.approx.f32", "tanh.approx.f16", "tanh.approx.bf16x2", "ex2.approx.f16", "ex2.approx.ftz.bf16",
            "rcp.rn.f32", "rcp.rz.ftz.f32", "rcp.rn.f64", "sqrt.rn.f32", "sqrt.rm.f64", "rcp.approx.ftz.f64",
            "rsqrt.approx.f64", "neg.f32", "abs.ftz.f32", "neg.f16x2", "abs.bf16", "neg.s32", "abs.s64",
            "copysign.f32", "copysign.f64", "testp.finite.f32", "testp.subnormal.f64", "testp.notanumber.f32"]
    out += ["and.b32", "or.b64", "xor.b16", "not.b32", "cnot.b32", "and.pred", "not.pred", "shl.b32",
            "shl.b64", "shr.u32", "shr.s32", "shr.s64", "shf.l.wrap.b32", "shf.r.clamp.b32", "lop3.b32",
            "prmt.b32", "prmt.b32.f4e", "prmt.b32.rc16", "bfe.u32", "bfe.s32", "bfe.s64", "bfi.b32", "bfi.b64",
            "popc.b32", "popc.b64", "clz.b32", "clz.b64", "brev.b32", "bfind.u32", "bfind.s32",
            "bfind.shiftamt.u32", "sad.u32", "sad.s32", "dp4a.s32.s32", "dp4a.u32.s32", "dp2a.lo.s32.s32",
            "dp2a.hi.u32.u32"]
    out += ["setp.lt.f32", "setp.equ.f32", "setp.ne.ftz.f32", "setp.num.f64", "setp.lt.and.s32",
            "setp.ge.u32", "setp.lo.u64", "setp.eq.f16", "setp.gtu.bf16", "setp.le.s16", "set.lt.u32.f32",
            "selp.b32", "selp.f64", "slct.f32.s32", "slct.s32.f32", "mov.b32", "mov.pred", "mov.f64"]
    out += ["cvt.rn.f16.f32", "cvt.rz.f16.f32", "cvt.rm.f16.f32", "cvt.rp.f16.f32", "cvt.f32.f16",
            "cvt.rn.bf16.f32", "cvt.rz.bf16.f32", "cvt.f32.bf16", "cvt.rn.f32.f64", "cvt.f64.f32",
            "cvt.rni.s32.f32", "cvt.rzi.s32.f32", "cvt.rmi.u32.f64", "cvt.rpi.s64.f32", "cvt.rzi.u64.f64",
            "cvt.rn.f32.s32", "cvt.rz.f32.u32", "cvt.rn.f64.s64", "cvt.rn.f32.u64", "cvt.rni.f32.f32",
            "cvt.rzi.ftz.f32.f32", "cvt.sat.f32.f32", "cvt.rn.f16x2.f32", "cvt.rn.bf16x2.f32",
            "cvt.rn.relu.bf16x2.f32", "cvt.rna.tf32.f32", "cvt.s8.s32", "cvt.u16.u32", "cvt.s32.s8",
            "cvt.sat.s8.s32", "cvt.u64.u32", "cvt.s64.s32", "cvt.rzi.s8.f32", "cvt.rn.f16.s32",
            "cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.f16x2.e5m2x2", "cvt.pack.sat.u8.s32.b32"]
    out += ["ld.global.f32", "ld.global.v4.f32", "ld.global.v2.u64", "ld.global.nc.v4.u32", "ld.global.u8",
            "ld.global.s8", "ld.global.s16", "ld.shared.v4.f32", "ld.shared.u32", "ld.local.f64",
            "ld.local.v2.f32", "ld.const.f32", "ld.const.v2.b32", "ld.param.u64", "ld.param.f32", "ld.f32",
            "ld.v2.f32", "ld.volatile.global.u32", "ldu.global.f32", "ld.global.L2::cache_hint.b32",
            "st.global.f32", "st.global.v4.f32", "st.global.u8", "st.shared.v2.f64", "st.local.u16",
            "st.v4.b32", "st.volatile.shared.u32", "st.global.L2::cache_hint.v2.b32",
            "atom.global.add.u32", "atom.global.add.f32", "atom.shared.add.u64", "atom.global.min.s32",
            "atom.global.max.u32", "atom.global.exch.b32", "atom.global.cas.b32", "atom.shared.cas.b64",
            "atom.global.inc.u32", "atom.global.dec.u32", "atom.global.and.b32", "atom.add.f64",
            "red.global.add.u32", "red.shared.add.f32", "red.global.or.b64", "cvta.to.global.u64",
            "cvta.shared.u64", "cvta.to.shared.u64", "cvta.local.u64", "isspacep.shared",
            "shfl.sync.idx.b32", "shfl.sync.up.b32", "shfl.sync.down.b32", "shfl.sync.bfly.b32",
            "vote.sync.all.pred", "vote.sync.any.pred", "vote.sync.uni.pred", "vote.sync.ballot.b32",
            "match.any.sync.b32", "match.all.sync.b64", "redux.sync.add.u32", "redux.sync.min.s32",
            "redux.sync.xor.b32", "activemask.b32", "elect.sync", "bra", "bar.sync", "ret",
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"]
    return out


def combinations() -> list[str]:
    """Every accepted combination's full opcode (from :mod:`fraglab.ptx.accepted` when it
    exists, else a stand-in list), sorted, without repeats."""
    try:
        from .. import accepted
    except ImportError:
        return sorted(set(_standin()))
    return sorted({c.text for c in accepted.combinations()})


def covered_by(text: str):
    """The GPU test of :data:`COVERED_BY` that covers `text`, or None."""
    base = text.split(".")[0]
    for key, test in COVERED_BY.items():
        if key == base or key == text or re.fullmatch(key, text):
            return test if isinstance(test, str) else test[0]
    return None


def build(text: str) -> Case:
    """The generated test of one combination (raises NoTest)."""
    base = text.split(".")[0]
    if difftest_misc.handles(text):
        case = difftest_misc.build(text)
    else:
        gen = difftest_mem if base in difftest_mem.GENERATORS else difftest_gen
        case = gen.build(text)
    if difftest_gen.arch_for(text) == "sm_90":
        case.arch = "sm_90"
    case.rules = difftest_rules.rules_for(text, case.dsts)
    return case


def _family_order(text: str):
    """Variants that differ only in memory ordering, scope or the spelling of a space come
    next to each other (so that they pack into one kernel): sort by types, then the other
    modifiers, then the variant ones."""
    base, mods, types = difftest_gen.split(text)
    plain = tuple(m for m in mods if m not in difftest_mem.VARIANT)
    return types, plain, text


def families(combos=None) -> dict:
    """{family id: [combination, ...]}: the tested combinations by opcode, in chunks of at most
    :data:`CHUNK` ('cvt', 'cvt.1', ...); the units of modules and of the CPU test."""
    combos = combinations() if combos is None else combos
    by: dict = {}
    for c in combos:
        if covered_by(c) is None:
            by.setdefault(c.split(".")[0], []).append(c)
    out = {}
    for base, cs in sorted(by.items()):
        cs = sorted(cs, key=_family_order)
        for i in range(0, len(cs), CHUNK):
            out[base if i == 0 else f"{base}.{i // CHUNK}"] = cs[i:i + CHUNK]
    return out


def kernel_name(text: str) -> str:
    return "k_" + re.sub(r"[^A-Za-z0-9]", "_", text)


def build_family(combos) -> tuple[dict, dict]:
    """({combo: Case}, {combo: why not generated})."""
    cases, missing = {}, {}
    for c in combos:
        try:
            cases[c] = build(c)
        except NoTest as e:
            missing[c] = str(e)
    return cases, missing


def packed(cases: dict) -> dict:
    """{arch: (PTX text, [(kernel name, Case, parts)])}: the kernels of `cases` packed
    (:func:`~.case.pack`), one module per target."""
    by: dict = {}
    for c, case in cases.items():
        by.setdefault(case.arch, {})[c] = case
    out = {}
    for arch, cs in by.items():
        ks = [(kernel_name(name), case, parts) for name, case, parts in pack(cs)]
        out[arch] = (module([k[1] for k in ks], [k[0] for k in ks], arch), ks)
    return out


def modules(cases: dict) -> dict:
    """{arch: PTX text} of the (packed) kernels of `cases`, one module per target."""
    return {arch: text for arch, (text, _) in packed(cases).items()}


def launch_args(case: Case, buf, gpu: bool = False):
    """The kernel's arguments: the io buffer, then the by-value parameters (bytes for the
    interpreter; for CuPy a NumPy scalar of the parameter's size, which it passes by its bits)."""
    if not gpu:
        return (buf,) + tuple(raw for _, raw in case.params)
    scalar = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.complex128}
    return (buf,) + tuple(np.frombuffer(raw, scalar[len(raw)])[0] for _, raw in case.params)


# ---- running -------------------------------------------------------------------------------

def run_interp(cases: dict) -> dict:
    """{combo: list of output arrays, or an error string} on the interpreter (each module
    parsed once, each kernel decoded once)."""
    from ..program import Program, launch
    out = {}
    for arch, (text, kernels) in packed(cases).items():
        try:
            prog = Program(text)
        except Exception as e:                                     # noqa: BLE001
            for _, _, parts in kernels:
                out.update(split_outputs(parts, f"parse: {type(e).__name__}: {e}"))
            continue
        for name, case, parts in kernels:
            buf = case.buffer()
            try:
                launch(prog, name, 1, case.threads, launch_args(case, buf), echo_printf=False)
                res = case.outputs(buf)
            except Exception as e:                                 # noqa: BLE001
                res = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
            out.update(split_outputs(parts, res))
    return out


def _gpu_launch(mod, name, case):
    import cupy
    dev = cupy.asarray(case.buffer())
    mod.get_function(name)((1, 1, 1), (case.threads, 1, 1), launch_args(case, dev, True))
    cupy.cuda.get_current_stream().synchronize()
    return case.outputs(dev.get())


def _gpu_load(text):
    import cupy
    m = cupy.cuda.function.Module()
    m.load(text.encode())
    return m


def run_gpu(cases: dict) -> dict:
    """{combo: list of output arrays, or an error string} on the GPU (CuPy): one module per
    target; if it fails to load, each packed kernel alone, and if that fails, each combination
    alone, so that a kernel the driver rejects takes no other combination with it."""
    out = {}
    for arch, (text, kernels) in packed(cases).items():
        try:
            whole = _gpu_load(text)
        except Exception:                                          # noqa: BLE001
            whole = None
        for name, case, parts in kernels:
            todo = [(name, case, parts, whole)]
            if whole is None:
                try:
                    todo = [(name, case, parts, _gpu_load(module([case], [name], arch)))]
                except Exception as e:                             # noqa: BLE001
                    if len(parts) == 1:
                        out[parts[0][0]] = f"JIT: {type(e).__name__}: {str(e)[:300]}"
                        continue
                    todo = []
                    for c, _ in parts:
                        one = build(c)
                        try:
                            todo.append((kernel_name(c), one, [(c, len(one.dsts))],
                                         _gpu_load(module([one], [kernel_name(c)], arch))))
                        except Exception as e2:                    # noqa: BLE001
                            out[c] = f"JIT: {type(e2).__name__}: {str(e2)[:300]}"
            for nm, cs, ps, m in todo:
                try:
                    res = _gpu_launch(m, nm, cs)
                except Exception as e:                             # noqa: BLE001
                    res = f"launch: {type(e).__name__}: {str(e)[:300]}"
                out.update(split_outputs(ps, res))
    return out


# ---- comparing -----------------------------------------------------------------------------

def compare_case(case: Case, gpu, mine, examples: int = 4) -> dict:
    """{'bad': n, 'unspecified': n, 'examples': [...]} for one combination."""
    if isinstance(mine, str) or isinstance(gpu, str):
        return {"bad": case.n, "unspecified": 0, "error": mine if isinstance(mine, str) else None,
                "gpu_error": gpu if isinstance(gpu, str) else None, "examples": []}
    ins = [a for _, a in case.srcs]
    bad_n = uns_n = 0
    ex = []
    for o, (t, rule) in enumerate(zip(case.dsts, case.rules)):
        g, m = gpu[o], mine[o]
        bad, uns = difftest_rules.compare(rule, t, g, m, ins, case.combo)
        bad_n += int(bad.sum())
        uns_n += int(uns.sum())
        for j in np.flatnonzero(bad)[:max(0, examples - len(ex))]:
            w = 2 * g.dtype.itemsize
            ex.append({"element": int(j), "output": o, "inputs": [f"{int(a[j]):#0{2 * a.dtype.itemsize + 2}x}"
                                                                  for a in ins],
                       "gpu": f"{int(g[j]):#0{w + 2}x}", "interp": f"{int(m[j]):#0{w + 2}x}"})
    return {"bad": bad_n, "unspecified": uns_n, "examples": ex}


# ---- the record ----------------------------------------------------------------------------

def save_record(path: Path, cases: dict, gpu: dict, meta: dict) -> int:
    """Write the GPU outputs (each combination's output bytes, in opcode order, the whole
    LZMA-compressed: variants of an instruction repeat each other, which LZMA's window finds)
    and the index (JSON: per combination its target, element count, output widths, input hash,
    and where its bytes are; or the error). Returns the file size."""
    index, chunks, pos = {}, [], 0
    for c in sorted(cases):
        case, res = cases[c], gpu.get(c, "not run")
        entry = {"arch": case.arch, "n": case.n, "w": case.widths, "hash": case.input_hash()}
        if isinstance(res, str):
            entry["error"] = res
        else:
            raw = b"".join(np.ascontiguousarray(a).tobytes() for a in res)
            entry.update(off=pos, len=len(raw))
            chunks.append(raw)
            pos += len(raw)
        index[c] = entry
    blob = lzma.compress(b"".join(chunks), preset=9 | lzma.PRESET_EXTREME)
    path.parent.mkdir(parents=True, exist_ok=True)
    idx = lzma.compress(json.dumps({"meta": meta, "cases": index}, separators=(",", ":")).encode())
    np.savez(path, blob=np.frombuffer(blob, np.uint8), index=np.frombuffer(idx, np.uint8))
    return path.stat().st_size


class Record:
    """A saved record: ``rec.meta``, ``rec.entry(combo)`` (index entry or None),
    ``rec.outputs(combo)`` (the GPU's output arrays, or the error string)."""

    def __init__(self, path: Path = RECORD):
        with np.load(path) as z:
            idx = json.loads(lzma.decompress(z["index"].tobytes()))
            self._raw = lzma.decompress(z["blob"].tobytes())
        self.meta, self.cases = idx["meta"], idx["cases"]

    def entry(self, combo):
        return self.cases.get(combo)

    def _bytes(self, combo) -> np.ndarray:
        e = self.cases[combo]
        return np.frombuffer(self._raw, np.uint8, e["len"], e["off"])

    def outputs(self, combo):
        e = self.cases[combo]
        if "error" in e:
            return e["error"]
        raw, out, pos = self._bytes(combo), [], 0
        for w in e["w"]:
            dt = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[w]
            out.append(raw[pos:pos + w * e["n"]].copy().view(dt))
            pos += w * e["n"]
        return out


def missing_message(combo: str) -> str:
    return f"no H100 record for {combo}: run `python -m fraglab.ptx.difftest record` on a GPU"


def check_family(family_combos, record: Record | None) -> tuple[list, dict]:
    """Replay one family on the interpreter against `record`: (problems, interpreter outputs)."""
    cases, missing = build_family(family_combos)
    mine = run_interp(cases)
    return replay(cases, missing, mine, record), mine


def replay(cases: dict, missing: dict, mine: dict, record: Record | None) -> list:
    """The problems of the interpreter's outputs `mine` against the GPU `record`: combinations
    with no test, no record, changed inputs, a failed GPU run, or elements that differ."""
    problems = [f"{c}: no generated test ({why}) and no GPU test in COVERED_BY" for c, why in missing.items()]
    if record is None:
        return problems + [missing_message(c) for c in cases]
    if str(record.meta.get("device", "")).startswith("FAKE"):
        problems.append("the record is a pipeline self-test (--fake-gpu), not a GPU's outputs")
    for c, case in cases.items():
        e = record.entry(c)
        if e is None:
            problems.append(missing_message(c))
        elif e["hash"] != case.input_hash():
            problems.append(f"{c}: the generated inputs changed since the H100 record (hash {e['hash']} "
                            f"-> {case.input_hash()}): run `python -m fraglab.ptx.difftest record` on a GPU")
        elif "error" in e:
            why = (" (the driver rejected the PTX: the interpreter accepts a combination the hardware does "
                   "not; `python -m fraglab.ptx.difftest ptxas` shows ptxas's reason)") if e["error"].startswith("JIT") else ""
            problems.append(f"{c}: the GPU run failed when recorded: {e['error']}{why}")
        else:
            r = compare_case(case, record.outputs(c), mine[c])
            if r["bad"]:
                problems.append(f"{c}: {r['bad']} of {case.n} elements differ from the H100"
                                + (f" ({r['error']})" if r.get("error") else "")
                                + "".join(f"\n    element {x['element']} output {x['output']}: inputs "
                                          f"{' '.join(x['inputs'])} gpu {x['gpu']} interp {x['interp']}"
                                          for x in r["examples"]))
    return problems

