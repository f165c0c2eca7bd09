"""The IR's text form (Module.pretty / str(module)): one line per op, `%name = kind operands {attrs} : types
// loc`, nested regions indented, values named after the user's variables where known.

Split out of gluon.ir so that ir.py stays the registry; it reads only gluon.ir_types.
"""
from __future__ import annotations

from typing import Any

from .ir_types import Kernel, Op, Region, Value


class _Namer:
    """Readable, unique value names: the user's variable name, suffixed when taken."""

    def __init__(self):
        self.names: dict[int, str] = {}
        self.taken: set[str] = set()
        self.anon = 0

    def __call__(self, v: Value) -> str:
        n = self.names.get(v.id)
        if n is None:
            base = v.name
            if not base:
                base, self.anon = str(self.anon), self.anon + 1
            n, k = base, 0
            while n in self.taken:
                k += 1
                n = f"{base}_{k}"
            self.taken.add(n)
            self.names[v.id] = n
        return "%" + n


def _fmt_attr(v: Any) -> str:
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt_attr(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}={_fmt_attr(x)}" for k, x in v.items()) + "}"
    return str(v)


def print_kernel(k: Kernel) -> str:
    name = _Namer()
    params = ", ".join(f"{name(p.value)}: {p.value.type}" for p in k.params)
    attrs = "".join(f" {a}={_fmt_attr(v)}" for a, v in k.attrs.items())
    lines = [f"kernel @{k.name}({params}) arch={k.arch} num_warps={k.num_warps}{attrs} {{"]
    _print_region(k.body, name, lines, 1)
    lines.append("}")
    return "\n".join(lines)


def _print_region(r: Region, name: _Namer, lines: list[str], depth: int) -> None:
    pad = "  " * depth
    for op in r.ops:
        res = ", ".join(name(v) for v in op.results)
        lhs = f"{res} = " if res else ""
        ops = ", ".join(name(v) for v in op.operands)
        attrs = ("{" + ", ".join(f"{a}={_fmt_attr(v)}" for a, v in op.attrs.items()) + "}") if op.attrs else ""
        types = " : " + ", ".join(str(v.type) for v in op.results) if op.results else ""
        loc = f"  // {op.loc}" if op.loc else ""
        head = f"{pad}{lhs}{op.kind}"
        if ops:
            head += " " + ops
        if attrs:
            head += " " + attrs
        if not op.regions:
            lines.append(f"{head}{types}{loc}")
            continue
        for i, reg in enumerate(op.regions):
            args = ", ".join(f"{name(a)}: {a.type}" for a in reg.args)
            label = _region_label(op, i)
            opener = f"{head}{types} {label}" if i == 0 else f"{pad}}} {label}"
            lines.append(f"{opener}({args}) {{{loc if i == 0 else ''}" if args else f"{opener}{{{loc if i == 0 else ''}")
            _print_region(reg, name, lines, depth + 1)
        lines.append(f"{pad}}}")


def _region_label(op: Op, i: int) -> str:
    if op.kind == "if":
        return "then " if i == 0 else "else "
    if op.kind == "warp_specialize":
        role = op.attrs["roles"][i]
        return f"role {role['role']} warps{list(role['warps'])} "
    return ""
