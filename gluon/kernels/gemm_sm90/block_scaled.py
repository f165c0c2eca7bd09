"""Which tiles fp8 GEMMs with DeepGEMM's block scales take (`launch` with 1 x 128 A and 128 x 128 B scales):
128 columns a tile (one B scale block), 128-deep k-steps, and where they run faster than 128 x 128 tiles, 192 rows
on three warpgroups (`block_scaled_tall`), 128 x 256 tiles in two halves (`block_scaled_wide`) or, at decode, 64 x
128 tiles on one warpgroup (`block_scaled_decode`). The rules are measured ones (docs/PERF.md); the k-loops they pick
between are in fp8_scales.py.
"""
from __future__ import annotations

from .config import DEFAULT_CONFIG, GemmConfig
from .geometry import slot_use, split_k, tiles
from .picks import WAVE_MARGIN, choose_config, fills_a_wave, stages_beside

# fp8 with 128 x 128 block scales (one B block per tile, so 128 columns): 192-row tiles on three warpgroups run
# a round about 6% faster than 128x128 on two (8192^3 +5.3%, 8192x28672x4096 +6.4%; at 4096^3 their part-empty
# last round loses 2.4%: docs/PERF.md, twenty-sixth session); taken where that beats the slot use by WAVE_MARGIN
BLOCK_SCALED_TALL = dict(BLOCK_M=192, CONSUMER_WGS=3, CONSUMER_REGS=152, SPLIT_WGS=True)
BLOCK_SCALED_TALL_SPEED = 1.06
# ... and 128 x 256 tiles, each warpgroup's 64 rows as two 128-column halves (A read into registers once for both,
# `fp8_scales.block_scaled_halves`): about 8% faster a round than 128x128 from K 512 and M 128 (5-18% where the
# rounds fill alike), and faster than 192x128 from K 4096 (1-6%; 4-25% slower at K 1024-3072): docs/PERF.md,
# forty-third session
BLOCK_SCALED_WIDE = dict(BLOCK_M=128, BLOCK_N=256, CONSUMER_WGS=2, SPLIT_WGS=True, CONSUMER_REGS=240,
                         PRODUCER_REGS=24)
BLOCK_SCALED_WIDE_SPEED = 1.08
BLOCK_SCALED_WIDE_K = 4096          # ... over 192x128
BLOCK_SCALED_WIDE_MIN_K = 512       # ... over 128x128: the least K timed
BLOCK_SCALED_WIDE_MIN_M = 128       # ... and the fewest rows (128x28672x4096 +5%, where the decode tiles below run
                                    # now; at 64 rows 64x256 halves on one warpgroup against 64x128 tiles: +1% at 1 x
                                    # 28672 x 4096, -5% / -17% at 64 x 28672 / 14336 x 4096, s44a)
# ... and at decode (up to 64 rows of A), 64 x 128 tiles on one warpgroup over six stages where the pick's tiles
# have 128 rows (half of them past M; 2-34% faster at 15 shapes of N 8192 to 28672), or 64 columns whose K slices
# make no more units than these (N 4096 at K 14336: 4-5%; at K 4096 half as many units, 1-4% slower):
# docs/PERF.md, forty-fourth session
BLOCK_SCALED_ROWS = dict(BLOCK_M=64, BLOCK_N=128, CONSUMER_WGS=1, STAGES=6)
BLOCK_SCALED_ROWS_MAX_M = 64
# ... and from 65 to 128 rows the same tiles over four stages at two CTAs an SM, where the pick's tiles have 128 rows
# and these need no K split (2-7% faster at 80 / 96 / 128 x 14336 / 28672 x 4096; 4% slower at 128 x 8192 x 28672,
# split in two): docs/PERF.md, forty-fourth session
BLOCK_SCALED_RESIDENT = dict(BLOCK_M=64, BLOCK_N=128, CONSUMER_WGS=1, STAGES=4, CTAS_PER_SM=2)
BLOCK_SCALED_RESIDENT_MAX_M = 128
# ... and there BLOCK_SCALED_ROWS where the pick's tiles are 64 x 64 and these make as many units of K slices at
# least 28 k-steps deep (128 x 4096 x 14336: +6% at two CTAs an SM, +9% on one over six stages; at K 4096, slices of
# 16, 7-9% slower at 96 and 128 rows): docs/PERF.md, forty-fourth and forty-fifth sessions
BLOCK_SCALED_ROWS_MIN_STEPS = 28


def block_scaled_tall(M: int, N: int, num_sms: int) -> bool:
    """Whether block-scaled fp8 with 128-column tiles takes BLOCK_SCALED_TALL's 192 rows over 128 (problems of
    a wave of 128x256 tiles or more, where `choose_config` picks DEFAULT_CONFIG's family)."""
    square = DEFAULT_CONFIG.replace(BLOCK_N=128)
    tall = square.replace(**BLOCK_SCALED_TALL)
    return (fills_a_wave(M, N, num_sms) and
            slot_use(M, N, tall, num_sms) * BLOCK_SCALED_TALL_SPEED >= slot_use(M, N, square, num_sms) * WAVE_MARGIN)


def block_scaled_wide(M: int, N: int, K: int, num_sms: int) -> bool:
    """Whether block-scaled fp8 takes BLOCK_SCALED_WIDE's 128x256 tiles: over `block_scaled_tall`'s 192 rows from
    BLOCK_SCALED_WIDE_K with two rounds of them or more; over 128x128 tiles from BLOCK_SCALED_WIDE_MIN_K and
    _MIN_M where their slot use times their speed beats 128x128's by WAVE_MARGIN (half as many tiles: below a
    round of them, or with a part-empty last round, the 128x128 tiles keep more SMs busy)."""
    wide = DEFAULT_CONFIG.replace(BLOCK_M=128, BLOCK_N=256)
    if block_scaled_tall(M, N, num_sms):
        return K >= BLOCK_SCALED_WIDE_K and tiles(M, N, wide) >= 2 * num_sms
    square = DEFAULT_CONFIG.replace(BLOCK_M=128, BLOCK_N=128)
    return (K >= BLOCK_SCALED_WIDE_MIN_K and M >= BLOCK_SCALED_WIDE_MIN_M and
            slot_use(M, N, wide, num_sms) * BLOCK_SCALED_WIDE_SPEED >= slot_use(M, N, square, num_sms) * WAVE_MARGIN)


def block_scaled_decode(M: int, N: int, K: int, num_sms: int, pick: GemmConfig) -> dict | None:
    """The decode tiles block-scaled fp8 takes over `pick`'s (choose_config's unswapped pick, its columns cut to
    128), or None: up to BLOCK_SCALED_ROWS_MAX_M rows of A, BLOCK_SCALED_ROWS where the pick's tiles have more rows
    than 64 or its units (tiles times K slices) are no more than theirs; up to BLOCK_SCALED_RESIDENT_MAX_M,
    BLOCK_SCALED_RESIDENT where the pick's tiles have 128 rows and these need no K split, and BLOCK_SCALED_ROWS
    where its tiles have 64 rows, no more units than these, and these' K slices are BLOCK_SCALED_ROWS_MIN_STEPS
    deep or more."""
    if M > BLOCK_SCALED_RESIDENT_MAX_M:
        return None
    square = pick.replace(BLOCK_N=min(pick.BLOCK_N, 128), BLOCK_K=128, SWAP_AB=False)
    rows = DEFAULT_CONFIG.replace(BLOCK_K=128, **BLOCK_SCALED_ROWS)
    slices = split_k(M, N, K, rows, num_sms)
    as_many = tiles(M, N, rows) * slices >= tiles(M, N, square) * split_k(M, N, K, square, num_sms)
    if M <= BLOCK_SCALED_ROWS_MAX_M:
        return BLOCK_SCALED_ROWS if square.BLOCK_M > 64 or as_many else None
    resident = DEFAULT_CONFIG.replace(BLOCK_K=128, **BLOCK_SCALED_RESIDENT)
    if square.BLOCK_M == 128 and split_k(M, N, K, resident, num_sms) == 1:
        return BLOCK_SCALED_RESIDENT
    if square.BLOCK_M == 64 and as_many and -(-K // 128) // slices >= BLOCK_SCALED_ROWS_MIN_STEPS:
        return BLOCK_SCALED_ROWS
    return None


def block_scaled_overrides(M: int, N: int, K: int, sms: int, out_size: int, pitch_aligned: bool, config) -> dict:
    """The caller's overrides (a dict or None) with what block scales need where the caller left it open: one
    128 x 128 B block per tile (BLOCK_N 128, or the pick's if below), a 128-deep k-step, no SWAP_AB, 128 x 256
    tiles in two halves where `block_scaled_wide` says, 64 x 128 tiles on one warpgroup where `block_scaled_decode`
    says, else 192 rows on three warpgroups where `block_scaled_tall` says (each only where the caller sets none of
    the tile's fields), and a
    warpgroup per 64 rows where one would hold more than 64 accumulator values a thread (the k-step's product
    sits beside the sum: the deep-K pick's 128x128 tile on one warpgroup spilled 384 bytes before the rows could
    run in parts), or per 128 rows from 256 rows up (more than three warpgroups do not fit the registers; each
    takes its 128 rows in two 64-row parts, `fp8_scales.block_scaled_two_parts`, as one does wherever the caller
    sets CONSUMER_WGS so). A caller's BLOCK_N 256 runs a warpgroup's 64 rows as two 128-column halves
    (`fp8_scales.block_scaled_halves`): each warpgroup its own role, with the registers the halves need."""
    given = dict(config or {})
    pick = choose_config(M, N, K, sms, pitch_aligned, out_size, swap_ab=False, wave_tiles=False)
    given.setdefault("SWAP_AB", False)
    tile_fields = ("BLOCK_M", "BLOCK_N", "CONSUMER_WGS", "CONSUMER_REGS", "SPLIT_WGS", "PRODUCER_REGS")
    # switches of the 128-column k-loops (the halves refuse the first two and run SCALES_AHEAD their own way)
    narrow_only = ("MMA_TURNS", "PIPELINED_PROMOTION", "SCALES_AHEAD")
    # the measured picks' conditions: a bf16 / fp16 C, aligned rows, the tile and the k-loop left to the launch
    measured = (out_size == 2 and pitch_aligned and not any(k in given for k in tile_fields)
                and not any(given.get(k) for k in narrow_only) and given.get("EPILOGUE") not in ("tma2", "ring"))
    decode = block_scaled_decode(M, N, K, sms, pick) if measured else None
    if decode is not None:
        given.update({k: v for k, v in decode.items() if k not in given})     # the caller's STAGES stay
    elif measured and pick.BLOCK_N >= 128 and block_scaled_wide(M, N, K, sms):
        given.update(BLOCK_SCALED_WIDE)
    bn = given.setdefault("BLOCK_N", min(pick.BLOCK_N, 128))
    given.setdefault("BLOCK_K", 128)
    tall_fields = ("BLOCK_M", "CONSUMER_WGS", "CONSUMER_REGS", "SPLIT_WGS")
    if (bn == 128 and out_size == 2 and pitch_aligned and not any(k in given for k in tall_fields)
            and block_scaled_tall(M, N, sms)):
        given.update(BLOCK_SCALED_TALL)
    bm, wgs = given.get("BLOCK_M", pick.BLOCK_M), given.get("CONSUMER_WGS", pick.CONSUMER_WGS)
    if bn == 256:       # two 128-column halves a warpgroup of 64 rows, each its own role, with 240 registers
        for field, value in (("BLOCK_M", 128), ("SPLIT_WGS", True), ("PRODUCER_REGS", 24)):
            given.setdefault(field, value)
        if given["SPLIT_WGS"]:
            given.setdefault("CONSUMER_REGS", 240)
        if out_size > 2:    # an fp32 C from registers: staged, its tiles pass the shared memory or spill
            given.setdefault("EPILOGUE", "direct")
            if given["EPILOGUE"] != "direct" and "STAGES" not in given:
                given["STAGES"] = halves_stages(given.get("BLOCK_M", 128), given.get("BLOCK_K", 128), out_size)
        bm = given["BLOCK_M"]
        if "CONSUMER_WGS" not in given and bm % 64 == 0:
            given["CONSUMER_WGS"] = bm // 64
    if "CONSUMER_WGS" not in given and bm * bn > 64 * 128 * wgs and bm % 64 == 0:
        given["CONSUMER_WGS"] = bm // 128 if bm >= 256 and bm % 128 == 0 else bm // 64
    return given


def halves_stages(block_m: int, block_k: int, out_size: int) -> int:
    """The ring's stages beside the halves' staged C: each role stages its 64 x 256 outputs (two 64 x 128 tiles),
    the whole tile where `_stages_that_fit` counts half of it; an fp32 C so leaves room for two 128 x 256 stages
    of fp8, not the pick's three."""
    return stages_beside((block_m + 256) * block_k, block_m * 256 * out_size)
