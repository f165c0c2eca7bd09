"""`gluon report`: plots and a markdown summary of the tuner's results store.

    report = write_report(results_root="results", out=None, spec_name=None, specs_dir="specs",
                          tuning_root="tuning", storage=None)

Writes into `out` (default `<results_root>/report/`), each file atomically (`gluon.fsutil.atomic_write`:
a temporary file in the same folder, then os.replace):

* `<spec>-best-so-far.png`: per study, every measured trial's objective and the best so far against
  the trial number. The objective is the tuner's: the geometric mean over the trial's (shape, dtype)
  rows of `ratio` (baseline_ms / median_ms, higher is better), or of 1 / median_ms where a row has no
  ratio (no baseline timed). A trial with a failed row (compile_error, wrong_result, ...) has no value.
* `<spec>-ratio.png`: the best config's ratio to the baseline per (shape, dtype), with the 1.0 line
  (median ms where no baseline was timed; groups with only dry-run rows are labelled as such).
* `<spec>-importance.png`: parameter importance. With the study's storage at hand (the journal
  `<tuning_root>/<study>.log`, or `storage=` an RDB URL) it is `optuna.importance.get_param_importances`
  (PED-ANOVA) over the study's evaluated trials (duplicates left out); else a simple spread from the
  rows: for each parameter, the best objective reached with each of its values, max - min. The
  markdown says which.
* `report.md`: a table of the best config per (spec, arch, shape, dtype) (`results.summary`) with a
  bottleneck verdict: compute- or memory-bound, by comparing the arithmetic intensity (flops / bytes,
  from the spec's template when it loads, else from the row's tflops / gbps columns) with the machine
  balance of the GPU that measured the row (`datasheets.datasheet`: the H200 SXM's 989e12 flop/s / 4.8e12
  B/s = 206 flop/byte, the H100 SXM's 989e12 / 3.35e12, fp8 inputs at twice the flop/s; unknown GPUs and dry
  runs the H200's), and the fraction of that datasheet peak reached. Dry-run rows are marked "dry run: model,
  not measured" (their times and fractions come from the ranking model).
"""
from __future__ import annotations

import datetime
import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .results import finite_or_none as _num
from .datasheets import BY_NAME, H200_SXM, datasheet
DRY = "dry run: model, not measured"
MAX_STUDY_PANELS = 6


class ReportError(RuntimeError):
    pass


@dataclass
class Report:
    out: str
    markdown: str
    files: list = field(default_factory=list)        # every file written
    best: list = field(default_factory=list)         # one dict per (spec, arch, shape, dtype)
    importance: dict = field(default_factory=dict)   # spec -> {"method": ..., "studies": {study: {param: value}}}


# ----------------------------------------------------------------------------------------- helpers


def _geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _bool(v) -> bool:
    try:
        return bool(v) and not (isinstance(v, float) and math.isnan(v))
    except (TypeError, ValueError):       # pandas NA
        return False


def _save_figure(fig, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from ..fsutil import atomic_write
    FigureCanvasAgg(fig)
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=110, bbox_inches="tight"))


def _figure(w=7.0, h=4.0):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ReportError("gluon report needs matplotlib (pip install matplotlib)") from None
    return Figure(figsize=(w, h))


def _slug(s: str) -> str:
    import re
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(s)).strip("-") or "x"


def _config_of(row) -> dict:
    try:
        return json.loads(row["config_json"]) if row.get("config_json") else {}
    except (TypeError, ValueError):
        return {}


def _varying_params(rows) -> list[str]:
    """Parameters that take more than one value among these rows (the tuned ones), in config order."""
    seen: dict[str, set] = {}
    for cj in rows["config_json"].dropna().unique():
        try:
            cfg = json.loads(cj)
        except ValueError:
            continue
        for k, v in cfg.items():
            seen.setdefault(k, set()).add(json.dumps(v, sort_keys=True, default=str))
    return [k for k, vals in seen.items() if len(vals) > 1]


def _short_config(cfg: dict, names: list[str], limit: int = 90) -> str:
    keys = [k for k in names if k in cfg] or list(cfg)
    s = " ".join(f"{k}={cfg[k]}" for k in keys)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _md(v) -> str:
    return str(v).replace("|", "\\|")


# ----------------------------------------------------------------------------------------- templates


def _templates(df, specs_dir):
    """spec name -> template object or None (spec file under specs_dir, else the row's template ref)."""
    from .template import load_template_ref
    specs = {}
    try:
        from .build import find_spec_files
        if specs_dir and Path(specs_dir).is_dir():
            specs = find_spec_files(specs_dir)
    except Exception:                                   # noqa: BLE001 - no spec loader: rows only
        specs = {}
    out = {}
    for name in sorted(df["spec_name"].dropna().unique()):
        t = None
        if name in specs:
            try:
                from .spec import template_of
                t = template_of(specs[name])
            except Exception:                           # noqa: BLE001 - a template that does not import
                t = None
        if t is None:
            refs = [r for r in df[df["spec_name"] == name]["template"].dropna().unique() if not str(r).startswith("autotune:")]
            for ref in refs[:1]:
                for base in ([Path(specs_dir).resolve().parent] if specs_dir else []) + [Path.cwd()]:
                    try:
                        t = load_template_ref(str(ref), base)
                        if not hasattr(t, "roofline_s"):   # a declared kernel's function, no template
                            t = None
                        break
                    except Exception:                   # noqa: BLE001
                        t = None
        out[name] = t
    return out


# ----------------------------------------------------------------------------------------- verdicts


def verdict(row, template) -> dict:
    """Bottleneck of one best row: arithmetic intensity vs the machine balance of the GPU that measured it (the
    H200 SXM's for dry runs and GPUs `datasheets` does not know), and the fraction of that datasheet peak
    reached (from the model's time for dry-run rows)."""
    dry = _bool(row.get("dry_run"))
    ms = _num(row.get("model_ms")) if dry else _num(row.get("median_ms"))
    secs = ms / 1e3 if ms and ms > 0 else None
    flops = nbytes = None
    source = "row"
    if template is not None:
        try:
            shape = tuple(int(d) for d in str(row["shape"]).split("x") if d)
            flops, nbytes = float(template.flops(shape)), float(template.bytes(shape, row["dtype"]))
            source = "template"
        except Exception:                               # noqa: BLE001 - a stand-in template: use the row
            flops = nbytes = None
    tflops, gbps = _num(row.get("tflops")), _num(row.get("gbps"))
    ai = None
    if flops is not None and nbytes:
        ai = flops / nbytes
        if secs:
            tflops = flops / secs / 1e12 if flops else tflops
            gbps = nbytes / secs / 1e9
    else:
        source = "row"
        if tflops and gbps:
            ai = tflops * 1e12 / (gbps * 1e9)
        elif gbps and not tflops:                       # a byte count without flops: a data-movement kernel
            ai = 0.0
    if ai is None:
        return {"bound": "unknown", "intensity": None, "fraction": None, "tflops": tflops, "gbps": gbps,
                "source": "no flop/byte counts", "datasheet": None}
    sheet = H200_SXM if dry else datasheet(row.get("device"))
    dtype = row.get("dtype")
    bound = "compute-bound" if ai >= sheet.balance(dtype) else "memory-bound"
    if bound == "compute-bound":
        fraction = tflops * 1e12 / sheet.flops(dtype) if tflops else None
    else:
        fraction = gbps * 1e9 / sheet.bytes_per_s if gbps else None
    return {"bound": bound, "intensity": ai, "fraction": fraction, "tflops": tflops, "gbps": gbps,
            "source": source, "datasheet": sheet.name}


# ----------------------------------------------------------------------------------------- trial values


def trial_values(rows):
    """{study: [(trial, value or None, objective)]}: each measured trial's objective (geomean of ratio over
    its rows, else of 1 / median_ms; None when a row failed), from first timings (not retimes, not dry runs)."""
    m = rows[~rows["dry_run"].fillna(False).astype(bool) & ~rows["retimed"].fillna(False).astype(bool)
             & rows["trial"].notna() & rows["study"].notna()]
    out: dict[str, list] = {}
    for (study, trial), g in m.groupby(["study", "trial"], sort=True):
        if (g["status"] == "pruned").all():
            continue                                    # never evaluated: legality, not a measurement
        ok = (g["status"] == "ok").all()
        ratios = [_num(x) for x in g["ratio"]]
        meds = [_num(x) for x in g["median_ms"]]
        value, objective = None, "ratio"
        if ok and all(r and r > 0 for r in ratios):
            value = _geomean(ratios)
        elif ok and all(x and x > 0 for x in meds):
            value, objective = _geomean(1.0 / x for x in meds), "1/ms"
        elif not all(r is not None for r in ratios):
            objective = "1/ms"
        out.setdefault(str(study), []).append((int(trial), value, objective))
    return out


def _study_objective(points) -> str:
    objs = {o for _, v, o in points if v is not None}
    return "ratio" if objs == {"ratio"} else ("1/ms" if objs else "ratio")


# ----------------------------------------------------------------------------------------- importance


def _open_study(study: str, tuning_root, storage):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if storage:
        from .storage import open_storage
        st, _ = open_storage(storage, study, tuning_root or "tuning")
        return optuna.load_study(study_name=study, storage=st)
    p = Path(tuning_root or "tuning") / f"{study}.log"
    if not p.is_file():
        return None
    from .storage import journal_storage
    return optuna.load_study(study_name=study, storage=journal_storage(p))


def optuna_importance(study) -> dict | None:
    """PED-ANOVA importances over the study's evaluated (COMPLETE, not duplicate) trials; None if too few."""
    import optuna
    done = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if "duplicate_of" not in t.user_attrs and t.params]
    if len(done) < 2:
        return None
    copy = optuna.create_study(directions=study.directions)
    copy.add_trials(done)
    evaluator = None
    try:
        evaluator = optuna.importance.PedAnovaImportanceEvaluator()
    except AttributeError:                              # older optuna: its default (fANOVA)
        evaluator = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        imp = optuna.importance.get_param_importances(copy, evaluator=evaluator)
    return {k: float(v) for k, v in imp.items()} if imp else None


def spread_importance(rows, points_by_study, params) -> dict:
    """For each parameter: max - min over its values of the best objective reached with that value."""
    configs = {}
    for _, r in rows.drop_duplicates(subset=["study", "trial"]).iterrows():
        if r.get("study") is not None and _num(r.get("trial")) is not None:
            configs[(str(r["study"]), int(r["trial"]))] = _config_of(r)
    best_per: dict[str, dict] = {p: {} for p in params}
    for study, pts in points_by_study.items():
        for trial, value, _ in pts:
            if value is None:
                continue
            cfg = configs.get((study, trial), {})
            for p in params:
                if p in cfg:
                    k = json.dumps(cfg[p], default=str)
                    best_per[p][k] = max(best_per[p].get(k, 0.0), value)
    return {p: (max(v.values()) - min(v.values())) for p, v in best_per.items() if len(v) > 1}


def _dry_points(rows):
    """Dry-run configs as (config, score): geomean over the config's rows of the model's roofline fraction."""
    d = rows[rows["dry_run"].fillna(False).astype(bool) & (rows["status"] == "ok")]
    out = []
    for cid, g in d.groupby("config_id"):
        fr = [_num(x) for x in g["roofline_fraction"]]
        if fr and all(x and x > 0 for x in fr):
            out.append((_config_of(g.iloc[0]), _geomean(fr)))
    return out


# ----------------------------------------------------------------------------------------- plots


def _plot_best_so_far(name, points_by_study, path: Path) -> None:
    fig = _figure()
    ax = fig.add_subplot(111)
    drawn = 0
    for study, pts in sorted(points_by_study.items()):
        pts = sorted(pts)
        xs = [t for t, v, _ in pts if v is not None]
        ys = [v for _, v, _ in pts if v is not None]
        if not xs:
            continue
        best, b = [], -math.inf
        for y in ys:
            b = max(b, y)
            best.append(b)
        label = study if len(study) <= 48 else "..." + study[-45:]
        line = ax.step(xs, best, where="post", label=f"{label} ({_study_objective(pts)})")[0]
        ax.scatter(xs, ys, s=12, alpha=0.45, color=line.get_color())
        failed = [t for t, v, _ in pts if v is None]
        if failed:
            ax.scatter(failed, [min(ys)] * len(failed), marker="x", s=22, color=line.get_color())
        drawn += 1
    if drawn:
        from matplotlib.ticker import MaxNLocator
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("trial number")
        ax.set_ylabel("objective (higher is better)")
        ax.legend(fontsize=6, loc="best")
        ax.grid(alpha=0.3)
    else:
        ax.text(0.5, 0.5, "no measured trials (dry run only: a model, not measured)", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
    ax.set_title(f"{name}: best so far; objective = geomean over shapes of the ratio to the baseline\n"
                 "(or of 1/median ms without one); dots: trials, x: failed trials", fontsize=8)
    _save_figure(fig, path)


def _plot_ratio(name, best_rows, path: Path) -> None:
    fig = _figure(max(5.0, 1.1 * len(best_rows) + 2), 4.0)
    ax = fig.add_subplot(111)
    labels, vals, colors, notes = [], [], [], []
    have_ratio = any(_num(r.get("ratio")) for r in best_rows if not _bool(r.get("dry_run")))
    if best_rows and all(_bool(r.get("dry_run")) for r in best_rows):
        return _plot_dry(name, best_rows, fig, ax, path)
    for r in best_rows:
        labels.append(f"{r['shape']}\n{r['dtype']} {r['arch']}")
        dry = _bool(r.get("dry_run"))
        v = None if dry else (_num(r.get("ratio")) if have_ratio else _num(r.get("median_ms")))
        vals.append(v or 0.0)
        colors.append("#bbbbbb" if v is None else ("#2b8a3e" if not have_ratio or v >= 1.0 else "#c92a2a"))
        notes.append("dry run" if dry else ("" if v is not None else "n/a"))
    xs = range(len(labels))
    bars = ax.bar(xs, vals, color=colors)
    for b, v, note in zip(bars, vals, notes):
        ax.annotate(note or f"{v:.3g}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                    va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
    if have_ratio:
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label="baseline (1.0)")
        ax.set_ylabel("baseline ms / our ms (best config)")
        ax.legend(fontsize=7)
    else:
        ax.set_ylabel("median ms of the best config (no baseline timed)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_title(f"{name}: best config vs baseline per shape", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    _save_figure(fig, path)


def _plot_dry(name, best_rows, fig, ax, path: Path) -> None:
    """Only dry-run rows: the model's fraction of the roofline per shape, hatched and labelled as a model."""
    labels = [f"{r['shape']}\n{r['dtype']} {r['arch']}" for r in best_rows]
    vals = [_num(r.get("roofline_fraction")) or 0.0 for r in best_rows]
    xs = range(len(labels))
    bars = ax.bar(xs, vals, color="#dddddd", edgecolor="#666666", hatch="//")
    for b, v in zip(bars, vals):
        ax.annotate(f"{v:.3g} (model)", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom",
                    fontsize=7, xytext=(0, 2), textcoords="offset points")
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("roofline time / modelled time")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_title(f"{name}: {DRY} (no baseline was timed)", fontsize=9)
    _save_figure(fig, path)


def _plot_importance(name, panels, method, path: Path) -> None:
    """panels: [(title, {param: value})]."""
    n = max(1, len(panels))
    fig = _figure(6.5, 1.2 + 2.2 * n)
    if not panels:
        ax = fig.add_subplot(111)
        ax.text(0.5, 0.5, "no parameter importance: fewer than two evaluated configs, or nothing varies",
                ha="center", va="center", transform=ax.transAxes, fontsize=8)
        ax.set_axis_off()
    for i, (title, imp) in enumerate(panels):
        ax = fig.add_subplot(n, 1, i + 1)
        items = sorted(imp.items(), key=lambda kv: kv[1])
        ax.barh([k for k, _ in items], [v for _, v in items], color="#1971c2")
        ax.set_title(title if len(title) <= 70 else "..." + title[-67:], fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{name}: parameter importance ({method})", fontsize=9)
    _save_figure(fig, path)


# ----------------------------------------------------------------------------------------- the report


def write_report(results_root="results", out=None, spec_name: str | None = None, specs_dir="specs",
                 tuning_root="tuning", storage: str | None = None) -> Report:
    """Plots and report.md for every spec with results (or `spec_name`); see the module docstring."""
    from .results import ResultsStore, summary
    _figure()                                           # fail early without matplotlib
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = ResultsStore(results_root)
        df = store.read()
    if spec_name is not None:
        df = df[df["spec_name"] == spec_name]
    if df is None or df.empty:
        raise ReportError(f"no results under {results_root}/" + (f" for {spec_name}" if spec_name else "")
                          + ": run `gluon tune SPEC` (or an @gluon.autotune kernel) first")
    out = Path(out) if out is not None else Path(results_root) / "report"
    out.mkdir(parents=True, exist_ok=True)
    templates = _templates(df, specs_dir)
    rep = Report(out=str(out), markdown=str(out / "report.md"))
    names = sorted(df["spec_name"].dropna().unique())
    sections, table = [], []
    for name in names:
        rows = df[df["spec_name"] == name]
        params = _varying_params(rows)
        best = summary(rows)
        best_rows = [] if best is None or best.empty else [r for _, r in best.iterrows()]
        tmpl = templates.get(name)
        for r in best_rows:
            v = verdict(r, tmpl)
            dry = _bool(r.get("dry_run"))
            entry = {"spec_name": name, "arch": r["arch"], "shape": r["shape"], "dtype": r["dtype"],
                     "config_id": r["config_id"], "config": _config_of(r), "dry_run": dry,
                     "median_ms": None if dry else _num(r.get("median_ms")),
                     "model_ms": _num(r.get("model_ms")) if dry else None,
                     "baseline_ms": _num(r.get("baseline_ms")), "ratio": _num(r.get("ratio")),
                     "retimed": _bool(r.get("retimed")), **v}
            rep.best.append(entry)
            table.append((entry, params))
        # plots
        points = trial_values(rows)
        slug = _slug(name)
        p1, p2, p3 = out / f"{slug}-best-so-far.png", out / f"{slug}-ratio.png", out / f"{slug}-importance.png"
        _plot_best_so_far(name, points, p1)
        _plot_ratio(name, best_rows, p2)
        panels, method, short, studies_imp = self_importance(rows, points, params, tuning_root, storage)
        _plot_importance(name, panels, short, p3)
        rep.files += [str(p1), str(p2), str(p3)]
        rep.importance[name] = {"method": method, "studies": studies_imp}
        sections.append(_section(name, rows, points, p1, p2, p3, method, studies_imp, tmpl))
    md = _markdown(results_root, df, table, sections)
    from ..fsutil import atomic_write
    atomic_write(out / "report.md", md)
    rep.files.append(str(out / "report.md"))
    return rep


def self_importance(rows, points, params, tuning_root, storage):
    """([(panel title, {param: importance})], method sentence, short method, {study: importances})."""
    panels, studies_imp, methods = [], {}, set()
    studies = sorted(points, key=lambda s: -sum(1 for _, v, _ in points[s] if v is not None))
    for study in studies[:MAX_STUDY_PANELS]:
        imp = None
        try:
            st = _open_study(study, tuning_root, storage)
            if st is not None:
                imp = optuna_importance(st)
        except Exception:                               # noqa: BLE001 - no such study in that storage, ...
            imp = None
        if imp:
            methods.add("optuna")
            panels.append((f"{study} (optuna PED-ANOVA)", imp))
            studies_imp[study] = {"method": "optuna", "importance": imp}
            continue
        imp = spread_importance(rows, {study: points[study]}, params)
        if imp:
            methods.add("spread")
            panels.append((f"{study} (spread of the best objective per value)", imp))
            studies_imp[study] = {"method": "spread", "importance": imp}
    if not panels:                                      # dry run only: the model's ranking
        dry = _dry_points(rows)
        best_per: dict[str, dict] = {p: {} for p in params}
        for cfg, score in dry:
            for p in params:
                if p in cfg:
                    k = json.dumps(cfg[p], default=str)
                    best_per[p][k] = max(best_per[p].get(k, 0.0), score)
        imp = {p: max(v.values()) - min(v.values()) for p, v in best_per.items() if len(v) > 1}
        if imp:
            methods.add("dry")
            panels.append(("dry run: model, not measured (spread of the best modelled roofline fraction per "
                           "value)", imp))
            studies_imp["dry-run"] = {"method": "dry", "importance": imp}
    words = {"optuna": "optuna.importance.get_param_importances (PED-ANOVA) on the stored study",
             "spread": "from the rows (no stored study found, or too few trials in it): for each parameter, "
                       "the best objective reached with each value, max - min",
             "dry": "dry run: model, not measured: the spread of the best modelled roofline fraction per value"}
    method = "; ".join(words[m] for m in ("optuna", "spread", "dry") if m in methods) or "none (nothing varies)"
    shorts = {"optuna": "optuna PED-ANOVA", "spread": "spread from the rows", "dry": "dry-run model"}
    short = ", ".join(shorts[m] for m in ("optuna", "spread", "dry") if m in methods) or "none"
    return panels, method, short, studies_imp


def _fmt(v, spec=".3g", suffix="") -> str:
    return "-" if v is None else f"{format(v, spec)}{suffix}"


def _markdown(results_root, df, table, sections) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    n_dry = int(df["dry_run"].fillna(False).astype(bool).sum())
    lines = [
        "# Tuning report", "",
        f"Generated {now} from `{results_root}/`: {len(df)} rows ({n_dry} from dry runs) of "
        f"{df['spec_name'].nunique()} spec(s).", "",
        "**Bottleneck.** A kernel is *compute-bound* when its arithmetic intensity (flops / bytes moved: the "
        "spec's template counts, else the row's TFLOP/s over its GB/s) reaches the machine balance of the GPU "
        "that measured it (its datasheet's dense tensor-core TFLOP/s over its TB/s; fp8 inputs at twice the "
        "16-bit rate), and *memory-bound* below it. The last column is the **fraction of the datasheet peak** "
        "reached: TFLOP/s over the peak (compute-bound) or GB/s over the bandwidth (memory-bound), a datasheet "
        f"number, not a measured peak. Datasheets used: {_sheets_used(table)}.", "",
        f"Rows from a dry run (no GPU) say **{DRY}**: their times and fractions are the ranking model's.", "",
        "## Best config per (spec, arch, shape, dtype)", "",
        "| spec | arch | shape | dtype | config | measured | median ms | baseline ms | ratio | TFLOP/s | GB/s | "
        "flop/byte | verdict | fraction of the datasheet peak |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e, params in table:
        dry = e["dry_run"]
        measured = DRY if dry else ("yes, retimed" if e["retimed"] else "yes")
        ms = _fmt(e["model_ms"], ".4g", " (model)") if dry else _fmt(e["median_ms"], ".4g")
        frac = _fmt(e["fraction"], ".1%") + (" (model)" if dry and e["fraction"] is not None else "")
        lines.append("| " + " | ".join(_md(x) for x in (
            e["spec_name"], e["arch"], e["shape"], e["dtype"], _short_config(e["config"], params), measured, ms,
            _fmt(e["baseline_ms"], ".4g"), _fmt(e["ratio"], ".3f"), _fmt(e["tflops"], ".4g"), _fmt(e["gbps"], ".4g"),
            _fmt(e["intensity"], ".3g"), e["bound"], frac)) + " |")
    lines.append("")
    lines += sections
    return "\n".join(lines) + "\n"


def _sheets_used(table) -> str:
    """"H100 SXM (989 TFLOP/s 16-bit, 3.35 TB/s; 24 rows), ..." for the sheets the table's verdicts used."""
    counts: dict[str, int] = {}
    for e, _ in table:
        if e.get("datasheet"):
            counts[e["datasheet"]] = counts.get(e["datasheet"], 0) + 1
    if not counts:
        return "none (no row has flop/byte counts)"
    used = ", ".join(f"{n} ({BY_NAME[n].flops_16bit / 1e12:.0f} TFLOP/s 16-bit, {BY_NAME[n].bytes_per_s / 1e12:.2f} "
                     f"TB/s; {c} row{'s' if c > 1 else ''})" for n, c in sorted(counts.items()))
    return used + " (GPUs not in the table, and dry runs: the H200 SXM's)"


def _section(name, rows, points, p1, p2, p3, method, studies_imp, tmpl) -> str:
    n_trials = sum(1 for pts in points.values() for _, v, _ in pts)
    n_failed = sum(1 for pts in points.values() for _, v, _ in pts if v is None)
    dry_only = rows["dry_run"].fillna(False).astype(bool).all()
    out = [f"## {name}", ""]
    if tmpl is not None:
        src = "its spec's template"
    elif rows["template"].dropna().astype(str).str.startswith("autotune:").all():
        src = "the rows (an @gluon.autotune kernel: no flop/byte counts, so no verdict)"
    else:
        src = "the rows' tflops/gbps columns (the template did not load)"
    out.append(f"{len(rows)} rows; {n_trials} measured trials in {len(points)} stud{'y' if len(points) == 1 else 'ies'}"
               f" ({n_failed} failed); verdicts from {src}." + (f" All rows are from a dry run: {DRY}." if dry_only
                                                                  else ""))
    out += ["", f"![best so far]({p1.name})", "", f"![ratio vs baseline per shape]({p2.name})", "",
            f"![parameter importance]({p3.name})", "", f"Parameter importance: {method}.", ""]
    for study, d in studies_imp.items():
        top = ", ".join(f"{k} {v:.3g}" for k, v in sorted(d["importance"].items(), key=lambda kv: -kv[1])[:6])
        out.append(f"- `{study}` ({d['method']}): {top}")
    if studies_imp:
        out.append("")
    return "\n".join(out)
