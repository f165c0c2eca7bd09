"""Rules of the register-tile shape ops: reshape (tt.reshape), trans (tt.trans), join (tt.join), split
(tt.split) and gather (tt.gather).

Triton 3.6's verifier wants the result of reshape, trans, join and split in the layout its own inference
gives for the operand's (equal as linear layouts). The layout pass gives open results exactly that layout
(types.linear_infer, a `LinearLayout`); each rule spells the operand's layout as a linear layout (to_linear;
a layout with no linear form here, an MMA accumulator say, is first converted to a blocked one), applies
Triton's inference, and emits the op in the IR's result layout when it is that one, else in the inferred
`#ttg.linear` layout followed by a `ttg.convert_layout` to the IR's. A shape op whose operand is such a
converted result takes it in the inferred layout (no conversion between chained shape ops). tt.split
needs the size-2 dimension in register bit 0: a source holding it elsewhere is converted first. tt.gather
gives its result in the index's layout (the layout pass unifies them; an index in another layout is
converted).
"""
from __future__ import annotations

from ...ir import Op, TileType, Value
from ...types import (BlockedLayout, LinearBases, layout_warps, linear_join, linear_reshape, linear_spell,
                      linear_split, linear_splittable, linear_trans, to_linear)
from .context import KernelLowering
from .literals import dims
from .registry import rule


def _lin_ty(shape, dtype, bases) -> str:
    return f"tensor<{dims(shape)}x{dtype.mlir}, {linear_spell(bases)}>"


def _blocked(shape, warps: int, warp_size: int) -> BlockedLayout:
    """A blocked layout for `shape`: lanes along the minor dimensions, warps along the major ones."""
    rank = len(shape)
    tpw, wpc, lanes = [1] * rank, [1] * rank, warp_size
    for d in reversed(range(rank)):
        tpw[d] = min(lanes, shape[d])
        lanes //= tpw[d]
    tpw[0] *= lanes
    for d in range(rank):
        wpc[d] = min(warps, max(1, shape[d] // tpw[d]))
        warps //= wpc[d]
    wpc[0] *= warps
    return BlockedLayout((1,) * rank, tuple(tpw), tuple(wpc), tuple(reversed(range(rank))))


def _operand(lw: KernelLowering, v: Value) -> tuple[str, str, LinearBases]:
    """`v`'s SSA name, type and linear layout, converted to the default blocked layout when not blocked."""
    t = v.type
    held = lw.scopes[-1].inferred.get(v.id)
    if held is not None:            # the result of a shape op: take it in the layout it was inferred in
        return held
    bases = to_linear(t.layout, t.shape)
    if bases is not None:
        return lw.ref(v), lw.ty(t), bases
    blocked = TileType(t.dtype, t.shape, _blocked(t.shape, layout_warps(t.layout) or lw.cur_warps, lw.warp_size))
    name = lw.names.fresh(v.name)
    lw.emit(f"{name} = ttg.convert_layout {lw.ref(v)} : {lw.ty(t)} -> {lw.ty(blocked)}")
    return name, lw.ty(blocked), to_linear(blocked.layout, t.shape)


def _result(lw: KernelLowering, res: Value, bases: LinearBases, emit_op) -> None:
    """Emit `emit_op(name, result_type)` in the inferred layout `bases`, converted to `res`'s layout."""
    t = res.type
    if to_linear(t.layout, t.shape) == bases:
        emit_op(lw.define(res), lw.ty(t))
        return
    tmp, lin = lw.names.fresh(res.name), _lin_ty(t.shape, t.dtype, bases)
    emit_op(tmp, lin)
    _converted(lw, res, tmp, lin, bases)


def _converted(lw: KernelLowering, res: Value, tmp: str, lin: str, bases: LinearBases) -> None:
    """Define `res` as `tmp` (type `lin`, layout `bases`) converted to `res`'s layout; a shape op using `res`
    takes `tmp` (Triton drops the conversion when nothing else uses it)."""
    lw.emit(f"{lw.define(res)} = ttg.convert_layout {tmp} : {lin} -> {lw.ty(res.type)}")
    lw.scopes[-1].inferred[res.id] = (tmp, lin, bases)


@rule("reshape")
def lower_reshape(lw: KernelLowering, op: Op) -> None:
    (x,) = op.operands
    src, sty, bases = _operand(lw, x)
    out = linear_reshape(bases, x.type.shape, op.result.type.shape)
    _result(lw, op.result, out, lambda n, ty: lw.emit(f"{n} = tt.reshape {src} : {sty} -> {ty}"))


@rule("trans")
def lower_trans(lw: KernelLowering, op: Op) -> None:
    (x,) = op.operands
    order = [int(o) for o in op.attrs["order"]]
    src, sty, bases = _operand(lw, x)
    out = linear_trans(bases, order)
    _result(lw, op.result, out, lambda n, ty: lw.emit(
        f"{n} = tt.trans {src} {{order = array<i32: {', '.join(map(str, order))}>}} : {sty} -> {ty}"))


@rule("join")
def lower_join(lw: KernelLowering, op: Op) -> None:
    a, b = op.operands
    sa, sty, bases = _operand(lw, a)
    sb, bty, bb = _operand(lw, b)
    if bty != sty:
        conv = lw.names.fresh(b.name)
        lw.emit(f"{conv} = ttg.convert_layout {sb} : {bty} -> {sty}")
        sb = conv
    out = linear_join(bases, len(a.type.shape))
    _result(lw, op.result, out, lambda n, ty: lw.emit(f"{n} = tt.join {sa}, {sb} : {sty} -> {ty}"))


@rule("split")
def lower_split(lw: KernelLowering, op: Op) -> None:
    (x,) = op.operands
    src, sty, bases = _operand(lw, x)
    want = linear_splittable(bases)
    if want != bases:
        conv, wty = lw.names.fresh(x.name), _lin_ty(x.type.shape, x.type.dtype, want)
        lw.emit(f"{conv} = ttg.convert_layout {src} : {sty} -> {wty}")
        src, sty = conv, wty
    out = linear_split(want)
    lo, hi = op.results
    if lo.type == hi.type and to_linear(lo.type.layout, lo.type.shape) == out:
        lw.emit(f"{lw.define(lo, 'lo')}, {lw.define(hi, 'hi')} = tt.split {src} : {sty} -> {lw.ty(lo.type)}")
        return
    halves = _lin_ty(lo.type.shape, lo.type.dtype, out)
    names = [lw.names.fresh(lo.name or "lo"), lw.names.fresh(hi.name or "hi")]
    lw.emit(f"{names[0]}, {names[1]} = tt.split {src} : {sty} -> {halves}")
    for res, name in zip((lo, hi), names):
        _converted(lw, res, name, halves, out)


@rule("gather")
def lower_gather(lw: KernelLowering, op: Op) -> None:
    src, idx = op.operands
    res = op.result
    axis = int(op.attrs["axis"])
    iname = lw.ref(idx)
    ity = TileType(idx.type.dtype, idx.type.shape, res.type.layout)
    if idx.type.layout != res.type.layout:
        conv = lw.names.fresh(idx.name)
        lw.emit(f"{conv} = ttg.convert_layout {iname} : {lw.ty(idx.type)} -> {lw.ty(ity)}")
        iname = conv
    lw.emit(f"{lw.define(res)} = tt.gather {lw.ref(src)}[{iname}] {{axis = {axis} : i32}} : "
            f"({lw.ty(src.type)}, {lw.ty(ity)}) -> {lw.ty(res.type)}")
