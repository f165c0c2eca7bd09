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
    p.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))
    p.add_argument("--ws-config", default="", help="our kernel's config keys, 'KEY=VALUE,...' (default: launch's pick)")
    p.add_argument("--triton-config", default="BM=128,BN=256,BK=64,GROUP_M=8,num_stages=4,num_warps=8",
                   help="plain Triton's tiles, stages and warps")
    args = p.parse_args()
    import torch
    import triton

    from bench.gemm import _parse_configs
    from bench.triton_matmul import _matmul
    from gluon.dtypes import DType
    from gluon.kernels.gemm_sm90 import launch

    M, N, K = (int(x) for x in args.shape.lower().split("x"))
    dt = DType.from_name(args.dtype).torch
    a = torch.randn(M, K, device="cuda", dtype=dt)
    b = torch.randn(K, N, device="cuda", dtype=dt)
    ref = a.double() @ b.double()
    tcfg = _parse_configs(args.triton_config)[0]
    meta = {k: v for k, v in tcfg.items() if k not in ("num_stages", "num_warps")}
    grid = (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)
    ws_cfg = _parse_configs(args.ws_config)[0] or None

    def ours(c):
        launch(a, b, c, ws_cfg)

    def plain_triton(c):
        _matmul.fn[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                         num_stages=tcfg["num_stages"], num_warps=tcfg["num_warps"], **meta)

    def cublas(c):
        torch.matmul(a, b, out=c)

    for name, fn in (("ours", ours), ("plain_triton", plain_triton), ("cublas", cublas)):
        c = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
        fn(c)
        torch.cuda.synchronize()
        err = ((c.double() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:                       # NaN too: an element left unwritten
            print(f"{name}: wrong result (relative error {err:.2e})", file=sys.stderr)
            return 1
        print(f"{name}: ok, relative error {err:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
