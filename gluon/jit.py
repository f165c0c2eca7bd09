"""The compile pipeline and the JIT: trace -> passes -> TTGIR -> Triton binary -> launcher, cached.

    PIPELINE                      what it does                                   module
    layout_assign                 give every register tile a layout              passes/layout_assign.py
    layout_check                  swizzle/TMA/WGMMA/MMA layout rules             passes/layout_check.py
    pipeline                      implicit stage rings -> barriers and phases;   passes/pipeline.py
                                  single-loop software pipelines; stage indices
    warp_spec                     warp roles, warpgroups, register budgets,      passes/warp_spec.py
                                  barrier protocol (pairing, bytes, phases)
    smem_alloc                    offsets, reuse by liveness, capacity           passes/smem_alloc.py
    then: backend/lowering (IR -> TTGIR text and the kernel's ABI), backend/compile (TTGIR -> cubin/hsaco,
    on-disk cache keyed by TTGIR hash, target, versions, options and the ABI's PTX passes),
    runtime.Launcher (launch, planned from the ABI).

`@kernel` / `@jit` make a `JITKernel` (a language `KernelTemplate` that can launch). `kernel[grid](args...)`
takes torch tensors, `__cuda_array_interface__` and DLPack objects, and, for a parameter annotated
`gl.pointer(dtype)`, int device addresses; it specializes on argument dtypes, 16-byte alignment of
pointers, divisibility of integers by 16, constexpr values, the launch block and num_warps; each
specialization is traced and compiled once per process (the binary once per machine, through the disk
cache), then launched from an in-memory table, so a repeated launch costs a key computation and a dict
lookup.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from . import ir
from .abi import KernelABI, LoweredKernel
from .arch import Arch, arch_by_name, current_arch
from .backend.binary import Binary
from .backend.compile import compile_kernel
from .backend.lowering import lower_module
from .cache import default_cache
from .language.core import pointer as gl_pointer
from .language.kernel import KernelTemplate, PointerArg, ScalarArg
from .passes.layout_assign import assign_layouts
from .passes.layout_check import check_layouts
from .passes.pipeline import pipeline
from .passes.protocol_async import warn
from .passes.smem_alloc import allocate_shared
from .passes.warp_spec import check_warp_roles
from .runtime import Launcher, LaunchError
from .types import DType, TensorRef

PIPELINE: list[tuple[str, Callable[[ir.Kernel], ir.Kernel]]] = [
    ("layout_assign", assign_layouts),
    ("layout_check", check_layouts),
    ("pipeline", pipeline),          # before the checks: it adds the barriers they check and the smem counts
    ("warp_spec", check_warp_roles),
    ("smem_alloc", allocate_shared),
]


_INTERPRET_ENV = "GLUON_INTERPRET"
# The CPU interpreter's entry, `interpret(template, grid, *args, **kw)`: gluon.interpret sits above this module
# (it traces through the JIT's stand-ins) and installs itself here when imported (`import gluon` imports it).
_INTERPRETER: Callable | None = None
# ... and its stand-ins for the other launch paths (gluon/interpret/entry.py): "compiled" (BoundLaunch.compiled's
# InterpretedKernel), "run_compiled" (a CompiledKernel called), "launcher" (a CompiledKernel's launcher)
_INTERPRETER_ROUTES: dict[str, Callable] = {}


def _env_says_interpret() -> bool:
    return os.environ.get(_INTERPRET_ENV, "").strip().lower() in ("1", "true", "yes", "on")


# GLUON_INTERPRET=1: `kernel[grid](...)` runs in the CPU interpreter (gluon/interpret), no GPU touched. Read
# once, when gluon is imported (as Triton reads TRITON_INTERPRET), so a launch pays one global lookup;
# gluon.interpret.set_enabled() switches it at run time.
_INTERPRET_LAUNCHES = _env_says_interpret()


def _interpret_enabled() -> bool:
    return _INTERPRET_LAUNCHES


def _set_interpret(flag: bool) -> None:
    global _INTERPRET_LAUNCHES
    _INTERPRET_LAUNCHES = bool(flag)


def install_interpreter(fn: Callable, **routes: Callable) -> None:
    """Make `fn(template, grid, *args, **kw)` the entry of `kernel.interpret` and of GLUON_INTERPRET=1 launches,
    and `routes` (compiled, run_compiled, launcher) those of the other launch paths under GLUON_INTERPRET=1."""
    global _INTERPRETER
    _INTERPRETER = fn
    _INTERPRETER_ROUTES.update(routes)


def _positional_constexprs(t, bound: dict, given: dict) -> dict:
    """The constexprs of a call that gave them positionally (`bound`: parameter name -> value), refusing one
    also given by keyword (`given`), as Python refuses a second value for an argument."""
    out = {n: bound[n] for n in t.signature.parameters if n in t.constexprs and n in bound}
    twice = [n for n in out if n in given]
    if twice:
        raise ir.GluonError(f"kernel {t.name} got multiple values for {', '.join(map(repr, twice))} (by position "
                            "and by keyword)", t.loc)
    return out


def _route(name: str) -> Callable:
    _interpreter()
    return _INTERPRETER_ROUTES[name]


def _interpreter() -> Callable:
    if _INTERPRETER is None:
        raise ir.GluonError("the CPU interpreter is not loaded: import gluon.interpret")
    return _INTERPRETER


def run_passes(module: ir.Module) -> ir.Module:
    """Run PIPELINE on every kernel, then verify with all layouts required."""
    for k in module.kernels:
        for _, p in PIPELINE:
            p(k)
    return module.verify(require_layouts=True)


def lower(module: ir.Module) -> LoweredKernel:
    """The TTGIR text of the module's one kernel, and its ABI (passes run)."""
    return lower_module(module)


@dataclass
class CompiledKernel:
    """A compiled specialization: its IR (None for one loaded from the cache by `load_compiled`), TTGIR and
    ABI, binary, and how to launch it."""

    module: ir.Module | None
    lowered: LoweredKernel
    binary: Any                       # gluon.backend.binary.Binary
    timings: dict = field(default_factory=dict)
    _launcher: Any = None
    _n_in_place: int | None = None    # how many positional arguments a call passes through unchanged (-1: none)

    @property
    def kernel(self) -> ir.Kernel:
        if self.module is None:
            raise AttributeError(f"kernel {self.abi.name} was loaded from the kernel cache and has no IR; its ABI "
                                 "(.abi) and binary (.binary) say what it is")
        return self.module.kernel

    @property
    def ttgir(self) -> str:
        return self.lowered.ttgir

    @property
    def abi(self) -> KernelABI:
        return self.lowered.abi

    @property
    def asm(self) -> dict:
        return self.binary.asm

    def sass(self) -> str:
        return self.binary.sass()

    @property
    def registers(self) -> int:
        return self.binary.registers

    @property
    def spills(self) -> int:
        return self.binary.spills

    @property
    def shared_bytes(self) -> int:
        return self.binary.shared_bytes

    @property
    def launcher(self):
        if _INTERPRET_LAUNCHES:          # GLUON_INTERPRET=1: the launcher's arguments, interpreted
            return _route("launcher")(self)
        if self._launcher is None:
            self._launcher = Launcher(self.binary, self.abi)
        return self._launcher

    def takes_args_as_given(self, nargs: int) -> bool:
        """Whether a call's `nargs` positional arguments are the launcher's, unchanged (KernelABI.args_in_place)."""
        return nargs == len(self.abi.runtime_params) and self.abi.args_in_place

    def launch_args(self, args: Sequence[Any], kwargs: dict) -> Sequence[Any]:
        """The launcher's arguments for a call with the caller's `args` and keyword sizes (ABI sources)."""
        if not kwargs and self.takes_args_as_given(len(args)):
            return args
        try:
            return self.abi.bind(args, kwargs)
        except TypeError as e:
            raise ir.GluonError(str(e), self.module.kernel.loc if self.module is not None else None) from None

    def __call__(self, grid, *args, stream=None, meta: dict | None = None, **sizes):
        if _INTERPRET_LAUNCHES:          # GLUON_INTERPRET=1: its IR runs in the interpreter
            return _route("run_compiled")(self, grid, args, sizes, meta)
        launcher = self._launcher
        if launcher is not None:         # the launcher's straight-line entry (runtime/fast_call.py)
            fast = launcher._fast
            if fast is not None and len(args) == self._n_in_place and not sizes and not meta:
                return fast(grid, args, stream)
        else:
            launcher = self.launcher
        n = self._n_in_place
        if n is None:                    # once: the ABI's answer to `takes_args_as_given`
            n = self._n_in_place = len(self.abi.runtime_params) if self.abi.args_in_place else -1
        la = args if not sizes and len(args) == n else self.launch_args(args, sizes)
        if meta and callable(grid):      # a grid function reads the constexprs too
            return launcher(grid, *la, stream=stream, **meta)
        return launcher(grid, *la, stream=stream)


def compile_module(module: ir.Module, *, options: dict | None = None, cache=None) -> CompiledKernel:
    """Passes -> TTGIR and ABI -> binary (disk-cached). Works without a GPU for every supported target."""
    t0 = time.perf_counter()
    run_passes(module)
    t1 = time.perf_counter()
    lowered = lower(module)
    t2 = time.perf_counter()
    binary = compile_kernel(lowered, options=options, cache=cache)
    t3 = time.perf_counter()
    _warn_advisories(module.kernel, binary)
    return CompiledKernel(module, lowered, binary, {"passes_s": t1 - t0, "lower_s": t2 - t1, "compile_s": t3 - t2})


def _warn_advisories(kernel: ir.Kernel, binary) -> None:
    """GL801: ptxas's performance advisories (its C75xx "Potential Performance Loss" lines) as a GluonWarning at the
    kernel's def line: the binary is right but slower than its code says (C7514: every WGMMA waits for the one
    before, when an async WGMMA's registers are read or moved while it may be in flight). GL802: a WGMMA descriptor
    the SASS reads unwritten on some path (`Binary.descriptor_hazards`): the binary is wrong there."""
    for text in binary.advisories:
        warn("GL801", f"kernel {kernel.name}: ptxas: {text}", kernel.loc)
    if "wgmma" in str(binary.asm.get("ptx", "")):            # (descriptor_hazards is [] off CUDA)
        hazards = binary.descriptor_hazards()
        if hazards:
            warn("GL802", f"kernel {kernel.name}: the SASS reads a WGMMA's shared-memory descriptor where some path "
                 f"has not written it ({len(hazards)} places; the first: {hazards[0]}): ptxas dropped its computation, "
                 "the operand is a stale or unrelated address on that path", kernel.loc)


def load_compiled(cache_key: str, abi: KernelABI | dict | None = None, cache=None) -> CompiledKernel:
    """A kernel compiled earlier, from the kernel cache by its key, ready to launch without tracing (the
    tuner's GPU worker runs what its compile pool built). `abi` is the kernel's ABI (or its JSON), else the
    one the cache entry recorded."""
    cache = cache if cache is not None else default_cache()
    path = cache.get(cache_key)
    if path is None:
        raise LookupError(f"no compiled kernel {cache_key} in the kernel cache {cache.root}")
    if isinstance(abi, dict):
        abi = KernelABI.from_json(abi)
    binary = Binary.load(path, key=cache_key, abi=abi)
    if binary.abi is None:
        raise LookupError(f"compiled kernel {cache_key} has no ABI: it cannot be launched")
    return CompiledKernel(None, LoweredKernel(str(binary.asm.get("ttgir", "")), binary.abi), binary)


# ------------------------------------------------------------------------------ specialization


def _is_tensor(v) -> bool:
    return hasattr(v, "data_ptr") or hasattr(v, "__cuda_array_interface__")


_PLAIN = (int, float, bool, type(None))
_MISS = object()               # what a JIT call's exact entry returns for a call of another key


_TENSOR_TYPES: set = set()     # torch's tensor class, once seen (a launch never imports torch itself)


def _from_dlpack(args: tuple) -> tuple:
    """The call's arguments with each DLPack-only object (jax, ...; no data_ptr, no
    __cuda_array_interface__) as a torch tensor viewing its memory, so it specializes and launches as one."""
    if all(type(a) in _PLAIN or _is_tensor(a) or not hasattr(a, "__dlpack__") for a in args):
        return args
    import torch
    return tuple(a if type(a) in _PLAIN or _is_tensor(a) or not hasattr(a, "__dlpack__") else torch.from_dlpack(a)
                 for a in args)


def _tensor_rank(v) -> int:
    shape = getattr(v, "shape", None)
    if shape is None:
        shape = v.__cuda_array_interface__.get("shape", ())
    return len(shape)


def _tensor_dtype(v) -> DType:
    """Our dtype of a tensor argument (torch, or an object with `dtype` / `__cuda_array_interface__`)."""
    dt = getattr(v, "dtype", None)
    if dt is None:
        typestr = v.__cuda_array_interface__["typestr"]
        got = DType.from_typestr(typestr)
        if got is None:
            raise ValueError(f"__cuda_array_interface__ typestr {typestr!r} names no dtype a kernel takes")
        return got
    return DType.from_torch(dt) or DType.from_name(str(dt))


def _data_ptr(v) -> int:
    if hasattr(v, "data_ptr"):
        return v.data_ptr()
    return v.__cuda_array_interface__["data"][0]


def arg_key(v) -> tuple:
    """What a compiled specialization depends on for one runtime argument (on every launch: keep it cheap)."""
    t = type(v)
    if t not in _TENSOR_TYPES and t.__name__ == "Tensor" and hasattr(v, "data_ptr"):
        _TENSOR_TYPES.add(t)                                          # torch's class, seen the first time
    if t in _TENSOR_TYPES:
        return ("t", v.dtype, v.data_ptr() % 16 == 0, v.dim())       # torch: the common case, no str()
    if t is int:
        return ("i", v % 16 == 0, -2**31 <= v < 2**31)
    if _is_tensor(v):
        return ("t", str(v.dtype) if hasattr(v, "dtype") else str(v.__cuda_array_interface__["typestr"]),
                _data_ptr(v) % 16 == 0, _tensor_rank(v))
    if isinstance(v, bool):
        return ("b",)
    if isinstance(v, int):
        return ("i", v % 16 == 0, -2**31 <= v < 2**31)
    if isinstance(v, float):
        return ("f",)
    return ("?", type(v).__name__)


_arg_key = arg_key


def _pointer_key(v, dtype: DType) -> tuple:
    """The key of an int passed for a `gl.pointer(dtype)` parameter: a device address, aligned or not."""
    return ("p", dtype, v % 16 == 0)


def _raw_bytes_of(v, dtype: DType) -> bool:
    """Whether `v` is a `__cuda_array_interface__` object of raw bytes ('<V2') the size of `dtype`."""
    cai = None if hasattr(v, "dtype") else getattr(v, "__cuda_array_interface__", None)
    typestr = str(cai.get("typestr", "")) if cai is not None else ""
    return typestr[1:2] == "V" and typestr[2:] == str(dtype.bits // 8)


def _stand_in(template: KernelTemplate, pname: str, v, key: tuple):
    """The trace-time stand-in for runtime argument `v` of parameter `pname`."""
    want = template.pointers.get(pname)
    if key[0] == "?":
        what = "a device address (an int) or a tensor" if want is not None else "a tensor, an int, a float or a bool"
        raise ir.GluonError(f"kernel {template.name}: argument '{pname}' is a {type(v).__name__}; pass {what}",
                            template.loc)
    if want is not None and key[0] == "t" and _raw_bytes_of(v, want):
        dtype = want                 # bf16 / fp8 data, whose typestr says only 'V2' / 'V1': the annotation says
    else:
        dtype = _tensor_dtype(v) if key[0] == "t" else None
    if want is not None and key[0] != "p":
        ann = repr(gl_pointer(want))
        if key[0] != "t":
            raise ir.GluonError(f"kernel {template.name}: argument '{pname}' is annotated {ann}, but the launch "
                                f"passed a {type(v).__name__}; pass a device address (an int) or a tensor",
                                template.loc)
        if dtype != want:
            got, name = dtype.torch_name or dtype.name, want.torch_name or want.name
            raise ir.GluonError(f"kernel {template.name}: argument '{pname}' is a {got} tensor, but the kernel "
                                f"annotates it {ann}; pass {name} data (.to(torch.{name})) or change the annotation",
                                template.loc)
    return stand_in(template, pname, key, dtype)


def stand_in(template: KernelTemplate, pname: str, key: tuple, dtype: DType | None = None):
    """The stand-in a launch traces parameter `pname` with, from the argument's `_arg_key` (and, for a
    tensor, its dtype): what a caller that traces ahead of the launch (the declarative tuner) uses, so
    that the launch finds the same compiled kernel."""
    kind = key[0]
    if kind == "p":                                      # an int for a gl.pointer(dtype) parameter
        return PointerArg(key[1], 16 if key[2] else 1)
    if kind == "t":
        dt = dtype
        if template.simt:
            return PointerArg(dt, 16 if key[2] else 1)
        return TensorRef(pname, dt, shape=tuple(f"{pname}_shape{i}" for i in range(key[3])), aligned=key[2])
    if kind == "b":
        return ScalarArg(DType.i1)
    if kind == "i":
        return ScalarArg(DType.i32 if key[2] else DType.i64, 16 if key[1] else 1)
    if kind == "f":
        return ScalarArg(DType.f32)
    raise ir.GluonError(f"kernel {template.name}: argument '{pname}' has no stand-in for {key!r}", template.loc)


class JITFunction:
    """Per-template specialization table (held on the template)."""

    def __init__(self, template: KernelTemplate):
        self.template = template
        sig = template.signature.parameters
        self.runtime_params = [n for n in sig if n not in template.constexprs]
        # the element type of each `gl.pointer(...)`-annotated runtime parameter (None for the others)
        self.pointer_dtypes = [template.pointers.get(n) for n in self.runtime_params]
        self.has_pointers = any(d is not None for d in self.pointer_dtypes)
        self.cache: dict[tuple, CompiledKernel] = {}
        # launches already seen, keyed on the call as written (argument keys, keyword constexprs in the
        # caller's order, num_warps, arch as passed, block): a hit skips normalizing the call (`seen_key`)
        # (the compiled kernel, its constexprs, its Launcher where the call's arguments are the launch's)
        self.seen: dict[tuple, tuple[CompiledKernel, dict, Launcher | None]] = {}
        self.constexpr_names = frozenset(template.constexprs)
        # the seen key launched last through its exact entry: (keyword constexprs, num_warps, arch, block,
        # the entry); a repeat of that call goes straight to it (BoundLaunch.__call__). `exact`: the entries
        # made so far, by seen key (None where a key has none)
        self.last: tuple | None = None
        self.exact: dict[tuple, Callable | None] = {}

    def remember(self, key: tuple, launcher: Launcher) -> None:
        """Make `key`'s call the last one (`last`), with its exact entry (fast_call.build given the key) once
        its launcher is loaded."""
        entry = self.exact.get(key, False)
        if entry is False:
            if not launcher.loaded:                 # asked again after the first launch loads the binary
                return
            entry = self.exact[key] = launcher.exact_entry(key[0], _MISS)
        if entry is not None:
            self.last = (dict(key[1]), key[2], key[3], key[4], entry)

    def seen_key(self, args: tuple, kwargs: dict, num_warps, arch, block) -> tuple | None:
        """The `seen` key of a call, or None for a call it does not cover (constexprs passed
        positionally, keyword sizes, DLPack-only objects, unhashable values): those take `specialize`.
        Each argument's `arg_key` determines its specialization key (a `gl.pointer` int's alignment is
        in its int key), so equal seen keys mean one compiled kernel."""
        if len(args) != len(self.runtime_params):
            return None
        keys = []
        for v in args:                   # arg_key, inlined for torch tensors and ints
            t = type(v)
            if t in _TENSOR_TYPES:
                keys.append(("t", v.dtype, v.data_ptr() % 16 == 0, v.dim()))
            elif t is int:
                keys.append(("i", v % 16 == 0, -2**31 <= v < 2**31))
            else:
                k = arg_key(v)
                if k[0] == "?":
                    return None
                keys.append(k)
        if kwargs and not self.constexpr_names.issuperset(kwargs):
            return None
        return tuple(keys), tuple(kwargs.items()), num_warps, arch, block

    def specialize(self, args: Sequence[Any], constexprs: dict, block, num_warps, arch: Arch | None,
                   extra_kw: dict) -> CompiledKernel:
        t = self.template
        keys = tuple(_arg_key(v) for v in args)
        if self.has_pointers:      # an int there is an address, not a scalar
            keys = tuple(_pointer_key(v, d) if d is not None and type(v) is int else k
                         for v, k, d in zip(args, keys, self.pointer_dtypes))
        ck_key = (keys, tuple(sorted(constexprs.items())), block, num_warps, arch.name if arch else None)
        ck = self.cache.get(ck_key)
        if ck is not None:
            return ck
        if len(args) != len(self.runtime_params):
            raise ir.GluonError(f"kernel {t.name} takes {len(self.runtime_params)} runtime arguments "
                                f"({', '.join(self.runtime_params)}), got {len(args)}", t.loc)
        stand_ins = {p: _stand_in(t, p, v, k) for p, v, k in zip(self.runtime_params, args, keys)}
        arch = arch or t.arch or current_arch()
        if arch is None:
            raise ir.GluonError(f"kernel {t.name}: no GPU present to pick an arch; pass arch=", t.loc)
        module = t.trace(**stand_ins, **constexprs, arch=arch, num_warps=num_warps, block=block)
        ck = compile_module(module)
        self.cache[ck_key] = ck
        return ck


def _jit_of(template: KernelTemplate) -> JITFunction:
    jf = getattr(template, "_jit", None)
    if jf is None:
        jf = template._jit = JITFunction(template)
    return jf


class JITKernel(KernelTemplate):
    """A kernel the JIT launches: `kernel[grid](args...)` specializes on the call's arguments (dtypes,
    alignment, divisibility, constexprs, block, warps), compiles once and launches; `kernel.compile(...)`
    traces with stand-ins and compiles without a GPU."""

    def __getitem__(self, launch) -> "BoundLaunch":
        """`kernel[grid]` or `kernel[grid, block]` -> a callable that launches with the arguments (kept per
        launch spec: a launch per call in a loop builds it once)."""
        bound = self.__dict__.get("_bound")
        if bound is None:
            bound = self._bound = {}
        try:
            b = bound.get(launch)
        except TypeError:                # a list grid: not hashable
            return BoundLaunch(self, launch)
        if b is None:
            if len(bound) >= 256:        # grids that follow the problem size: keep the table small
                bound.clear()
            b = bound[launch] = BoundLaunch(self, launch)
        return b

    def compile(self, *args, **kwargs) -> "CompiledKernel":
        """Trace with stand-ins and compile (no GPU needed): see `gluon.jit.compile`."""
        return compile(self, *args, **kwargs)

    def interpret(self, grid, *args, block: Sequence[int] | None = None, num_warps: int | None = None,
                  arch: Arch | str | None = None, programs=None, **kwargs) -> None:
        """Run on the CPU in the IR interpreter (gluon/interpret, docs/INTERPRETER.md): `grid` and the
        arguments as `kernel[grid, block](...)` takes them, on CPU torch tensors or numpy arrays (written in
        place); `programs` runs only those programs of the grid (ints or (x, y, z) tuples); `schedule=`
        "reverse" or an int seed changes how warp roles take turns (default "in_order")."""
        _interpreter()(self, grid, *args, block=block, num_warps=num_warps, arch=arch, programs=programs, **kwargs)


def kernel(fn: Callable | None = None, *, arch: Arch | str | None = None, num_warps: int = 4,
           name: str | None = None):
    """`@kernel(arch=SM90, num_warps=8)`: an explicit-form kernel (shared regions, barriers, roles)."""
    def wrap(f):
        return JITKernel(f, arch=arch, num_warps=num_warps, name=name)
    return wrap(fn) if fn is not None else wrap


def jit(fn: Callable | None = None, *, arch: Arch | str | None = None, num_warps: int = 4):
    """`@gluon.jit`: a SIMT-style kernel launched as `k[grid, (BLOCK,)](args..., CONST=...)`; argument
    types are taken from the call, constexpr parameters specialize the compiled binary."""
    def wrap(f):
        return JITKernel(f, arch=arch, num_warps=num_warps, simt=True)
    return wrap(fn) if fn is not None else wrap


class BoundLaunch:
    """`kernel[grid]` / `kernel[grid, block]`: call it with the kernel's arguments to launch."""

    __slots__ = ("template", "jf", "grid", "block")

    def __init__(self, template: KernelTemplate, launch):
        self.template = template
        self.jf = _jit_of(template)
        if isinstance(launch, tuple) and len(launch) == 2 and isinstance(launch[1], (tuple, list)) \
                and (isinstance(launch[0], (tuple, list)) or callable(launch[0])):
            self.grid, self.block = launch[0], tuple(launch[1])
        else:
            self.grid, self.block = launch, None
        if isinstance(self.grid, int):
            self.grid = (self.grid,)

    def _specialize(self, args, num_warps, arch, kwargs) -> tuple:
        t = self.template
        constexprs = {k: kwargs.pop(k) for k in list(kwargs) if k in t.constexprs}
        if len(args) > len(self.jf.runtime_params):   # constexprs given positionally
            names = list(t.signature.parameters)
            bound = dict(zip(names, args))
            args = tuple(bound[n] for n in self.jf.runtime_params if n in bound)
            constexprs.update(_positional_constexprs(t, bound, constexprs))
        arch = arch_by_name(arch) if isinstance(arch, str) else arch
        args = _from_dlpack(args)
        ck = self.jf.specialize(args, constexprs, self.block, num_warps or t.num_warps, arch, kwargs)
        return ck, args, constexprs

    def compiled(self, *args, num_warps: int | None = None, arch: Arch | str | None = None,
                 **kwargs) -> CompiledKernel:
        """The specialization a call with these arguments would launch, compiled, without launching it:
        for a caller that launches the same specialization many times (`ck(grid, *args)`, or
        `ck.launcher` with `ck.launch_args`) and so skips the per-call specialization lookup. With
        GLUON_INTERPRET=1 it is an interpreted stand-in for one (gluon/interpret/entry.py), compiled never."""
        if _INTERPRET_LAUNCHES:
            t = self.template
            constexprs = {k: kwargs.pop(k) for k in list(kwargs) if k in t.constexprs}
            if len(args) > len(self.jf.runtime_params):   # constexprs given positionally
                bound = dict(zip(t.signature.parameters, args))
                constexprs.update(_positional_constexprs(t, bound, constexprs))
            return _route("compiled")(t, constexprs, self.block, num_warps, arch)
        return self._specialize(args, num_warps, arch, kwargs)[0]

    def __call__(self, *args, num_warps: int | None = None, stream=None, arch: Arch | str | None = None, **kwargs):
        if _INTERPRET_LAUNCHES:
            return _interpreter()(self.template, self.grid, *args, block=self.block, num_warps=num_warps,
                                  arch=arch, **kwargs)
        jf = self.jf
        last = jf.last                   # the call launched last: its exact entry checks its key itself
        if last is not None and last[1] == num_warps and last[2] == arch and last[3] == self.block \
                and last[0] == kwargs:
            if last[4](self.grid, args, stream) is not _MISS:
                return None
        key = jf.seen_key(args, kwargs, num_warps, arch, self.block)
        try:
            hit = jf.seen.get(key)
        except TypeError:                # an unhashable constexpr value
            key = hit = None
        if hit is not None:
            ck, constexprs, launcher = hit
            kwargs = {}
            if launcher is not None and not callable(self.grid):
                jf.remember(key, launcher)
        else:
            ck, args, constexprs = self._specialize(args, num_warps, arch, kwargs)
            launcher = None
            if key is not None:
                launcher = ck.launcher if ck.takes_args_as_given(len(args)) else None
                jf.seen[key] = (ck, constexprs, launcher)
        try:
            if launcher is not None and not callable(self.grid):
                fast = launcher._fast               # its straight-line entry (runtime/fast_call.py), once loaded
                if fast is not None:
                    return fast(self.grid, args, stream)
                return launcher(self.grid, *args, stream=stream)
            return ck(self.grid, *args, stream=stream, meta=constexprs, **kwargs)
        except Exception as e:
            if isinstance(e, LaunchError):
                f = sys._getframe(1)
                raise LaunchError(f"{e}\n    (launched at {f.f_code.co_filename}:{f.f_lineno})") from None
            raise


def compile(template: KernelTemplate, *args, arch: Arch | str | None = None, num_warps: int | None = None,
            block: Sequence[int] | None = None, options: dict | None = None, cache=None, **kwargs) -> CompiledKernel:
    """Trace with stand-ins (as `template.trace`) and compile, without a GPU: for tests and ahead-of-time builds."""
    module = template.trace(*args, arch=arch, num_warps=num_warps, block=block, **kwargs)
    return compile_module(module, options=options, cache=cache)
