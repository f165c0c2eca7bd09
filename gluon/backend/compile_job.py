"""Running one compile: Triton 3.6 on a TTGIR file, with this kernel's PTX passes, in a forked child (or
in-process), and the errors it can end in.

Why a forked child, by default: (1) a C++ abort or segfault inside MLIR/LLVM on bad IR would otherwise
kill the caller (a tuner with hours of state); in a child it becomes a :class:`CompileError`; (2) MLIR
prints its diagnostics straight to file descriptor 2, and Triton's knobs (cache dir, ptxas log) are
process-global -- a child can redirect and set them without disturbing the caller's other threads, so
compiles from several threads run truly in parallel. ``fork`` costs about a millisecond. In-process
compiles are serialised by a lock.

Triton's own cache (``~/.triton/cache``) is not used: each compile points Triton at a scratch directory
inside our cache root, so the user's Triton cache is never written and a stale Triton entry can never
be served.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import re
import shutil
import signal
import sys
import threading
import traceback
import warnings

from ..abi import KernelABI, ParamKind
from ..arch import TMA_SWIZZLE_MODE
from ..cache import KernelCache
from ..version import __version__
from . import ptx, sass_passes
from .binary import BINARY_EXTS, METADATA_FILE
from .machine_code import cuda_resources, cuobjdump_path, hip_resources

_inprocess_lock = threading.Lock()


def target_str(t) -> str:
    """Spelled as TTGIR's ``ttg.target`` attribute: ``cuda:90``, ``hip:gfx942``."""
    return f"{t[0]}:{t[1]}"


class CompileError(Exception):
    """TTGIR that Triton/MLIR/ptxas rejected (or that crashed the compiler).

    The message names the target, the first error lines of the compiler, and the
    path of the kept TTGIR file (under ``<cache root>/failed/``), so the user can
    open the failing input at the reported line.  Attributes: ``target``,
    ``ttgir_path``, ``log_path``, ``stage`` (``"target"``, ``"parse"``,
    ``"compile"`` or ``"crash"``), ``diagnostics`` (the extracted error lines) and ``loc`` (the
    user's line of the op whose TTGIR the first error names, set by ``compile_kernel``).
    """

    def __init__(self, message: str, *, target=None, ttgir_path=None, log_path=None, stage=None,
                 diagnostics: str = ""):
        super().__init__(message)
        self.target = target
        self.ttgir_path = ttgir_path
        self.log_path = log_path
        self.stage = stage
        self.diagnostics = diagnostics
        self.loc = None         # the user's source line the failing TTGIR was lowered from, where known


class _StageError(Exception):
    """Inside the compile job: which stage failed and why (crosses the fork as json)."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


def _compile_forked(ttgir: str, tgt, options: dict, cache: KernelCache, key: str,
                    abi: KernelABI | None) -> None:
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
                    files = _compile_job(src_path, tgt, options, abi)
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


def _compile_inprocess(ttgir: str, tgt, options: dict, cache: KernelCache, key: str,
                      abi: KernelABI | None) -> None:
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
                    files = _compile_job(src_path, tgt, options, abi)
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
            cuobjdump_path()
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


def keep_failed(cache: KernelCache, key: str, ttgir: str, log: str) -> tuple[pathlib.Path, pathlib.Path]:
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
    kept, logp = keep_failed(cache, key, ttgir, full)
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
    msg = (f"{head} for target {target_str(tgt)} (warp size {tgt[2]}, triton {triton.__version__})\n"
           f"  TTGIR kept at: {kept}\n"
           f"  full log:      {logp}\n"
           f"  first errors:\n{body}\n"
           f"  raised: {info.get('exc_type')}: {message_text.strip().splitlines()[0] if message_text.strip() else ''}")
    return CompileError(msg, target=tgt, ttgir_path=kept, log_path=logp, stage=stage, diagnostics="\n".join(diags))


# ---------------------------------------------------------------------------------------
# the job itself (runs in the child, or in-process under the lock)
# ---------------------------------------------------------------------------------------
def _compile_job(src_path: pathlib.Path, tgt, options: dict, abi: KernelABI | None) -> dict[str, bytes | str]:
    """Compile ``src_path`` and return the files of the cache entry (name -> content)."""
    import triton
    from triton import knobs
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import IRSource, make_backend

    gpu_target = GPUTarget(*tgt)

    # 1. Parse once ourselves, as triton.compile does for IR input (IRSource loads the common and
    #    backend dialects into the context), for the one thing the .ttgir path never records: the TMA
    #    descriptor metadata. A parse/verify error surfaces here, with MLIR's diagnostics on fd 2.
    try:
        backend = make_backend(gpu_target)
        ctx = ir.context()
        irsrc = IRSource(str(src_path), ctx, backend)
        tensordesc_meta = irsrc.module.get_tensordesc_metadata()
        entry_name = irsrc.name.lstrip("@")
    except Exception as e:
        raise _StageError("parse", str(e)) from e
    del irsrc, ctx
    if abi is not None:
        _check_descriptors(abi, tensordesc_meta)

    # 2. Compile with Triton's cache redirected to our scratch dir and ptxas' -v log (Triton prints it
    #    with print() when dump_ptxas_log is set) captured; the PTX goes through the passes the ABI asks
    #    for (backend/ptx) before ptxas, and the cubin through its SASS passes (backend/sass_passes.py) after.
    ptxas_log = io.StringIO()
    rewrites = ptx.requested(abi)
    sass_names, sass_stats = sass_passes.requested(abi), {}
    hooks = ([ptx.stage_hook(rewrites)] if rewrites else []) + (
        [sass_passes.stage_hook(sass_names, sass_stats)] if sass_names else [])

    def stages_hook(*args):             # the PTX passes' and the SASS passes' hooks, in turn
        for h in hooks:
            h(*args)
    try:
        with knobs.cache.scope(), knobs.nvidia.scope(), knobs.runtime.scope(), \
                contextlib.redirect_stdout(ptxas_log):
            knobs.cache.dir = str(src_path.parent / "triton-cache")
            knobs.nvidia.dump_ptxas_log = True
            if hooks:
                knobs.runtime.add_stages_inspection_hook = stages_hook
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
        asm[ext] = pth.read_bytes() if ext in BINARY_EXTS else pth.read_text(encoding="utf-8")

    # 4. Complete the metadata.
    if not metadata.get("tensordesc_meta"):
        metadata["tensordesc_meta"] = tensordesc_meta
    if tgt[0] == "cuda":
        cubin_file = next(pathlib.Path(p) for n, p in group.items() if n.endswith(".cubin"))
        metadata["gluon_resources"] = cuda_resources(cubin_file, ptxas_log.getvalue(), name)
    else:
        metadata["gluon_resources"] = hip_resources(str(asm.get("amdgcn", "")))
    if abi is not None:
        if abi.num_ctas > 1:    # Triton's launcher starts grid[0] * num_ctas CTAs in clusters of num_ctas
            metadata["num_ctas"] = abi.num_ctas
        if abi.launch_pdl:      # ... and launches it with programmatic stream serialization (griddep_wait)
            metadata["launch_pdl"] = True
        for rw in rewrites:
            metadata[rw.metadata_key] = rw.stats
        if sass_stats:
            metadata["gluon_sass_passes"] = sass_stats
        metadata["gluon_abi"] = abi.to_json()
    metadata["gluon_ptxas_log"] = ptxas_log.getvalue()[-16000:]
    metadata["gluon_version"] = __version__
    metadata["gluon_files"] = sorted(asm)

    files: dict[str, bytes | str] = {f"{name}.{ext}": data for ext, data in asm.items()}
    files[METADATA_FILE] = json.dumps(metadata, indent=1, default=vars)
    return files


def _check_descriptors(abi: KernelABI, meta: list) -> None:
    """The lowering's TMA boxes, swizzles and element sizes are what Triton's TMA instructions assume
    (Triton records them per descriptor parameter, in order): a mismatch is a lowering bug, and a
    launch would move the wrong bytes."""
    descs = [p for p in abi.runtime_params if p.kind is ParamKind.TENSORDESC]
    meta = list(meta or [])
    if len(meta) != len(descs):
        raise _StageError("parse", f"the kernel ABI has {len(descs)} TMA descriptors, Triton's metadata "
                                   f"{len(meta)}")
    swizzle_bytes = {mode: b for b, mode in TMA_SWIZZLE_MODE.items()}
    for p, m in zip(descs, meta):
        got = (tuple(int(b) for b in m["block_size"]), swizzle_bytes.get(int(m["swizzle"])), int(m["elem_size"]))
        want = (p.box, p.swizzle_bytes, p.dtype.bytes)
        if got != want:
            raise _StageError("parse", f"descriptor {p.name}: the ABI says box {want[0]}, {want[1]}-byte swizzle, "
                                       f"{want[2]}-byte elements; Triton's TMA code assumes {got}")


def run(ttgir: str, tgt, options: dict, cache: KernelCache, key: str, abi: KernelABI | None,
        isolate: bool) -> None:
    """Compile into `cache` under `key` (forked or in-process); raises CompileError."""
    (_compile_forked if isolate else _compile_inprocess)(ttgir, tgt, options, cache, key, abi)
