"""`gluon.load("gemm_sm90")`, `gluon.load("attention_sm90")`: a callable that runs the built best config
for the call's shape.

The build's artifacts are put into the local kernel cache under their keys, so the first call of a
bucket traces the kernel (milliseconds) and finds its binary there: nothing is recompiled. The bucket of a
call is the spec template's to say (`shape_of` / `dtype_of` of the call's arguments, `bucket_distance` to
each built bucket of that dtype): by default the nearest in log space over the dims, so every shape gets a
measured config; a template can rule buckets out (attention: another head dim or causal flag), and where
none is left its `fallback_config` runs (the GEMM and attention: the kernel's own pick for the shape, with a
one-line warning) or, without one, the call is refused (BuildError).
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

from .tuning.build import MANIFEST, BuildError
from .tuning.declared_replay import Replays, tensor_type, call_key


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


BOUND_MAX = 256
_PLAIN = (bool, int, float, str, type(None))


def _plain_key(args: tuple, kwargs: dict) -> tuple | None:
    """What a call to a template's kernel picks its bucket by: each tensor's shape, contiguity, dtype and device,
    the other arguments by type and value; None where one is neither a tensor nor a plain value."""
    key = call_key(args) if args else ()
    if key is None or not kwargs:
        return key
    T = tensor_type()
    rest = []
    for name, v in kwargs.items():
        if type(v) is T:
            rest.append((name, call_key((v,))))           # a tensor keyed as call_key keys one
        elif type(v) in _PLAIN:
            rest.append((name, type(v), v))
        else:
            return None
    return key, tuple(rest)


def _shape_text(shape) -> str:
    return "x".join(str(int(d)) for d in shape)


class LoadedKernel:
    """Dispatches a call to the built config of the nearest (shape, dtype) bucket."""

    def __init__(self, manifest: dict, base: Path):
        from .tuning.template import load_template_ref
        self.manifest = manifest
        self.name = manifest["name"]
        self.entries = manifest["entries"]
        spec_dir = Path(manifest.get("spec", ".")).resolve().parent
        if "declaration" in manifest:            # a declared kernel: its template is rebuilt from the spec's tables
            from .tuning.declared import DeclaredTemplate
            self.template = DeclaredTemplate.from_manifest(manifest)
        else:
            # a "file.py:ATTR" template is relative to the spec's folder or one above it (the repo root)
            ref_file = manifest["template"].rpartition(":")[0]
            ref_base = next((d for d in (spec_dir, *spec_dir.parents) if (d / ref_file).exists()), spec_dir)
            self.template = load_template_ref(manifest["template"], ref_base)
        for e in self.entries:
            _install(base / e["artifacts"], e["cache_key"])
        self._choice: dict = {}
        self._replays = Replays()                # by call_key: the replays of calls seen before
        self._last = None                        # the entry of the last key replayed (Replay.entry)
        self._bound: dict = {}                   # by `_plain_key`: the template's call bound to the bucket's config

    @classmethod
    def of_entries(cls, name: str, template, entries: list[dict]) -> "LoadedKernel":
        """A loaded kernel over manifest `entries` ({"shape", "dtype", "config"} each) of `template`, without a
        build folder: their binaries are compiled on first use (benchmarks and tests of the call path)."""
        k = cls.__new__(cls)
        k.manifest, k.name, k.template, k.entries = {"name": name, "entries": entries}, name, template, entries
        k._choice, k._replays, k._last, k._bound = {}, Replays(), None, {}
        return k

    def bucket(self, shape: tuple, dtype: str) -> dict:
        """The manifest entry a call of `shape` and `dtype` runs: the nearest built bucket of that dtype that
        the template lets serve it, else a fallback entry ({"config": ..., "fallback": True}) when the
        template has a fallback config; BuildError otherwise."""
        key = (shape, dtype)
        e = self._choice.get(key)
        if e is None:
            from .tuning.template import log_distance
            template = getattr(self, "template", None)
            distance = getattr(template, "bucket_distance", log_distance)
            of_dtype = [e for e in self.entries if e["dtype"] == dtype]
            serves = getattr(template, "serves", None)     # a config that cannot run this shape is no choice
            same = [e for e in of_dtype if serves is None or serves(e["config"], shape, dtype)]
            scored = [(d, i) for i, e in enumerate(same)
                      if (d := distance(tuple(e["shape"]), shape)) is not None]
            if scored:
                e = same[min(scored)[1]]
            else:
                fallback = getattr(template, "fallback_config", None)
                config = fallback(shape, dtype) if fallback is not None else None
                if config is None:
                    if not of_dtype:
                        have = sorted({e["dtype"] for e in self.entries})
                        raise BuildError(f"{self.name} was built for {', '.join(have)}, not {dtype}")
                    raise BuildError(f"no built bucket of {self.name} serves shape {_shape_text(shape)} {dtype} "
                                     f"(built: {', '.join(_shape_text(e['shape']) for e in of_dtype)})")
                warnings.warn(f"gluon.load({self.name!r}): no built bucket serves shape {_shape_text(shape)} {dtype}; "
                              "running the kernel's own pick for it (no tuned config)", stacklevel=3)
                e = {"shape": list(shape), "dtype": dtype, "config": config, "fallback": True}
            self._choice[key] = e
        return e

    def __call__(self, *args, **kwargs):
        last = self._last           # a declared kernel's last key replayed: its entry checks the key itself
        if last is not None and not kwargs:
            out = last(args)
            if out is not None:
                return out
        prepare = getattr(self.template, "prepare", None)     # one pass over the arguments (declared kernels)
        if prepare is not None:
            # a call of positional tensors seen before: the template's replay of its launch, from the bucket
            # the first one chose (gluon/tuning/declared_replay.py)
            key = call_key(args) if not kwargs else None
            if key is not None:
                replay = self._replays.get(key)
                if replay is not None:
                    out = replay(args)
                    if out is not None:
                        self._last = replay.entry
                        return out
            prepared = prepare(*args, **kwargs)
            config = self.bucket(prepared[0], prepared[1])["config"]
            if key is None:
                return self.template.call_prepared(config, prepared)
            out, replay = self.template.call_replayable(config, prepared)
            self._replays.keep(key, replay)
            return out
        # a template's kernel: a call like one seen before (tensors of the same shapes, dtypes and devices, the
        # same other arguments; or what the template's `bucket_key` says its bucket depends on) runs what that
        # one's bucket bound, past shape_of, dtype_of and the bucket
        bucket_key = getattr(self.template, "bucket_key", None)
        key = bucket_key(args, kwargs) if bucket_key is not None else None
        if key is None:
            key = _plain_key(args, kwargs)
        fn = self._bound.get(key) if key is not None else None
        if fn is None:
            shape = tuple(int(d) for d in self.template.shape_of(*args, **kwargs))
            fn = self.template.bind(self.bucket(shape, self.template.dtype_of(*args, **kwargs))["config"])
            if key is not None:
                if len(self._bound) >= BOUND_MAX:
                    self._bound.pop(next(iter(self._bound)))
                self._bound[key] = fn
        return fn(*args, **kwargs)

    def __repr__(self) -> str:
        buckets = ", ".join(f"{_shape_text(e['shape'])}/{e['dtype']}" for e in self.entries)
        return f"<gluon kernel {self.name}: {buckets}>"


def load(name_or_path: str | Path, root: str | Path = "results") -> LoadedKernel:
    """The built kernel `name` (from `<root>/build/<name>/manifest.json`) or the manifest at a path."""
    path = _manifest_path(name_or_path, root)
    manifest = json.loads(path.read_text())
    return LoadedKernel(manifest, path.parent)
