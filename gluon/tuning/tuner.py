"""`gluon tune`: search a spec's space with Optuna, verify and time every config on the GPU, record rows.

    summary = tune(spec, gpus=None, dry_run=None, storage=None, progress=True, results_root="results")

**Objective.** For `scoring = "geomean"` one study maximizes the geometric mean, over the spec's shapes x
dtypes, of baseline_ms / median_ms (the vendor baseline timed in the same process, interleaved): a value
of 1.05 means 5% faster than the baseline on the geometric average. `objective = "min_time"` minimizes
the geometric mean of median_ms instead. `scoring = "per_shape"` runs one study per (shape, dtype), each
with the same objective over its one case and its own trial budget.

**A trial** = one config: `space.suggest` -> config_id -> legality (space constraints, then the template's
trace + passes for every shape/dtype; `expand.Legality`) -> compile in the process pool (registers,
spills, shared bytes; `compile_timeout_s`) -> for each (shape, dtype) a GPU job (`measure.GpuWorker`,
`trial_timeout_s` per job) -> one results row per job (`results.ResultsStore`, written atomically as it
finishes). The first failing job ends the trial. Each GPU's thread keeps one trial ahead (`lookahead`):
the next trial is asked, claimed, checked and compiled while the current one is measured, so the GPU
does not wait for the compiler; TPE runs with constant_liar so it proposes around running trials.
A fresh study measures the template's `seed_configs()` first (`seeds=False` leaves them out).

**Trial states in Optuna.** COMPLETE: every job ok, value = the objective. PRUNED: infeasible — not
legal (status pruned, never reaches the GPU) or failed (compile_error, runtime_error, wrong_result,
timeout); we tell `TrialState.PRUNED` (not a constraints_func, which not every sampler takes: TPE
counts pruned trials among the bad ones, the others skip them, and `study.best_trial` only ever
considers COMPLETE trials, so a wrong result can never be the best). FAIL: not an evaluation — a duplicate proposal of a config another worker is measuring right now,
or a trial interrupted by Ctrl-C / kill -9. The trial's user attrs hold config_id, status, reason, owner.

**Budget.** `trials` (spec.tuning.trials, or the `trials=` override) counts the study's evaluated configs:
COMPLETE trials and PRUNED ones that failed after legality (compile/runtime/wrong/timeout), including
those of earlier runs of the same study. Legality-pruned trials and duplicates do not count (they cost
milliseconds). The run also stops when the space is exhausted (every config seen, or the grid sampler is
done), when `time_limit_s` is near (it stops proposing early enough for the re-timing to end within the
limit: `search_deadline_s` in study.py), or after 1000 proposals in a row that counted nothing. Tuners
sharing a study count each other's live trials in flight too (the check and the ask are one step under
the claim lock), so together they stop at the budget.

**Duplicates and resume.** The study (name = spec name, arch, device, shapes, dtypes and a hash of the
space and objective; default storage a JournalStorage file `tuning/<study>.log`) is reopened by every
run. A proposal whose config_id already has a finished trial is told the stored value/state (user attr
duplicate_of) without running anything. A (config, shape, dtype) that already has a row in the results
store for this spec content hash, arch and device (any status; not dry-run, not retimed) is looked up
instead of measured; so a trial cut short by kill -9 re-measures only its unfinished jobs. At start,
RUNNING trials of dead tuners are marked FAIL (this host's: the process is gone; another host's: not
marked alive for STALE_S = 10 minutes, as every tuner marks its trials in flight every 30 s), and every
FAIL-ed (interrupted) config that has no finished trial is re-enqueued (`study.enqueue_trial`), so it is
measured later.

**Several GPUs** (`gpus=[0, 1]`): one worker process and one thread per GPU, all on one storage. Each
trial claims its config under the claim lock (a thread lock plus flock on `.<journal>.claims.lock`
beside the journal file): it reads the study, and if a finished trial has the config it is answered
from it; if a RUNNING trial of a live tuner has it, this one steps back (FAIL, duplicate_of, a short
backoff) and asks again; else it sets user attr config_id, which is only ever set under the lock. So
separate `gluon tune` processes on one journal (other GPUs of the host, or hosts sharing a file system
with working flock) never measure the same config twice either.

**Storage** (`storage=`, else the spec's `tuning.storage`, else the journal file above): a path is a
journal file; an SQLAlchemy URL is an Optuna RDB storage (`open_storage`, `rdb_storage` in storage.py):
`sqlite:///tuning/gemm.db` (relative to the working directory; `sqlite:////abs/path.db`) or
`postgresql://user@host/db` (the driver installed separately: psycopg 3 for SQLAlchemy >= 2.1, psycopg2
for older ones or with `postgresql+psycopg2://`). Claims follow the
storage (`storage_claims`): a journal or SQLite file is claimed with flock on a file beside it (every
process that reaches the file), PostgreSQL with a transaction-level advisory lock in the database
itself, so tuners on several machines sharing one PostgreSQL study never measure a config twice; any
other database falls back to a lock file under tuning_root (safe within one host only, with a warning).
Passwords in URLs are masked in messages and in the summary (`TuneSummary.storage`).

**Ctrl-C**: the GPU workers and compile processes are killed, in-flight trials are told FAIL (and
re-enqueued by the next run), rows already written stay, KeyboardInterrupt is re-raised.

**At the end** the `retime_top` best configs are measured again (fresh inputs) and recorded with
retimed=True; the summary's best is chosen on the retimed values. So is, on its own (shape, dtype) only,
each case's fastest config when it is not among them: `gluon build --best` serves every case the best
of its re-timed configs (results.summary), and a config that wins one shape but not the geometric mean
must be re-timed there to be chosen. Under a time limit (`time_limit_s`, the spec's or `time_limit_s=`) the
search leaves the re-timing at least half of it, the re-timing's rounds shortened to fit that half
(`study.retime_round_within`, not below the search's rounds), and no re-timing job starts once the limit has
passed (those left keep their first timings: `TuneSummary.retime_skipped`). With `scoring = "per_shape"` the
studies share the limit: each gets the time left over the studies left.

**Dry run** (`dry_run=True`, or None without a CUDA GPU): no study and no GPU worker. Every config of the
space (or `dry_run_limit` random ones of a larger space) gets a legality verdict; up to
`dry_run_compiles` of the best-ranked legal configs are compiled in the pool (registers, spills, shared
bytes, compile errors); legal configs are ranked by `template.model_s` (roofline with H200 peaks,
989e12 flop/s and 4.8e12 B/s, penalized by wave and tile quantization for GEMM): score = geometric mean
of roofline_s / model_s. Rows carry dry_run=True, status ok / pruned / compile_error, model_ms and
roofline_fraction. It says so on stdout.

**Modules.** This one: `tune()`, the spec checked against its template, the dry run, one `_Study` per
group of cases. study.py: one Optuna study (its start, run and summary), with trials.py (the GPU
threads' trial lifecycle: ask, claim, legality, measure, tell), jobs.py (one (config, shape, dtype):
looked up, or compiled, measured and written), retime.py (the re-timing and the best) and progress.py
(the threads, progress lines). storage.py: storages, claims, study names; sampler.py: `make_sampler`;
settings.py: the spec's tuning values; tune_summary.py: `TuneSummary`.
"""
from __future__ import annotations

import os
import time

from .expand import CompilePool, Legality
from .jobs import geomean
from .measure import DEFAULT_MEASURE, GpuWorker, default_environment
from .results import ResultsStore, make_row
from .sampler import make_sampler
from .settings import _spec_error, _t, check_against_template
from .spec import load_spec, template_of
from .storage import TuneError
from .study import _Study
from .template import H200_PEAK_BW, H200_PEAK_FLOPS, H200_SMS
from .tune_summary import TuneSummary

__all__ = ["TuneError", "TuneSummary", "tune"]


_GRID_SAMPLE_MAX = 200_000     # spaces up to this many (constrained) configs are sampled from their grid


def _dry_row_id(row: dict) -> str:
    """A dry-run row's id from what it is about (spec and template content, config, shape, dtype, arch):
    `ResultsStore.read` keeps one row per id, the last written, so a re-run replaces its rows."""
    import hashlib
    key = "|".join(str(row.get(k)) for k in ("spec_name", "spec_hash", "template_hash", "config_id", "shape",
                                               "dtype", "arch"))
    return "dry-" + hashlib.sha256(key.encode()).hexdigest()[:28]


def _cuda_available() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:                                   # noqa: BLE001
        return False


# ----------------------------------------------------------------------------------------- entry


def tune(spec, *, gpus=None, dry_run=None, storage=None, progress=True, results_root="results",
         trials: int | None = None, tuning_root="tuning", measure_fn: str = DEFAULT_MEASURE,
         compile_workers: int | None = None, dry_run_compiles: int = 10, dry_run_limit: int = 4096,
         retime_top: int | None = None, worker_context: str = "spawn", lookahead: bool = True,
         seeds: bool = True, time_limit_s: float | None = None) -> TuneSummary:
    """Tune `spec` (see the module docstring). `measure_fn` ("module:function") replaces the GPU
    measurement (tests); `trials` / `retime_top` / `time_limit_s` override the spec's values; `compile_workers` sizes
    the compile pool (0: compile in this process, no timeout); `worker_context` is the multiprocessing
    start method of the GPU workers ("spawn", or "forkserver" for fast restarts); `lookahead` compiles
    each GPU's next trial while the current one is measured; `seeds=False` leaves the template's
    hand-picked configs out of a fresh study (to measure the sampler alone).

    A script that calls tune() needs the `if __name__ == "__main__":` guard (spawned processes import
    the main module); `python -c` and the `gluon` command need nothing."""
    if isinstance(spec, (str, os.PathLike)):
        spec = load_spec(spec)
    t = _Tuner(spec, results_root=results_root, progress=progress, compile_workers=compile_workers)
    if dry_run is None:
        dry_run = not _cuda_available()
    if dry_run:
        return t.dry_run(compiles=dry_run_compiles, limit=dry_run_limit)
    if gpus is None:
        try:
            import torch
            n = torch.cuda.device_count()
        except Exception:                               # noqa: BLE001
            n = 0
        gpus = list(range(max(1, n)))
    return t.run(list(gpus), storage=storage, tuning_root=tuning_root, trials=trials, measure_fn=measure_fn,
                 retime_top=retime_top, worker_context=worker_context, lookahead=lookahead, seeds=seeds,
                 time_limit_s=time_limit_s)


class _Tuner:
    """One spec's tuning: the spec checked against its template, its results rows (`_row`), the dry run,
    and `run` (one `_Study` per group of cases: all of them, or each for scoring = per_shape)."""

    def __init__(self, spec, *, results_root, progress, compile_workers):
        self.spec = spec
        self.template = template_of(spec)
        self.arch = str(spec.kernel.arch)
        self.shapes = [tuple(int(d) for d in s) for s in spec.shapes]
        self.dtypes = [str(d) for d in spec.dtypes]
        self.space = spec.space
        self.store = ResultsStore(results_root)
        self.results_root = str(results_root)
        self.progress = progress
        self.compile_workers = compile_workers
        self.legality = Legality(spec, self.template, self.arch)
        self.template_hash = self.template.source_hash()
        self.spec_hash = str(getattr(spec, "content_hash", "") or "")
        self.objective = str(_t(spec, "objective", "geomean_ratio"))
        if self.objective not in ("geomean_ratio", "min_time"):
            raise _spec_error(spec, "tuning.objective", f"unknown objective {self.objective!r}",
                              allowed="geomean_ratio, min_time")
        self.maximize = self.objective == "geomean_ratio"
        self._validate()

    def _validate(self) -> None:
        check_against_template(self.spec, self.template)
        base = _t(self.spec, "baseline", "torch")
        if self.objective == "geomean_ratio" and base in (False, "none", ""):
            raise _spec_error(self.spec, "tuning.baseline", "objective geomean_ratio needs a baseline",
                              allowed="a baseline, or objective = 'min_time'")

    def _say(self, msg: str) -> None:
        if self.progress:
            print(msg, flush=True)

    def _row(self, **kw) -> dict:
        env = kw.pop("env", None) or {}
        base = dict(spec_name=self.spec.name, spec_hash=self.spec_hash, template=str(getattr(self.spec.kernel, "ref", self.spec.kernel.template)),
                    template_hash=self.template_hash, arch=self.arch, device=env.get("device"),
                    sm_count=env.get("sm_count"), driver=env.get("driver"), cuda=env.get("cuda"),
                    triton=env.get("triton"), torch=env.get("torch"), gluon=env.get("gluon"))
        base.update(kw)
        return make_row(**base)

    # ------------------------------------------------------------------------------------- dry run

    def _dry_configs(self, limit: int) -> list[dict]:
        try:
            size = int(self.space.size())
        except Exception:                               # noqa: BLE001
            size = None
        if size is not None and size <= limit:
            return list(self.space.grid())
        if size is not None and size <= _GRID_SAMPLE_MAX:
            # a seeded sample of the configs the constraints keep (sampling the raw product and dropping
            # what they refuse left a constrained space's dry run mostly empty)
            import random
            pick = set(random.Random(_t(self.spec, "seed", 0)).sample(range(size), limit))
            return [cfg for i, cfg in enumerate(self.space.grid()) if i in pick]
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=_t(self.spec, "seed", 0)))
        seen, out = set(), []
        for _ in range(limit * 3):
            tr = study.ask()
            cfg = self.space.suggest(tr)
            study.tell(tr, state=optuna.trial.TrialState.PRUNED)
            cid = self.space.config_id(cfg)
            if cid not in seen:
                seen.add(cid)
                out.append(cfg)
            if len(out) >= limit:
                break
        return out

    def dry_run(self, compiles: int = 10, limit: int = 4096) -> TuneSummary:
        t0 = time.monotonic()
        env = default_environment(0)
        env["device"] = "dry-run"
        env["sm_count"] = H200_SMS
        configs = self._dry_configs(limit)
        jobs = [(s, d) for s in self.shapes for d in self.dtypes]
        pruned_rows, legal = [], []
        tick = time.monotonic()
        for i, cfg in enumerate(configs):
            if time.monotonic() - tick >= 5:           # long work shows progress
                tick = time.monotonic()
                self._say(f"dry run: {i}/{len(configs)} configs checked ({len(legal)} legal) in "
                          f"{tick - t0:.0f} s")
            cid = self.space.config_id(cfg)
            v = self.legality.verdict(cfg, cid, lower=False)      # its compiled sample is lowered below
            if not v.ok:
                pruned_rows.append(self._row(env=env, config=cfg, config_id=cid, shape=v.shape or self.shapes[0],
                                             dtype=v.dtype or self.dtypes[0], status=v.status, reason=v.reason,
                                             dry_run=True))
                continue
            per = []
            for s, d in jobs:
                model = self.template.model_s(cfg, s, d, H200_PEAK_FLOPS, H200_PEAK_BW, H200_SMS)
                roof = self.template.roofline_s(s, d, H200_PEAK_FLOPS, H200_PEAK_BW)
                per.append((s, d, model, roof))
            score = geomean(max(r / m, 1e-12) if m > 0 else 1.0 for _, _, m, r in per)
            legal.append({"config": cfg, "config_id": cid, "score": score, "jobs": per})
        # ties (configs the model cannot tell apart) in the order of their ids: the same ranking every run
        legal.sort(key=lambda x: (-round(x["score"], 9), x["config_id"]))
        # compile the best-ranked sample: registers, spills, shared bytes, compile errors
        compiled: dict[str, dict] = {}
        if compiles > 0 and legal:
            timeout = float(_t(self.spec, "compile_timeout_s", 600))
            with CompilePool(self.compile_workers, timeout) as pool:
                handles = [(c, pool.submit(self.spec, self.legality.lowered(c["config"], c["config_id"],
                                                                            self.shapes[0], self.dtypes[0])))
                           for c in legal[:compiles]]
                for k, (c, h) in enumerate(handles):
                    compiled[c["config_id"]] = pool.wait(h)
                    self._say(f"dry run: compiled {k + 1}/{len(handles)} of the best-ranked "
                              f"({compiled[c['config_id']]['status']})")
        rows, ranking = list(pruned_rows), []
        ckey0 = None
        for c in legal:
            comp = compiled.get(c["config_id"])
            status = "ok" if comp is None or comp["status"] == "ok" else comp["status"]
            if comp is not None:
                ckey0 = self.template.compile_key(c["config_id"], self.shapes[0], self.dtypes[0], self.arch)
            for s, d, model, roof in c["jobs"]:
                extra = {}
                if comp is not None and self.template.compile_key(c["config_id"], s, d, self.arch) == ckey0:
                    extra = {k: comp.get(k) for k in ("compile_s", "registers", "spills", "shared_bytes")}
                rows.append(self._row(env=env, config=c["config"], config_id=c["config_id"], shape=s, dtype=d,
                                      status=status, reason=comp.get("reason") if comp else None, dry_run=True,
                                      model_ms=model * 1e3, roofline_fraction=roof / model if model else None,
                                      tflops=self.template.flops(s) / model / 1e12 if model else None,
                                      **extra))
            if status == "ok":
                ranking.append({"config_id": c["config_id"], "config": c["config"], "score": c["score"],
                                "model_ms": [m * 1e3 for _, _, m, _ in c["jobs"]], "compiled": comp is not None,
                                **({k: comp.get(k) for k in ("registers", "spills", "shared_bytes")} if comp else {})})
        # only a config that compiled can be the best; one without spills before one with them
        ranking.sort(key=lambda r: (not r["compiled"], bool(r.get("spills")), -round(r["score"], 9), r["config_id"]))
        for r in rows:
            r["row_id"] = _dry_row_id(r)                # a re-run of the same content replaces its rows
        for i in range(0, len(rows), 500):
            self.store.write_many(rows[i:i + 500])
        n_err = sum(1 for c in compiled.values() if c["status"] != "ok")
        summ = TuneSummary(spec_name=self.spec.name, dry_run=True, results_root=self.results_root, device=None,
                           rows_written=len(rows), ranking=ranking, stopped="dry_run",
                           statuses={"ok": len(ranking), "pruned": len(pruned_rows), "compile_error": n_err})
        if ranking and ranking[0]["compiled"]:
            summ.best_config, summ.best_config_id, summ.best_value = (ranking[0]["config"], ranking[0]["config_id"],
                                                                      ranking[0]["score"])
        lines = [f"DRY RUN of {self.spec.name} (no GPU: nothing was run or timed): {len(configs)} configs, "
                 f"{len(legal)} legal, {len(pruned_rows)} pruned, {len(compiled)} compiled ({n_err} failed), "
                 f"{len(rows)} rows with dry_run=True under {self.results_root}/ in {time.monotonic() - t0:.1f} s"]
        if ranking:
            lines.append("best by the roofline model (score = geomean of roofline / model time; compiled ones "
                         "first, those without spills first among them):")
            for r in ranking[:5]:
                regs = f" regs={r['registers']} spills={r['spills']}" if "registers" in r else " (not compiled)"
                lines.append(f"  {r['score']:.3f}  {r['config_id']}{regs}")
        else:
            lines.append("no legal config: nothing can be built (the pruned rows say why)")
        summ.message = "\n".join(lines)
        self._say(summ.message)
        return summ

    # ------------------------------------------------------------------------------------- studies

    def run(self, gpus, *, storage, tuning_root, trials, measure_fn, retime_top, worker_context,
            lookahead: bool = True, seeds: bool = True, time_limit_s: float | None = None) -> TuneSummary:
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        make_sampler(self.spec)                          # a sampler that cannot work fails before any worker
        workers = [GpuWorker(g, measure_fn, context=worker_context) for g in gpus]
        pool = CompilePool(self.compile_workers, float(_t(self.spec, "compile_timeout_s", 600)))
        try:
            for w in workers:
                w.start()
            env = dict(workers[0].env or {})
            devs = {(w.env or {}).get("device") for w in workers}
            if len(devs) > 1:
                self._say(f"warning: the GPUs differ ({', '.join(map(str, devs))}); the study is named after "
                          f"{env.get('device')}")
            scoring = str(_t(self.spec, "scoring", "geomean"))
            groups = ([(self.shapes, self.dtypes)] if scoring != "per_shape"
                      else [([s], [d]) for s in self.shapes for d in self.dtypes])
            summaries = []
            limit = time_limit_s if time_limit_s is not None else _t(self.spec, "time_limit_s", None)
            t_start = time.monotonic()
            for i, (shapes, dtypes) in enumerate(groups):
                if limit and len(groups) > 1:       # per_shape: the studies left share the time left
                    left = float(limit) - (time.monotonic() - t_start)
                    share = max(left, 0.001) / (len(groups) - i)
                else:
                    share = limit
                st = _Study(self, workers, pool, env, shapes, dtypes, storage=storage, tuning_root=tuning_root,
                            trials=trials, retime_top=retime_top, lookahead=lookahead, seeds=seeds,
                            time_limit_s=share)
                summaries.append(st.run())
            if len(summaries) == 1:
                return summaries[0]
            top = TuneSummary(spec_name=self.spec.name, dry_run=False, results_root=self.results_root,
                              device=env.get("device"), studies=summaries, stopped="per_shape")
            for s in summaries:
                top.trials += s.trials
                top.new_trials += s.new_trials
                top.measured += s.measured
                top.reused += s.reused
                top.duplicates += s.duplicates
                top.rows_written += s.rows_written
                for k, v in s.statuses.items():
                    top.statuses[k] = top.statuses.get(k, 0) + v
            return top
        except BaseException:
            for w in workers:
                w.kill()
            pool.close(kill=True)
            raise
        finally:
            for w in workers:
                w.close()
            pool.close()
