"""The per-op verifiers the registry in gluon.ir attaches to op kinds (OpDef.verify): each takes an op and
returns an error message or None. gluon.ir.verify_kernel calls them after its own checks (dominance, region
rules, tile shapes), and prefixes the message with the op kind.

Split out of gluon.ir so that ir.py stays the registry; they read only gluon.ir_types, so the registry can
import them without a cycle. Also the op vocabularies they check (atomics' kinds, semantics and
scopes; the named barrier ids left to kernels), re-exported as gluon.ir.X.
"""
from __future__ import annotations

from typing import Callable

from .ir_types import I1, I32, Op, PointerType, ScalarType, TileType, Type, element_dtype
from .types import DType, SHARED_LAYOUTS


def same_types(op: Op) -> str | None:
    ts = {v.type for v in op.operands}
    if len(ts) != 1:
        return "operands must have the same type, got " + ", ".join(str(v.type) for v in op.operands)
    return None


def _shape_of(t: Type) -> tuple[int, ...]:
    return t.shape if isinstance(t, TileType) else ()


def verify_dot(op: Op) -> str | None:
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


def verify_for(op: Op) -> str | None:
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


def verify_if(op: Op) -> str | None:
    if op.operands[0].type != I1:
        return f"condition must be a scalar i1, got {op.operands[0].type}"
    for r in op.regions:
        if not r.ops or r.ops[-1].kind != "yield":
            return "each branch must end with yield"
        if [v.type for v in r.ops[-1].operands] != [v.type for v in op.results]:
            return "branch yields do not match the op's result types"
    return None


def verify_split_cols(op: Op) -> str | None:
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


def verify_named_barrier(op: Op) -> str | None:
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


def verify_atomic_rmw(op: Op) -> str | None:
    if op.attrs.get("op") not in ATOMIC_RMW_KINDS:
        return f"attrs['op'] must be one of {', '.join(ATOMIC_RMW_KINDS)}, got {op.attrs.get('op')!r}"
    return _verify_atomic(op, 1)


def verify_atomic_cas(op: Op) -> str | None:
    if op.attrs.get("has_mask"):
        return "has no mask (tt.atomic_cas takes none)"
    return _verify_atomic(op, 2)


def verify_smem_alloc(op: Op) -> str | None:
    t = op.results[0].type
    if not isinstance(t.layout, SHARED_LAYOUTS):
        return f"shared region needs a shared layout (Layout.swizzled / Layout.shared), got {t.layout}"
    return None


# reshape, trans, join, split, gather: one verifier, by op kind (gluon/language/shapes.py).
def verify_shape_op(op: Op) -> str | None:
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


# reduce_fn and scan: inputs, results and the combine region as gluon.ir's registry describes them;
# `result_shape`: (input shape, axis) -> the results' shape.
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


def verify_reduce_fn(op: Op) -> str | None:
    return _verify_combine(op, lambda shape, axis: shape[:axis] + shape[axis + 1:])


def verify_scan(op: Op) -> str | None:
    if not isinstance(op.attrs.get("reverse"), bool):
        return f"attrs['reverse'] must be a bool, got {op.attrs.get('reverse')!r}"
    return _verify_combine(op, lambda shape, axis: shape)


def verify_histogram(op: Op) -> str | None:
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


def verify_inline_asm(op: Op) -> str | None:
    if not op.results:
        return "has no result (the asm must produce at least one value)"
    shapes = {_shape_of(v.type) for v in op.operands + op.results if _shape_of(v.type)}
    if len(shapes) > 1:
        return f"operands and results of different shapes {sorted(shapes)}"
    if not isinstance(op.attrs.get("pack"), int) or op.attrs["pack"] < 1:
        return f"pack={op.attrs.get('pack')!r} is not a positive int"
    return None
