"""CLUSTER_K, split-K inside a cluster (the K slices of a tile on the cluster's CTAs, summed by them after a
cluster barrier), without a GPU: its config rules, grid and split count, and the machine code. The GPU checks
are tests/test_gemm_small_m_gpu.py's test_cluster_k_*."""
import pytest

import gluon
import gluon.language as gl
from gluon import DType
from gluon.backend.machine_code import sass_instructions
from gluon.ir import GluonError
from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, gemm_sm90, num_warps, split_k, stand_ins
from gluon.kernels.gemm_sm90.geometry import grid
from gluon.kernels.gemm_sm90.picks import DEEP_K_CONFIG, small_m_config
from gluon.kernels.gemm_sm90.kernel import _cluster_sum

DEEP_CK = DEEP_K_CONFIG.replace(CLUSTER_M=1, CLUSTER_K=8)


@pytest.mark.parametrize("kw,match", [
    (dict(CLUSTER_K=3, EPILOGUE="direct"), "2, 4 or 8 CTAs"),
    (dict(CLUSTER_K=16, EPILOGUE="direct"), "2, 4 or 8 CTAs"),
    (dict(CLUSTER_K=2, CLUSTER_M=2, EPILOGUE="direct"), "CLUSTER_M=1"),
    (dict(CLUSTER_K=2, SPLITK_FIXUP=True, EPILOGUE="direct"), "SPLITK_FIXUP=False"),
    (dict(CLUSTER_K=2, EPILOGUE="tma"), "EPILOGUE='direct'"),
])
def test_cluster_k_rules_name_the_field(kw, match):
    with pytest.raises(GluonError, match=rf"CLUSTER_K=\d+ takes .*{match}"):
        DEFAULT_CONFIG.replace(**kw)


def test_cluster_k_sets_the_split_count_the_grid_and_the_warps():
    cfg = DEEP_CK.resolve(2)
    assert cfg.EPILOGUE == "direct" and cfg.cluster_size == 8 and cfg.EARLY_LOADS and cfg.LEAN_PROLOGUE
    assert split_k(512, 512, 65536, cfg, 132) == 8
    assert grid(512, 512, cfg, 132, 8) == (16,)          # 16 tiles, each a cluster of 8 CTAs: 128 CTAs
    assert grid(2048, 2048, cfg, 132, 8) == (16,)        # 256 tiles: as many clusters as 132 SMs hold
    assert num_warps(cfg) == 8                           # the producer a whole warpgroup (cluster_sync)
    assert "CLUSTER_K=8" in cfg.describe() and "CLUSTER_K" not in DEFAULT_CONFIG.describe()


@pytest.mark.parametrize("cfg,km", [(DEEP_CK, False), (DEEP_CK.replace(CLUSTER_K=4), True),
                                    (small_m_config(64, 4096, 132).replace(CLUSTER_K=2), True),
                                    (small_m_config(128, 4096, 132).replace(CLUSTER_K=2), False)])
def test_cluster_k_machine_code(cfg, km):
    """One cluster barrier per tile (both roles meet it) and none at the start (the CTAs reach no barrier of each
    other's: one there cost 2-3% at decode shapes), no spills, the cluster size in the binary, and no second kernel
    needed: the sum's fp32 loads bypass L1."""
    cfg = cfg.resolve(2)
    ck = gemm_sm90.compile(*stand_ins(DType.bf16, splits=cfg.CLUSTER_K), num_warps=num_warps(cfg), CFG=cfg,
                           B_KMAJOR=km, N_MULTIPLE_16=True)
    ops = sass_instructions(ck.sass())
    assert ck.spills == 0 and ck.shared_bytes <= 227 * 1024
    assert ck.binary.metadata["num_ctas"] == cfg.CLUSTER_K
    assert ops["UCGABAR_ARV"] == 2 and ops["UCGABAR_WAIT"] == 2        # each tile's barrier, in both roles
    # the partials of the other CTAs read past L1 (.cg), 16 bytes a thread where N is a multiple of 16
    assert ops["LDG.E.128.STRONG.GPU"] >= 1 and ops["LDG.E.128"] == ops["LDG"]
    # the sum's chunks are loaded ahead of C's stores (ptxas keeps a load below an earlier store, so chunks loaded
    # after the previous one's store each wait their own round trip): at least half its loads before the first
    tail = [ln.split(";")[0].split()[-3:] for ln in ck.sass().split("UCGABAR_WAIT")[-1].splitlines()]
    kinds = [op[:3] for words in tail for op in words if op.startswith(("LDG.E.128", "STG.E"))]
    assert 2 * kinds[:kinds.index("STG")].count("LDG") >= kinds.count("LDG")


def test_cluster_k_refuses_a_different_split_count(interpret_env):
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_sm90 import launch
    a, b, c = torch.randn(64, 256).half(), torch.randn(256, 64).half(), torch.empty(64, 64).half()
    with pytest.raises(GluonError, match="splits=3 with CLUSTER_K=2"):
        launch(a, b, c, dict(CLUSTER_K=2, BLOCK_N=64, EPILOGUE="direct"), splits=3)


@pytest.mark.parametrize("M", [1, 16, 64, 128])
def test_choose_config_sums_two_k_slices_in_a_cluster(M):
    """Where the decode pick splits K in two (4096 x 4096: 64 B tiles of 64 rows; the swapped family's pick, as with
    overrides: with none, from 9 rows A's row tile halved takes its place, `_halved_rows`), the two slices are a
    2-CTA cluster's; where it splits in more or none, splitk_reduce or nothing sums them."""
    from gluon.kernels.gemm_sm90 import choose_config
    cfg = choose_config(M, 4096, 4096, 132, pairs=False)
    assert cfg.SWAP_AB and cfg.CLUSTER_K == 2 and split_k(M, 4096, 4096, cfg, 132) == 2
    assert choose_config(M, 2048, 8192, 132).CLUSTER_K == 1          # four slices
    assert choose_config(M, 28672 if M < 128 else 14336, 4096, 132).CLUSTER_K == 1   # no split
    cfg = cfg.resolve(2)
    ck = gemm_sm90.compile(*stand_ins(DType.bf16, splits=2), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=True)
    assert ck.spills == 0 and ck.shared_bytes <= 227 * 1024


def test_the_interpreter_runs_the_pick_without_its_cluster(interpret_env, monkeypatch):
    """The interpreter runs one CTA at a time: a pick's CLUSTER_K becomes as many K slices summed by
    splitk_reduce (the same sums, in the same order)."""
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_sm90 import host
    picked = small_m_config(8, 4096, 132).replace(CLUSTER_K=2, STAGES=4)
    monkeypatch.setattr(host, "resolve_config", lambda *a, **k: picked.resolve(2))
    a, c = torch.randn(8, 256).half(), torch.empty(8, 64).half()
    plan = host._plan(a, c, 8, 64, 256, None, True, None, True, "none")
    # summed by the second pass
    assert plan.splits == 2 and plan.reduce_kw is not None and plan.kw["CFG"].CLUSTER_K == 1


@pytest.mark.parametrize("K,ck", [(128, 2), (640, 4)])
def test_cluster_k_refuses_a_k_too_short_for_its_slices(interpret_env, K, ck):
    """Every CTA of the cluster needs a non-empty K slice (the workspace and the barrier count on CLUSTER_K
    partials): 1 k-step cannot make 2; 5 make at most 3 (2, 2, 1)."""
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_sm90 import launch
    a, b, c = torch.randn(64, K).half(), torch.randn(K, 64).half(), torch.empty(64, 64).half()
    with pytest.raises(GluonError, match=rf"CLUSTER_K={ck} splits K={K} into {ck} slices"):
        launch(a, b, c, dict(CLUSTER_K=ck, BLOCK_N=64, BLOCK_K=128, EPILOGUE="direct"))


@gluon.jit
def cluster_sum_kernel(C, W, M, N, ROWS: gl.constexpr, SLAB: gl.constexpr, CK: gl.constexpr, RW: gl.constexpr):
    """One program per ROWS x SLAB block of C: the GEMM's CLUSTER_K sum of the CK partials W [CK, M, N]."""
    _cluster_sum(C, W, gl.program_id(0) * ROWS, gl.program_id(1) * SLAB, M, N, ROWS, SLAB, CK, RW)


@pytest.mark.parametrize("ROWS,SLAB,CK,RW", [(128, 32, 2, 4), (128, 16, 8, 4), (128, 64, 2, 4), (128, 32, 4, 4),
                                             (8, 32, 2, 4), (64, 8, 8, 4),
                                             (128, 64, 2, 8), (128, 32, 4, 8)])    # two warpgroups (SWAP_AB)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cluster_sum_adds_the_slices_in_order_with_its_chunks_loaded_ahead(interpret_env, ROWS, SLAB, CK, RW, dtype):
    """The cluster's sum (its chunks' loads asked for ahead of earlier chunks' stores), run on its own in the
    interpreter: C equals the slices' fp32 partials added in slice order, bit for bit (an fp32 C shows the
    order), at sizes off the blocks; nothing outside M x N is written."""
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, dtype)
    torch.manual_seed(13)
    M, N = 2 * ROWS - 3, 3 * SLAB - 1
    w = torch.randn(CK, M, N) * torch.logspace(0, 3, CK).reshape(CK, 1, 1)   # magnitudes the order would change
    c = torch.full((M + 1, N), float("nan"), dtype=dtype)
    cluster_sum_kernel[(2, 3)](c, w.reshape(-1), M, N, ROWS=ROWS, SLAB=SLAB, CK=CK, RW=RW, num_warps=RW)
    ref = w[0].clone()
    for s in range(1, CK):
        ref = ref + w[s]
    assert torch.equal(c[:M], ref.to(dtype))
    assert torch.isnan(c[M]).all()
