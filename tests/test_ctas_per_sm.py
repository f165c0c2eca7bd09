"""Several CTAs of a kernel an SM (`gl.set_ctas_per_sm`, the GEMM's CTAS_PER_SM), on the CPU: the launch registers
the lowering asks Triton for (`ttg.maxnreg`), the ABI's record of it, the compile step's residency check on the
binary, and the GEMM's grid, config check and machine code. The GPU test is in test_gemm_small_m_gpu.py."""
import re

import pytest

import gluon.language as gl
from gluon import CDNA3, SM90, DType, kernel
from gluon.abi import KernelABI
from gluon.arch import resident_ctas
from gluon.ir import GluonError
from gluon.jit import lower, run_passes
from gluon.kernels.gemm_sm90 import compile_variant, grid, split_k
from gluon.kernels.gemm_sm90.config import GemmConfig
from gluon.kernels.gemm_sm90.picks import DECODE_PAIRS, DEEP_K_CONFIG
from gluon.language import warp_role
from gluon.types import TensorRef, WarpRole


def _roles(n: int | None, worker_warps: int = 1):
    @kernel(arch=SM90, num_warps=4)
    def k(X):
        if n is not None:
            gl.set_ctas_per_sm(n)
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            gl.store(X + gl.arange(0, 128), gl.full((128,), 1.0, gl.float32))
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 3 + worker_warps), registers=40):
            gl.store(X + 128, 2.0)
    return lower(run_passes(k.trace(TensorRef("X", DType.f32, shape=(256,)), num_warps=4 + worker_warps)))


def _maxnreg(ttgir: str) -> int | None:
    head = next(ln for ln in ttgir.splitlines() if ln.startswith("module attributes"))
    m = re.search(r'"?ttg\.maxnreg"? = (\d+) : i32', head)
    return int(m.group(1)) if m else None


@pytest.mark.parametrize("n,workers,want", [(None, 1, None), (1, 1, None), (2, 1, 128), (3, 1, 80), (2, 4, 128),
                                            (2, 5, 80), (4, 1, 64)])
def test_the_launch_registers_are_the_register_file_over_the_ctas_warps_padded_to_warpgroups(n, workers, want):
    """64K registers over n CTAs of the default role's 4 warps and the workers padded to whole warpgroups (what
    Triton launches), rounded down to 8; nothing asked, nothing written (Triton's default: one CTA)."""
    low = _roles(n, workers)
    assert _maxnreg(low.ttgir) == want
    assert low.abi.ctas_per_sm == (n or 1)
    assert KernelABI.from_json(low.abi.to_json()) == low.abi


@pytest.mark.parametrize("bad", [0, 5, 1.5, True, "2"])
def test_set_ctas_per_sm_takes_one_to_four(bad):
    with pytest.raises(GluonError, match=r"set_ctas_per_sm\(.*\): takes 1, 2, 3 or 4"):
        _roles(bad)


def test_set_ctas_per_sm_is_refused_off_nvidia():
    @kernel(arch=CDNA3, num_warps=4)
    def k(X):
        gl.set_ctas_per_sm(2)
        gl.store(X, 1.0)
    with pytest.raises(GluonError, match="NVIDIA kernel's launch registers; kernel 'k' is for cdna3"):
        k.trace(TensorRef("X", DType.f32, shape=(16,)))


def test_resident_ctas_counts_registers_shared_memory_and_threads():
    assert resident_ctas(SM90, 256, 128, 114884) == 2          # the 64x128 four-stage GEMM at two an SM
    assert resident_ctas(SM90, 256, 128, 114884 + 1024) == 1    # a KiB over half of 228 KiB, less the reserves
    assert resident_ctas(SM90, 256, 255, 1000) == 1             # 255 registers are allocated as 256
    assert resident_ctas(SM90, 256, 121, 1000) == 2             # ... 121 as 128
    assert resident_ctas(SM90, 128, 32, 0) == 16                # 2048 threads an SM


@pytest.mark.parametrize("cm,b_kmajor", [(1, False), (2, True)])
def test_the_gemm_at_two_ctas_an_sm_launches_with_half_the_registers_and_no_spills(cm, b_kmajor):
    """64x128 tiles over 4 stages (DECODE_PAIRS' family, in and out of pairs): 128 registers a thread at launch, the
    consumers' setmaxnreg within the CTA's pool, shared memory that fits twice, no spills."""
    cfg = DECODE_PAIRS.replace(STAGES=4, CLUSTER_M=cm, CTAS_PER_SM=2)
    ck = compile_variant(DType.bf16, B_KMAJOR=b_kmajor, **cfg.to_dict())
    b = ck.binary
    assert b.registers == 128 and b.spills == 0 and ck.abi.ctas_per_sm == 2
    assert resident_ctas(SM90, b.num_warps * 32, b.registers, b.shared_bytes) >= 2
    assert _maxnreg(b.asm["ttgir"]) == 128
    incs = [int(v) for v in re.findall(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+(\d+);", b.asm["ptx"])]
    assert incs and max(incs) * 128 + 24 * 128 <= 128 * 256     # the default role's most, the rest at their least


def test_the_gemm_refuses_two_ctas_an_sm_whose_shared_memory_fits_once():
    cfg = DECODE_PAIRS.replace(CTAS_PER_SM=2)                   # 8 stages of 24 KiB
    with pytest.raises(GluonError, match=r"asks for 2 CTAs an SM .* lets 1 reside: \d+ bytes of shared memory a CTA "
                                         r"\(2 fit in 115712 each\)"):
        compile_variant(DType.bf16, **cfg.to_dict())


def test_the_gemm_config_takes_one_or_two_ctas_an_sm_and_the_grid_follows():
    with pytest.raises(GluonError, match="CTAS_PER_SM=3: takes 1 or 2"):
        GemmConfig(CTAS_PER_SM=3)
    cfg = DECODE_PAIRS.replace(STAGES=4, CLUSTER_M=1)
    assert grid(128, 14336, cfg, 132) == (132,)                       # 224 tiles, 132 CTAs
    assert grid(128, 14336, cfg.replace(CTAS_PER_SM=2), 132) == (224,)  # ... all at once, two an SM
    assert grid(128, 14336, cfg.replace(CLUSTER_M=2, CTAS_PER_SM=2), 132) == (112,)   # clusters of two
    assert "CTAS_PER_SM=2" in cfg.replace(CTAS_PER_SM=2).describe() and "CTAS_PER_SM" not in cfg.describe()


def test_k_slices_fill_the_slots_of_two_ctas_an_sm():
    """700x760x40000 on 128x128 tiles (36 of them): 3 K slices fill 108 of 132 SMs at one CTA an SM; at two, 7
    slices fill 252 of 264 slots."""
    one = DEEP_K_CONFIG.replace(CLUSTER_M=1, STAGES=3, EPILOGUE="direct")
    assert split_k(700, 760, 40000, one, 132) == 3
    assert split_k(700, 760, 40000, one.replace(CTAS_PER_SM=2), 132) == 7


@pytest.mark.parametrize("M,N,K,over", [(100, 700, 300, dict(SWAP_AB=False)), (16, 900, 200, dict(SWAP_AB=True))])
def test_two_ctas_an_sm_in_the_interpreter(interpret_env, monkeypatch, M, N, K, over):
    """On 4 SMs the grid of 8 persistent programs walks the tiles (several each) to the same values as 4: within
    1e-2 of fp64, every element written, bit for bit."""
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_sm90 import host, launch
    monkeypatch.setattr(host, "device_sms", lambda d: 4)
    monkeypatch.setattr(host, "_PLANS", {})
    g = torch.Generator().manual_seed(M + N)
    a, b = torch.randn(M, K, generator=g).to(torch.bfloat16), torch.randn(N, K, generator=g).to(torch.bfloat16)
    base = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, STAGES=4, CONSUMER_WGS=1, CLUSTER_M=1, CLUSTER_K=1, **over)
    outs = []
    for n in (2, 1):
        c = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
        launch(a, b, c, dict(base, CTAS_PER_SM=n), b_kmajor=True, splits=1)
        outs.append(c)
    ref = a.double() @ b.double().T
    assert not outs[0].isnan().any()
    assert ((outs[0].double() - ref).norm() / ref.norm()).item() < 1e-2
    assert torch.equal(outs[0], outs[1])


def test_too_few_launch_registers_for_ptxas_are_one_line_naming_the_request():
    """128x256 tiles on two warpgroups (128 accumulator registers a thread) at two CTAs an SM launch with 80: ptxas
    refuses (C7602), and the error says which request set them, not the compiler's log."""
    with pytest.raises(GluonError, match=r"kernel\.py:\d+: kernel gemm_sm90 asks for 2 CTAs an SM \(set_ctas_per_sm\), "
                                         r"which launches its threads with 80 registers; ptxas needs \d+ or more"):
        compile_variant(DType.bf16, STAGES=2, CTAS_PER_SM=2)
