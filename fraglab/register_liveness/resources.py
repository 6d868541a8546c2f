"""What each variant costs in registers, from the compiler alone (no GPU): ptxas's registers and
spill bytes (:attr:`fraglab.toolchain.Build.resources`), the local-memory loads and stores
counted in the SASS (``LDL``/``STL``: spills, and nothing else in these kernels), and the
occupancy those registers and the shared memory allow on an H100 (65536 registers, 228 KB of
shared memory a SM; :func:`fraglab.sass.occupancy`).

    row = resources("qreg", 256)             # {"registers": 255, "spill_stores": ..., "ldl": ...}
    print(table(all_rows()))                 # python -m fraglab.register_liveness sass
"""
from __future__ import annotations

from .. import sass
from . import kernels

#: The register caps of the sweep (None: ptxas's own choice under __launch_bounds__(128, 2)).
SWEEP_CAPS = (None, 168, 128)
SWEEP_VARIANTS = ("qreg", "qreload")
SWEEP_DIMS = (128, 256)


def local_counts(sass_text: str) -> dict:
    """``{"ldl", "stl"}``: local-memory load and store instructions in a SASS listing."""
    ops = sass.count_opcodes(sass_text)
    return {"ldl": ops.get("LDL", 0), "stl": ops.get("STL", 0)}


def resources(variant: str, d: int, dtype: str = "f16", arch: str = "sm_90", **knobs) -> dict:
    """Registers, spills (ptxas bytes and SASS instructions), shared memory and H100 occupancy of
    one kernel. ``knobs``: ``bn``, ``maxrregcount``, ``minb`` (:func:`.kernels.build_spec`)."""
    b, name = kernels.build(variant, dtype, d, arch, **knobs)
    res, c = b.resources[name], b.constants("fa08_")     # the build's own launch numbers
    smem = c[f"fa08_d{d}_smem"]
    occ = sass.occupancy(res["registers"], smem, c["fa08_threads"])
    return {"variant": variant, "d": d, "dtype": dtype, "arch": arch, "kernel": name,
            "knobs": {k: v for k, v in knobs.items() if v is not None},
            "bn": c[f"fa08_d{d}_key_tile"],
            "registers": res["registers"], "spill_stores": res["spill_stores"],
            "spill_loads": res["spill_loads"], "stack_frame": res["stack_frame"],
            **local_counts(b.sass(name)), "smem": smem,
            "blocks_per_sm": occ["blocks_per_sm"], "warps_per_sm": occ["warps_per_sm"],
            "limited_by": occ["limited_by"]}


def all_rows(arch: str = "sm_90", dtype: str = "f16") -> list[dict]:
    """:func:`resources` of every variant at every head dimension (the default tiles)."""
    return [resources(v, d, dtype, arch) for d in kernels.HEAD_DIMS for v in kernels.VARIANTS]


def sweep_rows(arch: str = "sm_90") -> list[dict]:
    """The register-cap sweep (f16, two loops): :data:`SWEEP_CAPS` x variants x d."""
    return [resources(v, d, "f16", arch, maxrregcount=cap)
            for d in SWEEP_DIMS for v in SWEEP_VARIANTS for cap in SWEEP_CAPS]


def spills(row: dict) -> bool:
    return bool(row["spill_stores"] or row["spill_loads"] or row["ldl"] or row["stl"])


def table(rows: list[dict]) -> str:
    """A text table (the CLI's; the chapter shows :func:`.report.resource_table`)."""
    head = (f"{'variant':<16} {'d':>4} {'BN':>3} {'cap':>4} {'regs':>4} {'spill st/ld B':>14} "
            f"{'STL':>4} {'LDL':>4} {'smem KB':>7} {'blocks/SM':>9}")
    lines = [head]
    for r in rows:
        cap = r["knobs"].get("maxrregcount", "-")
        lines.append(f"{r['variant']:<16} {r['d']:>4} {r['bn']:>3} {cap:>4} {r['registers']:>4} "
                     f"{str(r['spill_stores']) + '/' + str(r['spill_loads']):>14} {r['stl']:>4} "
                     f"{r['ldl']:>4} {r['smem'] / 1024:>7.0f} {r['blocks_per_sm']:>9}")
    return "\n".join(lines)
