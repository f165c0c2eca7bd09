"""What a kernel module exposes to the tuner as `TUNING`: how a config becomes a kernel, and how to check
and time it.

A template is a `TuningTemplate` subclass instance (see gluon/tuning/templates/ and the end of
`examples/copy_kernel.py`). The tuner calls, per (config, shape, dtype):

    legality(config, shape, dtype, arch) -> ir.Module   trace with stand-ins + gluon.jit.run_passes: shared
                                                        memory, registers, warp roles and layouts are
                                                        checked without a GPU; raises gluon.ir.GluonError
                                                        with the reason (the config is then pruned)
    lower(config, shape, dtype, arch) -> LoweredKernel  that module's TTGIR and ABI: the tuner's one trace of
                                                        the job, which the compile pool compiles and the GPU
                                                        worker launches (`run(..., kernel=)`)
    build(lowered) -> Binary                            compile it (in the compile pool: no trace there)
    load({"cache_key", "abi"}) -> CompiledKernel        that binary from the kernel cache (in the GPU worker)
    compile(config, shape, dtype, arch) -> CompiledKernel   trace and compile in this process (gluon check)
    make_inputs(shape, dtype, device, seed) -> dict     fresh random operands (never zeros) and outputs
    poison(inputs)                                      fill the outputs with NaN
    run(inputs, config, kernel=None)                    one launch (of `kernel`, the prebuilt binary, if given)
    output(inputs) / reference(inputs)                  the result and an fp32/fp64 torch reference
    check(out, ref, rtol, atol) -> (ok, max_err, why)   no NaN (every element written), error within tolerance
    baseline(inputs) -> callable                        the vendor baseline (torch.matmul, dst.copy_(src))
    flops(shape), bytes(shape, dtype), roofline_s(shape, dtype, peak_flops, peak_bw)
    model_s(config, shape, dtype, peak_flops, peak_bw, num_sms)   the dry run's ranking model (defaults to
                                                        the roofline; GEMM adds wave and tile quantization)

Shapes are tuples of ints in the order of `dims` (a flag dim, such as attention's CAUSAL, is 0 or 1: a spec
writes it true/false); dtypes are the names "fp16", "bf16", "fp32". Configs are dicts of parameter name ->
value as the spec writes them (BLOCK_M, STAGES, CONSUMER_WARPS, ...).

What `gluon.load` uses (gluon/loader.py): `shape_of(*args, **kwargs)` / `dtype_of(...)` name a user call's
bucket, `bucket_distance(built, shape)` ranks the built buckets for it (None: that bucket cannot serve it),
`fallback_config(shape, dtype)` is run where none can (None: the loader refuses the call), and
`call(config, *args, **kwargs)` runs it; `call_args(inputs)` / `call_kwargs(inputs)` rebuild a user call
from `make_inputs`' dict (bench/tuned.py). `shape_problem(shape)` says what is wrong with a spec's shape
for this template (the tuner and `gluon check` refuse the spec with it).
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import ir
from ..abi import LoweredKernel
from ..dtypes import TUNER_DTYPES, DType
from ..backend.compile import compile_kernel
from ..jit import CompiledKernel, compile_module, load_compiled, lower, run_passes

# the dtypes a template takes unless it says otherwise (the spec may name every one of TUNER_DTYPES)
DTYPE_NAMES = ("fp16", "bf16", "fp32")

# H200 SXM peaks used by the dry run's model (dense fp16/bf16 tensor-core flop/s, HBM3e bytes/s).
H200_PEAK_FLOPS = 989e12
H200_PEAK_BW = 4.8e12
H200_SMS = 132


def gluon_dtype(name: str) -> DType:
    try:
        return TUNER_DTYPES[name]
    except KeyError:
        raise ir.GluonError(f"unknown dtype {name!r}; the tuner knows {', '.join(DTYPE_NAMES)}") from None


def dtype_name(torch_dtype_) -> str:
    """The tuner's name ("fp16", ...) of a torch dtype; KeyError for dtypes the tuner does not know."""
    dt = DType.from_torch(torch_dtype_)
    if dt is None or dt.tuner_name is None:
        raise KeyError(str(torch_dtype_))
    return dt.tuner_name


def torch_dtype(name: str):
    return TUNER_DTYPES[name].torch


def element_size(name: str) -> int:
    return TUNER_DTYPES[name].bytes


def shape_str(shape) -> str:
    return "x".join(str(int(d)) for d in shape)


class TuningTemplate:
    """Base class of a kernel's `TUNING` object. Subclasses set `name`, `dims`, `params` (the parameter
    names they accept) and implement the kernel-specific hooks; the rest has generic defaults."""

    name: str = "?"
    dims: tuple[str, ...] = ()
    params: tuple[str, ...] = ()          # accepted parameter names (empty: anything)
    dtypes: tuple[str, ...] = DTYPE_NAMES  # dtypes the kernel takes
    archs: tuple[str, ...] = ()           # the spec arch names it runs on (empty: any)

    # -- identity -----------------------------------------------------------------------------------
    def source_file(self) -> str | None:
        mod = sys.modules.get(type(self).__module__)
        return getattr(mod, "__file__", None) if mod is not None else None

    def source_hash(self) -> str:
        """sha256 (16 hex digits) of the source of the module that defines this template (the kernel
        lives there too): rows of an edited kernel are not mistaken for the current one's."""
        f = self.source_file()
        try:
            data = Path(f).read_bytes() if f else inspect.getsource(type(self)).encode()
        except (OSError, TypeError):
            data = repr(type(self)).encode()
        return hashlib.sha256(data).hexdigest()[:16]

    # -- checks without a GPU ---------------------------------------------------------------------------
    def check_config(self, config: dict, shape, dtype: str, arch: str) -> None:
        """Cheap checks before tracing: known parameter names, a dtype the kernel takes, a shape the
        template takes (`shape_problem`). Raises GluonError."""
        if self.params:
            unknown = sorted(set(config) - set(self.params))
            if unknown:
                raise ir.GluonError(f"{self.name} has no parameter {', '.join(unknown)} "
                                    f"(it takes {', '.join(self.params)})")
        if dtype not in self.dtypes:
            raise ir.GluonError(f"{self.name} takes {', '.join(self.dtypes)}, not {dtype}")
        why = self.shape_problem(shape)
        if why:
            raise ir.GluonError(f"{self.name} shape {shape_str(shape)}: {why}")

    def shape_problem(self, shape) -> str | None:
        """What is wrong with a spec's shape for this template, or None. The default: `len(dims)` dims,
        each >= 1 (a flag dim written false is 0: a template with flag dims checks them itself)."""
        shape = tuple(shape)
        if self.dims and len(shape) != len(self.dims):
            return f"{len(shape)} dims where {self.name} takes {len(self.dims)} ({', '.join(self.dims)})"
        bad = [f"{self.dims[i] if i < len(self.dims) else i}={d}" for i, d in enumerate(shape) if int(d) < 1]
        if bad:
            return f"{', '.join(bad)}: {self.name}'s dims are sizes >= 1"
        return None

    def value_problem(self, name: str, value) -> str | None:
        """What is wrong with this value of parameter `name` whatever the rest of the config (a spec
        offering it is refused before any config is looked at), or None. The default: nothing."""
        return None

    def trace(self, config: dict, shape, dtype: str, arch: str) -> ir.Module:
        """The kernel's IR for this config (before passes). Subclasses implement it."""
        raise NotImplementedError

    def legality(self, config: dict, shape, dtype: str, arch: str) -> ir.Module:
        """Trace and run the passes (layouts, pipeline, warp roles, shared memory): the module, or
        GluonError with the reason the config cannot work."""
        self.check_config(config, shape, dtype, arch)
        return run_passes(self.trace(config, shape, dtype, arch))

    def lower(self, config: dict, shape, dtype: str, arch: str) -> LoweredKernel:
        """The legal config's TTGIR and ABI, what the compile pool compiles and the GPU worker launches (the
        tuner traces each (config, shape, dtype) once, here). Raises GluonError as `legality` does."""
        return lower(self.legality(config, shape, dtype, arch))

    def build(self, lowered: LoweredKernel):
        """Compile what `lower` returned (the compile pool calls it): a binary with `registers`, `spills`,
        `shared_bytes` and its cache `key`."""
        return compile_kernel(lowered)

    def load(self, kernel: dict) -> CompiledKernel:
        """The binary `build` made, from the kernel cache (`kernel`: its cache_key and ABI), ready to launch
        without tracing: what the GPU worker hands `run`."""
        return load_compiled(kernel["cache_key"], kernel.get("abi"))

    def legality_key(self, config_id: str, shape, dtype: str, arch: str) -> tuple:
        """Configs with equal keys get the same verdict (the tuner caches it). Kernels whose trace does
        not depend on the shape drop it."""
        return (config_id, tuple(shape), dtype, arch)

    def compile(self, config: dict, shape, dtype: str, arch: str) -> CompiledKernel:
        """Trace, passes, TTGIR, Triton binary (disk-cached): a gluon.jit.CompiledKernel. No GPU needed.
        The trace is the one the launch makes (same stand-ins), so the launch hits the disk cache."""
        self.check_config(config, shape, dtype, arch)
        return compile_module(self.trace(config, shape, dtype, arch))

    def compile_key(self, config_id: str, shape, dtype: str, arch: str) -> tuple:
        """Configs with equal keys compile to the same kernel (the tuner lowers and compiles it once)."""
        return self.legality_key(config_id, shape, dtype, arch)

    # -- on the GPU ---------------------------------------------------------------------------------------
    def make_inputs(self, shape, dtype: str, device, seed: int) -> dict:
        raise NotImplementedError

    def seed_configs(self, shapes=(), dtypes=()) -> list[dict]:
        """Hand-picked configs (in the spec's parameter names) a fresh study measures first; `shapes` and
        `dtypes` are the study's, for a template whose pick depends on the problem (`template_seeds` calls a
        template written without them with none)."""
        return []

    # -- what gluon.load's callables use ---------------------------------------------------------------
    def shape_of(self, *args, **kwargs) -> tuple[int, ...]:
        """The problem shape (in `dims` order) of a user call's arguments, to pick a built bucket."""
        raise NotImplementedError

    def dtype_of(self, *args, **kwargs) -> str:
        """The dtype name ("fp16", ...) of a user call, to pick a built bucket."""
        return dtype_name(args[0].dtype)

    def bucket_distance(self, built, shape) -> float | None:
        """How far a call of `shape` is from the bucket built for shape `built` (the loader runs the nearest
        one of the call's dtype), or None where that bucket's config cannot serve the call. The default:
        closest in log space over the dims."""
        return log_distance(built, shape)

    def fallback_config(self, shape, dtype: str) -> dict | None:
        """The config for a call no built bucket serves (the loader warns once and runs it), or None: the
        loader refuses the call (the default)."""
        return None

    def call(self, config: dict, *args, out=None, **kwargs):
        """Run the kernel with `config` on a user's arguments and return the output."""
        raise NotImplementedError

    def bind(self, config: dict) -> Callable[..., Any]:
        """What gluon.load's callable runs for a built bucket's `config`: `call` with the config bound. A
        template whose `call` maps the config to its kernel's on every call does that once here instead."""
        return functools.partial(self.call, config)

    def call_args(self, inputs: dict) -> tuple:
        """The user-call arguments (as `call` takes them after config) held in `make_inputs`' dict."""
        raise NotImplementedError

    def call_kwargs(self, inputs: dict) -> dict:
        """The user-call keyword arguments (besides `out`) of `make_inputs`' dict: none by default."""
        return {}

    def run(self, inputs: dict, config: dict, kernel: CompiledKernel | None = None) -> None:
        """One launch of `config` on `inputs`. The tuner's GPU worker passes `kernel`, the binary the compile
        pool built from this process's trace (`lower`); a template that takes it launches that instead of
        tracing again (one whose `run` has no `kernel` parameter is called without it)."""
        raise NotImplementedError

    def output(self, inputs: dict):
        return inputs["out"]

    def poison(self, inputs: dict) -> None:
        self.output(inputs).fill_(float("nan"))

    def reference(self, inputs: dict):
        raise NotImplementedError

    def baseline(self, inputs: dict) -> Callable[[], Any]:
        raise NotImplementedError

    def check(self, out, ref, rtol: float, atol: float) -> tuple[bool, float, str | None]:
        """(ok, max_err, reason). max_err = max|out - ref| / max|ref| (0 when ref is all zeros and out
        equals it); ok when no element is NaN/inf (outputs are poisoned with NaN, so this also proves
        every element was written) and max|out - ref| <= atol + rtol * max|ref|. Chunked, so a 4 GiB
        output needs no 3x temporaries."""
        import torch
        o = out.reshape(-1)
        r = ref.reshape(-1)
        if o.numel() != r.numel():
            return False, float("inf"), f"output has {o.numel()} elements, reference {r.numel()}"
        bad = 0
        max_diff = 0.0
        max_ref = 0.0
        chunk = 1 << 25
        for i in range(0, o.numel(), chunk):
            oc = o[i:i + chunk].to(torch.float64)
            rc = r[i:i + chunk].to(torch.float64)
            bad += int((~torch.isfinite(oc)).sum())
            if oc.numel():
                d = (oc - rc).abs().nan_to_num(nan=0.0, posinf=0.0)
                max_diff = max(max_diff, float(d.max()))
                max_ref = max(max_ref, float(rc.abs().max()))
        max_err = max_diff / max_ref if max_ref > 0 else (0.0 if max_diff == 0 else float("inf"))
        if bad:
            return False, max_err, (f"{bad} of {o.numel()} output elements are NaN/inf "
                                    "(not written, or overflow)")
        if max_diff > atol + rtol * max_ref:
            return False, max_err, (f"max |out - ref| = {max_diff:.3g} exceeds atol + rtol * max|ref| = "
                                    f"{atol:g} + {rtol:g} * {max_ref:.3g} (relative error {max_err:.3g})")
        return True, max_err, None

    # -- models ------------------------------------------------------------------------------------------
    def flops(self, shape) -> float:
        return 0.0

    def bytes(self, shape, dtype: str) -> float:
        return 0.0

    def roofline_s(self, shape, dtype: str, peak_flops: float = H200_PEAK_FLOPS,
                   peak_bw: float = H200_PEAK_BW) -> float:
        """The least time the work can take: max(flops / peak flop/s, bytes / peak bandwidth)."""
        return max(self.flops(shape) / peak_flops, self.bytes(shape, dtype) / peak_bw)

    def model_s(self, config: dict, shape, dtype: str, peak_flops: float = H200_PEAK_FLOPS,
                peak_bw: float = H200_PEAK_BW, num_sms: int = H200_SMS) -> float:
        """The dry run's estimate, for ranking configs only (not a prediction)."""
        return self.roofline_s(shape, dtype, peak_flops, peak_bw)


def log_distance(a, b) -> float:
    """sum over the dims of |log a_i - log b_i| (dims below 1 count as 1)."""
    return sum(abs(math.log(max(1, int(x))) - math.log(max(1, int(y)))) for x, y in zip(a, b))


def waves_efficiency(units: int, slots: int) -> float:
    """Useful fraction of the last wave: units / (ceil(units / slots) * slots)."""
    if units <= 0 or slots <= 0:
        return 1.0
    return units / (math.ceil(units / slots) * slots)


# ------------------------------------------------------------------------------------- resolution

_LOADED: dict[tuple, Any] = {}


def import_file(path: str | Path):
    """Import a .py file once per process under a name derived from its absolute path, so every
    loader of the same file (spec resolution, gluon.load, worker processes) shares one module. A file
    whose import fails leaves nothing half-initialized in sys.modules."""
    path = Path(path).resolve()
    name = "gluon_tuning_template_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    mspec = importlib.util.spec_from_file_location(name, path)
    if mspec is None or mspec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(mspec)
    sys.modules[name] = mod
    try:
        mspec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def load_template_ref(ref: str, base_dir: str | Path | None = None):
    """"module:attr" or "path/file.py:attr" (relative to base_dir, else the working directory) -> the
    object. For code paths without a spec (tests, worker processes)."""
    key = (ref, str(base_dir))
    if key in _LOADED:
        return _LOADED[key]
    mod_name, _, attr = ref.rpartition(":")
    if not mod_name or not attr:
        raise ValueError(f"template {ref!r}: write 'module:ATTR' or 'file.py:ATTR'")
    if mod_name.endswith(".py"):
        p = Path(mod_name)
        if not p.is_absolute() and base_dir is not None and (Path(base_dir) / p).exists():
            p = Path(base_dir) / p
        mod = import_file(p)
    else:
        mod = importlib.import_module(mod_name)
    obj = getattr(mod, attr)
    _LOADED[key] = obj
    return obj


def template_seeds(template, shapes, dtypes) -> list[dict]:
    """`template.seed_configs` for a study of `shapes` x `dtypes`: given them where it takes them, else called
    with none (a template written before they were passed)."""
    fn = template.seed_configs
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = ()
    if any(p.name == "shapes" or p.kind is p.VAR_KEYWORD for p in params):
        return list(fn(shapes=tuple(shapes), dtypes=tuple(dtypes)))
    return list(fn())
