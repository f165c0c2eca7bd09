"""On the GPU: SPLITK_GRID, a tile's K slices meeting at its counter and summing the tile in the kernel. Bit for bit
the same config with the slices summed by splitk_reduce (both add them in slice order), within 1e-2 of fp64, on
poisoned outputs; over repeated launches and CUDA-graph replays (the counters are never reset); with PDL."""
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from gluon.kernels.gemm_sm90 import launch  # noqa: E402
from gluon.kernels.gemm_sm90 import host as gemm_host  # noqa: E402
from gluon.kernels.gemm_sm90.picks import DEEP_K_CONFIG  # noqa: E402
from test_gemm_small_m_gpu import _agree_bit_for_bit, _operands  # noqa: E402


def _poisoned(M, N, dtype):
    return torch.full((M, N), float("nan"), device="cuda", dtype=dtype)


@pytest.mark.parametrize("M,N,K,S,over", [
    (512, 512, 65536, 8, {}),                                     # the deep-K pick's tiles, B multicast in pairs
    (256, 1024, 65536, 8, dict(CLUSTER_M=1)),
    (1024, 512, 32768, 4, {}),
    (1024, 1024, 32768, 2, {}),
    (300, 200, 5000, 4, dict(CLUSTER_M=1)),                       # off the tiles, K off the k-step
    (200, 384, 20000, 16, {}),                                    # 8-column slabs
    (256, 1024, 16384, 4, dict(BLOCK_N=256, CONSUMER_WGS=2, STAGES=4, EPILOGUE="direct")),  # two warpgroups meet
])
@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_splitk_grid_matches_fp64_and_the_two_pass_sum_bit_for_bit(M, N, K, S, over, b_kmajor, dtype):
    cfg = DEEP_K_CONFIG.replace(SPLITK_GRID=S, **over)
    two_pass = cfg.replace(SPLITK_GRID=1)
    _agree_bit_for_bit(M, N, K, dtype, b_kmajor, [(cfg, None), (cfg, None), (two_pass, S)])
    stream = torch.cuda.current_stream().cuda_stream
    cnt = gemm_host._WORKSPACE[(torch.cuda.current_device(), stream, "meet", "cnt")]
    assert int((cnt % 65536).abs().sum()) == 0, "a launch left a counter off a whole unit"


def test_splitk_grid_over_many_launches_graph_replays_and_pdl():
    """Launches in a row (eager, repeated: the prepared path), 50 CUDA-graph replays and a PDL chain of GEMMs
    each reading the one before's output: every result the two-pass sum's, bit for bit."""
    M, N, K = 512, 512, 32768
    cfg = DEEP_K_CONFIG.replace(SPLITK_GRID=8)
    a, b = _operands(M, N, K, torch.bfloat16, True)
    ref = _poisoned(M, N, torch.bfloat16)
    launch(a, b, ref, cfg.replace(SPLITK_GRID=1), b_kmajor=True, splits=8)
    c = _poisoned(M, N, torch.bfloat16)
    for _ in range(20):
        c.fill_(float("nan"))
        launch(a, b, c, cfg, b_kmajor=True)
    torch.cuda.synchronize()
    assert torch.equal(c, ref)
    g = torch.cuda.CUDAGraph()
    c.fill_(float("nan"))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        launch(a, b, c, cfg, b_kmajor=True)         # planned and compiled on the capture stream
        with torch.cuda.graph(g, stream=stream):
            launch(a, b, c, cfg, b_kmajor=True)
    for _ in range(50):
        c.fill_(float("nan"))
        g.replay()
    torch.cuda.synchronize()
    assert torch.equal(c, ref)
    # a chain: x_{i+1} = x_i @ B^T (K = N), each GEMM a programmatic dependent of the one before
    sq = _operands(128, 1024, 1024, torch.bfloat16, True, seed=3)[1] / 32
    xs = [torch.randn(128, 1024, device="cuda").to(torch.bfloat16)]
    refs = [xs[0]]
    for i in range(6):
        xs.append(_poisoned(128, 1024, torch.bfloat16))
        launch(xs[i], sq, xs[-1], DEEP_K_CONFIG.replace(SPLITK_GRID=8, PDL=True), b_kmajor=True)
    for i in range(6):
        refs.append(_poisoned(128, 1024, torch.bfloat16))
        launch(refs[i], sq, refs[-1], DEEP_K_CONFIG, b_kmajor=True, splits=8)
    torch.cuda.synchronize()
    assert not torch.isnan(xs[-1]).any()
    for x, r in zip(xs, refs):
        assert torch.equal(x, r)
