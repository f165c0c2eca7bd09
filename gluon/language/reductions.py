"""Reductions and scans with a combine function, argmax/argmin, cumulative sums and products, histograms.

Named and behaving as Triton's: `reduce(x, axis, combine_fn)` is `tt.reduce` with `combine_fn` traced into
its region, `associative_scan` is `tt.scan` (inclusive; `reverse` scans from the end), `argmax` / `argmin`
reduce (value, index) pairs, `cumsum` / `cumprod` are scans of `+` / `*`, and `histogram` is
`tt.histogram`. `x` may be a tuple of tiles of one shape: the combine function then takes `2k` scalars
(the k left values, then the k right ones) and returns k, one per input, each of its input's dtype.

The combine function is ordinary Python over GPU scalars (arithmetic, comparisons, `gl.where`,
`gl.maximum`, casts): it is called once, at trace time, on the region's arguments. It sees only them; a
GPU value from outside it cannot be used inside it (Triton's combine functions cannot either). A Python
`if` on GPU values does not trace there: use `gl.where`.
"""
from __future__ import annotations

import builtins
from typing import Callable

from .. import ir
from ..types import DType, SliceLayout
from .core import Tensor, _splat, _to_tensor, arange, broadcast_to, cast, expand_dims, where
from .tracing import _static_int, _tr, _user_loc

# The ops a combine region may hold: computation on its scalars, nothing with an effect.
_COMBINE_KINDS = frozenset({"constant", "binary", "cmp", "unary", "cast", "select", "fma", "inline_asm_pure"})


def _inputs(x, fn_name: str) -> tuple[list[Tensor], bool]:
    """The input tiles (a tuple of tiles of one shape, or one tile) and whether x was a tuple."""
    is_tuple = isinstance(x, (tuple, list))
    xs = list(x) if is_tuple else [x]
    if not xs:
        raise ir.GluonError(f"{fn_name}: x is an empty tuple; give one tile or a tuple of tiles of one shape",
                            _user_loc())
    for i, v in enumerate(xs):
        if not isinstance(v, Tensor) or not v.is_tile:
            what = f"x[{i}]" if is_tuple else "x"
            got = f"a scalar {v.type}" if isinstance(v, Tensor) else f"{type(v).__name__} {v!r}"
            raise ir.GluonError(f"{fn_name}: {what} must be a register tile (e.g. from gl.load or gl.arange), "
                                f"got {got}", _user_loc())
    shape = xs[0].shape
    for i, v in enumerate(xs[1:], 1):
        if v.shape != shape:
            raise ir.GluonError(f"{fn_name}: the tuple's tiles must have one shape, x[0] is {shape} and x[{i}] is "
                                f"{v.shape}; broadcast them first (gl.broadcast_to)", _user_loc())
    layouts = {v.layout for v in xs if v.layout is not None}
    if len(layouts) > 1:
        raise ir.GluonError(f"{fn_name}: the tuple's tiles are in different layouts ({', '.join(map(str, layouts))}); "
                            "convert them to one with gl.convert_layout", _user_loc())
    if layouts:       # an open layout takes its partners' (tt.reduce / tt.scan need one encoding)
        (lay,) = layouts
        for v in xs:
            if v.layout is None:
                v.value.type = ir.TileType(v.dtype, v.shape, lay)
    return xs, is_tuple


def _axis(axis, rank: int, fn_name: str) -> int:
    if isinstance(axis, Tensor) or axis is None or isinstance(axis, bool):
        raise ir.GluonError(f"{fn_name}: axis must be a Python int in {-rank}..{rank - 1} (the tile has rank {rank}), "
                            f"got {axis!r}", _user_loc())
    a = _static_int(axis, f"{fn_name}'s axis")
    if not -rank <= a < rank:
        raise ir.GluonError(f"{fn_name}: axis={a} is out of range for a rank-{rank} tile; it must be in "
                            f"{-rank}..{rank - 1}", _user_loc())
    return a + rank if a < 0 else a


def _combine_region(fn: Callable, xs: list[Tensor], fn_name: str) -> ir.Region:
    """Trace `fn(lhs..., rhs...)` into a fresh region over scalars of the inputs' dtypes, ending in a yield."""
    if not callable(fn):
        raise ir.GluonError(f"{fn_name}: combine_fn must be a function of {2 * len(xs)} GPU scalars, got "
                            f"{type(fn).__name__} {fn!r}", _user_loc())
    t = _tr()
    region = ir.Region()
    lhs = [Tensor(region.add_arg(ir.ScalarType(v.dtype), f"{v.value.name or 'x'}_l")) for v in xs]
    rhs = [Tensor(region.add_arg(ir.ScalarType(v.dtype), f"{v.value.name or 'x'}_r")) for v in xs]
    t.b.push(region)
    try:
        out = fn(*lhs, *rhs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(xs):
            want = "one value" if len(xs) == 1 else f"a tuple of {len(xs)} values, one per input"
            raise ir.GluonError(f"{fn_name}: combine_fn returned {len(outs)} value(s) for {len(xs)} input(s); it "
                                f"must return {want}", _user_loc())
        vals = []
        for i, (o, x) in enumerate(zip(outs, xs)):
            if not isinstance(o, Tensor):
                if isinstance(o, (bool, int, float)):
                    o = _to_tensor(o, x.dtype)
                else:
                    raise ir.GluonError(f"{fn_name}: combine_fn's result {i} is {type(o).__name__} {o!r}, not a "
                                        "GPU value", _user_loc())
            if o.is_tile:
                raise ir.GluonError(f"{fn_name}: combine_fn's result {i} is a tile {o.type}; it combines scalars "
                                    f"(two elements at a time) and must return a scalar", _user_loc())
            if o.dtype != x.dtype:
                raise ir.GluonError(f"{fn_name}: combine_fn's result {i} is {o.dtype.name}, but input {i} is "
                                    f"{x.dtype.name}; return the combined value in its input's dtype "
                                    f"(gl.cast(v, gl.{x.dtype.torch_name or x.dtype.name}))", _user_loc())
            vals.append(o)
        t.emit("yield", vals)
    finally:
        t.b.pop()
    _check_isolated(region, fn_name)
    return region


def _check_isolated(region: ir.Region, fn_name: str) -> None:
    defined = {a.id for a in region.args}
    for op in region.ops:
        if op.kind not in _COMBINE_KINDS and op.kind != "yield":
            raise ir.GluonError(f"{fn_name}: combine_fn may only compute on its arguments (arithmetic, comparisons, "
                                f"gl.where, casts), but it traced a {op.kind} op", op.loc)
        for v in op.operands:
            if v.id not in defined:
                made = v.owner.loc if isinstance(v.owner, ir.Op) else None
                what = f"%{v.name}, " if v.name else ""
                where_ = f" (made at {made})" if made else ""
                raise ir.GluonError(f"{fn_name}: combine_fn uses {what}a GPU value from outside it{where_}; it sees "
                                    "only its arguments: pass that value in as another input tile (x as a tuple) or "
                                    "compute it inside", op.loc)
        defined.update(r.id for r in op.results)


def _reduce_axis(xs: list[Tensor], axis: int, fn: Callable, fn_name: str) -> list[Tensor]:
    t = _tr()
    t.require("reduce", fn_name)
    region = _combine_region(fn, xs, fn_name)
    shape = xs[0].shape[:axis] + xs[0].shape[axis + 1:]
    lay = xs[0].layout
    rts = [ir.TileType(v.dtype, shape, SliceLayout(axis, lay) if lay is not None else None) if shape
           else ir.ScalarType(v.dtype) for v in xs]
    op = t.emit("reduce_fn", xs, rts, {"axis": axis}, regions=[region])
    _verify(op)
    return [Tensor(r) for r in op.results]


def _verify(op: ir.Op) -> None:
    msg = ir.OPS[op.kind].verify(op)
    if msg:        # a bug of this module, not of the user's kernel: the calls above check what the user gives
        raise ir.GluonError(f"{op.kind}: {msg}", op.loc)


def _keep(r: Tensor, axis: int, rank: int, layout) -> Tensor:
    """A reduction's result with the reduced axis kept as size 1."""
    if rank == 1:
        return _splat(r, (1,), layout)
    return expand_dims(r, axis)


def reduce(x, axis, combine_fn, keep_dims: bool = False):  # noqa: A001 - Triton's name
    """Reduce the tile `x` (or a tuple of tiles of one shape) along `axis` with `combine_fn`, an associative
    function of two elements (`2k` for k tiles: the left values, then the right ones) returning the
    combined one (k). Triton's `tl.reduce`: for what `gl.sum/max/min` do not say, such as the max of
    absolute values or a product. `axis=None` reduces every axis (the combine must then also be
    commutative: the axes are reduced one after the other); `keep_dims` keeps reduced axes as size 1."""
    xs, is_tuple = _inputs(x, "reduce")
    rank = len(xs[0].shape)
    lay = xs[0].layout
    if axis is None:
        outs = xs
        for ax in builtins.range(rank - 1, -1, -1):
            outs = _reduce_axis(outs, ax, combine_fn, "reduce")
        if keep_dims:
            outs = [_splat(o, (1,) * rank, lay) for o in outs]
    else:
        ax = _axis(axis, rank, "reduce")
        outs = _reduce_axis(xs, ax, combine_fn, "reduce")
        if keep_dims:
            outs = [_keep(o, ax, rank, lay) for o in outs]
    return tuple(outs) if is_tuple else outs[0]


def _promote_bf16(x: Tensor) -> Tensor:
    return cast(x, DType.f32) if x.dtype == DType.bf16 else x


def _indices(x: Tensor, axis: int | None) -> Tensor:
    """int32 indices of x's elements along `axis` (None: row-major flat indices), broadcast to x's shape."""
    shape = x.shape
    axes = builtins.range(len(shape)) if axis is None else (axis,)
    idx = None
    stride = 1
    for ax in reversed(axes):
        i = arange(0, shape[ax])
        for d in builtins.range(len(shape)):
            if d != ax:
                i = expand_dims(i, d)
        i = i * stride if stride != 1 else i
        idx = i if idx is None else idx + i
        stride *= shape[ax]
    return broadcast_to(idx, shape)


def _arg_reduce(x, axis, tie_break_left: bool, keep_dims: bool, better: str, fn_name: str) -> Tensor:
    xs, is_tuple = _inputs(x, fn_name)
    if is_tuple:
        raise ir.GluonError(f"{fn_name}: x must be one tile, got a tuple of {len(xs)}", _user_loc())
    if not isinstance(tie_break_left, bool):
        raise ir.GluonError(f"{fn_name}: tie_break_left must be True or False (a Python bool), got {tie_break_left!r}",
                            _user_loc())
    v = _promote_bf16(xs[0])
    rank = len(v.shape)
    ax = None if axis is None else _axis(axis, rank, fn_name)

    def combine(v1, i1, v2, i2):
        wins = v1 > v2 if better == "gt" else v1 < v2
        if tie_break_left:
            wins = wins | ((v1 == v2) & (i1 < i2))
        return where(wins, v1, v2), where(wins, i1, i2)

    pair = [v, _indices(v, ax)]
    if ax is None:
        for a in builtins.range(rank - 1, -1, -1):
            pair = _reduce_axis(pair, a, combine, fn_name)
        idx = pair[1]
        return _splat(idx, (1,) * rank, v.layout) if keep_dims else idx
    idx = _reduce_axis(pair, ax, combine, fn_name)[1]
    return _keep(idx, ax, rank, v.layout) if keep_dims else idx


def argmax(x, axis, tie_break_left: bool = True, keep_dims: bool = False) -> Tensor:
    """int32 index of the largest element of `x` along `axis` (None: the row-major flat index over all of
    it), as Triton's `tl.argmax`: a reduce of (value, index) pairs. Equal maxima give the smallest index
    with `tie_break_left=True` (torch.argmax's answer), any of them with False (a cheaper combine). bf16
    is compared in fp32, as Triton does."""
    return _arg_reduce(x, axis, tie_break_left, keep_dims, "gt", "argmax")


def argmin(x, axis, tie_break_left: bool = True, keep_dims: bool = False) -> Tensor:
    """int32 index of the smallest element of `x` along `axis`, as `argmax` does for the largest (Triton's
    `tl.argmin`)."""
    return _arg_reduce(x, axis, tie_break_left, keep_dims, "lt", "argmin")


def associative_scan(x, axis, combine_fn, reverse: bool = False):
    """Inclusive scan of the tile `x` (or a tuple of tiles of one shape) along `axis` with `combine_fn`, an
    associative function of two elements (2k for k tiles) as `reduce`'s: element i of the result combines
    elements 0..i (with `reverse`, i..n-1). Triton's `tl.associative_scan` (tt.scan); the result has x's
    shape and layout."""
    return _scan(x, axis, combine_fn, reverse, "associative_scan")


def _scan(x, axis, combine_fn, reverse, fn_name: str):
    xs, is_tuple = _inputs(x, fn_name)
    t = _tr()
    t.require("reduce", fn_name)
    ax = _axis(axis, len(xs[0].shape), fn_name)
    if not isinstance(reverse, bool):
        raise ir.GluonError(f"{fn_name}: reverse must be True or False (a Python bool), got {reverse!r}", _user_loc())
    region = _combine_region(combine_fn, xs, fn_name)
    op = t.emit("scan", xs, [v.type for v in xs], {"axis": ax, "reverse": reverse}, regions=[region])
    _verify(op)
    outs = [Tensor(r) for r in op.results]
    return tuple(outs) if is_tuple else outs[0]


def _sum_dtype(x: Tensor) -> Tensor:
    """Triton's cumsum dtype: bf16 in fp32, integers narrower than 32 bits in (u)int32."""
    dt = x.dtype
    if dt == DType.bf16:
        return cast(x, DType.f32)
    if dt.is_int and dt.bits < 32:
        return cast(x, DType.i32 if dt.is_signed and dt != DType.i1 else DType.u32)
    return x


def cumsum(x, axis: int = 0, reverse: bool = False) -> Tensor:
    """Inclusive prefix sum of `x` along `axis` (Triton's `tl.cumsum`, a tt.scan of `+`): out[i] = x[0] +
    ... + x[i] (reverse: x[i] + ... + x[n-1]). bf16 sums in fp32 and integers narrower than 32 bits in
    (u)int32, as Triton does."""
    xs, _ = _inputs(x, "cumsum")
    return _scan(_sum_dtype(xs[0]), axis, lambda a, b: a + b, reverse, "cumsum")


def cumprod(x, axis: int = 0, reverse: bool = False) -> Tensor:
    """Inclusive prefix product of `x` along `axis` (Triton's `tl.cumprod`, a tt.scan of `*`); bf16
    multiplies in fp32, as Triton does."""
    xs, _ = _inputs(x, "cumprod")
    return _scan(_promote_bf16(xs[0]), axis, lambda a, b: a * b, reverse, "cumprod")


def histogram(x, num_bins: int, mask=None) -> Tensor:
    """int32 counts of the values of the 1-D int32 (or uint32) tile `x` in each of the bins 0..num_bins-1
    (a power of two), over the whole tile: Triton's `tl.histogram` (tt.histogram; per-warp counts summed in
    shared memory). `mask` (i1, broadcast to x's shape) leaves elements out. A value outside
    [0, num_bins) must be masked off: Triton's lowering does not drop it in every case. The result is a
    tile of shape (num_bins,), its layout chosen by the layout pass unless you convert it."""
    t = _tr()
    t.require("reduce", "histogram")
    if not isinstance(x, Tensor) or not x.is_tile or len(x.shape) != 1 or not x.dtype.is_int:
        got = str(x.type) if isinstance(x, Tensor) else f"{type(x).__name__} {x!r}"
        raise ir.GluonError(f"histogram: x must be a 1-D tile of integers (the bin of each element), got {got}",
                            _user_loc())
    if x.dtype.bits != 32:
        raise ir.GluonError(f"histogram: x is {x.dtype.name}, and Triton 3.6 lowers tt.histogram only on 32-bit "
                            "integers; cast it first (x.to(gl.int32))", _user_loc())
    if isinstance(num_bins, Tensor):
        raise ir.GluonError("histogram: num_bins must be a Python int (a compile-time size), not a GPU value",
                            _user_loc())
    n = _static_int(num_bins, "histogram's num_bins")
    if n <= 0 or n & (n - 1):
        up = 1 << builtins.max(0, n - 1).bit_length()
        raise ir.GluonError(f"histogram: num_bins={n} must be a positive power of two (the result is a tile); "
                            f"use {up} bins and ignore the extra ones", _user_loc())
    operands = [x]
    if mask is not None:
        m = _to_tensor(mask, DType.i1)
        if m.dtype != DType.i1:
            raise ir.GluonError(f"histogram: mask must be a boolean (i1) tile or scalar, got {m.dtype.name}; "
                                "compare it, e.g. mask=x < n", _user_loc())
        if m.is_tile and m.shape != x.shape:
            raise ir.GluonError(f"histogram: mask's shape {m.shape} is not x's {x.shape}", _user_loc())
        if not m.is_tile:
            m = _splat(m, x.shape, x.layout)
        operands.append(m)
    return Tensor(t.emit("histogram", operands, [ir.TileType(DType.i32, (n,), None)], {"num_bins": n}).result)


__all__ = ["argmax", "argmin", "associative_scan", "cumprod", "cumsum", "histogram", "reduce"]
