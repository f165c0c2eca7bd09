"""`gluon.load` of a GEMM build: which built bucket a call runs (gluon/loader.py with the GEMM template's
`bucket_distance` and `fallback_config`); CPU only."""
import pytest
import torch


def test_the_gemm_loader_keeps_the_nearest_bucket_of_its_regime():
    """Nearest in log space among buckets on the call's side of the decode boundary (SMALL_M rows); a call no
    bucket serves (the other side, another dtype) runs `launch`'s own pick, with the loader's warning."""
    from gluon.loader import LoadedKernel
    from gluon.tuning.templates.gemm_sm90 import TUNING as GEMM
    k = LoadedKernel.__new__(LoadedKernel)
    k.name, k.template, k._choice = "gemm_sm90", GEMM, {}
    k.entries = [{"shape": [8192, 8192, 8192], "dtype": "fp16", "config": {"BLOCK_N": 256}},
                 {"shape": [1024, 1024, 1024], "dtype": "fp16", "config": {"BLOCK_N": 128}},
                 {"shape": [16, 4096, 4096], "dtype": "fp16", "config": {"SWAP_AB": True, "BLOCK_M": 16}}]
    assert k.bucket((6000, 6000, 6000), "fp16")["config"] == {"BLOCK_N": 256}
    assert k.bucket((512, 2048, 1024), "fp16")["config"] == {"BLOCK_N": 128}
    assert k.bucket((129, 4096, 4096), "fp16")["config"] == {"BLOCK_N": 128}
    assert k.bucket((1, 28672, 4096), "fp16")["config"] == {"SWAP_AB": True, "BLOCK_M": 16}
    assert k.bucket((128, 1024, 1024), "fp16")["config"] == {"SWAP_AB": True, "BLOCK_M": 16}
    k.entries = k.entries[:2]
    k._choice = {}
    for shape, dtype in (((1, 4096, 4096), "fp16"), ((512, 512, 512), "bf16")):
        with pytest.warns(UserWarning, match="no built bucket serves shape"):
            e = k.bucket(shape, dtype)
        assert e["fallback"] is True and e["config"] == {}
    a = torch.empty(64, 32, dtype=torch.float16)
    assert GEMM.shape_of(a, torch.empty(32, 16, dtype=torch.float16), out=None) == (64, 16, 32)
    assert GEMM.dtype_of(a, a, out=None) == "fp16" and GEMM.call_kwargs({}) == {}


def test_a_gemm_call_no_bucket_serves_runs_launchs_own_pick(interpret_env, monkeypatch):
    """A decode call on a build of prefill buckets: `launch` with no config (its decode pick), not the prefill
    bucket's tiles; right against torch (the CPU interpreter)."""
    import gluon.kernels.gemm_sm90 as gemm
    import gluon.tuning.templates.gemm_sm90 as template
    from gluon.loader import LoadedKernel
    seen = []
    real = gemm.launch

    def spy(a, b, c, config=None, **kw):
        seen.append(config)
        return real(a, b, c, config, **kw)
    monkeypatch.setattr(template, "launch", spy)
    k = LoadedKernel.of_entries("gemm_sm90", template.TUNING,
                                [{"shape": [4096, 4096, 4096], "dtype": "fp16", "config": {"BLOCK_N": 256}}])
    a, b = torch.randn(3, 64).half(), torch.randn(64, 80).half()
    with pytest.warns(UserWarning, match="3x80x64 fp16"):
        c = k(a, b)
    assert seen == [None]
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2)


def test_a_loaded_gemm_binds_its_calls_by_the_operands_shapes_and_dtype(monkeypatch):
    """The loader's cache of bound calls keys a GEMM call on what its bucket depends on (`bucket_key`: a's and b's
    shapes, a's dtype): other strides, `out` or scales reuse the bound call (launch keys its own fast path on them);
    another shape binds again; anything but two positional tensors takes the loader's general key."""
    from gluon.loader import LoadedKernel
    from gluon.tuning.templates.gemm_sm90 import TUNING as GEMM
    binds = []
    monkeypatch.setattr(GEMM, "bind", lambda config: binds.append(config) or (lambda *a, **k: "ran"))
    k = LoadedKernel.of_entries("gemm_sm90", GEMM, [{"shape": [64, 64, 64], "dtype": "fp16", "config": {}}])
    a, b = torch.empty(64, 64, dtype=torch.float16), torch.empty(64, 32, dtype=torch.float16)
    wide = torch.empty(64, 128, dtype=torch.float16)
    for call in ((a, b), (a, b), (wide[:, :64], b), (a, b, torch.empty(64, 32, dtype=torch.float16))):
        assert k(*call) == "ran"
    assert len(binds) == 1
    k(a, torch.empty(64, 48, dtype=torch.float16))
    assert len(binds) == 2
    assert GEMM.bucket_key((a,), {"b": b}) is None and GEMM.bucket_key(([1.0], b), {}) is None
    k(a, b=b)                                           # the general key: bound once more
    assert len(binds) == 3
