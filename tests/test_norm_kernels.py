"""The softmax, RMSNorm and SwiGLU example kernels: compiled for sm_90 without a GPU (no spills, 16-byte
global accesses in the SASS; the scripts then check small cases in the CPU interpreter), and checked
against torch on a GPU (`-m gpu`)."""
import os
import subprocess
import sys

import pytest

from gluon import DType, GluonError, Layout
from gluon.backend.machine_code import sass_instructions
from gluon.language import PointerArg, ScalarArg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import elementwise_kernel as ew  # noqa: E402
import rmsnorm_kernel as rn  # noqa: E402
import softmax_kernel as sm  # noqa: E402

F32 = ScalarArg(DType.f32)


def _ints(n: int, div16: bool) -> list:
    """n i32 stand-ins: divisible by 16 (what the launcher sees for N = 4096) or not (N = 1000)."""
    return [ScalarArg(DType.i32, 16 if div16 else 1)] * n


def _global_accesses(ck) -> dict:
    ops = sass_instructions(ck.sass())
    return {k: ops[k] for k in ("LDG.E", "LDG.E.128", "STG.E", "STG.E.128")}


def _assert_vectorized(ck, only_128: bool) -> None:
    """16-byte loads and stores in the SASS, no spills; `only_128`: nothing narrower either (every
    size divisible by 16 leaves one path, the aligned one)."""
    g = _global_accesses(ck)
    assert ck.spills == 0, f"{ck.spills} bytes of spills"
    assert g["LDG.E.128"] >= 1 and g["STG.E.128"] >= 1, g
    if only_128:
        assert g["LDG.E"] == g["LDG.E.128"] and g["STG.E"] == g["STG.E.128"], g


@pytest.mark.parametrize("dtype", [DType.f16, DType.bf16, DType.f32])
@pytest.mark.parametrize("cfg,div16", [
    (dict(BLOCK_N=4096, ROWS_PER_PROGRAM=1, NUM_WARPS=8), True),      # N = 4096
    (dict(BLOCK_N=1024, ROWS_PER_PROGRAM=2, NUM_WARPS=4), False),     # N = 1000: the runtime-aligned path
    (dict(BLOCK_N=2048, ROWS_PER_PROGRAM=1, NUM_WARPS=8, LOOPED=True), True),
])
def test_softmax_compiles_to_16_byte_accesses(dtype, cfg, div16):
    ck = sm.softmax_kernel.compile(PointerArg(dtype), PointerArg(dtype), *_ints(4, div16), arch="sm90",
                                   num_warps=cfg["NUM_WARPS"], **cfg)
    _assert_vectorized(ck, only_128=div16)


def test_softmax_unaligned_rows_load_16_bytes_through_the_window():
    """N = 8195 (odd) with VEC=8: the aligned-window path loads 16-byte vectors (stores are element-wide
    there); the default for such rows is VEC=1, which measured faster (default_config says why)."""
    cfg = dict(BLOCK_N=16384, ROWS_PER_PROGRAM=1, NUM_WARPS=16, VEC=8)
    ck = sm.softmax_kernel.compile(PointerArg(DType.f16), PointerArg(DType.f16), *_ints(4, False), arch="sm90",
                                   num_warps=16, **cfg)
    assert ck.spills == 0
    assert _global_accesses(ck)["LDG.E.128"] >= 2        # the aligned path's and the window's
    assert sm.default_config(1024, 8195, 2, aligned=False)["VEC"] == 1


@pytest.mark.parametrize("dtype", [DType.f16, DType.bf16, DType.f32])
@pytest.mark.parametrize("cfg,div16", [
    (dict(BLOCK_N=4096, ROWS_PER_PROGRAM=1, NUM_WARPS=8), True),
    (dict(BLOCK_N=8192, ROWS_PER_PROGRAM=1, NUM_WARPS=16), True),
    (dict(BLOCK_N=1024, ROWS_PER_PROGRAM=2, NUM_WARPS=8), False),
])
def test_rmsnorm_compiles_to_16_byte_accesses(dtype, cfg, div16):
    ptr = PointerArg(dtype)
    ck = rn.rmsnorm_kernel.compile(ptr, ptr, ptr, *_ints(4, div16), F32, arch="sm90", num_warps=cfg["NUM_WARPS"], **cfg)
    _assert_vectorized(ck, only_128=div16)


@pytest.mark.parametrize("dtype", [DType.f16, DType.bf16, DType.f32])
@pytest.mark.parametrize("block,warps,div16", [(2048, 4, True), (4096, 8, False)])
def test_swiglu_compiles_to_16_byte_accesses(dtype, block, warps, div16):
    ptr = PointerArg(dtype)
    ck = ew.swiglu_kernel.compile(ptr, ptr, ptr, *_ints(1, div16), arch="sm90", num_warps=warps, BLOCK=block,
                                  NUM_WARPS=warps)
    _assert_vectorized(ck, only_128=div16)


def test_row_layout_refuses_tiles_smaller_than_the_threads():
    Layout.rows(4, 1024, 8, 4)                        # a row per warp
    with pytest.raises(GluonError, match="smaller than"):
        Layout.rows(1, 256, 8, 4)                     # 4 warps of 8-element vectors span 1024 columns
    with pytest.raises(GluonError, match="power of two"):
        Layout.rows(3, 1024, 8, 4)


@pytest.mark.parametrize("n_rows,n_cols,elem", [(8192, 4096, 2), (4096, 1000, 2), (32768, 1024, 4), (1000, 37, 4),
                                                 (7, 16384, 2), (1024, 8195, 4)])
def test_default_configs_are_legal_layouts(n_rows, n_cols, elem):
    aligned = (n_cols * elem) % 16 == 0
    for cfg in (sm.default_config(n_rows, n_cols, elem, aligned), rn.default_config(n_rows, n_cols, elem, aligned)):
        assert cfg["BLOCK_N"] >= n_cols
        Layout.rows(cfg["ROWS_PER_PROGRAM"], cfg["BLOCK_N"], cfg["VEC"], cfg["NUM_WARPS"])
    assert sm.default_config(64, 40000, 2)["LOOPED"]


def test_swiglu_refuses_a_block_the_warps_do_not_tile():
    ptr = PointerArg(DType.f16)
    with pytest.raises(GluonError, match="multiple of"):
        ew.swiglu_kernel.trace(ptr, ptr, ptr, *_ints(1, True), arch="sm90", BLOCK=512, NUM_WARPS=4)


@pytest.mark.parametrize("script,n_sass", [("softmax_kernel.py", 9), ("rmsnorm_kernel.py", 9),
                                           ("elementwise_kernel.py", 6)])
def test_the_scripts_compile_print_their_sass_summary_and_interpret_small_cases_without_a_gpu(script, n_sass):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("with a GPU the script checks against torch and benchmarks instead")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script)], capture_output=True,
                         text=True, check=True, env=dict(os.environ, PYTHONPATH=ROOT)).stdout
    lines = out.splitlines()
    sass, interp = lines[:n_sass], lines[n_sass:]
    assert all("spills=0" in ln and "'STG.E'" in ln for ln in sass), out
    # then the fallback: small cases checked in the CPU interpreter
    assert len(interp) == 3 and all(ln.startswith("interpreted on the CPU") and ": ok" in ln for ln in interp), out


# ------------------------------------------------------------------------------ on the GPU


def _rel_err(out, ref) -> float:
    assert not out.isnan().any(), "some output elements were not written"
    return ((out.float() - ref).norm() / ref.norm()).item()


def _tol(dtype) -> float:
    import torch
    return 1e-5 if dtype == torch.float32 else 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("shape,tunables", [
    ((256, 4096), {}), ((333, 1000), {}), ((1000, 37), {}), ((129, 8195), {}), ((16, 40000), {}),
    ((333, 1000), dict(ROWS_PER_PROGRAM=8, NUM_WARPS=8)), ((100, 3000), dict(BLOCK_N=1024, NUM_WARPS=4, LOOPED=True)),
    ((100, 3001), dict(BLOCK_N=1024, NUM_WARPS=4, LOOPED=True)), ((129, 8195), dict(BLOCK_N=2048, NUM_WARPS=8, LOOPED=True)),
    ((129, 8195), dict(VEC=1)),
])
def test_softmax_matches_torch(dtype, shape, tunables):
    import torch
    dt = getattr(torch, dtype)
    x = torch.randn(shape, device="cuda", dtype=dt) * 4
    out = torch.full_like(x, float("nan"))
    sm.softmax(x, out, **tunables)
    assert _rel_err(out, torch.softmax(x.float(), -1)) < _tol(dt)


@pytest.mark.parametrize("tunables", [dict(BLOCK_N=16384, NUM_WARPS=16, VEC=8),
                                      dict(BLOCK_N=2048, NUM_WARPS=8, VEC=8, LOOPED=True)])
def test_unaligned_rows_read_through_the_window_up_to_the_allocations_end(interpret_env, tunables):
    """In the CPU interpreter: 3 x 8195 bf16 end 2 bytes into a 16-byte segment, and the last row's window
    reads that segment's rest (legal on the GPU; the interpreter reads it as NaN, which the row's mask drops)."""
    import torch
    x = torch.randn(3, 8195).bfloat16() * 4
    out = torch.full_like(x, float("nan"))
    sm.softmax(x, out, **tunables)
    assert _rel_err(out, torch.softmax(x.float(), -1)) < 1e-2


@pytest.mark.gpu
def test_softmax_strided_and_unaligned_views():
    """Row strides other than N, a base pointer off 16 bytes, and an output that is a slice of another."""
    import torch
    big = torch.randn(300, 1100, device="cuda", dtype=torch.float16) * 4
    for x in (big[:, :1000], big[:, 3:1003], big[1:, 1:8]):
        out_big = torch.full((x.shape[0], x.shape[1] + 24), float("nan"), device="cuda", dtype=x.dtype)
        out = out_big[:, 8:8 + x.shape[1]]
        sm.softmax(x, out)
        assert _rel_err(out, torch.softmax(x.float(), -1)) < 1e-2
        assert out_big[:, :8].isnan().all() and out_big[:, 8 + x.shape[1]:].isnan().all()   # nothing else written


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("shape,tunables", [
    ((256, 4096), {}), ((64, 8192), {}), ((333, 1000), {}), ((1000, 37), {}), ((77, 4095), {}),
    ((333, 1000), dict(ROWS_PER_PROGRAM=8, NUM_WARPS=8)), ((77, 4095), dict(VEC=1)),
])
def test_rmsnorm_matches_torch(dtype, shape, tunables):
    import torch
    dt = getattr(torch, dtype)
    x = torch.randn(shape, device="cuda", dtype=dt)
    w = (torch.rand(shape[1], device="cuda") + 0.5).to(dt)
    out = torch.full_like(x, float("nan"))
    rn.rms_norm(x, w, 1e-6, out, **tunables)
    assert _rel_err(out, rn.reference(x, w, 1e-6)) < _tol(dt)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("n,tunables", [
    (1 << 20, {}), ((1 << 20) + 3, {}), (1000, {}), (5, {}), ((1 << 20) + 8, dict(BLOCK=8192, NUM_WARPS=8)),
    ((1 << 20) + 3, dict(EVICT="evict_first")),
])
def test_swiglu_matches_torch(dtype, n, tunables):
    import torch
    dt = getattr(torch, dtype)
    a = (torch.randn(n, device="cuda") * 3).to(dt)
    b = torch.randn(n, device="cuda").to(dt)
    out = torch.full_like(a, float("nan"))
    ew.swiglu(a, b, out, **tunables)
    assert _rel_err(out, ew.reference(a, b)) < _tol(dt)
