"""The SASS check for WGMMA descriptors read where some path has not written them (gluon/backend/sass_flow.py):
the pattern ptxas 12.8 made of the attention kernel's second Q buffer, and the shipped kernels without it."""
import pytest

from gluon.backend.sass_flow import parse, unwritten_descriptor_reads

# the shape of the miscompile, cut down: a tile loop whose unmasked key loop (skipped when it runs no step) computes
# the Q tile's k-step descriptor UR20 in its preheader, and a masked key loop that reads UR20 without passing there
STALE = """\
--:-:-:-:1\tS2R R0, SR_TID.X;
--:-:-:-:1\tUMOV UR12, 0x100;
--:-:-:-:1\tUMOV UR13, 0x40000040;
--:-:-:-:1\tUMOV UR14, 0x200;
--:-:-:-:1\tUMOV UR15, 0x40000040;
LBB17:
--:-:-:-:1\tISETP.GE.AND P1, PT, R0, 0x1, PT;
--:-:-:-:5\t@!P1 BRA LBB5;
--:-:-:-:1\tUIADD3 UR20, UP0, UR12, 0x2, URZ;
--:-:-:-:1\tUIADD3.X UR21, UR13, 0x40000040, URZ, UP0, !UPT;
LBB8:
--:-:-:-:1\tUIADD3.64 UR22, UR14, 0x2, URZ;
--:-:-:-:1\tHGMMA.64x128x16.F32.BF16 R24, gdesc[UR12], RZ, !UPT;
--:-:-:-:1\tHGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], R24, gsb0;
--:-:-:-:5\t@P1 BRA LBB8;
LBB5:
--:-:-:-:1\tISETP.GE.AND P2, PT, R0, 0x2, PT;
--:-:-:-:5\t@P2 BRA LBB9;
LBB12:
--:-:-:-:1\tUIADD3.64 UR22, UR14, 0x2, URZ;
--:-:-:-:1\tHGMMA.64x128x16.F32.BF16 R24, gdesc[UR12], RZ, !UPT;
--:-:-:-:1\tHGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], R24, gsb0;
--:-:-:-:5\t@!P2 BRA LBB12;
LBB9:
--:-:-:-:5\t@P0 BRA LBB17;
--:-:-:-:1\tEXIT;
"""


def test_a_descriptor_computed_in_one_loops_preheader_and_read_in_its_sibling_is_reported():
    found = unwritten_descriptor_reads(STALE)
    assert len(found) == 1
    assert found[0].startswith("line 22: HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], R24, gsb0 reads UR20, UR21, "
                               "written on some paths only")


def test_the_descriptor_computed_before_the_branch_is_sound():
    hoisted = STALE.replace("--:-:-:-:5\t@!P1 BRA LBB5;\n--:-:-:-:1\tUIADD3 UR20, UP0, UR12, 0x2, URZ;\n"
                            "--:-:-:-:1\tUIADD3.X UR21, UR13, 0x40000040, URZ, UP0, !UPT;\n",
                            "--:-:-:-:1\tUIADD3 UR20, UP0, UR12, 0x2, URZ;\n"
                            "--:-:-:-:1\tUIADD3.X UR21, UR13, 0x40000040, URZ, UP0, !UPT;\n"
                            "--:-:-:-:5\t@!P1 BRA LBB5;\n")
    assert hoisted != STALE and unwritten_descriptor_reads(hoisted) == []


def test_a_predicated_write_is_not_a_write_and_register_a_reads_only_bs_descriptor():
    sass = ("--:-:-:-:1\tUMOV UR14, 0x200;\n--:-:-:-:1\tUMOV UR15, 0x40000040;\n"
            "--:-:-:-:1\t@P0 UMOV UR13, 0x40000040;\n"
            "--:-:-:-:1\tHGMMA.64x64x16.F32.BF16 R88, R24, gdesc[UR12].tnspB, R88;\n"     # A in registers: UR14, 15
            "--:-:-:-:1\tHGMMA.64x128x16.F32.BF16 R24, gdesc[UR12], RZ, !UPT;\n"          # both in smem: UR12..15
            "--:-:-:-:1\tEXIT;\n")
    found = unwritten_descriptor_reads(sass)
    assert len(found) == 1 and "reads UR12, UR13," in found[0] and "line 5:" in found[0]


def test_the_warp_specialized_dispatch_reaches_the_partitions_entries():
    """`BRX` through the jump table: the blocks nothing else reaches are its targets, with what the code before
    it wrote (a worker partition spins at its entry, a loop onto itself)."""
    sass = ("--:-:-:-:1\tUMOV UR12, 0x100;\n--:-:-:-:1\tUMOV UR13, 0x40000040;\n--:-:-:-:1\tUMOV UR14, 0x200;\n"
            "--:-:-:-:1\tUMOV UR15, 0x40000040;\n--:-:-:-:5\tBRX R6 -0x420;\n"
            "LBB2:\n--:-:-:-:1\tNOP;\n--:-:-:-:5\t@!P0 BRA LBB2;\n"
            "--:-:-:-:1\tHGMMA.64x128x16.F32.BF16 R24, gdesc[UR12], RZ, !UPT;\n--:-:-:-:1\tEXIT;\n")
    blocks = parse(sass)
    assert blocks[0].succs == [1]                     # the dispatch: to the entry nothing else reaches
    assert unwritten_descriptor_reads(sass) == []


@pytest.mark.parametrize("head_dim,causal,kw", [
    (64, False, {}), (64, True, dict(PERSISTENT=True, PREFETCH_Q=True)), (64, False, dict(PERSISTENT=True,
                                                                                          PREFETCH_Q=True)),
    (64, True, dict(PERSISTENT=True, EARLY_Q_RELEASE=True)), (128, False, {}), (128, True, {}), (256, False, {})])
def test_the_shipped_attention_reads_no_descriptor_stale(head_dim, causal, kw):
    """The attention defaults and the persistent serial forms: each WGMMA's descriptors are written on every path
    to it (PREFETCH_Q's serial loop is one loop for that: with two, ptxas 12.8 read the Q descriptors stale)."""
    from gluon.ir import DType
    from gluon.kernels.attention_sm90.host import compile_variant
    assert compile_variant(head_dim, DType.bf16, causal, **kw).binary.descriptor_hazards() == []


@pytest.mark.parametrize("kw", [{}, dict(SWAP_AB=True, BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1, SPLIT_WGS=False,
                                         K_ZIGZAG=False, EPILOGUE="direct", CLUSTER_K=2, PDL=True),
                                dict(BLOCK_N=128, BLOCK_K=128, STAGES=3, CONSUMER_WGS=1, PDL=True)])
def test_the_shipped_gemm_reads_no_descriptor_stale(kw):
    """The GEMM's default, a decode pick (swapped, K halves in a cluster) and DECODE_WIDE_DEEP."""
    from gluon.ir import DType
    from gluon.kernels.gemm_sm90.host import compile_variant
    assert compile_variant(DType.bf16, **kw).binary.descriptor_hazards() == []
