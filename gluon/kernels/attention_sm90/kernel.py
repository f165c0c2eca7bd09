"""The SM90 attention forward kernel: warp-specialized, TMA + WGMMA, online softmax, P from registers.

O = softmax(scale * Q K^T + mask) V for one (query block, batch x head) tile per CTA, or with PERSISTENT
for every unit of work pid, pid + #CTAs, ... (a tile, or with a causal mask a pair of one head's query
blocks whose key blocks sum to about the same), under one `AttentionConfig` (config.py says what each
knob does). Both roles walk the same units; the ring position and the Q buffer's phase carry over from
one tile to the next, so the producer loads the next tile's Q (into the other buffer) and K/V while the
consumers finish this one; a consumer warpgroup hands its Q buffer back (`q_empty`) after its epilogue (with
EARLY_Q_RELEASE before it).
Roles:

* producer: one warp (warp 4 * CONSUMER_WGS) with PRODUCER_REGS registers. It loads this CTA's Q rows
  once (`q_ready`), then streams the K and V tiles of every key block the CTA needs through a
  STAGES-deep ring: K and V have their own `ready` / `empty` mbarriers, so S = Q K^T starts before
  V has landed.
* consumers: CONSUMER_WGS warpgroups, each its own warp role owning 64 query rows. Per key block:
  S = Q K^T (WGMMA, both operands in shared memory), the mask where the block needs one, the online
  softmax in registers (running row max m and sum l; exp2 with scale * log2(e) folded into one FMA),
  O rescaled by exp2(m_old - m_new), P cast to the input dtype and used as WGMMA's register A operand
  for O += P V. Every consumer arrives on a slot's `empty` barrier once it is done with it. With
  OVERLAP the next block's S GEMM is issued before this block's P V and the softmax runs under it;
  with PINGPONG the two warpgroups take turns issuing their GEMMs (named barriers).
  Last: O / l, staged through the warpgroup's Q tile and written with 16-byte masked stores; the
  log-sum-exp (natural log) per row when WRITE_LSE.

Inputs are 2-D views the host makes without copies: [B*H*S, D] for a [B, H, S, D] tensor, [B*S, H*D]
for one laid out [B, S, H, D] (also packed QKV, whose rows are further apart); `*_BSHD` says which.
A K/V tile that runs past its head's keys reads the next head's rows (or TMA's zeros past the end):
those columns are masked to -inf, so they weigh 0. The causal mask is aligned bottom-right as in
FlashAttention: query row i sees key j iff j <= i + (Skv - Sq); a row that sees no key gets O = 0 and
LSE = -inf.
"""
from dataclasses import dataclass, replace
from typing import Any

import gluon.language as gl
from gluon.arch import SM90
from gluon.jit import kernel
from gluon.language.control import static_range, warp_role
from gluon.language.core import Tensor
from gluon.language.memory import Shared, smem
from gluon.language.nvidia.ampere import named_barrier_sync
from gluon.language.nvidia.hopper import Barrier, fence_async_shared, mbarrier, tma_load, wgmma, wgmma_wait
from gluon.types import DotOperandLayout, Layout, SliceLayout, SwizzleMode, WarpRole

from ..turns import turn_begin, turn_end, turn_end_after, turns_close, turns_open
from .config import ROWSUM_COLS, p_buffers, q_buffers

_NEG_INF = float("-inf")
_EPILOGUE = 12              # PERSISTENT: warpgroup g's threads meet on named barrier _EPILOGUE + g after the epilogue
_LN2 = 0.6931471805599453


def _block_range(m0, Sq, Skv, BLOCK_M: int, BLOCK_N: int, CAUSAL: bool):
    """(n_blocks, n_full): the key blocks this CTA's rows m0 .. m0 + BLOCK_M - 1 need, and how many of
    the first ones need no mask (whole blocks of keys every row sees)."""
    if CAUSAL:
        off = Skv - Sq
        hi = gl.minimum(Skv, m0 + BLOCK_M + off)
        n_blocks = gl.cdiv(gl.maximum(hi, 0), BLOCK_N)
        n_full = gl.minimum(gl.maximum(m0 + off + 1, 0) // BLOCK_N, Skv // BLOCK_N)
    else:
        n_blocks = gl.cdiv(Skv, BLOCK_N)
        n_full = Skv // BLOCK_N
    return n_blocks, gl.minimum(n_full, n_blocks)


def _coords(bh, H, S, D: int, BSHD: bool):
    """(first row, column) of batch x head `bh`'s [S, D] block in its 2-D view."""
    if BSHD:
        return (bh // H) * S, (bh % H) * D
    return bh * S, 0


def _q_tile(q_s, qb, g: int, WGS: int, QB: int):
    """Consumer warpgroup g's tile in Q buffer qb (a static index when there is one buffer)."""
    return _stage(q_s, qb * WGS + g if QB > 1 else g, WGS * QB)


def _stage(region, i, n: int):
    """Stage i of a region or barrier set of n stages (the region itself when n is 1): the Q tiles are
    one per warpgroup and Q buffer, q_ready one per buffer."""
    return region[i] if n > 1 else region


def _masked(s, rows, n0, Skv, off, BLOCK_N: int, s_layout, CAUSAL: bool):
    """S with the columns of keys past Skv (and, causal, right of row + off) set to -inf."""
    cols = n0 + gl.arange(0, BLOCK_N, layout=SliceLayout(0, s_layout))
    keep = cols[None, :] < Skv
    if CAUSAL:
        keep = keep & (cols[None, :] <= rows[:, None] + off)
    return gl.where(keep, s, _NEG_INF)


def _row_max(s, TREE: bool):
    """Each row's max of the scores `s`. With TREE the columns are first halved twice (`split_cols`: the same
    registers) and the quarters' elementwise max taken, so a thread's values reduce in four independent chains
    a quarter as long (ptxas keeps a reduction's order: one chain of 32 dependent FMNMX at 128 keys otherwise)."""
    if TREE:
        for _ in static_range(2):
            left, right = gl.split_cols(s)
            s = gl.maximum(left, right)
    return gl.max(s, 1)


def _softmax(s, m_i, l_i, qk_scale, MASKED: bool, SUM: bool = True, TREE: bool = False):
    """One online-softmax step on the fp32 scores `s`: the new row max (`_row_max`), P = exp2((s - m) * c), the
    factor exp2((m_old - m_new) * c) that rescales O and l, and the new row sum (`l_i` as it is without
    SUM: ROWSUM_MMA's tensor cores sum P). In a masked block a row may have seen no key yet (max -inf): it
    keeps m = -inf and P = 0 without a NaN."""
    m_new = gl.maximum(m_i, gl.convert_layout(_row_max(s, TREE), m_i.layout))
    m_use = gl.where(m_new == _NEG_INF, 0.0, m_new) if MASKED else m_new
    m_c = m_use * qk_scale
    p = gl.exp2(gl.fma(s, qk_scale, -m_c[:, None]))
    alpha = gl.exp2(m_i * qk_scale - m_c)
    return m_new, p, alpha, (l_i * alpha + gl.sum(p, 1)) if SUM else l_i


@dataclass(frozen=True)
class _Loop:
    """What one warpgroup's key-block loop over one tile reads and never changes: its Q tile, the K/V ring and its
    barriers, the ring's block before this tile's first (`base`), the rows (for the masks), the softmax's scale,
    and the config's switches as the steps use them (made per tile at trace time; it holds no IR of its own)."""
    q_g: Shared | Tensor        # this warpgroup's Q tile (in registers with Q_REGS)
    k_s: Shared                 # the K and V rings and their ready / empty barriers
    v_s: Shared
    k_ready: Barrier
    v_ready: Barrier
    k_empty: Barrier
    v_empty: Barrier
    base: Tensor                # the ring's blocks taken before this tile's
    rows: Tensor                # this warpgroup's query rows
    Skv: Any                    # a size argument (traced scalar)
    off: Tensor                 # Skv - Sq: the causal diagonal's offset
    qk_scale: Any               # the scale argument (traced scalar)
    ST: int                     # ring stages
    BN: int                     # keys a block
    s_layout: Layout
    p_layout: DotOperandLayout
    CAUSAL: bool
    dtype: Any                  # P's (the inputs') dtype
    g: int                      # this warpgroup, of WGS
    WGS: int
    PINGPONG: bool
    p_s: Shared | None          # P_SMEM: the P tiles (PB per warpgroup)
    PB: int
    pin: Shared | None          # PIN_SOFTMAX: this warpgroup's shared row sums
    hold: Shared | None         # HOLD_TURNS: this warpgroup's shared row maxima
    ones: Shared | None         # ROWSUM_MMA: this warpgroup's tile of ones
    TREE: bool                  # TREE_MAX
    JOINT: bool                 # JOINT_WAIT


@kernel(arch=SM90, num_warps=9)
def attention_sm90(Q, K, V, O, L, Sq, Skv, H, GROUP, qk_scale, CFG: gl.constexpr, HEAD_DIM: gl.constexpr,
                   CAUSAL: gl.constexpr = False, Q_BSHD: gl.constexpr = False, K_BSHD: gl.constexpr = False,
                   V_BSHD: gl.constexpr = False, WRITE_LSE: gl.constexpr = False):
    """O = softmax(Q K^T * scale) V for query head h of every batch, reading K/V head h // GROUP;
    qk_scale = scale * log2(e). Q, K, V, O are the host's 2-D views; L the [B * H * Sq] fp32 LSE."""
    D = HEAD_DIM
    WGS = CFG.CONSUMER_WGS
    RM = CFG.BLOCK_M // WGS                     # query rows per consumer warpgroup
    BN = CFG.BLOCK_N
    ST = CFG.STAGES
    # Q buffers: the next tile's Q loads while this one runs. Serial (not OVERLAP) persistent kernels keep one
    # unless PREFETCH_Q, whose serial loop is then one loop (see there)
    QB = q_buffers(CFG)
    if CFG.CTAS_PER_SM > 1:                     # launched with that share of the register file (the compile checks)
        gl.set_ctas_per_sm(CFG.CTAS_PER_SM)
    if CFG.FFMA_YIELD:                          # control bits of the binary (backend/sass_passes.py)
        gl.set_ffma_yield()
    TPU = 2 if CFG.PERSISTENT and CAUSAL else 1     # tiles per unit of work: causal pairs long + short
    sw = SwizzleMode.B128
    q_s = smem(Q.dtype, Layout.swizzled(RM, D, sw), name="q_tile", stages=WGS * QB)
    # EARLY_Q_RELEASE: O staged in a tile of its own, so the Q tile goes back before the epilogue
    o_s = smem(Q.dtype, Layout.swizzled(RM, D, sw), name="o_tile", stages=WGS) if CFG.EARLY_Q_RELEASE else None
    k_s = smem(K.dtype, Layout.swizzled(BN, D, sw), name="k_ring", stages=ST)
    v_s = smem(V.dtype, Layout.swizzled(BN, D, sw), name="v_ring", stages=ST)
    PB = max(p_buffers(CFG), 1)                 # P_SMEM: P tiles per warpgroup (overlapped: P_j while P_(j-1) is read)
    p_s = smem(Q.dtype, Layout.swizzled(RM, BN, sw), name="p_tile", stages=WGS * PB) if CFG.P_SMEM else None
    pin_s = smem(gl.float32, Layout.shared(1, 1, 1, order=(0,)), shape=(RM,), name="row_sums",
                 stages=WGS) if CFG.PIN_SOFTMAX else None
    hold_s = smem(gl.float32, Layout.shared(1, 1, 1, order=(0,)), shape=(RM,), name="row_maxima",
                  stages=WGS) if CFG.HOLD_TURNS else None
    ones_s = smem(Q.dtype, Layout.swizzled(ROWSUM_COLS, BN, sw), name="ones", stages=WGS) if CFG.ROWSUM_MMA else None
    q_ready = mbarrier(count=1, name="q_ready", stages=QB)
    if CFG.PERSISTENT:
        q_empty = mbarrier(count=WGS, name="q_empty", stages=QB)   # the consumers are done with a Q buffer
    k_ready = mbarrier(count=1, name="k_ready", stages=ST)
    v_ready = mbarrier(count=1, name="v_ready", stages=ST)
    k_empty = mbarrier(count=WGS, name="k_empty", stages=ST)
    v_empty = mbarrier(count=WGS, name="v_empty", stages=ST)

    num_m = gl.cdiv(Sq, CFG.BLOCK_M)
    per_head = gl.cdiv(num_m, TPU)              # units of work per batch x head
    if CFG.PERSISTENT:                          # one CTA per SM: units first, first + step, ...
        u_first = gl.program_id(0)
        u_end = per_head * _batch_heads(Q, Sq, H, Q_BSHD)
        u_step = gl.num_programs(0)
    else:                                       # one CTA per unit: grid (query blocks, batch x heads)
        u_first = gl.program_id(1) * per_head + gl.program_id(0)
        u_end = u_first + 1
        u_step = 1
    off = Skv - Sq
    ldo = O.shape[1]
    gl.multiple_of(ldo, 16)                     # D or H * D elements: rows start 16-element aligned
    PP = CFG.PINGPONG

    for g in static_range(WGS):
        with warp_role(WarpRole.CONSUMER, warp_range=(4 * g, 4 * g + 3),
                       registers=CFG.CONSUMER_REGS if g > 0 else None):
            s_layout = Layout.wgmma((4, 1), instr_n=BN, operand_dtype=Q.dtype)
            o_layout = Layout.wgmma((4, 1), instr_n=D, operand_dtype=Q.dtype)
            p_layout = DotOperandLayout(0, o_layout, 2)
            pin_g = _stage(pin_s, g, WGS) if CFG.PIN_SOFTMAX else None   # this warpgroup's row sums (PIN_SOFTMAX)
            hold_g = _stage(hold_s, g, WGS) if CFG.HOLD_TURNS else None  # ... and row maxima (HOLD_TURNS)
            ones_g = _ones_tile(ones_s, g, WGS, Q.dtype) if CFG.ROWSUM_MMA else None  # ROWSUM_MMA's B operand
            l_layout = Layout.wgmma((4, 1), instr_n=ROWSUM_COLS, operand_dtype=Q.dtype)
            cnt = gl.full((), 0, gl.int32)      # key blocks this CTA has taken from the ring so far
            tc = gl.full((), 0, gl.int32)       # tiles so far: which Q buffer, which phase
            # the turns run on from tile to tile (every warpgroup takes as many turns a tile), opened and closed once:
            # closed and reopened per tile, the last warpgroup's reopening arrive could reach warpgroup 0's barrier
            # before warpgroup 0 took the closing one (the interpreter's seeded schedules find it; a hang on the GPU)
            turns_open(g, PP, WGS)
            for u in range(u_first, u_end, u_step):
                for h in range(0, _unit_tiles(u, num_m, per_head, TPU)):
                    m_blk, bh = _unit_tile(u, h, num_m, per_head, TPU, CFG.REVERSE_M)
                    m0 = m_blk * CFG.BLOCK_M
                    q_row, q_col = _coords(bh, H, Sq, D, Q_BSHD)
                    n_blocks, _ = _block_range(m0, Sq, Skv, CFG.BLOCK_M, BN, CAUSAL)
                    qb = tc % QB
                    q_g = _q_tile(q_s, qb, g, WGS, QB)
                    rows = m0 + g * RM + gl.arange(0, RM, layout=SliceLayout(1, s_layout))
                    acc = gl.zeros((RM, D), gl.float32, layout=o_layout)
                    m_i = gl.full((RM,), _NEG_INF, gl.float32, layout=SliceLayout(1, s_layout))
                    if CFG.ROWSUM_MMA:              # every column of the accumulator sums the row
                        l_i = gl.zeros((RM, ROWSUM_COLS), gl.float32, layout=l_layout)
                    else:
                        l_i = gl.zeros((RM,), gl.float32, layout=SliceLayout(1, s_layout))
                    # this warpgroup's key blocks: the CTA's first n_g (its later ones lie right of its rows'
                    # diagonal: waited for and released, not computed), the first f_g of them unmasked
                    n_g, f_g = _block_range(m0 + g * RM, Sq, Skv, RM, BN, CAUSAL)
                    n_g = gl.minimum(gl.maximum(n_g, 1), n_blocks)
                    if not CFG.OVERLAP:
                        # rows all past Sq (in the last query block, Sq not a multiple of BLOCK_M): nothing to
                        # compute, every block released (the overlap's first block is computed whatever n_g says)
                        n_g = gl.where(m0 + g * RM >= Sq, 0, n_g)
                        f_g = gl.minimum(f_g, n_g)
                    lp = _Loop(q_g=q_g, k_s=k_s, v_s=v_s, k_ready=k_ready, v_ready=v_ready, k_empty=k_empty,
                               v_empty=v_empty, base=cnt, rows=rows, Skv=Skv, off=off, qk_scale=qk_scale, ST=ST, BN=BN,
                               s_layout=s_layout, p_layout=p_layout, CAUSAL=CAUSAL, dtype=Q.dtype, g=g, WGS=WGS,
                               PINGPONG=PP, p_s=p_s, PB=PB, pin=pin_g, hold=hold_g, ones=ones_g, TREE=CFG.TREE_MAX,
                               JOINT=CFG.JOINT_WAIT)
                    _stage(q_ready, qb, QB).wait((tc // QB) & 1)
                    if CFG.Q_REGS:                  # Q read into registers once: the S GEMMs take A from there
                        lp = replace(lp, q_g=q_g.load(layout=DotOperandLayout(0, s_layout, 32 // Q.dtype.bits)))
                    if CFG.OVERLAP:
                        if n_blocks > 0:
                            # block 0: S, its softmax (masked: it may be the only block, or a diagonal one)
                            c0 = cnt % ST
                            k_ready[c0].wait((cnt // ST) & 1)
                            turn_begin(g, PP)
                            s = wgmma(lp.q_g, k_s[c0].T, gl.zeros((RM, BN), gl.float32, layout=s_layout),
                                      use_acc=False, wait=False)
                            s, m_i = _s_done(s, lp.q_g, k_s[c0], m_i, hold_g, g, PP, WGS, 0)
                            k_empty[c0].arrive()
                            s = _masked(s, rows, 0, Skv, off, BN, s_layout, CAUSAL)
                            m_i, p, alpha, l_i = _softmax(s, m_i, l_i, qk_scale, True, ones_g is None, CFG.TREE_MAX)
                            p_op = _p_operand(p, Q.dtype, p_layout, _p_tile(p_s, g, 0, PB, WGS))
                            if CFG.P_SMEM:      # the loops carry no P: block j's is in _p_tile(.., j, ..)
                                p_op = gl.full((), 0, gl.int32)
                            for j in range(1, f_g):
                                acc, m_i, l_i, p_op = _overlapped_step(lp, j, acc, m_i, l_i, p_op, False)
                            for jm in range(gl.maximum(f_g, 1), n_g):
                                acc, m_i, l_i, p_op = _overlapped_step(lp, jm, acc, m_i, l_i, p_op, True)
                            # the last computed block's P V
                            c_last = cnt + n_g - 1
                            s_last = c_last % ST
                            p_last = _p_tile(p_s, g, n_g - 1, PB, WGS) if CFG.P_SMEM else p_op
                            v_ready[s_last].wait((c_last // ST) & 1)
                            turn_begin(g, PP)
                            acc, l_i = _pv(p_last, v_s[s_last], acc, l_i, ones_g)
                            if hold_g is None:
                                turn_end(g, PP, WGS)
                            acc, l_i = _pv_wait(p_last, v_s[s_last], acc, l_i, ones_g)
                            if hold_g is not None:
                                turn_end(g, PP, WGS)
                            v_empty[s_last].arrive()
                    elif QB > 1:
                        # one loop, every step masked: with the buffer chosen per tile, ptxas 12.8 computes the Q
                        # tile's k-step descriptors in the unmasked loop's preheader only and reads them stale in the
                        # masked loop when the unmasked one ran no step (docs/ATTENTION.md, PREFETCH_Q)
                        for j in range(0, n_g):
                            acc, m_i, l_i = _serial_step(lp, j, acc, m_i, l_i, True)
                    else:
                        for j in range(0, f_g):
                            acc, m_i, l_i = _serial_step(lp, j, acc, m_i, l_i, False)
                        for jm in range(f_g, n_g):
                            acc, m_i, l_i = _serial_step(lp, jm, acc, m_i, l_i, True)
                    if CFG.EARLY_Q_RELEASE:
                        # every thread of the warpgroup is past its last S GEMM (waited for): the producer may
                        # load the next tile's Q; the barrier also orders the last tile's reads of the O tile
                        # before this tile's epilogue writes it
                        named_barrier_sync(_EPILOGUE + g, 128)
                        _stage(q_empty, qb, QB).arrive()
                    # blocks only later warpgroups' rows see (causal), or every block of a warpgroup past Sq
                    for jr in range(n_g, n_blocks):
                        _release(lp, jr)
                        turn_begin(g, PP)                  # (a turn without GEMMs: all take as many turns)
                        turn_end(g, PP, WGS)
                    if CFG.ROWSUM_MMA:              # the row sums, out of the accumulator's equal columns
                        l_i = gl.convert_layout(gl.max(l_i, 1), SliceLayout(1, s_layout))
                    o_g = _stage(o_s, g, WGS) if CFG.EARLY_Q_RELEASE else q_g
                    _epilogue(acc, m_i, l_i, o_g, O, L, rows, m0 + g * RM, q_row, q_col, ldo, Sq, bh, qk_scale, RM,
                              D, o_layout, WRITE_LSE)
                    if CFG.PERSISTENT and not CFG.EARLY_Q_RELEASE:
                        # every thread of the warpgroup has read O back from the Q tile: the producer may refill it
                        named_barrier_sync(_EPILOGUE + g, 128)
                        fence_async_shared()
                        _stage(q_empty, qb, QB).arrive()
                    cnt = cnt + n_blocks
                    tc = tc + 1
            turns_close(g, PP)

    with warp_role(WarpRole.PRODUCER, warp_range=(4 * WGS, 4 * WGS), registers=CFG.PRODUCER_REGS):
        cnt = gl.full((), 0, gl.int32)
        tc = gl.full((), 0, gl.int32)
        for u in range(u_first, u_end, u_step):
            for h in range(0, _unit_tiles(u, num_m, per_head, TPU)):
                m_blk, bh = _unit_tile(u, h, num_m, per_head, TPU, CFG.REVERSE_M)
                m0 = m_blk * CFG.BLOCK_M
                bkv = (bh // H) * (H // GROUP) + (bh % H) // GROUP      # batch x kv head
                q_row, q_col = _coords(bh, H, Sq, D, Q_BSHD)
                k_row, k_col = _coords(bkv, H // GROUP, Skv, D, K_BSHD)
                v_row, v_col = _coords(bkv, H // GROUP, Skv, D, V_BSHD)
                n_blocks, _ = _block_range(m0, Sq, Skv, CFG.BLOCK_M, BN, CAUSAL)
                qb = tc % QB
                if CFG.PERSISTENT:
                    _stage(q_empty, qb, QB).wait(((tc // QB) & 1) ^ 1)      # fresh barriers pass phase 1 at once
                q_bar = _stage(q_ready, qb, QB)
                q_bar.expect(WGS * q_s.nbytes)
                for g in static_range(WGS):
                    tma_load(_q_tile(q_s, qb, g, WGS, QB), Q, (q_row + m0 + g * RM, q_col), q_bar)
                for j in range(0, n_blocks):
                    c = cnt + j
                    s = c % ST
                    ph = ((c // ST) & 1) ^ 1
                    k_empty[s].wait(ph)
                    k_ready[s].expect(k_s.nbytes)
                    tma_load(k_s[s], K, (k_row + j * BN, k_col), k_ready[s])
                    v_empty[s].wait(ph)
                    v_ready[s].expect(v_s.nbytes)
                    tma_load(v_s[s], V, (v_row + j * BN, v_col), v_ready[s])
                cnt = cnt + n_blocks
                tc = tc + 1


def _batch_heads(Q, Sq, H, BSHD: bool):
    """B * H from Q's 2-D view: [B*H*Sq, D] rows, or [B*Sq, H*D] ones."""
    return (Q.shape[0] // Sq) * H if BSHD else Q.shape[0] // Sq


def _unit_tiles(u, num_m, per_head, TPU: int):
    """How many tiles unit u holds: one, or (causal, persistent) two, one when a head's query blocks are odd
    in number and u is its middle one."""
    if TPU == 1:
        return 1
    k = u % per_head
    return gl.where(2 * k + 1 == num_m, gl.full((), 1, gl.int32), 2)


def _unit_tile(u, h, num_m, per_head, TPU: int, REVERSE_M: bool):
    """(query block, batch x head) of tile h of unit u. A causal pair is a head's query blocks
    num_m - 1 - k (the longest rows first) and k: their key blocks sum to about the same for every k."""
    bh = u // per_head
    k = u % per_head
    if TPU == 2:
        return gl.where(h == 0, num_m - 1 - k, k), bh
    return (num_m - 1 - k if REVERSE_M else k), bh


def _serial_step(lp: _Loop, j, acc, m_i, l_i, MASKED: bool):
    """Key block j (the ring's block lp.base + j) without overlap: S, softmax, rescale O, O += P V, each
    waited for in turn (P through the warpgroup's P tile in shared memory with P_SMEM). With PINGPONG warpgroup
    g of WGS runs its P V GEMM in its turn (round robin), the turn passed on once that GEMM is done: the
    warpgroups' P V GEMMs run one at a time, so their softmaxes fall apart instead of running all at once
    (warpgroups that issue together share the tensor cores and finish together; a turn passed at the issue
    changes nothing then). With `lp.ones` (ROWSUM_MMA: a shared tile of ones) `l_i` is an accumulator whose every
    column sums P's rows: rescaled with O, and l += P ones issued with P V."""
    p_buf = _p_tile(lp.p_s, lp.g, 0, lp.PB, lp.WGS)
    s_i = (lp.base + j) % lp.ST
    ph = ((lp.base + j) // lp.ST) & 1
    lp.k_ready[s_i].wait(ph)
    s = wgmma(lp.q_g, lp.k_s[s_i].T, gl.zeros(acc.shape[:1] + (lp.BN,), gl.float32, layout=lp.s_layout), use_acc=False)
    lp.k_empty[s_i].arrive()
    if MASKED:
        s = _masked(s, lp.rows, j * lp.BN, lp.Skv, lp.off, lp.BN, lp.s_layout, lp.CAUSAL)
    m_i, p, alpha, l_i = _softmax(s, m_i, l_i, lp.qk_scale, MASKED, lp.ones is None, lp.TREE)
    acc, l_i = _rescale(acc, alpha, l_i, lp.ones)
    p_op = _p_operand(p, lp.dtype, lp.p_layout, p_buf)
    lp.v_ready[s_i].wait(ph)
    turn_begin(lp.g, lp.PINGPONG)
    acc, l_i = _pv(p_op, lp.v_s[s_i], acc, l_i, lp.ones)
    acc, l_i = _pv_wait(p_op, lp.v_s[s_i], acc, l_i, lp.ones)
    turn_end(lp.g, lp.PINGPONG, lp.WGS)
    lp.v_empty[s_i].arrive()
    return acc, m_i, l_i


def _overlapped_step(lp: _Loop, j, acc, m_i, l_i, p_op, MASKED: bool):
    """Key block j with FlashAttention-3's intra-warpgroup overlap: issue S_j = Q K_j^T and then
    O += P_{j-1} V_{j-1}; wait for S_j only and run its softmax while P V runs; then wait for P V,
    release V_{j-1} and rescale O for block j. Block j is the ring's block lp.base + j. With P in shared memory
    (`lp.p_s`), P_{j-1} is read from its tile and P_j stored to the other one; `p_op` is then a placeholder.
    With P in registers ptxas schedules the P V wait above the softmax (nothing the softmax computes is
    used before it), so the two do not overlap; `lp.pin` (PIN_SOFTMAX: a shared [rows] fp32 tile, else None)
    takes a store of the row sums before the wait, which ptxas keeps there, and the softmax with it. `lp.hold`
    (HOLD_TURNS: a shared [rows] fp32 tile, else None): the turn is handed on once S_j is done (`_s_done`).
    `lp.ones` (ROWSUM_MMA): l_i is the row sums' accumulator, l += P_{j-1} ones issued with P_{j-1} V_{j-1}.
    `lp.JOINT` (JOINT_WAIT): S_j is waited for with P V, the softmax after both."""
    ST, p_s, ones = lp.ST, lp.p_s, lp.ones
    c = lp.base + j
    s_i = c % ST
    v_i = (c - 1) % ST
    lp.k_ready[s_i].wait((c // ST) & 1)
    lp.v_ready[v_i].wait(((c - 1) // ST) & 1)
    turn_begin(lp.g, lp.PINGPONG)
    s = wgmma(lp.q_g, lp.k_s[s_i].T, gl.zeros(acc.shape[:1] + (lp.BN,), gl.float32, layout=lp.s_layout),
              use_acc=False, wait=False)
    p_prev = p_op if p_s is None else _p_tile(p_s, lp.g, j - 1, lp.PB, lp.WGS)
    acc, l_i = _pv(p_prev, lp.v_s[v_i], acc, l_i, ones)
    pendings = 0 if lp.JOINT else (1 if ones is None else 2)
    s, m_i = _s_done(s, lp.q_g, lp.k_s[s_i], m_i, lp.hold, lp.g, lp.PINGPONG, lp.WGS, pendings)
    lp.k_empty[s_i].arrive()
    if MASKED:
        s = _masked(s, lp.rows, j * lp.BN, lp.Skv, lp.off, lp.BN, lp.s_layout, lp.CAUSAL)
    m_i, p, alpha, l_new = _softmax(s, m_i, l_i, lp.qk_scale, MASKED, ones is None, lp.TREE)
    p_next = _p_operand(p, lp.dtype, lp.p_layout, None if p_s is None else _p_tile(p_s, lp.g, j, lp.PB, lp.WGS))
    if lp.pin is not None:      # the row sums (of every P) to shared memory: ptxas keeps the softmax above the wait
        lp.pin.store(l_new)
    acc, l_i = _pv_wait(p_prev, lp.v_s[v_i], acc, l_i, ones)
    lp.v_empty[v_i].arrive()
    acc, l_i = _rescale(acc, alpha, l_new if ones is None else l_i, ones)
    return acc, m_i, l_i, p_op if p_s is not None else p_next


def _s_done(s, q_g, k_tile, m_i, hold, g: int, PINGPONG: bool, WGS: int, pendings: int):
    """(S, m_i) once S's WGMMA is done (`pendings`: the P V GEMM left in flight), the turn handed on right
    before that wait, or with `hold` (HOLD_TURNS) after it, m_i then read back after the hand-over
    (`turn_end_after`: the softmax that needs it follows the arrive)."""
    if hold is None:
        turn_end(g, PINGPONG, WGS)
        return wgmma_wait(s, q_g, k_tile, pendings=pendings), m_i
    return turn_end_after(g, WGS, lambda: wgmma_wait(s, q_g, k_tile, pendings=pendings), hold, m_i)


def _ones_tile(ones_s, g: int, WGS: int, dtype):
    """Warpgroup g's ROWSUM_MMA tile of ones ([ROWSUM_COLS, BLOCK_N]; its transpose is the row sums' B
    operand), written by the warpgroup and fenced for the tensor cores' (async proxy) reads."""
    ones = _stage(ones_s, g, WGS)
    cols, keys = ones.shape
    tpw = min(32, keys // 8)                # a warp's threads along a row, 8 elements each
    fill = Layout.blocked([1, 8], [32 // tpw, tpw], [4, 1], [1, 0])
    ones.store(gl.full((cols, keys), 1.0, dtype, layout=fill))
    fence_async_shared()
    return ones


def _p_tile(p_s, g: int, j, PB: int, WGS: int):
    """Warpgroup g's shared P tile for key block j (block j in tile j % PB of its PB), or None without P_SMEM."""
    if p_s is None:
        return None
    return _stage(p_s, g * PB + j % PB if PB > 1 else g, WGS * PB)


def _p_operand(p, dtype, p_layout, p_buf):
    """P as the A operand of O += P V: in registers (WGMMA's register operand), or stored to `p_buf` in shared
    memory and fenced for the tensor cores' (async proxy) reads."""
    if p_buf is None:
        return gl.convert_layout(p.to(dtype), p_layout)
    p_buf.store(p.to(dtype))
    fence_async_shared()
    return p_buf


def _release(lp: _Loop, j):
    """Key block j (the ring's block lp.base + j), which none of this warpgroup's rows sees: released once loaded
    (waiting for the load keeps each release in its own phase of the `empty` barriers however far ahead this
    warpgroup is)."""
    s_i = (lp.base + j) % lp.ST
    ph = ((lp.base + j) // lp.ST) & 1
    lp.k_ready[s_i].wait(ph)
    lp.k_empty[s_i].arrive()
    lp.v_ready[s_i].wait(ph)
    lp.v_empty[s_i].arrive()


def _rescale(acc, alpha, l_i, ones):
    """(O, l) after a new row max: O * alpha per row (alpha is a row vector of the S layout; the O accumulator's
    rows are laid out the same way, so the conversion moves no data); l as it is (the softmax rescaled it), or
    with `ones` (ROWSUM_MMA: l is an accumulator tile) times alpha too."""
    acc = acc * gl.convert_layout(alpha, SliceLayout(1, acc.layout))[:, None]
    if ones is not None:
        l_i = l_i * gl.convert_layout(alpha, SliceLayout(1, l_i.layout))[:, None]
    return acc, l_i


def _pv(p_op, v_tile, acc, l_i, ones):
    """Issue O += P V, and with `ones` (ROWSUM_MMA) l += P ones (P's register operand in the row sums'
    dot-operand layout: the same registers), both left in flight."""
    acc = wgmma(p_op, v_tile, acc, wait=False)
    if ones is not None:
        p_l = p_op if not isinstance(p_op, gl.Tensor) else gl.convert_layout(
            p_op, DotOperandLayout(0, l_i.layout, 2))
        l_i = wgmma(p_l, ones.T, l_i, wait=False)
    return acc, l_i


def _pv_wait(p_op, v_tile, acc, l_i, ones):
    """(O, l) once `_pv`'s GEMMs (and every one issued before them) are done."""
    acc = wgmma_wait(acc, p_op, v_tile, pendings=0)
    if ones is not None:
        l_i = wgmma_wait(l_i, ones, pendings=0)
    return acc, l_i


def _epilogue(acc, m_i, l_i, o_g, O, L, rows, r0, q_row, q_col, ldo, Sq, bh, qk_scale, RM: int, D: int, o_layout,
              WRITE_LSE: bool):
    """O = acc / l into the rows < Sq of this warpgroup's block, staged in `o_g` (its Q tile, now unused, or
    EARLY_Q_RELEASE's O tile) and written with 16-byte stores; the natural-log LSE m * scale + ln(l) per row when
    WRITE_LSE."""
    l_o = gl.convert_layout(l_i, SliceLayout(1, o_layout))
    out = acc / gl.where(l_o == 0.0, 1.0, l_o)[:, None]
    o_g.store(out.to(o_g.dtype))
    vec = 128 // o_g.dtype.bits
    tpw_n = min(32, D // vec)
    st_layout = Layout.blocked([1, vec], [32 // tpw_n, tpw_n], [4, 1], [1, 0])
    tile = o_g.load(layout=st_layout)
    orow = r0 + gl.arange(0, RM, layout=SliceLayout(1, st_layout))
    ocol = gl.arange(0, D, layout=SliceLayout(0, st_layout))
    ptrs = O + ((q_row + orow)[:, None] * ldo + (q_col + ocol)[None, :])
    gl.store(ptrs, tile, mask=(orow[:, None] < Sq) & (ocol[None, :] < D))
    if WRITE_LSE:
        lse = (m_i * qk_scale + gl.log2(l_i)) * _LN2
        gl.store(L + (bh * Sq + rows), lse, mask=rows < Sq)
