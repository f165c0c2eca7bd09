"""bench/attention_variants.py on the CPU: the variants' syntax, the rotating rounds and the rows with fake
implementations and a fake clock (the benchmark itself needs a GPU)."""
import json
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import attention as A  # noqa: E402
from bench import attention_variants as V  # noqa: E402
from bench.attention_ref import reference  # noqa: E402


def test_variants_parse_to_config_overrides():
    assert V.parse_variant("base=") == ("base", None)
    assert V.parse_variant("bn64=BLOCK_N=64,PINGPONG=False") == ("bn64", {"BLOCK_N": 64, "PINGPONG": False})
    a = V.parse_args(["--variant", "base=", "--variant", "s3=STAGES=3", "--cases", "D64"])
    assert a.variants == {"base": None, "s3": {"STAGES": 3}} and [c.name for c in a.cases] == ["B4 H32 S4096 D64"]
    assert V.parse_args([]).variants == {"base": None}


@pytest.mark.parametrize("argv, words", [
    (["--variant", "STAGES"], "expected NAME=OVERRIDES"),
    (["--variant", "=STAGES=3"], "expected NAME=OVERRIDES"),
    (["--variant", "a=", "--variant", "a=STAGES=3"], "two variants have one name"),
    (["--cases", "S123"], "matches none"),
])
def test_bad_arguments_exit_2_with_a_reason(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        V.parse_args(argv)
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_each_round_times_every_call_once_in_a_rotated_order(monkeypatch):
    order = []
    monkeypatch.setattr(V, "TIMER", lambda fn, ms: order.append(fn()) or 1.0)
    got = V.rounds({"a": lambda: "a", "b": lambda: "b", "c": lambda: "c"}, 4, 10)
    assert order == list("abc" "bca" "cab" "abc")
    assert got == {"a": [1.0] * 4, "b": [1.0] * 4, "c": [1.0] * 4}


def _impl(name: str, factor: float = 1.0):
    """A fake implementation: the fp32 reference (times `factor`); its call carries `name` for the fake clock."""
    def make(q, k, v, causal, scale):
        out = torch.empty_like(q)
        pairs = [(b, h) for b in range(q.shape[0]) for h in range(q.shape[1])]

        def call():
            return out.copy_(reference(q, k, v, causal, scale, pairs).reshape(q.shape).to(q.dtype) * factor)
        call.impl = name
        return call, out
    return make


def test_rows_time_only_correct_variants_and_give_per_round_ratios(tmp_path, monkeypatch, capsys):
    impls = {n: _impl(n, 1.1 if n == "bad" else 1.0) for n in ("fast", "bad", "slow", "cudnn", "triton")}
    monkeypatch.setattr(V, "implementations", lambda args: impls)
    monkeypatch.setattr(A, "DEVICE", "cpu")
    times = {"fast": 1.0, "slow": 2.0, "cudnn": 1.5, "triton": 1.8}
    seen = []
    monkeypatch.setattr(V, "TIMER", lambda fn, ms: seen.append(fn.impl) or times[fn.impl])
    path = tmp_path / "v.json"
    rc = V.main(["--variant", "fast=", "--variant", "bad=STAGES=3", "--variant", "slow=BLOCK_N=64", "--cases",
                 "B1 H2 S16 D64", "--causal", "on", "--repeats", "2", "--json", str(path)])
    assert rc == 1                                          # a variant is wrong: the run says so
    (row,) = json.loads(path.read_text())["rows"]
    assert row["bad_status"] == "wrong" and "bad_tflops" not in row and "bad" not in seen
    assert sorted(set(seen)) == ["cudnn", "fast", "slow", "triton"] and len(seen) == 8
    assert row["fast_vs_cudnn"] == 1.5 and row["slow_vs_cudnn"] == 0.75 and row["slow_vs_triton"] == 0.9
    assert row["fast_tflops"] == pytest.approx(A.attention_flops(A.Case(1, 2, 16, 16, 64, 2), True) / 1.0 / 1e9)
    got = capsys.readouterr()
    assert "fast/cuDNN" in got.out and "slow/Triton" in got.out and "bad: wrong" in got.out
    # each check (a variant's first compiles it) reports on stderr as it finishes: a run cut short shows where
    assert [ln.split(":")[0].split()[-1] for ln in got.err.splitlines()] == list(impls)
    assert "B1 H2 S16 D64 causal bad: wrong in " in got.err
