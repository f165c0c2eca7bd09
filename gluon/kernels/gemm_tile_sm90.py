"""A single-warpgroup TMA + WGMMA GEMM tile kernel for SM90, explicitly synchronized.

C[M, N] = A[M, K] @ B[K, N]; A and B row-major fp16/bf16, C fp16/bf16/fp32. One program computes one
BLOCK_M x BLOCK_N tile with WARPS warps (4: one warpgroup; 8: two, each with 64-row halves):

* a STAGES-deep ring of shared tiles, each stage filled by two TMA loads that complete on that
  stage's mbarrier (`expect` announces the bytes);
* the loop waits for stage i, issues an async WGMMA on it and retires the previous one
  (`wgmma_wait(pendings=1)`), then refills the stage the previous WGMMA read with k-step i+STAGES-1;
* the epilogue stages the accumulator in shared memory and writes it with a TMA store (the staging
  tile reuses the ring's bytes: the smem_alloc pass sees the ring is dead by then, so 128x256x64 with
  4 stages fits).

TMA zero-fills reads past the edges and clips writes, so any M, N, K works (K tail included).
This is the spine's end-to-end check; the tuned, warp-specialized, persistent GEMM is another kernel.
"""
import gluon.language as gl
from gluon.arch import SM90
from gluon.jit import kernel
from gluon.language.memory import smem
from gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma_load, tma_store, tma_store_wait, wgmma,
                                          wgmma_wait)
from gluon.types import Layout, SwizzleMode


@kernel(arch=SM90, num_warps=4)
def gemm_tile_sm90(A, B, C, K, BLOCK_M: gl.constexpr = 128, BLOCK_N: gl.constexpr = 128,
                   BLOCK_K: gl.constexpr = 64, STAGES: gl.constexpr = 3, WARPS: gl.constexpr = 4):
    off_m = gl.program_id(0) * BLOCK_M
    off_n = gl.program_id(1) * BLOCK_N
    a_s = smem(A.dtype, Layout.swizzled(BLOCK_M, BLOCK_K, SwizzleMode.B128), name="a_ring", stages=STAGES)
    b_s = smem(B.dtype, Layout.swizzled(BLOCK_K, BLOCK_N, SwizzleMode.B128), name="b_ring", stages=STAGES)
    ready = mbarrier(count=1, name="ready", stages=STAGES)
    stage_bytes = a_s.nbytes + b_s.nbytes
    # at least one k-step (K = 0 reads zeros): with a path that skips the loop, ptxas serializes every WGMMA
    # (C7515: the skipped path's zero accumulator meets the loop's in-flight one at the final wait)
    num_k = gl.maximum(gl.cdiv(K, BLOCK_K), 1)

    for s in gl.static_range(STAGES - 1):          # prologue: fill STAGES-1 stages
        if s < num_k:
            ready[s].expect(stage_bytes)
            tma_load(a_s[s], A, (off_m, s * BLOCK_K), ready[s])
            tma_load(b_s[s], B, (s * BLOCK_K, off_n), ready[s])

    acc = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, layout=Layout.wgmma((WARPS, 1), instr_n=BLOCK_N))
    for i in range(num_k):
        s = i % STAGES
        ready[s].wait((i // STAGES) & 1)
        acc = wgmma(a_s[s], b_s[s], acc, wait=False)
        acc = wgmma_wait(acc, a_s[s], b_s[s], pendings=1)   # the previous WGMMA has finished reading
        j = i + (STAGES - 1)
        if j < num_k:                                      # refill the stage it read
            sj = j % STAGES
            ready[sj].expect(stage_bytes)
            tma_load(a_s[sj], A, (off_m, j * BLOCK_K), ready[sj])
            tma_load(b_s[sj], B, (j * BLOCK_K, off_n), ready[sj])
    acc = wgmma_wait(acc, pendings=0)

    c_s = smem(C.dtype, Layout.swizzled(BLOCK_M, BLOCK_N, SwizzleMode.B128), name="c_tile")
    c_s.store(acc.to(C.dtype))
    fence_async_shared()
    tma_store(C, (off_m, off_n), c_s)
    tma_store_wait(0)


DEFAULT_CONFIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, STAGES=3, WARPS=4)


def grid(M: int, N: int, BLOCK_M: int = 128, BLOCK_N: int = 128) -> tuple[int, int]:
    return (gl.cdiv(M, BLOCK_M), gl.cdiv(N, BLOCK_N))


def launch(a, b, c, **config):
    """c = a @ b with one program per tile; `config` sets BLOCK_M/N/K, STAGES and WARPS (the warps of
    the program: 4 = one warpgroup, 8 = two, each taking 64-row halves of the tile)."""
    cfg = {**DEFAULT_CONFIG, **config}
    g = grid(a.shape[0], b.shape[1], cfg["BLOCK_M"], cfg["BLOCK_N"])
    gemm_tile_sm90[g](a, b, c, a.shape[1], num_warps=cfg["WARPS"], **cfg)
    return c
