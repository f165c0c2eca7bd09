"""Value-level vocabulary shared by every layer: dtypes, layouts, memory spaces, typed regions.

Everything here is an immutable description (frozen dataclasses / enums) so it can be hashed into
cache keys, compared in the verifier and printed in diagnostics. Nothing here knows about tracing,
passes or Triton; the backend maps these descriptions to TTGIR attributes.
"""
from __future__ import annotations

import difflib
import enum
import linecache
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Union

from .dtypes import DType  # noqa: F401  (re-exported: the vocabulary's element types)

Dim = Union[int, str]  # a dimension: a concrete size, or a symbolic name resolved at launch ("M", "K")


# ------------------------------------------------------------------------------ diagnostics


@dataclass(frozen=True)
class Loc:
    """A source location in the user's kernel code."""

    file: str
    line: int
    func: str | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"

    def source_line(self) -> str:
        return linecache.getline(self.file, self.line).strip()


class GluonError(Exception):
    """A diagnostic about the user's kernel; its text names the file and line it is about."""

    def __init__(self, message: str, loc: Loc | None = None):
        self.message = message
        self.loc = loc
        super().__init__(self._format())

    def _format(self) -> str:
        if self.loc is None:
            return self.message
        where = f"{self.loc}" + (f" (in {self.loc.func})" if self.loc.func else "")
        src = self.loc.source_line()
        return f"{where}: {self.message}" + (f"\n    {src}" if src else "")


class SharedMemoryError(GluonError):
    """A kernel past the block's shared memory: `needed` and `limit` bytes and `regions` ((name, bytes) each, in
    allocation order; names may repeat), so a kernel's host side can say what would fit in its config's own terms."""

    def __init__(self, message: str, loc: Loc | None, needed: int, limit: int, regions: tuple[tuple[str, int], ...]):
        self.needed, self.limit, self.regions = needed, limit, tuple(regions)
        super().__init__(message, loc)


def _caller_loc() -> Loc | None:
    """The first frame outside this file, enum.py and the DSL's gluon/language/ (where warp_role lives):
    the user's line. (gluon.language.tracing._user_loc is the DSL's fuller version of this walk.)"""
    language = os.path.join(os.path.dirname(__file__), "language") + os.sep
    f = sys._getframe(1)
    while f is not None and (f.f_code.co_filename in (__file__, enum.__file__)
                             or f.f_code.co_filename.startswith(language)):
        f = f.f_back
    return Loc(f.f_code.co_filename, f.f_lineno, f.f_code.co_name) if f is not None else None


def enum_member(cls: type[enum.Enum], value, what: str | None = None):
    """`value` as a member of `cls`: the member itself, its value (128, "producer") or its name in any case
    ("B128", "PRODUCER"). Anything else is a GluonError at the user's line listing the allowed values
    (the enum's own ValueError names neither the argument nor the choices)."""
    if isinstance(value, cls):
        return value
    for m in cls:
        if not isinstance(value, bool) and (m.value == value or (isinstance(value, str) and value.upper() == m.name)):
            return m
    allowed = [m.value for m in cls]
    near = difflib.get_close_matches(value.lower(), [str(a) for a in allowed], n=1, cutoff=0.6) \
        if isinstance(value, str) else []
    hint = f"; did you mean {near[0]!r}?" if near else ""
    given = f"{what}={value!r}" if what else repr(value)
    raise GluonError(f"[GL503] {given} is not a {cls.__name__}; allowed: "
                     + ", ".join(repr(a) for a in allowed) + f" (or {cls.__name__}.{'/'.join(m.name for m in cls)})"
                     + hint, _caller_loc())


class _CheckedEnum(enum.Enum):
    """An enum whose constructor takes a name too, and refuses a bad value with a GluonError listing
    the allowed ones (`SwizzleMode(96)`, `WarpRole("produser")`)."""

    @classmethod
    def _missing_(cls, value):
        return enum_member(cls, value)


class SwizzleMode(_CheckedEnum):
    """Shared-memory swizzle width of the NVMMA layouts (TMA and WGMMA read these)."""

    NONE = 0
    B32 = 32
    B64 = 64
    B128 = 128

    @property
    def bytes(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"SwizzleMode.{self.name}"


class MemorySpace(enum.Enum):
    GLOBAL = "global"
    SHARED = "shared"
    REGISTER = "register"
    TENSOR_MEMORY = "tensor_memory"


class SourceKind(enum.Enum):
    """Where a kernel parameter's value comes from at a launch."""

    ARG = "arg"                  # the caller's runtime argument `index`
    DIM = "dim"                  # dimension `axis` of the caller's argument `index` (a symbolic size)
    KEYWORD = "kw"               # a size the caller passes by keyword `name`


@dataclass(frozen=True)
class ParamSource:
    """Where a launch takes a kernel parameter's value from: recorded by the trace (which binds the
    parameters), carried by the IR and the kernel ABI, read by the launch."""

    kind: SourceKind
    index: int | None = None
    axis: int | None = None
    name: str | None = None

    @staticmethod
    def arg(index: int) -> "ParamSource":
        return ParamSource(SourceKind.ARG, index=index)

    @staticmethod
    def dim(index: int, axis: int) -> "ParamSource":
        return ParamSource(SourceKind.DIM, index=index, axis=axis)

    @staticmethod
    def keyword(name: str) -> "ParamSource":
        return ParamSource(SourceKind.KEYWORD, name=name)

    def __str__(self) -> str:
        if self.kind is SourceKind.ARG:
            return f"argument {self.index}"
        if self.kind is SourceKind.DIM:
            return f"argument {self.index}.shape[{self.axis}]"
        return f"keyword {self.name}"


class WarpRole(_CheckedEnum):
    """What a group of warps does in a warp-specialized kernel."""

    PRODUCER = "producer"   # moves data (TMA / cp.async) into shared memory
    CONSUMER = "consumer"   # computes on it (WGMMA / MMA) and owns the epilogue
    DEFAULT = "default"     # any other work


# ----------------------------------------------------------------------------------------- layouts


class Layout:
    """Base of all layouts. Use the constructors below; each returns a concrete frozen dataclass.

    Memory layouts (where bytes sit): `row_major`, `col_major`, `swizzled`, `shared`.
    Register layouts (which thread holds which element): `blocked`, `slice`, `mma`, `wgmma`,
    `dot_operand`, `mfma`.
    """

    space: MemorySpace = MemorySpace.REGISTER

    @staticmethod
    def row_major(*shape: Dim) -> "StridedLayout":
        return StridedLayout(tuple(shape), order=tuple(range(len(shape) - 1, -1, -1)))

    @staticmethod
    def col_major(*shape: Dim) -> "StridedLayout":
        return StridedLayout(tuple(shape), order=tuple(range(len(shape))))

    @staticmethod
    def swizzled(rows: int, cols: int, swizzle: SwizzleMode = SwizzleMode.B128,
                 transposed: bool = False) -> "NVMMASharedLayout":
        return NVMMASharedLayout((rows, cols), enum_member(SwizzleMode, swizzle, "swizzle"), transposed)

    @staticmethod
    def shared(vec: int = 1, per_phase: int = 1, max_phase: int = 1,
               order: tuple[int, ...] = (1, 0)) -> "SwizzledSharedLayout":
        return SwizzledSharedLayout(vec, per_phase, max_phase, tuple(order))

    @staticmethod
    def blocked(size_per_thread, threads_per_warp, warps_per_cta, order=None) -> "BlockedLayout":
        rank = len(size_per_thread)
        order = tuple(order) if order is not None else tuple(range(rank - 1, -1, -1))
        return BlockedLayout(tuple(size_per_thread), tuple(threads_per_warp), tuple(warps_per_cta), order)

    @staticmethod
    def rows(rows: int, cols: int, vec: int, num_warps: int) -> "BlockedLayout":
        """The blocked layout for row-wise work on a [rows, cols] tile (norms, softmax, reductions along
        a row): each thread holds `vec` contiguous elements of a row (16 bytes: 8 fp16, 4 fp32), a warp's
        threads run along the row, and warps go down the rows before along them, so a row that fits in
        one warp reduces with shuffles and no shared memory. All four are powers of two; a tile smaller
        than the threads cover is refused (the rest of the threads would hold copies)."""
        for name, v in (("rows", rows), ("cols", cols), ("vec", vec), ("num_warps", num_warps)):
            if not isinstance(v, int) or v <= 0 or v & (v - 1):
                raise GluonError(f"Layout.rows: {name}={v!r} must be a power of two", _caller_loc())
        tpw_n = min(32, max(1, cols // vec))
        tpw_m = 32 // tpw_n
        wpc_m = max(1, min(num_warps, rows // tpw_m))
        wpc_n = num_warps // wpc_m
        if tpw_m * wpc_m > rows or vec * tpw_n * wpc_n > cols:
            raise GluonError(f"Layout.rows: a [{rows}, {cols}] tile is smaller than {num_warps} warps of {vec}-element "
                             f"vectors cover ([{tpw_m * wpc_m}, {vec * tpw_n * wpc_n}]): use more rows, a wider "
                             "tile or fewer warps", _caller_loc())
        return Layout.blocked([1, vec], [tpw_m, tpw_n], [wpc_m, wpc_n])

    @staticmethod
    def slice(dim: int, parent: "Layout") -> "SliceLayout":
        return SliceLayout(dim, parent)

    @staticmethod
    def wgmma(warps_per_cta=(4, 1), instr_n: int = 128, operand_dtype: "DType | None" = None) -> "MMALayout":
        """Hopper WGMMA accumulator layout (nvidia_mma v3), instruction 16 x instr_n x K, where K is
        32 bytes of the operand type (16 for f16/bf16, 32 for fp8, 8 for tf32)."""
        k = 256 // operand_dtype.bits if operand_dtype is not None else 16
        return MMALayout(3, tuple(warps_per_cta), (16, instr_n, k))

    @staticmethod
    def mma(warps_per_cta=(4, 1)) -> "MMALayout":
        """Ampere HMMA accumulator layout (nvidia_mma v2), instruction 16x8."""
        return MMALayout(2, tuple(warps_per_cta), (16, 8))

    @staticmethod
    def dot_operand(op_idx: int, parent: "Layout", k_width: int = 2) -> "DotOperandLayout":
        return DotOperandLayout(op_idx, parent, k_width)

    @staticmethod
    def mfma(warps_per_cta=(2, 2), instr_shape=(32, 32), transposed: bool = True,
             version: int = 3) -> "MFMALayout":
        return MFMALayout(version, tuple(warps_per_cta), tuple(instr_shape), transposed)


@dataclass(frozen=True)
class StridedLayout(Layout):
    """Dense memory layout; `order` lists dims fastest-varying first (row-major 2-D: (1, 0))."""

    shape: tuple[Dim, ...]
    order: tuple[int, ...]
    space = MemorySpace.GLOBAL

    @property
    def is_row_major(self) -> bool:
        return self.order == tuple(range(len(self.shape) - 1, -1, -1))

    def __str__(self) -> str:
        kind = "row_major" if self.is_row_major else "col_major" if self.order == tuple(range(len(self.shape))) else f"order{list(self.order)}"
        return f"{kind}({', '.join(map(str, self.shape))})"


@dataclass(frozen=True)
class NVMMASharedLayout(Layout):
    """Swizzled shared memory readable by TMA and WGMMA (#ttg.nvmma_shared).

    `shape` is the tile the layout was declared for; `transposed` means the tile is stored K-major
    the other way round (a column-major operand)."""

    shape: tuple[int, ...]
    swizzle: SwizzleMode = SwizzleMode.B128
    transposed: bool = False
    space = MemorySpace.SHARED

    def __str__(self) -> str:
        t = ", transposed" if self.transposed else ""
        return f"swizzled({'x'.join(map(str, self.shape))}, {self.swizzle.name}{t})"


@dataclass(frozen=True)
class SwizzledSharedLayout(Layout):
    """Generic XOR-swizzled shared layout (#ttg.swizzled_shared): ldmatrix / cp.async / scratch."""

    vec: int = 1
    per_phase: int = 1
    max_phase: int = 1
    order: tuple[int, ...] = (1, 0)
    space = MemorySpace.SHARED

    def __str__(self) -> str:
        return f"shared(vec={self.vec}, per_phase={self.per_phase}, max_phase={self.max_phase}, order={list(self.order)})"


@dataclass(frozen=True)
class BlockedLayout(Layout):
    """Each thread owns `size_per_thread` contiguous elements; threads then warps tile the rest."""

    size_per_thread: tuple[int, ...]
    threads_per_warp: tuple[int, ...]
    warps_per_cta: tuple[int, ...]
    order: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.size_per_thread)

    def __str__(self) -> str:
        return (f"blocked(spt={list(self.size_per_thread)}, tpw={list(self.threads_per_warp)}, "
                f"wpc={list(self.warps_per_cta)}, order={list(self.order)})")


@dataclass(frozen=True)
class SliceLayout(Layout):
    """The parent layout with dimension `dim` removed (what a reduction along `dim` produces)."""

    dim: int
    parent: Layout

    def __str__(self) -> str:
        return f"slice(dim={self.dim}, {self.parent})"


@dataclass(frozen=True)
class MMALayout(Layout):
    """NVIDIA tensor-core accumulator layout: version 2 = Ampere HMMA, 3 = Hopper WGMMA."""

    version: int
    warps_per_cta: tuple[int, ...]
    instr_shape: tuple[int, ...]

    def __str__(self) -> str:
        kind = "wgmma" if self.version == 3 else "mma"
        return f"{kind}(wpc={list(self.warps_per_cta)}, instr={list(self.instr_shape)})"


@dataclass(frozen=True)
class DotOperandLayout(Layout):
    """Register layout of an MMA/MFMA operand (A: op_idx 0, B: op_idx 1) for a given accumulator."""

    op_idx: int
    parent: Layout
    k_width: int = 2

    def __str__(self) -> str:
        return f"dot_operand({self.op_idx}, {self.parent}, k_width={self.k_width})"


@dataclass(frozen=True)
class MFMALayout(Layout):
    """AMD CDNA matrix-core accumulator layout (#ttg.amd_mfma)."""

    version: int
    warps_per_cta: tuple[int, ...]
    instr_shape: tuple[int, ...]
    transposed: bool = True

    def __str__(self) -> str:
        return f"mfma(v{self.version}, wpc={list(self.warps_per_cta)}, instr={list(self.instr_shape)})"


@dataclass(frozen=True)
class TensorMemoryLayout(Layout):
    """Blackwell tensor memory (TMEM) layout of an accumulator block."""

    block: tuple[int, int] = (128, 128)
    col_stride: int = 1
    space = MemorySpace.TENSOR_MEMORY

    def __str__(self) -> str:
        return f"tmem(block={list(self.block)})"


@dataclass(frozen=True)
class LinearLayout(Layout):
    """A register layout as Triton's linear layout (`#ttg.linear`), for one tile shape: for each bit of the
    register, lane and warp index, the tile coordinates it selects (an index's element is the XOR of its set
    bits' coordinates). What the shape ops (`gl.reshape`, `gl.join`, ...) leave their results in: the layout
    Triton's inference gives for their operand's (linear_infer, below)."""

    register: tuple[tuple[int, ...], ...]
    lane: tuple[tuple[int, ...], ...]
    warp: tuple[tuple[int, ...], ...]
    rank: int

    def __str__(self) -> str:
        return f"linear(register={[list(b) for b in self.register]}, lane={[list(b) for b in self.lane]}, " \
               f"warp={[list(b) for b in self.warp]})"


REGISTER_LAYOUTS = (BlockedLayout, SliceLayout, MMALayout, DotOperandLayout, MFMALayout, LinearLayout)
SHARED_LAYOUTS = (NVMMASharedLayout, SwizzledSharedLayout)


def layout_rank(layout: Layout) -> int | None:
    """Number of tensor dimensions a register layout describes (None when not fixed by the layout)."""
    if isinstance(layout, (BlockedLayout, LinearLayout)):
        return layout.rank
    if isinstance(layout, SliceLayout):
        parent = layout_rank(layout.parent)
        return None if parent is None else parent - 1
    if isinstance(layout, (MMALayout, MFMALayout, DotOperandLayout)):
        return 2
    return None


def layout_warps(layout: Layout) -> int | None:
    """How many warps a register layout spreads over (None when it does not say)."""
    if isinstance(layout, (BlockedLayout, MMALayout, MFMALayout)):
        return math.prod(layout.warps_per_cta)
    if isinstance(layout, (SliceLayout, DotOperandLayout)):
        return layout_warps(layout.parent)
    if isinstance(layout, LinearLayout):
        return 2 ** len(layout.warp)
    return None


# ------------------------------------------------------------------------------ linear layouts
# Register layouts as Triton's linear layouts, and what Triton's layout inference makes of them through
# reshape, trans, join and split (the layout pass gives shape-op results these, the lowering spells them).
#
# A linear layout maps the bits of (register, lane, warp) indices to tensor coordinates: each in-dimension has
# one basis per bit, a coordinate vector (one int per tensor dimension); an index's coordinates are the XOR of
# the bases of its set bits. This is how Triton 3.6 compares layouts (`#ttg.linear<{register = ..., lane = ...,
# warp = ..., block = []}>`), and how it infers the result layouts of the shape ops: a reshape keeps every
# element in its register (the flat row-major index of each basis, re-split over the new shape), a trans
# permutes the coordinates, a join adds its new minor dimension as register bit 0, a split removes it again.
# `to_linear(layout, shape)` spells blocked layouts (and slices of them) the way Triton's toLinearLayout does,
# bit for bit (tests/test_shapes.py checks it against Triton's own conversion), and a LinearLayout as itself;
# other layouts give None.


LinearBases = dict[str, list[list[int]]]
LINEAR_IN_DIMS = ("register", "lane", "warp")


def _linear_log2(n: int) -> int:
    return n.bit_length() - 1


def _linear_blocked(lay: BlockedLayout, shape: tuple[int, ...]) -> LinearBases:
    rank = len(shape)
    order = tuple(lay.order) if lay.order else tuple(range(rank - 1, -1, -1))

    def unit(dim: int, v: int) -> list[int]:
        b = [0] * rank
        b[dim] = v
        return b

    out: LinearBases = {}
    size = [1] * rank                       # the CTA tile's extent so far, per dimension
    for name, per in zip(LINEAR_IN_DIMS, (lay.size_per_thread, lay.threads_per_warp, lay.warps_per_cta)):
        out[name] = []
        for d in order:
            for _ in range(_linear_log2(per[d])):
                out[name].append(unit(d, size[d]))
                size[d] *= 2
    # Larger than the shape: the bases past it broadcast (0), as ensureLayoutNotLargerThan does.
    for name in LINEAR_IN_DIMS:
        out[name] = [[c if c < shape[d] else 0 for d, c in enumerate(b)] for b in out[name]]
    # Smaller than the shape: more registers, minor dimension first (ensureLayoutNotSmallerThan).
    for d in order:
        while size[d] < shape[d]:
            out["register"].append(unit(d, size[d]))
            size[d] *= 2
    return out


def to_linear(layout: Layout | None, shape: tuple[int, ...]) -> LinearBases | None:
    """`layout` over `shape` as linear-layout bases (Triton's), or None when not a blocked layout or a slice
    of one."""
    if isinstance(layout, BlockedLayout) and len(layout.size_per_thread) == len(shape):
        return _linear_blocked(layout, tuple(shape))
    if isinstance(layout, LinearLayout) and layout.rank == len(shape):
        return {k: [list(b) for b in getattr(layout, k)] for k in LINEAR_IN_DIMS}
    if isinstance(layout, SliceLayout):
        pshape = list(shape)
        pshape.insert(layout.dim, 1)
        parent = to_linear(layout.parent, tuple(pshape))
        if parent is None:
            return None
        out = {k: [b[:layout.dim] + b[layout.dim + 1:] for b in v] for k, v in parent.items()}
        out["register"] = [b for b in out["register"] if any(b)]   # registers holding the same element go
        return out
    return None


def _linear_flat(b: list[int], shape) -> int:
    f = 0
    for c, n in zip(b, shape):
        f = f * n + c
    return f


def _linear_unflat(f: int, shape) -> list[int]:
    out = []
    for n in reversed(shape):
        out.append(f % n)
        f //= n
    return out[::-1]


def linear_reshape(bases: LinearBases, src_shape, dst_shape) -> LinearBases:
    """The same elements in the same registers, lanes and warps, indexed by `dst_shape` (row-major)."""
    return {k: [_linear_unflat(_linear_flat(b, src_shape), dst_shape) for b in v] for k, v in bases.items()}


def linear_trans(bases: LinearBases, order) -> LinearBases:
    """Result dimension i is source dimension order[i]."""
    return {k: [[b[o] for o in order] for b in v] for k, v in bases.items()}


def linear_join(bases: LinearBases, rank: int) -> LinearBases:
    """A new minor dimension of size 2 after the source's `rank` ones, held in register bit 0."""
    out = {k: [b + [0] for b in v] for k, v in bases.items()}
    out["register"] = [[0] * rank + [1]] + out["register"]
    return out


def linear_splittable(bases: LinearBases) -> LinearBases:
    """`bases` (last dimension of size 2) with that dimension's basis moved to register bit 0, where
    tt.split needs it: the layout to convert to before a split (the same layout when it is there already)."""
    out = {k: [list(b) for b in v] for k, v in bases.items()}
    where = [(k, i) for k in LINEAR_IN_DIMS for i, b in enumerate(out[k]) if b[-1]]
    k, i = where[0]
    b = out[k][i]
    # the last dimension's basis may also carry other coordinates only in odd layouts; keep it a unit vector
    unit = [0] * (len(b) - 1) + [1]
    if k == "register":
        del out["register"][i]
    elif out["register"]:
        out[k][i] = out["register"].pop(0)
    else:
        out[k][i] = [0] * len(b)
    out["register"].insert(0, unit)
    return out


def linear_split(bases: LinearBases) -> LinearBases:
    """The halves' layout: register bit 0 (the last dimension, see `linear_splittable`) removed."""
    out = {k: [b[:-1] for b in v] for k, v in bases.items()}
    out["register"] = out["register"][1:]
    return out


def linear_layout(bases: LinearBases, rank: int) -> LinearLayout:
    return LinearLayout(*(tuple(tuple(b) for b in bases[k]) for k in LINEAR_IN_DIMS), rank)


def linear_spell(bases: LinearBases) -> str:
    arrays = {k: ", ".join("[" + ", ".join(map(str, b)) + "]" for b in bases[k]) for k in LINEAR_IN_DIMS}
    parts = ", ".join(f"{k} = [{arrays[k]}]" for k in LINEAR_IN_DIMS)
    return f"#ttg.linear<{{{parts}, block = []}}>"


def linear_infer(kind: str, attrs: dict, in_shape, out_shape, layout: Layout | None) -> LinearBases | None:
    """The linear layout Triton infers for the result of shape op `kind` whose (first) operand is in `layout`
    (None when that layout has no linear form here); for split, after the move `linear_splittable` makes."""
    bases = to_linear(layout, tuple(in_shape)) if layout is not None else None
    if bases is None:
        return None
    if kind == "reshape":
        return linear_reshape(bases, in_shape, out_shape)
    if kind == "trans":
        return linear_trans(bases, attrs["order"])
    if kind == "join":
        return linear_join(bases, len(in_shape))
    if kind == "split":
        return linear_split(linear_splittable(bases))
    return None


# ------------------------------------------------------------------------------ typed descriptions


@dataclass(frozen=True)
class SharedMemoryDescriptor:
    """A typed shared-memory region: `stages` copies of a `shape` tile of `dtype` in `layout`.
    Also the IR's type of shared-memory values (`ir.SmemType`); `name` is a label, not part of the type."""

    dtype: DType
    shape: tuple[int, ...]
    layout: Layout
    stages: int = 1
    name: str = field(default="", compare=False)

    def stage(self) -> "SharedMemoryDescriptor":
        """The type of one stage of this region."""
        return SharedMemoryDescriptor(self.dtype, self.shape, self.layout, 1, self.name)

    @property
    def stage_bytes(self) -> int:
        return math.prod(self.shape) * self.dtype.bits // 8

    @property
    def bytes(self) -> int:
        return self.stage_bytes * self.stages

    def __str__(self) -> str:
        st = f"{self.stages}x" if self.stages > 1 else ""
        return f"smem<{st}{'x'.join(map(str, self.shape))}x{self.dtype.name}, {self.layout}>"


@dataclass(frozen=True)
class TensorRef:
    """A tensor a kernel receives: its name, element type, shape (ints or symbolic names) and layout.

    `shape` defaults to the shape of a strided `layout` (`Layout.row_major(128, 64)`). `aligned`: its base
    address is 16-byte aligned (the binary may assume so: `tt.divisibility = 16`); a launch traces a tensor
    whose base is not with `aligned=False`."""

    name: str
    dtype: DType
    layout: Layout | None = None
    space: MemorySpace = MemorySpace.GLOBAL
    shape: tuple[Dim, ...] | None = field(default=None)
    aligned: bool = True

    def __post_init__(self):
        if self.shape is None and isinstance(self.layout, StridedLayout):
            object.__setattr__(self, "shape", tuple(self.layout.shape))
        if self.shape is None:
            raise ValueError(f"TensorRef {self.name!r}: give a shape or a strided layout (Layout.row_major(...))")
        object.__setattr__(self, "shape", tuple(self.shape))
        if self.layout is None:
            object.__setattr__(self, "layout", Layout.row_major(*self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"{self.name}: {self.space.value} {'x'.join(map(str, self.shape))}x{self.dtype.name} {self.layout}"
