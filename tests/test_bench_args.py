"""The benchmark scripts' argument parsing, on the CPU (the benchmarks themselves need a GPU)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gemm import _kernels, _parse_configs, _selected, _split_names  # noqa: E402


def test_configs_parse_ints_booleans_and_strings():
    assert _parse_configs(";SPLIT_WGS=False,BLOCK_N=128,EPILOGUE=direct;K_ZIGZAG=True") == [
        {}, {"SPLIT_WGS": False, "BLOCK_N": 128, "EPILOGUE": "direct"}, {"K_ZIGZAG": True}]


def test_kernel_names_carry_their_configs():
    names = _split_names("ws,ws[BLOCK_N=128,STAGES=5],tile")
    assert names == ["ws", "ws[BLOCK_N=128,STAGES=5]", "tile"]
    ks = _kernels(_parse_configs(";BLOCK_N=128,STAGES=5"))
    assert set(ks) == {"tile", "ws", "ws[BLOCK_N=128,STAGES=5]"}


def test_the_default_kernel_is_called_as_a_user_calls_it(monkeypatch):
    """`ws` launches with config None, as a user calls it, a named config with its dict (a repeat of either
    takes the prepared launch, as a user's does)."""
    import gluon.kernels.gemm_sm90 as gemm
    seen = []
    monkeypatch.setattr(gemm, "launch", lambda a, b, c, config=None, **kw: seen.append(config))
    ks = _kernels(_parse_configs(";STAGES=5"))
    ks["ws"](1, 2, 3)
    ks["ws[STAGES=5]"](1, 2, 3)
    assert seen == [None, {"STAGES": 5}]


def test_source_hash_names_the_code_on_disk(tmp_path):
    from bench.common import source_hash
    (tmp_path / "gluon").mkdir()
    (tmp_path / "bench").mkdir()
    (tmp_path / "gluon" / "a.py").write_text("x = 1\n")
    (tmp_path / "bench" / "b.py").write_text("y = 2\n")
    before = source_hash(str(tmp_path))
    assert len(before) == 12 and before == source_hash(str(tmp_path))
    (tmp_path / "gluon" / "a.py").write_text("x = 2\n")
    assert source_hash(str(tmp_path)) != before
    assert len(source_hash()) == 12                     # this checkout


def test_interleaved_keeps_every_round_and_the_round_length(monkeypatch):
    """Rows carry each round's times (the spread at the power cap is read from them) and the round length;
    the order alternates (ABBA), and the ratio is the median of the per-round ratios."""
    import bench.common as common
    seen, times = [], {"a": iter([2.0, 2.2, 2.0, 2.4, 2.0]), "b": iter([2.1, 2.1, 2.1, 2.1, 2.1])}

    def fake_bench_ms(fn, rep_ms):
        seen.append((fn.__name__, rep_ms))
        return next(times[fn.__name__])

    def a():
        pass

    def b():
        pass

    monkeypatch.setattr(common, "bench_ms", fake_bench_ms)
    r = common.interleaved(a, b, 5, 700)
    assert [n for n, _ in seen] == ["a", "b", "b", "a", "a", "b", "b", "a", "a", "b"]
    assert {ms for _, ms in seen} == {700} and r["round_ms"] == 700
    assert r["rounds_ms"] == [2.0, 2.2, 2.0, 2.4, 2.0] and r["baseline_rounds_ms"] == [2.1] * 5
    assert r["ratio"] == 2.1 / 2.0 and r["ratio_min"] == 2.1 / 2.4


def test_rounds_default_to_a_second():
    from bench.common import parser
    assert parser("x").parse_args([]).round_ms == 1000


def test_commit_says_dirty_where_tracked_files_differ_from_head(tmp_path):
    """A working tree copied over an older clone (the GPU machine's case) must not read as that clone's
    HEAD: the recorded commit gets "-dirty"; untracked files do not count."""
    import subprocess

    from bench.common import git_commit

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)
    assert git_commit(str(tmp_path)) == ""                     # not a repository
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("commit", "-qm", "a")
    head = git_commit(str(tmp_path))
    assert len(head) >= 7 and not head.endswith("-dirty")
    (tmp_path / "new.py").write_text("")
    assert git_commit(str(tmp_path)) == head
    (tmp_path / "a.py").write_text("x = 2\n")
    assert git_commit(str(tmp_path)) == head + "-dirty"


def test_timed_keeps_every_round_of_one_side(monkeypatch):
    """A baseline whose candidate failed its check is timed alone: the median over the rounds, each kept."""
    import bench.common as common
    times = iter([3.0, 1.0, 2.0])
    monkeypatch.setattr(common, "bench_ms", lambda fn, rep_ms: next(times))
    r = common.timed(lambda: None, 3, 400)
    assert r == {"time_ms": 2.0, "rounds_ms": [3.0, 1.0, 2.0], "round_ms": 400}


def test_a_kernel_name_selects_every_config_of_it():
    """--kernels 'ws' is the ws kernel at every config asked for (the default and each --ws-configs entry), as one
    asks for it beside --ws-configs; 'ws[STAGES=4]' one config; a name that selects nothing, nothing."""
    ks = dict.fromkeys(["tile", "ws", "ws[STAGES=4]", "ws[EPILOGUE=direct]"])
    assert _selected("ws", ks) == ["ws", "ws[STAGES=4]", "ws[EPILOGUE=direct]"]
    assert _selected("ws[STAGES=4]", ks) == ["ws[STAGES=4]"] and _selected("tile", ks) == ["tile"]
    assert _selected("ws", dict.fromkeys(["ws[STAGES=4]"])) == ["ws[STAGES=4]"]     # --ws-configs without the default
    assert _selected("tile", dict.fromkeys(["ws"])) == [] and _selected("nope", ks) == []


def test_without_a_gpu_a_bench_says_so_in_one_line():
    """bench/gemm.py, bench/attention.py and bench/ncu_gemm.py (benches with `need_gpu`) on a machine without
    CUDA: exit 1 and one line, no traceback."""
    import subprocess

    import pytest
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for argv in (["bench/gemm.py", "--shapes", "64x64x64"], ["bench/attention.py", "--cases", "B1H2S16D64"],
                 ["bench/ncu_gemm.py", "--dtype", "e4m3", "--scales", "block"]):
        r = subprocess.run([sys.executable, *argv], cwd=root, capture_output=True, text=True, timeout=120)
        assert (r.returncode, r.stderr) == (1, f"{argv[0]} needs a CUDA GPU\n")
    # the arguments first: --kernels takes a kernel (every config of it) or one config; an unknown one is refused
    # (exit 2)
    gemm = [sys.executable, "bench/gemm.py", "--shapes", "64x64x64", "--ws-configs", ";STAGES=4"]
    for kernels in ("ws", "ws[STAGES=4]", "ws,ws[STAGES=4]"):
        r = subprocess.run(gemm + ["--kernels", kernels], cwd=root, capture_output=True, text=True, timeout=120)
        assert (r.returncode, r.stderr) == (1, "bench/gemm.py needs a CUDA GPU\n"), kernels
    r = subprocess.run(gemm + ["--kernels", "nope"], cwd=root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown kernels ['nope']" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(gemm + ["--chain", "0"], cwd=root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--chain 0: the number of GEMMs" in r.stderr and "Traceback" not in r.stderr


def test_fp8_bench_decode_set_takes_block_scales():
    """`bench/gemm_fp8.py --shapes decode` is bench/gemm.py's decode set, every shape one that block scales take
    (N and K multiples of 128)."""
    from bench.gemm import DECODE_SHAPES
    from bench.gemm_fp8 import SHAPE_SETS
    assert SHAPE_SETS["decode"] == DECODE_SHAPES
    for shape in SHAPE_SETS["decode"] + SHAPE_SETS["llm"]:
        M, N, K = map(int, shape.split("x"))
        assert N % 128 == 0 and K % 128 == 0, shape
