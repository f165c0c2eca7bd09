"""On the GPU: overlapping output tiles (GemmConfig.N_STEP), each multiplying BLOCK_N columns and writing its first
N_STEP, at the decode shapes they are for and off them: every element of a poisoned C against fp64."""
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from gluon.kernels.gemm_sm90 import launch  # noqa: E402
from test_gemm_small_m_gpu import _operands  # noqa: E402

WIDE_DEEP = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, STAGES=3, CONSUMER_WGS=1, PDL=True)
ROWS = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, STAGES=4, CONSUMER_WGS=1, PDL=True)
WIDE2 = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, STAGES=3, CONSUMER_WGS=2)
SWAPPED = dict(SWAP_AB=True, BLOCK_N=256, BLOCK_K=64, STAGES=6)


def _check(c, a, b, b_kmajor):
    ref = a.double() @ (b.double().T if b_kmajor else b.double())
    assert not torch.isnan(c).any(), "some output elements were not written"
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=2e-2 * ref.abs().max().item() / 16)


@pytest.mark.parametrize("M,N,K,config", [
    (128, 14336, 4096, dict(WIDE_DEEP, N_STEP=112)), (100, 14000, 1000, dict(WIDE_DEEP, N_STEP=112)),
    (64, 14336, 4096, dict(ROWS, N_STEP=112)), (128, 12288, 4096, dict(WIDE_DEEP, N_STEP=96)),
    (128, 28672, 4096, dict(WIDE2, N_STEP=224)), (77, 28000, 520, dict(WIDE2, N_STEP=224)),
    (16, 28672, 4096, dict(SWAPPED, N_STEP=224)), (5, 3000, 4096, dict(SWAPPED, N_STEP=160)),
    (300, 1000, 512, dict(WIDE_DEEP, N_STEP=48, EPILOGUE="direct")),
])
@pytest.mark.parametrize("b_kmajor", [False, True])
def test_overlapping_tiles_match_fp64(M, N, K, config, b_kmajor):
    """Each element written once and right (the columns two tiles both multiply written by the first only),
    eagerly on fresh inputs twice, edges in every dimension."""
    for seed in range(2):
        a, b = _operands(M, N, K, torch.bfloat16, b_kmajor, seed)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch(a, b, c, config, b_kmajor=b_kmajor)
        torch.cuda.synchronize()
        _check(c, a, b, b_kmajor)
