"""Per-row fp8 quantization in the DSL: `scale[i] = max|x[i, :]| / 448`, `q[i, :] = e4m3(x[i, :] / scale[i])`.

fp16 / bf16 / fp32 x of shape [M, N]; q is float8_e4m3fn (448 is its largest finite value, so every row uses
the format's whole range), rounded to nearest even (`gl.cast(..., gl.float8e4m3)`, PTX
`cvt.rn.satfinite.e4m3x2.f32`); the scales are written as fp32 (`x ~= q * scale`). A program owns
ROWS_PER_PROGRAM whole rows in registers (a [ROWS_PER_PROGRAM, BLOCK_N] tile, BLOCK_N >= N): one read of x,
the row maximum in registers and warps (`gl.max`), one write of q and of the scales. An all-zero row gets
the smallest scale (1e-12 / 448) and zeros.

Run it (from the repository root): `PYTHONPATH=$PWD python3 examples/fp8_quantize.py`. With a GPU it checks
against torch's quantization (the same scales; the same fp8 codes up to one step where the two divisions
round differently) and times against it; without one it compiles for sm_90 and prints registers, spills,
the global loads/stores and the fp8 conversion instructions of the SASS, then checks small cases in the CPU
interpreter.
"""
from __future__ import annotations

import gluon
import gluon.language as gl
from gluon import Layout

FP8_MAX = 448.0              # float8_e4m3fn's largest finite value
MIN_AMAX = 1e-12             # the row maximum an all-zero row is scaled as
MAX_BLOCK_N = 16384          # the widest row kept in registers


@gluon.jit
def fp8_quantize_kernel(q_ptr, scale_ptr, x_ptr, n_rows, n_cols, x_row_stride, q_row_stride,
                        BLOCK_N: gl.constexpr, ROWS_PER_PROGRAM: gl.constexpr = 1, NUM_WARPS: gl.constexpr = 4):
    """Quantize rows [pid * ROWS_PER_PROGRAM, ...) of x into q (e4m3) and scale (fp32, one per row). The grid
    is cdiv(n_rows, ROWS_PER_PROGRAM) programs of NUM_WARPS warps (launch with num_warps=NUM_WARPS)."""
    R = ROWS_PER_PROGRAM
    layout = Layout.rows(R, BLOCK_N, 16 // x_ptr.dtype.bytes, NUM_WARPS)
    row = gl.program_id(0) * R + gl.arange(0, R, layout=Layout.slice(1, layout))
    rows = gl.expand_dims(row, 1)
    cols = gl.expand_dims(gl.arange(0, BLOCK_N, layout=Layout.slice(0, layout)), 0)
    mask = (rows < n_rows) & (cols < n_cols)
    x = gl.load(x_ptr + rows * x_row_stride + cols, mask=mask, other=0.0).to(gl.float32)
    scale = gl.maximum(gl.max(gl.abs(x), 1), MIN_AMAX) / FP8_MAX
    q = (x / gl.expand_dims(scale, 1)).to(gl.float8e4m3, rounding="rtne")
    gl.store(q_ptr + rows * q_row_stride + cols, q, mask=mask)
    gl.store(scale_ptr + row, scale, mask=row < n_rows)


# ------------------------------------------------------------------------------ host side


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def default_config(n_rows: int, n_cols: int, elem_bytes: int) -> dict:
    """BLOCK_N the next power of two of N, rows several to a program while short (about 4 KiB of x a
    program), about 16 elements a thread."""
    block_n = _next_pow2(n_cols)
    if block_n > MAX_BLOCK_N:
        raise ValueError(f"fp8_quantize_kernel keeps a row in registers: N={n_cols} is over {MAX_BLOCK_N}")
    rows = max(1, min(_next_pow2(max(1, n_rows)), 4096 // (block_n * elem_bytes)))
    vec = 16 // elem_bytes
    while rows * min(32, block_n // vec) < 32:
        rows *= 2
    warps = max(1, min(16, rows * block_n // (32 * 16)))
    return {"BLOCK_N": block_n, "ROWS_PER_PROGRAM": rows, "NUM_WARPS": warps}


def quantize(x, q=None, scales=None, **tunables):
    """(q, scales) of 2-D x: q float8_e4m3fn like x, scales fp32 [M]; `tunables` override default_config."""
    import torch
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError("quantize takes a 2-D x with unit stride along its rows")
    m, n = x.shape
    q = torch.empty((m, n), device=x.device, dtype=torch.float8_e4m3fn) if q is None else q
    scales = torch.empty(m, device=x.device, dtype=torch.float32) if scales is None else scales
    if m == 0:
        return q, scales
    cfg = dict(default_config(m, n, x.element_size()), **tunables)
    grid = (-(-m // cfg["ROWS_PER_PROGRAM"]),)
    fp8_quantize_kernel[grid](q, scales, x, m, n, x.stride(0), q.stride(0), num_warps=cfg["NUM_WARPS"], **cfg)
    return q, scales


def reference(x):
    """torch's per-row e4m3 quantization (fp32 math)."""
    import torch
    scale = x.float().abs().amax(1).clamp(min=MIN_AMAX) / FP8_MAX
    return (x.float() / scale[:, None]).to(torch.float8_e4m3fn), scale


def check(x, q, scales) -> str | None:
    """None when (q, scales) is torch's quantization of x, else what differs. Ours divides with div.full.f32
    (Triton's f32 division, within 2 ulp), torch exactly: the scales agree to 1e-6 and the fp8 codes to one
    step, differing at under 0.1% of the elements."""
    import torch
    rq, rs = reference(x)
    if not torch.allclose(scales, rs, rtol=1e-6, atol=0):
        return f"scales differ by up to {(scales - rs).abs().max().item():.3e}"
    a, b = q.view(torch.uint8).int(), rq.view(torch.uint8).int()
    mag_a, mag_b = a & 0x7F, b & 0x7F
    near = (a == b) | (((a ^ b) & 0x80) == 0) & ((mag_a - mag_b).abs() == 1) | (mag_a + mag_b <= 1)
    if not bool(near.all()):
        i = int((~near).nonzero()[0, 0]) if (~near).dim() == 1 else tuple((~near).nonzero()[0].tolist())
        return f"fp8 code {a[i].item():#04x} at {i} is more than a step from torch's {b[i].item():#04x}"
    differ = (a != b).float().mean().item()
    if differ > 1e-3:
        return f"{differ:.2%} of the fp8 codes differ from torch's"
    return None


def check_case(m: int, n: int, dtype, device: str = "cuda"):
    """One case on fresh random x (rows of different magnitudes) into NaN-poisoned q and scales, checked by
    `check`: (ok, the fraction of fp8 codes that differ from torch's, what differs or None, x, q, scales)."""
    import torch
    x = torch.randn(m, n, device=device, dtype=dtype) * torch.rand(m, 1, device=device, dtype=dtype) * 10
    q = torch.full((m, n), 0x7F, device=device, dtype=torch.uint8).view(torch.float8_e4m3fn)  # NaN
    scales = torch.full((m,), float("nan"), device=device)
    quantize(x, q, scales)
    problem = check(x, q, scales)
    differ = (q.view(torch.uint8) != reference(x)[0].view(torch.uint8)).float().mean().item()
    return problem is None, differ, problem, x, q, scales


def main() -> int:
    from example_cli import gpu_present, interpreted_cases      # here, not at the top: the file also loads by path
    if gpu_present():
        import torch
        import triton.testing
        for (m, n) in ((8192, 4096), (16384, 8192), (4096, 1000), (32768, 1024), (1000, 4095)):
            for dtype in (torch.float16, torch.bfloat16, torch.float32):
                _, _, problem, x, q, scales = check_case(m, n, dtype)
                ours = triton.testing.do_bench(lambda: quantize(x, q, scales), return_mode="median")
                theirs = triton.testing.do_bench(lambda: reference(x), return_mode="median")
                print(f"{m:>6} x {n:<6} {str(dtype)[6:]:>8}: {problem or 'ok'}  "
                      f"{ours * 1e3:8.1f} us vs torch {theirs * 1e3:8.1f} us: {theirs / ours:.2f}x")
        return 0
    from gluon.backend.machine_code import sass_instructions
    from gluon.language import PointerArg, ScalarArg
    for dt in (gl.float16, gl.bfloat16, gl.float32):
        for n_cols in (4096, 1024):
            cfg = default_config(8192, n_cols, dt.bytes)
            ints = [ScalarArg(gl.int32, 16)] * 4
            ck = fp8_quantize_kernel.compile(PointerArg(gl.float8e4m3), PointerArg(gl.float32), PointerArg(dt), *ints,
                                             arch="sm90", num_warps=cfg["NUM_WARPS"], **cfg)
            sass = ck.sass()
            ops = sass_instructions(sass)
            mem = {op: k for op, k in sorted(ops.items()) if op.startswith(("LDG.", "STG."))
                   or op.startswith("F2FP.") and not any(o.startswith(op + ".") for o in ops)}
            print(f"{dt.name:>4} N={n_cols:<5} {cfg}: registers={ck.registers} spills={ck.spills} {mem}")
    cvt = [ln.strip() for ln in sass.splitlines() if "F2FP" in ln]
    print(f"the fp8 conversions of the last one ({len(cvt)}), e.g.:")
    print("\n".join(cvt[:4]))
    return interpreted_cases(check_case, [((37, 1000), "float16"), ((5, 4097), "bfloat16"),
                                          ((9, 300), "float32")])


if __name__ == "__main__":
    raise SystemExit(main())
