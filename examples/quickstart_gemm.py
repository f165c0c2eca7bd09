"""The seed's Quick Start GEMM, complete and runnable, in the implicit style.

Same structure as examples/quickstart.py: double-buffered shared regions, one mbarrier, a producer
role and a consumer role each with a `for_range` loop, and no waits anywhere. The pipeline pass
turns it into a stage ring: `ready`/`empty` barrier sets, the producer waiting for a free stage and
announcing its bytes, the consumer waiting for the data and releasing the stage after its WGMMA
(print `run_passes(module).pretty()` to see it).

C[M, N] = A[M, K] @ B[K, N], A and B row-major fp16, C fp16. One program computes a
BLOCK_M x BLOCK_N tile: two consumer warpgroups (warps 0..7, a 128x256 fp32 accumulator is 128
registers per thread) and a 1-warp TMA producer (warp 8) with a 40-register budget. TMA zero-fills
reads past the edges and clips the store, so M, N and K need not be multiples of the tile (TMA needs
row strides that are multiples of 16 bytes: K and N multiples of 8).

Run it: with a GPU it checks random inputs of several shapes (C poisoned with NaN first) against an
fp32 torch reference and prints PASS/FAIL; without one it compiles for sm_90 and prints the SASS
instruction summary (HGMMA, UTMALDG, ...).
"""
import gluon.language as gl
from gluon import SM90, Layout, SwizzleMode, WarpRole, kernel
from gluon.language.control import for_range, warp_role
from gluon.language.memory import smem
from gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma_load,
    tma_store,
    tma_store_wait,
    wgmma,
    wgmma_wait,
)


@kernel(arch=SM90, num_warps=9)
def quickstart_gemm(A, B, C, K, BLOCK_M: gl.constexpr = 128, BLOCK_N: gl.constexpr = 256,
                    BLOCK_K: gl.constexpr = 64, CONSUMER_WARPS: gl.constexpr = 8):
    off_m = gl.program_id(0) * BLOCK_M
    off_n = gl.program_id(1) * BLOCK_N
    a_smem = smem(A.dtype, Layout.swizzled(BLOCK_M, BLOCK_K, swizzle=SwizzleMode.B128), name="A_tile",
                  double_buffer=True)
    b_smem = smem(B.dtype, Layout.swizzled(BLOCK_K, BLOCK_N, swizzle=SwizzleMode.B128), name="B_tile",
                  double_buffer=True)
    mbar = mbarrier(count=1, name="sync")
    with warp_role(WarpRole.CONSUMER, warp_range=(0, CONSUMER_WARPS - 1)):
        with for_range("k", 0, K, BLOCK_K):
            wgmma(a_smem, b_smem, "acc")
        acc = wgmma_wait("acc")                   # the accumulator after the loop
        c_smem = smem(C.dtype, Layout.swizzled(BLOCK_M, BLOCK_N, swizzle=SwizzleMode.B128), name="C_tile")
        c_smem.store(acc.to(C.dtype))
        fence_async_shared()
        tma_store(C, (off_m, off_n), c_smem)
        tma_store_wait(0)
    with warp_role(WarpRole.PRODUCER, warp_range=(CONSUMER_WARPS, CONSUMER_WARPS), registers=40):
        with for_range("k", 0, K, BLOCK_K) as k:
            tma_load(a_smem, A, (off_m, k), barrier_name=mbar)
            tma_load(b_smem, B, (k, off_n), barrier_name=mbar)


def grid(M: int, N: int, BLOCK_M: int = 128, BLOCK_N: int = 256) -> tuple[int, int]:
    return (gl.cdiv(M, BLOCK_M), gl.cdiv(N, BLOCK_N))


def gemm(a, b, c, block_n: int = 256, consumer_warps: int = 8):
    """c[:] = a @ b with quickstart_gemm (a: [M, K], b: [K, N], c: [M, N], row-major CUDA tensors)."""
    M, K = a.shape
    N = b.shape[1]
    quickstart_gemm[grid(M, N, 128, block_n)](a, b, c, K, BLOCK_N=block_n, CONSUMER_WARPS=consumer_warps,
                                               num_warps=consumer_warps + 1)
    return c


SHAPES = [(256, 512, 256), (1024, 1024, 1024), (333, 1000, 1000), (128, 256, 72), (1000, 264, 4104)]


def main() -> int:
    try:
        import torch
        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        failures = 0
        for M, N, K in SHAPES:
            for _ in range(2):                       # fresh inputs each time: a moving error is a race
                a = torch.randn(M, K, device="cuda", dtype=torch.float16)
                b = torch.randn(K, N, device="cuda", dtype=torch.float16)
                c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
                gemm(a, b, c)
                torch.cuda.synchronize()
                ref = a.float() @ b.float()
                nan = bool(torch.isnan(c).any())
                rel = ((c.float() - ref).norm() / ref.norm()).item()
                ok = not nan and rel <= 1e-2
                failures += not ok
                print(f"M={M:5d} N={N:5d} K={K:5d}: rel err {rel:.2e}{' (NaN left in C)' if nan else ''} "
                      f"{'PASS' if ok else 'FAIL'}")
        print("PASS" if failures == 0 else f"FAIL ({failures} runs)")
        return 1 if failures else 0
    from gluon import DType, TensorRef
    from gluon.backend.machine_code import sass_instructions
    refs = (TensorRef("A", DType.f16, shape=("M", "K")), TensorRef("B", DType.f16, shape=("K", "N")),
            TensorRef("C", DType.f16, shape=("M", "N")), DType.i32)
    ck = quickstart_gemm.compile(*refs)
    ops = sass_instructions(ck.sass())
    print(f"no GPU: compiled quickstart_gemm for sm_90 (registers={ck.registers}, spills={ck.spills}, "
          f"shared memory ~{ck.kernel.attrs['smem_bytes']} bytes)")
    for key in ("HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "USETMAXREG"):
        shapes = sorted(op for op in ops if op.startswith(key + ".") and op.count(".") == 1)
        print(f"  {key:<11} {ops[key]:3d}   {', '.join(f'{op} x{ops[op]}' for op in shapes)}")
    return 0 if ops["HGMMA"] and ops["UTMALDG"] and ck.spills == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
