"""Shared benchmark plumbing: timing, interleaved repeats, tables and --json output.

Every benchmark measures its baseline in the same process and run, interleaving candidate and
baseline (A B B A ...), and reports the median ratio over repeats along with the spread, because
the GPU drifts by several percent within minutes.

Each side runs for --round-ms per round (default 1000 ms). Large GEMMs run at the board's power cap,
where the clock controller lowers the clock quickly and raises it slowly: in a short round the kernel
that follows a more power-hungry one runs at the clock that one left. Measured on the H200
(docs/PERF.md, seventh session): gemm_sm90 at 8192^3 fp16 read 1.65-1.84 ms in 200 ms rounds (the slow
ones right after cuBLAS), per-round ratios 0.92-1.03; in 1000 ms rounds 1.654-1.677 ms, 1.023-1.034.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", metavar="PATH", help="write every row (shape, dtype, config, times, ratio, error) here")
    p.add_argument("--repeats", type=int, default=5, help="interleaved candidate/baseline rounds (median reported)")
    p.add_argument("--round-ms", type=int, default=1000, help="time each side runs per round (default 1000 ms: at "
                   "the power cap the clock settles slowly after the other kernel; each row keeps its per-round times)")
    return p


def bench_ms(fn: Callable[[], None], rep_ms: int = 1000) -> float:
    """Median of CUDA-event timings with the L2 flushed before each run (triton.testing.do_bench)."""
    from triton.testing import do_bench
    return float(do_bench(fn, warmup=25, rep=rep_ms, return_mode="median"))


def graphed(fn: Callable[[], None]) -> Callable[[], None]:
    """`fn` captured in a CUDA graph: replays time the GPU work alone, without host launch overhead
    (what a framework that captures graphs sees). Warms up on a side stream first, as torch requires."""
    import torch
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def interleaved(candidate: Callable[[], None], baseline: Callable[[], None], repeats: int,
                rep_ms: int = 1000) -> dict:
    """Time candidate and baseline alternately, the order swapped every round; medians and the ratio
    baseline/candidate per round, and each round's times (rounds_ms, baseline_rounds_ms) to study the spread."""
    from gluon.tuning.measure import alternate_rounds
    cand, base = alternate_rounds(candidate, baseline, repeats, lambda fn: bench_ms(fn, rep_ms))
    ratios = [b / c for c, b in zip(cand, base)]
    return {"time_ms": statistics.median(cand), "baseline_ms": statistics.median(base),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "rounds_ms": cand, "baseline_rounds_ms": base, "round_ms": rep_ms}


def timed(fn: Callable[[], None], repeats: int, rep_ms: int = 1000) -> dict:
    """Time one side alone over `repeats` rounds (a baseline whose candidate failed its check): the median
    and each round, keyed as `interleaved` keys the candidate."""
    from gluon.tuning.measure import alternate_rounds
    rounds, _ = alternate_rounds(fn, None, repeats, lambda f: bench_ms(f, rep_ms))
    return {"time_ms": statistics.median(rounds), "rounds_ms": rounds, "round_ms": rep_ms}


def host_us_per_call(fn: Callable[[], None], calls: int = 200) -> float:
    """Host time of one eager call in microseconds: `calls` calls back to back, timed on the CPU clock
    without waiting for the GPU (the launch queue absorbs the kernels while it is not full), after one
    warm-up call and a synchronize. What a model pays per call on top of the GPU work when the kernel is
    shorter than its launch."""
    import torch
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def poison_allocator(nbytes: int) -> None:
    """For an API without `out=`: leave a freed block of `nbytes` filled with 0xFF bytes (NaN in fp16, bf16
    and fp32) in torch's caching allocator, which hands it to the next allocation of that size, so an
    output the implementation does not fully write reads NaN rather than stale numbers. Best effort: an
    implementation that first allocates something else may take (part of) the block."""
    import torch
    torch.cuda.synchronize()
    torch.cuda.empty_cache()                # the poisoned block is then the only cached one
    torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(0xFF)
    torch.cuda.synchronize()


def parse_config(text: str) -> dict:
    """'BLOCK_N=256,STAGES=3,EPILOGUE=direct,SPLIT_WGS=False' -> {'BLOCK_N': 256, 'STAGES': 3, 'EPILOGUE':
    'direct', 'SPLIT_WGS': False}: integers and True/False are typed (the string 'False' is truthy), the
    rest stay strings; '' -> {} (the kernel's default config)."""
    cfg = {}
    for kv in filter(None, text.split(",")):
        k, _, v = kv.partition("=")
        v = v.strip()
        cfg[k.strip()] = int(v) if v.lstrip("-").isdigit() else {"True": True, "False": False}.get(v, v)
    return cfg


def source_hash(root: str = ROOT) -> str:
    """sha256 (12 hex digits) of the package's and the benchmarks' Python sources as they are on disk:
    names the code that ran even where the git metadata is missing or stale (a copied working tree)."""
    h = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(root, "gluon", "**", "*.py"), recursive=True)
                       + glob.glob(os.path.join(root, "bench", "*.py"))):
        h.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read() + b"\0")
    return h.hexdigest()[:12]


def git_commit(root: str = ROOT) -> str:
    """HEAD's short hash, with "-dirty" where tracked files differ from it (a working tree copied onto
    another machine over an older clone reads as that clone's HEAD: the suffix says so, `source` names
    the code); "" without git."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD")
    return head + ("-dirty" if head and git("status", "--porcelain", "--untracked-files=no") else "")


def need_gpu(script: str) -> None:
    """One line and exit status 1 where no CUDA GPU is present, instead of torch's traceback at the first tensor."""
    import torch
    if not torch.cuda.is_available():
        print(f"{script} needs a CUDA GPU", file=sys.stderr)
        raise SystemExit(1)


def loaded_gemms_256() -> tuple:
    """What `gluon.load` returns over a one-bucket build at 256^3 (no build folder: the manifest's entries only;
    compiled on first use), for the host-time benches: the GEMM spec's fp16 bucket of its first seed config, and
    the fp8 block spec's e4m3 bucket of `launch`'s pick."""
    from gluon.loader import LoadedKernel
    from gluon.tuning.templates.gemm_sm90 import TUNING
    from gluon.tuning.templates.gemm_sm90_fp8_scales import BLOCK
    shape = [256, 256, 256]
    fp16 = LoadedKernel.of_entries("gemm_sm90", TUNING, [{"shape": shape, "dtype": "fp16",
                                                          "config": TUNING.seed_configs()[0]}])
    fp8 = LoadedKernel.of_entries("gemm_sm90_fp8_block", BLOCK, [{"shape": shape, "dtype": "fp8e4m3",
                                                                  "config": BLOCK.pick(tuple(shape), "fp8e4m3")}])
    return fp16, fp8


def environment() -> dict:
    import torch
    import triton
    commit = os.environ.get("GLUON_COMMIT") or git_commit()
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "torch": torch.__version__, "triton": triton.__version__, "commit": commit or "unknown",
            "source": source_hash()}


def write_json(path: str | None, rows: list[dict], meta: dict) -> None:
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    os.replace(tmp, path)


def table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    """cols: (header, key, format)."""
    head = " | ".join(h for h, _, _ in cols)
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(" | ".join(format(r.get(k, ""), f) if r.get(k) is not None else "-" for _, k, f in cols))
    return "\n".join(lines)
