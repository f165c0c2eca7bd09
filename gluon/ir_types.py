"""The IR's types and data structures: value types (scalars, tiles, shared regions, barriers, TMA descriptors,
tensor memory) and Value / Op / Region / Param / Kernel.

Split out of gluon.ir so that the per-op verifiers (gluon.ir_verify) and the printer (gluon.ir_print) can import
them while gluon.ir's registry imports those: imports go ir_types -> ir_verify, ir_print -> ir, never back.
Everyone else reaches these names as gluon.ir.X.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator

from .types import DType, Layout, Loc, ParamSource, SharedMemoryDescriptor, SwizzleMode


# ------------------------------------------------------------------------------ types


@dataclass(frozen=True)
class ScalarType:
    dtype: DType

    def __str__(self) -> str:
        return self.dtype.name


@dataclass(frozen=True)
class PointerType:
    """A pointer into global memory (a kernel parameter)."""

    dtype: DType

    def __str__(self) -> str:
        return f"ptr<{self.dtype.name}>"


@dataclass(frozen=True)
class TileType:
    """A register tile distributed over the block's threads by `layout` (None until assigned)."""

    dtype: DType
    shape: tuple[int, ...]
    layout: Layout | None = None

    def with_dtype(self, dtype: DType) -> "TileType":
        return TileType(dtype, self.shape, self.layout)

    def __str__(self) -> str:
        lay = f", {self.layout}" if self.layout is not None else ""
        return f"tile<{'x'.join(map(str, self.shape))}x{self.dtype.name}{lay}>"


# Shared memory: `stages` copies of a `shape` tile (stages == 1: one tile, no stage index). The IR type
# is the user-facing typed region description itself.
SmemType = SharedMemoryDescriptor


@dataclass(frozen=True)
class BarrierType:
    """`stages` mbarriers (8 bytes each) in shared memory, initialised with an arrival `count`."""

    stages: int = 1
    count: int = 1

    def stage(self) -> "BarrierType":
        return BarrierType(1, self.count)

    def __str__(self) -> str:
        return f"mbarrier<{self.stages}, count={self.count}>"


@dataclass(frozen=True)
class DescType:
    """A TMA tensor descriptor for a global tensor of rank len(block_shape), moved in `block_shape` tiles."""

    dtype: DType
    block_shape: tuple[int, ...]
    swizzle: SwizzleMode = SwizzleMode.B128

    def __str__(self) -> str:
        return f"tma_desc<{'x'.join(map(str, self.block_shape))}x{self.dtype.name}, {self.swizzle.name}>"


@dataclass(frozen=True)
class TmemType:
    """Blackwell tensor memory holding a `shape` accumulator."""

    dtype: DType
    shape: tuple[int, ...]
    layout: Layout

    def __str__(self) -> str:
        return f"tmem<{'x'.join(map(str, self.shape))}x{self.dtype.name}, {self.layout}>"


Type = ScalarType | PointerType | TileType | SmemType | BarrierType | DescType | TmemType
I1, I32, I64, F32 = ScalarType(DType.i1), ScalarType(DType.i32), ScalarType(DType.i64), ScalarType(DType.f32)


def element_dtype(t: Type) -> DType | None:
    return getattr(t, "dtype", None)


def same_shape_kind(t: Type, dtype: DType) -> Type:
    """The type with `t`'s shape and layout but element type `dtype` (scalar stays scalar)."""
    if isinstance(t, TileType):
        return TileType(dtype, t.shape, t.layout)
    return ScalarType(dtype)



# ------------------------------------------------------------------------------ values, ops, regions

_ids = itertools.count()


class Value:
    """An SSA value. `name` is a readable hint (the user's variable name when known)."""

    __slots__ = ("type", "name", "id", "owner")

    def __init__(self, type: Type, name: str = "", owner: Any = None):
        self.type = type
        self.name = name
        self.id = next(_ids)
        self.owner = owner  # the defining Op, or the Region for region arguments

    def __repr__(self) -> str:
        return f"<Value %{self.name or self.id}: {self.type}>"


@dataclass(eq=False)
class Op:
    kind: str
    operands: list[Value]
    results: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    regions: list["Region"] = field(default_factory=list)
    loc: Loc | None = None

    @property
    def result(self) -> Value:
        if len(self.results) != 1:
            raise ValueError(f"op {self.kind} has {len(self.results)} results, not 1")
        return self.results[0]

    def __repr__(self) -> str:
        return f"<Op {self.kind} at {self.loc}>"


@dataclass(eq=False)
class Region:
    args: list[Value] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)

    def add_arg(self, type: Type, name: str = "") -> Value:
        v = Value(type, name, owner=self)
        self.args.append(v)
        return v

    def walk(self) -> Iterator[Op]:
        """Every op in this region and its nested regions, in program order."""
        for op in self.ops:
            yield op
            for r in op.regions:
                yield from r.walk()

    def replace_uses(self, old: Value, new: Value) -> None:
        """Replace every use of `old` by `new` in this region (nested regions included)."""
        for op in self.walk():
            op.operands = [new if v is old else v for v in op.operands]


@dataclass
class Param:
    """A kernel parameter: the value the body uses, where it came from in the user's code, and where a
    launch takes its value from (`source`: the caller's argument, a dimension of one, or a keyword)."""

    name: str
    value: Value
    loc: Loc | None = None
    divisibility: int = 1      # 16 when the launcher guarantees alignment (tt.divisibility)
    source: ParamSource | None = None


@dataclass(eq=False)
class Kernel:
    name: str
    params: list[Param]
    arch: Any                  # gluon.arch.Arch (not imported: ir stays at the bottom)
    num_warps: int
    body: Region
    attrs: dict[str, Any] = field(default_factory=dict)
    loc: Loc | None = None
    constexprs: dict[str, Any] = field(default_factory=dict)   # the compile-time values it was traced with

    def walk(self) -> Iterator[Op]:
        return self.body.walk()

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)
