"""Dots in the interpreter: `wgmma` (A from shared memory or registers, B from shared memory) and its wait,
the register-operand `mma` (SM80 HMMA) and `mfma` (CDNA3), and Blackwell's tensor memory with `tcgen05_mma`.

Every dot is one numpy matmul over the whole tile: the operands' values (already of their format: f16,
bf16, fp8 and tf32 values are exact in float64) are multiplied in float64 and added to the accumulator
there, then rounded once to the accumulator's dtype (f32, or f16 where the op accumulates in f16). The
tensor cores accumulate in fp32 along K (in an unspecified order, some with truncation), so results agree
with the GPU's to fp32 rounding over K, not bit for bit. f32 operands go in as tf32 where the op takes
them so (WGMMA always; mma by default, `input_precision="tf32"`): the low 13 mantissa bits are dropped,
as the tensor cores ignore them; "ieee" and the 3xTF32 / bf16x3 modes keep full f32 operands. Integer
operands (i8) multiply exactly in int64 and wrap to the i32 accumulator.

WGMMA reads its shared operands through the async proxy. An async one (`is_async`, as the language emits
every WGMMA) reads them under its `AsyncGroup` token until a `wgmma_wait` with at most `pendings` newer
WGMMAs in flight retires it; the product is computed at issue, since the interpreter has no latency.
`tcgen05_mma` reads its operands under the mbarrier it commits to, and arrives once on it when done
(here: at once).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import TmemType
from ..types import DType
from .ops import InterpretError, rule
from .shared import BarrierView, SmemView
from .smem import async_groups, one_stage
from .values import reg_dtype, round_to

_FULL_F32 = ("ieee", "tf32x3", "bf16x3", "bf16x6")


def _tf32(x: np.ndarray) -> np.ndarray:
    """f32 values as the tensor cores take them as tf32: the low 13 mantissa bits dropped."""
    x = np.ascontiguousarray(x, np.float32)
    return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def matmul(a: np.ndarray, b: np.ndarray, acc: np.ndarray | None, in_dt: DType, acc_dt: DType,
           precision: str | None = "tf32") -> np.ndarray:
    """acc + a @ b (acc None: a @ b) as the op's result registers of `acc_dt`."""
    if not in_dt.is_float:
        r = a.astype(np.int64) @ b.astype(np.int64)
        if acc is not None:
            r = r + np.asarray(acc).astype(np.int64)
        return r.astype(reg_dtype(acc_dt))
    if in_dt == DType.f32 and precision not in _FULL_F32:
        a, b = _tf32(a), _tf32(b)
    r = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    if acc is not None:
        r = r + np.asarray(acc, np.float64)
    return round_to(acc_dt, r)


def _check_shapes(op, a, b, acc) -> None:
    if a.shape[-1] != b.shape[0] or acc.shape != (a.shape[0], b.shape[1]):
        raise InterpretError(f"{op.kind}: A {a.shape} x B {b.shape} does not give the accumulator's {acc.shape}",
                             op.loc)


# ------------------------------------------------------------------------------ WGMMA


def _read(it, op, v, what: str, via) -> np.ndarray:
    if isinstance(v, SmemView):
        return one_stage(op, v, what).read(it.who, "async", op.loc, via=via)
    return np.asarray(v)


@rule("wgmma")
def _wgmma(it, op, args):
    a, b, acc = args[:3]
    if not isinstance(b, SmemView):
        raise InterpretError(f"wgmma reads B from shared memory, got {type(b).__name__}", op.loc)
    use_acc = bool(args[3]) if len(args) > 3 else bool(op.attrs.get("use_acc", True))
    token = None
    if op.attrs.get("is_async", False):
        token = async_groups(it, "wgmma").issue(it.who)
    av = _read(it, op, a, "A operand", token)
    bv = _read(it, op, b, "B operand", token)
    acc = np.asarray(acc)
    _check_shapes(op, av, bv, acc)
    in_dt = op.operands[1].type.dtype
    return [matmul(av, bv, acc if use_acc else None, in_dt, op.result.type.dtype, "tf32")]


@rule("wgmma_wait")
def _wgmma_wait(it, op, args):
    async_groups(it, "wgmma").retire(it, int(op.attrs.get("pendings", 0)), op.loc)
    return [args[0]]


# ------------------------------------------------------------------------------ register-operand dots


@rule("mma", "mfma")
def _register_dot(it, op, args):
    a, b, acc = (np.asarray(x) for x in args[:3])
    _check_shapes(op, a, b, acc)
    default = "tf32" if op.kind == "mma" else "ieee"
    prec = op.attrs.get("input_precision", default) or "ieee"
    return [matmul(a, b, acc, op.operands[0].type.dtype, op.result.type.dtype, prec)]


# ------------------------------------------------------------------------------ tensor memory (SM100)


@dataclass(eq=False)
class TmemTile:
    """One tensor-memory allocation: its accumulator's elements (register model)."""

    dtype: DType
    data: np.ndarray


@rule("tmem_alloc")
def _tmem_alloc(it, op, args):
    t = op.result.type
    if not isinstance(t, TmemType):
        raise InterpretError(f"tmem_alloc must produce tensor memory, got {t}", op.loc)
    data = np.zeros(tuple(t.shape), reg_dtype(t.dtype))
    if args:
        data[...] = np.asarray(args[0])
    return [TmemTile(t.dtype, data)]


@rule("tmem_load")
def _tmem_load(it, op, args):
    (tm,) = args
    if not isinstance(tm, TmemTile):
        raise InterpretError(f"tmem_load reads tensor memory, got {type(tm).__name__}", op.loc)
    return [tm.data.copy()]


@rule("tcgen05_mma")
def _tcgen05_mma(it, op, args):
    a, b, d, *rest = args
    bar = rest[0] if rest else None
    if not isinstance(d, TmemTile):
        raise InterpretError(f"tcgen05_mma accumulates in tensor memory, got {type(d).__name__}", op.loc)
    if bar is not None and not isinstance(bar, BarrierView):
        raise InterpretError(f"tcgen05_mma commits to an mbarrier, got {type(bar).__name__}", op.loc)
    mbar = bar.one if bar is not None else None
    av = _read(it, op, a, "A operand", mbar)
    bv = _read(it, op, b, "B operand", mbar)
    _check_shapes(op, av, bv, d.data)
    use = bool(op.attrs.get("use_acc", True))
    d.data[...] = matmul(av, bv, d.data if use else None, op.operands[0].type.dtype, d.dtype, "tf32")
    if mbar is not None:
        mbar.arrive(1)                  # tcgen05.commit: one arrival once the MMA is done
    return [None] if op.results else []


__all__ = ["TmemTile", "matmul"]
