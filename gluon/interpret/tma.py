"""TMA in the interpreter: descriptor parameters, `tma_load` (out-of-bounds elements filled), `tma_store`
(clipped to the tensor), `tma_store_wait`.

A TMA-descriptor parameter takes what the GPU launch takes for it: the global tensor itself (a CPU torch
tensor or a numpy array: the launcher builds the CUtensorMap from it) or a
`gluon.runtime.TensorDescriptor` (its pointer, shape and strides, viewed over its tensor's storage).
Either is checked as the launcher checks it (runtime.descriptors.check_tma_tensor: unit last stride,
16-byte strides and base) and becomes a `TmaDesc`: a strided numpy view of the tensor's elements in
memory encoding.

A load copies the box at `coords` (the tensor's dimension order; any coordinate may be negative or run
past the end) into the destination stage, bytes unchanged; elements outside the tensor are zeros (NaN
with a TensorDescriptor made with padding="nan"), as TMA fills them. The shared write is the async
proxy's and names the mbarrier it completes on (`via`), then the load completes the full box's bytes on
it (TMA counts the whole box, clipped or not: what `expect` must announce). A store writes the elements
of the source stage that fall inside the tensor and drops the rest; its shared read is in flight (its
an `AsyncGroup`, `via`) until a `tma_store_wait` leaves at most `pendings` newer stores pending. Both
complete at the op: the interpreter has no memory latency, so ordering errors are the tracker's to find.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import ir
from ..types import DType, GluonError
from .ops import InterpretError, rule
from .shared import BarrierView
from .smem import async_groups, one_stage
from .values import buffer_of, mem_dtype, to_memory


@dataclass(frozen=True, eq=False)
class TmaDesc:
    """A TMA descriptor: the global tensor's elements (`data`, a strided numpy view in memory encoding of
    `shape`), the tile its TMA ops move and the value of out-of-bounds elements on loads."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    data: np.ndarray
    block_shape: tuple[int, ...]
    fill: Any = 0

    def box(self, coords: tuple[int, ...], block: tuple[int, ...]) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """(the tensor's slices, the box's slices) of the part of the box at `coords` inside the tensor;
        None for both when no element is."""
        src, dst = [], []
        for c, b, n in zip(coords, block, self.shape):
            lo, hi = max(c, 0), min(c + b, n)
            if lo >= hi:
                return None, None
            src.append(slice(lo, hi))
            dst.append(slice(lo - c, hi - c))
        return tuple(src), tuple(dst)


def _described_tensor(v):
    """The tensor a TensorDescriptor describes: its shape and strides from its pointer on, over its tensor's
    storage (host functions describe 2-D views of 4-D tensors so)."""
    import torch
    t = v.tensor
    es = t.element_size()
    base = t.untyped_storage().data_ptr()
    off, rem = divmod(int(v.ptr) - base, es)
    if rem or off < 0:
        raise ValueError(f"its pointer {v.ptr:#x} is not an element of its tensor's storage")
    return torch.as_strided(t, tuple(v.shape), tuple(v.strides), off)


def desc_of(p: ir.Param, v) -> TmaDesc:
    """The TmaDesc a launch's argument `v` for descriptor parameter `p` is (GluonError at the parameter
    when it is no tensor TMA can describe)."""
    import torch
    from ..runtime.descriptors import TensorDescriptor, check_tma_tensor
    t: ir.DescType = p.value.type
    nan_fill = False
    if isinstance(v, TensorDescriptor):
        if v.dtype != t.dtype:
            raise GluonError(f"parameter '{p.name}' is a descriptor of {v.dtype.name}, but the kernel needs "
                             f"{t.dtype.name}", p.loc)
        if tuple(v.block_shape) != tuple(t.block_shape) or v.swizzle_bytes != t.swizzle.bytes:
            raise GluonError(f"parameter '{p.name}' is a descriptor for block {tuple(v.block_shape)} with "
                             f"{v.swizzle_bytes}-byte swizzle, but the kernel moves {tuple(t.block_shape)} tiles with "
                             f"{t.swizzle.bytes}-byte swizzle", p.loc)
        nan_fill = v.padding == "nan"
        try:
            v = _described_tensor(v)
        except ValueError as e:
            raise GluonError(f"parameter '{p.name}': {e}", p.loc) from None
    if isinstance(v, np.ndarray):
        v = torch.from_numpy(v)
    if not isinstance(v, torch.Tensor):
        raise GluonError(f"parameter '{p.name}' is a TMA descriptor: pass the tensor it describes (or a "
                         f"gluon.runtime.TensorDescriptor), not {type(v).__name__}", p.loc)
    if v.device.type != "cpu":
        raise GluonError(f"argument '{p.name}' is on {v.device}; the interpreter runs on CPU tensors (.cpu())", p.loc)
    if DType.from_torch(v.dtype) != t.dtype:
        raise GluonError(f"parameter '{p.name}' moves {t.dtype.name} tiles, got a {v.dtype} tensor", p.loc)
    if v.dim() != len(t.block_shape):
        raise GluonError(f"parameter '{p.name}' moves rank-{len(t.block_shape)} tiles, got a tensor of shape "
                         f"{tuple(v.shape)}", p.loc)
    problem = check_tma_tensor(v.data_ptr(), tuple(v.shape), tuple(v.stride()), v.element_size())
    if problem is not None:
        raise GluonError(f"parameter '{p.name}': the tensor {problem}", p.loc)
    buf = buffer_of(p.name, t.dtype, v)
    es = buf.data.itemsize
    data = np.lib.stride_tricks.as_strided(buf.data, tuple(v.shape), tuple(s * es for s in v.stride()))
    fill = to_memory(np.array(np.nan, np.float32), t.dtype) if nan_fill else np.zeros((), mem_dtype(t.dtype))
    return TmaDesc(p.name, t.dtype, tuple(int(d) for d in v.shape), data, tuple(t.block_shape), fill)


def _desc(op, v) -> TmaDesc:
    if not isinstance(v, TmaDesc):
        raise InterpretError(f"{op.kind} needs a TMA descriptor parameter, got {type(v).__name__}", op.loc)
    return v


@rule("tma_load")
def _tma_load(it, op, args):
    desc, dst, bar, *coords = args
    d = _desc(op, desc)
    v = one_stage(op, dst, "destination")
    if not isinstance(bar, BarrierView):
        raise InterpretError(f"tma_load completes on an mbarrier, got {type(bar).__name__}", op.loc)
    if op.attrs.get("multicast"):
        raise InterpretError("tma_load(multicast=True): the interpreter runs a cluster's CTAs one after another "
                             "without a cluster's shared memory, so a multicast load cannot land in the other CTAs; "
                             "interpret the kernel without a cluster (CLUSTER_M=1)", op.loc)
    block = tuple(v.shape)
    c = tuple(int(x) for x in coords)
    out = np.full(block, d.fill, mem_dtype(d.dtype))
    src, at = d.box(c, block)
    if src is not None:
        out[at] = d.data[src]
    mbar = bar.one
    v.write(out, it.who, "async", op.loc, via=mbar, raw=True)
    mbar.complete_tx(v.nbytes)
    return []


@rule("tma_store")
def _tma_store(it, op, args):
    desc, src, *coords = args
    d = _desc(op, desc)
    v = one_stage(op, src, "source")
    g = async_groups(it, "tma_store").issue(it.who)
    tile = v.read(it.who, "async", op.loc, via=g, raw=True)
    dst, at = d.box(tuple(int(x) for x in coords), tuple(v.shape))
    if dst is not None:
        d.data[dst] = tile[at]
    return []


@rule("tma_store_wait")
def _tma_store_wait(it, op, args):
    async_groups(it, "tma_store").retire(it, int(op.attrs.get("pendings", 0)), op.loc)
    return []


__all__ = ["TmaDesc", "desc_of"]
