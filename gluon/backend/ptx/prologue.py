"""PTX post-pass: drop the CTA barriers Triton's Membar puts between a kernel's barrier inits and first TMA loads.

Triton 3.6's Membar analysis treats every `mbarrier.init`, `mbarrier.arrive.expect_tx` and TMA copy as
a write of the shared-memory allocation that holds the barrier, so a prologue that initializes a ring of
barriers and issues the first stages' loads gets a `bar.sync` of all the default warps between almost
every pair of them (11 in gemm_sm90's with three early stages). Where every program has one tile they
sit on the path to the first TMA load. Most are not needed:

* the inits, and any expect-tx before the first TMA copy, are issued by one thread (one predicate),
  in program order;
* one barrier is needed between the last init and the first op another thread issues (a TMA copy from
  an elected lane of another warp), so that the barrier it signals is initialized: the pass keeps the
  last barrier before that op;
* after it, expect-tx and TMA copies on a barrier may come in any order: a copy that lands first takes
  the barrier's tx-count below zero, and the phase completes only once the arrival (which brings the
  expect-tx with it) and all the bytes are in, whichever came first. TMA multicast depends on the same
  rule (a peer's copy may land before this CTA's expect-tx; cluster.py's kernels, verified on the
  H200, do that every k-step). Nothing in the span reads what the copies write (the consumers wait on
  the barriers after the warp roles start).

A programmatic dependent's `griddepcontrol.wait` (PDL) may sit in the span too: each thread waits for the kernel
before it ahead of its own next instruction, so the thread that issues a TMA load has waited before it, barriers or
not; `griddepcontrol.launch_dependents` orders nothing of this kernel's.

The span is the default warps' code from the first `mbarrier.init` to the first label or barrier with an
id other than 0; it must end at a barrier of the whole CTA (Triton's warp-specialize start, `barrier.sync
1`), which orders everything in it for every thread. Any instruction in the span that is not integer
arithmetic, predicates, moves, shuffles, elect, parameter loads, an init, an expect-tx, a TMA load, a
`griddepcontrol` or a branch to the span's end (where the whole-CTA barrier follows), and the pass leaves the PTX
as it was and says why (the `skipped` entry of its stats). The kernel asks for it (`gl.set_lean_prologue()`); its precondition, that the
prologue's TMA loads fill distinct buffers, is the kernel's to keep.
"""
from __future__ import annotations

import re

from .hashing import file_hash
from .scan import BARRIER, INSTR, barrier_args, is_plain, statements


def source_hash() -> str:
    """This pass's source, for the compile cache key of the kernels it rewrites."""
    return file_hash(__file__)


def _memory_kind(op: str) -> str | None:
    """"init", "expect" or "copy" for the shared-memory ops the pass understands, else None."""
    if op.startswith("mbarrier.init"):
        return "init"
    if op.startswith("mbarrier.arrive.expect_tx"):
        return "expect"
    if op.startswith("cp.async.bulk.tensor") and ".global.mbarrier" in op:
        return "copy"
    return None


_CAPTURE_STORE = re.compile(r"^\s*\[global_smem\+\d+\]\s*,")


def _ends_at_cta_barrier(lines: list[str], end: int) -> str | None:
    """None when the code after the span reaches a barrier of every thread of the CTA with nothing in
    between but arithmetic, labels and Triton's warp-specialize entry stores (all threads writing their
    slots at fixed shared addresses, `st.shared [global_smem+N]`, which Membar found unrelated to the
    span's barriers and buffers: the original PTX has no barrier between them and the span's last op);
    else why not."""
    for j, code, m in statements(lines, end):
        if m == "label":
            continue
        if m is None:
            return f"line {j + 1} after the prologue is not an instruction the pass knows: {code!r}"
        op = m.group("op")
        if BARRIER.match(op):
            args = barrier_args(m)
            if args is None or args.group("count") is not None or m.group("pred"):
                return f"the prologue ends at a barrier of part of the CTA (line {j + 1}), not of all of it"
            return None
        if op.startswith("st.shared") and _CAPTURE_STORE.match(m.group("rest")):
            continue
        if not is_plain(op):
            return f"{op} at line {j + 1} between the prologue and the barrier of the whole CTA"
    return "the prologue does not end at a barrier of the whole CTA"


def _skip(ptx: str, why: str) -> tuple[str, dict]:
    return ptx, {"removed": 0, "skipped": why}


def rewrite(ptx: str, kernel: str) -> tuple[str, dict]:
    """The PTX without the prologue's unneeded barriers; stats {"removed": n, "kept": [line numbers]} or
    {"removed": 0, "skipped": why}."""
    lines = ptx.split("\n")
    start = next((i for i, ln in enumerate(lines) if "mbarrier.init" in ln and INSTR.match(ln)), None)
    if start is None:
        return _skip(ptx, "no mbarrier.init")
    barriers: list[int] = []
    mem: list[tuple[int, str, str]] = []          # (line, kind, predicate)
    branches: list[tuple[int, str]] = []          # (line, target)
    end, end_label = len(lines), None
    for i, code, m in statements(lines, start):
        if m == "label":
            end, end_label = i, code.rstrip(":").strip()
            break
        if m is None:
            return _skip(ptx, f"line {i + 1} of {kernel}'s PTX is not an instruction the pass knows: {code!r}")
        op, pred = m.group("op"), (m.group("pred") or "").strip()
        kind = _memory_kind(op)
        if BARRIER.match(op):
            args = barrier_args(m)
            if args is None:
                return _skip(ptx, f"barrier with unexpected operands at line {i + 1}: {code!r}")
            if args.group("id") != "0" or pred:
                end = i
                break
            barriers.append(i)
        elif op.startswith("st.shared"):
            end = i                              # the warp-specialize entry's stores (see _ends_at_cta_barrier)
            break
        elif kind:
            mem.append((i, kind, pred))
        elif op.startswith("bra"):
            branches.append((i, m.group("rest").strip()))
        elif op.startswith("griddepcontrol."):
            continue                             # per thread, in program order (see above)
        elif not is_plain(op):
            return _skip(ptx, f"{op} at line {i + 1} of the prologue: only barrier inits, expect-tx, TMA loads "
                              "and arithmetic may sit between the barriers the pass removes")
    why = _ends_at_cta_barrier(lines, end)
    if why:
        return _skip(ptx, why)
    # a branch may only skip ahead to the span's end (no label inside it, so nothing jumps into it): on
    # that path too the whole-CTA barrier comes next, and the ops of other threads are not reached
    for b, target in branches:
        if target != end_label:
            return _skip(ptx, f"the branch at line {b + 1} goes to {target}, not to the end of the prologue")
    if not barriers:
        return _skip(ptx, "no barrier in the prologue")
    owner = mem[0][2]                            # the predicate (thread) that issues the first init
    inits = [i for i, kind, _ in mem if kind == "init"]
    foreign = next((i for i, _, p in mem if p != owner), None)
    keep: list[int] = []
    if foreign is not None:
        if any(i > foreign for i in inits):
            return _skip(ptx, f"a barrier init at line {max(inits) + 1} follows an op of another thread")
        before = [b for b in barriers if inits[-1] < b < foreign]
        if not before:
            return _skip(ptx, "no barrier between the last init and the first op of another thread")
        keep = [before[-1]]
    removed = [b for b in barriers if b not in keep]
    for b in removed:
        lines[b] = "\t// gluon lean_prologue: " + lines[b].strip()
    return "\n".join(lines), {"removed": len(removed), "kept": [k + 1 for k in keep]}
