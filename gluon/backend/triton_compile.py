"""TTGIR text -> GPU binary, through Triton 3.6.0, cached on disk.

This is the last step of the pipeline (``IR -> TTGIR text -> binary``): it hands
TTGIR to ``triton.compile`` (which runs ``llir -> ptx -> cubin`` for CUDA or
``llir -> amdgcn -> hsaco`` for HIP, with the ptxas/ld.lld the wheel bundles, so
no GPU is needed) and stores everything a later user of the kernel needs in a
:class:`~gluon.cache.KernelCache` entry, so that a cache hit costs no compiler,
no disassembler and no GPU:

* the IR levels and the binary (``asm``),
* Triton's metadata json, completed with what a ``.ttgir`` compile leaves out:

  - ``tensordesc_meta``: Triton 3.6 fills it only in its ``make_ttgir`` stage,
    which is skipped for TTGIR input; without it the stock launcher can not
    build TMA descriptors.  We read it from the parsed module
    (``parse_mlir_module(...).get_tensordesc_metadata()``, the call Triton's own
    stage makes).
  - ``gluon_signature``: the kernel's arguments in order, ``{"name", "type",
    "attrs"}`` -- names from the TTGIR text, types as Triton's ``IRSource`` sees
    them (``*f16`` for pointers, raw MLIR for ``!tt.tensordesc<...>``), attrs such
    as ``tt.divisibility`` -- so a runtime can map Python arguments onto them.
  - ``gluon_resources``: registers, spills, stack, static shared memory, read from
    the binary without a GPU (cuobjdump/ptxas log for CUDA, the amdgcn text for
    HIP).

Compilation runs, by default, in a forked child process.  Why: (1) a C++ abort
or segfault inside MLIR/LLVM on bad IR would otherwise kill the caller (a tuner
with hours of state); in a child it becomes a :class:`CompileError`;
(2) MLIR prints its diagnostics straight to file descriptor 2, and Triton's
knobs (cache dir, ptxas log) are process-global -- a child can redirect and set
them without disturbing the caller's other threads, so compiles from several
threads run truly in parallel.  ``fork`` costs about a millisecond.  Set
``GLUON_COMPILE_ISOLATION=inprocess`` (or ``isolate=False``) to compile in the
calling process instead (serialised by a lock; needed where ``fork`` is
unavailable, and handy for debuggers and monkeypatching).

Triton's own cache (``~/.triton/cache``) is not used: each compile points Triton
at a scratch directory inside our cache root, so the user's Triton cache is never
written and a stale Triton entry can never be served.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import threading
import traceback
import warnings
from typing import Any, Mapping

from . import ptx_cluster, ptx_prefetch, ptx_prologue, ptx_release
from ..cache import KernelCache, default_cache

# the PTX passes a kernel opts into with a header line in its TTGIR (ptx_cue), in the order they run
# after the cluster pass, each with the cache-key part and the metadata key of what it did
_OPT_IN_PASSES = ((ptx_prefetch, "ptx_prefetch", "gluon_prefetch"), (ptx_prologue, "ptx_prologue", "gluon_prologue"),
                  (ptx_release, "ptx_release", "gluon_release"))

__all__ = [
    "Binary",
    "CompileError",
    "available_targets",
    "cache_key_parts",
    "compile_ttgir",
    "sass_instructions",
]

Target = tuple  # ("cuda", 90, 32) | ("hip", "gfx942", 64)

_TARGETS: tuple[Target, ...] = (
    ("cuda", 80, 32),
    ("cuda", 90, 32),
    ("cuda", 100, 32),
    ("hip", "gfx942", 64),
)

#: Files Triton produces, by backend; the binary one is read as bytes.
_BINARY_EXTS = ("cubin", "hsaco")
_METADATA_FILE = "metadata.json"
_FALLBACK_GLUON_VERSION = "0.1.0"

_inprocess_lock = threading.Lock()


def available_targets() -> list[Target]:
    """The targets this backend compiles for (and the test suite checks)."""
    return list(_TARGETS)


# ---------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------
class CompileError(Exception):
    """TTGIR that Triton/MLIR/ptxas rejected (or that crashed the compiler).

    The message names the target, the first error lines of the compiler, and the
    path of the kept TTGIR file (under ``<cache root>/failed/``), so the user can
    open the failing input at the reported line.  Attributes: ``target``,
    ``ttgir_path``, ``log_path``, ``stage`` (``"target"``, ``"parse"``,
    ``"compile"`` or ``"crash"``) and ``diagnostics`` (the extracted error lines).
    """

    def __init__(self, message: str, *, target=None, ttgir_path=None, log_path=None, stage=None,
                 diagnostics: str = ""):
        super().__init__(message)
        self.target = target
        self.ttgir_path = ttgir_path
        self.log_path = log_path
        self.stage = stage
        self.diagnostics = diagnostics


class _StageError(Exception):
    """Inside the compile job: which stage failed and why (crosses the fork as json)."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


class _CorruptEntry(Exception):
    pass


# ---------------------------------------------------------------------------------------
# targets, keys
# ---------------------------------------------------------------------------------------
def _normalize_target(target) -> tuple[str, int | str, int]:
    """``(backend, arch, warp_size)`` from a tuple or a ``triton...GPUTarget``."""
    if hasattr(target, "backend") and hasattr(target, "arch"):
        target = (target.backend, target.arch, target.warp_size)
    if not isinstance(target, (tuple, list)) or len(target) != 3:
        raise ValueError(f"target must be (backend, arch, warp_size), e.g. ('cuda', 90, 32); got {target!r}")
    backend, arch, warp = target
    if backend == "cuda":
        if isinstance(arch, str) and arch.isdigit():
            arch = int(arch)
        if not isinstance(arch, int):
            raise ValueError(f"cuda arch must be an int compute capability like 90, got {arch!r}")
    elif backend == "hip":
        if not isinstance(arch, str):
            raise ValueError(f"hip arch must be a string like 'gfx942', got {arch!r}")
    else:
        raise ValueError(f"unknown backend {backend!r} (expected 'cuda' or 'hip')")
    return (backend, arch, int(warp))


def _target_str(t) -> str:
    """Spelled as TTGIR's ``ttg.target`` attribute: ``cuda:90``, ``hip:gfx942``."""
    return f"{t[0]}:{t[1]}"


def _gluon_version() -> str:
    # Imported lazily: gluon/__init__ may import this module.
    try:
        import gluon  # noqa: PLC0415

        v = getattr(gluon, "__version__", None)
    except ImportError:
        v = None
    return v if isinstance(v, str) and v else _FALLBACK_GLUON_VERSION


def cache_key_parts(ttgir: str, target, options: Mapping | None = None) -> tuple:
    """What a compiled kernel depends on, as hashed by :meth:`KernelCache.key`.

    TTGIR text (by sha256), target, triton and gluon versions, sorted options,
    and Triton's cache-invalidating environment variables (the ones Triton itself
    hashes: they change the generated code); for a cluster kernel also the PTX
    cluster pass's source, so a change to it recompiles.
    """
    import triton
    from triton._C.libtriton import get_cache_invalidating_env_vars

    t = _normalize_target(target)
    opts = sorted((str(k), v) for k, v in dict(options or {}).items())
    parts = (
        ("kind", "triton-ttgir"),
        ("ttgir_sha256", hashlib.sha256(ttgir.encode("utf-8")).hexdigest()),
        ("target", list(t)),
        ("triton", triton.__version__),
        ("gluon", _gluon_version()),
        ("options", opts),
        ("env", sorted(get_cache_invalidating_env_vars().items())),
    )
    if ptx_cluster.parse_header(ttgir) is not None:     # the PTX passes are part of this kernel's compiler
        parts += (("ptx_cluster", ptx_cluster.source_hash()),)
    parts += tuple((key, mod.source_hash()) for mod, key, _ in _OPT_IN_PASSES if mod.wanted(ttgir))
    return parts


# ---------------------------------------------------------------------------------------
# public entry point
# ---------------------------------------------------------------------------------------
def compile_ttgir(ttgir: str, target, *, options: dict | None = None, cache: KernelCache | None = None,
                  isolate: bool | None = None) -> "Binary":
    """Compile TTGIR text for ``target``, or load it from ``cache`` (default: :func:`default_cache`).

    ``options`` are extra ``triton.compile`` options (``{"num_stages": 1}``, ...)
    and part of the key.  On a hit nothing of Triton's compiler is called.
    ``isolate``: compile in a forked child (default, see the module docstring);
    ``None`` reads ``GLUON_COMPILE_ISOLATION`` (``fork`` | ``inprocess``).
    Raises :class:`CompileError` when the TTGIR does not compile.
    """
    if not isinstance(ttgir, str):
        raise TypeError(f"ttgir must be str, got {type(ttgir).__name__}")
    tgt = _normalize_target(target)
    options = dict(options or {})
    if cache is None:
        cache = default_cache()
    key = cache.key(*cache_key_parts(ttgir, tgt, options))

    entry = cache.get(key)
    if entry is not None:
        try:
            return Binary.load(entry, target=target, key=key)
        except _CorruptEntry:
            cache.evict(key)  # e.g. files deleted by hand; rebuild it

    _check_module_target(ttgir, tgt, cache, key)
    if isolate is None:
        mode = os.environ.get("GLUON_COMPILE_ISOLATION", "fork").strip().lower()
        isolate = mode != "inprocess"
    if isolate and not hasattr(os, "fork"):
        isolate = False
    (_compile_forked if isolate else _compile_inprocess)(ttgir, tgt, options, cache, key)

    entry = cache.get(key)
    if entry is None:  # pragma: no cover - the job returned success but published nothing
        raise CompileError(f"compile for {_target_str(tgt)} reported success but left no cache entry {key}",
                           target=tgt, stage="crash")
    return Binary.load(entry, target=target, key=key)


def _check_module_target(ttgir: str, tgt, cache: KernelCache, key: str) -> None:
    """TTGIR carries its target (``ttg.target = "cuda:90"``); refuse a mismatch early.

    Triton does not: cuda:80 TTGIR compiles for sm_90 without a word (with the
    wrong layouts), and HIP TTGIR fails for CUDA with only "Parse MLIR file failed".
    """
    m = re.search(r'ttg\.target\s*=\s*"([^"]+)"', ttgir)
    if m and m.group(1) != _target_str(tgt):
        kept, logp = _keep_failed(cache, key, ttgir, f"module target {m.group(1)} != requested {_target_str(tgt)}\n")
        msg = (f"TTGIR for target {m.group(1)} (its ttg.target attribute) can not be compiled for "
               f"{_target_str(tgt)} (warp size {tgt[2]}): lower it for {_target_str(tgt)} or pass the "
               f"matching target\n  TTGIR kept at: {kept}")
        raise CompileError(msg, target=tgt, ttgir_path=kept, log_path=logp, stage="target",
                           diagnostics=f'ttg.target = "{m.group(1)}"')


# ---------------------------------------------------------------------------------------
# running the job: forked child or in-process
# ---------------------------------------------------------------------------------------
def _compile_forked(ttgir: str, tgt, options: dict, cache: KernelCache, key: str) -> None:
    scratch = cache._tmpdir("compile-" + key[:12])
    src_path = scratch / "kernel.ttgir"
    log_path = scratch / "compile.log"
    err_path = scratch / "error.json"
    try:
        src_path.write_text(ttgir, encoding="utf-8")
        # Import Triton's compiler modules here, not in the child: nothing to import after fork.
        _preload_triton(tgt)
        for stream in (sys.stdout, sys.stderr):  # don't let the child inherit unflushed text
            with contextlib.suppress(Exception):
                stream.flush()
        with warnings.catch_warnings():
            # Python >= 3.12 warns about fork() in a multi-threaded process: the
            # child runs only our compile (no locks of other threads needed).
            warnings.filterwarnings("ignore", message=r".*fork\(\)", category=DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # ---- child: never returns ----
            code = 70
            try:
                fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
                sys.stdout = sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(2), "wb", buffering=0),
                                                           write_through=True)
                # pytest & co. point faulthandler at a dup of the *old* stderr: a
                # crash's Python stack would leak to the caller's terminal.  Send
                # it to the log (where _extract_diagnostics ignores it).
                import faulthandler

                if faulthandler.is_enabled():
                    faulthandler.enable(file=sys.stderr)
                try:
                    files = _compile_job(src_path, tgt, options)
                    cache.put(key, files)
                    code = 0
                except BaseException as e:  # noqa: BLE001 - report everything to the parent
                    err_path.write_text(json.dumps(_error_info(e)), encoding="utf-8")
                    code = 1
            finally:
                os._exit(code)
        # ---- parent ----
        try:
            _, status = os.waitpid(pid, 0)
        except BaseException:  # e.g. KeyboardInterrupt: don't leave the child compiling
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            raise
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            return
        log = _read_text(log_path)
        if err_path.exists():
            info = json.loads(err_path.read_text(encoding="utf-8"))
        elif os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            try:
                signame = signal.Signals(sig).name
            except ValueError:
                signame = str(sig)
            info = {"stage": "crash", "exc_type": "CompilerCrash",
                    "message": f"the compiler process died with signal {signame}"}
        else:
            info = {"stage": "crash", "exc_type": "CompilerCrash",
                    "message": f"the compiler process exited with status {os.WEXITSTATUS(status)}"}
        raise _make_compile_error(info, log, tgt, cache, key, ttgir, src_path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _compile_inprocess(ttgir: str, tgt, options: dict, cache: KernelCache, key: str) -> None:
    # Knobs and fd 1/2 are process-global: one in-process compile at a time.
    with _inprocess_lock:
        scratch = cache._tmpdir("compile-" + key[:12])
        src_path = scratch / "kernel.ttgir"
        log_path = scratch / "compile.log"
        try:
            src_path.write_text(ttgir, encoding="utf-8")
            info = None
            with _capture_fds(log_path):
                try:
                    files = _compile_job(src_path, tgt, options)
                except Exception as e:  # noqa: BLE001
                    info = _error_info(e)
            if info is not None:
                raise _make_compile_error(info, _read_text(log_path), tgt, cache, key, ttgir, src_path)
            cache.put(key, files)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _capture_fds(path: pathlib.Path):
    """Send fd 1 and 2 (where MLIR/LLVM print) to ``path`` for the duration."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = (os.dup(1), os.dup(2))
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (*saved, fd):
            os.close(f)


_warmed: set = set()


def _preload_triton(tgt) -> None:
    """Import Triton's compiler and fill its per-process caches in the parent, once.

    A forked child inherits them; without this every child would pay ~0.3 s:
    ``triton_key()`` hashes the whole Triton installation (lru-cached), and the
    backend hash runs ``ptxas --version``.  None of this runs MLIR.
    """
    if tgt in _warmed:
        return
    import triton  # noqa: F401
    import triton.compiler.compiler  # noqa: F401
    from triton.backends import backends  # noqa: F401  (discovers and imports the backends)
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.cache import triton_key

    triton_key()
    with contextlib.suppress(Exception):
        make_backend(GPUTarget(*tgt)).hash()
    if tgt[0] == "cuda":
        with contextlib.suppress(Exception):
            _cuobjdump_path()
    _warmed.add(tgt)


def _error_info(e: BaseException) -> dict:
    stage = e.stage if isinstance(e, _StageError) else "compile"
    cause = e.__cause__ if isinstance(e, _StageError) and e.__cause__ is not None else e
    return {
        "stage": stage,
        "exc_type": type(cause).__name__,
        "message": str(cause),
        "traceback": "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))[-8000:],
    }


def _read_text(path: pathlib.Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _keep_failed(cache: KernelCache, key: str, ttgir: str, log: str) -> tuple[pathlib.Path, pathlib.Path]:
    """Keep the failing TTGIR (and the full compiler output) under ``<root>/failed/``."""
    d = cache.failed_dir
    d.mkdir(parents=True, exist_ok=True)
    kept, logp = d / f"{key}.ttgir", d / f"{key}.log"
    for p, text in ((kept, ttgir), (logp, log)):
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)
    return kept, logp


_MAX_DIAG_LINES = 24


def _extract_diagnostics(text: str) -> list[str]:
    """The first error lines (with the note lines MLIR prints after them)."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    picked: list[str] = []
    for i, ln in enumerate(lines):
        if re.search(r"\berror\b|Assertion|LLVM ERROR|Aborted|Segmentation", ln, re.IGNORECASE):
            for extra in lines[i:i + 3]:
                if extra not in picked:
                    picked.append(extra)
        if len(picked) >= _MAX_DIAG_LINES:
            break
    if not picked:
        picked = lines[-_MAX_DIAG_LINES:]
    return picked[:_MAX_DIAG_LINES]


def _make_compile_error(info: dict, log: str, tgt, cache: KernelCache, key: str, ttgir: str,
                        src_path: pathlib.Path) -> CompileError:
    import triton

    full = f"{log}\n--- {info.get('exc_type')}: {info.get('message')}\n{info.get('traceback', '')}"
    kept, logp = _keep_failed(cache, key, ttgir, full)
    src = str(src_path)
    # MLIR writes loc("<scratch path>":L:C): point the user at the kept file instead.
    text = re.sub(r'loc\("' + re.escape(src) + r'":(\d+):(\d+)\)', lambda m: f"{kept}:{m.group(1)}:{m.group(2)}", log)
    text = text.replace(src, str(kept))
    message_text = str(info.get("message", "")).replace(src, str(kept))
    # MLIR's diagnostics are in the log (fd 2); ptxas' are in the exception message.
    text = text.split("Fatal Python error:")[0]  # faulthandler's stack dump after a crash: log only
    diags = _extract_diagnostics(text + "\n" + message_text)
    stage = info.get("stage", "compile")
    head = {
        "parse": "TTGIR does not parse/verify",
        "compile": "Triton failed to compile TTGIR",
        "crash": "the compiler crashed on TTGIR",
    }.get(stage, "Triton failed to compile TTGIR")
    body = "\n".join("    " + d for d in diags)
    msg = (f"{head} for target {_target_str(tgt)} (warp size {tgt[2]}, triton {triton.__version__})\n"
           f"  TTGIR kept at: {kept}\n"
           f"  full log:      {logp}\n"
           f"  first errors:\n{body}\n"
           f"  raised: {info.get('exc_type')}: {message_text.strip().splitlines()[0] if message_text.strip() else ''}")
    return CompileError(msg, target=tgt, ttgir_path=kept, log_path=logp, stage=stage, diagnostics="\n".join(diags))


# ---------------------------------------------------------------------------------------
# the job itself (runs in the child, or in-process under the lock)
# ---------------------------------------------------------------------------------------
def _compile_job(src_path: pathlib.Path, tgt, options: dict) -> dict[str, bytes | str]:
    """Compile ``src_path`` and return the files of the cache entry (name -> content)."""
    import triton
    from triton import knobs
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import IRSource, make_backend

    gpu_target = GPUTarget(*tgt)
    ttgir = src_path.read_text(encoding="utf-8")

    # 1. Parse once ourselves, as triton.compile does for IR input (IRSource loads
    #    the common and backend dialects into the context), to get the data the
    #    .ttgir path never records: the TMA descriptor metadata and the signature.
    #    A parse/verify error surfaces here, with MLIR's diagnostics on fd 2.
    try:
        backend = make_backend(gpu_target)
        ctx = ir.context()
        irsrc = IRSource(str(src_path), ctx, backend)
        tensordesc_meta = irsrc.module.get_tensordesc_metadata()
        signature = [irsrc.signature[i] for i in sorted(irsrc.signature)]
        entry_name = irsrc.name.lstrip("@")
    except Exception as e:
        raise _StageError("parse", str(e)) from e
    del irsrc, ctx

    # 2. Compile with Triton's cache redirected to our scratch dir and ptxas' -v
    #    log (Triton prints it with print() when dump_ptxas_log is set) captured;
    #    a cluster kernel's PTX goes through the cluster pass (ptx_cluster) first, and one that asks
    #    for them through the descriptor prefetch pass (ptx_prefetch), the prologue barrier pass
    #    (ptx_prologue) and the stage release pass (ptx_release).
    ptxas_log = io.StringIO()
    cluster = ptx_cluster.parse_header(ttgir)
    cluster_stats: dict = {}
    opted = [(mod, md_key, {}) for mod, _, md_key in _OPT_IN_PASSES if mod.wanted(ttgir)]   # + what each did
    try:
        with knobs.cache.scope(), knobs.nvidia.scope(), knobs.runtime.scope(), \
                contextlib.redirect_stdout(ptxas_log):
            knobs.cache.dir = str(src_path.parent / "triton-cache")
            knobs.nvidia.dump_ptxas_log = True
            rewrites = []
            if cluster is not None:
                rewrites.append(_cluster_rewrite(cluster, ttgir, entry_name, cluster_stats))
            rewrites += [_recorded(mod.rewrite, stats) for mod, _, stats in opted]
            if rewrites:
                knobs.runtime.add_stages_inspection_hook = _ptx_hook(rewrites)
            kernel = triton.compile(str(src_path), target=gpu_target, options=dict(options) or None)
    except Exception as e:
        log = ptxas_log.getvalue()
        raise _StageError("compile", f"{type(e).__name__}: {e}" + (f"\n{log}" if log.strip() else "")) from e

    # 3. Collect Triton's files and metadata.
    group = dict(kernel.metadata_group)
    md_path = next(p for n, p in group.items() if n.endswith(".json"))
    metadata = json.loads(pathlib.Path(md_path).read_text(encoding="utf-8"))
    name = metadata.get("name") or entry_name
    asm: dict[str, bytes | str] = {}
    for fname, p in group.items():
        ext = fname.rsplit(".", 1)[-1]
        if fname.endswith(".json") or fname.startswith("__grp__"):
            continue
        pth = pathlib.Path(p)
        asm[ext] = pth.read_bytes() if ext in _BINARY_EXTS else pth.read_text(encoding="utf-8")

    # 4. Complete the metadata.
    if not metadata.get("tensordesc_meta"):
        metadata["tensordesc_meta"] = tensordesc_meta
    metadata["gluon_signature"] = _signature_records(ttgir, entry_name, signature)
    if tgt[0] == "cuda":
        cubin_file = next(pathlib.Path(p) for n, p in group.items() if n.endswith(".cubin"))
        metadata["gluon_resources"] = _cuda_resources(cubin_file, ptxas_log.getvalue(), name)
    else:
        metadata["gluon_resources"] = _hip_resources(str(asm.get("amdgcn", "")))
    if cluster is not None:     # Triton's launcher starts grid[0] * num_ctas CTAs in clusters of num_ctas
        metadata["num_ctas"] = cluster.num_ctas
        metadata["gluon_cluster"] = cluster_stats
    for _, md_key, stats in opted:
        metadata[md_key] = stats
    metadata["gluon_ptxas_log"] = ptxas_log.getvalue()[-16000:]
    metadata["gluon_version"] = _gluon_version()
    metadata["gluon_files"] = sorted(asm)

    files: dict[str, bytes | str] = {f"{name}.{ext}": data for ext, data in asm.items()}
    files[_METADATA_FILE] = json.dumps(metadata, indent=1, default=vars)
    return files


def _recorded(rewrite, stats: dict):
    """A PTX pass's `rewrite(ptx, kernel) -> (ptx, what it did)` as `(ptx, kernel) -> ptx`, recording what
    it did in `stats` (for the binary's metadata)."""
    def run(ptx: str, kernel: str) -> str:
        ptx, st = rewrite(ptx, kernel)
        stats.update(st)
        return ptx

    return run


def _cluster_rewrite(cluster: "ptx_cluster.ClusterInfo", ttgir: str, name: str, stats: dict):
    """The cluster pass for this kernel's multicast descriptors (TTGIR argument index = PTX parameter)."""
    args = [a for a, _, _ in (ttgir_arguments(ttgir, name) or [])]
    params = {}
    for d in cluster.multicast:
        if d not in args:
            raise _StageError("parse", f"multicast descriptor %{d} is not an argument of @{name}")
        params[d] = args.index(d)
    return _recorded(lambda ptx, kernel: ptx_cluster.rewrite(ptx, kernel, cluster.num_ctas, params), stats)


def _ptx_hook(rewrites: list):
    """A Triton stages hook that runs this kernel's PTX through `rewrites` in order before ptxas."""
    def hook(backend, stages, options, language, capability):
        make_ptx = stages["ptx"]

        def ptx_stage(src, metadata):
            ptx = make_ptx(src, metadata)
            for rewrite in rewrites:
                ptx = rewrite(ptx, metadata["name"])
            return ptx

        stages["ptx"] = ptx_stage

    return hook


# ---------------------------------------------------------------------------------------
# signature
# ---------------------------------------------------------------------------------------
_OPEN, _CLOSE = "(<{[", ")>}]"


def _split_top(s: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside brackets and quotes."""
    out, depth, cur, quote = [], 0, [], False
    for ch in s:
        if ch == '"':
            quote = not quote
        elif not quote:
            if ch in _OPEN:
                depth += 1
            elif ch in _CLOSE:
                depth -= 1
            elif ch == sep and depth == 0:
                out.append("".join(cur))
                cur = []
                continue
        cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur))
    return out


def _func_arg_text(ttgir: str, name: str | None = None) -> str | None:
    """The text between the parentheses of `tt.func ... @name(` (the first function when no name)."""
    fname = re.escape(name) if name else r"[\w$.]+"
    m = re.search(r"tt\.func\s+(?:(?:public|private|nested)\s+)?@" + fname + r"\s*\(", ttgir)
    if not m:
        return None
    i, depth, quote = m.end(), 1, False
    start = i
    while i < len(ttgir) and depth:
        ch = ttgir[i]
        if ch == '"':
            quote = not quote
        elif not quote:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
        i += 1
    return ttgir[start:i - 1] if depth == 0 else None


def _strip_loc(s: str) -> str:
    """Remove a ``loc(...)`` (printed TTGIR carries source locations)."""
    j = s.find(" loc(")
    if j < 0:
        return s
    depth, quote, k = 0, False, j + 4
    while k < len(s):
        ch = s[k]
        if ch == '"':
            quote = not quote
        elif not quote and ch == "(":
            depth += 1
        elif not quote and ch == ")":
            depth -= 1
            if depth == 0:
                break
        k += 1
    return s[:j] + s[k + 1:]


def _parse_attr_dict(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in _split_top(text.strip()[1:-1]):
        k, _, v = item.partition("=")
        k, v = k.strip(), v.strip()
        if not v:
            out[k] = True
            continue
        val = _split_top(v, ":")[0].strip()
        try:
            out[k] = int(val)
        except ValueError:
            out[k] = val
    return out


def ttgir_arguments(ttgir: str, name: str | None = None) -> list[tuple[str, str, dict]] | None:
    """``[(name, mlir_type, attrs), ...]`` of the arguments of function `name` (the first function
    when None) in a TTGIR text, ``loc(...)`` removed; None when the function is not found."""
    text = _func_arg_text(ttgir, name)
    if text is None:
        return None
    out = []
    for piece in _split_top(text):
        piece = _strip_loc(piece).strip()
        arg, _, rest = piece.partition(":")
        rest = rest.strip()
        # a trailing top-level {...} is the argument's attribute dict
        depth, brace = 0, None
        for j, ch in enumerate(rest):
            if ch in _OPEN:
                if ch == "{" and depth == 0:
                    brace = j
                depth += 1
            elif ch in _CLOSE:
                depth -= 1
        attrs = _parse_attr_dict(rest[brace:]) if brace is not None else {}
        mlir_type = rest[:brace].strip() if brace is not None else rest
        out.append((arg.strip().lstrip("%"), mlir_type, attrs))
    return out


def _signature_records(ttgir: str, name: str, types: list[str]) -> list[dict]:
    """``[{"name", "type", "attrs"}]`` per kernel argument, in order.

    Types are Triton's (``IRSource.signature``); names and attributes come from
    the TTGIR text, since MLIR does not keep SSA names.  Falls back to ``argN``.
    """
    args = ttgir_arguments(ttgir, name) or []
    names = [a[0] for a in args]
    attrs = [a[2] for a in args]
    if len(names) != len(types):
        names = [f"arg{i}" for i in range(len(types))]
        attrs = [{} for _ in types]
    return [{"name": n or f"arg{i}", "type": t, "attrs": a} for i, (n, t, a) in enumerate(zip(names, types, attrs))]


_TENSORDESC_RE = re.compile(r"!tt\.tensordesc<tensor<((?:\d+x)+)([A-Za-z0-9_]+)")
_SCALAR_TO_LAUNCHER = {"f16": "fp16", "f32": "fp32", "f64": "fp64", "bf16": "bf16"}
_ELEM_TO_TRITON = {"f16": "fp16", "f32": "fp32", "f64": "fp64", "bf16": "bf16", "f8E4M3FN": "fp8e4nv",
                   "f8E5M2": "fp8e5"}


# ---------------------------------------------------------------------------------------
# resource usage (no GPU)
# ---------------------------------------------------------------------------------------
def _cuobjdump_path() -> str:
    from triton import knobs

    return knobs.nvidia.cuobjdump.path


def _cuda_resources(cubin_file: pathlib.Path, ptxas_log: str, name: str) -> dict:
    """Registers etc. from ``cuobjdump --dump-resource-usage``; spills from ptxas -v.

    cuobjdump reads the cubin (authoritative: REG, STACK, LOCAL, SHARED (static,
    e.g. the 1 KiB SM90+ reserve; Triton's dynamic shared memory is
    ``metadata["shared"]``), CONSTANT[0]).  Spill stores/loads are only reported
    by ``ptxas -v``, whose log Triton prints when ``dump_ptxas_log`` is set.
    """
    res: dict[str, Any] = {"source": []}
    try:
        out = subprocess.run([_cuobjdump_path(), "--dump-resource-usage", str(cubin_file)], capture_output=True,
                             text=True, timeout=60, check=True).stdout
        res.update(_parse_cuobjdump_resources(out, name))
        res["source"].append("cuobjdump")
    except Exception as e:  # noqa: BLE001 - a missing tool must not fail the compile
        res["cuobjdump_error"] = f"{type(e).__name__}: {e}"
    p = _parse_ptxas_log(ptxas_log)
    if p:
        res["source"].append("ptxas")
        res.update(p)
    return res


def _parse_cuobjdump_resources(text: str, name: str | None = None) -> dict:
    """Parse ``cuobjdump --dump-resource-usage`` for one function (``name``, or the first)."""
    fields: dict[str, int] | None = None
    cur = None
    for ln in text.splitlines():
        m = re.match(r"\s*Function\s+([^\s:]+)\s*:", ln)
        if m:
            cur = m.group(1)
            continue
        if cur is not None and "REG:" in ln and (name is None or cur == name or fields is None):
            fields = {k: int(v) for k, v in re.findall(r"([A-Z_]+(?:\[\d+\])?):(\d+)", ln)}
            if name is None or cur == name:
                break
    if not fields:
        return {}
    return {
        "registers": fields.get("REG", 0),
        "stack_bytes": fields.get("STACK", 0),
        "local_bytes": fields.get("LOCAL", 0),
        "static_shared_bytes": fields.get("SHARED", 0),
        "constant0_bytes": fields.get("CONSTANT[0]", 0),
    }


def _parse_ptxas_log(text: str) -> dict:
    out: dict[str, Any] = {}
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", text)
    if m:
        out["stack_frame_bytes"], out["spill_store_bytes"], out["spill_load_bytes"] = map(int, m.groups())
    m = re.search(r"Used (\d+) registers", text)
    if m:
        out["ptxas_registers"] = int(m.group(1))
    m = re.search(r"used (\d+) barriers", text)
    if m:
        out["barriers"] = int(m.group(1))
    warnings = [ln.strip() for ln in text.splitlines() if "warning" in ln.lower()]
    if warnings:
        out["ptxas_warnings"] = warnings
    return out


def _hip_resources(amdgcn: str) -> dict:
    """Registers/spills from the amdgcn text: the kernel descriptor metadata
    (``.vgpr_count``, ``.vgpr_spill_count``, ...) and the ``; NumVgprs:`` comments."""

    def num(pattern):
        m = re.search(pattern, amdgcn, re.MULTILINE)
        return int(m.group(1)) if m else None

    res = {
        "vgpr_count": num(r"^\s*-?\s*\.vgpr_count:\s*(\d+)"),
        "agpr_count": num(r"^\s*-?\s*\.agpr_count:\s*(\d+)"),
        "sgpr_count": num(r"^\s*-?\s*\.sgpr_count:\s*(\d+)"),
        "vgpr_spill_count": num(r"^\s*-?\s*\.vgpr_spill_count:\s*(\d+)"),
        "sgpr_spill_count": num(r"^\s*-?\s*\.sgpr_spill_count:\s*(\d+)"),
        "scratch_bytes": num(r"^\s*-?\s*\.private_segment_fixed_size:\s*(\d+)"),
        "lds_bytes": num(r"^\s*-?\s*\.group_segment_fixed_size:\s*(\d+)"),
        "num_vgprs": num(r"^; NumVgprs:\s*(\d+)"),
        "total_num_vgprs": num(r"^; TotalNumVgprs:\s*(\d+)"),
        "num_sgprs": num(r"^; NumSgprs:\s*(\d+)"),
        "scratch_size": num(r"^; ScratchSize:\s*(\d+)"),
        "occupancy": num(r"^; Occupancy:\s*(\d+)"),
        "source": ["amdgcn"],
    }
    regs = next((v for v in (res["vgpr_count"], res["total_num_vgprs"], res["num_vgprs"]) if v is not None), None)
    res["registers"] = regs
    if res["scratch_bytes"] is None:
        res["scratch_bytes"] = res["scratch_size"]
    return res


# ---------------------------------------------------------------------------------------
# SASS
# ---------------------------------------------------------------------------------------
_OPCODE_RE = re.compile(r"^[A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*$")


def sass_instructions(sass: str) -> collections.Counter:
    """Count SASS opcodes, keyed by every dotted prefix of each opcode.

    ``HGMMA.64x128x16.F32 ...`` counts once under ``HGMMA``, ``HGMMA.64x128x16``
    and ``HGMMA.64x128x16.F32``, so ``c["HGMMA"]`` is the number of HGMMA
    instructions of any shape and ``c["LDG.E.128"]`` the number of 128-bit global
    loads (whatever modifiers follow).  Predicates (``@P0``, ``@!PT``) are
    ignored.  Because of the prefixes, ``sum(c.values())`` is *not* the
    instruction count; use ``c["<opcode>"]`` lookups.  Accepts Triton's formatted
    SASS (``ctrl\\tOPCODE ...;``, what :meth:`Binary.sass` returns) and raw
    ``cuobjdump -sass`` output.
    """
    counts: collections.Counter = collections.Counter()
    for raw in sass.splitlines():
        ln = re.sub(r"/\*.*?\*/", " ", raw).strip()  # raw cuobjdump: /*0040*/ ... /* 0x... */
        if not ln or ln.endswith(":") or ln.startswith(("Function", ".", "//", "code for", "Fatbin")):
            continue
        if "\t" in ln:  # Triton's format: "--:-:0:-:1\tLDC R1, c[0x0][0x37c];"
            head, _, rest = ln.partition("\t")
            if re.match(r"^[-\w]{2}:[-\w]:[-\w]:[-\w]:[0-9a-f]$", head.strip()):
                ln = rest.strip()
        toks = ln.replace(";", " ").split()
        while toks and toks[0].startswith("@"):
            toks = toks[1:]
        if not toks or not _OPCODE_RE.match(toks[0]):
            continue
        parts = toks[0].split(".")
        for i in range(1, len(parts) + 1):
            counts[".".join(parts[:i])] += 1
    return counts


# ---------------------------------------------------------------------------------------
# Binary
# ---------------------------------------------------------------------------------------
class _TTGIRLaunchSource:
    """The ``src`` a ``CompiledKernel`` needs for launching: a signature in the
    launcher's vocabulary and no constants (TTGIR has its constants folded in)."""

    ext = "ttgir"

    def __init__(self, name: str, signature: dict[int, str], ttgir: str):
        self.name = "@" + name
        self.signature = signature
        self.constants: dict = {}
        self.src = ttgir

    def hash(self) -> str:
        return hashlib.sha256(self.src.encode("utf-8")).hexdigest()


@dataclasses.dataclass
class Binary:
    """A compiled kernel: its files in a cache entry, and what they say.

    ``asm`` holds ``ttgir``, ``llir`` and ``ptx`` + ``cubin`` (CUDA) or ``amdgcn`` +
    ``hsaco`` (HIP); ``metadata`` is Triton's metadata json plus ``tensordesc_meta``,
    ``gluon_signature`` and ``gluon_resources`` (see the module docstring).
    """

    name: str
    target: tuple
    key: str
    path: pathlib.Path
    asm: dict
    metadata: dict
    _kernels: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)
    _sass: str | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    # -- loading --------------------------------------------------------------------
    @classmethod
    def load(cls, path: pathlib.Path | str, *, target=None, key: str | None = None) -> "Binary":
        """Read a cache entry (or a copy of one, e.g. a built artifact) from ``path``."""
        path = pathlib.Path(path)
        try:
            metadata = json.loads((path / _METADATA_FILE).read_text(encoding="utf-8"))
            name = metadata["name"]
            asm: dict[str, bytes | str] = {}
            for ext in metadata["gluon_files"]:
                f = path / f"{name}.{ext}"
                asm[ext] = f.read_bytes() if ext in _BINARY_EXTS else f.read_text(encoding="utf-8")
        except (OSError, KeyError, ValueError) as e:
            raise _CorruptEntry(f"incomplete kernel cache entry {path}: {e}") from e
        if target is None:
            t = metadata["target"]
            target = (t["backend"], t["arch"], t["warp_size"])
        return cls(name=name, target=target, key=key or path.name, path=path, asm=asm, metadata=metadata)

    # -- metadata views ----------------------------------------------------------------
    @property
    def backend(self) -> str:
        return self.metadata["target"]["backend"]

    @property
    def num_warps(self) -> int:
        """Warps to launch, from Triton's metadata.  A warp-specialized kernel needs
        more than its module's ``ttg.num-warps`` (default partition + workers,
        padded to a multiple of 4), so never read that attribute for launching."""
        return int(self.metadata["num_warps"])

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory (bytes) the kernel is launched with (``metadata["shared"]``).
        The small static part the toolchain reserves (1 KiB on SM90+) is
        ``resources["static_shared_bytes"]``."""
        return int(self.metadata.get("shared", 0))

    @property
    def resources(self) -> dict:
        """Resource usage read from the binary at compile time (no GPU); see
        ``_cuda_resources`` / ``_hip_resources`` for the fields."""
        res = self.metadata.get("gluon_resources")
        if res is None:  # an entry from before resources were recorded: compute now
            if self.backend == "cuda":
                res = _cuda_resources(self.path / f"{self.name}.cubin", "", self.name)
            else:
                res = _hip_resources(str(self.asm.get("amdgcn", "")))
            self.metadata["gluon_resources"] = res
        return res

    @property
    def registers(self) -> int:
        """Registers per thread: CUDA ``REG`` of cuobjdump (what the launch
        allocates; with ``setmaxnreg`` the warp groups then re-balance), HIP
        ``.vgpr_count`` (arch VGPRs + AGPRs on CDNA3)."""
        r = self.resources.get("registers")
        if r is None:
            r = self.resources.get("ptxas_registers")
        if r is None:
            raise RuntimeError(f"register count unavailable for {self.name}: {self.resources}")
        return int(r)

    @property
    def spills(self) -> int:
        """Spilling, 0 when none.  CUDA: **bytes** per thread, spill stores + spill
        loads as reported by ``ptxas -v`` (falls back to cuobjdump's LOCAL bytes
        if the ptxas log is missing).  HIP: **count** of spilled registers,
        ``.vgpr_spill_count + .sgpr_spill_count``."""
        res = self.resources
        if self.backend == "cuda":
            if "spill_store_bytes" in res:
                return int(res["spill_store_bytes"]) + int(res["spill_load_bytes"])
            return int(res.get("local_bytes", 0))
        return int(res.get("vgpr_spill_count") or 0) + int(res.get("sgpr_spill_count") or 0)

    @property
    def signature(self) -> list[dict]:
        """``metadata["gluon_signature"]``: ``[{"name", "type", "attrs"}]`` in order."""
        return self.metadata.get("gluon_signature", [])

    @property
    def tensordesc_meta(self) -> list[dict]:
        """Per ``!tt.tensordesc`` argument, in order: swizzle, elem_size, elem_type,
        block_size (the TMA box), fp4_padded -- what ``fill_tma_descriptor`` needs."""
        return self.metadata.get("tensordesc_meta") or []

    # -- SASS ------------------------------------------------------------------------
    def sass(self) -> str:
        """SASS text (CUDA only), disassembled with the cuobjdump in the Triton wheel
        (via ``triton.tools.disasm.get_sass``) on first use, then kept as
        ``<name>.sass`` in the entry so later processes skip the disassembler."""
        if self.backend != "cuda":
            raise ValueError(f"sass() is CUDA-only; {self.name} targets {self.target}: read asm['amdgcn']")
        if self._sass is not None:
            return self._sass
        f = self.path / f"{self.name}.sass"
        try:
            self._sass = f.read_text(encoding="utf-8")
            return self._sass
        except OSError:
            pass
        from triton.tools.disasm import get_sass

        text = get_sass(bytes(self.asm["cubin"]))
        self._sass = text
        tmp = self.path / f".{f.name}.{os.getpid()}.tmp"
        try:  # atomic add; a read-only cache just skips it
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, f)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
        return text

    # -- launching ---------------------------------------------------------------------
    def launcher_signature(self, tensordesc_args: str = "descriptor") -> dict[int, str]:
        """The signature in Triton's launcher vocabulary (``*fp16``, ``i32``, ``fp32``, ...).

        ``IRSource`` keeps raw MLIR types (``f32``, ``!tt.tensordesc<...>``), which
        the stock launcher does not understand.  Each ``!tt.tensordesc`` argument
        becomes, by ``tensordesc_args``:

        * ``"descriptor"`` (default): one ``tensordesc<fp16[128,64]>`` entry that
          absorbs the shape (i32) and stride (i64) arguments following it in the
          TTGIR signature -- exactly the form Triton's JIT uses.  Launch with one
          ``triton.tools.tensor_descriptor.TensorDescriptor`` per descriptor; the
          launcher builds the CUtensorMap from ``tensordesc_meta`` (the box is
          ``block_size`` there, not the descriptor's ``block_shape``).
        * ``"cutensormap"``: ``nvTmaDesc``; pass a ready CUtensorMap (e.g. from
          ``driver.active.utils.fill_tma_descriptor``) followed by the shape and
          stride integers yourself -- lets a runtime cache descriptors.
        """
        if tensordesc_args not in ("descriptor", "cutensormap"):
            raise ValueError("tensordesc_args must be 'descriptor' or 'cutensormap'")
        types = [a["type"] for a in self.signature]
        out: list[str] = []
        i = 0
        while i < len(types):
            ty = types[i]
            m = _TENSORDESC_RE.match(ty)
            if m is None:
                out.append(_SCALAR_TO_LAUNCHER.get(ty, ty))
                i += 1
                continue
            shape = m.group(1).rstrip("x").split("x")
            ndim = len(shape)
            if tensordesc_args == "cutensormap":
                out.append("nvTmaDesc")
                i += 1
                continue
            tail = types[i + 1:i + 1 + 2 * ndim]
            if tail != ["i32"] * ndim + ["i64"] * ndim:
                raise ValueError(f"argument {i} ({self.signature[i]['name']}) of {self.name}: a tensordesc must be "
                                 f"followed by {ndim} i32 shape and {ndim} i64 stride arguments, found {tail}")
            elem = _ELEM_TO_TRITON.get(m.group(2), m.group(2))
            out.append(f"tensordesc<{elem}[{','.join(shape)}]>")
            i += 1 + 2 * ndim
        return dict(enumerate(out))

    def triton_kernel(self, tensordesc_args: str = "descriptor"):
        """A ``triton.compiler.CompiledKernel`` over the cached files, no recompile.

        Built with ``CompiledKernel(src, metadata_group, hash)``, the constructor
        Triton's own cache hit uses: it reads the metadata json and the asm files
        and touches no GPU; the driver, the launcher (a C module linked against
        libcuda / libamdhip) and the module load happen lazily on the first
        ``kernel[grid](...)``.  On a machine without a GPU construction works and
        the launch raises there.  Memoized per ``tensordesc_args`` (see
        :meth:`launcher_signature`).
        """
        if tensordesc_args not in self._kernels:
            from triton.compiler.compiler import CompiledKernel

            src = _TTGIRLaunchSource(self.name, self.launcher_signature(tensordesc_args), str(self.asm.get("ttgir", "")))
            group = {f"{self.name}.{ext}": str(self.path / f"{self.name}.{ext}") for ext in self.metadata["gluon_files"]}
            group[f"{self.name}.json"] = str(self.path / _METADATA_FILE)
            kernel = CompiledKernel(src, group, self.metadata.get("hash", self.key))
            if tensordesc_args == "cutensormap":
                # The stock launcher asserts one tensordesc_meta entry per "tensordesc"
                # signature entry; with raw nvTmaDesc arguments there are none.
                kernel.metadata = kernel.metadata._replace(tensordesc_meta=None)
            self._kernels[tensordesc_args] = kernel
        return self._kernels[tensordesc_args]
