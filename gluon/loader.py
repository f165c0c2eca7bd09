"""`gluon.load("gemm_sm90")`: a callable that runs the built best config for the call's shape.

The build's artifacts are put into the local kernel cache under their keys, so the first call of a
bucket traces the kernel (milliseconds) and finds its binary there: nothing is recompiled. A shape
that was not tuned uses the nearest built bucket of the same dtype (closest in log-space over the
dims), so every shape gets a measured config.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from .tuning.build import MANIFEST, BuildError


def _manifest_path(name_or_path: str | Path, root: str | Path) -> Path:
    p = Path(name_or_path)
    if p.is_file():
        return p
    if (p / MANIFEST).is_file():
        return p / MANIFEST
    cand = Path(root) / "build" / str(name_or_path) / MANIFEST
    if cand.is_file():
        return cand
    raise BuildError(f"no built kernel {name_or_path!r}: looked for {p}, {p / MANIFEST} and {cand}; "
                     "run `gluon build --best` after tuning")


def _install(art: Path, key: str) -> None:
    """Copy one artifact folder into the local cache under its key (atomic; kept if already there)."""
    from .cache import default_cache
    cache = default_cache()
    if cache.get(key) is not None:
        return
    files = {f.name: f.read_bytes() for f in art.iterdir() if f.is_file()}
    cache.put(key, files)


class LoadedKernel:
    """Dispatches a call to the built config of the nearest (shape, dtype) bucket."""

    def __init__(self, manifest: dict, base: Path):
        from .tuning.template import load_template_ref
        self.manifest = manifest
        self.name = manifest["name"]
        self.entries = manifest["entries"]
        spec_dir = Path(manifest.get("spec", ".")).resolve().parent
        # a "file.py:ATTR" template is relative to the spec's folder or one above it (the repo root)
        ref_file = manifest["template"].rpartition(":")[0]
        ref_base = next((d for d in (spec_dir, *spec_dir.parents) if (d / ref_file).exists()), spec_dir)
        self.template = load_template_ref(manifest["template"], ref_base)
        for e in self.entries:
            _install(base / e["artifacts"], e["cache_key"])
        self._choice: dict = {}

    def bucket(self, shape: tuple, dtype: str) -> dict:
        key = (shape, dtype)
        e = self._choice.get(key)
        if e is None:
            same = [e for e in self.entries if e["dtype"] == dtype]
            if not same:
                have = sorted({e["dtype"] for e in self.entries})
                raise BuildError(f"{self.name} was built for {', '.join(have)}, not {dtype}")
            e = min(same, key=lambda e: sum(abs(math.log(max(1, a)) - math.log(max(1, b)))
                                            for a, b in zip(e["shape"], shape)))
            self._choice[key] = e
        return e

    def __call__(self, *args, out=None):
        shape = tuple(int(d) for d in self.template.shape_of(*args))
        e = self.bucket(shape, self.template.dtype_of(*args))
        return self.template.call(e["config"], *args, out=out)

    def __repr__(self) -> str:
        buckets = ", ".join(f"{'x'.join(map(str, e['shape']))}/{e['dtype']}" for e in self.entries)
        return f"<gluon kernel {self.name}: {buckets}>"


def load(name_or_path: str | Path, root: str | Path = "results") -> LoadedKernel:
    """The built kernel `name` (from `<root>/build/<name>/manifest.json`) or the manifest at a path."""
    path = _manifest_path(name_or_path, root)
    manifest = json.loads(path.read_text())
    return LoadedKernel(manifest, path.parent)


