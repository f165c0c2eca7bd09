"""Rules of the atomics on global memory: `tt.atomic_rmw <kind>, <sem>, <scope>, ptrs, vals[, mask]` and
`tt.atomic_cas <sem>, <scope>, ptrs, cmp, vals`, on a tile of pointers or one pointer (the address is
built as for load/store: splat + addptr). `fmax`/`fmin` (f32, f64) have no rmw kind in Triton 3.6, so
they are built as Triton's frontend builds them: on the value's bits, a signed max (min) where the value
is non-negative and an unsigned min (max) where its sign bit is set, the old value picked by the sign."""
from __future__ import annotations

from ...ir import Op, TileType, same_shape_kind
from ...types import DType
from .context import KernelLowering
from .registry import rule

_TT_KIND = {"xchg": "exch"}          # TTGIR's spelling of the rmw kinds that differ from the IR's
_FLOAT_AS_INT = {DType.f32: DType.i32, DType.f64: DType.i64}


def _check(lw: KernelLowering, op: Op, n_values: int) -> None:
    ptr, offsets = op.operands[:2]
    if isinstance(offsets.type, TileType) != isinstance(op.result.type, TileType):
        raise lw.err(f"offsets {offsets.type} and result {op.result.type} must both be tiles or both scalars")
    for v in op.operands[2:2 + n_values] + [op.result]:
        if v.type.dtype.mlir != ptr.type.dtype.mlir:
            raise lw.err(f"atomic on {ptr.type} with a {v.type.dtype.name} value or result")


def _emit_rmw(lw: KernelLowering, kind: str, sem: str, scope: str, ptrs: str, pty: str, val: str, vty: str,
              mask: str | None, mty: str, res: str | None = None) -> str:
    name = res or lw.names.fresh("old")
    args, types = f"{ptrs}, {val}", f"{pty}, {vty}"
    if mask is not None:
        args, types = f"{args}, {mask}", f"{types}, {mty}"
    lw.emit(f"{name} = tt.atomic_rmw {_TT_KIND.get(kind, kind)}, {sem}, {scope}, {args} : ({types}) -> {vty}")
    return name


@rule("atomic_rmw")
def lower_atomic_rmw(lw: KernelLowering, op: Op) -> None:
    ptr, offsets, value, *rest = op.operands
    mask = rest[0] if op.attrs.get("has_mask") and rest else None
    _check(lw, op, 1)
    kind, sem, scope = op.attrs["op"], op.attrs["sem"], op.attrs["scope"]
    ptrs, pty = lw.address(ptr, offsets)
    val, vty = lw.ref_as(value, offsets.type), lw.ty(op.result.type)
    mty = lw.ty(same_shape_kind(offsets.type, DType.i1))
    m = lw.ref_as(mask, offsets.type) if mask is not None else None
    if kind not in ("fmax", "fmin"):
        _emit_rmw(lw, kind, sem, scope, ptrs, pty, val, vty, m, mty, lw.define(op.result))
        return
    dt = ptr.type.dtype
    it = _FLOAT_AS_INT.get(dt)
    if it is None:
        raise lw.err(f"atomic {kind} takes f32 or f64, not {dt.name}")
    ity = lw.ty(same_shape_kind(offsets.type, it))
    iptrs, ipty = lw.names.fresh("iptrs"), lw.ptr_ty(it, offsets.type)
    lw.emit(f"{iptrs} = tt.bitcast {ptrs} : {pty} -> {ipty}")
    ival = lw.names.fresh("ival")
    lw.emit(f"{ival} = tt.bitcast {val} : {vty} -> {ity}")
    zero = lw.const_like(0, same_shape_kind(offsets.type, it))
    true = lw.const_like(True, same_shape_kind(offsets.type, DType.i1))
    neg, pos = lw.names.fresh("neg"), lw.names.fresh("pos")
    lw.emit(f"{neg} = arith.cmpi slt, {ival}, {zero} : {ity}")
    lw.emit(f"{pos} = arith.xori {neg}, {true} : {mty}")
    if m is not None:
        mpos, mneg = lw.names.fresh("mpos"), lw.names.fresh("mneg")
        lw.emit(f"{mpos} = arith.andi {m}, {pos} : {mty}")
        lw.emit(f"{mneg} = arith.andi {m}, {neg} : {mty}")
    else:
        mpos, mneg = pos, neg
    signed, unsigned = ("max", "umin") if kind == "fmax" else ("min", "umax")
    r_pos = _emit_rmw(lw, signed, sem, scope, iptrs, ipty, ival, ity, mpos, mty)
    r_neg = _emit_rmw(lw, unsigned, sem, scope, iptrs, ipty, ival, ity, mneg, mty)
    old = lw.names.fresh("old_bits")
    sel_ty = f"{mty}, {ity}" if isinstance(offsets.type, TileType) else ity
    lw.emit(f"{old} = arith.select {pos}, {r_pos}, {r_neg} : {sel_ty}")
    lw.emit(f"{lw.define(op.result)} = tt.bitcast {old} : {ity} -> {vty}")


@rule("atomic_cas")
def lower_atomic_cas(lw: KernelLowering, op: Op) -> None:
    ptr, offsets, cmp, value = op.operands
    _check(lw, op, 2)
    ptrs, pty = lw.address(ptr, offsets)
    vty = lw.ty(op.result.type)
    c, v = lw.ref_as(cmp, offsets.type), lw.ref_as(value, offsets.type)
    lw.emit(f"{lw.define(op.result)} = tt.atomic_cas {op.attrs['sem']}, {op.attrs['scope']}, {ptrs}, {c}, {v} : "
            f"({pty}, {vty}, {vty}) -> {vty}")
