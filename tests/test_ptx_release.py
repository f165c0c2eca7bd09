"""The lean stage release (gluon/backend/ptx/release.py, `gl.set_lean_release`), on the CPU: which barriers
the PTX rewrite drops, every barrier it must leave alone, and the GEMM's machine code with
and without it."""
import pytest

from gluon import DType
from gluon.backend.ptx import release as ptx_release
from gluon.backend.machine_code import sass_instructions
from gluon.ir import GluonError
from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, compile_variant, gemm_sm90, num_warps, stand_ins

# the shape of Triton 3.6's k-step loop in a one-warpgroup consumer partition (gemm_sm90 with SPLIT_WGS):
# wait on `ready`, WGMMA, wait_group 1, release the previous stage from one thread; then the tile's last
# release after wait_group 0, and the epilogue's barriers around the staging tile
LOOP = """
$L__BB0_8:
	add.s32 	%r100, %r1134, %r1139;
	and.b32 	%r337, %r346, 1;
	.loc	1 265 11                        // kernel.ttgir:265:11
	bar.sync 	2, {n};
	// begin inline asm
	{{
	.reg .pred complete;
	waitLoop:
	mbarrier.try_wait.parity.shared.b64 complete, [%r336], %r337;
	@!complete bra.uni waitLoop;
	}}
	// end inline asm
	wgmma.fence.sync.aligned;
	wgmma.commit_group.sync.aligned;
	// begin inline asm
	// wait for regs: %r1140
	wgmma.wait_group.sync.aligned 1;
	// end inline asm
	setp.le.s32 	%p15, %r343, %r97;
	@%p15 bra 	$L__BB0_10;
// %bb.9:
	add.s32 	%r355, %r363, 213216;
	bar.sync 	2, {n};
	// begin inline asm
	@%p529 mbarrier.arrive.shared::cta.b64 _, [%r355];
	// end inline asm
	bra.uni 	$L__BB0_10;
$L__BB0_11:
	wgmma.wait_group.sync.aligned 0;
	add.s32 	%r365, %r363, 213224;
	bar.sync 	2, {n};
	@%p529 mbarrier.arrive.shared::cta.b64 _, [%r365];
$L__BB0_13:
	cp.async.bulk.wait_group.read 	0;
	bar.sync 	2, {n};
	stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r13], {{%r377, %r378, %r379, %r380}};
	fence.proxy.async.shared::cta;
	bar.sync 	2, {n};
	@%p18 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {{%r375, %r101}}], [%r376];
"""


def _bars(ptx):
    return [ln.strip() for ln in ptx.splitlines() if ln.strip().startswith("bar.sync")]


def test_drops_the_stage_wait_and_release_barriers_of_a_warpgroup():
    out, stats = ptx_release.rewrite(LOOP.format(n=128), "k")
    assert stats == {"removed": 3, "wait": 1, "arrive": 2}
    # the epilogue's two (staging tile free, then written before the TMA store) stay
    assert _bars(out) == ["bar.sync \t2, 128;"] * 2
    assert out.count("// gluon lean_release: bar.sync") == 3


def test_leaves_barriers_of_two_warpgroups():
    """256 threads: thread 0's wait_group says nothing about the other warpgroup's WGMMA."""
    out, stats = ptx_release.rewrite(LOOP.format(n=256), "k")
    assert stats["removed"] == 0 and "no 128-thread barrier" in stats["skipped"]
    assert out == LOOP.format(n=256)


@pytest.mark.parametrize("between", [
    "$L__BB0_12:",                                             # another path may reach the arrive
    "st.shared.b32 	[%r9], %r8;",                               # a shared store the barrier orders
    "ld.shared.b32 	%r8, [%r9];",
])
def test_a_release_not_straight_after_wgmma_wait_keeps_its_barrier(between):
    ptx = LOOP.format(n=128).replace("	add.s32 	%r365, %r363, 213224;", f"	{between}\n	add.s32 	%r365, %r363, 213224;")
    out, stats = ptx_release.rewrite(ptx, "k")
    assert stats == {"removed": 2, "wait": 1, "arrive": 1}
    assert "bar.sync 	2, 128;\n	@%p529 mbarrier.arrive.shared::cta.b64 _, [%r365];" in out


def test_leaves_expect_tx_remote_and_unpredicated_arrives():
    base = LOOP.format(n=128)
    for arrive in ("@%p529 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r365], 49152;",
                   "@%p529 mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r365];",
                   "mbarrier.arrive.shared::cta.b64 _, [%r365];"):
        ptx = base.replace("@%p529 mbarrier.arrive.shared::cta.b64 _, [%r365];", arrive)
        assert ptx_release.rewrite(ptx, "k")[1]["arrive"] == 1, arrive


def test_a_label_outside_inline_asm_ends_the_look_ahead():
    ptx = LOOP.format(n=128).replace("	// begin inline asm\n	{\n	.reg .pred complete;\n", "")
    out, stats = ptx_release.rewrite(ptx, "k")
    assert stats["wait"] == 0


@pytest.mark.parametrize("b_kmajor", [False, True])
def test_gemm_loses_six_warpgroup_barriers_and_nothing_else(b_kmajor):
    """Two consumer warpgroups x (stage wait, release in the loop, release after the tile)."""
    lean = compile_variant(SPLIT_WGS=True, LEAN_RELEASE=True, B_KMAJOR=b_kmajor)
    plain = compile_variant(SPLIT_WGS=True, B_KMAJOR=b_kmajor)
    assert lean.binary.metadata["gluon_release"] == {"removed": 6, "wait": 2, "arrive": 4}
    assert "gluon_release" not in plain.binary.metadata
    a, b = sass_instructions(lean.sass()), sass_instructions(plain.sass())
    assert b["BAR.SYNC.DEFER_BLOCKING"] - a["BAR.SYNC.DEFER_BLOCKING"] == 6
    for op in ("HGMMA.64x256x16.F32", "UTMALDG.2D", "UTMASTG.2D", "SYNCS.ARRIVE.TRANS64.A1T0",
               "SYNCS.PHASECHK.TRANS64.TRYWAIT", "USETMAXREG.TRY_ALLOC.CTAPOOL"):
        assert a[op] == b[op], op
    assert lean.spills == 0


@pytest.mark.parametrize("variant", [dict(), dict(CLUSTER_M=2, SPLIT_WGS=True), dict(PINGPONG=True),
                                     dict(SPLIT_WGS=True, CONSUMER_WGS=1, BLOCK_N=128)],
                         ids=["cooperative", "cluster", "pingpong", "one_warpgroup"])
def test_refused_outside_split_warpgroups(variant):
    cfg = dict(DEFAULT_CONFIG, EARLY_LOADS=False, LEAN_PROLOGUE=False, LEAN_RELEASE=True, EPILOGUE="tma", **variant)
    with pytest.raises(GluonError, match="LEAN_RELEASE is for SPLIT_WGS consumer warpgroups"):
        gemm_sm90.trace(*stand_ins(DType.f16), num_warps=num_warps(cfg), **cfg)
