"""The checks of tests/diagnostics/ raise nothing on the shipped kernels and the examples: each traces
and passes the passes with no [GLxxx] error or warning (the false-positive guard of issue 20's checks)."""
import dataclasses
import os
import sys
import warnings

import pytest

import gluon.language as gl
from gluon import DType
from gluon.jit import run_passes
from gluon.language import PointerArg, ScalarArg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))


def _clean(trace):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        run_passes(trace())
    ours = [str(w.message) for w in got if "[GL" in str(w.message)]
    assert not ours, ours


GEMM_VARIANTS = [dict(), dict(B_KMAJOR=True), dict(EPILOGUE="direct", STAGES=4), dict(EPILOGUE="coalesced"),
                 dict(EPILOGUE="ring", STAGES=4), dict(SPLIT_WGS=True),
                 dict(CONSUMER_WGS=1, BLOCK_N=128, STAGES=4), dict(SWIZZLE=64, BLOCK_K=32), dict(CLUSTER_M=2),
                 dict(CLUSTER_M=2, B_KMAJOR=True), dict(EARLY_LOADS=True), dict(EARLY_LOADS=False),
                 dict(K_ZIGZAG=True), dict(SWAP_AB=True, BLOCK_N=128, CONSUMER_WGS=1), dict(SPLITS=3),
                 dict(SPLITS=3, SPLITK_FIXUP=True), dict(TMA_PREFETCH=True)]


def _ids(v):
    return ",".join(f"{k}={x}" for k, x in v.items()) or "default"


@pytest.mark.parametrize("variant", GEMM_VARIANTS, ids=_ids)
def test_gemm_sm90_variants_are_clean(variant):
    from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, gemm_sm90, num_warps, stand_ins
    v = dict(variant)
    b_kmajor = v.pop("B_KMAJOR", False)
    splits = v.pop("SPLITS", 1)
    cfg = DEFAULT_CONFIG.replace(**v).resolve(2)
    _clean(lambda: gemm_sm90.trace(*stand_ins(DType.f16, splits=splits), num_warps=num_warps(cfg), CFG=cfg,
                                   B_KMAJOR=b_kmajor))


def test_gemm_sm90_small_and_fp32_configs_are_clean():
    from gluon.kernels.gemm_sm90 import FP32_OUT_CONFIG, SMALL_CONFIGS, gemm_sm90, num_warps, stand_ins
    for cfg in SMALL_CONFIGS:
        cfg = cfg.resolve(2)
        _clean(lambda: gemm_sm90.trace(*stand_ins(DType.f16), num_warps=num_warps(cfg), CFG=cfg))
    cfg = FP32_OUT_CONFIG.resolve(4)
    _clean(lambda: gemm_sm90.trace(*stand_ins(DType.f16, DType.f32), num_warps=num_warps(cfg), CFG=cfg))


ATTN_VARIANTS = [(64, False, {}), (128, False, {}), (128, True, {}), (64, True, {}),
                 (128, False, dict(OVERLAP=False, PINGPONG=False)), (128, True, dict(PINGPONG=True)),
                 (128, False, dict(PERSISTENT=True)), (64, False, dict(CONSUMER_WGS=1, BLOCK_M=64))]


@pytest.mark.parametrize("head_dim,causal,over", ATTN_VARIANTS)
def test_attention_sm90_variants_are_clean(head_dim, causal, over):
    from gluon.kernels.attention_sm90 import attention_sm90, default_config, num_warps, stand_ins
    cfg = dataclasses.replace(default_config(head_dim), **over)
    _clean(lambda: attention_sm90.trace(*stand_ins(DType.bf16, 1000, 1000, 16, 1), CFG=cfg, HEAD_DIM=head_dim,
                                        CAUSAL=causal, num_warps=num_warps(cfg)))


def test_tile_kernels_and_quickstart_gemm_are_clean():
    from gluon import TensorRef
    from gluon.kernels.gemm_tile_sm90 import gemm_tile_sm90
    from gluon.kernels.tile_dots import mfma_tile_cdna3, mma_tile_sm80, tcgen05_tile_sm100
    from quickstart_gemm import quickstart_gemm
    refs = (TensorRef("A", DType.f16, shape=("M", "K")), TensorRef("B", DType.f16, shape=("K", "N")),
            TensorRef("C", DType.f16, shape=("M", "N")), DType.i32)
    _clean(lambda: gemm_tile_sm90.trace(*refs))
    _clean(lambda: gemm_tile_sm90.trace(*refs, num_warps=8, BLOCK_N=256, STAGES=4, WARPS=8))
    _clean(lambda: quickstart_gemm.trace(*refs))
    tile = (TensorRef("A", DType.f16, shape=(64, 32)), TensorRef("B", DType.f16, shape=(32, 64)),
            TensorRef("C", DType.f32, shape=(64, 64)))
    _clean(lambda: mma_tile_sm80.trace(*tile))
    _clean(lambda: mfma_tile_cdna3.trace(*tile))
    big = (TensorRef("A", DType.f16, shape=(128, 64)), TensorRef("B", DType.f16, shape=(64, 128)),
           TensorRef("C", DType.f32, shape=(128, 128)))
    _clean(lambda: tcgen05_tile_sm100.trace(*big))


def test_simt_examples_are_clean():
    from copy_kernel import copy_kernel, copy_kernel_explicit, copy_kernel_persistent
    from elementwise_kernel import default_config as swiglu_config, swiglu_kernel
    from rmsnorm_kernel import default_config as rms_config, rmsnorm_kernel
    from softmax_kernel import default_config as softmax_config, softmax_kernel
    f32 = gl.float32
    for k, kw in ((copy_kernel, dict(block=(4096,), XBLOCK=4096)),
                  (copy_kernel_explicit, dict(XBLOCK=4096, VEC=4, NUM_WARPS=8)),
                  (copy_kernel_persistent, dict(block=(4096,), XBLOCK=4096))):
        _clean(lambda: k.trace(PointerArg(f32), PointerArg(f32), ScalarArg(gl.int32, 16), arch="sm90", num_warps=8,
                               **kw))
    for dt in (gl.float16, gl.float32):
        cfg = swiglu_config(1 << 26, dt.bytes)
        _clean(lambda: swiglu_kernel.trace(PointerArg(dt), PointerArg(dt), PointerArg(dt), ScalarArg(gl.int32, 16),
                                           arch="sm90", num_warps=cfg["NUM_WARPS"], **cfg))
        for n_cols, d in ((4096, 16), (1000, 1), (8192, 16)):
            cfg = rms_config(8192, n_cols, dt.bytes)
            _clean(lambda: rmsnorm_kernel.trace(PointerArg(dt), PointerArg(dt), PointerArg(dt),
                                                *[ScalarArg(gl.int32, d)] * 4, ScalarArg(gl.float32), arch="sm90",
                                                num_warps=cfg["NUM_WARPS"], **cfg))
            cfg = softmax_config(8192, n_cols, dt.bytes, aligned=d == 16)
            _clean(lambda: softmax_kernel.trace(PointerArg(dt), PointerArg(dt), *[ScalarArg(gl.int32, d)] * 4,
                                                arch="sm90", num_warps=cfg["NUM_WARPS"], **cfg))
