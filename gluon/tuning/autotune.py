"""`@gluon.autotune`: time a kernel's configs on the first launch of each key and keep the fastest.

    import gluon
    import gluon.language as gl

    @gluon.autotune(configs=[{"XBLOCK": 512, "num_warps": 4}, {"XBLOCK": 1024, "num_warps": 4},
                             {"XBLOCK": 2048, "num_warps": 8}],
                    key=["n_elements"])
    @gluon.jit
    def copy_kernel(dst_ptr, src_ptr, n_elements, XBLOCK: gl.constexpr):
        idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
        if idx < n_elements:
            dst_ptr[idx] = src_ptr[idx]

    grid = lambda meta: (gl.cdiv(meta["n_elements"], meta["XBLOCK"]),)
    copy_kernel[grid, lambda config: (config["XBLOCK"],)](dst, src, n)

In the spirit of `triton.autotune`. A **config** is a dict of the kernel's constexpr parameters, plus
optionally `num_warps` and `block` (the launch block of a SIMT kernel, for kernels whose block depends
on the config; or give the launch a callable block, `k[grid, lambda config: (config["XBLOCK"],)]`).
The grid may be a callable: it gets the launch's arguments by name and the config's constexprs.

**On a launch** whose key is new (the values of the `key` arguments — a tensor counts by its shape —
plus the dtypes of every tensor argument, as Triton does), every config is

1. compiled for this launch (trace, passes, TTGIR, binary: the same specialization the launch uses);
   a config the passes reject (a GluonError: shared memory, registers, layouts, ...) is *pruned* and
   skipped with its reason, a compiler failure is a *compile_error*;
2. verified, only when `reference=` is given: `reference(**args)` (the launch's runtime arguments by
   name) returns `{output name: expected tensor}`; each output is poisoned with NaN, the config runs
   once, and the output is checked like the tuner checks (`TuningTemplate.check`: no NaN, so every
   element was written; max |out - ref| <= atol + rtol * max |ref|) -> *wrong_result* if not;
3. timed like the tuner's GPU worker times (`gluon.tuning.measure.measure_on_gpu`):
   `triton.testing.do_bench`, CUDA events, L2 flushed before every run, quantiles 0.5 / 0.1 / 0.9;
   `repeats` rounds, medians over rounds. A launch that fails is a *runtime_error*.

The fastest working config is cached for the key (in memory, per decorated kernel: a second launch
with the same key times nothing) and launched. Arguments named in `restore_value` are restored after
each config's runs (for kernels that update a tensor in place). Every config's outcome is written as a
row of the tuner's results store (`results_root`, spec name = the kernel's name, dry_run False, trial =
the config's index, study = "autotune.<kernel>.<key>"), so `gluon results` and `gluon report` show
them; `results_root=None` writes nothing. A store that cannot be written warns and is skipped.

**Without a GPU** a launch raises what any launch raises (no arch to compile for, or a CPU tensor);
`kernel.prune(*stand_ins, arch="sm90")` (also `autotune_prune`) traces and compiles every config with
trace-time stand-ins (`PointerArg`, `ScalarArg`, `TensorRef`, ...) and returns each verdict with its
reason, registers, spills and shared bytes: no GPU needed. `_timer(fn, config) -> ms` (or
`(median, p10, p90)`) replaces the CUDA timing: the tests inject a fake clock.

The decorated object keeps the kernel's `.trace`, `.compile`, `.name`, ... (everything else is the
wrapped `KernelTemplate`'s); `.cache` maps keys to chosen configs, `.timings` keys to every config's
outcome, `.best_config` is the last choice.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import statistics
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from .. import ir

LAUNCH_OPTIONS = ("num_warps", "stream", "arch")
CONFIG_EXTRAS = ("num_warps", "block")


def _is_tensor(v) -> bool:
    return hasattr(v, "data_ptr") and hasattr(v, "shape")


def _dtype_name(dt) -> str:
    from .template import dtype_name
    try:
        return dtype_name(dt)
    except KeyError:                       # a dtype the tuner's templates do not take: its torch name
        return str(dt).replace("torch.", "")


def _config_id(config: dict) -> str:
    from .space import SearchSpace
    return SearchSpace.config_id(config)


def cuda_timer(fn: Callable[[], Any], config: dict, warmup_ms: int = 25, rep_ms: int = 100) -> list[float]:
    """[median, p10, p90] ms of `fn`: what the tuner's GPU worker measures (CUDA events, L2 flushed)."""
    from .measure import cuda_times
    return cuda_times(fn, warmup_ms, rep_ms)


def _cuda_available() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:                                   # noqa: BLE001
        return False


class Autotuner:
    """A KernelTemplate that picks its config per key at launch (see the module docstring)."""

    def __init__(self, template, configs: Sequence[dict], key: Sequence[str], *, reference: Callable | None = None,
                 rtol: float = 1e-2, atol: float = 0.0, restore_value: Sequence[str] = (),
                 results_root: str | None = "results", repeats: int = 1, warmup_ms: int = 25, rep_ms: int = 100,
                 verbose: bool = False, _timer: Callable | None = None):
        from ..language.kernel import KernelTemplate
        if isinstance(template, Autotuner):
            raise TypeError(f"{template.name}: @gluon.autotune is applied twice")
        if not isinstance(template, KernelTemplate):
            raise TypeError("@gluon.autotune(...) goes above @gluon.jit or @gluon.kernel (it wraps a gluon kernel, "
                            f"not a {type(template).__name__})")
        self.template = template
        self.configs = [dict(c) for c in configs]
        if not self.configs:
            raise ValueError(f"autotune {template.name}: give at least one config")
        params = list(template.signature.parameters)
        self.key = list(key)
        for k in self.key:
            if k not in params:
                raise ValueError(f"autotune {template.name}: key {k!r} is not a parameter of the kernel "
                                 f"(it has {', '.join(params)})")
        for i, c in enumerate(self.configs):
            if not isinstance(c, dict):
                raise TypeError(f"autotune {template.name}: config {i} is a {type(c).__name__}; write a dict of "
                                "constexprs (plus num_warps / block)")
            bad = [n for n in c if n not in template.constexprs and n not in CONFIG_EXTRAS]
            if bad:
                raise ValueError(f"autotune {template.name}: config {i} sets {', '.join(bad)}, which "
                                 f"{'is not a constexpr' if len(bad) == 1 else 'are not constexprs'} of the "
                                 f"kernel (constexprs: {', '.join(sorted(template.constexprs)) or 'none'}; "
                                 f"also allowed: {', '.join(CONFIG_EXTRAS)})")
        for n in restore_value:
            if n not in params:
                raise ValueError(f"autotune {template.name}: restore_value {n!r} is not a parameter of the kernel")
        self.reference = reference
        self.rtol, self.atol = float(rtol), float(atol)
        self.restore_value = list(restore_value)
        self.results_root = results_root
        self.repeats = max(1, int(repeats))
        self.warmup_ms, self.rep_ms = warmup_ms, rep_ms
        self.verbose = verbose
        self._timer = _timer
        self.cache: dict[tuple, dict] = {}
        self.timings: dict[tuple, list[dict]] = {}
        self.best_config: dict | None = None
        self.tuned = 0                                  # keys tuned (for tests and curiosity)
        self._lock = threading.RLock()
        self.__doc__ = template.__doc__
        self.__wrapped__ = template

    # -- the wrapped kernel -------------------------------------------------------------------------
    def __getattr__(self, name):
        if name == "template":                          # not set yet (during unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.template, name)

    def trace(self, *args, **kwargs):
        return self.template.trace(*args, **kwargs)

    def compile(self, *args, **kwargs):
        return self.template.compile(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<gluon autotuned kernel {self.template.name}: {len(self.configs)} configs, key {self.key}>"

    def reset(self) -> None:
        """Forget every key's choice (the next launches time again)."""
        with self._lock:
            self.cache.clear()
            self.timings.clear()

    # -- launching ----------------------------------------------------------------------------------
    def __getitem__(self, launch):
        """`kernel[grid]` or `kernel[grid, block]` (block: a tuple, or a callable of the config)."""
        if isinstance(launch, tuple) and len(launch) == 2 and (isinstance(launch[1], (tuple, list))
                                                               or callable(launch[1])) \
                and (isinstance(launch[0], (tuple, list)) or callable(launch[0])):
            grid, block = launch
        else:
            grid, block = launch, None
        if isinstance(grid, int):
            grid = (grid,)
        return _AutotunedLaunch(self, grid, block)

    def _split(self, args: tuple, kwargs: dict):
        """(runtime args by name, caller's constexprs, launch options, size kwargs)."""
        t = self.template
        names = list(t.signature.parameters)
        if len(args) > len(names):
            raise ir.GluonError(f"kernel {t.name} takes {len(names)} arguments, got {len(args)}", t.loc)
        bound = dict(zip(names, args))
        options, sizes = {}, {}
        for k, v in kwargs.items():
            if k in t.signature.parameters:
                if k in bound:
                    raise ir.GluonError(f"kernel {t.name}: argument {k!r} given twice", t.loc)
                bound[k] = v
            elif k in LAUNCH_OPTIONS:
                options[k] = v
            else:
                sizes[k] = v
        runtime = {n: bound[n] for n in names if n not in t.constexprs and n in bound}
        missing = [n for n in names if n not in t.constexprs and n not in bound]
        if missing:
            raise ir.GluonError(f"kernel {t.name}: missing argument{'s' if len(missing) > 1 else ''} "
                                f"{', '.join(missing)}", t.loc)
        fixed = {n: bound[n] for n in names if n in t.constexprs and n in bound}
        tuned = sorted({n for c in self.configs for n in c if n in fixed})
        if tuned:
            raise ir.GluonError(f"autotune {t.name}: {', '.join(tuned)} {'is' if len(tuned) == 1 else 'are'} "
                                "chosen by the autotuner; do not pass it at the launch", t.loc)
        return runtime, fixed, options, sizes

    def key_of(self, runtime: dict, fixed: dict) -> tuple:
        """The cache key of a launch: the key arguments' values (a tensor: its shape), then every tensor
        argument's dtype."""
        t = self.template
        out = []
        for k in self.key:
            if k in runtime:
                v = runtime[k]
            elif k in fixed:
                v = fixed[k]
            else:
                v = t.signature.parameters[k].default
            out.append(("tensor", tuple(int(d) for d in v.shape)) if _is_tensor(v) else v)
        out.extend(str(v.dtype) for v in runtime.values() if _is_tensor(v))
        return tuple(out)

    def _merged(self, config: dict, fixed: dict, options: dict, block):
        """(constexprs, num_warps, block) of one config at this launch."""
        constexprs = dict(fixed)
        constexprs.update({k: v for k, v in config.items() if k not in CONFIG_EXTRAS})
        nw = config.get("num_warps", options.get("num_warps"))
        b = config.get("block")
        if b is None and block is not None:
            b = block(dict(config)) if callable(block) else block
        return constexprs, nw, (tuple(b) if b is not None else None)

    def _bound(self, grid, block):
        from ..jit import BoundLaunch
        return BoundLaunch(self.template, (grid, block) if block is not None else grid)

    def launch_config(self, config: dict, grid, block, args: tuple, kwargs: dict):
        """Launch with one config (no tuning)."""
        runtime, fixed, options, sizes = self._split(args, kwargs)
        return self._launch(config, grid, block, runtime, fixed, options, sizes)

    def _launch(self, config, grid, block, runtime, fixed, options, sizes):
        constexprs, nw, b = self._merged(config, fixed, options, block)
        opts = {k: v for k, v in options.items() if k != "num_warps"}
        return self._bound(grid, b)(*runtime.values(), num_warps=nw, **opts, **constexprs, **sizes)

    def choose(self, grid, block, args: tuple, kwargs: dict) -> dict:
        """The config for this launch's key: cached, else every config timed now (see the module docstring)."""
        runtime, fixed, options, sizes = self._split(args, kwargs)
        return self._choose(grid, block, runtime, fixed, options, sizes)

    def _choose(self, grid, block, runtime, fixed, options, sizes) -> dict:
        key = self.key_of(runtime, fixed)
        cfg = self.cache.get(key)
        if cfg is not None:
            return cfg
        with self._lock:
            cfg = self.cache.get(key)
            if cfg is None:
                cfg = self._tune(key, grid, block, runtime, fixed, options, sizes)
                self.cache[key] = cfg
        return cfg

    def _call(self, grid, block, args: tuple, kwargs: dict):
        runtime, fixed, options, sizes = self._split(args, kwargs)
        if self._timer is None and not _cuda_available():
            # no GPU: what a launch does without one (it raises: no arch, or a CPU tensor)
            return self._launch(self.configs[0], grid, block, runtime, fixed, options, sizes)
        cfg = self._choose(grid, block, runtime, fixed, options, sizes)
        self.best_config = cfg
        return self._launch(cfg, grid, block, runtime, fixed, options, sizes)

    # -- tuning -------------------------------------------------------------------------------------
    def _arch(self, options):
        from ..arch import arch_by_name, current_arch
        a = options.get("arch")
        a = arch_by_name(a) if isinstance(a, str) else a
        a = a or self.template.arch or current_arch()
        if a is None:
            raise ir.GluonError(f"kernel {self.template.name}: no GPU present to pick an arch; pass arch=",
                                self.template.loc)
        return a

    def _tune(self, key, grid, block, runtime, fixed, options, sizes) -> dict:
        from ..jit import _jit_of
        from .expand import TRACE_LOCK, error_reason, first_lines
        t = self.template
        arch = self._arch(options)
        jf = _jit_of(t)
        args = tuple(runtime.values())
        timer = self._timer or (lambda fn, c: cuda_timer(fn, c, self.warmup_ms, self.rep_ms))
        saved = {n: runtime[n].clone() for n in self.restore_value if n in runtime and _is_tensor(runtime[n])}
        expected = None
        if self.reference is not None:
            expected = self.reference(**runtime)
            if not isinstance(expected, dict):
                raise TypeError(f"autotune {t.name}: reference(**args) must return {{output name: expected tensor}}, "
                                f"got a {type(expected).__name__}")
            unknown = [n for n in expected if n not in runtime]
            if unknown:
                raise ValueError(f"autotune {t.name}: reference returned {', '.join(unknown)}, which "
                                 f"{'is' if len(unknown) == 1 else 'are'} not a runtime argument of the kernel")
        results = []
        for i, config in enumerate(self.configs):
            res = {"index": i, "config": dict(config), "config_id": _config_id(config), "status": "ok", "reason": None}
            results.append(res)
            constexprs, nw, b = self._merged(config, fixed, options, block)
            try:
                with TRACE_LOCK:
                    ck = jf.specialize(args, constexprs, b, nw or t.num_warps, arch, sizes)
                res.update(compile_s=ck.timings.get("compile_s"), registers=_int(ck, "registers"),
                           spills=_int(ck, "spills"), shared_bytes=_int(ck, "shared_bytes"))
            except ir.GluonError as e:
                res.update(status="pruned", reason=error_reason(e))
                continue
            except Exception as e:                      # noqa: BLE001 - the compiler's failure: skip the config
                res.update(status="compile_error", reason=first_lines(f"{type(e).__name__}: {e}"))
                continue

            def run(config=config):
                return self._launch(config, grid, block, runtime, fixed, options, sizes)

            try:
                if expected is not None:
                    ok, max_err, why = self._verify(run, runtime, expected)
                    res["max_err"] = max_err
                    if not ok:
                        res.update(status="wrong_result", reason=why)
                        continue
                rounds = []
                for _ in range(self.repeats):
                    r = timer(run, dict(config))
                    r = [float(r)] * 3 if isinstance(r, (int, float)) else [float(x) for x in r]
                    rounds.append(r)
                res.update(median_ms=statistics.median(r[0] for r in rounds),
                           p10_ms=statistics.median(r[1] for r in rounds),
                           p90_ms=statistics.median(r[2] for r in rounds))
            except Exception as e:                      # noqa: BLE001 - a failing launch: skip the config
                res.update(status="runtime_error", reason=first_lines(f"{type(e).__name__}: {e}"))
            finally:
                for n, v in saved.items():
                    runtime[n].copy_(v)
        self.timings[key] = results
        self.tuned += 1
        ok = [r for r in results if r["status"] == "ok"]
        if ok:
            best = min(ok, key=lambda r: (r["median_ms"], r["index"]))
            best["best"] = True
        self._record(key, results, arch, runtime)
        if not ok:
            why = "; ".join(f"config {r['index']} {r['config']}: {r['status']}: "
                            f"{str(r['reason'] or '').splitlines()[0] if r['reason'] else ''}" for r in results)
            raise ir.GluonError(f"autotune {t.name}: no config works for key {self._key_text(key)}: {why}", t.loc)
        if self.verbose:
            skipped = len(results) - len(ok)
            print(f"autotune {t.name} {self._key_text(key)}: {best['config']} {best['median_ms']:.4g} ms "
                  f"({len(ok)} timed{f', {skipped} skipped' if skipped else ''})", file=sys.stderr, flush=True)
        return dict(best["config"])

    def _verify(self, run, runtime, expected):
        from .template import TuningTemplate
        for n in expected:
            out = runtime[n]
            if getattr(out, "is_floating_point", lambda: False)():
                out.fill_(float("nan"))
        run()
        _synchronize(runtime)
        checker, worst = TuningTemplate(), 0.0
        for n, ref in expected.items():
            ok, max_err, why = checker.check(runtime[n], ref, self.rtol, self.atol)
            if not ok:
                return False, max_err, f"{n}: {why}"
            worst = max(worst, max_err)
        return True, worst, None

    def _key_text(self, key) -> str:
        parts = []
        for name, v in zip(self.key, key):
            parts.append(f"{name}={'x'.join(map(str, v[1])) if isinstance(v, tuple) and v[:1] == ('tensor',) else v}")
        return ",".join(parts) or "-"

    # -- the results store ----------------------------------------------------------------------------
    def _record(self, key, results, arch, runtime) -> None:
        if self.results_root is None:
            return
        try:
            from .measure import versions
            from .results import ResultsStore, make_row
            env = self._environment()
            env.update(versions())
            shape = []
            for v in key[:len(self.key)]:
                if isinstance(v, tuple) and v[:1] == ("tensor",):
                    shape.extend(v[1])
                elif isinstance(v, int) and not isinstance(v, bool):
                    shape.append(v)
            tensors = [v for v in runtime.values() if _is_tensor(v)]
            dtype = _dtype_name(tensors[0].dtype) if tensors else "-"
            t = self.template
            study = f"autotune.{t.name}.{self._key_text(key)}"
            spec_hash = hashlib.sha256(json.dumps([self.configs, self.key], sort_keys=True, default=str)
                                       .encode()).hexdigest()[:16]
            rows = []
            for r in results:
                rows.append(make_row(
                    spec_name=t.name, spec_hash=spec_hash, template=f"autotune:{t.fn.__module__}:{t.fn.__qualname__}",
                    template_hash=_source_hash(t.fn), config_id=r["config_id"], config=r["config"],
                    shape=tuple(shape), dtype=dtype, arch=arch.name, status=r["status"], reason=r.get("reason"),
                    compile_s=r.get("compile_s"), registers=r.get("registers"), spills=r.get("spills"),
                    shared_bytes=r.get("shared_bytes"), median_ms=r.get("median_ms"), p10_ms=r.get("p10_ms"),
                    p90_ms=r.get("p90_ms"), max_err=r.get("max_err"), dry_run=False, retimed=False,
                    trial=r["index"], study=study, **env))
            ResultsStore(self.results_root).write_many(rows)
        except Exception as e:                          # noqa: BLE001 - the launch matters more than the record
            warnings.warn(f"autotune {self.template.name}: the timings were not recorded under "
                          f"{self.results_root}/: {type(e).__name__}: {e}", stacklevel=4)

    @staticmethod
    def _environment() -> dict:
        try:
            import torch
            if torch.cuda.is_available():
                p = torch.cuda.get_device_properties(torch.cuda.current_device())
                return {"device": p.name, "sm_count": int(p.multi_processor_count)}
        except Exception:                               # noqa: BLE001
            pass
        return {"device": "unknown-device", "sm_count": None}

    # -- without a GPU --------------------------------------------------------------------------------
    def prune(self, *stand_ins, arch=None, block=None, compile: bool = True, **kwargs) -> list[dict]:
        """Every config's verdict for these trace-time stand-ins (no GPU): a list of dicts with index,
        config, config_id, status (ok | pruned | compile_error), reason, and (compiled) registers, spills,
        shared_bytes. `compile=False` runs only the trace and the passes. `block` as at a launch."""
        from ..jit import compile_module, run_passes
        from .expand import TRACE_LOCK, error_reason, first_lines
        t = self.template
        out = []
        for i, config in enumerate(self.configs):
            constexprs, nw, b = self._merged(config, {}, {}, block)
            res = {"index": i, "config": dict(config), "config_id": _config_id(config), "status": "ok", "reason": None}
            try:
                with TRACE_LOCK:
                    module = t.trace(*stand_ins, arch=arch, num_warps=nw, block=b, **kwargs, **constexprs)
                    if compile:
                        ck = compile_module(module)
                        res.update(registers=_int(ck, "registers"), spills=_int(ck, "spills"),
                                   shared_bytes=_int(ck, "shared_bytes"), compile_s=ck.timings.get("compile_s"))
                    else:
                        run_passes(module)
            except ir.GluonError as e:
                res.update(status="pruned", reason=error_reason(e))
            except Exception as e:                      # noqa: BLE001
                res.update(status="compile_error", reason=first_lines(f"{type(e).__name__}: {e}"))
            out.append(res)
        return out

    autotune_prune = prune


class _AutotunedLaunch:
    """`kernel[grid]` of an autotuned kernel: call it with the kernel's arguments."""

    __slots__ = ("tuner", "grid", "block")

    def __init__(self, tuner: Autotuner, grid, block):
        self.tuner, self.grid, self.block = tuner, grid, block

    def __call__(self, *args, **kwargs):
        return self.tuner._call(self.grid, self.block, args, kwargs)

    def choose(self, *args, **kwargs) -> dict:
        """The config this launch would use (timing the configs first if its key is new), without launching."""
        return self.tuner.choose(self.grid, self.block, args, kwargs)


def _int(ck, name):
    try:
        return int(getattr(ck, name))
    except Exception:                                   # noqa: BLE001 - not every binary reports it
        return None


def _source_hash(fn) -> str:
    try:
        data = inspect.getsource(fn).encode()
    except (OSError, TypeError):
        data = repr(fn).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def _synchronize(runtime: dict) -> None:
    if any(_is_tensor(v) and getattr(getattr(v, "device", None), "type", "") == "cuda" for v in runtime.values()):
        import torch
        torch.cuda.synchronize()


def autotune(configs: Sequence[dict], key: Sequence[str], *, reference: Callable | None = None, rtol: float = 1e-2,
             atol: float = 0.0, restore_value: Sequence[str] = (), results_root: str | None = "results",
             repeats: int = 1, warmup_ms: int = 25, rep_ms: int = 100, verbose: bool = False,
             _timer: Callable | None = None):
    """`@gluon.autotune(configs=[...], key=[...])` above `@gluon.jit` / `@gluon.kernel`: see the module
    docstring of gluon.tuning.autotune."""
    def wrap(template):
        return Autotuner(template, configs, key, reference=reference, rtol=rtol, atol=atol,
                         restore_value=restore_value, results_root=results_root, repeats=repeats,
                         warmup_ms=warmup_ms, rep_ms=rep_ms, verbose=verbose, _timer=_timer)
    return wrap
