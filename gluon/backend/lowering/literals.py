"""MLIR literals: floats, integers and booleans of a dtype, integer arrays and shapes, strings."""
from __future__ import annotations

import math
from typing import Any

from ...types import DType

__all__ = ["float_literal", "int_literal", "scalar_literal", "bool_literal", "int_array", "dims", "mlir_string"]

_FLOAT_SPECIAL = {  # dtype -> (+inf, -inf, nan) bit patterns, as MLIR hexadecimal float literals
    DType.f32: ("0x7F800000", "0xFF800000", "0x7FC00000"),
    DType.f64: ("0x7FF0000000000000", "0xFFF0000000000000", "0x7FF8000000000000"),
    DType.f16: ("0x7C00", "0xFC00", "0x7E00"),
    DType.bf16: ("0x7F80", "0xFF80", "0x7FC0"),
    DType.f8e5m2: ("0x7C", "0xFC", "0x7E"),
    DType.f8e4m3: (None, None, "0x7F"),
}


def float_literal(value: float, dtype: DType = DType.f32) -> str:
    """An MLIR float literal for `value`: `1.000000e+00` (MLIR's own style) when that is exactly
    the value, else Python's shortest round-tripping decimal (`0.1234567891`); inf and nan as the
    target type's hexadecimal bit pattern (`0xFF800000`)."""
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        pinf, ninf, nan = _FLOAT_SPECIAL.get(dtype, _FLOAT_SPECIAL[DType.f32])
        lit = nan if math.isnan(v) else (pinf if v > 0 else ninf)
        if lit is None:
            raise ValueError(f"{dtype.name} cannot represent {v}")
        return lit
    s = f"{v:.6e}"
    if float(s) == v:
        return s
    s = repr(v)
    mant, _, exp = s.partition("e")
    if "." not in mant:
        mant += ".0"
    return mant + ("e" + exp if exp else "")


def int_literal(value: Any, dtype: DType) -> str:
    """An integer literal that fits the signless MLIR type (unsigned values wrap to signed)."""
    v = int(value)
    bits = dtype.bits
    if bits == 1:
        return bool_literal(bool(v))
    v &= (1 << bits) - 1
    if v >= 1 << (bits - 1):
        v -= 1 << bits
    return str(v)


def scalar_literal(value: Any, dtype: DType) -> str:
    if dtype == DType.i1:
        return bool_literal(bool(value))
    if dtype.is_float:
        return float_literal(value, dtype)
    return int_literal(value, dtype)


def bool_literal(b: bool) -> str:
    return "true" if b else "false"


def int_array(xs) -> str:
    """`[1, 2, 3]`, as layout attributes spell their arrays."""
    return "[" + ", ".join(str(int(x)) for x in xs) + "]"


def dims(shape) -> str:
    """`128x64`, the shape part of a tensor or memdesc type."""
    return "x".join(str(int(d)) for d in shape)


def mlir_string(text: str) -> str:
    """`text` as an MLIR string literal: quotes, backslashes and control bytes escaped."""
    out = []
    for b in text.encode():
        c = chr(b)
        if c == '"' or c == "\\":
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\{b:02X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'
