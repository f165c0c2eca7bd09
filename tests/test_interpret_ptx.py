"""The interpreter on gl.nvidia.ptx's templates (gluon/interpret/ptx.py): fences run as no-ops (so the GEMM's
in-kernel split-K fix-up interprets, bit for bit the two-pass sum, as on the GPU), the approximate math as
exact fp32 with subnormals flushed, timers as host counters; elect_one and any other assembly are refused
at their line; and the seed's implicit-style Quick Start GEMM, whose ring the pipeline pass builds. CPU only."""
import numpy as np
import pytest

import gluon
import gluon.language as gl
from gluon import GluonError

torch = pytest.importorskip("torch")


@gluon.jit
def _math_kernel(out_ptr, x_ptr, WHICH: gl.constexpr, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK)
    x = gl.load(x_ptr + offs)
    if WHICH == "ex2":
        y = gl.nvidia.ptx.ex2_approx(x)
    elif WHICH == "rcp":
        y = gl.nvidia.ptx.rcp_approx(x)
    elif WHICH == "rsqrt":
        y = gl.nvidia.ptx.rsqrt_approx(x)
    elif WHICH == "tanh":
        y = gl.nvidia.ptx.tanh_approx(x)
    else:
        y = gl.nvidia.ptx.cvt_rn_bf16x2(x).to(gl.float32)
    gl.store(out_ptr + offs, y)


@pytest.mark.parametrize("which,ref", [
    ("ex2", torch.exp2), ("rcp", torch.reciprocal), ("rsqrt", torch.rsqrt), ("tanh", torch.tanh),
    ("cvt", lambda x: x.to(torch.bfloat16).float()),
])
def test_the_math_templates_match_torch(which, ref):
    x = torch.rand(256) * 8 + 0.01
    out = torch.full_like(x, float("nan"))
    _math_kernel.interpret((1,), out, x, WHICH=which, BLOCK=256)
    assert torch.allclose(out, ref(x), rtol=1e-6, atol=0), which


def test_subnormals_are_flushed_as_ftz_does():
    x = torch.tensor([1e-40, -1e-40, 2.0, -130.0] + [1.0] * 28)
    out = torch.full_like(x, float("nan"))
    _math_kernel.interpret((1,), out, x, WHICH="ex2", BLOCK=32)
    assert out[0] == 1.0 and out[1] == 1.0 and out[2] == 4.0 and out[3] == 0.0     # 2**-130 is subnormal


@gluon.jit
def _timer_kernel(out_ptr, BLOCK: gl.constexpr):
    t0 = gl.nvidia.ptx.globaltimer()
    c0 = gl.nvidia.ptx.clock()
    gl.nvidia.ptx.fence("sc", "gpu")
    c1 = gl.nvidia.ptx.clock()
    t1 = gl.nvidia.ptx.globaltimer()
    offs = gl.arange(0, BLOCK)
    gl.store(out_ptr + offs, gl.where(offs == 0, (t1 - t0).to(gl.int64), (c1 - c0).to(gl.int64)))


def test_timers_count_up_and_fences_pass():
    out = torch.full((2,), -1, dtype=torch.int64)
    _timer_kernel.interpret((1,), out, BLOCK=2)
    assert out[0] >= 0 and out[1] >= 1


@gluon.jit
def _elect_kernel(out_ptr):
    e = gl.nvidia.ptx.elect_one()
    gl.store(out_ptr, e)


def test_elect_one_is_refused_at_its_line():
    with pytest.raises(GluonError, match="cannot run inline assembly") as info:
        _elect_kernel.interpret((1,), torch.zeros(1, dtype=torch.int32))
    assert "elect_one()" in str(info.value)


@pytest.mark.parametrize("M,N,K,splits", [(64, 128, 512, 4), (100, 72, 640, 3)])
def test_the_split_k_fixup_interprets_bit_for_bit_as_the_two_pass_sum(M, N, K, splits):
    from gluon.interpret import set_enabled
    from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, launch
    fixup = DEFAULT_CONFIG.replace(BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1, STAGES=8, SPLITK_FIXUP=True)
    a, b = torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)
    outs = []
    was = set_enabled(True)
    try:
        for cfg in (fixup, fixup.replace(SPLITK_FIXUP=False)):
            c = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
            launch(a, b, c, cfg, splits=splits)
            outs.append(c)
    finally:
        set_enabled(was)
    ref = a.double() @ b.double()
    assert float((outs[0].double() - ref).norm() / ref.norm()) < 1e-2
    assert torch.equal(outs[0], outs[1])
    assert np.isfinite(outs[0].float().numpy()).all()


@pytest.mark.parametrize("M,N,K", [(256, 256, 192), (200, 264, 72)])
def test_the_implicit_style_quickstart_gemm_interprets(M, N, K):
    """examples/quickstart_gemm.py (no waits: the pipeline pass builds its ring) in the interpreter: the
    pass runs before it, as before compiling, and the product matches torch."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import quickstart_gemm as q
    from gluon.interpret import set_enabled
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    c = torch.full((M, N), float("nan"), dtype=torch.float16)
    was = set_enabled(True)
    try:
        q.gemm(a, b, c)
    finally:
        set_enabled(was)
    ref = a.float() @ b.float()
    assert not torch.isnan(c).any() and float((c.float() - ref).norm() / ref.norm()) < 1e-2
