"""Pass: shared-memory allocation.

Gives every shared region and mbarrier an offset (aligned: 1024 bytes for 128-byte-swizzled tiles, as
TMA and WGMMA need; 128 for other swizzles; 8 for barriers), records the total in
`kernel.attrs['smem_bytes']`, and rejects a kernel whose regions exceed the arch's per-block shared
memory, listing every region. Regions are placed one after another; reuse by liveness is not written
yet. Triton's own allocator places the buffers in the binary; this pass is the early check.
"""
from __future__ import annotations

from .. import ir
from ..types import NVMMASharedLayout, SwizzleMode
from .common import kib


def _align(t) -> int:
    if isinstance(t, ir.BarrierType):
        return 8
    if isinstance(t.layout, NVMMASharedLayout):
        return 1024 if t.layout.swizzle == SwizzleMode.B128 else 128
    return 16


def allocate_shared(kernel: ir.Kernel) -> ir.Kernel:
    offset = 0
    rows = []
    for op in kernel.walk():
        if op.kind not in ("smem_alloc", "barrier_alloc"):
            continue
        t = op.results[0].type
        size = t.stages * 8 if isinstance(t, ir.BarrierType) else t.bytes
        a = _align(t)
        offset = -(-offset // a) * a
        op.attrs["offset"] = offset
        rows.append((op.attrs.get("name") or op.results[0].name or op.kind, str(t), size, op.loc))
        offset += size
    kernel.attrs["smem_bytes"] = offset
    limit = kernel.arch.smem_per_block_max
    if offset > limit:
        table = "\n".join(f"    {n:<16} {kib(s):>10}  {t}  ({loc})" for n, t, s, loc in rows)
        raise ir.GluonError(f"kernel {kernel.name} needs {kib(offset)} of shared memory, more than the {kib(limit)} "
                            f"a block may use on {kernel.arch.name}:\n{table}\n"
                            "  reduce stages or tile sizes", kernel.loc)
    return kernel
