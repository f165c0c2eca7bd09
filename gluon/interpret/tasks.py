"""Warp roles as cooperative tasks (issue 20, item 2): a `warp_specialize` section runs each role's region
as a task of its own, sharing the program's shared memory and barriers, exactly one task running at a
time.

Why threads with a baton and not generators: a role's ops are run by the same recursive `run_region`
(and the `for` / `if` rules) as any program's, and a blocking wait can sit at any depth of them; a
thread per role keeps that code as it is, and the baton (one semaphore per task, handed back to the
scheduler at each blocking point) makes the run deterministic. The scheduler runs the roles in their
order in the section (the order of the `with warp_role(...)` blocks), each until it blocks or ends,
then the next one (round robin) whose wait is satisfied. Switching only at blocking points keeps it
cheap: a GEMM's roles switch a few times per ring pass, not per op. A seeded schedule also switches after
each arrive (`yield_after`), so a role that hands work on and keeps going can be overtaken there.

When no live task can go on, that is a deadlock: one `DeadlockError` listing every role with the line it
waits at and the state of what it waits for. A wait that returns at once never switches, so one task
(a program without roles, or the code around a section) that waits for something nothing will complete
is the same error at once. A time budget (`TIME_BUDGET_S`) guards the whole program against a role that
never reaches a blocking point; an error in a role stops every other role (each is parked at a blocking
point; it unwinds from there) before it propagates, so no thread outlives the launch.
"""
from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..ir import Op, Region
from ..types import GluonError, Loc
from .hazards import HazardTracker, actor
from .ops import InterpretError, rule
from .shared import BarrierView

TIME_BUDGET_S = 600.0     # wall-clock seconds one program's warp-specialized section may take
SCHEDULE_ENV = "GLUON_INTERPRET_SCHEDULE"


def check_schedule(schedule) -> str | int:
    """`schedule` as the scheduler takes it: "in_order" (round robin in section order, the default),
    "reverse" (round robin from the last role), or an int seed (a seeded random pick among the roles that
    can go on, at every switch, and a switch after every arrive); None reads GLUON_INTERPRET_SCHEDULE (unset:
    "in_order")."""
    if schedule is None:
        schedule = os.environ.get(SCHEDULE_ENV, "").strip() or "in_order"
        if isinstance(schedule, str) and schedule.isdigit():
            schedule = int(schedule)
    if schedule in ("in_order", "reverse") or (type(schedule) is int and schedule >= 0):
        return schedule
    raise GluonError(f"interpreter schedule={schedule!r}: use 'in_order', 'reverse' or a seed (an int >= 0), "
                     f"as an argument or in {SCHEDULE_ENV}")


@dataclass(frozen=True)
class Role:
    """One warp role of a section: its place in the section, its name and its warps (first, last)."""

    index: int
    name: str
    first: int
    last: int

    @property
    def threads(self) -> int:
        return (self.last - self.first + 1) * 32

    def __str__(self) -> str:
        return f"{self.name} (warps {self.first}..{self.last})"


@dataclass(eq=False)
class NamedBarrier:
    """One hardware named barrier (bar.sync / bar.arrive): the threads counted in the generation in
    progress, the count that completes it, and the clocks released into each generation."""

    bid: int
    need: int = 0
    arrived: int = 0
    generation: int = 0
    clocks: dict = field(default_factory=dict)     # generation -> the clock its participants released
    members: set = field(default_factory=set)      # the roles counted in the generation in progress


@dataclass(eq=False)
class Cta:
    """A program's on-chip state that its roles share: the hazard tracker (the observer of its shared
    regions), its named barriers, and the running section's scheduler."""

    pid: tuple
    rank: int
    num_warps: int
    observer: HazardTracker = field(default_factory=HazardTracker)
    named: dict = field(default_factory=dict)      # barrier id -> NamedBarrier
    sched: "Scheduler | None" = None
    schedule: str | int = "in_order"               # check_schedule's values: how the sections pick roles

    @property
    def where(self) -> str:
        return f"program {self.pid[:self.rank]}"


class Wait(Protocol):
    op: Op

    def ready(self) -> bool: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class MbarWait:
    """Waiting for the phase of parity `parity` of one mbarrier to complete."""

    op: Op
    view: BarrierView
    parity: int

    def ready(self) -> bool:
        return self.view.one.completed(self.parity)

    def describe(self) -> str:
        b = self.view.one
        name = f"'{self.view.name}'" + (f"[{self.view.index}]" if self.view.index is not None else "")
        return (f"mbarrier {name} for parity {self.parity & 1}: its phase {b.phase} (parity {b.phase & 1}) has "
                f"{max(b.pending, 0)} of {b.count} arrivals pending and {max(b.tx, 0)} tx bytes outstanding")


@dataclass(frozen=True)
class NamedWait:
    """Waiting at a named barrier (or a CTA-wide meeting point) for generation `generation` to complete."""

    op: Op
    bar: NamedBarrier
    generation: int
    what: str

    def ready(self) -> bool:
        return self.bar.generation > self.generation

    def describe(self) -> str:
        return f"{self.what}: {self.bar.arrived} of {self.bar.need} threads have arrived"


@dataclass(frozen=True)
class Passed:
    """No wait at all: a seeded schedule's switch point after an arrive (`yield_after`)."""

    op: Op

    def ready(self) -> bool:
        return True

    def describe(self) -> str:
        return "nothing (a switch point after an arrive)"


class DeadlockError(InterpretError):
    """Every live task of a program waits for something no task will do. The message lists each role's
    line and source itself, so the source line is not repeated after it."""

    def _format(self) -> str:
        if self.loc is None:
            return self.message
        return f"{self.loc}" + (f" (in {self.loc.func})" if self.loc.func else "") + f": {self.message}"


class _Abort(BaseException):
    """Unwinds a parked task when the section is being torn down (not an Exception: rules do not catch it)."""


def _line(loc: Loc | None) -> str:
    if loc is None:
        return "(no source line)"
    src = loc.source_line()
    return f"{loc}" + (f" (in {loc.func})" if loc.func else "") + (f"\n        {src}" if src else "")


class Task:
    """One role's thread. It runs only while it holds the baton: `go` released by the scheduler, `back`
    released by the task when it blocks or ends."""

    def __init__(self, sched: "Scheduler", prog, region: Region, role: Role):
        self.sched, self.prog, self.region, self.role = sched, prog, region, role
        self.go = threading.Semaphore(0)
        self.waiting: Wait | None = None
        self.started = self.done = False
        self.result: list = []
        self.error: BaseException | None = None
        self.stopped_at: Op | None = None
        self.thread = threading.Thread(target=self._main, name=f"gluon-role-{role.index}", daemon=True)

    def _main(self) -> None:
        self.go.acquire()
        try:
            if not self.sched.aborting:
                with np.errstate(all="ignore"):  # as run_kernel's (numpy's error state is per thread)
                    self.result = self.prog.run_region(self.region, [])
        except _Abort:
            pass
        except BaseException as e:       # handed to the scheduler, raised there
            self.error = e
        finally:
            self.done = True
            self.waiting = None
            self.sched.back.release()

    def block(self, wait: Wait) -> None:
        self.waiting = wait
        self.sched.back.release()
        self.go.acquire()
        self.waiting = None
        if self.sched.aborting:
            raise _Abort()

    def stop(self, op: Op) -> None:
        """Called by run_region between ops while the section is torn down (the time budget ran out)."""
        self.stopped_at = op
        raise _Abort()


class Scheduler:
    """Runs a section's tasks one at a time, switching at blocking points: round robin in section order, in
    reverse order, or a seeded random pick among those that can go on (`Cta.schedule`)."""

    def __init__(self, cta: Cta, op: Op):
        self.cta, self.op = cta, op
        self.tasks: list[Task] = []
        self.back = threading.Semaphore(0)
        self.aborting = False

    def run(self) -> list[list]:
        for t in self.tasks:
            t.thread.start()
        try:
            self._loop()
        finally:
            self._teardown()
        return [t.result for t in self.tasks]

    def _loop(self) -> None:
        deadline = time.monotonic() + TIME_BUDGET_S
        schedule = self.cta.schedule
        order = self.tasks[::-1] if schedule == "reverse" else self.tasks
        rng = random.Random(f"{schedule}:{self.cta.pid}") if type(schedule) is int else None
        cur, n = -1, len(order)
        while True:
            pick = None
            if rng is not None:                    # a seeded pick among the roles that can go on
                ready = [t for t in order if not t.done and (t.waiting is None or t.waiting.ready())]
                pick = rng.choice(ready) if ready else None
            else:
                for k in range(1, n + 1):
                    t = order[(cur + k) % n]
                    if not t.done and (t.waiting is None or t.waiting.ready()):
                        pick, cur = t, (cur + k) % n
                        break
            if pick is None:
                if all(t.done for t in self.tasks):
                    return
                raise self._deadlock()
            pick.started = True
            pick.go.release()
            if not self.back.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
                self.aborting = True
                self.back.acquire()
                at = f" at {_line(pick.stopped_at.loc)}" if pick.stopped_at is not None else ""
                raise InterpretError(
                    f"{self.cta.where}: the warp roles ran past the interpreter's time budget ({TIME_BUDGET_S:g} s, "
                    f"gluon.interpret.tasks.TIME_BUDGET_S); role {pick.role} was running{at}", self.op.loc)
            if pick.error is not None:
                err = pick.error
                if isinstance(err, GluonError):
                    raise err.with_traceback(None)
                raise err

    def _deadlock(self) -> DeadlockError:
        lines, first = [], None
        for t in self.tasks:
            w = t.waiting
            if t.done:
                lines.append(f"  role {t.role}: finished")
            elif w is not None:
                first = first or w.op.loc
                lines.append(f"  role {t.role} waits at {_line(w.op.loc)}\n      on {w.describe()}")
        return DeadlockError(
            f"deadlock in {self.cta.where}: every warp role still running is blocked, so none can go on:\n"
            + "\n".join(lines) + "\n" + _FIX, first or self.op.loc)

    def _teardown(self) -> None:
        """Stop every task still parked (at a blocking point, or not started) and join all threads."""
        self.aborting = True
        for t in self.tasks:
            if not t.done:
                t.go.release()
                self.back.acquire()
        for t in self.tasks:
            t.thread.join()


_FIX = ("a phase completes once `count` arrivals (arrive, and expect counting one) and every byte it expects "
        "have reached it, and a named barrier once its thread count has arrived: check each barrier's count "
        "against the arrives on it, and the phase parity each wait waits for")


def yield_after(it, op: Op) -> None:
    """Under a seeded schedule, let the scheduler pick any role that can go on (this one included) after an
    arrive: a role that only arrives never blocks, so without this the roles it hands work to never run between
    its arrive and its next wait, and a protocol that needs them to (a named barrier's partner counted in before
    the role arrives again) would never be tried."""
    if it.task is not None and type(it.cta.schedule) is int:
        it.task.block(Passed(op))


def block(it, wait: Wait) -> None:
    """Wait until `wait` is ready: at once if it is, else switch to the other roles (a deadlock if `it`
    runs no role: nothing else would run)."""
    if wait.ready():
        return
    task = it.task
    if task is None:
        raise DeadlockError(
            f"deadlock in {it.cta.where}: {actor(it.who)} waits at {_line(wait.op.loc)}\n      on {wait.describe()}"
            "\n  and no warp role is running that could complete it\n" + _FIX, wait.op.loc)
    task.block(wait)


@rule("warp_specialize")
def _warp_specialize(it, op, args):
    if it.task is not None:
        raise InterpretError("warp_specialize cannot nest inside a warp role", op.loc)
    roles = op.attrs["roles"]
    whos = [Role(i, str(r["role"]), int(r["warps"][0]), int(r["warps"][1])) for i, r in enumerate(roles)]
    defaults = [i for i, r in enumerate(roles) if r.get("default", int(r["warps"][0]) == 0)]
    if len(defaults) != 1:
        raise InterpretError(f"exactly one warp role must hold warp 0 (the default role), found {len(defaults)}",
                             op.loc)
    cta = it.cta
    cta.observer.fork(it.who, whos)
    sched = Scheduler(cta, op)
    sched.tasks = [Task(sched, None, region, who) for region, who in zip(op.regions, whos)]
    for t in sched.tasks:
        t.prog = it.spawn(t.role, t)
    cta.sched = sched
    try:
        results = sched.run()
    finally:
        cta.sched = None
    cta.observer.join_roles(it.who, whos)
    return results[defaults[0]]


__all__ = ["Cta", "DeadlockError", "MbarWait", "NamedBarrier", "NamedWait", "Role", "SCHEDULE_ENV", "Scheduler",
           "TIME_BUDGET_S", "block", "check_schedule"]
