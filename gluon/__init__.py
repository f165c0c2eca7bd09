"""gluon-dsl: GPU kernels with explicit layouts, shared memory, barriers and warp roles, from Python.

    import gluon
    import gluon.language as gl

    @gluon.jit
    def copy_kernel(dst_ptr, src_ptr, n_elements, XBLOCK: gl.constexpr):
        idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
        if idx < n_elements:
            dst_ptr[idx] = src_ptr[idx]

    copy_kernel[grid, (2048,)](dst, src, src.numel(), XBLOCK=2048)

Pipeline: DSL trace (gluon.language, gluon.frontend) -> IR (gluon.ir) -> passes (gluon.passes) ->
TTGIR (gluon.backend.lowering) -> Triton 3.6 binaries (gluon.backend.compile) ->
launch (gluon.runtime); gluon.jit ties them together with a cache.
"""
from .version import __version__  # noqa: F401

from .arch import CDNA3, SM80, SM90, SM100, Arch, current_arch  # noqa: E402,F401
from .jit import jit, kernel  # noqa: E402,F401  (the decorators: `gluon.jit` is the decorator, not the module)
from . import interpret  # noqa: E402,F401  (the CPU interpreter; installs kernel.interpret / GLUON_INTERPRET=1)
from . import dsl  # noqa: E402,F401  (the compatibility module: `gluon.dsl.kernel` after `import gluon`)
from .ir import GluonError  # noqa: E402,F401
from .loader import load  # noqa: E402,F401  (gluon.load("gemm_sm90"): a built, tuned kernel)
from .tuning.autotune import autotune  # noqa: E402,F401  (@gluon.autotune(configs=[...], key=[...]))
from .types import (DType, Layout, MemorySpace, SharedMemoryDescriptor, SwizzleMode,  # noqa: E402,F401
                    TensorRef, WarpRole)
