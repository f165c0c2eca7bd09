"""The persistent warp-specialized SM90 GEMM template, compiled without a GPU: machine code of the
chosen config, variants, and the errors bad configs get before any compilation."""
import importlib
import os

import pytest

from gluon import DType
from gluon.backend.machine_code import sass_instructions
from gluon.ir import GluonError
from gluon.jit import run_passes
from gluon.kernels.gemm_sm90 import (DEFAULT_CONFIG, FP32_OUT_CONFIG, SMALL_CONFIGS, GemmConfig, choose_config,
                                     gemm_sm90, num_warps, resolve_config, split_k, stand_ins)
from gluon.kernels.gemm_sm90.picks import SHALLOW_K


def _cfg(**kw):
    """DEFAULT_CONFIG with `kw` on top, its "auto" values resolved as launch does for a 2-byte output."""
    return DEFAULT_CONFIG.replace(**kw).resolve(2)


@pytest.mark.parametrize("dtype", [DType.f16, DType.bf16])
def test_chosen_config_sass_has_hgmma_utmaldg_setmaxnreg_and_no_spills(dtype):
    cfg = resolve_config(8192, 8192, 8192, 132, 2)         # what launch runs at 8192^3 on an H200
    assert cfg.EARLY_LOADS and cfg.EPILOGUE == "tma" and cfg.SPLIT_WGS
    ck = gemm_sm90.compile(*stand_ins(dtype), num_warps=num_warps(cfg), CFG=cfg)
    ops = sass_instructions(ck.sass())
    assert ops["HGMMA.64x256x16.F32"] >= 4            # 2 warpgroups x (64-row halves) of the 128x256 tile
    assert ops["UTMALDG.2D"] >= 3 and ops["UTMASTG.2D"] >= 2   # SPLIT_WGS: an A load and a store per warpgroup
    assert ops["USETMAXREG"] >= 2                      # setmaxnreg: producer down, consumers up
    assert ck.spills == 0
    assert ck.binary.num_warps == 12                   # 8 consumer warps + the producer's warpgroup
    assert ck.shared_bytes <= 227 * 1024


@pytest.mark.parametrize("variant", [dict(B_KMAJOR=True), dict(EPILOGUE="direct", STAGES=4), dict(SPLIT_WGS=True),
                                     dict(CONSUMER_WGS=1, BLOCK_N=128, STAGES=4), dict(SWIZZLE=64, BLOCK_K=32)])
def test_variants_compile_to_hgmma(variant):
    variant = dict(variant)
    b_kmajor = variant.pop("B_KMAJOR", False)
    cfg = _cfg(**variant)
    ck = gemm_sm90.compile(*stand_ins(DType.f16), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=b_kmajor)
    ops = sass_instructions(ck.sass())
    assert ops["HGMMA"] >= 1 and ops["UTMALDG"] >= 1


def _passes(**kw):
    cfg = _cfg(**kw)
    return run_passes(gemm_sm90.trace(*stand_ins(DType.f16), num_warps=num_warps(cfg), CFG=cfg))


def test_too_many_stages_lists_every_region():
    with pytest.raises(GluonError) as e:
        _passes(STAGES=5)
    msg = str(e.value)
    assert "more than the 227.0 KiB" in msg
    for region in ("a_ring", "b_ring", "c_tile", "ready", "empty"):
        assert region in msg


@pytest.mark.parametrize("given,then", [(dict(STAGES=5), "STAGES=3 fits (48.0 KiB of A and B a stage)"),
                                        (dict(CLUSTER_M=2, STAGES=7), "STAGES=3 fits"),
                                        (dict(BLOCK_K=128, STAGES=3), "EPILOGUE='direct' (C stored from registers, "
                                                                      "no 64.0 KiB C tile) fits with STAGES=2"),
                                        (dict(BLOCK_K=128, STAGES=3, EPILOGUE="direct"), "STAGES=2 fits"),
                                        (dict(BLOCK_K=256, STAGES=3, EPILOGUE="direct"), "use a smaller BLOCK_M, "
                                                                                         "BLOCK_N or BLOCK_K")])
def test_a_config_past_the_shared_memory_gets_one_line_in_its_own_fields(given, then):
    """A GEMM config whose stages do not fit is refused in one line that names its tiles and STAGES and says how
    many stages fit beside the rest (and those compile), or else what to lower (the allocator's own message lists
    every region, for kernel writers: test_too_many_stages_lists_every_region)."""
    from gluon.kernels.gemm_sm90.host import compile_variant
    with pytest.raises(GluonError) as e:
        compile_variant(DType.bf16, **given)
    msg = str(e.value)
    epilogue = given.get("EPILOGUE", "tma")
    assert "\n" not in msg and msg.startswith("gemm: config BLOCK_M=128, BLOCK_N=256, BLOCK_K=")
    assert f"STAGES={given['STAGES']}, EPILOGUE='{epilogue}' needs" in msg and "more than the 227.0 KiB" in msg
    assert then in msg
    if "fits" in then:      # what it names compiles
        epilogue = "direct" if "EPILOGUE='direct'" in then else epilogue
        compile_variant(DType.bf16, **dict(given, STAGES=int(then.split("STAGES=")[1][0]), EPILOGUE=epilogue))


def test_a_launch_past_the_shared_memory_gets_the_same_line(interpret_env):
    """`launch` with such a config (here in the interpreter, which runs the passes at its launch) gets that line."""
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_sm90 import launch
    a, b, c = torch.randn(128, 256).half(), torch.randn(256, 256).half(), torch.empty(128, 256).half()
    with pytest.raises(GluonError, match=r"^gemm: config BLOCK_M=\d+, BLOCK_N=256, BLOCK_K=64, STAGES=6, .*; "
                                         r"STAGES=\d fits \(\d+\.0 KiB of A and B a stage\)$"):
        launch(a, b, c, dict(BLOCK_N=256, STAGES=6))


@pytest.mark.parametrize("shape,given,in_size,want", [
    ((512, 512, 65536), dict(BLOCK_N=256, CONSUMER_WGS=2), 2, 3),    # the deep-K pick's 6 stages, 128x256 tiles
    ((300, 512, 8192), dict(BLOCK_M=256, BLOCK_N=128, CONSUMER_WGS=2, SPLIT_WGS=True, BLOCK_K=128, SWAP_AB=False,
                            EPILOGUE="direct"), 1, 4)])       # fp8: 256x128 tiles over 128-deep k-steps
def test_a_callers_tiles_get_the_stages_that_fit(shape, given, in_size, want):
    """Overrides that grow the tiles but leave STAGES open get as many stages as fit (the pick's would not), and
    those stages pass the allocator; STAGES given is kept (and refused by the allocator, by region)."""
    cfg = resolve_config(*shape, 132, 2, True, given, in_size)
    assert cfg.STAGES == want
    dt = DType.f8e4m3 if in_size == 1 else DType.bf16
    run_passes(gemm_sm90.trace(*stand_ins(dt, DType.bf16), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=True,
                               **(dict(SCALE="block") if in_size == 1 else {})))
    cfg = resolve_config(*shape, 132, 2, True, dict(given, STAGES=6), in_size)
    assert cfg.STAGES == 6
    with pytest.raises(GluonError, match="more than the 227.0 KiB"):
        run_passes(gemm_sm90.trace(*stand_ins(dt, DType.bf16), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=True,
                                   **(dict(SCALE="block") if in_size == 1 else {})))


def test_big_accumulator_on_one_warpgroup_says_what_fits():
    with pytest.raises(GluonError) as e:
        _passes(CONSUMER_WGS=1)
    msg = str(e.value)
    assert "128x256 f32 accumulator needs 256 registers per thread on 1 warpgroup" in msg
    assert "use 2 consumer warpgroups" in msg and "128x" in msg


def test_block_k_rows_must_fill_the_swizzle():
    with pytest.raises(GluonError, match=r"64-byte rows, which do not fill the 128-byte swizzle"):
        _passes(BLOCK_K=32)


def test_split_k_heuristic():
    assert split_k(8192, 8192, 8192, DEFAULT_CONFIG, 132) == 1        # tiles fill the GPU
    assert split_k(128, 8192, 8192, DEFAULT_CONFIG, 132) == 4         # 32 tiles -> 128 units
    assert split_k(1000, 1000, 1000, DEFAULT_CONFIG, 132) == 1        # K too short to pay for a workspace


def test_choose_config_picks_tiles_by_problem_size():
    def tile(M, N, K):
        c = choose_config(M, N, K, 132)
        return c.BLOCK_M, c.BLOCK_N, c.CONSUMER_WGS
    assert tile(8192, 8192, 8192) == (128, 256, 2)
    assert tile(2048, 2048, 2048) == (128, 256, 2)      # 128 tiles of 128x256: a wave, give or take 10%
    assert tile(4000, 3000, 5000) == (128, 256, 2)
    # 32 big tiles; 128 swapped 128x64 tiles would fill one wave without a K split, so DECODE_PAIRS' 64x128 (128 of
    # them: fewer than the SMs, so in pairs)
    assert tile(128, 8192, 8192) == (64, 128, 1) and choose_config(128, 8192, 8192, 132).CLUSTER_M == 2
    assert tile(128, 8192, 8192 * 4) == (64, 128, 1)
    assert choose_config(128, 8192, 8192, 132, swap_ab=False).CLUSTER_M == 1       # the ordinary pick
    assert tile(1000, 1000, 1000) == (128, 64, 1)       # 64x64 would make 256 tiles: two waves
    assert tile(333, 200, 136) == (64, 64, 1)           # 24 tiles of 64x64, the most parallel
    with pytest.raises(AttributeError):                # frozen: a caller edits a copy (GemmConfig.replace)
        choose_config(64, 64, 64, 132).STAGES = 4
    # rows that do not start on 128-byte boundaries: the large tiles run in 2-CTA multicast clusters
    assert choose_config(4000, 3000, 5000, 132).CLUSTER_M == 1
    assert choose_config(4000, 3000, 5000, 132, pitch_aligned=False).CLUSTER_M == 2
    assert choose_config(1000, 1000, 1000, 132, pitch_aligned=False).CLUSTER_M == 1


def test_an_fp32_output_gets_128x128_tiles_that_compile_without_spills():
    for shape in ((8192, 8192, 8192), (2048, 2048, 2048), (4000, 3000, 5000)):
        assert choose_config(*shape, 132, pitch_aligned=shape[2] % 64 == 0, out_size=4) == FP32_OUT_CONFIG
    assert choose_config(1000, 1000, 1000, 132, out_size=4) in SMALL_CONFIGS       # under a wave: as before
    cfg = FP32_OUT_CONFIG.resolve(4)
    k = gemm_sm90.compile(*stand_ins(DType.f16, DType.f32), num_warps=num_warps(cfg), CFG=cfg)
    assert k.spills == 0


def test_choose_config_uses_the_coalesced_epilogue_where_each_program_has_one_tile():
    assert choose_config(2048, 2048, 2048, 132).EPILOGUE == "coalesced"       # 128 tiles, one each
    assert choose_config(1536, 2816, 2048, 132).EPILOGUE == "coalesced"       # 132 tiles
    assert choose_config(4096, 4096, 4096, 132).EPILOGUE == "auto"            # several tiles per program
    # each consumer warpgroup its own role where programs have several tiles, not at one wave
    assert [choose_config(*s, 132).SPLIT_WGS for s in ((4096, 4096, 4096), (8192, 8192, 8192),
            (4000, 3000, 5000), (2048, 2048, 2048), (1536, 2816, 2048), (128, 8192, 8192))] == [True] * 3 + [False] * 3
    # and there odd units load K top down, for L2 reuse between waves
    zigzag = [choose_config(*s, 132).K_ZIGZAG for s in ((4096, 4096, 4096), (2048, 2048, 2048))]
    assert zigzag == [True, False]
    assert choose_config(4000, 3000, 5000, 132, pitch_aligned=False).SPLIT_WGS    # clustered too
    assert not choose_config(8192, 8192, 8192, 132, out_size=4).SPLIT_WGS        # fp32: FP32_OUT_CONFIG
    assert choose_config(2048, 2040, 2048, 132).EPILOGUE == "auto"            # rows not 16-element multiples
    assert choose_config(2048, 2048, 2048, 132, out_size=4).EPILOGUE == "tma"    # fp32: 128x128, 64 KB staging
    assert choose_config(2048, 2048, 2048, 132, pitch_aligned=False).EPILOGUE == "auto"


def test_choose_config_uses_the_coalesced_epilogue_where_k_is_shallow():
    """K <= SHALLOW_K: C's stores are the work, and the coalesced epilogue beat TMA's stores on 16-bit inputs."""
    for shape in ((8192, 8192, 64), (16384, 16384, 128), (4096, 28672, 128), (16384, 4096, 96)):
        cfg = choose_config(*shape, 132)
        assert (cfg.EPILOGUE, cfg.SPLIT_WGS, cfg.K_ZIGZAG) == ("coalesced", True, True), shape
    assert choose_config(8192, 8192, SHALLOW_K + 64, 132).EPILOGUE == "auto"                 # deeper: TMA
    assert choose_config(8192, 8192, 128, 132, wave_tiles=False).EPILOGUE == "auto"          # fp8: not timed
    assert choose_config(8192, 8200, 128, 132).EPILOGUE == "auto"                            # rows off 16 elements
    assert choose_config(8192, 8192, 128, 132, pitch_aligned=False).EPILOGUE == "auto"       # clustered, padded
    assert choose_config(4000, 2064, 128, 132).BLOCK_M == 192                                # wave_config's tile:
    assert choose_config(4000, 2064, 128, 132).EPILOGUE == "auto"                            # TMA stores won there
    assert resolve_config(8192, 8192, 128, 132, 2).EPILOGUE == "coalesced"
    assert resolve_config(8192, 8192, 128, 132, 2, config=dict(EPILOGUE="tma")).EPILOGUE == "tma"


@pytest.mark.parametrize("M,N,K,vector", [(512, 512, 65536, True), (512, 520, 65536, False), (4096, 4096, 4096, False)])
def test_split_k_partials_are_stored_in_pairs_where_rows_are_16_element_multiples(interpret_env, M, N, K, vector):
    """A split launch promises N_MULTIPLE_16 where it holds, so the fp32 partials go out as the accumulator's
    8-byte pairs (STG.E.64) instead of one 4-byte store each (the deep-K pick: 68 stores a thread, not 144); N off
    16, or no split, promises nothing."""
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_sm90 import host
    a, c = torch.empty(M, K).half(), torch.empty(M, N).half()
    plan = host._plan(a, c, M, N, K, None, True, None, True, "none")
    assert bool(plan.kw.get("N_MULTIPLE_16")) == vector and (plan.splits > 1) == (K > 4096)
    if vector:
        cfg = plan.kw["CFG"].replace(CLUSTER_M=2)          # the pick on the GPU (the interpreter drops its cluster)
        ops = sass_instructions(gemm_sm90.compile(*stand_ins(DType.f16, splits=plan.splits), num_warps=num_warps(cfg),
                                                  CFG=cfg, B_KMAJOR=True, N_MULTIPLE_16=True).sass())
        assert ops["STG.E.64"] >= 64 and ops["STG.E"] == ops["STG.E.64"]


def test_a_compiled_kernel_promising_n_multiple_16_is_refused_for_other_rows(interpret_env):
    """`launch(..., compiled=ck)` of a binary compiled with N_MULTIPLE_16 (the tuner's, for rows of 16-element
    multiples) on a C whose rows are not: one line naming the promise, before any launch."""
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_sm90 import launch
    from gluon.kernels.gemm_sm90.picks import DEEP_K_CONFIG
    cfg = DEEP_K_CONFIG.replace(CLUSTER_M=1).resolve(2)
    ck = gemm_sm90.compile(*stand_ins(DType.f16, splits=4), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=True,
                           N_MULTIPLE_16=True)
    a, b, c = torch.randn(128, 4096).half(), torch.randn(200, 4096).half(), torch.empty(128, 200).half()
    with pytest.raises(GluonError, match=r"compiled with N_MULTIPLE_16=True .* C is 128x200"):
        launch(a, b, c, cfg, b_kmajor=True, splits=4, compiled=ck)


def test_coalesced_epilogue_machine_code():
    base = DEFAULT_CONFIG.replace(EPILOGUE="coalesced", EARLY_LOADS=False, LEAN_PROLOGUE=False)
    refs = stand_ins(DType.f16)
    vec = sass_instructions(gemm_sm90.compile(*refs, num_warps=num_warps(base), CFG=base, N_MULTIPLE_16=True).sass())
    assert vec["STG.E.128"] == 16 and vec["LDS.128"] == 16 and vec["STSM.16.M88.4"] == 16   # 16 B per store
    assert vec["UTMASTG"] == 0 and vec["HGMMA.64x256x16.F32"] >= 4
    plain = sass_instructions(gemm_sm90.compile(*refs, num_warps=num_warps(base), CFG=base).sass())
    assert plain["STG.E.128"] == 0                       # N unknown: the row starts are not known aligned
    with pytest.raises(GluonError, match="EPILOGUE='coalesced' has not run in a cluster"):
        base.replace(CLUSTER_M=2)
    with pytest.raises(GluonError, match="EPILOGUE='dma': use 'tma', 'tma2', 'ring', 'coalesced' or 'direct'"):
        base.replace(EPILOGUE="dma")


@pytest.mark.parametrize("variant", [dict(), dict(SPLIT_WGS=True), dict(CLUSTER_M=2), dict(CONSUMER_WGS=1, BLOCK_N=128)])
def test_ring_epilogue_machine_code(variant):
    """EPILOGUE="ring": no staging region (the 4-stage ring and barriers alone, under 227 KiB), a TMA
    store per consumer role, and the `c_free` barrier the producer waits on before a next unit."""
    cfg = _cfg(STAGES=4, EPILOGUE="ring", **variant)
    ck = gemm_sm90.compile(*stand_ins(DType.f16), num_warps=num_warps(cfg), CFG=cfg)
    ops = sass_instructions(ck.sass())
    assert ops["UTMASTG.2D"] == (2 if cfg.SPLIT_WGS else 1) and ops["HGMMA"] >= 1 and ck.spills == 0
    assert ck.shared_bytes <= 227 * 1024
    names = {o.attrs.get("name") for o in _passes(STAGES=4, EPILOGUE="ring", **variant).kernel.walk()
             if o.kind in ("smem_alloc", "barrier_alloc")}
    assert not any(n.startswith("c_tile") for n in names)
    assert {"c_free0", "c_free1"} <= names if cfg.SPLIT_WGS else "c_free" in names


@pytest.mark.parametrize("kw,out,match", [
    (dict(STAGES=3), DType.f16, r"128x256 f16 output tile \(65536 bytes\) must fit a whole number of times in the "
                                r"A ring \(3 stages of 128x64 f16 = 49152 bytes\); use STAGES=4 or EPILOGUE='tma'"),
    (dict(STAGES=4), DType.f32, r"128x256 f32 output tile \(131072 bytes\).*use STAGES=8"),
])
def test_ring_epilogue_errors_say_what_fits(kw, out, match):
    cfg = _cfg(EPILOGUE="ring", **kw)
    with pytest.raises(GluonError, match=match):
        gemm_sm90.trace(*stand_ins(DType.f16, out), num_warps=num_warps(cfg), CFG=cfg)


@pytest.mark.parametrize("cfg", SMALL_CONFIGS, ids=lambda c: f"{c.BLOCK_M}x{c.BLOCK_N}")
def test_small_configs_compile_without_spills(cfg):
    cfg = cfg.resolve(2)
    ck = gemm_sm90.compile(*stand_ins(DType.f16), num_warps=num_warps(cfg), CFG=cfg)
    ops = sass_instructions(ck.sass())
    assert ops["HGMMA"] >= 1 and ops["UTMALDG.2D"] >= 2 and ck.spills == 0
    assert ck.binary.num_warps == 8                    # 4 consumer warps + the producer's warpgroup


def test_split_consumer_warpgroups_are_two_roles_with_their_own_rings():
    k = _passes(SPLIT_WGS=True).kernel
    ws = next(o for o in k.walk() if o.kind == "warp_specialize")
    assert [(r["role"], r["warps"], r["registers"]) for r in ws.attrs["roles"]] == [
        ("consumer", (0, 3), None), ("consumer", (4, 7), 216), ("producer", (8, 8), 40)]
    names = {o.attrs.get("name") for o in k.walk() if o.kind in ("smem_alloc", "barrier_alloc")}
    assert {"a_ring0", "a_ring1", "c_tile0", "c_tile1", "b_ring", "ready", "empty"} <= names
    empty = next(o for o in k.walk() if o.kind == "barrier_alloc" and o.attrs.get("name") == "empty")
    assert empty.attrs["count"] == 2                   # one arrive per consumer warpgroup


def _example(*argv):
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, os.path.join(root, "examples", "gemm_kernel.py"), "--compile-only", *argv],
                          capture_output=True, text=True, timeout=600)


def test_example_describes_the_machine_code_of_the_chosen_config():
    out = _example("--shape", "4000x3000x5000", "--dtype", "bf16", "--b-col-major")
    assert out.returncode == 0, out.stderr
    assert "CLUSTER_M=2" in out.stdout               # rows of 10000 bytes: clustered, as launch() would
    assert "0 spills" in out.stdout and "clusters of 2" in out.stdout
    assert "HGMMA x" in out.stdout and "UTMALDG.2D.MULTICAST x1" in out.stdout


@pytest.mark.parametrize("argv", [("--shape", "200x136x72"), ("--shape", "256x256x192", "--b-col-major", "--dtype", "bf16"),
                                  ("--shape", "256x256x128", "--set", "CLUSTER_M=2", "--set", "BLOCK_N=128")])
def test_example_checks_a_shape_in_the_interpreter(argv):
    """--interpret: the GPU run's check on CPU tensors in the IR interpreter; a cluster it cannot run is said
    so, not failed."""
    out = _example("--interpret", *argv)
    assert out.returncode == 0, out.stderr
    if "CLUSTER_M=2" in argv:
        assert "not checked in the interpreter" in out.stdout and "cluster" in out.stdout
    else:
        assert "interpreted on the CPU" in out.stdout and ": ok" in out.stdout


def test_example_reports_bad_configs_with_exit_code_2():
    out = _example("--interpret", "--shape", "128x256x128", "--set", "CLUSTER_M=2")
    assert out.returncode == 2 and "use BLOCK_N >= 128 or CLUSTER_M=1" in out.stderr and "Traceback" not in out.stderr
    out = _example("--set", "STAGES=5")
    assert out.returncode == 2 and "more than the 227.0 KiB" in out.stderr and "STAGES=3 fits" in out.stderr
    out = _example("--set", "STAGSE=5")
    assert out.returncode == 2 and "did you mean STAGES?" in out.stderr
    out = _example("--shape", "4096x4096")
    assert out.returncode == 2 and "expected MxNxK" in out.stderr
    out = _example("--set", "B_KMAJOR=True")
    assert out.returncode == 2 and "give --b-col-major" in out.stderr


def test_repeated_launches_reuse_the_compiled_kernel(monkeypatch):
    """launch() keeps the compiled specialization in its plan (no per-call specialization lookup), keyed
    by everything the specialization depends on: fp16 and bf16 (same width) get different kernels.
    A fake GPU backend records the launches (CPU tensors)."""
    import sys
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_runtime import FakeBackend
    import gluon.runtime.cuda as rt_cuda
    g = importlib.import_module("gluon.kernels.gemm_sm90.host")
    backend = FakeBackend(device_type="cpu")
    monkeypatch.setattr(rt_cuda, "DEFAULT_BACKEND", backend)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(g, "_PLANS", {})
    monkeypatch.setattr(g, "_FAST", {})
    monkeypatch.setattr("gluon.runtime.cuda._SM_COUNTS", {0: 132})
    monkeypatch.setattr(g, "_WORKSPACE", {(0, None): torch.empty(16)})
    a, b, c = torch.randn(1024, 512).half(), torch.randn(512, 2048).half(), torch.empty(1024, 2048).half()
    g.launch(a, b, c)
    g.launch(a, b, c)
    (plan,) = g._PLANS.values()
    assert plan.ck is not None and len(backend.calls) == 2
    grid, flat = backend.calls[-1][:3], backend.calls[-1][9:]
    assert grid == (min(8 * 8, 132), 1, 1)                  # 8 x 8 tiles of 128x256, one per program
    assert sorted(flat[-3:]) == [512, 1024, 2048]           # the symbolic sizes M, N, K, from the shapes
    g.launch(a.bfloat16(), b.bfloat16(), c.bfloat16())
    assert len(g._PLANS) == 2
    p16, p_bf16 = g._PLANS.values()
    assert p16.ck is not p_bf16.ck and len(backend.calls) == 3


def test_forced_splits_leave_no_empty_k_slice(monkeypatch):
    """splits=5 over 16 k-steps would give slices 4, 4, 4, 4, 0; the plan uses 4 slices of 4."""
    g = importlib.import_module("gluon.kernels.gemm_sm90.host")
    monkeypatch.setattr("gluon.runtime.cuda._SM_COUNTS", {0: 132})

    class T:
        device = type("D", (), {"index": 0})()
        element_size = staticmethod(lambda: 2)

    assert g._plan(T(), T(), 200, 300, 1000, None, False, 5).splits == 4
    assert g._plan(T(), T(), 200, 300, 4096, None, False, 5).splits == 5      # 13, 13, 13, 13, 12


def test_tile_kernel_launch_takes_any_config_key(monkeypatch):
    """gemm_tile_sm90.launch: a config key overrides its default (BLOCK_N=256 once raised 'multiple
    values for keyword argument'), WARPS sets the warps, and the grid has one program per tile."""
    import sys
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_runtime import FakeBackend
    import gluon.runtime.cuda as rt_cuda
    from gluon.kernels.gemm_tile_sm90 import launch
    backend = FakeBackend(device_type="cpu")
    monkeypatch.setattr(rt_cuda, "DEFAULT_BACKEND", backend)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    a, b, c = torch.randn(1000, 512).half(), torch.randn(512, 1000).half(), torch.empty(1000, 1000).half()
    launch(a, b, c, BLOCK_N=256, STAGES=4, WARPS=8)
    (call,) = backend.calls
    assert call[:3] == (8, 4, 1)                     # ceil(1000/128) x ceil(1000/256) tiles


@pytest.mark.parametrize("variant", [dict(), dict(SPLIT_WGS=True), dict(B_KMAJOR=True), dict(EPILOGUE="coalesced")],
                         ids=["coop", "split_wgs", "b_kmajor", "coalesced"])
def test_early_loads_issue_the_first_stages_before_the_warp_roles(variant):
    variant = dict(variant)
    b_kmajor = variant.pop("B_KMAJOR", False)
    cfg = _cfg(**variant).replace(EARLY_LOADS=True)
    module = run_passes(gemm_sm90.trace(*stand_ins(DType.f16), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=b_kmajor))
    from gluon.backend.lowering import lower_module
    text = lower_module(module).ttgir
    head, roles = text.split("ttg.warp_specialize", 1)
    rings = 2 if cfg.SPLIT_WGS else 1
    assert head.count("ttng.barrier_expect") == cfg.STAGES                            # one per stage
    assert head.count("ttng.async_tma_copy_global_to_local") == cfg.STAGES * (rings + 1)   # A rings + B
    ck = gemm_sm90.compile(*stand_ins(DType.f16), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=b_kmajor)
    assert ck.spills == 0 and sass_instructions(ck.sass())["HGMMA.64x256x16.F32"] >= 4


@pytest.mark.parametrize("cfg", [dict(CLUSTER_M=2), dict(EPILOGUE="ring", STAGES=4)])
def test_early_loads_refuses_what_it_does_not_handle(cfg):
    cfg = _cfg(**cfg)
    with pytest.raises(GluonError, match="EARLY_LOADS is written for the kernel without multicast clusters"):
        cfg.replace(EARLY_LOADS=True)


def test_early_loads_with_cluster_k():
    """CLUSTER_K's CTAs each load their own K slice: EARLY_LOADS is on there (its first unit found as the kernel's
    units are, the rank its slice; "auto" since the decode picks gained 1-3% with it and the lean prologue); the
    trace issues every stage's loads before the roles start."""
    cfg = _cfg(CLUSTER_M=1, CLUSTER_K=2, BLOCK_N=128, CONSUMER_WGS=1, EPILOGUE="direct")
    early = cfg.resolve(2)
    assert early.EARLY_LOADS is True and early.LEAN_PROLOGUE is True
    assert cfg.replace(EARLY_LOADS=False).resolve(2).EARLY_LOADS is False
    module = run_passes(gemm_sm90.trace(*stand_ins(DType.bf16, DType.bf16, 2), num_warps=num_warps(early), CFG=early,
                                        B_KMAJOR=True))
    from gluon.backend.lowering import lower_module
    head = lower_module(module).ttgir.split("ttg.warp_specialize", 1)[0]
    assert head.count("ttng.barrier_expect") == early.STAGES
    assert head.count("ttng.async_tma_copy_global_to_local") == early.STAGES * 2          # A and B


def test_early_loads_auto_is_on_where_the_kernel_has_it():
    assert resolve_config(2048, 2048, 2048, 132, 2).EARLY_LOADS is True
    assert resolve_config(1000, 1000, 1000, 132, 2).EARLY_LOADS is True              # small tiles
    assert resolve_config(4000, 3000, 5000, 132, 2, pitch_aligned=False).EARLY_LOADS is False   # a cluster
    for cfg in (dict(CLUSTER_M=2, EPILOGUE="tma"), dict(EPILOGUE="ring", STAGES=4)):
        assert resolve_config(2048, 2048, 2048, 132, 2, config=cfg).EARLY_LOADS is False, cfg
    with pytest.raises(GluonError, match="EPILOGUE='coalesced' has not run in a cluster"):    # choose_config's
        resolve_config(2048, 2048, 2048, 132, 2, config=dict(CLUSTER_M=2))                  # one-wave epilogue
    assert resolve_config(2048, 2048, 2048, 132, 2, config=dict(EARLY_LOADS=False)).EARLY_LOADS is False
    assert DEFAULT_CONFIG.replace(EARLY_LOADS="auto").resolve(2).EARLY_LOADS is True
    # the tuner's configs resolve the same way
    from gluon.tuning.templates.gemm_sm90 import TUNING
    assert TUNING.kernel_config(dict(CLUSTER_M=2), "fp16").EARLY_LOADS is False
    assert TUNING.kernel_config(dict(STAGES=4), "fp16").EARLY_LOADS is True


def test_early_loads_auto_reaching_the_kernel_is_an_error():
    cfg = _cfg().replace(EARLY_LOADS="auto")
    with pytest.raises(GluonError, match="the kernel takes True or False"):
        gemm_sm90.trace(*stand_ins(DType.f16), num_warps=num_warps(cfg), CFG=cfg)


@pytest.mark.parametrize("kw,match", [
    (dict(STAGSE=4), r"GemmConfig has no field 'STAGSE' \(did you mean STAGES\?\)"),
    (dict(STAGES="4"), r"GemmConfig STAGES='4': takes a positive int"),
    (dict(SWIZZLE=96), r"GemmConfig SWIZZLE=96: takes one of 0, 32, 64, 128"),
    (dict(K_ZIGZAG="auto"), r"GemmConfig K_ZIGZAG='auto': takes True or False"),
    (dict(EARLY_LOADS="yes"), r"GemmConfig EARLY_LOADS='yes': takes True, False or 'auto'"),
    (dict(LEAN_PROLOGUE=True, EPILOGUE="ring"), r"LEAN_PROLOGUE is verified for the cooperative kernel without "
                                                r"multicast clusters, the ring epilogue or scales in the ring "
                                                r"\(EPILOGUE='ring'\)"),
    (dict(CONSUMER_REGS=232), r"GemmConfig CONSUMER_REGS=232: .* with SPLIT_WGS=True"),
])
def test_gemm_config_errors_name_the_field(kw, match):
    """A bad config is refused when it is made, with the field and what it takes."""
    with pytest.raises(GluonError, match=match):
        DEFAULT_CONFIG.replace(**kw)
    assert GemmConfig(SPLIT_WGS=1, CONSUMER_REGS=232).SPLIT_WGS is True        # `--set SPLIT_WGS=1`
    resolved = _cfg()
    assert resolved.resolve(2) is resolved and DEFAULT_CONFIG.resolve(2) != DEFAULT_CONFIG     # resolved once


def test_cpu_operands_get_one_line_naming_the_operand():
    """Not torch's 'Torch not compiled with CUDA enabled' from inside the plan."""
    import torch
    from gluon.ir import GluonError
    from gluon.kernels.gemm_sm90.host import launch
    a = torch.randn(64, 64).half()
    with pytest.raises(GluonError, match="gemm: a is on cpu; the kernel runs on a CUDA device"):
        launch(a, a, torch.empty(64, 64).half())


def test_a_plan_made_in_the_interpreter_serves_no_launch_outside_it():
    """The plan cache keys on the device and on whether the interpreter runs the launch: a CPU problem first planned
    (and compiled) in the interpreter, then launched without it or on meta tensors, still gets the device check's
    line (the cached plan skipped it: the interpreter's binary ran a CPU call outside the interpreter)."""
    import torch
    from gluon.interpret import set_enabled
    from gluon.ir import GluonError
    from gluon.kernels.gemm_sm90.host import launch
    a = torch.randn(64, 48).half()
    meta = torch.empty(64, 48, dtype=torch.float16, device="meta")
    was = set_enabled(True)
    try:
        c = launch(a, a.T.contiguous(), torch.empty(64, 64).half())
        # a meta tensor's device index is a CPU tensor's (-1): the plan keys on the device itself
        with pytest.raises(GluonError, match="CPU interpreter"):
            launch(meta, meta.T.contiguous(), torch.empty(64, 64, dtype=torch.float16, device="meta"))
    finally:
        set_enabled(was)
    torch.testing.assert_close(c.float(), a.float() @ a.float().T, rtol=1e-2, atol=1e-2)
    with pytest.raises(GluonError, match="gemm: a is on cpu; the kernel runs on a CUDA device"):
        launch(a, a.T.contiguous(), torch.empty(64, 64).half())


# ------------------------------------------------------------------------------ fp8

@pytest.mark.parametrize("dt,name", [(DType.f8e4m3, "E4M3"), (DType.f8e5m2, "E5M2")])
@pytest.mark.parametrize("M,scale", [(8192, "tensor"), (16, "rowcol"), (1000, "rowcol")])
def test_fp8_compiles_to_qgmma_with_the_k_step_in_bytes(dt, name, M, scale):
    from gluon.kernels.gemm_sm90.picks import resolve_config
    cfg = resolve_config(M, 4096, 4096, 132, 2, True, None, 1)
    assert cfg.BLOCK_K == 2 * choose_config(M, 4096, 4096, 132).BLOCK_K      # 8-bit: twice the elements
    ck = gemm_sm90.compile(*stand_ins(dt, DType.bf16, splits=2), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=True,
                           SCALE=scale)
    ops = sass_instructions(ck.sass())
    assert any(k.startswith("QGMMA.") and k.endswith(f".F32.{name}.{name}") for k in ops)
    assert ck.shared_bytes <= 227 * 1024


def test_fp8_refuses_a_row_major_b_and_bad_scales():
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_sm90 import launch
    a = torch.zeros(64, 128).to(torch.float8_e4m3fn)
    b = torch.zeros(128, 256).to(torch.float8_e4m3fn)
    c = torch.empty(64, 256, dtype=torch.bfloat16)
    with pytest.raises(GluonError, match="8-bit inputs need B K-major"):
        launch(a, b, c)
    bt = torch.zeros(256, 128).to(torch.float8_e4m3fn)
    one = torch.ones(1)
    with pytest.raises(GluonError, match="give both scale_a and scale_b"):
        launch(a, bt, c, b_kmajor=True, scale_a=one)
    with pytest.raises(GluonError, match="per row and column 64 .* and 256"):
        launch(a, bt, c, b_kmajor=True, scale_a=torch.ones(3), scale_b=one)
    with pytest.raises(GluonError, match="contiguous torch.float32"):
        launch(a, bt, c, b_kmajor=True, scale_a=one.double(), scale_b=one)
    with pytest.raises(GluonError, match="scales are for fp8 inputs"):
        launch(a.bfloat16(), bt.bfloat16(), c, b_kmajor=True, scale_a=one, scale_b=one)


def test_overrides_without_swap_ab_apply_to_the_ordinary_kernels_pick():
    """A dict such as {"SPLIT_WGS": True} at a small M means the unswapped family (as before SWAP_AB existed);
    no dict gets the pick (DECODE_PAIRS here: 128 tiles of 64x128), and {"SWAP_AB": True, ...} overrides the swapped
    pick."""
    assert resolve_config(128, 8192, 8192, 132, 2).CLUSTER_M == 2
    assert resolve_config(128, 8192, 8192, 132, 2, True, {"SWAP_AB": True}).BLOCK_M == 128
    cfg = resolve_config(128, 8192, 8192, 132, 2, True, {"SPLIT_WGS": True})
    assert not cfg.SWAP_AB and cfg.SPLIT_WGS
    assert resolve_config(16, 4096, 4096, 132, 2, True, {"SWAP_AB": True, "STAGES": 8}).BLOCK_M == 16


@pytest.mark.parametrize("shape,out_size,aligned", [((130, 392, 128), 2, False), ((130, 264, 200), 4, True),
                                                    ((8192, 8192, 8192), 2, True)])
def test_a_dict_asking_for_the_swap_runs_at_any_shape(shape, out_size, aligned):
    """`{"SWAP_AB": True}` where the pick is the ordinary kernel's (rows off 128 bytes: a 2-CTA cluster; an fp32
    output: the TMA epilogue; several tiles a program: SPLIT_WGS): the pick without what the swap does not run
    with, instead of a refusal of a field the caller never set."""
    cfg = resolve_config(*shape, 4 if shape[0] < 1000 else 132, out_size, aligned, {"SWAP_AB": True})
    assert cfg.SWAP_AB and cfg.CLUSTER_M == 1 and not cfg.SPLIT_WGS and cfg.EPILOGUE == "direct"
    # asked for together: the pairs along M share the swapped kernel's B tile too
    assert resolve_config(*shape, 132, out_size, aligned, {"SWAP_AB": True, "CLUSTER_M": 2}).CLUSTER_M == 2


@pytest.mark.parametrize("dtype,in_size", [(DType.bf16, 2), (DType.f8e4m3, 1)])
def test_the_deep_k_pick_for_an_fp32_output_fits_shared_memory(dtype, in_size):
    """DEEP_K_CONFIG's 6 stages of 32 KiB and a 128x128 fp32 staging tile (64 KiB) would need 257 KiB: an fp32
    output takes 5 stages."""
    cfg = resolve_config(256, 256, 16384, 132, 4, in_size=in_size)
    assert cfg.BLOCK_N == 128 and cfg.STAGES == 5
    ck = gemm_sm90.compile(*stand_ins(dtype, DType.f32), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=in_size == 1)
    assert ck.shared_bytes <= 227 * 1024


@pytest.mark.parametrize("kw,fix", [(dict(BLOCK_M=192, CONSUMER_WGS=3), "SPLIT_WGS=True"),
                                    (dict(BLOCK_M=96, CONSUMER_WGS=1), "BLOCK_M=64 or 128")])
def test_a_consumer_roles_rows_must_be_whole_power_of_two_wgmmas(kw, fix):
    """192 rows on three cooperative warpgroups used to fail deep in the trace (an arange of 192); the config says
    what would run."""
    with pytest.raises(GluonError, match=rf"BLOCK_M={kw['BLOCK_M']} with CONSUMER_WGS=.*power of two.*{fix}"):
        DEFAULT_CONFIG.replace(**kw)
    assert DEFAULT_CONFIG.replace(BLOCK_M=192, CONSUMER_WGS=3, SPLIT_WGS=True, CONSUMER_REGS=152).BLOCK_M == 192


@pytest.mark.parametrize("M,N,K", [(512, 512, 16384), (640, 640, 32768), (384, 768, 65536), (384, 1024, 65536),
                                   (384, 384, 65536), (640, 1024, 32768), (768, 768, 49152), (1000, 1000, 16384)])
def test_deep_k_slices_fill_one_wave_of_ctas(M, N, K):
    """The deep-K pick's units in CTAs (2-CTA clusters along M: an odd count of tile rows leaves the last pair's
    second CTA without rows, and it still takes an SM) fit one wave: 640x640 made 150 CTAs on 132 SMs, so 9
    clusters ran a second unit."""
    from gluon.kernels.gemm_sm90.geometry import units
    cfg = resolve_config(M, N, K, 132, 2, True, None)
    S = split_k(M, N, K, cfg, 132)
    assert S > 1 and units(M, N, cfg, S) * cfg.cluster_size <= 132
    assert units(M, N, cfg, S + 1) * cfg.cluster_size > 132 or S == 16 or -(-K // cfg.BLOCK_K) // (S + 1) < 16


@pytest.mark.parametrize("M,pairs", [(512, True), (1024, True), (256, True), (200, True), (640, False), (384, False),
                                     (896, False), (300, False)])
def test_deep_k_pairs_share_b_only_over_an_even_count_of_tile_rows(M, pairs):
    """Over an odd count of 128-row tiles the last 2-CTA pair's second CTA has no rows: no cluster there (pairs
    read 1-26% lower against cuBLAS at seven such shapes on an H100; 13% higher at 512x512x65536)."""
    cfg = choose_config(M, 640, 32768, 132)
    assert cfg.BLOCK_M == 128 and cfg.BLOCK_N == 128 and cfg.CLUSTER_M == (2 if pairs else 1)


@pytest.mark.parametrize("M,N,K,wide,pairs", [(768, 768, 49152, True, True), (384, 1024, 65536, True, False),
                                              (768, 1024, 32768, True, True), (1024, 1024, 32768, False, True),
                                              (512, 512, 16384, False, True), (640, 640, 32768, False, False),
                                              (256, 1024, 65536, False, True)])
def test_deep_k_takes_128x256_tiles_where_a_ctas_share_is_smaller(M, N, K, wide, pairs):
    """128x256 tiles make more K slices, which fill the SMs better where 128x128 tiles leave many idle (768^2: 126
    CTAs against 108); at an equal share of the work a CTA (1024^2, 512^2: the same 128 CTAs) the narrow tiles' fewer
    slices won. 16-bit outputs and inputs only: fp32 outputs and fp8 keep the 128x128 tiles."""
    from gluon.kernels.gemm_sm90.geometry import slice_work, units
    from gluon.kernels.gemm_sm90.picks import DEEP_K_CONFIG, DEEP_K_WIDE
    cfg = choose_config(M, N, K, 132)
    assert (cfg.BLOCK_N, cfg.CONSUMER_WGS, cfg.STAGES) == ((256, 2, 4) if wide else (128, 1, 6))
    assert cfg.CLUSTER_M == (2 if pairs else 1)
    narrow = DEEP_K_CONFIG.replace(CLUSTER_M=cfg.CLUSTER_M)
    wider = DEEP_K_WIDE.replace(CLUSTER_M=cfg.CLUSTER_M)
    assert (slice_work(M, N, K, wider, 132) * 1.05 <= slice_work(M, N, K, narrow, 132)) == wide
    S = split_k(M, N, K, cfg, 132)
    assert units(M, N, cfg, S) * cfg.cluster_size <= 132
    assert choose_config(M, N, K, 132, out_size=4).BLOCK_N == 128
    assert resolve_config(M, N, K, 132, 2, in_size=1).BLOCK_N == 128
