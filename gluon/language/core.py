"""The arch-neutral core: `Tensor` (a symbolic scalar or register tile) and the builtins on it.

Dtype promotion and broadcasting, arithmetic and comparisons (Tensor's operators), math (`exp`, ...,
`maximum`, `minimum`, `cdiv`, `where`, `cast`), reductions (`sum`, `max`, `min`), tiles (`arange`,
`full`, `zeros`, `expand_dims`, `broadcast_to`, `convert_layout`) and the program's indices
(`program_id`, `num_programs`, `thread_id`, `multiple_of`).
"""
from __future__ import annotations

import builtins
from typing import Sequence

from .. import ir
from ..types import DType, Layout, ParamSource, SliceLayout
from .host_use import builtin_error, host_use_error, ufunc_error
from .tracing import UndefinedValue, _Handle, _static_int, _tr, _user_loc


# ---------------------------------------------------------------------------------- values


class constexpr:
    """Annotation for compile-time parameters (`XBLOCK: gl.constexpr`); their values specialize."""

    def __init__(self, value=None):
        self.value = value


def _is_constexpr_annotation(a) -> bool:
    return a is constexpr or isinstance(a, constexpr) or (isinstance(a, str) and a.split(".")[-1] == "constexpr")


class pointer:
    """Annotation `dst_ptr: gl.pointer(gl.float32)`: the parameter is a device pointer to `dtype`. A bare
    int never says what it points to, so only with this annotation may a launch pass an address
    (`t.data_ptr()`) for it; a tensor passed there must have this dtype."""

    __slots__ = ("dtype",)

    def __init__(self, dtype):
        dt = dtype if isinstance(dtype, DType) else DType.from_torch(dtype)
        if dt is None:
            try:
                dt = DType.from_name(dtype)
            except ValueError:
                raise TypeError(f"gl.pointer({dtype!r}): give the element type, e.g. gl.pointer(gl.float32)") from None
        object.__setattr__(self, "dtype", dt)

    def __setattr__(self, name, value):
        raise AttributeError("gl.pointer is immutable")

    def __eq__(self, other):
        return isinstance(other, pointer) and other.dtype == self.dtype

    def __hash__(self):
        return hash(("gl.pointer", self.dtype))

    def __repr__(self) -> str:
        return f"gl.pointer(gl.{self.dtype.torch_name or self.dtype.name})"


def _int_param(t: "Tensor", depth: int = 8) -> str | None:
    """The integer scalar parameter `t` is (or is that parameter plus offsets), else None: for the message
    when a launch passed an int where the kernel uses a pointer."""
    v = t.value
    if not isinstance(v.type, ir.TileType) and v.type.dtype.is_int:
        for p in _tr().kernel.params:
            if p.value is v:
                return p.name
    op = v.owner
    if depth and isinstance(op, ir.Op) and (op.kind in ("splat", "broadcast", "cast")
                                            or (op.kind == "binary" and op.attrs.get("op") in ("add", "sub"))):
        for o in op.operands:
            name = _int_param(Tensor(o), depth - 1)
            if name is not None:
                return name
    return None


def _int_as_pointer_error(t: "Tensor") -> ir.GluonError | None:
    """The error for an int argument used as a pointer: name it and say how to fix it."""
    name = _int_param(t)
    if name is None:
        return None
    return ir.GluonError(
        f"parameter '{name}' is used as a pointer, but the launch passed an int for it, which the kernel takes as "
        f"an integer scalar. If the int is a device address (t.data_ptr()), say what it points to with an "
        f"annotation: `{name}: gl.pointer(gl.float32)` (its element type); or pass the tensor itself", _user_loc())


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


class Tensor(_Handle):
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

    # Python asking a GPU value for a bool / int / float: the message names the construct (host_use.py)
    def __bool__(self):
        raise host_use_error("bool")

    def __index__(self):
        raise host_use_error("int")

    def __float__(self):
        raise host_use_error("float")

    def __iter__(self):
        raise builtin_error("iter")

    def __len__(self):
        raise builtin_error("len")

    def __abs__(self):
        raise builtin_error("abs")

    def __round__(self, ndigits=None):
        raise builtin_error("round")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """numpy on a GPU value: arithmetic with a numpy scalar (np.float32(2) * x) is that of the Python
        number; any other ufunc (np.exp(x), np.maximum(x, 0)) is an error naming the gl builtin."""
        op = _NUMPY_OPERATORS.get(ufunc.__name__)
        if op is not None and method == "__call__" and not kwargs and len(inputs) == 2:
            a, b = (x.item() if hasattr(x, "item") and not isinstance(x, Tensor) else x for x in inputs)
            return op(a, b)
        raise ufunc_error(ufunc.__name__)

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

    def to(self, dtype: DType, rounding: str | None = None, *, fp_downcast_rounding: str | None = None) -> "Tensor":
        """`gl.cast(self, dtype, rounding)`; `fp_downcast_rounding` is Triton's name for `rounding`."""
        if fp_downcast_rounding is not None:
            if rounding is not None:
                raise ir.GluonError("to(): give rounding or fp_downcast_rounding (Triton's name for it), not both",
                                    _user_loc())
            rounding = fp_downcast_rounding
        return cast(self, dtype, rounding)

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
                err = _int_as_pointer_error(self)
                raise err or ir.GluonError(f"tile indexing supports only ':' and None, got {i!r}", _user_loc())
        return out


import operator as _operator

_NUMPY_OPERATORS = {"add": _operator.add, "subtract": _operator.sub, "multiply": _operator.mul,
                    "true_divide": _operator.truediv, "floor_divide": _operator.floordiv, "remainder": _operator.mod,
                    "less": _operator.lt, "less_equal": _operator.le, "greater": _operator.gt,
                    "greater_equal": _operator.ge, "equal": _operator.eq, "not_equal": _operator.ne,
                    "bitwise_and": _operator.and_, "bitwise_or": _operator.or_, "bitwise_xor": _operator.xor}


def _const(x, dtype: DType) -> Tensor:
    if isinstance(x, _Handle) and not isinstance(x, Tensor):
        raise _not_a_scalar(x)
    if dtype.is_float:
        x = float(x)
    elif dtype == DType.i1:
        x = bool(x)
    else:
        x = int(x)
    return Tensor(_tr().emit("constant", (), [ir.ScalarType(dtype)], {"value": x}).result)


def _not_a_scalar(x) -> ir.GluonError:
    """A tensor argument (a GlobalTensor: a pointer to global memory) or a shared region where a scalar
    is needed (`offs < n` with `n` given as torch.tensor(5)): it failed in Python's int()/float()."""
    ref = getattr(x, "ref", None)
    if ref is not None:
        name = getattr(ref, "name", "?")
        shape = tuple(getattr(ref, "shape", ()) or ())
        what = "a 0-d tensor" if not shape else f"a {len(shape)}-d tensor"
        return ir.GluonError(
            f"[GL601] argument '{name}' is {what}, used here as a scalar: a tensor argument is a pointer to global "
            f"memory, not a number; pass a Python number at the launch ({name}.item(), or an int/float), or "
            f"load the value in the kernel (gl.load({name} + 0))", _user_loc())
    return ir.GluonError(f"[GL601] a {type(x).__name__} used as a scalar operand: it is not a GPU number; "
                         "load a value from it first (.load() for a shared region)", _user_loc())


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


# The float downcasts that round toward zero in Triton 3.6 on NVIDIA (sm90); round-to-nearest-even is every
# downcast's default (and the only mode of the other fp8 conversions: cvt.rn.satfinite).
_RTZ_CASTS = {(DType.f32, DType.f16), (DType.f32, DType.bf16), (DType.f32, DType.f8e5m2)}


def cast(x, dtype: DType, rounding: str | None = None) -> Tensor:
    """`x` converted to `dtype`. `rounding` ("rtne" or "rtz", Triton's `fp_downcast_rounding`) applies to a
    float downcast only; "rtz" exists for f32 -> f16 / bf16 / float8e5m2."""
    x = _to_tensor(x)
    dtype = DType(dtype) if not isinstance(dtype, DType) else dtype
    if rounding is not None:
        if rounding not in ("rtne", "rtz"):
            raise ir.GluonError(f"cast: rounding={rounding!r} is not a rounding mode; give 'rtne' (to nearest even) "
                                "or 'rtz' (toward zero)", _user_loc())
        if not (x.dtype.is_float and dtype.is_float and dtype.bits < x.dtype.bits):
            raise ir.GluonError(f"cast: rounding={rounding!r} applies to float downcasts only, not "
                                f"{x.dtype.name} -> {dtype.name}; leave rounding out", _user_loc())
        if rounding == "rtz" and (x.dtype, dtype) not in _RTZ_CASTS:
            raise ir.GluonError(f"cast: the target has no round-toward-zero {x.dtype.name} -> {dtype.name} conversion "
                                "(rtz exists for f32 -> f16, bf16, f8e5m2); use rounding='rtne'", _user_loc())
    if x.dtype == dtype:
        return x
    arch = _tr().arch
    if DType.f8e4m3 in (x.dtype, dtype) and arch.vendor == "nvidia" and isinstance(arch.version, int) \
            and arch.version < 89:
        raise ir.GluonError(f"cast {x.dtype.name} -> {dtype.name}: {arch.name} has no float8e4m3 conversions (they "
                            "need sm89 or later; float8e5m2 works on every NVIDIA arch)", _user_loc())
    attrs = {"rounding": rounding} if rounding == "rtz" else {}
    return Tensor(_tr().emit("cast", [x], [ir.same_shape_kind(x.type, dtype)], attrs).result)


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


def fma(a, b, c) -> Tensor:
    """a * b + c with a single rounding (the hardware's fused multiply-add: FFMA, HFMA2), elementwise on
    floats. The operands broadcast and promote as for `a * b + c`."""
    a, b = _operands(a, b)
    a, c = _operands(a, c)
    b, c = _operands(b, c)
    if not a.dtype.is_float:
        raise ir.GluonError(f"fma needs floating-point operands, got {a.dtype.name}; write a * b + c", _user_loc())
    return Tensor(_tr().emit("fma", [a, b, c], [a.type]).result)


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


# ---------------------------------------------------------------------------------- tiles and indices


def arange(start: int, end: int, layout: Layout | None = None) -> Tensor:
    start, end = _static_int(start, "arange's start"), _static_int(end, "arange's end")
    n = end - start
    if n <= 0 or n & (n - 1):
        raise ir.GluonError(f"arange({start}, {end}): the length {n} must be a power of two", _user_loc())
    return Tensor(_tr().emit("arange", [], [ir.TileType(DType.i32, (n,), layout)], {"start": start, "end": end}).result)


def full(shape: Sequence[int], value, dtype: DType, layout: Layout | None = None) -> Tensor:
    shape = tuple(_static_int(d, "a tile's shape") for d in shape)
    if not shape:
        return _const(value, dtype)
    value = float(value) if dtype.is_float else int(value)
    return Tensor(_tr().emit("constant", [], [ir.TileType(dtype, shape, layout)], {"value": value}).result)


def zeros(shape, dtype: DType = DType.f32, layout: Layout | None = None) -> Tensor:
    return full(shape, 0, dtype, layout)


def size(name: str, source: ParamSource | None = None) -> Tensor:
    """The symbolic size `name`: an i32 kernel parameter, created on first use (`_Trace.dim`), one Tensor."""
    t = _tr()
    h = t.sizes.get(name)
    if h is None:
        h = t.sizes[name] = Tensor(t.dim(name, source))
    return h


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
