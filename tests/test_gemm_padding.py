"""The GEMM's operands TMA cannot describe (gluon/kernels/gemm_sm90/padding.py), in the CPU interpreter: each
one padded alone into a cached buffer, the TMA-ready ones used as given, the values right against fp64 on
poisoned outputs; repeats with new tensors of the same shapes reuse the buffers, and take the caller's
tensors, not the first call's."""
import pytest

torch = pytest.importorskip("torch")

from gluon.kernels.gemm_sm90 import host, launch, padding  # noqa: E402

NAN = float("nan")


@pytest.fixture
def padded_env(interpret_env, monkeypatch):
    """The interpreter, and no padded buffer or pad plan left from another test."""
    monkeypatch.setattr(padding, "_SCRATCH", {})
    monkeypatch.setattr(host, "_PADS", {})


def _odd_view(rows, cols, dtype, offset=1):
    """A rows x cols tensor at a base `offset` elements past an aligned one (not 16-byte aligned)."""
    return torch.empty(rows * cols + offset, dtype=dtype)[offset:].view(rows, cols)


def _check(a, b, c, b_kmajor=False):
    ref = a.double() @ (b.double().T if b_kmajor else b.double())
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=2e-2 * ref.abs().max().item() / 16)


@pytest.mark.parametrize("case,padded", [
    ("K off 16 bytes", {"a"}),                 # a [200, 77]: A padded; B [77, 136] has aligned rows: as given
    ("N off 16 bytes", {"b", "c"}),            # B and C rows of 130 elements
    ("a's base", {"a"}),
    ("c's base", {"c"}),
    ("kmajor K", {"a", "b"}),                  # B [N, K] with K = 77
])
def test_each_operand_is_padded_alone(padded_env, case, padded):
    torch.manual_seed(11)
    M, N, K, kmajor = 200, 136, 72, False
    if case == "K off 16 bytes":
        K = 77
    elif case == "N off 16 bytes":
        N = 130
    elif case == "kmajor K":
        K, kmajor = 77, True
    a = torch.randn(M, K).half()
    b = (torch.randn(N, K) if kmajor else torch.randn(K, N)).half()
    c = torch.full((M, N), NAN).half()
    if case == "a's base":
        a = _odd_view(M, K, torch.half).copy_(a)
    if case == "c's base":
        c = _odd_view(M, N, torch.half).fill_(NAN)
    launch(a, b, c, b_kmajor=kmajor)
    _check(a, b, c, kmajor)
    assert {k[0] for k in padding._SCRATCH} == padded
    # a repeat with new tensors of the same shapes and strides: the same buffers, the new values
    a2 = torch.randn_like(a) if case != "a's base" else _odd_view(M, K, torch.half).copy_(torch.randn(M, K).half())
    b2 = torch.randn_like(b)
    c2 = torch.full_like(c, NAN) if case != "c's base" else _odd_view(M, N, torch.half).fill_(NAN)
    buffers = dict(padding._SCRATCH)
    launch(a2, b2, c2, b_kmajor=kmajor)
    _check(a2, b2, c2, kmajor)
    assert padding._SCRATCH.keys() == buffers.keys() and all(padding._SCRATCH[k] is v for k, v in buffers.items())
    assert len(host._PADS) == 1


def test_a_per_column_scale_is_padded_with_c(padded_env):
    """fp8 with per-column scales and C's rows off 16 bytes: the kernel's N is the padded C's, so scale_b is
    padded to it (with zeros) and no scale past the caller's is read."""
    torch.manual_seed(12)
    M, N, K = 100, 130, 256
    a = (torch.randn(M, K) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K) * 2).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(M) + 0.5, torch.rand(N) + 0.5
    c = torch.full((M, N), NAN).bfloat16()
    launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb)
    ref = (a.double() * sa.double()[:, None]) @ (b.double() * sb.double()[:, None]).T
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())
    assert "sb" in {k[0] for k in padding._SCRATCH}
