"""GEMM: gluon kernels against cuBLAS (torch.matmul) and plain autotuned Triton, in the same run.

    python bench/gemm.py [--kernels tile] [--dtypes fp16,bf16] [--shapes 8192x8192x8192,...|llm|decode|deepk|shallowk|waves|unaligned]
                         [--b-layout kn|nk] [--graph] [--json out.json] [--out-dtype fp32] [--chain N]

Each (kernel, shape, dtype) is first checked against an fp64 reference on fresh random inputs with the
output poisoned (NaN), then timed interleaved with cuBLAS (median ratio over --repeats rounds), and
again interleaved with plain Triton (autotuned first; its pick is in each row's `triton_config`).
TFLOP/s counts 2*M*N*K. With --out-dtype fp32 the output is fp32 (fp32 accumulation written as is) and
the cuBLAS baseline is `torch.mm(a, b, out_dtype=torch.float32)`, the same GEMM with an fp32 output.
Eager runs (no --graph) also report each side's host time per call (`host_us`, `cublas_host_us`: 200
calls back to back on the CPU clock, bench/common.py `host_us_per_call`). --chain N times N GEMMs back
to back per call on both sides, each with its own B (a model's layers), and reports per GEMM. --json is
rewritten (atomically) after every row, its meta.complete false until the run ends: a run stopped by a time
limit keeps the rows it finished.
"""
from __future__ import annotations

import math
import os
import sys
from typing import Callable

# the repo root instead of bench/ on the path: bench/copy.py must not shadow the stdlib `copy`
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.common import (environment, graphed, host_us_per_call, interleaved, need_gpu,  # noqa: E402
                          parse_config, parser, table, write_json)

SHAPES = ["8192x8192x8192", "4096x4096x4096", "2048x2048x2048", "16384x8192x1024", "8192x28672x4096",
          "128x8192x8192", "1000x1000x1000", "3000x2000x1500", "333x200x136", "4000x3000x5000"]
# decode-like problems: M tokens against an LLM's projection weights (N, K from 4096 to 28672)
DECODE_SHAPES = [f"{m}x{nk}" for nk in ("4096x4096", "28672x4096", "4096x14336", "8192x28672", "14336x4096")
                 for m in (1, 8, 16, 32, 64, 128)]
# few output tiles over a deep K (M, N <= 1024, K >= 32768), and shallow K (K <= 128)
DEEPK_SHAPES = ["512x512x16384", "512x512x65536", "1024x1024x32768", "1024x1024x65536", "256x1024x65536",
                "1024x512x32768", "768x768x49152", "640x640x32768", "384x1024x65536"]
SHALLOWK_SHAPES = ["8192x8192x64", "8192x8192x128", "4096x4096x64", "16384x16384x128", "4096x28672x128",
                   "16384x4096x96"]
# rows of A, B or C off 16-byte boundaries (the launch pads A and B, stores C by address); cuBLAS takes >= 20 us on
# each; the last an LM head over GPT-2's vocabulary (with --b-layout nk only C's rows are off)
UNALIGNED_SHAPES = ["1000x3000x777", "4095x4097x1023", "8191x8191x1001", "3000x5003x4001", "2047x28673x4095",
                    "4096x50257x4096"]
# prefill chunks of a few waves of 128x256 tiles (choose_config's `wave_config` there), 2200 and 1546 rows off the
# tiles, and two of many waves where 128x256 stays
WAVES_SHAPES = ["1536x4096x4096", "2200x4096x4096", "2560x4096x4096", "3072x3072x4096", "1536x6144x4096",
                "1546x6144x4096", "4608x4096x4096", "1536x8192x8192"]
SHAPE_SETS = {"llm": SHAPES, "decode": DECODE_SHAPES, "deepk": DEEPK_SHAPES, "shallowk": SHALLOWK_SHAPES,
              "waves": WAVES_SHAPES, "unaligned": UNALIGNED_SHAPES}


def _parse_configs(text: str) -> list[dict]:
    """'BLOCK_N=256,STAGES=3;EPILOGUE=direct' -> [{'BLOCK_N': 256, 'STAGES': 3}, {'EPILOGUE': 'direct'}];
    ';SPLIT_WGS=True' -> [{}, {'SPLIT_WGS': True}] (True/False are booleans: the string 'False' is truthy)"""
    return [parse_config(part) for part in text.split(";")]    # an empty part is the default config


def config_name(kernel: str, cfg: dict) -> str:
    """'ws', {'STAGES': 4} -> 'ws[STAGES=4]' (the name --kernels selects and the tables print); an
    empty config is the kernel's default: 'ws'."""
    return kernel + "[" + ",".join(f"{k}={v}" for k, v in cfg.items()) + "]" if cfg else kernel


def _split_names(text: str) -> list[str]:
    """'ws,ws[A=1,B=2]' -> ['ws', 'ws[A=1,B=2]']: commas inside brackets belong to a config."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [n for n in out + [cur] if n]


def _selected(name: str, kernels: dict) -> list[str]:
    """The kernels a --kernels name selects: a kernel's name ('ws', 'tile') every config of it (its default and
    its --ws-configs / --tile-configs entries), a config's name ('ws[STAGES=4]') that one; [] if none."""
    if name in ("ws", "tile"):
        return [k for k in kernels if k == name or k.startswith(name + "[")]
    return [name] if name in kernels else []


def _kernels(ws_configs: list[dict], tile_configs: list[dict] = ({},), b_kmajor: bool = False):
    """name -> launch(a, b, c): the gluon GEMMs this bench knows (b [N, K] with b_kmajor: the one-tile
    kernel takes [K, N] only, so it is left out)."""
    from gluon.kernels.gemm_sm90 import launch as ws_launch
    from gluon.kernels.gemm_tile_sm90 import launch as tile_launch
    ks = {}
    for cfg in () if b_kmajor else tile_configs:
        ks[config_name("tile", cfg)] = (lambda cfg: lambda a, b, c: tile_launch(a, b, c, **cfg))(cfg)
    for cfg in ws_configs:
        # the default as None, as a user calls it; a named config as the dict of its overrides (a repeat of either
        # takes the prepared launch, so the eager host time is the one users get)
        kcfg = {k: v for k, v in cfg.items() if k != "SPLIT_K"} or None
        splits = cfg.get("SPLIT_K")
        ks[config_name("ws", cfg)] = (lambda kcfg, splits: lambda a, b, c: ws_launch(
            a, b, c, kcfg, b_kmajor=b_kmajor, splits=splits))(kcfg, splits)
    return ks


def _cublas(a, b, c):
    """torch's cuBLAS GEMM writing c: torch.matmul for an output of the inputs' type, torch.mm with
    out_dtype for an fp32 one (fp16/bf16 inputs, fp32 accumulation and output in one cuBLAS call)."""
    import torch
    if c.dtype == a.dtype:
        return lambda: torch.matmul(a, b, out=c)
    try:
        torch.mm(a, b, out_dtype=c.dtype, out=c)
        return lambda: torch.mm(a, b, out_dtype=c.dtype, out=c)
    except (TypeError, RuntimeError):       # no out= overload: a fresh output per call (the graph's pool)
        return lambda: torch.mm(a, b, out_dtype=c.dtype)


def _chained(calls: list[Callable[[], None]]) -> Callable[[], None]:
    """One call that makes `calls` back to back."""
    def run():
        for call in calls:
            call()
    return run


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--kernels", default="all", help="comma list of gluon kernels (default: all known): 'ws' or "
                   "'tile' is every config of that kernel (the default and its --ws-configs / --tile-configs), "
                   "'ws[KEY=VALUE,...]' one of them")
    p.add_argument("--dtypes", default="fp16,bf16")
    p.add_argument("--shapes", default="llm", help="MxNxK list, or named sets: 'llm' (the default, large "
                   "shapes), 'decode' (M of 1 to 128 against N, K of 4096 to 28672), 'deepk' (M, N <= 1024, K >= "
                   "32768), 'shallowk' (K <= 128), 'waves' (prefill shapes of a few waves), 'unaligned' (rows "
                   "off 16-byte boundaries)")
    p.add_argument("--b-layout", choices=("kn", "nk"), default="kn", help="B as [K, N] row-major (default), or "
                   "[N, K] (nn.Linear's weight: C = A @ B.T, the kernel's B_KMAJOR)")
    p.add_argument("--out-dtype", choices=("same", "fp32"), default="same",
                   help="C's element type: the inputs' (default) or fp32 (plain Triton is then skipped)")
    p.add_argument("--no-triton", action="store_true", help="skip the plain Triton baseline")
    p.add_argument("--graph", action="store_true", help="time CUDA-graph replays of every candidate and baseline "
                   "(GPU time without host launch overhead; matters below ~50 us per GEMM)")
    p.add_argument("--ws-configs", default="", help="configs of the persistent warp-specialized kernel, "
                   "';'-separated, each 'KEY=VALUE,...' (an empty one is the default config; SPLIT_K=n forces n "
                   "K slices)")
    p.add_argument("--chain", type=int, default=1, metavar="N", help="time N GEMMs back to back per call, each "
                   "with its own B (a model's layers: the weights come from DRAM each time), both sides; TFLOP/s "
                   "and ratios per GEMM. What a programmatic dependent launch (PDL=True) overlaps")
    p.add_argument("--tile-configs", default="", help="configs of the one-tile-per-program kernel (gemm_tile_sm90), "
                   "';'-separated, each 'KEY=VALUE,...' (BLOCK_M/N/K, STAGES, WARPS); an empty one is its default")
    args = p.parse_args()
    if args.chain < 1:
        p.error(f"--chain {args.chain}: the number of GEMMs a call runs back to back, 1 or more")
    import torch

    from bench.triton_matmul import best_config as triton_config
    from bench.triton_matmul import matmul as triton_matmul
    from gluon.dtypes import DType
    from gluon.ir import GluonError
    from gluon.runtime import LaunchError
    kmajor = args.b_layout == "nk"
    kernels = _kernels(_parse_configs(args.ws_configs) if args.ws_configs else [{}],
                       _parse_configs(args.tile_configs) if args.tile_configs else [{}], kmajor)
    asked = list(kernels) if args.kernels == "all" else _split_names(args.kernels)
    unknown = [n for n in asked if not _selected(n, kernels)]
    if unknown:
        p.error(f"unknown kernels {unknown}: known are {list(kernels)} (a ws[...] name must match a --ws-configs entry)")
    names = list(dict.fromkeys(k for n in asked for k in _selected(n, kernels)))
    need_gpu("bench/gemm.py")       # (after the arguments: a wrong one says so, exit 2, with or without a GPU)
    dts = {n: DType.from_name(n).torch for n in ("fp16", "bf16")}
    rows = []
    meta = dict(environment(), complete=False)     # --json is rewritten (atomically) after every row
    shapes = [x for name in args.shapes.split(",") for x in SHAPE_SETS.get(name, [name])]
    for shape in shapes:
        M, N, K = map(int, shape.split("x"))
        flops = 2 * M * N * K
        for dn in args.dtypes.split(","):
            dt = dts[dn]
            a = torch.randn(M, K, device="cuda", dtype=dt)
            b = torch.randn(*((N, K) if kmajor else (K, N)), device="cuda", dtype=dt)
            bv = b.T if kmajor else b                   # the [K, N] operand cuBLAS and Triton take (a view)
            chain_b = [b] + [torch.randn_like(b) for _ in range(args.chain - 1)]     # --chain: a B per GEMM
            ref = (a.double() @ bv.double())
            out_dt = torch.float32 if args.out_dtype == "fp32" else dt
            base_c = torch.empty(M, N, device="cuda", dtype=out_dt)
            tri_fn = tri_err = tri_cfg = None
            if not args.no_triton and out_dt == dt and args.chain == 1:
                tc = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
                triton_matmul(a, bv, tc)                 # autotunes on the first call
                tri_err = ((tc.double() - ref).norm() / ref.norm()).item()
                tri_cfg = triton_config()
                tri_fn = lambda: triton_matmul(a, bv, tc)  # noqa: E731
                if args.graph:
                    tri_fn = graphed(tri_fn)
            for name in names:
                launch = kernels[name]
                c = torch.full((M, N), float("nan"), device="cuda", dtype=out_dt)
                try:
                    launch(a, b, c)
                except (LaunchError, GluonError) as e:  # strides TMA cannot describe; a config that does not fit
                    print(f"{name} {shape} {dn}: skipped: {str(e).splitlines()[0]}", flush=True)
                    rows.append({"kernel": name, "shape": [M, N, K], "shape_s": shape, "dtype": dn, "config": name,
                                 "skipped": str(e), "ok": False})
                    write_json(args.json, rows, meta)
                    continue
                torch.cuda.synchronize()
                unwritten = int(torch.isnan(c).sum().item())
                err = ((c.double() - ref).norm() / ref.norm()).item()
                ours, theirs = (lambda: launch(a, b, c)), _cublas(a, bv, base_c)
                if args.chain > 1:
                    ours, theirs = _chained([lambda bi=bi: launch(a, bi, c) for bi in chain_b]), _chained(
                        [_cublas(a, bi.T if kmajor else bi, base_c) for bi in chain_b])
                host = None
                if args.graph:
                    ours, theirs = graphed(ours), graphed(theirs)
                else:                           # eager: what a caller pays per call on the CPU, both sides
                    host = (host_us_per_call(ours) / args.chain, host_us_per_call(theirs) / args.chain)
                r = interleaved(ours, theirs, args.repeats, args.round_ms)
                if args.chain > 1:              # per GEMM, as the rest of the row (rounds_ms stay per call)
                    r.update(time_ms=r["time_ms"] / args.chain, baseline_ms=r["baseline_ms"] / args.chain)
                # plain Triton in rounds of its own against the same candidate: at the power cap one
                # timing of it would carry the run's clock drift into "vs Triton"
                tri = interleaved(ours, tri_fn, args.repeats, args.round_ms) if tri_fn else None
                tri_ms = tri["baseline_ms"] if tri else None
                r.update({"kernel": name, "graph": args.graph, "shape": [M, N, K], "shape_s": shape, "dtype": dn,
                          "b_layout": args.b_layout, "chain": args.chain,
                          "out_dtype": str(out_dt).removeprefix("torch."), "config": name,
                          "rel_err": err, "max_err": err, "unwritten": unwritten,
                          "tflops": flops / r["time_ms"] / 1e9, "cublas_tflops": flops / r["baseline_ms"] / 1e9,
                          "triton_ms": tri_ms, "triton_rel_err": tri_err, "triton_config": tri_cfg,
                          "triton_ratio": tri["ratio"] if tri else None,
                          "triton_vs_cublas": (r["baseline_ms"] / tri_ms) if tri_ms else None,
                          "host_us": host[0] if host else None, "cublas_host_us": host[1] if host else None,
                          "ok": unwritten == 0 and err <= 1e-2 and not math.isnan(err)})
                rows.append(r)
                write_json(args.json, rows, meta)
                print(f"{name} {shape} {dn}: {r['tflops']:.0f} TFLOP/s, cuBLAS {r['cublas_tflops']:.0f} -> "
                      f"{r['ratio']:.3f}x [{r['ratio_min']:.3f}..{r['ratio_max']:.3f}]"
                      + (f", plain Triton {r['triton_vs_cublas']:.3f}x cuBLAS ({tri_cfg}), ours {r['triton_ratio']:.3f}x it"
                         if tri_ms else "")
                      + f", rel err {err:.1e}{'' if r['ok'] else '  WRONG'}", flush=True)
            a = b = bv = ref = chain_b = None
            torch.cuda.empty_cache()
    meta["complete"] = True
    write_json(args.json, rows, meta)
    mode = ("CUDA-graph replays" if args.graph else "eager launches") + (
        f", {args.chain} GEMMs back to back a call (per-GEMM numbers; no plain Triton)" if args.chain > 1 else "")
    print(f"\nGEMM on {meta['device']} (commit {meta['commit']}), {mode}; ratio = cuBLAS time / ours (>1 is faster)")
    print(table(rows, [("kernel", "kernel", ""), ("MxNxK", "shape_s", ""), ("dtype", "dtype", ""),
                       ("TFLOP/s", "tflops", ".0f"), ("cuBLAS", "cublas_tflops", ".0f"), ("vs cuBLAS", "ratio", ".3f"),
                       ("vs Triton", "triton_ratio", ".3f"), ("Triton/cuBLAS", "triton_vs_cublas", ".3f"),
                       ("rel err", "rel_err", ".1e")]
                + ([] if args.graph else [("host us", "host_us", ".1f"), ("cuBLAS host us", "cublas_host_us", ".1f")])))
    for name in names:
        rs = [r["ratio"] for r in rows if r["kernel"] == name and "ratio" in r]
        if rs:
            print(f"{name}: geometric mean vs cuBLAS {math.exp(sum(map(math.log, rs)) / len(rs)):.3f}x over {len(rs)} cases")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
