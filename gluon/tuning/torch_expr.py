"""The short torch expressions a declarative spec writes for its reference and baseline.

    reference = "torch.softmax(x.float(), dim=-1)"
    baseline = "torch.nn.functional.rms_norm(x, (N,), w, eps)"

An expression is checked when the spec loads (`parse_torch_expr`: Python expression syntax, no lambdas,
comprehensions, assignments, f-strings or names and attributes that start with `_`, so `__class__` and
friends are out of reach) and its free names against what the spec declares (`free_names`). At run time it
is evaluated (`TorchExpr.__call__`) over the kernel's arguments by name (tensors and scalars), the
spec's dims and parameters, and `torch`, `F` (torch.nn.functional) and `math`, with no builtins.

The spec author already names a Python file whose kernel the tuner imports; these checks are not a
sandbox against that author, they keep a spec's text from reaching more than an expression over its own
arguments should.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import Any

# what an expression may name besides the spec's own arguments, dims and parameters
MODULE_NAMES = ("torch", "F", "math")

_ALLOWED = (ast.Expression, ast.Name, ast.Load, ast.Attribute, ast.Call, ast.keyword, ast.Constant, ast.BinOp,
            ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp, ast.Subscript, ast.Slice, ast.Tuple, ast.List,
            ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.Starred)
_NAMES = {"Lambda": "a lambda", "ListComp": "a comprehension", "SetComp": "a comprehension",
          "DictComp": "a comprehension", "GeneratorExp": "a generator expression", "NamedExpr": "an assignment",
          "JoinedStr": "an f-string", "Await": "await", "Yield": "yield", "YieldFrom": "yield", "Dict": "a dict",
          "Set": "a set"}


class TorchExprError(ValueError):
    """An expression that does not parse, uses syntax outside the subset, or names what it may not."""


def _snippet(node: ast.AST, text: str) -> str:
    return ast.get_source_segment(text, node) or ast.unparse(node)


@functools.lru_cache(maxsize=1024)
def parse_torch_expr(text: str) -> ast.Expression:
    """The checked syntax tree of `text`; TorchExprError naming the offending part."""
    if not isinstance(text, str) or not text.strip():
        raise TorchExprError("an empty expression")
    src = text.strip()
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as e:
        where = f" at column {e.offset}" if e.offset else ""
        raise TorchExprError(f"'{src}' does not parse: {(e.msg or 'invalid syntax').split(' (')[0]}{where}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            what = _NAMES.get(type(node).__name__, type(node).__name__)
            raise TorchExprError(f"{what} ('{_snippet(node, src)}') is not allowed in '{src}'; write one "
                                 "expression of calls, attributes, operators, subscripts and constants")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise TorchExprError(f"name '{node.id}' is not allowed in '{src}' (names starting with _ are private)")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise TorchExprError(f"attribute '.{node.attr}' is not allowed in '{src}' (attributes starting with _ "
                                 "are private)")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, complex, str, bool,
                                                                          type(None), type(...))):
            raise TorchExprError(f"constant {node.value!r} is not allowed in '{src}'")
    return tree


def free_names(text: str) -> list[str]:
    """The names `text` reads, in order of first appearance."""
    out: list[str] = []
    for node in ast.walk(parse_torch_expr(text)):
        if isinstance(node, ast.Name) and node.id not in out:
            out.append(node.id)
    return out


def module_env() -> dict[str, Any]:
    """torch, F and math, for evaluating (imports torch)."""
    import math

    import torch
    import torch.nn.functional as F
    return {"torch": torch, "F": F, "math": math}


@dataclass(frozen=True)
class TorchExpr:
    """A checked expression, compiled once; call it with the names it reads."""

    text: str

    def __post_init__(self):
        parse_torch_expr(self.text)

    @functools.cached_property
    def _code(self):
        return compile(parse_torch_expr(self.text), "<spec expression>", "eval")

    def __call__(self, env: dict[str, Any]):
        scope = {**module_env(), **env}
        return eval(self._code, {"__builtins__": {}}, scope)   # noqa: S307 - checked by parse_torch_expr
