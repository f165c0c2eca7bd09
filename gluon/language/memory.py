"""Memory a kernel addresses: global memory and shared memory.

Global memory is reached through pointer parameters (`Pointer`; `p + offs` is a `PtrOffset`; masked
`load` / `store`) or global tensor parameters (`GlobalTensor`: a pointer, or a TMA descriptor for the
TMA builtins). Every load and store is masked by the per-thread `if` conditions around it
(`_mask_for`). Shared memory is allocated with `smem` as a typed region (`Shared`, all stages or one);
`thread_barrier` syncs the CTA.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .. import ir
from ..types import DType, Layout, NVMMASharedLayout, ParamSource, SwizzleMode, TensorRef
from .core import Tensor, _binary, _broadcast_to, _int_as_pointer_error, _to_tensor, cast, size
from .tracing import _Handle, _static_int, _Trace, _tr, _user_loc


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


class _Negated:
    """`not cond` for an else-branch mask, built only if the else-branch touches memory."""

    def __init__(self, cond: Tensor):
        self.cond, self.value = cond, None

    def resolve(self) -> Tensor:
        if self.value is None:
            self.value = ~self.cond
        return self.value


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
        err = _int_as_pointer_error(ptr) if isinstance(ptr, Tensor) else None
        if err is not None:
            raise err
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


class GlobalTensor(_Handle):
    """A global tensor parameter bound from a `TensorRef`. Used with TMA it becomes a TMA descriptor
    parameter; used with loads/stores, a pointer parameter (row-major, strides from its shape)."""

    def __init__(self, ref: TensorRef, value: ir.Value, trace: _Trace, arg_index: int | None = None):
        self.ref = ref
        self.value = value
        self.arg_index = arg_index      # the caller's argument it is bound from (its sizes come from there)
        self._trace = trace
        self.kind: str | None = None    # "pointer" | "desc"

    @property
    def shape(self) -> tuple:
        """Sizes: ints, or i32 parameters for symbolic dims (created when first used)."""
        idx = self.arg_index
        return tuple(size(d, ParamSource.dim(idx, axis) if idx is not None else None) if isinstance(d, str)
                     else d for axis, d in enumerate(self.ref.shape))

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

    @property
    def base(self) -> Pointer:
        """The address of the tensor's first element, for a kernel that indexes it with strides it is given (a
        view with rows apart, at any alignment): a pointer parameter the launch takes any strides for, where
        `ptr` (and `+`, `[]`) index it as a dense row-major tensor and need it contiguous."""
        self._use("pointer")
        self.value.type = ir.PointerType(self.dtype)
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


class Shared(_Handle):
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
        is byte-exact; a split of a tile into parts, along either dimension, whose parts the tile's swizzled
        layout does not store back to back is refused (`_split_error`)."""
        shape = tuple(int(d) for d in shape)
        lay = self.layout
        if not isinstance(lay, NVMMASharedLayout):
            raise ir.GluonError(f"'{self.name}'.reinterpret: only NVMMA-swizzled regions, not {lay}", _user_loc())
        err = _split_error(self, shape, dtype or self.dtype)
        if err:
            raise ir.GluonError(f"'{self.name}'.reinterpret({shape}): {err}", _user_loc())
        new = ir.SmemType(dtype or self.dtype, shape, NVMMASharedLayout(shape, lay.swizzle, lay.transposed), stages)
        if new.stage_bytes * stages != self.nbytes * self.stages:
            what = f"{stages} x {'x'.join(map(str, shape))} {new.dtype.name}"
            raise ir.GluonError(f"'{self.name}'.reinterpret({shape}, stages={stages}): {what} is {new.stage_bytes * stages} "
                                f"bytes, but the region has {self.nbytes * self.stages}", _user_loc())
        return Shared(_tr().emit("smem_reinterpret", [self], [new]).result, self.name)

    def __repr__(self) -> str:
        return f"Shared({self.name}: {self.type})"


def _split_error(region: Shared, shape: tuple[int, ...], dtype: DType) -> str | None:
    """Why `shape` tiles of `dtype` are not back-to-back parts of `region`'s swizzled 2-D tile, where they are a
    split of it (same dtype, one dimension kept, the other divided); None where they are, or it is no split.
    A swizzled row wider than the swizzle span is stored as column blocks of every row (TMA and WGMMA both
    lay it out so), so a split along the rows is not a set of parts; a split along the columns is, where each
    part is whole column blocks."""
    old = region.shape
    if dtype != region.dtype or len(old) != 2 or len(shape) != 2 or region.layout.swizzle.bytes == 0:
        return None
    inner = 0 if region.layout.transposed else 1            # the dimension contiguous in memory
    outer = 1 - inner
    span = region.layout.swizzle.bytes
    row_bytes = old[inner] * dtype.bits // 8
    if shape[inner] == old[inner] and shape[outer] < old[outer] and old[outer] % shape[outer] == 0:
        if row_bytes > span:
            return (f"parts of {shape[outer]} of the tile's {old[outer]} rows, but its rows of {row_bytes} bytes are "
                    f"wider than its {span}-byte swizzle, so it is stored as column blocks of all {old[outer]} rows "
                    f"and a part's rows are not one piece; split it into column blocks instead, or keep rows within "
                    f"{span} bytes ({span * 8 // dtype.bits} elements)")
    elif shape[outer] == old[outer] and shape[inner] < old[inner] and old[inner] % shape[inner] == 0:
        part_bytes = shape[inner] * dtype.bits // 8
        if part_bytes % span and row_bytes > span:
            return (f"parts of {shape[inner]} of the tile's {old[inner]} columns ({part_bytes} bytes), which are not "
                    f"whole {span}-byte swizzle blocks; use parts of a multiple of {span * 8 // dtype.bits} columns")
    return None


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
    shape = tuple(_static_int(d, "smem()'s shape") for d in shape)
    stages = _static_int(stages, "smem()'s stages")
    st = ir.SmemType(dtype, shape, layout, stages)
    ops = [value] if value is not None else []
    return Shared(t.emit("smem_alloc", ops, [st], {"name": name}, names=[name]).result, name)


def thread_barrier() -> None:
    _tr().emit("thread_barrier")
