"""The CLI's spec commands, `gluon build --best` and `gluon.load`, on this CPU machine (dry-run rows)."""
import json
import os
import subprocess
import sys
import warnings

import pytest

import gluon
from gluon.cli import main
from gluon.tuning.build import BuildError, build_best

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPY_SPEC = os.path.join(ROOT, "specs", "copy.toml")


@pytest.fixture(scope="module")
def dry_results(tmp_path_factory):
    base = tmp_path_factory.mktemp("tune")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        rc = main(["tune", COPY_SPEC, "--results", str(base / "results"), "--tuning", str(base / "tuning"), "--json"])
    finally:
        os.chdir(cwd)
    assert rc == 0
    return base / "results"


def test_check_reports_every_config(capsys):
    assert main(["check", COPY_SPEC, "--no-compile", "--all", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 30 and all(r["status"] == "legal" for r in rows)


@pytest.mark.parametrize("value", ["0", "-5", "abc", "inf"])
def test_tune_time_limit_takes_seconds_above_zero(value, capsys):
    with pytest.raises(SystemExit) as e:
        main(["tune", COPY_SPEC, "--time-limit", value])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--time-limit" in err and "seconds above zero" in err and "Traceback" not in err


def test_check_bad_spec_is_a_clear_error_without_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[kernel]\nname = "x"\ntemplate = "examples/copy_kernel.py:TUNING"\narch = "sm90"\n'
                   'dtypes = ["fp32"]\nshapes = [[1024]]\n[params]\nXBLOCK = { values = [] }\n')
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.toml" in err and "XBLOCK" in err and "Traceback" not in err


def test_results_lists_the_dry_run_best(dry_results, capsys):
    assert main(["results", "copy", "--results", str(dry_results), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 1 and rows[0]["dry_run"] is True and rows[0]["shape"] == "1073741824"


def test_build_refuses_dry_run_rows_unless_asked(dry_results, tmp_path, capsys):
    specs = os.path.join(ROOT, "specs")
    assert main(["build", "--best", "--results", str(dry_results), "--specs", specs, "--out", str(tmp_path)]) == 2
    assert "only dry-run results" in capsys.readouterr().err
    with pytest.raises(BuildError, match="only dry-run results"):
        build_best(dry_results, specs, tmp_path, log=lambda m: None)


def test_build_then_load_without_recompiling(dry_results, tmp_path):
    specs = os.path.join(ROOT, "specs")
    (manifest,) = build_best(dry_results, specs, tmp_path / "build", allow_dry_run=True, log=lambda m: None)
    data = json.loads(manifest.read_text())
    (entry,) = data["entries"]
    assert entry["shape"] == [1073741824] and entry["dtype"] == "fp32" and entry["dry_run"]
    art = manifest.parent / entry["artifacts"]
    assert (art / "metadata.json").exists() and any(p.suffix == ".cubin" for p in art.iterdir())
    # a fresh cache, in a fresh process: load installs the artifacts and takes well under 0.5 s
    env = dict(os.environ, GLUON_CACHE_DIR=str(tmp_path / "fresh-cache"))
    code = ("import time, json; t = time.perf_counter(); import gluon; "
            f"k = gluon.load({str(manifest)!r}); dt = time.perf_counter() - t; "
            "from gluon.cache import default_cache; "
            f"print(json.dumps({{'s': dt, 'hit': default_cache().get({entry['cache_key']!r}) is not None, "
            "'repr': repr(k)}))")
    out = json.loads(subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                                    text=True, check=True).stdout.strip().splitlines()[-1])
    assert out["hit"] and out["s"] < 0.5 and "copy" in out["repr"]


def test_a_loaded_kernel_runs_in_the_interpreter_on_cpu_tensors(dry_results, tmp_path):
    """GLUON_INTERPRET=1 (here set_enabled): `gluon.load(...)(x)` runs the built bucket's config in the CPU
    interpreter, with no CUDA; the declared softmax too (its one-pass `prepare` / `call_prepared` path)."""
    import torch

    from gluon.interpret import set_enabled
    specs = os.path.join(ROOT, "specs")
    (manifest,) = build_best(dry_results, specs, tmp_path / "build", allow_dry_run=True, log=lambda m: None)
    src = torch.randn(5000)
    was = set_enabled(True)
    try:
        out = gluon.load(manifest)(src)
        assert torch.equal(out, src)
        assert main(["tune", "--dry-run", os.path.join(specs, "softmax.toml"), "--results", str(tmp_path / "r"),
                     "--json"]) == 0
        (sm,) = build_best(tmp_path / "r", specs, tmp_path / "b", allow_dry_run=True, log=lambda m: None)
        x = torch.randn(64, 1000)
        assert torch.allclose(gluon.load(sm)(x), torch.softmax(x, -1), atol=1e-6)
    finally:
        set_enabled(was)


def test_load_picks_the_nearest_bucket(tmp_path):
    from gluon.loader import LoadedKernel
    manifest = {"name": "copy", "spec": os.path.join(ROOT, "specs", "copy.toml"),
                "template": "examples/copy_kernel.py:TUNING", "entries": [
                    {"shape": [1 << 20], "dtype": "fp32", "config": {"XBLOCK": 1024}, "artifacts": "a", "cache_key": "k1"},
                    {"shape": [1 << 30], "dtype": "fp32", "config": {"XBLOCK": 4096}, "artifacts": "b", "cache_key": "k2"},
                    {"shape": [1 << 30], "dtype": "fp16", "config": {"XBLOCK": 2048}, "artifacts": "c", "cache_key": "k3"}]}
    k = LoadedKernel.__new__(LoadedKernel)
    k.manifest, k.name, k.entries, k._choice = manifest, "copy", manifest["entries"], {}
    assert k.bucket((3 << 20,), "fp32")["config"]["XBLOCK"] == 1024
    assert k.bucket((1 << 29,), "fp32")["config"]["XBLOCK"] == 4096
    assert k.bucket((1 << 10,), "fp16")["config"]["XBLOCK"] == 2048
    with pytest.raises(BuildError, match="built for fp16, fp32, not bf16"):
        k.bucket((1 << 10,), "bf16")


def test_a_call_like_one_seen_before_runs_what_its_bucket_bound(tmp_path):
    """gluon.load's callable over a template's kernel: a repeat (tensors of the same shapes, dtypes and devices,
    the same other arguments) skips shape_of, dtype_of and the bucket and runs the bound call; another shape
    or another plain argument picks its own bucket; an argument that is neither a tensor nor a plain value
    (a list) is picked for on every call."""
    import torch

    from gluon.loader import LoadedKernel
    seen = []

    class Template:
        def shape_of(self, x, flag=False, extra=None):
            seen.append(tuple(x.shape))
            return (x.numel(), int(flag))

        def dtype_of(self, x, *a, **k):
            return "fp32"

        def bind(self, config):
            return lambda x, flag=False, extra=None: (config["X"], flag)

    k = LoadedKernel.of_entries("t", Template(), [{"shape": [64, 0], "dtype": "fp32", "config": {"X": 1}},
                                                  {"shape": [1 << 20, 1], "dtype": "fp32", "config": {"X": 2}}])
    x = torch.randn(8, 8)
    assert k(x) == (1, False) and k(torch.randn(8, 8)) == (1, False) and len(seen) == 1
    assert k(x, flag=True) == (1, True) and k(x, flag=True) == (1, True) and len(seen) == 2
    assert k(torch.randn(1024, 1024), flag=True) == (2, True) and len(seen) == 3
    assert k(x, extra=[1]) == (1, False) and k(x, extra=[1]) == (1, False) and len(seen) == 5


def test_load_unknown_name_says_what_to_run(tmp_path):
    with pytest.raises(BuildError, match="gluon build --best"):
        gluon.load("nope", root=str(tmp_path))


def test_the_loaded_gemm_names_an_operand_it_cannot_take(interpret_env):
    """gluon.load("gemm_sm90")(a, b) with a 1-D or non-tensor operand, or shapes that disagree: one GluonError
    naming it (an IndexError or AttributeError from the bucket's shape before), before a bucket is chosen (a call
    no bucket serves warned of its fallback first)."""
    import torch

    from gluon.ir import GluonError
    from gluon.loader import LoadedKernel
    from gluon.tuning.templates.gemm_sm90 import TUNING
    k = LoadedKernel.of_entries("gemm_sm90", TUNING, [{"shape": [64, 256, 256], "dtype": "fp16",   # decode's side
                                                       "config": TUNING.seed_configs()[2]}])
    h = torch.randn(64, 64).half()
    for args, msg in (((h, torch.randn(64).half()), r"b must be a 2-D torch.Tensor, got shape \[64\]"),
                      (([[1.0]], h), "a must be a 2-D torch.Tensor, got list"),
                      ((torch.randn(64, 32).half(), torch.randn(48, 64).half()), r"b \[48, 64\].*has K = 48"),
                      ((torch.randn(256, 32).half(), torch.randn(48, 64).half()), r"b \[48, 64\].*has K = 48")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")          # refused before a bucket is chosen: no fallback's warning
            with pytest.raises(GluonError, match=msg):
                k(*args)
    assert torch.allclose(k(h, h).float(), h.float() @ h.float(), rtol=1e-2, atol=1e-1)
