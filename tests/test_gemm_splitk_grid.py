"""SPLITK_GRID, split-K summed in the kernel across the grid (a tile's K slices meet at its counter in global
memory, `ptx.grid_meet`, then each sums a slab of the tile), without a GPU: the config's rules, the split count
and the residency check, the counter's arithmetic over launches, the machine code, and the interpreter (which
runs the programs one after another, so it takes the pick without the meeting and refuses one asked for). The
GPU checks are tests/test_gemm_splitk_grid_gpu.py."""
import re

import pytest

import gluon
import gluon.language as gl
from gluon import DType
from gluon.backend.machine_code import sass_instructions
from gluon.ir import GluonError
from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, gemm_sm90, num_warps, split_k, stand_ins
from gluon.kernels.gemm_sm90.geometry import grid, units
from gluon.kernels.gemm_sm90.picks import DEEP_K_CONFIG
from gluon.language import PointerArg
from gluon.language.nvidia import ptx

DEEP_GRID = DEEP_K_CONFIG.replace(SPLITK_GRID=8)


@pytest.mark.parametrize("kw,match", [
    (dict(SPLITK_GRID=3), "2, 4, 8 or 16 K slices"),
    (dict(SPLITK_GRID=32), "2, 4, 8 or 16 K slices"),
    (dict(SPLITK_GRID=2, SPLITK_FIXUP=True, EPILOGUE="direct"), "SPLITK_FIXUP=False"),
    (dict(SPLITK_GRID=2, CLUSTER_K=2, EPILOGUE="direct"), "CLUSTER_K=1"),
    (dict(SPLITK_GRID=2, SWAP_AB=True, BLOCK_M=64, CONSUMER_WGS=1, EPILOGUE="direct"), "SWAP_AB=False"),
    (dict(SPLITK_GRID=2, BLOCK_M=192, CONSUMER_WGS=3, SPLIT_WGS=True), "one or two consumer warpgroups"),
    (dict(SPLITK_GRID=2, EPILOGUE="tma"), "EPILOGUE='direct'"),
    (dict(SPLITK_GRID=16, BLOCK_N=8), "column slabs of a power of two"),
])
def test_splitk_grid_rules_name_the_field(kw, match):
    with pytest.raises(GluonError, match=rf"SPLITK_GRID=\d+ takes .*{match}"):
        DEFAULT_CONFIG.replace(**kw)


def test_splitk_grid_sets_the_split_count_and_stores_c_from_registers():
    cfg = DEEP_GRID.resolve(2)
    assert cfg.EPILOGUE == "direct" and cfg.cluster_size == 2
    assert split_k(512, 512, 65536, cfg, 132) == 8 and split_k(512, 512, 1024, cfg, 132) == 8
    assert grid(512, 512, cfg, 132, 8) == (64,) and units(512, 512, cfg, 8) == 64     # every unit a cluster
    assert "SPLITK_GRID=8" in cfg.describe() and "SPLITK_GRID" not in DEFAULT_CONFIG.describe()
    assert DEFAULT_CONFIG.replace(SPLITK_GRID=2).resolve(2).EPILOGUE == "direct"


def meet_constants(arrivals: int | None) -> tuple[int | None, int, int]:
    """(what a warp adds, the mask of a launch's base, the unit) read off grid_meet's PTX (arrivals None:
    grid_meet_all's, whose warps add a register: None)."""
    asm = ptx.grid_meet_asm(arrivals)
    add = re.search(r"atom\.relaxed\.gpu\.global\.add\.u32 o, \[a\], (\d+|\$3);", asm).group(1)
    mask = int(re.search(r"and\.b32 g, o, (\d+);", asm).group(1))
    unit = int(re.search(r"add\.u32 g, g, (\d+);", asm).group(1))
    return (None if add == "$3" else int(add)), mask, unit


def one_launch(count: int, adds, mask: int, unit: int) -> int:
    """The counter after one launch whose warps arrive adding `adds` in turn, each computing its goal from the
    count it found as the PTX does: asserts no warp is let go before the last has arrived (the signed difference
    to its goal >= 0), and that the launch ends on a whole unit."""
    start, goals = count, set()
    for i, add in enumerate(adds):
        old = count
        count = (count + add) % 2**32
        goals.add(((old & mask) + unit) % 2**32)
        released = {((count - g) % 2**32) < 2**31 for g in goals}
        assert released == {i == len(adds) - 1}, (i, released)
    assert count % unit == start % unit
    return count


@pytest.mark.parametrize("arrivals", [1, 8, 32, 128, 65536])
@pytest.mark.parametrize("start", [0, 2**32 - 3 * 65536])         # from zero, and across the 32-bit wrap
def test_grid_meet_counts_whole_launches_with_no_reset(arrivals, start):
    """The meeting's arithmetic (its constants read off the PTX), over launches in a row with the arrivals of
    each: a warp is let go only once every warp of its launch has arrived (all of a launch's warps wait for the
    same count, whichever arrives first); the counter ends each launch on a whole unit, also where it wraps
    around 2**32."""
    add, mask, unit = meet_constants(arrivals)
    assert add * arrivals == unit
    count = start
    for _ in range(3):
        count = one_launch(count, [add] * arrivals, mask, unit)


def test_grid_meet_checks_its_arguments():
    @gluon.jit
    def bad(cnt_ptr, x_ptr, WHICH: gl.constexpr):
        if WHICH == 0:
            ptx.grid_meet(cnt_ptr + 0, 12)
        else:
            ptx.grid_meet(x_ptr + 0, 4)

    with pytest.raises(GluonError, match=r"arrivals=12 must be a power of two"):
        bad.compile(PointerArg(DType.i32), PointerArg(DType.f32), WHICH=0, arch="sm90", num_warps=4)
    with pytest.raises(GluonError, match=r"counter must be one int32 .* got f32"):
        bad.compile(PointerArg(DType.i32), PointerArg(DType.f32), WHICH=1, arch="sm90", num_warps=4)


@pytest.mark.parametrize("cfg,km", [(DEEP_GRID, True), (DEEP_K_CONFIG.replace(CLUSTER_M=1, SPLITK_GRID=4), False),
                                    (DEEP_K_CONFIG.replace(SPLITK_GRID=16), True),
                                    (DEEP_K_CONFIG.replace(SPLITK_GRID=2, BLOCK_N=256, CONSUMER_WGS=2, STAGES=4),
                                     False)])
def test_splitk_grid_machine_code(cfg, km):
    """No spills; one arrival a warp (a GPU-scope atomic add after a GPU-scope fence) and an acquire load, after
    the partial's stores and before the sum's loads, which bypass L1 (the other slices' partials)."""
    cfg = cfg.resolve(2)
    ck = gemm_sm90.compile(*stand_ins(DType.bf16, splits=cfg.SPLITK_GRID), num_warps=num_warps(cfg), CFG=cfg,
                           B_KMAJOR=km, N_MULTIPLE_16=True)
    ops = sass_instructions(ck.sass())
    assert ck.spills == 0 and ck.shared_bytes <= 227 * 1024
    assert ops["ATOMG.E.ADD.STRONG.GPU"] == 1 and ops["LDG.E.STRONG.GPU"] == 1 and ops["MEMBAR.ALL.GPU"] >= 1
    assert ops["LDG.E.128.STRONG.GPU"] >= 8 and ops["LDG.E.128"] == ops["LDG.E.128.STRONG.GPU"]
    text = ck.asm["ptx"]
    meet = text.index(ptx.GRID_MEET_MARK)
    assert text.rindex("st.global", 0, meet) > 0 and text.index("ld.global.cg", meet) > meet
    assert "fence.acq_rel.gpu;" in text[meet:text.index("atom.relaxed.gpu", meet)]


def test_the_interpreter_runs_the_pick_without_the_meeting(interpret_env, monkeypatch):
    """The interpreter runs a launch's programs one after another: a pick's SPLITK_GRID becomes as many K slices
    summed by splitk_reduce (the same sums, in the same order)."""
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_sm90 import host
    picked = DEEP_K_CONFIG.replace(CLUSTER_M=1, SPLITK_GRID=4)
    monkeypatch.setattr(host, "resolve_config", lambda *a, **k: picked.resolve(2))
    a, c = torch.randn(256, 2048).half(), torch.empty(256, 256).half()
    plan = host._plan(a, c, 256, 256, 2048, None, False, None, True, "none")
    assert plan.splits == 4 and plan.reduce_kw is not None and plan.kw["CFG"].SPLITK_GRID == 1 and not plan.meet


def test_the_interpreter_refuses_a_meeting_asked_for(interpret_env):
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_sm90 import launch
    from gluon.interpret import InterpretError
    a, b, c = torch.randn(64, 1024).half(), torch.randn(1024, 64).half(), torch.empty(64, 64).half()
    with pytest.raises((InterpretError, GluonError), match=r"one after another, so a grid_meet"):
        launch(a, b, c, dict(SPLITK_GRID=2, BLOCK_N=64, CONSUMER_WGS=1, STAGES=4))


@pytest.mark.parametrize("shape,kw,match", [
    ((4096, 4096, 65536), dict(SPLITK_GRID=8),
     r"SPLITK_GRID=8 needs every unit resident at once .* 4096 units of 1 CTA"),
    ((128, 128, 128), dict(SPLITK_GRID=4, BLOCK_N=128, BLOCK_K=64),
     r"SPLITK_GRID=4 splits K=128 into 4 slices .* at most 2 non-empty ones; use SPLITK_GRID=2"),
])
def test_splitk_grid_refuses_what_cannot_meet(interpret_env, shape, kw, match):
    """More units than SMs (a slice would wait for one that cannot start), or a K too short for its slices: one
    line at the launch, before anything runs."""
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_sm90 import launch
    M, N, K = shape
    a, b, c = torch.empty(M, K).half(), torch.empty(K, N).half(), torch.empty(M, N).half()
    with pytest.raises(GluonError, match=match):
        launch(a, b, c, dict(CONSUMER_WGS=1, **kw))


def test_splitk_grid_refuses_a_different_split_count(interpret_env):
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_sm90 import launch
    a, b, c = torch.randn(64, 1024).half(), torch.randn(1024, 64).half(), torch.empty(64, 64).half()
    with pytest.raises(GluonError, match="splits=3 with SPLITK_GRID=2"):
        launch(a, b, c, dict(SPLITK_GRID=2, BLOCK_N=64, CONSUMER_WGS=1), splits=3)


class _Holds:
    """A compiled kernel's stand-in for `_fit_grid`: its launcher says the device holds `n` clusters."""

    abi = object()

    def __init__(self, n: int):
        self.launcher = self
        self.n = n

    def resident_clusters(self, dev, size):
        return self.n


@pytest.mark.parametrize("asked", [False, True])
def test_a_pick_whose_clusters_do_not_all_fit_falls_back_to_two_passes(asked):
    """Clusters of 2 for 64 units: where the device holds only 60, a pick's meeting would wait forever, so the
    plan becomes the same config summed by splitk_reduce on 60 clusters (its kernel rebuilt); asked for, one
    line says why it cannot run."""
    from gluon.kernels.gemm_sm90 import host
    cfg = DEEP_GRID.resolve(2)
    plan = host._Plan(gemm_sm90[(64,)], 0, 8, dict(CFG=cfg, num_warps=num_warps(cfg)), meet=16, meet_asked=asked)
    if asked:
        with pytest.raises(GluonError, match=r"SPLITK_GRID needs all 64 clusters of 2 CTAs resident at once, but "
                                             r"the device holds 60"):
            host._fit_grid(plan, _Holds(60))
        return
    assert host._fit_grid(plan, _Holds(60))
    assert plan.kw["CFG"].SPLITK_GRID == 1 and plan.meet == 0 and plan.reduce_kw["SPLITS"] == 8
    assert plan.bound.grid == (60,) and plan.ck is None
    plan2 = host._Plan(gemm_sm90[(64,)], 0, 8, dict(CFG=cfg), meet=16)
    assert not host._fit_grid(plan2, _Holds(66)) and plan2.kw["CFG"].SPLITK_GRID == 8 and plan2.bound.grid == (64,)
