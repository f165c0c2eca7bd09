"""Rules of the region ops: scf.for, scf.if and ttg.warp_specialize (with its capture analysis).

A region's closing `yield` never reaches a rule of its own: the parent lowers the region with
`lw.lower_region(region, on_yield)` and turns the yield into `scf.yield` / `ttg.warp_yield` there. The
`yield` rule below only answers a yield that no parent consumed.
"""
from __future__ import annotations

from ...ir import Op, Region, ScalarType, Value
from ...types import DType
from .context import KernelLowering
from .registry import rule


@rule("for")
def lower_for(lw: KernelLowering, op: Op) -> None:
    lb, ub, step, *inits = op.operands
    body = op.regions[0]
    if len(body.args) != 1 + len(inits):
        raise lw.err(f"the body has {len(body.args)} arguments for {len(inits)} loop-carried values")
    for v in (ub, step):
        if v.type != lb.type or not isinstance(lb.type, ScalarType) or not lb.type.dtype.is_int:
            raise lw.err(f"lower bound, upper bound and step must be integer scalars of one type, got "
                         f"{lb.type}, {ub.type}, {step.type}")
    init_refs = [lw.ref(v) for v in inits]
    res = [lw.define(r) for r in op.results]
    iv = lw.define(body.args[0], "iv")
    carried = [lw.define(a) for a in body.args[1:]]
    head = f"{', '.join(res)} = " if res else ""
    line = f"{head}scf.for {iv} = {lw.ref(lb)} to {lw.ref(ub)} step {lw.ref(step)}"
    if inits:
        types = ", ".join(lw.ty(v.type) for v in inits)
        line += f" iter_args({', '.join(f'{c} = {i}' for c, i in zip(carried, init_refs))}) -> ({types})"
    lw.emit(f"{line} : {lw.ty(lb.type)} {{")
    lw.depth += 1

    def on_yield(y: Op) -> None:
        if [v.type for v in y.operands] != [v.type for v in inits]:
            raise lw.err("the loop body yields types that differ from the loop-carried values")
        if y.operands:
            lw.emit(f"scf.yield {', '.join(lw.ref(v) for v in y.operands)} : "
                    f"{', '.join(lw.ty(v.type) for v in y.operands)}")

    if inits and (not body.ops or body.ops[-1].kind != "yield"):
        raise lw.err("a loop with carried values must end its body with yield")
    lw.lower_region(body, on_yield)
    lw.depth -= 1
    lw.emit("}")


@rule("if")
def lower_if(lw: KernelLowering, op: Op) -> None:
    cond = op.operands[0]
    if cond.type != ScalarType(DType.i1):
        raise lw.err(f"the condition must be an i1 scalar, got {cond.type}")
    regions = op.regions
    if op.results and len(regions) != 2:
        raise lw.err("an if with results needs then and else regions")
    res = [lw.define(r) for r in op.results]
    head = f"{', '.join(res)} = " if res else ""
    types = f" -> ({', '.join(lw.ty(r.type) for r in op.results)})" if res else ""
    lw.emit(f"{head}scf.if {lw.ref(cond)}{types} {{")

    def on_yield(y: Op) -> None:
        if [v.type for v in y.operands] != [r.type for r in op.results]:
            raise lw.err("a branch yields types that differ from the if's results")
        if y.operands:
            lw.emit(f"scf.yield {', '.join(lw.ref(v) for v in y.operands)} : "
                    f"{', '.join(lw.ty(v.type) for v in y.operands)}")

    for i, reg in enumerate(regions[:2]):
        if op.results and (not reg.ops or reg.ops[-1].kind != "yield"):
            raise lw.err("each branch of an if with results must end with yield")
        if i == 1:
            if not op.results and all(o.kind == "yield" for o in reg.ops):
                break
            lw.emit("} else {")
        lw.depth += 1
        lw.lower_region(reg, on_yield)
        lw.depth -= 1
    lw.emit("}")


@rule("yield")
def lower_yield(lw: KernelLowering, op: Op) -> None:  # pragma: no cover - lower_region hands yields to the parent
    raise lw.err("yield outside a loop, branch or warp role")


# ------------------------------------------------------------------------------ warp specialization


@rule("warp_specialize")
def lower_warp_specialize(lw: KernelLowering, op: Op) -> None:
    if lw.in_partition:
        raise lw.err("warp_specialize cannot nest inside a warp partition")
    roles = op.attrs.get("roles")
    if not roles or len(roles) != len(op.regions):
        raise lw.err(f"attrs['roles'] must list one role per region ({len(op.regions)} regions)")
    defaults = [i for i, r in enumerate(roles) if r.get("default")]
    if len(defaults) != 1:
        raise lw.err(f"exactly one role must have default=True, found {len(defaults)}")
    d = defaults[0]
    parts = [(r, reg) for i, (r, reg) in enumerate(zip(roles, op.regions)) if i != d]
    warps = []
    for r, _ in parts:
        first, last = r["warps"]
        warps.append(int(last) - int(first) + 1)
        if warps[-1] < 1:
            raise lw.err(f"role {r.get('role')!r} has warps {r['warps']}: (first, last) inclusive, last >= first")

    caps, remats = _captures([reg for _, reg in parts])
    cap_refs = [lw.ref(v) for v in caps]
    cap_types = [lw.ty(v.type) for v in caps]

    regs = [r.get("registers") for r, _ in parts]
    attr = ""
    if any(x is not None for x in regs):
        share = _even_register_share(lw, sum(warps))
        regs = [int(x) if x is not None else share for x in regs]
        attr = f" attributes {{requestedRegisters = array<i32: {', '.join(map(str, regs))}>}}"

    res = [lw.define(r) for r in op.results]
    head = f"{', '.join(res)} = " if res else ""
    lw.emit(f"{head}ttg.warp_specialize({', '.join(cap_refs)}){attr}")
    lw.emit("default {")
    lw.depth += 1
    default_region = op.regions[d]
    yielded: list[Value] = []

    def on_default_yield(y: Op) -> None:
        yielded.extend(y.operands)

    lw.lower_region(default_region, on_default_yield)
    if [v.type for v in yielded] != [r.type for r in op.results]:
        raise lw.err("the default role must yield exactly the warp_specialize op's results")
    if yielded:
        lw.emit(f"ttg.warp_yield {', '.join(lw.ref(v) for v in yielded)} : "
                f"{', '.join(lw.ty(v.type) for v in yielded)}")
    else:
        lw.emit("ttg.warp_yield")
    lw.depth -= 1

    for idx, ((role, reg), nw, remat) in enumerate(zip(parts, warps, remats)):
        scope = lw.push_scope()
        scope.depth = lw.depth + 1
        args = []
        for v, t in zip(caps, cap_types):
            name = lw.names.fresh(v.name or "arg")
            scope.env[v.id] = name
            args.append(f"{name}: {t}")
        lw.emit("}")
        lw.emit(f"partition{idx}({', '.join(args)}) num_warps({nw}) {{")
        lw.depth += 1
        scope.insert_at = len(lw.lines)
        lw.in_partition = True
        lw.cur_warps = nw
        for c in remat:
            lw.lower(c)

        def on_part_yield(y: Op, role=role) -> None:
            if y.operands:
                raise lw.err(f"the warp role {role.get('role')!r} cannot yield values; only the default role can")

        try:
            lw.lower_region(reg, on_part_yield)
        finally:
            lw.in_partition = False
            lw.cur_warps = lw.num_warps
        lw.emit("ttg.warp_return")
        lw.depth -= 1
        lw.pop_scope()
    rtypes = [lw.ty(r.type) for r in op.results]
    rt = rtypes[0] if len(rtypes) == 1 else f"({', '.join(rtypes)})"
    lw.emit(f"}} : ({', '.join(cap_types)}) -> {rt}")


def _captures(regions: list[Region]) -> tuple[list[Value], list[list[Op]]]:
    """Values the partition regions use from outside (first-use order, shared by all
    partitions), and per partition the IR constants to re-materialize inside it."""
    caps: list[Value] = []
    seen: set[int] = set()
    remats: list[list[Op]] = []
    for region in regions:
        defined: set[int] = set()
        remat: list[Op] = []
        remat_ids: set[int] = set()

        def visit(r: Region) -> None:
            defined.update(a.id for a in r.args)
            for o in r.ops:
                for v in o.operands:
                    if v.id in defined:
                        continue
                    owner = v.owner
                    if isinstance(owner, Op) and owner.kind == "constant":
                        if owner.results[0].id not in remat_ids:
                            remat_ids.add(owner.results[0].id)
                            remat.append(owner)
                    elif v.id not in seen:
                        seen.add(v.id)
                        caps.append(v)
                for sub in o.regions:
                    visit(sub)
                defined.update(x.id for x in o.results)

        visit(region)
        remats.append(remat)
    return caps, remats


def _even_register_share(lw: KernelLowering, partition_warps: int) -> int:
    """Registers per thread when the register file is split evenly over all warps Triton
    launches (default warps + partition warps padded to whole warpgroups), as its
    allocate-warp-groups pass computes it: asking for this leaves a warpgroup unchanged."""
    total = lw.num_warps + -(-partition_warps // 4) * 4
    regs = int(getattr(lw.arch, "regs_per_block", 65536))
    share = regs // total // lw.warp_size // 8 * 8
    return max(24, min(256, share))
