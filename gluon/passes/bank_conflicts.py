"""Analysis: shared-memory bank conflicts of register <-> shared copies (`smem_store`, `smem_load`).

Covered: a shared tile in a generic swizzled layout (`Layout.shared(vec, per_phase, max_phase, order)`,
#ttg.swizzled_shared) of rank 1 or 2, or in an NVMMA layout (`Layout.swizzled(rows, cols, swizzle)`,
#ttg.nvmma_shared, what TMA and WGMMA read) of rank 2, copied to or from a register tile in a
`BlockedLayout`. Everything else is skipped without a report: MMA / dot-operand / slice register layouts
(those copies go through ldmatrix / stmatrix or shuffles, not plain ld.shared / st.shared), transposed or
reinterpreted views (`smem_trans`, `smem_reinterpret`), NVMMA tiles whose rows are not whole swizzle
lines, and ranks above 2.

The model, exact for what it covers:

* Shared memory has 32 banks of 4 bytes; word w (byte offset // 4) lives in bank w % 32.
* Element (i, j) of an (R, C) tile with order (1, 0) (j fastest) lives at element offset
  i * C + swizzled(j), with phase = (i // per_phase) % max_phase and
  swizzled(j) = (((j // vec) ^ phase) % (C // vec)) * vec + j % vec. Order (0, 1) swaps the roles of
  i and j (the row length is then R). A 1-D tile is not swizzled: offset = index.
* NVMMA, W-byte swizzle (W = 32, 64, 128; `transposed` swaps the roles of i and j): the tile is stored
  as column blocks of W bytes (what one TMA box moves), block b = j * e // W, each R lines of W bytes:
  byte o = b * R * W + i * W + (j * e) % W, then the 16-byte chunk bits XOR the line bits above them,
  o ^ (((o >> 7) % (W / 16)) << 4), as TMA writes and WGMMA reads it (CUTLASS's Swizzle<log2(W/16), 4, 3>).
  Without swizzle (W = 0) it is row-major.
* Lane l of warp 0 holds what the BlockedLayout gives it (size_per_thread x threads_per_warp x
  warps_per_cta, `order` fastest first; an index past the tile wraps, i.e. lanes replicate). Only
  the first instruction of warp 0 is analysed (the pattern repeats): per lane, the largest
  contiguous run along the register layout's fastest dimension, at most size_per_thread elements and
  16 bytes, a power of two; the run is one element when that dimension is not the shared layout's
  contiguous one, and stays inside one vec-group when the layout swizzles (max_phase > 1).
* A warp instruction of w-byte accesses is served in 128-byte phases: w <= 4: all 32 lanes together;
  w == 8: 2 groups of 16 lanes; w == 16: 4 groups of 8 lanes. A group takes as many wavefronts as the
  largest number of DISTINCT words any one bank holds among its lanes' accesses (one word read or
  written by several lanes is a broadcast, free). Degree = total wavefronts / groups; 1.0 is
  conflict-free.

Not modelled: bank conflicts between warps (they do not conflict), the stage offset of multi-stage
regions (a multiple of 128 bytes in practice), later instructions of the same copy, and how Triton's
own lowering may re-vectorise or route a copy through another path.

Reports: `kernel.attrs["bank_conflicts"]` lists every analysed access with degree > 1 as
{op, loc, degree, layout, shared}, and each one is a `GluonWarning` naming the user's file:line, the
degree, both layouts and a swizzle (vec, per_phase, max_phase) that makes this access conflict-free.
Advice only: nothing here raises.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .. import ir
from ..types import BlockedLayout, DType, NVMMASharedLayout, SwizzledSharedLayout, SwizzleMode

NUM_BANKS = 32
BANK_BYTES = 4
WARP_SIZE = 32
MAX_ACCESS_BYTES = 16

SEARCH_VEC = (1, 2, 4, 8, 16)
SEARCH_PER_PHASE = (1, 2, 4, 8)
SEARCH_MAX_PHASE = (1, 2, 4, 8, 16)


class GluonWarning(UserWarning):
    """Advice about a kernel that compiles but leaves performance on the table."""


@dataclass(frozen=True)
class Access:
    """One warp instruction: per lane, the byte offset it starts at, and the access width in bytes."""

    starts: tuple[int, ...]
    width: int

    @property
    def groups(self) -> int:
        return 1 if self.width <= 4 else self.width * WARP_SIZE // 128

    def wavefronts(self) -> int:
        per_group = WARP_SIZE // self.groups
        total = 0
        for g in range(self.groups):
            banks: dict[int, set[int]] = {}
            for start in self.starts[g * per_group:(g + 1) * per_group]:
                for word in range(start // BANK_BYTES, (start + self.width - 1) // BANK_BYTES + 1):
                    banks.setdefault(word % NUM_BANKS, set()).add(word)
            total += max((len(ws) for ws in banks.values()), default=1)
        return total

    @property
    def degree(self) -> float:
        return self.wavefronts() / self.groups


# ------------------------------------------------------------------------------ the model


def nvmma_byte_offset(index: Sequence[int], shape: Sequence[int], elem_bytes: int, shared: NVMMASharedLayout) -> int:
    """Byte offset of `index` in a 2-D tile of `shape` in an NVMMA layout (see the module docstring)."""
    i, j = index
    rows, cols = shape
    if shared.transposed:
        i, j, rows, cols = j, i, cols, rows
    w = shared.swizzle.bytes
    if w == 0:
        return (i * cols + j) * elem_bytes
    b, byte = divmod(j * elem_bytes, w)
    o = b * rows * w + i * w + byte
    return o ^ (((o >> 7) % (w // 16)) << 4)


def nvmma_in_model(shape: Sequence[int], elem_bytes: int, shared: NVMMASharedLayout) -> bool:
    """Whether the tile's contiguous rows are whole swizzle lines (else the layout is not the one modelled)."""
    inner = shape[0] if shared.transposed else shape[1]
    w = shared.swizzle.bytes
    return len(shape) == 2 and (w == 0 or (inner * elem_bytes) % w == 0)


def element_offset(index: Sequence[int], shape: Sequence[int], shared: SwizzledSharedLayout) -> int:
    """Element offset of `index` in a tile of `shape` laid out by `shared` (rank 1 or 2)."""
    if len(shape) == 1:
        return index[0]
    fast, slow = shared.order[0], shared.order[1]
    i, j, row = index[slow], index[fast], shape[fast]
    vec = max(1, shared.vec)
    groups = max(1, row // vec)
    phase = (i // max(1, shared.per_phase)) % max(1, shared.max_phase)
    return i * row + (((j // vec) ^ phase) % groups) * vec + j % vec


def _lane_coords(lane: int, layout: BlockedLayout) -> list[int]:
    coords = [0] * layout.rank
    for d in layout.order:
        coords[d] = lane % layout.threads_per_warp[d]
        lane //= layout.threads_per_warp[d]
    return coords


def run_length(layout: BlockedLayout, shape: Sequence[int], dtype: DType,
               shared: SwizzledSharedLayout | NVMMASharedLayout) -> int:
    """Elements one lane moves in one instruction (see the module docstring; in an NVMMA tile a run stays
    in one 16-byte chunk, which the swizzle moves whole)."""
    fast = layout.order[0]
    nvmma = isinstance(shared, NVMMASharedLayout)
    if nvmma:
        contiguous = 0 if shared.transposed else 1
    else:
        contiguous = 0 if len(shape) == 1 else shared.order[0]
    if fast != contiguous:
        return 1
    n = min(layout.size_per_thread[fast], shape[fast], max(1, MAX_ACCESS_BYTES // dtype.bytes))
    if not nvmma and len(shape) == 2 and shared.max_phase > 1:
        n = min(n, max(1, shared.vec))
    return 1 << (max(1, n).bit_length() - 1)


def warp_access(layout: BlockedLayout, shape: Sequence[int], dtype: DType,
                shared: SwizzledSharedLayout | NVMMASharedLayout) -> Access:
    """The first instruction of warp 0 copying a `shape` tile between `layout` and `shared`."""
    run = run_length(layout, shape, dtype, shared)
    starts = []
    for lane in range(WARP_SIZE):
        c = _lane_coords(lane, layout)
        index = [(c[d] * layout.size_per_thread[d]) % shape[d] for d in range(len(shape))]
        if isinstance(shared, NVMMASharedLayout):
            starts.append(nvmma_byte_offset(index, shape, dtype.bytes, shared))
        else:
            starts.append(element_offset(index, shape, shared) * dtype.bytes)
    return Access(tuple(starts), run * dtype.bytes)


def bank_conflict_degree(layout: BlockedLayout, shape: Sequence[int], dtype: DType,
                         shared: SwizzledSharedLayout | NVMMASharedLayout) -> float:
    return warp_access(layout, shape, dtype, shared).degree


def suggest_nvmma_swizzle(layout: BlockedLayout, shape: Sequence[int], dtype: DType,
                          shared: NVMMASharedLayout) -> NVMMASharedLayout | None:
    """The widest swizzle (same orientation) that makes the access conflict-free, or None."""
    for mode in (SwizzleMode.B128, SwizzleMode.B64, SwizzleMode.B32):
        cand = NVMMASharedLayout(shared.shape, mode, shared.transposed)
        if nvmma_in_model(shape, dtype.bytes, cand) and bank_conflict_degree(layout, shape, dtype, cand) == 1.0:
            return cand
    return None


def suggest_swizzle(layout: BlockedLayout, shape: Sequence[int], dtype: DType,
                    shared: SwizzledSharedLayout) -> SwizzledSharedLayout | None:
    """A conflict-free swizzle (same order) from the searched set: largest vec, then smallest
    max_phase, then smallest per_phase; None when there is none."""
    for vec in sorted(SEARCH_VEC, reverse=True):
        if vec * dtype.bytes > MAX_ACCESS_BYTES:
            continue
        for max_phase in SEARCH_MAX_PHASE:
            for per_phase in SEARCH_PER_PHASE:
                cand = SwizzledSharedLayout(vec, per_phase, max_phase, shared.order)
                if bank_conflict_degree(layout, shape, dtype, cand) == 1.0:
                    return cand
    return None


# ------------------------------------------------------------------------------ the pass


def _in_model(op: ir.Op) -> tuple[BlockedLayout, ir.SmemType] | None:
    if op.kind == "smem_store":
        tile, smem = op.operands[0].type, op.operands[1]
    elif op.kind == "smem_load":
        tile, smem = op.results[0].type, op.operands[0]
    else:
        return None
    st = smem.type
    if not (isinstance(tile, ir.TileType) and isinstance(tile.layout, BlockedLayout) and isinstance(st, ir.SmemType)
            and isinstance(st.layout, (SwizzledSharedLayout, NVMMASharedLayout))):
        return None
    rank = len(st.shape)
    if rank not in (1, 2) or tile.layout.rank != rank or tuple(tile.shape) != tuple(st.shape):
        return None
    if isinstance(st.layout, NVMMASharedLayout):
        if not nvmma_in_model(st.shape, st.dtype.bytes, st.layout):
            return None
    elif rank == 2 and sorted(st.layout.order) != [0, 1]:
        return None
    if any(d <= 0 for d in st.shape) or math.prod(tile.layout.threads_per_warp) != WARP_SIZE:
        return None
    v = smem
    while isinstance(v.owner, ir.Op) and v.owner.kind == "smem_index":
        v = v.owner.operands[0]
    if isinstance(v.owner, ir.Op) and v.owner.kind in ("smem_trans", "smem_reinterpret"):
        return None                      # a permuted or reinterpreted view: its layout describes the underlying tile
    return tile.layout, st


def find_bank_conflicts(ops: Iterable[ir.Op]) -> list[dict]:
    found = []
    for op in ops:
        got = _in_model(op)
        if got is None:
            continue
        layout, st = got
        acc = warp_access(layout, st.shape, st.dtype, st.layout)
        degree = acc.degree
        if degree > 1:
            found.append({"op": op.kind, "loc": op.loc, "degree": degree, "layout": layout, "shared": st.layout,
                          "_access": acc, "_smem": st})
    return found


def _message(c: dict) -> str:
    acc, st = c["_access"], c["_smem"]
    where = f"{c['loc']}: " if c["loc"] is not None else ""
    what = "store of a register tile to" if c["op"] == "smem_store" else "load of a register tile from"
    deg = f"{c['degree']:g}"
    if isinstance(st.layout, NVMMASharedLayout):
        fix = suggest_nvmma_swizzle(c["layout"], st.shape, st.dtype, st.layout)
        rows, cols = st.layout.shape
        t = ", transposed=True" if st.layout.transposed else ""
        advice = ("no NVMMA swizzle removes it: a register layout whose lanes run along the contiguous "
                  "dimension does" if fix is None else
                  f"use Layout.swizzled({rows}, {cols}, SwizzleMode.{fix.swizzle.name}{t}) to make it conflict-free")
    else:
        fix = suggest_swizzle(c["layout"], st.shape, st.dtype, st.layout)
        if fix is None:
            advice = "no swizzle in the searched set removes it"
        else:
            advice = (f"use Layout.shared(vec={fix.vec}, per_phase={fix.per_phase}, max_phase={fix.max_phase}, "
                      f"order={tuple(fix.order)}) to make it conflict-free")
    return (f"{where}{c['op']} ({what} shared memory, {'x'.join(map(str, st.shape))} {st.dtype.name}): "
            f"{deg}-way bank conflict: {acc.wavefronts()} wavefronts where {acc.groups} would do "
            f"({acc.width}-byte accesses); register layout {c['layout']}, shared layout {c['shared']}; {advice}")


def report_bank_conflicts(kernel: ir.Kernel) -> list[dict]:
    """Analyse the kernel, record `kernel.attrs['bank_conflicts']` and warn once per conflicting access."""
    try:
        found = [(c, _message(c)) for c in find_bank_conflicts(kernel.walk())]
    except Exception:  # noqa: BLE001 -- advice only: never fail a compile over it
        return []
    records = []
    for c, msg in found:
        loc = c["loc"]
        if loc is not None:
            warnings.warn_explicit(msg, GluonWarning, loc.file, loc.line)
        else:
            warnings.warn(msg, GluonWarning, stacklevel=3)
        records.append({k: v for k, v in c.items() if not k.startswith("_")})
    if records:
        kernel.attrs["bank_conflicts"] = records
    else:
        kernel.attrs.pop("bank_conflicts", None)
    return records
