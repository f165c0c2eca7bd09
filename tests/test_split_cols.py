"""`gl.split_cols` (a WGMMA accumulator's column halves), on the CPU: the layouts the lowering writes
(Triton's verifier checks them when it parses the TTGIR) and the errors."""
import pytest

import gluon.language as gl
from gluon import SM90, DType, Layout, TensorRef, kernel
from gluon.backend.lowering.nvidia.hopper import _linear, _wgmma_bases
from gluon.ir import GluonError


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
