"""Pass: software pipelining — the implicit stage ring of multi-stage shared regions.

A multi-stage region (`smem(..., stages=S)` or `double_buffer=True`) used *without* a stage index is
the implicit form (the seed's Quick Start). This pass turns it into an explicit ring:

1. Warp-specialized: a producer role's `for` loop issues `tma_load(ring, desc, coords, bar)` and a
   consumer role's `for` loop reads the same rings (`wgmma`, `smem_load`), neither waiting. The pass
   allocates `ready` and `empty` barrier sets (S barriers, count 1) before the warp_specialize op and
   rewrites the two loops (i = (iv - lb) // step, s = i % S, phase = (i // S) & 1):

       producer:  wait empty[s] (phase ^ 1); expect ready[s] (bytes of the stage's loads);
                  tma_load(ring[s], ..., ready[s])
       consumer:  wait ready[s] (phase); wgmma(ring[s], ...); wgmma_wait(pendings=0, ring[s], ...);
                  arrive empty[s]

   Both loops must have the same bounds (same start, end and step), and the consumer must retire the
   wgmma reading a stage in the same iteration (`wgmma_wait(pendings=0)`, what `wgmma()` does by
   default) before the stage is released.
2. One loop that both loads a ring (`tma_load`) and reads it in the same iteration becomes a
   software pipeline, as gemm_tile_sm90 writes it by hand: a `ready` set of S barriers, a prologue
   loading iterations 0..S-2 (each under `if j < trip_count`), and in the loop: wait ready[s], the
   reads on ring[s], then (once the previous iteration's wgmma has retired: `wgmma_wait` with
   pendings <= 1) the loads of iteration i + S - 1 into its stage. The loads' coordinates must be
   computed from the induction variable and values defined outside the loop.

The barrier the user passed to the rewritten `tma_load`s (`barrier_name=mbar`) is no longer needed;
its alloc is removed when nothing else uses it. Kernels that index every stage themselves pass through
unchanged; constant stage indices are checked against the stage count. A multi-stage region still used
without a stage index afterwards is an error naming the op, its line and why no ring could be built.
When it rewrites anything, the pass re-runs the shared-memory accounting and the barrier-protocol
check on the result.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import ir
from .analysis import PURE, alloc_name, clone_op, const_value, expr_key, root_of, sites

_STAGE_USERS = {"tma_load", "tma_store", "smem_load", "smem_store", "wgmma", "wgmma_wait", "cp_async",
                "tcgen05_mma", "barrier_expect", "barrier_arrive", "barrier_wait"}
_SLICE_KINDS = PURE           # what a stage index may be computed from (cloned into the producer)


def pipeline(kernel: ir.Kernel) -> ir.Kernel:
    reasons: dict[ir.Op, str] = {}
    changed = _warp_specialized_rings(kernel, reasons)
    changed = _software_pipelines(kernel, reasons) or changed
    if changed:
        _cleanup(kernel)
    _check_stage_indices(kernel, reasons)
    return kernel


def _index_ring_use(e, op: ir.Op, ready: ir.Value, s: ir.Value, ph: ir.Value, views: dict[int, ir.Value]) -> None:
    """Point `op`'s ring operands at stage `s`; before the iteration's first ring use, wait for
    ready[s]. `views` (one per iteration) holds the stage views made so far; an empty one means no
    wait has been emitted yet."""
    e.loc = op.loc
    if not views:
        e.op("barrier_wait", [e.bar_index(ready, s), ph])
    for pos, _ in _ring_operands(op):
        v = op.operands[pos]
        if v.id not in views:
            views[v.id] = e.stage_view(v, s)
        op.operands[pos] = views[v.id]


# ------------------------------------------------------------------------------ rings and their uses


def ring_of(v: ir.Value) -> tuple[ir.Value, list[ir.Op]] | None:
    """(the multi-stage region, the smem_trans views from it to `v`) when `v` is a multi-stage shared
    value; None otherwise."""
    t = v.type
    if not isinstance(t, ir.SmemType) or t.stages <= 1:
        return None
    chain = []
    while isinstance(v.owner, ir.Op) and v.owner.kind == "smem_trans":
        chain.append(v.owner)
        v = v.owner.operands[0]
    if isinstance(v.owner, ir.Op) and v.owner.kind == "smem_alloc":
        return v, chain[::-1]
    return None


def _ring_operands(op: ir.Op) -> list[tuple[int, ir.Value]]:
    """(operand position, multi-stage region) of each un-indexed ring use of `op`."""
    if op.kind not in _STAGE_USERS:
        return []
    out = []
    for i, v in enumerate(op.operands):
        r = ring_of(v)
        if r is not None:
            out.append((i, r[0]))
    return out


def _use_kind(op: ir.Op, pos: int) -> str:
    if op.kind == "tma_load" and pos == 1:
        return "load"
    if op.kind == "wgmma" and pos in (0, 1):
        return "read"
    if op.kind == "smem_load" and pos == 0:
        return "read"
    if op.kind == "wgmma_wait" and pos >= 1:
        return "dep"
    return "other"


@dataclass
class _RingUses:
    root: ir.Value
    loads: list = field(default_factory=list)      # (op, site)
    reads: list = field(default_factory=list)      # reads and wgmma_wait deps: (op, site)
    others: list = field(default_factory=list)     # (op, site, why)


def _collect(kernel: ir.Kernel, where) -> dict[int, _RingUses]:
    rings: dict[int, _RingUses] = {}
    for op, site in where.items():
        for pos, root in _ring_operands(op):
            u = rings.setdefault(root.id, _RingUses(root))
            kind = _use_kind(op, pos)
            if kind == "load":
                u.loads.append((op, site))
            elif kind in ("read", "dep"):
                u.reads.append((op, site))
            else:
                why = f"{op.kind} on a whole multi-stage region is not something the stage ring can rewrite"
                u.others.append((op, site, why))
    return rings


def _direct_loop(op: ir.Op, site, where) -> ir.Op | None:
    """The `for` whose body holds `op` directly (not in a nested branch or loop), else None."""
    if site.loops and site.region is site.loops[-1].regions[0]:
        return site.loops[-1]
    return None


# ------------------------------------------------------------------------------ IR building helpers


class _Emit:
    """Appends freshly made ops to a list."""

    def __init__(self, ops: list, loc: ir.Loc | None):
        self.ops, self.loc = ops, loc

    def op(self, kind, operands=(), types=(), attrs=None, names=None, regions=()) -> ir.Op:
        o = ir.Op(kind, list(operands), [], dict(attrs or {}), list(regions), self.loc)
        names = names or [""] * len(types)
        o.results = [ir.Value(t, n, owner=o) for t, n in zip(types, names)]
        self.ops.append(o)
        return o

    def const(self, value: int, name: str = "") -> ir.Value:
        return self.op("constant", [], [ir.I32], {"value": int(value)}, [name]).result

    def bin(self, op: str, a: ir.Value, b: ir.Value, name: str = "") -> ir.Value:
        return self.op("binary", [a, b], [a.type], {"op": op}, [name]).result

    def lt(self, a: ir.Value, b: ir.Value, name: str = "") -> ir.Value:
        return self.op("cmp", [a, b], [ir.I1], {"pred": "lt"}, [name]).result

    def bar_index(self, bars: ir.Value, s: ir.Value) -> ir.Value:
        return self.op("barrier_index", [bars, s], [bars.type.stage()], names=[bars.name]).result

    def stage_view(self, v: ir.Value, s: ir.Value) -> ir.Value:
        root, chain = ring_of(v)
        x = self.op("smem_index", [root, s], [root.type.stage()], names=[root.name]).result
        for t in chain:
            x = self.op("smem_trans", [x], [t.results[0].type.stage()], dict(t.attrs), [t.results[0].name]).result
        return x


def _iteration(e: _Emit, loop: ir.Op) -> ir.Value:
    """The 0-based iteration number of `loop`'s body: (iv - lb) // step, folded for lb=0 / step=1."""
    lb, _, step = loop.operands[:3]
    x = loop.regions[0].args[0]
    if const_value(lb) != 0:
        x = e.bin("sub", x, lb, "it")
    if const_value(step) != 1:
        x = e.bin("div", x, step, "it")
    return x


def _trip_count(e: _Emit, loop: ir.Op) -> ir.Value:
    lb, ub, step = loop.operands[:3]
    d = ub if const_value(lb) == 0 else e.bin("sub", ub, lb, "trips")
    c = const_value(step)
    if c == 1:
        return d
    bump = e.const(c - 1) if c is not None else e.bin("sub", step, e.const(1))
    return e.bin("div", e.bin("add", d, bump), step, "trips")


def _iv_at(e: _Emit, loop: ir.Op, j: ir.Value) -> ir.Value:
    """The induction variable's value in iteration `j`: lb + j * step."""
    lb, _, step = loop.operands[:3]
    x = j if const_value(step) == 1 else e.bin("mul", j, step)
    return x if const_value(lb) == 0 else e.bin("add", lb, x)


def _stage_and_phase(e: _Emit, i: ir.Value, stages: int) -> tuple[ir.Value, ir.Value]:
    c_s = e.const(stages)
    s = e.bin("rem", i, c_s, "stage")
    ph = e.bin("and", e.bin("div", i, c_s), e.const(1), "phase")
    return s, ph


def _release_point(ops: list[ir.Op], uses_ring, max_pendings: int) -> tuple[ir.Op | None, ir.Op | None]:
    """The op after which the iteration's reads of the rings are complete, and (when that never
    happens) the async wgmma still in flight at the end of the body."""
    pending, last = None, None
    for op in ops:
        if not uses_ring(op) and op.kind != "wgmma_wait":
            continue
        if op.kind == "wgmma" and uses_ring(op):
            if op.attrs.get("is_async", False):
                pending = op
            elif pending is None:
                last = op
        elif op.kind == "wgmma_wait":
            if pending is not None and int(op.attrs.get("pendings", 0)) <= max_pendings:
                pending, last = None, op
        elif pending is None:
            last = op
    return last, pending


def _in_flight_error(w: ir.Op, max_pendings: int) -> ir.GluonError:
    return ir.GluonError(
        f"the wgmma reading the implicit ring is still in flight at the end of the iteration (no wgmma_wait with "
        f"pendings <= {max_pendings} after it): the stage can only be released once the wgmma reading it has "
        "retired; use wgmma(..., wait=True) (the default) or wgmma_wait(acc, pendings=0) in the loop", w.loc)


# ------------------------------------------------------------------------------ 1. warp-specialized rings


def _warp_specialized_rings(kernel: ir.Kernel, reasons: dict) -> bool:
    where = sites(kernel)
    rings = _collect(kernel, where)
    groups: dict[tuple, list[_RingUses]] = {}
    for u in rings.values():
        uses = u.loads + u.reads
        roles = {where[op].role for op, _ in uses}
        if not uses or any(r is None for r in roles):
            continue                                  # not (only) inside warp roles: see _software_pipelines
        if u.loads and u.reads and len({_direct_loop(op, s, where) for op, s in uses}) == 1 \
                and _direct_loop(*uses[0], where) is not None:
            continue                                  # loaded and read in one loop: a single-loop pipeline
        why = _ws_ring_problem(u, where)
        if why:
            for op, _ in uses:
                reasons.setdefault(op, why)
            continue
        p_loop = _direct_loop(*u.loads[0], where)
        c_loop = _direct_loop(*u.reads[0], where)
        groups.setdefault((p_loop, c_loop), []).append(u)
    for n, ((p_loop, c_loop), members) in enumerate(groups.items()):
        _build_ws_ring(kernel, where, p_loop, c_loop, members, suffix="" if len(groups) == 1 else str(n))
    return bool(groups)


def _ws_ring_problem(u: _RingUses, where) -> str | None:
    name = alloc_name(u.root)
    if u.others:
        return u.others[0][2]
    if not u.loads or not u.reads:
        return f"'{name}' is {'never loaded with tma_load' if not u.loads else 'never read'} inside the warp roles"
    p_loops = {_direct_loop(op, s, where) for op, s in u.loads}
    c_loops = {_direct_loop(op, s, where) for op, s in u.reads}
    if None in p_loops or None in c_loops:
        return (f"every use of '{name}' must sit directly in the body of a `for` loop (not in a branch or a nested "
                "loop) for the implicit ring")
    if len(p_loops) != 1 or len(c_loops) != 1:
        return f"'{name}' is loaded in {len(p_loops)} loop(s) and read in {len(c_loops)}; the implicit ring needs one of each"
    (p,), (c,) = p_loops, c_loops
    if where[p].role == where[c].role:
        return (f"'{name}' is loaded and read by two loops of the same warp role; put the loads in a producer role, "
                "or load and read it in one loop")
    rp, rc = where[p].role, where[c].role
    if rp is None or rc is None or rp[0] is not rc[0]:
        return f"the loop loading '{name}' and the loop reading it are not roles of one warp_specialize section"
    return None


def _same_bounds(a: ir.Op, b: ir.Op) -> bool:
    return all(expr_key(x) == expr_key(y) for x, y in zip(a.operands[:3], b.operands[:3]))


def _describe_bounds(loop: ir.Op) -> str:
    def show(v):
        c = const_value(v)
        return str(c) if c is not None else (v.name or f"%{v.id}")
    lb, ub, step = loop.operands[:3]
    return f"range({show(lb)}, {show(ub)}, {show(step)})"


def _ring_loads(body: ir.Region, roots: set[int]) -> list[ir.Op]:
    """The tma_loads of `body` into one of the rings `roots`."""
    return [op for op in body.ops if op.kind == "tma_load" and ring_of(op.operands[1])
            and ring_of(op.operands[1])[0].id in roots]


def _check_ring_loads(loads: list[ir.Op], kernel: ir.Kernel, what: str) -> None:
    """What an implicit ring or pipeline (`what`) needs of its loads: their own barriers are not
    synchronized on explicitly (the ring replaces them), and they load into the regions themselves."""
    roots = {root_of(op.operands[2]).id for op in loads}
    for op in kernel.walk():
        if op.kind in ("barrier_wait", "barrier_arrive", "barrier_expect") and root_of(op.operands[0]).id in roots:
            raise ir.GluonError(
                f"the barrier the loads complete on ('{alloc_name(root_of(op.operands[0]))}') is also used by "
                f"{op.kind} at {op.loc}; an implicit ring replaces that barrier, so index the stages and "
                "synchronize explicitly instead", loads[0].loc)
    if any(ring_of(op.operands[1])[1] for op in loads):
        raise ir.GluonError(f"tma_load into a transposed view of a ring is not supported by the implicit {what}; "
                            "load into the region itself", loads[0].loc)


def _common_stages(members: list[_RingUses], names: str, how: str, loc) -> int:
    """The one stage count of rings that share a barrier ring."""
    stages = {u.root.type.stages for u in members}
    if len(stages) != 1:
        raise ir.GluonError(f"the rings {names} are {how} but have different stage counts {sorted(stages)}; "
                            "give them the same number of stages", loc)
    return stages.pop()


def _build_ws_ring(kernel, where, p_loop: ir.Op, c_loop: ir.Op, members: list[_RingUses], suffix: str) -> None:
    names = ", ".join(f"'{alloc_name(u.root)}'" for u in members)
    S = _common_stages(members, names, "loaded by one producer loop and read by one consumer loop", p_loop.loc)
    if not _same_bounds(p_loop, c_loop):
        raise ir.GluonError(
            f"the producer loop at {p_loop.loc} ({_describe_bounds(p_loop)}) and the consumer loop at {c_loop.loc} "
            f"({_describe_bounds(c_loop)}) share the ring(s) {names} but do not have the same bounds: the implicit "
            "stage ring hands stage i % STAGES from producer iteration i to consumer iteration i, so both loops need "
            "the same start, end and step", c_loop.loc)
    roots = {u.root.id for u in members}
    p_body, c_body = p_loop.regions[0], c_loop.regions[0]
    loads = _ring_loads(p_body, roots)
    _check_ring_loads(loads, kernel, "ring")

    def uses_ring(op: ir.Op) -> bool:
        return any(r.id in roots for _, r in _ring_operands(op))

    release, in_flight = _release_point(c_body.ops, uses_ring, 0)
    if in_flight is not None:
        raise _in_flight_error(in_flight, 0)

    # the barrier sets, before the warp_specialize op
    ws_op = where[p_loop].role[0]
    outer = where[ws_op].region
    pre: list[ir.Op] = []
    e = _Emit(pre, ws_op.loc)
    ready = e.op("barrier_alloc", [], [ir.BarrierType(S, 1)], {"name": "ready" + suffix, "count": 1},
                 ["ready" + suffix]).result
    empty = e.op("barrier_alloc", [], [ir.BarrierType(S, 1)], {"name": "empty" + suffix, "count": 1},
                 ["empty" + suffix]).result
    at = outer.ops.index(ws_op)
    outer.ops[at:at] = pre

    # producer: wait for the consumer to free the stage, expect its bytes, load into it
    nbytes = sum(op.operands[1].type.stage_bytes for op in loads)
    new_ops: list[ir.Op] = []
    e = _Emit(new_ops, loads[0].loc)
    s, ph = _stage_and_phase(e, _iteration(e, p_loop), S)
    rb = None
    for op in p_body.ops:
        if op in loads:
            e.loc = op.loc
            if rb is None:
                e.op("barrier_wait", [e.bar_index(empty, s), e.bin("xor", ph, e.const(1), "empty_phase")])
                rb = e.bar_index(ready, s)
                e.op("barrier_expect", [rb], attrs={"bytes": nbytes})
            op.operands[1] = e.stage_view(op.operands[1], s)
            op.operands[2] = rb
        new_ops.append(op)
    p_body.ops[:] = new_ops

    # consumer: wait for the stage's data, read stage s, release it once the reads have retired
    new_ops = []
    e = _Emit(new_ops, c_loop.loc)
    s, ph = _stage_and_phase(e, _iteration(e, c_loop), S)
    views: dict[int, ir.Value] = {}
    for op in c_body.ops:
        if uses_ring(op):
            _index_ring_use(e, op, ready, s, ph, views)
        new_ops.append(op)
        if op is release:
            e.loc = op.loc
            e.op("barrier_arrive", [e.bar_index(empty, s)], attrs={"count": 1})
    c_body.ops[:] = new_ops


# ------------------------------------------------------------------------------ 2. single-loop pipelines


def _software_pipelines(kernel: ir.Kernel, reasons: dict) -> bool:
    changed = False
    while True:
        where = sites(kernel)
        rings = _collect(kernel, where)
        loops: dict[ir.Op, list[_RingUses]] = {}
        for u in rings.values():
            if not u.loads or not u.reads or u.others:
                continue
            ls = {_direct_loop(op, s, where) for op, s in u.loads + u.reads}
            if len(ls) == 1 and None not in ls:
                loops.setdefault(ls.pop(), []).append(u)
            else:
                why = (f"'{alloc_name(u.root)}' is loaded and read, but not all in the body of one loop (a loop that "
                       "loads a ring and reads it in the same iteration is pipelined)")
                for op, _ in u.loads + u.reads:
                    reasons.setdefault(op, why)
        if not loops:
            return changed
        loop, members = next(iter(loops.items()))
        _build_pipeline(kernel, where, loop, members)
        changed = True


def _slice(ops: list[ir.Op], body: ir.Region, values: list[ir.Value], what: str) -> list[ir.Op]:
    """The body ops computing `values` (pure scalar ops of the iv and outer values), in body order."""
    defined = {r.id: op for op in body.ops for r in op.results}
    carried = {a.id for a in body.args[1:]}
    need: set[ir.Op] = set()
    stack = list(values)
    while stack:
        v = stack.pop()
        if v.id in carried:
            raise ir.GluonError(f"{what} depends on a value carried by the loop ('{v.name}'); the pipelined loads "
                                "are issued STAGES-1 iterations early, so their operands must be computed from the "
                                "loop index and values defined before the loop", ops[0].loc)
        op = defined.get(v.id)
        if op is None or op in need:
            continue
        if op.kind not in _SLICE_KINDS:
            raise ir.GluonError(f"{what} depends on {op.kind} at {op.loc}; the pipelined loads are issued STAGES-1 "
                                "iterations early, so their coordinates must be plain arithmetic on the loop index "
                                "and values defined before the loop", ops[0].loc)
        need.add(op)
        stack.extend(op.operands)
    return [op for op in body.ops if op in need]


def _build_pipeline(kernel, where, loop: ir.Op, members: list[_RingUses]) -> None:
    names = ", ".join(f"'{alloc_name(u.root)}'" for u in members)
    S = _common_stages(members, names, "loaded and read in one loop", loop.loc)
    roots = {u.root.id for u in members}
    body = loop.regions[0]
    loads = _ring_loads(body, roots)

    def uses_ring(op: ir.Op) -> bool:
        return any(r.id in roots for _, r in _ring_operands(op)) and op not in loads

    first_read = next(i for i, op in enumerate(body.ops) if uses_ring(op))
    late = [op for op in loads if body.ops.index(op) > first_read]
    if late:
        raise ir.GluonError(f"tma_load into the ring(s) {names} comes after the loop reads them; the implicit pipeline "
                            "needs each iteration to load its data before reading it", late[0].loc)
    _check_ring_loads(loads, kernel, "pipeline")
    load_inputs = [v for op in loads for i, v in enumerate(op.operands) if i not in (1, 2)]
    slice_ops = _slice(loads, body, load_inputs, "a tma_load's coordinate")
    release, in_flight = _release_point([op for op in body.ops if op not in loads], uses_ring, 1)
    if in_flight is not None:
        raise _in_flight_error(in_flight, 1)
    nbytes = sum(op.operands[1].type.stage_bytes for op in loads)
    iv = body.args[0]

    def issue(e: _Emit, ready: ir.Value, stage: ir.Value, j: ir.Value) -> None:
        rb = e.bar_index(ready, stage)
        e.op("barrier_expect", [rb], attrs={"bytes": nbytes})
        mapping = {iv.id: _iv_at(e, loop, j)}
        for op in slice_ops:
            e.ops.append(clone_op(op, mapping))
        for op in loads:
            new = clone_op(op, mapping)
            new.operands[1] = e.stage_view(op.operands[1], stage)
            new.operands[2] = rb
            e.ops.append(new)

    # before the loop: the barriers, the trip count and the prologue filling stages 0..S-2
    parent = where[loop].region
    pre: list[ir.Op] = []
    e = _Emit(pre, loop.loc)
    ready = e.op("barrier_alloc", [], [ir.BarrierType(S, 1)], {"name": "ready", "count": 1}, ["ready"]).result
    trips = _trip_count(e, loop)
    for j in range(S - 1):
        cj = e.const(j)
        then: list[ir.Op] = []
        issue(_Emit(then, loads[0].loc), ready, cj, cj)
        _Emit(then, loop.loc).op("yield")
        els = ir.Region([], [])
        _Emit(els.ops, loop.loc).op("yield")
        e.op("if", [e.lt(cj, trips)], regions=[ir.Region([], then), els])
    at = parent.ops.index(loop)
    parent.ops[at:at] = pre

    # the loop: wait for stage i, read it, then load iteration i + S - 1 into the stage just freed
    new_ops: list[ir.Op] = []
    e = _Emit(new_ops, loop.loc)
    i = _iteration(e, loop)
    s, ph = _stage_and_phase(e, i, S)
    views: dict[int, ir.Value] = {}
    for op in body.ops:
        if op in loads:
            continue
        if uses_ring(op):
            _index_ring_use(e, op, ready, s, ph, views)
        new_ops.append(op)
        if op is release:
            e.loc = loads[0].loc
            j = e.bin("add", i, e.const(S - 1), "next")
            then: list[ir.Op] = []
            te = _Emit(then, loads[0].loc)
            issue(te, ready, te.bin("rem", j, te.const(S), "next_stage"), j)
            te.op("yield")
            els = ir.Region([], [])
            _Emit(els.ops, loop.loc).op("yield")
            e.op("if", [e.lt(j, trips)], regions=[ir.Region([], then), els])
    body.ops[:] = new_ops


# ------------------------------------------------------------------------------ cleanup and checks


def _cleanup(kernel: ir.Kernel) -> None:
    """Remove what the rewrite left unused: views, pure scalar arithmetic (the loads' coordinates that
    moved to the prologue and refill) and barrier sets nobody uses any more (the user's `mbar`)."""
    removable = _SLICE_KINDS | {"smem_index", "smem_trans", "barrier_index", "barrier_alloc"}
    while True:
        used = {v.id for op in kernel.walk() for v in op.operands}
        removed = False
        stack = [kernel.body]
        while stack:
            region = stack.pop()
            keep = []
            for op in region.ops:
                if op.kind in removable and op.results and not any(r.id in used for r in op.results):
                    removed = True
                    continue
                keep.append(op)
                stack.extend(op.regions)
            region.ops[:] = keep
        if not removed:
            return


def _check_stage_indices(kernel: ir.Kernel, reasons: dict) -> None:
    consts = {op.results[0].id: op.attrs["value"] for op in kernel.walk() if op.kind == "constant" and op.results
              and isinstance(op.results[0].type, ir.ScalarType)}
    for op in kernel.walk():
        if op.kind in ("smem_index", "barrier_index"):
            stages = op.operands[0].type.stages
            s = consts.get(op.operands[1].id)
            if s is not None and not 0 <= s < stages:
                raise ir.GluonError(f"stage index {s} out of range for a {stages}-stage region", op.loc)
        if op.kind in _STAGE_USERS:
            for v in op.operands:
                t = v.type
                if isinstance(t, (ir.SmemType, ir.BarrierType)) and t.stages > 1:
                    name = v.name or "region"
                    why = reasons.get(op) or (
                        "it is neither loaded by a producer role's loop and read by a consumer role's loop, nor "
                        "loaded and read in the same loop")
                    raise ir.GluonError(
                        f"{op.kind} uses the {t.stages}-stage region %{name} without a stage index, and no implicit "
                        f"stage ring could be built for it: {why}. Index a stage explicitly ({name}[s]) and "
                        "synchronize with barriers, or restructure as a producer/consumer loop pair", op.loc)
