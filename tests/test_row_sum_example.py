"""examples/row_sum.py, the sum and maximum of each row: compiled for sm_90 without a GPU (no spills, 16-byte
loads, the reductions' shuffles), its host-side plan, a run through the CPU interpreter (whole rows and the
LOOPED walk, sizes that are and are not multiples of the tile), the script's CPU path, and on a GPU
(`-m gpu`) checked against an fp64 torch reference into poisoned outputs."""
import os
import subprocess
import sys

import pytest

from gluon import DType, Layout
from gluon.backend.machine_code import sass_instructions
from gluon.language import PointerArg, ScalarArg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import row_sum as rs  # noqa: E402


def _compile(dtype, n_cols: int, div16: bool):
    cfg = rs.default_config(8192, n_cols, dtype.bytes)
    ints = [ScalarArg(DType.i32, 16 if div16 else 1)] * 3
    ck = rs.row_sum_kernel.compile(PointerArg(DType.f32), PointerArg(DType.f32), PointerArg(dtype), *ints,
                                   arch="sm90", num_warps=cfg["NUM_WARPS"], **cfg)
    return cfg, ck, sass_instructions(ck.sass())


@pytest.mark.parametrize("dtype,n_cols", [(DType.f16, 4096), (DType.f32, 128), (DType.bf16, 50000)])
def test_rows_reduce_with_shuffles_and_16_byte_loads(dtype, n_cols):
    cfg, ck, ops = _compile(dtype, n_cols, True)
    assert cfg["LOOPED"] == (n_cols > rs.MAX_BLOCK_N)
    assert ck.spills == 0
    assert ops["LDG.E.128"] == ops["LDG.E"] >= 1, sorted(ops.items())      # one path, every load 16 bytes
    assert ops.get("SHFL.BFLY", 0) >= 10, sorted(ops.items())               # sum and max across a warp


def test_rows_of_any_length_keep_an_element_path():
    _, ck, ops = _compile(DType.f16, 1000, False)
    assert ck.spills == 0
    assert ops.get("LDG.E.128", 0) >= 1 and ops.get("LDG.E.U16", 0) >= 1, sorted(ops.items())


def test_default_config_covers_the_row():
    for n in (1, 3, 37, 128, 1000, 4096):
        for elem in (2, 4):
            cfg = rs.default_config(4096, n, elem)
            assert not cfg["LOOPED"] and cfg["BLOCK_N"] >= n
            Layout.rows(cfg["ROWS_PER_PROGRAM"], cfg["BLOCK_N"], 16 // elem, cfg["NUM_WARPS"])
    assert rs.default_config(16, 5000, 4)["LOOPED"]


def test_bad_input_is_one_clear_error():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="2-D"):
        rs.row_sum(torch.zeros(3))
    with pytest.raises(ValueError, match="no columns"):
        rs.row_sum(torch.zeros(3, 0))
    with pytest.raises(ValueError, match="sums is"):
        rs.row_sum(torch.zeros(3, 4), sums=torch.zeros(4))
    with pytest.raises(ValueError, match="BLOCK_N=128 is smaller than the row"):
        rs.launch_plan(torch.zeros(3, 300), torch.zeros(3), torch.zeros(3), BLOCK_N=128)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape,tunables", [
    ((5, 100), {}), ((3, 37), {}), ((17, 8), {}), ((64, 256), {}),
    ((3, 700), dict(BLOCK_N=256, ROWS_PER_PROGRAM=1, NUM_WARPS=1, LOOPED=True)),
])
def test_interpreted_row_sum_matches_torch(interpret_env, dtype, shape, tunables):
    torch = pytest.importorskip("torch")
    x = torch.randn(shape).to(getattr(torch, dtype)) * 3 - 1
    sums, maxes = torch.full((shape[0],), float("nan")), torch.full((shape[0],), float("nan"))
    rs.row_sum(x, sums, maxes, **tunables)
    assert rs.check(x, sums, maxes) is None


def test_the_script_compiles_and_prints_its_sass_summary_without_a_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("with a GPU the script checks against torch and benchmarks instead")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "row_sum.py")], capture_output=True,
                         text=True, check=True, env=dict(os.environ, PYTHONPATH=ROOT)).stdout
    lines = out.splitlines()
    sass, interp = lines[:8], lines[8:]
    assert all("spills=0" in ln and "'SHFL.BFLY'" in ln for ln in sass), out
    # then the fallback: small cases checked in the CPU interpreter
    assert len(interp) == 3 and all(ln.startswith("interpreted on the CPU") and ": ok" in ln for ln in interp), out


GPU_SHAPES = [(1, 1), (3, 37), (4096, 1000), (257, 4096), (65536, 128), (33, 20000), (5, 4097)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gpu_row_sum_matches_torch(shape, dtype):
    import torch
    x = (torch.randn(shape, device="cuda") * 3 - 1).to(getattr(torch, dtype))
    sums = torch.full((shape[0],), float("nan"), device="cuda")
    maxes = torch.full((shape[0],), float("nan"), device="cuda")
    rs.row_sum(x, sums, maxes)
    torch.cuda.synchronize()
    assert rs.check(x, sums, maxes) is None


@pytest.mark.gpu
def test_gpu_row_sum_of_a_strided_view_into_fp16_outputs():
    import torch
    base = torch.randn(300, 2048, device="cuda")
    x = base[::3, 5:1805]                     # row stride 6144, unaligned row starts
    sums = torch.full((100,), float("nan"), device="cuda", dtype=torch.float16)
    maxes = torch.full((100,), float("nan"), device="cuda", dtype=torch.float16)
    rs.row_sum(x, sums, maxes)
    torch.cuda.synchronize()
    torch.testing.assert_close(sums.float(), x.double().sum(1).float(), rtol=2e-3, atol=1e-1)
    assert torch.equal(maxes, x.amax(1).half())
