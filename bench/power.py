"""Power and clocks while a GEMM runs: is the GPU power-limited, and how much energy does a kernel spend?

    python bench/power.py [--seconds 4] [--shapes 8192x8192x8192] [--dtypes fp16,bf16] [--json out.json]

For cuBLAS (torch.matmul) and our persistent GEMM (gluon.kernels.gemm_sm90, its default config), each
run back to back for --seconds while `nvidia-smi` samples power draw, SM clock and the throttle reasons
every 100 ms; then the same kernel in a short burst (10 products after 2 s idle). A kernel that is
faster in the burst than sustained, with the power at the board limit and the clock below its maximum,
is power-bound: its speed is set by its energy per FLOP. Also prints the kernel names cuBLAS runs
(torch.profiler), so its tile and cluster shape are known.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.common import environment, parser, table, write_json  # noqa: E402

QUERY = "power.draw,clocks.sm,clocks_throttle_reasons.active,temperature.gpu,power.limit"


def _sampler(gpu: int) -> subprocess.Popen:
    return subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", "100",
                             "-i", str(gpu)], stdout=subprocess.PIPE, text=True)


def _samples(proc: subprocess.Popen) -> list[list[str]]:
    proc.terminate()
    out, _ = proc.communicate(timeout=10)
    return [[f.strip() for f in line.split(",")] for line in out.splitlines() if line.count(",") == 4]


def _sustained(fn, seconds: float, gpu: int) -> dict:
    import torch
    fn()
    torch.cuda.synchronize()
    proc = _sampler(gpu)
    time.sleep(0.3)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n = 0
    t0 = time.time()
    start.record()
    while time.time() - t0 < seconds:
        for _ in range(20):
            fn()
        n += 20
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / n
    rows = _samples(proc)[5:]                   # drop the samples from before the loop
    power = [float(r[0]) for r in rows if r[0].replace(".", "").isdigit()]
    clock = [float(r[1]) for r in rows if r[1].isdigit()]
    reasons = sorted({r[2] for r in rows})
    return {"ms": ms, "power_w": statistics.median(power) if power else None,
            "sm_mhz": statistics.median(clock) if clock else None, "throttle": " ".join(reasons),
            "temp_c": rows[-1][3] if rows else None, "power_limit_w": rows[-1][4] if rows else None}


def _burst(fn) -> float:
    import torch
    torch.cuda.synchronize()
    time.sleep(2.0)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 10


def _cublas_kernels(fn) -> list[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.key for e in prof.key_averages() if "gemm" in e.key.lower() or "sm90" in e.key.lower()})


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--shapes", default="8192x8192x8192")
    p.add_argument("--dtypes", default="fp16,bf16")
    p.add_argument("--configs", default="", help="';'-separated KEY=VALUE,... configs of our kernel (empty: default)")
    args = p.parse_args()
    import torch

    from bench.gemm import _parse_configs, config_name
    from gluon.dtypes import DType
    from gluon.kernels.gemm_sm90 import launch
    gpu = int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0)
    dts = {n: DType.from_name(n).torch for n in ("fp16", "bf16")}
    rows = []
    for shape in args.shapes.split(","):
        M, N, K = map(int, shape.split("x"))
        for dn in args.dtypes.split(","):
            a = torch.randn(M, K, device="cuda", dtype=dts[dn])
            b = torch.randn(K, N, device="cuda", dtype=dts[dn])
            c = torch.empty(M, N, device="cuda", dtype=dts[dn])
            names = _cublas_kernels(lambda: torch.matmul(a, b, out=c))
            print(f"{shape} {dn} cuBLAS runs: {names}", flush=True)
            cands = {"cublas": lambda: torch.matmul(a, b, out=c)}
            for cfg in _parse_configs(args.configs):
                cands[config_name("ws", cfg)] = (lambda cfg: lambda: launch(a, b, c, cfg or None))(cfg)
            for name, fn in cands.items():
                s = _sustained(fn, args.seconds, gpu)
                burst = _burst(fn)
                tf = 2 * M * N * K / 1e9
                row = {"shape": shape, "dtype": dn, "kernel": name, "sustained_tflops": tf / s["ms"],
                       "burst_tflops": tf / burst, "power_w": s["power_w"], "sm_mhz": s["sm_mhz"],
                       "throttle": s["throttle"], "temp_c": s["temp_c"], "power_limit_w": s["power_limit_w"],
                       "pj_per_flop": (s["power_w"] / (tf * 1e9 / s["ms"] * 1e3) * 1e12) if s["power_w"] else None,
                       "cublas_kernels": names if name == "cublas" else None}
                rows.append(row)
                print(row, flush=True)
    print(table(rows, [("shape", "shape", ""), ("dtype", "dtype", ""), ("kernel", "kernel", ""),
                       ("TFLOP/s sustained", "sustained_tflops", ".0f"), ("TFLOP/s burst", "burst_tflops", ".0f"),
                       ("W", "power_w", ".0f"), ("SM MHz", "sm_mhz", ".0f"), ("throttle", "throttle", ""),
                       ("pJ/FLOP", "pj_per_flop", ".3f")]))
    if args.json:
        write_json(args.json, rows, environment())
    return 0


if __name__ == "__main__":
    sys.exit(main())
