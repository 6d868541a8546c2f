"""SASS listing parsing and instruction classes."""
from fraglab import sass

LISTING = """
	.section	.text.kern,"ax",@progbits
	.sectionflags	@"SHF_BARRIERS=1"
.text.kern:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
        /*0020*/              @!P0 IMAD.MOV.U32 R2, RZ, RZ, R0 ;
        /*0030*/                   HMMA.16816.F32 R4, R8, R12, R4 ;
        /*0040*/                   LDSM.16.M88.4 R8, [R3] ;
        /*0050*/                   STS.128 [R3], R4 ;
        /*0060*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0070*/                   SHFL.BFLY PT, R5, R0, 0x1, 0x1f ;
        /*0080*/                   LDL R6, [R1] ;
        /*0090*/                   LOP3.LUT R7, R0, 0x3, RZ, 0xc0, !PT ;
        /*00a0*/                   EXIT ;
        /*00b0*/                   BRA 0xb0;
        /*00c0*/                   NOP;
        /*00d0*/                   NOP;
	.section	.text.other,"ax",@progbits
.text.other:
        /*0000*/                   EXIT ;
"""


def test_function_text_selects_one_kernel():
    assert "HMMA" in sass.function_text(LISTING, "kern")
    assert "HMMA" not in sass.function_text(LISTING, "other")


def test_unknown_kernel_names_the_known_ones():
    try:
        sass.function_text(LISTING, "nope")
    except KeyError as e:
        assert "kern" in str(e) and "other" in str(e)
    else:
        raise AssertionError("no KeyError")


def test_padding_is_dropped_and_predicates_ignored():
    ops = sass.instructions(sass.function_text(LISTING, "kern"))
    assert ops[-1] == "EXIT" and "NOP" not in ops
    assert "IMAD.MOV.U32" in ops
    assert len(sass.instructions(LISTING, padding=True)) == len(ops) + 3 + 1


def test_classes():
    c = sass.count_classes(sass.function_text(LISTING, "kern"))
    assert c["tensor"] == 1 and c["shared"] == 2 and c["barrier"] == 1 and c["shuffle"] == 1
    assert c["local"] == 1 and c["move"] == 1 and c["integer"] == 1 and c["special"] == 2
    assert sass.classify("IMAD.WIDE") == "integer" and sass.classify("IMAD.MOV.U32") == "move"
    assert sass.classify("LDGSTS.E.BYPASS") == "global" and sass.classify("FOO") == "other"


def test_opcode_counts_base_and_full():
    t = sass.function_text(LISTING, "kern")
    assert sass.count_opcodes(t)["HMMA"] == 1
    assert sass.count_opcodes(t, base=False)["HMMA.16816.F32"] == 1
