"""Softmax, RMSNorm and SwiGLU (examples/{softmax,rmsnorm,elementwise}_kernel.py) against torch.

    python bench/norms.py [--quick] [--json out.json] [--budget-s 200]   # on a GPU
    python bench/norms.py --precompile                                   # anywhere: fill the kernel cache

For each case (kernel, shape, dtype): every config of a small sweep around the default is checked on
fresh random data (output poisoned with NaN first; relative error against an fp32 torch reference) and
timed (triton.testing.do_bench, L2 flushed before each run, median); then the fastest correct config and
the default are timed again interleaved with torch (torch.softmax, F.rms_norm, F.silu(a) * b). The
table at the end gives per case the default's and the best config's time and ratio (torch time / ours).

`--precompile` compiles every config of the sweep for sm_90 through the same launch path (stand-ins made
from CPU tensors of the same dtypes, alignment and sizes), in parallel, into $GLUON_CACHE_DIR: a GPU
machine given that cache launches without compiling. On a GPU the sweep is precompiled the same way
first (cache hits cost a trace each).
"""
from __future__ import annotations

import os
import sys
import time

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.common import ROOT, bench_ms, environment, graphed, interleaved, parser, table, write_json  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "examples"))

import elementwise_kernel as ew  # noqa: E402
import rmsnorm_kernel as rn  # noqa: E402
import softmax_kernel as sm  # noqa: E402
from gluon import Layout  # noqa: E402

BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}

# (kernel, shape, dtype): the sizes the kernels are meant for, and the awkward ones
CASES = [
    ("softmax", (8192, 4096), "fp16"), ("softmax", (8192, 4096), "bf16"), ("softmax", (8192, 4096), "fp32"),
    ("softmax", (4096, 1000), "fp16"), ("softmax", (4096, 1000), "bf16"), ("softmax", (4096, 1000), "fp32"),
    ("softmax", (32768, 1024), "fp16"), ("softmax", (32768, 1024), "fp32"),
    ("softmax", (1024, 8195), "fp16"), ("softmax", (1024, 8195), "fp32"),
    ("softmax", (2048, 32768), "fp16"),
    ("rmsnorm", (8192, 4096), "fp16"), ("rmsnorm", (8192, 4096), "bf16"), ("rmsnorm", (8192, 4096), "fp32"),
    ("rmsnorm", (16384, 8192), "fp16"), ("rmsnorm", (16384, 8192), "bf16"),
    ("rmsnorm", (4096, 1000), "fp16"), ("rmsnorm", (32768, 1024), "bf16"),
    ("swiglu", (1 << 26,), "fp16"), ("swiglu", (1 << 26,), "bf16"), ("swiglu", (1 << 26,), "fp32"),
    ("swiglu", ((1 << 26) + 3,), "fp16"),
]
QUICK = {0, 3, 6, 8, 11, 14, 18, 21}        # --quick: one dtype per size


def _row_configs(n_rows: int, n_cols: int, dtype: str, default: dict, layout_ok) -> list[dict]:
    """The default, and [ROWS_PER_PROGRAM, NUM_WARPS] around it: 1 to 4 vectors of 16 bytes a thread."""
    vec = 16 // BYTES[dtype]
    out = [default]
    for rows in (1, 2, 4, 8, 16):
        for warps in (1, 2, 4, 8, 16):
            per_thread = rows * default["BLOCK_N"] // (32 * warps)
            if not vec <= per_thread <= 4 * vec or rows > max(1, n_rows):
                continue
            cfg = dict(default, ROWS_PER_PROGRAM=rows, NUM_WARPS=warps)
            if cfg not in out and layout_ok(rows, cfg["BLOCK_N"], cfg.get("VEC") or vec, warps):
                out.append(cfg)
    return out


def _fits(rows: int, block_n: int, vec: int, warps: int) -> bool:
    try:
        Layout.rows(rows, block_n, vec, warps)
        return True
    except Exception:
        return False


def configs(kernel: str, shape: tuple, dtype: str) -> list[dict]:
    """The sweep of one case, its first entry the host's default."""
    if kernel == "softmax":
        m, n = shape
        aligned = (n * BYTES[dtype]) % 16 == 0
        d = sm.default_config(m, n, BYTES[dtype], aligned)
        looped = [dict(d, BLOCK_N=b, ROWS_PER_PROGRAM=1, NUM_WARPS=w, LOOPED=True)
                  for b, w in ((1024, 4), (2048, 4), (2048, 8), (4096, 4), (4096, 8), (8192, 4), (8192, 8),
                               (8192, 16), (16384, 8), (16384, 16))
                  if b < n and _fits(1, b, 16 // BYTES[dtype], w)]
        if d["LOOPED"]:
            return [d] + [c for c in looped if c != d]
        out = _row_configs(m, n, dtype, d, _fits)
        vec = 16 // BYTES[dtype]
        if aligned and n % 16:
            out.append(dict(d, VEC=1))                        # the element-wide path, for comparison
        if not aligned:                                       # the 16-byte load window, for comparison
            out.append(dict(d, VEC=vec, BLOCK_N=sm._next_pow2(n + vec - 1)))
            out += [dict(c, VEC=vec) for c in looped if c["BLOCK_N"] <= 4096]   # small chunks, few registers
        return out
    if kernel == "rmsnorm":
        m, n = shape
        d = rn.default_config(m, n, BYTES[dtype], (n * BYTES[dtype]) % 16 == 0)
        return _row_configs(m, n, dtype, d, _fits)
    (n,) = shape
    d = ew.default_config(n, BYTES[dtype])
    vec = d["VEC"]
    out = [d]
    for per_thread in (1, 2, 4, 8):
        for warps in (4, 8):
            cfg = dict(d, BLOCK=per_thread * vec * 32 * warps, NUM_WARPS=warps)
            if cfg not in out:
                out.append(cfg)
    out += [dict(c, EVICT="evict_first") for c in out[:3]]
    return out


# ------------------------------------------------------------------------------ launching


def _torch_dtype(dtype: str):
    import torch
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]


def make_inputs(kernel: str, shape: tuple, dtype: str, device: str = "cuda") -> dict:
    """Fresh random operands (never zeros) and a NaN-poisoned output."""
    import torch
    dt = _torch_dtype(dtype)
    if kernel == "swiglu":
        a = (torch.randn(shape, device=device) * 3).to(dt)
        return {"a": a, "b": torch.randn(shape, device=device).to(dt), "out": torch.full_like(a, float("nan"))}
    x = (torch.randn(shape, device=device) * (4 if kernel == "softmax" else 1)).to(dt)
    inp = {"x": x, "out": torch.full_like(x, float("nan"))}
    if kernel == "rmsnorm":
        inp["w"] = (torch.rand(shape[1], device=device) + 0.5).to(dt)
    return inp


def fake_inputs(kernel: str, shape: tuple, dtype: str) -> dict:
    """Meta tensors (no data; data_ptr() 0, so 16-byte aligned) with the shapes, strides and dtypes of
    make_inputs': what the launch path needs to pick and compile the same specialization."""
    import torch
    dt = _torch_dtype(dtype)

    def like(s):
        return torch.empty(s, dtype=dt, device="meta")
    out = {"out": like(shape)}
    if kernel == "swiglu":
        return dict(out, a=like(shape), b=like(shape))
    out["x"] = like(shape)
    if kernel == "rmsnorm":
        out["w"] = like((shape[1],))
    return out


def plan(kernel: str, inp: dict, cfg: dict):
    """(jit kernel, grid, args, meta) of one launch."""
    if kernel == "softmax":
        return (sm.softmax_kernel, *sm.launch_plan(inp["x"], inp["out"], **cfg))
    if kernel == "rmsnorm":
        return (rn.rmsnorm_kernel, *rn.launch_plan(inp["x"], inp["w"], inp["out"], 1e-6, **cfg))
    return (ew.swiglu_kernel, *ew.launch_plan(inp["a"], inp["b"], inp["out"], **cfg))


def ours(kernel: str, inp: dict, cfg: dict):
    """The host function's call with these tunables."""
    if kernel == "softmax":
        return lambda: sm.softmax(inp["x"], inp["out"], **cfg)
    if kernel == "rmsnorm":
        return lambda: rn.rms_norm(inp["x"], inp["w"], 1e-6, inp["out"], **cfg)
    return lambda: ew.swiglu(inp["a"], inp["b"], inp["out"], **cfg)


def baseline(kernel: str, inp: dict):
    import torch
    if kernel == "softmax":
        return lambda: torch.softmax(inp["x"], dim=-1)
    if kernel == "rmsnorm":
        n = inp["x"].shape[-1]
        return lambda: torch.nn.functional.rms_norm(inp["x"], (n,), inp["w"], 1e-6)
    return lambda: torch.nn.functional.silu(inp["a"]) * inp["b"]


def reference(kernel: str, inp: dict):
    import torch
    if kernel == "softmax":
        return torch.softmax(inp["x"].float(), dim=-1)
    if kernel == "rmsnorm":
        return rn.reference(inp["x"], inp["w"])
    return ew.reference(inp["a"], inp["b"])


def nbytes(kernel: str, shape: tuple, dtype: str) -> int:
    """The fewest bytes a kernel moves: inputs read once, the output written once."""
    n = 1
    for d in shape:
        n *= d
    return n * BYTES[dtype] * (3 if kernel == "swiglu" else 2) + (shape[-1] * BYTES[dtype] if kernel == "rmsnorm" else 0)


def _compile_job(job) -> tuple:
    kernel, shape, dtype, cfg = job
    t = time.time()
    try:
        jit, grid, args, meta = plan(kernel, fake_inputs(kernel, shape, dtype), cfg)
        ck = jit[grid].compiled(*args, arch="sm90", **meta)
        return job, time.time() - t, ck.registers, ck.spills, ""
    except Exception as e:                       # reported, the sweep goes on without it
        return job, time.time() - t, None, None, f"{type(e).__name__}: {e}".splitlines()[0][:200]


def precompile(cases, procs: int) -> dict:
    """Compile every config of `cases` (through the launch path, CPU stand-ins) with `procs` processes;
    {(kernel, shape, dtype, cfg as tuple): (registers, spills, error)}."""
    import multiprocessing
    jobs = [(k, s, d, c) for k, s, d in cases for c in configs(k, s, d)]
    t = time.time()
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        results = pool.map(_compile_job, jobs, chunksize=1)
    errors = [r for r in results if r[4]]
    print(f"precompiled {len(jobs)} configs in {time.time() - t:.1f} s ({procs} processes), {len(errors)} failed",
          flush=True)
    for job, _, _, _, err in errors:
        print(f"  compile failed: {job[0]} {job[1]} {job[2]} {job[3]}: {err}")
    return {(k, s, d, tuple(sorted(c.items()))): (reg, spill, err) for (k, s, d, c), _, reg, spill, err in results}


def _cfg_text(kernel: str, cfg: dict) -> str:
    keys = {"softmax": ("BLOCK_N", "ROWS_PER_PROGRAM", "NUM_WARPS", "VEC", "LOOPED"),
            "rmsnorm": ("BLOCK_N", "ROWS_PER_PROGRAM", "NUM_WARPS", "VEC"),
            "swiglu": ("BLOCK", "NUM_WARPS", "VEC", "EVICT")}[kernel]
    short = {"BLOCK_N": "BN", "ROWS_PER_PROGRAM": "R", "NUM_WARPS": "W", "VEC": "V", "LOOPED": "LOOP",
             "BLOCK": "B", "EVICT": "EV"}
    parts = []
    for k in keys:
        v = cfg.get(k)
        if k == "LOOPED" and not v or k == "EVICT" and not v:
            continue
        parts.append(f"{short[k]}{'' if k == 'LOOPED' else '=' + str(v)}" if k != "EVICT" else "EV=first")
    return ",".join(parts)


def _eager_probe(kernel: str, inp: dict, cfg: dict, rep_ms: int) -> dict:
    """The best config launched eagerly, as a user calls it: through the host function (launch plan and
    specialization lookup on every call) and through the compiled kernel's launcher alone; and the host
    function's CPU time per call (200 calls back to back, so the GPU queue never runs dry)."""
    import torch
    jit, grid, args, meta = plan(kernel, inp, cfg)
    ck = jit[grid].compiled(*args, **meta)
    fn = ours(kernel, inp, cfg)
    out = {"eager_ms": bench_ms(fn, rep_ms), "launcher_ms": bench_ms(lambda: ck(grid, *args), rep_ms)}
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(200):
        fn()
    out["host_call_us"] = (time.perf_counter() - t) / 200 * 1e6
    torch.cuda.synchronize()
    return out


def run_case(kernel: str, shape: tuple, dtype: str, resources: dict, rep_ms: int, repeats: int, deadline: float):
    """Check and time every config of one case; the summary row of the table and every config's row.
    Times are CUDA-graph replays (the GPU's time, no host launch cost) for both sides; the best config
    is also timed eagerly (`_eager_probe`)."""
    import torch
    inp = make_inputs(kernel, shape, dtype)
    ref = reference(kernel, inp)
    tol = 1e-5 if dtype == "fp32" else 1e-2
    torch_graph = graphed(baseline(kernel, inp))
    torch_ms = bench_ms(torch_graph, rep_ms)
    torch_eager_ms = bench_ms(baseline(kernel, inp), rep_ms)
    rows = []
    for i, cfg in enumerate(configs(kernel, shape, dtype)):
        if time.time() > deadline and i > 0:
            break
        key = (kernel, shape, dtype, tuple(sorted(cfg.items())))
        reg, spill, err = resources.get(key, (None, None, ""))
        row = {"kernel": kernel, "shape": list(shape), "dtype": dtype, "config": cfg, "cfg": _cfg_text(kernel, cfg),
               "default": i == 0, "registers": reg, "spills": spill, "torch_ms": torch_ms}
        rows.append(row)
        if err:
            row["error"] = err
            continue
        try:
            inp["out"].fill_(float("nan"))
            fn = ours(kernel, inp, cfg)
            fn()
            torch.cuda.synchronize()
            out = inp["out"].float()
            row["nan"] = int(out.isnan().sum().item())
            row["rel_err"] = ((out - ref).norm() / ref.norm()).item()
            row["ok"] = row["nan"] == 0 and row["rel_err"] < tol
            row["graph"] = graphed(fn)
            row["time_ms"] = bench_ms(row["graph"], rep_ms)
            row["ratio"] = torch_ms / row["time_ms"]
            row["tb_s"] = nbytes(kernel, shape, dtype) / row["time_ms"] / 1e9
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
            row["ok"] = False
    good = [r for r in rows if r.get("ok")]
    summary = {"kernel": kernel, "shape": "x".join(map(str, shape)), "dtype": dtype, "torch_us": torch_ms * 1e3,
               "torch_eager_us": torch_eager_ms * 1e3, "checked": f"{len(good)}/{len(rows)}"}
    if good:
        best = min(good, key=lambda r: r["time_ms"])
        summary.update(best=best["cfg"], best_us=best["time_ms"] * 1e3, best_tb_s=best["tb_s"],
                       best_ratio=best["ratio"])
        default = rows[0]
        if default.get("ok"):
            summary.update(default=default["cfg"], default_us=default["time_ms"] * 1e3, default_ratio=default["ratio"])
        if time.time() < deadline:       # the best (and the default) again, interleaved with torch, and eagerly
            for tag, r in (("best", best), ("default", default)):
                if tag == "default" and (r is best or not r.get("ok")):
                    continue
                it = interleaved(r["graph"], torch_graph, repeats, rep_ms)
                r["interleaved"] = it
                summary[f"{tag}_ratio"] = it["ratio"]
                summary[f"{tag}_us"] = it["time_ms"] * 1e3
            if default is best:
                summary["default_ratio"], summary["default_us"] = summary["best_ratio"], summary["best_us"]
            probe = _eager_probe(kernel, inp, best["config"], rep_ms)
            best.update(probe)
            summary.update(eager_us=probe["eager_ms"] * 1e3, launcher_us=probe["launcher_ms"] * 1e3,
                           host_call_us=probe["host_call_us"], eager_ratio=torch_eager_ms / probe["eager_ms"])
    for r in rows:
        status = "ok" if r.get("ok") else ("ERROR " + r["error"] if r.get("error") else f"WRONG nan={r.get('nan')} err={r.get('rel_err')}")
        t = f"{r['time_ms'] * 1e3:8.1f} us {r['ratio']:.2f}x {r['tb_s']:.2f} TB/s" if "time_ms" in r else ""
        print(f"  {kernel} {shape} {dtype} {r['cfg']:<28} reg={r['registers']} spill={r['spills']} {status} {t}",
              flush=True)
        r.pop("graph", None)
    del inp, ref, torch_graph
    torch.cuda.empty_cache()
    return summary, rows


def _copy_tb_s() -> float:
    """torch's device-to-device copy of 1 GiB fp32 in TB/s (bytes read + written): the ceiling."""
    import torch
    src = torch.empty(1 << 28, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / bench_ms(lambda: dst.copy_(src), 50) / 1e9


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--precompile", action="store_true", help="compile the sweep for sm_90 and exit (no GPU needed)")
    p.add_argument("--quick", action="store_true", help="one dtype per size")
    p.add_argument("--procs", type=int, default=max(1, min(16, (os.cpu_count() or 2))))
    p.add_argument("--budget-s", type=float, default=240.0, help="stop sweeping after this many seconds; "
                   "what was measured is still reported")
    p.set_defaults(repeats=3, round_ms=60)
    args = p.parse_args()
    cases = [c for i, c in enumerate(CASES) if not args.quick or i in QUICK]
    t0 = time.time()
    resources = precompile(cases, args.procs)
    if args.precompile:
        spilled = sorted({(k, d, dict(c).get("NUM_WARPS")) for (k, s, d, c), (_, sp, _) in resources.items() if sp})
        print(f"configs with spills: {spilled or 'none'}")
        return 0
    import torch
    if not torch.cuda.is_available():
        print("bench/norms.py needs a CUDA GPU (or --precompile)", file=sys.stderr)
        return 2
    deadline = t0 + args.budget_s
    copy_tb_s = _copy_tb_s()
    print(f"{torch.cuda.get_device_name()}: torch copy of 1 GiB fp32 at {copy_tb_s:.2f} TB/s", flush=True)
    summaries, rows = [], []
    for kernel, shape, dtype in cases:
        s, r = run_case(kernel, shape, dtype, resources, args.round_ms, args.repeats, deadline)
        summaries.append(s)
        rows += r
    meta = environment() | {"copy_tb_s": copy_tb_s, "wall_s": time.time() - t0}
    write_json(args.json, rows + [dict(s, summary=True) for s in summaries], meta)
    print(f"\n{meta['device']}, commit {meta['commit']}, torch {meta['torch']}; CUDA-graph replays, L2 flushed; "
          f"ratio = torch time / ours (interleaved rounds); copy ceiling {copy_tb_s:.2f} TB/s")
    print(table(summaries, [("kernel", "kernel", ""), ("shape", "shape", ""), ("dtype", "dtype", ""),
                            ("torch us", "torch_us", ".1f"), ("default", "default", ""), ("us", "default_us", ".1f"),
                            ("ratio", "default_ratio", ".2f"), ("best", "best", ""), ("us", "best_us", ".1f"),
                            ("ratio", "best_ratio", ".2f"), ("TB/s", "best_tb_s", ".2f"), ("ok", "checked", "")]))
    print("\neager launches of the best config (no graph): host function, compiled launcher alone, torch eager; "
          "host CPU time per call")
    print(table(summaries, [("kernel", "kernel", ""), ("shape", "shape", ""), ("dtype", "dtype", ""),
                            ("eager us", "eager_us", ".1f"), ("launcher us", "launcher_us", ".1f"),
                            ("torch eager us", "torch_eager_us", ".1f"), ("ratio", "eager_ratio", ".2f"),
                            ("host us/call", "host_call_us", ".1f")]))
    bad = [r for r in rows if not r.get("ok")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
