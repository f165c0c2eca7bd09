"""IR facts the synchronization passes share (smem_alloc, warp_spec, pipeline).

* `sites(kernel)`: every op with where it sits: its parent region, its position in program order
  (pre-order, so a region op's nested ops come right after it and `end` is its last nested op),
  the `for` loops around it, and the warp role (warp_specialize op + role index) it runs in.
* `expr_key(v)`: a structural key of a pure scalar expression (constants by value, arithmetic by
  operator and operands, anything else by identity), so `0` traced twice, or `ready[s]` indexed
  twice with the same `s`, compare equal.
* `root_of(v)`: the shared region or barrier set a view (`smem_index`, `smem_trans`, `smem_reinterpret`,
  `barrier_index`) is a view of.
* `clone_op`: a copy of an op with its operands mapped (fresh results), for passes that rebuild code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import ir

PURE = ir.kinds("pure")      # no memory or synchronization effect: may be cloned, recomputed, dropped
VIEWS = frozenset({"smem_index", "smem_trans", "smem_reinterpret", "barrier_index"})


@dataclass(eq=False)
class Site:
    op: ir.Op
    region: ir.Region                      # the region whose ops list holds `op`
    index: int                             # position in program order (pre-order)
    end: int                               # last position inside `op` (== index without regions)
    loops: tuple                           # enclosing `for` ops, outermost first
    role: tuple | None                     # (warp_specialize op, role index) of the innermost role, or None
    parents: tuple                         # every enclosing op, outermost first


def sites(kernel: ir.Kernel) -> dict[ir.Op, Site]:
    out: dict[ir.Op, Site] = {}
    counter = [0]

    def visit(region: ir.Region, loops: tuple, role, parents: tuple) -> None:
        for op in region.ops:
            site = Site(op, region, counter[0], counter[0], loops, role, parents)
            counter[0] += 1
            out[op] = site
            inner_loops = loops + (op,) if op.kind == "for" else loops
            for i, r in enumerate(op.regions):
                inner_role = (op, i) if op.kind == "warp_specialize" else role
                visit(r, inner_loops, inner_role, parents + (op,))
            site.end = counter[0] - 1

    visit(kernel.body, (), None, ())
    return out


def _attrs_key(attrs: dict) -> str:
    return repr(sorted((k, v) for k, v in attrs.items() if not k.startswith("_")))


def expr_key(v: ir.Value, _depth: int = 0) -> Any:
    """Equal keys mean the two values are computed the same way from the same inputs."""
    o = v.owner
    if isinstance(o, ir.Op) and o.kind in PURE and _depth < 48:
        return (o.kind, _attrs_key(o.attrs), str(v.type), tuple(expr_key(x, _depth + 1) for x in o.operands))
    return ("value", v.id)


def const_value(v: ir.Value):
    """The literal of a scalar `constant`, else None."""
    o = v.owner
    if isinstance(o, ir.Op) and o.kind == "constant" and isinstance(v.type, ir.ScalarType):
        return o.attrs.get("value")
    return None


def root_of(v: ir.Value) -> ir.Value:
    """The allocated region / barrier set that `v` is a view of (`v` itself when it is one)."""
    while isinstance(v.owner, ir.Op) and v.owner.kind in VIEWS:
        v = v.owner.operands[0]
    return v


def alloc_name(v: ir.Value) -> str:
    """A readable name of an allocated region or barrier set."""
    o = v.owner
    if isinstance(o, ir.Op):
        n = o.attrs.get("name")
        if n:
            return str(n)
    return v.name or f"%{v.id}"


_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "//", "floordiv": "//", "rem": "%", "and": "&", "or": "|",
            "xor": "^", "shl": "<<", "shr": ">>"}


def expr_str(v: ir.Value, _depth: int = 0) -> str:
    """A short rendering of a scalar expression: `i % 3`, `(i // 3) & 1`, a value's name, a literal."""
    c = const_value(v)
    if c is not None:
        return str(c)
    o = v.owner
    if v.name or not isinstance(o, ir.Op):
        return v.name or "?"
    if o.kind == "binary" and o.attrs.get("op") in _SYMBOLS and _depth < 3:
        a, b = (expr_str(x, _depth + 1) for x in o.operands)
        text = f"{a} {_SYMBOLS[o.attrs['op']]} {b}"
        return f"({text})" if _depth else text
    if o.kind == "cast" and _depth < 3:
        return expr_str(o.operands[0], _depth)
    return "?"


def view_name(v: ir.Value) -> str:
    """`ready[i % 3]`-style name of a view."""
    o = v.owner
    if isinstance(o, ir.Op) and o.kind in ("smem_index", "barrier_index"):
        return f"{view_name(o.operands[0])}[{expr_str(o.operands[1])}]"
    if isinstance(o, ir.Op) and o.kind == "smem_trans":
        return view_name(o.operands[0]) + ".T"
    if isinstance(o, ir.Op) and o.kind == "smem_reinterpret":
        t = o.results[0].type
        return f"{view_name(o.operands[0])}.reinterpret({'x'.join(map(str, t.shape))}, stages={t.stages})"
    return alloc_name(v)


def clone_op(op: ir.Op, mapping: dict[int, ir.Value], loc: ir.Loc | None = None) -> ir.Op:
    """A copy of a region-less op with operands looked up in `mapping` (value id -> value); its
    fresh results are added to `mapping`."""
    if op.regions:
        raise ValueError(f"clone_op: {op.kind} has regions")
    new = ir.Op(op.kind, [mapping.get(v.id, v) for v in op.operands], [], dict(op.attrs), [], loc or op.loc)
    new.results = [ir.Value(r.type, r.name, owner=new) for r in op.results]
    for old, fresh in zip(op.results, new.results):
        mapping[old.id] = fresh
    return new


def users(kernel: ir.Kernel) -> dict[int, list[ir.Op]]:
    """value id -> ops that use it as an operand."""
    out: dict[int, list[ir.Op]] = {}
    for op in kernel.walk():
        for v in op.operands:
            out.setdefault(v.id, []).append(op)
    return out


def barrier_key(v: ir.Value):
    """One key per barrier: its set and the structure of its index (None for a 1-barrier set)."""
    o = v.owner
    if isinstance(o, ir.Op) and o.kind == "barrier_index":
        return (root_of(v).id, expr_key(o.operands[1]))
    return (root_of(v).id, None)
