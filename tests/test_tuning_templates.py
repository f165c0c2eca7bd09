"""`gluon tune`'s GEMM and copy templates without a GPU: their legality and refusals, the TTGIR they trace
against what the launch compiles, and the GPU worker launching the pool's binary without tracing."""
import os
import sys

import pytest

for _m in ("optuna", "pandas", "pyarrow", "pydantic"):
    pytest.importorskip(_m)
torch = pytest.importorskip("torch")

from gluon.ir import GluonError  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)


def _captured_launch_module(monkeypatch, template, args, constexprs, block, num_warps):
    """The module gluon.jit would compile for a launch with these (CPU) arguments."""
    from gluon import SM90
    jit = sys.modules["gluon.jit"]                      # (the attribute gluon.jit is the decorator)
    seen = []

    def fake_compile(module, sources=None, **kw):
        seen.append(module)
        raise RuntimeError("captured")
    monkeypatch.setattr(jit, "compile_module", fake_compile)
    with pytest.raises(RuntimeError, match="captured"):
        jit._jit_of(template).specialize(args, constexprs, block, num_warps, SM90, {})
    return jit.lower(jit.run_passes(seen[0]))


def test_gemm_template_traces_what_the_launch_compiles(monkeypatch):
    """template.compile (the compile pool) and launch() produce the same TTGIR and ABI: the GPU worker's
    launch hits the disk cache the pool filled."""
    from gluon.jit import lower
    from gluon.kernels.gemm_sm90 import gemm_sm90, num_warps
    from gluon.tuning.templates.gemm_sm90 import TUNING
    config = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, SWIZZLE=128, STAGES=3, CONSUMER_WARPS=8, PRODUCER_WARPS=1,
                  PRODUCER_REGS=40, GROUP_M=8, EPILOGUE="tma")
    mine = lower(TUNING.legality(config, (1024, 1024, 1024), "bf16", "sm90"))
    cfg = TUNING.kernel_config(config, "bf16")
    assert cfg.CONSUMER_WGS == 2 and not hasattr(cfg, "CONSUMER_WARPS")
    a = torch.empty(64, 32, dtype=torch.bfloat16)
    w = torch.empty(16, dtype=torch.float32)
    cnt = torch.zeros(16, dtype=torch.int32)
    launch = _captured_launch_module(monkeypatch, gemm_sm90, (a, a, a, w, cnt, w, w, 1), dict(CFG=cfg, B_KMAJOR=False), None,
                                     num_warps(cfg))
    assert mine == launch
    assert TUNING.flops((2, 3, 4)) == 48 and TUNING.bytes((2, 3, 4), "fp16") == 2 * (8 + 12 + 6)


@pytest.mark.parametrize("shape,split,promised", [((512, 512, 65536), 8, True), ((512, 520, 65536), 8, False),
                                                  ((1024, 1024, 1024), 1, False)])
def test_gemm_template_promises_n_multiple_16_where_launch_does(shape, split, promised):
    """The tuner's binaries of split configs store their partials in pairs where N allows it, as `launch`'s do
    (4-byte stores were 5-18% slower at deep K): the promise is traced and keyed by N % 16."""
    from gluon.jit import lower
    from gluon.tuning.templates.gemm_sm90 import TUNING
    config = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, STAGES=6, CONSUMER_WARPS=4, PRODUCER_WARPS=1, EPILOGUE="direct",
                  SPLIT_K=split)
    abi = lower(TUNING.legality(config, shape, "bf16", "sm90")).abi
    assert bool(abi.constexprs.get("N_MULTIPLE_16")) == promised
    keys = {TUNING.compile_key("c", s, "bf16", "sm90") for s in ((512, 512, 65536), (512, 520, 65536))}
    assert len(keys) == 2


def test_the_gpu_worker_launches_the_pools_binary_without_tracing(tmp_path, monkeypatch):
    """The tuner traces a job once (its legality check lowers it), the compile pool builds that lowered
    kernel without a trace, and the GPU worker launches the binary from the cache by its key: nothing in
    the pool or the worker traces the kernel again (the launch is emulated on CPU tensors)."""
    import gluon.jit as _  # noqa: F401
    from gluon.language.kernel import KernelTemplate
    from gluon.tuning.expand import Legality, compile_lowered
    from gluon.tuning.measure import measure_job
    from gluon.tuning.spec import load_spec, template_of
    jit = sys.modules["gluon.jit"]
    monkeypatch.setenv("GLUON_CACHE_DIR", str(tmp_path / "cache"))
    spec = load_spec(os.path.join(REPO, "specs", "copy.toml"))
    template = template_of(spec)
    cfg = dict(XBLOCK=1024, NUM_WARPS=4, FORM="simt")
    cid = spec.space.config_id(cfg)
    legality = Legality(spec, template, "sm90")
    assert legality.one(cfg, cid, (4096,), "fp32").ok
    lowered = legality.lowered(cfg, cid, (4096,), "fp32")

    traced = []
    real_trace = KernelTemplate.trace
    monkeypatch.setattr(KernelTemplate, "trace", lambda self, *a, **k: (traced.append(self.name),
                                                                        real_trace(self, *a, **k))[1])
    comp = compile_lowered(spec, lowered)                          # what a pool process runs
    assert comp["status"] == "ok" and comp["cache_key"] and comp["registers"] > 0

    launched = []

    def fake_call(self, grid, *args, **kw):
        launched.append((self.binary.key, self.module, grid))
        args[0].copy_(args[1])
    monkeypatch.setattr(jit.CompiledKernel, "__call__", fake_call)
    job = {"spec": spec, "config": cfg, "config_id": cid, "shape": (4096,), "dtype": "fp32", "repeats": 1,
           "kernel": {"cache_key": comp["cache_key"], "abi": lowered.abi.to_json()}}
    res = measure_job(job, "cpu", lambda fn: (fn(), [1.0, 0.9, 1.1])[1], lambda: None)
    assert res["status"] == "ok" and traced == []
    assert launched[0] == (comp["cache_key"], None, (4,))            # the pool's binary, no IR: not traced


def test_the_gemm_template_launches_the_given_kernel_without_tracing(tmp_path, monkeypatch):
    """TUNING.run(..., kernel=K) launches K (the pool's binary, loaded by key) through the plan's grid and
    splits, and traces nothing (a fake GPU backend records the launch; CPU tensors)."""
    sys.path.insert(0, TESTS)
    from runtime_fakes import FakeBackend
    import gluon.kernels.gemm_sm90.host as gemm_launch
    import gluon.runtime.cuda as rt_cuda
    from gluon.language.kernel import KernelTemplate
    from gluon.tuning.templates.gemm_sm90 import TUNING
    monkeypatch.setenv("GLUON_CACHE_DIR", str(tmp_path))
    backend = FakeBackend(device_type="cpu")
    monkeypatch.setattr(rt_cuda, "DEFAULT_BACKEND", backend)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(gemm_launch, "_PLANS", {})
    monkeypatch.setattr(rt_cuda, "_SM_COUNTS", {0: 132})
    monkeypatch.setattr(gemm_launch, "_WORKSPACE", {(0, None): torch.empty(16)})
    config = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, SWIZZLE=128, STAGES=3, CONSUMER_WARPS=8, PRODUCER_WARPS=1,
                  PRODUCER_REGS=40, GROUP_M=8, EPILOGUE="tma")
    lowered = TUNING.lower(config, (1024, 2048, 512), "fp16", "sm90")
    kernel = TUNING.load({"cache_key": TUNING.build(lowered).key, "abi": lowered.abi.to_json()})
    monkeypatch.setattr(KernelTemplate, "trace", lambda *a, **k: pytest.fail("traced on the GPU worker"))
    inputs = {"a": torch.randn(1024, 512).half(), "b": torch.randn(512, 2048).half(),
              "out": torch.empty(1024, 2048).half()}
    TUNING.run(inputs, config, kernel=kernel)
    assert len(backend.calls) == 1 and kernel.module is None
    assert backend.calls[0][:3] == (64, 1, 1)                   # 8 x 8 tiles, one per program
    assert sorted(backend.calls[0][-3:]) == [512, 1024, 2048]  # M, N, K from the tensors' shapes


def test_copy_template_traces_what_the_launch_compiles(monkeypatch):
    from gluon.jit import lower
    from gluon.tuning.spec import load_spec, resolve_template
    spec = load_spec(os.path.join(REPO, "specs", "copy.toml"))
    t = resolve_template(spec)
    mod = sys.modules[type(t).__module__]
    mine = lower(t.legality(dict(XBLOCK=2048, NUM_WARPS=8, FORM="simt"), (1 << 20,), "fp32", "sm90"))
    x = torch.empty(1 << 10)
    launch = _captured_launch_module(monkeypatch, mod.copy_kernel, (x, x, 1 << 20), dict(XBLOCK=2048), (2048,), 8)
    assert mine == launch
    assert t.bytes((100,), "fp16") == 400 and t.roofline_s((10**9,), "fp32", 1e15, 4e12) == pytest.approx(2e-3)


def test_gemm_template_rejects_configs_with_reasons():
    from gluon.tuning.templates.gemm_sm90 import TUNING
    base = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, STAGES=3, CONSUMER_WARPS=8, PRODUCER_WARPS=1, EPILOGUE="tma")
    for bad, msg in ((dict(STAGES=5), "more than the 227.0 KiB"), (dict(CONSUMER_WARPS=6), "multiple of 4"),
                     (dict(PRODUCER_WARPS=2), "one producer warp"), (dict(CONSUMER_REGS=232), "CONSUMER_REGS"),
                     (dict(SPLIT_WGS=True, CONSUMER_REGS=250), "setmaxnreg takes a multiple of 8"),
                     (dict(NOPE=1), "no parameter NOPE")):
        with pytest.raises(GluonError, match=msg):
            TUNING.legality(dict(base, **bad), (512, 512, 512), "fp16", "sm90")
    with pytest.raises(GluonError, match="takes fp16, bf16"):
        TUNING.legality(base, (512, 512, 512), "fp32", "sm90")
    TUNING.legality(dict(base, SPLIT_WGS=True, CONSUMER_REGS=232), (512, 512, 512), "fp16", "sm90")
    # the model: one wave of 128x256 tiles is better than 1.03 waves
    one = TUNING.model_s(base, (128 * 12, 256 * 11, 4096), "fp16")
    more = TUNING.model_s(base, (128 * 12 + 128, 256 * 11, 4096), "fp16")
    assert more / one > 1.5

