"""PTX post-pass: a consumer warpgroup releases its ring stages and waits for the next one without a
barrier of its warps, as CUTLASS's and cuBLAS's consumers do.

Triton 3.6's Membar analysis treats every mbarrier op as an access to the shared-memory allocation that
holds the barriers, and the lowering of a single-thread `mbarrier.arrive` syncs the whole partition
first. So each k-step of a consumer partition that is one warpgroup (128 threads: gemm_sm90's
SPLIT_WGS roles) passes two `bar.sync id, 128`: one before it waits on the stage's `ready` barrier and
one before thread 0 arrives on the previous stage's `empty` barrier (and one more for the last stage
of each tile). Neither orders anything the kernel needs:

* before the wait: `mbarrier.try_wait` only reads the barrier's phase; the ops of other threads on
  other barriers (the arrive of the step before) are atomic barrier operations that need no order
  against it;
* before the arrive: it follows `wgmma.wait_group` in the arriving thread. A WGMMA is one operation of
  the whole warpgroup (every warp issues it, `.sync.aligned`), so once any warp's `wait_group` returns,
  the warpgroup's group is complete and its shared-memory reads are done; CUTLASS's
  `PipelineTmaAsync::consumer_release` arrives from one thread per warpgroup right after
  `warpgroup_wait` on the same rule.

The pass comments out exactly those barriers: an unpredicated `bar.sync`/`barrier.sync` with a thread
count of 128 whose next instruction is an `mbarrier.try_wait`, or is a predicated local
`mbarrier.arrive.shared::cta` (not an expect-tx, not a remote arrive) reached from a
`wgmma.wait_group` through nothing but arithmetic and forward conditional branches (no label in
between: no other path reaches the arrive). Barriers of 256 threads (two warpgroups sharing one
accumulator, where thread 0's `wait_group` says nothing about the other warpgroup) and every other
barrier (the epilogue's, around the staging tile and the TMA store) are left alone. The kernel asks for
it (`gl.set_lean_release()`); where nothing matches, the pass says so (`skipped`).
"""
from __future__ import annotations

from .hashing import file_hash
from .scan import BARRIER, barrier_args, is_plain, statements


def source_hash() -> str:
    """This pass's source, for the compile cache key of the kernels it rewrites."""
    return file_hash(__file__)

WARPGROUP_THREADS = 128


def _next(lines: list[str], i: int):
    """The instruction after line i: (line, code, match or None), or None at the end or at a label. A
    label that opens an inline-asm block (Triton's `{ .reg .pred complete; waitLoop: mbarrier.try_wait
    ...; @!complete bra.uni waitLoop; }`) is the block's own loop, which no other code can jump to: the
    instruction after it counts."""
    it = statements(lines, i + 1)
    nxt = next(it, None)
    if nxt is not None and nxt[2] == "label":
        opened = any(ln.strip() == "{" for ln in lines[i + 1:nxt[0]])
        nxt = next(it, None) if opened else None
        if nxt is not None and nxt[2] == "label":
            return None
    return nxt


def _after_wgmma_wait(lines: list[str], i: int) -> bool:
    """Whether the code before line i comes straight from a `wgmma.wait_group`: walking back, only
    arithmetic and conditional branches (paths leaving, not entering) until the wait; no label."""
    for _, _, m in statements(lines, i - 1, step=-1):
        if m is None or m == "label":
            return False
        op = m.group("op")
        if op.startswith("wgmma.wait_group"):
            return True
        if not (is_plain(op) or (op.startswith("bra") and m.group("pred"))):
            return False
    return False


def _release_kind(lines: list[str], i: int, m) -> str | None:
    """"wait" or "arrive" when the barrier at line i is one the pass removes, else None."""
    args = barrier_args(m)
    if args is None or m.group("pred") or args.group("count") != str(WARPGROUP_THREADS):
        return None
    nxt = _next(lines, i)
    if nxt is None or nxt[2] is None:
        return None
    op, pred = nxt[2].group("op"), nxt[2].group("pred")
    if op.startswith("mbarrier.try_wait"):
        return "wait"
    if (op.startswith("mbarrier.arrive.shared::cta") and "expect_tx" not in op and pred
            and _after_wgmma_wait(lines, i)):
        return "arrive"
    return None


def rewrite(ptx: str, kernel: str) -> tuple[str, dict]:
    """The PTX without the consumer warpgroups' per-stage barriers; stats {"removed": n, "wait": n,
    "arrive": n} or {"removed": 0, "skipped": why}."""
    lines = ptx.split("\n")
    found = {"wait": [], "arrive": []}
    for i, _, m in statements(lines, 0):
        if m not in (None, "label") and BARRIER.match(m.group("op")):
            kind = _release_kind(lines, i, m)
            if kind:
                found[kind].append(i)
    removed = found["wait"] + found["arrive"]
    if not removed:
        return ptx, {"removed": 0, "skipped": f"no {WARPGROUP_THREADS}-thread barrier before a stage wait or "
                                              f"a release after wgmma.wait_group in {kernel}"}
    for i in removed:
        lines[i] = "\t// gluon lean_release: " + lines[i].strip()
    return "\n".join(lines), {"removed": len(removed), "wait": len(found["wait"]), "arrive": len(found["arrive"])}
