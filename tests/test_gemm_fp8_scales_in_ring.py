"""SCALES_IN_RING: the fp8 block scales copied by the GEMM's producer into each ring stage (cp.async, counted by the
stage's `ready` barrier through `cp_async_arrive`) and read by the consumers from shared memory. In the CPU
interpreter against the dequantized product (every k-loop that takes it: the serial one, with turns, the pipelined
one, the 256-column halves; K orders, split K, three warpgroups, both scale_a layouts); its refusals; and in the
SASS of the block pick: no global load left in the consumers, the producer's copies counted before its expect."""
import re

import pytest

torch = pytest.importorskip("torch")

from gluon.ir import GluonError  # noqa: E402
from gluon.kernels.gemm_sm90 import GemmConfig, launch  # noqa: E402
from test_gemm_fp8_scales import _check_on_two_programs, _fp8  # noqa: E402


@pytest.mark.parametrize("M,N,K,splits,kw", [
    (512, 256, 512, None, dict(K_ZIGZAG=True)),                                 # odd units top down
    (200, 136, 520, 2, dict(K_ZIGZAG=False, EPILOGUE="direct")),                # K slices, the last one short
    (200, 136, 1000, 3, dict(K_ZIGZAG=True, EPILOGUE="direct")),                # zigzag slices of 3 and 2 k-steps
    (300, 256, 384, None, dict(BLOCK_M=192, CONSUMER_WGS=3, CONSUMER_REGS=152)),  # three warpgroups
    (512, 256, 384, None, dict(K_ZIGZAG=True, MMA_TURNS=True)),                 # turns
    (512, 256, 384, None, dict(K_ZIGZAG=True, PIPELINED_PROMOTION=True)),       # the pipelined loop
    (130, 200, 128, None, dict(PIPELINED_PROMOTION=True)),                      # ... one k-step
    (200, 136, 520, 2, dict(PIPELINED_PROMOTION=True, MMA_TURNS=True, EPILOGUE="direct")),
    (300, 600, 640, None, dict(BLOCK_N=256, CONSUMER_REGS=240, PRODUCER_REGS=24)),   # the halves
    (200, 300, 1000, 2, dict(BLOCK_N=256, CONSUMER_REGS=240, PRODUCER_REGS=24, K_ZIGZAG=True, EPILOGUE="direct")),
    (100, 250, 384, None, dict(BLOCK_M=64, CONSUMER_WGS=1, SPLIT_WGS=False, STAGES=6)),  # the decode tiles
    (300, 136, 384, None, dict(SPLIT_WGS=False)),                               # two warpgroups, one role
])
@pytest.mark.parametrize("m_major", [False, True])
def test_scales_in_the_ring_match_the_dequantized_product(interpret_env, monkeypatch, M, N, K, splits, kw, m_major):
    """Scales that differ by block and row, so a stage read with another k-step's (or row's, or half's) scales
    shows; a grid of 2, so programs run several units, both K orders and every ring slot more than once."""
    cfg = GemmConfig(**{**dict(BLOCK_N=128, BLOCK_K=128, SPLIT_WGS=True, STAGES=3, SCALES_IN_RING=True), **kw})
    _check_on_two_programs(monkeypatch, M, N, K, cfg, splits, m_major, seed=13)


def test_scales_in_the_ring_refuse_what_they_do_not_run(interpret_env):
    with pytest.raises(GluonError, match="SCALES_IN_RING=True reads each k-step's scales from the ring's stage"):
        GemmConfig(SCALES_IN_RING=True, SCALES_AHEAD=True)
    with pytest.raises(GluonError, match="EARLY_LOADS=True.*scales in the ring.*SCALES_IN_RING=True"):
        GemmConfig(SCALES_IN_RING=True, EARLY_LOADS=True)
    assert GemmConfig(SCALES_IN_RING=True).resolve(2).EARLY_LOADS is False
    a, b, c = _fp8(200, 320), _fp8(136, 320), torch.empty(200, 136).bfloat16()
    with pytest.raises(GluonError, match="SCALES_IN_RING=True is for fp8 block scales"):
        launch(a, b, c, b_kmajor=True, scale_a=torch.ones(1), scale_b=torch.ones(1),
               config=dict(SCALES_IN_RING=True))
    a, b, c = _fp8(300, 256), _fp8(256, 256), torch.empty(300, 256).bfloat16()
    with pytest.raises(GluonError, match="SCALES_IN_RING=True reads a role's scales in its accumulator's rows"):
        launch(a, b, c, b_kmajor=True, scale_a=torch.ones(300, 2), scale_b=torch.ones(2, 2),
               config=dict(BLOCK_M=256, BLOCK_N=128, CONSUMER_WGS=2, SPLIT_WGS=True, SCALES_IN_RING=True))


def _sass_ops(ck) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"^[^\t\n]*\t([^;\n]*);", ck.sass(), re.M)]


@pytest.mark.parametrize("tiles", [{}, dict(BLOCK_N=128), dict(BLOCK_N=128, PIPELINED_PROMOTION=True)])
def test_the_consumers_read_the_scales_from_shared_memory(tiles):
    """SASS at 4096^3 (the halves, the 128x128 tiles, their pipelined loop): no spills; no global load anywhere
    but the producer's cp.async copies (LDGSTS), which an ARRIVES.LDGSTSBAR hands to the stage's barrier before
    the expect that arms it and the TMA loads; the consumers' scales are shared-memory loads."""
    from gluon.kernels.gemm_sm90 import host
    from gluon.kernels.gemm_sm90.geometry import num_warps
    from gluon.kernels.gemm_sm90.picks import resolve_config
    from gluon.kernels.gemm_sm90.kernel import gemm_sm90
    from gluon.types import DType
    given = host.block_scaled_overrides(4096, 4096, 4096, 132, 2, True, dict(SCALES_IN_RING=True, **tiles))
    cfg = resolve_config(4096, 4096, 4096, 132, 2, True, given, 1)
    ck = gemm_sm90.compile(*host.stand_ins(DType.f8e4m3, DType.bf16), num_warps=num_warps(cfg), CFG=cfg,
                           B_KMAJOR=True, SCALE="block")
    assert ck.spills == 0
    ops = ["" if op.startswith("@!PT ") else op.split(" ", 1)[1] if op.startswith("@") else op for op in _sass_ops(ck)]
    assert not [op for op in ops if re.match(r"LDG\b|LDG\.", op)]
    copies = [i for i, op in enumerate(ops) if op.startswith("LDGSTS")]
    handed = [i for i, op in enumerate(ops) if op.startswith("ARRIVES.LDGSTSBAR")]
    tma = [i for i, op in enumerate(ops) if op.startswith("UTMALDG")]
    assert copies and len(handed) == 1 and max(copies) < handed[0] < min(tma)
    expect = [i for i, op in enumerate(ops) if op.startswith("SYNCS.ARRIVE.TRANS64 ") and handed[0] < i < min(tma)]
    assert expect
