"""On the GPU: STREAM_K (gluon/kernels/gemm_sm90/stream_k.py), the k-steps of all tiles dealt out evenly to one
program a SM, shared tiles summed by the last program to finish its part: decode shapes (A and B swapped, one
or two warpgroups), few tiles over a deep K, the ordinary kernel's epilogues, fp8 block scales; poisoned
outputs, fresh inputs, repeated calls bit for bit (the counters reset by each launch), within 1e-2 of fp64."""
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, choose_config, launch  # noqa: E402
from gluon.kernels.gemm_sm90 import host as gemm_host  # noqa: E402


def _operands(M, N, K, dtype, b_kmajor, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
    b = torch.randn(*((N, K) if b_kmajor else (K, N)), device="cuda", generator=g).to(dtype)
    return a, b


def _check(M, N, K, cfg, b_kmajor, dtype=torch.bfloat16, calls=3):
    """`calls` launches on poisoned outputs, fresh inputs twice: every element written, within 1e-2 of fp64,
    the launches bit-identical (a race between a tile's programs would move the bits), counters at zero."""
    for seed in range(2):
        a, b = _operands(M, N, K, dtype, b_kmajor, seed)
        outs = []
        for _ in range(calls):
            c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
            launch(a, b, c, cfg, b_kmajor=b_kmajor)
            outs.append(c)
        torch.cuda.synchronize()
        assert not torch.isnan(outs[0]).any(), "some output elements were not written"
        ref = a.double() @ (b.double().T if b_kmajor else b.double())
        assert ((outs[0].double() - ref).norm() / ref.norm()).item() < 1e-2
        for o in outs[1:]:
            assert torch.equal(o, outs[0]), "STREAM_K's result moved between launches"
    cnt = gemm_host._WORKSPACE[(torch.cuda.current_device(), torch.cuda.current_stream().cuda_stream, "cnt")]
    assert int(cnt.abs().sum()) == 0, "a shared tile's counter was left set"


@pytest.mark.parametrize("M,N,K", [(1, 14336, 4096), (64, 28672, 4096), (128, 14336, 4096), (128, 4096, 4096),
                                   (100, 4097, 2048), (33, 1000, 3000)])
@pytest.mark.parametrize("b_kmajor", [False, True])
def test_stream_k_on_the_decode_pick(M, N, K, b_kmajor):
    """The decode pick (A and B swapped) with STREAM_K instead of its split."""
    cfg = choose_config(M, N, K, 132).replace(CLUSTER_K=1, STREAM_K=True)
    _check(M, N, K, cfg, b_kmajor)


@pytest.mark.parametrize("M,N,K,BN", [(128, 14336, 4096, 256), (128, 28672, 4096, 256), (64, 4096, 4096, 128)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_stream_k_on_two_swapped_warpgroups(M, N, K, BN, dtype):
    cfg = DEFAULT_CONFIG.replace(SWAP_AB=True, CONSUMER_WGS=2, BLOCK_M=max(8, 1 << (M - 1).bit_length()),
                                 BLOCK_N=BN, BLOCK_K=64, STAGES=4, EPILOGUE="direct", STREAM_K=True)
    _check(M, N, K, cfg, True, dtype)


@pytest.mark.parametrize("M,N,K", [(512, 512, 65536), (256, 1024, 32768), (300, 520, 20000), (1000, 1000, 16384)])
@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("wgs", [1, 2])
def test_stream_k_over_a_deep_k(M, N, K, b_kmajor, wgs):
    """Few tiles over a deep K: a tile shared by up to a dozen programs, the last summing them all (one partial
    at a time on one warpgroup, two on two)."""
    from gluon.kernels.gemm_sm90.config import DEEP_K_CONFIG
    _check(M, N, K, DEEP_K_CONFIG.replace(CLUSTER_M=1, CONSUMER_WGS=wgs, STREAM_K=True), b_kmajor)


@pytest.mark.parametrize("epilogue", ["tma", "coalesced", "direct"])
@pytest.mark.parametrize("M,N,K", [(128, 28672, 4096), (1000, 3000, 777), (2048, 2048, 2048)])
def test_stream_k_on_the_ordinary_kernel(M, N, K, epilogue):
    """128x256 tiles on two warpgroups with each epilogue; 2048^2 has more tiles than SMs (runs of several
    whole tiles between the shared ones)."""
    if epilogue == "coalesced" and N % 16:
        pytest.skip("the coalesced epilogue's stores need 16-element rows")
    _check(M, N, K, DEFAULT_CONFIG.replace(EPILOGUE=epilogue, STREAM_K=True), False)


def test_stream_k_with_fp8_block_scales():
    from gluon.tuning.templates.gemm_sm90_fp8_scales import dequantized
    g = torch.Generator(device="cuda").manual_seed(4)
    M, N, K = 512, 1024, 16384
    a = (torch.randn(M, K, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    sa = torch.rand(M, K // 128, device="cuda", generator=g) * 2 + 0.25
    sb = torch.rand(N // 128, K // 128, device="cuda", generator=g) * 2 + 0.25
    outs = []
    for _ in range(2):
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch(a, b, c, {"STREAM_K": True}, b_kmajor=True, scale_a=sa, scale_b=sb)
        outs.append(c)
    ref = dequantized(a, b, sa, sb)
    assert not torch.isnan(outs[0]).any()
    assert ((outs[0].double() - ref).norm() / ref.norm()).item() < 1e-2
    assert torch.equal(outs[0], outs[1])
