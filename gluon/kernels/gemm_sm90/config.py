"""What the SM90 GEMM is tuned by: `GemmConfig` and the rules about its knobs (the picks: picks.py).

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

from gluon.ir import GluonError
from gluon.types import SwizzleMode

from ..config_checks import cached_hash, flag, overridden, positive_int, state_without_hash

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
OVERLAP_TAKES = {"EPILOGUE": (AUTO, "direct", "coalesced"), "SPLITK_FIXUP": (False,), "CLUSTER_M": (1,),
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
    bad = [f"{k}={getattr(cfg, k)!r}" for k, ok in OVERLAP_TAKES.items() if getattr(cfg, k) not in ok]
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


# ------------------------------------------------------------------------------ the default config

# 128x256x64, 3 stages, 2 consumer warpgroups, GROUP_M=16 (docs/PERF.md).
DEFAULT_CONFIG = GemmConfig()


# ------------------------------------------------------------------------------ rules on a config


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
