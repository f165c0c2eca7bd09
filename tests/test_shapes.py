"""Register-tile shape ops and fp8 casts (issue 19, "ops"): `gl.reshape`, `gl.permute` / `gl.trans`, `gl.join`,
`gl.split`, `gl.gather`, and `gl.cast` to and from `gl.float8e4m3` / `gl.float8e5m2` with a rounding mode.

CPU: the linear layouts the lowering spells are Triton's own (checked against Triton's conversion), the
TTGIR of each op, compiles for sm90 of the ops alone and combined (Triton's verifier rejects a result layout
other than the one it infers, so a compile checks the layouts), and the errors at the user's line.
GPU (marked): every op against torch on fresh random inputs into NaN- or sentinel-poisoned outputs, and fp8
conversions bit for bit against torch's float8_e4m3fn / float8_e5m2.
"""
import math
import os
import random
import sys

import pytest

import gluon
import gluon.language as gl
from gluon.ir import GluonError
from gluon.jit import lower, run_passes
from gluon.language import PointerArg, ScalarArg
from gluon.types import (BlockedLayout, SliceLayout, linear_join, linear_reshape, linear_split, linear_splittable,
                         linear_trans, to_linear)

F32, I32, F16 = PointerArg(gl.float32), PointerArg(gl.int32), PointerArg(gl.float16)


def _rows(m, n, stride=None):
    """Row-major offsets of an m x n tile."""
    return gl.arange(0, m)[:, None] * (n if stride is None else stride) + gl.arange(0, n)[None, :]


@gluon.jit
def trans_kernel(x_ptr, y_ptr, M: gl.constexpr, N: gl.constexpr, COLMAJOR: gl.constexpr):
    """y (N x M) = x (M x N) transposed; COLMAJOR: x held in an explicit column-major blocked layout."""
    if COLMAJOR:
        lay = gl.Layout.blocked([4, 1], [8, 4], [1, 4], [0, 1])
        offs = gl.arange(0, M, layout=gl.Layout.slice(1, lay))[:, None] * N + \
            gl.arange(0, N, layout=gl.Layout.slice(0, lay))[None, :]
    else:
        offs = _rows(M, N)
    x = gl.load(x_ptr + offs)
    gl.store(y_ptr + _rows(N, M), gl.trans(x))


@gluon.jit
def permute3_kernel(x_ptr, y_ptr, A: gl.constexpr, B: gl.constexpr, C: gl.constexpr):
    """y[c, a, b] = x[a, b, c]."""
    offs = gl.arange(0, A)[:, None, None] * (B * C) + gl.arange(0, B)[None, :, None] * C + \
        gl.arange(0, C)[None, None, :]
    x = gl.load(x_ptr + offs)
    y = gl.permute(x, (2, 0, 1))
    out = gl.arange(0, C)[:, None, None] * (A * B) + gl.arange(0, A)[None, :, None] * B + \
        gl.arange(0, B)[None, None, :]
    gl.store(y_ptr + out, y)


@gluon.jit
def reshape_sum_kernel(x_ptr, y_ptr, M: gl.constexpr, N: gl.constexpr, G: gl.constexpr):
    """y[m, j] = sum(x[m, j*G:(j+1)*G]): reshape (M, N) -> (M, N/G, G), then gl.sum over the last axis."""
    x = gl.load(x_ptr + _rows(M, N))
    s = gl.sum(gl.reshape(x, (M, N // G, G)), axis=2)
    gl.store(y_ptr + _rows(M, N // G), s)


@gluon.jit
def group_scale_kernel(x_ptr, y_ptr, z_ptr):
    """Groups of 4 columns: y[m, j] = sum of group j + j; z = x times its group's sum (reshape, gl.sum,
    expand_dims back into the reshaped layout, broadcast, reshape back)."""
    x = gl.load(x_ptr + _rows(16, 64))
    r = gl.reshape(x, (16, 16, 4))
    s = gl.sum(r, 2)
    gl.store(y_ptr + _rows(16, 16), s + gl.arange(0, 16)[None, :].to(gl.float32))
    gl.store(z_ptr + _rows(16, 64), gl.reshape(gl.expand_dims(s, 2) * r, (16, 64)))


@gluon.jit
def interleave_kernel(a_ptr, b_ptr, y_ptr, M: gl.constexpr, N: gl.constexpr):
    """y[m, 2n] = a[m, n], y[m, 2n + 1] = b[m, n]: join, then reshape to (M, 2N)."""
    a = gl.load(a_ptr + _rows(M, N))
    b = gl.load(b_ptr + _rows(M, N))
    gl.store(y_ptr + _rows(M, 2 * N), gl.reshape(gl.join(a, b), (M, 2 * N)))


@gluon.jit
def deinterleave_kernel(x_ptr, even_ptr, odd_ptr, p_ptr, q_ptr, M: gl.constexpr, N: gl.constexpr):
    """even/odd columns of x (M x 2N) through reshape + split; p, q = split(join(even * 2, odd + 1))."""
    x = gl.load(x_ptr + _rows(M, 2 * N))
    even, odd = gl.split(gl.reshape(x, (M, N, 2)))
    gl.store(even_ptr + _rows(M, N), even)
    gl.store(odd_ptr + _rows(M, N), odd)
    p, q = gl.split(gl.join(even * 2.0, odd + 1.0))
    gl.store(p_ptr + _rows(M, N), p)
    gl.store(q_ptr + _rows(M, N), q)


@gluon.jit
def loop_join_kernel(x_ptr, lo_ptr, hi_ptr, M: gl.constexpr, N: gl.constexpr, STEPS: gl.constexpr):
    """A loop-carried joined tile: acc = sum_i join(x_i, 2 x_i) over STEPS (M x N) slices of x, split at the end."""
    acc = gl.zeros((M, N, 2), gl.float32)
    for i in gl.range(0, STEPS):
        x = gl.load(x_ptr + i * (M * N) + _rows(M, N))
        acc = acc + gl.join(x, x * 2.0)
    lo, hi = gl.split(acc)
    gl.store(lo_ptr + _rows(M, N), lo)
    gl.store(hi_ptr + _rows(M, N), hi)


@gluon.jit
def gather_kernel(src_ptr, idx_ptr, out_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr, AXIS: gl.constexpr):
    """axis 1: out[m, k] = src[m, idx[m, k]] (idx M x K); axis 0: out[k, n] = src[idx[k, n], n] (idx K x N)."""
    src = gl.load(src_ptr + _rows(M, N))
    if AXIS == 1:
        io = _rows(M, K)
    else:
        io = _rows(K, N)
    idx = gl.load(idx_ptr + io)
    gl.store(out_ptr + io, gl.gather(src, idx, AXIS))


@gluon.jit
def wgmma_trans_kernel(x_ptr, y_ptr):
    """A tile in the WGMMA accumulator layout (not blocked: the lowering goes through a blocked one) transposed."""
    x = gl.convert_layout(gl.load(x_ptr + _rows(64, 64)), gl.Layout.wgmma((4, 1), 64))
    gl.store(y_ptr + _rows(64, 64), gl.trans(x) + 0.0)


@gluon.jit
def cast_kernel(x_ptr, q_ptr, n, DT: gl.constexpr, ROUNDING: gl.constexpr, BLOCK: gl.constexpr):
    """q = x cast to DT (rounding ROUNDING, None: the default), stored through a DT pointer."""
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK)
    m = offs < n
    gl.store(q_ptr + offs, gl.cast(gl.load(x_ptr + offs, mask=m), DT, rounding=ROUNDING), mask=m)


@gluon.jit
def upcast_kernel(q_ptr, y_ptr, c_ptr, n, BLOCK: gl.constexpr):
    """y = f32(q) for fp8 q loaded through its pointer; c = q copied (an fp8 load and store)."""
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK)
    m = offs < n
    q = gl.load(q_ptr + offs, mask=m)
    gl.store(y_ptr + offs, q.to(gl.float32), mask=m)
    gl.store(c_ptr + offs, q, mask=m)


def _ttgir(kernel, *args, **kw) -> str:
    return lower(run_passes(kernel.trace(*args, arch="sm90", num_warps=4, **kw))).ttgir


def _compile(kernel, *args, arch="sm90", **kw):
    ck = kernel.compile(*args, arch=arch, num_warps=4, **kw)
    return ck.binary.asm["ptx"] if hasattr(ck.binary, "asm") else ck.ptx


# ---------------------------------------------------------------------------------- layouts (CPU)


def _pow2_split(n: int, k: int, rng) -> tuple:
    out = [1] * k
    for _ in range(n.bit_length() - 1):
        out[rng.randrange(k)] *= 2
    return tuple(out)


def test_linear_layouts_are_tritons():
    """to_linear spells blocked layouts and their slices bit for bit as Triton's toLinearLayout."""
    ir_mod = pytest.importorskip("triton._C.libtriton")
    ttgl = pytest.importorskip("triton.experimental.gluon.language")
    ctx = ir_mod.ir.context()
    ir_mod.ir.load_dialects(ctx)
    b = ir_mod.gluon_ir.GluonOpBuilder(ctx)

    def tritons(lay):
        if isinstance(lay, BlockedLayout):
            return ttgl.BlockedLayout(list(lay.size_per_thread), list(lay.threads_per_warp), list(lay.warps_per_cta),
                                      list(lay.order))
        return ttgl.SliceLayout(lay.dim, tritons(lay.parent))

    rng = random.Random(19)
    for _ in range(300):
        rank = rng.choice([1, 2, 3])
        lay = BlockedLayout(_pow2_split(rng.choice([1, 2, 4, 8]), rank, rng), _pow2_split(32, rank, rng),
                            _pow2_split(rng.choice([1, 2, 4, 8]), rank, rng), tuple(rng.sample(range(rank), rank)))
        shape = tuple(rng.choice([1, 2, 4, 8, 16, 64, 256]) for _ in range(rank))
        if rank > 1 and rng.random() < 0.4:
            d = rng.randrange(rank)
            lay, shape = SliceLayout(d, lay), shape[:d] + shape[d + 1:]
        ll = b.to_linear_layout(tritons(lay)._to_ir(b), list(shape))
        assert to_linear(lay, shape) == {"register": ll.reg_bases, "lane": ll.lane_bases,
                                                "warp": ll.warp_bases}, (lay, shape)


def test_inference_rules():
    """reshape keeps each element's flat index, trans permutes coordinates, join adds register bit 0 and
    split removes it; a split source holding the size-2 dimension in a lane moves it to register bit 0."""
    bases = {"register": [[0, 1], [4, 0]], "lane": [[0, 2], [1, 0], [2, 0]], "warp": [[0, 0]]}
    assert linear_reshape(bases, (8, 4), (32,)) == {"register": [[1], [16]], "lane": [[2], [4], [8]],
                                                    "warp": [[0]]}
    assert linear_trans(bases, (1, 0))["lane"] == [[2, 0], [0, 1], [0, 2]]
    joined = linear_join(bases, 2)
    assert joined["register"] == [[0, 0, 1], [0, 1, 0], [4, 0, 0]] and linear_split(joined) == bases
    in_lane = {"register": [[1, 0]], "lane": [[0, 1]], "warp": []}
    assert linear_splittable(in_lane) == {"register": [[0, 1]], "lane": [[1, 0]], "warp": []}
    assert linear_splittable(joined) == joined


# ---------------------------------------------------------------------------------- TTGIR and compiles (CPU)


def test_ttgir_uses_tritons_ops():
    t = _ttgir(trans_kernel, F32, F32, M=32, N=64, COLMAJOR=False)
    assert "tt.trans" in t and "{order = array<i32: 1, 0>}" in t and "-> tensor<64x32xf32" in t
    t = _ttgir(permute3_kernel, F32, F32, A=4, B=8, C=16)
    assert "{order = array<i32: 2, 0, 1>}" in t and "-> tensor<16x4x8xf32" in t
    t = _ttgir(reshape_sum_kernel, F32, F32, M=32, N=64, G=4)
    assert "tt.reshape" in t and "-> tensor<32x16x4xf32" in t and '"tt.reduce"' in t
    reshaped = next(ln for ln in t.splitlines() if "tt.reshape" in ln).split(" = ")[0].strip()
    assert f'"tt.reduce"({reshaped})' in t            # reduced in the reshape's own layout, not converted first
    t = _ttgir(interleave_kernel, F32, F32, F32, M=16, N=32)
    lines = t.splitlines()
    join = next(ln for ln in lines if "tt.join" in ln)
    # the join's result is in Triton's inferred layout (the new dimension in register bit 0), and the reshape
    # takes it as it is, no conversion in between
    alias = join.split("tensor<16x32x2xf32, ")[1].rstrip(">")
    assert any(ln.startswith(f"{alias} = #ttg.linear<{{register = [[0, 0, 1],") for ln in lines), alias
    reshape = next(ln for ln in lines if "tt.reshape" in ln)
    assert reshape.split("tt.reshape ")[1].split(" ")[0] == join.split(" = ")[0].strip()
    assert "convert_layout" not in t.split(join)[1].split(reshape)[0]
    t = _ttgir(deinterleave_kernel, F32, F32, F32, F32, F32, M=16, N=32)
    assert t.count("tt.split") == 2 and t.count("tt.join") == 1
    t = _ttgir(loop_join_kernel, F32, F32, F32, M=32, N=32, STEPS=4)
    carried = next(ln for ln in t.splitlines() if "scf.for" in ln)
    assert "-> (tensor<32x32x2xf32, #linear" in carried           # the loop carries the join's inferred layout
    t = _ttgir(gather_kernel, F32, I32, F32, M=32, N=64, K=16, AXIS=1)
    g = next(ln for ln in t.splitlines() if "tt.gather" in ln)
    assert "{axis = 1 : i32}" in g and "tensor<32x64xf32" in g and "-> tensor<32x16xf32" in g


@pytest.mark.parametrize("kernel,args,kw", [
    (trans_kernel, (F32, F32), dict(M=32, N=64, COLMAJOR=False)),
    (trans_kernel, (F16, F16), dict(M=64, N=128, COLMAJOR=True)),
    (permute3_kernel, (F32, F32), dict(A=4, B=8, C=16)),
    (reshape_sum_kernel, (F32, F32), dict(M=32, N=64, G=4)),
    (reshape_sum_kernel, (F16, F16), dict(M=16, N=256, G=32)),
    (interleave_kernel, (F32, F32, F32), dict(M=16, N=32)),
    (deinterleave_kernel, (F32,) * 5, dict(M=16, N=32)),
    (gather_kernel, (F32, I32, F32), dict(M=32, N=64, K=16, AXIS=1)),
    (gather_kernel, (F32, I32, F32), dict(M=32, N=64, K=8, AXIS=0)),
    (wgmma_trans_kernel, (F32, F32), {}),
    (loop_join_kernel, (F32, F32, F32), dict(M=32, N=32, STEPS=4)),
    (group_scale_kernel, (F32, F32, F32), {}),
], ids=["trans", "trans-colmajor-f16", "permute3", "reshape-sum", "reshape-sum-f16", "interleave", "deinterleave",
        "gather1", "gather0", "trans-of-wgmma-layout", "loop-carried-join", "reshape-reduce-broadcast"])
def test_compiles_for_sm90(kernel, args, kw):
    assert ".visible .entry" in _compile(kernel, *args, **kw)


@pytest.mark.parametrize("kernel,args,kw", [
    (interleave_kernel, (F32, F32, F32), dict(M=16, N=32)),
    (deinterleave_kernel, (F32,) * 5, dict(M=16, N=32)),
    (reshape_sum_kernel, (F32, F32), dict(M=32, N=64, G=4)),
    (gather_kernel, (F32, I32, F32), dict(M=32, N=64, K=16, AXIS=1)),
], ids=["interleave", "deinterleave", "reshape-sum", "gather"])
def test_compiles_for_cdna3_with_64_lane_warps(kernel, args, kw):
    ck = kernel.compile(*args, arch="cdna3", num_warps=4, **kw)
    assert "amdgcn" in ck.asm
    if kernel is gather_kernel:
        assert "tt.gather" in ck.lowered.ttgir
        return
    head = next(ln for ln in ck.lowered.ttgir.splitlines() if ln.startswith("#linear = "))
    assert head.split("lane = [")[1].split("], warp")[0].count("[") == 6      # 64 lanes: 6 lane bits


@pytest.mark.parametrize("kernel,args,kw,op", [
    (reshape_sum_kernel, (F32, F32), dict(M=32, N=64, G=4), "tt.reshape"),
    (trans_kernel, (F32, F32), dict(M=32, N=64, COLMAJOR=False), "tt.trans"),
    (deinterleave_kernel, (F32,) * 5, dict(M=16, N=32), "tt.split"),
])
def test_a_result_layout_other_than_tritons_inference_does_not_compile(kernel, args, kw, op):
    """What makes the compiles above a check of the layouts: the same TTGIR with the op's result layout changed
    (its first register and lane bases swapped) is refused by Triton's verifier."""
    import re

    from gluon.backend.compile import compile_ttgir
    from gluon.backend.compile_job import CompileError
    lk = lower(run_passes(kernel.trace(*args, arch="sm90", num_warps=4, **kw)))
    lines = lk.ttgir.splitlines()
    line = next(ln for ln in lines if op in ln)
    alias = re.findall(r"#linear\d*", line.split("->")[1])[0]
    head = next(ln for ln in lines if ln.startswith(alias + " = "))
    m = re.match(r"(.*register = \[)(\[[\d, ]+\])(.*lane = \[)(\[[\d, ]+\])(.*)", head)
    swapped = m.group(1) + m.group(4) + m.group(3) + m.group(2) + m.group(5)
    with pytest.raises(CompileError, match="inferred type|Expected result encoding"):
        compile_ttgir(lk.ttgir.replace(head, swapped), lk.abi.target, abi=lk.abi)


def test_fp8_casts_ttgir_and_ptx():
    f8e4, f8e5 = PointerArg(gl.float8e4m3), PointerArg(gl.float8e5m2)
    n = ScalarArg(gl.int32)
    t = _ttgir(cast_kernel, F32, f8e4, n, DT=gl.float8e4m3, ROUNDING="rtne", BLOCK=512)
    assert "tt.fp_to_fp %" in t and "rounding = rtne" in t and "xf8E4M3FN" in t
    assert "cvt.rn.satfinite.e4m3x2.f32" in _compile(cast_kernel, F32, f8e4, n, DT=gl.float8e4m3, ROUNDING=None,
                                                     BLOCK=512)
    @gluon.jit
    def tritons_keyword(x_ptr, q_ptr):
        offs = gl.arange(0, 512)
        gl.store(q_ptr + offs, gl.load(x_ptr + offs).to(gl.float8e5m2, fp_downcast_rounding="rtz"))
    assert "rounding = rtz" in _ttgir(tritons_keyword, F32, f8e5)
    t = _ttgir(cast_kernel, F32, f8e5, n, DT=gl.float8e5m2, ROUNDING="rtz", BLOCK=512)
    assert "rounding = rtz" in t and "xf8E5M2" in t
    assert ".visible .entry" in _compile(cast_kernel, F32, f8e5, n, DT=gl.float8e5m2, ROUNDING="rtz", BLOCK=512)
    assert "cvt.rn.satfinite.e5m2x2.f16x2" in _compile(cast_kernel, F16, f8e5, n, DT=gl.float8e5m2, ROUNDING=None,
                                                       BLOCK=512)
    t = _ttgir(cast_kernel, F32, F16, n, DT=gl.float16, ROUNDING="rtz", BLOCK=512)
    assert "tt.fp_to_fp" in t and "rounding = rtz" in t and "arith.truncf" not in t
    assert "cvt.rz.f16.f32" in _compile(cast_kernel, F32, F16, n, DT=gl.float16, ROUNDING="rtz", BLOCK=512)
    for p, fmt in ((f8e4, "e4m3x2"), (f8e5, "e5m2x2")):      # fp8 -> f16 pairs -> f32, fp8 bytes in and out
        ptx = _compile(upcast_kernel, p, F32, p, n, BLOCK=512)
        assert f"cvt.rn.f16x2.{fmt}" in ptx and "cvt.f32.f16" in ptx
        assert "ld.global.b8" in ptx and "st.global.b8" in ptx


# ---------------------------------------------------------------------------------- errors (CPU)


@gluon.jit
def bad_kernel(x_ptr, i_ptr, CASE: gl.constexpr):
    x = gl.load(x_ptr + _rows(16, 32))
    if CASE == "reshape count":
        gl.reshape(x, (16, 16))
    if CASE == "permute":
        gl.permute(x, (0, 0))
    if CASE == "trans 3d":
        gl.trans(gl.reshape(x, (2, 8, 32)))
    if CASE == "join shape":
        gl.join(x, gl.load(x_ptr + _rows(32, 16)))
    if CASE == "join dtype":
        gl.join(x, x.to(gl.float16))
    if CASE == "split":
        gl.split(x)
    if CASE == "gather dtype":
        gl.gather(x, x, 1)
    if CASE == "gather rank":
        gl.gather(x, gl.load(i_ptr + gl.arange(0, 16)), 0)
    if CASE == "gather shape":
        gl.gather(x, gl.load(i_ptr + _rows(8, 8)), 1)
    if CASE == "gather axis":
        gl.gather(x, gl.load(i_ptr + _rows(16, 32)), 2)
    if CASE == "rounding mode":
        x.to(gl.float8e4m3, rounding="rn")
    if CASE == "rtz e4m3":
        x.to(gl.float8e4m3, rounding="rtz")
    if CASE == "rounding upcast":
        x.to(gl.float8e4m3).to(gl.float32, rounding="rtne")


@pytest.mark.parametrize("case,match", [
    ("reshape count", r"reshape: shape \(16, 16\) holds 256 elements but x is \(16, 32\) \(512 elements\)"),
    ("permute", r"permute: dims \(0, 0\) is not a permutation of the 2 dimensions"),
    ("trans 3d", r"trans: x is 3-D .* give dims"),
    ("join shape", r"join: a is \(16, 32\) and b is \(32, 16\)"),
    ("join dtype", r"join: a is f32 but b is f16"),
    ("split", r"split: the last dimension of x \(16, 32\) is 32, it must be 2 \(reshape to \(16, 16, 2\)"),
    ("gather dtype", r"gather: index is f32; it must be an integer tile"),
    ("gather rank", r"gather: index is 1-D \(16,\) but src is 2-D"),
    ("gather shape", r"gather: index's dim 0 is 8 but src's is 16"),
    ("gather axis", r"gather: axis 2 is outside src's 2 dimensions"),
    ("rounding mode", r"rounding='rn' is not a rounding mode; give 'rtne'"),
    ("rtz e4m3", r"no round-toward-zero f32 -> f8e4m3 conversion .* use rounding='rtne'"),
    ("rounding upcast", r"applies to float downcasts only, not f8e4m3 -> f32"),
])
def test_errors_at_the_users_line(case, match):
    with pytest.raises(GluonError, match=match) as e:
        bad_kernel.trace(F32, I32, CASE=case, arch="sm90", num_warps=4)
    assert "test_shapes.py" in str(e.value)


def test_e4m3_casts_are_refused_before_sm89():
    with pytest.raises(GluonError, match=r"cast f32 -> f8e4m3: sm80 has no float8e4m3 conversions") as e:
        cast_kernel.trace(F32, PointerArg(gl.float8e4m3), ScalarArg(gl.int32), DT=gl.float8e4m3, ROUNDING=None,
                          BLOCK=512, arch="sm80", num_warps=4)
    assert "test_shapes.py" in str(e.value)
    assert ".visible .entry" in _compile(cast_kernel, F32, PointerArg(gl.float8e5m2), ScalarArg(gl.int32),
                                         DT=gl.float8e5m2, ROUNDING=None, BLOCK=512, arch="sm80")


# ---------------------------------------------------------------------------------- GPU


def _cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    return torch


@pytest.mark.gpu
def test_shape_ops_on_the_gpu_match_torch():
    torch = _cuda()
    nan = float("nan")
    for colmajor in (False, True):
        x = torch.randn(32, 64, device="cuda")
        y = torch.full((64, 32), nan, device="cuda")
        trans_kernel[(1,)](x, y, M=32, N=64, COLMAJOR=colmajor, num_warps=4)
        assert torch.equal(y, x.t())
    x = torch.randn(4, 8, 16, device="cuda")
    y = torch.full((16, 4, 8), nan, device="cuda")
    permute3_kernel[(1,)](x, y, A=4, B=8, C=16, num_warps=4)
    assert torch.equal(y, x.permute(2, 0, 1))
    x = torch.randn(32, 64, device="cuda")
    y = torch.full((32, 16), nan, device="cuda")
    reshape_sum_kernel[(1,)](x, y, M=32, N=64, G=4, num_warps=4)
    torch.testing.assert_close(y, x.reshape(32, 16, 4).sum(2))
    a, b = torch.randn(16, 32, device="cuda"), torch.randn(16, 32, device="cuda")
    y = torch.full((16, 64), nan, device="cuda")
    interleave_kernel[(1,)](a, b, y, M=16, N=32, num_warps=4)
    assert torch.equal(y, torch.stack((a, b), -1).reshape(16, 64))
    x = torch.randn(16, 64, device="cuda")
    outs = [torch.full((16, 32), nan, device="cuda") for _ in range(4)]
    deinterleave_kernel[(1,)](x, *outs, M=16, N=32, num_warps=4)
    assert torch.equal(outs[0], x[:, 0::2]) and torch.equal(outs[1], x[:, 1::2])
    assert torch.equal(outs[2], x[:, 0::2] * 2) and torch.equal(outs[3], x[:, 1::2] + 1)
    src = torch.randn(32, 64, device="cuda")
    for axis, ishape, hi in ((1, (32, 16), 64), (0, (8, 64), 32)):
        idx = torch.randint(0, hi, ishape, device="cuda", dtype=torch.int32)
        out = torch.full(ishape, nan, device="cuda")
        gather_kernel[(1,)](src, idx, out, M=32, N=64, K=ishape[axis], AXIS=axis, num_warps=4)
        assert torch.equal(out, torch.gather(src, axis, idx.long()))
    x = torch.randn(64, 64, device="cuda")
    y = torch.full((64, 64), nan, device="cuda")
    wgmma_trans_kernel[(1,)](x, y, num_warps=4)
    assert torch.equal(y, x.t())
    x = torch.randn(16, 64, device="cuda")
    y, z = torch.full((16, 16), nan, device="cuda"), torch.full((16, 64), nan, device="cuda")
    group_scale_kernel[(1,)](x, y, z, num_warps=4)
    g = x.reshape(16, 16, 4).sum(2)
    torch.testing.assert_close(y, g + torch.arange(16, device="cuda"))
    torch.testing.assert_close(z, (x.reshape(16, 16, 4) * g[:, :, None]).reshape(16, 64))
    x = torch.randn(4, 32, 32, device="cuda")
    lo, hi = torch.full((32, 32), nan, device="cuda"), torch.full((32, 32), nan, device="cuda")
    loop_join_kernel[(1,)](x, lo, hi, M=32, N=32, STEPS=4, num_warps=4)
    torch.testing.assert_close(lo, x.sum(0))
    torch.testing.assert_close(hi, (2 * x).sum(0))


def _fp8_inputs(torch, fmax: float, n: int):
    """Random f32 values over fp8's whole finite range (normals, subnormals, ties, zeros of both signs)."""
    e = torch.randint(-24, int(math.log2(fmax)) + 1, (n,), device="cuda").float()      # past fmax: clamped
    x = (torch.rand(n, device="cuda") + 1) * torch.exp2(e) * torch.where(torch.rand(n, device="cuda") < 0.5, -1, 1)
    x = x.clamp(-fmax, fmax)
    x[:64] = torch.tensor([0.0, -0.0, fmax, -fmax] * 16, device="cuda")
    return x


@pytest.mark.gpu
@pytest.mark.parametrize("dt,tdt_name,fmax", [(gl.float8e4m3, "float8_e4m3fn", 448.0),
                                             (gl.float8e5m2, "float8_e5m2", 57344.0)])
def test_fp8_round_trips_are_torchs_bit_for_bit(dt, tdt_name, fmax):
    torch = _cuda()
    tdt = getattr(torch, tdt_name)
    n = 1 << 20
    for src_dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = _fp8_inputs(torch, min(fmax, 60000.0), n).to(src_dtype)
        q = torch.full((n,), 0x7F, device="cuda", dtype=torch.uint8).view(tdt)   # NaN sentinel in both formats
        cast_kernel[(n // 1024,)](x, q, n, DT=dt, ROUNDING="rtne", BLOCK=1024, num_warps=4)
        assert torch.equal(q.view(torch.uint8), x.to(tdt).view(torch.uint8)), src_dtype
    # every fp8 bit pattern up to f32 (NaN stays NaN), and copied through fp8 pointers
    codes = torch.arange(256, device="cuda", dtype=torch.int32).to(torch.uint8).view(tdt)
    y = torch.full((256,), -1.0, device="cuda")
    c = (255 - torch.arange(256, device="cuda", dtype=torch.int32)).to(torch.uint8).view(tdt)   # no code in place
    upcast_kernel[(1,)](codes, y, c, 256, BLOCK=256, num_warps=4)
    ref = codes.float()
    assert torch.equal(y.isnan(), ref.isnan()) and torch.equal(y[~ref.isnan()], ref[~ref.isnan()])
    assert torch.equal(c.view(torch.uint8), codes.view(torch.uint8))


def _rtz_reference(torch, x, tdt, bits_dtype):
    """x rounded toward zero to tdt, from torch's nearest-even: one code down in magnitude where it rounded up."""
    r = x.to(tdt)
    up = r.float().abs() > x.float().abs()
    bits = r.view(bits_dtype)
    return torch.where(up, bits - 1, bits)


@pytest.mark.gpu
def test_rtz_downcasts_round_toward_zero():
    torch = _cuda()
    n = 1 << 20
    x = _fp8_inputs(torch, 57344.0, n)
    q = torch.full((n,), 0x7F, device="cuda", dtype=torch.uint8).view(torch.float8_e5m2)
    cast_kernel[(n // 1024,)](x, q, n, DT=gl.float8e5m2, ROUNDING="rtz", BLOCK=1024, num_warps=4)
    assert torch.equal(q.view(torch.uint8), _rtz_reference(torch, x, torch.float8_e5m2, torch.uint8))
    x = torch.randn(n, device="cuda") * 100
    h = torch.full((n,), float("nan"), device="cuda", dtype=torch.float16)
    cast_kernel[(n // 1024,)](x, h, n, DT=gl.float16, ROUNDING="rtz", BLOCK=1024, num_warps=4)
    assert torch.equal(h.view(torch.int16), _rtz_reference(torch, x, torch.float16, torch.int16))
    assert bool((h.float().abs() <= x.abs()).all())


def test_rtz_reference_is_round_toward_zero():
    """The GPU test's rtz reference, checked on the CPU against torch.nextafter (f16) and against truncating
    the f16 result's low byte (e5m2 is f16's top byte, and truncating rounds toward zero)."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(19)
    x = torch.randn(1 << 16, generator=g) * torch.exp2(torch.randint(-20, 14, (1 << 16,), generator=g).float())
    x = x.clamp(-57344.0, 57344.0)
    h = _rtz_reference(torch, x, torch.float16, torch.int16).view(torch.float16)
    r = x.to(torch.float16)
    want = torch.where(r.float().abs() > x.abs(), torch.nextafter(r, torch.zeros_like(r)), r)
    assert torch.equal(h.view(torch.int16), want.view(torch.int16)) and bool((h.float().abs() <= x.abs()).all())
    e5 = _rtz_reference(torch, x, torch.float8_e5m2, torch.uint8)
    assert torch.equal(e5, (h.view(torch.int16) >> 8).to(torch.uint8))
    assert not torch.equal(e5, x.to(torch.float8_e5m2).view(torch.uint8))     # it is not nearest-even


# ---------------------------------------------------------------------------------- the fp8_quantize example

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def _example():
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    import fp8_quantize
    return fp8_quantize


@pytest.mark.parametrize("dt", [gl.float16, gl.bfloat16, gl.float32])
def test_fp8_quantize_example_compiles_to_16_byte_loads_and_fp8_conversions(dt):
    from gluon.backend.machine_code import sass_instructions
    fq = _example()
    cfg = fq.default_config(8192, 4096, dt.bytes)
    ck = fq.fp8_quantize_kernel.compile(PointerArg(gl.float8e4m3), F32, PointerArg(dt), *[ScalarArg(gl.int32, 16)] * 4,
                                        arch="sm90", num_warps=cfg["NUM_WARPS"], **cfg)
    ops = sass_instructions(ck.sass())
    assert ck.spills == 0 and ops.get("LDG.E.128", 0) >= 1
    assert ops.get("F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C", 0) >= 1


def test_fp8_quantize_check_accepts_torchs_quantization_and_nothing_else():
    torch = pytest.importorskip("torch")
    fq = _example()
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(19)) * 3
    q, s = fq.reference(x)
    assert fq.check(x, q, s) is None
    assert "scales differ" in fq.check(x, q, s * (1 + 1e-5))
    bad = q.view(torch.uint8).clone()
    bad[3, 7] ^= 0x04                                      # a code 4 steps off
    assert "more than a step" in fq.check(x, bad.view(torch.float8_e4m3fn), s)
    many = q.view(torch.uint8).clone()
    many[:, :8] = torch.where((many[:, :8] & 0x7F) > 1, many[:, :8] - 1, many[:, :8])   # 3% one step off
    assert "of the fp8 codes differ" in fq.check(x, many.view(torch.float8_e4m3fn), s)


def test_the_fp8_quantize_script_compiles_and_prints_its_sass_summary_then_interprets_small_cases_without_a_gpu():
    import subprocess
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("with a GPU the script checks against torch and benchmarks instead")
    root = os.path.dirname(EXAMPLES)
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "fp8_quantize.py")], capture_output=True,
                         text=True, check=True, env=dict(os.environ, PYTHONPATH=root)).stdout
    lines = out.splitlines()
    sass, interp = lines[:6], [ln for ln in lines if ln.startswith("interpreted on the CPU")]
    assert all("spills=0" in ln and "'LDG.E.128'" in ln for ln in sass), out
    assert lines[6].startswith("the fp8 conversions") and all("F2FP" in ln for ln in lines[7:-3]), out
    # then the fallback: small cases checked in the CPU interpreter
    assert lines[-3:] == interp and len(interp) == 3 and all(": ok" in ln for ln in interp), out


@pytest.mark.gpu
def test_fp8_quantize_example_matches_torch():
    torch = _cuda()
    fq = _example()
    for (m, n), dtype in zip(((512, 4096), (1000, 1000), (33, 4095)), (torch.float16, torch.bfloat16, torch.float32)):
        x = torch.randn(m, n, device="cuda", dtype=dtype) * torch.rand(m, 1, device="cuda", dtype=dtype) * 10
        x[0] = 0                                           # an all-zero row
        q = torch.full((m, n), 0x7F, device="cuda", dtype=torch.uint8).view(torch.float8_e4m3fn)
        s = torch.full((m,), float("nan"), device="cuda")
        fq.quantize(x, q, s)
        assert fq.check(x, q, s) is None, (m, n, dtype, fq.check(x, q, s))
        assert bool((q[0].float() == 0).all()) and s[0].item() == pytest.approx(fq.MIN_AMAX / fq.FP8_MAX)


def test_the_ir_verifier_checks_the_shape_ops():
    from gluon import ir
    mod = reshape_sum_kernel.trace(F32, F32, M=32, N=64, G=4, arch="sm90", num_warps=4)
    op = next(o for o in mod.kernel.walk() if o.kind == "reshape")
    good = op.results[0].type
    op.results[0].type = ir.TileType(good.dtype, (32, 16, 2))
    with pytest.raises(ir.IRVerificationError, match=r"reshape: a \(32, 64\) tile has 2048 elements, \(32, 16, 2\)"):
        mod.verify()
    op.results[0].type = good
    mod.verify()
    mod = deinterleave_kernel.trace(F32, F32, F32, F32, F32, M=16, N=32, arch="sm90", num_warps=4)
    op = next(o for o in mod.kernel.walk() if o.kind == "split")
    op.results[1].type = ir.TileType(gl.float16, op.results[1].type.shape)
    with pytest.raises(ir.IRVerificationError, match="split: operands and results must have one element type"):
        mod.verify()
