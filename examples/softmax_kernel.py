"""Row softmax in the DSL: `out[i, :] = softmax(x[i, :])` over the last dim of an [M, N] tensor.

fp16 / bf16 / fp32 in, the same dtype out, fp32 math. A program owns ROWS_PER_PROGRAM rows, each whole
in registers (a [ROWS_PER_PROGRAM, BLOCK_N] tile, BLOCK_N >= N), or, with LOOPED=True, walks each row
in BLOCK_N-wide chunks twice (running max and sum, then the normalized write), for rows too long for
registers.

Speed is memory bandwidth, and the loads and stores are 16 bytes wide only where the compiler can prove
it: the row starts and the column mask must be multiples of VEC elements. The launcher only tells it
"divisible by 16" for integers, so for N = 1000 (a multiple of 8, not 16) the plain kernel falls back to
2-byte loads. This kernel checks the alignment at run time (one scalar branch per program) and, where it
holds, rebuilds N and the strides as `(n // VEC) * VEC`: the same values, but now provably multiples
of VEC. Rows that are not VEC-aligned (N = 8195) load 16-byte vectors over an aligned window around the
row and mask the extra elements (`_softmax_window`), with exact element stores.

Run it (from the repository root): `PYTHONPATH=$PWD python3 examples/softmax_kernel.py`. With a GPU it
checks against an fp32 torch reference and times against torch.softmax; without one it compiles for
sm_90 and prints registers, spills and the global loads/stores in the SASS, then checks small cases in
the CPU interpreter.
"""
from __future__ import annotations

import gluon
import gluon.language as gl
from gluon import Layout

LOG2E = 1.4426950408889634
MAX_BLOCK_N = 16384          # the widest row kept whole in registers (16 warps: 32 fp32 per thread)


def _exact_rows(x_start, out_start, n_cols) -> tuple:
    """Rows addressed as they are: row r's column c at x_ptr + x_start[r] + c, c < n_cols.
    (base, out_base, lead, end, load_end): the tile positions [lead, end) hold the row, loads cover
    [0, load_end); lead None means 0."""
    return (x_start, out_start, None, n_cols, n_cols)


def _window_rows(x_start, out_start, n_cols, vec: int) -> tuple:
    """Rows that do not start on a VEC boundary, seen through a window from the boundary below: loads
    cover whole VEC-element vectors (16 bytes), the row sits at [lead, lead + n_cols) of the window and
    the other elements (the neighbours') count as -inf. The reads stay inside the 16-byte segments that
    hold the row, so never past the ends of a 16-byte aligned tensor."""
    base = x_start // vec * vec                    # (provably) a multiple of vec
    lead = x_start - base
    return (base, out_start - lead, lead, lead + n_cols, gl.cdiv(lead + n_cols, vec) * vec)


def _load_chunk(x_ptr, rows: tuple, c, row_ok):
    """x at tile positions c of each row's window, in fp32, -inf outside the row."""
    base, _, lead, end, load_end = rows
    x = gl.load(x_ptr + base + c, mask=row_ok & (c < load_end), other=float("-inf")).to(gl.float32)
    return x if lead is None else gl.where((c >= lead) & (c < end), x, float("-inf"))


def _store_chunk(out_ptr, rows: tuple, c, row_ok, y) -> None:
    """y at tile positions c of each row's window, the row's elements only."""
    _, out_base, lead, end, _ = rows
    in_row = (c < end) if lead is None else (c >= lead) & (c < end)
    gl.store(out_ptr + out_base + c, y, mask=row_ok & in_row)


def _softmax_whole(out_ptr, x_ptr, rows: tuple, cols, row_ok) -> None:
    """Softmax of whole rows in registers (the window fits the tile)."""
    x = _load_chunk(x_ptr, rows, cols, row_ok)
    e = gl.exp2((x - gl.expand_dims(gl.max(x, 1), 1)) * LOG2E)
    _store_chunk(out_ptr, rows, cols, row_ok, e * gl.expand_dims(1.0 / gl.sum(e, 1), 1))


def _online_step(x, m, l):
    """One chunk of the LOOPED first pass: per tile position, a running max m and a running sum l of
    exp(x - m). One exp per element: exp(-|x - m|) rescales whichever of l and the new term is smaller."""
    e = gl.exp2(-gl.abs(x - m) * LOG2E)
    return gl.maximum(m, x), gl.where(x > m, l * e + 1.0, l + e)


def _online_finish(m, l):
    """The row max and 1 / row sum from the per-position running values, as [R, 1] columns."""
    row_max = gl.max(m, 1)
    row_sum = gl.sum(l * gl.exp2((m - gl.expand_dims(row_max, 1)) * LOG2E), 1)
    return gl.expand_dims(row_max, 1), gl.expand_dims(1.0 / row_sum, 1)


def _normalize_chunk(out_ptr, x_ptr, rows: tuple, c, row_ok, row_max, inv_sum) -> None:
    """One chunk of the LOOPED second pass: read x again (from L2) and write exp(x - max) / sum."""
    x = _load_chunk(x_ptr, rows, c, row_ok)
    _store_chunk(out_ptr, rows, c, row_ok, gl.exp2((x - row_max) * LOG2E) * inv_sum)


@gluon.jit
def softmax_kernel(out_ptr, x_ptr, n_rows, n_cols, x_row_stride, out_row_stride,
                   BLOCK_N: gl.constexpr, ROWS_PER_PROGRAM: gl.constexpr = 1, NUM_WARPS: gl.constexpr = 4,
                   VEC: gl.constexpr = 0, LOOPED: gl.constexpr = False):
    """Softmax of rows [pid * ROWS_PER_PROGRAM, ...) of x into out. The grid is cdiv(n_rows,
    ROWS_PER_PROGRAM) programs of NUM_WARPS warps (launch with num_warps=NUM_WARPS). VEC: elements per
    thread-vector, 0 for 16 bytes' worth; VEC=1 turns the alignment paths off. Any VEC is correct: only
    speed depends on it. Without LOOPED, BLOCK_N must be >= n_cols (>= n_cols + VEC - 1 for rows that
    are not VEC-aligned to keep vector loads; else they go element by element). With VEC > 1 and rows
    that are not VEC-aligned, x must be 16-byte aligned (the load window reads the rest of the row's
    first and last 16-byte segments)."""
    vec = VEC if VEC > 0 else 16 // x_ptr.dtype.bytes
    R = ROWS_PER_PROGRAM
    layout = Layout.rows(R, BLOCK_N, vec, NUM_WARPS)
    rows = gl.expand_dims(gl.program_id(0) * R + gl.arange(0, R, layout=Layout.slice(1, layout)), 1)
    cols = gl.expand_dims(gl.arange(0, BLOCK_N, layout=Layout.slice(0, layout)), 0)
    row_ok = rows < n_rows
    x_start = rows * x_row_stride
    out_start = rows * out_row_stride
    misaligned = (n_cols % vec) | (x_row_stride % vec) | (out_row_stride % vec)     # 0: every row VEC-aligned
    # Where it is 0, `k // vec * vec` is k itself, but the compiler then knows it is a multiple of vec
    # and emits 16-byte loads and stores.
    if LOOPED:
        # Rows in BLOCK_N-wide chunks, twice: running max and sum, then the normalized write. The loops
        # are spelled out per case since only the kernel body's loops become GPU loops (a @gl.helper would
        # also do). With VEC=1 `misaligned` is known to be 0 and only the first case is traced.
        if misaligned == 0:
            n = n_cols // vec * vec
            aligned = _exact_rows(rows * (x_row_stride // vec * vec), rows * (out_row_stride // vec * vec), n)
            m = gl.full([R, BLOCK_N], -3.0e38, gl.float32, layout)    # finite: exp(m - m) is never NaN
            l = gl.zeros([R, BLOCK_N], gl.float32, layout)
            for c0 in range(0, n, BLOCK_N):
                m, l = _online_step(_load_chunk(x_ptr, aligned, cols + c0, row_ok), m, l)
            row_max, inv_sum = _online_finish(m, l)
            for c1 in range(0, n, BLOCK_N):
                _normalize_chunk(out_ptr, x_ptr, aligned, cols + c1, row_ok, row_max, inv_sum)
        if misaligned != 0:
            window = _window_rows(x_start, out_start, n_cols, vec)
            span = n_cols + (vec - 1)                  # the longest window
            m2 = gl.full([R, BLOCK_N], -3.0e38, gl.float32, layout)
            l2 = gl.zeros([R, BLOCK_N], gl.float32, layout)
            for c2 in range(0, span, BLOCK_N):
                m2, l2 = _online_step(_load_chunk(x_ptr, window, cols + c2, row_ok), m2, l2)
            row_max2, inv_sum2 = _online_finish(m2, l2)
            for c3 in range(0, span, BLOCK_N):
                _normalize_chunk(out_ptr, x_ptr, window, cols + c3, row_ok, row_max2, inv_sum2)
    elif vec == 1:
        _softmax_whole(out_ptr, x_ptr, _exact_rows(x_start, out_start, n_cols), cols, row_ok)
    else:
        if misaligned == 0:
            _softmax_whole(out_ptr, x_ptr, _exact_rows(rows * (x_row_stride // vec * vec),
                                                       rows * (out_row_stride // vec * vec), n_cols // vec * vec),
                           cols, row_ok)
        else:
            if n_cols + (vec - 1) <= BLOCK_N:
                _softmax_whole(out_ptr, x_ptr, _window_rows(x_start, out_start, n_cols, vec), cols, row_ok)
            else:
                _softmax_whole(out_ptr, x_ptr, _exact_rows(x_start, out_start, n_cols), cols, row_ok)


# ------------------------------------------------------------------------------ host side


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def default_config(n_rows: int, n_cols: int, elem_bytes: int, aligned: bool = True) -> dict:
    """Good tunables for an [n_rows, n_cols] softmax (`aligned`: the tensors and their rows start on
    16-byte boundaries), as measured on the H200 (docs/NORM_KERNELS.md).

    Rows whole in registers up to MAX_BLOCK_N, BLOCK_N the next power of two; about 16 elements a
    thread; short rows several to a program, so that it holds about 2 KiB of x (N = 1024 fp16: 1 row
    and 2 warps, 1.6x torch; 4 rows and 8 warps were 4% slower). Unaligned rows (odd N) go element by
    element with VEC=1: in a 16-byte vector layout their element-wide stores land 16 bytes apart across
    a warp, and that ran at 0.71x torch at 1024x8195 fp16 where VEC=1 ran at 1.26x. Rows over
    MAX_BLOCK_N: LOOPED over 8192-wide chunks (1.37x torch at 2048x32768 fp16, 4096-wide 1.23x)."""
    vec = 16 // elem_bytes if aligned else 1
    block_n = _next_pow2(n_cols)
    if block_n > MAX_BLOCK_N:
        return {"BLOCK_N": 8192, "ROWS_PER_PROGRAM": 1, "NUM_WARPS": 8, "VEC": vec, "LOOPED": True}
    rows = max(1, min(_next_pow2(max(1, n_rows)), 2048 // (block_n * elem_bytes)))
    warps = max(1, min(16, rows * block_n // (32 * 16)))
    # the smallest tile the warps may cover: drop warps (or grow rows) until it fits
    while warps > 1 and rows * block_n < 32 * warps * vec:
        warps //= 2
    while rows * min(32, block_n // vec) < 32:          # a warp is 32 threads: rows * threads-per-row >= 32
        rows *= 2
    return {"BLOCK_N": block_n, "ROWS_PER_PROGRAM": rows, "NUM_WARPS": warps, "VEC": vec, "LOOPED": False}


def launch_plan(x, out, **tunables) -> tuple[tuple, tuple, dict]:
    """(grid, runtime arguments, constexpr arguments incl. num_warps) of the launch `softmax` makes for
    2-D x and out: what a caller (the benchmark, a precompile step) needs to launch or compile it."""
    n_rows, n_cols = x.shape
    if x.stride(1) != 1 or out.stride(1) != 1:
        raise ValueError("softmax_kernel needs unit stride along the last dim")
    if max(n_rows * x.stride(0), n_rows * out.stride(0)) >= 2**31:
        raise ValueError("softmax_kernel indexes with 32-bit offsets: the tensor is too large")
    aligned = all(t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0 for t in (x, out)) \
        and (n_cols * x.element_size()) % 16 == 0
    cfg = default_config(n_rows, n_cols, x.element_size(), aligned)
    cfg.update(tunables)
    if not cfg.get("LOOPED") and cfg["BLOCK_N"] < n_cols:
        raise ValueError(f"BLOCK_N={cfg['BLOCK_N']} is smaller than the row ({n_cols}): use LOOPED=True")
    grid = (-(-n_rows // cfg["ROWS_PER_PROGRAM"]),)
    return grid, (out, x, n_rows, n_cols, x.stride(0), out.stride(0)), dict(cfg, num_warps=cfg["NUM_WARPS"])


def softmax(x, out=None, **tunables):
    """softmax(x, dim=-1) for a 2-D (or N-D, flattened to rows) fp16/bf16/fp32 tensor, fp32 math, into
    `out` (same shape and dtype; new if None). `tunables` override default_config's choice (BLOCK_N,
    ROWS_PER_PROGRAM, NUM_WARPS, VEC, LOOPED)."""
    import torch
    out = torch.empty_like(x, memory_format=torch.contiguous_format) if out is None else out
    if out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"out is {tuple(out.shape)} {out.dtype}, x is {tuple(x.shape)} {x.dtype}")
    if x.numel() == 0:
        return out
    x2 = x.reshape(-1, x.shape[-1]) if x.dim() != 2 else x
    out2 = out.view(-1, x.shape[-1]) if out.dim() != 2 else out
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    grid, args, meta = launch_plan(x2, out2, **tunables)
    softmax_kernel[grid](*args, **meta)
    return out


def check(m: int, n: int, dtype, device: str = "cuda"):
    """One case on fresh random inputs into a NaN-poisoned output, against an fp32 torch softmax: (ok,
    relative error, x, out)."""
    import torch
    x = torch.randn(m, n, device=device, dtype=dtype) * 4
    out = torch.full_like(x, float("nan"))
    softmax(x, out)
    ref = torch.softmax(x.float(), dim=-1)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    ok = not out.isnan().any().item() and err < (1e-5 if dtype == torch.float32 else 1e-2)
    return ok, err, x, out


def main() -> int:
    from example_cli import gpu_present, interpreted_cases      # here, not at the top: the file also loads by path
    if gpu_present():
        import torch
        import triton.testing
        for (m, n) in ((8192, 4096), (4096, 1000), (32768, 1024), (1024, 8195), (1000, 37), (64, 40000)):
            for dtype in (torch.float16, torch.bfloat16, torch.float32):
                ok, err, x, out = check(m, n, dtype)
                ours = triton.testing.do_bench(lambda: softmax(x, out), return_mode="median")
                theirs = triton.testing.do_bench(lambda: torch.softmax(x, dim=-1), return_mode="median")
                print(f"{m:>6} x {n:<6} {str(dtype)[6:]:>8}: {'ok' if ok else 'WRONG'} (rel err {err:.1e})  "
                      f"{ours * 1e3:8.1f} us vs torch {theirs * 1e3:8.1f} us: {theirs / ours:.2f}x")
        return 0
    from gluon.backend.machine_code import sass_instructions
    from gluon.language import PointerArg, ScalarArg
    for dt in (gl.float16, gl.bfloat16, gl.float32):
        for n_cols, d in ((4096, 16), (1000, 1), (8195, 1)):
            cfg = default_config(8192, n_cols, dt.bytes, aligned=d == 16 or n_cols % (16 // dt.bytes) == 0)
            ints = [ScalarArg(gl.int32, d)] * 4
            ck = softmax_kernel.compile(PointerArg(dt), PointerArg(dt), *ints, arch="sm90", num_warps=cfg["NUM_WARPS"],
                                        **cfg)
            ops = sass_instructions(ck.sass())
            mem = {op: k for op, k in sorted(ops.items()) if op.startswith(("LDG.", "STG."))}
            print(f"{dt.name:>4} N={n_cols:<5} {cfg}: registers={ck.registers} spills={ck.spills} {mem}")
    return interpreted_cases(check, [((37, 1000), "float16"), ((5, 4097), "bfloat16"),
                                     ((9, 300), "float32")])


if __name__ == "__main__":
    raise SystemExit(main())
