"""Blackwell (SM100) builtins: tensor memory (`tmem_alloc`, `tmem_load`) and the tcgen05 MMA into it.

`tcgen05_mma` completes on a Hopper mbarrier (`gluon.language.nvidia.hopper.Barrier`), as in Triton.
"""
from __future__ import annotations

from typing import Sequence

from ... import ir
from ...types import DType, Layout, TensorMemoryLayout
from ..core import Tensor
from ..memory import Shared
from ..tracing import _tr
from .hopper import Barrier, _barrier


def tmem_alloc(dtype: DType, shape: Sequence[int], layout: Layout | None = None) -> Tensor:
    t = _tr()
    t.require("tmem", "tmem_alloc")
    shape = tuple(shape)
    layout = layout or TensorMemoryLayout((shape[0], shape[1]))
    return Tensor(t.emit("tmem_alloc", [], [ir.TmemType(dtype, shape, layout)]).result)


def tcgen05_mma(a: Shared, b: Shared, d: Tensor, barrier: Barrier, use_acc: bool = False) -> None:
    """Blackwell tcgen05 MMA: d (tensor memory) (+)= a @ b; completion is committed to `barrier`."""
    t = _tr()
    t.require("tcgen05", "tcgen05_mma")
    t.emit("tcgen05_mma", [a, b, d, _barrier(barrier)], [], {"use_acc": bool(use_acc)})


def tmem_load(d: Tensor, layout: Layout | None = None) -> Tensor:
    """Tensor memory -> registers. The default layout is TMEM's own message layout for a 128-row
    block (one row per thread, warps stacked over rows), so no shuffle through shared memory."""
    t = _tr()
    t.require("tmem", "tmem_load")
    m, n = d.shape
    if layout is None and m == 128 and t.warps in (4, 8):
        cols = t.warps // 4
        layout = Layout.blocked([1, n // cols], [32, 1], [4, cols], order=(0, 1))
    return Tensor(t.emit("tmem_load", [d], [ir.TileType(d.dtype, d.shape, layout)]).result)
