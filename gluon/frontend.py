"""AST frontend: rewrites a kernel's Python control flow over symbolic values into IR regions.

Tracing runs the kernel's Python code once with symbolic values. Plain Python cannot branch or loop on
a value that only exists on the GPU, so before tracing we rewrite the function's AST:

* ``for i in range(a, b, c): body`` (also ``gl.range``) becomes a loop object that opens an IR ``for``
  region, with every local name assigned in ``body`` threaded through as a candidate loop-carried value::

      __gl_loop = __gl__.loop(a, b, c, ("acc",), (__gl__.lookup(locals(), "acc"),))
      for i in __gl_loop:                      # iterates exactly once, inside the region
          (acc,) = __gl_loop.carried
          body
          __gl_loop.end((acc,))
      (acc,) = __gl_loop.results

* ``with for_range(...) as k: body`` gets the same threading of locals.
* ``if cond: A else: B`` runs as plain Python when ``cond`` is a Python value (constexpr), and otherwise
  becomes ``__gl__.branch(cond, names, values)`` with ``then``/``else`` regions (a scalar condition) or
  masked execution (a per-thread tile condition, as in ``if idx < n: dst[idx] = src[idx]``). Every name
  either branch assigns is read back through ``__gl__.lookup`` at the end of each branch, so a name one
  branch never binds reads as undefined there instead of raising UnboundLocalError; the branch object then
  yields only what holds a GPU value of one type on both paths (language/control.py ``_merge``), and a
  name left undefined is an error only where the kernel uses it after the ``if``.
* After a rewritten loop its index name is rebound to an undefined value (``loop.index_after``): the GPU
  value exists only inside the loop's region, so it must not be yielded out of an ``if`` or used later.

Only the function given to ``transform`` is rewritten: a kernel, or a helper decorated with ``@gl.helper``
(language/control.py); an undecorated helper it calls runs as plain Python.
``static_range`` loops, ``while`` over Python values and everything else stay Python. ``break``,
``continue`` and ``return`` inside a rewritten loop or branch are rejected with the user's line, and so is
a kernel's ``return value`` anywhere (a launch has no result; a bare ``return`` is fine).
The rewritten function keeps the original file name and line numbers, so diagnostics point at the
user's source.
"""
from __future__ import annotations

import ast
import copy
import inspect
import sys
import textwrap
from typing import Any, Callable

LOOP_CALLS = {"range"}              # `for _ in range(...)` / `gl.range(...)` / `tl.range(...)`
WITH_LOOP_CALLS = {"for_range"}     # `with for_range(...) as k:`


class FrontendError(SyntaxError):
    pass


class ReturnValueError(FrontendError):
    """A kernel's `return value` (the caller turns it into a GluonError at that line)."""


class SelfCallError(ReturnValueError):
    """A kernel calling itself (the caller turns it into a GluonError at that line, as a return value)."""


def _reject_self_calls(fdef: ast.FunctionDef, filename: str, line_offset: int) -> None:
    """A kernel that calls itself by name: inside the rewritten function the name is the traced function
    itself, so the trace recursed until Python's RecursionError (and a GPU kernel cannot call a kernel at
    all). A name the kernel rebinds (a parameter or a local) is not a self-call."""
    if fdef.name in {a.arg for a in fdef.args.args + fdef.args.kwonlyargs + fdef.args.posonlyargs} \
            or fdef.name in _assigned_names(fdef.body):
        return
    for n in ast.walk(fdef):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == fdef.name:
            raise SelfCallError(
                f"[GL501] kernel {fdef.name} calls itself: a GPU kernel cannot call a kernel (no recursion, no "
                "nested launch); move the shared code into a @gl.helper function and call that, or unroll the "
                "repetition with gl.static_range over a constexpr",
                (filename, n.lineno + line_offset, n.col_offset + 1, None))


def _jumps(nodes, loops_too: bool):
    """The Return (and, while `loops_too`, Break/Continue) statements under `nodes` that leave them:
    not inside a nested function or lambda; a Break/Continue not inside a nested loop."""
    for n in nodes:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(n, ast.Return) or (loops_too and isinstance(n, (ast.Break, ast.Continue))):
            yield n
            continue
        if isinstance(n, (ast.For, ast.AsyncFor, ast.While)):
            # the loop's own header and else clause are outside it; its body is its own for break/continue
            yield from _jumps(n.body, loops_too=False)
            yield from _jumps(n.orelse, loops_too=loops_too)
            continue
        yield from _jumps(list(ast.iter_child_nodes(n)), loops_too=loops_too)


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name):
            return f.id
        if isinstance(f, ast.Attribute):
            return f.attr
    return None


def _assigned_names(stmts: list[ast.stmt]) -> list[str]:
    """Local names (re)bound anywhere in `stmts`, in first-seen order, not descending into defs."""
    seen: dict[str, None] = {}

    class V(ast.NodeVisitor):
        def visit_Name(self, n: ast.Name):
            if isinstance(n.ctx, ast.Store) and not n.id.startswith("__gl"):
                seen.setdefault(n.id)

        def visit_FunctionDef(self, n):  # nested defs have their own scope
            pass

        visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    for s in stmts:
        V().visit(s)
    return list(seen)


def _loads(node: ast.AST | None) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} if node else set()


def _stores(node: ast.AST | None) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} if node else set()


def _live_in(stmts: list[ast.stmt], names: list[str]) -> list[str]:
    """Names of `names` that `stmts` may read before writing (so a loop must carry them in)."""
    live: set[str] = set()

    def run(block: list[ast.stmt], written: set[str]) -> set[str]:
        """Walk a block in order; return the names it definitely writes."""
        written = set(written)
        for st in block:
            if isinstance(st, ast.If):
                live.update(_loads(st.test) - written)
                both = run(st.body, written) & run(st.orelse, written)
                written |= both
            elif isinstance(st, (ast.For, ast.AsyncFor)):
                live.update(_loads(st.iter) - written)
                run(st.body, written | _stores(st.target))   # may run zero times: writes don't count
                run(st.orelse, written)
            elif isinstance(st, ast.While):
                live.update(_loads(st.test) - written)
                run(st.body, written)
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                for item in st.items:
                    live.update(_loads(item.context_expr) - written)
                    written |= _stores(item.optional_vars)
                written = run(st.body, written)
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                written.add(st.name)
            else:
                value_loads = _loads(st)
                if isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
                    value_loads.add(st.target.id)
                live.update(value_loads - written)
                written |= _stores(st)
        return written

    run(stmts, set())
    return [n for n in names if n in live]


def _names_tuple(names: list[str], ctx) -> ast.expr:
    return ast.Tuple([ast.Name(n, ctx()) for n in names], ctx())


def _lookups(names: list[str]) -> ast.expr:
    return ast.Tuple([
        ast.Call(ast.Attribute(ast.Name("__gl__", ast.Load()), "lookup", ast.Load()),
                 [ast.Call(ast.Name("locals", ast.Load()), [], []), ast.Constant(n)], [])
        for n in names], ast.Load())


def _assign(names: list[str], value: ast.expr) -> list[ast.stmt]:
    if not names:
        return [ast.Expr(value)]
    return [ast.Assign([_names_tuple(names, ast.Store)], value)]


def _attr(obj: str, attr: str) -> ast.expr:
    return ast.Attribute(ast.Name(obj, ast.Load()), attr, ast.Load())


def _call(fn: ast.expr, *args: ast.expr) -> ast.expr:
    return ast.Call(fn, list(args), [])


def _index_after(loop: str, target: ast.expr) -> list[ast.stmt]:
    """`i = <loop>.index_after("i")`: after a GPU loop its index is undefined (it lives in the loop's region)."""
    if not isinstance(target, ast.Name):
        return []
    return [ast.Assign([ast.Name(target.id, ast.Store())], _call(_attr(loop, "index_after"), ast.Constant(target.id)))]


def _locate(stmts: list[ast.stmt], node: ast.stmt, keep_span: tuple = ()) -> list[ast.stmt]:
    """Give synthesized statements the user's line (start and end, so frames report that line)."""
    for s in stmts:
        ast.copy_location(s, node)
        if s not in keep_span:
            s.end_lineno = node.lineno
    return stmts


class _Rewriter(ast.NodeTransformer):
    def __init__(self, filename: str, line_offset: int = 0):
        self.filename = filename
        self.line_offset = line_offset
        self.counter = 0

    def _fresh(self, stem: str) -> str:
        self.counter += 1
        return f"__gl_{stem}{self.counter}"

    def _reject_jumps(self, stmts: list[ast.stmt], what: str) -> None:
        """A `return`, or a `break`/`continue` of this loop or of the loop around this branch, cannot leave a
        GPU loop or branch. Nested defs and lambdas are their own functions, and a `break`/`continue` in a
        nested loop belongs to that loop (which checks its own body when it runs on the GPU)."""
        for n in _jumps(stmts, loops_too=True):
            kind = type(n).__name__.lower()
            raise FrontendError(
                f"[GL512] '{kind}' inside a {what} over GPU values is not supported: the loop/branch runs on the GPU; "
                "restructure with a condition or a mask", (self.filename, n.lineno + self.line_offset, n.col_offset + 1,
                                                           None))

    # for i in range(...)
    def visit_For(self, node: ast.For):
        if _call_name(node.iter) not in LOOP_CALLS or node.orelse:
            self.generic_visit(node)
            return node
        self._reject_jumps(node.body, "loop")
        # names and liveness come from the user's code, before nested statements are rewritten
        names = _assigned_names(node.body)
        if isinstance(node.target, ast.Name):
            names = [n for n in names if n != node.target.id]
        live = tuple(_live_in(node.body, names))
        self.generic_visit(node)
        call = node.iter
        loop = self._fresh("loop")
        args = list(call.args)
        setup = ast.Assign([ast.Name(loop, ast.Store())], ast.Call(
            _attr("__gl__", "loop"), [ast.Tuple(args, ast.Load()), ast.Constant(tuple(names)), _lookups(names),
                                     ast.Constant(live)], call.keywords))
        body = _assign(names, _attr(loop, "carried")) if names else []
        body += node.body
        body.append(ast.Expr(_call(_attr(loop, "end"), _names_tuple(names, ast.Load))))
        new_for = ast.For(node.target, ast.Name(loop, ast.Load()), body, [], lineno=node.lineno)
        after = _assign(names, _attr(loop, "results")) if names else []
        after += _index_after(loop, node.target)
        return _locate([setup, new_for, *after], node, keep_span=(new_for,))

    # with for_range(...) as k:
    def visit_With(self, node: ast.With):
        if len(node.items) != 1 or _call_name(node.items[0].context_expr) not in WITH_LOOP_CALLS:
            self.generic_visit(node)
            return node
        self._reject_jumps(node.body, "loop")
        item = node.items[0]
        names = _assigned_names(node.body)
        if isinstance(item.optional_vars, ast.Name):
            names = [n for n in names if n != item.optional_vars.id]
        live = tuple(_live_in(node.body, names))
        self.generic_visit(node)
        loop = self._fresh("loop")
        setup = [ast.Assign([ast.Name(loop, ast.Store())], item.context_expr)]
        body, after = node.body, _index_after(loop, item.optional_vars)
        if names:
            setup.append(ast.Expr(_call(_attr(loop, "carry"), ast.Constant(tuple(names)), _lookups(names),
                                        ast.Constant(live))))
            body = _assign(names, _attr(loop, "carried")) + body
            body.append(ast.Expr(_call(_attr(loop, "end"), _names_tuple(names, ast.Load))))
            after = _assign(names, _attr(loop, "results")) + after
        new_with = ast.With([ast.withitem(ast.Name(loop, ast.Load()), item.optional_vars)], body)
        return _locate([*setup, new_with, *after], node, keep_span=(new_with,))

    # if cond: ... else: ...
    def visit_If(self, node: ast.If):
        """One form for both kinds of condition, each branch body written once (an `elif` chain stays linear
        in size): on a static condition (`__gl__.is_static`) the taken body runs as Python; on a GPU value both
        run between the branch object's marks, which merge the names they assign."""
        names = _assigned_names(node.body + node.orelse)
        self.generic_visit(node)
        cond, br, static, take = self._fresh("cond"), self._fresh("if"), self._fresh("static"), self._fresh("take")

        def load(n: str) -> ast.expr:
            return ast.Name(n, ast.Load())

        def runs(want: bool) -> ast.expr:     # not static or (take == want)
            t = load(take) if want else ast.UnaryOp(ast.Not(), load(take))
            return ast.BoolOp(ast.Or(), [ast.UnaryOp(ast.Not(), load(static)), t])
        try:
            self._reject_jumps(node.body + node.orelse, "branch")
            begin: list[ast.stmt] = [
                ast.Assign([ast.Name(br, ast.Store())], _call(
                    _attr("__gl__", "branch"), load(cond), ast.Constant(tuple(names)), _lookups(names))),
                ast.Expr(_call(_attr(br, "then_begin")))]
        except FrontendError as err:
            # keep Python semantics for static conditions; a symbolic one gets the error at run time
            begin = [ast.Raise(_call(_attr("__gl__", "frontend_error"), ast.Constant(str(err.msg)),
                                     ast.Constant(err.lineno)), None)]
        synth: list[ast.stmt] = [
            ast.Assign([ast.Name(cond, ast.Store())], node.test),
            ast.Assign([ast.Name(static, ast.Store())], _call(_attr("__gl__", "is_static"), load(cond))),
            ast.If(load(static), [ast.Assign([ast.Name(take, ast.Store())], _call(_attr("__gl__", "truth"),
                                                                              load(cond)))], begin),
        ]
        then_if = ast.If(runs(True), node.body, [])
        middle = ast.If(ast.UnaryOp(ast.Not(), load(static)), [
            ast.Expr(_call(_attr(br, "then_end"), _lookups(names))),    # (a name one side lacks is undefined)
            *_assign(names, _call(_attr(br, "else_begin")))], [])
        else_if = [ast.If(runs(False), node.orelse, [])] if node.orelse else []
        end = ast.If(ast.UnaryOp(ast.Not(), load(static)), [
            ast.Expr(_call(_attr(br, "else_end"), _lookups(names))),
            *_assign(names, _attr(br, "results"))], [])
        for st in synth + [middle, end]:
            _locate([st] + [x for x in ast.walk(st) if isinstance(x, ast.stmt) and x is not st
                            and x not in node.body and x not in node.orelse], node)
        _locate([then_if, *else_if], node, keep_span=(then_if, *else_if))
        return synth + [then_if, middle, *else_if, end]


def _reject_return_values(fdef: ast.FunctionDef, filename: str, line_offset: int) -> None:
    """A kernel's `return x` would be dropped silently (a launch has no result), so refuse it at its line.
    A bare `return` (or `return None`) stays allowed; nested defs and lambdas may return what they like."""
    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(child, ast.Return) and child.value is not None and not (
                    isinstance(child.value, ast.Constant) and child.value.value is None):
                raise ReturnValueError(
                    "[GL511] a kernel cannot return a value (a launch has no result, so it would be dropped); "
                    "write it to an output pointer instead, e.g. gl.store(out_ptr + offs, value)",
                    (filename, child.lineno + line_offset, child.col_offset + 1, None))
            visit(child)

    visit(fdef)


def transform(fn: Callable, helpers: Any, kernel: bool = False) -> Callable:
    """Return `fn` with its symbolic control flow rewritten; `helpers` is bound to `__gl__` in it.
    `kernel`: fn is a kernel (not a @gl.helper), so it may not return a value."""
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError) as e:
        raise FrontendError(f"cannot read the source of kernel {fn.__qualname__}: {e}; "
                            "kernels must be defined in a file (not typed at an interactive prompt)") from e
    filename = inspect.getsourcefile(fn) or "<kernel>"
    first_line = fn.__code__.co_firstlineno
    tree = ast.parse(textwrap.dedent(src))
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise FrontendError(f"{fn.__qualname__} is not a plain function")
    fdef.decorator_list = []
    if kernel:
        _reject_self_calls(fdef, filename, first_line - 1)
        _reject_return_values(fdef, filename, first_line - 1)
    _Rewriter(filename, first_line - 1).visit(fdef)
    freevars = fn.__code__.co_freevars
    # def __gl_make(__gl__, <freevars>): <fdef>; return <name>
    maker = ast.FunctionDef(
        name="__gl_make",
        args=ast.arguments(posonlyargs=[], args=[ast.arg("__gl__")] + [ast.arg(v) for v in freevars],
                           kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[fdef, ast.Return(ast.Name(fdef.name, ast.Load()))], decorator_list=[], returns=None,
        **({"type_params": []} if sys.version_info >= (3, 12) else {}))
    module = ast.Module([maker], type_ignores=[])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, first_line - 1)
    code = compile(module, filename, "exec")
    ns: dict[str, Any] = {}
    exec(code, fn.__globals__, ns)
    cells = [c.cell_contents for c in (fn.__closure__ or ())]
    new_fn = ns["__gl_make"](helpers, *cells)
    new_fn.__defaults__ = fn.__defaults__
    new_fn.__kwdefaults__ = fn.__kwdefaults__
    new_fn.__wrapped__ = fn
    return new_fn
