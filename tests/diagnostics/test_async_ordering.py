"""Async-ordering mistakes that used to compile silently (issue 20, item 1): a register write to shared
memory read by the async proxy without a fence, an async wgmma never retired or used in flight, a
cp.async region read before its copies are waited for. One GluonError each, with its code and line."""
import gluon.language as gl
from gluon import SM80, SM90, DType, Layout, TensorRef, WarpRole, kernel
from gluon.language import (fence_async_shared, mbarrier, smem, tma_load, tma_store, tma_store_wait, warp_role,
                            wgmma, wgmma_wait)
from gluon.language.nvidia.ampere import cp_async, cp_async_commit, cp_async_wait

from _diag import expect_error, gemm_refs, passes

F16_2D = (TensorRef("A", DType.f16, shape=("M", "K")), TensorRef("C", DType.f16, shape=("M", "K")))
ACC = Layout.wgmma((4, 1), instr_n=128)


def _rows_cols(R, C):
    return gl.arange(0, R)[:, None] * C + gl.arange(0, C)[None, :]


# ------------------------------------------------------------------ GL201: fence_async_shared


def store_kernel(v: str):
    @kernel(arch=SM90, num_warps=4)
    def staged_store(A, C):
        x = gl.load(A + _rows_cols(64, 64))
        c_s = smem(C.dtype, Layout.swizzled(64, 64), name="c_tile")
        if v == "fence_first":
            fence_async_shared()
        c_s.store(x)
        if v == "ok":
            fence_async_shared()
        tma_store(C, (0, 0), c_s)                                           # the TMA store
        tma_store_wait(0)
    return staged_store


def test_gl201_the_fenced_store_passes():
    passes(store_kernel("ok"), F16_2D)


def test_gl201_tma_store_of_registers_without_a_fence():
    e = expect_error(store_kernel("none"), F16_2D, "GL201", "# the TMA store")
    assert "last written from registers (smem_store at" in e.message and "fence_async_shared()" in e.message


def test_gl201_fence_before_the_store_does_not_order_it():
    expect_error(store_kernel("fence_first"), F16_2D, "GL201", "# the TMA store")


@kernel(arch=SM90, num_warps=4)
def init_then_store(A, C):
    x = gl.load(A + _rows_cols(64, 64))
    c_s = smem(C.dtype, Layout.swizzled(64, 64), name="c_tile", value=x)
    tma_store(C, (0, 0), c_s)                                               # initial value, no fence
    tma_store_wait(0)


def test_gl201_tma_store_of_an_initial_value_without_a_fence():
    expect_error(init_then_store, F16_2D, "GL201", "# initial value, no fence")


@kernel(arch=SM90, num_warps=4)
def wgmma_of_stored_a(A, B, C):
    a_s = smem(A.dtype, Layout.swizzled(128, 64), name="a")
    b_s = smem(B.dtype, Layout.swizzled(64, 128), name="b")
    bar = mbarrier(count=1, name="bar")
    bar.expect(b_s.nbytes)
    tma_load(b_s, B, (0, 0), bar)
    a_s.store(gl.load(A + _rows_cols(128, 64)))
    bar.wait(0)
    acc = wgmma(a_s, b_s, gl.zeros((128, 128), gl.float32, layout=ACC))     # A from registers, no fence
    C[_rows_cols(128, 128)] = acc.to(C.dtype)


def test_gl201_wgmma_operand_written_from_registers_without_a_fence():
    e = expect_error(wgmma_of_stored_a, gemm_refs()[:3], "GL201", "# A from registers, no fence")
    assert "the wgmma may read the old bytes" in e.message


@kernel(arch=SM90, num_warps=8)
def fence_in_the_other_role(A, C):
    c_s = smem(C.dtype, Layout.swizzled(64, 64), name="c_tile")
    with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
        c_s.store(gl.load(A + _rows_cols(64, 64)))
        tma_store(C, (0, 0), c_s)                                           # fenced elsewhere
        tma_store_wait(0)
    with warp_role(WarpRole.PRODUCER, warp_range=(4, 7)):
        fence_async_shared()


def test_gl201_a_fence_in_another_role_does_not_count():
    expect_error(fence_in_the_other_role, F16_2D, "GL201", "# fenced elsewhere")


# ------------------------------------------------------------------ GL202 / GL203: async wgmma


def _loaded(A, B):
    """A's 128x64 and B's 64x128 tiles in shared memory by TMA, waited for (traced into the calling kernel)."""
    a_s = smem(A.dtype, Layout.swizzled(128, 64), name="a")
    b_s = smem(B.dtype, Layout.swizzled(64, 128), name="b")
    bar = mbarrier(count=1, name="bar")
    bar.expect(a_s.nbytes + b_s.nbytes)
    tma_load(a_s, A, (0, 0), bar)
    tma_load(b_s, B, (0, 0), bar)
    bar.wait(0)
    return a_s, b_s


def mma_kernel(v: str):
    @kernel(arch=SM90, num_warps=4)
    def async_mma(A, B, C, K):
        a_s, b_s = _loaded(A, B)
        acc = gl.zeros((128, 128), gl.float32, layout=ACC)
        if v == "loop_never_waited":
            for i in range(K):
                acc = wgmma(a_s, b_s, acc, wait=False)                      # in the loop, never waited
        else:
            acc = wgmma(a_s, b_s, acc, wait=False)                          # the async wgmma
        if v == "ok":
            acc = wgmma_wait(acc)
        if v == "never_waited":
            return
        if v == "wait_after_use":
            out = acc.to(C.dtype)                                           # used in flight
            acc = wgmma_wait(acc)
        else:
            out = acc.to(C.dtype)                                           # the use
        C[_rows_cols(128, 128)] = out
    return async_mma


def test_gl202_the_waited_async_wgmma_passes():
    passes(mma_kernel("ok"), gemm_refs())


def test_gl202_async_wgmma_never_waited():
    e = expect_error(mma_kernel("never_waited"), gemm_refs(), "GL202", "# the async wgmma")
    assert "nothing waits for it" in e.message and "wgmma_wait(acc)" in e.message


def test_gl202_async_wgmma_in_a_loop_never_waited():
    expect_error(mma_kernel("loop_never_waited"), gemm_refs(), "GL202", "# in the loop, never waited")


def test_gl203_async_wgmma_result_used_before_its_wait():
    e = expect_error(mma_kernel("wait_after_use"), gemm_refs(), "GL203", "# used in flight")
    assert "may still be in flight" in e.message


@kernel(arch=SM90, num_warps=4)
def waited_by_a_later_wait(A, B, C):
    a_s, b_s = _loaded(A, B)
    acc = wgmma(a_s, b_s, gl.zeros((128, 128), gl.float32, layout=ACC), wait=False)
    acc = wgmma(a_s, b_s, acc, wait=False)
    acc = wgmma_wait(acc, pendings=0)
    C[_rows_cols(128, 128)] = acc.to(C.dtype)


def test_gl202_a_chain_of_async_wgmmas_retired_by_one_wait_passes():
    passes(waited_by_a_later_wait, gemm_refs()[:3])


def carried_mma_kernel(v: str):
    """A WGMMA issued before a loop and carried into it in flight (the pipelined fp8 promotion's shape): waited for
    at the top of each iteration, the next one issued at its end and waited for after the loop."""
    @kernel(arch=SM90, num_warps=4)
    def carried_mma(A, B, C, K):
        a_s, b_s = _loaded(A, B)
        total = gl.zeros((128, 128), gl.float32, layout=ACC)
        if v == "yielded_in_flight":                                        # in flight from the 2nd iteration on
            part = gl.zeros((128, 128), gl.float32, layout=ACC)
        else:
            part = wgmma(a_s, b_s, total, wait=False, use_acc=False)      # into the loop in flight
        for i in range(K):
            if v == "used_in_flight":
                total = total + part                                        # read before its wait
            if v == "yielded_in_flight":
                total = total + part                                        # the last iteration's, in flight
            part = wgmma_wait(part, a_s, b_s)
            total = total + part
            part = wgmma(a_s, b_s, part, wait=False, use_acc=False)
        part = wgmma_wait(part, a_s, b_s)
        C[_rows_cols(128, 128)] = (total + part).to(C.dtype)
    return carried_mma


def test_gl203_a_wgmma_carried_into_a_loop_in_flight_and_waited_there_passes():
    passes(carried_mma_kernel("ok"), gemm_refs())


def test_gl203_a_wgmma_carried_into_a_loop_and_read_before_its_wait():
    e = expect_error(carried_mma_kernel("used_in_flight"), gemm_refs(), "GL203", "# read before its wait")
    assert "may still be in flight" in e.message


def test_gl203_a_wgmma_yielded_to_the_next_iteration_and_read_before_its_wait():
    e = expect_error(carried_mma_kernel("yielded_in_flight"), gemm_refs(), "GL203", "# the last iteration's, in flight")
    assert "may still be in flight" in e.message


# ------------------------------------------------------------------ GL204 / GL205: cp.async


def cp_kernel(v: str):
    @kernel(arch=SM80, num_warps=4)
    def cp_tile(A, C):
        a_s = smem(gl.float16, Layout.shared(vec=8, per_phase=1, max_phase=8, order=(1, 0)), shape=(64, 32),
                   name="a")
        if v == "wait_first":
            cp_async_wait(0)
        cp_async(a_s, A + _rows_cols(64, 32))                               # the copy
        if v != "no_commit":
            cp_async_commit()
        if v in ("ok", "no_commit"):
            cp_async_wait(0)
        x = a_s.load()                                                      # the read
        C[_rows_cols(64, 32)] = x
    return cp_tile


def test_gl204_the_waited_copy_passes():
    passes(cp_kernel("ok"), F16_2D)


def test_gl204_cp_async_region_read_without_cp_async_wait():
    e = expect_error(cp_kernel("no_wait"), F16_2D, "GL204", "# the read")
    assert "which cp_async fills" in e.message and "cp_async_wait(0)" in e.message


def test_gl204_cp_async_wait_before_the_copies_does_not_count():
    expect_error(cp_kernel("wait_first"), F16_2D, "GL204", "# the read")


def test_gl205_cp_async_never_committed():
    e = expect_error(cp_kernel("no_commit"), F16_2D, "GL205", "# the copy")
    assert "cp_async_wait only waits for committed groups" in e.message


# ------------------------------------------------------------------ GL206 / GL207: a programmatic dependent's wait


def dependent_kernel(v: str):
    @kernel(arch=SM90, num_warps=4)
    def dependent(A, C):
        if v == "early_store":
            C[_rows_cols(64, 64)] = gl.zeros((64, 64), gl.float16)          # the early store
        if v == "early_load":
            C[_rows_cols(64, 64)] = gl.load(A + _rows_cols(64, 64))          # the early load
        if v == "in_if":
            if gl.program_id(0) == 0:
                gl.griddep_wait()                                           # the wait in an if
        else:
            gl.griddep_wait()                                               # the wait
        gl.griddep_launch_dependents()
        x = gl.load(A + _rows_cols(64, 64))
        C[_rows_cols(64, 64)] = x
    return dependent


def test_gl206_accesses_after_the_wait_pass():
    assert passes(dependent_kernel("ok"), F16_2D).kernel.attrs["launch_pdl"] is True


def test_gl206_a_load_before_the_wait():
    e = expect_error(dependent_kernel("early_load"), F16_2D, "GL206", "# the early load")
    assert "before gl.griddep_wait()" in e.message and "programmatic dependent" in e.message


def test_gl206_a_store_before_the_wait():
    expect_error(dependent_kernel("early_store"), F16_2D, "GL206", "# the early store")


def test_gl207_the_wait_under_an_if():
    e = expect_error(dependent_kernel("in_if"), F16_2D, "GL207", "# the wait in an if")
    assert "inside an `if`" in e.message and "top level" in e.message
