"""The spec's search space: tiles, swizzle, stages, warp_roles and params turned into domains (`Fixed`,
`Choice`, `IntRange` of gluon.tuning.space), each value checked for its section (`_parse_domain`), the
parameter names checked and flattened (`_build_space`: ROLE_WARPS, ROLE_REGS), and the constraints
checked against the parameters (`_check_constraints`, run by the Spec model).
"""
from __future__ import annotations

import keyword
import math
import re
from typing import Any

from ..arch import arch_by_name
from . import space as _space
from .space import (
    ALLOWED_SYNTAX,
    Choice,
    Domain,
    ExprError,
    Fixed,
    IntRange,
    SearchSpace,
    expression_names,
    is_power_of_two,
    parse_expression,
    string_comparisons,
)
from .spec_errors import SpecError, _dotted, _fmt, _Problem, _suggest
from .spec_files import _table, _Tree
from .spec_sections import _KEY_ALIASES, ROLE_KEYS, _unknown_key

DOMAIN_KEYS = ("values", "range", "step", "log")
SPACE_SECTIONS = ("tiles", "swizzle", "stages", "params")
_RESERVED_NAMES = {"min", "max", "abs", "True", "False", "None"}
_MAX_OPTIONS = 65536

TILE_ALLOWED = "powers of two (16, 32, 64, 128, 256, ...)"
SWIZZLE_ALLOWED = "0, 32, 64, 128"
STAGES_ALLOWED = "integers 1..32"
WARPS_ALLOWED = "integers 1..32"
REGS_ALLOWED = "multiples of 8 in 24..256"
PARAM_ALLOWED = "an int, float, string or bool"


def _domain_text(fmt: str, kind: str, example: Any) -> str:
    if fmt == "yaml":
        return {"values": f"{{values: {_fmt(example)}}}", "log": f"{{range: {_fmt(example)}, log: true}}",
                "step8": f"{{range: {_fmt(example)}, step: 8}}"}[kind]
    return {"values": f"{{ values = {_fmt(example)} }}", "log": f"{{ range = {_fmt(example)}, log = true }}",
            "step8": f"{{ range = {_fmt(example)}, step = 8 }}"}[kind]


def _domain_allowed(fmt: str, kinds: str) -> str:
    if fmt == "yaml":
        return f"{kinds}, {{values: [...]}} or {{range: [low, high]}}"
    return f"{kinds}, {{ values = [...] }} or {{ range = [low, high] }}"


# a value check: returns None or (problem, allowed, suggestion)
def _check_tile(v):
    if not isinstance(v, int) or isinstance(v, bool):
        return f"{_fmt(v)} is not an integer", TILE_ALLOWED, None
    if not is_power_of_two(v):
        return f"{v} is not a power of two", TILE_ALLOWED, None
    return None


def _check_swizzle(v):
    if not isinstance(v, int) or isinstance(v, bool):
        return f"{_fmt(v)} is not an integer", SWIZZLE_ALLOWED, None
    if v not in (0, 32, 64, 128):
        return f"{v} is not a swizzle width in bytes", SWIZZLE_ALLOWED, None
    return None


def _check_stages(v):
    if not isinstance(v, int) or isinstance(v, bool):
        return f"{_fmt(v)} is not an integer", STAGES_ALLOWED, None
    if not 1 <= v <= 32:             # deep rings pay where few bytes are in flight per stage (small M)
        return f"{v} stages is out of range", STAGES_ALLOWED, None
    return None


def _check_warps(v):
    if not isinstance(v, int) or isinstance(v, bool):
        return f"{_fmt(v)} is not an integer", WARPS_ALLOWED, None
    if not 1 <= v <= 32:
        return f"{v} warps is out of range", WARPS_ALLOWED + " (1024 threads per block)", None
    return None


def _check_regs(v):
    if not isinstance(v, int) or isinstance(v, bool):
        return f"{_fmt(v)} is not an integer", REGS_ALLOWED, None
    if v % 8:
        return f"{v} registers is not a multiple of 8", REGS_ALLOWED, None
    if not 24 <= v <= 256:
        return f"{v} registers is outside 24..256", REGS_ALLOWED, None
    return None


def _check_param(v):
    if isinstance(v, float) and not math.isfinite(v):
        return f"{_fmt(v)} is not a finite number", PARAM_ALLOWED, None
    if v is None or not isinstance(v, (int, float, str, bool)):
        return f"{_fmt(v)} is not a parameter value", PARAM_ALLOWED, None
    return None


_CHECKS = {"tiles": _check_tile, "swizzle": _check_swizzle, "stages": _check_stages, "params": _check_param,
           "warps": _check_warps, "registers": _check_regs}


def _parse_domain(tree: _Tree, v: Any, path: tuple, kind: str) -> Domain:
    check = _CHECKS[kind]
    fmt = tree.fmt(path)

    def fail(where: tuple, res) -> SpecError:
        problem, allowed, sugg = res
        return tree.error(where, problem, allowed=allowed, suggestion=sugg)

    if isinstance(v, list):
        raise tree.error(path, f"{_fmt(v)} is a bare list", value=v, allowed=_domain_allowed(fmt, "a single value"),
                         suggestion=_domain_text(fmt, "values", v))
    if not isinstance(v, dict):
        res = check(v)
        if res:
            raise tree.error(path, res[0], value=v, allowed=res[1], suggestion=res[2])
        return Fixed(v)
    for k in v:
        if k not in DOMAIN_KEYS:
            raise tree.error(path + (k,), f"unknown key {_fmt(k)}", value=k, allowed=", ".join(DOMAIN_KEYS),
                             suggestion=_suggest(k, DOMAIN_KEYS, _KEY_ALIASES))
    if "values" in v and "range" in v:
        raise tree.error(path, "give either 'values' or 'range', not both", value=v,
                         allowed=_domain_allowed(fmt, "a single value"))
    if "values" not in v and "range" not in v:
        raise tree.error(path, "a domain needs 'values' or 'range'", value=v,
                         allowed=_domain_allowed(fmt, "a single value"))
    if "values" in v:
        for k in ("step", "log"):
            if k in v:
                raise tree.error(path + (k,), f"'{k}' applies to a range, not to a list of values", value=v[k],
                                 allowed="values = [...] alone")
        values = v["values"]
        if not isinstance(values, list):
            raise tree.error(path + ("values",), f"{_fmt(values)} is not a list", value=values,
                             allowed="a non-empty list of values", suggestion=_fmt([values]))
        if not values:
            raise tree.error(path + ("values",), "empty list of values", value=values,
                             allowed="at least one value")
        if len(values) > _MAX_OPTIONS:
            raise tree.error(path + ("values",), f"{len(values)} values", allowed=f"at most {_MAX_OPTIONS} values "
                             "per parameter")
        first: dict = {}                        # (type, value) -> index: the repeat check stays linear
        for i, x in enumerate(values):
            if isinstance(x, (list, dict)) and kind != "params":
                raise tree.error(path + ("values", i), f"{_fmt(x)} is not a single value", value=x,
                                 allowed=check(None)[1])
            res = check(x)
            if res:
                raise tree.error(path + ("values", i), res[0], value=x, allowed=res[1], suggestion=res[2])
            j = first.setdefault((type(x), x), i)
            if j != i:
                raise tree.error(path + ("values", i), f"{_fmt(x)} is repeated (also values[{j}])", value=x,
                                 allowed="distinct values")
        return Choice(tuple(values))
    rng = v["range"]
    rpath = path + ("range",)
    if not isinstance(rng, list) or len(rng) != 2:
        raise tree.error(rpath, f"{_fmt(rng)} is not [low, high]", value=rng,
                         allowed="a list of two integers [low, high] (inclusive)")
    for i, b in enumerate(rng):
        if not isinstance(b, int) or isinstance(b, bool):
            allowed = "integer bounds" + (" (use values = [...] for floats, strings or bools)"
                                          if kind == "params" else "")
            raise tree.error(rpath + (i,), f"{_fmt(b)} is not an integer", value=b, allowed=allowed)
    low, high = rng
    if low > high:
        raise tree.error(rpath, f"low {low} > high {high}", value=rng, allowed="low <= high",
                         suggestion=_fmt([high, low]))
    step = v.get("step", 1)
    log = v.get("log", False)
    if not isinstance(log, bool):
        raise tree.error(path + ("log",), f"{_fmt(log)} is not true or false", value=log, allowed="true, false")
    if not isinstance(step, int) or isinstance(step, bool):
        raise tree.error(path + ("step",), f"{_fmt(step)} is not an integer", value=step, allowed="integers >= 1")
    if step <= 0:
        raise tree.error(path + ("step",), f"step {step} is not positive", value=step, allowed="integers >= 1")
    if log and "step" in v:
        raise tree.error(path + ("step",), "a log range steps by powers of two; 'step' does not apply", value=step,
                         allowed="either log = true or step = N")
    if log:
        for i, b in enumerate(rng):
            if not is_power_of_two(b):
                raise tree.error(rpath + (i,), f"{_fmt(b)} is not a power of two (a log range doubles from low "
                                 f"to high)", value=b, allowed="powers of two as bounds of a log range")
        count = high.bit_length() - low.bit_length() + 1
    else:
        count = (high - low) // step + 1
    if count > _MAX_OPTIONS:
        raise tree.error(rpath, f"{_fmt(rng)} has {count} values", value=rng,
                         allowed=f"at most {_MAX_OPTIONS} values per parameter")
    dom = IntRange(low, high, step=step, log=log)
    for x in dom.options():
        res = check(x)
        if res:
            what = f"{_fmt(rng)}" + (f" with step {step}" if step != 1 else "") + (" (log)" if log else "")
            sugg = None
            if kind == "tiles" and is_power_of_two(low) and is_power_of_two(high):
                sugg = _domain_text(fmt, "log", rng)
            elif kind == "registers" and low % 8 == 0 and high % 8 == 0:
                sugg = _domain_text(fmt, "step8", rng)
            predicate = res[0].split(" is ", 1)[1] if " is " in res[0] else res[0]
            raise tree.error(rpath, f"range {what} yields {x}, which is {predicate}", value=x, allowed=res[1],
                             suggestion=sugg)
    return dom


def _check_name(tree: _Tree, name: Any, path: tuple) -> None:
    if isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name) and name not in _RESERVED_NAMES:
        return
    sugg = None
    if isinstance(name, str):
        s = re.sub(r"\W", "_", name)
        s = "_" + s if s[:1].isdigit() else s
        if s.isidentifier() and not keyword.iskeyword(s) and s not in _RESERVED_NAMES and s != name:
            sugg = s
    raise tree.error(path, f"{_fmt(name)} is not a valid parameter name", value=name,
                     allowed="letters, digits and _, not starting with a digit, not a Python keyword or "
                             "min/max/abs", suggestion=sugg)



def _build_space(tree: _Tree) -> tuple[dict[str, Domain], dict[str, tuple]]:
    data = tree.data
    params: dict[str, Domain] = {}
    origin: dict[str, tuple] = {}

    def add(name: str, dom: Domain, path: tuple) -> None:
        if name in params:
            file, line, shown = tree.where(origin[name])
            at = _dotted(shown) + (f" (line {line})" if line else "")
            raise tree.error(path, f"parameter '{name}' is defined twice; it is already {at}", value=name,
                             allowed="distinct parameter names across tiles, swizzle, stages, warp_roles, params")
        params[name] = dom
        origin[name] = path

    for sec in ("tiles", "swizzle", "stages"):
        if sec in data:
            for name, v in _table(tree, data[sec], (sec,), "parameters").items():
                _check_name(tree, name, (sec, name))
                add(name, _parse_domain(tree, v, (sec, name), sec), (sec, name))
    if "warp_roles" in data:
        for role, body in _table(tree, data["warp_roles"], ("warp_roles",), "roles").items():
            rpath = ("warp_roles", role)
            _check_name(tree, role, rpath)
            body = _table(tree, body, rpath, "warps and registers")
            for k in body:
                if k not in ROLE_KEYS:
                    raise _unknown_key(tree, rpath, k, ROLE_KEYS, "a warp role")
            if "warps" not in body:
                raise tree.error(rpath + ("warps",), f"missing required key 'warps' in role '{role}'",
                                 allowed="warps = N (and optionally registers = R)")
            add(f"{role.upper()}_WARPS", _parse_domain(tree, body["warps"], rpath + ("warps",), "warps"),
                rpath + ("warps",))
            if "registers" in body:
                add(f"{role.upper()}_REGS", _parse_domain(tree, body["registers"], rpath + ("registers",),
                                                          "registers"), rpath + ("registers",))
        _check_total_warps(tree, params)
    if "params" in data:
        for name, v in _table(tree, data["params"], ("params",), "parameters").items():
            _check_name(tree, name, ("params", name))
            add(name, _parse_domain(tree, v, ("params", name), "params"), ("params", name))
    return params, origin


def _warps_per_block(tree: _Tree) -> tuple[int, str]:
    """The arch's warps per block (1024 threads / its warp size) and its name; 32 when unknown."""
    name = tree.data.get("kernel", {}).get("arch") if isinstance(tree.data.get("kernel"), dict) else None
    try:
        a = arch_by_name(name)
    except Exception:            # a bad arch is reported by the [kernel] checks, not here
        return 32, "NVIDIA"
    return a.max_threads_per_block // a.warp_size, a.name


def _check_total_warps(tree: _Tree, params: dict[str, Domain]) -> None:
    """Every role's warps run in one block, so the roles' smallest warp counts must fit the arch's
    limit together; otherwise no config can launch (one role's 1..32 check alone misses that)."""
    roles = [(path, params[name]) for name, path in _role_warps(tree)]
    if not roles:
        return
    limit, arch = _warps_per_block(tree)
    least = [min(d.options()) for _, d in roles]
    if sum(least) > limit:
        shown = " + ".join(f"{p[1]} {w}" for (p, _), w in zip(roles, least))
        raise tree.error(roles[-1][0], f"the warp roles need at least {shown} = {sum(least)} warps per block, "
                         f"more than the {limit} a block of {arch} can hold (1024 threads)",
                         value=sum(least), allowed=f"warps of all roles summing to at most {limit}")


def _role_warps(tree: _Tree) -> list[tuple[str, tuple]]:
    """(ROLE_WARPS parameter name, path of its `warps` key) for each warp role, in file order."""
    roles = tree.data.get("warp_roles") or {}
    return [(f"{r.upper()}_WARPS", ("warp_roles", r, "warps")) for r in roles]


def _check_constraints(space: SearchSpace) -> None:
    """Syntax, names, string literals; then that some config satisfies them all."""
    names = list(space.params)
    for i, c in enumerate(space.constraints):
        try:
            parse_expression(c)
        except ExprError as e:
            if e.kind == "syntax":
                raise _Problem(f"{_fmt(c)} does not parse: " + str(e).split(" does not parse: ", 1)[-1],
                               path=("constraints", i), value=c,
                               allowed="a Python-style expression: " + ALLOWED_SYNTAX) from None
            raise _Problem(str(e).split("; allowed: ")[0], path=("constraints", i), value=c,
                           allowed=ALLOWED_SYNTAX) from None
        for n in expression_names(c):
            if n not in space.params:
                raise _Problem(f"unknown parameter '{n}' in {_fmt(c)}", path=("constraints", i), value=n,
                               allowed=", ".join(names) if names else "no parameters are declared",
                               suggestion=_suggest(n, names))
        for n, lit in string_comparisons(c):
            opts = space.params[n].options()
            strs = [o for o in opts if isinstance(o, str)]
            if not strs:
                raise _Problem(f"{n} is compared with the string {_fmt(lit)} in {_fmt(c)}, but its values are "
                               f"{', '.join(_fmt(o) for o in opts[:8])}", path=("constraints", i), value=lit,
                               allowed=f"values of {n}: " + ", ".join(_fmt(o) for o in opts[:8]))
            if lit not in strs:
                raise _Problem(f"{_fmt(lit)} is not a value of {n} in {_fmt(c)}", path=("constraints", i),
                               value=lit, allowed=f"values of {n}: " + ", ".join(_fmt(o) for o in opts),
                               suggestion=_suggest(lit, strs))
    if not space.constraints:
        return
    # type errors show on the first point of the product (e.g. a string parameter in arithmetic)
    first_point = {n: d.options()[0] for n, d in space.params.items()}
    for i, c in enumerate(space.constraints):
        try:
            _space.evaluate(c, first_point)
        except ExprError as e:
            shown = ", ".join(f"{n}={_fmt(first_point[n])}" for n in expression_names(c))
            raise _Problem(f"{_fmt(c)} cannot be evaluated at {shown}: " + str(e).split(" in '")[0],
                           path=("constraints", i), value=c, allowed=ALLOWED_SYNTAX) from None
    found, finished = space.first()
    if found is not None or not finished:
        return
    raw = space.raw_size()
    listed = ", ".join(_fmt(c) for c in space.constraints)
    detail = ""
    if len(space.constraints) > 1 and raw <= 100_000:
        alone = [c for c in space.constraints if SearchSpace(space.params, [c]).first()[0] is None]
        if alone:
            detail = f"; {_fmt(alone[0])} alone rejects every config"
        else:
            detail = "; each constraint alone is satisfiable, together they are not"
    raise _Problem(f"no config satisfies the constraints: {listed} ({raw} configs before constraints){detail}",
                   path=("constraints",), value=list(space.constraints))
