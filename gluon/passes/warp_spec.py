"""Pass: warp-specialization checks and the mbarrier protocol.

Warp roles of one `warp_specialize` section must be disjoint, cover the kernel's warps exactly, and
include warp 0 (that role runs as Triton's default partition). When one role calls `cluster_sync`,
every role must (barrier.cluster waits for every thread of the cluster), and the worker roles must be
whole warpgroups (Triton's padding warps run no role code). A role that issues WGMMA must be whole
warpgroups starting at a warp index divisible by 4. Register budgets (setmaxnreg) must be multiples
of 8 in 24..256 and the block's total must fit the register file; Triton pads the worker partitions
to whole warpgroups, so the padding warps are counted at the workers' budget (a 1-warp producer with
registers=40 costs 4 x 32 x 40 registers).

Barrier protocol (`check_barrier_protocol`, over `barrier_alloc` sets and their `barrier_index`
views; a view is identified by its set and the structure of its index, so `ready[s]` written twice
is one barrier). It is conservative: it reports only what cannot work.

* Every `barrier_wait` needs something that completes a phase of its barrier: a `barrier_arrive`,
  a `barrier_expect` (an arrive that also announces TMA bytes) or a `tcgen05_mma` committing to it.
  TMA loads alone only deliver bytes. Otherwise: "possible deadlock: barrier_wait at L waits on B
  but nothing arrives on it".
* Where everything that completes the barrier runs in the wait's own role (or outside warp roles),
  comes after the wait in program order and no loop holds both, the wait can never finish: the same
  message, naming the arrive that comes too late.
* `barrier_expect` bytes must equal the bytes of the TMA loads completing on the same barrier in the
  same region (the sum of their destination stage tiles; a multicast load counts once per CTA of the
  cluster, each of which multicasts its part).
* A wait inside a loop with a literal phase on a barrier that is reused across iterations (the same
  barrier each time, or a ring indexed by a wrapping `i % STAGES`) and completes again in that loop
  or in a loop of another role: mbarrier phases flip at each completion, so a constant phase is wrong
  from the second use on ("the phase does not alternate"). A barrier indexed per iteration without
  wrapping (`bars[i]`, each used once) may wait on a constant phase.

Errors are `GluonError(message, loc of the op)`, their messages starting with a code (docs/DIAGNOSTICS.md):
GL110 (nothing arrives), GL111 (the arrives all come after the wait), GL112 (expect bytes of one region),
GL113 (a constant phase in a loop); the warp-role checks GL701-GL710 (docs/DIAGNOSTICS.md, "Warp roles").
gluon/passes/protocol_checks.py runs after these, for the rest.
"""
from __future__ import annotations

from .. import ir
from .analysis import Site, alloc_name, barrier_key, const_value, root_of, sites, view_name
from .protocol_checks import check_protocol


def check_warp_roles(kernel: ir.Kernel) -> ir.Kernel:
    for op in kernel.walk():
        if op.kind == "warp_specialize":
            _check_section(kernel, op)
    check_barrier_protocol(kernel)
    check_protocol(kernel)
    return kernel


def _role_loc(region: ir.Region, op: ir.Op):
    """The line of the role's `with warp_role(...)` (control.warp_role records it), else the section's."""
    return getattr(region, "loc", None) or op.loc


def _check_section(kernel: ir.Kernel, op: ir.Op) -> None:
    roles = op.attrs["roles"]
    owner: dict[int, str] = {}
    for role, region in zip(roles, op.regions):
        first, last = role["warps"]
        name = f"{role['role']} warps {first}..{last}"
        if first < 0 or last < first:
            fix = f"; did you mean warp_range=({last}, {first})?" if 0 <= last < first else ""
            raise ir.GluonError(f"[GL701] warp role {name}: warp_range must be (first, last) with 0 <= first <= last "
                                f"(both inclusive){fix}", _role_loc(region, op))
        for w in range(first, last + 1):
            if w in owner:
                raise ir.GluonError(f"[GL702] warp {w} belongs to two roles: {owner[w]} and {name}; the warp ranges "
                                    "of a section's roles must not overlap", _role_loc(region, op))
            owner[w] = name
    missing = [w for w in range(kernel.num_warps) if w not in owner]
    extra = [w for w in owner if w >= kernel.num_warps]
    if extra:
        raise ir.GluonError(f"[GL703] warp roles use warps {extra}, but the kernel has num_warps={kernel.num_warps}",
                            op.loc)
    if missing:
        raise ir.GluonError(f"[GL704] warps {missing} of the kernel's {kernel.num_warps} have no role; every warp "
                            "needs one", op.loc)
    default_region = next(r for role, r in zip(roles, op.regions) if role["warps"][0] == 0)
    defaults = [r for r in roles if r["warps"][0] == 0]
    default_warps = defaults[0]["warps"][1] + 1
    if default_warps % 4:
        raise ir.GluonError(f"[GL705] the role holding warp 0 has {default_warps} warps; it runs as the default "
                            "partition and needs a multiple of 4 (put a 1-warp producer after the consumers instead)",
                            _role_loc(default_region, op))
    total_regs = 0
    worker_warps, worker_budget = 0, 0
    for role, region in zip(roles, op.regions):
        first, last = role["warps"]
        n = last - first + 1
        uses_wgmma = any(o.kind == "wgmma" for o in region.walk())
        if uses_wgmma and (first % 4 or n % 4):
            raise ir.GluonError(f"[GL706] role {role['role']} (warps {first}..{last}) issues wgmma, which needs whole "
                                "warpgroups: start at a warp index divisible by 4 and use a multiple of 4 warps",
                                _first_loc(region, "wgmma") or op.loc)
        r = role.get("registers")
        if r is not None and (r % 8 or not 24 <= r <= 256):
            raise ir.GluonError(f"[GL707] role {role['role']}: registers={r}; setmaxnreg takes a multiple of 8 in "
                                "24..256", _role_loc(region, op))
        total_regs += n * 32 * (r if r is not None else 0)
        if first != 0:
            worker_warps += n
            worker_budget = max(worker_budget, r or 0)
    pad = -(-worker_warps // 4) * 4 - worker_warps       # Triton pads the workers to whole warpgroups
    total_regs += pad * 32 * worker_budget
    _check_cluster_sync(roles, op, pad)
    if total_regs > kernel.arch.regs_per_block:
        raise ir.GluonError(f"[GL710] register budgets total {total_regs} registers (worker warps padded to whole "
                            f"warpgroups: +{pad}), more than the {kernel.arch.regs_per_block} of an SM on "
                            f"{kernel.arch.name}", op.loc)


def _check_cluster_sync(roles: list, op: ir.Op, pad: int) -> None:
    """barrier.cluster waits for every thread of every CTA in the cluster: when one role meets there,
    all must, and no padding warp may exist (Triton's padding warps run no role code)."""
    syncs = [sum(o.kind == "cluster_sync" for o in region.walk()) for region in op.regions]
    if not any(syncs):
        return
    for role, n, region in zip(roles, syncs, op.regions):
        if n == 0:
            first, last = role["warps"]
            raise ir.GluonError(f"[GL708] role {role['role']} (warps {first}..{last}) never reaches cluster_sync, "
                                "which other roles call: barrier.cluster waits for every warp of the cluster, so it "
                                "would never complete; call cluster_sync() at the top of every warp role",
                                _role_loc(region, op))
    if pad:
        raise ir.GluonError(f"[GL709] the worker roles have {pad} warp{'s' if pad > 1 else ''} short of whole "
                            "warpgroups; Triton pads them with warps that run no role code and so never reach "
                            "cluster_sync: give the roles whole warpgroups (e.g. a 4-warp producer)", op.loc)


def _first_loc(region: ir.Region, kind: str):
    return next((o.loc for o in region.walk() if o.kind == kind), None)


# ------------------------------------------------------------------------------ barrier protocol

_COMPLETERS = ("barrier_arrive", "barrier_expect", "tcgen05_mma")


def _barrier_operand(op: ir.Op) -> ir.Value | None:
    if op.kind in ("barrier_wait", "barrier_arrive", "barrier_expect"):
        return op.operands[0]
    if op.kind == "tma_load":
        return op.operands[2]
    if op.kind == "tcgen05_mma":
        return op.operands[3] if len(op.operands) > 3 else None
    return None


def _at(op: ir.Op) -> str:
    return f"{op.kind} at {op.loc}" if op.loc else op.kind


def _role_name(site: Site) -> str:
    if site.role is None:
        return "code path"
    ws, i = site.role
    return f"role {ws.attrs['roles'][i]['role']}"


def check_barrier_protocol(kernel: ir.Kernel) -> None:
    where = sites(kernel)
    ordered = sorted(where, key=lambda o: where[o].index)
    bar_ops: dict[int, list[ir.Op]] = {}             # barrier set id -> ops using it, program order
    for op in ordered:
        b = _barrier_operand(op)
        if b is not None and isinstance(b.type, ir.BarrierType):
            bar_ops.setdefault(root_of(b).id, []).append(op)
    for ops in bar_ops.values():
        completers = [o for o in ops if o.kind in _COMPLETERS]
        loads = [o for o in ops if o.kind == "tma_load"]
        for w in (o for o in ops if o.kind == "barrier_wait"):
            _check_wait(w, completers, loads, where)
    _check_expect_bytes(ordered, where, int(kernel.attrs.get("num_ctas", 1)))
    _check_phases(where)


def _check_wait(w: ir.Op, completers: list[ir.Op], loads: list[ir.Op], where: dict[ir.Op, Site]) -> None:
    bar = w.operands[0]
    name = f"'{view_name(bar)}'"
    if not completers:
        hint = ""
        if loads:
            hint = (f" ({_at(loads[0])} delivers bytes to it, but TMA bytes complete a phase only after an arrive: "
                    f"announce them with {alloc_name(root_of(bar))}.expect(nbytes) before the loads)")
        raise ir.GluonError(f"[GL110] possible deadlock: {_at(w)} waits on {name} but nothing arrives on it{hint}",
                            w.loc)
    ws = where[w]
    if any(where[c].role != ws.role for c in completers):
        return                                       # another role completes it: concurrent
    if any(where[c].index < ws.index for c in completers):
        return                                       # something completes it before the wait
    if any(set(where[c].loops) & set(ws.loops) for c in completers):
        return                                       # a loop around both: a later iteration may come first
    if const_value(w.operands[1]) == 1:
        return                                       # waiting for the phase before the first one: passes
    listed = ", ".join(_at(c) for c in completers)
    raise ir.GluonError(f"[GL111] possible deadlock: {_at(w)} waits on {name} but nothing arrives on it before: "
                        f"its only {'arrive' if len(completers) == 1 else 'arrives'} ({listed}) "
                        f"come{'s' if len(completers) == 1 else ''} after the wait in the same {_role_name(ws)}, "
                        "with no loop around both", w.loc)


def _check_phases(where: dict[ir.Op, Site]) -> None:
    """Constant phases in loops on barriers that complete once per iteration."""
    by_root: dict[int, list[ir.Op]] = {}
    for op in where:
        b = _barrier_operand(op)
        if b is not None and isinstance(b.type, ir.BarrierType) and op.kind in _COMPLETERS:
            by_root.setdefault(root_of(b).id, []).append(op)
    for w, ws in where.items():
        if w.kind != "barrier_wait" or not ws.loops:
            continue
        phase = const_value(w.operands[1])
        if phase is None:
            continue
        bar = w.operands[0]
        root = root_of(bar)
        alloc_site = where.get(root.owner) if isinstance(root.owner, ir.Op) else None
        for loop in ws.loops:
            ls = where[loop]
            if alloc_site is not None and ls.index < alloc_site.index <= ls.end:
                continue                              # a fresh barrier each iteration
            comps = by_root.get(root.id, [])
            in_loop = [c for c in comps if loop in where[c].loops]
            reused = not _varies_in(bar, loop, where) or _wraps(bar)
            other_role_loops = [c for c in comps if where[c].loops and where[c].role != ws.role
                                and where[c].role is not None and ws.role is not None
                                and where[c].role[0] is ws.role[0]]
            if reused and (in_loop or other_role_loops):
                c = (in_loop or other_role_loops)[0]
                raise ir.GluonError(
                    f"[GL113] {_at(w)} waits on '{view_name(bar)}' with the constant phase {phase} inside the loop at "
                    f"{loop.loc}, but the barrier completes again in later iterations ({_at(c)}): the phase does not "
                    "alternate. mbarrier phases flip at every completion; wait on a phase that flips with each "
                    "reuse, e.g. (i // STAGES) & 1 for a STAGES-deep ring", w.loc)


def _wraps(bar: ir.Value) -> bool:
    """Whether the barrier view's index wraps around (`i % STAGES`, `i & (STAGES - 1)`): a ring."""
    o = bar.owner
    if not (isinstance(o, ir.Op) and o.kind == "barrier_index"):
        return False
    stack, seen = [o.operands[1]], set()
    while stack:
        v = stack.pop()
        if v.id in seen or not isinstance(v.owner, ir.Op):
            continue
        seen.add(v.id)
        if v.owner.kind == "binary" and v.owner.attrs.get("op") in ("rem", "and"):
            return True
        if v.owner.kind in ("binary", "cast"):
            stack.extend(v.owner.operands)
    return False


def _varies_in(bar: ir.Value, loop: ir.Op, where: dict[ir.Op, Site]) -> bool:
    """Whether the barrier view's index depends on something defined inside `loop` (its iv)."""
    o = bar.owner
    if not (isinstance(o, ir.Op) and o.kind == "barrier_index"):
        return False
    body = loop.regions[0]
    inside = {a.id for a in body.args}
    for op in body.walk():
        inside.update(r.id for r in op.results)
    seen: set[int] = set()
    stack = [o.operands[1]]
    while stack:
        v = stack.pop()
        if v.id in seen:
            continue
        seen.add(v.id)
        if v.id in inside:
            return True
        if isinstance(v.owner, ir.Op):
            stack.extend(v.owner.operands)
    return False


def _load_bytes(ld: ir.Op, num_ctas: int) -> int:
    """Bytes a TMA load brings to each CTA's barrier: a multicast load is issued by every CTA of the
    cluster (each its own part) and lands in all of them."""
    return ld.operands[1].type.stage_bytes * (num_ctas if ld.attrs.get("multicast") else 1)


def _check_expect_bytes(ordered: list[ir.Op], where: dict[ir.Op, Site], num_ctas: int = 1) -> None:
    by_region: dict[int, tuple[dict, dict, ir.Region]] = {}
    for op in ordered:
        if op.kind not in ("barrier_expect", "tma_load"):
            continue
        bar = _barrier_operand(op)
        if not isinstance(bar.type, ir.BarrierType):
            continue
        region = where[op].region
        expects, loads, _ = by_region.setdefault(id(region), ({}, {}, region))
        key = barrier_key(bar)
        (expects if op.kind == "barrier_expect" else loads).setdefault(key, []).append(op)
    for expects, loads, region in by_region.values():
        direct = {id(o) for o in region.ops}
        nested = [o for o in region.walk() if id(o) not in direct]
        for key, exps in expects.items():
            lds = loads.get(key, [])
            if not lds:
                continue                              # the loads are elsewhere (a branch): not checked
            if any(o.kind == "tma_load" and barrier_key(o.operands[2]) == key for o in nested):
                continue                              # some loads sit in nested regions: not checked
            want = sum(int(e.attrs.get("bytes", 0)) for e in exps)
            have = sum(_load_bytes(ld, num_ctas) for ld in lds)
            if want != have:
                parts = " + ".join(f"{_load_bytes(ld, num_ctas)} ({view_name(ld.operands[1])}"
                                   f"{f', multicast by {num_ctas} CTAs' if ld.attrs.get('multicast') else ''})"
                                   for ld in lds)
                raise ir.GluonError(
                    f"[GL112] barrier_expect on '{view_name(exps[0].operands[0])}' announces {want} bytes, but the "
                    f"TMA loads completing on it here bring {have} bytes: {parts}; the phase would "
                    f"{'never complete' if want > have else 'complete before all the data has landed'}",
                    exps[0].loc)
