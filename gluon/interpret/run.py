"""The interpreter's driver: trace a kernel as the JIT does, bind the launch's arguments, and run the IR
once per program of the grid (or of a chosen subset), on CPU torch tensors or numpy arrays as global
memory.

    interpret(kernel, grid, *args, block=None, num_warps=None, programs=None, **constexprs_and_sizes)

The IR run is the traced, verified module with the pipeline pass applied (an implicit stage ring made explicit,
as compiling does) and within the arch's shared memory (`smem_alloc`'s budget: a kernel the compile refuses for
it is refused here too). The protocol checks are left to the run itself (it finds their faults as they happen,
with the roles' lines) and layout assignment too, as layouts do not change values. Programs
run one after the other, in row-major order of their ids (x fastest); within a program every op works
on whole tiles at once (numpy). Writes land in the given tensors.
"""
from __future__ import annotations

import itertools
from typing import Any, Iterable, Sequence

import numpy as np

from .. import ir
from ..abi import unexpected_keywords
from ..arch import SM90, arch_by_name
from ..jit import _arg_key, _jit_of, _positional_constexprs, _stand_in
from ..passes.pipeline import pipeline
from ..passes.smem_alloc import allocate_shared
from ..types import GluonError, SourceKind
from . import memory as _memory  # noqa: F401 - registers the load/store/atomic rules
from . import regions as _regions  # noqa: F401 - registers the region and reduction rules
from . import smem as _smem  # noqa: F401 - registers the shared-memory and cp.async rules
from . import dots as _dots  # noqa: F401 - registers the dot and tensor-memory rules
from . import sync as _sync  # noqa: F401 - registers the mbarrier, named-barrier and cluster rules
from . import ptx as _ptx  # noqa: F401 - registers the inline-assembly rule (gl.nvidia.ptx's templates)
from .hazards import actor
from .tma import desc_of  # registers the TMA rules
from .ops import NOT_YET, RULES, InterpretError
from .tasks import Cta, Role, Task, check_schedule
from .values import Ptr, buffer_of, scalar


class Program:
    """One program of the grid, or one warp role of it: its ids, the grid (3-D; `rank` the launch's own
    dimensions), the values defined so far, and the CTA state its roles share (`cta`: the hazard tracker,
    named barriers; `observer` is its tracker, which smem_alloc hands to each region). `who` names the
    accessor of shared memory and barriers (the warp role running, tasks.Role; None outside roles) and
    `task` its thread (None outside roles); `local` holds per-accessor async state (cp.async groups,
    in-flight WGMMAs and TMA stores: smem.local_state), shared by a program's roles (keyed by `who`)."""

    __slots__ = ("pid", "grid", "env", "rank", "who", "observer", "local", "cta", "task")

    def __init__(self, pid: tuple[int, int, int], grid: tuple[int, int, int], env: dict[int, Any], rank: int = 3,
                 observer: Any = None, cta: Cta | None = None, who: Role | None = None, task: Task | None = None,
                 local: dict | None = None):
        self.pid, self.grid, self.env, self.rank = pid, grid, dict(env), rank
        self.cta = cta if cta is not None else Cta(pid, rank, 4)
        if observer is not None:
            self.cta.observer = observer
        self.observer = self.cta.observer
        self.who, self.task = who, task
        self.local = {} if local is None else local

    def spawn(self, who: Role, task: Task) -> "Program":
        """The program as seen by warp role `who` (run by `task`): the values so far, the same CTA."""
        return Program(self.pid, self.grid, self.env, self.rank, None, self.cta, who, task, self.local)

    @property
    def threads(self) -> int:
        return self.who.threads if self.who is not None else self.cta.num_warps * 32

    @property
    def actor(self) -> str:
        return actor(self.who)

    def run_region(self, region: ir.Region, args: Sequence[Any], combine: bool = False) -> list:
        """Run `region` with its arguments bound to `args`; the values its closing yield passes out."""
        env = self.env
        task = self.task
        for a, v in zip(region.args, args):
            env[a.id] = v
        for op in region.ops:
            kind = op.kind
            if kind == "yield":
                return [env[v.id] for v in op.operands]
            if task is not None and task.sched.aborting:
                task.stop(op)
            if combine and op.regions:
                raise InterpretError(f"the interpreter runs a combine region's ops over whole arrays; a {kind} "
                                     "inside one cannot run that way", op.loc)
            fn = RULES.get(kind)
            if fn is None:
                raise _unsupported(op)
            try:
                results = fn(self, op, [env[v.id] for v in op.operands])
            except GluonError:
                raise
            except Exception as e:       # a numpy error inside a rule: report it at the op's line
                raise InterpretError(f"interpreting {kind}: {type(e).__name__}: {e}", op.loc) from e
            for r, v in zip(op.results, results):
                env[r.id] = v
        return []


def _unsupported(op: ir.Op) -> InterpretError:
    if op.kind in NOT_YET:
        return InterpretError(f"the interpreter does not run {op.kind} yet (docs/INTERPRETER.md)", op.loc)
    return InterpretError(f"the interpreter has no rule for op {op.kind!r}", op.loc)


def check_supported(kernel: ir.Kernel) -> None:
    """Refuse a kernel with an op the interpreter cannot run before any program touches memory."""
    for op in kernel.walk():
        if op.kind not in RULES:
            raise _unsupported(op)
    n = int(kernel.attrs.get("num_ctas", 1))
    if n > 1:
        at = next((op.loc for op in kernel.walk() if op.kind in ("cluster_sync", "cluster_rank")
                   or op.attrs.get("multicast") or op.attrs.get("cluster")), kernel.loc)
        raise InterpretError(f"the interpreter runs one CTA at a time; kernel {kernel.name} runs in clusters of {n} "
                             "CTAs (set_cluster), whose CTAs share barriers and multicast loads: run it with "
                             "set_cluster(1) (e.g. CLUSTER_M=1) to interpret it", at)


# ------------------------------------------------------------------------------ binding the launch


def _scalar_value(p: ir.Param, v) -> np.ndarray:
    t = p.value.type
    if hasattr(v, "item") and not isinstance(v, (int, float, bool)):
        v = v.item()
    if not isinstance(v, (int, float, bool, np.integer, np.floating, np.bool_)):
        raise GluonError(f"parameter '{p.name}' is a {t}, got a {type(v).__name__}", p.loc)
    return scalar(v, t.dtype)


def bind_params(kernel: ir.Kernel, args: Sequence[Any], kwargs: dict, bound: bool = False) -> dict[int, Any]:
    """The environment of kernel parameter values for a launch's runtime `args` and keyword sizes; with
    `bound`, `args` are already one per parameter, in order (what a compiled kernel's launcher takes:
    CompiledKernel.launch_args)."""
    env: dict[int, Any] = {}
    buffers: dict[int, Any] = {}
    if kwargs:                          # as KernelABI.bind: a misspelt constexpr or size is not dropped silently
        sizes = [p.source.name for p in kernel.params if p.source is not None and p.source.kind is SourceKind.KEYWORD]
        bad = unexpected_keywords(kernel.name, kwargs, sizes)
        if bad:
            raise GluonError(bad, kernel.loc)
    if bound and len(args) != len(kernel.params):
        raise GluonError(f"kernel {kernel.name}'s launcher takes {len(kernel.params)} arguments "
                         f"({', '.join(p.name for p in kernel.params)}), got {len(args)}", kernel.loc)
    for i, p in enumerate(kernel.params):
        src = p.source
        if bound:
            v = args[i]
        elif src is None or src.kind is SourceKind.ARG:
            idx = src.index if src is not None else kernel.params.index(p)
            v = args[idx]
        elif src.kind is SourceKind.DIM:
            a = args[src.index]
            v = int(a.shape[src.axis])
        else:
            if src.name not in kwargs:
                raise GluonError(f"kernel {kernel.name} needs the size '{src.name}': pass {src.name}=... to the launch",
                                 kernel.loc)
            v = kwargs[src.name]
        t = p.value.type
        if isinstance(t, ir.PointerType):
            if isinstance(v, int) and not isinstance(v, bool):
                raise GluonError(f"parameter '{p.name}': the interpreter cannot follow a raw device address; pass the "
                                 "tensor itself", p.loc)
            if p.name in kernel.attrs.get("row_major_params", ()) and hasattr(v, "is_contiguous") \
                    and not v.is_contiguous():
                raise GluonError(f"parameter '{p.name}' is indexed as a row-major tensor; pass a contiguous one", p.loc)
            key = id(v)
            if key not in buffers:
                try:
                    buffers[key] = buffer_of(p.name, t.dtype, v)
                except ValueError as e:
                    raise GluonError(str(e), p.loc) from None
            env[p.value.id] = Ptr(buffers[key], 0)
        elif isinstance(t, ir.ScalarType):
            env[p.value.id] = _scalar_value(p, v)
        elif isinstance(t, ir.DescType):
            env[p.value.id] = desc_of(p, v)
        else:
            raise InterpretError(f"the interpreter does not take a {t} parameter ('{p.name}') yet", p.loc)
    return env


def _grid3(grid) -> tuple[int, int, int]:
    g = tuple(int(x) for x in (grid if isinstance(grid, (tuple, list)) else (grid,)))
    if not 1 <= len(g) <= 3 or any(x < 0 for x in g):
        raise GluonError(f"grid must be 1 to 3 non-negative ints, got {grid!r}")
    return g + (1,) * (3 - len(g))


def run_kernel(kernel: ir.Kernel, grid, args: Sequence[Any], kwargs: dict | None = None,
               programs: Iterable | None = None, bound: bool = False, schedule=None) -> None:
    """Run every program of `grid` (or those in `programs`: ints or (x, y, z) tuples) of a traced kernel;
    `bound`: `args` are one per parameter (bind_params); `schedule`: how warp roles take turns
    (tasks.check_schedule; None: GLUON_INTERPRET_SCHEDULE, else in section order)."""
    check_supported(kernel)
    schedule = check_schedule(schedule)
    g = _grid3(grid)
    rank = len(grid) if isinstance(grid, (tuple, list)) else 1
    env = bind_params(kernel, args, kwargs or {}, bound)
    if programs is None:
        pids: Iterable = ((x, y, z) for z, y, x in itertools.product(range(g[2]), range(g[1]), range(g[0])))
    else:
        pids = [tuple(int(x) for x in p) + (0,) * (3 - len(p)) if isinstance(p, (tuple, list)) else (int(p), 0, 0)
                for p in programs]
        for p in pids:
            if len(p) != 3 or any(not 0 <= p[i] < g[i] for i in range(3)):
                raise GluonError(f"program {p} is outside the grid {g}")
    with np.errstate(all="ignore"):
        for pid in pids:
            pid = tuple(pid)
            cta = Cta(pid, rank, kernel.num_warps, schedule=schedule)
            Program(pid, g, env, rank, cta=cta).run_region(kernel.body, [])


# ------------------------------------------------------------------------------ the JIT entry


def _stand_ins(template, args: Sequence[Any]) -> tuple[dict, tuple]:
    """The trace stand-ins of a launch's runtime arguments, as gluon.jit's specialization takes them
    (numpy arrays as CPU torch tensors sharing their memory); and the arguments so converted."""
    jf = _jit_of(template)
    if len(args) != len(jf.runtime_params):
        raise GluonError(f"kernel {template.name} takes {len(jf.runtime_params)} runtime arguments "
                         f"({', '.join(jf.runtime_params)}), got {len(args)}", template.loc)
    conv = []
    for a in args:
        if type(a).__name__ == "TensorDescriptor" and hasattr(a, "block_shape"):
            conv.append(a)              # traced as the tensor it describes, bound as itself (tma.desc_of)
            continue
        if isinstance(a, np.ndarray):
            import torch
            a = torch.from_numpy(a)
        elif isinstance(a, np.generic):
            a = a.item()
        conv.append(a)
    stand = {}
    for pname, v in zip(jf.runtime_params, conv):
        if type(v).__name__ == "TensorDescriptor" and hasattr(v, "block_shape"):
            from .tma import _described_tensor
            v = _described_tensor(v)
        key = _arg_key(v)
        if template.pointers.get(pname) is not None and type(v) is int:
            raise GluonError(f"kernel {template.name}: argument '{pname}' is a raw device address; the interpreter "
                             "needs the tensor itself", template.loc)
        stand[pname] = _stand_in(template, pname, v, key)
    return stand, tuple(conv)


def trace_for(template, args: Sequence[Any], constexprs: dict, block=None, num_warps=None, arch=None):
    """The traced module a launch with these arguments runs (cached per specialization on the template)."""
    stand, conv = _stand_ins(template, args)
    arch = arch_by_name(arch) if isinstance(arch, str) else (arch or template.arch or SM90)
    nw = num_warps or template.num_warps
    blk = tuple(block) if block else None
    key = (tuple((k, repr(v)) for k, v in stand.items()), tuple(sorted((k, repr(v)) for k, v in constexprs.items())),
           blk, nw, arch.name)
    cache = template.__dict__.setdefault("_interp_cache", {})
    module = cache.get(key)
    if module is None:
        module = template.trace(**stand, **constexprs, arch=arch, num_warps=nw, block=blk)
        for k in module.kernels:        # implicit stage rings (the seed's style) made explicit, as compiling does,
            pipeline(k)                 # then the compile's shared-memory budget: refused here as there
            allocate_shared(k)
        if len(cache) >= 64:
            cache.clear()
        cache[key] = module
    return module, conv


def interpret(template, grid, *args, block: Sequence[int] | None = None, num_warps: int | None = None,
              arch=None, programs: Iterable | None = None, schedule=None, **kwargs) -> None:
    """Run `template` (a JIT kernel) on the CPU: `grid` as `kernel[grid]` takes it (a tuple of ints, or a
    callable of the arguments and constexprs by name), the runtime arguments as the launch takes them,
    constexprs and keyword sizes as keywords. `programs` picks a subset of the grid's programs;
    `schedule` how warp roles take turns ("in_order", "reverse" or an int seed; tasks.check_schedule)."""
    constexprs = {k: kwargs.pop(k) for k in list(kwargs) if k in template.constexprs}
    names = list(template.signature.parameters)
    runtime = _jit_of(template).runtime_params
    if len(args) > len(runtime):                 # constexprs given positionally
        bound = dict(zip(names, args))
        args = tuple(bound[n] for n in runtime if n in bound)
        constexprs.update(_positional_constexprs(template, bound, constexprs))
    module, conv = trace_for(template, args, constexprs, block, num_warps, arch)
    if callable(grid):
        meta = dict(zip(runtime, conv))
        meta.update(constexprs)
        grid = grid(meta)
    run_kernel(module.kernel, grid, conv, kwargs, programs, schedule=schedule)
