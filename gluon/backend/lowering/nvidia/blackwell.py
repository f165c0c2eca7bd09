"""Rules of the Blackwell (SM100) ops: tensor memory and the tcgen05 MMA."""
from __future__ import annotations

from ....ir import Op, ScalarType, TileType, TmemType
from ....types import BlockedLayout, DType, Layout, TensorMemoryLayout
from ..context import KernelLowering
from ..registry import rule


def _tmem_message_layout(lw: KernelLowering, t: TmemType) -> BlockedLayout | None:
    """The register layout of TMEM's 32x32b (blockM 128) / 16x32bx2 (blockM 64) messages for the
    warps running this code, as a blocked layout (what Triton's get_tmem_reg_layout computes as a
    linear layout); None where we do not know it (then the IR's layout is used as is)."""
    lay = t.layout
    warps = lw.cur_warps
    if not isinstance(lay, TensorMemoryLayout) or len(t.shape) != 2 or warps % 4 or t.dtype.bits != 32:
        return None
    m, n = t.shape
    col_groups = warps // 4
    if m != lay.block[0] or n % col_groups:
        return None
    if m == 128:
        return BlockedLayout((1, n // col_groups), (32, 1), (4, col_groups), (0, 1))
    if m == 64 and n % (2 * col_groups) == 0:
        return BlockedLayout((1, n // (2 * col_groups)), (16, 2), (4, col_groups), (0, 1))
    return None


def _same_distribution(a: Layout, b: Layout) -> bool:
    if a == b:
        return True
    # with one warp column and one thread column, `order` does not change who holds what
    return (isinstance(a, BlockedLayout) and isinstance(b, BlockedLayout)
            and (a.size_per_thread, a.threads_per_warp, a.warps_per_cta) == (b.size_per_thread, b.threads_per_warp, b.warps_per_cta)
            and a.threads_per_warp[1] == 1 and a.warps_per_cta[1] == 1)


@rule("tmem_alloc")
def lower_tmem_alloc(lw: KernelLowering, op: Op) -> None:
    res = op.result
    t = res.type
    if not isinstance(t, TmemType):
        raise lw.err(f"tmem_alloc must produce tensor memory, got {t}")
    if op.operands:
        (init,) = op.operands
        val, vty = lw.ref(init), init.type
        msg = _tmem_message_layout(lw, t)
        if msg is not None and isinstance(vty, TileType) and not _same_distribution(vty.layout, msg):
            cty = TileType(vty.dtype, vty.shape, msg)
            conv = lw.names.fresh(f"{init.name}_tmem" if init.name else "")
            lw.emit(f"{conv} = ttg.convert_layout {val} : {lw.ty(vty)} -> {lw.ty(cty)}")
            val, vty = conv, cty
        lw.emit(f"{lw.define(res, 'tmem')} = ttng.tmem_alloc {val} : ({lw.ty(vty)}) -> {lw.ty(t)}")
    else:
        lw.emit(f"{lw.define(res, 'tmem')} = ttng.tmem_alloc : () -> {lw.ty(t)}")


@rule("tmem_load")
def lower_tmem_load(lw: KernelLowering, op: Op) -> None:
    """tmem_load into the IR's layout; when that is not the TMEM message layout (Triton's verifier
    rejects it), load in the message layout and convert."""
    (tm,) = op.operands
    res = op.result
    rt = res.type
    msg = _tmem_message_layout(lw, tm.type)
    if msg is None or _same_distribution(rt.layout, msg):
        lw.emit(f"{lw.define(res)} = ttng.tmem_load {lw.ref(tm)} : {lw.ty(tm.type)} -> {lw.ty(rt)}")
        return
    mty = TileType(rt.dtype, rt.shape, msg)
    raw = lw.names.fresh(f"{res.name}_tmem" if res.name else "")
    lw.emit(f"{raw} = ttng.tmem_load {lw.ref(tm)} : {lw.ty(tm.type)} -> {lw.ty(mty)}")
    lw.emit(f"{lw.define(res)} = ttg.convert_layout {raw} : {lw.ty(mty)} -> {lw.ty(rt)}")


@rule("tcgen05_mma")
def lower_tcgen05_mma(lw: KernelLowering, op: Op) -> None:
    a, b, d, *rest = op.operands
    lw.single_stage(a, "A operand")
    lw.single_stage(b, "B operand")
    use_d = lw.const_like(bool(op.attrs.get("use_acc", True)), ScalarType(DType.i1))
    tok = lw.define(op.results[0], "tok") if op.results else lw.names.fresh("tok")
    types = f"{lw.ty(a.type)}, {lw.ty(b.type)}, {lw.ty(d.type)}"
    head = f"{tok} = ttng.tc_gen5_mma {lw.ref(a)}, {lw.ref(b)}, {lw.ref(d)}[], {use_d}, {lw.true()}"
    if rest:
        bar = rest[0]
        lw.single_stage(bar, "barrier")
        lw.emit(f"{head}, {lw.ref(bar)}[{lw.true()}] {{is_async}} : {types}, {lw.ty(bar.type)}")
    else:
        lw.emit(f"{head} : {types}")
