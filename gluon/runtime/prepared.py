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

from .descriptors import DESC_CACHE

_PTR, _DESC = 0, 4          # the Launcher's argument kinds that take an address (launcher._PTR, _DESC)


class PreparedLaunch:
    """One validated launch of a Launcher: its grid, device and flat arguments, and the slots a repeat
    fills with new addresses (in `Launcher.prepare`'s `addressed` order). `keep` holds the buffers the
    launch reads that the caller does not pass again (a workspace), so their addresses stay valid."""

    __slots__ = ("launcher", "grid", "dev", "flat", "slots", "keep", "pointers", "function", "direct", "backend")

    def __init__(self, launcher, grid: tuple, dev: int, flat: list, addressed: list, keep: tuple):
        """`addressed`: (start in `flat`, the Launcher's plan of the argument, a descriptor's rank, its padding
        code) per slot."""
        self.launcher, self.grid, self.dev, self.keep = launcher, grid, dev, keep
        self.flat = list(flat)
        slots = []
        for pos, plan, rank, padding in addressed:
            if plan.kind == _DESC:
                shape = tuple(flat[pos + 1: pos + 1 + rank])
                strides = tuple(flat[pos + 1 + rank: pos + 1 + 2 * rank])
                # the descriptor cache's key but for the address: (ptr, shape, strides, padding, kind)
                tail = (shape, strides, padding, plan.desc_kind)
                slots.append((pos, True, plan, tail))
            elif plan.kind == _PTR:
                slots.append((pos, plan.div16, plan, None))
            else:
                raise ValueError(f"argument '{plan.name}' is a scalar: only pointers and descriptors take addresses")
        self.slots = tuple(slots)
        # every slot a pointer: the loop of `__call__` without the descriptors' branch
        self.pointers = tuple((pos, align16) for pos, align16, _, tail in slots) \
            if all(tail is None for *_, tail in slots) else None
        self.function = launcher._functions[dev]
        self.direct = launcher._direct
        self.backend = launcher._backend

    def __call__(self, ptrs, stream=None) -> bool:
        """Launch with the new base addresses `ptrs` (one per slot) on `stream` (None: the device's current
        one); False, launching nothing, if an address breaks an alignment the launch relies on."""
        flat = self.flat.copy()
        if self.pointers is not None:
            for (pos, align16), ptr in zip(self.pointers, ptrs):
                if align16 and ptr & 15:
                    return False
                flat[pos] = ptr
            return self._issue(flat, stream)
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
        return self._issue(flat, stream)

    def _issue(self, flat: list, stream) -> bool:
        """The C launch itself where nothing asks for more (no launch hooks, the launch device current, a
        kernel without scratch buffers), else the Launcher's."""
        backend, dev = self.backend, self.dev
        if stream is None:
            stream = backend.current_stream(dev)
        direct = self.direct
        enter, _ = backend.launch_hooks()
        g0, g1, g2 = self.grid
        if direct is None or enter is not None or dev != backend.current_device() or not g0 * g1 * g2:
            self.launcher._issue(dev, self.grid, flat, stream)
        else:
            direct[0](g0, g1, g2, stream, self.function, direct[1], direct[2], None, None,
                      self.launcher._packed_metadata, None, None, None, *flat)
        return True
