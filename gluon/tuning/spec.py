"""Declarative kernel specs: a kernel's tuning problem in a TOML or YAML file.

    spec = load_spec("specs/gemm_sm90.toml")
    spec.space.size(), list(spec.space.grid()), spec.tuning.trials, spec.content_hash
    tuning = resolve_template(spec)          # imports kernel.template lazily

File layout (TOML; YAML is the same tree):

    extends = "base.toml"                    # optional, relative to this file; deep-merged, this file wins,
                                             # lists replace
    dtypes = [...]  shapes = [[...], ...]    # top level, or inside [kernel]; a shape's dims are integers >= 1,
                                             # or true/false (read as 1/0) for a template's flag dims
    constraints = ["..."]                    # top level, or inside [kernel], [tiles], [swizzle], [stages], [params]
    [kernel]   name, template ("pkg.mod:ATTR" | "path/file.py:ATTR"), arch (sm80|sm90|sm100|cdna3), description
    [tiles]    NAME = 128 | { values = [...] } | { range = [lo, hi], step = s } | { range = [lo, hi], log = true }
               (powers of two)
    [swizzle]  NAME = 0 | 32 | 64 | 128, or a domain of them
    [stages]   NAME = 1..32, or a domain
    [warp_roles.ROLE]  warps = 1..32 | domain, registers = multiple of 8 in 24..256 | domain
                       (parameters ROLE_WARPS, ROLE_REGS, upper case)
    [params]   NAME = int | float | string | bool | domain
    [tuning]   see TuningSettings

Every problem raises SpecError, whose message names the file, the line (where the format gives one),
the dotted field, the bad value, what is allowed, and a suggestion for typos:

    specs/bad.toml:12: tiles.BLOCK_N.values[1]: 96 is not a power of two; allowed: powers of two (16, 32, ...)
    specs/bad.toml:7: stagse: unknown key 'stagse'; did you mean 'stages'? (allowed: kernel, dtypes, ...)

The loader's parts, each importing only those before it: spec_errors (SpecError, value formatting,
suggestions), spec_files (reading TOML/YAML with line numbers, extends, hoisting), spec_sections (the
[kernel] and [tuning] models, key names), spec_space (the search space's domains and constraints). This
module holds the Spec model, load_spec, and the template a spec names (resolve_template, template_of).
"""
from __future__ import annotations

import hashlib
import importlib
import json
import traceback
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from .space import SearchSpace
from .spec_errors import (
    _MISSING,
    SpecError,
    _display,
    _dotted,
    _fmt,
    _Problem,
    _suggest,
    _undotted,
)
from .spec_files import Loc, _load_tree, _table, _Tree
from .spec_sections import (
    _DTYPE_ALIASES,
    ARCHS,
    DECLARED_KEYS,
    DTYPES,
    DTYPES_ALLOWED,
    FUNCTION_ALLOWED,
    KERNEL_KEYS,
    OBJECTIVES,
    SAMPLERS,
    SCORINGS,
    TEMPLATE_ALLOWED,
    TOP_KEYS,
    KernelSection,
    TuningSettings,
    _unknown_key,
)
from .spec_declared import Declaration, check_names, parse_args, parse_dims, parse_launch, parse_problem
from .spec_space import _build_space, _check_constraints
from .template import import_file, load_template_ref

__all__ = ["load_spec", "resolve_template", "template_of", "SpecError", "Spec", "KernelSection", "TuningSettings",
           "ARCHS", "DTYPES", "SAMPLERS", "OBJECTIVES", "SCORINGS"]


# a shape's dims: sizes, or booleans for a template's flag dims (attention's causal; the template says which
# dims are flags and checks them: TuningTemplate.shape_problem)
_DIMS_ALLOWED = "integers >= 1 (true/false for a flag dim)"


class Spec(BaseModel):
    """A loaded, validated kernel spec (see the module docstring)."""
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    name: str = ""
    source: Path = Path("<spec>")
    content_hash: str = ""
    kernel: KernelSection
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    space: SearchSpace = Field(default_factory=SearchSpace)
    constraints: list[str] = Field(default_factory=list)
    tuning: TuningSettings = Field(default_factory=TuningSettings)
    declaration: Declaration | None = None    # kernel.function's [args], [launch], [problem]

    _where: dict[tuple, Loc] = PrivateAttr(default_factory=dict)
    _formats: dict[Path, str] = PrivateAttr(default_factory=dict)
    _origin: dict[str, tuple] = PrivateAttr(default_factory=dict)

    @field_validator("dtypes", mode="before")
    @classmethod
    def _dtypes(cls, v):
        if not isinstance(v, (list, tuple)):
            raise _Problem(f"{_fmt(v)} is not a list", value=v, allowed=f"a non-empty list of {DTYPES_ALLOWED}",
                           suggestion=_fmt([v]) if isinstance(v, str) and v in DTYPES else None)
        if not v:
            raise _Problem("empty list of dtypes", value=v, allowed=f"at least one of {DTYPES_ALLOWED}")
        for i, d in enumerate(v):
            if not isinstance(d, str):
                raise _Problem(f"{_fmt(d)} is not a dtype name", path=(i,), value=d, allowed=DTYPES_ALLOWED)
            if d not in DTYPES:
                raise _Problem(f"unknown dtype {_fmt(d)}", path=(i,), value=d, allowed=DTYPES_ALLOWED,
                               suggestion=_suggest(d, DTYPES, _DTYPE_ALIASES))
            if d in v[:i]:
                raise _Problem(f"{_fmt(d)} is repeated", path=(i,), value=d, allowed="distinct dtypes")
        return list(v)

    @field_validator("shapes", mode="before")
    @classmethod
    def _shapes(cls, v):
        allowed = ("a non-empty list of shapes, each a list of integers >= 1 (or true/false for a flag such as "
                   "causal), all of the same length")
        if not isinstance(v, (list, tuple)):
            raise _Problem(f"{_fmt(v)} is not a list of shapes", value=v, allowed=allowed)
        if not v:
            raise _Problem("empty list of shapes", value=v, allowed=allowed)
        out = []
        for i, s in enumerate(v):
            if isinstance(s, int) and not isinstance(s, bool):
                raise _Problem(f"{s} is not a shape", path=(i,), value=s, allowed="a list of dims, e.g. [4096, 4096]",
                               suggestion=_fmt([s]))
            if not isinstance(s, (list, tuple)) or not s:
                raise _Problem(f"{_fmt(s)} is not a shape", path=(i,), value=s,
                               allowed="a non-empty list of dims, e.g. [4096, 4096]")
            for j, d in enumerate(s):
                if not isinstance(d, int):
                    raise _Problem(f"{_fmt(d)} is not an integer", path=(i, j), value=d, allowed=_DIMS_ALLOWED)
                if d < 1 and not isinstance(d, bool):
                    raise _Problem(f"{d} is not a positive dimension", path=(i, j), value=d,
                                   allowed=_DIMS_ALLOWED)
            s = [int(d) for d in s]          # a flag dim (attention's causal) is 1 / 0 from here on
            if len(s) != len(v[0]):
                raise _Problem(f"{_fmt(s)} has {len(s)} dims but shapes[0] has {len(v[0])}", path=(i,), value=s,
                               allowed=f"every shape with {len(v[0])} dims")
            t = tuple(s)
            if t in out:
                raise _Problem(f"{_fmt(s)} is repeated (also shapes[{out.index(t)}])", path=(i,), value=s,
                               allowed="distinct shapes")
            out.append(t)
        return out

    @field_validator("constraints", mode="before")
    @classmethod
    def _constraints(cls, v):
        if isinstance(v, str):
            raise _Problem(f"{_fmt(v)} is a string, not a list", value=v, allowed="a list of expressions",
                           suggestion=json.dumps([v]))
        if not isinstance(v, (list, tuple)):
            raise _Problem(f"{_fmt(v)} is not a list", value=v, allowed="a list of expressions")
        for i, c in enumerate(v):
            if not isinstance(c, str):
                raise _Problem(f"{_fmt(c)} is not a string", path=(i,), value=c,
                               allowed="an expression in a string, e.g. \"BLOCK_M * BLOCK_N <= 32768\"")
            if not c.strip():
                raise _Problem("empty constraint", path=(i,), value=c, allowed="an expression")
        return list(v)

    @field_validator("space", mode="before")
    @classmethod
    def _space_type(cls, v):
        if isinstance(v, dict):
            return SearchSpace(dict(v.get("params", {})), list(v.get("constraints", [])))
        return v

    @model_validator(mode="after")
    def _finish(self):
        if not self.name:
            self.name = self.kernel.name
        elif self.name != self.kernel.name:
            raise _Problem(f"name {_fmt(self.name)} differs from kernel.name {_fmt(self.kernel.name)}",
                           path=("name",), value=self.name, allowed="the kernel name")
        if not self.space.constraints:
            self.space.constraints = list(self.constraints)
        elif not self.constraints:
            self.constraints = list(self.space.constraints)
        elif list(self.space.constraints) != list(self.constraints):
            raise _Problem("constraints differ from space.constraints", path=("constraints",),
                           value=self.constraints, allowed="the same list (or give only one)")
        _check_constraints(self.space)
        self.content_hash = hashlib.sha256(self.canonical_json().encode()).hexdigest()
        return self

    @field_serializer("space")
    def _ser_space(self, s: SearchSpace):
        return s.describe()

    @field_serializer("source")
    def _ser_source(self, p: Path):
        return str(p)

    # -- helpers

    def canonical(self) -> dict:
        """The resolved spec as plain data (what content_hash hashes)."""
        kernel = self.kernel.model_dump()
        for k in ("function", "dims"):          # a template spec's hash is what it was before these keys
            if not kernel[k]:
                del kernel[k]
        out = {"kernel": kernel, "dtypes": list(self.dtypes),
               "shapes": [list(s) for s in self.shapes], "space": self.space.describe(),
               "tuning": self.tuning.model_dump()}
        if self.declaration is not None:      # where the spec lies is not its content
            out["declaration"] = self.declaration.model_dump(exclude={"spec_dir"})
        return out

    def canonical_json(self) -> str:
        return json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def locate(self, field: Any) -> tuple[Path, int | None, str]:
        """(file, line or None, dotted field as written) of a spec field ("tiles.BLOCK_N" or a tuple)."""
        path = _undotted(field) if isinstance(field, str) else tuple(field)
        tree = _Tree({}, self._where, self.source, self._formats)
        file, line, shown = tree.where(path)
        return file, line, _dotted(shown)

    def error(self, field: Any, problem: str, *, value: Any = None, allowed: str = "",
              suggestion: str | None = None) -> SpecError:
        """A SpecError pointing at `field` of this spec (for consumers: the tuner, the CLI)."""
        file, line, shown = self.locate(field)
        return SpecError(file, line, shown, problem, value=value, allowed=allowed, suggestion=suggestion)

    def param_origin(self, name: str) -> tuple[Path, int | None, str]:
        """(file, line, field) where a flattened parameter (e.g. CONSUMER_WARPS) is declared."""
        return self.locate(self._origin.get(name, ("params", name)))


# --------------------------------------------------------------------------------- loading


_PYDANTIC_TEXT = {
    "missing": "missing required key",
    "extra_forbidden": "unknown key",
    "string_type": "is not a string",
    "int_type": "is not an integer",
    "float_type": "is not a number",
    "bool_type": "is not true or false",
    "list_type": "is not a list",
    "tuple_type": "is not a list",
    "dict_type": "is not a table",
    "model_type": "is not a table",
}


def _convert(exc: ValidationError, tree: _Tree) -> SpecError:
    errors = exc.errors()
    err = errors[0]
    loc = tuple(err.get("loc", ()))
    inner = (err.get("ctx") or {}).get("error")
    if isinstance(inner, _Problem):
        value = inner.value if inner.value is not _MISSING else err.get("input")
        return tree.error(loc + inner.path, inner.problem, value=value, allowed=inner.allowed,
                          suggestion=inner.suggestion)
    kind = err.get("type", "")
    value = err.get("input")
    if kind == "missing":
        section = _dotted(loc[:-1]) or "the top level"
        return tree.error(loc, f"missing required key '{loc[-1]}' in {section}", allowed="", value=None)
    if kind == "extra_forbidden":
        return tree.error(loc, f"unknown key {_fmt(loc[-1])}", value=loc[-1])
    if kind in _PYDANTIC_TEXT:
        return tree.error(loc, f"{_fmt(value)} {_PYDANTIC_TEXT[kind]}", value=value)
    if kind == "literal_error":
        expected = (err.get("ctx") or {}).get("expected", "")
        return tree.error(loc, f"{_fmt(value)} is not allowed", value=value, allowed=str(expected))
    return tree.error(loc, f"{_fmt(value)}: {err.get('msg', 'invalid')}", value=value)


def _check_keys(tree: _Tree) -> None:
    data = tree.data
    for k in data:
        if not isinstance(k, str):
            raise tree.error((), f"key {_fmt(k)} is not a string", value=k, allowed=", ".join(TOP_KEYS[1:]))
        if k not in TOP_KEYS:
            raise _unknown_key(tree, (), k, TOP_KEYS[1:], "the top level")
    if "kernel" not in data:
        raise tree.error((), "missing required section 'kernel'",
                         allowed="a [kernel] table with name, template, arch (and description)")
    kernel = _table(tree, data["kernel"], ("kernel",), "name, template, arch, description")
    for k in kernel:
        if k not in KERNEL_KEYS:
            raise _unknown_key(tree, ("kernel",), k, KERNEL_KEYS, "[kernel]")
    for k in ("name", "arch") if "function" in kernel else ("name", "template", "arch"):
        if k not in kernel:
            allowed = {"name": "a kernel name", "arch": ", ".join(ARCHS),
                       "template": f"{TEMPLATE_ALLOWED} (or function = {FUNCTION_ALLOWED} with [args], [launch], "
                                   "[problem])"}[k]
            raise tree.error(("kernel", k), f"missing required key '{k}' in [kernel]", allowed=allowed)
    _check_declared_keys(tree, kernel)
    for k in ("dtypes", "shapes"):
        if k not in data:
            allowed = f"a non-empty list of {DTYPES_ALLOWED}" if k == "dtypes" else \
                "a non-empty list of shapes, e.g. [[4096, 4096, 4096]]"
            raise tree.error((k,), f"missing required key '{k}' (at the top level or in [kernel])",
                             allowed=allowed)
    if "tuning" in data:
        tuning = _table(tree, data["tuning"], ("tuning",), "tuning settings")
        fields = tuple(TuningSettings.model_fields)
        for k in tuning:
            if k not in fields:
                raise _unknown_key(tree, ("tuning",), k, fields, "[tuning]")


def _check_declared_keys(tree: _Tree, kernel: dict) -> None:
    """A spec names a template or declares a function (with dims and the [args], [launch], [problem]
    tables), not both, and not one's tables with the other."""
    data = tree.data
    if "function" in kernel and "template" in kernel:
        raise tree.error(("kernel", "function"), "[kernel] names both a template and a function",
                         allowed="template (a TuningTemplate) or function (a @gluon.jit kernel with [args], "
                                 "[launch], [problem]), not both")
    if "function" in kernel:
        if "dims" not in kernel:
            raise tree.error(("kernel", "dims"), "missing required key 'dims' in [kernel] (a declared function "
                             "names its shape's dims)", allowed="a list of names, e.g. [\"M\", \"N\"]")
        for k in DECLARED_KEYS:
            if k not in data:
                allowed = {"args": "a table of the kernel's arguments",
                           "launch": "a table with grid (and block, num_warps, constexprs, requires)",
                           "problem": "a table with reference (and baseline, flops, bytes)"}[k]
                raise tree.error((k,), f"missing required section '{k}' for kernel.function", allowed=allowed)
        return
    if "dims" in kernel:
        raise tree.error(("kernel", "dims"), "dims belong to a declared function (kernel.function); a template "
                         "names its own dims", value="dims")
    for k in DECLARED_KEYS:
        if k in data:
            raise tree.error((k,), f"[{k}] declares a function's arguments, but [kernel] names a template",
                             allowed="kernel.function = 'file.py:my_kernel' with [args], [launch], [problem], "
                                     "or a template without them")


def _declaration(tree: _Tree, file: Path, data: dict, params: dict) -> Declaration | None:
    """The declared kernel of a spec with kernel.function (None for a template spec); SpecError at the
    field on any problem."""
    kernel = data["kernel"]
    if "function" not in kernel:
        return None
    def at(prefix: tuple, p: _Problem) -> SpecError:
        value = None if p.value is _MISSING else p.value
        return tree.error(prefix + p.path, p.problem, value=value, allowed=p.allowed, suggestion=p.suggestion)
    parts = {}
    try:
        dims = parse_dims(kernel["dims"])
    except _Problem as p:
        raise at(("kernel", "dims"), p) from None
    for key, parse in (("args", parse_args), ("launch", parse_launch), ("problem", parse_problem)):
        try:
            parts[key] = parse(data[key])
        except _Problem as p:
            raise at((key,), p) from None
    decl = Declaration(function=str(kernel["function"]), dims=dims, params=tuple(params), spec_dir=str(file.parent),
                       **parts)
    try:
        check_names(decl)
    except _Problem as p:
        raise at((), p) from None
    tuning = data.get("tuning", {}) if isinstance(data.get("tuning"), dict) else {}
    objective = tuning.get("objective", "geomean_ratio")
    if decl.problem.baseline is None and objective in ("geomean_ratio", "geomean", "ratio", "speedup") \
            and tuning.get("baseline") not in ("none", ""):
        raise tree.error(("problem",), "no baseline: the objective geomean_ratio scores each config against it",
                         allowed="problem.baseline = a torch expression, or [tuning] objective = 'min_time'")
    return decl


def load_spec(path: str | Path) -> Spec:
    """Load, resolve (extends) and validate a TOML (.toml) or YAML (.yaml/.yml) spec; SpecError on any problem."""
    file = Path(path)
    try:
        file = file.resolve()
    except OSError:
        pass
    formats: dict[Path, str] = {}
    data, locs = _load_tree(file, [file], formats)
    tree = _Tree(data, locs, file, formats)
    _check_keys(tree)
    params, origin = _build_space(tree)
    declaration = _declaration(tree, file, data, params)
    payload = {"source": file, "kernel": data["kernel"], "dtypes": data["dtypes"], "shapes": data["shapes"],
               "space": SearchSpace(params, []), "constraints": data.get("constraints", []),
               "declaration": declaration}
    if "tuning" in data:
        payload["tuning"] = data["tuning"]
    try:
        spec = Spec.model_validate(payload)
    except ValidationError as e:
        raise _convert(e, tree) from None
    spec._where = dict(locs)
    spec._formats = dict(formats)
    spec._origin = dict(origin)
    return spec


# ------------------------------------------------------------------------------------- templates


def _where_raised(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    if not tb:
        return ""
    f = tb[-1]
    return f" (at {_display(Path(f.filename))}:{f.lineno})"


def resolve_template(spec: Spec) -> Any:
    """Import the object `kernel.template` names ("pkg.module:attr" or "path/file.py:attr"; a file path is
    looked up from the current directory, then from the spec's directory and its parents)."""
    return resolve_ref(spec, "template")


def resolve_ref(spec: Spec, field: str) -> Any:
    """Import the object `kernel.<field>` (template or function) names, as `resolve_template` says;
    SpecError at that field when it cannot."""
    ref = getattr(spec.kernel, field)
    ref_allowed = TEMPLATE_ALLOWED if field == "template" else FUNCTION_ALLOWED

    def error(problem: str, allowed: str = "", suggestion: str | None = None) -> SpecError:
        return spec.error(("kernel", field), problem, value=ref, allowed=allowed, suggestion=suggestion)
    target, _, attr = ref.rpartition(":")
    if target.endswith(".py"):
        rel = Path(target)
        spec_dir = Path(spec.source).parent
        candidates = [rel] if rel.is_absolute() else [Path.cwd() / rel, spec_dir / rel] + \
            [p / rel for p in spec_dir.parents]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise error(f"file '{target}' not found (looked in the current directory, "
                        f"{_display(spec_dir)} and its parents)", ref_allowed)
        try:
            module = import_file(found)         # one module per file, whoever loads it
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise error(f"importing '{target}' failed: {type(e).__name__}: {e}{_where_raised(e)}") from None
        where = f"'{target}'"
    else:
        try:
            module = importlib.import_module(target)
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise error(f"cannot import module '{target}': {type(e).__name__}: {e}"
                        f"{_where_raised(e) if not isinstance(e, ModuleNotFoundError) else ''}") from None
        where = f"module '{target}'"
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise error(f"{where} has no attribute '{part}'",
                        suggestion=(f"{target}:{s}" if (s := _suggest(part, names)) else None))
        obj = getattr(obj, part)
    return obj


_TEMPLATES: dict[tuple, Any] = {}


def template_of(spec) -> Any:
    """The spec's template: `resolve_template(spec)`, or for a stand-in spec the resolver does not take,
    its `kernel.template` reference resolved next to its `source` (template.load_template_ref). Cached
    per process."""
    if getattr(spec, "declaration", None) is not None:
        key = (spec.kernel.function, str(getattr(spec, "source", "")), spec.content_hash)
        if key not in _TEMPLATES:
            from .declared import template_for_spec
            _TEMPLATES[key] = template_for_spec(spec, resolve_ref(spec, "function"))
        return _TEMPLATES[key]
    key = (spec.kernel.template, str(getattr(spec, "source", "")))
    if key in _TEMPLATES:
        return _TEMPLATES[key]
    try:
        obj = resolve_template(spec)
    except (AttributeError, TypeError):       # a stand-in spec the real resolver does not take
        obj = None
    if obj is None:
        src = getattr(spec, "source", None)
        obj = load_template_ref(spec.kernel.template, Path(src).parent if src else None)
    _TEMPLATES[key] = obj
    return obj
