"""On the GPU: operands TMA cannot read (rows or base off 16 bytes) copied into their padded buffers by the GEMM
kernel itself (COPY_A / COPY_B: every program's share, then a meeting of the launch's programs), so an unaligned
call is one launch."""
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from gluon.kernels.gemm_sm90 import launch  # noqa: E402
from gluon.kernels.gemm_sm90 import host as gemm_host  # noqa: E402
from gluon.kernels.gemm_sm90 import padding  # noqa: E402
from test_gemm_small_m_gpu import _rel_err, replays_match_fp64  # noqa: E402


@pytest.fixture(autouse=True)
def _copies_at_any_grid(monkeypatch):
    """The kernel copies at every case here (up to COPY_IN_KERNEL_BYTES), however many rounds of loads its grid
    needs (launch's rule leaves the larger copies of few programs to the driver: tests/test_gemm_kernel_copies.py);
    plans made so are dropped after."""
    monkeypatch.setattr(gemm_host, "COPY_ROUNDS", 1 << 20)
    gemm_host._PLANS.clear()
    gemm_host._FAST.clear()
    yield
    gemm_host._PLANS.clear()
    gemm_host._FAST.clear()


def _rand(shape, dtype, g):
    return torch.randn(*shape, device="cuda", dtype=torch.float32, generator=g).to(dtype)


def _operands(M, N, K, dtype, b_kmajor, odd_base, seed):
    """a [M, K] and b ([N, K] with b_kmajor, else [K, N]); with odd_base, a is a view one element into a
    buffer (its base off 16 bytes, its rows wherever K puts them)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    if odd_base:
        a = _rand((M * K + 1,), dtype, g)[1:].view(M, K)
    else:
        a = _rand((M, K), dtype, g)
    return a, _rand((N, K) if b_kmajor else (K, N), dtype, g)




CASES = [
    (256, 256, 250, False, torch.float16, False),     # A's rows off 16 bytes, B as given
    (333, 200, 137, False, torch.bfloat16, False),    # A only, rows 274 bytes apart
    (64, 1000, 999, True, torch.bfloat16, False),     # B [N, K]: both copied
    (128, 1001, 512, False, torch.bfloat16, False),   # B [K, N] with rows off 16 bytes, C stored by address
    (16, 2048, 1001, True, torch.bfloat16, False),    # decode: the swapped kernel, both copied (4.1 MB)
    (1000, 256, 512, False, torch.bfloat16, True),    # A at an odd base, rows aligned
    (1, 2000, 777, True, torch.float16, False),       # one row
]


@pytest.mark.parametrize("M,N,K,b_kmajor,dtype,odd_base", CASES)
def test_the_kernel_copies_unaligned_operands_eagerly_and_in_a_graph(M, N, K, b_kmajor, dtype, odd_base):
    """One launch whose kernel copies the operands (no PadPlan kept, the plan's kernel copies): poisoned outputs
    within 1e-2 of fp64 eagerly, repeated on new tensors of the same layout (the prepared launch with new source
    addresses), allocating nothing after the first call, and in a CUDA graph replayed on new values."""
    gemm_host._PADS.clear()
    gemm_host._PLANS.clear()
    c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    for seed in range(3):
        a, b = _operands(M, N, K, dtype, b_kmajor, odd_base, seed)
        c.fill_(float("nan"))
        launch(a, b, c, b_kmajor=b_kmajor)
        torch.cuda.synchronize()
        assert not torch.isnan(c).any() and _rel_err(c, a, b, b_kmajor) < 1e-2, seed
    assert not gemm_host._PADS, "the operands were copied before the launch, not by the kernel"
    assert any(p.copies for p in gemm_host._PLANS.values())
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    for _ in range(3):
        launch(a, b, c, b_kmajor=b_kmajor)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    # (the capture stream's plan and meeting counter made outside the capture)
    replays_match_fp64(lambda: launch(a, b, c, b_kmajor=b_kmajor), a, b, c, b_kmajor,
                       lambda seed: _operands(M, N, K, dtype, b_kmajor, False, seed))


@pytest.mark.parametrize("config", [{"BLOCK_M": 64, "BLOCK_N": 64, "CONSUMER_WGS": 1, "STAGES": 4},
                                    {"BLOCK_M": 128, "BLOCK_N": 256, "CONSUMER_WGS": 2, "SPLIT_WGS": True},
                                    {"EARLY_LOADS": True, "PDL": True}])
def test_the_kernel_copies_under_other_configs(config):
    """The copy under a one-warpgroup kernel, one whose second warpgroup is a role of its own (its default warps
    are four), and with the early loads and a programmatic dependent launch (the copy after the wait for the kernel
    before): right against fp64 on poisoned outputs, back to back with no synchronize between the launches."""
    M, N, K = 300, 520, 333
    outs, ins = [], []
    for seed in range(3):
        a, b = _operands(M, N, K, torch.bfloat16, False, False, seed)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch(a, b, c, config)
        outs.append(c)
        ins.append((a, b))
    torch.cuda.synchronize()
    for c, (a, b) in zip(outs, ins):
        assert not torch.isnan(c).any() and _rel_err(c, a, b, False) < 1e-2


def test_above_the_limit_the_driver_copies(monkeypatch):
    """Past COPY_IN_KERNEL_BYTES the operands are copied before the launch (a PadPlan kept for the call)."""
    monkeypatch.setattr(padding, "COPY_IN_KERNEL_BYTES", 0)
    gemm_host._PADS.clear()
    a, b = _operands(256, 256, 250, torch.bfloat16, False, False, 0)
    c = torch.full((256, 256), float("nan"), device="cuda", dtype=torch.bfloat16)
    launch(a, b, c)
    torch.cuda.synchronize()
    assert gemm_host._PADS and not torch.isnan(c).any() and _rel_err(c, a, b, False) < 1e-2


@pytest.mark.parametrize("M,N,K,scales", [(64, 256, 200, "tensor"), (100, 300, 1000, "block")])
def test_the_kernel_copies_fp8_operands(M, N, K, scales):
    """fp8 inputs (B [N, K]) whose K rows are off 16 bytes, with per-tensor or DeepGEMM block scales: both copied by
    the kernel, byte by byte; poisoned outputs within 1e-2 of fp64 of the dequantized operands, twice."""
    from gluon.tuning.templates.gemm_sm90_fp8_scales import dequantized
    gemm_host._PADS.clear()
    for seed in range(2):
        g = torch.Generator(device="cuda").manual_seed(seed)
        a = (torch.randn(M, K, device="cuda", generator=g) * 3).to(torch.float8_e4m3fn)
        b = (torch.randn(N, K, device="cuda", generator=g) * 3).to(torch.float8_e4m3fn)
        if scales == "tensor":
            sa, sb = torch.rand(1, device="cuda", generator=g) + 0.25, torch.rand(1, device="cuda", generator=g) + 0.25
            ref = (a.double() * sa.double()) @ (b.double() * sb.double()).T
        else:
            sa = torch.rand(M, -(-K // 128), device="cuda", generator=g) + 0.25
            sb = torch.rand(-(-N // 128), -(-K // 128), device="cuda", generator=g) + 0.25
            ref = dequantized(a, b, sa, sb)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb)
        torch.cuda.synchronize()
        assert not torch.isnan(c).any() and ((c.double() - ref).norm() / ref.norm()).item() < 1e-2
    assert not gemm_host._PADS


def test_a_config_whose_kernel_cannot_copy_has_them_copied_first():
    """Split K summed by the kernel's last slice (SPLITK_FIXUP: CNT holds its counters, so no meeting of the
    programs there): the operands are copied before the launch instead (a PadPlan kept for the call), and repeats
    through the call's fast path stay right on new tensors (the caller's unaligned A never reaches a descriptor)."""
    from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG
    fixup = DEFAULT_CONFIG.replace(BLOCK_M=64, BLOCK_N=64, CONSUMER_WGS=1, STAGES=8, SPLITK_FIXUP=True)
    gemm_host._PADS.clear()
    c = torch.full((100, 300), float("nan"), device="cuda", dtype=torch.bfloat16)
    for seed in range(3):
        a, b = _operands(100, 300, 1000 - 1, torch.bfloat16, True, seed == 2, seed)
        c.fill_(float("nan"))
        launch(a, b, c, fixup, b_kmajor=True, splits=3)
        torch.cuda.synchronize()
        assert not torch.isnan(c).any() and _rel_err(c, a, b, True) < 1e-2, seed
    assert gemm_host._PADS


def test_a_callers_compiled_kernel_has_them_copied_first():
    """A caller's own compiled gemm_sm90 (the tuner's, a loaded build's) cannot copy: its operands are copied before
    the launch (a PadPlan kept for the call), right on poisoned outputs, repeated."""
    from gluon.dtypes import DType
    from gluon.kernels.gemm_sm90 import compile_config, resolve_config
    cfg = resolve_config(256, 256, 256, torch.cuda.get_device_properties(0).multi_processor_count, 2)
    ck = compile_config(cfg, DType.bf16)
    gemm_host._PADS.clear()
    c = torch.full((256, 256), float("nan"), device="cuda", dtype=torch.bfloat16)
    for seed in range(2):
        a, b = _operands(256, 256, 250, torch.bfloat16, False, False, seed)
        c.fill_(float("nan"))
        launch(a, b, c, cfg, compiled=ck)
        torch.cuda.synchronize()
        assert not torch.isnan(c).any() and _rel_err(c, a, b, False) < 1e-2
    assert gemm_host._PADS


@pytest.mark.parametrize("b_kmajor", [False, True])
def test_a_launch_first_planned_inside_a_capture_takes_the_drivers_copy(b_kmajor):
    """Captured on a stream with no call before (torch's own capture stream, as `torch.cuda.graph` without a
    stream): the plan is made inside the capture and takes the driver's copy (a PadPlan kept, no meeting counter
    made there); the replays right against fp64 on new values."""
    M, N, K = 256, 1000, 999
    gemm_host._PADS.clear()
    a, b = _operands(M, N, K, torch.bfloat16, b_kmajor, False, 0)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(a, b, c, b_kmajor=b_kmajor)
    assert gemm_host._PADS, "the launch planned inside the capture did not take the driver's copy"
    for seed in (5, 6):
        a2, b2 = _operands(M, N, K, torch.bfloat16, b_kmajor, False, seed)
        a.copy_(a2)
        b.copy_(b2)
        c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert not torch.isnan(c).any() and _rel_err(c, a, b, b_kmajor) < 1e-2, seed
