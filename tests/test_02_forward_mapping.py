"""Topic 02_forward_mapping: fitting formulas to layouts (affine in bits, XOR, neither), the
documented m16n8k16 fragment, inverse maps, and (on a GPU) Algorithm 2 against
store_matrix_sync, bit for bit, for every accumulator kind."""
import numpy as np
import pytest

from fraglab import forward_mapping as fm
from fraglab import fragments, sass, toolchain, warp
from fraglab.forward_mapping import problems
from fraglab.fragments import recording

LANE, REG = np.meshgrid(np.arange(32), np.arange(8), indexing="ij")
DOC16 = warp.accumulator_16x16_sm80()


def _table(row, col):
    return np.stack([np.asarray(row), np.asarray(col)], axis=-1)


# --------------------------------------------------------------------------------------------
# The documented layout and the paper's equations
# --------------------------------------------------------------------------------------------

def test_two_m16n8k16_fragments_make_the_16x16_accumulator():
    assert np.array_equal(fm.wmma16x16_from_ptx(), DOC16)
    assert np.array_equal(_table(*fm.eq12(LANE, REG)), DOC16)


def test_fit_of_the_documented_layout_prints_equations_1_and_2():
    m = fm.fit(DOC16, kind="acc_16x16x16_f32")
    assert m.model == "affine"
    assert m.text() == "row = lane/4 + 8*((i>>1)&1)\ncol = 2*(lane%4) + (i%2) + 8*(i>>2)"
    assert np.array_equal(m.table(), DOC16)
    np.testing.assert_array_equal(m.coefficients(), [[0, 0, 0, 1, 2, 4, 0, 8, 0, 0],
                                                     [0, 2, 4, 0, 0, 0, 1, 0, 8, 0]])


def test_fit_of_the_register_swap_of_figure_2():
    """After the paper's swap of x[2,3] and x[4,5], rows sit in i>>2 and column halves in bit 1."""
    m = fm.fit(DOC16[:, [0, 1, 4, 5, 2, 3, 6, 7]])
    assert m.text() == "row = lane/4 + 8*(i>>2)\ncol = 2*(lane%4) + (i%2) + 8*((i>>1)&1)"


def test_fit_of_other_shapes_and_negative_weights():
    lane2 = np.arange(32)[:, None]
    i2 = np.arange(2)[None, :]
    m = fm.fit(_table(lane2 // 4 + 0 * i2, 2 * (lane2 % 4) + i2), (8, 8))  # PTX m8n8k4 f64 C
    assert m.text() == "row = lane/4\ncol = 2*(lane%4) + i"
    tall = _table(LANE // 4 + 8 * ((REG >> 1) & 1) + 16 * (REG >> 2), 2 * (LANE % 4) + REG % 2)
    m = fm.fit(tall, (32, 8))
    assert m.text() == "row = lane/4 + 8*(i>>1)\ncol = 2*(lane%4) + (i%2)"
    flipped = _table(15 - LANE // 4 - 8 * ((REG >> 1) & 1), 2 * (LANE % 4) + REG % 2 + 8 * (REG >> 2))
    m = fm.fit(flipped, (16, 16))
    assert m.row.text() == "-lane/4 - 8*((i>>1)&1) + 15"
    assert np.array_equal(m.table(), flipped)


def test_fit_of_a_replicated_fragment_gives_a_zero_weight():
    dup = np.concatenate([DOC16, DOC16], axis=1)            # x[i + 8] repeats x[i]
    m = fm.fit(dup, (16, 16))
    assert m.row.c[3] == 0 and m.col.c[3] == 0
    # i now has 4 bits, so the column half is bit 2 of i, no longer "i>>2"
    assert m.text() == "row = lane/4 + 8*((i>>1)&1)\ncol = 2*(lane%4) + (i%2) + 8*((i>>2)&1)"


def test_xor_swizzle_is_recognised():
    col = (2 * (LANE % 4) + REG % 2 + 8 * (REG >> 2)) ^ (8 * ((LANE >> 2) & 1))
    lay = _table(LANE // 4 + 8 * ((REG >> 1) & 1), col)
    m = fm.fit(lay, (16, 16))
    assert m.model == "xor" and np.array_equal(m.table(), lay)
    assert "bit3 = lane.2 ^ i.2" in m.text()
    with pytest.raises(fm.NotAffine):
        m.coefficients()


def test_a_shuffled_layout_is_reported_not_affine(rng):
    flat = DOC16.reshape(-1, 2).copy()
    rng.shuffle(flat)
    lay = flat.reshape(32, 8, 2)
    if fm.probe_affine(lay[..., 0], 5, 3, "lane", "i") is not None \
            and fm.probe_affine(lay[..., 1], 5, 3, "lane", "i") is not None:
        pytest.skip("the shuffle happened to be affine")     # astronomically unlikely
    with pytest.raises(fm.NotAffine, match=r"not affine in the bits .* predicts .* at lane"):
        fm.fit(lay)
    assert fm.describe_fit(lay, "acc_16x16x16_f32").startswith("not affine")


def test_fit_argument_errors():
    with pytest.raises(ValueError, match=r"\(32, num_elements, 2\)"):
        fm.fit(np.zeros((16, 8, 2), dtype=int))
    with pytest.raises(warp.LayoutError):
        fm.fit(DOC16[:, :4], (16, 16))                      # holes
    with pytest.raises(fm.NotAffine, match="power of two"):
        fm.fit(DOC16[:, :6], (16, 16))


def test_cuda_text_of_a_formula_compiles_and_matches():
    m = fm.fit(DOC16)
    assert m.row.cuda() == "(0 + 1 * ((lane >> 2) & 7) + 8 * ((i >> 1) & 1))"
    src = ('extern "C" __global__ void k(int* out) { int lane = threadIdx.x & 31;\n'
           '#pragma unroll\n for (int i = 0; i < 8; ++i) {'
           f' out[lane * 16 + 2 * i] = {m.row.cuda()}; out[lane * 16 + 2 * i + 1] = {m.col.cuda()}; }} }}\n')
    b = toolchain.compile("formula_check.cu", "sm_90", source=src)
    assert "k" in b.kernels


# --------------------------------------------------------------------------------------------
# Inverse maps
# --------------------------------------------------------------------------------------------

def test_inverse_of_equations_1_and_2():
    inv = fm.fit_inverse(DOC16, (16, 16))
    assert inv.text() == "lane = 4*(row%8) + ((col>>1)&3)\ni    = 2*(row/8) + (col%2) + 4*(col/8)"
    r, c = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    lane, i = inv(r, c)
    assert np.array_equal(np.stack(fm.eq12_inverse(r, c)), np.stack([lane, i]))
    # a round trip through the forward formula
    assert np.array_equal(np.stack(fm.eq12(lane, i)), np.stack([r, c]))


def test_inverse_lists_every_copy_and_checks_its_arguments():
    where = fm.inverse(np.concatenate([DOC16, DOC16], axis=1), (16, 16))
    assert where(9, 2) == [(5, 2), (5, 10)]
    with pytest.raises(ValueError, match="outside"):
        where(16, 0)
    with pytest.raises(warp.LayoutError):
        fm.fit_inverse(np.concatenate([DOC16, DOC16], axis=1), (16, 16))   # not one-to-one


# --------------------------------------------------------------------------------------------
# The recorded layouts (traced on the course's H100; skipped until a recording exists)
# --------------------------------------------------------------------------------------------

def _recorded(name):
    if not recording.recording_path(recording.DEFAULT_ARCH).is_file():
        pytest.skip("no recording yet: `python -m fraglab.tracer record` on the H100")
    return recording.recorded_layout(name)


@pytest.mark.parametrize("name", list(fragments.KINDS))
def test_every_recorded_layout_is_affine_in_the_bits(name):
    lay = _recorded(name)
    m = fm.fit(lay, kind=name)
    assert m.model == "affine" and np.array_equal(m.table(), lay), m.text()


def test_recorded_16x16_accumulators_are_two_m16n8k16_fragments():
    for name in ("acc_16x16x16_f32", "acc_16x16x16_f16", "acc_16x16x16_s32", "acc_16x16x8_f32"):
        assert np.array_equal(_recorded(name), fm.wmma16x16_from_ptx()), name


def test_recorded_8x32_accumulator_is_the_transpose_of_32x8():
    tall, wide = _recorded("acc_32x8x16_f32"), _recorded("acc_8x32x16_f32")
    assert np.array_equal(wide, tall[..., ::-1])


def test_recorded_f16_input_copies_sit_in_the_top_register_bits():
    m = fm.fit(_recorded("a_16x16x16_f16_row"), kind="a_16x16x16_f16_row")
    assert m.row.c[3] == 0 and m.col.c[3] == 0              # x[i + 8] is x[i]
    m = fm.fit(_recorded("b_32x8x16_f16_row"), kind="b_32x8x16_f16_row")
    assert m.row.c[2:] == (0, 0) and m.col.c[2:] == (0, 0)  # four copies: i, i+4, i+8, i+12


# --------------------------------------------------------------------------------------------
# Compile, SASS, and argument checks that need no GPU
# --------------------------------------------------------------------------------------------

_listings: dict = {}


def _ops(arch, kernel):
    if arch not in _listings:
        _listings[arch] = toolchain.compile("02_forward_mapping", arch).sass()
    return sass.count_opcodes(sass.function_text(_listings[arch], kernel), base=False)


def test_one_store_kernel_per_accumulator_kind():
    b = toolchain.compile("02_forward_mapping", "sm_90")
    want = {f"fwd_store_{k.name}" for k in fragments.kinds("accumulator")}
    want |= {f"fwd_store_eq12_{n}" for n in fm.EQ12_KINDS}
    assert set(b.kernels) == want
    assert set(fm.STORE_TYPES) == {k.name for k in fragments.kinds("accumulator")}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
def test_store_kernels_sass(arch):
    b = toolchain.compile("02_forward_mapping", arch)
    for name in b.kernels:
        assert b.resources[name]["stack_frame"] == 0 and b.resources[name]["spill_stores"] == 0
    eq12 = _ops(arch, "fwd_store_eq12_acc_16x16x16_f32")
    fitted = _ops(arch, "fwd_store_acc_16x16x16_f32")
    assert eq12["HMMA.16816.F32"] == 2 and fitted["HMMA.16816.F32"] == 2
    loads = lambda ops: sum(n for o, n in ops.items() if o.startswith("LDG"))   # noqa: E731
    assert loads(fitted) > loads(eq12)          # the fitted kernel reads its 20 weights


def test_forward_store_argument_errors_without_gpu(foreign):
    z = np.zeros((16, 16), np.float16)
    with pytest.raises(ValueError, match="not an accumulator"):
        fm.forward_store("a_16x16x16_f16_row", z, z, z)
    with pytest.raises(ValueError, match="variant"):
        fm.forward_store("acc_16x16x16_f32", z, z, z, variant="paper")
    with pytest.raises(ValueError, match="16x16 tiles"):
        fm.forward_store("acc_32x8x16_f32", z, z, z, variant="eq12")
    with pytest.raises(ValueError, match="unknown fragment kind"):
        fm.forward_store("acc_16x16_f32", z, z, z)
    make, words = foreign
    with pytest.raises(TypeError, match=words):
        fm.forward_store("acc_16x16x16_f32", make(z), make(z), make(z))


def test_mapping_checks():
    k = fragments.get_kind("acc_16x16x16_f32")
    fm.check_mapping(fm.fit(DOC16), k)
    with pytest.raises(TypeError, match="Mapping"):
        fm.check_mapping(DOC16, k)
    with pytest.raises(ValueError, match="32x8|\\(32, 8\\)"):
        fm.check_mapping(fm.fit(DOC16), fragments.get_kind("acc_32x8x16_f32"))
    shifted = fm.Mapping(fm.BitFormula(1, (0, 0, 1, 2, 4), (0, 8, 0)), fm.fit(DOC16).col,
                         (16, 16), 8)                       # rows 1..16: out of the tile
    with pytest.raises(ValueError, match="one to one"):
        fm.check_mapping(shifted, k)


# --------------------------------------------------------------------------------------------
# On the GPU: Algorithm 2 against store_matrix_sync
# --------------------------------------------------------------------------------------------

P = fm.PROBLEMS["forward_store"]


def _bits(x):
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.itemsize])


def _require(case):
    ok, why = P.supported(case)
    if not ok:
        pytest.skip(why)


def test_the_problem_covers_every_accumulator_kind(rng):
    assert {c.params["kind"] for c in P.cases} == {k.name for k in fragments.kinds("accumulator")}
    assert {c.params["kind"] for c in P.cases if c.params["variant"] == "eq12"} == \
        set(fm.EQ12_KINDS)
    assert P.edge_cases
    for case in P.cases:
        inp = P.inputs(rng, **case.params)
        k = fragments.get_kind(case.params["kind"])
        want = P.reference(**inp)["forward"]
        assert want.shape == (case.params["row_tiles"] * k.shape[0],
                              case.params["col_tiles"] * k.shape[1])
        assert np.isfinite(want).all() and P.tolerance(case) == problems.TOL[k.dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("case", P.cases, ids=str)
def test_both_stores_match_the_numpy_reference(case, rng):
    """store_matrix_sync and Algorithm 2 (fitted formula, or the paper's for 16x16) against
    float64 A @ B + C."""
    _require(case)
    P.check(case, rng)


@pytest.mark.gpu
@pytest.mark.parametrize("case", P.cases, ids=str)
def test_forward_store_is_bit_exact_against_store_matrix_sync(case, rng):
    _require(case)
    out = problems.store_both(**P.inputs(rng, **case.params))
    ref, fwd = out["store_matrix_sync"].get(), out["forward"].get()
    diff = warp.format_diff(_bits(fwd), _bits(ref), index_names=("row", "col"))
    assert not diff, f"{case}: Algorithm 2 differs from store_matrix_sync:\n{diff}"


@pytest.mark.gpu
def test_a_wrong_formula_is_caught(rng):
    """The register swap of Figure 2 is a valid layout, but not the hardware's: the store puts
    half of the values in the wrong place."""
    k = fragments.get_kind("acc_16x16x16_f32")
    wrong = fm.fit(recording.layout(k)[:, [0, 1, 4, 5, 2, 3, 6, 7]], kind=k)
    inp = P.inputs(rng, k.name)
    out = problems.store_both(**inp, mapping=wrong)
    bad = (_bits(out["store_matrix_sync"].get()) != _bits(out["forward"].get())).mean()
    assert 0.4 < bad <= 0.5 + 1e-9


@pytest.mark.gpu
def test_forward_store_argument_errors_on_gpu():
    import cupy
    k = "acc_16x16x16_f32"
    a = cupy.zeros((32, 16), cupy.float16)
    b = cupy.zeros((16, 48), cupy.float16)
    c = cupy.zeros((32, 48), cupy.float32)
    with pytest.raises(TypeError, match="float16"):
        fm.forward_store(k, a.astype(cupy.float32), b, c)
    with pytest.raises(ValueError, match="16 columns"):
        fm.forward_store(k, cupy.zeros((32, 8), cupy.float16), b, c)
    with pytest.raises(ValueError, match="16 rows"):
        fm.forward_store(k, a, cupy.zeros((8, 48), cupy.float16), c)
    with pytest.raises(ValueError, match="shape"):
        fm.forward_store(k, a, b, cupy.zeros((32, 32), cupy.float32))
    with pytest.raises(ValueError, match="multiple of 16"):
        fm.forward_store(k, cupy.zeros((24, 16), cupy.float16), b,
                         cupy.zeros((24, 48), cupy.float32))
    with pytest.raises(ValueError, match="multiple of 16"):
        fm.forward_store(k, a, cupy.zeros((16, 40), cupy.float16),
                         cupy.zeros((32, 40), cupy.float32))
    with pytest.raises(TypeError, match="int32"):
        fm.forward_store("acc_16x16x16_s32", cupy.zeros((32, 16), cupy.int8),
                         cupy.zeros((16, 48), cupy.int8), c)
    big = 16 * 65536                                         # one row of tiles too many
    with pytest.raises(ValueError, match="65535"):
        fm.forward_store(k, cupy.zeros((big, 16), cupy.float16), cupy.zeros((16, 16), cupy.float16),
                         cupy.zeros((big, 16), cupy.float32))
