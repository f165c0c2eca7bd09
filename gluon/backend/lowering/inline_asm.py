"""Rule of inline assembly: `tt.elementwise_inline_asm "<asm>" {constraints, packed_element, pure} args : types
-> result types`, scalar arguments splatted to the result's tile (a scalar result without arguments)."""
from __future__ import annotations

from ...ir import Op, TileType
from .context import KernelLowering
from .literals import mlir_string
from .registry import rule


def _lower(lw: KernelLowering, op: Op, pure: bool) -> None:
    like = next((r.type for r in op.results if isinstance(r.type, TileType)), None)
    arg_types = [TileType(v.type.dtype, like.shape, like.layout) if like is not None else v.type for v in op.operands]
    args = [lw.ref_as(v, t) for v, t in zip(op.operands, arg_types)]
    arg_tys = [lw.ty(t) for t in arg_types]
    res_tys = [lw.ty(r.type) for r in op.results]
    attrs = (f"{{constraints = {mlir_string(op.attrs['constraints'])}, packed_element = {op.attrs['pack']} : i32, "
             f"pure = {'true' if pure else 'false'}}}")
    if len(op.results) == 1:
        lhs = lw.define(op.result, "asm")
    else:                               # %asm:2 = ...; the results are %asm#0, %asm#1
        base = lw.names.fresh("asm")
        lhs = f"{base}:{len(op.results)}"
        for i, r in enumerate(op.results):
            lw.alias_value(r, f"{base}#{i}")
    ins = f" {', '.join(args)} : {', '.join(arg_tys)}" if args else ""
    lw.emit(f"{lhs} = tt.elementwise_inline_asm {mlir_string(op.attrs['asm'])} {attrs}{ins} -> {', '.join(res_tys)}")


@rule("inline_asm")
def lower_inline_asm(lw: KernelLowering, op: Op) -> None:
    _lower(lw, op, pure=False)


@rule("inline_asm_pure")
def lower_inline_asm_pure(lw: KernelLowering, op: Op) -> None:
    _lower(lw, op, pure=True)
