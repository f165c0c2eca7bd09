"""Kernel mistakes that used to compile silently or end in a raw Python traceback, each now one
GluonError (or SpecError) at the user's line that says what would be right (issue 20, first batch)."""
import math
import textwrap

import pytest

import gluon
import gluon.language as gl
from gluon.ir import GluonError
from gluon.language import PointerArg, ScalarArg
from gluon.tuning.spec import SpecError, load_spec

HERE = __file__


def _line_of(fn, text: str) -> int:
    """The line of this file that holds `text` inside fn's source (for asserting the reported line)."""
    import inspect
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


@gluon.jit
def fill(y_ptr, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK)
    gl.store(y_ptr + offs, offs, mask=offs < n)


def _trace_fill(**kw):
    return fill.trace(PointerArg(gl.int32), ScalarArg(gl.int32), **{"BLOCK": 128, **kw})


# ------------------------------------------------------------------ 1. threads per block


def test_num_warps_over_the_nvidia_limit_names_the_limit_at_the_def_line():
    with pytest.raises(GluonError) as e:
        _trace_fill(num_warps=64)
    msg = str(e.value)
    assert msg.startswith(f"{HERE}:{_line_of(fill, 'def fill')} (in fill): [GL303] kernel fill: num_warps=64 is 2048 "
                          "threads per block, but sm90 allows at most 1024 (32 warps of 32); use num_warps <= 32"), msg


def test_num_warps_over_the_cdna3_limit_counts_waves_of_64():
    with pytest.raises(GluonError, match=r"num_warps=32 is 2048 threads per block, but cdna3 allows at most "
                                         r"1024 \(16 waves of 64\); use num_warps <= 16"):
        _trace_fill(num_warps=32, arch="cdna3")


def test_num_warps_at_the_limit_still_traces():
    assert _trace_fill(num_warps=32).kernels[0].num_warps == 32
    assert _trace_fill(num_warps=16, arch="cdna3").kernels[0].num_warps == 16


def test_num_warps_that_is_no_positive_int():
    with pytest.raises(GluonError, match=r"kernel fill: num_warps=0\.5; it must be an integer 1\.\.32"):
        _trace_fill(num_warps=0.5)


SPEC_HEAD = """\
[kernel]
name = "k"
template = "pkg.mod:TUNING"
arch = "ARCH"
dtypes = ["fp16"]
shapes = [[64, 64]]

"""


def _load(tmp_path, body, arch="sm90"):
    p = tmp_path / "s.toml"
    p.write_text(SPEC_HEAD.replace("ARCH", arch) + body)
    return load_spec(p)


def test_spec_roles_whose_warps_sum_over_the_block_limit(tmp_path):
    with pytest.raises(SpecError) as e:
        _load(tmp_path, "[warp_roles.producer]\nwarps = 1\n[warp_roles.consumer]\nwarps = { values = [32] }\n")
    assert str(e.value).startswith(
        f"{tmp_path / 's.toml'}:11: warp_roles.consumer.warps: the warp roles need at least producer 1 + "
        "consumer 32 = 33 warps per block, more than the 32 a block of sm90 can hold (1024 threads)"), str(e.value)


def test_spec_role_over_the_cdna3_limit(tmp_path):
    with pytest.raises(SpecError, match=r"consumer 20 = 20 warps per block, more than the 16 a block of cdna3"):
        _load(tmp_path, "[warp_roles.consumer]\nwarps = 20\n", arch="cdna3")


def test_spec_roles_that_can_fit_still_load(tmp_path):
    spec = _load(tmp_path, "[warp_roles.producer]\nwarps = 1\n[warp_roles.consumer]\nwarps = { values = [4, 8, 32] }\n")
    assert "CONSUMER_WARPS" in spec.space.params


def test_spec_single_role_over_32_warps_stays_an_error(tmp_path):
    with pytest.raises(SpecError, match=r"33 warps is out of range; allowed: integers 1\.\.32"):
        _load(tmp_path, "[warp_roles.consumer]\nwarps = 33\n")


def test_spec_launch_num_warps_literal_over_32(tmp_path):
    (tmp_path / "k.py").write_text(textwrap.dedent('''
        import gluon, gluon.language as gl

        @gluon.jit
        def k(out, n, BLOCK: gl.constexpr):
            offs = gl.arange(0, BLOCK)
            gl.store(out + offs, offs, mask=offs < n)
    '''))
    spec = textwrap.dedent('''\
        [kernel]
        name = "k"
        function = "k.py:k"
        arch = "sm90"
        dims = ["N"]
        dtypes = ["fp32"]
        shapes = [[1000]]

        [params]
        BLOCK = { values = [512] }

        [args]
        out = { tensor = ["N"], output = true }
        n = "N"

        [launch]
        grid = ["cdiv(N, BLOCK)"]
        num_warps = 64

        [problem]
        reference = "out"
        baseline = "out"
        bytes = "N"
    ''')
    (tmp_path / "s.toml").write_text(spec)
    with pytest.raises(SpecError) as e:
        load_spec(tmp_path / "s.toml")
    assert str(e.value).startswith(f"{tmp_path / 's.toml'}:18: launch.num_warps: 64 is more than 32 (a block holds "
                                   "at most 1024 threads = 32 warps)"), str(e.value)
    (tmp_path / "s.toml").write_text(spec.replace("num_warps = 64", "num_warps = 32"))
    assert load_spec(tmp_path / "s.toml")


# ------------------------------------------------------------------ 2. a float constexpr used as a size


def test_float_constexpr_as_arange_bound_names_the_parameter():
    with pytest.raises(GluonError) as e:
        _trace_fill(BLOCK=128.0)
    assert str(e.value).startswith(
        f"{HERE}:{_line_of(fill, 'gl.arange(0, BLOCK)')} (in fill): [GL502] arange's end must be a Python int (a compile-time "
        "size), but constexpr BLOCK=128.0 is a float; pass BLOCK=128"), str(e.value)


@gluon.jit
def unrolled(y_ptr, N: gl.constexpr, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK)
    acc = gl.zeros([BLOCK], gl.float32)
    for i in gl.static_range(N):
        acc = acc + gl.load(y_ptr + i * BLOCK + offs)
    gl.store(y_ptr + offs, acc * 0.5)


def test_float_constexpr_in_static_range_and_zeros():
    with pytest.raises(GluonError, match=r"static_range's bound must be a Python int \(a compile-time size\), but "
                                         r"constexpr N=2\.5 is a float\n"):
        unrolled.trace(PointerArg(gl.float32), N=2.5, BLOCK=64)
    with pytest.raises(GluonError, match=r"arange's end .* but constexpr BLOCK='64' is a str"):
        unrolled.trace(PointerArg(gl.float32), N=2, BLOCK="64")
    assert unrolled.trace(PointerArg(gl.float32), N=2, BLOCK=64)


def test_a_float_constexpr_used_as_a_number_still_traces():
    @gluon.jit
    def scale(y_ptr, ALPHA: gl.constexpr, BLOCK: gl.constexpr):
        offs = gl.arange(0, BLOCK)
        gl.store(y_ptr + offs, gl.load(y_ptr + offs) * ALPHA)
    assert scale.trace(PointerArg(gl.float32), ALPHA=0.5, BLOCK=64)


# ------------------------------------------------------------------ 3. a swizzle or warp role as a bad int / string

SWIZZLE_ALLOWED = "allowed: 0, 32, 64, 128 (or SwizzleMode.NONE/B32/B64/B128)"
ROLE_ALLOWED = "allowed: 'producer', 'consumer', 'default' (or WarpRole.PRODUCER/CONSUMER/DEFAULT)"


def test_a_bad_swizzle_lists_the_widths_at_the_users_line():
    with pytest.raises(GluonError) as e:
        gl.Layout.swizzled(128, 64, swizzle=96)    # bad swizzle
    msg = str(e.value)
    assert msg.startswith(f"{HERE}:") and f"swizzle=96 is not a SwizzleMode; {SWIZZLE_ALLOWED}\n" in msg, msg
    assert "# bad swizzle" in msg


def test_swizzle_mode_constructor_and_names():
    from gluon.types import SwizzleMode
    with pytest.raises(GluonError, match=r"^[^\n]*test_diagnostics_basic.py:\d+ .*96 is not a SwizzleMode; allowed: 0, 32"):
        SwizzleMode(96)
    assert SwizzleMode(128) is SwizzleMode.B128 and SwizzleMode("b64") is SwizzleMode.B64
    assert gl.Layout.swizzled(128, 64, swizzle=32).swizzle is SwizzleMode.B32


def test_a_misspelled_warp_role_suggests_the_close_one():
    from gluon.types import WarpRole
    from gluon.language import warp_role
    with pytest.raises(GluonError) as e:
        warp_role("consumer_x", warp_range=(0, 3))
    assert f"warp_role='consumer_x' is not a WarpRole; {ROLE_ALLOWED}; did you mean 'consumer'?" in str(e.value)
    with pytest.raises(GluonError, match=r"'produser' is not a WarpRole; .*; did you mean 'producer'\?"):
        WarpRole("produser")
    with pytest.raises(GluonError, match=r"warp_role='xyz' is not a WarpRole; allowed: [^\n]*\)\n"):
        warp_role("xyz", warp_range=(0, 3))
    assert warp_role("PRODUCER", warp_range=(4, 4)).role is WarpRole.PRODUCER
    assert WarpRole("consumer") is WarpRole.CONSUMER


def test_a_bad_warp_role_inside_a_kernel_names_the_with_line():
    from gluon.language import warp_role

    @gluon.kernel(arch="sm90", num_warps=4)
    def roles(y_ptr):
        with warp_role("consumr", warp_range=(0, 3)):
            gl.store(y_ptr + gl.arange(0, 128), gl.arange(0, 128))
    with pytest.raises(GluonError) as e:
        roles.trace(PointerArg(gl.int32))
    assert str(e.value).startswith(f"{HERE}:{_line_of(roles, 'consumr')} (in roles): [GL503] warp_role='consumr' is not a "
                                   f"WarpRole; {ROLE_ALLOWED}; did you mean 'consumer'?"), str(e.value)


# ------------------------------------------------------------------ 4. `return value` in a kernel

RETURN_MSG = ("[GL511] a kernel cannot return a value (a launch has no result, so it would be dropped); write it to an "
              "output pointer instead, e.g. gl.store(out_ptr + offs, value)")


def test_return_value_in_a_kernel_is_refused_at_the_return_line():
    @gluon.jit
    def returns(y_ptr, BLOCK: gl.constexpr):
        offs = gl.arange(0, BLOCK)
        gl.store(y_ptr + offs, offs)
        return offs
    with pytest.raises(GluonError) as e:
        returns.trace(PointerArg(gl.int32), BLOCK=64)
    assert str(e.value) == (f"{HERE}:{_line_of(returns, 'return offs')} (in returns): {RETURN_MSG}\n"
                            "    return offs")


def test_return_value_under_a_constexpr_if_is_refused_too():
    @gluon.jit
    def early(y_ptr, FLAG: gl.constexpr):
        if FLAG:
            return 1
        gl.store(y_ptr + gl.arange(0, 64), gl.arange(0, 64))
    with pytest.raises(GluonError, match=r"in early\): \[GL511\] a kernel cannot return a value"):
        early.trace(PointerArg(gl.int32), FLAG=False)


def test_a_bare_return_and_helpers_returning_values_still_trace():
    @gl.helper
    def offsets(BLOCK: gl.constexpr):
        return gl.arange(0, BLOCK)

    def plain(x):
        return x + 1

    @gluon.jit
    def ok(y_ptr, EARLY: gl.constexpr, BLOCK: gl.constexpr):
        offs = offsets(BLOCK)
        f = lambda v: v * 2  # noqa: E731 - a lambda inside the kernel may return
        gl.store(y_ptr + offs, f(plain(offs)))
        if EARLY:
            return
        return None
    assert ok.trace(PointerArg(gl.int32), EARLY=True, BLOCK=64)
    assert ok.trace(PointerArg(gl.int32), EARLY=False, BLOCK=64)


# ------------------------------------------------------------------ 5. Python constructs over GPU values


@gluon.jit
def host_constructs(y_ptr, n, WHICH: gl.constexpr):
    offs = gl.arange(0, 128)
    x = gl.load(y_ptr + offs)
    if WHICH == "max":
        gl.store(y_ptr + offs, max(x, 0.0))
    elif WHICH == "min":
        gl.store(y_ptr + offs, min(x, 1.0))
    elif WHICH == "exp":
        gl.store(y_ptr + offs, math.exp(x))
    elif WHICH == "sqrt":
        gl.store(y_ptr + offs, math.sqrt(x))
    elif WHICH == "while":
        i = 0
        while i < n:
            i += 1
    elif WHICH == "and":
        gl.store(y_ptr + offs, x, mask=offs < n and offs > 2)
    elif WHICH == "float":
        gl.store(y_ptr + offs, x * float(n))
    elif WHICH == "other":
        flag = offs < n
        assert flag
    elif WHICH == "ok":
        gl.store(y_ptr + offs, gl.sqrt(gl.exp(gl.minimum(gl.maximum(x, 0.0), 1.0))), mask=(offs < n) & (offs > 2))
        for i in range(n):
            gl.store(y_ptr + i, x.to(gl.float32) * n.to(gl.float32), mask=offs == 0)


HOST_CASES = {
    "max": ("max(x, 0.0)", "[GL505] Python's max() on a GPU value: it compares on the host and needs a Python bool; use "
                           "gl.maximum(a, b) elementwise, or gl.max(x, axis) to reduce a tile"),
    "min": ("min(x, 1.0)", "[GL505] Python's min() on a GPU value: it compares on the host and needs a Python bool; use "
                           "gl.minimum(a, b) elementwise, or gl.min(x, axis) to reduce a tile"),
    "exp": ("math.exp(x)", "[GL506] math.exp() on a GPU value: the math module computes on Python floats on the host; "
                           "use gl.exp(x)"),
    "sqrt": ("math.sqrt(x)", "[GL506] math.sqrt() on a GPU value: the math module computes on Python floats on the host; "
                             "use gl.sqrt(x)"),
    "while": ("while i < n", "[GL504] `while` over a GPU value: Python would need the condition on the host, but it exists "
                             "only on the GPU; write a `for` loop with a GPU bound (`for i in range(n):`) and mask "
                             "the elements that are done (mask= / gl.where), or make the bound a gl.constexpr"),
    "and": ("offs < n and", "[GL509] `and` on a GPU value: Python's `and` needs a Python bool; combine GPU conditions with "
                            "`&` (parenthesized: `(a < n) & (b < m)`)"),
    "float": ("float(n)", "[GL508] float() of a GPU value: it exists only on the GPU; convert with x.to(gl.float32)"),
    "other": ("assert flag", "[GL510] a GPU value was used as a Python bool: use an `if` statement directly in the kernel "
                             "body or in a @gl.helper function (they are rewritten), or gl.where(cond, a, b); common "
                             "causes: Python's max/min (use gl.maximum/gl.minimum), math.exp/math.sqrt"),
}


@pytest.mark.parametrize("which", list(HOST_CASES))
def test_python_constructs_on_gpu_values_name_the_construct_and_the_fix(which):
    text, message = HOST_CASES[which]
    with pytest.raises(GluonError) as e:
        host_constructs.trace(PointerArg(gl.float32), ScalarArg(gl.int32), WHICH=which)
    prefix = f"{HERE}:{_line_of(host_constructs, text)} (in host_constructs): {message}"
    assert str(e.value).startswith(prefix), str(e.value)


def test_the_dsl_replacements_trace():
    assert host_constructs.trace(PointerArg(gl.float32), ScalarArg(gl.int32), WHICH="ok")
