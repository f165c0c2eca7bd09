"""Pass: software pipelining.

Explicit form: the kernel indexes stages and waits on barriers itself; this pass checks that every
op touching a multi-stage region names one stage (`region[s]`) and that constant stage indices are in
range. Implicit form (a producer and a consumer role sharing a multi-buffered region with no stage
index, as in the seed's Quick Start): turning that into a stage ring with barriers and phases is
this pass's job and is not written yet, so such kernels trace and print but are rejected here with
the op and line.
"""
from __future__ import annotations

from .. import ir

_STAGE_USERS = {"tma_load", "tma_store", "smem_load", "smem_store", "wgmma", "wgmma_wait", "cp_async",
                "tcgen05_mma", "barrier_expect", "barrier_arrive", "barrier_wait"}


def pipeline(kernel: ir.Kernel) -> ir.Kernel:
    consts = {op.results[0].id: op.attrs["value"] for op in kernel.walk() if op.kind == "constant" and op.results
              and isinstance(op.results[0].type, ir.ScalarType)}
    for op in kernel.walk():
        if op.kind in ("smem_index", "barrier_index"):
            stages = op.operands[0].type.stages
            s = consts.get(op.operands[1].id)
            if s is not None and not 0 <= s < stages:
                raise ir.GluonError(f"stage index {s} out of range for a {stages}-stage region", op.loc)
        if op.kind in _STAGE_USERS:
            for v in op.operands:
                t = v.type
                if isinstance(t, (ir.SmemType, ir.BarrierType)) and t.stages > 1:
                    raise ir.GluonError(
                        f"{op.kind} uses the {t.stages}-stage region %{v.name or v.id} without a stage index; "
                        f"index a stage explicitly ({v.name or 'region'}[s]) - the implicit stage ring is "
                        "not generated yet", op.loc)
    return kernel
