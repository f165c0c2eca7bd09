"""What the SM90 GEMM is tuned by: `GemmConfig`, the hand-picked configs, and the host-side rules.

A `GemmConfig` is frozen and checked when it is made (one `GluonError` naming the field and what it
takes), so every rule about the knobs alone lives here, once; what depends on the operands (their
dtypes, B's layout) is checked by the kernel, and what the hardware allows (shared memory, registers,
swizzles, warp roles) by the compiler passes. Users and the `--set KEY=VALUE` flags give a dict of
overrides, converted once (`to_config`). Measurements behind the choices: docs/PERF.md.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Mapping

from gluon.ir import GluonError
from gluon.types import SwizzleMode

from ..config_checks import flag, overridden, positive_int

EPILOGUES = ("tma", "ring", "coalesced", "direct")
AUTO = "auto"
_INTS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "GROUP_M", "CONSUMER_WGS", "PRODUCER_REGS", "CONSUMER_REGS",
         "CLUSTER_M")
_BOOLS = ("SPLIT_WGS", "K_ZIGZAG", "TMA_PREFETCH")
_AUTO_BOOLS = ("EARLY_LOADS", "LEAN_PROLOGUE")
_SWIZZLES = tuple(m.value for m in SwizzleMode)
_SPLIT_CONSUMER_REGS = 216          # the second consumer warpgroup's setmaxnreg with SPLIT_WGS


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


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
    EPILOGUE                    how the output tile leaves: "tma" (staged, one TMA store), "coalesced"
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
                                roles start; "auto": wherever the kernel has it (no cluster, not "ring")
    LEAN_PROLOGUE               drop the CTA barriers between the barrier inits and the early loads but
                                the one the inits need (a PTX pass); "auto": where EARLY_LOADS can be
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

    def __post_init__(self):
        for name in _INTS:
            object.__setattr__(self, name, positive_int("GemmConfig", name, getattr(self, name)))
        if self.SWIZZLE not in _SWIZZLES:
            raise GluonError(f"GemmConfig SWIZZLE={self.SWIZZLE!r}: takes one of {', '.join(map(str, _SWIZZLES))} "
                             "(bytes)")
        if self.EPILOGUE not in EPILOGUES + (AUTO,):
            raise GluonError(f"GemmConfig EPILOGUE={self.EPILOGUE!r}: use 'tma', 'ring', 'coalesced' or 'direct' "
                             "(or 'auto': 'tma' or 'direct' by the output's size)")
        for name in _BOOLS:
            object.__setattr__(self, name, flag("GemmConfig", name, getattr(self, name)))
        for name in _AUTO_BOOLS:
            v = getattr(self, name)
            if v != AUTO:
                object.__setattr__(self, name, flag("GemmConfig", name, v, "True, False or 'auto'"))
        if self.EPILOGUE == "coalesced" and self.CLUSTER_M > 1:
            raise GluonError(f"GemmConfig EPILOGUE='coalesced' has not run in a cluster (CLUSTER_M={self.CLUSTER_M} "
                             "> 1) on a GPU yet; use EPILOGUE='tma' there")
        if not self.plain:
            why = f"CLUSTER_M={self.CLUSTER_M}" if self.CLUSTER_M > 1 else "EPILOGUE='ring'"
            if self.EARLY_LOADS is True:
                raise GluonError(f"GemmConfig EARLY_LOADS=True: EARLY_LOADS is written for the cooperative kernel "
                                 f"without clusters or the ring epilogue ({why}); use EARLY_LOADS=False (or 'auto') "
                                 "with those")
            if self.LEAN_PROLOGUE is True:
                raise GluonError(f"GemmConfig LEAN_PROLOGUE=True: LEAN_PROLOGUE is verified for the cooperative kernel "
                                 f"without clusters or the ring epilogue ({why}); use LEAN_PROLOGUE=False (or 'auto') "
                                 "with those")
        if self.CONSUMER_REGS != _SPLIT_CONSUMER_REGS and not self.SPLIT_WGS:
            raise GluonError(f"GemmConfig CONSUMER_REGS={self.CONSUMER_REGS}: the cooperative consumers are Triton's "
                             "default partition and take the registers setmaxnreg leaves them; CONSUMER_REGS is the "
                             f"second warpgroup's budget with SPLIT_WGS=True (leave it at {_SPLIT_CONSUMER_REGS} "
                             "otherwise)")

    # -- derived ------------------------------------------------------------------------------------
    @property
    def plain(self) -> bool:
        """The family EARLY_LOADS and LEAN_PROLOGUE are written and verified for: no cluster, not the
        ring epilogue."""
        return self.CLUSTER_M == 1 and self.EPILOGUE != "ring"

    @property
    def cluster_size(self) -> int:
        return self.CLUSTER_M

    @property
    def resolved(self) -> bool:
        return AUTO not in (self.EPILOGUE, self.EARLY_LOADS, self.LEAN_PROLOGUE)

    def resolve(self, out_size: int) -> "GemmConfig":
        """The config with its "auto" values decided for an output of `out_size`-byte elements (itself
        when none is left). EPILOGUE: "tma" when the staging tile fits in 64 KiB beside the ring (a
        128x256 fp32 tile would not), else "direct". EARLY_LOADS and LEAN_PROLOGUE: on wherever the
        kernel has them (`plain`)."""
        if self.resolved:
            return self
        kw = {}
        if self.EPILOGUE == AUTO:
            kw["EPILOGUE"] = "tma" if out_size * self.BLOCK_M * self.BLOCK_N <= 64 * 1024 else "direct"
        for name in _AUTO_BOOLS:
            if getattr(self, name) == AUTO:
                kw[name] = self.plain
        return replace(self, **kw)

    # -- building -----------------------------------------------------------------------------------
    def replace(self, **overrides) -> "GemmConfig":
        """This config with `overrides` (field name -> value) on top, checked like a new one."""
        return overridden(overrides, self)

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in FIELDS}

    def describe(self) -> str:
        """"KEY=VALUE, ..." of every field, but K_ZIGZAG and TMA_PREFETCH only when on."""
        return ", ".join(f"{k}={v}" for k, v in self.to_dict().items()
                         if v is not False or k not in ("K_ZIGZAG", "TMA_PREFETCH"))


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(GemmConfig))


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
            takes = "'tma', 'ring', 'coalesced' or 'direct'" if name == "EPILOGUE" else "True or False"
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


# ------------------------------------------------------------------------------ rules on a config


def tiles(M: int, N: int, config: GemmConfig) -> int:
    return _cdiv(M, config.BLOCK_M) * _cdiv(N, config.BLOCK_N)


def units(M: int, N: int, config: GemmConfig, splits: int = 1) -> int:
    """Units of work of the persistent grid: a cluster's tiles (CLUSTER_M stacked along M), times the K
    slices."""
    return _cdiv(_cdiv(M, config.BLOCK_M), config.CLUSTER_M) * _cdiv(N, config.BLOCK_N) * splits


def num_warps(config: GemmConfig) -> int:
    """Consumer warps, then the producer: one warp, a whole warpgroup in a cluster."""
    return 4 * config.CONSUMER_WGS + (4 if config.CLUSTER_M > 1 else 1)


def grid(M: int, N: int, config: GemmConfig, num_sms: int, splits: int = 1) -> tuple[int]:
    """Persistent grid, in clusters (Triton's launcher starts a cluster's CTAs per grid entry): one per
    unit of work up to one per SM."""
    return (max(1, min(units(M, N, config, splits), num_sms // config.CLUSTER_M)),)


def split_k(M: int, N: int, K: int, config: GemmConfig, num_sms: int) -> int:
    """How many K slices: 1 while the tiles fill the GPU; else enough units for about one wave, each
    slice at least 16 k-steps, and every slice non-empty."""
    t = tiles(M, N, config)
    k_tiles = _cdiv(K, config.BLOCK_K)
    if t * 2 > num_sms or k_tiles < 32:
        return 1      # small K: the fp32 workspace round trip would cost more than the idle SMs
    want = min(num_sms // t, k_tiles // 16, 16)
    if want <= 1:
        return 1
    per = _cdiv(k_tiles, want)
    return _cdiv(k_tiles, per)


def choose_config(M: int, N: int, K: int, num_sms: int, pitch_aligned: bool = True, out_size: int = 2) -> GemmConfig:
    """The hand-picked configuration for a problem when the caller gives none (a rule on tile counts,
    not a table of shapes; its "auto" values are resolved by `resolve_config`):

    * under about one wave of 128x256 tiles: the first of SMALL_CONFIGS whose tiles fit in one wave;
    * an fp32 output (`out_size` 4): FP32_OUT_CONFIG;
    * rows of A and B not on 128-byte boundaries (`pitch_aligned` False): 2-CTA clusters (CLUSTER_M=2)
      that load each B tile once and multicast it;
    * several 128x256 tiles per program: SPLIT_WGS and K_ZIGZAG;
    * one tile per program, output rows of 16-element multiples, aligned: EPILOGUE="coalesced".

    The measurements behind each rule: docs/PERF.md."""
    if tiles(M, N, DEFAULT_CONFIG) * 10 >= num_sms * 9:
        if out_size > 2:
            return FP32_OUT_CONFIG
        cfg = DEFAULT_CONFIG.replace(CLUSTER_M=1 if pitch_aligned else 2)
        if tiles(M, N, cfg) > num_sms:
            return cfg.replace(SPLIT_WGS=True, K_ZIGZAG=True)
        if N % 16 == 0 and pitch_aligned:
            return cfg.replace(EPILOGUE="coalesced")
        return cfg
    for cfg in SMALL_CONFIGS:
        if tiles(M, N, cfg) <= num_sms:
            return cfg
    return DEFAULT_CONFIG


def resolve_config(M: int, N: int, K: int, num_sms: int, out_size: int, pitch_aligned: bool = True,
                   config: GemmConfig | Mapping | None = None) -> GemmConfig:
    """The config `launch` runs for a problem: `config` if it is a GemmConfig, else `choose_config` with
    the dict's overrides on top; its "auto" values resolved for an output of `out_size`-byte elements."""
    if not isinstance(config, GemmConfig):
        config = to_config(config, choose_config(M, N, K, num_sms, pitch_aligned, out_size))
    return config.resolve(out_size)
