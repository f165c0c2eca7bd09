"""Names across a GPU `if` (gluon.frontend + language/control.py): what flows out of the branches.

The rule (Triton's): a GPU `if` yields the names that hold GPU values of one type after both branches
(assigned in both, or in one and defined before the `if`). A loop index, or a name only one branch
defines, is not yielded: it is undefined after the `if`, which is an error only where the kernel uses
it, and that error names the variable, the branch that lacks it and both lines. The first kernels are
the repros of docs/NORM_KERNELS.md "DSL notes"; each traces, verifies and compiles for sm90 on the CPU.
"""
import os

import pytest

import gluon
import gluon.language as gl
from gluon import SM90, DType
from gluon.ir import GluonError
from gluon.language import PointerArg, ScalarArg

HERE = os.path.abspath(__file__)
F32 = PointerArg(DType.f32)
I32 = ScalarArg(DType.i32)


def _line_of(text: str) -> int:
    with open(HERE) as f:
        for i, line in enumerate(f, 1):
            if text in line and "_line_of" not in line:
                return i
    raise AssertionError(text)


def _trace(kernel, *args, **kw):
    return kernel.trace(*args, arch=SM90, num_warps=4, **kw).verify()


def _kinds(region) -> list[str]:
    return [op.kind for op in region.ops]


def _stored_constants(region) -> list:
    """The constants that `store` ops in `region` (and regions inside it) write."""
    consts = {op.results[0]: op.attrs["value"] for op in region.walk() if op.kind == "constant"}
    return [consts.get(op.operands[2]) for op in region.walk() if op.kind == "store"]


# ------------------------------------------------------------------ the reported repros


@gluon.jit
def only_in_else(out_ptr, flag):
    if flag > 0:
        out_ptr[0] = 1.0
    else:
        y = 2.0
        out_ptr[0] = y


@gluon.jit
def loop_in_both(out_ptr, n, flag):
    if flag > 0:
        for i in range(0, n):
            out_ptr[i] = 1.0
    else:
        for i in range(0, n):
            out_ptr[i] = 2.0


@gluon.jit
def loop_index_reused(out_ptr, n, flag):
    """Issue 19: `j` is a loop index before the `if`, inside one branch and after it."""
    for j in range(0, n):
        out_ptr[j] = 0.0
    if flag > 0:
        for j in range(0, n):
            out_ptr[j] = 1.0
    for j in range(0, n):
        out_ptr[j + n] = 2.0


def test_name_bound_only_in_else_branch_traces():
    k = _trace(only_in_else, F32, I32).kernel
    (branch,) = [op for op in k.body.ops if op.kind == "if"]
    assert branch.results == []                        # `y` is local to the else-branch: nothing is yielded
    then, orelse = branch.regions
    assert _stored_constants(then) == [1.0] and _stored_constants(orelse) == [2.0]


def test_same_loop_index_on_both_sides_of_an_if():
    k = _trace(loop_in_both, F32, I32, I32).kernel
    (branch,) = [op for op in k.body.ops if op.kind == "if"]
    assert branch.results == []                        # the index `i` is not yielded
    then, orelse = branch.regions
    assert _kinds(then).count("for") == 1 and _kinds(orelse).count("for") == 1
    assert _stored_constants(then) == [1.0] and _stored_constants(orelse) == [2.0]


def test_loop_index_reused_before_in_and_after_an_if():
    k = _trace(loop_index_reused, F32, I32, I32).kernel
    assert _kinds(k.body).count("for") == 2
    (branch,) = [op for op in k.body.ops if op.kind == "if"]
    assert branch.results == [] and _kinds(branch.regions[0]).count("for") == 1


@pytest.mark.parametrize("kernel,args,loops", [
    (only_in_else, (F32, I32), 0),
    (loop_in_both, (F32, I32, I32), 2),
    (loop_index_reused, (F32, I32, I32), 3),
])
def test_repros_compile_for_sm90(kernel, args, loops):
    ck = kernel.compile(*args, arch="sm90", num_warps=4)
    assert ck.ttgir.count("scf.if") == 1 and ck.ttgir.count("scf.for") == loops
    assert ".target sm_90" in ck.asm["ptx"]


# ------------------------------------------------------------------ branch-local temporaries just work


@gluon.jit
def branch_locals(out_ptr, n, flag, ROUNDS: gl.constexpr):
    if flag > 0:
        scale = 2.0                                     # a Python number per branch, used only inside it
        for k in gl.static_range(ROUNDS):               # a Python int index, in one branch only
            out_ptr[k] = scale
        t = gl.full((), 1, gl.int32)                    # i32 here ...
        out_ptr[n] = t.to(gl.float32)
    else:
        scale = 3.0
        t = gl.full((), 1.0, gl.float32)                # ... f32 here
        out_ptr[n] = t * scale


def test_branch_local_temporaries_of_any_kind_are_not_yielded():
    k = _trace(branch_locals, F32, I32, I32, ROUNDS=2).kernel
    (branch,) = [op for op in k.body.ops if op.kind == "if"]
    assert branch.results == []
    assert _stored_constants(branch.regions[0])[:2] == [2.0, 2.0]


@gluon.jit
def yields_what_both_sides_define(out_ptr, flag):
    a = gl.full((), 0.0, gl.float32)
    if flag > 0:
        a = a + 1.0                                     # assigned in one branch, defined before: yielded
        b = gl.full((), 1.0, gl.float32)                # assigned in both: yielded
        c = 5
    else:
        b = gl.full((), 2.0, gl.float32)
        c = 5                                           # the same Python value on both sides: kept
    out_ptr[0] = a + b + c


def test_names_defined_on_both_paths_are_yielded():
    k = _trace(yields_what_both_sides_define, F32, I32).kernel
    (branch,) = [op for op in k.body.ops if op.kind == "if"]
    assert [str(v.type) for v in branch.results] == ["f32", "f32"]


@gluon.jit
def masked_one_side(dst_ptr, src_ptr, n, XBLOCK: gl.constexpr):
    idx = gl.program_id(0) * XBLOCK + gl.arange(0, XBLOCK)
    if idx < n:
        v = src_ptr[idx]
        dst_ptr[idx] = v * 2.0
    else:
        w = gl.full((XBLOCK,), 0.0, gl.float32)
        dst_ptr[idx] = w


def test_per_thread_condition_with_a_name_on_one_side_traces():
    k = _trace(masked_one_side, F32, F32, I32, XBLOCK=128).kernel
    assert "if" not in [op.kind for op in k.walk()]
    assert "select" not in [op.kind for op in k.walk()]   # nothing to merge: v and w are branch-local


# ------------------------------------------------------------------ using such a name after the `if` is an error


@gluon.jit
def used_after_then_only(out_ptr, flag):
    if flag > 0:
        y = gl.full((), 1.0, gl.float32)
    else:
        out_ptr[1] = 1.0
    out_ptr[0] = y                                      # y: only the then-branch defines it


def test_name_from_one_branch_used_after_the_if_names_variable_branch_and_lines():
    with pytest.raises(GluonError) as e:
        _trace(used_after_then_only, F32, I32)
    use = _line_of("# y: only the then-branch defines it")
    if_line = use - 4
    assert str(e.value) == (
        f"{HERE}:{use} (in used_after_then_only): variable 'y' is not defined here: it is defined after the "
        f"then-branch of the GPU `if` at {HERE}:{if_line} but not after the else-branch, which does not assign it "
        "(and it is not defined before the `if`); assign it before the `if` or in both branches\n"
        "    out_ptr[0] = y                                      # y: only the then-branch defines it")


@gluon.jit
def masked_used_after(dst_ptr, src_ptr, n, XBLOCK: gl.constexpr):
    idx = gl.program_id(0) * XBLOCK + gl.arange(0, XBLOCK)
    if idx < n:
        v = src_ptr[idx]
    dst_ptr[idx] = v                                    # v: per-thread condition, then-branch only


def test_per_thread_condition_name_from_one_side_used_after_is_an_error():
    with pytest.raises(GluonError) as e:
        _trace(masked_used_after, F32, F32, I32, XBLOCK=128)
    use = _line_of("# v: per-thread condition, then-branch only")
    assert str(e.value).startswith(
        f"{HERE}:{use} (in masked_used_after): variable 'v' is not defined here: it is defined after the then-branch "
        f"of the GPU `if` at {HERE}:{use - 2} but not after the else-branch")


@gluon.jit
def index_used_after_if(out_ptr, n, flag):
    i = gl.full((), 0, gl.int32)
    if flag > 0:
        for i in range(0, n):
            out_ptr[i] = 1.0
    out_ptr[i] = 2.0                                    # i: the loop index in the then-branch


def test_loop_index_used_after_an_if_says_it_is_a_loop_index():
    with pytest.raises(GluonError) as e:
        _trace(index_used_after_if, F32, I32, I32)
    use = _line_of("# i: the loop index in the then-branch")
    msg = str(e.value)
    assert msg.startswith(f"{HERE}:{use} (in index_used_after_if): variable 'i' is not defined here: ")
    assert (f"it is defined after the else-branch of the GPU `if` at {HERE}:{use - 3} but not after the then-branch, "
            f"where it is the index of the GPU loop at {HERE}:{use - 2}, which exists only inside that loop") in msg


@gluon.jit
def index_used_after_loop(out_ptr, n):
    for i in range(0, n):
        out_ptr[i] = 1.0
    out_ptr[i] = 2.0                                    # after the loop


@gluon.jit
def with_index_used_after_loop(out_ptr, n):
    with gl.for_range(0, n) as k:
        out_ptr[k] = 1.0
    out_ptr[k] = 2.0                                    # after the with-loop


@pytest.mark.parametrize("kernel,name,marker", [
    (index_used_after_loop, "i", "# after the loop"),
    (with_index_used_after_loop, "k", "# after the with-loop"),
])
def test_loop_index_after_its_loop_is_an_error_not_a_verifier_failure(kernel, name, marker):
    with pytest.raises(GluonError) as e:
        _trace(kernel, F32, I32)
    use = _line_of(marker)
    assert str(e.value).startswith(f"{HERE}:{use} (in {kernel.fn.__name__}): ")
    assert (f"variable '{name}' is not defined here: it is the index of the GPU loop at {HERE}:{use - 2}, "
            "which exists only inside that loop") in str(e.value)


@gluon.jit
def python_number_changed(out_ptr, flag):
    scale = 1.0
    if flag > 0:
        scale = 2.0
    out_ptr[0] = 2.0 - scale                            # scale: differs per branch


def test_python_number_changed_by_a_gpu_if_fails_where_used():
    with pytest.raises(GluonError) as e:
        _trace(python_number_changed, F32, I32)
    use = _line_of("# scale: differs per branch")
    assert str(e.value).startswith(f"{HERE}:{use} (in python_number_changed): variable 'scale' is not defined here: "
                                   f"it is a Python value that the GPU `if` at {HERE}:{use - 2} changes (2.0 after "
                                   "the then-branch, 1.0 after the else-branch)")


# ------------------------------------------------------------------ the constexpr `if` stays Python


@gluon.jit
def constexpr_if(out_ptr, FLAG: gl.constexpr):
    if FLAG:
        y = 1.0
    out_ptr[0] = y


def test_constexpr_if_keeps_python_semantics():
    k = _trace(constexpr_if, F32, FLAG=True).kernel
    assert "if" not in [op.kind for op in k.walk()] and _stored_constants(k.body) == [1.0]
    with pytest.raises(UnboundLocalError):
        _trace(constexpr_if, F32, FLAG=False)


# ------------------------------------------------------------------ a loop's name written on every path


@gluon.jit
def written_under_two_constexpr_ifs(out_ptr, n, AHEAD: gl.constexpr, AFTER: gl.constexpr):
    lay = gl.Layout.blocked([1], [32], [4], [0])
    acc = gl.zeros((128,), gl.float32, layout=lay)
    for i in range(n):
        if AHEAD:
            x = gl.full((128,), 1.0, gl.float32, layout=lay)
        if not AHEAD:
            x = gl.full((128,), 2.0, gl.float32, layout=lay)
        acc = acc + x
    if AFTER:
        acc = acc + x                                       # x: used after the loop
    gl.store(out_ptr + gl.arange(0, 128, layout=lay), acc)


@gluon.jit
def read_before_written_in_a_loop(out_ptr, n):
    lay = gl.Layout.blocked([1], [32], [4], [0])
    for i in range(n):
        y = x + 1.0  # noqa: F821                           # x: read before the loop assigns it
        x = gl.full((128,), 1.0, gl.float32, layout=lay)  # noqa: F841
        gl.store(out_ptr + gl.arange(0, 128, layout=lay), y)


def test_a_name_the_loop_writes_on_every_path_it_takes_is_loop_local():
    """`if A: x = ...` then `if not A: x = ...` (constexpr A) and a read: the static liveness cannot tell the two
    ifs apart, so it marks x as maybe read before written; the trace sees it written first and keeps it inside
    the loop (it used to refuse the kernel: "assigned a GPU value inside the loop but was undefined before it")."""
    import torch
    out = torch.zeros(128)
    for ahead, want in ((True, 3.0), (False, 6.0)):
        written_under_two_constexpr_ifs.interpret((1,), out, 3, AHEAD=ahead, AFTER=False)
        assert torch.all(out == want)


def test_a_loop_local_name_used_after_the_loop_names_the_loop():
    with pytest.raises(GluonError) as e:
        _trace(written_under_two_constexpr_ifs, F32, I32, AHEAD=True, AFTER=True)
    use, loop = _line_of("# x: used after the loop"), _line_of("acc = gl.zeros((128,), gl.float32, layout=lay)") + 1
    assert str(e.value).startswith(f"{HERE}:{use} (in written_under_two_constexpr_ifs): variable 'x' is not defined "
                                   f"here: it is assigned inside the GPU loop at {HERE}:{loop} and not before it")


def test_a_name_read_before_the_loop_assigns_it_says_so_at_the_read():
    with pytest.raises(GluonError) as e:
        _trace(read_before_written_in_a_loop, F32, I32)
    read = _line_of("# x: read before the loop assigns it")
    assert str(e.value).startswith(f"{HERE}:{read} (in read_before_written_in_a_loop): variable 'x' is read before "
                                   "it is assigned")


# ------------------------------------------------------------------ helpers with GPU control flow


@gl.helper
def _fill(out_ptr, n, flag, value):
    """A helper with a GPU `if` and loop, and a value computed in the branch."""
    total = gl.full((), 0.0, gl.float32)
    if flag > 0:
        for i in range(0, n):
            out_ptr[i] = value
        total = total + value
    return total


@gluon.jit
def calls_helper(out_ptr, n, flag):
    s = _fill(out_ptr, n, flag, 1.0)
    out_ptr[n] = s + _fill(out_ptr, n, n, 2.0)


def _plain_helper(out_ptr, flag):
    if flag > 0:                                        # a GPU condition in an undecorated helper
        out_ptr[0] = 1.0


@gluon.jit
def calls_plain_helper(out_ptr, flag):
    _plain_helper(out_ptr, flag)


def test_helper_holds_gpu_branches_and_loops():
    k = _trace(calls_helper, F32, I32, I32).kernel
    branches = [op for op in k.body.ops if op.kind == "if"]
    assert len(branches) == 2 and all(len(b.results) == 1 for b in branches)    # `total` flows out
    assert all(_kinds(b.regions[0]).count("for") == 1 for b in branches)
    ck = calls_helper.compile(F32, I32, I32, arch="sm90", num_warps=4)
    assert ck.ttgir.count("scf.if") == 2 and ck.ttgir.count("scf.for") == 2


def test_gpu_condition_in_a_plain_helper_points_at_gl_helper():
    with pytest.raises(GluonError) as e:
        _trace(calls_plain_helper, F32, I32)
    assert str(e.value).startswith(f"{HERE}:{_line_of('# a GPU condition in an undecorated helper')} (in _plain_helper)")
    assert "@gl.helper" in str(e.value)


# ------------------------------------------------------------------ on a GPU


@pytest.mark.gpu
def test_repros_compute_the_expected_values():
    torch = pytest.importorskip("torch")
    from conftest import skip_unless_sm90
    skip_unless_sm90("the kernel")
    n = 5
    for flag, first in ((1, 1.0), (0, 2.0)):
        out = torch.zeros(1, device="cuda")
        only_in_else[(1,)](out, flag)
        torch.cuda.synchronize()
        assert out.tolist() == [first]
        out = torch.zeros(n, device="cuda")
        loop_in_both[(1,)](out, n, flag)
        torch.cuda.synchronize()
        assert out.tolist() == [first] * n
        out = torch.full((2 * n,), -1.0, device="cuda")
        loop_index_reused[(1,)](out, n, flag)
        torch.cuda.synchronize()
        assert out.tolist() == [1.0 if flag else 0.0] * n + [2.0] * n
        out = torch.zeros(n + 1, device="cuda")
        calls_helper[(1,)](out, n, flag)
        torch.cuda.synchronize()
        assert out.tolist() == [2.0] * n + [3.0 if flag else 2.0]


# ------------------------------------------------------------------ jumps out of GPU loops and branches


@gluon.jit
def static_break_in_gpu_branch(out_ptr, flag):
    if flag > 0:
        for i in gl.static_range(4):          # runs in Python while tracing: its break is Python's
            if i == 2:
                break
            out_ptr[i] = 1.0


@gluon.jit
def nested_def_returns_in_gpu_loop(out_ptr, n):
    for i in range(0, n):
        def half(x):
            return x * 0.5
        scale = (lambda y: y + 1.0)
        out_ptr[i] = scale(half(2.0))


@gluon.jit
def return_in_static_loop_in_gpu_branch(out_ptr, flag):
    if flag > 0:
        for i in gl.static_range(2):
            out_ptr[i] = 1.0
            return                          # leaves the kernel from inside a GPU branch


def test_a_static_loops_break_inside_a_gpu_branch_is_python():
    k = _trace(static_break_in_gpu_branch, F32, I32).kernel
    (branch,) = [op for op in k.body.ops if op.kind == "if"]
    assert [op.kind for op in branch.regions[0].walk()].count("store") == 2


def test_returns_of_nested_functions_inside_a_gpu_loop_are_theirs():
    k = _trace(nested_def_returns_in_gpu_loop, F32, I32).kernel
    assert "for" in _kinds(k.body)


def test_a_return_inside_a_gpu_branch_is_refused_even_in_a_nested_loop():
    with pytest.raises(GluonError, match="'return' inside a branch over GPU values") as e:
        _trace(return_in_static_loop_in_gpu_branch, F32, I32)
    assert f"test_frontend_branches.py:{_line_of('# leaves the kernel from inside')}" in str(e.value)


_CHAIN = 30


def _elif_chain_kernel():
    """A kernel whose body is a 30-branch if/elif chain on a constexpr, then a 3-way chain on a GPU scalar."""
    lines = ["def chain(x_ptr, n, C: gl.constexpr):", "    offs = gl.arange(0, 128)", "    x = gl.load(x_ptr + offs)",
             "    if C == 0:", "        x = x + 0"]
    for i in range(1, _CHAIN):
        lines += [f"    elif C == {i}:", f"        x = x + {i}"]
    lines += ["    else:", "        x = x * 2", "    if n > 3:", "        x = x + 100", "    elif n > 2:",
              "        x = x - 100", "    else:", "        x = x * 3", "    gl.store(x_ptr + offs, x)"]
    import tempfile
    path = os.path.join(tempfile.mkdtemp(), "elif_chain_kernel.py")
    with open(path, "w") as f:
        f.write("import gluon.language as gl\n" + "\n".join(lines) + "\n")
    import importlib.util
    spec = importlib.util.spec_from_file_location("elif_chain_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return gluon.jit(mod.chain)


def test_a_long_elif_chain_traces_in_linear_size():
    """Each branch body is written once in the rewritten code (it was copied for the static and the GPU form
    at every level: 2^30 here); and the chain takes the branch Python would (checked in the interpreter)."""
    import time
    torch = pytest.importorskip("torch")
    k = _elif_chain_kernel()
    t0 = time.perf_counter()
    k.trace(PointerArg(gl.float32), ScalarArg(gl.int32), C=17, arch="sm90", num_warps=4)
    assert time.perf_counter() - t0 < 10
    for C, n, want in ((17, 5, lambda x: x + 17 + 100), (0, 3, lambda x: x - 100), (_CHAIN + 3, 1, lambda x: x * 6)):
        x = torch.randn(128)
        y = x.clone()
        k.interpret((1,), y, n, C=C)
        assert torch.allclose(y, want(x)), (C, n)
