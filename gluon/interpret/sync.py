"""The interpreter's synchronization rules: mbarriers, named barriers, and the cluster ops (for one CTA).

Semantics read off the lowering (gluon/backend/lowering/nvidia/hopper.py, ampere.py) and Triton's
lowering of the ttng ops it emits; each op runs once per role (the role's warps in lockstep):

* `barrier_alloc`: `stages` MBarriers, each initialised with the arrival count (attrs count).
* `barrier_expect(bar, pred?)`: ttng.barrier_expect, i.e. mbarrier.arrive.expect_tx by one thread: the
  phase expects attrs['bytes'] more transaction bytes, then one arrival (in that order, as PTX does: the
  arrival cannot complete the phase before the bytes it announces).
* `barrier_arrive(bar, pred?)`: ttng.arrive_barrier by one thread, attrs['count'] arrivals. More
  arrivals than the phase has pending is an error (PTX leaves it undefined; the extra ones would
  complete the next phase early). `cluster=True` needs a cluster, which the interpreter refuses.
* `barrier_wait(bar, phase, pred?)`: mbarrier.try_wait.parity in a loop: returns once the phase of the
  operand's parity has completed (the barrier's phase parity differs from it); blocks the role
  otherwise (tasks.py).
* `named_barrier_sync` / `named_barrier_arrive`: PTX bar.sync / bar.arrive id, n. A role counts its
  warps' threads at once (a whole role reaches the op together); the generation completes when n
  threads arrived, releasing the syncers. A role whose threads would pass n, a thread count other
  than the generation's, or a role counting into a generation twice (its partner not yet there: the
  hardware would complete the generation without it) is an error.
* `griddep_wait` / `griddep_launch_dependents`: no-ops, as the interpreter runs each launch to its end
  before the next starts (a programmatic dependent's wait always finds the kernel before it done).
* `cluster_rank` / `cluster_sync`: the interpreter runs one CTA at a time, so it refuses a kernel with
  a cluster (set_cluster(n > 1)) before it runs; for a cluster of one these are rank 0 and a meeting
  point of every role of the CTA.

Every release and acquire is told to the hazard tracker (hazards.py) first, so its vector clocks follow
the barriers exactly.
"""
from __future__ import annotations

import numpy as np

from .hazards import join
from .ops import InterpretError, rule
from .shared import BarrierView, MBarrier
from .tasks import MbarWait, NamedBarrier, NamedWait, block, yield_after


def _pred(args: list, idx: int) -> bool:
    return bool(args[idx]) if len(args) > idx else True


def _bar_name(view: BarrierView) -> str:
    return f"'{view.name}'" + (f"[{view.index}]" if view.index is not None else "")


def _one(view, op) -> MBarrier:
    if not isinstance(view, BarrierView):
        raise InterpretError(f"{op.kind} needs an mbarrier, got {type(view).__name__}", op.loc)
    if view.index is None and len(view.barriers) != 1:
        raise InterpretError(f"{op.kind} on the whole set of {len(view.barriers)} mbarriers '{view.name}': index one "
                             "stage first (bars[s])", op.loc)
    return view.one


@rule("barrier_alloc")
def _barrier_alloc(it, op, args):
    t = op.result.type
    count = int(op.attrs.get("count", t.count))
    name = str(op.attrs.get("name") or op.result.name or "bar")
    view = BarrierView(name, tuple(MBarrier(count) for _ in range(t.stages)))
    it.cta.observer.name_barriers(name, view.barriers)
    return [view]


@rule("barrier_index")
def _barrier_index(it, op, args):
    view, stage = args
    s = int(stage)
    if not 0 <= s < len(view.barriers):
        raise InterpretError(f"stage {s} of mbarrier set '{view.name}', which has {len(view.barriers)} stages "
                             f"(0..{len(view.barriers) - 1})", op.loc)
    return [view.at(s)]


def _room(op, view: BarrierView, bar: MBarrier, n: int) -> None:
    if n > bar.pending:
        raise InterpretError(
            f"{n} arrival{'s' if n > 1 else ''} on mbarrier {_bar_name(view)}, whose phase {bar.phase} has only "
            f"{bar.pending} of {bar.count} pending: more arrivals than the barrier's count per phase (the extra ones "
            "would complete the next phase early); make the count match the arrives of one phase", op.loc)


@rule("barrier_expect")
def _barrier_expect(it, op, args):
    view = args[0]
    bar = _one(view, op)
    if _pred(args, 1):
        _room(op, view, bar, 1)
        it.cta.observer.on_arrive(bar, it.who)
        bar.expect_tx(int(op.attrs["bytes"]))      # mbarrier.arrive.expect_tx: the bytes, then the arrival
        bar.arrive(1)
    return []


@rule("barrier_arrive")
def _barrier_arrive(it, op, args):
    view = args[0]
    bar = _one(view, op)
    if _pred(args, 1):
        n = int(op.attrs.get("count", 1))
        _room(op, view, bar, n)
        it.cta.observer.on_arrive(bar, it.who)
        bar.arrive(n)
        yield_after(it, op)
    return []


@rule("barrier_wait")
def _barrier_wait(it, op, args):
    view = args[0]
    bar = _one(view, op)
    if _pred(args, 2):
        parity = int(np.asarray(args[1])) & 1
        block(it, MbarWait(op, view, parity))
        it.cta.observer.on_wait(bar, it.who, op.loc, parity)
    return []


# ------------------------------------------------------------------------------ named barriers


def _named(it, op, args) -> tuple[NamedBarrier, int]:
    bid = int(op.attrs["barrier_id"]) if "barrier_id" in op.attrs else int(np.asarray(args[0]))
    if not 0 <= bid < 16:
        raise InterpretError(f"named barrier id {bid} is not one of the hardware's 16 (0..15)", op.loc)
    need = int(op.attrs["num_threads"])
    nb = it.cta.named.get(bid)
    if nb is None:
        nb = it.cta.named[bid] = NamedBarrier(bid)
    return nb, need


def _count_in(it, op, nb: NamedBarrier, need: int, what: str) -> int:
    """Count `it`'s threads into the generation in progress; the generation they joined."""
    threads = it.threads
    if nb.arrived == 0:
        nb.need = need
    elif nb.need != need:
        raise InterpretError(f"{what} counts {need} threads, but the generation in progress on it counts {nb.need} "
                             "(every bar.sync / bar.arrive on one barrier must give the same count)", op.loc)
    if nb.arrived + threads > need:
        raise InterpretError(
            f"{what}: the {threads} threads of {it.actor} would make {nb.arrived + threads} of the {need} it counts "
            "(a role counts all its warps' threads; make the count the sum of the threads of the roles that meet "
            "there)", op.loc)
    if it.actor in nb.members:
        raise InterpretError(
            f"{what}: {it.actor} counts into generation {nb.generation} a second time before it completed (the "
            "hardware counts its threads twice, so the generation completes without the role it was to meet and "
            "that role waits on the next one)", op.loc)
    gen = nb.generation
    clock = nb.clocks.setdefault(gen, {})
    join(clock, it.cta.observer.release(it.who))
    nb.arrived += threads
    nb.members.add(it.actor)
    if nb.arrived == need:
        nb.generation += 1
        nb.arrived = 0
        nb.members.clear()
    return gen


def _met(it, op, nb: NamedBarrier, gen: int, what: str) -> None:
    block(it, NamedWait(op, nb, gen, what))
    it.cta.observer.acquire(it.who, nb.clocks.get(gen, {}))


@rule("named_barrier_sync")
def _named_barrier_sync(it, op, args):
    nb, need = _named(it, op, args)
    what = f"named barrier {nb.bid} (bar.sync, {need} threads)"
    _met(it, op, nb, _count_in(it, op, nb, need, what), what)
    return []


@rule("named_barrier_arrive")
def _named_barrier_arrive(it, op, args):
    nb, need = _named(it, op, args)
    _count_in(it, op, nb, need, f"named barrier {nb.bid} (bar.arrive, {need} threads)")
    yield_after(it, op)
    return []


# ------------------------------------------------------------------------------ programmatic dependent launch


@rule("griddep_wait", "griddep_launch_dependents")
def _griddep(it, op, args):
    return []


# ------------------------------------------------------------------------------ clusters (of one CTA)


@rule("cluster_rank")
def _cluster_rank(it, op, args):
    return [np.array(0, np.int32)]


@rule("cluster_sync")
def _cluster_sync(it, op, args):
    nb = it.cta.named.get("cluster")
    if nb is None:
        nb = it.cta.named["cluster"] = NamedBarrier(-1)
    need = it.cta.num_warps * 32
    what = "cluster_sync (every thread of the CTA)"
    _met(it, op, nb, _count_in(it, op, nb, need, what), what)
    return []


__all__: list[str] = []
