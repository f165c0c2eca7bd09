"""The TMA descriptor prefetch (gluon/backend/ptx/prefetch.py, `gl.set_tma_prefetch`), on the CPU: the PTX
rewrite, its errors, and the GEMM's machine code with and without it."""
import pytest

import gluon.language as gl
from gluon import SM90, DType, Layout, SwizzleMode, TensorRef, kernel
from gluon.backend.machine_code import sass_instructions
from gluon.backend.ptx import prefetch as ptx_prefetch
from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, gemm_sm90, num_warps, stand_ins
from gluon.language import mbarrier, smem, tma_load

PTX = """
.visible .entry k(
	.param .align 64 .b8 k_param_0[128],
	.param .u32 k_param_1,
	.param .align 64 .b8 k_param_2[128]
)
{
	.reg .b64 	%rd<8>;
$L__func_begin0:
	mov.b64 	%rd4, k_param_0;
	mov.b64 	%rd6, k_param_2;
	cvta.param.u64 	%rd2, %rd6;
	cvta.param.u64 	%rd7, %rd4;
	@%p6 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r157], [%rd7, {%r1, %r2}], [%r156];
	@%p6 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r158], [%rd7, {%r3, %r2}], [%r156];
	@%p17 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd2, {%r275, %r113}], [%r276];
}
"""


def test_prefetches_each_descriptor_once_right_after_the_entry_label():
    out, stats = ptx_prefetch.rewrite(PTX, "k")
    assert stats == {"prefetched": ["k_param_0", "k_param_2"]}       # load and store descriptors, deduplicated
    body = out.split("$L__func_begin0:", 1)[1]
    assert body.index("prefetch.tensormap") < body.index("cp.async.bulk.tensor")
    assert body.count("@%gluon_pf prefetch.tensormap [%gluon_tm];") == 2
    assert "setp.eq.u32 %gluon_pf, %gluon_tid, 0;" in body             # thread 0 only
    block = body[:body.index("}")]
    assert "k_param_1" not in block                                    # a scalar, not a descriptor


def test_no_tma_no_change():
    ptx = PTX.replace("cp.async.bulk.tensor", "ld.global")
    assert ptx_prefetch.rewrite(ptx, "k") == (ptx, {"prefetched": []})


def test_errors_say_what_is_missing():
    with pytest.raises(ptx_prefetch.PrefetchPassError, match=r"%rd7 of k does not come from a kernel parameter"):
        ptx_prefetch.rewrite(PTX.replace("cvta.param.u64 \t%rd7, %rd4;", "add.s64 %rd7, %rd4, 8;")
                             .replace("mov.b64 \t%rd4, k_param_0;", "ld.param.b64 %rd4, [k_param_1];"), "k")
    with pytest.raises(ptx_prefetch.PrefetchPassError, match="no entry label"):
        ptx_prefetch.rewrite(PTX.replace("$L__func_begin0:", ""), "k")


@pytest.mark.parametrize("extra", [{}, {"CLUSTER_M": 2}], ids=["plain", "cluster"])
def test_gemm_machine_code_prefetches_a_b_and_c(extra):
    cfg = DEFAULT_CONFIG.replace(EPILOGUE="tma", TMA_PREFETCH=True, EARLY_LOADS=False, LEAN_PROLOGUE=False, **extra)
    ck = gemm_sm90.compile(*stand_ins(DType.f16), num_warps=num_warps(cfg), CFG=cfg)
    assert len(ck.binary.metadata["gluon_prefetch"]["prefetched"]) == 3      # A, B (loads) and C (store)
    ops = sass_instructions(ck.sass())
    assert ops["UTMACCTL.PF"] == 3
    assert ops["HGMMA.64x256x16.F32"] >= 4 and ck.spills == 0
    if extra:                                    # both PTX passes ran: the multicast is still there
        assert ops["UTMALDG.2D.MULTICAST"] == 1
    off = gemm_sm90.compile(*stand_ins(DType.f16), num_warps=num_warps(cfg), CFG=cfg.replace(TMA_PREFETCH=False))
    assert sass_instructions(off.sass())["UTMACCTL.PF"] == 0 and "gluon_prefetch" not in off.binary.metadata


def test_a_small_tma_kernel_prefetches_its_one_descriptor():
    @kernel(arch=SM90, num_warps=4)
    def k(A):
        gl.set_tma_prefetch()
        buf = smem(A.dtype, Layout.swizzled(64, 64, SwizzleMode.B128), name="buf")
        bar = mbarrier(count=1, name="bar")
        bar.expect(64 * 64 * 2)
        tma_load(buf, A, (0, 0), bar)
        bar.wait(0)
        gl.tma_store(A, (64, 0), buf)
        gl.tma_store_wait(0)

    ck = k.compile(TensorRef("A", DType.f16, shape=("M", "K")))
    assert ck.binary.metadata["gluon_prefetch"] == {"prefetched": ["k_param_0"]}   # one descriptor for both
    assert sass_instructions(ck.sass())["UTMACCTL.PF"] == 1
