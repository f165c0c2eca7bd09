"""Pass (run by warp_spec after its own checks): more barrier-protocol and async-ordering mistakes,
each a `GluonError` whose message starts with a stable code (docs/DIAGNOSTICS.md lists them).

Conservative like the rest of warp_spec: each check reports only what cannot work, and skips what it
cannot decide (a completer under an `if`, a phase carried by the loop, loops of different bounds).

Barrier protocol
* GL101 / GL102: the arrives on a barrier per phase. Where every arrive on a barrier set is
  unconditional and, per role, in one loop (loops of several roles with the same bounds, or none),
  the arrivals of one iteration (or of the whole kernel, without loops) must reach the barrier's
  count (GL101: it never completes, or only every few iterations) and be a whole number of phases
  (GL102: overshoot, the extra arrivals complete the next phase early). `arrive(count=n)` counts n,
  `expect` 1, `arrive(cluster=True)` once per CTA of the cluster.
* GL103: a read of a region that TMA loads fill (wgmma operand, smem load, TMA store source) in a role
  that never waits on the barrier the loads complete on (nor waits at all), or only waits after the
  read in program order (so the first read, at least, comes before any wait).
* GL104: `expect(nbytes)` against the TMA loads completing on the barrier in nested `if` regions: the
  bytes must be one of the totals the branches can bring.
* GL105: a wait on stage `i % STAGES` of a multi-stage barrier ring whose phase is an expression of
  the same `i` that is neither `(i // STAGES) & 1` nor its `^ 1` (checked by evaluating both on
  the first 4 * STAGES values of i).
* GL106: a producer's first wait on its `empty` ring with phase 0 (needs a completion) while each of
  the consumer's arrives on `empty` comes after the consumer's own wait on a barrier only the producer
  completes after that first wait: both sides wait forever. The first wait's phase must be
  `((i // STAGES) & 1) ^ 1`, which passes on a fresh barrier.
* GL107: a plain `arrive()` on a barrier that TMA loads complete on, with no `expect()` on it anywhere:
  the arrive completes the phase at once, before the bytes land.

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

The kernel
* GL301: a register layout whose warps (the product of warps_per_cta) are not the warps that run the
  code (the warp role's, or the kernel's num_warps outside the roles); Triton's verifier would reject
  the generated TTGIR ("Layout has a total of N warps per CTA, but the context requires M").
* GL302: a blocked layout whose threads per warp (the product of threads_per_warp) are not the arch's
  warp size (32 on NVIDIA, 64 on CDNA3).

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

import math
import warnings

from .. import ir
from ..types import BlockedLayout, DotOperandLayout, MFMALayout, MMALayout, SliceLayout
from .analysis import Site, alloc_name, barrier_key, const_value, expr_key, expr_str, root_of, sites, view_name
from .bank_conflicts import GluonWarning
from .layout_assign import module_warps


def err(code: str, message: str, loc) -> ir.GluonError:
    return ir.GluonError(f"[{code}] {message}", loc)


def _at(op: ir.Op) -> str:
    return f"{op.kind} at {op.loc}" if op.loc else op.kind


def check_protocol(kernel: ir.Kernel) -> None:
    where = sites(kernel)
    ordered = sorted(where, key=lambda o: where[o].index)
    num_ctas = int(kernel.attrs.get("num_ctas", 1))
    sets = _barrier_sets(ordered)
    _check_arrive_without_expect(sets)
    _check_arrive_counts(sets, where, num_ctas)
    _check_expect_in_branches(ordered, where, num_ctas)
    _check_reads_without_wait(ordered, where, sets)
    _check_ring_phases(ordered, where)
    _check_first_empty_wait(ordered, where, sets)
    _check_fences(ordered, where)
    _check_async_wgmma(kernel, ordered, where)
    _check_cp_async(ordered, where)
    _check_layout_sizes(kernel, ordered, where)
    _check_shared(ordered, where)


# ------------------------------------------------------------------------------ shared helpers


def _barrier_of(op: ir.Op) -> ir.Value | None:
    if op.kind in ("barrier_wait", "barrier_arrive", "barrier_expect"):
        v = op.operands[0]
    elif op.kind == "tma_load":
        v = op.operands[2]
    elif op.kind == "tcgen05_mma" and len(op.operands) > 3:
        v = op.operands[3]
    else:
        return None
    return v if isinstance(v.type, ir.BarrierType) else None


class _Set:
    def __init__(self, root: ir.Value):
        self.root = root
        self.waits: list[ir.Op] = []
        self.arrives: list[ir.Op] = []
        self.expects: list[ir.Op] = []
        self.mmas: list[ir.Op] = []
        self.loads: list[ir.Op] = []

    @property
    def completers(self) -> list[ir.Op]:
        return self.arrives + self.expects + self.mmas


def _barrier_sets(ordered: list[ir.Op]) -> dict[int, _Set]:
    out: dict[int, _Set] = {}
    lists = {"barrier_wait": "waits", "barrier_arrive": "arrives", "barrier_expect": "expects",
             "tcgen05_mma": "mmas", "tma_load": "loads"}
    for op in ordered:
        b = _barrier_of(op)
        if b is None:
            continue
        r = root_of(b)
        s = out.setdefault(r.id, _Set(r))
        getattr(s, lists[op.kind]).append(op)
    return out


def _conditional(site: Site) -> bool:
    """Whether an `if` sits between the op and its innermost loop (or its role, or the kernel)."""
    inner = site.loops[-1] if site.loops else (site.role[0] if site.role else None)
    start = site.parents.index(inner) + 1 if inner is not None and inner in site.parents else 0
    return any(p.kind == "if" for p in site.parents[start:])


def _same_loop_around(a: Site, b: Site) -> bool:
    return bool(set(a.loops) & set(b.loops))


def _same_bounds(a: ir.Op, b: ir.Op) -> bool:
    return all(expr_key(x) == expr_key(y) for x, y in zip(a.operands[:3], b.operands[:3]))


_BINOPS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b if b else None, "div": lambda a, b: a // b if b else None,
    "rem": lambda a, b: a % b if b else None, "and": lambda a, b: a & b, "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b, "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b,
    "min": min, "max": max,
}


def _eval(v: ir.Value, bind_key, n: int, depth: int = 0):
    """The integer value of the scalar expression `v` when the expression with key `bind_key` is n;
    None when it depends on anything else."""
    if depth > 32:
        return None
    if expr_key(v) == bind_key:
        return n
    c = const_value(v)
    if c is not None:
        return int(c) if isinstance(c, (int, bool)) else None
    o = v.owner
    if not isinstance(o, ir.Op):
        return None
    if o.kind == "cast":
        return _eval(o.operands[0], bind_key, n, depth + 1)
    if o.kind == "binary" and o.attrs.get("op") in _BINOPS:
        a = _eval(o.operands[0], bind_key, n, depth + 1)
        b = _eval(o.operands[1], bind_key, n, depth + 1)
        if a is None or b is None:
            return None
        try:
            return _BINOPS[o.attrs["op"]](a, b)
        except (ValueError, OverflowError, ZeroDivisionError):     # a negative shift: not decided here
            return None
    return None


def _ring_counter(bar: ir.Value, stages: int) -> ir.Value | None:
    """The `i` of a barrier view `ring[i % STAGES]` (or `ring[i & (STAGES - 1)]`), STAGES the ring's stages."""
    o = bar.owner
    if not (isinstance(o, ir.Op) and o.kind == "barrier_index"):
        return None
    idx = o.operands[1]
    while isinstance(idx.owner, ir.Op) and idx.owner.kind == "cast":
        idx = idx.owner.operands[0]
    io = idx.owner
    if not (isinstance(io, ir.Op) and io.kind == "binary"):
        return None
    c = const_value(io.operands[1])
    if io.attrs.get("op") == "rem" and c == stages:
        return io.operands[0]
    if io.attrs.get("op") == "and" and c == stages - 1 and stages & (stages - 1) == 0:
        return io.operands[0]
    return None


def _first_value(v: ir.Value, loop_of: dict[int, ir.Op]) -> int | None:
    """The value of a loop counter in the loop's first iteration: a loop's iv (its constant start) or a
    loop-carried value (its constant initial value); None otherwise. `loop_of`: body region id -> loop."""
    r = v.owner
    if not isinstance(r, ir.Region):
        c = const_value(v)
        return int(c) if isinstance(c, int) else None
    loop = loop_of.get(id(r))
    if loop is None:
        return None
    i = r.args.index(v)
    init = loop.operands[0] if i == 0 else loop.operands[3 + i - 1]
    c = const_value(init)
    return int(c) if isinstance(c, int) else None


# ------------------------------------------------------------------------------ barrier protocol


def _check_arrive_without_expect(sets: dict[int, _Set]) -> None:
    for s in sets.values():
        if s.loads and s.arrives and not s.expects and not s.mmas:
            a, ld = s.arrives[0], s.loads[0]
            name = alloc_name(s.root)
            raise err("GL107", f"{_at(a)} arrives on '{view_name(a.operands[0])}', which TMA loads complete on "
                      f"({_at(ld)}), but nothing calls expect() on it: a plain arrive completes the phase at once, "
                      f"before the TMA bytes land; use {name}.expect(nbytes) (an arrive that also announces the "
                      "loads' bytes) instead of arrive()", a.loc)


def _check_arrive_counts(sets: dict[int, _Set], where: dict[ir.Op, Site], num_ctas: int) -> None:
    for s in sets.values():
        comps = s.completers
        if not comps or not s.waits:
            continue
        count = s.root.type.count
        if any(_conditional(where[c]) for c in comps) or any(len(c.operands) > 1 for c in s.expects):
            continue                                  # arrives under a branch or predicated: not counted
        by_role: dict = {}
        for c in comps:
            key = id(where[c].role[0]) * 100 + where[c].role[1] if where[c].role else None
            by_role.setdefault(key, set()).add(where[c].loops[-1] if where[c].loops else None)
        loops = set()
        for ls in by_role.values():
            if len(ls) != 1:
                break
            loops |= ls
        else:
            if None in loops and len(loops) > 1:
                continue                              # some in loops, some not
            real = [lp for lp in loops if lp is not None]
            if any(not _same_bounds(real[0], lp) for lp in real[1:]):
                continue
            per = 0
            for c in comps:
                if c.kind == "barrier_arrive":
                    per += num_ctas if c.attrs.get("cluster") else int(c.attrs.get("count", 1))
                else:
                    per += 1
            if per == count:
                continue
            if real and not all(where[w].loops and not _conditional(where[w])
                                and _same_bounds(where[w].loops[-1], real[0]) for w in s.waits):
                continue                              # waited outside the loop (a counter of iterations)
            name = f"'{alloc_name(s.root)}'"
            listing = ", ".join(
                f"{_at(c)} ({_arrivals(c, num_ctas)})" for c in comps)
            unit = "per iteration of the loop around them" if real else "in the whole kernel"
            if per < count:
                extra = (f"; it completes only every {-(-count // per)} iterations, but it is waited on each"
                         if real else ", so the phase never completes")
                raise err("GL101", f"barrier {name} was made with count={count}, but its arrives bring {per} "
                          f"arrival{'s' if per != 1 else ''} {unit}: {listing}{extra}. Make the count the number of "
                          f"arrivals per phase (mbarrier(count={per})) or arrive from every role that should",
                          s.root.owner.loc if isinstance(s.root.owner, ir.Op) and s.root.owner.loc else comps[0].loc)
            if real and per % count == 0 and not _waits_once_or_less(s, where, real[0], per // count):
                continue
            if real and (per % count or per > count):
                raise err("GL102", f"barrier {name} was made with count={count}, but its arrives bring {per} "
                          f"arrivals {unit}: {listing}; the extra arrivals complete the next phase early (an "
                          f"overshoot). Make the count {per} or arrive {count} times per phase",
                          s.root.owner.loc if isinstance(s.root.owner, ir.Op) and s.root.owner.loc else comps[0].loc)


def _waits_once_or_less(s: _Set, where: dict[ir.Op, Site], loop: ir.Op, phases: int) -> bool:
    """Whether every role waiting on the set waits at most once per iteration of a loop with `loop`'s
    bounds, unconditionally, so `phases` > 1 completions per iteration outrun its waits."""
    per_role: dict = {}
    for w in s.waits:
        ws = where[w]
        if not ws.loops or _conditional(ws) or not _same_bounds(ws.loops[-1], loop):
            return False
        per_role[_role_key(ws)] = per_role.get(_role_key(ws), 0) + 1
    return bool(per_role) and max(per_role.values()) < phases


def _arrivals(c: ir.Op, num_ctas: int) -> str:
    if c.kind == "barrier_arrive":
        n = num_ctas if c.attrs.get("cluster") else int(c.attrs.get("count", 1))
    else:
        n = 1
    return f"{n} arrival{'s' if n != 1 else ''}"


def _load_bytes(ld: ir.Op, num_ctas: int) -> int:
    return ld.operands[1].type.stage_bytes * (num_ctas if ld.attrs.get("multicast") else 1)


def _branch_totals(region: ir.Region, key, num_ctas: int, from_barrier_key) -> set[int] | None:
    """The byte totals the TMA loads on barrier `key` in `region` and its nested `if`s can bring; None when
    a nested loop holds one, or an expect on the same barrier is nested."""
    totals = {0}
    for op in region.ops:
        if op.kind == "tma_load" and from_barrier_key(op.operands[2]) == key:
            totals = {t + _load_bytes(op, num_ctas) for t in totals}
        elif op.kind == "if":
            alts: set[int] = set()
            for r in op.regions:
                sub = _branch_totals(r, key, num_ctas, from_barrier_key)
                if sub is None:
                    return None
                alts |= sub
            totals = {t + a for t in totals for a in alts}
        elif op.regions:
            for o in (x for r in op.regions for x in r.walk()):
                b = _barrier_of(o)
                if b is not None and o.kind in ("tma_load", "barrier_expect") and from_barrier_key(b) == key:
                    return None
        if len(totals) > 64:
            return None
    return totals


def _check_expect_in_branches(ordered: list[ir.Op], where: dict[ir.Op, Site], num_ctas: int) -> None:
    for e in ordered:
        if e.kind != "barrier_expect" or not isinstance(e.operands[0].type, ir.BarrierType):
            continue
        region = where[e].region
        key = barrier_key(e.operands[0])
        direct = [o for o in region.ops if o is not e and _barrier_of(o) is not None and
                  barrier_key(_barrier_of(o)) == key]
        if any(o.kind == "barrier_expect" for o in direct):
            continue                                  # several expects in one region: warp_spec sums them
        nested = [o for o in region.walk() if o not in region.ops and o.kind in ("tma_load", "barrier_expect")
                  and barrier_key(_barrier_of(o)) == key]
        if not nested:
            continue                                  # warp_spec checks the loads of one region
        totals = _branch_totals(region, key, num_ctas, barrier_key)
        if totals is None or totals == {0}:
            continue
        want = int(e.attrs.get("bytes", 0))
        if want not in totals:
            shown = ", ".join(str(t) for t in sorted(totals))
            raise err("GL104", f"barrier_expect on '{view_name(e.operands[0])}' announces {want} bytes, but the TMA "
                      f"loads completing on it here, some inside `if` branches ({_at(nested[0])}), bring {shown} "
                      "bytes depending on the branch taken; the phase would never complete or complete before the "
                      "data lands. Announce the bytes of the loads that really run (an expect in each branch, or "
                      "the expect's bytes computed from the same condition)", e.loc)


_READERS = ("wgmma", "smem_load", "tma_store", "tcgen05_mma")


def _read_operands(op: ir.Op) -> list[ir.Value]:
    if op.kind == "wgmma" or op.kind == "tcgen05_mma":
        return [v for v in op.operands[:2] if isinstance(v.type, ir.SmemType)]
    if op.kind == "smem_load":
        return [op.operands[0]]
    if op.kind == "tma_store":
        return [op.operands[1]]
    return []


def _check_reads_without_wait(ordered: list[ir.Op], where: dict[ir.Op, Site], sets: dict[int, _Set]) -> None:
    filled: dict[int, set[int]] = {}                  # smem root id -> barrier set ids its TMA loads complete on
    for op in ordered:
        if op.kind == "tma_load" and _barrier_of(op) is not None:
            filled.setdefault(root_of(op.operands[1]).id, set()).add(root_of(op.operands[2]).id)
    stored: dict[int, list[ir.Op]] = {}               # smem root id -> smem_store into it
    for op in ordered:
        if op.kind == "smem_store":
            stored.setdefault(root_of(op.operands[1]).id, []).append(op)
    role_waits: dict = {}
    for op in ordered:
        if op.kind in ("barrier_wait", "named_barrier_sync"):
            role_waits.setdefault(_role_key(where[op]), []).append(op)
    for rd in ordered:
        if rd.kind not in _READERS:
            continue
        rs = where[rd]
        for v in _read_operands(rd):
            r = root_of(v)
            for bid in filled.get(r.id, ()):
                bs = sets[bid]
                mine = [w for w in bs.waits if _role_key(where[w]) == _role_key(rs)
                        or ((where[w].role is None or rs.role is None) and where[w].index < rs.index)]
                if any(where[x].index < rs.index and _role_key(where[x]) == _role_key(rs)
                       for x in stored.get(r.id, ())):
                    continue                          # the role writes the region itself (a staging tile)
                bname = alloc_name(bs.root)
                if not bs.waits:
                    raise err("GL103", f"{_at(rd)} reads '{view_name(v)}', which TMA loads fill ({_at(bs.loads[0])}), "
                              f"but nothing waits on the barrier they complete on ('{bname}'): the read can see the "
                              f"stage before its data lands; wait on it first, e.g. {bname}[s].wait(phase)", rd.loc)
                if not mine:
                    if not role_waits.get(_role_key(rs)):
                        raise err("GL103", f"{_at(rd)} reads '{view_name(v)}', which TMA loads fill "
                                  f"({_at(bs.loads[0])}), but its role waits on no barrier (the waits on '{bname}' "
                                  f"are in other roles: {_at(bs.waits[0])}); wait on '{bname}' in the reading role "
                                  "before the read",
                                  rd.loc)
                    continue
                if all(where[w].index > rs.index for w in mine):
                    raise err("GL103", f"{_at(rd)} reads '{view_name(v)}', which TMA loads fill, before its role "
                              f"waits on their barrier ('{bname}', first {_at(mine[0])}): the first "
                              "read can see the stage before its data lands; move the wait before the read", rd.loc)


def _role_key(site: Site):
    return (id(site.role[0]), site.role[1]) if site.role else None


def _ring_wait_info(w: ir.Op):
    """(counter value, stages) of a wait on `ring[i % STAGES]` of a multi-stage ring, or None."""
    bar = w.operands[0]
    r = root_of(bar)
    S = r.type.stages
    if S < 2:
        return None
    i = _ring_counter(bar, S)
    return (i, S) if i is not None else None


def _check_ring_phases(ordered: list[ir.Op], where: dict[ir.Op, Site]) -> None:
    for w in ordered:
        if w.kind != "barrier_wait":
            continue
        info = _ring_wait_info(w)
        if info is None:
            continue
        i, S = info
        key = expr_key(i)
        got = [_eval(w.operands[1], key, n) for n in range(4 * S)]
        if any(g is None for g in got) or const_value(w.operands[1]) is not None:
            continue                                  # not a function of i alone (a carried phase), or a literal
        ready = [(n // S) & 1 for n in range(4 * S)]
        empty = [x ^ 1 for x in ready]
        if [g & 1 for g in got] in (ready, empty) and all(g in (0, 1) for g in got):
            continue
        iname = expr_str(i)
        raise err("GL105", f"{_at(w)} waits on '{view_name(w.operands[0])}' of a {S}-stage ring with phase "
                  f"{expr_str(w.operands[1])}, which gives {got[:2 * S]} for {iname} = 0..{2 * S - 1}; stage "
                  f"{iname} % {S} completes once every {S} uses, so its phase is ({iname} // {S}) & 1 (or "
                  f"(({iname} // {S}) & 1) ^ 1 for a producer waiting on a stage to be free)", w.loc)


def _check_first_empty_wait(ordered: list[ir.Op], where: dict[ir.Op, Site], sets: dict[int, _Set]) -> None:
    loop_of = {id(op.regions[0]): op for op in ordered if op.kind == "for"}
    for w in ordered:
        if w.kind != "barrier_wait":
            continue
        ws = where[w]
        if ws.role is None or not ws.loops:
            continue
        if _first_phase(w, loop_of) != 0:
            continue
        s = sets[root_of(w.operands[0]).id]
        comps = s.completers
        if not comps or any(where[c].role is None or where[c].role[0] is not ws.role[0]
                            or where[c].role == ws.role for c in comps):
            continue
        blocked = []
        for c in comps:
            cs = where[c]
            if not cs.loops:
                break
            gate = None
            for w2 in ordered:
                w2s = where[w2]
                if (w2.kind != "barrier_wait" or w2s.role != cs.role or w2s.index > cs.index
                        or not w2s.loops or w2s.loops[-1] is not cs.loops[-1]):
                    continue
                if _first_phase(w2, loop_of) != 0:
                    continue
                s2 = sets[root_of(w2.operands[0]).id]
                c2 = s2.completers
                if c2 and all(where[x].role == ws.role and where[x].index > ws.index and where[x].loops
                              and where[x].loops[-1] is ws.loops[-1] for x in c2):
                    gate = w2
                    break
            if gate is None:
                break
            blocked.append((c, gate))
        else:
            c, gate = blocked[0]
            if not _report_here(w, gate, where, sets):
                continue                              # the cycle is reported from the gate's side
            i = _ring_wait_info(w)
            fix = (f"(({expr_str(i[0])} // {i[1]}) & 1) ^ 1" if i else "the phase before the first one (1)")
            raise err("GL106", f"deadlock on the first iteration: {_at(w)} waits on '{view_name(w.operands[0])}' with "
                      f"phase 0, which needs a completion first, but its only arrive ({_at(c)}) comes after "
                      f"{_at(gate)}, which waits for a barrier this role completes only after this wait. A fresh "
                      f"barrier passes a wait on phase 1: wait with {fix} for a stage to be free", w.loc)


def _report_here(w: ir.Op, gate: ir.Op, where: dict[ir.Op, Site], sets: dict[int, _Set]) -> bool:
    """Of the two waits of a first-iteration deadlock cycle, the one to report: the wait on the barrier
    that no TMA load completes on (the `empty` of a ring), else the producer role's."""
    def loaded(x):
        return bool(sets[root_of(x.operands[0]).id].loads)
    if loaded(w) != loaded(gate):
        return not loaded(w)
    def producer(x):
        ws, i = where[x].role
        return str(getattr(ws.attrs["roles"][i]["role"], "value", ws.attrs["roles"][i]["role"])).lower() == "producer"
    if producer(w) != producer(gate):
        return producer(w)
    return where[w].index < where[gate].index


def _first_phase(w: ir.Op, loop_of: dict[int, ir.Op]):
    """The phase a wait in a loop waits on in the loop's first iteration, or None if unknown."""
    p = w.operands[1]
    c = const_value(p)
    if c is not None:
        return int(c) & 1
    info = _ring_wait_info(w)
    if info is None:
        return None
    i = info[0]
    n0 = _first_value(i, loop_of)
    if n0 is None:
        return None
    v = _eval(p, expr_key(i), n0)
    return None if v is None else v & 1


# ------------------------------------------------------------------------------ async ordering


def _check_fences(ordered: list[ir.Op], where: dict[ir.Op, Site]) -> None:
    writes: dict[int, list[ir.Op]] = {}
    fences: dict = {}
    for op in ordered:
        if op.kind == "smem_store":
            writes.setdefault(root_of(op.operands[1]).id, []).append(op)
        elif op.kind == "smem_alloc" and op.operands:
            writes.setdefault(op.results[0].id, []).append(op)
        elif op.kind == "fence_async_shared":
            fences.setdefault(_role_key(where[op]), []).append(where[op].index)
    for rd in ordered:
        if rd.kind not in ("tma_store", "wgmma", "tcgen05_mma"):
            continue
        rs = where[rd]
        for v in _read_operands(rd):
            ws_ = [w for w in writes.get(root_of(v).id, ())
                   if where[w].index < rs.index and _role_key(where[w]) in (_role_key(rs), None)]
            if not ws_:
                continue
            last = max(ws_, key=lambda o: where[o].index)
            lo = where[last].index
            fs = fences.get(_role_key(rs), []) + (fences.get(None, []) if _role_key(where[last]) is None else [])
            if any(lo < f < rs.index for f in fs):
                continue
            what = "the TMA store" if rd.kind == "tma_store" else f"the {rd.kind}"
            raise err("GL201", f"{_at(rd)} reads '{view_name(v)}' through the async proxy, but it was last written "
                      f"from registers ({_at(last)}) with no fence_async_shared() between: {what} may read the old "
                      "bytes. Call fence_async_shared() after the store and before the async read", rd.loc)


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
            waits0.setdefault(_role_key(where[op]), []).append(where[op].index)
    for mm in ordered:
        if mm.kind != "wgmma" or not mm.results:
            continue
        waited = False
        stack, seen = [(mm.result, False)], set()
        bad: list[ir.Op] = []
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
                elif u.kind == "yield":
                    owner = parent_of.get(id(where[u].region))
                    if owner is None:
                        continue
                    if owner.kind == "for":
                        j = k
                        stack.append((owner.results[j], via_arg))
                        stack.append((owner.regions[0].args[1 + j], True))
                    elif owner.kind == "if":
                        stack.append((owner.results[k], via_arg))
                elif not via_arg:
                    bad.append(u)
        ms = where[mm]
        after = [i for i in waits0.get(_role_key(ms), []) if i > ms.index or any(
            where[lp].index < i <= where[lp].end for lp in ms.loops)]
        if not waited and not after:
            raise err("GL202", f"{_at(mm)} is issued with wait=False, but nothing waits for it: no wgmma_wait on its "
                      "result and no wgmma_wait(pendings=0) after it in its role, so it may still be running when its "
                      "result is read or the kernel ends. Retire it with acc = wgmma_wait(acc) (or use wait=True)",
                      mm.loc)
        for u in bad:
            if u in where and not any(ms.index < i < where[u].index for i in waits0.get(_role_key(ms), [])):
                if u.kind in ("wgmma",):
                    continue
                raise err("GL203", f"{_at(u)} uses the result of the async {_at(mm)} while it may still be in flight "
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
            waits.setdefault(_role_key(where[op]), []).append(op)
        elif op.kind == "cp_async_commit":
            commits.setdefault(_role_key(where[op]), []).append(op)
    for cps in copies.values():
        for cp in cps:
            cs = where[cp]
            if not any(where[c].index > cs.index or _same_loop_around(where[c], cs)
                       for c in commits.get(_role_key(cs), [])):
                if waits.get(_role_key(cs)):
                    raise err("GL205", f"{_at(cp)} is never committed: no cp_async_commit() after it, and "
                              "cp_async_wait only waits for committed groups; call cp_async_commit() after the copies",
                              cp.loc)
    for rd in ordered:
        if rd.kind not in ("smem_load", "wgmma", "tma_store", "tcgen05_mma"):
            continue
        rs = where[rd]
        for v in _read_operands(rd):
            cps = [c for c in copies.get(root_of(v).id, ()) if _role_key(where[c]) == _role_key(rs)]
            if not cps:
                continue
            ws_ = waits.get(_role_key(rs), [])
            first = min(cps, key=lambda o: where[o].index)
            ok = any(where[w].index < rs.index and (where[w].index > where[first].index or
                                                    _same_loop_around(where[w], rs)) for w in ws_) \
                or any(_same_loop_around(where[w], rs) and _same_loop_around(where[w], where[first]) for w in ws_)
            if not ok:
                raise err("GL204", f"{_at(rd)} reads '{view_name(v)}', which cp_async fills ({_at(first)}), with no "
                          "cp_async_wait between: the copies may not have landed. Call cp_async_commit() and "
                          "cp_async_wait(0) (and a thread barrier if other threads' copies are read) before the read",
                          rd.loc)


# ------------------------------------------------------------------------------ the kernel: layout sizes


def _layout_counts(layout) -> tuple[int | None, int | None]:
    """(warps, threads per warp) a register layout spreads a tile over; None where it does not say."""
    if isinstance(layout, (SliceLayout, DotOperandLayout)):
        return _layout_counts(layout.parent)
    if isinstance(layout, BlockedLayout):
        return math.prod(layout.warps_per_cta), math.prod(layout.threads_per_warp)
    if isinstance(layout, (MMALayout, MFMALayout)):
        return math.prod(layout.warps_per_cta), None
    return None, None


def _check_layout_sizes(kernel: ir.Kernel, ordered: list[ir.Op], where: dict[ir.Op, Site]) -> None:
    outside = module_warps(kernel)
    warp_size = kernel.arch.warp_size
    for op in ordered:
        for v in op.results:
            t = v.type
            if not isinstance(t, ir.TileType) or t.layout is None:
                continue
            warps, tpw = _layout_counts(t.layout)
            site = where[op]
            if site.role is not None:
                ws, i = site.role
                first, last = ws.attrs["roles"][i]["warps"]
                allowed = {last - first + 1}
                ctx = f"role {ws.attrs['roles'][i]['role']} (warps {first}..{last}) runs on {last - first + 1}"
            else:
                allowed = {outside}
                ctx = (f"kernel {kernel.name} runs on num_warps={kernel.num_warps}" if outside == kernel.num_warps else
                       f"code outside the warp roles of kernel {kernel.name} runs on the default role's {outside}")
            if tpw is not None and tpw != warp_size:
                raise err("GL302", f"{op.kind} makes a {'x'.join(map(str, t.shape))} tile in layout {t.layout}, whose "
                          f"threads_per_warp multiply to {tpw}, but a warp of {kernel.arch.name} has {warp_size} "
                          f"threads; make threads_per_warp multiply to {warp_size}", op.loc)
            if warps is not None and warps not in allowed:
                want = min(allowed)
                raise err("GL301", f"{op.kind} makes a {'x'.join(map(str, t.shape))} tile in layout {t.layout}, which "
                          f"spreads it over {warps} warps (warps_per_cta), but the {ctx} warps; make warps_per_cta "
                          f"multiply to {want} (Layout.rows(..., num_warps={want}), Layout.wgmma(({want}, 1)), ...)",
                          op.loc)


# ------------------------------------------------------------------------------ shared memory


def _warn(code: str, message: str, loc) -> None:
    msg = f"[{code}] {message}"
    if loc is not None:
        warnings.warn_explicit(f"{loc}: {msg}", GluonWarning, loc.file, loc.line)
    else:
        warnings.warn(msg, GluonWarning, stacklevel=3)


def _check_shared(ordered: list[ir.Op], where: dict[ir.Op, Site]) -> None:
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
        if op.kind in _READERS:
            for v in _read_operands(op):
                if root_of(v).id not in written:
                    raise err("GL401", f"{_at(op)} reads '{view_name(v)}', but nothing writes that region (no store, "
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
    _warn("GL405", f"'{name}' has {stages} stages but is indexed by the loop index {idx.name or 'i'} of the loop at "
          f"{loop.loc}, whose trip count is not known to stay below {stages}: an index past the ring reads and writes "
          f"other memory. Wrap it ({name}[{idx.name or 'i'} % {stages}]) or bound the loop", op.loc)
