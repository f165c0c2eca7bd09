"""The interpreter's model of a program's on-chip state: shared-memory regions (with their stages) and
mbarriers. Values of IR types `SmemType` and `BarrierType` are `SmemView` and `BarrierView` objects.

    SmemRegion   one `smem_alloc`: `stages` copies of a tile, held in the register model (values.py: bf16
                 and fp8 as float32 holding format values), plus which elements were ever written
    SmemView     a region, or one stage of it, possibly transposed: `read(who)` / `write(who, x, proxy)`
    MBarrier     one mbarrier: arrival count, pending arrivals, transaction bytes, phase
    BarrierView  a set of mbarriers (`barrier_alloc`) or one of them (`barrier_index`)

`who` is the reader or writer (the warp role's task, or None for a program without roles); `proxy` says
whether the access is the generic proxy's (st.shared, ld.shared: "generic") or the async proxy's (TMA,
WGMMA, cp.async: "async"). Every access goes through `SmemRegion.observer` when one is set (the hazard
tracker), so data movement and hazard checking stay apart: the rules move data, the observer judges order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..types import DType
from .values import reg_dtype


class AccessObserver(Protocol):
    """What watches shared-memory accesses and barrier events (the hazard tracker implements it)."""

    def on_smem(self, view: "SmemView", who: Any, kind: str, proxy: str, loc, via: Any = None) -> None: ...


@dataclass(eq=False)
class SmemRegion:
    """One shared-memory allocation: `data[stage]` is a stage's tile; `written` marks elements ever stored."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    stages: int
    data: np.ndarray = field(init=False)
    written: np.ndarray = field(init=False)
    observer: AccessObserver | None = None

    def __post_init__(self):
        self.data = np.zeros((self.stages, *self.shape), reg_dtype(self.dtype))
        self.written = np.zeros((self.stages, *self.shape), np.bool_)


@dataclass(frozen=True, eq=False)
class SmemView:
    """A view of a region: all its stages (`stage` None, shape (stages, *shape)) or one stage, with an
    optional axis permutation applied to the stage's tile (`perm`, from smem_trans)."""

    region: SmemRegion
    stage: int | None = None
    perm: tuple[int, ...] | None = None

    def index(self, stage: int) -> "SmemView":
        if self.stage is not None:
            raise ValueError(f"shared region '{self.region.name}' is already one stage")
        if not 0 <= stage < self.region.stages:
            raise IndexError(f"stage {stage} of shared region '{self.region.name}' with {self.region.stages} stages")
        return SmemView(self.region, stage, self.perm)

    def trans(self, order: tuple[int, ...]) -> "SmemView":
        base = self.perm or tuple(range(len(self.region.shape)))
        return SmemView(self.region, self.stage, tuple(base[i] for i in order))

    def _sel(self):
        return slice(None) if self.stage is None else self.stage

    def _viewed(self, a: np.ndarray) -> np.ndarray:
        if self.perm is None:
            return a
        off = 1 if self.stage is None else 0
        return np.transpose(a, tuple(range(off)) + tuple(p + off for p in self.perm))

    def read(self, who: Any = None, proxy: str = "generic", loc=None) -> np.ndarray:
        """The view's elements (a copy), in the register model."""
        obs = self.region.observer
        if obs is not None:
            obs.on_smem(self, who, "read", proxy, loc)
        return np.array(self._viewed(self.region.data[self._sel()]))

    def written_mask(self) -> np.ndarray:
        return self._viewed(self.region.written[self._sel()])

    def write(self, x: np.ndarray, who: Any = None, proxy: str = "generic", loc=None,
              mask: np.ndarray | None = None, via: Any = None) -> None:
        """Store `x` (the view's shape) into the view; `mask` (same shape) keeps unmasked elements. `via`: what
        makes an async write visible to its readers (the MBarrier a TMA load completes on, a cp.async group)."""
        obs = self.region.observer
        if obs is not None:
            obs.on_smem(self, who, "write", proxy, loc, via)
        dst = self._viewed(self.region.data[self._sel()])        # a numpy view: writes land in data
        wr = self._viewed(self.region.written[self._sel()])
        x = np.broadcast_to(np.asarray(x, dst.dtype), dst.shape)
        if mask is None:
            dst[...] = x
            wr[...] = True
        else:
            m = np.broadcast_to(mask, dst.shape)
            dst[m] = x[m]
            wr[m] = True


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
