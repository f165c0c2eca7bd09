"""The SM90 GEMM kernel: persistent, warp-specialized, TMA + WGMMA on mbarrier rings, explicitly synchronized.

C[M, N] = A[M, K] @ B (B is [K, N] row-major, or [N, K] with B_KMAJOR, i.e. a column-major B), fp16 or
bf16 inputs, fp32 accumulation, fp16/bf16/fp32 output, under one resolved `GemmConfig` (config.py says
what each knob does). Roles:

* consumers: CONSUMER_WGS warpgroups (warps 0 .. 4*CONSUMER_WGS-1, Triton's default partition) share
  one BLOCK_M x BLOCK_N accumulator (cooperative: warpgroup g owns rows g*64 ...). For each tile they
  wait `ready[s]`, issue an async WGMMA on stage s, retire the previous one and release its stage on
  `empty`, then run the epilogue. With SPLIT_WGS each warpgroup is its own role (the second a worker
  partition with CONSUMER_REGS registers) with its own ring of A rows and staging tile, and `empty`
  counts one arrive per warpgroup (Triton's arrive lowering syncs the whole partition first).
* producer: one warp (warp 4*CONSUMER_WGS; a warpgroup in a cluster) with PRODUCER_REGS registers,
  waiting `empty[s]` and refilling stage s with TMA loads that complete on `ready[s]`.

Both roles walk the same persistent sequence of work units (a cluster's tiles and a K slice): program
p takes units p, p + P, p + 2P, ... in grouped order (GROUP_M rows of tiles share their B columns in
L2). One ring counter per role runs across units, so stage indices and phases continue from unit to
unit. TMA zero-fills reads past the edges and clips writes, so any M, N, K works (row strides must be
16-byte aligned, which TMA requires).

In a CLUSTER_M cluster the CTAs take vertically adjacent tiles, which share their B tile: each loads
its part with a multicast TMA load into all, a ring slot is free when the consumers of every CTA
released it (`arrive(cluster=True)`), and the producer drains the ring before exiting so no remote
arrive is left in flight. In a CLUSTER_K cluster the CTAs take the K slices of one tile instead: each stores
its fp32 partial into the workspace, the cluster meets at a barrier (release / acquire at cluster scope), and
each CTA sums its column slab of the tile over the slices (`_cluster_sum`). Measurements: docs/PERF.md.
"""
import gluon.language as gl
from gluon.arch import SM90
from gluon.ir import GluonError
from gluon.jit import kernel
from gluon.language.control import static_range, warp_role
from gluon.language.memory import smem
from gluon.language.nvidia import ptx
from gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma_load, tma_store, tma_store_wait, wgmma,
                                          wgmma_wait)
from gluon.types import Layout, SliceLayout, SwizzleMode, WarpRole

from ..turns import turns_close, turns_open
from .config import kernel_config
from .fp8_scales import (apply_scales, block_scaled_halves, block_scaled_k_loop, block_scaled_pipelined,
                         block_scaled_quarters, block_scaled_two_parts, copy_ring_scales, load_scales, stage_scales,
                         staged_scales)


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
    if CLUSTER_M == 1:
        return row, col
    return row * CLUSTER_M + rank, col


def _unit(unit, rank, SPLITS, num_rows, num_cols, GROUP_ROWS: int, CLUSTER_K: int):
    """(K slice, cluster tile row, column) of work unit `unit`: units run over the K slices fastest, or with
    CLUSTER_K the unit is the tile and the CTA's cluster rank its slice."""
    if CLUSTER_K > 1:
        row, col = _tile_coords(unit, num_rows, num_cols, GROUP_ROWS)
        return rank, row, col
    row, col = _tile_coords(unit // SPLITS, num_rows, num_cols, GROUP_ROWS)
    return unit % SPLITS, row, col


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


def _col_chunks(acc, width: int) -> list:
    """The WGMMA accumulator `acc` as column chunks of at most `width` columns, left to right (free:
    each chunk is a subset of every thread's registers); a tile of several instruction tiles per warp
    (128 rows on one warpgroup) stays whole."""
    if acc.shape[1] <= width or acc.shape[0] != 16 * acc.layout.warps_per_cta[0]:
        return [acc]
    left, right = gl.split_cols(acc)
    return _col_chunks(left, width) + _col_chunks(right, width)


@gl.helper
def _splitk_fixup(C, W, CNT, acc, off_m, off_n, split, M, N, SPLITS, RM: int):
    """SPLITK_FIXUP: this slice's fp32 partial of the RM x BLOCK_N tile at (off_m, off_n) into the
    workspace, then the last K slice to finish an element of C sums the SPLITS partials of it, in slice
    order (so the result does not depend on which slice finished last, and equals `splitk_reduce`'s),
    writes it to C and zeroes the element's counter for the next launch. Per element, so no thread waits
    for another: each thread stores its partials, fences (release), increments each element's counter
    (relaxed atomics, all in flight at once) and fences again (acquire); the thread of the last slice to
    increment a counter then reads every slice's partial of that element. In 32-column chunks (64-bit
    addresses of a whole 64 x 128 tile would not fit in registers at once)."""
    chunks = _col_chunks(acc, 32)
    CW = acc.shape[1] // len(chunks)
    for i in static_range(len(chunks)):
        rows, cols, mask = _tile_indices(off_m, off_n + i * CW, RM, CW, chunks[i].layout, M, N)
        gl.store(W + ((split * M + rows[:, None]) * N + cols[None, :]), chunks[i], mask=mask)
    ptx.fence("acq_rel", "gpu")
    lasts = []
    for i in static_range(len(chunks)):
        rows, cols, mask = _tile_indices(off_m, off_n + i * CW, RM, CW, chunks[i].layout, M, N)
        old = gl.atomic_add(CNT + (rows[:, None] * N + cols[None, :]), 1, mask=mask, sem="relaxed", scope="gpu")
        lasts.append(mask & (old == SPLITS - 1))
    ptx.fence("acq_rel", "gpu")
    for i in static_range(len(chunks)):
        rows, cols, mask = _tile_indices(off_m, off_n + i * CW, RM, CW, chunks[i].layout, M, N)
        last = lasts[i]
        offs = rows[:, None] * N + cols[None, :]
        total = gl.load(W + offs, mask=last, other=0.0)
        for s in range(1, SPLITS):
            total = total + gl.load(W + ((s * M + rows[:, None]) * N + cols[None, :]), mask=last, other=0.0)
        gl.store(C + offs, total.to(C.dtype), mask=last)
        gl.store(CNT + offs, 0, mask=last)


@gl.helper
def _store_swapped(C, W, acc, off_m, off_n, split, M, N, SPLITS, N_END):
    """SWAP_AB's epilogue: `acc` is the BLOCK_N x BLOCK_M tile of C^T at (off_n, off_m), stored into C (or
    with split-K as this slice's fp32 partial into the workspace) from registers, its columns below N_END (N, or
    the next tile's start with N_STEP). Its rows run along N, so a warp's stores are 16-byte runs of 8 rows: fine
    for the few rows of M it is chosen for."""
    ns = off_n + gl.arange(0, acc.shape[0], layout=SliceLayout(1, acc.layout))
    ms = off_m + gl.arange(0, acc.shape[1], layout=SliceLayout(0, acc.layout))
    mask = (ns[:, None] < N_END) & (ms[None, :] < M)
    if SPLITS > 1:
        gl.store(W + ((split * M + ms[None, :]) * N + ns[:, None]), acc, mask=mask)
    else:
        gl.store(C + (ms[None, :] * N + ns[:, None]), acc.to(C.dtype), mask=mask)


@gl.helper
def _cluster_sum(C, W, off_m, off_n, M, N, ROWS: int, SLAB: int, CK: int, RW: int):
    """CLUSTER_K: the ROWS x SLAB block of C at (off_m, off_n), the sum of the CK slices' fp32 partials in the
    workspace in slice order (so bit-equal to `splitk_reduce`), read 16 bytes a thread along rows. Called after
    the cluster barrier that follows every slice's partial store. The loads skip L1 (`.cg`): the partials were
    written by other SMs. In chunks of rows of at most 8 values a thread a slice, whose loads are asked for
    ahead of the stores of the chunks before them (up to 64 values a thread in flight, at least one chunk
    ahead): ptxas keeps a load below any earlier store (C and W might overlap, for all it knows), so chunks
    loaded in program order after the previous chunk's store would wait one L2 round trip each."""
    vec = min(4, SLAB)
    tpw_n = min(32, SLAB // vec)
    layout = Layout.blocked([1, vec], [32 // tpw_n, tpw_n], [RW, 1], [1, 0])
    CH = min(ROWS, max(8 * 32 * RW // SLAB, 1))
    chunks = ROWS // CH
    ahead = max(1, 64 // (CK * max(CH * SLAB // (32 * RW), 1)) - 1)

    def load(i: int):
        rows, cols, mask = _tile_indices(off_m + i * CH, off_n, CH, SLAB, layout, M, N)
        offs = rows[:, None] * N + cols[None, :]
        return offs, mask, [gl.load(W + (s * M * N + offs), mask=mask, other=0.0, cache="cg") for s in range(CK)]

    pending = [load(i) for i in range(min(ahead, chunks))]
    for i in static_range(chunks):
        if i + ahead < chunks:
            pending.append(load(i + ahead))
        offs, mask, parts = pending.pop(0)
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        gl.store(C + offs, total.to(C.dtype), mask=mask)


@gl.helper
def _copy_rows(src, pitch, dst, rows, cols, WARPS: int):
    """This program's share of src's `rows` x `cols` elements (rows `pitch` elements apart, at any alignment) copied
    into dst's rows (row-major, at least as wide): blocks of 16 rows a warp by 64 columns (32 loads a thread in
    flight; element-wise, since nothing says the rows are aligned), taken round robin by the launch's programs."""
    layout = Layout.blocked([1, 2], [1, 32], [WARPS, 1], [1, 0])
    TR = 16 * WARPS
    TC = 64
    col_blocks = gl.cdiv(cols, TC)
    dpitch = dst.shape[1]
    for t in range(gl.program_id(0), gl.cdiv(rows, TR) * col_blocks, gl.num_programs(0)):
        rb = t // col_blocks
        r = rb * TR + gl.arange(0, TR, layout=SliceLayout(1, layout))
        c = (t - rb * col_blocks) * TC + gl.arange(0, TC, layout=SliceLayout(0, layout))
        mask = (r[:, None] < rows) & (c[None, :] < cols)
        v = gl.load(src.base + (r[:, None] * pitch + c[None, :]), mask=mask)
        gl.store(dst + (r[:, None] * dpitch + c[None, :]), v, mask=mask)


@gl.helper
def _copy_in(AS, A_PITCH, AD, BS, B_PITCH, BD, COPY_A: bool, COPY_B: bool, CNT, WARPS: int):
    """COPY_A / COPY_B, by the WARPS default warps of every program before the warp roles start: their share of the
    caller's operands (TMA cannot read their rows) into the padded buffers the descriptors describe, then the
    meeting of every program's (`grid_meet_all` at CNT[0]: a persistent grid is resident at once), then an
    async-proxy fence, so this CTA's TMA loads (EARLY_LOADS') read what every program wrote. The producer's wait
    on `copied` follows."""
    if COPY_A:
        _copy_rows(AS, A_PITCH, AD, AS.shape[0], AS.shape[1], WARPS)
    if COPY_B:
        _copy_rows(BS, B_PITCH, BD, BS.shape[0], BS.shape[1], WARPS)
    ptx.grid_meet_all(CNT + 0, WARPS)
    ptx.fence_proxy_async_global()


@gl.helper
def _gemm(A, B, C, W, CNT, SA, SB, SPLITS, CFG, B_KMAJOR: bool, N_MULTIPLE_16: bool, SCALE: str, SA_M_MAJOR: bool,
          COPIES: tuple | None):
    """The kernel's body, shared by `gemm_sm90` and `gemm_sm90_copying` (COPIES: the latter's copy arguments,
    `_copy_in`'s), so the kernel without copies has the parameters it always had (ptxas schedules the same PTX
    differently when its parameters move)."""
    kernel_config(CFG)
    if CFG.MMA_TURNS and SCALE != "block":
        raise GluonError(f"MMA_TURNS=True is for fp8 block scales (SCALE='block'), whose per-k-step promotion the "
                         f"turns overlap; this launch has SCALE={SCALE!r}: leave MMA_TURNS=False")
    if CFG.FFMA_YIELD and SCALE != "block":
        raise GluonError(f"FFMA_YIELD=True is for fp8 block scales (SCALE='block'), whose per-k-step promotion it "
                         f"interleaves with the other warpgroups' WGMMAs; this launch has SCALE={SCALE!r}: leave "
                         "FFMA_YIELD=False")
    if CFG.FFMA_YIELD:
        gl.set_ffma_yield()
    if CFG.PIPELINED_PROMOTION and SCALE != "block":
        raise GluonError(f"PIPELINED_PROMOTION=True is for fp8 block scales (SCALE='block'), whose per-k-step "
                         f"promotion it runs under the next WGMMA's issue; this launch has SCALE={SCALE!r}: leave "
                         "PIPELINED_PROMOTION=False")
    if CFG.SCALES_AHEAD and SCALE != "block":
        raise GluonError(f"SCALES_AHEAD=True is for fp8 block scales (SCALE='block'), loaded once per k-step; this "
                         f"launch has SCALE={SCALE!r}: leave SCALES_AHEAD=False")
    if SCALE == "block" and (CFG.BLOCK_K != 128 or CFG.BLOCK_N not in (64, 128, 256) or CFG.SWAP_AB):
        raise GluonError(f"fp8 block scales take BLOCK_K=128 (one scale block per k-step), BLOCK_N 64 or 128 (one B "
                         f"scale per tile) or 256 (two halves) and no SWAP_AB; got BLOCK_K={CFG.BLOCK_K}, "
                         f"BLOCK_N={CFG.BLOCK_N}, SWAP_AB={CFG.SWAP_AB}")
    if CFG.SCALES_IN_RING and SCALE != "block":
        raise GluonError(f"SCALES_IN_RING=True is for fp8 block scales (SCALE='block'), which the producer then copies "
                         f"into the ring; this launch has SCALE={SCALE!r}: leave SCALES_IN_RING=False")
    STEP = CFG.step_n           # columns from one tile to the next: BLOCK_N, or fewer (N_STEP: overlapping tiles)
    if STEP < CFG.BLOCK_N and SCALE == "block":
        raise GluonError(f"N_STEP={STEP} (overlapping tiles) is not written for fp8 block scales, whose B scales go by "
                         "128-column blocks of a tile at a multiple of 128; leave N_STEP=0 with SCALE='block'")
    if CFG.QUARTERS and SCALE != "block":
        raise GluonError(f"QUARTERS=True is for fp8 block scales (SCALE='block') at BLOCK_N=256; this launch has "
                         f"SCALE={SCALE!r}: leave QUARTERS=False")
    if CFG.PDL:         # the next kernel (the split-K second pass) may launch now: it waits for this one itself
        gl.griddep_launch_dependents()
    CM = CFG.CLUSTER_M                          # CTAs per cluster along M (sharing B by multicast) ...
    CK = CFG.CLUSTER_K                          # ... or along K (the slices of one tile)
    CL = CM * CK                                # CTAs per cluster
    GK = CFG.SPLITK_GRID                        # or the slices of a tile meet at its counter, anywhere on the GPU
    if CL > 1:
        gl.set_cluster(CL)
    if CK > 1:
        SPLITS = CK                             # the launch passes CK; the kernel counts on it
    if GK > 1:
        SPLITS = GK
    if CFG.CTAS_PER_SM > 1:  # launched with the registers of CTAS_PER_SM CTAs an SM (the compile step checks)
        gl.set_ctas_per_sm(CFG.CTAS_PER_SM)
    if CFG.TMA_PREFETCH:    # the A, B and C descriptors into the descriptor cache at kernel start
        gl.set_tma_prefetch()
    if CFG.LEAN_PROLOGUE:   # no CTA barrier between the barrier inits and the EARLY_LOADS (backend/ptx/prologue.py)
        gl.set_lean_prologue()
    M = C.shape[0]
    N = C.shape[1]
    K = A.shape[1]
    if N_MULTIPLE_16:   # set by launch when it holds: the coalesced epilogue's row starts are 16-element aligned
        gl.multiple_of(N, 16)
    sw = SwizzleMode(CFG.SWIZZLE)
    # consumer roles: one for all warpgroups (cooperative), or with SPLIT_WGS one per warpgroup, each with
    # its own ring of A rows, staging tile and arrive on `empty`, so they never wait for each other
    ROLES = CFG.consumer_roles
    RW = 4 * CFG.CONSUMER_WGS // ROLES          # warps per consumer role
    RM = CFG.BLOCK_M // ROLES                   # accumulator rows per consumer role
    # fp8 block scales: a role's rows in two parts where the k-step's product beside the sum would not fit the
    # registers (over 64 values a thread: 128 rows a warpgroup), each part's WGMMA, promotion and epilogue in turn
    HOLDS = 64 * 128 * (RW // 4)                # accumulator elements a role holds beside a product of as many
    # ... or at BLOCK_N 256 its columns in COL_PARTS parts: two 128-wide halves, one B scale block each, A read into
    # registers once (with QUARTERS each half's WGMMA as two of 64 columns: four sums)
    COL_PARTS = (4 if CFG.QUARTERS else 2) if SCALE == "block" and CFG.BLOCK_N == 256 else 1
    if COL_PARTS > 1 and (RM != 64 * (RW // 4) or RW != 4 or not B_KMAJOR or CFG.MMA_TURNS
                       or CFG.PIPELINED_PROMOTION or CFG.EPILOGUE in ("tma2", "ring")):
        raise GluonError(f"fp8 block scales at BLOCK_N=256 run each consumer warpgroup's 64 rows as two 128-column "
                         f"halves: they take 64 rows a role on one warpgroup (BLOCK_M=64 * CONSUMER_WGS with "
                         f"SPLIT_WGS=True), B K-major, no MMA_TURNS or PIPELINED_PROMOTION and the 'tma', "
                         f"'coalesced' or 'direct' epilogue; got {RM} rows on {RW // 4} warpgroup(s), "
                         f"MMA_TURNS={CFG.MMA_TURNS}, PIPELINED_PROMOTION={CFG.PIPELINED_PROMOTION}, "
                         f"EPILOGUE={CFG.EPILOGUE!r}")
    EW = CFG.BLOCK_N // COL_PARTS               # the columns of one accumulator tile (and epilogue piece)
    PARTS = 2 if SCALE == "block" and RM * EW > HOLDS else 1
    PR = RM // PARTS                            # accumulator rows per part
    if PARTS > 1 and (PR * CFG.BLOCK_N > HOLDS or PR % (16 * RW) or CFG.MMA_TURNS or CFG.SCALES_AHEAD
                      or CFG.PIPELINED_PROMOTION):
        raise GluonError(f"fp8 block scales with {RM} rows a consumer role ({RW // 4} warpgroup(s)): the rows run in "
                         f"two parts of {PR}, which takes at most {64 * (RW // 4)} rows a part at BLOCK_N 128 and "
                         f"neither MMA_TURNS, SCALES_AHEAD nor PIPELINED_PROMOTION; got BLOCK_N={CFG.BLOCK_N}, "
                         f"MMA_TURNS={CFG.MMA_TURNS}, SCALES_AHEAD={CFG.SCALES_AHEAD}, PIPELINED_PROMOTION="
                         f"{CFG.PIPELINED_PROMOTION} (or give each 64 rows a warpgroup: CONSUMER_WGS="
                         f"{CFG.BLOCK_M // 64}, SPLIT_WGS=True)")
    if CFG.SCALES_IN_RING and PARTS > 1:
        raise GluonError(f"SCALES_IN_RING=True reads a role's scales in its accumulator's rows, which {RM} rows on "
                         f"{RW // 4} warpgroup(s) run in two parts; give each 64 rows a warpgroup (CONSUMER_WGS="
                         f"{CFG.BLOCK_M // 64}, SPLIT_WGS=True) or leave SCALES_IN_RING=False")
    a_rings = [smem(A.dtype, Layout.swizzled(RM, CFG.BLOCK_K, sw), name=f"a_ring{g}" if ROLES > 1 else "a_ring",
                    stages=CFG.STAGES) for g in range(ROLES)]
    if B_KMAJOR:
        b_s = smem(B.dtype, Layout.swizzled(CFG.BLOCK_N, CFG.BLOCK_K, sw), name="b_ring", stages=CFG.STAGES)
    else:
        b_s = smem(B.dtype, Layout.swizzled(CFG.BLOCK_K, CFG.BLOCK_N, sw), name="b_ring", stages=CFG.STAGES)
    BN_PART = CFG.BLOCK_N // CM                 # the B columns one CTA of a cluster loads
    if CM > 1 and not B_KMAJOR and BN_PART * B.dtype.bits // 8 % CFG.SWIZZLE:
        raise GluonError(f"CLUSTER_M={CM} with BLOCK_N={CFG.BLOCK_N}: each CTA loads {BN_PART} columns of B "
                         f"({BN_PART * B.dtype.bits // 8} bytes), which must be whole {CFG.SWIZZLE}-byte swizzle "
                         f"rows; use BLOCK_N >= {CM * CFG.SWIZZLE * 8 // B.dtype.bits} or CLUSTER_M=1")
    if CM > 1 and B_KMAJOR and CFG.BLOCK_K * B.dtype.bits // 8 > CFG.SWIZZLE:
        # a B row wider than the swizzle span is stored as column blocks of the whole tile's rows, so a CTA's
        # rows of it are not one contiguous part (the GPU computed garbage with BLOCK_K=128 bf16, 2-CTA clusters)
        raise GluonError(f"CLUSTER_M={CM} with B K-major and BLOCK_K={CFG.BLOCK_K}: each CTA loads {BN_PART} rows of "
                         f"the B tile, but a row of {CFG.BLOCK_K * B.dtype.bits // 8} bytes spans several "
                         f"{CFG.SWIZZLE}-byte swizzle rows, which TMA stores as separate column blocks; use BLOCK_K <= "
                         f"{CFG.SWIZZLE * 8 // B.dtype.bits} or CLUSTER_M=1")
    if CM > 1:          # B stage s as CM parts along N, back to back: part r is what CTA r loads
        b_parts = b_s.reinterpret((BN_PART, CFG.BLOCK_K) if B_KMAJOR else (CFG.BLOCK_K, BN_PART),
                                  stages=CFG.STAGES * CM)
    ready = mbarrier(count=1, name="ready", stages=CFG.STAGES)
    # a slot is free once every consumer role of every CTA of the cluster is done with it: in a cluster
    # the other CTAs' producers multicast their part of B into it too
    empty = mbarrier(count=ROLES * CM, name="empty", stages=CFG.STAGES)
    COPY = COPIES is not None
    if COPY:        # the copied operands are in their padded buffers, every program's share: the producer may load
        copied = mbarrier(count=1, name="copied")
    EPILOGUE = CFG.EPILOGUE
    c_tiles = []
    if EPILOGUE in ("tma", "tma2", "coalesced"):    # "tma2": two staging tiles a role, used in turn
        c_stages = {"stages": 2} if EPILOGUE == "tma2" else {}
        if COL_PARTS > 1 and EPILOGUE == "tma":
            c_stages = {"stages": COL_PARTS}    # a staging tile a column part, all stored before the next waits
        c_tiles = [smem(C.dtype, Layout.swizzled(PR, EW, SwizzleMode.B128),
                        name=f"c_tile{g}" if ROLES > 1 else "c_tile", **c_stages) for g in range(ROLES)]
    elif EPILOGUE == "ring":
        # the output tile staged in the role's own A ring (no staging region: a 4th stage fits instead);
        # the producer loads nothing into the rings of a program's next unit before `c_free` says the
        # TMA stores have read them, so it pays only where each program has one unit
        ring_bytes = CFG.STAGES * a_rings[0].nbytes
        c_bytes = PR * CFG.BLOCK_N * C.dtype.bits // 8
        if ring_bytes % c_bytes:
            fits = next(n for n in range(1, 64) if n * a_rings[0].nbytes % c_bytes == 0)
            raise GluonError(f"EPILOGUE='ring': the {PR}x{CFG.BLOCK_N} {C.dtype.name} output tile ({c_bytes} bytes) "
                             f"must fit a whole number of times in the A ring ({CFG.STAGES} stages of "
                             f"{RM}x{CFG.BLOCK_K} {A.dtype.name} = {ring_bytes} bytes); use STAGES={fits} or "
                             "EPILOGUE='tma'")
        c_tiles = [a_rings[g].reinterpret((PR, CFG.BLOCK_N), stages=ring_bytes // c_bytes, dtype=C.dtype)
                   for g in range(ROLES)]
        c_free = [mbarrier(count=1, name=f"c_free{g}" if ROLES > 1 else "c_free") for g in range(ROLES)]
    stage_bytes = ROLES * a_rings[0].nbytes + b_s.nbytes
    # rowcol scales: loaded before the K loop into registers where a thread's column scales are at most 32,
    # else (64x256 warpgroup tiles: 64 more registers would spill) copied by cp.async into a pair of shared
    # buffers a role (a tile's while the previous tile's are read)
    ACC = (CFG.BLOCK_N, RM) if CFG.SWAP_AB else (PR, EW)
    AHEAD = SCALE == "tensor" or (SCALE == "rowcol" and ACC[1] <= 128 and not CFG.SPLIT_WGS)
    STAGED = SCALE == "rowcol" and not AHEAD
    vec1 = Layout.shared(1, 1, 1, order=(0,))
    if STAGED:
        sr_bufs = [smem(gl.float32, vec1, shape=(ACC[0],), name=f"row_scales{g}", stages=2) for g in range(ROLES)]
        sc_bufs = [smem(gl.float32, vec1, shape=(ACC[1],), name=f"col_scales{g}", stages=2) for g in range(ROLES)]
    # MMA_TURNS: each role's k-step scales pass through shared memory around the turn's hand-over (turn_end_after)
    turn_bufs = [smem(gl.float32, vec1, shape=(RM,), name=f"turn_scales{g}")
                 for g in range(ROLES)] if CFG.MMA_TURNS and SCALE == "block" else [None] * ROLES
    # SCALES_AHEAD: each role's next k-step's block scales copied by cp.async into a pair of shared buffers (at
    # BLOCK_N 256 loaded into registers a k-step early instead: the halves' k-step hides the load)
    ahead_bufs = [(smem(gl.float32, vec1, shape=(RM,), name=f"ahead_a{g}", stages=2),
                   smem(gl.float32, vec1, shape=(RM,), name=f"ahead_b{g}", stages=2))
                  for g in range(ROLES)] if CFG.SCALES_AHEAD and SCALE == "block" and COL_PARTS == 1 else [None] * ROLES

    # SCALES_IN_RING: each role's ring of its k-steps' scales beside the operands' (A's, then each B block's in every
    # row's place: 1 + COL_PARTS vectors a stage), copied by the producer and counted by `ready`
    scale_rings = [smem(gl.float32, vec1, shape=(RM,), name=f"scale_ring{g}", stages=CFG.STAGES * (1 + COL_PARTS))
                   for g in range(ROLES)] if CFG.SCALES_IN_RING else [None] * ROLES

    # work unit = (a cluster's tiles: CM stacked along M, K slice); a cluster's CTAs take the tiles of
    # one unit, which share their B columns: each CTA loads 1/CM of the shared tile and multicasts it
    num_pid_m = gl.cdiv(M, CFG.BLOCK_M)
    num_pid_n = gl.cdiv(N, STEP)
    num_rows = gl.cdiv(num_pid_m, CM)           # rows of cluster tiles
    num_cols = num_pid_n                        # columns of cluster tiles
    k_tiles = gl.cdiv(K, CFG.BLOCK_K)
    k_per_split = gl.cdiv(k_tiles, SPLITS)
    # a unit: a cluster tile and a K slice, or with CLUSTER_K a tile (the cluster's CTAs are its slices)
    num_units = num_rows * num_cols * (1 if CK > 1 else SPLITS)
    first_tile = gl.program_id(0) // CL         # this cluster's first unit
    tile_step = gl.num_programs(0) // CL        # the number of clusters
    rank = gl.program_id(0) % CL                # == cluster_rank(): clusters run along x
    GROUP_ROWS = max(CFG.GROUP_M // CM, 1)

    if CFG.PDL:
        # launched as a programmatic dependent: the barrier inits above overlap the kernel before this one; no
        # global memory is touched before it has finished (the warp roles start after this point)
        gl.griddep_wait()
    if COPY:
        _copy_in(*COPIES, CNT, RW)
        copied.arrive()
    if CFG.EARLY_LOADS:
        # the first unit's first stages, loaded by the default warps before the warp roles start: Triton
        # starts the producer's partition only after the barrier inits and two register hand-overs, so
        # the first TMA loads (the DRAM round trip every program waits for) leave that much earlier
        # (with CLUSTER_K the CTA's rank is its K slice: its loads are its own, before the cluster meets)
        split0, row0, col0 = _unit(first_tile, rank, SPLITS, num_rows, num_cols, GROUP_ROWS, CK)
        k_lo0, k_hi0 = _k_slice(split0, k_per_split, k_tiles)
        early = gl.where(first_tile < num_units, gl.minimum(gl.maximum(k_hi0 - k_lo0, 0), CFG.STAGES), 0)
        for i in static_range(CFG.STAGES):
            if i < early:
                ready[i].expect(stage_bytes)
                _load_stage(a_rings, b_s, None, i, A, B, ready[i], row0 * CFG.BLOCK_M, col0 * STEP, k_lo0 + i,
                            0, RM, CFG.BLOCK_N, CFG.BLOCK_K, 1, B_KMAJOR)

    for g in static_range(ROLES):
        with warp_role(WarpRole.CONSUMER, warp_range=(g * RW, g * RW + RW - 1),
                       registers=CFG.CONSUMER_REGS if g > 0 else None):
            if CM > 1:      # the other CTAs' barriers are initialised (CLUSTER_K's CTAs reach none of them)
                gl.cluster_sync(memory=False)
            a_s = a_rings[g]
            if PARTS > 1:                   # stage s's part p is a_parts[2 * s + p]
                a_parts = a_s.reinterpret((PR, CFG.BLOCK_K), stages=2 * CFG.STAGES)
            if COL_PARTS > 1:               # stage s's B half (quarter) h is b_cols[COL_PARTS * s + h]
                b_cols = b_s.reinterpret((EW, CFG.BLOCK_K), stages=COL_PARTS * CFG.STAGES)
            # SWAP_AB: the warpgroup computes C^T's tile (ACC), B's BLOCK_N rows on WGMMA's M and A's few rows on its N
            acc_layout = Layout.wgmma((RW, 1), instr_n=ACC[1], operand_dtype=A.dtype)
            if EPILOGUE == "coalesced":     # 16 bytes per thread, a warp's threads along one row
                vec = 128 // C.dtype.bits
                tpw_n = min(32, EW // vec)
                out_layout = Layout.blocked([1, vec], [32 // tpw_n, tpw_n], [RW, 1], [1, 0])
            cnt = gl.full((), 0, gl.int32)
            ZIG = SCALE == "block" and CFG.K_ZIGZAG   # the block scales must follow the producer's K order
            if ZIG:
                odd = gl.full((), 0, gl.int32)
            if STAGED:
                sbuf = gl.full((), 0, gl.int32)     # which of the role's two scale buffers this tile's are in
            if EPILOGUE == "tma2":
                cbuf = gl.full((), 0, gl.int32)     # which of the role's two staging tiles the next store uses
            turns_open(g, CFG.MMA_TURNS, ROLES)
            for unit in range(first_tile, num_units, tile_step):
                split, row, col = _unit(unit, rank, SPLITS, num_rows, num_cols, GROUP_ROWS, CK)
                pid_m, pid_n = _cta_tile(row, col, rank, CM)
                k_lo, k_hi = _k_slice(split, k_per_split, k_tiles)
                if ZIG:                             # as the producer: odd units load their K slice top down
                    k_top = gl.where(odd == 1, k_lo + k_hi - 1, -1)
                    odd = 1 - odd
                else:
                    k_top = -1
                acc = gl.zeros(ACC, gl.float32, layout=acc_layout)
                if PARTS > 1 or COL_PARTS > 1:
                    acc2 = gl.zeros(ACC, gl.float32, layout=acc_layout)
                if COL_PARTS > 2:
                    acc3 = gl.zeros(ACC, gl.float32, layout=acc_layout)
                    acc4 = gl.zeros(ACC, gl.float32, layout=acc_layout)
                off_m = pid_m * CFG.BLOCK_M + g * RM
                off_n = pid_n * STEP
                # the columns this tile writes end at N_END (with N_STEP the next tile's start: they overlap)
                N_END = gl.minimum(N, off_n + STEP) if STEP < CFG.BLOCK_N else N
                # the scales asked for before the K loop (AHEAD, STAGED): their latency is then hidden (one tile
                # per CTA, at one wave or a decode shape, has nothing else to hide it behind)
                scales = load_scales(acc, SA, SB, off_m, off_n, M, N, SCALE, CFG.SWAP_AB) if AHEAD else None
                if STAGED:
                    stage_scales(sr_bufs[g][sbuf], sc_bufs[g][sbuf], SA, SB, off_m, off_n, M, N, CFG.SWAP_AB, RW)
                if PARTS > 1:
                    acc, acc2, cnt = block_scaled_two_parts(acc, acc2, a_parts, b_s, ready, empty, cnt, k_lo, k_hi,
                                                            k_top, SA, SB, off_m, off_n, M, gl.cdiv(K, 128),
                                                            CFG.STAGES, CM, B_KMAJOR, ZIG, SA_M_MAJOR)
                elif COL_PARTS > 2:
                    acc, acc2, acc3, acc4, cnt = block_scaled_quarters(acc, acc2, acc3, acc4, a_s, b_cols, ready,
                                                                       empty, cnt, k_lo, k_hi, k_top, SA, SB, off_m,
                                                                       off_n, M, N, gl.cdiv(K, 128), CFG.STAGES, CM,
                                                                       ZIG, SA_M_MAJOR, CFG.SCALES_AHEAD)
                elif COL_PARTS > 1:
                    acc, acc2, cnt = block_scaled_halves(acc, acc2, a_s, b_cols, ready, empty, cnt, k_lo, k_hi, k_top,
                                                         SA, SB, off_m, off_n, M, N, gl.cdiv(K, 128), CFG.STAGES, CM,
                                                         ZIG, SA_M_MAJOR, CFG.SCALES_AHEAD, scale_rings[g])
                elif SCALE == "block" and CFG.PIPELINED_PROMOTION:
                    acc, cnt = block_scaled_pipelined(acc, a_s, b_s, ready, empty, cnt, k_lo, k_hi, k_top, SA, SB,
                                                      off_m, off_n, M, gl.cdiv(K, 128), CFG.STAGES, CM, B_KMAJOR, ZIG,
                                                      SA_M_MAJOR, CFG.MMA_TURNS, g, ROLES, scale_rings[g])
                elif SCALE == "block":              # each 128-deep k-step's product scaled into fp32 (below)
                    acc, cnt = block_scaled_k_loop(acc, a_s, b_s, ready, empty, cnt, k_lo, k_hi, k_top, SA, SB,
                                                   off_m, off_n, M, gl.cdiv(K, 128), CFG.STAGES, CM, B_KMAJOR, ZIG,
                                                   CFG.MMA_TURNS, g, ROLES, SA_M_MAJOR, RW, ahead_bufs[g],
                                                   turn_bufs[g], scale_rings[g])
                else:
                    for kk in range(k_lo, k_hi):
                        s = cnt % CFG.STAGES
                        ready[s].wait((cnt // CFG.STAGES) & 1)
                        b_op = b_s[s].T if B_KMAJOR else b_s[s]
                        if CFG.SWAP_AB:             # C^T += B^T A^T
                            acc = wgmma(b_op.T, a_s[s].T, acc, wait=False)
                        else:
                            acc = wgmma(a_s[s], b_op, acc, wait=False)
                        acc = wgmma_wait(acc, a_s[s], b_s[s], pendings=1)
                        if kk > k_lo:               # the previous WGMMA is done: release its stage
                            empty[(cnt + (CFG.STAGES - 1)) % CFG.STAGES].arrive(cluster=CM > 1)
                        cnt = cnt + 1
                    acc = wgmma_wait(acc, pendings=0)
                    empty[(cnt + (CFG.STAGES - 1)) % CFG.STAGES].arrive(cluster=CM > 1)
                if SCALE == "tensor" or SCALE == "rowcol":   # linear: split-K partials take it too
                    if STAGED:
                        scales = staged_scales(acc, sr_bufs[g][sbuf], sc_bufs[g][sbuf], g, RW)
                        sbuf = 1 - sbuf
                    acc = apply_scales(acc, scales, SCALE)
                # a part's rows or columns at a time (PARTS, COL_PARTS: fp8 block scales)
                for p in static_range(PARTS * COL_PARTS):
                    tile = [acc, acc2, acc3, acc4][p] if COL_PARTS > 2 else (acc if p == 0 else acc2)
                    om = off_m + PR * p if PARTS > 1 else off_m
                    on = off_n + EW * p if COL_PARTS > 1 else off_n
                    rows, cols, mask = _tile_indices(om, on, PR, EW, acc_layout, M, N_END)  # (unused: SWAP_AB)
                    if CFG.SWAP_AB:                     # C^T's tile, from registers (or its split-K partial)
                        _store_swapped(C, W, tile, om, off_n, split, M, N, SPLITS, N_END)
                    elif SPLITS > 1:                    # split-K: fp32 partial tile into the workspace
                        if CFG.SPLITK_FIXUP:            # ... and the last slice of each element sums them
                            _splitk_fixup(C, W, CNT, tile, om, on, split, M, N, SPLITS, PR)
                        else:
                            gl.store(W + ((split * M + rows[:, None]) * N + cols[None, :]), tile, mask=mask)
                    elif EPILOGUE == "direct":
                        gl.store(C + (rows[:, None] * N + cols[None, :]), tile.to(C.dtype), mask=mask)
                    elif EPILOGUE == "coalesced":       # staged in shared memory, read back row-contiguous and
                        c_s = c_tiles[g]                # written with 16-byte stores by every consumer thread
                        c_s.store(tile.to(C.dtype))
                        out = c_s.load(layout=out_layout)
                        orows, ocols, omask = _tile_indices(om, on, PR, EW, out_layout, M, N_END)
                        gl.store(C + (orows[:, None] * N + ocols[None, :]), out, mask=omask)
                    else:                               # staged in shared memory, written by a TMA store
                        if EPILOGUE == "tma2":          # the store of two before (this staging tile's) has read
                            c_s = c_tiles[g][cbuf]      # it; the last one's may still be reading the other
                            tma_store_wait(1)
                        else:
                            c_s = c_tiles[g][p if COL_PARTS > 1 else 0] if c_tiles[g].stages > 1 else c_tiles[g]
                            if EPILOGUE == "tma" and (p == 0 or COL_PARTS == 1):
                                tma_store_wait(0)       # the previous store from this staging tile has read it
                        c_s.store(tile.to(C.dtype))
                        fence_async_shared()
                        tma_store(C, (om, on), c_s)
                        if EPILOGUE == "tma2":
                            cbuf = 1 - cbuf
                        if EPILOGUE == "ring":
                            tma_store_wait(0)           # read: the producer may refill the ring
                if CK > 1:                          # every slice's partial stored: the cluster sums its tile
                    gl.cluster_sync()
                    SLAB = CFG.BLOCK_N // CK
                    _cluster_sum(C, W, off_m, off_n + rank * SLAB, M, N, RM, SLAB, CK, RW)
                if GK > 1:                          # ... or the tile's slices meet at its counter and sum it
                    ptx.grid_meet(CNT + (pid_m * num_pid_n + pid_n), GK * 4 * CFG.CONSUMER_WGS)
                    SLAB = CFG.BLOCK_N // GK
                    _cluster_sum(C, W, off_m, off_n + split * SLAB, M, N, RM, SLAB, GK, RW)
                if EPILOGUE == "ring":
                    c_free[g].arrive()
            turns_close(g, CFG.MMA_TURNS)
            if EPILOGUE in ("tma", "tma2"):
                tma_store_wait(0)

    CW = 4 * CFG.CONSUMER_WGS
    # in a cluster the producer is a whole warpgroup: every warp of the block must reach cluster_sync,
    # and Triton's padding warps (a 1-warp role is padded to 4) never run role code
    PW = 4 if CL > 1 else 1
    with warp_role(WarpRole.PRODUCER, warp_range=(CW, CW + PW - 1), registers=CFG.PRODUCER_REGS):
        if CM > 1:
            gl.cluster_sync(memory=False)
        if COPY:            # what the default warps of every program copied, then seen by this warp's TMA loads
            copied.wait(0)
            ptx.fence_proxy_async_global()
        cnt = gl.full((), 0, gl.int32)
        if CFG.EARLY_LOADS:
            cnt = cnt + early                       # the prologue filled slots 0 .. early - 1 (phase 0)
        if EPILOGUE == "ring":
            done = gl.full((), 0, gl.int32)         # units loaded so far
        if CFG.K_ZIGZAG:
            odd = gl.full((), 0, gl.int32)          # this unit is the program's 2nd, 4th, ...
            k_top = gl.full((), -1, gl.int32)       # k_lo + k_hi - 1 on those, else -1
            k_at = gl.full((), 0, gl.int32)         # the k-step loaded
        for unit in range(first_tile, num_units, tile_step):
            if EPILOGUE == "ring":
                if done > 0:                        # the consumers' stores have read their rings
                    for g in static_range(ROLES):
                        c_free[g].wait((done - 1) & 1)
                done = done + 1
            split, row, col = _unit(unit, rank, SPLITS, num_rows, num_cols, GROUP_ROWS, CK)
            pid_m, pid_n = _cta_tile(row, col, rank, CM)
            off_m = pid_m * CFG.BLOCK_M
            off_n = pid_n * STEP
            k_lo, k_hi = _k_slice(split, k_per_split, k_tiles)
            if CFG.K_ZIGZAG:                        # odd units of this program walk their K slice downward
                k_top = gl.where(odd == 1, k_lo + k_hi - 1, -1)
                odd = 1 - odd
            if CFG.EARLY_LOADS:                     # the first unit's first k-steps are loaded already
                k_lo = k_lo + gl.where(unit == first_tile, early, 0)
            for kk in range(k_lo, k_hi):
                s = cnt % CFG.STAGES
                if CFG.K_ZIGZAG:
                    k_at = gl.where(k_top >= 0, k_top - kk, kk)
                else:
                    k_at = kk
                empty[s].wait(((cnt // CFG.STAGES) & 1) ^ 1)   # fresh barriers pass phase 1 at once
                if CFG.SCALES_IN_RING:              # the k-step's scales, counted by `ready` before its expect
                    for g in static_range(ROLES):
                        copy_ring_scales(scale_rings[g], s, SA, SB, off_m + g * RM, off_n, k_at, M, N, gl.cdiv(K, 128),
                                         COL_PARTS, SA_M_MAJOR, PW)
                    ready[s].arrive_after_copies()
                ready[s].expect(stage_bytes)
                # in a cluster, this CTA's part of the shared B tile, multicast into every CTA of the cluster
                _load_stage(a_rings, b_s, b_parts if CM > 1 else None, s, A, B, ready[s], off_m, off_n, k_at, rank,
                            RM, BN_PART, CFG.BLOCK_K, CM, B_KMAJOR)
                cnt = cnt + 1
            if CK > 1:                              # every thread of the cluster meets the consumers' barrier
                gl.cluster_sync()
        if CM > 1:
            # drain: wait until both CTAs' consumers have released every slot, so no remote arrive is
            # still on its way to this block's barriers when it exits
            for i in static_range(CFG.STAGES):
                s = cnt % CFG.STAGES
                empty[s].wait(((cnt // CFG.STAGES) & 1) ^ 1)
                cnt = cnt + 1


@kernel(arch=SM90, num_warps=9)
def gemm_sm90(A, B, C, W, CNT, SA, SB, SPLITS, CFG: gl.constexpr, B_KMAJOR: gl.constexpr = False,
              N_MULTIPLE_16: gl.constexpr = False, SCALE: gl.constexpr = "none", SA_M_MAJOR: gl.constexpr = False):
    """C = A @ B under the resolved GemmConfig `CFG`, in SPLITS K slices (fp32 partials into the
    workspace W when SPLITS > 1; with CFG.SPLITK_FIXUP the int32 arrival counters CNT, one per element of
    C and zero between launches, let the last slice to finish sum them; with CFG.SPLITK_GRID, one per output
    tile, zero when first used, are where the tile's slices meet, `ptx.grid_meet`); B is [N, K] with B_KMAJOR;
    N_MULTIPLE_16 is the launch's promise that N is a multiple of 16 (the coalesced epilogue's stores, split-K's
    partial stores and the in-kernel sums' loads then vectorize). SCALE (fp8 inputs): "tensor" multiplies the product by
    SA[0] * SB[0], "rowcol" by SA[row] * SB[col] (fp32 scales), before the output's rounding; "block" scales
    each 128-deep k-step's product by SA[row, k-block] * SB[col // 128, k-block] into the fp32 sum
    (`fp8_scales.block_scaled_k_loop`; BLOCK_K 128, BLOCK_N 64, 128 or 256, no SWAP_AB; 128 rows a warpgroup at
    BLOCK_N 128 run in two 64-row parts, `block_scaled_two_parts`; 256 columns as two 128-column halves a
    warpgroup of 64 rows, `block_scaled_halves`, or four quarters, `block_scaled_quarters`). CLUSTER_K or
    SPLITK_GRID > 1: SPLITS must be it."""
    _gemm(A, B, C, W, CNT, SA, SB, SPLITS, CFG, B_KMAJOR, N_MULTIPLE_16, SCALE, SA_M_MAJOR, None)


@kernel(arch=SM90, num_warps=9)
def gemm_sm90_copying(A, B, C, W, CNT, SA, SB, SPLITS, AS, A_PITCH, AD, BS, B_PITCH, BD, CFG: gl.constexpr,
                      B_KMAJOR: gl.constexpr = False, N_MULTIPLE_16: gl.constexpr = False,
                      SCALE: gl.constexpr = "none", SA_M_MAJOR: gl.constexpr = False, COPY_A: gl.constexpr = False,
                      COPY_B: gl.constexpr = False):
    """`gemm_sm90` whose A (COPY_A) and B (COPY_B) are zero-padded buffers the kernel first fills from the caller's
    operands AS and BS, whose rows are A_PITCH and B_PITCH elements apart at any alignment (TMA cannot read them),
    through the same buffers passed again as AD and BD (`_copy_in`: every program's share, then a meeting of the
    launch's programs at the int32 counter CNT[0], zero when first used); an operand not copied is passed as
    itself, with pitch 0. An unaligned call is then one launch (padding.py's `kernel_copies`)."""
    _gemm(A, B, C, W, CNT, SA, SB, SPLITS, CFG, B_KMAJOR, N_MULTIPLE_16, SCALE, SA_M_MAJOR,
          (AS, A_PITCH, AD, BS, B_PITCH, BD, COPY_A, COPY_B))
