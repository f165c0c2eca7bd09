"""`gluon report` on rows made here: a measured fake spec (2 shapes, a few trials, one failed), a
dry-run copy spec (whose template loads from specs/), the PNGs, report.md's table, verdicts and the
dry-run marking, importance from a stored study or from the rows. CPU only."""
import json
import os
import warnings

import pytest

pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
pytest.importorskip("matplotlib")
optuna = pytest.importorskip("optuna")

from gluon.tuning.results import ResultsStore, make_row  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDY = "fake_gemm.sm90.NVIDIA-H200.2shapes.fp16.abcd1234"
A, B = (4096, 4096, 4096), (64, 8192, 64)
PNG = b"\x89PNG\r\n\x1a\n"
# trial -> (config, ratio at A, ratio at B or None when B failed)
TRIALS = {0: ({"BLOCK_N": 128, "STAGES": 3}, 0.90, 0.95),
          1: ({"BLOCK_N": 256, "STAGES": 3}, 1.05, 0.92),
          2: ({"BLOCK_N": 256, "STAGES": 4}, 1.10, 1.02),
          3: ({"BLOCK_N": 128, "STAGES": 4}, 0.97, None)}


def _measured(store):
    rows = []
    for trial, (cfg, ra, rb) in TRIALS.items():
        cid = f"c{trial}"
        for shape, ratio, tflops, gbps in ((A, ra, 600.0 * ra, 50.0), (B, rb, 5.0, 3000.0 * (rb or 1))):
            base = dict(spec_name="fake_gemm", spec_hash="h", template="nowhere.module:TUNING", template_hash="t",
                        config_id=cid, config=cfg, shape=shape, dtype="fp16", arch="sm90", device="NVIDIA H200",
                        trial=trial, study=STUDY, dry_run=False)
            if ratio is None:
                rows.append(make_row(status="wrong_result", reason="max |out - ref| exceeds", **base))
            else:
                rows.append(make_row(status="ok", ratio=ratio, median_ms=1.0 / ratio, baseline_ms=1.0,
                                     tflops=tflops, gbps=gbps, **base))
    store.write_many(rows)


def _dry(store):
    n = 1 << 20
    rows = []
    for cid, xb, model_ms in (("d1", 1024, 0.0021), ("d2", 2048, 0.0025)):
        rows.append(make_row(spec_name="copy", spec_hash="h", template="examples/copy_kernel.py:TUNING",
                             template_hash="t", config_id=cid, config={"XBLOCK": xb, "NUM_WARPS": 4, "FORM": "simt"},
                             shape=(n,), dtype="fp32", arch="sm90", device="dry-run", status="ok", dry_run=True,
                             model_ms=model_ms, roofline_fraction=0.0017 / model_ms))
    rows.append(make_row(spec_name="copy", config_id="d3", config={"XBLOCK": 1000, "NUM_WARPS": 4, "FORM": "simt"},
                         shape=(n,), dtype="fp32", arch="sm90", status="pruned", reason="not a power of two",
                         dry_run=True))
    store.write_many(rows)


def _stored_study(tuning):
    from optuna.distributions import CategoricalDistribution
    from gluon.tuning.storage import journal_storage
    st = optuna.create_study(study_name=STUDY, storage=journal_storage(tuning / f"{STUDY}.log"),
                             direction="maximize")
    dists = {"BLOCK_N": CategoricalDistribution([128, 256]), "STAGES": CategoricalDistribution([3, 4])}
    for trial, (cfg, ra, rb) in TRIALS.items():
        if rb is None:
            st.add_trial(optuna.trial.create_trial(params=cfg, distributions=dists, state=optuna.trial.TrialState.PRUNED))
        else:
            st.add_trial(optuna.trial.create_trial(params=cfg, distributions=dists, value=(ra * rb) ** 0.5,
                                                   user_attrs={"config_id": f"c{trial}"}))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    base = tmp_path_factory.mktemp("report")
    store = ResultsStore(base / "results")
    _measured(store)
    _dry(store)
    _stored_study(base / "tuning")
    return base


def _png_ok(path):
    data = open(path, "rb").read()
    return data[:8] == PNG and len(data) > 5000


def test_report_writes_plots_table_verdicts_and_dry_run_marking(results):
    from gluon.tuning.report import write_report
    out = results / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = write_report(results / "results", out, specs_dir=os.path.join(REPO, "specs"),
                           tuning_root=results / "tuning")
    for spec in ("fake_gemm", "copy"):
        for kind in ("best-so-far", "ratio", "importance"):
            assert _png_ok(out / f"{spec}-{kind}.png"), (spec, kind)
    assert not [p for p in os.listdir(out) if p.startswith(".")]        # no temporaries left behind
    md = (out / "report.md").read_text()
    assert "| spec | arch | shape | dtype | config |" in md and "fraction of the datasheet peak" in md
    best = {(e["spec_name"], e["shape"]): e for e in rep.best}
    a, b = best[("fake_gemm", "4096x4096x4096")], best[("fake_gemm", "64x8192x64")]
    assert a["config"] == {"BLOCK_N": 256, "STAGES": 4} and a["ratio"] == pytest.approx(1.10)
    assert a["bound"] == "compute-bound" and a["fraction"] == pytest.approx(660 / 989, rel=1e-3)
    assert b["bound"] == "memory-bound" and b["fraction"] == pytest.approx(3060 / 4800, rel=1e-3)
    assert a["source"] == "row"                                         # its template does not load
    row_a = next(line for line in md.splitlines() if line.startswith("| fake_gemm | sm90 | 4096x4096x4096"))
    assert "BLOCK_N=256 STAGES=4" in row_a and "compute-bound" in row_a and "66.7%" in row_a and "| yes |" in row_a
    c = best[("copy", "1048576")]
    assert c["dry_run"] and c["config"]["XBLOCK"] == 1024 and c["source"] == "template"
    assert c["bound"] == "memory-bound" and c["intensity"] == 0.0
    assert c["fraction"] == pytest.approx(8 * (1 << 20) / 0.0021e-3 / 4.8e12, rel=1e-3)
    row_c = next(line for line in md.splitlines() if line.startswith("| copy |"))
    assert "dry run: model, not measured" in row_c and "(model)" in row_c and "memory-bound" in row_c
    # importance: the stored study for fake_gemm, the model's ranking for the dry-run copy
    assert rep.importance["fake_gemm"]["method"].startswith("optuna.importance.get_param_importances")
    assert set(rep.importance["fake_gemm"]["studies"][STUDY]["importance"]) == {"BLOCK_N", "STAGES"}
    assert "dry run: model, not measured" in rep.importance["copy"]["method"]
    assert "PED-ANOVA" in md and "![best so far](fake_gemm-best-so-far.png)" in md


def test_importance_falls_back_to_the_rows_and_the_cli(results, capsys):
    from gluon.cli import main
    from gluon.tuning.report import trial_values
    out = results / "cli"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(["report", "fake_gemm", "--results", str(results / "results"), "--out", str(out),
                   "--specs", str(results / "nospecs"), "--tuning", str(results / "nostudies"), "--json"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert sorted(os.path.basename(f) for f in data["files"]) == [
        "fake_gemm-best-so-far.png", "fake_gemm-importance.png", "fake_gemm-ratio.png", "report.md"]
    assert all(_png_ok(f) for f in data["files"] if f.endswith(".png"))
    imp = data["importance"]["fake_gemm"]
    assert imp["method"].startswith("from the rows")
    # the spread: best objective per value, max - min (trial 3 failed: no value)
    vals = {t: (ra * rb) ** 0.5 for t, (_, ra, rb) in TRIALS.items() if rb is not None}
    assert imp["studies"][STUDY]["importance"]["BLOCK_N"] == pytest.approx(vals[2] - vals[0])
    md = open(data["markdown"]).read()
    assert "from the rows" in md and "copy" not in md.split("## fake_gemm")[0].split("|---|")[-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = ResultsStore(results / "results").read("fake_gemm")
    pts = dict((t, v) for t, v, _ in trial_values(df)[STUDY])
    assert pts[3] is None and pts[2] == pytest.approx(vals[2])
    assert main(["report", "nope", "--results", str(results / "results"), "--out", str(out)]) == 1
    assert "no results" in capsys.readouterr().err


@pytest.mark.parametrize("device,dtype,tflops,gbps,want_sheet,want_bound,want_fraction", [
    # 140 TFLOP/s at 2170 GB/s (the decode GEMM on an H100): memory-bound, against the H100's 3.35 TB/s
    ("NVIDIA H100 80GB HBM3", "bf16", 140.0, 2170.0, "H100 SXM", "memory-bound", 2170 / 3350),
    ("NVIDIA H200", "bf16", 140.0, 2170.0, "H200 SXM", "memory-bound", 2170 / 4800),
    # fp8 at 1383 TFLOP/s: compute-bound, a fraction of the fp8 rate (1979), not over 1 of the 16-bit one
    ("NVIDIA H100 80GB HBM3", "fp8e4m3", 1383.0, 2000.0, "H100 SXM", "compute-bound", 1383 / 1978),
    ("NVIDIA H100 PCIe", "fp16", 600.0, 1000.0, "H100 PCIe", "compute-bound", 600 / 756),
    ("NVIDIA A100-SXM4-80GB", "fp16", 600.0, 1000.0, "H200 SXM", "compute-bound", 600 / 989),    # not in the table
])
def test_verdicts_use_the_datasheet_of_the_gpu_that_measured_the_row(device, dtype, tflops, gbps, want_sheet,
                                                                     want_bound, want_fraction):
    from gluon.tuning.datasheets import datasheet
    from gluon.tuning.report import verdict
    row = dict(dry_run=False, median_ms=1.0, tflops=tflops, gbps=gbps, dtype=dtype, device=device, shape="1x1x1")
    v = verdict(row, None)
    assert v["datasheet"] == want_sheet and v["bound"] == want_bound
    assert v["fraction"] == pytest.approx(want_fraction, rel=2e-3)
    assert datasheet(device).name == want_sheet


def test_the_report_names_the_datasheets_it_used(results):
    from gluon.tuning.report import write_report
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_report(results / "results", results / "out2", specs_dir=os.path.join(REPO, "specs"),
                     tuning_root=results / "tuning")
    md = (results / "out2" / "report.md").read_text()
    assert "Datasheets used: H200 SXM (989 TFLOP/s 16-bit, 4.80 TB/s; 3 rows)" in md
