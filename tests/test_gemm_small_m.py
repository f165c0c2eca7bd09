"""The SM90 GEMM's small-M picks and forms, without a GPU: SWAP_AB (A's rows on WGMMA's N), the decode tiles
`choose_config` takes by problem size, the split-K fixup, and their machine code."""
import pytest

from gluon import DType
from gluon.backend.machine_code import sass_instructions
from gluon.ir import GluonError
from gluon.jit import run_passes
from gluon.kernels.gemm_sm90 import (DEFAULT_CONFIG, choose_config, gemm_sm90, num_warps, resolve_config, split_k,
                                     stand_ins)


def _cfg(**kw):
    """DEFAULT_CONFIG with `kw` on top, its "auto" values resolved as launch does for a 2-byte output."""
    return DEFAULT_CONFIG.replace(**kw).resolve(2)


@pytest.mark.parametrize("M,N,K,want", [
    (1, 4096, 4096, (8, 64, 128, 12, 2)),       # 64 tiles: K split in 2 for one wave of 128 units
    (16, 28672, 4096, (16, 256, 64, 6, 1)),     # 112 tiles of 256 rows of B: one wave, no split
    (64, 14336, 4096, (64, 128, 128, 4, 1)),
    (33, 8192, 28672, (64, 64, 128, 6, 1)),     # 128 tiles
])
def test_small_m_config_swaps_a_and_b(M, N, K, want):
    cfg = choose_config(M, N, K, 132, pairs=False)      # the swapped family (DECODE_ROWS aside, as with overrides)
    assert cfg.SWAP_AB and cfg.CONSUMER_WGS == 1 and cfg.EPILOGUE == "direct"
    assert (cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K, cfg.STAGES, split_k(M, N, K, cfg, 132)) == want
    assert not choose_config(129, N, K, 132).SWAP_AB


@pytest.mark.parametrize("M,N,K,stages", [(1, 28672, 4096, 12), (16, 28672, 8192, 10), (32, 32768, 4096, 9),
                                          (8, 25600, 1000, 12)])
def test_k_major_b_decode_takes_128_deep_steps_where_256_rows_fit_only_64(M, N, K, stages):
    """B [N, K] up to 32 rows: the 256-row B tiles (64-deep k-steps of 16-bit elements, 128 of fp8: TMA reads 128
    bytes a row of B) give way to 64-row ones on k-steps twice as deep; B [K, N], 33 rows and more, and tiles that fit
    the deeper steps keep their picks."""
    from gluon.kernels.gemm_sm90.picks import DECODE_ROWS_WIDE
    nk = resolve_config(M, N, K, 132, 2, b_kmajor=True)
    assert (nk.SWAP_AB, nk.BLOCK_N, nk.BLOCK_K, nk.STAGES, nk.CLUSTER_K) == (True, 64, 128, stages, 1)
    assert (resolve_config(M, N, K, 132, 2).BLOCK_N, resolve_config(M, N, K, 132, 2).BLOCK_K) == (256, 64)
    fp8 = resolve_config(M, N, K, 132, 2, in_size=1)           # fp8: B [N, K] always, 256-deep (256 bytes)
    assert (fp8.SWAP_AB, fp8.BLOCK_N, fp8.BLOCK_K, fp8.STAGES) == (True, 64, 256, stages)
    assert resolve_config(48, N, K, 132, 2) == DECODE_ROWS_WIDE.resolve(2)     # B [K, N] at 33 to 64 rows
    for n in (14336, 57344, 4096):                  # 128-row tiles (128-deep) or 64-row ones already
        assert resolve_config(M, n, K, 132, 2, b_kmajor=True) == resolve_config(M, n, K, 132, 2)


def test_m_from_32_to_64_takes_unswapped_64x128_tiles_where_they_make_most_of_a_wave():
    from gluon.kernels.gemm_sm90.picks import DECODE_ROWS
    r = DECODE_ROWS
    assert (r.BLOCK_M, r.BLOCK_N, r.BLOCK_K, r.STAGES, r.SWAP_AB, r.PDL) == (64, 128, 128, 4, False, True)
    assert choose_config(32, 11008, 4096, 132) == DECODE_ROWS       # 86 tiles (the swapped pick: 172 of 64 rows of B)
    assert choose_config(32, 14336, 4096, 132).SWAP_AB              # the swapped pick's 112 of 128 rows of B stay
    for M in (33, 48, 64):
        assert choose_config(M, 11008, 4096, 132) == DECODE_ROWS    # 86 tiles
        assert choose_config(M, 16896, 4096, 132) == DECODE_ROWS    # 132
        assert choose_config(M, 16897, 4096, 132).SWAP_AB           # 133: over a wave
        assert choose_config(M, 10880, 4096, 132).SWAP_AB           # 85: under 0.65 of one
        assert choose_config(M, 14336, 4096, 132, pairs=False).SWAP_AB       # overrides: the swapped family
        assert choose_config(M, 14336, 4096, 132, out_size=4).SWAP_AB        # an fp32 output: not timed
    assert choose_config(31, 14336, 4096, 132).SWAP_AB and choose_config(16, 14336, 4096, 132).SWAP_AB
    assert resolve_config(64, 14336, 4096, 132, 2, True, None, in_size=1).SWAP_AB      # fp8: not timed


def test_m_from_33_to_64_takes_the_swapped_64x256_tiles_unswapped():
    from gluon.kernels.gemm_sm90.picks import DECODE_ROWS_WIDE
    w = DECODE_ROWS_WIDE
    assert (w.BLOCK_M, w.BLOCK_N, w.BLOCK_K, w.STAGES, w.SWAP_AB, w.PDL) == (64, 256, 64, 4, False, True)
    assert (w.CLUSTER_M, w.CLUSTER_K, w.CONSUMER_WGS) == (1, 1, 1)
    for M in (33, 48, 64):
        swapped = choose_config(M, 28672, 4096, 132, pairs=False)
        assert swapped.SWAP_AB and (swapped.BLOCK_M, swapped.BLOCK_N) == (64, 256)       # 112 tiles of 256 rows of B
        assert choose_config(M, 28672, 4096, 132) == DECODE_ROWS_WIDE
        assert choose_config(M, 33792, 4096, 132) == DECODE_ROWS_WIDE                  # 132 tiles
        assert choose_config(M, 33793, 4096, 132).SWAP_AB                               # 133: the swapped 64-row tiles
        assert choose_config(M, 25088, 4096, 132).SWAP_AB                               # 98: under 3/4 of a wave
        assert choose_config(M, 28672, 4096, 132, out_size=4).SWAP_AB                   # an fp32 output: not timed
    assert choose_config(32, 28672, 4096, 132).SWAP_AB                                  # 32x256 swapped tiles stay
    assert choose_config(96, 28672, 4096, 132) != DECODE_ROWS_WIDE
    wide = resolve_config(64, 28672, 4096, 132, 2, True, None)
    assert wide == DECODE_ROWS_WIDE.resolve(2)
    for b_kmajor in (False, True):                      # its shared memory and registers pass the compiler's checks
        run_passes(gemm_sm90.trace(*stand_ins(DType.bf16, DType.bf16), num_warps=num_warps(wide), CFG=wide,
                                   B_KMAJOR=b_kmajor))


def test_decode_k_halves_give_way_to_halved_rows_where_those_fill_the_wave():
    """Where the swapped pick would split K in two (CLUSTER_K=2) and A's row tile halved makes 3/4 of a wave or more
    with no split: that, with as many stages as fit (the same CTAs, each over all of K). 8 rows (no half tile),
    fewer tiles (the halves would split again), overrides, fp8 and an fp32 output keep the K halves."""
    from gluon.kernels.gemm_sm90.geometry import tiles
    for M, bm in ((16, 8), (32, 16), (33, 32), (64, 32), (96, 64), (128, 64)):
        for b_kmajor in (False, True):
            cfg = choose_config(M, 4096, 4096, 132, b_kmajor=b_kmajor)
            assert (cfg.SWAP_AB, cfg.BLOCK_M, cfg.BLOCK_N, cfg.CLUSTER_K, cfg.PDL) == (True, bm, 64, 1, True)
            assert tiles(M, 4096, cfg) == 128 and split_k(M, 4096, 4096, cfg, 132) == 1
            stage = (bm + 64) * cfg.BLOCK_K * 2
            assert stage * cfg.STAGES <= 216 * 1024 < stage * (cfg.STAGES + 1)
    assert choose_config(100, 4097, 2048, 132).BLOCK_M == 64                            # 130 tiles, K 2048
    assert choose_config(8, 4096, 4096, 132).CLUSTER_K == 2
    assert choose_config(64, 3072, 4096, 132).CLUSTER_K == 2                            # 96 tiles halved
    assert choose_config(64, 4096, 4096, 132, pairs=False).CLUSTER_K == 2               # overrides
    assert resolve_config(64, 4096, 4096, 132, 2, in_size=1).CLUSTER_K == 2             # fp8
    assert choose_config(64, 4096, 4096, 132, out_size=4).CLUSTER_K == 2                # fp32 out
    cfg = resolve_config(16, 4096, 4096, 132, 2, b_kmajor=True)
    run_passes(gemm_sm90.trace(*stand_ins(DType.bf16, DType.bf16), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=True))


def test_fp8_from_33_to_64_rows_takes_256_deep_steps_over_the_swapped_64x256_pick():
    """fp8 (B [N, K]) where the swapped pick would be 64x256 tiles on 128-deep k-steps (33 to 64 rows) and those make
    0.8 of a wave or more: DECODE_ROWS on 256-deep k-steps, which passes the compiler's checks. 16-bit inputs with B
    [N, K] keep B [K, N]'s picks (DECODE_ROWS_WIDE; 128x256 tiles from 65 to 128 rows: the deeper forms lost on the
    H200), fp8 above 64 rows the 128x256 tiles, and shapes either side their picks."""
    from gluon.kernels.gemm_sm90.picks import DECODE_ROWS, DECODE_ROWS_WIDE
    for M in (33, 48, 64):
        for N in (28672, 33792):                                                                # 132 B tiles
            assert resolve_config(M, N, 4096, 132, 2, in_size=1) == DECODE_ROWS.replace(BLOCK_K=256).resolve(2)
            assert choose_config(M, N, 4096, 132, b_kmajor=True) == choose_config(M, N, 4096, 132)
        assert choose_config(M, 28672, 4096, 132, b_kmajor=True) == DECODE_ROWS_WIDE
        assert resolve_config(M, 28672, 4096, 132, 2, in_size=1, config={"SWAP_AB": True}).BLOCK_N == 256  # overrides
        assert resolve_config(M, 25088, 4096, 132, 2, in_size=1).SWAP_AB                       # under 3/4 of a wave
        assert resolve_config(M, 26880, 4096, 132, 2, in_size=1).SWAP_AB                       # under 0.8
    for M in (65, 96, 128):
        for N in (26881, 28672, 30208):                 # 106 to 118 tiles of 128x256 (0.8 to 0.9 of a wave)
            assert choose_config(M, N, 4096, 132, b_kmajor=True) == DEFAULT_CONFIG == choose_config(M, N, 4096, 132)
            fp8 = resolve_config(M, N, 4096, 132, 2, in_size=1)
            assert (fp8.BLOCK_M, fp8.BLOCK_N, fp8.BLOCK_K, fp8.SWAP_AB) == (128, 256, 128, False)
    assert choose_config(32, 28672, 4096, 132, b_kmajor=True).SWAP_AB                           # the s47 rule's
    cfg = DECODE_ROWS.replace(BLOCK_K=256).resolve(2)
    run_passes(gemm_sm90.trace(*stand_ins(DType.f8e4m3, DType.bf16), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=True,
                               SCALE="tensor"))


def test_m_up_to_128_swaps_or_pairs_unless_the_tiles_fill_a_wave():
    from gluon.kernels.gemm_sm90.picks import DECODE_PAIRS, DECODE_WIDE, DECODE_WIDE_DEEP
    assert choose_config(128, 4096, 4096, 132).SWAP_AB               # two K slices: summed in the cluster
    assert choose_config(96, 14336, 4096, 132, pairs=False).SWAP_AB
    # no K split above 64 rows: 128x128 tiles where they make half a wave to one, 128-deep k-steps from 0.7 of one
    assert choose_config(128, 11008, 4096, 132) == DECODE_WIDE       # 86 tiles
    assert choose_config(128, 9216, 4096, 132) == DECODE_WIDE        # 72
    assert choose_config(128, 11776, 4096, 132) == DECODE_WIDE       # 92: under 0.7 of 132
    # ... in overlapping tiles where those make 0.9 of a wave or more (one_wave_step)
    assert choose_config(128, 11904, 4096, 132) == DECODE_WIDE_DEEP.replace(N_STEP=96)      # 93 -> 124 tiles
    assert choose_config(128, 12288, 4096, 132) == DECODE_WIDE_DEEP.replace(N_STEP=96)      # 96 -> 128 tiles
    assert choose_config(96, 14336, 4096, 132) == DECODE_WIDE_DEEP.replace(N_STEP=112)      # 112 -> 128
    assert choose_config(128, 13000, 4096, 132) == DECODE_WIDE_DEEP  # 102: 117 of 112 columns, under 0.9 of 132
    assert choose_config(128, 16896, 4096, 132) == DECODE_WIDE_DEEP  # 132
    for w in (DECODE_WIDE, DECODE_WIDE_DEEP):
        assert (w.BLOCK_M, w.BLOCK_N, w.CONSUMER_WGS, w.CLUSTER_M, w.CTAS_PER_SM) == (128, 128, 1, 1, 1)
    assert (DECODE_WIDE.BLOCK_K, DECODE_WIDE.STAGES) == (64, 6)
    assert (DECODE_WIDE_DEEP.BLOCK_K, DECODE_WIDE_DEEP.STAGES) == (128, 3)
    # ... else in 2-CTA pairs sharing B
    assert choose_config(128, 16897, 4096, 132) == DECODE_PAIRS      # 133 tiles: over a wave
    assert choose_config(128, 8448, 4096, 132) == DECODE_PAIRS       # 66: half a wave
    assert choose_config(96, 18944, 3584, 132) == DECODE_PAIRS       # 296 tiles: more than two an SM
    assert choose_config(128, 8192, 28672, 132) == DECODE_PAIRS      # 128 tiles: fewer than the SMs
    assert choose_config(64, 14336, 4096, 132) not in (DECODE_WIDE, DECODE_WIDE_DEEP)  # not at 64 (0.94 vs 0.99x)
    assert choose_config(96, 14336, 4096, 132, out_size=4).SWAP_AB   # an fp32 output: not timed
    assert not choose_config(96, 28672, 4096, 132).SWAP_AB           # 112 tiles of 128x256 already
    cfg = choose_config(128, 14336, 4096, 132, pairs=False)
    assert cfg.BLOCK_M * cfg.BLOCK_N <= 128 * 128                    # at most 128 accumulator registers
    # fp8: its own form there (FP8_RESIDENT, tests/test_gemm_fp8_picks.py), not bf16's
    assert resolve_config(96, 14336, 4096, 132, 2, True, None, in_size=1).CTAS_PER_SM == 2


def test_balanced_splits_even_out_the_last_wave():
    from gluon.kernels.gemm_sm90.geometry import balanced_splits
    assert balanced_splits(64, 32, 132) == 2          # 128 of 132 busy
    assert balanced_splits(448, 64, 132) == 5         # 2240 units = 16.97 waves
    assert balanced_splits(448, 8, 132) == 1          # slices of 8 k-steps at least
    assert balanced_splits(130, 64, 132) == 1


@pytest.mark.parametrize("M,km", [(1, False), (16, True), (64, False)])
def test_swap_ab_sass_has_narrow_hgmma_and_no_spills(M, km):
    cfg = choose_config(M, 4096, 4096, 132).resolve(2)
    ck = gemm_sm90.compile(*stand_ins(DType.bf16, splits=2), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=km)
    ops = sass_instructions(ck.sass())
    assert ops[f"HGMMA.64x{cfg.BLOCK_M}x16.F32.BF16"] >= 1     # A's rows on WGMMA's N
    assert ck.spills == 0 and ck.shared_bytes <= 227 * 1024


def test_splitk_fixup_sass_fences_once_around_relaxed_atomics():
    cfg = _cfg(BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1, STAGES=8, SPLITK_FIXUP=True)
    assert cfg.EPILOGUE == "direct"                   # "auto" resolves to it: the fixup stores from registers
    ck = gemm_sm90.compile(*stand_ins(DType.bf16, splits=2), num_warps=num_warps(cfg), CFG=cfg)
    ops = sass_instructions(ck.sass())
    assert ops["ATOMG.E.ADD.STRONG.GPU"] == 32        # one relaxed increment per element a thread holds
    assert ops["MEMBAR.ALL.GPU"] <= 4                 # the two fences, not one per atomic
    assert ck.spills == 0


@pytest.mark.parametrize("kw,match", [
    (dict(SWAP_AB=True, CONSUMER_WGS=3, BLOCK_N=256), "one or two cooperative consumer warpgroups"),
    (dict(SWAP_AB=True, CONSUMER_WGS=2, SPLIT_WGS=True), "one or two cooperative consumer warpgroups"),
    (dict(SWAP_AB=True, CONSUMER_WGS=2, BLOCK_M=64, BLOCK_N=64), "a multiple of 128 .64 rows a warpgroup."),
    (dict(SWAP_AB=True, CONSUMER_WGS=1, BLOCK_M=40), "a power of two from 8 to 256, not 40"),
    (dict(SWAP_AB=True, CONSUMER_WGS=1, BLOCK_M=16, BLOCK_N=32), "a multiple of 64 .64 rows a warpgroup., not 32"),
    (dict(BLOCK_N=96), "BLOCK_N=96: takes a power of two"),
    (dict(SWAP_AB=True, CONSUMER_WGS=1, BLOCK_M=16, EPILOGUE="tma"), "EPILOGUE='direct'"),
    (dict(SWAP_AB=True, CONSUMER_WGS=1, BLOCK_M=16, SPLITK_FIXUP=True), "SPLITK_FIXUP=False"),
    (dict(SPLITK_FIXUP=True, EPILOGUE="coalesced"), "stores C from registers"),
])
def test_swap_and_fixup_rules_name_the_field(kw, match):
    with pytest.raises(GluonError, match=match):
        DEFAULT_CONFIG.replace(**kw)
