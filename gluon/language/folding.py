"""The value of a GPU integer scalar when the trace already knows it, so that an `if` on it branches in
Python (control.py's `is_static`) instead of becoming a GPU `if` with a dead side.

Why: `n % VEC` with VEC = 1 is 0 whatever n is, and Triton proves it too. Triton 3.6's axis analysis
never visits a branch it has proven dead, and lowering a load or store there trips an assertion
(`idx < size()` in ModuleAxisInfoAnalysis::getAlignment); its own frontend removes such branches with
canonicalize before that stage, and we hand it TTGIR after it. The LOOPED softmax with VEC=1 hit it.

This is an analysis only: the IR is not rewritten, so kernels without such conditions compile to the
same TTGIR. It reads integer scalars (not tiles, not floats) through constants, comparisons and the
binary ops, with the rules that make a value known whatever the unknown operand is (`x % 1`, `x * 0`,
`x & 0`) and plain arithmetic where both operands are known (division truncates, as on the GPU; a
result the type cannot hold is left unknown, since the GPU wraps it).
"""
from __future__ import annotations

from .. import ir

_DEPTH = 32            # operands followed at most this deep: conditions are short expressions

_EXACT = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "min": min, "max": max,
}
_CMP = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def compute(op: str, a: int, b: int) -> int | None:
    """`a op b` as the GPU's integer op computes it (before wrapping), or None for ops not folded."""
    if op in _EXACT:
        return _EXACT[op](a, b)
    if op in ("floordiv", "div", "rem") and b != 0:
        q = _trunc_div(a, b)
        return q if op != "rem" else a - q * b
    return None


def _is_int_scalar(v: ir.Value) -> bool:
    return isinstance(v.type, ir.ScalarType) and not v.type.dtype.is_float


def known(value: ir.Value, depth: int = _DEPTH) -> int | None:
    """The value of integer scalar `value` (bools as 0/1) if the trace determines it, else None."""
    op = value.owner
    if depth <= 0 or not isinstance(op, ir.Op) or not _is_int_scalar(value):
        return None
    if op.kind == "constant":
        return int(op.attrs["value"])
    if op.kind not in ("binary", "cmp") or not all(_is_int_scalar(o) for o in op.operands):
        return None
    a, b = (known(o, depth - 1) for o in op.operands)
    if op.kind == "cmp":
        if a is None or b is None or op.attrs["pred"] not in _CMP:
            return None
        return int(_CMP[op.attrs["pred"]](a, b))
    kind = op.attrs["op"]
    if a is None or b is None:
        if b == 1 and kind == "rem":
            return 0
        if 0 in (a, b) and kind in ("mul", "and"):
            return 0
        return None
    r = compute(kind, a, b)
    lo, hi = value.type.dtype.int_range
    return r if r is not None and lo <= r <= hi else None


def truth(value: ir.Value) -> bool | None:
    """`if x:` of a GPU scalar the trace knows (x != 0), else None."""
    k = known(value)
    return None if k is None else k != 0
