"""LayerNorm (forward) in the DSL: `y = (x - mean(x)) * rsqrt(var(x) + eps) * w + b` over the last dim of [M, N].

fp16 / bf16 / fp32 x, w and b ([N]), y in x's dtype, fp32 math. The same program shape as
examples/rmsnorm_kernel.py (and its default_config): ROWS_PER_PROGRAM whole rows in registers (a
[ROWS_PER_PROGRAM, BLOCK_N] tile, BLOCK_N >= N), w and b read once for all of them. The variance is
taken around the mean, in two reductions over the registers (`gl.sum(x, 1)`, then `gl.sum(d * d, 1)` of
the centred values with the padding masked back to 0), not as E[x^2] - E[x]^2, which cancels badly for
rows with a large mean; the second pass costs shuffles, not memory traffic.

As in examples/softmax_kernel.py, 16-byte loads and stores need the compiler to know that N and the row
strides are multiples of VEC; the launcher only proves "divisible by 16", so the kernel checks VEC
alignment at run time and, where it holds, rebuilds them as `(n // VEC) * VEC`. Unaligned rows (odd N)
take element-wide accesses.

Run it (from the repository root): `PYTHONPATH=$PWD python3 examples/layernorm_kernel.py`. With a GPU it
checks against an fp32 torch reference into NaN-poisoned outputs and times against
torch.nn.functional.layer_norm; without one it compiles for sm_90 and prints registers, spills and the
global loads/stores in the SASS, then checks small cases in the CPU interpreter.
"""
from __future__ import annotations

import gluon
import gluon.language as gl
from gluon import Layout
from rmsnorm_kernel import MAX_BLOCK_N, default_config  # noqa: F401 -- the same tiles; MAX_BLOCK_N re-exported


def _layernorm_rows(out_ptr, x_ptr, w_ptr, b_ptr, x_start, out_start, cols, row_ok, n_cols, eps):
    """Normalize whole rows in registers: row r at x_ptr + x_start[r] + cols, cols < n_cols."""
    col_ok = cols < n_cols
    mask = row_ok & col_ok
    x = gl.load(x_ptr + x_start + cols, mask=mask, other=0.0).to(gl.float32)
    w = gl.load(w_ptr + cols, mask=col_ok, other=0.0).to(gl.float32)          # [1, BLOCK_N], once per program
    b = gl.load(b_ptr + cols, mask=col_ok, other=0.0).to(gl.float32)
    inv_n = 1.0 / n_cols
    mean = gl.expand_dims(gl.sum(x, 1) * inv_n, 1)
    d = gl.where(mask, x - mean, 0.0)                                          # the padding stays out of var
    rstd = gl.expand_dims(gl.rsqrt(gl.sum(d * d, 1) * inv_n + eps), 1)
    gl.store(out_ptr + out_start + cols, d * rstd * w + b, mask=mask)


@gluon.jit
def layernorm_kernel(out_ptr, x_ptr, w_ptr, b_ptr, n_rows, n_cols, x_row_stride, out_row_stride, eps,
                     BLOCK_N: gl.constexpr, ROWS_PER_PROGRAM: gl.constexpr = 1, NUM_WARPS: gl.constexpr = 4,
                     VEC: gl.constexpr = 0):
    """LayerNorm of rows [pid * ROWS_PER_PROGRAM, ...) of x into out. The grid is cdiv(n_rows,
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
        _layernorm_rows(out_ptr, x_ptr, w_ptr, b_ptr, rows * x_row_stride, rows * out_row_stride, cols, row_ok,
                        n_cols, eps)
    else:
        if ((n_cols % vec) | (x_row_stride % vec) | (out_row_stride % vec)) == 0:
            # the same values, but the compiler now knows they are multiples of vec: 16-byte accesses
            _layernorm_rows(out_ptr, x_ptr, w_ptr, b_ptr, rows * (x_row_stride // vec * vec),
                            rows * (out_row_stride // vec * vec), cols, row_ok, n_cols // vec * vec, eps)
        else:
            _layernorm_rows(out_ptr, x_ptr, w_ptr, b_ptr, rows * x_row_stride, rows * out_row_stride, cols, row_ok,
                            n_cols, eps)


# ------------------------------------------------------------------------------ host side


def launch_plan(x, weight, bias, out, eps: float, **tunables) -> tuple[tuple, tuple, dict]:
    """(grid, runtime arguments, constexpr arguments incl. num_warps) of the launch `layer_norm` makes
    for 2-D x and out."""
    n_rows, n_cols = x.shape
    if x.stride(1) != 1 or out.stride(1) != 1 or weight.stride(0) != 1 or bias.stride(0) != 1:
        raise ValueError("layernorm_kernel needs unit stride along the last dim")
    if max(n_rows * x.stride(0), n_rows * out.stride(0)) >= 2**31:
        raise ValueError("layernorm_kernel indexes with 32-bit offsets: the tensor is too large")
    aligned = all(t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0 for t in (x, out)) \
        and (n_cols * x.element_size()) % 16 == 0 and weight.data_ptr() % 16 == 0 and bias.data_ptr() % 16 == 0
    cfg = default_config(n_rows, n_cols, x.element_size(), aligned)
    cfg.update(tunables)
    if cfg["BLOCK_N"] < n_cols:
        raise ValueError(f"BLOCK_N={cfg['BLOCK_N']} is smaller than the row ({n_cols})")
    grid = (-(-n_rows // cfg["ROWS_PER_PROGRAM"]),)
    args = (out, x, weight, bias, n_rows, n_cols, x.stride(0), out.stride(0), float(eps))
    return grid, args, dict(cfg, num_warps=cfg["NUM_WARPS"])


def layer_norm(x, weight, bias, eps: float = 1e-5, out=None, **tunables):
    """F.layer_norm(x, (N,), weight, bias, eps) over the last dim of x (2-D, or N-D flattened to rows),
    fp32 math, into `out` (x's shape and dtype; new if None). `tunables` override default_config's choice
    (BLOCK_N, ROWS_PER_PROGRAM, NUM_WARPS, VEC)."""
    import torch
    n = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if tuple(t.shape) != (n,):
            raise ValueError(f"{name} is {tuple(t.shape)}, expected ({n},)")
    out = torch.empty_like(x, memory_format=torch.contiguous_format) if out is None else out
    if out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"out is {tuple(out.shape)} {out.dtype}, x is {tuple(x.shape)} {x.dtype}")
    if x.numel() == 0:
        return out
    x2 = x.reshape(-1, n) if x.dim() != 2 else x
    out2 = out.view(-1, n) if out.dim() != 2 else out
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    grid, args, meta = launch_plan(x2, weight.contiguous(), bias.contiguous(), out2, eps, **tunables)
    layernorm_kernel[grid](*args, **meta)
    return out


def reference(x, weight, bias, eps: float = 1e-5):
    """fp32 LayerNorm in torch ops."""
    import torch
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(), eps)


def check(m: int, n: int, dtype, device: str = "cuda"):
    """One case on fresh random x (a mean far from 0), w and b into a NaN-poisoned output, against the
    fp32 `reference`: (ok, relative error, x, w, b, out)."""
    import torch
    x = torch.randn(m, n, device=device, dtype=dtype) + 3.0          # a mean far from 0
    w = torch.rand(n, device=device, dtype=dtype) + 0.5
    b = torch.randn(n, device=device, dtype=dtype)
    out = torch.full_like(x, float("nan"))
    layer_norm(x, w, b, 1e-5, out)
    ref = reference(x, w, b)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    ok = not out.isnan().any().item() and err < (1e-5 if dtype == torch.float32 else 1e-2)
    return ok, err, x, w, b, out


def main() -> int:
    from example_cli import gpu_present, interpreted_cases      # here, not at the top: the file also loads by path
    if gpu_present():
        import torch
        import triton.testing
        for (m, n) in ((8192, 4096), (16384, 8192), (4096, 1000), (32768, 1024), (1000, 4095)):
            for dtype in (torch.float16, torch.bfloat16, torch.float32):
                ok, err, x, w, b, out = check(m, n, dtype)
                ours = triton.testing.do_bench(lambda: layer_norm(x, w, b, 1e-5, out), return_mode="median")
                theirs = triton.testing.do_bench(lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5),
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
            ptr = PointerArg(dt)
            ck = layernorm_kernel.compile(ptr, ptr, ptr, ptr, *ints, ScalarArg(gl.float32), arch="sm90",
                                          num_warps=cfg["NUM_WARPS"], **cfg)
            ops = sass_instructions(ck.sass())
            mem = {op: k for op, k in sorted(ops.items()) if op.startswith(("LDG.", "STG."))}
            print(f"{dt.name:>4} N={n_cols:<5} {cfg}: registers={ck.registers} spills={ck.spills} {mem}")

    return interpreted_cases(check, [((37, 1000), "float16"), ((5, 4097), "bfloat16"),
                                     ((9, 300), "float32")])


if __name__ == "__main__":
    raise SystemExit(main())
