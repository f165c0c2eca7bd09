"""A row reduction in the DSL: the sum and the maximum of each row of an [M, N] tensor, in one pass.

fp16 / bf16 / fp32 in, summed in fp32; both results written in the output pointers' dtype (fp32 by
default, where the maximum of fp16/bf16 values is exact). A program owns ROWS_PER_PROGRAM rows, each
whole in registers (a [ROWS_PER_PROGRAM, BLOCK_N] tile, BLOCK_N >= N) and reduced with `gl.sum(x, 1)`
and `gl.max(x, 1)`: within a thread first, then across a warp's lanes with butterfly shuffles
(SHFL.BFLY), across warps through shared memory. With LOOPED=True it walks each row in BLOCK_N-wide
chunks, keeping a running sum and maximum per tile position (elementwise, no shuffles in the loop) and
reducing them across the tile once at the end: rows of any length.

Masked-off elements read 0 and count as -inf for the maximum, so the row's length needs no padding. As
in examples/softmax_kernel.py, 16-byte loads need the compiler to know N and the row stride are
multiples of 16 bytes' worth of elements: the kernel checks at run time and rebuilds them as
`(n // VEC) * VEC` where they are. Speed is one read of x; few long rows (M well under the SM count)
leave most of the GPU idle, since a row is never split between programs.

Run it (from the repository root): `PYTHONPATH=$PWD python3 examples/row_sum.py`. With a GPU it checks
against an fp64 torch reference into NaN-poisoned outputs and times against `x.sum(1)` + `x.amax(1)`;
without one it compiles for sm_90 and prints registers, spills, the global loads and the shuffles of the
reductions in the SASS, then checks small cases in the CPU interpreter.
"""
from __future__ import annotations

import gluon
import gluon.language as gl
from gluon import Layout

MAX_BLOCK_N = 4096          # the widest row kept whole in registers; longer rows loop over 4096-wide chunks


@gluon.jit
def row_sum_kernel(sum_ptr, max_ptr, x_ptr, n_rows, n_cols, x_row_stride,
                   BLOCK_N: gl.constexpr, ROWS_PER_PROGRAM: gl.constexpr = 1, NUM_WARPS: gl.constexpr = 4,
                   LOOPED: gl.constexpr = False):
    """sum_ptr[r] = sum(x[r, :]) and max_ptr[r] = max(x[r, :]) for rows [pid * ROWS_PER_PROGRAM, ...). The
    grid is cdiv(n_rows, ROWS_PER_PROGRAM) programs of NUM_WARPS warps (launch with num_warps=NUM_WARPS).
    Without LOOPED, BLOCK_N must be >= n_cols."""
    vec = 16 // x_ptr.dtype.bytes
    R = ROWS_PER_PROGRAM
    layout = Layout.rows(R, BLOCK_N, vec, NUM_WARPS)
    row = gl.program_id(0) * R + gl.arange(0, R, layout=Layout.slice(1, layout))
    rows = gl.expand_dims(row, 1)
    cols = gl.expand_dims(gl.arange(0, BLOCK_N, layout=Layout.slice(0, layout)), 0)
    row_ok = rows < n_rows
    if ((n_cols % vec) | (x_row_stride % vec)) == 0:
        # the same values, provably multiples of vec: 16-byte loads
        total, peak = _sum_and_max(x_ptr + rows * (x_row_stride // vec * vec), cols, row_ok, n_cols // vec * vec,
                                   R, BLOCK_N, layout, LOOPED)
    else:
        total, peak = _sum_and_max(x_ptr + rows * x_row_stride, cols, row_ok, n_cols, R, BLOCK_N, layout, LOOPED)
    gl.store(sum_ptr + row, total, mask=row < n_rows)
    gl.store(max_ptr + row, peak, mask=row < n_rows)


@gl.helper
def _sum_and_max(x_row, cols, row_ok, n_cols, R: gl.constexpr, BLOCK_N: gl.constexpr, layout, LOOPED: gl.constexpr):
    """([R] fp32 sums, [R] fp32 maxima) of the rows at x_row (a [R, 1] tile of row pointers), n_cols long."""
    if LOOPED:
        acc = gl.zeros([R, BLOCK_N], gl.float32, layout)
        peak = gl.full([R, BLOCK_N], float("-inf"), gl.float32, layout)
        for c0 in range(0, n_cols, BLOCK_N):
            c = cols + c0
            m = row_ok & (c < n_cols)
            x = gl.load(x_row + c, mask=m, other=0.0).to(gl.float32)
            acc = acc + x
            peak = gl.maximum(peak, gl.where(m, x, float("-inf")))
        return gl.sum(acc, 1), gl.max(peak, 1)
    m = row_ok & (cols < n_cols)
    x = gl.load(x_row + cols, mask=m, other=0.0).to(gl.float32)
    return gl.sum(x, 1), gl.max(gl.where(m, x, float("-inf")), 1)


# ------------------------------------------------------------------------------ host side


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def default_config(n_rows: int, n_cols: int, elem_bytes: int) -> dict:
    """Rows whole in registers up to MAX_BLOCK_N (BLOCK_N the next power of two, at least one vector a
    thread), about 16 elements a thread, short rows several to a program so that it reads about 4 KiB;
    longer rows LOOPED over MAX_BLOCK_N-wide chunks on 8 warps."""
    vec = 16 // elem_bytes
    block_n = max(vec, _next_pow2(n_cols))
    if block_n > MAX_BLOCK_N:
        return {"BLOCK_N": MAX_BLOCK_N, "ROWS_PER_PROGRAM": 1, "NUM_WARPS": 8, "LOOPED": True}
    rows = max(1, min(_next_pow2(max(1, n_rows)), 4096 // (block_n * elem_bytes)))
    warps = max(1, min(16, rows * block_n // (32 * 16)))
    while warps > 1 and rows * block_n < 32 * warps * vec:      # the tile must cover the warps' threads
        warps //= 2
    while rows * min(32, block_n // vec) < 32:                  # ... and a warp's 32 threads
        rows *= 2
    return {"BLOCK_N": block_n, "ROWS_PER_PROGRAM": rows, "NUM_WARPS": warps, "LOOPED": False}


def launch_plan(x, sums, maxes, **tunables) -> tuple[tuple, tuple, dict]:
    """(grid, runtime arguments, constexpr arguments incl. num_warps) of the launch `row_sum` makes for a
    2-D x and 1-D sums, maxes."""
    n_rows, n_cols = x.shape
    if x.stride(1) != 1:
        raise ValueError("row_sum_kernel needs unit stride along the last dim of x")
    if n_rows * x.stride(0) >= 2**31:
        raise ValueError("row_sum_kernel indexes with 32-bit offsets: the tensor is too large")
    cfg = dict(default_config(n_rows, n_cols, x.element_size()), **tunables)
    if not cfg.get("LOOPED") and cfg["BLOCK_N"] < n_cols:
        raise ValueError(f"BLOCK_N={cfg['BLOCK_N']} is smaller than the row ({n_cols}): use LOOPED=True")
    grid = (-(-n_rows // cfg["ROWS_PER_PROGRAM"]),)
    return grid, (sums, maxes, x, n_rows, n_cols, x.stride(0)), dict(cfg, num_warps=cfg["NUM_WARPS"])


def row_sum(x, sums=None, maxes=None, **tunables):
    """(x.sum(1), x.amax(1)) of a 2-D fp16/bf16/fp32 tensor with N >= 1, summed in fp32, into `sums` and
    `maxes` (1-D [M], contiguous; new fp32 tensors if None). `tunables` override default_config."""
    import torch
    if x.dim() != 2:
        raise ValueError(f"row_sum takes a 2-D x, got {x.dim()}-D")
    m, n = x.shape
    if n == 0:
        raise ValueError("row_sum: x has no columns (the maximum of an empty row is undefined)")
    sums = torch.empty(m, device=x.device, dtype=torch.float32) if sums is None else sums
    maxes = torch.empty(m, device=x.device, dtype=torch.float32) if maxes is None else maxes
    for name, t in (("sums", sums), ("maxes", maxes)):
        if tuple(t.shape) != (m,) or t.stride(0) != 1 and m > 1:
            raise ValueError(f"{name} is {tuple(t.shape)} with stride {t.stride()}, expected contiguous ({m},)")
    if m == 0:
        return sums, maxes
    x = x if x.stride(1) == 1 else x.contiguous()
    grid, args, meta = launch_plan(x, sums, maxes, **tunables)
    row_sum_kernel[grid](*args, **meta)
    return sums, maxes


def reference(x):
    """(fp64 row sums, fp32 row maxima) in torch ops."""
    return x.double().sum(1), x.float().amax(1)


def check(x, sums, maxes) -> str | None:
    """None when (sums, maxes) are x's, else what differs: the maxima exactly, the sums within fp32
    rounding of the sum of |x| (the error scale of an fp32 sum in any order)."""
    import torch
    rs, rm = reference(x)
    if not torch.equal(maxes.float(), rm):
        return f"maxima differ by up to {(maxes.float() - rm).abs().max().item():.3e}"
    scale = x.double().abs().sum(1) + 1.0
    err = ((sums.double() - rs).abs() / scale).max().item()
    return None if err < 1e-5 else f"sums differ by {err:.2e} of the sum of |x|"


def check_case(m: int, n: int, dtype, device: str = "cuda"):
    """One case on fresh random x into NaN-poisoned outputs, checked by `check`: (ok, the sums' error
    relative to the sum of |x|, what differs or None, x, sums, maxes)."""
    import torch
    x = torch.randn(m, n, device=device, dtype=dtype)
    sums = torch.full((m,), float("nan"), device=device)
    maxes = torch.full((m,), float("nan"), device=device)
    row_sum(x, sums, maxes)
    problem = check(x, sums, maxes)
    err = ((sums.double() - reference(x)[0]).abs() / (x.double().abs().sum(1) + 1.0)).max().item()
    return problem is None, err, problem, x, sums, maxes


def main() -> int:
    from example_cli import gpu_present, interpreted_cases      # here, not at the top: the file also loads by path
    if gpu_present():
        import torch
        import triton.testing
        for (m, n) in ((8192, 4096), (4096, 1000), (65536, 128), (1024, 3000), (512, 50000)):
            for dtype in (torch.float16, torch.bfloat16, torch.float32):
                _, _, problem, x, sums, maxes = check_case(m, n, dtype)
                ours = triton.testing.do_bench(lambda: row_sum(x, sums, maxes), return_mode="median")
                theirs = triton.testing.do_bench(lambda: (x.sum(1), x.amax(1)), return_mode="median")
                print(f"{m:>6} x {n:<6} {str(dtype)[6:]:>8}: {problem or 'ok'}  "
                      f"{ours * 1e3:8.1f} us vs torch {theirs * 1e3:8.1f} us: {theirs / ours:.2f}x")
        return 0
    from gluon.backend.machine_code import sass_instructions
    from gluon.language import PointerArg, ScalarArg
    for dt in (gl.float16, gl.float32):
        for n_cols, d in ((4096, 16), (1000, 1), (128, 16), (50000, 16)):
            cfg = default_config(8192, n_cols, dt.bytes)
            ints = [ScalarArg(gl.int32, d)] * 3
            ck = row_sum_kernel.compile(PointerArg(gl.float32), PointerArg(gl.float32), PointerArg(dt), *ints,
                                        arch="sm90", num_warps=cfg["NUM_WARPS"], **cfg)
            ops = sass_instructions(ck.sass())
            mem = {op: k for op, k in sorted(ops.items()) if op.startswith(("LDG.", "SHFL."))}
            print(f"{dt.name:>4} N={n_cols:<5} {cfg}: registers={ck.registers} spills={ck.spills} {mem}")

    return interpreted_cases(check_case, [((37, 1000), "float16"), ((5, 5000), "float32"),
                                          ((9, 300), "bfloat16")])


if __name__ == "__main__":
    raise SystemExit(main())
