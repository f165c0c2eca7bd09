"""Rules of the Ampere (SM80) ops: the HMMA dot and cp.async copies with their groups."""
from __future__ import annotations

from ....ir import Op, SmemType, TileType
from ..context import KernelLowering
from ..dot import lower_dot
from ..registry import rule


@rule("mma")
def lower_mma(lw: KernelLowering, op: Op) -> None:
    lower_dot(lw, op, "tf32")


@rule("cp_async")
def lower_cp_async(lw: KernelLowering, op: Op) -> None:
    ptr, offsets, dst, *rest = op.operands
    has_mask = bool(op.attrs.get("has_mask", len(rest) >= 1))
    mask = rest[0] if has_mask and rest else None
    if not isinstance(offsets.type, TileType):
        raise lw.err("cp_async needs a tile of offsets")
    if not isinstance(dst.type, SmemType):
        raise lw.err(f"cp_async copies into shared memory, got {dst.type}")
    lw.single_stage(dst, "destination")
    ptrs, pty = lw.address(ptr, offsets)
    m = f" mask {lw.ref_as(mask, offsets.type)}" if mask is not None else ""
    tok = lw.define(op.results[0], "tok") if op.results else lw.names.fresh("tok")
    memdesc = lw.ty(dst.type)[len("!ttg.memdesc"):]
    lw.emit(f"{tok} = ttg.async_copy_global_to_local {ptrs}, {lw.ref(dst)}{m} : {pty} -> {memdesc}")


@rule("cp_async_commit")
def lower_cp_async_commit(lw: KernelLowering, op: Op) -> None:
    tok = lw.define(op.results[0], "tok") if op.results else lw.names.fresh("tok")
    lw.emit(f"{tok} = ttg.async_commit_group")


@rule("cp_async_wait")
def lower_cp_async_wait(lw: KernelLowering, op: Op) -> None:
    tok = lw.define(op.results[0], "tok") if op.results else lw.names.fresh("tok")
    lw.emit(f"{tok} = ttg.async_wait {{num = {int(op.attrs.get('num', 0))} : i32}}")
