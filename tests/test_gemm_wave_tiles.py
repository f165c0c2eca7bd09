"""choose_config's tiles for problems of a few waves (`wave_config`): 192x128 on three warpgroups or 128x128 where
128x256 tiles leave the last round part empty, on both B layouts; the large shapes, fp8 and unaligned rows keep their
picks; the picked kernels right in the interpreter on a small device where the rule fires, off the tiles too."""
import pytest
import torch

from bench.gemm import SHAPES
from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, choose_config, host, launch, resolve_config
from gluon.kernels.gemm_sm90.geometry import slot_use
from gluon.kernels.gemm_sm90.picks import WAVE_CONFIGS, wave_config

TALL, SQUARE = WAVE_CONFIGS[0][0], WAVE_CONFIGS[1][0]


def _dims(s: str):
    return tuple(int(x) for x in s.split("x"))


def test_slot_use():
    assert slot_use(128 * 132, 256, DEFAULT_CONFIG, 132) == 1.0               # one full round
    assert slot_use(1536, 4096, DEFAULT_CONFIG, 132) == pytest.approx(192 / 264)   # 192 tiles in 2 rounds
    assert slot_use(100, 256, DEFAULT_CONFIG, 132) == pytest.approx(100 / 128 / 132)


@pytest.mark.parametrize("shape,want", [
    ("1536x4096x4096", TALL), ("2304x4096x4096", TALL), ("3072x3072x4096", TALL), ("1536x6144x4096", TALL),
    ("2560x4096x4096", SQUARE),
    ("4608x4096x4096", DEFAULT_CONFIG), ("1536x8192x8192", DEFAULT_CONFIG), ("8192x8192x8192", DEFAULT_CONFIG)])
def test_wave_config_at_measured_shapes(shape, want):
    M, N, _ = _dims(shape)
    assert wave_config(M, N, 132) == want


def test_picks_of_other_shapes_unchanged():
    """bench/gemm.py's large shapes, and rows off 128 bytes (their clusters), pick as without the rule."""
    for s in SHAPES + ["1000x3000x777", "2047x28673x4095", "1536x4100x4096"]:
        M, N, K = _dims(s)
        aligned = K * 2 % 128 == 0 and N * 2 % 128 == 0
        assert choose_config(M, N, K, 132, aligned) == choose_config(M, N, K, 132, aligned, wave_tiles=False), s


def test_fp8_and_fp32_out_keep_128x256():
    assert resolve_config(1536, 4096, 4096, 132, 2, True, None, in_size=1).BLOCK_N == 256
    assert resolve_config(1536, 4096, 4096, 132, 4, True, None).BLOCK_M == 128
    picked = resolve_config(1536, 4096, 4096, 132, 2, True, None)
    assert (picked.BLOCK_M, picked.BLOCK_N, picked.CONSUMER_WGS, picked.SPLIT_WGS) == (192, 128, 3, True)


@pytest.mark.parametrize("M,N,K,kmajor,want", [     # rows of 128-byte multiples: the rule is for aligned rows
    (384, 512, 128, False, TALL), (370, 512, 128, False, TALL), (370, 512, 192, True, TALL), (380, 512, 64, True, TALL),
    (512, 640, 128, False, SQUARE), (500, 576, 64, True, SQUARE)])
def test_picked_tiles_match_fp64(interpret_env, monkeypatch, M, N, K, kmajor, want):
    """`launch`'s own pick, on both B layouts."""
    monkeypatch.setattr(host, "device_sms", lambda d: 4)
    monkeypatch.setattr(host, "_PLANS", {})
    picked = resolve_config(M, N, K, 4, 2, True, None)
    assert (picked.BLOCK_M, picked.BLOCK_N, picked.CONSUMER_WGS) == (want.BLOCK_M, want.BLOCK_N, want.CONSUMER_WGS)
    g = torch.Generator().manual_seed(M + N + K)
    a = torch.randn(M, K, generator=g).to(torch.bfloat16)
    b = (torch.randn(N, K, generator=g) if kmajor else torch.randn(K, N, generator=g)).to(torch.bfloat16)
    c = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    launch(a, b, c, b_kmajor=kmajor)
    (plan,) = host._PLANS.values()
    assert plan.kw["CFG"] == picked
    ref = a.double() @ (b.double().T if kmajor else b.double())
    assert not c.isnan().any()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_c_rows_off_16_bytes(interpret_env, monkeypatch):
    """C's rows off 16 bytes (500 bf16): the picked 192x128 tiles store C by address ("coalesced"), no copy."""
    monkeypatch.setattr(host, "device_sms", lambda d: 4)
    monkeypatch.setattr(host, "_PLANS", {})
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(370, 128, generator=g).to(torch.bfloat16), torch.randn(500, 128, generator=g).to(torch.bfloat16)
    c = torch.full((370, 500), float("nan"), dtype=torch.bfloat16)
    launch(a, b, c, b_kmajor=True)
    (plan,) = host._PLANS.values()
    assert (plan.kw["CFG"].BLOCK_M, plan.kw["CFG"].CONSUMER_WGS, plan.kw["CFG"].EPILOGUE) == (192, 3, "coalesced")
    ref = a.double() @ b.double().T
    assert not c.isnan().any() and ((c.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_b_k_n_takes_the_pick(interpret_env, monkeypatch):
    monkeypatch.setattr(host, "device_sms", lambda d: 4)
    monkeypatch.setattr(host, "_PLANS", {})
    a, b = torch.randn(384, 128).to(torch.bfloat16), torch.randn(128, 512).to(torch.bfloat16)
    launch(a, b, torch.empty(384, 512, dtype=torch.bfloat16))
    (plan,) = host._PLANS.values()
    assert (plan.kw["CFG"].BLOCK_M, plan.kw["CFG"].BLOCK_N, plan.kw["CFG"].CONSUMER_WGS) == (192, 128, 3)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["1536x4096x4096", "2200x4096x4096", "2560x4096x4096", "3072x3072x1024",
                                   "1546x6144x4096", "1536x4100x4096"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("kmajor", [False, True])
def test_picked_tiles_on_the_gpu(shape, dtype, kmajor):
    """The picks on the H200 (132 SMs), off the tiles too (2200 and 1546 rows: 192 does not divide them; C's rows
    off 16 bytes at N = 4100, stored by address with B [N, K], padded with B [K, N]), each on
    fresh inputs against fp64 on a poisoned output, and the same bits on a second launch; `launch`'s own pick, and
    the plan ran what `resolve_config` picks."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    M, N, K = _dims(shape)
    dt = torch.bfloat16 if dtype == "bf16" else torch.float16
    g = torch.Generator(device="cuda").manual_seed(M + K)
    a = torch.randn(M, K, device="cuda", generator=g).to(dt)
    shape_b = (N, K) if kmajor else (K, N)
    b = torch.randn(*shape_b, device="cuda", generator=g).to(dt)
    outs = []
    for _ in range(2):
        c = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
        launch(a, b, c, b_kmajor=kmajor)
        outs.append(c)
    torch.cuda.synchronize()
    ref = a.double() @ (b.double().T if kmajor else b.double())
    assert not outs[0].isnan().any(), "some output elements were not written"
    assert ((outs[0].double() - ref).norm() / ref.norm()).item() < 1e-2
    assert torch.equal(outs[0], outs[1])
    if N % 64 == 0:                                 # (rows off 128 bytes: clusters, or padded operands)
        want = resolve_config(M, N, K, 132, 2, True, None)
        ran = {(p.kw["CFG"].BLOCK_M, p.kw["CFG"].BLOCK_N) for p in host._PLANS.values()}
        assert (want.BLOCK_M, want.BLOCK_N) in ran
