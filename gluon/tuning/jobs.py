"""One job of a study: a (config, shape, dtype) looked up in the results already recorded, or compiled in
the process pool and measured on a GPU worker, then written as a results row (`_Jobs.run`); and the
objective a trial's rows give (`objective_value`: the geometric mean of their ratios, or of their
median times for min_time).

`_Jobs` keeps the study's compile results by compile key: `precompile` starts every compile of a
config at once when its trial is prepared, `run` waits for the one it needs (or compiles it again when
its pool was replaced)."""
from __future__ import annotations

import hashlib
import math

from .settings import _t
from .template import shape_str

FINAL = ("ok", "pruned", "compile_error", "runtime_error", "wrong_result", "timeout")


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def objective_value(rows, maximize: bool) -> float:
    """A trial's value from its jobs' rows (all ok)."""
    if maximize:
        return geomean(max(float(r["ratio"]), 1e-12) for r in rows)
    return geomean(max(float(r["median_ms"]), 1e-12) for r in rows)


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "little")


class _Jobs:
    """The compile-and-measure step of one study (`study` is its `_Study`: spec, pool, results index,
    summary, lock, stop)."""

    def __init__(self, study):
        self.st = study
        self.compiled: dict[tuple, dict] = {}
        self.compiling: dict[tuple, tuple] = {}

    def precompile(self, config, cid) -> None:
        """Start the compiles of every job of this config at once (the pool compiles them in parallel)."""
        st = self.st
        arch = st.tn.arch
        for shape in st.shapes:
            for dtype in st.dtypes:
                if (cid, shape_str(shape), dtype) in st.index:
                    continue
                ckey = st.tn.template.compile_key(cid, shape, dtype, arch)
                if ckey not in self.compiled and ckey not in self.compiling:
                    self.compiling[ckey] = st.pool.submit(st.spec, st.tn.legality.lowered(config, cid, shape, dtype))

    def run(self, trial, worker, config, cid, shape, dtype, retime: bool = False) -> dict | None:
        """One (config, shape, dtype): looked up, or compiled + measured and written. None if interrupted.
        `trial` is the Optuna trial, or for a re-timing the trial's number."""
        st = self.st
        key = (cid, shape_str(shape), dtype)
        if not retime and key in st.index:
            with st.lock:
                st.summary.reused += 1
            return st.index[key]
        lowered = st.tn.legality.lowered(config, cid, shape, dtype)
        comp = self._compiled(lowered, st.tn.template.compile_key(cid, shape, dtype, st.tn.arch))
        if comp is None:
            return None
        cinfo = {k: comp.get(k) for k in ("compile_s", "registers", "spills", "shared_bytes")}
        if comp["status"] != "ok":
            res = {"status": comp["status"], "reason": comp.get("reason")}
        else:
            abi = getattr(lowered, "abi", None)
            res = self._measured(trial, worker, config, cid, shape, dtype, retime,
                                 {"cache_key": comp.get("cache_key"), "abi": abi.to_json() if abi else None})
            if res is None:
                return None
        res = dict(res)
        status = res.get("status") if res.get("status") in FINAL else "runtime_error"
        measured = {k: res.get(k) for k in ("median_ms", "p10_ms", "p90_ms", "baseline_ms", "ratio", "max_err",
                                           "tflops", "gbps", "roofline_fraction")}
        if measured["ratio"] is None and measured["baseline_ms"] and measured["median_ms"]:
            measured["ratio"] = measured["baseline_ms"] / measured["median_ms"]
        row = st.tn._row(env=worker.env or st.env, config=config, config_id=cid, shape=shape, dtype=dtype,
                         status=status,
                         reason=res.get("reason"), trial=trial if retime else trial.number, study=st.name,
                         retimed=retime, **cinfo, **measured)
        st.tn.store.write(row)
        with st.lock:
            st.summary.rows_written += 1
        if not retime:
            st.index[key] = row
        return row

    def _compiled(self, lowered, ckey) -> dict | None:
        """The compile result of a job: kept, started by `precompile`, or compiled now. None if stopped."""
        st = self.st
        comp = self.compiled.get(ckey)
        if comp is None:
            handle = self.compiling.pop(ckey, None)
            comp = st.pool.wait(handle) if handle is not None else None
            if (comp is None or comp.get("_broken")) and not st.stop.is_set():
                comp = st.pool.compile(st.spec, lowered)   # (its pool was replaced)
            if st.stop.is_set():
                return None
            comp.pop("_broken", None)
            self.compiled[ckey] = comp
        return comp

    def _measured(self, trial, worker, config, cid, shape, dtype, retime: bool, kernel: dict) -> dict | None:
        """The GPU worker's result for a compiled job (`kernel`: where its binary is and its ABI, so the
        worker launches it without tracing). None if stopped meanwhile."""
        st = self.st
        spec = st.spec
        job = {"spec": spec, "config": config, "config_id": cid, "shape": tuple(shape), "dtype": dtype,
               "arch": st.tn.arch, "seed": _seed(_t(spec, "seed", 0), trial if retime else trial.number, cid,
                                                 shape, dtype, retime),
               "rtol": float(_t(spec, "rtol", 1e-2)), "atol": float(_t(spec, "atol", 0.0)),
               "repeats": int(_t(spec, "repeats", 3)),
               "rep_ms": int(st.retime_round_ms if retime else _t(spec, "round_ms", 100)),
               "baseline": _t(spec, "baseline", "torch") not in (False, "none", ""),
               "purpose": "retime" if retime else "trial", "device_index": worker.device_index, "kernel": kernel}
        res = worker.run(job, st.trial_timeout)
        if st.stop.is_set():
            return None
        if not retime:
            with st.lock:
                st.summary.measured += 1
        return res
