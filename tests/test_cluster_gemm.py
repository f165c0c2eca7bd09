"""Thread-block clusters with TMA multicast, on the CPU: the PTX cluster pass (gluon/backend/ptx/cluster.py),
the DSL's cluster builtins and their errors, the barrier checks that count multicast bytes, and the
machine code of the GEMM with CLUSTER_M=2. The CLUSTER_M kernels run on the H200 in tests/test_gpu.py."""
import pytest

import gluon.language as gl
from gluon import SM90, DType, Layout, SwizzleMode, TensorRef, WarpRole, kernel
from gluon.abi import KernelABI, KernelParam, ParamKind
from gluon.backend.compile import cache_key_parts
from gluon.backend.machine_code import sass_instructions
from gluon.backend.ptx import cluster as ptx_cluster
from gluon.ir import GluonError
from gluon.jit import run_passes
from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, gemm_sm90, num_warps, stand_ins
from gluon.language import mbarrier, smem, tma_load, warp_role

# ------------------------------------------------------------------------------ the PTX pass

PTX = """
.visible .entry k(
	.param .align 64 .b8 k_param_0[128],
	.param .align 64 .b8 k_param_1[128]
)
{
	mov.b64 	%rd4, k_param_0;
	mov.b64 	%rd6, k_param_1;
	cvta.param.u64 	%rd2, %rd6;
	cvta.param.u64 	%rd7, %rd4;
	@%p6 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r157], [%rd7, {%r1, %r2}], [%r156];
	@%p7 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r159], [%rd2, {%r3, %r1}], [%r156];
	@%p10 mbarrier.arrive.shared::cta.b64 _, [%r256], 3098;
	@%p11 mbarrier.arrive.shared::cta.b64 _, [%r266];
}
"""


def test_multicast_rewrites_only_the_named_descriptor_loads():
    out, stats = ptx_cluster.rewrite(PTX, "k", 2, {"B": 1})
    assert stats["multicast_copies"] == {"B": 1}
    lines = [ln for ln in out.splitlines() if "cp.async.bulk.tensor" in ln]
    assert lines[0].endswith("[%r156];")                                   # A (param 0): untouched
    assert ".multicast::cluster [%r159], [%rd2, {%r3, %r1}], [%r156], 3;" in lines[1]


def test_cluster_arrive_becomes_local_plus_remote_arrives():
    out, stats = ptx_cluster.rewrite(PTX, "k", 2, {})
    assert stats["cluster_arrives"] == 1
    assert "3098" not in out
    assert "@%p10 mbarrier.arrive.shared::cta.b64 _, [%r256];" in out            # this CTA's barrier
    assert "mapa.shared::cluster.u32 %gluon_remote, %r256, %gluon_peer;" in out   # the peer's, by its rank
    assert "@%p10 mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%gluon_remote];" in out
    assert "@%p11 mbarrier.arrive.shared::cta.b64 _, [%r266];" in out             # plain arrives: untouched
    out4, _ = ptx_cluster.rewrite(PTX, "k", 4, {})
    assert out4.count("mbarrier.arrive.relaxed.cluster") == 3                     # every other CTA once


def test_cluster_pass_errors_name_what_is_missing():
    with pytest.raises(ptx_cluster.ClusterPassError, match="no register holds descriptor C"):
        ptx_cluster.rewrite(PTX, "k", 2, {"C": 5})
    no_loads = PTX.replace("[%rd2, {%r3, %r1}]", "[%rd7, {%r3, %r1}]")
    with pytest.raises(ptx_cluster.ClusterPassError, match="no TMA load through descriptor B"):
        ptx_cluster.rewrite(no_loads, "k", 2, {"B": 1})
    odd = PTX.replace("[%r256], 3098;", "[%r256], %r9; // 3098 with mbarrier.arrive 3098")
    with pytest.raises(ptx_cluster.ClusterPassError, match="cluster marker count"):
        ptx_cluster.rewrite(odd, "k", 2, {})


def test_cluster_abi_keys_the_cache():
    """A cluster kernel's binary depends on the cluster pass's source, the cluster size and which descriptors
    multicast (at which PTX parameter): all in the cache key; a kernel without a cluster has none of it."""
    target = ("cuda", 90, 32)
    a = KernelParam("A", ParamKind.TENSORDESC, DType.f16, block_shape=(128, 64), swizzle_bytes=128, box=(128, 64))
    b = KernelParam("B", ParamKind.TENSORDESC, DType.f16, block_shape=(64, 128), swizzle_bytes=128, box=(64, 64),
                    multicast=True)
    abi = KernelABI("k", target, (a, b), num_ctas=2)
    assert abi.launch_index("B") == 5                     # after A's CUtensorMap, 2 shape and 2 stride parameters
    key = dict(cache_key_parts("module {}", target, abi=abi))
    assert key["ptx_cluster"] == [ptx_cluster.source_hash(), 2, [("B", 5)]]
    assert "ptx_cluster" not in dict(cache_key_parts("module {}", target, abi=KernelABI("k", target, (a, b))))


# ------------------------------------------------------------------------------ DSL errors


def _tma_kernel(cluster: int, multicast: bool, cluster_arrive: bool, expect: int):
    @kernel(arch=SM90, num_warps=4)
    def k(A):
        if cluster > 1:
            gl.set_cluster(cluster)
        buf = smem(A.dtype, Layout.swizzled(64, 64, SwizzleMode.B128), name="buf")
        bar = mbarrier(count=1, name="bar")
        done = mbarrier(count=cluster, name="done")
        with warp_role(WarpRole.PRODUCER, warp_range=(0, 3)):
            bar.expect(expect)
            tma_load(buf, A, (0, 0), bar, multicast=multicast)
            bar.wait(0)
            done.arrive(cluster=cluster_arrive)
            done.wait(0)
    return k.trace(TensorRef("A", DType.f16, shape=("M", "K")))


def test_cluster_builtins_need_set_cluster():
    with pytest.raises(GluonError, match=r"needs a thread-block cluster: call set_cluster"):
        _tma_kernel(1, multicast=True, cluster_arrive=False, expect=8192)
    with pytest.raises(GluonError, match=r"arrive\(cluster=True\) needs a thread-block cluster"):
        _tma_kernel(1, multicast=False, cluster_arrive=True, expect=8192)
    with pytest.raises(GluonError, match=r"set_cluster\(3\): clusters of 1, 2, 4 or 8"):
        _tma_kernel(3, multicast=False, cluster_arrive=False, expect=8192)


def test_expect_bytes_count_a_multicast_load_once_per_cta():
    run_passes(_tma_kernel(2, multicast=True, cluster_arrive=True, expect=2 * 8192))     # both CTAs' parts
    with pytest.raises(GluonError, match=r"announces 8192 bytes, but .* bring 16384 bytes: 16384 \(buf, "
                                         r"multicast by 2 CTAs\)"):
        run_passes(_tma_kernel(2, multicast=True, cluster_arrive=True, expect=8192))


def test_expect_bytes_error_names_a_reinterpreted_destination():
    @kernel(arch=SM90, num_warps=4)
    def k(A):
        gl.set_cluster(2)
        ring = smem(A.dtype, Layout.swizzled(64, 128, SwizzleMode.B128), name="ring", stages=2)
        parts = ring.reinterpret((64, 64), stages=4)
        bar = mbarrier(count=1, name="bar")
        with warp_role(WarpRole.PRODUCER, warp_range=(0, 3)):
            bar.expect(8192)
            tma_load(parts[gl.cluster_rank()], A, (0, 0), bar, multicast=True)
            bar.wait(0)
    with pytest.raises(GluonError, match=r"16384 \(ring.reinterpret\(64x64, stages=4\)\[\?\], multicast by 2 CTAs\)"):
        run_passes(k.trace(TensorRef("A", DType.f16, shape=("M", "K"))))


def test_reinterpret_checks_the_byte_count():
    @kernel(arch=SM90, num_warps=4)
    def k(A):
        ring = smem(A.dtype, Layout.swizzled(64, 256, SwizzleMode.B128), name="ring", stages=3)
        ring.reinterpret((64, 128), stages=5)
    with pytest.raises(GluonError, match=r"reinterpret\(\(64, 128\), stages=5\): 5 x 64x128 f16 is 81920 bytes, but the region has 98304"):
        k.trace(TensorRef("A", DType.f16, shape=("M", "K")))


@pytest.mark.parametrize("dtype,tile,part,transposed,match", [
    (DType.f16, (128, 128), (64, 128), False, r"parts of 64 of the tile's 128 rows, but its rows of 256 bytes are wider "
                                              r"than its 128-byte swizzle"),
    (DType.f16, (128, 64), (64, 64), False, None),                # 128-byte rows: a row split is parts
    (DType.f8e4m3, (128, 128), (64, 128), False, None),
    (DType.f16, (64, 256), (64, 64), False, None),                # whole column blocks
    (DType.f16, (64, 256), (64, 32), False, r"parts of 32 of the tile's 256 columns \(64 bytes\), which are not whole "
                                           r"128-byte swizzle blocks"),
    (DType.f16, (128, 128), (128, 64), True, r"parts of 64 of the tile's 128 rows"),    # transposed: dim 0 inner
    (DType.f16, (128, 128), (64, 128), True, None),
])
def test_reinterpret_refuses_a_split_whose_parts_are_not_back_to_back(dtype, tile, part, transposed, match):
    """A swizzled tile whose rows are wider than the swizzle span is stored as column blocks of all its rows (TMA and
    WGMMA lay it out so): split along its rows, the parts would not be its rows (the GEMM's 2-CTA clusters with
    K-major 128-deep bf16 B computed garbage so on an H100). Refused at the reinterpret's line; splits into whole
    column blocks, and row splits of rows within the span, pass."""
    stages = tile[0] * tile[1] // (part[0] * part[1])

    @kernel(arch=SM90, num_warps=4)
    def k(A):
        ring = smem(A.dtype, Layout.swizzled(*tile, SwizzleMode.B128, transposed=transposed), name="ring")
        ring.reinterpret(part, stages=stages)
    ref = TensorRef("A", dtype, shape=("M", "K"))
    if match is None:
        k.trace(ref)
    else:
        with pytest.raises(GluonError, match=r"'ring'\.reinterpret\(.*\): " + match):
            k.trace(ref)


# ------------------------------------------------------------------------------ the GEMM with CLUSTER_M=2


@pytest.mark.parametrize("b_kmajor", [False, True])
def test_cluster_gemm_machine_code(b_kmajor):
    cfg = DEFAULT_CONFIG.replace(EPILOGUE="tma", CLUSTER_M=2).resolve(2)
    ck = gemm_sm90.compile(*stand_ins(DType.f16), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=b_kmajor)
    md = ck.binary.metadata
    assert md["num_ctas"] == 2                           # Triton's launcher: grid[0] * 2 CTAs, clusters of 2
    assert md["gluon_cluster"] == {"num_ctas": 2, "multicast_copies": {"B": 1}, "cluster_arrives": 2}
    ops = sass_instructions(ck.sass())
    assert ops["UTMALDG.2D.MULTICAST"] == 1              # this CTA's half of B, into both CTAs
    assert ops["UTMALDG.2D"] - ops["UTMALDG.2D.MULTICAST"] == 1   # A: this CTA's own rows
    assert ops["SYNCS.ARRIVE.TRANS64.RED"] >= 2          # remote "slot free" arrives on the peer's ring
    assert ops["UCGABAR_ARV"] == 2 and ops["UCGABAR_WAIT"] == 2    # cluster_sync in both roles
    assert ops["HGMMA.64x256x16.F32"] >= 4 and ck.spills == 0
    # no GPU-scope fence: the start's cluster_sync only publishes the barrier inits (a relaxed arrive after
    # fence.mbarrier_init), and a released remote arrive would put one before every k-step's arrive (measured:
    # 0.62x cuBLAS instead of 1.0x)
    assert ops["MEMBAR.ALL.GPU"] == 0
    assert ck.binary.num_warps == 12                     # 8 consumer warps + a whole producer warpgroup


def test_cluster_tiles_and_grid_along_m():
    from gluon.kernels.gemm_sm90.kernel import _cta_tile
    assert [_cta_tile(3, 5, r, 2) for r in (0, 1)] == [(6, 5), (7, 5)]      # stacked along M


def test_cluster_gemm_rejects_b_parts_narrower_than_the_swizzle():
    cfg = DEFAULT_CONFIG.replace(EPILOGUE="tma", CLUSTER_M=2, BLOCK_N=64, CONSUMER_WGS=1).resolve(2)
    with pytest.raises(GluonError, match=r"CLUSTER_M=2 with BLOCK_N=64: each CTA loads 32 columns of B \(64 bytes\)"):
        gemm_sm90.trace(*stand_ins(DType.f16), num_warps=num_warps(cfg), CFG=cfg)


@pytest.mark.parametrize("dtype,bk,refused", [(DType.bf16, 128, True), (DType.f16, 128, True), (DType.bf16, 64, False),
                                              (DType.f8e4m3, 128, False)])
def test_cluster_gemm_rejects_k_major_b_rows_wider_than_the_swizzle(dtype, bk, refused):
    """With B K-major, each CTA of a 2-CTA cluster loads half the tile's rows; a row wider than the 128-byte
    swizzle span (BLOCK_K=128 of 16-bit elements) is stored as column blocks of all the rows, so the halves are
    not contiguous parts: the H100 computed garbage (rel err 1.0, twenty-seventh session). Refused at trace;
    64-deep 16-bit and 128-deep fp8 k-steps (128-byte rows) trace."""
    from gluon.kernels.gemm_sm90.picks import DEEP_K_CONFIG
    cfg = DEEP_K_CONFIG.replace(BLOCK_K=bk, STAGES=3).resolve(2)
    args = (*stand_ins(dtype, DType.bf16),)
    if refused:
        with pytest.raises(GluonError, match=rf"CLUSTER_M=2 with B K-major and BLOCK_K=128: each CTA loads 64 rows "
                                             rf"of the B tile, but a row of 256 bytes spans several 128-byte"):
            gemm_sm90.trace(*args, num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=True)
    else:
        gemm_sm90.trace(*args, num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=True)
    if dtype.bits == 16:            # [K, N]: each CTA's part is whole 128-byte columns (8-bit B is K-major only)
        gemm_sm90.trace(*args, num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=False)


def test_cluster_rank_compiles_to_the_special_register():
    @kernel(arch=SM90, num_warps=4)
    def ranks(out):
        gl.set_cluster(2)
        out[gl.program_id(0)] = gl.cluster_rank()
    ck = ranks.compile(gl.PointerArg(DType.i32, 16))
    assert "%cluster_ctarank" in ck.binary.asm["ptx"]
    assert ck.binary.metadata["num_ctas"] == 2


@pytest.mark.parametrize("memory,relaxed,gpu_fences", [(True, "false", 1), (False, "true", 0)])
def test_cluster_sync_without_memory_is_a_relaxed_arrive(memory, relaxed, gpu_fences):
    """cluster_sync(memory=False) publishes the barrier inits only (fence.mbarrier_init, then a relaxed arrive):
    no GPU-scope fence, which the default's release / acquire barrier costs (0.6 us a GEMM at decode shapes)."""
    @kernel(arch=SM90, num_warps=4)
    def meet(out):
        gl.set_cluster(2)
        bar = mbarrier(count=1, name="bar")
        gl.cluster_sync(memory=memory)
        bar.arrive()
        out[gl.program_id(0)] = gl.cluster_rank()
    ck = meet.compile(gl.PointerArg(DType.i32, 16))
    assert f"ttng.cluster_arrive {{relaxed = {relaxed}}}" in ck.ttgir
    assert "fence.mbarrier_init.release.cluster" in ck.binary.asm["ptx"]
    assert sass_instructions(ck.sass())["MEMBAR.ALL.GPU"] == gpu_fences


def _roles_kernel(producer_warps: int, producer_syncs: bool):
    @kernel(arch=SM90, num_warps=4 + producer_warps)
    def k(A):
        gl.set_cluster(2)
        bar = mbarrier(count=1, name="bar")
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            gl.cluster_sync()
            bar.wait(0)
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 3 + producer_warps)):
            if producer_syncs:
                gl.cluster_sync()
            bar.arrive()
    return k.trace(TensorRef("A", DType.f16, shape=("M", "K")))


def test_every_warp_must_reach_cluster_sync():
    run_passes(_roles_kernel(4, producer_syncs=True))
    with pytest.raises(GluonError, match=r"role producer \(warps 4..7\) never reaches cluster_sync"):
        run_passes(_roles_kernel(4, producer_syncs=False))
    with pytest.raises(GluonError, match=r"3 warps short of whole warpgroups; Triton pads them"):
        run_passes(_roles_kernel(1, producer_syncs=True))
