"""Atomic file writes: the one way this project writes a file a crash must not leave half written
(cache artifacts, results rows, build manifests)."""
from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import IO, Callable


def fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable (best effort: not every filesystem allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | Path, data: bytes | str | Callable[[IO[bytes]], None], *, tmp_name: str | None = None,
                 durable: bool = True) -> Path:
    """Write `data` (bytes, text, or a function writing to a binary file) to a temporary file beside
    `path`, then rename it over `path`: readers see the old file or the whole new one, never a part.
    A failure removes the temporary file. `durable` also fsyncs the file and the directory.
    `tmp_name` names the temporary file (callers that clean up leftovers by pattern choose it)."""
    path = Path(path)
    tmp = path.parent / (tmp_name or f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(path.parent)
    return path
