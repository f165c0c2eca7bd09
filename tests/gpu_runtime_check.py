#!/usr/bin/env python3
"""GPU check of gluon.runtime, to run by hand on a Hopper GPU (H100/H200):

    python3 tests/gpu_runtime_check.py

Not a pytest module (pytest collects test_*.py only, and everything here runs under __main__):
it needs a real sm_90 device, which CI does not have. What it checks, each printed as a
PASS/FAIL line, then a summary table:

1. ``tests/data/ttgir/hopper_tma_wgmma.ttgir`` (TMA loads into 128B-swizzled shared memory,
   WGMMA, TMA-store epilogue; C[128x128 tile] = A[M,K] @ B[K,N], fp16, grid (M/128, N/128), K the
   last i32 parameter) compiled with ``gluon.backend.compile.compile_ttgir`` and its kernel ABI, and
   launched through ``gluon.runtime.Launcher``
   with torch tensors, C poisoned with NaN first, against an fp32 torch reference (relative
   error < 1e-2); again with prebuilt ``TensorDescriptor``s, another shape, and a side stream.
2. The warp-specialized sample (``hopper_ws_wgmma.ttgir``, if present): the launcher must use
   ``metadata["num_warps"]`` (default partition + workers), not the module's ``ttg.num-warps``.
3. A pointer kernel (``layouts_smem``, embedded below: out[i] = sum_j x[i, j] for a 64x64 f32 x,
   compiled with ``tt.divisibility = 16`` on both pointers): pointer args, and the refusal of a
   misaligned pointer before launch.
4. Error paths on a machine that does have a GPU (CPU tensor, wrong dtype).
5. Host overhead per launch: 1000 back-to-back launches of a one-CTA call, timed on the host;
   also the pure-Python part alone (C launcher replaced by a no-op) and triton's C launcher alone.

Exit status 0 when every check passed.
"""

from __future__ import annotations

import pathlib
import sys
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "ttgir"
SHARED = ROOT.parent / "shared" / "ttgir"

# triton 3.6.0 TTGIR of a small pointer kernel (shared/ttgir/layouts_smem.ttgir): x[64x64] f32 ->
# out[64] row sums, through swizzled shared memory. Embedded so the check needs no other file.
LAYOUTS_SMEM_TTGIR = """\
#blocked = #ttg.blocked<{sizePerThread = [1, 4], threadsPerWarp = [4, 8], warpsPerCTA = [4, 1], order = [1, 0]}>
#blocked1 = #ttg.blocked<{sizePerThread = [4, 1], threadsPerWarp = [8, 4], warpsPerCTA = [1, 4], order = [0, 1]}>
#shared = #ttg.swizzled_shared<{vec = 4, perPhase = 1, maxPhase = 8, order = [1, 0]}>
#smem = #ttg.shared_memory
module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, ttg.target = "cuda:90", "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @layouts_smem_kernel(%x_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %out_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<64> : tensor<64x1xi32, #blocked>
    %c0_i32 = arith.constant 0 : i32
    %rows = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32, #ttg.slice<{dim = 1, parent = #blocked}>>
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32, #ttg.slice<{dim = 0, parent = #blocked}>>
    %offs = tt.expand_dims %rows {axis = 1 : i32} : tensor<64xi32, #ttg.slice<{dim = 1, parent = #blocked}>> -> tensor<64x1xi32, #blocked>
    %offs_0 = arith.muli %offs, %cst : tensor<64x1xi32, #blocked>
    %offs_1 = tt.expand_dims %cols {axis = 0 : i32} : tensor<64xi32, #ttg.slice<{dim = 0, parent = #blocked}>> -> tensor<1x64xi32, #blocked>
    %offs_2 = tt.broadcast %offs_0 : tensor<64x1xi32, #blocked> -> tensor<64x64xi32, #blocked>
    %offs_3 = tt.broadcast %offs_1 : tensor<1x64xi32, #blocked> -> tensor<64x64xi32, #blocked>
    %offs_4 = arith.addi %offs_2, %offs_3 : tensor<64x64xi32, #blocked>
    %x = tt.splat %x_ptr : !tt.ptr<f32> -> tensor<64x64x!tt.ptr<f32>, #blocked>
    %x_5 = tt.addptr %x, %offs_4 : tensor<64x64x!tt.ptr<f32>, #blocked>, tensor<64x64xi32, #blocked>
    %x_6 = tt.load %x_5 : tensor<64x64x!tt.ptr<f32>, #blocked>
    %smem = ttg.local_alloc : () -> !ttg.memdesc<2x64x64xf32, #shared, #smem, mutable>
    %0 = ttg.memdesc_index %smem[%c0_i32] : !ttg.memdesc<2x64x64xf32, #shared, #smem, mutable> -> !ttg.memdesc<64x64xf32, #shared, #smem, mutable>
    ttg.local_store %x_6, %0 : tensor<64x64xf32, #blocked> -> !ttg.memdesc<64x64xf32, #shared, #smem, mutable>
    %y = ttg.local_load %0 : !ttg.memdesc<64x64xf32, #shared, #smem, mutable> -> tensor<64x64xf32, #blocked1>
    %y_7 = ttg.convert_layout %y : tensor<64x64xf32, #blocked1> -> tensor<64x64xf32, #blocked>
    %s = "tt.reduce"(%y_7) <{axis = 1 : i32}> ({
    ^bb0(%s_8: f32, %s_9: f32):
      %s_10 = arith.addf %s_8, %s_9 : f32
      tt.reduce.return %s_10 : f32
    }) : (tensor<64x64xf32, #blocked>) -> tensor<64xf32, #ttg.slice<{dim = 1, parent = #blocked}>>
    %1 = tt.splat %out_ptr : !tt.ptr<f32> -> tensor<64x!tt.ptr<f32>, #ttg.slice<{dim = 1, parent = #blocked}>>
    %2 = tt.addptr %1, %rows : tensor<64x!tt.ptr<f32>, #ttg.slice<{dim = 1, parent = #blocked}>>, tensor<64xi32, #ttg.slice<{dim = 1, parent = #blocked}>>
    tt.store %2, %s : tensor<64x!tt.ptr<f32>, #ttg.slice<{dim = 1, parent = #blocked}>>
    tt.return
  }
}
"""

RESULTS: list[tuple[str, bool, str]] = []
TIMINGS: list[tuple[str, float]] = []


def record(name: str, ok: bool, detail: str = "") -> bool:
    RESULTS.append((name, ok, detail))
    print(f"{'PASS' if ok else 'FAIL'}: {name}{' -- ' + detail if detail else ''}", flush=True)
    return ok


def check(name: str, fn) -> None:
    """Run one check; an exception is a FAIL with its message (and traceback on stderr)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - report every failure and go on
        traceback.print_exc()
        record(name, False, f"{type(e).__name__}: {e}")


def compile_text(text: str, abi):
    """Compile TTGIR for sm_90 with its ABI (the compile step checks the ABI's TMA boxes)."""
    from gluon.backend.compile import compile_ttgir
    return compile_ttgir(text, ("cuda", 90, 32), abi=abi)


def find_ttgir(name: str) -> pathlib.Path | None:
    for d in (DATA, SHARED):
        if (d / name).exists():
            return d / name
    return None


def rel_err(out, ref) -> float:
    import torch
    return float(torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref))


def main() -> int:
    sys.path.insert(0, str(ROOT))   # `python3 tests/gpu_runtime_check.py` puts tests/ first, not the repo
    import torch
    if not torch.cuda.is_available():
        print("FAIL: no CUDA device; this script must run on a Hopper GPU")
        return 2
    cap = torch.cuda.get_device_capability()
    print(f"device: {torch.cuda.get_device_name()} sm_{cap[0]}{cap[1]}, torch {torch.__version__}")
    import triton
    print(f"triton {triton.__version__}")
    from gluon import runtime as rt
    from gluon.abi import KernelABI, KernelParam, ParamKind
    from gluon.dtypes import DType
    Launcher, LaunchError = rt.Launcher, rt.LaunchError
    torch.manual_seed(0)
    dev = torch.device("cuda")

    def desc(name, block):
        return KernelParam(name, ParamKind.TENSORDESC, DType.f16, block_shape=block, swizzle_bytes=128,
                           box=rt.tma_box_shape(block, 2, 128))

    tma_args = (desc("a_desc", (128, 64)), desc("b_desc", (64, 128)), desc("c_desc", (128, 128)),
                KernelParam("K", ParamKind.SCALAR, DType.i32))

    def tma_abi(name, source):
        return KernelABI(name, ("cuda", 90, 32), tma_args, loc=source)
    state: dict = {}

    def gemm(L, M, N, K, *, prebuilt=False, stream=None):
        A = torch.randn(M, K, device=dev, dtype=torch.float16)
        B = torch.randn(K, N, device=dev, dtype=torch.float16)
        C = torch.full((M, N), float("nan"), device=dev, dtype=torch.float16)
        a, b, c = A, B, C
        if prebuilt:
            a = rt.make_tensor_descriptor(A, (128, 64), 128)
            b = rt.make_tensor_descriptor(B, (64, 128), 128)
            c = rt.make_tensor_descriptor(C, (128, 128), 128)
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream())   # inputs were made on the default stream
            with torch.cuda.stream(stream):
                L((M // 128, N // 128), a, b, c, K)
            stream.synchronize()
        else:
            L((M // 128, N // 128), a, b, c, K)
        torch.cuda.synchronize()
        ref = A.float() @ B.float()
        nan = int(torch.isnan(C).sum())
        return rel_err(C, ref), nan

    # ---- 1. TMA + WGMMA ------------------------------------------------------------------
    def tma_main():
        path = find_ttgir("hopper_tma_wgmma.ttgir")
        if path is None:
            record("tma_wgmma: find tests/data/ttgir/hopper_tma_wgmma.ttgir", False, "missing")
            return
        t = time.perf_counter()
        binary = compile_text(path.read_text(), tma_abi("tma_wgmma_kernel", f"{path.name}:6"))
        TIMINGS.append(("compile hopper_tma_wgmma (s)", time.perf_counter() - t))
        L = Launcher(binary)
        state["tma"] = L
        print(f"  launcher: {L}; launch types {L.launch_types}")
        err, nan = gemm(L, 256, 256, 512)
        record("tma_wgmma 256x256x512 (tensors -> descriptors)", nan == 0 and err < 1e-2,
               f"rel err {err:.2e}, NaN left {nan}")
        err, nan = gemm(L, 256, 256, 512, prebuilt=True)
        record("tma_wgmma 256x256x512 (prebuilt TensorDescriptor)", nan == 0 and err < 1e-2,
               f"rel err {err:.2e}, NaN left {nan}")
        err, nan = gemm(L, 512, 384, 1024)
        record("tma_wgmma 512x384x1024 (new shapes, same launcher)", nan == 0 and err < 1e-2,
               f"rel err {err:.2e}, NaN left {nan}")
        err, nan = gemm(L, 256, 256, 512, stream=torch.cuda.Stream())
        record("tma_wgmma on a side stream", nan == 0 and err < 1e-2, f"rel err {err:.2e}, NaN left {nan}")
        info = rt.descriptor_cache_info()
        record("descriptor cache in use", info["size"] > 0, str(info))

    check("tma_wgmma", tma_main)

    # ---- 2. warp-specialized -------------------------------------------------------------
    def ws_main():
        path = find_ttgir("hopper_ws_wgmma.ttgir")
        if path is None:
            print("skip: hopper_ws_wgmma.ttgir not found")
            return
        binary = compile_text(path.read_text(), tma_abi("ws_wgmma_kernel", f"{path.name}:6"))
        L = Launcher(binary)
        record("ws_wgmma launches metadata num_warps", L.num_warps > 4,
               f"num_warps {L.num_warps} (module says 4)")
        err, nan = gemm(L, 256, 256, 512)
        record("ws_wgmma 256x256x512", nan == 0 and err < 1e-2, f"rel err {err:.2e}, NaN left {nan}")

    check("ws_wgmma", ws_main)

    # ---- 3. pointer kernel + divisibility -------------------------------------------------
    def ptr_main():
        args = (KernelParam("x_ptr", ParamKind.POINTER, DType.f32, rank=2, needs_contiguous=True, divisibility=16),
                KernelParam("out_ptr", ParamKind.POINTER, DType.f32, rank=1, divisibility=16))
        L = Launcher(compile_text(LAYOUTS_SMEM_TTGIR, KernelABI("layouts_smem_kernel", ("cuda", 90, 32), args)))
        state["ptr"] = L
        x = torch.randn(64, 64, device=dev)
        out = torch.full((64,), float("nan"), device=dev)
        L((1,), x, out)
        torch.cuda.synchronize()
        err = rel_err(out, x.sum(dim=1))
        record("layouts_smem pointer kernel", err < 1e-5 and not torch.isnan(out).any(), f"rel err {err:.2e}")
        buf = torch.randn(64 * 64 + 1, device=dev)
        try:
            L((1,), buf[1:].view(64, 64), out)
            record("misaligned pointer refused (tt.divisibility = 16)", False, "launched")
        except LaunchError as e:
            record("misaligned pointer refused (tt.divisibility = 16)", "16-byte" in str(e), str(e)[:100])

    check("pointer", ptr_main)

    # ---- 4. errors on a GPU machine --------------------------------------------------------
    def errors_main():
        L = state.get("ptr")
        if L is None:
            return
        out = torch.empty(64, device=dev)
        for name, bad, want in [("CPU tensor", torch.randn(64, 64), "CPU tensor"),
                                ("wrong dtype", torch.randn(64, 64, device=dev).half(), "dtype"),
                                ("non-contiguous", torch.randn(64, 128, device=dev)[:, ::2], "contiguous")]:
            try:
                L((1,), bad, out)
                record(f"error: {name}", False, "launched")
            except LaunchError as e:
                record(f"error: {name}", want in str(e), str(e)[:110])

    check("errors", errors_main)

    # ---- 5. host overhead ----------------------------------------------------------------
    def overhead_main():
        n = 1000
        L = state.get("tma")
        if L is not None:
            A = torch.randn(128, 64, device=dev, dtype=torch.float16)
            B = torch.randn(64, 128, device=dev, dtype=torch.float16)
            C = torch.empty(128, 128, device=dev, dtype=torch.float16)
            cases = [("tma_wgmma 1 CTA (3 descriptors + K)", L, ((1, 1), A, B, C, 64))]
        else:
            cases = []
        P = state.get("ptr")
        if P is not None:
            x, out = torch.randn(64, 64, device=dev), torch.empty(64, device=dev)
            cases.append(("layouts_smem 1 CTA (2 pointers)", P, ((1,), x, out)))
        for name, launcher, call in cases:
            for _ in range(50):
                launcher(*call)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(n):
                launcher(*call)
            host = (time.perf_counter() - t) / n * 1e6
            torch.cuda.synchronize()
            total = (time.perf_counter() - t) / n * 1e6
            TIMINGS.append((f"{name}: host us/launch", host))
            TIMINGS.append((f"{name}: wall us/launch incl. sync", total))
            # the pure-Python part: the C launcher replaced by a no-op
            real, captured = launcher._c_launcher, []
            launcher._c_launcher = lambda *a: captured.append(a) if not captured else None
            try:
                t = time.perf_counter()
                for _ in range(n):
                    launcher(*call)
                py = (time.perf_counter() - t) / n * 1e6
            finally:
                launcher._c_launcher = real
            TIMINGS.append((f"{name}: python prep us/launch", py))
            # triton's C launcher alone, with the exact arguments we pass
            a = captured[0]
            t = time.perf_counter()
            for _ in range(n):
                real(*a)
            c_only = (time.perf_counter() - t) / n * 1e6
            torch.cuda.synchronize()
            TIMINGS.append((f"{name}: triton C launcher alone us/launch", c_only))
            record(f"host overhead {name}", py < 200, f"{host:.1f} us host, {py:.1f} us python, "
                                                     f"{c_only:.1f} us C launcher")

    check("overhead", overhead_main)

    # ---- summary ---------------------------------------------------------------------------
    print("\n" + "=" * 78)
    print(f"{'check':<60} {'result':>6}")
    print("-" * 78)
    for name, ok, _ in RESULTS:
        print(f"{name[:60]:<60} {'PASS' if ok else 'FAIL':>6}")
    print("-" * 78)
    for name, v in TIMINGS:
        print(f"{name[:60]:<60} {v:>10.2f}")
    print("=" * 78)
    failed = sum(1 for _, ok, _ in RESULTS if not ok)
    print(f"{len(RESULTS) - failed} passed, {failed} failed")
    return 0 if failed == 0 and RESULTS else 1


if __name__ == "__main__":
    sys.exit(main())
