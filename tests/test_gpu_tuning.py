"""On the GPU: the tuner's fault handling with a real kernel on the real measurement path.

tests/data/faulty_copy.toml tunes tests/data/faulty_copy.py, the copy template of examples/copy_kernel.py
with a FAULT parameter: "none" is the real copy, "oob" stores 2**47 bytes past the output (an illegal
address: the worker's CUDA context is lost), "wrong" writes src + 1 into every 97th element. The study runs
gluon.tuning.measure:measure_on_gpu in GpuWorker processes, as `gluon tune` does (the fakes of
tests/test_tuning.py cover the same paths on the CPU). Run with `python -m pytest -m gpu -q`.
"""
import importlib.util
import os
import re
import warnings

import pytest

from conftest import skip_unless_sm90

pytestmark = pytest.mark.gpu

for _m in ("optuna", "pandas", "pyarrow", "pydantic", "torch"):
    if importlib.util.find_spec(_m) is None:
        pytest.skip(f"needs {_m}", allow_module_level=True)

TESTS = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.join(TESTS, "data", "faulty_copy.toml")
NAME = "faulty_copy"
# what an illegal address looks like: a CUDA error raised in the worker, or the worker's death
CUDA_FAULT = re.compile(r"illegal (memory )?(access|address)|CUDA error|launch failure|died", re.IGNORECASE)


@pytest.fixture(autouse=True)
def _sm90():
    skip_unless_sm90("the spec")


def _spec():
    from gluon.tuning.spec import load_spec
    return load_spec(SPEC)


def _tune(tmp_path, **kw):
    from gluon.tuning.tuner import tune
    args = dict(gpus=[0], dry_run=False, progress=False, results_root=str(tmp_path / "results"),
                tuning_root=str(tmp_path / "tuning"))
    args.update(kw)
    return tune(_spec(), **args)


def _store(tmp_path):
    from gluon.tuning.results import ResultsStore
    return ResultsStore(tmp_path / "results")


def _job(spec, fault, xblock=1024, seed=0):
    """A job as the tuner sends it (gluon.tuning.jobs._Jobs._measured), shorter timings."""
    config = {"XBLOCK": xblock, "NUM_WARPS": 4, "FAULT": fault}
    return {"spec": spec, "config": config, "config_id": spec.space.config_id(config),
            "shape": tuple(spec.shapes[0]), "dtype": "fp32", "arch": "sm90", "seed": seed, "rtol": 1e-2,
            "atol": 0.0, "repeats": 1, "baseline": True, "purpose": "trial", "device_index": 0,
            "rep_ms": 20, "warmup_ms": 5}


def test_oob_is_a_runtime_error_wrong_is_never_selected_and_the_study_goes_on(tmp_path):
    spec = _spec()
    s = _tune(tmp_path)

    store = _store(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = store.read(NAME)
    assert store.problems == [] and df.attrs["problems"] == []   # no unreadable or half-written row file
    assert not [w for w in caught if str(w.message).startswith("results:")]
    files = store.files(NAME)
    import pyarrow.parquet as pq
    assert files and sum(pq.read_table(f).num_rows for f in files) == len(df) == s.rows_written

    first = df[~df["retimed"].fillna(False).astype(bool)]
    # every config of the space was tried, once
    space = {spec.space.config_id(c) for c in spec.space.grid()}
    assert len(space) == 6 and set(first["config_id"]) == space and len(first) == 6
    assert s.trials == 6 and s.statuses == {"runtime_error": 2, "wrong_result": 2, "ok": 2}, s.statuses

    oob = first[first["FAULT"] == "oob"]
    assert (oob["status"] == "runtime_error").all(), oob[["status", "reason"]].to_string()
    for why in oob["reason"]:
        assert why and CUDA_FAULT.search(why), why
    assert oob["median_ms"].isna().all() and oob["ratio"].isna().all()

    wrong = first[first["FAULT"] == "wrong"]
    assert (wrong["status"] == "wrong_result").all(), wrong[["status", "reason"]].to_string()
    assert wrong["reason"].str.contains("exceeds").all()       # every element written, some off by 1
    assert (wrong["max_err"] > 1e-2).all() and wrong["ratio"].isna().all()

    ok = first[first["FAULT"] == "none"]
    assert (ok["status"] == "ok").all(), ok[["status", "reason"]].to_string()
    assert (ok["max_err"] == 0).all()                          # an exact copy
    assert (ok["ratio"] > 0).all() and (ok["median_ms"] > 0).all() and (ok["baseline_ms"] > 0).all()
    assert (ok["device"].notna()).all() and (ok["registers"] > 0).all()

    # the study went on after the fault: the seeded oob config was trial 0, the exact copies came later
    by_trial = first.sort_values("trial")
    assert by_trial["FAULT"].iloc[0] == "oob" and by_trial["status"].iloc[0] == "runtime_error"
    assert ok["trial"].min() > oob["trial"].min()

    # the best (retimed, summary, study) is an exact copy
    assert s.best_config is not None and s.best_config["FAULT"] == "none"
    retimed = df[df["retimed"].fillna(False).astype(bool)]
    assert len(retimed) == 2 and set(retimed["FAULT"]) == {"none"} and (retimed["status"] == "ok").all()
    assert (retimed["max_err"] == 0).all()
    from gluon.tuning.results import summary
    assert list(summary(df)["FAULT"]) == ["none"]
    import optuna

    from gluon.tuning.storage import journal_storage
    study = optuna.load_study(study_name=s.study_name, storage=journal_storage(s.storage))
    assert study.best_trial.user_attrs["config"]["FAULT"] == "none"
    complete = {t.user_attrs["config"]["FAULT"] for t in study.trials if t.state.name == "COMPLETE"}
    assert complete == {"none"}


def test_a_fault_does_not_poison_the_next_job_on_the_same_worker():
    """After an illegal address the worker starts a fresh process (fresh CUDA context), and the next job
    on it is exact; a wrong result needs no restart and leaves the next job exact too."""
    from gluon.tuning.measure import GpuWorker
    spec = _spec()
    w = GpuWorker(0)                                # the real measurement, a spawned process
    try:
        w.start()
        env = w.env
        assert env["sm_count"] and env["device"]

        bad = w.run(_job(spec, "oob"), 120)
        assert bad["status"] == "runtime_error" and CUDA_FAULT.search(bad["reason"]), bad
        good = w.run(_job(spec, "none", seed=1), 120)
        assert good["status"] == "ok" and good["max_err"] == 0, good
        assert good["ratio"] > 0 and good["median_ms"] > 0
        assert w.starts == 2                        # the faulted process was replaced

        wrong = w.run(_job(spec, "wrong", seed=2), 120)
        assert wrong["status"] == "wrong_result" and "exceeds" in wrong["reason"], wrong
        again = w.run(_job(spec, "none", xblock=2048, seed=3), 120)
        assert again["status"] == "ok" and again["max_err"] == 0, again
        assert w.starts == 2 and w.alive            # a wrong result is not a CUDA fault: same process
    finally:
        w.close()
