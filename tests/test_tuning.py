"""`gluon tune` without a GPU: dry runs of the copy and GEMM templates, and the tuner's fault handling, resume
and multi-worker claims with fake GPU workers (the templates themselves: tests/test_tuning_templates.py).

The fakes live in this module: FAKE is a TuningTemplate on CPU torch tensors whose `run` can crash the
worker process, hang, write a wrong result or leave elements unwritten (chosen per X value through the
FAKE_TUNE_FAULTS environment variable, which the spawned workers inherit); `fake_measure` runs the real
verification path (gluon.tuning.measure.measure_job) with a fake clock and logs every call to
FAKE_TUNE_LOG, so the tests can count measurements."""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from types import SimpleNamespace

import pytest

# checked without importing: GPU worker processes import this module for its fakes, and should be quick
for _m in ("optuna", "pandas", "pyarrow", "pydantic", "torch"):
    if importlib.util.find_spec(_m) is None:
        pytest.skip(f"needs {_m}", allow_module_level=True)
import torch  # noqa: E402

from gluon.ir import GluonError  # noqa: E402
from gluon.tuning.template import TuningTemplate  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)


# ------------------------------------------------------------------------------------------ the fakes


def _faults() -> dict:
    out = {}
    for part in filter(None, os.environ.get("FAKE_TUNE_FAULTS", "").split(",")):
        kind, x = part.split(":")
        out[int(x)] = kind
    return out


class FakeTemplate(TuningTemplate):
    """dst = src on the CPU; X is the 'tile size': X > FAKE_TUNE_LEGAL_MAX needs too much shared memory."""

    name = "fake"
    dims = ("N",)
    dtypes = ("fp32", "fp16")
    params = ("X", "Y")

    def legality(self, config, shape, dtype, arch):
        self.check_config(config, shape, dtype, arch)
        limit = int(os.environ.get("FAKE_TUNE_LEGAL_MAX", "1000"))
        if config["X"] > limit:
            raise GluonError(f"kernel fake needs {config['X']} KiB of shared memory, more than the {limit} KiB "
                             "a block may use")

    def lower(self, config, shape, dtype, arch):
        self.legality(config, shape, dtype, arch)
        return SimpleNamespace(X=config["X"])            # what the pool builds (picklable), not a real kernel

    def build(self, lowered):
        log = os.environ.get("FAKE_TUNE_COMPILE_LOG")
        if log:
            with open(log, "a") as f:
                f.write(json.dumps({"X": lowered.X, "t": time.time()}) + "\n")
        return SimpleNamespace(registers=32 + lowered.X, spills=0, shared_bytes=1024 * lowered.X, key=None)

    def make_inputs(self, shape, dtype, device, seed):
        g = torch.Generator().manual_seed(seed)
        src = torch.randn(shape[0], generator=g).to({"fp32": torch.float32, "fp16": torch.float16}[dtype])
        return {"src": src, "out": torch.empty_like(src), "base_out": torch.empty_like(src)}

    def run(self, inputs, config):
        kind = _faults().get(config["X"])
        src, out = inputs["src"], inputs["out"]
        if kind == "crash":
            os._exit(1)                                  # what an illegal address does to the process
        if kind == "hang":
            time.sleep(3600)
        if kind == "wrong":
            out.copy_(src * 1.5)
        elif kind == "unwritten":
            out[: len(out) // 2].copy_(src[: len(out) // 2])
        else:
            out.copy_(src)

    def reference(self, inputs):
        return inputs["src"].double()

    def baseline(self, inputs):
        def copy():
            inputs["base_out"].copy_(inputs["src"])
        copy.is_baseline = True                          # for fake_measure's clock
        return copy

    def bytes(self, shape, dtype):
        return 8.0 * shape[0]


FAKE = FakeTemplate()


def fake_measure(job):
    """A GPU worker's measurement, on the CPU: log the call, then the real verify-and-time path with a
    clock where larger X is faster and the baseline takes 1 ms."""
    log = os.environ.get("FAKE_TUNE_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"cid": job["config_id"], "X": job["config"]["X"], "purpose": job["purpose"],
                                "device": job["device_index"], "pid": os.getpid(), "t": time.time(),
                                "rep_ms": job.get("rep_ms")}) + "\n")
    time.sleep(float(os.environ.get("FAKE_TUNE_DELAY", "0")))
    from gluon.tuning.measure import measure_job
    t = 1.0 / job["config"]["X"]
    if os.environ.get("FAKE_TUNE_SMALL_X_ON_2000") and job["shape"][0] == 2000:
        t = job["config"]["X"] ** 0.5                   # there small X wins: ratio X^-1/2 (geomean X^1/4)
    calls = []

    def bench(fn):
        fn()
        calls.append(1)
        ms = 1.0 if getattr(fn, "is_baseline", False) else t
        return [ms, 0.9 * ms, 1.1 * ms]
    return measure_job(job, "cpu", bench, lambda: None)


fake_measure.environment = lambda index: {"device": "FakeGPU", "sm_count": 4, "driver": "0", "cuda": None,
                                          "triton": None, "torch": torch.__version__, "gluon": "test"}

MEASURE = "test_tuning:fake_measure"


def fake_spec(tmp_path, *, x=(1, 6), y=None, constraints=(), sampler="grid", trials=100, name="fake", shapes=((1000,),),
              **tuning):
    settings = dict(trials=trials, sampler=sampler, seed=0, repeats=1, retime_top=0, trial_timeout_s=20)
    settings.update(tuning)
    lines = []
    if constraints:
        lines.append("constraints = [" + ", ".join(json.dumps(c) for c in constraints) + "]")
    lines += ["[kernel]", f'name = "{name}"', 'template = "test_tuning:FAKE"', 'arch = "sm90"', 'dtypes = ["fp32"]',
              f"shapes = {json.dumps([list(sh) for sh in shapes])}", "[params]", f"X = {{ range = [{x[0]}, {x[1]}] }}"]
    if y:
        lines.append(f"Y = {{ values = {list(y)} }}")
    lines.append("[tuning]")
    lines += [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def load(path):
    from gluon.tuning.spec import load_spec
    return load_spec(path)


def run_tune(spec_path, tmp_path, **kw):
    from gluon.tuning.tuner import tune
    args = dict(gpus=[0], dry_run=False, progress=False, results_root=str(tmp_path / "results"),
                tuning_root=str(tmp_path / "tuning"), measure_fn=MEASURE, compile_workers=0,
                worker_context="forkserver")           # fast restarts; the crash and kill tests use spawn
    args.update(kw)
    return tune(load(spec_path), **args)


def rows(tmp_path, spec="fake"):
    from gluon.tuning.results import ResultsStore
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ResultsStore(tmp_path / "results").read(spec)


def calls(log, purpose="trial"):
    if not os.path.exists(log):
        return []
    out = []
    for line in open(log).read().splitlines():
        if line.strip():
            r = json.loads(line)
            if purpose is None or r["purpose"] == purpose:
                out.append(r)
    return out


@pytest.fixture
def env(tmp_path, monkeypatch):
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_TUNE_LOG", str(log))
    monkeypatch.delenv("FAKE_TUNE_FAULTS", raising=False)
    monkeypatch.delenv("FAKE_TUNE_DELAY", raising=False)
    monkeypatch.delenv("FAKE_TUNE_LEGAL_MAX", raising=False)
    monkeypatch.delenv("FAKE_TUNE_COMPILE_LOG", raising=False)
    monkeypatch.delenv("FAKE_TUNE_SMALL_X_ON_2000", raising=False)
    return SimpleNamespace(log=str(log), setenv=monkeypatch.setenv)


def _study(tmp_path, summary):
    import optuna

    from gluon.tuning.storage import journal_storage
    return optuna.load_study(study_name=summary.study_name, storage=journal_storage(summary.storage))


def test_check_catches_unwritten_and_wrong_elements():
    t = FakeTemplate()
    ref = torch.randn(1000, dtype=torch.float64)
    out = ref.float().clone()
    assert t.check(out, ref, 1e-6, 0)[0]
    out[10] = float("nan")
    ok, _, why = t.check(out, ref, 1e-2, 0)
    assert not ok and "1 of 1000" in why
    ok, err, why = t.check(ref.float() * 1.5, ref, 1e-2, 0)
    assert not ok and err == pytest.approx(0.5, rel=1e-3) and "exceeds" in why


# ------------------------------------------------------------------------------------------ dry runs


def test_dry_run_copy_prunes_with_reason_and_compiles_a_sample(tmp_path, capsys):
    spec = tmp_path / "copy.toml"
    spec.write_text(textwrap.dedent(f"""
        [kernel]
        name = "copy_small"
        template = "{os.path.join(REPO, 'examples', 'copy_kernel.py')}:TUNING"
        arch = "sm90"
        dtypes = ["fp32"]
        shapes = [[1048576], [1000003]]
        [params]
        XBLOCK = {{ values = [512, 1000, 2048] }}
        NUM_WARPS = 4
        FORM = {{ values = ["simt", "explicit"] }}
    """))
    from gluon.tuning.tuner import tune
    s = tune(load(spec), dry_run=True, results_root=str(tmp_path / "results"), compile_workers=1, dry_run_compiles=2)
    out = capsys.readouterr().out
    assert "DRY RUN" in out and "nothing was run or timed" in out
    assert s.dry_run and s.statuses["pruned"] == 2 and s.statuses["ok"] == 4 and len(s.ranking) == 4
    df = rows(tmp_path, "copy_small")
    assert df["dry_run"].all()
    pruned = df[df["status"] == "pruned"]
    assert set(pruned["XBLOCK"]) == {1000} and pruned["reason"].str.contains("power of two").all()
    ok = df[df["status"] == "ok"]
    assert len(ok) == 8 and (ok["model_ms"] > 0).all() and (ok["roofline_fraction"] <= 1.0).all()
    compiled = ok[ok["registers"].notna()]
    assert compiled["config_id"].nunique() == 2 and (compiled["registers"] > 0).all()
    assert (compiled["spills"] == 0).all() and (compiled["compile_s"] >= 0).all()
    assert not (tmp_path / "tuning").exists()                        # no study, no GPU worker


def test_dry_run_gemm_prunes_too_many_stages(tmp_path):
    spec = tmp_path / "gemm.toml"
    spec.write_text(textwrap.dedent("""
        [kernel]
        name = "gemm_small"
        template = "gluon.tuning.templates.gemm_sm90:TUNING"
        arch = "sm90"
        dtypes = ["fp16"]
        shapes = [[4096, 4096, 4096], [1000, 1000, 1000]]
        [tiles]
        BLOCK_M = 128
        BLOCK_N = 256
        BLOCK_K = 64
        [stages]
        STAGES = { range = [3, 5] }
        [warp_roles.consumer]
        warps = 8
        [warp_roles.producer]
        warps = 1
        registers = 40
        [params]
        EPILOGUE = { values = ["tma", "direct"] }
    """))
    from gluon.tuning.tuner import tune
    s = tune(load(spec), dry_run=True, results_root=str(tmp_path / "results"), compile_workers=1, dry_run_compiles=1)
    df = rows(tmp_path, "gemm_small")
    pruned = df[df["status"] == "pruned"]
    # 128x256x64 fp16 stages are 48 KiB: 5 never fit, 4 only without the 64 KiB TMA staging tile
    assert sorted(zip(pruned["STAGES"], pruned["EPILOGUE"])) == [(4, "tma"), (5, "direct"), (5, "tma")]
    assert pruned["reason"].str.contains("more than the 227.0 KiB").all()
    assert pruned["reason"].str.contains("a_ring").all()              # the diagnostic lists the regions
    ok = df[df["status"] == "ok"]
    assert len(ok) == 3 * 2 and ok["dry_run"].all()
    compiled = ok[ok["registers"].notna()]
    assert compiled["config_id"].nunique() == 1 and (compiled["registers"] >= 128).all()
    assert (compiled["shared_bytes"] > 100_000).all()
    # 1000^3 leaves most of the last wave idle: its modelled roofline fraction is lower
    by_shape = ok.groupby("shape")["roofline_fraction"].max()
    assert by_shape["1000x1000x1000"] < by_shape["4096x4096x4096"]
    assert s.best_config is not None and s.ranking[0]["score"] >= s.ranking[-1]["score"]


# ------------------------------------------------------------------------------------------ faults


def test_worker_crash_is_a_runtime_error_and_the_study_goes_on(tmp_path, env):
    env.setenv("FAKE_TUNE_FAULTS", "crash:3")
    s = run_tune(fake_spec(tmp_path, x=(1, 6)), tmp_path, worker_context="spawn")
    df = rows(tmp_path)
    status = dict(zip(df["X"], df["status"]))
    assert status == {1: "ok", 2: "ok", 3: "runtime_error", 4: "ok", 5: "ok", 6: "ok"}
    assert "died" in df[df["X"] == 3]["reason"].iloc[0]
    assert s.statuses == {"ok": 5, "runtime_error": 1} and s.trials == 6 and s.best_config["X"] == 6
    assert len({c["pid"] for c in calls(env.log)}) >= 2                  # a new worker after the crash


def test_hung_worker_is_killed_and_restarted(tmp_path, env):
    env.setenv("FAKE_TUNE_FAULTS", "hang:2")
    t0 = time.monotonic()
    s = run_tune(fake_spec(tmp_path, x=(1, 4), trial_timeout_s=1.5), tmp_path)
    assert time.monotonic() - t0 < 30
    df = rows(tmp_path)
    assert dict(zip(df["X"], df["status"])) == {1: "ok", 2: "timeout", 3: "ok", 4: "ok"}
    assert "1.5 s" in df[df["X"] == 2]["reason"].iloc[0]
    hang = [c for c in calls(env.log) if c["X"] == 2][0]
    after = [c for c in calls(env.log) if c["pid"] != hang["pid"]]
    assert after                                                         # later jobs ran in a new process
    assert s.statuses["timeout"] == 1


@pytest.mark.parametrize("settings,trial_ms,retime_ms", [({}, 100, 1000), (dict(round_ms=50, retime_round_ms=700), 50, 700)],
                         ids=["defaults", "from_the_spec"])
def test_the_retime_runs_longer_rounds_than_the_search(tmp_path, env, settings, trial_ms, retime_ms):
    run_tune(fake_spec(tmp_path, x=(1, 4), retime_top=2, **settings), tmp_path)
    assert {c["rep_ms"] for c in calls(env.log)} == {trial_ms}
    assert {c["rep_ms"] for c in calls(env.log, "retime")} == {retime_ms}


def test_a_case_winner_outside_the_top_is_retimed_on_its_case_and_built_there(tmp_path, env):
    """X=6 is fastest on N=1000 and by the geometric mean, X=1 on N=2000: the top 2 (6, 5) are re-timed on
    both shapes, X=1 on N=2000 only; the best overall stays 6, and N=2000's best row is X=1's re-timing."""
    env.setenv("FAKE_TUNE_SMALL_X_ON_2000", "1")
    s = run_tune(fake_spec(tmp_path, x=(1, 6), retime_top=2, shapes=((1000,), (2000,))), tmp_path)
    again = sorted((c["X"], c["rep_ms"]) for c in calls(env.log, "retime"))
    assert again == [(1, 1000), (5, 1000), (5, 1000), (6, 1000), (6, 1000)]
    assert [r["config"]["X"] for r in s.retimed] == [6, 5] and s.best_config["X"] == 6
    from gluon.tuning.results import summary
    best = {r["shape"]: (int(r["X"]), bool(r["retimed"])) for _, r in summary(rows(tmp_path)).iterrows()}
    assert best == {"1000": (6, True), "2000": (1, True)}


def test_timed_runs_rotate_through_two_input_sets(tmp_path, env, monkeypatch):
    """Candidate and baseline each alternate between two input sets (seeds s and s+1) from run to run;
    the verified run uses the first; a set over 2 GiB is not doubled."""
    from gluon.tuning.measure import measure_job, rotation
    from gluon.tuning.spec import template_of
    spec = load(fake_spec(tmp_path))
    tpl = template_of(spec)
    seen = []
    real_run, real_baseline = tpl.run, tpl.baseline
    monkeypatch.setattr(tpl, "run", lambda inputs, config: (seen.append(("run", id(inputs["src"]))),
                                                           real_run(inputs, config))[1])

    def baseline(inputs):
        fn = real_baseline(inputs)

        def b():
            seen.append(("base", id(inputs["src"])))
            fn()
        b.is_baseline = True
        return b
    monkeypatch.setattr(tpl, "baseline", baseline)

    def bench(fn):
        for _ in range(4):
            fn()
        return [1.0, 0.9, 1.1]
    job = {"spec": spec, "config": {"X": 2, "Y": None}, "config_id": "c", "shape": (1000,), "dtype": "fp32",
           "seed": 7, "repeats": 1}
    assert measure_job(job, "cpu", bench, lambda: None)["status"] == "ok"
    verified, timed = seen[0], seen[1:]
    runs = [i for k, i in timed if k == "run"]
    bases = [i for k, i in timed if k == "base"]
    assert runs[0] == verified[1] and runs[1] != runs[0] and runs[2] == runs[0] and len(set(runs)) == 2
    assert len(set(bases)) == 2 and bases[0] != bases[1]
    assert rotation(8e9) == 1 and rotation(1e6) == 2 and rotation(1e6, 3) == 3


def test_the_search_stops_early_enough_for_the_retiming_to_fit_the_time_limit():
    from gluon.tuning.study import search_deadline_s
    assert search_deadline_s(None, 3, 4, 3, 1000, 1) is None
    assert search_deadline_s(600, 0, 4, 3, 1000, 1) == 600
    # the GEMM spec's defaults: (3 + 1) x 4 jobs of 3 rounds x 2 sides x 1.05 s + 1 s, on one GPU / two
    assert search_deadline_s(600, 3, 4, 3, 1000, 1) == pytest.approx(600 - 16 * 7.3)
    assert search_deadline_s(600, 3, 4, 3, 1000, 2) == pytest.approx(600 - 8 * 7.3)
    assert search_deadline_s(60, 3, 4, 3, 1000, 1) == 30          # never less than half the limit


def test_a_time_limit_stops_the_search(tmp_path, env):
    env.setenv("FAKE_TUNE_DELAY", "0.3")
    s = run_tune(fake_spec(tmp_path, x=(1, 50), time_limit_s=2.0, retime_top=1), tmp_path)
    assert s.stopped == "time_limit" and 1 <= len(calls(env.log)) < 20
    assert len(calls(env.log, "retime")) == 1                    # the best (also the one case's fastest)


def test_the_retiming_takes_shorter_rounds_where_the_full_ones_would_not_fit_the_time_limit():
    from gluon.tuning.study import retime_round_within, search_deadline_s
    assert retime_round_within(600, 3, 4, 3, 1000, 100, 1) == 1000      # the GEMM spec's 4 cases fit at 1000 ms
    # the decode spec's 24 cases: 96 jobs of 1000 ms rounds would take about 700 s of the default 600; shorter
    # rounds make them fit the half the search leaves
    r = retime_round_within(600, 3, 24, 3, 1000, 100, 1)
    assert 100 < r < 1000 and 96 * (3 * 2 * (r / 1000 + 0.05) + 1.0) <= 300
    assert search_deadline_s(600, 3, 24, 3, r, 1) == pytest.approx(300, abs=1)
    assert retime_round_within(60, 3, 4, 3, 1000, 100, 1) == 100        # never below the search's rounds
    assert retime_round_within(None, 3, 24, 3, 1000, 100, 1) == 1000
    assert retime_round_within(600, 0, 24, 3, 1000, 100, 1) == 1000


def test_no_retiming_job_starts_past_the_time_limit():
    import queue
    import threading
    from types import SimpleNamespace

    from gluon.tuning.retime import _Retiming
    from gluon.tuning.tune_summary import TuneSummary

    class NoJobs:
        def run(self, *a, **k):
            raise AssertionError("a re-timing job started past the time limit")
    st = SimpleNamespace(stop=threading.Event(), time_limit=1.0, t0=time.monotonic() - 5, lock=threading.Lock(),
                         summary=TuneSummary(spec_name="fake", dry_run=False, results_root="r"), jobs=NoJobs())
    todo = queue.Queue()
    for i in range(3):
        todo.put((SimpleNamespace(number=i, user_attrs={"config_id": str(i), "config": {"X": i}}), [((1000,), "fp32")]))
    _Retiming(st)._run_on(None, todo, [((1000,), "fp32")], [])
    assert st.summary.retime_skipped == 3 and todo.empty()


def test_a_time_limit_given_to_tune_overrides_the_specs(tmp_path, env):
    """tune(time_limit_s=...) (`gluon tune --time-limit`): the spec's 600 s give way to 2 s; the re-timing, which
    at 1000 ms rounds would not fit the second half, runs the search's 100 ms rounds."""
    env.setenv("FAKE_TUNE_DELAY", "0.3")
    s = run_tune(fake_spec(tmp_path, x=(1, 50), retime_top=1), tmp_path, time_limit_s=2.0)
    assert s.stopped == "time_limit" and 1 <= len(calls(env.log)) < 20
    retimes = calls(env.log, "retime")
    assert len(retimes) == 1 and retimes[0]["rep_ms"] == 100


def test_wrong_results_are_never_the_best(tmp_path, env):
    env.setenv("FAKE_TUNE_FAULTS", "wrong:6,unwritten:5")               # the fastest two are wrong
    s = run_tune(fake_spec(tmp_path, x=(1, 6), retime_top=2), tmp_path)
    df = rows(tmp_path)
    first = df[~df["retimed"]]
    st = dict(zip(first["X"], first["status"]))
    assert st[6] == "wrong_result" and st[5] == "wrong_result"
    assert "exceeds" in first[first["X"] == 6]["reason"].iloc[0]
    assert "NaN" in first[first["X"] == 5]["reason"].iloc[0]               # half the output never written
    assert first[first["X"] == 6]["max_err"].iloc[0] == pytest.approx(0.5, rel=1e-3)
    assert s.best_config["X"] == 4
    study = _study(tmp_path, s)
    assert study.best_trial.user_attrs["config"]["X"] == 4
    retimed = df[df["retimed"]]
    assert sorted(retimed["X"]) == [3, 4] and (retimed["status"] == "ok").all()
    assert [r["config"]["X"] for r in s.retimed] == [4, 3]
    ok = first[first["status"] == "ok"].iloc[0]
    assert ok["ratio"] == pytest.approx(ok["baseline_ms"] / ok["median_ms"]) and ok["p10_ms"] < ok["p90_ms"]
    assert ok["registers"] == 32 + ok["X"] and ok["device"] == "FakeGPU" and ok["study"] == s.study_name
    from gluon.tuning.results import summary
    best = summary(df)
    assert list(best["X"]) == [4]


def test_pruned_configs_never_reach_the_gpu(tmp_path, env):
    env.setenv("FAKE_TUNE_LEGAL_MAX", "4")
    s = run_tune(fake_spec(tmp_path, x=(1, 6)), tmp_path, compile_workers=1)     # through the compile pool
    assert sorted(c["X"] for c in calls(env.log)) == [1, 2, 3, 4]
    df = rows(tmp_path)
    pruned = df[df["status"] == "pruned"]
    assert sorted(pruned["X"]) == [5, 6] and pruned["reason"].str.contains("shared memory").all()
    study = _study(tmp_path, s)
    states = {t.user_attrs["config"]["X"]: t.state.name for t in study.trials}
    assert states[5] == states[6] == "PRUNED" and s.trials == 4
    ok = df[df["status"] == "ok"]
    assert list(ok.sort_values("X")["registers"]) == [33, 34, 35, 36]      # from the pool's compile


@pytest.mark.parametrize("lookahead", [True, False])
def test_lookahead_compiles_the_next_trial_while_one_is_measured(tmp_path, env, lookahead):
    delay = 0.6
    env.setenv("FAKE_TUNE_DELAY", str(delay))
    clog = tmp_path / "compiles.jsonl"
    env.setenv("FAKE_TUNE_COMPILE_LOG", str(clog))
    s = run_tune(fake_spec(tmp_path, x=(1, 4)), tmp_path, compile_workers=1, lookahead=lookahead)
    assert s.trials == 4 and s.statuses == {"ok": 4}
    measured = calls(env.log)
    compiled = {r["X"]: r["t"] for r in map(json.loads, clog.read_text().splitlines())}
    assert sorted(compiled) == [1, 2, 3, 4]             # each config compiled once
    # the next config's compile started while this one's measurement (start .. start + delay) ran
    overlapped = sum(compiled[nxt["X"]] < cur["t"] + delay for cur, nxt in zip(measured, measured[1:]))
    assert overlapped == (3 if lookahead else 0)


# ------------------------------------------------------------------------------------------ resume, claims


def test_resume_measures_only_new_trials(tmp_path, env):
    spec = fake_spec(tmp_path, x=(1, 40), y=(1, 2, 3, 4, 5), sampler="random", trials=5)
    s1 = run_tune(spec, tmp_path)
    assert len(calls(env.log)) == 5 and s1.trials == 5
    s2 = run_tune(spec, tmp_path, trials=8)
    measured = calls(env.log)
    assert len(measured) == 8 and len({c["cid"] for c in measured}) == 8
    assert s2.study_name == s1.study_name and s2.trials == 8 and s2.measured == 3
    s3 = run_tune(spec, tmp_path, trials=8)                             # finished: nothing to do
    assert len(calls(env.log)) == 8 and s3.measured == 0


def test_same_config_is_looked_up_not_remeasured(tmp_path, env):
    """A results row of this spec hash answers for a config even when the study is gone."""
    spec = fake_spec(tmp_path, x=(1, 3), sampler="grid")
    run_tune(spec, tmp_path)
    assert len(calls(env.log)) == 3
    s = run_tune(spec, tmp_path, tuning_root=str(tmp_path / "tuning2"))  # a new study, same results store
    assert len(calls(env.log)) == 3 and s.reused == 3 and s.trials == 3 and s.best_config["X"] == 3


def test_grid_sampler_visits_every_valid_config_once(tmp_path, env):
    env.setenv("FAKE_TUNE_LEGAL_MAX", "5")
    spec = fake_spec(tmp_path, x=(1, 7), y=(1, 2, 3), constraints=["X + Y <= 7"], sampler="grid", trials=1000)
    s = run_tune(spec, tmp_path)
    sp = load(spec).space
    legal = {sp.config_id(c) for c in sp.grid() if c["X"] <= 5}
    measured = [c["cid"] for c in calls(env.log)]
    assert sorted(measured) == sorted(legal) and len(measured) == len(set(measured)) == 14
    assert s.stopped == "exhausted"


def test_two_workers_on_one_storage_never_measure_a_config_twice(tmp_path, env):
    env.setenv("FAKE_TUNE_DELAY", "0.05")
    spec = fake_spec(tmp_path, x=(1, 6), y=(1, 2, 3, 4), sampler="tpe", trials=10)
    s = run_tune(spec, tmp_path, gpus=[0, 1])
    measured = calls(env.log)
    assert len(measured) == 10 and len({c["cid"] for c in measured}) == 10
    assert {c["device"] for c in measured} == {0, 1}
    df = rows(tmp_path)
    assert not df.duplicated(subset=["config_id", "shape", "dtype"]).any() and s.trials == 10


def test_two_tuner_processes_on_one_journal_never_measure_a_config_twice(tmp_path, env):
    spec = fake_spec(tmp_path, x=(1, 4), y=(1, 2, 3), sampler="random", trials=12)
    procs = [_tune_subprocess(spec, tmp_path, {"FAKE_TUNE_DELAY": "0.1"}, context="forkserver") for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    measured = [c["cid"] for c in calls(env.log)]
    assert len(measured) == len(set(measured)) == 12
    assert not rows(tmp_path).duplicated(subset=["config_id", "shape", "dtype"]).any()


def _tune_subprocess(spec, tmp_path, env_extra, trials=None, context="spawn"):
    # SIGINT as a tuner started from a terminal has it: a shell starting pytest in the background without job
    # control passes SIGINT on ignored, and the Ctrl-C test would then send one that nothing hears
    code = textwrap.dedent(f"""
        import signal, sys
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path[:0] = [{TESTS!r}, {REPO!r}]
        from gluon.tuning.spec import load_spec
        from gluon.tuning.tuner import tune
        tune(load_spec({str(spec)!r}), gpus=[0], dry_run=False, progress=True, trials={trials!r},
             results_root={str(tmp_path / 'results')!r}, tuning_root={str(tmp_path / 'tuning')!r},
             measure_fn={MEASURE!r}, compile_workers=0, worker_context={context!r})
    """)
    e = dict(os.environ, **env_extra)
    return subprocess.Popen([sys.executable, "-c", code], env=e, cwd=str(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_calls(log, n, proc, timeout=60):
    t0 = time.monotonic()
    while len(calls(log, None)) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < timeout
        time.sleep(0.05)


def _check_no_finished_job_repeated(tmp_path, log, in_flight_max=1):
    df = rows(tmp_path)
    from gluon.tuning.results import ResultsStore
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = ResultsStore(tmp_path / "results")
        store.read("fake")
    assert all("temporary" in why for _, why in store.problems), store.problems   # every row file reads
    first = df[~df["retimed"]]
    assert not first.duplicated(subset=["config_id", "shape", "dtype"]).any()
    counts = {}
    for c in calls(log):
        counts[c["cid"]] = counts.get(c["cid"], 0) + 1
    assert max(counts.values()) <= 2
    assert sum(1 for v in counts.values() if v == 2) <= in_flight_max    # only a job cut short runs again
    return counts


def test_kill_9_mid_study_resumes_without_remeasuring(tmp_path, env):
    spec = fake_spec(tmp_path, x=(1, 40), y=(1, 2, 3), sampler="tpe", trials=10)
    p = _tune_subprocess(spec, tmp_path, {"FAKE_TUNE_DELAY": "0.3"})
    _wait_for_calls(env.log, 4, p)
    os.kill(p.pid, signal.SIGKILL)
    p.communicate()
    time.sleep(1.5)                          # the orphaned GPU worker notices its parent is gone
    before = len(calls(env.log))
    assert before >= 4
    s = run_tune(spec, tmp_path)
    assert s.trials == 10
    _check_no_finished_job_repeated(tmp_path, env.log)
    import optuna
    study = _study(tmp_path, s)
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    assert len([t for t in study.trials if _counts(t)]) == 10


def _counts(t):
    from gluon.tuning.study import _Study
    return _Study._counts(t)


def test_ctrl_c_leaves_a_resumable_study(tmp_path, env):
    spec = fake_spec(tmp_path, x=(1, 40), y=(1, 2, 3), sampler="random", trials=8)
    p = _tune_subprocess(spec, tmp_path, {"FAKE_TUNE_DELAY": "0.5"}, context="forkserver")
    _wait_for_calls(env.log, 3, p)
    os.kill(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode != 0 and "KeyboardInterrupt" in err and "resume" in err, (p.returncode, out[-2000:],
                                                                                  err[-4000:])
    import optuna

    from gluon.tuning.storage import journal_storage
    name = next((tmp_path / "tuning").glob("*.log"))
    study = optuna.load_study(study_name=name.stem, storage=journal_storage(name))
    states = [t.state for t in study.trials]
    assert optuna.trial.TrialState.RUNNING not in states and optuna.trial.TrialState.FAIL in states
    interrupted = {t.user_attrs["config_id"] for t in study.trials if t.state == optuna.trial.TrialState.FAIL}
    s = run_tune(spec, tmp_path)
    assert s.trials == 8
    counts = _check_no_finished_job_repeated(tmp_path, env.log)
    assert interrupted <= set(counts)        # the interrupted config was re-enqueued and measured


def test_per_shape_scoring_runs_one_study_per_shape(tmp_path, env):
    path = fake_spec(tmp_path, x=(1, 3), scoring="per_shape")
    path.write_text(path.read_text().replace("shapes = [[1000]]", "shapes = [[1000], [2000]]"))
    s = run_tune(path, tmp_path)
    assert len(s.studies) == 2 and len({st.study_name for st in s.studies}) == 2
    assert all(st.trials == 3 and st.best_config["X"] == 3 for st in s.studies)
    assert len(calls(env.log)) == 6 and s.measured == 6


def test_per_shape_studies_share_the_time_limit(tmp_path, env):
    """Each (shape, dtype) study gets the time left over the studies left, so the run keeps to the limit."""
    env.setenv("FAKE_TUNE_DELAY", "0.3")
    path = fake_spec(tmp_path, x=(1, 50), scoring="per_shape", shapes=((1000,), (2000,)))
    s = run_tune(path, tmp_path, time_limit_s=2.0)
    first, second = s.studies
    assert first.time_limit_s == pytest.approx(1.0, abs=0.05)
    assert first.stopped == second.stopped == "time_limit"
    assert second.time_limit_s <= 2.0 - first.time_limit_s + 0.05


def test_unavailable_sampler_is_a_spec_error(tmp_path, env):
    from gluon.tuning.spec import SpecError
    try:
        import cmaes  # noqa: F401
        pytest.skip("cmaes is installed")
    except ImportError:
        pass
    with pytest.raises(SpecError, match="cmaes"):
        run_tune(fake_spec(tmp_path, sampler="cmaes"), tmp_path)


def test_fresh_study_measures_the_templates_seed_first(tmp_path, env, monkeypatch):
    monkeypatch.setattr(FAKE, "seed_configs", lambda: [{"X": 4}], raising=False)
    s = run_tune(fake_spec(tmp_path, x=(1, 6), sampler="random", trials=3), tmp_path)
    measured = calls(env.log)
    assert measured[0]["X"] == 4 and len(measured) == 3
    # a resumed study is not seeded again: still exactly one seeded trial after a second run
    monkeypatch.setattr(FAKE, "seed_configs", lambda: [{"X": 5}], raising=False)
    s2 = run_tune(fake_spec(tmp_path, x=(1, 6), sampler="random", trials=4), tmp_path)
    seeded = [t.params for t in _study(tmp_path, s2).get_trials() if t.user_attrs.get("seeded")]
    assert seeded == [{"X": 4}] and s.study_name == s2.study_name


def test_seeds_that_differ_only_outside_the_space_are_queued_once(tmp_path, env, monkeypatch):
    monkeypatch.setattr(FAKE, "seed_configs", lambda: [{"X": 4, "Y": 1}, {"X": 4, "Y": 2}, {"X": 5}], raising=False)
    s = run_tune(fake_spec(tmp_path, x=(1, 40), sampler="random", trials=3), tmp_path)
    seeded = [t.params for t in _study(tmp_path, s).get_trials() if t.user_attrs.get("seeded")]
    assert seeded == [{"X": 4}, {"X": 5}]


def test_seeds_get_the_studys_problems_and_take_the_specs_fixed_values(tmp_path, env, monkeypatch):
    """A template whose pick depends on the problem gets the study's shapes and dtypes; a parameter the spec fixes
    takes the spec's value in the seed (the pick within the spec's space), not the template's."""
    got = []

    def seeds(shapes=(), dtypes=()):
        got.append((shapes, dtypes))
        return [{"X": sh[0] // 500, "Y": 7} for sh in shapes] + [{"Y": 1}]     # the last sets no X: skipped
    monkeypatch.setattr(FAKE, "seed_configs", seeds, raising=False)
    path = fake_spec(tmp_path, x=(1, 40), sampler="random", trials=3, shapes=((1000,), (2000,)))
    path.write_text(path.read_text().replace("[tuning]", "Y = 3\n[tuning]"))
    s = run_tune(path, tmp_path)
    assert [(tuple(map(tuple, sh)), d) for sh, d in got] == [(((1000,), (2000,)), ("fp32",))]
    seeded = [t.params for t in _study(tmp_path, s).get_trials() if t.user_attrs.get("seeded")]
    assert seeded == [{"X": 2}, {"X": 4}]             # Y = 7 would be outside the space: the spec's 3 instead
    assert [c["X"] for c in calls(env.log)][:4] == [2, 2, 4, 4]            # a call per shape


def test_seeds_false_leaves_the_hand_picked_configs_out(tmp_path, env, monkeypatch):
    monkeypatch.setattr(FAKE, "seed_configs", lambda: [{"X": 4}], raising=False)
    s = run_tune(fake_spec(tmp_path, x=(1, 40), sampler="random", trials=3), tmp_path, seeds=False)
    assert not [t for t in _study(tmp_path, s).get_trials() if t.user_attrs.get("seeded")]
    assert len(calls(env.log)) == 3


def test_gemm_seed_is_a_valid_config_of_the_shipped_spec():
    from gluon.tuning.templates.gemm_sm90 import TUNING
    spec = load(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "specs", "gemm_sm90.toml"))
    seeds = TUNING.seed_configs()
    inside = [s for s in seeds if spec.space.check({k: s[k] for k in spec.space.params}) is None]
    assert inside == seeds[:3]                       # the 16-bit seeds; the last three are fp8's (BLOCK_K 128)
    for seed in seeds:
        assert set(spec.space.params) <= set(seed)
        assert seed["BLOCK_N"] == 256 and seed["CONSUMER_WARPS"] == 8 and seed["GROUP_M"] == 16
    # choose_config's pick at the spec's shapes first
    assert [(s["SPLIT_WGS"], s["K_ZIGZAG"]) for s in inside] == [(True, True), (True, False), (False, False)]


def test_rounds_alternate_which_side_runs_first():
    """Power-capped GEMMs favour whichever kernel runs first after a pause: the rounds swap the order."""
    from gluon.tuning.measure import alternate_rounds
    order = []
    c, b = alternate_rounds("cand", "base", 4, lambda fn: order.append(fn) or len(order))
    assert order == ["cand", "base", "base", "cand", "cand", "base", "base", "cand"]
    assert c == [1, 4, 5, 8] and b == [2, 3, 6, 7]                 # each side's rounds, in order
    order.clear()
    assert alternate_rounds("cand", None, 3, lambda fn: order.append(fn) or 0) == ([0, 0, 0], [])
