"""`gl.split_cols` (a WGMMA accumulator's column halves) and the GEMM's subtiled epilogue built on it, on
the CPU: the layouts the lowering writes (Triton's verifier checks them when it parses the TTGIR), the
errors, and the machine code."""
import pytest

import gluon.language as gl
from gluon import SM90, DType, Layout, TensorRef, kernel
from gluon.backend.machine_code import sass_instructions
from gluon.backend.lowering.nvidia.hopper import _linear, _wgmma_bases
from gluon.ir import GluonError
from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, compile_variant, gemm_sm90, num_warps, resolve_auto, stand_ins


def test_accumulator_bases_are_tritons():
    """What Triton 3.6 prints for a 128x256 wgmma accumulator on 8 warps as a linear layout."""
    assert _linear(_wgmma_bases(8, 256)) == (
        "#ttg.linear<{register = [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32], [0, 64], [0, 128]], "
        "lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[16, 0], [32, 0], [64, 0]], block = []}>")
    assert _wgmma_bases(4, 64)["register"] == [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]]


def _halves_kernel(layout, shape=(64, 256)):
    @kernel(arch=SM90, num_warps=4)
    def k(C):
        acc = gl.zeros(shape, gl.float32, layout=layout)
        lo, hi = gl.split_cols(acc)
        assert lo.shape == (shape[0], shape[1] // 2) and hi.layout == lo.layout

    return k.trace(TensorRef("C", DType.f16, shape=("M", "N")))


def test_halves_are_the_wgmma_layout_of_half_the_width():
    k = _halves_kernel(Layout.wgmma((4, 1), instr_n=256))
    (op,) = [o for o in k.kernel.body.ops if o.kind == "split_cols"]
    lo = op.results[0].type
    assert lo.shape == (64, 128) and lo.layout == Layout.wgmma((4, 1), instr_n=128)


@pytest.mark.parametrize("layout,shape,match", [
    (Layout.blocked([1, 4], [4, 8], [4, 1], [1, 0]), (64, 256), r"takes a WGMMA accumulator"),
    (Layout.wgmma((4, 1), instr_n=256), (128, 256), r"more than one instruction tile per warp"),
    (Layout.wgmma((4, 1), instr_n=8), (64, 8), r"do not split into two WGMMA widths"),
])
def test_errors_say_what_splits(layout, shape, match):
    with pytest.raises(GluonError, match=match):
        _halves_kernel(layout, shape)


@pytest.mark.parametrize("variant,stores", [(dict(SPLIT_WGS=True), 8), (dict(), 4), (dict(BLOCK_N=128, SPLIT_WGS=True), 4)],
                         ids=["split_wgs", "cooperative", "128x128"])
def test_subtiled_epilogue_frees_room_for_a_fourth_stage(variant, stores):
    """64-column subtiles, each staged in one of two 8 KiB buffers per warpgroup and stored by its own TMA
    store: the same stmatrix stores as one staging tile, 32 KiB of staging instead of 64, so 4 stages of
    128x256x64 fit (229,640 bytes with the barriers, of 232,448)."""
    sub = compile_variant(EPILOGUE="subtiled", STAGES=4, **variant)
    tma = compile_variant(EPILOGUE="tma", STAGES=3, **variant)
    a, b = sass_instructions(sub.sass()), sass_instructions(tma.sass())
    assert a["UTMASTG.2D"] == stores and a["STSM.16.M88.4"] == b["STSM.16.M88.4"]
    assert a["HGMMA"] == b["HGMMA"] and sub.spills == 0
    assert sub.shared_bytes <= 227 * 1024
    if variant.get("BLOCK_N", 256) == 256:
        assert sub.shared_bytes > 4 * 48 * 1024 > tma.shared_bytes - 64 * 1024


def test_subtiled_ttgir_splits_the_accumulator_three_ways_per_role():
    from gluon.backend.lowering import lower_module
    from gluon.jit import run_passes
    cfg = resolve_auto(dict(DEFAULT_CONFIG, EPILOGUE="subtiled", SPLIT_WGS=True), 2)
    text = lower_module(run_passes(gemm_sm90.trace(*stand_ins(DType.f16), num_warps=num_warps(cfg), **cfg))).ttgir
    assert text.count("tt.split ") == 6 and text.count("tt.reshape ") == 6 and text.count("tt.trans ") == 6
    assert text.count("ttng.async_tma_store_wait {pendings = 1") == 8


@pytest.mark.parametrize("kw", [dict(PINGPONG=True, BLOCK_N=128), dict(CONSUMER_WGS=1, BLOCK_N=128),
                                dict(BLOCK_N=64, CONSUMER_WGS=1, BLOCK_M=64)])
def test_subtiled_epilogue_says_what_it_needs(kw):
    cfg = dict(DEFAULT_CONFIG, EARLY_LOADS=False, LEAN_PROLOGUE=False, EPILOGUE="subtiled", **kw)
    with pytest.raises(GluonError, match=r"EPILOGUE='subtiled' splits each consumer warpgroup's"):
        gemm_sm90.trace(*stand_ins(DType.f16), num_warps=num_warps(cfg), **cfg)
