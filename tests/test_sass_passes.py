"""The SASS pass `ffma_yield` (gluon/backend/sass_passes.py, `gl.set_ffma_yield`, GemmConfig FFMA_YIELD): in the
fp8 block-scaled GEMM every second FFMA of each k-step's promotion yields its warp scheduler and keeps no operand in
the reuse cache (nor does the instruction before it), and nothing else of the binary changes; the run finder and
the same-program check on hand-made instruction lists. CPU only (compiles for sm_90)."""
import pytest

from gluon.backend import sass_passes
from gluon.backend.sass_passes import Instr, ffma_runs

_YIELD = 1 << 45
_REUSE = 0xF << 58


def _block_scaled(ffma_yield: bool, **kw):
    from gluon.dtypes import DType
    from gluon.kernels.gemm_sm90 import host
    from gluon.kernels.gemm_sm90.block_scaled import block_scaled_overrides
    from gluon.kernels.gemm_sm90.geometry import num_warps
    from gluon.kernels.gemm_sm90.picks import resolve_config
    from gluon.kernels.gemm_sm90.kernel import gemm_sm90
    shape = (4096, 4096, 4096)
    cfg = resolve_config(*shape, 132, 2, True, block_scaled_overrides(*shape, 132, 2, True,
                                                                          dict(kw, FFMA_YIELD=ffma_yield)), 1)
    ck = gemm_sm90.compile(*host.stand_ins(DType.f8e4m3, DType.bf16), num_warps=num_warps(cfg), CFG=cfg,
                           B_KMAJOR=True, SCALE="block")
    return cfg, ck.binary


# the 128x128 and 192x128 tiles, one 64-FFMA promotion a k-step a role (the halves of 256 columns run two)
@pytest.mark.parametrize("kw", [dict(BLOCK_N=128),
                                dict(BLOCK_M=192, CONSUMER_WGS=3, CONSUMER_REGS=152, SPLIT_WGS=True)])
def test_every_second_promotion_ffma_yields_and_nothing_else_changes(kw):
    cfg, before = _block_scaled(False, **kw)
    _, after = _block_scaled(True, **kw)
    assert "gluon_sass_passes" not in before.metadata
    roles = cfg.CONSUMER_WGS if cfg.SPLIT_WGS else 1
    old = sass_passes.disassemble(bytes(before.asm["cubin"]), before.name)
    new = sass_passes.disassemble(bytes(after.asm["cubin"]), after.name)
    runs = ffma_runs(old)
    assert len(runs) == roles                              # one k-loop a consumer role
    for run in runs:
        assert len(run) == 64                              # 64 accumulator values a thread: one FFMA each
        assert not any(old[k].hi & _YIELD == 0 for k in run)            # ptxas: no yield in the promotion
    yielding = [k for run in runs for k in run[1::2]]
    assert after.metadata["gluon_sass_passes"] == {"ffma_yield": {"runs": roles, "ffmas_yielding": len(yielding)}}
    assert after.spills == before.spills == 0 and after.registers == before.registers
    for k, (b, a) in enumerate(zip(old, new, strict=True)):
        assert (b.offset, b.lo, b.text.replace(".reuse", "")) == (a.offset, a.lo, a.text.replace(".reuse", ""))
        if k in yielding:
            assert a.hi == b.hi & ~(_YIELD | _REUSE) and ".reuse" not in a.text
        elif k + 1 in yielding:
            assert a.hi == b.hi & ~_REUSE
        else:
            assert a.hi == b.hi
    assert any(".reuse" in old[k].text for k in yielding)     # there were reuse flags to clear
    # the SASS text the binary shows (Triton's disassembler) reads the yields too
    assert after.sass().count("Y:1\tFFMA") >= len(yielding) > 0


def _ins(k: int, text: str, hi: int = _YIELD) -> Instr:
    return Instr(offset=16 * k, text=text, lo=k, hi=hi)


def test_runs_follow_a_wgmma_wait_and_end_at_a_branch_or_wgmma():
    ffmas = [f"FFMA R{i}, R{i + 40}, R9.reuse, R{i}" for i in range(8)]
    code = (["QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR12], R24, gsb0", "WARPGROUP.DEPBAR.LE gsb0, 0x0",
             "BAR.SYNC.DEFER_BLOCKING 0x2, 0x80"] + ffmas[:4] + ["@!P2 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R1], RZ"]
            + ffmas[4:] + ["@P2 BRA 0x100"] + ffmas                  # after the branch: no wait before, no run
            + ["WARPGROUP.DEPBAR.LE gsb0, 0x0"] + ffmas[:7] + ["EXIT"])  # seven: too short a run
    instrs = [_ins(k, t) for k, t in enumerate(code)]
    assert ffma_runs(instrs) == [[3, 4, 5, 6, 8, 9, 10, 11]]


def test_the_same_program_check_refuses_any_other_change():
    before = [_ins(0, "FFMA R1, R2, R3.reuse, R1", _YIELD | 1 << 59), _ins(1, "FFMA R4, R5, R3, R4")]
    sass_passes._check_same_program(before, [_ins(0, "FFMA R1, R2, R3, R1", 0), before[1]])
    for after in ([_ins(0, "FFMA R1, R2, R6, R1", _YIELD), before[1]],            # an operand
                  [_ins(0, "FFMA R1, R2, R3.reuse, R1", _YIELD | 1 << 59 | 3 << 41), before[1]],   # the stall
                  [before[0]]):                                                 # an instruction dropped
        with pytest.raises(ValueError, match="the rewrite changed"):
            sass_passes._check_same_program(before, after)


def test_ffma_yield_is_for_block_scales_and_goes_into_the_abi_and_the_key():
    from gluon.abi import KernelABI
    from gluon.backend.compile import cache_key_parts
    from gluon.ir import GluonError
    from gluon.kernels.gemm_sm90.config import DEFAULT_CONFIG
    from gluon.kernels.gemm_sm90.host import compile_variant
    with pytest.raises(GluonError, match="FFMA_YIELD=True is for fp8 block scales"):
        compile_variant(FFMA_YIELD=True)
    assert "FFMA_YIELD" not in DEFAULT_CONFIG.describe()
    assert "FFMA_YIELD=True" in DEFAULT_CONFIG.replace(FFMA_YIELD=True).describe()
    _, b = _block_scaled(True)
    abi = b.abi
    assert abi.sass_passes == ("ffma_yield",) == KernelABI.from_json(abi.to_json()).sass_passes
    plain = KernelABI(abi.name, abi.target, abi.params, abi.num_ctas, abi.ptx_passes, abi.loc, abi.launch_pdl,
                      abi.ctas_per_sm)
    assert "sass_passes" not in plain.to_json()
    assert cache_key_parts("t", abi.target, None, abi) != cache_key_parts("t", abi.target, None, plain)
    with pytest.raises(ValueError, match="unknown SASS passes"):
        sass_passes.requested(KernelABI("k", abi.target, (), sass_passes=("nope",)))


def test_the_pass_keeps_another_kernel_the_same_program():
    """On a kernel with other FFMA runs (attention's softmax, 68 FFMAs beside its exponentials after each S wait)
    the rewrite finds them, changes only control bits (checked inside: it would raise) and nothing else."""
    from gluon.dtypes import DType
    from gluon.kernels.attention_sm90.host import compile_variant
    b = compile_variant(64, DType.bf16, False).binary
    cubin = bytes(b.asm["cubin"])
    new, stats = sass_passes.ffma_yield(cubin, b.name)
    assert stats["runs"] >= 3 and stats["ffmas_yielding"] > 0 and len(new) == len(cubin)
    start = sass_passes._code_start(cubin, sass_passes.disassemble(cubin, b.name))
    diff = [i for i in range(len(cubin)) if cubin[i] != new[i]]
    assert diff and all((i - start) % 16 >= 8 for i in diff)    # only bytes of instructions' high (control) words


def test_attention_asks_for_the_pass_with_its_switch():
    """AttentionConfig FFMA_YIELD: the attention kernel's ABI names the pass, its softmax runs yield, registers and
    spills as without it."""
    from gluon.dtypes import DType
    from gluon.kernels.attention_sm90.host import compile_variant
    plain = compile_variant(64, DType.bf16, False).binary
    b = compile_variant(64, DType.bf16, False, FFMA_YIELD=True).binary
    assert plain.abi.sass_passes == () and b.abi.sass_passes == ("ffma_yield",)
    st = b.metadata["gluon_sass_passes"]["ffma_yield"]
    assert st["runs"] >= 3 and st["ffmas_yielding"] > 0
    assert (b.registers, b.spills) == (plain.registers, plain.spills)
