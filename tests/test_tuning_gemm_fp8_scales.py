"""fp8 with per-row/column and with block scales in the tuner (gluon/tuning/templates/gemm_sm90_fp8_scales.py,
specs/gemm_sm90_fp8_rowcol.toml and specs/gemm_sm90_fp8_block.toml): the specs load and name their templates,
their configs trace as the scaled launch specializes them, a config the block path cannot run is pruned with
the kernel's reason, the seeds are in the spaces, and each adapter's whole GPU path (inputs, run, reference,
check, the loaded callable) runs on CPU tensors in the interpreter against the fp64 dequantized product. GPU
timing: `gluon tune` on the H200."""
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gluon import GluonError  # noqa: E402
from gluon.tuning.spec import load_spec, resolve_template  # noqa: E402
from gluon.tuning.templates.gemm_sm90_fp8_scales import BLOCK as T  # noqa: E402
from gluon.tuning.templates.gemm_sm90_fp8_scales import ROWCOL  # noqa: E402

SPECS = Path(__file__).resolve().parent.parent / "specs"
CFG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, STAGES=3, CONSUMER_WARPS=8, PRODUCER_WARPS=1, EPILOGUE="tma",
           SPLIT_WGS=True, K_ZIGZAG=True)


def test_the_spec_loads_and_names_the_block_template():
    spec = load_spec(SPECS / "gemm_sm90_fp8_block.toml")
    assert spec.name == "gemm_sm90_fp8_block" and resolve_template(spec) is T and spec.dtypes == ["fp8e4m3"]
    configs = list(spec.space.grid())
    assert {c["BLOCK_N"] for c in configs} == {64, 128, 256} and {c["BLOCK_K"] for c in configs} == {128}
    halves = [c for c in configs if c["BLOCK_N"] == 256]
    assert halves and all(c["SPLIT_WGS"] and c["BLOCK_M"] == 16 * c["CONSUMER_WARPS"] and c["CONSUMER_REGS"] == 240
                          and not c["MMA_TURNS"] for c in halves)
    for seed in T.seed_configs(shapes=spec.shapes, dtypes=spec.dtypes):
        assert {k: seed[k] for k in spec.space.params} in configs


def test_the_block_spec_has_decode_buckets_seeded_with_launchs_pick():
    """The spec's buckets of a few rows (gluon.load serves calls of up to 128 rows from those only) are seeded with
    what `launch` runs there: 64x128 tiles on one warpgroup at 16 x 28672 x 4096 (`block_scaled_decode`), 64x64 at
    64 x 4096 x 4096; a pick equal to a fixed seed is not measured twice."""
    spec = load_spec(SPECS / "gemm_sm90_fp8_block.toml")
    decode = [s for s in spec.shapes if s[0] <= 128]
    assert decode
    seeds = T.seed_configs(shapes=spec.shapes, dtypes=spec.dtypes)
    tiles = {(s["BLOCK_M"], s["BLOCK_N"], s["CONSUMER_WARPS"]) for s in seeds}
    assert {(64, 128, 4), (64, 64, 4)} <= tiles
    names = list(spec.space.params)
    projected = [tuple(s[k] for k in names) for s in seeds]
    assert len(projected) == len(set(projected))
    assert T.pick((16, 28672, 4096), "fp8e4m3")["STAGES"] == 6
    # the picks first: a short search (`gluon tune --trials 4`) measures them before any other form (s45f built
    # 128x128 tiles into every bucket, 10-20% slower than `launch` at the decode ones, when they came last)
    picks = [T.pick(s, "fp8e4m3") for s in spec.shapes]
    first = [{k: p[k] for k in names} for p in picks]
    distinct = [c for i, c in enumerate(first) if c not in first[:i]]
    assert [{k: s[k] for k in names} for s in seeds[:len(distinct)]] == distinct


def test_a_trace_is_the_block_scaled_kernel():
    k = T.trace(CFG, (4096, 4096, 4096), "fp8e4m3", "sm90").kernel
    assert k.constexprs["SCALE"] == "block" and k.constexprs["B_KMAJOR"] is True


def test_a_config_the_block_path_cannot_run_fails_to_trace_with_the_reason():
    with pytest.raises(GluonError, match="BLOCK_N 64 or 128"):
        T.trace(dict(CFG, BLOCK_N=32), (4096, 4096, 4096), "fp8e4m3", "sm90")
    with pytest.raises(GluonError, match="BLOCK_N=256 run each consumer warpgroup's 64 rows.*MMA_TURNS=True"):
        T.trace(dict(CFG, BLOCK_N=256, MMA_TURNS=True), (4096, 4096, 4096), "fp8e4m3", "sm90")


@pytest.mark.parametrize("dtype", ["fp8e4m3", "fp8e5m2"])
def test_the_adapter_runs_in_the_interpreter_against_fp64(interpret_env, dtype):
    inp = T.make_inputs((256, 200, 384), dtype, "cpu", 3)
    assert inp["scale_a"].shape == (256, 3) and inp["scale_b"].shape == (2, 3)
    T.poison(inp)
    T.run(inp, CFG)
    ok, err, why = T.check(T.output(inp), T.reference(inp), 1e-2, 0.0)
    assert ok, why
    # the same product under one scale per tensor is far off: the blocks' scales are what the check holds to
    flat = (inp["a"].double() * inp["scale_a"].mean().double()) @ (inp["b"].double() * inp["scale_b"].mean().double()).T
    assert not T.check(flat, T.reference(inp), 1e-2, 0.0)[0]
    out = T.call(CFG, *T.call_args(inp), **T.call_kwargs(inp))
    assert out.equal(inp["out"])


def test_a_call_without_scales_names_their_shapes(interpret_env):
    inp = T.make_inputs((128, 256, 300), "fp8e4m3", "cpu", 0)
    with pytest.raises(GluonError, match=r"scale_a= \(\[128, 3\] fp32\) and scale_b= \(\[2, 3\] fp32\)"):
        T.call(CFG, inp["a"], inp["b"])


def test_the_rowcol_spec_loads_its_seeds_are_in_the_space_and_it_traces_rowcol():
    spec = load_spec(SPECS / "gemm_sm90_fp8_rowcol.toml")
    assert spec.name == "gemm_sm90_fp8_rowcol" and resolve_template(spec) is ROWCOL
    configs = list(spec.space.grid())
    seeds = [{k: s[k] for k in spec.space.params} for s in ROWCOL.seed_configs()]
    assert seeds and all(s in configs for s in seeds)
    k = ROWCOL.trace(dict(CFG, BLOCK_N=256), (4096, 4096, 4096), "fp8e4m3", "sm90").kernel
    assert k.constexprs["SCALE"] == "rowcol"


def test_the_rowcol_adapter_runs_in_the_interpreter_against_fp64(interpret_env):
    inp = ROWCOL.make_inputs((256, 200, 384), "fp8e5m2", "cpu", 4)
    assert inp["scale_a"].shape == (256,) and inp["scale_b"].shape == (200,)
    ROWCOL.poison(inp)
    ROWCOL.run(inp, CFG)
    ok, err, why = ROWCOL.check(ROWCOL.output(inp), ROWCOL.reference(inp), 1e-2, 0.0)
    assert ok, why
    swapped = dict(inp, scale_a=inp["scale_a"].flip(0))               # another row's scale fails the check
    assert not ROWCOL.check(ROWCOL.output(inp), ROWCOL.reference(swapped), 1e-2, 0.0)[0]
    with pytest.raises(GluonError, match=r"scale_a= \(\[256\] fp32\) and scale_b= \(\[200\] fp32\)"):
        ROWCOL.call(CFG, inp["a"], inp["b"])
