"""`import gluon.language as gl`: the names a kernel body uses, in one namespace.

Builtins come from `gluon.dsl`; dtypes are also exposed under their torch/numpy-style names
(`gl.float16`, `gl.int32`) so kernels read like Triton's.
"""
from .dsl import (  # noqa: F401
    Barrier, DescArg, Loop, Pointer, PointerArg, ScalarArg, Shared, Tensor, abs, arange, barrier_arrive,
    barrier_expect, barrier_wait, broadcast_to, cast, cdiv, ceil, cluster_rank, cluster_sync, constexpr,
    convert_layout, cos,
    cp_async, cp_async_commit, cp_async_wait, exp, exp2, expand_dims, fence_async_shared, floor,
    for_range, full, load, log, log2, max, maximum, mbarrier, mfma, min, minimum, mma, multiple_of, num_programs,
    program_id, range, rsqrt, set_cluster, set_lean_prologue, set_lean_release, set_tma_prefetch, sin, smem, split_cols, sqrt, static_range,
    store, sum, tcgen05_mma, thread_barrier,
    thread_id, tma_load, tma_store, tma_store_wait, tmem_alloc, tmem_load, warp_role, wgmma,
    wgmma_wait, where, zeros,
)
from .types import DType, Layout, MemorySpace, SwizzleMode, WarpRole  # noqa: F401

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
