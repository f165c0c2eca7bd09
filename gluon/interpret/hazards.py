"""The interpreter's hazard tracker: the `observer` of shared.py's regions (issue 20, item 2).

The interpreter runs a program's warp roles one at a time, in one order of its choosing (tasks.py), so
a kernel whose roles race can still compute the right numbers there. What decides whether the kernel is
right on the GPU is not the order the interpreter took but the order the kernel *guarantees*: the
happens-before relation its mbarriers, named barriers and the warp-role fork/join establish. This module
tracks that relation with vector clocks and checks every shared-memory access against it (FastTrack
style: per stage, the last write and the reads since), so a race is reported whichever order the
interpreter happened to run the roles in.

* A role's clock counts its own releases; an arrive (or expect) on an mbarrier releases the role's
  clock into the phase in progress; a wait that returns acquires the clock of the barrier's last
  completed phase (cumulative: a phase's completion includes its predecessors'). A named barrier's
  generation joins its participants' clocks; a sync acquires it. A warp_specialize section forks the
  program's clock into each role and joins them back at its end.
* A TMA load (an async write `via` an MBarrier) becomes visible with the completion of the phase in
  progress when it was issued: the barrier is itself a component of the clocks, counting completions,
  so "the reader has waited for the phase that completes this load" is `clock[bar] >= completion`.
* `fence_async_shared` marks the writer's register-to-shared writes so far as fenced; an async-proxy
  read (TMA store, WGMMA) of a generic write needs the writer's fence, ordered before the read.

The four hazards, each an InterpretError at the accessing op's line: a read of elements never written;
a read of a stage whose last write is not ordered before it (an unwaited TMA load, a store by another
role without a barrier between); a write to a stage that another role read, or that a load still in
flight fills, without that being ordered before the write (overwriting a stage still in use); an
async-proxy read of a register write without the writer's fence.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..ir import Op
from ..types import Loc
from .ops import InterpretError
from .shared import MBarrier, SmemRegion, SmemView

Clock = dict          # who (a Role, None for the program outside roles) or an MBarrier -> count


def join(into: Clock, other: Clock) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


def actor(who: Any) -> str:
    """How an error names a reader or writer: 'role consumer (warps 0..3)', or 'the program'."""
    return "the program" if who is None else f"role {who}"


def _at(loc: Loc | None) -> str:
    return f" ({loc})" if loc is not None else ""


@dataclass(eq=False)
class _Write:
    who: Any
    epoch: int
    proxy: str
    loc: Loc | None
    bar: MBarrier | None = None     # an async write visible once `bar` completes phase `completion - 1`
    completion: int = 0
    fence: int | None = None        # the writer's epoch at its first fence_async_shared after the write


@dataclass(eq=False)
class _Stage:
    write: _Write | None = None
    reads: dict = field(default_factory=dict)   # who -> (epoch, loc) of its last read since the write


@dataclass(eq=False)
class _BarClock:
    """What the tracker knows of one mbarrier: the phase it last saw, the clock released into the phase in
    progress, and the clock of the last completed phase."""

    phase: int = 0
    pending: Clock = field(default_factory=dict)
    completed: Clock = field(default_factory=dict)


class HazardTracker:
    """Vector clocks of a program's tasks and mbarriers, and the access history of its shared stages."""

    def __init__(self):
        self.clocks: dict[Any, Clock] = {None: {None: 1}}
        self.stages: dict[tuple[SmemRegion, int], _Stage] = {}
        self.bars: dict[MBarrier, _BarClock] = {}
        self.labels: dict[MBarrier, str] = {}
        self.waited: set = set()                 # (who, MBarrier) pairs: who has waited on it

    # ---------------------------------------------------------------- clocks

    def clock(self, who: Any) -> Clock:
        c = self.clocks.get(who)
        if c is None:
            c = self.clocks[who] = {who: 1}
        return c

    def release(self, who: Any) -> Clock:
        """A copy of `who`'s clock to publish; `who`'s later events are not covered by it."""
        c = self.clock(who)
        out = dict(c)
        c[who] += 1
        return out

    def acquire(self, who: Any, clock: Clock) -> None:
        join(self.clock(who), clock)

    def fork(self, parent: Any, children: list) -> None:
        base = self.release(parent)
        for ch in children:
            self.clocks[ch] = {**base, ch: 1}

    def join_roles(self, parent: Any, children: list) -> None:
        pc = self.clock(parent)
        for ch in children:
            join(pc, self.clock(ch))
        pc[parent] += 1

    # ---------------------------------------------------------------- mbarriers

    def name_barriers(self, name: str, barriers) -> None:
        for i, b in enumerate(barriers):
            self.labels[b] = f"'{name}'[{i}]" if len(barriers) > 1 else f"'{name}'"

    def label(self, bar: MBarrier) -> str:
        return self.labels.get(bar, "an mbarrier")

    def _sync(self, bar: MBarrier) -> _BarClock:
        """The barrier's clocks, caught up with its phase: a completion seen for the first time snapshots
        the clock released into that phase (every event that changes a barrier is observed before it)."""
        bc = self.bars.get(bar)
        if bc is None:
            bc = self.bars[bar] = _BarClock(bar.phase)
        if bar.phase != bc.phase:
            bc.completed = {**bc.pending, bar: bar.phase}
            bc.pending = dict(bc.completed)
            bc.phase = bar.phase
        return bc

    def on_arrive(self, bar: MBarrier, who: Any) -> None:
        """Before `who` arrives on `bar` (arrive, expect): its clock so far goes into the phase."""
        join(self._sync(bar).pending, self.release(who))

    def on_wait(self, bar: MBarrier, who: Any) -> None:
        """After `who`'s wait on `bar` returned: it has seen the barrier's last completed phase."""
        self.acquire(who, self._sync(bar).completed)
        self.waited.add((who, bar))

    def on_fence(self, who: Any) -> None:
        """fence_async_shared by `who`: its register-to-shared writes so far are ordered before the async
        proxy's later reads (of those ordered after this fence)."""
        c = self.clock(who)
        for st in self.stages.values():
            w = st.write
            if w is not None and w.who == who and w.proxy == "generic" and w.fence is None:
                w.fence = c[who]
        c[who] += 1

    # ---------------------------------------------------------------- shared memory

    def attach(self, view: SmemView, who: Any, loc: Loc | None) -> None:
        """Watch a region made by smem_alloc / smem_reinterpret; its elements already written (an initial
        value) count as a register write by `who`."""
        region = view.region
        if region.observer is not None:
            return
        region.observer = self
        if region.written.any():
            for s in range(region.stages):
                self.stages[(region, s)] = _Stage(_Write(who, self.clock(who)[who], "generic", loc))

    def on_smem(self, view: SmemView, who: Any, kind: str, proxy: str, loc, via: Any = None) -> None:
        region = view.region
        stages = range(region.stages) if view.stage is None else (view.stage,)
        if kind == "read":
            self._check_written(view, who, loc)
            for s in stages:
                self._read(region, s, who, proxy, loc)
        else:
            for s in stages:
                self._write(region, s, who, proxy, loc, via)

    def _check_written(self, view: SmemView, who: Any, loc) -> None:
        mask = view.written_mask()
        if mask.all():
            return
        region = view.region
        if view.stage is None and region.stages > 1:
            per = mask.reshape(region.stages, -1).all(axis=1)
            s = int(np.argmin(per))
            mask = mask[s] if view.perm is None else view.index(s).written_mask()
        else:
            s = view.stage or 0
        n, missing = mask.size, int(mask.size - np.count_nonzero(mask))
        what = _stage_name(region, s)
        if missing == n:
            raise InterpretError(
                f"{actor(who)} reads {what} before anything was written to it: no store has run and no TMA load "
                "into it has landed; store or load it first (and wait on the load's mbarrier phase)", loc)
        raise InterpretError(f"{actor(who)} reads {what}, of which {missing} of {n} elements were never written", loc)

    def _read(self, region: SmemRegion, s: int, who: Any, proxy: str, loc) -> None:
        st = self.stages.get((region, s))
        if st is None:
            st = self.stages[(region, s)] = _Stage()
        c = self.clock(who)
        w = st.write
        if w is not None:
            if w.bar is not None:
                if c.get(w.bar, 0) < w.completion:
                    raise InterpretError(self._unwaited(region, s, who, w), loc)
            elif w.who != who and c.get(w.who, 0) < w.epoch:
                raise InterpretError(
                    f"{actor(who)} reads {_stage_name(region, s)}, which {actor(w.who)} wrote{_at(w.loc)} with "
                    "nothing ordering that write before this read: have the writer arrive on an mbarrier (or a "
                    "named barrier) after its write and this role wait on it before reading", loc)
            if proxy == "async" and w.proxy == "generic" and w.bar is None:
                fenced = w.fence is not None and (w.who == who or c.get(w.who, 0) >= w.fence)
                if not fenced:
                    by = "" if w.who == who else f" by {actor(w.who)}"
                    raise InterpretError(
                        f"an async-proxy read (TMA store or WGMMA) of {_stage_name(region, s)} by {actor(who)}, "
                        f"last written from registers{by}{_at(w.loc)} with no fence_async_shared() by the writer "
                        "between that write and this read: the async proxy may read the old bytes; call "
                        "fence_async_shared() after the store (in the writing role) and before this op", loc)
        st.reads[who] = (c[who], loc)

    def _unwaited(self, region: SmemRegion, s: int, who: Any, w: _Write) -> str:
        seen = self.clock(who).get(w.bar, 0)
        phase = w.completion - 1
        bar = self.label(w.bar)
        if (who, w.bar) not in self.waited:
            why = "it has not waited on that barrier"
        elif seen == 0:
            why = "its wait on it returned before any phase had completed (a wait with the wrong parity returns at once)"
        else:
            why = (f"the last phase it has seen complete is {seen - 1} (a wait with the wrong parity returns at "
                   "once)")
        return (f"{actor(who)} reads {_stage_name(region, s)} before the TMA load into it{_at(w.loc)} has completed "
                f"for it: the load completes phase {phase} (parity {phase & 1}) of mbarrier {bar}, and {why}; wait "
                f"on {bar} with parity {phase & 1} before reading")

    def _write(self, region: SmemRegion, s: int, who: Any, proxy: str, loc, via: Any) -> None:
        st = self.stages.get((region, s))
        if st is None:
            st = self.stages[(region, s)] = _Stage()
        c = self.clock(who)
        for r, (e, rloc) in st.reads.items():
            if r != who and c.get(r, 0) < e:
                raise InterpretError(
                    f"{actor(who)} overwrites {_stage_name(region, s)} while it is still in use: {actor(r)} read "
                    f"it{_at(rloc)} and that read is not ordered before this write; the reader must release the "
                    "stage (arrive on its 'empty' mbarrier after the read) and this role wait on that release "
                    "before writing", loc)
        w = st.write
        if w is not None:
            if w.bar is not None and c.get(w.bar, 0) < w.completion:
                phase = w.completion - 1
                raise InterpretError(
                    f"{actor(who)} overwrites {_stage_name(region, s)} while it is still in use: the TMA load into "
                    f"it{_at(w.loc)} (completing phase {phase} of mbarrier {self.label(w.bar)}) has not been "
                    "consumed and released to this role; wait for the consumer's release of the stage (its "
                    "'empty' mbarrier) before filling it again (a producer running ahead of the ring)", loc)
            if w.bar is None and w.who != who and c.get(w.who, 0) < w.epoch:
                raise InterpretError(
                    f"{actor(who)} overwrites {_stage_name(region, s)}, which {actor(w.who)} wrote{_at(w.loc)}, "
                    "with nothing ordering the two writes; put a barrier between them", loc)
        nw = _Write(who, c[who], proxy, loc)
        if isinstance(via, MBarrier):
            bc = self._sync(via)
            nw.bar, nw.completion = via, via.phase + 1
            join(bc.pending, c)
        st.write, st.reads = nw, {}


def _stage_name(region: SmemRegion, s: int) -> str:
    return f"stage {s} of shared region '{region.name}'" if region.stages > 1 else f"shared region '{region.name}'"


# ------------------------------------------------------------------------------ hooks after ops

Hook = Callable[[Any, Op, list], None]


def _attach_results(it, op: Op, results: list) -> None:
    obs = it.cta.observer
    for r in results:
        if isinstance(r, SmemView):
            obs.attach(r, it.who, op.loc)


def _fenced(it, op: Op, results: list) -> None:
    it.cta.observer.on_fence(it.who)


# op kind -> what the tracker does after the op's rule ran (the rules of shared memory live elsewhere; the
# tracker learns of new regions and of fences here)
HOOKS: dict[str, Hook] = {"smem_alloc": _attach_results, "smem_reinterpret": _attach_results,
                          "smem_index": _attach_results, "smem_trans": _attach_results,
                          "fence_async_shared": _fenced}

__all__ = ["HOOKS", "HazardTracker", "actor", "join"]
