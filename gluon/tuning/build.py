"""`gluon build --best`: the best measured config per (spec, arch, shape, dtype) -> binaries + manifest.

For each spec with results, the best config of every (arch, shape, dtype) bucket (`results.summary`:
status ok, the median of its timings there, re-timed configs first) is compiled again through the
template (incremental: the disk cache makes an unchanged config free) and its artifacts (TTGIR, LLIR, PTX/AMDGCN,
cubin/hsaco, metadata) are copied into `<out>/<spec>/<cache key>/`. `<out>/<spec>/manifest.json`
lists the buckets with their configs, measurements and artifact folders; `gluon.load` reads it.

Rows from a dry run (no GPU: ranked by a model, never timed) are refused unless `allow_dry_run`.
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from ..fsutil import atomic_write

MANIFEST = "manifest.json"


class BuildError(RuntimeError):
    pass


def find_spec_files(specs_dir: str | Path) -> dict:
    """spec name -> Spec for every spec file under `specs_dir` (files that fail to load are skipped)."""
    from .spec import SpecError, load_spec
    out = {}
    for p in sorted(Path(specs_dir).glob("**/*")):
        if p.suffix not in (".toml", ".yaml", ".yml"):
            continue
        try:
            spec = load_spec(p)
        except SpecError:
            continue
        out.setdefault(spec.name, spec)
    return out


def _copy_artifacts(src: Path, dst: Path) -> None:
    """Copy a cache entry; a complete copy already there (same cache key) is kept (incremental)."""
    if (dst / "metadata.json").exists():
        return
    tmp = Path(tempfile.mkdtemp(dir=dst.parent, prefix=".build-"))
    try:
        for f in src.iterdir():
            if f.is_file():
                shutil.copy2(f, tmp / f.name)
        os.replace(tmp, dst)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (dst / "metadata.json").exists():
            raise


def build_best(results_root: str | Path = "results", specs_dir: str | Path = "specs",
               out: str | Path | None = None, names: list[str] | None = None, allow_dry_run: bool = False,
               log: Callable[[str], None] = print) -> list[Path]:
    """Build every spec (or `names`) with results; returns the manifest paths written."""
    from .results import ResultsStore, finite_or_none, summary
    from .spec import template_of
    df = ResultsStore(results_root).read()
    if df.empty:
        raise BuildError(f"no tuning results under {results_root}/: run `gluon tune SPEC` first")
    out = Path(out) if out is not None else Path(results_root) / "build"
    specs = find_spec_files(specs_dir)
    wanted = names or sorted(df["spec_name"].unique())
    manifests = []
    for name in wanted:
        rows = df[df["spec_name"] == name]
        if rows.empty:
            raise BuildError(f"no results for spec {name!r} under {results_root}/ (have: "
                             f"{', '.join(sorted(df['spec_name'].unique()))})")
        best = summary(rows)
        if best is None or best.empty:
            raise BuildError(f"spec {name!r} has no successful trial to build")
        dry = best["dry_run"].fillna(False).astype(bool)
        if dry.any() and not allow_dry_run:
            which = ", ".join(f"{r['shape']} {r['dtype']}" for _, r in best[dry].iterrows())
            raise BuildError(f"spec {name!r} has only dry-run results (ranked by a model, never timed) for {which}: "
                             "tune it on a GPU, or pass --allow-dry-run to build the model's choice")
        spec = specs.get(name)
        if spec is None:
            raise BuildError(f"no spec named {name!r} under {specs_dir}/ (the template to compile comes from it)")
        template = template_of(spec)
        dest = out / name
        dest.mkdir(parents=True, exist_ok=True)
        entries = []
        for _, r in best.iterrows():
            shape = tuple(int(d) for d in r["shape"].split("x"))
            config = json.loads(r["config_json"])
            ck = template.compile(config, shape, r["dtype"], r["arch"])
            art = dest / ck.binary.key[:32]
            _copy_artifacts(Path(ck.binary.path), art)
            entries.append({"shape": list(shape), "dtype": r["dtype"], "arch": r["arch"], "config": config,
                            "config_id": r["config_id"],
                            **{k: finite_or_none(r.get(k)) for k in ("median_ms", "baseline_ms", "ratio")},
                            "dry_run": bool(r.get("dry_run", False)), "cache_key": ck.binary.key,
                            "artifacts": art.name})
            ratio = finite_or_none(r.get("ratio"))
            log(f"{name} {r['arch']} {r['shape']} {r['dtype']}: config {r['config_id']} "
                f"({'dry run, not timed' if ratio is None else f'ratio {ratio:.3f}'}) -> {art}")
        manifest = {"name": name, "spec": str(spec.source), "spec_hash": spec.content_hash,
                    "template": spec.kernel.ref, "dims": list(template.dims), "dtypes": list(spec.dtypes),
                    "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "entries": entries}
        if getattr(spec, "declaration", None) is not None:   # gluon.load rebuilds the template from it
            manifest["declaration"] = spec.declaration.model_dump()
        path = dest / MANIFEST
        atomic_write(path, json.dumps(manifest, indent=1, default=str, allow_nan=False))
        manifests.append(path)
    return manifests
