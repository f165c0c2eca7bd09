"""The SM90 GEMM: persistent, warp-specialized, TMA + WGMMA with mbarrier rings, explicitly synchronized.

C[M, N] = A[M, K] @ B (B is [K, N] row-major, or [N, K] with B_KMAJOR, i.e. a column-major B), fp16 or
bf16 inputs, fp32 accumulation, fp16/bf16/fp32 output. Roles:

* consumers: CONSUMER_WGS warpgroups (warps 0 .. 4*CONSUMER_WGS-1, Triton's default partition) share
  one BLOCK_M x BLOCK_N accumulator (cooperative: warpgroup g owns rows g*64 ...). For each tile they
  wait `ready[s]`, issue an async WGMMA on stage s, retire the previous one and release its stage
  on `empty`, then run the epilogue (TMA store through a shared staging tile, or direct stores).
  With SPLIT_WGS each warpgroup is its own role (the second a worker partition with CONSUMER_REGS
  registers) with its own ring of A rows and staging tile, and `empty` counts one arrive per
  warpgroup: Triton's arrive lowering syncs the whole partition first (a 256-thread bar.sync per
  k-step in the cooperative form, a 128-thread one here). Measured on the H200 in steady state (1000 ms
  rounds, both boards, docs/PERF.md eighth session): +0.5 to +1.0% at 4096^3 and 8192^3, +2.5% at
  16384x8192x1024, so `choose_config` uses it wherever a program has several tiles (one-wave shapes
  keep the cooperative form and the coalesced epilogue).
* producer: one warp (warp 4*CONSUMER_WGS; a warpgroup in a cluster) with PRODUCER_REGS registers, waiting
  `empty[s]` and refilling stage s with two TMA loads that complete on `ready[s]`.

Both roles walk the same persistent tile sequence: program p takes tiles p, p + P, p + 2P, ... in
grouped order (GROUP_M rows of tiles share their B columns in L2). One ring counter per role runs
across tiles, so stage indices and phases continue from tile to tile.

TMA zero-fills reads past the edges and clips writes, so any M, N, K works (row strides must be
16-byte aligned, which TMA requires: K and N multiples of 8 for 16-bit types).
Without a config, `choose_config` picks the tiles by problem size (128x256 on 2 warpgroups from about
one wave of such tiles up; 128x64 or 64x64 on one warpgroup with 6 stages below).
CLUSTER_M=2 runs 2-CTA clusters along M: the two CTAs take vertically adjacent tiles, which share
their B tile; each loads half of it with a multicast TMA load into both, and a ring slot is free when
the consumers of both CTAs released it (`arrive(cluster=True)`; the producer drains the ring before
exiting so no remote arrive is left in flight). Triton 3.6 has no multicast TMA, so the backend's PTX
pass adds it (gluon/backend/ptx_cluster.py, docs/CLUSTERS.md). `choose_config` uses it for rows that
are not 128-byte aligned, where it measured faster (it is also cuBLAS's recipe at 2048^3, seen from
row-major tensors; docs/CLUSTERS.md).
EPILOGUE="ring" stages each consumer role's output tile in its own A ring instead of a separate region,
which leaves room for a 4th stage of 128x256x64; the producer then waits (`c_free`) until the TMA
stores have read the rings before it loads a program's next unit, so it is for problems where every
program has one unit (about one wave of tiles). Verified on the H200, but no faster there at 2048^3,
2048x2048x4096 and 1536x2816x2048 (-0.4% to +0.6%, docs/PERF.md): off by default.
EPILOGUE="coalesced" stages the tile in shared memory as "tma" does, then every consumer thread reads
back 16 contiguous bytes of a row and stores them (`launch` sets N_MULTIPLE_16 when N is a multiple of
16, which lets those stores vectorize): no TMA store to wait for at the end of a program. Where every
program has one tile that end is the kernel's critical path, and `choose_config` uses it there.
EARLY_LOADS=True issues the first unit's first STAGES loads from the default warps before the warp
roles start (the producer then begins after them): Triton starts a producer partition only after the
barrier inits and two setmaxnreg hand-overs, and where every program has one tile that delay is part of
the fixed cost per launch. Measured on the H200 (docs/PERF.md): about 0.4 us less per launch, +0.3 to
+1.5% at one wave (2048^3, 2048x2048x4096, 1536x2816x2048), +3 to +5% with one k-step, within the
noise at 4096^3 and 8192^3.
EARLY_LOADS="auto" (the default `launch` and the tuner use) turns it on wherever the kernel has it:
no cluster, not the ring epilogue.
LEAN_PROLOGUE=True drops the CTA barriers Triton's Membar puts between the barrier inits and around each
early load (11 of them with three early stages; the PTX pass backend/ptx_prologue.py keeps the one the
inits need). Verified on the H200 (the 30 lean_prologue GPU tests, 50 bit-identical launches): +1 to
+2.5% with one k-step, -0.7 to +0.9% at one wave (within the noise). LEAN_PROLOGUE="auto" (the
default) turns it on where EARLY_LOADS could be, the family it was verified in.
K_ZIGZAG=True makes each program load the K slices of its odd units top down (the producer alone: the
consumers sum the stages in the order they arrive). The programs' i-th units run together as wave i, and
with grouped order consecutive waves share their A rows; a wave that starts where the last one ended
finds the last one's k-steps of those rows still in L2 instead of re-reading them from DRAM, and at the
power cap DRAM traffic costs clock. Verified on the H200 (96 GPU cases: clusters, ping-pong, split-K, K
tails); same-run A/B on both boards (docs/PERF.md, ninth session): 4096^3 +0.8 to +1.0% against cuBLAS,
8192^3 -0.3 to +1.1% with steadier rounds. `choose_config` turns it on with SPLIT_WGS (several units
per program); the tuner searches it.
Not here: stream-K for the partial last wave. Measured on the H200 (docs/PERF.md, seventh session): at
8192^3 the half-empty last wave of 128x256 tiles costs nothing measurable (8448x8192x8192, whole waves,
is no faster per FLOP), since under the power cap the idle SMs' share comes back as clock.
"""
from dataclasses import dataclass

import gluon.language as gl
import gluon
from gluon import SM90, Layout, SwizzleMode, WarpRole, kernel
from gluon.language.control import static_range, warp_role
from gluon.language.memory import smem
from gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma_load, tma_store, tma_store_wait, wgmma,
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


def _k_slice(split, k_per_split, k_tiles):
    """[k_lo, k_hi): the k-steps of K slice `split` (the last slice may be short)."""
    k_lo = split * k_per_split
    return k_lo, gl.minimum(k_lo + k_per_split, k_tiles)


def _cta_tile(row, col, rank, CLUSTER_M: int):
    """(pid_m, pid_n) of cluster rank `rank` in the cluster tile (row, col): clusters of CLUSTER_M tiles
    stacked along M."""
    return row * CLUSTER_M + rank, col


def _load_stage(a_rings, b_s, b_parts, s, A, B, bar, off_m, off_n, kk, rank, RM: int, BN_PART: int, BLOCK_K: int,
                CLUSTER_M: int, B_KMAJOR: bool):
    """Stage `s` of the A rings and the B ring for k-step `kk`, completing on `bar`: all of it, or in a
    CLUSTER_M cluster this CTA's BN_PART columns of the shared B tile (`b_parts`: the B ring split into
    those parts), multicast into every CTA of the cluster."""
    for g in static_range(len(a_rings)):
        tma_load(a_rings[g][s], A, (off_m + g * RM, kk * BLOCK_K), bar)
    if CLUSTER_M > 1:
        dst, n = b_parts[s * CLUSTER_M + rank], off_n + rank * BN_PART
    else:
        dst, n = b_s[s], off_n
    tma_load(dst, B, (n, kk * BLOCK_K) if B_KMAJOR else (kk * BLOCK_K, n), bar, multicast=CLUSTER_M > 1)


def _tile_indices(off_m, off_n, ROWS: int, COLS: int, layout, M, N):
    """Row and column indices of the ROWS x COLS output tile at (off_m, off_n) in register `layout`,
    and the mask of its elements inside the M x N output."""
    rows = off_m + gl.arange(0, ROWS, layout=SliceLayout(1, layout))
    cols = off_n + gl.arange(0, COLS, layout=SliceLayout(0, layout))
    return rows, cols, (rows[:, None] < M) & (cols[None, :] < N)


@kernel(arch=SM90, num_warps=9)
def gemm_sm90(A, B, C, W, SPLITS,
              BLOCK_M: gl.constexpr = 128, BLOCK_N: gl.constexpr = 256, BLOCK_K: gl.constexpr = 64,
              STAGES: gl.constexpr = 3, GROUP_M: gl.constexpr = 8, CONSUMER_WGS: gl.constexpr = 2,
              PRODUCER_REGS: gl.constexpr = 40, SWIZZLE: gl.constexpr = 128, EPILOGUE: gl.constexpr = "tma",
              B_KMAJOR: gl.constexpr = False, SPLIT_WGS: gl.constexpr = False, CONSUMER_REGS: gl.constexpr = 216,
              CLUSTER_M: gl.constexpr = 1,
              TMA_PREFETCH: gl.constexpr = False, N_MULTIPLE_16: gl.constexpr = False,
              EARLY_LOADS: gl.constexpr = False, LEAN_PROLOGUE: gl.constexpr = False,
              K_ZIGZAG: gl.constexpr = False):
    for key, value in (("EARLY_LOADS", EARLY_LOADS), ("LEAN_PROLOGUE", LEAN_PROLOGUE), ("K_ZIGZAG", K_ZIGZAG)):
        if value not in (True, False):
            raise gluon.GluonError(f"{key}={value!r}: the kernel takes True or False (launch and the tuner "
                                   "resolve 'auto' with resolve_auto)")
    CL = CLUSTER_M                              # CTAs per cluster
    # the family EARLY_LOADS and LEAN_PROLOGUE are written and verified for (early_loads_fit on the host)
    PLAIN = CL == 1 and EPILOGUE != "ring"
    if CL > 1:
        gl.set_cluster(CL)
    if TMA_PREFETCH:    # the A, B and C descriptors into the descriptor cache at kernel start
        gl.set_tma_prefetch()
    if LEAN_PROLOGUE:   # no CTA barrier between the barrier inits and the EARLY_LOADS (backend/ptx_prologue.py)
        if not PLAIN:
            raise gluon.GluonError("LEAN_PROLOGUE is verified for the cooperative kernel without clusters or the "
                                   "ring epilogue; use LEAN_PROLOGUE=False (or 'auto') with those")
        gl.set_lean_prologue()
    M = C.shape[0]
    N = C.shape[1]
    K = A.shape[1]
    if N_MULTIPLE_16:   # set by launch when it holds: the coalesced epilogue's row starts are 16-element aligned
        gl.multiple_of(N, 16)
    sw = SwizzleMode(SWIZZLE)
    # consumer roles: one for all warpgroups (cooperative), or with SPLIT_WGS one per warpgroup, each with
    # its own ring of A rows, staging tile and arrive on `empty`, so they never wait for each other
    ROLES = CONSUMER_WGS if SPLIT_WGS else 1
    RW = 4 * CONSUMER_WGS // ROLES              # warps per consumer role
    RM = BLOCK_M // ROLES                       # accumulator rows per consumer role
    a_rings = [smem(A.dtype, Layout.swizzled(RM, BLOCK_K, sw), name=f"a_ring{g}" if ROLES > 1 else "a_ring",
                    stages=STAGES) for g in range(ROLES)]
    if B_KMAJOR:
        b_s = smem(B.dtype, Layout.swizzled(BLOCK_N, BLOCK_K, sw), name="b_ring", stages=STAGES)
    else:
        b_s = smem(B.dtype, Layout.swizzled(BLOCK_K, BLOCK_N, sw), name="b_ring", stages=STAGES)
    if CLUSTER_M > 1:   # B stage s as CLUSTER_M parts along N, back to back: part r is what CTA r loads
        b_parts = b_s.reinterpret((BLOCK_N // CLUSTER_M, BLOCK_K) if B_KMAJOR else (BLOCK_K, BLOCK_N // CLUSTER_M),
                                  stages=STAGES * CLUSTER_M)
    ready = mbarrier(count=1, name="ready", stages=STAGES)
    # a slot is free once every consumer role of every CTA of the cluster is done with it: in a cluster
    # the other CTAs' producers multicast their part of B into it too
    empty = mbarrier(count=ROLES * CL, name="empty", stages=STAGES)
    if EPILOGUE not in ("tma", "ring", "coalesced", "direct"):
        raise gluon.GluonError(f"EPILOGUE={EPILOGUE!r}: use 'tma', 'ring', 'coalesced' or 'direct'")
    if EPILOGUE == "coalesced" and CL > 1:
        raise gluon.GluonError("EPILOGUE='coalesced' has not run in a cluster (CLUSTER_M > 1) on a GPU "
                               "yet; use EPILOGUE='tma' there")
    c_tiles = []
    if EPILOGUE in ("tma", "coalesced"):
        c_tiles = [smem(C.dtype, Layout.swizzled(RM, BLOCK_N, SwizzleMode.B128),
                        name=f"c_tile{g}" if ROLES > 1 else "c_tile") for g in range(ROLES)]
    elif EPILOGUE == "ring":
        # the output tile staged in the role's own A ring (no staging region: a 4th stage fits instead);
        # the producer loads nothing into the rings of a program's next unit before `c_free` says the
        # TMA stores have read them, so it pays only where each program has one unit
        ring_bytes = STAGES * a_rings[0].nbytes
        c_bytes = RM * BLOCK_N * C.dtype.bits // 8
        if ring_bytes % c_bytes:
            fits = next(n for n in range(1, 64) if n * a_rings[0].nbytes % c_bytes == 0)
            raise gluon.GluonError(f"EPILOGUE='ring': the {RM}x{BLOCK_N} {C.dtype.name} output tile ({c_bytes} bytes) "
                                   f"must fit a whole number of times in the A ring ({STAGES} stages of {RM}x{BLOCK_K} "
                                   f"{A.dtype.name} = {ring_bytes} bytes); use STAGES={fits} or EPILOGUE='tma'")
        c_tiles = [a_rings[g].reinterpret((RM, BLOCK_N), stages=ring_bytes // c_bytes, dtype=C.dtype)
                   for g in range(ROLES)]
        c_free = [mbarrier(count=1, name=f"c_free{g}" if ROLES > 1 else "c_free") for g in range(ROLES)]
    stage_bytes = ROLES * a_rings[0].nbytes + b_s.nbytes

    # work unit = (a cluster's tiles: CLUSTER_M stacked along M, K slice); a cluster's CTAs take the
    # tiles of one unit, which share their B columns: each CTA loads 1/CL of the shared tile and
    # multicasts it
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    num_rows = gl.cdiv(num_pid_m, CLUSTER_M)       # rows of cluster tiles
    num_cols = num_pid_n                           # columns of cluster tiles
    k_tiles = gl.cdiv(K, BLOCK_K)
    k_per_split = gl.cdiv(k_tiles, SPLITS)
    num_units = num_rows * num_cols * SPLITS
    first_tile = gl.program_id(0) // CL            # this cluster's first unit
    tile_step = gl.num_programs(0) // CL           # the number of clusters
    rank = gl.program_id(0) % CL                   # == cluster_rank(): clusters run along x
    GROUP_ROWS = max(GROUP_M // CLUSTER_M, 1)
    BN_PART = BLOCK_N // CLUSTER_M                 # the B columns one CTA of a cluster loads
    if CLUSTER_M > 1 and not B_KMAJOR and BN_PART * B.dtype.bits // 8 % SWIZZLE:
        raise gluon.GluonError(f"CLUSTER_M={CLUSTER_M} with BLOCK_N={BLOCK_N}: each CTA loads {BN_PART} columns of "
                               f"B ({BN_PART * B.dtype.bits // 8} bytes), which must be whole {SWIZZLE}-byte swizzle "
                               f"rows; use BLOCK_N >= {CLUSTER_M * SWIZZLE * 8 // B.dtype.bits} or CLUSTER_M=1")

    if EARLY_LOADS:
        # the first unit's first stages, loaded by the default warps before the warp roles start: Triton
        # starts the producer's partition only after the barrier inits and two register hand-overs, so
        # the first TMA loads (the DRAM round trip every program waits for) leave that much earlier
        if not PLAIN:
            raise gluon.GluonError("EARLY_LOADS is written for the cooperative kernel without clusters or the ring "
                                   "epilogue; use EARLY_LOADS=False (or 'auto') with those")
        row0, col0 = _tile_coords(first_tile // SPLITS, num_rows, num_cols, GROUP_ROWS)
        k_lo0, k_hi0 = _k_slice(first_tile % SPLITS, k_per_split, k_tiles)
        early = gl.where(first_tile < num_units, gl.minimum(gl.maximum(k_hi0 - k_lo0, 0), STAGES), 0)
        for i in static_range(STAGES):
            if i < early:
                ready[i].expect(stage_bytes)
                _load_stage(a_rings, b_s, None, i, A, B, ready[i], row0 * BLOCK_M, col0 * BLOCK_N, k_lo0 + i, 0, RM,
                            BLOCK_N, BLOCK_K, 1, B_KMAJOR)

    for g in static_range(ROLES):
        with warp_role(WarpRole.CONSUMER, warp_range=(g * RW, g * RW + RW - 1),
                       registers=CONSUMER_REGS if g > 0 else None):
            if CL > 1:
                gl.cluster_sync()                   # the other CTAs' barriers are initialised
            a_s = a_rings[g]
            acc_layout = Layout.wgmma((RW, 1), instr_n=BLOCK_N, operand_dtype=A.dtype)
            if EPILOGUE == "coalesced":     # 16 bytes per thread, a warp's threads along one row
                vec = 128 // C.dtype.bits
                tpw_n = min(32, BLOCK_N // vec)
                out_layout = Layout.blocked([1, vec], [32 // tpw_n, tpw_n], [RW, 1], [1, 0])
            cnt = gl.full((), 0, gl.int32)
            for unit in range(first_tile, num_units, tile_step):
                split = unit % SPLITS
                row, col = _tile_coords(unit // SPLITS, num_rows, num_cols, GROUP_ROWS)
                pid_m, pid_n = _cta_tile(row, col, rank, CLUSTER_M)
                k_lo, k_hi = _k_slice(split, k_per_split, k_tiles)
                acc = gl.zeros((RM, BLOCK_N), gl.float32, layout=acc_layout)
                for kk in range(k_lo, k_hi):
                    s = cnt % STAGES
                    ready[s].wait((cnt // STAGES) & 1)
                    b_op = b_s[s].T if B_KMAJOR else b_s[s]
                    acc = wgmma(a_s[s], b_op, acc, wait=False)
                    acc = wgmma_wait(acc, a_s[s], b_s[s], pendings=1)
                    if kk > k_lo:                   # the previous WGMMA is done: release its stage
                        empty[(cnt + (STAGES - 1)) % STAGES].arrive(cluster=CL > 1)
                    cnt = cnt + 1
                acc = wgmma_wait(acc, pendings=0)
                empty[(cnt + (STAGES - 1)) % STAGES].arrive(cluster=CL > 1)
                off_m = pid_m * BLOCK_M + g * RM
                off_n = pid_n * BLOCK_N
                rows, cols, mask = _tile_indices(off_m, off_n, RM, BLOCK_N, acc_layout, M, N)
                if SPLITS > 1:                      # split-K: fp32 partial tile into the workspace
                    gl.store(W + ((split * M + rows[:, None]) * N + cols[None, :]), acc, mask=mask)
                elif EPILOGUE == "direct":
                    gl.store(C + (rows[:, None] * N + cols[None, :]), acc.to(C.dtype), mask=mask)
                elif EPILOGUE == "coalesced":       # staged in shared memory, read back row-contiguous and
                    c_s = c_tiles[g]                # written with 16-byte stores by every consumer thread
                    c_s.store(acc.to(C.dtype))
                    out = c_s.load(layout=out_layout)
                    orows, ocols, omask = _tile_indices(off_m, off_n, RM, BLOCK_N, out_layout, M, N)
                    gl.store(C + (orows[:, None] * N + ocols[None, :]), out, mask=omask)
                else:                               # staged in shared memory, written by a TMA store
                    c_s = c_tiles[g][0] if c_tiles[g].stages > 1 else c_tiles[g]
                    if EPILOGUE == "tma":
                        tma_store_wait(0)           # the previous tile's store has read c_tile
                    c_s.store(acc.to(C.dtype))
                    fence_async_shared()
                    tma_store(C, (off_m, off_n), c_s)
                    if EPILOGUE == "ring":
                        tma_store_wait(0)           # read: the producer may refill the ring
                if EPILOGUE == "ring":
                    c_free[g].arrive()
            if EPILOGUE == "tma":
                tma_store_wait(0)

    CW = 4 * CONSUMER_WGS
    # in a cluster the producer is a whole warpgroup: every warp of the block must reach cluster_sync,
    # and Triton's padding warps (a 1-warp role is padded to 4) never run role code
    PW = 4 if CL > 1 else 1
    with warp_role(WarpRole.PRODUCER, warp_range=(CW, CW + PW - 1), registers=PRODUCER_REGS):
        if CL > 1:
            gl.cluster_sync()
        cnt = gl.full((), 0, gl.int32)
        if EARLY_LOADS:
            cnt = cnt + early                       # the prologue filled slots 0 .. early - 1 (phase 0)
        if EPILOGUE == "ring":
            done = gl.full((), 0, gl.int32)         # units loaded so far
        if K_ZIGZAG:
            odd = gl.full((), 0, gl.int32)          # this unit is the program's 2nd, 4th, ...
            k_top = gl.full((), -1, gl.int32)       # k_lo + k_hi - 1 on those, else -1
            k_at = gl.full((), 0, gl.int32)         # the k-step loaded
        for unit in range(first_tile, num_units, tile_step):
            if EPILOGUE == "ring":
                if done > 0:                        # the consumers' stores have read their rings
                    for g in static_range(ROLES):
                        c_free[g].wait((done - 1) & 1)
                done = done + 1
            split = unit % SPLITS
            row, col = _tile_coords(unit // SPLITS, num_rows, num_cols, GROUP_ROWS)
            pid_m, pid_n = _cta_tile(row, col, rank, CLUSTER_M)
            off_m = pid_m * BLOCK_M
            off_n = pid_n * BLOCK_N
            k_lo, k_hi = _k_slice(split, k_per_split, k_tiles)
            if K_ZIGZAG:                            # odd units of this program walk their K slice downward
                k_top = gl.where(odd == 1, k_lo + k_hi - 1, -1)
                odd = 1 - odd
            if EARLY_LOADS:                         # the first unit's first k-steps are loaded already
                k_lo = k_lo + gl.where(unit == first_tile, early, 0)
            for kk in range(k_lo, k_hi):
                s = cnt % STAGES
                if K_ZIGZAG:
                    k_at = gl.where(k_top >= 0, k_top - kk, kk)
                else:
                    k_at = kk
                empty[s].wait(((cnt // STAGES) & 1) ^ 1)   # fresh barriers pass phase 1 at once
                ready[s].expect(stage_bytes)
                # in a cluster, this CTA's part of the shared B tile, multicast into every CTA of the cluster
                _load_stage(a_rings, b_s, b_parts if CLUSTER_M > 1 else None, s, A, B, ready[s], off_m, off_n, k_at,
                            rank, RM, BN_PART, BLOCK_K, CLUSTER_M, B_KMAJOR)
                cnt = cnt + 1
        if CL > 1:
            # drain: wait until both CTAs' consumers have released every slot, so no remote arrive is
            # still on its way to this block's barriers when it exits
            for i in static_range(STAGES):
                s = cnt % STAGES
                empty[s].wait(((cnt // STAGES) & 1) ^ 1)
                cnt = cnt + 1


# Measured on the H200 (docs/PERF.md): 128x256x64, 3 stages, 2 consumer warpgroups, GROUP_M=16.
# SPLIT_WGS: one role per consumer warpgroup (see the kernel); CONSUMER_REGS is then the second one's
# setmaxnreg, and Triton gives the first (its default partition) what is left of the register file
# (248 with 216 and the producer's 40; the PTX shows the setmaxnreg values).
DEFAULT_CONFIG = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, STAGES=3, GROUP_M=16, CONSUMER_WGS=2,
                      PRODUCER_REGS=40, SWIZZLE=128, EPILOGUE="auto", SPLIT_WGS=False, CONSUMER_REGS=216,
                      CLUSTER_M=1)

# An fp32 output: 128x128 tiles staged through a 64 KiB fp32 tile and written by TMA, 4 stages. The
# 128x256 tile's fp32 staging (128 KiB) leaves room for 2 stages only, and its direct stores spill 8
# registers. Measured on the H200 (docs/PERF.md, fp16 inputs): 8192^3 0.90x -> 0.92x cuBLAS, 4096^3
# 0.82x -> 0.95x, 2048^3 0.69x -> 0.90x, 16384x8192x1024 0.63x -> 1.00x.
FP32_OUT_CONFIG = dict(DEFAULT_CONFIG, BLOCK_N=128, EPILOGUE="tma", STAGES=4)

# Problems with less than one wave of 128x256 tiles: smaller tiles on one consumer warpgroup with a
# deeper ring, so more SMs get work and each keeps more bytes in flight (the 128x256 tile leaves most
# SMs idle there, and split-K pays an fp32 round trip). Smallest first; `choose_config` takes the
# first whose tiles fit in one wave. Measured on the H200 (docs/PERF.md, CUDA-graph replays):
# 128x8192x8192 0.70x -> 0.92x cuBLAS, 1000^3 0.58x -> 0.76x, 333x200x136 0.64x -> 0.86x.
SMALL_CONFIGS = (
    dict(DEFAULT_CONFIG, BLOCK_M=64, BLOCK_N=64, STAGES=6, CONSUMER_WGS=1),
    dict(DEFAULT_CONFIG, BLOCK_M=128, BLOCK_N=64, STAGES=6, CONSUMER_WGS=1),
)


def tiles(M: int, N: int, config: dict) -> int:
    return gl.cdiv(M, config["BLOCK_M"]) * gl.cdiv(N, config["BLOCK_N"])


def units(M: int, N: int, config: dict, splits: int = 1) -> int:
    """Units of work of the persistent grid: a cluster's tiles (CLUSTER_M stacked along M), times the K
    slices."""
    return gl.cdiv(gl.cdiv(M, config["BLOCK_M"]), config.get("CLUSTER_M", 1)) * gl.cdiv(N, config["BLOCK_N"]) * splits


def cluster_size(config: dict) -> int:
    return config.get("CLUSTER_M", 1)


def choose_config(M: int, N: int, K: int, num_sms: int, pitch_aligned: bool = True, out_size: int = 2) -> dict:
    """The hand-picked configuration for a problem when the caller gives none: DEFAULT_CONFIG once
    its 128x256 tiles make a wave (num_sms of them, give or take 10%), else the first of
    SMALL_CONFIGS whose tiles fit in one wave. A rule on tile counts, not a table of shapes.

    `pitch_aligned`: whether the rows of A and B start on 128-byte boundaries. When they do not, the
    large tiles run in 2-CTA clusters that load each B tile once and multicast it: measured on the
    H200 (docs/PERF.md) 4000x3000x5000 0.86x -> 0.98x cuBLAS, 3000x2000x1500 +2%, while on aligned
    shapes clusters were 2% slower to 1% faster.

    When the 128x256 tiles make at most one wave (every program one tile, so its epilogue is not
    hidden behind another tile's mainloop) and output rows are whole multiples of 16 elements of
    `out_size` <= 2 bytes, the epilogue is "coalesced": the tile read back from shared memory and
    written with 16-byte stores by all consumer threads. Against one TMA store, same runs on the H200
    (docs/PERF.md): +1.8/+2.3% with one k-step (2048x2048x64), -0.3..+0.8% (mean +0.3%) at K >= 2048.

    Where programs have several 128x256 tiles, each consumer warpgroup is its own role (SPLIT_WGS): in
    steady state on the H200 (docs/PERF.md, eighth session) 4096^3 0.998-1.001x -> 1.005-1.010x cuBLAS,
    8192^3 fp16 1.023 -> 1.028, 16384x8192x1024 1.056 -> 1.08; at unaligned, clustered shapes the same.
    There, too, a program's odd units load K top down (K_ZIGZAG): same runs, both boards (docs/PERF.md,
    ninth session), 4096^3 +0.8 to +1.0%, 8192^3 -0.3 to +1.1%, 1.4-1.7% less time at 8192^3 fp16.

    An fp32 output (`out_size` 4) takes FP32_OUT_CONFIG instead of the large tiles, unclustered."""
    if tiles(M, N, DEFAULT_CONFIG) * 10 >= num_sms * 9:
        if out_size > 2:
            return dict(FP32_OUT_CONFIG)
        cfg = dict(DEFAULT_CONFIG, CLUSTER_M=1 if pitch_aligned else 2)
        if tiles(M, N, cfg) > num_sms:
            cfg.update(SPLIT_WGS=True, K_ZIGZAG=True)
        elif N % 16 == 0 and pitch_aligned:
            cfg["EPILOGUE"] = "coalesced"
        return cfg
    for cfg in SMALL_CONFIGS:
        if tiles(M, N, cfg) <= num_sms:
            return dict(cfg)
    return dict(DEFAULT_CONFIG)


@gluon.jit
def splitk_reduce(c_ptr, w_ptr, numel, SPLITS, XBLOCK: gl.constexpr):
    """c = sum over the SPLITS fp32 partial products in w (split-major), cast to c's dtype."""
    idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
    if idx < numel:
        acc = w_ptr[idx]
        for s in range(1, SPLITS):
            acc = acc + w_ptr[s * numel + idx]
        c_ptr[idx] = acc


def num_warps(config: dict) -> int:
    return 4 * config.get("CONSUMER_WGS", 2) + (4 if cluster_size(config) > 1 else 1)


def split_k(M: int, N: int, K: int, config: dict, num_sms: int) -> int:
    """How many K slices: 1 while the tiles fill the GPU; else enough units for about one wave, each
    slice at least 16 k-steps, and every slice non-empty."""
    t = tiles(M, N, config)
    k_tiles = gl.cdiv(K, config["BLOCK_K"])
    if t * 2 > num_sms or k_tiles < 32:
        return 1      # small K: the fp32 workspace round trip would cost more than the idle SMs
    want = min(num_sms // t, k_tiles // 16, 16)
    if want <= 1:
        return 1
    per = gl.cdiv(k_tiles, want)
    return gl.cdiv(k_tiles, per)


def grid(M: int, N: int, config: dict, num_sms: int, splits: int = 1) -> tuple[int]:
    """Persistent grid, in clusters (Triton's launcher starts a cluster's CTAs per grid entry): one per
    unit of work up to one per SM."""
    return (max(1, min(units(M, N, config, splits), num_sms // cluster_size(config))),)


_SMS: dict[int, int] = {}
_WORKSPACE: dict[tuple, object] = {}
_PLANS: dict[tuple, "_Plan"] = {}


def _tma_ready(t, strides: tuple | None = None) -> bool:
    """TMA needs a 16-byte aligned base, unit last stride and 16-byte multiple other strides."""
    es = t.element_size()
    st = t.stride() if strides is None else strides
    return st[-1] == 1 and t.data_ptr() % 16 == 0 and all(x * es % 16 == 0 for x in st[:-1])


@dataclass
class _Plan:
    """What a launch of one problem needs besides the operands (see `_plan`)."""
    bound: object                   # gemm_sm90[grid]
    dev: int
    splits: int
    kw: dict                        # constexprs and num_warps
    ck: object = None               # the compiled specialization, after the first launch


def _padded(t, rows: int, cols: int):
    import torch
    out = torch.zeros(rows, cols, device=t.device, dtype=t.dtype)
    out[: t.shape[0], : t.shape[1]] = t
    return out


def launch(a, b, c, config: dict | None = None, b_kmajor: bool = False, splits: int | None = None):
    """c = a @ b with the persistent kernel (b is [K, N], or [N, K] when b_kmajor). `choose_config` picks
    the tiles by problem size; `config` overrides any of its keys (a full config replaces it). `splits`
    overrides the split-K heuristic (1 disables it).

    Operands whose strides TMA cannot describe (a row of K or N elements that is not a multiple of
    16 bytes, or a misaligned base) are copied into zero-padded aligned buffers first: exact, but it
    costs a copy, so aligned inputs are the fast path."""
    sa, sb = a.stride(), b.stride()
    if not (_tma_ready(a, sa) and _tma_ready(b, sb) and _tma_ready(c)):
        align = 16 // a.element_size()
        M, K = a.shape
        N = c.shape[1]
        Kp, Np = -(-K // align) * align, -(-N // (16 // c.element_size())) * (16 // c.element_size())
        Np = max(Np, -(-N // align) * align)
        a2 = _padded(a, M, Kp)
        b2 = _padded(b, Np, Kp) if b_kmajor else _padded(b, Kp, Np)
        c2 = c if (Np == N and _tma_ready(c)) else c.new_empty(M, Np)
        launch(a2, b2, c2, config, b_kmajor, splits)
        if c2 is not c:
            c.copy_(c2[:, :N])
        return c
    M, N = c.shape
    K = a.shape[1]
    es = a.element_size()
    aligned = sa[0] * es % 128 == 0 and sb[0] * es % 128 == 0
    # everything the plan and the kernel's specialization depend on (the operands are TMA-ready, so
    # 16-byte aligned): repeated launches of one problem take the cached compiled kernel directly
    plan_key = (a.get_device(), M, N, K, a.dtype, b.dtype, c.dtype, b_kmajor, splits, aligned,
                tuple(sorted(config.items())) if config else ())
    plan = _PLANS.get(plan_key)
    if plan is None:
        plan = _PLANS[plan_key] = _plan(a, c, M, N, K, config, b_kmajor, splits, aligned)
    S = plan.splits
    if S > 1:                       # one fp32 workspace per (device, stream): same-stream launches run in order
        import torch
        w = _workspace((plan.dev, torch.cuda.current_stream(plan.dev).cuda_stream), S * M * N, a.device)
    else:
        w = _workspace((plan.dev, None), 16, a.device)       # unused by the kernel when S == 1
    if plan.ck is None:
        plan.ck = plan.bound.compiled(a, b, c, w, S, **plan.kw)
    ck = plan.ck
    ck.launcher(plan.bound.grid, *ck.launch_args((a, b, c, w, S), {}))
    if S > 1:
        splitk_reduce[(gl.cdiv(M * N, 1024),), (1024,)](c, w, M * N, S, XBLOCK=1024, num_warps=4)
    return c


def early_loads_fit(cfg: dict) -> bool:
    """Whether the kernel has EARLY_LOADS and LEAN_PROLOGUE for this config: not in clusters or the ring
    epilogue."""
    return cluster_size(cfg) == 1 and cfg["EPILOGUE"] != "ring"


def resolve_auto(cfg: dict, out_size: int) -> dict:
    """The "auto" values, resolved for an output of `out_size`-byte elements. EPILOGUE: "tma" when the
    staging tile fits in 64 KiB beside the ring (a 128x256 fp32 tile would not), else "direct".
    EARLY_LOADS and LEAN_PROLOGUE (absent counts as "auto"): on wherever the kernel has them. Returns
    `cfg`, updated."""
    if cfg["EPILOGUE"] == "auto":
        cfg["EPILOGUE"] = "tma" if out_size * cfg["BLOCK_M"] * cfg["BLOCK_N"] <= 64 * 1024 else "direct"
    for key in ("EARLY_LOADS", "LEAN_PROLOGUE"):
        if cfg.get(key, "auto") == "auto":
            cfg[key] = early_loads_fit(cfg)
    return cfg


def resolve_config(M: int, N: int, K: int, num_sms: int, out_size: int, pitch_aligned: bool = True,
                   config: dict | None = None) -> dict:
    """The config `launch` runs for a problem: `choose_config`, the caller's keys on top, the "auto"
    values resolved for an output of `out_size`-byte elements."""
    return resolve_auto(dict(choose_config(M, N, K, num_sms, pitch_aligned, out_size), **(config or {})), out_size)


def _plan(a, c, M: int, N: int, K: int, config: dict | None, b_kmajor: bool, splits: int | None,
          pitch_aligned: bool = True):
    """What a launch of this problem needs besides the operands: resolved config, split count, grid,
    fp32 workspace. Computed once per (device, sizes, output width, config) and kept in _PLANS, so a
    repeated launch costs a dict lookup here."""
    import torch
    dev = a.device.index if a.device.index is not None else torch.cuda.current_device()
    if dev not in _SMS:
        _SMS[dev] = torch.cuda.get_device_properties(dev).multi_processor_count
    cfg = resolve_config(M, N, K, _SMS[dev], c.element_size(), pitch_aligned, config)
    S = split_k(M, N, K, cfg, _SMS[dev]) if splits is None else splits
    # no empty K slice: the kernel's consumers release a stage after every unit, so a unit without
    # k-steps would release one it never took (e.g. splits=5 over 16 k-steps: 4, 4, 4, 4, 0)
    k_tiles = gl.cdiv(K, cfg["BLOCK_K"])
    S = max(1, gl.cdiv(k_tiles, gl.cdiv(k_tiles, max(S, 1))))
    bound = gemm_sm90[grid(M, N, cfg, _SMS[dev], S)]
    if cfg["EPILOGUE"] == "coalesced" and N % 16 == 0:     # its 16-byte stores need 16-element rows
        cfg["N_MULTIPLE_16"] = True
    return _Plan(bound, dev, S, dict(B_KMAJOR=b_kmajor, num_warps=num_warps(cfg), **cfg))


def _workspace(key: tuple, numel: int, device):
    """The split-K fp32 workspace of a (device, stream): one buffer, grown to the largest request."""
    w = _WORKSPACE.get(key)
    if w is None or w.numel() < numel:
        import torch
        w = _WORKSPACE[key] = torch.empty(numel, device=device, dtype=torch.float32)
    return w


def compile_variant(dtype=None, out_dtype=None, **overrides):
    """DEFAULT_CONFIG with `overrides`, its "auto" values resolved as `launch` resolves them for the output
    type, compiled without tensors (`stand_ins`, no GPU needed; fp16 inputs unless `dtype`): a variant's
    machine code, registers and shared memory."""
    from gluon import DType
    dtype = dtype or DType.f16
    cfg = resolve_auto(dict(DEFAULT_CONFIG, **overrides), (out_dtype or dtype).bits // 8)
    return gemm_sm90.compile(*stand_ins(dtype, out_dtype), num_warps=num_warps(cfg), **cfg)


def stand_ins(dtype, out_dtype=None, splits: int = 1) -> tuple:
    """What `gemm_sm90.trace` / `.compile` take for (A, B, C, W, SPLITS) without tensors: A, B and C of
    `dtype` (C of `out_dtype` if given; B [K, N] or [N, K] alike, its sizes are symbols), the fp32
    split-K workspace, and SPLITS with the divisibility a launch with `splits` K slices specializes on.
    The symbols are named as JITFunction.specialize names a launch's, so the TTGIR is what `launch`
    compiles (the tuner's traces hit the cache at launch)."""
    from gluon import DType, TensorRef
    from gluon.language.kernel import ScalarArg
    refs = [TensorRef(n, d, shape=tuple(f"{n}_shape{i}" for i in range(r)))
            for n, d, r in (("A", dtype, 2), ("B", dtype, 2), ("C", out_dtype or dtype, 2), ("W", DType.f32, 1))]
    return (*refs, ScalarArg(DType.i32, 16 if splits % 16 == 0 else 1))


# ------------------------------------------------------------------------------ tuning (`gluon tune`)

from gluon.tuning.template import (H200_PEAK_BW, H200_PEAK_FLOPS, H200_SMS,  # noqa: E402
                                   TuningTemplate, dtype_name, element_size, gluon_dtype, torch_dtype, waves_efficiency)


class _GemmSM90Tuning(TuningTemplate):
    """`gemm_sm90` for the tuner. Config -> kernel: CONSUMER_WARPS -> CONSUMER_WGS = warps // 4,
    PRODUCER_WARPS must be 1 (one producer warp), CONSUMER_REGS must be left out (or "auto": the
    consumers are Triton's default partition and get what setmaxnreg leaves) unless SPLIT_WGS, where it
    is the second warpgroup's budget, SPLIT_K ("auto"/0 = the
    split_k heuristic, else forced), EPILOGUE "auto" resolved as `launch` does; the rest (BLOCK_M,
    BLOCK_N, BLOCK_K, STAGES, GROUP_M, SWIZZLE, EPILOGUE, PRODUCER_REGS, CLUSTER_M, EARLY_LOADS, K_ZIGZAG) are the
    kernel's constexprs, with the "auto" values resolved as `launch` resolves them.
    Output dtype = input dtype; B is [K, N] row-major."""

    name = "gemm_sm90"
    dims = ("M", "N", "K")
    dtypes = ("fp16", "bf16")
    params = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "GROUP_M", "SWIZZLE", "EPILOGUE", "CONSUMER_WARPS",
              "CONSUMER_REGS", "PRODUCER_WARPS", "PRODUCER_REGS", "CONSUMER_WGS", "SPLIT_K", "SPLIT_WGS", "CLUSTER_M",
              "EARLY_LOADS", "LEAN_PROLOGUE", "K_ZIGZAG")

    def kernel_config(self, config: dict, dtype: str) -> dict:
        cfg = {k: v for k, v in config.items()
               if k not in ("CONSUMER_WARPS", "CONSUMER_REGS", "PRODUCER_WARPS", "SPLIT_K")}
        if "CONSUMER_WARPS" in config:
            w = int(config["CONSUMER_WARPS"])
            if w <= 0 or w % 4:
                raise gluon.GluonError(f"CONSUMER_WARPS={w}: the consumers issue WGMMA, which needs whole "
                                       "warpgroups (a multiple of 4 warps)")
            cfg["CONSUMER_WGS"] = w // 4
        pw = config.get("PRODUCER_WARPS", 1)
        if int(pw) != 1:
            raise gluon.GluonError(f"PRODUCER_WARPS={pw}: gemm_sm90 has one producer warp")
        cr = config.get("CONSUMER_REGS")
        if cr not in (None, "auto", 0):
            if not config.get("SPLIT_WGS"):
                raise gluon.GluonError(f"CONSUMER_REGS={cr}: gemm_sm90's cooperative consumers are Triton's default "
                                       "partition and take the registers setmaxnreg leaves them; leave CONSUMER_REGS "
                                       "out, set it to 'auto', or use SPLIT_WGS (it sets the second warpgroup's)")
            cfg["CONSUMER_REGS"] = int(cr)         # the warp_spec pass checks the budgets fit the SM
        return resolve_auto(dict(DEFAULT_CONFIG, **cfg), element_size(dtype))

    def splits(self, config: dict, shape, num_sms: int = H200_SMS) -> int:
        s = config.get("SPLIT_K", "auto")
        if s in (None, "auto", 0):
            M, N, K = shape
            return split_k(M, N, K, dict(DEFAULT_CONFIG, **{k: v for k, v in config.items()
                                                            if k in DEFAULT_CONFIG}), num_sms)
        return int(s)

    def trace(self, config, shape, dtype, arch):
        if str(arch) != "sm90":
            raise gluon.GluonError(f"gemm_sm90 runs on sm90 (WGMMA + TMA), not {arch}")
        cfg = self.kernel_config(config, dtype)
        S = self.splits(config, shape)
        return gemm_sm90.trace(*stand_ins(gluon_dtype(dtype), splits=S), arch=arch, num_warps=num_warps(cfg),
                               B_KMAJOR=False, **cfg)

    def legality_key(self, config_id, shape, dtype, arch):
        return (config_id, dtype, arch)            # the trace has symbolic sizes

    def compile_key(self, config_id, shape, dtype, arch):
        return (config_id, dtype, arch)            # (a SPLITS of 16 specializes once more, at launch)

    def make_inputs(self, shape, dtype, device, seed):
        import torch
        M, N, K = shape
        g = torch.Generator(device=device)
        g.manual_seed(int(seed))
        dt = torch_dtype(dtype)
        a = torch.randn(M, K, device=device, generator=g, dtype=torch.float32).to(dt)
        b = torch.randn(K, N, device=device, generator=g, dtype=torch.float32).to(dt)
        return {"a": a, "b": b, "out": torch.empty(M, N, device=device, dtype=dt),
                "base_out": torch.empty(M, N, device=device, dtype=dt)}

    def run(self, inputs, config):
        cfg = self.kernel_config(config, dtype_name(inputs["out"].dtype))
        s = config.get("SPLIT_K", "auto")
        launch(inputs["a"], inputs["b"], inputs["out"], cfg, splits=None if s in (None, "auto", 0) else int(s))

    def reference(self, inputs):
        return inputs["a"].double() @ inputs["b"].double()

    def seed_configs(self):
        """What choose_config runs where programs have several tiles (DEFAULT_CONFIG with SPLIT_WGS and
        K_ZIGZAG: 1.01-1.04x cuBLAS at 4096^3-8192^3 on the H200, docs/PERF.md), then without K_ZIGZAG,
        then the cooperative form, in the spec's names."""
        cfg = {k: v for k, v in DEFAULT_CONFIG.items() if k != "CONSUMER_WGS"}
        cfg.update(CONSUMER_WARPS=4 * DEFAULT_CONFIG["CONSUMER_WGS"], PRODUCER_WARPS=1, EPILOGUE="tma",
                   K_ZIGZAG=False)
        return [dict(cfg, SPLIT_WGS=True, K_ZIGZAG=True), dict(cfg, SPLIT_WGS=True), cfg]

    def shape_of(self, a, b, out=None):
        return (a.shape[0], b.shape[1], a.shape[1])

    def call(self, config, a, b, out=None):
        """c = a @ b (a [M, K], b [K, N] row-major, one dtype); `out` is written when given."""
        import torch
        if out is None:
            out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        self.run({"a": a, "b": b, "out": out}, config)
        return out

    def call_args(self, inputs):
        return inputs["a"], inputs["b"]

    def baseline(self, inputs):
        import torch
        a, b, o = inputs["a"], inputs["b"], inputs["base_out"]
        return lambda: torch.matmul(a, b, out=o)

    def flops(self, shape):
        M, N, K = shape
        return 2.0 * M * N * K

    def bytes(self, shape, dtype):
        M, N, K = shape
        return float(element_size(dtype) * (M * K + K * N + M * N))

    def model_s(self, config, shape, dtype, peak_flops=H200_PEAK_FLOPS, peak_bw=H200_PEAK_BW, num_sms=H200_SMS):
        """Roofline penalized by quantization: tile padding of M, N, K, the idle part of the last wave
        of (tile, K-slice) units, L2->SM operand traffic of the tile shape, and the split-K workspace."""
        M, N, K = shape
        cfg = dict(DEFAULT_CONFIG, **{k: v for k, v in config.items() if k in DEFAULT_CONFIG})
        BM, BN, BK = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
        tm, tn, tk = gl.cdiv(M, BM), gl.cdiv(N, BN), gl.cdiv(K, BK)
        S = self.splits(config, shape, num_sms)
        pad = (M * N * K) / (tm * BM * tn * BN * tk * BK)
        waves = waves_efficiency(tm * tn * S, num_sms)
        compute = self.flops(shape) / peak_flops / (pad * waves)
        es = element_size(dtype)
        dram = self.bytes(shape, dtype) / peak_bw
        l2 = (tm * BM * tn * BN * tk * BK) * es * (1.0 / BM + 1.0 / BN) / (2.5 * peak_bw)
        workspace = (2.0 * S * M * N * 4 / peak_bw) if S > 1 else 0.0
        return max(compute, dram, l2) + workspace


TUNING = _GemmSM90Tuning()
