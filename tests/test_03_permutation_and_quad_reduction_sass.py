"""Topic 03_permutation_and_quad_reduction, the compiled code (no GPU needed): every kernel stays
in registers, the Fig. 2 permutation costs no instruction, what the member masks cost, where
shared memory and barriers appear, and that the kernel names are the file's."""
import re
from collections import Counter
from functools import lru_cache

import pytest

from fraglab import sass, toolchain
from fraglab import permutation_and_quad_reduction as pq
from fraglab.toolchain import ARCHES

REDUCE_CHOICES = [(s, p, m) for s in pq.SHAPES for p, m in pq.problems.reduce_choices(s)]
NEWER = ("sm_80", "sm_90", "sm_120")   # targets with a member-mask check in front of shuffles


@lru_cache(maxsize=None)
def _listing(arch):
    return sass.disassemble(toolchain.compile(pq.KERNELS, arch))


def kernel_sass(arch, kernel):
    return sass.function_text(_listing(arch), kernel)


def classes(arch, kernel):        # like Build.classes, from one disassembly per target
    return sass.count_classes(kernel_sass(arch, kernel))


def opcodes(arch, kernel):        # like Build.opcodes
    return sass.count_opcodes(kernel_sass(arch, kernel))


def main_listing(text):
    return sass.normalized_listing(text)[:len(sass.main_path(text))]


@pytest.mark.parametrize("arch", ARCHES)
def test_every_kernel_stays_in_registers(arch):
    b = toolchain.compile(pq.KERNELS, arch)
    fields = ("stack_frame", "spill_stores", "spill_loads")
    off_registers = {k: ({f: b.resources[k][f] for f in fields}, classes(arch, k)["local"])
                     for k in b.kernels}
    assert all(v == (dict.fromkeys(fields, 0), 0) for v in off_registers.values()), off_registers


@pytest.mark.parametrize("arch", ARCHES)
def test_the_permutation_costs_no_instruction(arch):
    """Fig. 2 only renames registers: with and without it, the SASS is the same instructions."""
    for op in pq.OPS:
        for mask in pq.MASKS:
            perm = kernel_sass(arch, pq.reduce_acc_kernel((16, 16), op, True, mask))
            direct = kernel_sass(arch, pq.reduce_acc_kernel((16, 16), op, False, mask))
            assert sass.normalized_listing(perm) == sass.normalized_listing(direct), (op, mask)


@pytest.mark.parametrize("arch", ARCHES)
def test_full_mask_shuffles_are_plain(arch):
    for shape in pq.SHAPES:
        text = kernel_sass(arch, pq.reduce_acc_kernel(shape, "sum", True, "full"))
        ops = Counter(op.split(".")[0] for op in sass.instructions(text))
        m, n = shape
        # one shuffle per lane bit along each line, per line a lane holds: 16x16 rows: 2 bits x
        # 2 rows, cols: 3 bits x 4 cols; 32x8 rows 2 x 4, cols 3 x 2; 8x32 rows 3 x 2, cols 2 x 4
        want = {(16, 16): 2 * 2 + 3 * 4, (32, 8): 2 * 4 + 3 * 2, (8, 32): 3 * 2 + 2 * 4}[shape]
        assert ops["SHFL"] == want
        for op in ("MATCH", "REDUX", "VOTEU", "WARPSYNC", "BAR"):
            assert ops[op] == 0, (shape, op)


@pytest.mark.parametrize("arch", NEWER)
def test_per_lane_masks_add_a_convergence_check(arch):
    """With a mask that differs between lanes, ptxas (sm_80 and newer) guards the shuffles with
    MATCH.ANY / REDUX.OR / VOTEU.ANY and a BRA.DIV to a fallback that runs WARPSYNC. The shuffle
    instructions themselves are the same: SHFL has no member-mask operand."""
    for shape in pq.SHAPES:
        group = kernel_sass(arch, pq.reduce_acc_kernel(shape, "max", True, "group"))
        full = kernel_sass(arch, pq.reduce_acc_kernel(shape, "max", True, "full"))
        g = Counter(op.split(".")[0] for op in sass.main_path(group))
        f = Counter(op.split(".")[0] for op in sass.main_path(full))
        for op in ("MATCH", "REDUX", "VOTEU"):
            assert g[op] > 0 and f[op] == 0, (shape, op)
        assert g["SHFL"] == f["SHFL"]
        assert len(sass.main_path(group)) > len(sass.main_path(full))
        assert "WARPSYNC" in " ".join(sass.instructions(group))
        shfl_g = sorted(i.split(",")[-2:] for i in main_listing(group) if i.startswith("SHFL"))
        shfl_f = sorted(i.split(",")[-2:] for i in main_listing(full) if i.startswith("SHFL"))
        assert shfl_g == shfl_f          # same offsets, same clamp: no mask operand in SHFL


def test_on_sm75_the_mask_is_computed_and_ignored():
    q = sass.main_path(kernel_sass("sm_75", "rowmax_quadmask_16x16"))
    f = sass.main_path(kernel_sass("sm_75", "rowmax_fullmask_16x16"))
    extra = Counter(q) - Counter(f)
    assert sum(extra.values()) <= 4 and not any(o.split(".")[0] in ("MATCH", "WARPSYNC", "VOTE")
                                                for o in extra)


@pytest.mark.parametrize("arch", ("sm_80", "sm_90", "sm_120"))
def test_registers_path_has_no_shared_memory_or_barrier(arch):
    b = toolchain.compile(pq.KERNELS, arch)
    shared = classes(arch, "rowmax_shared_16x16")
    assert shared["shared"] > 0 and shared["barrier"] > 0
    assert opcodes(arch, "rowmax_shared_16x16")["BAR"] == 1
    warps = b.constants("warps_per_block")["warps_per_block"]      # one 16 x 20 tile a warp
    assert b.resources["rowmax_shared_16x16"]["smem"] == 16 * 20 * 4 * warps
    full = classes(arch, "rowmax_fullmask_16x16")
    assert full["shared"] == 0 and full["barrier"] == 0 and full["tensor"] > 0
    assert b.resources["rowmax_fullmask_16x16"]["smem"] == 0
    # with the paper's masks: still no shared memory and no BAR, but WARPSYNC instructions
    quad = classes(arch, "rowmax_quadmask_16x16")
    assert quad["shared"] == 0 and b.resources["rowmax_quadmask_16x16"]["smem"] == 0
    ops = opcodes(arch, "rowmax_quadmask_16x16")
    assert ops["BAR"] == 0 and quad["barrier"] == ops["WARPSYNC"] > 0
    for k in b.kernels:
        if k.startswith(("reduce_acc", "mma_reduce")):
            assert classes(arch, k)["shared"] == 0 and b.resources[k]["smem"] == 0, k


@pytest.mark.parametrize("arch", ARCHES)
def test_mma_kernels_use_the_tensor_cores(arch):
    for shape in pq.SHAPES:
        for op in pq.MMA_OPS:
            assert classes(arch, pq.mma_reduce_kernel(shape, "f16", op))["tensor"] > 0
            bf16 = classes(arch, pq.mma_reduce_kernel(shape, "bf16", op))["tensor"]
            assert (bf16 > 0) == (arch != "sm_75")       # bf16 WMMA needs sm_80


def test_normalized_listing_ignores_addresses_and_labels():
    text = kernel_sass("sm_90", "rowmax_quadmask_16x16")
    lines = sass.normalized_listing(text)
    assert lines and not any("/*" in line or re.search(r"L_x_\d", line) for line in lines)
    assert "RET.REL.NODEC" not in " ".join(lines) or "<kernel>" in " ".join(lines)
    assert len(lines) == len(sass.instructions(text))
    assert sass.main_path(text)[-1] == "EXIT"


def test_kernel_names():
    assert pq.reduce_acc_kernel((16, 16), "max") == "reduce_acc_16x16_max_perm_group"
    assert pq.reduce_acc_kernel((16, 16), "sum", False, "full") == \
        "reduce_acc_16x16_sum_direct_full"
    assert pq.reduce_acc_kernel((32, 8), "min", True, "full") == "reduce_acc_32x8_min_full"
    assert pq.mma_reduce_kernel((8, 32), "bf16", "max") == "mma_reduce_8x32_bf16_max"
    b = toolchain.compile(pq.KERNELS, "sm_90")
    names = {pq.reduce_acc_kernel(s, op, p, m) for s, p, m in REDUCE_CHOICES for op in pq.OPS}
    names |= {pq.mma_reduce_kernel(s, d, op) for s in pq.SHAPES for d in pq.DTYPES
              for op in pq.MMA_OPS}
    names |= {pq.rowmax_kernel(v) for v in pq.VARIANTS}
    names |= {f"acc_layout_{m}x{n}" for m, n in pq.SHAPES}
    assert names == set(b.kernels)
