"""The interpreter's model of a program's on-chip state: shared-memory regions (with their stages) and
mbarriers. Values of IR types `SmemType` and `BarrierType` are `SmemView` and `BarrierView` objects.

    SmemBytes    one allocation's bytes (`raw`), which of them were ever written, and the observer
    SmemRegion   those bytes seen as `stages` copies of a tile of one dtype in one shared layout; a
                 `smem_reinterpret` is a second region over the same SmemBytes (other tile, stages, dtype)
    SmemView     a region, or one stage of it, possibly transposed: `read(who)` / `write(x, who, proxy)`
    MBarrier     one mbarrier: arrival count, pending arrivals, transaction bytes, phase
    BarrierView  a set of mbarriers (`barrier_alloc`) or one of them (`barrier_index`)

Why bytes: a reinterpreted region (the GEMM's B ring split into the parts a cluster's CTAs load, its
output tile staged in the A ring as another dtype) must see exactly the bytes the other view wrote. Each
region maps its logical elements onto the bytes as the hardware lays them out where that matters: an
NVMMA-swizzled tile wider than its swizzle is stored in column chunks of the swizzle's width, each chunk
all rows (what TMA's boxes write, arch.tma_box_shape), so a tile split into its 128-byte chunks or along
its rows finds its parts back to back. The XOR swizzle inside a chunk is not modelled (every view of the
same chunk applies the same one, so it cancels out); other shared layouts are dense in their `order`.
Elements are kept in global memory's encoding (values.mem_dtype: bf16 bits, fp8 codes), so a TMA copy
moves bytes unchanged and only register reads and writes convert.

`who` is the reader or writer (the warp role's task, or None for a program without roles); `proxy` says
whether the access is the generic proxy's (st.shared, ld.shared: "generic") or the async proxy's (TMA,
WGMMA, cp.async: "async"). Every access goes through `SmemRegion.observer` when one is set (the hazard
tracker), so data movement and hazard checking stay apart: the rules move data, the observer judges order.
`SmemView.span` is the byte range a view covers in its SmemBytes, for telling overlapping views apart.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from ..types import DType, Layout, NVMMASharedLayout, SwizzledSharedLayout
from .values import from_memory, mem_dtype, to_memory


class AccessObserver(Protocol):
    """What watches shared-memory accesses and barrier events (the hazard tracker implements it)."""

    def on_smem(self, view: "SmemView", who: Any, kind: str, proxy: str, loc, via: Any = None) -> None: ...


class SmemBytes:
    """One shared allocation's bytes: `raw` (uint8), `written` (1 where a byte was ever stored), and the
    observer every region over these bytes reports to."""

    __slots__ = ("name", "raw", "written", "observer")

    def __init__(self, name: str, nbytes: int, observer: AccessObserver | None = None):
        self.name = name
        self.raw = np.zeros(nbytes, np.uint8)
        self.written = np.zeros(nbytes, np.uint8)
        self.observer = observer

    @property
    def nbytes(self) -> int:
        return self.raw.shape[0]


def _elem_bits(dt: DType) -> int:
    return 8 if dt == DType.i1 else dt.bits


@lru_cache(maxsize=512)
def _stage_index(layout: Layout | None, shape: tuple[int, ...], elem_bytes: int) -> np.ndarray | None:
    """Where each logical element of one stage lives among the stage's elements (an int array of `shape`),
    or None where that is plain row-major order."""
    n = math.prod(shape)
    if isinstance(layout, NVMMASharedLayout) and layout.swizzle.bytes and len(shape) >= 1:
        dim = 0 if layout.transposed and len(shape) == 2 else len(shape) - 1    # the contiguous dimension
        cw = max(1, layout.swizzle.bytes // elem_bytes)                       # elements per chunk row
        if shape[dim] <= cw or shape[dim] % cw:
            if dim == len(shape) - 1:
                return None
            return np.arange(n).reshape(shape[::-1]).T.copy()                  # column-major, one chunk
        nch = shape[dim] // cw
        others = [d for i, d in enumerate(shape) if i != dim]
        phys = np.arange(n).reshape(nch, *others, cw)                           # chunk, other dims, in-chunk
        lead = list(range(1, len(others) + 1))
        split = phys.transpose(*lead[:dim], 0, len(others) + 1, *lead[dim:]) if dim < len(shape) - 1 \
            else phys.transpose(*lead, 0, len(others) + 1)
        return np.ascontiguousarray(split).reshape(shape)
    if isinstance(layout, SwizzledSharedLayout) and tuple(layout.order) != tuple(range(len(shape) - 1, -1, -1)) \
            and len(layout.order) == len(shape):
        major = tuple(reversed(layout.order))                                  # major to minor
        phys = np.arange(n).reshape(tuple(shape[d] for d in major))
        return np.ascontiguousarray(phys.transpose(np.argsort(major))).reshape(shape)
    return None


class SmemRegion:
    """An allocation's bytes (`storage`, from byte `offset`) seen as `stages` copies of a `shape` tile of
    `dtype` in `layout`. `data` and `written` give every stage's elements (register model) and which were
    ever written, for inspection; reads and writes go through SmemView."""

    def __init__(self, name: str, dtype: DType, shape: tuple[int, ...], stages: int = 1,
                 observer: AccessObserver | None = None, layout: Layout | None = None, *,
                 storage: SmemBytes | None = None, offset: int = 0):
        self.name, self.dtype, self.shape, self.stages, self.layout = name, dtype, tuple(shape), int(stages), layout
        self.stage_elems = math.prod(self.shape)
        self.elem_bytes = _elem_bits(dtype) // 8
        self.stage_bytes = self.stage_elems * self.elem_bytes
        nbytes = self.stage_bytes * self.stages
        if storage is None:
            storage = SmemBytes(name, nbytes, observer)
        elif observer is not None:
            storage.observer = observer
        if offset < 0 or offset + nbytes > storage.nbytes:
            raise ValueError(f"shared region '{name}' ({nbytes} bytes at {offset}) does not fit the allocation "
                             f"'{storage.name}' of {storage.nbytes} bytes")
        self.storage, self.offset = storage, int(offset)

    @property
    def observer(self) -> AccessObserver | None:
        return self.storage.observer

    @observer.setter
    def observer(self, obs: AccessObserver | None) -> None:
        self.storage.observer = obs

    @property
    def nbytes(self) -> int:
        return self.stage_bytes * self.stages

    def reinterpret(self, dtype: DType, shape: tuple[int, ...], stages: int, layout: Layout | None,
                    offset: int = 0) -> "SmemRegion":
        """The same bytes (from `offset` within this region) as `stages` tiles of `shape` of `dtype`."""
        r = SmemRegion(self.name, dtype, shape, stages, None, layout, storage=self.storage, offset=self.offset + offset)
        if r.nbytes + offset > self.nbytes:
            raise ValueError(f"'{self.name}' as {stages} x {shape} {dtype.name} is {r.nbytes} bytes, more than the "
                             f"{self.nbytes - offset} it has")
        return r

    def elems(self, what: str = "raw") -> np.ndarray:
        """The region's elements, flat (stages * stage_elems), as a view of the bytes: in memory encoding
        ("raw") or the written flags as same-sized unsigned ints ("written": all bytes written == ALL)."""
        src = self.storage.raw if what == "raw" else self.storage.written
        b = src[self.offset:self.offset + self.nbytes]
        return b.view(mem_dtype(self.dtype) if what == "raw" else np.dtype(f"u{self.elem_bytes}"))

    @property
    def all_written(self) -> int:
        return int.from_bytes(b"\x01" * self.elem_bytes, "little")

    def index(self, stage: int | None, perm: tuple[int, ...] | None) -> np.ndarray | slice:
        """The flat element indices of one stage (or all: shape (stages, *shape)), permuted by `perm`;
        a slice where that is one contiguous row-major run."""
        idx = _stage_index(self.layout, self.shape, self.elem_bytes)
        if idx is None and perm is None:
            lo, hi = (0, self.stages) if stage is None else (stage, stage + 1)
            return slice(lo * self.stage_elems, hi * self.stage_elems)
        if idx is None:
            idx = np.arange(self.stage_elems).reshape(self.shape)
        if perm is not None:
            idx = np.transpose(idx, perm)
        if stage is None:
            return (np.arange(self.stages) * self.stage_elems).reshape((-1,) + (1,) * idx.ndim) + idx
        return idx + stage * self.stage_elems

    @property
    def data(self) -> np.ndarray:
        return SmemView(self).read_quiet()

    @property
    def written(self) -> np.ndarray:
        return SmemView(self).written_mask()


@dataclass(frozen=True, eq=False)
class SmemView:
    """A view of a region: all its stages (`stage` None, shape (stages, *shape)) or one stage, with an
    optional axis permutation applied to the stage's tile (`perm`, from smem_trans)."""

    region: SmemRegion
    stage: int | None = None
    perm: tuple[int, ...] | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        tile = self.region.shape if self.perm is None else tuple(self.region.shape[p] for p in self.perm)
        return tile if self.stage is not None else (self.region.stages, *tile)

    @property
    def nbytes(self) -> int:
        return self.region.stage_bytes * (1 if self.stage is not None else self.region.stages)

    @property
    def span(self) -> tuple[SmemBytes, int, int]:
        """(the allocation's bytes, first byte, end byte) this view covers."""
        r = self.region
        lo = r.offset + (0 if self.stage is None else self.stage * r.stage_bytes)
        return r.storage, lo, lo + self.nbytes

    def index(self, stage: int) -> "SmemView":
        if self.stage is not None:
            raise ValueError(f"shared region '{self.region.name}' is already one stage")
        if not 0 <= stage < self.region.stages:
            raise IndexError(f"stage {stage} of shared region '{self.region.name}' with {self.region.stages} stages")
        return SmemView(self.region, stage, self.perm)

    def trans(self, order: tuple[int, ...]) -> "SmemView":
        base = self.perm or tuple(range(len(self.region.shape)))
        return SmemView(self.region, self.stage, tuple(base[i] for i in order))

    def _idx(self):
        return self.region.index(self.stage, self.perm)

    def _take(self, flat: np.ndarray) -> np.ndarray:
        idx = self._idx()
        if isinstance(idx, slice):
            return flat[idx].reshape(self.shape)
        return flat[idx]

    def read_quiet(self, raw: bool = False) -> np.ndarray:
        """The view's elements (a copy) without telling the observer: register model, or memory encoding
        with `raw`."""
        x = np.array(self._take(self.region.elems()))
        return x if raw else from_memory(x, self.region.dtype)

    def read(self, who: Any = None, proxy: str = "generic", loc=None, via: Any = None, raw: bool = False) -> np.ndarray:
        """The view's elements (a copy), in the register model (or memory encoding with `raw`). `via`: what
        the read is in flight under until it completes (an async WGMMA's or TMA store's token)."""
        obs = self.region.observer
        if obs is not None:
            if via is None:
                obs.on_smem(self, who, "read", proxy, loc)
            else:
                obs.on_smem(self, who, "read", proxy, loc, via)
        return self.read_quiet(raw)

    def written_mask(self) -> np.ndarray:
        return self._take(self.region.elems("written")) == self.region.all_written

    def write(self, x: np.ndarray, who: Any = None, proxy: str = "generic", loc=None,
              mask: np.ndarray | None = None, via: Any = None, raw: bool = False) -> None:
        """Store `x` (the view's shape; register model, or memory encoding with `raw`) into the view;
        `mask` (same shape) keeps unmasked elements. `via`: what makes an async write visible to its
        readers (the MBarrier a TMA load completes on, a cp.async group)."""
        obs = self.region.observer
        if obs is not None:
            obs.on_smem(self, who, "write", proxy, loc, via)
        r = self.region
        shape = self.shape
        x = np.asarray(x)
        enc = x.astype(mem_dtype(r.dtype), copy=False) if raw else to_memory(x, r.dtype)
        enc = np.broadcast_to(enc, shape)
        flat, wr = r.elems(), r.elems("written")
        idx = self._idx()
        if isinstance(idx, slice):
            idx = np.arange(idx.start, idx.stop).reshape(shape) if mask is not None else idx
            if isinstance(idx, slice):
                flat[idx] = enc.reshape(-1)
                wr[idx] = r.all_written
                return
        if mask is None:
            flat[idx] = enc
            wr[idx] = r.all_written
        else:
            m = np.broadcast_to(np.asarray(mask, bool), shape)
            flat[idx[m]] = enc[m]
            wr[idx[m]] = r.all_written


@dataclass(eq=False)
class MBarrier:
    """One mbarrier. A phase completes when its pending arrivals reach 0 and its transaction count is 0;
    then `phase` counts up (its parity is what `mbarrier.try_wait.parity` tests) and the arrivals reset
    to `count`. `completed(parity)`: whether the phase of that parity that the waiter means has completed,
    with PTX's rule: a wait on parity p returns once the current phase's parity differs from p."""

    count: int
    pending: int = field(init=False)
    tx: int = 0
    phase: int = 0

    def __post_init__(self):
        self.pending = self.count

    def arrive(self, n: int = 1) -> None:
        self.pending -= n
        self._maybe_complete()

    def expect_tx(self, nbytes: int) -> None:
        self.tx += nbytes

    def complete_tx(self, nbytes: int) -> None:
        self.tx -= nbytes
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        if self.pending <= 0 and self.tx <= 0:
            self.phase += 1
            self.pending, self.tx = self.count, 0

    def completed(self, parity: int) -> bool:
        return (self.phase & 1) != (int(parity) & 1)


@dataclass(frozen=True, eq=False)
class BarrierView:
    """A set of mbarriers (`index` None) or one of them."""

    name: str
    barriers: tuple[MBarrier, ...]
    index: int | None = None

    def at(self, i: int) -> "BarrierView":
        if self.index is not None:
            raise ValueError(f"mbarrier '{self.name}' is already one barrier")
        if not 0 <= i < len(self.barriers):
            raise IndexError(f"mbarrier {i} of '{self.name}' with {len(self.barriers)} stages")
        return BarrierView(self.name, self.barriers, i)

    @property
    def one(self) -> MBarrier:
        if self.index is None:
            if len(self.barriers) != 1:
                raise ValueError(f"mbarrier set '{self.name}' has {len(self.barriers)} barriers: index one first")
            return self.barriers[0]
        return self.barriers[self.index]
