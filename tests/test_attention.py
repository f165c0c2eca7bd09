"""The SM90 attention forward without a GPU: machine code of the default configs, the config's checks,
the input checks (one GluonError naming the argument), and the 2-D views that avoid copies."""
import pytest
import torch

from gluon import DType
from gluon.backend.machine_code import sass_instructions
from gluon.ir import GluonError
from gluon.kernels.attention_sm90 import (AttentionConfig, attention, choose_config, compile_variant, default_config,
                                          to_config)
from gluon.kernels.attention_sm90.host import _view2d


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_default_configs_compile_to_hgmma_tma_setmaxnreg_without_spills(D, causal):
    ck = compile_variant(D, DType.bf16, causal)
    ops = sass_instructions(ck.sass())
    bn = default_config(D).BLOCK_N
    assert ops[f"HGMMA.64x{bn}x16.F32.BF16"] >= 8       # S = Q K^T: 64 rows x BLOCK_N keys, k-steps of 16
    assert ops[f"HGMMA.64x{D}x16.F32.BF16"] >= 8       # O += P V with P from registers
    assert ops["UTMALDG.2D"] >= 3                      # Q, K, V by TMA
    assert ops["USETMAXREG"] >= 2
    assert ops["MUFU.EX2"] >= 64
    assert ck.spills == 0
    assert ck.shared_bytes <= 227 * 1024
    cfg = default_config(D)
    assert ck.binary.num_warps == 4 * cfg.CONSUMER_WGS + 4     # the producer warp padded to a warpgroup


@pytest.mark.parametrize("sq,causal", [(8192, True), (8192, False), (1000, False), (1000, True), (1024, True)])
def test_the_d128_default_has_no_spills_as_launches_specialize_it(sq, causal):
    """A launch specializes the sizes on divisibility by 16; the register split of the default must not spill
    in any of them (240 / 32 spills at S 1000, 232 / 40 at causal S 8192)."""
    from gluon.kernels.attention_sm90 import attention_sm90, num_warps, stand_ins
    cfg = default_config(128)
    ck = attention_sm90.compile(*stand_ins(DType.bf16, sq, sq, 16, 1), CFG=cfg, HEAD_DIM=128, CAUSAL=causal,
                                num_warps=num_warps(cfg))
    assert ck.spills == 0


@pytest.mark.parametrize("sq,skv", [(1024, 1024), (1000, 1000), (512, 512), (1000, 700), (130, 130)])
def test_the_short_causal_d128_config_has_no_spills_as_launches_specialize_it(sq, skv):
    from gluon.kernels.attention_sm90 import attention_sm90, num_warps, stand_ins
    cfg = choose_config(128, skv, True)
    assert cfg.BLOCK_N == 64
    ck = attention_sm90.compile(*stand_ins(DType.bf16, sq, skv, 16, 1), CFG=cfg, HEAD_DIM=128, CAUSAL=True,
                                num_warps=num_warps(cfg))
    assert ck.spills == 0 and ck.shared_bytes <= 227 * 1024


def test_choose_config_takes_64_key_steps_for_short_causal_d128_only():
    from gluon.kernels.attention_sm90.config import SHORT_CAUSAL_D128, SHORT_CAUSAL_SKV
    assert choose_config(128, SHORT_CAUSAL_SKV, True) == SHORT_CAUSAL_D128
    assert SHORT_CAUSAL_D128 == to_config(dict(BLOCK_N=64, PINGPONG=False, STAGES=4), default_config(128))
    assert choose_config(128, SHORT_CAUSAL_SKV + 1, True) == default_config(128)
    assert choose_config(128, 512, False) == default_config(128)
    for d in (64, 256):
        assert choose_config(d, 512, True) == default_config(d)


@pytest.mark.parametrize("skv", [4096, 4097, 16384])
def test_long_unmasked_d128_drops_ping_pong_and_pins_the_softmax(skv):
    from gluon.kernels.attention_sm90 import attention_sm90, num_warps, stand_ins
    from gluon.kernels.attention_sm90.config import LONG_D128, LONG_SKV
    assert LONG_D128 == to_config(dict(PINGPONG=False, PIN_SOFTMAX=True), default_config(128))
    assert choose_config(128, skv, False) == LONG_D128
    assert choose_config(128, LONG_SKV - 1, False) == default_config(128)
    assert choose_config(128, skv, True) == default_config(128)          # causal keeps ping-pong
    assert all(choose_config(d, skv, False) == default_config(d) for d in (64, 256))
    ck = attention_sm90.compile(*stand_ins(DType.bf16, skv, skv, 16, 1), CFG=LONG_D128, HEAD_DIM=128, CAUSAL=False,
                                num_warps=num_warps(LONG_D128))
    assert ck.spills == 0 and ck.shared_bytes <= 227 * 1024


def test_attention_runs_the_chosen_config(monkeypatch, interpret_env):
    """The host plans a call with choose_config's pick for its (head dim, Skv, causal), overrides on top."""
    import gluon.kernels.attention_sm90.host as host
    seen = []

    class Bound:
        grid = (1,)

        def compiled(self, *args, **kw):
            seen.append(kw["CFG"])
            raise RuntimeError("stop")
    monkeypatch.setattr(host, "attention_sm90", type("K", (), {"__getitem__": lambda self, g: Bound()})())
    host._PLANS.clear()
    q = _t(1, 2, 1000, 128)
    for causal, over in ((True, None), (False, None), (True, {"STAGES": 2})):
        with pytest.raises(RuntimeError, match="stop"):
            host.attention(q, q, q, causal=causal, config=over)
    host._PLANS.clear()
    assert seen[0] == choose_config(128, 1000, True) and seen[0].BLOCK_N == 64
    assert seen[1] == default_config(128)
    assert seen[2] == to_config({"STAGES": 2}, choose_config(128, 1000, True))


@pytest.mark.parametrize("D,kw", [(64, {}), (64, dict(PINGPONG=True)), (256, {}),
                                  (128, dict(OVERLAP=False, PINGPONG=False)), (128, dict(PERSISTENT=False)),
                                  (64, dict(OVERLAP=True, BLOCK_N=64))])
@pytest.mark.parametrize("causal", [False, True])
def test_row_sums_on_the_tensor_cores_take_the_softmax_fadds(D, kw, causal):
    """ROWSUM_MMA: each block's P also multiplies a tile of ones (HGMMA 64x8: as many k-steps as P V's), whose
    accumulator holds the row sums, so the softmax's per-score FADDs are gone; P's register operand serves both
    GEMMs without a trip through shared memory (no more STS/LDS than the ones tile's fill), no spills (with
    P_SMEM the causal D64 kernel spills 68 bytes at 160 registers, and the persistent D128 ones 8-104: not here)."""
    base = sass_instructions(compile_variant(D, DType.bf16, causal, **kw).sass())
    ck = compile_variant(D, DType.bf16, causal, ROWSUM_MMA=True, **kw)
    ops = sass_instructions(ck.sass())
    bn = to_config(kw, default_config(D)).BLOCK_N
    pv = ops[f"HGMMA.64x{D}x16.F32.BF16"] // (2 if D == bn else 1)     # (with D = BLOCK_N S's HGMMAs read the same)
    assert ops["HGMMA.64x8x16.F32.BF16"] == pv >= 8
    assert base["FADD"] >= 64 and ops["FADD"] <= base["FADD"] // 8
    assert ops["LDS"] <= base["LDS"] and ops["STS"] <= base["STS"] + 8
    assert ck.spills == 0


def _stalls_from_s_to_exp2(sass: str) -> int:
    """The stall cycles ptxas scheduled from the first WGMMA wait to the exp2 after it (the row max in between)."""
    lines = sass.splitlines()
    i = next(k for k, ln in enumerate(lines) if "WARPGROUP.DEPBAR" in ln)
    j = next(k for k in range(i, len(lines)) if "MUFU.EX2" in lines[k])
    return sum(int(ln.split("\t")[0].split(":")[4], 16) for ln in lines[i:j] if ln.count(":") >= 4 and "\t" in ln)


@pytest.mark.parametrize("D,kw", [(64, {}), (128, {}), (64, dict(ROWSUM_MMA=True))])
def test_tree_max_shortens_the_way_from_s_to_its_exponentials(D, kw):
    """TREE_MAX: the row max over four independent chains: as many FMNMX, no spills, and at D64 (the serial loop,
    whose first S wait leads straight to the softmax) fewer cycles between S's wait and the first exp2 (ptxas's
    stall counts: 161 -> 112)."""
    base = compile_variant(D, DType.bf16, False, **kw)
    ck = compile_variant(D, DType.bf16, False, TREE_MAX=True, **kw)
    assert sass_instructions(ck.sass())["FMNMX"] == sass_instructions(base.sass())["FMNMX"]
    if D == 64:
        assert _stalls_from_s_to_exp2(ck.sass()) < 0.8 * _stalls_from_s_to_exp2(base.sass())
    assert ck.spills == 0


@pytest.mark.parametrize("kw", [{}, dict(TREE_MAX=True)])
@pytest.mark.parametrize("causal", [False, True])
def test_joint_wait_fits_three_overlapped_warpgroups_at_d64(kw, causal):
    """JOINT_WAIT: the overlapped loop waits for S_j and P_(j-1) V_(j-1) together (no wait that leaves a group in
    flight), so P_(j-1)'s registers are free for the softmax: three D64 warpgroups of 160 registers without spills,
    where the overlapped softmax spills."""
    assert compile_variant(64, DType.bf16, causal, OVERLAP=True, **kw).spills > 0
    ck = compile_variant(64, DType.bf16, causal, OVERLAP=True, JOINT_WAIT=True, **kw)
    assert ck.spills == 0
    assert "wgmma.wait_group.sync.aligned 1;" not in ck.binary.asm["ptx"]


def test_overlap_issues_s_before_waiting_for_pv():
    """With OVERLAP the loop keeps one WGMMA group in flight while it waits (wait_group 1)."""
    ptx = compile_variant(128, OVERLAP=True).binary.asm["ptx"]
    assert "wgmma.wait_group.sync.aligned 1;" in ptx
    ptx = compile_variant(128, OVERLAP=False, PINGPONG=False).binary.asm["ptx"]
    assert "wgmma.wait_group.sync.aligned 1;" not in ptx


@pytest.mark.parametrize("kw,msg", [
    (dict(BLOCK_M=128, CONSUMER_WGS=3), "64 * CONSUMER_WGS = 192"),
    (dict(BLOCK_N=96), "BLOCK_N=96"),
    (dict(CONSUMER_WGS=4, BLOCK_M=256), "CONSUMER_WGS=4"),
    (dict(PINGPONG=True, CONSUMER_WGS=3, BLOCK_M=192), "PINGPONG=True with OVERLAP=True takes CONSUMER_WGS=2"),
    (dict(PINGPONG=True, CONSUMER_WGS=1, BLOCK_M=64, HOLD_TURNS=True), "takes CONSUMER_WGS=2 or 3"),
    (dict(PINGPONG=True, OVERLAP=False, CONSUMER_WGS=1, BLOCK_M=64), "PINGPONG=True takes CONSUMER_WGS=2 or 3"),
    (dict(CONSUMER_REGS=250), "multiple of 8"),
    (dict(STAGES=0), "STAGES=0"),
    (dict(OVERLAP="yes"), "OVERLAP='yes'"),
    (dict(P_SMEM=2), "P_SMEM=2"),
    (dict(PIN_SOFTMAX=True, OVERLAP=False, PINGPONG=False), "PIN_SOFTMAX=True takes OVERLAP=True and P_SMEM=False"),
    (dict(PIN_SOFTMAX=True, P_SMEM=True), "PIN_SOFTMAX=True takes OVERLAP=True and P_SMEM=False"),
    (dict(HOLD_TURNS=True, PINGPONG=False), "HOLD_TURNS=True takes PINGPONG=True and OVERLAP=True"),
    (dict(CTAS_PER_SM=2), "CTAS_PER_SM=2 with CONSUMER_WGS=2: takes 1, or 2 with CONSUMER_WGS=1"),
    (dict(CTAS_PER_SM=3, CONSUMER_WGS=1, BLOCK_M=64), "CTAS_PER_SM=3 with CONSUMER_WGS=1: takes 1, or 2"),
    (dict(ROWSUM_MMA=True, PIN_SOFTMAX=True), "ROWSUM_MMA=True takes PIN_SOFTMAX=False"),
    (dict(JOINT_WAIT=True, OVERLAP=False), "JOINT_WAIT=True takes OVERLAP=True and PIN_SOFTMAX=False"),
    (dict(PREFETCH_Q=True), "PREFETCH_Q=True takes PERSISTENT=True and OVERLAP=False"),
    (dict(PREFETCH_Q=True, OVERLAP=False), "PREFETCH_Q=True takes PERSISTENT=True and OVERLAP=False"),
    (dict(PREFETCH_Q=True, PERSISTENT=True), "PREFETCH_Q=True takes PERSISTENT=True and OVERLAP=False"),
    (dict(EARLY_Q_RELEASE=True, OVERLAP=False), "EARLY_Q_RELEASE=True takes PERSISTENT=True, OVERLAP=False and"),
    (dict(EARLY_Q_RELEASE=True, PERSISTENT=True, OVERLAP=False, PREFETCH_Q=True), "PREFETCH_Q=False (it hands"),
])
def test_config_checks(kw, msg):
    with pytest.raises(GluonError, match=msg.replace("*", r"\*").replace("(", r"\(")):
        AttentionConfig(**kw)


def test_unknown_config_field_names_the_nearest():
    with pytest.raises(GluonError, match=r"AttentionConfig has no field 'STAGE' \(did you mean STAGES\?\)"):
        to_config({"STAGE": 3}, default_config(128))


def test_persistent_work_units_grid_and_q_buffers():
    from gluon.kernels.attention_sm90.config import grid, q_buffers, smem_bytes, work_units
    p = AttentionConfig(PERSISTENT=True)
    assert work_units(1024, 256, p, causal=False) == 8 * 256            # one tile per unit
    assert work_units(1024, 256, p, causal=True) == 4 * 256             # query blocks paired: 7+0, 6+1, ...
    assert work_units(1000 - 128, 3, p, causal=True) == 4 * 3           # 7 blocks: three pairs and the middle one
    assert grid(1024, 256, p, True, sms=132) == (132, 1)
    assert grid(100, 2, p, True, sms=132) == (2, 1)                    # never more CTAs than units
    assert grid(1024, 256, AttentionConfig(), True) == (8, 256)        # not persistent: one CTA per tile
    with pytest.raises(GluonError, match="SM count"):
        grid(1024, 256, p, True)
    assert q_buffers(p) == 2 and q_buffers(AttentionConfig(PERSISTENT=True, OVERLAP=False)) == 1
    assert q_buffers(AttentionConfig(PERSISTENT=True, OVERLAP=False, PREFETCH_Q=True)) == 2
    assert smem_bytes(p, 128) == 2 * 128 * 128 * 2 + 2 * 2 * 128 * 128 * 2


def test_switches_wrong_on_the_gpu_are_named(monkeypatch):
    """`gpu_problem`: why `attention` does not launch a config on the GPU (a switch of config.WRONG_ON_GPU on),
    None for every other config. None is listed now: PREFETCH_Q (refused from the thirty-sixth session) and
    EARLY_Q_RELEASE (in the thirty-sixth) ran right on the GPU with their fixes; the GPU test checks the refusal
    itself, of an entry put in for it."""
    from gluon.kernels.attention_sm90 import config
    assert config.WRONG_ON_GPU == {}
    for cfg in config.DEFAULT_CONFIGS.values():
        assert config.gpu_problem(cfg) is None
    for kw in ({}, dict(EARLY_Q_RELEASE=True), dict(PREFETCH_Q=True)):
        assert config.gpu_problem(AttentionConfig(PERSISTENT=True, OVERLAP=False, **kw)) is None
    monkeypatch.setitem(config.WRONG_ON_GPU, "PREFETCH_Q", "a wrong log-sum-exp on an H100 (a test's entry)")
    why = config.gpu_problem(AttentionConfig(PERSISTENT=True, OVERLAP=False, PREFETCH_Q=True))
    assert why == ("AttentionConfig PREFETCH_Q=True gave a wrong log-sum-exp on an H100 (a test's entry) "
                   "(docs/ATTENTION.md); not launched on the GPU")
    assert config.gpu_problem(AttentionConfig(PERSISTENT=True, OVERLAP=False)) is None


@pytest.mark.parametrize("kw", [dict(OVERLAP=False), dict(OVERLAP=False, STAGES=3), dict(OVERLAP=True),
                                dict(OVERLAP=False, PERSISTENT=True)])
@pytest.mark.parametrize("causal", [False, True])
def test_d64_on_one_warpgroup_at_two_ctas_an_sm_compiles_without_spills(kw, causal):
    """64 query rows a CTA, two CTAs an SM: 128 registers a thread at launch (the consumer's setmaxnreg within the
    CTA's half of the register file), shared memory that fits twice, no spills; a persistent grid of two an SM."""
    from gluon.arch import SM90, resident_ctas
    from gluon.kernels.attention_sm90.config import grid
    cfg = dict(BLOCK_M=64, CONSUMER_WGS=1, CTAS_PER_SM=2, **kw)
    ck = compile_variant(64, DType.bf16, causal, **cfg)
    b = ck.binary
    assert ck.spills == 0 and b.registers == 128 and ck.abi.ctas_per_sm == 2
    assert resident_ctas(SM90, b.num_warps * 32, b.registers, b.shared_bytes) == 2
    assert grid(4096, 128, AttentionConfig(**dict(cfg, PERSISTENT=True)), causal, sms=132) == (264, 1)


@pytest.mark.parametrize("kw", [dict(OVERLAP=False, PINGPONG=False), dict(PINGPONG=False)])
def test_persistent_variants_compile_without_spills(kw):
    """D128's default is persistent; its serial and non-ping-pong forms compile too, the epilogue's hand-back of
    the Q tile on the warpgroup's own named barrier (12 + warpgroup; 8 to 10 are the turns')."""
    ck = compile_variant(128, DType.bf16, True, **kw)
    assert ck.spills == 0 and ck.shared_bytes <= 227 * 1024
    ptx = ck.binary.asm["ptx"]
    assert "bar.sync 12, 128;" in ptx and "bar.sync 13, 128;" in ptx


@pytest.mark.parametrize("switch,kw", [("PREFETCH_Q", {}), ("PREFETCH_Q", dict(STAGES=3)),
                                       ("PREFETCH_Q", dict(PINGPONG=True)), ("EARLY_Q_RELEASE", {}),
                                       ("EARLY_Q_RELEASE", dict(ROWSUM_MMA=True))])
@pytest.mark.parametrize("causal", [False, True])
def test_d64_persistent_q_hand_over_switches_compile_without_spills(switch, kw, causal):
    """PREFETCH_Q (a second Q tile a warpgroup) and EARLY_Q_RELEASE (an O tile a warpgroup beside the one Q buffer) on
    D64's default made persistent: the shared-memory pass counts the extra tile, no spills, the Q buffer handed back
    on the warpgroup's own barrier."""
    from gluon.kernels.attention_sm90.config import smem_bytes
    cfg = dict(PERSISTENT=True, **{switch: True}, **kw)
    ck = compile_variant(64, DType.bf16, causal, **cfg)
    one = compile_variant(64, DType.bf16, causal, PERSISTENT=True, **kw)
    assert ck.spills == 0 and ck.shared_bytes <= 227 * 1024
    tile = smem_bytes(to_config(cfg, default_config(64)), 64) - smem_bytes(
        to_config(dict(PERSISTENT=True, **kw), default_config(64)), 64)
    assert tile == 192 * 64 * 2 and 0 <= ck.shared_bytes - one.shared_bytes - tile < 64     # (and two barriers)
    assert "bar.sync 12, 128;" in ck.binary.asm["ptx"] and "bar.sync 14, 128;" in ck.binary.asm["ptx"]


@pytest.mark.parametrize("causal", [False, True])
def test_p_smem_lets_three_overlapped_warpgroups_fit_at_d64(causal):
    """With P in registers, OVERLAP at D64 (three warpgroups, 128-key blocks) spills; with P_SMEM it does not:
    P V reads P from two shared tiles per warpgroup (the shared-memory pass counts them)."""
    from gluon.kernels.attention_sm90.config import smem_bytes
    assert compile_variant(64, DType.bf16, causal, OVERLAP=True).spills > 0
    ck = compile_variant(64, DType.bf16, causal, OVERLAP=True, P_SMEM=True)
    assert ck.spills == 0 and ck.shared_bytes <= 227 * 1024
    cfg = to_config(dict(OVERLAP=True, P_SMEM=True), default_config(64))
    assert smem_bytes(cfg, 64) == 192 * 64 * 2 + 2 * 2 * 128 * 64 * 2 + 2 * 192 * 128 * 2
    assert ck.shared_bytes >= smem_bytes(cfg, 64)
    ops = sass_instructions(ck.sass())
    assert ops["HGMMA.64x64x16.F32.BF16"] >= 8 and ops["MUFU.EX2"] >= 64


def _exp2s_under_pv(sass: str) -> list[int]:
    """Per overlapped step in the SASS, the exp2s between its wait for S (WARPGROUP.DEPBAR.LE 1: P V still in
    flight) and its wait for P V (LE 0): the softmax that runs while the tensor cores do P V."""
    counts, n = [], None
    for line in sass.splitlines():
        if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in line:
            n = 0
        elif "WARPGROUP.DEPBAR.LE gsb0, 0x0" in line and n is not None:
            counts.append(n)
            n = None
        elif "MUFU.EX2" in line and n is not None:
            n += 1
    return counts


@pytest.mark.parametrize("head_dim,kw", [
    (128, {}), (64, dict(OVERLAP=True, BLOCK_M=128, CONSUMER_WGS=2, CONSUMER_REGS=240)),
    (64, dict(OVERLAP=True, BLOCK_N=64))])
def test_pin_softmax_keeps_the_softmax_under_the_pv_gemm(head_dim, kw):
    """With P in registers ptxas puts the overlapped loop's P V wait above the softmax (most exp2s after both
    waits: little overlap within the warpgroup); PIN_SOFTMAX's shared store of the row sums keeps all of a
    block's (a thread's share of S, 2 for the rescale) between the wait for S and the wait for P V."""
    plain = _exp2s_under_pv(compile_variant(head_dim, DType.bf16, False, **kw).sass())
    per_thread = kw.get("BLOCK_N", 128) // 2             # a thread's scores per 64-row block of S
    assert plain and min(plain) == 0 and max(plain) < per_thread
    ck = compile_variant(head_dim, DType.bf16, False, PIN_SOFTMAX=True, **kw)
    pinned = _exp2s_under_pv(ck.sass())
    assert len(pinned) == len(plain) and min(pinned) >= per_thread + 2
    assert ck.spills == 0


@pytest.mark.parametrize("kw", [dict(Q_REGS=True), dict(Q_REGS=True, PERSISTENT=True, EARLY_Q_RELEASE=True,
                                                     PINGPONG=True)])
@pytest.mark.parametrize("causal", [False, True])
def test_q_in_registers_at_d64_compiles_without_spills(kw, causal):
    """Q_REGS in D64's serial kernels: the Q tile loaded by ldmatrix (16 registers a thread) and the S GEMMs' A read
    from registers (an HGMMA whose A is a register, not a descriptor), no spills at three warpgroups of 160
    registers (the overlapped D64 loop spills about 1 KB with it)."""
    k = compile_variant(64, DType.bf16, causal, **kw)
    assert k.spills == 0
    sass = k.binary.sass()
    assert "LDSM" in sass
    s_gemms = [ln for ln in sass.splitlines() if "HGMMA.64x128x16" in ln]     # S = Q K^T: 128 keys wide
    assert s_gemms and all(ln.split("HGMMA")[1].split(",")[1].strip().startswith("R") for ln in s_gemms)


@pytest.mark.parametrize("kw,then", [(dict(STAGES=4), "STAGES=2 fits (64.0 KiB of K and V a stage)"),
                                     (dict(BLOCK_N=64, STAGES=9), "STAGES=5 fits (32.0 KiB of K and V a stage)"),
                                     (dict(BLOCK_N=256, STAGES=3), "use a smaller BLOCK_N or BLOCK_M")])
def test_too_much_shared_memory_is_one_line_in_the_configs_fields(kw, then):
    """A config past the shared memory is refused (by the passes) in one line naming its tiles, STAGES and head
    dim, with the stages of the K/V ring that fit (and they compile), or else what to lower."""
    with pytest.raises(GluonError) as e:
        compile_variant(128, **kw)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"attention: config BLOCK_M=128, BLOCK_N={kw.get('BLOCK_N', 128)}, "
                                               f"STAGES={kw['STAGES']} at head dim 128 needs ")
    assert "more than the 227.0 KiB" in msg and msg.endswith(then)
    if "fits" in then:
        assert compile_variant(128, **dict(kw, STAGES=int(then.split("STAGES=")[1][0]))).spills == 0


def _t(*shape, dtype=torch.float16):
    return torch.randn(*shape).to(dtype)


@pytest.mark.parametrize("args,kw,msg", [
    ((_t(2, 4, 64), _t(2, 4, 64), _t(2, 4, 64)), {}, "q must be 4-D"),
    ((_t(1, 2, 8, 64, dtype=torch.float32),) * 3, {}, "q is torch.float32"),
    ((_t(1, 2, 8, 64), _t(1, 2, 8, 64, dtype=torch.bfloat16), _t(1, 2, 8, 64)), {}, "one dtype"),
    ((_t(1, 2, 8, 96),) * 3, {}, "head_dim 96 is not supported"),
    ((_t(1, 6, 8, 64), _t(1, 4, 8, 64), _t(1, 4, 8, 64)), {}, "6 heads and k/v 4"),
    ((_t(1, 2, 8, 64), _t(1, 0, 8, 64), _t(1, 0, 8, 64)), {}, "2 heads and k/v 0"),
    ((_t(1, 2, 8, 64), _t(1, 2, 0, 64), _t(1, 2, 0, 64)), {}, "no keys .* for q's queries"),
    ((_t(1, 2, 8, 64), _t(1, 2, 8, 64), _t(1, 2, 9, 64)), {}, "must have one shape"),
    ((_t(1, 2, 8, 64), _t(1, 2, 64, 8).transpose(2, 3), _t(1, 2, 8, 64)), {}, "k's last dimension is not contiguous"),
    ((_t(1, 2, 8, 64),) * 3, {}, "q is on cpu"),
    ((_t(1, 2, 8, 64),) * 3, {"layout": "sbhd"}, "layout='sbhd'"),
    (("q", "k", "v"), {}, "q must be a torch tensor"),
    ((_t(1, 2, 8, 64),) * 3, {"config": "fast"}, "config is an AttentionConfig or a dict of its fields, not str"),
])
def test_bad_inputs_get_one_line_naming_the_argument(args, kw, msg):
    with pytest.raises(GluonError, match=msg) as e:
        attention(*args, **kw)
    assert "\n" not in str(e.value)


def test_views_without_copies():
    q = torch.empty(2, 4, 100, 128, dtype=torch.float16)
    view, bshd = _view2d(q)
    assert not bshd and view.shape == (800, 128) and view.data_ptr() == q.data_ptr()
    t = torch.empty(2, 100, 4, 64, dtype=torch.bfloat16).transpose(1, 2)      # [B, S, H, D] storage
    view, bshd = _view2d(t)
    assert bshd and view.shape == (200, 256) and view.stride() == (256, 1)
    qkv = torch.empty(2, 100, 3, 4, 64, dtype=torch.float16)
    k = qkv[:, :, 1].transpose(1, 2)
    view, bshd = _view2d(k)
    assert bshd and view.shape == (200, 256) and view.stride() == (768, 1) and view.data_ptr() == k.data_ptr()
    assert _view2d(torch.empty(4, 2, 100, 64, dtype=torch.float16).transpose(0, 1)) is None   # heads outermost
    assert _view2d(torch.empty(2, 4, 100, 65, dtype=torch.float16)[..., 1:]) is None         # misaligned base


class _FakeKernel:
    """Stands in for the compiled kernel on the CPU: fills the 2-D O view it is handed ([B*H*S, D] or
    [B*S, H*D]) with 7, so the test sees where the host routes the output."""

    def launch_args(self, args, kwargs):
        return list(args)

    def launcher(self, grid, q2, k2, v2, o2, lse, Sq, Skv, H, group, qk_scale):
        o2.fill_(7.0)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("out_layout", [None, "bhsd", "bshd"])
@pytest.mark.parametrize("q_strided", [False, True])
def test_the_output_is_written_wherever_out_lies(monkeypatch, layout, out_layout, q_strided):
    """The kernel writes O laid out as Q's rows; an `out` (or a layout='bshd' result) laid out otherwise, or that
    TMA cannot describe, gets it through a buffer and a copy."""
    import gluon.kernels.attention_sm90.host as host
    monkeypatch.setattr(host, "_check", lambda q, k, v: None)      # (it refuses CPU tensors)
    B, H, S, D = 2, 4, 40, 64
    shape = (B, S, H, D) if layout == "bshd" else (B, H, S, D)
    q = torch.randn(*shape).half()
    if q_strided:                                   # heads outermost, neither layout: attention copies it once
        q = torch.randn(H, B, S, D).half()
        q = q.permute(1, 2, 0, 3) if layout == "bshd" else q.transpose(0, 1)
        assert host._view2d(q.transpose(1, 2) if layout == "bshd" else q) is None
    k = v = torch.randn(*shape).half()
    out = None
    if out_layout is not None:
        bhsd = torch.full((B, H, S, D), float("nan")).half()
        bshd = torch.full((B, S, H, D), float("nan")).half().transpose(1, 2)
        out = bhsd if out_layout == "bhsd" else bshd
        if layout == "bshd":
            out = out.transpose(1, 2)
    o = attention(q, k, v, layout=layout, out=out, compiled=_FakeKernel())
    assert o.shape == shape and torch.all(o == 7.0)
    if out is not None:
        assert o.data_ptr() == out.data_ptr() and torch.all(out == 7.0)


def _example(*argv):
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, os.path.join(root, "examples", "flash_attn_kernel.py"), "--compile-only",
                           *argv], capture_output=True, text=True, timeout=300, cwd=root,
                          env={**os.environ, "PYTHONPATH": root})


def test_example_describes_the_machine_code():
    out = _example("--shape", "2x8x1000x64", "--causal")
    assert out.returncode == 0, out.stderr
    assert "CONSUMER_WGS=3" in out.stdout and "0 spills" in out.stdout     # the D64 default
    assert "HGMMA.64x64x16.F32.BF16 x" in out.stdout and "UTMALDG.2D x" in out.stdout and "MUFU.EX2 x" in out.stdout


@pytest.mark.parametrize("argv", [("--shape", "1x2x300x64", "--causal"), ("--shape", "1x4x200x128", "--kv-heads", "2"),
                                  ("--shape", "1x2x130x256", "--dtype", "fp16", "--causal")])
def test_example_checks_a_shape_in_the_interpreter(argv):
    out = _example("--interpret", *argv)
    assert out.returncode == 0, out.stderr
    assert "interpreted on the CPU" in out.stdout and ": ok" in out.stdout


def test_example_reports_bad_configs_with_exit_code_2():
    out = _example("--set", "STAGES=4")
    assert out.returncode == 2 and "more than the 227.0 KiB" in out.stderr and "STAGES=2 fits" in out.stderr
    out = _example("--set", "STAGE=4")
    assert out.returncode == 2 and "did you mean STAGES?" in out.stderr
    out = _example("--set", "PINGPONG=true", "--set", "CONSUMER_WGS=3", "--set", "BLOCK_M=192")
    assert out.returncode == 2 and "PINGPONG=True with OVERLAP=True takes CONSUMER_WGS=2" in out.stderr
    out = _example("--shape", "2x8x1000x96")
    assert out.returncode == 2 and "head dim 96 is not supported" in out.stderr
    out = _example("--shape", "2x8x1000")
    assert out.returncode == 2 and "expected BxHxSxD" in out.stderr


def test_the_reference_takes_head_subsets_and_gives_the_lse():
    """The one fp32 reference (tuner, GPU tests, example): a subset of (batch, head) pairs and the LSE are
    those of the whole problem, chunked or not; grouped heads and Sq > Skv (rows that see no key: 0, -inf)."""
    import math

    from gluon.kernels.attention_sm90.reference import reference
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 9, 16, generator=g)
    k, v = (torch.randn(2, 2, 6, 16, generator=g) for _ in range(2))
    o, lse = reference(q, k, v, True, 0.5, with_lse=True)
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    s = (q @ kk.transpose(-1, -2) * 0.5).masked_fill(torch.arange(6)[None, :] > torch.arange(9)[:, None] - 3,
                                                     float("-inf"))
    want_lse = torch.logsumexp(s, -1)
    want = torch.nan_to_num(torch.softmax(s, -1), nan=0.0) @ vv
    assert torch.allclose(o, want, atol=1e-5) and torch.equal(torch.isinf(lse), torch.isinf(want_lse))
    fin = torch.isfinite(want_lse)
    assert torch.allclose(lse[fin], want_lse[fin], atol=1e-5) and (o[:, :, :3] == 0).all()
    pairs = [(1, 3), (0, 1)]
    sub, sub_lse = reference(q, k, v, True, 0.5, heads=pairs, with_lse=True, chunk_bytes=4 * 6 * 2)
    assert sub.shape == (2, 9, 16) and sub_lse.shape == (2, 9)
    for n, (b, h) in enumerate(pairs):
        assert torch.allclose(sub[n], o[b, h], atol=1e-6) and torch.allclose(sub_lse[n], lse[b, h], atol=1e-6)
    assert torch.allclose(reference(q, k, v), torch.softmax(q @ kk.transpose(-1, -2) / math.sqrt(16), -1) @ vv,
                          atol=1e-5)


def _fresh_caches(monkeypatch, host) -> None:
    """Empty `attention`'s kept launches and plans and the JIT's compiled kernels for the test: a compiled kernel
    keeps the backend its launcher was made with, so one left by an earlier test would launch on that one."""
    from gluon.jit import _jit_of
    monkeypatch.setattr(host, "_FAST", {})
    monkeypatch.setattr(host, "_PLANS", {})
    jf = _jit_of(host.attention_sm90)
    for name, empty in (("cache", {}), ("seen", {}), ("exact", {}), ("last", None)):
        monkeypatch.setattr(jf, name, empty)


@pytest.mark.parametrize("case", ["bhsd", "bshd causal", "gqa lse", "d128 persistent", "dict config"])
def test_a_repeated_call_launches_what_the_first_call_did(monkeypatch, case):
    """The second call of the same shapes, strides and dtypes (and a dict config of the same content) skips the
    checks and the views (`_FAST`) and launches exactly the first call's arguments but for its own output (and
    log-sum-exp) buffer."""
    import sys
    import os
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from runtime_fakes import FakeBackend
    import gluon.kernels.attention_sm90.host as host
    import gluon.runtime.cuda as cuda
    fake = FakeBackend()                                 # records launches; CPU tensors pass its device check
    monkeypatch.setattr(cuda, "DEFAULT_BACKEND", fake)
    monkeypatch.setattr(host, "sm_count", lambda d: 132)
    _fresh_caches(monkeypatch, host)
    B, H, HK, S, D = 2, 4, 4, 40, 64
    kw = {}
    if case == "bshd causal":
        kw = dict(layout="bshd", causal=True)
    elif case == "gqa lse":
        HK, kw = 2, dict(return_lse=True, scale=0.3)
    elif case == "d128 persistent":
        D, kw = 128, dict(causal=True)
    elif case == "dict config":
        kw = dict(config={"STAGES": 2})
    shape = lambda h: (B, S, h, D) if kw.get("layout") == "bshd" else (B, h, S, D)  # noqa: E731
    q, k, v = torch.randn(*shape(H)).half(), torch.randn(*shape(HK)).half(), torch.randn(*shape(HK)).half()
    first = attention(q, k, v, **kw)
    assert len(host._FAST) == 1
    if "config" in kw:
        kw = dict(config=dict(kw["config"]))                    # another dict of the same content
    again = attention(q, k, v, **kw)
    assert len(host._FAST) == 1
    full, fast = fake.calls[-2], fake.calls[-1]
    outs = lambda r: (r,) if isinstance(r, torch.Tensor) else r      # noqa: E731
    for a, b in zip(outs(first), outs(again)):
        assert (a.shape, a.stride(), a.dtype) == (b.shape, b.stride(), b.dtype)
    ptrs = {a.data_ptr(): b.data_ptr() for a, b in zip(outs(first), outs(again))}
    assert len(full) == len(fast)
    for x, y in zip(full, fast):
        assert x == y or ptrs.get(x) == y or (isinstance(x, tuple) and ptrs.get(x[1][0]) == y[1][0]
                                              and x[1][1:] == y[1][1:])
    assert sum(x != y for x, y in zip(full, fast)) == len(ptrs)      # exactly the outputs moved


def test_a_dict_config_equal_in_value_but_not_in_type_meets_the_checks(monkeypatch):
    """{"STAGES": 2.0} after {"STAGES": 2}: equal values, so neither the prepared launch nor the plan of the first
    may take it: its field's error, as on a first call."""
    import gluon.kernels.attention_sm90.host as host
    import gluon.runtime.cuda as cuda
    from runtime_fakes import FakeBackend
    monkeypatch.setattr(cuda, "DEFAULT_BACKEND", FakeBackend())
    monkeypatch.setattr(host, "sm_count", lambda d: 132)
    _fresh_caches(monkeypatch, host)
    q, k, v = (torch.randn(2, 4, 40, 64).half() for _ in range(3))
    attention(q, k, v, config={"STAGES": 2})
    with pytest.raises(GluonError, match="STAGES=2.0"):
        attention(q, k, v, config={"STAGES": 2.0})
    with pytest.raises(GluonError, match="STAGES"):
        attention(q, k, v, config={"STAGES": [2]})


def test_a_repeated_call_with_a_misaligned_input_takes_the_full_path(monkeypatch):
    """Same shapes and strides, but q's base 2 bytes past a 16-byte boundary: the prepared launch refuses it
    before launching, and the full path reads q through an aligned copy."""
    import sys
    import os
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from runtime_fakes import FakeBackend
    import gluon.kernels.attention_sm90.host as host
    import gluon.runtime.cuda as cuda
    fake = FakeBackend()
    monkeypatch.setattr(cuda, "DEFAULT_BACKEND", fake)
    monkeypatch.setattr(host, "sm_count", lambda d: 132)
    _fresh_caches(monkeypatch, host)
    q, k, v = (torch.randn(2, 4, 40, 64).half() for _ in range(3))
    attention(q, k, v)
    (fp,) = host._FAST.values()
    odd = torch.empty(2 * 4 * 40 * 64 + 1).half()[1:].view(2, 4, 40, 64)
    odd.copy_(q)
    calls = len(fake.calls)
    assert host._fast_call(fp, odd, k, v) is None and len(fake.calls) == calls
    attention(odd, k, v)
    assert len(fake.calls) == calls + 1
    maps = [x for x in fake.calls[-1] if isinstance(x, tuple) and x and x[0] == "CUtensorMap"]
    assert all(m[1][0] % 16 == 0 for m in maps) and odd.data_ptr() not in [m[1][0] for m in maps]


@pytest.mark.parametrize("shape", [(0, 2, 64, 64), (1, 0, 64, 64), (1, 2, 0, 64)])
@pytest.mark.parametrize("lse", [False, True])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_empty_problems_give_the_empty_output_as_sdpa(interpret_env, shape, lse, layout):
    """A batch, heads or queries of 0: the empty output (and LSE [B, H, Sq]) without a launch, as torch's SDPA;
    a batch of 0 was an error about TMA descriptors from inside the kernel, no queries and no keys a TypeError."""
    B, H, S, D = shape
    q = _t(*shape) if layout == "bhsd" else _t(B, S, H, D)
    got = attention(q, q, q, return_lse=lse, layout=layout)
    o, l = got if lse else (got, None)
    assert o.shape == q.shape and o.dtype == q.dtype
    assert l is None or tuple(l.shape) == (B, H, S)


@pytest.mark.parametrize("causal", [False, True])
def test_held_turns_hand_over_once_s_is_done_and_before_the_softmax(causal):
    """HOLD_TURNS (D128's default with it): in each overlapped step the turn's arrive comes after the wait for S
    (one WGMMA group left in flight: P V) and before the step's first exp2, which reads the row maxima back
    from shared memory after the arrive (without that anchor ptxas places the arrive below the softmax)."""
    ck = compile_variant(128, DType.bf16, causal, HOLD_TURNS=True)
    assert ck.spills == 0
    lines = [ln.split(";")[0].split() for ln in ck.sass().splitlines()]
    ops = [" ".join(w for w in ln if not w.startswith("//"))[-60:] for ln in lines if ln]
    steps = [i for i, op in enumerate(ops) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in op]
    assert steps, "no overlapped step (a wait that leaves one WGMMA group in flight)"
    for i in steps:
        arrive = next(k for k in range(i, len(ops)) if "BAR.ARV" in ops[k])
        first_exp = next(k for k in range(i, len(ops)) if "MUFU.EX2" in ops[k])
        assert arrive < first_exp


@pytest.mark.parametrize("causal", [False, True])
def test_serial_turns_wait_after_the_softmax_and_hand_over_after_p_v(causal):
    """PINGPONG in D64's serial loop: each computed block waits for its turn after its softmax (all its exp2s
    between the S wait and the turn's sync) and hands it on right after the P V wait."""
    ck = compile_variant(64, DType.bf16, causal, PINGPONG=True)
    assert ck.spills == 0
    ops = [" ".join(ln.split(";")[0].split()[1:]) for ln in ck.sass().splitlines() if ";" in ln]
    turn = [i for i, op in enumerate(ops) if op.startswith("BAR.SYNC.DEFER_BLOCKING 0x") and op.endswith("0x100")
            and op.split()[1].rstrip(",") in ("0x8", "0x9", "0xa")]
    # a computed block's turn is followed by its P V GEMM; the release loop's and the closing ones are not
    computed = [i for i in turn
                if next(op for op in ops[i + 1:] if op.startswith(("HGMMA", "BAR."))).startswith("HGMMA")]
    assert computed and len(computed) < len(turn)
    for i in computed:
        s_wait = max(k for k in range(i) if ops[k].startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
        assert sum(op.startswith("MUFU.EX2") for op in ops[s_wait:i]) >= 64        # the block's exp2s
        pv_wait = next(k for k in range(i, len(ops)) if ops[k].startswith("WARPGROUP.DEPBAR"))
        assert ops[pv_wait + 1].startswith("BAR.ARV")
