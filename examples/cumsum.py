"""Row-wise cumulative sum in the DSL: `out[i, :] = cumsum(x[i, :])` over the last dim of an [M, N] tensor.

fp16 / bf16 / fp32 in, the same dtype out, summed in fp32 (int32 in int32). A program owns
ROWS_PER_PROGRAM rows, each whole in registers (a [ROWS_PER_PROGRAM, BLOCK_N] tile, BLOCK_N >= N) and
scanned with one `gl.cumsum(x, 1)`, Triton's `tt.scan`: within a thread sequentially, across a warp's
lanes with shuffles (SHFL.UP), across warps through shared memory. With LOOPED=True it walks each row
in BLOCK_N-wide chunks, adding the running total of the chunks before (a [ROWS, 1] column carried
through the loop) to each chunk's own scan, for rows too long for registers.

Speed is memory bandwidth: one read and one write of each element, 16 bytes a thread where the row
starts and the length are multiples of 16 bytes (the launcher tells the compiler "divisible by 16" for
N = 4096, not for N = 1000, where loads and stores go element by element).

Run it (from the repository root): `PYTHONPATH=$PWD python3 examples/cumsum.py`. With a GPU it checks
against an fp64 torch reference and times against torch.cumsum; without one it compiles for sm_90 and
prints registers, spills, the shuffles of the scan and the global loads/stores in the SASS, then checks
small cases in the CPU interpreter.
"""
from __future__ import annotations

import gluon
import gluon.language as gl
from gluon import Layout

MAX_BLOCK_N = 4096          # the widest row kept whole in registers; longer rows loop over 4096-wide chunks


@gluon.jit
def cumsum_kernel(out_ptr, x_ptr, n_rows, n_cols, x_row_stride, out_row_stride,
                  BLOCK_N: gl.constexpr, ROWS_PER_PROGRAM: gl.constexpr = 1, NUM_WARPS: gl.constexpr = 4,
                  LOOPED: gl.constexpr = False):
    """The cumulative sums of rows [pid * ROWS_PER_PROGRAM, ...) of x into out. The grid is cdiv(n_rows,
    ROWS_PER_PROGRAM) programs of NUM_WARPS warps (launch with num_warps=NUM_WARPS). Without LOOPED,
    BLOCK_N must be >= n_cols."""
    acc = gl.int32 if x_ptr.dtype.is_int else gl.float32
    R = ROWS_PER_PROGRAM
    layout = Layout.rows(R, BLOCK_N, 16 // x_ptr.dtype.bytes, NUM_WARPS)
    rows = gl.expand_dims(gl.program_id(0) * R + gl.arange(0, R, layout=Layout.slice(1, layout)), 1)
    cols = gl.expand_dims(gl.arange(0, BLOCK_N, layout=Layout.slice(0, layout)), 0)
    row_ok = rows < n_rows
    x_row = x_ptr + rows * x_row_stride
    out_row = out_ptr + rows * out_row_stride
    if LOOPED:
        carry = gl.zeros([R, 1], acc, layout)           # each row's sum of the chunks before this one
        for c0 in range(0, n_cols, BLOCK_N):
            c = cols + c0
            m = row_ok & (c < n_cols)
            x = gl.load(x_row + c, mask=m, other=0).to(acc)
            gl.store(out_row + c, (gl.cumsum(x, 1) + carry).to(out_ptr.dtype), mask=m)
            carry = carry + gl.expand_dims(gl.sum(x, 1), 1)
    else:
        m = row_ok & (cols < n_cols)
        x = gl.load(x_row + cols, mask=m, other=0).to(acc)
        gl.store(out_row + cols, gl.cumsum(x, 1).to(out_ptr.dtype), mask=m)


# ------------------------------------------------------------------------------ host side


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def default_config(n_rows: int, n_cols: int, elem_bytes: int) -> dict:
    """Tunables for an [n_rows, n_cols] cumsum: rows whole in registers up to MAX_BLOCK_N (BLOCK_N the
    next power of two), about 16 elements a thread, short rows several to a program so that it holds
    about 4 KiB of x; longer rows LOOPED over MAX_BLOCK_N-wide chunks on 8 warps."""
    vec = 16 // elem_bytes
    block_n = max(vec, _next_pow2(n_cols))                     # at least one vector a thread
    if block_n > MAX_BLOCK_N:
        return {"BLOCK_N": MAX_BLOCK_N, "ROWS_PER_PROGRAM": 1, "NUM_WARPS": 8, "LOOPED": True}
    rows = max(1, min(_next_pow2(max(1, n_rows)), 4096 // (block_n * elem_bytes)))
    warps = max(1, min(16, rows * block_n // (32 * 16)))
    while warps > 1 and rows * block_n < 32 * warps * vec:      # the tile must cover the warps' threads
        warps //= 2
    while rows * min(32, block_n // vec) < 32:                  # ... and a warp's 32 threads
        rows *= 2
    return {"BLOCK_N": block_n, "ROWS_PER_PROGRAM": rows, "NUM_WARPS": warps, "LOOPED": False}


def launch_plan(x, out, **tunables) -> tuple[tuple, tuple, dict]:
    """(grid, runtime arguments, constexpr arguments incl. num_warps) of the launch `cumsum` makes for 2-D
    x and out."""
    n_rows, n_cols = x.shape
    if x.stride(1) != 1 or out.stride(1) != 1:
        raise ValueError("cumsum_kernel needs unit stride along the last dim")
    if max(n_rows * x.stride(0), n_rows * out.stride(0)) >= 2**31:
        raise ValueError("cumsum_kernel indexes with 32-bit offsets: the tensor is too large")
    cfg = default_config(n_rows, n_cols, x.element_size())
    cfg.update(tunables)
    if not cfg.get("LOOPED") and cfg["BLOCK_N"] < n_cols:
        raise ValueError(f"BLOCK_N={cfg['BLOCK_N']} is smaller than the row ({n_cols}): use LOOPED=True")
    grid = (-(-n_rows // cfg["ROWS_PER_PROGRAM"]),)
    return grid, (out, x, n_rows, n_cols, x.stride(0), out.stride(0)), dict(cfg, num_warps=cfg["NUM_WARPS"])


def cumsum(x, out=None, **tunables):
    """torch.cumsum(x, dim=-1) for a 2-D fp16/bf16/fp32/int32 tensor, into `out` (same shape and dtype;
    new if None), summed in fp32 (int32 in int32). `tunables` override default_config's choice."""
    import torch
    out = torch.empty_like(x, memory_format=torch.contiguous_format) if out is None else out
    if out.shape != x.shape or out.dtype != x.dtype or x.dim() != 2:
        raise ValueError(f"out is {tuple(out.shape)} {out.dtype}, x is {tuple(x.shape)} {x.dtype}; both 2-D, alike")
    if x.numel() == 0:
        return out
    x = x if x.stride(-1) == 1 else x.contiguous()
    grid, args, meta = launch_plan(x, out, **tunables)
    cumsum_kernel[grid](*args, **meta)
    return out


def check(m: int, n: int, dtype, device: str = "cuda"):
    """One case on fresh random inputs into a poisoned output, against an fp64 torch cumsum: (ok, error,
    x, out)."""
    import torch
    if dtype == torch.int32:
        x = torch.randint(-1000, 1000, (m, n), device=device, dtype=dtype)
    else:
        x = torch.randn(m, n, device=device, dtype=dtype)
    out = torch.full_like(x, -7)                    # poison: every element must be written
    cumsum(x, out)
    ref = x.double().cumsum(-1)
    if dtype == torch.int32:
        return torch.equal(out, ref.to(torch.int32)), 0.0, x, out
    scale = x.double().abs().cumsum(-1) + 1.0       # the sum's own rounding scale
    err = ((out.double() - ref).abs() / scale).max().item()
    return err < (1e-5 if dtype == torch.float32 else 1e-2), err, x, out


def main() -> int:
    from example_cli import gpu_present, interpreted_cases      # here, not at the top: the file also loads by path
    if gpu_present():
        import torch
        import triton.testing
        for (m, n) in ((8192, 4096), (4096, 1000), (32768, 256), (1024, 3000), (512, 20000)):
            for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.int32):
                ok, err, x, out = check(m, n, dtype)
                ours = triton.testing.do_bench(lambda x=x, out=out: cumsum(x, out), return_mode="median")
                theirs = triton.testing.do_bench(lambda x=x: torch.cumsum(x, dim=-1), return_mode="median")
                print(f"{m:>6} x {n:<6} {str(dtype)[6:]:>8}: {'ok' if ok else 'WRONG'} (err {err:.1e})  "
                      f"{ours * 1e3:8.1f} us vs torch {theirs * 1e3:8.1f} us: {theirs / ours:.2f}x")
        return 0
    from gluon.backend.machine_code import sass_instructions
    from gluon.language import PointerArg, ScalarArg
    for dt in (gl.float16, gl.float32, gl.int32):
        for n_cols, d in ((4096, 16), (1000, 1), (20000, 16)):
            cfg = default_config(8192, n_cols, dt.bytes)
            ints = [ScalarArg(gl.int32, d)] * 4
            ck = cumsum_kernel.compile(PointerArg(dt), PointerArg(dt), *ints, arch="sm90", num_warps=cfg["NUM_WARPS"],
                                       **cfg)
            ops = sass_instructions(ck.sass())
            mem = {op: k for op, k in sorted(ops.items()) if op.startswith(("LDG.", "STG.", "SHFL."))}
            print(f"{dt.name:>4} N={n_cols:<5} {cfg}: registers={ck.registers} spills={ck.spills} {mem}")
    return interpreted_cases(check, [((37, 1000), "float16"), ((5, 5000), "float32"), ((9, 300), "int32")])


if __name__ == "__main__":
    raise SystemExit(main())
