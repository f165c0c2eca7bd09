"""On the GPU: the eager fast paths (gluon/runtime/prepared.py) give what the full path gives. Each host
function is called repeatedly with fresh random operands of one shape (new addresses each time, outputs
poisoned): the GEMM (aligned, padded, split-K on two streams, fp8 with both scale kinds), attention (causal
with the log-sum-exp, [B, S, H, D]), a declared kernel; every call checked against an fp64 reference."""
import os

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from gluon.kernels.attention_sm90 import attention  # noqa: E402
from gluon.kernels.attention_sm90 import host as attn_host  # noqa: E402
from gluon.kernels.gemm_sm90 import host as gemm_host  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rel(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("M,N,K,splits", [(256, 256, 256, None), (1000, 3000, 777, None), (128, 512, 8192, 4),
                                          (64, 4096, 4096, None)])
def test_gemm_repeats_with_fresh_operands(M, N, K, splits):
    for i in range(4):
        a = torch.randn(M, K, device="cuda").half()
        b = torch.randn(K, N, device="cuda").half()
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.half)
        gemm_host.launch(a, b, c, splits=splits)
        assert _rel(c, a.double() @ b.double()) < 1e-2, f"call {i}"
    assert gemm_host._FAST                  # the repeats went through a prepared launch


def test_gemm_split_k_on_two_streams_keeps_a_workspace_each():
    side = torch.cuda.Stream()
    a = torch.randn(128, 8192, device="cuda").half()
    b = torch.randn(8192, 512, device="cuda").half()
    ref = a.double() @ b.double()
    for _ in range(3):
        for s in (torch.cuda.current_stream(), side):
            with torch.cuda.stream(s):
                c = torch.full((128, 512), float("nan"), device="cuda", dtype=torch.half)
                gemm_host.launch(a, b, c, splits=4)
            s.synchronize()
            assert _rel(c, ref) < 1e-2


@pytest.mark.parametrize("scales", ["tensor", "rowcol"])
def test_fp8_gemm_repeats_with_fresh_operands_and_scales(scales):
    M, N, K = 512, 1024, 2048
    for i in range(3):
        a = (torch.randn(M, K, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        b = (torch.randn(N, K, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        n_a, n_b = (1, 1) if scales == "tensor" else (M, N)
        sa = torch.rand(n_a, device="cuda") + 0.5
        sb = torch.rand(n_b, device="cuda") + 0.5
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        gemm_host.launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb)
        ref = (a.double() * sa.double().reshape(-1, 1)) @ (b.double() * sb.double().reshape(-1, 1)).T
        assert _rel(c, ref) < 1e-2, f"call {i}"


def test_gemm_a_misaligned_repeat_falls_back_and_is_right():
    a = torch.randn(256, 512, device="cuda").half()
    b = torch.randn(512, 256, device="cuda").half()
    c = torch.empty(256, 256, device="cuda", dtype=torch.half)
    gemm_host.launch(a, b, c)
    odd = torch.empty(256 * 512 + 8, device="cuda", dtype=torch.half)[1:1 + 256 * 512].view(256, 512)
    odd.copy_(torch.randn(256, 512, device="cuda").half())
    c.fill_(float("nan"))
    gemm_host.launch(odd, b, c)
    assert _rel(c, odd.double() @ b.double()) < 1e-2


@pytest.mark.parametrize("layout,causal,lse", [("bhsd", True, True), ("bshd", False, False)])
def test_attention_repeats_with_fresh_inputs(layout, causal, lse):
    from gluon.kernels.attention_sm90.reference import reference
    B, H, HK, S, D = 2, 8, 2, 1000, 128
    shape = (lambda h: (B, S, h, D)) if layout == "bshd" else (lambda h: (B, h, S, D))
    for i in range(3):
        q = torch.randn(*shape(H), device="cuda", dtype=torch.bfloat16)
        k = torch.randn(*shape(HK), device="cuda", dtype=torch.bfloat16)
        v = torch.randn(*shape(HK), device="cuda", dtype=torch.bfloat16)
        got = attention(q, k, v, causal=causal, return_lse=lse, layout=layout)
        o, l = got if lse else (got, None)
        t = (lambda x: x.transpose(1, 2)) if layout == "bshd" else (lambda x: x)
        ref_o, ref_l = reference(t(q), t(k), t(v), causal=causal, with_lse=True)
        assert _rel(t(o), ref_o.double()) < 1e-2, f"call {i}"
        if lse:
            assert (l - ref_l).abs().max().item() < 1e-2
    assert attn_host._FAST


def test_a_declared_kernel_repeats_with_fresh_inputs():
    from gluon.tuning.spec import load_spec, template_of
    t = template_of(load_spec(os.path.join(ROOT, "specs", "softmax.toml")))
    config = {"PROGRAM_BYTES": 2048, "ELEMS_PER_THREAD": 16, "CHUNK": 8192}
    outs = []
    kept = len(t._replays)              # the template is cached per process: other tests' calls may be kept
    for i in range(4):
        x = torch.randn(300, 1000, device="cuda", dtype=torch.bfloat16)
        y = t.call(config, x)
        outs.append(y)
        assert _rel(y, torch.softmax(x.double(), dim=-1)) < 1e-2, f"call {i}"
    assert len(t._replays) <= kept + 1 and len({y.data_ptr() for y in outs}) == 4      # fresh outputs, each kept
