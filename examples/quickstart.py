"""The seed's Quick Start, verbatim: trace a warp-specialized GEMM sketch and print its IR.

The implicit form: producer and consumer share double-buffered regions with no explicit waits; the
pipeline pass turns that into a ready/empty barrier ring. This sketch itself does not compile: its
128x256 accumulator on one consumer warpgroup needs 256 registers per thread, which layout_check
rejects. examples/quickstart_gemm.py is the complete, runnable version (coordinates, 2 consumer
warpgroups, C stored).
"""
import gluon
from gluon import DType, Layout, SwizzleMode, TensorRef, WarpRole, MemorySpace, SM90
from gluon.dsl import kernel, smem, mbarrier, warp_role, tma_load, wgmma, for_range

@gluon.kernel(arch=SM90, num_warps=8)
def my_gemm(A, B, C):
    a_smem = smem(DType.f16, Layout.swizzled(128, 64, swizzle=SwizzleMode.B128), name="A_tile", double_buffer=True)
    b_smem = smem(DType.f16, Layout.swizzled(64, 256, swizzle=SwizzleMode.B128), name="B_tile", double_buffer=True)
    mbar = mbarrier(count=1, name="sync")
    with warp_role(WarpRole.PRODUCER, warp_range=(0, 3)):
        with for_range("k", 0, "K", 64):
            tma_load(a_smem, "A", barrier_name=mbar)
            tma_load(b_smem, "B", barrier_name=mbar)
    with warp_role(WarpRole.CONSUMER, warp_range=(4, 7)):
        with for_range("k", 0, "K", 64):
            wgmma(a_smem, b_smem, "acc")

a = TensorRef("A", DType.f16, Layout.row_major(128, 64), MemorySpace.GLOBAL)
b = TensorRef("B", DType.f16, Layout.col_major(64, 256), MemorySpace.GLOBAL)
c = TensorRef("C", DType.f32, Layout.row_major(128, 256), MemorySpace.GLOBAL)
module = my_gemm.trace(a, b, c)
print(module.pretty())
