"""Global memory in the interpreter: masked loads and stores, and the atomics.

A pointer value is a `values.Ptr` (a Buffer and an element offset); an access `ptr + offsets` touches
elements `ptr.offset + offsets` of the buffer. Every element the mask leaves active must lie inside the
buffer (the tensor's storage from its first element on); the first that does not is an error naming the
op's source line, the buffer and the offending offset. Masked-off elements of a load are `other`, or 0
where the load has none (the GPU leaves them undefined).

Atomics run element by element in the program's element order (row-major over the tile), each program
after the one before: one valid interleaving of the GPU's concurrent atomics. Without repeated addresses
in one op they are applied at once (vectorized); with repeats, one element after the other.
"""
from __future__ import annotations

import numpy as np

from ..types import DType
from .ops import InterpretError, rule, shape_of
from .values import Ptr, from_memory, reg_dtype, round_to, to_memory


def _addresses(it, op, ptr, offsets, mask, slack: int = 0) -> tuple[np.ndarray, np.ndarray, tuple]:
    """(flat element indices, flat active mask, the access's shape), checked against the buffer (and up to
    `slack` elements past its end: a read's `Buffer.slack`)."""
    if not isinstance(ptr, Ptr):
        raise InterpretError(f"{op.kind} needs a global pointer, got {type(ptr).__name__}", op.loc)
    shape = np.shape(offsets)
    addr = (np.asarray(offsets).astype(np.int64) + ptr.offset).reshape(-1)
    if mask is None:
        active = np.ones(addr.shape, bool)
    else:
        active = np.broadcast_to(np.asarray(mask, bool), shape).reshape(-1)
    n = len(ptr.buf)
    bad = active & ((addr < 0) | (addr >= n + slack))
    if bad.any():
        i = int(np.argmax(bad))
        where = f" (element {tuple(int(k) for k in np.unravel_index(i, shape))} of the access)" if shape else ""
        raise InterpretError(
            f"out-of-bounds {op.kind} in program {it.pid[:it.rank]}: '{ptr.buf.name}' has {n} "
            f"elements of {ptr.buf.dtype.name}, this accesses element {int(addr[i])}{where}; mask the access "
            "(mask=offs < n)", op.loc)
    return addr, active, shape


@rule("load")
def _load(it, op, args):
    ptr, offsets, *rest = args
    mask = rest.pop(0) if op.attrs.get("has_mask") and rest else None
    other = rest.pop(0) if op.attrs.get("has_other") and rest else None
    dt = op.result.type.dtype
    buf = ptr.buf
    addr, active, shape = _addresses(it, op, ptr, offsets, mask, buf.slack)
    past = active & (addr >= len(buf)) if buf.slack else None    # inside the allocation's last 16-byte segment
    if past is not None and past.any():
        active = active & ~past
    else:
        past = None
        if active.all():
            return [from_memory(buf.data[addr], dt).reshape(shape)]
    if other is not None:
        out = np.array(np.broadcast_to(np.asarray(other, reg_dtype(dt)), shape)).reshape(-1)
    else:
        out = np.zeros(addr.shape, reg_dtype(dt))
    out[active] = from_memory(buf.data[addr[active]], dt)
    if past is not None:                        # whatever memory holds there: NaN (the least integer) here
        out[past] = np.nan if out.dtype.kind == "f" else np.iinfo(out.dtype).min if out.dtype.kind in "iu" else 0
    return [out.reshape(shape)]


@rule("store")
def _store(it, op, args):
    ptr, offsets, value, *rest = args
    mask = rest[0] if op.attrs.get("has_mask") and rest else None
    dt = op.operands[0].type.dtype
    addr, active, shape = _addresses(it, op, ptr, offsets, mask)
    vals = to_memory(np.broadcast_to(np.asarray(value), shape).reshape(-1), dt)
    ptr.buf.data[addr[active]] = vals[active]
    return []


# ------------------------------------------------------------------------------ atomics


def _as_unsigned(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def _combine(kind: str, dt: DType, old: np.ndarray, val: np.ndarray) -> np.ndarray:
    """The new value of an rmw of `kind` (registers of `dt`)."""
    if kind == "xchg":
        return val
    if kind in ("add", "fadd"):
        if dt.is_float:
            return round_to(dt, old.astype(np.float64) + val.astype(np.float64)) if dt != DType.f64 else old + val
        return old + val
    if kind in ("and", "or", "xor"):
        return {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[kind](old, val)
    if kind in ("max", "min"):
        return (np.maximum if kind == "max" else np.minimum)(old, val)
    if kind in ("umax", "umin"):
        f = np.maximum if kind == "umax" else np.minimum
        return f(_as_unsigned(np.ascontiguousarray(old)), _as_unsigned(np.ascontiguousarray(val))).view(old.dtype)
    if kind in ("fmax", "fmin"):       # NaN handling may differ from the GPU's bitwise max/min
        return (np.fmax if kind == "fmax" else np.fmin)(old, val)
    raise ValueError(f"unknown atomic op {kind!r}")


def _atomic(it, op, ptr, offsets, mask, update) -> np.ndarray:
    """Apply `update(old_regs, idx) -> new_regs` at the active addresses; the old values (result)."""
    dt = op.operands[0].type.dtype
    addr, active, shape = _addresses(it, op, ptr, offsets, mask)
    data = ptr.buf.data
    old = np.zeros(addr.shape, reg_dtype(dt))
    idx = np.nonzero(active)[0]
    a = addr[idx]
    if len(np.unique(a)) == len(a):                     # no address twice: all at once
        cur = from_memory(data[a], dt)
        old[idx] = cur
        data[a] = to_memory(update(cur, idx), dt)
    else:                                               # repeats: one element after the other
        for i, ad in zip(idx, a):
            cur = from_memory(data[ad:ad + 1], dt)
            old[i] = cur[0]
            data[ad:ad + 1] = to_memory(update(cur, np.array([i])), dt)
    return old.reshape(shape)


@rule("atomic_rmw")
def _atomic_rmw(it, op, args):
    ptr, offsets, value, *rest = args
    mask = rest[0] if op.attrs.get("has_mask") and rest else None
    dt = op.operands[0].type.dtype
    kind = op.attrs["op"]
    vals = np.broadcast_to(np.asarray(value, reg_dtype(dt)), np.shape(offsets)).reshape(-1)
    try:
        return [_atomic(it, op, ptr, offsets, mask, lambda cur, idx: _combine(kind, dt, cur, vals[idx]))]
    except ValueError as e:
        raise InterpretError(str(e), op.loc) from None


@rule("atomic_cas")
def _atomic_cas(it, op, args):
    ptr, offsets, cmp, value = args
    dt = op.operands[0].type.dtype
    shape = np.shape(offsets)
    cmps = to_memory(np.broadcast_to(np.asarray(cmp, reg_dtype(dt)), shape).reshape(-1), dt)
    vals = np.broadcast_to(np.asarray(value, reg_dtype(dt)), shape).reshape(-1)

    def update(cur, idx):               # compares the bits, as the hardware does
        same = _as_unsigned(np.ascontiguousarray(to_memory(cur, dt))) == _as_unsigned(np.ascontiguousarray(cmps[idx]))
        return np.where(same, vals[idx], cur)

    return [_atomic(it, op, ptr, offsets, None, update)]


__all__ = ["shape_of"]
