"""A declared kernel's [args], [launch] and [problem] tables: the tuning problem of a `@gluon.jit` function
written in the spec instead of a Python template.

    [kernel]
    name = "softmax"
    function = "examples/softmax_kernel.py:softmax_kernel"    # the @gluon.jit kernel (module:fn or file.py:fn)
    arch = "sm90"
    dims = ["M", "N"]                                         # what a shape's numbers are called

    [args]                                  # every runtime parameter of the kernel, by name
    out = { tensor = ["M", "N"], output = true }              # an output: poisoned with NaN before the run
    x = { tensor = ["M", "N"], fill = "normal" }              # an input; dtype: the trial's unless given
    n_cols = "N"                                              # a scalar: an expression, or a number

    [launch]
    grid = ["cdiv(M, ROWS)"]                                  # expressions over dims, params, constexprs
    num_warps = "NUM_WARPS"
    constexprs = { BLOCK_N = "next_power_of_2(N)" }           # computed constexprs (tuned ones: [params])
    requires = ["BLOCK_N <= 16384"]                           # per shape; a config failing one is pruned there

    [problem]
    reference = "torch.softmax(x.float(), dim=-1)"            # a torch expression, or module:fn / file.py:fn
    baseline = "torch.softmax(x, dim=-1)"
    flops = "5 * M * N"                                       # over dims
    bytes = "2 * M * N * itemsize"                            # over dims and itemsize (the trial dtype's size)

Size expressions (shapes, scalars, launch) use the constraint syntax of gluon.tuning.space (numbers, names,
arithmetic, comparisons, min/max/abs/cdiv/next_power_of_2); they may name the dims, the parameters,
the constexprs, `itemsize` and `NUM_SMS` (the GPU's SM count; 132 where there is no GPU). Reference and
baseline are torch expressions (gluon.tuning.torch_expr) over the arguments, dims, parameters and
constexprs. Everything is checked when the spec loads, before any kernel is imported; what needs the kernel
(its parameters) is checked when the template is built (gluon.tuning.declared).

The typed objects here (`Declaration` and its parts) are frozen pydantic models: the spec holds one, the
build manifest stores it, and `gluon.load` rebuilds the template from it.
"""
from __future__ import annotations

import re
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict

from ..dtypes import DType
from .space import ExprError, expression_names
from .spec_errors import _fmt, _Problem, _suggest
from .torch_expr import MODULE_NAMES, TorchExprError, free_names

# names every size expression may use besides dims, params and constexprs
SIZE_NAMES = ("itemsize", "NUM_SMS")
RESERVED = SIZE_NAMES + MODULE_NAMES
FILLS = ("normal", "uniform", "randint", "zeros", "ones", "poison")
TENSOR_KEYS = ("tensor", "dtype", "fill", "low", "high", "std", "output")
LAUNCH_KEYS = ("grid", "block", "num_warps", "constexprs", "requires")
PROBLEM_KEYS = ("reference", "baseline", "flops", "bytes")
TRIAL_DTYPE = "dtype"        # a tensor's dtype written so: the trial's dtype (fp16, bf16, ... of the spec)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FUNCTION_REF = re.compile(r"^([A-Za-z_]\w*(\.[A-Za-z_]\w*)*|[^:]*\.py):[A-Za-z_]\w*$")
_EXPR_HELP = "an expression over the dims, parameters and constexprs (e.g. \"cdiv(M, ROWS)\") or an integer"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TensorDecl(_Frozen):
    """A tensor argument: its shape (size expressions), dtype (TRIAL_DTYPE or a DType name), how it is
    filled, and whether the kernel writes it (an output is poisoned and checked)."""
    kind: Literal["tensor"] = "tensor"
    name: str
    shape: tuple[str, ...]
    dtype: str = TRIAL_DTYPE
    fill: str = "normal"
    low: float = 0.0
    high: float = 1.0
    std: float = 1.0
    output: bool = False


class ScalarDecl(_Frozen):
    """A scalar argument: a number, a bool, or a size expression (str)."""
    kind: Literal["scalar"] = "scalar"
    name: str
    value: Union[bool, int, float, str]


ArgDecl = Union[TensorDecl, ScalarDecl]


class LaunchDecl(_Frozen):
    grid: tuple[str, ...]
    block: tuple[str, ...] | None = None
    num_warps: str = "4"
    constexprs: tuple[tuple[str, Union[bool, int, float, str]], ...] = ()
    requires: tuple[str, ...] = ()


class ProblemDecl(_Frozen):
    reference: str
    baseline: str | None = None
    flops: str = "0"
    bytes: str = "0"


class Declaration(_Frozen):
    """Everything a declared kernel's template needs (gluon.tuning.declared.DeclaredTemplate)."""
    function: str
    dims: tuple[str, ...]
    args: tuple[ArgDecl, ...]
    launch: LaunchDecl
    problem: ProblemDecl
    params: tuple[str, ...] = ()         # the spec's parameter names (its search space)
    spec_dir: str = "."                  # where a file.py reference is looked up first

    @property
    def tensors(self) -> tuple[TensorDecl, ...]:
        return tuple(a for a in self.args if isinstance(a, TensorDecl))

    @property
    def outputs(self) -> tuple[TensorDecl, ...]:
        return tuple(a for a in self.tensors if a.output)

    @property
    def inputs(self) -> tuple[TensorDecl, ...]:
        return tuple(a for a in self.tensors if not a.output)

    @property
    def constexpr_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.launch.constexprs)


def is_function_ref(text: str) -> bool:
    """`module:function` or `file.py:function` (rather than a torch expression)."""
    return bool(_FUNCTION_REF.match(text.strip()))


# ------------------------------------------------------------------------------------------ parsing


def _size_expr(v: Any, path: tuple, what: str = _EXPR_HELP, least: int | None = None,
               most: tuple[int, str] | None = None) -> str:
    """A size expression as text (an integer is written as one); _Problem for anything else.
    `most`: (the largest literal allowed, why)."""
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise _Problem(f"{_fmt(v)} is not an expression", path=path, value=v, allowed=what)
    if isinstance(v, int):
        if least is not None and v < least:
            raise _Problem(f"{v} is less than {least}", path=path, value=v, allowed=f"integers >= {least}, or {what}")
        if most is not None and v > most[0]:
            raise _Problem(f"{v} is more than {most[0]} ({most[1]})", path=path, value=v,
                           allowed=f"integers {least or 0}..{most[0]}, or {what}")
        return str(v)
    try:
        expression_names(v)
    except ExprError as e:
        raise _Problem(str(e).replace("constraint '", "expression '"), path=path, value=v, allowed=what) from None
    return v.strip()


def _table(v: Any, path: tuple, what: str) -> dict:
    if not isinstance(v, dict):
        raise _Problem(f"{_fmt(v)} is not a table", path=path, value=v, allowed=what)
    return v


def _unknown(d: dict, keys: tuple, path: tuple, where: str) -> None:
    for k in d:
        if k not in keys:
            raise _Problem(f"unknown key {_fmt(k)} in {where}", path=path + (k,), value=k, allowed=", ".join(keys),
                           suggestion=_suggest(k, keys))


def _dtype(v: Any, path: tuple) -> str:
    allowed = f"'{TRIAL_DTYPE}' (the trial's), or a dtype such as fp32, bf16, int32, int64, uint8, bool"
    if not isinstance(v, str):
        raise _Problem(f"{_fmt(v)} is not a dtype name", path=path, value=v, allowed=allowed)
    if v == TRIAL_DTYPE:
        return v
    try:
        return DType.from_name(v).name
    except ValueError:
        raise _Problem(f"unknown dtype {_fmt(v)}", path=path, value=v, allowed=allowed,
                       suggestion=_suggest(v, [d.name for d in DType] + [TRIAL_DTYPE])) from None


def _number(v: Any, path: tuple) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _Problem(f"{_fmt(v)} is not a number", path=path, value=v, allowed="a number")
    return float(v)


def _tensor(name: str, d: dict, path: tuple) -> TensorDecl:
    _unknown(d, TENSOR_KEYS, path, f"tensor argument '{name}'")
    shape = d["tensor"]
    if isinstance(shape, (str, int)) and not isinstance(shape, bool):
        shape = [shape]
    if not isinstance(shape, list) or not shape:
        raise _Problem(f"{_fmt(shape)} is not a shape", path=path + ("tensor",), value=shape,
                       allowed="a non-empty list of extents, each a dim name, an expression or an integer >= 1")
    extents = tuple(_size_expr(e, path + ("tensor", i), least=1) for i, e in enumerate(shape))
    output = d.get("output", False)
    if not isinstance(output, bool):
        raise _Problem(f"{_fmt(output)} is not true or false", path=path + ("output",), value=output,
                       allowed="true (the kernel writes it) or false")
    dtype = _dtype(d.get("dtype", TRIAL_DTYPE), path + ("dtype",))
    fill = d.get("fill", "poison" if output else "normal")
    if not isinstance(fill, str) or fill not in FILLS:
        raise _Problem(f"unknown fill {_fmt(fill)}", path=path + ("fill",), value=fill, allowed=", ".join(FILLS),
                       suggestion=_suggest(fill, FILLS))
    if fill == "poison" and not output:
        raise _Problem("only an output is poisoned", path=path + ("fill",), value=fill,
                       allowed="normal, uniform, randint, zeros, ones (or output = true)")
    if output and fill not in ("poison", "zeros"):
        raise _Problem(f"an output is poisoned (NaN) before each run, or zeroed for one the kernel "
                       f"accumulates into, not filled {fill!r}", path=path + ("fill",), value=fill,
                       allowed="poison (the default), zeros")
    is_int = dtype != TRIAL_DTYPE and not DType[dtype].is_float
    if is_int and fill in ("normal", "uniform"):
        raise _Problem(f"an integer tensor cannot be filled {fill!r}", path=path + ("fill",), value=fill,
                       allowed="randint (with low, high), zeros, ones")
    if fill == "randint" and not is_int:
        raise _Problem("randint fills integer tensors", path=path + ("fill",), value=fill,
                       allowed="normal, uniform (or an integer dtype)")
    kw = {k: _number(d[k], path + (k,)) for k in ("low", "high", "std") if k in d}
    if fill == "randint":
        kw.setdefault("high", 16.0)
    lo, hi = kw.get("low", 0.0), kw.get("high", 1.0)
    if fill in ("uniform", "randint") and not lo < hi:
        raise _Problem(f"low {lo:g} is not below high {hi:g}", path=path + ("high",), value=hi,
                       allowed="high > low")
    if kw.get("std", 1.0) <= 0:
        raise _Problem(f"std {kw['std']:g} is not positive", path=path + ("std",), value=kw["std"],
                       allowed="a number > 0")
    return TensorDecl(name=name, shape=extents, dtype=dtype, fill=fill, output=output, **kw)


def parse_args(v: Any) -> tuple[ArgDecl, ...]:
    """[args]: name -> a tensor table, or a scalar (number, bool, size expression)."""
    allowed = "a table of the kernel's arguments: name = { tensor = [...], ... } or name = an expression / number"
    d = _table(v, (), allowed)
    if not d:
        raise _Problem("no arguments declared", value=d, allowed=allowed)
    out: list[ArgDecl] = []
    for name, a in d.items():
        if not isinstance(name, str) or not _IDENT.fullmatch(name):
            raise _Problem(f"{_fmt(name)} is not a parameter name", path=(name,), value=name,
                           allowed="the kernel's parameter names")
        if isinstance(a, dict):
            if "tensor" not in a:
                hint = " (a scalar is written name = \"expression\" or a number)" if "value" in a else ""
                raise _Problem(f"tensor argument '{name}' has no 'tensor' shape{hint}", path=(name,), value=a,
                               allowed="{ tensor = [extents...], dtype = ..., fill = ..., output = ... }")
            out.append(_tensor(name, a, (name,)))
        elif isinstance(a, bool) or isinstance(a, (int, float)):
            out.append(ScalarDecl(name=name, value=a))
        elif isinstance(a, str):
            out.append(ScalarDecl(name=name, value=_size_expr(a, (name,))))
        else:
            raise _Problem(f"{_fmt(a)} is not an argument", path=(name,), value=a, allowed=allowed)
    if not any(isinstance(a, TensorDecl) and a.output for a in out):
        raise _Problem("no output: mark the tensor the kernel writes with output = true", value=d,
                       allowed="at least one tensor with output = true")
    return tuple(out)


def _exprs(v: Any, path: tuple, what: str, most: int = 3) -> tuple[str, ...]:
    items = v if isinstance(v, list) else [v]
    if not items or len(items) > most:
        raise _Problem(f"{len(items)} entries", path=path, value=v, allowed=f"1 to {most} {what}")
    return tuple(_size_expr(e, path + ((i,) if isinstance(v, list) else ()), least=1) for i, e in enumerate(items))


def parse_launch(v: Any) -> LaunchDecl:
    d = _table(v, (), "a [launch] table with grid (and block, num_warps, constexprs, requires)")
    _unknown(d, LAUNCH_KEYS, (), "[launch]")
    if "grid" not in d:
        raise _Problem("missing required key 'grid' in [launch]", path=("grid",),
                       allowed="the grid: 1 to 3 expressions, e.g. [\"cdiv(M, ROWS)\"]")
    kw: dict[str, Any] = {"grid": _exprs(d["grid"], ("grid",), "grid dimensions")}
    if "block" in d:
        kw["block"] = _exprs(d["block"], ("block",), "block dimensions (SIMT kernels' logical threads)")
    if "num_warps" in d:
        kw["num_warps"] = _size_expr(d["num_warps"], ("num_warps",), least=1,
                                     most=(32, "a block holds at most 1024 threads = 32 warps"))
    consts = _table(d.get("constexprs", {}), ("constexprs",), "a table NAME = expression or value")
    items = []
    for name, e in consts.items():
        if not isinstance(name, str) or not _IDENT.fullmatch(name):
            raise _Problem(f"{_fmt(name)} is not a constexpr name", path=("constexprs", name), value=name)
        if isinstance(e, (bool, float)):
            items.append((name, e))
        else:
            items.append((name, _size_expr(e, ("constexprs", name),
                                           what=_EXPR_HELP + " (a literal string is quoted inside: \"'simt'\")")))
    kw["constexprs"] = tuple(items)
    req = d.get("requires", [])
    if isinstance(req, str):
        raise _Problem(f"{_fmt(req)} is a string, not a list", path=("requires",), value=req,
                       allowed="a list of conditions", suggestion=f"[{_fmt(req)}]")
    if not isinstance(req, list):
        raise _Problem(f"{_fmt(req)} is not a list", path=("requires",), value=req, allowed="a list of conditions")
    for i, r in enumerate(req):
        if not isinstance(r, str):
            raise _Problem(f"{_fmt(r)} is not a condition", path=("requires", i), value=r,
                           allowed="a condition in a string, e.g. \"BLOCK_N >= N\"")
    kw["requires"] = tuple(_size_expr(r, ("requires", i), what="a condition, e.g. \"BLOCK_N >= N\"")
                           for i, r in enumerate(req))
    return LaunchDecl(**kw)


def _torch_or_ref(v: Any, path: tuple, what: str) -> str:
    allowed = f"{what}: a torch expression over the arguments (e.g. \"torch.softmax(x.float(), dim=-1)\") or " \
              "'module:function' / 'file.py:function'"
    if not isinstance(v, str) or not v.strip():
        raise _Problem(f"{_fmt(v)} is not an expression", path=path, value=v, allowed=allowed)
    if is_function_ref(v):
        return v.strip()
    try:
        free_names(v)
    except TorchExprError as e:
        raise _Problem(str(e), path=path, value=v, allowed=allowed) from None
    return v.strip()


def parse_problem(v: Any) -> ProblemDecl:
    d = _table(v, (), "a [problem] table with reference (and baseline, flops, bytes)")
    _unknown(d, PROBLEM_KEYS, (), "[problem]")
    if "reference" not in d:
        raise _Problem("missing required key 'reference' in [problem]", path=("reference",),
                       allowed="what the outputs should be: a torch expression or 'module:function'")
    kw: dict[str, Any] = {"reference": _torch_or_ref(d["reference"], ("reference",), "the expected outputs")}
    if d.get("baseline") is not None:
        kw["baseline"] = _torch_or_ref(d["baseline"], ("baseline",), "what the kernel is timed against")
    for k in ("flops", "bytes"):
        if k in d:
            e = d[k]
            if isinstance(e, float) and not isinstance(e, bool):
                e = str(e)
            kw[k] = _size_expr(e, (k,), what="an expression over the dims (bytes: and itemsize), or a number")
    return ProblemDecl(**kw)


def parse_dims(v: Any) -> tuple[str, ...]:
    allowed = "a list of names, one per number of a shape, e.g. [\"M\", \"N\"]"
    if not isinstance(v, list) or not v:
        raise _Problem(f"{_fmt(v)} is not a list of dim names", value=v, allowed=allowed)
    for i, n in enumerate(v):
        if not isinstance(n, str) or not _IDENT.fullmatch(n):
            raise _Problem(f"{_fmt(n)} is not a name", path=(i,), value=n, allowed=allowed)
        if n in v[:i]:
            raise _Problem(f"{_fmt(n)} is repeated", path=(i,), value=n, allowed="distinct names")
        if n in RESERVED:
            raise _Problem(f"{_fmt(n)} is a reserved name", path=(i,), value=n,
                           allowed=f"names other than {', '.join(RESERVED)}")
    return tuple(v)


# ------------------------------------------------------------------------------- names, across tables


def names_of(text: str) -> list[str]:
    """The names a size expression reads (none for a number written as text)."""
    return expression_names(text) if not _is_number(text) else []


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def check_names(decl: Declaration) -> None:
    """Every expression names only what it may (_Problem with the path from the spec's top level)."""
    dims, params = decl.dims, decl.params
    for n in params:
        if n in dims:
            raise _Problem(f"parameter '{n}' has the name of a dim", path=("kernel", "dims", dims.index(n)), value=n,
                           allowed="dim names other than the parameters'")
    consts = decl.constexpr_names
    base = set(dims) | set(params) | set(SIZE_NAMES)

    def check(text: str, known: set, path: tuple, what: str) -> None:
        for n in names_of(text):
            if n not in known:
                choices = sorted(known - set(SIZE_NAMES)) + [n for n in SIZE_NAMES if n in known]
                raise _Problem(f"unknown name '{n}' in '{text}'", path=path, value=text,
                               allowed=f"{what}: {', '.join(choices)}", suggestion=_suggest(n, sorted(known)))

    seen: set = set()
    for name, e in decl.launch.constexprs:
        if name in params:
            raise _Problem(f"constexpr '{name}' is also a parameter", path=("launch", "constexprs", name), value=name,
                           allowed="a name that is not in the search space (a tuned constexpr is a [params] entry)")
        if isinstance(e, str):
            check(e, base | seen, ("launch", "constexprs", name), "dims, parameters and the constexprs above it")
        seen.add(name)
    full = base | set(consts)
    for i, e in enumerate(decl.launch.grid):
        check(e, full, ("launch", "grid", i), "dims, parameters, constexprs")
    for i, e in enumerate(decl.launch.block or ()):
        check(e, full, ("launch", "block", i), "dims, parameters, constexprs")
    check(decl.launch.num_warps, full, ("launch", "num_warps"), "dims, parameters, constexprs")
    for i, e in enumerate(decl.launch.requires):
        check(e, full, ("launch", "requires", i), "dims, parameters, constexprs")
    arg_names = [a.name for a in decl.args]
    for a in decl.args:
        if a.name in full or a.name in MODULE_NAMES:
            raise _Problem(f"argument '{a.name}' has the name of a dim, parameter or constexpr", path=("args", a.name),
                           value=a.name, allowed="distinct names")
        if isinstance(a, TensorDecl):
            for i, e in enumerate(a.shape):
                check(e, full, ("args", a.name, "tensor", i), "dims, parameters, constexprs")
        elif isinstance(a.value, str):
            check(a.value, full, ("args", a.name), "dims, parameters, constexprs")
    check(decl.problem.flops, set(dims), ("problem", "flops"), "the dims")
    check(decl.problem.bytes, set(dims) | {"itemsize"}, ("problem", "bytes"), "the dims and itemsize")
    torch_known = full | set(arg_names) | set(MODULE_NAMES)
    for key in ("reference", "baseline"):
        text = getattr(decl.problem, key)
        if text is None or is_function_ref(text):
            continue
        for n in free_names(text):
            if n not in torch_known:
                raise _Problem(f"unknown name '{n}' in '{text}'", path=("problem", key), value=text,
                               allowed=f"the arguments ({', '.join(arg_names)}), dims, parameters, constexprs, "
                                       f"{', '.join(MODULE_NAMES)}",
                               suggestion=_suggest(n, sorted(torch_known)))
