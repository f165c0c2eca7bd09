"""Small helpers the passes share: walking ops with their warp role, formatting byte counts."""
from __future__ import annotations

from typing import Iterator

from .. import ir


def walk_with_warps(region: ir.Region, warps: int) -> Iterator[tuple[ir.Op, int]]:
    """Every op with the number of warps that execute it (its warp role's, else the kernel's)."""
    for op in region.ops:
        yield op, warps
        if op.kind == "warp_specialize":
            for r, role in zip(op.regions, op.attrs["roles"]):
                first, last = role["warps"]
                yield from walk_with_warps(r, last - first + 1)
        else:
            for r in op.regions:
                yield from walk_with_warps(r, warps)


def kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"
