"""The TuningTemplate of a declared kernel: a `@gluon.jit` function and its spec's [args], [launch] and
[problem] tables (gluon.tuning.spec_declared), so `gluon check/tune/build` and `gluon.load` work with no
Python class.

    template = template_for_spec(spec, fn)       # fn imported by gluon.tuning.spec.resolve_ref; checked here
    template = DeclaredTemplate.from_manifest(m)  # what gluon.load rebuilds from a build manifest

What each hook does with the declaration:

    trace / compile    stand-ins as the JIT's launch makes them (gluon.jit.stand_in): a pointer per tensor,
                       a scalar per [args] value (divisibility and width from the value), the constexprs from
                       the config and [launch.constexprs]; so the launch finds the tuner's binary in the cache
    make_inputs        the [args] tensors at the shape's extents, filled as declared (seeded), outputs empty
    poison / output    outputs filled with NaN (integer ones with their least value), or zeroed
    run                the kernel on the grid, block and warps of [launch] (the compile pool's binary if given,
                       else the JIT's specialization), both worked out once per (config, shape, dtype)
    reference          [problem].reference over the arguments by name; one result per output
    baseline           [problem].baseline, likewise
    flops / bytes      [problem].flops / bytes over the dims (and itemsize)
    prepare / call_prepared   a user's call (gluon.load): the input tensors in [args] order, outputs
                       returned (or out=/by name), dims read off the inputs' extents written as bare dim
                       names; one pass over the arguments per call
    serves             whether a built bucket's config meets [launch].requires at a call's shape (gluon.load)

A shape's "static" names (dims, itemsize, NUM_SMS and the constexprs computed from them alone) size the
tensors and are all the reference and baseline see; a scalar or constexpr that depends on a parameter is
worked out per config, at the launch.
"""
from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import ir
from ..dtypes import TUNER_DTYPES, DType
from ..jit import arg_key, stand_in
from .space import ExprError, evaluate, expression_names
from .spec_declared import (
    SIZE_NAMES,
    TRIAL_DTYPE,
    Declaration,
    ScalarDecl,
    TensorDecl,
    is_function_ref,
    names_of,
)
from .declared_replay import Replays, call_key, make_replay
from .template import H200_SMS, TuningTemplate, dtype_name, load_template_ref
from .torch_expr import TorchExpr


class _Source:
    """A reference or baseline: a torch expression, or a function called with the names it takes."""

    def __init__(self, text: str, base_dir: str):
        self.text = text
        if is_function_ref(text):
            self.fn = load_template_ref(text, base_dir)
            self.expr = None
        else:
            self.fn, self.expr = None, TorchExpr(text)

    def __call__(self, env: dict):
        if self.expr is not None:
            return self.expr(env)
        params = inspect.signature(self.fn).parameters
        if any(p.kind == p.VAR_KEYWORD for p in params.values()):
            return self.fn(**env)
        return self.fn(**{n: env[n] for n in params if n in env})


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
        raise ir.GluonError(f"{what} is {v!r}, not an integer")
    return int(v)


@dataclass
class _Launch:
    """A launch worked out for one (config, shape, dtype, device), and the compiled specializations it
    has launched (by the tensors' 16-byte alignment and the caller-given scalars' gluon.jit.arg_key): each
    one's Launcher, or the compiled kernel where the arguments need binding first."""
    grid: tuple
    block: tuple | None
    num_warps: int
    consts: dict
    scalars: dict
    kernels: dict = field(default_factory=dict)


class DeclaredTemplate(TuningTemplate):
    """A `@gluon.jit` kernel tuned from its declaration (see the module docstring)."""

    def __init__(self, name: str, decl: Declaration, fn, dtypes):
        self.name = name
        self.decl = decl
        self.fn = fn
        self.dims = tuple(decl.dims)
        self.params = ()                 # the spec's parameters were checked against the kernel (check_kernel)
        self.dtypes = tuple(dtypes)
        sig = fn.signature.parameters
        self._runtime = [n for n in sig if n not in fn.constexprs]
        self._kernel_consts = [n for n in sig if n in fn.constexprs]
        self._by_name = {a.name: a for a in decl.args}
        self._static = _static_names(decl)
        self._reference = _Source(decl.problem.reference, decl.spec_dir)
        self._baseline = _Source(decl.problem.baseline, decl.spec_dir) if decl.problem.baseline else None
        self._plans: dict[tuple, _Launch] = {}
        # what a user's call reads, worked out once
        self._tensors, self._inputs, self._outputs = decl.tensors, decl.inputs, decl.outputs
        self._input_names = tuple(t.name for t in self._inputs)
        self._tensor_names = tuple(t.name for t in self._tensors)
        self._dim_set = set(self.dims)
        self._dim_slots = tuple((t, tuple((i, e) for i, e in enumerate(t.shape) if e in self._dim_set))
                                for t in self._inputs)
        self._static_scalars = {a.name for a in decl.args if isinstance(a, ScalarDecl) and _uses_only(a.value, self._static)}
        self._dtype_names: dict = {}
        self._call_plans: dict[tuple, tuple] = {}
        self._replays = Replays()
        self._last = None                           # (config, Replay.entry) of the last call replayed

    @classmethod
    def from_manifest(cls, manifest: dict) -> "DeclaredTemplate":
        """The template of a built declared kernel (its manifest holds the declaration)."""
        decl = Declaration.model_validate(manifest["declaration"])
        fn = load_function(decl.function, decl.spec_dir)
        return cls(manifest["name"], decl, fn, manifest.get("dtypes") or tuple(TUNER_DTYPES))

    # -- identity -----------------------------------------------------------------------------------
    def source_file(self) -> str | None:
        return inspect.getsourcefile(self.fn.fn) if hasattr(self.fn, "fn") else None

    def source_hash(self) -> str:
        """sha256 of the kernel's file and the declaration: rows of an edited kernel or spec are not
        mistaken for the current one's."""
        f = self.source_file()
        data = Path(f).read_bytes() if f and Path(f).is_file() else repr(self.fn).encode()
        decl = json.dumps(self.decl.model_dump(exclude={"spec_dir"}), sort_keys=True).encode()
        return hashlib.sha256(data + b"\0" + decl).hexdigest()[:16]

    # -- the names expressions see ---------------------------------------------------------------------
    def _static_env(self, shape, dtype: str, num_sms: int = H200_SMS) -> dict:
        env: dict[str, Any] = dict(zip(self.dims, (int(d) for d in shape)))
        env["itemsize"] = TUNER_DTYPES[dtype].bytes
        env["NUM_SMS"] = int(num_sms)
        for name, e in self.decl.launch.constexprs:
            if name in self._static:
                env[name] = self._value(e, env, f"launch.constexprs.{name}")
        return env

    def _env(self, config: dict, shape, dtype: str, num_sms: int = H200_SMS) -> dict:
        """dims, itemsize, NUM_SMS, the config's parameters and every constexpr."""
        env = self._static_env(shape, dtype, num_sms)
        env.update({k: v for k, v in config.items() if k not in SIZE_NAMES})
        for name, e in self.decl.launch.constexprs:
            if name not in self._static:
                env[name] = self._value(e, env, f"launch.constexprs.{name}")
        return env

    @staticmethod
    def _value(e, env: dict, field: str):
        if not isinstance(e, str):
            return e
        try:
            return evaluate(e, env)
        except ExprError as err:
            raise ir.GluonError(f"{field} = '{e}': {str(err).replace(' of constraint ', ' of ')}") from None

    def _launch(self, env: dict) -> tuple[tuple, tuple | None, int, dict]:
        """(grid, block, num_warps, the kernel's constexprs) at this env."""
        ln = self.decl.launch
        grid = tuple(_int(self._value(e, env, f"launch.grid[{i}]"), f"launch.grid[{i}] = '{e}'")
                     for i, e in enumerate(ln.grid))
        block = None if ln.block is None else tuple(
            _int(self._value(e, env, f"launch.block[{i}]"), f"launch.block[{i}] = '{e}'") for i, e in enumerate(ln.block))
        nw = _int(self._value(ln.num_warps, env, "launch.num_warps"), f"launch.num_warps = '{ln.num_warps}'")
        consts = {n: env[n] for n in self._kernel_consts if n in env}
        return grid, block, nw, consts

    def _scalar(self, a: ScalarDecl, env: dict):
        return self._value(a.value, env, f"args.{a.name}")

    def _dtype(self, t: TensorDecl, dtype: str) -> DType:
        return TUNER_DTYPES[dtype] if t.dtype == TRIAL_DTYPE else DType[t.dtype]

    def _extents(self, t: TensorDecl, env: dict) -> tuple[int, ...]:
        return tuple(_int(self._value(e, env, f"args.{t.name}.tensor[{i}]"), f"args.{t.name}.tensor[{i}] = '{e}'")
                     for i, e in enumerate(t.shape))

    # -- checks without a GPU ---------------------------------------------------------------------------
    def requirement_failed(self, config: dict, shape, dtype: str) -> str | None:
        """The first [launch].requires condition false at this shape, as a sentence, or None."""
        env = self._env(config, shape, dtype)
        for i, cond in enumerate(self.decl.launch.requires):
            if not self._value(cond, env, f"launch.requires[{i}]"):
                names = [n for n in expression_names(cond) if n in env]
                where = ", ".join(f"{n}={env[n]}" for n in names)
                return f"launch.requires '{cond}' is false ({where})" if where else f"launch.requires '{cond}' is false"
        return None

    def check_config(self, config: dict, shape, dtype: str, arch: str) -> None:
        super().check_config(config, shape, dtype, arch)
        why = self.requirement_failed(config, shape, dtype)
        if why:
            raise ir.GluonError(why)

    def serves(self, config: dict, shape, dtype: str) -> bool:
        """Whether a built config may run a call of this shape (gluon.load skips buckets that may not)."""
        try:
            return self.requirement_failed(config, shape, dtype) is None
        except ir.GluonError:
            return False

    def trace(self, config: dict, shape, dtype: str, arch: str) -> ir.Module:
        env = self._env(config, shape, dtype)
        _, block, nw, consts = self._launch(env)
        stand = {}
        for name in self._runtime:
            a = self._by_name[name]
            if isinstance(a, TensorDecl):
                stand[name] = stand_in(self.fn, name, ("t", None, True, len(a.shape)), self._dtype(a, dtype))
            else:
                stand[name] = stand_in(self.fn, name, arg_key(self._scalar(a, env)))
        return self.fn.trace(arch=arch, num_warps=nw, block=block, **stand, **consts)

    # -- on the GPU ---------------------------------------------------------------------------------------
    def make_inputs(self, shape, dtype: str, device, seed: int) -> dict:
        import torch
        env = self._static_env(shape, dtype)
        g = torch.Generator(device=device)
        g.manual_seed(int(seed))
        inputs: dict[str, Any] = {"@shape": tuple(int(d) for d in shape), "@dtype": dtype}
        for a in self.decl.args:
            if isinstance(a, TensorDecl):
                inputs[a.name] = _filled(a, self._extents(a, env), self._dtype(a, dtype).torch, device, g)
            elif a.name in self._static_scalars:
                inputs[a.name] = self._scalar(a, env)
        return inputs

    def output(self, inputs: dict):
        if len(self._outputs) == 1:
            return inputs[self._outputs[0].name]
        return tuple(inputs[t.name] for t in self._outputs)

    def poison(self, inputs: dict) -> None:
        for t in self._outputs:
            x = inputs[t.name]
            if t.fill == "zeros":
                x.zero_()
            elif x.dtype.is_floating_point:
                x.fill_(float("nan"))
            else:
                import torch
                x.fill_(torch.iinfo(x.dtype).min if x.dtype != torch.bool else False)

    def _plan(self, config: dict, shape, dtype: str, device_index: int) -> "_Launch":
        """The grid, block, warps, constexprs and per-config scalars of a launch: the expressions are
        evaluated once per (config, shape, dtype, device), not per timed run. `device_index`: the CUDA
        device (Tensor.get_device(); -1, a CPU tensor: the H200's SM count stands in)."""
        key = (tuple(config.items()), shape, dtype, device_index)    # (one config dict: one order)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        from ..runtime.cuda import sm_count
        env = self._env(config, shape, dtype, sm_count(device_index) if device_index >= 0 else H200_SMS)
        grid, block, nw, consts = self._launch(env)
        scalars = {n: self._scalar(self._by_name[n], env) for n in self._runtime
                   if isinstance(self._by_name[n], ScalarDecl)}
        plan = self._plans[key] = _Launch(grid, block, nw, consts, scalars)
        return plan

    def run(self, inputs: dict, config: dict, kernel=None) -> None:
        """One launch; `kernel` the compile pool's binary (the tuner), else the JIT's specialization for
        these arguments, looked up once per (config, shape, dtype, argument keys) and launched directly."""
        first = inputs[self._tensors[0].name]
        plan = self._plan(config, inputs["@shape"], inputs["@dtype"], first.get_device())
        args = [inputs[n] if n in inputs else plan.scalars[n] for n in self._runtime]
        if kernel is None:
            # the plan fixes every tensor's dtype and rank and the scalars it computes: what can differ
            # between calls is a tensor's 16-byte alignment and a scalar the caller gave
            key = tuple([(inputs[n].data_ptr() & 15) == 0 for n in self._tensor_names]
                        + [arg_key(inputs[n]) for n in inputs.get("@given", ())])
            kernel = plan.kernels.get(key)
            if kernel is None:
                launch = self.fn[plan.grid, plan.block] if plan.block is not None else self.fn[plan.grid]
                ck = launch.compiled(*args, num_warps=plan.num_warps, **plan.consts)
                kernel = plan.kernels[key] = ck.launcher if ck.takes_args_as_given(len(args)) else ck
        kernel(plan.grid, *args)
        return kernel, plan.grid, args

    def _expr_env(self, inputs: dict) -> dict:
        env = self._static_env(inputs["@shape"], inputs["@dtype"])
        env.update({k: v for k, v in inputs.items() if not k.startswith("@")})
        return env

    def reference(self, inputs: dict):
        return self._reference(self._expr_env(inputs))

    def check(self, out, ref, rtol: float, atol: float):
        """TuningTemplate.check per output (the reference gives one result per output: a tensor, a tuple in
        [args] order, or a dict by name); the worst error, and the first output that fails, named."""
        names = [t.name for t in self._outputs]
        outs = out if isinstance(out, tuple) else (out,)
        if isinstance(ref, dict):
            missing = [n for n in names if n not in ref]
            if missing:
                return False, float("inf"), f"the reference gave no {', '.join(missing)}"
            refs = tuple(ref[n] for n in names)
        else:
            refs = tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)
        if len(refs) != len(outs):
            return False, float("inf"), (f"the reference gave {len(refs)} results for {len(outs)} outputs "
                                         f"({', '.join(names)})")
        worst, first_bad = 0.0, None
        for name, o, r in zip(names, outs, refs):
            if tuple(getattr(r, "shape", ())) != tuple(o.shape) and getattr(r, "numel", lambda: -1)() != o.numel():
                return False, float("inf"), f"output {name} has shape {tuple(o.shape)}, the reference " \
                                            f"{tuple(getattr(r, 'shape', ()))}"
            ok, err, why = super().check(o, r, rtol, atol)
            worst = max(worst, err)
            if not ok and first_bad is None:
                first_bad = why if len(names) == 1 else f"output {name}: {why}"
        return first_bad is None, worst, first_bad

    def baseline(self, inputs: dict):
        if self._baseline is None:
            raise ir.GluonError(f"{self.name} declares no baseline (problem.baseline)")
        env, fn = self._expr_env(inputs), self._baseline
        return lambda: fn(env)

    def flops(self, shape) -> float:
        return float(self._value(self.decl.problem.flops, dict(zip(self.dims, shape)), "problem.flops"))

    def bytes(self, shape, dtype: str) -> float:
        env = {**dict(zip(self.dims, shape)), "itemsize": TUNER_DTYPES[dtype].bytes}
        return float(self._value(self.decl.problem.bytes, env, "problem.bytes"))

    # -- a user's call (gluon.load) -----------------------------------------------------------------------
    def prepare(self, *args, **kwargs) -> tuple[tuple, str, dict]:
        """(the shape, the dtype, tensors and scalars by name) of a user's call: the input tensors
        positionally in [args] order (or by name), outputs and scalars by name (`out=` for the one output),
        dims not readable off an input's extents by name. gluon.load picks the bucket from the first two
        and hands the whole back to `call_prepared` (one pass over the arguments per call)."""
        inputs = self._inputs
        if len(args) > len(inputs):
            raise ir.GluonError(f"{self.name} takes {len(inputs)} input tensors ({', '.join(t.name for t in inputs)}), "
                                f"got {len(args)} positional arguments; outputs and scalars go by name")
        given = dict(zip(self._input_names, args))
        dims: dict[str, int] = {}
        for k, v in kwargs.items():
            if k == "out" and len(self._outputs) == 1:
                k = self._outputs[0].name
            if k in given:
                raise ir.GluonError(f"{self.name}: argument '{k}' given twice")
            if k in self._dim_set:
                dims[k] = int(v)
            elif k in self._by_name:
                given[k] = v
            else:
                known = [a.name for a in self.decl.args] + list(self.dims)
                raise ir.GluonError(f"{self.name} has no argument '{k}' (it takes {', '.join(known)})")
        dtype = None
        for t, slots in self._dim_slots:
            x = given.get(t.name)
            if x is None:
                raise ir.GluonError(f"{self.name}: missing input {t.name}")
            xs = getattr(x, "shape", None)
            if xs is None or not hasattr(x, "dtype"):
                raise ir.GluonError(f"{self.name}: {t.name} must be a tensor, got {type(x).__name__}")
            if len(xs) != len(t.shape):
                raise ir.GluonError(f"{self.name}: {t.name} has {len(xs)} dims, the kernel takes {len(t.shape)} "
                                    f"([{', '.join(t.shape)}])")
            for i, d in slots:
                n = xs[i]
                if dims.setdefault(d, n) != n:
                    raise ir.GluonError(f"{self.name}: {t.name} gives {d}={n}, an earlier argument {d}={dims[d]}")
            if t.dtype == TRIAL_DTYPE:
                name = self._dtype_names.get(x.dtype)
                if name is None:
                    try:
                        name = self._dtype_names[x.dtype] = dtype_name(x.dtype)
                    except KeyError:
                        raise ir.GluonError(f"{self.name}: {t.name} is {x.dtype}; the kernel takes "
                                            f"{', '.join(self.dtypes)}") from None
                if dtype is not None and name != dtype:
                    raise ir.GluonError(f"{self.name}: {t.name} is {name}, an earlier input {dtype}: give one dtype")
                dtype = name
        try:
            shape = tuple(dims[d] for d in self.dims)
        except KeyError:
            unknown = [d for d in self.dims if d not in dims]
            raise ir.GluonError(f"{self.name}: pass {', '.join(f'{d}=...' for d in unknown)} "
                                "(no input's shape gives it)") from None
        return shape, dtype or self.dtypes[0], given

    def shape_of(self, *args, **kwargs) -> tuple[int, ...]:
        return self.prepare(*args, **kwargs)[0]

    def dtype_of(self, *args, **kwargs) -> str:
        return self.prepare(*args, **kwargs)[1]

    def _call_plan(self, shape: tuple, dtype: str) -> tuple[dict, dict]:
        """({tensor: (extents, torch dtype)}, {scalar: value}) at a shape: worked out once per (shape, dtype)."""
        key = (shape, dtype)
        plan = self._call_plans.get(key)
        if plan is None:
            env = self._static_env(shape, dtype)
            tensors = {t.name: (self._extents(t, env), self._dtype(t, dtype).torch) for t in self._tensors}
            scalars = {a.name: self._scalar(a, env) for a in self.decl.args
                       if isinstance(a, ScalarDecl) and a.name in self._static_scalars}
            plan = self._call_plans[key] = (tensors, scalars)
        return plan

    def call_prepared(self, config: dict, prepared: tuple):
        """Run `config` on what `prepare` read off a call; the output (a tuple for several)."""
        return self.output(self._launch_call(config, prepared)[0])

    def _launch_call(self, config: dict, prepared: tuple) -> tuple[dict, tuple]:
        """(the call's tensors and scalars by name, what `run` launched) for `config` on a prepared call."""
        shape, dtype, given = prepared
        tensors, scalars = self._call_plan(shape, dtype)
        first = given[self._input_names[0]] if self._input_names else None
        index = first.get_device() if first is not None else 0      # -1: a CPU tensor
        if index < 0:
            self._wrong_device(given)
        inputs: dict[str, Any] = {"@shape": shape, "@dtype": dtype, **scalars}
        for name, (want, dt) in tensors.items():
            x = given.get(name)
            if x is None:                           # an output the caller did not pass
                x = self._allocate(name, want, dt, first)
            elif x.dtype is not dt or x.shape != want:
                raise ir.GluonError(f"{self.name}: {name} is {tuple(x.shape)} {x.dtype}, the kernel takes "
                                    f"{want} {dt} here")
            elif not x.is_contiguous():
                raise ir.GluonError(f"{self.name}: {name} is not contiguous (strides {tuple(x.stride())}); "
                                    "the kernel was declared for contiguous tensors: pass .contiguous()")
            elif x.get_device() != index:
                self._wrong_device({**given, name: x})
            inputs[name] = x
        user = [n for n in given if n not in tensors]
        if user:                                    # scalars the caller gave: part of the launch's key
            inputs.update((n, given[n]) for n in user)
            inputs["@given"] = tuple(user)
        if self._outputs and all(inputs[t.name].numel() == 0 for t in self._outputs):
            return inputs, None                     # nothing to write (a dim of 0): no launch, as torch's ops
        return inputs, self.run(inputs, config)

    def _allocate(self, name: str, want: tuple, dt, like):
        import torch
        device = like.device if like is not None else torch.device("cuda")
        if self._by_name[name].fill == "zeros":
            return torch.zeros(want, dtype=dt, device=device)
        return torch.empty(want, dtype=dt, device=device)

    def _wrong_device(self, given: dict) -> None:
        """GluonError naming the tensor off the launch device (the inputs named before the outputs)."""
        from ..kernels.tensor_checks import on_the_launch_device
        names = [*self._input_names, *(t.name for t in self._outputs)]
        on_the_launch_device(self.name, **{n: given[n] for n in names if n in given})

    def call(self, config: dict, *args, **kwargs):
        """Run the kernel with `config` on a user's tensors; the output (a tuple for several). A repeat of a
        call of positional tensors (their shapes, dtypes, devices, and the config's values) replays the
        first one's launch with the new addresses (declared_replay.py)."""
        last = self._last                           # the last replayed call's config and replay entry
        if last is not None and not kwargs and config == last[0]:
            out = last[1](args)
            if out is not None:
                return out
        key = None
        if not kwargs:
            tensors = call_key(args)
            if tensors is not None:
                key = (tuple(config.items()), tensors)
                try:
                    replay = self._replays.get(key)
                except TypeError:                   # a config value that does not hash: no replay
                    key = replay = None
                if replay is not None:
                    out = replay(args)
                    if out is not None:
                        self._last = (dict(config), replay.entry) if replay.entry is not None else None
                        return out
        prepared = self.prepare(*args, **kwargs)
        if key is None:
            return self.call_prepared(config, prepared)
        out, replay = self.call_replayable(config, prepared)
        self._replays.keep(key, replay)
        return out

    def call_replayable(self, config: dict, prepared: tuple):
        """(the output, the `Replay` of its launch or None) of a prepared call of positional tensors only."""
        inputs, launched = self._launch_call(config, prepared)
        return self.output(inputs), make_replay(launched, inputs, self._runtime, self._input_names, self._outputs)

    def call_args(self, inputs: dict) -> tuple:
        return tuple(inputs[n] for n in self._input_names)


# ------------------------------------------------------------------------------------------- helpers


def _uses_only(value, names: set) -> bool:
    return not isinstance(value, str) or set(expression_names(value)) <= names


def _static_names(decl: Declaration) -> set:
    """dims, itemsize, NUM_SMS and the constexprs computed from those alone."""
    static = set(decl.dims) | set(SIZE_NAMES)
    for name, e in decl.launch.constexprs:
        if _uses_only(e, static):
            static.add(name)
    return static


def _filled(t: TensorDecl, extents: tuple, dtype, device, g):
    import torch
    if t.output and t.fill == "poison":
        return torch.empty(extents, dtype=dtype, device=device)
    if t.fill == "zeros":
        return torch.zeros(extents, dtype=dtype, device=device)
    if t.fill == "ones":
        return torch.ones(extents, dtype=dtype, device=device)
    if t.fill == "randint":
        return torch.randint(int(t.low), int(t.high), extents, dtype=dtype, device=device, generator=g)
    if t.fill == "uniform":
        x = torch.rand(extents, dtype=torch.float32, device=device, generator=g) * (t.high - t.low) + t.low
    else:
        x = torch.randn(extents, dtype=torch.float32, device=device, generator=g) * t.std
    return x.to(dtype)


def load_function(ref: str, base_dir: str):
    """The kernel a "module:function" / "file.py:function" names (a file relative to base_dir or a folder
    above it, else the working directory)."""
    target = ref.rpartition(":")[0]
    base = Path(base_dir)
    if target.endswith(".py"):
        base = next((d for d in (base, *base.parents) if (d / target).exists()), base)
    return load_template_ref(ref, base)


def check_kernel(decl: Declaration, fn) -> tuple[tuple, str, str] | None:
    """The first mismatch between the declaration and the kernel: (spec field path, problem, allowed), or
    None. What it takes: a @gluon.jit function whose runtime parameters are exactly [args], and whose
    constexprs all have a value (a parameter, a [launch.constexprs] entry, or their default)."""
    from ..language.kernel import KernelTemplate
    if not isinstance(fn, KernelTemplate):
        return (("kernel", "function"), f"{decl.function} is a {type(fn).__name__}, not a @gluon.jit kernel",
                "a function decorated with @gluon.jit")
    if not getattr(fn, "simt", False):
        return (("kernel", "function"), f"{decl.function} is an explicit-form @gluon.kernel (TensorRef arguments); "
                "a declared kernel is a @gluon.jit one (pointer and scalar arguments)",
                "a @gluon.jit kernel, or a TuningTemplate (kernel.template) for this one")
    sig = fn.signature.parameters
    runtime = [n for n in sig if n not in fn.constexprs]
    declared = [a.name for a in decl.args]
    for n in declared:
        if n not in sig:
            import difflib
            near = difflib.get_close_matches(n, runtime, n=1)
            return (("args", n), f"{fn.name} has no parameter '{n}'" + (f"; did you mean '{near[0]}'?" if near else ""),
                    ", ".join(runtime))
        if n in fn.constexprs:
            return (("args", n), f"'{n}' is a constexpr of {fn.name}: give it in [params] (tuned) or "
                    "[launch.constexprs] (computed)", ", ".join(runtime))
    missing = [n for n in runtime if n not in declared]
    if missing:
        return (("args",), f"{fn.name}'s parameter{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                "not declared in [args]", f"every runtime parameter: {', '.join(runtime)}")
    have = set(decl.params) | set(decl.constexpr_names)
    for n in (n for n in sig if n in fn.constexprs):
        if n not in have and sig[n].default is inspect.Parameter.empty:
            return (("launch", "constexprs"), f"{fn.name}'s constexpr '{n}' has no value",
                    f"'{n}' in [params] (tuned) or [launch.constexprs] (computed)")
    used = set()
    ln = decl.launch
    texts = [*ln.grid, *(ln.block or ()), ln.num_warps, *ln.requires,
             *(e for _, e in ln.constexprs if isinstance(e, str))]
    texts += [e for a in decl.args for e in (a.shape if isinstance(a, TensorDecl) else
                                             ((a.value,) if isinstance(a.value, str) else ()))]
    for t in texts:
        used.update(names_of(t))
    for n in decl.params:
        if n not in fn.constexprs and n not in used:
            return (("params", n), f"parameter '{n}' is no constexpr of {fn.name} and no [launch] or [args] "
                    "expression uses it", f"{fn.name}'s constexprs: {', '.join(n for n in sig if n in fn.constexprs)}")
    return None


def template_for_spec(spec, fn) -> DeclaredTemplate:
    """The declared kernel's template, its function `fn` (gluon.tuning.spec.resolve_ref imported it)
    checked against the declaration: SpecError at the field that does not fit."""
    problem = check_kernel(spec.declaration, fn)
    if problem is not None:
        path, text, allowed = problem
        if path[0] == "params" and hasattr(spec, "param_origin"):
            from .spec_errors import SpecError
            file, line, field = spec.param_origin(path[1])
            raise SpecError(file, line, field, text, value=path[1], allowed=allowed)
        raise spec.error(path, text, allowed=allowed)
    return DeclaredTemplate(spec.name, spec.declaration, fn, spec.dtypes)


__all__ = ["DeclaredTemplate", "template_for_spec", "check_kernel", "load_function"]
