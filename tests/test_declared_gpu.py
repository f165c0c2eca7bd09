"""Declared kernels on the GPU: each shipped declared spec (softmax, RMSNorm, SwiGLU) runs through the
tuner's job (gluon.tuning.measure.measure_job: fresh inputs, output poisoned, one run checked against
the reference, then timed against the baseline) at sizes that are and are not multiples of its tiles,
and through a user's call of the template as gluon.load makes it."""
import os

import pytest

from conftest import skip_unless_sm90

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = {"softmax": [(64, 1000), (33, 1024), (7, 8195), (3, 20000)],
         "rmsnorm": [(64, 1000), (33, 4096), (5, 777)],
         "swiglu": [(4096,), (1000003,)]}


def _spec(name):
    from gluon.tuning.spec import load_spec
    return load_spec(os.path.join(ROOT, "specs", f"{name}.toml"))


def _configs(spec, template, shape, dtype):
    return [c for c in spec.space.grid() if template.requirement_failed(c, shape, dtype) is None]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_the_tuners_job_verifies_and_times_a_declared_kernel(name, dtype):
    skip_unless_sm90("the declared specs")
    from gluon.tuning.measure import measure_job
    from gluon.tuning.spec import template_of
    spec = _spec(name)
    t = template_of(spec)
    for shape in CASES[name]:
        configs = _configs(spec, t, shape, dtype)
        assert configs, (name, shape, dtype)
        for config in (configs[0], configs[-1]):
            job = {"spec": spec, "config": config, "shape": shape, "dtype": dtype, "seed": 11, "repeats": 1,
                   "rtol": 1e-2, "atol": 1e-5}
            res = measure_job(job, torch.device("cuda"), lambda fn: [1.0, 1.0, 1.0], torch.cuda.synchronize)
            assert res["status"] == "ok", (name, shape, dtype, config, res)
            assert res["max_err"] < 1e-2


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_users_call_matches_the_reference_and_fills_out(name):
    skip_unless_sm90("the declared specs")
    from gluon.tuning.spec import template_of
    spec = _spec(name)
    t = template_of(spec)
    shape = CASES[name][-1]
    config = _configs(spec, t, shape, "bf16")[0]
    inputs = t.make_inputs(shape, "bf16", "cuda", 5)
    args = t.call_args(inputs)
    out = t.call(config, *args)
    ok, err, why = t.check(out, t.reference(inputs), 1e-2, 1e-5)
    assert ok, why
    buf = torch.full_like(out, float("nan"))
    assert t.call(config, *args, out=buf) is buf and t.check(buf, t.reference(inputs), 1e-2, 1e-5)[0]
    with pytest.raises(Exception, match="not contiguous|gives"):
        bad = args[0].t() if args[0].dim() == 2 else args[0][::2]
        t.call(config, bad, *args[1:])
