"""fp8 in the GEMM's tuner adapter (gluon/tuning/templates/gemm_sm90.py) and specs/gemm_sm90_fp8.toml: the spec
loads, its configs trace as the fp8 launch specializes them (B K-major, per-tensor scales, a bf16 output), the
models count fp8's doubled rate, and the adapter's whole GPU path (inputs, run, reference, check, the loaded
callable) runs on CPU tensors in the interpreter against an fp64 product. GPU timing: `gluon tune` on the H200."""
from pathlib import Path

import pytest

from gluon import GluonError
from gluon.tuning.space import Choice
from gluon.tuning.spec import load_spec, resolve_template
from gluon.tuning.templates.gemm_sm90 import TUNING as T

SPECS = Path(__file__).resolve().parent.parent / "specs"
CFG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, STAGES=3, CONSUMER_WARPS=8, PRODUCER_WARPS=1, EPILOGUE="tma")


def test_the_fp8_spec_loads_and_names_the_gemm_template():
    spec = load_spec(SPECS / "gemm_sm90_fp8.toml")
    assert spec.dtypes == ["fp8e4m3"] and resolve_template(spec) is T
    assert spec.space.params["BLOCK_K"] == Choice((128, 256))


def test_the_fp8_spec_takes_the_seeds_with_fp8s_k_step():
    """The GEMM's seeds are the three 16-bit ones, then the same with BLOCK_K 128: the fp8 spec's space holds
    the last three."""
    spec = load_spec(SPECS / "gemm_sm90_fp8.toml")
    seeds = T.seed_configs()
    assert [s for s in seeds if spec.space.check({k: s[k] for k in spec.space.params}) is None] == seeds[3:]


def test_an_fp8_trace_is_the_k_major_scaled_kernel_with_a_bf16_output():
    k = T.trace(CFG, (4096, 4096, 4096), "fp8e4m3", "sm90").kernel
    assert k.constexprs["B_KMAJOR"] is True and k.constexprs["SCALE"] == "tensor"
    names = {p.name: str(p.value.type) for p in k.params}
    assert "f8e4m3" in names["A"] and "f8e4m3" in names["B"] and "bf16" in names["C"]
    # the config resolves for C's 2-byte elements, as launch resolves it for a bf16 output
    assert T.kernel_config(CFG, "fp8e4m3") == T.kernel_config(CFG, "bf16")


def test_the_models_count_fp8_at_twice_the_16_bit_rate():
    shape = (8192, 8192, 8192)                         # compute-bound
    assert T.roofline_s(shape, "fp8e4m3") == pytest.approx(T.roofline_s(shape, "bf16") / 2, rel=1e-3)
    assert T.model_s(CFG, shape, "fp8e4m3") < T.model_s(CFG, shape, "bf16")
    assert T.bytes(shape, "fp8e4m3") == 8192 * 8192 * (1 + 1 + 2)


@pytest.mark.parametrize("dtype", ["fp8e4m3", "fp8e5m2"])
def test_the_adapter_runs_fp8_in_the_interpreter_against_fp64(interpret_env, dtype):
    inp = T.make_inputs((256, 192, 384), dtype, "cpu", 3)
    assert inp["b"].shape == (192, 384) and str(inp["out"].dtype) == "torch.bfloat16"
    T.poison(inp)
    T.run(inp, CFG)
    ok, err, why = T.check(T.output(inp), T.reference(inp), 1e-2, 0.0)
    assert ok, why
    assert 1e-4 < err < 1e-2                            # the bf16 output rounds; a dropped scale would be ~1
    out = T.call(CFG, *T.call_args(inp), **T.call_kwargs(inp))
    assert out.equal(inp["out"])
    assert T.shape_of(*T.call_args(inp)) == (256, 192, 384) and T.dtype_of(*T.call_args(inp)) == dtype


def test_an_fp8_call_without_scales_says_what_to_pass(interpret_env):
    inp = T.make_inputs((128, 128, 128), "fp8e4m3", "cpu", 0)
    with pytest.raises(GluonError, match="takes scale_a= and scale_b="):
        T.call(CFG, inp["a"], inp["b"])
