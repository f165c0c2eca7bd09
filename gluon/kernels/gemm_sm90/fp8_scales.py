"""The fp8 GEMM's dequantization scales in the kernel: per tensor and per row / column scales (loaded before
the tile's K loop, or staged into shared memory by cp.async where registers would not hold them) and
DeepSeek's DeepGEMM block scales, whose 128-deep k-steps are each promoted into the fp32 sum
(`block_scaled_k_loop`, and its forms: cuBLAS's pipelined loop, rows in two parts, 256 columns in halves or
quarters with A in registers), their scales loaded by the consumers or copied into the ring by the producer
(SCALES_IN_RING). Traced into gemm_sm90 (kernel.py); measurements in docs/PERF.md.
"""
import gluon.language as gl
from gluon.language.control import static_range
from gluon.language.nvidia.ampere import cp_async, cp_async_commit, cp_async_wait, named_barrier_sync
from gluon.language.nvidia.hopper import wgmma, wgmma_wait
from gluon.types import DotOperandLayout, Layout, SliceLayout

from ..turns import turn_begin, turn_end, turn_end_after

SCALES_BAR = 11             # rowcol scales staged by cp.async: role g's threads meet on named barrier 11 + g


def scale_axes(SA, SB, off_m, off_n, M, N, SWAPPED: bool):
    """(pointer, tile offset, extent) of the scales along acc's rows and along its columns: A's and B's, or
    B's and A's under the swap (acc is then C^T's tile)."""
    return ((SB, off_n, N), (SA, off_m, M)) if SWAPPED else ((SA, off_m, M), (SB, off_n, N))


def load_scales(acc, SA, SB, off_m, off_n, M, N, SCALE: str, SWAPPED: bool):
    """The fp32 dequantization scales of acc's tile: one per tensor (SA[0] * SB[0]), or one per row of A and
    column of B ("rowcol": the row and column vectors in acc's layout); with SWAPPED acc is C^T's tile (rows
    along N). `acc` gives only the shape and layout: the kernel loads them before the tile's K loop where
    the registers allow, so their latency is not the epilogue's."""
    if SCALE == "tensor":                   # (multiplied at their use: a product here would wait for both)
        return gl.load(SA), gl.load(SB)
    (rs, r0, rn), (cs, c0, cn) = scale_axes(SA, SB, off_m, off_n, M, N, SWAPPED)
    r = gl.arange(0, acc.shape[0], layout=SliceLayout(1, acc.layout))
    c = gl.arange(0, acc.shape[1], layout=SliceLayout(0, acc.layout))
    return (gl.load(rs + (r0 + r), mask=r0 + r < rn, other=0.0), gl.load(cs + (c0 + c), mask=c0 + c < cn, other=0.0))


def stage_scales(sr_s, sc_s, SA, SB, off_m, off_n, M, N, SWAPPED: bool, RW: int):
    """Start copying the tile's row and column scales (as `load_scales` reads them) into shared `sr_s`, `sc_s` by
    cp.async: no register holds them while the K loop runs, and they are there by the epilogue."""
    (rs, r0, rn), (cs, c0, cn) = scale_axes(SA, SB, off_m, off_n, M, N, SWAPPED)
    one_d = Layout.blocked([1], [32], [RW], [0])
    r = gl.arange(0, sr_s.shape[0], layout=one_d)
    c = gl.arange(0, sc_s.shape[0], layout=one_d)
    cp_async(sr_s, rs + (r0 + r), mask=r0 + r < rn)
    cp_async(sc_s, cs + (c0 + c), mask=c0 + c < cn)
    cp_async_commit()


def staged_scales(acc, sr_s, sc_s, g: int, RW: int):
    """The scales `stage_scales` copied, in acc's row and column layouts, once every thread of the role has
    its copies done."""
    cp_async_wait(0)
    named_barrier_sync(SCALES_BAR + g, 32 * RW)
    return (sr_s.load(layout=SliceLayout(1, acc.layout)), sc_s.load(layout=SliceLayout(0, acc.layout)))


def apply_scales(acc, scales, SCALE: str):
    """acc times `load_scales`' scales."""
    a, b = scales
    if SCALE == "tensor":
        return acc * (a * b)
    return acc * a[:, None] * b[None, :]


@gl.helper
def _block_scales(SA, sb_row, rows, row_ok, kk, k_top, M, KB, ZIG: bool, SA_M_MAJOR: bool):
    """The raw scales of k-step kk (A's per row of the tile, B's for the tile's 128 columns): block
    k_top - kk where the unit's K slice runs top down (ZIG), else kk."""
    kb = _k_block(kk, k_top, ZIG)
    return _a_scales(SA, rows, row_ok, kb, M, KB, SA_M_MAJOR), gl.load(sb_row + kb)


@gl.helper
def _stage_block_scales(ahead, slot, SA, sb_row, off_m, kk, k_hi, k_top, M, KB, ZIG: bool, SA_M_MAJOR: bool,
                        RW: int):
    """SCALES_AHEAD: start copying k-step kk's scales by cp.async into slot `slot` of the role's shared pair
    `ahead` (A's per row; B's, one per tile and k-step, into every row's place), nothing where kk is past the
    slice (k_hi). Through shared memory, not registers: a load carried in registers to the next k-step makes
    ptxas copy it at the loop's end, which waits for the load before the WGMMA wait (docs/PERF.md)."""
    sa_s, sb_s = ahead
    one_d = Layout.blocked([1], [32], [RW], [0])
    r = gl.arange(0, sa_s.shape[0], layout=one_d)
    rows = off_m + r
    live = kk < k_hi
    kb = _k_block(kk, k_top, ZIG)
    cp_async(sa_s[slot], _a_scale_ptrs(SA, rows, kb, M, KB, SA_M_MAJOR), mask=(rows < M) & live)
    cp_async(sb_s[slot], sb_row + kb + r * 0, mask=(r >= 0) & live)      # (r >= 0: `live` as a tile)
    cp_async_commit()


@gl.helper
def _staged_block_scales(acc, ahead, slot):
    """The product of the scales `_stage_block_scales` copied into `slot`, in acc's row layout, once this thread's
    copies are done. A thread reads rows other threads copied: Triton's shared-memory barrier analysis puts the
    role's barrier between the wait and the reads, and another between these reads and the next copy into the
    other slot (a CPU test finds both in the SASS)."""
    sa_s, sb_s = ahead
    cp_async_wait(0)
    rows = SliceLayout(1, acc.layout)
    return sa_s[slot].load(layout=rows) * sb_s[slot].load(layout=rows)


@gl.helper
def copy_ring_scales(ring, s, SA, SB, off_m, off_n, kb, M, N, KB, NB: int, SA_M_MAJOR: bool, PW: int):
    """SCALES_IN_RING, the producer's part (PW warps): k-block kb's scales into stage s of a consumer role's scale
    ring by cp.async, for the ring's `ready` barrier to count (`arrive_after_copies`): A's of the role's rows from
    off_m at slot (1 + NB) * s, then the B scale of each of the tile's NB 128-column blocks, copied to every row's
    place (zeros past M and N, where TMA's operands are zeros too)."""
    one_d = Layout.blocked([1], [32], [PW], [0])
    r = gl.arange(0, ring.shape[0], layout=one_d)
    rows = off_m + r
    base = (1 + NB) * s
    cp_async(ring[base], _a_scale_ptrs(SA, rows, kb, M, KB, SA_M_MAJOR), mask=rows < M)
    for j in static_range(NB):
        cp_async(ring[base + 1 + j], SB + ((off_n // 128 + j) * KB + kb) + r * 0, mask=(r >= 0) & (off_n + 128 * j < N))


@gl.helper
def ring_scales(acc, ring, s, NB: int):
    """SCALES_IN_RING, the consumers' part: stage s's scales as `copy_ring_scales` put them, in acc's row layout:
    A's, then each B block's (a row vector each: the product of two is the rows' factor)."""
    rows = SliceLayout(1, acc.layout)
    base = (1 + NB) * s
    a = ring[base].load(layout=rows)
    if NB == 1:
        return a, ring[base + 1].load(layout=rows)
    return a, ring[base + 1].load(layout=rows), ring[base + 2].load(layout=rows)


@gl.helper
def _k_block(kk, k_top, ZIG: bool):
    """The 128-deep block of K that k-step kk reads: k_top - kk where the unit's slice runs top down (ZIG)."""
    return gl.where(k_top >= 0, k_top - kk, kk) if ZIG else kk


@gl.helper
def _a_scales(SA, rows, ok, kb, M, KB, SA_M_MAJOR: bool):
    """A's scales of `rows` for block kb of K (0 where not `ok`)."""
    return gl.load(_a_scale_ptrs(SA, rows, kb, M, KB, SA_M_MAJOR), mask=ok, other=0.0)


@gl.helper
def _a_scale_ptrs(SA, rows, kb, M, KB, SA_M_MAJOR: bool):
    """Where A's scales of `rows` for block kb of K are: SA [M, KB], or [KB, M] with SA_M_MAJOR."""
    return SA + (kb * M + rows if SA_M_MAJOR else rows * KB + kb)


@gl.helper
def _wait_then_pass_turn(part, a_tile, b_tile, sa, sb, anchor, g: int, TURNS: bool, WGS: int):
    """The k-step's product once its WGMMA is done, and with TURNS its scales sa * sb as read back after the
    turn is handed on (`turn_end_after`: the promotion that needs them then follows the hand-over); None
    without (the caller multiplies them)."""
    if not TURNS:
        return wgmma_wait(part, a_tile, b_tile, pendings=0), None
    return turn_end_after(g, WGS, lambda: wgmma_wait(part, a_tile, b_tile, pendings=0), anchor, sa * sb)


@gl.helper
def block_scaled_k_loop(acc, a_s, b_s, ready, empty, cnt, k_lo, k_hi, k_top, SA, SB, off_m, off_n, M, KB,
                        STAGES: int, CL: int, B_KMAJOR: bool, ZIG: bool, TURNS: bool, g: int, WGS: int,
                        SA_M_MAJOR: bool, RW: int, ahead=None, anchor=None, ring=None):
    """SCALE="block" (DeepSeek's DeepGEMM scaling): k-steps kk in [k_lo, k_hi) of 128 K each, A scaled per row
    and 128-deep block of K (SA [M, KB]), B per 128 x 128 block (SB [ceil(N / 128), KB]). Each k-step's WGMMA
    product starts from zero and is added to the fp32 `acc` times SA[row, kk] * SB[off_n // 128, kk]: the
    tensor cores' fp8 accumulation (about 14 bits of mantissa) never runs over more than one block of K,
    and the sum is fp32 (the promotion DeepGEMM does). The stage is released once its product is read.
    The scales load while the WGMMA runs, or with `ahead` (SCALES_AHEAD: role g's pair of shared buffers) one
    k-step earlier by cp.async, so an L2 read's latency longer than the WGMMA does not hold the promotion
    (DeepGEMM stages A's scales with the operands). Adding each product while the next k-step's WGMMA runs was
    slower: ptxas serializes every WGMMA when a product is carried through the loop in flight, C7514;
    docs/PERF.md. With K_ZIGZAG (`ZIG`) a unit whose `k_top` is set got its K slice top down from the producer:
    its i-th stage holds block k_top - i. With TURNS (MMA_TURNS) warpgroup `g` of WGS runs each k-step's WGMMAs
    in its turn, held until they are done (gluon/kernels/turns.py), so the warpgroups' WGMMAs run one at a time,
    each under the others' promotions. SA_M_MAJOR: SA is [KB, M] (scale_a M-major, as torch._scaled_mm and
    DeepGEMM take it; a warp's rows then load together). With `ring` (SCALES_IN_RING: the role's scale ring) the
    scales are read from shared memory, where the producer copied them into the stage (`copy_ring_scales`).
    (acc, cnt) after the slice."""
    rows = off_m + gl.arange(0, acc.shape[0], layout=SliceLayout(1, acc.layout))
    row_ok = rows < M
    sb_row = SB + (off_n // 128) * KB
    if ahead is not None:
        # the slice's first scales, once the last slice's copy past its end has landed: it wrote this slot too,
        # and two copies in flight to one place land in no set order
        cp_async_wait(0)
        _stage_block_scales(ahead, cnt % 2, SA, sb_row, off_m, k_lo, k_hi, k_top, M, KB, ZIG, SA_M_MAJOR, RW)
    for kk in range(k_lo, k_hi):
        s = cnt % STAGES
        ready[s].wait((cnt // STAGES) & 1)
        b_op = b_s[s].T if B_KMAJOR else b_s[s]
        turn_begin(g, TURNS)
        part = wgmma(a_s[s], b_op, acc, wait=False, use_acc=False)
        if ahead is not None:               # this k-step's scales were copied with the previous one
            part = wgmma_wait(part, a_s[s], b_s[s], pendings=0)
            turn_end(g, TURNS, WGS)
            empty[s].arrive(cluster=CL > 1)
            scale = _staged_block_scales(acc, ahead, cnt % 2)
            # the next k-step's, into the other slot: every thread of the role has read it (Triton's barrier)
            _stage_block_scales(ahead, (cnt + 1) % 2, SA, sb_row, off_m, kk + 1, k_hi, k_top, M, KB, ZIG,
                                SA_M_MAJOR, RW)
        else:
            sa_k, sb_k = _step_block_scales(acc, ring, s, SA, sb_row, rows, row_ok, kk, k_top, M, KB, ZIG, SA_M_MAJOR)
            # the turn passes once the WGMMA is done, so the next warpgroup's runs alone while this one promotes
            part, held = _wait_then_pass_turn(part, a_s[s], b_s[s], sa_k, sb_k, anchor, g, TURNS, WGS)
            empty[s].arrive(cluster=CL > 1)
            scale = sa_k * sb_k if held is None else held
        acc = acc + part * scale[:, None]
        cnt = cnt + 1
    return acc, cnt


@gl.helper
def block_scaled_pipelined(acc, a_s, b_s, ready, empty, cnt, k_lo, k_hi, k_top, SA, SB, off_m, off_n, M, KB,
                           STAGES: int, CL: int, B_KMAJOR: bool, ZIG: bool, SA_M_MAJOR: bool, TURNS: bool, g: int,
                           WGS: int, ring=None):
    """`block_scaled_k_loop` in cuBLAS's blockwise kernel's shape (PIPELINED_PROMOTION; docs/PERF.md, fortieth
    session): k-step kk+1's WGMMA is issued right after k-step kk's promotion, into the product's registers,
    and waited for in the next iteration, after stage kk+1's ready wait and its scale loads, which so run under
    it. The product crosses the loop's edge in flight as the WGMMA's own tied registers (no copy: ptxas keeps
    the WGMMAs pipelined, no C7514). With TURNS (MMA_TURNS) warpgroup `g` of WGS issues in its turn and passes it
    on right after the issue, as cuBLAS's warpgroups do around one named barrier: the issues alternate and the
    WGMMAs run while the other warpgroups promote (the serial loop's turns are held until the WGMMAs are done).
    The same products, added in the same order, as the serial loop. An empty slice (k_lo == k_hi) runs nothing.
    `ring` as there. (acc, cnt) after the slice."""
    rows = off_m + gl.arange(0, acc.shape[0], layout=SliceLayout(1, acc.layout))
    row_ok = rows < M
    sb_row = SB + (off_n // 128) * KB
    if k_lo < k_hi:
        s = cnt % STAGES
        ready[s].wait((cnt // STAGES) & 1)
        turn_begin(g, TURNS)
        part = wgmma(a_s[s], b_s[s].T if B_KMAJOR else b_s[s], acc, wait=False, use_acc=False)
        turn_end(g, TURNS, WGS)
        for kk in range(k_lo, k_hi - 1):
            s = cnt % STAGES
            nxt = (cnt + 1) % STAGES
            sa_k, sb_k = _step_block_scales(acc, ring, s, SA, sb_row, rows, row_ok, kk, k_top, M, KB, ZIG, SA_M_MAJOR)
            ready[nxt].wait(((cnt + 1) // STAGES) & 1)
            part = wgmma_wait(part, a_s[s], b_s[s], pendings=0)
            empty[s].arrive(cluster=CL > 1)
            acc = acc + part * (sa_k * sb_k)[:, None]
            turn_begin(g, TURNS)
            part = wgmma(a_s[nxt], b_s[nxt].T if B_KMAJOR else b_s[nxt], part, wait=False, use_acc=False)
            turn_end(g, TURNS, WGS)
            cnt = cnt + 1
        s = cnt % STAGES
        sa_k, sb_k = _step_block_scales(acc, ring, s, SA, sb_row, rows, row_ok, k_hi - 1, k_top, M, KB, ZIG,
                                        SA_M_MAJOR)
        part = wgmma_wait(part, a_s[s], b_s[s], pendings=0)
        empty[s].arrive(cluster=CL > 1)
        acc = acc + part * (sa_k * sb_k)[:, None]
        cnt = cnt + 1
    return acc, cnt


@gl.helper
def _step_block_scales(acc, ring, s, SA, sb_row, rows, row_ok, kk, k_top, M, KB, ZIG: bool, SA_M_MAJOR: bool):
    """k-step kk's A and B scales: from stage s of the scale `ring` where there is one, else loaded."""
    if ring is not None:
        return ring_scales(acc, ring, s, 1)
    return _block_scales(SA, sb_row, rows, row_ok, kk, k_top, M, KB, ZIG, SA_M_MAJOR)


@gl.helper
def _wide_rows(acc, SB, off_m, off_n, M, N, KB):
    """What the 256-column k-loops take once a tile: its rows (and which are inside M), its B scale row, whether the
    right half's B block exists (past N its B rows are TMA's zeros and its scale is not read), and a False the
    compilers cannot see through (`never`)."""
    rows = off_m + gl.arange(0, acc.shape[0], layout=SliceLayout(1, acc.layout))
    return rows, rows < M, SB + (off_n // 128) * KB, off_n + 128 < N, M < 0


@gl.helper
def _wide_scales(SA, sb_row, rows, row_ok, right_ok, kk, k_top, M, KB, ZIG: bool, SA_M_MAJOR: bool, live=True):
    """k-step kk's scales for the 256-column k-loops: A's of the rows, the left and the right half's B scale (zeros,
    nothing read, where not `live`: a k-step past the slice)."""
    kb = _k_block(kk, k_top, ZIG)
    return (_a_scales(SA, rows, row_ok & live, kb, M, KB, SA_M_MAJOR), gl.load(sb_row + kb, mask=live, other=0.0),
            gl.load(sb_row + KB + kb, mask=right_ok & live, other=0.0))


@gl.helper
def _step_scales(ahead, SA, sb_row, rows, row_ok, right_ok, kk, k_hi, k_top, M, KB, ZIG: bool, SA_M_MAJOR: bool):
    """k-step kk's `_wide_scales`, and what to carry to the next k-step: with `ahead` (SCALES_AHEAD: kk's, loaded
    a k-step early) those and the next k-step's, loaded now; without (None) loaded now, and None."""
    if ahead is None:
        return _wide_scales(SA, sb_row, rows, row_ok, right_ok, kk, k_top, M, KB, ZIG, SA_M_MAJOR), None
    return ahead, _wide_scales(SA, sb_row, rows, row_ok, right_ok, kk + 1, k_top, M, KB, ZIG, SA_M_MAJOR, kk + 1 < k_hi)


@gl.helper
def block_scaled_halves(acc, acc_r, a_s, b_halves, ready, empty, cnt, k_lo, k_hi, k_top, SA, SB, off_m, off_n, M, N,
                        KB, STAGES: int, CL: int, ZIG: bool, SA_M_MAJOR: bool, AHEAD: bool = False, ring=None):
    """`block_scaled_k_loop` on a role's 256 columns of the tile as two halves, acc's left of acc_r's, each
    half its own 128 x 128 B block (its own B scale). Each k-step loads the role's A rows into registers once
    (`ldmatrix`) and runs both halves' WGMMAs from there, one after the other, each waited for and promoted
    before the next is issued (two products beside the sums would not fit the registers): A is read from
    shared memory once where two 128-column tiles read it twice, so a k-step of the 128 x 256 tile moves 128 KiB
    through shared memory (the 128 x 128 tiles' 80 KiB a half as much work). B K-major (`b_halves`: the B
    ring seen as two 128-row halves a stage, `Shared.reinterpret`). With AHEAD (SCALES_AHEAD) each k-step's scales
    are loaded into registers a k-step earlier, right after that k-step's first WGMMA is issued: a whole k-step
    (two WGMMAs and their promotions) hides the load, which the next k-step's first promotion would otherwise wait
    for. With `ring` (SCALES_IN_RING) the scales are read from the stage, where the producer copied them.
    (acc, acc_r, cnt) after the slice."""
    rows, row_ok, sb_row, right_ok, never = _wide_rows(acc, SB, off_m, off_n, M, N, KB)
    a_layout = DotOperandLayout(0, acc.layout, 32 // a_s.dtype.bits)
    ahead = _wide_scales(SA, sb_row, rows, row_ok, right_ok, k_lo, k_top, M, KB, ZIG, SA_M_MAJOR,
                         k_lo < k_hi) if AHEAD else None
    for kk in range(k_lo, k_hi):
        s = cnt % STAGES
        ready[s].wait((cnt // STAGES) & 1)
        a = a_s[s].load(layout=a_layout)
        part = wgmma(a, b_halves[2 * s].T, acc, wait=False, use_acc=False)
        if ring is not None:
            sa_k, sb_l, sb_r = ring_scales(acc, ring, s, 2)
        else:
            (sa_k, sb_l, sb_r), ahead = _step_scales(ahead, SA, sb_row, rows, row_ok, right_ok, kk, k_hi, k_top, M,
                                                     KB, ZIG, SA_M_MAJOR)
        part = wgmma_wait(part, b_halves[2 * s], pendings=0)
        acc = acc + part * (sa_k * sb_l)[:, None]
        # the right half's product starts from zeros that depend on the promoted left sum (`never` is False, which
        # the compilers cannot know), as in `block_scaled_two_parts`: independent, ptxas issues it under the
        # promotion and keeps two products beside the sums (spills)
        part = wgmma(a, b_halves[2 * s + 1].T, gl.where(never, acc, 0.0), wait=False)
        part = wgmma_wait(part, b_halves[2 * s + 1], pendings=0)
        empty[s].arrive(cluster=CL > 1)
        acc_r = acc_r + part * (sa_k * sb_r)[:, None]
        cnt = cnt + 1
    return acc, acc_r, cnt


@gl.helper
def block_scaled_quarters(acc, acc2, acc3, acc4, a_s, b_quarters, ready, empty, cnt, k_lo, k_hi, k_top, SA, SB, off_m,
                          off_n, M, N, KB, STAGES: int, CL: int, ZIG: bool, SA_M_MAJOR: bool, AHEAD: bool = False):
    """`block_scaled_halves` with each half's WGMMA as two of 64 columns (QUARTERS): the four quarters' WGMMAs read
    the k-step's A from registers, two in flight at a time, so each quarter's promotion runs while the next
    quarter's WGMMA does (the warpgroup keeps the tensor cores busy itself, where the halves leave them to the other
    warpgroup during each promotion); the same registers (two 32-value products beside the four sums). `b_quarters`:
    the B ring seen as four 64-row quarters a stage; AHEAD as there. (acc .. acc4, cnt) after the slice, left to
    right."""
    rows, row_ok, sb_row, right_ok, never = _wide_rows(acc, SB, off_m, off_n, M, N, KB)
    a_layout = DotOperandLayout(0, acc.layout, 32 // a_s.dtype.bits)
    ahead = _wide_scales(SA, sb_row, rows, row_ok, right_ok, k_lo, k_top, M, KB, ZIG, SA_M_MAJOR,
                         k_lo < k_hi) if AHEAD else None
    for kk in range(k_lo, k_hi):
        s = cnt % STAGES
        ready[s].wait((cnt // STAGES) & 1)
        a = a_s[s].load(layout=a_layout)
        p1 = wgmma(a, b_quarters[4 * s].T, acc, wait=False, use_acc=False)
        p2 = wgmma(a, b_quarters[4 * s + 1].T, acc2, wait=False, use_acc=False)
        (sa_k, sb_l, sb_r), ahead = _step_scales(ahead, SA, sb_row, rows, row_ok, right_ok, kk, k_hi, k_top, M, KB,
                                                 ZIG, SA_M_MAJOR)
        left = (sa_k * sb_l)[:, None]
        right = (sa_k * sb_r)[:, None]
        # each next quarter starts from zeros that depend on the sum just promoted (`never` is False, which the
        # compilers cannot know), so it is issued after that promotion, into the product's registers
        p1 = wgmma_wait(p1, b_quarters[4 * s], pendings=1)
        acc = acc + p1 * left
        p1 = wgmma(a, b_quarters[4 * s + 2].T, gl.where(never, acc, 0.0), wait=False)
        p2 = wgmma_wait(p2, b_quarters[4 * s + 1], pendings=1)
        acc2 = acc2 + p2 * left
        p2 = wgmma(a, b_quarters[4 * s + 3].T, gl.where(never, acc2, 0.0), wait=False)
        p1 = wgmma_wait(p1, b_quarters[4 * s + 2], pendings=1)
        acc3 = acc3 + p1 * right
        p2 = wgmma_wait(p2, b_quarters[4 * s + 3], pendings=0)
        empty[s].arrive(cluster=CL > 1)
        acc4 = acc4 + p2 * right
        cnt = cnt + 1
    return acc, acc2, acc3, acc4, cnt


@gl.helper
def block_scaled_two_parts(acc, acc2, a_parts, b_s, ready, empty, cnt, k_lo, k_hi, k_top, SA, SB, off_m, off_n, M,
                           KB, STAGES: int, CL: int, B_KMAJOR: bool, ZIG: bool, SA_M_MAJOR: bool):
    """`block_scaled_k_loop` over a role's rows in two parts, acc's above acc2's, where one product of all of
    them beside the sum would not fit the registers (128 rows on a warpgroup: 128 values a thread, the product
    128 more). `a_parts` is the role's A ring seen as two parts a stage (`Shared.reinterpret`); each k-step's two
    WGMMAs run one after the other, each waited for and promoted before the next is issued (the other
    warpgroup's WGMMAs run under the promotions), and the stage is released once both have read it. Neither
    turns nor scales ahead. (acc, acc2, cnt) after the slice."""
    rows = off_m + gl.arange(0, acc.shape[0], layout=SliceLayout(1, acc.layout))
    row_ok = rows < M
    rows2 = rows + acc.shape[0]
    row2_ok = rows2 < M
    sb_row = SB + (off_n // 128) * KB
    never = M < 0
    for kk in range(k_lo, k_hi):
        s = cnt % STAGES
        ready[s].wait((cnt // STAGES) & 1)
        b_op = b_s[s].T if B_KMAJOR else b_s[s]
        part = wgmma(a_parts[2 * s], b_op, acc, wait=False, use_acc=False)
        # both parts' A scales asked for now, their L2 latency under this WGMMA (one exposed load a k-step, as with
        # one part): the first promotion's factor depends on the second's (`never`), or ptxas issues those loads
        # after the second WGMMA
        kb = _k_block(kk, k_top, ZIG)
        sa_k, sb_k = _a_scales(SA, rows, row_ok, kb, M, KB, SA_M_MAJOR), gl.load(sb_row + kb)
        sa_k2 = _a_scales(SA, rows2, row2_ok, kb, M, KB, SA_M_MAJOR)
        part = wgmma_wait(part, a_parts[2 * s], b_s[s], pendings=0)
        acc = acc + part * (gl.where(never, sa_k2, sa_k) * sb_k)[:, None]
        # the second product starts from zeros that depend on the promoted sum (`never` is False, which the
        # compilers cannot know): ptxas issues it after the promotion, in the first product's registers; issued
        # under the promotion (as it does with independent zeros) it keeps two products beside the sums and spills
        part = wgmma(a_parts[2 * s + 1], b_op, gl.where(never, acc, 0.0), wait=False)
        part = wgmma_wait(part, a_parts[2 * s + 1], b_s[s], pendings=0)
        empty[s].arrive(cluster=CL > 1)
        acc2 = acc2 + part * (sa_k2 * sb_k)[:, None]
        cnt = cnt + 1
    return acc, acc2, cnt
