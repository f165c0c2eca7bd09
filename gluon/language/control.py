"""Control flow and warp roles.

Counted GPU loops (`Loop`, made by `range` / `for_range`; `static_range` unrolls at trace time),
branches on GPU conditions (a scalar condition becomes an `if` op with then/else regions, a tile
condition runs both sides with their memory effects masked per element), `_FrontendHelpers` (what
Python `if` / `for` in a kernel body call once gluon.frontend has rewritten them), `helper` (a function
a kernel calls that gets the same rewrite) and `warp_role` (warp-specialized sections).
"""
from __future__ import annotations

import builtins
import functools

from .. import frontend, ir
from ..types import DType, WarpRole, enum_member
from .core import Tensor, _to_tensor, cast, size, where
from .folding import truth
from .memory import _Negated
from .tracing import KernelSyntaxError, UndefinedValue, _Handle, _static_int, _tr, _user_loc


# ---------------------------------------------------------------------------------- control flow


def _carry_type_ok(init, final) -> bool:
    return isinstance(init, Tensor) and isinstance(final, Tensor) and init.type == final.type


class Loop:
    """A counted GPU loop: `for i in range(a, b, c)` (rewritten) or `with for_range(...) as i`."""

    def __init__(self, start, end, step=1, name: str = "i"):
        t = _tr()
        self.t = t
        self.loc = _user_loc()
        bounds = []
        for x in (start, end, step):
            if isinstance(x, str):
                x = size(x)
            x = cast(_to_tensor(x, DType.i32), DType.i32)
            bounds.append(x)
        self.op = t.emit("for", bounds, [], regions=[ir.Region()])
        self.body = self.op.regions[0]
        self.iv = Tensor(self.body.add_arg(ir.I32, name))
        self.names: tuple[str, ...] = ()
        self.given: tuple[str, ...] = ()  # the names as the frontend gave them (`names` spreads carried tuples)
        self.sizes: dict[str, int] = {}   # names carried as tuples of GPU values: how many
        self.live: set = set()
        self.inits: list = []
        self.args: list = []          # block arg Tensor per name, or None when not a GPU value
        self.finals: list | None = None
        self._state = 0
        self._results: tuple = ()

    # python-local threading (driven by the frontend's rewrite)
    def carry(self, names, values, live_in=None) -> None:
        """Thread Python locals through the loop. Only names the body may read before writing
        (`live_in`) are carried; the others are loop-local and undefined after the loop. A name holding a
        tuple of GPU values (`m, l = state` style code, a helper's returned tuple) is carried element by
        element, as the names `name[0]`, `name[1]`, ... (`_flat`; `_regroup` gives the tuples back)."""
        live = set(names if live_in is None else live_in)
        self.given = tuple(names)
        self.sizes = {n: len(v) for n, v in zip(names, values) if n in live and _tensor_tuple(v)}
        self.names, self.inits = _flat(names, values, self.sizes)
        self.live = live | {n for n in self.names if "[" in n}
        self.args = [Tensor(self.body.add_arg(v.type, n)) if isinstance(v, Tensor) and n in self.live else None
                     for n, v in zip(self.names, self.inits)]

    @property
    def carried(self) -> tuple:
        return _regroup(tuple(a if a is not None else v for a, v in zip(self.args, self.inits)), self.sizes,
                        self.names)

    def end(self, finals) -> None:
        for n, v in zip(self.given, finals):
            if n in self.sizes and not (_tensor_tuple(v) and len(v) == self.sizes[n]):
                raise ir.GluonError(f"loop-carried '{n}' is a tuple of {self.sizes[n]} GPU values before the loop and "
                                    f"{_shape_of(v)} at the end of its body; keep it a tuple of as many GPU values "
                                    "(or carry its parts as separate names)", self.loc)
        self.finals = list(_flat(self.given, finals, self.sizes)[1])

    @property
    def results(self) -> tuple:
        return _regroup(self._results, self.sizes, self.names)

    def index_after(self, name: str) -> UndefinedValue:
        """What the loop's index name holds after the loop. Python would keep the last index, but the GPU
        value exists only inside the loop's region; yielding it out of an enclosing `if` (or using it
        after the loop) would read a value from a region that is over."""
        return UndefinedValue(name, self.loc, f"it is the index of the GPU loop at {self.loc}, "
                                              "which exists only inside that loop")

    # context manager / one-shot iterator
    def __enter__(self) -> Tensor:
        self.t.b.push(self.body)
        self._named_before = dict(self.t.named)
        return self.iv

    def __exit__(self, exc_type, exc, tb):
        self.t.b.pop()
        if exc_type is None:
            self._finish()
        return False

    def __iter__(self):
        return self

    def __next__(self):
        self._state += 1
        if self._state == 1:
            return self.__enter__()
        self.__exit__(None, None, None)
        raise StopIteration

    def _finish(self) -> None:
        t, body = self.t, self.body
        yields: list[ir.Value] = []
        inits: list[ir.Value] = []
        keep_args: list[ir.Value] = [self.body.args[0]]
        results_for: list = []
        finals = self.finals if self.finals is not None else list(self.carried)
        out = []
        for name, init, arg, final in zip(self.names, self.inits, self.args, finals):
            if arg is None and name not in self.live:      # loop-local temporary
                out.append(init if final is init else UndefinedValue(name, self.loc))
                continue
            if arg is None:
                if isinstance(final, Tensor) and isinstance(init, UndefinedValue):
                    # the body wrote it before any read (a read of the undefined value would have failed there):
                    # the static liveness is path-blind (`if A: x = ...` then `if not A: x = ...`), so it is
                    # loop-local, undefined after the loop
                    out.append(UndefinedValue(name, self.loc, f"it is assigned inside the GPU loop at {self.loc} "
                                                              "and not before it, so it exists only inside that loop"))
                    continue
                if isinstance(final, Tensor):
                    raise ir.GluonError(f"'{name}' is assigned a GPU value inside the loop but was "
                                        f"{'undefined' if isinstance(init, UndefinedValue) else repr(init)} before it; "
                                        "initialise it before the loop (e.g. with gl.zeros / gl.full)", self.loc)
                # (a _Handle here is a Shared, Barrier or GlobalTensor: a Tensor was refused above)
                if final is not init and _holds_tensors(final) and not isinstance(init, UndefinedValue):
                    raise ir.GluonError(f"loop-carried '{name}' holds GPU values inside {_shape_of(final)} that the "
                                        "loop cannot carry (it carries GPU values and flat tuples of them): unpack "
                                        "it into names before the loop", self.loc)
                if final is not init and not isinstance(init, UndefinedValue) and not isinstance(final, _Handle):
                    if _is_number(init) or _is_number(final):
                        raise ir.GluonError(f"Python number '{name}' changes inside a GPU loop; make it a GPU value "
                                            "before the loop (gl.full((), value, dtype))", self.loc)
                out.append(final if not isinstance(init, UndefinedValue) else UndefinedValue(name, self.loc))
                continue
            if final is arg:          # unchanged: drop the carry
                body.replace_uses(arg.value, init.value)
                out.append(init)
                continue
            if not _carry_type_ok(init, final):
                raise ir.GluonError(f"loop-carried '{name}' changes type inside the loop: "
                                    f"{init.type} before, {getattr(final, 'type', type(final).__name__)} after",
                                    self.loc)
            keep_args.append(arg.value)
            inits.append(init.value)
            yields.append(final.value)
            results_for.append(len(out))
            out.append(None)
        # in-place named accumulators changed in the body (e.g. wgmma(..., "acc"))
        named_results = []
        for name, v in t.named.items():
            before = self._named_before.get(name)
            if before is v:
                continue
            init_v = before.value if before is not None else t.named_init.get(name)
            if init_v is None or v.value.owner is None:
                continue
            arg = ir.Value(init_v.type, name, owner=body)
            body.replace_uses(init_v, arg)
            keep_args.append(arg)
            inits.append(init_v)
            yields.append(v.value)
            named_results.append(name)
        body.args = keep_args
        t.b.push(body)
        t.emit("yield", yields)
        t.b.pop()
        self.op.operands.extend(inits)
        self.op.results = [ir.Value(v.type, getattr(v, "name", ""), owner=self.op) for v in inits]
        it = iter(self.op.results)
        for i in results_for:
            out[i] = Tensor(next(it))
        for name in named_results:
            t.named[name] = Tensor(next(it))
        self._results = tuple(out)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _tensor_tuple(v) -> bool:
    """A tuple (or list) of GPU values, which a loop carries element by element."""
    return isinstance(v, (tuple, list)) and len(v) > 0 and all(isinstance(x, Tensor) for x in v)


def _holds_tensors(v) -> bool:
    """Whether a Python container (tuple, list, dict values; nested) holds a GPU value."""
    if isinstance(v, Tensor):
        return True
    if isinstance(v, dict):
        v = list(v.values())
    return isinstance(v, (tuple, list)) and any(_holds_tensors(x) for x in v)


def _shape_of(v) -> str:
    if _tensor_tuple(v):
        return f"a tuple of {len(v)} GPU values"
    return f"a {type(v).__name__}"


def _flat(names, values, sizes: dict) -> tuple[tuple, list]:
    """`names` and `values` with each name in `sizes` (a tuple of GPU values) spread into `name[i]` entries."""
    out_names, out_values = [], []
    for n, v in zip(names, values):
        if n in sizes:
            out_names += [f"{n}[{i}]" for i in builtins.range(sizes[n])]
            out_values += list(v)
        else:
            out_names.append(n)
            out_values.append(v)
    return tuple(out_names), out_values


def _regroup(flat: tuple, sizes: dict, flat_names: tuple) -> tuple:
    """The inverse of `_flat`: one value per original name, a tuple where `sizes` spread one."""
    out, i = [], 0
    while i < len(flat):
        base = flat_names[i].split("[")[0]
        if base in sizes and flat_names[i] == f"{base}[0]":
            out.append(tuple(flat[i:i + sizes[base]]))
            i += sizes[base]
        else:
            out.append(flat[i])
            i += 1
    return tuple(out)


def range(*args, name: str = "i") -> Loop:  # noqa: A001 - the kernel-side `range`
    """`for i in gl.range(a, b, c)`: a GPU loop (plain `range` in a kernel body means the same)."""
    if len(args) == 1:
        args = (0, args[0], 1)
    elif len(args) == 2:
        args = (args[0], args[1], 1)
    return Loop(*args, name=name)


def for_range(*args) -> Loop:
    """`with for_range("k", 0, "K", 64) as k:` (the first argument optionally names the variable).

    Bounds may be ints, GPU integers, or names of symbolic sizes ("K" becomes an i32 parameter)."""
    name = "i"
    if len(args) >= 3 and isinstance(args[0], str) and not isinstance(args[1], str):
        name, args = args[0], args[1:]
    if len(args) == 1:
        args = (0, args[0])
    return Loop(*args, name=name)


def static_range(*args):
    """A loop unrolled at trace time (bounds must be Python ints)."""
    return builtins.range(*(_static_int(a, "static_range's bound") for a in args))


_PLAIN = (bool, int, float, str, type(None))


def _merge(name: str, tv, ev, loc):
    """How name `name` leaves a GPU `if`, from its value after the then-branch (`tv`) and the else-branch
    (`ev`); a side that does not assign it holds the value from before the `if`.

    Returns None for GPU values of one type (the `if` must yield them), else what the name holds after
    the `if`: the value both sides agree on, or an UndefinedValue saying why there is none. An undefined
    name is an error only where the kernel uses it after the `if`: a temporary local to one branch (or of
    another type per branch, or a loop index) must not stop the kernel from tracing."""
    if tv is ev or (isinstance(tv, _PLAIN) and type(tv) is type(ev) and tv == ev):
        return tv
    undef_t, undef_e = isinstance(tv, UndefinedValue), isinstance(ev, UndefinedValue)
    if undef_t and undef_e:
        return tv if tv.why else ev
    if undef_t or undef_e:
        has, lacks, inner = ("else", "then", tv) if undef_t else ("then", "else", ev)
        if inner.why:
            where_not = f"where {inner.why}"
        elif inner.loc is not None:
            where_not = f"where it is only defined inside the GPU loop or branch at {inner.loc}"
        else:
            where_not = "which does not assign it (and it is not defined before the `if`)"
        why = (f"it is defined after the {has}-branch of the GPU `if` at {loc} but not after the {lacks}-branch, "
               f"{where_not}; assign it before the `if` or in both branches")
        return UndefinedValue(name, loc, why)
    if isinstance(tv, Tensor) and isinstance(ev, Tensor):
        if tv.type == ev.type:
            return None
        why = (f"it has type {tv.type} after the then-branch and {ev.type} after the else-branch of the GPU `if` "
               f"at {loc}; give it one type on both sides")
    elif _is_number(tv) or _is_number(ev):
        why = (f"it is a Python value that the GPU `if` at {loc} changes ({tv!r} after the then-branch, {ev!r} "
               "after the else-branch); make it a GPU value before the `if` (gl.full((), value, dtype))")
    else:
        why = (f"it holds {_what(tv)} after the then-branch and {_what(ev)} after the else-branch of the GPU `if` "
               f"at {loc}; only GPU scalars and tiles of one type (or tuples of as many of them) can flow out of a "
               "GPU `if`")
    return UndefinedValue(name, loc, why)


def _pairs_flat(names, then_vals, else_vals) -> tuple[tuple, list, list, tuple]:
    """A GPU `if`'s names and their values after each branch, with a name that holds a tuple of as many GPU values
    after both spread into `name[i]` entries (merged element by element, as a loop carries them, `_flat`); the
    last item is what `_regroup` takes, after the flat values, to give the tuples back."""
    sizes = {n: len(tv) for n, tv, ev in zip(names, then_vals, else_vals)
             if tv is not ev and _tensor_tuple(tv) and _tensor_tuple(ev) and len(tv) == len(ev)}
    flat_names, flat_then = _flat(names, then_vals, sizes)
    return flat_names, flat_then, _flat(names, else_vals, sizes)[1], (sizes, flat_names)


def _what(x) -> str:
    return f"a {x.type} value" if isinstance(x, Tensor) else f"{type(x).__name__} {x!r}"


class _ScalarBranch:
    def __init__(self, cond: Tensor, names, values):
        t = _tr()
        self.t, self.names, self.inits, self.loc = t, tuple(names), list(values), _user_loc()
        if cond.dtype != DType.i1:
            cond = cond != 0
        self.op = t.emit("if", [cond], [], regions=[ir.Region(), ir.Region()])
        self.then_vals: list = []
        self.else_vals: list = []

    def then_begin(self):
        self.t.b.push(self.op.regions[0])
        self.named_before = dict(self.t.named)

    def then_end(self, values):
        self.t.b.pop()
        self.then_vals = list(values)
        self.named_then = dict(self.t.named)
        self.t.named = dict(self.named_before)

    def else_begin(self):
        self.t.b.push(self.op.regions[1])
        return tuple(self.inits)

    def else_end(self, values):
        self.t.b.pop()
        self.else_vals = list(values)
        self._finish()

    def _finish(self):
        t = self.t
        then_y, else_y, out, slots = [], [], [], []
        names, then_vals, else_vals, groups = _pairs_flat(self.names, self.then_vals, self.else_vals)
        for name, tv, ev in zip(names, then_vals, else_vals):
            merged = _merge(name, tv, ev, self.loc)
            if merged is None:
                then_y.append(tv.value)
                else_y.append(ev.value)
                slots.append(len(out))
            out.append(merged)
        named_names = []
        for name in set(self.named_then) | set(t.named):
            tv, ev = self.named_then.get(name), t.named.get(name)
            if tv is ev or tv is None or ev is None:
                continue
            then_y.append(tv.value)
            else_y.append(ev.value)
            named_names.append(name)
        for region, ys in zip(self.op.regions, (then_y, else_y)):
            t.b.push(region)
            t.emit("yield", ys)
            t.b.pop()
        self.op.results = [ir.Value(v.type, "", owner=self.op) for v in then_y]
        it = iter(self.op.results)
        for i in slots:
            out[i] = Tensor(next(it))
        for name in named_names:
            t.named[name] = Tensor(next(it))
        self.results = _regroup(tuple(out), *groups)


class _MaskedBranch:
    """`if tile_cond:` — both sides run, memory effects masked per element; values merge with where()."""

    def __init__(self, cond: Tensor, names, values):
        self.t, self.cond, self.names, self.inits, self.loc = _tr(), cond, tuple(names), list(values), _user_loc()
        if cond.dtype != DType.i1:
            self.cond = cond != 0

    def then_begin(self):
        self.t.masks.append(self.cond)

    def then_end(self, values):
        self.t.masks.pop()
        self.then_vals = list(values)

    def else_begin(self):
        self.t.masks.append(_Negated(self.cond))
        return tuple(self.inits)

    def else_end(self, values):
        self.t.masks.pop()
        out = []
        names, then_vals, else_vals, groups = _pairs_flat(self.names, self.then_vals, values)
        for name, tv, ev in zip(names, then_vals, else_vals):
            if tv is ev or not (isinstance(tv, Tensor) and isinstance(ev, Tensor)):
                out.append(_merge(name, tv, ev, self.loc))   # (not None: no two Tensors)
            elif tv.is_tile or ev.is_tile:          # where() broadcasts a scalar side to the tile
                out.append(where(self.cond, tv, ev))
            else:
                out.append(UndefinedValue(name, self.loc, (
                    f"it is a GPU scalar assigned under the per-thread condition at {self.loc}, which has one value "
                    "per element; use gl.where or make it a tile")))
        self.results = _regroup(tuple(out), *groups)


class _FrontendHelpers:
    """What rewritten kernels call as `__gl__` (see gluon.frontend)."""

    @staticmethod
    def lookup(frame_locals: dict, name: str):
        return frame_locals.get(name, UndefinedValue(name, None))

    @staticmethod
    def loop(bounds, names, values, live_in=None, **kw):
        lp = range(*bounds, **kw)
        lp.carry(names, values, live_in)
        return lp

    @staticmethod
    def is_static(cond) -> bool:
        """Python values, and GPU scalars whose value the trace knows (folding.py), branch in Python."""
        return not isinstance(cond, Tensor) or (not cond.is_tile and truth(cond.value) is not None)

    @staticmethod
    def truth(cond) -> bool:
        """`if cond:` of a static condition."""
        return truth(cond.value) if isinstance(cond, Tensor) else bool(cond)

    @staticmethod
    def branch(cond: Tensor, names, values):
        if cond.is_tile:
            return _MaskedBranch(cond, names, values)
        return _ScalarBranch(cond, names, values)

    @staticmethod
    def frontend_error(msg: str, line: int):
        """The frontend's error for a construct a GPU branch cannot hold, at that construct's `line` (the
        branch's condition decided at trace time that it runs on the GPU)."""
        here = _user_loc()
        return ir.GluonError(msg, ir.Loc(here.file, line, here.func) if here is not None else None)


class helper:
    """`@gl.helper`: a function a kernel calls, whose `if` / `for` over GPU values become IR regions as the
    kernel body's do. Only the kernel body is rewritten otherwise: a plain helper runs as Python, where a
    GPU condition cannot be a bool. The rewrite happens on the first call; Python-valued code (constexpr
    conditions, static_range) runs as Python, so the helper can also be called outside a trace."""

    def __init__(self, fn):
        self.fn = fn
        self._traceable = None
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        if self._traceable is None:
            try:
                self._traceable = frontend.transform(self.fn, _FrontendHelpers)
            except frontend.FrontendError as e:
                if e.lineno is None:
                    raise
                raise KernelSyntaxError(e.msg, ir.Loc(e.filename, e.lineno, self.fn.__name__)) from None
        return self._traceable(*args, **kwargs)


# ---------------------------------------------------------------------------------- warp roles


CTAS_PER_SM = (1, 2, 3, 4)


def set_ctas_per_sm(n: int) -> None:
    """Launch this kernel so that `n` of its CTAs fit on an SM at once: each thread starts with the register
    file's share for `n` CTAs (64K registers over `n` times the CTA's threads, warp roles' padding included,
    rounded down to 8: Triton's `ttg.maxnreg`), which the warp roles' `registers` budgets (setmaxnreg) then share
    out. The compile step checks that the binary's registers and shared memory let `n` CTAs reside (GluonError
    otherwise). The grid stays the caller's: a persistent kernel sizes it to match (the GEMM's CTAS_PER_SM: two
    CTAs an SM, small tiles one each, all resident at once, plain Triton's form)."""
    t = _tr()
    if isinstance(n, bool) or n not in CTAS_PER_SM:
        raise ir.GluonError(f"set_ctas_per_sm({n!r}): takes 1, 2, 3 or 4 (CTAs of this kernel an SM holds at once)",
                            _user_loc())
    if t.arch.vendor != "nvidia":
        raise ir.GluonError(f"set_ctas_per_sm({n}) sets an NVIDIA kernel's launch registers; kernel "
                            f"'{t.kernel.name}' is for {t.arch.name}", _user_loc())
    t.kernel.attrs["ctas_per_sm"] = int(n)


class warp_role:
    """`with warp_role(WarpRole.PRODUCER, warp_range=(0, 3), registers=40):` — code for those warps only.

    Consecutive warp_role blocks form one warp-specialized section; the role holding warp 0 runs as the
    default partition."""

    def __init__(self, role: WarpRole | str, warp_range: tuple[int, int], registers: int | None = None):
        self.role = enum_member(WarpRole, role, "warp_role")
        if (not isinstance(warp_range, (tuple, list)) or len(warp_range) != 2
                or any(isinstance(w, bool) or not isinstance(w, int) for w in warp_range)):
            raise ir.GluonError(f"[GL701] warp_range={warp_range!r}: it must be a pair of Python ints (first, last), "
                                "both inclusive, e.g. warp_range=(0, 3) for 4 warps", _user_loc())
        self.first, self.last = warp_range
        self.registers = registers

    def __enter__(self):
        t = _tr()
        t.require("warp_specialize", "warp_role")
        ops = t.b.region.ops
        ws = ops[-1] if ops and ops[-1].kind == "warp_specialize" and ops[-1].attrs.get("_open") else None
        if ws is None:
            ws = t.emit("warp_specialize", [], [], {"roles": [], "_open": True})
        self._check_range(ws)
        region = ir.Region()
        region.loc = _user_loc()          # the `with warp_role(...)` line: warp_spec's role errors point here
        ws.regions.append(region)
        ws.attrs["roles"].append({"role": self.role.value, "warps": (self.first, self.last),
                                  "registers": self.registers, "default": self.first == 0})
        t.b.push(region)
        t.role_regions.append((region, self.last - self.first + 1))
        self._named_before = dict(t.named)
        return self

    def _check_range(self, ws: ir.Op) -> None:
        """A reversed or negative range, or one overlapping an earlier role of the section, refused at this
        `with` line before the role's code is traced (the trace counts the role's warps from the range,
        so a bad one used to surface as a warpgroup-size error of a wgmma inside it)."""
        first, last, name = self.first, self.last, f"{self.role.value} warps {self.first}..{self.last}"
        if first < 0 or last < first:
            fix = f"; did you mean warp_range=({last}, {first})?" if 0 <= last < first else ""
            raise ir.GluonError(f"[GL701] warp role {name}: warp_range must be (first, last) with 0 <= first <= last "
                                f"(both inclusive){fix}", _user_loc())
        for other in ws.attrs["roles"]:
            o_first, o_last = other["warps"]
            common = builtins.range(max(first, o_first), min(last, o_last) + 1)
            if common:
                raise ir.GluonError(f"[GL702] warp {common[0]} belongs to two roles: {other['role']} warps "
                                    f"{o_first}..{o_last} and {name}; the warp ranges of a section's roles must not "
                                    "overlap", _user_loc())

    def __exit__(self, exc_type, exc, tb):
        t = _tr()
        t.b.pop()
        t.role_regions.pop()
        # accumulators of one role are private to it
        t.named = self._named_before
        return False
