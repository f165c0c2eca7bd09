"""Shared memory in the interpreter: regions and their stages, register <-> shared copies, transposed and
reinterpreted views, the async-proxy fence, and cp.async copies with their groups.

A `smem_alloc` makes a fresh `shared.SmemRegion` (its bytes zero, none written) and hands it to the
program's observer (`it.observer`: the hazard tracker, or None; `watch`); every access below passes the accessor
(`it.who`), its proxy and the op's line, so the tracker sees them all. Reading elements never written is
the tracker's to report (SmemView.written_mask()); without one such a read gives the zeros the region
starts with.

cp.async copies land at the op (the copy is done when cp_async returns here); the write names its group
(an `AsyncGroup`, open until `cp_async_commit` closes it), which `cp_async_wait(num)` completes: all
committed groups but the newest `num`; or `cp_async_arrive` hands the groups to an mbarrier's phase. Masked-off
elements are written as zeros, as cp.async with a source size of 0 writes them (Triton's lowering of a masked
async copy).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir import SmemType
from .memory import _addresses
from .ops import InterpretError, rule
from .shared import BarrierView, SmemRegion, SmemView
from .values import mem_dtype


def observer_of(it) -> Any:
    return getattr(it, "observer", None)


def notify(it, event: str, *args) -> None:
    """Call the observer's `event` hook (on_fence, on_async_done, ...) where it has one."""
    fn = getattr(observer_of(it), event, None)
    if fn is not None:
        fn(*args)


def local_state(it, key: str, make):
    """Per-accessor state of a program (cp.async groups, in-flight WGMMAs and TMA stores): the async ops a
    thread issued are that thread's, so a warp role's task keeps its own."""
    store = it.local
    k = (key, id(it.who))
    st = store.get(k)
    if st is None:
        st = store[k] = make()
    return st


def view_of(op, v, what: str) -> SmemView:
    if not isinstance(v, SmemView):
        raise InterpretError(f"{op.kind}'s {what} must be shared memory, got {type(v).__name__}", op.loc)
    return v


def one_stage(op, v, what: str) -> SmemView:
    v = view_of(op, v, what)
    if v.stage is None and v.region.stages > 1:
        raise InterpretError(f"{op.kind}: {what} '{v.region.name}' has {v.region.stages} stages; index one stage "
                             "first", op.loc)
    return v


@rule("smem_alloc")
def _smem_alloc(it, op, args):
    t = op.result.type
    if not isinstance(t, SmemType):
        raise InterpretError(f"smem_alloc must produce shared memory, got {t}", op.loc)
    name = op.attrs.get("name") or op.result.name or "smem"
    region = SmemRegion(name, t.dtype, tuple(t.shape), t.stages, None, t.layout)
    view = SmemView(region, 0 if t.stages == 1 else None)
    if args:
        if t.stages > 1:
            raise InterpretError("an initial value needs a single-stage region", op.loc)
        view.write(args[0], it.who, "generic", op.loc)
    watch(it, view, op)
    return [view]


def watch(it, view: SmemView, op) -> None:
    """Hand a new region to the program's observer: `observer.attach(view, who, loc)` where it has one (it
    then learns of the initial value written above), else as the region's observer."""
    obs = observer_of(it)
    if obs is None or view.region.observer is not None:
        return
    attach = getattr(obs, "attach", None)
    if attach is not None:
        attach(view, it.who, op.loc)
    else:
        view.region.observer = obs


@rule("smem_index")
def _smem_index(it, op, args):
    v, stage = args
    return [view_of(op, v, "operand").index(int(stage))]


@rule("smem_load")
def _smem_load(it, op, args):
    v = one_stage(op, args[0], "shared region")
    return [v.read(it.who, "generic", op.loc)]


@rule("smem_store")
def _smem_store(it, op, args):
    tile, v = args
    one_stage(op, v, "shared region").write(tile, it.who, "generic", op.loc)
    return []


@rule("smem_trans")
def _smem_trans(it, op, args):
    v = view_of(op, args[0], "operand")
    order = tuple(int(i) for i in op.attrs.get("order", tuple(reversed(range(len(v.region.shape))))))
    return [v.trans(order)]


@rule("smem_reinterpret")
def _smem_reinterpret(it, op, args):
    v = view_of(op, args[0], "operand")
    t = op.result.type
    if v.perm is not None:
        raise InterpretError(f"smem_reinterpret of a transposed view of '{v.region.name}': reinterpret the region, "
                             "then transpose", op.loc)
    r = v.region
    offset = 0 if v.stage is None else v.stage * r.stage_bytes
    try:
        new = r.reinterpret(t.dtype, tuple(t.shape), t.stages, t.layout, offset)
    except ValueError as e:
        raise InterpretError(str(e), op.loc) from None
    return [SmemView(new, 0 if t.stages == 1 else None)]


@rule("fence_async_shared")
def _fence_async_shared(it, op, args):
    notify(it, "on_fence", it.who)
    return []


# ------------------------------------------------------------------------------ cp.async


@dataclass(eq=False)
class AsyncGroup:
    """One bulk-async group of an accessor (`kind`: "cp_async", "wgmma" or "tma_store"): what `via` names on
    its shared accesses, in flight until a wait retires it (`done`). A cp.async group stays open for more
    copies until `cp_async_commit` closes it (`committed`); the others are closed when issued."""

    kind: str
    who: Any
    seq: int
    committed: bool = False
    done: bool = False


@dataclass
class AsyncGroups:
    """An accessor's groups of one kind: the open one (cp.async only), those committed and not yet waited
    for, oldest first."""

    kind: str
    open: AsyncGroup | None = None
    pending: list[AsyncGroup] = field(default_factory=list)
    count: int = 0

    def current(self, who) -> AsyncGroup:
        """The open group, opened on the first copy after a commit."""
        if self.open is None:
            self.open = AsyncGroup(self.kind, who, self.count)
            self.count += 1
        return self.open

    def commit(self, who) -> AsyncGroup:
        g = self.current(who)
        g.committed = True
        self.pending.append(g)
        self.open = None
        return g

    def issue(self, who) -> AsyncGroup:
        """A group opened and committed at once (one WGMMA, one TMA store)."""
        self.current(who)
        return self.commit(who)

    def retire(self, it, keep: int, loc) -> None:
        """Wait until at most `keep` groups are pending (the newest stay): the rest are done."""
        n = max(0, len(self.pending) - max(0, keep))
        done, self.pending = self.pending[:n], self.pending[n:]
        for g in done:
            g.done = True
            notify(it, "on_async_done", g, it.who, loc)


def async_groups(it, kind: str) -> AsyncGroups:
    """The accessor's groups of `kind` (cp_async, wgmma, tma_store)."""
    return local_state(it, kind, lambda: AsyncGroups(kind))


@rule("cp_async")
def _cp_async(it, op, args):
    ptr, offsets, dst, *rest = args
    mask = rest[0] if op.attrs.get("has_mask", bool(rest)) and rest else None
    v = one_stage(op, dst, "destination")
    dt = op.operands[2].type.dtype
    addr, active, shape = _addresses(it, op, ptr, offsets, mask)
    if tuple(shape) != tuple(v.shape):
        raise InterpretError(f"cp_async: offsets {tuple(shape)} do not match the shared tile {v.shape}", op.loc)
    if ptr.buf.dtype != dt and mem_dtype(ptr.buf.dtype) != mem_dtype(dt):
        raise InterpretError(f"cp_async from {ptr.buf.dtype.name} memory into a {dt.name} region", op.loc)
    raw = np.zeros(addr.shape, mem_dtype(dt))
    raw[active] = ptr.buf.data[addr[active]]
    group = async_groups(it, "cp_async").current(it.who)
    v.write(raw.reshape(shape), it.who, "async", op.loc, via=group, raw=True)
    return [group] if op.results else []


@rule("cp_async_commit")
def _cp_async_commit(it, op, args):
    g = async_groups(it, "cp_async").commit(it.who)
    notify(it, "on_async_commit", g, it.who, op.loc)
    return [g] if op.results else []


@rule("cp_async_wait")
def _cp_async_wait(it, op, args):
    async_groups(it, "cp_async").retire(it, int(op.attrs.get("num", 0)), op.loc)
    return [None] if op.results else []


@rule("cp_async_arrive")
def _cp_async_arrive(it, op, args):
    """cp.async.mbarrier.arrive: the role's copies so far landed at their ops, so the arrival is due at once and
    the pending count it raised is lowered again (no change to the phase); the copies are handed from their
    groups to the barrier's phase in progress, which whoever reads them must wait for."""
    view = args[0]
    if not isinstance(view, BarrierView):
        raise InterpretError(f"cp_async_arrive needs an mbarrier, got {type(view).__name__}", op.loc)
    if view.index is None and len(view.barriers) != 1:
        raise InterpretError(f"cp_async_arrive on the whole set of {len(view.barriers)} mbarriers '{view.name}': "
                             "index one stage first (bars[s])", op.loc)
    groups = async_groups(it, "cp_async")
    handed = groups.pending + ([groups.open] if groups.open is not None else [])
    groups.pending, groups.open = [], None
    for g in handed:
        g.done = True
    notify(it, "on_copies_arrive", view.one, it.who, handed)
    return []


__all__ = ["AsyncGroup", "AsyncGroups", "async_groups", "local_state", "notify", "observer_of", "one_stage", "view_of", "watch"]
