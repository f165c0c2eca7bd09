"""A tensor argument where the kernel needs a number (GL601): a 0-d tensor passed for a scalar reached
Python's int()/float() inside the DSL (a TypeError naming GlobalTensor) or, past the trace, MLIR."""
import gluon.language as gl
from gluon import SM90, DType, TensorRef, kernel

from _diag import expect_error, passes

A = TensorRef("A", DType.f32, shape=("N",))


@kernel(arch=SM90, num_warps=4)
def bound_by(A, n):
    offs = gl.arange(0, 128)
    gl.store(A + offs, offs.to(gl.float32), mask=offs < n)                  # n compared


def test_gl601_a_0d_tensor_as_the_bound_of_a_mask():
    e = expect_error(bound_by, (A, TensorRef("n", DType.i32, shape=())), "GL601", "# n compared")
    assert "argument 'n' is a 0-d tensor, used here as a scalar" in e.message and "n.item()" in e.message


def test_gl601_a_scalar_argument_passes():
    passes(bound_by, (A, DType.i32))


@kernel(arch=SM90, num_warps=4)
def scaled_by(A, s):
    offs = gl.arange(0, 128)
    gl.store(A + offs, gl.load(A + offs) * s)                               # s multiplies


def test_gl601_a_0d_tensor_as_a_scale():
    expect_error(scaled_by, (A, TensorRef("s", DType.f32, shape=())), "GL601", "# s multiplies")


@kernel(arch=SM90, num_warps=4)
def loops_to(A, n):
    for i in range(0, n):                                                   # n bounds the loop
        gl.store(A + i, 1.0)


def test_gl601_a_0d_tensor_as_a_loop_bound():
    expect_error(loops_to, (A, TensorRef("n", DType.i32, shape=())), "GL601", "# n bounds the loop")


def test_gl601_a_1d_tensor_as_a_scalar():
    e = expect_error(scaled_by, (A, TensorRef("s", DType.f32, shape=("K",))), "GL601", "# s multiplies")
    assert "is a 1-d tensor" in e.message
