"""Ampere (SM80) builtins: asynchronous copies to shared memory, the register-operand MMA, named barriers.

`cp_async` / `cp_async_commit` / `cp_async_wait` (cp.async groups), `mma` (HMMA, mma.sync, with
operands in registers or loaded from shared memory), and `named_barrier_sync` / `named_barrier_arrive`
(bar.sync / bar.arrive between warps, e.g. FlashAttention-3's ping-pong of two warpgroups on SM90).
Later NVIDIA archs that have these features accept them too.
"""
from __future__ import annotations

from ... import ir
from ...types import DType, Layout
from ..core import Tensor, cast
from ..dot import _k_width, _register_dot
from ..memory import Shared, _address, _mask_for
from ..tracing import _tr, _user_loc


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


def mma(a, b, acc="acc") -> Tensor:
    """Ampere-style tensor-core MMA (HMMA, mma.sync): acc += a @ b with register operands."""
    t = _tr()
    t.require("mma", "mma")
    return _register_dot("mma", a, b, acc, Layout.mma((t.warps, 1)), _k_width(a.dtype))


# ---------------------------------------------------------------------------------- named barriers


def _named_barrier(name: str, barrier_id, num_threads) -> tuple[list, dict]:
    """The operands and attrs of a named-barrier op: a constant id as attrs['barrier_id'] (checked: 8..15),
    a GPU value as one i32 operand (not checkable here); the thread count, a positive multiple of 32."""
    t = _tr()
    t.require("named_barrier", name)
    ids = ir.NAMED_BARRIER_IDS
    if isinstance(barrier_id, Tensor) and not barrier_id.is_tile and isinstance(barrier_id.value.owner, ir.Op) \
            and barrier_id.value.owner.kind == "constant":
        barrier_id = barrier_id.value.owner.attrs["value"]          # a traced literal: checked like a Python int
    call = f"{name}({barrier_id!r}, {num_threads!r})"
    if isinstance(num_threads, bool) or not isinstance(num_threads, int):
        raise ir.GluonError(f"{call}: num_threads must be a Python int (a compile-time thread count), got "
                            f"{type(num_threads).__name__}", _user_loc())
    limit = 32 * t.kernel.num_warps
    if num_threads <= 0 or num_threads % 32:
        raise ir.GluonError(f"{call}: num_threads must be a positive multiple of 32 (the warp size: bar.sync and "
                            f"bar.arrive count whole warps), got {num_threads}", _user_loc())
    if num_threads > limit:
        raise ir.GluonError(f"{call}: num_threads {num_threads} is more than the kernel's {t.kernel.num_warps} "
                            f"warps x 32 = {limit} threads, so the barrier could never complete", _user_loc())
    attrs = {"num_threads": int(num_threads)}
    why = (f"named barrier ids {ids.start}..{ids.stop - 1} are the kernel's: Triton 3.6 itself uses named barrier 0 "
           "(__syncthreads), 1 (the whole CTA) and 2, 3, ... (each warp partition's own sync), and the hardware "
           "has 16 (0..15)")
    if isinstance(barrier_id, bool):
        raise ir.GluonError(f"{call}: barrier_id must be an int in {ids.start}..{ids.stop - 1} or an integer GPU "
                            "scalar, got a bool", _user_loc())
    if isinstance(barrier_id, int):
        if barrier_id not in ids:
            raise ir.GluonError(f"{call}: barrier_id {barrier_id} is outside {ids.start}..{ids.stop - 1}; {why}",
                                _user_loc())
        attrs["barrier_id"] = int(barrier_id)
        return [], attrs
    if not isinstance(barrier_id, Tensor):
        raise ir.GluonError(f"{call}: barrier_id must be an int in {ids.start}..{ids.stop - 1} or an integer GPU "
                            f"scalar, got {type(barrier_id).__name__}", _user_loc())
    if barrier_id.is_tile or not barrier_id.dtype.is_int or barrier_id.dtype.is_bool:
        what = f"a {barrier_id.shape} tile" if barrier_id.is_tile else f"a {barrier_id.dtype.name} scalar"
        raise ir.GluonError(f"{call}: barrier_id must be an int in {ids.start}..{ids.stop - 1} or an integer GPU "
                            f"scalar (one id for the whole warp), got {what}", _user_loc())
    return [cast(barrier_id, DType.i32)], attrs


def named_barrier_sync(barrier_id, num_threads: int) -> None:
    """PTX `bar.sync barrier_id, num_threads`: wait at hardware named barrier `barrier_id` until
    `num_threads` threads (a positive multiple of 32: whole warps) have reached it, counting the threads
    of `named_barrier_arrive`s on it. Every thread of each participating warp must execute it.

    `barrier_id` is a Python int in 8..15 (Triton 3.6 uses 0..7 itself: 0 for __syncthreads, 1 for the
    whole CTA, 2, 3, ... for each warp partition's own sync) or an integer GPU scalar computed at run time
    (e.g. from the consumer's index), which cannot be checked at trace time: it must be in 8..15 and the
    same in every thread of a warp. FlashAttention-3's ping-pong: warpgroup g calls
    `named_barrier_sync(8 + g, 256)` before issuing its WGMMAs and `named_barrier_arrive(8 + 1 - g, 256)`
    after, so one warpgroup's softmax overlaps the other's GEMMs. Available on every NVIDIA arch (SM80+)."""
    ops, attrs = _named_barrier("named_barrier_sync", barrier_id, num_threads)
    _tr().emit("named_barrier_sync", ops, [], attrs)


def named_barrier_arrive(barrier_id, num_threads: int) -> None:
    """PTX `bar.arrive barrier_id, num_threads`: count this warp's threads toward named barrier
    `barrier_id` without waiting (the producer side of a `named_barrier_sync` by other warps, whose
    `num_threads` counts the arriving threads too). Same arguments and rules as `named_barrier_sync`."""
    ops, attrs = _named_barrier("named_barrier_arrive", barrier_id, num_threads)
    _tr().emit("named_barrier_arrive", ops, [], attrs)
