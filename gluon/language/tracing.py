"""The trace state every builtin appends to: the kernel being traced, its IR builder, the user's line.

`_tr()` is the innermost trace (calling a builtin outside a kernel being traced fails there);
`_Trace.emit` creates an op at the user's source line (`_user_loc`: the innermost frame outside the
DSL's own files) and runs the op's verifier; `_val` unwraps a traced object into its `ir.Value`.
"""
from __future__ import annotations

import enum
import operator
import os
import sys
from typing import TYPE_CHECKING

from .. import ir
from ..arch import Arch
from ..types import ParamSource

if TYPE_CHECKING:
    from .core import Tensor
    from .memory import GlobalTensor


# ---------------------------------------------------------------------------------- errors / locs

# The DSL's own files, which `_user_loc` looks past: every file of gluon/language/, and these of gluon/
# (not gluon/kernels/: those are user kernels, whose lines diagnostics name).
_LANGUAGE_DIR = os.path.dirname(__file__) + os.sep
_INTERNAL_FILES = {os.path.join(os.path.dirname(os.path.dirname(__file__)), f)
                   for f in ("dsl.py", "frontend.py", "ir.py", "ir_types.py", "ir_verify.py", "ir_print.py",
                             "types.py")}


def _user_loc() -> ir.Loc | None:
    """The innermost frame outside the DSL's own files: the user's kernel line."""
    f = sys._getframe(1)
    while f is not None and (f.f_code.co_filename in _INTERNAL_FILES or f.f_code.co_filename.startswith(_LANGUAGE_DIR)
                             or f.f_code.co_filename.endswith("contextlib.py")
                             or f.f_code.co_filename == enum.__file__):    # SwizzleMode(96) -> _missing_
        f = f.f_back
    if f is None:
        return None
    return ir.Loc(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)


class ArchError(ir.GluonError, RuntimeError):
    """An op the kernel's architecture does not have (raised at trace time, at the user's line)."""


class UndefinedValue:
    """What a name holds where the kernel's Python code has it but the GPU program does not: after a loop
    or branch that defined it on one path only, or a loop's index after the loop. Any use raises a
    GluonError at the user's line; `why` (when given) says which loop or branch left it undefined."""

    def __init__(self, name: str, loc: ir.Loc | None, why: str | None = None):
        self.name, self.loc, self.why = name, loc, why

    def _fail(self, *a, **k):
        if self.why:
            raise ir.GluonError(f"variable '{self.name}' is not defined here: {self.why}", _user_loc())
        if self.loc is None:        # not defined when a GPU loop or branch began, read in it before assigned
            raise ir.GluonError(f"variable '{self.name}' is read before it is assigned (a GPU loop or branch assigns "
                                "it later); define it before the loop/branch", _user_loc())
        raise ir.GluonError(f"variable '{self.name}' is only defined inside a GPU loop or on one side of a "
                            f"GPU branch (at {self.loc}); define it before the loop/branch", _user_loc())

    # every operator, so that `2.0 - y` fails with the message above rather than a Python TypeError
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _fail
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _fail
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = __lshift__ = __rlshift__ = _fail
    __rshift__ = __rrshift__ = __neg__ = __pos__ = __invert__ = __abs__ = _fail
    __lt__ = __le__ = __gt__ = __ge__ = _fail
    __getitem__ = __setitem__ = __iter__ = __len__ = __index__ = __int__ = __float__ = _fail
    __getattr__ = __bool__ = __call__ = _fail


UNDEF = UndefinedValue("?", None)


# ---------------------------------------------------------------------------------- trace state


_TRACES: list["_Trace"] = []


def _static_int(value, what: str) -> int:
    """`value` as a compile-time int (a shape, an arange bound, a static_range bound). A float there is
    most often a constexpr given 128.0, and Python's own TypeError would name neither it nor the line."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)       # a GPU value raises its own GluonError here
        except TypeError:
            pass
    names = [n for n, v in (_TRACES[-1].kernel.constexprs.items() if _TRACES else ())
             if type(v) is type(value) and v == value]
    fix = f"; pass {names[0]}={int(value)}" if names and isinstance(value, float) and value.is_integer() else ""
    given = f"constexpr {names[0]}={value!r}" if names else repr(value)
    raise ir.GluonError(f"[GL502] {what} must be a Python int (a compile-time size), but {given} is a "
                        f"{type(value).__name__}{fix}", _user_loc())


def _tr() -> "_Trace":
    if not _TRACES:
        raise ir.GluonError("gluon builtins can only be called inside a kernel being traced "
                            "(decorate the function with @gluon.kernel or @gluon.jit)", _user_loc())
    return _TRACES[-1]


class _Trace:
    def __init__(self, kernel: ir.Kernel, block: tuple[int, ...] | None):
        self.kernel = kernel
        self.arch: Arch = kernel.arch
        self.b = ir.Builder(kernel.body)
        self.block = block
        self.named: dict[str, Tensor] = {}
        self.named_init: dict[str, ir.Value] = {}
        self.masks: list[Tensor] = []
        self.dims: dict[str, ir.Value] = {}       # symbolic sizes (i32 parameters) by name
        self.sizes: dict[str, "Tensor"] = {}      # ... and the one Tensor each (core.size)
        self.globals: dict[str, "GlobalTensor"] = {}
        self.role_regions: list[tuple[ir.Region, int]] = []   # (region, warps) of open warp roles

    @property
    def warps(self) -> int:
        return self.role_regions[-1][1] if self.role_regions else self.kernel.num_warps

    @property
    def scope_region(self) -> ir.Region:
        """Where hoisted values (accumulator zero-init) go: the innermost warp role, else the kernel."""
        return self.role_regions[-1][0] if self.role_regions else self.kernel.body

    def emit(self, kind: str, operands=(), result_types=(), attrs=None, regions=(), names=None) -> ir.Op:
        loc = _user_loc()
        op = self.b.create(kind, [_val(o) for o in operands], list(result_types), attrs, regions, names, loc)
        opdef = ir.OPS[kind]
        if opdef.verify is not None and not op.regions:   # region ops are checked once filled
            msg = opdef.verify(op)
            if msg:
                self.b.region.ops.pop()
                raise ir.GluonError(f"{kind}: {msg}", loc)
        return op

    def require(self, family: str, opname: str) -> None:
        if not self.arch.supports(family):
            raise ArchError(f"{opname}() is not available on {self.arch.name} (the arch of kernel "
                            f"'{self.kernel.name}'); it needs an arch with '{family}'", _user_loc())

    def dim(self, name: str, source: ParamSource | None = None) -> ir.Value:
        """A symbolic size by name: an i32 kernel parameter, created on first use (`core.size` wraps it).
        A launch takes its value from `source` (a dimension of the argument whose `.shape` first named
        it), else by keyword."""
        if name not in self.dims:
            v = ir.Value(ir.I32, name)
            self.kernel.params.append(ir.Param(name, v, _user_loc(), source=source or ParamSource.keyword(name)))
            self.dims[name] = v
        return self.dims[name]


class _Handle:
    """Base of the traced objects that stand for one IR value, held in `.value`: `Tensor` (and
    `Pointer`), `Shared`, `GlobalTensor` and Hopper's `Barrier`; `_val` unwraps them into operands."""

    __slots__ = ()


def _val(x) -> ir.Value:
    if isinstance(x, ir.Value):
        return x
    if isinstance(x, _Handle):
        return x.value
    if isinstance(x, UndefinedValue):
        x._fail()
    raise ir.GluonError(f"expected a GPU value, got {type(x).__name__} {x!r}", _user_loc())


class KernelSyntaxError(ir.GluonError, SyntaxError):
    """A construct the frontend cannot rewrite (`break` in a GPU loop), at its line: a GluonError like every
    diagnostic, and still the SyntaxError (with .lineno / .filename) the frontend raised before."""

    def __init__(self, message: str, loc: ir.Loc):
        super().__init__(message, loc)
        self.msg, self.filename, self.lineno = str(self), loc.file, loc.line
