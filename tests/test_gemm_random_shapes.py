"""`launch` of the SM90 GEMM in the CPU interpreter on shapes drawn at random (fixed seeds), off the tiles: bf16,
fp16 (and an fp32 output), fp8 with per-tensor, row/column and block scales, both B layouts, with no config and
with a dict asking for SWAP_AB, on a device of 4 or 7 SMs so the picks change family (ordinary, swap,
split, clusters dropped by the interpreter). Each against fp64 on a poisoned output; none may be refused."""
import random

import pytest
import torch

from gluon.kernels.gemm_sm90 import host, launch
from gluon.tuning.templates.gemm_sm90_fp8_scales import dequantized

KINDS = ("bf16", "fp16", "fp16->fp32", "fp8-tensor", "fp8-rowcol", "fp8-block")
CONFIGS = (None, {"SWAP_AB": True})


def _case(rng: random.Random):
    kind = rng.choice(KINDS)
    M = rng.choice([1, 3, 8, 17, 33, 64, 100, 130, 200, 257])
    N = rng.choice([8, 24, 72, 136, 200, 264, 392])
    K = rng.choice([16, 40, 128, 200, 520, 1000, 1096])
    cfg = rng.choice(CONFIGS)
    if kind == "fp8-block" and cfg and cfg.get("SWAP_AB"):
        cfg = None                                          # block scales run unswapped
    return kind, M, N, K, rng.choice([False, True]), cfg


def _run(kind, M, N, K, kmajor, cfg, g):
    if not kind.startswith("fp8"):
        dt = torch.bfloat16 if kind == "bf16" else torch.float16
        K = K // 8 * 8
        a = torch.randn(M, K, generator=g).to(dt)
        b = (torch.randn(N, K, generator=g) if kmajor else torch.randn(K, N, generator=g)).to(dt)
        c = torch.full((M, N), float("nan"), dtype=torch.float32 if "fp32" in kind else dt)
        launch(a, b, c, cfg, b_kmajor=kmajor)
        return c, a.double() @ (b.double().T if kmajor else b.double())
    K = K // 16 * 16
    a = (torch.randn(M, K, generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, generator=g) * 2).to(torch.float8_e4m3fn)
    c = torch.full((M, N), float("nan")).bfloat16()
    if kind == "fp8-tensor":
        sa, sb = torch.rand(1, generator=g) + 0.5, torch.rand(1, generator=g) + 0.5
        ref = (a.double() * sa.double()) @ (b.double() * sb.double()).T
    elif kind == "fp8-rowcol":
        sa, sb = torch.rand(M, generator=g) + 0.5, torch.rand(N, generator=g) + 0.5
        ref = (a.double() * sa.double()[:, None]) @ (b.double() * sb.double()[:, None]).T
    else:
        KB, NB = -(-K // 128), -(-N // 128)
        sa, sb = torch.rand(M, KB, generator=g) * 2 + 0.25, torch.rand(NB, KB, generator=g) * 2 + 0.25
        ref = dequantized(a, b, sa, sb)
    launch(a, b, c, cfg, b_kmajor=True, scale_a=sa, scale_b=sb)
    return c, ref


@pytest.mark.parametrize("seed,sms", [(11, 4), (12, 7)])
def test_random_shapes_match_fp64(interpret_env, monkeypatch, seed, sms):
    monkeypatch.setattr(host, "device_sms", lambda d: sms)
    rng = random.Random(seed)
    for i in range(100):
        case = _case(rng)
        c, ref = _run(*case, torch.Generator().manual_seed(i))
        assert not c.isnan().any(), f"{case}: elements left unwritten"
        err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
        assert err < 2e-2, f"{case}: max error {err:.3g} of the largest value"
