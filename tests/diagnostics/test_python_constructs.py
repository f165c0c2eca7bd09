"""Python constructs a kernel cannot use on GPU values, and the frontend's refusals (issue 20: the
"tracebacks" and "vague" classes): each a GluonError with its GL5xx code at the user's line, naming the
construct and the DSL's replacement. Before, a kernel calling itself hit RecursionError, abs()/round()/
len()/np.exp() raised TypeErrors from Python, and `break` in a GPU loop was a bare SyntaxError."""
import math

import numpy as np
import pytest

import gluon.language as gl
from gluon import SM90, DType, Layout, TensorRef, kernel
from gluon.ir import GluonError
from gluon.language import smem

from _diag import expect_error, line_of, passes

F32 = (TensorRef("A", DType.f32, shape=("N",)),)
F32_N = (TensorRef("A", DType.f32, shape=("N",)), DType.i32)


# ------------------------------------------------------------------ GL501: recursion


@kernel(arch=SM90, num_warps=4)
def calls_itself(A):
    gl.store(A + gl.arange(0, 128), gl.zeros((128,), gl.float32))
    calls_itself(A)                                                         # self call


def test_gl501_a_kernel_calling_itself():
    e = expect_error(calls_itself, F32, "GL501", "# self call")
    assert "kernel calls_itself calls itself" in e.message and "@gl.helper" in e.message


@gl.helper
def _countdown(x, n):
    return _countdown(x + 1.0, n - 1)                                       # no base case


@kernel(arch=SM90, num_warps=4)
def endless_helper(A):
    x = _countdown(gl.load(A + gl.arange(0, 128)), 3)
    gl.store(A + gl.arange(0, 128), x)


def test_gl501_a_helper_recursing_without_a_base_case():
    with pytest.raises(GluonError) as e:
        passes(endless_helper, F32)
    assert e.value.message.startswith("[GL501] ") and "recursed without end in _countdown" in e.value.message
    assert e.value.loc.line == line_of(_countdown, "# no base case")


def test_gl501_a_helper_with_a_constexpr_base_case_traces():
    @gl.helper
    def unroll(x, n):
        if n == 0:
            return x
        return unroll(x + 1.0, n - 1)

    @kernel(arch=SM90, num_warps=4)
    def ok(A):
        gl.store(A + gl.arange(0, 128), unroll(gl.load(A + gl.arange(0, 128)), 3))
    passes(ok, F32)


# ------------------------------------------------------------------ GL502 / GL503: sizes and enum values


@kernel(arch=SM90, num_warps=4)
def float_block(A, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK)                                              # float bound
    gl.store(A + offs, offs.to(gl.float32))


def test_gl502_float_constexpr_as_an_arange_bound():
    e = expect_error(float_block, F32, "GL502", "# float bound", BLOCK=128.0)
    assert "constexpr BLOCK=128.0 is a float; pass BLOCK=128" in e.message


@kernel(arch=SM90, num_warps=4)
def float_shape(A, BLOCK: gl.constexpr):
    z = gl.zeros((BLOCK, 64), gl.float32)                                   # float shape
    gl.store(A + gl.arange(0, 64), gl.sum(z, 0))


def test_gl502_float_constexpr_as_a_tile_shape():
    expect_error(float_shape, F32, "GL502", "# float shape", BLOCK=64.5)


@kernel(arch=SM90, num_warps=4)
def float_unroll(A, N: gl.constexpr):
    for i in gl.static_range(N):                                            # float count
        gl.store(A + i, 1.0)


def test_gl502_float_constexpr_as_a_static_range_count():
    expect_error(float_unroll, F32, "GL502", "# float count", N=4.0)


def swizzle_kernel(swizzle):
    @kernel(arch=SM90, num_warps=4)
    def sw(A):
        a_s = smem(gl.float16, Layout.swizzled(64, 64, swizzle=swizzle), name="a")   # the swizzle
        a_s.store(gl.zeros((64, 64), gl.float16))
    return sw


def test_gl503_swizzle_given_as_a_bad_int():
    e = expect_error(swizzle_kernel(96), F32, "GL503", "# the swizzle")
    assert "swizzle=96 is not a SwizzleMode; allowed: 0, 32, 64, 128" in e.message


def test_gl503_swizzle_given_as_a_bad_string():
    e = expect_error(swizzle_kernel("128B"), F32, "GL503", "# the swizzle")
    assert "swizzle='128B' is not a SwizzleMode" in e.message


# (the warp role given as a bad string or int: tests/diagnostics/test_warp_roles.py)


# ------------------------------------------------------------------ GL504-GL510: host constructs on GPU values


def host_kernel(which):
    @kernel(arch=SM90, num_warps=4)
    def host(A, n):
        offs = gl.arange(0, 128)
        x = gl.load(A + offs)
        if which == "while":
            i = 0
            while i < n:                                                    # GL504
                i = i + 1
        if which == "max":
            x = max(x, 0.0)                                                 # GL505
        if which == "min":
            x = min(x, 1.0)                                                 # GL505
        if which == "exp":
            x = math.exp(x)                                                 # GL506
        if which == "sqrt":
            x = math.sqrt(x)                                                # GL506
        if which == "tanh":
            x = math.tanh(x)                                                # GL506
        if which == "np_exp":
            x = np.exp(x)                                                   # GL506
        if which == "np_maximum":
            x = np.maximum(x, 0.0)                                          # GL506
        if which == "abs":
            x = abs(x)                                                      # GL507
        if which == "round":
            x = round(x)                                                    # GL507
        if which == "len":
            x = x * len(x)                                                  # GL507
        if which == "sum":
            x = sum(x)                                                      # GL507
        if which == "iter":
            for v in x:                                                     # GL507
                pass
        if which == "float":
            x = x * float(n)                                                # GL508
        if which == "int":
            x = x * int(n)                                                  # GL508
        if which == "and":
            x = gl.where(offs < n and offs > 2, x, 0.0)                     # GL509
        if which == "not":
            x = gl.where(not (offs < n), x, 0.0)                            # GL509
        if which == "assert":
            assert offs < n                                                 # GL510
        if which == "index":
            x = x * [1.0, 2.0][n]                                           # GL510
        if which == "ok":
            x = gl.maximum(gl.minimum(gl.sqrt(gl.exp(gl.abs(x))), 1.0), 0.0) * n.to(gl.float32)
        gl.store(A + offs, x, mask=(offs < n) & (offs > 2))
    return host


HOST = {
    "while": ("GL504", "`while` over a GPU value", "for i in range(n):"),
    "max": ("GL505", "Python's max() on a GPU value", "gl.maximum(a, b)"),
    "min": ("GL505", "Python's min() on a GPU value", "gl.minimum(a, b)"),
    "exp": ("GL506", "math.exp() on a GPU value", "use gl.exp(x)"),
    "sqrt": ("GL506", "math.sqrt() on a GPU value", "use gl.sqrt(x)"),
    "tanh": ("GL506", "math.tanh() on a GPU value", "gl has no tanh; compose it from gl.exp"),
    "np_exp": ("GL506", "numpy.exp() on a GPU value", "use gl.exp(x)"),
    "np_maximum": ("GL506", "numpy.maximum() on a GPU value", "use gl.maximum(x)"),
    "abs": ("GL507", "Python's abs() on a GPU value", "use gl.abs(x)"),
    "round": ("GL507", "Python's round() on a GPU value", "gl.floor(x + 0.5)"),
    "len": ("GL507", "Python's len() on a GPU value", "x.shape[0]"),
    "sum": ("GL507", "Python's sum() on a GPU value", "gl.sum(x, axis)"),
    "iter": ("GL507", "iterating over a GPU value", "gl.arange"),
    "float": ("GL508", "float() of a GPU value", "x.to(gl.float32)"),
    "int": ("GL508", "int() of a GPU value", "x.to(gl.int32)"),
    "and": ("GL509", "`and` on a GPU value", "`&`"),
    "not": ("GL509", "`not` on a GPU value", "`~`"),
    "assert": ("GL510", "a GPU value was used as a Python bool", "gl.where"),
    "index": ("GL510", "a GPU value was used where Python needs a compile-time integer", "gl.constexpr"),
}


MARKER = {"while": "while i < n", "max": "max(x, 0.0)", "min": "min(x, 1.0)", "exp": "math.exp(x)",
          "sqrt": "math.sqrt(x)", "tanh": "math.tanh(x)", "np_exp": "np.exp(x)", "np_maximum": "np.maximum(x",
          "abs": "abs(x)", "round": "round(x)", "len": "len(x)", "sum": "sum(x)", "iter": "for v in x",
          "float": "float(n)", "int": "int(n)", "and": "offs < n and", "not": "not (offs < n)",
          "assert": "assert offs < n", "index": "[1.0, 2.0][n]"}


@pytest.mark.parametrize("which", list(HOST))
def test_gl504_to_gl510_host_constructs_name_the_construct_and_the_fix(which):
    code, what, fix = HOST[which]
    e = expect_error(host_kernel(which), F32_N, code, MARKER[which])
    assert what in e.message and fix in e.message, e.message


def test_the_dsl_replacements_trace():
    passes(host_kernel("ok"), F32_N)


def test_numpy_scalars_still_combine_with_gpu_values():
    @kernel(arch=SM90, num_warps=4)
    def scaled(A):
        offs = gl.arange(0, 128)
        gl.store(A + offs, gl.load(A + offs) * np.float32(2.0) + np.int32(1))
    passes(scaled, F32)


# ------------------------------------------------------------------ GL511 / GL512: what the frontend refuses


@kernel(arch=SM90, num_warps=4)
def returns_a_value(A):
    x = gl.load(A + gl.arange(0, 128))
    return x * 2.0                                                          # dropped


def test_gl511_a_kernel_returning_a_value():
    e = expect_error(returns_a_value, F32, "GL511", "# dropped")
    assert "a kernel cannot return a value" in e.message


@kernel(arch=SM90, num_warps=4)
def breaks_a_gpu_loop(A, n):
    for i in range(n):
        if i > 2:
            break                                                           # break
        gl.store(A + i, 1.0)


def test_gl512_break_in_a_gpu_loop():
    e = expect_error(breaks_a_gpu_loop, F32_N, "GL512", "# break")
    assert "'break' inside a loop over GPU values is not supported" in e.message
    assert isinstance(e, SyntaxError)                                      # as the frontend raised it before


@kernel(arch=SM90, num_warps=4)
def continues_a_gpu_loop(A, n):
    for i in range(n):
        gl.store(A + i, 1.0)
        continue                                                            # continue


def test_gl512_continue_in_a_gpu_loop():
    expect_error(continues_a_gpu_loop, F32_N, "GL512", "# continue")


@kernel(arch=SM90, num_warps=4)
def returns_from_a_gpu_branch(A, n):
    if n > 4:
        return                                                              # return
    gl.store(A + gl.arange(0, 128), gl.zeros((128,), gl.float32))


def test_gl512_return_from_a_gpu_branch():
    expect_error(returns_from_a_gpu_branch, F32_N, "GL512", "# return")
