"""DSL kernels all the way to machine code, for every supported target, without a GPU."""
import os
import subprocess
import sys
import textwrap

import pytest

from gluon import DType, TensorRef
from gluon.backend.machine_code import sass_instructions
from gluon.kernels.gemm_tile_sm90 import gemm_tile_sm90
from gluon.kernels.tile_dots import mfma_tile_cdna3, mma_tile_sm80, tcgen05_tile_sm100
from gluon.language import PointerArg, ScalarArg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
from copy_kernel import copy_kernel, copy_kernel_explicit, copy_kernel_persistent  # noqa: E402

PTR = PointerArg(DType.f32)


@pytest.mark.parametrize("kernel,kw", [
    (copy_kernel, dict(block=(1024,), XBLOCK=1024)),
    (copy_kernel_explicit, dict(XBLOCK=1024, VEC=4, NUM_WARPS=4)),
    (copy_kernel_persistent, dict(block=(4096,), XBLOCK=4096)),
])
def test_copy_kernels_vectorize_to_16_bytes_on_sm90(kernel, kw):
    ck = kernel.compile(PTR, PTR, ScalarArg(DType.i32, 16), arch="sm90", **kw)
    ops = sass_instructions(ck.sass())
    assert ops["LDG.E.128"] >= 1 and ops["STG.E.128"] >= 1
    assert ops["LDG.E"] == ops["LDG.E.128"] and ops["STG.E"] == ops["STG.E.128"]   # nothing narrower
    assert ck.spills == 0


def _gemm_refs(dtype=DType.f16, out=DType.f16):
    return (TensorRef("A", dtype, shape=("M", "K")), TensorRef("B", dtype, shape=("K", "N")),
            TensorRef("C", out, shape=("M", "N")), DType.i32)


@pytest.mark.parametrize("dtype,out", [(DType.f16, DType.f16), (DType.bf16, DType.bf16), (DType.f16, DType.f32)])
def test_tma_wgmma_tile_has_hgmma_and_utmaldg(dtype, out):
    ck = gemm_tile_sm90.compile(*_gemm_refs(dtype, out))
    ops = sass_instructions(ck.sass())
    assert ops["HGMMA.64x128x16.F32"] >= 4 and ops["UTMALDG.2D"] >= 2 and ops["UTMASTG.2D"] >= 1
    assert ck.spills == 0 and ck.registers <= 255
    assert ck.kernel.attrs["smem_bytes"] <= 227 * 1024


def _tile_refs():
    return (TensorRef("A", DType.f16, shape=(64, 32)), TensorRef("B", DType.f16, shape=(32, 64)),
            TensorRef("C", DType.f32, shape=(64, 64)))


def test_cp_async_mma_tile_on_sm80():
    ops = sass_instructions(mma_tile_sm80.compile(*_tile_refs()).sass())
    assert ops["LDGSTS.E.BYPASS.128"] >= 1 and ops["HMMA.16816.F32"] >= 1 and ops["LDSM"] >= 1


def test_mfma_tile_on_gfx942():
    ck = mfma_tile_cdna3.compile(*_tile_refs())
    assert "v_mfma_f32_32x32x8" in ck.asm["amdgcn"]
    assert ck.binary.target[0] == "hip" and "hsaco" in ck.asm


def test_tcgen05_tile_on_sm100():
    refs = (TensorRef("A", DType.f16, shape=(128, 64)), TensorRef("B", DType.f16, shape=(64, 128)),
            TensorRef("C", DType.f32, shape=(128, 128)))
    ck = tcgen05_tile_sm100.compile(*refs)
    ops = sass_instructions(ck.sass())
    assert ops["UTCHMMA"] >= 1 and ops["LDTM"] >= 1
    # tensor memory is read in its own message layout: the one conversion left is for the global store
    assert ck.ttgir.count("ttg.convert_layout") == 1


def test_artifacts_are_exposed():
    ck = copy_kernel.compile(PTR, PTR, ScalarArg(DType.i32, 16), arch="sm90", block=(1024,), XBLOCK=1024)
    assert "tt.func public @copy_kernel" in ck.ttgir and "ttg.target = \"cuda:90\"" in ck.ttgir
    assert "define" in ck.asm["llir"] and ".target sm_90" in ck.asm["ptx"] and isinstance(ck.asm["cubin"], bytes)
    assert "LDG" in ck.sass() and ck.registers > 0 and ck.shared_bytes >= 0


def test_another_process_reuses_the_disk_cache(tmp_path):
    """The second process traces and lowers again (cheap) but never calls triton.compile."""
    script = textwrap.dedent(f"""
        import sys, json
        sys.path.insert(0, {os.path.join(ROOT, 'examples')!r})
        import triton, triton.compiler.compiler as cc
        calls = []
        real = triton.compile
        def spy(*a, **k):
            calls.append(1)
            return real(*a, **k)
        triton.compile = cc.compile = spy
        import os
        os.environ["GLUON_COMPILE_ISOLATION"] = "inprocess"
        from gluon import DType
        from gluon.language import PointerArg, ScalarArg
        from copy_kernel import copy_kernel
        ck = copy_kernel.compile(PointerArg(DType.f32), PointerArg(DType.f32), ScalarArg(DType.i32, 16),
                                 arch="sm90", block=(1024,), XBLOCK=1024)
        print(json.dumps({{"calls": len(calls), "path": str(ck.binary.path)}}))
    """)
    env = dict(os.environ, GLUON_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    import json
    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert first["calls"] == 1 and second["calls"] == 0
    assert first["path"] == second["path"]
