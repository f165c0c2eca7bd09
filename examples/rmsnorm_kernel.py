"""RMSNorm in the DSL: `y = x * rsqrt(mean(x^2) + eps) * w` over the last dim of an [M, N] tensor.

fp16 / bf16 / fp32 x and w ([N]), y in x's dtype, fp32 math. A program owns ROWS_PER_PROGRAM whole
rows in registers (a [ROWS_PER_PROGRAM, BLOCK_N] tile, BLOCK_N >= N) and reads w once for all of them.

As in examples/softmax_kernel.py, 16-byte loads and stores need the compiler to know that N and the row
strides are multiples of VEC; the launcher only proves "divisible by 16", so the kernel checks VEC
alignment at run time and, where it holds, rebuilds them as `(n // VEC) * VEC` (the same values,
provably multiples of VEC). Unaligned rows (odd N) take element-wide accesses.

Run it (from the repository root): `PYTHONPATH=$PWD python3 examples/rmsnorm_kernel.py`. With a GPU it
checks against an fp32 torch reference and times against torch.nn.functional.rms_norm; without one it
compiles for sm_90 and prints registers, spills and the global loads/stores in the SASS, then checks small
cases in the CPU interpreter.
"""
from __future__ import annotations

import gluon
import gluon.language as gl
from gluon import Layout

MAX_BLOCK_N = 16384          # the widest row kept in registers (16 warps: 32 fp32 per thread)


def _rmsnorm_rows(out_ptr, x_ptr, w_ptr, x_start, out_start, cols, row_ok, n_cols, eps):
    """Normalize whole rows in registers: row r at x_ptr + x_start[r] + cols, cols < n_cols."""
    col_ok = cols < n_cols
    mask = row_ok & col_ok
    x = gl.load(x_ptr + x_start + cols, mask=mask, other=0.0).to(gl.float32)
    w = gl.load(w_ptr + cols, mask=col_ok, other=0.0).to(gl.float32)          # [1, BLOCK_N], once per program
    rstd = gl.rsqrt(gl.sum(x * x, 1) * (1.0 / n_cols) + eps)
    gl.store(out_ptr + out_start + cols, x * gl.expand_dims(rstd, 1) * w, mask=mask)


@gluon.jit
def rmsnorm_kernel(out_ptr, x_ptr, w_ptr, n_rows, n_cols, x_row_stride, out_row_stride, eps,
                   BLOCK_N: gl.constexpr, ROWS_PER_PROGRAM: gl.constexpr = 1, NUM_WARPS: gl.constexpr = 4,
                   VEC: gl.constexpr = 0):
    """RMSNorm of rows [pid * ROWS_PER_PROGRAM, ...) of x into out. The grid is cdiv(n_rows,
    ROWS_PER_PROGRAM) programs of NUM_WARPS warps (launch with num_warps=NUM_WARPS); BLOCK_N >= n_cols.
    VEC: elements per thread-vector, 0 for 16 bytes' worth of x; any VEC is correct, only speed
    depends on it."""
    vec = VEC if VEC > 0 else 16 // x_ptr.dtype.bytes
    R = ROWS_PER_PROGRAM
    layout = Layout.rows(R, BLOCK_N, vec, NUM_WARPS)
    rows = gl.expand_dims(gl.program_id(0) * R + gl.arange(0, R, layout=Layout.slice(1, layout)), 1)
    cols = gl.expand_dims(gl.arange(0, BLOCK_N, layout=Layout.slice(0, layout)), 0)
    row_ok = rows < n_rows
    if vec == 1:
        _rmsnorm_rows(out_ptr, x_ptr, w_ptr, rows * x_row_stride, rows * out_row_stride, cols, row_ok, n_cols, eps)
    else:
        if ((n_cols % vec) | (x_row_stride % vec) | (out_row_stride % vec)) == 0:
            # the same values, but the compiler now knows they are multiples of vec: 16-byte accesses
            _rmsnorm_rows(out_ptr, x_ptr, w_ptr, rows * (x_row_stride // vec * vec),
                          rows * (out_row_stride // vec * vec), cols, row_ok, n_cols // vec * vec, eps)
        else:
            _rmsnorm_rows(out_ptr, x_ptr, w_ptr, rows * x_row_stride, rows * out_row_stride, cols, row_ok, n_cols,
                          eps)


# ------------------------------------------------------------------------------ host side


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def default_config(n_rows: int, n_cols: int, elem_bytes: int, aligned: bool = True) -> dict:
    """Good tunables for an [n_rows, n_cols] RMSNorm (`aligned`: the tensors and their rows start on
    16-byte boundaries), as measured on the H200 (docs/NORM_KERNELS.md): BLOCK_N the next power of two
    of N, about 16 elements a thread, short rows several to a program so that it holds about 2 KiB of x
    (N = 1024 bf16: 1 row and 2 warps, 1.27x torch). Unaligned rows (odd N) go element by element
    (VEC=1), as in examples/softmax_kernel.py: element-wide accesses from a 16-byte vector layout are
    16 bytes apart across a warp."""
    vec = 16 // elem_bytes if aligned else 1
    block_n = _next_pow2(n_cols)
    if block_n > MAX_BLOCK_N:
        # (layernorm_kernel.py takes these tiles too: the message names neither)
        raise ValueError(f"the kernel keeps a whole row in registers: N={n_cols} is over {MAX_BLOCK_N}")
    rows = max(1, min(_next_pow2(max(1, n_rows)), 2048 // (block_n * elem_bytes)))
    warps = max(1, min(16, rows * block_n // (32 * 16)))
    while warps > 1 and rows * block_n < 32 * warps * vec:
        warps //= 2
    while rows * min(32, block_n // vec) < 32:
        rows *= 2
    return {"BLOCK_N": block_n, "ROWS_PER_PROGRAM": rows, "NUM_WARPS": warps, "VEC": vec}


def launch_plan(x, weight, out, eps: float, **tunables) -> tuple[tuple, tuple, dict]:
    """(grid, runtime arguments, constexpr arguments incl. num_warps) of the launch `rms_norm` makes
    for 2-D x and out."""
    n_rows, n_cols = x.shape
    if x.stride(1) != 1 or out.stride(1) != 1 or weight.stride(0) != 1:
        raise ValueError("rmsnorm_kernel needs unit stride along the last dim")
    if max(n_rows * x.stride(0), n_rows * out.stride(0)) >= 2**31:
        raise ValueError("rmsnorm_kernel indexes with 32-bit offsets: the tensor is too large")
    aligned = all(t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0 for t in (x, out)) \
        and (n_cols * x.element_size()) % 16 == 0 and weight.data_ptr() % 16 == 0
    cfg = default_config(n_rows, n_cols, x.element_size(), aligned)
    cfg.update(tunables)
    if cfg["BLOCK_N"] < n_cols:
        raise ValueError(f"BLOCK_N={cfg['BLOCK_N']} is smaller than the row ({n_cols})")
    grid = (-(-n_rows // cfg["ROWS_PER_PROGRAM"]),)
    args = (out, x, weight, n_rows, n_cols, x.stride(0), out.stride(0), float(eps))
    return grid, args, dict(cfg, num_warps=cfg["NUM_WARPS"])


def rms_norm(x, weight, eps: float = 1e-6, out=None, **tunables):
    """RMSNorm over the last dim of x (2-D, or N-D flattened to rows) with weight [N], fp32 math, into
    `out` (x's shape and dtype; new if None). `tunables` override default_config's choice (BLOCK_N,
    ROWS_PER_PROGRAM, NUM_WARPS, VEC)."""
    import torch
    n = x.shape[-1]
    if weight.shape != (n,):
        raise ValueError(f"weight is {tuple(weight.shape)}, expected ({n},)")
    out = torch.empty_like(x, memory_format=torch.contiguous_format) if out is None else out
    if out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"out is {tuple(out.shape)} {out.dtype}, x is {tuple(x.shape)} {x.dtype}")
    if x.numel() == 0:
        return out
    x2 = x.reshape(-1, n) if x.dim() != 2 else x
    out2 = out.view(-1, n) if out.dim() != 2 else out
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    grid, args, meta = launch_plan(x2, weight.contiguous(), out2, eps, **tunables)
    rmsnorm_kernel[grid](*args, **meta)
    return out


def reference(x, weight, eps: float = 1e-6):
    """fp32 RMSNorm in torch ops."""
    import torch
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def check(m: int, n: int, dtype, device: str = "cuda"):
    """One case on fresh random x and w into a NaN-poisoned output, against the fp32 `reference`: (ok,
    relative error, x, w, out)."""
    import torch
    x = torch.randn(m, n, device=device, dtype=dtype)
    w = torch.rand(n, device=device, dtype=dtype) + 0.5
    out = torch.full_like(x, float("nan"))
    rms_norm(x, w, 1e-6, out)
    ref = reference(x, w)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    ok = not out.isnan().any().item() and err < (1e-5 if dtype == torch.float32 else 1e-2)
    return ok, err, x, w, out


def main() -> int:
    from example_cli import gpu_present, interpreted_cases      # here, not at the top: the file also loads by path
    if gpu_present():
        import torch
        import triton.testing
        for (m, n) in ((8192, 4096), (16384, 8192), (4096, 1000), (32768, 1024), (1000, 4095)):
            for dtype in (torch.float16, torch.bfloat16, torch.float32):
                ok, err, x, w, out = check(m, n, dtype)
                ours = triton.testing.do_bench(lambda: rms_norm(x, w, 1e-6, out), return_mode="median")
                theirs = triton.testing.do_bench(lambda: torch.nn.functional.rms_norm(x, (n,), w, 1e-6),
                                                 return_mode="median")
                print(f"{m:>6} x {n:<6} {str(dtype)[6:]:>8}: {'ok' if ok else 'WRONG'} (rel err {err:.1e})  "
                      f"{ours * 1e3:8.1f} us vs torch {theirs * 1e3:8.1f} us: {theirs / ours:.2f}x")
        return 0
    from gluon.backend.machine_code import sass_instructions
    from gluon.language import PointerArg, ScalarArg
    for dt in (gl.float16, gl.bfloat16, gl.float32):
        for n_cols, d in ((4096, 16), (8192, 16), (1000, 1)):
            cfg = default_config(8192, n_cols, dt.bytes)
            ints = [ScalarArg(gl.int32, d)] * 4
            ck = rmsnorm_kernel.compile(PointerArg(dt), PointerArg(dt), PointerArg(dt), *ints, ScalarArg(gl.float32),
                                        arch="sm90", num_warps=cfg["NUM_WARPS"], **cfg)
            ops = sass_instructions(ck.sass())
            mem = {op: k for op, k in sorted(ops.items()) if op.startswith(("LDG.", "STG."))}
            print(f"{dt.name:>4} N={n_cols:<5} {cfg}: registers={ck.registers} spills={ck.spills} {mem}")

    return interpreted_cases(check, [((37, 1000), "float16"), ((5, 4097), "bfloat16"),
                                     ((9, 300), "float32")])


if __name__ == "__main__":
    raise SystemExit(main())
