"""A built kernel (`gluon build --best`) loaded with `gluon.load`, checked, and timed against its
baseline and against the tuned trial's own time, in one run.

    python3 bench/tuned.py gemm_sm90 [--results results] [--repeats 5] [--json out.json]
    python3 bench/tuned.py attention_sm90

For every built bucket (shape, dtype) of the manifest: fresh random inputs from the template (a seed
the tuner never used), the output poisoned, one call of the loaded callable checked against the
template's reference (no NaN, error within the spec's tolerance); then the loaded callable and the
template's baseline timed interleaved (median of CUDA-event timings with the L2 flushed, median ratio
over --repeats rounds). `vs tuned` = the tuned trial's median time / this one (1.0: as fast as when it
was tuned; it also carries whatever changed on the board since, e.g. its clock at the power cap).
`vs JIT` takes the board out: the loaded callable and the same config run through the template's JIT
path (what the tuner timed), interleaved in this run, JIT time / loaded time (1.0: building and loading
lost nothing). `host us/call`: the host time of one eager call of the loaded callable and of the baseline
(bench.common.host_us_per_call), what a model pays per call where the kernel is shorter than its launch. Exit code 0 when every bucket is correct, 1 otherwise.
"""
from __future__ import annotations

import os
import sys
import time

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.common import environment, host_us_per_call, interleaved, parser, table, write_json  # noqa: E402


def main() -> int:
    p = parser(__doc__)
    p.add_argument("name", help="a built kernel's name (results/build/NAME) or a manifest path")
    p.add_argument("--results", default="results", help="results folder holding build/ (default: results)")
    p.add_argument("--rtol", type=float, default=1e-2)
    args = p.parse_args()
    import torch

    import gluon
    t0 = time.perf_counter()
    k = gluon.load(args.name, root=args.results)
    load_s = time.perf_counter() - t0
    tpl = k.template
    rows = []
    for e in k.entries:
        shape, dtype = tuple(e["shape"]), e["dtype"]
        inputs = tpl.make_inputs(shape, dtype, "cuda", seed=20261129)
        tpl.poison(inputs)
        args_ = tpl.call_args(inputs)
        kwargs = tpl.call_kwargs(inputs)               # e.g. attention's causal flag
        out = tpl.output(inputs)
        t1 = time.perf_counter()
        k(*args_, out=out, **kwargs)
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t1
        ok, max_err, why = tpl.check(out, tpl.reference(inputs), args.rtol, 0.0)
        loaded = lambda: k(*args_, out=out, **kwargs)   # noqa: E731
        r = interleaved(loaded, tpl.baseline(inputs), args.repeats, args.round_ms)
        jit = lambda: tpl.run(inputs, e["config"])      # noqa: E731
        jit()                                           # compiled outside the timing
        rj = interleaved(loaded, jit, args.repeats, args.round_ms)
        base_fn = tpl.baseline(inputs)
        r["host_us"], r["baseline_host_us"] = host_us_per_call(loaded), host_us_per_call(base_fn)
        tuned = e.get("median_ms")
        r.update({"name": k.name, "shape": list(shape), "shape_s": "x".join(map(str, shape)), "dtype": dtype,
                  "config": e["config"], "config_id": e["config_id"], "max_err": max_err, "ok": bool(ok),
                  "problem": why, "tuned_ms": tuned, "tuned_ratio": e.get("ratio"),
                  "vs_tuned": (tuned / r["time_ms"]) if tuned else None, "jit_ms": rj["baseline_ms"],
                  "vs_jit": rj["ratio"], "first_call_s": first_s, "load_s": load_s})
        rows.append(r)
        print(f"{k.name} {r['shape_s']} {dtype}: {r['time_ms']:.4f} ms, baseline {r['baseline_ms']:.4f} ms -> "
              f"{r['ratio']:.3f}x [{r['ratio_min']:.3f}..{r['ratio_max']:.3f}]; tuned trial {tuned or float('nan'):.4f} ms "
              f"({r['vs_tuned'] or float('nan'):.3f} of it); vs JIT {rj['ratio']:.3f} [{rj['ratio_min']:.3f}..{rj['ratio_max']:.3f}]; max err {max_err:.2e}{'' if ok else '  WRONG: ' + str(why)}",
              flush=True)
        inputs = args_ = out = None
        torch.cuda.empty_cache()
    meta = environment()
    meta["load_s"] = load_s
    write_json(args.json, rows, meta)
    print(f"\n{k.name} loaded in {load_s:.3f} s on {meta['device']} (commit {meta['commit']}); ratio = baseline "
          "time / loaded kernel's; vs tuned = tuned trial's time / now; vs JIT = same config through the JIT, same run")
    print(table(rows, [("shape", "shape_s", ""), ("dtype", "dtype", ""), ("ms", "time_ms", ".4f"),
                       ("baseline ms", "baseline_ms", ".4f"), ("ratio", "ratio", ".3f"),
                       ("tuned ratio", "tuned_ratio", ".3f"), ("vs tuned", "vs_tuned", ".3f"),
                       ("vs JIT", "vs_jit", ".3f"), ("host us/call", "host_us", ".1f"),
                       ("baseline host us", "baseline_host_us", ".1f"),
                       ("first call s", "first_call_s", ".3f"), ("max err", "max_err", ".1e")]))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
