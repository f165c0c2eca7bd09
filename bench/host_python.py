"""The Python share of a launch's host time, on any machine (no GPU needed).

    python3 bench/host_python.py [--calls 200000] [--repeats 5] [--json out.json]

Each of our launch paths is called on CPU tensors through a backend whose C launch function does nothing
(the kernels are compiled for sm_90 as on the H200, their binaries never run), so a row is the Python one
call runs: us per call, the best of `--repeats` rounds of `--calls` calls (timeit). bench/launch_overhead.py
times the same paths on the GPU against torch's own calls; this one follows their Python from one change to
the next where no GPU is at hand. Rows:

* copy 4096 fp32 (examples/copy_kernel.py): the compiled kernel `ck(grid, ...)`, its Launcher with bound
  arguments, the JIT `copy_kernel_explicit[grid](...)` (a call seen before);
* softmax 64x1000 bf16 (specs/softmax.toml): the declared template's call (what `gluon.load("softmax")(x)`
  runs once its bucket is chosen), output allocated;
* GEMM 256^3 fp16: `gemm_sm90.launch(a, b, c)` (c given; its TMA descriptors from the descriptor cache), the
  same with a dict config (`{"STAGES": 3}`: a repeat keyed by its items), and `gluon.load("gemm_sm90")(a, b)`
  over a built bucket of the GEMM spec's first seed config (output allocated); at 256x256x250 (A's rows off
  16 bytes) the launch with A's copy into its padded buffer (a CPU copy here);
* GEMM 256^3 fp8 e4m3 with DeepGEMM's block scales: `launch(a, b, c, b_kmajor=True, scale_a=..., scale_b=...)`
  and the fp8 block spec's `gluon.load` callable over a bucket of `launch`'s pick (output allocated), the rows
  bench/launch_overhead.py times against `torch._scaled_mm`;
* for scale: `torch.empty_like` of the softmax input (the output allocation inside the declared call) and a
  Python call that does nothing.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import timeit

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.common import ROOT, environment, loaded_gemms_256, table, write_json  # noqa: E402


class NoLaunchBackend:
    """The runtime backend's interface on the CPU: the current device is 0, binaries "load" to a dummy
    handle, and the C launch function returns at once."""

    device_type = "cpu"

    def check_available(self, kernel):
        pass

    def current_device(self):
        return 0

    def device_context(self, device):
        return contextlib.nullcontext()

    def current_stream(self, device):
        return 0

    def capability(self, device):
        return (9, 0)

    def max_shared(self, device):
        return 232448

    def load(self, name, cubin, shared, device):
        return 1, 1024

    def make_launcher(self, launch_types, meta):
        return lambda *args: None

    def direct_launch(self, launcher):
        return (lambda *args: None), False, False

    def launch_hooks(self):
        return None, None

    def fill_tma_descriptor(self, *args):
        return ("CUtensorMap", args)


def _cases() -> list[tuple[str, str, object]]:
    """(group, name, callable): each called once before timing (compiles, loads, makes the fast entries)."""
    import torch

    import gluon.runtime.cuda as rt_cuda
    from gluon.arch import SM90
    from gluon.tuning.spec import load_spec, template_of
    rt_cuda.DEFAULT_BACKEND = NoLaunchBackend()
    sys.modules["gluon.jit"].current_arch = lambda: SM90       # the JIT compiles for the H200, as on one
    torch.cuda.current_device = lambda: 0                       # the GEMM plans for device 0, an H200's SMs
    rt_cuda._SM_COUNTS[0] = 132
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from copy_kernel import copy_kernel_explicit

    src = torch.randn(4096)
    dst = torch.empty_like(src)
    grid = (4,)
    kw = dict(XBLOCK=1024, VEC=4, NUM_WARPS=4, num_warps=4)
    ck = copy_kernel_explicit[grid].compiled(dst, src, 4096, **kw)
    bound = ck.launch_args((dst, src, 4096), {})
    sm = template_of(load_spec(os.path.join(ROOT, "specs", "softmax.toml")))
    x = torch.randn(64, 1000, dtype=torch.bfloat16)
    sm_config = {"PROGRAM_BYTES": 2048, "ELEMS_PER_THREAD": 16, "CHUNK": 8192}
    from gluon.kernels.gemm_sm90 import launch
    a, b, c = (torch.randn(256, 256).half() for _ in range(3))
    a_odd, b_odd = torch.randn(256, 250).half(), torch.randn(250, 256).half()
    loaded, loaded8 = loaded_gemms_256()
    f8 = [torch.randn(256, 256).to(torch.float8_e4m3fn) for _ in range(2)]
    sa, sb = torch.rand(256, 2) + 0.25, torch.rand(2, 2) + 0.25
    c8 = torch.empty(256, 256, dtype=torch.bfloat16)
    fp8 = "GEMM 256^3 fp8 block scales"
    return [
        ("copy 4096 fp32", "compiled ck(grid, ...)", lambda: ck(grid, dst, src, 4096)),
        ("copy 4096 fp32", "Launcher, bound args", lambda: ck.launcher(grid, *bound)),
        ("copy 4096 fp32", "JIT kernel[grid](...)", lambda: copy_kernel_explicit[grid](dst, src, 4096, **kw)),
        ("softmax 64x1000 bf16", "declared call (gluon.load's)", lambda: sm.call(sm_config, x)),
        ("GEMM 256^3 fp16", "gemm_sm90.launch(a, b, c)", lambda: launch(a, b, c)),
        ("GEMM 256^3 fp16", "gemm_sm90.launch(a, b, c, {\"STAGES\": 3})", lambda: launch(a, b, c, {"STAGES": 3})),
        ("GEMM 256^3 fp16", "gluon.load's callable (a, b)", lambda: loaded(a, b)),
        (fp8, "gemm_sm90.launch(a, b, c, scales)", lambda: launch(*f8, c8, b_kmajor=True, scale_a=sa, scale_b=sb)),
        (fp8, "gluon.load's callable (a, b, scales)", lambda: loaded8(*f8, scale_a=sa, scale_b=sb)),
        ("GEMM 256x256x250 fp16 (rows off 16 B)", "gemm_sm90.launch(a, b, c)", lambda: launch(a_odd, b_odd, c)),
        ("for scale", "torch.empty_like(x)", lambda: torch.empty_like(x)),
        ("for scale", "a Python call doing nothing", lambda: None),
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=200000, help="calls per round (default 200000)")
    p.add_argument("--repeats", type=int, default=5, help="rounds per path; the fastest is reported (default 5)")
    p.add_argument("--json", metavar="PATH", help="write every row here")
    args = p.parse_args()
    if args.calls < 1 or args.repeats < 1:
        p.error("--calls and --repeats take a positive count")
    rows, meta = [], dict(environment(), complete=False, calls=args.calls)
    for group, name, fn in _cases():
        for _ in range(3):                  # compile, load, then the calls the fast entries take
            fn()
        us = min(timeit.repeat(fn, number=args.calls, repeat=args.repeats)) / args.calls * 1e6
        rows.append(dict(group=group, path=name, us=us))
        write_json(args.json, rows, meta)
    meta["complete"] = True
    write_json(args.json, rows, meta)
    print(f"Python per call, no launch (commit {meta['commit']}; best of {args.repeats} x {args.calls} calls)")
    print(table(rows, [("work", "group", ""), ("path", "path", ""), ("us/call", "us", ".3f")]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
