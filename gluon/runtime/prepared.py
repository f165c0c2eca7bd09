"""A launch validated once and re-issued with new base addresses: the eager fast path of host functions.

A host function (the GEMM's `launch`, attention, a declared kernel's call) keys a call by everything the
Launcher's checks read except the tensors' addresses: dtypes, shapes, strides, devices, scalars. The first
call with a key is launched in full and kept as a `PreparedLaunch` (`Launcher.prepare`); a repeat hands it
the new addresses only. What is left to check per call is what an address alone decides: a pointer's
16-byte alignment where the binary was specialized for it, and a TMA base's alignment; a descriptor's
CUtensorMap comes from the descriptor cache (filled on a miss). A call the prepared launch cannot take
(an address that lost its alignment) returns False, and the caller takes its full path, which copies or
reports.
"""
from __future__ import annotations

from . import fast_call
from .descriptors import DESC_CACHE


class PreparedLaunch:
    """One validated launch of a Launcher: its grid, device and flat arguments, and the slots a repeat
    fills with new addresses (in `Launcher.prepare`'s `addressed` order). `keep` holds the buffers the
    launch reads that the caller does not pass again (a workspace), so their addresses stay valid."""

    __slots__ = ("launcher", "grid", "dev", "flat", "slots", "keep", "fast")

    def __init__(self, launcher, grid: tuple, dev: int, flat: list, slots: tuple, keep: tuple):
        """`slots`: (start in `flat`, whether the address must be 16-byte aligned, the Launcher's plan of the
        argument, and for a descriptor the cache key's part but the address: (shape, strides, padding, kind);
        None for a pointer) per slot."""
        self.launcher, self.grid, self.dev, self.flat, self.slots, self.keep = \
            launcher, grid, dev, list(flat), slots, keep
        self.fast = fast_call.build_prepared(self)      # one straight-line function (None: general only)

    def __call__(self, ptrs, stream=None) -> bool:
        """Launch with the new base addresses `ptrs` (one per slot) on `stream` (None: the device's current
        one); False, launching nothing, if an address breaks an alignment the launch relies on."""
        fast = self.fast
        if fast is not None:
            return fast(ptrs, stream)
        return self.general(ptrs, stream)

    def general(self, ptrs, stream=None) -> bool:
        """`__call__` for any slots, device and hooks."""
        flat = self.flat.copy()
        miss = None
        for (pos, align16, plan, tail), ptr in zip(self.slots, ptrs):
            if align16 and ptr & 15:
                return False
            if tail is None:                    # a pointer
                flat[pos] = ptr
                continue
            key = (ptr, *tail)
            cumap = DESC_CACHE.get(key)
            if cumap is None:
                if miss is None:
                    miss = []
                miss.append((pos, key, plan))
            flat[pos] = cumap
        if miss is not None:
            self.launcher._fill(miss, flat)
        self.launcher._issue(self.dev, self.grid, flat, stream)
        return True
