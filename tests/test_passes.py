"""Passes: layout assignment, layout rules, warp roles, shared-memory capacity, stage indices."""
import pytest

import gluon
import gluon.language as gl
from gluon import SM90, DType, Layout, SwizzleMode, TensorRef, WarpRole
from gluon.ir import GluonError
from gluon.jit import run_passes
from gluon.language import PointerArg, mbarrier, smem, tma_load, warp_role, wgmma
from gluon.passes.layout_assign import default_layout
from gluon.types import BlockedLayout, SliceLayout


def test_default_layout_vectorizes_16_bytes():
    assert default_layout((2048,), 4, 4) == BlockedLayout((4,), (32,), (4,), (0,))
    assert default_layout((2048,), 4, 2).size_per_thread == (8,)
    lay = default_layout((64, 32), 4, 2)
    assert lay.size_per_thread == (1, 8) and lay.threads_per_warp == (8, 4) and lay.warps_per_cta == (4, 1)


@gluon.jit
def rows_and_cols(out_ptr, N: gl.constexpr):
    r = gl.arange(0, N)
    offs = r[:, None] * N + r[None, :]         # one arange used as rows and as columns
    gl.store(out_ptr + offs, offs.to(gl.float32))
    gl.store(out_ptr + r, gl.sum(offs, axis=1).to(gl.float32))


def test_layout_assignment_slices_and_rematerializes():
    m = rows_and_cols.trace(PointerArg(DType.f32), N=64, arch=SM90)
    run_passes(m)
    k = m.kernel
    aranges = [op for op in k.walk() if op.kind == "arange"]
    assert len(aranges) >= 2                          # recomputed in the second slice layout, not shuffled
    dims = {op.results[0].type.layout.dim for op in aranges if isinstance(op.results[0].type.layout, SliceLayout)}
    assert dims == {0, 1}
    red = next(op for op in k.walk() if op.kind == "reduce")
    assert red.results[0].type.layout == SliceLayout(1, red.operands[0].type.layout)


@gluon.kernel(arch=SM90, num_warps=4)
def too_much_smem(A, STAGES: gl.constexpr):
    smem(DType.f16, Layout.swizzled(128, 64), name="a_ring", stages=STAGES)
    smem(DType.f16, Layout.swizzled(64, 256), name="b_ring", stages=STAGES)
    mbarrier(name="ready", stages=STAGES)


def test_shared_memory_capacity_lists_regions():
    run_passes(too_much_smem.trace(TensorRef("A", DType.f16, shape=(1, 1)), STAGES=3))
    with pytest.raises(GluonError) as e:
        run_passes(too_much_smem.trace(TensorRef("A", DType.f16, shape=(1, 1)), STAGES=5))
    msg = str(e.value)
    assert "more than the 227.0 KiB" in msg and "a_ring" in msg and "b_ring" in msg and "ready" in msg


@gluon.kernel(arch=SM90, num_warps=4)
def bad_row_bytes(A):
    smem(DType.f16, Layout.swizzled(128, 32, SwizzleMode.B128), name="a")


def test_nvmma_rows_must_fill_the_swizzle():
    with pytest.raises(GluonError, match=r"64-byte rows.*multiple of 64 elements, or use swizzle B64 / B32"):
        run_passes(bad_row_bytes.trace(TensorRef("A", DType.f16, shape=(1, 1))))


def _ws_kernel(producer, consumer, num_warps=8, registers=None):
    @gluon.kernel(arch=SM90, num_warps=num_warps)
    def ws(A, B, K):
        a = smem(DType.f16, Layout.swizzled(128, 64), name="a")
        b = smem(DType.f16, Layout.swizzled(64, 128), name="b")
        bar = mbarrier(name="bar")
        with warp_role(WarpRole.CONSUMER, warp_range=consumer):
            bar.wait(0)
            wgmma(a, b, "acc")
        with warp_role(WarpRole.PRODUCER, warp_range=producer, registers=registers):
            bar.expect(a.nbytes + b.nbytes)
            tma_load(a, A, (0, 0), bar)
            tma_load(b, B, (0, 0), bar)
    return ws.trace(TensorRef("A", DType.f16, shape=("M", "K")), TensorRef("B", DType.f16, shape=("K", "N")),
                    DType.i32)


def test_warp_roles_checked():
    run_passes(_ws_kernel((4, 4), (0, 3), num_warps=5, registers=24))
    with pytest.raises(GluonError, match="warp 3 belongs to two roles"):
        run_passes(_ws_kernel((3, 4), (0, 3), num_warps=5))
    with pytest.raises(GluonError, match=r"warps \[5\] .* have no role"):
        run_passes(_ws_kernel((4, 4), (0, 3), num_warps=6))
    with pytest.raises(GluonError, match="multiple of 8 in 24..256"):
        run_passes(_ws_kernel((4, 4), (0, 3), num_warps=5, registers=20))
    with pytest.raises(GluonError, match="whole warpgroups"):
        run_passes(_ws_kernel((0, 3), (4, 6), num_warps=7))


@gluon.kernel(arch=SM90, num_warps=4)
def big_accumulator(A):
    a = smem(DType.f16, Layout.swizzled(128, 64), name="a")
    b = smem(DType.f16, Layout.swizzled(64, 256), name="b")
    wgmma(a, b, "acc")


def test_accumulator_register_budget():
    with pytest.raises(GluonError, match=r"128x256 f32 accumulator needs 256 registers per thread on 1 warpgroup"):
        run_passes(big_accumulator.trace(TensorRef("A", DType.f16, shape=(1, 1))))


def test_quickstart_implicit_ring_is_reported_by_pipeline_pass():
    import runpy
    import contextlib
    import io
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "quickstart.py")
    with contextlib.redirect_stdout(io.StringIO()):
        mod = runpy.run_path(path)["module"]
    # the 128x256 single-warpgroup accumulator is the first problem the passes find
    with pytest.raises(GluonError, match="registers per thread"):
        run_passes(mod)
