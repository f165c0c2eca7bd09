"""`gluon check` without a GPU: the covering sample, --all, spills as warnings, values no legal config holds."""
import json
import os
import sys

from gluon.cli import main
from gluon.tuning.check import greedy_cover

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPY_SPEC = os.path.join(ROOT, "specs", "copy.toml")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def test_the_greedy_cover_holds_every_value_and_replaces_a_refused_config():
    configs = [dict(A=a, B=b) for a in (1, 2, 3) for b in ("x", "y")]
    taken = []

    def accept(cfg):
        taken.append(cfg)
        return cfg != dict(A=1, B="x")          # the first pick is "refused": its values stay wanted

    assert greedy_cover(configs, accept) == set()
    assert taken[0] == dict(A=1, B="x")
    held = {(k, v) for c in taken[1:] for k, v in c.items()}
    assert held >= {("A", 1), ("A", 2), ("A", 3), ("B", "x"), ("B", "y")}
    assert len(taken) <= 5                      # far fewer than the 6 configs, refused one included


def test_check_samples_by_default_and_says_what_it_skipped(capsys):
    assert main(["check", COPY_SPEC, "--no-compile"]) == 0
    out = capsys.readouterr().out
    assert "checked a sample of" in out and "of the space's 30 configs" in out and "--all checks them all" in out
    assert main(["check", COPY_SPEC, "--no-compile", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert 3 <= len(rows) < 30
    assert {r["config"]["XBLOCK"] for r in rows} == {512, 1024, 2048, 4096, 8192}
    assert {r["config"]["NUM_WARPS"] for r in rows} == {2, 4, 8}
    assert {r["config"]["FORM"] for r in rows} == {"simt", "explicit"}


def test_check_compiles_the_sample_in_parallel_with_progress(capsys):
    assert main(["check", COPY_SPEC, "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "compiled, ETA" in out and "pairs compile clean" in out and "0 failed to compile" in out


def _attention_spec(tmp_path, params, shapes):
    from test_attention_tuning import _tiny_spec
    return _tiny_spec(tmp_path, shapes=shapes, params=params)


def test_spills_are_warnings_counted_apart(tmp_path, capsys):
    # persistent at D 128 with 240 consumer / 24 producer registers spills where S is no multiple of 16
    spec = _attention_spec(tmp_path, {"PERSISTENT": [True], "PINGPONG": [False]}, [[2, 4, 1000, 128, False]])
    assert main(["check", str(spec), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in rows] == ["spills"] and rows[0]["spills"] > 0
    assert main(["check", str(spec)]) == 0
    assert "0 (config, dtype) pairs compile clean, 1 compile with register spills (warnings)" in \
        capsys.readouterr().out


def test_a_value_no_legal_config_holds_is_named(tmp_path, capsys):
    # 256-key tiles never fit at D 128 (two stages: 288 KiB of shared memory)
    spec = _attention_spec(tmp_path, {"BLOCK_N": [128, 256]}, [[2, 4, 512, 128, False]])
    assert main(["check", str(spec), "--no-compile"]) == 0
    out = capsys.readouterr().out
    assert "no legal config among those tried holds BLOCK_N=256" in out


def test_a_dtype_the_template_lacks_is_one_error_before_any_config(tmp_path, capsys):
    """Not one pruned row per config (the issue saw 1729): check and tune both stop at the spec, exit 2."""
    from test_attention_tuning import _tiny_spec
    spec = _tiny_spec(tmp_path, dtypes=("fp32",))
    for cmd in (["check", str(spec)], ["tune", str(spec), "--results", str(tmp_path / "r")]):
        assert main(cmd) == 2
        cap = capsys.readouterr()
        assert cap.err.count("\n") == 1 and "Traceback" not in cap.err
        assert "attn_tiny.toml:" in cap.err and "dtypes[0]: template attention_sm90 does not take fp32" in cap.err
        assert "refused" not in cap.out


def test_an_unknown_parameter_is_one_error_with_the_nearest_name(tmp_path, capsys):
    from test_attention_tuning import _tiny_spec
    spec = _tiny_spec(tmp_path, params={"BLOKC_N": [64, 128]})
    assert main(["check", str(spec), "--no-compile"]) == 2
    err = capsys.readouterr().err
    assert "attn_tiny.toml:" in err and "params.BLOKC_N" in err and "has no parameter 'BLOKC_N'" in err
    assert "BLOCK_N" in err and err.count("\n") == 1


def _gemm_spec_with(tmp_path, old, new):
    text = open(os.path.join(ROOT, "specs", "gemm_sm90.toml")).read()
    assert old in text
    p = tmp_path / "g.toml"
    p.write_text(text.replace(old, new))
    return str(p)


def test_a_template_for_another_arch_is_one_error_at_kernel_arch(tmp_path, capsys):
    spec = _gemm_spec_with(tmp_path, 'arch = "sm90"', 'arch = "sm80"')
    for cmd in (["check", spec, "--no-compile"], ["tune", spec]):
        assert main(cmd) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"gluon: error: {tmp_path}/g.toml:7: kernel.arch: template gemm_sm90 runs on sm90, not sm80; "
                       "allowed: sm90"] or err[-1].endswith("runs on sm90, not sm80; allowed: sm90"), err


def test_a_value_the_template_never_takes_is_one_error_at_its_field(tmp_path, capsys):
    spec = _gemm_spec_with(tmp_path, "[warp_roles.producer]\nwarps = 1", "[warp_roles.producer]\nwarps = { values = [1, 2] }")
    assert main(["check", spec, "--no-compile"]) == 2
    err = capsys.readouterr().err
    assert "warp_roles.producer.warps: PRODUCER_WARPS=2: gemm_sm90 has one producer warp" in err
    assert err.count("\n") == 1                   # one line, not one per config
