"""On the GPU: the fp8 GEMM with DeepGEMM-style block scales (scale_a per row and 128 of K, scale_b per 128 x 128
block of B), on poisoned outputs against fp64 of the dequantized operands, at sizes that are and are not
multiples of the tiles and of the 128-blocks, both fp8 kinds, split-K, and repeated calls with fresh operands."""
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from gluon.kernels.gemm_sm90 import launch  # noqa: E402
from gluon.tuning.templates.gemm_sm90_fp8_scales import dequantized  # noqa: E402


def _case(M, N, K, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(M, K, device="cuda", generator=g) * 3).to(dtype)
    b = (torch.randn(N, K, device="cuda", generator=g) * 3).to(dtype)
    KB, NB = -(-K // 128), -(-N // 128)
    sa = torch.rand(M, KB, device="cuda", generator=g) + 0.25
    sb = torch.rand(NB, KB, device="cuda", generator=g) + 0.25
    return a, b, sa, sb, dequantized(a, b, sa, sb)


def _same_c_with_and_without(switch: str, M, N, K, kw, seed: int, m_major: bool = False):
    """A block-scaled launch with config field `switch` off, then on twice: C the same bit for bit each time (the
    switch adds the same products in the same order; a repeat shows no race), poisoned outputs, within 1e-2 of
    fp64."""
    a, b, sa, sb, ref = _case(M, N, K, torch.float8_e4m3fn, seed)
    if m_major:
        sa = sa.t().contiguous().t()
    outs = []
    for on in (False, True, True):
        config = dict(kw.get("config", {}), **{switch: on})
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb, **dict(kw, config=config))
        outs.append(c)
    torch.cuda.synchronize()
    assert not torch.isnan(outs[1]).any() and torch.equal(outs[0], outs[1]) and torch.equal(outs[1], outs[2])
    assert ((outs[1].double() - ref).norm() / ref.norm()).item() < 1e-2


_TURNS = dict(MMA_TURNS=True, SPLIT_WGS=True)
# 128 x 128 tiles where the pick is 128 x 256 halves, which SCALES_AHEAD (their own way) and PIPELINED_PROMOTION
# (not at all) change: the bit-for-bit comparisons need the same tiles on both sides
_SQUARE = dict(config=dict(BLOCK_N=128))
_THREE = dict(BLOCK_M=192, CONSUMER_WGS=3, CONSUMER_REGS=152, SPLIT_WGS=True)
_PARTS = dict(BLOCK_M=256, BLOCK_N=128, CONSUMER_WGS=2, SPLIT_WGS=True)    # 128 rows a warpgroup, in two parts
# 128 x 256 tiles: each warpgroup's 64 rows as two 128-column halves, A in registers (fp8_scales.block_scaled_halves)
_HALVES = dict(BLOCK_M=128, BLOCK_N=256, CONSUMER_WGS=2, SPLIT_WGS=True, STAGES=3, CONSUMER_REGS=240,
               PRODUCER_REGS=24)


@pytest.mark.parametrize("M,N,K,kw", [(4096, 4096, 4096, {}), (1000, 3000, 784, {}), (333, 1000, 4224, {}),
                                       (128, 512, 8192, dict(splits=4)),
                                       (8192, 1024, 2048, dict(config=dict(BLOCK_N=64))),
                                       (64, 4096, 4096, {}), (1, 4096, 4096, {}), (3, 1000, 4224, {}),
                                       (2048, 2048, 144, {}),
                                       # the pick's 192 x 128 tiles (block_scaled_tall), M off them
                                       (2200, 4096, 1024, {}),
                                       # the pick's 128 x 256 halves (block_scaled_wide): a round of them, K off 128
                                       (1000, 4000, 1000, {}), (200, 14000, 1000, {}),
                                       # decode's 64 x 128 tiles on one warpgroup (block_scaled_decode): N off them, K
                                       # off 128; N 4096 over four K slices
                                       (40, 9000, 1000, {}), (7, 4096, 14336, {}),
                                       # ... from 65 rows at two CTAs an SM, M, N and K off the tiles; on one over
                                       # two K slices (N 4096)
                                       (100, 9000, 1000, {}), (100, 4096, 11008, {}),
                                       # MMA_TURNS: the warpgroups take turns issuing (named barriers)
                                       (4096, 4096, 4096, dict(config=_TURNS)), (1000, 3000, 784, dict(config=_TURNS)),
                                       (128, 512, 8192, dict(splits=4, config=dict(_TURNS, CONSUMER_WGS=2, BLOCK_M=128,
                                                                                     EPILOGUE="direct"))),
                                       # three warpgroups of 64 rows (192 x 128 tiles)
                                       (4096, 4096, 4096, dict(config=_THREE)), (1000, 3000, 784, dict(config=_THREE)),
                                       (4096, 4096, 4096, dict(config=dict(_THREE, MMA_TURNS=True))),
                                       (1000, 3000, 784, dict(config=dict(_THREE, MMA_TURNS=True))),
                                       # 128 rows a warpgroup in two 64-row parts: 256x128 tiles on two, 128x128 on
                                       # one (the deep-K pick's 2-CTA clusters), K slices
                                       (4096, 4096, 4096, dict(config=_PARTS)), (1000, 3000, 784, dict(config=_PARTS)),
                                       (300, 512, 8192, dict(splits=4, config=dict(_PARTS, EPILOGUE="direct"))),
                                       (512, 1024, 16384, dict(config=dict(BLOCK_M=128, BLOCK_N=128,
                                                                           CONSUMER_WGS=1))),
                                       # 128 x 256 tiles in two halves: N off 256 and off 128 (a right half past N),
                                       # K slices, the coalesced epilogue, 2-CTA clusters
                                       (4096, 4096, 4096, dict(config=_HALVES)),
                                       (1000, 3000, 784, dict(config=_HALVES)),
                                       (333, 1152, 4224, dict(config=dict(_HALVES, EPILOGUE="coalesced", STAGES=4))),
                                       (300, 640, 8192, dict(splits=4, config=dict(_HALVES, EPILOGUE="direct"))),
                                       (2048, 4096, 2048, dict(config=dict(_HALVES, CLUSTER_M=2))),
                                       # ... with each half's WGMMA as two of 64 columns, two in flight (QUARTERS)
                                       (4096, 4096, 4096, dict(config=dict(_HALVES, QUARTERS=True))),
                                       (1000, 3000, 784, dict(config=dict(_HALVES, QUARTERS=True))),
                                       (333, 1152, 4224, dict(config=dict(_HALVES, QUARTERS=True,
                                                                           EPILOGUE="coalesced"))),
                                       (300, 640, 8192, dict(splits=4, config=dict(_HALVES, QUARTERS=True,
                                                                                   EPILOGUE="direct"))),
                                       # ... with each k-step's scales loaded a k-step early (SCALES_AHEAD)
                                       (1000, 3000, 784, dict(config=dict(_HALVES, SCALES_AHEAD=True))),
                                       (4096, 4096, 4096, dict(config=dict(_HALVES, QUARTERS=True, SCALES_AHEAD=True))),
                                       (300, 640, 8192, dict(splits=4, config=dict(_HALVES, SCALES_AHEAD=True,
                                                                                   EPILOGUE="direct"))),
                                       # the last column tile's right half wholly past N, stored by TMA
                                       (640, 1152, 1024, dict(config=_HALVES)),
                                       (640, 1152, 1024, dict(config=dict(_HALVES, QUARTERS=True)))])
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_block_scaled_fp8_gemm_matches_fp64(M, N, K, kw, dtype):
    for seed in range(2):
        a, b, sa, sb, ref = _case(M, N, K, dtype, seed)
        for out in (torch.bfloat16, torch.float16):
            c = torch.full((M, N), float("nan"), device="cuda", dtype=out)
            launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb, **kw)
            torch.cuda.synchronize()
            assert not torch.isnan(c).any(), "output elements not written"
            err = ((c.double() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, f"seed {seed} {out}: rel err {err:.2e}"


def test_block_scales_sum_each_block_in_fp32():
    """K = 16384 of one sign: one fp32 sum of 128 per-block products stays within bf16's rounding of the
    exact value, where the tensor cores' own accumulation over the whole K would drift."""
    M = N = 256
    K = 16384
    a = torch.full((M, K), 1.0, device="cuda").to(torch.float8_e4m3fn)
    b = (torch.rand(N, K, device="cuda") + 0.5).to(torch.float8_e4m3fn)
    sa = torch.ones(M, K // 128, device="cuda")
    sb = torch.ones(N // 128, K // 128, device="cuda")
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb)
    ref = b.double().sum(dim=1)[None, :].expand(M, N)
    assert ((c.double() - ref).abs() / ref).max().item() < 1e-5


@pytest.mark.parametrize("M,N,K", [(4096, 4096, 4096), (1000, 3000, 784), (64, 4096, 4096)])
def test_block_scale_a_m_major_matches_its_contiguous_copy_bit_for_bit(M, N, K):
    """scale_a M-major (torch._scaled_mm's blockwise layout, DeepGEMM's) read as it is: the same C as with its
    contiguous copy, on poisoned outputs."""
    a, b, sa, sb, ref = _case(M, N, K, torch.float8_e4m3fn, 5)
    outs = []
    for s in (sa.t().contiguous().t(), sa):
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch(a, b, c, b_kmajor=True, scale_a=s, scale_b=sb)
        outs.append(c)
    torch.cuda.synchronize()
    assert not torch.isnan(outs[0]).any() and torch.equal(outs[0], outs[1])
    assert ((outs[0].double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.parametrize("M,N,K,kw", [(4096, 4096, 4096, _SQUARE), (1000, 3000, 784, {}),
                                       (128, 512, 8192, dict(splits=4)),
                                       (4096, 4096, 4096, dict(config=_TURNS)), (1000, 3000, 784, dict(config=_THREE))])
@pytest.mark.parametrize("m_major", [False, True])
def test_block_scales_loaded_ahead_give_the_same_c_bit_for_bit(M, N, K, kw, m_major):
    """SCALES_AHEAD (each k-step's scales loaded with the previous one) computes the same products in the same
    order: C equal to the launch without it, on poisoned outputs, and within 1e-2 of fp64."""
    a, b, sa, sb, ref = _case(M, N, K, torch.float8_e4m3fn, 6)
    if m_major:
        sa = sa.t().contiguous().t()
    outs = []
    for ahead in (False, True):
        config = dict(kw.get("config", {}), SCALES_AHEAD=ahead)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb, **dict(kw, config=config))
        outs.append(c)
    torch.cuda.synchronize()
    assert not torch.isnan(outs[1]).any() and torch.equal(outs[0], outs[1])
    assert ((outs[1].double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.parametrize("M,N,K,kw", [(4096, 4096, 4096, _SQUARE), (1000, 3000, 784, {}),
                                       (128, 512, 8192, dict(splits=4)),
                                       (1000, 3000, 784, dict(config=_THREE)), (8192, 8192, 8192, _SQUARE),
                                       (4096, 4096, 4096, dict(config=_TURNS)),
                                       (1000, 3000, 784, dict(config=dict(_THREE, MMA_TURNS=True)))])
@pytest.mark.parametrize("m_major", [False, True])
def test_pipelined_promotion_gives_the_same_c_bit_for_bit(M, N, K, kw, m_major):
    """PIPELINED_PROMOTION (the next k-step's WGMMA issued after this one's promotion, waited for one iteration later)
    adds the same products in the same order: C equal to the launch without it, on poisoned outputs, within 1e-2 of
    fp64, and the same again on a repeat (a WGMMA in flight across the loop's edge: no race may show)."""
    _same_c_with_and_without("PIPELINED_PROMOTION", M, N, K, kw, seed=8, m_major=m_major)


@pytest.mark.parametrize("M,N,K,kw", [(4096, 4096, 4096, {}), (1000, 3000, 784, {}), (128, 512, 8192, dict(splits=4)),
                                       (4096, 4096, 4096, dict(config=_TURNS)), (1000, 3000, 784, dict(config=_THREE)),
                                       (4096, 4096, 4096, dict(config=_PARTS))])
def test_ffma_yield_gives_the_same_c_bit_for_bit(M, N, K, kw):
    """FFMA_YIELD (control bits of the promotion's FFMAs set in the binary after ptxas: yields, no reuse) runs the
    same instructions: C equal to the launch without it, on poisoned outputs, within 1e-2 of fp64, and the same
    again on a repeat (no race the new schedule could expose)."""
    _same_c_with_and_without("FFMA_YIELD", M, N, K, kw, seed=7)


@pytest.mark.parametrize("epilogue", [None, "tma"])
@pytest.mark.parametrize("M,N,K", [(4096, 4096, 4096), (1000, 3000, 784)])
def test_block_scales_on_256_columns_into_an_fp32_output(M, N, K, epilogue):
    """BLOCK_N 256 (two halves a warpgroup) with an fp32 C, stored from registers (the default) or staged through
    shared memory on the two stages that fit beside it (a caller's EPILOGUE="tma"): poisoned output, within 1e-3 of
    fp64 of the dequantized operands."""
    a, b, sa, sb, ref = _case(M, N, K, torch.float8_e4m3fn, 9)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    config = dict(BLOCK_N=256, **({"EPILOGUE": epilogue} if epilogue else {}))
    launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb, config=config)
    torch.cuda.synchronize()
    assert not torch.isnan(c).any()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-3


@pytest.mark.parametrize("M,N,K,kw", [(4096, 4096, 4096, {}), (4096, 4096, 4096, _SQUARE), (8192, 8192, 8192, {}),
                                       (1000, 3000, 784, {}), (200, 14000, 1000, {}), (2200, 4096, 1024, {}),
                                       (128, 512, 8192, dict(splits=4)), (1000, 3000, 784, dict(config=_THREE)),
                                       (4096, 4096, 4096, dict(config=dict(BLOCK_N=128, PIPELINED_PROMOTION=True))),
                                       (4096, 4096, 4096, dict(config=_TURNS)),
                                       (100, 9000, 1000, {}), (7, 4096, 14336, {}), (100, 4096, 11008, {})])
@pytest.mark.parametrize("m_major", [False, True])
def test_scales_in_the_ring_give_the_same_c_bit_for_bit(M, N, K, kw, m_major):
    """SCALES_IN_RING (the producer copies each k-step's scales into the stage by cp.async, counted by its ready
    barrier) multiplies the same scales: C equal to the launch that loads them itself, on poisoned outputs, within
    1e-2 of fp64, and again on a repeat (a stage read before its copies landed would show as a race). The picks'
    tiles (the halves, 192 x 128, the decode forms), 128 x 128 and its pipelined loop, turns, split K."""
    _same_c_with_and_without("SCALES_IN_RING", M, N, K, kw, seed=9, m_major=m_major)
