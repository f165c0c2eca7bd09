"""Atomic read-modify-write and compare-and-swap on global memory, named and behaving as Triton's.

Each takes an address as `load`/`store` do (a pointer parameter plus offsets: `ptr + offs`, a scalar or a
tile), broadcasts `val` to the address's shape and converts it to the pointee dtype, and returns the old
values (the pointee dtype, the address's shape and layout). The per-thread `if` conditions around the
call mask it, as they mask loads and stores. `sem` is the memory ordering (default "acq_rel") and
`scope` who it orders against (default "gpu"), as in `tl.atomic_add(pointer, val, mask, sem, scope)`.
A scalar address is one atomic per program (Triton runs it on one thread and shares the old value).
"""
from __future__ import annotations

from .. import ir
from ..types import DType
from .core import Tensor, _broadcast_to, _to_tensor, cast
from .memory import _address, _mask_for
from .tracing import _tr, _user_loc

_INTS = (DType.i32, DType.u32, DType.i64, DType.u64)
_ADD = _INTS + (DType.f16, DType.bf16, DType.f32, DType.f64)
# What each op takes, as Triton 3.6's frontend allows (fp16/bf16: add only; no 8- or 16-bit ints).
_ALLOWED: dict[str, tuple[DType, ...]] = {
    "add": _ADD, "max": _INTS + (DType.f32, DType.f64), "min": _INTS + (DType.f32, DType.f64),
    "and": _INTS, "or": _INTS, "xor": _INTS, "xchg": _INTS + (DType.f32, DType.f64),
    "cas": _INTS + (DType.f32, DType.f64),
}


def _choice(name: str, what: str, value, allowed: tuple[str, ...], default: str) -> str:
    """`value` (None: the default) if it is one of `allowed`, else a GluonError at the user's line."""
    if value is None:
        return default
    if not isinstance(value, str) or value not in allowed:
        raise ir.GluonError(f"atomic_{name}: {what}={value!r} is not one of {', '.join(map(repr, allowed))}",
                            _user_loc())
    return value


def _prepare(name: str, pointer, values: tuple, sem, scope):
    """The address, the values broadcast and converted to the pointee dtype, and sem and scope, checked."""
    base, offs = _address(pointer)
    dtype = base.type.dtype
    if dtype not in _ALLOWED[name]:
        ok = ", ".join(d.name for d in _ALLOWED[name])
        raise ir.GluonError(f"atomic_{name} on a pointer to {dtype.name}: it takes {ok}", _user_loc())
    vals = [cast(_to_tensor(v, dtype), dtype) for v in values]
    shape = offs.shape or next((v.shape for v in vals if v.shape), ())
    if shape and not offs.shape:          # a tile of values at one address: every lane hits it (as store does)
        offs = _broadcast_to(offs, shape)
    vals = [_broadcast_to(v, shape) if shape else v for v in vals]
    sem = _choice(name, "sem", sem, ir.ATOMIC_SEMS, "acq_rel")
    scope = _choice(name, "scope", scope, ir.ATOMIC_SCOPES, "gpu")
    return base, offs, vals, sem, scope


def _result_type(dtype: DType, offs: Tensor) -> ir.TileType | ir.ScalarType:
    return ir.TileType(dtype, offs.shape, offs.layout) if offs.shape else ir.ScalarType(dtype)


def _rmw(name: str, pointer, val, mask, sem, scope) -> Tensor:
    base, offs, (v,), sem, scope = _prepare(name, pointer, (val,), sem, scope)
    dtype = base.type.dtype
    kind = name
    if name == "add" and dtype.is_float:
        kind = "fadd"
    elif name in ("max", "min"):
        kind = ("f" if dtype.is_float else "" if dtype.is_signed else "u") + name
    m = _mask_for(offs.shape, mask)
    operands = [base, offs, v] + ([m] if m is not None else [])
    attrs = {"op": kind, "sem": sem, "scope": scope, "has_mask": m is not None}
    return Tensor(_tr().emit("atomic_rmw", operands, [_result_type(dtype, offs)], attrs).result)


def atomic_add(pointer, val, mask=None, sem: str | None = None, scope: str | None = None) -> Tensor:
    """*pointer += val atomically (fadd for floats); returns the old values."""
    return _rmw("add", pointer, val, mask, sem, scope)


def atomic_max(pointer, val, mask=None, sem: str | None = None, scope: str | None = None) -> Tensor:
    """*pointer = max(*pointer, val) (signed or unsigned by the pointee; f32/f64 as Triton does); the old values."""
    return _rmw("max", pointer, val, mask, sem, scope)


def atomic_min(pointer, val, mask=None, sem: str | None = None, scope: str | None = None) -> Tensor:
    """*pointer = min(*pointer, val) (signed or unsigned by the pointee; f32/f64 as Triton does); the old values."""
    return _rmw("min", pointer, val, mask, sem, scope)


def atomic_and(pointer, val, mask=None, sem: str | None = None, scope: str | None = None) -> Tensor:
    """*pointer &= val (integers); returns the old values."""
    return _rmw("and", pointer, val, mask, sem, scope)


def atomic_or(pointer, val, mask=None, sem: str | None = None, scope: str | None = None) -> Tensor:
    """*pointer |= val (integers); returns the old values."""
    return _rmw("or", pointer, val, mask, sem, scope)


def atomic_xor(pointer, val, mask=None, sem: str | None = None, scope: str | None = None) -> Tensor:
    """*pointer ^= val (integers); returns the old values."""
    return _rmw("xor", pointer, val, mask, sem, scope)


def atomic_xchg(pointer, val, mask=None, sem: str | None = None, scope: str | None = None) -> Tensor:
    """*pointer = val; returns the old values (TTGIR's `exch`)."""
    return _rmw("xchg", pointer, val, mask, sem, scope)


def atomic_cas(pointer, cmp, val, sem: str | None = None, scope: str | None = None, *, mask=None) -> Tensor:
    """*pointer = val where *pointer == cmp; returns the old values. Unmasked, as Triton's is (`mask` is only
    taken to say so), so it may not sit under a per-thread `if` either: a masked-off lane would still swap."""
    if mask is not None:
        raise ir.GluonError("atomic_cas takes no mask (neither does Triton's tt.atomic_cas); to skip lanes, give "
                            "them a cmp that cannot match or an address of their own", _user_loc())
    if _tr().masks:
        raise ir.GluonError("atomic_cas cannot be masked (tt.atomic_cas takes no mask), so it cannot sit under a "
                            "per-thread `if`; move it out of the `if`", _user_loc())
    base, offs, (c, v), sem, scope = _prepare("cas", pointer, (cmp, val), sem, scope)
    return Tensor(_tr().emit("atomic_cas", [base, offs, c, v], [_result_type(base.type.dtype, offs)],
                             {"sem": sem, "scope": scope}).result)
