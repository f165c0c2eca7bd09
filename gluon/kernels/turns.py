"""Two consumer warpgroups taking turns issuing their WGMMAs (FlashAttention-3's ping-pong, section 3.1).

Warpgroup g waits at named barrier TURN + g before issuing and arrives at TURN + 1 - g after, so the other
one issues next while g's non-tensor work (attention's softmax, the fp8 GEMM's promotion) runs under the
other's WGMMAs. Warpgroup 1 opens with an arrive (warpgroup 0 goes first) and warpgroup 0 closes with a
sync that takes warpgroup 1's last arrive, so no arrive is left pending; both must take as many turns.
Used by the attention kernel (PINGPONG) and the GEMM's fp8 block scales (MMA_TURNS).
"""
from __future__ import annotations

from gluon.language.nvidia.ampere import named_barrier_arrive, named_barrier_sync

TURN = 8            # named barriers TURN and TURN + 1 (8..15 are the kernel's; Triton 3.6 uses 0..7)
_BOTH = 256         # two warpgroups' threads


def turns_open(g: int, on: bool) -> None:
    """Before warpgroup g's first turn: warpgroup 1 lets warpgroup 0 go first."""
    if on and g == 1:
        named_barrier_arrive(TURN, _BOTH)


def turn_begin(g: int, on: bool) -> None:
    """Wait for warpgroup g's turn to issue its WGMMAs (the other one has issued its own)."""
    if on:
        named_barrier_sync(TURN + g, _BOTH)


def turn_end(g: int, on: bool) -> None:
    """Warpgroup g's WGMMAs are issued: the other warpgroup's turn."""
    if on:
        named_barrier_arrive(TURN + 1 - g, _BOTH)


def turns_close(g: int, on: bool) -> None:
    """After warpgroup g's last turn: warpgroup 0 takes warpgroup 1's last arrive."""
    if on and g == 0:
        named_barrier_sync(TURN, _BOTH)
