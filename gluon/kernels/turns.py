"""Consumer warpgroups taking turns with their WGMMAs (FlashAttention-3's ping-pong, section 3.1).

Of `n` warpgroups (2 or 3), warpgroup g waits at named barrier TURN + g before its GEMMs and arrives at
TURN + (g + 1) % n after, so the next one goes while g's non-tensor work (attention's softmax, the fp8
GEMM's promotion) runs. Where the arrive goes decides what the turn orders. Right after the issue (the
attention's overlapped loop) it orders only the issues; warpgroups whose GEMMs are in flight together share
the tensor cores and finish together. After the GEMMs' wait (the attention's serial loop, the fp8 GEMM's
MMA_TURNS) it holds the turn while they run, so the warpgroups' GEMMs run one at a time and each one's
non-tensor work falls under another's GEMM. ptxas places a named barrier's arrive below arithmetic that
does not depend on it: a caller that needs the arrive before such work must make that work depend on
something after the arrive (the fp8 loop reads its scales back from shared memory).
The last warpgroup opens with an arrive (warpgroup 0 goes first) and warpgroup 0 closes with a sync that
takes the last one's final arrive, so no arrive is left pending; all must take as many turns. Used by the
attention kernel (PINGPONG: two warpgroups overlapped, two or three serial) and the GEMM's fp8 block scales
(MMA_TURNS, two or three).
"""
from __future__ import annotations

from gluon.language.nvidia.ampere import named_barrier_arrive, named_barrier_sync

TURN = 8            # named barriers TURN .. TURN + n - 1 (8..15 are the kernel's; Triton 3.6 uses 0..7)
_PAIR = 256         # each barrier joins two warpgroups: the one whose turn it starts, the one before it


def turns_open(g: int, on: bool, n: int = 2) -> None:
    """Before warpgroup g's first turn: the last warpgroup lets warpgroup 0 go first."""
    if on and g == n - 1:
        named_barrier_arrive(TURN, _PAIR)


def turn_begin(g: int, on: bool) -> None:
    """Wait for warpgroup g's turn to issue its WGMMAs (the one before it has issued its own)."""
    if on:
        named_barrier_sync(TURN + g, _PAIR)


def turn_end(g: int, on: bool, n: int = 2) -> None:
    """Warpgroup g's WGMMAs are issued: the next warpgroup's turn."""
    if on:
        named_barrier_arrive(TURN + (g + 1) % n, _PAIR)


def turn_end_after(g: int, n: int, wait, anchor, value):
    """(`wait()`, `value`) with warpgroup g's turn handed on between them: `wait` is the GEMM's wait, so the
    turn is held while the GEMM runs. ptxas places the arrive below arithmetic that does not depend on it, so
    `value` (what the work after the hand-over starts from: the softmax's row maxima, the promotion's
    scales) goes through shared `anchor`, stored before the wait and loaded back after the arrive, which
    ptxas keeps below it."""
    anchor.store(value)
    out = wait()
    turn_end(g, True, n)
    return out, anchor.load(layout=value.layout)


def turns_close(g: int, on: bool) -> None:
    """After warpgroup g's last turn: warpgroup 0 takes the last warpgroup's final arrive."""
    if on and g == 0:
        named_barrier_sync(TURN, _PAIR)
