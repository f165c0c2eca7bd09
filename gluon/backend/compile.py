"""TTGIR -> GPU binary, through Triton 3.6.0, cached on disk: the compile step of the pipeline.

`compile_kernel(lowered)` takes what the lowering returns (`gluon.abi.LoweredKernel`: TTGIR text and the
kernel's ABI) and gives a :class:`~gluon.backend.binary.Binary`; `compile_ttgir(text, target)` compiles
raw TTGIR (reference kernels, tools), optionally with an ABI. The TTGIR goes to ``triton.compile``
(``llir -> ptx -> cubin`` for CUDA, ``llir -> amdgcn -> hsaco`` for HIP, with the ptxas/ld.lld the wheel
bundles, so no GPU is needed), the PTX through the passes the ABI asks for (backend/ptx/), and
everything a later user of the kernel needs is stored in a :class:`~gluon.cache.KernelCache` entry, so
that a cache hit costs no compiler, no disassembler and no GPU:

* the IR levels and the binary (``asm``),
* Triton's metadata json, completed with what a ``.ttgir`` compile leaves out:

  - ``tensordesc_meta``: Triton 3.6 fills it only in its ``make_ttgir`` stage, which is skipped for TTGIR
    input. We read it from the parsed module (``parse_mlir_module(...).get_tensordesc_metadata()``, the
    call Triton's own stage makes) and check it against the ABI's TMA boxes.
  - ``gluon_abi``: the kernel's ABI (`KernelABI.to_json`), so a binary loaded from the cache or from a
    built artifact can be launched without its lowering.
  - ``gluon_resources``: registers, spills, stack, static shared memory, read from the binary without
    a GPU (machine_code.py).
  - ``num_ctas`` of a cluster kernel (Triton's launcher then starts clusters), and what each PTX pass did.

Compilation runs in a forked child by default (compile_job.py says why); set
``GLUON_COMPILE_ISOLATION=inprocess`` (or ``isolate=False``) to compile in the calling process instead.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Mapping

from ..abi import KernelABI, LoweredKernel
from ..arch import NV_RESERVED_SHARED, arch_by_name, resident_ctas
from ..cache import KernelCache, default_cache
from ..types import GluonError
from ..version import __version__
from . import compile_job, ptx, sass_passes
from .binary import Binary, CorruptEntry
from .compile_job import CompileError, keep_failed, target_str

__all__ = ["Binary", "CompileError", "available_targets", "cache_key_parts", "compile_kernel", "compile_ttgir"]

Target = tuple  # ("cuda", 90, 32) | ("hip", "gfx942", 64)

_TARGETS: tuple[Target, ...] = (
    ("cuda", 80, 32),
    ("cuda", 90, 32),
    ("cuda", 100, 32),
    ("hip", "gfx942", 64),
)


def available_targets() -> list[Target]:
    """The targets this backend compiles for (and the test suite checks)."""
    return list(_TARGETS)


def normalize_target(target) -> tuple[str, int | str, int]:
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


def cache_key_parts(ttgir: str, target, options: Mapping | None = None, abi: KernelABI | None = None) -> tuple:
    """What a compiled kernel depends on, as hashed by :meth:`KernelCache.key`.

    TTGIR text (by sha256), target, triton and gluon versions, sorted options, and Triton's
    cache-invalidating environment variables (the ones Triton itself hashes: they change the generated
    code); for a kernel whose ABI asks for PTX passes, each pass's source and the cluster's shape, and for SASS
    passes theirs; and whether it is launched as a programmatic dependent (its metadata says so)."""
    import triton
    from triton._C.libtriton import get_cache_invalidating_env_vars

    t = normalize_target(target)
    opts = sorted((str(k), v) for k, v in dict(options or {}).items())
    return (
        ("kind", "triton-ttgir"),
        ("ttgir_sha256", hashlib.sha256(ttgir.encode("utf-8")).hexdigest()),
        ("target", list(t)),
        ("triton", triton.__version__),
        ("gluon", __version__),
        ("options", opts),
        ("env", sorted(get_cache_invalidating_env_vars().items())),
    ) + ptx.key_parts(abi) + sass_passes.key_parts(abi) + (
        (("launch_pdl", True),) if abi is not None and abi.launch_pdl else ())


def compile_kernel(lowered: LoweredKernel, *, options: dict | None = None, cache: KernelCache | None = None,
                   isolate: bool | None = None) -> Binary:
    """Compile what the lowering returned (or load it from ``cache``); the binary carries its ABI. A
    compiler error at a TTGIR line is reported at the user's line of the op that line was lowered from."""
    try:
        binary = compile_ttgir(lowered.ttgir, lowered.abi.target, abi=lowered.abi, options=options, cache=cache,
                               isolate=isolate)
    except CompileError as e:
        few = _too_few_launch_registers(e, lowered.abi)
        if few is not None:
            raise few from None
        raise at_source_line(e, lowered) from None
    _check_residency(binary, lowered.abi)
    return binary


def _too_few_launch_registers(e: CompileError, abi: KernelABI) -> GluonError | None:
    """ptxas's "Insufficient registers (R) ... register target of T or higher" (C7602) for a kernel that asked for
    several CTAs an SM (`set_ctas_per_sm`, which set R): one line saying so, instead of the compiler's log."""
    m = re.search(r"C7602\) Insufficient registers \((\d+)\).*?register target of (\d+)", str(e) + e.diagnostics)
    if abi.ctas_per_sm <= 1 or m is None:
        return None
    return GluonError(f"{_asked(abi)}, which launches its threads with {m.group(1)} registers; ptxas needs "
                      f"{m.group(2)} or more for this kernel: ask for fewer CTAs an SM, or give the kernel fewer warps")


def _asked(abi: KernelABI) -> str:
    """The lead of the errors about `set_ctas_per_sm`: where the kernel is, and what it asked for."""
    where = f"{abi.loc}: " if abi.loc else ""
    return f"{where}kernel {abi.name} asks for {abi.ctas_per_sm} CTAs an SM (set_ctas_per_sm)"


def _check_residency(binary: Binary, abi: KernelABI) -> None:
    """A kernel that asked for several CTAs an SM (`set_ctas_per_sm`) gets a binary whose registers and shared
    memory allow them: else a GluonError at the kernel, naming what is over."""
    want = abi.ctas_per_sm
    if want <= 1 or binary.backend != "cuda":
        return
    arch = arch_by_name(f"sm{abi.target[1]}")
    threads = binary.num_warps * abi.target[2]
    got = resident_ctas(arch, threads, binary.registers, binary.shared_bytes)
    if got < want:
        most = (arch.smem_per_block_max + NV_RESERVED_SHARED) // want - NV_RESERVED_SHARED
        raise GluonError(f"{_asked(abi)} but its binary lets {got} reside: {binary.shared_bytes} bytes of shared "
                         f"memory a CTA ({want} fit in {most} each), {binary.registers} registers a thread x {threads} "
                         "threads; use fewer stages or smaller tiles")


def at_source_line(e: CompileError, lowered: LoweredKernel) -> CompileError:
    """`e` led by the user's file:line and source line of the first TTGIR line its diagnostics name that
    the lowering recorded an op for (MLIR's `<file>.ttgir:LINE:COL: error`); `e` itself where none."""
    for m in re.finditer(r"\.ttgir:(\d+):\d+", e.diagnostics or str(e)):
        loc = lowered.loc_of_line(int(m.group(1)))
        if loc is None:
            continue
        where = GluonError(f"Triton's compiler rejected the TTGIR lowered from this line (TTGIR line "
                           f"{m.group(1)}, below); the passes accepted it, so this is a gluon bug: please report "
                           "it with the kept TTGIR", loc)
        new = CompileError(f"{where}\n{e}", target=e.target, ttgir_path=e.ttgir_path, log_path=e.log_path,
                           stage=e.stage, diagnostics=e.diagnostics)
        new.loc = loc
        return new
    return e


def compile_ttgir(ttgir: str, target, *, abi: KernelABI | None = None, options: dict | None = None,
                  cache: KernelCache | None = None, isolate: bool | None = None) -> Binary:
    """Compile TTGIR text for ``target``, or load it from ``cache`` (default: :func:`default_cache`).

    ``abi``: the kernel's calling convention (its PTX passes run, and the binary can be launched); raw
    TTGIR without one compiles as Triton compiles it. ``options`` are extra ``triton.compile`` options
    (``{"num_stages": 1}``, ...) and part of the key. On a hit nothing of Triton's compiler is called.
    ``isolate``: compile in a forked child (default); ``None`` reads ``GLUON_COMPILE_ISOLATION``
    (``fork`` | ``inprocess``). Raises :class:`CompileError` when the TTGIR does not compile.
    """
    if not isinstance(ttgir, str):
        raise TypeError(f"ttgir must be str, got {type(ttgir).__name__}")
    tgt = normalize_target(target)
    if abi is not None and normalize_target(abi.target) != tgt:
        raise ValueError(f"kernel {abi.name} was lowered for {target_str(abi.target)}, not {target_str(tgt)}")
    options = dict(options or {})
    if cache is None:
        cache = default_cache()
    key = cache.key(*cache_key_parts(ttgir, tgt, options, abi))

    entry = cache.get(key)
    if entry is not None:
        try:
            return Binary.load(entry, target=tgt, key=key, abi=abi)
        except CorruptEntry:
            cache.evict(key)  # e.g. files deleted by hand; rebuild it

    _check_module_target(ttgir, tgt, cache, key)
    if isolate is None:
        mode = os.environ.get("GLUON_COMPILE_ISOLATION", "fork").strip().lower()
        isolate = mode != "inprocess"
    if isolate and not hasattr(os, "fork"):
        isolate = False
    compile_job.run(ttgir, tgt, options, cache, key, abi, isolate)

    entry = cache.get(key)
    if entry is None:  # pragma: no cover - the job returned success but published nothing
        raise CompileError(f"compile for {target_str(tgt)} reported success but left no cache entry {key}",
                           target=tgt, stage="crash")
    return Binary.load(entry, target=tgt, key=key, abi=abi)


def _check_module_target(ttgir: str, tgt, cache: KernelCache, key: str) -> None:
    """TTGIR carries its target (``ttg.target = "cuda:90"``); refuse a mismatch early.

    Triton does not: cuda:80 TTGIR compiles for sm_90 without a word (with the
    wrong layouts), and HIP TTGIR fails for CUDA with only "Parse MLIR file failed".
    """
    m = re.search(r'ttg\.target\s*=\s*"([^"]+)"', ttgir)
    if m and m.group(1) != target_str(tgt):
        kept, logp = keep_failed(cache, key, ttgir, f"module target {m.group(1)} != requested {target_str(tgt)}\n")
        msg = (f"TTGIR for target {m.group(1)} (its ttg.target attribute) can not be compiled for "
               f"{target_str(tgt)} (warp size {tgt[2]}): lower it for {target_str(tgt)} or pass the "
               f"matching target\n  TTGIR kept at: {kept}")
        raise CompileError(msg, target=tgt, ttgir_path=kept, log_path=logp, stage="target",
                           diagnostics=f'ttg.target = "{m.group(1)}"')
