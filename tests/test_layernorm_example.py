"""examples/layernorm_kernel.py, LayerNorm forward with weight and bias: compiled for sm_90 without a GPU (no
spills, 16-byte accesses), its host-side plan and errors, runs through the CPU interpreter (rows that are and
are not multiples of the vector and the tile, several rows a program, a large mean), the script's CPU path,
and on a GPU (`-m gpu`) against an fp32 torch reference into NaN-poisoned outputs."""
import os
import subprocess
import sys

import pytest

from gluon import DType, Layout
from gluon.backend.machine_code import sass_instructions
from gluon.language import PointerArg, ScalarArg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import layernorm_kernel as ln  # noqa: E402


@pytest.mark.parametrize("dtype", [DType.f16, DType.f32])
@pytest.mark.parametrize("cfg,div16", [
    (dict(BLOCK_N=4096, ROWS_PER_PROGRAM=1, NUM_WARPS=8), True),
    (dict(BLOCK_N=1024, ROWS_PER_PROGRAM=2, NUM_WARPS=4), False),     # N = 1000: the runtime-aligned path
])
def test_layernorm_compiles_to_16_byte_accesses(dtype, cfg, div16):
    ptr = PointerArg(dtype)
    ints = [ScalarArg(DType.i32, 16 if div16 else 1)] * 4
    ck = ln.layernorm_kernel.compile(ptr, ptr, ptr, ptr, *ints, ScalarArg(DType.f32), arch="sm90",
                                     num_warps=cfg["NUM_WARPS"], **cfg)
    ops = sass_instructions(ck.sass())
    assert ck.spills == 0
    assert ops.get("LDG.E.128", 0) >= 3 and ops.get("STG.E.128", 0) >= 1, sorted(ops.items())   # x, w, b; y
    if div16:
        assert ops["LDG.E"] == ops["LDG.E.128"] and ops["STG.E"] == ops["STG.E.128"], sorted(ops.items())


def test_default_configs_are_legal_layouts():
    for n_rows, n_cols, elem in ((8192, 4096, 2), (4096, 1000, 2), (1000, 37, 4), (7, 16384, 2)):
        cfg = ln.default_config(n_rows, n_cols, elem, (n_cols * elem) % 16 == 0)
        assert cfg["BLOCK_N"] >= n_cols
        Layout.rows(cfg["ROWS_PER_PROGRAM"], cfg["BLOCK_N"], cfg["VEC"], cfg["NUM_WARPS"])
    with pytest.raises(ValueError, match="over 16384"):
        ln.default_config(8, 20000, 2)


def test_bad_input_is_one_clear_error():
    torch = pytest.importorskip("torch")
    x = torch.zeros(4, 10)
    with pytest.raises(ValueError, match=r"bias is \(9,\), expected \(10,\)"):
        ln.layer_norm(x, torch.ones(10), torch.zeros(9))
    with pytest.raises(ValueError, match=r"weight is \(10, 1\)"):
        ln.layer_norm(x, torch.ones(10, 1), torch.zeros(10))
    with pytest.raises(ValueError, match="BLOCK_N=8 is smaller than the row"):
        ln.launch_plan(x, torch.ones(10), torch.zeros(10), torch.zeros_like(x), 1e-5, BLOCK_N=8)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("m,n", [(6, 96), (3, 33), (5, 100), (40, 64)])
def test_interpreted_layernorm_matches_torch(interpret_env, dtype, m, n):
    torch = pytest.importorskip("torch")
    dt = getattr(torch, dtype)
    x = (torch.randn(m, n) + 3.0).to(dt)
    w, b = (torch.rand(n) + 0.5).to(dt), torch.randn(n).to(dt)
    out = torch.full_like(x, float("nan"))
    ln.layer_norm(x, w, b, 1e-5, out)
    tol = 1e-5 if dt == torch.float32 else 1.6e-2
    torch.testing.assert_close(out.float(), ln.reference(x, w, b), atol=tol, rtol=tol)


def test_the_script_compiles_and_prints_its_sass_summary_without_a_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("with a GPU the script checks against torch and benchmarks instead")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "layernorm_kernel.py")], capture_output=True,
                         text=True, check=True, env=dict(os.environ, PYTHONPATH=ROOT)).stdout
    lines = out.splitlines()
    sass, interp = lines[:9], lines[9:]
    assert all("spills=0" in ln and "'LDG.E.128'" in ln for ln in sass), out
    # then the fallback: small cases checked in the CPU interpreter
    assert len(interp) == 3 and all(ln.startswith("interpreted on the CPU") and ": ok" in ln for ln in interp), out


def _rel_err(out, ref) -> float:
    assert not out.isnan().any(), "some output elements were not written"
    return ((out.float() - ref).norm() / ref.norm()).item()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("shape,tunables", [
    ((256, 4096), {}), ((64, 8192), {}), ((333, 1000), {}), ((1000, 37), {}), ((77, 4095), {}), ((1, 1), {}),
    ((333, 1000), dict(ROWS_PER_PROGRAM=8, NUM_WARPS=8)), ((77, 4095), dict(VEC=1)),
])
def test_gpu_layernorm_matches_torch(dtype, shape, tunables):
    import torch
    dt = getattr(torch, dtype)
    x = (torch.randn(shape, device="cuda") + 3.0).to(dt)
    w = (torch.rand(shape[1], device="cuda") + 0.5).to(dt)
    b = torch.randn(shape[1], device="cuda").to(dt)
    out = torch.full_like(x, float("nan"))
    ln.layer_norm(x, w, b, 1e-5, out, **tunables)
    torch.cuda.synchronize()
    ref = ln.reference(x, w, b)
    if shape[1] == 1:                                  # one element a row: y = b exactly
        assert torch.equal(out.float(), ref)
    else:
        assert _rel_err(out, ref) < (1e-5 if dt == torch.float32 else 1e-2)


@pytest.mark.gpu
def test_gpu_layernorm_of_a_strided_3d_view():
    import torch
    base = torch.randn(4, 50, 1100, device="cuda", dtype=torch.bfloat16)
    x = base[..., 3:1003]                              # rows 1100 apart, unaligned starts
    w = torch.rand(1000, device="cuda", dtype=torch.bfloat16) + 0.5
    b = torch.randn(1000, device="cuda", dtype=torch.bfloat16)
    out = ln.layer_norm(x, w, b)
    torch.cuda.synchronize()
    assert out.shape == x.shape
    assert _rel_err(out, ln.reference(x, w, b)) < 1e-2


def test_a_row_too_long_is_one_line_that_names_no_other_kernel():
    import layernorm_kernel as ln
    with pytest.raises(ValueError) as e:
        ln.default_config(4, 17000, 2)
    assert "N=17000 is over 16384" in str(e.value) and "rmsnorm" not in str(e.value)
