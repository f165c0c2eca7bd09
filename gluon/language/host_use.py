"""Why a GPU value reached Python: the error of `Tensor.__bool__` / `__index__` / `__float__`.

Python asks a value for a bool, an int or a float when the kernel uses it with a host construct:
`while x < n`, builtin `max(a, b)` (which compares, then asks for a bool), `math.exp(x)` (which asks
for a float), `a < n and b < m`. The bare "used as a Python bool" says none of that, so the message
is picked from the user's source line: it names the construct and the DSL's replacement. A line that
matches nothing gets the general message with the common causes listed.
"""
from __future__ import annotations

import re
import sys

from .. import ir
from .tracing import _user_loc

# math.NAME on a GPU value -> the gl builtin that does the same on the GPU
MATH_FUNCTIONS = {"exp": "gl.exp", "exp2": "gl.exp2", "log": "gl.log", "log2": "gl.log2", "sqrt": "gl.sqrt",
                  "sin": "gl.sin", "cos": "gl.cos", "fabs": "gl.abs", "floor": "gl.floor", "ceil": "gl.ceil",
                  "fma": "gl.fma"}

_WHILE = re.compile(r"^\s*while\b")
_MATH = re.compile(r"\bmath\.(\w+)\s*\(")
_MINMAX = re.compile(r"(?<![\w.])(max|min)\s*\(")
_CAST = re.compile(r"(?<![\w.])(float|int|bool)\s*\(")
_LOGIC = re.compile(r"\b(and|or|not)\b")

COMMON_CAUSES = ("common causes: Python's max/min (use gl.maximum/gl.minimum), math.exp/math.sqrt (use gl.exp/"
                 "gl.sqrt), `while` over a GPU value (use a `for` loop with a GPU bound and a mask), "
                 "`and`/`or`/`not` (use `&`/`|`/`~`)")


def _fix(name: str) -> str:
    """The DSL's replacement for math/numpy function `name` on a GPU value."""
    if name in MATH_FUNCTIONS:
        return f"use {MATH_FUNCTIONS[name]}(x)"
    gl = sys.modules["gluon.language"]  # loaded by now (only a traced kernel gets here); importing it would cycle
    if name in ("pow", "power"):
        return "use x * x for a small integer power, or gl.exp2(y * gl.log2(x)) for x > 0"
    if hasattr(gl, name):
        return f"use gl.{name}(x)"
    return (f"gl has no {name}; compose it from gl.exp / gl.log / gl.sqrt (tanh(x) = 1 - 2 / (gl.exp(2 * x) + 1)) "
            "or use gl.inline_asm_elementwise")


def _construct(line: str, need: str) -> str | None:
    """The message for the host construct on `line` that asked a GPU value for a `need` (bool/int/float)."""
    if _WHILE.match(line):
        return ("[GL504] `while` over a GPU value: Python would need the condition on the host, but it exists only on "
                "the GPU; write a `for` loop with a GPU bound (`for i in range(n):`) and mask the elements that "
                "are done (mask= / gl.where), or make the bound a gl.constexpr")
    m = _MATH.search(line)
    if m and need in ("float", "int"):
        name = m.group(1)
        return (f"[GL506] math.{name}() on a GPU value: the math module computes on Python floats on the host; "
                f"{_fix(name)}")
    m = _MINMAX.search(line)
    if m and need == "bool":
        name = m.group(1)
        elementwise = "gl.maximum" if name == "max" else "gl.minimum"
        return (f"[GL505] Python's {name}() on a GPU value: it compares on the host and needs a Python bool; use "
                f"{elementwise}(a, b) elementwise, or gl.{name}(x, axis) to reduce a tile")
    m = _CAST.search(line)
    if m:
        return (f"[GL508] {m.group(1)}() of a GPU value: it exists only on the GPU; convert with x.to(gl.float32) / "
                "x.to(gl.int32), or make it a gl.constexpr if it must be known at trace time")
    m = _LOGIC.search(line)
    if m and need == "bool":
        op = {"and": "&", "or": "|", "not": "~"}[m.group(1)]
        return (f"[GL509] `{m.group(1)}` on a GPU value: Python's `{m.group(1)}` needs a Python bool; combine GPU "
                f"conditions with `{op}` (parenthesized: `(a < n) & (b < m)`)")
    return None


_BUILTIN_FIX = {
    "abs": "use gl.abs(x)",
    "round": "gl has no round; use gl.floor(x + 0.5)",
    "len": "a tile's sizes are compile-time: use x.shape[0] (or the gl.constexpr it was built from)",
    "sum": "use gl.sum(x, axis) to reduce a tile",
    "iter": ("a tile cannot be iterated on the host; index it with gl.arange and masks, or loop with "
             "`for i in range(n)` over offsets"),
}


def builtin_error(name: str) -> ir.GluonError:
    """Python's builtin `name` (abs, round, len, or an iteration: sum, list, `for x in tile`) on a GPU value."""
    loc = _user_loc()
    line = loc.source_line() if loc else ""
    if name == "iter" and re.search(r"(?<![\w.])sum\s*\(", line):
        name = "sum"
    what = "iterating over a GPU value" if name == "iter" else f"Python's {name}() on a GPU value"
    return ir.GluonError(f"[GL507] {what}: it runs on the host, but the value exists only on the GPU; "
                         f"{_BUILTIN_FIX[name]}", loc)


def ufunc_error(name: str) -> ir.GluonError:
    """A numpy ufunc (np.exp, np.maximum, ...) on a GPU value."""
    return ir.GluonError(f"[GL506] numpy.{name}() on a GPU value: numpy computes on host arrays; {_fix(name)}",
                         _user_loc())


def host_use_error(need: str) -> ir.GluonError:
    """The error for a GPU value asked for a Python `need` ("bool", "int" or "float") at the user's line."""
    loc = _user_loc()
    line = loc.source_line() if loc else ""
    specific = _construct(line, need)
    if specific:
        return ir.GluonError(specific, loc)
    if need == "bool":
        general = ("a GPU value was used as a Python bool: use an `if` statement directly in the kernel body or in "
                   "a @gl.helper function (they are rewritten), or gl.where(cond, a, b)")
    elif need == "int":
        general = ("a GPU value was used where Python needs a compile-time integer (a shape, a range for "
                   "static_range, an index); make it a gl.constexpr")
    else:
        general = "a GPU value was used as a Python float; it exists only on the GPU"
    return ir.GluonError(f"[GL510] {general}; {COMMON_CAUSES}", loc)
