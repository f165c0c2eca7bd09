"""K_INTERLEAVE: split-K slices that take every SPLITS-th k-step (slice s: s, s + S, ...) instead of one contiguous
run. The check that cannot be fooled: with K's 64-column blocks permuted so that the interleaved slices hold the
contiguous slices' k-steps in the same order, the two launches give the same bits (the interpreter here, the GPU
in the marked tests); and the values against fp64 where K's steps do not divide evenly."""
import pytest
import torch

from gluon import DType
from gluon.ir import GluonError
from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, gemm_sm90, host, launch, num_warps, stand_ins
from gluon.kernels.gemm_sm90.config import DEEP_K_CONFIG

BK = 64


def _interleaved_order(k_tiles: int, splits: int) -> torch.Tensor:
    """The column order that puts the contiguous slices' k-steps where the interleaved slices load them: step
    j * splits + s of the permuted K is step s * (k_tiles // splits) + j of the original."""
    per = k_tiles // splits
    blocks = torch.empty(k_tiles, dtype=torch.long)
    for s in range(splits):
        for j in range(per):
            blocks[j * splits + s] = s * per + j
    return (blocks[:, None] * BK + torch.arange(BK)[None, :]).reshape(-1)


def _operands(M, N, K, kmajor, seed, device="cpu", dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g).to(dtype)
    b = torch.randn(N, K, generator=g).to(dtype) if kmajor else torch.randn(K, N, generator=g).to(dtype)
    return a.to(device), b.to(device)


def _run(a, b, kmajor, splits, interleave, **over):
    c = torch.full((a.shape[0], b.shape[0] if kmajor else b.shape[1]), float("nan"), dtype=a.dtype, device=a.device)
    launch(a, b, c, dict(over, K_INTERLEAVE=interleave), b_kmajor=kmajor, splits=splits)
    return c


def _same_bits_as_contiguous(M, N, K, kmajor, splits, device, **over):
    a, b = _operands(M, N, K, kmajor, M + N + K, device)
    order = _interleaved_order(K // BK, splits).to(device)
    contiguous = _run(a, b, kmajor, splits, False, **over)
    interleaved = _run(a[:, order].contiguous(), (b[:, order] if kmajor else b[order]).contiguous(), kmajor, splits,
                       True, **over)
    assert not interleaved.isnan().any()
    assert torch.equal(contiguous, interleaved)
    ref = a.double() @ (b.double().T if kmajor else b.double())
    assert ((interleaved.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_k_interleave_is_described_only_when_on_and_refused_with_block_scales():
    assert "K_INTERLEAVE" not in DEFAULT_CONFIG.describe()
    assert "K_INTERLEAVE=True" in DEEP_K_CONFIG.replace(K_INTERLEAVE=True).describe()
    cfg = DEFAULT_CONFIG.replace(BLOCK_K=128, BLOCK_N=128, CONSUMER_WGS=1, K_INTERLEAVE=True).resolve(2)
    with pytest.raises(GluonError, match="K_INTERLEAVE=True with fp8 block scales"):
        gemm_sm90.compile(*stand_ins(DType.f8e4m3, DType.bf16), num_warps=num_warps(cfg), CFG=cfg,
                          B_KMAJOR=True, SCALE="block")


@pytest.mark.parametrize("M,N,K,kmajor,splits,over", [
    (128, 256, 8 * 4 * BK, True, 4, {}),                                  # one tile row, the slices one unit each
    (200, 136, 6 * 3 * BK, False, 3, {}),                                 # partial tiles, B [K, N]
    (256, 256, 4 * 2 * BK, True, 2, dict(K_ZIGZAG=True)),                 # several units a program: odd ones top down
    (96, 128, 4 * 4 * BK, True, 4, dict(SPLITK_FIXUP=True, EPILOGUE="direct")),  # the last slice sums them
])
def test_interleaved_slices_give_the_contiguous_slices_bits(interpret_env, monkeypatch, M, N, K, kmajor, splits, over):
    monkeypatch.setattr(host, "device_sms", lambda d: 4)
    monkeypatch.setattr(host, "_PLANS", {})
    _same_bits_as_contiguous(M, N, K, kmajor, splits, "cpu", BLOCK_M=128, BLOCK_N=128, CONSUMER_WGS=1, CLUSTER_M=1,
                             SWAP_AB=False, **over)


@pytest.mark.parametrize("M,N,K,splits", [(128, 128, 1000, 3), (64, 200, 13 * BK, 4), (128, 128, 5 * BK + 8, 6)])
def test_uneven_interleaved_slices_against_fp64(interpret_env, monkeypatch, M, N, K, splits):
    """k-steps that do not divide among the slices (the first slices take one more) and a short last step."""
    monkeypatch.setattr(host, "device_sms", lambda d: 4)
    monkeypatch.setattr(host, "_PLANS", {})
    a, b = _operands(M, N, K, True, K)
    c = _run(a, b, True, splits, True, BLOCK_M=128, BLOCK_N=128, CONSUMER_WGS=1, CLUSTER_M=1, SWAP_AB=False,
             CLUSTER_K=1)
    ref = a.double() @ b.double().T
    assert not c.isnan().any()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_the_producer_loads_every_splits_th_k_step():
    """The PTX of the interleaved kernel multiplies the slice's step by the split count (one `mul` more than the
    contiguous kernel's address arithmetic) and compiles without spills."""
    out = {}
    for il in (False, True):
        cfg = DEEP_K_CONFIG.replace(K_INTERLEAVE=il).resolve(2)
        ck = gemm_sm90.compile(*stand_ins(DType.bf16, splits=8), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=True)
        assert ck.spills == 0
        out[il] = ck.asm["ptx"]
    assert out[True] != out[False]


GPU_CASES = [(512, 512, 8 * 32 * BK, True, 8, {}), (512, 512, 4 * 64 * BK, False, 4, {}),
             (1024, 512, 8 * 32 * BK, True, 8, {}), (200, 520, 4 * 64 * BK, True, 4, {}),
             (128, 512, 4 * 64 * BK, True, 4, dict(CLUSTER_M=1)),
             (64, 4096, 2 * 32 * BK, True, 2, dict(SWAP_AB=True, CLUSTER_K=2))]     # the decode pick's cluster sum


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,kmajor,splits,over", GPU_CASES)
def test_interleaved_slices_on_the_gpu(M, N, K, kmajor, splits, over):
    """The deep-K pick (2-CTA clusters sharing B where A has two tile rows) and the decode pick (K halves summed in
    a 2-CTA cluster) with interleaved slices: the contiguous pick's bits on the permuted operands, and fp64's
    values; then (no cluster sum) an uneven split count against fp64."""
    _same_bits_as_contiguous(M, N, K, kmajor, splits, "cuda", **over)
    if over.get("CLUSTER_K"):
        return
    a, b = _operands(M, N, K + 72, kmajor, 7, "cuda")
    c = _run(a, b, kmajor, splits - 1, True, **over)
    ref = a.double() @ (b.double().T if kmajor else b.double())
    assert not c.isnan().any() and ((c.double() - ref).norm() / ref.norm()).item() < 1e-2
