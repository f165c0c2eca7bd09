"""The interpreter's data path (gluon/interpret/smem.py, tma.py, dots.py; docs/INTERPRETER.md): shared regions
with stages, transposed and reinterpreted views; TMA loads and stores over edges that are not multiples of
the box (zero fill, clipping, negative coordinates); cp.async with a mask; wgmma with A from shared memory
and from registers, mma, mfma, tcgen05; the shipped tile GEMM, timed. Each against torch. CPU only."""
import time

import numpy as np
import pytest
import torch

import gluon
import gluon.language as gl
from gluon import GluonError
from gluon.arch import SM80, SM90
from gluon.interpret.ops import RULES
from gluon.language.memory import smem
from gluon.language.nvidia.ampere import cp_async, cp_async_commit, cp_async_wait
from gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma_load, tma_store, tma_store_wait, wgmma,
                                          wgmma_wait)
from gluon.types import DType, Layout, SwizzleMode

NAN = float("nan")


def _bf16(*shape):
    return torch.randn(*shape).bfloat16()


# ------------------------------------------------------------------------------ shared memory


@gluon.kernel(arch=SM90, num_warps=4)
def _stages_kernel(X, Y, Z, BM: gl.constexpr, BN: gl.constexpr):
    r = gl.arange(0, BM)
    c = gl.arange(0, BN)
    x = X[r[:, None] * BN + c[None, :]]
    ring = smem(X.dtype, Layout.swizzled(BM, BN), name="ring", stages=3)
    for s in gl.static_range(3):
        ring[s].store(x + s * 1.0)
    y = ring[2].T.load()                                   # the transposed view of stage 2
    Y[c[:, None] * BM + r[None, :]] = y
    init = smem(X.dtype, Layout.swizzled(BM, BN), name="init", value=x * 2.0)
    Z[r[:, None] * BN + c[None, :]] = init.load() + ring[1].load()


def test_stages_transposed_views_and_an_initial_value():
    x = _bf16(64, 128)
    y, z = torch.full((128, 64), NAN).bfloat16(), torch.full((64, 128), NAN).bfloat16()
    _stages_kernel.interpret((1,), x, y, z, BM=64, BN=128)
    xf = x.float()
    assert torch.equal(y.float(), (xf + 2).bfloat16().float().T)
    assert torch.equal(z.float(), ((xf * 2).bfloat16().float() + (xf + 1).bfloat16().float()).bfloat16().float())


@gluon.kernel(arch=SM90, num_warps=4)
def _reinterpret_kernel(X, P, W, Q):
    r = gl.arange(0, 64)
    c = gl.arange(0, 128)
    ring = smem(gl.bfloat16, Layout.swizzled(64, 128), name="ring", stages=2)
    x = X[r[:, None] * 128 + c[None, :]]
    ring[0].store(x + 1.0)
    ring[1].store(x)
    parts = ring.reinterpret((64, 64), stages=4)            # each stage's two 128-byte column chunks
    h = gl.arange(0, 64)
    for i in gl.static_range(4):
        P[i * 4096 + r[:, None] * 64 + h[None, :]] = parts[i].load()
    wide = ring.reinterpret((64, 64), stages=2, dtype=gl.float32)   # stage 0's bytes as an f32 tile ...
    wide[0].store(W[r[:, None] * 64 + h[None, :]])
    as16 = ring[0]                                          # ... read back as the bf16 stage
    Q[r[:, None] * 128 + c[None, :]] = as16.load()


def test_reinterpreted_views_see_the_bytes_other_views_wrote():
    x = _bf16(64, 128)
    w = torch.randn(64, 64)
    p = torch.full((4, 64, 64), NAN).bfloat16()
    q = torch.full((64, 128), NAN).bfloat16()
    _reinterpret_kernel.interpret((1,), x, p, w, q)
    assert torch.equal(p[2], x[:, :64]) and torch.equal(p[3], x[:, 64:])    # stage 1 = parts 2 and 3
    x1 = (x.float() + 1).bfloat16()
    assert torch.equal(p[0], x1[:, :64]) and torch.equal(p[1], x1[:, 64:])
    # both are stored as two 128-byte column chunks of 64 rows (32 f32 or 64 bf16 elements wide), chunk 0 first
    phys = np.stack([w.numpy()[:, :32], w.numpy()[:, 32:]]).reshape(-1).view(np.uint16).reshape(2, 64, 64)
    want = np.concatenate([phys[0], phys[1]], axis=1)
    got = q.view(torch.int16).numpy().view(np.uint16)
    nan = (want & 0x7F80 == 0x7F80) & (want & 0x7F != 0)   # a NaN's payload does not survive the registers
    assert np.array_equal(got[~nan], want[~nan]) and q.isnan().numpy()[nan].all()


@gluon.kernel(arch=SM90, num_warps=4)
def _unwritten_kernel(Y):
    r = gl.arange(0, 32)
    s = smem(gl.float32, Layout.shared(), shape=(32,), name="s")
    Y[r] = s.load()


def test_an_unwritten_region_reads_as_zeros_without_a_tracker():
    from gluon.interpret.shared import SmemRegion, SmemView
    v = SmemView(SmemRegion("s", DType.bf16, (8, 64), 2, layout=Layout.swizzled(8, 64)))
    assert not v.written_mask().any() and np.array_equal(v.index(1).read(), np.zeros((8, 64), np.float32))
    with pytest.raises(GluonError, match="before anything was written"):   # the hazard tracker's report
        _unwritten_kernel.interpret((1,), torch.full((32,), NAN))


# ------------------------------------------------------------------------------ TMA


@gluon.kernel(arch=SM90, num_warps=4)
def _tma_copy_kernel(X, Y, SHIFT, BM: gl.constexpr, BN: gl.constexpr):
    s = smem(X.dtype, Layout.swizzled(BM, BN), name="s")
    bar = mbarrier(count=1, name="bar")
    bar.expect(s.nbytes)                                   # the full box, whatever part lies outside X
    om = gl.program_id(0) * BM - SHIFT
    on = gl.program_id(1) * BN - SHIFT
    tma_load(s, X, (om, on), bar)
    bar.wait(0)
    s.store(s.load() + 1.0)
    fence_async_shared()
    tma_store(Y, (om, on), s)
    tma_store_wait(0)


@pytest.mark.parametrize("shift", [0, 8, 3])          # tiles at -shift: negative coordinates
def test_tma_edges_zero_fill_and_clip(shift):
    torch.manual_seed(1)
    x = torch.randn(100, 72).half()
    big = torch.full((136, 88), NAN).half()               # Y is a view into it: nothing outside Y is written
    y = big[:100, :72]
    grid = (gl.cdiv(100 + max(shift, 0), 64) + 1, gl.cdiv(72 + max(shift, 0), 64) + 1)
    _tma_copy_kernel.interpret(grid, x, y, shift, BM=64, BN=64)
    assert torch.equal(y, x + 1)
    assert big[100:].isnan().all() and big[:, 72:].isnan().all()


@gluon.kernel(arch=SM90, num_warps=4)
def _tma_pad_kernel(X, Y, BM: gl.constexpr, BN: gl.constexpr):
    s = smem(X.dtype, Layout.swizzled(BM, BN), name="s")
    bar = mbarrier(count=1, name="bar")
    bar.expect(s.nbytes)
    tma_load(s, X, (-4, 60), bar)
    bar.wait(0)
    r = gl.arange(0, BM)
    c = gl.arange(0, BN)
    Y[r[:, None] * BN + c[None, :]] = s.load()


def test_tma_load_fill_and_descriptor_arguments():
    from gluon.runtime.descriptors import make_tensor_descriptor
    x = torch.randn(40, 72).float()
    want = torch.zeros(32, 32)
    want[4:, :12] = x[:28, 60:]
    y = torch.full((32, 32), NAN)
    _tma_pad_kernel.interpret((1,), x, y, BM=32, BN=32)    # the tensor itself, as the launcher takes it
    assert torch.equal(y, want)
    d = make_tensor_descriptor(x, (32, 32), 128, padding="nan")
    _tma_pad_kernel.interpret((1,), d, y, BM=32, BN=32)    # a TensorDescriptor: its padding fills
    assert torch.equal(y[4:, :12], x[:28, 60:]) and y[:4].isnan().all() and y[:, 12:].isnan().all()
    with pytest.raises(GluonError, match="16 bytes"):
        _tma_pad_kernel.interpret((1,), torch.randn(40, 75)[:, :73], y, BM=32, BN=32)


# ------------------------------------------------------------------------------ cp.async


@gluon.kernel(arch=SM80, num_warps=4)
def _cp_async_kernel(A, C, n, BM: gl.constexpr):
    r = gl.arange(0, BM)
    a_s = smem(gl.float32, Layout.shared(order=(0,)), shape=(BM,), name="a", stages=2)
    cp_async(a_s[1], A + r, mask=r < n)
    cp_async_commit()
    cp_async(a_s[0], A + (r + BM), mask=r + BM < n)
    cp_async_commit()
    cp_async_wait(0)
    C[r] = a_s[1].load() * 2.0
    C[r + BM] = a_s[0].load() * 2.0


def test_cp_async_with_a_mask_zero_fills():
    a = torch.randn(200)
    c = torch.full((256,), NAN)
    _cp_async_kernel.interpret((1,), a, c, 200, BM=128)
    assert torch.equal(c[:200], a * 2) and torch.equal(c[200:], torch.zeros(56))


# ------------------------------------------------------------------------------ dots


@gluon.kernel(arch=SM90, num_warps=4)
def _wgmma_kernel(A, B, C, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, A_REGS: gl.constexpr,
                  ACC: gl.constexpr):
    rm = gl.arange(0, BM)
    rn = gl.arange(0, BN)
    rk = gl.arange(0, BK)
    a = A[rm[:, None] * BK + rk[None, :]]
    b_s = smem(B.dtype, Layout.swizzled(BK, BN), name="b", value=B[rk[:, None] * BN + rn[None, :]])
    acc = gl.full((BM, BN), 1.0, gl.float32, layout=Layout.wgmma((4, 1), instr_n=BN))
    if A_REGS:
        fence_async_shared()                               # b_s was written from registers
        acc = wgmma(a, b_s, acc, use_acc=ACC)
    else:
        a_s = smem(A.dtype, Layout.swizzled(BM, BK), name="a", value=a)
        fence_async_shared()
        acc = wgmma(a_s, b_s, acc, wait=False, use_acc=ACC)
        acc = wgmma_wait(acc, a_s, b_s, pendings=0)
    C[rm[:, None] * BN + rn[None, :]] = acc


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("a_regs", [False, True])
@pytest.mark.parametrize("use_acc", [True, False])
def test_wgmma_against_torch(dtype, a_regs, use_acc):
    torch.manual_seed(2)
    a, b = torch.randn(64, 32).to(dtype), torch.randn(32, 64).to(dtype)
    c = torch.full((64, 64), NAN)
    _wgmma_kernel.interpret((1,), a, b, c, BM=64, BN=64, BK=32, A_REGS=a_regs, ACC=use_acc)
    if dtype == torch.float32:                            # tf32: the low 13 mantissa bits dropped
        a, b = (torch.from_numpy(t.numpy().view(np.uint32) & np.uint32(0xFFFFE000)).view(torch.float32) for t in (a, b))
    want = (a.double() @ b.double() + (1.0 if use_acc else 0.0)).float()
    assert torch.equal(c, want)


def test_the_shipped_tile_dots():
    from gluon.kernels import tile_dots as td
    torch.manual_seed(3)
    a, b = torch.randn(64, 32).half(), torch.randn(32, 64).half()
    want = (a.double() @ b.double()).float()
    for k in (td.mma_tile_sm80, td.mfma_tile_cdna3):
        c = torch.full((64, 64), NAN)
        k.interpret((1,), a, b, c)
        assert torch.equal(c, want), k.name
    a, b = torch.randn(128, 64).half(), torch.randn(64, 128).half()
    c = torch.full((128, 128), NAN)
    td.tcgen05_tile_sm100.interpret((1,), a, b, c)
    assert torch.equal(c, (a.double() @ b.double()).float())


@pytest.mark.parametrize("shape,dtype", [((256, 256, 256), torch.bfloat16), ((200, 136, 72), torch.float16)])
def test_the_tile_gemm_against_torch(interpret_env, shape, dtype):
    from gluon.kernels import gemm_tile_sm90 as g
    torch.manual_seed(4)
    M, N, K = shape
    a, b = torch.randn(M, K).to(dtype), torch.randn(K, N).to(dtype)
    c = torch.full((M, N), NAN).to(dtype)
    g.launch(a, b, c)                                      # warm: the trace is cached per specialization
    c.fill_(NAN)
    t0 = time.perf_counter()
    g.launch(a, b, c)
    took = time.perf_counter() - t0
    torch.testing.assert_close(c.float(), (a.double() @ b.double()).to(dtype).float(), rtol=1e-2, atol=1e-2)
    if M == 256:
        assert took < 2.0, f"the 256^3 tile GEMM took {took:.2f} s in the interpreter"


@gluon.kernel(arch=SM90, num_warps=4)
def _multicast_kernel(X):
    gl.set_cluster(2)
    s = smem(X.dtype, Layout.swizzled(64, 64), name="s")
    bar = mbarrier(count=1, name="bar")
    bar.expect(s.nbytes)
    tma_load(s, X, (0, 0), bar, multicast=True)


def test_multicast_is_refused_clearly():
    with pytest.raises(GluonError, match="multicast"):
        _multicast_kernel.interpret((2,), torch.randn(64, 64).half())


def test_every_op_of_the_data_path_has_a_rule():
    for k in ("smem_alloc", "smem_index", "smem_load", "smem_store", "smem_trans", "smem_reinterpret",
              "fence_async_shared", "tma_load", "tma_store", "tma_store_wait", "cp_async", "cp_async_commit",
              "cp_async_wait", "wgmma", "wgmma_wait", "mma", "mfma", "tmem_alloc", "tmem_load", "tcgen05_mma"):
        assert k in RULES, k
    assert DType.bf16 and SwizzleMode.B128


# ------------------------------------------------------------------------------ the shipped SM90 kernels


def _gemm_ref(a, b, kmajor=False):
    return a.double() @ (b.double().T if kmajor else b.double())


@pytest.mark.parametrize("shape,dtype,kw", [
    ((256, 256, 192), torch.bfloat16, {}),
    ((256, 256, 192), torch.float16, {}),
    ((200, 136, 72), torch.bfloat16, {}),
    ((200, 136, 72), torch.float16, {}),
    ((200, 136, 320), torch.bfloat16, dict(splits=2)),                       # split-K: workspace + splitk_reduce
    ((200, 136, 320), torch.float16, dict(config=dict(EPILOGUE="ring", STAGES=4))),
    ((200, 136, 320), torch.bfloat16, dict(config=dict(SPLIT_WGS=True))),
    ((200, 136, 320), torch.float16, dict(config=dict(SWAP_AB=True, BLOCK_M=64, BLOCK_N=64))),
    # the swap on two cooperative warpgroups (B's 128 or 256 rows split between them, A's rows shared)
    ((100, 300, 320), torch.bfloat16, dict(b_kmajor=True, config=dict(SWAP_AB=True, CONSUMER_WGS=2, BLOCK_M=128,
                                                                      BLOCK_N=128, BLOCK_K=64, STAGES=4))),
    ((40, 600, 520), torch.float16, dict(splits=2, config=dict(SWAP_AB=True, CONSUMER_WGS=2, BLOCK_M=64,
                                                               BLOCK_N=256, BLOCK_K=64, STAGES=3))),
    ((200, 136, 320), torch.bfloat16, dict(b_kmajor=True, config=dict(EPILOGUE="coalesced"))),
    ((200, 136, 72), torch.float16, dict(config=dict(EPILOGUE="direct", K_ZIGZAG=True, CONSUMER_WGS=1, BLOCK_M=64))),
])
def test_the_shipped_sm90_gemm_against_torch(interpret_env, monkeypatch, shape, dtype, kw):
    import sys
    from gluon.kernels.gemm_sm90 import launch
    gj = sys.modules["gluon.jit"]
    monkeypatch.setattr(gj, "compile_module", lambda *a, **k: pytest.fail("an interpreted launch compiled"))
    torch.manual_seed(5)
    M, N, K = shape
    kmajor = kw.get("b_kmajor", False)
    a = torch.randn(M, K).to(dtype)
    b = (torch.randn(N, K) if kmajor else torch.randn(K, N)).to(dtype)
    c = torch.full((M, N), NAN).to(dtype)
    launch(a, b, c, **kw)
    ref = _gemm_ref(a, b, kmajor)
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=2e-2 * ref.abs().max().item() / 16)


def test_the_shipped_sm90_gemm_256_cubed_interprets_in_under_2_seconds(interpret_env):
    from gluon.kernels.gemm_sm90 import launch
    a, b = _bf16(256, 256), _bf16(256, 256)
    c = torch.full((256, 256), NAN).bfloat16()
    launch(a, b, c)                                        # the first call traces
    c.fill_(NAN)
    t0 = time.perf_counter()
    launch(a, b, c)
    took = time.perf_counter() - t0
    torch.testing.assert_close(c.double(), _gemm_ref(a, b), rtol=1e-2, atol=0.1)
    assert took < 2.0, f"the shipped 256x256x256 GEMM took {took:.2f} s in the interpreter"


@pytest.mark.parametrize("causal", [False, True])
def test_the_shipped_sm90_attention_against_torch(interpret_env, causal):
    from gluon.kernels.attention_sm90 import attention
    torch.manual_seed(6)
    q, k, v = (torch.randn(1, 2, 300, 64).half() for _ in range(3))
    o = attention(q, k, v, causal=causal)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    torch.testing.assert_close(o.float(), ref, rtol=2e-3, atol=2e-3)
    o2, lse = attention(q, k, v, causal=causal, return_lse=True, layout="bhsd")
    assert torch.equal(o2, o) and lse.shape == (1, 2, 300) and torch.isfinite(lse).all()


def test_host_functions_refuse_gpu_tensors_clearly_when_interpreting(interpret_env):
    from gluon.kernels.gemm_sm90 import launch
    a = torch.empty(64, 64, dtype=torch.float16, device="meta")
    with pytest.raises(GluonError, match="CPU interpreter"):
        launch(a, a, a)


# ------------------------------------------------------------------------------ the other launch paths


def test_compiled_kernels_and_their_launchers_run_in_the_interpreter(interpret_env):
    import sys
    import os
    from gluon.interpret import set_enabled
    from gluon.interpret.entry import InterpretedKernel
    from gluon.jit import CompiledKernel
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import copy_kernel as ckm
    n = 2500
    src = torch.randn(n)
    dst = torch.full_like(src, NAN)
    ik = ckm.copy_kernel[(3,), (1024,)].compiled(dst, src, n, XBLOCK=1024)   # interpreting: nothing compiles
    assert isinstance(ik, InterpretedKernel) and ik.takes_args_as_given(3)
    ik.launcher((3,), *ik.launch_args((dst, src, n), {}))
    assert torch.equal(dst, src)
    set_enabled(False)
    ck = ckm.copy_kernel[(3,), (1024,)].compiled(dst, src, n, XBLOCK=1024, arch="sm90")   # a real binary
    set_enabled(True)
    assert isinstance(ck, CompiledKernel)
    for call in (lambda: ck((3,), dst, src, n), lambda: ck.launcher((3,), *ck.launch_args((dst, src, n), {}))):
        dst.fill_(NAN)
        call()                                             # its IR (after the passes) interpreted
        assert torch.equal(dst, src)
    with pytest.raises(GluonError, match="no IR for the interpreter"):
        CompiledKernel(None, ck.lowered, None)((3,), dst, src, n)     # as load_compiled gives: binary only


def test_the_automatic_picks_clusters_are_dropped_in_the_interpreter():
    """Few tiles over a deep K pick 2-CTA clusters (DEEP_K_CONFIG) on the GPU; the interpreter runs one CTA at
    a time, so the same config without them runs (the same values: clusters only multicast B); clusters the
    caller asks for are still refused, with the interpreter's line."""
    from gluon.interpret import set_enabled
    from gluon.kernels.gemm_sm90 import choose_config, launch
    M, N, K = 256, 128, 16384
    assert choose_config(M, N, K, 132).CLUSTER_M == 2
    a, b = torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)
    c = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    was = set_enabled(True)
    try:
        launch(a, b, c)
        ref = a.double() @ b.double()
        assert float((c.double() - ref).norm() / ref.norm()) < 1e-2
        with pytest.raises(GluonError, match="clusters of 2 CTAs"):
            launch(a[:, :256], b[:256], c, {"CLUSTER_M": 2, "BLOCK_N": 128})
    finally:
        set_enabled(was)
