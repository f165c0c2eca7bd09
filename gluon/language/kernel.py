"""A kernel function as the language sees it: a `KernelTemplate` that traces into IR.

`KernelTemplate.trace(...)` binds the parameters (`TensorRef`s, the stand-ins `PointerArg` /
`ScalarArg` / `DescArg`, a `DType`, constexpr values), runs the function as rewritten by
gluon.frontend, and returns the verified IR module. Each parameter records where a launch takes its
value from (the caller's runtime argument i, dimension d of argument i, or a keyword), and the kernel
the constexpr values it was traced with. The decorators `@gluon.kernel` / `@gluon.jit` (gluon/jit.py)
make launchable templates; the language never imports a backend.
"""
from __future__ import annotations

import builtins
import inspect
from dataclasses import dataclass
from typing import Callable, Sequence

from .. import frontend, ir
from ..arch import SM90, Arch, arch_by_name
from ..types import DType, ParamSource, SwizzleMode, TensorRef
from .control import _FrontendHelpers, _is_number
from .core import Tensor, _is_constexpr_annotation, _py_dtype, constexpr, pointer
from .memory import GlobalTensor, Pointer
from .tracing import _TRACES, KernelSyntaxError, _Trace


def _bind_problem(signature: inspect.Signature, args: tuple, kwargs: dict, error: TypeError) -> str:
    """Why the arguments do not bind, naming every missing parameter at once (inspect names the first)."""
    params = list(signature.parameters.values())
    given = {p.name for p in params[:len(args)]} | set(kwargs)
    missing = [p.name for p in params if p.default is inspect.Parameter.empty and p.name not in given
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if missing and len(args) <= len(params):
        return (f"missing {len(missing)} required argument{'s' if len(missing) > 1 else ''}: "
                + ", ".join(repr(m) for m in missing))
    return str(error)


@dataclass(frozen=True)
class PointerArg:
    """Trace-time stand-in for a pointer argument of element type `dtype`."""

    dtype: DType
    divisibility: int = 16


@dataclass(frozen=True)
class ScalarArg:
    dtype: DType = DType.i32
    divisibility: int = 1


@dataclass(frozen=True)
class DescArg:
    """Trace-time stand-in for a TMA-descriptor argument built by the host."""

    dtype: DType
    block_shape: tuple[int, ...]
    swizzle: SwizzleMode = SwizzleMode.B128


def _pointer_annotation(fn: Callable, a) -> pointer | None:
    """`a` as a `gl.pointer(...)` annotation, else None (a string one, under `from __future__ import
    annotations`, is evaluated in the kernel's module)."""
    if isinstance(a, str) and "pointer(" in a:
        try:
            a = eval(a, fn.__globals__)
        except Exception:
            return None
    return a if isinstance(a, pointer) else None


def _recursion_error(kernel: str, e: RecursionError) -> ir.GluonError:
    """Python's RecursionError out of a trace (a @gl.helper calling itself with no base case the trace
    reaches): the user's line that repeats most in the traceback, as a GluonError."""
    import collections
    import os
    import traceback
    gluon_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith(gluon_dir)]
    counts = collections.Counter((f.filename, f.lineno, f.name) for f in frames)
    loc = None
    if counts:
        (file, line, func), _ = counts.most_common(1)[0]
        loc = ir.Loc(file, line, func)
    where = f" in {loc.func}" if loc is not None else ""
    return ir.GluonError(f"[GL501] the trace of kernel {kernel} recursed without end{where}: a function calling "
                         "itself is unrolled at trace time, so it needs a base case decided by Python values "
                         "(constexprs); a GPU kernel cannot recurse at run time", loc)


def _def_line(fn: Callable) -> int:
    """The line of `def name(` (co_firstlineno points at the first decorator)."""
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return fn.__code__.co_firstlineno
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("def ", "async def ")):
            return start + i
    return start


class KernelTemplate:
    """A kernel function: `.trace(...)` gives its IR. (gluon.jit's `JITKernel` adds launching.)"""

    def __init__(self, fn: Callable, *, arch: Arch | str | None = None, num_warps: int = 4, simt: bool = False,
                 name: str | None = None):
        self.fn = fn
        self.name = name or fn.__name__
        self.arch = arch_by_name(arch) if isinstance(arch, str) else arch
        self.num_warps = num_warps
        self.simt = simt
        self.signature = inspect.signature(fn)
        self.constexprs = {n for n, p in self.signature.parameters.items()
                           if _is_constexpr_annotation(p.annotation)}
        self.pointers = {n: a.dtype for n, p in self.signature.parameters.items()
                         if (a := _pointer_annotation(fn, p.annotation)) is not None}
        self._traceable: Callable | None = None
        self.loc = ir.Loc(inspect.getsourcefile(fn) or "?", _def_line(fn), fn.__name__)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<gluon kernel {self.name} arch={self.arch} num_warps={self.num_warps}>"

    @property
    def traceable(self) -> Callable:
        if self._traceable is None:
            try:
                self._traceable = frontend.transform(self.fn, _FrontendHelpers, kernel=True)
            except frontend.ReturnValueError as e:
                raise ir.GluonError(e.msg, ir.Loc(e.filename, e.lineno, self.fn.__name__)) from None
            except frontend.FrontendError as e:
                if e.lineno is None:
                    raise
                raise KernelSyntaxError(e.msg, ir.Loc(e.filename, e.lineno, self.fn.__name__)) from None
        return self._traceable

    def trace(self, *args, arch: Arch | str | None = None, num_warps: int | None = None,
              block: Sequence[int] | None = None, **kwargs) -> ir.Module:
        """Trace with argument stand-ins: `TensorRef`s, `PointerArg`/`ScalarArg`/`DescArg`, a `DType`
        (a scalar of that type) or Python values for constexpr parameters."""
        arch = arch_by_name(arch) if isinstance(arch, str) else (arch or self.arch or SM90)
        nw = num_warps or self.num_warps
        self._check_threads(arch, nw)
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise ir.GluonError(f"kernel {self.name}: {_bind_problem(self.signature, args, kwargs, e)}",
                                self.loc) from None
        bound.apply_defaults()
        kernel = ir.Kernel(self.name, [], arch, nw, ir.Region(), {}, self.loc)
        trace = _Trace(kernel, tuple(block) if block else None)
        call_args = {}
        runtime = [n for n in self.signature.parameters if n not in self.constexprs]
        for pname, val in bound.arguments.items():
            index = runtime.index(pname) if pname in runtime else None
            call_args[pname] = self._bind_param(trace, pname, val, index)
            if pname in self.constexprs:
                kernel.constexprs[pname] = call_args[pname]
        _TRACES.append(trace)
        try:
            self.traceable(**call_args)
        except RecursionError as e:
            raise _recursion_error(self.name, e) from None
        finally:
            _TRACES.pop()
        for ws in (op for op in kernel.walk() if op.kind == "warp_specialize"):
            ws.attrs.pop("_open", None)
        # symbolic dims go last, after the user's parameters
        dims = [p for p in kernel.params if p.name in trace.dims]
        kernel.params = [p for p in kernel.params if p.name not in trace.dims] + dims
        module = ir.Module([kernel])
        module.verify()
        return module

    def _check_threads(self, arch: Arch, num_warps: int) -> None:
        """A block over the arch's thread limit fails at launch with a CUDA error far from the cause
        (or not at all in a trace), so refuse it here, at the kernel's def line. (A SIMT `block` is not
        checked: its logical threads are a tile spread over the num_warps warps, so (4096,) is fine.)"""
        limit = arch.max_threads_per_block
        warps = limit // arch.warp_size
        unit = "waves" if arch.vendor == "amd" else "warps"
        if isinstance(num_warps, bool) or not isinstance(num_warps, int) or num_warps < 1:
            raise ir.GluonError(f"kernel {self.name}: num_warps={num_warps!r}; it must be an integer 1..{warps}",
                                self.loc)
        if num_warps * arch.warp_size > limit:
            raise ir.GluonError(
                f"[GL303] kernel {self.name}: num_warps={num_warps} is {num_warps * arch.warp_size} threads per block, "
                f"but {arch.name} allows at most {limit} ({warps} {unit} of {arch.warp_size}); "
                f"use num_warps <= {warps}", self.loc)

    def _bind_param(self, trace: _Trace, pname: str, val, index: int | None):
        """The traced stand-in for parameter `pname` (the caller's runtime argument `index`), its IR
        parameter appended to the kernel."""
        k = trace.kernel
        loc = ir.Loc(self.loc.file, self.loc.line, self.name)
        if pname in self.constexprs:
            return val.value if isinstance(val, constexpr) else val
        src = ParamSource.arg(index)
        want = self.pointers.get(pname)
        if want is not None:
            val = self._annotated_pointer(pname, val, want)
        if isinstance(val, TensorRef):
            v = ir.Value(ir.PointerType(val.dtype), pname)
            k.params.append(ir.Param(pname, v, loc, divisibility=16 if val.aligned else 1, source=src))
            g = GlobalTensor(val, v, trace, index)
            trace.globals[pname] = g
            trace.globals.setdefault(val.name, g)
            return g
        if isinstance(val, PointerArg):
            v = ir.Value(ir.PointerType(val.dtype), pname)
            k.params.append(ir.Param(pname, v, loc, divisibility=val.divisibility, source=src))
            return Pointer(v)
        if isinstance(val, DescArg):
            v = ir.Value(ir.DescType(val.dtype, tuple(val.block_shape), val.swizzle), pname)
            k.params.append(ir.Param(pname, v, loc, source=src))
            ref = TensorRef(pname, val.dtype, shape=tuple(f"{pname}_dim{i}" for i in builtins.range(len(val.block_shape))))
            g = GlobalTensor(ref, v, trace, index)
            g.kind = "desc"
            trace.globals[pname] = g
            return g
        if isinstance(val, (ScalarArg, DType)):
            sa = val if isinstance(val, ScalarArg) else ScalarArg(val)
            v = ir.Value(ir.ScalarType(sa.dtype), pname)
            k.params.append(ir.Param(pname, v, loc, divisibility=sa.divisibility, source=src))
            return Tensor(v)
        if _is_number(val) or isinstance(val, bool):
            v = ir.Value(ir.ScalarType(_py_dtype(val)), pname)
            k.params.append(ir.Param(pname, v, loc, source=src))
            return Tensor(v)
        raise ir.GluonError(f"kernel {self.name}: cannot trace parameter '{pname}' from {type(val).__name__} "
                            f"{val!r}; pass a TensorRef, PointerArg, ScalarArg, DescArg or a DType", self.loc)

    def _annotated_pointer(self, pname: str, val, want: DType):
        """The stand-in for a `gl.pointer(want)` parameter: an int is an address (16-byte aligned when it
        is a multiple of 16); a pointer or tensor stand-in must point to `want`."""
        if isinstance(val, int) and not isinstance(val, bool):
            return PointerArg(want, 16 if val % 16 == 0 else 1)
        got = val.dtype if isinstance(val, (PointerArg, TensorRef)) else None
        if got is None:
            raise ir.GluonError(f"kernel {self.name}: parameter '{pname}' is annotated {pointer(want)!r}; pass a "
                                f"device address (an int), a TensorRef or a PointerArg, not {type(val).__name__}",
                                self.loc)
        if got != want:
            raise ir.GluonError(f"kernel {self.name}: parameter '{pname}' is annotated {pointer(want)!r}, but was "
                                f"given a pointer to {got.torch_name or got.name}; pass {want.torch_name or want.name} "
                                "data or change the annotation", self.loc)
        return val
