"""Single-tile dot kernels, one per matrix-unit family: HMMA via cp.async + ldmatrix (SM80), MFMA (CDNA3),
tcgen05 + tensor memory (SM100). `gluon selftest` and the tests compile them for their targets."""
import gluon.language as gl
from gluon.arch import CDNA3, SM80, SM100
from gluon.jit import kernel
from gluon.language.amd.cdna3 import mfma
from gluon.language.memory import smem
from gluon.language.nvidia.ampere import cp_async, cp_async_commit, cp_async_wait, mma
from gluon.language.nvidia.blackwell import tcgen05_mma, tmem_alloc, tmem_load
from gluon.language.nvidia.hopper import mbarrier, tma_load
from gluon.types import Layout


@kernel(arch=SM80, num_warps=4)
def mma_tile_sm80(A, B, C, BM: gl.constexpr = 64, BN: gl.constexpr = 64, BK: gl.constexpr = 32):
    """One BMxBN tile of C = A @ B (A [BM, BK], B [BK, BN] row-major f16, C f32): cp.async into swizzled
    shared memory, then HMMA with ldmatrix-fed operands."""
    rm = gl.arange(0, BM)
    rn = gl.arange(0, BN)
    rk = gl.arange(0, BK)
    a_s = smem(gl.float16, Layout.shared(vec=8, per_phase=1, max_phase=8, order=(1, 0)), shape=(BM, BK), name="a")
    b_s = smem(gl.float16, Layout.shared(vec=8, per_phase=1, max_phase=8, order=(1, 0)), shape=(BK, BN), name="b")
    cp_async(a_s, A + (rm[:, None] * BK + rk[None, :]))
    cp_async(b_s, B + (rk[:, None] * BN + rn[None, :]))
    cp_async_commit()
    cp_async_wait(0)
    acc = mma(a_s, b_s, "acc")
    C[rm[:, None] * BN + rn[None, :]] = acc


@kernel(arch=CDNA3, num_warps=4)
def mfma_tile_cdna3(A, B, C, BM: gl.constexpr = 64, BN: gl.constexpr = 64, BK: gl.constexpr = 32):
    """One tile of C = A @ B on AMD CDNA3 matrix cores (MFMA), operands loaded to registers."""
    rm = gl.arange(0, BM)
    rn = gl.arange(0, BN)
    rk = gl.arange(0, BK)
    a = A[rm[:, None] * BK + rk[None, :]]
    b = B[rk[:, None] * BN + rn[None, :]]
    acc = mfma(a, b, "acc")
    C[rm[:, None] * BN + rn[None, :]] = acc


@kernel(arch=SM100, num_warps=4)
def tcgen05_tile_sm100(A, B, C, BM: gl.constexpr = 128, BN: gl.constexpr = 128, BK: gl.constexpr = 64):
    """One tile on Blackwell: TMA into shared memory, tcgen05 MMA into tensor memory, load, store."""
    a_s = smem(gl.float16, Layout.swizzled(BM, BK), name="a")
    b_s = smem(gl.float16, Layout.swizzled(BK, BN), name="b")
    bar = mbarrier(count=1, name="bar")
    bar.expect(a_s.nbytes + b_s.nbytes)
    tma_load(a_s, A, (0, 0), bar)
    tma_load(b_s, B, (0, 0), bar)
    bar.wait(0)
    d = tmem_alloc(gl.float32, (BM, BN))
    tcgen05_mma(a_s, b_s, d, bar, use_acc=False)
    bar.wait(1)
    acc = tmem_load(d)
    rm = gl.arange(0, BM)
    rn = gl.arange(0, BN)
    C[rm[:, None] * BN + rn[None, :]] = acc
