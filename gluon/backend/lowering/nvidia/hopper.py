"""Rules of the Hopper (SM90) ops: warpgroup MMA and its wait, accumulator column split, mbarriers,
TMA copies, the async-proxy fence, and thread-block clusters."""
from __future__ import annotations

from ...ptx import cluster as ptx_cluster
from ....ir import BarrierType, DescType, Op, ScalarType, SmemType, TileType, Value
from ....types import DType
from ..context import KernelLowering
from ..literals import bool_literal, int_array
from ..registry import rule


# ------------------------------------------------------------------------------ warpgroup MMA


@rule("wgmma")
def lower_wgmma(lw: KernelLowering, op: Op) -> None:
    a, b, acc = op.operands[:3]
    if not isinstance(b.type, SmemType):
        raise lw.err(f"wgmma reads B from shared memory, got {b.type}")
    if not isinstance(a.type, (SmemType, TileType)):
        raise lw.err(f"wgmma reads A from shared memory or registers, got {a.type}")
    lw.single_stage(a, "A operand")
    lw.single_stage(b, "B operand")
    if len(op.operands) > 3:
        use_c = lw.ref(op.operands[3])
    else:
        use_c = lw.const_like(bool(op.attrs.get("use_acc", True)), ScalarType(DType.i1))
    attrs = "inputPrecision = 0 : i32" + (", isAsync = true" if op.attrs.get("is_async", False) else "")
    imprecise = op.attrs.get("max_num_imprecise_acc")
    if imprecise is None and a.type.dtype in (DType.f8e4m3, DType.f8e5m2) and acc.type.dtype == DType.f32:
        imprecise = 1 << 30   # Triton's sm90 default: accumulate fp8 products in full f32 precision
    if imprecise:
        attrs += f", maxNumImpreciseAcc = {int(imprecise)} : i32"
    lw.emit(f"{lw.define(op.result, 'acc')} = ttng.warp_group_dot {lw.ref(a)}, {lw.ref(b)}, {lw.ref(acc)}, "
            f"{use_c} {{{attrs}}} : {lw.ty(a.type)} * {lw.ty(b.type)} -> {lw.ty(op.result.type)}")


@rule("wgmma_wait")
def lower_wgmma_wait(lw: KernelLowering, op: Op) -> None:
    vals = op.operands
    name = lw.names.fresh(op.result.name or vals[0].name or "acc")
    n = len(vals)
    lhs = f"{name}:{n}" if n > 1 else name
    lw.alias_value(op.result, f"{name}#0" if n > 1 else name)
    lw.emit(f"{lhs} = ttng.warp_group_dot_wait {', '.join(lw.ref(v) for v in vals)} "
            f"{{pendings = {int(op.attrs.get('pendings', 0))} : i32}} : {', '.join(lw.ty(v.type) for v in vals)}")


def _wgmma_bases(warps_m: int, n: int) -> dict[str, list[list[int]]]:
    """The linear layout (Triton's #ttg.linear bases, [row, col]) of one WGMMA accumulator tile per warp:
    16 x n per warp, warps stacked along M. A thread holds 2 adjacent columns of rows r and r + 8 in
    every 8-column group; lanes take columns 2, 4 and rows 1, 2, 4; warps 16-row blocks."""
    register = [[0, 1], [8, 0]] + [[0, 8 << i] for i in range((n // 8).bit_length() - 1)]
    lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]]
    warp = [[16 << i, 0] for i in range(warps_m.bit_length() - 1)]
    return {"register": register, "lane": lane, "warp": warp}


def _linear(bases: dict[str, list[list[int]]]) -> str:
    parts = ", ".join(f"{k} = [{', '.join(int_array(b) for b in bases[k])}]" for k in ("register", "lane", "warp"))
    return f"#ttg.linear<{{{parts}, block = []}}>"


@rule("split_cols")
def lower_split_cols(lw: KernelLowering, op: Op) -> None:
    """Triton's own form of it (what tl.reshape + tl.permute + tl.split of an accumulator compile
    to): reshape [M, N] -> [M, 2, N/2] (the top column bit becomes the middle dim), move it last, split.
    The intermediate layouts are the accumulator's linear layout with that bit moved; the halves
    come out in the WGMMA layout of width N/2 (the same linear layout, which Triton accepts)."""
    (x,) = op.operands
    m, n = x.type.shape
    lay = x.type.layout
    h = n // 2
    bases = _wgmma_bases(lay.warps_per_cta[0], n)
    mid = {k: [[r, c // h, c % h] for r, c in v] for k, v in bases.items()}           # [M, 2, N/2]
    last = {k: [[r, c, a] for r, a, c in v] for k, v in mid.items()}                # [M, N/2, 2]
    dt = x.type.dtype.mlir
    t3 = f"tensor<{m}x2x{h}x{dt}, {_linear(mid)}>"
    t3t = f"tensor<{m}x{h}x2x{dt}, {_linear(last)}>"
    r, tr = lw.names.fresh("split"), lw.names.fresh("split")
    lw.emit(f"{r} = tt.reshape {lw.ref(x)} : {lw.ty(x.type)} -> {t3}")
    lw.emit(f"{tr} = tt.trans {r} {{order = array<i32: 0, 2, 1>}} : {t3} -> {t3t}")
    lo, hi = lw.define(op.results[0], "lo"), lw.define(op.results[1], "hi")
    lw.emit(f"{lo}, {hi} = tt.split {tr} : {t3t} -> {lw.ty(op.results[0].type)}")


# ------------------------------------------------------------------------------ mbarriers


@rule("barrier_alloc")
def lower_barrier_alloc(lw: KernelLowering, op: Op) -> None:
    res = op.result
    t = res.type
    if not isinstance(t, BarrierType):
        raise lw.err(f"barrier_alloc must produce barriers, got {t}")
    count = int(op.attrs.get("count", t.count))
    ty = lw.ty(t)
    name = lw.define(res, "bar")
    lw.emit(f"{name} = ttg.local_alloc : () -> {ty}")
    if t.stages == 1:
        lw.emit(f"ttng.init_barrier {name}, {count} : {ty}")
        return
    one = lw.ty(t.stage())
    for s in range(t.stages):
        b = lw.names.fresh()
        lw.emit(f"{b} = ttg.memdesc_index {name}[{lw.i32(s)}] : {ty} -> {one}")
        lw.emit(f"ttng.init_barrier {b}, {count} : {one}")


@rule("barrier_index")
def lower_barrier_index(lw: KernelLowering, op: Op) -> None:
    bars, stage = op.operands
    if not isinstance(bars.type, BarrierType) or bars.type.stages <= 1:
        raise lw.err(f"barrier_index needs a multi-stage barrier set, got {bars.type}")
    lw.emit(f"{lw.define(op.result)} = ttg.memdesc_index {lw.ref(bars)}[{lw.ref(stage)}] : "
            f"{lw.ty(bars.type)} -> {lw.ty(op.result.type)}")


def _pred(lw: KernelLowering, op: Op, idx: int) -> str:
    return lw.ref(op.operands[idx]) if len(op.operands) > idx else lw.true()


@rule("barrier_expect")
def lower_barrier_expect(lw: KernelLowering, op: Op) -> None:
    bar = op.operands[0]
    lw.single_stage(bar, "barrier")
    lw.emit(f"ttng.barrier_expect {lw.ref(bar)}, {int(op.attrs['bytes'])}, {_pred(lw, op, 1)} : {lw.ty(bar.type)}")


@rule("barrier_arrive")
def lower_barrier_arrive(lw: KernelLowering, op: Op) -> None:
    bar = op.operands[0]
    lw.single_stage(bar, "barrier")
    count = int(op.attrs.get("count", 1))
    if op.attrs.get("cluster"):
        if lw.num_ctas < 2:
            raise lw.err("arrive(cluster=True) in a kernel without a cluster (set_cluster)")
        count = ptx_cluster.ARRIVE_SENTINEL   # the PTX cluster pass turns it into one arrive per CTA
    lw.emit(f"ttng.arrive_barrier {lw.ref(bar)}, {count}, {_pred(lw, op, 1)} : {lw.ty(bar.type)}")


@rule("cp_async_arrive")
def lower_cp_async_arrive(lw: KernelLowering, op: Op) -> None:
    bar = op.operands[0]
    lw.single_stage(bar, "barrier")
    lw.emit(f"ttng.async_copy_mbarrier_arrive {lw.ref(bar)} : {lw.ty(bar.type)}")


@rule("barrier_wait")
def lower_barrier_wait(lw: KernelLowering, op: Op) -> None:
    bar, phase = op.operands[:2]
    lw.single_stage(bar, "barrier")
    if phase.type != ScalarType(DType.i32):
        raise lw.err(f"the phase must be an i32 scalar, got {phase.type}")
    lw.emit(f"ttng.wait_barrier {lw.ref(bar)}, {lw.ref(phase)}, {_pred(lw, op, 2)} : {lw.ty(bar.type)}")


# ------------------------------------------------------------------------------ TMA, fences, clusters


def _coords(lw: KernelLowering, vals: list[Value]) -> str:
    for v in vals:
        if v.type != ScalarType(DType.i32):
            raise lw.err(f"TMA coordinates must be i32 scalars, got {v.type}")
    return ", ".join(lw.ref(v) for v in vals)


@rule("tma_load")
def lower_tma_load(lw: KernelLowering, op: Op) -> None:
    desc, dst, bar, *coords = op.operands
    if not isinstance(desc.type, DescType):
        raise lw.err(f"the first operand must be a TMA descriptor, got {desc.type}")
    if len(coords) != len(desc.type.block_shape):
        raise lw.err(f"{len(coords)} coordinates for a rank-{len(desc.type.block_shape)} descriptor")
    lw.single_stage(dst, "destination")
    lw.single_stage(bar, "barrier")
    mc = bool(op.attrs.get("multicast"))
    if mc and lw.num_ctas < 2:
        raise lw.err("tma_load(multicast=True) in a kernel without a cluster (set_cluster)")
    if desc.id not in lw.arg_names:
        raise lw.err("a TMA load's descriptor must be a kernel argument")
    if lw.multicast.setdefault(desc.id, mc) != mc:
        raise lw.err(f"TMA loads through {lw.ref(desc)} both multicast and not; the PTX cluster pass makes a "
                     "descriptor's loads all multicast or none: use a second global tensor argument")
    lw.emit(f"ttng.async_tma_copy_global_to_local {lw.ref(desc)}[{_coords(lw, coords)}] {lw.ref(dst)}, "
            f"{lw.ref(bar)}, {lw.true()} : {lw.ty(desc.type)}, {lw.ty(bar.type)} -> {lw.ty(dst.type)}")


@rule("tma_store")
def lower_tma_store(lw: KernelLowering, op: Op) -> None:
    desc, src, *coords = op.operands
    if not isinstance(desc.type, DescType):
        raise lw.err(f"the first operand must be a TMA descriptor, got {desc.type}")
    if len(coords) != len(desc.type.block_shape):
        raise lw.err(f"{len(coords)} coordinates for a rank-{len(desc.type.block_shape)} descriptor")
    lw.single_stage(src, "source")
    lw.emit(f"ttng.async_tma_copy_local_to_global {lw.ref(desc)}[{_coords(lw, coords)}] {lw.ref(src)} : "
            f"{lw.ty(desc.type)}, {lw.ty(src.type)}")


@rule("tma_store_wait")
def lower_tma_store_wait(lw: KernelLowering, op: Op) -> None:
    lw.emit(f"ttng.async_tma_store_wait {{pendings = {int(op.attrs.get('pendings', 0))} : i32}}")


@rule("fence_async_shared")
def lower_fence_async_shared(lw: KernelLowering, op: Op) -> None:
    lw.emit(f"ttng.fence_async_shared {{bCluster = {bool_literal(bool(op.attrs.get('cluster', False)))}}}")


@rule("cluster_rank")
def lower_cluster_rank(lw: KernelLowering, op: Op) -> None:
    lw.emit(f'{lw.define(op.result)} = tt.elementwise_inline_asm "mov.u32 $0, %cluster_ctarank;" '
            '{constraints = "=r", packed_element = 1 : i32, pure = true} -> i32')


@rule("griddep_wait", "griddep_launch_dependents")
def lower_griddep(lw: KernelLowering, op: Op) -> None:
    # no ttng op in Triton 3.6 (its gdc_wait is inline asm too); `pure = false` keeps the order among the
    # memory ops. The launch with programmatic stream serialization comes from the ABI's `launch_pdl`
    instr = "wait" if op.kind == "griddep_wait" else "launch_dependents"
    lw.emit(f'{lw.names.fresh()} = tt.elementwise_inline_asm "griddepcontrol.{instr}; mov.u32 $0, 0;" '
            '{constraints = "=r", packed_element = 1 : i32, pure = false} -> i32')


@rule("cluster_sync")
def lower_cluster_sync(lw: KernelLowering, op: Op) -> None:
    # fence.mbarrier_init: this thread's mbarrier.init ops are visible cluster-wide after the barrier
    fence = lw.names.fresh()
    lw.emit(f'{fence} = tt.elementwise_inline_asm "fence.mbarrier_init.release.cluster; mov.u32 $0, 0;" '
            '{constraints = "=r", packed_element = 1 : i32, pure = false} -> i32')
    # with `memory`, a release / acquire barrier (the writes before it visible to the other CTAs' reads after it)
    relaxed = "false" if op.attrs.get("memory", True) else "true"
    lw.emit(f"ttng.cluster_arrive {{relaxed = {relaxed}}}")
    lw.emit("ttng.cluster_wait")
