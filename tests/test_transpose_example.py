"""examples/transpose_kernel.py, out = x.T through shared memory: compiled for sm_90 without a GPU (16-byte
global accesses both ways, no spills), the bank-conflict pass's verdict on the swizzled tile (none) and the
plain one (the column-wise read conflicts), the host-side plan, the script's CPU path, and on a GPU (`-m gpu`)
checked bit-exactly against torch into poisoned outputs; on the CPU the same launches run in the interpreter
(shared memory included) and are checked bit-exactly too."""
import os
import subprocess
import sys

import pytest

from gluon import DType
from gluon.backend.machine_code import sass_instructions
from gluon.passes.bank_conflicts import bank_conflict_degree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import transpose_kernel as tk  # noqa: E402


@pytest.mark.parametrize("dtype", [DType.f16, DType.f32])
def test_swizzled_tile_compiles_to_16_byte_accesses_without_bank_conflicts(dtype):
    cfg, ck, conflicts = tk.compile_sm90(dtype, div16=True)
    ops = sass_instructions(ck.sass())
    assert ck.spills == 0
    assert conflicts == []
    # divisible strides leave one path: every global access is 16 bytes wide
    assert ops["LDG.E.128"] == ops["LDG.E"] >= 1 and ops["STG.E.128"] == ops["STG.E"] >= 1, sorted(ops.items())
    assert ops.get("STS.128", 0) >= 1, sorted(ops.items())          # the row-wise shared stores stay whole


def test_plain_tile_has_the_column_read_conflict():
    cfg, ck, conflicts = tk.compile_sm90(DType.f32, div16=True, SWIZZLE=False)
    assert {(c["op"], c["degree"]) for c in conflicts} == {("smem_load", 8.0)}
    assert all(c["shared"] == tk.shared_layout(1, False) for c in conflicts)


@pytest.mark.parametrize("elem_bytes", [1, 2, 4])
@pytest.mark.parametrize("block", [(64, 64), (128, 64), (64, 128), (128, 128)])
def test_the_swizzle_is_conflict_free_for_both_copies_of_every_tile(elem_bytes, block):
    """The pass's model on the two copies, for the tiles and dtypes the launcher may pick."""
    dt = {1: DType.f8e4m3, 2: DType.f16, 4: DType.f32}[elem_bytes]
    vec = 16 // elem_bytes
    bm, bn = max(block[0], 8 * vec), max(block[1], 8 * vec)
    rows_l, cols_l = tk.tile_layouts(bm, bn, vec, 4)
    sw, plain = tk.shared_layout(vec, True), tk.shared_layout(vec, False)
    assert bank_conflict_degree(rows_l, (bm, bn), dt, sw) == 1.0
    assert bank_conflict_degree(cols_l, (bm, bn), dt, sw) == 1.0
    assert bank_conflict_degree(cols_l, (bm, bn), dt, plain) > 1.0


def test_unaligned_strides_keep_a_16_byte_path_and_an_element_path():
    _, ck, _ = tk.compile_sm90(DType.f16, div16=False)
    ops = sass_instructions(ck.sass())
    assert ops.get("LDG.E.128", 0) >= 1 and ops.get("LDG.E.U16", 0) >= 1, sorted(ops.items())
    assert ck.spills == 0


def test_tiles_too_small_for_the_warps_are_refused():
    with pytest.raises(ValueError, match="too small"):
        tk.tile_layouts(16, 64, 4, 4)
    with pytest.raises(ValueError, match="too small"):
        tk.tile_layouts(128, 64, 16, 4)                 # fp8: a row of 4 vector groups


def test_launch_plan():
    torch = pytest.importorskip("torch")
    x = torch.zeros(100, 70, dtype=torch.float16)
    out = torch.zeros(70, 100, dtype=torch.float16)
    grid, args, meta = tk.launch_plan(x, out)
    assert grid == (2, 2) and args[2:] == (100, 70, 70, 100) and meta["num_warps"] == 4
    with pytest.raises(ValueError, match="unit stride"):
        tk.launch_plan(x.t(), out.t())
    with pytest.raises(ValueError, match=r"out is \(100, 70\)"):
        tk.transpose(x, torch.zeros(100, 70, dtype=torch.float16))


def test_the_gpu_tests_launches_specialize_and_compile_from_torch_tensors():
    """The launch path of the GPU tests below, without launching: CPU tensors stand in for CUDA ones."""
    torch = pytest.importorskip("torch")
    import warnings
    seen = set()
    for shape in GPU_SHAPES[:4]:
        for dtype in ("float16", "float32", "float8_e4m3fn"):
            x = torch.zeros(shape, dtype=getattr(torch, dtype))
            out = torch.zeros(shape[::-1], dtype=x.dtype)
            grid, args, meta = tk.launch_plan(x, out)
            key = (dtype, tuple(sorted(meta.items())))
            if key not in seen:
                seen.add(key)
                with warnings.catch_warnings():
                    warnings.simplefilter("error")              # the swizzled tile: no bank-conflict warning
                    ck = tk.transpose_kernel[grid].compiled(*args, arch="sm90", **meta)
                assert ck.spills == 0


def test_the_script_compiles_and_prints_both_layouts_verdicts_without_a_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("with a GPU the script checks against torch and benchmarks instead")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "transpose_kernel.py")], capture_output=True,
                         text=True, check=True, env=dict(os.environ, PYTHONPATH=ROOT)).stdout
    lines = [ln for ln in out.splitlines() if "registers=" in ln]
    assert len(lines) == 8 and all("spills=0" in ln for ln in lines), out
    assert all("0 bank conflicts" in ln for ln in lines if "swizzled" in ln), out
    assert all("smem_load 8-way" in ln for ln in lines if "naive" in ln), out
    # then the fallback: small cases checked in the CPU interpreter (shared memory, swizzle and all)
    interp = out.splitlines()[-4:]
    assert all(ln.startswith("interpreted on the CPU") and ": ok" in ln for ln in interp), out
    assert sum(ln.startswith("interpreted on the CPU") for ln in out.splitlines()) == 4, out


GPU_SHAPES = [(64, 64), (1, 1), (3, 37), (1000, 517), (4096, 1000), (129, 4097)]
GPU_DTYPES = ["float16", "bfloat16", "float32", "int32", "float8_e4m3fn"]


def _bits(t):
    import torch
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


@pytest.mark.gpu
@pytest.mark.parametrize("swizzle", [True, False])
@pytest.mark.parametrize("shape", GPU_SHAPES)
@pytest.mark.parametrize("dtype", GPU_DTYPES)
def test_gpu_transpose_matches_torch(shape, dtype, swizzle):
    import torch
    dt = getattr(torch, dtype)
    x = torch.randint(-100, 100, shape, device="cuda", dtype=torch.int32)
    x = x if dt == torch.int32 else (x.float() / 7).to(dt)
    out = torch.full((shape[1], shape[0] * x.element_size()), 0xFF, device="cuda", dtype=torch.uint8).view(dt)
    tk.transpose(x, out, SWIZZLE=swizzle)
    torch.cuda.synchronize()
    assert torch.equal(_bits(out), _bits(x.t().contiguous()))


@pytest.mark.gpu
def test_gpu_transpose_of_strided_views_and_other_tiles():
    import torch
    base = torch.randn(300, 2100, device="cuda")
    x = base[::3, 5:2005]                               # row stride 6300, unaligned row starts
    for tun in ({}, dict(BLOCK_M=128, BLOCK_N=64), dict(BLOCK_M=64, BLOCK_N=128, NUM_WARPS=8)):
        out = torch.full((2000, 100), float("nan"), device="cuda")
        tk.transpose(x, out, **tun)
        torch.cuda.synchronize()
        assert torch.equal(out, x.t().contiguous()), tun


@pytest.mark.parametrize("shape,dtype", [((130, 70), "float16"), ((64, 64), "float32"), ((3, 37), "bfloat16"),
                                         ((100, 257), "int32")])
@pytest.mark.parametrize("swizzle", [True, False])
def test_interpreted_transpose_is_exact(shape, dtype, swizzle):
    """The host function's launch run by the CPU interpreter: through the shared tile, bit for bit."""
    torch = pytest.importorskip("torch")
    from gluon.interpret import set_enabled
    dt = getattr(torch, dtype)
    x = (torch.randn(*shape) * 100).to(dt)
    out = torch.full((shape[1], shape[0]), -7).to(dt)
    was = set_enabled(True)
    try:
        tk.transpose(x, out, SWIZZLE=swizzle)
    finally:
        set_enabled(was)
    assert torch.equal(out, x.t().contiguous())
