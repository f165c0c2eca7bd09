"""Pass: layout validation.

Checks what the hardware requires of layouts before any compilation:
* NVMMA-swizzled shared tiles: the contiguous dimension spans a whole number of swizzle rows
  (a 128-byte swizzle needs rows of 128 bytes: BLOCK_K = 64 for f16).
* TMA: a declared box follows the hardware's rules (arch.tma_box_problem: each dimension in 1..256, the
  inner bytes a multiple of 16 and within the swizzle width) and tiles its shared tile.
* WGMMA: operands in NVMMA shared layouts (A may be in registers), the accumulator in the WGMMA
  (nvidia_mma v3) layout, M a multiple of 64, N a multiple of 8, and an accumulator that fits the
  register file of its warpgroups.
* MMA / MFMA: operands in dot-operand layouts of the accumulator's layout.
* Bank conflicts of register <-> shared copies through generic swizzled layouts (`Layout.shared`):
  advice, not an error (passes/bank_conflicts.py): a `GluonWarning` with a conflict-free swizzle,
  and `kernel.attrs["bank_conflicts"]`.
"""
from __future__ import annotations

from .. import ir
from ..arch import tma_box_problem
from ..types import (DotOperandLayout, MFMALayout, MMALayout, NVMMASharedLayout, SwizzleMode)
from .bank_conflicts import report_bank_conflicts
from .common import walk_with_warps

ACC_REG_LIMIT = 224  # of 255 per thread: leave room for addresses, indices and the epilogue


def check_layouts(kernel: ir.Kernel) -> ir.Kernel:
    for op, warps in walk_with_warps(kernel.body, kernel.num_warps):
        for v in op.results:
            if isinstance(v.type, ir.SmemType) and isinstance(v.type.layout, NVMMASharedLayout):
                _check_nvmma_tile(v.type, op, v.name)
        if op.kind == "tma_load" and "box" in op.attrs:
            _check_box(op)
        elif op.kind == "wgmma":
            _check_wgmma(op, warps)
        elif op.kind in ("mma", "mfma"):
            _check_register_dot(op)
    report_bank_conflicts(kernel)
    return kernel


def _check_nvmma_tile(t: ir.SmemType, op: ir.Op, name: str) -> None:
    sw = t.layout.swizzle
    if sw == SwizzleMode.NONE or len(t.shape) < 2:
        return
    contiguous = t.shape[0] if t.layout.transposed else t.shape[-1]
    row_bytes = contiguous * t.dtype.bits // 8
    if row_bytes % sw.bytes:
        fits = [m.name for m in (SwizzleMode.B128, SwizzleMode.B64, SwizzleMode.B32) if row_bytes % m.bytes == 0]
        need = sw.bytes * 8 // t.dtype.bits
        raise ir.GluonError(
            f"shared tile '{name or '?'}' {t.shape} {t.dtype.name} has {row_bytes}-byte rows, which do not fill "
            f"the {sw.bytes}-byte swizzle: make the contiguous dimension a multiple of {need} elements"
            + (f", or use swizzle {' / '.join(fits)}" if fits else ""), op.loc)


def _check_box(op: ir.Op) -> None:
    """A declared box: the hardware's rules (arch.tma_box_problem, the one statement of them), and it tiles
    the shared tile."""
    box = tuple(op.attrs["box"])
    dst = op.operands[1].type
    sw = dst.layout.swizzle
    problem = tma_box_problem(box, dst.dtype.bytes, sw.bytes)
    if problem is not None:
        hint = ""
        if sw != SwizzleMode.NONE and box[-1] * dst.dtype.bytes > sw.bytes:
            most = sw.bytes // dst.dtype.bytes
            hint = (f"; the inner box dimension can be at most {most} {dst.dtype.name} (the {dst.shape} tile is then "
                    f"moved in {-(-dst.shape[-1] // most)} boxes)")
        raise ir.GluonError(f"TMA box {box} of shared tile {dst.shape} {dst.dtype.name}: {problem}{hint}", op.loc)
    if any(t % b for t, b in zip(dst.shape, box)):
        raise ir.GluonError(f"TMA box {box} does not tile the shared tile {dst.shape}", op.loc)


def _check_wgmma(op: ir.Op, warps: int) -> None:
    a, b, acc = (v.type for v in op.operands[:3])
    for name, t in (("A", a), ("B", b)):
        if isinstance(t, ir.SmemType) and not isinstance(t.layout, NVMMASharedLayout):
            raise ir.GluonError(f"wgmma operand {name} must be in an NVMMA-swizzled shared layout (Layout.swizzled), "
                                f"got {t.layout}", op.loc)
    if isinstance(a, ir.TileType) and not isinstance(a.layout, DotOperandLayout):
        raise ir.GluonError(f"wgmma operand A in registers must be in a dot-operand layout, got {a.layout}", op.loc)
    if not (isinstance(acc.layout, MMALayout) and acc.layout.version == 3):
        raise ir.GluonError(f"wgmma accumulator must be in the WGMMA layout (Layout.wgmma), got {acc.layout}", op.loc)
    m, n = acc.shape
    if m % 64 or n % 8:
        raise ir.GluonError(f"wgmma tile {m}x{n}: M must be a multiple of 64 and N of 8", op.loc)
    if warps % 4:
        raise ir.GluonError(f"[GL706] wgmma runs on whole warpgroups: its role has {warps} warps (need a multiple "
                            "of 4)", op.loc)
    regs = m * n * acc.dtype.bits // 32 // (32 * warps)
    if regs > ACC_REG_LIMIT:
        groups = warps // 4
        fit_n = max(8, ACC_REG_LIMIT * 32 * warps * 32 // acc.dtype.bits // m // 8 * 8)
        raise ir.GluonError(
            f"the {m}x{n} {acc.dtype.name} accumulator needs {regs} registers per thread on {groups} warpgroup(s) "
            f"(limit ~{ACC_REG_LIMIT} of 255, leaving room for addresses): use {groups * 2} consumer warpgroups "
            f"(num_warps {warps * 2}) or a tile of at most {m}x{fit_n}", op.loc)


def _check_register_dot(op: ir.Op) -> None:
    a, b, acc = (v.type for v in op.operands[:3])
    want = MMALayout if op.kind == "mma" else MFMALayout
    if not isinstance(acc.layout, want):
        raise ir.GluonError(f"{op.kind} accumulator must be in a {want.__name__}, got {acc.layout}", op.loc)
    for idx, t in enumerate((a, b)):
        lay = t.layout
        if not (isinstance(lay, DotOperandLayout) and lay.op_idx == idx and lay.parent == acc.layout):
            raise ir.GluonError(f"{op.kind} operand {'AB'[idx]} must be in dot_operand({idx}, <acc layout>), got {lay}",
                                op.loc)
