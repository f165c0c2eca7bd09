"""The search space of a kernel spec: parameter domains, constraints, and a safe expression evaluator.

    Fixed(128)                          one value
    Choice((128, 256))                  a list of values (ints, floats, strings, bools)
    IntRange(2, 5)                      2, 3, 4, 5
    IntRange(32, 128, step=32)          32, 64, 96, 128
    IntRange(16, 256, log=True)         16, 32, 64, 128, 256 (powers of two)

`SearchSpace.grid()` walks the cartesian product in a stable order (parameters in declaration order,
the last one varying fastest; values in domain order) and prunes with every constraint as soon as the
parameters it names are bound. `suggest()` asks an optuna trial for one config; log ranges are
suggested as categoricals over their powers of two, so that every suggestion lies on the grid.

Constraints are Python-like expressions evaluated by `evaluate`, which walks the AST and allows only
numbers, strings (compared with == / !=), parameter names, + - * / // % **, unary - + not,
comparisons, and / or, `a if cond else b` and calls of min / max / abs / cdiv / next_power_of_2. Nothing is
ever `eval`ed.

This module needs neither pydantic nor optuna (optuna is imported by `distributions()` only).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import math
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Union

__all__ = ["Fixed", "Choice", "IntRange", "Domain", "SearchSpace", "evaluate", "expression_names",
           "parse_expression", "ExprError", "is_power_of_two", "ALLOWED_SYNTAX"]

ALLOWED_SYNTAX = ("numbers, parameter names, strings compared with == or !=, + - * / // % **, unary - + not, "
                  "comparisons, and/or, 'x if cond else y', min/max/abs/cdiv/next_power_of_2")


def is_power_of_two(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1 and (v & (v - 1)) == 0


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# ----------------------------------------------------------------------------------------- domains


@dataclass(frozen=True)
class Fixed:
    """A parameter with one value (never asked of the sampler)."""
    value: Any

    def options(self) -> tuple:
        return (self.value,)

    def contains(self, v: Any) -> bool:
        return _same(v, self.value)

    def describe(self) -> dict:
        return {"fixed": self.value}


@dataclass(frozen=True)
class Choice:
    """One of a list of values."""
    values: tuple

    def __post_init__(self):
        object.__setattr__(self, "values", tuple(self.values))
        if not self.values:
            raise ValueError("Choice needs at least one value")

    def options(self) -> tuple:
        return self.values

    def contains(self, v: Any) -> bool:
        return any(_same(v, x) for x in self.values)

    def describe(self) -> dict:
        return {"values": list(self.values)}


@dataclass(frozen=True)
class IntRange:
    """Integers low..high inclusive, every `step`; with log=True the powers of two between low and high
    (both bounds must then be powers of two)."""
    low: int
    high: int
    step: int = 1
    log: bool = False

    def __post_init__(self):
        if not (_is_int(self.low) and _is_int(self.high) and _is_int(self.step)):
            raise ValueError(f"IntRange bounds and step must be integers, got {self.low!r}, {self.high!r}, "
                             f"step {self.step!r}")
        if self.low > self.high:
            raise ValueError(f"IntRange low {self.low} > high {self.high}")
        if self.step <= 0:
            raise ValueError(f"IntRange step {self.step} must be > 0")
        if self.log:
            if self.step != 1:
                raise ValueError("IntRange: a log range steps by powers of two; step must be 1")
            if not (is_power_of_two(self.low) and is_power_of_two(self.high)):
                raise ValueError(f"IntRange: log range bounds must be powers of two, got {self.low}, {self.high}")

    def options(self) -> tuple:
        if self.log:
            out, v = [], self.low
            while v <= self.high:
                out.append(v)
                v *= 2
            return tuple(out)
        return tuple(range(self.low, self.high + 1, self.step))

    def contains(self, v: Any) -> bool:
        if not _is_int(v) or not (self.low <= v <= self.high):
            return False
        return is_power_of_two(v) if self.log else (v - self.low) % self.step == 0

    def describe(self) -> dict:
        return {"range": [self.low, self.high], "step": self.step, "log": self.log}


Domain = Union[Fixed, Choice, IntRange]


def _same(a: Any, b: Any) -> bool:
    """Equality that does not confuse True with 1 or 1 with 1.0 with "1"."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return a == b


# ------------------------------------------------------------------------------------ expressions


class ExprError(ValueError):
    """A constraint that is not allowed or cannot be evaluated. `construct` is the offending source text
    (or name), `col` the 1-based column where known, `kind` one of syntax / construct / name / eval."""

    def __init__(self, message: str, *, kind: str, construct: str = "", col: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.construct = construct
        self.col = col

    def __reduce__(self):
        return (_rebuild_expr_error, (str(self), self.kind, self.construct, self.col))


def _rebuild_expr_error(message, kind, construct, col):
    return ExprError(message, kind=kind, construct=construct, col=col)


def _cdiv(a, b):
    """ceil(a / b) for integers (division by zero raises ZeroDivisionError, reported as such)."""
    return -(-a // b)


def _next_power_of_2(n):
    """The least power of two >= n (1 for n <= 1), as Triton's `next_power_of_2`."""
    return 1 if n <= 1 else 1 << (int(math.ceil(n)) - 1).bit_length()


_FUNCS = {"min": min, "max": max, "abs": abs, "cdiv": _cdiv, "next_power_of_2": _next_power_of_2}
# (least, most) arguments of each function (None: any number)
_ARITY = {"min": (2, None), "max": (2, None), "abs": (1, 1), "cdiv": (2, 2), "next_power_of_2": (1, 1)}
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge}
_NODE_NAMES = {
    "Attribute": "attribute access", "Subscript": "subscript", "Lambda": "lambda", "ListComp": "comprehension",
    "SetComp": "comprehension", "DictComp": "comprehension", "GeneratorExp": "generator expression",
    "List": "list", "Tuple": "tuple", "Set": "set", "Dict": "dict", "JoinedStr": "f-string",
    "NamedExpr": "assignment expression", "Await": "await", "Yield": "yield", "YieldFrom": "yield",
    "Starred": "starred argument", "Slice": "slice", "MatMult": "operator @", "BitAnd": "operator &",
    "BitOr": "operator |", "BitXor": "operator ^", "LShift": "operator <<", "RShift": "operator >>",
    "Invert": "operator ~", "In": "operator in", "NotIn": "operator not in", "Is": "operator is",
    "IsNot": "operator is not", "Call": "call",
}


def _snippet(node: ast.AST, expr: str) -> str:
    try:
        seg = ast.get_source_segment(expr, node)
    except Exception:
        seg = None
    if seg is None:
        try:
            seg = ast.unparse(node)
        except Exception:
            seg = type(node).__name__
    return seg


def _reject(node: ast.AST, expr: str, what: str | None = None) -> ExprError:
    what = what or _NODE_NAMES.get(type(node).__name__, type(node).__name__)
    snippet = _snippet(node, expr)
    col = getattr(node, "col_offset", None)
    return ExprError(f"{what} '{snippet}' is not allowed in constraint '{expr}'; allowed: {ALLOWED_SYNTAX}",
                     kind="construct", construct=snippet, col=None if col is None else col + 1)


def _validate(node: ast.AST, expr: str) -> None:
    """Raise ExprError for anything outside the allowed subset."""
    if isinstance(node, ast.Expression):
        return _validate(node.body, expr)
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, (bool, int, float, str)):
            return
        raise _reject(node, expr, "constant")
    if isinstance(node, ast.Name):
        if node.id in _FUNCS:
            raise _reject(node, expr, "function name without a call")
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise _reject(node, expr, _NODE_NAMES.get(type(node.op).__name__))
        _validate(node.left, expr)
        _validate(node.right, expr)
        return
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            raise _reject(node, expr, _NODE_NAMES.get(type(node.op).__name__))
        return _validate(node.operand, expr)
    if isinstance(node, ast.BoolOp):
        for v in node.values:
            _validate(v, expr)
        return
    if isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in _CMPOPS:
                raise _reject(node, expr, _NODE_NAMES.get(type(op).__name__))
        _validate(node.left, expr)
        for c in node.comparators:
            _validate(c, expr)
        return
    if isinstance(node, ast.IfExp):
        for v in (node.test, node.body, node.orelse):
            _validate(v, expr)
        return
    if isinstance(node, ast.Call):
        if not (isinstance(node.func, ast.Name) and node.func.id in _FUNCS):
            raise _reject(node, expr, "call")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise _reject(node, expr, "call with keyword or starred arguments")
        name = node.func.id
        least, most = _ARITY[name]
        if len(node.args) < least or (most is not None and len(node.args) > most):
            n = len(node.args)
            raise _reject(node, expr, f"{name}() with {n} argument{'' if n == 1 else 's'}")
        for a in node.args:
            _validate(a, expr)
        return
    raise _reject(node, expr)


@functools.lru_cache(maxsize=4096)
def parse_expression(expr: str) -> ast.Expression:
    """Parse and check a constraint; ExprError (a ValueError) names the offending construct."""
    if not isinstance(expr, str):
        raise ExprError(f"a constraint must be a string, got {expr!r}", kind="syntax")
    if not expr.strip():
        raise ExprError("empty constraint", kind="syntax")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        col = e.offset
        reason = (e.msg or "invalid syntax").split(" (")[0]
        where = f" at column {col}" if col else ""
        raise ExprError(f"constraint '{expr}' does not parse: {reason}{where}", kind="syntax",
                        construct=expr, col=col) from None
    _validate(tree, expr.strip())
    return tree


def expression_names(expr: str) -> list[str]:
    """The parameter names a constraint uses, in order of first appearance (min/max/abs excluded)."""
    tree = parse_expression(expr)
    funcs = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    pos: dict[str, tuple[int, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and id(node) not in funcs:
            key = (node.lineno, node.col_offset)
            pos[node.id] = min(pos.get(node.id, key), key)
    return sorted(pos, key=lambda n: pos[n])


def string_comparisons(expr: str) -> list[tuple[str, str]]:
    """(name, literal) for every `NAME == "lit"` / `"lit" != NAME` in the constraint."""
    tree = parse_expression(expr)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op, a, b in zip(node.ops, operands, operands[1:]):
                if not isinstance(op, (ast.Eq, ast.NotEq)):
                    continue
                for x, y in ((a, b), (b, a)):
                    if isinstance(x, ast.Name) and isinstance(y, ast.Constant) and isinstance(y.value, str):
                        out.append((x.id, y.value))
    return out


_MAX_EXPONENT = 256


def _num(v: Any, node: ast.AST, expr: str, what: str):
    if isinstance(v, (int, float)):      # bool is an int: True + 1 is allowed, as in Python
        return v
    raise ExprError(f"{what} needs numbers, got {v!r} in '{_snippet(node, expr)}' of constraint '{expr}'",
                    kind="eval", construct=_snippet(node, expr))


def _eval(node: ast.AST, env: dict[str, Any], expr: str):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        try:
            return env[node.id]
        except KeyError:
            raise ExprError(f"unknown name '{node.id}' in constraint '{expr}'", kind="name",
                            construct=node.id, col=node.col_offset + 1) from None
    if isinstance(node, ast.BinOp):
        left = _num(_eval(node.left, env, expr), node, expr, "arithmetic")
        right = _num(_eval(node.right, env, expr), node, expr, "arithmetic")
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise ExprError(f"exponent {right!r} too large in '{_snippet(node, expr)}' of constraint '{expr}'",
                            kind="eval", construct=_snippet(node, expr))
        try:
            return _BINOPS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExprError(f"division by zero in '{_snippet(node, expr)}' of constraint '{expr}'", kind="eval",
                            construct=_snippet(node, expr)) from None
        except (OverflowError, ValueError, TypeError) as e:
            raise ExprError(f"{e} in '{_snippet(node, expr)}' of constraint '{expr}'", kind="eval",
                            construct=_snippet(node, expr)) from None
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env, expr)
        if isinstance(node.op, ast.Not):
            return not v
        v = _num(v, node, expr, "unary " + ("-" if isinstance(node.op, ast.USub) else "+"))
        return -v if isinstance(node.op, ast.USub) else +v
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(bool(_eval(v, env, expr)) for v in node.values)
        return any(bool(_eval(v, env, expr)) for v in node.values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, expr)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env, expr)
            if not isinstance(op, (ast.Eq, ast.NotEq)):
                _num(left, node, expr, "comparison")
                _num(right, node, expr, "comparison")
                ok = _CMPOPS[type(op)](left, right)
            else:
                ok = _same(left, right) if isinstance(op, ast.Eq) else not _same(left, right)
            if not ok:
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, env, expr) if _eval(node.test, env, expr) else _eval(node.orelse, env, expr)
    if isinstance(node, ast.Call):
        args = [_num(_eval(a, env, expr), node, expr, node.func.id + "()") for a in node.args]
        try:
            return _FUNCS[node.func.id](*args)
        except ZeroDivisionError:
            raise ExprError(f"division by zero in '{_snippet(node, expr)}' of constraint '{expr}'", kind="eval",
                            construct=_snippet(node, expr)) from None
    raise _reject(node, expr)   # unreachable after _validate


def evaluate(expr: str, names: dict[str, Any]) -> bool | float:
    """Evaluate a constraint over `names` (parameter -> value) without eval(). Anything outside the
    allowed subset, an unknown name, or an error while evaluating raises ValueError (ExprError) naming
    the offending construct."""
    tree = parse_expression(expr)
    return _eval(tree.body, names, expr.strip())


# ---------------------------------------------------------------------------------------- the space


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return repr(v)
    return repr(v)


def _holds(constraints, config: dict, budget: list[int] | None = None) -> bool:
    """Whether every constraint is true for `config` (one that fails to evaluate counts as false).
    `budget` ([n]) counts evaluations down and raises _BudgetExceeded when spent."""
    for c in constraints:
        if budget is not None:
            budget[0] -= 1
            if budget[0] < 0:
                raise _BudgetExceeded()
        try:
            if not evaluate(c, config):
                return False
        except ExprError:
            return False
    return True


@dataclass
class SearchSpace:
    """Named parameter domains and the constraints every config must satisfy."""
    params: dict[str, Domain] = field(default_factory=dict)
    constraints: list[str] = field(default_factory=list)

    # -- structure

    def names(self) -> list[str]:
        return list(self.params)

    def tunable(self) -> dict[str, Domain]:
        """The parameters the sampler chooses (all but the fixed ones)."""
        return {k: d for k, d in self.params.items() if not isinstance(d, Fixed)}

    def fixed(self) -> dict[str, Any]:
        return {k: d.value for k, d in self.params.items() if isinstance(d, Fixed)}

    def raw_size(self) -> int:
        """Number of configs before constraints."""
        return math.prod(len(d.options()) for d in self.params.values())

    def describe(self) -> dict:
        """A JSON-able description (used for the spec's content hash)."""
        return {"params": {k: d.describe() for k, d in self.params.items()}, "constraints": list(self.constraints)}

    # -- constraints

    def _plan(self) -> list[list[str]]:
        """plan[d]: the constraints to check once the first d parameters are bound (d = 0 .. n)."""
        order = {n: i for i, n in enumerate(self.params)}
        n = len(self.params)
        plan: list[list[str]] = [[] for _ in range(n + 1)]
        for c in self.constraints:
            try:
                names = expression_names(c)
            except ExprError:
                plan[n].append(c)
                continue
            if any(x not in order for x in names):
                plan[n].append(c)      # fails with "unknown name" when evaluated
            else:
                plan[max((order[x] + 1 for x in names), default=0)].append(c)
        return plan

    def _violation(self, constraint: str, config: dict[str, Any]) -> str | None:
        try:
            ok = evaluate(constraint, config)
        except ExprError as e:
            return f"constraint '{constraint}' cannot be evaluated: {e}"
        if ok:
            return None
        try:
            used = expression_names(constraint)
        except ExprError:
            used = []
        values = ", ".join(f"{n}={_fmt(config[n])}" for n in used if n in config)
        return f"constraint '{constraint}' is false for {values}" if values else f"constraint '{constraint}' is false"

    def check(self, config: dict[str, Any]) -> str | None:
        """None if `config` is a point of this space that satisfies every constraint, else why not."""
        missing = [n for n in self.params if n not in config]
        if missing:
            return "missing parameter" + ("s " if len(missing) > 1 else " ") + ", ".join(missing)
        unknown = [n for n in config if n not in self.params]
        if unknown:
            return ("unknown parameter" + ("s " if len(unknown) > 1 else " ") + ", ".join(unknown)
                    + f" (parameters: {', '.join(self.params)})")
        for n, d in self.params.items():
            if not d.contains(config[n]):
                return f"{n}={_fmt(config[n])} is not in its domain ({_describe_options(d)})"
        for c in self.constraints:
            why = self._violation(c, config)
            if why:
                return why
        return None

    # -- enumeration

    def _walk(self, budget: list[int] | None = None) -> Iterator[dict[str, Any]]:
        names = list(self.params)
        options = [self.params[n].options() for n in names]
        plan = self._plan()
        config: dict[str, Any] = {}

        def ok(depth: int) -> bool:
            return _holds(plan[depth], config, budget)

        def rec(depth: int) -> Iterator[dict[str, Any]]:
            if depth == len(names):
                yield dict(config)
                return
            name = names[depth]
            for v in options[depth]:
                config[name] = v
                if ok(depth + 1):
                    yield from rec(depth + 1)
            del config[name]

        if ok(0):
            yield from rec(0)

    def grid(self) -> Iterator[dict[str, Any]]:
        """Every config that satisfies the constraints: the cartesian product in declaration order (the
        last parameter varies fastest), pruned as soon as a constraint's parameters are bound."""
        return self._walk()

    def _components(self) -> tuple[list[tuple[list[str], list[str]]], list[str]]:
        """Constraints couple only the parameters they name: ([(names, constraints)] per connected group,
        the parameters no constraint names). A constraint that does not parse or names an unknown
        parameter forms a group of its own (it rejects everything)."""
        parent = {n: n for n in self.params}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        bad: list[str] = []
        named: list[tuple[str, list[str]]] = []
        for c in self.constraints:
            try:
                names = expression_names(c)
            except ExprError:
                bad.append(c)
                continue
            if any(n not in self.params for n in names):
                bad.append(c)
                continue
            named.append((c, names))
            for a in names[1:]:
                parent[find(a)] = find(names[0])
        groups: dict[str, tuple[list[str], list[str]]] = {}
        constant: list[str] = list(bad)
        for c, names in named:
            if not names:
                constant.append(c)
                continue
            groups.setdefault(find(names[0]), ([], []))[1].append(c)
        for n in self.params:
            if find(n) in groups:
                groups[find(n)][0].append(n)
        comps = [([], constant)] if constant else []
        comps += list(groups.values())
        coupled = {n for names, _ in comps for n in names}
        return comps, [n for n in self.params if n not in coupled]

    def size(self) -> int:
        """The number of configs grid() yields, counted per group of parameters that constraints couple
        (the free parameters multiply in), without enumerating the product."""
        comps, free = self._components()
        total = math.prod(len(self.params[n].options()) for n in free)
        for names, constraints in comps:
            if not total:
                return 0
            sub = SearchSpace({n: self.params[n] for n in names}, constraints)
            total *= sub._count()
        return total

    def _count(self) -> int:
        names = list(self.params)
        options = [self.params[n].options() for n in names]
        plan = self._plan()
        last = max((d for d, cs in enumerate(plan) if cs), default=0)
        tail = [math.prod(len(o) for o in options[d:]) for d in range(len(names) + 1)]
        config: dict[str, Any] = {}

        def ok(depth: int) -> bool:
            return _holds(plan[depth], config)

        def rec(depth: int) -> int:
            if depth >= last:
                return tail[depth]
            name, total = names[depth], 0
            for v in options[depth]:
                config[name] = v
                if ok(depth + 1):
                    total += rec(depth + 1)
            del config[name]
            return total

        return rec(0) if ok(0) else 0

    def first(self, budget: int = 200_000) -> tuple[dict[str, Any] | None, bool]:
        """(the first config grid() yields, or None; whether the search finished within `budget`
        constraint evaluations). Each group of coupled parameters is searched on its own."""
        comps, free = self._components()
        found: dict[str, Any] = {n: self.params[n].options()[0] for n in free}
        b = [budget]
        for names, constraints in comps:
            sub = SearchSpace({n: self.params[n] for n in names}, constraints)
            try:
                config = next(sub._walk(b), None)
            except _BudgetExceeded:
                return None, False
            if config is None:
                return None, True
            found.update(config)
        return {n: found[n] for n in self.params}, True

    # -- optuna

    def suggest(self, trial) -> dict[str, Any]:
        """One config from an optuna trial (fixed parameters included; constraints are NOT checked)."""
        out: dict[str, Any] = {}
        for name, d in self.params.items():
            if isinstance(d, Fixed):
                out[name] = d.value
            elif isinstance(d, Choice):
                out[name] = trial.suggest_categorical(name, list(d.values))
            elif d.log:
                # powers of two only: a categorical over them (suggest_int(log=True) would give any int)
                out[name] = trial.suggest_categorical(name, list(d.options()))
            else:
                out[name] = trial.suggest_int(name, d.low, d.high, step=d.step)
        return out

    def distributions(self) -> dict[str, Any]:
        """The optuna distribution suggest() uses for each non-fixed parameter."""
        from optuna.distributions import CategoricalDistribution, IntDistribution
        out: dict[str, Any] = {}
        for name, d in self.params.items():
            if isinstance(d, Fixed):
                continue
            if isinstance(d, Choice):
                out[name] = CategoricalDistribution(list(d.values))
            elif d.log:
                out[name] = CategoricalDistribution(list(d.options()))
            else:
                out[name] = IntDistribution(d.low, d.high, step=d.step)
        return out

    @staticmethod
    def config_id(config: dict[str, Any]) -> str:
        """A stable short id of a config: 12 hex digits of the sha256 of its sorted-key JSON."""
        text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


class _BudgetExceeded(Exception):
    pass


def _describe_options(d: Domain) -> str:
    opts = d.options()
    shown = ", ".join(_fmt(v) for v in opts[:12])
    return shown + (", ..." if len(opts) > 12 else "")
