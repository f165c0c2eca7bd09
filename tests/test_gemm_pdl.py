"""Programmatic dependent launch (PDL): `gl.griddep_wait` / `gl.griddep_launch_dependents`, and the GEMM's
`PDL` switch (the split-K second pass launched as a dependent of the main kernel, which lets it launch at its
start). CPU: the machine code (ACQBULK / PREEXIT), the launch attribute in the ABI and the binary's metadata,
the arch check, the interpreter's values. GPU (marked): split-K launches with PDL against fp64 on poisoned
outputs, eager (first and repeated calls) and replayed in a CUDA graph."""
import pytest
import torch

import gluon
import gluon.language as gl
from gluon import DType
from gluon.abi import KernelABI
from gluon.kernels.gemm_sm90 import host, launch, num_warps, resolve_config, stand_ins
from gluon.kernels.gemm_sm90.kernel import gemm_sm90
from gluon.language import ScalarArg
from gluon.language.tracing import ArchError
from gluon.types import TensorRef


def _ops(ck) -> list[str]:
    return [ln.split(";")[0].split()[-1] for ln in ck.sass().splitlines() if ";" in ln]


def _reduce(wait: bool):
    c = TensorRef("C", DType.bf16, shape=("C_shape0",))
    w = TensorRef("W", DType.f32, shape=("W_shape0",))
    return host.splitk_reduce.compile(c, w, ScalarArg(DType.i32, 16), block=(1024,),
                                      **host._reduce_kw(4, wait))


@pytest.mark.parametrize("wait", [False, True])
def test_the_second_pass_waits_and_is_launched_as_a_dependent_only_with_pdl(wait):
    ck = _reduce(wait)
    assert ("ACQBULK" in _ops(ck)) == wait
    assert ck.abi.launch_pdl == wait
    assert bool(ck.binary.metadata.get("launch_pdl")) == wait
    assert ck.launcher._launch_meta_ns.launch_pdl == wait
    assert KernelABI.from_json(ck.abi.to_json()) == ck.abi


@pytest.mark.parametrize("shape,over", [((512, 512, 65536), {}), ((4096, 4096, 4096), {}),
                                       ((64, 4096, 4096), dict(SWAP_AB=True))])
@pytest.mark.parametrize("pdl", [False, True])
def test_the_main_kernel_is_a_dependent_and_lets_the_next_launch_only_with_pdl(pdl, shape, over):
    """With PDL the main kernel lets the next kernel launch at its start (PREEXIT) and is launched as a dependent
    itself: its wait (ACQBULK) comes after the barrier inits and before any TMA load in program order (the PTX;
    the SASS lays the warp roles' code out elsewhere), so the early loads and every role wait for the kernel
    before (deep K, a large pick with EARLY_LOADS, a decode pick in a cluster)."""
    cfg = resolve_config(*shape, 132, 2, True, dict(PDL=pdl, **over))
    ck = gemm_sm90.compile(*stand_ins(DType.bf16, splits=2), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=True)
    ops = _ops(ck)
    assert ("PREEXIT" in ops) == pdl and ("ACQBULK" in ops) == pdl
    assert ck.abi.launch_pdl == pdl and ck.spills == 0
    if pdl:
        ptx = ck.asm["ptx"]
        wait = ptx.index("griddepcontrol.wait;")
        assert ptx.index("griddepcontrol.launch_dependents;") < wait < ptx.index("cp.async.bulk.tensor")
        assert ptx.rindex("mbarrier.init", 0, wait) > 0


def test_griddep_needs_an_sm90_arch():
    @gluon.jit(arch="sm80")
    def k(x_ptr):
        gl.griddep_wait()
        x_ptr[gl.thread_id(0)] = 1.0

    with pytest.raises(ArchError, match=r"griddep_wait\(\) is not available on sm80.*'griddep'"):
        k.compile(TensorRef("X", DType.f32, shape=("X_shape0",)), block=(128,))


@pytest.mark.parametrize("M,N,K,splits", [(96, 200, 1024, 4), (128, 384, 640, 3)])
def test_pdl_split_k_in_the_interpreter(interpret_env, monkeypatch, M, N, K, splits):
    """The interpreter runs the main kernel to its end, then the second pass (the wait a no-op): the values
    are the plain split-K's."""
    monkeypatch.setattr(host, "device_sms", lambda d: 4)
    monkeypatch.setattr(host, "_PLANS", {})
    g = torch.Generator().manual_seed(M + K)
    a, b = torch.randn(M, K, generator=g).to(torch.bfloat16), torch.randn(N, K, generator=g).to(torch.bfloat16)
    outs = []
    for pdl in (False, True):
        c = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
        launch(a, b, c, dict(PDL=pdl, SWAP_AB=False, SPLITK_FIXUP=False, CLUSTER_K=1), b_kmajor=True, splits=splits)
        outs.append(c)
    ref = a.double() @ b.double().T
    assert not outs[1].isnan().any()
    assert ((outs[1].double() - ref).norm() / ref.norm()).item() < 1e-2
    assert torch.equal(outs[0], outs[1])


GPU_CASES = [(512, 512, 65536, True), (1000, 1000, 40000, False), (256, 1024, 65536, True), (16, 1024, 28672, True),
             (64, 512, 8192, False)]


@pytest.mark.parametrize("M,N,K,kmajor", GPU_CASES)
def test_the_gpu_cases_sum_in_the_second_pass(M, N, K, kmajor):
    from gluon.kernels.gemm_sm90 import split_k
    cfg = resolve_config(M, N, K, 132, 2, True, dict(PDL=True))
    assert cfg.PDL and cfg.CLUSTER_K == 1 and not cfg.SPLITK_FIXUP and split_k(M, N, K, cfg, 132) > 1


def _pdl_config(M, N, K, pdl, **over):
    """The pick with PDL on or off, as a GemmConfig (what a repeat's prepared launch is keyed by, as a dict
    config's is by its items)."""
    return resolve_config(M, N, K, torch.cuda.get_device_properties(0).multi_processor_count, 2, True,
                          dict(over, PDL=pdl))


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,kmajor,over", [c + ({},) for c in GPU_CASES] + [
    (64, 4096, 4096, True, dict(SWAP_AB=True)),         # the decode pick: K halves summed in a 2-CTA cluster
    (2048, 2048, 1024, False, {})])                     # one pass, no split
def test_pdl_matches_the_launch_without_it(M, N, K, kmajor, over):
    """The pick with PDL: against fp64 on a poisoned output, bit for bit with the same config without PDL, on a
    first call, a repeated call (the prepared fast path) with fresh inputs, and a CUDA graph's replay."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    cfgs = {pdl: _pdl_config(M, N, K, pdl, **over) for pdl in (False, True)}

    def inputs():
        a = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
        b = torch.randn(*((N, K) if kmajor else (K, N)), device="cuda", generator=g).to(torch.bfloat16)
        return a, b

    def run(a, b, pdl):
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch(a, b, c, cfgs[pdl], b_kmajor=kmajor)
        return c

    for _ in range(2):                          # the first call, then the prepared launch on new inputs
        a, b = inputs()
        got, plain = run(a, b, True), run(a, b, False)
        torch.cuda.synchronize()
        ref = a.double() @ (b.double().T if kmajor else b.double())
        assert not got.isnan().any(), "some output elements were not written"
        assert ((got.double() - ref).norm() / ref.norm()).item() < 1e-2
        assert torch.equal(got, plain)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(a, b, c, cfgs[True], b_kmajor=kmajor)
    for _ in range(3):
        c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(c, plain)


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", [(64, 4096, 4096), (512, 512, 32768), (2048, 2048, 2048)])
def test_a_chain_of_dependent_gemms_reads_each_output_after_it_is_written(M, N, K):
    """Each GEMM reads the one before's output (C_i = C_(i-1)[:, :K] @ B_i, launched back to back, eager and in a
    CUDA graph): with PDL a GEMM starts while the one before still runs and must wait before its first read.
    Bit for bit with the chain without PDL, whose GEMMs start after the one before has ended."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    g = torch.Generator(device="cuda").manual_seed(M + K)
    a0 = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    bs = [(torch.randn(N, K, device="cuda", generator=g) / K ** 0.5).to(torch.bfloat16) for _ in range(6)]

    def chain(pdl, outs):
        a = a0
        for b, c in zip(bs, outs):
            launch(a, b, c, _pdl_config(M, N, K, pdl), b_kmajor=True)
            a = c[:, :K] if N > K else c.repeat(1, K // N)[:, :K].contiguous()
        return outs

    def fresh():
        return [torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in bs]

    plain = chain(False, fresh())
    for _ in range(3):
        got = chain(True, fresh())
        torch.cuda.synchronize()
        assert all(torch.equal(x, y) for x, y in zip(got, plain))
    outs = fresh()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain(True, outs)
    for _ in range(3):
        for c in outs:
            c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(x, y) for x, y in zip(outs, plain))
