"""Gluon IR: the contract between the DSL, the passes and the backends.

Shape of the IR:  Module -> Kernel (params, arch, warps, attrs) -> Region -> Op -> (Regions ...)

* A `Value` is defined once: by an op result or as a region argument (loop induction variable,
  loop-carried value). Values have types (`ScalarType`, `TileType`, `SmemType`, ...).
* A `Region` is a single block: arguments plus an ordered list of ops. Ops inside a region may use
  values defined earlier in the same region or in any enclosing region (no isolation: the backend
  computes warp-partition captures itself).
* Op kinds are strings registered in `OPS`, each with a doc line, its arch op family, and a verifier.

This module is the IR's one door: the types and Value/Op/Region/Kernel (gluon/ir_types.py), the per-op
verifiers (gluon/ir_verify.py) and the printer (gluon/ir_print.py) live beside it and are reached as
gluon.ir.X. Here: the op registry, the Builder, the Module and the kernel verifier. The four import
nothing else from the project except `gluon.types`, so every layer may read them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .ir_print import print_kernel
from .ir_types import (F32, I1, I32, I64, BarrierType, DescType, Kernel, Op, Param, PointerType, Region, ScalarType,
                       SmemType, TileType, TmemType, Type, Value, element_dtype, same_shape_kind)
from .ir_verify import (ATOMIC_RMW_KINDS, ATOMIC_SCOPES, ATOMIC_SEMS, NAMED_BARRIER_IDS, same_types,
                        verify_atomic_cas, verify_atomic_rmw, verify_dot, verify_for, verify_histogram, verify_if,
                        verify_inline_asm, verify_named_barrier, verify_reduce_fn, verify_scan, verify_shape_op,
                        verify_smem_alloc, verify_split_cols)
from .types import (DType, GluonError, Layout, Loc, ParamSource, SHARED_LAYOUTS, SharedMemoryDescriptor, SwizzleMode,
                    layout_rank)

# Every public name gluon.ir had before the types, verifiers and printer moved out (importers keep using ir.X).
__all__ = [
    "IRVerificationError", "GluonError", "Loc",
    "ScalarType", "PointerType", "TileType", "SmemType", "BarrierType", "DescType", "TmemType", "Type",
    "I1", "I32", "I64", "F32", "element_dtype", "same_shape_kind",
    "Value", "Op", "Region", "Param", "Kernel", "Module", "Builder",
    "OpDef", "OPS", "kinds", "verify_kernel",
    "NAMED_BARRIER_IDS", "ATOMIC_RMW_KINDS", "ATOMIC_SEMS", "ATOMIC_SCOPES",
    "DType", "Layout", "ParamSource", "SHARED_LAYOUTS", "SharedMemoryDescriptor", "SwizzleMode", "layout_rank",
]


# ------------------------------------------------------------------------------ diagnostics


# Loc and GluonError (imported above) live in gluon.types, so the vocabulary (a bad SwizzleMode) can raise
# them too; every layer keeps reaching them as ir.Loc / ir.GluonError.


class IRVerificationError(GluonError):
    pass


# ------------------------------------------------------------------------------ the module


@dataclass(eq=False)
class Module:
    kernels: list[Kernel] = field(default_factory=list)

    @property
    def kernel(self) -> Kernel:
        if len(self.kernels) != 1:
            raise ValueError(f"module has {len(self.kernels)} kernels")
        return self.kernels[0]

    def pretty(self) -> str:
        return "\n\n".join(print_kernel(k) for k in self.kernels)

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


_register("program_id", "the program (block) index along attrs['axis']", "program_id", pure=True)
_register("num_programs", "the grid size along attrs['axis']", "program_id", pure=True)
_register("constant", "attrs['value'] as a scalar, or splatted over a tile", pure=True)
_register("binary", "elementwise attrs['op'] (add sub mul div floordiv rem and or xor shl shr min max) on two same-typed values",
          verify=same_types, pure=True, same_layout=True)
_register("cmp", "elementwise comparison attrs['pred'] (lt le gt ge eq ne) -> i1",
          verify=same_types, pure=True, same_layout=True)
_register("unary", "elementwise attrs['op'] (neg not exp exp2 log log2 sqrt rsqrt abs sin cos)",
          pure=True, same_layout=True)
_register("cast", "convert element type (result type says to what)", pure=True, same_layout=True)
_register("select", "elementwise cond ? a : b", pure=True, same_layout=True)
_register("fma", "elementwise a * b + c rounded once (floats; three same-typed values)", verify=same_types, pure=True,
          same_layout=True)
_register("splat", "broadcast a scalar over a tile")
_register("arange", "tile [attrs['start'], attrs['end']) of i32")
_register("expand_dims", "insert a size-1 dimension at attrs['axis']")
_register("broadcast", "broadcast size-1 dimensions to the result shape", same_layout=True)
_register("convert_layout", "move a tile to another register layout", "convert_layout")
_register("split_cols", "a WGMMA accumulator tile's left and right column halves (two results; the halves are "
          "subsets of each thread's registers, nothing moves)", verify=verify_split_cols)
# Shape ops (gluon/language/shapes.py). Their results are not in their operands' layout: the lowering
# (backend/lowering/shapes.py) emits each in the layout Triton's inference gives and converts to the IR's.
_register("reshape", "the same elements in another shape (row-major order; attrs can_reorder)", pure=True,
          verify=verify_shape_op)
_register("trans", "permute a tile's dimensions: result dim i is operand dim attrs['order'][i]", pure=True,
          verify=verify_shape_op)
_register("join", "two same-typed tiles as one with a new minor dimension of size 2", pure=True,
          verify=verify_shape_op)
_register("split", "a tile whose last dimension is 2 as its two halves (two results)", pure=True,
          verify=verify_shape_op)
_register("gather", "(src, index): src's elements at index along attrs['axis'] (tt.gather)", pure=True,
          verify=verify_shape_op)
_register("reduce", "reduce a tile along attrs['axis'] with attrs['op'] (sum max min)", "reduce")
# Reductions and scans with a combine region (tt.reduce / tt.scan, Triton's region ops) and tt.histogram
# (gluon.language.reductions). The region takes (lhs..., rhs...) scalars, one of each per input, and ends
# with a yield of one combined scalar per input, of its input's dtype.
_register("reduce_fn", "tt.reduce of one or more same-shaped tiles along attrs['axis'] with a combine region "
          "(lhs..., rhs...) -> yield; one result per input", "reduce", verify_reduce_fn)
_register("scan", "tt.scan: inclusive scan of one or more same-shaped tiles along attrs['axis'] (attrs['reverse']) "
          "with a combine region as reduce_fn's; results shaped and laid out as the inputs", "reduce", verify_scan,
          same_layout=True)
_register("histogram", "tt.histogram: i32 counts of a 1-D int tile's values in [0, attrs['num_bins']) (optional i1 "
          "mask operand)", "reduce", verify_histogram)
_register("load", "masked global load: ptr + offsets (mask, other optional; attrs has_mask/has_other)", "load",
          same_layout=True)
_register("store", "masked global store: ptr + offsets <- value (mask optional)", "store", same_layout=True)
# Inline assembly over elements (tt.elementwise_inline_asm): attrs asm, constraints, pack. Two kinds, as
# purity is a trait of a kind here: "inline_asm_pure" may be dropped or recomputed, "inline_asm" may not.
_register("inline_asm_pure", "the target's asm over elements, no side effect (attrs asm, constraints, pack)",
          "inline_asm", verify_inline_asm, pure=True, same_layout=True)
_register("inline_asm", "the target's asm over elements, with side effects (attrs asm, constraints, pack)",
          "inline_asm", verify_inline_asm, same_layout=True)
_register("atomic_rmw", "atomic read-modify-write attrs['op'] at ptr + offsets with value (mask optional; attrs sem, "
          "scope, has_mask) -> the old values", "atomic", verify_atomic_rmw, same_layout=True)
_register("atomic_cas", "atomic compare-and-swap at ptr + offsets: (ptr, offsets, cmp, value), attrs sem, scope -> "
          "the old values", "atomic", verify_atomic_cas, same_layout=True)
_register("smem_alloc", "allocate a shared region (attrs name); optional initial tile operand", "smem", verify_smem_alloc)
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
_register("griddep_wait", "wait until the kernels before this one on the stream have finished and their writes are "
          "visible (griddepcontrol.wait); the kernel is then launched as a programmatic dependent", "griddep")
_register("griddep_launch_dependents", "let the next kernel on the stream, a programmatic dependent, launch "
          "(griddepcontrol.launch_dependents)", "griddep")
_register("thread_barrier", "block-wide barrier (bar.sync)", "thread_barrier")
_register("cluster_rank", "this CTA's rank in its thread-block cluster (i32 scalar)", "cluster")
_register("cluster_sync", "every thread of every CTA in the cluster meets here; mbarrier inits before it are visible "
          "cluster-wide after it, and with attrs['memory'] (the default) every memory write before it", "cluster")
_register("named_barrier_sync", "PTX bar.sync: wait at hardware named barrier attrs['barrier_id'] (or the i32 operand) "
          "until attrs['num_threads'] threads have arrived or synced on it; a synchronization effect, never pure",
          "named_barrier", verify_named_barrier)
_register("named_barrier_arrive", "PTX bar.arrive: count attrs['num_threads'] toward named barrier attrs['barrier_id'] "
          "(or the i32 operand) without waiting; a synchronization effect, never pure", "named_barrier",
          verify_named_barrier)
_register("cp_async", "cp.async global -> shared: (ptr, offsets, dst, mask?)", "cp_async", same_layout=True)
_register("cp_async_commit", "close a cp.async group", "cp_async")
_register("cp_async_wait", "wait until at most attrs['num'] cp.async groups are pending", "cp_async")
_register("cp_async_arrive", "an arrival on the mbarrier operand once this thread's cp.async copies so far have "
          "landed (cp.async.mbarrier.arrive: the phase's pending count raised at the op, lowered then)", "mbarrier")
_register("mma", "Ampere tensor-core dot (HMMA): (a, b, acc) register operands", "mma", verify_dot, same_layout=True)
_register("mfma", "CDNA matrix-core dot (MFMA): (a, b, acc) register operands", "mfma", verify_dot, same_layout=True)
_register("wgmma", "Hopper warpgroup dot: (a smem|tile, b smem, acc) -> acc; attrs is_async", "wgmma", verify_dot,
          same_layout=True)
_register("wgmma_wait", "wait for async wgmma: (acc, *deps) -> acc; attrs pendings", "wgmma", same_layout=True)
_register("tmem_alloc", "allocate tensor memory for an accumulator", "tmem")
_register("tmem_load", "tensor memory -> registers", "tmem")
_register("tcgen05_mma", "Blackwell MMA: (a smem, b smem, d tmem, bar); attrs use_acc", "tcgen05", verify_dot)
_register("for", "counted loop (lb, ub, step, *inits); body args (iv, *carried) -> results", "arith", verify_for)
_register("if", "scalar branch (cond); then/else regions yield the results", "arith", verify_if)
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
