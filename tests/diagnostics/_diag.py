"""Shared helpers of tests/diagnostics/: trace a wrong kernel, run the passes, and check that exactly one
GluonError comes out with the expected code at the expected line of the kernel's source."""
import inspect

import pytest

from gluon import DType, TensorRef
from gluon.ir import GluonError
from gluon.jit import run_passes


def line_of(fn, text: str) -> int:
    """The line of fn's source file that holds `text` inside fn's source."""
    fn = getattr(fn, "fn", fn)
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


def gemm_refs(out=DType.f16):
    return (TensorRef("A", DType.f16, shape=("M", "K")), TensorRef("B", DType.f16, shape=("K", "N")),
            TensorRef("C", out, shape=("M", "N")), DType.i32)


def expect_error(kern, args, code: str, text: str, **kw) -> GluonError:
    """Tracing `kern` with `args` and running the passes raises a GluonError (nothing else) whose message
    starts with [code] and whose location is the line of kern's source holding `text`."""
    with pytest.raises(GluonError) as e:
        run_passes(kern.trace(*args, **kw))
    err = e.value
    fn = getattr(kern, "fn", kern)
    assert err.message.startswith(f"[{code}] "), str(err)
    assert err.loc is not None and err.loc.line == line_of(fn, text), (str(err), line_of(fn, text))
    assert err.loc.file == inspect.getsourcefile(fn), str(err)
    assert str(err).startswith(f"{err.loc.file}:{err.loc.line} "), str(err)
    return err


def passes(kern, args, **kw):
    return run_passes(kern.trace(*args, **kw))


def expect_warning(kern, args, code: str, text: str, **kw):
    """Tracing `kern` and running the passes warns (a GluonWarning whose message starts with [code]) at the
    line of kern's source holding `text`, and raises nothing."""
    import warnings

    from gluon.passes.bank_conflicts import GluonWarning
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        run_passes(kern.trace(*args, **kw))
    fn = getattr(kern, "fn", kern)
    ours = [w for w in got if issubclass(w.category, GluonWarning) and f"[{code}] " in str(w.message)]
    assert ours, [str(w.message) for w in got]
    assert ours[0].lineno == line_of(fn, text) and ours[0].filename == inspect.getsourcefile(fn), str(ours[0].message)
    return ours[0]
