"""Rules of the Ampere (SM80) ops: the HMMA dot, cp.async copies with their groups, and named barriers
(bar.sync / bar.arrive)."""
from __future__ import annotations

from ....ir import Op, ScalarType, SmemType, TileType
from ....types import DType
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


# ------------------------------------------------------------------------------ named barriers


def _named_barrier(lw: KernelLowering, op: Op, instr: str) -> None:
    """`bar.sync` / `bar.arrive` as side-effecting inline asm (pure = false: never CSE'd, hoisted or dropped).
    A constant id is written into the instruction (`bar.sync 8, 256;`), a run-time one is an "r" operand;
    the thread count is always an immediate. The asm returns a dummy i32 (tt.elementwise_inline_asm needs
    a result); with scalar operands Triton emits it once per thread, unpredicated, so every thread of the
    warp executes the barrier instruction."""
    n = int(op.attrs["num_threads"])
    res = lw.names.fresh("nbar")
    if "barrier_id" in op.attrs:
        lw.emit(f'{res} = tt.elementwise_inline_asm "{instr} {int(op.attrs["barrier_id"])}, {n}; mov.u32 $0, 0;" '
                '{constraints = "=r", packed_element = 1 : i32, pure = false} -> i32')
        return
    (bid,) = op.operands
    if bid.type != ScalarType(DType.i32):
        raise lw.err(f"a named barrier id must be an i32 scalar, got {bid.type}")
    lw.emit(f'{res} = tt.elementwise_inline_asm "{instr} $1, {n}; mov.u32 $0, 0;" '
            f'{{constraints = "=r,r", packed_element = 1 : i32, pure = false}} {lw.ref(bid)} : i32 -> i32')


@rule("named_barrier_sync")
def lower_named_barrier_sync(lw: KernelLowering, op: Op) -> None:
    _named_barrier(lw, op, "bar.sync")


@rule("named_barrier_arrive")
def lower_named_barrier_arrive(lw: KernelLowering, op: Op) -> None:
    _named_barrier(lw, op, "bar.arrive")
