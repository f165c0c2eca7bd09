"""The mbarrier protocol checks of check_protocol (gluon/passes/protocol_checks.py): whether the arrives,
expects, TMA loads and waits on each barrier set can make its phases complete when, and only when, the
waiting role expects them to. A mistake here hangs the GPU or reads a stage before its data lands, with
nothing to show for it, so it is caught before the kernel runs.

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
"""
from __future__ import annotations

from .. import ir
from .analysis import Site, alloc_name, barrier_key, const_value, expr_key, expr_str, root_of, view_name
from .protocol_common import READERS, at, err, read_operands, role_key


def check_barriers(ordered: list[ir.Op], where: dict[ir.Op, Site], num_ctas: int) -> None:
    """GL101-GL107, in this order, over the kernel's ops in program order."""
    sets = _barrier_sets(ordered)
    _check_arrive_without_expect(sets)
    _check_arrive_counts(sets, where, num_ctas)
    _check_expect_in_branches(ordered, where, num_ctas)
    _check_reads_without_wait(ordered, where, sets)
    _check_ring_phases(ordered, where)
    _check_first_empty_wait(ordered, where, sets)


# ------------------------------------------------------------------------------ barrier sets, loops and counters


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


# ------------------------------------------------------------------------------ the checks


def _check_arrive_without_expect(sets: dict[int, _Set]) -> None:
    for s in sets.values():
        if s.loads and s.arrives and not s.expects and not s.mmas:
            a, ld = s.arrives[0], s.loads[0]
            name = alloc_name(s.root)
            raise err("GL107", f"{at(a)} arrives on '{view_name(a.operands[0])}', which TMA loads complete on "
                      f"({at(ld)}), but nothing calls expect() on it: a plain arrive completes the phase at once, "
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
                f"{at(c)} ({_arrivals(c, num_ctas)})" for c in comps)
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
        per_role[role_key(ws)] = per_role.get(role_key(ws), 0) + 1
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
                      f"loads completing on it here, some inside `if` branches ({at(nested[0])}), bring {shown} "
                      "bytes depending on the branch taken; the phase would never complete or complete before the "
                      "data lands. Announce the bytes of the loads that really run (an expect in each branch, or "
                      "the expect's bytes computed from the same condition)", e.loc)


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
            role_waits.setdefault(role_key(where[op]), []).append(op)
    for rd in ordered:
        if rd.kind not in READERS:
            continue
        rs = where[rd]
        for v in read_operands(rd):
            r = root_of(v)
            for bid in filled.get(r.id, ()):
                bs = sets[bid]
                mine = [w for w in bs.waits if role_key(where[w]) == role_key(rs)
                        or ((where[w].role is None or rs.role is None) and where[w].index < rs.index)]
                if any(where[x].index < rs.index and role_key(where[x]) == role_key(rs)
                       for x in stored.get(r.id, ())):
                    continue                          # the role writes the region itself (a staging tile)
                bname = alloc_name(bs.root)
                if not bs.waits:
                    raise err("GL103", f"{at(rd)} reads '{view_name(v)}', which TMA loads fill ({at(bs.loads[0])}), "
                              f"but nothing waits on the barrier they complete on ('{bname}'): the read can see the "
                              f"stage before its data lands; wait on it first, e.g. {bname}[s].wait(phase)", rd.loc)
                if not mine:
                    if not role_waits.get(role_key(rs)):
                        raise err("GL103", f"{at(rd)} reads '{view_name(v)}', which TMA loads fill "
                                  f"({at(bs.loads[0])}), but its role waits on no barrier (the waits on '{bname}' "
                                  f"are in other roles: {at(bs.waits[0])}); wait on '{bname}' in the reading role "
                                  "before the read",
                                  rd.loc)
                    continue
                if all(where[w].index > rs.index for w in mine):
                    raise err("GL103", f"{at(rd)} reads '{view_name(v)}', which TMA loads fill, before its role "
                              f"waits on their barrier ('{bname}', first {at(mine[0])}): the first "
                              "read can see the stage before its data lands; move the wait before the read", rd.loc)


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
        raise err("GL105", f"{at(w)} waits on '{view_name(w.operands[0])}' of a {S}-stage ring with phase "
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
            raise err("GL106", f"deadlock on the first iteration: {at(w)} waits on '{view_name(w.operands[0])}' with "
                      f"phase 0, which needs a completion first, but its only arrive ({at(c)}) comes after "
                      f"{at(gate)}, which waits for a barrier this role completes only after this wait. A fresh "
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
