"""A compiler error at a TTGIR line names the user's line (issue 20: no MLIR error without the op and line
that produced it): the lowering records, per TTGIR line, the location of the IR op it was lowered from
(LoweredKernel.line_locs), and compile_kernel leads a CompileError with that file:line and source line.
A lowering rule is broken on purpose here (one invalid line after fma's) to make MLIR fail; CPU only."""
import pytest

import gluon
import gluon.language as gl
from gluon.backend.compile import CompileError, compile_kernel
from gluon.backend.lowering.registry import RULES
from gluon.cache import KernelCache
from gluon.jit import lower, run_passes
from gluon.language import PointerArg, ScalarArg


@gluon.jit
def _fma_kernel(out_ptr, x_ptr, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK)
    x = gl.load(x_ptr + offs, mask=offs < n)
    y = gl.fma(x, x, x)                                  # the op whose lowering is broken below
    gl.store(out_ptr + offs, y, mask=offs < n)


def _lowered():
    m = _fma_kernel.trace(PointerArg(gl.float32), PointerArg(gl.float32), ScalarArg(gl.int32), BLOCK=256, num_warps=4)
    run_passes(m)
    return lower(m)


def test_every_op_line_of_the_ttgir_knows_its_source_line():
    lk = _lowered()
    lines = lk.ttgir.splitlines()
    assert len(lk.line_locs) == len(lines)
    fma = [i + 1 for i, ln in enumerate(lines) if "math.fma" in ln]
    assert fma and all("gl.fma" in lk.loc_of_line(i).source_line() for i in fma)
    assert lk.loc_of_line(1) is None and lk.loc_of_line(len(lines)) is None and lk.loc_of_line(10 ** 6) is None


def test_an_mlir_error_names_the_op_the_failing_line_came_from(tmp_path, monkeypatch):
    good = RULES["fma"]

    def broken(lw, op):
        good(lw, op)
        lw.emit("%bogus = arith.addf %no_such_value, %no_such_value : f32")
    monkeypatch.setitem(RULES, "fma", broken)
    lk = _lowered()
    with pytest.raises(CompileError) as info:
        compile_kernel(lk, cache=KernelCache(tmp_path / "cache"))
    e = info.value
    text = str(e)
    assert e.loc is not None and "gl.fma(x, x, x)" in e.loc.source_line()
    first = text.splitlines()[0]
    assert first.startswith(f"{__file__}:{e.loc.line}") and "Triton's compiler rejected the TTGIR" in first
    assert "gl.fma(x, x, x)" in text.splitlines()[1]
    assert "undeclared SSA value" in text and "TTGIR kept at:" in text        # the compiler's own report follows


def test_an_error_without_a_recorded_line_is_left_as_it_was(tmp_path):
    from gluon.abi import LoweredKernel
    from gluon.backend.compile import at_source_line
    e = CompileError("x.ttgir:3:1: error: something", diagnostics="x.ttgir:3:1: error: something")
    assert at_source_line(e, LoweredKernel("", _lowered().abi)) is e
