"""The CPU interpreter of the IR (gluon/interpret, docs/INTERPRETER.md): the examples without wgmma/TMA
against torch at small sizes (not multiples of the block, outputs poisoned first), every op family it
runs, the errors it gives (an op it does not run yet, inline asm, an out-of-bounds access: each at the
user's line), and GLUON_INTERPRET=1 running an ordinary `kernel[grid](...)` launch. CPU only."""
import inspect
import os
import sys

import numpy as np
import pytest
import torch

import gluon
import gluon.language as gl
from gluon import GluonError, ir
from gluon.interpret import NOT_YET, RULES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import copy_kernel as ck  # noqa: E402
import cumsum as cs  # noqa: E402
import elementwise_kernel as ew  # noqa: E402
import fp8_quantize as fq  # noqa: E402
import rmsnorm_kernel as rn  # noqa: E402
import softmax_kernel as sm  # noqa: E402

NAN = float("nan")


def _line_of(fn, text: str) -> int:
    """The file line of the first line of `fn`'s source containing `text`."""
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(f"{text!r} not in {fn.__name__}")


def _poisoned(like, dtype=None):
    return torch.full(like.shape, NAN, dtype=dtype or like.dtype)


# ------------------------------------------------------------------------------ the examples


@pytest.mark.parametrize("form", ["simt", "explicit", "persistent"])
def test_copy_kernel_forms(form):
    n = 3001                                   # not a multiple of the block
    src = torch.randn(n)
    dst = _poisoned(src)
    if form == "simt":
        ck.copy_kernel.interpret((3,), dst, src, n, block=(1024,), XBLOCK=1024)
    elif form == "explicit":
        ck.copy_kernel_explicit.interpret((3,), dst, src, n, XBLOCK=1024, VEC=4, NUM_WARPS=4)
    else:                                      # 2 programs walking 6 blocks of 512
        ck.copy_kernel_persistent.interpret((2,), dst, src, n, block=(512,), XBLOCK=512)
    assert torch.equal(dst, src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,n", [(5, 100), (3, 37)])
def test_softmax_example(interpret_env, dtype, m, n):
    x = torch.randn(m, n, dtype=dtype) * 4
    out = _poisoned(x)
    sm.softmax(x, out)
    ref = torch.softmax(x.float(), -1)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


def test_softmax_looped(interpret_env):
    x = torch.randn(3, 300)
    out = _poisoned(x)
    sm.softmax(x, out, BLOCK_N=128, LOOPED=True)
    torch.testing.assert_close(out, torch.softmax(x, -1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n", [(6, 96), (3, 33)])
def test_rmsnorm_example(interpret_env, dtype, m, n):
    x = torch.randn(m, n, dtype=dtype)
    w = torch.rand(n, dtype=dtype) + 0.5
    out = _poisoned(x)
    rn.rms_norm(x, w, 1e-6, out)
    tol = 1e-5 if dtype == torch.float32 else 1.6e-2
    torch.testing.assert_close(out.float(), rn.reference(x, w, 1e-6), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_swiglu_example(interpret_env, dtype):
    n = 5000                                   # the last block partial (masked path), the others full
    a, b = torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)
    out = _poisoned(a)
    ew.swiglu(a, b, out, BLOCK=1024)
    ref = (torch.nn.functional.silu(a.float()) * b.float())
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
@pytest.mark.parametrize("looped", [False, True])
def test_cumsum_example(interpret_env, dtype, looped):
    m, n = 5, 300
    x = torch.randint(-1000, 1000, (m, n), dtype=dtype) if dtype == torch.int32 else torch.randn(m, n)
    out = torch.full_like(x, -7) if dtype == torch.int32 else _poisoned(x)
    cs.cumsum(x, out, **({"BLOCK_N": 128, "ROWS_PER_PROGRAM": 1, "NUM_WARPS": 1, "LOOPED": True} if looped else {}))
    ref = torch.cumsum(x.double(), -1)
    if dtype == torch.int32:
        assert torch.equal(out, ref.to(torch.int32))
    else:
        torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp8_quantize_example(interpret_env, dtype):
    x = torch.randn(7, 200, dtype=dtype) * 3
    x[2] = 0                                   # an all-zero row: the smallest scale, zeros
    q = torch.zeros(7, 200, dtype=torch.float8_e4m3fn)
    scales = torch.full((7,), NAN)
    fq.quantize(x, q, scales)
    assert fq.check(x, q, scales) is None


# ------------------------------------------------------------------------------ op families


@gluon.jit
def _arith_kernel(out_f, out_i, out_h, out_b, x_ptr, i_ptr, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK)
    m = offs < n
    x = gl.load(x_ptr + offs, mask=m, other=1.0)
    i = gl.load(i_ptr + offs, mask=m, other=1)
    y = gl.exp2(x) - gl.log(gl.abs(x) + 1.0) + gl.sqrt(gl.abs(x)) * gl.rsqrt(gl.abs(x) + 2.0)
    y = gl.maximum(y, gl.sin(x)) + gl.minimum(gl.cos(x), x) + gl.floor(x) - gl.ceil(x * 0.5)
    y = gl.fma(x, x, y) + gl.where(x > 0.0, -x, x * 2.0)
    gl.store(out_f + offs, y, mask=m)
    k = (i * 7 + 3) // 4 + (i % 5) - (i << 2) + (i >> 1) + (i & 12) + (i | 3) + (i ^ 6) - i * 1000000
    gl.store(out_i + offs, k, mask=m)
    gl.store(out_h + offs, x.to(gl.float16) * 3.0, mask=m)
    gl.store(out_b + offs, x.to(gl.bfloat16) * 3.0, mask=m)


def test_elementwise_math_ints_and_rounding():
    n, B = 300, 128
    x = torch.randn(n) * 3
    i = torch.randint(-50000, 50000, (n,), dtype=torch.int32)
    out_f, out_i = _poisoned(x), torch.zeros(n, dtype=torch.int32)
    out_h, out_b = torch.zeros(n, dtype=torch.float16), torch.zeros(n, dtype=torch.bfloat16)
    _arith_kernel.interpret((3,), out_f, out_i, out_h, out_b, x, i, n, BLOCK=B)
    xd = x.double()
    y = torch.exp2(xd) - torch.log(xd.abs() + 1) + xd.abs().sqrt() * torch.rsqrt(xd.abs() + 2)
    y = torch.maximum(y, torch.sin(xd)) + torch.minimum(torch.cos(xd), xd) + torch.floor(xd) - torch.ceil(xd * 0.5)
    y = xd * xd + y + torch.where(xd > 0, -xd, xd * 2)
    torch.testing.assert_close(out_f.double(), y, atol=1e-4, rtol=1e-5)
    il = i.long()
    q = (il * 7 + 3)
    trunc = torch.where((q < 0) & (q % 4 != 0), q // 4 + 1, q // 4)            # C division, toward zero
    k = trunc + torch.fmod(il, 5) - (il << 2) + (il >> 1) + (il & 12) + (il | 3) + (il ^ 6) - il * 1000000
    k = ((k + 2**31) % 2**32 - 2**31).to(torch.int32)                         # int32 wraparound
    assert torch.equal(out_i, k)
    assert torch.equal(out_h, x.to(torch.float16) * 3)                          # f16 rounding per op
    assert torch.equal(out_b, x.to(torch.bfloat16) * 3)                         # bf16 round-to-nearest-even


@gluon.jit
def _shapes_kernel(out_ptr, x_ptr, R: gl.constexpr, C: gl.constexpr):
    rows = gl.expand_dims(gl.arange(0, R), 1)
    cols = gl.expand_dims(gl.arange(0, C), 0)
    x = gl.load(x_ptr + rows * C + cols)                          # [R, C]
    t = gl.trans(x)                                               # [C, R]
    r = gl.reshape(t, [C * R])
    a, b = gl.split(gl.reshape(r, [C * R // 2, 2]))               # even / odd elements
    j = gl.join(b, a)                                             # swapped pairs
    flat = gl.reshape(j, [R * C])
    idx = gl.arange(0, R * C)
    g = gl.gather(flat, (R * C - 1) - idx, 0)                     # reversed
    gl.store(out_ptr + idx, g)


def test_shape_ops():
    R, C = 4, 8
    x = torch.arange(R * C, dtype=torch.float32)
    out = _poisoned(x)
    _shapes_kernel.interpret((1,), out, x, R=R, C=C)
    ref = x.view(R, C).t().reshape(-1, 2).flip(1).reshape(-1).flip(0)
    assert torch.equal(out, ref)


def _add(a, b):
    return a + b


def _max_and_index(v1, i1, v2, i2):
    take = (v1 > v2) | ((v1 == v2) & (i1 < i2))
    return gl.where(take, v1, v2), gl.where(take, i1, i2)


@gluon.jit
def _reductions_kernel(sums, maxs, mins, amax, scan, rscan, hist, x_ptr, h_ptr, N: gl.constexpr):
    row = gl.program_id(0)
    cols = gl.arange(0, N)
    x = gl.load(x_ptr + row * N + cols)
    gl.store(sums + row, gl.sum(x, 0))
    gl.store(maxs + row, gl.max(x, 0))
    gl.store(mins + row, gl.min(x, 0))
    _, i = gl.reduce((x, cols), 0, _max_and_index)
    gl.store(amax + row, i)
    gl.store(scan + row * N + cols, gl.associative_scan(x, 0, _add))
    gl.store(rscan + row * N + cols, gl.cumsum(x, 0, reverse=True))
    h = gl.load(h_ptr + row * N + cols)
    gl.store(hist + row * 16 + gl.arange(0, 16), gl.histogram(h, 16, mask=h < 12))


def test_reductions_scans_histogram():
    M, N = 3, 64
    x = torch.randint(-100, 100, (M, N)).float()
    h = torch.randint(0, 16, (M, N), dtype=torch.int32)
    outs = [torch.full((M,), NAN) for _ in range(3)] + [torch.full((M,), -1, dtype=torch.int32)]
    scan, rscan = torch.full((M, N), NAN), torch.full((M, N), NAN)
    hist = torch.full((M, 16), -1, dtype=torch.int32)
    _reductions_kernel.interpret((M,), *outs, scan, rscan, hist, x, h, N=N)
    assert torch.equal(outs[0], x.sum(1))
    assert torch.equal(outs[1], x.max(1).values)
    assert torch.equal(outs[2], x.min(1).values)
    first_max = torch.tensor([int((r == r.max()).nonzero()[0]) for r in x], dtype=torch.int32)
    assert torch.equal(outs[3], first_max)
    assert torch.equal(scan, x.cumsum(1))
    assert torch.equal(rscan, x.flip(1).cumsum(1).flip(1))
    ref = torch.stack([torch.bincount(r[r < 12].long(), minlength=16) for r in h]).to(torch.int32)
    assert torch.equal(hist, ref)


@gluon.jit
def _atomics_kernel(counter, hist, mx, cas, x_ptr, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK)
    m = offs < n
    x = gl.load(x_ptr + offs, mask=m, other=0)
    gl.atomic_add(counter + offs * 0, 1, mask=m)                  # one address from every element
    gl.atomic_add(hist + (x & 7), 1, mask=m)                      # repeated addresses
    gl.atomic_max(mx + offs * 0, x, mask=m)
    gl.atomic_cas(cas + gl.program_id(0), 0, gl.program_id(0) + 10)


def test_atomics():
    n, B = 1000, 256
    x = torch.randint(0, 1 << 20, (n,), dtype=torch.int32)
    counter, hist = torch.zeros(1, dtype=torch.int32), torch.zeros(8, dtype=torch.int32)
    mx, cas = torch.full((1,), -1, dtype=torch.int32), torch.tensor([0, 5, 0, 0], dtype=torch.int32)
    _atomics_kernel.interpret((4,), counter, hist, mx, cas, x, n, BLOCK=B)
    assert counter.item() == n
    assert torch.equal(hist, torch.bincount((x & 7).long(), minlength=8).to(torch.int32))
    assert mx.item() == x.max().item()
    assert cas.tolist() == [10, 5, 12, 13]


@gluon.jit
def _control_kernel(out_ptr, x_ptr, n, flag, BLOCK: gl.constexpr):
    pid = gl.program_id(0)
    idx = gl.thread_id(0)
    acc = gl.zeros([BLOCK], gl.float32)
    for k in range(0, n, 2):                                      # loop-carried tile
        acc = acc + gl.load(x_ptr + k * BLOCK + idx) * k
    if flag > pid:                                                # a scalar branch
        acc = acc * 2.0
    else:
        acc = acc - 1.0
    if idx % 2 == 0:                                              # a per-thread condition: a masked store
        out_ptr[pid * BLOCK + idx] = acc + gl.num_programs(0)
    elif idx % 4 == 1:                                            # the else: masked by not(cond) and its own
        out_ptr[pid * BLOCK + idx] = -acc


def test_loops_branches_and_simt_threads():
    B, n, P = 16, 5, 3
    x = torch.randn(n * B)
    out = _poisoned(torch.empty(P * B))
    _control_kernel.interpret((P,), out, x, n, 1, block=(B,), BLOCK=B)
    acc = sum(x[k * B:(k + 1) * B] * k for k in range(0, n, 2))
    for p in range(P):
        want = (acc * 2 if 1 > p else acc - 1) + P
        got = out[p * B:(p + 1) * B]
        torch.testing.assert_close(got[0::2], want[0::2])
        base = acc * 2 if 1 > p else acc - 1
        torch.testing.assert_close(got[1::4], -base[1::4])
        assert torch.isnan(got[3::4]).all()                       # threads 3, 7, ... stored nothing


def test_program_subset_and_numpy_arrays():
    n = 4096
    src = np.arange(n, dtype=np.float32)
    dst = np.full(n, np.nan, np.float32)
    ck.copy_kernel.interpret((4,), dst, src, n, block=(1024,), XBLOCK=1024, programs=[1, 3])
    assert np.isnan(dst[:1024]).all() and np.isnan(dst[2048:3072]).all()
    assert np.array_equal(dst[1024:2048], src[1024:2048]) and np.array_equal(dst[3072:], src[3072:])


@gluon.kernel(arch="sm90", num_warps=4)
def _explicit_sized(X, Y, BLOCK: gl.constexpr):
    m, n = X.shape[0], X.shape[1]                                 # sizes read off the tensor at launch
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK)
    r, c = offs // n, offs % n
    ok = offs < m * n
    gl.store(Y + c * m + r, gl.load(X + offs, mask=ok), mask=ok)  # the transpose, row-major


def test_explicit_form_with_sizes_from_the_tensors():
    x = torch.randn(5, 7)
    y = torch.full((7, 5), NAN)
    _explicit_sized.interpret((2,), x, y, BLOCK=32)
    assert torch.equal(y, x.t())


@gluon.jit
def _cast_kernel(i_out, u_out, h_rtz, b_rtz, f8_out, x_ptr, n, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK)
    m = offs < n
    x = gl.load(x_ptr + offs, mask=m, other=0.0)
    gl.store(i_out + offs, x.to(gl.int32) + (x > 0.0).to(gl.int32) * 1000, mask=m)  # fptosi truncates
    gl.store(u_out + offs, (x.to(gl.int32).to(gl.int8)).to(gl.float32), mask=m)   # trunci wraps, sitofp
    gl.store(h_rtz + offs, gl.cast(x, gl.float16, rounding="rtz"), mask=m)
    gl.store(b_rtz + offs, gl.cast(x, gl.bfloat16, rounding="rtz"), mask=m)
    gl.store(f8_out + offs, x.to(gl.float8e5m2), mask=m)


def test_casts_and_rounding_modes():
    n = 100
    x = torch.randn(n) * 300
    outs = (torch.zeros(n, dtype=torch.int32), torch.zeros(n), torch.zeros(n, dtype=torch.float16),
            torch.zeros(n, dtype=torch.bfloat16), torch.zeros(n, dtype=torch.float8_e5m2))
    _cast_kernel.interpret((1,), *outs, x, n, BLOCK=128)
    assert torch.equal(outs[0], x.to(torch.int32) + (x > 0).int() * 1000)
    assert torch.equal(outs[1], x.to(torch.int32).to(torch.int8).float())
    h = outs[2].numpy()                                           # f16 rtz: the largest magnitude not above |x|
    away = np.nextafter(h, np.where(x.numpy() < 0, -np.inf, np.inf).astype(np.float16))
    assert (np.abs(h) <= np.abs(x.numpy())).all() and (np.abs(away) > np.abs(x.numpy())).all()
    assert not torch.equal(outs[2], x.to(torch.float16))         # (some elements round differently from rtne)
    assert torch.equal(outs[3].view(torch.int16), (x.view(torch.int32) >> 16).to(torch.int16))  # bf16 rtz: truncate
    assert torch.equal(outs[4].view(torch.uint8), x.to(torch.float8_e5m2).view(torch.uint8))


def test_int_to_float_rounds_once():
    from gluon.interpret.ops import convert
    big = np.array([2**40 + 2**16 + 1, -(2**53) - 3], np.int64)
    assert np.array_equal(convert(big, gl.int64, gl.float32), torch.from_numpy(big).float().numpy())
    assert convert(np.array([True, False]), gl.DType.i1, gl.float32).tolist() \
        == [1.0, 0.0]
    assert convert(np.array([-1], np.int32), gl.DType.i32, gl.DType.u8).tolist() == [255]     # trunci


def test_shifts_by_the_width_clamp_as_ptx():
    from gluon.interpret.ops import _shift
    a, b = np.array([-8, 8, 1], np.int32), np.array([1, 33, -1], np.int32)
    assert _shift(a, b, True).tolist() == [-16, 0, 0]
    assert _shift(a, b, False).tolist() == [-4, 0, 0]                     # arithmetic: the sign fill
    assert _shift(np.array([-8], np.int32), np.array([40], np.int32), False).tolist() == [-1]
    assert _shift(a.view(np.uint32), b.view(np.uint32), False).tolist() == [2**31 - 4, 0, 0]


def test_fp8_and_bf16_codecs_match_torch():
    from gluon.interpret.values import bf16_bits, fp8_codes, fp8_value
    codes = np.arange(256, dtype=np.uint8)
    for dt, tdt, big in ((gl.float8e4m3, torch.float8_e4m3fn, 448.0), (gl.float8e5m2, torch.float8_e5m2, 57344.0)):
        ours, theirs = fp8_value(codes, dt), torch.from_numpy(codes).view(tdt).float().numpy()
        assert np.array_equal(ours, theirs, equal_nan=True)
        x = (torch.randn(20000) * big / 8).clamp(-big, big)
        assert np.array_equal(fp8_codes(x.numpy(), dt), x.to(tdt).view(torch.uint8).numpy())
        assert fp8_codes(np.array([1e9, -np.inf]), dt).tolist() == fp8_codes(np.array([big, -big]), dt).tolist()
    x = torch.randn(20000) * 1e4
    assert np.array_equal(bf16_bits(x.numpy()).view(np.int16), x.to(torch.bfloat16).view(torch.int16).numpy())


@gluon.jit
def _more_atomics(f_acc, bits, xchg, old_out, x_ptr, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK)
    x = gl.load(x_ptr + offs)
    gl.atomic_add(f_acc + offs % 4, x)                            # float adds, repeated addresses
    gl.atomic_or(bits + offs * 0, (offs * 0 + 1) << (offs % 31))
    old = gl.atomic_xchg(xchg + offs, x * 2.0)
    gl.store(old_out + offs, old)


def test_float_bitwise_and_exchange_atomics():
    B = 64
    x = torch.randn(B)
    f_acc, bits = torch.zeros(4), torch.zeros(1, dtype=torch.int32)
    xchg, old = torch.arange(B, dtype=torch.float32), torch.full((B,), NAN)
    _more_atomics.interpret((1,), f_acc, bits, xchg, old, x, BLOCK=B)
    want = torch.zeros(4)
    for i in range(B):                                            # in element order, rounded to f32 each add
        want[i % 4] += x[i]
    assert torch.equal(f_acc, want)
    assert bits.item() == (2**31 - 1)
    assert torch.equal(old, torch.arange(B, dtype=torch.float32)) and torch.equal(xchg, x * 2)


@gluon.jit
def _grid2d_kernel(out_ptr, total_ptr, M, N, BM: gl.constexpr, BN: gl.constexpr):
    r = gl.program_id(0) * BM + gl.thread_id(0)                   # a 2-D block: [BM, BN] logical threads
    c = gl.program_id(1) * BN + gl.thread_id(1)
    if (r < M) & (c < N):
        out_ptr[r * N + c] = (r * 1000 + c).to(gl.float32)
    first = gl.program_id(0) + gl.program_id(1) == 0
    if first:                                                     # a scalar load and store
        total_ptr[0] = total_ptr[0] + gl.num_programs(0) * 10 + gl.num_programs(1)


def test_2d_grid_2d_block_scalar_memory_and_a_subset():
    M, N = 10, 13
    out = torch.full((M * N,), NAN)
    total = torch.tensor([5], dtype=torch.int32)
    _grid2d_kernel.interpret((3, 2), out, total, M, N, block=(4, 8), BM=4, BN=8)
    r, c = torch.meshgrid(torch.arange(M), torch.arange(N), indexing="ij")
    assert torch.equal(out, (r * 1000 + c).float().reshape(-1))
    assert total.item() == 5 + 32
    out2 = torch.full((M * N,), NAN)
    _grid2d_kernel.interpret((3, 2), out2, total, M, N, block=(4, 8), BM=4, BN=8, programs=[(2, 1)])
    got = out2.view(M, N)
    assert torch.equal(got[8:, 8:], (r * 1000 + c).float()[8:, 8:]) and int((~got.isnan()).sum()) == 2 * 5
    assert total.item() == 37                                     # program (0, 0) did not run


def test_launch_errors_are_gluon_errors():
    src = torch.zeros(10)
    with pytest.raises(GluonError, match="takes 3 runtime arguments"):
        ck.copy_kernel.interpret((1,), src, 10, block=(16,), XBLOCK=16)
    with pytest.raises(GluonError, match="outside the grid"):
        ck.copy_kernel.interpret((1,), src, src, 10, block=(16,), XBLOCK=16, programs=[3])


def test_every_ir_op_kind_is_interpreted_or_refused():
    assert set(RULES) | NOT_YET == set(ir.OPS)
    assert not set(RULES) & NOT_YET


# ------------------------------------------------------------------------------ errors at the user's line


@gluon.jit
def _oob_kernel(dst_ptr, src_ptr, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK)
    x = gl.load(src_ptr + offs)                                   # no mask: reads past n
    gl.store(dst_ptr + offs, x, mask=offs < n)


def test_out_of_bounds_load_at_its_line():
    src, dst = torch.randn(100), torch.zeros(100)
    with pytest.raises(GluonError) as e:
        _oob_kernel.interpret((2,), dst, src, 100, BLOCK=64)
    msg = str(e.value)
    assert f"test_interpret.py:{_line_of(_oob_kernel.fn, 'x = gl.load')}" in msg
    assert "out-of-bounds load" in msg and "in program (1,): 'src_ptr' has 100 elements" in msg
    assert "element 100 (element (36,) of the access)" in msg


@gluon.jit
def _window_kernel(dst_ptr, src_ptr, reach, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK)
    gl.store(dst_ptr + offs, gl.load(src_ptr + offs, mask=offs < reach), mask=offs < reach)


def test_a_read_may_finish_the_last_16_byte_segment_of_its_allocation():
    """98 fp32 end 8 bytes into a 16-byte segment: a 16-byte vector load of elements 96..99 cannot fault on the
    GPU (a row loaded through 16-byte windows does that), so the interpreter reads 98 and 99 as NaN; element
    100 is past the segment and still an error."""
    src = torch.randn(98)
    assert src.data_ptr() % 16 == 0
    dst = torch.zeros(128)
    _window_kernel.interpret((1,), dst, src, 100, BLOCK=128)
    assert torch.equal(dst[:98], src) and dst[98:100].isnan().all() and not dst[100:].any()
    with pytest.raises(GluonError, match="'src_ptr' has 98 elements of f32, this accesses element 100"):
        _window_kernel.interpret((1,), dst, src, 101, BLOCK=128)


@gluon.kernel(arch="sm90", num_warps=4)
def _smem_kernel(x_ptr: gl.pointer(gl.float32)):
    offs = gl.arange(0, 128)
    s = gl.smem(gl.float32, gl.Layout.shared(), shape=(128,))
    s.store(gl.load(x_ptr + offs))
    gl.store(x_ptr + offs, s.load() + 1.0)


def test_unsupported_op_is_one_error_at_its_line(monkeypatch):
    from gluon.interpret import run
    x = torch.arange(128, dtype=torch.float32)
    _smem_kernel.interpret((1,), x)                               # shared memory runs
    assert torch.equal(x, torch.arange(128, dtype=torch.float32) + 1)
    monkeypatch.delitem(RULES, "smem_alloc")                      # a kind not run yet: refused at its line
    monkeypatch.setattr(run, "NOT_YET", NOT_YET | {"smem_alloc"})
    x = torch.zeros(128)
    with pytest.raises(GluonError) as e:
        _smem_kernel.interpret((1,), x)
    msg = str(e.value)
    assert "the interpreter does not run smem_alloc yet" in msg
    assert f"test_interpret.py:{_line_of(_smem_kernel.fn, 'gl.smem(')}" in msg
    assert torch.equal(x, torch.zeros(128))                       # refused before anything ran


def test_the_shipped_tma_wgmma_gemm_runs_or_is_refused_at_its_first_unsupported_op(interpret_env):
    from gluon.interpret.run import trace_for
    from gluon.kernels import gemm_tile_sm90 as g
    torch.manual_seed(0)
    a, b, c = torch.randn(256, 128).half(), torch.randn(128, 256).half(), torch.zeros(256, 256).half()
    module, _ = trace_for(g.gemm_tile_sm90, (a, b, c, 128), dict(g.DEFAULT_CONFIG), num_warps=4)
    missing = next((op for op in module.kernel.walk() if op.kind not in RULES), None)
    if missing is None:
        g.launch(a, b, c)
        torch.testing.assert_close(c.float(), (a.float() @ b.float()).half().float(), rtol=1e-2, atol=1e-2)
        return
    with pytest.raises(GluonError) as e:
        g.launch(a, b, c)
    msg = str(e.value)
    assert f"the interpreter does not run {missing.kind} yet" in msg
    assert f"gemm_tile_sm90.py:{missing.loc.line}" in msg


@gluon.jit
def _asm_kernel(out_ptr, x_ptr, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK)
    x = gl.load(x_ptr + offs)
    y = gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], gl.float32, True, 1)
    gl.store(out_ptr + offs, y)


def test_inline_asm_is_refused_clearly():
    with pytest.raises(GluonError) as e:
        _asm_kernel.interpret((1,), torch.zeros(32), torch.zeros(32), BLOCK=32)
    msg = str(e.value)
    assert "cannot run inline assembly" in msg
    assert f"test_interpret.py:{_line_of(_asm_kernel.fn, 'inline_asm_elementwise')}" in msg


# ------------------------------------------------------------------------------ GLUON_INTERPRET=1


def test_launches_run_in_the_interpreter_when_enabled(interpret_env, monkeypatch):
    gj = sys.modules["gluon.jit"]
    monkeypatch.setattr(gj, "compile_module", lambda *a, **k: pytest.fail("the interpreted launch compiled the kernel"))
    n = 2500
    src = torch.randn(n)
    dst = _poisoned(src)
    ck.copy_kernel[(gl.cdiv(n, 1024),), (1024,)](dst, src, n, XBLOCK=1024)
    assert torch.equal(dst, src)
    dst2 = _poisoned(src)                                         # a grid function, as the launcher takes it
    ck.copy_kernel_explicit[lambda meta: (gl.cdiv(meta["n_elements"], meta["XBLOCK"]),)](
        dst2, src, n, XBLOCK=512, VEC=4, NUM_WARPS=4)
    assert torch.equal(dst2, src)


_ENV_SCRIPT = """
import sys, torch
sys.modules["torch"].cuda.is_available = lambda: (_ for _ in ()).throw(AssertionError("CUDA touched"))
import gluon, gluon.language as gl
assert gluon.interpret.enabled()

@gluon.jit
def double(dst_ptr, src_ptr, n, XBLOCK: gl.constexpr):
    idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
    if idx < n:
        dst_ptr[idx] = src_ptr[idx] * 2.0

src = torch.arange(1000, dtype=torch.float32)
dst = torch.full_like(src, float("nan"))
double[(4,), (256,)](dst, src, 1000, XBLOCK=256)
assert torch.equal(dst, src * 2), dst
print("ok")
"""


def test_gluon_interpret_env_var_in_a_fresh_process(tmp_path):
    import subprocess
    script = tmp_path / "launch.py"                               # kernels need a source file
    script.write_text(_ENV_SCRIPT)
    env = dict(os.environ, GLUON_INTERPRET="1", PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


# ------------------------------------------------------------------------------ tuples carried through loops


@gl.helper
def _next_pair(x_ptr, offs, i):
    """A helper's returned tuple: the two rows a loop step reads."""
    return gl.load(x_ptr + i * 128 + offs), gl.load(x_ptr + (i + 1) * 128 + offs)


@gluon.jit
def _tuple_carry_kernel(out_ptr, x_ptr, n):
    offs = gl.arange(0, 128)
    state = (gl.zeros((128,), gl.float32), gl.full((128,), -1e30, gl.float32))     # (sum, running max)
    ahead = _next_pair(x_ptr, offs, 0)                                              # prefetched a step early
    for i in range(n):
        cur = ahead
        ahead = _next_pair(x_ptr, offs, i + 1)
        s, m = state
        state = (s + cur[0] * cur[1], gl.maximum(m, cur[0]))
    gl.store(out_ptr + offs, state[0])
    gl.store(out_ptr + 128 + offs, state[1])


def test_a_loop_carries_tuples_of_gpu_values_element_by_element():
    """A name holding a tuple of GPU values (`state = (s, m)`, a helper's returned pair prefetched a step early) is
    carried through a GPU loop element by element: each iteration reads the previous one's values, not the ones from
    before the loop (which it did, silently, when only single values were carried)."""
    n = 5
    x = torch.randn(n + 2, 128)
    out = _poisoned(torch.empty(256))
    _tuple_carry_kernel.interpret((1,), out, x, n)
    want_s = sum(x[i] * x[i + 1] for i in range(n))
    want_m = torch.stack([x[i] for i in range(n)]).amax(dim=0)
    torch.testing.assert_close(out[:128], want_s)
    torch.testing.assert_close(out[128:], want_m)


@gluon.jit
def _tuple_loses_its_shape_kernel(out_ptr, x_ptr, n):
    offs = gl.arange(0, 128)
    pair = (gl.load(x_ptr + offs), gl.load(x_ptr + offs))
    for i in range(n):
        pair = pair[0] + pair[1]
    gl.store(out_ptr + offs, pair)


def test_a_carried_tuple_that_changes_shape_names_itself():
    with pytest.raises(GluonError, match=r"loop-carried 'pair' is a tuple of 2 GPU values before the loop and a "
                                         r"Tensor at the end of its body"):
        _tuple_loses_its_shape_kernel.interpret((1,), torch.empty(128), torch.randn(128), 3)


@gluon.jit
def _nested_tuple_carry_kernel(out_ptr, x_ptr, n):
    offs = gl.arange(0, 128)
    z = gl.zeros((128,), gl.float32)
    state = ((z, z), z)
    for i in range(n):
        (a, b), c = state
        state = ((a + 1.0, b), c)
    gl.store(out_ptr + offs, state[0][0])


def test_a_nested_tuple_carried_through_a_loop_is_one_error_not_a_silent_first_value():
    with pytest.raises(GluonError, match=r"loop-carried 'state' holds GPU values inside a tuple that the loop cannot "
                                         r"carry"):
        _nested_tuple_carry_kernel.interpret((1,), torch.empty(128), torch.randn(128), 3)


@gluon.jit
def _tuple_branch_kernel(out_ptr, x_ptr, c):
    offs = gl.arange(0, 128)
    x = gl.load(x_ptr + offs)
    p = (x, x * 2.0)
    if c > 0:                                   # a GPU scalar condition: the tuple is yielded element by element
        p = (p[0] + 1.0, p[1] + 2.0)
    q = (x, x)
    if x > 0.0:                                 # a per-element condition: merged element by element
        q = (q[0] * 3.0, q[1] - 1.0)
    gl.store(out_ptr + offs, p[0] + q[0])
    gl.store(out_ptr + 128 + offs, p[1] + q[1])


@pytest.mark.parametrize("c", [0, 1])
def test_a_gpu_if_yields_tuples_of_gpu_values_element_by_element(c):
    x = torch.randn(128)
    out = _poisoned(torch.empty(256))
    _tuple_branch_kernel.interpret((1,), out, x, c)
    p0, p1 = (x + 1.0, x * 2.0 + 2.0) if c else (x, x * 2.0)
    q0, q1 = torch.where(x > 0, x * 3.0, x), torch.where(x > 0, x - 1.0, x)
    torch.testing.assert_close(out[:128], p0 + q0)
    torch.testing.assert_close(out[128:], p1 + q1)
