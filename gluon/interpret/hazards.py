"""The interpreter's hazard tracker: the `observer` of shared.py's regions (issue 20, item 2).

The interpreter runs a program's warp roles one at a time, in one order of its choosing (tasks.py), so
a kernel whose roles race can still compute the right numbers there. What decides whether the kernel is
right on the GPU is not the order the interpreter took but the order the kernel *guarantees*: the
happens-before relation its mbarriers, named barriers, async waits and the warp-role fork/join
establish. This module tracks that relation with vector clocks and checks every shared-memory access
against it (FastTrack style: per stage, the last write and the reads since), so a race is reported
whichever order the interpreter happened to run the roles in.

* A role's clock counts its own releases; an arrive (or expect) on an mbarrier releases the role's
  clock into the phase in progress; a wait that returns acquires the clock of the barrier's last
  completed phase (cumulative: a phase's completion includes its predecessors'). A named barrier's
  generation joins its participants' clocks; a sync acquires it. A warp_specialize section forks the
  program's clock into each role and joins them back at its end.
* A TMA load (an async write `via` an MBarrier) becomes visible with the completion of the phase in
  progress when it was issued: the barrier is itself a component of the clocks, counting completions,
  so "the reader has waited for the phase that completes this load" is `clock[bar] >= completion`.
* Async reads under a token (an async WGMMA's group, a TMA store's) are in flight until the reader's
  wait retires the token (`on_async_done`); cp.async writes likewise until their group is waited for, or
  until a `cp_async_arrive` on an mbarrier binds them to its phase in progress, as a TMA load is.
* `fence_async_shared` marks the writer's register-to-shared writes so far as fenced; an async-proxy
  read (TMA store, WGMMA) of a generic write needs the writer's fence, ordered before the read.

Accesses are tracked per stage as a byte span of the allocation (shared.SmemBytes), so reinterpreted
views of the same bytes (the GEMM's output tile staged in its A ring) are checked against each other.

The hazards, each an InterpretError at the accessing op's line that names the region, stage and roles:
a read of elements never written; a read of a stage whose last write is not ordered before it (an
unwaited TMA load, a store by another role with no barrier between, cp.async copies not waited for); a
write to a stage that another role read, that an async read still reads, or that a load still in flight
fills, without that being ordered before the write (overwriting a stage still in use); an async-proxy
read of a register write without the writer's fence.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..types import Loc
from .ops import InterpretError
from .shared import MBarrier, SmemBytes, SmemRegion, SmemView

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
    bar: MBarrier | None = None     # a TMA load: visible once `bar` completes phase `completion - 1`
    completion: int = 0
    token: Any = None               # a cp.async group not yet waited for
    what: str = "TMA load"          # what a `bar`-bound write is: a TMA load, or cp.async copies handed to `bar`
    fence: int | None = None        # the writer's epoch at its first fence_async_shared after the write


@dataclass(eq=False)
class _Read:
    who: Any
    epoch: int | None               # None while in flight under `token`
    loc: Loc | None
    token: Any = None
    was_async: bool = False         # read under a token: complete only at the reader's wait for it


@dataclass(eq=False)
class _Span:
    """One stage's bytes [lo, hi) of an allocation: its last write and the reads since."""

    lo: int
    hi: int
    name: str
    write: _Write | None = None
    reads: list = field(default_factory=list)


@dataclass(eq=False)
class _BarClock:
    """What the tracker knows of one mbarrier: the phase it last saw, the clock released into the phase in
    progress, and the clock of the last completed phase."""

    phase: int = 0
    pending: Clock = field(default_factory=dict)
    completed: Clock = field(default_factory=dict)


def _stage_name(region: SmemRegion, s: int) -> str:
    return f"stage {s} of shared region '{region.name}'" if region.stages > 1 else f"shared region '{region.name}'"


class HazardTracker:
    """Vector clocks of a program's tasks and mbarriers, and the access history of its shared stages."""

    def __init__(self):
        self.clocks: dict[Any, Clock] = {None: {None: 1}}
        self.spans: dict[SmemBytes, dict[tuple[int, int], _Span]] = {}
        self.bars: dict[MBarrier, _BarClock] = {}
        self.labels: dict[MBarrier, str] = {}
        self.waited: set = set()                 # (who, MBarrier): who has waited on it
        self.last_wait: dict = {}                # who -> (MBarrier, loc, parity, phase then) of its last wait
        self.tokens: dict[Any, list] = {}        # an in-flight token -> the reads / writes under it

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
        for ch in children:       # a role of an earlier section with the same place keeps counting up
            self.clocks[ch] = {**base, ch: base.get(ch, 0) + 1}

    def join_roles(self, parent: Any, children: list) -> None:
        pc = self.clock(parent)
        for ch in children:
            join(pc, self.clock(ch))
        pc[parent] += 1

    # ---------------------------------------------------------------- mbarriers, fences, async groups

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

    def on_wait(self, bar: MBarrier, who: Any, loc: Loc | None = None, parity: int = 0) -> None:
        """After `who`'s wait on `bar` (for `parity`) returned: it has seen the barrier's last completed phase."""
        self.acquire(who, self._sync(bar).completed)
        self.waited.add((who, bar))
        self.last_wait[who] = (bar, loc, parity, bar.phase)

    def on_fence(self, who: Any) -> None:
        """fence_async_shared by `who`: its register-to-shared writes so far are ordered before the async
        proxy's later reads (of those ordered after this fence)."""
        c = self.clock(who)
        for spans in self.spans.values():
            for sp in spans.values():
                w = sp.write
                if w is not None and w.who == who and w.proxy == "generic" and w.fence is None:
                    w.fence = c[who]
        c[who] += 1

    def on_async_commit(self, group: Any, who: Any, loc) -> None:
        """A cp.async group closed; its copies stay in flight until a cp_async_wait retires it."""

    def on_copies_arrive(self, bar: MBarrier, who: Any, groups: list) -> None:
        """cp_async_arrive by `who` on `bar`: its copies under `groups` (not yet waited for) become visible as a
        TMA load does, with the completion of the barrier's phase in progress."""
        bc = self._sync(bar)
        for g in groups:
            for acc in self.tokens.pop(g, ()):
                if isinstance(acc, _Write):
                    acc.bar, acc.completion, acc.token, acc.what = bar, bar.phase + 1, None, "cp.async copies"
        join(bc.pending, self.release(who))

    def on_async_done(self, token: Any, who: Any, loc) -> None:
        """`who` waited for `token` (wgmma_wait, tma_store_wait, cp_async_wait): the reads and writes under
        it are complete now, at `who`'s current point."""
        e = self.clock(who)[who]
        for acc in self.tokens.pop(token, ()):
            acc.epoch, acc.token = e, None

    # ---------------------------------------------------------------- shared memory

    def attach(self, view: SmemView, who: Any, loc: Loc | None) -> None:
        """Watch a region made by smem_alloc; its elements already written (an initial value) count as a
        register write by `who`."""
        region = view.region
        if region.observer is not None:
            return
        region.observer = self
        written = SmemView(region).written_mask().reshape(region.stages, -1).any(axis=1)
        for s in range(region.stages):
            if written[s]:
                self._span(region, s).write = _Write(who, self.clock(who)[who], "generic", loc)

    def _span(self, region: SmemRegion, s: int) -> _Span:
        lo = region.offset + s * region.stage_bytes
        spans = self.spans.setdefault(region.storage, {})
        sp = spans.get((lo, lo + region.stage_bytes))
        if sp is None:
            sp = spans[(lo, lo + region.stage_bytes)] = _Span(lo, lo + region.stage_bytes, _stage_name(region, s))
        return sp

    def _overlapping(self, region: SmemRegion, sp: _Span) -> list[_Span]:
        """The tracked spans of the allocation that share bytes with `sp` (itself first)."""
        return [sp] + [o for o in self.spans[region.storage].values() if o is not sp and o.lo < sp.hi and sp.lo < o.hi]

    def on_smem(self, view: SmemView, who: Any, kind: str, proxy: str, loc, via: Any = None) -> None:
        region = view.region
        stages = range(region.stages) if view.stage is None else (view.stage,)
        if kind == "read":
            self._check_written(view, who, loc)
            for s in stages:
                self._read(region, self._span(region, s), who, proxy, loc, via)
        else:
            for s in stages:
                self._write(region, self._span(region, s), who, proxy, loc, via)

    def _check_written(self, view: SmemView, who: Any, loc) -> None:
        mask = view.written_mask()
        if mask.all():
            return
        region = view.region
        if view.stage is None and region.stages > 1:
            s = int(np.argmin(mask.reshape(region.stages, -1).all(axis=1)))
            mask = mask[s]
        else:
            s = view.stage or 0
        n, missing = mask.size, int(mask.size - np.count_nonzero(mask))
        what = _stage_name(region, s)
        if missing == n:
            raise InterpretError(
                f"{actor(who)} reads {what} before anything was written to it: no store has run and no TMA load "
                f"into it has landed; store or load it first (and wait on the load's mbarrier phase){self._hint(who)}",
                loc)
        raise InterpretError(f"{actor(who)} reads {what}, of which {missing} of {n} elements were never written", loc)

    def _hint(self, who: Any) -> str:
        """Why a read after a wait found nothing: the wait returned at once, on a barrier never completed."""
        bar, wloc, parity, phase = self.last_wait.get(who, (None, None, 0, 0))
        if bar is None or phase != 0 or not parity & 1:
            return ""
        return (f"; its last wait, on mbarrier {self.label(bar)}{_at(wloc)} with parity 1, returned at once: a fresh "
                "barrier counts the phase before its first as complete, so a wait for its first completion takes "
                "parity 0 (a wait with the wrong phase)")

    def _read(self, region: SmemRegion, sp: _Span, who: Any, proxy: str, loc, via: Any) -> None:
        c = self.clock(who)
        for o in self._overlapping(region, sp):
            w = o.write
            if w is None:
                continue
            if w.bar is not None:
                if c.get(w.bar, 0) < w.completion:
                    raise InterpretError(self._unwaited(sp, who, w), loc)
            elif w.token is not None:
                raise InterpretError(
                    f"{actor(who)} reads {sp.name} while the cp.async copies into it{_at(w.loc)} are in flight: "
                    f"{'wait for them' if w.who == who else 'the copying role must wait for them'} (cp_async_commit, "
                    "then cp_async_wait) before the read, or hand them to an mbarrier this role waits on "
                    "(bar.arrive_after_copies() before the arrive that completes its phase)", loc)
            elif w.who != who and c.get(w.who, 0) < w.epoch:
                raise InterpretError(
                    f"{actor(who)} reads {sp.name}, which {actor(w.who)} wrote{_at(w.loc)} with nothing ordering "
                    "that write before this read: have the writer arrive on an mbarrier (or a named barrier) after "
                    "its write and this role wait on it before reading", loc)
            if proxy == "async" and w.proxy == "generic" and w.bar is None and w.token is None:
                if w.fence is None or (w.who != who and c.get(w.who, 0) < w.fence):
                    by = "" if w.who == who else f" by {actor(w.who)}"
                    raise InterpretError(
                        f"an async-proxy read (TMA store or WGMMA) of {sp.name} by {actor(who)}, last written from "
                        f"registers{by}{_at(w.loc)} with no fence_async_shared() by the writer between that write "
                        "and this read: the async proxy may read the old bytes; call fence_async_shared() after "
                        "the store (in the writing role) and before this op", loc)
        r = _Read(who, None if via is not None else c[who], loc, via, via is not None)
        sp.reads = [x for x in sp.reads if x.who != who or x.epoch is None] + [r]
        if via is not None:
            self.tokens.setdefault(via, []).append(r)

    def _unwaited(self, sp: _Span, who: Any, w: _Write) -> str:
        seen = self.clock(who).get(w.bar, 0)
        phase = w.completion - 1
        bar = self.label(w.bar)
        if (who, w.bar) not in self.waited:
            why = "it has not waited on that barrier"
        elif seen == 0:
            why = ("its wait on it returned before any phase had completed (a wait with the wrong parity returns at "
                   "once)")
        else:
            why = (f"the last phase it has seen complete is {seen - 1} (a wait with the wrong parity returns at "
                   "once)")
        done, subject, verb = ("has", "load", "completes") if w.what == "TMA load" else ("have", "copies", "complete")
        return (f"{actor(who)} reads {sp.name} before the {w.what} into it{_at(w.loc)} {done} completed for it: the "
                f"{subject} {verb} phase {phase} (parity {phase & 1}) of mbarrier {bar}, and {why}; wait on {bar} "
                f"with parity {phase & 1} before reading")

    def _write(self, region: SmemRegion, sp: _Span, who: Any, proxy: str, loc, via: Any) -> None:
        c = self.clock(who)
        spans = self._overlapping(region, sp)
        for o in spans:
            for r in o.reads:
                if r.epoch is None:
                    whose = "its own" if r.who == who else f"{actor(r.who)}'s"
                    raise InterpretError(
                        f"{actor(who)} overwrites {sp.name} while {whose} async read of it (WGMMA or TMA store"
                        f"{_at(r.loc)}) is still in flight: wait for it (wgmma_wait / tma_store_wait) before "
                        f"{'this write' if r.who == who else 'releasing the stage, and this role for the release'}",
                        loc)
                if r.who != who and c.get(r.who, 0) < r.epoch:
                    late = (" (an async read ends at the reader's wgmma_wait / tma_store_wait: release the stage "
                            "after that)") if r.was_async else ""
                    raise InterpretError(
                        f"{actor(who)} overwrites {sp.name} while it is still in use: {actor(r.who)} read it"
                        f"{_at(r.loc)} and that read is not ordered before this write; the reader must release the "
                        f"stage (arrive on its 'empty' mbarrier after the read{late}) and this role wait on that "
                        "release before writing", loc)
            w = o.write
            if w is None:
                continue
            if w.bar is not None and c.get(w.bar, 0) < w.completion:
                raise InterpretError(
                    f"{actor(who)} overwrites {sp.name} while it is still in use: the {w.what} into it"
                    f"{' at ' + str(w.loc) if w.loc else ''}, completing phase {w.completion - 1} of mbarrier "
                    f"{self.label(w.bar)}, has not been consumed and released to this role; wait for the consumer's "
                    "release of the stage (its 'empty' "
                    "mbarrier) before filling it again (a producer running ahead of its ring)", loc)
            if w.token is not None:
                raise InterpretError(f"{actor(who)} overwrites {sp.name} while cp.async copies into it{_at(w.loc)} are "
                                     "in flight: wait for them (cp_async_wait) first", loc)
            if w.bar is None and w.who != who and c.get(w.who, 0) < w.epoch:
                raise InterpretError(
                    f"{actor(who)} overwrites {sp.name}, which {actor(w.who)} wrote{_at(w.loc)}, with nothing "
                    "ordering the two writes; put a barrier between them", loc)
        nw = _Write(who, c[who], proxy, loc)
        if isinstance(via, MBarrier):
            bc = self._sync(via)
            nw.bar, nw.completion = via, via.phase + 1
            join(bc.pending, c)
        elif via is not None:
            nw.token = via
            self.tokens.setdefault(via, []).append(nw)
        for o in spans:
            if o is sp or (sp.lo <= o.lo and o.hi <= sp.hi):     # the spans this write covers whole
                o.write, o.reads = nw, []


__all__ = ["HazardTracker", "actor", "join"]
