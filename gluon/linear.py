"""Register layouts as Triton's linear layouts, and what Triton's layout inference makes of them through
reshape, trans, join and split.

A linear layout maps the bits of (register, lane, warp) indices to tensor coordinates: each in-dimension has
one basis per bit, a coordinate vector (one int per tensor dimension); an index's coordinates are the XOR of
the bases of its set bits. This is how Triton 3.6 compares layouts (`#ttg.linear<{register = ..., lane = ...,
warp = ..., block = []}>`), and how it infers the result layouts of the shape ops: a reshape keeps every
element in its register (the flat row-major index of each basis, re-split over the new shape), a trans
permutes the coordinates, a join adds its new minor dimension as register bit 0, a split removes it again.

`to_linear(layout, shape)` spells the blocked layouts (and slices of them) the way Triton's
`toLinearLayout` does, bit for bit (tests/test_shapes.py checks it against Triton's own conversion), and a
`LinearLayout` as itself; other layouts return None and the rules convert the tile to a blocked layout first.
`infer(op, operand layout)` is the result layout of a shape op (the layout pass gives it to open results).
"""
from __future__ import annotations

from .types import BlockedLayout, Layout, LinearLayout, SliceLayout

Bases = dict[str, list[list[int]]]
IN_DIMS = ("register", "lane", "warp")


def _log2(n: int) -> int:
    return n.bit_length() - 1


def _blocked(lay: BlockedLayout, shape: tuple[int, ...]) -> Bases:
    rank = len(shape)
    order = tuple(lay.order) if lay.order else tuple(range(rank - 1, -1, -1))

    def unit(dim: int, v: int) -> list[int]:
        b = [0] * rank
        b[dim] = v
        return b

    out: Bases = {}
    size = [1] * rank                       # the CTA tile's extent so far, per dimension
    for name, per in zip(IN_DIMS, (lay.size_per_thread, lay.threads_per_warp, lay.warps_per_cta)):
        out[name] = []
        for d in order:
            for _ in range(_log2(per[d])):
                out[name].append(unit(d, size[d]))
                size[d] *= 2
    # Larger than the shape: the bases past it broadcast (0), as ensureLayoutNotLargerThan does.
    for name in IN_DIMS:
        out[name] = [[c if c < shape[d] else 0 for d, c in enumerate(b)] for b in out[name]]
    # Smaller than the shape: more registers, minor dimension first (ensureLayoutNotSmallerThan).
    for d in order:
        while size[d] < shape[d]:
            out["register"].append(unit(d, size[d]))
            size[d] *= 2
    return out


def to_linear(layout: Layout | None, shape: tuple[int, ...]) -> Bases | None:
    """`layout` over `shape` as linear-layout bases (Triton's), or None when not a blocked layout or a slice
    of one."""
    if isinstance(layout, BlockedLayout) and len(layout.size_per_thread) == len(shape):
        return _blocked(layout, tuple(shape))
    if isinstance(layout, LinearLayout) and layout.rank == len(shape):
        return {k: [list(b) for b in getattr(layout, k)] for k in IN_DIMS}
    if isinstance(layout, SliceLayout):
        pshape = list(shape)
        pshape.insert(layout.dim, 1)
        parent = to_linear(layout.parent, tuple(pshape))
        if parent is None:
            return None
        out = {k: [b[:layout.dim] + b[layout.dim + 1:] for b in v] for k, v in parent.items()}
        out["register"] = [b for b in out["register"] if any(b)]   # registers holding the same element go
        return out
    return None


def _flat(b: list[int], shape) -> int:
    f = 0
    for c, n in zip(b, shape):
        f = f * n + c
    return f


def _unflat(f: int, shape) -> list[int]:
    out = []
    for n in reversed(shape):
        out.append(f % n)
        f //= n
    return out[::-1]


def reshape(bases: Bases, src_shape, dst_shape) -> Bases:
    """The same elements in the same registers, lanes and warps, indexed by `dst_shape` (row-major)."""
    return {k: [_unflat(_flat(b, src_shape), dst_shape) for b in v] for k, v in bases.items()}


def trans(bases: Bases, order) -> Bases:
    """Result dimension i is source dimension order[i]."""
    return {k: [[b[o] for o in order] for b in v] for k, v in bases.items()}


def join(bases: Bases, rank: int) -> Bases:
    """A new minor dimension of size 2 after the source's `rank` ones, held in register bit 0."""
    out = {k: [b + [0] for b in v] for k, v in bases.items()}
    out["register"] = [[0] * rank + [1]] + out["register"]
    return out


def splittable(bases: Bases) -> Bases:
    """`bases` (last dimension of size 2) with that dimension's basis moved to register bit 0, where
    tt.split needs it: the layout to convert to before a split (the same layout when it is there already)."""
    out = {k: [list(b) for b in v] for k, v in bases.items()}
    where = [(k, i) for k in IN_DIMS for i, b in enumerate(out[k]) if b[-1]]
    k, i = where[0]
    b = out[k][i]
    # the last dimension's basis may also carry other coordinates only in odd layouts; keep it a unit vector
    unit = [0] * (len(b) - 1) + [1]
    if k == "register":
        del out["register"][i]
    elif out["register"]:
        out[k][i] = out["register"].pop(0)
    else:
        out[k][i] = [0] * len(b)
    out["register"].insert(0, unit)
    return out


def split(bases: Bases) -> Bases:
    """The halves' layout: register bit 0 (the last dimension, see `splittable`) removed."""
    out = {k: [b[:-1] for b in v] for k, v in bases.items()}
    out["register"] = out["register"][1:]
    return out


def as_layout(bases: Bases, rank: int) -> LinearLayout:
    return LinearLayout(*(tuple(tuple(b) for b in bases[k]) for k in IN_DIMS), rank)


def spell(bases: Bases) -> str:
    parts = ", ".join(f"{k} = [{', '.join('[' + ', '.join(map(str, b)) + ']' for b in bases[k])}]" for k in IN_DIMS)
    return f"#ttg.linear<{{{parts}, block = []}}>"


def infer(kind: str, attrs: dict, in_shape, out_shape, layout: Layout | None) -> Bases | None:
    """The linear layout Triton infers for the result of shape op `kind` whose (first) operand is in `layout`
    (None when that layout has no linear form here); for split, after the move `splittable` makes."""
    bases = to_linear(layout, tuple(in_shape)) if layout is not None else None
    if bases is None:
        return None
    if kind == "reshape":
        return reshape(bases, in_shape, out_shape)
    if kind == "trans":
        return trans(bases, attrs["order"])
    if kind == "join":
        return join(bases, len(in_shape))
    if kind == "split":
        return split(splittable(bases))
    return None
