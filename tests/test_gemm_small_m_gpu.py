"""On the GPU: the GEMM at decode-like shapes (small M), at few tiles over a deep K, and split-K summed in the
kernel (SPLITK_FIXUP)."""
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, launch  # noqa: E402
from gluon.kernels.gemm_sm90.picks import (DECODE_PAIRS, DECODE_ROWS, DECODE_ROWS_WIDE, DECODE_WIDE, DECODE_WIDE_DEEP,
                                           choose_config, one_wave_step, resolve_config)
from gluon.kernels.gemm_sm90 import host as gemm_host  # noqa: E402

FIXUP = DEFAULT_CONFIG.replace(BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1, STAGES=8, SPLITK_FIXUP=True)


def _operands(M, N, K, dtype, b_kmajor=False, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", dtype=torch.float32, generator=g).to(dtype)
    b = torch.randn(*((N, K) if b_kmajor else (K, N)), device="cuda", dtype=torch.float32, generator=g).to(dtype)
    return a, b


def _rel_err(c, a, b, b_kmajor):
    ref = a.double() @ (b.double().T if b_kmajor else b.double())
    return ((c.double() - ref).norm() / ref.norm()).item()


def replays_match_fp64(call, a, b, c, b_kmajor, fresh) -> None:
    """`call()` (a launch on a, b, c) captured in a CUDA graph on a side stream (its plan made there first, outside
    the capture), then replayed on new values copied into a and b (`fresh(seed)`): the poisoned C within 1e-2 of
    fp64 each time."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        call()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            call()
    for seed in (7, 8):
        a2, b2 = fresh(seed)
        a.copy_(a2)
        b.copy_(b2)
        c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert not torch.isnan(c).any() and _rel_err(c, a, b, b_kmajor) < 1e-2


def _agree_bit_for_bit(M, N, K, dtype, b_kmajor, runs):
    """Each (config, splits) of `runs` launched on poisoned outputs, on fresh inputs twice: the first within 1e-2
    of fp64 with every element written, and every other bit-identical to it."""
    for seed in range(2):
        a, b = _operands(M, N, K, dtype, b_kmajor, seed)
        outs = []
        for cfg, splits in runs:
            c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
            launch(a, b, c, cfg, b_kmajor=b_kmajor, splits=splits)
            outs.append(c)
        torch.cuda.synchronize()
        assert not torch.isnan(outs[0]).any(), "some output elements were not written"
        assert _rel_err(outs[0], a, b, b_kmajor) < 1e-2
        for o in outs[1:]:
            assert torch.equal(o, outs[0])


@pytest.mark.parametrize("M,N,K,splits", [(1, 4096, 4096, 2), (1, 1000, 777, 3), (7, 4096, 14336, 4), (64, 1024, 4096, 4),
                                          (100, 3000, 2048, 5), (128, 512, 8192, 8), (33, 200, 136, 2)])
@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fixup_matches_fp64_and_the_two_pass_sum_bit_for_bit(M, N, K, splits, b_kmajor, dtype):
    """The last slice's sum is in slice order, as splitk_reduce's: the two agree exactly, on poisoned outputs,
    over repeated calls (the counters are reset by each launch); and both are within 1e-2 of fp64."""
    two_pass = FIXUP.replace(SPLITK_FIXUP=False)
    _agree_bit_for_bit(M, N, K, dtype, b_kmajor, [(FIXUP, splits)] * 2 + [(two_pass, splits)] * 2)
    stream = torch.cuda.current_stream().cuda_stream
    cnt = gemm_host._WORKSPACE[(torch.cuda.current_device(), stream, "cnt")]
    assert int(cnt.abs().sum()) == 0, "the kernel left arrival counters set"


@pytest.mark.parametrize("M", [1, 8, 16, 32, 64, 128])
@pytest.mark.parametrize("N,K", [(4096, 4096), (28672, 4096), (4096, 14336), (1000, 3000)])
def test_small_m_default_config_matches_fp64(M, N, K):
    """Whatever launch picks at small M (its config and split count), checked on poisoned outputs."""
    for seed in range(2):
        a, b = _operands(M, N, K, torch.bfloat16, seed=seed)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch(a, b, c)
        torch.cuda.synchronize()
        assert not torch.isnan(c).any()
        assert _rel_err(c, a, b, False) < 1e-2


@pytest.mark.parametrize("M,N,K,b_kmajor,pick", [
    (128, 11008, 4096, False, DECODE_WIDE), (100, 10000, 1000, True, DECODE_WIDE), (72, 8500, 3000, True, DECODE_WIDE),
    (80, 16000, 777, False, DECODE_WIDE_DEEP), (128, 12288, 4096, True, DECODE_WIDE_DEEP),
    (96, 14000, 1000, False, DECODE_WIDE_DEEP), (120, 16800, 4000, True, DECODE_WIDE_DEEP)],
    ids=lambda v: "deep" if v is DECODE_WIDE_DEEP else "wide" if v is DECODE_WIDE else None)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_wide_default_matches_fp64(M, N, K, b_kmajor, pick, dtype):
    """Above 64 rows where 128x128 tiles make half a wave to one, launch's pick (DECODE_WIDE, or DECODE_WIDE_DEEP's
    128-deep k-steps from 0.7 of a wave) on poisoned outputs, sizes on and off the tiles (K = 777: rows off 16 bytes;
    K = 1000, 4000: not a multiple of 128), both B layouts: within 1e-2 of fp64, every element written, the same bits
    twice. (12288 and 14000 columns in overlapping tiles, `one_wave_step`.)"""
    assert choose_config(M, N, K, 132) == (one_wave_step(N, pick, 132) if pick is DECODE_WIDE_DEEP else pick)
    _agree_bit_for_bit(M, N, K, dtype, b_kmajor, [(None, None), (None, None)])     # no config: launch's pick


@pytest.mark.parametrize("M,N,K,b_kmajor,pick", [
    (64, 11008, 4096, False, DECODE_ROWS), (48, 12000, 1000, True, DECODE_ROWS), (40, 16000, 777, False, DECODE_ROWS),
    (33, 14000, 3000, True, DECODE_ROWS), (64, 28672, 4096, False, DECODE_ROWS_WIDE),
    (48, 30000, 1000, True, DECODE_ROWS_WIDE), (40, 27000, 777, False, DECODE_ROWS_WIDE),
    (33, 26000, 3000, True, DECODE_ROWS_WIDE)], ids=lambda v: "rows_wide" if v is DECODE_ROWS_WIDE else
                                                   "rows" if v is DECODE_ROWS else None)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_rows_default_matches_fp64(M, N, K, b_kmajor, pick, dtype):
    """From 32 to 64 rows, launch's unswapped picks (A's rows off the 64-row tile): DECODE_ROWS where 64x128 tiles
    make most of a wave, DECODE_ROWS_WIDE where the swapped pick is 64x256 tiles; on poisoned outputs, sizes on and
    off the tiles, both B layouts: within 1e-2 of fp64, every element written, the same bits twice."""
    assert choose_config(M, N, K, 132) == pick
    _agree_bit_for_bit(M, N, K, dtype, b_kmajor, [(None, None), (None, None)])     # no config: launch's pick


@pytest.mark.parametrize("M,N,K,swapped", [(1, 28672, 4096, True), (5, 30000, 1000, True), (16, 26000, 777, True),
                                            (32, 33000, 4096, True), (48, 28672, 4096, False),
                                            (64, 27000, 777, False), (100, 28000, 1000, False),
                                            (128, 30208, 4096, False)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_k_major_b_decode_pick_matches_fp64(M, N, K, swapped, dtype):
    """Where 256-row B tiles would make most of a wave, B [N, K]: launch's pick steps 128 deep up to 32 rows, on
    64-row B tiles (swapped); from 33 to 128 rows it is B [K, N]'s (256-wide tiles on 64-deep k-steps, unswapped).
    On poisoned outputs, sizes on and off the tiles (K = 777: B's rows off 16 bytes, padded): within 1e-2 of fp64,
    every element written, the same bits twice."""
    cfg = resolve_config(M, N, K, 132, 2, b_kmajor=True)
    if swapped:
        assert (cfg.SWAP_AB, cfg.BLOCK_N, cfg.BLOCK_K) == (True, 64, 128)
        assert resolve_config(M, N, K, 132, 2).BLOCK_N == 256
    else:
        assert cfg == resolve_config(M, N, K, 132, 2) and (cfg.BLOCK_N, cfg.BLOCK_K) == (256, 64)
    _agree_bit_for_bit(M, N, K, dtype, True, [(None, None), (None, None)])     # no config: launch's pick


@pytest.mark.parametrize("M,N,K", [(16, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096), (100, 4097, 2048),
                                   (24, 4000, 2050), (96, 4100, 3000)])
@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_halved_rows_pick_matches_fp64(M, N, K, b_kmajor, dtype):
    """Where the swapped pick's K halves give way to A's row tile halved (`_halved_rows`): on poisoned outputs, sizes
    on and off the tiles, both B layouts: within 1e-2 of fp64, every element written, the same bits twice."""
    cfg = resolve_config(M, N, K, 132, 2, b_kmajor=b_kmajor)
    assert cfg.SWAP_AB and cfg.CLUSTER_K == 1
    assert resolve_config(M, N, K, 132, 2, config={"SWAP_AB": True}).CLUSTER_K == 2        # the swapped family's
    _agree_bit_for_bit(M, N, K, dtype, b_kmajor, [(None, None), (None, None)])     # no config: launch's pick


def _swap(M, BN=64, BK=64, STAGES=8):
    return DEFAULT_CONFIG.replace(BLOCK_M=max(8, 1 << (M - 1).bit_length()), BLOCK_N=BN, BLOCK_K=BK, STAGES=STAGES, CONSUMER_WGS=1,
                                  SWAP_AB=True, EPILOGUE="direct", SPLIT_WGS=False, K_ZIGZAG=False)


@pytest.mark.parametrize("M,N,K,bn,bk,splits", [(1, 4096, 4096, 64, 64, None), (5, 1000, 3000, 128, 64, None),
                                                (16, 28672, 4096, 128, 128, None), (33, 4097, 1024, 64, 128, 3),
                                                (64, 512, 8192, 128, 64, 1), (128, 2048, 2048, 64, 64, None),
                                                (8, 200, 136, 64, 64, 2), (100, 777, 333, 64, 64, None)])
@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_swap_ab_matches_fp64(M, N, K, bn, bk, splits, b_kmajor, dtype):
    """C^T = B^T A^T on one warpgroup, both B layouts, aligned and not (padded), split or not: poisoned
    outputs within 1e-2 of fp64, on fresh inputs twice (a moving error is a race)."""
    cfg = _swap(M, bn, bk, STAGES=6 if bk == 128 else 8)
    for seed in range(2):
        a, b = _operands(M, N, K, dtype, b_kmajor, seed)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
        launch(a, b, c, cfg, b_kmajor=b_kmajor, splits=splits)
        torch.cuda.synchronize()
        assert not torch.isnan(c).any(), "some output elements were not written"
        assert _rel_err(c, a, b, b_kmajor) < 1e-2


@pytest.mark.parametrize("M,N,K,bn,stages,extra", [
    (128, 4096, 4096, 128, 6, dict(CLUSTER_K=2)), (128, 4096, 4096, 128, 6, dict(CLUSTER_K=4)),
    (100, 4097, 2048, 128, 6, dict(CLUSTER_K=2)), (64, 14336, 4096, 256, 4, {}), (128, 14336, 4096, 128, 6, {}),
    (33, 1000, 3000, 256, 4, dict(CLUSTER_K=2)), (77, 600, 520, 128, 6, {})])
@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_swap_ab_on_two_warpgroups_matches_fp64(M, N, K, bn, stages, extra, b_kmajor, dtype):
    """C^T = B^T A^T on two cooperative warpgroups (B's 128 or 256 rows split between them, A's rows shared), in
    clusters of 2 and 4 or alone, both B layouts, sizes off the tiles: poisoned outputs within 1e-2 of fp64 on
    fresh inputs twice, and bit for bit the same config with its K slices summed by splitk_reduce."""
    cfg = _swap(M, bn, 64, STAGES=stages).replace(CONSUMER_WGS=2, **extra)
    for seed in range(2):
        a, b = _operands(M, N, K, dtype, b_kmajor, seed)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
        launch(a, b, c, cfg, b_kmajor=b_kmajor)
        torch.cuda.synchronize()
        assert not torch.isnan(c).any(), "some output elements were not written"
        assert _rel_err(c, a, b, b_kmajor) < 1e-2
    if cfg.CLUSTER_K > 1:
        _agree_bit_for_bit(M, N, K, dtype, b_kmajor, [(cfg, None), (cfg.replace(CLUSTER_K=1), cfg.CLUSTER_K)])


@pytest.mark.parametrize("M,N,K,bm,bn,wgs,b_kmajor", [
    (32, 4096, 4096, 16, 64, 1, True), (128, 4096, 4096, 64, 64, 1, True), (100, 4097, 2048, 64, 64, 1, True),
    (1, 4096, 4096, 8, 64, 1, True), (64, 14336, 4096, 32, 128, 1, True), (128, 4096, 4096, 64, 128, 2, True),
    (96, 4096, 4096, 64, 128, 1, False), (40, 1000, 3000, 32, 256, 2, False), (128, 777, 333, 64, 128, 1, False)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_swap_ab_in_pairs_sharing_b_matches_fp64(M, N, K, bm, bn, wgs, b_kmajor, dtype):
    """C^T = B^T A^T in 2-CTA clusters along M (CLUSTER_M=2): A's row blocks in pairs, each CTA loading half of the
    shared B tile and multicasting it; one and two warpgroups, both B layouts, one row block only (the second CTA's
    rows all past M), sizes off the tiles; split or not: poisoned outputs within 1e-2 of fp64, twice, and bit for bit
    the same config without the cluster."""
    cfg = _swap(M, bn, 64, STAGES=8 if bn <= 128 else 4).replace(BLOCK_M=bm, CONSUMER_WGS=wgs, CLUSTER_M=2)
    _agree_bit_for_bit(M, N, K, dtype, b_kmajor, [(cfg, 1), (cfg.replace(CLUSTER_M=1), 1)])
    _agree_bit_for_bit(M, N, K, dtype, b_kmajor, [(cfg, 2), (cfg.replace(CLUSTER_M=1), 2)])


@pytest.mark.parametrize("M,N,K,bn,b_kmajor", [
    (128, 4096, 4096, 64, True), (100, 4097, 1000, 64, True), (65, 512, 8192, 64, True), (128, 14336, 4096, 128, True),
    (77, 1000, 3000, 128, False), (128, 2048, 777, 128, False)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_unswapped_64_row_tiles_in_pairs_sharing_b_match_fp64(M, N, K, bn, b_kmajor, dtype):
    """The ordinary orientation at decode M (cuBLAS's form there): 64-row tiles of A, the two row blocks of a
    2-CTA cluster sharing (multicasting) each B tile; 64-deep k-steps; rows and columns off the tiles, a second
    row block of one row: poisoned outputs within 1e-2 of fp64, twice, bit for bit the same config unclustered."""
    cfg = DEFAULT_CONFIG.replace(BLOCK_M=64, BLOCK_N=bn, BLOCK_K=64, STAGES=12 if bn == 64 else 8, CONSUMER_WGS=1,
                                 CLUSTER_M=2, SPLIT_WGS=False, K_ZIGZAG=False, PDL=True)
    _agree_bit_for_bit(M, N, K, dtype, b_kmajor, [(cfg, 1), (cfg, 1), (cfg.replace(CLUSTER_M=1), 1)])


@pytest.mark.parametrize("M,N,K,cm,swap,b_kmajor", [
    (128, 14336, 4096, 1, False, False), (96, 14336, 4096, 2, False, True), (77, 30000, 1000, 1, False, True),
    (200, 9000, 777, 2, False, False), (64, 8192, 4096, 1, True, True), (16, 40000, 1000, 1, True, False)])
def test_two_ctas_an_sm_match_fp64(M, N, K, cm, swap, b_kmajor):
    """CTAS_PER_SM=2 (half the register file a CTA, a persistent grid of two CTAs an SM): 64x128 tiles over 4 stages,
    unswapped in and out of pairs and swapped, more tiles than 2 x SMs (several a CTA) and fewer, sizes off the tiles:
    poisoned outputs within 1e-2 of fp64, twice, bit for bit the same config at one CTA an SM."""
    if swap:
        cfg = _swap(M, 128, 64, STAGES=4)
    else:
        cfg = DECODE_PAIRS.replace(STAGES=4, CLUSTER_M=cm)
    two = cfg.replace(CTAS_PER_SM=2)
    _agree_bit_for_bit(M, N, K, torch.bfloat16, b_kmajor, [(two, 1), (two, 1), (cfg, 1)])


@pytest.mark.parametrize("M,N,K,cm,splits", [(640, 640, 32768, 1, 10), (700, 760, 40000, 2, 7),
                                             (300, 1000, 5000, 1, 3)])
def test_two_ctas_an_sm_over_k_slices_match_fp64(M, N, K, cm, splits):
    """Deep K on 128x128 tiles over 3 stages at two CTAs an SM, its K slices' partials summed by splitk_reduce (in
    and out of pairs, sizes off the tiles): within 1e-2 of fp64 on poisoned outputs, bit for bit at one CTA an SM."""
    cfg = DEFAULT_CONFIG.replace(BLOCK_N=128, STAGES=3, CONSUMER_WGS=1, EPILOGUE="direct", CLUSTER_M=cm)
    _agree_bit_for_bit(M, N, K, torch.bfloat16, True, [(cfg.replace(CTAS_PER_SM=2), splits), (cfg, splits)])


@pytest.mark.parametrize("M,N,K,b_kmajor", [(1000, 3000, 777, False), (7, 4097, 1000, True), (333, 200, 136, False)])
def test_unaligned_calls_allocate_nothing_after_the_first(M, N, K, b_kmajor):
    """Operands TMA cannot describe go through padded copies cached per (device, stream, shape): repeated
    calls allocate no memory (torch's allocation counter), and stay correct on fresh inputs."""
    a, b = _operands(M, N, K, torch.bfloat16, b_kmajor, seed=3)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    launch(a, b, c, b_kmajor=b_kmajor)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    for _ in range(5):
        launch(a, b, c, b_kmajor=b_kmajor)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    for seed in (4, 5):                                  # the cached buffers hold no stale data
        a2, b2 = _operands(M, N, K, torch.bfloat16, b_kmajor, seed=seed)
        a.copy_(a2)
        b.copy_(b2)
        c.fill_(float("nan"))
        launch(a, b, c, b_kmajor=b_kmajor)
        torch.cuda.synchronize()
        assert not torch.isnan(c).any() and _rel_err(c, a, b, b_kmajor) < 1e-2


@pytest.mark.parametrize("M,N,K,b_kmajor,config", [(256, 256, 250, False, None), (7, 4097, 999, True, None),
                                                  (130, 130, 64, True, {"EPILOGUE": "tma", "STAGES": 2})])
def test_padded_copies_by_the_driver_match_fp64_eagerly_and_in_a_graph(M, N, K, b_kmajor, config, monkeypatch):
    """With cuda-python's driver bindings the padded operands are copied by cuMemcpy2DAsync (`row_copy`), C out of
    its padded buffer too (a strided C under a TMA epilogue): poisoned outputs within 1e-2 of fp64 eagerly, and in
    a CUDA graph replayed on new values in the same tensors (the copies captured as memcpy nodes). (The kernel's
    own copies, which small operands take, are off here: tests/test_gemm_kernel_copies_gpu.py.)"""
    pytest.importorskip("cuda.bindings.driver")
    from gluon.kernels.gemm_sm90 import padding
    monkeypatch.setattr(padding, "COPY_IN_KERNEL_BYTES", 0)
    a, b = _operands(M, N, K, torch.bfloat16, b_kmajor, seed=6)
    big = torch.full((M, N + 3), float("nan"), device="cuda", dtype=torch.bfloat16)
    c = big[:, :N] if config else big[:, :N].contiguous()
    gemm_host._PADS.clear()
    launch(a, b, c, config, b_kmajor=b_kmajor)
    torch.cuda.synchronize()
    assert not torch.isnan(c).any() and _rel_err(c, a, b, b_kmajor) < 1e-2
    pad, = gemm_host._PADS.values()
    assert all((getattr(pad, x) is None) == (getattr(pad, x + "_copy") is None) for x in ("a", "b", "c"))
    assert any(getattr(pad, x + "_copy") is not None for x in ("a", "b", "c"))
    replays_match_fp64(lambda: launch(a, b, c, config, b_kmajor=b_kmajor), a, b, c, b_kmajor,
                       lambda seed: _operands(M, N, K, torch.bfloat16, b_kmajor, seed=seed))
    if config:
        assert big[:, N:].isnan().all()


@pytest.mark.parametrize("M,N,K,b_kmajor,out_dtype,odd_base", [
    (4095, 4097, 1023, True, torch.bfloat16, False),    # one wave of 128x256 tiles: "coalesced" for "tma"
    (4096, 8191, 1024, True, torch.bfloat16, False),    # several tiles per program (SPLIT_WGS)
    (1000, 3000, 777, False, torch.bfloat16, True),     # a C view at an odd base; A padded, B as given
    (16, 4097, 4096, True, torch.bfloat16, False),      # decode: SWAP_AB, K slices in a cluster
    (512, 513, 32768, True, torch.bfloat16, False),     # deep K: split K, reduced into C
    (2047, 1001, 4095, False, torch.float32, False),    # an fp32 output; A and B padded
    (4096, 50257, 512, True, torch.bfloat16, False),    # an LM head's vocabulary (GPT-2's 50257 columns)
])
def test_a_c_off_16_bytes_is_stored_by_address(M, N, K, b_kmajor, out_dtype, odd_base):
    """C's rows (or base) off 16 bytes: the kernel stores C by address, so C is not padded and copied out;
    every element written (poisoned C), right against fp64, over each family choose_config picks, repeated
    on fresh inputs through the call's fast path."""
    from gluon.kernels.gemm_sm90 import padding
    for seed in (0, 1):
        a, b = _operands(M, N, K, torch.bfloat16, b_kmajor, seed=seed)
        if odd_base:
            c = torch.empty(M * N + 1, device="cuda", dtype=out_dtype)[1:].view(M, N).fill_(float("nan"))
        else:
            c = torch.full((M, N), float("nan"), device="cuda", dtype=out_dtype)
        launch(a, b, c, b_kmajor=b_kmajor)
        torch.cuda.synchronize()
        assert not torch.isnan(c).any(), "some output elements were not written"
        assert _rel_err(c, a, b, b_kmajor) < 1e-2
    assert not any(k[0] == "c" and k[5] == (M, N) for k in padding._SCRATCH)


def _fp8(x, dtype):
    """x quantized to `dtype` with a per-row absmax scale: (q, fp32 scale per row)."""
    fmax = torch.finfo(dtype).max
    s = (x.abs().amax(dim=1, keepdim=True).float() / fmax).clamp(min=1e-12)
    return (x / s).to(dtype), s


@pytest.mark.parametrize("M,N,K", [(1, 4096, 4096), (16, 1000, 3072), (300, 2048, 1024), (1024, 1024, 2048),
                                   (4096, 4096, 4096),
                                   # rowcol scales by cp.async into shared memory: one 128x256 tile a CTA (eight
                                   # warps), several 64x256 ones a warpgroup (SPLIT_WGS), C's rows off 16 bytes
                                   (2048, 2048, 2048), (8192, 4096, 1024), (1000, 3001, 1024),
                                   # 65 to 128 rows, unswapped 64x128 tiles at two CTAs an SM (FP8_RESIDENT): M, N
                                   # and K off the tiles
                                   (96, 14336, 4096), (100, 14000, 1000),
                                   # up to 32 rows, 64-row B tiles on 256-deep k-steps where 256-row ones fit only
                                   # 128: K on and off them
                                   (1, 28672, 4096), (20, 30000, 1040),
                                   # 33 to 64 rows there: 128-row B tiles, unswapped, 256-deep; 120 rows: 128x256
                                   (64, 28672, 4096), (120, 27000, 1040)])
@pytest.mark.parametrize("scale", ["tensor", "rowcol"])
@pytest.mark.parametrize("fp8", ["e4m3", "e5m2"])
def test_fp8_matches_the_dequantized_fp64_product(M, N, K, scale, fp8):
    """C = (sa A) (sb B)^T with A, B fp8 and B K-major: against fp64 of the same dequantized operands, on
    poisoned outputs; bf16 out."""
    dt = torch.float8_e4m3fn if fp8 == "e4m3" else torch.float8_e5m2
    g = torch.Generator(device="cuda").manual_seed(M + N)
    a32 = torch.randn(M, K, device="cuda", generator=g)
    b32 = torch.randn(N, K, device="cuda", generator=g)
    a, sa = _fp8(a32, dt)
    b, sb = _fp8(b32, dt)
    if scale == "tensor":
        sa, sb = sa.max().reshape(1), sb.max().reshape(1)
        a, b = (a32 / sa).to(dt), (b32 / sb).to(dt)
    sa, sb = sa.reshape(-1).contiguous(), sb.reshape(-1).contiguous()
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb)
    torch.cuda.synchronize()
    ref = (a.double() * sa.double().reshape(-1, 1)) @ (b.double() * sb.double().reshape(-1, 1)).T
    assert not torch.isnan(c).any()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.parametrize("M,N,K,wide", [(512, 512, 65536, False), (256, 1024, 32768, False), (300, 520, 20000, False),
                                        (200, 1000, 17000, False), (1000, 1000, 16384, False), (640, 640, 32768, False),
                                        (384, 1024, 65536, True), (768, 768, 49152, True), (700, 760, 40000, True),
                                        (300, 1000, 50000, True)])
@pytest.mark.parametrize("b_kmajor", [False, True])
def test_deep_k_default_config_matches_fp64(M, N, K, wide, b_kmajor):
    """Few output tiles over a deep K: launch's pick (`deep_k_config`: 128x128 or 128x256 tiles, 2-CTA clusters
    where A has an even count of tile rows, K split), on poisoned outputs, at sizes that are and are not multiples
    of the tiles, twice."""
    from gluon.kernels.gemm_sm90.picks import DEEP_K_CONFIG, DEEP_K_WIDE, choose_config
    assert choose_config(M, N, K, 132).BLOCK_N == (DEEP_K_WIDE if wide else DEEP_K_CONFIG).BLOCK_N
    a, b = _operands(M, N, K, torch.bfloat16, b_kmajor)
    outs = []
    for _ in range(2):
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch(a, b, c, b_kmajor=b_kmajor)
        outs.append(c)
    torch.cuda.synchronize()
    assert not torch.isnan(outs[0]).any()
    assert _rel_err(outs[0], a, b, b_kmajor) < 1e-2
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("M,N,K,ck,base", [
    (1, 4096, 4096, 2, "swap"), (64, 4096, 4096, 2, "swap"), (128, 4096, 4096, 2, "swap"), (33, 1000, 3000, 4, "swap"),
    (8, 200, 136, 2, "swap"), (100, 4097, 2048, 8, "swap"),
    (512, 512, 65536, 8, "deep"), (1000, 1024, 32768, 4, "deep"), (300, 200, 5000, 2, "deep"), (256, 1024, 8192, 8, "deep")])
@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cluster_k_matches_fp64_and_the_two_pass_sum_bit_for_bit(M, N, K, ck, base, b_kmajor, dtype):
    """CLUSTER_K: the K slices of a tile on the CTAs of one cluster, summed by them after a cluster barrier.
    Against the same config with the slices summed by splitk_reduce (bit for bit: both add the slices in
    order), on poisoned outputs, repeated calls, fresh inputs twice; within 1e-2 of fp64."""
    from gluon.kernels.gemm_sm90.picks import DEEP_K_CONFIG
    if base == "swap":
        bm = max(8, 1 << (M - 1).bit_length())
        cfg = _swap(M, 64, 128, STAGES=min(8, 216 * 1024 // ((bm + 64) * 128 * 2))).replace(CLUSTER_K=ck)
    else:
        cfg = DEEP_K_CONFIG.replace(CLUSTER_M=1, CLUSTER_K=ck)
    _agree_bit_for_bit(M, N, K, dtype, b_kmajor, [(cfg, None), (cfg, None), (cfg.replace(CLUSTER_K=1), ck)])


@pytest.mark.parametrize("M,N,K,ck,base", [(1, 4096, 4096, 2, "swap"), (128, 4096, 4096, 4, "swap"),
                                           (33, 1000, 3000, 4, "swap"), (512, 512, 65536, 8, "deep"),
                                           (300, 200, 5000, 2, "deep"), (2048, 4096, 4096, 4, "deep")])
@pytest.mark.parametrize("b_kmajor", [False, True])
def test_cluster_k_with_early_loads_matches_the_kernel_without_them_bit_for_bit(M, N, K, ck, base, b_kmajor):
    """EARLY_LOADS=True with CLUSTER_K (asked for; "auto" leaves it off there): each CTA's first stages of its
    first tile's K slice loaded before the roles start and the cluster meets, and with LEAN_PROLOGUE the prologue's
    barriers dropped but the one before the first load of another thread. Bit for bit the same config without
    them, on poisoned outputs, fresh inputs twice; several tiles a cluster in the last case."""
    from gluon.kernels.gemm_sm90.picks import DEEP_K_CONFIG
    if base == "swap":
        bm = max(8, 1 << (M - 1).bit_length())
        cfg = _swap(M, 64, 128, STAGES=min(8, 216 * 1024 // ((bm + 64) * 128 * 2))).replace(CLUSTER_K=ck)
    else:
        cfg = DEEP_K_CONFIG.replace(CLUSTER_M=1, CLUSTER_K=ck, BLOCK_N=64 if M == 2048 else 128)
    early = cfg.replace(EARLY_LOADS=True)
    lean = early.replace(LEAN_PROLOGUE=True)
    _agree_bit_for_bit(M, N, K, torch.bfloat16, b_kmajor, [(cfg.replace(EARLY_LOADS=False), None), (early, None),
                                                           (early, None), (lean, None), (lean, None)])


def test_cluster_k_with_several_tiles_per_cluster():
    """More tiles than clusters: each cluster walks several tiles, meeting at one barrier per tile."""
    from gluon.kernels.gemm_sm90.picks import DEEP_K_CONFIG
    cfg = DEEP_K_CONFIG.replace(CLUSTER_M=1, CLUSTER_K=4, BLOCK_N=64)
    a, b = _operands(2048, 4096, 4096, torch.bfloat16)
    c = torch.full((2048, 4096), float("nan"), device="cuda", dtype=torch.bfloat16)
    launch(a, b, c, cfg)            # 32 x 64 tiles over 33 clusters of 4
    torch.cuda.synchronize()
    assert not torch.isnan(c).any()
    assert _rel_err(c, a, b, False) < 1e-2


def test_the_device_says_how_many_clusters_it_holds_and_the_grid_keeps_to_it():
    """cuOccupancyMaxActiveClusters of the CLUSTER_K kernel: at least one cluster, never more CTAs than SMs,
    and the launch's persistent grid no larger (a cluster beyond it would wait for another to end)."""
    from gluon.kernels.gemm_sm90.picks import DEEP_K_CONFIG
    from gluon.runtime.cuda import sm_count
    gemm_host._PLANS.clear()
    sms = sm_count(0)
    for ck in (2, 4, 8):
        cfg = DEEP_K_CONFIG.replace(CLUSTER_M=1, CLUSTER_K=ck)
        a, b = _operands(512, 512, 16384, torch.bfloat16)
        c = torch.full((512, 512), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch(a, b, c, cfg)
        torch.cuda.synchronize()
        assert _rel_err(c, a, b, False) < 1e-2
        (plan,) = [p for p in gemm_host._PLANS.values() if p.kw["CFG"].CLUSTER_K == ck]
        n = plan.ck.launcher.resident_clusters(0, ck)
        print(f"clusters of {ck}: the device holds {n}, the grid runs {plan.bound.grid[0]} (sm_count {sms})")
        assert n is not None and 1 <= n * ck <= sms and plan.bound.grid[0] <= n
