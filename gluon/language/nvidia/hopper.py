"""Hopper (SM90) builtins: mbarriers, thread-block clusters, TMA, warpgroup MMA, PTX-pass opt-ins.

mbarriers (`mbarrier`, `Barrier`, `barrier_expect` / `barrier_arrive` / `barrier_wait`), clusters
(`set_cluster`, `cluster_rank`, `cluster_sync`), TMA copies (`tma_load`, `tma_store`,
`tma_store_wait`, `fence_async_shared`), WGMMA (`wgmma`, `wgmma_wait`, `split_cols`), programmatic
dependent launch (`griddep_wait`, `griddep_launch_dependents`), and the builtins that opt a kernel into
one of the backend's PTX passes (`set_tma_prefetch`, `set_lean_prologue`). Each checks that the kernel's
arch has the feature, so on another arch it is an `ArchError` at the user's line. Blackwell keeps all of them but WGMMA; its
tcgen05 MMA completes on these mbarriers.
"""
from __future__ import annotations

import builtins
from typing import Sequence

from ... import ir
from ...types import DotOperandLayout, DType, Layout, MMALayout, NVMMASharedLayout
from ..core import Tensor, _to_tensor, cast, convert_layout
from ..dot import _accumulator, _dot_shapes, _k_width
from ..memory import Shared, _global
from ..tracing import _Handle, _Trace, _tr, _user_loc


# ---------------------------------------------------------------------------------- mbarriers


class Barrier(_Handle):
    """One or more mbarriers."""

    def __init__(self, value: ir.Value, name: str = ""):
        self.value, self.name = value, name

    stages = property(lambda self: self.value.type.stages)

    def __getitem__(self, stage) -> "Barrier":
        s = _to_tensor(stage, DType.i32)
        return Barrier(_tr().emit("barrier_index", [self, s], [self.value.type.stage()], names=[self.name]).result,
                       self.name)

    def expect(self, nbytes: int, pred=None) -> None:
        barrier_expect(self, nbytes, pred)

    def arrive(self, count: int = 1, cluster: bool = False) -> None:
        barrier_arrive(self, count, cluster)

    def wait(self, phase) -> None:
        barrier_wait(self, phase)

    def arrive_after_copies(self) -> None:
        cp_async_arrive(self)


def mbarrier(count: int = 1, name: str = "", stages: int = 1) -> Barrier:
    t = _tr()
    t.require("mbarrier", "mbarrier")
    return Barrier(t.emit("barrier_alloc", [], [ir.BarrierType(stages, count)], {"name": name, "count": count},
                          names=[name or "bar"]).result, name)


def _barrier(b) -> Barrier:
    if isinstance(b, Barrier):
        return b
    raise ir.GluonError(f"expected an mbarrier (from mbarrier()), got {type(b).__name__}", _user_loc())


def barrier_expect(bar, nbytes: int, pred=None) -> None:
    t = _tr()
    t.require("mbarrier", "barrier_expect")
    ops = [_barrier(bar)] + ([_to_tensor(pred, DType.i1)] if pred is not None else [])
    t.emit("barrier_expect", ops, [], {"bytes": int(nbytes)})


def barrier_arrive(bar, count: int = 1, cluster: bool = False) -> None:
    """Arrive `count` times; with `cluster=True` once on this barrier in every CTA of the cluster (the
    "slot free" signal of a ring that other CTAs fill by multicast: count it num_ctas times)."""
    t = _tr()
    t.require("mbarrier", "barrier_arrive")
    attrs = {"count": count}
    if cluster:
        _need_cluster(t, "arrive", "cluster=True")
        if count != 1:
            raise ir.GluonError(f"arrive(count={count}, cluster=True): a cluster arrive counts once per CTA",
                                _user_loc())
        attrs["cluster"] = True
    t.emit("barrier_arrive", [_barrier(bar)], [], attrs)


def cp_async_arrive(bar) -> None:
    """PTX `cp.async.mbarrier.arrive`: an arrival on `bar` once every cp.async copy this thread has issued so far
    has landed. The phase's pending count is raised by one at the op and lowered when the copies land, so the
    barrier's count per phase stays what its other arrives make it, and the phase cannot complete before the
    copies: call it before the arrive that completes the phase (a ring's `expect`), and the copies land with the
    stage's TMA loads for whoever waits on it (DeepGEMM's scales beside the operands). No commit or wait is
    needed for these copies."""
    t = _tr()
    t.require("mbarrier", "cp_async_arrive")
    t.require("cp_async", "cp_async_arrive")
    t.emit("cp_async_arrive", [_barrier(bar)], [])


def barrier_wait(bar, phase) -> None:
    t = _tr()
    t.require("mbarrier", "barrier_wait")
    t.emit("barrier_wait", [_barrier(bar), _to_tensor(phase, DType.i32)], [])


# ---------------------------------------------------------------------------------- clusters


def _need_cluster(t: "_Trace", name: str, args: str = "") -> None:
    """`name(args)` is a cluster builtin: the arch must have clusters and the kernel must have set one."""
    t.require("cluster", name)
    if t.kernel.attrs.get("num_ctas", 1) < 2:
        raise ir.GluonError(f"{name}({args}) needs a thread-block cluster: call set_cluster(num_ctas) first "
                            f"(num_ctas 2, 4 or 8)", _user_loc())


def set_cluster(num_ctas: int) -> None:
    """Run this kernel in clusters of `num_ctas` CTAs along x (1 = no cluster). The launch grid then
    counts clusters (Triton's launcher starts grid[0] * num_ctas CTAs); `program_id(0)` and
    `num_programs(0)` still count CTAs, and `cluster_rank()` is program_id(0) % num_ctas."""
    t = _tr()
    if num_ctas not in (1, 2, 4, 8):
        raise ir.GluonError(f"set_cluster({num_ctas}): clusters of 1, 2, 4 or 8 CTAs (a portable cluster) are "
                            "supported", _user_loc())
    if num_ctas > 1:
        t.require("cluster", "set_cluster")
    t.kernel.attrs["num_ctas"] = int(num_ctas)


def cluster_rank() -> Tensor:
    """This CTA's rank in its cluster (0 .. num_ctas - 1)."""
    t = _tr()
    _need_cluster(t, "cluster_rank")
    return Tensor(t.emit("cluster_rank", [], [ir.ScalarType(DType.i32)]).result)


def cluster_sync(memory: bool = True) -> None:
    """All threads of all CTAs in the cluster meet (barrier.cluster); mbarrier inits made before it are
    visible to the other CTAs after it. Every warp must reach it: call it at the top of every warp role.
    `memory`: the threads' memory writes before it are also visible to the other CTAs' reads after it (a release /
    acquire barrier, a GPU-scope fence in the machine code); False where only the inits must be (a relaxed arrive
    after `fence.mbarrier_init`, CUTLASS's start of a cluster kernel)."""
    t = _tr()
    _need_cluster(t, "cluster_sync")
    t.emit("cluster_sync", attrs={"memory": bool(memory)})


# ---------------------------------------------------------------------------------- dependent launch


def griddep_wait() -> None:
    """Wait until the kernels before this one on the stream have finished and their writes are visible
    (`griddepcontrol.wait`). A kernel that calls it is launched as a programmatic dependent (PDL): it may
    start while the kernel before it still runs (from when every CTA of that one has called
    `griddep_launch_dependents` or ended), so whatever it reads or writes of that kernel's memory must
    come after the wait. Launched any other way it returns at once."""
    t = _tr()
    t.require("griddep", "griddep_wait")
    t.emit("griddep_wait")
    t.kernel.attrs["launch_pdl"] = True


def griddep_launch_dependents() -> None:
    """Let the kernel after this one on the stream start, if it was launched as a programmatic dependent
    (one that calls `griddep_wait`), once every CTA of this kernel has called this or ended
    (`griddepcontrol.launch_dependents`): a hint, which changes no value this kernel computes."""
    t = _tr()
    t.require("griddep", "griddep_launch_dependents")
    t.emit("griddep_launch_dependents")


# ---------------------------------------------------------------------------------- TMA


def fence_async_shared() -> None:
    t = _tr()
    t.require("tma", "fence_async_shared")
    t.emit("fence_async_shared")


def _single(x, what: str):
    if x.value.type.stages != 1:
        raise ir.GluonError(f"{what} '{x.name}' has {x.value.type.stages} stages: index one stage, e.g. {x.name or 'x'}[s]",
                            _user_loc())


def _coords(coords, rank: int) -> list[Tensor]:
    if coords is None:
        coords = (0,) * rank
    coords = list(coords)
    if len(coords) != rank:
        raise ir.GluonError(f"TMA coordinates {len(coords)} for a rank-{rank} tensor", _user_loc())
    return [cast(_to_tensor(c, DType.i32), DType.i32) for c in coords]


def tma_load(dst: Shared, src, coords=None, barrier: Barrier | None = None, *, barrier_name: Barrier | None = None,
             box: Sequence[int] | None = None, multicast: bool = False) -> None:
    """TMA: copy the tile of global tensor `src` at `coords` into shared `dst`, completing on `barrier`.

    `box` states the TMA box you expect (checked against the swizzle by the layout pass). With
    `multicast=True` (in a cluster) the tile lands in `dst` and completes on `barrier` in every CTA of
    the cluster, so each CTA's barrier must expect the bytes all CTAs multicast to it. Every load through
    the same global tensor must then multicast."""
    t = _tr()
    t.require("tma", "tma_load")
    bar = barrier if barrier is not None else barrier_name
    if bar is None:
        raise ir.GluonError("tma_load needs the mbarrier it completes on: tma_load(dst, src, coords, barrier=bar)",
                            _user_loc())
    g = _global(src)
    if not isinstance(dst, Shared):
        raise ir.GluonError("tma_load's destination must be a shared region from smem()", _user_loc())
    if not isinstance(dst.layout, NVMMASharedLayout):
        raise ir.GluonError(f"TMA needs an NVMMA-swizzled shared layout (Layout.swizzled), '{dst.name}' has {dst.layout}",
                            _user_loc())
    if g.dtype != dst.dtype:
        raise ir.GluonError(f"tma_load from {g.name} ({g.dtype.name}) into '{dst.name}' ({dst.dtype.name}): dtypes differ",
                            _user_loc())
    desc = g.as_desc(dst.shape, dst.layout.swizzle)
    attrs = {"box": tuple(box)} if box is not None else {}
    if multicast:
        _need_cluster(t, "tma_load", "multicast=True")
        attrs["multicast"] = True
    t.emit("tma_load", [desc, dst, _barrier(bar), *_coords(coords, len(dst.shape))], [], attrs)


def tma_store(dst, coords, src: Shared) -> None:
    t = _tr()
    t.require("tma", "tma_store")
    g = _global(dst)
    _single(src, "shared region")
    desc = g.as_desc(src.shape, src.layout.swizzle)
    t.emit("tma_store", [desc, src, *_coords(coords, len(src.shape))])


def tma_store_wait(pendings: int = 0) -> None:
    t = _tr()
    t.require("tma", "tma_store_wait")
    t.emit("tma_store_wait", [], [], {"pendings": pendings})


# ---------------------------------------------------------------------------------- WGMMA


def wgmma(a, b, acc="acc", *, wait: bool = True, pendings: int = 0, use_acc: bool = True) -> Tensor:
    """Hopper warpgroup MMA: acc += a @ b. `a` shared or registers, `b` shared; acc in the WGMMA layout.

    `wait=False` leaves the MMA in flight (call `wgmma_wait`), for software pipelining. With
    `use_acc=False` the MMA ignores acc's values (acc = a @ b, as a fresh product such as attention's
    S = Q K^T wants): acc then only gives the result's shape and layout."""
    t = _tr()
    t.require("wgmma", "wgmma")
    if not isinstance(b, Shared):
        raise ir.GluonError("wgmma's B operand must be in shared memory (smem)", _user_loc())
    m, n = _dot_shapes(a, b)
    acc_t, name = _accumulator(acc, m, n, Layout.wgmma((t.warps, 1), instr_n=builtins.min(n, 256),
                                                      operand_dtype=b.dtype))
    if isinstance(a, Tensor) and a.layout is None:
        a = convert_layout(a, DotOperandLayout(0, acc_t.layout, _k_width(a.dtype)))
    attrs = {"is_async": True} if use_acc else {"is_async": True, "use_acc": False}
    r = Tensor(t.emit("wgmma", [a, b, acc_t], [acc_t.type], attrs, names=[name or "acc"]).result)
    if wait:
        deps = [x for x in (a, b) if isinstance(x, Shared)]
        r = Tensor(t.emit("wgmma_wait", [r, *deps], [acc_t.type], {"pendings": pendings}, names=[name or "acc"]).result)
    if name:
        t.named[name] = r
    return r


def wgmma_wait(acc, *deps: Shared, pendings: int = 0) -> Tensor:
    t = _tr()
    t.require("wgmma", "wgmma_wait")
    acc_t, name = (t.named[acc], acc) if isinstance(acc, str) else (acc, None)
    r = Tensor(t.emit("wgmma_wait", [acc_t, *deps], [acc_t.type], {"pendings": pendings}).result)
    if name:
        t.named[name] = r
    return r


def split_cols(x: Tensor) -> tuple[Tensor, Tensor]:
    """The left and right column halves of a WGMMA accumulator tile (e.g. to store a 64x256 output as
    four 64x64 subtiles through a small staging buffer). Free: each half is a subset of every thread's
    registers, in the WGMMA layout of half the instruction width (what Triton's reshape + permute +
    split of an accumulator gives). The tile must be one instruction tile per warp: rows = 16 x the
    warps along M, columns = the instruction width; halves at least 8 columns wide."""
    t = _tr()
    t.require("wgmma", "split_cols")
    x = _to_tensor(x)
    lay = x.layout
    if not (isinstance(lay, MMALayout) and lay.version == 3):
        raise ir.GluonError(f"split_cols takes a WGMMA accumulator (Layout.wgmma), got a tile in {lay}", _user_loc())
    wm, wn = lay.warps_per_cta
    m, n = x.shape
    if wn != 1 or m != 16 * wm or n != lay.instr_shape[1]:
        raise ir.GluonError(f"split_cols: a {m}x{n} tile in {lay} holds more than one instruction tile per warp (it "
                            f"splits {16 * wm}x{lay.instr_shape[1]} tiles, warps along M only)", _user_loc())
    if n % 16:
        raise ir.GluonError(f"split_cols: {n} columns do not split into two WGMMA widths (multiples of 8)", _user_loc())
    half = MMALayout(3, lay.warps_per_cta, (lay.instr_shape[0], n // 2, *lay.instr_shape[2:]))
    ht = ir.TileType(x.dtype, (m, n // 2), half)
    op = t.emit("split_cols", [x], [ht, ht])
    return Tensor(op.results[0]), Tensor(op.results[1])


# ---------------------------------------------------------------------------------- PTX-pass opt-ins


def set_tma_prefetch(enabled: bool = True) -> None:
    """Prefetch every TMA descriptor this kernel copies through into the SM's descriptor cache at kernel
    start (CUTLASS does this in every TMA kernel), so neither the first TMA load nor the first TMA store
    waits for its descriptor to be read from memory. Triton 3.6 has no op for it: the PTX pass
    `backend/ptx_prefetch.py` inserts the `prefetch.tensormap` instructions."""
    _opt_into_ptx_pass("tma_prefetch", "tma", enabled)


def _opt_into_ptx_pass(attr: str, family: str, enabled: bool) -> None:
    """Mark the kernel for the PTX pass cued by `attr` (the lowering writes its header line), which needs
    an arch with `family`; `set_<attr>` is the builtin the user called."""
    t = _tr()
    if enabled:
        t.require(family, f"set_{attr}")
    t.kernel.attrs[attr] = bool(enabled)


def set_ffma_yield(enabled: bool = True) -> None:
    """Let every second FFMA of each run after a WGMMA wait (fp8 block scales' promotion) yield its warp
    scheduler, so another warpgroup's warps issue their WGMMA there instead of waiting for the whole run: the SASS
    pass `backend/sass_passes.py` sets those control bits in the binary (DeepGEMM's FFMA interleaving); no
    instruction changes."""
    t = _tr()
    if enabled:
        t.require("wgmma", "set_ffma_yield")
    t.kernel.attrs["ffma_yield"] = bool(enabled)


def set_lean_prologue(enabled: bool = True) -> None:
    """Drop the CTA barriers Triton's Membar puts between this kernel's barrier inits and first TMA loads
    (one after every init and around every load), keeping one between the last init and the first op of
    another thread: the PTX pass `backend/ptx_prologue.py`, which checks the prologue holds nothing else
    and leaves it as it was otherwise. The kernel promises its prologue's TMA loads fill distinct buffers."""
    _opt_into_ptx_pass("lean_prologue", "tma", enabled)

