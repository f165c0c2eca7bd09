"""STREAM_K (gluon/kernels/gemm_sm90/stream_k.py) in the CPU interpreter: runs of k-steps across tiles, the
partials of shared tiles summed by the last program in k order, counters left at zero, the value the same
whichever program counts in last; the config's rules."""
import pytest
import torch

from gluon import DType
from gluon.backend.machine_code import sass_instructions
from gluon.ir import GluonError
from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, GemmConfig, gemm_sm90, grid, launch, num_warps, stand_ins
from gluon.kernels.gemm_sm90 import host
from gluon.kernels.gemm_sm90.config import DEEP_K_CONFIG, small_m_config

NAN = float("nan")


def _operands(M, N, K, dtype, kmajor, seed=3):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g).to(dtype)
    b = (torch.randn(N, K, generator=g) if kmajor else torch.randn(K, N, generator=g)).to(dtype)
    return a, b, torch.full((M, N), NAN).to(dtype)


@pytest.mark.parametrize("cfg,km", [
    (small_m_config(128, 14336, 132), True),                       # decode: the swap on one warpgroup
    (small_m_config(1, 4096, 132), False),
    (DEEP_K_CONFIG.replace(CLUSTER_M=1), False),                    # deep K: 128x128 on one warpgroup
    (DEEP_K_CONFIG.replace(CLUSTER_M=1, CONSUMER_WGS=2), True),     # ... on two (two partials in flight)
    (DEFAULT_CONFIG, True),                                         # 128x256 on two, the TMA epilogue
])
def test_stream_k_machine_code(cfg, km):
    """No spills (a sum held beside the partial in registers spilled hundreds of bytes), one atomic (a CTA's
    count of a shared tile), the partials read past L1, and the K loop's WGMMAs those of the kernel without
    STREAM_K."""
    def build(c):
        c = c.resolve(2)
        return gemm_sm90.compile(*stand_ins(DType.bf16), num_warps=num_warps(c), CFG=c, B_KMAJOR=km)
    sk, plain = build(cfg.replace(STREAM_K=True)), build(cfg)
    ops, base = sass_instructions(sk.sass()), sass_instructions(plain.sass())
    assert sk.spills == 0
    assert ops["ATOMG"] == 1 and ops["ATOMG.E.ADD.STRONG.GPU"] == 1
    assert any(op.startswith("LDG.E") and op.endswith("STRONG.GPU") for op in ops)
    # the same instructions (ptxas may peel the first k-step, whose accumulator is zero, into a copy of the loop)
    assert {op for op in ops if op.startswith("HGMMA")} == {op for op in base if op.startswith("HGMMA")}
    assert ops["HGMMA"] in (base["HGMMA"], 2 * base["HGMMA"])


def _ref(a, b, kmajor):
    return a.double() @ (b.double().T if kmajor else b.double())


def _close(c, ref):
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=2e-2 * ref.abs().max().item() / 16)


@pytest.mark.parametrize("shape,dtype,kmajor,cfg,sms", [
    # runs of 48 k-steps over tiles of 20: every run crosses tiles, some hold a whole middle tile
    ((200, 136, 1280), torch.bfloat16, False, dict(BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1, STAGES=4), 5),
    ((200, 136, 1280), torch.float16, True, dict(BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1, EPILOGUE="coalesced"), 5),
    ((130, 72, 1000), torch.bfloat16, False, dict(BLOCK_M=128, BLOCK_N=64, EPILOGUE="direct"), 3),
    # more programs than a tile has k-steps: a tile shared by up to five (runs of 2 over 12 tiles of 10)
    ((200, 136, 640), torch.float16, False, dict(BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1), 132),
    # decode: A and B swapped, one and two warpgroups (B's 128 rows split between them)
    ((1, 600, 2048), torch.bfloat16, True, dict(SWAP_AB=True, BLOCK_M=8, BLOCK_N=128, CONSUMER_WGS=1,
                                                BLOCK_K=128, STAGES=4), 7),
    ((100, 300, 640), torch.bfloat16, True, dict(SWAP_AB=True, CONSUMER_WGS=2, BLOCK_M=128, BLOCK_N=128,
                                                 STAGES=4), 5),
    # 24 k-steps on 10 programs, 3 a run: programs 8 and 9 have none
    ((130, 72, 256), torch.float16, False, dict(BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1), 10),
    # 128x128 on one warpgroup (128 values a thread: the partials summed one at a time), on two (64: two at a
    # time), tiles shared by three or four programs
    ((256, 256, 1280), torch.bfloat16, False, dict(BLOCK_M=128, BLOCK_N=128, CONSUMER_WGS=1), 12),
    ((256, 256, 1280), torch.bfloat16, True, dict(BLOCK_M=128, BLOCK_N=128, CONSUMER_WGS=2), 11),
    # K of one k-step: every tile its program's alone
    ((200, 136, 40), torch.bfloat16, False, dict(BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1), 5),
])
def test_stream_k_matches_fp64(interpret_env, monkeypatch, shape, dtype, kmajor, cfg, sms):
    monkeypatch.setattr(host, "device_sms", lambda d: sms)
    M, N, K = shape
    a, b, c = _operands(M, N, K, dtype, kmajor)
    launch(a, b, c, dict(STREAM_K=True, **cfg), b_kmajor=kmajor)
    _close(c, _ref(a, b, kmajor))
    cnt = host._WORKSPACE[(-1, None, "cnt")]
    assert not cnt.any(), "a shared tile's counter was left set"


def _interpret(a, b, c, cfg, programs, w, cnt):
    (P,) = grid(c.shape[0], c.shape[1], cfg, 6, K=a.shape[1])
    gemm_sm90.interpret((P,), a, b, c, w, cnt, w, w, 1, CFG=cfg, num_warps=num_warps(cfg),
                        programs=programs(P))
    return P


def test_the_value_does_not_depend_on_which_program_counts_in_last(interpret_env):
    """Programs run in launch order, then in reverse (the first contributor of each shared tile is then the last
    to count in, and takes the other's partial without storing its own): the same bits, the counters at zero
    after both. Nine tiles of 18 k-steps in runs of 27: every other tile shared by two programs."""
    cfg = GemmConfig(BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1, STAGES=4, STREAM_K=True).resolve(2)
    a, b, c = _operands(130, 136, 1096, torch.bfloat16, False, seed=9)
    w = torch.full((2 * 6 * 64 * 64,), NAN)
    cnt = torch.zeros(64, dtype=torch.int32)
    P = _interpret(a, b, c, cfg, lambda p: range(p), w, cnt)
    assert P == 6 and not cnt.any()
    first = c.clone()
    c.fill_(NAN)
    _interpret(a, b, c, cfg, lambda p: reversed(range(p)), w, cnt)
    assert not cnt.any()
    assert torch.equal(c.view(torch.int16), first.view(torch.int16)), "the sum depends on the arrival order"
    _close(c, _ref(a, b, False))


@pytest.mark.parametrize("fields,says", [
    (dict(CLUSTER_M=2), "no cluster"),
    (dict(SPLIT_WGS=True), "SPLIT_WGS=False"),
    (dict(SPLITK_FIXUP=True), "SPLITK_FIXUP=False"),
    (dict(K_ZIGZAG=True), "K_ZIGZAG=False"),
    (dict(EPILOGUE="ring"), "'ring'"),
])
def test_stream_k_refuses_what_it_is_not_written_for(fields, says):
    with pytest.raises(GluonError, match="STREAM_K=True takes") as e:
        GemmConfig(STREAM_K=True, **fields)
    assert says in str(e.value)


def test_a_stream_k_launch_refuses_a_split_count(interpret_env):
    a, b, c = _operands(64, 64, 256, torch.bfloat16, False)
    with pytest.raises(GluonError, match="splits=2 with STREAM_K=True"):
        launch(a, b, c, dict(STREAM_K=True, BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1), splits=2)


def test_the_stream_k_grid_is_one_program_a_sm_or_a_k_step():
    cfg = GemmConfig(STREAM_K=True, BLOCK_M=128, BLOCK_N=128, CONSUMER_WGS=1)
    assert grid(128, 14336, cfg, 132, K=4096) == (132,)           # 112 tiles: every SM gets a run
    assert grid(128, 256, cfg, 132, K=256) == (8,)                # 2 tiles x 4 k-steps
    with pytest.raises(GluonError, match="takes K"):
        grid(128, 256, cfg, 132)


@pytest.mark.parametrize("kind", ["block", "rowcol"])
def test_stream_k_with_fp8_scales(interpret_env, monkeypatch, kind):
    """fp8 with DeepGEMM block scales (each 128-deep k-step promoted into the fp32 sum, so a run's partial is
    its k-steps' scaled sum) and per row / column scales (applied to each partial: linear), runs crossing
    tiles."""
    from gluon.tuning.templates.gemm_sm90_fp8_scales import dequantized
    monkeypatch.setattr(host, "device_sms", lambda d: 5)
    g = torch.Generator().manual_seed(11)
    M, N, K = 200, 136, 1280
    a = (torch.randn(M, K, generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, generator=g) * 2).to(torch.float8_e4m3fn)
    if kind == "block":
        sa = torch.rand(M, K // 128, generator=g) * 2 + 0.25
        sb = torch.rand(-(-N // 128), K // 128, generator=g) * 2 + 0.25
        ref = dequantized(a, b, sa, sb)
    else:
        sa, sb = torch.rand(M, generator=g) + 0.5, torch.rand(N, generator=g) + 0.5
        ref = (a.double() * sa.double().reshape(-1, 1)) @ (b.double() * sb.double().reshape(-1, 1)).T
    c = torch.full((M, N), NAN).bfloat16()
    launch(a, b, c, dict(STREAM_K=True, BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, CONSUMER_WGS=1), b_kmajor=True,
           scale_a=sa, scale_b=sb)
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())


def test_a_dict_asking_for_stream_k_takes_the_pick_without_what_it_does_not_run_with():
    from gluon.kernels.gemm_sm90.config import resolve_config
    big = resolve_config(8192, 8192, 8192, 132, 2, True, {"STREAM_K": True})     # the pick has SPLIT_WGS, K_ZIGZAG
    assert big.STREAM_K and not big.SPLIT_WGS and not big.K_ZIGZAG
    deep = resolve_config(512, 512, 65536, 132, 2, True, {"STREAM_K": True})     # ... 2-CTA clusters
    assert deep.STREAM_K and deep.cluster_size == 1 and deep.BLOCK_N == 128
    with pytest.raises(GluonError, match="SPLIT_WGS=False"):                       # asked for together: refused
        resolve_config(8192, 8192, 8192, 132, 2, True, {"STREAM_K": True, "SPLIT_WGS": True})
