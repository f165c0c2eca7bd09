"""The async-ordering and shared-memory checks of check_protocol (gluon/passes/protocol_checks.py): the
async engines (TMA, wgmma, cp.async) read and write shared memory and registers behind the threads' backs,
so each needs its fence, wait or commit in the right place, and a shared region must hold bytes of its own
dtype and shape, written before they are read. Getting one wrong reads stale or garbage data silently.

Async ordering
* GL201: a TMA store or a wgmma reading shared memory last written from registers (`smem.store`, or an
  initial value) with no `fence_async_shared()` between, in the same role.
* GL202: a `wgmma(..., wait=False)` that nothing waits for: no `wgmma_wait` on its result (through the
  accumulator chain and loop-carried values) and no `wgmma_wait(pendings=0)` after it in its role.
* GL203: an in-flight wgmma result used by an op other than a wgmma (as its accumulator), wgmma_wait or
  yield, with no `wgmma_wait(pendings=0)` between.
* GL204: a read of a region that `cp_async` fills, with no `cp_async_wait` before it in its role (or a
  loop around both).
* GL205: `cp_async` copies with no `cp_async_commit` after them: `cp_async_wait` waits only for
  committed groups.

Shared memory
* GL401: a read of a shared region (any view of it) that nothing writes: no store, TMA load, cp.async
  or initial value.
* GL402: `cp_async` from a global tensor of another dtype than the region (cp.async copies bytes).
* GL403: `tma_store` of a staging region of another dtype than the global tensor.
* GL404: `smem.store(tile)` of a tile whose shape is not the region's (stage) shape.
* GL405 (warning): a multi-stage region or barrier set indexed by a loop's induction variable that is
  not wrapped (`% STAGES`) in a loop whose trip count is not known to stay inside the ring.
"""
from __future__ import annotations

import warnings

from .. import ir
from .analysis import Site, alloc_name, const_value, root_of, view_name
from .bank_conflicts import GluonWarning
from .protocol_common import READERS, at, err, read_operands, role_key


def check_async_ordering(kernel: ir.Kernel, ordered: list[ir.Op], where: dict[ir.Op, Site]) -> None:
    """GL201-GL205, in this order."""
    _check_fences(ordered, where)
    _check_async_wgmma(kernel, ordered, where)
    _check_cp_async(ordered, where)


# ------------------------------------------------------------------------------ async ordering


def _same_loop_around(a: Site, b: Site) -> bool:
    return bool(set(a.loops) & set(b.loops))


def _check_fences(ordered: list[ir.Op], where: dict[ir.Op, Site]) -> None:
    writes: dict[int, list[ir.Op]] = {}
    fences: dict = {}
    for op in ordered:
        if op.kind == "smem_store":
            writes.setdefault(root_of(op.operands[1]).id, []).append(op)
        elif op.kind == "smem_alloc" and op.operands:
            writes.setdefault(op.results[0].id, []).append(op)
        elif op.kind == "fence_async_shared":
            fences.setdefault(role_key(where[op]), []).append(where[op].index)
    for rd in ordered:
        if rd.kind not in ("tma_store", "wgmma", "tcgen05_mma"):
            continue
        rs = where[rd]
        for v in read_operands(rd):
            ws_ = [w for w in writes.get(root_of(v).id, ())
                   if where[w].index < rs.index and role_key(where[w]) in (role_key(rs), None)]
            if not ws_:
                continue
            last = max(ws_, key=lambda o: where[o].index)
            lo = where[last].index
            fs = fences.get(role_key(rs), []) + (fences.get(None, []) if role_key(where[last]) is None else [])
            if any(lo < f < rs.index for f in fs):
                continue
            what = "the TMA store" if rd.kind == "tma_store" else f"the {rd.kind}"
            raise err("GL201", f"{at(rd)} reads '{view_name(v)}' through the async proxy, but it was last written "
                      f"from registers ({at(last)}) with no fence_async_shared() between: {what} may read the old "
                      "bytes. Call fence_async_shared() after the store and before the async read", rd.loc)


def _carry(loop: ir.Op, j: int, via_arg: bool, stack: list, carried: list) -> None:
    """An async result that is `loop`'s j-th carried value: followed out of the loop (its result) and into its
    body (the body's argument), where it is in flight until waited for."""
    arg = loop.regions[0].args[1 + j]
    stack.append((loop.results[j], via_arg))
    stack.append((arg, True))
    carried.append(arg)


def _check_async_wgmma(kernel: ir.Kernel, ordered: list[ir.Op], where: dict[ir.Op, Site]) -> None:
    uses: dict[int, list[tuple[ir.Op, int]]] = {}
    for op in ordered:
        for k, v in enumerate(op.operands):
            uses.setdefault(v.id, []).append((op, k))
    parent_of: dict[int, ir.Op] = {}                 # region id -> the op owning it
    for op in ordered:
        for r in op.regions:
            parent_of[id(r)] = op
    waits0: dict = {}
    for op in ordered:
        if op.kind == "wgmma_wait" and int(op.attrs.get("pendings", 0)) == 0:
            waits0.setdefault(role_key(where[op]), []).append(where[op].index)
    for mm in ordered:
        if mm.kind != "wgmma" or not mm.results:
            continue
        waited = False
        stack, seen = [(mm.result, False)], set()
        bad: list[ir.Op] = []
        carried: list[ir.Value] = []                # loop-body arguments the async result reaches in flight
        while stack:
            v, via_arg = stack.pop()
            if v.id in seen:
                continue
            seen.add(v.id)
            for u, k in uses.get(v.id, ()):
                if u.kind == "wgmma_wait":
                    waited = True
                elif u.kind == "wgmma" and k == 2:
                    stack.append((u.result, via_arg))
                elif u.kind == "for" and k >= 3:        # a loop's initial carried value (lb, ub, step, *inits)
                    _carry(u, k - 3, via_arg, stack, carried)
                elif u.kind == "yield":
                    owner = parent_of.get(id(where[u].region))
                    if owner is None:
                        continue
                    if owner.kind == "for":                  # carried to the next iteration
                        _carry(owner, k, via_arg, stack, carried)
                    elif owner.kind == "if":
                        stack.append((owner.results[k], via_arg))
                elif not via_arg:
                    bad.append(u)
        ms = where[mm]
        after = [i for i in waits0.get(role_key(ms), []) if i > ms.index or any(
            where[lp].index < i <= where[lp].end for lp in ms.loops)]
        if not waited and not after:
            raise err("GL202", f"{at(mm)} is issued with wait=False, but nothing waits for it: no wgmma_wait on its "
                      "result and no wgmma_wait(pendings=0) after it in its role, so it may still be running when its "
                      "result is read or the kernel ends. Retire it with acc = wgmma_wait(acc) (or use wait=True)",
                      mm.loc)
        for arg in carried:                         # in the body: read only after its wait
            body = [u for u, _ in uses.get(arg.id, ()) if u in where]
            first = min((where[u].index for u in body if u.kind == "wgmma_wait"), default=None)
            bad += [u for u in body if u.kind not in ("wgmma_wait", "wgmma", "yield")
                    and (first is None or where[u].index < first)]
        for u in bad:
            if u in where and not any(ms.index < i < where[u].index for i in waits0.get(role_key(ms), [])):
                if u.kind in ("wgmma",):
                    continue
                raise err("GL203", f"{at(u)} uses the result of the async {at(mm)} while it may still be in flight "
                          "(wait=False and no wgmma_wait on it before this use): retire it first, "
                          "acc = wgmma_wait(acc), then use acc", u.loc)


def _check_cp_async(ordered: list[ir.Op], where: dict[ir.Op, Site]) -> None:
    copies: dict[int, list[ir.Op]] = {}
    waits: dict = {}
    commits: dict = {}
    for op in ordered:
        if op.kind == "cp_async":
            copies.setdefault(root_of(op.operands[2]).id, []).append(op)
        elif op.kind == "cp_async_wait":
            waits.setdefault(role_key(where[op]), []).append(op)
        elif op.kind == "cp_async_commit":
            commits.setdefault(role_key(where[op]), []).append(op)
    for cps in copies.values():
        for cp in cps:
            cs = where[cp]
            if not any(where[c].index > cs.index or _same_loop_around(where[c], cs)
                       for c in commits.get(role_key(cs), [])):
                if waits.get(role_key(cs)):
                    raise err("GL205", f"{at(cp)} is never committed: no cp_async_commit() after it, and "
                              "cp_async_wait only waits for committed groups; call cp_async_commit() after the copies",
                              cp.loc)
    for rd in ordered:
        if rd.kind not in ("smem_load", "wgmma", "tma_store", "tcgen05_mma"):
            continue
        rs = where[rd]
        for v in read_operands(rd):
            cps = [c for c in copies.get(root_of(v).id, ()) if role_key(where[c]) == role_key(rs)]
            if not cps:
                continue
            ws_ = waits.get(role_key(rs), [])
            first = min(cps, key=lambda o: where[o].index)
            ok = any(where[w].index < rs.index and (where[w].index > where[first].index or
                                                    _same_loop_around(where[w], rs)) for w in ws_) \
                or any(_same_loop_around(where[w], rs) and _same_loop_around(where[w], where[first]) for w in ws_)
            if not ok:
                raise err("GL204", f"{at(rd)} reads '{view_name(v)}', which cp_async fills ({at(first)}), with no "
                          "cp_async_wait between: the copies may not have landed. Call cp_async_commit() and "
                          "cp_async_wait(0) (and a thread barrier if other threads' copies are read) before the read",
                          rd.loc)


# ------------------------------------------------------------------------------ shared memory


def warn(code: str, message: str, loc) -> None:
    msg = f"[{code}] {message}"
    if loc is not None:
        warnings.warn_explicit(f"{loc}: {msg}", GluonWarning, loc.file, loc.line)
    else:
        warnings.warn(msg, GluonWarning, stacklevel=3)


def check_shared(ordered: list[ir.Op], where: dict[ir.Op, Site]) -> None:
    """GL401-GL405: what reads a shared region was written, with bytes of its dtype and shape; rings stay inside."""
    written: set[int] = set()
    for op in ordered:
        if op.kind == "smem_store":
            written.add(root_of(op.operands[1]).id)
        elif op.kind == "tma_load":
            written.add(root_of(op.operands[1]).id)
        elif op.kind == "cp_async":
            written.add(root_of(op.operands[2]).id)
        elif op.kind == "smem_alloc" and op.operands:
            written.add(op.results[0].id)
    for op in ordered:
        if op.kind == "cp_async":
            ptr, dst = op.operands[0].type, op.operands[2].type
            if isinstance(ptr, ir.PointerType) and isinstance(dst, ir.SmemType) and ptr.dtype != dst.dtype:
                src = op.operands[0].name or "the source"
                raise err("GL402", f"cp_async copies {ptr.dtype.name} elements of '{src}' into "
                          f"'{view_name(op.operands[2])}', a {dst.dtype.name} region: cp.async copies bytes, "
                          f"so the region would hold {ptr.dtype.name} bits read as {dst.dtype.name}; give the region "
                          f"the source's dtype ({ptr.dtype.name}) and convert after loading it", op.loc)
        elif op.kind == "tma_store":
            desc, src = op.operands[0].type, op.operands[1].type
            if isinstance(desc, ir.DescType) and isinstance(src, ir.SmemType) and desc.dtype != src.dtype:
                raise err("GL403", f"tma_store of '{view_name(op.operands[1])}' ({src.dtype.name}) into a "
                          f"{desc.dtype.name} tensor: TMA copies bytes and does not convert; store the tile as "
                          f"{desc.dtype.name} (tile.to({desc.dtype.name})) into a {desc.dtype.name} staging region",
                          op.loc)
        elif op.kind == "smem_store":
            tile, dst = op.operands[0].type, op.operands[1].type
            if isinstance(tile, ir.TileType) and isinstance(dst, ir.SmemType) and tuple(tile.shape) != tuple(dst.shape):
                shape = "x".join(map(str, tile.shape))
                whose = "stages are" if dst.stages > 1 else "tile is"
                raise err("GL404", f"store of a {shape} tile into '{view_name(op.operands[1])}', whose {whose} "
                          f"{'x'.join(map(str, dst.shape))}: the shapes must match (store a tile of the region's "
                          "shape, or make the region that shape)", op.loc)
        if op.kind in READERS:
            for v in read_operands(op):
                if root_of(v).id not in written:
                    raise err("GL401", f"{at(op)} reads '{view_name(v)}', but nothing writes that region (no store, "
                              "TMA load, cp_async or initial value): it holds garbage; fill it before reading it",
                              op.loc)
        if op.kind in ("smem_index", "barrier_index"):
            _check_ring_index(op, where)


def _check_ring_index(op: ir.Op, where: dict[ir.Op, Site]) -> None:
    stages = op.operands[0].type.stages
    idx = op.operands[1]
    while isinstance(idx.owner, ir.Op) and idx.owner.kind == "cast":
        idx = idx.owner.operands[0]
    body = idx.owner
    if not isinstance(body, ir.Region) or not body.args or body.args[0] is not idx:
        return
    loop = next((lp for lp in where[op].loops if lp.regions[0] is body), None)
    if loop is None:
        return
    lb, ub, step = (const_value(x) for x in loop.operands[:3])
    if ub is not None and lb is not None and lb >= 0 and ub <= stages:
        return
    name = alloc_name(root_of(op.operands[0]))
    warn("GL405", f"'{name}' has {stages} stages but is indexed by the loop index {idx.name or 'i'} of the loop at "
          f"{loop.loc}, whose trip count is not known to stay below {stages}: an index past the ring reads and writes "
          f"other memory. Wrap it ({name}[{idx.name or 'i'} % {stages}]) or bound the loop", op.loc)
