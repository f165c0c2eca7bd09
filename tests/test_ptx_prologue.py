"""The lean prologue (gluon/backend/ptx/prologue.py, `gl.set_lean_prologue`), on the CPU: which barriers the
PTX rewrite drops and keeps, every case where it must leave the PTX alone, and the GEMM's
machine code with and without it."""
import pytest

from gluon import DType
from gluon.backend.ptx import prologue as ptx_prologue
from gluon.backend.machine_code import sass_instructions
from gluon.ir import GluonError
from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, compile_variant, gemm_sm90, stand_ins

# the shape of Triton 3.6's default-partition prologue with two barrier inits and one early stage
# (A loaded by warp 0, B by warps 0-3), then the warp-specialize entry
PTX = """
$L__BB0_13:
	setmaxnreg.inc.sync.aligned.u32 	240;
	and.b32 	%r18, %r1, 255;
	setp.eq.b32 	%p11, %r18, 0;
	mov.b32 	%r186, global_smem;
	add.s32 	%r210, %r186, 213120;
	// begin inline asm
	@%p11 mbarrier.init.shared::cta.b64 [%r210], 1;
	// end inline asm
	.loc	1 27 5                          // kernel.ttgir:27:5
	bar.sync 	0, 256;
	add.s32 	%r231, %r186, 213128;
	@%p11 mbarrier.init.shared::cta.b64 [%r231], 1;
	div.s32 	%r25, %r644, %r122;
	setp.eq.b32 	%p13, %r25, 0;
	@%p13 bra 	$L__BB0_17;
// %bb.14:
	@%p11 mbarrier.arrive.expect_tx.shared.b64 _, [%r210], 49152;
	bar.sync 	0, 256;
	elect.sync 	%r225|%p16, -1;
	and.pred 	%p14, %p17, %p16;
	@%p14 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r211], [%rd3, {%r212, %r246}], [%r210];
	bar.sync 	0, 256;
	shfl.sync.idx.b32 	%r226, %r2, 0, 31, -1;
	@%p15 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r213], [%rd2, {%r214, %r212}], [%r210];
$L__BB0_17:                             // %.thread11
	setp.ge.s32 	%p29, %r644, %r22;
	st.shared.b32 	[global_smem+213176], 33554689;
	barrier.sync 	1;
	setmaxnreg.dec.sync.aligned.u32 	232;
"""


def _barriers(ptx):
    return [ln.strip() for ln in ptx.splitlines() if ln.strip().startswith("bar.sync")]


def test_keeps_the_barrier_between_the_inits_and_the_first_op_of_another_thread():
    out, stats = ptx_prologue.rewrite(PTX, "k")
    assert stats["removed"] == 2 and len(stats["kept"]) == 1
    lines = out.splitlines()
    kept = lines[stats["kept"][0] - 1]
    assert kept.strip() == "bar.sync \t0, 256;"
    # the kept one follows the expect-tx (issued by the inits' thread) and precedes the first TMA copy
    assert "expect_tx" in lines[stats["kept"][0] - 2] and "elect.sync" in lines[stats["kept"][0]]
    assert _barriers(out) == ["bar.sync \t0, 256;"]
    assert out.count("// gluon lean_prologue: bar.sync") == 2
    assert "barrier.sync \t1;" in out                          # the warp-specialize entry stays


def test_inits_alone_lose_every_barrier_before_the_cta_barrier():
    ptx = PTX.replace("@%p14 cp.async", "@%p11 cp.async").replace("@%p15 cp.async", "@%p11 cp.async")
    out, stats = ptx_prologue.rewrite(ptx, "k")
    assert stats == {"removed": 3, "kept": []}                 # one thread issues everything, in order
    assert _barriers(out) == []


def test_a_programmatic_dependents_wait_may_sit_in_the_span():
    """PDL's `griddepcontrol.wait` (inline asm, every thread) between the inits and the first loads: each thread
    waits before its own next instruction, so the barriers go as without it."""
    wait = "\t// begin inline asm\n\tgriddepcontrol.wait; mov.u32 %r77, 0;\n\t// end inline asm\n"
    ptx = PTX.replace("\tdiv.s32 \t%r25", wait + "\tdiv.s32 \t%r25")
    assert ptx != PTX
    out, stats = ptx_prologue.rewrite(ptx, "k")
    assert stats["removed"] == 2 and len(stats["kept"]) == 1, stats
    assert "griddepcontrol.wait" in out


@pytest.mark.parametrize("edit,why", [
    (("div.s32 \t%r25", "ld.shared.u32 \t%r9, [%r210];\n\tdiv.s32 \t%r25"), "ld.shared.u32 at line"),
    (("@%p13 bra \t$L__BB0_17;", "@%p13 bra \t$L__BB0_99;"), "goes to $L__BB0_99, not to the end"),
    (("barrier.sync \t1;", "barrier.sync \t1, 256;"), "barrier of part of the CTA"),
    (("st.shared.b32 \t[global_smem+213176], 33554689;", "st.shared.b32 \t[%r5], 1;"), "st.shared.b32 at line"),
    (("\tbar.sync \t0, 256;\n\telect.sync", "\telect.sync"), "no barrier between the last init"),
    (("@%p11 mbarrier.arrive.expect_tx", "@%p11 mbarrier.init.shared::cta.b64 [%r9], 1;\n\t@%p14 mbarrier.arrive.expect_tx"),
     "no barrier between the last init and the first op of another thread"),
], ids=["shared-load", "branch-elsewhere", "partial-cta-barrier", "stray-store", "no-kept-barrier", "foreign-expect"])
def test_leaves_the_ptx_alone_when_the_prologue_is_not_what_it_knows(edit, why):
    ptx = PTX.replace(*edit)
    assert ptx != PTX
    out, stats = ptx_prologue.rewrite(ptx, "k")
    assert out == ptx and stats["removed"] == 0 and why in stats["skipped"], stats


def test_no_barrier_inits_no_change():
    ptx = "\tadd.s32 \t%r1, %r2, 1;\n\tbar.sync \t0, 256;\n"
    assert ptx_prologue.rewrite(ptx, "k") == (ptx, {"removed": 0, "skipped": "no mbarrier.init"})


@pytest.mark.parametrize("variant,removed", [(dict(), 11), (dict(EARLY_LOADS=False), 4), (dict(SPLIT_WGS=True), 14)],
                         ids=["early_loads", "inits_only", "split_wgs"])
def test_gemm_prologue_loses_its_barriers_and_nothing_else(variant, removed):
    lean, plain = compile_variant(LEAN_PROLOGUE=True, **variant), compile_variant(LEAN_PROLOGUE=False, **variant)
    st = lean.binary.metadata["gluon_prologue"]
    assert st["removed"] == removed, st
    assert "gluon_prologue" not in plain.binary.metadata
    a, b = sass_instructions(lean.sass()), sass_instructions(plain.sass())
    assert b["BAR.SYNC.DEFER_BLOCKING"] - a["BAR.SYNC.DEFER_BLOCKING"] == removed
    for op in ("HGMMA.64x256x16.F32", "UTMALDG.2D", "USETMAXREG.TRY_ALLOC.CTAPOOL", "SYNCS.EXCH.64"):
        assert a[op] == b[op], op
    assert lean.spills == 0


@pytest.mark.parametrize("M", [32, 128])
def test_the_decode_picks_lose_their_prologue_barriers_with_early_loads(M):
    """The swapped decode picks (K halves summed in a 2-CTA cluster, launched as programmatic dependents) start with
    no cluster barrier, so their prologue is the plain kernel's with PDL's wait in it: "auto" turns LEAN_PROLOGUE
    on there (with EARLY_LOADS: 1-3% faster on the GPU), and it drops most of the barriers the early loads
    brought, keeping the one before the first load of another thread. (The swapped family's pick, as with overrides:
    with none, A's row tile halved takes the K halves' place at these shapes.)"""
    from gluon.kernels.gemm_sm90.picks import choose_config
    pick = choose_config(M, 4096, 4096, 132, pairs=False)
    assert pick.CLUSTER_K == 2 and pick.PDL and pick.resolve(2).LEAN_PROLOGUE and pick.resolve(2).EARLY_LOADS
    kw = dict(pick.to_dict(), EARLY_LOADS=True)
    lean = compile_variant(DType.bf16, B_KMAJOR=True, **dict(kw, LEAN_PROLOGUE=True))
    plain = compile_variant(DType.bf16, B_KMAJOR=True, **dict(kw, LEAN_PROLOGUE=False))
    st = lean.binary.metadata["gluon_prologue"]
    assert st["removed"] >= 10 and len(st["kept"]) == 1, st
    a, b = sass_instructions(lean.sass()), sass_instructions(plain.sass())
    assert b["BAR.SYNC.DEFER_BLOCKING"] - a["BAR.SYNC.DEFER_BLOCKING"] == st["removed"]
    for op in ("HGMMA.64x%dx16.F32.BF16" % M, "UTMALDG.2D", "SYNCS.EXCH.64", "UCGABAR_ARV", "ACQBULK"):
        assert a[op] == b[op] and a[op] > 0, op
    assert lean.spills == 0


def test_auto_turns_it_on_where_it_was_verified():
    assert DEFAULT_CONFIG.resolve(2).LEAN_PROLOGUE is True
    assert DEFAULT_CONFIG.replace(PDL=True).resolve(2).LEAN_PROLOGUE is True      # PDL's wait inside its span
    for off in (dict(CLUSTER_M=2), dict(EPILOGUE="ring")):
        assert DEFAULT_CONFIG.replace(**off).resolve(2).LEAN_PROLOGUE is False, off
    assert DEFAULT_CONFIG.replace(LEAN_PROLOGUE=False).resolve(2).LEAN_PROLOGUE is False


@pytest.mark.parametrize("variant", [dict(CLUSTER_M=2), dict(EPILOGUE="ring")], ids=["cluster", "ring"])
def test_refused_outside_the_verified_kernels(variant):
    with pytest.raises(GluonError, match="LEAN_PROLOGUE is verified for the cooperative kernel"):
        DEFAULT_CONFIG.replace(EARLY_LOADS=False, LEAN_PROLOGUE=True, **variant)


def test_unresolved_auto_is_refused():
    with pytest.raises(GluonError, match=r"LEAN_PROLOGUE='auto': the kernel takes True or False"):
        gemm_sm90.trace(*stand_ins(DType.f16), num_warps=9,
                        CFG=DEFAULT_CONFIG.replace(EPILOGUE="tma", EARLY_LOADS=False, LEAN_PROLOGUE="auto"))
