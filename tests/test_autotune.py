"""`@gluon.autotune` on this CPU machine: configs are really traced and compiled (the passes prune with
their reason), the launch is emulated on CPU tensors (CompiledKernel.__call__ replaced) and the clock is
injected (`_timer`): the fastest config wins, pruned and wrong configs are skipped with their reasons, the
choice is cached per key, a new key times again, and every timing is a results row."""
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

import gluon  # noqa: E402
import gluon.language as gl  # noqa: E402
from gluon.language import PointerArg, ScalarArg  # noqa: E402


@gluon.jit
def copy_at(dst_ptr, src_ptr, n_elements, XBLOCK: gl.constexpr):
    idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
    if idx < n_elements:
        dst_ptr[idx] = src_ptr[idx]


CONFIGS = [{"XBLOCK": 256, "num_warps": 2}, {"XBLOCK": 512, "num_warps": 4},
           {"XBLOCK": 1000, "num_warps": 4},                  # not a power of two: the passes reject it
           {"XBLOCK": 1024, "num_warps": 4}]
FAKE_MS = {256: 0.30, 512: 0.10, 1024: 0.20}


def grid(meta):
    return ((meta["n_elements"] + meta["XBLOCK"] - 1) // meta["XBLOCK"],)


def block(config):
    return (config["XBLOCK"],)


@pytest.fixture
def cpu_launch(monkeypatch):
    """Launches run on the CPU: the compiled kernel's call copies (or, for XBLOCK in `wrong`, corrupts)."""
    jit = sys.modules["gluon.jit"]
    log = {"launched": [], "wrong": set()}

    def call(self, grid, *args, stream=None, meta=None, **sizes):
        dst, src, n = self.launch_args(args, sizes)
        log["launched"].append((meta["XBLOCK"], self.binary.num_warps))
        dst[:n].copy_(src[:n] * (1.5 if meta["XBLOCK"] in log["wrong"] else 1.0))
    monkeypatch.setattr(jit.CompiledKernel, "__call__", call)
    return log


def fake_timer(timed):
    def timer(fn, config):
        fn()
        timed.append(config["XBLOCK"])
        return [FAKE_MS[config["XBLOCK"]], 0.9 * FAKE_MS[config["XBLOCK"]], 1.1 * FAKE_MS[config["XBLOCK"]]]
    return timer


def _rows(root, name="copy_at"):
    from gluon.tuning.results import ResultsStore
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ResultsStore(root).read(name)


def test_fastest_wins_pruned_skipped_choice_cached_per_key(tmp_path, cpu_launch, capsys):
    timed = []
    k = gluon.autotune(configs=CONFIGS, key=["n_elements"], results_root=str(tmp_path / "results"),
                       _timer=fake_timer(timed))(copy_at)
    assert k.name == "copy_at" and k.trace is not None and k.constexprs == {"XBLOCK"}    # still the kernel
    src, dst = torch.randn(1000), torch.full((1000,), float("nan"))
    k[grid, block](dst, src, 1000, arch="sm90")
    assert k.best_config == {"XBLOCK": 512, "num_warps": 4} and torch.equal(dst, src)
    assert timed == [256, 512, 1024]                                   # the pruned config is never timed
    assert cpu_launch["launched"][-1] == (512, 4)                      # then the launch with the winner
    (results,) = k.timings.values()
    status = {r["config"]["XBLOCK"]: r["status"] for r in results}
    assert status == {256: "ok", 512: "ok", 1000: "pruned", 1024: "ok"}
    pruned = next(r for r in results if r["status"] == "pruned")
    assert "power of two" in pruned["reason"]
    assert all(r["registers"] > 0 for r in results if r["status"] == "ok")   # compiled for real

    k[grid, block](dst, src, 1000, arch="sm90")                        # same key: nothing timed again
    assert timed == [256, 512, 1024] and k.tuned == 1 and cpu_launch["launched"][-1] == (512, 4)
    src2, dst2 = torch.randn(3000), torch.empty(3000)
    assert k[grid, block].choose(dst2, src2, 3000, arch="sm90") == {"XBLOCK": 512, "num_warps": 4}
    assert len(timed) == 6 and k.tuned == 2                            # a new key: timed again
    launches = len(cpu_launch["launched"])
    k[grid, block](dst2, src2, 3000, arch="sm90")
    assert len(timed) == 6 and len(cpu_launch["launched"]) == launches + 1 and torch.equal(dst2, src2)

    df = _rows(tmp_path / "results")
    assert len(df) == 8 and set(df["shape"]) == {"1000", "3000"} and set(df["dtype"]) == {"fp32"}
    assert not df["dry_run"].any() and set(df["arch"]) == {"sm90"}
    one = df[df["shape"] == "1000"].set_index("XBLOCK")
    assert one.loc[512, "median_ms"] == pytest.approx(0.10) and one.loc[256, "p90_ms"] == pytest.approx(0.33)
    assert one.loc[1000, "status"] == "pruned" and "power of two" in one.loc[1000, "reason"]
    assert sorted(one["trial"]) == [0, 1, 2, 3] and one["study"].str.startswith("autotune.copy_at.").all()
    from gluon.cli import main                                         # `gluon results` shows them
    assert main(["results", "copy_at", "--results", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert "copy_at" in out and "1000" in out and "3000" in out


def test_reference_rejects_wrong_results(tmp_path, cpu_launch):
    cpu_launch["wrong"].add(512)                                       # the fastest config is wrong
    timed = []
    k = gluon.autotune(configs=CONFIGS, key=["n_elements"], results_root=str(tmp_path / "results"),
                       reference=lambda dst_ptr, src_ptr, n_elements: {"dst_ptr": src_ptr.double()},
                       _timer=fake_timer(timed))(copy_at)
    src, dst = torch.randn(1000), torch.empty(1000)
    k[grid, block](dst, src, 1000, arch="sm90")
    assert k.best_config["XBLOCK"] == 1024 and torch.equal(dst, src) and timed == [256, 1024]
    df = _rows(tmp_path / "results").set_index("XBLOCK")
    assert df.loc[512, "status"] == "wrong_result" and "exceeds" in df.loc[512, "reason"]
    assert df.loc[512, "max_err"] == pytest.approx(0.5, rel=1e-3) and df.loc[1024, "max_err"] == 0.0


def test_prune_and_compile_without_a_gpu():
    k = gluon.autotune(configs=CONFIGS, key=["n_elements"], results_root=None)(copy_at)
    verdicts = k.autotune_prune(PointerArg(gl.float32), PointerArg(gl.float32), ScalarArg(gl.int32, 1),
                                arch="sm90", block=block)
    assert [v["status"] for v in verdicts] == ["ok", "ok", "pruned", "ok"]
    assert "power of two" in verdicts[2]["reason"]
    assert all(v["registers"] > 0 and v["spills"] == 0 for v in verdicts if v["status"] == "ok")
    quick = k.prune(PointerArg(gl.float32), PointerArg(gl.float32), ScalarArg(gl.int32, 1), arch="sm90",
                    block=block, compile=False)
    assert [v["status"] for v in quick] == ["ok", "ok", "pruned", "ok"] and "registers" not in quick[0]


def test_launch_without_a_gpu_raises_like_any_launch(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    k = gluon.autotune(configs=CONFIGS, key=["n_elements"], results_root=str(tmp_path))(copy_at)
    src, dst = torch.randn(100), torch.empty(100)
    for kw in ({}, {"arch": "sm90"}):
        with pytest.raises(Exception) as plain:
            copy_at[grid, (256,)](dst, src, 100, XBLOCK=256, num_warps=2, **kw)
        with pytest.raises(type(plain.value)) as tuned:
            k[grid, block](dst, src, 100, **kw)
        assert str(tuned.value).splitlines()[0] == str(plain.value).splitlines()[0]
    assert not k.cache and not list(tmp_path.iterdir())


def test_bad_use_is_a_clear_error(cpu_launch):
    with pytest.raises(TypeError, match="above @gluon.jit"):
        gluon.autotune(configs=CONFIGS, key=["n_elements"])(lambda x: x)
    with pytest.raises(ValueError, match="key 'n' is not a parameter"):
        gluon.autotune(configs=CONFIGS, key=["n"])(copy_at)
    with pytest.raises(ValueError, match="sets BLOCK, which is not a constexpr"):
        gluon.autotune(configs=[{"BLOCK": 1}], key=["n_elements"])(copy_at)
    k = gluon.autotune(configs=CONFIGS, key=["n_elements"], results_root=None, _timer=fake_timer([]))(copy_at)
    with pytest.raises(gluon.GluonError, match="chosen by the autotuner"):
        k[grid, block](torch.empty(10), torch.empty(10), 10, XBLOCK=256, arch="sm90")
    only_bad = gluon.autotune(configs=[{"XBLOCK": 1000}], key=["n_elements"], results_root=None,
                              _timer=fake_timer([]))(copy_at)
    with pytest.raises(gluon.GluonError, match="no config works for key n_elements=10.*power of two"):
        only_bad[grid, block](torch.empty(10), torch.empty(10), 10, arch="sm90")
