"""The example gallery (examples/) against torch: bandwidth of each kernel and of its torch equivalent.

    python bench/gallery.py [--quick] [--only softmax,transpose] [--json out.json]   # on a GPU
    python bench/gallery.py --list                                                   # anywhere: the cases

Kernels and their torch side: softmax (torch.softmax; short rows take the multi-row config, several rows a
program), layernorm (F.layer_norm), rmsnorm (F.rms_norm), transpose (x.t().contiguous()), row_sum
(x.sum(1) and x.amax(1)), cumsum (torch.cumsum), histogram (torch.bincount / torch.histc), fp8_quantize
(the per-row e4m3 quantization in torch ops, examples/fp8_quantize.py's `reference`). Each at 2-3 sizes,
among them ones that are not multiples of the kernel's tiles.

Per case: fresh random inputs, our output poisoned (NaN, or -1 bins) and checked against a torch reference
first (a case that fails is reported and not timed); then ours and torch timed interleaved (bench/common.py:
`interleaved`, ABBA rounds, median of CUDA-event timings with the L2 flushed), both as CUDA-graph replays
(torch.bincount reads its input's maximum on the host, so the int histogram runs eagerly on both sides). GB/s is the
fewest bytes the operation must move (inputs read once, outputs written once) over the median time; the
ratio is torch's time over ours. The default and the best config of the softmax/RMSNorm sweeps are in
bench/norms.py; this reports each kernel's default config.
"""
from __future__ import annotations

import os
import sys

# first: run as a script, sys.path[0] is bench/, whose copy.py would shadow the stdlib's (dataclasses imports it)
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Callable  # noqa: E402

from bench.common import ROOT, environment, graphed, interleaved, parser, table, write_json  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "examples"))

import cumsum as cs  # noqa: E402
import fp8_quantize as fq  # noqa: E402
import histogram as hg  # noqa: E402
import layernorm_kernel as ln  # noqa: E402
import row_sum as rs  # noqa: E402
import transpose_kernel as tk  # noqa: E402

from bench import norms  # noqa: E402  -- softmax and RMSNorm: its inputs, launches, references and baselines

BYTES = {"fp16": 2, "bf16": 2, "fp32": 4, "int32": 4}


@dataclass(frozen=True)
class Case:
    """One benchmark row: a kernel at a shape and dtype; `bins` for the histogram."""

    kernel: str
    shape: tuple
    dtype: str
    bins: int = 0

    @property
    def label(self) -> str:
        bins = f" {self.bins} bins" if self.bins else ""
        return f"{self.kernel} {'x'.join(map(str, self.shape))} {self.dtype}{bins}"


CASES = [
    Case("softmax", (8192, 4096), "fp16"), Case("softmax", (65536, 128), "fp16"), Case("softmax", (4096, 1000), "bf16"),
    Case("layernorm", (8192, 4096), "fp16"), Case("layernorm", (4096, 1000), "bf16"),
    Case("layernorm", (32768, 1024), "fp32"),
    Case("rmsnorm", (8192, 4096), "bf16"), Case("rmsnorm", (4096, 1000), "fp16"),
    Case("transpose", (8192, 8192), "fp16"), Case("transpose", (4096, 1000), "fp32"),
    Case("transpose", (3001, 517), "fp16"),
    Case("row_sum", (8192, 4096), "fp16"), Case("row_sum", (65536, 128), "fp32"), Case("row_sum", (512, 50000), "bf16"),
    Case("cumsum", (8192, 4096), "fp16"), Case("cumsum", (4096, 1000), "fp32"), Case("cumsum", (512, 20000), "fp32"),
    Case("histogram", (1 << 26,), "int32", 256), Case("histogram", ((1 << 24) + 3,), "fp32", 100),
    Case("histogram", (1 << 26,), "int32", 1000),
    Case("fp8_quantize", (8192, 4096), "bf16"), Case("fp8_quantize", (4096, 1000), "fp16"),
    Case("fp8_quantize", (32768, 1024), "fp32"),
]
KERNELS = tuple(dict.fromkeys(c.kernel for c in CASES))


def quick_cases(cases: list[Case]) -> list[Case]:
    """--quick: the first (the largest, aligned) size of each kernel."""
    seen, out = set(), []
    for c in cases:
        if c.kernel not in seen:
            seen.add(c.kernel)
            out.append(c)
    return out


def select_cases(only: str | None, quick: bool) -> list[Case]:
    """The cases of the kernels named in `only` (comma-separated; None: all), the first of each with
    `quick`. An unknown name is a ValueError naming it and the known ones."""
    cases = CASES
    if only:
        names = [n.strip() for n in only.split(",") if n.strip()]
        bad = [n for n in names if n not in KERNELS]
        if bad:
            raise ValueError(f"--only {bad[0]!r}: not a gallery kernel; the kernels are {', '.join(KERNELS)}")
        cases = [c for c in CASES if c.kernel in names]
    return quick_cases(cases) if quick else list(cases)


def nbytes(case: Case) -> int:
    """The fewest bytes the operation moves: inputs read once, outputs written once."""
    e = BYTES[case.dtype]
    n = 1
    for d in case.shape:
        n *= d
    rows, cols = (case.shape + (1,))[:2] if len(case.shape) == 1 else case.shape
    return {
        "softmax": 2 * n * e, "transpose": 2 * n * e, "cumsum": 2 * n * e,
        "rmsnorm": 2 * n * e + cols * e, "layernorm": 2 * n * e + 2 * cols * e,
        "row_sum": n * e + 2 * rows * 4,                       # x once; fp32 sums and maxima
        "histogram": n * e + case.bins * 4,
        "fp8_quantize": n * e + n + rows * 4,                 # x; e4m3 q; fp32 scales
    }[case.kernel]


def config(case: Case) -> dict:
    """The kernel's default config for the case (what its host function launches), for the table; no GPU."""
    e = BYTES[case.dtype]
    if case.kernel in ("softmax", "rmsnorm"):
        return norms.configs(case.kernel, case.shape, case.dtype)[0]
    m, n = (case.shape + (1,))[:2] if len(case.shape) == 1 else case.shape
    aligned = (n * e) % 16 == 0
    return {"layernorm": lambda: ln.default_config(m, n, e, aligned), "transpose": lambda: tk.default_config(m, n, e),
            "row_sum": lambda: rs.default_config(m, n, e), "cumsum": lambda: cs.default_config(m, n, e),
            "histogram": lambda: hg.default_config(m, case.bins, e),
            "fp8_quantize": lambda: fq.default_config(m, n, e)}[case.kernel]()


# ------------------------------------------------------------------------------ on the GPU


@dataclass
class Bound:
    """A case's inputs and its three callables: ours (into the poisoned outputs), torch's, and the check of
    our outputs (None when right, else what is wrong)."""

    ours: Callable[[], object]
    theirs: Callable[[], object]
    check: Callable[[], str | None]
    poison: Callable[[], None]
    keep: dict = field(default_factory=dict)
    graph: bool = True                   # both sides capture in a CUDA graph


def _rel_err_check(out, ref, dtype: str) -> Callable[[], str | None]:
    def check():
        bad = int(out.isnan().sum())
        if bad:
            return f"{bad} elements not written (NaN)"
        err = ((out.float() - ref).norm() / ref.norm()).item()
        return None if err < (1e-5 if dtype == "fp32" else 1e-2) else f"relative error {err:.2e}"
    return check


def bind(case: Case, device: str = "cuda") -> Bound:
    """Fresh inputs on `device` and the callables of one case (on the CPU with the interpreter enabled, the
    tests run small cases through it)."""
    import torch
    import torch.nn.functional as F
    dt = norms._torch_dtype(case.dtype) if case.dtype != "int32" else torch.int32
    if case.kernel in ("softmax", "rmsnorm"):
        inp = norms.make_inputs(case.kernel, case.shape, case.dtype, device)
        return Bound(norms.ours(case.kernel, inp, {}), norms.baseline(case.kernel, inp),
                     _rel_err_check(inp["out"], norms.reference(case.kernel, inp), case.dtype),
                     lambda: inp["out"].fill_(float("nan")), inp)
    if case.kernel == "histogram":
        (n,) = case.shape
        bins = case.bins
        hist = torch.full((bins,), -1, device=device, dtype=torch.int32)
        if dt == torch.int32:
            x = torch.randint(0, bins, (n,), device=device, dtype=dt)
            return Bound(lambda: hg.histogram(x, bins, hist=hist), lambda: torch.bincount(x, minlength=bins),
                         lambda: hg.check(x, hist, bins), lambda: hist.fill_(-1), {"x": x, "hist": hist},
                         graph=False)              # bincount reads x's maximum on the host: no capture
        x = (torch.randn(n, device=device) * 2).to(dt)
        return Bound(lambda: hg.histogram(x, bins, -3.0, 3.0, hist), lambda: torch.histc(x, bins, -3.0, 3.0),
                     lambda: hg.check(x, hist, bins, -3.0, 3.0), lambda: hist.fill_(-1), {"x": x, "hist": hist})
    m, n = case.shape
    x = torch.randn(m, n, device=device).to(dt)
    nan = float("nan")
    if case.kernel == "layernorm":
        x = x + 3.0
        w, b = (torch.rand(n, device=device) + 0.5).to(dt), torch.randn(n, device=device).to(dt)
        out = torch.full_like(x, nan)
        return Bound(lambda: ln.layer_norm(x, w, b, 1e-5, out), lambda: F.layer_norm(x, (n,), w, b, 1e-5),
                     _rel_err_check(out, ln.reference(x, w, b), case.dtype), lambda: out.fill_(nan), {"x": x})
    if case.kernel == "transpose":
        out = torch.full((n, m), nan, device=device, dtype=dt)
        ref = x.t().contiguous()
        return Bound(lambda: tk.transpose(x, out), lambda: x.t().contiguous(),
                     lambda: None if torch.equal(out, ref) else "not x.T", lambda: out.fill_(nan), {"x": x})
    if case.kernel == "row_sum":
        sums, maxes = torch.full((m,), nan, device=device), torch.full((m,), nan, device=device)
        return Bound(lambda: rs.row_sum(x, sums, maxes), lambda: (x.sum(1), x.amax(1)),
                     lambda: rs.check(x, sums, maxes), lambda: (sums.fill_(nan), maxes.fill_(nan)), {"x": x})
    if case.kernel == "cumsum":
        out = torch.full_like(x, nan)
        ref = x.double().cumsum(-1)
        scale = x.double().abs().cumsum(-1) + 1.0

        def check():
            err = ((out.double() - ref).abs() / scale).max().item()      # NaN fails too
            return None if err < (1e-5 if case.dtype == "fp32" else 1e-2) else f"error {err:.2e} of the |x| sum"
        return Bound(lambda: cs.cumsum(x, out), lambda: torch.cumsum(x, -1), check, lambda: out.fill_(nan), {"x": x})
    if case.kernel == "fp8_quantize":
        x = x * torch.rand(m, 1, device=device).to(dt) * 10
        q = torch.empty(m, n, device=device, dtype=torch.float8_e4m3fn)
        scales = torch.empty(m, device=device)

        def poison():
            q.view(torch.uint8).fill_(0x7F)                                # e4m3 NaN
            scales.fill_(nan)
        poison()
        return Bound(lambda: fq.quantize(x, q, scales), lambda: fq.reference(x), lambda: fq.check(x, q, scales),
                     poison, {"x": x})
    raise ValueError(f"unknown kernel {case.kernel!r}")


def run_case(case: Case, repeats: int, round_ms: int) -> dict:
    """Check, then time one case interleaved with torch; its row."""
    import torch
    row = {"kernel": case.kernel, "shape": "x".join(map(str, case.shape)), "dtype": case.dtype,
           "bins": case.bins or None, "config": config(case), "bytes": nbytes(case)}
    try:
        bound = bind(case)
        bound.poison()
        bound.ours()
        torch.cuda.synchronize()
        problem = bound.check()
    except Exception as e:                               # reported; the other cases go on
        problem = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    row["ok"] = problem is None
    row["problem"] = problem
    if problem is None:
        row["graph"] = bound.graph          # both sides alike: CUDA-graph replays, or both eager
        ours, theirs = (graphed(bound.ours), graphed(bound.theirs)) if bound.graph else (bound.ours, bound.theirs)
        it = interleaved(ours, theirs, repeats, round_ms)
        row.update(it)
        row["us"], row["torch_us"] = it["time_ms"] * 1e3, it["baseline_ms"] * 1e3
        row["gb_s"] = row["bytes"] / it["time_ms"] / 1e6
        row["torch_gb_s"] = row["bytes"] / it["baseline_ms"] / 1e6
    status = "ok" if problem is None else f"WRONG: {problem}"
    timing = (f"{row['us']:9.1f} us {row['gb_s']:7.0f} GB/s | torch {row['torch_us']:9.1f} us "
              f"{row['torch_gb_s']:7.0f} GB/s | {row['ratio']:.2f}x" if problem is None else "")
    print(f"  {case.label:<36} {status} {timing}", flush=True)
    torch.cuda.empty_cache()
    return row


def _cfg_text(cfg: dict) -> str:
    short = {"BLOCK_N": "BN", "BLOCK_M": "BM", "ROWS_PER_PROGRAM": "R", "NUM_WARPS": "W", "VEC": "V", "BLOCK": "B"}
    return ",".join(f"{short.get(k, k)}={v}" for k, v in cfg.items() if v is not False)


def build_parser():
    p = parser(__doc__)
    p.add_argument("--quick", action="store_true", help="the first size of each kernel only")
    p.add_argument("--only", metavar="KERNELS", help=f"comma-separated subset of: {', '.join(KERNELS)}")
    p.add_argument("--list", action="store_true", help="print the cases, their configs and bytes, and exit (no GPU)")
    p.set_defaults(repeats=5, round_ms=200)
    return p


def parse_args(argv: list[str] | None = None):
    """The arguments, with `cases` resolved (a bad --only or a non-positive --repeats/--round-ms is a usage
    error, exit code 2)."""
    p = build_parser()
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats {args.repeats}: must be at least 1")
    if args.round_ms < 1:
        p.error(f"--round-ms {args.round_ms}: must be at least 1")
    try:
        args.cases = select_cases(args.only, args.quick)
    except ValueError as e:
        p.error(str(e))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for c in args.cases:
            print(f"{c.label:<36} {nbytes(c) / 1e6:9.1f} MB  {_cfg_text(config(c))}")
        return 0
    import torch
    if not torch.cuda.is_available():
        print("bench/gallery.py needs a CUDA GPU (--list shows the cases without one)", file=sys.stderr)
        return 2
    t0 = time.time()
    copy_tb_s = norms._copy_tb_s()
    print(f"{torch.cuda.get_device_name()}: torch copy of 1 GiB fp32 at {copy_tb_s * 1e3:.0f} GB/s", flush=True)
    rows = [run_case(c, args.repeats, args.round_ms) for c in args.cases]
    for r in rows:
        r["cfg"] = _cfg_text(r["config"])
    meta = environment() | {"copy_gb_s": copy_tb_s * 1e3, "wall_s": time.time() - t0, "repeats": args.repeats}
    write_json(args.json, rows, meta)
    print(f"\n{meta['device']}, commit {meta['commit']}, torch {meta['torch']}; ratio = torch time / ours "
          f"(median of {args.repeats} interleaved rounds of {args.round_ms} ms; graph: CUDA-graph replays); "
          f"copy ceiling {copy_tb_s * 1e3:.0f} GB/s")
    print(table(rows, [("kernel", "kernel", ""), ("shape", "shape", ""), ("dtype", "dtype", ""), ("bins", "bins", ""),
                       ("config", "cfg", ""), ("us", "us", ".1f"), ("GB/s", "gb_s", ".0f"),
                       ("torch us", "torch_us", ".1f"), ("torch GB/s", "torch_gb_s", ".0f"), ("ratio", "ratio", ".2f"),
                       ("graph", "graph", ""), ("ok", "ok", "")]))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
