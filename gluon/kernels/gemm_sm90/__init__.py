"""The SM90 GEMM: persistent, warp-specialized, TMA + WGMMA on mbarrier rings, with its host side.

    c = launch(a, b, c)                                   # the config choose_config picks for the problem
    launch(a, b, c, {"STAGES": 4, "EPILOGUE": "direct"})  # its fields overridden
    launch(a, b, c, GemmConfig(BLOCK_N=128), splits=2)    # a whole config, 2 K slices

* config.py: `GemmConfig` (the knobs, checked when made; "auto" values resolved once per problem by
  `GemmConfig.resolve`), DEFAULT_CONFIG, the rules about the knobs alone.
* picks.py: the hand-picked configs (FP32_OUT_CONFIG, SMALL_CONFIGS, the decode and deep-K forms) and the rules
  that choose among them by problem size: `choose_config`, `resolve_config` (what `launch` runs).
* geometry.py: tile and unit counts, `split_k`, `num_warps`, `grid`.
* kernel.py: the `@kernel` `gemm_sm90(A, B, C, W, CNT, SA, SB, SPLITS, CFG=<resolved GemmConfig>, B_KMAJOR,
  N_MULTIPLE_16, SCALE, SA_M_MAJOR)`, `gemm_sm90_copying` (the same body, first copying operands TMA cannot read
  into their padded buffers) and their device-side helpers; fp8_scales.py its fp8 scale loads and block-scaled
  k-loops.
* padding.py: the zero-padded buffers of operands TMA cannot describe, copied into before the launch (`PadPlan`)
  or by the kernel (`kernel_copies`).
* block_scaled.py: which tiles fp8 with DeepGEMM's block scales takes (`block_scaled_overrides`).
* host.py: `launch`, its plan cache, padding of operands TMA cannot describe, the split-K workspace and
  `splitk_reduce`; `compile_variant`, `compile_config` and `stand_ins` compile without a GPU.

The tuner's adapter is gluon/tuning/templates/gemm_sm90.py (`gluon tune specs/gemm_sm90.toml`). What was
measured, and the variants measured slower and removed: docs/PERF.md.
"""
from .config import AUTO, DEFAULT_CONFIG, EPILOGUES, FIELDS, GemmConfig, kernel_config, to_config  # noqa: F401
from .geometry import grid, num_warps, split_k, tiles, units  # noqa: F401
from .picks import FP32_OUT_CONFIG, SMALL_CONFIGS, choose_config, resolve_config  # noqa: F401
from .kernel import gemm_sm90  # noqa: F401
from .host import compile_config, compile_variant, launch, promises_n16, splitk_reduce, stand_ins  # noqa: F401
