"""A compiled kernel: the files of its cache entry, and what they say (metadata, resources, SASS, ABI)."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import re

from ..abi import KernelABI
from .machine_code import cuda_resources, hip_resources
from .sass_flow import unwritten_descriptor_reads

# triton.tools.disasm's line pattern, taking code offsets of any length: its own takes 4 hex digits, so a
# kernel over 64 KiB of code lost every line past offset 0xfff0
_SASS_LINE = re.compile(r"\s*/\*\w{4,}\*/\s*([^;]*;)\s*/\* 0x(\w{16}) \*/\s*")

#: Files Triton produces, by backend; the binary one is read as bytes.
BINARY_EXTS = ("cubin", "hsaco")
METADATA_FILE = "metadata.json"


class CorruptEntry(Exception):
    """A cache entry (or artifact folder) with files missing or unreadable."""


@dataclasses.dataclass
class Binary:
    """A compiled kernel: its files in a cache entry, and what they say.

    ``asm`` holds ``ttgir``, ``llir`` and ``ptx`` + ``cubin`` (CUDA) or ``amdgcn`` +
    ``hsaco`` (HIP); ``metadata`` is Triton's metadata json plus ``tensordesc_meta``,
    ``gluon_resources`` and ``gluon_abi`` (see gluon/backend/compile.py). ``abi`` is the kernel's
    calling convention (`gluon.abi.KernelABI`): the one the compile was asked with, else the one the
    entry recorded; None for raw TTGIR compiled without one.
    """

    name: str
    target: tuple
    key: str
    path: pathlib.Path
    asm: dict
    metadata: dict
    abi: KernelABI | None = dataclasses.field(default=None, repr=False, compare=False)
    _sass: str | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    # -- loading --------------------------------------------------------------------
    @classmethod
    def load(cls, path: pathlib.Path | str, *, target=None, key: str | None = None,
             abi: KernelABI | None = None) -> "Binary":
        """Read a cache entry (or a copy of one, e.g. a built artifact) from ``path``; ``abi`` (the
        caller's, from the lowering that produced this TTGIR) wins over the one the entry recorded."""
        path = pathlib.Path(path)
        try:
            metadata = json.loads((path / METADATA_FILE).read_text(encoding="utf-8"))
            name = metadata["name"]
            asm: dict[str, bytes | str] = {}
            for ext in metadata["gluon_files"]:
                f = path / f"{name}.{ext}"
                asm[ext] = f.read_bytes() if ext in BINARY_EXTS else f.read_text(encoding="utf-8")
        except (OSError, KeyError, ValueError) as e:
            raise CorruptEntry(f"incomplete kernel cache entry {path}: {e}") from e
        if target is None:
            t = metadata["target"]
            target = (t["backend"], t["arch"], t["warp_size"])
        if abi is None and metadata.get("gluon_abi"):
            abi = KernelABI.from_json(metadata["gluon_abi"])
        return cls(name=name, target=tuple(target), key=key or path.name, path=path, asm=asm, metadata=metadata,
                   abi=abi)

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
                res = cuda_resources(self.path / f"{self.name}.cubin", "", self.name)
            else:
                res = hip_resources(str(self.asm.get("amdgcn", "")))
            self.metadata["gluon_resources"] = res
        return res

    @property
    def advisories(self) -> list[str]:
        """ptxas's performance advisories for this binary ("Potential Performance Loss: ...", e.g. C7514:
        every wgmma serialized), from the -v log kept at compile time; [] for HIP or without a log."""
        log = self.metadata.get("gluon_ptxas_log") or ""
        return [ln.split("info    :", 1)[-1].strip() for ln in log.splitlines() if "Potential Performance Loss" in ln]

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

    # -- SASS ------------------------------------------------------------------------
    def descriptor_hazards(self) -> list[str]:
        """WGMMAs whose shared-memory descriptors are read where some path from the entry has not written them
        (`sass_flow.unwritten_descriptor_reads`: ptxas 12.8 did that to the attention kernel's second Q buffer);
        [] for a sound binary and for HIP."""
        if self.backend != "cuda":
            return []
        return unwritten_descriptor_reads(self.sass())

    def sass(self) -> str:
        """SASS text (CUDA only), disassembled with the cuobjdump in the Triton wheel
        (via ``triton.tools.disasm.get_sass``) on first use, then kept as
        ``<name>.sass`` in the entry so later processes skip the disassembler."""
        if self.backend != "cuda":
            raise ValueError(f"sass() is CUDA-only; {self.name} targets {self.target}: read asm['amdgcn']")
        if self._sass is not None:
            return self._sass
        f = self.path / f"{self.name}.full.sass"      # ".sass" files of older entries may be truncated
        try:
            self._sass = f.read_text(encoding="utf-8")
            return self._sass
        except OSError:
            pass
        import triton.tools.disasm as disasm

        disasm.FLINE_RE = _SASS_LINE
        text = disasm.get_sass(bytes(self.asm["cubin"]))
        self._sass = text
        tmp = self.path / f".{f.name}.{os.getpid()}.tmp"
        try:  # atomic add; a read-only cache just skips it
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, f)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
        return text
