"""Topic 08_register_liveness: the liveness tool on small hand-made listings whose answers are
worked out by hand in the comments (straight line, a loop with a back edge, a branch, 64-bit
pairs, a guarded definition, an HMMA, PTX), then on the chapter's kernels (CPU only)."""
import pytest

from fraglab import toolchain
from fraglab.register_liveness import liveness as L


def _live(text, **kw):
    return L.live_counts(L.parse(text), **kw)


def _names(bits):
    return {f"R{i}" for i in range(256) if bits >> i & 1}


def test_straight_line():
    text = """
        MOV R0, 0x1 ;                 // live in: R4 R5 (the address, used at the end)
        MOV R1, 0x2 ;                 // R0 R4 R5
        IADD3 R2, R0, R1, RZ ;        // R0 R1 R4 R5
        STG.E [R4.64], R2 ;           // R2 R4 R5: R0 and R1 died at the add
        EXIT ;
    """
    assert _live(text) == [2, 3, 4, 3, 0]


def test_a_loop_keeps_its_invariant_live_around_the_back_edge():
    """R1 is read at the top of the loop only; without the back edge it would die there."""
    text = """
        MOV R0, RZ ;
        MOV R1, 0x10 ;
    .L_loop:
        IADD3 R0, R0, R1, RZ ;
        ISETP.GE.AND P0, PT, R0, 0x100, PT ;
        @!P0 BRA `(.L_loop) ;
        STG.E [R2.64], R0 ;
        EXIT ;
    """
    ins = L.parse_sass(text)
    assert L.live_counts(ins) == [2, 3, 4, 4, 4, 3, 0]
    live_in, _ = L.live_sets(ins)
    assert "R1" in _names(live_in[3]) and "R1" in _names(live_in[4])   # carried to the next trip
    assert L.live_counts(ins, predicates=True) == [0, 0, 0, 0, 1, 0, 0]
    assert L.successors(ins)[4] == [5, 2]


def test_a_branch_joins_what_either_side_needs():
    text = """
        ISETP.NE.AND P0, PT, R0, RZ, PT ;   // R0, and R4 R5 R6 R7 for the two sides
        @P0 BRA `(.L_else) ;                // then needs R4, else R5: both live here
        MOV R2, R4 ;
        BRA `(.L_join) ;
    .L_else:
        MOV R2, R5 ;
    .L_join:
        STG.E [R6.64], R2 ;
        EXIT ;
    """
    assert _live(text) == [5, 4, 3, 3, 3, 3, 0]
    assert L.successors(L.parse_sass(text))[3] == [5]       # BRA: no fall-through


def test_64_bit_pairs_count_both_registers():
    text = """
        IMAD.WIDE R2, R0, 0x4, R4 ;         // uses R0 and the pair R4:R5; defines R2:R3
        LDG.E.64 R6, desc[UR4][R2.64] ;     // uses R2:R3; defines R6:R7
        DADD R8, R6, R6 ;                   // uses R6:R7; defines R8:R9
        STG.E.64 desc[UR4][R2.64], R8 ;     // uses R2:R3 and R8:R9
        EXIT ;
    """
    assert _live(text) == [3, 2, 4, 4, 0]


def test_a_guarded_definition_kills_nothing():
    text = """
        @P0 MOV R1, R2 ;       // may not run: the old R1 stays live through it
        STG.E [R4.64], R1 ;
        EXIT ;
    """
    ins = L.parse_sass(text)
    assert _names(L.live_sets(ins)[0][0]) == {"R1", "R2", "R4", "R5"}


def test_mma_and_ldmatrix_operands_are_register_groups():
    text = """
        LDSM.16.M88.4 R8, [R20] ;                 // defines R8..R11
        LDSM.16.M88.2 R12, [R20+0x200] ;          // defines R12, R13
        HMMA.16816.F32 R4, R8, R12, R4 ;          // reads A R8..R11, B R12:R13, C R4..R7
        STS.128 [R21], R4 ;                       // reads R4..R7
        EXIT ;
    """
    ins = L.parse_sass(text)
    assert L.live_counts(ins) == [6, 10, 11, 5, 0]      # into the HMMA: 4 + 2 + 4 + R21
    assert _names(ins[2].defs) == {"R4", "R5", "R6", "R7"}


def test_ptx_virtual_registers():
    text = """
        mov.u32 %r1, 5;
        ld.global.u64 %rd1, [%rd2];     // %rd: two 32-bit registers
        add.s32 %r2, %r1, %r1;
        st.global.u32 [%rd1], %r2;
        ret;
    """
    assert _live(text) == [2, 3, 3, 3, 0]


def test_ptx_loop_and_predicates():
    text = """
        mov.u32 %r1, 0;
    $L__loop:
        add.s32 %r1, %r1, %r2;
        setp.lt.u32 %p1, %r1, 100;
        @%p1 bra $L__loop;
        st.global.u32 [%rd1], %r1;
        ret;
    """
    assert _live(text) == [3, 4, 4, 4, 3, 0]
    assert _live(text, predicates=True) == [0, 0, 0, 1, 0, 0]


def test_an_unknown_label_is_an_error():
    with pytest.raises(ValueError, match="unknown label"):
        L.live_counts(L.parse_sass("BRA `(.L_nowhere) ;\nEXIT ;"))


@pytest.fixture(scope="module")
def kernels_sm90():
    return {m: toolchain.compile(f"08_register_liveness_{m}", "sm_90") for m in ("qreg", "qreload")}


@pytest.mark.parametrize("d", [128, 256])
def test_the_kernels_live_counts(kernels_sm90, d):
    """SASS: never more live than ptxas allocated. PTX (before allocation): holding Q's
    fragments raises the peak demand by at least half of their D/4 registers."""
    peaks = {}
    for mode, b in kernels_sm90.items():
        k = f"fa08_{mode}_f16_d{d}_two"
        sass_peak = max(L.live_counts(L.parse_sass(b.sass(k))))
        assert 0.8 * b.resources[k]["registers"] < sass_peak <= b.resources[k]["registers"]
        peaks[mode] = max(L.live_counts(L.parse_ptx(L.ptx_function(b.ptx, k))))
    assert peaks["qreg"] - peaks["qreload"] >= d // 8
