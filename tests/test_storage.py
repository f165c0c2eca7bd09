"""The tuner on an Optuna RDB storage, SQLite and PostgreSQL (a server .ci/run starts; claims there are an
advisory lock in the database): resume from the database, the spec's `tuning.storage`, two tuner
processes sharing one study, one of them killed with SIGKILL and resumed, and clear errors for URLs that
cannot be opened. CPU only, with test_tuning's fake GPU workers."""
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from types import SimpleNamespace

import pytest

from conftest import postgres_test_url
from test_tuning import MEASURE, REPO, TESTS, _tune_subprocess, _wait_for_calls, calls, fake_spec, load, rows, run_tune

optuna = pytest.importorskip("optuna")
pytest.importorskip("sqlalchemy")


@pytest.fixture
def env(tmp_path, monkeypatch):
    """test_tuning's environment for the fake workers: a call log, no faults, no delay."""
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_TUNE_LOG", str(log))
    for name in ("FAKE_TUNE_FAULTS", "FAKE_TUNE_DELAY", "FAKE_TUNE_LEGAL_MAX"):
        monkeypatch.delenv(name, raising=False)
    return SimpleNamespace(log=str(log))


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request, tmp_path):
    """(URL, spec name): an SQLite file in tmp_path, or the PostgreSQL database of GLUON_TEST_POSTGRES_URL
    (`postgres_test_url`: skipped without one, failed in CI) with a spec name of its own per test."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/db/s.db", "fake"
    return postgres_test_url(), f"fake_pg_{uuid.uuid4().hex[:8]}"


def _counted(study):
    from gluon.tuning.study import _Study
    return [t for t in study.trials if _Study._counts(t)]


def test_rdb_study_is_resumed_from_the_database(tmp_path, env, storage_url):
    url, name = storage_url
    spec = fake_spec(tmp_path, x=(1, 40), y=(1, 2, 3, 4, 5), sampler="random", trials=5, name=name)
    s1 = run_tune(spec, tmp_path, storage=url)
    assert s1.storage == url and s1.trials == 5 and len(calls(env.log)) == 5
    assert not list((tmp_path / "tuning").glob("*.log"))
    if url.startswith("sqlite"):
        assert (tmp_path / "db" / "s.db").is_file()                   # its folder was created
    # a fresh results store: only the study can answer for the first run's configs
    s2 = run_tune(spec, tmp_path, storage=url, trials=8, results_root=str(tmp_path / "results2"))
    measured = calls(env.log)
    assert len(measured) == 8 and len({c["cid"] for c in measured}) == 8          # nothing measured twice
    assert s2.study_name == s1.study_name and s2.trials == 8 and s2.measured == 3 and s2.reused == 0
    assert s2.duplicates >= 1                 # the seeded sampler proposed run 1's configs again: answered
    study = optuna.load_study(study_name=s1.study_name, storage=url)
    assert len(_counted(study)) == 8
    s3 = run_tune(spec, tmp_path, storage=url, trials=8)                            # done: nothing to do
    assert len(calls(env.log)) == 8 and s3.measured == 0 and s3.trials == 8


def test_two_tuner_processes_on_one_rdb_study_never_measure_a_config_twice(tmp_path, env, storage_url):
    from gluon.tuning.storage import describe_storage_url
    url, name = storage_url
    spec = fake_spec(tmp_path, x=(1, 4), y=(1, 2, 3), sampler="random", trials=10, storage=url,  # tuning.storage
                     name=name)
    code = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{TESTS!r}, {REPO!r}]
        from gluon.tuning.spec import load_spec
        from gluon.tuning.tuner import tune
        s = tune(load_spec({str(spec)!r}), gpus=[0], dry_run=False, progress=False,
                 results_root={str(tmp_path / 'results')!r}, tuning_root={str(tmp_path / 'tuning')!r},
                 measure_fn={MEASURE!r}, compile_workers=0, worker_context="forkserver")
        print("STORAGE", s.storage)
    """)
    e = dict(os.environ, FAKE_TUNE_DELAY="0.15")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=e, cwd=str(tmp_path), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert f"STORAGE {describe_storage_url(url)}" in out
    measured = [c["cid"] for c in calls(env.log)]
    assert len(measured) == len(set(measured)) == 10
    print("jobs per tuner process:", sorted(sum(1 for c in calls(env.log) if c["pid"] == pid)
                                            for pid in {c["pid"] for c in calls(env.log)}))
    assert not rows(tmp_path, name).duplicated(subset=["config_id", "shape", "dtype"]).any()
    names = [n for n in optuna.get_all_study_names(storage=url) if n.startswith(f"{name}.")]
    assert len(names) == 1
    study = optuna.load_study(study_name=names[0], storage=url)
    assert len(_counted(study)) == 10
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    if url.startswith("sqlite"):
        assert list((tmp_path / "db").glob(".s.db.*.claims.lock"))   # claimed beside the database file


def _pid_of(trial):
    o = trial.user_attrs.get("owner")
    return o.get("pid") if isinstance(o, dict) else None


def test_a_tuner_killed_mid_study_is_resumed_while_another_goes_on(tmp_path, env, storage_url):
    """Tuners A and B share one study; A is killed with SIGKILL mid-trial and C resumes the study while B
    is still measuring. Across the three: no config measured twice but the one job the kill cut short
    (which has no row of A's), a row for every measured config, A's RUNNING trials failed (by C's start)
    and their configs measured or queued again, and the study stops at its budget, not past it."""
    url, name = storage_url
    spec = fake_spec(tmp_path, x=(1, 40), y=(1, 2, 3), sampler="random", trials=16, storage=url, name=name)
    logs = {k: str(tmp_path / f"calls-{k}.jsonl") for k in "abc"}       # each tuner's GPU worker logs apart

    def tuner(k, delay):
        return _tune_subprocess(spec, tmp_path, {"FAKE_TUNE_LOG": logs[k], "FAKE_TUNE_DELAY": str(delay)},
                                context="forkserver")
    a, b = tuner("a", 0.3), tuner("b", 1.0)       # B slow: still measuring when C has started
    _wait_for_calls(logs["a"], 3, a)
    os.kill(a.pid, signal.SIGKILL)
    a.communicate()
    study_name, = [n for n in optuna.get_all_study_names(storage=url) if n.startswith(f"{name}.")]
    study = optuna.load_study(study_name=study_name, storage=url)
    left_running = {t.number for t in study.trials
                    if t.state == optuna.trial.TrialState.RUNNING and _pid_of(t) == a.pid}
    assert left_running                          # the kill left A's trial in the middle
    c = tuner("c", 0.3)
    _wait_for_calls(logs["c"], 1, c)
    assert b.poll() is None                      # C resumed while B was still at it
    for p in (b, c):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err

    study = optuna.load_study(study_name=study_name, storage=url)
    trials = {t.number: t for t in study.trials}
    assert not [t for t in trials.values() if t.state == optuna.trial.TrialState.RUNNING]
    assert {trials[n].state for n in left_running} == {optuna.trial.TrialState.FAIL}
    counted = _counted(study)
    assert len(counted) == 16 and len({t.user_attrs["config_id"] for t in counted}) == 16
    done = {t.user_attrs["config_id"] for t in counted}
    requeued = {t.user_attrs.get("requeued_from") for t in trials.values() if t.state == optuna.trial.TrialState.WAITING}
    for n in left_running:                       # measured since, or queued for the next run (budget reached)
        assert trials[n].user_attrs.get("config_id") in done or n in requeued

    df = rows(tmp_path, name)
    assert not df.duplicated(subset=["config_id", "shape", "dtype"]).any()
    assert set(df["config_id"]) == done          # a row for every counted trial
    measured = [c["cid"] for k in "abc" for c in calls(logs[k])]
    cut = calls(logs["a"])[-1]["cid"]            # A's job in flight at the kill
    assert set(measured) - done <= {cut}         # every finished measurement has its row: none lost
    again = {cid for cid in measured if measured.count(cid) > 1}
    a_rows = df[[_pid_of(trials[int(n)]) == a.pid for n in df["trial"]]]
    assert again <= {cut} and not again & set(a_rows["config_id"])    # only the cut job ran again


def test_another_hosts_trials_are_alive_while_marked_so(tmp_path, env, storage_url):
    """RUNNING trials of tuners on other hosts (simulated here): one not marked alive for STALE_S, its
    machine dead, is failed at the next start and its config measured; one marked alive just now is left
    running, its config not measured, and counted toward the budget (5 trials measured for 6)."""
    import time

    from gluon.tuning.trials import STALE_S
    url, name = storage_url
    spec = fake_spec(tmp_path, x=(1, 40), y=(1, 2, 3), sampler="random", trials=2, name=name)
    s1 = run_tune(spec, tmp_path, storage=url)
    study = optuna.load_study(study_name=s1.study_name, storage=url)
    space = load(spec).space
    free = [x for x in range(1, 41) if x not in {c["X"] for c in calls(env.log)}]

    def other_hosts_trial(x, alive_at):
        study.enqueue_trial({"X": x, "Y": 1})
        t = study.ask()
        cid = space.config_id(space.suggest(t))
        for k, v in {"owner": {"host": "elsewhere", "pid": 1, "run": "r"}, "alive_at": alive_at,
                     "config_id": cid}.items():
            t.set_user_attr(k, v)
        return t.number, cid
    dead, dead_cid = other_hosts_trial(free[0], time.time() - STALE_S - 60)
    live, live_cid = other_hosts_trial(free[1], time.time())
    s2 = run_tune(spec, tmp_path, storage=url, trials=6)
    states = {t.number: t.state for t in study.trials}
    assert states[dead] == optuna.trial.TrialState.FAIL and states[live] == optuna.trial.TrialState.RUNNING
    measured = [c["cid"] for c in calls(env.log)]
    assert dead_cid in measured and live_cid not in measured and len(measured) == 5
    assert s2.trials == 5 and s2.stopped == "trials"


def test_a_tuner_marks_its_trials_in_flight_alive(tmp_path, env, storage_url, monkeypatch):
    """The heartbeat: a trial measured for 0.8 s was marked alive (alive_at) well after it started."""
    monkeypatch.setattr("gluon.tuning.trials.HEARTBEAT_S", 0.1)
    monkeypatch.setenv("FAKE_TUNE_DELAY", "0.8")
    url, name = storage_url
    spec = fake_spec(tmp_path, x=(1, 40), sampler="random", trials=2, name=name)
    s = run_tune(spec, tmp_path, storage=url)
    study = optuna.load_study(study_name=s.study_name, storage=url)
    for t in _counted(study):
        assert t.user_attrs["alive_at"] - t.datetime_start.timestamp() > 0.5


def test_the_postgresql_tests_skip_on_a_laptop_but_fail_in_ci_without_a_server(monkeypatch):
    """Without GLUON_TEST_POSTGRES_URL the PostgreSQL variants are skipped, except in CI (CI=true, or
    GLUON_TEST_REQUIRE_POSTGRES as .ci/run sets it), where they fail: CI cannot pass without running them."""
    for name in ("GLUON_TEST_POSTGRES_URL", "CI", "GLUON_TEST_REQUIRE_POSTGRES"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(pytest.skip.Exception):
        postgres_test_url()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        postgres_test_url()
    for name in ("CI", "GLUON_TEST_REQUIRE_POSTGRES"):
        monkeypatch.setenv("CI", "false")
        monkeypatch.delenv("GLUON_TEST_REQUIRE_POSTGRES", raising=False)
        monkeypatch.setenv(name, "1")                # either one alone
        with pytest.raises(pytest.fail.Exception, match="must run in CI"):
            postgres_test_url()
    monkeypatch.setenv("GLUON_TEST_POSTGRES_URL", "postgresql://u@h/db")
    assert postgres_test_url() == "postgresql://u@h/db"


def test_storage_urls_are_masked_and_bad_ones_are_clear_errors(tmp_path):
    from gluon.tuning.storage import TuneError, describe_storage_url, open_storage
    assert describe_storage_url("postgresql://tuner:s3cret@db.example:5432/gluon") == \
        "postgresql://tuner:***@db.example:5432/gluon"
    with pytest.raises(TuneError) as ei:       # no driver installed, or nothing listening on port 1
        open_storage("postgresql://tuner:s3cret@127.0.0.1:1/gluon", "study", tmp_path)
    msg = str(ei.value)
    assert "s3cret" not in msg and "postgresql://tuner:***@127.0.0.1:1/gluon" in msg
    assert "psycopg" in msg or "cannot open the database" in msg
    with pytest.raises(TuneError, match="not a database URL"):
        open_storage("nonsense://", "study", tmp_path)
    with pytest.raises(TuneError, match="not a database URL"):
        open_storage("sqlite://x:y:z", "study", tmp_path)
    # a plain path is a journal file
    from gluon.tuning.storage import storage_claims
    st, desc = open_storage(str(tmp_path / "j" / "study.log"), "study", tmp_path / "tuning")
    assert isinstance(st, optuna.storages.JournalStorage) and desc.endswith("study.log")
    assert storage_claims(st, desc, "study", tmp_path / "tuning").path == str(tmp_path / "j" / ".study.log.claims.lock")


def test_cli_tune_takes_a_storage_url(tmp_path, monkeypatch, capsys):
    """`gluon tune SPEC --storage URL` reaches tune(); an unopenable URL is a usage error without a traceback."""
    from gluon.cli import main
    seen = {}

    def fake_tune(spec, **kw):
        seen.update(kw)
        from gluon.tuning.tuner import TuneSummary
        return TuneSummary(spec_name=spec.name, dry_run=True, results_root=kw["results_root"],
                           best_config={"XBLOCK": 512})          # (a run with no best exits 1)
    monkeypatch.setattr("gluon.tuning.tuner.tune", fake_tune)
    copy_spec = os.path.join(REPO, "specs", "copy.toml")
    assert main(["tune", copy_spec, "--storage", "sqlite:///x.db", "--json", "--results", str(tmp_path)]) == 0
    assert seen["storage"] == "sqlite:///x.db"

    def failing_tune(spec, **kw):
        from gluon.tuning.tuner import TuneError
        raise TuneError("storage postgresql://u:***@h/db: cannot open the database: connection refused")
    monkeypatch.setattr("gluon.tuning.tuner.tune", failing_tune)
    assert main(["tune", copy_spec, "--storage", "postgresql://u:pw@h/db"]) == 2
    err = capsys.readouterr().err
    assert "cannot open the database" in err and "Traceback" not in err and "pw@" not in err
