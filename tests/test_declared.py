"""Declared kernels without a GPU: a @gluon.jit function tuned from its spec's [args], [launch], [problem]
tables (gluon.tuning.spec_declared, gluon.tuning.declared): the tables' errors at file:line, the template's
trace (the same binary as the JIT's launch), inputs, reference, check, baseline, dry run, build and load."""
import json
import os
import sys
import textwrap

import pytest

from gluon.cli import main
from gluon.tuning.spec import SpecError, load_spec, template_of

torch = pytest.importorskip("torch")

KERNEL = '''
import gluon
import gluon.language as gl
from gluon import Layout


@gluon.jit
def scale_kernel(out, x, n, alpha, BLOCK: gl.constexpr, NUM_WARPS: gl.constexpr, VEC: gl.constexpr = 4):
    layout = Layout.blocked(size_per_thread=[VEC], threads_per_warp=[32], warps_per_cta=[NUM_WARPS])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offs < n
    v = gl.load(x + offs, mask=mask)
    gl.store(out + offs, (v.to(gl.float32) * alpha).to(v.dtype), mask=mask)


def scale_reference(x, alpha):
    return x.float() * alpha
'''

SPEC = '''\
[kernel]
name = "scale"
function = "k.py:scale_kernel"
arch = "sm90"
dims = ["N"]
dtypes = ["fp16", "fp32"]
shapes = [[1000], [4096]]

[params]
BLOCK = { values = [512, 1024] }
NUM_WARPS = { values = [2, 4] }

[args]
out = { tensor = ["N"], output = true }
x = { tensor = ["N"] }
n = "N"
alpha = 0.5

[launch]
grid = ["cdiv(N, BLOCK)"]
num_warps = "NUM_WARPS"
constexprs = { VEC = "16 // itemsize" }
requires = ["BLOCK >= 128 * NUM_WARPS"]

[problem]
reference = "x.float() * alpha"
baseline = "x * alpha"
bytes = "2 * N * itemsize"
'''


def _write(tmp_path, spec=SPEC, kernel=KERNEL, name="s.toml"):
    (tmp_path / "k.py").write_text(textwrap.dedent(kernel))
    p = tmp_path / name
    p.write_text(spec)
    return p


@pytest.fixture
def declared(tmp_path):
    spec = load_spec(_write(tmp_path))
    return spec, template_of(spec)


def test_a_declared_spec_loads_into_typed_tables(declared):
    spec, t = declared
    d = spec.declaration
    assert d.dims == ("N",) and [a.name for a in d.args] == ["out", "x", "n", "alpha"]
    assert [t.name for t in d.outputs] == ["out"] and [t.name for t in d.inputs] == ["x"]
    assert d.launch.grid == ("cdiv(N, BLOCK)",) and d.constexpr_names == ("VEC",)
    assert spec.kernel.ref == "k.py:scale_kernel" and spec.kernel.template == ""
    assert t.dims == ("N",) and t.dtypes == ("fp16", "fp32")


def test_the_content_hash_does_not_depend_on_where_the_spec_lies(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = load_spec(_write(tmp_path / "a")), load_spec(_write(tmp_path / "b"))
    assert a.content_hash == b.content_hash
    c = load_spec(_write(tmp_path / "b", SPEC.replace("alpha = 0.5", "alpha = 0.25"), name="c.toml"))
    assert c.content_hash != a.content_hash


def test_the_template_traces_what_the_launch_compiles(declared):
    """The tuner's trace and the JIT's launch specialization are one binary: a launch finds the tuner's
    kernel in the disk cache (gluon.jit.stand_in)."""
    _, t = declared
    config = {"BLOCK": 1024, "NUM_WARPS": 4}
    for n, dtype in ((4096, "fp16"), (1000, "fp32")):
        ck = t.compile(config, (n,), dtype, "sm90")
        assert ck.spills == 0
        inputs = t.make_inputs((n,), dtype, "cpu", 0)
        plan = t._plan(config, (n,), dtype, -1)
        grid, nw, consts = plan.grid, plan.num_warps, plan.consts
        assert grid == (-(-n // 1024),) and nw == 4 and consts == {"BLOCK": 1024, "NUM_WARPS": 4,
                                                                   "VEC": 16 // inputs["x"].element_size()}
        args = [inputs[a] if a in inputs else plan.scalars[a] for a in ("out", "x", "n", "alpha")]
        jit = t.fn[grid].compiled(*args, num_warps=nw, arch="sm90", **consts)
        assert jit.binary.key == ck.binary.key


def test_inputs_reference_check_and_baseline_on_the_cpu(declared):
    _, t = declared
    inputs = t.make_inputs((1000,), "fp16", "cpu", 7)
    assert inputs["x"].dtype == torch.float16 and inputs["x"].shape == (1000,) and inputs["x"].abs().sum() > 0
    assert inputs["n"] == 1000 and inputs["alpha"] == 0.5
    again = t.make_inputs((1000,), "fp16", "cpu", 7)
    assert torch.equal(inputs["x"], again["x"])                   # seeded
    t.poison(inputs)
    assert torch.isnan(t.output(inputs)).all()
    ref = t.reference(inputs)
    assert ref.dtype == torch.float32 and torch.allclose(ref, inputs["x"].float() * 0.5)
    ok, err, why = t.check(t.output(inputs), ref, 1e-2, 0.0)
    assert not ok and "NaN" in why                                # the poison shows what was never written
    inputs["out"].copy_(ref)
    assert t.check(t.output(inputs), ref, 1e-2, 0.0)[0]
    assert torch.equal(t.baseline(inputs)(), inputs["x"] * 0.5)
    assert t.bytes((1000,), "fp16") == 4000 and t.bytes((1000,), "fp32") == 8000 and t.flops((1000,)) == 0


def test_requires_prunes_at_the_shape_and_says_why(declared):
    _, t = declared
    why = t.requirement_failed({"BLOCK": 512, "NUM_WARPS": 8}, (1000,), "fp16")
    assert why == "launch.requires 'BLOCK >= 128 * NUM_WARPS' is false (BLOCK=512, NUM_WARPS=8)"
    assert t.serves({"BLOCK": 1024, "NUM_WARPS": 4}, (5,), "fp16")
    assert not t.serves({"BLOCK": 512, "NUM_WARPS": 8}, (5,), "fp16")


def test_a_reference_function_gets_the_arguments_it_names(tmp_path):
    spec = load_spec(_write(tmp_path, SPEC.replace('reference = "x.float() * alpha"',
                                                   'reference = "k.py:scale_reference"')))
    t = template_of(spec)
    inputs = t.make_inputs((100,), "fp32", "cpu", 0)
    assert torch.equal(t.reference(inputs), inputs["x"] * 0.5)


def test_a_users_call_reads_the_dims_off_its_inputs(declared):
    _, t = declared
    x = torch.randn(300, dtype=torch.bfloat16)
    assert t.shape_of(x) == (300,) and t.dtype_of(x) == "bf16"
    with pytest.raises(Exception, match="takes 1 input tensors"):
        t.shape_of(x, x)
    with pytest.raises(Exception, match="x has 2 dims"):
        t.shape_of(torch.randn(2, 3))
    with pytest.raises(Exception, match="has no argument 'y'"):
        t.shape_of(x, y=1)
    with pytest.raises(Exception, match="x is on cpu"):            # the input named, not the output made for it
        t.call({"BLOCK": 1024, "NUM_WARPS": 4}, x.half())
    with pytest.raises(Exception, match="x must be a tensor, got list"):
        t.shape_of([1.0, 2.0])


def test_a_call_whose_outputs_are_empty_launches_nothing(interpret_env):
    """A dim of 0 with every output empty: the empty outputs, no launch (softmax of [4, 0] was an error about a
    layout from inside the kernel), as torch.softmax gives."""
    from gluon.tuning.spec import load_spec, template_of
    sm = template_of(load_spec(os.path.join(ROOT, "specs", "softmax.toml")))
    cfg = {"PROGRAM_BYTES": 2048, "ELEMS_PER_THREAD": 16, "CHUNK": 8192}
    for shape in ((4, 0), (0, 1000)):
        out = sm.call(cfg, torch.randn(*shape))
        assert out.shape == torch.softmax(torch.randn(*shape), -1).shape


# ------------------------------------------------------------------------------------------ errors

BAD = [
    ("grid-name", ('grid = ["cdiv(N, BLOCK)"]', 'grid = ["cdiv(N, BLOK)"]'), 20, "launch.grid[0]",
     ["unknown name 'BLOK'", "did you mean 'BLOCK'"]),
    ("fill-int", ('x = { tensor = ["N"] }', 'x = { tensor = ["N"], dtype = "int32" }'), 15, "args.x.fill",
     ["an integer tensor cannot be filled 'normal'"]),
    ("no-output", ('out = { tensor = ["N"], output = true }', 'out = { tensor = ["N"] }'), 13, "args",
     ["no output"]),
    ("bad-dtype", ('x = { tensor = ["N"] }', 'x = { tensor = ["N"], dtype = "fp33" }'), 15, "args.x.dtype",
     ["unknown dtype 'fp33'"]),
    ("ref-name", ('reference = "x.float() * alpha"', 'reference = "y.float() * alpha"'), 26, "problem.reference",
     ["unknown name 'y'"]),
    ("ref-dunder", ('reference = "x.float() * alpha"', 'reference = "x.__class__"'), 26, "problem.reference",
     ["attribute '.__class__' is not allowed"]),
    ("ref-lambda", ('reference = "x.float() * alpha"', 'reference = "(lambda: 1)()"'), 26, "problem.reference",
     ["a lambda"]),
    ("shape-param", ('x = { tensor = ["N"] }', 'x = { tensor = ["N", "Q"] }'), 15, "args.x.tensor[1]",
     ["unknown name 'Q'"]),
    ("flops-param", ('bytes = "2 * N * itemsize"', 'flops = "BLOCK * N"'), 28, "problem.flops",
     ["unknown name 'BLOCK'", "the dims"]),
    ("no-baseline", ('baseline = "x * alpha"\n', ''), 25, "problem", ["no baseline"]),
    ("launch-key", ('num_warps = "NUM_WARPS"', 'warps = "NUM_WARPS"'), 21, "launch.warps",
     ["unknown key 'warps'", "did you mean 'num_warps'"]),
    ("no-grid", ('grid = ["cdiv(N, BLOCK)"]\n', ''), 19, "launch.grid", ["missing required key 'grid'"]),
    ("both", ('function = "k.py:scale_kernel"', 'function = "k.py:scale_kernel"\ntemplate = "m:T"'), 3,
     "kernel.function", ["both a template and a function"]),
    ("no-dims", ('dims = ["N"]\n', ''), 1, "kernel.dims", ["missing required key 'dims'"]),
]


@pytest.mark.parametrize("case,edit,line,field,needles", BAD, ids=[b[0] for b in BAD])
def test_declaration_mistakes_are_one_line_at_the_field(tmp_path, case, edit, line, field, needles):
    text = SPEC.replace(*edit)
    assert text != SPEC, case
    with pytest.raises(SpecError) as e:
        load_spec(_write(tmp_path, text))
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path}/s.toml:{line}: {field}: "), msg
    for n in needles:
        assert n in msg, msg
    assert "\n" not in msg


KERNEL_BAD = [
    ("arg-typo", ('n = "N"', 'count = "N"'), "args.count", ["scale_kernel has no parameter 'count'"]),
    ("arg-missing", ('n = "N"\n', ''), "args", ["parameter n not declared in [args]"]),
    ("arg-constexpr", ('constexprs = { VEC = "16 // itemsize" }\n', ''), "args.VEC", ["'VEC' is a constexpr"]),
    ("const-missing", ('NUM_WARPS = { values = [2, 4] }', 'WARPS = { values = [2, 4] }'), "launch.constexprs",
     ["constexpr 'NUM_WARPS' has no value"]),
]


@pytest.mark.parametrize("case,edit,field,needles", KERNEL_BAD, ids=[b[0] for b in KERNEL_BAD])
def test_mismatches_with_the_kernel_are_found_before_any_config(tmp_path, case, edit, field, needles):
    text = SPEC.replace(*edit)
    if case == "const-missing":
        text = text.replace('"NUM_WARPS"', '"WARPS"').replace("128 * NUM_WARPS", "128 * WARPS")
    if case == "arg-constexpr":
        text = text.replace('alpha = 0.5', 'alpha = 0.5\nVEC = 4')
    spec = load_spec(_write(tmp_path, text))
    with pytest.raises(SpecError) as e:
        template_of(spec)
    msg = str(e.value)
    assert f": {field}: " in msg and "\n" not in msg, msg
    for n in needles:
        assert n in msg, msg


def test_an_unused_parameter_is_named_where_it_is_declared(tmp_path):
    spec = load_spec(_write(tmp_path, SPEC.replace("NUM_WARPS = { values = [2, 4] }",
                                                   "NUM_WARPS = { values = [2, 4] }\nUNROLL = { values = [1, 2] }")))
    with pytest.raises(SpecError) as e:
        template_of(spec)
    assert ":12: params.UNROLL: parameter 'UNROLL' is no constexpr of scale_kernel" in str(e.value)


def test_a_template_spec_cannot_carry_declared_tables(tmp_path):
    text = open(os.path.join(os.path.dirname(__file__), "..", "specs", "copy.toml")).read()
    p = tmp_path / "c.toml"
    p.write_text(text + '\n[launch]\ngrid = ["1"]\n')
    with pytest.raises(SpecError, match=r"launch: \[launch\] declares a function's arguments, but \[kernel\] "
                                        r"names a template"):
        load_spec(p)


# ------------------------------------------------------------------------------- the commands


def test_check_dry_run_build_and_load_with_no_python_template(tmp_path, monkeypatch, capsys):
    spec = _write(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["check", str(spec), "--all"]) == 0
    out = capsys.readouterr().out
    assert "4 configs" in out or "4 (config, dtype) pairs" in out or "compile clean" in out
    assert main(["tune", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "DRY RUN of scale" in out and "4 legal" in out, out
    assert main(["build", "--best", "--allow-dry-run", "--specs", str(tmp_path)]) == 0
    manifest = json.loads((tmp_path / "results" / "build" / "scale" / "manifest.json").read_text())
    assert manifest["template"] == "k.py:scale_kernel" and manifest["declaration"]["dims"] == ["N"]
    import gluon
    k = gluon.load("scale")
    x = torch.randn(3000, dtype=torch.float16)
    entry = k.bucket(k.template.shape_of(x), "fp16")
    assert entry["shape"] == [4096] and not entry.get("fallback")
    with pytest.raises(Exception, match="x is on cpu"):
        k(x)
    sys.modules.pop("k", None)


# ------------------------------------------------------------------------------- the shipped specs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = ["softmax", "rmsnorm", "swiglu"]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_config_of_a_shipped_spec_fits_every_shape(name):
    """The shipped specs search rules (bytes a program holds, elements a thread holds), not sizes, so
    that the geometric mean over their shapes has legal configs to rank: every config meets [launch]
    requires at every shape and dtype, except where a spec's own rule says so (SwiGLU's block size)."""
    spec = load_spec(os.path.join(ROOT, "specs", f"{name}.toml"))
    t = template_of(spec)
    configs = list(spec.space.grid())
    legal = [c for c in configs if all(t.requirement_failed(c, s, d) is None for s in spec.shapes for d in spec.dtypes)]
    if name == "swiglu":
        assert 0 < len(legal) < len(configs)
    else:
        assert legal == configs


def test_the_softmax_spec_derives_the_measured_defaults():
    """At PROGRAM_BYTES=2048, ELEMS_PER_THREAD=16 the rules give what examples/softmax_kernel.py's
    default_config measured best on the H200 (docs/NORM_KERNELS.md)."""
    t = template_of(load_spec(os.path.join(ROOT, "specs", "softmax.toml")))
    cfg = {"PROGRAM_BYTES": 2048, "ELEMS_PER_THREAD": 16, "CHUNK": 8192}
    got = {s: {k: t._env(cfg, s, "fp16")[k] for k in ("BLOCK_N", "ROWS_PER_PROGRAM", "NUM_WARPS", "VEC", "LOOPED")}
           for s in ((32768, 1024), (8192, 4096), (1024, 8195), (2048, 32768))}
    assert got[(32768, 1024)] == dict(BLOCK_N=1024, ROWS_PER_PROGRAM=1, NUM_WARPS=2, VEC=8, LOOPED=False)
    assert got[(8192, 4096)] == dict(BLOCK_N=4096, ROWS_PER_PROGRAM=1, NUM_WARPS=8, VEC=8, LOOPED=False)
    assert got[(1024, 8195)] == dict(BLOCK_N=16384, ROWS_PER_PROGRAM=1, NUM_WARPS=16, VEC=1, LOOPED=False)
    assert got[(2048, 32768)]["LOOPED"] and got[(2048, 32768)]["BLOCK_N"] == 8192


def test_the_tuning_guide_shows_the_shipped_softmax_spec():
    doc = open(os.path.join(ROOT, "docs", "TUNING.md")).read()
    block = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    assert block == open(os.path.join(ROOT, "specs", "softmax.toml")).read()


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_spec_compiles_its_first_shape_and_its_inputs_check(name):
    spec = load_spec(os.path.join(ROOT, "specs", f"{name}.toml"))
    t = template_of(spec)
    config = next(c for c in spec.space.grid()
                  if all(t.requirement_failed(c, s, d) is None for s in spec.shapes for d in spec.dtypes))
    assert t.compile(config, spec.shapes[0], "bf16", "sm90").spills == 0
    small = tuple(max(1, d // 64) for d in spec.shapes[0])
    inputs = t.make_inputs(small, "fp32", "cpu", 3)
    t.poison(inputs)
    ref = t.reference(inputs)
    assert not t.check(t.output(inputs), ref, 1e-2, 0.0)[0]         # poisoned: NaN everywhere
    base = t.baseline(inputs)()
    assert t.check(base, ref, 1e-4, 1e-6)[0]                         # torch's op is the reference's


def test_a_simt_kernel_declares_its_block(tmp_path):
    """examples/copy_kernel.py's SIMT form (one logical thread an element, gl.thread_id) declared with
    [launch] block: the tuner's trace is the launch's binary there too."""
    spec_text = f'''
[kernel]
name = "copy_simt"
function = "{ROOT}/examples/copy_kernel.py:copy_kernel"
arch = "sm90"
dims = ["N"]
dtypes = ["fp32"]
shapes = [[100000]]

[params]
XBLOCK = {{ values = [1024, 2048] }}

[args]
dst_ptr = {{ tensor = ["N"], output = true }}
src_ptr = {{ tensor = ["N"] }}
n_elements = "N"

[launch]
grid = ["cdiv(N, XBLOCK)"]
block = ["XBLOCK"]
num_warps = 4

[problem]
reference = "src_ptr"
baseline = "src_ptr.clone()"
bytes = "2 * N * itemsize"
'''
    p = tmp_path / "copy.toml"
    p.write_text(spec_text)
    t = template_of(load_spec(p))
    config = {"XBLOCK": 2048}
    ck = t.compile(config, (100000,), "fp32", "sm90")
    inputs = t.make_inputs((100000,), "fp32", "cpu", 0)
    plan = t._plan(config, (100000,), "fp32", -1)
    assert plan.grid == (49,) and plan.block == (2048,) and plan.num_warps == 4
    args = [inputs[n] for n in ("dst_ptr", "src_ptr")] + [plan.scalars["n_elements"]]
    jit = t.fn[plan.grid, plan.block].compiled(*args, num_warps=4, arch="sm90", **plan.consts)
    assert jit.binary.key == ck.binary.key
