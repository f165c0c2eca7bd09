"""Kernel specs (gluon/tuning/spec.py) and search spaces (gluon/tuning/space.py): CPU only, fast."""
import itertools
import pickle
from pathlib import Path

import pytest

from gluon.tuning.space import Choice, Fixed, IntRange, SearchSpace, evaluate
from gluon.tuning.spec import Spec, SpecError, load_spec, resolve_template

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "specs"
DATA = Path(__file__).resolve().parent / "data" / "specs"


# ------------------------------------------------------------------------------- shipped specs


def test_shipped_specs_load():
    copy = load_spec(SPECS / "copy.toml")
    assert copy.name == copy.kernel.name == "copy"
    assert copy.kernel.template == "examples/copy_kernel.py:TUNING"
    assert copy.kernel.arch == "sm90"
    assert copy.dtypes == ["fp32"] and copy.shapes == [(1073741824,)]
    assert list(copy.space.params) == ["XBLOCK", "NUM_WARPS", "FORM"]
    assert copy.space.params["FORM"] == Choice(("simt", "explicit"))
    assert copy.constraints == ["XBLOCK >= 32 * NUM_WARPS"]
    assert copy.source == (SPECS / "copy.toml").resolve()

    gemm = load_spec(SPECS / "gemm_sm90.toml")
    assert gemm.name == "gemm_sm90" and gemm.kernel.template == "gluon.tuning.templates.gemm_sm90:TUNING"
    assert gemm.dtypes == ["fp16", "bf16"]
    assert gemm.shapes == [(8192, 8192, 8192), (4096, 4096, 4096)]
    p = gemm.space.params
    assert list(p) == ["BLOCK_M", "BLOCK_N", "BLOCK_K", "SWIZZLE", "STAGES", "CONSUMER_WARPS", "PRODUCER_WARPS",
                       "PRODUCER_REGS", "GROUP_M", "EPILOGUE", "CLUSTER_M", "SPLIT_WGS", "K_ZIGZAG"]
    assert p["BLOCK_M"] == Fixed(128) and p["BLOCK_K"] == Fixed(64) and p["SWIZZLE"] == Fixed(128)
    assert p["STAGES"] == IntRange(2, 5) and p["PRODUCER_WARPS"] == Fixed(1)
    assert p["PRODUCER_REGS"] == Choice((24, 40)) and p["CONSUMER_WARPS"] == Choice((4, 8))
    assert p["SPLIT_WGS"] == Choice((False, True)) and p["K_ZIGZAG"] == Choice((False, True))
    assert len(gemm.constraints) == 2 and gemm.tuning.trials == 100 and gemm.tuning.sampler == "tpe"

    large = load_spec(SPECS / "gemm_sm90_bf16_large.yaml")
    assert large.name == "gemm_sm90_bf16_large"
    assert large.dtypes == ["bf16"] and (16384, 16384, 16384) in large.shapes
    assert large.space.params == gemm.space.params and large.constraints == gemm.constraints
    assert large.kernel.template == gemm.kernel.template and large.tuning.sampler == "tpe"
    assert large.content_hash != gemm.content_hash


def test_the_decode_spec_searches_the_small_m_family():
    decode = load_spec(SPECS / "gemm_sm90_decode.toml")
    assert decode.kernel.template == "gluon.tuning.templates.gemm_sm90:TUNING"
    assert all(m <= 128 for m, _, _ in decode.shapes) and (1, 28672, 4096) in decode.shapes
    p = decode.space.params
    assert p["SWAP_AB"] == Choice((True, False)) and p["STAGES"] == IntRange(3, 16)
    assert p["SPLIT_K"] == Choice(("auto", 1, 2, 4)) and p["EPILOGUE"] == Fixed("direct")
    assert any("BLOCK_M * BLOCK_N <= 4096 * CONSUMER_WARPS" in c for c in decode.constraints)
    assert p["CONSUMER_WARPS"] == Choice((4, 8))          # under the swap: one warpgroup, or two sharing A
    # and what `launch` picks above 64 rows where the swap needs no K split: 128x128 tiles, or 64x128 tiles in 2-CTA
    # pairs
    from gluon.kernels.gemm_sm90.picks import DECODE_PAIRS, DECODE_WIDE, DECODE_WIDE_DEEP, choose_config
    from gluon.tuning.templates.gemm_sm90 import TUNING
    assert p["CLUSTER_M"] == Choice((1, 2))
    assert choose_config(128, 14336, 4096, 132) == DECODE_WIDE_DEEP.replace(N_STEP=112)      # overlapping tiles
    assert (128, 14336, 4096) in decode.shapes
    held = {TUNING.knobs(c) for c in decode.space.grid()}
    assert DECODE_PAIRS.replace(EPILOGUE="direct", GROUP_M=16) in held
    assert DECODE_WIDE.replace(EPILOGUE="direct", GROUP_M=16) in held
    assert DECODE_WIDE_DEEP.replace(EPILOGUE="direct", GROUP_M=16) in held
    assert DECODE_WIDE_DEEP.replace(EPILOGUE="direct", GROUP_M=16, N_STEP=112) in held
    assert not any(c.N_STEP and (c.BLOCK_N != 128 or c.cluster_size > 1) for c in held)
    assert not any(c.CLUSTER_M == 2 and (c.SWAP_AB or c.CLUSTER_K > 1) for c in held)
    # and two CTAs an SM, only where two rings fit
    assert p["CTAS_PER_SM"] == Choice((1, 2))
    assert DECODE_PAIRS.replace(EPILOGUE="direct", GROUP_M=16, STAGES=4, CLUSTER_M=1, CTAS_PER_SM=2) in held
    assert not any(c.CTAS_PER_SM == 2 and c.STAGES * (c.BLOCK_M + c.BLOCK_N) * c.BLOCK_K * 2 > 110592 for c in held)


def test_a_gemm_study_is_seeded_with_launchs_pick_at_each_bucket():
    """The decode spec's buckets need different configs (M = 1 .. 128): a fresh study measures `launch`'s pick at
    each of them first (the template's `pick`, in the spec's names), so `gluon build --best` serves no bucket
    slower than the pick. Each pick maps back to the very config and split count `launch` runs."""
    from gluon.kernels.gemm_sm90.geometry import split_k
    from gluon.kernels.gemm_sm90.picks import resolve_config
    from gluon.tuning.template import template_seeds
    from gluon.tuning.templates.gemm_sm90 import TUNING
    decode = load_spec(SPECS / "gemm_sm90_decode.toml")
    seeds = template_seeds(TUNING, decode.shapes, decode.dtypes)
    # the picks first, so a short search measures them before any other config
    assert seeds[:len(decode.shapes) * len(decode.dtypes)] == [TUNING.pick(s, d) for s in decode.shapes
                                                                for d in decode.dtypes]
    fixed = decode.space.fixed()
    for M, N, K in decode.shapes:
        for dtype in decode.dtypes:
            pick = TUNING.pick((M, N, K), dtype, num_sms=132)
            assert pick in seeds
            want = resolve_config(M, N, K, 132, 2)
            assert TUNING.kernel_config(pick, dtype) == want
            assert TUNING.splits(pick, (M, N, K), 132) == split_k(M, N, K, want, 132)
            held = {k: fixed.get(k, pick.get(k)) for k in decode.space.params}
            assert decode.space.check(held) is None, (M, N, K)
    assert TUNING.pick((128, 14336, 4096), "bf16")["BLOCK_M"] == 128      # DECODE_WIDE_DEEP
    assert TUNING.pick((1, 4096, 4096), "bf16")["SWAP_AB"] is True


def test_the_waves_spec_holds_what_choose_config_takes_there():
    """Its shapes are the few-wave picks', and its space holds wave_config's tiles (so `gluon build --best`
    can serve at least what `launch` runs) and 128x256 with SPLIT_WGS and K_ZIGZAG."""
    from gluon.kernels.gemm_sm90.config import DEFAULT_CONFIG
    from gluon.kernels.gemm_sm90.picks import WAVE_CONFIGS, wave_config
    from gluon.tuning.templates.gemm_sm90 import TUNING
    waves = load_spec(SPECS / "gemm_sm90_waves.toml")
    assert all(wave_config(M, N, 132) != DEFAULT_CONFIG for M, N, _ in waves.shapes)
    held = {TUNING.knobs(c) for c in waves.space.grid()}
    for cfg in [c for c, _ in WAVE_CONFIGS] + [DEFAULT_CONFIG]:
        assert cfg.replace(K_ZIGZAG=True, SPLIT_WGS=True, GROUP_M=16, EPILOGUE="tma") in held
    assert all(c.BLOCK_M in (128, 192) for c in held) and len(held) == waves.space.size()


def test_space_sizes_by_hand():
    # copy: 5 XBLOCK x 3 NUM_WARPS x 2 FORM; XBLOCK >= 32 * NUM_WARPS holds for all (512 >= 256)
    copy = load_spec(SPECS / "copy.toml").space
    assert copy.raw_size() == 30 and copy.size() == 30
    # gemm: BLOCK_N 2 x STAGES 4 x CONSUMER_WARPS 2 x PRODUCER_REGS 2 x GROUP_M 4 x EPILOGUE 2 x CLUSTER_M 2
    #   x SPLIT_WGS 2 x K_ZIGZAG 2 = 2048 raw.
    # The constraints are the kernel's rules only (shared memory and registers are the passes' to check):
    # without SPLIT_WGS everything, 2 * 4 * 2 * 2 * 4 * 2 * 2 = 512; SPLIT_WGS needs W=8 and the tma
    # epilogue, 2 * 4 * 2 * 4 * 2 = 128; all of it twice for K_ZIGZAG (no constraint on it).
    gemm = load_spec(SPECS / "gemm_sm90.toml").space
    assert gemm.raw_size() == 2048 and gemm.size() == (512 + 128) * 2
    configs = list(gemm.grid())
    assert len(configs) == 1280
    split = [c for c in configs if c["SPLIT_WGS"]]
    assert len(split) == 256 and all(c["CONSUMER_WARPS"] == 8 and c["EPILOGUE"] == "tma" for c in split)
    wide = [c for c in configs if c["BLOCK_N"] == 256 and not c["SPLIT_WGS"]]
    assert len(wide) == 4 * 2 * 2 * 2 * 4 * 2 * 2
    assert load_spec(SPECS / "gemm_sm90_bf16_large.yaml").space.size() == 1280


@pytest.mark.parametrize("name", ["copy.toml", "gemm_sm90.toml"])
def test_grid_respects_constraints_in_a_stable_order(name):
    space = load_spec(SPECS / name).space
    configs = list(space.grid())
    assert configs == list(space.grid())
    names = list(space.params)
    brute = [dict(zip(names, vals)) for vals in itertools.product(*(space.params[n].options() for n in names))]
    expected = [c for c in brute if all(evaluate(k, c) for k in space.constraints)]
    assert configs == expected                       # same order as the filtered cartesian product
    assert len(configs) == space.size()
    for c in configs:
        assert space.check(c) is None
    rejected = [c for c in brute if c not in configs]
    for c in rejected:
        reason = space.check(c)
        assert reason is not None and reason.startswith("constraint '")
    assert len({SearchSpace.config_id(c) for c in configs}) == len(configs)


def test_check_reasons():
    space = SearchSpace({"A": IntRange(1, 8, log=True), "B": Choice(("x", "y")), "C": Fixed(3)}, ["A * C <= 12"])
    assert space.check({"A": 4, "B": "x", "C": 3}) is None
    assert space.check({"A": 8, "B": "x", "C": 3}) == "constraint 'A * C <= 12' is false for A=8, C=3"
    assert space.check({"A": 3, "B": "x", "C": 3}).startswith("A=3 is not in its domain (1, 2, 4, 8)")
    assert space.check({"A": 4, "B": "z", "C": 3}).startswith("B='z' is not in its domain")
    assert space.check({"A": 4, "C": 3}) == "missing parameter B"
    assert space.check({"A": 4, "B": "x", "C": 3, "D": 1}).startswith("unknown parameter D")
    assert space.check({"A": True, "B": "x", "C": 3}).startswith("A=true is not in its domain")


def test_domains():
    assert IntRange(16, 256, log=True).options() == (16, 32, 64, 128, 256)
    assert IntRange(32, 128, step=32).options() == (32, 64, 96, 128)
    assert IntRange(2, 5).options() == (2, 3, 4, 5)
    assert Choice([1, 2]).values == (1, 2)
    for bad in (lambda: IntRange(5, 2), lambda: IntRange(1, 4, step=0), lambda: IntRange(24, 256, log=True),
                lambda: Choice(())):
        with pytest.raises(ValueError):
            bad()
    space = SearchSpace({"A": IntRange(1, 1000), "B": IntRange(1, 1000)}, ["A == 7"])
    assert space.size() == 1000                     # counted without enumerating the unconstrained tail
    assert SearchSpace({}, []).size() == 1 and list(SearchSpace({}, []).grid()) == [{}]


def test_counting_and_first_agree_with_brute_force():
    import random
    rng = random.Random(0)
    exprs = ["A + B <= 6", "A * C % 3 != 0", "B < C", "max(A, D) == 4", "D != 2 or A > 1", "E == 'x' or C > 2",
             "A // 2 < 1", "(A if E == 'y' else B) >= 3"]
    for _ in range(60):
        params = {"A": IntRange(1, 4), "B": Choice((1, 2, 3)), "C": IntRange(1, 4, log=True), "D": Fixed(2),
                  "E": Choice(("x", "y"))}
        cons = rng.sample(exprs, rng.randint(0, 3))
        space = SearchSpace(params, cons)
        names = list(params)
        brute = [dict(zip(names, v)) for v in itertools.product(*(params[n].options() for n in names))]
        valid = [c for c in brute if all(evaluate(k, c) for k in cons)]
        assert list(space.grid()) == valid, cons
        assert space.size() == len(valid), cons
        assert space.first() == (valid[0] if valid else None, True), cons
    # groups of coupled parameters are counted separately: 8**10 configs, counted at once
    big = SearchSpace({f"P{i}": IntRange(1, 8) for i in range(10)}, ["P0 * P1 <= 8", "P9 < 3"])
    assert big.size() == 20 * 8 ** 7 * 2
    assert SearchSpace(big.params, ["P0 + P9 > 100"]).first() == (None, True)


def test_suggest_with_optuna():
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = load_spec(SPECS / "gemm_sm90.toml")
    space = spec.space
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        trial = study.ask()
        config = space.suggest(trial)
        assert list(config) == list(space.params)
        assert config["BLOCK_M"] == 128 and config["PRODUCER_WARPS"] == 1          # fixed ones included
        for name, dom in space.params.items():
            assert dom.contains(config[name]), (name, config[name])
        assert set(trial.params) == set(space.tunable())                             # fixed ones not asked
        study.tell(trial, 1.0)
    dists = space.distributions()
    assert set(dists) == {"BLOCK_N", "STAGES", "CONSUMER_WARPS", "PRODUCER_REGS", "GROUP_M", "EPILOGUE", "CLUSTER_M",
                          "SPLIT_WGS", "K_ZIGZAG"}
    # enqueue a grid config and read it back through the same distributions
    first = next(space.grid())
    study.enqueue_trial({k: first[k] for k in dists})
    trial = study.ask(dists)
    assert {**space.fixed(), **trial.params} == first
    # a log range is suggested on its powers of two only
    log_space = SearchSpace({"B": IntRange(16, 256, log=True)}, [])
    seen = {log_space.suggest(study.ask())["B"] for _ in range(40)}
    assert seen <= {16, 32, 64, 128, 256} and len(seen) > 1


def test_config_id_is_stable():
    a = {"BLOCK_M": 128, "BLOCK_N": 256, "EPILOGUE": "tma", "STAGES": 3}
    b = {"STAGES": 3, "EPILOGUE": "tma", "BLOCK_N": 256, "BLOCK_M": 128}
    assert SearchSpace.config_id(a) == SearchSpace.config_id(b)
    assert len(SearchSpace.config_id(a)) == 12
    assert SearchSpace.config_id(a) != SearchSpace.config_id({**a, "STAGES": 4})


def test_config_id_known_value():
    # the id must not change between runs or versions: tuning databases are keyed by it
    import hashlib
    import json
    cfg = {"B": 2, "A": "x"}
    expected = hashlib.sha256(json.dumps({"A": "x", "B": 2}, separators=(",", ":")).encode()).hexdigest()[:12]
    assert SearchSpace.config_id(cfg) == expected


# ------------------------------------------------------------------------------------ evaluate


def test_evaluate_allowed():
    env = {"A": 128, "B": 64, "E": "tma", "F": True}
    assert evaluate("A * B * 2 <= 16384", env) is True
    assert evaluate("A // B + A % 3 - 2 ** 3", env) == 2 + 2 - 8
    assert evaluate("A / B", env) == 2.0
    assert evaluate("-A < min(A, B) <= max(A, B, 7)", env) is True
    assert evaluate("abs(B - A) == 64 and not (A < B) or False", env) is True
    assert evaluate("(A * B * 2 if E == 'tma' else 0) + 1", env) == 16385
    assert evaluate("E != \"direct\" and F", env) is True
    assert evaluate("1 == 1.0 and True != 1", env) is True


@pytest.mark.parametrize("expr, construct", [
    ("__import__('os').system('true')", "__import__('os').system('true')"),
    ("A.real > 0", "A.real"),
    ("A[0] > 1", "A[0]"),
    ("(lambda: 1) == 1", "lambda: 1"),
    ("[x for x in (1, 2)]", "[x for x in (1, 2)]"),
    ("A in (1, 2)", "A in (1, 2)"),
    ("A & 1", "A & 1"),
    ("pow(A, 2) > 1", "pow(A, 2)"),
    ("min(A) > 1", "min(A)"),
    ("f'{A}' == '1'", "f'{A}'"),
    ("(A := 3) > 1", "A := 3"),
])
def test_evaluate_rejects_constructs(expr, construct):
    with pytest.raises(ValueError) as ei:
        evaluate(expr, {"A": 1})
    assert f"'{construct}'" in str(ei.value) and "is not allowed" in str(ei.value)


@pytest.mark.parametrize("expr, env, part", [
    ("B > 1", {"A": 1}, "unknown name 'B'"),
    ("A / 0 > 1", {"A": 1}, "division by zero"),
    ("A * 2 > 1", {"A": "x"}, "arithmetic needs numbers, got 'x'"),
    ("A < 3", {"A": "x"}, "comparison needs numbers"),
    ("2 ** 100000 > 1", {}, "exponent 100000 too large"),
    ("A >", {"A": 1}, "does not parse"),
])
def test_evaluate_errors(expr, env, part):
    with pytest.raises(ValueError) as ei:
        evaluate(expr, env)
    assert part in str(ei.value)


# ------------------------------------------------------------------------------ hash, extends


GOOD_TOML = """\
[kernel]
name = "k"
template = "pkg.mod:TUNING"
arch = "sm90"
dtypes = ["fp16"]
shapes = [[64, 64]]

[tiles]
BLOCK_M = { values = [64, 128] }

[params]
G = { values = [4, 8] }
constraints = ["BLOCK_M * G <= 512"]
"""

GOOD_TOML_REFORMATTED = """\
# the same spec, written differently
constraints = [
    "BLOCK_M * G <= 512",      # a comment
]
dtypes = [ "fp16" ]
shapes = [
  [64, 64],
]

[params]
G.values = [4, 8]

[tiles]
  BLOCK_M = {values=[64,128]}

[kernel]
arch = 'sm90'
template = "pkg.mod:TUNING"
name = "k"
[tuning]
trials = 100
"""

GOOD_YAML = """\
kernel: {name: k, template: "pkg.mod:TUNING", arch: sm90}
dtypes: [fp16]
shapes: [[64, 64]]
tiles:
  BLOCK_M: {values: [64, 128]}
params:
  G:
    values: [4, 8]
constraints:
  - BLOCK_M * G <= 512
"""


def test_content_hash(tmp_path):
    a = tmp_path / "a.toml"
    a.write_text(GOOD_TOML)
    b = tmp_path / "b.toml"
    b.write_text(GOOD_TOML_REFORMATTED)
    y = tmp_path / "c.yaml"
    y.write_text(GOOD_YAML)
    ha, hb, hy = (load_spec(p).content_hash for p in (a, b, y))
    assert len(ha) == 64 and ha == hb == hy          # formatting, comments, order, format: same spec
    assert load_spec(a).space.size() == 3
    for old, new in [("G = { values = [4, 8] }", "G = { values = [4, 16] }"), ('"fp16"', '"bf16"'),
                     ("[[64, 64]]", "[[64, 65]]"), ("<= 512", "<= 513"), ('arch = "sm90"', 'arch = "sm100"')]:
        changed = tmp_path / "changed.toml"
        changed.write_text(GOOD_TOML.replace(old, new))
        assert load_spec(changed).content_hash != ha, new
    tuned = tmp_path / "tuned.toml"
    tuned.write_text(GOOD_TOML + "[tuning]\ntrials = 5\n")
    assert load_spec(tuned).content_hash != ha


def test_extends_toml_base_yaml_child():
    base = load_spec(DATA / "base.toml")
    child = load_spec(DATA / "child.yaml")
    assert child.name == "child" and child.kernel.description == "base"          # tables merge key by key
    assert child.kernel.template == base.kernel.template
    assert child.dtypes == ["bf16"]                                              # lists replace
    assert child.shapes == base.shapes
    assert child.space.params["BLOCK_M"] == Fixed(128)
    assert child.space.params["BLOCK_N"] == Choice((128, 256))
    assert child.constraints == ["X < 3"]
    assert child.tuning.trials == 20 and child.tuning.seed == 1
    assert child.locate("tuning.trials")[0].name == "child.yaml"
    assert child.locate("tuning.seed")[0].name == "base.toml"
    assert child.locate(("dtypes", 0))[1:] == (5, "dtypes[0]")
    assert child.locate("shapes")[1:] == (10, "kernel.shapes")


def test_extends_error_in_inherited_value_names_the_base():
    with pytest.raises(SpecError) as ei:
        load_spec(DATA / "child_bad_inherited.yaml")
    e = ei.value
    assert e.file.name == "base.toml" and e.line == 2 and e.field == "constraints[0]"
    assert "'X < 3' cannot be evaluated at X='a'" in str(e)


def test_extends_cycle_names_the_chain():
    with pytest.raises(SpecError) as ei:
        load_spec(DATA / "cycle_a.toml")
    e = ei.value
    assert e.file.name == "cycle_b.yaml" and e.line == 1 and e.field == "extends"
    assert "extends cycle: " in str(e) and "cycle_a.toml -> " in str(e) and "cycle_b.yaml -> " in str(e)
    assert str(e).rstrip().endswith("cycle_a.toml")


def test_relative_message_is_exactly_the_documented_form(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("bad.toml").write_text(GOOD_TOML.replace("[tiles]\n", "[tiles]\nBLOCK_N = { values = [128, 96] }\n"))
    with pytest.raises(SpecError) as ei:
        load_spec("bad.toml")
    assert str(ei.value) == ("bad.toml:9: tiles.BLOCK_N.values[1]: 96 is not a power of two; allowed: powers of two "
                             "(16, 32, 64, 128, 256, ...)")
    Path("bad2.toml").write_text(GOOD_TOML + "[stagse]\nS = 2\n")
    with pytest.raises(SpecError) as ei:
        load_spec("bad2.toml")
    assert str(ei.value).startswith("bad2.toml:14: stagse: unknown key 'stagse'; did you mean 'stages'? (allowed: ")


def test_package_exports():
    import gluon.tuning as t
    assert t.load_spec is load_spec and t.SpecError is SpecError and t.SearchSpace is SearchSpace
    with pytest.raises(AttributeError):
        getattr(t, "no_such_name")


def test_spec_error_attributes_and_pickle(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(GOOD_TOML.replace('"sm90"', '"sm9"'))
    with pytest.raises(SpecError) as ei:
        load_spec(p)
    e = ei.value
    assert isinstance(e, ValueError)
    assert (e.line, e.field, e.value, e.suggestion) == (4, "kernel.arch", "sm9", "sm90")
    assert e.allowed == "sm80, sm90, sm100, cdna3"
    e2 = pickle.loads(pickle.dumps(e))
    assert str(e2) == str(e) and e2.field == e.field and e2.line == e.line


def test_spec_programmatic_and_error_helper(tmp_path):
    spec = Spec(kernel={"name": "k", "template": "a.b:C", "arch": "sm80"}, dtypes=["fp16"], shapes=[[8, 8]],
                space=SearchSpace({"A": Choice((1, 2))}), constraints=["max(A, 1) > 1"])
    assert spec.name == "k" and spec.space.constraints == ["max(A, 1) > 1"] and spec.space.size() == 1
    assert len(spec.content_hash) == 64
    p = tmp_path / "k.toml"
    p.write_text(GOOD_TOML + "[tuning]\nbaseline = \"cublas\"\n")
    spec = load_spec(p)
    e = spec.error("tuning.baseline", "no such baseline", value="cublas", allowed="torch")
    assert str(e).endswith("k.toml:15: tuning.baseline: no such baseline; allowed: torch")
    assert spec.param_origin("G")[1:] == (12, "params.G")


# --------------------------------------------------------------------------------- templates


def test_resolve_template(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tmpl.py").write_text("TUNING = {'ok': 1}\n")
    (tmp_path / "broken.py").write_text("x = 1\nraise RuntimeError('boom')\n")
    base = GOOD_TOML.replace('"pkg.mod:TUNING"', '"tmpl.py:TUNING"')
    cases = {
        "ok.toml": base,
        "attr.toml": base.replace("tmpl.py:TUNING", "tmpl.py:TUNNING"),
        "missing.toml": base.replace("tmpl.py:TUNING", "nothere.py:TUNING"),
        "module.toml": base.replace("tmpl.py:TUNING", "no_such_package_xyz.mod:TUNING"),
        "broken.toml": base.replace("tmpl.py:TUNING", "broken.py:TUNING"),
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    assert resolve_template(load_spec("ok.toml")) == {"ok": 1}
    expect = {
        "attr.toml": ["'tmpl.py' has no attribute 'TUNNING'; did you mean 'tmpl.py:TUNING'?"],
        "missing.toml": ["file 'nothere.py' not found"],
        "module.toml": ["cannot import module 'no_such_package_xyz.mod': ModuleNotFoundError"],
        "broken.toml": ["importing 'broken.py' failed: RuntimeError: boom (at broken.py:2)"],
    }
    for name, parts in expect.items():
        with pytest.raises(SpecError) as ei:
            resolve_template(load_spec(name))
        msg = str(ei.value)
        assert msg.startswith(f"{name}:3: kernel.template: "), msg
        for part in parts:
            assert part in msg, msg
        assert "Traceback" not in msg


# ------------------------------------------------------------------------------ malformed specs

K = """\
[kernel]
name = "k"
template = "pkg.mod:TUNING"
arch = "sm90"
dtypes = ["fp16"]
shapes = [[64, 64]]
"""  # 6 lines: whatever a case appends starts on line 7

Y = """\
kernel:
  name: k
  template: pkg.mod:TUNING
  arch: sm90
dtypes: [fp16]
shapes: [[64, 64]]
"""  # 6 lines

# appended to K: the constraint item sits on line 11
CONS = "[params]\nE = { values = ['tma', 'direct'] }\nX = { values = [1, 2] }\nconstraints = [\n  %s,\n]\n"

# (id, {file: text}, file loaded, line, field, message parts)
BAD = [
    ("unknown-section-typo", {"s.toml": K + "[stagse]\nSTAGES = 3\n"}, "s.toml", 7, "stagse",
     ["unknown key 'stagse'; did you mean 'stages'?", "allowed: kernel, dtypes, shapes, tiles"]),
    ("tile-not-power-of-two", {"s.toml": K + "[tiles]\nBLOCK_M = 128\nBLOCK_N = { values = [128, 96] }\n"},
     "s.toml", 9, "tiles.BLOCK_N.values[1]",
     ["96 is not a power of two; allowed: powers of two (16, 32, 64, 128, 256, ...)"]),
    ("tile-not-power-of-two-yaml", {"s.yaml": Y + "tiles:\n  BLOCK_N:\n    values:\n      - 128\n      - 96\n"},
     "s.yaml", 11, "tiles.BLOCK_N.values[1]", ["96 is not a power of two", "allowed: powers of two"]),
    ("arch-typo", {"s.toml": K.replace('"sm90"', '"sm9"')}, "s.toml", 4, "kernel.arch",
     ["unknown arch 'sm9'; did you mean 'sm90'?", "allowed: sm80, sm90, sm100, cdna3"]),
    ("arch-alias", {"s.yaml": Y.replace("arch: sm90", "arch: hopper")}, "s.yaml", 4, "kernel.arch",
     ["unknown arch 'hopper'; did you mean 'sm90'?"]),
    ("dtype-typo", {"s.toml": K.replace('["fp16"]', '["bf16", "f16"]')}, "s.toml", 5, "kernel.dtypes[1]",
     ["unknown dtype 'f16'; did you mean 'fp16'?", "allowed: fp16, bf16, fp32, fp8e4m3, fp8e5m2"]),
    ("dtype-repeated", {"s.yaml": Y.replace("[fp16]", "[fp16, fp16]")}, "s.yaml", 5, "dtypes[1]",
     ["'fp16' is repeated"]),
    ("dtypes-twice", {"s.toml": 'dtypes = ["fp16"]\n' + K}, "s.toml", 6, "kernel.dtypes",
     ["'dtypes' is given twice: at the top level (line 1) and in [kernel]"]),
    ("sampler-typo", {"s.toml": K + '[tuning]\nsampler = "tpr"\n'}, "s.toml", 8, "tuning.sampler",
     ["unknown sampler 'tpr'; did you mean 'tpe'?", "allowed: tpe, grid, random, cmaes, gp"]),
    ("objective-typo", {"s.toml": K + '[tuning]\nobjective = "geomean"\n'}, "s.toml", 8, "tuning.objective",
     ["unknown objective 'geomean'; did you mean 'geomean_ratio'?"]),
    ("scoring-typo", {"s.yaml": Y + "tuning:\n  scoring: per-shape\n"}, "s.yaml", 8, "tuning.scoring",
     ["unknown scoring 'per-shape'; did you mean 'per_shape'?", "allowed: geomean, per_shape"]),
    ("trials-zero", {"s.toml": K + "[tuning]\ntrials = 0\n"}, "s.toml", 8, "tuning.trials",
     ["0 is less than 1; allowed: integers >= 1"]),
    ("trials-string", {"s.toml": K + '[tuning]\ntrials = "100"\n'}, "s.toml", 8, "tuning.trials",
     ["'100' is not an integer; allowed: integers >= 1"]),
    ("retime-round-zero", {"s.toml": K + "[tuning]\nretime_round_ms = 0\n"}, "s.toml", 8, "tuning.retime_round_ms",
     ["0 is less than 1; allowed: integers >= 1"]),
    ("rtol-negative", {"s.yaml": Y + "tuning:\n  rtol: -1.0e-3\n"}, "s.yaml", 8, "tuning.rtol",
     ["-0.001 is out of range; allowed: numbers >= 0"]),
    ("time-limit-zero", {"s.toml": K + "[tuning]\ntime_limit_s = 0\n"}, "s.toml", 8, "tuning.time_limit_s",
     ["0 is out of range; allowed: numbers > 0"]),
    ("tuning-key-typo", {"s.toml": K + "[tuning]\ntrails = 5\n"}, "s.toml", 8, "tuning.trails",
     ["unknown key 'trails'; did you mean 'trials'?"]),
    ("constraints-in-tuning", {"s.toml": K + "[tuning]\ntrials = 5\nconstraints = ['1 < 2']\n"}, "s.toml", 9,
     "tuning.constraints", ["unknown key 'constraints' (constraints go at the top level", "or in [params]"]),
    ("constraint-name-typo",
     {"s.toml": "constraints = [\n  'BLOCK_M <= 128',\n  'BLOCK_M * BLOKC_N <= 4096',\n]\n" + K
      + "[tiles]\nBLOCK_M = 128\nBLOCK_N = 64\n"}, "s.toml", 3, "constraints[1]",
     ["unknown parameter 'BLOKC_N' in 'BLOCK_M * BLOKC_N <= 4096'; did you mean 'BLOCK_N'?",
      "allowed: BLOCK_M, BLOCK_N"]),
    ("constraint-syntax", {"s.toml": K + CONS % "'X * <= 2'"}, "s.toml", 11, "params.constraints[0]",
     ["'X * <= 2' does not parse: invalid syntax at column 5", "allowed: a Python-style expression"]),
    ("constraint-attribute", {"s.toml": K + CONS % "'X.real > 1'"}, "s.toml", 11, "params.constraints[0]",
     ["attribute access 'X.real' is not allowed in constraint 'X.real > 1'", "allowed: numbers, parameter names"]),
    ("constraint-call", {"s.toml": K + CONS % "'pow(X, 2) > 1'"}, "s.toml", 11, "params.constraints[0]",
     ["call 'pow(X, 2)' is not allowed", "min/max/abs"]),
    ("constraint-string-literal", {"s.toml": K + CONS % "\"E == 'tmx'\""}, "s.toml", 11, "params.constraints[0]",
     ["'tmx' is not a value of E", "did you mean 'tma'?", "allowed: values of E: 'tma', 'direct'"]),
    ("constraint-type-error", {"s.toml": K + CONS % "'E * 2 > 1'"}, "s.toml", 11, "params.constraints[0]",
     ["'E * 2 > 1' cannot be evaluated at E='tma': arithmetic needs numbers, got 'tma'"]),
    ("constraint-not-a-string", {"s.yaml": Y + "constraints:\n  - 3\n"}, "s.yaml", 8, "constraints[0]",
     ["3 is not a string"]),
    ("no-config-satisfies", {"s.toml": K + CONS % "'X > 5'"}, "s.toml", 10, "params.constraints",
     ["no config satisfies the constraints: 'X > 5' (4 configs before constraints)"]),
    ("no-config-together",
     {"s.yaml": Y + "params:\n  X: {values: [1, 2, 3]}\nconstraints:\n  - X > 1\n  - X < 2\n"}, "s.yaml", 9,
     "constraints", ["no config satisfies the constraints: 'X > 1', 'X < 2' (3 configs before constraints)",
                     "each constraint alone is satisfiable"]),
    ("toml-syntax", {"s.toml": K + "[tiles\nX = 1\n"}, "s.toml", 7, "",
     ["TOML syntax error at column 7: expected ']' at the end of a table declaration"]),
    ("toml-duplicate-key", {"s.toml": K + "[tuning]\ntrials = 1\ntrials = 2\n"}, "s.toml", 9, "",
     ["TOML syntax error"]),
    ("yaml-syntax", {"s.yaml": "kernel:\n  name: k\n   template: x\n"}, "s.yaml", 3, "",
     ["YAML syntax error at column 12: mapping values are not allowed here"]),
    ("yaml-duplicate-key", {"s.yaml": Y + "dtypes: [bf16]\n"}, "s.yaml", 7, "",
     ["duplicate key 'dtypes' (first at line 5)"]),
    ("yaml-empty", {"s.yaml": "# nothing\n"}, "s.yaml", None, "", ["the file is empty"]),
    ("yaml-not-a-mapping", {"s.yaml": "- a\n- b\n"}, "s.yaml", 1, "", ["the top level is a list, not a mapping"]),
    ("yaml-unknown-key", {"s.yaml": Y + "tuning:\n  trials: 5\n  sampelr: tpe\n"}, "s.yaml", 9,
     "tuning.sampelr", ["unknown key 'sampelr'; did you mean 'sampler'?"]),
    ("empty-values", {"s.toml": K + "[params]\nX = { values = [] }\n"}, "s.toml", 8, "params.X.values",
     ["empty list of values; allowed: at least one value"]),
    ("repeated-value", {"s.toml": K + "[params]\nX = { values = [1, 2, 1] }\n"}, "s.toml", 8,
     "params.X.values[2]", ["1 is repeated (also values[0])"]),
    ("range-low-gt-high", {"s.toml": K + "[stages]\nSTAGES = { range = [5, 2] }\n"}, "s.toml", 8,
     "stages.STAGES.range", ["low 5 > high 2", "did you mean '[2, 5]'?", "allowed: low <= high"]),
    ("range-step-zero", {"s.toml": K + "[stages]\nSTAGES = { range = [2, 5], step = 0 }\n"}, "s.toml", 8,
     "stages.STAGES.step", ["step 0 is not positive; allowed: integers >= 1"]),
    ("range-not-pair", {"s.toml": K + "[params]\nX = { range = [1, 2, 3] }\n"}, "s.toml", 8, "params.X.range",
     ["[1, 2, 3] is not [low, high]"]),
    ("range-float-bound", {"s.toml": K + "[params]\nX = { range = [0.5, 2] }\n"}, "s.toml", 8,
     "params.X.range[0]", ["0.5 is not an integer", "use values = [...] for floats"]),
    ("log-range-bounds", {"s.toml": K + "[tiles]\nBLOCK_K = { range = [24, 256], log = true }\n"}, "s.toml", 8,
     "tiles.BLOCK_K.range[0]", ["24 is not a power of two", "allowed: powers of two as bounds of a log range"]),
    ("log-with-step", {"s.toml": K + "[tiles]\nBLOCK_K = { range = [16, 256], log = true, step = 2 }\n"},
     "s.toml", 8, "tiles.BLOCK_K.step", ["a log range steps by powers of two"]),
    ("tile-range-yields-non-power",
     {"s.toml": K + "[tiles]\nBLOCK_K = { range = [32, 128], step = 32 }\n"}, "s.toml", 8, "tiles.BLOCK_K.range",
     ["range [32, 128] with step 32 yields 96, which is not a power of two",
      "did you mean '{ range = [32, 128], log = true }'?"]),
    ("values-and-range", {"s.toml": K + "[params]\nX = { values = [1], range = [1, 2] }\n"}, "s.toml", 8,
     "params.X", ["give either 'values' or 'range', not both"]),
    ("domain-key-typo", {"s.toml": K + "[params]\nG = { vals = [8, 16] }\n"}, "s.toml", 8, "params.G.vals",
     ["unknown key 'vals'; did you mean 'values'?", "allowed: values, range, step, log"]),
    ("bare-list", {"s.toml": K + "[params]\nG = [8, 16]\n"}, "s.toml", 8, "params.G",
     ["[8, 16] is a bare list; did you mean '{ values = [8, 16] }'?"]),
    ("bare-list-yaml", {"s.yaml": Y + "params:\n  G: [8, 16]\n"}, "s.yaml", 8, "params.G",
     ["did you mean '{values: [8, 16]}'?"]),
    ("registers-not-multiple-of-8",
     {"s.toml": K + "[warp_roles.consumer]\nwarps = 4\nregisters = 230\n"}, "s.toml", 9,
     "warp_roles.consumer.registers", ["230 registers is not a multiple of 8; allowed: multiples of 8 in 24..256"]),
    ("registers-out-of-range",
     {"s.toml": K + "[warp_roles.producer]\nwarps = 1\nregisters = { values = [24, 512] }\n"}, "s.toml", 9,
     "warp_roles.producer.registers.values[1]", ["512 registers is outside 24..256"]),
    ("role-key-typo", {"s.toml": K + "[warp_roles.consumer]\nwarps = 4\nregs = 232\n"}, "s.toml", 9,
     "warp_roles.consumer.regs", ["unknown key 'regs'; did you mean 'registers'?", "allowed: warps, registers"]),
    ("role-without-warps", {"s.toml": K + "[warp_roles.producer]\nregisters = 40\n"}, "s.toml", 7,
     "warp_roles.producer.warps", ["missing required key 'warps' in role 'producer'"]),
    ("warps-zero", {"s.yaml": Y + "warp_roles:\n  consumer:\n    warps: 0\n"}, "s.yaml", 9,
     "warp_roles.consumer.warps", ["0 warps is out of range; allowed: integers 1..32"]),
    ("swizzle", {"s.toml": K + "[swizzle]\nSWIZZLE = { values = [64, 96] }\n"}, "s.toml", 8,
     "swizzle.SWIZZLE.values[1]", ["96 is not a swizzle width in bytes; allowed: 0, 32, 64, 128"]),
    ("stages-out-of-range", {"s.toml": K + "[stages]\nSTAGES = 33\n"}, "s.toml", 8, "stages.STAGES",
     ["33 stages is out of range; allowed: integers 1..32"]),
    ("duplicate-parameter", {"s.toml": K + "[tiles]\nX = 16\n[params]\nX = 2\n"}, "s.toml", 10, "params.X",
     ["parameter 'X' is defined twice; it is already tiles.X (line 8)"]),
    ("bad-parameter-name", {"s.toml": K + "[tiles]\nBLOCK-M = 64\n"}, "s.toml", 8, "tiles.BLOCK-M",
     ["'BLOCK-M' is not a valid parameter name; did you mean 'BLOCK_M'?"]),
    ("section-not-a-table", {"s.toml": "tiles = 5\n" + K}, "s.toml", 1, "tiles", ["5 is not a table"]),
    ("template-without-attr", {"s.toml": K.replace("pkg.mod:TUNING", "gluon.tuning.templates.gemm_sm90")}, "s.toml",
     3, "kernel.template", ["'gluon.tuning.templates.gemm_sm90' is not a template reference",
                            "did you mean 'gluon.tuning.templates.gemm_sm90:TUNING'?",
                            "allowed: 'package.module:ATTR' or 'path/to/file.py:ATTR'"]),
    ("template-garbage", {"s.yaml": Y.replace("pkg.mod:TUNING", "'a b c'")}, "s.yaml", 3, "kernel.template",
     ["'a b c' is not a template reference; allowed: 'package.module:ATTR'"]),
    ("kernel-key-typo", {"s.toml": K.replace("arch =", "arc =")}, "s.toml", 4, "kernel.arc",
     ["unknown key 'arc'; did you mean 'arch'?"]),
    ("kernel-missing-template", {"s.toml": K.replace('template = "pkg.mod:TUNING"\n', "")}, "s.toml", 1,
     "kernel.template", ["missing required key 'template' in [kernel]"]),
    ("kernel-missing", {"s.toml": 'dtypes = ["fp16"]\nshapes = [[1]]\n'}, "s.toml", None, "",
     ["missing required section 'kernel'"]),
    ("kernel-bad-name", {"s.toml": K.replace('name = "k"', 'name = "my kernel"')}, "s.toml", 2, "kernel.name",
     ["'my kernel' is not a valid kernel name; did you mean 'my_kernel'?"]),
    ("shapes-different-lengths", {"s.toml": K.replace("[[64, 64]]", "[[64, 64], [64, 64, 64]]")}, "s.toml", 6,
     "kernel.shapes[1]", ["[64, 64, 64] has 3 dims but shapes[0] has 2; allowed: every shape with 2 dims"]),
    ("shapes-non-positive", {"s.toml": K.replace("[[64, 64]]", "[\n  [64, 64],\n  [64, 0],\n]")}, "s.toml", 8,
     "kernel.shapes[1][1]", ["0 is not a positive dimension; allowed: integers >= 1"]),
    ("shapes-empty", {"s.yaml": Y.replace("[[64, 64]]", "[]")}, "s.yaml", 6, "shapes", ["empty list of shapes"]),
    ("shape-not-a-list", {"s.yaml": Y.replace("[[64, 64]]", "[4096]")}, "s.yaml", 6, "shapes[0]",
     ["4096 is not a shape", "did you mean '[4096]'?"]),
    ("extends-missing", {"s.toml": 'extends = "nope.toml"\n' + K}, "s.toml", 1, "extends",
     ["base file 'nope.toml' not found"]),
    ("extends-cycle", {"a.toml": 'extends = "b.yaml"\n' + K, "b.yaml": "extends: a.toml\n"}, "a.toml", 1, "extends",
     ["extends cycle: ", "a.toml -> ", "b.yaml -> ", "a.toml"]),
    ("extends-self", {"a.toml": 'extends = "a.toml"\n' + K}, "a.toml", 1, "extends", ["extends cycle: "]),
    ("extends-error-in-base", {"b.toml": K.replace('"sm90"', '"sm91"'), "c.yaml": "extends: b.toml\n"}, "c.yaml",
     4, "kernel.arch", ["unknown arch 'sm91'; did you mean 'sm90'?"]),
    ("file-not-found", {}, "missing.toml", None, "", ["file not found"]),
    ("unknown-format", {"s.json": "{}"}, "s.json", None, "", ["unknown spec format '.json'; allowed: .toml, .yaml"]),
    ("not-utf8", {"s.toml": b'[kernel]\nname = "\xff"\n'}, "s.toml", 2, "", ["not UTF-8 text"]),
    ("misplaced-tuning-key", {"s.toml": K + "trials = 5\n"}, "s.toml", 7, "kernel.trials",
     ["unknown key 'trials' ('trials' belongs in [tuning])"]),
]

# the files a case names as its error's file, when not the loaded one
ERROR_FILE = {"extends-cycle": "b.yaml", "extends-error-in-base": "b.toml"}


@pytest.mark.parametrize("files, entry, line, field, parts", [pytest.param(*c[1:], id=c[0]) for c in BAD])
def test_malformed_spec(tmp_path, request, files, entry, line, field, parts):
    for name, text in files.items():
        p = tmp_path / name
        (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
    with pytest.raises(SpecError) as ei:
        load_spec(tmp_path / entry)
    e = ei.value
    msg = str(e)
    case = request.node.callspec.id
    file = (tmp_path / ERROR_FILE.get(case, entry)).resolve()
    assert e.file == file, msg
    assert e.line == line, msg
    assert e.field == field, msg
    prefix = f"{file}:{line}: " if line else f"{file}: "
    prefix += f"{field}: " if field else ""
    assert msg.startswith(prefix), msg
    for part in parts:
        assert part in msg, f"{part!r} not in {msg!r}"
    for leak in ("Traceback", "pydantic", "validation error", "Value error,"):
        assert leak not in msg, msg


def test_enough_malformed_cases():
    assert len(BAD) >= 30
    assert len({c[0] for c in BAD}) == len(BAD)


def test_a_long_value_list_loads_in_linear_time_and_has_a_limit(tmp_path):
    """The repeat check was quadratic (20k values: 16 s); 60k now load at once, more than 65536 are refused."""
    import time
    p = tmp_path / "s.toml"
    p.write_text(K + "[params]\nX = { values = [" + ", ".join(map(str, range(60000))) + "] }\n")
    t = time.monotonic()
    spec = load_spec(p)
    assert time.monotonic() - t < 10 and len(spec.space.params["X"].values) == 60000
    p.write_text(K + "[params]\nX = { values = [" + ", ".join(map(str, range(70000))) + "] }\n")
    with pytest.raises(SpecError, match="70000 values; allowed: at most 65536"):
        load_spec(p)
    p.write_text(K + "[params]\nX = { values = [1, true, 1.0, \"1\"] }\n")     # four values of four types
    assert len(load_spec(p).space.params["X"].values) == 4


@pytest.mark.parametrize("name,text", [
    ("s.toml", K + "[tuning]\nx = " + "[" * 3000 + "]" * 3000 + "\n"),        # past the parser's recursion
    ("s.toml", K + "z = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n"),
    ("s.toml", K + "[tuning]\nx = " + "[" * 50 + "]" * 50 + "\n"),            # parsed, then refused
    ("s.yaml", Y + "z: " + "[" * 3000 + "]" * 3000 + "\n"),
])
def test_deep_nesting_is_one_spec_error(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(SpecError, match="nested") as e:
        load_spec(p)
    assert str(p) in str(e.value) and "32" in str(e.value)
