"""Host time per eager call: our launch paths against torch's own call, in one process.

    python3 bench/launch_overhead.py [--calls 2000] [--repeats 5] [--json out.json] [--profile DIR]

Each row is the CPU time of one call, measured as `calls` calls back to back on the CPU clock (the GPU
queue absorbs the tiny kernels while it is not full), after a warm-up call and a synchronize; the median
over `--repeats` rounds, the rounds of all rows interleaved. Ratios are against the torch call of the same
work in the same run (absolute times vary 2x between boards: compare within one run):

* copy of 4096 fp32: torch `dst.copy_(src)`; a plain Triton kernel; ours through the JIT
  (`copy_kernel_explicit[grid](...)`: specialization lookup, then launch), through the compiled kernel
  (`ck(grid, ...)`: argument binding, then launch) and through its Launcher with bound arguments;
* GEMM 256^3 fp16: `torch.matmul` (allocating) against `gemm_sm90.launch(a, b, c)` (preallocated c) and
  `gluon.load("gemm_sm90")(a, b)` (allocating; a bucket of the GEMM spec's first seed config, compiled here);
* GEMM 256^3 fp8 e4m3 with DeepGEMM's block scales: `torch._scaled_mm` blockwise (into a preallocated C) against
  `gemm_sm90.launch(a, b, c, b_kmajor=True, scale_a=..., scale_b=...)` (preallocated c) and the fp8 block spec's
  `gluon.load` callable (allocating; a bucket of `launch`'s pick there);
* GEMM 256x256x250 fp16, A's rows off 16 bytes: `torch.matmul` against `gemm_sm90.launch(a, b, c)` (the GEMM
  kernel copying A into its cached padded buffer itself, `padding.kernel_copies`: one launch), and against the
  same call with A copied by the driver first (`padding.COPY_IN_KERNEL_BYTES` 0 for its first call: what larger
  operands take);
* the copy of that A into its padded buffer alone, as larger operands are copied before the launch: torch's `copy_`
  into the buffer's view against the driver's cuMemcpy2DAsync prepared as the GEMM's launch prepares it
  (`CudaBackend.row_copy`; where cuda-python is installed);
* softmax 64x1000 bf16: `torch.softmax` against the declared spec's call (`specs/softmax.toml`, what
  `gluon.load("softmax")` runs: argument reading, the plan cache, the compiled specialization);
* attention [1, 8, 256, 64] fp16: torch's `scaled_dot_product_attention` (its flash kernel) against
  `gluon.kernels.attention_sm90.attention(q, k, v)` (output allocated by both);
* the parts of a launch: the backend's current device, current stream and launch hooks.

`--profile DIR` writes a cProfile of each of our paths (pstats files and their top-20 text).
"""
from __future__ import annotations

import os
import statistics
import sys

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.common import ROOT, environment, host_us_per_call, loaded_gemms_256, parser, table, write_json  # noqa: E402


def _cases() -> list[tuple[str, str, object]]:
    """(group, name, callable) for every path timed; the first of each group is torch's."""
    import torch
    import triton
    import triton.language as tl

    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import gluon.language as gl
    from copy_kernel import copy_kernel_explicit
    from gluon.kernels import gemm_sm90
    from gluon.kernels.gemm_sm90 import padding
    from gluon.runtime.cuda import DEFAULT_BACKEND as be

    @triton.jit
    def triton_copy(dst, src, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)

    src = torch.randn(4096, device="cuda")
    dst = torch.empty_like(src)
    grid = (4,)
    kw = dict(XBLOCK=1024, VEC=4, NUM_WARPS=4, num_warps=4)
    ck = copy_kernel_explicit[grid].compiled(dst, src, 4096, **kw)
    bound = ck.launch_args((dst, src, 4096), {})
    a = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    c = torch.empty(256, 256, device="cuda", dtype=torch.float16)
    a_odd, b_odd = (torch.randn(256, 250, device="cuda", dtype=torch.float16),
                    torch.randn(250, 256, device="cuda", dtype=torch.float16))

    from gluon.tuning.spec import load_spec, template_of
    sm = template_of(load_spec(os.path.join(ROOT, "specs", "softmax.toml")))
    x = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16)
    sm_config = {"PROGRAM_BYTES": 2048, "ELEMS_PER_THREAD": 16, "CHUNK": 8192}
    from gluon.kernels.attention_sm90 import attention
    q, k, v = (torch.randn(1, 8, 256, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    loaded, loaded8 = loaded_gemms_256()
    from gluon.tuning.templates.gemm_sm90_fp8_scales import scaled_mm_blockwise
    f8 = [torch.randn(256, 256, device="cuda").to(torch.float8_e4m3fn) for _ in range(2)]
    sa, sb = torch.rand(256, 2, device="cuda") + 0.25, torch.rand(2, 2, device="cuda") + 0.25
    c8 = torch.empty(256, 256, device="cuda", dtype=torch.bfloat16)
    blockwise = scaled_mm_blockwise(*f8, sa, sb, torch.empty_like(c8))
    # the same call with A copied by the driver first (padding.COPY_IN_KERNEL_BYTES 0 for its first call, which keeps
    # its PadPlan by the call's key: rows 251 elements apart, so not the kernel-copied call's key)
    a_k = torch.randn(256, 251, device="cuda", dtype=torch.float16)[:, :250]
    was, padding.COPY_IN_KERNEL_BYTES = padding.COPY_IN_KERNEL_BYTES, 0
    try:
        gemm_sm90.launch(a_k, b_odd, c)
    finally:
        padding.COPY_IN_KERNEL_BYTES = was
    padded = torch.zeros(256, 256, device="cuda", dtype=torch.float16)
    row_copy = be.row_copy(500, 256, 500, 512, be.current_stream(0))
    pad = "copy of A 256x250 fp16 into a padded buffer"
    pad_rows = [(pad, "torch copy_ into the buffer's view", lambda: padded[:, :250].copy_(a_odd))] + (
        [] if row_copy is None else [(pad, "ours: the driver's 2D copy (row_copy)",
                                      lambda: row_copy(a_odd.data_ptr(), padded.data_ptr()))])
    fp8 = "GEMM 256^3 fp8 block scales"
    fp8_rows = [] if blockwise is None else [
        (fp8, "torch._scaled_mm blockwise (out=)", blockwise),
        (fp8, "ours: gemm_sm90.launch(a, b, c, scales)",
         lambda: gemm_sm90.launch(*f8, c8, b_kmajor=True, scale_a=sa, scale_b=sb)),
        (fp8, "ours: gluon.load's callable (a, b, scales)", lambda: loaded8(*f8, scale_a=sa, scale_b=sb))]
    return [
        ("copy 4096 fp32", "torch copy_", lambda: dst.copy_(src)),
        ("copy 4096 fp32", "plain Triton", lambda: triton_copy[grid](dst, src, 4096, BLOCK=1024)),
        ("copy 4096 fp32", "ours: JIT kernel[grid](...)", lambda: copy_kernel_explicit[grid](dst, src, 4096, **kw)),
        ("copy 4096 fp32", "ours: compiled ck(grid, ...)", lambda: ck(grid, dst, src, 4096)),
        ("copy 4096 fp32", "ours: Launcher, bound args", lambda: ck.launcher(grid, *bound)),
        ("GEMM 256^3 fp16", "torch.matmul", lambda: torch.matmul(a, b)),
        ("GEMM 256^3 fp16", "ours: gemm_sm90.launch(a, b, c)", lambda: gemm_sm90.launch(a, b, c)),
        ("GEMM 256^3 fp16", "ours: gluon.load's callable (a, b)", lambda: loaded(a, b)),
        *fp8_rows,
        ("GEMM 256x256x250 fp16 (rows off 16 B)", "torch.matmul", lambda: torch.matmul(a_odd, b_odd)),
        ("GEMM 256x256x250 fp16 (rows off 16 B)", "ours: gemm_sm90.launch(a, b, c)",
         lambda: gemm_sm90.launch(a_odd, b_odd, c)),
        ("GEMM 256x256x250 fp16 (rows off 16 B)", "ours: launch, A copied by the driver first",
         lambda: gemm_sm90.launch(a_k, b_odd, c)),
        *pad_rows,
        ("softmax 64x1000 bf16", "torch.softmax", lambda: torch.softmax(x, dim=-1)),
        ("softmax 64x1000 bf16", "ours: declared call (gluon.load's)", lambda: sm.call(sm_config, x)),
        ("attention 1x8x256x64 fp16", "torch SDPA", lambda: sdpa(q, k, v)),
        ("attention 1x8x256x64 fp16", "ours: attention(q, k, v)", lambda: attention(q, k, v)),
        ("launch parts", "torch.cuda.current_device()", lambda: torch.cuda.current_device()),
        ("launch parts", "backend.current_device()", be.current_device),
        ("launch parts", "backend.current_stream(0)", lambda: be.current_stream(0)),
        ("launch parts", "backend.launch_hooks()", be.launch_hooks),
        ("launch parts", "gl.cdiv (a Python call)", lambda: gl.cdiv(4096, 1024)),
    ]


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--calls", type=int, default=2000, help="calls per round (default 2000)")
    p.add_argument("--profile", metavar="DIR", help="write a cProfile of each of our paths here")
    args = p.parse_args()
    cases = _cases()
    # keyed by (group, path): groups share path names ("torch.matmul", "ours: gemm_sm90.launch(a, b, c)")
    rounds: dict[tuple[str, str], list[float]] = {(group, name): [] for group, name, _ in cases}
    for r in range(args.repeats):
        order = cases if r % 2 == 0 else cases[::-1]
        for group, name, fn in order:
            rounds[group, name].append(host_us_per_call(fn, args.calls))
    rows, base = [], {}
    for group, name, _ in cases:
        us = statistics.median(rounds[group, name])
        base.setdefault(group, us)
        rows.append({"group": group, "path": name, "host_us": us, "vs_torch": us / base[group],
                     "rounds_us": rounds[group, name]})
    if args.profile:
        _profile(cases, args.profile, args.calls)
    meta = environment()
    write_json(args.json, rows, meta)
    print(f"host time per eager call on {meta['device']} (commit {meta['commit']}), median of {args.repeats} "
          f"rounds of {args.calls} calls; vs torch = this path / the group's first (torch) row")
    print(table(rows, [("group", "group", ""), ("path", "path", ""), ("host us", "host_us", ".2f"),
                       ("vs torch", "vs_torch", ".2f")]))
    return 0


def _profile(cases, folder: str, calls: int) -> None:
    import cProfile
    import io
    import pstats
    os.makedirs(folder, exist_ok=True)
    for group, name, fn in cases:
        if not name.startswith("ours"):
            continue
        slug = "".join(ch if ch.isalnum() else "_" for ch in f"{group}_{name}")[:60]
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            fn()
        prof.disable()
        prof.dump_stats(os.path.join(folder, slug + ".pstats"))
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(20)
        with open(os.path.join(folder, slug + ".txt"), "w") as f:
            f.write(out.getvalue())


if __name__ == "__main__":
    sys.exit(main())
