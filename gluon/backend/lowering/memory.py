"""Rules of the memory ops every target has: global loads and stores, shared-memory regions
(alloc, stage index, load, store, transposed and reinterpreted views) and the block-wide barrier."""
from __future__ import annotations

from ...ir import Op, SmemType, TileType
from ...types import NVMMASharedLayout, SwizzledSharedLayout
from .context import KernelLowering
from .registry import rule

_LOAD_CACHE = ("ca", "cg", "cs", "cv")
_STORE_CACHE = ("wb", "cg", "cs", "wt")
_EVICT = ("evict_normal", "evict_first", "evict_last")


# ------------------------------------------------------------------------------ global memory


def _cache_attrs(lw: KernelLowering, op: Op, allowed_cache: tuple[str, ...]) -> str:
    cache = str(op.attrs.get("cache") or "").lstrip(".")
    evict = str(op.attrs.get("evict") or "").lstrip(".")
    if cache and cache not in allowed_cache:
        raise lw.err(f"cache modifier {cache!r} is not one of {', '.join(allowed_cache)}")
    if evict and evict not in _EVICT:
        raise lw.err(f"eviction policy {evict!r} is not one of {', '.join(_EVICT)}")
    if evict == "evict_normal":
        evict = ""
    if cache == "cg" and evict and lw.arch.backend == "cuda":
        raise lw.err(f"cache='cg' bypasses L1, so it cannot be combined with evict={evict!r} (ptxas rejects it)")
    out = ""
    if cache:
        out += f" cacheModifier = {cache}"
    if evict:
        out += f" evictionPolicy = {evict}"
    return out


@rule("load")
def lower_load(lw: KernelLowering, op: Op) -> None:
    ptr, offsets, *rest = op.operands
    has_mask = bool(op.attrs.get("has_mask", len(rest) >= 1))
    has_other = bool(op.attrs.get("has_other", len(rest) >= 2))
    mask = rest.pop(0) if has_mask and rest else None
    other = rest.pop(0) if has_other and rest else None
    res = op.result
    t = res.type
    if isinstance(offsets.type, TileType) != isinstance(t, TileType):
        raise lw.err(f"offsets {offsets.type} and result {t} must both be tiles or both scalars")
    if t.dtype.mlir != ptr.type.dtype.mlir:
        raise lw.err(f"loading {ptr.type} yields {ptr.type.dtype.name}, not {t.dtype.name}")
    ptrs, pty = lw.address(ptr, offsets)
    args = ptrs
    if mask is not None:
        args += ", " + lw.ref_as(mask, offsets.type)
        if other is not None:
            args += ", " + lw.ref_as(other, t)
    attrs = _cache_attrs(lw, op, _LOAD_CACHE)
    lw.emit(f"{lw.define(res)} = tt.load {args}{attrs} : {pty}")


@rule("store")
def lower_store(lw: KernelLowering, op: Op) -> None:
    ptr, offsets, value, *rest = op.operands
    has_mask = bool(op.attrs.get("has_mask", len(rest) >= 1))
    mask = rest[0] if has_mask and rest else None
    if value.type.dtype.mlir != ptr.type.dtype.mlir:
        raise lw.err(f"storing {value.type.dtype.name} through {ptr.type}")
    ptrs, pty = lw.address(ptr, offsets)
    args = f"{ptrs}, {lw.ref_as(value, offsets.type)}"
    if mask is not None:
        args += ", " + lw.ref_as(mask, offsets.type)
    attrs = _cache_attrs(lw, op, _STORE_CACHE)
    lw.emit(f"tt.store {args}{attrs} : {pty}")


# ------------------------------------------------------------------------------ shared memory


@rule("smem_alloc")
def lower_smem_alloc(lw: KernelLowering, op: Op) -> None:
    res = op.result
    t = res.type
    if not isinstance(t, SmemType):
        raise lw.err(f"smem_alloc must produce shared memory, got {t}")
    if op.operands:
        (init,) = op.operands
        if t.stages > 1:
            raise lw.err("an initial value needs a single-stage region")
        lw.emit(f"{lw.define(res, 'smem')} = ttg.local_alloc {lw.ref(init)} : ({lw.ty(init.type)}) -> {lw.ty(t)}")
    else:
        lw.emit(f"{lw.define(res, 'smem')} = ttg.local_alloc : () -> {lw.ty(t)}")


@rule("smem_index")
def lower_smem_index(lw: KernelLowering, op: Op) -> None:
    smem, stage = op.operands
    if not isinstance(smem.type, SmemType) or smem.type.stages <= 1:
        raise lw.err(f"smem_index needs a multi-stage shared region, got {smem.type}")
    lw.emit(f"{lw.define(op.result)} = ttg.memdesc_index {lw.ref(smem)}[{lw.ref(stage)}] : "
            f"{lw.ty(smem.type)} -> {lw.ty(op.result.type)}")


@rule("smem_reinterpret")
def lower_smem_reinterpret(lw: KernelLowering, op: Op) -> None:
    (smem,) = op.operands
    lw.emit(f"{lw.define(op.result)} = ttg.memdesc_reinterpret {lw.ref(smem)} : "
            f"{lw.ty(smem.type)} -> {lw.ty(op.result.type)}")


@rule("smem_load")
def lower_smem_load(lw: KernelLowering, op: Op) -> None:
    (smem,) = op.operands
    lw.single_stage(smem, "shared region")
    lw.emit(f"{lw.define(op.result)} = ttg.local_load {lw.ref(smem)} : {lw.ty(smem.type)} -> {lw.ty(op.result.type)}")


@rule("smem_store")
def lower_smem_store(lw: KernelLowering, op: Op) -> None:
    tile, smem = op.operands
    lw.single_stage(smem, "shared region")
    lw.emit(f"ttg.local_store {lw.ref(tile)}, {lw.ref(smem)} : {lw.ty(tile.type)} -> {lw.ty(smem.type)}")


@rule("smem_trans")
def lower_smem_trans(lw: KernelLowering, op: Op) -> None:
    (smem,) = op.operands
    st, rt = smem.type, op.result.type
    lw.single_stage(smem, "shared region")
    order = tuple(int(i) for i in op.attrs.get("order", tuple(reversed(range(len(st.shape))))))
    want_shape = tuple(st.shape[i] for i in order)
    lay = st.layout
    if isinstance(lay, NVMMASharedLayout):
        want = NVMMASharedLayout(tuple(want_shape), lay.swizzle, not lay.transposed)
        same = isinstance(rt.layout, NVMMASharedLayout) and (rt.layout.swizzle, rt.layout.transposed) == (want.swizzle, want.transposed)
    elif isinstance(lay, SwizzledSharedLayout):
        want = SwizzledSharedLayout(lay.vec, lay.per_phase, lay.max_phase, tuple(order.index(o) for o in lay.order))
        same = rt.layout == want
    else:
        want, same = None, False
    if tuple(rt.shape) != want_shape or not same:
        raise lw.err(f"the transposed view of {st} by order {list(order)} is {want_shape} with layout {want} "
                     f"(what Triton infers), but the IR says {rt}")
    lw.emit(f"{lw.define(op.result)} = ttg.memdesc_trans {lw.ref(smem)} {{order = array<i32: {', '.join(map(str, order))}>}} : "
            f"{lw.ty(st)} -> {lw.ty(rt)}")


@rule("thread_barrier")
def lower_thread_barrier(lw: KernelLowering, op: Op) -> None:
    lw.emit("gpu.barrier")
