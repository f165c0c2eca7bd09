"""One launch each of our GEMM, plain Triton's and cuBLAS's on one problem, for Nsight Compute to profile
side by side (where the time goes when the ratios alone do not say: throughput of L2, DRAM, the tensor
pipes, warp stalls).

    ncu --clock-control none -k regex:'gemm_sm90|_matmul|nvjet' \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \\
        python3 bench/ncu_gemm.py --shape 2048x2048x2048 --dtype fp16 [--ws-config KEY=VALUE,...]

Each kernel runs once (ncu flushes the caches before each profiled pass anyway) and its output is
checked against an fp64 reference, so a profile is never of a wrong kernel. Plain Triton
runs the config given by --triton-config (default: its pick at 2048^3 on the H200, docs/PERF.md)
without autotuning, so the profile holds no tuning launches. (cuBLAS's H200 fp16/bf16 GEMMs are
`nvjet_*` kernels; a filter on `sm90_xmma` would also catch the fp64 reference's `sm90_xmma_gemm_f64*`.)

`--dtype e4m3` / `e5m2` profiles the fp8 GEMM instead (B [N, K], a bf16 C) against torch._scaled_mm with the
same scales (`--scales tensor`, or `block`: DeepGEMM's 1x128 / 128x128 blocks against _scaled_mm's blockwise
kernel, `nvjet_*_Ablk128_*` on the H100), checked against the dequantized fp64 product; plain Triton is left out.
With block scales cuBLAS's kernel also runs once before (finding the scale layout this torch takes): a profile
filtered on `nvjet` holds two of its launches, the second the checked one.
"""
from __future__ import annotations

import argparse
import os
import sys

# the repo root instead of bench/ on the path: bench/copy.py must not shadow the stdlib `copy`
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="2048x2048x2048", help="MxNxK")
    p.add_argument("--dtype", default="fp16", choices=("fp16", "bf16", "e4m3", "e5m2"))
    p.add_argument("--scales", default="tensor", choices=("tensor", "block"), help="fp8 only: the scales' kind")
    p.add_argument("--ws-config", default="", help="our kernel's config keys, 'KEY=VALUE,...' (default: launch's pick)")
    p.add_argument("--triton-config", default="BM=128,BN=256,BK=64,GROUP_M=8,num_stages=4,num_warps=8",
                   help="plain Triton's tiles, stages and warps")
    args = p.parse_args()
    from bench.common import need_gpu
    need_gpu("bench/ncu_gemm.py")
    import torch

    from bench.gemm import _parse_configs
    M, N, K = (int(x) for x in args.shape.lower().split("x"))
    ws_cfg = _parse_configs(args.ws_config)[0] or None
    fp8 = args.dtype in ("e4m3", "e5m2")
    kernels, ref, out_dtype = (_fp8_kernels if fp8 else _16bit_kernels)(torch, args, M, N, K, ws_cfg)
    for name, fn in kernels:
        c = torch.full((M, N), float("nan"), device="cuda", dtype=out_dtype)
        fn(c)
        torch.cuda.synchronize()
        err = ((c.double() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:                       # NaN too: an element left unwritten
            print(f"{name}: wrong result (relative error {err:.2e})", file=sys.stderr)
            return 1
        print(f"{name}: ok, relative error {err:.1e}", flush=True)
    return 0


def _16bit_kernels(torch, args, M: int, N: int, K: int, ws_cfg):
    """Ours, plain Triton's and cuBLAS's GEMM of fresh fp16/bf16 operands (B [K, N]): ([(name, fn(c))], the fp64
    reference, C's dtype)."""
    import triton

    from bench.gemm import _parse_configs
    from bench.triton_matmul import _matmul
    from gluon.dtypes import DType
    from gluon.kernels.gemm_sm90 import launch
    dt = DType.from_name(args.dtype).torch
    a = torch.randn(M, K, device="cuda", dtype=dt)
    b = torch.randn(K, N, device="cuda", dtype=dt)
    tcfg = _parse_configs(args.triton_config)[0]
    meta = {k: v for k, v in tcfg.items() if k not in ("num_stages", "num_warps")}
    grid = (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)

    def ours(c):
        launch(a, b, c, ws_cfg)

    def plain_triton(c):
        _matmul.fn[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                         num_stages=tcfg["num_stages"], num_warps=tcfg["num_warps"], **meta)

    def cublas(c):
        torch.matmul(a, b, out=c)
    return [("ours", ours), ("plain_triton", plain_triton), ("cublas", cublas)], a.double() @ b.double(), dt


def _fp8_kernels(torch, args, M: int, N: int, K: int, ws_cfg):
    """Ours and torch._scaled_mm's fp8 GEMM of fresh operands quantized as bench/gemm_fp8.py does (B [N, K], C
    bf16), with per-tensor or block scales: ([(name, fn(c))], the dequantized fp64 reference, C's dtype)."""
    from bench.gemm_fp8 import _block_quantized, _quantized
    from gluon.kernels.gemm_sm90 import launch
    from gluon.tuning.templates.gemm_sm90_fp8_scales import scaled_mm_blockwise
    dt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[args.dtype]
    if args.scales == "block":
        a, sa, sa_full = _block_quantized(torch.randn(M, K, device="cuda"), dt, 1)
        b, sb, sb_full = _block_quantized(torch.randn(N, K, device="cuda"), dt, 128)
        ref = (a.double() * sa_full.double()) @ (b.double() * sb_full.double()).T
        probe = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        theirs = scaled_mm_blockwise(a, b, sa, sb, probe, ref)    # the layout this torch takes, found once
        if theirs is None:
            raise SystemExit("ncu_gemm: this torch's _scaled_mm takes no blockwise scales")

        def cublas(c):                           # into its own output, copied to c for the check
            theirs()
            c.copy_(probe)
    else:
        a, sa_t = _quantized(torch.randn(M, K, device="cuda"), dt, False)
        b, sb_t = _quantized(torch.randn(N, K, device="cuda"), dt, False)
        ref = (a.double() * sa_t.double()) @ (b.double() * sb_t.double()).T
        sa, sb = sa_t.reshape(-1).contiguous(), sb_t.reshape(-1).contiguous()      # ours: one-element vectors

        def cublas(c):
            torch._scaled_mm(a, b.t(), scale_a=sa_t.reshape(()), scale_b=sb_t.reshape(()), out_dtype=torch.bfloat16,
                             out=c)

    def ours(c):
        launch(a, b, c, ws_cfg, b_kmajor=True, scale_a=sa, scale_b=sb)
    return [("ours", ours), ("cublas", cublas)], ref, torch.bfloat16


if __name__ == "__main__":
    sys.exit(main())
