"""How a kernel asks for an optional PTX pass, and what of the pass goes into the compile cache key.

A pass that a kernel opts into (`ptx_prefetch`, `ptx_prologue`) is cued by one comment line at the top
of the kernel's TTGIR: the lowering writes it, the compile step looks for it (the text stays plain
TTGIR). Every PTX pass's source hash is part of the cache key of the kernels it rewrites, so changing a
pass recompiles them.
"""
from __future__ import annotations

import functools
import hashlib
import pathlib
from dataclasses import dataclass


@functools.lru_cache(maxsize=None)
def file_hash(path: str) -> str:
    """sha256 (16 hex digits) of a pass module's source file."""
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class Cue:
    """The header line `line` that asks for the pass defined in the module file `source`."""
    line: str
    source: str

    def header(self) -> str:
        return self.line

    def wanted(self, ttgir: str) -> bool:
        """Whether the TTGIR's first lines hold the header."""
        return any(ln.strip() == self.line for ln in ttgir.splitlines()[:8])

    def source_hash(self) -> str:
        """The pass's source, for the compile cache key of the kernels it rewrites."""
        return file_hash(self.source)
