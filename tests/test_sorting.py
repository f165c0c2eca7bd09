"""`gl.sort` and `gl.topk` (issue 19, "the DSL beyond GEMM"): bitonic networks of the shape ops
(gluon/language/sorting.py).

CPU: the interpreter's results equal torch.sort (stable) / torch.topk on random inputs with duplicates,
negative numbers, infinities and NaNs, in several dtypes, 1-D and 2-D tiles along dim 0 and 1, values alone
and with indices; the TTGIR is made of Triton's shape ops only (one tt.split per compare-and-swap column and
carried tile, no op of its own); compiled for sm90 a row held by one thread sorts without a shuffle or shared
memory and a row across lanes with butterfly shuffles; the errors at the user's line.
GPU (marked): the same kernels against torch.sort / torch.topk into poisoned outputs.
"""
import math

import pytest
import torch

import gluon
import gluon.language as gl
from gluon.ir import GluonError
from gluon.jit import lower, run_passes
from gluon.language import PointerArg

NAN = float("nan")


@gluon.jit
def sort_kernel(x_ptr, v_ptr, i_ptr, M: gl.constexpr, N: gl.constexpr, DIM: gl.constexpr, K: gl.constexpr,
                TOPK: gl.constexpr, DESC: gl.constexpr, IDX: gl.constexpr, ROW: gl.constexpr = 0):
    """One program: x (M x N; M == 0: a 1-D tile of N) sorted along DIM (TOPK: its K largest) into v, the
    positions into i when IDX. ROW > 0 holds x in a blocked layout of ROW elements of a row per thread."""
    if M == 0:
        x = gl.load(x_ptr + gl.arange(0, N))
        o = gl.arange(0, K)
    elif ROW > 0:
        lay = gl.Layout.blocked([1, ROW], [32 * ROW // N, N // ROW], [4, 1], [1, 0])
        rows = gl.arange(0, M, layout=gl.Layout.slice(1, lay))[:, None]
        x = gl.load(x_ptr + rows * N + gl.arange(0, N, layout=gl.Layout.slice(0, lay))[None, :])
        o = rows * K + gl.arange(0, K, layout=gl.Layout.slice(0, lay))[None, :]
    else:
        x = gl.load(x_ptr + gl.arange(0, M)[:, None] * N + gl.arange(0, N)[None, :])
        if DIM == 1:
            o = gl.arange(0, M)[:, None] * K + gl.arange(0, K)[None, :]
        else:
            o = gl.arange(0, K)[:, None] * N + gl.arange(0, N)[None, :]
    if TOPK:
        r = gl.topk(x, K, dim=DIM, return_indices=IDX)
    else:
        r = gl.sort(x, dim=DIM, descending=DESC, return_indices=IDX)
    if IDX:
        gl.store(v_ptr + o, r[0])
        gl.store(i_ptr + o, r[1])
    else:
        gl.store(v_ptr + o, r)


TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
         "i32": torch.int32, "i8": torch.int8, "i64": torch.int64, "u8": torch.uint8, "i16": torch.int16}


def _inputs(shape, dtype: torch.dtype, device="cpu", seed=0) -> torch.Tensor:
    """Random values with many duplicates and negative numbers; floats also get -inf, +inf, -0.0 and NaN."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        x = torch.randint(0, 256, shape, generator=g).to(dtype)
    elif not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        x = torch.randint(-9, 9, shape, generator=g).to(dtype)
        x.view(-1)[: x.numel() // 3] = torch.randint(max(info.min, -2**31), min(info.max, 2**31 - 1),
                                                     (x.numel() // 3,), generator=g).to(dtype)
    else:
        x = (torch.randint(-6, 6, shape, generator=g) / 4).to(dtype)            # exact in every float dtype
        x.view(-1)[: x.numel() // 4] = torch.randn(x.numel() // 4, generator=g).to(dtype)
        flat = x.view(-1)
        flat[torch.randperm(x.numel(), generator=g)[:4]] = torch.tensor([float("-inf"), float("inf"), -0.0, NAN],
                                                                        dtype=dtype)
    x = x.view(-1)[torch.randperm(x.numel(), generator=g)].view(shape)
    return x.to(device)


def _run(x, dim, k, topk, desc, idx, launch):
    """Run sort_kernel through `launch` (the interpreter or a GPU launch): (values, indices or None)."""
    m, n = (0, x.shape[0]) if x.dim() == 1 else x.shape
    shape = list(x.shape)
    shape[dim] = k
    poison = NAN if x.dtype.is_floating_point else 7
    v = torch.full(shape, poison, dtype=x.dtype, device=x.device)
    i = torch.full(shape, -1, dtype=torch.int32, device=x.device)
    launch(x, v, i, M=m, N=n, DIM=dim, K=k, TOPK=topk, DESC=desc, IDX=idx)
    return v, (i if idx else None)


def _reference(x, dim, k, topk, desc):
    """torch's answer: a stable sort (ties in position order), its first k for a top-k (largest first)."""
    xs = x.cpu()
    vals, idx = torch.sort(xs, dim=dim, descending=desc or topk, stable=True)
    if topk:
        vals, idx = vals.narrow(dim, 0, k), idx.narrow(dim, 0, k)
    return vals.to(x.dtype), idx.to(torch.int32)


def _check(x, v, i, dim, k, topk, desc):
    rv, ri = _reference(x, dim, k, topk, desc)
    v, i = v.cpu(), None if i is None else i.cpu()
    if x.dtype.is_floating_point:
        assert torch.equal(v.isnan(), rv.isnan()), (x, v, rv)
        assert torch.equal(v.nan_to_num(0.0), rv.nan_to_num(0.0)), (x, v, rv)
    else:
        assert torch.equal(v, rv), (x, v, rv)
    if i is not None:
        assert torch.equal(i, ri), (x, i, ri)
    if topk:                                        # and torch.topk's own values
        wide = torch.float64 if x.dtype.is_floating_point else torch.int64
        tv = torch.topk(x.cpu().to(wide), k, dim=dim).values
        assert torch.equal(v.to(wide).nan_to_num(0.0), tv.nan_to_num(0.0))


def _interpret(x, v, i, **kw):
    sort_kernel.interpret((1,), x, v, i, **kw)


CASES = [  # shape, dim, k (None: a sort), descending
    ((16,), 0, None, False),
    ((8, 16), 1, None, False),
    ((8, 16), 1, None, True),
    ((16, 8), 0, None, False),
    ((16, 8), 0, None, True),
    ((4, 32), 1, 4, False),
    ((32, 4), 0, 8, False),
    ((4, 8), 1, 1, False),
    ((4, 8), 1, 8, False),
    ((64,), 0, 2, False),
    ((2, 2), 1, None, True),
]


@pytest.mark.parametrize("idx", [False, True], ids=["values", "indices"])
@pytest.mark.parametrize("shape,dim,k,desc", CASES, ids=[f"{s}-d{d}-{'sort' if k is None else f'top{k}'}"
                                                        f"{'-desc' if de else ''}" for s, d, k, de in CASES])
def test_interpreter_matches_torch(shape, dim, k, desc, idx):
    x = _inputs(shape, torch.float32, seed=sum(shape) + dim)
    topk = k is not None
    k = shape[dim] if k is None else k
    v, i = _run(x, dim, k, topk, desc, idx, _interpret)
    _check(x, v, i, dim, k, topk, desc)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f64", "i32", "i8", "i64", "u8", "i16"])
def test_interpreter_dtypes(dtype):
    for j, (shape, dim, k, topk, desc) in enumerate((((8, 16), 1, 16, False, False), ((16, 8), 0, 16, False, True),
                                                      ((4, 32), 1, 8, True, False))):
        x = _inputs(shape, TORCH[dtype], seed=j)
        v, i = _run(x, dim, k, topk, desc, True, _interpret)
        _check(x, v, i, dim, k, topk, desc)


def test_all_equal_and_all_nan_rows_keep_position_order():
    x = torch.tensor([[3.0] * 8, [NAN] * 8, [NAN, 1.0, NAN, -1.0, 0.0, -0.0, NAN, 2.0], [-0.0, 0.0] * 4])
    for topk, k, desc in ((False, 8, False), (False, 8, True), (True, 4, False)):
        v, i = _run(x, 1, k, topk, desc, True, _interpret)
        _check(x, v, i, 1, k, topk, desc)
    v, i = _run(x, 1, 8, False, False, True, _interpret)
    assert i[3].tolist() == list(range(8))                   # -0.0 and 0.0 compare equal: position order


@gluon.jit
def bool_kernel(x_ptr, v_ptr, i_ptr):
    """The signs of a 16 x 16 tile sorted along rows, descending (True first), as int32, with positions."""
    offs = gl.arange(0, 16)[:, None] * 16 + gl.arange(0, 16)[None, :]
    v, i = gl.sort(gl.load(x_ptr + offs) > 0, descending=True, return_indices=True)
    gl.store(v_ptr + offs, v.to(gl.int32))
    gl.store(i_ptr + offs, i)


def test_booleans_sort_false_first():
    x = torch.randn(16, 16)
    v, i = torch.full((16, 16), 7, dtype=torch.int32), torch.full((16, 16), -1, dtype=torch.int32)
    bool_kernel.interpret((1,), x, v, i)
    rv, ri = torch.sort((x > 0).int(), dim=1, descending=True, stable=True)
    assert torch.equal(v, rv) and torch.equal(i, ri.int())
    assert ".visible .entry" in bool_kernel.compile(PointerArg(gl.float32), PointerArg(gl.int32), PointerArg(gl.int32),
                                                    arch="sm90", num_warps=4).binary.asm["ptx"]


# ---------------------------------------------------------------------------------- TTGIR and machine code (CPU)


def _trace(**kw):
    kw = dict(dict(DIM=1, TOPK=False, DESC=False, IDX=True), **kw)
    F = PointerArg(kw.pop("dtype", gl.float32))
    return sort_kernel.trace(F, F, PointerArg(gl.int32), arch="sm90", num_warps=4, **kw)


def _columns(n: int, k: int) -> int:
    """Compare-and-swap columns (and top-k halvings) of the network for the k first of n."""
    bits, kbits = int(math.log2(n)), int(math.log2(k))
    return kbits * (kbits + 1) // 2 + (bits - kbits) * (1 + kbits)


@pytest.mark.parametrize("n,k,idx", [(16, 16, True), (64, 8, True), (32, 2, False), (8, 1, True)])
def test_ttgir_is_tritons_shape_ops(n, k, idx):
    """No op of its own: reshape to the hypercube and back, and per column a tt.trans pair, one tt.split and
    tt.join per carried tile (the positions are made at the first split, in the halves' layout), selects."""
    t = lower(run_passes(_trace(M=16, N=n, K=k, TOPK=k < n, IDX=idx))).ttgir
    cols = _columns(n, k)
    assert t.count("tt.split") == (2 * cols - 1 if idx else cols), t
    joins = cols - (n.bit_length() - k.bit_length())              # a halving joins nothing
    assert t.count("tt.join") == (2 * joins if idx else joins)
    back = 0 if k == 2 else 1 + idx                # the cube's last shape (16, 2) is the result's for k = 2
    assert t.count("tt.reshape") == 1 + back       # to the hypercube, and back for values and positions
    assert "arith.select" in t and "tt.sort" not in t and "tt.reduce" not in t
    assert f"tensor<16x{k}xf32" in t and (not idx or f"tensor<16x{k}xi32" in t)


def test_the_result_is_in_the_networks_layout_and_reaches_the_store_converted():
    """The result's layout is the one Triton infers through the network (a #ttg.linear), open: it is converted
    where it meets another (here the store's blocked address layout)."""
    t = lower(run_passes(_trace(M=128, N=8, K=8, ROW=8))).ttgir
    last = [ln for ln in t.splitlines() if "tt.reshape" in ln][-1]
    assert "-> tensor<128x8xi32, #linear" in last or "-> tensor<128x8xf32, #linear" in last, last
    assert "ttg.convert_layout" in t.split(last)[1]


def _sass(**kw):
    from gluon.backend.machine_code import sass_instructions
    kw = dict(dict(DIM=1, TOPK=False, DESC=False, IDX=True), **kw)
    F = PointerArg(kw.pop("dtype", gl.float32))
    ck = sort_kernel.compile(F, F, PointerArg(gl.int32), arch="sm90", num_warps=4, **kw)
    return ck, sass_instructions(ck.sass())


def test_a_row_in_one_thread_sorts_in_registers():
    """Each thread holds a whole row of 16: every column pairs registers of one thread, so the compiled sort
    has no shuffle, no shared memory and no spill, only compares and selects."""
    ck, ops = _sass(M=128, N=16, K=16, ROW=16)
    assert ck.spills == 0
    assert not any(op.startswith(("SHFL", "LDS", "STS", "BAR")) for op in ops), sorted(ops.items())
    assert ops.get("SEL", 0) >= 4 * _columns(16, 16) and ops.get("FSETP", 0) > 0


def test_a_row_across_lanes_pairs_them_with_butterfly_shuffles():
    """4 elements of a row per thread, 16 lanes a row: the columns on the 4 lane bits are warp shuffles
    (SHFL.BFLY), none through shared memory. A top-8 of those rows too; its 8-wide result ends with its rows
    across lanes (each halving of a lane bit moves a register bit there), so only the store's conversion to
    its blocked addresses goes through shared memory."""
    ck, ops = _sass(M=32, N=64, K=64, ROW=4)
    assert ck.spills == 0
    assert ops.get("SHFL.BFLY", 0) >= 2 * _columns(64, 64), sorted(ops.items())     # values and positions
    assert not any(op.startswith(("LDS", "STS", "BAR")) for op in ops), sorted(ops.items())
    ck, ops = _sass(M=32, N=64, K=8, TOPK=True, ROW=4, IDX=False)
    assert ck.spills == 0 and ops.get("SHFL.BFLY", 0) >= 16, sorted(ops.items())
    assert ops.get("BAR.SYNC", 0) <= 1, sorted(ops.items())


def test_compiles_for_cdna3_with_64_lane_warps():
    F = PointerArg(gl.float32)
    ck = sort_kernel.compile(F, F, PointerArg(gl.int32), M=32, N=64, DIM=1, K=8, TOPK=True, DESC=False, IDX=True,
                             arch="cdna3", num_warps=4)
    assert "amdgcn" in ck.asm and "tt.split" in ck.lowered.ttgir


def test_integer_sorts_compare_as_their_signedness():
    t = lower(run_passes(_trace(M=16, N=16, K=16, dtype=gl.uint32))).ttgir
    assert "arith.cmpi ult" in t and "arith.cmpi slt" in t          # the values unsigned, the positions signed
    t = lower(run_passes(_trace(M=16, N=16, K=16, dtype=gl.int8, IDX=False))).ttgir
    assert "arith.cmpi slt" in t and "arith.cmpi ult" not in t


# ---------------------------------------------------------------------------------- errors (CPU)


@gluon.jit
def bad_kernel(x_ptr, CASE: gl.constexpr):
    x = gl.load(x_ptr + gl.arange(0, 16)[:, None] * 32 + gl.arange(0, 32)[None, :])
    if CASE == "k not pow2":
        gl.topk(x, 3)
    if CASE == "k too big":
        gl.topk(x, 64)
    if CASE == "k zero":
        gl.topk(x, 0, dim=0)
    if CASE == "k tensor":
        gl.topk(x, gl.program_id(0))
    if CASE == "dim":
        gl.sort(x, dim=2)
    if CASE == "dim neg":
        gl.topk(x, 2, dim=-3)
    if CASE == "axis not pow2":
        gl.sort(gl.full([6, 8], 1.0, gl.float32), 0)
    if CASE == "scalar":
        gl.sort(gl.program_id(0))
    if CASE == "tuple":
        gl.sort((x, x))
    if CASE == "fp8":
        gl.topk(x.to(gl.float8e5m2), 4)
    if CASE == "descending":
        gl.sort(x, descending=1)
    if CASE == "return_indices":
        gl.topk(x, 4, return_indices="yes")


@pytest.mark.parametrize("case,match", [
    ("k not pow2", r"topk: k=3 must be a power of two .* take k=4 and use its first 3"),
    ("k too big", r"topk: k=64 is outside 1\.\.32 \(x has 32 elements along dim 1\)"),
    ("k zero", r"topk: k=0 is outside 1\.\.16"),
    ("k tensor", r"topk: k must be a Python int"),
    ("dim", r"sort: dim=2 is out of range for x of shape \(16, 32\); it must be in -2\.\.1"),
    ("dim neg", r"topk: dim=-3 is out of range"),
    ("axis not pow2", r"sort: x's dim 0 has 6 elements; a bitonic sort needs a power of two \(pad the tile to 8"),
    ("scalar", r"sort: x must be a register tile, got a scalar i32"),
    ("tuple", r"sort: x must be one register tile, got a tuple of 2"),
    ("fp8", r"topk: x is f8e5m2, and Triton 3\.6 does not compile comparisons of fp8 tiles; .*x\.to\(gl\.float16\)"),
    ("descending", r"sort: descending must be True or False \(a Python bool\), got 1"),
    ("return_indices", r"topk: return_indices must be True or False"),
])
def test_errors_at_the_users_line(case, match):
    with pytest.raises(GluonError, match=match) as e:
        bad_kernel.trace(PointerArg(gl.float32), CASE=case, arch="sm90", num_warps=4)
    assert "test_sorting.py" in str(e.value)


# ---------------------------------------------------------------------------------- GPU


def _gpu_launch(x, v, i, **kw):
    sort_kernel[(1,)](x, v, i, num_warps=4, **kw)
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i32", "i64", "u8"])
@pytest.mark.parametrize("idx", [False, True], ids=["values", "indices"])
def test_gpu_matches_torch(dtype, idx):
    for j, (shape, dim, k, desc) in enumerate(CASES):
        x = _inputs(shape, TORCH[dtype], device="cuda", seed=j)
        topk = k is not None
        k = shape[dim] if k is None else k
        v, i = _run(x, dim, k, topk, desc, idx, _gpu_launch)
        _check(x, v, i, dim, k, topk, desc)


@pytest.mark.gpu
@pytest.mark.parametrize("row,n,k", [(16, 16, 16), (8, 64, 8), (4, 64, 64), (4, 128, 4)])
def test_gpu_row_layouts_match_torch(row, n, k):
    """Rows in one thread, and across 4 to 64 lanes (shuffle columns), sorted and top-k'd on the GPU."""
    x = _inputs((128, n), torch.float32, device="cuda", seed=n + k)
    v = torch.full((128, k), NAN, device="cuda")
    i = torch.full((128, k), -1, dtype=torch.int32, device="cuda")
    sort_kernel[(1,)](x, v, i, M=128, N=n, DIM=1, K=k, TOPK=k < n, DESC=False, IDX=True, ROW=row, num_warps=4)
    torch.cuda.synchronize()
    _check(x, v, i, 1, k, k < n, False)
