"""Rules of the register-tile shape ops: reshape (tt.reshape), trans (tt.trans), join (tt.join), split
(tt.split) and gather (tt.gather).

Triton 3.6's verifier wants the result of reshape, trans, join and split in the layout its own inference
gives for the operand's (equal as linear layouts). So each rule spells the operand's layout as a linear
layout (gluon/linear.py; a layout that is not blocked is first converted to the default blocked one), applies
Triton's inference to it, emits the op with that result layout (`#ttg.linear<...>`) and adds a
`ttg.convert_layout` to the layout the IR gave the result, unless it is the same one; a shape op whose
operand is such a result takes it in the inferred layout (join then reshape: no conversion in between). tt.split needs the
size-2 dimension in register bit 0: a source holding it elsewhere is converted to such a layout first.
tt.gather gives its result in the index's layout: an index in another layout than the IR's result is
converted to it.
"""
from __future__ import annotations

from ...ir import Op, TileType, Value
from ...types import layout_warps
from ... import linear
from .context import KernelLowering
from .literals import dims
from .registry import rule


def _lin_ty(shape, dtype, bases) -> str:
    return f"tensor<{dims(shape)}x{dtype.mlir}, {linear.spell(bases)}>"


def _operand(lw: KernelLowering, v: Value) -> tuple[str, str, linear.Bases]:
    """`v`'s SSA name, type and linear layout, converted to the default blocked layout when not blocked."""
    t = v.type
    held = lw.scopes[-1].inferred.get(v.id)
    if held is not None:            # the result of a shape op: take it in the layout it was inferred in
        return held
    bases = linear.to_linear(t.layout, t.shape)
    if bases is not None:
        return lw.ref(v), lw.ty(t), bases
    from ...passes.layout_assign import default_layout
    warps = layout_warps(t.layout) or lw.cur_warps
    blocked = TileType(t.dtype, t.shape, default_layout(t.shape, warps, max(1, t.dtype.bytes), lw.k.arch.warp_size))
    name = lw.names.fresh(v.name)
    lw.emit(f"{name} = ttg.convert_layout {lw.ref(v)} : {lw.ty(t)} -> {lw.ty(blocked)}")
    return name, lw.ty(blocked), linear.to_linear(blocked.layout, t.shape)


def _result(lw: KernelLowering, res: Value, bases: linear.Bases, emit_op) -> None:
    """Emit `emit_op(name, result_type)` in the inferred layout `bases`, converted to `res`'s layout."""
    t = res.type
    if linear.to_linear(t.layout, t.shape) == bases:
        emit_op(lw.define(res), lw.ty(t))
        return
    tmp, lin = lw.names.fresh(res.name), _lin_ty(t.shape, t.dtype, bases)
    emit_op(tmp, lin)
    _converted(lw, res, tmp, lin, bases)


def _converted(lw: KernelLowering, res: Value, tmp: str, lin: str, bases: linear.Bases) -> None:
    """Define `res` as `tmp` (type `lin`, layout `bases`) converted to `res`'s layout; a shape op using `res`
    takes `tmp` (Triton drops the conversion when nothing else uses it)."""
    lw.emit(f"{lw.define(res)} = ttg.convert_layout {tmp} : {lin} -> {lw.ty(res.type)}")
    lw.scopes[-1].inferred[res.id] = (tmp, lin, bases)


@rule("reshape")
def lower_reshape(lw: KernelLowering, op: Op) -> None:
    (x,) = op.operands
    src, sty, bases = _operand(lw, x)
    out = linear.reshape(bases, x.type.shape, op.result.type.shape)
    _result(lw, op.result, out, lambda n, ty: lw.emit(f"{n} = tt.reshape {src} : {sty} -> {ty}"))


@rule("trans")
def lower_trans(lw: KernelLowering, op: Op) -> None:
    (x,) = op.operands
    order = [int(o) for o in op.attrs["order"]]
    src, sty, bases = _operand(lw, x)
    out = linear.trans(bases, order)
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
    out = linear.join(bases, len(a.type.shape))
    _result(lw, op.result, out, lambda n, ty: lw.emit(f"{n} = tt.join {sa}, {sb} : {sty} -> {ty}"))


@rule("split")
def lower_split(lw: KernelLowering, op: Op) -> None:
    (x,) = op.operands
    src, sty, bases = _operand(lw, x)
    want = linear.splittable(bases)
    if want != bases:
        conv, wty = lw.names.fresh(x.name), _lin_ty(x.type.shape, x.type.dtype, want)
        lw.emit(f"{conv} = ttg.convert_layout {src} : {sty} -> {wty}")
        src, sty = conv, wty
    out = linear.split(want)
    lo, hi = op.results
    if lo.type == hi.type and linear.to_linear(lo.type.layout, lo.type.shape) == out:
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
