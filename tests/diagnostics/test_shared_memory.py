"""Shared-memory mistakes that used to compile silently or fail in MLIR (issue 20): reading a region
nothing wrote, cp.async or a TMA store between different dtypes, a store of the wrong shape (GL401-404,
errors), and a ring indexed past its stages (GL405, a warning: the loop may be short)."""
import warnings


import gluon.language as gl
from gluon import SM80, SM90, DType, Layout, TensorRef, kernel
from gluon.language import fence_async_shared, mbarrier, smem, tma_store, tma_store_wait
from gluon.language.nvidia.ampere import cp_async, cp_async_commit, cp_async_wait
from gluon.passes.bank_conflicts import GluonWarning

from _diag import expect_error, expect_warning, passes

F16 = (TensorRef("A", DType.f16, shape=("M", "K")), TensorRef("C", DType.f16, shape=("M", "K")))


def _rc(R, C):
    return gl.arange(0, R)[:, None] * C + gl.arange(0, C)[None, :]


@kernel(arch=SM90, num_warps=4)
def read_unwritten(A, C):
    a_s = smem(A.dtype, Layout.swizzled(64, 64), name="a")
    x = a_s.load()                                                          # nothing wrote a
    C[_rc(64, 64)] = x


def test_gl401_load_of_a_region_nothing_writes():
    e = expect_error(read_unwritten, F16, "GL401", "# nothing wrote a")
    assert "nothing writes that region" in e.message


@kernel(arch=SM90, num_warps=4)
def tma_store_unwritten(A, C):
    c_s = smem(C.dtype, Layout.swizzled(64, 64), name="c_tile")
    fence_async_shared()
    tma_store(C, (0, 0), c_s)                                               # never filled
    tma_store_wait(0)


def test_gl401_tma_store_of_a_staging_tile_never_filled():
    expect_error(tma_store_unwritten, F16, "GL401", "# never filled")


def cp_kernel(v):
    @kernel(arch=SM80, num_warps=4)
    def cp(A, C):
        a_s = smem(gl.float16, Layout.shared(vec=8, per_phase=1, max_phase=8, order=(1, 0)), shape=(64, 32), name="a")
        cp_async(a_s, A + _rc(64, 32))                                      # the copy
        cp_async_commit()
        cp_async_wait(0)
        C[_rc(64, 32)] = a_s.load().to(gl.float32)
    return cp


def test_gl402_cp_async_of_f32_into_an_f16_region():
    e = expect_error(cp_kernel("f32"), (TensorRef("A", DType.f32, shape=("M", "K")),
                                        TensorRef("C", DType.f32, shape=("M", "K"))), "GL402", "# the copy")
    assert "cp_async copies f32 elements" in e.message and "a f16 region" in e.message


def test_gl402_the_same_dtype_passes():
    passes(cp_kernel("f16"), (TensorRef("A", DType.f16, shape=("M", "K")), TensorRef("C", DType.f32, shape=("M", "K"))))


@kernel(arch=SM90, num_warps=4)
def f32_staging_into_f16(A, C):
    x = gl.load(A + _rc(64, 64))
    c_s = smem(gl.float32, Layout.swizzled(64, 64), name="c_tile")
    c_s.store(x)
    fence_async_shared()
    tma_store(C, (0, 0), c_s)                                               # f32 tile, f16 tensor
    tma_store_wait(0)


def test_gl403_f32_staging_tile_tma_stored_into_an_f16_tensor():
    e = expect_error(f32_staging_into_f16, (TensorRef("A", DType.f32, shape=("M", "K")),
                                            TensorRef("C", DType.f16, shape=("M", "K"))), "GL403",
                     "# f32 tile, f16 tensor")
    assert "TMA copies bytes and does not convert" in e.message


@kernel(arch=SM90, num_warps=4)
def wrong_shape_store(A, C):
    c_s = smem(C.dtype, Layout.swizzled(64, 64), name="c_tile")
    c_s.store(gl.load(A + _rc(64, 128)))                                    # 64x128 into 64x64
    fence_async_shared()
    tma_store(C, (0, 0), c_s)
    tma_store_wait(0)


def test_gl404_store_of_a_tile_of_the_wrong_shape():
    e = expect_error(wrong_shape_store, F16, "GL404", "# 64x128 into 64x64")
    assert "store of a 64x128 tile into 'c_tile', whose tile is 64x64" in e.message


@kernel(arch=SM90, num_warps=4)
def ring_past_its_stages(A, N):
    bars = mbarrier(count=1, name="once", stages=4)
    for i in range(N):
        bars[i].arrive()                                                    # i may pass 3
        bars[i].wait(0)
    gl.store(A + gl.arange(0, 128), gl.arange(0, 128))


def test_gl405_warns_on_a_ring_indexed_by_an_unbounded_loop_index():
    w = expect_warning(ring_past_its_stages, (TensorRef("A", DType.i32, shape=("N",)), DType.i32), "GL405",
                       "# i may pass 3")
    assert "'once' has 4 stages but is indexed by the loop index" in str(w.message)


def test_gl405_a_loop_within_the_ring_is_quiet():
    @kernel(arch=SM90, num_warps=4)
    def bounded(A):
        bars = mbarrier(count=1, name="once", stages=4)
        for i in range(4):
            bars[i].arrive()
            bars[i].wait(0)
        gl.store(A + gl.arange(0, 128), gl.arange(0, 128))
    with warnings.catch_warnings():
        warnings.simplefilter("error", GluonWarning)
        passes(bounded, (TensorRef("A", DType.i32, shape=("N",)),))
