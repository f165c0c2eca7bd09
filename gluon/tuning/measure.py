"""GPU worker processes: verify a config on fresh data, then time it against the baseline.

One `GpuWorker` per GPU: a process started with the multiprocessing "spawn" context, pinned to its GPU
(CUDA_VISIBLE_DEVICES = that one device), fed jobs over a pipe, one at a time. A job is a dict
(config, shape, dtype, spec, seed, rtol, atol, repeats, ...); the worker calls the measurement function
named by a "module:function" path (default `gluon.tuning.measure:measure_on_gpu`; tests inject fakes
that crash, hang, return wrong results or fake timings) and sends back a result dict:

    status: ok | wrong_result | runtime_error | compile_error | timeout, reason, median_ms, p10_ms,
    p90_ms, baseline_ms, ratio (baseline_ms / median_ms), max_err, tflops, gbps, roofline_fraction

`measure_on_gpu`: make inputs from a seeded generator (fresh random data, never zeros), poison the
output with NaN, run once, compare with the template's fp64/fp32 reference (`template.check`: no NaN,
so every element was written; max |out - ref| <= atol + rtol * max |ref|) -> wrong_result if not.
Then `repeats` interleaved rounds of candidate and baseline (the order swapped every round), each
`triton.testing.do_bench` (CUDA events, L2 flushed before every run, the inputs rotated: successive runs
cycle through `rotation()` input sets, two unless one set is over 2 GiB) with quantiles 0.5/0.1/0.9:
median_ms, p10_ms, p90_ms and baseline_ms are medians over rounds, ratio the median of per-round
baseline/candidate ratios.

Faults: a Python exception in the measurement is reported as runtime_error (compile_error for a
GluonError/CompileError) and the worker process exits after replying, so the next job gets a fresh
CUDA context. A worker that dies (illegal address, segfault, os._exit) -> runtime_error with its exit
code or signal; one that does not answer within the timeout -> killed (with its process group) and the
job is a timeout. Either way the next `run` starts a new process: the study goes on.
Workers lead their own process group (Ctrl-C in the terminal is the tuner's to handle; it kills them)
and exit by themselves when the tuner process disappears (kill -9).
"""
from __future__ import annotations

import functools
import inspect
import importlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import statistics
import subprocess
import time
import traceback
from collections.abc import Callable

from ..version import __version__

DEFAULT_MEASURE = "gluon.tuning.measure:measure_on_gpu"


class WorkerStartError(RuntimeError):
    """A GPU worker could not start (no GPU, an import error in the measurement module, ...)."""


def resolve_function(path: str) -> Callable:
    mod, _, name = path.rpartition(":")
    if not mod or not name:
        raise ValueError(f"measurement function {path!r}: write 'module:function'")
    return getattr(importlib.import_module(mod), name)


# ---------------------------------------------------------------------------------- environment


def _driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import ctypes
        v = ctypes.c_int()
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v))
        return f"cuda-driver-api {v.value // 1000}.{v.value % 1000 // 10}"
    except Exception:                                   # noqa: BLE001
        return None


def versions() -> dict:
    out = {}
    out["gluon"] = __version__
    try:
        import triton
        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    try:
        import torch
        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda
    except ImportError:
        out["torch"] = out["cuda"] = None
    return out


def gpu_environment(device_index: int = 0) -> dict:
    """What the rows record about the device (inside a worker, the pinned GPU is cuda:0)."""
    import torch
    props = torch.cuda.get_device_properties(0)
    env = {"device": props.name, "sm_count": int(props.multi_processor_count), "driver": _driver_version()}
    env.update(versions())
    return env


def default_environment(device_index: int = 0) -> dict:
    env = {"device": "unknown-device", "sm_count": None, "driver": None}
    env.update(versions())
    return env


# ---------------------------------------------------------------------------------- the real measurement

_TEMPLATES: dict = {}


def alternate_rounds(candidate, baseline, repeats: int, bench) -> tuple[list, list]:
    """`repeats` rounds of bench(candidate) and bench(baseline) (no baseline: candidate only), the order
    swapped every round (ABBA...): the large GEMMs run at the board's power cap, where the kernel that
    runs first after a pause gets a higher clock for a while, so a fixed order favours one side."""
    c_rounds, b_rounds = [], []
    for i in range(repeats):
        if baseline is not None and i % 2:
            b_rounds.append(bench(baseline))
            c_rounds.append(bench(candidate))
        else:
            c_rounds.append(bench(candidate))
            if baseline is not None:
                b_rounds.append(bench(baseline))
    return c_rounds, b_rounds


ROTATE_MAX_BYTES = 2 << 30     # one input set this large already streams through L2 many times over


def rotation(nbytes: float | None, asked: int | None = None) -> int:
    """How many input sets the timed runs cycle through: `asked` (the job's "rotate") if given, else 2,
    or 1 where a set holds more than ROTATE_MAX_BYTES (rotating it would only cost memory)."""
    if asked is not None:
        return max(1, int(asked))
    return 1 if nbytes and nbytes > ROTATE_MAX_BYTES else 2


def rotating(fns: list[Callable[[], None]]) -> Callable[[], None]:
    """One callable that runs fns[0], fns[1], ... in turn, call after call: each timed run reads other
    buffers than the one before (besides do_bench's L2 flush)."""
    if len(fns) == 1:
        return fns[0]
    turn = [0]

    def run():
        fn = fns[turn[0] % len(fns)]
        turn[0] += 1
        return fn()
    run.is_baseline = getattr(fns[0], "is_baseline", False)
    return run


def _runner(template, kernel: dict | None) -> Callable:
    """`template.run`, launching the kernel the compile pool built (`kernel`: its cache key and ABI,
    `template.load`) when the template takes one, so this process traces nothing; a template whose `run`
    has no `kernel` parameter runs as it always did."""
    if not kernel or not kernel.get("cache_key") or "kernel" not in inspect.signature(template.run).parameters:
        return template.run
    return functools.partial(template.run, kernel=template.load(kernel))


def measure_job(job: dict, device, bench: Callable, synchronize: Callable[[], None]) -> dict:
    """Verify, then time one (config, shape, dtype) on `device`. bench(fn) -> [median, p10, p90] ms.
    The device-independent part of `measure_on_gpu` (the tests run it on the CPU with a fake bench)."""
    from .spec import template_of
    template = template_of(job["spec"])
    shape, dtype, config = tuple(job["shape"]), job["dtype"], job["config"]
    run = _runner(template, job.get("kernel"))
    inputs = template.make_inputs(shape, dtype, device, job.get("seed", 0))
    template.poison(inputs)
    run(inputs, config)
    synchronize()
    ok, max_err, why = template.check(template.output(inputs), template.reference(inputs),
                                      float(job.get("rtol", 1e-2)), float(job.get("atol", 0.0)))
    if not ok:
        return {"status": "wrong_result", "reason": why, "max_err": max_err}
    sets = [inputs] + [template.make_inputs(shape, dtype, device, job.get("seed", 0) + 1 + i)
                       for i in range(rotation(template.bytes(shape, dtype), job.get("rotate")) - 1)]
    cand = rotating([functools.partial(run, x, config) for x in sets])
    base = rotating([template.baseline(x) for x in sets]) if job.get("baseline", True) else None
    c_rounds, b_rounds = alternate_rounds(cand, base, max(1, int(job.get("repeats", 3))), bench)
    ratios = [b[0] / c[0] for c, b in zip(c_rounds, b_rounds)]
    med = statistics.median(c[0] for c in c_rounds)
    res = {"status": "ok", "max_err": max_err, "median_ms": med,
           "p10_ms": statistics.median(c[1] for c in c_rounds),
           "p90_ms": statistics.median(c[2] for c in c_rounds)}
    if b_rounds:
        res["baseline_ms"] = statistics.median(b[0] for b in b_rounds)
        res["ratio"] = statistics.median(ratios)
    s = med / 1e3
    flops, nbytes = template.flops(shape), template.bytes(shape, dtype)
    res["tflops"] = flops / s / 1e12 if flops and s > 0 else None
    res["gbps"] = nbytes / s / 1e9 if nbytes and s > 0 else None
    roof = template.roofline_s(shape, dtype)
    res["roofline_fraction"] = roof / s if roof and s > 0 else None
    return res


def cuda_times(fn, warmup_ms: int = 25, rep_ms: int = 100) -> list[float]:
    """[median, p10, p90] ms of `fn` by triton.testing.do_bench: CUDA events, L2 flushed before every
    run. The one timing the tuner's workers and gluon.autotune use."""
    from triton.testing import do_bench
    return [float(x) for x in do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.1, 0.9])]


def measure_on_gpu(job: dict) -> dict:
    """`measure_job` on this worker's GPU (cuda:0 after pinning), timed with `cuda_times`."""
    import torch
    rep_ms, warmup_ms = job.get("rep_ms", 100), job.get("warmup_ms", 25)

    def bench(fn):
        return cuda_times(fn, warmup_ms, rep_ms)

    try:
        return measure_job(job, torch.device("cuda", 0), bench, torch.cuda.synchronize)
    finally:
        torch.cuda.empty_cache()


measure_on_gpu.environment = gpu_environment


# ---------------------------------------------------------------------------------- the worker process


def _classify(e: BaseException) -> str:
    from ..ir import GluonError
    if isinstance(e, GluonError) or type(e).__name__ == "CompileError":
        return "compile_error"
    return "runtime_error"


def _worker_main(conn, device_index: int, fn_path: str, parent_pid: int, visible: str | None,
                 environ: dict | None = None) -> None:
    if environ is not None:              # a forkserver child has the server's environment: take the tuner's
        os.environ.clear()
        os.environ.update(environ)
    if visible is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    from .expand import child_process_setup
    child_process_setup(parent_pid)
    try:
        fn = resolve_function(fn_path)
        env = getattr(fn, "environment", default_environment)(device_index)
    except BaseException:                                   # noqa: BLE001
        conn.send(("error", traceback.format_exc(limit=8)))
        return
    conn.send(("ready", env))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            result = fn(job)
        except BaseException as e:                          # noqa: BLE001 - report, then start afresh
            tb = traceback.format_exc(limit=6)
            result = {"status": _classify(e), "reason": f"{type(e).__name__}: {e}"[:1500],
                      "traceback": tb[-3000:], "worker_exits": True}
        try:
            conn.send(("result", result))
        except (BrokenPipeError, OSError):                  # the tuner is gone
            return
        if result.get("worker_exits"):
            return                                          # a CUDA error poisons the context


def _describe_exit(code) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _visible_for(index: int) -> str:
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis:
        parts = [p.strip() for p in vis.split(",") if p.strip()]
        if 0 <= index < len(parts):
            return parts[index]
    return str(index)


class GpuWorker:
    """The tuner's handle on one GPU's worker process (used by one thread at a time).

    context: "spawn" (default: a fresh interpreter per worker) or "forkserver" (workers fork from a
    server that imported the measurement module once, so a restart after a crash takes milliseconds
    instead of an interpreter start and a torch import; the server never touches CUDA). Either way the
    worker gets the tuner's environment at the time it starts."""

    def __init__(self, device_index: int, measure_fn: str = DEFAULT_MEASURE, startup_timeout_s: float = 300.0,
                 context: str = "spawn"):
        self.device_index = device_index
        self.measure_fn = measure_fn
        self.startup_timeout_s = startup_timeout_s
        self.ctx = multiprocessing.get_context(context)
        if context == "forkserver":
            # (a module the server cannot import is skipped: Python 3.11's server ignores the caller's sys.path)
            self.ctx.set_forkserver_preload(["torch", "gluon.tuning.measure", "gluon.tuning.spec",
                                             measure_fn.rpartition(":")[0]])
        self.proc = None
        self.conn = None
        self.env: dict | None = None
        self.starts = 0
        self.jobs = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def start(self) -> dict:
        self.kill()
        parent, child = self.ctx.Pipe(duplex=True)
        p = self.ctx.Process(target=_worker_main, daemon=True, name=f"gluon-tune-gpu{self.device_index}",
                             args=(child, self.device_index, self.measure_fn, os.getpid(),
                                   _visible_for(self.device_index), dict(os.environ)))
        p.start()
        child.close()
        self.proc, self.conn = p, parent
        self.starts += 1
        ready = multiprocessing.connection.wait([parent, p.sentinel], self.startup_timeout_s)
        msg = None
        if parent in ready:
            try:
                msg = parent.recv()
            except (EOFError, OSError):
                msg = None
        if not msg or msg[0] != "ready":
            why = msg[1] if msg else (f"no answer in {self.startup_timeout_s:g} s" if not ready
                                      else f"the process ended ({_describe_exit(p.exitcode)})")
            self.kill()
            raise WorkerStartError(f"the worker for GPU {self.device_index} ({self.measure_fn}) did not start: {why}")
        self.env = msg[1]
        return self.env

    def run(self, job: dict, timeout_s: float) -> dict:
        """Send one job; the result dict, or runtime_error / timeout when the process dies or hangs."""
        if not self.alive:
            self.start()
        self.jobs += 1
        try:
            self.conn.send(job)
        except (BrokenPipeError, OSError):
            self.start()
            self.conn.send(job)
        t0 = time.monotonic()
        ready = multiprocessing.connection.wait([self.conn, self.proc.sentinel], timeout_s)
        if not ready:
            self.kill()
            return {"status": "timeout",
                    "reason": f"no result after {timeout_s:g} s (trial_timeout_s): the worker was killed and is "
                              "restarted for the next job"}
        if self.conn in ready:
            try:
                kind, payload = self.conn.recv()
                if kind == "result":
                    payload = dict(payload)
                    payload.setdefault("wall_s", time.monotonic() - t0)
                    if payload.pop("worker_exits", False):      # it is on its way out: start afresh next time
                        self.proc.join(10)
                        self.kill()
                    return payload
            except (EOFError, OSError):
                pass
        self.proc.join(5)
        code = self.proc.exitcode
        self.kill()
        return {"status": "runtime_error",
                "reason": f"the worker process died ({_describe_exit(code)}) during the job (an illegal memory "
                          "access, a segfault, ...): restarted for the next job"}

    def kill(self) -> None:
        p, self.proc = self.proc, None
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None
        if p is None:
            return
        if p.is_alive():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                p.kill()
        p.join(10)

    def close(self) -> None:
        """Ask the worker to exit; kill it if it does not within a few seconds."""
        if self.proc is not None and self.proc.is_alive() and self.conn is not None:
            try:
                self.conn.send(None)
                self.proc.join(5)
            except (OSError, BrokenPipeError):
                pass
        self.kill()
