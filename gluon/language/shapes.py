"""Register-tile shape ops, named and behaving as Triton's: `reshape`, `permute` / `trans`, `join`, `split`
and `gather`.

Their results leave the layout open: the layout pass gives each the layout Triton's own inference gives for
the operand's layout (a `LinearLayout`, `#ttg.linear`), so chained shape ops and a reduction after a
reshape move no data; a gather's result is in its index's layout. The lowering
(backend/lowering/shapes.py) converts where the IR ended up with another layout, so any operand layout is
accepted.
"""
from __future__ import annotations

import math
from typing import Sequence

from .. import ir
from .core import Tensor, _broadcast_shape, _broadcast_to, _to_tensor
from .tracing import _static_int, _tr, _user_loc


def _tile(x, fn: str, what: str = "x") -> Tensor:
    x = _to_tensor(x)
    if not x.is_tile:
        raise ir.GluonError(f"{fn}: {what} must be a register tile, got a scalar {x.dtype.name}", _user_loc())
    return x


def _pow2(shape: tuple[int, ...]) -> bool:
    return all(d > 0 and d & (d - 1) == 0 for d in shape)


def reshape(x, shape: Sequence[int], can_reorder: bool = False) -> Tensor:
    """`x`'s elements, in row-major order, as a tile of `shape` (as many elements, power-of-two dims).
    `can_reorder=True` allows the compiler to permute the elements (Triton's meaning); this compiler
    never does, so the order is the row-major one either way."""
    x = _tile(x, "reshape")
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(_static_int(d, "reshape's shape") for d in shape)
    if math.prod(shape) != math.prod(x.shape):
        raise ir.GluonError(f"reshape: shape {shape} holds {math.prod(shape)} elements but x is {x.shape} "
                            f"({math.prod(x.shape)} elements); give a shape with {math.prod(x.shape)}", _user_loc())
    if not shape or not _pow2(shape):
        raise ir.GluonError(f"reshape: shape {shape} needs power-of-two dimensions (tiles are powers of two)",
                            _user_loc())
    if shape == x.shape:
        return x
    return Tensor(_tr().emit("reshape", [x], [ir.TileType(x.dtype, shape)],
                             {"can_reorder": bool(can_reorder)}).result)


def permute(x, dims: Sequence[int]) -> Tensor:
    """`x` with its dimensions reordered: result dimension i is `x`'s dimension `dims[i]` (Triton's
    `tl.permute`, `tt.trans`)."""
    x = _tile(x, "permute")
    if isinstance(dims, int):
        dims = (dims,)
    dims = tuple(_static_int(d, "permute's dims") for d in dims)
    rank = len(x.shape)
    if sorted(dims) != list(range(rank)):
        raise ir.GluonError(f"permute: dims {dims} is not a permutation of the {rank} dimensions of x {x.shape}; "
                            f"give each of {tuple(range(rank))} once", _user_loc())
    if dims == tuple(range(rank)):
        return x
    shape = tuple(x.shape[d] for d in dims)
    return Tensor(_tr().emit("trans", [x], [ir.TileType(x.dtype, shape)], {"order": list(dims)}).result)


def trans(x, *dims) -> Tensor:
    """`permute(x, dims)`; without dims a 2-D tile's two dimensions swap (Triton's `tl.trans`)."""
    x = _tile(x, "trans")
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    if not dims:
        if len(x.shape) != 2:
            raise ir.GluonError(f"trans: x is {len(x.shape)}-D {x.shape}; without dims it swaps the two "
                                "dimensions of a 2-D tile, give dims for others", _user_loc())
        dims = (1, 0)
    return permute(x, dims)


def join(a, b) -> Tensor:
    """`a` and `b` (one dtype, shapes that broadcast) as one tile with a new minor dimension of size 2:
    `join(a, b)[..., 0] == a`, `[..., 1] == b`."""
    a, b = _tile(a, "join", "a"), _tile(b, "join", "b")
    if a.dtype != b.dtype:
        raise ir.GluonError(f"join: a is {a.dtype.name} but b is {b.dtype.name}; cast one (gl.cast) so both "
                            "have one dtype", _user_loc())
    try:
        shape = _broadcast_shape(a.shape, b.shape)
    except ir.GluonError:
        raise ir.GluonError(f"join: a is {a.shape} and b is {b.shape}; they need one shape (or shapes that "
                            "broadcast)", _user_loc()) from None
    a, b = _broadcast_to(a, shape), _broadcast_to(b, shape)
    return Tensor(_tr().emit("join", [a, b], [ir.TileType(a.dtype, (*shape, 2))]).result)


def split(x) -> tuple[Tensor, Tensor]:
    """The two halves of a tile whose last dimension is 2 (the inverse of `join`): `x[..., 0], x[..., 1]`."""
    x = _tile(x, "split")
    if x.shape[-1] != 2:
        raise ir.GluonError(f"split: the last dimension of x {x.shape} is {x.shape[-1]}, it must be 2 (reshape "
                            f"to {(*x.shape[:-1], x.shape[-1] // 2, 2) if x.shape[-1] > 2 else '(..., 2)'} first)",
                            _user_loc())
    if len(x.shape) < 2:
        raise ir.GluonError("split: x is a 1-D tile of 2 elements; its halves would be scalars, which this "
                            "compiler does not give: reshape to (1, 2) and split that", _user_loc())
    t = ir.TileType(x.dtype, x.shape[:-1])
    op = _tr().emit("split", [x], [t, t])
    return Tensor(op.results[0]), Tensor(op.results[1])


def gather(src, index, axis: int) -> Tensor:
    """`out[i][j] = src[index[i][j]][j]` for axis 0 (likewise for any axis and rank): `index` is an integer
    tile of `src`'s rank, of `src`'s size in every other dimension; the result has `index`'s shape (Triton's
    `tl.gather`). Indices outside `src` are undefined, as in Triton."""
    src, index = _tile(src, "gather", "src"), _tile(index, "gather", "index")
    rank = len(src.shape)
    axis = _static_int(axis, "gather's axis")
    if not -rank <= axis < rank:
        raise ir.GluonError(f"gather: axis {axis} is outside src's {rank} dimensions (0..{rank - 1})", _user_loc())
    axis %= rank
    if not index.dtype.is_int or index.dtype.bits == 1:
        raise ir.GluonError(f"gather: index is {index.dtype.name}; it must be an integer tile (gl.int32)",
                            _user_loc())
    if len(index.shape) != rank:
        raise ir.GluonError(f"gather: index is {len(index.shape)}-D {index.shape} but src is {rank}-D {src.shape}; "
                            "they need one rank", _user_loc())
    for d in range(rank):
        if d != axis and index.shape[d] != src.shape[d]:
            raise ir.GluonError(f"gather: index's dim {d} is {index.shape[d]} but src's is {src.shape[d]}; outside "
                                f"the gather axis {axis} they must match", _user_loc())
    return Tensor(_tr().emit("gather", [src, index], [ir.TileType(src.dtype, index.shape)], {"axis": axis}).result)
