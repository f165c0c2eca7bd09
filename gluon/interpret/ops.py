"""The interpreter's rules: one function per IR op kind, `rule(it, op, args) -> results`, registered with
`@rule("kind")` as the lowering's rules are (gluon/backend/lowering/registry.py), and read off those
rules for their exact semantics. `it` is the program's interpreter (run.Program: program ids, the grid,
`run_region`), `args` the operands' values (numpy arrays, 0-d for scalars; `values.Ptr` for pointers),
and the rule returns the list of result values.

A kind without a rule would be listed in `NOT_YET` (none is now); the driver refuses those with one
GluonError at the op's line. Loads, stores and atomics live in memory.py, the combine-region ops and the
loops and branches in regions.py, shared memory in smem.py, TMA in tma.py, the dots in dots.py, the
barriers in sync.py and the warp roles in tasks.py.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..ir import OPS, Op, TileType
from ..types import DType, GluonError
from .values import FP8, full, reg_dtype, round_to, scalar

Rule = Callable[..., list]
RULES: dict[str, Rule] = {}

# IR kinds the interpreter does not run (none now: every kind of ir.OPS has a rule; the driver refuses a kind
# listed here with one GluonError at the op's line, and tests check that RULES and NOT_YET cover ir.OPS).
NOT_YET: frozenset[str] = frozenset()


def rule(*kinds: str):
    def register(fn: Rule) -> Rule:
        for k in kinds:
            if k not in OPS:
                raise ValueError(f"no IR op kind {k!r} (gluon.ir.OPS) to interpret")
            if k in RULES:
                raise ValueError(f"op kind {k!r} already has an interpreter rule")
            RULES[k] = fn
        return fn
    return register


class InterpretError(GluonError):
    """An error while interpreting a kernel, at the op's source line."""


def shape_of(t) -> tuple:
    return tuple(t.shape) if isinstance(t, TileType) else ()


def _out(op: Op, x, i: int = 0) -> np.ndarray:
    """`x` as result i of `op`: its shape (a scalar operand broadcast to a tile result). A value with more
    dimensions than the result's type is a combine region's, run over whole arrays: kept as it is."""
    t = op.results[i].type
    x = np.asarray(x)
    want = shape_of(t)
    if x.shape != want and x.ndim <= len(want):
        x = np.broadcast_to(x, want)
    return x


def _float_result(dt: DType, x) -> np.ndarray:
    """A float op's value, computed in float32/float64, rounded to `dt` (f16, bf16, fp8 round here)."""
    return round_to(dt, x)


def _compute_type(dt: DType) -> type:
    """The numpy type a float op of `dt` computes in: its own for f32/f64, float32 for the narrow ones."""
    return np.float64 if dt == DType.f64 else np.float32


# ------------------------------------------------------------------------------ program ids, constants


@rule("program_id")
def _program_id(it, op, args):
    return [np.array(it.pid[int(op.attrs.get("axis", 0))], np.int32)]


@rule("num_programs")
def _num_programs(it, op, args):
    return [np.array(it.grid[int(op.attrs.get("axis", 0))], np.int32)]


@rule("constant")
def _constant(it, op, args):
    t = op.result.type
    return [full(shape_of(t), op.attrs["value"], t.dtype)]


@rule("arange")
def _arange(it, op, args):
    return [np.arange(int(op.attrs["start"]), int(op.attrs["end"]), dtype=np.int32)]


@rule("splat", "broadcast")
def _splat(it, op, args):
    return [np.broadcast_to(args[0], shape_of(op.result.type))]


@rule("expand_dims")
def _expand_dims(it, op, args):
    return [np.expand_dims(args[0], int(op.attrs["axis"]))]


@rule("convert_layout")
def _convert_layout(it, op, args):
    return [args[0]]


# ------------------------------------------------------------------------------ elementwise


def _int_div(a, b, unsigned: bool):
    """arith.divsi / divui: the quotient rounded toward zero (division by zero gives 0 here, undefined on
    the GPU)."""
    if unsigned:
        return np.floor_divide(a, b)
    q = np.floor_divide(a, b)
    fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return (q + fix.astype(q.dtype)).astype(q.dtype)


def _shift(a, b, left: bool):
    """PTX shl / shr: a shift amount of the width or more (as unsigned) is clamped to the width, so shl and
    a logical shr give 0 and an arithmetic shr the sign fill."""
    a = np.asarray(a)
    bits = a.dtype.itemsize * 8
    ub = np.asarray(b).astype(a.dtype).view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype != np.bool_ else b
    big = ub >= bits
    amt = np.where(big, 0, ub).astype(a.dtype)
    if left:
        return np.where(big, a.dtype.type(0), np.left_shift(a, amt))
    if np.issubdtype(a.dtype, np.signedinteger):
        return np.right_shift(a, np.where(big, bits - 1, ub).astype(a.dtype))
    return np.where(big, a.dtype.type(0), np.right_shift(a, amt))


_FLOAT_BIN = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "rem": np.fmod,
    "min": np.fmin, "max": np.fmax,               # arith.minnumf / maxnumf: a NaN operand loses
    "floordiv": lambda a, b: np.floor(np.divide(a, b)),
}


@rule("binary")
def _binary(it, op, args):
    a, b = (np.asarray(x) for x in args)
    kind = op.attrs["op"]
    dt = op.operands[0].type.dtype
    if dt.is_float:
        f = _FLOAT_BIN.get(kind)
        if f is None:
            raise InterpretError(f"binary op {kind!r} is not defined for {dt.name}", op.loc)
        if dt in (DType.f32, DType.f64, DType.f16):
            return [_out(op, f(a, b).astype(reg_dtype(dt)))]
        return [_out(op, _float_result(dt, f(a, b)))]
    unsigned = not dt.is_signed or dt == DType.i1
    if kind in ("add", "sub", "mul") and dt == DType.i1:
        r = {"add": np.logical_xor, "sub": np.logical_xor, "mul": np.logical_and}[kind](a, b)
    elif kind in ("add", "sub", "mul", "and", "or", "xor", "min", "max"):
        r = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and, "or": np.bitwise_or,
             "xor": np.bitwise_xor, "min": np.minimum, "max": np.maximum}[kind](a, b)
    elif kind in ("div", "floordiv"):            # the lowering: both arith.divsi (divui), toward zero
        r = _int_div(a, b, unsigned)
    elif kind == "rem":                          # arith.remsi: the sign of the dividend (C's %)
        r = np.fmod(a, b)
    elif kind in ("shl", "shr") and dt != DType.i1:   # shr: arithmetic for signed types, logical for unsigned
        r = _shift(a, b, kind == "shl")
    else:
        raise InterpretError(f"binary op {kind!r} is not defined for {dt.name}", op.loc)
    return [_out(op, np.asarray(r).astype(reg_dtype(dt), copy=False))]


_CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
        "ne": np.not_equal}       # floats: ordered compares and une, as numpy's with NaN


@rule("cmp")
def _cmp(it, op, args):
    f = _CMP.get(op.attrs["pred"])
    if f is None:
        raise InterpretError(f"unknown comparison {op.attrs['pred']!r}", op.loc)
    return [_out(op, f(args[0], args[1]))]


_MATH = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
         "rsqrt": lambda x: 1.0 / np.sqrt(x), "sin": np.sin, "cos": np.cos, "floor": np.floor, "ceil": np.ceil,
         "abs": np.abs}


@rule("unary")
def _unary(it, op, args):
    x = np.asarray(args[0])
    kind = op.attrs["op"]
    dt = op.operands[0].type.dtype
    if kind == "neg":
        if dt.is_float:
            return [_out(op, np.negative(x))]                   # exact in every float format
        return [_out(op, np.subtract(np.zeros_like(x), x))]     # wraps (INT_MIN stays)
    if kind == "not":
        if dt.is_float:
            raise InterpretError("'not' needs an integer or i1 operand", op.loc)
        return [_out(op, np.invert(x))]
    if kind == "abs" and not dt.is_float:
        return [_out(op, np.abs(x))]
    f = _MATH.get(kind)
    if f is None or not dt.is_float:
        raise InterpretError(f"unary op {kind!r} is not defined for {dt.name}", op.loc)
    return [_out(op, _float_result(dt, f(x.astype(_compute_type(dt), copy=False))))]


def convert(x: np.ndarray, src: DType, dst: DType, rounding: str = "rtne") -> np.ndarray:
    """The lowering's `_cast`: `x` (registers of `src`) as registers of `dst`."""
    x = np.asarray(x)
    if src == dst or src.mlir == dst.mlir and src.is_float == dst.is_float and not (src.is_int and dst.is_int):
        return x
    if src.is_float and dst.is_float:
        if src == DType.f64 and (dst in FP8 or dst in (DType.f16, DType.bf16)):
            x = round_to(DType.f32, x, rounding)        # f64 -> f32 -> narrow, as Triton does (two roundings)
        return round_to(dst, x, rounding)
    if src.is_int and dst.is_float:
        if src == DType.i1:
            x = x.astype(np.uint8)
        if dst in (DType.f16, DType.f32, DType.f64):    # sitofp / uitofp: one rounding, numpy's own
            return x.astype(reg_dtype(dst))
        return round_to(dst, x.astype(np.float32))      # bf16, fp8: through f32 (as Triton does for fp8)
    if src.is_float and dst.is_int:
        if dst == DType.i1:
            return x != 0
        with np.errstate(invalid="ignore"):
            return np.trunc(x).astype(reg_dtype(dst))   # out of range: undefined on the GPU too
    if dst == DType.i1:                                 # int -> int
        return x != 0
    return x.astype(reg_dtype(dst))                     # sign/zero extension by the source type, or truncation


@rule("cast")
def _cast(it, op, args):
    rounding = op.attrs.get("rounding") or "rtne"
    if rounding not in ("rtne", "rtz"):
        raise InterpretError(f"rounding {rounding!r} is neither 'rtne' nor 'rtz'", op.loc)
    return [_out(op, convert(args[0], op.operands[0].type.dtype, op.result.type.dtype, rounding))]


@rule("select")
def _select(it, op, args):
    c, a, b = args
    return [_out(op, np.where(c, a, b).astype(reg_dtype(op.result.type.dtype), copy=False))]


@rule("fma")
def _fma(it, op, args):
    """a * b + c rounded once: the product and sum in float64 (exact product for f32 and narrower), then
    one rounding to the type (f64 itself: a * b + c in float64, two roundings)."""
    dt = op.result.type.dtype
    a, b, c = (np.asarray(x, np.float64) for x in args)
    return [_out(op, round_to(dt, a * b + c))]


# ------------------------------------------------------------------------------ shapes


@rule("reshape")
def _reshape(it, op, args):
    # can_reorder lets the GPU put the elements in any order; the interpreter keeps row-major order
    return [np.reshape(args[0], shape_of(op.result.type))]


@rule("trans")
def _trans(it, op, args):
    return [np.transpose(args[0], tuple(int(o) for o in op.attrs["order"]))]


@rule("join")
def _join(it, op, args):
    return [np.stack([args[0], args[1]], axis=-1)]


@rule("split")
def _split(it, op, args):
    x = args[0]
    return [x[..., 0], x[..., 1]]


@rule("split_cols")
def _split_cols(it, op, args):
    x = args[0]
    n = x.shape[1] // 2
    return [x[:, :n], x[:, n:]]


@rule("gather")
def _gather(it, op, args):
    src, idx = args
    axis = int(op.attrs["axis"])
    idx = np.asarray(idx).astype(np.int64)
    n = src.shape[axis]
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = idx[(idx < 0) | (idx >= n)].flat[0]
        raise InterpretError(f"gather index {bad} is out of range for axis {axis} of a {src.shape} tile", op.loc)
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = idx
    return [src[tuple(grid)]]


# ------------------------------------------------------------------------------ barriers, yield


@rule("thread_barrier")
def _thread_barrier(it, op, args):
    return []          # a program's ops run in order on every element at once: already in sync


@rule("yield")
def _yield(it, op, args):      # pragma: no cover - run_region consumes the yields
    raise InterpretError("yield outside a loop, branch or combine region", op.loc)


__all__ = ["RULES", "NOT_YET", "rule", "InterpretError", "convert", "scalar", "shape_of"]
