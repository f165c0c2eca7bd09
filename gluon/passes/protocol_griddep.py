"""The programmatic-dependent-launch checks of check_protocol (gluon/passes/protocol_checks.py). A kernel that
calls `gl.griddep_wait()` is launched as a programmatic dependent: it may start while the kernel before it on the
stream still runs, and only the wait orders it after that kernel's writes. So:

* GL206: a global-memory access (load, store, atomic, TMA copy, cp.async) before the wait in program order: it
  may read what the kernel before has not written yet, or write what that kernel still reads.
* GL207: the wait inside an `if`, a loop or a warp role: what runs in the other branch, before the loop or in
  the other roles is not ordered after it. Once at the kernel's top level, before the roles, orders everything.
"""
from __future__ import annotations

from .. import ir
from .analysis import Site
from .protocol_common import at, err

GLOBAL_ACCESS = frozenset({"load", "store", "atomic_rmw", "atomic_cas", "tma_load", "tma_store", "cp_async"})


def check_griddep(ordered: list[ir.Op], where: dict[ir.Op, Site]) -> None:
    waits = [op for op in ordered if op.kind == "griddep_wait"]
    if not waits:
        return
    for w in waits:
        if where[w].parents:
            inner = where[w].parents[-1]
            what = {"if": "an `if`", "for": "a `for` loop", "warp_specialize": "a warp role"}.get(inner.kind, inner.kind)
            raise err("GL207", f"gl.griddep_wait() is inside {what} ({at(inner)}): the kernel's other branches, "
                               "iterations or roles are not ordered after it; call it once at the kernel's top level, "
                               "before the warp roles and every global-memory access", w.loc)
    first = waits[0]
    for op in ordered:
        if op is first:
            return
        if op.kind in GLOBAL_ACCESS:
            raise err("GL206", f"{at(op)} reaches global memory before gl.griddep_wait() (at {first.loc}): the "
                               "kernel is launched as a programmatic dependent and may start while the kernel before "
                               "it still runs; move the access after the wait", op.loc)
