"""The tuner's results: one parquet file per written row (or per batch of rows written together), under

    <root>/<spec name>/rows/<UTC timestamp>-<uuid>.parquet

Each file is written to a hidden temporary name in the same folder, flushed and fsynced, then renamed
over its final name with os.replace (atomic on POSIX), and the folder is fsynced: a crash or kill -9
leaves either the whole row or no row, never a half-written one, and never touches rows already
written. `read()` concatenates every `*.parquet` file; a file it cannot read (truncated, corrupt) is
skipped and reported (`ResultsStore.problems`, `df.attrs["problems"]`, a warning), and leftover
temporaries of killed writers are reported too. `compact(spec)` merges a spec's files into one, atomically;
every row carries a `row_id`, so a crash between writing the merged file and deleting its sources
leaves duplicates that `read()` drops. Of rows sharing an id `read()` keeps the last written (files are
named in time order): a dry run's rows have ids made of what they are about, so its re-run replaces them.

Columns (COLUMNS, in this order; then one column per config parameter, named as in the spec):

    row_id, spec_name, spec_hash (the spec file's content hash), template, template_hash (sha256 of
    the template module's source), config_id, config_json, shape ("8192x8192x8192"), shape_list
    ([8192, 8192, 8192]), dtype, arch, device, sm_count, driver, cuda, triton, torch, gluon (versions),
    status (ok | pruned | compile_error | runtime_error | wrong_result | timeout), reason, compile_s,
    registers, spills, shared_bytes, median_ms, p10_ms, p90_ms, tflops, gbps, roofline_fraction,
    model_ms (dry run: the ranking model's time), baseline_ms, ratio (baseline_ms / median_ms),
    max_err, dry_run, retimed, trial, study, timestamp (UTC)
"""
from __future__ import annotations

import datetime
import fcntl
import json
import math
import os
import uuid
import warnings
from collections.abc import Iterable
from pathlib import Path

from ..fsutil import atomic_write, fsync_dir
from .template import shape_str

STATUSES = ("ok", "pruned", "compile_error", "runtime_error", "wrong_result", "timeout")

_S, _F, _I, _B = "string", "float64", "int64", "bool"
COLUMNS: list[tuple[str, str]] = [
    ("row_id", _S), ("spec_name", _S), ("spec_hash", _S), ("template", _S), ("template_hash", _S),
    ("config_id", _S), ("config_json", _S), ("shape", _S), ("shape_list", "list<int64>"), ("dtype", _S),
    ("arch", _S), ("device", _S), ("sm_count", _I), ("driver", _S), ("cuda", _S), ("triton", _S),
    ("torch", _S), ("gluon", _S), ("status", _S), ("reason", _S), ("compile_s", _F), ("registers", _I),
    ("spills", _I), ("shared_bytes", _I), ("median_ms", _F), ("p10_ms", _F), ("p90_ms", _F), ("tflops", _F),
    ("gbps", _F), ("roofline_fraction", _F), ("model_ms", _F), ("baseline_ms", _F), ("ratio", _F),
    ("max_err", _F), ("dry_run", _B), ("retimed", _B), ("trial", _I), ("study", _S), ("timestamp", "timestamp"),
]
COLUMN_NAMES = [c for c, _ in COLUMNS]
_FIXED = set(COLUMN_NAMES)


def finite_or_none(v) -> float | None:
    """A row's measurement as a finite float, or None (None, NaN, pandas NA, strings that are not numbers):
    what reports and manifests show, where a dry run's NaN must not leak into JSON."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def param_column(name: str) -> str:
    """A config parameter's column: its name, or param_<name> where that is a fixed column."""
    return f"param_{name}" if name in _FIXED else name


def _pa_type(kind: str):
    import pyarrow as pa
    return {"string": pa.string(), "float64": pa.float64(), "int64": pa.int64(), "bool": pa.bool_(),
            "list<int64>": pa.list_(pa.int64()), "timestamp": pa.timestamp("us", tz="UTC")}[kind]


def _clean(kind: str, v):
    if v is None:
        return None
    if kind == "float64":
        v = float(v)
        return None if math.isnan(v) else v
    if kind == "int64":
        return int(v)
    if kind == "bool":
        return bool(v)
    if kind == "string":
        return str(v)
    if kind == "list<int64>":
        return [int(x) for x in v]
    if kind == "timestamp":
        if isinstance(v, str):
            v = datetime.datetime.fromisoformat(v)
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        return v
    return v


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def make_row(**fields) -> dict:
    """A row dict with every fixed column (None where not given), `config` expanded into parameter
    columns and config_json, `shape` given as a tuple expanded into shape + shape_list."""
    row = {c: None for c in COLUMN_NAMES}
    config = fields.pop("config", None)
    shape = fields.pop("shape", None)
    row.update(fields)
    if config is not None:
        row["config_json"] = json.dumps(config, sort_keys=True, default=str)
        for k, v in config.items():
            row[param_column(k)] = v
    if shape is not None and not isinstance(shape, str):
        row["shape"] = shape_str(shape)
        row["shape_list"] = [int(d) for d in shape]
    elif isinstance(shape, str):
        row["shape"] = shape
        row["shape_list"] = [int(d) for d in shape.split("x")] if shape else None
    row["row_id"] = row.get("row_id") or uuid.uuid4().hex
    row["timestamp"] = row.get("timestamp") or _now()
    row["dry_run"] = bool(row.get("dry_run") or False)
    row["retimed"] = bool(row.get("retimed") or False)
    return row


def _table(rows: list[dict]):
    import pyarrow as pa
    kinds = dict(COLUMNS)
    names = list(COLUMN_NAMES)
    for r in rows:
        for k in r:
            if k not in kinds and k not in names:
                names.append(k)
    arrays, fields = [], []
    for n in names:
        vals = [r.get(n) for r in rows]
        if n in kinds:
            t = _pa_type(kinds[n])
            arrays.append(pa.array([_clean(kinds[n], v) for v in vals], type=t))
            fields.append(pa.field(n, t))
        else:                                           # a parameter column: let pyarrow infer
            try:
                a = pa.array(vals)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                a = pa.array([None if v is None else str(v) for v in vals], type=pa.string())
            arrays.append(a)
            fields.append(pa.field(n, a.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


class ResultsStore:
    """Rows of tuning results under `root` (see the module docstring)."""

    def __init__(self, root: str | os.PathLike = "results"):
        self.root = Path(root)
        self.problems: list[tuple[str, str]] = []

    def rows_dir(self, spec_name: str) -> Path:
        return self.root / spec_name / "rows"

    # -- writing --------------------------------------------------------------------------------------
    def write(self, row: dict) -> Path:
        """Write one row (a dict from make_row, or fields for it) atomically; returns its file."""
        return self.write_many([row])

    def write_many(self, rows: Iterable[dict]) -> Path | None:
        """Write rows of one spec together, as one file, atomically."""
        import pyarrow.parquet as pq
        rows = [r if "row_id" in r and "timestamp" in r else make_row(**r) for r in rows]
        if not rows:
            return None
        spec = rows[0].get("spec_name") or "unnamed"
        if any((r.get("spec_name") or "unnamed") != spec for r in rows):
            raise ValueError("write_many: rows of one spec at a time")
        d = self.rows_dir(spec)
        d.mkdir(parents=True, exist_ok=True)
        stamp = _now().strftime("%Y%m%dT%H%M%S%fZ")
        final = d / f"{stamp}-{uuid.uuid4().hex}.parquet"
        self._atomic_write(_table(rows), final, pq)
        return final

    @staticmethod
    def _atomic_write(table, final: Path, pq) -> None:
        atomic_write(final, lambda f: pq.write_table(table, f), tmp_name=f".{final.name}.{os.getpid()}.tmp")

    # -- reading --------------------------------------------------------------------------------------
    def spec_names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "rows").is_dir())

    def files(self, spec_name: str) -> list[Path]:
        d = self.rows_dir(spec_name)
        return sorted(d.glob("*.parquet")) if d.is_dir() else []

    def _read_tables(self, spec_name: str, problems: list) -> list:
        import pyarrow.parquet as pq
        d = self.rows_dir(spec_name)
        if not d.is_dir():
            return []
        for leftover in sorted(d.glob(".*.tmp")):
            problems.append((str(leftover), "temporary file of an interrupted write (ignored)"))
        tables = []
        for f in self.files(spec_name):
            try:
                tables.append(pq.read_table(f))
            except Exception as e:      # truncated, corrupt, or not parquet at all
                problems.append((str(f), f"unreadable, skipped: {type(e).__name__}: {str(e)[:200]}"))
        return tables

    def read(self, spec_name: str | None = None):
        """All rows (of one spec, or of every spec) as a pandas DataFrame with at least COLUMNS.
        Unreadable files are skipped and listed in `self.problems` and `df.attrs["problems"]`."""
        import pandas as pd
        problems: list[tuple[str, str]] = []
        names = [spec_name] if spec_name is not None else self.spec_names()
        frames = []
        for name in names:
            tables = self._read_tables(name, problems)
            if not tables:
                continue
            frames.append(_concat(tables))
        frames = [f for f in frames if len(f)]
        if frames:
            df = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True, sort=False)
        else:
            df = _concat([_table([])])
        df = df.drop_duplicates(subset="row_id", keep="last").reset_index(drop=True)
        for c in COLUMN_NAMES:
            if c not in df.columns:
                df[c] = None
        self.problems = problems
        df.attrs["problems"] = list(problems)
        if problems:
            warnings.warn("results: " + "; ".join(f"{p}: {why}" for p, why in problems), stacklevel=2)
        return df

    # -- compaction -------------------------------------------------------------------------------------
    def compact(self, spec_name: str) -> Path | None:
        """Merge a spec's row files into one file (atomically), then delete the merged files. Unreadable
        files are left where they are (and reported); concurrent compactions are serialized by a lock."""
        import pyarrow.parquet as pq
        d = self.rows_dir(spec_name)
        if not d.is_dir():
            return None
        with open(self.root / spec_name / ".compact.lock", "a") as lockf:
            fcntl.flock(lockf, fcntl.LOCK_EX)
            problems: list = []
            sources, tables = [], []
            for f in self.files(spec_name):
                try:
                    tables.append(pq.read_table(f))
                    sources.append(f)
                except Exception as e:
                    problems.append((str(f), f"unreadable, left in place: {type(e).__name__}: {str(e)[:200]}"))
            self.problems = problems
            if len(sources) <= 1:
                return sources[0] if sources else None
            import pyarrow as pa
            df = _concat(tables).drop_duplicates(subset="row_id", keep="last")
            table = pa.Table.from_pandas(df, preserve_index=False)
            stamp = _now().strftime("%Y%m%dT%H%M%S%fZ")
            final = d / f"{stamp}-compacted-{uuid.uuid4().hex}.parquet"
            self._atomic_write(table, final, pq)
            for f in sources:
                try:
                    f.unlink()
                except OSError:
                    pass
            fsync_dir(d)
            return final


def _concat(tables: list):
    """pyarrow tables with possibly different parameter columns/types -> one DataFrame."""
    import pandas as pd
    import pyarrow as pa
    ints = {pa.int64(): pd.Int64Dtype()}.get        # integers with missing values stay integers
    try:
        return pa.concat_tables(tables, promote_options="permissive").to_pandas(types_mapper=ints)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        frames = [t.to_pandas(types_mapper=ints) for t in tables]
        frames = [f.astype(object) for f in frames]
        return pd.concat(frames, ignore_index=True, sort=False)


def summary(df, by=("spec_name", "arch", "shape", "dtype")):
    """The best row per (spec, arch, shape, dtype), chosen so that one lucky timing does not win.

    Among measured ok rows, each config is scored by the median of its rows in the group (ratio, else
    1/median_ms where no baseline was timed). Where some configs of the group were re-timed (the tuner
    re-measures its top few and the case winners at the end, with longer rounds), only those compete,
    each scored by its re-timings alone: the first timing only decided who was re-timed (its short
    rounds read a kernel at whatever clock the one before left, so a lucky 1.047 there must not outvote
    a steady 1.029 in the re-timing). Otherwise the best median. The row returned is the config's latest
    re-timing, else its best row. Groups with only dry-run rows give the least model_ms. One row per
    group."""
    import pandas as pd
    if df is None or len(df) == 0:
        return df
    ok = df[df["status"] == "ok"].copy()
    if len(ok) == 0:
        return ok
    by = list(by)
    ok["_measured"] = ~ok["dry_run"].fillna(False).astype(bool)
    ok["_retimed"] = ok["retimed"].fillna(False).astype(bool)
    ratio = pd.to_numeric(ok["ratio"], errors="coerce")
    med = pd.to_numeric(ok["median_ms"], errors="coerce")
    model = pd.to_numeric(ok["model_ms"], errors="coerce")
    # one score, larger is better: ratio, else 1/median; dry-run rows 1/model
    ok["_score"] = ratio.where(ratio.notna(), 1.0 / med.where(med > 0))
    ok.loc[~ok["_measured"], "_score"] = 1.0 / model[~ok["_measured"]].where(model > 0)
    keys = by + ["config_id", "_measured"]
    grouped = ok.groupby(keys, sort=False, dropna=False)
    ok["_cfg_retimed"] = grouped["_retimed"].transform("any")
    # a re-timed config's score: its re-timings' median; any other config's: all its rows' median
    counted = ok["_score"].where(ok["_retimed"] | ~ok["_cfg_retimed"])
    ok["_cfg_score"] = counted.groupby([ok[k] for k in keys], sort=False, dropna=False).transform("median")
    ok["_group_retimed"] = ok.groupby(by, sort=False, dropna=False)["_cfg_retimed"].transform("any")
    # rank: measured first; in a group with re-timings, re-timed configs first; then the config's median;
    # within the config, its re-timed rows (latest first), then its best row
    ok["_eligible"] = ~ok["_group_retimed"] | ok["_cfg_retimed"]
    ts = pd.to_datetime(ok["timestamp"], errors="coerce", utc=True)
    ok["_ts"] = ts.fillna(pd.Timestamp(0, tz="UTC"))
    ok = ok.sort_values(["_measured", "_eligible", "_cfg_score", "config_id", "_retimed", "_ts", "_score"],
                        ascending=[False, False, False, True, False, False, False], na_position="last",
                        kind="stable")
    best = ok.groupby(by, sort=True, dropna=False).head(1)
    return best.drop(columns=["_measured", "_retimed", "_score", "_cfg_score", "_cfg_retimed", "_group_retimed",
                              "_eligible", "_ts"]).reset_index(drop=True)
