"""Inline assembly (issue 19): `gl.inline_asm_elementwise` and the PTX templates of `gl.nvidia.ptx`.

CPU: the TTGIR each lowers to (Triton's own `tt.elementwise_inline_asm` syntax), the PTX of a compile for
sm90, the errors for operand counts Triton would abort the process on, and the templates refused on CDNA3.
GPU (marked): the results against torch (a register swap, packed bf16 conversion, the approximate units),
the timer and the lane election.
"""
import pytest

import gluon
import gluon.language as gl
from gluon.backend.lowering.literals import mlir_string
from gluon.ir import GluonError
from gluon.jit import lower, run_passes
from gluon.language import PointerArg, ScalarArg
from gluon.language.nvidia import ptx
from gluon.language.tracing import ArchError


@gluon.jit
def asm_kernel(x_ptr, out_ptr, t_ptr, n, BLOCK: gl.constexpr):
    """out = (hi, lo) halves of x swapped by asm + 1 per elected lane; t = elapsed global timer."""
    layout = gl.Layout.blocked([2], [32], [4])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    m = offs < n
    x = gl.load(x_ptr + offs, mask=m)
    t0 = ptx.globaltimer()
    a, b = gl.inline_asm_elementwise("mov.b32 $0, $3;\n\tmov.b32 $1, $2;", "=r,=r,r,r", [x, x + 1],
                                     (gl.int32, gl.int32), True, 1)
    ptx.fence("acq_rel", "gpu")
    gl.store(out_ptr + offs, a * 2 + b + ptx.elect_one(), mask=m)
    gl.store(t_ptr + gl.program_id(0), (ptx.globaltimer() - t0).to(gl.int64))


@gluon.jit
def math_kernel(x_ptr, e_ptr, r_ptr, h_ptr, n, BLOCK: gl.constexpr):
    layout = gl.Layout.blocked([4], [32], [4])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    m = offs < n
    x = gl.load(x_ptr + offs, mask=m)
    gl.store(e_ptr + offs, ptx.ex2_approx(x), mask=m)
    gl.store(r_ptr + offs, ptx.rcp_approx(x), mask=m)
    gl.store(h_ptr + offs, ptx.cvt_rn_bf16x2(x), mask=m)


@gluon.jit
def bad_kernel(x_ptr, CASE: gl.constexpr):
    offs = gl.arange(0, 128, layout=gl.Layout.blocked([1], [32], [4]))
    x = gl.load(x_ptr + offs)
    if CASE == "outputs":
        gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,=r,r", [x], gl.int32, True, 1)
    if CASE == "inputs":
        gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r,r", [x], gl.int32, True, 1)
    if CASE == "operand":
        gl.inline_asm_elementwise("mov.b32 $0, $2;", "=r,r", [x], gl.int32, True, 1)
    if CASE == "pack":
        gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], gl.int32, True, 0)
    if CASE == "no result":
        gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], (), True, 1)


def _ttgir(kernel, *args, **kw) -> str:
    return lower(run_passes(kernel.trace(*args, **kw))).ttgir


def test_ttgir_is_tritons_elementwise_inline_asm():
    t = _ttgir(asm_kernel, PointerArg(gl.int32), PointerArg(gl.int32), PointerArg(gl.int64), ScalarArg(gl.int32),
               BLOCK=256, arch="sm90", num_warps=4)
    lines = [ln.strip() for ln in t.splitlines() if "elementwise_inline_asm" in ln]
    assert len(lines) == 5                          # 2 timers, the swap, the fence, elect
    swap = next(ln for ln in lines if "=r,=r,r,r" in ln)
    assert swap.split(" = ")[0].endswith(":2")      # two results: %asm:2
    assert 'pure = true' in swap and '"mov.b32 $0, $3;\\n\\tmov.b32 $1, $2;"' in swap
    assert "-> tensor<256xi32" in swap and swap.count("tensor<256xi32") == 4
    timer = next(ln for ln in lines if "globaltimer" in ln)
    assert 'constraints = "=l"' in timer and "pure = false" in timer and timer.endswith("-> i64")
    assert any("fence.acq_rel.gpu" in ln and "pure = false" in ln for ln in lines)


def test_compiles_for_sm90_with_the_ptx_instructions():
    ck = math_kernel.compile(PointerArg(gl.float32), PointerArg(gl.float32), PointerArg(gl.float32),
                             PointerArg(gl.bfloat16), ScalarArg(gl.int32), BLOCK=512, arch="sm90", num_warps=4)
    text = ck.binary.asm["ptx"] if hasattr(ck.binary, "asm") else ck.ptx
    for instr in ("ex2.approx.ftz.f32", "rcp.approx.ftz.f32", "cvt.rn.bf16x2.f32"):
        assert instr in text
    ck2 = asm_kernel.compile(PointerArg(gl.int32), PointerArg(gl.int32), PointerArg(gl.int64), ScalarArg(gl.int32),
                             BLOCK=256, arch="sm90", num_warps=4)
    text2 = ck2.binary.asm["ptx"] if hasattr(ck2.binary, "asm") else ck2.ptx
    assert "%globaltimer" in text2 and "fence.acq_rel.gpu" in text2 and "elect.sync" in text2


@pytest.mark.parametrize("case,match", [
    ("outputs", r"list 2 outputs and 1 inputs; with pack=1 the results need 1 \(i32: 1\)"),
    ("inputs", r"list 1 outputs and 2 inputs; .* the arguments 1 \(i32: 1\)"),
    ("operand", r"asm uses \$2, but it has operands \$0\.\.\$1"),
    ("pack", r"pack=0 must be a positive int"),
    ("no result", r"dtype names no result"),
])
def test_bad_operand_counts_are_refused_at_the_call(case, match):
    with pytest.raises(GluonError, match=match) as e:
        bad_kernel.trace(PointerArg(gl.int32), CASE=case, arch="sm90", num_warps=4)
    assert "test_inline_asm.py" in str(e.value)           # the user's line


def test_narrow_elements_share_registers():
    """pack=2 of bf16 is one output register, of f32 two inputs (what the conversion template declares)."""
    from gluon.language.inline_asm import _registers
    assert _registers(gl.bfloat16, 2) == 1 and _registers(gl.float32, 2) == 2
    assert _registers(gl.uint8, 4) == 1 and _registers(gl.float16, 1) == 1 and _registers(gl.int64, 2) == 2


def test_ptx_templates_are_refused_on_cdna3_but_inline_asm_is_not():
    with pytest.raises(ArchError, match="globaltimer.*cdna3"):
        asm_kernel.trace(PointerArg(gl.int32), PointerArg(gl.int32), PointerArg(gl.int64), ScalarArg(gl.int32),
                         BLOCK=256, arch="cdna3", num_warps=4)

    @gluon.jit
    def amd(x_ptr):
        offs = gl.arange(0, 256, layout=gl.Layout.blocked([1], [64], [4]))
        x = gl.load(x_ptr + offs)
        gl.store(x_ptr + offs, gl.inline_asm_elementwise("v_mov_b32 $0, $1", "=v,v", [x], gl.int32, True, 1))
    assert "elementwise_inline_asm" in _ttgir(amd, PointerArg(gl.int32), arch="cdna3", num_warps=4)


def test_mlir_string_escapes():
    assert mlir_string('a "b"\\\n\t') == '"a \\"b\\"\\\\\\n\\t"'
    assert mlir_string("\x01é") == '"\\01\\C3\\A9"'


@pytest.mark.gpu
def test_on_the_gpu_matches_torch():
    torch = pytest.importorskip("torch")
    n = 5000
    x = torch.randint(-1000, 1000, (n,), device="cuda", dtype=torch.int32)
    out = torch.full((n,), -7, device="cuda", dtype=torch.int32)
    t = torch.zeros(gl.cdiv(n, 256), device="cuda", dtype=torch.int64)
    asm_kernel[(gl.cdiv(n, 256),)](x, out, t, n, BLOCK=256, num_warps=4)
    lane = (torch.arange(n, device="cuda") % 256) // 2      # the thread of each element (2 per thread)
    elected = (lane % 32 == 0).int()                        # elect.sync picks lane 0 of each warp
    assert torch.equal(out, 2 * (x + 1) + x + elected)      # the asm swapped its inputs: a = x + 1, b = x
    assert bool((t >= 0).all()) and bool((t < 10**9).all())
    xf = torch.rand(n, device="cuda") * 8 - 4 + 1e-3
    e, r = torch.empty_like(xf), torch.empty_like(xf)
    h = torch.empty(n, device="cuda", dtype=torch.bfloat16)
    math_kernel[(gl.cdiv(n, 512),)](xf, e, r, h, n, BLOCK=512, num_warps=4)
    assert torch.allclose(e, torch.exp2(xf), rtol=1e-6 * 8)
    assert torch.allclose(r, 1 / xf, rtol=1e-6 * 4)
    assert torch.equal(h, xf.to(torch.bfloat16))
