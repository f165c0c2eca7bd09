"""RELEASE_AT_ONCE without a GPU: each k-step's WGMMAs retired and their stage released before the next stage is
waited for. In the CPU interpreter (whose hazard checks fail a stage refilled while a WGMMA may still read it) the
values are bit for bit those of the default consumer loop; the machine code keeps no WGMMA group in flight across
k-steps; fp8 block scales refuse it. The GPU checks are tests/test_gemm_release_at_once_gpu.py."""
import pytest

from gluon import DType
from gluon.ir import GluonError
from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, GemmConfig, gemm_sm90, num_warps, stand_ins

NAN = float("nan")


@pytest.mark.parametrize("M,N,K,kw,splits", [
    (200, 136, 520, dict(BLOCK_N=64, CONSUMER_WGS=1, STAGES=2), 2),          # a 2-deep ring: the release is what refills
    (130, 200, 384, dict(BLOCK_N=128, CONSUMER_WGS=2, SPLIT_WGS=True, STAGES=3, EPILOGUE="direct"), 1),
    (9, 300, 640, dict(BLOCK_M=16, BLOCK_N=64, CONSUMER_WGS=1, SWAP_AB=True, STAGES=2, EPILOGUE="direct"), 2),
])
@pytest.mark.parametrize("b_kmajor", [False, True])
def test_values_equal_the_default_loop(interpret_env, M, N, K, kw, splits, b_kmajor):
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_sm90 import launch
    torch.manual_seed(3)
    a = torch.randn(M, K).half()
    b = torch.randn(*((N, K) if b_kmajor else (K, N))).half()
    outs = []
    for at_once in (False, True):
        c = torch.full((M, N), NAN).half()
        launch(a, b, c, GemmConfig(RELEASE_AT_ONCE=at_once, **kw), b_kmajor=b_kmajor, splits=splits)
        outs.append(c)
    ref = a.double() @ (b.double().T if b_kmajor else b.double())
    assert not torch.isnan(outs[1]).any()
    assert ((outs[1].double() - ref).norm() / ref.norm()).item() < 1e-2
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("cfg", [DEFAULT_CONFIG.replace(BLOCK_N=128, CONSUMER_WGS=1, STAGES=6, CLUSTER_M=2),
                                 DEFAULT_CONFIG.replace(BLOCK_N=128, CONSUMER_WGS=2, SPLIT_WGS=True, STAGES=7,
                                                        EPILOGUE="direct")])
def test_no_wgmma_group_is_left_in_flight(cfg):
    """The default loop waits down to one WGMMA group (`WARPGROUP.DEPBAR.LE gsb0, 0x1`) and releases the stage
    before; RELEASE_AT_ONCE waits for every group (`0x0`) and never leaves one in flight."""
    def depbars(c: GemmConfig) -> tuple[int, int]:
        c = c.resolve(2)
        ck = gemm_sm90.compile(*stand_ins(DType.bf16, splits=2), num_warps=num_warps(c), CFG=c, B_KMAJOR=True)
        assert ck.spills == 0 and ck.shared_bytes <= 227 * 1024
        sass = ck.sass()
        return sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x1"), sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x0")
    in_flight, _ = depbars(cfg)
    assert in_flight >= 1
    in_flight, retired = depbars(cfg.replace(RELEASE_AT_ONCE=True))
    assert in_flight == 0 and retired >= 1


def test_block_scales_refuse_it(interpret_env):
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_sm90 import launch
    a = torch.randn(200, 256).to(torch.float8_e4m3fn)
    b = torch.randn(128, 256).to(torch.float8_e4m3fn)
    c = torch.empty(200, 128).bfloat16()
    with pytest.raises(GluonError, match="RELEASE_AT_ONCE=True: the fp8 block-scaled k-loop"):
        launch(a, b, c, b_kmajor=True, scale_a=torch.ones(200, 2), scale_b=torch.ones(1, 2),
               config=GemmConfig(BLOCK_N=128, BLOCK_K=128, RELEASE_AT_ONCE=True))


def test_the_config_names_it():
    assert "RELEASE_AT_ONCE=True" in DEFAULT_CONFIG.replace(RELEASE_AT_ONCE=True).describe()
    with pytest.raises(GluonError, match="RELEASE_AT_ONCE"):
        DEFAULT_CONFIG.replace(RELEASE_AT_ONCE="yes")
