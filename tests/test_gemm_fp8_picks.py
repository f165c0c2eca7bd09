"""fp8 picks from 65 to 128 rows measured in the forty-fifth session (docs/PERF.md): block scales' 64 x 128 tiles on
one warpgroup over six stages where the pick's are 64 x 64 and K slices stay deep, and per tensor FP8_RESIDENT's
64 x 128 tiles at two CTAs an SM where the swapped pick is 128 x 128 with no K split; each kept where it lost."""
import pytest

from gluon.kernels.gemm_sm90.block_scaled import BLOCK_SCALED_ROWS, block_scaled_overrides
from gluon.kernels.gemm_sm90.geometry import split_k
from gluon.kernels.gemm_sm90.picks import FP8_RESIDENT, resolve_config


def _block_pick(M, N, K, asked=None):
    return resolve_config(M, N, K, 132, 2, True, block_scaled_overrides(M, N, K, 132, 2, True, asked), 1)


# bench/gemm_fp8.py --graph --scales block, the pick against the 64 x 64 tiles it took before (s45b): 4-30% faster
@pytest.mark.parametrize("shape", [(128, 4096, 14336), (100, 4096, 11008), (96, 4096, 14336), (65, 4096, 14336),
                                   (128, 4096, 8192)])
def test_block_scales_take_64_row_tiles_at_n_4096_where_k_slices_stay_deep(shape):
    cfg = _block_pick(*shape)
    assert {k: getattr(cfg, k) for k in BLOCK_SCALED_ROWS} == BLOCK_SCALED_ROWS
    assert -(-shape[2] // 128) // split_k(*shape, cfg, 132) >= 28
    assert _block_pick(*shape, dict(BLOCK_N=64)).BLOCK_N == 64        # a caller's tile field keeps its own


# ... and where those tiles' K slices are 16 k-steps: 7-9% slower at 96 and 128 rows (s45a)
@pytest.mark.parametrize("shape", [(128, 4096, 4096), (96, 4096, 4096), (72, 4096, 4096)])
def test_block_scales_keep_64_column_tiles_where_k_slices_are_shallow(shape):
    cfg = _block_pick(*shape)
    assert (cfg.BLOCK_M, cfg.BLOCK_N) == (64, 64)


# bench/gemm_fp8.py --graph --scales tensor (s45c): the swapped pick against these tiles at two CTAs an SM
@pytest.mark.parametrize("shape", [(128, 14336, 4096), (96, 14336, 4096)])
def test_per_tensor_fp8_takes_two_ctas_an_sm_where_they_measured_faster(shape):
    cfg = resolve_config(*shape, 132, 2, True, None, 1)
    assert cfg == FP8_RESIDENT.resolve(2) and split_k(*shape, cfg, 132) == 1
    assert resolve_config(*shape, 132, 4, True, None, 1).SWAP_AB        # an fp32 C: not what was timed
    assert resolve_config(*shape, 132, 2, True, None, 2).CTAS_PER_SM == 1    # bf16 inputs: their own decode forms


@pytest.mark.parametrize("shape", [(128, 4096, 4096), (128, 8192, 28672), (128, 28672, 4096), (64, 14336, 4096)])
def test_per_tensor_fp8_keeps_its_pick_where_it_measured_faster(shape):
    """A K split (4096 x 4096: -15%; 8192 x 28672: -4%), 128 x 256 tiles unswapped (28672: level), up to 64 rows."""
    cfg = resolve_config(*shape, 132, 2, True, None, 1)
    assert cfg.CTAS_PER_SM == 1
