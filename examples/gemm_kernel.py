"""The SM90 GEMM template, runnable: C = A @ B with gluon.kernels.gemm_sm90 under any config.

    python examples/gemm_kernel.py                                   # 4096^3 fp16, the chosen config
    python examples/gemm_kernel.py --shape 4000x3000x5000 --dtype bf16 --set CLUSTER_M=2 --set STAGES=3
    python examples/gemm_kernel.py --b-col-major --out-dtype fp32 --set SPLIT_WGS=1

The kernel is written in the DSL in gluon/kernels/gemm_sm90/ (persistent, warp-specialized: a TMA
producer warp and cooperative WGMMA consumer warpgroups on mbarrier rings, optional 2-CTA clusters
with TMA multicast); `--set KEY=VALUE` overrides a field of its GemmConfig (config.py says what each
does), and `gluon tune specs/gemm_sm90.toml` searches them. With a GPU this script
checks the result against an fp64 product of the same inputs (output poisoned with NaN first) and
times it against torch.matmul (cuBLAS), L2 flushed, median of CUDA events. Without one it compiles the
config for sm_90 and prints what the machine code holds: registers, spills, shared memory, and the
HGMMA / TMA / setmaxnreg instructions, then checks a 256x256x192 case in the CPU interpreter
(`--interpret`: the given shape there). A config the passes reject (shared memory over capacity, a
register budget, a warp role off a warpgroup boundary, a swizzle that does not fit BLOCK_K) is
reported with the pass's message (or GemmConfig's, for a value the field does not take) and exit code 2.
"""
from __future__ import annotations

import argparse
import sys

from example_cli import add_interpret_flag, check_keys, interpreted, main_for, parse_sets

DTYPES = ("fp16", "bf16", "fp32")       # C's dtypes; A and B take the 16-bit ones (gluon.dtypes names them)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="4096x4096x4096", help="MxNxK (default 4096x4096x4096)")
    p.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16", help="A and B element type")
    p.add_argument("--out-dtype", choices=list(DTYPES), default=None, help="C element type (default: --dtype)")
    p.add_argument("--b-col-major", action="store_true", help="B given as [N, K] (column-major B)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key (BLOCK_N=128, STAGES=4, CLUSTER_M=2, EPILOGUE=direct, ...)")
    p.add_argument("--compile-only", action="store_true", help="compile and describe, even with a GPU")
    add_interpret_flag(p)
    args = p.parse_args(argv)
    try:
        args.M, args.N, args.K = (int(x) for x in args.shape.lower().split("x"))
    except ValueError:
        p.error(f"--shape {args.shape!r}: expected MxNxK, e.g. 4096x4096x4096")
    overrides = parse_sets(p, args.set)
    from gluon.kernels.gemm_sm90 import FIELDS
    if "B_KMAJOR" in overrides:                             # B's layout is --b-col-major
        p.error("--set B_KMAJOR: B's layout is an operand property here; give --b-col-major for a [N, K] B")
    check_keys(p, overrides, sorted(FIELDS))
    args.overrides = overrides
    args.out_dtype = args.out_dtype or args.dtype
    return args


def resolved_config(args, num_sms: int = 132):
    """The config `launch` would use for dense operands of this shape (choose_config clusters rows that
    do not start on 128-byte boundaries), the overrides on top."""
    from gluon.kernels.gemm_sm90 import resolve_config
    width = 2                                   # fp16 / bf16 operands
    aligned = args.K * width % 128 == 0 and (args.K if args.b_col_major else args.N) * width % 128 == 0
    return resolve_config(args.M, args.N, args.K, num_sms, 4 if args.out_dtype == "fp32" else 2, aligned,
                          args.overrides, b_kmajor=args.b_col_major)


def describe(args) -> int:
    """Compile for sm_90 without a GPU and print the machine code's resources."""
    from gluon import DType, GluonError
    from gluon.backend.machine_code import sass_instructions
    from gluon.kernels.gemm_sm90 import compile_config
    try:
        cfg = resolved_config(args)
        print("config:", cfg.describe())
        ck = compile_config(cfg, DType.from_name(args.dtype), DType.from_name(args.out_dtype), args.b_col_major)
    except GluonError as e:
        print(f"rejected before compilation: {e}", file=sys.stderr)
        return 2
    ops = sass_instructions(ck.sass())
    kinds = ("HGMMA", "UTMALDG", "UTMALDG.2D.MULTICAST", "UTMASTG", "USETMAXREG", "SYNCS.ARRIVE.TRANS64.RED")
    print(f"sm_90 binary: {ck.binary.num_warps} warps, {ck.registers} registers/thread, {ck.spills} spills, "
          f"{ck.shared_bytes} bytes of shared memory, clusters of {ck.binary.metadata.get('num_ctas', 1)}")
    print("SASS:", ", ".join(f"{k} x{ops[k]}" for k in kinds if ops[k]))
    return 0


def run(args) -> int:
    """Check against fp64 and time against cuBLAS on the GPU."""
    import torch
    from triton.testing import do_bench

    from gluon import GluonError
    from gluon.kernels.gemm_sm90 import launch
    from gluon.dtypes import DType
    in_dt, out_dt = DType.from_name(args.dtype).torch, DType.from_name(args.out_dtype).torch
    M, N, K = args.M, args.N, args.K
    a = torch.randn(M, K, device="cuda", dtype=in_dt)
    b = torch.randn(N, K, device="cuda", dtype=in_dt) if args.b_col_major else \
        torch.randn(K, N, device="cuda", dtype=in_dt)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=out_dt)
    try:
        cfg = resolved_config(args, torch.cuda.get_device_properties(0).multi_processor_count)
        print("config:", cfg.describe())
        launch(a, b, c, args.overrides or None, b_kmajor=args.b_col_major)
    except GluonError as e:
        print(f"rejected before compilation: {e}", file=sys.stderr)
        return 2
    torch.cuda.synchronize()
    ref = a.double() @ (b.double().T if args.b_col_major else b.double())
    unwritten = int(torch.isnan(c).sum())
    err = float((c.double() - ref).norm() / ref.norm())
    ok = unwritten == 0 and err <= 1e-2
    print(f"{M}x{N}x{K} {args.dtype}->{args.out_dtype}: relative error {err:.1e} vs fp64, "
          f"{unwritten} elements unwritten: {'ok' if ok else 'WRONG'}")
    bt = b.T if args.b_col_major else b
    base_c = torch.empty(M, N, device="cuda", dtype=a.dtype)      # cuBLAS writes the input dtype
    ours = do_bench(lambda: launch(a, b, c, args.overrides or None, b_kmajor=args.b_col_major), return_mode="median")
    base = do_bench(lambda: torch.matmul(a, bt, out=base_c), return_mode="median")
    tf = 2 * M * N * K / 1e9
    print(f"gluon {tf / ours:.0f} TFLOP/s, cuBLAS {tf / base:.0f} TFLOP/s: {base / ours:.3f}x "
          "(eager launches; bench/gemm.py --graph times GPU work alone)")
    return 0 if ok else 1


def interpret(args, full: bool) -> int:
    """The GPU run's check on the CPU, in the IR interpreter: at the given shape (`full`), or capped to
    256x256x192 (the fallback without a GPU: a few seconds)."""
    import torch

    from gluon.dtypes import DType
    from gluon.kernels.gemm_sm90 import launch
    M, N, K = (args.M, args.N, args.K) if full else (min(args.M, 256), min(args.N, 256), min(args.K, 192))
    in_dt, out_dt = DType.from_name(args.dtype).torch, DType.from_name(args.out_dtype).torch
    a = torch.randn(M, K, dtype=in_dt)
    b = torch.randn(N, K, dtype=in_dt) if args.b_col_major else torch.randn(K, N, dtype=in_dt)
    c = torch.full((M, N), float("nan"), dtype=out_dt)

    def check() -> int:
        launch(a, b, c, args.overrides or None, b_kmajor=args.b_col_major)
        ref = a.double() @ (b.double().T if args.b_col_major else b.double())
        unwritten = int(torch.isnan(c).sum())
        err = float((c.double() - ref).norm() / ref.norm())
        ok = unwritten == 0 and err <= 1e-2
        print(f"interpreted on the CPU: {M}x{N}x{K} {args.dtype}->{args.out_dtype}: relative error {err:.1e} vs "
              f"fp64, {unwritten} elements unwritten: {'ok' if ok else 'WRONG'}")
        return 0 if ok else 1
    return interpreted(check)


def main(argv=None) -> int:
    return main_for(parse_args(argv), run, describe, interpret)


if __name__ == "__main__":
    sys.exit(main())
