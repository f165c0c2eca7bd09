"""Gluon IR -> TTGIR lowering: golden text, and real compilation by triton 3.6 (no GPU needed).

Kernels are built by hand with `ir.Builder`. Each one is verified (`verify_kernel(...,
require_layouts=True)`), lowered, compared with `tests/golden/<name>.ttgir` (regenerate with
`GLUON_UPDATE_GOLDEN=1 pytest tests/test_lowering.py`), compiled with `triton.compile` for its
target, and its machine code checked (SASS through the cuobjdump bundled with triton, AMDGCN text).
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import re
import subprocess

import pytest

from gluon import ir
from gluon.arch import CDNA3, SM80, SM90, SM100
from gluon.backend.lowering import (LoweringError, float_literal, lower_kernel, lower_module,
                                    lower_module_kernels)
from gluon.ir import (BarrierType, DescType, I1, I32, PointerType, ScalarType, SmemType, TileType,
                      TmemType)
from gluon.types import DType, Layout, SwizzleMode, TensorMemoryLayout

GOLDEN = pathlib.Path(__file__).parent / "golden"
UPDATE = os.environ.get("GLUON_UPDATE_GOLDEN") == "1"

f16, f32, i32, i1 = DType.f16, DType.f32, DType.i32, DType.i1
F32 = ScalarType(f32)


# ------------------------------------------------------------------------------ a tiny kernel builder


class KB:
    """Hand-building kernels: `kb.v(kind, operands, type, name, **attrs)` makes one-result ops."""

    def __init__(self, name, arch, num_warps=4):
        self.body = ir.Region()
        self.b = ir.Builder(self.body)
        self.params: list[ir.Param] = []
        self.kernel = ir.Kernel(name, self.params, arch, num_warps, self.body)

    def param(self, name, type, div=1):
        v = ir.Value(type, name)
        self.params.append(ir.Param(name, v, None, div))
        return v

    def op(self, kind, operands=(), types=(), names=None, regions=(), **attrs):
        return self.b.create(kind, operands, types, attrs, regions, names)

    def v(self, kind, operands, type, _name="", **attrs):
        return self.op(kind, operands, [type], [_name], **attrs).result

    @contextlib.contextmanager
    def into(self, region):
        self.b.push(region)
        try:
            yield region
        finally:
            self.b.pop()

    def for_(self, lb, ub, step, inits=(), names=(), iv="i"):
        """Returns (body region, iv, carried args); build the body inside `kb.into(body)`, then
        call `kb.end_for(...)`."""
        body = ir.Region()
        ivv = body.add_arg(lb.type, iv)
        carried = [body.add_arg(v.type, n) for v, n in zip(inits, names)]
        return body, ivv, carried

    def end_for(self, lb, ub, step, inits, body, names=()):
        return self.op("for", [lb, ub, step, *inits], [v.type for v in inits], list(names) or None,
                       regions=[body]).results

    def const(self, value, type, name=""):
        return self.v("constant", [], type, name, value=value)

    def bin(self, op, a, b, name=""):
        return self.v("binary", [a, b], a.type, name, op=op)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.ttgir"
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"missing golden file {path}; run with GLUON_UPDATE_GOLDEN=1 to create it")
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"TTGIR differs from {path}; rerun with GLUON_UPDATE_GOLDEN=1 if intended"


def lower_checked(kb: KB, golden: str) -> str:
    ir.verify_kernel(kb.kernel, require_layouts=True)
    text = lower_kernel(kb.kernel).ttgir
    assert text == lower_kernel(kb.kernel).ttgir, "lowering is not deterministic"
    check_golden(golden, text)
    return text


def compile_text(text: str, arch, tmp_path):
    import triton
    from triton.backends.compiler import GPUTarget

    path = tmp_path / "kernel.ttgir"
    path.write_text(text)
    return triton.compile(str(path), target=GPUTarget(*arch.target))


def sass(compiled, tmp_path) -> str:
    import triton

    tool = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    cubin = tmp_path / "kernel.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    return subprocess.run([str(tool), "--dump-sass", str(cubin)], capture_output=True, text=True, check=True).stdout


# ------------------------------------------------------------------------------ kernels

BLK1 = Layout.blocked([4], [32], [4], [0])
NV128 = lambda r, c: Layout.swizzled(r, c, SwizzleMode.B128)  # noqa: E731
WGMMA = Layout.wgmma((4, 1), 128)


def build_copy():
    kb = KB("copy_kernel", SM90)
    x = kb.param("x_ptr", PointerType(f32), 16)
    y = kb.param("y_ptr", PointerType(f32), 16)
    n = kb.param("n", I32, 16)
    T = lambda dt: TileType(dt, (512,), BLK1)  # noqa: E731
    pid = kb.v("program_id", [], I32, "pid", axis=0)
    start = kb.bin("mul", pid, kb.const(512, I32), "start")
    r = kb.v("arange", [], T(i32), "r", start=0, end=512)
    offs = kb.bin("add", kb.v("splat", [start], T(i32), "start"), r, "offs")
    mask = kb.v("cmp", [offs, kb.v("splat", [n], T(i32), "n")], T(i1), "mask", pred="lt")
    val = kb.v("load", [x, offs, mask], T(f32), "x", has_mask=True, has_other=False)
    kb.op("store", [y, offs, val, mask], has_mask=True)
    return kb


def _tma_gemm_prologue(kb, b_shape=(64, 128), dtype=f16, swizzle=SwizzleMode.B128):
    a_desc = kb.param("a_desc", DescType(dtype, (128, 64), swizzle))
    b_desc = kb.param("b_desc", DescType(dtype, b_shape, swizzle))
    c_desc = kb.param("c_desc", DescType(f16, (128, 128), SwizzleMode.B128))
    K = kb.param("K", I32, 16)
    c128 = kb.const(128, I32)
    off_m = kb.bin("mul", kb.v("program_id", [], I32, "pid_m", axis=0), c128, "off_m")
    off_n = kb.bin("mul", kb.v("program_id", [], I32, "pid_n", axis=1), c128, "off_n")
    return a_desc, b_desc, c_desc, K, off_m, off_n


def _tma_epilogue(kb, acc, c_desc, off_m, off_n):
    c16 = kb.v("cast", [acc], TileType(f16, (128, 128), WGMMA), "c")
    c_smem = kb.v("smem_alloc", [], SmemType(f16, (128, 128), NV128(128, 128)), "c_smem", name="c_smem")
    kb.op("smem_store", [c16, c_smem])
    kb.op("fence_async_shared")
    kb.op("tma_store", [c_desc, c_smem, off_m, off_n])
    kb.op("tma_store_wait", pendings=0)


def build_tma_wgmma(b_transposed=False, dtype=f16):
    """The hopper_tma_wgmma sample; b_transposed: B arrives N x K and wgmma reads a transposed view;
    fp8 needs B K-major (b_transposed) and, with 64-element K tiles, 64-byte swizzling."""
    name = "tma_wgmma_bt_kernel" if b_transposed else "tma_wgmma_kernel"
    kb = KB(name if dtype == f16 else f"{name}_{dtype.name}", SM90)
    sw = SwizzleMode.B128 if dtype.bits == 16 else SwizzleMode.B64
    nv = lambda r, c, t=False: Layout.swizzled(r, c, sw, t)  # noqa: E731
    b_shape = (128, 64) if b_transposed else (64, 128)
    a_desc, b_desc, c_desc, K, off_m, off_n = _tma_gemm_prologue(kb, b_shape, dtype, sw)
    a_smem = kb.v("smem_alloc", [], SmemType(dtype, (128, 64), nv(128, 64)), "a_smem", name="a_smem")
    b_smem = kb.v("smem_alloc", [], SmemType(dtype, b_shape, nv(*b_shape)), "b_smem", name="b_smem")
    bar = kb.v("barrier_alloc", [], BarrierType(1, 1), "bar", name="bar", count=1)
    acc0 = kb.const(0.0, TileType(f32, (128, 128), WGMMA))
    c0, c64 = kb.const(0, I32), kb.const(64, I32)
    body, k, (acc, phase) = kb.for_(c0, K, c64, [acc0, c0], ["acc", "phase"], iv="k")
    with kb.into(body):
        kb.op("barrier_expect", [bar], bytes=2 * 128 * 64 * dtype.bytes)
        kb.op("tma_load", [a_desc, a_smem, bar, off_m, k])
        if b_transposed:
            kb.op("tma_load", [b_desc, b_smem, bar, off_n, k])
            b_op = kb.v("smem_trans", [b_smem], SmemType(dtype, (64, 128), nv(64, 128, True)), "b_t", order=(1, 0))
        else:
            kb.op("tma_load", [b_desc, b_smem, bar, k, off_n])
            b_op = b_smem
        kb.op("barrier_wait", [bar, phase])
        nphase = kb.bin("xor", phase, kb.const(1, I32), "phase")
        acc1 = kb.v("wgmma", [a_smem, b_op, acc], acc.type, "acc", is_async=True)
        acc2 = kb.v("wgmma_wait", [acc1, a_smem, b_op], acc.type, "acc", pendings=0)
        kb.op("yield", [acc2, nphase])
    acc_out, _ = kb.end_for(c0, K, c64, [acc0, c0], body, ["acc", "phase"])
    _tma_epilogue(kb, acc_out, c_desc, off_m, off_n)
    return kb


def _offsets_2d(kb, rows, cols, stride, layout):
    """rows[:, None] * stride + cols[None, :] in `layout`."""
    R, C = rows.type.shape[0], cols.type.shape[0]
    r2 = kb.v("expand_dims", [rows], TileType(i32, (R, 1), layout), "", axis=1)
    r2 = kb.bin("mul", r2, kb.const(stride, TileType(i32, (R, 1), layout)))
    c2 = kb.v("expand_dims", [cols], TileType(i32, (1, C), layout), "", axis=0)
    rb = kb.v("broadcast", [r2], TileType(i32, (R, C), layout))
    cb = kb.v("broadcast", [c2], TileType(i32, (R, C), layout))
    return kb.bin("add", rb, cb, "offs"), r2


def build_cp_async_mma():
    kb = KB("cp_async_mma_kernel", SM80)
    a_ptr = kb.param("a_ptr", PointerType(f16), 16)
    b_ptr = kb.param("b_ptr", PointerType(f16), 16)
    c_ptr = kb.param("c_ptr", PointerType(f32), 16)
    M = kb.param("M", I32, 16)
    L = Layout.blocked([1, 8], [4, 8], [4, 1], [1, 0])
    mma = Layout.mma((4, 1))
    sh = Layout.shared(8, 1, 8, (1, 0))
    s0, s1 = Layout.slice(0, L), Layout.slice(1, L)
    rm = kb.v("arange", [], TileType(i32, (64,), s1), "rm", start=0, end=64)
    rk = kb.v("arange", [], TileType(i32, (32,), s0), "rk", start=0, end=32)
    rkr = kb.v("arange", [], TileType(i32, (32,), s1), "rkr", start=0, end=32)
    rn = kb.v("arange", [], TileType(i32, (64,), s0), "rn", start=0, end=64)
    a_offs, rm2 = _offsets_2d(kb, rm, rk, 32, L)
    b_offs, _ = _offsets_2d(kb, rkr, rn, 64, L)
    # rows < M, broadcast along K: constant over each 16-byte vector, so cp.async stays 16 B wide.
    row_ok = kb.v("cmp", [kb.v("expand_dims", [rm], TileType(i32, (64, 1), L), "", axis=1),
                          kb.v("splat", [M], TileType(i32, (64, 1), L))], TileType(i1, (64, 1), L), "row_ok", pred="lt")
    a_mask = kb.v("broadcast", [row_ok], TileType(i1, (64, 32), L), "a_mask")
    a_smem = kb.v("smem_alloc", [], SmemType(f16, (64, 32), sh), "a_smem", name="a_smem")
    b_smem = kb.v("smem_alloc", [], SmemType(f16, (32, 64), sh), "b_smem", name="b_smem")
    kb.op("cp_async", [a_ptr, a_offs, a_smem, a_mask], has_mask=True)
    kb.op("cp_async", [b_ptr, b_offs, b_smem], has_mask=False)
    kb.op("cp_async_commit")
    kb.op("cp_async_wait", num=0)
    a = kb.v("smem_load", [a_smem], TileType(f16, (64, 32), Layout.dot_operand(0, mma, 2)), "a")
    b = kb.v("smem_load", [b_smem], TileType(f16, (32, 64), Layout.dot_operand(1, mma, 2)), "b")
    acc = kb.v("mma", [a, b, kb.const(0.0, TileType(f32, (64, 64), mma))], TileType(f32, (64, 64), mma), "acc")
    out = kb.v("convert_layout", [acc], TileType(f32, (64, 64), L), "out")
    c_offs, _ = _offsets_2d(kb, rm, rn, 64, L)
    kb.op("store", [c_ptr, c_offs, out])
    return kb


def build_mfma():
    kb = KB("mfma_kernel", CDNA3)
    a_ptr = kb.param("a_ptr", PointerType(f16), 16)
    b_ptr = kb.param("b_ptr", PointerType(f16), 16)
    c_ptr = kb.param("c_ptr", PointerType(f32), 16)
    L = Layout.blocked([1, 8], [8, 8], [4, 1], [1, 0])
    mf = Layout.mfma((2, 2), (32, 32), transposed=True)
    s0, s1 = Layout.slice(0, L), Layout.slice(1, L)
    rm = kb.v("arange", [], TileType(i32, (64,), s1), "rm", start=0, end=64)
    rk = kb.v("arange", [], TileType(i32, (32,), s0), "rk", start=0, end=32)
    rkr = kb.v("arange", [], TileType(i32, (32,), s1), "rkr", start=0, end=32)
    rn = kb.v("arange", [], TileType(i32, (64,), s0), "rn", start=0, end=64)
    a_offs, _ = _offsets_2d(kb, rm, rk, 32, L)
    b_offs, _ = _offsets_2d(kb, rkr, rn, 64, L)
    a = kb.v("load", [a_ptr, a_offs], TileType(f16, (64, 32), L), "a")
    b = kb.v("load", [b_ptr, b_offs], TileType(f16, (32, 64), L), "b")
    a = kb.v("convert_layout", [a], TileType(f16, (64, 32), Layout.dot_operand(0, mf, 4)), "a")
    b = kb.v("convert_layout", [b], TileType(f16, (32, 64), Layout.dot_operand(1, mf, 4)), "b")
    acc = kb.v("mfma", [a, b, kb.const(0.0, TileType(f32, (64, 64), mf))], TileType(f32, (64, 64), mf), "acc")
    out = kb.v("convert_layout", [acc], TileType(f32, (64, 64), L), "out")
    c_offs, _ = _offsets_2d(kb, rm, rn, 64, L)
    kb.op("store", [c_ptr, c_offs, out])
    return kb


def build_ws_wgmma(stages=2, consumer_regs=None, producer_regs=24):
    kb = KB("ws_wgmma_kernel", SM90, num_warps=5)
    a_desc, b_desc, c_desc, K, off_m, off_n = _tma_gemm_prologue(kb)
    a_bufs = kb.v("smem_alloc", [], SmemType(f16, (128, 64), NV128(128, 64), stages), "a_bufs", name="a_bufs")
    b_bufs = kb.v("smem_alloc", [], SmemType(f16, (64, 128), NV128(64, 128), stages), "b_bufs", name="b_bufs")
    ready = kb.v("barrier_alloc", [], BarrierType(stages, 1), "ready_bars", name="ready", count=1)
    empty = kb.v("barrier_alloc", [], BarrierType(stages, 1), "empty_bars", name="empty", count=1)
    c0, c1, cS, c64 = kb.const(0, I32), kb.const(1, I32), kb.const(stages, I32), kb.const(64, I32)
    num_k = kb.bin("div", kb.bin("add", K, kb.const(63, I32), "num_k"), c64, "num_k")
    acc0 = kb.const(0.0, TileType(f32, (128, 128), WGMMA))
    one_bar = BarrierType(1, 1)

    consumer = ir.Region()
    with kb.into(consumer):
        body, i, (acc,) = kb.for_(c0, num_k, c1, [acc0], ["acc"])
        with kb.into(body):
            s = kb.bin("rem", i, cS, "s")
            ph = kb.bin("and", kb.bin("div", i, cS), c1, "phase")
            kb.op("barrier_wait", [kb.v("barrier_index", [ready, s], one_bar, "ready"), ph])
            a = kb.v("smem_index", [a_bufs, s], SmemType(f16, (128, 64), NV128(128, 64)), "a")
            b = kb.v("smem_index", [b_bufs, s], SmemType(f16, (64, 128), NV128(64, 128)), "b")
            acc1 = kb.v("wgmma", [a, b, acc], acc.type, "acc", is_async=True)
            acc2 = kb.v("wgmma_wait", [acc1, a, b], acc.type, "acc", pendings=0)
            kb.op("barrier_arrive", [kb.v("barrier_index", [empty, s], one_bar, "empty")], count=1)
            kb.op("yield", [acc2])
        (acc_out,) = kb.end_for(c0, num_k, c1, [acc0], body, ["acc"])
        _tma_epilogue(kb, acc_out, c_desc, off_m, off_n)

    producer = ir.Region()
    with kb.into(producer):
        body, i, _ = kb.for_(c0, num_k, c1)
        with kb.into(body):
            s = kb.bin("rem", i, cS, "s")
            eph = kb.bin("xor", kb.bin("and", kb.bin("div", i, cS), c1), c1, "empty_phase")
            kb.op("barrier_wait", [kb.v("barrier_index", [empty, s], one_bar, "empty"), eph])
            rb = kb.v("barrier_index", [ready, s], one_bar, "ready")
            kb.op("barrier_expect", [rb], bytes=32768)
            k = kb.bin("mul", i, c64, "k")
            kb.op("tma_load", [a_desc, kb.v("smem_index", [a_bufs, s], SmemType(f16, (128, 64), NV128(128, 64)), "a"), rb, off_m, k])
            kb.op("tma_load", [b_desc, kb.v("smem_index", [b_bufs, s], SmemType(f16, (64, 128), NV128(64, 128)), "b"), rb, k, off_n])
            kb.op("yield", [])
        kb.end_for(c0, num_k, c1, [], body)

    roles = [
        {"role": "consumer", "warps": (0, 3), "registers": consumer_regs, "default": True},
        {"role": "producer", "warps": (4, 4), "registers": producer_regs, "default": False},
    ]
    kb.op("warp_specialize", [], [], regions=[consumer, producer], roles=roles)
    return kb


def build_if_reduce():
    kb = KB("if_reduce_kernel", SM90)
    x_ptr = kb.param("x_ptr", PointerType(f32), 16)
    out_ptr = kb.param("out_ptr", PointerType(f32), 16)
    L = Layout.blocked([1, 4], [4, 8], [4, 1], [1, 0])
    s0, s1 = Layout.slice(0, L), Layout.slice(1, L)
    rows = kb.v("arange", [], TileType(i32, (64,), s1), "rows", start=0, end=64)
    cols = kb.v("arange", [], TileType(i32, (64,), s0), "cols", start=0, end=64)
    offs, _ = _offsets_2d(kb, rows, cols, 64, L)
    x = kb.v("load", [x_ptr, offs], TileType(f32, (64, 64), L), "x")
    RT = TileType(f32, (64,), s1)
    s = kb.v("reduce", [x], RT, "s", axis=1, op="sum")
    pid = kb.v("program_id", [], I32, "pid", axis=0)
    c0 = kb.const(0, I32)
    is_first = kb.v("cmp", [pid, c0], I1, "is_first", pred="eq")
    then, els = ir.Region(), ir.Region()
    with kb.into(then):
        kb.op("yield", [kb.bin("mul", s, kb.const(2.0, RT), "r")])
    with kb.into(els):
        kb.op("yield", [kb.v("reduce", [x], RT, "r", axis=1, op="max")])
    (r,) = kb.op("if", [is_first], [RT], ["r"], regions=[then, els]).results
    kb.op("store", [out_ptr, rows, r])
    total = kb.v("reduce", [r], F32, "total", axis=0, op="sum")
    first = kb.v("load", [x_ptr, c0], F32, "first")
    total = kb.bin("add", total, first, "total")
    then2 = ir.Region()
    with kb.into(then2):
        kb.op("store", [out_ptr, kb.const(64, I32), total])
        kb.op("yield", [])
    else2 = ir.Region()
    with kb.into(else2):
        kb.op("yield", [])
    kb.op("if", [is_first], [], regions=[then2, else2])
    return kb


def build_tcgen05(any_layout=False):
    """The blackwell sample. any_layout: 8 warps, the accumulator initialised from and loaded into a
    plain blocked layout (the lowering goes through TMEM's message layout and converts)."""
    nw = 8 if any_layout else 4
    kb = KB("tcgen05_any_layout_kernel" if any_layout else "tcgen05_kernel", SM100, num_warps=nw)
    a_ptr = kb.param("a_ptr", PointerType(f16), 16)
    b_ptr = kb.param("b_ptr", PointerType(f16), 16)
    c_ptr = kb.param("c_ptr", PointerType(f32), 16)
    L = Layout.blocked([1, 8], [4, 8], [nw, 1], [1, 0])
    s0, s1 = Layout.slice(0, L), Layout.slice(1, L)
    rm = kb.v("arange", [], TileType(i32, (128,), s1), "rm", start=0, end=128)
    rk = kb.v("arange", [], TileType(i32, (64,), s0), "rk", start=0, end=64)
    rkr = kb.v("arange", [], TileType(i32, (64,), s1), "rkr", start=0, end=64)
    rn = kb.v("arange", [], TileType(i32, (128,), s0), "rn", start=0, end=128)
    a_offs, _ = _offsets_2d(kb, rm, rk, 64, L)
    b_offs, _ = _offsets_2d(kb, rkr, rn, 128, L)
    a = kb.v("load", [a_ptr, a_offs], TileType(f16, (128, 64), L), "a")
    b = kb.v("load", [b_ptr, b_offs], TileType(f16, (64, 128), L), "b")
    a_smem = kb.v("smem_alloc", [a], SmemType(f16, (128, 64), NV128(128, 64)), "a_smem", name="a_smem")
    b_smem = kb.v("smem_alloc", [b], SmemType(f16, (64, 128), NV128(64, 128)), "b_smem", name="b_smem")
    kb.op("fence_async_shared")
    tl = TensorMemoryLayout((128, 128), 1)
    init = [kb.const(0.0, TileType(f32, (128, 128), L), "zero")] if any_layout else []
    acc_tmem = kb.v("tmem_alloc", init, TmemType(f32, (128, 128), tl), "acc_tmem")
    bar = kb.v("barrier_alloc", [], BarrierType(1, 1), "bar", name="bar", count=1)
    kb.op("tcgen05_mma", [a_smem, b_smem, acc_tmem, bar], use_acc=any_layout)
    kb.op("barrier_wait", [bar, kb.const(0, I32)])
    if any_layout:
        out = kb.v("tmem_load", [acc_tmem], TileType(f32, (128, 128), L), "out")
    else:
        # one row per thread, 32 rows per warp: the 32x32b TMEM message layout
        tmem_reg = Layout.blocked([1, 128], [32, 1], [4, 1], [0, 1])
        acc = kb.v("tmem_load", [acc_tmem], TileType(f32, (128, 128), tmem_reg), "acc")
        out = kb.v("convert_layout", [acc], TileType(f32, (128, 128), L), "out")
    c_offs, _ = _offsets_2d(kb, rm, rn, 128, L)
    kb.op("store", [c_ptr, c_offs, out])
    return kb


def build_elementwise():
    """Every unary/binary/cmp/cast/select form on tiles, stored so nothing is dead."""
    kb = KB("elementwise_kernel", SM90)
    x_ptr = kb.param("x_ptr", PointerType(f32), 16)
    out_ptr = kb.param("out_ptr", PointerType(f32), 16)
    flag = kb.param("flag", I32)
    T = lambda dt: TileType(dt, (512,), BLK1)  # noqa: E731
    offs = kb.v("arange", [], T(i32), "offs", start=0, end=512)
    x = kb.v("load", [x_ptr, offs, kb.v("cmp", [offs, kb.v("splat", [flag], T(i32))], T(i1), "m", pred="lt"),
                      kb.const(float("-inf"), F32, "ninf")], T(f32), "x", has_mask=True, has_other=True,
             cache="cg")
    acc = x
    for u in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "sin", "cos", "floor", "ceil", "neg"):
        acc = kb.bin("add", acc, kb.v("unary", [x], T(f32), u, op=u), "acc")
    for bop in ("add", "sub", "mul", "div", "floordiv", "rem", "min", "max"):
        acc = kb.bin(bop, acc, kb.const(0.1 if bop != "div" else 3.0, T(f32)), "acc")
    # integer and unsigned arithmetic
    xi = kb.v("cast", [x], T(i32), "xi")
    xu = kb.v("cast", [xi], T(DType.u32), "xu")
    for bop in ("add", "sub", "mul", "div", "rem", "and", "or", "xor", "shl", "shr", "min", "max"):
        xi = kb.bin(bop, xi, offs, "xi")
        xu = kb.bin(bop, xu, kb.v("cast", [offs], T(DType.u32), "ou"), "xu")
    xi = kb.v("unary", [kb.v("unary", [xi], T(i32), "xi", op="not")], T(i32), "xi", op="neg")
    xi = kb.v("unary", [xi], T(i32), "xi", op="abs")
    acc = kb.bin("add", acc, kb.v("cast", [xi], T(f32), "f"), "acc")
    acc = kb.bin("add", acc, kb.v("cast", [xu], T(f32), "f"), "acc")
    # narrow / widen casts, fp8 included
    for dt in (DType.f16, DType.bf16, DType.f8e4m3, DType.f8e5m2, DType.f64):
        acc = kb.bin("add", acc, kb.v("cast", [kb.v("cast", [x], T(dt), dt.name)], T(f32), "back"), "acc")
    b8 = kb.v("cast", [kb.v("cast", [xi], T(DType.i8), "b8")], T(DType.i64), "w64")
    acc = kb.bin("add", acc, kb.v("cast", [b8], T(f32), "f"), "acc")
    u8 = kb.v("cast", [kb.v("cast", [xu], T(DType.u8), "u8")], T(DType.u32), "u32")
    acc = kb.bin("add", acc, kb.v("cast", [u8], T(f32), "f"), "acc")
    # comparisons, i1 logic, casts from/to i1
    preds = [kb.v("cmp", [acc, x], T(i1), p, pred=p) for p in ("lt", "le", "gt", "ge", "eq", "ne")]
    preds += [kb.v("cmp", [xu, u8], T(i1), "u" + p, pred=p) for p in ("lt", "ge")]
    anyp = preds[0]
    for p in preds[1:]:
        anyp = kb.bin("or", anyp, p, "anyp")
    anyp = kb.v("unary", [anyp], T(i1), "nonep", op="not")
    acc = kb.bin("add", acc, kb.v("cast", [anyp], T(f32), "f"), "acc")
    nz = kb.v("cast", [acc], T(i1), "nz")
    acc = kb.v("select", [nz, acc, kb.const(float("nan"), T(f32))], T(f32), "acc")
    # scalar condition select, special float constants
    big = kb.v("cmp", [flag, kb.const(1024, I32)], I1, "big", pred="gt")
    acc = kb.v("select", [big, acc, kb.const(float("inf"), T(f32))], T(f32), "acc")
    acc = kb.bin("max", acc, kb.const(1e-5, T(f32)), "acc")
    kb.op("store", [out_ptr, offs, acc], evict="evict_first")
    return kb


def build_ws_results():
    """Default role returns a tile; two worker roles (1 and 2 warps), one without a register count."""
    kb = KB("ws_results_kernel", SM90, num_warps=7)
    x_ptr = kb.param("x_ptr", PointerType(f32), 16)
    n = kb.param("n", I32, 16)
    lay = {w: Layout.blocked([1], [32], [w], [0]) for w in (1, 2, 4)}
    T = lambda dt, w: TileType(dt, (128,), lay[w])  # noqa: E731
    two = kb.const(2.0, T(f32, 1), "two")
    dflt = ir.Region()
    with kb.into(dflt):
        o = kb.v("arange", [], T(i32, 4), "o", start=0, end=128)
        x = kb.v("load", [x_ptr, o], T(f32, 4), "x")
        kb.op("yield", [kb.bin("add", x, kb.const(1.0, T(f32, 4)), "y")])
    w1 = ir.Region()
    with kb.into(w1):
        o = kb.v("arange", [], T(i32, 1), "o", start=0, end=128)
        m = kb.v("cmp", [o, kb.v("splat", [n], T(i32, 1))], T(i1, 1), "m", pred="lt")
        kb.op("store", [x_ptr, o, two, m], has_mask=True)
    w2 = ir.Region()
    with kb.into(w2):
        o = kb.v("arange", [], T(i32, 2), "o", start=0, end=128)
        o = kb.bin("add", o, kb.const(128, T(i32, 2)), "o")
        kb.op("store", [x_ptr, o, kb.const(3.0, T(f32, 2), "three")])
    roles = [
        {"role": "consumer", "warps": (0, 3), "registers": None, "default": True},
        {"role": "producer", "warps": (4, 4), "registers": 24, "default": False},
        {"role": "helper", "warps": (5, 6), "registers": None, "default": False},
    ]
    (y,) = kb.op("warp_specialize", [], [T(f32, 4)], ["y"], regions=[dflt, w1, w2], roles=roles).results
    kb.op("store", [x_ptr, kb.v("arange", [], T(i32, 4), "o", start=0, end=128), y])
    return kb


KERNELS = {
    "copy_sm90": (build_copy, SM90),
    "tma_wgmma_sm90": (build_tma_wgmma, SM90),
    "tma_wgmma_bt_sm90": (lambda: build_tma_wgmma(b_transposed=True), SM90),
    "tma_wgmma_fp8_sm90": (lambda: build_tma_wgmma(b_transposed=True, dtype=DType.f8e4m3), SM90),
    "cp_async_mma_sm80": (build_cp_async_mma, SM80),
    "mfma_gfx942": (build_mfma, CDNA3),
    "ws_wgmma_sm90": (build_ws_wgmma, SM90),
    "ws_results_sm90": (build_ws_results, SM90),
    "if_reduce_sm90": (build_if_reduce, SM90),
    "tcgen05_sm100": (build_tcgen05, SM100),
    "tcgen05_any_layout_sm100": (lambda: build_tcgen05(any_layout=True), SM100),
    "elementwise_sm90": (build_elementwise, SM90),
}

# machine code each kernel must contain (regexes over SASS, or AMDGCN for hip)
EXPECT = {
    "copy_sm90": [r"LDG\.E\.128", r"STG\.E\.128"],
    "tma_wgmma_sm90": [r"HGMMA\.64x128x16", r"UTMALDG", r"UTMASTG"],
    "tma_wgmma_bt_sm90": [r"HGMMA\.64x128x16", r"UTMALDG", r"UTMASTG"],
    "tma_wgmma_fp8_sm90": [r"QGMMA\.64x128x32\.F32\.E4M3\.E4M3", r"UTMALDG", r"UTMASTG"],
    "cp_async_mma_sm80": [r"LDGSTS\.E\.BYPASS.*\.128", r"HMMA\.16816\.F32", r"LDSM"],
    "mfma_gfx942": [r"v_mfma_f32_32x32x8_?f16"],
    "ws_wgmma_sm90": [r"HGMMA\.64x128x16", r"UTMALDG", r"USETMAXREG", r"SYNCS"],
    "ws_results_sm90": [r"USETMAXREG", r"STG\.E"],
    "if_reduce_sm90": [r"SHFL\.BFLY", r"FADD"],
    "tcgen05_sm100": [r"UTCHMMA", r"LDTM"],
    "tcgen05_any_layout_sm100": [r"UTCHMMA", r"LDTM", r"STTM"],
    "elementwise_sm90": [r"MUFU\.EX2", r"MUFU\.RSQ", r"F2FP\.SATFINITE\.E4M3\.F32", r"F2FP\.F16\.E5M2\.UNPACK",
                         r"I2FP\.F32\.U32", r"LDG\.E\.STRONG\.GPU", r"STG\.E\.EF\.128"],
}


# ------------------------------------------------------------------------------ golden + compile


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_lowers_compiles_and_has_the_instructions(name, tmp_path):
    build, arch = KERNELS[name]
    kb = build()
    text = lower_checked(kb, name)
    compiled = compile_text(text, arch, tmp_path)
    code = compiled.asm["amdgcn"] if arch.backend == "hip" else sass(compiled, tmp_path)
    for pattern in EXPECT[name]:
        assert re.search(pattern, code), f"{name}: no {pattern!r} in the machine code"


def test_copy_header_params_and_vector_width():
    text = lower_kernel(build_copy().kernel).ttgir
    assert text.startswith("#blocked = #ttg.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>\n")
    assert ('module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, ttg.target = "cuda:90", '
            '"ttg.threads-per-warp" = 32 : i32} {') in text
    assert ("tt.func public @copy_kernel(%x_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32}, "
            "%y_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %n: i32 {tt.divisibility = 16 : i32})") in text
    # IR names become SSA names, uniquified
    assert "%start = arith.muli %pid, %c512_i32 : i32" in text
    assert "%start_1 = tt.splat %start : i32 -> tensor<512xi32, #blocked>" in text


def test_desc_params_carry_shape_and_strides():
    text = lower_kernel(build_tma_wgmma().kernel).ttgir
    assert ("%a_desc: !tt.tensordesc<tensor<128x64xf16, #shared>>, %a_desc_0: i32, %a_desc_1: i32, "
            "%a_desc_2: i64, %a_desc_3: i64, %b_desc: !tt.tensordesc<tensor<64x128xf16, #shared>>") in text
    assert "#shared = #ttg.nvmma_shared<{swizzlingByteWidth = 128, transposed = false, elementBitWidth = 16}>" in text
    assert "#shared1 = #ttg.swizzled_shared<{vec = 1, perPhase = 1, maxPhase = 1, order = [0]}>" in text
    assert re.search(r"%acc_(\d+):3 = ttng\.warp_group_dot_wait %acc_\d+, %a_smem, %b_smem \{pendings = 0 : i32\}", text)
    assert re.search(r"scf\.yield %acc_\d+#0, %phase_\d+ : tensor<128x128xf32, #mma>, i32", text)
    assert re.search(r"%acc, %phase = scf\.for %k = %c0_i32 to %K step %c64_i32 iter_args\(%acc_\d+ = %cst, %phase_\d+ = %c0_i32\)", text)


def test_warp_specialize_structure():
    text = lower_kernel(build_ws_wgmma().kernel).ttgir
    # module warps = the default role's warps, not kernel.num_warps (5)
    assert '"ttg.num-warps" = 4 : i32' in text
    m = re.search(r"\n    ttg\.warp_specialize\((.*)\) attributes \{requestedRegisters = array<i32: 24>\}\n    default \{\n", text)
    assert m, text
    captures = m.group(1).split(", ")
    assert set(captures) == {"%num_k_1", "%empty_bars", "%ready_bars", "%a_bufs", "%a_desc", "%off_m", "%b_bufs",
                             "%b_desc", "%off_n"}
    assert "ttg.warp_yield" in text and "ttg.warp_return" in text
    part = text.split("\n    partition0(")[1]
    args, body = part.split(") num_warps(1) {\n", 1)
    assert len(args.split(": ")) == len(captures) + 1
    # constants the producer uses are re-materialized inside it, not captured
    assert "%true_1 = arith.constant true" in body and "arith.constant 64 : i32" in body
    assert "i1" not in args
    assert re.search(r"\n    \} : \(i32, !ttg\.memdesc<2x1xi64, .*\) -> \(\)\n    tt\.return\n", text)


def test_warp_specialize_register_fill_and_no_registers():
    text = lower_kernel(build_ws_wgmma(consumer_regs=240, producer_regs=None).kernel).ttgir
    assert "requestedRegisters" not in text
    kb = build_ws_wgmma(producer_regs=40)
    assert "requestedRegisters = array<i32: 40>" in lower_kernel(kb.kernel).ttgir


def test_warp_specialize_results_and_register_fill():
    text = lower_kernel(build_ws_results().kernel).ttgir
    # 4 default warps + 3 worker warps padded to one warpgroup = 8 warps: 64K regs / 8 / 32 = 256 each
    assert re.search(r"\n    %y = ttg\.warp_specialize\(%n, %x_ptr\) attributes \{requestedRegisters = array<i32: 24, 256>\}\n", text)
    assert re.search(r"ttg\.warp_yield %y_\d+ : tensor<128xf32, #blocked1>\n", text)
    assert re.search(r"\n    partition0\(%n_1: i32, %x_ptr_1: !tt\.ptr<f32>\) num_warps\(1\) \{\n", text)
    assert re.search(r"\n    partition1\(%n_2: i32, %x_ptr_2: !tt\.ptr<f32>\) num_warps\(2\) \{\n", text)
    assert "\n    } : (i32, !tt.ptr<f32>) -> tensor<128xf32, #blocked1>\n" in text
    # the constant `two` is defined outside the roles and re-materialized in the role that uses it
    part0 = text.split("partition0(")[1].split("partition1(")[0]
    assert "%two_1 = arith.constant dense<2.000000e+00>" in part0
    assert '"ttg.num-warps" = 4 : i32' in text


def test_tmem_moves_go_through_the_message_layout():
    text = lower_kernel(build_tcgen05(any_layout=True).kernel).ttgir
    msg = "#ttg.blocked<{sizePerThread = [1, 64], threadsPerWarp = [32, 1], warpsPerCTA = [4, 2], order = [0, 1]}>"
    alias = re.search(r"(#blocked\d*) = " + re.escape(msg), text).group(1)
    assert re.search(rf"%zero_tmem = ttg\.convert_layout %zero : tensor<128x128xf32, #blocked> -> tensor<128x128xf32, {alias}>", text)
    assert f"%acc_tmem = ttng.tmem_alloc %zero_tmem : (tensor<128x128xf32, {alias}>)" in text
    assert re.search(rf"%out_tmem = ttng\.tmem_load %acc_tmem : .* -> tensor<128x128xf32, {alias}>\n", text)
    assert re.search(rf"%out = ttg\.convert_layout %out_tmem : tensor<128x128xf32, {alias}> -> tensor<128x128xf32, #blocked>", text)
    # already in the message layout: no conversion
    assert "_tmem = ttg.convert_layout" not in lower_kernel(build_tcgen05().kernel).ttgir


def test_mfma_instr_shape_gets_k_from_operands():
    text = lower_kernel(build_mfma().kernel).ttgir
    assert ("#mma = #ttg.amd_mfma<{version = 3, warpsPerCTA = [2, 2], instrShape = [32, 32, 8], isTransposed = true}>") in text
    assert '"ttg.threads-per-warp" = 64 : i32' in text and 'ttg.target = "hip:gfx942"' in text
    assert "inputPrecision" not in text


def test_mma_dot_syntax():
    text = lower_kernel(build_cp_async_mma().kernel).ttgir
    assert re.search(r"%acc = tt\.dot %a, %b, %cst_\d+, inputPrecision = tf32 : "
                     r"tensor<64x32xf16, #ttg\.dot_op<\{opIdx = 0, parent = #mma, kWidth = 2\}>> \* ", text)
    assert re.search(r"ttg\.async_copy_global_to_local %a_ptrs, %a_smem mask %a_mask : tensor<64x32x!tt\.ptr<f16>, #blocked> "
                     r"-> <64x32xf16, #shared, #smem, mutable>", text)
    assert "ttg.async_wait {num = 0 : i32}" in text


# ------------------------------------------------------------------------------ unit checks


def test_float_literals():
    assert float_literal(0.0) == "0.000000e+00"
    assert float_literal(1.0) == "1.000000e+00"
    assert float_literal(-0.0) == "-0.000000e+00"
    assert float_literal(0.1) == "1.000000e-01"
    assert float_literal(0.1234567891) == "0.1234567891"
    assert float_literal(1e300 * 1.2345678912) == "1.2345678912e+300"
    assert float(float_literal(1 / 3)) == 1 / 3
    assert float_literal(1e-5) == "1.000000e-05"
    assert float_literal(1.2345678e-300) == "1.2345678e-300"
    assert float_literal(float("inf")) == "0x7F800000"
    assert float_literal(float("-inf"), DType.f16) == "0xFC00"
    assert float_literal(float("nan"), DType.bf16) == "0x7FC0"
    with pytest.raises(ValueError):
        float_literal(float("inf"), DType.f8e4m3)


def test_names_are_sanitized_and_unique():
    kb = KB("names", SM90)
    x = kb.param("x ptr", PointerType(f32))
    a = kb.const(1, I32, "acc")
    b = kb.bin("add", a, a, "acc")
    c = kb.bin("add", b, b, "1st")
    kb.bin("add", c, kb.const(-3, I32), "acc")
    kb.op("store", [x, c, kb.v("cast", [c], F32, "")])
    text = lower_kernel(kb.kernel).ttgir
    assert "%x_ptr: !tt.ptr<f32>" in text
    assert "%acc = arith.constant 1 : i32" in text
    assert "%acc_1 = arith.addi %acc, %acc : i32" in text
    assert "%v1st = arith.addi %acc_1, %acc_1 : i32" in text
    assert "%cm3_i32 = arith.constant -3 : i32" in text
    assert "%acc_2 = arith.addi %v1st, %cm3_i32 : i32" in text
    assert "%0 = arith.sitofp %v1st : i32 to f32" in text


def test_missing_layout_is_reported_with_op_and_loc():
    kb = KB("nolayout", SM90)
    kb.b.loc = ir.Loc("my_kernel.py", 42, "nolayout")
    kb.v("arange", [], TileType(i32, (128,), None), "r", start=0, end=128)
    with pytest.raises(LoweringError) as e:
        lower_kernel(kb.kernel)
    assert "arange" in str(e.value) and "my_kernel.py:42" in str(e.value) and "layout" in str(e.value)


def test_op_not_on_target_raises():
    kb = KB("wrong_arch", SM80)
    kb.b.loc = ir.Loc("my_kernel.py", 7)
    kb.op("fence_async_shared")
    with pytest.raises(LoweringError) as e:
        lower_kernel(kb.kernel)
    assert "fence_async_shared" in str(e.value) and "cuda:80" in str(e.value) and "my_kernel.py:7" in str(e.value)
    kb = KB("wgmma_on_blackwell", SM100)
    sm = kb.v("smem_alloc", [], SmemType(f16, (64, 64), NV128(64, 64)), "s")
    kb.v("wgmma", [sm, sm, kb.const(0.0, TileType(f32, (64, 64), WGMMA))], TileType(f32, (64, 64), WGMMA), "acc")
    with pytest.raises(LoweringError, match="wgmma"):
        lower_kernel(kb.kernel)


def test_bad_smem_trans_layout_raises():
    kb = KB("trans", SM90)
    sm = kb.v("smem_alloc", [], SmemType(f16, (128, 64), NV128(128, 64)), "s")
    kb.v("smem_trans", [sm], SmemType(f16, (64, 128), NV128(64, 128)), "t", order=(1, 0))  # transposed flag not flipped
    with pytest.raises(LoweringError, match="transposed"):
        lower_kernel(kb.kernel)


def test_cg_with_eviction_policy_raises():
    kb = KB("cg_evict", SM90)
    x = kb.param("x_ptr", PointerType(f32), 16)
    offs = kb.v("arange", [], TileType(i32, (512,), BLK1), "offs", start=0, end=512)
    kb.v("load", [x, offs], TileType(f32, (512,), BLK1), "x", cache="cg", evict="evict_last")
    with pytest.raises(LoweringError, match="cg"):
        lower_kernel(kb.kernel)


def test_module_entry_points():
    m = ir.Module([build_copy().kernel])
    assert lower_module(m) == lower_kernel(m.kernels[0])
    m2 = ir.Module([build_copy().kernel, build_if_reduce().kernel])
    with pytest.raises(LoweringError, match="exactly one kernel"):
        lower_module(m2)
    texts = lower_module_kernels(m2)
    assert list(texts) == ["copy_kernel", "if_reduce_kernel"]
    assert all(t.ttgir.count("tt.func public") == 1 for t in texts.values())


def test_every_op_kind_has_exactly_one_lowering_rule():
    """The registry covers gluon.ir.OPS one for one, and refuses a second rule for a kind. `yield` is
    registered like any kind, but its rule only rejects a stray yield: for/if/warp_specialize lower
    their regions with `lw.lower_region(region, on_yield)`, which hands the closing yield to the parent
    (scf.yield, ttg.warp_yield) instead of dispatching it, and a top-level yield is refused before
    dispatch, with the same message."""
    from gluon.backend.lowering import RULES
    from gluon.backend.lowering.context import KernelLowering
    from gluon.backend.lowering.registry import rule

    assert sorted(RULES) == sorted(ir.OPS)
    where = {k: RULES[k].__module__.removeprefix("gluon.backend.lowering.")
             for k in ("binary", "load", "for", "wgmma", "mma", "tcgen05_mma", "mfma")}
    assert where == {"binary": "core", "load": "memory", "for": "control", "wgmma": "nvidia.hopper",
                     "mma": "nvidia.ampere", "tcgen05_mma": "nvidia.blackwell", "mfma": "amd.cdna3"}

    kb = KB("stray_yield", SM90)
    y = kb.op("yield")
    with pytest.raises(LoweringError, match="yield outside a loop, branch or warp role"):
        lower_kernel(kb.kernel)
    with pytest.raises(LoweringError, match="yield outside a loop, branch or warp role"):
        RULES["yield"](KernelLowering(kb.kernel), y)

    before = dict(RULES)
    with pytest.raises(ValueError, match="'binary' already has a lowering rule"):
        rule("binary")(lambda lw, op: None)
    with pytest.raises(ValueError, match="'load' already has a lowering rule"):
        rule("load")(lambda lw, op: None)
    with pytest.raises(ValueError, match="no IR op kind 'no_such_op'"):
        rule("no_such_op")(lambda lw, op: None)
    with pytest.raises(ValueError, match="distinct"):
        rule("binary", "binary")
    assert RULES == before
