"""On the GPU: attention_sm90 tuned, built and loaded end to end, as a user runs it.

A tiny copy of specs/attention_sm90.toml (small shapes: D 128 with and without the causal mask, D 64 without;
bf16; a 4-config space) is tuned for 3 trials on the real measurement path (GpuWorker processes running
gluon.tuning.measure:measure_on_gpu: NaN-poisoned output, the fp32 reference, torch SDPA on cuDNN as the
baseline), then `gluon build --best`, then `gluon.load`: every bucket's call is checked against the
reference, runs the built binary (no recompilation), and a shape with no bucket falls back to the default
config with a warning. Run with `python -m pytest -m gpu -q tests/test_attention_tuning_gpu.py`.
"""
import importlib.util
import json
import warnings

import pytest

from conftest import skip_unless_sm90

pytestmark = pytest.mark.gpu

for _m in ("optuna", "pandas", "pyarrow", "pydantic", "torch"):
    if importlib.util.find_spec(_m) is None:
        pytest.skip(f"needs {_m}", allow_module_level=True)

SHAPES = [[2, 4, 512, 128, False], [2, 4, 512, 128, True], [1, 8, 1024, 64, False]]
RTOL = 2e-2


@pytest.fixture(autouse=True)
def _sm90():
    skip_unless_sm90("the kernel")


def _spec_file(tmp_path):
    from test_attention_tuning import _tiny_spec
    return _tiny_spec(tmp_path, name="attention_sm90_tiny", shapes=SHAPES,
                      params={"BLOCK_N": [64, 128], "STAGES": [2, 3]},
                      extra="time_limit_s = 300\ntrial_timeout_s = 120\n")


def test_tune_build_load_and_run(tmp_path):
    import torch

    import gluon
    from gluon.tuning.build import build_best
    from gluon.tuning.results import ResultsStore, summary
    from gluon.tuning.spec import load_spec
    from gluon.tuning.templates.attention_sm90 import TUNING, reference_attention
    from gluon.tuning.tuner import tune
    spec = load_spec(_spec_file(tmp_path))
    s = tune(spec, gpus=[0], dry_run=False, progress=False, trials=3, results_root=str(tmp_path / "results"),
             tuning_root=str(tmp_path / "tuning"))
    assert s.best_config is not None, s
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = ResultsStore(tmp_path / "results").read(spec.name)
    first = df[~df["retimed"].fillna(False).astype(bool)]
    assert first["config_id"].nunique() == 3                      # 3 trials of the 4 legal configs
    ok = first[first["status"] == "ok"]
    assert len(ok) >= len(SHAPES), first[["status", "reason"]].to_string()   # the seed at least: every case ok
    assert (ok["max_err"] < RTOL).all() and (ok["ratio"] > 0).all() and (ok["baseline_ms"] > 0).all()
    assert set(summary(df)["shape"]) == {"2x4x512x128x0", "2x4x512x128x1", "1x8x1024x64x0"}

    (manifest,) = build_best(tmp_path / "results", tmp_path / "specs", tmp_path / "build", log=lambda m: None)
    entries = json.loads(manifest.read_text())["entries"]
    assert len(entries) == len(SHAPES)
    attn = gluon.load(manifest)
    import gluon.kernels.attention_sm90.host as host
    for e in entries:
        B, H, S, D, C = e["shape"]
        g = torch.Generator(device="cuda").manual_seed(1234)
        q, k, v = (torch.randn(B, H, S, D, device="cuda", generator=g).bfloat16() for _ in range(3))
        host._PLANS.clear()
        o = attn(q, k, v, causal=bool(C))
        ref = reference_attention(q, k, v, bool(C))
        ok_, _, why = TUNING.check(o, ref, RTOL, 0.0)
        assert ok_, (e["shape"], why)
        # the call ran the binary the build installed (the trace matched: a cache hit, nothing recompiled)
        (plan,) = host._PLANS.values()
        assert plan.ck.binary.key == e["cache_key"], e["shape"]
        # scale and return_lse pass through
        o2, lse = attn(q, k, v, causal=bool(C), scale=0.1, return_lse=True)
        s_ = (q.float() @ k.float().transpose(-1, -2)) * 0.1
        if C:
            s_ = s_.masked_fill(torch.ones(S, S, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
        assert torch.allclose(lse, torch.logsumexp(s_, -1), atol=5e-3, rtol=1e-3)
        assert TUNING.check(o2, reference_attention(q, k, v, bool(C), 0.1), RTOL, 0.0)[0]
    # a shape with no bucket (D 64 with the mask): the default config, a warning, a correct result
    q, k, v = (torch.randn(1, 2, 300, 64, device="cuda").bfloat16() for _ in range(3))
    with pytest.warns(UserWarning, match="no built bucket serves shape 1x2x300x64x1 bf16"):
        o = attn(q, k, v, causal=True)
    assert TUNING.check(o, reference_attention(q, k, v, True), RTOL, 0.0)[0]
