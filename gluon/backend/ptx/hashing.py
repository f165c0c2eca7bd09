"""A PTX pass's source hash: part of the cache key of the kernels it rewrites, so editing a pass recompiles them."""
from __future__ import annotations

import functools
import hashlib
import pathlib


@functools.lru_cache(maxsize=None)
def file_hash(path: str) -> str:
    """sha256 (16 hex digits) of a pass module's source file."""
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()[:16]
