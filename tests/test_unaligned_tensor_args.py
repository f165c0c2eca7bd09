"""A tensor argument whose base is not 16-byte aligned is traced as such (TensorRef.aligned=False: no
tt.divisibility = 16 on its pointer), so the binary a launch compiles for it takes it: every such launch was
refused by the launcher ("specialized for a 16-byte aligned pointer"), e.g. gemm_sm90.launch of a C view at an
odd base, which the GEMM stores by address."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_launch_stand_in_of_an_unaligned_tensor_is_unaligned():
    import gluon.language as gl
    from gluon import SM90, kernel
    from gluon.jit import stand_in
    from gluon.types import DType

    @kernel(arch=SM90, num_warps=4)
    def fill(X, Y):
        X[gl.arange(0, 128)] = gl.load(Y + gl.arange(0, 128))

    aligned = stand_in(fill, "Y", ("t", torch.float32, True, 1), DType.f32)
    odd = stand_in(fill, "X", ("t", torch.float32, False, 1), DType.f32)
    assert aligned.aligned and not odd.aligned
    div = {p.name: p.divisibility for p in fill.trace(odd, aligned).kernel.params}
    assert div["X"] == 1 and div["Y"] == 16


_REPRO = """
import sys
sys.path.insert(0, ROOT)
from bench import host_python
host_python._cases()            # the no-launch backend, an H200's arch and SM count on device 0
import torch
from gluon.kernels.gemm_sm90 import launch
M, N, K = 1000, 3000, 777
a, b = torch.randn(M, K).bfloat16(), torch.randn(K, N).bfloat16()
launch(a, b, torch.empty(M, N).bfloat16())
big = torch.empty(M * N + 8, dtype=torch.bfloat16)
c = big[1:1 + M * N].view(M, N)
assert c.data_ptr() % 16 == 2
launch(a, b, c)
launch(a, b, c)                 # the repeat's fast path too
print("launched")
"""


def test_gemm_launch_of_a_c_at_an_odd_base_after_an_aligned_one():
    """The GPU test's failing order (tests/test_gemm_small_m_gpu.py), with a backend that launches nothing (in a
    subprocess: bench/host_python.py's setup patches process globals): an aligned C's call first, then a C view
    2 bytes past an aligned base (stored by address): the second compiles its own binary for the unaligned C
    and the launcher takes it."""
    import subprocess
    r = subprocess.run([sys.executable, "-c", f"ROOT = {ROOT!r}\n" + _REPRO], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    assert r.returncode == 0 and "launched" in r.stdout, r.stderr[-3000:]
