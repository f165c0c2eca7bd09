"""The SM90 GEMM: persistent, warp-specialized, TMA + WGMMA with mbarrier rings, explicitly synchronized.

C[M, N] = A[M, K] @ B (B is [K, N] row-major, or [N, K] with B_KMAJOR, i.e. a column-major B), fp16 or
bf16 inputs, fp32 accumulation, fp16/bf16/fp32 output. Roles:

* consumers: CONSUMER_WGS warpgroups (warps 0 .. 4*CONSUMER_WGS-1, Triton's default partition) share
  one BLOCK_M x BLOCK_N accumulator (cooperative: warpgroup g owns rows g*64 ...). For each tile they
  wait `ready[s]`, issue an async WGMMA on stage s, retire the previous one and release its stage
  on `empty`, then run the epilogue (TMA store through a shared staging tile, or direct stores).
* producer: one warp (warp 4*CONSUMER_WGS) with PRODUCER_REGS registers (setmaxnreg), waiting
  `empty[s]` and refilling stage s with two TMA loads that complete on `ready[s]`.

Both roles walk the same persistent tile sequence: program p takes tiles p, p + P, p + 2P, ... in
grouped order (GROUP_M rows of tiles share their B columns in L2). One ring counter per role runs
across tiles, so stage indices and phases continue from tile to tile.

TMA zero-fills reads past the edges and clips writes, so any M, N, K works (row strides must be
16-byte aligned, which TMA requires: K and N multiples of 8 for 16-bit types).
Thread-block clusters with TMA multicast are not expressible in the TTGIR Triton 3.6 accepts from
text for this kernel shape (see docs/GEMM.md), so this template has none.
"""
import gluon.language as gl
from gluon import SM90, Layout, SwizzleMode, WarpRole, kernel
from gluon.dsl import (fence_async_shared, mbarrier, smem, tma_load, tma_store, tma_store_wait, warp_role, wgmma,
                       wgmma_wait)
from gluon.types import SliceLayout


def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: int):
    """Grouped rasterization: walk GROUP_M tile rows down a column band before moving right."""
    in_group = GROUP_M * num_pid_n
    first_m = (tile // in_group) * GROUP_M
    rows = gl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % in_group) % rows
    pid_n = (tile % in_group) // rows
    return pid_m, pid_n


@kernel(arch=SM90, num_warps=9)
def gemm_sm90(A, B, C,
              BLOCK_M: gl.constexpr = 128, BLOCK_N: gl.constexpr = 256, BLOCK_K: gl.constexpr = 64,
              STAGES: gl.constexpr = 3, GROUP_M: gl.constexpr = 8, CONSUMER_WGS: gl.constexpr = 2,
              PRODUCER_REGS: gl.constexpr = 40, SWIZZLE: gl.constexpr = 128, EPILOGUE: gl.constexpr = "tma",
              B_KMAJOR: gl.constexpr = False):
    M = C.shape[0]
    N = C.shape[1]
    K = A.shape[1]
    sw = SwizzleMode(SWIZZLE)
    a_s = smem(A.dtype, Layout.swizzled(BLOCK_M, BLOCK_K, sw), name="a_ring", stages=STAGES)
    if B_KMAJOR:
        b_s = smem(B.dtype, Layout.swizzled(BLOCK_N, BLOCK_K, sw), name="b_ring", stages=STAGES)
    else:
        b_s = smem(B.dtype, Layout.swizzled(BLOCK_K, BLOCK_N, sw), name="b_ring", stages=STAGES)
    ready = mbarrier(count=1, name="ready", stages=STAGES)
    empty = mbarrier(count=1, name="empty", stages=STAGES)
    if EPILOGUE == "tma":
        c_s = smem(C.dtype, Layout.swizzled(BLOCK_M, BLOCK_N, SwizzleMode.B128), name="c_tile")
    stage_bytes = a_s.nbytes + b_s.nbytes

    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = gl.cdiv(K, BLOCK_K)
    first_tile = gl.program_id(0)
    tile_step = gl.num_programs(0)
    CW = 4 * CONSUMER_WGS

    with warp_role(WarpRole.CONSUMER, warp_range=(0, CW - 1)):
        acc_layout = Layout.wgmma((CW, 1), instr_n=BLOCK_N, operand_dtype=A.dtype)
        cnt = gl.full((), 0, gl.int32)
        for tile in range(first_tile, num_tiles, tile_step):
            pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
            acc = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, layout=acc_layout)
            for kk in range(k_tiles):
                s = cnt % STAGES
                ready[s].wait((cnt // STAGES) & 1)
                b_op = b_s[s].T if B_KMAJOR else b_s[s]
                acc = wgmma(a_s[s], b_op, acc, wait=False)
                acc = wgmma_wait(acc, a_s[s], b_s[s], pendings=1)
                if kk > 0:                      # the previous WGMMA is done: release its stage
                    empty[(cnt + (STAGES - 1)) % STAGES].arrive()
                cnt = cnt + 1
            acc = wgmma_wait(acc, pendings=0)
            empty[(cnt + (STAGES - 1)) % STAGES].arrive()
            off_m = pid_m * BLOCK_M
            off_n = pid_n * BLOCK_N
            if EPILOGUE == "tma":
                tma_store_wait(0)               # the previous tile's store has read c_tile
                c_s.store(acc.to(C.dtype))
                fence_async_shared()
                tma_store(C, (off_m, off_n), c_s)
            else:
                rows = off_m + gl.arange(0, BLOCK_M, layout=SliceLayout(1, acc_layout))
                cols = off_n + gl.arange(0, BLOCK_N, layout=SliceLayout(0, acc_layout))
                mask = (rows[:, None] < M) & (cols[None, :] < N)
                gl.store(C + (rows[:, None] * N + cols[None, :]), acc.to(C.dtype), mask=mask)
        if EPILOGUE == "tma":
            tma_store_wait(0)

    with warp_role(WarpRole.PRODUCER, warp_range=(CW, CW), registers=PRODUCER_REGS):
        cnt = gl.full((), 0, gl.int32)
        for tile in range(first_tile, num_tiles, tile_step):
            pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
            off_m = pid_m * BLOCK_M
            off_n = pid_n * BLOCK_N
            for kk in range(k_tiles):
                s = cnt % STAGES
                empty[s].wait(((cnt // STAGES) & 1) ^ 1)   # fresh barriers pass phase 1 at once
                ready[s].expect(stage_bytes)
                tma_load(a_s[s], A, (off_m, kk * BLOCK_K), ready[s])
                if B_KMAJOR:
                    tma_load(b_s[s], B, (off_n, kk * BLOCK_K), ready[s])
                else:
                    tma_load(b_s[s], B, (kk * BLOCK_K, off_n), ready[s])
                cnt = cnt + 1


DEFAULT_CONFIG = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, STAGES=3, GROUP_M=8, CONSUMER_WGS=2,
                      PRODUCER_REGS=40, SWIZZLE=128, EPILOGUE="tma")


def num_warps(config: dict) -> int:
    return 4 * config.get("CONSUMER_WGS", 2) + 1


def grid(M: int, N: int, config: dict, num_sms: int) -> tuple[int]:
    tiles = gl.cdiv(M, config["BLOCK_M"]) * gl.cdiv(N, config["BLOCK_N"])
    return (max(1, min(tiles, num_sms)),)


_SMS: dict[int, int] = {}


def launch(a, b, c, config: dict | None = None, b_kmajor: bool = False):
    """c = a @ b with the persistent kernel (b is [K, N], or [N, K] when b_kmajor)."""
    import torch
    cfg = dict(DEFAULT_CONFIG, **(config or {}))
    dev = a.device.index if a.device.index is not None else torch.cuda.current_device()
    if dev not in _SMS:
        _SMS[dev] = torch.cuda.get_device_properties(dev).multi_processor_count
    M, N = c.shape
    gemm_sm90[grid(M, N, cfg, _SMS[dev])](a, b, c, B_KMAJOR=b_kmajor, num_warps=num_warps(cfg), **cfg)
    return c
