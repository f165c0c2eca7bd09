"""Tracing: the Quick Start, the copy kernel, control flow, and diagnostics that name the user's line."""
import os
import re
import subprocess
import sys

import pytest

import gluon
import gluon.language as gl
from gluon import SM80, SM90, DType, Layout, SwizzleMode, TensorRef
from gluon.ir import GluonError
from gluon.language import PointerArg, ScalarArg, mbarrier, mfma, smem, tma_load, wgmma

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.abspath(__file__)


def _line_of(text: str) -> int:
    with open(HERE) as f:
        for i, line in enumerate(f, 1):
            if text in line and "_line_of" not in line:
                return i
    raise AssertionError(text)


def test_quickstart_runs_verbatim_and_prints_ir():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "quickstart.py")],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("kernel @my_gemm(")
    assert "warp_specialize" in out and "role producer warps[0, 3]" in out and "role consumer warps[4, 7]" in out
    assert out.count("tma_load %A") == 1 and out.count("tma_load %B") == 1
    assert "wgmma %A_tile, %B_tile" in out
    # the named accumulator is carried through the consumer loop
    assert "tile<128x256xf32, wgmma(" in out and "yield %acc" in out
    # "K" became an i32 parameter
    assert "%K: i32" in out.splitlines()[0]


@gluon.jit
def copy_kernel(dst_ptr, src_ptr, n_elements, XBLOCK: gl.constexpr):
    idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
    if idx < n_elements:
        dst_ptr[idx] = src_ptr[idx]


def _trace_copy(**kw):
    return copy_kernel.trace(PointerArg(DType.f32), PointerArg(DType.f32), ScalarArg(DType.i32, 16),
                             XBLOCK=2048, block=(2048,), arch=SM90, **kw)


def test_simt_copy_becomes_masked_tile_ops():
    k = _trace_copy().kernel
    kinds = [op.kind for op in k.walk()]
    assert "if" not in kinds                          # a per-thread condition masks, it does not branch
    load = next(op for op in k.walk() if op.kind == "load")
    store = next(op for op in k.walk() if op.kind == "store")
    assert load.attrs["has_mask"] and store.attrs["has_mask"]
    assert load.results[0].type.shape == (2048,)
    assert store.operands[3] is load.operands[2]     # the same mask guards both
    assert store.loc.line == _line_of("dst_ptr[idx] = src_ptr[idx]")


def test_thread_id_needs_block():
    with pytest.raises(GluonError, match="launch block shape"):
        copy_kernel.trace(PointerArg(DType.f32), PointerArg(DType.f32), ScalarArg(DType.i32), XBLOCK=2048, arch=SM90)


@gluon.jit
def loops_and_branches(out_ptr, n, ITERS: gl.constexpr):
    acc = gl.zeros((128,), gl.float32)
    total = gl.full((), 0, gl.int32)
    for i in range(n):
        acc = acc + i
        if i > 3:
            total = total + 1
        else:
            total = total + 2
    for j in gl.static_range(ITERS):
        acc = acc * 2.0
    offs = gl.arange(0, 128)
    gl.store(out_ptr + offs, acc + total)


def test_loop_carried_locals_and_scalar_branch():
    k = loops_and_branches.trace(PointerArg(DType.f32), ScalarArg(DType.i32), ITERS=2, arch=SM90).kernel
    loop = next(op for op in k.body.ops if op.kind == "for")
    carried = [v.type for v in loop.results]
    assert len(carried) == 2                                   # acc and total, nothing else
    assert {str(t) for t in carried} == {"tile<128xf32>", "i32"}
    branch = next(op for op in loop.regions[0].ops if op.kind == "if")
    assert [str(v.type) for v in branch.results] == ["i32"]
    muls = [op for op in k.body.ops if op.kind == "binary" and op.attrs["op"] == "mul"]
    assert len(muls) == 2                                      # static_range unrolled


@gluon.jit
def changes_python_number(out_ptr, n):
    x = 0
    for i in range(n):
        x = x + i
    out_ptr[0] = x


def test_python_number_changed_in_gpu_loop_is_an_error():
    with pytest.raises(GluonError) as e:
        changes_python_number.trace(PointerArg(DType.i32), ScalarArg(DType.i32), arch=SM90)
    assert "'x'" in str(e.value) and "test_dsl.py" in str(e.value)


@gluon.jit
def break_in_gpu_loop(out_ptr, n):
    for i in range(n):
        if i > 2:
            break
        out_ptr[i] = i


def test_break_in_gpu_loop_is_rejected_with_line():
    with pytest.raises(SyntaxError) as e:
        break_in_gpu_loop.trace(PointerArg(DType.i32), ScalarArg(DType.i32), arch=SM90)
    assert e.value.lineno == _line_of("            break")


@gluon.kernel(arch=SM80, num_warps=4)
def wgmma_on_sm80(A, B):
    a = smem(DType.f16, Layout.swizzled(64, 64), name="a")
    b = smem(DType.f16, Layout.swizzled(64, 64), name="b")
    wgmma(a, b, "acc")  # needs sm90


def test_arch_gating_names_op_arch_and_line():
    with pytest.raises(RuntimeError) as e:
        wgmma_on_sm80.trace(TensorRef("A", DType.f16, shape=(64, 64)), TensorRef("B", DType.f16, shape=(64, 64)))
    msg = str(e.value)
    assert "wgmma()" in msg and "sm80" in msg
    line = _line_of('"acc")  # needs sm90')
    assert f"test_dsl.py:{line}" in msg


@gluon.kernel(arch=SM90, num_warps=4)
def mfma_on_nvidia(A):
    x = gl.zeros((32, 32), gl.float16)
    mfma(x, x, "acc")


def test_mfma_on_nvidia_raises():
    with pytest.raises(RuntimeError, match=r"mfma\(\) is not available on sm90"):
        mfma_on_nvidia.trace(TensorRef("A", DType.f16, shape=(32, 32)))


@gluon.kernel(arch=SM90, num_warps=4)
def mismatched_dot(A):
    a = smem(DType.f16, Layout.swizzled(128, 64), name="a")
    b = smem(DType.f16, Layout.swizzled(32, 128, SwizzleMode.B64), name="b")
    wgmma(a, b, "acc")


@gluon.kernel(arch=SM90, num_warps=4)
def mixed_dtype_dot(A):
    a = smem(DType.f16, Layout.swizzled(128, 64), name="a")
    b = smem(DType.bf16, Layout.swizzled(64, 128), name="b")
    wgmma(a, b, "acc")


def test_dot_shape_and_dtype_mismatch():
    ref = TensorRef("A", DType.f16, shape=(64, 64))
    with pytest.raises(GluonError, match=r"inner dimensions differ: A is 128x64 and B is 32x128") as e:
        mismatched_dot.trace(ref)
    assert "wgmma(a, b, \"acc\")" in str(e.value)
    with pytest.raises(GluonError, match="A is f16 but B is bf16"):
        mixed_dtype_dot.trace(ref)


@gluon.kernel(arch=SM90, num_warps=4)
def wide_tma_box(A):
    a = smem(DType.f16, Layout.swizzled(64, 128, SwizzleMode.B128), name="a")
    bar = mbarrier(name="bar")
    tma_load(a, A, (0, 0), bar, box=(64, 128))


def test_tma_box_wider_than_swizzle_is_rejected_by_layout_check():
    module = wide_tma_box.trace(TensorRef("A", DType.f16, shape=("M", "K")))
    from gluon.jit import run_passes
    with pytest.raises(GluonError) as e:
        run_passes(module)
    msg = str(e.value)
    assert "256 bytes, wider than the 128-byte swizzle" in msg and "at most 64" in msg
    assert f"test_dsl.py:{_line_of('box=(64, 128))')}" in msg


@gluon.kernel(arch=SM90, num_warps=4)
def narrow_tma_box(A):
    a = smem(DType.f16, Layout.swizzled(64, 64, SwizzleMode.NONE), name="a")
    bar = mbarrier(name="bar")
    tma_load(a, A, (0, 0), bar, box=(64, 4))


def test_tma_box_rules_are_the_hardwares_one_rule():
    """The layout pass checks a declared box with arch.tma_box_problem, the rule the ABI and the runtime use:
    an 8-byte inner box (4 f16, no swizzle) is refused before the GPU, where cuTensorMapEncodeTiled would."""
    from gluon.jit import run_passes
    with pytest.raises(GluonError, match=r"TMA box \(64, 4\) .*8 bytes; TMA needs a multiple of 16"):
        run_passes(narrow_tma_box.trace(TensorRef("A", DType.f16, shape=("M", "K"))))


def test_builtin_outside_kernel():
    with pytest.raises(GluonError, match="inside a kernel"):
        gl.program_id(0)


def _sized_kernel(hint):
    @gluon.kernel(arch=SM90, num_warps=4)
    def k(X, Y):
        n = X.shape[1]
        hint(n)
        offs = gl.arange(0, 128)
        gl.store(Y + offs, gl.load(X + offs * n))
    return k.trace(TensorRef("X", DType.f16, shape=("M", "N")), TensorRef("Y", DType.f16, shape=("L",)))


def test_multiple_of_marks_the_size_parameter_for_the_launcher():
    from gluon.backend.lowering import lower_module
    from gluon.jit import run_passes
    module = _sized_kernel(lambda n: gl.multiple_of(n, 16))
    assert {p.name: p.divisibility for p in module.kernels[0].params}["N"] == 16
    assert re.search(r"%\w+: i32 \{tt.divisibility = 16 : i32\}", lower_module(run_passes(module)).ttgir)
    plain = _sized_kernel(lambda n: None)
    assert {p.name: p.divisibility for p in plain.kernels[0].params}["N"] == 1


@pytest.mark.parametrize("hint,match", [
    (lambda n: gl.multiple_of(n * 2, 16), "applies to an integer kernel parameter or a symbolic size"),
    (lambda n: gl.multiple_of(n, 8), r"only 16 is supported"),
])
def test_multiple_of_errors(hint, match):
    with pytest.raises(GluonError, match=match):
        _sized_kernel(hint)


@pytest.mark.parametrize("name,call", [
    ("set_tma_prefetch", lambda: gl.set_tma_prefetch()),
    ("set_lean_prologue", lambda: gl.set_lean_prologue()),
    ("split_cols", lambda: gl.split_cols(gl.zeros((64, 64), gl.float32, layout=Layout.mma((4, 1))))),
])
def test_sm90_builtins_say_the_arch_lacks_them(name, call):
    """The SM90-only builtins (TMA, WGMMA and the PTX passes built on them) refuse an sm80 kernel by name."""
    @gluon.kernel(arch=SM80, num_warps=4)
    def k(A):
        call()

    with pytest.raises(GluonError, match=rf"{name}\(\) is not available on sm80"):
        k.trace(TensorRef("A", DType.f16, shape=("M", "K")))


def test_gluon_dsl_re_exports_the_language():
    """`gluon.dsl`, where the language used to live (the seed's `from gluon.dsl import ...`), gives the very
    objects of gluon.language: every builtin and class of the flat namespace, and the rest it had."""
    import gluon.dsl as dsl
    jit_module = sys.modules["gluon.jit"]      # `gluon.jit` the attribute is the decorator
    from gluon.language import kernel as kernel_module, memory, tracing

    names = [n for n, v in vars(gl).items()
             if not n.startswith("_") and getattr(v, "__module__", "").startswith("gluon.language.")]
    assert len(names) > 60 and [n for n in names if getattr(dsl, n, None) is not getattr(gl, n)] == []
    assert (dsl.kernel, dsl.jit, dsl.KernelTemplate) == (jit_module.kernel, jit_module.jit,
                                                         kernel_module.KernelTemplate)
    assert (dsl.GlobalTensor, dsl.PtrOffset, dsl.ArchError, dsl.UNDEF) == (memory.GlobalTensor, memory.PtrOffset,
                                                                           tracing.ArchError, tracing.UNDEF)
    assert gluon.dsl is dsl and gluon.kernel is dsl.kernel
