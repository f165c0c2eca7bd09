"""Configs of our attention side by side: every variant and baseline checked, then timed in rounds, in one run.

    python bench/attention_variants.py --variant base= --variant bn64=BLOCK_N=64 [--variant NAME=K=V,K=V ...]
                                       [--cases D64,S1024] [--dtype bf16] [--causal both] [--no-triton]
                                       [--repeats 3] [--round-ms 500] [--json out.json]

What an A/B of the kernel's switches needs (docs/PERF.md's ablations): bench/attention.py times one config
against each baseline in pairs; here each round times every variant and baseline once, in an order that
rotates from round to round, and a variant's ratio to a baseline is the median over rounds of the
baseline's time in that round over the variant's, so the clock the board runs at in a round divides out.
A variant's text is NAME=OVERRIDES: `base=` is what `attention` runs (choose_config's pick), `bn64=BLOCK_N=64`
that with BLOCK_N=64, `x=BLOCK_M=192,CONSUMER_WGS=3,OVERLAP=False` several fields. Checks, TFLOP/s
and the cases are bench/attention.py's (fp32 reference, output poisoned, 4*B*H*Sq*Skv*D, halved for
causal). Exit code 0 when every variant is correct on every case.
"""
from __future__ import annotations

import os
import sys

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from bench import attention as A  # noqa: E402
from bench.common import bench_ms, environment, need_gpu, parse_config, parser, table, write_json  # noqa: E402


def parse_variant(text: str) -> tuple[str, dict | None]:
    """'bn64=BLOCK_N=64' -> ('bn64', {'BLOCK_N': 64}); 'base=' -> ('base', None)."""
    name, sep, body = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--variant {text!r}: expected NAME=OVERRIDES (e.g. base= or bn64=BLOCK_N=64)")
    return name.strip(), (parse_config(body) if body.strip() else None)


def parse_args(argv: list[str] | None = None):
    p = parser(__doc__)
    p.add_argument("--variant", action="append", default=[], metavar="NAME=K=V,...", help="a config of ours "
                   "(repeatable; default: base=, what attention picks)")
    p.add_argument("--cases", type=A._comma_list, default=None, help="as bench/attention.py's --cases")
    p.add_argument("--dtype", choices=("fp16", "bf16"), default="bf16")
    p.add_argument("--causal", choices=("both", "on", "off"), default="both")
    p.add_argument("--no-triton", action="store_true", help="skip the plain Triton baseline")
    p.add_argument("--tol", type=float, default=1e-2)
    p.set_defaults(repeats=3, round_ms=500)
    args = p.parse_args(argv)
    try:
        args.variants = dict(parse_variant(v) for v in (args.variant or ["base="]))
        args.cases = A.resolve_cases(args.cases, A.CASES) if args.cases else list(A.CASES)
    except ValueError as e:
        p.error(str(e))
    if len(args.variants) != len(args.variant or ["base="]):
        p.error("--variant: two variants have one name")
    return args


TIMER = bench_ms                    # (call, round_ms) -> ms; the CPU tests put a fake clock here


def rounds(calls: dict, repeats: int, round_ms: int) -> dict[str, list[float]]:
    """Each round times every call once (do_bench median, L2 flushed), the order rotated by one per round."""
    names = list(calls)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for n in names[r % len(names):] + names[:r % len(names)]:
            out[n].append(TIMER(calls[n], round_ms))
    return out


def measure(case, dn: str, causal: bool, q, k, v, scale: float, impls: dict, args) -> dict:
    from bench.attention_ref import check_pairs, reference
    flops = A.attention_flops(case, causal)
    pairs = check_pairs(case.b, case.h, A.attention_flops(case, False) / (case.b * case.h), 0.2e12)
    ref = reference(q, k, v, causal, scale, pairs)
    row: dict = {"case": case.name, "dtype": dn, "mask": "causal" if causal else "none", "flops": flops}
    calls = {}
    for name, make in impls.items():
        t0 = time.perf_counter()
        res = A.check(make, q, k, v, causal, scale, ref, pairs, args.tol)
        row[f"{name}_status"], row[f"{name}_err"] = res["status"], res.get("err")
        # progress on stderr (the first check of a variant compiles it): a run cut short shows where it was
        print(f"  {case.name} {row['mask']} {name}: {res['status']} in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr, flush=True)
        if res["status"] == "ok":
            calls[name] = res["call"]
        else:
            print(f"  {name}: {res['status']} ({res.get('why')})", flush=True)
    times = rounds(calls, args.repeats, args.round_ms)
    row["rounds_ms"] = times
    for name, ts in times.items():
        row[f"{name}_tflops"] = flops / statistics.median(ts) / 1e9
    for base in ("cudnn", "triton"):
        for name in args.variants:
            if name in times and base in times:
                row[f"{name}_vs_{base}"] = statistics.median(b / t for b, t in zip(times[base], times[name]))
    return row


def implementations(args) -> dict:
    """Our variants by name, then the baselines: cuDNN SDPA and (unless --no-triton) plain Triton."""
    need_gpu("bench/attention_variants.py")                 # (the CPU tests give fakes instead)
    impls = {name: A._ours(cfg) for name, cfg in args.variants.items()}
    impls["cudnn"] = A._sdpa("CUDNN_ATTENTION")
    if not args.no_triton:
        impls["triton"] = A._triton
    return impls


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from gluon.dtypes import DType
    impls = implementations(args)
    meta = dict(environment(), complete=False, variants=args.variants, repeats=args.repeats, round_ms=args.round_ms)
    rows: list[dict] = []
    causals = {"both": [False, True], "on": [True], "off": [False]}[args.causal]
    dt = DType.from_name(args.dtype).torch
    for case in args.cases:
        q, k, v = A.random_inputs(case, dt, 20261204)
        for causal in causals:
            row = measure(case, args.dtype, causal, q, k, v, 1.0 / math.sqrt(case.d), impls, args)
            rows.append(row)
            write_json(args.json, rows, meta)
            print(f"{row['case']} {row['mask']}: " + " | ".join(
                f"{n} {row[f'{n}_tflops']:.0f}" for n in impls if f"{n}_tflops" in row), flush=True)
    meta["complete"] = True
    write_json(args.json, rows, meta)
    cols = [("case", "case", ""), ("mask", "mask", "")]
    cols += [(n, f"{n}_tflops", ".0f") for n in impls]
    cols += [(f"{n}/cuDNN", f"{n}_vs_cudnn", ".3f") for n in args.variants]
    if not args.no_triton:
        cols += [(f"{n}/Triton", f"{n}_vs_triton", ".3f") for n in args.variants]
    print(f"\n{args.dtype}, TFLOP/s (median of {args.repeats} rounds of {args.round_ms} ms); X/base = base's time / "
          "X's, median over rounds")
    print(table(rows, cols))
    return 0 if all(row.get(f"{n}_status") == "ok" for row in rows for n in args.variants) else 1


if __name__ == "__main__":
    sys.exit(main())
