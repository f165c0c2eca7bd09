"""The GEMM's fp8 scales in the CPU interpreter (GLUON_INTERPRET): per tensor, per row and column, and per block
as DeepSeek's DeepGEMM (scale_a [M, ceil(K/128)], scale_b [ceil(N/128), ceil(K/128)], each 128-deep block's
product summed in fp32), against a reference that dequantizes with the same scales; the scale shapes that fit
none of them get one line naming both shapes and what would be right; the block configs the kernel refuses."""
import pytest

torch = pytest.importorskip("torch")

from gluon.ir import GluonError  # noqa: E402
from gluon.kernels.gemm_sm90 import launch  # noqa: E402
from gluon.tuning.templates.gemm_sm90_fp8_scales import dequantized  # noqa: E402
from gluon.kernels.gemm_sm90.block_scaled import block_scaled_overrides  # noqa: E402

NAN = float("nan")


def _fp8(*shape, dtype=torch.float8_e4m3fn):
    return (torch.randn(*shape) * 2).to(dtype)


@pytest.mark.parametrize("M,N,K,kw", [(200, 136, 320, {}), (64, 256, 384, {}), (1, 300, 256, {}), (5, 200, 16384, {}),
                                       (70, 8300, 200, {}),
                                       (130, 200, 128, dict(splits=1)),
                                       (200, 136, 520, dict(splits=2)), (96, 300, 256, dict(config=dict(BLOCK_N=64)))])
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_block_scales_match_the_dequantized_product(interpret_env, M, N, K, kw, dtype):
    torch.manual_seed(7)
    a, b = _fp8(M, K, dtype=dtype), _fp8(N, K, dtype=dtype)
    KB, NB = -(-K // 128), -(-N // 128)
    sa = torch.rand(M, KB) * 2 + 0.25            # scales that differ by block: a wrong block would show
    sb = torch.rand(NB, KB) * 2 + 0.25
    c = torch.full((M, N), NAN).bfloat16()
    launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb, **kw)
    ref = dequantized(a, b, sa, sb)
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())
    # the same scales applied per tensor would be far off: the blocks are really used
    flat = (a.double() * sa.mean().double()) @ (b.double() * sb.mean().double()).T
    assert (c.double() - flat).abs().max() > 0.05 * ref.abs().max()


@pytest.mark.parametrize("kind", ["tensor", "rowcol"])
@pytest.mark.parametrize("M,N,K,config", [
    (200, 136, 320, None),                                           # 128x64 tiles: the scales loaded ahead
    (16, 136, 320, None),                                            # SWAP_AB (rows along N): ahead
    (200, 300, 320, {"BLOCK_N": 256, "CONSUMER_WGS": 2, "SPLIT_WGS": True}),   # 64x256 a warpgroup: cp.async
    (300, 600, 256, {"BLOCK_N": 256, "CONSUMER_WGS": 2, "SPLIT_WGS": False}),  # 128x256, eight warps: cp.async
])
def test_tensor_and_rowcol_scales_match_the_dequantized_product(interpret_env, monkeypatch, kind, M, N, K, config):
    """Per tensor and per row and column, loaded before the K loop into registers (where they fit) or copied
    into shared memory by cp.async (a pair of buffers a role): two programs, so each runs several tiles and
    both buffers."""
    import gluon.kernels.gemm_sm90.host as host
    torch.manual_seed(8)
    a, b = _fp8(M, K), _fp8(N, K)
    if kind == "tensor":
        sa, sb = torch.rand(1) + 0.5, torch.rand(1) + 0.5
    else:
        sa, sb = torch.rand(M) + 0.5, torch.rand(N) + 0.5
    c = torch.full((M, N), NAN).bfloat16()
    monkeypatch.setattr(host, "device_sms", lambda d: 2)
    launch(a, b, c, config, b_kmajor=True, scale_a=sa, scale_b=sb)
    ref = (a.double() * sa.double().reshape(-1, 1)) @ (b.double() * sb.double().reshape(-1, 1)).T
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())


def test_scales_of_no_known_shape_are_one_line_with_the_shapes_that_would_fit(interpret_env):
    a, b, c = _fp8(200, 320), _fp8(136, 320), torch.empty(200, 136).bfloat16()
    with pytest.raises(GluonError, match=r"scale_a is \(200, 2\) and scale_b \(2, 3\).*\[200, 3\].*\[2, 3\]"):
        launch(a, b, c, b_kmajor=True, scale_a=torch.ones(200, 2), scale_b=torch.ones(2, 3))


def test_a_block_config_the_kernel_cannot_scale_is_refused(interpret_env):
    a, b, c = _fp8(200, 320), _fp8(136, 320), torch.empty(200, 136).bfloat16()
    sa, sb = torch.ones(200, 3), torch.ones(2, 3)
    with pytest.raises(GluonError, match="BLOCK_N 64 or 128"):
        launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb, config=dict(BLOCK_N=32))


def test_block_scales_follow_k_zigzag(interpret_env):
    """K_ZIGZAG: a program's odd units get their K slice top down; their k-steps take those blocks' scales.
    Several units a program (a grid of 2), so the odd ones run."""
    from gluon.kernels.gemm_sm90 import GemmConfig
    torch.manual_seed(9)
    M, N, K = 512, 256, 512
    a, b = _fp8(M, K), _fp8(N, K)
    sa, sb = torch.rand(M, 4) * 2 + 0.25, torch.rand(2, 4) * 2 + 0.25
    c = torch.full((M, N), NAN).bfloat16()
    cfg = GemmConfig(BLOCK_N=128, BLOCK_K=128, SPLIT_WGS=True, K_ZIGZAG=True, STAGES=3)
    import gluon.kernels.gemm_sm90.host as host
    import gluon.kernels.tensor_checks as tc
    real = tc.device_sms
    host.device_sms = lambda d: 2                     # two programs for eight tiles: four units each
    try:
        launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb, config=cfg)
    finally:
        host.device_sms = real
    ref = dequantized(a, b, sa, sb)
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())


@pytest.mark.parametrize("schedule", ["in_order", "3", "4", "5", "6", "7"])
@pytest.mark.parametrize("M,N,K,splits", [(512, 256, 512, None), (200, 136, 520, 2)])
def test_block_scales_with_mma_turns(interpret_env, monkeypatch, M, N, K, splits, schedule):
    """MMA_TURNS: the two consumer warpgroups take turns issuing their WGMMAs (named barriers); several units a
    program (a grid of 2) and K slices, so the turns run across units and the last one is taken back. Under seeded
    schedules too (the roles also switched after every arrive): turns closed and reopened per unit would count the
    last warpgroup twice into warpgroup 0's barrier there, as the attention kernel's did."""
    from gluon.kernels.gemm_sm90 import GemmConfig
    monkeypatch.setenv("GLUON_INTERPRET_SCHEDULE", schedule)
    import gluon.kernels.gemm_sm90.host as host
    torch.manual_seed(10)
    a, b = _fp8(M, K), _fp8(N, K)
    KB, NB = -(-K // 128), -(-N // 128)
    sa, sb = torch.rand(M, KB) * 2 + 0.25, torch.rand(NB, KB) * 2 + 0.25
    c = torch.full((M, N), NAN).bfloat16()
    cfg = GemmConfig(BLOCK_N=128, BLOCK_K=128, SPLIT_WGS=True, K_ZIGZAG=True, STAGES=3, MMA_TURNS=True,
                     EPILOGUE="direct" if splits else "tma")
    monkeypatch.setattr(host, "device_sms", lambda d: 2)
    launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb, config=cfg, splits=splits)
    ref = dequantized(a, b, sa, sb)
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())


@pytest.mark.parametrize("turns,schedule", [(False, "in_order"), (True, "in_order")] + [(True, s) for s in "34567"])
def test_block_scales_on_three_warpgroups(interpret_env, monkeypatch, turns, schedule):
    """192 x 128 tiles, three consumer warpgroups of 64 rows each its own role (152 registers each), with and
    without turns (round robin over named barriers 8, 9, 10): two units a program, rows off the tile; the turns
    under seeded schedules too."""
    from gluon.kernels.gemm_sm90 import GemmConfig
    monkeypatch.setenv("GLUON_INTERPRET_SCHEDULE", schedule)
    import gluon.kernels.gemm_sm90.host as host
    torch.manual_seed(11)
    M, N, K = 500, 256, 512
    a, b = _fp8(M, K), _fp8(N, K)
    sa, sb = torch.rand(M, 4) * 2 + 0.25, torch.rand(2, 4) * 2 + 0.25
    c = torch.full((M, N), NAN).bfloat16()
    cfg = GemmConfig(BLOCK_M=192, BLOCK_N=128, BLOCK_K=128, CONSUMER_WGS=3, CONSUMER_REGS=152, SPLIT_WGS=True,
                     K_ZIGZAG=True, STAGES=3, MMA_TURNS=turns)
    monkeypatch.setattr(host, "device_sms", lambda d: 2)
    launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb, config=cfg)
    ref = dequantized(a, b, sa, sb)
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())


@pytest.mark.parametrize("M,N,K,splits,kw", [
    (600, 256, 512, None, dict(BLOCK_M=256, CONSUMER_WGS=2, SPLIT_WGS=True, K_ZIGZAG=True)),  # odd units top down
    (300, 136, 520, 2, dict(BLOCK_M=256, CONSUMER_WGS=2, SPLIT_WGS=True, EPILOGUE="direct")),  # K slices, rows off
    (300, 136, 520, 2, dict(BLOCK_M=256, CONSUMER_WGS=2, SPLIT_WGS=True, EPILOGUE="direct", SPLITK_FIXUP=True)),
    (200, 256, 384, None, dict(BLOCK_M=128, CONSUMER_WGS=1, EPILOGUE="coalesced")),           # one warpgroup
    (200, 256, 384, None, dict(BLOCK_M=128, CONSUMER_WGS=1, EPILOGUE="ring", STAGES=4)),
])
@pytest.mark.parametrize("m_major", [False, True])
def test_block_scales_on_128_rows_a_warpgroup_in_two_parts(interpret_env, monkeypatch, M, N, K, splits, kw, m_major):
    """128 rows a warpgroup (256x128 tiles on two, 128x128 on one): the rows in two 64-row parts, each part's
    WGMMA, promotion and epilogue in turn; scales that differ by block and row, rows and K off the tiles, a grid
    of 2 (several units a program), K slices summed by the second pass and by the in-kernel fixup, each epilogue."""
    from gluon.kernels.gemm_sm90 import GemmConfig
    _check_on_two_programs(monkeypatch, M, N, K, GemmConfig(**dict(dict(BLOCK_N=128, BLOCK_K=128, STAGES=3), **kw)),
                           splits, m_major, seed=13)


def _check_on_two_programs(monkeypatch, M, N, K, cfg, splits, m_major: bool, seed: int):
    """A block-scaled launch of `cfg` on a grid of 2 (programs run several units), scales that differ by block and
    row (scale_a M-major with `m_major`), against the dequantized product."""
    import gluon.kernels.gemm_sm90.host as host
    torch.manual_seed(seed)
    a, b = _fp8(M, K), _fp8(N, K)
    KB, NB = -(-K // 128), -(-N // 128)
    sa, sb = torch.rand(M, KB) * 2 + 0.25, torch.rand(NB, KB) * 2 + 0.25
    c = torch.full((M, N), NAN).bfloat16()
    monkeypatch.setattr(host, "device_sms", lambda d: 2)
    launch(a, b, c, b_kmajor=True, scale_a=sa.T.contiguous().T if m_major else sa, scale_b=sb, config=cfg,
           splits=splits)
    ref = dequantized(a, b, sa, sb)
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())


def test_two_parts_refuse_what_they_do_not_run(interpret_env):
    a, b, c = _fp8(300, 256), _fp8(256, 256), torch.empty(300, 256).bfloat16()
    sa, sb = torch.ones(300, 2), torch.ones(2, 2)
    for extra, what in [(dict(MMA_TURNS=True), "MMA_TURNS"), (dict(SCALES_AHEAD=True), "SCALES_AHEAD"),
                        (dict(PIPELINED_PROMOTION=True), "PIPELINED_PROMOTION")]:
        cfg = dict(BLOCK_M=256, BLOCK_N=128, CONSUMER_WGS=2, SPLIT_WGS=True, **extra)
        with pytest.raises(GluonError, match=f"two parts of 64.*{what}=True"):
            launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb, config=cfg)


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (1000, 3000, 784)])
def test_a_callers_256_rows_take_a_warpgroup_per_128(shape):
    """BLOCK_M=256 alone: two warpgroups of 128 rows each run in two parts (four of 64 rows do not fit the
    registers), each warpgroup its own role or both cooperative, as the pick's SPLIT_WGS says; the picks keep theirs."""
    from gluon.kernels.gemm_sm90 import host
    from gluon.kernels.gemm_sm90.picks import resolve_config
    given = block_scaled_overrides(*shape, 132, 2, True, dict(BLOCK_M=256))
    assert resolve_config(*shape, 132, 2, True, given, 1).CONSUMER_WGS == 2
    given = block_scaled_overrides(*shape, 132, 2, True, dict(BLOCK_M=128))
    assert resolve_config(*shape, 132, 2, True, given, 1).CONSUMER_WGS == 2


def _block_pick(kw: dict | None, out: str = "bf16", shape=(4096, 4096, 4096)):
    """The block-scaled launch's config at `shape` with the caller's `kw` and an `out` C, and its sm_90 compile."""
    from gluon.dtypes import DType
    from gluon.kernels.gemm_sm90 import host
    from gluon.kernels.gemm_sm90.geometry import num_warps
    from gluon.kernels.gemm_sm90.picks import resolve_config
    from gluon.kernels.gemm_sm90.kernel import gemm_sm90
    out = DType[out]
    given = block_scaled_overrides(*shape, 132, out.bits // 8, True, kw)
    cfg = resolve_config(*shape, 132, out.bits // 8, True, given, 1)
    return cfg, gemm_sm90.compile(*host.stand_ins(DType.f8e4m3, out), num_warps=num_warps(cfg), CFG=cfg,
                                  B_KMAJOR=True, SCALE="block")


def _sass_ops(ck) -> list[str]:
    """A compiled kernel's SASS as a list of instructions (opcode and operands)."""
    return [" ".join(ln.split(";")[0].split()[1:]) for ln in ck.sass().splitlines() if ";" in ln]


def _block_pick_sass(kw: dict | None, shape=(4096, 4096, 4096)):
    """`_block_pick` with a bf16 C at `shape` (no spills), and its SASS (`_sass_ops`)."""
    cfg, ck = _block_pick(kw, shape=shape)
    assert ck.spills == 0
    return cfg, _sass_ops(ck)


@pytest.mark.parametrize("kw", [dict(BLOCK_M=256, CONSUMER_WGS=2, SPLIT_WGS=True), dict(BLOCK_M=128, CONSUMER_WGS=1),
                                dict(BLOCK_M=256, CONSUMER_WGS=2, SPLIT_WGS=False)])
def test_two_parts_promote_before_the_second_wgmma_and_do_not_spill(kw):
    """The second part's WGMMA starts from zeros that depend on the first part's promoted sum, so ptxas issues it
    after the promotion's FFMAs, in the first product's registers: no spills (with independent zeros it was issued
    under the promotion, two products beside the two sums, and spilled 800 bytes). The second part's scales are
    loaded with the first's, under its WGMMA (ptxas issued them after the second WGMMA before)."""
    cfg, ops = _block_pick_sass(kw)
    firsts = [i for i, op in enumerate(ops) if op.startswith("QGMMA") and not ops[i - 1].startswith("QGMMA")
              and "!UPT" in op]                         # each k-step's first part: its product from zero
    assert len(firsts) >= (cfg.CONSUMER_WGS if cfg.SPLIT_WGS else 1)      # each role's k-loop
    for i in firsts:
        wait = next(k for k in range(i, len(ops)) if ops[k].startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
        second = next(k for k in range(wait, len(ops)) if ops[k].startswith("QGMMA"))
        assert sum(op.startswith("FFMA") for op in ops[wait:second]) >= 64     # the whole promotion in between
        # both parts' A scales and B's are asked for under the first part's WGMMA, none after its wait
        wait2 = next(k for k in range(second, len(ops)) if ops[k].startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
        assert sum("LDG" in op for op in ops[i:wait]) >= 5 and not any("LDG" in op for op in ops[wait:wait2])


@pytest.mark.parametrize("M,N,K,splits,kw", [
    (200, 300, 384, None, {}),                                      # a right half past N (its B block absent)
    (512, 512, 512, None, dict(K_ZIGZAG=True)),                     # two units a program, the odd one top down
    (200, 640, 520, 2, dict(K_ZIGZAG=False, EPILOGUE="direct")),    # K slices, the last one short
    (130, 512, 256, None, dict(EPILOGUE="coalesced", STAGES=4)),
    (64, 300, 256, None, dict(BLOCK_M=64, CONSUMER_WGS=1, STAGES=2)),   # one warpgroup
])
@pytest.mark.parametrize("m_major", [False, True])
@pytest.mark.parametrize("quarters,ahead", [(False, False), (True, False), (False, True), (True, True)])
def test_block_scales_on_256_columns_in_two_halves(interpret_env, monkeypatch, M, N, K, splits, kw, m_major, quarters,
                                                   ahead):
    """BLOCK_N 256: each warpgroup's 64 rows as two 128-column halves, each with its own B block's scale, A loaded
    into registers once a k-step for both (with QUARTERS as four 64-column WGMMAs, two in flight; with SCALES_AHEAD
    each k-step's scales loaded a k-step early). Scales that differ by block, so a half promoted with the other's B
    scale or another k-step's shows; a grid of 2, so programs run several units."""
    from gluon.kernels.gemm_sm90 import host
    from gluon.kernels.gemm_sm90.picks import resolve_config
    given = block_scaled_overrides(M, N, K, 2, 2, True, dict(BLOCK_N=256, QUARTERS=quarters,
                                                                    SCALES_AHEAD=ahead, **kw))
    cfg = resolve_config(M, N, K, 2, 2, True, given, splits or 1)
    assert cfg.BLOCK_N == 256 and cfg.SPLIT_WGS and cfg.BLOCK_M == 64 * cfg.CONSUMER_WGS
    _check_on_two_programs(monkeypatch, M, N, K, cfg, splits, m_major, seed=14)


def test_two_halves_refuse_what_they_do_not_run(interpret_env):
    a, b, c = _fp8(300, 256), _fp8(512, 256), torch.empty(300, 512).bfloat16()
    sa, sb = torch.ones(300, 2), torch.ones(4, 2)
    halves = dict(BLOCK_M=128, BLOCK_N=256, CONSUMER_WGS=2, SPLIT_WGS=True)
    for extra, what in [(dict(MMA_TURNS=True), "MMA_TURNS=True"),
                        (dict(PIPELINED_PROMOTION=True), "PIPELINED_PROMOTION=True"),
                        (dict(EPILOGUE="tma2"), "EPILOGUE='tma2'"), (dict(SPLIT_WGS=False), "128 rows on 2")]:
        with pytest.raises(GluonError, match=f"BLOCK_N=256 run each consumer warpgroup's 64 rows.*{what}"):
            launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb, config=dict(halves, **extra))


def test_two_halves_with_an_fp32_output_store_it_from_registers(interpret_env, monkeypatch):
    """BLOCK_N 256 with an fp32 C: stored from registers ("direct"; staged, two 64x128 fp32 tiles a role beside
    three stages passed the shared memory, and one a role spilled), without spills, and right (interpreter); a
    caller's staged epilogue compiles on two stages and is right too."""
    from gluon.kernels.gemm_sm90 import host
    cfg, ck = _block_pick(dict(BLOCK_N=256), "f32")
    assert cfg.EPILOGUE == "direct"
    assert ck.spills == 0
    # a caller's staged epilogue gets the stages that fit beside the whole tile's staging (it asked for 273 KiB)
    staged = dict(BLOCK_N=256, EPILOGUE="tma")
    cfg, _ = _block_pick(staged, "f32")
    assert cfg.STAGES == 2
    torch.manual_seed(15)
    M, N, K = 200, 300, 384
    a, b = _fp8(M, K), _fp8(N, K)
    sa, sb = torch.rand(M, 3) * 2 + 0.25, torch.rand(3, 3) * 2 + 0.25
    monkeypatch.setattr(host, "device_sms", lambda d: 2)
    ref = dequantized(a, b, sa, sb)
    for config in (dict(BLOCK_N=256), staged):
        c = torch.full((M, N), NAN)
        launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb, config=config)
        torch.testing.assert_close(c.double(), ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())


def test_quarters_refuse_what_they_do_not_run(interpret_env):
    from gluon.kernels.gemm_sm90 import GemmConfig
    with pytest.raises(GluonError, match="QUARTERS=True splits the halves.*BLOCK_N=256, got BLOCK_N=128"):
        GemmConfig(BLOCK_N=128, QUARTERS=True)
    a, b, c = _fp8(200, 320), _fp8(136, 320), torch.empty(200, 136).bfloat16()
    with pytest.raises(GluonError, match="QUARTERS=True is for fp8 block scales"):
        launch(a, b, c, b_kmajor=True, scale_a=torch.ones(1), scale_b=torch.ones(1),
               config=GemmConfig(BLOCK_N=256, QUARTERS=True))


def test_quarters_promote_each_under_the_next_wgmma():
    """QUARTERS at 4096^3: a k-step's four 64-column WGMMAs read one register A; the first two are issued together,
    and each promotion (32 FFMAs) follows a wait that leaves one WGMMA in flight (`DEPBAR.LE gsb0, 0x1`), the next
    quarter issued right after it; no spills."""
    cfg, ops = _block_pick_sass(dict(BLOCK_N=256, QUARTERS=True))
    ready = [i for i, op in enumerate(ops) if op.startswith("SYNCS.PHASECHK") and
             any(o.startswith("LDSM") for o in ops[i:i + 8])]            # each role's k-step: ready wait, then A
    assert len(ready) == cfg.CONSUMER_WGS
    for r in ready:
        end = next(k for k in range(r, len(ops)) if ops[k].startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
        step = ops[r:end]
        assert sum(op.startswith("QGMMA.64x64x32") for op in step) == 16                     # four quarters of K 128
        assert len({op.split()[2] for op in step if op.startswith("QGMMA")}) == 4         # one A: 4 k32 slices
        waits = [k for k, op in enumerate(step) if op.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x1")]
        assert len(waits) == 3
        for w in waits[:2]:                   # a promotion, then the next quarter's issue
            issue = next(k for k in range(w, len(step)) if step[k].startswith("QGMMA"))
            assert sum(op.startswith("FFMA") for op in step[w:issue]) >= 32


def test_two_halves_read_a_into_registers_once_and_do_not_spill():
    """BLOCK_N 256 at 4096^3: each k-step's A rows loaded by ldmatrix once and both halves' WGMMAs reading them
    from registers (QGMMA with a register A), the right half's issued after the left's promotion (its zeros depend
    on the promoted sum: independent, ptxas issued it under the promotion and spilled 3 KB), no spills."""
    cfg, ops = _block_pick_sass(dict(BLOCK_N=256))
    firsts = [i for i, op in enumerate(ops) if op.startswith("QGMMA") and not ops[i - 1].startswith("QGMMA")
              and "!UPT" in op]                         # each k-step's left half: its product from zero
    assert len(firsts) == cfg.CONSUMER_WGS             # each role's k-loop
    for i in firsts:
        assert ops[i].split()[2].startswith("R")        # A from registers, not a shared-memory descriptor
        ready = max(k for k in range(i) if ops[k].startswith("SYNCS.PHASECHK"))     # the stage's ready wait
        assert sum(op.startswith("LDSM") for op in ops[ready:i]) == 4       # A's 64 x 128 bytes: four ldmatrix x4
        wait = next(k for k in range(i, len(ops)) if ops[k].startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
        right = next(k for k in range(wait, len(ops)) if ops[k].startswith("QGMMA"))
        assert sum(op.startswith("FFMA") for op in ops[wait:right]) >= 64     # the left promotion in between
        assert ops[right].split()[2] == ops[i].split()[2]                    # the same A registers
        assert not any(op.startswith("LDSM") for op in ops[i:right])


@pytest.mark.parametrize("M,N,K,splits,kw", [
    (512, 256, 512, None, dict(K_ZIGZAG=True)),                     # four units a program, odd ones top down
    (200, 136, 520, 2, dict(K_ZIGZAG=False, EPILOGUE="direct")),    # K slices, the last one short
    (200, 136, 1000, 3, dict(K_ZIGZAG=True, EPILOGUE="direct")),    # zigzag slices of 3 and 2 k-steps
    (512, 256, 384, None, dict(K_ZIGZAG=True, MMA_TURNS=True)),     # with the turns
    (130, 200, 128, None, dict(K_ZIGZAG=False)),                    # one k-step: only the load past the end
    (512, 256, 512, None, dict(K_ZIGZAG=True, FFMA_YIELD=True)),    # a binary's control bits: no other change
])
@pytest.mark.parametrize("m_major", [False, True])
def test_block_scales_loaded_a_k_step_ahead(interpret_env, monkeypatch, M, N, K, splits, kw, m_major):
    """SCALES_AHEAD: each k-step's scales are loaded with the previous k-step (the slice's first before its loop;
    the load past the slice's end masked off). Scales that differ by block, so a scale one k-step off shows;
    a grid of 2, so programs run several units and both K orders."""
    from gluon.kernels.gemm_sm90 import GemmConfig
    cfg = GemmConfig(BLOCK_N=128, BLOCK_K=128, SPLIT_WGS=True, STAGES=3, SCALES_AHEAD=True, **kw)
    _check_on_two_programs(monkeypatch, M, N, K, cfg, splits, m_major, seed=12)


@pytest.mark.parametrize("M,N,K,splits,kw", [
    (512, 256, 512, None, dict(K_ZIGZAG=True)),                     # four units a program, odd ones top down
    (200, 136, 520, 2, dict(K_ZIGZAG=False, EPILOGUE="direct")),    # K slices, the last one short
    (200, 136, 1000, 3, dict(K_ZIGZAG=True, EPILOGUE="direct")),    # zigzag slices of 3 and 2 k-steps
    (130, 200, 128, None, dict(K_ZIGZAG=False)),                    # one k-step: no WGMMA crosses the loop's edge
    (300, 256, 384, None, dict(BLOCK_M=192, CONSUMER_WGS=3, CONSUMER_REGS=152)),   # three warpgroups
    (512, 256, 384, None, dict(K_ZIGZAG=True, MMA_TURNS=True)),    # turns passed at the issue
    (200, 136, 520, 2, dict(K_ZIGZAG=False, MMA_TURNS=True, EPILOGUE="direct")),
    (300, 256, 384, None, dict(BLOCK_M=192, CONSUMER_WGS=3, CONSUMER_REGS=152, MMA_TURNS=True)),
])
@pytest.mark.parametrize("m_major", [False, True])
def test_block_scales_with_the_pipelined_promotion(interpret_env, monkeypatch, M, N, K, splits, kw, m_major):
    """PIPELINED_PROMOTION: each k-step's WGMMA issued after the previous one's promotion and waited for one
    iteration later (the slice's first before its loop, its last after). Scales that differ by block, so a product
    promoted with another k-step's scales shows; a grid of 2, so programs run several units and both K orders."""
    from gluon.kernels.gemm_sm90 import GemmConfig
    cfg = GemmConfig(**dict(dict(BLOCK_N=128, BLOCK_K=128, SPLIT_WGS=True, STAGES=3, PIPELINED_PROMOTION=True), **kw))
    _check_on_two_programs(monkeypatch, M, N, K, cfg, splits, m_major, seed=13)


def test_pipelined_promotion_refuses_what_it_does_not_run(interpret_env):
    from gluon.kernels.gemm_sm90 import GemmConfig
    with pytest.raises(GluonError, match="PIPELINED_PROMOTION=True runs its own k-loop"):
        GemmConfig(SPLIT_WGS=True, PIPELINED_PROMOTION=True, SCALES_AHEAD=True)
    a, b, c = _fp8(200, 320), _fp8(136, 320), torch.empty(200, 136).bfloat16()
    with pytest.raises(GluonError, match="PIPELINED_PROMOTION=True is for fp8 block scales"):
        launch(a, b, c, b_kmajor=True, scale_a=torch.ones(1), scale_b=torch.ones(1),
               config=GemmConfig(PIPELINED_PROMOTION=True))


def test_scales_ahead_outside_block_scales_is_refused(interpret_env):
    from gluon.kernels.gemm_sm90 import GemmConfig
    a, b, c = _fp8(200, 320), _fp8(136, 320), torch.empty(200, 136).bfloat16()
    with pytest.raises(GluonError, match="SCALES_AHEAD=True is for fp8 block scales"):
        launch(a, b, c, b_kmajor=True, scale_a=torch.ones(200), scale_b=torch.ones(136),
               config=GemmConfig(SCALES_AHEAD=True))


def test_mma_turns_outside_block_scales_or_two_warpgroup_roles_is_refused(interpret_env):
    from gluon.kernels.gemm_sm90 import GemmConfig
    with pytest.raises(GluonError, match="MMA_TURNS=True takes two or three consumer warpgroups each its own role"):
        GemmConfig(MMA_TURNS=True)
    a, b, c = _fp8(200, 320), _fp8(136, 320), torch.empty(200, 136).bfloat16()
    with pytest.raises(GluonError, match="MMA_TURNS=True is for fp8 block scales"):
        launch(a, b, c, b_kmajor=True, scale_a=torch.ones(1), scale_b=torch.ones(1),
               config=GemmConfig(SPLIT_WGS=True, MMA_TURNS=True))


@pytest.mark.parametrize("M,N,K", [(200, 256, 512), (64, 136, 300)])
def test_block_scale_a_m_major_as_scaled_mm_takes_it(interpret_env, M, N, K):
    """scale_a M-major ([M, K/128] of strides (1, M): torch._scaled_mm's blockwise layout and DeepGEMM's) is
    read as it is: the same C bit for bit as its contiguous copy; other strides are one line naming them."""
    torch.manual_seed(12)
    a, b = _fp8(M, K), _fp8(N, K)
    KB, NB = -(-K // 128), -(-N // 128)
    sa = (torch.rand(M, KB) * 2 + 0.25).t().contiguous().t()
    sb = torch.rand(NB, KB) * 2 + 0.25
    assert sa.stride() == (1, M) and not sa.is_contiguous()
    c1, c2 = (torch.full((M, N), NAN).bfloat16() for _ in range(2))
    launch(a, b, c1, b_kmajor=True, scale_a=sa, scale_b=sb)
    launch(a, b, c2, b_kmajor=True, scale_a=sa.contiguous(), scale_b=sb)
    assert torch.equal(c1, c2)
    ref = dequantized(a, b, sa, sb)
    torch.testing.assert_close(c1.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())
    with pytest.raises(GluonError, match=r"scale_a must be a contiguous torch.float32 tensor .*M-major.*strides"):
        launch(a, b, c1, b_kmajor=True, scale_a=torch.rand(M, 2 * KB)[:, ::2], scale_b=sb)


@pytest.mark.parametrize("wgs", [2, 3])
def test_mma_turns_hand_over_after_the_wgmma_and_before_the_promotion(wgs):
    """MMA_TURNS (SASS of the 8192^3 block pick with it): each k-step's turn is handed on right after its WGMMA
    wait and before the promotion's first FFMA, which reads the scales back from shared memory after the arrive
    (without that anchor ptxas places the arrive below the 64 FFMAs, and the next warpgroup waits for them)."""
    over = dict(MMA_TURNS=True, SPLIT_WGS=True)
    if wgs == 3:
        over.update(BLOCK_M=192, CONSUMER_WGS=3, CONSUMER_REGS=152)
    cfg, ops = _block_pick_sass(over, (8192, 8192, 8192))
    waits = [i for i, op in enumerate(ops) if op.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0")]
    assert len(waits) >= wgs                                     # each role's k-step loop
    for i in waits:
        arrive = next(k for k in range(i, len(ops)) if ops[k].startswith("BAR.ARV"))
        promote = next(k for k in range(i, len(ops)) if ops[k].startswith("FFMA"))
        assert arrive < promote


@pytest.mark.parametrize("over", [{}, dict(MMA_TURNS=True)])
def test_scales_ahead_come_through_shared_memory_behind_the_roles_barrier(over):
    """SCALES_AHEAD (SASS of the 4096^3 block pick with it): no global load of a scale in the k-loop waits before
    the WGMMA wait (a register carried to the next k-step made ptxas copy it there, waiting for the load: slower
    than without the switch). The scales are cp.async copies (LDGSTS) of the next k-step; this one's are read back
    (LDS) after the copies' wait and a barrier of the role (Triton's, which the kernel relies on: a thread reads
    rows other threads copied), and a barrier orders those reads before the next copies into the other slot."""
    _, ops = _block_pick_sass(dict(over, SCALES_AHEAD=True))
    ops = ["" if op.startswith("@!PT ") else op.split(" ", 1)[1] if op.startswith("@") else op for op in ops]
    waits = [i for i, op in enumerate(ops) if op.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0")]
    assert len(waits) >= 2                                       # each role's k-step loop
    for i in waits:
        issue = max(k for k in range(i) if ops[k].startswith("QGMMA") and "!UPT" in ops[k])
        assert not any(op.startswith("LDG") for op in ops[issue:i])
        copied = next(k for k in range(i, len(ops)) if ops[k].startswith("DEPBAR.LE SB0"))
        read = next(k for k in range(i, len(ops)) if ops[k].startswith("LDS"))
        nxt = next(k for k in range(read, len(ops)) if ops[k].startswith("LDGSTS"))
        assert copied < read and any(op.startswith("BAR.SYNC") for op in ops[copied:read])
        last_read = max(k for k in range(read, nxt) if ops[k].startswith("LDS"))
        assert any(op.startswith("BAR.SYNC") for op in ops[last_read:nxt])
        assert sum(op.startswith("FFMA") for op in ops[i:nxt + 80]) >= 64


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (8192, 8192, 8192)])
@pytest.mark.parametrize("turns", [False, True])
def test_pipelined_promotion_issues_the_next_wgmma_after_the_promotion(shape, turns):
    """PIPELINED_PROMOTION (SASS of the block pick with it; 192x128 tiles on three warpgroups at 8192^3): ptxas keeps
    the WGMMAs pipelined (no advisory such as C7514, no spills); in each role's loop the next stage's ready wait
    and the scale loads come before the WGMMA wait, and the next k-step's first QGMMA after the promotion's FFMAs,
    with no WGMMA wait right behind it. With MMA_TURNS the turn is waited for after the FFMAs and passed on
    (BAR.ARV) right after the issue, before the next WGMMA wait."""
    cfg, ck = _block_pick(dict(PIPELINED_PROMOTION=True, MMA_TURNS=turns), shape=shape)
    assert ck.spills == 0 and not ck.binary.advisories
    ops = _sass_ops(ck)
    ops = ["" if op.startswith("@!PT ") else op.split(" ", 1)[1] if op.startswith("@") else op for op in ops]
    waits = [i for i, op in enumerate(ops) if op.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0")]
    loops = 0
    for i in waits:
        issue = next((k for k in range(i, len(ops)) if ops[k].startswith("QGMMA")), None)
        if issue is None or any(op.startswith("SYNCS.PHASECHK") for op in ops[i:issue]):
            continue                        # a slice's last k-step: the next issue is the next unit's, after its wait
        loops += 1
        before = ops[max(0, i - 40):i]
        assert any(op.startswith("SYNCS.PHASECHK") for op in before)      # the next stage's ready wait ...
        assert any(op.startswith("LDG") for op in before)                 # ... and this k-step's scales
        assert sum(op.startswith("FFMA") for op in ops[i:issue]) >= 64
        nxt = next(k for k in range(issue, len(ops)) if ops[k].startswith("WARPGROUP.DEPBAR"))
        assert any(op.startswith("LDG") for op in ops[issue:nxt])         # the next scales, under the WGMMA
        if turns:
            last_ffma = max(k for k in range(i, issue) if ops[k].startswith("FFMA"))
            assert any(op.startswith("BAR.SYNC") for op in ops[last_ffma:issue])
            issued = max(k for k in range(issue, nxt) if ops[k].startswith("QGMMA"))
            assert any(op.startswith("BAR.ARV") for op in ops[issued:issued + 8])
    assert loops >= cfg.CONSUMER_WGS


# each as measured (docs/PERF.md, forty-first and forty-third sessions: the pick against the others, same run); 128 x
# 28672 x 4096, measured there too, takes the forty-fourth's decode tiles (_DECODE_RESIDENT below), 128 x 16384 x
# 4096 takes them untimed
@pytest.mark.parametrize("shape,kind", [((8192, 8192, 8192), "wide"), ((8192, 28672, 4096), "wide"),
                                        ((4096, 4096, 4096), "wide"), ((8192, 4096, 14336), "wide"),
                                        ((8192, 8192, 4096), "wide"), ((4096, 14336, 4096), "wide"),
                                        ((4096, 4096, 512), "wide"), ((4096, 4096, 1024), "wide"),
                                        ((4096, 4096, 2048), "wide"), ((4096, 8192, 2048), "wide"),
                                        ((2048, 2048, 4096), "wide"), ((2048, 4096, 2048), "wide"),
                                        ((1024, 4096, 4096), "wide"), ((768, 4096, 4096), "wide"),
                                        ((512, 8192, 8192), "wide"), ((1000, 3000, 784), "wide"),
                                        ((384, 8192, 4096), "wide"), ((256, 28672, 4096), "wide"),
                                        ((256, 14336, 4096), "wide"), ((256, 14336, 2048), "wide"),
                                        ((384, 14336, 4096), "tall"), ((384, 4096, 4096), "square"),
                                        ((16384, 8192, 1024), "tall"), ((8192, 8192, 2048), "tall"),
                                        ((8192, 8192, 3072), "tall"), ((4096, 14336, 2048), "tall"),
                                        ((3072, 3072, 2048), "tall"), ((512, 4096, 4096), "square"),
                                        ((1024, 2048, 8192), "square"), ((256, 8192, 8192), "square")])
def test_block_scaled_tiles_where_they_measured_faster(shape, kind):
    """128 x 256 tiles in two halves: over 128x128 tiles from K 512 and 128 rows where they fill the rounds alike
    (5-18% faster), not where half as many tiles leave SMs idle (512x4096x4096: 64 tiles, 29% slower; 384x4096x4096
    22%; 1024x2048x8192 15%); over 192x128 tiles from K 4096 (1-6% faster; 4-25% slower at K 2048-3072). The
    caller's tile fields keep theirs."""
    from gluon.kernels.gemm_sm90 import host
    from gluon.kernels.gemm_sm90.picks import resolve_config
    cfg = resolve_config(*shape, 132, 2, True, block_scaled_overrides(*shape, 132, 2, True, None), 1)
    want = {"wide": (128, 256, 2), "tall": (192, 128, 3), "square": (cfg.BLOCK_M, cfg.BLOCK_N, 2)}[kind]
    assert (cfg.BLOCK_M, cfg.BLOCK_N, cfg.CONSUMER_WGS) == want
    assert kind != "square" or (cfg.BLOCK_M <= 128 and cfg.BLOCK_N <= 128)
    for asked in (dict(BLOCK_M=128), dict(BLOCK_N=128)):
        given = block_scaled_overrides(*shape, 132, 2, True, asked)
        assert resolve_config(*shape, 132, 2, True, given, 1).BLOCK_N <= 128
    given = block_scaled_overrides(*shape, 132, 2, True, dict(BLOCK_M=128))
    assert resolve_config(*shape, 132, 2, True, given, 1).BLOCK_M == 128


# bench/gemm_fp8.py --shapes decode, block scales, the pick against 64 x 128 tiles on one warpgroup over six stages
# (docs/PERF.md, forty-fourth session): "rows" where those were faster, else the pick as it was
_DECODE_ROWS = [(M, N, K) for N, K in ((28672, 4096), (14336, 4096), (8192, 28672), (4096, 14336))
                for M in (1, 8, 16, 32, 64)]
_DECODE_KEPT = [(M, 4096, 4096, (64, 64, 1)) for M in (1, 8, 16, 32, 64, 128)] + [
    (128, 8192, 28672, (128, 128, 2)), (96, 4096, 4096, (64, 64, 1))]
# ... and from 65 rows, the same tiles at two CTAs an SM where they were faster (s44d / s44f)
_DECODE_RESIDENT = [(128, 28672, 4096), (128, 14336, 4096), (96, 14336, 4096), (80, 28672, 4096)]


@pytest.mark.parametrize("shape", _DECODE_ROWS)
def test_block_scaled_decode_takes_64_row_tiles_where_they_measured_faster(shape):
    """Up to 64 rows of A: 64 x 128 tiles on one warpgroup over six stages where the pick's tiles had 128 rows (half
    past M; 2-34% faster at N 8192 to 28672), or 64 columns in as many units (N 4096 at K 14336, 4-5%). The
    caller's tile fields and stages keep theirs."""
    from gluon.kernels.gemm_sm90.block_scaled import BLOCK_SCALED_ROWS
    from gluon.kernels.gemm_sm90.picks import resolve_config
    cfg = resolve_config(*shape, 132, 2, True, block_scaled_overrides(*shape, 132, 2, True, None), 1)
    assert {k: getattr(cfg, k) for k in BLOCK_SCALED_ROWS} == BLOCK_SCALED_ROWS and cfg.BLOCK_K == 128
    asked = resolve_config(*shape, 132, 2, True, block_scaled_overrides(*shape, 132, 2, True, dict(STAGES=4)), 1)
    assert (asked.BLOCK_M, asked.BLOCK_N, asked.STAGES) == (64, 128, 4)
    kept = resolve_config(*shape, 132, 2, True, block_scaled_overrides(*shape, 132, 2, True, dict(BLOCK_M=128)), 1)
    assert kept.BLOCK_M == 128


@pytest.mark.parametrize("shape", _DECODE_RESIDENT)
def test_block_scaled_decode_takes_two_ctas_an_sm_from_65_rows_where_they_measured_faster(shape):
    """65 to 128 rows, where the pick's tiles had 128 rows and these need no K split: 64 x 128 tiles on one
    warpgroup over four stages at two CTAs an SM (2-7% faster than the pick, 128 x 256 halves at 128 x 28672)."""
    from gluon.kernels.gemm_sm90.block_scaled import BLOCK_SCALED_RESIDENT
    from gluon.kernels.gemm_sm90.geometry import split_k
    from gluon.kernels.gemm_sm90.picks import resolve_config
    cfg = resolve_config(*shape, 132, 2, True, block_scaled_overrides(*shape, 132, 2, True, None), 1)
    assert {k: getattr(cfg, k) for k in BLOCK_SCALED_RESIDENT} == BLOCK_SCALED_RESIDENT
    assert split_k(*shape, cfg, 132) == 1


@pytest.mark.parametrize("M,N,K,tile", _DECODE_KEPT)
def test_block_scaled_decode_keeps_the_pick_where_it_measured_faster(M, N, K, tile):
    """N = K = 4096 up to 128 rows: 64 x 64 tiles over two K slices, twice the units 64 x 128 tiles make (those 1-4%
    slower; 7-10% at 96 and 128 rows); 128 x 8192 x 28672 (two CTAs an SM of 64 x 128 tiles, split in two, 0-4%
    slower)."""
    from gluon.kernels.gemm_sm90.picks import resolve_config
    cfg = resolve_config(M, N, K, 132, 2, True, block_scaled_overrides(M, N, K, 132, 2, True, None), 1)
    assert (cfg.BLOCK_M, cfg.BLOCK_N, cfg.CONSUMER_WGS) == tile


@pytest.mark.parametrize("shape", [(512, 1024, 16384), (256, 512, 65536), (4096, 4096, 4096), (1000, 1000, 1000),
                                   (8192, 8192, 8192), (16, 28672, 4096), (96, 14336, 4096)])
def test_block_scaled_picks_compile_without_spills(shape):
    """The k-step's product sits beside the fp32 sum, so a block-scaled tile takes a warpgroup per 64 rows where
    one would hold more than 64 values a thread: the deep-K pick (128x128 on one warpgroup) spilled 384 bytes. (The
    256-column picks hold two 64-row x 128-column sums a warpgroup and one half's product beside them.)"""
    cfg, _ = _block_pick_sass(None, shape)      # no spills
    assert cfg.BLOCK_M * min(cfg.BLOCK_N, 128) <= 64 * 128 * cfg.CONSUMER_WGS
