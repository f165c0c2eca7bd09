"""Copy bandwidth: gluon's copy kernels (SIMT and explicit-layout forms) against torch's own copy.

    python bench/copy.py [--gib 4] [--json out.json]

Checks each kernel first (output poisoned with NaN, compared exactly), then times them interleaved
with `dst.copy_(src)` in the same run. Bandwidth counts bytes read plus bytes written.
"""
from __future__ import annotations

import os
import sys

# the repo root instead of bench/ on the path: bench/copy.py must not shadow the stdlib `copy`
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.common import ROOT, environment, interleaved, parser, table, write_json  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "examples"))


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--gib", type=float, default=4.0, help="bytes of the source tensor in GiB (default 4)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--configs", default="simt:1024:4,simt:512:4,simt:2048:8,explicit:1024:4,persistent:16384:16",
                   help="comma list of form:XBLOCK:num_warps[:load_cache[:store_cache]], "
                        "form = simt | explicit | persistent (caches apply to explicit: ca, cg / wb, cg, cs, wt)")
    args = p.parse_args()
    import torch
    from copy_kernel import copy
    if not torch.cuda.is_available():
        print("bench/copy.py needs a CUDA GPU", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    n = int(args.gib * (1 << 30)) // torch.tensor([], dtype=dtype).element_size()
    src = torch.randn(n, device="cuda", dtype=torch.float32).to(dtype)
    dst = torch.empty_like(src)
    nbytes = 2 * src.numel() * src.element_size()
    rows = []
    for cfg in args.configs.split(","):
        form, xblock, warps, *caches = cfg.split(":")
        kw = dict(xblock=int(xblock), num_warps=int(warps), form=form,
                  load_cache=caches[0] if caches else "", store_cache=caches[1] if len(caches) > 1 else "")
        dst.fill_(float("nan"))
        copy(dst, src, **kw)
        torch.cuda.synchronize()
        wrong = int((dst != src).sum().item())
        r = interleaved(lambda: copy(dst, src, **kw), lambda: dst.copy_(src), args.repeats, args.round_ms)
        r.update({"shape": [n], "dtype": args.dtype, "config": cfg, "wrong_elements": wrong, "max_err": 0.0 if wrong == 0 else float("nan"),
                  "tb_s": nbytes / r["time_ms"] / 1e9, "baseline_tb_s": nbytes / r["baseline_ms"] / 1e9})
        rows.append(r)
        print(f"{cfg}: {r['tb_s']:.3f} TB/s vs torch {r['baseline_tb_s']:.3f} TB/s  ratio {r['ratio']:.3f} "
              f"[{r['ratio_min']:.3f}..{r['ratio_max']:.3f}]  wrong={wrong}", flush=True)
    meta = environment() | {"bytes_moved": nbytes}
    write_json(args.json, rows, meta)
    print(f"\ncopy of {args.gib} GiB {args.dtype} on {meta['device']} (commit {meta['commit']}), "
          f"median of {args.repeats} interleaved rounds")
    print(table(rows, [("config", "config", ""), ("TB/s", "tb_s", ".3f"), ("torch TB/s", "baseline_tb_s", ".3f"),
                       ("ratio", "ratio", ".3f"), ("min", "ratio_min", ".3f"), ("max", "ratio_max", ".3f"),
                       ("wrong", "wrong_elements", "d")]))
    return 0 if all(r["wrong_elements"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
