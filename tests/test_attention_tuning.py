"""attention_sm90 tunable and loadable without a GPU: specs/attention_sm90.toml, its adapter
(gluon/tuning/templates/attention_sm90.py: shapes [B, H, S, D, CAUSAL], legality, the reference, the
trace the launch compiles), `gluon check`, the dry run, and `gluon build --best` + `gluon.load` from
synthetic result rows (the chosen config per bucket, not a launch). The GPU path is
tests/test_attention_tuning_gpu.py."""
import importlib.util
import json
import math
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

for _m in ("optuna", "pandas", "pyarrow", "pydantic", "torch"):
    if importlib.util.find_spec(_m) is None:
        pytest.skip(f"needs {_m}", allow_module_level=True)
import torch  # noqa: E402

from gluon.ir import GluonError  # noqa: E402
from gluon.tuning.spec import SpecError, load_spec  # noqa: E402
from gluon.tuning.templates.attention_sm90 import TUNING, reference_attention  # noqa: E402

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SPEC = ROOT / "specs" / "attention_sm90.toml"
TEMPLATE = "gluon.tuning.templates.attention_sm90:TUNING"
# a config of the shipped spec's space (two warpgroups, overlapped, no ping-pong), in the spec's names
DEFAULT = dict(BLOCK_N=128, STAGES=2, CONSUMER_WARPS=8, CONSUMER_REGS=240, PRODUCER_WARPS=1, PRODUCER_REGS=24,
               OVERLAP=True, REVERSE_M=True, PINGPONG=False, PERSISTENT=False, PIN_SOFTMAX=False, HOLD_TURNS=False,
               ROWSUM_MMA=False, PREFETCH_Q=False, EARLY_Q_RELEASE=False, Q_REGS=False)


def _tiny_spec(tmp_path, name="attn_tiny", shapes=None, dtypes=("bf16",), params=None, extra=""):
    """A small spec on the shipped adapter (in a folder of its own: build_best finds specs by name)."""
    shapes = shapes or [[2, 4, 512, 128, False], [2, 4, 512, 128, True], [1, 8, 1024, 64, False]]
    params = params or {"BLOCK_N": [64, 128], "STAGES": [2, 3]}
    lines = ["[kernel]", f'name = "{name}"', f'template = "{TEMPLATE}"', 'arch = "sm90"',
             f"dtypes = {json.dumps(list(dtypes))}",
             "shapes = [" + ", ".join("[" + ", ".join(json.dumps(d) for d in s) + "]" for s in shapes) + "]",
             "[warp_roles.consumer]", "warps = 8", "registers = 240", "[warp_roles.producer]", "warps = 1",
             "registers = 24", "[params]", "OVERLAP = true", "REVERSE_M = true"]
    lines += [f"{k} = {{ values = {json.dumps(v)} }}" for k, v in params.items()]
    lines += ["[tuning]", "trials = 3", "rtol = 2e-2", "retime_top = 1", "repeats = 1", "round_ms = 20",
              "retime_round_ms = 50"]
    folder = tmp_path / "specs"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


# ------------------------------------------------------------------------------------------ the spec


def test_the_shipped_spec_validates():
    spec = load_spec(SPEC)
    assert spec.name == "attention_sm90" and spec.kernel.template == TEMPLATE and spec.kernel.arch == "sm90"
    assert spec.dtypes == ["bf16", "fp16"]
    # causal is the shape's last dim: true/false read as 1/0; each (B, H, S, D) with and without the mask
    assert len(spec.shapes) == 10 and spec.shapes[:2] == [(4, 16, 8192, 128, 0), (4, 16, 8192, 128, 1)]
    assert {s[:4] for s in spec.shapes} == {(4, 16, 8192, 128), (8, 16, 4096, 128), (2, 16, 16384, 128),
                                            (16, 16, 1024, 128), (4, 32, 4096, 64)}
    assert sorted(s[4] for s in spec.shapes) == [0] * 5 + [1] * 5
    p = spec.space.params
    assert list(p) == ["BLOCK_N", "STAGES", "CONSUMER_WARPS", "CONSUMER_REGS", "PRODUCER_WARPS", "PRODUCER_REGS",
                       "OVERLAP", "REVERSE_M", "PINGPONG", "PERSISTENT", "PIN_SOFTMAX", "HOLD_TURNS", "ROWSUM_MMA",
                       "PREFETCH_Q", "EARLY_Q_RELEASE", "Q_REGS"]
    assert "BLOCK_M" not in p                                   # BLOCK_M = 64 rows per consumer warpgroup
    # 3 STAGES x 5 producer budgets x 2 REVERSE_M x 2 PERSISTENT x 25 schedules over the two BLOCK_N: (8 warps
    # at 240 | 8 at 232) x (serial | overlapped | overlapped with ping-pong, each overlapped one pinned or not)
    # + 12 warps at 160 x (serial | overlapped), and pinned too with 64-key blocks: 1500; the serial loop's turns
    # (8 or 12 warps) +360, the overlapped ping-pong's held turns (not pinned; 12 warps with 64-key blocks) +300;
    # each of the 1620 not pinned with its row sums on the tensor cores (ROWSUM_MMA) +1620 (TREE_MAX and JOINT_WAIT,
    # timed slower, are not searched): 3780; the 720 serial persistent ones with the next tile's Q in a second buffer
    # (PREFETCH_Q) or the one handed back early (EARLY_Q_RELEASE) +1440: 5220; the 2880 serial ones with Q in
    # registers (Q_REGS) +2880
    assert spec.space.raw_size() == 184320 and spec.space.size() == 8100
    configs = list(spec.space.grid())
    assert {(c["CONSUMER_WARPS"], c["CONSUMER_REGS"]) for c in configs} == {(8, 240), (8, 232), (12, 160)}
    assert {c["PRODUCER_REGS"] for c in configs} == {24, 32, 40, 48, 56}
    assert spec.space.check(dict(configs[0], CONSUMER_WARPS=12, CONSUMER_REGS=240))     # pruned by the space
    t = spec.tuning
    assert (t.trials, t.sampler, t.objective, t.baseline) == (40, "tpe", "geomean_ratio", "torch")
    from gluon.tuning.settings import _check_shapes
    from gluon.tuning.spec import template_of
    assert template_of(spec) is TUNING
    _check_shapes(spec, TUNING)
    # the template's seeds (the kernel's default config, short causal problems' pick, long unmasked ones') are
    # configs of the space
    seeds = TUNING.seed_configs()
    assert len(seeds) == 3 and seeds[1]["BLOCK_N"] == 64
    assert (seeds[2]["PINGPONG"], seeds[2]["PIN_SOFTMAX"]) == (False, True)
    for seed in seeds:
        assert {k: seed[k] for k in p} in configs
    # with the spec's buckets: what `attention` runs at each first (D64's three serial warpgroups among them), each
    # config once, all in the space
    from gluon.kernels.attention_sm90.config import choose_config
    from gluon.tuning.templates.attention_sm90 import _spec_config
    bucketed = TUNING.seed_configs(shapes=spec.shapes, dtypes=spec.dtypes)
    picks = []
    for _, _, S, D, C in spec.shapes:
        pick = _spec_config(choose_config(D, S, bool(C)))
        if pick not in picks:
            picks.append(pick)
    assert bucketed[:len(picks)] == picks and len(bucketed) == len({str(s) for s in bucketed})
    assert any(s["CONSUMER_WARPS"] == 12 for s in picks)
    for seed in bucketed:
        assert {k: seed[k] for k in p} in configs
    # every AttentionConfig field is a spec parameter by its own name, and a seed maps back to its config
    from gluon.kernels.attention_sm90.config import FIELDS, SHORT_CAUSAL_D128
    assert set(FIELDS) <= set(TUNING.params) and "P_SMEM" in TUNING.params
    assert TUNING.kernel_config(seeds[1], 128) == SHORT_CAUSAL_D128


@pytest.mark.parametrize("old, new, parts", [
    ("BLOCK_N = { values = [64, 128] }", "BLOCK_N = { values = [64, 96] }",
     ["tiles.BLOCK_N.values[1]: 96 is not a power of two"]),
    ("[4, 16, 8192, 128, false]", "[4, 16, 8192, 128, 0]",
     ["kernel.shapes[0][4]: 0 is not a positive dimension; allowed: integers >= 1 (true/false for a flag dim)"]),
    ("[4, 16, 8192, 128, false]", "[4, 16, 8192, 96, false]",
     ["kernel.shapes[0]: [4, 16, 8192, 96, 0] does not fit template attention_sm90: head dim D=96: the kernel "
      "takes 64 or 128"]),
    ("[4, 16, 8192, 128, false]", "[4, 16, 8192, 128]",
     ["kernel.shapes[1]: [4, 16, 8192, 128, 1] has 5 dims but shapes[0] has 4"]),
    ("[4, 16, 8192, 128, false], [4, 16, 8192, 128, true],", "[4, 16, 8192, 128, 2], [4, 16, 8192, 128, true],",
     ["kernel.shapes[0]: [4, 16, 8192, 128, 2] does not fit template attention_sm90: CAUSAL=2: write true or false"]),
    ('sampler = "tpe"', 'sampler = "tpr"', ["tuning.sampler: unknown sampler 'tpr'; did you mean 'tpe'?"]),
])
def test_a_bad_value_in_the_spec_is_one_clear_line(tmp_path, capsys, old, new, parts):
    from gluon.cli import main
    text = SPEC.read_text()
    assert old in text
    bad = tmp_path / "attention_sm90.toml"
    bad.write_text(text.replace(old, new, 1))
    assert main(["check", str(bad), "--no-compile"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("gluon: error: ") and "attention_sm90.toml:" in err and "Traceback" not in err, err
    for part in parts:
        assert part in err, err


def test_a_switch_wrong_on_the_gpu_is_not_searched(tmp_path, capsys, monkeypatch):
    """A switch whose kernels gave wrong results on the GPU (config.WRONG_ON_GPU; none is listed now, so a test's
    entry) is refused as a searched value, in one line naming it."""
    from gluon.cli import main
    from gluon.kernels.attention_sm90.config import WRONG_ON_GPU
    monkeypatch.setitem(WRONG_ON_GPU, "PREFETCH_Q", "a wrong log-sum-exp on an H100 (a test's entry)")
    bad = tmp_path / "attention_sm90.toml"                 # the shipped spec, which searches PREFETCH_Q
    bad.write_text(SPEC.read_text())
    assert main(["check", str(bad), "--no-compile"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "attention_sm90.toml:" in err, err
    assert "PREFETCH_Q=True: gave a wrong log-sum-exp on an H100 (a test's entry)" in err, err
    assert "not tuned (write values = [false])" in err, err


# ------------------------------------------------------------------------------------------ legality


def _legal(config, shape=(1, 2, 256, 128, 0), dtype="bf16"):
    TUNING.legality(config, shape, dtype, "sm90")


def test_the_compiler_passes_prune_what_does_not_fit_with_their_reason():
    # 3 stages of 256-key K and V tiles at D 128: 416 KiB of shared memory; at D 64 half of it fits
    with pytest.raises(GluonError, match=r"needs 416\.1 KiB of shared memory, more than the 227\.0 KiB") as e:
        _legal(dict(DEFAULT, BLOCK_N=256, STAGES=3))
    assert "k_ring" in str(e.value) and "v_ring" in str(e.value)           # the regions, by name
    _legal(dict(DEFAULT, BLOCK_N=256, STAGES=3), (1, 2, 256, 64, 0))
    # 3 consumer warpgroups with 3 stages of 128-key tiles: 240 KiB at D 128 (the spec's one pruned family)
    three = dict(DEFAULT, CONSUMER_WARPS=12, CONSUMER_REGS=160, STAGES=3)
    with pytest.raises(GluonError, match=r"needs 240\.1 KiB"):
        _legal(three, (1, 2, 256, 128, 1))
    _legal(three, (1, 2, 256, 64, 1))
    # 3 warpgroups at 240 registers: more than the register file (the warp-role pass)
    with pytest.raises(GluonError, match="register budgets total 85248 registers.*more than the 65536"):
        _legal(dict(DEFAULT, CONSUMER_WARPS=12, CONSUMER_REGS=240))


@pytest.mark.parametrize("bad, msg", [
    (dict(CONSUMER_WARPS=6), "CONSUMER_WARPS=6: the consumers issue WGMMA, which needs whole warpgroups"),
    (dict(PRODUCER_WARPS=2), "PRODUCER_WARPS=2: attention_sm90 has one TMA producer warp"),
    (dict(PINGPONG=True, CONSUMER_WARPS=12, CONSUMER_REGS=160), "PINGPONG=True with OVERLAP=True takes CONSUMER_WGS=2"),
    (dict(BLOCK_M=128, CONSUMER_WARPS=12, CONSUMER_REGS=160), "BLOCK_M=128: each consumer warpgroup owns 64 query"),
    (dict(BLOCK_N=96), "BLOCK_N=96: takes 64, 128 or 256"),
    (dict(PRODUCER_REGS=28), "PRODUCER_REGS=28: setmaxnreg takes a multiple of 8"),
    (dict(OVERLAP="yes"), "OVERLAP='yes': takes True or False"),
    (dict(NOPE=1), "attention_sm90 has no parameter NOPE"),
])
def test_bad_knob_combinations_are_illegal_configs_with_the_message(bad, msg):
    with pytest.raises(GluonError, match=msg.replace("(", r"\(").replace("*", r"\*")):
        _legal(dict(DEFAULT, **bad))


def test_a_spec_config_is_one_kernel_whatever_the_kernels_defaults(monkeypatch):
    """Knobs the spec leaves out take AttentionConfig's field defaults, not the per-head-dim default (which
    moves as the kernel is tuned by hand): e.g. a default with PINGPONG does not leak into spec configs."""
    import gluon.kernels.attention_sm90.config as kconfig
    from gluon.kernels.attention_sm90 import AttentionConfig
    monkeypatch.setitem(kconfig.DEFAULT_CONFIGS, 128, AttentionConfig(STAGES=3, PINGPONG=True, PRODUCER_REGS=56))
    monkeypatch.setattr(TUNING, "_configs", {})
    cfg = TUNING.kernel_config(dict(DEFAULT, CONSUMER_WARPS=12, CONSUMER_REGS=160, OVERLAP=False), 128)
    assert (cfg.BLOCK_M, cfg.CONSUMER_WGS, cfg.STAGES, cfg.PRODUCER_REGS, cfg.PINGPONG) == (192, 3, 2, 24, False)
    assert TUNING.kernel_config({"BLOCK_N": 64}, 128) == AttentionConfig(BLOCK_N=64)
    seed = TUNING.seed_configs()[0]                            # the default, in the spec's names
    assert seed["STAGES"] == 3 and seed["PRODUCER_REGS"] == 56 and seed["PINGPONG"] is True


def test_other_archs_and_dtypes_and_shapes_are_refused():
    with pytest.raises(GluonError, match="runs on sm90"):
        TUNING.legality(DEFAULT, (1, 2, 256, 128, 0), "bf16", "sm100")
    with pytest.raises(GluonError, match="takes fp16, bf16, not fp32"):
        _legal(DEFAULT, dtype="fp32")
    with pytest.raises(GluonError, match="head dim D=96"):
        _legal(DEFAULT, (1, 2, 256, 96, 0))


def test_the_tuners_legality_prunes_per_head_dim_and_caches_by_trace_key():
    from gluon.tuning.expand import Legality
    spec = load_spec(SPEC)
    leg = Legality(spec, TUNING, "sm90")
    three = dict(DEFAULT, CONSUMER_WARPS=12, CONSUMER_REGS=160, STAGES=3)
    v = leg.verdict(three, spec.space.config_id(three), lower=False)
    assert v.status == "pruned" and "240.1 KiB" in v.reason and v.shape[3] == 128
    ok = leg.verdict(DEFAULT, spec.space.config_id(DEFAULT), lower=False)
    assert ok.ok
    # one trace per (D, causal, divisibility, dtype): B, H and S are runtime sizes of one binary
    keys = {TUNING.legality_key("c", s, d, "sm90") for s in spec.shapes for d in spec.dtypes}
    assert len(keys) == 2 * 2 * 2
    assert TUNING.compile_key("c", (4, 16, 8192, 128, 1), "bf16", "sm90") == \
        TUNING.compile_key("c", (2, 16, 16384, 128, 1), "bf16", "sm90")
    assert TUNING.compile_key("c", (1, 2, 1000, 128, 1), "bf16", "sm90") != \
        TUNING.compile_key("c", (1, 2, 1024, 128, 1), "bf16", "sm90")        # S % 16 is specialized on


def test_check_prunes_per_head_dim_and_names_the_shape(tmp_path, capsys):
    from gluon.cli import main
    # the D 64 shape first: 256-key tiles fit there, not at D 128 (the second shape, which check must trace too)
    spec = _tiny_spec(tmp_path, shapes=[[1, 8, 1024, 64, False], [2, 4, 512, 128, False], [2, 4, 512, 128, True]],
                      params={"BLOCK_N": [128, 256], "STAGES": [2, 3]})
    assert main(["check", str(spec), "--no-compile", "--all", "--json"]) == 0
    rows = {(r["config"]["BLOCK_N"], r["config"]["STAGES"]): r for r in json.loads(capsys.readouterr().out)}
    assert {k: r["status"] for k, r in rows.items()} == {(128, 2): "legal", (128, 3): "legal", (256, 2): "pruned",
                                                         (256, 3): "pruned"}
    assert rows[(256, 2)]["shape"] == "2x4x512x128x0" and "288.1 KiB" in rows[(256, 2)]["reason"]
    assert rows[(256, 3)]["shape"] == "2x4x512x128x0" and "416.1 KiB" in rows[(256, 3)]["reason"]


# ------------------------------------------------------------------------------------------ the trace


def _captured_launch(monkeypatch, q, k, v, **kw):
    """The lowered module `attention` would compile for these (CPU) tensors: the host's checks of the
    device are skipped, the compile is captured."""
    import gluon.jit as _  # noqa: F401
    import gluon.kernels.attention_sm90.host as host
    jit = sys.modules["gluon.jit"]
    monkeypatch.setattr(host, "_check", lambda q, k, v: None)
    monkeypatch.setattr(host, "_PLANS", {})
    seen = []

    def fake_compile(module, **kw):
        seen.append(module)
        raise RuntimeError("captured")
    monkeypatch.setattr(jit, "compile_module", fake_compile)
    with pytest.raises(RuntimeError, match="captured"):
        host.attention(q, k, v, **kw)
    return jit.lower(jit.run_passes(seen[0]))


@pytest.mark.parametrize("shape", [(2, 16, 256, 128, 1), (1, 3, 1000, 64, 0)])
def test_the_template_traces_what_the_launch_compiles(monkeypatch, shape):
    """The tuner's lowering of a (config, shape, dtype) is the TTGIR and ABI `attention` compiles for that
    problem (sizes with the same divisibility, the same constexprs): the binary `gluon build` installs is
    the one a loaded call finds in the cache."""
    B, H, S, D, C = shape
    config = dict(DEFAULT, BLOCK_N=64, STAGES=3, PRODUCER_REGS=40, OVERLAP=False)
    mine = TUNING.lower(config, shape, "bf16", "sm90")
    q = torch.randn(B, H, S, D).bfloat16()
    launch = _captured_launch(monkeypatch, q, q, q, causal=bool(C), config=TUNING.kernel_config(config, D))
    assert mine == launch
    assert TUNING.kernel_config(config, D).BLOCK_M == 128


def test_run_launches_the_pools_kernel_without_tracing(tmp_path, monkeypatch):
    """TUNING.run(..., kernel=K) launches K (the pool's binary, loaded by its key) on the grid of the config
    and traces nothing (a fake GPU backend records the launch; CPU tensors)."""
    from test_runtime import FakeBackend

    import gluon.kernels.attention_sm90.host as host
    import gluon.runtime.cuda as rt_cuda
    from gluon.language.kernel import KernelTemplate
    monkeypatch.setenv("GLUON_CACHE_DIR", str(tmp_path))
    backend = FakeBackend(device_type="cpu")
    monkeypatch.setattr(rt_cuda, "DEFAULT_BACKEND", backend)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(host, "_check", lambda q, k, v: None)
    monkeypatch.setattr(host, "_PLANS", {})
    config = dict(DEFAULT, CONSUMER_WARPS=12, CONSUMER_REGS=160, BLOCK_N=64)
    shape = (2, 3, 320, 64, 1)
    lowered = TUNING.lower(config, shape, "fp16", "sm90")
    kernel = TUNING.load({"cache_key": TUNING.build(lowered).key, "abi": lowered.abi.to_json()})
    monkeypatch.setattr(KernelTemplate, "trace", lambda *a, **k: pytest.fail("traced on the GPU worker"))
    inputs = TUNING.make_inputs(shape, "fp16", "cpu", 0)
    assert inputs["causal"] is True and inputs["q"].dtype == torch.float16 and inputs["q"].shape == (2, 3, 320, 64)
    TUNING.run(inputs, config, kernel=kernel)
    assert len(backend.calls) == 1 and kernel.module is None
    assert backend.calls[0][:3] == (2, 6, 1)                   # ceil(320 / 192) query blocks x B * H


# ------------------------------------------------------------------------------------------ reference, models


@pytest.mark.parametrize("causal", [False, True])
def test_the_reference_is_sdpa_in_fp32(causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 40, 16, generator=g) for _ in range(3))
    got = reference_attention(q.bfloat16().float(), k, v, causal)
    want = torch.nn.functional.scaled_dot_product_attention(q.bfloat16().double(), k.double(), v.double(),
                                                            is_causal=causal)
    assert got.dtype == torch.float32 and torch.allclose(got.double(), want, atol=1e-5)
    # chunked (3 score rows, then one head at a time) is the same
    small = reference_attention(q.bfloat16().float(), k, v, causal, chunk_bytes=4 * 40 * 3)
    assert torch.allclose(small, got, atol=1e-6)
    scaled = reference_attention(q, k, v, causal, scale=0.3)
    assert torch.allclose(scaled.double(), torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), is_causal=causal, scale=0.3), atol=1e-5)


def test_the_reference_mask_is_bottom_right_and_takes_grouped_heads():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 5, 8, generator=g)
    k, v = (torch.randn(1, 2, 7, 8, generator=g) for _ in range(2))
    got = reference_attention(q, k, v, True)
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    s = q @ kk.transpose(-1, -2) / math.sqrt(8)
    keep = torch.arange(7)[None, :] <= torch.arange(5)[:, None] + 2          # query i sees keys j <= i + 2
    want = torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ vv
    assert torch.allclose(got, want, atol=1e-5)
    # more queries than keys: the first rows see no key and are 0, as the kernel writes them
    empty = reference_attention(torch.randn(1, 1, 6, 8), torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8), True)
    assert (empty[0, 0, :2] == 0).all() and torch.isfinite(empty).all() and (empty[0, 0, 2:] != 0).any()


def test_the_check_catches_unwritten_and_wrong_outputs():
    inputs = TUNING.make_inputs((1, 2, 64, 64, 1), "bf16", "cpu", 3)
    ref = TUNING.reference(inputs)
    TUNING.poison(inputs)
    out = TUNING.output(inputs)
    assert torch.isnan(out).all()
    ok, _, why = TUNING.check(out, ref, 2e-2, 0.0)
    assert not ok and "NaN" in why
    out.copy_(ref)
    assert TUNING.check(out, ref, 2e-2, 0.0)[0]
    out.copy_(ref * 1.1)
    assert not TUNING.check(out, ref, 2e-2, 0.0)[0]


def test_flops_bytes_and_the_dry_run_model():
    assert TUNING.flops((4, 16, 8192, 128, 0)) == 4 * 4 * 16 * 8192 * 8192 * 128
    assert TUNING.flops((4, 16, 8192, 128, 1)) == TUNING.flops((4, 16, 8192, 128, 0)) / 2
    assert TUNING.bytes((4, 16, 8192, 128, 0), "bf16") == 4 * 4 * 16 * 8192 * 128 * 2
    shape = (4, 16, 8192, 128, 0)
    roof = TUNING.roofline_s(shape, "bf16")
    assert roof == pytest.approx(TUNING.flops(shape) / 989e12)                 # compute bound
    two = TUNING.model_s(DEFAULT, shape, "bf16")
    assert two >= roof
    # S 1024 in query blocks of 192 rows pads the last block (6 x 192 = 1152): a slower model than 128
    small = (16, 16, 1024, 128, 0)
    three = dict(DEFAULT, CONSUMER_WARPS=12, CONSUMER_REGS=160)
    assert TUNING.model_s(three, small, "bf16") > TUNING.model_s(DEFAULT, small, "bf16")


# ------------------------------------------------------------------------------------------ dry run


def test_the_dry_run_of_the_spec_ranks_legal_configs_and_writes_rows(tmp_path, capsys):
    from gluon.tuning.results import ResultsStore
    from gluon.tuning.tuner import tune
    spec = load_spec(SPEC)
    # 16 samples of the configs the space's constraints keep (none is refused by a constraint)
    s = tune(spec, dry_run=True, results_root=str(tmp_path / "results"), compile_workers=0, dry_run_limit=16,
             dry_run_compiles=1)
    out = capsys.readouterr().out
    assert "DRY RUN of attention_sm90" in out and "16 configs" in out
    assert s.dry_run and s.statuses["ok"] + s.statuses["pruned"] == 16 and s.best_config is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = ResultsStore(tmp_path / "results").read("attention_sm90")
    assert df["dry_run"].all()
    assert not df["reason"].fillna("").str.startswith("space:").any()
    ok = df[df["status"] == "ok"]
    assert len(ok) == s.statuses["ok"] * 10 * 2                 # every legal config x 10 shapes x 2 dtypes
    assert set(ok["shape"]) == {"x".join(map(str, sh)) for sh in spec.shapes}
    assert (ok["model_ms"] > 0).all() and (ok["roofline_fraction"] <= 1.0 + 1e-9).all()
    # the one compiled kernel (shapes[0], bf16) is the binary of every shape with its compile key: D 128, no mask
    compiled = ok[ok["registers"].notna()]
    assert compiled["config_id"].nunique() == 1 and (compiled["registers"] > 0).all()
    assert set(compiled["shape"]) == {"4x16x8192x128x0", "8x16x4096x128x0", "2x16x16384x128x0", "16x16x1024x128x0"}
    assert (compiled["dtype"] == "bf16").all()
    # the random sample of the space's product: pruned by its constraints, or by the shared-memory pass
    pruned = df[df["status"] == "pruned"]
    assert pruned["reason"].str.contains("space: constraint '(?:CONSUMER_WARPS|not PINGPONG)|KiB of shared memory").all()
    assert not (tmp_path / "tuning").exists()


# ------------------------------------------------------------------------------------------ build + load


def _rows(spec, cases):
    """Synthetic measured rows: (shape, dtype, config, ratio) -> ok rows as the tuner writes them."""
    from gluon.tuning.results import make_row
    out = []
    for shape, dtype, config, ratio in cases:
        out.append(make_row(spec_name=spec.name, spec_hash=spec.content_hash, template=TEMPLATE, arch="sm90",
                            device="NVIDIA H200", config=config, config_id=spec.space.config_id(config), shape=shape,
                            dtype=dtype, status="ok", median_ms=1.0 / ratio, baseline_ms=1.0, ratio=ratio,
                            max_err=1e-3))
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny spec, synthetic rows for three bf16 buckets (two configs each; the better one must be built),
    `build_best` (the manifest, config a, config b)."""
    tmp = tmp_path_factory.mktemp("attn-build")
    spec = load_spec(_tiny_spec(tmp))
    with pytest.MonkeyPatch.context() as mp:       # the session's private cache (conftest), never the user's
        mp.setenv("GLUON_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "gluon-cache"))
        return _build(tmp, spec)


def _build(tmp, spec):
    from gluon.tuning.build import build_best
    from gluon.tuning.results import ResultsStore
    a = dict(DEFAULT, BLOCK_N=64, STAGES=2)
    b = dict(DEFAULT, BLOCK_N=128, STAGES=3)
    cases = [((2, 4, 512, 128, 0), "bf16", a, 1.10), ((2, 4, 512, 128, 0), "bf16", b, 0.90),
             ((2, 4, 512, 128, 1), "bf16", a, 0.95), ((2, 4, 512, 128, 1), "bf16", b, 1.05),
             ((1, 8, 1024, 64, 0), "bf16", b, 1.20), ((1, 8, 1024, 64, 0), "bf16", a, 1.00)]
    ResultsStore(tmp / "results").write_many(_rows(spec, cases))
    (manifest,) = build_best(tmp / "results", tmp / "specs", tmp / "build", log=lambda m: None)
    return manifest, a, b


def test_build_writes_one_entry_per_bucket_with_its_best_config(built):
    manifest, a, b = built
    data = json.loads(manifest.read_text())
    assert data["dims"] == ["B", "H", "S", "D", "CAUSAL"] and data["template"] == TEMPLATE
    got = {(tuple(e["shape"]), e["dtype"]): e for e in data["entries"]}
    assert {k: e["config"] for k, e in got.items()} == {((2, 4, 512, 128, 0), "bf16"): a,
                                                        ((2, 4, 512, 128, 1), "bf16"): b,
                                                        ((1, 8, 1024, 64, 0), "bf16"): b}
    for e in got.values():
        art = manifest.parent / e["artifacts"]
        assert (art / "metadata.json").exists() and any(p.suffix == ".cubin" for p in art.iterdir())
    assert len({e["cache_key"] for e in got.values()}) == 3      # another config, mask or head dim: another binary


def test_load_resolves_the_config_of_each_call_bucket(built, monkeypatch):
    """Without a GPU: the config each call would run (the launch is replaced by a recorder)."""
    import gluon
    import gluon.tuning.templates.attention_sm90 as adapter
    from gluon.cache import default_cache
    manifest, a, b = built
    k = gluon.load(manifest)
    assert all(default_cache().get(e["cache_key"]) is not None for e in k.entries)   # installed
    calls = []
    monkeypatch.setattr(adapter, "attention", lambda q, k_, v, **kw: calls.append(kw) or "o")

    def run(B, H, S, D, dtype=torch.bfloat16, layout="bhsd", **kw):
        shape = (B, H, S, D) if layout == "bhsd" else (B, S, H, D)
        q = torch.empty(shape, dtype=dtype)
        assert k(q, q, q, layout=layout, **kw) == "o"
        return calls[-1]

    cfg_a = TUNING.kernel_config(a, 128)
    cfg_b = TUNING.kernel_config(b, 128)
    assert run(2, 4, 512, 128)["config"] == cfg_a                                # the bucket itself
    assert run(2, 4, 512, 128, causal=True)["config"] == cfg_b                   # its causal twin
    assert run(1, 1, 100, 128, causal=True)["config"] == cfg_b                   # nearest of the mask
    assert run(8, 16, 4096, 128)["config"] == cfg_a
    assert run(4, 2, 1000, 64)["config"] == TUNING.kernel_config(b, 64)          # the D 64 bucket
    assert run(4, 2, 1000, 64, layout="bshd")["config"] == TUNING.kernel_config(b, 64)
    kw = run(2, 4, 512, 128, causal=True, scale=0.25, return_lse=True)          # passed through
    assert (kw["causal"], kw["scale"], kw["return_lse"], kw["layout"]) == (True, 0.25, True, "bhsd")
    # no bucket with D 64 and the mask, none of fp16: the default config for the head dim, warned once
    with pytest.warns(UserWarning, match=r"no built bucket serves shape 4x2x1000x64x1 bf16; running the kernel's "
                                         r"own pick for it \(no tuned config\)"):
        assert run(4, 2, 1000, 64, causal=True)["config"] is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(4, 2, 1000, 64, causal=True)                                         # (cached: no second warning)
    with pytest.warns(UserWarning, match="2x4x512x128x0 fp16"):
        assert run(2, 4, 512, 128, dtype=torch.float16)["config"] is None
    assert k.bucket((2, 4, 512, 128, 1), "bf16")["config"] == b
    with pytest.warns(UserWarning, match="2x4x512x64x1 bf16"):
        assert k.bucket((2, 4, 512, 64, 1), "bf16")["fallback"] is True


def test_tuned_bench_rebuilds_the_call_with_its_causal_flag():
    inputs = TUNING.make_inputs((1, 2, 32, 64, 1), "fp16", "cpu", 0)
    q, k, v = TUNING.call_args(inputs)
    assert q is inputs["q"] and TUNING.call_kwargs(inputs) == {"causal": True, "scale": None}
    assert TUNING.shape_of(q, k, v, **TUNING.call_kwargs(inputs)) == (1, 2, 32, 64, 1)
    assert TUNING.dtype_of(q) == "fp16" and TUNING.dtype_of(q.int()) == "torch.int32"


def test_spec_shapes_take_booleans_only_as_flags(tmp_path):
    text = textwrap.dedent("""
        [kernel]
        name = "k"
        template = "pkg.mod:TUNING"
        arch = "sm90"
        dtypes = ["fp16"]
        shapes = [[64, true], [64, false]]
    """)
    p = tmp_path / "k.toml"
    p.write_text(text)
    assert load_spec(p).shapes == [(64, 1), (64, 0)]
    p.write_text(text.replace("[64, false]", "[64, 0.5]"))
    with pytest.raises(SpecError, match=r"0\.5 is not an integer; allowed: integers >= 1 \(true/false for a flag"):
        load_spec(p)
    # a template without flag dims refuses a false (0) in its shapes, in one line naming the shape
    from gluon.tuning.settings import _check_shapes
    from gluon.tuning.templates.gemm_sm90 import TUNING as GEMM
    p.write_text(text.replace("[[64, true], [64, false]]", "[[64, 64, 64], [64, false, 64]]"))
    with pytest.raises(SpecError, match=r"k\.toml:7: kernel\.shapes\[1\]: \[64, 0, 64\] does not fit template "
                                        r"gemm_sm90: N=0: gemm_sm90's dims are sizes >= 1"):
        _check_shapes(load_spec(p), GEMM)
