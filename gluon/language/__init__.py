"""`import gluon.language as gl`: the names a kernel body uses, in one namespace.

The language is an arch-neutral core, `tracing` (the trace state), `core` (`Tensor` and the builtins
on it), `memory` (pointers, global tensors, shared memory), `atomics` (Triton's `atomic_*` on global
memory), `reductions` (`reduce` / `associative_scan` with a combine function, `argmax`, `cumsum`,
`histogram`), `shapes` (reshape, permute/trans, join, split, gather), `sorting` (`sort`, `topk`: bitonic
networks of the shape ops), `inline_asm` (the target's
assembly over tile elements), `control` (loops, branches, warp
roles) and `kernel` (the `KernelTemplate` a kernel function traces through; the decorators
`@gluon.kernel` and `@gluon.jit` are gluon.jit's), plus one module per architecture:
`gl.nvidia.ampere`, `gl.nvidia.hopper`, `gl.nvidia.blackwell`, `gl.amd.cdna3` (their MMA builtins share
`dot`), and `gl.nvidia.ptx` (inline PTX templates). Every
builtin is also here, flat (`gl.wgmma`, `gl.tma_load`); dtypes are also exposed under their
torch/numpy-style names (`gl.float16`, `gl.int32`) so kernels read like Triton's.
"""
from . import amd, nvidia  # noqa: F401
from .atomics import (atomic_add, atomic_and, atomic_cas, atomic_max, atomic_min, atomic_or,  # noqa: F401
                      atomic_xchg, atomic_xor)
from .amd.cdna3 import mfma  # noqa: F401
from .control import Loop, for_range, helper, range, set_ctas_per_sm, static_range, warp_role  # noqa: F401
from .core import (  # noqa: F401
    Tensor, abs, arange, broadcast_to, cast, cdiv, ceil, constexpr, convert_layout, cos, exp, exp2, expand_dims,
    floor, fma, full, log, log2, max, maximum, min, minimum, multiple_of, num_programs, pointer, program_id, rsqrt,
    sin, sqrt, sum, thread_id, where, zeros,
)
from .inline_asm import inline_asm_elementwise  # noqa: F401
from .kernel import DescArg, PointerArg, ScalarArg  # noqa: F401
from .shapes import gather, join, permute, reshape, split, trans  # noqa: F401
from .sorting import sort, topk  # noqa: F401
from .memory import Pointer, Shared, load, smem, store, thread_barrier  # noqa: F401
from .nvidia.ampere import (cp_async, cp_async_commit, cp_async_wait, mma, named_barrier_arrive,  # noqa: F401
                             named_barrier_sync)
from .nvidia.blackwell import tcgen05_mma, tmem_alloc, tmem_load  # noqa: F401
from .nvidia.hopper import (  # noqa: F401
    Barrier, barrier_arrive, barrier_expect, barrier_wait, cluster_rank, cluster_sync, cp_async_arrive,
    fence_async_shared,
    griddep_launch_dependents, griddep_wait, mbarrier, set_cluster, set_ffma_yield, set_lean_prologue, set_tma_prefetch,
    split_cols,
    tma_load, tma_store, tma_store_wait, wgmma, wgmma_wait,
)
from .reductions import argmax, argmin, associative_scan, cumprod, cumsum, histogram, reduce  # noqa: F401
from ..types import DType, Layout, MemorySpace, SwizzleMode, WarpRole  # noqa: F401

float16 = DType.f16
bfloat16 = DType.bf16
float32 = DType.f32
float64 = DType.f64
float8e4m3 = DType.f8e4m3
float8e5m2 = DType.f8e5m2
int1 = DType.i1
int8 = DType.i8
int16 = DType.i16
int32 = DType.i32
int64 = DType.i64
uint8 = DType.u8
uint32 = DType.u32
uint64 = DType.u64
