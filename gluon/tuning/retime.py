"""The end of a study: the `retime_top` best configs measured again on every case (fresh inputs, longer
rounds, rows with retimed=True), each case's fastest config outside them again on its own case, and the
summary's best chosen on the re-timed values (else the best trial).

A case winner is re-timed because `gluon build --best` serves every (shape, dtype) the best of its
re-timed configs (results.summary): a config that wins one shape but not the geometric mean is chosen
there only if it was re-timed there."""
from __future__ import annotations

import queue
import time

from .jobs import objective_value
from .template import shape_str


class _Retiming:
    """Re-timing and the best config of one study (`study` is its `_Study`)."""

    def __init__(self, study):
        self.st = study

    def top(self, k: int | None) -> list:
        """The COMPLETE trials best first, one per config, at most `k` of them (None: all)."""
        from optuna.trial import TrialState
        done = [t for t in self.st.trials((TrialState.COMPLETE,)) if "duplicate_of" not in t.user_attrs]
        done.sort(key=lambda t: -t.value if self.st.tn.maximize else t.value)
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

    def case_winners(self, df, top_ids: set) -> list:
        """[(trial, (shape, dtype))]: each case's fastest config in this study's first timings, where it
        is not among the `top_ids` re-timed on every case."""
        import pandas as pd
        st = self.st
        if not len(df):
            return []
        rows = df[(df["study"] == st.name) & (df["spec_hash"] == st.tn.spec_hash) & (df["status"] == "ok")
                  & ~df["retimed"].fillna(False).astype(bool) & ~df["dry_run"].fillna(False).astype(bool)]
        trials = {t.user_attrs.get("config_id"): t for t in self.top(None)}
        out = []
        for shape in st.shapes:
            for dtype in st.dtypes:
                case = rows[(rows["shape"] == shape_str(shape)) & (rows["dtype"] == dtype)]
                if not len(case):
                    continue
                key = pd.to_numeric(case["ratio"] if st.tn.maximize else -case["median_ms"], errors="coerce").dropna()
                if not len(key):
                    continue
                cid = case.loc[key.idxmax(), "config_id"]
                if cid not in top_ids and cid in trials:
                    out.append((trials[cid], (tuple(shape), dtype)))
        return out

    def retime(self) -> None:
        st = self.st
        if st.retime_top <= 0 or st.stop.is_set():
            return
        top = self.top(st.retime_top)
        if not top:
            return
        every_case = [(tuple(shape), dtype) for shape in st.shapes for dtype in st.dtypes]
        todo: queue.Queue = queue.Queue()
        for job in self._jobs(top, every_case):
            todo.put(job)
        results = []
        threads = st.progress.start(lambda worker: self._run_on(worker, todo, every_case, results), "tune-retime")
        st.progress.wait(threads, bar=False)
        results.sort(key=lambda r: (r["value"] is None, -(r["value"] or 0) if st.tn.maximize else (r["value"] or 0)))
        st.summary.retimed = results
        try:
            st.study.set_user_attr("retimed", [{k: r[k] for k in ("config_id", "trial", "value")} for r in results])
        except Exception:                               # noqa: BLE001
            pass

    def _jobs(self, top: list, every_case: list) -> list:
        """[(trial, cases)]: the top on every case; each case's winner outside it on its own case only
        (not a candidate for the best). A run that measured nothing new retimes only what never was."""
        st = self.st
        df = st.tn.store.read(st.spec.name)
        have = set()
        if len(df):
            m = df["retimed"].fillna(False).astype(bool) & (df["spec_hash"] == st.tn.spec_hash) & \
                (df["device"] == st.device) & (df["study"] == st.name)
            have = set(df[m]["config_id"])
        jobs = [(t, every_case) for t in top] + \
               [(t, [case]) for t, case in self.case_winners(df, {t.user_attrs.get("config_id") for t in top})]
        if st.summary.measured == 0:                 # nothing new: retime only what never was
            jobs = [(t, cases) for t, cases in jobs if t.user_attrs.get("config_id") not in have]
        return jobs

    def _past_time_limit(self) -> bool:
        st = self.st
        return bool(st.time_limit) and time.monotonic() - st.t0 > float(st.time_limit)

    def _run_on(self, worker, todo: queue.Queue, every_case: list, results: list) -> None:
        """One GPU's thread: re-time queued (trial, cases) until none is left (or the run stops, or the time
        limit has passed: what is left keeps its first timings, counted in `retime_skipped`)."""
        st = self.st
        while not st.stop.is_set():
            try:
                t, cases = todo.get_nowait()
            except queue.Empty:
                return
            if self._past_time_limit():
                with st.lock:
                    st.summary.retime_skipped += 1
                continue
            cfg = self.config_of(t)
            rows = []
            for shape, dtype in cases:
                r = st.jobs.run(t.number, worker, cfg, t.user_attrs["config_id"], shape, dtype, retime=True)
                if r is None:
                    return
                rows.append(r)
            if cases is not every_case:
                st.events.put(("retime", t.number, t.user_attrs["config_id"], None if rows[0]["status"] != "ok"
                               else objective_value(rows, st.tn.maximize), cases[0]))
                continue
            ok = all(r["status"] == "ok" for r in rows)
            results.append({"config_id": t.user_attrs["config_id"], "config": cfg, "trial": t.number,
                            "first_value": t.value, "value": objective_value(rows, st.tn.maximize) if ok else None,
                            "status": "ok" if ok else next(r["status"] for r in rows if r["status"] != "ok")})
            st.events.put(("retime", t.number, t.user_attrs["config_id"], results[-1]["value"]))

    def config_of(self, t) -> dict:
        import optuna
        if isinstance(t.user_attrs.get("config"), dict):
            return dict(t.user_attrs["config"])
        fixed = optuna.trial.FixedTrial(dict(t.params), number=t.number)
        return self.st.space.suggest(fixed)

    def best(self) -> None:
        s = self.st.summary
        ok = [r for r in s.retimed if r["value"] is not None]
        if ok:
            b = ok[0]
            s.best_config, s.best_config_id, s.best_value, s.best_trial = b["config"], b["config_id"], b["value"], \
                b["trial"]
            return
        top = self.top(1)
        if top:
            t = top[0]
            s.best_config, s.best_config_id, s.best_value, s.best_trial = self.config_of(t), \
                t.user_attrs.get("config_id"), t.value, t.number
