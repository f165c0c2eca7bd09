"""A GPU `if` on an integer scalar the trace already knows (gluon/language/folding.py) traces only the
branch it takes: Triton 3.6 asserts in its axis analysis when lowering a load or store inside a branch
it has proven dead (the LOOPED softmax with VEC=1 did: `n % 1 != 0`)."""
import os
import sys

import pytest

import gluon
import gluon.language as gl
from gluon import SM90, DType
from gluon.language import PointerArg, ScalarArg
from gluon.language.folding import compute

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

import softmax_kernel as sm  # noqa: E402

F32 = PointerArg(DType.f32)
I32 = ScalarArg(DType.i32)


def _trace(kernel, *args, **kw):
    return kernel.trace(*args, arch=SM90, num_warps=4, **kw).verify().kernel


def _kinds(k) -> list[str]:
    return [op.kind for op in k.walk()]


@gluon.jit
def aligned_copy(out_ptr, x_ptr, n, V: gl.constexpr):
    """The softmax's pattern: a run-time alignment check that is known when V is 1."""
    if n % V == 0:
        out_ptr[0] = x_ptr[n // V * V - 1]
    else:
        out_ptr[0] = 0.0


def test_alignment_check_by_one_traces_only_the_taken_branch():
    kinds = _kinds(_trace(aligned_copy, F32, F32, I32, V=1))
    assert "if" not in kinds
    assert kinds.count("store") == 1 and kinds.count("load") == 1


def test_alignment_check_by_two_stays_a_gpu_branch():
    k = _trace(aligned_copy, F32, F32, I32, V=2)
    assert [op.kind for op in k.body.ops].count("if") == 1
    assert _kinds(k).count("store") == 2


@gluon.jit
def known_false_branch(out_ptr, n):
    m = n * 0
    if m != 0:
        y = 1.0
    else:
        y = 2.0
    out_ptr[0] = y


def test_known_false_condition_takes_the_else_branch():
    k = _trace(known_false_branch, F32, I32)
    consts = {op.results[0]: op.attrs["value"] for op in k.walk() if op.kind == "constant"}
    stores = [op for op in k.walk() if op.kind == "store"]
    assert [consts.get(op.operands[2]) for op in stores] == [2.0]
    assert "if" not in _kinds(k)


@gluon.jit
def float_condition(out_ptr, x):
    if x * 0.0 == 0.0:             # NaN * 0 is NaN: not known
        out_ptr[0] = 1.0


@gluon.jit
def wrapping_condition(out_ptr, n):
    big = n * 0 + 2147483647
    if big + 1 > 0:                # wraps to INT_MIN on the GPU: left to the GPU
        out_ptr[0] = 1.0


@pytest.mark.parametrize("kernel,arg", [(float_condition, ScalarArg(DType.f32)), (wrapping_condition, I32)])
def test_floats_and_overflow_stay_gpu_branches(kernel, arg):
    assert "if" in _kinds(_trace(kernel, F32, arg))


@pytest.mark.parametrize("op,a,b,want", [
    ("floordiv", -7, 2, -3), ("rem", -7, 2, -1), ("floordiv", 7, -2, -3), ("rem", 7, -2, 1),
    ("floordiv", 7, 2, 3), ("rem", 7, 2, 1), ("min", 3, -4, -4), ("xor", 6, 3, 5),
])
def test_constant_division_truncates_like_the_gpu(op, a, b, want):
    assert compute(op, a, b) == want


def test_looped_softmax_with_element_loads_compiles():
    """VEC=1 makes the misaligned branch provably dead; it used to crash Triton's lowering."""
    for dt in (DType.f16, DType.f32):
        ck = sm.softmax_kernel.compile(PointerArg(dt), PointerArg(dt), *[ScalarArg(DType.i32)] * 4, arch="sm90",
                                       num_warps=4, BLOCK_N=1024, NUM_WARPS=4, LOOPED=True, VEC=1)
        assert ck.spills == 0
