"""The kernel DSL: Python builtins that trace into Gluon IR.

A kernel is a Python function decorated with `@kernel(arch=SM90, num_warps=8)` (explicit form: shared
regions, barriers, warp roles and arch ops spelled out) or `@jit` (SIMT form: `program_id`,
`thread_id`, `if idx < n: dst[idx] = src[idx]`). Calling `.trace(...)` runs the function once with
symbolic values; every builtin appends ops to the kernel's IR through an `ir.Builder`, recording the
user's source line. Python `if`/`for` over symbolic values is rewritten into IR regions by
`gluon.frontend` before tracing.

This module never imports a backend: launching goes through a hook that `gluon.jit` installs.
"""
from __future__ import annotations

import builtins
import inspect
import os
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

from . import frontend, ir
from .arch import SM90, Arch, arch_by_name
from .types import (DotOperandLayout, DType, Layout, MMALayout, NVMMASharedLayout, SliceLayout, SwizzleMode,
                    TensorMemoryLayout, TensorRef, WarpRole)

# ---------------------------------------------------------------------------------- errors / locs

_INTERNAL_FILES = {os.path.join(os.path.dirname(__file__), f) for f in ("dsl.py", "frontend.py", "ir.py", "types.py")}


def _user_loc() -> ir.Loc | None:
    """The innermost frame outside the DSL's own files: the user's kernel line."""
    f = sys._getframe(1)
    while f is not None and (f.f_code.co_filename in _INTERNAL_FILES or f.f_code.co_filename.endswith("contextlib.py")):
        f = f.f_back
    if f is None:
        return None
    return ir.Loc(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)


class ArchError(ir.GluonError, RuntimeError):
    """An op the kernel's architecture does not have (raised at trace time, at the user's line)."""


class UndefinedValue:
    """What a name holds after a loop/branch that defined it on one path only."""

    def __init__(self, name: str, loc: ir.Loc | None):
        self.name, self.loc = name, loc

    def _fail(self, *a, **k):
        raise ir.GluonError(f"variable '{self.name}' is only defined inside a GPU loop or on one side of a "
                            f"GPU branch (at {self.loc}); define it before the loop/branch", _user_loc())

    __add__ = __radd__ = __sub__ = __mul__ = __getitem__ = __getattr__ = __bool__ = __call__ = _fail


UNDEF = UndefinedValue("?", None)

# ---------------------------------------------------------------------------------- trace state

_TRACES: list["_Trace"] = []


def _tr() -> "_Trace":
    if not _TRACES:
        raise ir.GluonError("gluon builtins can only be called inside a kernel being traced "
                            "(decorate the function with @gluon.kernel or @gluon.jit)", _user_loc())
    return _TRACES[-1]


class _Trace:
    def __init__(self, kernel: ir.Kernel, block: tuple[int, ...] | None):
        self.kernel = kernel
        self.arch: Arch = kernel.arch
        self.b = ir.Builder(kernel.body)
        self.block = block
        self.named: dict[str, Tensor] = {}
        self.named_init: dict[str, ir.Value] = {}
        self.masks: list[Tensor] = []
        self.dims: dict[str, Tensor] = {}
        self.globals: dict[str, "GlobalTensor"] = {}
        self.role_regions: list[tuple[ir.Region, int]] = []   # (region, warps) of open warp roles

    @property
    def warps(self) -> int:
        return self.role_regions[-1][1] if self.role_regions else self.kernel.num_warps

    @property
    def scope_region(self) -> ir.Region:
        """Where hoisted values (accumulator zero-init) go: the innermost warp role, else the kernel."""
        return self.role_regions[-1][0] if self.role_regions else self.kernel.body

    def emit(self, kind: str, operands=(), result_types=(), attrs=None, regions=(), names=None) -> ir.Op:
        loc = _user_loc()
        op = self.b.create(kind, [_val(o) for o in operands], list(result_types), attrs, regions, names, loc)
        opdef = ir.OPS[kind]
        if opdef.verify is not None and not op.regions:   # region ops are checked once filled
            msg = opdef.verify(op)
            if msg:
                self.b.region.ops.pop()
                raise ir.GluonError(f"{kind}: {msg}", loc)
        return op

    def require(self, family: str, opname: str) -> None:
        if not self.arch.supports(family):
            raise ArchError(f"{opname}() is not available on {self.arch.name} (the arch of kernel "
                            f"'{self.kernel.name}'); it needs an arch with '{family}'", _user_loc())

    def dim(self, name: str) -> "Tensor":
        """A symbolic size by name: an i32 kernel parameter, created on first use."""
        if name not in self.dims:
            v = ir.Value(ir.I32, name)
            self.kernel.params.append(ir.Param(name, v, _user_loc()))
            self.dims[name] = Tensor(v)
        return self.dims[name]


def _val(x) -> ir.Value:
    if isinstance(x, ir.Value):
        return x
    if isinstance(x, (Tensor, Shared, Barrier)):
        return x.value
    if isinstance(x, GlobalTensor):
        return x.value
    if isinstance(x, UndefinedValue):
        x._fail()
    raise ir.GluonError(f"expected a GPU value, got {type(x).__name__} {x!r}", _user_loc())


# ---------------------------------------------------------------------------------- values


class constexpr:
    """Annotation for compile-time parameters (`XBLOCK: gl.constexpr`); their values specialize."""

    def __init__(self, value=None):
        self.value = value


def _is_constexpr_annotation(a) -> bool:
    return a is constexpr or isinstance(a, constexpr) or (isinstance(a, str) and a.split(".")[-1] == "constexpr")


_PROMOTE_FLOAT = [DType.f8e5m2, DType.f8e4m3, DType.f16, DType.bf16, DType.f32, DType.f64]


def _promote(a: DType, b: DType) -> DType:
    if a == b:
        return a
    if a.is_float and b.is_float:
        if {a, b} == {DType.f16, DType.bf16}:
            return DType.f32
        return builtins.max(a, b, key=_PROMOTE_FLOAT.index)
    if a.is_float:
        return a
    if b.is_float:
        return b
    if a == DType.i1:
        return b
    if b == DType.i1:
        return a
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return a if not a.is_signed else b


def _py_dtype(x) -> DType:
    if isinstance(x, bool):
        return DType.i1
    if isinstance(x, int):
        return DType.i32 if -2**31 <= x < 2**31 else DType.i64
    if isinstance(x, float):
        return DType.f32
    raise ir.GluonError(f"cannot use {type(x).__name__} {x!r} in a kernel expression", _user_loc())


class Tensor:
    """A symbolic scalar or register tile. Arithmetic and comparisons trace IR ops."""

    __slots__ = ("value",)
    __hash__ = object.__hash__

    def __init__(self, value: ir.Value):
        self.value = value

    @property
    def type(self):
        return self.value.type

    @property
    def dtype(self) -> DType:
        return self.value.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return getattr(self.value.type, "shape", ())

    @property
    def layout(self):
        return getattr(self.value.type, "layout", None)

    @property
    def is_tile(self) -> bool:
        return isinstance(self.value.type, ir.TileType)

    def __repr__(self) -> str:
        return f"Tensor(%{self.value.name or self.value.id}: {self.value.type})"

    def __bool__(self):
        raise ir.GluonError("a GPU value was used as a Python bool: use an `if` statement directly in the "
                            "kernel body (it is rewritten), or gl.where(cond, a, b)", _user_loc())

    def __index__(self):
        raise ir.GluonError("a GPU value was used where Python needs a compile-time integer "
                            "(a shape, a range for static_range, an index); make it a gl.constexpr", _user_loc())

    def __iter__(self):
        raise ir.GluonError("cannot iterate over a GPU value", _user_loc())

    # arithmetic
    def __add__(self, o): return _binary(self, o, "add")
    def __radd__(self, o): return _binary(o, self, "add")
    def __sub__(self, o): return _binary(self, o, "sub")
    def __rsub__(self, o): return _binary(o, self, "sub")
    def __mul__(self, o): return _binary(self, o, "mul")
    def __rmul__(self, o): return _binary(o, self, "mul")
    def __truediv__(self, o): return _truediv(self, o)
    def __rtruediv__(self, o): return _truediv(o, self)
    def __floordiv__(self, o): return _binary(self, o, "floordiv")
    def __rfloordiv__(self, o): return _binary(o, self, "floordiv")
    def __mod__(self, o): return _binary(self, o, "rem")
    def __rmod__(self, o): return _binary(o, self, "rem")
    def __and__(self, o): return _binary(self, o, "and")
    def __rand__(self, o): return _binary(o, self, "and")
    def __or__(self, o): return _binary(self, o, "or")
    def __ror__(self, o): return _binary(o, self, "or")
    def __xor__(self, o): return _binary(self, o, "xor")
    def __rxor__(self, o): return _binary(o, self, "xor")
    def __lshift__(self, o): return _binary(self, o, "shl")
    def __rshift__(self, o): return _binary(self, o, "shr")
    def __neg__(self): return _unary(self, "neg")
    def __invert__(self): return _unary(self, "not")
    def __lt__(self, o): return _cmp(self, o, "lt")
    def __le__(self, o): return _cmp(self, o, "le")
    def __gt__(self, o): return _cmp(self, o, "gt")
    def __ge__(self, o): return _cmp(self, o, "ge")
    def __eq__(self, o): return _cmp(self, o, "eq")  # type: ignore[override]
    def __ne__(self, o): return _cmp(self, o, "ne")  # type: ignore[override]

    def to(self, dtype: DType) -> "Tensor":
        return cast(self, dtype)

    def __getitem__(self, idx) -> "Tensor":
        """`x[:, None]` / `x[None, :]`: insert size-1 dimensions (numpy style)."""
        idx = idx if isinstance(idx, tuple) else (idx,)
        out, axis = self, 0
        for i in idx:
            if i is None:
                out = expand_dims(out, axis)
                axis += 1
            elif isinstance(i, slice) and i == slice(None):
                axis += 1
            else:
                raise ir.GluonError(f"tile indexing supports only ':' and None, got {i!r}", _user_loc())
        return out


def _const(x, dtype: DType) -> Tensor:
    if dtype.is_float:
        x = float(x)
    elif dtype == DType.i1:
        x = bool(x)
    else:
        x = int(x)
    return Tensor(_tr().emit("constant", (), [ir.ScalarType(dtype)], {"value": x}).result)


def _to_tensor(x, dtype: DType | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, UndefinedValue):
        x._fail()
    return _const(x, dtype or _py_dtype(x))


def _splat(t: Tensor, shape: tuple[int, ...], layout) -> Tensor:
    return Tensor(_tr().emit("splat", [t], [ir.TileType(t.dtype, shape, layout)]).result)


def _broadcast_to(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    if t.shape == shape:
        return t
    if not t.is_tile:
        return _splat(t, shape, None)
    if len(t.shape) != len(shape) or any(a != b and a != 1 for a, b in zip(t.shape, shape)):
        raise ir.GluonError(f"cannot broadcast a {t.shape} tile to {shape}", _user_loc())
    return Tensor(_tr().emit("broadcast", [t], [ir.TileType(t.dtype, shape, t.layout)]).result)


def _broadcast_shape(a: tuple, b: tuple) -> tuple:
    if not a:
        return b
    if not b:
        return a
    if len(a) != len(b):
        raise ir.GluonError(f"tiles of rank {len(a)} and {len(b)} cannot be combined; use x[:, None] / x[None, :]",
                            _user_loc())
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ir.GluonError(f"tile shapes {a} and {b} do not broadcast", _user_loc())
        out.append(builtins.max(x, y))
    return tuple(out)


def _operands(a, b) -> tuple[Tensor, Tensor]:
    """Make two operands one dtype and one shape: Python numbers take the tensor's dtype."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise ir.GluonError("expected at least one GPU value", _user_loc())
    if not isinstance(a, Tensor):
        a = _to_tensor(a, b.dtype if (b.dtype.is_float or not isinstance(a, float)) else DType.f32)
    if not isinstance(b, Tensor):
        b = _to_tensor(b, a.dtype if (a.dtype.is_float or not isinstance(b, float)) else DType.f32)
    dt = _promote(a.dtype, b.dtype)
    if a.dtype != dt:
        a = cast(a, dt)
    if b.dtype != dt:
        b = cast(b, dt)
    shape = _broadcast_shape(a.shape, b.shape)
    if shape:
        a, b = _broadcast_to(a, shape), _broadcast_to(b, shape)
        la, lb = a.layout, b.layout
        if la is not None and lb is not None and la != lb:
            raise ir.GluonError(f"operands have different layouts ({la} vs {lb}); use gl.convert_layout", _user_loc())
        if la is None and lb is not None:      # an open layout takes its partner's
            a.value.type = ir.TileType(a.dtype, a.shape, lb)
        elif lb is None and la is not None:
            b.value.type = ir.TileType(b.dtype, b.shape, la)
    return a, b


def _binary(a, b, op: str) -> Tensor:
    a, b = _operands(a, b)
    if op in ("and", "or", "xor", "shl", "shr", "floordiv") and a.dtype.is_float:
        raise ir.GluonError(f"'{op}' needs integer operands, got {a.dtype.name}", _user_loc())
    if op == "floordiv" and a.dtype.is_float:
        op = "div"
    return Tensor(_tr().emit("binary", [a, b], [a.type], {"op": op}).result)


def _truediv(a, b) -> Tensor:
    a, b = _operands(a, b)
    if not a.dtype.is_float:
        a, b = cast(a, DType.f32), cast(b, DType.f32)
    return Tensor(_tr().emit("binary", [a, b], [a.type], {"op": "div"}).result)


def _cmp(a, b, pred: str) -> Tensor:
    a, b = _operands(a, b)
    return Tensor(_tr().emit("cmp", [a, b], [ir.same_shape_kind(a.type, DType.i1)], {"pred": pred}).result)


def _unary(x: Tensor, op: str) -> Tensor:
    x = _to_tensor(x)
    if op in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "floor", "ceil") and not x.dtype.is_float:
        x = cast(x, DType.f32)
    return Tensor(_tr().emit("unary", [x], [x.type], {"op": op}).result)


# ---------------------------------------------------------------------------------- math builtins


def cast(x, dtype: DType) -> Tensor:
    x = _to_tensor(x)
    dtype = DType(dtype) if not isinstance(dtype, DType) else dtype
    if x.dtype == dtype:
        return x
    return Tensor(_tr().emit("cast", [x], [ir.same_shape_kind(x.type, dtype)]).result)


def exp(x): return _unary(x, "exp")
def exp2(x): return _unary(x, "exp2")
def log(x): return _unary(x, "log")
def log2(x): return _unary(x, "log2")
def sqrt(x): return _unary(x, "sqrt")
def rsqrt(x): return _unary(x, "rsqrt")
def abs(x): return _unary(x, "abs")  # noqa: A001 - mirrors numpy / triton naming
def sin(x): return _unary(x, "sin")
def cos(x): return _unary(x, "cos")
def floor(x): return _unary(x, "floor")
def ceil(x): return _unary(x, "ceil")
def maximum(a, b): return _binary(a, b, "max")
def minimum(a, b): return _binary(a, b, "min")


def cdiv(a, b):
    """Ceiling division for sizes: works on Python ints and GPU integers."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        return -(-a // b)
    return (a + (b - 1)) // b


def where(cond, a, b) -> Tensor:
    cond = _to_tensor(cond)
    a, b = _operands(a, b)
    shape = _broadcast_shape(cond.shape, a.shape)
    cond, a, b = _broadcast_to(cond, shape), _broadcast_to(a, shape), _broadcast_to(b, shape)
    return Tensor(_tr().emit("select", [cond, a, b], [a.type]).result)


def _reduce(x: Tensor, axis: int | None, op: str) -> Tensor:
    _tr().require("reduce", op)
    if axis is None:
        while len(x.shape) > 1:
            x = _reduce(x, len(x.shape) - 1, op)
        axis = 0
    if axis < 0:
        axis += len(x.shape)
    shape = x.shape[:axis] + x.shape[axis + 1:]
    rt = ir.TileType(x.dtype, shape, SliceLayout(axis, x.layout) if x.layout is not None else None) if shape \
        else ir.ScalarType(x.dtype)
    return Tensor(_tr().emit("reduce", [x], [rt], {"axis": axis, "op": op}).result)


def sum(x, axis: int | None = None): return _reduce(x, axis, "sum")  # noqa: A001
def max(x, axis: int | None = None): return _reduce(x, axis, "max")  # noqa: A001
def min(x, axis: int | None = None): return _reduce(x, axis, "min")  # noqa: A001


def expand_dims(x: Tensor, axis: int) -> Tensor:
    shape = list(x.shape)
    if axis < 0:
        axis += len(shape) + 1
    shape.insert(axis, 1)
    lay = x.layout.parent if isinstance(x.layout, SliceLayout) and x.layout.dim == axis else None
    if x.layout is not None and lay is None:
        raise ir.GluonError(f"expand_dims(axis={axis}) needs a tile in slice(dim={axis}, parent) layout, "
                            f"this one is {x.layout}", _user_loc())
    return Tensor(_tr().emit("expand_dims", [x], [ir.TileType(x.dtype, tuple(shape), lay)], {"axis": axis}).result)


def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    return _broadcast_to(_to_tensor(x), tuple(shape))


def convert_layout(x: Tensor, layout: Layout) -> Tensor:
    if x.layout == layout:
        return x
    return Tensor(_tr().emit("convert_layout", [x], [ir.TileType(x.dtype, x.shape, layout)]).result)


def split_cols(x: Tensor) -> tuple[Tensor, Tensor]:
    """The left and right column halves of a WGMMA accumulator tile (e.g. to store a 64x256 output as
    four 64x64 subtiles through a small staging buffer). Free: each half is a subset of every thread's
    registers, in the WGMMA layout of half the instruction width (what Triton's reshape + permute +
    split of an accumulator gives). The tile must be one instruction tile per warp: rows = 16 x the
    warps along M, columns = the instruction width; halves at least 8 columns wide."""
    t = _tr()
    t.require("wgmma", "split_cols")
    x = _to_tensor(x)
    lay = x.layout
    if not (isinstance(lay, MMALayout) and lay.version == 3):
        raise ir.GluonError(f"split_cols takes a WGMMA accumulator (Layout.wgmma), got a tile in {lay}", _user_loc())
    wm, wn = lay.warps_per_cta
    m, n = x.shape
    if wn != 1 or m != 16 * wm or n != lay.instr_shape[1]:
        raise ir.GluonError(f"split_cols: a {m}x{n} tile in {lay} holds more than one instruction tile per warp (it "
                            f"splits {16 * wm}x{lay.instr_shape[1]} tiles, warps along M only)", _user_loc())
    if n % 16:
        raise ir.GluonError(f"split_cols: {n} columns do not split into two WGMMA widths (multiples of 8)", _user_loc())
    half = MMALayout(3, lay.warps_per_cta, (lay.instr_shape[0], n // 2, *lay.instr_shape[2:]))
    ht = ir.TileType(x.dtype, (m, n // 2), half)
    op = t.emit("split_cols", [x], [ht, ht])
    return Tensor(op.results[0]), Tensor(op.results[1])


def arange(start: int, end: int, layout: Layout | None = None) -> Tensor:
    n = end - start
    if n <= 0 or n & (n - 1):
        raise ir.GluonError(f"arange({start}, {end}): the length {n} must be a power of two", _user_loc())
    return Tensor(_tr().emit("arange", [], [ir.TileType(DType.i32, (n,), layout)], {"start": start, "end": end}).result)


def full(shape: Sequence[int], value, dtype: DType, layout: Layout | None = None) -> Tensor:
    shape = tuple(shape)
    if not shape:
        return _const(value, dtype)
    value = float(value) if dtype.is_float else int(value)
    return Tensor(_tr().emit("constant", [], [ir.TileType(dtype, shape, layout)], {"value": value}).result)


def zeros(shape, dtype: DType = DType.f32, layout: Layout | None = None) -> Tensor:
    return full(shape, 0, dtype, layout)


def program_id(axis: int = 0) -> Tensor:
    return Tensor(_tr().emit("program_id", [], [ir.I32], {"axis": axis}, names=[f"pid{'xyz'[axis]}"]).result)


def num_programs(axis: int = 0) -> Tensor:
    return Tensor(_tr().emit("num_programs", [], [ir.I32], {"axis": axis}).result)


def thread_id(axis: int = 0) -> Tensor:
    """SIMT view: each logical thread of the launch block `(B0, ...)` as one element of a tile.

    In `kernel[grid, (2048,)]`, `thread_id(0)` is the tile 0..2047; the compiler distributes it over
    the program's warps (several elements per hardware thread, vectorized)."""
    t = _tr()
    if not t.block:
        raise ir.GluonError("thread_id() needs the launch block shape: launch as kernel[grid, (BLOCK,)] "
                            "or trace with block=(BLOCK,)", _user_loc())
    if axis >= len(t.block):
        raise ir.GluonError(f"thread_id({axis}) but the block {t.block} has {len(t.block)} dimension(s)", _user_loc())
    if len(t.block) == 1:
        return arange(0, t.block[0])
    idx = arange(0, t.block[axis])
    for ax in builtins.range(len(t.block)):
        if ax != axis:
            idx = expand_dims(idx, ax if ax < axis else ax)
    return _broadcast_to(idx, tuple(t.block))


# ---------------------------------------------------------------------------------- global memory


class Pointer(Tensor):
    """A pointer kernel parameter. `p[offs]` loads, `p[offs] = v` stores, `p + offs` addresses."""

    __slots__ = ()

    def __add__(self, offsets):
        return PtrOffset(self, _to_tensor(offsets, DType.i32))

    __radd__ = __add__

    def __getitem__(self, offsets):
        return load(self + offsets)

    def __setitem__(self, offsets, value):
        store(self + offsets, value)


@dataclass
class PtrOffset:
    """`base + offsets` (in elements), the address form loads and stores take."""

    base: Pointer
    offsets: Tensor

    def __add__(self, more):
        return PtrOffset(self.base, self.offsets + more)

    __radd__ = __add__


def _mask_for(shape: tuple[int, ...], mask) -> Tensor | None:
    """The user's mask AND every enclosing per-thread `if` condition, broadcast to `shape`."""
    masks = list(_tr().masks) + ([_to_tensor(mask)] if mask is not None else [])
    out = None
    for m in masks:
        if isinstance(m, _Negated):
            m = m.resolve()
        m = _broadcast_to(m, shape) if shape else m
        out = m if out is None else _binary(out, m, "and")
    return out


def _address(ptr) -> tuple[Pointer, Tensor]:
    if isinstance(ptr, GlobalTensor):
        ptr = ptr.ptr + 0
    if isinstance(ptr, Pointer):
        ptr = ptr + 0
    if not isinstance(ptr, PtrOffset):
        raise ir.GluonError(f"expected a pointer parameter plus offsets (ptr + offs), got {type(ptr).__name__}",
                            _user_loc())
    offs = ptr.offsets
    if offs.dtype.is_float:
        raise ir.GluonError("pointer offsets must be integers", _user_loc())
    return ptr.base, offs


def load(ptr, mask=None, other=None, cache: str = "", evict: str = "") -> Tensor:
    t = _tr()
    base, offs = _address(ptr)
    m = _mask_for(offs.shape, mask)
    dtype = base.type.dtype
    operands = [base, offs]
    if m is not None:
        operands.append(m)
        if other is not None:
            o = _to_tensor(other, dtype)
            operands.append(_broadcast_to(cast(o, dtype), offs.shape) if offs.shape else cast(o, dtype))
    rt = ir.TileType(dtype, offs.shape, offs.layout) if offs.shape else ir.ScalarType(dtype)
    attrs = {"has_mask": m is not None, "has_other": m is not None and other is not None, "cache": cache, "evict": evict}
    return Tensor(t.emit("load", operands, [rt], attrs).result)


def store(ptr, value, mask=None, cache: str = "", evict: str = "") -> None:
    t = _tr()
    base, offs = _address(ptr)
    v = cast(_to_tensor(value, base.type.dtype), base.type.dtype)
    if offs.shape:
        v = _broadcast_to(v, offs.shape)
    elif v.shape:
        offs = _broadcast_to(offs, v.shape)
    m = _mask_for(offs.shape, mask)
    operands = [base, offs, v] + ([m] if m is not None else [])
    t.emit("store", operands, [], {"has_mask": m is not None, "cache": cache, "evict": evict})


class GlobalTensor:
    """A global tensor parameter bound from a `TensorRef`. Used with TMA it becomes a TMA descriptor
    parameter; used with loads/stores, a pointer parameter (row-major, strides from its shape)."""

    def __init__(self, ref: TensorRef, value: ir.Value, trace: _Trace):
        self.ref = ref
        self.value = value
        self._trace = trace
        self.kind: str | None = None    # "pointer" | "desc"

    @property
    def shape(self) -> tuple:
        """Sizes: ints, or i32 parameters for symbolic dims (created when first used)."""
        return tuple(self._trace.dim(d) if isinstance(d, str) else d for d in self.ref.shape)

    name = property(lambda self: self.ref.name)
    dtype = property(lambda self: self.ref.dtype)

    def _use(self, kind: str) -> None:
        if self.kind not in (None, kind):
            raise ir.GluonError(f"tensor '{self.name}' is used both through TMA and through pointer loads/stores; "
                                "pass it twice (two parameters) to do both", _user_loc())
        self.kind = kind

    @property
    def ptr(self) -> Pointer:
        self._use("pointer")
        self.value.type = ir.PointerType(self.dtype)
        rm = self._trace.kernel.attrs.setdefault("row_major_params", [])
        if self.value.name not in rm:
            rm.append(self.value.name)
        return Pointer(self.value)

    def stride(self, axis: int):
        """Element stride of `axis` for the row-major layout of a TensorRef."""
        s = 1
        for d in self.shape[axis + 1:]:
            s = s * d
        return s

    def __add__(self, offsets):
        return self.ptr + offsets

    def __getitem__(self, offsets):
        return self.ptr[offsets]

    def __setitem__(self, offsets, value):
        self.ptr[offsets] = value

    def as_desc(self, block: tuple[int, ...], swizzle: SwizzleMode) -> ir.Value:
        self._use("desc")
        want = ir.DescType(self.dtype, tuple(block), swizzle)
        cur = self.value.type
        if isinstance(cur, ir.DescType) and cur != want:
            raise ir.GluonError(f"TMA on '{self.name}' with tile {want.block_shape}/{swizzle.name}, but it was used "
                                f"with {cur.block_shape}/{cur.swizzle.name} before; one descriptor has one tile shape",
                                _user_loc())
        self.value.type = want
        return self.value


def _global(x) -> GlobalTensor:
    if isinstance(x, GlobalTensor):
        return x
    if isinstance(x, str):
        g = _tr().globals.get(x)
        if g is None:
            raise ir.GluonError(f"no global tensor parameter named {x!r}; parameters: {sorted(_tr().globals)}",
                                _user_loc())
        return g
    raise ir.GluonError(f"expected a global tensor parameter (or its name), got {type(x).__name__}", _user_loc())


# ---------------------------------------------------------------------------------- shared memory


class Shared:
    """A shared-memory region (all stages) or one stage of it."""

    def __init__(self, value: ir.Value, name: str = ""):
        self.value, self.name = value, name

    type = property(lambda self: self.value.type)
    dtype = property(lambda self: self.value.type.dtype)
    shape = property(lambda self: self.value.type.shape)
    layout = property(lambda self: self.value.type.layout)
    stages = property(lambda self: self.value.type.stages)
    nbytes = property(lambda self: self.value.type.stage_bytes)

    def __getitem__(self, stage) -> "Shared":
        if self.stages == 1:
            raise ir.GluonError(f"shared region '{self.name}' has one stage; it cannot be indexed", _user_loc())
        s = _to_tensor(stage, DType.i32)
        return Shared(_tr().emit("smem_index", [self, s], [self.type.stage()], names=[self.name]).result, self.name)

    def load(self, layout: Layout | None = None) -> Tensor:
        return Tensor(_tr().emit("smem_load", [self], [ir.TileType(self.dtype, self.shape, layout)]).result)

    def store(self, tile) -> None:
        tile = cast(_to_tensor(tile, self.dtype), self.dtype)
        _tr().emit("smem_store", [tile, self])

    def permute(self, order: Sequence[int] = (1, 0)) -> "Shared":
        shape = tuple(self.shape[i] for i in order)
        lay = self.layout
        if isinstance(lay, NVMMASharedLayout):
            lay = NVMMASharedLayout(shape, lay.swizzle, not lay.transposed)
        t = ir.SmemType(self.dtype, shape, lay, self.stages)
        return Shared(_tr().emit("smem_trans", [self], [t], {"order": tuple(order)}).result, self.name)

    @property
    def T(self) -> "Shared":
        return self.permute((1, 0))

    def reinterpret(self, shape: Sequence[int], stages: int = 1, dtype: DType | None = None) -> "Shared":
        """The same bytes seen as `stages` tiles of `shape` (of `dtype`, default the region's; a view, no
        copy), for a swizzled tile split along its outer dimension or into its 128-byte column chunks,
        where the parts sit back to back: a [64, 256] B stage is two [64, 128] parts, so a [S, 64, 256]
        ring is a [2S, 64, 128] one, and `ring.reinterpret((64, 128), 2 * S)[2 * s + r]` is part r of
        stage s (what one CTA of a cluster loads and multicasts); or a whole ring as one other tile
        (the GEMM's output staged in its A ring). Whole-tile checks only: the caller says which split
        is byte-exact."""
        shape = tuple(int(d) for d in shape)
        lay = self.layout
        if not isinstance(lay, NVMMASharedLayout):
            raise ir.GluonError(f"'{self.name}'.reinterpret: only NVMMA-swizzled regions, not {lay}", _user_loc())
        new = ir.SmemType(dtype or self.dtype, shape, NVMMASharedLayout(shape, lay.swizzle, lay.transposed), stages)
        if new.stage_bytes * stages != self.nbytes * self.stages:
            what = f"{stages} x {'x'.join(map(str, shape))} {new.dtype.name}"
            raise ir.GluonError(f"'{self.name}'.reinterpret({shape}, stages={stages}): {what} is {new.stage_bytes * stages} "
                                f"bytes, but the region has {self.nbytes * self.stages}", _user_loc())
        return Shared(_tr().emit("smem_reinterpret", [self], [new]).result, self.name)

    def __repr__(self) -> str:
        return f"Shared({self.name}: {self.type})"


def smem(dtype: DType, layout: Layout, name: str = "", stages: int = 1, double_buffer: bool = False,
         shape: Sequence[int] | None = None, value: Tensor | None = None) -> Shared:
    """Allocate a typed shared-memory region: `stages` copies of a tile of `shape` (default: the layout's)."""
    t = _tr()
    t.require("smem", "smem")
    stages = 2 if double_buffer and stages == 1 else stages
    if shape is None:
        shape = getattr(layout, "shape", None)
        if shape is None:
            raise ir.GluonError("smem(): give shape= (this layout does not carry one)", _user_loc())
    shape = tuple(shape)
    st = ir.SmemType(dtype, shape, layout, stages)
    ops = [value] if value is not None else []
    return Shared(t.emit("smem_alloc", ops, [st], {"name": name}, names=[name]).result, name)


class Barrier:
    """One or more mbarriers."""

    def __init__(self, value: ir.Value, name: str = ""):
        self.value, self.name = value, name

    stages = property(lambda self: self.value.type.stages)

    def __getitem__(self, stage) -> "Barrier":
        s = _to_tensor(stage, DType.i32)
        return Barrier(_tr().emit("barrier_index", [self, s], [self.value.type.stage()], names=[self.name]).result,
                       self.name)

    def expect(self, nbytes: int, pred=None) -> None:
        barrier_expect(self, nbytes, pred)

    def arrive(self, count: int = 1, cluster: bool = False) -> None:
        barrier_arrive(self, count, cluster)

    def wait(self, phase) -> None:
        barrier_wait(self, phase)


def mbarrier(count: int = 1, name: str = "", stages: int = 1) -> Barrier:
    t = _tr()
    t.require("mbarrier", "mbarrier")
    return Barrier(t.emit("barrier_alloc", [], [ir.BarrierType(stages, count)], {"name": name, "count": count},
                          names=[name or "bar"]).result, name)


def _barrier(b) -> Barrier:
    if isinstance(b, Barrier):
        return b
    raise ir.GluonError(f"expected an mbarrier (from mbarrier()), got {type(b).__name__}", _user_loc())


def _single(x, what: str):
    if x.value.type.stages != 1:
        raise ir.GluonError(f"{what} '{x.name}' has {x.value.type.stages} stages: index one stage, e.g. {x.name or 'x'}[s]",
                            _user_loc())


def barrier_expect(bar, nbytes: int, pred=None) -> None:
    t = _tr()
    t.require("mbarrier", "barrier_expect")
    ops = [_barrier(bar)] + ([_to_tensor(pred, DType.i1)] if pred is not None else [])
    t.emit("barrier_expect", ops, [], {"bytes": int(nbytes)})


def barrier_arrive(bar, count: int = 1, cluster: bool = False) -> None:
    """Arrive `count` times; with `cluster=True` once on this barrier in every CTA of the cluster (the
    "slot free" signal of a ring that other CTAs fill by multicast: count it num_ctas times)."""
    t = _tr()
    t.require("mbarrier", "barrier_arrive")
    attrs = {"count": count}
    if cluster:
        _need_cluster(t, "arrive", "cluster=True")
        if count != 1:
            raise ir.GluonError(f"arrive(count={count}, cluster=True): a cluster arrive counts once per CTA",
                                _user_loc())
        attrs["cluster"] = True
    t.emit("barrier_arrive", [_barrier(bar)], [], attrs)


def barrier_wait(bar, phase) -> None:
    t = _tr()
    t.require("mbarrier", "barrier_wait")
    t.emit("barrier_wait", [_barrier(bar), _to_tensor(phase, DType.i32)], [])


def thread_barrier() -> None:
    _tr().emit("thread_barrier")


def _need_cluster(t: "_Trace", name: str, args: str = "") -> None:
    """`name(args)` is a cluster builtin: the arch must have clusters and the kernel must have set one."""
    t.require("cluster", name)
    if t.kernel.attrs.get("num_ctas", 1) < 2:
        raise ir.GluonError(f"{name}({args}) needs a thread-block cluster: call set_cluster(num_ctas) first "
                            f"(num_ctas 2 or 4)", _user_loc())


def set_cluster(num_ctas: int) -> None:
    """Run this kernel in clusters of `num_ctas` CTAs along x (1 = no cluster). The launch grid then
    counts clusters (Triton's launcher starts grid[0] * num_ctas CTAs); `program_id(0)` and
    `num_programs(0)` still count CTAs, and `cluster_rank()` is program_id(0) % num_ctas."""
    t = _tr()
    if num_ctas not in (1, 2, 4):
        raise ir.GluonError(f"set_cluster({num_ctas}): clusters of 1, 2 or 4 CTAs are supported", _user_loc())
    if num_ctas > 1:
        t.require("cluster", "set_cluster")
    t.kernel.attrs["num_ctas"] = int(num_ctas)


def multiple_of(x: "Tensor", n: int = 16) -> "Tensor":
    """Assume that integer kernel parameter or symbolic size `x` is a multiple of `n` (16, the
    specialization the launcher checks: a launch with another value is refused, never run wrong). The
    compiler then knows that rows of that many elements start 16-element aligned, so row-major
    addresses built from it vectorize (a 16-byte store per 8 fp16 instead of eight 2-byte ones). Returns
    `x`."""
    t = _tr()
    if n != 16:
        raise ir.GluonError(f"multiple_of(x, {n}): only 16 is supported (the launcher checks multiples of 16)",
                            _user_loc())
    v = x.value if isinstance(x, Tensor) else None
    param = next((p for p in t.kernel.params if v is not None and p.value is v), None)
    if param is None or not isinstance(v.type, ir.ScalarType) or not v.type.dtype.is_int:
        raise ir.GluonError("multiple_of() applies to an integer kernel parameter or a symbolic size "
                            "(C.shape[1]), not to a computed value", _user_loc())
    param.divisibility = builtins.max(param.divisibility, n)
    return x


def set_tma_prefetch(enabled: bool = True) -> None:
    """Prefetch every TMA descriptor this kernel copies through into the SM's descriptor cache at kernel
    start (CUTLASS does this in every TMA kernel), so neither the first TMA load nor the first TMA store
    waits for its descriptor to be read from memory. Triton 3.6 has no op for it: the PTX pass
    `backend/ptx_prefetch.py` inserts the `prefetch.tensormap` instructions."""
    _opt_into_ptx_pass("tma_prefetch", "tma", enabled)


def _opt_into_ptx_pass(attr: str, family: str, enabled: bool) -> None:
    """Mark the kernel for the PTX pass cued by `attr` (the lowering writes its header line), which needs
    an arch with `family`; `set_<attr>` is the builtin the user called."""
    t = _tr()
    if enabled:
        t.require(family, f"set_{attr}")
    t.kernel.attrs[attr] = bool(enabled)


def set_lean_prologue(enabled: bool = True) -> None:
    """Drop the CTA barriers Triton's Membar puts between this kernel's barrier inits and first TMA loads
    (one after every init and around every load), keeping one between the last init and the first op of
    another thread: the PTX pass `backend/ptx_prologue.py`, which checks the prologue holds nothing else
    and leaves it as it was otherwise. The kernel promises its prologue's TMA loads fill distinct buffers."""
    _opt_into_ptx_pass("lean_prologue", "tma", enabled)


def set_lean_release(enabled: bool = True) -> None:
    """Let each consumer warpgroup wait for a stage and release it without a barrier of its warps: the
    PTX pass `backend/ptx_release.py` drops the 128-thread `bar.sync` Triton puts before every stage
    wait and before every single-thread arrive that follows `wgmma.wait_group` (CUTLASS's consumers
    release from one thread per warpgroup on the same rule). The kernel promises that every partition
    whose barriers count 128 threads is one warpgroup releasing stages only its own WGMMAs read."""
    _opt_into_ptx_pass("lean_release", "wgmma", enabled)


def cluster_rank() -> Tensor:
    """This CTA's rank in its cluster (0 .. num_ctas - 1)."""
    t = _tr()
    _need_cluster(t, "cluster_rank")
    return Tensor(t.emit("cluster_rank", [], [ir.ScalarType(DType.i32)]).result)


def cluster_sync() -> None:
    """All threads of all CTAs in the cluster meet (barrier.cluster); mbarrier inits made before it are
    visible to the other CTAs after it. Every warp must reach it: call it at the top of every warp role."""
    t = _tr()
    _need_cluster(t, "cluster_sync")
    t.emit("cluster_sync")


def fence_async_shared() -> None:
    t = _tr()
    t.require("tma", "fence_async_shared")
    t.emit("fence_async_shared")


# ---------------------------------------------------------------------------------- TMA, cp.async


def _coords(coords, rank: int) -> list[Tensor]:
    if coords is None:
        coords = (0,) * rank
    coords = list(coords)
    if len(coords) != rank:
        raise ir.GluonError(f"TMA coordinates {len(coords)} for a rank-{rank} tensor", _user_loc())
    return [cast(_to_tensor(c, DType.i32), DType.i32) for c in coords]


def tma_load(dst: Shared, src, coords=None, barrier: Barrier | None = None, *, barrier_name: Barrier | None = None,
             box: Sequence[int] | None = None, multicast: bool = False) -> None:
    """TMA: copy the tile of global tensor `src` at `coords` into shared `dst`, completing on `barrier`.

    `box` states the TMA box you expect (checked against the swizzle by the layout pass). With
    `multicast=True` (in a cluster) the tile lands in `dst` and completes on `barrier` in every CTA of
    the cluster, so each CTA's barrier must expect the bytes all CTAs multicast to it. Every load through
    the same global tensor must then multicast."""
    t = _tr()
    t.require("tma", "tma_load")
    bar = barrier if barrier is not None else barrier_name
    if bar is None:
        raise ir.GluonError("tma_load needs the mbarrier it completes on: tma_load(dst, src, coords, barrier=bar)",
                            _user_loc())
    g = _global(src)
    if not isinstance(dst, Shared):
        raise ir.GluonError("tma_load's destination must be a shared region from smem()", _user_loc())
    if not isinstance(dst.layout, NVMMASharedLayout):
        raise ir.GluonError(f"TMA needs an NVMMA-swizzled shared layout (Layout.swizzled), '{dst.name}' has {dst.layout}",
                            _user_loc())
    if g.dtype != dst.dtype:
        raise ir.GluonError(f"tma_load from {g.name} ({g.dtype.name}) into '{dst.name}' ({dst.dtype.name}): dtypes differ",
                            _user_loc())
    desc = g.as_desc(dst.shape, dst.layout.swizzle)
    attrs = {"box": tuple(box)} if box is not None else {}
    if multicast:
        _need_cluster(t, "tma_load", "multicast=True")
        attrs["multicast"] = True
    t.emit("tma_load", [desc, dst, _barrier(bar), *_coords(coords, len(dst.shape))], [], attrs)


def tma_store(dst, coords, src: Shared) -> None:
    t = _tr()
    t.require("tma", "tma_store")
    g = _global(dst)
    _single(src, "shared region")
    desc = g.as_desc(src.shape, src.layout.swizzle)
    t.emit("tma_store", [desc, src, *_coords(coords, len(src.shape))])


def tma_store_wait(pendings: int = 0) -> None:
    t = _tr()
    t.require("tma", "tma_store_wait")
    t.emit("tma_store_wait", [], [], {"pendings": pendings})


def cp_async(dst: Shared, src, mask=None) -> None:
    """cp.async (SM80+): copy `src` (pointer + offsets tile) into shared `dst`."""
    t = _tr()
    t.require("cp_async", "cp_async")
    base, offs = _address(src)
    if tuple(offs.shape) != tuple(dst.shape):
        raise ir.GluonError(f"cp_async: offsets tile {offs.shape} does not match the shared tile {dst.shape}", _user_loc())
    m = _mask_for(offs.shape, mask)
    t.emit("cp_async", [base, offs, dst] + ([m] if m is not None else []), [], {"has_mask": m is not None})


def cp_async_commit() -> None:
    _tr().require("cp_async", "cp_async_commit")
    _tr().emit("cp_async_commit")


def cp_async_wait(num: int = 0) -> None:
    _tr().require("cp_async", "cp_async_wait")
    _tr().emit("cp_async_wait", [], [], {"num": num})


# ---------------------------------------------------------------------------------- matrix ops


def _k_width(dtype: DType) -> int:
    return 32 // dtype.bits


def _accumulator(acc, m: int, n: int, layout: Layout) -> tuple[Tensor, str | None]:
    """Resolve `acc`: a tile, or the name of an in-place accumulator (zero-initialised on first use)."""
    t = _tr()
    if isinstance(acc, Tensor):
        return acc, None
    if not isinstance(acc, str):
        raise ir.GluonError("the accumulator must be a tile or the name of one ('acc')", _user_loc())
    if acc in t.named:
        return t.named[acc], acc
    # Hoist the zero-init to the top of the innermost warp role (or the kernel) so loops can carry it.
    region = t.scope_region
    op = ir.Op("constant", [], [], {"value": 0.0}, [], _user_loc())
    op.results = [ir.Value(ir.TileType(DType.f32, (m, n), layout), acc, owner=op)]
    region.ops.insert(0, op)
    v = Tensor(op.results[0])
    t.named[acc] = v
    t.named_init[acc] = v.value
    return v, acc


def _dot_shapes(a, b) -> tuple[int, int]:
    return a.shape[0], b.shape[-1]


def wgmma(a, b, acc="acc", *, wait: bool = True, pendings: int = 0) -> Tensor:
    """Hopper warpgroup MMA: acc += a @ b. `a` shared or registers, `b` shared; acc in the WGMMA layout.

    `wait=False` leaves the MMA in flight (call `wgmma_wait`), for software pipelining."""
    t = _tr()
    t.require("wgmma", "wgmma")
    if not isinstance(b, Shared):
        raise ir.GluonError("wgmma's B operand must be in shared memory (smem)", _user_loc())
    m, n = _dot_shapes(a, b)
    acc_t, name = _accumulator(acc, m, n, Layout.wgmma((t.warps, 1), instr_n=builtins.min(n, 256),
                                                      operand_dtype=b.dtype))
    if isinstance(a, Tensor) and a.layout is None:
        a = convert_layout(a, DotOperandLayout(0, acc_t.layout, _k_width(a.dtype)))
    r = Tensor(t.emit("wgmma", [a, b, acc_t], [acc_t.type], {"is_async": True}, names=[name or "acc"]).result)
    if wait:
        deps = [x for x in (a, b) if isinstance(x, Shared)]
        r = Tensor(t.emit("wgmma_wait", [r, *deps], [acc_t.type], {"pendings": pendings}, names=[name or "acc"]).result)
    if name:
        t.named[name] = r
    return r


def wgmma_wait(acc, *deps: Shared, pendings: int = 0) -> Tensor:
    t = _tr()
    t.require("wgmma", "wgmma_wait")
    acc_t, name = (t.named[acc], acc) if isinstance(acc, str) else (acc, None)
    r = Tensor(t.emit("wgmma_wait", [acc_t, *deps], [acc_t.type], {"pendings": pendings}).result)
    if name:
        t.named[name] = r
    return r


def _register_dot(kind: str, a, b, acc, acc_layout: Layout, k_width: int) -> Tensor:
    t = _tr()
    m, n = _dot_shapes(a, b)
    acc_t, name = _accumulator(acc, m, n, acc_layout)
    ops = []
    for idx, x in enumerate((a, b)):
        want = DotOperandLayout(idx, acc_t.layout, k_width)
        if isinstance(x, Shared):
            x = x.load(want)
        elif x.layout != want:
            x = convert_layout(x, want)
        ops.append(x)
    r = Tensor(t.emit(kind, [*ops, acc_t], [acc_t.type], names=[name or "acc"]).result)
    if name:
        t.named[name] = r
    return r


def mma(a, b, acc="acc") -> Tensor:
    """Ampere-style tensor-core MMA (HMMA, mma.sync): acc += a @ b with register operands."""
    t = _tr()
    t.require("mma", "mma")
    return _register_dot("mma", a, b, acc, Layout.mma((t.warps, 1)), _k_width(a.dtype))


def mfma(a, b, acc="acc") -> Tensor:
    """AMD CDNA matrix-core MFMA: acc += a @ b."""
    t = _tr()
    t.require("mfma", "mfma")
    w = t.warps
    wpc = (2, w // 2) if w % 2 == 0 and w >= 4 else (w, 1)
    return _register_dot("mfma", a, b, acc, Layout.mfma(wpc, (32, 32, 8)), 4 * 16 // a.dtype.bits if a.dtype.bits <= 16 else 1)


def tmem_alloc(dtype: DType, shape: Sequence[int], layout: Layout | None = None) -> Tensor:
    t = _tr()
    t.require("tmem", "tmem_alloc")
    shape = tuple(shape)
    layout = layout or TensorMemoryLayout((shape[0], shape[1]))
    return Tensor(t.emit("tmem_alloc", [], [ir.TmemType(dtype, shape, layout)]).result)


def tcgen05_mma(a: Shared, b: Shared, d: Tensor, barrier: Barrier, use_acc: bool = False) -> None:
    """Blackwell tcgen05 MMA: d (tensor memory) (+)= a @ b; completion is committed to `barrier`."""
    t = _tr()
    t.require("tcgen05", "tcgen05_mma")
    t.emit("tcgen05_mma", [a, b, d, _barrier(barrier)], [], {"use_acc": bool(use_acc)})


def tmem_load(d: Tensor, layout: Layout | None = None) -> Tensor:
    """Tensor memory -> registers. The default layout is TMEM's own message layout for a 128-row
    block (one row per thread, warps stacked over rows), so no shuffle through shared memory."""
    t = _tr()
    t.require("tmem", "tmem_load")
    m, n = d.shape
    if layout is None and m == 128 and t.warps in (4, 8):
        cols = t.warps // 4
        layout = Layout.blocked([1, n // cols], [32, 1], [4, cols], order=(0, 1))
    return Tensor(t.emit("tmem_load", [d], [ir.TileType(d.dtype, d.shape, layout)]).result)




# ---------------------------------------------------------------------------------- control flow


def _carry_type_ok(init, final) -> bool:
    return isinstance(init, Tensor) and isinstance(final, Tensor) and init.type == final.type


class Loop:
    """A counted GPU loop: `for i in range(a, b, c)` (rewritten) or `with for_range(...) as i`."""

    def __init__(self, start, end, step=1, name: str = "i"):
        t = _tr()
        self.t = t
        self.loc = _user_loc()
        bounds = []
        for x in (start, end, step):
            if isinstance(x, str):
                x = t.dim(x)
            x = cast(_to_tensor(x, DType.i32), DType.i32)
            bounds.append(x)
        self.op = t.emit("for", bounds, [], regions=[ir.Region()])
        self.body = self.op.regions[0]
        self.iv = Tensor(self.body.add_arg(ir.I32, name))
        self.names: tuple[str, ...] = ()
        self.inits: list = []
        self.args: list = []          # block arg Tensor per name, or None when not a GPU value
        self.finals: list | None = None
        self._state = 0
        self._results: tuple = ()

    # python-local threading (driven by the frontend's rewrite)
    def carry(self, names, values, live_in=None) -> None:
        """Thread Python locals through the loop. Only names the body may read before writing
        (`live_in`) are carried; the others are loop-local and undefined after the loop."""
        live = set(names if live_in is None else live_in)
        self.names, self.inits, self.live = tuple(names), list(values), live
        self.args = [Tensor(self.body.add_arg(v.type, n)) if isinstance(v, Tensor) and n in live else None
                     for n, v in zip(self.names, self.inits)]

    @property
    def carried(self) -> tuple:
        return tuple(a if a is not None else v for a, v in zip(self.args, self.inits))

    def end(self, finals) -> None:
        self.finals = list(finals)

    @property
    def results(self) -> tuple:
        return self._results

    # context manager / one-shot iterator
    def __enter__(self) -> Tensor:
        self.t.b.push(self.body)
        self._named_before = dict(self.t.named)
        return self.iv

    def __exit__(self, exc_type, exc, tb):
        self.t.b.pop()
        if exc_type is None:
            self._finish()
        return False

    def __iter__(self):
        return self

    def __next__(self):
        self._state += 1
        if self._state == 1:
            return self.__enter__()
        self.__exit__(None, None, None)
        raise StopIteration

    def _finish(self) -> None:
        t, body = self.t, self.body
        yields: list[ir.Value] = []
        inits: list[ir.Value] = []
        keep_args: list[ir.Value] = [self.body.args[0]]
        results_for: list = []
        finals = self.finals if self.finals is not None else list(self.carried)
        out = []
        for name, init, arg, final in zip(self.names, self.inits, self.args, finals):
            if arg is None and name not in self.live:      # loop-local temporary
                out.append(init if final is init else UndefinedValue(name, self.loc))
                continue
            if arg is None:
                if isinstance(final, Tensor):
                    raise ir.GluonError(f"'{name}' is assigned a GPU value inside the loop but was "
                                        f"{'undefined' if isinstance(init, UndefinedValue) else repr(init)} before it; "
                                        "initialise it before the loop (e.g. with gl.zeros / gl.full)", self.loc)
                if final is not init and not isinstance(init, UndefinedValue) and not isinstance(final, (Shared, Barrier, GlobalTensor)):
                    if _is_number(init) or _is_number(final):
                        raise ir.GluonError(f"Python number '{name}' changes inside a GPU loop; make it a GPU value "
                                            "before the loop (gl.full((), value, dtype))", self.loc)
                out.append(final if not isinstance(init, UndefinedValue) else UndefinedValue(name, self.loc))
                continue
            if final is arg:          # unchanged: drop the carry
                body.replace_uses(arg.value, init.value)
                out.append(init)
                continue
            if not _carry_type_ok(init, final):
                raise ir.GluonError(f"loop-carried '{name}' changes type inside the loop: "
                                    f"{init.type} before, {getattr(final, 'type', type(final).__name__)} after",
                                    self.loc)
            keep_args.append(arg.value)
            inits.append(init.value)
            yields.append(final.value)
            results_for.append(len(out))
            out.append(None)
        # in-place named accumulators changed in the body (e.g. wgmma(..., "acc"))
        named_results = []
        for name, v in t.named.items():
            before = self._named_before.get(name)
            if before is v:
                continue
            init_v = before.value if before is not None else t.named_init.get(name)
            if init_v is None or v.value.owner is None:
                continue
            arg = ir.Value(init_v.type, name, owner=body)
            body.replace_uses(init_v, arg)
            keep_args.append(arg)
            inits.append(init_v)
            yields.append(v.value)
            named_results.append(name)
        body.args = keep_args
        t.b.push(body)
        t.emit("yield", yields)
        t.b.pop()
        self.op.operands.extend(inits)
        self.op.results = [ir.Value(v.type, getattr(v, "name", ""), owner=self.op) for v in inits]
        it = iter(self.op.results)
        for i in results_for:
            out[i] = Tensor(next(it))
        for name in named_results:
            t.named[name] = Tensor(next(it))
        self._results = tuple(out)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def range(*args, name: str = "i") -> Loop:  # noqa: A001 - the kernel-side `range`
    """`for i in gl.range(a, b, c)`: a GPU loop (plain `range` in a kernel body means the same)."""
    if len(args) == 1:
        args = (0, args[0], 1)
    elif len(args) == 2:
        args = (args[0], args[1], 1)
    return Loop(*args, name=name)


def for_range(*args) -> Loop:
    """`with for_range("k", 0, "K", 64) as k:` (the first argument optionally names the variable).

    Bounds may be ints, GPU integers, or names of symbolic sizes ("K" becomes an i32 parameter)."""
    name = "i"
    if len(args) >= 3 and isinstance(args[0], str) and not isinstance(args[1], str):
        name, args = args[0], args[1:]
    if len(args) == 1:
        args = (0, args[0])
    return Loop(*args, name=name)


def static_range(*args):
    """A loop unrolled at trace time (bounds must be Python ints)."""
    return builtins.range(*args)


class _ScalarBranch:
    def __init__(self, cond: Tensor, names, values):
        t = _tr()
        self.t, self.names, self.inits, self.loc = t, tuple(names), list(values), _user_loc()
        if cond.dtype != DType.i1:
            cond = cond != 0
        self.op = t.emit("if", [cond], [], regions=[ir.Region(), ir.Region()])
        self.then_vals: list = []
        self.else_vals: list = []

    def then_begin(self):
        self.t.b.push(self.op.regions[0])
        self.named_before = dict(self.t.named)

    def then_end(self, values):
        self.t.b.pop()
        self.then_vals = list(values)
        self.named_then = dict(self.t.named)
        self.t.named = dict(self.named_before)

    def else_begin(self):
        self.t.b.push(self.op.regions[1])
        return tuple(self.inits)

    def else_end(self, values):
        self.t.b.pop()
        self.else_vals = list(values)
        self._finish()

    def _finish(self):
        t = self.t
        then_y, else_y, out, slots = [], [], [], []
        for name, init, tv, ev in zip(self.names, self.inits, self.then_vals, self.else_vals):
            if tv is ev:
                out.append(tv)
                continue
            if isinstance(tv, Tensor) and isinstance(ev, Tensor) and tv.type == ev.type:
                then_y.append(tv.value)
                else_y.append(ev.value)
                slots.append(len(out))
                out.append(None)
                continue
            if _is_number(tv) or _is_number(ev):
                raise ir.GluonError(f"'{name}' is a Python value changed under a GPU condition; make it a GPU value "
                                    "before the branch", self.loc)
            if isinstance(tv, Tensor) and isinstance(ev, Tensor):
                raise ir.GluonError(f"'{name}' has type {tv.type} in the then-branch and {ev.type} in the else-branch",
                                    self.loc)
            out.append(UndefinedValue(name, self.loc))
        named_names = []
        for name in set(self.named_then) | set(t.named):
            tv, ev = self.named_then.get(name), t.named.get(name)
            if tv is ev or tv is None or ev is None:
                continue
            then_y.append(tv.value)
            else_y.append(ev.value)
            named_names.append(name)
        for region, ys in zip(self.op.regions, (then_y, else_y)):
            t.b.push(region)
            t.emit("yield", ys)
            t.b.pop()
        self.op.results = [ir.Value(v.type, "", owner=self.op) for v in then_y]
        it = iter(self.op.results)
        for i in slots:
            out[i] = Tensor(next(it))
        for name in named_names:
            t.named[name] = Tensor(next(it))
        self.results = tuple(out)


class _Negated:
    """`not cond` for an else-branch mask, built only if the else-branch touches memory."""

    def __init__(self, cond: Tensor):
        self.cond, self.value = cond, None

    def resolve(self) -> Tensor:
        if self.value is None:
            self.value = ~self.cond
        return self.value


class _MaskedBranch:
    """`if tile_cond:` — both sides run, memory effects masked per element; values merge with where()."""

    def __init__(self, cond: Tensor, names, values):
        self.t, self.cond, self.names, self.inits, self.loc = _tr(), cond, tuple(names), list(values), _user_loc()
        if cond.dtype != DType.i1:
            self.cond = cond != 0

    def then_begin(self):
        self.t.masks.append(self.cond)

    def then_end(self, values):
        self.t.masks.pop()
        self.then_vals = list(values)

    def else_begin(self):
        self.t.masks.append(_Negated(self.cond))
        return tuple(self.inits)

    def else_end(self, values):
        self.t.masks.pop()
        out = []
        for name, tv, ev in zip(self.names, self.then_vals, values):
            if tv is ev:
                out.append(tv)
            elif isinstance(tv, Tensor) and isinstance(ev, Tensor):
                if not tv.is_tile and not ev.is_tile:
                    raise ir.GluonError(f"scalar '{name}' assigned under a per-thread condition; "
                                        "use gl.where or make it a tile", self.loc)
                out.append(where(self.cond, tv, ev))
            else:
                out.append(UndefinedValue(name, self.loc))
        self.results = tuple(out)


class _FrontendHelpers:
    """What rewritten kernels call as `__gl__` (see gluon.frontend)."""

    @staticmethod
    def lookup(frame_locals: dict, name: str):
        return frame_locals.get(name, UndefinedValue(name, None))

    @staticmethod
    def loop(bounds, names, values, live_in=None, **kw):
        lp = range(*bounds, **kw)
        lp.carry(names, values, live_in)
        return lp

    @staticmethod
    def is_static(cond) -> bool:
        return not isinstance(cond, Tensor)

    @staticmethod
    def branch(cond: Tensor, names, values):
        if cond.is_tile:
            return _MaskedBranch(cond, names, values)
        return _ScalarBranch(cond, names, values)

    @staticmethod
    def frontend_error(msg: str, line: int):
        return ir.GluonError(msg, _user_loc())


# ---------------------------------------------------------------------------------- warp roles


class warp_role:
    """`with warp_role(WarpRole.PRODUCER, warp_range=(0, 3), registers=40):` — code for those warps only.

    Consecutive warp_role blocks form one warp-specialized section; the role holding warp 0 runs as the
    default partition."""

    def __init__(self, role: WarpRole | str, warp_range: tuple[int, int], registers: int | None = None):
        self.role = WarpRole(role) if not isinstance(role, WarpRole) else role
        self.first, self.last = warp_range
        self.registers = registers

    def __enter__(self):
        t = _tr()
        t.require("warp_specialize", "warp_role")
        ops = t.b.region.ops
        ws = ops[-1] if ops and ops[-1].kind == "warp_specialize" and ops[-1].attrs.get("_open") else None
        if ws is None:
            ws = t.emit("warp_specialize", [], [], {"roles": [], "_open": True})
        region = ir.Region()
        ws.regions.append(region)
        ws.attrs["roles"].append({"role": self.role.value, "warps": (self.first, self.last),
                                  "registers": self.registers, "default": self.first == 0})
        t.b.push(region)
        t.role_regions.append((region, self.last - self.first + 1))
        self._named_before = dict(t.named)
        return self

    def __exit__(self, exc_type, exc, tb):
        t = _tr()
        t.b.pop()
        t.role_regions.pop()
        # accumulators of one role are private to it
        t.named = self._named_before
        return False


# ---------------------------------------------------------------------------------- kernels


@dataclass(frozen=True)
class PointerArg:
    """Trace-time stand-in for a pointer argument of element type `dtype`."""

    dtype: DType
    divisibility: int = 16


@dataclass(frozen=True)
class ScalarArg:
    dtype: DType = DType.i32
    divisibility: int = 1


@dataclass(frozen=True)
class DescArg:
    """Trace-time stand-in for a TMA-descriptor argument built by the host."""

    dtype: DType
    block_shape: tuple[int, ...]
    swizzle: SwizzleMode = SwizzleMode.B128


_LAUNCH_HOOK: Callable | None = None   # installed by gluon.jit
_COMPILE_HOOK: Callable | None = None


def _def_line(fn: Callable) -> int:
    """The line of `def name(` (co_firstlineno points at the first decorator)."""
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return fn.__code__.co_firstlineno
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("def ", "async def ")):
            return start + i
    return start


class KernelTemplate:
    """A decorated kernel function: `.trace(...)` gives its IR; `kernel[grid](...)` launches it."""

    def __init__(self, fn: Callable, *, arch: Arch | str | None = None, num_warps: int = 4, simt: bool = False,
                 name: str | None = None):
        self.fn = fn
        self.name = name or fn.__name__
        self.arch = arch_by_name(arch) if isinstance(arch, str) else arch
        self.num_warps = num_warps
        self.simt = simt
        self.signature = inspect.signature(fn)
        self.constexprs = {n for n, p in self.signature.parameters.items()
                           if _is_constexpr_annotation(p.annotation)}
        self._traceable: Callable | None = None
        self.loc = ir.Loc(inspect.getsourcefile(fn) or "?", _def_line(fn), fn.__name__)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<gluon kernel {self.name} arch={self.arch} num_warps={self.num_warps}>"

    @property
    def traceable(self) -> Callable:
        if self._traceable is None:
            self._traceable = frontend.transform(self.fn, _FrontendHelpers)
        return self._traceable

    def trace(self, *args, arch: Arch | str | None = None, num_warps: int | None = None,
              block: Sequence[int] | None = None, **kwargs) -> ir.Module:
        """Trace with argument stand-ins: `TensorRef`s, `PointerArg`/`ScalarArg`/`DescArg`, a `DType`
        (a scalar of that type) or Python values for constexpr parameters."""
        arch = arch_by_name(arch) if isinstance(arch, str) else (arch or self.arch or SM90)
        nw = num_warps or self.num_warps
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise ir.GluonError(f"kernel {self.name}: {e}", self.loc) from None
        bound.apply_defaults()
        kernel = ir.Kernel(self.name, [], arch, nw, ir.Region(), {}, self.loc)
        trace = _Trace(kernel, tuple(block) if block else None)
        call_args = {}
        for pname, val in bound.arguments.items():
            call_args[pname] = self._bind_param(trace, pname, val)
        _TRACES.append(trace)
        try:
            self.traceable(**call_args)
        finally:
            _TRACES.pop()
        for ws in (op for op in kernel.walk() if op.kind == "warp_specialize"):
            ws.attrs.pop("_open", None)
        # symbolic dims go last, after the user's parameters
        dims = [p for p in kernel.params if p.name in trace.dims]
        kernel.params = [p for p in kernel.params if p.name not in trace.dims] + dims
        module = ir.Module([kernel])
        module.verify()
        return module

    def _bind_param(self, trace: _Trace, pname: str, val):
        k = trace.kernel
        loc = ir.Loc(self.loc.file, self.loc.line, self.name)
        if pname in self.constexprs:
            return val.value if isinstance(val, constexpr) else val
        if isinstance(val, TensorRef):
            v = ir.Value(ir.PointerType(val.dtype), pname)
            k.params.append(ir.Param(pname, v, loc, divisibility=16))
            g = GlobalTensor(val, v, trace)
            trace.globals[pname] = g
            trace.globals.setdefault(val.name, g)
            return g
        if isinstance(val, PointerArg):
            v = ir.Value(ir.PointerType(val.dtype), pname)
            k.params.append(ir.Param(pname, v, loc, divisibility=val.divisibility))
            return Pointer(v)
        if isinstance(val, DescArg):
            v = ir.Value(ir.DescType(val.dtype, tuple(val.block_shape), val.swizzle), pname)
            k.params.append(ir.Param(pname, v, loc))
            ref = TensorRef(pname, val.dtype, shape=tuple(f"{pname}_dim{i}" for i in builtins.range(len(val.block_shape))))
            g = GlobalTensor.__new__(GlobalTensor)
            g.ref, g.value, g._trace, g.kind = ref, v, trace, "desc"
            trace.globals[pname] = g
            return g
        if isinstance(val, (ScalarArg, DType)):
            sa = val if isinstance(val, ScalarArg) else ScalarArg(val)
            v = ir.Value(ir.ScalarType(sa.dtype), pname)
            k.params.append(ir.Param(pname, v, loc, divisibility=sa.divisibility))
            return Tensor(v)
        if _is_number(val) or isinstance(val, bool):
            v = ir.Value(ir.ScalarType(_py_dtype(val)), pname)
            k.params.append(ir.Param(pname, v, loc))
            return Tensor(v)
        raise ir.GluonError(f"kernel {self.name}: cannot trace parameter '{pname}' from {type(val).__name__} "
                            f"{val!r}; pass a TensorRef, PointerArg, ScalarArg, DescArg or a DType", self.loc)

    def __getitem__(self, launch):
        """`kernel[grid]` or `kernel[grid, block]` -> a callable that launches with the arguments."""
        if _LAUNCH_HOOK is None:
            raise RuntimeError("launching needs gluon.jit (import gluon)")
        return _LAUNCH_HOOK(self, launch)

    def compile(self, *args, **kwargs):
        """Trace with stand-ins and compile (no GPU needed): see gluon.jit.compile."""
        if _COMPILE_HOOK is None:
            raise RuntimeError("compiling needs gluon.jit (import gluon)")
        return _COMPILE_HOOK(self, *args, **kwargs)




def kernel(fn: Callable | None = None, *, arch: Arch | str | None = None, num_warps: int = 4,
           name: str | None = None):
    """`@kernel(arch=SM90, num_warps=8)`: an explicit-form kernel (shared regions, barriers, roles)."""
    def wrap(f):
        return KernelTemplate(f, arch=arch, num_warps=num_warps, name=name)
    return wrap(fn) if fn is not None else wrap


def jit(fn: Callable | None = None, *, arch: Arch | str | None = None, num_warps: int = 4):
    """`@gluon.jit`: a SIMT-style kernel launched as `k[grid, (BLOCK,)](args..., CONST=...)`; argument
    types are taken from the call, constexpr parameters specialize the compiled binary."""
    def wrap(f):
        return KernelTemplate(f, arch=arch, num_warps=num_warps, simt=True)
    return wrap(fn) if fn is not None else wrap
