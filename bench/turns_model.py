"""A queueing model of consumer warpgroups taking turns (gluon/kernels/turns.py), no GPU needed.

    python3 bench/turns_model.py [--warpgroups 3] [--gemm 256,256] [--softmax 528] [--blocks 300] [--json PATH]

Each warpgroup loops over key blocks: its S GEMM, its softmax, its P V GEMM, each waited for before the next
("serial"), or FlashAttention-3's intra-warpgroup overlap ("overlapped": S_j and P V_(j-1) issued together, S_j
waited for, its softmax while P V_(j-1) runs, then P V_(j-1) waited for).
The tensor cores serve the GEMMs in flight together, each at 1/n of the rate when n are in flight ("shared":
what D64's three lockstep warpgroups look like on the H200, a tensor pipe 53% busy) or one at a time in issue
order ("fifo"); the special function unit (the softmax's exp2s) is shared the same way among the softmaxes in
flight. Turns are round robins over the warpgroups: of the S GEMMs, of the P V GEMMs, or both (two rings),
handed on at the GEMM's issue or once it is done ("held"); in the overlapped loop a turn covers a step's two
issues and is handed on at the issue or once S is done. A row is the tensor cores' busy share. The cycles
are per warpgroup alone: at D64 with 128-key blocks each GEMM is 64x128x64 MACs at 2048 a clock (256), the
softmax 66 exp2s a thread at 16 a clock an SM (528). The model leaves out everything else (loads, barriers,
issue slots), so it ranks schedules; it does not predict TFLOP/s.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.common import table, write_json  # noqa: E402

SCHEDULES = (("no turns", (), False), ("S turns at issue", ("S",), False), ("S turns held", ("S",), True),
             ("P V turns held", ("PV",), True), ("both held (two rings)", ("S", "PV"), True))
OVERLAPPED = (("no turns", "none"), ("turns at issue", "issue"), ("turns held (S done)", "held"))


def _advance(served: list[list], jobs: list[list], phase: list[str], left: list[float], after_softmax: str,
             what: str) -> tuple[float, list[list]]:
    """Run the units to the next completion: the GEMMs in `served` and the softmaxes in flight each at their
    share of the unit's rate. (the time passed, the GEMM jobs done, taken out of `jobs`); a softmax done moves
    its warpgroup to `after_softmax`."""
    exp = [g for g, ph in enumerate(phase) if ph == "softmax"]
    if not served and not exp:              # every warpgroup waits for a turn no one hands on
        raise RuntimeError(f"the schedule {what} deadlocks")
    dt = min([j[1] * len(served) for j in served] + [left[g] * len(exp) for g in exp])
    for job in served:
        job[1] -= dt / len(served)
    for g in exp:
        left[g] -= dt / len(exp)
        if left[g] <= 1e-9:
            phase[g] = after_softmax
    finished = [j for j in served if j[1] <= 1e-9]
    for job in finished:
        jobs.remove(job)
    return dt, finished


def busy_share(warpgroups: int, s: float, pv: float, softmax: float, blocks: int, gated: tuple, held: bool,
               tensor: str = "shared") -> float:
    """The tensor cores' busy share over `blocks` key blocks a warpgroup (event by event: between two
    completions every GEMM and softmax in flight advances at its share of its unit's rate)."""
    phase = ["issue S"] * warpgroups
    left = [0.0] * warpgroups
    done = [0] * warpgroups
    jobs: list[list] = []                    # [warpgroup, work left, "S" | "PV"], in issue order
    turn = {"S": 0, "PV": 0}
    t = busy = 0.0
    while min(done) < blocks:
        for g in range(warpgroups):
            for kind, work in (("S", s), ("PV", pv)):
                if phase[g] == "issue " + kind and (kind not in gated or turn[kind] == g):
                    jobs.append([g, work, kind])
                    phase[g] = kind
                    if kind in gated and not held:
                        turn[kind] = (turn[kind] + 1) % warpgroups
        served = jobs[:1] if tensor == "fifo" else jobs
        working = bool(served)
        dt, finished = _advance(served, jobs, phase, left, "issue PV", str(gated))
        busy += dt if working else 0.0
        for job in finished:
            g, kind = job[0], job[2]
            if kind in gated and held:
                turn[kind] = (turn[kind] + 1) % warpgroups
            if kind == "S":
                phase[g], left[g] = "softmax", softmax
            else:
                phase[g] = "issue S"
                done[g] += 1
        t += dt
    return busy / t


def busy_share_overlapped(warpgroups: int, s: float, pv: float, softmax: float, blocks: int, turns: str) -> float:
    """The overlapped loop's busy share; `turns`: "none", "issue" (handed on after a step's two issues) or "held"
    (handed on once the step's S is done, its P V left in flight). GEMMs and softmaxes in flight share their units."""
    phase = ["issue"] * warpgroups
    left = [0.0] * warpgroups
    done = [0] * warpgroups
    flying = [set() for _ in range(warpgroups)]
    jobs: list[list] = []
    turn = 0
    t = busy = 0.0
    while min(done) < blocks:
        for g in range(warpgroups):
            if phase[g] == "issue" and (turns == "none" or turn == g):
                jobs.append([g, s, "S"])
                flying[g].add("S")
                if done[g]:                     # P V of the previous block (none before the first)
                    jobs.append([g, pv, "PV"])
                    flying[g].add("PV")
                phase[g] = "wait S"
                if turns == "issue":
                    turn = (turn + 1) % warpgroups
        working = bool(jobs)
        dt, finished = _advance(jobs, jobs, phase, left, "wait PV", repr(turns))
        busy += dt if working else 0.0
        for job in finished:
            g, kind = job[0], job[2]
            flying[g].discard(kind)
            if kind == "S":
                phase[g], left[g] = "softmax", softmax
                if turns == "held":
                    turn = (turn + 1) % warpgroups
        for g in range(warpgroups):
            if phase[g] == "wait PV" and "PV" not in flying[g]:
                phase[g] = "issue"
                done[g] += 1
        t += dt
    return busy / t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--warpgroups", default="2,3", help="comma list of warpgroup counts (default 2,3)")
    p.add_argument("--gemm", default="256,256", help="S and P V GEMM cycles of one warpgroup alone (default 256,256)")
    p.add_argument("--softmax", default="400,528,650", help="comma list of softmax cycles (default 400,528,650)")
    p.add_argument("--blocks", type=int, default=300, help="key blocks a warpgroup (default 300)")
    p.add_argument("--json", metavar="PATH", help="write every row here")
    args = p.parse_args()
    try:
        wgs = [int(w) for w in args.warpgroups.split(",")]
        s, pv = (float(x) for x in args.gemm.split(","))
        softmaxes = [float(x) for x in args.softmax.split(",")]
    except ValueError:
        p.error("--warpgroups, --gemm and --softmax take comma lists of numbers (--gemm exactly two)")
    if args.blocks < 1 or min(wgs) < 1 or min(s, pv, *softmaxes) <= 0:
        p.error("--blocks, --warpgroups, --gemm and --softmax take positive values")
    rows = []
    for tensor in ("shared", "fifo"):
        for w in wgs:
            for sm in softmaxes:
                row = dict(tensor=tensor, warpgroups=w, softmax=sm)
                for name, gated, held in SCHEDULES:
                    row[name] = busy_share(w, s, pv, sm, args.blocks, gated, held, tensor)
                rows.append(row)
    overlapped = []
    for w in wgs:
        for sm in softmaxes:
            overlapped.append(dict(tensor="shared", warpgroups=w, softmax=sm, **{
                name: busy_share_overlapped(w, s, pv, sm, args.blocks, turns) for name, turns in OVERLAPPED}))
    write_json(args.json, rows + [dict(r, loop="overlapped") for r in overlapped],
               dict(gemm=[s, pv], blocks=args.blocks, complete=True))
    cols = [("tensor", "tensor", ""), ("WGs", "warpgroups", ""), ("softmax", "softmax", ".0f")]
    print("serial loop: the tensor cores' busy share (1.0 = always busy)")
    print(table(rows, cols + [(name, name, ".3f") for name, _, _ in SCHEDULES]))
    print("\noverlapped loop (GEMMs in flight share the tensor cores)")
    print(table(overlapped, cols + [(name, name, ".3f") for name, _ in OVERLAPPED]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
