"""examples/cumsum.py, the row-wise cumsum: compiled for sm_90 without a GPU (no spills, the scan's
shuffles, 16-byte global accesses where N allows), its host-side plan, the script's CPU path, and on a GPU
(`-m gpu`) checked against torch into poisoned outputs."""
import os
import subprocess
import sys

import pytest

from gluon import DType
from gluon.backend.machine_code import sass_instructions
from gluon.language import PointerArg, ScalarArg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import cumsum as cs  # noqa: E402


def _compile(dtype, n_cols: int, div16: bool):
    cfg = cs.default_config(8192, n_cols, dtype.bytes)
    ints = [ScalarArg(DType.i32, 16 if div16 else 1)] * 4
    ck = cs.cumsum_kernel.compile(PointerArg(dtype), PointerArg(dtype), *ints, arch="sm90",
                                  num_warps=cfg["NUM_WARPS"], **cfg)
    return cfg, ck, sass_instructions(ck.sass())


@pytest.mark.parametrize("dtype", [DType.f16, DType.f32, DType.i32])
def test_whole_rows_scan_with_shuffles_and_16_byte_accesses(dtype):
    cfg, ck, ops = _compile(dtype, 4096, True)
    assert not cfg["LOOPED"] and cfg["BLOCK_N"] == 4096
    assert ck.spills == 0
    assert ops.get("SHFL.UP", 0) >= 5, sorted(ops.items())        # log2(32) rounds across a warp's lanes
    assert ops.get("LDG.E.128", 0) >= 1 and ops.get("STG.E.128", 0) >= 1, sorted(ops.items())


def test_long_rows_loop_with_a_carried_row_total():
    cfg, ck, ops = _compile(DType.f32, 20000, True)
    assert cfg["LOOPED"] and cfg["BLOCK_N"] == cs.MAX_BLOCK_N
    assert ck.spills == 0
    # the chunk's scan (SHFL.UP) and the sum it adds to the carry (a butterfly reduce)
    assert ops.get("SHFL.UP", 0) >= 5 and ops.get("SHFL.BFLY", 0) >= 5, sorted(ops.items())


def test_default_config_covers_the_row():
    for n in (1, 3, 37, 256, 1000, 3000, 4096):
        for elem in (2, 4):
            cfg = cs.default_config(4096, n, elem)
            assert not cfg["LOOPED"] and cfg["BLOCK_N"] >= n
            assert cfg["BLOCK_N"] < 2 * n or cfg["BLOCK_N"] == 16 // elem
            # Layout.rows accepts it: the tile covers the warps' threads
            cs.Layout.rows(cfg["ROWS_PER_PROGRAM"], cfg["BLOCK_N"], 16 // elem, cfg["NUM_WARPS"])
    assert cs.default_config(16, 5000, 4)["LOOPED"]


def test_launch_plan_refuses_what_the_kernel_cannot_do():
    torch = pytest.importorskip("torch")
    x = torch.zeros(8, 300)
    with pytest.raises(ValueError, match="BLOCK_N=128 is smaller than the row"):
        cs.launch_plan(x, torch.zeros_like(x), BLOCK_N=128)
    with pytest.raises(ValueError, match="unit stride"):
        cs.launch_plan(x.t(), torch.zeros(300, 8))
    grid, args, meta = cs.launch_plan(x, torch.zeros_like(x))
    assert grid == (-(-8 // meta["ROWS_PER_PROGRAM"]),) and args[2:] == (8, 300, 300, 300)


def test_the_script_compiles_and_prints_its_sass_summary_without_a_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("with a GPU the script checks against torch and benchmarks instead")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "cumsum.py")], capture_output=True,
                         text=True, check=True, env=dict(os.environ, PYTHONPATH=ROOT)).stdout
    lines = out.splitlines()
    sass, interp = lines[:9], lines[9:]
    assert all("spills=0" in ln and "'SHFL.UP'" in ln for ln in sass), out
    # then the fallback: small cases checked in the CPU interpreter
    assert len(interp) == 3 and all(ln.startswith("interpreted on the CPU") and ": ok" in ln for ln in interp), out


GPU_SHAPES = [(1, 1), (3, 37), (4096, 1000), (257, 4096), (64, 3000), (33, 20000)]
GPU_DTYPES = ["float32", "float16", "bfloat16", "int32"]


def test_the_gpu_tests_launches_specialize_and_compile_from_torch_tensors():
    """The launch path of the GPU tests below, without launching: CPU tensors stand in for CUDA ones."""
    torch = pytest.importorskip("torch")
    seen = set()
    for shape in GPU_SHAPES:
        for dtype in GPU_DTYPES:
            x = torch.zeros(shape, dtype=getattr(torch, dtype))
            grid, args, meta = cs.launch_plan(x, torch.zeros_like(x))
            key = (dtype, tuple(sorted(meta.items())))
            if key not in seen:
                seen.add(key)
                ck = cs.cumsum_kernel[grid].compiled(*args, arch="sm90", **meta)
                assert ck.spills == 0, (shape, dtype, meta)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES)
@pytest.mark.parametrize("dtype", GPU_DTYPES)
def test_gpu_cumsum_matches_torch(shape, dtype):
    import torch
    dt = getattr(torch, dtype)
    if dt == torch.int32:
        x = torch.randint(-1000, 1000, shape, device="cuda", dtype=dt)
    else:
        x = torch.randn(shape, device="cuda", dtype=dt)
    out = torch.full_like(x, -7)
    cs.cumsum(x, out)
    torch.cuda.synchronize()
    ref = x.double().cumsum(-1)
    if dt == torch.int32:
        assert torch.equal(out, ref.to(dt))
    else:
        scale = x.double().abs().cumsum(-1) + 1.0
        tol = 1e-5 if dt == torch.float32 else 1e-2         # fp32 sums, rounded once to the output dtype
        assert ((out.double() - ref).abs() / scale).max().item() < tol


@pytest.mark.gpu
def test_gpu_cumsum_of_a_strided_view():
    import torch
    base = torch.randn(300, 2048, device="cuda")
    x = base[::3, 5:1805]                     # row stride 6144, unaligned row starts
    out = torch.full((100, 1800), float("nan"), device="cuda")
    cs.cumsum(x, out)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x.double().cumsum(-1).float(), rtol=1e-5, atol=1e-3)
