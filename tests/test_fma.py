"""`gl.fma`, the worked example of docs/ARCHITECTURE.md ("adding an op end to end"): the IR op kind and
its traits, the builtin, the lowering rule, the machine code (CPU), and the numbers (GPU)."""
import pytest

import gluon
import gluon.language as gl
from gluon import ir
from gluon.backend.lowering import RULES
from gluon.backend.machine_code import sass_instructions
from gluon.ir import GluonError
from gluon.language import PointerArg, ScalarArg


@gluon.jit
def axpy(y_ptr, x_ptr, a, n, XBLOCK: gl.constexpr):
    idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
    if idx < n:
        y_ptr[idx] = gl.fma(a, x_ptr[idx], y_ptr[idx])


def test_the_op_kind_declares_its_traits_and_has_one_rule():
    d = ir.OPS["fma"]
    assert d.pure and d.same_layout and d.family == "arith" and RULES["fma"].__name__ == "lower_fma"


@pytest.mark.parametrize("dtype, sass", [(gl.float32, "FFMA"), (gl.float16, "HFMA2")])
def test_fma_lowers_to_math_fma_and_the_hardware_fma(dtype, sass):
    ck = axpy.compile(PointerArg(dtype), PointerArg(dtype), ScalarArg(dtype), ScalarArg(gl.int32, 16), arch="sm90",
                      block=(1024,), XBLOCK=1024)
    assert "= math.fma " in ck.ttgir
    assert sass_instructions(ck.sass())[sass] > 0 and ck.spills == 0


def test_fma_refuses_integers_with_the_users_line():
    @gluon.jit
    def bad(y_ptr, n, XBLOCK: gl.constexpr):
        idx = gl.thread_id(0)
        y_ptr[idx] = gl.fma(idx, idx, idx)   # here
    with pytest.raises(GluonError, match=r"fma needs floating-point operands, got i32") as e:
        bad.trace(PointerArg(gl.int32), ScalarArg(gl.int32), block=(128,), XBLOCK=128)
    assert "test_fma.py" in str(e.value) and "# here" in str(e.value)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("n", [1000, 1 << 20])
def test_fma_on_the_gpu(dtype, n):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    dt = getattr(torch, dtype)
    x = torch.randn(n, device="cuda", dtype=dt)
    y = torch.randn(n, device="cuda", dtype=dt)
    # a Python float is an f32 scalar, so the product and sum are one f32 fma (exact in f64 here), stored as dt
    want = (1.5 * x.double() + y.double()).float().to(dt)
    axpy[(gl.cdiv(n, 1024),), (1024,)](y, x, 1.5, n, XBLOCK=1024)
    torch.cuda.synchronize()
    assert torch.equal(y, want)
