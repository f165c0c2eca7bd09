"""A fused elementwise kernel in the DSL: SwiGLU's gate, `out = silu(a) * b` with silu(x) = x / (1 + exp(-x)).

a, b and out are flat views of n elements (fp16 / bf16 / fp32, fp32 math): one pass that reads a and b
once and writes out once, where torch's `F.silu(a) * b` makes two passes and a temporary. Each program
handles BLOCK contiguous elements, each thread 16-byte vectors of them.

A mask only stays vector-wide if the compiler can prove that n is a multiple of the vector; the
launcher proves "divisible by 16", so for other n (2**26 + 3) every masked access would be element-wide.
So full blocks (all but at most one program) take the unmasked path and only the last, partial block is
masked: a uniform branch per program.

Run it (from the repository root): `PYTHONPATH=$PWD python3 examples/elementwise_kernel.py`. With a GPU
it checks against an fp32 torch reference and times against `torch.nn.functional.silu(a) * b`; without
one it compiles for sm_90 and prints registers, spills and the global loads/stores in the SASS, then
checks small cases in the CPU interpreter.
"""
from __future__ import annotations

import gluon
import gluon.language as gl
from gluon import GluonError, Layout

LOG2E = 1.4426950408889634


def _silu_mul(a, b):
    """silu(a) * b in fp32: a / (1 + exp(-a)) * b."""
    a = a.to(gl.float32)
    return a / (1.0 + gl.exp2(-a * LOG2E)) * b.to(gl.float32)


def _swiglu_block(out_ptr, a_ptr, b_ptr, offs, mask, evict: str):
    """One block: masked (the last, partial block) or not (mask None: full 16-byte accesses)."""
    a = gl.load(a_ptr + offs, mask=mask, other=0.0 if mask is not None else None, evict=evict)
    b = gl.load(b_ptr + offs, mask=mask, other=0.0 if mask is not None else None, evict=evict)
    gl.store(out_ptr + offs, _silu_mul(a, b), mask=mask)


@gluon.jit
def swiglu_kernel(out_ptr, a_ptr, b_ptr, n_elements, BLOCK: gl.constexpr = 4096, NUM_WARPS: gl.constexpr = 4,
                  VEC: gl.constexpr = 0, EVICT: gl.constexpr = ""):
    """out[i] = silu(a[i]) * b[i] for i in [pid * BLOCK, pid * BLOCK + BLOCK) of n_elements. The grid
    is cdiv(n_elements, BLOCK) programs of NUM_WARPS warps (launch with num_warps=NUM_WARPS); BLOCK a
    multiple of VEC * 32 * NUM_WARPS. VEC: elements per thread-vector, 0 for 16 bytes' worth. EVICT: an
    eviction policy for the loads of a and b ("", "evict_first", "evict_last")."""
    vec = VEC if VEC > 0 else 16 // a_ptr.dtype.bytes
    if BLOCK % (vec * 32 * NUM_WARPS) != 0:
        raise GluonError(f"BLOCK={BLOCK} is not a multiple of VEC * 32 * NUM_WARPS = {vec * 32 * NUM_WARPS}")
    layout = Layout.blocked([vec], [32], [NUM_WARPS])
    start = gl.program_id(0) * BLOCK
    offs = start + gl.arange(0, BLOCK, layout=layout)
    if start + BLOCK <= n_elements:
        _swiglu_block(out_ptr, a_ptr, b_ptr, offs, None, EVICT)
    else:
        _swiglu_block(out_ptr, a_ptr, b_ptr, offs, offs < n_elements, EVICT)


# ------------------------------------------------------------------------------ host side


def default_config(n_elements: int, elem_bytes: int) -> dict:
    """Good tunables: 4 warps, 2 vectors of 16 bytes a thread (BLOCK = 2 * VEC * 128)."""
    vec = 16 // elem_bytes
    return dict(BLOCK=2 * vec * 32 * 4, NUM_WARPS=4, VEC=vec, EVICT="")


def launch_plan(a, b, out, **tunables) -> tuple[tuple, tuple, dict]:
    """(grid, runtime arguments, constexpr arguments incl. num_warps) of the launch `swiglu` makes for
    flat contiguous a, b, out."""
    n = a.numel()
    cfg = default_config(n, a.element_size())
    cfg.update(tunables)
    if n + cfg["BLOCK"] >= 2**31:
        raise ValueError("swiglu_kernel indexes with 32-bit offsets: the tensor is too large")
    grid = (-(-n // cfg["BLOCK"]),)
    return grid, (out, a, b, n), dict(cfg, num_warps=cfg["NUM_WARPS"])


def swiglu(a, b, out=None, **tunables):
    """silu(a) * b elementwise (same shape and dtype, fp32 math) into `out` (new if None).
    `tunables` override default_config's choice (BLOCK, NUM_WARPS, VEC, EVICT)."""
    import torch
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(f"a is {tuple(a.shape)} {a.dtype}, b is {tuple(b.shape)} {b.dtype}")
    out = torch.empty_like(a, memory_format=torch.contiguous_format) if out is None else out
    if out.shape != a.shape or out.dtype != a.dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {tuple(a.shape)} {a.dtype} tensor")
    if a.numel() == 0:
        return out
    grid, args, meta = launch_plan(a.contiguous().view(-1), b.contiguous().view(-1), out.view(-1), **tunables)
    swiglu_kernel[grid](*args, **meta)
    return out


def reference(a, b):
    """fp32 silu(a) * b in torch ops."""
    af = a.float()
    return af / (1.0 + (-af).exp()) * b.float()


def check(n: int, dtype, device: str = "cuda"):
    """One case on fresh random a and b into a NaN-poisoned output, against the fp32 `reference`: (ok,
    relative error, a, b, out)."""
    import torch
    a = torch.randn(n, device=device, dtype=dtype) * 3
    b = torch.randn(n, device=device, dtype=dtype)
    out = torch.full_like(a, float("nan"))
    swiglu(a, b, out)
    ref = reference(a, b)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    ok = not out.isnan().any().item() and err < (1e-5 if dtype == torch.float32 else 1e-2)
    return ok, err, a, b, out


def main() -> int:
    from example_cli import gpu_present, interpreted_cases      # here, not at the top: the file also loads by path
    if gpu_present():
        import torch
        import triton.testing
        for n in (1 << 26, (1 << 26) + 3, 1 << 20, 1000):
            for dtype in (torch.float16, torch.bfloat16, torch.float32):
                ok, err, a, b, out = check(n, dtype)
                ours = triton.testing.do_bench(lambda: swiglu(a, b, out), return_mode="median")
                theirs = triton.testing.do_bench(lambda: torch.nn.functional.silu(a) * b, return_mode="median")
                print(f"n={n:>9} {str(dtype)[6:]:>8}: {'ok' if ok else 'WRONG'} (rel err {err:.1e})  "
                      f"{ours * 1e3:8.1f} us vs torch {theirs * 1e3:8.1f} us: {theirs / ours:.2f}x")
        return 0
    from gluon.backend.machine_code import sass_instructions
    from gluon.language import PointerArg, ScalarArg
    for dt in (gl.float16, gl.bfloat16, gl.float32):
        for d in (16, 1):
            cfg = default_config(1 << 26, dt.bytes)
            ck = swiglu_kernel.compile(PointerArg(dt), PointerArg(dt), PointerArg(dt), ScalarArg(gl.int32, d),
                                       arch="sm90", num_warps=cfg["NUM_WARPS"], **cfg)
            ops = sass_instructions(ck.sass())
            mem = {op: k for op, k in sorted(ops.items()) if op.startswith(("LDG.", "STG."))}
            print(f"{dt.name:>4} n%16={'0' if d == 16 else '?'} {cfg}: registers={ck.registers} spills={ck.spills} {mem}")

    return interpreted_cases(check, [((1000,), "float16"), ((4097,), "bfloat16"),
                                     ((2 * 1024 + 3,), "float32")])


if __name__ == "__main__":
    raise SystemExit(main())
