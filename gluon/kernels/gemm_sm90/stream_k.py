"""STREAM_K: the persistent GEMM's k-steps dealt out evenly to the programs, whole tiles or not.

Where the output tiles do not fill the GPU (decode rows of 112 tiles on 132 SMs, a few tiles over a deep K),
the k-steps of all tiles, tile after tile in the grouped order (`num_tiles * k_tiles` of them), are cut into
one contiguous run per program, `cdiv(total, programs)` long. A program's run crosses tiles: its first and
last tile may be shared with its neighbours (a middle tile is its alone). Each program that shares a tile
stores its fp32 partial of it into its own workspace slot (two a program: its first tile's and its last's),
then counts itself in on the tile's int32 counter (stores, a release fence, a CTA barrier, a fence, one
relaxed atomic add); the program that counts in last sums every contributor's partial in
k order (so the value does not depend on which arrived last), resets the counter to zero for the next launch
and writes the tile through the kernel's epilogue. Of a tile's two programs (the common case where tiles are
a little fewer than SMs), the first, whose run ends in the tile and so usually finishes after the other, looks
at the counter before storing: if the other has counted in, it adds the other's partial to its own in
registers and stores nothing (half the partial traffic). Nobody waits for anybody: no co-residency is assumed and
the interpreter, which runs programs one at a time, runs it as is. No second kernel, no cluster.

The program ids here are a launch's: STREAM_K runs without clusters. Measurements: docs/PERF.md.
"""
import math

import gluon.language as gl
from gluon.language.nvidia import ptx
from gluon.types import SliceLayout


def span(pid, programs, total):
    """[lo, hi) of the `total` k-steps that program `pid` of `programs` runs (`cdiv(total, programs)` each; the
    last programs may get fewer, or none: then hi <= lo), and that share `per`."""
    per = gl.cdiv(total, programs)
    lo = pid * per
    return lo, gl.minimum(lo + per, total), per


def tiles_of(lo, hi, k_tiles):
    """[first, end) of the tiles whose k-steps the run [lo, hi) touches; empty for an empty run."""
    first = lo // k_tiles
    return first, gl.where(hi > lo, gl.cdiv(hi, k_tiles), first)


def k_range(tile, lo, hi, k_tiles):
    """[k_lo, k_hi): the k-steps of `tile` inside the run [lo, hi) (the whole 0 .. k_tiles of a middle tile)."""
    base = tile * k_tiles
    return gl.maximum(lo - base, 0), gl.minimum(hi - base, k_tiles)


def _slot(W, offs, c, tile, per, k_tiles):
    """Where program `c`'s partial of `tile` lives in W (`offs`: the tile's elements, as acc holds them): slot
    2c for the first tile of its run, 2c + 1 for its last (the only two a run can share)."""
    slot = 2 * c + gl.minimum(tile - c * per // k_tiles, 1)       # (tile >= c's first)
    return W + (slot * math.prod(offs.shape) + offs)


def _partial(W, offs, c, tile, per, k_tiles):
    """Program c's partial of `tile`, read past L1: another SM wrote it."""
    return gl.load(_slot(W, offs, c, tile, per, k_tiles), cache="cg")


def _count(CNT, tile, add: int):
    """CNT[tile] before adding `add` (one thread's relaxed atomic, its value handed to all), then an acquire:
    the fence (the atomic's thread) and a CTA barrier (for the others)."""
    old = gl.atomic_add(CNT + tile, add, sem="relaxed", scope="gpu")
    ptx.fence("acq_rel", "gpu")
    gl.thread_barrier()
    return old


@gl.helper
def fixup(W, CNT, acc, tile, per, k_tiles, pid):
    """(acc, keep): where programs share `tile` (their runs cover parts of its k-steps), this program's partial
    `acc` stored into its slot of W and counted in on CNT[tile]; the last to count in gets the sum of the
    contributors' partials in k order and keep = True, the others keep = False (they store nothing). A tile of
    one program: `acc` as it is, keep = True. W holds two tiles of acc's shape a program (fp32), CNT one int32
    a tile, zero before the launch and after it. The last reads its own partial back from W too: a sum beside
    the partial in registers would hold two tiles (it spilled hundreds of bytes at 128x128); but the first of
    two that finds the other counted in adds the other's partial to its own (one tile beside it)."""
    c0 = tile * k_tiles // per                          # the contributors: programs c0 .. c0 + n - 1
    n = ((tile + 1) * k_tiles - 1) // per - c0 + 1
    keep = n == 1
    ROWS, COLS = acc.shape
    r = gl.arange(0, ROWS, layout=SliceLayout(1, acc.layout))
    c = gl.arange(0, COLS, layout=SliceLayout(0, acc.layout))
    offs = r[:, None] * COLS + c[None, :]               # the tile's elements in a slot, as acc holds them
    pending = n > 1
    if (n == 2) & (pid == c0):
        # the first of two, whose part of the tile ends its run: the other (whose run began in this tile) has
        # most likely counted in already; then its partial is all this one needs (a + b == b + a: the bits of the
        # two-way sum do not depend on which is in registers), and its own is neither stored nor read back
        seen = _count(CNT, tile, 0)
        if seen == 1:
            gl.store(CNT + tile, 0)                     # for the next launch
            acc = acc + _partial(W, offs, c0 + 1, tile, per, k_tiles)
            keep = seen == 1                            # (True and False, as GPU values like the other path's)
            pending = seen == 0
    if pending:
        gl.store(_slot(W, offs, pid, tile, per, k_tiles), acc)
        # release: every thread's partial performed at GPU scope before the barrier, and (the formal model's
        # cumulative release, CUTLASS's barrier -> fence -> relaxed red) the atomic's thread fenced after it
        ptx.fence("acq_rel", "gpu")
        gl.thread_barrier()
        ptx.fence("acq_rel", "gpu")
        keep = _count(CNT, tile, 1) == n - 1
        if keep:                                        # every partial is in W: sum them in k order, past L1
            gl.store(CNT + tile, 0)                     # for the next launch (all n have counted in)
            acc = _partial(W, offs, c0, tile, per, k_tiles)
            if ROWS * COLS <= 64 * 32 * math.prod(acc.layout.warps_per_cta):
                # at most 64 values a thread: two partials' loads in flight at once beside the sum (same order)
                for j in range(1, n - 1, 2):
                    acc = (acc + _partial(W, offs, c0 + j, tile, per, k_tiles)) + \
                        _partial(W, offs, c0 + j + 1, tile, per, k_tiles)
                if (n - 1) % 2 == 1:
                    acc = acc + _partial(W, offs, c0 + n - 1, tile, per, k_tiles)
            else:
                for j in range(1, n):
                    acc = acc + _partial(W, offs, c0 + j, tile, per, k_tiles)
    return acc, keep
