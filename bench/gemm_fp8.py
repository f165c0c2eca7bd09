"""fp8 GEMM: `gemm_sm90.launch` with fp8 inputs against torch._scaled_mm (cuBLASLt), in the same run.

    python3 bench/gemm_fp8.py [--shapes llm|decode|4096x4096x4096,...] [--fp8 e4m3,e5m2] [--scales tensor,rowcol,block]
                              [--graph] [--configs ';MMA_TURNS=True,SPLIT_WGS=True'] [--scale-a-m-major] [--repeats 3]
                              [--round-ms 1000] [--json out.json]

A is [M, K] and B [N, K] (K-major: nn.Linear's weight, what _scaled_mm takes as `b.t()`), quantized from
random fp32 with absmax scales: per tensor, per row / per column, or per block as DeepSeek's DeepGEMM
(A per row and 128 of K, B per 128 x 128 block; shapes whose N and K are multiples of 128); bf16 output.
Each case is checked first against fp64 of the same dequantized operands (output poisoned with NaN), then
timed interleaved with torch._scaled_mm (median of CUDA-event timings, L2 flushed; ratio = its time / ours).
Block scales: _scaled_mm's own blockwise scaling where this torch and cuBLASLt take it (each scale layout
it may want is tried and checked against the reference), else its per-row/column scaling of the same
operands (the `baseline` column says which). --configs times several GemmConfig overrides, each checked and
timed against the same baseline (an empty entry: the launch's own pick). TFLOP/s counts 2*M*N*K. --json is
rewritten (atomically) after every row.
"""
from __future__ import annotations

import os
import sys

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.common import environment, graphed, interleaved, need_gpu, parser, table, write_json  # noqa: E402
from bench.gemm import DECODE_SHAPES, _parse_configs  # noqa: E402

SHAPES = ["4096x4096x4096", "8192x8192x8192", "16384x8192x1024", "8192x28672x4096", "8192x4096x14336",
          "4096x14336x4096"]
SHAPE_SETS = {"llm": SHAPES, "decode": DECODE_SHAPES}      # decode: bench/gemm.py's (M of 1 to 128; N, K by 128)


def _quantized(x, dtype, per_row: bool):
    """x as `dtype` with absmax scales (fp32): one per row, or one for the tensor."""
    import torch
    fmax = torch.finfo(dtype).max
    amax = x.abs().amax(dim=1, keepdim=True) if per_row else x.abs().amax().reshape(1, 1)
    s = (amax.float() / fmax).clamp(min=1e-12)
    return (x / s).to(dtype), s


def _block_quantized(x, dtype, rows: int):
    """x [R, K] (R a multiple of `rows`, K of 128) as `dtype` with one absmax scale per `rows` x 128 block:
    (quantized, scales [R / rows, K / 128], the scales expanded to x's shape)."""
    import torch
    R, K = x.shape
    blocks = x.reshape(R // rows, rows, K // 128, 128)
    s = (blocks.abs().amax(dim=(1, 3)).float() / torch.finfo(dtype).max).clamp(min=1e-12)
    full = s.repeat_interleave(rows, dim=0).repeat_interleave(128, dim=1)
    return (x / full).to(dtype), s, full


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--shapes", default="llm", help="MxNxK list, or named sets: 'llm' (the default: 4096^3, 8192^3 "
                   "and LLM prefill shapes), 'decode' (M of 1 to 128 against N, K of 4096 to 28672)")
    p.add_argument("--fp8", default="e4m3", help="comma list of e4m3, e5m2")
    p.add_argument("--scales", default="tensor,rowcol,block", help="comma list of tensor, rowcol, block")
    p.add_argument("--graph", action="store_true", help="time CUDA-graph replays (GPU time without host cost)")
    p.add_argument("--configs", default="", help="GemmConfig overrides to time, ';' between configs, each a row "
                   "against the same baseline (';MMA_TURNS=True,SPLIT_WGS=True': the default, then with turns); "
                   "a config a case cannot take is a skipped row, and the exit code 1")
    p.add_argument("--scale-a-m-major", action="store_true", help="block scales: pass our launch scale_a M-major "
                   "(strides (1, M), torch._scaled_mm's blockwise layout) instead of contiguous")
    args = p.parse_args()
    configs = _parse_configs(args.configs)
    need_gpu("bench/gemm_fp8.py")
    import torch
    from gluon.ir import GluonError
    from gluon.kernels.gemm_sm90 import launch
    from gluon.tuning.templates.gemm_sm90_fp8_scales import scaled_mm_blockwise
    dts = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    rows, meta = [], dict(environment(), complete=False)
    for shape in [x for name in args.shapes.split(",") for x in SHAPE_SETS.get(name, [name])]:
        M, N, K = map(int, shape.split("x"))
        for fp8 in args.fp8.split(","):
            for mode in args.scales.split(","):
                dt, per_row = dts[fp8], mode != "tensor"
                base_c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
                if mode == "block":
                    a, sa_k, sa_full = _block_quantized(torch.randn(M, K, device="cuda"), dt, 1)
                    b, sb_k, sb_full = _block_quantized(torch.randn(N, K, device="cuda"), dt, 128)
                    ref = (a.double() * sa_full.double()) @ (b.double() * sb_full.double()).T
                    theirs = scaled_mm_blockwise(a, b, sa_k, sb_k, base_c, ref)
                    baseline = "scaled_mm blockwise"
                    if args.scale_a_m_major:
                        sa_k = sa_k.t().contiguous().t()
                    if theirs is None:            # the same operands through _scaled_mm's per-row/column scaling
                        sa, sb = sa_full.amax(dim=1, keepdim=True), sb_full.amax(dim=1, keepdim=True)
                        baseline = "scaled_mm rowwise"
                else:
                    a, sa = _quantized(torch.randn(M, K, device="cuda"), dt, per_row)
                    b, sb = _quantized(torch.randn(N, K, device="cuda"), dt, per_row)
                    ref = (a.double() * sa.double()) @ (b.double() * sb.double()).T
                    sa_k, sb_k = sa.reshape(-1).contiguous(), sb.reshape(-1).contiguous()
                    theirs, baseline = None, "scaled_mm"
                if theirs is None:
                    sbt = sb.reshape(1, -1) if per_row else sb.reshape(())
                    sat = sa if per_row else sa.reshape(())
                    theirs = lambda: torch._scaled_mm(a, b.t(), scale_a=sat, scale_b=sbt,  # noqa: E731
                                                      out_dtype=torch.bfloat16, out=base_c)
                theirs()
                torch.cuda.synchronize()
                t_err = ((base_c.double() - ref).norm() / ref.norm()).item() if baseline != "scaled_mm rowwise" \
                    else float("nan")         # other scales: not this product
                timed_theirs = graphed(theirs) if args.graph else theirs
                for cfg in configs:
                    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                    kw = dict(config=cfg) if cfg else {}
                    try:
                        launch(a, b, c, b_kmajor=True, scale_a=sa_k, scale_b=sb_k, **kw)
                    except GluonError as e:   # a config this case cannot take: a row saying so (as bench/gemm.py)
                        print(f"{shape} {fp8} {mode} {cfg or 'default'}: skipped: {str(e).splitlines()[0]}", flush=True)
                        rows.append(dict(shape=[M, N, K], shape_s=shape, fp8=fp8, scales=mode, config=cfg,
                                         skipped=str(e), ok=False))
                        write_json(args.json, rows, meta)
                        continue
                    torch.cuda.synchronize()
                    err = ((c.double() - ref).norm() / ref.norm()).item()
                    ours = lambda: launch(a, b, c, b_kmajor=True, scale_a=sa_k, scale_b=sb_k, **kw)  # noqa: E731
                    r = interleaved(graphed(ours) if args.graph else ours, timed_theirs, args.repeats, args.round_ms)
                    flops = 2 * M * N * K
                    r.update(shape=[M, N, K], shape_s=shape, fp8=fp8, scales=mode, config=cfg,
                             config_s=",".join(f"{k}={v}" for k, v in cfg.items()) or "default", baseline=baseline,
                             graph=args.graph, rel_err=err, scaled_mm_rel_err=t_err, tflops=flops / r["time_ms"] / 1e9,
                             scaled_mm_tflops=flops / r["baseline_ms"] / 1e9, ok=err <= 1e-2)
                    rows.append(r)
                    write_json(args.json, rows, meta)
                    print(f"{shape} {fp8} {mode} {r['config_s']}: {r['tflops']:.0f} TFLOP/s, _scaled_mm "
                          f"{r['scaled_mm_tflops']:.0f} -> {r['ratio']:.3f}x, rel err {err:.1e} (theirs {t_err:.1e})"
                          f"{'' if r['ok'] else '  WRONG'}", flush=True)
    meta["complete"] = True
    write_json(args.json, rows, meta)
    print(f"\nfp8 GEMM on {meta['device']} (commit {meta['commit']}); ratio = torch._scaled_mm time / ours")
    print(table([r for r in rows if "skipped" not in r],
                [("MxNxK", "shape_s", ""), ("fp8", "fp8", ""), ("scales", "scales", ""), ("config", "config_s", ""),
                 ("TFLOP/s", "tflops", ".0f"), ("_scaled_mm", "scaled_mm_tflops", ".0f"), ("baseline", "baseline", ""),
                 ("ratio", "ratio", ".3f"), ("rel err", "rel_err", ".1e")]))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
