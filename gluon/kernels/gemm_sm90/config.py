"""What the SM90 GEMM is tuned by: `GemmConfig`, the hand-picked configs, and the host-side rules.

A `GemmConfig` is frozen and checked when it is made (one `GluonError` naming the field and what it
takes), so every rule about the knobs alone lives here, once; what depends on the operands (their
dtypes, B's layout) is checked by the kernel, and what the hardware allows (shared memory, registers,
swizzles, warp roles) by the compiler passes. Users and the `--set KEY=VALUE` flags give a dict of
overrides, converted once (`to_config`). Measurements behind the choices: docs/PERF.md.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, fields, replace
from typing import Mapping

from gluon.arch import SM90
from gluon.ir import GluonError
from gluon.types import SwizzleMode

from ..config_checks import cached_hash, flag, overridden, positive_int, state_without_hash
from .geometry import (  # noqa: F401  (re-exported: the rules' callers import them from here)
    balanced_splits, cdiv, grid, num_warps, slice_work, slot_use, split_k, tiles, units)

EPILOGUES = ("tma", "tma2", "ring", "coalesced", "direct")
AUTO = "auto"
_INTS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "GROUP_M", "CONSUMER_WGS", "PRODUCER_REGS", "CONSUMER_REGS",
         "CLUSTER_M", "CLUSTER_K", "SPLITK_GRID", "CTAS_PER_SM")
CLUSTER_K_SIZES = (1, 2, 4, 8)      # a portable cluster holds at most 8 CTAs
SPLITK_GRID_SIZES = (1, 2, 4, 8, 16)
_BOOLS = ("SPLIT_WGS", "K_ZIGZAG", "TMA_PREFETCH", "SPLITK_FIXUP", "SWAP_AB", "MMA_TURNS", "SCALES_AHEAD", "PDL",
          "FFMA_YIELD", "PIPELINED_PROMOTION", "QUARTERS", "SCALES_IN_RING")
_AUTO_BOOLS = ("EARLY_LOADS", "LEAN_PROLOGUE")
_SWIZZLES = tuple(m.value for m in SwizzleMode)
_SPLIT_CONSUMER_REGS = 216          # the second consumer warpgroup's setmaxnreg with SPLIT_WGS


@dataclass(frozen=True)
class GemmConfig:
    """The knobs of `gemm_sm90`. `GemmConfig()` is DEFAULT_CONFIG: 128x256x64 tiles, 3 stages, two
    cooperative consumer warpgroups.

    BLOCK_M, BLOCK_N, BLOCK_K   the output tile and the k-step
    STAGES                      depth of the TMA ring (A and B stages, `ready` / `empty` mbarriers)
    GROUP_M                     tile rows walked down a column band before moving right (L2 reuse of B)
    CONSUMER_WGS                consumer warpgroups sharing the BLOCK_M x BLOCK_N accumulator
    PRODUCER_REGS               the producer warp's setmaxnreg budget
    SWIZZLE                     the A and B rings' swizzle width in bytes
    EPILOGUE                    how the output tile leaves: "tma" (staged, one TMA store), "tma2" (as "tma"
                                in two staging tiles a role used in turn, so a tile's store is waited for only
                                when its staging tile comes round again: two stores in flight), "coalesced"
                                (staged, 16-byte stores by every consumer thread), "direct" (stores from
                                registers), "ring" (staged in the role's own A ring, which leaves room for
                                a 4th 128x256x64 stage; for one unit per program); "auto": "tma" when the
                                staging tile fits in 64 KiB, else "direct"
    SPLIT_WGS                   each consumer warpgroup its own role, with its own A ring, staging tile
                                and stage release (no partition-wide barrier per k-step)
    CONSUMER_REGS               with SPLIT_WGS, the second consumer warpgroup's setmaxnreg (the first,
                                Triton's default partition, gets what is left)
    CLUSTER_M                   CTAs per cluster along M: they share their B tile, each loads 1/CLUSTER_M
                                of it and multicasts it (a PTX pass: docs/CLUSTERS.md)
    K_ZIGZAG                    a program's odd units load their K slice top down, so consecutive waves
                                meet in L2
    TMA_PREFETCH                prefetch the A, B and C descriptors at kernel start
    EARLY_LOADS                 the first unit's first stages loaded by the default warps before the warp
                                roles start; "auto": on without CLUSTER_M and "ring" (CLUSTER_K included)
    LEAN_PROLOGUE               drop the CTA barriers between the barrier inits and the early loads but
                                the one the inits need (a PTX pass); "auto": as EARLY_LOADS's (with CLUSTER_K,
                                whose CTAs meet no cluster barrier before the roles start, and with PDL)
    SPLITK_FIXUP                with split-K, the last K slice to finish each output element sums the
                                fp32 partials (in slice order: deterministic) and writes C, so no second
                                kernel runs
    SWAP_AB                     compute C^T = B^T A^T: B's BLOCK_N rows on WGMMA's M (64 per instruction),
                                A's BLOCK_M rows on its N (a power of two, 8 .. 256), so a few rows of A
                                (decode: M of 1 .. 64) neither waste the MMA nor shared memory; one
                                consumer warpgroup, or two cooperative ones splitting B's rows (sharing A's
                                tile), stores C from registers; with CLUSTER_M=2 A's row blocks go in pairs that
                                share the B tile (each CTA loads half of it and multicasts it)
    CLUSTER_K                   split-K inside a cluster: its CLUSTER_K CTAs (2, 4 or 8) take the K slices of
                                one output tile, store their fp32 partials, meet at a cluster barrier, and
                                each sums 1/CLUSTER_K of the tile's columns over the slices in slice order
                                (deterministic, the values `splitk_reduce` gives) and stores C: no second
                                kernel. The launch's split count is CLUSTER_K
    SPLITK_GRID                 split-K summed in the kernel across the grid: SPLITK_GRID CTAs (2, 4, 8 or 16,
                                anywhere on the GPU) take the K slices of one output tile, store their fp32
                                partials, meet at the tile's counter in global memory (`ptx.grid_meet`), and
                                each sums 1/SPLITK_GRID of the tile's columns over the slices in slice order (the
                                values `splitk_reduce` gives) and stores C: no second kernel, no cluster to
                                place. Every unit must be resident at once (one a CTA, at most one CTA an SM;
                                `launch` checks). The launch's split count is SPLITK_GRID
    MMA_TURNS                   fp8 block scales (SCALE="block") with SPLIT_WGS and two or three consumer
                                warpgroups: they take turns running their k-step's WGMMAs (named barriers,
                                FlashAttention-3's ping-pong; a turn held until the WGMMAs are done), so one's
                                promotion of its product into the fp32 sum runs under another's WGMMAs instead
                                of all promoting while the tensor cores idle
    SCALES_AHEAD                fp8 block scales: each k-step's A and B scales are copied by cp.async into shared
                                memory one k-step ahead (with the previous k-step), so their L2 latency is not
                                waited for between the WGMMA and the promotion (opt-in: slower where timed); at
                                BLOCK_N 256 (the halves) loaded into registers a k-step early instead
    PIPELINED_PROMOTION         fp8 block scales, cuBLAS's k-loop: k-step i+1's WGMMA is issued right after k-step
                                i's promotion (into the same product registers) and waited for in the next
                                iteration, after stage i+1's ready wait and k-step i+1's scale loads, which then run
                                under it; with MMA_TURNS the turn passes right after the issue; not with
                                SCALES_AHEAD (opt-in: not yet timed)
    QUARTERS                    fp8 block scales at BLOCK_N 256: each half's WGMMA as two of 64 columns, two in
                                flight at a time, so each quarter's promotion runs under the next one's WGMMA
                                (`fp8_scales.block_scaled_quarters`); opt-in
    SCALES_IN_RING              fp8 block scales: the producer copies each k-step's A and B scales into the ring's
                                stage by cp.async, counted by its `ready` barrier, so consumers read them from
                                shared memory after the wait they make anyway (DeepGEMM's, cuBLAS's); not with
                                SCALES_AHEAD, QUARTERS or EARLY_LOADS (opt-in: 6-14% slower where timed)
    PDL                         programmatic dependent launch: the kernel is launched as a dependent of the kernel
                                before it (its prologue overlaps that one's end; it waits, `griddep_wait`, before
                                its first global access) and lets the next launch at its start; the split-K second
                                pass (`splitk_reduce`) likewise waits for this kernel's partials in the kernel
    FFMA_YIELD                  fp8 block scales: every second FFMA of each k-step's promotion yields its warp
                                scheduler (control bits set in the binary after ptxas, `gl.set_ffma_yield`), so
                                another warpgroup's WGMMA issues in the middle of it (DeepGEMM's FFMA interleaving);
                                opt-in: slower than without it where timed (docs/PERF.md, thirty-ninth session)
    CTAS_PER_SM                 1 or 2: with 2 the kernel launches with half the register file a CTA
                                (`set_ctas_per_sm`; setmaxnreg shares it out among the roles) and the persistent
                                grid holds two CTAs an SM, so small tiles run one a CTA, all resident at once (plain
                                Triton's form at decode); the shared memory of a CTA must fit twice (the compile
                                step checks: about 113 KiB each)
    N_STEP                      columns from one tile to the next, a multiple of 16 (0: BLOCK_N). Below BLOCK_N the
                                tiles overlap: each loads and multiplies BLOCK_N columns but writes only its first
                                N_STEP (the rest are the next tile's), so a tile reaches widths the kernel's
                                power-of-two tensors cannot (cuBLAS's 112- and 224-wide decode tiles, one wave where
                                power-of-two ones make 0.85 or 1.7); C stored by address ("direct" or "coalesced"),
                                no cluster, no K slices meeting in the kernel
    """

    BLOCK_M: int = 128
    BLOCK_N: int = 256
    BLOCK_K: int = 64
    STAGES: int = 3
    GROUP_M: int = 16
    CONSUMER_WGS: int = 2
    PRODUCER_REGS: int = 40
    SWIZZLE: int = 128
    EPILOGUE: str = AUTO
    SPLIT_WGS: bool = False
    CONSUMER_REGS: int = _SPLIT_CONSUMER_REGS
    CLUSTER_M: int = 1
    K_ZIGZAG: bool = False
    TMA_PREFETCH: bool = False
    EARLY_LOADS: bool | str = AUTO
    LEAN_PROLOGUE: bool | str = AUTO
    SPLITK_FIXUP: bool = False
    SWAP_AB: bool = False
    CLUSTER_K: int = 1
    SPLITK_GRID: int = 1
    MMA_TURNS: bool = False
    SCALES_AHEAD: bool = False
    PDL: bool = False
    CTAS_PER_SM: int = 1
    FFMA_YIELD: bool = False
    PIPELINED_PROMOTION: bool = False
    QUARTERS: bool = False
    SCALES_IN_RING: bool = False
    N_STEP: int = 0

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    def __post_init__(self):
        for name in _INTS:
            object.__setattr__(self, name, positive_int("GemmConfig", name, getattr(self, name)))
        for name in ("BLOCK_N", "BLOCK_K"):     # tile extents of the kernel's tensors: powers of two
            v = getattr(self, name)
            if v & (v - 1):
                raise GluonError(f"GemmConfig {name}={v}: takes a power of two (a tile extent), e.g. "
                                 f"{1 << (v.bit_length() - 1)} or {1 << v.bit_length()}")
        if self.SWIZZLE not in _SWIZZLES:
            raise GluonError(f"GemmConfig SWIZZLE={self.SWIZZLE!r}: takes one of {', '.join(map(str, _SWIZZLES))} "
                             "(bytes)")
        if self.EPILOGUE not in EPILOGUES + (AUTO,):
            raise GluonError(f"GemmConfig EPILOGUE={self.EPILOGUE!r}: use 'tma', 'tma2', 'ring', 'coalesced' or "
                             "'direct' (or 'auto': 'tma' or 'direct' by the output's size)")
        for name in _BOOLS:
            object.__setattr__(self, name, flag("GemmConfig", name, getattr(self, name)))
        for name in _AUTO_BOOLS:
            v = getattr(self, name)
            if v != AUTO:
                object.__setattr__(self, name, flag("GemmConfig", name, v, "True, False or 'auto'"))
        if self.EPILOGUE == "coalesced" and self.CLUSTER_M > 1:
            raise GluonError(f"GemmConfig EPILOGUE='coalesced' has not run in a cluster (CLUSTER_M={self.CLUSTER_M} "
                             "> 1) on a GPU yet; use EPILOGUE='tma' there")
        if not self.early_loads_fit:
            why = (f"CLUSTER_M={self.CLUSTER_M}" if self.CLUSTER_M > 1 else "EPILOGUE='ring'" if self.EPILOGUE == "ring"
                   else "SCALES_IN_RING=True")
            if self.EARLY_LOADS is True:
                raise GluonError(f"GemmConfig EARLY_LOADS=True: EARLY_LOADS is written for the kernel without "
                                 f"multicast clusters, the ring epilogue or scales in the ring ({why}); use "
                                 "EARLY_LOADS=False (or 'auto') with those")
            if self.LEAN_PROLOGUE is True:
                raise GluonError(f"GemmConfig LEAN_PROLOGUE=True: LEAN_PROLOGUE is verified for the cooperative "
                                 f"kernel without multicast clusters, the ring epilogue or scales in the ring ({why}); "
                                 "use LEAN_PROLOGUE=False (or 'auto') with those")
        if self.SPLITK_FIXUP and self.EPILOGUE not in ("direct", AUTO):
            raise GluonError(f"GemmConfig SPLITK_FIXUP=True with EPILOGUE={self.EPILOGUE!r}: the fixup stores C from "
                             "registers, and a kernel reaches C either by pointer or by TMA; use EPILOGUE='direct' "
                             "(or 'auto')")
        _check_n_step(self)
        if self.SWAP_AB:
            _check_swap_ab(self)
        else:
            _check_rows(self)
        if self.CLUSTER_K > 1:
            _check_cluster_k(self)
        if self.SPLITK_GRID > 1:
            _check_splitk_grid(self)
        if self.CTAS_PER_SM > 2:
            raise GluonError(f"GemmConfig CTAS_PER_SM={self.CTAS_PER_SM}: takes 1 or 2 (two CTAs an SM need tiles "
                             "whose ring fits in half of its shared memory; more leave too few registers)")
        if self.MMA_TURNS and (not self.SPLIT_WGS or self.CONSUMER_WGS not in (2, 3)):
            raise GluonError(f"GemmConfig MMA_TURNS=True takes two or three consumer warpgroups each its own role "
                             f"(CONSUMER_WGS=2 or 3, SPLIT_WGS=True), not CONSUMER_WGS={self.CONSUMER_WGS}, "
                             f"SPLIT_WGS={self.SPLIT_WGS}")
        if self.QUARTERS and self.BLOCK_N != 256:
            raise GluonError(f"GemmConfig QUARTERS=True splits the halves of fp8 block scales' 256-column tiles; it "
                             f"takes BLOCK_N=256, got BLOCK_N={self.BLOCK_N}")
        if self.SCALES_IN_RING and (self.SCALES_AHEAD or self.QUARTERS):
            raise GluonError("GemmConfig SCALES_IN_RING=True reads each k-step's scales from the ring's stage; leave "
                             f"SCALES_AHEAD and QUARTERS False (got SCALES_AHEAD={self.SCALES_AHEAD}, "
                             f"QUARTERS={self.QUARTERS})")
        if self.PIPELINED_PROMOTION and self.SCALES_AHEAD:
            raise GluonError("GemmConfig PIPELINED_PROMOTION=True runs its own k-loop, which loads the scales under "
                             "the WGMMA itself: leave SCALES_AHEAD=False")
        if self.CONSUMER_REGS != _SPLIT_CONSUMER_REGS and not self.SPLIT_WGS:
            raise GluonError(f"GemmConfig CONSUMER_REGS={self.CONSUMER_REGS}: the cooperative consumers are Triton's "
                             "default partition and take the registers setmaxnreg leaves them; CONSUMER_REGS is the "
                             f"second warpgroup's budget with SPLIT_WGS=True (leave it at {_SPLIT_CONSUMER_REGS} "
                             "otherwise)")

    # -- derived ------------------------------------------------------------------------------------
    @property
    def early_loads_fit(self) -> bool:
        """Where EARLY_LOADS and LEAN_PROLOGUE run (and "auto" turns them on): no multicast cluster, not the
        ring epilogue, no scales in the ring (the producer's copies). With CLUSTER_K each CTA loads its own K
        slice, so its first stages may go before the cluster meets."""
        return self.CLUSTER_M == 1 and self.EPILOGUE != "ring" and not self.SCALES_IN_RING

    @property
    def step_n(self) -> int:
        """Columns from one output tile to the next: N_STEP, or BLOCK_N (tiles side by side)."""
        return self.N_STEP or self.BLOCK_N

    @property
    def cluster_size(self) -> int:
        return self.CLUSTER_M * self.CLUSTER_K

    @property
    def consumer_roles(self) -> int:
        """Consumer roles: one for all warpgroups, or with SPLIT_WGS one per warpgroup (4 * CONSUMER_WGS //
        consumer_roles warps each; the first role's are the kernel's default warps)."""
        return self.CONSUMER_WGS if self.SPLIT_WGS else 1

    @property
    def resolved(self) -> bool:
        return AUTO not in (self.EPILOGUE, self.EARLY_LOADS, self.LEAN_PROLOGUE)

    def resolve(self, out_size: int) -> "GemmConfig":
        """The config with its "auto" values decided for an output of `out_size`-byte elements (itself
        when none is left). EPILOGUE: "tma" when the staging tile fits in 64 KiB beside the ring (a
        128x256 fp32 tile would not) and SPLITK_FIXUP is off (its fixup stores C from registers), else
        "direct". EARLY_LOADS and LEAN_PROLOGUE: on wherever the kernel has them (`early_loads_fit`: with
        CLUSTER_K and PDL too, the decode picks, where they gained up to 3%: docs/PERF.md, thirtieth session)."""
        if self.resolved:
            return self
        kw = {}
        if self.EPILOGUE == AUTO:
            staged = out_size * self.BLOCK_M * self.BLOCK_N <= 64 * 1024 and not (
                self.SPLITK_FIXUP or self.SWAP_AB or self.CLUSTER_K > 1 or self.SPLITK_GRID > 1)
            kw["EPILOGUE"] = ("coalesced" if self.step_n < self.BLOCK_N else "tma") if staged else "direct"
        for name in _AUTO_BOOLS:
            if getattr(self, name) == AUTO:
                kw[name] = self.early_loads_fit
        return replace(self, **kw)

    # -- building -----------------------------------------------------------------------------------
    def replace(self, **overrides) -> "GemmConfig":
        """This config with `overrides` (field name -> value) on top, checked like a new one."""
        return overridden(overrides, self)

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in FIELDS}

    def describe(self) -> str:
        """"KEY=VALUE, ..." of every field, but K_ZIGZAG, TMA_PREFETCH, SPLITK_FIXUP, SWAP_AB and FFMA_YIELD only when
        on and CLUSTER_K, SPLITK_GRID and CTAS_PER_SM only above 1."""
        return ", ".join(f"{k}={v}" for k, v in self.to_dict().items()
                         if (v is not False or k not in ("K_ZIGZAG", "TMA_PREFETCH", "SPLITK_FIXUP", "SWAP_AB",
                                                          "FFMA_YIELD"))
                         and (k not in ("CLUSTER_K", "SPLITK_GRID", "CTAS_PER_SM") or v > 1)
                         and (k != "N_STEP" or v))


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(GemmConfig))


# what overlapping tiles (N_STEP below BLOCK_N) take of other fields: the first of each is what `_base_for` sets
# where a caller's dict asks for N_STEP and leaves the field open
_OVERLAP_TAKES = {"EPILOGUE": (AUTO, "direct", "coalesced"), "SPLITK_FIXUP": (False,), "CLUSTER_M": (1,),
                  "CLUSTER_K": (1,), "SPLITK_GRID": (1,)}


def _check_n_step(cfg: GemmConfig) -> None:
    """N_STEP's rules: a multiple of 16 up to BLOCK_N; overlapping tiles store only their own columns, by address,
    and meet no other CTA over a tile (a cluster's, or the grid's K slices)."""
    v = cfg.N_STEP
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0 or v % 16 or v > cfg.BLOCK_N:
        raise GluonError(f"GemmConfig N_STEP={v!r}: takes a multiple of 16 up to BLOCK_N={cfg.BLOCK_N} (the columns "
                         "from one tile to the next), or 0 for BLOCK_N")
    object.__setattr__(cfg, "N_STEP", int(v))      # (a numpy integer from a results table, say)
    if cfg.step_n == cfg.BLOCK_N:
        return
    bad = [f"{k}={getattr(cfg, k)!r}" for k, ok in _OVERLAP_TAKES.items() if getattr(cfg, k) not in ok]
    if bad:
        raise GluonError(f"GemmConfig N_STEP={v} with BLOCK_N={cfg.BLOCK_N}: overlapping tiles store only their own "
                         f"columns, from registers or the coalesced staging tile, and meet no other CTA over a tile; "
                         f"got {', '.join(bad)}: use EPILOGUE='direct', 'coalesced' or 'auto', no SPLITK_FIXUP, "
                         "CLUSTER_M, CLUSTER_K or SPLITK_GRID, or N_STEP=0")


def _check_swap_ab(cfg: GemmConfig) -> None:
    """SWAP_AB's rules: one or two cooperative consumer warpgroups owning the whole tile (two split B's rows,
    sharing A's), A's rows a WGMMA width, B's rows whole 64-row WGMMA instructions (a warpgroup's share), C
    stored from registers."""
    why = None
    if cfg.CONSUMER_WGS not in (1, 2) or cfg.SPLIT_WGS:
        why = (f"one or two cooperative consumer warpgroups (CONSUMER_WGS=1 or 2, SPLIT_WGS=False), not "
               f"CONSUMER_WGS={cfg.CONSUMER_WGS}" + (", SPLIT_WGS=True" if cfg.SPLIT_WGS else ""))
    elif cfg.BLOCK_M & (cfg.BLOCK_M - 1) or not 8 <= cfg.BLOCK_M <= 256:
        why = f"BLOCK_M (WGMMA's N under the swap) a power of two from 8 to 256, not {cfg.BLOCK_M}"
    elif cfg.BLOCK_N % (64 * cfg.CONSUMER_WGS):
        why = (f"BLOCK_N (WGMMA's M under the swap) a multiple of {64 * cfg.CONSUMER_WGS} (64 rows a warpgroup), "
               f"not {cfg.BLOCK_N}")
    elif cfg.EPILOGUE not in ("direct", AUTO):
        why = f"EPILOGUE='direct' (or 'auto'): C^T's tile is stored from registers, not EPILOGUE={cfg.EPILOGUE!r}"
    elif cfg.SPLITK_FIXUP:
        why = "SPLITK_FIXUP=False: split-K partials under the swap are summed by splitk_reduce"
    if why:
        raise GluonError(f"GemmConfig SWAP_AB=True takes {why}")


def _summed_slabs_error(cfg: GemmConfig, field: str) -> str | None:
    """What CLUSTER_K's and SPLITK_GRID's in-kernel sum needs of the tile (`field` the one summing): C stored from
    registers, and BLOCK_N in as many column slabs as slices, each a power of two (one CTA's share of the sum)."""
    n = getattr(cfg, field)
    slab = cfg.BLOCK_N // n
    if cfg.EPILOGUE not in ("direct", AUTO):
        return f"EPILOGUE='direct' (or 'auto'): the sum is stored from registers, not EPILOGUE={cfg.EPILOGUE!r}"
    if cfg.BLOCK_N % n or slab & (slab - 1):
        return (f"a BLOCK_N that splits into {field} column slabs of a power of two each, not BLOCK_N={cfg.BLOCK_N} "
                f"over {n}")
    return None


def _check_cluster_k(cfg: GemmConfig) -> None:
    """CLUSTER_K's rules: a cluster size, no other cluster or split-K sum, C stored from registers, and a column
    slab per CTA that is a whole power of two."""
    why = None
    if cfg.CLUSTER_K not in CLUSTER_K_SIZES:
        why = f"2, 4 or 8 CTAs (a power of two, at most a portable cluster), not {cfg.CLUSTER_K}"
    elif cfg.CLUSTER_M != 1:
        why = f"CLUSTER_M=1 (one cluster dimension), not CLUSTER_M={cfg.CLUSTER_M}"
    elif cfg.SPLITK_FIXUP:
        why = "SPLITK_FIXUP=False (the cluster sums the slices itself)"
    else:
        why = _summed_slabs_error(cfg, "CLUSTER_K")
    if why:
        raise GluonError(f"GemmConfig CLUSTER_K={cfg.CLUSTER_K} takes {why}")


def _check_rows(cfg: GemmConfig) -> None:
    """The accumulator rows of a consumer role (the tile's, or with SPLIT_WGS a warpgroup's share): whole 64-row
    WGMMA instructions, a power of two of them (the epilogue's row indices are a power-of-two range)."""
    roles = cfg.consumer_roles
    rows = cfg.BLOCK_M // roles
    if cfg.BLOCK_M % roles or rows % 64 or rows & (rows - 1):
        fix = f"BLOCK_M={roles * 64} or {roles * 128}"
        if not cfg.SPLIT_WGS and cfg.CONSUMER_WGS > 1:
            fix += f", or SPLIT_WGS=True (each warpgroup its own 64 rows: BLOCK_M={64 * cfg.CONSUMER_WGS})"
        raise GluonError(f"GemmConfig BLOCK_M={cfg.BLOCK_M} with CONSUMER_WGS={cfg.CONSUMER_WGS}, "
                         f"SPLIT_WGS={cfg.SPLIT_WGS}: a consumer role's {rows} accumulator rows must be a power of "
                         f"two of whole 64-row WGMMAs; use {fix}")


def _check_splitk_grid(cfg: GemmConfig) -> None:
    """SPLITK_GRID's rules: a power of two of slices, no other split-K sum, tiles of its own (no swap), C stored
    from registers, and a column slab per slice that is a whole power of two."""
    why = None
    if cfg.SPLITK_GRID not in SPLITK_GRID_SIZES:
        why = f"2, 4, 8 or 16 K slices, not {cfg.SPLITK_GRID}"
    elif cfg.CLUSTER_K > 1 or cfg.SPLITK_FIXUP:
        why = "CLUSTER_K=1 and SPLITK_FIXUP=False (one way of summing the slices)"
    elif cfg.SWAP_AB:
        why = "SWAP_AB=False (the swapped tile's partials are summed by splitk_reduce)"
    elif cfg.CONSUMER_WGS not in (1, 2):
        why = f"one or two consumer warpgroups (a power of two of warps meet), not CONSUMER_WGS={cfg.CONSUMER_WGS}"
    else:
        why = _summed_slabs_error(cfg, "SPLITK_GRID")
    if why:
        raise GluonError(f"GemmConfig SPLITK_GRID={cfg.SPLITK_GRID} takes {why}")


def to_config(config: GemmConfig | Mapping | None, base: GemmConfig) -> GemmConfig:
    """What the public entry points take as `config`: a GemmConfig (the whole config), a dict of
    overrides of `base` (users, `--set KEY=VALUE`), or None (`base`)."""
    return overridden(config, base)


def kernel_config(cfg) -> GemmConfig:
    """`cfg` as the kernel takes it: a GemmConfig with no "auto" left (launch and the tuner resolve it)."""
    if not isinstance(cfg, GemmConfig):
        raise GluonError(f"gemm_sm90 takes CFG=GemmConfig(...), not {type(cfg).__name__} {cfg!r}")
    for name in ("EPILOGUE",) + _AUTO_BOOLS:
        if getattr(cfg, name) == AUTO:
            takes = "'tma', 'tma2', 'ring', 'coalesced' or 'direct'" if name == "EPILOGUE" else "True or False"
            raise GluonError(f"{name}='auto': the kernel takes {takes} (launch and the tuner resolve 'auto' with "
                             "GemmConfig.resolve)")
    return cfg


# ------------------------------------------------------------------------------ the hand-picked configs

# 128x256x64, 3 stages, 2 consumer warpgroups, GROUP_M=16 (docs/PERF.md).
DEFAULT_CONFIG = GemmConfig()

# An fp32 output: 128x128 tiles staged through a 64 KiB fp32 tile and written by TMA, 4 stages (the
# 128x256 tile's fp32 staging leaves room for 2 stages only, and its direct stores spill).
FP32_OUT_CONFIG = DEFAULT_CONFIG.replace(BLOCK_N=128, EPILOGUE="tma", STAGES=4)

# Problems with less than one wave of 128x256 tiles: smaller tiles on one consumer warpgroup with a
# deeper ring, so more SMs get work. Smallest first; `choose_config` takes the first whose tiles fit in
# one wave.
SMALL_CONFIGS = (
    DEFAULT_CONFIG.replace(BLOCK_M=64, BLOCK_N=64, STAGES=6, CONSUMER_WGS=1),
    DEFAULT_CONFIG.replace(BLOCK_M=128, BLOCK_N=64, STAGES=6, CONSUMER_WGS=1),
)

# Problems of a few waves of 128x256 tiles whose last wave is part empty (1536x4096: 192 tiles, 2 rounds on
# 132 SMs, 73% of the slots hold output): tiles that fill the rounds better, each with a wave's throughput
# relative to 128x256's (measured with 16-bit inputs, B [N, K] and B [K, N]: docs/PERF.md, twenty-fifth and
# twenty-sixth sessions). Both of a tie: the first.
WAVE_CONFIGS = (
    (DEFAULT_CONFIG.replace(BLOCK_M=192, BLOCK_N=128, STAGES=4, CONSUMER_WGS=3, CONSUMER_REGS=152, SPLIT_WGS=True),
     0.89),
    (DEFAULT_CONFIG.replace(BLOCK_N=128, STAGES=5), 0.89),
)
WAVE_MARGIN = 1.03                  # ... taken where it beats 128x256 by this much (the model is rough)

# Few output tiles over a deep K: 128x128 tiles on one consumer warpgroup, 2-CTA clusters multicasting
# each B tile (half the L2 reads of B), the K split by `split_k` so about a wave of units runs.
DEEP_K_CONFIG = DEFAULT_CONFIG.replace(BLOCK_M=128, BLOCK_N=128, STAGES=6, CONSUMER_WGS=1, CLUSTER_M=2)
DEEP_K = 16384                      # K from which a problem of under half a wave of 128x128 tiles is "deep"
# K up to this is "shallow": a program's tiles are one or two k-steps each and C's stores are the work; there
# the coalesced epilogue (rows stored from the staging tile by address) beat TMA's stores on 128x256 tiles by up
# to 6% with 16-bit inputs (on wave_config's 192x128 tiles it lost 1%: docs/PERF.md, thirty-ninth session)
SHALLOW_K = 128
# ... or 128x256 tiles on two cooperative warpgroups (4 stages; C by address, the K slices' partials leave from
# registers anyway), where a CTA's share of the work, its tile times its K slice, is DEEP_K_WIDE_MARGIN smaller:
# the coarser tiles make more K slices, which fill the SMs better (768x768x49152: 126 CTAs against 108, 0.83 -> 0.96x
# cuBLAS); at an equal share they lost 1-8% to the 128x128 tiles' fewer slices (docs/PERF.md, twenty-ninth session)
DEEP_K_WIDE = DEFAULT_CONFIG.replace(STAGES=4, EPILOGUE="direct", CLUSTER_M=2)
DEEP_K_WIDE_MARGIN = 1.05


# ------------------------------------------------------------------------------ rules on a config


def fills_a_wave(M: int, N: int, num_sms: int) -> bool:
    """About a wave of DEFAULT_CONFIG's 128x256 tiles or more (90% of the SMs): where `choose_config` picks that
    family, and block-scaled fp8 may take 192-row tiles."""
    return tiles(M, N, DEFAULT_CONFIG) * 10 >= num_sms * 9


def wave_config(M: int, N: int, num_sms: int) -> GemmConfig:
    """DEFAULT_CONFIG, or the WAVE_CONFIGS entry whose slot use times its relative throughput beats it by
    WAVE_MARGIN (the best such)."""
    scored = [(slot_use(M, N, DEFAULT_CONFIG, num_sms) * WAVE_MARGIN, DEFAULT_CONFIG)]
    scored += [(slot_use(M, N, cfg, num_sms) * speed, cfg) for cfg, speed in WAVE_CONFIGS]
    return max(scored, key=lambda sc: sc[0])[1]        # (max keeps the first of a tie)


def deep_k_config(M: int, N: int, K: int, num_sms: int, out_size: int = 2, wide: bool = True) -> GemmConfig:
    """Few output tiles over a deep K: DEEP_K_CONFIG, or DEEP_K_WIDE where that makes a CTA's `slice_work`
    DEEP_K_WIDE_MARGIN smaller (only with `wide` and a 16-bit output: what was timed). Either shares B in 2-CTA
    pairs only over an even count of tile rows: over an odd one the last pair's second CTA has no rows and takes an
    SM, which lost 1-26% to no cluster (docs/PERF.md, twenty-eighth session)."""
    def paired(cfg: GemmConfig) -> GemmConfig:
        return cfg if cdiv(M, cfg.BLOCK_M) % 2 == 0 else cfg.replace(CLUSTER_M=1)
    # an fp32 output's 64 KiB staging tile fits beside 5 of the ring's 32 KiB stages, not 6
    deep = paired(DEEP_K_CONFIG if out_size <= 2 else DEEP_K_CONFIG.replace(STAGES=5))
    if out_size > 2 or not wide:
        return deep
    wider = paired(DEEP_K_WIDE)
    if slice_work(M, N, K, wider, num_sms) * DEEP_K_WIDE_MARGIN <= slice_work(M, N, K, deep, num_sms):
        return wider
    return deep


# M in (64, SMALL_M] where the swapped tiles stream B once (no K split): the ordinary orientation's 64x128 tiles
# instead, A's two row blocks in a 2-CTA cluster sharing (multicasting) each B tile, cuBLAS's form there: 1.01-1.14x
# the swapped pick at 8 such shapes, both B layouts (N 11008 to 18944; docs/PERF.md, thirtieth session)
DECODE_PAIRS = DEFAULT_CONFIG.replace(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, STAGES=8, CONSUMER_WGS=1, CLUSTER_M=2,
                                      PDL=True)
# ... where 128x128 tiles (A's rows in one tile row) make half a wave to one: those, on one warpgroup over 6 stages,
# no cluster, each B tile read by one CTA. On the H200, against the 64x128 tiles at two CTAs an SM that the thirty-first
# session had there (1.02-1.06x the pairs on an H100): 1.01-1.15x at 8 shapes of 86 to 128 such tiles, both B layouts
# (128x11008x4096 B [K, N] 0.906 -> 0.995x cuBLAS, 1.008 -> 1.111x plain Triton); over a wave (96x18944x3584: 148)
# the pairs stay, 0.88 against 0.80 (docs/PERF.md, thirty-second session)
DECODE_WIDE = DEFAULT_CONFIG.replace(BLOCK_N=128, STAGES=6, CONSUMER_WGS=1, PDL=True)
# ... with 128-deep k-steps over 3 stages where those tiles make 0.7 of a wave or more: on an H100, two calls, both B
# layouts, against the 64-deep six: +0.6 to +3.8% at 96 and 112 tiles (128x12288x4096, 128 and 96 x 14336 x 4096;
# 128x14336x4096 B [N, K] 0.954 -> 0.990x cuBLAS), -0.6 to +2.4% at 128, -0.9 to -1.8% at 86 (128x11008x4096)
# (docs/PERF.md, thirty-seventh session)
DECODE_WIDE_DEEP = DECODE_WIDE.replace(BLOCK_K=128, STAGES=3)
# M in [32, 64] where 64x128 tiles make 0.65 to one wave: those, unswapped, 128-deep k-steps over 4 stages (plain
# Triton's tile, deeper), B streamed once by one CTA a tile; against the swapped pick on an H100 (64 rows of A on
# WGMMA's N, or 64-row B tiles over more than a wave): 1.006-1.087x at 12 cases of 86 to 128 such tiles, both B
# layouts (64x11008x4096 0.898 -> 0.978x cuBLAS with B [K, N]). At M = 32 the swapped pick's 32x128 tiles where they
# make a wave stay (32x14336x4096: 0.992 against 0.969; docs/PERF.md, thirty-fourth session)
DECODE_ROWS = DEFAULT_CONFIG.replace(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, STAGES=4, CONSUMER_WGS=1, PDL=True)
# ... and where the swapped pick is 64x256 tiles (A's rows padded to 64, 3/4 to one wave of 256-row B tiles: N = 28672),
# the same tiles unswapped (plain Triton's there), 64-deep k-steps over 4 stages: 1.010-1.021x the swapped pick at
# 48 / 64 x 28672 x 4096, both B layouts, on an H100 (64x28672x4096 0.969 -> 0.986x cuBLAS B [N, K], 0.981 -> 1.002
# B [K, N]; docs/PERF.md, thirty-third and thirty-fifth sessions)
DECODE_ROWS_WIDE = DEFAULT_CONFIG.replace(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, STAGES=4, CONSUMER_WGS=1, PDL=True)
# With fp8 B [N, K] (fp8's only layout) the 128-deep k-steps of those 64x256 tiles read B in TMA boxes of 128 bytes a
# row: DECODE_ROWS instead (256-deep) where the 256-row tiles make 0.8 of a wave or more (N 26881 up); on the H200
# against the swapped pick, same run, e4m3 per tensor: +5.1 / +5.9% at 48 / 64 x 28672 x 4096. The same swap for bf16
# (+0.9% on an H100) lost 0.4-0.7% on the H200, and DECODE_WIDE_DEEP over 128x256 tiles from 65 to 128 rows (+2% on
# an H100) lost 0.1-7% for bf16 and fp8 there (96x28672x4096 0.938 -> 0.873x cuBLAS): not taken (docs/PERF.md,
# forty-eighth and forty-ninth sessions)


SMALL_M = 128                       # up to this many rows of A, choose_config swaps A and B ...
_SWAP_ALWAYS_M = 64                 # ... and above this only where 128x256 tiles make under 3/4 of a wave
_SMEM_BUDGET = 216 * 1024           # what the rings may take (the barriers and Triton's scratch need the rest)


def _swapped_stages(bm: int, bn: int, bk: int) -> int:
    """Stages of a swapped decode tile (bm rows of A, bn of B, bk-deep 16-bit k-steps) that fit `_SMEM_BUDGET`, at
    most 16 (C leaves from registers: no staging tile beside them)."""
    return min(16, _SMEM_BUDGET // ((bm + bn) * bk * 2))


def small_m_config(M: int, N: int, num_sms: int, b_kmajor: bool = False) -> GemmConfig:
    """The decode-like problem's config (M <= SMALL_M): SWAP_AB with A's rows padded to a WGMMA width
    (a power of two >= 8), and the widest B tile (256, 128, 64 rows; an accumulator of at most 128
    registers per thread) whose tiles make 3/4 to one wave, so B streams once with no K split; 128-deep
    k-steps (64 where fewer than 4 stages would fit), as many stages as fit. Otherwise 64-row B tiles, the
    waves evened out by `split_k`. With B [N, K] (`b_kmajor`) and A's rows padded to at most 32, a tile
    that fits only 64-deep k-steps (of 16-bit elements; fp8's `resolve_config` doubles) is passed over: its
    TMA boxes read B in pieces of 128 bytes a row, which stream slower than the 256 of the deeper ones (B
    [K, N] reads whole tile rows of 512)."""
    bm = max(8, 1 << (M - 1).bit_length())
    deep_only = b_kmajor and bm <= 32

    def fit(bn: int, bk: int) -> GemmConfig | None:
        st = _swapped_stages(bm, bn, bk)
        if st < 4:
            return None
        return DEFAULT_CONFIG.replace(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STAGES=st, CONSUMER_WGS=1, SWAP_AB=True,
                                      EPILOGUE="direct")
    for bn in (256, 128, 64):
        if bn * bm > 128 * 128:             # the accumulator: at most 128 fp32 registers per thread
            continue
        if num_sms * 3 <= cdiv(N, bn) * 4 <= num_sms * 4:
            cfg = fit(bn, 128) or (None if deep_only else fit(bn, 64))
            if cfg is not None:
                return cfg
    return fit(64, 128)


def choose_config(M: int, N: int, K: int, num_sms: int, pitch_aligned: bool = True, out_size: int = 2,
                  swap_ab: bool = True, wave_tiles: bool = True, pairs: bool = True,
                  b_kmajor: bool = False, in_size: int = 2) -> GemmConfig:
    """The hand-picked configuration for a problem when the caller gives none (a rule on tile counts,
    not a table of shapes; its "auto" values are resolved by `resolve_config`):

    * M <= 64, or M <= SMALL_M where 128x256 tiles make under 3/4 of a wave (decode):
      `small_m_config` (B [N, K] where `b_kmajor`), A and B swapped (unless `swap_ab` is False: the ordinary
      kernel's pick), its two K slices (where `split_k` makes two) summed in 2-CTA clusters (CLUSTER_K=2), or
      where A's row tile halved needs no split, that instead (`_halved_rows`; where `pairs`, 16-bit in and out),
      launched as a programmatic dependent (PDL: its prologue under the end of the kernel before, as in a
      model's GEMMs back to back);
      above 64 rows where the swapped tiles need no K split, DECODE_PAIRS instead (where `pairs`: `resolve_config`
      asks for them with no overrides; 16-bit inputs, `in_size` 2; and a 16-bit output: what was timed), or
      DECODE_WIDE's 128x128 tiles where they make half a wave to one; from 32 to 64 rows with no K split,
      DECODE_ROWS's 64x128 tiles unswapped where they make 0.65 to one wave and the swapped tiles are 64 wide on
      either side (the same conditions), and DECODE_ROWS_WIDE's 64x256 tiles unswapped where the swapped pick is
      those tiles (fp8 inputs, where `_deeper_fill`: DECODE_ROWS, 256-deep k-steps);
      DECODE_WIDE_DEEP (128-deep k-steps) where DECODE_WIDE's tiles make 0.7 of a wave or more;
    * K >= DEEP_K with under half a wave of 128x128 tiles: `deep_k_config`'s 128x128 tiles, or 128x256 where
      `wave_tiles` (split along K by `split_k`; no cluster where A has an odd count of tile rows);
    * under about one wave of 128x256 tiles: the first of SMALL_CONFIGS whose tiles fit in one wave;
    * an fp32 output (`out_size` 4): FP32_OUT_CONFIG;
    * a few waves of 128x256 tiles, the last part empty (aligned rows, 16-bit inputs: `wave_tiles`, which
      `resolve_config` turns off for fp8, where it is not measured): `wave_config`'s 192x128 or 128x128 tiles
      where they fill the rounds better;
    * rows of A and B not on 128-byte boundaries (`pitch_aligned` False): 2-CTA clusters (CLUSTER_M=2)
      that load each B tile once and multicast it;
    * several 128x256 tiles per program: SPLIT_WGS and K_ZIGZAG;
    * one tile per program, or K <= SHALLOW_K on 16-bit inputs and 128x256 tiles, output rows of 16-element
      multiples, aligned: EPILOGUE="coalesced".

    The measurements behind each rule: docs/PERF.md."""
    if swap_ab and (M <= _SWAP_ALWAYS_M or (M <= SMALL_M and tiles(M, N, DEFAULT_CONFIG) * 4 < num_sms * 3)):
        cfg = small_m_config(M, N, num_sms, b_kmajor)
        # two K slices: summed by the two CTAs of a cluster (no second kernel); more slices keep splitk_reduce
        # (clusters of 4 measured 0.57-0.77x cuBLAS at 4096^2: fewer of them fit on the GPU at once)
        # and, with no second kernel, PDL (8 decode GEMMs back to back: +3 to +6% at 4096^2)
        splits = split_k(M, N, K, cfg, num_sms)
        if splits == 2:
            rows = _halved_rows(cfg)
            if pairs and in_size == 2 and out_size <= 2 and split_k(M, N, K, rows, num_sms) == 1:
                return rows.replace(PDL=True)
            return cfg.replace(CLUSTER_K=2, PDL=True)
        if splits == 1 and pairs and out_size <= 2:         # no K split, 16-bit output, no overrides: timed forms
            if (cfg.BLOCK_M, cfg.BLOCK_N) == (64, 256) and in_size == 1 and _deeper_fill(M, N, num_sms):
                return DECODE_ROWS          # fp8 (B [N, K]); `resolve_config` doubles its k-step
            if in_size != 2:
                return cfg
            if _rows_fit(M, N, cfg, num_sms):
                return one_wave_step(N, DECODE_ROWS, num_sms) if b_kmajor else DECODE_ROWS
            if (cfg.BLOCK_M, cfg.BLOCK_N) == (64, 256):
                return DECODE_ROWS_WIDE
            if M > _SWAP_ALWAYS_M:
                n = tiles(M, N, DECODE_WIDE)
                if not num_sms < 2 * n <= 2 * num_sms:
                    return DECODE_PAIRS
                return one_wave_step(N, DECODE_WIDE_DEEP, num_sms) if 10 * n >= 7 * num_sms else DECODE_WIDE
        return cfg
    if fills_a_wave(M, N, num_sms):
        if out_size > 2:
            return FP32_OUT_CONFIG
        cfg = DEFAULT_CONFIG.replace(CLUSTER_M=1 if pitch_aligned else 2)
        if pitch_aligned and wave_tiles:
            cfg = wave_config(M, N, num_sms)
        if tiles(M, N, cfg) > num_sms:
            cfg = cfg.replace(SPLIT_WGS=True, K_ZIGZAG=True)
            if not _stores_bound(K, cfg, wave_tiles):
                return cfg
        if N % 16 == 0 and pitch_aligned:
            return cfg.replace(EPILOGUE="coalesced")
        return cfg
    if K >= DEEP_K and tiles(M, N, DEEP_K_CONFIG) * 2 <= num_sms:
        return deep_k_config(M, N, K, num_sms, out_size, wide=wave_tiles)
    for cfg in SMALL_CONFIGS:
        if tiles(M, N, cfg) <= num_sms:
            return cfg
    return DEFAULT_CONFIG


def _stores_bound(K: int, cfg: GemmConfig, wide_inputs: bool) -> bool:
    """Whether C's stores are the work (K <= SHALLOW_K) on what the coalesced epilogue was timed to win there:
    128x256 tiles, 16-bit inputs (`wide_inputs`)."""
    return K <= SHALLOW_K and wide_inputs and (cfg.BLOCK_M, cfg.BLOCK_N) == (DEFAULT_CONFIG.BLOCK_M,
                                                                              DEFAULT_CONFIG.BLOCK_N)


def _halved_rows(swapped: GemmConfig) -> GemmConfig:
    """The swapped pick with A's row tile halved (at least 8 rows), as many stages as fit: where its K would be
    split in two, as many CTAs each take the whole K of half the rows, sharing B's tile through L2, and no
    partial sums meet (64 / 128 x 4096 x 4096 and 64x4096x14336, both B layouts, on an H100: +0.7 to +4.0% over
    the K halves; docs/PERF.md, forty-ninth session)."""
    bm = max(8, swapped.BLOCK_M // 2)
    return swapped.replace(BLOCK_M=bm, STAGES=_swapped_stages(bm, swapped.BLOCK_N, swapped.BLOCK_K))


def _deeper_fill(M: int, N: int, num_sms: int) -> bool:
    """Whether DECODE_ROWS's 128-row B tiles that replace fp8's swapped 64x256 ones (33 to 64 rows) fill their second
    round enough: DEFAULT_CONFIG's 128x256 tiles (as many as the swapped 64x256 ones there) make 0.8 of a wave or
    more (N 28672 gained 5-6%; with bf16 at N 26000, 128-row tiles leaving 60 of 132 SMs idle in the second round
    lost 7% at 100 rows)."""
    return tiles(M, N, DEFAULT_CONFIG) * 5 >= num_sms * 4


def _rows_fit(M: int, N: int, swapped: GemmConfig, num_sms: int) -> bool:
    """Whether DECODE_ROWS takes the place of the `swapped` pick: 32 to 64 rows, its tiles 0.65 to one wave (what
    was timed: 86 to 128 tiles on 132 SMs), the swapped tiles 64 wide on either side (A's rows padded to 64, or
    64-row B tiles)."""
    t = tiles(M, N, DECODE_ROWS)
    return 32 <= M <= 64 and 64 in (swapped.BLOCK_M, swapped.BLOCK_N) and num_sms * 13 <= t * 20 and t <= num_sms


def one_wave_step(N: int, cfg: GemmConfig, num_sms: int) -> GemmConfig:
    """`cfg` (one row of tiles, fewer than the SMs) with overlapping tiles (N_STEP) that make one wave: the fewest
    columns a tile (a multiple of 16) at which they fit the SMs, where two tiles then share at most a quarter of
    BLOCK_N and make 0.9 of a wave or more (what was timed: 128 on 132 SMs). On an H100, same runs:
    DECODE_WIDE_DEEP so +0.4 / +0.8 / +1.0% at 128 / 96 x 14336 x 4096 and 128x12288x4096 with B [N, K], +0.3 /
    +0.5% at 128 x 14336 / 12288 x 4096 with B [K, N]; DECODE_ROWS +1.2% at 64x14336x4096 with B [N, K], +0.0% with
    B [K, N] (so taken for B [N, K] only); 128x256 tiles stepping 224 at N 28672 -0.3 / -0.4%, DECODE_WIDE at
    128x11008x4096 -0.1%: not taken (docs/PERF.md, fifty-first session)."""
    step = 16 * cdiv(cdiv(N, num_sms), 16)
    if step >= cfg.BLOCK_N or 4 * step < 3 * cfg.BLOCK_N or 10 * cdiv(N, step) < 9 * num_sms:
        return cfg
    return cfg.replace(N_STEP=step)


def stores_by_address(config: GemmConfig | Mapping | None) -> bool:
    """Whether a launch with the caller's `config` may store C by address (`by_address`) rather than pad a C
    whose rows TMA cannot describe: unless the caller asked for a TMA epilogue ("tma", "tma2" or "ring") by name."""
    asked = config.EPILOGUE if isinstance(config, GemmConfig) else (config or {}).get("EPILOGUE", AUTO)
    return asked not in ("tma", "tma2", "ring")


def by_address(cfg: GemmConfig) -> GemmConfig:
    """The resolved `cfg` storing C by address, for a C whose row pitch or base is off 16 bytes (which TMA
    cannot describe, plain stores can): "tma" and "tma2" become "coalesced" (the same staging tile, read back
    row-contiguous; "direct" in a cluster, where "coalesced" has not run), "ring" becomes "direct"."""
    if cfg.EPILOGUE in ("tma", "tma2"):
        return cfg.replace(EPILOGUE="coalesced" if cfg.CLUSTER_M == 1 else "direct")
    if cfg.EPILOGUE == "ring":
        return cfg.replace(EPILOGUE="direct")
    return cfg


# fp8 from 65 to 128 rows where the swapped pick is 128x128 tiles with no K split (N about 14336 at K 4096): 64x128
# tiles unswapped, 128-deep k-steps over 4 stages, two CTAs an SM (block scales' decode form): per tensor on an H100
# +4.5 / +4.8% at 96 / 128 x 14336 x 4096; over other picks -15% at 128 x 4096 x 4096 (K split in a cluster), -4% at
# 128 x 8192 x 28672, +0.4% at 128 x 28672 x 4096 (docs/PERF.md, forty-fifth session)
FP8_RESIDENT = DEFAULT_CONFIG.replace(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, STAGES=4, CONSUMER_WGS=1, CTAS_PER_SM=2)


def _fp8_resident(M: int, N: int, K: int, swapped: GemmConfig, num_sms: int, out_size: int) -> bool:
    """Whether FP8_RESIDENT takes the place of fp8's `swapped` pick (its k-step already doubled): the measured
    conditions, a 16-bit C, and no K split on either side."""
    return (_SWAP_ALWAYS_M < M <= SMALL_M and out_size <= 2 and swapped.SWAP_AB and swapped.CLUSTER_K == 1
            and (swapped.BLOCK_M, swapped.BLOCK_N, swapped.BLOCK_K) == (128, 128, 128)
            and split_k(M, N, K, swapped, num_sms) == 1 and split_k(M, N, K, FP8_RESIDENT, num_sms) == 1)


def resolve_config(M: int, N: int, K: int, num_sms: int, out_size: int, pitch_aligned: bool = True,
                   config: GemmConfig | Mapping | None = None, in_size: int = 2, b_kmajor: bool = False) -> GemmConfig:
    """The config `launch` runs for a problem: `config` if it is a GemmConfig, else `choose_config` with
    the dict's overrides on top (of the unswapped pick unless the dict sets SWAP_AB), the pick first stripped
    of what a switch the dict turns on does not run with and the dict leaves open (`_base_for`); its "auto"
    values resolved for an output of `out_size`-byte elements. For 1-byte (fp8) inputs choose_config's k-step
    holds twice the elements: the same bytes per stage, and no few-wave or deep-K 128x256 tiles (`wave_tiles`:
    measured for 16-bit inputs only), and from 65 to 128 rows FP8_RESIDENT where `_fp8_resident` says; B [N, K]
    (`b_kmajor`, and always for fp8) reaches choose_config's k-step depth rules. A dict that leaves STAGES open gets
    as many as fit where the pick's would not beside its tiles (`_stages_that_fit`)."""
    if not isinstance(config, GemmConfig):
        # a dict of overrides that does not ask for SWAP_AB overrides the ordinary kernel's pick: its fields
        # (SPLIT_WGS, CONSUMER_WGS, a BLOCK_N for 128-row tiles) mean that family
        swap = not config or bool(config.get("SWAP_AB"))
        base = choose_config(M, N, K, num_sms, pitch_aligned, out_size, swap_ab=swap,
                             wave_tiles=in_size == 2, pairs=not config, b_kmajor=b_kmajor or in_size == 1,
                             in_size=in_size)
        if in_size == 1:
            base = base.replace(BLOCK_K=base.BLOCK_K * 2)
            if not config and _fp8_resident(M, N, K, base, num_sms, out_size):
                base = FP8_RESIDENT
        given = config or {}
        config = to_config(given, _base_for(given, base))
        if "STAGES" not in given:
            return _stages_that_fit(config.resolve(out_size), in_size, out_size)
    return config.resolve(out_size)


def _stages_that_fit(cfg: GemmConfig, in_size: int, out_size: int) -> GemmConfig:
    """`cfg` with as many stages as fit `_SMEM_BUDGET` where the caller's overrides (tiles, a k-step) left the
    pick's stages past what a block may use for certain (the rings alone, with the output's staging tile at its
    smallest); any config that could compile keeps its stages."""
    stage = (cfg.BLOCK_M + cfg.BLOCK_N) * cfg.BLOCK_K * in_size
    halves = {"tma": 1, "coalesced": 1, "tma2": 2}.get(cfg.EPILOGUE, 0)    # staging tiles of half the rows
    staging = halves * cfg.BLOCK_M * cfg.BLOCK_N * out_size // 2
    limit = SM90.smem_per_block_max // cfg.CTAS_PER_SM
    if cfg.STAGES * stage + staging <= limit:
        return cfg
    return cfg.replace(STAGES=stages_beside(stage, staging, cfg.CTAS_PER_SM))


def stages_beside(stage: int, staging: int, ctas_per_sm: int = 1) -> int:
    """How many ring stages of `stage` bytes fit `_SMEM_BUDGET` (a block's share of it) beside `staging` bytes of
    output staging; at least two."""
    return max(2, (_SMEM_BUDGET // ctas_per_sm - staging) // stage)


def _base_for(given: Mapping, base: GemmConfig) -> GemmConfig:
    """`base` (a pick) without what the switch `given` turns on does not run with, where `given` leaves those
    fields open: SWAP_AB on an ordinary pick (no cluster along M, one or two cooperative warpgroups, C from
    registers). So `launch(a, b, c, {"SWAP_AB": True})` runs at any shape; a field the caller sets that the
    switch refuses is still refused, by name. Likewise N_STEP (overlapping tiles: no cluster, no K slices meeting
    in the kernel, C stored by address)."""
    drop: dict = {}
    if given.get("SWAP_AB") and not base.SWAP_AB:
        drop.update(CLUSTER_M=1, SPLIT_WGS=False, SPLITK_FIXUP=False, MMA_TURNS=False,
                    CONSUMER_WGS=min(base.CONSUMER_WGS, 2), EPILOGUE=AUTO)
    if given.get("N_STEP"):     # overlapping tiles: no cluster, no K slices meeting in the kernel, C by address
        drop.update({k: takes[0] for k, takes in _OVERLAP_TAKES.items()})
    drop = {k: v for k, v in drop.items() if k not in given}
    return base.replace(**drop) if drop else base
