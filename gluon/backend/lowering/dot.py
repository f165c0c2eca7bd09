"""`tt.dot`, the register-operand dot that Ampere's mma and CDNA3's mfma both lower to."""
from __future__ import annotations

from ...ir import Op, TileType
from ...types import DotOperandLayout
from .context import KernelLowering

_INPUT_PRECISION = ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")


def lower_dot(lw: KernelLowering, op: Op, default_precision: str | None) -> None:
    """`tt.dot` of register operands in dot_operand layouts; `default_precision` is the target's
    inputPrecision when the op's attrs give none (Ampere: tf32, CDNA3: none)."""
    a, b, acc = op.operands[:3]
    for v, i in ((a, 0), (b, 1)):
        lay = getattr(v.type, "layout", None)
        if not isinstance(v.type, TileType) or not isinstance(lay, DotOperandLayout) or lay.op_idx != i:
            raise lw.err(f"operand {'AB'[i]} must be a register tile with a dot_operand(op_idx={i}) layout, got {v.type}")
    prec = op.attrs.get("input_precision", default_precision)
    if prec is not None and prec not in _INPUT_PRECISION:
        raise lw.err(f"input_precision {prec!r} is not one of {', '.join(_INPUT_PRECISION)}")
    p = f", inputPrecision = {prec}" if prec and prec != "ieee" else ""
    lw.emit(f"{lw.define(op.result, 'acc')} = tt.dot {lw.ref(a)}, {lw.ref(b)}, {lw.ref(acc)}{p} : "
            f"{lw.ty(a.type)} * {lw.ty(b.type)} -> {lw.ty(op.result.type)}")
