"""What the protocol checks (gluon/passes/protocol_*.py) share: the coded error, an op's place in a message,
the key of a site's warp role, and which shared-memory views an op reads (TMA stores, wgmma and tcgen05
operands, smem loads): the barrier checks (GL103), the async ones (GL201, GL204) and the shared-memory
ones (GL401) all ask that of one list.
"""
from __future__ import annotations

from .. import ir
from .analysis import Site


def err(code: str, message: str, loc) -> ir.GluonError:
    return ir.GluonError(f"[{code}] {message}", loc)


def at(op: ir.Op) -> str:
    return f"{op.kind} at {op.loc}" if op.loc else op.kind


def role_key(site: Site):
    return (id(site.role[0]), site.role[1]) if site.role else None


READERS = ("wgmma", "smem_load", "tma_store", "tcgen05_mma")


def read_operands(op: ir.Op) -> list[ir.Value]:
    if op.kind == "wgmma" or op.kind == "tcgen05_mma":
        return [v for v in op.operands[:2] if isinstance(v.type, ir.SmemType)]
    if op.kind == "smem_load":
        return [op.operands[0]]
    if op.kind == "tma_store":
        return [op.operands[1]]
    return []
