"""A study's trials, one GPU thread each (`_TrialLoop.thread`): ask the sampler for a trial while the
budget, the time limit and the space allow (`_next_trial`), prepare it (`_prepare`: suggest the config,
claim it against other threads and tuners, check its legality, start its compiles), measure its jobs
(`_measure`, through gluon.tuning.jobs) and tell the study (`_finish`). With lookahead the next trial is
prepared before the current one is measured.

Who owns a RUNNING trial: its user attr owner = {host, pid, run}; `_owner_alive` says whether that tuner
may still finish it: a live process on this host whose run is in progress, or on another host a tuner
that marked the trial alive (user attr alive_at, every HEARTBEAT_S: `heartbeat`) within STALE_S."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

from .jobs import objective_value
from .template import shape_str

MAX_IDLE_PROPOSALS = 1000
HEARTBEAT_S = 30.0        # how often a tuner marks its trials in flight alive (user attr alive_at)
STALE_S = 600.0           # another host's RUNNING trial not marked alive for this long: its tuner is dead

_HOST = socket.gethostname()
_ACTIVE_RUNS: set[str] = set()          # tune() runs in progress in this process


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_alive(t) -> bool:
    """Whether a RUNNING trial's tuner may still finish it. Another host's: marked alive within STALE_S
    (a machine that died does not keep its configs and its share of the budget for ever; one without
    alive_at, from an older tuner: yes). Unknown owners: yes."""
    o = t.user_attrs.get("owner")
    if not isinstance(o, dict):
        return True
    if o.get("host") != _HOST:
        seen = t.user_attrs.get("alive_at")
        return seen is None or time.time() - float(seen) < STALE_S
    pid = int(o.get("pid", -1))
    if pid == os.getpid():
        return o.get("run") in _ACTIVE_RUNS
    return _pid_alive(pid)


class _TrialLoop:
    """The trial lifecycle of one study (`study` is its `_Study`). `in_flight` (trials asked and not yet
    told) and `idle` (proposals in a row that counted nothing) are guarded by the study's lock; the
    threads' exceptions are kept in `errors` for the main thread."""

    def __init__(self, study):
        self.st = study
        self.claim_mutex = threading.Lock()
        self.in_flight = 0
        self.mine: dict = {}                   # this run's trials in flight by number, for the heartbeat
        self.idle = 0
        self.errors: list[BaseException] = []

    def heartbeat(self, done: threading.Event) -> None:
        """Until `done`: every HEARTBEAT_S mark this run's trials in flight alive, so that tuners on other
        hosts tell them from a dead tuner's (`_owner_alive`)."""
        while not done.wait(HEARTBEAT_S):
            with self.st.lock:
                trials = list(self.mine.values())
            for trial in trials:
                try:
                    trial.set_user_attr("alive_at", time.time())
                except Exception:                       # noqa: BLE001 - told meanwhile
                    pass

    def thread(self, worker) -> None:
        """One GPU's loop. With lookahead, the next trial is asked, claimed, checked for legality and
        sent to the compile pool before this one is measured, so compiling overlaps measuring (TPE
        runs with constant_liar, so it proposes around the trial still running)."""
        st = self.st
        backoff = 0.0
        current = ahead = None
        try:
            while not st.stop.is_set():
                current, ahead = ahead, None
                if current is None:
                    current, backoff = self._prepare_next(backoff)
                    if current is None:
                        return
                if st.lookahead:
                    ahead, backoff = self._prepare_next(backoff, wait=False)
                (trial, config, cid), current = current, None
                try:
                    self._measure(trial, worker, config, cid)
                except BaseException:
                    self._abandon(trial)
                    raise
                with st.lock:
                    self.in_flight -= 1
        except BaseException as e:                      # noqa: BLE001 - handed to the main thread
            self.errors.append(e)
            st.stop.set()
        finally:
            for item in (current, ahead):               # leave no RUNNING trial behind
                if item is not None:
                    self._abandon(item[0])

    def _abandon(self, trial) -> None:
        """A trial taken but not measured (interrupted, stopped): FAIL, so the next run re-enqueues it."""
        from optuna.trial import TrialState
        try:
            self.st.study.tell(trial, state=TrialState.FAIL)
        except Exception:                               # noqa: BLE001 - already told
            pass
        with self.st.lock:
            self.in_flight -= 1
            self.mine.pop(trial.number, None)

    def _prepare_next(self, backoff: float, wait: bool = True):
        """Ask trials until one needs measuring: ((trial, config, config_id), backoff), or (None, backoff)
        when the run is over (or, with wait=False, when the budget is taken by trials in flight).
        Trials answered on the way (pruned, duplicates) are told here."""
        st = self.st
        while not st.stop.is_set():
            if backoff:                                 # another worker holds what the sampler proposes
                st.stop.wait(backoff)
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
            with st.lock:
                self.in_flight -= 1
            if got == "claimed" and not wait:
                return None, 0.0                        # the lookahead does not back off: measure first
            backoff = min(1.0, max(0.05, backoff * 2)) if got == "claimed" else 0.0
        return None, backoff

    def _next_trial(self, wait: bool = True):
        """A new trial, or None when the run is over. When the budget is only taken by trials in flight
        (which may still be pruned), wait for them, unless wait=False (the lookahead's ask). The budget
        check, the ask and the trial's owner are one step under the claim lock, so tuners sharing the
        study see each other's trials in flight and together stop at the budget."""
        st = self.st
        while not st.stop.is_set():
            with self._claim_lock(), st.lock:
                reason = None
                if st.budget_taken() + self.in_flight >= st.budget:
                    reason = "trials"
                elif st.search_deadline is not None and time.monotonic() - st.t0 > st.search_deadline:
                    reason = "time_limit"
                elif self.idle >= MAX_IDLE_PROPOSALS:
                    reason = "idle"
                elif st.exhausted():
                    reason = "exhausted"
                if reason is None:
                    self.in_flight += 1
                    trial = st.study.ask()
                    trial.set_user_attr("owner", st.owner)     # from here on the other tuners count it
                    trial.set_user_attr("alive_at", time.time())
                    self.mine[trial.number] = trial
                    return trial
                if reason != "trials" or self.in_flight == 0:
                    st.stopped = st.stopped or reason
                    return None
                if not wait:
                    return None
            time.sleep(0.05)          # others' trials in flight may still be pruned: wait for them
        return None

    def _tell(self, trial, *, value=None, state=None, attrs=None, counted: bool):
        for k, v in (attrs or {}).items():
            trial.set_user_attr(k, v)
        if state is None:
            self.st.study.tell(trial, value)
        else:
            self.st.study.tell(trial, state=state)
        with self.st.lock:
            self.idle = 0 if counted else self.idle + 1
            self.mine.pop(trial.number, None)

    def _prepare(self, trial):
        """Suggest, claim, check legality and start compiling a trial's config: (config, config_id) when
        it needs measuring, else "duplicate" / "claimed" / "pruned" (the trial is already told)."""
        config, cid = self._suggest(trial)
        taken = self._claim(trial, cid)
        if taken is not None:
            return taken
        if not self._legal(trial, config, cid):
            return "pruned"
        self.st.jobs.precompile(config, cid)
        return config, cid

    def _suggest(self, trial) -> tuple[dict, str]:
        """The trial's config and config_id; its user attrs in_space and config."""
        space = self.st.space
        config = space.suggest(trial)
        cid = space.config_id(config)
        trial.set_user_attr("in_space", space.check(config) is None)
        try:
            trial.set_user_attr("config", json.loads(json.dumps(config)))
        except (TypeError, ValueError):
            pass
        return config, cid

    @contextlib.contextmanager
    def _claim_lock(self):
        """Claims are serialized: between this process's threads by a lock, between processes sharing the
        study by the storage's claim lock (`storage_claims`: flock beside a journal or SQLite file, an
        advisory lock in PostgreSQL, else a file under tuning_root)."""
        with self.claim_mutex, self.st.claims():
            yield

    def _claim(self, trial, cid) -> str | None:
        """Claim, under the claim lock: a finished trial of this config answers for it ("duplicate"), a
        running one of a live worker keeps it ("claimed"); else this trial takes it (None; config_id is
        only ever set under the lock)."""
        from optuna.trial import TrialState
        st = self.st
        with self._claim_lock():
            for t in st.trials():
                if t.number == trial.number or t.user_attrs.get("config_id") != cid:
                    continue
                if t.state == TrialState.COMPLETE and "duplicate_of" not in t.user_attrs:
                    st.summary.duplicates += 1
                    self._tell(trial, value=t.value, counted=False,
                               attrs={"config_id": cid, "duplicate_of": t.number, "status": "ok"})
                    st.events.put(("duplicate", trial.number, cid, t.value))
                    return "duplicate"
                if t.state == TrialState.PRUNED and "duplicate_of" not in t.user_attrs:
                    st.summary.duplicates += 1
                    self._tell(trial, state=TrialState.PRUNED, counted=False,
                               attrs={"config_id": cid, "duplicate_of": t.number,
                                      "status": t.user_attrs.get("status", "pruned")})
                    st.events.put(("duplicate", trial.number, cid, None))
                    return "duplicate"
                if t.state == TrialState.RUNNING and _owner_alive(t):
                    st.summary.duplicates += 1
                    self._tell(trial, state=TrialState.FAIL, counted=False,
                               attrs={"config_id": cid, "duplicate_of": t.number, "status": "claimed"})
                    return "claimed"
            trial.set_user_attr("config_id", cid)
        return None

    def _legal(self, trial, config, cid) -> bool:
        """Whether the config passes legality on the study's cases; if not, the pruned row is written
        (once per config and case) and the trial told."""
        st = self.st
        v = st.tn.legality.verdict(config, cid, st.shapes, st.dtypes)
        if v.ok:
            return True
        key = (cid, shape_str(v.shape or st.shapes[0]), v.dtype or st.dtypes[0])
        if key not in st.index:
            row = st.tn._row(env=st.env, config=config, config_id=cid, shape=v.shape or st.shapes[0],
                             dtype=v.dtype or st.dtypes[0], status=v.status, reason=v.reason,
                             trial=trial.number, study=st.name)
            st.tn.store.write(row)
            st.index[key] = row
            st.summary.rows_written += 1
        self._finish(trial, cid, v.status, v.reason, None, config)
        return False

    def _measure(self, trial, worker, config, cid) -> None:
        """Run a prepared trial's jobs on `worker` and tell the study its value or failure."""
        from optuna.trial import TrialState
        st = self.st
        rows = []
        for shape in st.shapes:
            for dtype in st.dtypes:
                row = st.jobs.run(trial, worker, config, cid, shape, dtype)
                if row is None:                        # interrupted
                    self._tell(trial, state=TrialState.FAIL, attrs={"interrupted": True}, counted=False)
                    return
                rows.append(row)
                if row["status"] != "ok":
                    self._finish(trial, cid, row["status"], row.get("reason"), None, config)
                    return
        self._finish(trial, cid, "ok", None, objective_value(rows, st.tn.maximize), config)

    def _finish(self, trial, cid, status, reason, value, config=None) -> None:
        from optuna.trial import TrialState
        st = self.st
        attrs = {"status": status}
        if reason:
            attrs["reason"] = str(reason)[:1000]
        if status == "ok":
            self._tell(trial, value=value, attrs=attrs, counted=True)
        else:
            self._tell(trial, state=TrialState.PRUNED, attrs=attrs, counted=status != "pruned")
        with st.lock:
            st.summary.statuses[status] = st.summary.statuses.get(status, 0) + 1
            if status != "pruned":
                st.summary.new_trials += 1
            done, elapsed = st.summary.trials + st.summary.new_trials, time.monotonic() - st.t0
            new = st.summary.new_trials
        st.events.put(("trial", trial.number, cid, status, value, reason, done, new, elapsed, config))
