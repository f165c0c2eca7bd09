"""Pass: give every register tile a layout.

The explicit form names layouts; the SIMT form (`gl.thread_id`, `gl.arange` without a layout) leaves
them open. Triton's own frontend picks layouts in TTIR->TTGIR conversion and coalescing passes that do
not run when we hand it TTGIR, so we choose them here:

1. Values that must share a layout (elementwise operands and results, load/store address/mask/value,
   loop-carried values and branch results) are unified into classes.
2. Known layouts flow across `reduce` and `reduce_fn` (result = slice of input; a `reduce_fn`'s
   inputs share one layout, as do its results) and `expand_dims` (input = slice of result), and from
   the operand of a shape op (reshape, trans, join, split) to its open result, which takes the layout
   Triton infers (types.linear_infer; a `LinearLayout`), until nothing changes. A `scan` keeps its
   inputs' layout (same_layout); a `histogram`'s counts get the default layout for their shape, its
   mask the values' layout. A gather's result is in its index's layout (step 1).
3. Open classes that address global memory (load/store/cp.async offsets) are decided first, with
   the default blocked layout for their shape: each thread owns one 16-byte vector of the element
   loaded or stored (so accesses vectorize), threads then warps tile the rest. Then step 2 runs,
   then any class still open gets the default too, highest rank first.
4. Where a value reaches `expand_dims` in a layout other than the slice it needs (the same `arange`
   used for A's rows and C's rows), or a store's value is in another layout than its addresses (an
   MMA accumulator written to memory), a `convert_layout` is inserted; likewise an atomic's values
   (its old values come back in the address layout, as a load's do), and around a `scan` of tiles
   that are not in a blocked layout (Triton 3.6 scans only those).
"""
from __future__ import annotations

import math

from .. import ir
from ..types import BlockedLayout, Layout, SliceLayout, linear_infer, linear_layout

_SAME = ir.kinds("same_layout")      # result tile in its tile operands' layout
_ATOMICS = {"atomic_rmw": 1, "atomic_cas": 2}   # how many value operands follow (ptr, offsets)
_MEMORY = ("load", "store", "cp_async", *_ATOMICS)   # ops that address global memory (their offsets anchor)
_SHAPE = ("reshape", "trans", "join", "split")   # result layout: Triton's inference from the operand's (linear_infer)


class _UF:
    def __init__(self):
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        p = self.parent.setdefault(x, x)
        if p != x:
            p = self.parent[x] = self.find(p)
        return p

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def _tiles(values) -> list[ir.Value]:
    return [v for v in values if isinstance(v.type, ir.TileType)]


def default_layout(shape: tuple[int, ...], warps: int, elem_bytes: int, warp_size: int = 32) -> BlockedLayout:
    """Blocked layout for `shape`: 16-byte vectors per thread along the last dim, row-major order."""
    rank = len(shape)
    vec = max(1, 16 // max(1, elem_bytes))
    inner = shape[-1]
    if rank == 1:
        spt_inner = max(1, min(vec, inner // (warp_size * warps)))
    else:
        spt_inner = max(1, min(vec, inner))
    if rank == 1:
        return BlockedLayout((spt_inner,), (warp_size,), (warps,), (0,))
    tpw_inner = max(1, min(warp_size, inner // spt_inner))
    tpw_outer = warp_size // tpw_inner
    outer = 1
    for d in shape[:-1]:
        outer *= d
    wpc_outer = max(1, min(warps, max(1, shape[-2] // tpw_outer)))
    while warps % wpc_outer:
        wpc_outer -= 1
    wpc_inner = warps // wpc_outer
    spt = (1,) * (rank - 1) + (spt_inner,)
    tpw = (1,) * (rank - 2) + (tpw_outer, tpw_inner)
    wpc = (1,) * (rank - 2) + (wpc_outer, wpc_inner)
    order = tuple(range(rank - 1, -1, -1))
    return BlockedLayout(spt, tpw, wpc, order)


def module_warps(kernel: ir.Kernel) -> int:
    """The warps running the code outside warp roles: with warp_specialize, the default role's (the
    module's ttg.num-warps, as the lowering emits it), else the kernel's num_warps."""
    for op in kernel.walk():
        if op.kind == "warp_specialize":
            for r in op.attrs.get("roles") or []:
                if r.get("default") or r["warps"][0] == 0:
                    return r["warps"][1] - r["warps"][0] + 1
    return kernel.num_warps


def assign_layouts(kernel: ir.Kernel) -> ir.Kernel:
    uf = _UF()
    warps_of: dict[int, int] = {}
    elem_bytes: dict[int, int] = {}
    values: dict[int, ir.Value] = {}
    owner_op: dict[int, ir.Op] = {}
    relations: list[tuple[str, ir.Op]] = []
    anchors: list[ir.Value] = []

    def visit(region: ir.Region, warps: int) -> None:
        for a in _tiles(region.args):
            values[a.id] = a
            warps_of[a.id] = warps
        for op in region.ops:
            for v in _tiles(op.results):
                values[v.id] = v
                warps_of[v.id] = warps
                owner_op[v.id] = op
            tiles = _tiles(op.operands) + _tiles(op.results)
            if op.kind in _SAME and tiles:
                group = tiles
                if op.kind == "store":      # the value is converted to the address layout if needed
                    group = _tiles([op.operands[1]] + op.operands[3:])
                elif op.kind == "cp_async":
                    group = _tiles([op.operands[1]] + op.operands[3:])
                elif op.kind in _ATOMICS:   # old values in the address layout; the values are converted to it
                    group = _tiles([op.operands[1]] + op.operands[2 + _ATOMICS[op.kind]:] + op.results)
                if op.kind in _MEMORY and group:
                    anchors.append(group[0])
                if op.kind in ("wgmma", "mma", "mfma"):
                    group = [op.operands[2], op.results[0]]
                elif op.kind == "wgmma_wait":
                    group = [op.operands[0], op.results[0]]
                elif op.kind == "cast":
                    group = [op.operands[0], op.results[0]]
                for v in group[1:]:
                    uf.union(group[0].id, v.id)
                if op.kind in _MEMORY:
                    nbytes = op.operands[0].type.dtype.bytes
                    for v in group:
                        elem_bytes[v.id] = min(elem_bytes.get(v.id, 16), nbytes)
            elif op.kind in ("reduce", "reduce_fn", "expand_dims") or op.kind in _SHAPE:
                if op.kind == "reduce_fn":   # tt.reduce's inputs share one layout, and so do its results
                    for group in (_tiles(op.operands), _tiles(op.results)):
                        for v in group[1:]:
                            uf.union(group[0].id, v.id)
                relations.append(("reduce" if op.kind == "reduce_fn" else op.kind, op))
            elif op.kind == "histogram" and len(op.operands) == 2:     # the mask in the values' layout
                uf.union(op.operands[0].id, op.operands[1].id)
            elif op.kind == "gather":       # tt.gather's result is in its index's layout
                uf.union(op.operands[1].id, op.results[0].id)
            if op.kind == "for":
                body = op.regions[0]
                visit(body, warps)
                ys = body.ops[-1].operands if body.ops and body.ops[-1].kind == "yield" else []
                for init, arg, y, res in zip(op.operands[3:], body.args[1:], ys, op.results):
                    if isinstance(init.type, ir.TileType):
                        for v in (arg, y, res):
                            uf.union(init.id, v.id)
                continue
            if op.kind == "if":
                for r in op.regions:
                    visit(r, warps)
                    ys = r.ops[-1].operands if r.ops and r.ops[-1].kind == "yield" else []
                    for y, res in zip(ys, op.results):
                        if isinstance(res.type, ir.TileType):
                            uf.union(res.id, y.id)
                continue
            if op.kind == "warp_specialize":
                for r, role in zip(op.regions, op.attrs["roles"]):
                    first, last = role["warps"]
                    visit(r, last - first + 1)
                continue
            for r in op.regions:
                visit(r, warps)

    visit(kernel.body, module_warps(kernel))
    for p in kernel.params:
        if isinstance(p.value.type, ir.TileType):
            values[p.value.id] = p.value
            warps_of[p.value.id] = kernel.num_warps

    layout: dict[int, Layout] = {}
    members: dict[int, list[int]] = {}
    for vid in values:
        members.setdefault(uf.find(vid), []).append(vid)
    for vid, v in values.items():
        lay = v.type.layout
        if lay is None:
            continue
        root = uf.find(vid)
        if root in layout and layout[root] != lay:
            op = owner_op.get(vid)
            raise ir.GluonError(f"conflicting layouts for one value: {layout[root]} and {lay}; "
                                "insert gl.convert_layout", op.loc if op else None)
        layout[root] = lay

    def propagate() -> None:
        changed = True
        while changed:
            changed = False
            for kind, op in relations:
                src, dst = op.operands[0], op.results[0]
                if kind in _SHAPE:          # forward only: an open result takes the inferred layout
                    rs = uf.find(src.id)
                    for res in op.results:
                        rd = uf.find(res.id)
                        if rs in layout and rd not in layout:
                            bases = linear_infer(kind, op.attrs, src.type.shape, res.type.shape, layout[rs])
                            if bases is not None:
                                layout[rd] = linear_layout(bases, len(res.type.shape))
                                changed = True
                    continue
                rs, rd = uf.find(src.id), uf.find(dst.id) if isinstance(dst.type, ir.TileType) else None
                axis = op.attrs["axis"]
                if kind == "reduce":
                    if rs in layout and rd is not None and rd not in layout:
                        layout[rd] = SliceLayout(axis, layout[rs])
                        changed = True
                    elif rd in layout and rs not in layout and isinstance(layout[rd], SliceLayout):
                        layout[rs] = layout[rd].parent
                        changed = True
                else:  # expand_dims: src = slice(axis, dst)
                    if rd in layout and rs not in layout:
                        layout[rs] = SliceLayout(axis, layout[rd])
                        changed = True
                    elif rs in layout and rd not in layout and isinstance(layout[rs], SliceLayout) \
                            and layout[rs].dim == axis:
                        layout[rd] = layout[rs].parent
                        changed = True

    def choose_default(root: int) -> None:
        rep = max((values[m] for m in members[root]), key=lambda v: (len(v.type.shape), math.prod(v.type.shape)))
        eb = min([elem_bytes.get(m, 16) for m in members[root]] or [16])
        if eb == 16:
            eb = max(1, rep.type.dtype.bytes)
        layout[root] = default_layout(rep.type.shape, warps_of[rep.id], eb, kernel.arch.warp_size)

    for root in sorted({uf.find(a.id) for a in anchors}, key=lambda r: -len(values[r].type.shape)):
        if root not in layout:
            choose_default(root)
    propagate()
    while True:
        open_roots = [r for r in members if r not in layout]
        if not open_roots:
            break
        # highest rank first: its slices then follow by propagation; a shape op's result waits for its operand
        waiting = {uf.find(r.id) for kind, op in relations if kind in _SHAPE for r in op.results
                   if uf.find(op.operands[0].id) not in layout}
        root = max([r for r in open_roots if r not in waiting] or open_roots,
                   key=lambda r: max(len(values[m].type.shape) for m in members[r]))
        choose_default(root)
        propagate()

    for vid, v in values.items():
        lay = layout[uf.find(vid)]
        if v.type.layout != lay:
            v.type = ir.TileType(v.type.dtype, v.type.shape, lay)

    _insert_conversions(kernel.body, kernel.num_warps, kernel.arch.warp_size)
    return kernel


def _convert(src: ir.Value, want: Layout, loc) -> ir.Op:
    cv = ir.Op("convert_layout", [src], [], {}, [], loc)
    cv.results = [ir.Value(ir.TileType(src.type.dtype, src.type.shape, want), src.name, owner=cv)]
    return cv


def _rematerialize(src: ir.Value, want: Layout) -> ir.Op | None:
    """An `arange` is cheaper to recompute in the wanted layout than to convert (no shuffle)."""
    op = src.owner
    if isinstance(op, ir.Op) and op.kind == "arange":
        new = ir.Op("arange", [], [], dict(op.attrs), [], op.loc)
        new.results = [ir.Value(ir.TileType(src.type.dtype, src.type.shape, want), src.name, owner=new)]
        return new
    return None


def _blocked_scan(op: ir.Op, warps: int, warp_size: int, new_ops: list[ir.Op]) -> None:
    """Triton 3.6 lowers tt.scan only on blocked layouts ("TODO: unsupported scan layout"): a scan of tiles in
    another layout (a slice, an MMA accumulator) runs on them converted to the default blocked layout, and
    its results are converted back, so the scan still keeps its inputs' layout."""
    shape = op.operands[0].type.shape
    want = default_layout(shape, warps, max(v.type.dtype.bytes for v in op.operands), warp_size)
    for i, v in enumerate(op.operands):
        cv = _convert(v, want, op.loc)
        new_ops.append(cv)
        op.operands[i] = cv.results[0]
    _results_in(op, want, new_ops)


def _results_in(op: ir.Op, want, new_ops: list[ir.Op]) -> None:
    """`op` (appended to new_ops) producing its results in layout `want`, each followed by a convert_layout
    back to the layout its users were given: the same values, now defined by the conversions. Serves a
    scan run on blocked tiles, and a reduction whose results were given another layout than the slice of
    its input (they meet values reduced along another axis, say `gl.max(t, 0) + gl.max(t, 1)`)."""
    new_ops.append(op)
    old, op.results = op.results, []
    for r in old:
        made = ir.Value(ir.TileType(r.type.dtype, r.type.shape, want), r.name, owner=op)
        op.results.append(made)
        back = ir.Op("convert_layout", [made], [r], {}, [], op.loc)
        r.owner = back
        new_ops.append(back)


def _insert_conversions(region: ir.Region, warps: int, warp_size: int) -> None:
    """Make every expand_dims see the slice it needs, every store or atomic its values in its address layout,
    every reduction produce the slice of its input and every scan its tiles in a blocked layout."""
    new_ops: list[ir.Op] = []
    for op in region.ops:
        if op.kind == "scan" and not all(isinstance(v.type.layout, BlockedLayout) for v in op.operands):
            _blocked_scan(op, warps, warp_size, new_ops)
            continue
        if op.kind == "expand_dims":
            src, dst = op.operands[0], op.results[0]
            want = SliceLayout(op.attrs["axis"], dst.type.layout)
            if src.type.layout != want:
                cv = _rematerialize(src, want) or _convert(src, want, op.loc)
                new_ops.append(cv)
                op.operands[0] = cv.results[0]
        elif op.kind == "store" and isinstance(op.operands[2].type, ir.TileType):
            val, want = op.operands[2], op.operands[1].type.layout
            if val.type.layout != want:
                cv = _convert(val, want, op.loc)
                new_ops.append(cv)
                op.operands[2] = cv.results[0]
        elif op.kind in _ATOMICS and isinstance(op.operands[1].type, ir.TileType):
            want = op.operands[1].type.layout
            for i in range(2, 2 + _ATOMICS[op.kind]):
                val = op.operands[i]
                if isinstance(val.type, ir.TileType) and val.type.layout != want:
                    cv = _convert(val, want, op.loc)
                    new_ops.append(cv)
                    op.operands[i] = cv.results[0]
        elif op.kind in ("reduce", "reduce_fn") and isinstance(op.results[0].type, ir.TileType):
            want = SliceLayout(op.attrs["axis"], op.operands[0].type.layout)
            if any(r.type.layout != want for r in op.results):
                _results_in(op, want, new_ops)
                continue
        if op.kind == "warp_specialize":
            for r, role in zip(op.regions, op.attrs["roles"]):
                first, last = role["warps"]
                _insert_conversions(r, last - first + 1, warp_size)
        else:
            for r in op.regions:
                _insert_conversions(r, warps, warp_size)
        new_ops.append(op)
    region.ops[:] = new_ops
