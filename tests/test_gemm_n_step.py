"""Overlapping output tiles (GemmConfig.N_STEP): each tile loads and multiplies BLOCK_N columns but writes only
the first N_STEP, the next tile starting there, so a tile reaches widths that are not powers of two. The config's
rules, the geometry the host derives from it, and launches run by the CPU interpreter on poisoned outputs."""
import pytest

torch = pytest.importorskip("torch")

from gluon.dtypes import DType  # noqa: E402
from gluon.ir import GluonError  # noqa: E402
from gluon.kernels.gemm_sm90 import host, launch  # noqa: E402
from gluon.kernels.gemm_sm90.config import DEFAULT_CONFIG  # noqa: E402
from gluon.kernels.gemm_sm90.geometry import grid, num_warps, slot_use, tiles, units  # noqa: E402
from gluon.kernels.gemm_sm90.kernel import gemm_sm90  # noqa: E402

NAN = float("nan")


def test_n_step_takes_multiples_of_16_up_to_block_n():
    assert DEFAULT_CONFIG.N_STEP == 0 and DEFAULT_CONFIG.step_n == DEFAULT_CONFIG.BLOCK_N
    assert DEFAULT_CONFIG.replace(N_STEP=224, EPILOGUE="direct").step_n == 224
    assert DEFAULT_CONFIG.replace(N_STEP=256).step_n == 256            # side by side: any epilogue
    numpy = pytest.importorskip("numpy")
    from_table = DEFAULT_CONFIG.replace(N_STEP=numpy.int64(224), EPILOGUE="direct").N_STEP   # a results table's
    assert from_table == 224 and type(from_table) is int
    for bad in (-16, 8, 100, 272, 1.5, True):
        with pytest.raises(GluonError, match=r"N_STEP=.*multiple of 16 up to BLOCK_N=256"):
            DEFAULT_CONFIG.replace(N_STEP=bad)


@pytest.mark.parametrize("kw", [dict(EPILOGUE="tma"), dict(EPILOGUE="tma2"), dict(EPILOGUE="ring"),
                                dict(SPLITK_FIXUP=True, EPILOGUE="direct"), dict(CLUSTER_M=2, EPILOGUE="direct"),
                                dict(CLUSTER_K=2, EPILOGUE="direct", BLOCK_N=128, CONSUMER_WGS=1),
                                dict(SPLITK_GRID=2, EPILOGUE="direct", BLOCK_N=128, CONSUMER_WGS=1)])
def test_overlapping_tiles_store_their_own_columns_and_meet_no_other_cta(kw):
    with pytest.raises(GluonError, match=r"N_STEP=112 .*overlapping tiles store only their own columns"):
        DEFAULT_CONFIG.replace(N_STEP=112, **kw)


def test_auto_epilogue_and_description_with_n_step():
    small = DEFAULT_CONFIG.replace(BLOCK_N=128, CONSUMER_WGS=1, N_STEP=112)
    assert small.resolve(2).EPILOGUE == "coalesced"                  # the staged tile, stored by address
    assert DEFAULT_CONFIG.replace(N_STEP=224).resolve(4).EPILOGUE == "direct"
    assert DEFAULT_CONFIG.replace(BLOCK_N=128, CONSUMER_WGS=1).resolve(2).EPILOGUE == "tma"
    assert "N_STEP=112" in small.describe() and "N_STEP" not in DEFAULT_CONFIG.describe()


def test_the_geometry_counts_tiles_by_their_step():
    cfg = DEFAULT_CONFIG.replace(N_STEP=224)
    assert tiles(128, 28672, cfg) == 128 and tiles(128, 28672, DEFAULT_CONFIG) == 112
    assert units(128, 28673, cfg, 2) == 129 * 2
    assert grid(128, 28672, cfg, 132) == (128,)
    assert slot_use(128, 28672, cfg, 132) == pytest.approx(128 / 132)


CASES = [   # (M, N, K, config, b_kmajor, splits)
    (70, 200, 96, dict(BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1, N_STEP=48, EPILOGUE="direct"), False, 1),
    (70, 200, 96, dict(BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1, N_STEP=48, EPILOGUE="coalesced"), True, 1),
    (130, 250, 72, dict(BLOCK_M=128, BLOCK_N=128, CONSUMER_WGS=2, N_STEP=112), True, 1),   # "auto": coalesced
    (9, 300, 200, dict(BLOCK_M=16, BLOCK_N=64, CONSUMER_WGS=1, SWAP_AB=True, N_STEP=32), True, 1),
    (9, 300, 200, dict(BLOCK_M=16, BLOCK_N=128, CONSUMER_WGS=2, SWAP_AB=True, N_STEP=80), False, 2),
    (70, 200, 256, dict(BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1, N_STEP=16, EPILOGUE="direct"), False, 2),
]


@pytest.mark.parametrize("M,N,K,config,b_kmajor,splits", CASES)
def test_overlapping_tiles_write_every_column_once_right(interpret_env, monkeypatch, M, N, K, config, b_kmajor,
                                                         splits):
    """Poisoned C right against fp64 in every element (edges in both dimensions, N off the step), with a grid of
    three programs walking several tiles each, swapped and not, both B layouts, K split (the second pass sums
    what the overlapping tiles wrote: each element once)."""
    monkeypatch.setattr(host, "device_sms", lambda d: 3)
    torch.manual_seed(M + N + K)
    a = torch.randn(M, K).half()
    b = torch.randn(N, K).half() if b_kmajor else torch.randn(K, N).half()
    c = torch.full((M, N), NAN).half()
    launch(a, b, c, config, b_kmajor=b_kmajor, splits=splits)
    ref = a.double() @ (b.double().T if b_kmajor else b.double())
    assert not torch.isnan(c).any()
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=2e-2 * ref.abs().max().item() / 16)


def test_fp8_block_scales_refuse_overlapping_tiles(interpret_env):
    a = torch.randn(64, 256).to(torch.float8_e4m3fn)
    b = torch.randn(256, 256).to(torch.float8_e4m3fn)
    c = torch.empty(64, 256, dtype=torch.bfloat16)
    sa, sb = torch.ones(64, 2), torch.ones(2, 2)
    with pytest.raises(GluonError, match=r"N_STEP=112 \(overlapping tiles\) is not written for fp8 block scales"):
        launch(a, b, c, dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, CONSUMER_WGS=1, N_STEP=112), b_kmajor=True,
               scale_a=sa, scale_b=sb)


@pytest.mark.parametrize("kw,b_kmajor", [
    (dict(BLOCK_N=128, STAGES=6, CONSUMER_WGS=1, PDL=True, N_STEP=112), True),
    (dict(BLOCK_N=256, CONSUMER_WGS=2, PDL=True, N_STEP=224), True),
    (dict(BLOCK_M=16, BLOCK_N=256, STAGES=6, CONSUMER_WGS=1, SWAP_AB=True, PDL=True, N_STEP=224), False),
])
def test_overlapping_decode_tiles_compile_without_spills_and_store_16_bytes(kw, b_kmajor):
    """The decode forms: no spills; the coalesced epilogue's stores stay 16 bytes wide (the step keeps a tile's
    first column and the mask's end 16-element aligned)."""
    cfg = DEFAULT_CONFIG.replace(**kw).resolve(2)
    ck = gemm_sm90.compile(*host.stand_ins(DType.bf16), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=b_kmajor,
                           N_MULTIPLE_16=True, arch="sm90")
    assert ck.spills == 0
    if cfg.EPILOGUE == "coalesced":
        assert ck.asm["ptx"].count("st.global.v4.b32") >= 16


def test_a_dict_asking_for_n_step_drops_what_overlapping_tiles_do_not_run_with():
    """The pick under a dict with N_STEP loses its cluster and K slices meeting in the kernel where the dict leaves
    them open (5x3000x4096's swapped pick splits K in a cluster); a field the dict sets that N_STEP refuses is
    refused by name."""
    from gluon.kernels.gemm_sm90.picks import resolve_config
    swapped = dict(SWAP_AB=True, BLOCK_N=256, BLOCK_K=64, STAGES=6)
    assert resolve_config(5, 3000, 4096, 132, 2, b_kmajor=True, config=swapped).CLUSTER_K > 1
    cfg = resolve_config(5, 3000, 4096, 132, 2, b_kmajor=True, config=dict(swapped, N_STEP=160))
    assert (cfg.N_STEP, cfg.CLUSTER_K, cfg.EPILOGUE) == (160, 1, "direct")
    with pytest.raises(GluonError, match=r"got CLUSTER_K=2"):
        resolve_config(5, 3000, 4096, 132, 2, b_kmajor=True, config=dict(swapped, N_STEP=160, CLUSTER_K=2))


def test_one_wave_step_overlaps_the_decode_picks_only_where_timed():
    """DECODE_WIDE_DEEP (both B layouts) and DECODE_ROWS (B [N, K]) in tiles of the fewest 16-column multiple that
    fits the SMs, where two tiles share at most a quarter of BLOCK_N and they make 0.9 of a wave or more; the other
    decode picks (256-wide tiles, DECODE_WIDE) and DECODE_ROWS with B [K, N] as they were."""
    from gluon.kernels.gemm_sm90.picks import DECODE_ROWS, DECODE_WIDE, choose_config, one_wave_step
    assert one_wave_step(14336, DECODE_ROWS, 132).N_STEP == 112
    assert one_wave_step(12288, DECODE_ROWS, 132).N_STEP == 96
    assert one_wave_step(16896, DECODE_ROWS, 132).N_STEP == 0           # 132 tiles already
    assert one_wave_step(9000, DECODE_ROWS, 132).N_STEP == 0            # 80 columns: past a quarter of 128
    assert one_wave_step(11008, DECODE_ROWS, 132).N_STEP == 0           # 115 of 96 columns: under 0.9 of a wave
    assert choose_config(64, 14336, 4096, 132, b_kmajor=True) == DECODE_ROWS.replace(N_STEP=112)
    assert choose_config(64, 14336, 4096, 132) == DECODE_ROWS
    assert choose_config(128, 11008, 4096, 132, b_kmajor=True) == DECODE_WIDE
    assert choose_config(128, 28672, 4096, 132, b_kmajor=True).N_STEP == 0
    assert choose_config(128, 14336, 4096, 132, pairs=False).N_STEP == 0             # a caller's overrides
    assert choose_config(64, 14336, 4096, 132, b_kmajor=True, in_size=1).N_STEP == 0  # fp8: not timed
