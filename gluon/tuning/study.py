"""One Optuna study of a `tune()` run (`_Study`; the module docstring of gluon.tuning.tuner describes the
whole): its name, storage, sampler and budget; the results rows already recorded for it (`index`); at
the start the RUNNING trials of dead tuners failed and interrupted configs re-enqueued (`_recover`), a
fresh study seeded with the template's configs (`_enqueue_seeds`); then its parts run:

    trials.py    the GPU threads' trial lifecycle (ask, claim, legality, measure, tell)
    jobs.py      one (config, shape, dtype): looked up, or compiled and measured, and written
    retime.py    the best configs re-timed at the end, and the summary's best
    progress.py  the threads, and what the user sees meanwhile

They share the study's state through it: `lock` guards the counters and the summary, `stop` ends every
thread, `events` carries progress to the main thread."""
from __future__ import annotations

import math
import os
import queue
import sys
import threading
import time
import uuid

from .interrupt import CtrlC, noted
from .jobs import FINAL, _Jobs
from .progress import _Progress
from .retime import _Retiming
from .sampler import make_sampler
from .settings import _t
from .storage import open_storage, storage_claims, study_name_for
from .template import template_seeds
from .trials import _ACTIVE_RUNS, _HOST, _owner_alive, _TrialLoop
from .tune_summary import TuneSummary


def _retime_jobs(retime_top: int, cases: int, workers: int) -> int:
    """Jobs a GPU runs when re-timing: the `retime_top` configs on every case and up to one case winner a case."""
    return math.ceil((retime_top + 1) * cases / max(1, workers))


def _retime_job_s(repeats: int, round_ms: int) -> float:
    """A re-timing job's estimated length: `repeats` rounds of both sides, and a second for inputs and the check."""
    return repeats * 2 * (round_ms / 1000 + 0.05) + 1.0


def retime_round_within(time_limit, retime_top: int, cases: int, repeats: int, retime_round_ms: int,
                        round_ms: int, workers: int) -> int:
    """The re-timing's round length: `retime_round_ms`, or shorter (not below the search's `round_ms`) where the
    re-timing would take more than half of `time_limit` (the decode spec's 24 cases x 4 configs at 1000 ms rounds:
    about 700 s against the default 600 s limit)."""
    if not time_limit or retime_top <= 0:
        return retime_round_ms
    jobs = _retime_jobs(retime_top, cases, workers)
    half = float(time_limit) / 2
    if jobs * _retime_job_s(repeats, retime_round_ms) <= half:
        return retime_round_ms
    fits = int(((half / jobs - 1.0) / (2 * repeats) - 0.05) * 1000)
    return max(round_ms, min(retime_round_ms, fits))


def search_deadline_s(time_limit, retime_top: int, cases: int, repeats: int, retime_round_ms: int,
                      workers: int) -> float | None:
    """Seconds after the start at which the search stops proposing, so that the re-timing that follows
    ends within `time_limit`: the limit less the re-timing's estimated length (its `retime_top` configs
    on every case plus up to one case winner per case, each job `repeats` rounds of both sides of
    `retime_round_ms`, and a second for inputs and the check, spread over the workers); never less than
    half the limit (`retime_round_ms` shortens the rounds so the re-timing fits the other half). None
    without a limit."""
    if not time_limit:
        return None
    limit = float(time_limit)
    if retime_top <= 0:
        return limit
    reserve = _retime_jobs(retime_top, cases, workers) * _retime_job_s(repeats, retime_round_ms)
    return max(limit - reserve, limit / 2)


class _Study:
    """One Optuna study: its state, the start (recover, seeds), the run, and the summary."""

    def __init__(self, tuner, workers, pool, env, shapes, dtypes, *, storage, tuning_root, trials,
                 retime_top, lookahead: bool = True, seeds: bool = True, time_limit_s: float | None = None):
        import optuna
        self.tn = tuner                                 # the _Tuner: spec, template, legality, store, rows
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
        self.sampler = make_sampler(self.spec)
        self.study = optuna.create_study(study_name=self.name, storage=self.storage, sampler=self.sampler,
                                         direction="maximize" if tuner.maximize else "minimize",
                                         load_if_exists=True)
        self.budget = int(trials if trials is not None else _t(self.spec, "trials", 50))
        self.retime_top = int(retime_top if retime_top is not None else _t(self.spec, "retime_top", 0))
        self.trial_timeout = float(_t(self.spec, "trial_timeout_s", 600))
        self.lookahead = bool(lookahead)
        self.seeds = bool(seeds)
        # the time limit: the search, then the re-timing, its rounds shortened where they would not fit
        self.time_limit = time_limit_s                  # the tuner's: the spec's, the caller's, or a per_shape share
        cases, repeats = len(shapes) * len(dtypes), int(_t(self.spec, "repeats", 3))
        self.retime_round_ms = retime_round_within(self.time_limit, self.retime_top, cases, repeats,
                                                   int(_t(self.spec, "retime_round_ms", 1000)),
                                                   int(_t(self.spec, "round_ms", 100)), len(workers))
        self.search_deadline = search_deadline_s(self.time_limit, self.retime_top, cases, repeats,
                                                 self.retime_round_ms, len(workers))
        self.run_id = uuid.uuid4().hex[:12]
        self.owner = {"host": _HOST, "pid": os.getpid(), "run": self.run_id}
        _ACTIVE_RUNS.add(self.run_id)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.ctrl_c = CtrlC()                           # SIGINT while the run waits (interrupt.py)
        self.events: queue.Queue = queue.Queue()
        self.stopped = ""
        self.summary = TuneSummary(spec_name=self.spec.name, dry_run=False, results_root=tuner.results_root,
                                   study_name=self.name, storage=self.storage_desc, device=self.device,
                                   time_limit_s=float(self.time_limit) if self.time_limit else None)
        self.index = self._load_index()
        try:
            self.space_size = int(self.space.size())
        except Exception:                               # noqa: BLE001
            self.space_size = None
        self.jobs = _Jobs(self)
        self.loop = _TrialLoop(self)
        self.retiming = _Retiming(self)
        self.progress = _Progress(self)

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

    def trials(self, states=None):
        return self.study.get_trials(deepcopy=False, states=states)

    @staticmethod
    def _counts(t) -> bool:
        """Whether a trial counts toward the budget: COMPLETE, or PRUNED after legality; never a duplicate."""
        from optuna.trial import TrialState
        if "duplicate_of" in t.user_attrs:
            return False
        if t.state == TrialState.COMPLETE:
            return True
        return t.state == TrialState.PRUNED and t.user_attrs.get("status") not in (None, "pruned")

    def counted(self) -> int:
        return sum(1 for t in self.trials() if self._counts(t))

    def budget_taken(self) -> int:
        """What counts against the budget besides this run's own trials in flight: the counted trials,
        and the RUNNING trials of other live tuners on the study (they will most likely count), so
        tuners sharing a study stop together at the budget instead of each adding its trials in flight."""
        from optuna.trial import TrialState
        taken = 0
        for t in self.trials():
            if self._counts(t):
                taken += 1
            elif t.state == TrialState.RUNNING:
                o = t.user_attrs.get("owner")            # (set with the ask, under the claim lock)
                if isinstance(o, dict) and o.get("run") != self.run_id and _owner_alive(t):
                    taken += 1
        return taken

    def exhausted(self) -> bool:
        from optuna.trial import TrialState
        if hasattr(self.sampler, "is_exhausted"):
            try:
                if self.sampler.is_exhausted(self.study):
                    return True
            except Exception:                           # noqa: BLE001
                pass
        if self.space_size is None:
            return False
        seen = {t.user_attrs.get("config_id") for t in self.trials((TrialState.COMPLETE, TrialState.PRUNED))
                if t.user_attrs.get("in_space")}           # space.size() counts the configs that pass check
        seen.discard(None)
        return len(seen) >= self.space_size

    def _enqueue_seeds(self) -> None:
        """A fresh study starts from the template's hand-picked configs (those the space allows), so
        the search begins at what is known to be good instead of at random samples. A parameter the spec
        fixes takes the spec's value (the pick within the spec's space); a seed that leaves out a parameter the
        spec searches is skipped."""
        if not self.seeds or self.trials():
            return
        dists = self.space.distributions()
        fixed = self.space.fixed()
        queued = []
        for cfg in template_seeds(self.tn.template, self.shapes, self.dtypes):
            if set(self.space.params) - set(cfg) - set(fixed):
                continue                                 # the spec searches a parameter the seed does not set
            full = {k: fixed[k] if k in fixed else cfg[k] for k in self.space.params}
            if self.space.check(full) is None and full not in queued:    # seeds that differ only outside
                queued.append(full)                                       # the spec's space are one config
                self.study.enqueue_trial({k: v for k, v in full.items() if k in dists}, user_attrs={"seeded": True})

    def _recover(self) -> None:
        """Fail RUNNING trials of dead tuners (`_owner_alive`: on this host the process is gone, on another
        it has not marked them alive for a while); re-enqueue interrupted configs."""
        from optuna.trial import TrialState
        now = time.time()
        for t in self.trials((TrialState.RUNNING,)):
            o = t.user_attrs.get("owner")
            stale = (not _owner_alive(t)) if isinstance(o, dict) else (
                t.datetime_start is not None and now - t.datetime_start.timestamp() > 120)
            if stale:
                try:
                    self.study.tell(t.number, state=TrialState.FAIL)
                except Exception:                       # noqa: BLE001 - finished meanwhile
                    pass
        trials = self.trials()
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

    # -- the run -------------------------------------------------------------------------------------
    def run(self) -> TuneSummary:
        done = threading.Event()
        threading.Thread(target=self.loop.heartbeat, args=(done,), daemon=True, name="tune-heartbeat").start()
        try:
            return self._run()
        finally:
            done.set()
            _ACTIVE_RUNS.discard(self.run_id)

    def _run(self) -> TuneSummary:
        self._recover()
        self._enqueue_seeds()
        self.t0 = time.monotonic()
        start_counted = self.counted()
        self.summary.trials = start_counted
        if self.tn.progress:
            self.progress.say_start(start_counted)
        with noted(self.ctrl_c):
            threads = self.progress.start(self.loop.thread, "tune-gpu")
            try:
                self.progress.wait(threads)
                if self.loop.errors:
                    raise self.loop.errors[0]
                self.retiming.retime()
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
        self.retiming.best()
        if self.tn.progress:
            self.tn._say(self.progress.final_message())
        return self.summary

    def _finish_counts(self) -> None:
        self.summary.trials = self.counted()
        self.summary.stopped = self.stopped or "trials"
