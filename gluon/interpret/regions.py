"""Region ops in the interpreter: the counted loop and the branch (scf.for / scf.if), and the
reductions: `reduce` (sum max min), the combine-region `reduce_fn` and `scan`, and `histogram`.

A combine region is written over scalars; the interpreter runs it once per step over whole arrays of
lhs and rhs elements (its ops are elementwise), so a reduction of a 2^k axis takes k vectorized steps:
a tree that combines the axis's first half with its second, each step rounded to the dtype (a float sum
rounds as a tree of adds, not as one exact sum). A scan takes log2(n) steps (Hillis-Steele: after step
d, element i combines elements i - 2^d + 1 .. i); both are one valid order of the GPU's combines.
"""
from __future__ import annotations

import numpy as np

from ..types import DType
from .ops import InterpretError, rule, shape_of
from .values import reg_dtype, round_to


@rule("for")
def _for(it, op, args):
    lb, ub, step, *carried = args
    lo, hi, st = int(lb), int(ub), int(step)
    if st <= 0:
        raise InterpretError(f"loop step is {st}; scf.for needs a positive step", op.loc)
    body = op.regions[0]
    ivt = reg_dtype(op.operands[0].type.dtype)
    for i in range(lo, hi, st):
        carried = it.run_region(body, [np.array(i, ivt), *carried])
    return list(carried)


@rule("if")
def _if(it, op, args):
    cond = bool(args[0])
    if cond:
        return it.run_region(op.regions[0], [])
    if len(op.regions) > 1:
        return it.run_region(op.regions[1], [])
    return []


def _take(x: np.ndarray, axis: int, start: int, stop: int) -> np.ndarray:
    sl = [slice(None)] * x.ndim
    sl[axis] = slice(start, stop)
    return x[tuple(sl)]


_REDUCE = {"sum": np.add, "max": np.fmax, "min": np.fmin}     # floats: arith.maxnumf / minnumf


@rule("reduce")
def _reduce(it, op, args):
    (x,) = args
    axis = int(op.attrs["axis"])
    kind = op.attrs["op"]
    dt = op.operands[0].type.dtype
    f = _REDUCE.get(kind)
    if f is None:
        raise InterpretError(f"unknown reduction {kind!r}", op.loc)
    if not dt.is_float:
        f = {"sum": np.add, "max": np.maximum, "min": np.minimum}[kind]
    x = np.asarray(x)
    while x.shape[axis] > 1:
        h = x.shape[axis] // 2
        r = f(_take(x, axis, 0, h), _take(x, axis, h, 2 * h))
        x = round_to(dt, r) if dt.is_float else np.asarray(r).astype(x.dtype, copy=False)
    return [np.squeeze(x, axis)]


def _combine(it, op, lhs: list, rhs: list) -> list:
    out = it.run_region(op.regions[0], [*lhs, *rhs], combine=True)
    return [np.broadcast_to(np.asarray(o).astype(l.dtype, copy=False), np.broadcast(l, r).shape)
            for o, l, r in zip(out, lhs, rhs)]


@rule("reduce_fn")
def _reduce_fn(it, op, args):
    axis = int(op.attrs["axis"])
    xs = [np.asarray(a) for a in args]
    while xs[0].shape[axis] > 1:
        h = xs[0].shape[axis] // 2
        xs = _combine(it, op, [_take(x, axis, 0, h) for x in xs], [_take(x, axis, h, 2 * h) for x in xs])
    return [np.squeeze(x, axis) for x in xs]


@rule("scan")
def _scan(it, op, args):
    axis = int(op.attrs["axis"])
    rev = bool(op.attrs["reverse"])
    xs = [np.flip(np.asarray(a), axis) if rev else np.asarray(a) for a in args]
    n = xs[0].shape[axis]
    d = 1
    while d < n:
        new = _combine(it, op, [_take(x, axis, 0, n - d) for x in xs], [_take(x, axis, d, n) for x in xs])
        xs = [np.concatenate([_take(x, axis, 0, d), y], axis=axis) for x, y in zip(xs, new)]
        d *= 2
    return [np.flip(x, axis) if rev else x for x in xs]


@rule("histogram")
def _histogram(it, op, args):
    x = np.asarray(args[0]).astype(np.int64)
    n = int(op.attrs["num_bins"])
    keep = (x >= 0) & (x < n)           # values outside [0, num_bins) are not counted
    if len(args) > 1:
        keep &= np.asarray(args[1], bool)
    return [np.bincount(x[keep], minlength=n)[:n].astype(np.int32)]


__all__ = ["shape_of", "DType"]
