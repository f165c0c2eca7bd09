"""Inline assembly (issue 19): `gl.inline_asm_elementwise` and the PTX templates of `gl.nvidia.ptx`.

CPU: the TTGIR each lowers to (Triton's own `tt.elementwise_inline_asm` syntax), the PTX of a compile for
sm90, the errors for operand counts Triton would abort the process on, and the templates refused on CDNA3.
GPU (marked): the results against torch (a register swap, packed bf16 conversion, the approximate units),
the timer and the lane election.
"""
import numpy as np
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
    if CASE == "pack divides":
        gl.inline_asm_elementwise("mov.b32 $0, $3;\n\tmov.b32 $1, $4;\n\tmov.b32 $2, $5;", "=r,=r,=r,r,r,r", [x],
                                  gl.int32, True, 3)


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
    ("pack divides", r"pack=3 does not divide the 128 elements of the 128 tile"),
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


def _run_ptx_lane(lines: list[str], inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Evaluate ex2_mixed's polynomial-lane PTX, instruction by instruction, in numpy fp32 (round to nearest;
    fma through fp64, exact for fp32 products): the text ptxas gets, not a second copy of its math."""
    regs = dict(inputs)

    def val(tok: str) -> np.ndarray:
        tok = tok.strip()
        if tok.startswith("0f"):
            return np.full_like(inputs["$in"], np.uint32(int(tok[2:], 16)).view(np.float32))
        return regs[tok]
    for line in lines:
        op, rest = line.rstrip(";").split(None, 1)
        dst, *srcs = [t.strip() for t in rest.split(",")]
        a = [val(s) if not s.isdigit() else int(s) for s in srcs]
        f32 = [np.asarray(x, np.float32) if not isinstance(x, int) else x for x in a]
        if op == "max.f32":
            r = np.maximum(f32[0], f32[1])
        elif op == "add.rn.f32":
            r = (f32[0] + f32[1]).astype(np.float32)
        elif op == "sub.rn.f32":
            r = (f32[0] - f32[1]).astype(np.float32)
        elif op == "fma.rn.f32":
            r = (f32[0].astype(np.float64) * f32[1] + f32[2]).astype(np.float32)
        elif op == "shl.b32":
            r = (f32[0].view(np.uint32) << np.uint32(a[1])).view(np.float32)
        elif op == "add.s32":
            r = (f32[0].view(np.uint32) + f32[1].view(np.uint32)).view(np.float32)
        else:
            raise AssertionError(f"unexpected instruction {line!r}")
        regs[dst] = r
    return regs


@pytest.mark.parametrize("pack,poly", [(4, 1), (2, 1), (8, 1), (4, 2)])
def test_ex2_mixed_asm_splits_the_lanes_and_its_polynomial_is_within_7_6e_5_of_normal_results(pack, poly):
    asm = ptx.ex2_mixed_asm(pack, poly)
    lines = [ln.strip() for ln in asm.split("\n")]
    assert lines[0] == f"{ptx.EX2_MIXED_MARK} {pack - poly}+{poly}"
    mufu = [ln for ln in lines if ln.startswith("ex2.approx.ftz.f32")]
    assert mufu == [f"ex2.approx.ftz.f32 ${i}, ${pack + i};" for i in range(pack - poly)]
    body = lines[lines.index(".reg .b32 t, j, f, p, e;") + 1:-1]
    assert len(body) == len(mufu) + 9 * poly
    lane = body[len(mufu):len(mufu) + 9]                # the first polynomial lane: output pack - poly
    x = np.concatenate([np.linspace(-125, 0, 400001, dtype=np.float32),
                        np.float32([-0.0, -1e-30, -0.5, -0.49999997, -124.5, -17.25])])
    regs = _run_ptx_lane([ln.replace(f"${2 * pack - poly}", "$in") for ln in lane], {"$in": x})
    got = regs[f"${pack - poly}"].astype(np.float64)
    want = np.exp2(x.astype(np.float64))
    assert np.max(np.abs(got - want) / want) < 7.6e-5
    low = _run_ptx_lane([ln.replace(f"${2 * pack - poly}", "$in") for ln in lane],
                        {"$in": np.float32([-125.5, -126.5, -127.0, -200.0, -1e30, -np.inf])})
    assert np.all(low[f"${pack - poly}"] >= 0) and np.all(low[f"${pack - poly}"] < 2.0 ** -125)   # no wrapped exponent


def test_ex2_mixed_checks_its_arguments_and_compiles_for_sm90():
    @gluon.jit
    def k(x_ptr, PACK: gl.constexpr, POLY: gl.constexpr):
        offs = gl.arange(0, 512, layout=gl.Layout.blocked([4], [32], [4]))
        gl.store(x_ptr + offs, ptx.ex2_mixed(gl.load(x_ptr + offs), pack=PACK, poly=POLY))
    ck = k.compile(PointerArg(gl.float32), PACK=4, POLY=1, arch="sm90", num_warps=4)
    text = ck.binary.asm["ptx"] if hasattr(ck.binary, "asm") else ck.ptx
    assert "ex2.approx.ftz.f32" in text and "0f3D61F9AE" in text and "shl.b32" in text
    with pytest.raises(GluonError, match=r"ex2_mixed: pack=4, poly=5"):
        k.trace(PointerArg(gl.float32), PACK=4, POLY=5, arch="sm90", num_warps=4)


@gluon.jit
def ex2_mixed_kernel(x_ptr, out_ptr, n, PACK: gl.constexpr, POLY: gl.constexpr, BLOCK: gl.constexpr):
    layout = gl.Layout.blocked([8], [32], [4])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    m = offs < n
    gl.store(out_ptr + offs, ptx.ex2_mixed(gl.load(x_ptr + offs, mask=m), pack=PACK, poly=POLY), mask=m)


@pytest.mark.gpu
@pytest.mark.parametrize("pack,poly", [(4, 1), (2, 1), (8, 1), (8, 8)])
def test_ex2_mixed_on_the_gpu_is_within_7_6e_5_of_exp2(pack, poly):
    torch = pytest.importorskip("torch")
    n = 1 << 20
    x = -torch.rand(n, device="cuda", dtype=torch.float64).mul(125.0)     # 2**x a normal number
    x[:4] = torch.tensor([0.0, -0.5, -125.0, -1e-9], dtype=torch.float64)
    x = x.float()
    out = torch.full_like(x, float("nan"))
    ex2_mixed_kernel[(gl.cdiv(n, 4096),)](x, out, n, PACK=pack, POLY=poly, BLOCK=4096, num_warps=4)
    want = torch.exp2(x.double())
    rel = ((out.double() - want).abs() / want).max().item()
    assert rel < 7.6e-5, rel
    low = torch.tensor([-126.5, -200.0, -1e30], device="cuda").repeat(8)
    lo = torch.full_like(low, float("nan"))
    ex2_mixed_kernel[(1,)](low, lo, low.numel(), PACK=pack, POLY=poly, BLOCK=4096, num_warps=4)
    assert bool((lo >= 0).all()) and bool((lo < 2.0 ** -125).all())
