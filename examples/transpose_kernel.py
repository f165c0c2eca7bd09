"""Matrix transpose through shared memory in the DSL: `out = x.T` for an [M, N] tensor (out is [N, M]).

A program moves one [BLOCK_M, BLOCK_N] tile. It loads it from x with each thread holding 16 bytes of a
row (coalesced along x's rows), stores it into a shared tile, and reads the tile back in a register
layout whose threads run down the columns (`order=(0, 1)`), each holding 16 bytes of a column: one
row of out, so the global stores are coalesced 16-byte vectors too. The shared tile is where the
data changes hands between threads; without a swizzle the column-wise read makes every lane of a
warp hit the same few banks (rows BLOCK_N elements apart start in the same bank).

The swizzle, `Layout.shared(vec=V, per_phase=V, max_phase=8)` (V = 16 bytes of elements), XORs each
V-element group's column with the row's phase, so the 8 x 4 lanes of one column read land in 32
different banks while the row-wise 16-byte stores stay whole. The bank-conflict pass
(`gluon/passes/bank_conflicts.py`) models both copies: 0 conflicts for the swizzled tile, an 8-way
conflict on the column-wise read for `SWIZZLE=False`, `Layout.shared(1, 1, 1)`.

fp16 / bf16 / fp32 / int32 (any 1-, 2- or 4-byte dtype: the kernel only moves bits). Tiles at the edges
are masked, so any M and N work. As in examples/softmax_kernel.py the 16-byte accesses need the
compiler to know that M, N and the row strides are multiples of V; the launcher proves only "divisible
by 16", so the kernel checks at run time and rebuilds them as `(s // V) * V` where they are (one scalar
branch); other sizes go element by element.

Run it (from the repository root): `PYTHONPATH=$PWD python3 examples/transpose_kernel.py`. With a GPU it
checks bit-exactly against torch and times the swizzled and the naive tile against
`x.t().contiguous()`; without one it compiles for sm_90 and prints registers, spills, the global and
shared loads/stores in the SASS and the bank-conflict pass's verdict on both shared layouts, then checks
small cases in the CPU interpreter.
"""
from __future__ import annotations

import warnings

import gluon
import gluon.language as gl
from gluon import Layout

MAX_PHASE = 8


def tile_layouts(block_m: int, block_n: int, vec: int, num_warps: int) -> tuple:
    """(load layout, store layout) of a [block_m, block_n] tile: rows of 16-byte vectors, lanes along
    a row (what x's rows are read in), and columns of 16-byte vectors, 8 lanes down a column and 4 across
    (what out's rows are written from). Refuses tiles the warps do not cover."""
    lanes_n = min(32, block_n // vec)
    if block_m * block_n < 32 * num_warps * vec or block_m < 8 * vec or block_n < 8 * vec:
        raise ValueError(f"transpose tile [{block_m}, {block_n}] is too small for {num_warps} warps of {vec}-element "
                         f"vectors (BLOCK_M and BLOCK_N >= {8 * vec}: a column read covers 8 vectors, and a row "
                         f"needs {MAX_PHASE} vector groups for the swizzle to spread them)")
    rows = Layout.blocked([1, vec], [32 // lanes_n, lanes_n], [num_warps, 1])
    cols = Layout.blocked([vec, 1], [8, 4], [1, num_warps], order=(0, 1))
    return rows, cols


def shared_layout(vec: int, swizzle: bool) -> Layout:
    """The shared tile's layout: V-element groups XORed with the row's phase (rows V apart share one), or
    plain row-major."""
    return Layout.shared(vec=vec, per_phase=vec, max_phase=MAX_PHASE) if swizzle else Layout.shared(1, 1, 1)


def _move_tile(out_ptr, x_ptr, tile, rows_l, cols_l, m0, n0, n_rows, n_cols, x_stride, out_stride, BM, BN):
    """x[m0:m0+BM, n0:n0+BN] -> registers (row-wise) -> shared -> registers (column-wise) -> out."""
    i = gl.expand_dims(m0 + gl.arange(0, BM, layout=Layout.slice(1, rows_l)), 1)
    j = gl.expand_dims(n0 + gl.arange(0, BN, layout=Layout.slice(0, rows_l)), 0)
    tile.store(gl.load(x_ptr + i * x_stride + j, mask=(i < n_rows) & (j < n_cols)))
    gl.thread_barrier()
    t = tile.load(cols_l)
    i2 = gl.expand_dims(m0 + gl.arange(0, BM, layout=Layout.slice(1, cols_l)), 1)
    j2 = gl.expand_dims(n0 + gl.arange(0, BN, layout=Layout.slice(0, cols_l)), 0)
    gl.store(out_ptr + j2 * out_stride + i2, t, mask=(i2 < n_rows) & (j2 < n_cols))


@gluon.jit
def transpose_kernel(out_ptr, x_ptr, n_rows, n_cols, x_row_stride, out_row_stride,
                     BLOCK_M: gl.constexpr = 64, BLOCK_N: gl.constexpr = 64, NUM_WARPS: gl.constexpr = 4,
                     SWIZZLE: gl.constexpr = True):
    """out[j, i] = x[i, j] for the [BLOCK_M, BLOCK_N] tile (program_id(0), program_id(1)) of x. The grid is
    (cdiv(n_rows, BLOCK_M), cdiv(n_cols, BLOCK_N)) programs of NUM_WARPS warps (launch with
    num_warps=NUM_WARPS). SWIZZLE=False keeps the shared tile row-major (the bank-conflicting variant)."""
    vec = 16 // x_ptr.dtype.bytes
    rows_l, cols_l = tile_layouts(BLOCK_M, BLOCK_N, vec, NUM_WARPS)
    tile = gl.smem(x_ptr.dtype, shared_layout(vec, SWIZZLE), shape=(BLOCK_M, BLOCK_N), name="tile")
    m0 = gl.program_id(0) * BLOCK_M
    n0 = gl.program_id(1) * BLOCK_N
    if ((n_rows % vec) | (n_cols % vec) | (x_row_stride % vec) | (out_row_stride % vec)) == 0:
        # the same sizes and strides, but provably multiples of vec: 16-byte global accesses (the masks are
        # then constant over each vector too)
        _move_tile(out_ptr, x_ptr, tile, rows_l, cols_l, m0, n0, n_rows // vec * vec, n_cols // vec * vec,
                   x_row_stride // vec * vec, out_row_stride // vec * vec, BLOCK_M, BLOCK_N)
    else:
        _move_tile(out_ptr, x_ptr, tile, rows_l, cols_l, m0, n0, n_rows, n_cols, x_row_stride, out_row_stride,
                   BLOCK_M, BLOCK_N)


# ------------------------------------------------------------------------------ host side


def default_config(n_rows: int, n_cols: int, elem_bytes: int) -> dict:
    """64 x 64 tiles on 4 warps (32 elements a thread, 8 KiB of fp16 / 16 KiB of fp32 shared memory a
    program); 128 x 128 for 1-byte dtypes, whose 16-byte vectors are 16 elements (tile_layouts says why)."""
    vec = 16 // elem_bytes
    return {"BLOCK_M": max(64, 8 * vec), "BLOCK_N": max(64, 8 * vec), "NUM_WARPS": 4, "SWIZZLE": True}


def launch_plan(x, out, **tunables) -> tuple[tuple, tuple, dict]:
    """(grid, runtime arguments, constexpr arguments incl. num_warps) of the launch `transpose` makes for
    2-D x [M, N] and out [N, M]."""
    n_rows, n_cols = x.shape
    if x.stride(1) != 1 or out.stride(1) != 1:
        raise ValueError("transpose_kernel needs unit stride along the last dim of x and out")
    if max(n_rows * x.stride(0), n_cols * out.stride(0)) >= 2**31:
        raise ValueError("transpose_kernel indexes with 32-bit offsets: the tensor is too large")
    cfg = dict(default_config(n_rows, n_cols, x.element_size()), **tunables)
    grid = (-(-n_rows // cfg["BLOCK_M"]), -(-n_cols // cfg["BLOCK_N"]))
    if grid[1] > 65535:
        raise ValueError(f"transpose_kernel: {grid[1]} column tiles are over the grid's 65535 in y; "
                         "use a wider BLOCK_N")
    return grid, (out, x, n_rows, n_cols, x.stride(0), out.stride(0)), dict(cfg, num_warps=cfg["NUM_WARPS"])


def transpose(x, out=None, **tunables):
    """x.t().contiguous() for a 2-D tensor, into `out` ([N, M], x's dtype; new if None). `tunables`
    override default_config (BLOCK_M, BLOCK_N, NUM_WARPS, SWIZZLE)."""
    import torch
    if x.dim() != 2:
        raise ValueError(f"transpose takes a 2-D x, got {x.dim()}-D")
    m, n = x.shape
    out = torch.empty((n, m), device=x.device, dtype=x.dtype) if out is None else out
    if tuple(out.shape) != (n, m) or out.dtype != x.dtype:
        raise ValueError(f"out is {tuple(out.shape)} {out.dtype}, expected ({n}, {m}) {x.dtype}")
    if x.numel() == 0:
        return out
    x = x if x.stride(1) == 1 else x.contiguous()
    grid, args, meta = launch_plan(x, out, **tunables)
    transpose_kernel[grid](*args, **meta)
    return out


def compile_sm90(dtype, div16: bool = True, **tunables):
    """(config, compiled kernel, bank-conflict records) of the sm_90 compile for `dtype` (a gl dtype), the
    strides divisible by 16 or not; the pass's warnings are collected, not shown."""
    from gluon.language import PointerArg, ScalarArg
    cfg = dict(default_config(4096, 4096, dtype.bytes), **tunables)
    ints = [ScalarArg(gl.int32, 16 if div16 else 1)] * 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ck = transpose_kernel.compile(PointerArg(dtype), PointerArg(dtype), *ints, arch="sm90",
                                      num_warps=cfg["NUM_WARPS"], **cfg)
    return cfg, ck, ck.kernel.attrs.get("bank_conflicts", [])


def check(m: int, n: int, dtype, device: str = "cuda", x=None, **tunables):
    """One case: the transpose of fresh random x ([m, n]; or the x given) into a poisoned out, bit for bit
    against torch's: (ok, 0.0 (no error but a wrong bit), x, out). `tunables` go to `transpose`."""
    import torch
    if x is None:
        x = (torch.randn(m, n, device=device, dtype=dtype) if dtype.is_floating_point
             else torch.randint(-1000, 1000, (m, n), device=device, dtype=dtype))
    out = torch.full((n, m), float("nan") if dtype.is_floating_point else -7, device=device, dtype=dtype)
    transpose(x, out, **tunables)
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[x.element_size()]
    return torch.equal(out.view(bits), x.t().contiguous().view(bits)), 0.0, x, out


def main() -> int:
    from example_cli import gpu_present, interpreted_cases      # here, not at the top: the file also loads by path
    if gpu_present():
        import torch
        import triton.testing
        for (m, n) in ((8192, 8192), (4096, 1000), (1000, 4096), (3001, 517)):
            for dtype in (torch.float16, torch.float32):
                x = torch.randn(m, n, device="cuda", dtype=dtype)
                gbytes = 2 * x.numel() * x.element_size() / 1e9
                theirs = triton.testing.do_bench(lambda: x.t().contiguous(), return_mode="median")
                for swizzle in (True, False):
                    ok, _, _, out = check(m, n, dtype, x=x, SWIZZLE=swizzle)
                    ours = triton.testing.do_bench(lambda: transpose(x, out, SWIZZLE=swizzle), return_mode="median")
                    print(f"{m:>5} x {n:<5} {str(dtype)[6:]:>8} {'swizzled' if swizzle else 'naive   '}: "
                          f"{'ok' if ok else 'WRONG'}  {ours * 1e3:7.1f} us ({gbytes / ours:5.0f} GB/s) vs torch "
                          f"{theirs * 1e3:7.1f} us ({gbytes / theirs:5.0f} GB/s): {theirs / ours:.2f}x")
        return 0
    from gluon.backend.machine_code import sass_instructions
    for dt in (gl.float16, gl.float32):
        for swizzle in (True, False):
            for div16 in (True, False):
                cfg, ck, conflicts = compile_sm90(dt, div16, SWIZZLE=swizzle)
                ops = sass_instructions(ck.sass())
                mem = {op: k for op, k in sorted(ops.items()) if op.startswith(("LDG.", "STG.", "LDS", "STS"))}
                verdict = ", ".join(sorted({f"{c['op']} {c['degree']:g}-way" for c in conflicts})) or "0 bank conflicts"
                print(f"{dt.name:>4} {'swizzled' if swizzle else 'naive   '} strides{'%16' if div16 else '%1 '} "
                      f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}: registers={ck.registers} spills={ck.spills} {verdict} {mem}")
        print(f"     shared layouts: swizzled {shared_layout(16 // dt.bytes, True)}, naive {shared_layout(1, False)}")

    return interpreted_cases(check, [((37, 1000), "float16"), ((64, 200), "bfloat16"),
                                     ((100, 67), "float32"), ((129, 72), "int32")])


if __name__ == "__main__":
    raise SystemExit(main())
