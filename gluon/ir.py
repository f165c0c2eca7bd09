"""Gluon IR: the contract between the DSL, the passes and the backends.

Shape of the IR:  Module -> Kernel (params, arch, warps, attrs) -> Region -> Op -> (Regions ...)

* A `Value` is defined once: by an op result or as a region argument (loop induction variable,
  loop-carried value). Values have types (`ScalarType`, `TileType`, `SmemType`, ...).
* A `Region` is a single block: arguments plus an ordered list of ops. Ops inside a region may use
  values defined earlier in the same region or in any enclosing region (no isolation: the backend
  computes warp-partition captures itself).
* Op kinds are strings registered in `OPS`, each with a doc line, its arch op family, and a verifier.

This module imports nothing else from the project except `gluon.types`, so every layer may read it.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from .types import (DType, GluonError, Layout, Loc, ParamSource, SHARED_LAYOUTS, SharedMemoryDescriptor, SwizzleMode,
                    layout_rank)

# ------------------------------------------------------------------------------ diagnostics


# Loc and GluonError (imported above) live in gluon.types, so the vocabulary (a bad SwizzleMode) can raise
# them too; every layer keeps reaching them as ir.Loc / ir.GluonError.


class IRVerificationError(GluonError):
    pass


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


@dataclass(eq=False)
class Module:
    kernels: list[Kernel] = field(default_factory=list)

    @property
    def kernel(self) -> Kernel:
        if len(self.kernels) != 1:
            raise ValueError(f"module has {len(self.kernels)} kernels")
        return self.kernels[0]

    def pretty(self) -> str:
        return "\n\n".join(_print_kernel(k) for k in self.kernels)

    def verify(self, *, require_layouts: bool = False) -> "Module":
        for k in self.kernels:
            verify_kernel(k, require_layouts=require_layouts)
        return self

    __str__ = pretty


# ------------------------------------------------------------------------------ builder


class Builder:
    """Appends ops at an insertion point (a region); the DSL drives it while tracing."""

    def __init__(self, region: Region):
        self._stack: list[Region] = [region]
        self.loc: Loc | None = None

    @property
    def region(self) -> Region:
        return self._stack[-1]

    def push(self, region: Region) -> None:
        self._stack.append(region)

    def pop(self) -> Region:
        return self._stack.pop()

    def create(self, kind: str, operands=(), result_types=(), attrs=None, regions=(),
               names=None, loc: Loc | None = None) -> Op:
        if kind not in OPS:
            raise KeyError(f"unknown op kind {kind!r}")
        op = Op(kind, list(operands), [], dict(attrs or {}), list(regions), loc or self.loc)
        names = names or [""] * len(result_types)
        op.results = [Value(t, n, owner=op) for t, n in zip(result_types, names)]
        self.region.ops.append(op)
        return op

    def insert_at_start(self, region: Region, op: Op) -> None:
        region.ops.insert(0, op)


# ------------------------------------------------------------------------------ op registry


@dataclass(frozen=True)
class OpDef:
    """What every layer may know about an op kind without a table of its own: its arch op family, its
    verifier, and its traits. `pure`: no memory or synchronization effect (a pass may clone, recompute or
    drop it; the lowering may re-materialize it in a warp partition). `same_layout`: its result tile is in
    the layout of its tile operands (the layout pass propagates through it)."""

    kind: str
    doc: str
    family: str                              # arch op family (gluon.arch) that must support it
    verify: Callable[[Op], str | None] | None = None   # returns an error message or None
    terminator: bool = False
    pure: bool = False
    same_layout: bool = False


OPS: dict[str, OpDef] = {}


def _register(kind: str, doc: str, family: str = "arith", verify=None, terminator=False, *, pure=False,
              same_layout=False) -> None:
    OPS[kind] = OpDef(kind, doc, family, verify, terminator, pure, same_layout)


def kinds(trait: str) -> frozenset[str]:
    """The op kinds with `trait` ("pure", "same_layout")."""
    return frozenset(k for k, d in OPS.items() if getattr(d, trait))


def _same_types(op: Op) -> str | None:
    ts = {v.type for v in op.operands}
    if len(ts) != 1:
        return "operands must have the same type, got " + ", ".join(str(v.type) for v in op.operands)
    return None


def _shape_of(t: Type) -> tuple[int, ...]:
    return t.shape if isinstance(t, TileType) else ()


def _verify_dot(op: Op) -> str | None:
    a, b, acc = (v.type for v in op.operands[:3])
    ash, bsh, csh = a.shape, b.shape, acc.shape
    if len(ash) != 2 or len(bsh) != 2 or len(csh) != 2:
        return f"dot operands must be 2-D, got A {ash}, B {bsh}, acc {csh}"
    if ash[1] != bsh[0]:
        return f"inner dimensions differ: A is {ash[0]}x{ash[1]} and B is {bsh[0]}x{bsh[1]} (A's columns must equal B's rows)"
    if (ash[0], bsh[1]) != tuple(csh):
        return f"accumulator is {csh[0]}x{csh[1]} but A x B is {ash[0]}x{bsh[1]}"
    if a.dtype != b.dtype:
        return f"A is {a.dtype.name} but B is {b.dtype.name}; both operands need one dtype"
    return None


def _verify_for(op: Op) -> str | None:
    body = op.regions[0]
    inits = op.operands[3:]
    if len(body.args) != 1 + len(inits):
        return f"body has {len(body.args)} args for {len(inits)} loop-carried values"
    if not body.ops or body.ops[-1].kind != "yield":
        return "body must end with yield"
    ys = body.ops[-1].operands
    if [v.type for v in ys] != [v.type for v in inits]:
        return "yielded types " + str([str(v.type) for v in ys]) + " differ from init types " + str([str(v.type) for v in inits])
    return None


def _verify_if(op: Op) -> str | None:
    if op.operands[0].type != I1:
        return f"condition must be a scalar i1, got {op.operands[0].type}"
    for r in op.regions:
        if not r.ops or r.ops[-1].kind != "yield":
            return "each branch must end with yield"
        if [v.type for v in r.ops[-1].operands] != [v.type for v in op.results]:
            return "branch yields do not match the op's result types"
    return None


def _verify_split_cols(op: Op) -> str | None:
    x = op.operands[0].type
    if len(op.results) != 2 or not isinstance(x, TileType) or len(x.shape) != 2:
        return "takes one 2-D tile and gives its two column halves"
    m, n = x.shape
    for r in op.results:
        if not isinstance(r.type, TileType) or tuple(r.type.shape) != (m, n // 2) or r.type.dtype != x.dtype:
            return f"the halves of a {m}x{n} tile are {m}x{n // 2} of {x.dtype.name}, got {r.type}"
    return None


# The ids of the hardware's 16 named barriers (0..15) a kernel may use: Triton 3.6 itself syncs on 0 (the default
# partition's __syncthreads), 1 (the whole CTA) and 2, 3, ... (one per worker partition), so 0..7 are left to it.
NAMED_BARRIER_IDS = range(8, 16)


def _verify_named_barrier(op: Op) -> str | None:
    n = op.attrs.get("num_threads")
    if not isinstance(n, int) or n <= 0 or n % 32:
        return f"attrs['num_threads'] must be a positive multiple of 32, got {n!r}"
    if op.results:
        return "must not have results"
    if "barrier_id" in op.attrs:
        if op.operands:
            return "takes its barrier id as attrs['barrier_id'] or as one i32 operand, not both"
        if op.attrs["barrier_id"] not in NAMED_BARRIER_IDS:
            return f"attrs['barrier_id'] must be in 8..15, got {op.attrs['barrier_id']!r}"
        return None
    if len(op.operands) != 1 or op.operands[0].type != I32:
        return "needs attrs['barrier_id'] or exactly one i32 scalar operand (the barrier id)"
    return None


# Atomics (tt.atomic_rmw / tt.atomic_cas). `fmax`/`fmin` are no Triton rmw kind: the lowering builds them as
# Triton's frontend does, from a signed max/min and an unsigned min/max on the bits (f32, f64).
ATOMIC_RMW_KINDS = ("add", "fadd", "and", "or", "xor", "xchg", "max", "min", "umax", "umin", "fmax", "fmin")
ATOMIC_SEMS = ("relaxed", "acquire", "release", "acq_rel")
ATOMIC_SCOPES = ("gpu", "cta", "sys")


def _verify_atomic(op: Op, n_values: int) -> str | None:
    """(ptr, offsets, *values[n_values], mask?) -> old values: one dtype (the pointee's), one shape."""
    ptr, offs = op.operands[0].type, op.operands[1].type
    if not isinstance(ptr, PointerType):
        return f"the first operand must be a global pointer, got {ptr}"
    if op.attrs.get("sem") not in ATOMIC_SEMS:
        return f"attrs['sem'] must be one of {', '.join(ATOMIC_SEMS)}, got {op.attrs.get('sem')!r}"
    if op.attrs.get("scope") not in ATOMIC_SCOPES:
        return f"attrs['scope'] must be one of {', '.join(ATOMIC_SCOPES)}, got {op.attrs.get('scope')!r}"
    want = 2 + n_values + (1 if op.attrs.get("has_mask") else 0)
    if len(op.operands) != want or len(op.results) != 1:
        return f"takes {want} operands and gives 1 result, got {len(op.operands)} and {len(op.results)}"
    shape = _shape_of(offs)
    for v in op.operands[2:2 + n_values] + op.results:
        if element_dtype(v.type) != ptr.dtype or _shape_of(v.type) != shape:
            return f"values and result must be {ptr.dtype.name} shaped like the offsets {shape}, got {v.type}"
    if op.attrs.get("has_mask"):
        m = op.operands[-1].type
        if element_dtype(m) != DType.i1 or _shape_of(m) != shape:
            return f"the mask must be i1 shaped like the offsets {shape}, got {m}"
    return None


def _verify_atomic_rmw(op: Op) -> str | None:
    if op.attrs.get("op") not in ATOMIC_RMW_KINDS:
        return f"attrs['op'] must be one of {', '.join(ATOMIC_RMW_KINDS)}, got {op.attrs.get('op')!r}"
    return _verify_atomic(op, 1)


def _verify_atomic_cas(op: Op) -> str | None:
    if op.attrs.get("has_mask"):
        return "has no mask (tt.atomic_cas takes none)"
    return _verify_atomic(op, 2)


def _verify_smem_alloc(op: Op) -> str | None:
    t = op.results[0].type
    if not isinstance(t.layout, SHARED_LAYOUTS):
        return f"shared region needs a shared layout (Layout.swizzled / Layout.shared), got {t.layout}"
    return None


_register("program_id", "the program (block) index along attrs['axis']", "program_id", pure=True)
_register("num_programs", "the grid size along attrs['axis']", "program_id", pure=True)
_register("constant", "attrs['value'] as a scalar, or splatted over a tile", pure=True)
_register("binary", "elementwise attrs['op'] (add sub mul div floordiv rem and or xor shl shr min max) on two same-typed values",
          verify=_same_types, pure=True, same_layout=True)
_register("cmp", "elementwise comparison attrs['pred'] (lt le gt ge eq ne) -> i1",
          verify=_same_types, pure=True, same_layout=True)
_register("unary", "elementwise attrs['op'] (neg not exp exp2 log log2 sqrt rsqrt abs sin cos)",
          pure=True, same_layout=True)
_register("cast", "convert element type (result type says to what)", pure=True, same_layout=True)
_register("select", "elementwise cond ? a : b", pure=True, same_layout=True)
_register("fma", "elementwise a * b + c rounded once (floats; three same-typed values)", verify=_same_types, pure=True,
          same_layout=True)
_register("splat", "broadcast a scalar over a tile")
_register("arange", "tile [attrs['start'], attrs['end']) of i32")
_register("expand_dims", "insert a size-1 dimension at attrs['axis']")
_register("broadcast", "broadcast size-1 dimensions to the result shape", same_layout=True)
_register("convert_layout", "move a tile to another register layout", "convert_layout")
_register("split_cols", "a WGMMA accumulator tile's left and right column halves (two results; the halves are "
          "subsets of each thread's registers, nothing moves)", verify=_verify_split_cols)
# Shape ops (gluon/language/shapes.py). Their results are not in their operands' layout: the lowering
# (backend/lowering/shapes.py) emits each in the layout Triton's inference gives and converts to the IR's.
def _verify_shape_op(op: Op) -> str | None:
    ins, outs = [v.type for v in op.operands], [v.type for v in op.results]
    if not all(isinstance(t, TileType) for t in ins + outs):
        return "operands and results must be register tiles"
    x = ins[0]
    if any(t.dtype != x.dtype for t in (ins[:1] if op.kind == "gather" else ins) + outs):
        return "operands and results must have one element type"
    n = 1
    for d in x.shape:
        n *= d
    if op.kind == "reshape" and n != _numel(outs[0]):
        return f"a {x.shape} tile has {n} elements, {outs[0].shape} has {_numel(outs[0])}"
    if op.kind == "trans" and (sorted(op.attrs.get("order", ())) != list(range(len(x.shape)))
                               or outs[0].shape != tuple(x.shape[o] for o in op.attrs["order"])):
        return f"attrs['order'] {op.attrs.get('order')} must permute the {len(x.shape)} dims into {outs[0].shape}"
    if op.kind == "join" and (len(ins) != 2 or ins[0].shape != ins[1].shape or outs[0].shape != (*x.shape, 2)):
        return "joins two tiles of one type into one with a new minor dimension of size 2"
    if op.kind == "split" and (len(outs) != 2 or x.shape[-1:] != (2,) or any(t.shape != x.shape[:-1] for t in outs)):
        return "splits a tile whose last dimension is 2 into two tiles without it"
    if op.kind == "gather" and (len(ins) != 2 or not ins[1].dtype.is_int or outs[0].shape != ins[1].shape):
        return "gathers src along attrs['axis'] at an integer index tile, giving the index's shape"
    return None


def _numel(t: TileType) -> int:
    n = 1
    for d in t.shape:
        n *= d
    return n


_register("reshape", "the same elements in another shape (row-major order; attrs can_reorder)", pure=True,
          verify=_verify_shape_op)
_register("trans", "permute a tile's dimensions: result dim i is operand dim attrs['order'][i]", pure=True,
          verify=_verify_shape_op)
_register("join", "two same-typed tiles as one with a new minor dimension of size 2", pure=True,
          verify=_verify_shape_op)
_register("split", "a tile whose last dimension is 2 as its two halves (two results)", pure=True,
          verify=_verify_shape_op)
_register("gather", "(src, index): src's elements at index along attrs['axis'] (tt.gather)", pure=True,
          verify=_verify_shape_op)
_register("reduce", "reduce a tile along attrs['axis'] with attrs['op'] (sum max min)", "reduce")
# Reductions and scans with a combine region (tt.reduce / tt.scan, Triton's region ops) and tt.histogram
# (gluon.language.reductions). The region takes (lhs..., rhs...) scalars, one of each per input, and ends
# with a yield of one combined scalar per input, of its input's dtype.
def _verify_combine(op: Op, result_shape: Callable[[tuple[int, ...], int], tuple[int, ...]]) -> str | None:
    ins = op.operands
    if not ins or not all(isinstance(v.type, TileType) for v in ins):
        return "takes one or more register tiles"
    shape = ins[0].type.shape
    if any(v.type.shape != shape for v in ins):
        return "inputs of different shapes " + ", ".join(str(v.type.shape) for v in ins)
    axis = op.attrs.get("axis")
    if not isinstance(axis, int) or not 0 <= axis < len(shape):
        return f"attrs['axis'] must be in 0..{len(shape) - 1}, got {axis!r}"
    if len(op.results) != len(ins):
        return f"gives one result per input ({len(ins)}), got {len(op.results)}"
    want = result_shape(shape, axis)
    for v, r in zip(ins, op.results):
        if element_dtype(r.type) != v.type.dtype or _shape_of(r.type) != want:
            return f"result {r.type} should be {v.type.dtype.name} of shape {want}"
    if len(op.regions) != 1:
        return "needs one combine region"
    body = op.regions[0]
    scalars = [ScalarType(v.type.dtype) for v in ins]
    if [a.type for a in body.args] != scalars * 2:
        return "the combine region takes (lhs..., rhs...): " + ", ".join(str(t) for t in scalars * 2)
    if not body.ops or body.ops[-1].kind != "yield" or [v.type for v in body.ops[-1].operands] != scalars:
        return "the combine region must end with a yield of " + ", ".join(str(t) for t in scalars)
    return None


def _verify_reduce_fn(op: Op) -> str | None:
    return _verify_combine(op, lambda shape, axis: shape[:axis] + shape[axis + 1:])


def _verify_scan(op: Op) -> str | None:
    if not isinstance(op.attrs.get("reverse"), bool):
        return f"attrs['reverse'] must be a bool, got {op.attrs.get('reverse')!r}"
    return _verify_combine(op, lambda shape, axis: shape)


def _verify_histogram(op: Op) -> str | None:
    x = op.operands[0].type if op.operands else None
    if not isinstance(x, TileType) or len(x.shape) != 1 or not x.dtype.is_int:
        return f"takes a 1-D integer tile, got {x}"
    if len(op.operands) == 2:
        m = op.operands[1].type
        if not isinstance(m, TileType) or m.shape != x.shape or m.dtype != DType.i1:
            return f"the mask must be an i1 tile of shape {x.shape}, got {m}"
    elif len(op.operands) != 1:
        return f"takes the values and an optional mask, got {len(op.operands)} operands"
    n = op.attrs.get("num_bins")
    if not isinstance(n, int) or n <= 0 or n & (n - 1):
        return f"attrs['num_bins'] must be a positive power of two, got {n!r}"
    if len(op.results) != 1 or op.results[0].type.dtype != DType.i32 or _shape_of(op.results[0].type) != (n,):
        return f"gives one i32 tile of shape ({n},)"
    return None


_register("reduce_fn", "tt.reduce of one or more same-shaped tiles along attrs['axis'] with a combine region "
          "(lhs..., rhs...) -> yield; one result per input", "reduce", _verify_reduce_fn)
_register("scan", "tt.scan: inclusive scan of one or more same-shaped tiles along attrs['axis'] (attrs['reverse']) "
          "with a combine region as reduce_fn's; results shaped and laid out as the inputs", "reduce", _verify_scan,
          same_layout=True)
_register("histogram", "tt.histogram: i32 counts of a 1-D int tile's values in [0, attrs['num_bins']) (optional i1 "
          "mask operand)", "reduce", _verify_histogram)
_register("load", "masked global load: ptr + offsets (mask, other optional; attrs has_mask/has_other)", "load",
          same_layout=True)
_register("store", "masked global store: ptr + offsets <- value (mask optional)", "store", same_layout=True)
def _verify_inline_asm(op: Op) -> str | None:
    if not op.results:
        return "has no result (the asm must produce at least one value)"
    shapes = {_shape_of(v.type) for v in op.operands + op.results if _shape_of(v.type)}
    if len(shapes) > 1:
        return f"operands and results of different shapes {sorted(shapes)}"
    if not isinstance(op.attrs.get("pack"), int) or op.attrs["pack"] < 1:
        return f"pack={op.attrs.get('pack')!r} is not a positive int"
    return None


# Inline assembly over elements (tt.elementwise_inline_asm): attrs asm, constraints, pack. Two kinds, as
# purity is a trait of a kind here: "inline_asm_pure" may be dropped or recomputed, "inline_asm" may not.
_register("inline_asm_pure", "the target's asm over elements, no side effect (attrs asm, constraints, pack)",
          "inline_asm", _verify_inline_asm, pure=True, same_layout=True)
_register("inline_asm", "the target's asm over elements, with side effects (attrs asm, constraints, pack)",
          "inline_asm", _verify_inline_asm, same_layout=True)
_register("atomic_rmw", "atomic read-modify-write attrs['op'] at ptr + offsets with value (mask optional; attrs sem, "
          "scope, has_mask) -> the old values", "atomic", _verify_atomic_rmw, same_layout=True)
_register("atomic_cas", "atomic compare-and-swap at ptr + offsets: (ptr, offsets, cmp, value), attrs sem, scope -> "
          "the old values", "atomic", _verify_atomic_cas, same_layout=True)
_register("smem_alloc", "allocate a shared region (attrs name); optional initial tile operand", "smem", _verify_smem_alloc)
_register("smem_index", "view one stage of a multi-stage shared region", "smem")
_register("smem_load", "load a shared tile into registers", "smem")
_register("smem_store", "store a register tile to shared memory", "smem")
_register("smem_trans", "a transposed view of a shared tile (attrs order)", "smem")
_register("smem_reinterpret", "the same shared bytes as other tiles and stages (the result type says which)", "smem")
_register("barrier_alloc", "allocate and initialise mbarriers (attrs name, count)", "mbarrier")
_register("barrier_index", "one mbarrier of a multi-stage set", "mbarrier")
_register("barrier_expect", "arrive and expect attrs['bytes'] of TMA transactions", "mbarrier")
_register("barrier_arrive", "arrive attrs['count'] times; attrs['cluster']: on this barrier in every CTA of the cluster",
          "mbarrier")
_register("barrier_wait", "wait for the phase operand to complete", "mbarrier")
_register("tma_load", "TMA copy desc[coords] -> shared dst, completing on a barrier: (desc, dst, bar, *coords); "
          "attrs['multicast']: into dst and bar of every CTA of the cluster", "tma")
_register("tma_store", "TMA copy shared src -> desc[coords]: (desc, src, *coords)", "tma")
_register("tma_store_wait", "wait until at most attrs['pendings'] TMA stores are in flight", "tma")
_register("fence_async_shared", "order generic shared-memory writes before async-proxy reads (TMA, WGMMA)", "tma")
_register("thread_barrier", "block-wide barrier (bar.sync)", "thread_barrier")
_register("cluster_rank", "this CTA's rank in its thread-block cluster (i32 scalar)", "cluster")
_register("cluster_sync", "every thread of every CTA in the cluster meets here; mbarrier inits before it are visible "
          "cluster-wide after it", "cluster")
_register("named_barrier_sync", "PTX bar.sync: wait at hardware named barrier attrs['barrier_id'] (or the i32 operand) "
          "until attrs['num_threads'] threads have arrived or synced on it; a synchronization effect, never pure",
          "named_barrier", _verify_named_barrier)
_register("named_barrier_arrive", "PTX bar.arrive: count attrs['num_threads'] toward named barrier attrs['barrier_id'] "
          "(or the i32 operand) without waiting; a synchronization effect, never pure", "named_barrier",
          _verify_named_barrier)
_register("cp_async", "cp.async global -> shared: (ptr, offsets, dst, mask?)", "cp_async", same_layout=True)
_register("cp_async_commit", "close a cp.async group", "cp_async")
_register("cp_async_wait", "wait until at most attrs['num'] cp.async groups are pending", "cp_async")
_register("mma", "Ampere tensor-core dot (HMMA): (a, b, acc) register operands", "mma", _verify_dot, same_layout=True)
_register("mfma", "CDNA matrix-core dot (MFMA): (a, b, acc) register operands", "mfma", _verify_dot, same_layout=True)
_register("wgmma", "Hopper warpgroup dot: (a smem|tile, b smem, acc) -> acc; attrs is_async", "wgmma", _verify_dot,
          same_layout=True)
_register("wgmma_wait", "wait for async wgmma: (acc, *deps) -> acc; attrs pendings", "wgmma", same_layout=True)
_register("tmem_alloc", "allocate tensor memory for an accumulator", "tmem")
_register("tmem_load", "tensor memory -> registers", "tmem")
_register("tcgen05_mma", "Blackwell MMA: (a smem, b smem, d tmem, bar); attrs use_acc", "tcgen05", _verify_dot)
_register("for", "counted loop (lb, ub, step, *inits); body args (iv, *carried) -> results", "arith", _verify_for)
_register("if", "scalar branch (cond); then/else regions yield the results", "arith", _verify_if)
_register("warp_specialize", "one region per warp role; attrs roles=[{role, warps:(first,last), registers}]", "warp_specialize")
_register("yield", "terminates a for/if region, passing values out", terminator=True)


# ------------------------------------------------------------------------------ verifier


def verify_kernel(kernel: Kernel, *, require_layouts: bool = False) -> None:
    """Check op kinds, operand types, dominance and region rules. Raises IRVerificationError."""
    visible: set[int] = {p.value.id for p in kernel.params}
    _verify_region(kernel.body, visible, require_layouts, top=True)


def _verify_region(region: Region, visible: set[int], require_layouts: bool, top: bool = False) -> None:
    scope = set(visible) | {a.id for a in region.args}
    for i, op in enumerate(region.ops):
        opdef = OPS.get(op.kind)
        if opdef is None:
            raise IRVerificationError(f"unknown op kind {op.kind!r}", op.loc)
        for v in op.operands:
            if v.id not in scope:
                where = f" (defined at {v.owner.loc})" if isinstance(v.owner, Op) and v.owner.loc else ""
                raise IRVerificationError(
                    f"{op.kind} uses %{v.name or v.id}, which is not defined before it in an enclosing region{where}; "
                    "a value made inside a loop, branch or warp role cannot be used outside it", op.loc)
        if opdef.terminator and i != len(region.ops) - 1:
            raise IRVerificationError(f"{op.kind} must be the last op of its region", op.loc)
        if opdef.terminator and top:
            raise IRVerificationError(f"{op.kind} outside a loop or branch", op.loc)
        for v in op.results:
            t = v.type
            if isinstance(t, TileType):
                for d in t.shape:
                    if d <= 0 or d & (d - 1):
                        raise IRVerificationError(f"{op.kind}: tile shape {t.shape} must have power-of-two dimensions", op.loc)
                if require_layouts and t.layout is None:
                    raise IRVerificationError(f"{op.kind}: result has no register layout", op.loc)
                rank = layout_rank(t.layout) if t.layout is not None else None
                if rank is not None and rank != len(t.shape):
                    raise IRVerificationError(f"{op.kind}: layout {t.layout} is for rank {rank}, tile is {t.shape}", op.loc)
        if opdef.verify is not None:
            msg = opdef.verify(op)
            if msg:
                raise IRVerificationError(f"{op.kind}: {msg}", op.loc)
        for r in op.regions:
            _verify_region(r, scope, require_layouts)
        scope.update(v.id for v in op.results)


# ------------------------------------------------------------------------------ printer


class _Namer:
    """Readable, unique value names: the user's variable name, suffixed when taken."""

    def __init__(self):
        self.names: dict[int, str] = {}
        self.taken: set[str] = set()
        self.anon = 0

    def __call__(self, v: Value) -> str:
        n = self.names.get(v.id)
        if n is None:
            base = v.name
            if not base:
                base, self.anon = str(self.anon), self.anon + 1
            n, k = base, 0
            while n in self.taken:
                k += 1
                n = f"{base}_{k}"
            self.taken.add(n)
            self.names[v.id] = n
        return "%" + n


def _fmt_attr(v: Any) -> str:
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt_attr(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}={_fmt_attr(x)}" for k, x in v.items()) + "}"
    return str(v)


def _print_kernel(k: Kernel) -> str:
    name = _Namer()
    params = ", ".join(f"{name(p.value)}: {p.value.type}" for p in k.params)
    attrs = "".join(f" {a}={_fmt_attr(v)}" for a, v in k.attrs.items())
    lines = [f"kernel @{k.name}({params}) arch={k.arch} num_warps={k.num_warps}{attrs} {{"]
    _print_region(k.body, name, lines, 1)
    lines.append("}")
    return "\n".join(lines)


def _print_region(r: Region, name: _Namer, lines: list[str], depth: int) -> None:
    pad = "  " * depth
    for op in r.ops:
        res = ", ".join(name(v) for v in op.results)
        lhs = f"{res} = " if res else ""
        ops = ", ".join(name(v) for v in op.operands)
        attrs = ("{" + ", ".join(f"{a}={_fmt_attr(v)}" for a, v in op.attrs.items()) + "}") if op.attrs else ""
        types = " : " + ", ".join(str(v.type) for v in op.results) if op.results else ""
        loc = f"  // {op.loc}" if op.loc else ""
        head = f"{pad}{lhs}{op.kind}"
        if ops:
            head += " " + ops
        if attrs:
            head += " " + attrs
        if not op.regions:
            lines.append(f"{head}{types}{loc}")
            continue
        for i, reg in enumerate(op.regions):
            args = ", ".join(f"{name(a)}: {a.type}" for a in reg.args)
            label = _region_label(op, i)
            opener = f"{head}{types} {label}" if i == 0 else f"{pad}}} {label}"
            lines.append(f"{opener}({args}) {{{loc if i == 0 else ''}" if args else f"{opener}{{{loc if i == 0 else ''}")
            _print_region(reg, name, lines, depth + 1)
        lines.append(f"{pad}}}")


def _region_label(op: Op, i: int) -> str:
    if op.kind == "if":
        return "then " if i == 0 else "else "
    if op.kind == "warp_specialize":
        role = op.attrs["roles"][i]
        return f"role {role['role']} warps{list(role['warps'])} "
    return ""
