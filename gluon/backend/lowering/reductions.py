"""Rules of the combine-region ops and the histogram: `"tt.reduce"` and `"tt.scan"` with the traced combine
body in their region (`tt.reduce.return` / `tt.scan.return` from its closing yield), and `tt.histogram`,
as Triton 3.6 prints them:

    %v, %i = "tt.reduce"(%x, %idx) <{axis = 1 : i32}> ({
    ^bb0(%x_l: f32, %idx_l: i32, %x_r: f32, %idx_r: i32):
      ...
      tt.reduce.return %a, %b : f32, i32
    }) : (tensor<..>, tensor<..>) -> (tensor<..>, tensor<..>)
    %s = "tt.scan"(%x) <{axis = 0 : i32, reverse = false}> ({ ... tt.scan.return %t : f32 }) : (..) -> ..
    %h = tt.histogram %x, %mask : tensor<128xi32, #blocked> -> tensor<16xi32, #blocked1>

The combine region is lowered as its own constant scope: a constant it uses is materialized at its start,
not hoisted out of it (the region only ever sees its own arguments and values).
"""
from __future__ import annotations

from ...ir import Op
from .context import KernelLowering
from .registry import rule


def _combine_op(lw: KernelLowering, op: Op, mnemonic: str, attrs: str, hint: str) -> None:
    ins = op.operands
    refs = [lw.ref(v) for v in ins]
    res = [lw.define(r, hint) for r in op.results]
    body = op.regions[0]
    lw.emit(f'{", ".join(res)} = "{mnemonic}"({", ".join(refs)}) <{{{attrs}}}> ({{')
    scope = lw.push_scope()
    scope.depth = lw.depth + 1
    args = [f"{lw.define(a)}: {lw.ty(a.type)}" for a in body.args]
    lw.emit(f"^bb0({', '.join(args)}):")
    scope.insert_at = len(lw.lines)
    lw.depth += 1

    def on_yield(y: Op) -> None:
        lw.emit(f"{mnemonic}.return {', '.join(lw.ref(v) for v in y.operands)} : "
                f"{', '.join(lw.ty(v.type) for v in y.operands)}")

    if not body.ops or body.ops[-1].kind != "yield":
        raise lw.err("the combine region must end with a yield")
    try:
        lw.lower_region(body, on_yield)
    finally:
        lw.depth -= 1
        lw.pop_scope()
    in_t = ", ".join(lw.ty(v.type) for v in ins)
    out = [lw.ty(r.type) for r in op.results]
    out_t = out[0] if len(out) == 1 else f"({', '.join(out)})"
    lw.emit(f"}}) : ({in_t}) -> {out_t}")


@rule("reduce_fn")
def lower_reduce_fn(lw: KernelLowering, op: Op) -> None:
    _combine_op(lw, op, "tt.reduce", f"axis = {int(op.attrs['axis'])} : i32", "red")


@rule("scan")
def lower_scan(lw: KernelLowering, op: Op) -> None:
    rev = "true" if op.attrs["reverse"] else "false"
    _combine_op(lw, op, "tt.scan", f"axis = {int(op.attrs['axis'])} : i32, reverse = {rev}", "scan")


@rule("histogram")
def lower_histogram(lw: KernelLowering, op: Op) -> None:
    x = op.operands[0]
    ops = ", ".join(lw.ref(v) for v in op.operands)
    lw.emit(f"{lw.define(op.result, 'hist')} = tt.histogram {ops} : {lw.ty(x.type)} -> {lw.ty(op.result.type)}")
