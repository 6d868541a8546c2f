"""The fragment-kind catalogue (fraglab/fragments/catalogue.py) and its CUDA twin
(kernels/fragment_kinds.cuh): the same kinds, num_elements as crt/mma.h declares them, a kernel
for every kind in the compiled cubins of topics 01 and 02; and the recorded layouts
(fraglab/fragments/recording.py)."""
import re

import numpy as np
import pytest

from fraglab import device, fragments, toolchain, warp
from fraglab.fragments import recording
from fraglab.toolchain import ARCHES

HEADER = toolchain.KERNELS_DIR / "fragment_kinds.cuh"
ACC = fragments.kinds("accumulator")
DOC16 = fragments.wmma_16x16_accumulator()


# --------------------------------------------------------------------------------------------
# The X-macro lists of fragment_kinds.cuh == the Python table
# --------------------------------------------------------------------------------------------

def _xmacro_lists() -> dict[str, list[tuple]]:
    """{list name: rows}, each row the tuple of its X(...) arguments (numbers as int)."""
    text = HEADER.read_text()
    out = {}
    for m in re.finditer(r"#define (FRAGLAB_\w+)\(X\) \\\n((?:[ \t]*X\(.*\)[ \t]*\\?\n)+)", text):
        rows = []
        for args in re.findall(r"X\(([^)]*)\)", m.group(2)):
            rows.append(tuple(int(a) if a.isdigit() else a
                              for a in (s.strip() for s in args.split(","))))
        out[m.group(1)] = rows
    return out


def _guard(input_type: str) -> str:
    """The guard a kind needs: SM80_ONLY where sm_75 (Turing) has no WMMA for its inputs."""
    return "FRAGLAB_ANY_ARCH" if device.supports(input_type, (7, 5))[0] else "SM80_ONLY"


def test_the_header_has_the_three_lists():
    assert set(_xmacro_lists()) == {"FRAGLAB_ACCUMULATOR_KINDS", "FRAGLAB_EXTRA_MMA_INPUTS",
                                    "FRAGLAB_INPUT_KINDS"}


def test_accumulator_list_equals_the_python_table():
    want = [(_guard(k.input), k.name, k.m, k.n, k.k, k.dtype, k.num_elements, k.input)
            for k in ACC]
    assert _xmacro_lists()["FRAGLAB_ACCUMULATOR_KINDS"] == want


def test_extra_mma_inputs_equal_the_python_table():
    want = [(_guard(inp), k.name, k.m, k.n, k.k, k.dtype, k.num_elements, inp)
            for k in ACC for inp in k.mma_inputs[1:]]
    assert want and _xmacro_lists()["FRAGLAB_EXTRA_MMA_INPUTS"] == want


def test_input_list_equals_the_python_table():
    want = [(_guard(k.input), k.name, k.use, k.m, k.n, k.k, k.dtype, k.layout, k.num_elements)
            for k in fragments.KINDS.values() if not k.is_accumulator]
    assert _xmacro_lists()["FRAGLAB_INPUT_KINDS"] == want


def test_names_are_made_from_the_fields():
    for k in fragments.KINDS.values():
        assert k.name == fragments.kind_name(k.use, k.m, k.n, k.k, k.dtype, k.layout)


# --------------------------------------------------------------------------------------------
# num_elements as the WMMA header declares them (the kernels also static_assert it)
# --------------------------------------------------------------------------------------------

_CPP = {v: k for k, v in fragments.CPP_TYPES.items()}


def _header_fragments():
    """{(use, m, n, k, dtype, layout): num_elements} parsed from crt/mma.h."""
    text = next(d / "crt" / "mma.h" for d in toolchain.include_dirs()
                if (d / "crt" / "mma.h").is_file()).read_text()
    pat = re.compile(r"class fragment<(\w+), (\d+), (\d+), (\d+), ([\w: ]+?)(?:, (\w+)_major)?>"
                     r"\s*:\s*public __frag_base<[\w: ]+?, (\d+)(?:, \d+)?>")
    out = {}
    for use, m, n, k, t, lay, ne in pat.findall(text):
        if t.strip() in _CPP:
            out[(use, int(m), int(n), int(k), _CPP[t.strip()], lay or None)] = int(ne)
    return out


def test_num_elements_match_the_wmma_header():
    header = _header_fragments()
    for k in fragments.KINDS.values():
        key = (k.use, k.m, k.n, k.k, k.dtype, k.layout)
        assert key in header, f"{k.name} is not declared in crt/mma.h"
        assert header[key] == k.num_elements, f"{k.name}: header says {header[key]}"
    # ... and every fragment of the header is a kind, except the experimental sub-byte ones
    # (s4/u4/b1 inputs packed 8 or 32 to an int; their int accumulators are 8x8x32, 8x8x128)
    left_out = set(header) - {(k.use, k.m, k.n, k.k, k.dtype, k.layout)
                              for k in fragments.KINDS.values()}
    assert left_out == {("accumulator", 8, 8, 32, "s32", None),
                        ("accumulator", 8, 8, 128, "s32", None)}


def test_a_wrong_num_elements_in_the_header_does_not_compile(tmp_path):
    bad = HEADER.read_text().replace("acc_8x8x4_f64, 8, 8, 4, f64, 2, f64",
                                     "acc_8x8x4_f64, 8, 8, 4, f64, 4, f64")
    assert bad != HEADER.read_text()
    (tmp_path / "fragment_kinds.cuh").write_text(bad)
    src = (toolchain.KERNELS_DIR / "01_tracer.cu").read_text().replace(
        '#include "fragment_kinds.cuh"', f'#include "{tmp_path / "fragment_kinds.cuh"}"')
    with pytest.raises(toolchain.CompileError, match="NE differs from crt/mma.h"):
        toolchain.compile("01_tracer", "sm_90", source=src)


# --------------------------------------------------------------------------------------------
# Every kind's kernels are in the compiled cubins of topics 01 and 02
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHES)
def test_every_kind_has_its_tracer_kernels(arch):
    want = {k.kernel("load") for k in fragments.KINDS.values()}
    want |= {k.kernel("mma", inp) for k in ACC for inp in k.mma_inputs}
    assert set(toolchain.compile("01_tracer", arch).kernels) == want


@pytest.mark.parametrize("arch", ARCHES)
def test_every_accumulator_has_its_store_kernels(arch):
    want = {f"fwd_store_{k.name}" for k in ACC}
    want |= {f"fwd_store_eq12_{k.name}" for k in ACC if k.shape == (16, 16)}   # eq. 1-2: 16x16
    assert set(toolchain.compile("02_forward_mapping", arch).kernels) == want


# --------------------------------------------------------------------------------------------
# Kinds
# --------------------------------------------------------------------------------------------

def test_kind_shapes_and_copies():
    k = fragments.get_kind("a_32x8x16_f16_row")
    assert k.shape == (32, 16) and k.copies == 1
    assert fragments.get_kind("b_32x8x16_f16_col").shape == (16, 8)
    assert fragments.get_kind("b_32x8x16_f16_col").copies == 4
    assert fragments.get_kind("a_16x16x16_f16_row").copies == 2
    assert fragments.get_kind("acc_8x32x16_s32").shape == (8, 32)
    assert all(k.copies == 1 for k in ACC)
    assert fragments.get_kind("acc_16x16x16_f32").kernel("mma", "bf16") == \
        "trace_mma_acc_16x16x16_f32_bf16in"
    table = fragments.num_elements_table()
    assert len(table.splitlines()) == len(fragments.KINDS) + 1 and "a_8x8x4_f64_col" in table


def test_unknown_kind_lists_known_kinds():
    with pytest.raises(ValueError, match="acc_16x16x16_f32.*a_16x16x16_f16_row"):
        fragments.get_kind("acc_16x16_f32")
    with pytest.raises(TypeError):
        fragments.get_kind(16)
    with pytest.raises(ValueError, match="use must be"):
        fragments.kinds("matrix_c")


def test_supported_uses_device_supports():
    assert fragments.supported("a_16x16x16_bf16_row", (7, 5))[0] is False
    assert "8.0" in fragments.supported("acc_16x16x8_f32", (7, 5))[1]
    assert fragments.supported("acc_16x16x16_s32", (7, 5)) == (True, "")
    assert fragments.supported("b_8x8x4_f64_col", (9, 0)) == (True, "")


def test_store_types_are_the_accumulators_with_their_numpy_types():
    assert set(fragments.STORE_TYPES) == {k.name for k in ACC}
    assert fragments.STORE_TYPES["acc_16x16x16_f32"] == ("f16", np.float16, np.float32)
    assert fragments.STORE_TYPES["acc_16x16x16_s32"] == ("s8", np.int8, np.int32)
    assert fragments.STORE_TYPES["acc_16x16x8_f32"] == ("tf32", np.float32, np.float32)


# --------------------------------------------------------------------------------------------
# Recordings (files made on a GPU by the tracer; read and checked here)
# --------------------------------------------------------------------------------------------

def _fake_recording(tmp_path, layout=DOC16):
    rec = {"format": recording.FORMAT, "arch": "sm_00", "traced": True, "device": {"name": "test"},
           "kinds": {"acc_16x16x16_f32": {"row": layout[..., 0].tolist(),
                                          "col": layout[..., 1].tolist()}},
           "unsupported": {"acc_8x8x4_f64": "f64 WMMA needs compute capability 8.0"}}
    p = tmp_path / "sm_00.json"
    p.write_text(recording.dumps(rec))
    return p


def test_recording_round_trip_and_checks(tmp_path, monkeypatch):
    monkeypatch.setattr(recording, "LAYOUTS_DIR", tmp_path)
    recording.load_recording.cache_clear()
    try:
        p = _fake_recording(tmp_path)
        assert len(p.read_text().splitlines()) < 120           # one line per lane, not per value
        lay = recording.recorded_layout("acc_16x16x16_f32", "sm_00")
        assert np.array_equal(lay, DOC16)
        with pytest.raises(recording.RecordingMissing, match="compute capability 8.0"):
            recording.recorded_layout("acc_8x8x4_f64", "sm_00")
        with pytest.raises(recording.RecordingMissing, match="fraglab.tracer record"):
            recording.load_recording("sm_01")
        bad = DOC16.copy()
        bad[0, 0] = (16, 0)                                    # outside the tile
        _fake_recording(tmp_path, bad)
        recording.load_recording.cache_clear()
        with pytest.raises(warp.LayoutError):
            recording.load_recording("sm_00")
    finally:
        recording.load_recording.cache_clear()


def test_compare_layouts_names_the_slots():
    assert recording.compare_layouts(DOC16, DOC16, "acc_16x16x16_f32") == ""
    other = DOC16[:, [0, 1, 4, 5, 2, 3, 6, 7]]
    msg = recording.compare_layouts(other, DOC16, "acc_16x16x16_f32")
    assert "128 of 256 slots" in msg and "lane 0 reg 2: (0, 8), expected (8, 0)" in msg


def test_cpu_layout_is_the_default_recording(monkeypatch):
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    if not recording.recording_path(recording.DEFAULT_ARCH).is_file():
        pytest.skip("no recording committed yet")
    assert recording.machine_arch() == recording.DEFAULT_ARCH
    assert np.array_equal(recording.layout("acc_16x16x16_f32"), DOC16)
    assert recording.source_line().startswith("[cpu] layouts from the recording sm_90.json")
    assert recording.source_line("sm_01").startswith("[cpu] no recording for sm_01")
