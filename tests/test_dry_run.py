"""`gluon tune` without a GPU (the dry run) as a user meets it: one summary, rows that a re-run replaces,
a deterministic best that was compiled, an error status when nothing is legal, a manifest without NaN."""
import json
import os

from gluon.cli import main
from gluon.tuning.results import ResultsStore
from gluon.tuning.spec import load_spec
from gluon.tuning.tuner import tune

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPY_SPEC = os.path.join(ROOT, "specs", "copy.toml")


def _tune(tmp_path, spec=COPY_SPEC, *extra):
    cwd = os.getcwd()
    os.chdir(ROOT)                              # the copy spec names its template by a path from the root
    try:
        return main(["tune", str(spec), "--results", str(tmp_path / "results"), "--tuning", str(tmp_path / "t"),
                     *extra])
    finally:
        os.chdir(cwd)


def test_the_summary_is_printed_once_and_a_rerun_replaces_its_rows(tmp_path, capsys):
    assert _tune(tmp_path) == 0
    first = capsys.readouterr().out
    assert first.count("DRY RUN of copy") == 1
    n = len(ResultsStore(tmp_path / "results").read("copy"))
    assert _tune(tmp_path) == 0
    assert capsys.readouterr().out.count("DRY RUN of copy") == 1
    df = ResultsStore(tmp_path / "results").read("copy")
    assert len(df) == n and df["row_id"].is_unique


def test_the_best_is_compiled_and_the_same_every_run(tmp_path):
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        spec = load_spec(COPY_SPEC)
        a = tune(spec, dry_run=True, results_root=str(tmp_path / "a"), progress=False, compile_workers=0,
                 dry_run_compiles=2)
        b = tune(spec, dry_run=True, results_root=str(tmp_path / "b"), progress=False, compile_workers=0,
                 dry_run_compiles=2)
    finally:
        os.chdir(cwd)
    assert a.best_config_id == b.best_config_id == a.ranking[0]["config_id"]
    assert a.ranking[0]["compiled"] and "registers" in a.ranking[0]
    assert [r["config_id"] for r in a.ranking] == [r["config_id"] for r in b.ranking]
    assert not any(r["compiled"] for r in a.ranking[2:])           # only the 2 best-ranked were compiled


def test_no_legal_config_is_exit_status_1(tmp_path, capsys):
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_attention_tuning import _tiny_spec
    # 256-key tiles at D 128 never fit in shared memory: the passes refuse every config
    spec = _tiny_spec(tmp_path, shapes=[[2, 4, 512, 128, False]], params={"BLOCK_N": [256]})
    assert _tune(tmp_path, spec) == 1
    assert "no legal config" in capsys.readouterr().out


def test_a_dry_run_manifest_holds_no_nan(tmp_path, capsys):
    assert _tune(tmp_path) == 0
    out = tmp_path / "build"
    assert main(["build", "--best", "copy", "--results", str(tmp_path / "results"), "--specs",
                 os.path.join(ROOT, "specs"), "--out", str(out), "--allow-dry-run"]) == 0
    text = (out / "copy" / "manifest.json").read_text()
    assert "NaN" not in text
    entry = json.loads(text)["entries"][0]
    assert entry["dry_run"] is True and entry["ratio"] is None and entry["median_ms"] is None
    assert "dry run, not timed" in capsys.readouterr().out


def test_a_closed_pipe_is_quiet(tmp_path, monkeypatch, capsys):
    """`gluon results ... | head`: the write that meets the closed pipe ends the command, exit 0, no traceback."""
    assert _tune(tmp_path) == 0
    capsys.readouterr()

    class ClosedPipe:
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert main(["results", "copy", "--results", str(tmp_path / "results")]) == 0
