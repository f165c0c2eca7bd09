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
limit: `search_deadline_s`), or after 1000 proposals in a row that counted nothing.

**Duplicates and resume.** The study (name = spec name, arch, device, shapes, dtypes and a hash of the
space and objective; default storage a JournalStorage file `tuning/<study>.log`) is reopened by every
run. A proposal whose config_id already has a finished trial is told the stored value/state (user attr
duplicate_of) without running anything. A (config, shape, dtype) that already has a row in the results
store for this spec content hash, arch and device (any status; not dry-run, not retimed) is looked up
instead of measured; so a trial cut short by kill -9 re-measures only its unfinished jobs. At start,
RUNNING trials of dead tuner processes on this host are marked FAIL, and every FAIL-ed (interrupted)
config that has no finished trial is re-enqueued (`study.enqueue_trial`), so it is measured later.

**Several GPUs** (`gpus=[0, 1]`): one worker process and one thread per GPU, all on one storage. Each
trial claims its config under the claim lock (a thread lock plus flock on `.<journal>.claims.lock`
beside the journal file): it reads the study, and if a finished trial has the config it is answered
from it; if a RUNNING trial of a live tuner has it, this one steps back (FAIL, duplicate_of, a short
backoff) and asks again; else it sets user attr config_id, which is only ever set under the lock. So
separate `gluon tune` processes on one journal (other GPUs of the host, or hosts sharing a file system
with working flock) never measure the same config twice either.

**Storage** (`storage=`, else the spec's `tuning.storage`, else the journal file above): a path is a
journal file; an SQLAlchemy URL is an Optuna RDB storage (`open_storage`, `rdb_storage`):
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
must be re-timed there to be chosen.

**Dry run** (`dry_run=True`, or None without a CUDA GPU): no study and no GPU worker. Every config of the
space (or `dry_run_limit` random ones of a larger space) gets a legality verdict; up to
`dry_run_compiles` of the best-ranked legal configs are compiled in the pool (registers, spills, shared
bytes, compile errors); legal configs are ranked by `template.model_s` (roofline with H200 peaks,
989e12 flop/s and 4.8e12 B/s, penalized by wave and tile quantization for GEMM): score = geometric mean
of roofline_s / model_s. Rows carry dry_run=True, status ok / pruned / compile_error, model_ms and
roofline_fraction. It says so on stdout.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import queue
import socket
import sys
import threading
import time
import uuid

from .expand import CompilePool, Legality
from .measure import DEFAULT_MEASURE, GpuWorker, default_environment
from .results import ResultsStore, make_row
from .sampler import make_sampler
from .settings import _spec_error, _t
from .spec import template_of
from .storage import TuneError, open_storage, storage_claims, study_name_for
from .template import H200_PEAK_BW, H200_PEAK_FLOPS, H200_SMS, shape_str
from .tune_summary import TuneSummary

__all__ = ["tune", "TuneSummary", "TuneError"]

FINAL = ("ok", "pruned", "compile_error", "runtime_error", "wrong_result", "timeout")
MAX_IDLE_PROPOSALS = 1000


# ----------------------------------------------------------------------------------------- helpers


def _cuda_available() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:                                   # noqa: BLE001
        return False


def _geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_HOST = socket.gethostname()
_ACTIVE_RUNS: set[str] = set()          # tune() runs in progress in this process


def _owner_alive(t) -> bool:
    """Whether a RUNNING trial's tuner may still finish it (unknown owners and other hosts: yes)."""
    o = t.user_attrs.get("owner")
    if not isinstance(o, dict) or o.get("host") != _HOST:
        return True
    pid = int(o.get("pid", -1))
    if pid == os.getpid():
        return o.get("run") in _ACTIVE_RUNS
    return _pid_alive(pid)


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "little")


# ----------------------------------------------------------------------------------------- entry


def tune(spec, *, gpus=None, dry_run=None, storage=None, progress=True, results_root="results",
         trials: int | None = None, tuning_root="tuning", measure_fn: str = DEFAULT_MEASURE,
         compile_workers: int | None = None, dry_run_compiles: int = 10, dry_run_limit: int = 4096,
         retime_top: int | None = None, worker_context: str = "spawn", lookahead: bool = True,
         seeds: bool = True) -> TuneSummary:
    """Tune `spec` (see the module docstring). `measure_fn` ("module:function") replaces the GPU
    measurement (tests); `trials` / `retime_top` override the spec's values; `compile_workers` sizes
    the compile pool (0: compile in this process, no timeout); `worker_context` is the multiprocessing
    start method of the GPU workers ("spawn", or "forkserver" for fast restarts); `lookahead` compiles
    each GPU's next trial while the current one is measured; `seeds=False` leaves the template's
    hand-picked configs out of a fresh study (to measure the sampler alone).

    A script that calls tune() needs the `if __name__ == "__main__":` guard (spawned processes import
    the main module); `python -c` and the `gluon` command need nothing."""
    if isinstance(spec, (str, os.PathLike)):
        from .spec import load_spec
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
                 retime_top=retime_top, worker_context=worker_context, lookahead=lookahead, seeds=seeds)


class _Tuner:
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
        tmpl = self.template
        bad = [d for d in self.dtypes if d not in tmpl.dtypes]
        if bad:
            raise _spec_error(self.spec, "dtypes", f"template {tmpl.name} does not take {', '.join(bad)}",
                              allowed=", ".join(tmpl.dtypes))
        for s in self.shapes:
            if tmpl.dims and len(s) != len(tmpl.dims):
                raise _spec_error(self.spec, "shapes", f"{shape_str(s)} does not fit template {tmpl.name}",
                                  allowed=f"{len(tmpl.dims)} sizes ({', '.join(tmpl.dims)})")
        base = _t(self.spec, "baseline", "torch")
        if self.objective == "geomean_ratio" and base in (False, "none", ""):
            raise _spec_error(self.spec, "tuning.baseline", "objective geomean_ratio needs a baseline",
                              allowed="a baseline, or objective = 'min_time'")

    def _say(self, msg: str) -> None:
        print(msg, flush=True)

    def _row(self, **kw) -> dict:
        env = kw.pop("env", None) or {}
        base = dict(spec_name=self.spec.name, spec_hash=self.spec_hash, template=str(self.spec.kernel.template),
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
        for cfg in configs:
            cid = self.space.config_id(cfg)
            v = self.legality.verdict(cfg, cid)
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
            score = _geomean(max(r / m, 1e-12) if m > 0 else 1.0 for _, _, m, r in per)
            legal.append({"config": cfg, "config_id": cid, "score": score, "jobs": per})
        legal.sort(key=lambda x: -x["score"])
        # compile the best-ranked sample: registers, spills, shared bytes, compile errors
        compiled: dict[str, dict] = {}
        if compiles > 0 and legal:
            timeout = float(_t(self.spec, "compile_timeout_s", 600))
            with CompilePool(self.compile_workers, timeout) as pool:
                handles = [(c, pool.submit(self.spec, c["config"], self.shapes[0], self.dtypes[0], self.arch))
                           for c in legal[:compiles]]
                for c, h in handles:
                    compiled[c["config_id"]] = pool.wait(h)
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
                                "model_ms": [m * 1e3 for _, _, m, _ in c["jobs"]],
                                **({k: comp.get(k) for k in ("registers", "spills", "shared_bytes")} if comp else {})})
        for i in range(0, len(rows), 500):
            self.store.write_many(rows[i:i + 500])
        n_err = sum(1 for c in compiled.values() if c["status"] != "ok")
        summ = TuneSummary(spec_name=self.spec.name, dry_run=True, results_root=self.results_root, device=None,
                           rows_written=len(rows), ranking=ranking, stopped="dry_run",
                           statuses={"ok": len(ranking), "pruned": len(pruned_rows), "compile_error": n_err})
        if ranking:
            summ.best_config, summ.best_config_id, summ.best_value = (ranking[0]["config"], ranking[0]["config_id"],
                                                                      ranking[0]["score"])
        lines = [f"DRY RUN of {self.spec.name} (no GPU: nothing was run or timed): {len(configs)} configs, "
                 f"{len(legal)} legal, {len(pruned_rows)} pruned, {len(compiled)} compiled ({n_err} failed), "
                 f"{len(rows)} rows with dry_run=True under {self.results_root}/ in {time.monotonic() - t0:.1f} s"]
        if ranking:
            lines.append("best by the roofline model (score = geomean of roofline / model time):")
            for r in ranking[:5]:
                regs = f" regs={r['registers']} spills={r['spills']}" if "registers" in r else ""
                lines.append(f"  {r['score']:.3f}  {r['config_id']}{regs}")
        summ.message = "\n".join(lines)
        self._say(summ.message)
        return summ

    # ------------------------------------------------------------------------------------- studies

    def run(self, gpus, *, storage, tuning_root, trials, measure_fn, retime_top, worker_context,
            lookahead: bool = True, seeds: bool = True) -> TuneSummary:
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
            for shapes, dtypes in groups:
                st = _Study(self, workers, pool, env, shapes, dtypes, storage=storage, tuning_root=tuning_root,
                            trials=trials, retime_top=retime_top, lookahead=lookahead, seeds=seeds)
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


def search_deadline_s(time_limit, retime_top: int, cases: int, repeats: int, retime_round_ms: int,
                      workers: int) -> float | None:
    """Seconds after the start at which the search stops proposing, so that the re-timing that follows
    ends within `time_limit`: the limit less the re-timing's estimated length (its `retime_top` configs
    on every case plus up to one case winner per case, each job `repeats` rounds of both sides of
    `retime_round_ms`, and a second for inputs and the check, spread over the workers); never less than
    half the limit. None without a limit."""
    if not time_limit:
        return None
    limit = float(time_limit)
    if retime_top <= 0:
        return limit
    jobs = math.ceil((retime_top + 1) * cases / max(1, workers))
    reserve = jobs * (repeats * 2 * (retime_round_ms / 1000 + 0.05) + 1.0)
    return max(limit - reserve, limit / 2)


class _Study:
    """One Optuna study: the worker threads, claims, the budget, retiming."""

    def __init__(self, tuner: _Tuner, workers, pool, env, shapes, dtypes, *, storage, tuning_root, trials,
                 retime_top, lookahead: bool = True, seeds: bool = True):
        import optuna
        self.tn = tuner
        self.spec = tuner.spec
        self.space = tuner.space
        self.workers = workers
        self.pool = pool
        self.env = env
        self.shapes, self.dtypes = shapes, dtypes
        self.device = str(env.get("device") or "unknown")
        self.name = study_name_for(self.spec, tuner.arch, self.device, shapes, dtypes, tuner.objective)
        self.storage, self.storage_desc = open_storage(storage if storage is not None else _t(self.spec, "storage"),
                                                       self.name, tuning_root)
        self.claims = storage_claims(self.storage, self.storage_desc, self.name, tuning_root)
        self.claim_path = self.claims.path          # None for a database-side lock
        self.claim_mutex = threading.Lock()
        self.sampler = make_sampler(self.spec)
        self.study = optuna.create_study(study_name=self.name, storage=self.storage, sampler=self.sampler,
                                         direction="maximize" if tuner.maximize else "minimize",
                                         load_if_exists=True)
        self.budget = int(trials if trials is not None else _t(self.spec, "trials", 50))
        self.retime_top = int(retime_top if retime_top is not None else _t(self.spec, "retime_top", 0))
        self.trial_timeout = float(_t(self.spec, "trial_timeout_s", 600))
        self.lookahead = bool(lookahead)
        self.seeds = bool(seeds)
        self.search_deadline = search_deadline_s(_t(self.spec, "time_limit_s", None), self.retime_top,
                                                 len(shapes) * len(dtypes), int(_t(self.spec, "repeats", 3)),
                                                 int(_t(self.spec, "retime_round_ms", 1000)), len(workers))
        self.run_id = uuid.uuid4().hex[:12]
        self.owner = {"host": _HOST, "pid": os.getpid(), "run": self.run_id}
        _ACTIVE_RUNS.add(self.run_id)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.events: queue.Queue = queue.Queue()
        self.in_flight = 0
        self.idle = 0
        self.stopped = ""
        self.errors: list[BaseException] = []
        self.summary = TuneSummary(spec_name=self.spec.name, dry_run=False, results_root=tuner.results_root,
                                   study_name=self.name, storage=self.storage_desc, device=self.device)
        self.compiled: dict[tuple, dict] = {}
        self.compiling: dict[tuple, tuple] = {}
        self.index = self._load_index()
        try:
            self.space_size = int(self.space.size())
        except Exception:                               # noqa: BLE001
            self.space_size = None

    # -- state from storage and results -------------------------------------------------------------
    def _load_index(self) -> dict:
        """(config_id, shape, dtype) -> row dict of finished jobs of this spec hash/arch/device."""
        df = self.tn.store.read(self.spec.name)
        idx: dict = {}
        if len(df) == 0:
            return idx
        m = ((df["spec_hash"] == self.tn.spec_hash) & (df["arch"] == self.tn.arch) & (df["device"] == self.device)
             & ~df["dry_run"].fillna(False).astype(bool) & ~df["retimed"].fillna(False).astype(bool)
             & df["status"].isin(FINAL))
        for r in df[m].to_dict("records"):
            idx.setdefault((r["config_id"], r["shape"], r["dtype"]), r)
        return idx

    def _trials(self, states=None):
        return self.study.get_trials(deepcopy=False, states=states)

    @staticmethod
    def _counts(t) -> bool:
        from optuna.trial import TrialState
        if "duplicate_of" in t.user_attrs:
            return False
        if t.state == TrialState.COMPLETE:
            return True
        return t.state == TrialState.PRUNED and t.user_attrs.get("status") not in (None, "pruned")

    def _enqueue_seeds(self) -> None:
        """A fresh study starts from the template's hand-picked configs (those the space allows), so
        the search begins at what is known to be good instead of at random samples."""
        if not self.seeds or self._trials():
            return
        dists = self.space.distributions()
        queued = []
        for cfg in self.tn.template.seed_configs():
            if set(self.space.params) - set(cfg):
                continue                                 # the spec has a parameter the seed does not set
            full = {k: cfg[k] for k in self.space.params}
            if self.space.check(full) is None and full not in queued:    # seeds that differ only outside
                queued.append(full)                                       # the spec's space are one config
                self.study.enqueue_trial({k: v for k, v in full.items() if k in dists}, user_attrs={"seeded": True})

    def _recover(self) -> None:
        """Fail RUNNING trials of dead tuners on this host; re-enqueue interrupted configs."""
        from optuna.trial import TrialState
        now = time.time()
        for t in self._trials((TrialState.RUNNING,)):
            o = t.user_attrs.get("owner")
            stale = (not _owner_alive(t)) if isinstance(o, dict) else (
                t.datetime_start is not None and now - t.datetime_start.timestamp() > 120)
            if stale:
                try:
                    self.study.tell(t.number, state=TrialState.FAIL)
                except Exception:                       # noqa: BLE001 - finished meanwhile
                    pass
        trials = self._trials()
        done = {t.user_attrs.get("config_id") for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)}
        waiting = set()
        for t in trials:
            if t.state == TrialState.WAITING:
                fp = t.system_attrs.get("fixed_params")
                if fp:
                    try:
                        import optuna
                        full = self.space.suggest(optuna.trial.FixedTrial(dict(fp)))
                        waiting.add(self.space.config_id(full))
                    except Exception:                   # noqa: BLE001
                        pass
        for t in trials:
            cid = t.user_attrs.get("config_id")
            if (t.state == TrialState.FAIL and "duplicate_of" not in t.user_attrs and cid and t.params
                    and cid not in done and cid not in waiting):
                self.study.enqueue_trial(dict(t.params), user_attrs={"requeued_from": t.number})
                waiting.add(cid)

    @contextlib.contextmanager
    def _claim_lock(self):
        """Claims are serialized: between this process's threads by a lock, between processes sharing the
        study by the storage's claim lock (`storage_claims`: flock beside a journal or SQLite file, an
        advisory lock in PostgreSQL, else a file under tuning_root)."""
        with self.claim_mutex, self.claims():
            yield

    def _counted(self) -> int:
        return sum(1 for t in self._trials() if self._counts(t))

    def _exhausted(self) -> bool:
        from optuna.trial import TrialState
        if hasattr(self.sampler, "is_exhausted"):
            try:
                if self.sampler.is_exhausted(self.study):
                    return True
            except Exception:                           # noqa: BLE001
                pass
        if self.space_size is None:
            return False
        seen = {t.user_attrs.get("config_id") for t in self._trials((TrialState.COMPLETE, TrialState.PRUNED))
                if t.user_attrs.get("in_space")}           # space.size() counts the configs that pass check
        seen.discard(None)
        return len(seen) >= self.space_size

    # -- the loop -------------------------------------------------------------------------------------
    def run(self) -> TuneSummary:
        try:
            return self._run()
        finally:
            _ACTIVE_RUNS.discard(self.run_id)

    def _run(self) -> TuneSummary:
        self._recover()
        self._enqueue_seeds()
        self.t0 = time.monotonic()
        start_counted = self._counted()
        self.summary.trials = start_counted
        if self.tn.progress:
            self._say_start(start_counted)
        threads = self._start(self._thread, "tune-gpu")
        try:
            self._wait(threads)
            if self.errors:
                raise self.errors[0]
            self._retime()
        except KeyboardInterrupt:
            self.stop.set()
            self.stopped = "interrupted"
            for w in self.workers:
                w.kill()
            self.pool.close(kill=True)
            for done in threads:
                done.wait(30)
            self.summary.interrupted = True
            self._finish_counts()
            print(f"\ninterrupted: {self.summary.new_trials} trials recorded in {self.storage_desc}, rows under "
                  f"{self.tn.results_root}/; run the same command again to resume", file=sys.stderr, flush=True)
            raise
        self._finish_counts()
        self._best()
        if self.tn.progress:
            self.tn._say(self._final_message())
        return self.summary

    def _finish_counts(self) -> None:
        self.summary.trials = self._counted()
        self.summary.stopped = self.stopped or "trials"

    def _thread(self, worker) -> None:
        """One GPU's loop. With lookahead, the next trial is asked, claimed, checked for legality and
        sent to the compile pool before this one is measured, so compiling overlaps measuring (TPE
        runs with constant_liar, so it proposes around the trial still running)."""
        backoff = 0.0
        current = ahead = None
        try:
            while not self.stop.is_set():
                current, ahead = ahead, None
                if current is None:
                    current, backoff = self._prepare_next(backoff)
                    if current is None:
                        return
                if self.lookahead:
                    ahead, backoff = self._prepare_next(backoff, wait=False)
                (trial, config, cid), current = current, None
                try:
                    self._measure(trial, worker, config, cid)
                except BaseException:
                    self._abandon(trial)
                    raise
                with self.lock:
                    self.in_flight -= 1
        except BaseException as e:                      # noqa: BLE001 - handed to the main thread
            self.errors.append(e)
            self.stop.set()
        finally:
            for item in (current, ahead):               # leave no RUNNING trial behind
                if item is not None:
                    self._abandon(item[0])

    def _abandon(self, trial) -> None:
        """A trial taken but not measured (interrupted, stopped): FAIL, so the next run re-enqueues it."""
        from optuna.trial import TrialState
        try:
            self.study.tell(trial, state=TrialState.FAIL)
        except Exception:                               # noqa: BLE001 - already told
            pass
        with self.lock:
            self.in_flight -= 1

    def _prepare_next(self, backoff: float, wait: bool = True):
        """Ask trials until one needs measuring: ((trial, config, config_id), backoff), or (None, backoff)
        when the run is over (or, with wait=False, when the budget is taken by trials in flight).
        Trials answered on the way (pruned, duplicates) are told here."""
        while not self.stop.is_set():
            if backoff:                                 # another worker holds what the sampler proposes
                self.stop.wait(backoff)
            trial = self._next_trial(wait)
            if trial is None:
                return None, backoff
            try:
                got = self._prepare(trial)
            except BaseException:
                self._abandon(trial)
                raise
            if isinstance(got, tuple):
                return (trial, *got), 0.0
            with self.lock:
                self.in_flight -= 1
            if got == "claimed" and not wait:
                return None, 0.0                        # the lookahead does not back off: measure first
            backoff = min(1.0, max(0.05, backoff * 2)) if got == "claimed" else 0.0
        return None, backoff

    def _next_trial(self, wait: bool = True):
        """A new trial, or None when the run is over. When the budget is only taken by trials in flight
        (which may still be pruned), wait for them, unless wait=False (the lookahead's ask)."""
        while not self.stop.is_set():
            with self.lock:
                reason = None
                counted = self._counted()
                if counted + self.in_flight >= self.budget:
                    reason = "trials"
                elif self.search_deadline is not None and time.monotonic() - self.t0 > self.search_deadline:
                    reason = "time_limit"
                elif self.idle >= MAX_IDLE_PROPOSALS:
                    reason = "idle"
                elif self._exhausted():
                    reason = "exhausted"
                if reason is None:
                    self.in_flight += 1
                    return self.study.ask()
                if reason != "trials" or self.in_flight == 0:
                    self.stopped = self.stopped or reason
                    return None
                if not wait:
                    return None
            time.sleep(0.05)          # others' trials in flight may still be pruned: wait for them
        return None

    def _tell(self, trial, *, value=None, state=None, attrs=None, counted: bool):
        for k, v in (attrs or {}).items():
            trial.set_user_attr(k, v)
        if state is None:
            self.study.tell(trial, value)
        else:
            self.study.tell(trial, state=state)
        with self.lock:
            self.idle = 0 if counted else self.idle + 1

    def _prepare(self, trial):
        """Suggest, claim, check legality and start compiling a trial's config: (config, config_id) when
        it needs measuring, else "duplicate" / "claimed" / "pruned" (the trial is already told)."""
        from optuna.trial import TrialState
        trial.set_user_attr("owner", self.owner)
        config = self.space.suggest(trial)
        cid = self.space.config_id(config)
        trial.set_user_attr("in_space", self.space.check(config) is None)
        try:
            trial.set_user_attr("config", json.loads(json.dumps(config)))
        except (TypeError, ValueError):
            pass
        # claim, under the claim lock: a finished trial of this config answers for it, a running one of a
        # live worker keeps it; else this trial takes it (config_id is only ever set under the lock)
        with self._claim_lock():
            for t in self._trials():
                if t.number == trial.number or t.user_attrs.get("config_id") != cid:
                    continue
                if t.state == TrialState.COMPLETE and "duplicate_of" not in t.user_attrs:
                    self.summary.duplicates += 1
                    self._tell(trial, value=t.value, counted=False,
                               attrs={"config_id": cid, "duplicate_of": t.number, "status": "ok"})
                    self.events.put(("duplicate", trial.number, cid, t.value))
                    return "duplicate"
                if t.state == TrialState.PRUNED and "duplicate_of" not in t.user_attrs:
                    self.summary.duplicates += 1
                    self._tell(trial, state=TrialState.PRUNED, counted=False,
                               attrs={"config_id": cid, "duplicate_of": t.number,
                                      "status": t.user_attrs.get("status", "pruned")})
                    self.events.put(("duplicate", trial.number, cid, None))
                    return "duplicate"
                if t.state == TrialState.RUNNING and _owner_alive(t):
                    self.summary.duplicates += 1
                    self._tell(trial, state=TrialState.FAIL, counted=False,
                               attrs={"config_id": cid, "duplicate_of": t.number, "status": "claimed"})
                    return "claimed"
            trial.set_user_attr("config_id", cid)
        v = self.tn.legality.verdict(config, cid, self.shapes, self.dtypes)
        if not v.ok:
            key = (cid, shape_str(v.shape or self.shapes[0]), v.dtype or self.dtypes[0])
            if key not in self.index:
                row = self.tn._row(env=self.env, config=config, config_id=cid, shape=v.shape or self.shapes[0],
                                   dtype=v.dtype or self.dtypes[0], status=v.status, reason=v.reason,
                                   trial=trial.number, study=self.name)
                self.tn.store.write(row)
                self.index[key] = row
                self.summary.rows_written += 1
            self._finish(trial, cid, v.status, v.reason, None, config)
            return "pruned"
        self._precompile(config, cid)
        return config, cid

    def _measure(self, trial, worker, config, cid) -> None:
        """Run a prepared trial's jobs on `worker` and tell the study its value or failure."""
        from optuna.trial import TrialState
        rows = []
        for shape in self.shapes:
            for dtype in self.dtypes:
                row = self._job(trial, worker, config, cid, shape, dtype)
                if row is None:                        # interrupted
                    self._tell(trial, state=TrialState.FAIL, attrs={"interrupted": True}, counted=False)
                    return
                rows.append(row)
                if row["status"] != "ok":
                    self._finish(trial, cid, row["status"], row.get("reason"), None, config)
                    return
        self._finish(trial, cid, "ok", None, self._value(rows), config)

    def _value(self, rows) -> float:
        if self.tn.maximize:
            return _geomean(max(float(r["ratio"]), 1e-12) for r in rows)
        return _geomean(max(float(r["median_ms"]), 1e-12) for r in rows)

    def _finish(self, trial, cid, status, reason, value, config=None) -> None:
        from optuna.trial import TrialState
        attrs = {"status": status}
        if reason:
            attrs["reason"] = str(reason)[:1000]
        if status == "ok":
            self._tell(trial, value=value, attrs=attrs, counted=True)
        else:
            self._tell(trial, state=TrialState.PRUNED, attrs=attrs, counted=status != "pruned")
        with self.lock:
            self.summary.statuses[status] = self.summary.statuses.get(status, 0) + 1
            if status != "pruned":
                self.summary.new_trials += 1
            done, elapsed = self.summary.trials + self.summary.new_trials, time.monotonic() - self.t0
            new = self.summary.new_trials
        self.events.put(("trial", trial.number, cid, status, value, reason, done, new, elapsed, config))

    def _precompile(self, config, cid) -> None:
        """Start the compiles of every job of this config at once (the pool compiles them in parallel)."""
        arch = self.tn.arch
        for shape in self.shapes:
            for dtype in self.dtypes:
                if (cid, shape_str(shape), dtype) in self.index:
                    continue
                ckey = self.tn.template.compile_key(cid, shape, dtype, arch)
                if ckey not in self.compiled and ckey not in self.compiling:
                    self.compiling[ckey] = self.pool.submit(self.spec, config, shape, dtype, arch)

    def _job(self, trial, worker, config, cid, shape, dtype, retime: bool = False) -> dict | None:
        """One (config, shape, dtype): looked up, or compiled + measured and written. None if interrupted."""
        key = (cid, shape_str(shape), dtype)
        if not retime and key in self.index:
            with self.lock:
                self.summary.reused += 1
            return self.index[key]
        arch = self.tn.arch
        ckey = self.tn.template.compile_key(cid, shape, dtype, arch)
        comp = self.compiled.get(ckey)
        if comp is None:
            handle = self.compiling.pop(ckey, None)
            comp = self.pool.wait(handle) if handle is not None else None
            if (comp is None or comp.get("_broken")) and not self.stop.is_set():
                comp = self.pool.compile(self.spec, config, shape, dtype, arch)   # (its pool was replaced)
            if self.stop.is_set():
                return None
            comp.pop("_broken", None)
            self.compiled[ckey] = comp
        cinfo = {k: comp.get(k) for k in ("compile_s", "registers", "spills", "shared_bytes")}
        if comp["status"] != "ok":
            res = {"status": comp["status"], "reason": comp.get("reason")}
        else:
            job = {"spec": self.spec, "config": config, "config_id": cid, "shape": tuple(shape), "dtype": dtype,
                   "arch": arch, "seed": _seed(_t(self.spec, "seed", 0), trial if retime else trial.number, cid,
                                               shape, dtype, retime),
                   "rtol": float(_t(self.spec, "rtol", 1e-2)), "atol": float(_t(self.spec, "atol", 0.0)),
                   "repeats": int(_t(self.spec, "repeats", 3)),
                   "rep_ms": int(_t(self.spec, "retime_round_ms", 1000) if retime else _t(self.spec, "round_ms", 100)),
                   "baseline": _t(self.spec, "baseline", "torch") not in (False, "none", ""),
                   "purpose": "retime" if retime else "trial", "device_index": worker.device_index}
            res = worker.run(job, self.trial_timeout)
            if self.stop.is_set():
                return None
            if not retime:
                with self.lock:
                    self.summary.measured += 1
        res = dict(res)
        status = res.get("status") if res.get("status") in FINAL else "runtime_error"
        measured = {k: res.get(k) for k in ("median_ms", "p10_ms", "p90_ms", "baseline_ms", "ratio", "max_err",
                                           "tflops", "gbps", "roofline_fraction")}
        if measured["ratio"] is None and measured["baseline_ms"] and measured["median_ms"]:
            measured["ratio"] = measured["baseline_ms"] / measured["median_ms"]
        row = self.tn._row(env=worker.env or self.env, config=config, config_id=cid, shape=shape, dtype=dtype,
                           status=status,
                           reason=res.get("reason"), trial=trial if retime else trial.number, study=self.name,
                           retimed=retime, **cinfo, **measured)
        self.tn.store.write(row)
        with self.lock:
            self.summary.rows_written += 1
        if not retime:
            self.index[key] = row
        return row

    # -- retiming and the result -----------------------------------------------------------------------
    def _top(self, k: int | None) -> list:
        """The COMPLETE trials best first, one per config, at most `k` of them (None: all)."""
        from optuna.trial import TrialState
        done = [t for t in self._trials((TrialState.COMPLETE,)) if "duplicate_of" not in t.user_attrs]
        done.sort(key=lambda t: -t.value if self.tn.maximize else t.value)
        out, seen = [], set()
        for t in done:
            cid = t.user_attrs.get("config_id")
            if cid in seen:
                continue
            seen.add(cid)
            out.append(t)
            if k is not None and len(out) >= k:
                break
        return out

    def _case_winners(self, df, top_ids: set) -> list:
        """[(trial, (shape, dtype))]: each case's fastest config in this study's first timings, where it
        is not among the `top_ids` re-timed on every case."""
        import pandas as pd
        if not len(df):
            return []
        rows = df[(df["study"] == self.name) & (df["spec_hash"] == self.tn.spec_hash) & (df["status"] == "ok")
                  & ~df["retimed"].fillna(False).astype(bool) & ~df["dry_run"].fillna(False).astype(bool)]
        trials = {t.user_attrs.get("config_id"): t for t in self._top(None)}
        out = []
        for shape in self.shapes:
            for dtype in self.dtypes:
                case = rows[(rows["shape"] == shape_str(shape)) & (rows["dtype"] == dtype)]
                if not len(case):
                    continue
                key = pd.to_numeric(case["ratio"] if self.tn.maximize else -case["median_ms"], errors="coerce").dropna()
                if not len(key):
                    continue
                cid = case.loc[key.idxmax(), "config_id"]
                if cid not in top_ids and cid in trials:
                    out.append((trials[cid], (tuple(shape), dtype)))
        return out

    def _retime(self) -> None:
        if self.retime_top <= 0 or self.stop.is_set():
            return
        top = self._top(self.retime_top)
        if not top:
            return
        df = self.tn.store.read(self.spec.name)
        have = set()
        if len(df):
            m = df["retimed"].fillna(False).astype(bool) & (df["spec_hash"] == self.tn.spec_hash) & \
                (df["device"] == self.device) & (df["study"] == self.name)
            have = set(df[m]["config_id"])
        every_case = [(tuple(shape), dtype) for shape in self.shapes for dtype in self.dtypes]
        # the top on every case; each case's winner outside it on its own case only (not a candidate for the best)
        jobs = [(t, every_case) for t in top] + \
               [(t, [case]) for t, case in self._case_winners(df, {t.user_attrs.get("config_id") for t in top})]
        if self.summary.measured == 0:               # nothing new: retime only what never was
            jobs = [(t, cases) for t, cases in jobs if t.user_attrs.get("config_id") not in have]
        todo: queue.Queue = queue.Queue()
        for job in jobs:
            todo.put(job)
        results = []

        def run(worker):
            while not self.stop.is_set():
                try:
                    t, cases = todo.get_nowait()
                except queue.Empty:
                    return
                cfg = self._config_of(t)
                rows = []
                for shape, dtype in cases:
                    r = self._job(t.number, worker, cfg, t.user_attrs["config_id"], shape, dtype, retime=True)
                    if r is None:
                        return
                    rows.append(r)
                if cases is not every_case:
                    self.events.put(("retime", t.number, t.user_attrs["config_id"], None if rows[0]["status"] != "ok"
                                     else self._value(rows), cases[0]))
                    continue
                ok = all(r["status"] == "ok" for r in rows)
                results.append({"config_id": t.user_attrs["config_id"], "config": cfg, "trial": t.number,
                                "first_value": t.value, "value": self._value(rows) if ok else None,
                                "status": "ok" if ok else next(r["status"] for r in rows if r["status"] != "ok")})
                self.events.put(("retime", t.number, t.user_attrs["config_id"], results[-1]["value"]))

        self._wait(self._start(run, "tune-retime"), bar=False)
        results.sort(key=lambda r: (r["value"] is None, -(r["value"] or 0) if self.tn.maximize else (r["value"] or 0)))
        self.summary.retimed = results
        try:
            self.study.set_user_attr("retimed", [{k: r[k] for k in ("config_id", "trial", "value")} for r in results])
        except Exception:                               # noqa: BLE001
            pass

    def _config_of(self, t) -> dict:
        import optuna
        if isinstance(t.user_attrs.get("config"), dict):
            return dict(t.user_attrs["config"])
        fixed = optuna.trial.FixedTrial(dict(t.params), number=t.number)
        return self.space.suggest(fixed)

    def _best(self) -> None:
        s = self.summary
        ok = [r for r in s.retimed if r["value"] is not None]
        if ok:
            b = ok[0]
            s.best_config, s.best_config_id, s.best_value, s.best_trial = b["config"], b["config_id"], b["value"], \
                b["trial"]
            return
        top = self._top(1)
        if top:
            t = top[0]
            s.best_config, s.best_config_id, s.best_value, s.best_trial = self._config_of(t), \
                t.user_attrs.get("config_id"), t.value, t.number

    # -- progress -----------------------------------------------------------------------------------------
    def _say_start(self, counted: int) -> None:
        self.tn._say(f"tuning {self.spec.name} on {self.device} x{len(self.workers)}: study {self.name} "
                     f"({self.storage_desc}), {counted}/{self.budget} trials done, sampler "
                     f"{_t(self.spec, 'sampler', 'tpe')}, objective {self.tn.objective}")

    def _best_so_far(self):
        try:
            return self.study.best_value
        except ValueError:
            return None

    def _start(self, target, name: str) -> list[threading.Event]:
        """One daemon thread per GPU worker running target(worker); each sets its Event when it ends.
        The events, not Thread.join, say when a thread is done: on Python 3.11 a Ctrl-C that lands in
        Thread.join marks a still-running thread as stopped, so a later join would not wait for it to
        tell its trials failed (and the study would keep RUNNING trials)."""
        events = []
        for w in self.workers:
            done = threading.Event()

            def run(w=w, done=done):
                try:
                    target(w)
                finally:
                    done.set()
            threading.Thread(target=run, daemon=True, name=f"{name}{w.device_index}").start()
            events.append(done)
        return events

    def _wait(self, threads: list[threading.Event], bar: bool = True) -> None:
        """Wait for the threads, showing progress (rich on a terminal, plain lines otherwise)."""
        want_bar, bar = bar, None
        if want_bar and self.tn.progress and sys.stdout.isatty():
            try:
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeRemainingColumn,
                )
                bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                               TimeRemainingColumn(), TextColumn("{task.fields[best]}"), transient=False)
            except ImportError:
                bar = None
        task = None
        if bar is not None:
            bar.start()
            task = bar.add_task(self.spec.name, total=self.budget, completed=self.summary.trials, best="")
        try:
            while not all(done.is_set() for done in threads):
                next(d for d in threads if not d.is_set()).wait(0.1)
                self._drain(bar, task)
            self._drain(bar, task)
        finally:
            if bar is not None:
                bar.stop()

    def _drain(self, bar, task) -> None:
        while True:
            try:
                ev = self.events.get_nowait()
            except queue.Empty:
                return
            if not self.tn.progress:
                continue
            best = self._best_so_far()
            best_s = f"best {best:.4g}" if best is not None else "best -"
            if bar is not None:
                if ev[0] == "trial" and ev[3] != "pruned":
                    bar.update(task, completed=ev[6])
                    if ev[3] != "ok":                   # failures stay visible above the bar
                        why = str(ev[5] or "").splitlines()[0][:120] if ev[5] else ""
                        bar.console.print(f"trial {ev[1]} {ev[3]}: {self._short(ev[9], ev[2])} {why}",
                                          markup=False, highlight=False)
                bar.update(task, best=best_s)
                continue
            if ev[0] == "trial":
                _, n, cid, status, value, reason, done, new, el, config = ev
                left = max(0, self.budget - done)
                eta = f" eta {el / new * left:.0f}s" if new and status != "pruned" else ""
                v = f" {value:.4g}" if value is not None else ""
                why = f" ({str(reason).splitlines()[0][:120]})" if reason and status != "ok" else ""
                self.tn._say(f"[{done}/{self.budget}] trial {n} {status}{v} {self._short(config, cid)}{why} | "
                             f"{best_s}{eta}")
            elif ev[0] == "retime":
                n, cid, value = ev[1:4]
                where = "" if len(ev) < 5 else f" on {shape_str(ev[4][0])} {ev[4][1]}"
                self.tn._say(f"retimed trial {n} {cid}{where}: {value if value is None else format(value, '.4g')}")

    def _short(self, config, cid) -> str:
        """The tunable parameters of a config, for a progress line."""
        if not isinstance(config, dict):
            return cid
        try:
            names = list(self.space.tunable())
        except Exception:                               # noqa: BLE001
            names = list(config)
        return " ".join(f"{k}={config[k]}" for k in names if k in config) or cid

    def _final_message(self) -> str:
        s = self.summary
        lines = [f"{self.spec.name}: {s.trials}/{self.budget} trials in study {self.name} (stopped: {s.stopped}); "
                 f"this run measured {s.measured} jobs, reused {s.reused}, duplicates {s.duplicates}, "
                 f"{s.rows_written} rows"]
        if s.best_config_id:
            lines.append(f"best: {s.best_config_id} = {s.best_value:.4g} (trial {s.best_trial})")
        return "\n".join(lines)
