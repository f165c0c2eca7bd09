"""examples/histogram.py, bincount / histc with `gl.histogram` per program and `gl.atomic_add` into the global
bins: compiled for sm_90 without a GPU (16-byte loads, one global atomic add per bin a thread holds, no
spills), its host-side plan and errors, runs through the CPU interpreter (int and float input, bin counts
that are and are not powers of two, sizes off the vector and the chunk, a grid smaller than the chunks so
the programs stride), the script's CPU path, and on a GPU (`-m gpu`) against torch into poisoned bins."""
import os
import subprocess
import sys

import pytest

from gluon import DType
from gluon.backend.machine_code import sass_instructions
from gluon.language import PointerArg, ScalarArg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import histogram as hg  # noqa: E402


def _compile(dtype, num_bins: int):
    cfg = hg.default_config(1 << 24, num_bins, dtype.bytes)
    ck = hg.histogram_kernel.compile(PointerArg(DType.i32), PointerArg(dtype), ScalarArg(DType.i32, 16),
                                     ScalarArg(DType.f32), ScalarArg(DType.f32), ScalarArg(DType.f32), arch="sm90",
                                     num_warps=cfg["NUM_WARPS"], NUM_BINS=num_bins, **cfg)
    return cfg, ck, sass_instructions(ck.sass())


@pytest.mark.parametrize("dtype,num_bins", [(DType.i32, 100), (DType.f16, 256), (DType.f32, 1000)])
def test_compiles_to_16_byte_loads_and_one_atomic_per_held_bin(dtype, num_bins):
    cfg, ck, ops = _compile(dtype, num_bins)
    assert ck.spills == 0
    assert ops.get("LDG.E.128", 0) >= 1, sorted(ops.items())
    held = -(-hg._next_pow2(num_bins) // (32 * cfg["NUM_WARPS"]))     # bins a thread holds
    atomics = ops.get("REDG.E.ADD.STRONG.GPU", 0) + ops.get("ATOMG.E.ADD.STRONG.GPU", 0)
    assert atomics == held, sorted(ops.items())
    assert ops.get("VOTE.ANY", 0) >= 1 and ops.get("ATOMS.ADD", 0) >= 1    # tt.histogram: ballots, shared adds


def test_bad_input_is_one_clear_error():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="lo < hi"):
        hg.histogram(torch.zeros(10), 8)
    with pytest.raises(ValueError, match="lo < hi"):
        hg.histogram(torch.zeros(10), 8, 1.0, 1.0)
    with pytest.raises(ValueError, match="int32, fp16, bf16 or fp32"):
        hg.histogram(torch.zeros(10, dtype=torch.int64), 8)
    with pytest.raises(ValueError, match="num_bins=0"):
        hg.histogram(torch.zeros(10, dtype=torch.int32), 0)
    with pytest.raises(ValueError, match="num_bins=4096"):
        hg.histogram(torch.zeros(10, dtype=torch.int32), 4096)
    with pytest.raises(ValueError, match="hist is"):
        hg.histogram(torch.zeros(10, dtype=torch.int32), 8, hist=torch.zeros(8))


def test_launch_plan_caps_the_grid():
    torch = pytest.importorskip("torch")
    x = torch.zeros(1 << 26, dtype=torch.int32, device="meta")
    grid, args, meta = hg.launch_plan(x, torch.zeros(10, dtype=torch.int32), 10)
    assert grid == (hg.PROGRAMS_PER_SM * 132,) and meta["NUM_BINS"] == 10 and args[2] == 1 << 26
    grid, _, _ = hg.launch_plan(torch.zeros(5000, dtype=torch.int32), torch.zeros(10, dtype=torch.int32), 10)
    assert grid == (3,)                                # 2048-element chunks


@pytest.mark.parametrize("n,num_bins,dtype", [
    (10000, 100, "int32"), (5003, 256, "int32"), (7, 5, "int32"),
    (9001, 37, "float32"), (3001, 10, "float16"), (2000, 64, "bfloat16"),
])
def test_interpreted_histogram_matches_torch(interpret_env, n, num_bins, dtype):
    torch = pytest.importorskip("torch")
    if dtype == "int32":
        x = torch.randint(-5, num_bins + 5, (n,), dtype=torch.int32)      # some values out of range
        lo = hi = None
    else:
        x = torch.randn(n).to(getattr(torch, dtype))
        x[:3] = torch.tensor([2.0, -2.0, float("nan")])                  # both ends count, NaN does not
        lo, hi = -2.0, 2.0
    hist = torch.full((num_bins,), -1, dtype=torch.int32)
    hg.histogram(x, num_bins, lo, hi, hist, BLOCK=1024)
    assert hg.check(x, hist, num_bins, lo, hi) is None


def test_interpreted_values_at_the_ends_count_as_histc_counts_them(interpret_env):
    """x == hi counts (last bin), the float32 just past hi and just below lo do not: (x - lo) * scale rounds
    the one past hi (here 3.0000002 + 3 times 100 / 6) to exactly 100.0, so the range is tested on x itself
    (the GPU run that found it counted one element more than histc over 2^24 normals)."""
    torch = pytest.importorskip("torch")
    hi, lo = torch.tensor(3.0), torch.tensor(-3.0)
    up, down = torch.nextafter(hi, torch.tensor(4.0)), torch.nextafter(lo, torch.tensor(-4.0))
    x = torch.tensor([3.0, float(up), float(down), -3.0, 0.0] * 300, dtype=torch.float32)
    hist = torch.full((100,), -1, dtype=torch.int32)
    hg.histogram(x, 100, -3.0, 3.0, hist, BLOCK=1024)
    assert int(hist.sum()) == 900 and int(hist[99]) == 300 and int(hist[0]) == 300
    assert hg.check(x, hist, 100, -3.0, 3.0) is None


def test_interpreted_programs_stride_over_the_chunks():
    """Two programs over six chunks and a tail: the loop's stride and program 0's leftovers."""
    torch = pytest.importorskip("torch")
    from gluon.interpret import set_enabled
    n, bins = 6 * 512 + 3, 50
    x = torch.randint(0, bins, (n,), dtype=torch.int32)
    hist = torch.zeros(bins, dtype=torch.int32)
    was = set_enabled(False)
    try:
        hg.histogram_kernel.interpret((2,), hist, x, n, 0.0, 0.0, 0.0, NUM_BINS=bins, BLOCK=512, NUM_WARPS=4,
                                      num_warps=4)
    finally:
        set_enabled(was)
    assert torch.equal(hist, torch.bincount(x, minlength=bins).to(torch.int32))


def test_the_script_compiles_and_prints_its_sass_summary_without_a_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("with a GPU the script checks against torch and benchmarks instead")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "histogram.py")], capture_output=True,
                         text=True, check=True, env=dict(os.environ, PYTHONPATH=ROOT)).stdout
    lines = out.splitlines()
    sass, interp = lines[:9], lines[9:]
    assert all("spills=0" in ln and "'REDG.E.ADD.STRONG.GPU'" in ln for ln in sass), out
    # then the fallback: small cases checked in the CPU interpreter
    assert len(interp) == 3 and all(ln.startswith("interpreted on the CPU") and ": ok" in ln for ln in interp), out


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 1000, 100_003, (1 << 24) + 5])
@pytest.mark.parametrize("num_bins", [1, 100, 256, 1000, 2048])
@pytest.mark.parametrize("dtype", ["int32", "float32", "float16", "bfloat16"])
def test_gpu_histogram_matches_torch(n, num_bins, dtype):
    import torch
    if dtype == "int32":
        x = torch.randint(-5, num_bins + 5, (n,), device="cuda", dtype=torch.int32)
        lo = hi = None
    else:
        x = (torch.randn(n, device="cuda") * 2).to(getattr(torch, dtype))
        lo, hi = -3.0, 3.0
    hist = torch.full((num_bins,), -1, device="cuda", dtype=torch.int32)     # poison: histogram zeroes it
    hg.histogram(x, num_bins, lo, hi, hist)
    torch.cuda.synchronize()
    assert hg.check(x, hist, num_bins, lo, hi) is None


@pytest.mark.gpu
def test_gpu_histogram_of_skewed_data_and_a_2d_view():
    """Every element in one bin (the worst case for the per-warp counts), and a strided 2-D input."""
    import torch
    x = torch.full((1 << 22,), 7, device="cuda", dtype=torch.int32)
    hist = hg.histogram(x, 10)
    assert hist.tolist() == [0] * 7 + [1 << 22, 0, 0]
    y = torch.randint(0, 300, (1000, 700), device="cuda", dtype=torch.int32)[:, ::3]
    hist = hg.histogram(y, 300)
    assert torch.equal(hist, torch.bincount(y.reshape(-1), minlength=300).to(torch.int32))


def test_the_sass_of_a_kernel_over_64_kib_of_code_is_whole():
    """The fp16 histogram at 2048 bins is over 64 KiB of code: Triton's disassembler pattern took 4-hex-digit
    offsets only and dropped every instruction past 0xfff0 (its atomics among them); Binary.sass widens it."""
    cfg, ck, ops = _compile(DType.f16, 2048)
    lines = [ln for ln in ck.sass().splitlines() if ";" in ln]
    assert len(lines) > 0x10000 // 16 and any("EXIT;" in ln for ln in lines[-40:])   # 16-byte instructions
    held = -(-2048 // (32 * cfg["NUM_WARPS"]))
    assert ops.get("REDG.E.ADD.STRONG.GPU", 0) + ops.get("ATOMG.E.ADD.STRONG.GPU", 0) == held, sorted(ops.items())
