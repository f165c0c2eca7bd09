"""On the GPU: RELEASE_AT_ONCE (each k-step's WGMMAs retired and its stage released before the next is waited for)
gives the default loop's values bit for bit, on poisoned outputs and fresh inputs, where it is timed: the deep-K
tiles in 2-CTA pairs and on two warpgroup roles, the decode picks (swapped, K halves summed in a cluster), sizes on
and off the tiles, both B layouts."""
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from gluon.kernels.gemm_sm90 import choose_config, launch  # noqa: E402
from gluon.kernels.gemm_sm90.config import DEEP_K_CONFIG  # noqa: E402

TWO_ROLES = dict(CONSUMER_WGS=2, SPLIT_WGS=True, STAGES=7, EPILOGUE="direct")


def _operands(M, N, K, dtype, b_kmajor, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
    b = torch.randn(*((N, K) if b_kmajor else (K, N)), device="cuda", generator=g).to(dtype)
    return a, b


@pytest.mark.parametrize("M,N,K,extra", [
    (1024, 1024, 32768, {}), (768, 768, 49152, {}), (640, 640, 20000, {}), (1000, 520, 17000, {}),
    (1024, 1024, 32768, TWO_ROLES), (384, 1000, 40000, TWO_ROLES), (512, 512, 16384, dict(STAGES=7, EPILOGUE="direct")),
    (128, 4096, 4096, {}), (32, 4096, 4096, {}), (1, 1000, 3000, {}), (77, 14336, 4096, {}), (128, 4096, 14336, {}),
])
@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_values_equal_the_default_loop(M, N, K, extra, b_kmajor, dtype):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    base = choose_config(M, N, K, sms).replace(**extra)
    assert base.SWAP_AB or base.BLOCK_N == DEEP_K_CONFIG.BLOCK_N      # the picks this file is about
    for seed in range(2):
        a, b = _operands(M, N, K, dtype, b_kmajor, seed)
        outs = []
        for at_once in (False, True, True):
            c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
            launch(a, b, c, base.replace(RELEASE_AT_ONCE=at_once), b_kmajor=b_kmajor)
            outs.append(c)
        torch.cuda.synchronize()
        ref = a.double() @ (b.double().T if b_kmajor else b.double())
        assert not torch.isnan(outs[1]).any(), "some output elements were not written"
        assert ((outs[1].double() - ref).norm() / ref.norm()).item() < 1e-2
        assert torch.equal(outs[1], outs[0]) and torch.equal(outs[2], outs[0])
