"""Pass: shared-memory allocation (an early check; Triton allocates the real buffers itself).

Every shared region (`smem_alloc`) and mbarrier set (`barrier_alloc`) gets a live range over the
kernel's program order and an offset; regions whose live ranges do not overlap share bytes.

* Live range: from the alloc to the last use, uses through views (`smem_index`, `smem_trans`,
  `barrier_index`) included. A use inside a `for` that does not also hold the alloc keeps the region
  live for that whole loop (the next iteration uses it again). Warp roles run concurrently, so a use
  inside a `warp_specialize` keeps the region live for the whole warp_specialize op. A region that is
  never used is live to the end of the block that allocates it.
* Placement, in alloc order, first fit: the lowest aligned offset that overlaps no placed region
  whose live range overlaps this one. Alignment: 1024 bytes for 128-byte-swizzled NVMMA tiles (TMA
  and WGMMA need it), 128 for other NVMMA tiles, 16 for other shared layouts, 8 for mbarriers.

Writes `op.attrs['offset']` on each alloc, `kernel.attrs['smem_bytes']` (the high-water mark) and
`kernel.attrs['smem_reuse']` (pairs (region, region whose bytes it reuses)), and rejects a kernel
that needs more than the arch's per-block shared memory, listing every region with its bytes,
offset and source line. Nothing in the lowering reads these offsets.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..types import NVMMASharedLayout, SharedMemoryError, SwizzleMode
from .analysis import VIEWS, alloc_name, sites
from .common import kib

_ALLOCS = ("smem_alloc", "barrier_alloc")


def _align(t) -> int:
    if isinstance(t, ir.BarrierType):
        return 8
    if isinstance(t.layout, NVMMASharedLayout):
        return 1024 if t.layout.swizzle == SwizzleMode.B128 else 128
    return 16


def _size(t) -> int:
    return t.stages * 8 if isinstance(t, ir.BarrierType) else t.bytes


@dataclass(eq=False)
class _Region:
    op: ir.Op
    name: str
    type: object
    size: int
    align: int
    start: int
    end: int
    offset: int = 0
    used: bool = False

    def live_with(self, other: _Region) -> bool:
        return self.start <= other.end and other.start <= self.end


def live_ranges(kernel: ir.Kernel) -> list[_Region]:
    """Each alloc of the kernel with its live range [start, end] in program order."""
    where = sites(kernel)
    regions: list[_Region] = []
    by_value: dict[int, _Region] = {}
    for op, site in where.items():
        if op.kind in _ALLOCS:
            t = op.results[0].type
            r = _Region(op, alloc_name(op.results[0]), t, _size(t), _align(t), site.index, site.index)
            regions.append(r)
            by_value[op.results[0].id] = r
    regions.sort(key=lambda r: r.start)
    # views alias their region: map every view result to the region it views
    for op in sorted(where, key=lambda o: where[o].index):
        if op.kind in VIEWS and op.operands and op.operands[0].id in by_value:
            by_value[op.results[0].id] = by_value[op.operands[0].id]
    for op, site in where.items():
        touched = {by_value[v.id] for v in op.operands if v.id in by_value}
        for r in touched:
            lo, hi = site.index, site.index
            alloc_site = where[r.op]
            for p in site.parents:
                inside = where[p].index < alloc_site.index <= where[p].end
                if p.kind == "warp_specialize" or (p.kind == "for" and not inside):
                    lo, hi = min(lo, where[p].index), max(hi, where[p].end)
            r.start, r.end = min(r.start, lo), max(r.end, hi)
            r.used = True
    for r in regions:
        if not r.used:        # nothing says when it dies: live to the end of the block that allocates it
            r.end = where[where[r.op].region.ops[-1]].end
    return regions


def allocate_shared(kernel: ir.Kernel) -> ir.Kernel:
    regions = live_ranges(kernel)
    placed: list[_Region] = []
    reuse: list[tuple[str, str]] = []
    for r in regions:
        busy = sorted((p for p in placed if p.live_with(r)), key=lambda p: p.offset)
        off = 0
        for p in busy:
            if off + r.size <= p.offset:
                break
            off = max(off, -(-(p.offset + p.size) // r.align) * r.align)
        r.offset = off
        placed.append(r)
        for p in placed[:-1]:
            if not p.live_with(r) and p.offset < off + r.size and off < p.offset + p.size:
                reuse.append((r.name, p.name))
        r.op.attrs["offset"] = off
    total = max((r.offset + r.size for r in regions), default=0)
    kernel.attrs["smem_bytes"] = total
    if reuse:
        kernel.attrs["smem_reuse"] = reuse
    else:
        kernel.attrs.pop("smem_reuse", None)
    limit = kernel.arch.smem_per_block_max
    if total > limit:
        table = "\n".join(f"    {r.name:<16} {kib(r.size):>10} ({r.size} bytes) at offset {r.offset:>6}  {r.type}  "
                          f"({r.op.loc})" for r in regions)
        shared = f"; regions with disjoint live ranges already share bytes ({_pairs(reuse)})" if reuse else ""
        raise SharedMemoryError(f"kernel {kernel.name} needs {kib(total)} of shared memory, more than the {kib(limit)} "
                                f"a block may use on {kernel.arch.name}{shared}:\n{table}\n"
                                "  reduce stages or tile sizes", kernel.loc, total, limit,
                                tuple((r.name, r.size) for r in regions))
    return kernel


def _pairs(reuse: list[tuple[str, str]]) -> str:
    return ", ".join(f"{a} reuses {b}" for a, b in reuse)
