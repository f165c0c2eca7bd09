"""On-disk kernel cache: one directory per key, published atomically.

Why a cache of our own (and not Triton's ``~/.triton/cache``): a gluon entry holds
more than Triton stores -- the TMA descriptor metadata that a ``.ttgir`` compile
leaves unset, the kernel's argument list, register/spill counts read from the
binary -- so that a cache hit costs no compiler, no disassembler and no GPU.
Entries are keyed by content (see :meth:`KernelCache.key`), never by time, so a
stale entry can not be served: a different TTGIR, target, option or tool version
is a different key.

Layout::

    <root>/<64 hex key>/        one complete entry (immutable once published)
    <root>/.tmp-*/              entries being written (or left by a crashed writer)
    <root>/failed/              TTGIR files that failed to compile, kept for the user

Publication is atomic: :meth:`KernelCache.put` writes every file into a private
temporary directory inside ``root`` (same file system) and then ``os.rename``\\ s
it to ``<root>/<key>``.  A reader therefore sees either no entry or a complete
one, a writer that dies half way leaves only a ``.tmp-*`` directory, and of two
concurrent writers of the same key exactly one rename wins; the loser discards
its copy and returns the winner's directory (both hold the same content, since
the key names the content).

This module imports nothing else of the project.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import pathlib
import re
import shutil
import time
import uuid

from .fsutil import atomic_write
from typing import Iterator, Mapping

__all__ = ["KernelCache", "default_cache", "canonical_encode"]

#: Bump when the meaning of an entry changes; it is hashed into every key.
CACHE_SCHEMA = "gluon-kernel-cache/1"

_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
_TMP_PREFIX = ".tmp-"


def _default_root() -> pathlib.Path:
    """``$GLUON_CACHE_DIR``, else ``$XDG_CACHE_HOME/gluon``, else ``~/.cache/gluon``."""
    env = os.environ.get("GLUON_CACHE_DIR")
    if env:
        return pathlib.Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return pathlib.Path(xdg).expanduser() / "gluon"
    return pathlib.Path.home() / ".cache" / "gluon"


def _canon(obj):
    """Map ``obj`` onto plain JSON values, deterministically.

    Only value-like types are accepted: an arbitrary object's ``repr`` may hold a
    memory address, which would make keys differ between processes and turn every
    lookup into a miss.  Tuples and lists encode alike (JSON arrays); sets are
    sorted; dict keys must be strings or numbers and are sorted by JSON.
    """
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        # repr round-trips exactly; json would turn nan/inf into non-standard tokens.
        return {"__float__": repr(obj)}
    if isinstance(obj, enum.Enum):
        return {"__enum__": f"{type(obj).__qualname__}.{obj.name}"}
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"__bytes__": bytes(obj).hex()}
    if isinstance(obj, pathlib.PurePath):
        return {"__path__": str(obj)}
    if isinstance(obj, (list, tuple)):
        return [_canon(x) for x in obj]
    if isinstance(obj, (set, frozenset)):
        items = [_canon(x) for x in obj]
        return {"__set__": sorted(items, key=lambda x: json.dumps(x, sort_keys=True))}
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            if isinstance(k, bool) or not isinstance(k, (str, int)):
                raise TypeError(f"cache key: dict keys must be str or int, got {type(k).__name__}")
            out[str(k) if isinstance(k, str) else f"__int__{k}"] = _canon(v)
        return out
    # Dataclasses (e.g. triton's GPUTarget) encode by their fields.
    if hasattr(obj, "__dataclass_fields__") and not isinstance(obj, type):
        import dataclasses

        return {"__dataclass__": type(obj).__qualname__, "fields": _canon(dataclasses.asdict(obj))}
    raise TypeError(f"cache key: cannot encode a value of type {type(obj).__name__} canonically")


def canonical_encode(*parts) -> bytes:
    """The canonical byte encoding :meth:`KernelCache.key` hashes (exposed for tests)."""
    return json.dumps(
        [CACHE_SCHEMA, _canon(list(parts))], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


def _check_filename(name: str) -> None:
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
        or name.startswith(_TMP_PREFIX)
    ):
        raise ValueError(f"cache entry file names must be plain file names, got {name!r}")


class KernelCache:
    """A directory-per-key store of compiled kernels (see the module docstring).

    ``root`` may not exist yet; it is created on the first :meth:`put`.
    """

    def __init__(self, root: pathlib.Path | str | None = None):
        self.root = pathlib.Path(root).expanduser() if root is not None else _default_root()

    def __repr__(self) -> str:
        return f"KernelCache({str(self.root)!r})"

    # -- keys ---------------------------------------------------------------------
    def key(self, *parts) -> str:
        """sha256 (hex) over a canonical JSON encoding of ``parts`` and the schema.

        Equal values give equal keys in every process and Python version (no
        ``hash()``, no ``repr`` of arbitrary objects); values of unsupported types
        raise ``TypeError`` instead of silently producing an unstable key.
        """
        return hashlib.sha256(canonical_encode(*parts)).hexdigest()

    @staticmethod
    def _check_key(key: str) -> str:
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise ValueError(f"not a cache key (64 lowercase hex digits): {key!r}")
        return key

    def path_for(self, key: str) -> pathlib.Path:
        """Where the entry for ``key`` lives (whether or not it exists)."""
        return self.root / self._check_key(key)

    # -- read ---------------------------------------------------------------------
    def get(self, key: str) -> pathlib.Path | None:
        """The entry's directory, or ``None`` on a miss.  Never sees a partial entry."""
        path = self.path_for(key)
        return path if path.is_dir() else None

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def keys(self) -> Iterator[str]:
        """Keys of the published entries."""
        if not self.root.is_dir():
            return iter(())
        return (p.name for p in self.root.iterdir() if _KEY_RE.match(p.name) and p.is_dir())

    # -- write --------------------------------------------------------------------
    def _tmpdir(self, tag: str) -> pathlib.Path:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{_TMP_PREFIX}{tag}-{os.getpid()}-{uuid.uuid4().hex}"
        path.mkdir()
        return path

    def put(self, key: str, files: Mapping[str, bytes | str]) -> pathlib.Path:
        """Publish ``files`` (name -> content; ``str`` is written as UTF-8) under ``key``.

        Atomic: everything is written into a temporary directory in ``root`` and
        then renamed into place.  On any exception while writing, the temporary
        directory is removed and no entry appears.  If another writer published
        the key first (our rename fails because the target is a non-empty
        directory), our copy is discarded and the winner's directory returned.
        """
        final = self.path_for(key)
        for name in files:
            _check_filename(name)
        if final.is_dir():  # someone already published it: nothing to do
            return final
        tmp = self._tmpdir(key[:16])
        try:
            for name, data in files.items():
                mode = "wb" if isinstance(data, (bytes, bytearray, memoryview)) else "w"
                kwargs = {} if mode == "wb" else {"encoding": "utf-8", "newline": ""}
                with open(tmp / name, mode, **kwargs) as f:
                    f.write(data)
            try:
                os.rename(tmp, final)
            except OSError:
                # Lost the race (ENOTEMPTY/EEXIST): the winner's entry is complete.
                if final.is_dir():
                    shutil.rmtree(tmp, ignore_errors=True)
                    return final
                raise
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final

    def add_file(self, key: str, name: str, data: bytes | str) -> pathlib.Path:
        """Add a derived file (e.g. disassembly) to an existing entry, atomically.

        The file is written beside the entry and ``os.replace``\\ d in, so readers
        see the whole file or none; concurrent adders write the same content.
        """
        _check_filename(name)
        entry = self.get(key)
        if entry is None:
            raise KeyError(key)
        atomic_write(entry / name, data, tmp_name=f"{_TMP_PREFIX}{name}-{os.getpid()}-{uuid.uuid4().hex}",
                     durable=False)
        return entry / name

    def evict(self, key: str) -> bool:
        """Remove an entry (rename away first, so readers never see it half deleted)."""
        entry = self.get(key)
        if entry is None:
            return False
        trash = self.root / f"{_TMP_PREFIX}evict-{os.getpid()}-{uuid.uuid4().hex}"
        try:
            os.rename(entry, trash)
        except OSError:
            return False
        shutil.rmtree(trash, ignore_errors=True)
        return True

    def prune_temp(self, older_than_s: float = 3600.0) -> int:
        """Delete ``.tmp-*`` directories older than ``older_than_s`` (left by crashed writers)."""
        if not self.root.is_dir():
            return 0
        now, n = time.time(), 0
        for p in self.root.iterdir():
            if p.name.startswith(_TMP_PREFIX):
                try:
                    if now - p.stat().st_mtime >= older_than_s:
                        shutil.rmtree(p, ignore_errors=True)
                        n += 1
                except OSError:
                    pass
        return n

    @property
    def failed_dir(self) -> pathlib.Path:
        """Where inputs that failed to compile are kept for the user to inspect."""
        return self.root / "failed"


def default_cache() -> KernelCache:
    """The cache at the default root, resolved from the environment on every call
    (so a changed ``GLUON_CACHE_DIR`` takes effect without a restart)."""
    return KernelCache()
