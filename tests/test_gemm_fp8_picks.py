"""fp8 picks from 65 to 128 rows measured in the forty-fifth session (docs/PERF.md): block scales' 64 x 128 tiles on
one warpgroup over six stages where the pick's are 64 x 64 and K slices stay deep; kept where it lost."""
import pytest

from gluon.kernels.gemm_sm90.block_scaled import BLOCK_SCALED_ROWS, block_scaled_overrides
from gluon.kernels.gemm_sm90.config import resolve_config, split_k


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
