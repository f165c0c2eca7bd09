"""What the SM90 attention kernel is tuned by: `AttentionConfig`, the default per head dim, and the
host-side rules (grid, warps, block ranges).

An `AttentionConfig` is frozen and checked when made (one `GluonError` naming the field and what it
takes). What depends on the inputs (head dim, dtype) is checked by `host.attention`; what the hardware
allows (shared memory, registers, TMA boxes, warp roles) by the compiler passes.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Mapping

from gluon.ir import GluonError

from ..config_checks import cached_hash, flag, overridden, positive_int, state_without_hash

HEAD_DIMS = (64, 128, 256)
ROWSUM_COLS = 8             # ROWSUM_MMA's ones tile and row-sum accumulator: WGMMA's narrowest N
_INTS = ("BLOCK_M", "BLOCK_N", "STAGES", "CONSUMER_WGS", "CONSUMER_REGS", "PRODUCER_REGS", "CTAS_PER_SM")
_BOOLS = ("OVERLAP", "PINGPONG", "REVERSE_M", "PERSISTENT", "P_SMEM", "PIN_SOFTMAX", "HOLD_TURNS", "ROWSUM_MMA",
          "TREE_MAX", "JOINT_WAIT", "PREFETCH_Q", "EARLY_Q_RELEASE", "FFMA_YIELD", "Q_REGS")


@dataclass(frozen=True)
class AttentionConfig:
    """The knobs of `attention_sm90`.

    BLOCK_M         query rows per CTA, split evenly over the consumer warpgroups (64 rows each: one
                    WGMMA M per warpgroup)
    BLOCK_N         keys per step: the K and V tiles, and the width of S = Q K^T
    STAGES          depth of the K/V TMA ring (k_ready/k_empty, v_ready/v_empty mbarriers)
    CONSUMER_WGS    consumer warpgroups, each its own warp role with its own rows of Q, S, P and O
    CONSUMER_REGS   setmaxnreg of the consumer warpgroups that are Triton worker partitions (the first
                    one, the default partition, gets what the register file has left)
    PRODUCER_REGS   setmaxnreg of the TMA producer warp
    OVERLAP         intra-warpgroup overlap: the next block's S = Q K^T is issued before this block's
                    P V, so the softmax runs while the tensor cores work (FlashAttention-3, section 3.2)
    PINGPONG        the consumer warpgroups take turns issuing their GEMMs (named barriers), so one's
                    softmax overlaps the other's GEMMs (FlashAttention-3, section 3.1): with OVERLAP two
                    warpgroups, each step's S and P V GEMMs issued in a turn; without it two or three
                    warpgroups, round robin, each P V GEMM run in a turn (held until it is done), so their
                    softmaxes fall apart instead of running all at once
    REVERSE_M       launch the query blocks last-first: with a causal mask the longest rows start first
    PERSISTENT      one CTA per SM walks the (query block, head) tiles: the producer loads the next tile's
                    first K/V blocks (and, with OVERLAP, its Q into a second buffer) while the consumers
                    finish this one; with a causal mask a CTA takes a head's query blocks in pairs
                    (last + first, ...), whose work sums to the same, so the static schedule stays balanced
    P_SMEM          P goes through shared memory (a tile per warpgroup, two with OVERLAP) and O += P V reads both
                    operands from there (FlashAttention-3's choice at D64): P's registers are free while S is
                    live, so OVERLAP fits three warpgroups with 128-key blocks
    PIN_SOFTMAX     OVERLAP with P in registers: each block's row sums are stored to a shared tile before the
                    P V wait, so the softmax stays above it and runs while P V does. Without it ptxas schedules
                    that wait above the softmax (the SASS shows the wait before the exp2s), and the overlap is
                    only the S GEMM's issue; with it the warpgroup holds P_j beside the P_(j-1) in flight (64
                    more registers at 128 keys: it spills at three warpgroups of 160)
    HOLD_TURNS      PINGPONG with OVERLAP: a warpgroup hands its turn on once its S GEMM is done (its P V left
                    in flight), not right after issuing them; warpgroups whose GEMMs are in flight together
                    share the tensor cores and finish together, so a turn handed on at the issue orders only
                    the issues (bench/turns_model.py). Two or three warpgroups (three fit with P_SMEM or
                    64-key blocks). The serial loop's turns are held always
    CTAS_PER_SM     1 or 2: CTAs of the kernel an SM holds at once (`gl.set_ctas_per_sm`: each launches with
                    half the register file, its setmaxnreg within it; the compile step checks the shared memory
                    fits; a persistent grid takes two an SM). Two take one consumer warpgroup a CTA, so the
                    warpgroups of an SM belong to different CTAs, which wait for their own K blocks: their softmaxes
                    need not line up as one CTA's do
    ROWSUM_MMA      each row of P summed on the tensor cores: one more WGMMA a block, issued with P V, P (its A
                    operand, as for P V) times a shared 8-column tile of ones, into an 8-column fp32 accumulator
                    rescaled with O; the softmax then runs no per-score FADD (at D64 the softmax's FP32
                    instructions, about four a score beside each exp2, are what it is short of). Not with
                    PIN_SOFTMAX (whose pin is the row sums the softmax no longer computes). l sums the
                    P that P V multiplies (rounded to the input dtype) instead of its fp32 values, so the LSE
                    carries that rounding (l within 2^-9 relative with bf16). With P_SMEM the causal D64 kernel
                    spills 68 bytes at 160 registers, the persistent overlapped D128 kernels 8-104 bytes
    TREE_MAX        each row's max of S reduced in four independent chains (the tile's column quarters' elementwise
                    max first, `split_cols`: the same registers), not one chain of dependent FMNMX over a thread's
                    values (ptxas keeps a reduction's order): at D64 the stall cycles from S's wait to the first
                    exp2 drop from about 161 to 112 (SASS). Exact: a max does not round
    JOINT_WAIT      OVERLAP's loop with S_j and P_(j-1) V_(j-1) waited for together: the warpgroup issues both
                    GEMMs back to back and waits once a block, and runs the softmax after both (not under P V), so
                    P_(j-1)'s registers are free for it: three D64 warpgroups of 160 registers compile without
                    spills (the overlapped softmax spills 16-48 bytes there); the other warpgroups' GEMMs run under
                    each one's softmax. Not with PIN_SOFTMAX (which keeps the softmax above the P V wait)
    PREFETCH_Q      PERSISTENT without OVERLAP: a second Q buffer, so the producer loads the next tile's Q (and then
                    its first K/V blocks) while the consumers run this one, as the overlapped persistent kernel does
                    always; with one buffer the next Q waits for this tile's epilogue and the next K/V behind it, a
                    load latency and the epilogue exposed every tile (about 2.7 us a tile at D64 S4096 by the
                    default's causal and unmasked times). A serial kernel with two buffers read a wrong Q on the
                    H200 (twelfth session, the code of then) and this one gave a wrong LSE on an H100 at nearly every
                    row (thirty-sixth and thirty-seventh sessions; at times an illegal address). The cause is in the
                    SASS: with the buffer chosen per tile, ptxas 12.8 computed the Q tile's k-step descriptors in the
                    unmasked key loop's preheader only, and the masked loop read them stale when the unmasked one ran
                    no step (Skv < BLOCK_N, a causal diagonal block). Its serial loop is one loop now, every step
                    masked (`backend.sass_flow` finds the pattern; this SASS is clean): right on an H100 since (the
                    GPU test's Skv 1..127 cases, LSE checked, thirty-eighth session); slower than the default at
                    D64 (thirty-ninth session), so not the default
    EARLY_Q_RELEASE PERSISTENT without OVERLAP, one Q buffer (PREFETCH_Q's alternative): the epilogue stages O in
                    a tile of its own, so a warpgroup hands its Q buffer back as soon as its last S GEMM is done, and
                    the producer loads the next tile's Q while the consumers run the epilogue (and, causal, release
                    the blocks right of their rows); 8 KiB a warpgroup at D64 instead of PREFETCH_Q's second Q tile.
                    Right on an H100 (the GPU tests' cases, LSE checked, thirty-seventh session); level with the D64
                    default there (0.98-1.00x), so not the default
    FFMA_YIELD      every second FFMA of each run of them after an S GEMM's wait (the softmax's score scaling)
                    yields its warp scheduler, set in the binary after ptxas (`gl.set_ffma_yield`, the GEMM's fp8
                    promotion's switch): another warpgroup's GEMMs may issue there. ptxas already yields at about a
                    quarter of the softmax's instructions (11 of its 68 FFMAs at D64); level with the default at D64
                    (thirty-ninth session), so off
    Q_REGS          each warpgroup's Q tile loaded into registers once a tile (ldmatrix) and read by every
                    S = Q K^T WGMMA from there, so a key block's GEMMs read only K and V from shared memory (at D64,
                    three warpgroups with 128-key blocks: 128 of 152 KiB a block instead); 16 registers a thread at
                    D64 (its serial kernels compile without spills; the overlapped loop spills about 1 KB), 32 at
                    D128 (its default spills). Not yet timed
    """

    BLOCK_M: int = 128
    BLOCK_N: int = 128
    STAGES: int = 2
    CONSUMER_WGS: int = 2
    CONSUMER_REGS: int = 240
    PRODUCER_REGS: int = 24
    OVERLAP: bool = True
    PINGPONG: bool = False
    REVERSE_M: bool = True
    PERSISTENT: bool = False
    P_SMEM: bool = False
    PIN_SOFTMAX: bool = False
    HOLD_TURNS: bool = False
    CTAS_PER_SM: int = 1
    ROWSUM_MMA: bool = False
    TREE_MAX: bool = False
    JOINT_WAIT: bool = False
    PREFETCH_Q: bool = False
    EARLY_Q_RELEASE: bool = False
    FFMA_YIELD: bool = False
    Q_REGS: bool = False

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    def __post_init__(self):
        for name in _INTS:
            object.__setattr__(self, name, positive_int("AttentionConfig", name, getattr(self, name)))
        for name in _BOOLS:
            object.__setattr__(self, name, flag("AttentionConfig", name, getattr(self, name)))
        if self.CONSUMER_WGS not in (1, 2, 3):
            raise GluonError(f"AttentionConfig CONSUMER_WGS={self.CONSUMER_WGS}: takes 1, 2 or 3")
        if self.BLOCK_M != 64 * self.CONSUMER_WGS:
            raise GluonError(f"AttentionConfig BLOCK_M={self.BLOCK_M}: each consumer warpgroup owns 64 query rows, so "
                             f"BLOCK_M must be 64 * CONSUMER_WGS = {64 * self.CONSUMER_WGS}")
        if self.BLOCK_N not in (64, 128, 256):
            raise GluonError(f"AttentionConfig BLOCK_N={self.BLOCK_N}: takes 64, 128 or 256 (a WGMMA width that is a "
                             "power of two)")
        if self.PINGPONG and self.OVERLAP and self.CONSUMER_WGS != 2 and not self.HOLD_TURNS:
            raise GluonError(f"AttentionConfig PINGPONG=True with OVERLAP=True takes CONSUMER_WGS=2 (two warpgroups "
                             f"take turns issuing both GEMMs; three with HOLD_TURNS=True), got {self.CONSUMER_WGS}")
        if self.PINGPONG and self.CONSUMER_WGS == 1:
            raise GluonError("AttentionConfig PINGPONG=True takes CONSUMER_WGS=2 or 3 (the warpgroups take turns), "
                             "got 1")
        if self.HOLD_TURNS and not (self.PINGPONG and self.OVERLAP):
            raise GluonError("AttentionConfig HOLD_TURNS=True takes PINGPONG=True and OVERLAP=True (it moves where the "
                             "overlapped loop hands its turn on; the serial loop's turns are held already)")
        if self.PIN_SOFTMAX and not (self.OVERLAP and not self.P_SMEM):
            raise GluonError("AttentionConfig PIN_SOFTMAX=True takes OVERLAP=True and P_SMEM=False (it keeps the "
                             "overlapped softmax above the wait for P V's register operand)")
        if self.JOINT_WAIT and not (self.OVERLAP and not self.PIN_SOFTMAX):
            raise GluonError("AttentionConfig JOINT_WAIT=True takes OVERLAP=True and PIN_SOFTMAX=False (it waits for "
                             "the overlapped loop's two GEMMs together)")
        if self.PREFETCH_Q and not (self.PERSISTENT and not self.OVERLAP):
            raise GluonError("AttentionConfig PREFETCH_Q=True takes PERSISTENT=True and OVERLAP=False (a persistent "
                             "overlapped kernel has the second Q buffer already)")
        if self.EARLY_Q_RELEASE and not (self.PERSISTENT and not self.OVERLAP and not self.PREFETCH_Q):
            raise GluonError("AttentionConfig EARLY_Q_RELEASE=True takes PERSISTENT=True, OVERLAP=False and "
                             "PREFETCH_Q=False (it hands a persistent kernel's one Q buffer back before the epilogue)")
        if self.ROWSUM_MMA and self.PIN_SOFTMAX:
            raise GluonError("AttentionConfig ROWSUM_MMA=True takes PIN_SOFTMAX=False (the pin stores the row sums, "
                             "which the softmax no longer computes)")
        if self.CTAS_PER_SM > 2 or (self.CTAS_PER_SM == 2 and self.CONSUMER_WGS != 1):
            raise GluonError(f"AttentionConfig CTAS_PER_SM={self.CTAS_PER_SM} with CONSUMER_WGS={self.CONSUMER_WGS}: "
                             "takes 1, or 2 with CONSUMER_WGS=1 (BLOCK_M=64); more warps an SM leave 80 registers a "
                             "thread at launch, too few for ptxas to compile the WGMMAs")
        for name in ("CONSUMER_REGS", "PRODUCER_REGS"):
            v = getattr(self, name)
            if v % 8 or not 24 <= v <= 256:
                raise GluonError(f"AttentionConfig {name}={v}: setmaxnreg takes a multiple of 8 in 24..256")


FIELDS = tuple(f.name for f in fields(AttentionConfig))

# switches whose kernels gave wrong results on the GPU: `attention` does not launch them there (the interpreter,
# the compiler and a launch of the kernel itself still take them, for the investigation); docs/ATTENTION.md
# (none now: PREFETCH_Q, refused from the thirty-sixth to the thirty-eighth session, ran right with its fix)
WRONG_ON_GPU: dict[str, str] = {}


def gpu_problem(cfg: AttentionConfig) -> str | None:
    """Why `attention` does not launch `cfg` on a GPU (a switch of WRONG_ON_GPU is on), else None."""
    for name, why in WRONG_ON_GPU.items():
        if getattr(cfg, name):
            return f"AttentionConfig {name}=True gave {why} (docs/ATTENTION.md); not launched on the GPU"
    return None

# per head dim: what ran best on the H200 (docs/PERF.md): at D128 persistent (two stages: the second Q
# buffer takes the third's shared memory; 232 / 32 registers: the splits 240 / 24, 240 / 32 and 232 / 40 each
# spill in some launch's specialization, tests/test_attention.py compiles them), at D64 three warpgroups of
# 64 rows, whose P V GEMMs are too short to hide a softmax under (OVERLAP measured slower there); at D256
# 64-key steps, serial (the 64x256 fp32 accumulator takes 128 of the 240 registers: OVERLAP's second S tile
# spills), one CTA per tile (two Q buffers and a two-stage ring would need 256 KiB)
DEFAULT_CONFIGS: dict[int, AttentionConfig] = {
    64: AttentionConfig(BLOCK_M=192, CONSUMER_WGS=3, CONSUMER_REGS=160, OVERLAP=False),
    128: AttentionConfig(PINGPONG=True, PERSISTENT=True, CONSUMER_REGS=232, PRODUCER_REGS=32),
    256: AttentionConfig(BLOCK_N=64, STAGES=2, OVERLAP=False, CONSUMER_REGS=240, PRODUCER_REGS=24),
}


def to_config(overrides: Mapping | AttentionConfig | None, base: AttentionConfig) -> AttentionConfig:
    """`base` with `overrides` (a dict of field values, e.g. from `--set`), or a whole config."""
    return overridden(overrides, base)


# D128 causal with at most SHORT_CAUSAL_SKV keys: a query block sees 8 key blocks of 128 or fewer, half of them on
# or next to the diagonal, so 64-key steps (less of each diagonal block masked away, a finer skip per warpgroup),
# each warpgroup on its own (no ping-pong turns to wait for) and a deeper ring measured +7% at S1024 and +25% at
# S512 over the default with three stages, four +0.5 to +1.3% over three (three runs); at S1536 and S2048 the
# default is ahead (docs/PERF.md, eighteenth and nineteenth sessions)
SHORT_CAUSAL_SKV = 1024
SHORT_CAUSAL_D128 = replace(DEFAULT_CONFIGS[128], BLOCK_N=64, PINGPONG=False, STAGES=4)

# D128 without a mask over at least LONG_SKV keys: no ping-pong, the overlapped softmax pinned under P V
# (PIN_SOFTMAX), +2.0 to +5.0% over the default at S4k / S8k / S16k in three calls on two days (causal the same
# within +-0.8%, so it keeps ping-pong; shorter keys not measured): docs/PERF.md, twenty-second and
# twenty-sixth sessions
LONG_SKV = 4096
LONG_D128 = replace(DEFAULT_CONFIGS[128], PINGPONG=False, PIN_SOFTMAX=True)


def default_config(head_dim: int) -> AttentionConfig:
    """The config for `head_dim` whatever the problem (the tuner's and the examples' starting point)."""
    return DEFAULT_CONFIGS[head_dim]


def choose_config(head_dim: int, skv: int, causal: bool) -> AttentionConfig:
    """What `attention` runs for a problem: the head dim's default, but at D128 for short causal ones and long
    ones without a mask."""
    if head_dim == 128 and causal and skv <= SHORT_CAUSAL_SKV:
        return SHORT_CAUSAL_D128
    if head_dim == 128 and not causal and skv >= LONG_SKV:
        return LONG_D128
    return DEFAULT_CONFIGS[head_dim]


def num_warps(cfg: AttentionConfig) -> int:
    """Consumer warpgroups + the producer warp."""
    return 4 * cfg.CONSUMER_WGS + 1


def q_buffers(cfg: AttentionConfig) -> int:
    """Q tiles per consumer warpgroup: two when persistent with OVERLAP or PREFETCH_Q (the next tile's Q loads while
    this one runs; kernel.py says why a serial one keeps one otherwise)."""
    return 2 if cfg.PERSISTENT and (cfg.OVERLAP or cfg.PREFETCH_Q) else 1


def work_units(sq: int, batch_heads: int, cfg: AttentionConfig, causal: bool) -> int:
    """What the persistent kernel's CTAs share out: (query block, head) tiles, in pairs when causal."""
    num_m = -(-sq // cfg.BLOCK_M)
    per_head = -(-num_m // 2) if causal else num_m
    return per_head * batch_heads


def grid(sq: int, batch_heads: int, cfg: AttentionConfig, causal: bool = False, sms: int = 0) -> tuple[int, int]:
    """One CTA per (query block, batch x head); persistent: CTAS_PER_SM per SM (`sms` of them), at most one per
    unit of work."""
    if cfg.PERSISTENT:
        if sms < 1:
            raise GluonError(f"grid: a PERSISTENT config launches one CTA per SM; pass the SM count (sms={sms})")
        return (max(1, min(sms * cfg.CTAS_PER_SM, work_units(sq, batch_heads, cfg, causal))), 1)
    return (-(-sq // cfg.BLOCK_M), batch_heads)


def p_buffers(cfg: AttentionConfig) -> int:
    """P tiles per consumer warpgroup with P_SMEM: two with OVERLAP (P_j is stored while P_(j-1) is read), else
    one; none without P_SMEM."""
    if not cfg.P_SMEM:
        return 0
    return 2 if cfg.OVERLAP else 1


def smem_bytes(cfg: AttentionConfig, head_dim: int, elem_bytes: int = 2) -> int:
    """Shared memory of the Q tiles (and EARLY_Q_RELEASE's O tiles), the K/V ring, the P tiles, PIN_SOFTMAX's row
    sums, HOLD_TURNS's row maxima and ROWSUM_MMA's tiles of ones (barriers aside)."""
    q = (q_buffers(cfg) + cfg.EARLY_Q_RELEASE) * cfg.BLOCK_M * head_dim * elem_bytes
    kv = 2 * cfg.STAGES * cfg.BLOCK_N * head_dim * elem_bytes
    p = p_buffers(cfg) * cfg.BLOCK_M * cfg.BLOCK_N * elem_bytes
    ones = cfg.ROWSUM_MMA * cfg.CONSUMER_WGS * ROWSUM_COLS * cfg.BLOCK_N * elem_bytes
    return q + kv + p + ones + 4 * cfg.BLOCK_M * (cfg.PIN_SOFTMAX + cfg.HOLD_TURNS)
