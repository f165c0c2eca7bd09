"""FlashAttention forward on SM90, runnable: o = softmax(q k^T * scale) v with gluon.kernels.attention_sm90.

    python examples/flash_attn_kernel.py                                # B4 H16 S8192 D128 bf16
    python examples/flash_attn_kernel.py --shape 2x32x4096x64 --causal --dtype fp16
    python examples/flash_attn_kernel.py --set PINGPONG=false --set STAGES=2 --kv-heads 4

The kernel is written in the DSL in gluon/kernels/attention_sm90/ (warp-specialized: a TMA producer
warp streams K and V through an mbarrier ring; each consumer warpgroup owns 64 query rows, runs
S = Q K^T by WGMMA from shared memory, the online softmax in registers, and O += P V with P as WGMMA's
register operand). `--set KEY=VALUE` overrides a field of its AttentionConfig (config.py says what each
does), and `gluon tune specs/attention_sm90.toml` searches them. With a GPU this script checks the
result against an fp32 reference on the same inputs (output poisoned with NaN first) and times it
against torch SDPA's cuDNN and flash backends, L2 flushed, median of CUDA events. Without one it
compiles for sm_90 and prints what the machine code holds: registers, spills, shared memory, and the
WGMMA / TMA / setmaxnreg / exp2 instructions, then checks a B1 H2 S300 case in the CPU interpreter
(`--interpret`: the given shape there). A config the passes or AttentionConfig reject is reported
with their message and exit code 2.
"""
from __future__ import annotations

import argparse
import math
import sys

from example_cli import add_interpret_flag, check_keys, interpreted, main_for, parse_sets


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="4x16x8192x128", help="BxHxSxD (default 4x16x8192x128); D is 64, 128 or 256")
    p.add_argument("--kv-len", type=int, default=None, help="key/value length (default: S)")
    p.add_argument("--kv-heads", type=int, default=None, help="key/value heads, dividing H (grouped-query attention)")
    p.add_argument("--dtype", choices=["fp16", "bf16"], default="bf16")
    p.add_argument("--causal", action="store_true", help="causal mask, aligned bottom-right")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key (BLOCK_N=64, STAGES=3, OVERLAP=false, ...)")
    p.add_argument("--compile-only", action="store_true", help="compile and describe, even with a GPU")
    add_interpret_flag(p)
    args = p.parse_args(argv)
    try:
        args.B, args.H, args.S, args.D = (int(x) for x in args.shape.lower().split("x"))
    except ValueError:
        p.error(f"--shape {args.shape!r}: expected BxHxSxD, e.g. 4x16x8192x128")
    from gluon.kernels.attention_sm90 import FIELDS, HEAD_DIMS
    if args.D not in HEAD_DIMS:
        p.error(f"--shape: head dim {args.D} is not supported; use {' or '.join(map(str, HEAD_DIMS))}")
    args.kv_len = args.kv_len or args.S
    args.kv_heads = args.kv_heads or args.H
    if args.H % args.kv_heads:
        p.error(f"--kv-heads {args.kv_heads} must divide the {args.H} query heads")
    overrides = parse_sets(p, args.set)
    check_keys(p, overrides, FIELDS)
    args.overrides = overrides
    return args


def describe(args) -> int:
    """Compile for sm_90 without a GPU and print the machine code's resources."""
    from gluon import DType, GluonError
    from gluon.backend.machine_code import sass_instructions
    from gluon.kernels.attention_sm90 import compile_variant, default_config, to_config
    try:
        cfg = to_config(args.overrides, default_config(args.D))
        print("config:", cfg)
        ck = compile_variant(args.D, DType.from_name(args.dtype), args.causal, **args.overrides)
    except GluonError as e:
        print(f"rejected before compilation: {e}", file=sys.stderr)
        return 2
    ops = sass_instructions(ck.sass())
    kinds = [k for k in sorted(ops) if k.startswith("HGMMA.") and k.count(".") == 3] + \
        ["UTMALDG.2D", "USETMAXREG", "MUFU.EX2", "SYNCS.PHASECHK.TRANS64.TRYWAIT"]
    print(f"sm_90 binary: {ck.binary.num_warps} warps, {ck.registers} registers/thread at launch, {ck.spills} spills, "
          f"{ck.shared_bytes} bytes of shared memory")
    print("SASS:", ", ".join(f"{k} x{ops[k]}" for k in kinds if ops[k]))
    return 0


def run(args) -> int:
    """Check against fp32 and time against torch SDPA (cuDNN and flash backends) on the GPU."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    from gluon import GluonError
    from gluon.dtypes import DType
    from gluon.kernels.attention_sm90 import attention
    from gluon.kernels.attention_sm90.reference import reference
    dt = DType.from_name(args.dtype).torch
    B, H, S, D, Skv, HK = args.B, args.H, args.S, args.D, args.kv_len, args.kv_heads
    q = torch.randn(B, H, S, D, device="cuda", dtype=dt)
    k = torch.randn(B, HK, Skv, D, device="cuda", dtype=dt)
    v = torch.randn(B, HK, Skv, D, device="cuda", dtype=dt)
    out = torch.full_like(q, float("nan"))
    scale = 1 / math.sqrt(D)
    try:
        attention(q, k, v, causal=args.causal, scale=scale, config=args.overrides or None, out=out)
    except GluonError as e:
        print(f"rejected before compilation: {e}", file=sys.stderr)
        return 2
    torch.cuda.synchronize()
    heads = sorted({(0, 0), (B - 1, H - 1)})       # two heads against fp32 (a full reference is O(S^2) work)
    ref = reference(q, k, v, args.causal, scale, heads=heads)
    err = max(float((out[b, h].float() - ref[n]).abs().max() / ref[n].abs().max()) for n, (b, h) in enumerate(heads))
    unwritten = int(torch.isnan(out).sum())
    ok = unwritten == 0 and err <= 1e-2
    print(f"B{B} H{H}/{HK} S{S}/{Skv} D{D} {args.dtype}{' causal' if args.causal else ''}: relative error "
          f"{err:.1e} vs fp32, {unwritten} elements unwritten: {'ok' if ok else 'WRONG'}")
    flops = 4 * B * H * S * Skv * D / (2 if args.causal else 1) / 1e9
    ours = do_bench(lambda: attention(q, k, v, causal=args.causal, scale=scale, config=args.overrides or None),
                    return_mode="median")
    line = f"gluon {flops / ours:.0f} TFLOP/s"
    kr, vr = (k.repeat_interleave(H // HK, 1), v.repeat_interleave(H // HK, 1)) if HK != H else (k, v)
    for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        if args.causal and S != Skv:
            break                                   # SDPA's is_causal aligns top-left: not the same problem
        try:
            with sdpa_kernel(backend):
                t = do_bench(lambda: F.scaled_dot_product_attention(q, kr, vr, is_causal=args.causal, scale=scale),
                             return_mode="median")
            line += f", {name} {flops / t:.0f} TFLOP/s ({t / ours:.3f}x)"
        except RuntimeError as e:
            line += f", {name} unavailable ({str(e).splitlines()[0][:60]})"
    print(line + " (eager calls; bench/attention.py interleaves 1000 ms rounds)")
    return 0 if ok else 1


def interpret(args, full: bool) -> int:
    """The GPU run's check on the CPU, in the IR interpreter: at the given shape (`full`), or one batch of
    two heads (grouped as asked where they can be) of at most 300 queries and keys (the fallback without a
    GPU: a few seconds)."""
    import torch

    from gluon.dtypes import DType
    from gluon.kernels.attention_sm90 import attention
    from gluon.kernels.attention_sm90.reference import reference
    dt = DType.from_name(args.dtype).torch
    B, H, S, D, Skv, HK = args.B, args.H, args.S, args.D, args.kv_len, args.kv_heads
    if not full:
        B, S, Skv = 1, min(S, 300), min(Skv, 300)
        H, HK = (2, 1) if HK < H else (2, 2)
    q, k, v = torch.randn(B, H, S, D, dtype=dt), torch.randn(B, HK, Skv, D, dtype=dt), torch.randn(B, HK, Skv, D, dtype=dt)
    out = torch.full_like(q, float("nan"))
    scale = 1 / math.sqrt(D)

    def check() -> int:
        attention(q, k, v, causal=args.causal, scale=scale, config=args.overrides or None, out=out)
        ref = reference(q, k, v, args.causal, scale)
        err = float((out.float() - ref).abs().max() / ref.abs().max())
        unwritten = int(torch.isnan(out).sum())
        ok = unwritten == 0 and err <= 1e-2
        print(f"interpreted on the CPU: B{B} H{H}/{HK} S{S}/{Skv} D{D} {args.dtype}{' causal' if args.causal else ''}: "
              f"relative error {err:.1e} vs fp32, {unwritten} elements unwritten: {'ok' if ok else 'WRONG'}")
        return 0 if ok else 1
    return interpreted(check)


def main(argv=None) -> int:
    return main_for(parse_args(argv), run, describe, interpret)


if __name__ == "__main__":
    sys.exit(main())
