"""From a spec and a config to a verdict, without a GPU: legal (or pruned, with the reason) and compiled
(or compile_error / timeout).

* `Legality(spec, template, arch).verdict(config, config_id)`: the space's own constraints
  (`spec.space.check`), then `template.legality` (trace + gluon.jit.run_passes: shared memory,
  registers, warp roles, layouts) for every (shape, dtype) of the spec, cached by
  `template.legality_key`. A GluonError prunes the config with the diagnostic as the reason. Tracing
  is not thread-safe (the DSL keeps a trace stack), so legality checks of all threads share a lock.
  A legal config's lowered kernel (TTGIR + ABI, `template.lower`) is kept by `template.compile_key`
  (`Legality.lowered`): the tuner traces each (config, shape, dtype) once, and hands that to the pool.
* `compile_lowered(spec, lowered)`: a top-level function run in the compile pool (a
  `concurrent.futures.ProcessPoolExecutor` of "spawn" processes, which get the pickled spec and lowered
  kernel and call `template.build`: no trace): status ok with compile_s / registers / spills /
  shared_bytes and the binary's cache key (the GPU worker loads it from the cache), or compile_error
  with the first lines of the compiler's message. `CompilePool.compile` waits `compile_timeout_s`; past it
  the pool's processes (and the compiler processes they forked: each pool process leads its own
  process group) are killed, the pool is replaced and the config gets status timeout.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass

from .. import ir
from ..abi import LoweredKernel

TRACE_LOCK = threading.RLock()


def first_lines(text: str, n: int = 8, limit: int = 2000) -> str:
    lines = [ln for ln in str(text).strip().splitlines()]
    out = "\n".join(lines[:n])
    if len(lines) > n:
        out += f"\n... ({len(lines) - n} more lines)"
    return out[:limit]


def error_reason(e: BaseException) -> str:
    """A diagnostic for a row: a GluonError's message (with its location), else 'Type: message'."""
    if isinstance(e, ir.GluonError):
        loc = f" [{os.path.basename(e.loc.file)}:{e.loc.line}]" if getattr(e, "loc", None) else ""
        return first_lines(e.message, 16) + loc
    return first_lines(f"{type(e).__name__}: {e}")


@dataclass
class Verdict:
    status: str                 # ok | pruned | compile_error
    reason: str | None = None
    shape: tuple | None = None  # where it failed
    dtype: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Legality:
    """Cached legality verdicts of one spec's configs (thread-safe)."""

    def __init__(self, spec, template, arch: str):
        self.spec, self.template, self.arch = spec, template, arch
        self._cache: dict[tuple, Verdict] = {}
        self._lowered: dict[tuple, LoweredKernel] = {}

    def verdict(self, config: dict, config_id: str, shapes=None, dtypes=None, lower: bool = True) -> Verdict:
        """The config's verdict over the shapes and dtypes. `lower`: keep each legal job's lowered kernel for
        the compile (a study compiles every legal config it checks; a dry run compiles a sample and asks
        for the verdicts alone)."""
        try:
            why = self.spec.space.check(config)
        except Exception as e:                          # noqa: BLE001 - a verdict, not a crash
            why = f"space check failed: {type(e).__name__}: {e}"
        if why:
            return Verdict("pruned", f"space: {why}")
        for shape in (shapes if shapes is not None else self.spec.shapes):
            for dtype in (dtypes if dtypes is not None else self.spec.dtypes):
                v = self.one(config, config_id, tuple(shape), dtype, lower)
                if not v.ok:
                    return v
        return Verdict("ok")

    def one(self, config: dict, config_id: str, shape: tuple, dtype: str, lower: bool = True) -> Verdict:
        key = self.template.legality_key(config_id, shape, dtype, self.arch)
        with TRACE_LOCK:
            v = self._cache.get(key)
            if v is None:
                try:
                    if lower:
                        lowered = self.template.lower(config, shape, dtype, self.arch)
                        self._lowered[self.template.compile_key(config_id, shape, dtype, self.arch)] = lowered
                    else:
                        self.template.legality(config, shape, dtype, self.arch)
                    v = Verdict("ok")
                except (ir.GluonError, ValueError) as e:
                    v = Verdict("pruned", error_reason(e), shape, dtype)
                except Exception as e:                  # noqa: BLE001 - a template bug: say so, go on
                    v = Verdict("compile_error", "legality check crashed: " + error_reason(e), shape, dtype)
                self._cache[key] = v
        return v

    def lowered(self, config: dict, config_id: str, shape: tuple, dtype: str) -> LoweredKernel:
        """The legal config's lowered kernel for this job: the one its legality check traced, or (a job
        whose compile key its check did not cover) traced now. GluonError if the config is not legal."""
        ckey = self.template.compile_key(config_id, tuple(shape), dtype, self.arch)
        with TRACE_LOCK:
            lk = self._lowered.get(ckey)
            if lk is None:
                lk = self._lowered[ckey] = self.template.lower(config, tuple(shape), dtype, self.arch)
        return lk

# ------------------------------------------------------------------------------------- compiling


def compile_lowered(spec, lowered: LoweredKernel) -> dict:
    """Compile one lowered kernel (in a pool process) with the spec's template: a dict with status and, when
    ok, compile_s, registers, spills, shared_bytes and cache_key (where the binary is in the kernel cache)."""
    from .spec import template_of
    t0 = time.perf_counter()
    try:
        b = template_of(spec).build(lowered)
    except ir.GluonError as e:
        return {"status": "pruned", "reason": error_reason(e), "compile_s": time.perf_counter() - t0}
    except Exception as e:                              # noqa: BLE001 - CompileError and the like
        return {"status": "compile_error", "reason": first_lines(f"{type(e).__name__}: {e}"),
                "compile_s": time.perf_counter() - t0}
    return {"status": "ok", "compile_s": time.perf_counter() - t0, "registers": int(b.registers),
            "spills": int(b.spills), "shared_bytes": int(b.shared_bytes), "cache_key": getattr(b, "key", None)}


def child_process_setup(parent_pid: int) -> None:
    """For compile-pool and GPU-worker processes: own process group (so a kill takes the compiler's
    forked child too, and Ctrl-C in the terminal is the parent's to handle), and exit when the parent
    is gone."""
    try:
        os.setpgrp()
    except OSError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_parent(parent_pid)


def watch_parent(parent_pid: int, period_s: float = 1.0) -> None:
    """A daemon thread that ends this process when the tuner process `parent_pid` is gone (kill -9 of
    the tuner; a forkserver child's parent is the server, so this polls the tuner's pid)."""
    def gone() -> bool:
        try:
            os.kill(parent_pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        try:                                             # a zombie counts as gone
            with open(f"/proc/{parent_pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except (OSError, IndexError):
            return False

    def run():
        while True:
            time.sleep(period_s)
            if gone():
                os._exit(3)
    threading.Thread(target=run, daemon=True, name="watch-parent").start()


class _Done:
    """A finished 'future' (workers=0: compiled in the calling thread)."""

    def __init__(self, value):
        self.value = value

    def result(self, timeout=None):
        return self.value


class CompilePool:
    """A process pool for `compile_lowered` with a per-kernel timeout (thread-safe). workers=0 compiles
    in the calling process, without a timeout (for tests and debugging)."""

    def __init__(self, workers: int | None = None, timeout_s: float = 600.0, context: str = "spawn"):
        self.workers = max(1, min(8, (os.cpu_count() or 2) // 2)) if workers is None else int(workers)
        self.timeout_s = timeout_s
        self.context = context
        self._lock = threading.Lock()
        self._pool: cf.ProcessPoolExecutor | None = None
        self._closed = False

    def _get(self) -> cf.ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise cf.process.BrokenProcessPool("the compile pool was closed")
            if self._pool is None:
                self._pool = cf.ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context(self.context),
                                                    initializer=child_process_setup, initargs=(os.getpid(),))
            return self._pool

    def _kill(self, pool: cf.ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is not pool:
                return
            self._pool = None
        procs = list(getattr(pool, "_processes", {}).values())
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                try:
                    p.kill()
                except Exception:                       # noqa: BLE001
                    pass
        pool.shutdown(wait=False, cancel_futures=True)

    def submit(self, spec, lowered: LoweredKernel) -> tuple:
        if self.workers == 0:
            return None, _Done(compile_lowered(spec, lowered))
        try:
            pool = self._get()
            return pool, pool.submit(compile_lowered, spec, lowered)
        except (cf.process.BrokenProcessPool, RuntimeError) as e:      # closed, or shut down under us
            return None, _Done({"status": "compile_error", "reason": f"compile pool unavailable: {e}",
                                "_broken": True})

    def wait(self, handle, timeout_s: float | None = None) -> dict:
        pool, fut = handle
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            return fut.result(timeout=timeout_s)
        except cf.TimeoutError:
            if pool is not None:
                self._kill(pool)
            return {"status": "timeout", "reason": f"compile did not finish in {timeout_s:g} s "
                                                   "(compile_timeout_s); its processes were killed"}
        except cf.process.BrokenProcessPool as e:
            if pool is not None:
                self._kill(pool)
            return {"status": "compile_error", "reason": f"compile process died: {e}", "_broken": True}

    def compile(self, spec, lowered: LoweredKernel, timeout_s: float | None = None) -> dict:
        t0 = time.monotonic()
        r = self.wait(self.submit(spec, lowered), timeout_s)
        if r.get("_broken") and not self._closed:  # another config's timeout killed the pool: once more
            left = (self.timeout_s if timeout_s is None else timeout_s) - (time.monotonic() - t0)
            if left > 0:
                r = self.wait(self.submit(spec, lowered), left)
        r.pop("_broken", None)
        return r

    def close(self, kill: bool = False) -> None:
        """Shut the pool down (kill=True: kill its processes and their compilers at once)."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._closed = True
        if pool is None:
            return
        if not kill:
            pool.shutdown(wait=True, cancel_futures=True)
            return
        for p in list(getattr(pool, "_processes", {}).values()):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
        pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.close(kill=exc_type is not None)
