"""On the GPU: the copy kernels and the TMA+WGMMA tile GEMM against references (run with -m gpu)."""
import os
import sys

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

from copy_kernel import copy  # noqa: E402

from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, GemmConfig  # noqa: E402
from gluon.kernels.gemm_tile_sm90 import gemm_tile_sm90, grid  # noqa: E402
from gluon.runtime import LaunchError  # noqa: E402


@pytest.mark.parametrize("form", ["simt", "explicit", "persistent"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("n", [1, 1000, (1 << 20) + 3, 1 << 22])
def test_copy_exact(form, dtype, n):
    src = torch.randn(n, device="cuda").to(dtype)
    dst = torch.full_like(src, float("nan"))
    copy(dst, src, form=form)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)


def test_copy_4gib_fp32_exact():
    n = 1 << 30                                   # 4 GiB of fp32
    src = torch.randn(n, device="cuda")
    dst = torch.full_like(src, float("nan"))
    copy(dst, src, xblock=4096, num_warps=8)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)
    del src, dst
    torch.cuda.empty_cache()


SHAPES = [(256, 256, 512), (512, 384, 1024), (1024, 1024, 1024), (1000, 1000, 1000), (333, 200, 136), (128, 8192, 8192)]


def gemm_errors(run, M, N, K, in_dtype=torch.float16, out_dtype=None, b_kmajor=False, rounds=2) -> list[float]:
    """Relative errors against fp64 of `run(a, b, c)` on `rounds` fresh random inputs (a moving error is
    a race), b [K, N] or, with b_kmajor, [N, K]; the output is poisoned with NaN and must be fully written."""
    errs = []
    for _ in range(rounds):
        a = torch.randn(M, K, device="cuda", dtype=in_dtype)
        b = torch.randn(*((N, K) if b_kmajor else (K, N)), device="cuda", dtype=in_dtype)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=out_dtype or in_dtype)
        run(a, b, c)
        torch.cuda.synchronize()
        ref = a.double() @ (b.double().T if b_kmajor else b.double())
        assert not torch.isnan(c).any(), "some output elements were not written"
        errs.append(((c.double() - ref).norm() / ref.norm()).item())
    return errs


def assert_ws_gemm(M, N, K, cfg, in_dtype=torch.float16, out_dtype=None, b_kmajor=False, splits=None, rounds=2):
    """The persistent kernel (gemm_sm90.launch) with `cfg` (a dict of overrides of choose_config's pick, or a
    whole GemmConfig) and `splits` within 1e-2 of fp64 on `rounds` fresh inputs (gemm_errors: poisoned output,
    every element written)."""
    from gluon.kernels.gemm_sm90 import launch
    errs = gemm_errors(lambda a, b, c: launch(a, b, c, cfg, b_kmajor=b_kmajor, splits=splits), M, N, K, in_dtype,
                       out_dtype, b_kmajor, rounds)
    assert max(errs) < 1e-2, errs


@pytest.mark.parametrize("in_dtype,out_dtype", [(torch.float16, torch.float16), (torch.bfloat16, torch.bfloat16),
                                                (torch.float16, torch.float32)])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_gemm_tile_matches_fp32_reference(M, N, K, in_dtype, out_dtype):
    errs = gemm_errors(lambda a, b, c: gemm_tile_sm90[grid(M, N)](a, b, c, K), M, N, K, in_dtype, out_dtype)
    assert max(errs) < 1e-2, errs


@pytest.mark.parametrize("cfg", [dict(BLOCK_N=256, STAGES=4, WARPS=8), dict(BLOCK_N=256, STAGES=3, WARPS=8)],
                         ids=lambda c: f"128x{c['BLOCK_N']},{c['STAGES']}st,{c['WARPS']}w")
@pytest.mark.parametrize("M,N,K", [(1024, 1024, 1024), (1000, 1000, 1000), (333, 200, 136), (2048, 2048, 2048)])
def test_gemm_tile_two_warpgroups_matches_fp64_reference(M, N, K, cfg):
    """128x256 tiles on two warpgroups, the staging tile reusing the ring's bytes."""
    from gluon.kernels.gemm_tile_sm90 import launch
    errs = gemm_errors(lambda a, b, c: launch(a, b, c, **cfg), M, N, K)
    assert max(errs) < 1e-2, errs


def test_launch_with_cpu_tensor_is_a_clear_error():
    a = torch.randn(256, 64, dtype=torch.float16)                    # on the CPU
    b = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    c = torch.empty(256, 256, device="cuda", dtype=torch.float16)
    with pytest.raises(LaunchError, match=r"'A'.*CPU tensor.*\.cuda\(\)"):
        gemm_tile_sm90[grid(256, 256)](a, b, c, 64)


def test_grid_as_function_of_constexprs():
    from copy_kernel import copy_kernel
    n = 100_003
    src = torch.randn(n, device="cuda")
    dst = torch.full_like(src, float("nan"))
    copy_kernel[lambda meta: ((n + meta["XBLOCK"] - 1) // meta["XBLOCK"],), (1024,)](dst, src, n, XBLOCK=1024)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)


def test_copy_accepts_cuda_array_interface_objects():
    cupy = pytest.importorskip("cupy")
    from copy_kernel import copy_kernel
    n = 4096 + 5
    src = cupy.random.standard_normal(n, dtype=cupy.float32)
    dst = cupy.full(n, cupy.nan, dtype=cupy.float32)
    copy_kernel[((n + 1023) // 1024,), (1024,)](dst, src, n, XBLOCK=1024)
    cupy.cuda.runtime.deviceSynchronize()
    assert bool((dst == src).all())


def _with(cfg, **kw):
    """`cfg` (a dict of overrides, or a GemmConfig) with `kw` on top."""
    return cfg.replace(**kw) if isinstance(cfg, GemmConfig) else dict(cfg, **kw)


def _name(cfg) -> str:
    """A test id: a dict's items, or DEFAULT_CONFIG and the fields a GemmConfig changes."""
    if isinstance(cfg, GemmConfig):
        return ",".join(["DEFAULT_CONFIG"] + [f"{k}={v}" for k, v in cfg.to_dict().items()
                                              if v != getattr(DEFAULT_CONFIG, k)])
    return ",".join(f"{k}={v}" for k, v in cfg.items()) or "auto"


WS_CONFIGS = [
    {},                                                   # choose_config: the tiles picked by problem size
    DEFAULT_CONFIG,                                       # everywhere: 128x256x64, 3 stages, 2 WGs
    {"SPLIT_WGS": True},                                  # one role per consumer warpgroup (choose_config: several tiles per program)
    DEFAULT_CONFIG.replace(SPLIT_WGS=True),
    {"EPILOGUE": "direct", "STAGES": 4},
    {"CONSUMER_WGS": 1, "BLOCK_N": 128, "STAGES": 4},
    {"BLOCK_M": 64, "BLOCK_N": 64, "STAGES": 6, "CONSUMER_WGS": 1},     # SMALL_CONFIGS
    {"BLOCK_M": 128, "BLOCK_N": 64, "STAGES": 6, "CONSUMER_WGS": 1},
    {"SWIZZLE": 64, "BLOCK_K": 32, "STAGES": 4},          # the other swizzle widths (B64, B32)
    {"SWIZZLE": 32, "BLOCK_K": 16, "STAGES": 6},
    {"TMA_PREFETCH": True},                               # descriptors prefetched at kernel start
    DEFAULT_CONFIG.replace(TMA_PREFETCH=True, SPLIT_WGS=True),
]


@pytest.mark.parametrize("cfg", WS_CONFIGS, ids=_name)
@pytest.mark.parametrize("in_dtype,out_dtype", [(torch.float16, torch.float16), (torch.bfloat16, torch.bfloat16),
                                                (torch.float16, torch.float32)])
@pytest.mark.parametrize("M,N,K", [(1024, 1024, 1024), (1000, 1000, 1000), (333, 200, 136), (128, 8192, 8192),
                                   (2048, 4096, 512)])
def test_persistent_ws_gemm_matches_fp64_reference(M, N, K, in_dtype, out_dtype, cfg):
    assert_ws_gemm(M, N, K, cfg, in_dtype=in_dtype, out_dtype=out_dtype)


@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,N,K,cfg", [
    (2048, 2048, 2048, {}),                                # choose_config's pick: 16-byte stores (N % 16 == 0)
    (1536, 2816, 1000, {}),                                # one wave of 132 tiles, K tail
    (1000, 1000, 1000, {"EPILOGUE": "coalesced"}),         # edges; N % 16 != 0: element stores
    (333, 200, 136, {"EPILOGUE": "coalesced"}),
    (2048, 4096, 512, {"EPILOGUE": "coalesced"}),          # several tiles per program (the staging tile reused)
    (4096, 4096, 128, {}),                                 # K <= SHALLOW_K: split roles, many tiles a program
    (4000, 2064, 96, {"EPILOGUE": "coalesced"}),          # ... row and k-step edges, 192x128 tiles
], ids=["2048-auto", "1536x2816x1000-auto", "1000", "333x200x136", "2048x4096x512", "shallow-auto",
        "4000x2064x96"])
def test_coalesced_epilogue_gemm_matches_fp64_reference(M, N, K, cfg, dtype, b_kmajor):
    """The tile staged in shared memory and written back with (16-byte where N allows) stores by every
    consumer thread, instead of a TMA store."""
    assert_ws_gemm(M, N, K, cfg, in_dtype=dtype, out_dtype=dtype, b_kmajor=b_kmajor)


@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,N,K,cfg,splits", [
    (2048, 2048, 2048, {}, None),                              # one tile per program (coalesced epilogue)
    (2048, 2048, 64, {}, None),                                # one k-step: one early stage
    (1536, 2816, 1000, {"CLUSTER_M": 1}, None),                # K tail (unaligned rows: auto would cluster)
    (2048, 4096, 512, {}, None),                               # several units per program
    (2048, 4096, 512, {"SPLIT_WGS": True}, None),
    (1000, 1000, 1000, {}, None),                              # small tiles, edges
    (256, 512, 4096, DEFAULT_CONFIG, 3),                       # split-K: the first unit's K slice
], ids=["2048", "2048x2048x64", "1536x2816x1000", "2048x4096x512", "split_wgs", "1000", "splitk3"])
def test_early_loads_gemm_matches_fp64_reference(M, N, K, cfg, splits, dtype, b_kmajor):
    """EARLY_LOADS: the first unit's first stages loaded by the default warps before the warp roles."""
    assert_ws_gemm(M, N, K, _with(cfg, EARLY_LOADS=True), in_dtype=dtype, out_dtype=dtype, b_kmajor=b_kmajor,
                   splits=splits)


@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,N,K,cfg,splits", [
    (2048, 2048, 2048, {}, None),                              # early loads, coalesced epilogue
    (2048, 2048, 64, {}, None),                                # one early stage
    (1536, 2816, 1000, {"CLUSTER_M": 1}, None),                # K tail
    (2048, 4096, 512, {"EARLY_LOADS": False}, None),           # the inits alone
    (2048, 4096, 512, {"SPLIT_WGS": True}, None),
    (1000, 1000, 1000, {}, None),                              # small tiles: 6 early stages, 128-thread barriers
    (256, 512, 4096, DEFAULT_CONFIG, 3),                       # split-K
], ids=["2048", "2048x2048x64", "1536x2816x1000", "inits_only", "split_wgs", "1000", "splitk3"])
def test_lean_prologue_gemm_matches_fp64_reference(M, N, K, cfg, splits, dtype, b_kmajor):
    """LEAN_PROLOGUE: the prologue's CTA barriers dropped by backend/ptx_prologue.py but the one the inits need."""
    assert_ws_gemm(M, N, K, _with(cfg, LEAN_PROLOGUE=True), in_dtype=dtype, out_dtype=dtype, b_kmajor=b_kmajor,
                   splits=splits)


@pytest.mark.parametrize("M,N,K", [(2048, 2048, 64), (1000, 1000, 1000)])
def test_lean_prologue_gives_the_same_bits_every_launch(M, N, K):
    """A race the dropped barriers opened would show as a launch that differs: 50 launches on the same
    inputs (where the prologue is most of the kernel), each output poisoned first, all bit-identical."""
    from gluon.kernels.gemm_sm90 import launch
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    first = None
    for _ in range(50):
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        launch(a, b, c, dict(LEAN_PROLOGUE=True))
        if first is None:
            first = c
            ref = a.double() @ b.double()
            assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-2
        else:
            assert torch.equal(c, first)


ZIGZAG_CONFIGS = [
    {},                                                   # choose_config's pick (SPLIT_WGS: several tiles per program)
    DEFAULT_CONFIG,                                       # cooperative, early loads
    DEFAULT_CONFIG.replace(CLUSTER_M=2, SPLIT_WGS=True),  # both CTAs of a cluster load their parts of one k-step
    DEFAULT_CONFIG.replace(STAGES=4, EPILOGUE="ring"),    # the producer waits for c_free between units
]


@pytest.mark.parametrize("cfg", ZIGZAG_CONFIGS, ids=["auto", "cooperative", "cluster", "ring"])
@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,N,K,splits", [(4096, 4096, 1024, None), (2048, 4096, 512, None), (3000, 2000, 1504, None),
                                          (1000, 1000, 1000, None), (256, 512, 4096, 3), (4096, 4096, 200, 2)])
def test_k_zigzag_gemm_matches_fp64_reference(M, N, K, splits, dtype, b_kmajor, cfg):
    """K_ZIGZAG: a program's odd units load their K slice top down (the consumers sum the stages in the
    order they arrive): several units per program, K tails (the short last k-step loaded first), split-K
    slices of unequal length, clusters, the ring epilogue."""
    assert_ws_gemm(M, N, K, _with(cfg, K_ZIGZAG=True), in_dtype=dtype, out_dtype=dtype, b_kmajor=b_kmajor,
                   splits=splits, rounds=3)


CLUSTER_CONFIGS = [
    DEFAULT_CONFIG.replace(CLUSTER_M=2),                    # 2-CTA clusters, B multicast
    DEFAULT_CONFIG.replace(CLUSTER_M=2, SPLIT_WGS=True),
    DEFAULT_CONFIG.replace(CLUSTER_M=2, TMA_PREFETCH=True),  # both PTX passes
    DEFAULT_CONFIG.replace(CLUSTER_M=2, BLOCK_N=128, STAGES=4, EPILOGUE="direct"),
]


@pytest.mark.parametrize("cfg", CLUSTER_CONFIGS, ids=lambda c: f"BN={c.BLOCK_N},split={c.SPLIT_WGS}"
                         + (",TMA_PREFETCH" if c.TMA_PREFETCH else ""))
@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("in_dtype,out_dtype", [(torch.float16, torch.float16), (torch.bfloat16, torch.float32)])
@pytest.mark.parametrize("M,N,K", [(1024, 1024, 1024), (1000, 1000, 1000), (333, 200, 136), (2048, 4096, 512),
                                   (640, 768, 4000)])
def test_cluster_multicast_gemm_matches_fp64_reference(M, N, K, in_dtype, out_dtype, b_kmajor, cfg):
    """Clusters of 2 CTAs along M, each loading half of the shared B tile and multicasting it: odd tile
    counts (the second CTA of the last cluster is past M), K tails, column-major B, several tiles per
    cluster (the ring and its cluster-wide empty barriers across tiles)."""
    assert_ws_gemm(M, N, K, cfg, in_dtype=in_dtype, out_dtype=out_dtype, b_kmajor=b_kmajor)


# aligned, unaligned and tiny shapes, several tiles per program, a K tail, and split-K (3 K slices)
EDGE_SPLITK_SHAPES = [(1024, 1024, 1024, None), (1000, 1000, 1000, None), (333, 200, 136, None),
                      (2048, 4096, 512, None), (640, 768, 4000, None), (256, 512, 4096, 3)]


FP32_OUT_CONFIGS = [
    DEFAULT_CONFIG.replace(EPILOGUE="tma", STAGES=2),              # the 128 KiB fp32 tile staged beside 2 stages
    DEFAULT_CONFIG.replace(BLOCK_N=128, EPILOGUE="tma", STAGES=4),  # 128x128: a 64 KiB fp32 staging tile
]


@pytest.mark.parametrize("cfg", FP32_OUT_CONFIGS, ids=lambda c: f"128x{c.BLOCK_N},st={c.STAGES}")
@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("in_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,N,K,splits", EDGE_SPLITK_SHAPES)
def test_fp32_output_tma_epilogue_matches_fp64_reference(M, N, K, splits, in_dtype, b_kmajor, cfg):
    """An fp32 C through the TMA epilogue (no spills, unlike the direct stores of a 128x256 fp32 tile):
    edges, K tails, split-K, column-major B."""
    assert_ws_gemm(M, N, K, cfg, in_dtype=in_dtype, out_dtype=torch.float32, b_kmajor=b_kmajor, splits=splits)


RING_CONFIGS = [
    DEFAULT_CONFIG.replace(STAGES=4, EPILOGUE="ring"),
    DEFAULT_CONFIG.replace(STAGES=4, EPILOGUE="ring", SPLIT_WGS=True),
    DEFAULT_CONFIG.replace(STAGES=4, EPILOGUE="ring", CLUSTER_M=2),
    DEFAULT_CONFIG.replace(STAGES=4, EPILOGUE="ring", CONSUMER_WGS=1, BLOCK_N=128),   # two output tiles fit the ring
]


@pytest.mark.parametrize("cfg", RING_CONFIGS, ids=lambda c: f"BN={c.BLOCK_N},split={c.SPLIT_WGS},cl={c.CLUSTER_M}")
@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,N,K,splits", [(2048, 2048, 2048, None), (1000, 1000, 1000, None), (333, 200, 136, None),
                                          (4096, 4096, 512, None), (640, 768, 4000, None), (256, 512, 4096, 3)])
def test_ring_epilogue_gemm_matches_fp64_reference(M, N, K, splits, dtype, b_kmajor, cfg):
    """The output staged in the A ring: one unit per program (2048^3), and several (4096x4096x512: the
    producer waits for `c_free` before refilling the ring), K tails, split-K, clusters, column-major B."""
    assert_ws_gemm(M, N, K, cfg, in_dtype=dtype, b_kmajor=b_kmajor, splits=splits)


TMA2_CONFIGS = [
    DEFAULT_CONFIG.replace(STAGES=2, EPILOGUE="tma2", SPLIT_WGS=True, K_ZIGZAG=True),  # the K <= 128 pick's form
    DEFAULT_CONFIG.replace(STAGES=2, EPILOGUE="tma2"),                                 # cooperative
    DEFAULT_CONFIG.replace(STAGES=4, EPILOGUE="tma2", BLOCK_N=128, CLUSTER_M=2),
]


@pytest.mark.parametrize("cfg", TMA2_CONFIGS, ids=["split", "cooperative", "cluster"])
@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("M,N,K,splits", [(4096, 4096, 128, None), (8192, 2048, 64, None), (1000, 3000, 200, None),
                                          (333, 200, 136, None), (256, 512, 4096, 3)])
def test_two_staging_tiles_epilogue_matches_fp64_reference(M, N, K, splits, b_kmajor, cfg):
    """EPILOGUE="tma2": each role's tiles staged in two tiles in turn, the store of two tiles before waited for
    (many tiles a program at K <= 128, edges, split-K's partials, clusters), on three fresh inputs, C poisoned."""
    assert_ws_gemm(M, N, K, cfg, in_dtype=torch.bfloat16, b_kmajor=b_kmajor, splits=splits, rounds=3)


@pytest.mark.parametrize("splits", [2, 3])
@pytest.mark.parametrize("M,N,K", [(256, 512, 4096), (200, 300, 1000)])
def test_cluster_gemm_split_k(M, N, K, splits):
    """Both CTAs of a cluster take the same K slice of their two tiles; fp32 partials, then the reduce."""
    assert_ws_gemm(M, N, K, DEFAULT_CONFIG.replace(CLUSTER_M=2), in_dtype=torch.bfloat16, splits=splits)


@pytest.mark.parametrize("M,N,K", [(1024, 1024, 1024), (1000, 1000, 1000)])
def test_persistent_ws_gemm_column_major_b(M, N, K):
    from gluon.kernels.gemm_sm90 import launch
    errs = gemm_errors(lambda a, bt, c: launch(a, bt, c, b_kmajor=True), M, N, K, b_kmajor=True)  # B = bt.T
    assert max(errs) < 1e-2, errs


@pytest.mark.parametrize("splits", [2, 3, 5])
@pytest.mark.parametrize("M,N,K", [(256, 512, 4096), (200, 300, 1000)])
def test_persistent_ws_gemm_split_k(M, N, K, splits):
    from gluon.kernels.gemm_sm90 import launch
    errs = gemm_errors(lambda a, b, c: launch(a, b, c, splits=splits), M, N, K, torch.bfloat16)
    assert max(errs) < 1e-2, errs
