"""Compatibility module: the kernel DSL lives in the package `gluon.language` now.

Its arch-neutral core is `gluon.language.tracing`, `.core`, `.memory`, `.control` and `.kernel`; each
architecture's builtins are in `gluon.language.nvidia.ampere`, `.nvidia.hopper`, `.nvidia.blackwell`
and `.amd.cdna3`. Every name this module had is re-exported here, so `from gluon.dsl import kernel,
smem, wgmma` keeps working; new code imports from `gluon.language` (`import gluon.language as gl`).
"""
from . import frontend, ir  # noqa: F401
from .arch import SM90, Arch, arch_by_name  # noqa: F401
from .language.amd.cdna3 import mfma  # noqa: F401
from .language.atomics import (atomic_add, atomic_and, atomic_cas, atomic_max, atomic_min, atomic_or,  # noqa: F401
                               atomic_xchg, atomic_xor)
from .language.control import Loop, for_range, helper, range, set_ctas_per_sm, static_range, warp_role  # noqa: F401
from .language.core import (  # noqa: F401
    Tensor, abs, arange, broadcast_to, cast, cdiv, ceil, constexpr, convert_layout, cos, exp, exp2, expand_dims,
    floor, fma, full, log, log2, max, maximum, min, minimum, multiple_of, num_programs, pointer, program_id, rsqrt,
    sin, sqrt, sum, thread_id, where, zeros,
)
from .jit import jit, kernel  # noqa: F401
from .language.inline_asm import inline_asm_elementwise  # noqa: F401
from .language.kernel import DescArg, KernelTemplate, PointerArg, ScalarArg  # noqa: F401
from .language.memory import (  # noqa: F401
    GlobalTensor, Pointer, PtrOffset, Shared, load, smem, store, thread_barrier,
)
from .language.nvidia.ampere import (cp_async, cp_async_commit, cp_async_wait, mma, named_barrier_arrive,  # noqa: F401
                                      named_barrier_sync)
from .language.nvidia.blackwell import tcgen05_mma, tmem_alloc, tmem_load  # noqa: F401
from .language.nvidia.hopper import (  # noqa: F401
    Barrier, barrier_arrive, barrier_expect, barrier_wait, cluster_rank, cluster_sync, cp_async_arrive,
    fence_async_shared,
    griddep_launch_dependents, griddep_wait, mbarrier, set_cluster, set_ffma_yield, set_lean_prologue, set_tma_prefetch,
    split_cols,
    tma_load, tma_store, tma_store_wait, wgmma, wgmma_wait,
)
from .language.reductions import (argmax, argmin, associative_scan, cumprod, cumsum, histogram,  # noqa: F401
                                 reduce)
from .language.shapes import gather, join, permute, reshape, split, trans  # noqa: F401
from .language.sorting import sort, topk  # noqa: F401
from .language.tracing import UNDEF, ArchError, UndefinedValue  # noqa: F401
from .types import (DotOperandLayout, DType, Layout, MMALayout, NVMMASharedLayout, SliceLayout,  # noqa: F401
                    SwizzleMode, TensorMemoryLayout, TensorRef, WarpRole)
