"""What the matrix-multiply builtins of every arch share (wgmma, mma, mfma).

The accumulator (a tile, or the name of an in-place one: `acc="acc"`, zero-initialised at the top of
the innermost warp role on first use so loops can carry it), a product's M x N, and the register
operand dot of `mma` / `mfma` (operands converted to dot-operand layouts of the accumulator's).
"""
from __future__ import annotations

from .. import ir
from ..types import DotOperandLayout, DType, Layout
from .core import Tensor, convert_layout
from .memory import Shared
from .tracing import _tr, _user_loc


def _k_width(dtype: DType) -> int:
    return 32 // dtype.bits


def _accumulator(acc, m: int, n: int, layout: Layout) -> tuple[Tensor, str | None]:
    """Resolve `acc`: a tile, or the name of an in-place accumulator (zero-initialised on first use)."""
    t = _tr()
    if isinstance(acc, Tensor):
        return acc, None
    if not isinstance(acc, str):
        raise ir.GluonError("the accumulator must be a tile or the name of one ('acc')", _user_loc())
    if acc in t.named:
        return t.named[acc], acc
    # Hoist the zero-init to the top of the innermost warp role (or the kernel) so loops can carry it.
    region = t.scope_region
    op = ir.Op("constant", [], [], {"value": 0.0}, [], _user_loc())
    op.results = [ir.Value(ir.TileType(DType.f32, (m, n), layout), acc, owner=op)]
    region.ops.insert(0, op)
    v = Tensor(op.results[0])
    t.named[acc] = v
    t.named_init[acc] = v.value
    return v, acc


def _dot_shapes(a, b) -> tuple[int, int]:
    return a.shape[0], b.shape[-1]


def _register_dot(kind: str, a, b, acc, acc_layout: Layout, k_width: int) -> Tensor:
    t = _tr()
    m, n = _dot_shapes(a, b)
    acc_t, name = _accumulator(acc, m, n, acc_layout)
    ops = []
    for idx, x in enumerate((a, b)):
        want = DotOperandLayout(idx, acc_t.layout, k_width)
        if isinstance(x, Shared):
            x = x.load(want)
        elif x.layout != want:
            x = convert_layout(x, want)
        ops.append(x)
    r = Tensor(t.emit(kind, [*ops, acc_t], [acc_t.type], names=[name or "acc"]).result)
    if name:
        t.named[name] = r
    return r
