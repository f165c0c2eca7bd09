"""Attention forward: our SM90 kernel against torch SDPA (cuDNN and flash backends) and plain Triton, in one run.

    python bench/attention.py [--dtype fp16|bf16|both] [--cases B4H16S8192D128,D64,...] [--causal both|on|off]
                              [--quick] [--no-triton] [--config KEY=VALUE ...] [--repeats 5] [--round-ms 1000]
                              [--json out.json]

Every (case, dtype, causal) is first checked for every implementation: one warm-up call (compiles,
autotunes), the output poisoned with NaN (plain Triton writes into a NaN-filled `out`; for the others a
NaN-filled block is left in torch's caching allocator where their output is allocated), one call, no NaN
allowed and max|out - ref| / max|ref| <= --tol against an fp32 reference (torch SDPA math on the same
inputs with an explicit bottom-right causal mask; bench/attention_ref.py). A failing implementation is
reported and not timed. Then ours is timed interleaved with each baseline in rounds of their own (as
bench/gemm.py does), the ratio being the median of baseline time / ours per round (>1: ours faster).
TFLOP/s counts 4*B*H*Sq*Skv*D, halved for causal. Causal is bottom-right aligned (query row i sees key j
iff j <= i + Skv - Sq); with Sq != Skv torch's `is_causal` means something else, so SDPA sits those out.
--json is rewritten (atomically) after every row, meta.complete false until the run ends. Exit code 0
when ours is correct everywhere and no baseline gave a wrong answer.

The full run (20 rows, three baselines, 1000 ms rounds, plain Triton autotuned once per shape and mask) is
estimated at about 20 minutes on one H200: under a time limit split it (--dtype, --causal, --cases).
"""
from __future__ import annotations

import os
import sys

# the repo root instead of bench/ on the path, before any import that imports the stdlib `copy`
# (dataclasses, argparse, torch): bench/copy.py must not shadow it
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
from typing import Callable  # noqa: E402

from bench.common import (environment, interleaved, need_gpu, parse_config, parser, poison_allocator,  # noqa: E402
                          table, timed, write_json)


@dataclasses.dataclass(frozen=True)
class Case:
    b: int
    h: int
    sq: int
    skv: int
    d: int
    hkv: int

    @property
    def name(self) -> str:
        kv = f" KV{self.hkv}" if self.hkv != self.h else ""
        s = f"S{self.sq}" if self.sq == self.skv else f"SQ{self.sq} SKV{self.skv}"
        return f"B{self.b} H{self.h}{kv} {s} D{self.d}"


def _case(b: int, h: int, s: int, d: int) -> Case:
    return Case(b, h, s, s, d, h)


CASES = [_case(2, 16, 16384, 128), _case(4, 16, 8192, 128), _case(8, 16, 4096, 128), _case(16, 16, 1024, 128),
         _case(4, 32, 4096, 64)]
QUICK = [_case(16, 16, 1024, 128), _case(4, 32, 4096, 64)]
FIELDS = {"B": "b", "H": "h", "KV": "hkv", "HKV": "hkv", "S": "s", "SQ": "sq", "SKV": "skv", "D": "d"}
DEVICE = "cuda"                 # the tests run the CLI's logic on the CPU with fake implementations
LABELS = {"ours": "ours", "cudnn": "cuDNN", "flash": "flash", "triton": "Triton"}


def parse_case(text: str) -> dict[str, int]:
    """'B2 H16 S16384 D128' (spaces, '_' or 'x' between fields optional, any case) -> {'b': 2, 'h': 16, 's':
    16384, 'd': 128}; also KV (kv heads), SQ and SKV (query and key lengths)."""
    body = re.sub(r"[\s_xX]+", "", text).upper()      # no field name holds an X
    tokens = re.findall(r"([A-Z]+)(\d+)", body)
    if not tokens or "".join(f"{k}{v}" for k, v in tokens) != body:
        raise ValueError(f"cannot read case {text!r}: expected fields like B2 H16 S16384 D128 (also KV, SQ, SKV)")
    out: dict[str, int] = {}
    for key, val in tokens:
        if key not in FIELDS:
            raise ValueError(f"case {text!r}: unknown field {key!r} (known: {', '.join(FIELDS)})")
        field = FIELDS[key]
        if field in out:
            raise ValueError(f"case {text!r}: {key} given twice")
        out[field] = int(val)
    return out


def _full_case(f: dict[str, int]) -> Case | None:
    """The case `f` names completely (B, H, D and S or SQ+SKV), else None (it is a filter)."""
    sq, skv = f.get("sq", f.get("s")), f.get("skv", f.get("s"))
    if not {"b", "h", "d"} <= f.keys() or sq is None or skv is None:
        return None
    return Case(f["b"], f["h"], sq, skv, f["d"], f.get("hkv", f["h"]))


def _matches(case: Case, f: dict[str, int]) -> bool:
    want = dict(f)
    if "s" in want:
        want["sq"] = want["skv"] = want.pop("s")
    return all(getattr(case, k) == v for k, v in want.items())


def resolve_cases(items: list[str], defaults: list[Case]) -> list[Case]:
    """Each item is a whole case (B, H, S and D given: run as is) or a filter over `defaults` ('S4096',
    'D64', 'B4 H16': the default cases with those fields). Order kept, duplicates dropped."""
    out: list[Case] = []
    for item in items:
        f = parse_case(item)
        case = _full_case(f)
        found = [case] if case else [c for c in defaults if _matches(c, f)]
        if not found:
            raise ValueError(f"--cases {item!r} matches none of {', '.join(c.name for c in defaults)}")
        out += [c for c in found if c not in out]
    for c in out:
        if c.hkv <= 0 or c.h % c.hkv:
            raise ValueError(f"case {c.name}: query heads must be a multiple of kv heads")
    return out


def attention_flops(case: Case, causal: bool) -> int:
    """4*B*H*Sq*Skv*D (QK^T and PV, 2 flops per multiply-add), halved for causal."""
    f = 4 * case.b * case.h * case.sq * case.skv * case.d
    return f // 2 if causal else f


def _comma_list(text: str) -> list[str]:
    return [t for t in (x.strip() for x in text.split(",")) if t]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The CLI; `args.cases` comes back as a list of Case, `args.config` as one dict (None when empty)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--quick", action="store_true")
    quick = pre.parse_known_args(argv)[0].quick
    p = parser(__doc__)
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--dtype", choices=("fp16", "bf16", "both"), default="both")
    p.add_argument("--cases", type=_comma_list, default=None, help="comma list of cases ('B2 H16 S16384 D128'; "
                   "also KV, SQ, SKV) or filters over the default cases ('S4096', 'D64')")
    p.add_argument("--causal", choices=("both", "on", "off"), default="both")
    p.add_argument("--quick", action="store_true", help="preset: the two smallest cases, bf16, 2 rounds of 200 ms "
                   "(each can still be set explicitly)")
    p.add_argument("--no-triton", action="store_true", help="skip the plain Triton baseline")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="override of our kernel's config (repeatable, or comma-separated), passed as config=")
    p.add_argument("--scale", type=float, default=None, help="softmax scale (default 1/sqrt(D))")
    p.add_argument("--tol", type=float, default=1e-2, help="max |out - ref| / max |ref| allowed (default 1e-2)")
    p.add_argument("--ref-tflop", type=float, default=0.2, help="fp32 reference work per check: every (batch, head) "
                   "if it costs at most this many TFLOP, else a spread of them including the first and last")
    if quick:
        p.set_defaults(dtype="bf16", repeats=2, round_ms=200)
    args = p.parse_args(argv)
    try:
        args.cases = resolve_cases(args.cases, CASES) if args.cases else list(QUICK if quick else CASES)
    except ValueError as e:
        p.error(str(e))
    cfg: dict = {}
    for item in args.config:
        if "=" not in item:
            p.error(f"--config {item!r}: expected KEY=VALUE")
        cfg.update(parse_config(item))
    args.config = cfg or None
    if args.repeats < 1 or args.round_ms < 1:
        p.error("--repeats and --round-ms must be positive")
    return args


# An implementation: make(q, k, v, causal, scale) -> (call, out); call() runs it once and returns the
# output; out is the tensor call() writes when the API takes one (poisoned before the check), else None;
# call.config(), where present, names the config it ran (plain Triton's autotuned pick).
Make = Callable[..., tuple[Callable[[], object], object]]


def _ours(config: dict | None) -> Make:
    def make(q, k, v, causal, scale):
        from gluon.kernels.attention_sm90 import attention  # not in every checkout yet: imported here
        return (lambda: attention(q, k, v, causal=causal, scale=scale, config=config)), None
    return make


def _sdpa(backend_name: str) -> Make:
    def make(q, k, v, causal, scale):
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        if causal and q.shape[2] != k.shape[2]:
            raise NotImplementedError("torch's is_causal is top-left aligned when Sq != Skv")
        backend = getattr(SDPBackend, backend_name)
        extra = {"enable_gqa": True} if q.shape[1] != k.shape[1] else {}

        def call():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, **extra)
        return call, None
    return make


def _triton(q, k, v, causal, scale):
    import torch

    from bench.triton_attention import best_config, triton_attention
    out = torch.empty_like(q, memory_format=torch.contiguous_format)

    def call():
        return triton_attention(q, k, v, causal=causal, scale=scale, out=out)
    call.config = best_config               # the autotuner's pick, read after the first call
    return call, out


def random_inputs(case: Case, dtype, seed: int) -> tuple:
    """q [B, H, Sq, D], k and v [B, HKV, Skv, D] of `dtype`, standard normal, on DEVICE, from `seed`."""
    import torch
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    return (torch.randn(case.b, case.h, case.sq, case.d, device=DEVICE, dtype=dtype, generator=gen),
            torch.randn(case.b, case.hkv, case.skv, case.d, device=DEVICE, dtype=dtype, generator=gen),
            torch.randn(case.b, case.hkv, case.skv, case.d, device=DEVICE, dtype=dtype, generator=gen))


def implementations(args: argparse.Namespace) -> dict[str, Make]:
    need_gpu("bench/attention.py")                          # (the CPU tests give fakes instead)
    impls = {"ours": _ours(args.config), "cudnn": _sdpa("CUDNN_ATTENTION"), "flash": _sdpa("FLASH_ATTENTION")}
    if not args.no_triton:
        impls["triton"] = _triton
    return impls


def _sync(t) -> None:
    import torch
    if t.is_cuda:
        torch.cuda.synchronize()


def check(make: Make, q, k, v, causal: bool, scale: float, ref, pairs: list[tuple[int, int]], tol: float) -> dict:
    """Warm up, poison the output, run once, compare the checked pairs with `ref`: {'status': 'ok' | 'wrong' |
    'failed' | 'skipped', 'err', 'nan', 'why', 'call'} (call only when ok)."""
    import torch
    try:
        call, out = make(q, k, v, causal, scale)
        call()                                  # compile / autotune outside the checked run
        _sync(q)
        if out is not None:
            out.fill_(float("nan"))
        elif q.is_cuda:
            poison_allocator(math.prod(q.shape) * q.element_size())
        res = call()
        _sync(q)
    except NotImplementedError as e:            # a case the API cannot express
        return {"status": "skipped", "why": str(e)}
    except Exception as e:                      # noqa: BLE001 - any failure is reported, the run goes on
        return {"status": "failed", "why": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"}
    res = res[0] if isinstance(res, tuple) else res
    if tuple(res.shape) != tuple(q.shape):
        return {"status": "wrong", "why": f"output shape {tuple(res.shape)}, expected {tuple(q.shape)}"}
    from bench.attention_ref import max_rel_err
    nan = int(torch.isnan(res).sum().item())
    bi = torch.tensor([b for b, _ in pairs], device=res.device)
    hi = torch.tensor([h for _, h in pairs], device=res.device)
    err = max_rel_err(res[bi, hi], ref)
    ok = nan == 0 and err <= tol
    return {"status": "ok" if ok else "wrong", "err": err, "nan": nan, "call": call if ok else None,
            "why": None if ok else (f"{nan} NaN" if nan else f"error {err:.2e} > {tol:g}"),
            "config": getattr(call, "config", lambda: None)()}


def measure(case: Case, dn: str, causal: bool, q, k, v, scale: float, impls: dict[str, Make],
            args: argparse.Namespace) -> dict:
    """One row: every implementation checked, then ours timed against each correct baseline."""
    from bench.attention_ref import check_pairs, reference
    flops = attention_flops(case, causal)
    # the math backend computes every score, masked or not: a pair costs the full count either way
    pairs = check_pairs(case.b, case.h, attention_flops(case, False) / (case.b * case.h), args.ref_tflop * 1e12)
    ref = reference(q, k, v, causal, scale, pairs)
    row: dict = {"case": case.name, "shape": dataclasses.asdict(case), "dtype": dn, "causal": causal,
                 "mask": "causal" if causal else "none", "scale": scale, "flops": flops, "config": args.config,
                 "checked_pairs": len(pairs), "pairs": case.b * case.h, "timing": {}}
    results = {name: check(make, q, k, v, causal, scale, ref, pairs, args.tol) for name, make in impls.items()}
    del ref
    for name, res in results.items():
        row.update({f"{name}_status": res["status"], f"{name}_err": res.get("err"), f"{name}_nan": res.get("nan"),
                    f"{name}_why": res.get("why"), f"{name}_config": res.get("config")})
    ok = [n for n in impls if results[n]["status"] == "ok"]
    bases = [n for n in ok if n != "ours"]
    if "ours" in ok:
        ours_rounds = []
        for name in bases:
            r = interleaved(results["ours"]["call"], results[name]["call"], args.repeats, args.round_ms)
            row["timing"][name] = r
            row[f"{name}_ms"] = r["baseline_ms"]
            row[f"ours_vs_{name}"] = r["ratio"]
            ours_rounds += r["rounds_ms"]
        if not bases:
            r = timed(results["ours"]["call"], args.repeats, args.round_ms)
            row["timing"]["ours"] = r
            ours_rounds = r["rounds_ms"]
        row["ours_ms"] = statistics.median(ours_rounds)
    else:
        for name in bases:
            r = timed(results[name]["call"], args.repeats, args.round_ms)
            row["timing"][name] = r
            row[f"{name}_ms"] = r["time_ms"]
    for name in impls:
        if row.get(f"{name}_ms"):
            row[f"{name}_tflops"] = flops / row[f"{name}_ms"] / 1e9
    row["ok"] = results["ours"]["status"] == "ok"
    row["baselines_ok"] = all(results[n]["status"] != "wrong" for n in impls if n != "ours")
    return row


def _check_line(row: dict, impls: list[str]) -> str:
    parts = []
    for n in impls:
        st = row[f"{n}_status"]
        err = row.get(f"{n}_err")
        parts.append(f"{LABELS[n]} {st}" + (f" {err:.1e}" if err is not None else "")
                     + (f" ({row[f'{n}_why']})" if st != "ok" and row.get(f"{n}_why") else ""))
    return (f"{row['case']} {row['dtype']} {'causal' if row['causal'] else 'full'}: checked {row['checked_pairs']} of "
            f"{row['pairs']} heads: " + " | ".join(parts))


def _time_line(row: dict, impls: list[str]) -> str:
    parts = []
    for n in impls:
        tf = row.get(f"{n}_tflops")
        if tf is None:
            continue
        ratio = row.get(f"ours_vs_{n}")
        parts.append(f"{LABELS[n]} {tf:.0f}" + (f" (ours {ratio:.3f}x)" if ratio else "")
                     + (f" [{row[f'{n}_config']}]" if row.get(f"{n}_config") else ""))
    return "  TFLOP/s: " + (" | ".join(parts) if parts else "nothing timed")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from gluon.dtypes import DType
    impls = implementations(args)
    names = list(impls)
    dtypes = ["fp16", "bf16"] if args.dtype == "both" else [args.dtype]
    causals = {"both": [False, True], "on": [True], "off": [False]}[args.causal]
    meta = dict(environment(), complete=False, cases=[c.name for c in args.cases], dtypes=dtypes,
                repeats=args.repeats, round_ms=args.round_ms, config=args.config, tol=args.tol)
    rows: list[dict] = []
    for case in args.cases:
        for dn in dtypes:
            q, k, v = random_inputs(case, DType.from_name(dn).torch, 20261201)
            scale = args.scale if args.scale is not None else 1.0 / math.sqrt(case.d)
            for causal in causals:
                row = measure(case, dn, causal, q, k, v, scale, impls, args)
                rows.append(row)
                write_json(args.json, rows, meta)
                print(_check_line(row, names), flush=True)
                print(_time_line(row, names), flush=True)
            q = k = v = None
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    meta["complete"] = True
    write_json(args.json, rows, meta)
    print(f"\nAttention forward on {meta['device']} (commit {meta['commit']}), eager launches; TFLOP/s = "
          "4*B*H*Sq*Skv*D (/2 causal) / time; ours/X = X's time / ours, median over interleaved rounds")
    cols = [("case", "case", ""), ("dtype", "dtype", ""), ("mask", "mask", "")]
    cols += [(LABELS[n], f"{n}_tflops", ".0f") for n in names]
    cols += [(f"ours/{LABELS[n]}", f"ours_vs_{n}", ".3f") for n in names if n != "ours"]
    cols += [("ours err", "ours_err", ".1e")]
    print(table(rows, cols))
    for n in names[1:]:
        rs = [r[f"ours_vs_{n}"] for r in rows if r.get(f"ours_vs_{n}")]
        if rs:
            print(f"ours vs {LABELS[n]}: geometric mean {math.exp(sum(map(math.log, rs)) / len(rs)):.3f}x "
                  f"over {len(rs)} rows")
    return 0 if rows and all(r["ok"] and r["baselines_ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
