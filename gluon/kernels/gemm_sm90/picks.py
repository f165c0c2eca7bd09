"""The hand-picked configs of the SM90 GEMM and the rules that choose among them by problem size: `choose_config`
(a rule on tile counts, not a table of shapes) and `resolve_config` (what `launch` runs: the pick, the caller's
overrides on top, "auto" values resolved). The knobs themselves and the rules about them alone: config.py. The
measurements behind each pick: docs/PERF.md.
"""
from __future__ import annotations

from typing import Mapping

from gluon.arch import SM90

from .config import AUTO, DEFAULT_CONFIG, OVERLAP_TAKES, GemmConfig, to_config
from .geometry import cdiv, slice_work, slot_use, split_k, tiles

# An fp32 output: 128x128 tiles staged through a 64 KiB fp32 tile and written by TMA, 4 stages (the
# 128x256 tile's fp32 staging leaves room for 2 stages only, and its direct stores spill).
FP32_OUT_CONFIG = DEFAULT_CONFIG.replace(BLOCK_N=128, EPILOGUE="tma", STAGES=4)

# Problems with less than one wave of 128x256 tiles: smaller tiles on one consumer warpgroup with a
# deeper ring, so more SMs get work. Smallest first; `choose_config` takes the first whose tiles fit in
# one wave.
SMALL_CONFIGS = (
    DEFAULT_CONFIG.replace(BLOCK_M=64, BLOCK_N=64, STAGES=6, CONSUMER_WGS=1),
    DEFAULT_CONFIG.replace(BLOCK_M=128, BLOCK_N=64, STAGES=6, CONSUMER_WGS=1),
)

# Problems of a few waves of 128x256 tiles whose last wave is part empty (1536x4096: 192 tiles, 2 rounds on
# 132 SMs, 73% of the slots hold output): tiles that fill the rounds better, each with a wave's throughput
# relative to 128x256's (measured with 16-bit inputs, B [N, K] and B [K, N]: docs/PERF.md, twenty-fifth and
# twenty-sixth sessions). Both of a tie: the first.
WAVE_CONFIGS = (
    (DEFAULT_CONFIG.replace(BLOCK_M=192, BLOCK_N=128, STAGES=4, CONSUMER_WGS=3, CONSUMER_REGS=152, SPLIT_WGS=True),
     0.89),
    (DEFAULT_CONFIG.replace(BLOCK_N=128, STAGES=5), 0.89),
)
WAVE_MARGIN = 1.03                  # ... taken where it beats 128x256 by this much (the model is rough)

# Few output tiles over a deep K: 128x128 tiles on one consumer warpgroup, 2-CTA clusters multicasting
# each B tile (half the L2 reads of B), the K split by `split_k` so about a wave of units runs.
DEEP_K_CONFIG = DEFAULT_CONFIG.replace(BLOCK_M=128, BLOCK_N=128, STAGES=6, CONSUMER_WGS=1, CLUSTER_M=2)
DEEP_K = 16384                      # K from which a problem of under half a wave of 128x128 tiles is "deep"
# K up to this is "shallow": a program's tiles are one or two k-steps each and C's stores are the work; there
# the coalesced epilogue (rows stored from the staging tile by address) beat TMA's stores on 128x256 tiles by up
# to 6% with 16-bit inputs (on wave_config's 192x128 tiles it lost 1%: docs/PERF.md, thirty-ninth session)
SHALLOW_K = 128
# ... or 128x256 tiles on two cooperative warpgroups (4 stages; C by address, the K slices' partials leave from
# registers anyway), where a CTA's share of the work, its tile times its K slice, is DEEP_K_WIDE_MARGIN smaller:
# the coarser tiles make more K slices, which fill the SMs better (768x768x49152: 126 CTAs against 108, 0.83 -> 0.96x
# cuBLAS); at an equal share they lost 1-8% to the 128x128 tiles' fewer slices (docs/PERF.md, twenty-ninth session)
DEEP_K_WIDE = DEFAULT_CONFIG.replace(STAGES=4, EPILOGUE="direct", CLUSTER_M=2)
DEEP_K_WIDE_MARGIN = 1.05


# ------------------------------------------------------------------------------ the rules


def fills_a_wave(M: int, N: int, num_sms: int) -> bool:
    """About a wave of DEFAULT_CONFIG's 128x256 tiles or more (90% of the SMs): where `choose_config` picks that
    family, and block-scaled fp8 may take 192-row tiles."""
    return tiles(M, N, DEFAULT_CONFIG) * 10 >= num_sms * 9


def wave_config(M: int, N: int, num_sms: int) -> GemmConfig:
    """DEFAULT_CONFIG, or the WAVE_CONFIGS entry whose slot use times its relative throughput beats it by
    WAVE_MARGIN (the best such)."""
    scored = [(slot_use(M, N, DEFAULT_CONFIG, num_sms) * WAVE_MARGIN, DEFAULT_CONFIG)]
    scored += [(slot_use(M, N, cfg, num_sms) * speed, cfg) for cfg, speed in WAVE_CONFIGS]
    return max(scored, key=lambda sc: sc[0])[1]        # (max keeps the first of a tie)


def deep_k_config(M: int, N: int, K: int, num_sms: int, out_size: int = 2, wide: bool = True) -> GemmConfig:
    """Few output tiles over a deep K: DEEP_K_CONFIG, or DEEP_K_WIDE where that makes a CTA's `slice_work`
    DEEP_K_WIDE_MARGIN smaller (only with `wide` and a 16-bit output: what was timed). Either shares B in 2-CTA
    pairs only over an even count of tile rows: over an odd one the last pair's second CTA has no rows and takes an
    SM, which lost 1-26% to no cluster (docs/PERF.md, twenty-eighth session)."""
    def paired(cfg: GemmConfig) -> GemmConfig:
        return cfg if cdiv(M, cfg.BLOCK_M) % 2 == 0 else cfg.replace(CLUSTER_M=1)
    # an fp32 output's 64 KiB staging tile fits beside 5 of the ring's 32 KiB stages, not 6
    deep = paired(DEEP_K_CONFIG if out_size <= 2 else DEEP_K_CONFIG.replace(STAGES=5))
    if out_size > 2 or not wide:
        return deep
    wider = paired(DEEP_K_WIDE)
    if slice_work(M, N, K, wider, num_sms) * DEEP_K_WIDE_MARGIN <= slice_work(M, N, K, deep, num_sms):
        return wider
    return deep


# M in (64, SMALL_M] where the swapped tiles stream B once (no K split): the ordinary orientation's 64x128 tiles
# instead, A's two row blocks in a 2-CTA cluster sharing (multicasting) each B tile, cuBLAS's form there: 1.01-1.14x
# the swapped pick at 8 such shapes, both B layouts (N 11008 to 18944; docs/PERF.md, thirtieth session)
DECODE_PAIRS = DEFAULT_CONFIG.replace(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, STAGES=8, CONSUMER_WGS=1, CLUSTER_M=2,
                                      PDL=True)
# ... where 128x128 tiles (A's rows in one tile row) make half a wave to one: those, on one warpgroup over 6 stages,
# no cluster, each B tile read by one CTA. On the H200, against the 64x128 tiles at two CTAs an SM that the thirty-first
# session had there (1.02-1.06x the pairs on an H100): 1.01-1.15x at 8 shapes of 86 to 128 such tiles, both B layouts
# (128x11008x4096 B [K, N] 0.906 -> 0.995x cuBLAS, 1.008 -> 1.111x plain Triton); over a wave (96x18944x3584: 148)
# the pairs stay, 0.88 against 0.80 (docs/PERF.md, thirty-second session)
DECODE_WIDE = DEFAULT_CONFIG.replace(BLOCK_N=128, STAGES=6, CONSUMER_WGS=1, PDL=True)
# ... with 128-deep k-steps over 3 stages where those tiles make 0.7 of a wave or more: on an H100, two calls, both B
# layouts, against the 64-deep six: +0.6 to +3.8% at 96 and 112 tiles (128x12288x4096, 128 and 96 x 14336 x 4096;
# 128x14336x4096 B [N, K] 0.954 -> 0.990x cuBLAS), -0.6 to +2.4% at 128, -0.9 to -1.8% at 86 (128x11008x4096)
# (docs/PERF.md, thirty-seventh session)
DECODE_WIDE_DEEP = DECODE_WIDE.replace(BLOCK_K=128, STAGES=3)
# M in [32, 64] where 64x128 tiles make 0.65 to one wave: those, unswapped, 128-deep k-steps over 4 stages (plain
# Triton's tile, deeper), B streamed once by one CTA a tile; against the swapped pick on an H100 (64 rows of A on
# WGMMA's N, or 64-row B tiles over more than a wave): 1.006-1.087x at 12 cases of 86 to 128 such tiles, both B
# layouts (64x11008x4096 0.898 -> 0.978x cuBLAS with B [K, N]). At M = 32 the swapped pick's 32x128 tiles where they
# make a wave stay (32x14336x4096: 0.992 against 0.969; docs/PERF.md, thirty-fourth session)
DECODE_ROWS = DEFAULT_CONFIG.replace(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, STAGES=4, CONSUMER_WGS=1, PDL=True)
# ... and where the swapped pick is 64x256 tiles (A's rows padded to 64, 3/4 to one wave of 256-row B tiles: N = 28672),
# the same tiles unswapped (plain Triton's there), 64-deep k-steps over 4 stages: 1.010-1.021x the swapped pick at
# 48 / 64 x 28672 x 4096, both B layouts, on an H100 (64x28672x4096 0.969 -> 0.986x cuBLAS B [N, K], 0.981 -> 1.002
# B [K, N]; docs/PERF.md, thirty-third and thirty-fifth sessions)
DECODE_ROWS_WIDE = DEFAULT_CONFIG.replace(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, STAGES=4, CONSUMER_WGS=1, PDL=True)
# With fp8 B [N, K] (fp8's only layout) the 128-deep k-steps of those 64x256 tiles read B in TMA boxes of 128 bytes a
# row: DECODE_ROWS instead (256-deep) where the 256-row tiles make 0.8 of a wave or more (N 26881 up); on the H200
# against the swapped pick, same run, e4m3 per tensor: +5.1 / +5.9% at 48 / 64 x 28672 x 4096. The same swap for bf16
# (+0.9% on an H100) lost 0.4-0.7% on the H200, and DECODE_WIDE_DEEP over 128x256 tiles from 65 to 128 rows (+2% on
# an H100) lost 0.1-7% for bf16 and fp8 there (96x28672x4096 0.938 -> 0.873x cuBLAS): not taken (docs/PERF.md,
# forty-eighth and forty-ninth sessions)


SMALL_M = 128                       # up to this many rows of A, choose_config swaps A and B ...
_SWAP_ALWAYS_M = 64                 # ... and above this only where 128x256 tiles make under 3/4 of a wave
_SMEM_BUDGET = 216 * 1024           # what the rings may take (the barriers and Triton's scratch need the rest)


def _swapped_stages(bm: int, bn: int, bk: int) -> int:
    """Stages of a swapped decode tile (bm rows of A, bn of B, bk-deep 16-bit k-steps) that fit `_SMEM_BUDGET`, at
    most 16 (C leaves from registers: no staging tile beside them)."""
    return min(16, _SMEM_BUDGET // ((bm + bn) * bk * 2))


def small_m_config(M: int, N: int, num_sms: int, b_kmajor: bool = False) -> GemmConfig:
    """The decode-like problem's config (M <= SMALL_M): SWAP_AB with A's rows padded to a WGMMA width
    (a power of two >= 8), and the widest B tile (256, 128, 64 rows; an accumulator of at most 128
    registers per thread) whose tiles make 3/4 to one wave, so B streams once with no K split; 128-deep
    k-steps (64 where fewer than 4 stages would fit), as many stages as fit. Otherwise 64-row B tiles, the
    waves evened out by `split_k`. With B [N, K] (`b_kmajor`) and A's rows padded to at most 32, a tile
    that fits only 64-deep k-steps (of 16-bit elements; fp8's `resolve_config` doubles) is passed over: its
    TMA boxes read B in pieces of 128 bytes a row, which stream slower than the 256 of the deeper ones (B
    [K, N] reads whole tile rows of 512)."""
    bm = max(8, 1 << (M - 1).bit_length())
    deep_only = b_kmajor and bm <= 32

    def fit(bn: int, bk: int) -> GemmConfig | None:
        st = _swapped_stages(bm, bn, bk)
        if st < 4:
            return None
        return DEFAULT_CONFIG.replace(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STAGES=st, CONSUMER_WGS=1, SWAP_AB=True,
                                      EPILOGUE="direct")
    for bn in (256, 128, 64):
        if bn * bm > 128 * 128:             # the accumulator: at most 128 fp32 registers per thread
            continue
        if num_sms * 3 <= cdiv(N, bn) * 4 <= num_sms * 4:
            cfg = fit(bn, 128) or (None if deep_only else fit(bn, 64))
            if cfg is not None:
                return cfg
    return fit(64, 128)


def choose_config(M: int, N: int, K: int, num_sms: int, pitch_aligned: bool = True, out_size: int = 2,
                  swap_ab: bool = True, wave_tiles: bool = True, pairs: bool = True,
                  b_kmajor: bool = False, in_size: int = 2) -> GemmConfig:
    """The hand-picked configuration for a problem when the caller gives none (a rule on tile counts,
    not a table of shapes; its "auto" values are resolved by `resolve_config`):

    * M <= 64, or M <= SMALL_M where 128x256 tiles make under 3/4 of a wave (decode):
      `small_m_config` (B [N, K] where `b_kmajor`), A and B swapped (unless `swap_ab` is False: the ordinary
      kernel's pick), its two K slices (where `split_k` makes two) summed in 2-CTA clusters (CLUSTER_K=2), or
      where A's row tile halved needs no split, that instead (`_halved_rows`; where `pairs`, 16-bit in and out),
      launched as a programmatic dependent (PDL: its prologue under the end of the kernel before, as in a
      model's GEMMs back to back);
      above 64 rows where the swapped tiles need no K split, DECODE_PAIRS instead (where `pairs`: `resolve_config`
      asks for them with no overrides; 16-bit inputs, `in_size` 2; and a 16-bit output: what was timed), or
      DECODE_WIDE's 128x128 tiles where they make half a wave to one; from 32 to 64 rows with no K split,
      DECODE_ROWS's 64x128 tiles unswapped where they make 0.65 to one wave and the swapped tiles are 64 wide on
      either side (the same conditions), and DECODE_ROWS_WIDE's 64x256 tiles unswapped where the swapped pick is
      those tiles (fp8 inputs, where `_deeper_fill`: DECODE_ROWS, 256-deep k-steps);
      DECODE_WIDE_DEEP (128-deep k-steps) where DECODE_WIDE's tiles make 0.7 of a wave or more;
    * K >= DEEP_K with under half a wave of 128x128 tiles: `deep_k_config`'s 128x128 tiles, or 128x256 where
      `wave_tiles` (split along K by `split_k`; no cluster where A has an odd count of tile rows);
    * under about one wave of 128x256 tiles: the first of SMALL_CONFIGS whose tiles fit in one wave;
    * an fp32 output (`out_size` 4): FP32_OUT_CONFIG;
    * a few waves of 128x256 tiles, the last part empty (aligned rows, 16-bit inputs: `wave_tiles`, which
      `resolve_config` turns off for fp8, where it is not measured): `wave_config`'s 192x128 or 128x128 tiles
      where they fill the rounds better;
    * rows of A and B not on 128-byte boundaries (`pitch_aligned` False): 2-CTA clusters (CLUSTER_M=2)
      that load each B tile once and multicast it;
    * several 128x256 tiles per program: SPLIT_WGS and K_ZIGZAG;
    * one tile per program, or K <= SHALLOW_K on 16-bit inputs and 128x256 tiles, output rows of 16-element
      multiples, aligned: EPILOGUE="coalesced".

    The measurements behind each rule: docs/PERF.md."""
    if swap_ab and (M <= _SWAP_ALWAYS_M or (M <= SMALL_M and tiles(M, N, DEFAULT_CONFIG) * 4 < num_sms * 3)):
        cfg = small_m_config(M, N, num_sms, b_kmajor)
        # two K slices: summed by the two CTAs of a cluster (no second kernel); more slices keep splitk_reduce
        # (clusters of 4 measured 0.57-0.77x cuBLAS at 4096^2: fewer of them fit on the GPU at once)
        # and, with no second kernel, PDL (8 decode GEMMs back to back: +3 to +6% at 4096^2)
        splits = split_k(M, N, K, cfg, num_sms)
        if splits == 2:
            rows = _halved_rows(cfg)
            if pairs and in_size == 2 and out_size <= 2 and split_k(M, N, K, rows, num_sms) == 1:
                return rows.replace(PDL=True)
            return cfg.replace(CLUSTER_K=2, PDL=True)
        if splits == 1 and pairs and out_size <= 2:         # no K split, 16-bit output, no overrides: timed forms
            if (cfg.BLOCK_M, cfg.BLOCK_N) == (64, 256) and in_size == 1 and _deeper_fill(M, N, num_sms):
                return DECODE_ROWS          # fp8 (B [N, K]); `resolve_config` doubles its k-step
            if in_size != 2:
                return cfg
            if _rows_fit(M, N, cfg, num_sms):
                return one_wave_step(N, DECODE_ROWS, num_sms) if b_kmajor else DECODE_ROWS
            if (cfg.BLOCK_M, cfg.BLOCK_N) == (64, 256):
                return DECODE_ROWS_WIDE
            if M > _SWAP_ALWAYS_M:
                n = tiles(M, N, DECODE_WIDE)
                if not num_sms < 2 * n <= 2 * num_sms:
                    return DECODE_PAIRS
                return one_wave_step(N, DECODE_WIDE_DEEP, num_sms) if 10 * n >= 7 * num_sms else DECODE_WIDE
        return cfg
    if fills_a_wave(M, N, num_sms):
        if out_size > 2:
            return FP32_OUT_CONFIG
        cfg = DEFAULT_CONFIG.replace(CLUSTER_M=1 if pitch_aligned else 2)
        if pitch_aligned and wave_tiles:
            cfg = wave_config(M, N, num_sms)
        if tiles(M, N, cfg) > num_sms:
            cfg = cfg.replace(SPLIT_WGS=True, K_ZIGZAG=True)
            if not _stores_bound(K, cfg, wave_tiles):
                return cfg
        if N % 16 == 0 and pitch_aligned:
            return cfg.replace(EPILOGUE="coalesced")
        return cfg
    if K >= DEEP_K and tiles(M, N, DEEP_K_CONFIG) * 2 <= num_sms:
        return deep_k_config(M, N, K, num_sms, out_size, wide=wave_tiles)
    for cfg in SMALL_CONFIGS:
        if tiles(M, N, cfg) <= num_sms:
            return cfg
    return DEFAULT_CONFIG


def _stores_bound(K: int, cfg: GemmConfig, wide_inputs: bool) -> bool:
    """Whether C's stores are the work (K <= SHALLOW_K) on what the coalesced epilogue was timed to win there:
    128x256 tiles, 16-bit inputs (`wide_inputs`)."""
    return K <= SHALLOW_K and wide_inputs and (cfg.BLOCK_M, cfg.BLOCK_N) == (DEFAULT_CONFIG.BLOCK_M,
                                                                              DEFAULT_CONFIG.BLOCK_N)


def _halved_rows(swapped: GemmConfig) -> GemmConfig:
    """The swapped pick with A's row tile halved (at least 8 rows), as many stages as fit: where its K would be
    split in two, as many CTAs each take the whole K of half the rows, sharing B's tile through L2, and no
    partial sums meet (64 / 128 x 4096 x 4096 and 64x4096x14336, both B layouts, on an H100: +0.7 to +4.0% over
    the K halves; docs/PERF.md, forty-ninth session)."""
    bm = max(8, swapped.BLOCK_M // 2)
    return swapped.replace(BLOCK_M=bm, STAGES=_swapped_stages(bm, swapped.BLOCK_N, swapped.BLOCK_K))


def _deeper_fill(M: int, N: int, num_sms: int) -> bool:
    """Whether DECODE_ROWS's 128-row B tiles that replace fp8's swapped 64x256 ones (33 to 64 rows) fill their second
    round enough: DEFAULT_CONFIG's 128x256 tiles (as many as the swapped 64x256 ones there) make 0.8 of a wave or
    more (N 28672 gained 5-6%; with bf16 at N 26000, 128-row tiles leaving 60 of 132 SMs idle in the second round
    lost 7% at 100 rows)."""
    return tiles(M, N, DEFAULT_CONFIG) * 5 >= num_sms * 4


def _rows_fit(M: int, N: int, swapped: GemmConfig, num_sms: int) -> bool:
    """Whether DECODE_ROWS takes the place of the `swapped` pick: 32 to 64 rows, its tiles 0.65 to one wave (what
    was timed: 86 to 128 tiles on 132 SMs), the swapped tiles 64 wide on either side (A's rows padded to 64, or
    64-row B tiles)."""
    t = tiles(M, N, DECODE_ROWS)
    return 32 <= M <= 64 and 64 in (swapped.BLOCK_M, swapped.BLOCK_N) and num_sms * 13 <= t * 20 and t <= num_sms


def one_wave_step(N: int, cfg: GemmConfig, num_sms: int) -> GemmConfig:
    """`cfg` (one row of tiles, fewer than the SMs) with overlapping tiles (N_STEP) that make one wave: the fewest
    columns a tile (a multiple of 16) at which they fit the SMs, where two tiles then share at most a quarter of
    BLOCK_N and make 0.9 of a wave or more (what was timed: 128 on 132 SMs). On an H100, same runs:
    DECODE_WIDE_DEEP so +0.4 / +0.8 / +1.0% at 128 / 96 x 14336 x 4096 and 128x12288x4096 with B [N, K], +0.3 /
    +0.5% at 128 x 14336 / 12288 x 4096 with B [K, N]; DECODE_ROWS +1.2% at 64x14336x4096 with B [N, K], +0.0% with
    B [K, N] (so taken for B [N, K] only); 128x256 tiles stepping 224 at N 28672 -0.3 / -0.4%, DECODE_WIDE at
    128x11008x4096 -0.1%: not taken (docs/PERF.md, fifty-first session)."""
    step = 16 * cdiv(cdiv(N, num_sms), 16)
    if step >= cfg.BLOCK_N or 4 * step < 3 * cfg.BLOCK_N or 10 * cdiv(N, step) < 9 * num_sms:
        return cfg
    return cfg.replace(N_STEP=step)


# fp8 from 65 to 128 rows where the swapped pick is 128x128 tiles with no K split (N about 14336 at K 4096): 64x128
# tiles unswapped, 128-deep k-steps over 4 stages, two CTAs an SM (block scales' decode form): per tensor on an H100
# +4.5 / +4.8% at 96 / 128 x 14336 x 4096; over other picks -15% at 128 x 4096 x 4096 (K split in a cluster), -4% at
# 128 x 8192 x 28672, +0.4% at 128 x 28672 x 4096 (docs/PERF.md, forty-fifth session)
FP8_RESIDENT = DEFAULT_CONFIG.replace(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, STAGES=4, CONSUMER_WGS=1, CTAS_PER_SM=2)


def _fp8_resident(M: int, N: int, K: int, swapped: GemmConfig, num_sms: int, out_size: int) -> bool:
    """Whether FP8_RESIDENT takes the place of fp8's `swapped` pick (its k-step already doubled): the measured
    conditions, a 16-bit C, and no K split on either side."""
    return (_SWAP_ALWAYS_M < M <= SMALL_M and out_size <= 2 and swapped.SWAP_AB and swapped.CLUSTER_K == 1
            and (swapped.BLOCK_M, swapped.BLOCK_N, swapped.BLOCK_K) == (128, 128, 128)
            and split_k(M, N, K, swapped, num_sms) == 1 and split_k(M, N, K, FP8_RESIDENT, num_sms) == 1)


def resolve_config(M: int, N: int, K: int, num_sms: int, out_size: int, pitch_aligned: bool = True,
                   config: GemmConfig | Mapping | None = None, in_size: int = 2, b_kmajor: bool = False) -> GemmConfig:
    """The config `launch` runs for a problem: `config` if it is a GemmConfig, else `choose_config` with
    the dict's overrides on top (of the unswapped pick unless the dict sets SWAP_AB), the pick first stripped
    of what a switch the dict turns on does not run with and the dict leaves open (`_base_for`); its "auto"
    values resolved for an output of `out_size`-byte elements. For 1-byte (fp8) inputs choose_config's k-step
    holds twice the elements: the same bytes per stage, and no few-wave or deep-K 128x256 tiles (`wave_tiles`:
    measured for 16-bit inputs only), and from 65 to 128 rows FP8_RESIDENT where `_fp8_resident` says; B [N, K]
    (`b_kmajor`, and always for fp8) reaches choose_config's k-step depth rules. A dict that leaves STAGES open gets
    as many as fit where the pick's would not beside its tiles (`_stages_that_fit`)."""
    if not isinstance(config, GemmConfig):
        # a dict of overrides that does not ask for SWAP_AB overrides the ordinary kernel's pick: its fields
        # (SPLIT_WGS, CONSUMER_WGS, a BLOCK_N for 128-row tiles) mean that family
        swap = not config or bool(config.get("SWAP_AB"))
        base = choose_config(M, N, K, num_sms, pitch_aligned, out_size, swap_ab=swap,
                             wave_tiles=in_size == 2, pairs=not config, b_kmajor=b_kmajor or in_size == 1,
                             in_size=in_size)
        if in_size == 1:
            base = base.replace(BLOCK_K=base.BLOCK_K * 2)
            if not config and _fp8_resident(M, N, K, base, num_sms, out_size):
                base = FP8_RESIDENT
        given = config or {}
        config = to_config(given, _base_for(given, base))
        if "STAGES" not in given:
            return _stages_that_fit(config.resolve(out_size), in_size, out_size)
    return config.resolve(out_size)


def _stages_that_fit(cfg: GemmConfig, in_size: int, out_size: int) -> GemmConfig:
    """`cfg` with as many stages as fit `_SMEM_BUDGET` where the caller's overrides (tiles, a k-step) left the
    pick's stages past what a block may use for certain (the rings alone, with the output's staging tile at its
    smallest); any config that could compile keeps its stages."""
    stage = (cfg.BLOCK_M + cfg.BLOCK_N) * cfg.BLOCK_K * in_size
    halves = {"tma": 1, "coalesced": 1, "tma2": 2}.get(cfg.EPILOGUE, 0)    # staging tiles of half the rows
    staging = halves * cfg.BLOCK_M * cfg.BLOCK_N * out_size // 2
    limit = SM90.smem_per_block_max // cfg.CTAS_PER_SM
    if cfg.STAGES * stage + staging <= limit:
        return cfg
    return cfg.replace(STAGES=stages_beside(stage, staging, cfg.CTAS_PER_SM))


def stages_beside(stage: int, staging: int, ctas_per_sm: int = 1) -> int:
    """How many ring stages of `stage` bytes fit `_SMEM_BUDGET` (a block's share of it) beside `staging` bytes of
    output staging; at least two."""
    return max(2, (_SMEM_BUDGET // ctas_per_sm - staging) // stage)


def _base_for(given: Mapping, base: GemmConfig) -> GemmConfig:
    """`base` (a pick) without what the switch `given` turns on does not run with, where `given` leaves those
    fields open: SWAP_AB on an ordinary pick (no cluster along M, one or two cooperative warpgroups, C from
    registers). So `launch(a, b, c, {"SWAP_AB": True})` runs at any shape; a field the caller sets that the
    switch refuses is still refused, by name. Likewise N_STEP (overlapping tiles: no cluster, no K slices meeting
    in the kernel, C stored by address)."""
    drop: dict = {}
    if given.get("SWAP_AB") and not base.SWAP_AB:
        drop.update(CLUSTER_M=1, SPLIT_WGS=False, SPLITK_FIXUP=False, MMA_TURNS=False,
                    CONSUMER_WGS=min(base.CONSUMER_WGS, 2), EPILOGUE=AUTO)
    if given.get("N_STEP"):     # overlapping tiles: no cluster, no K slices meeting in the kernel, C by address
        drop.update({k: takes[0] for k, takes in OVERLAP_TAKES.items()})
    drop = {k: v for k, v in drop.items() if k not in given}
    return base.replace(**drop) if drop else base
