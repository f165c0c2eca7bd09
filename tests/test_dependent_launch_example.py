"""examples/dependent_launch.py, a chain of elementwise kernels launched as programmatic dependents: compiled for
sm_90 without a GPU (the wait and the trigger in the SASS, the launch flag in the ABI, only with PDL), the chain in
the CPU interpreter against torch and bit for bit with the chain without PDL, the script's CPU path, and on a GPU
(`-m gpu`) the same check into poisoned outputs."""
import os
import subprocess
import sys

import pytest
import torch

from gluon import DType
from gluon.backend.machine_code import sass_instructions
from gluon.language import PointerArg, ScalarArg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import dependent_launch as dl  # noqa: E402


@pytest.mark.parametrize("pdl", [False, True])
def test_the_wait_and_the_trigger_only_with_pdl(pdl):
    ck = dl.axpb_kernel.compile(PointerArg(DType.bf16), PointerArg(DType.bf16), ScalarArg(DType.i32, 16),
                                ScalarArg(DType.f32), ScalarArg(DType.f32), arch="sm90", num_warps=4, PDL=pdl)
    ops = sass_instructions(ck.sass())
    assert (ops.get("ACQBULK", 0), ops.get("PREEXIT", 0)) == ((1, 1) if pdl else (0, 0))
    assert ck.abi.launch_pdl == pdl and ck.spills == 0


@pytest.mark.parametrize("n,links,dtype", [(5000, 4, torch.bfloat16), (2048, 3, torch.float16),
                                           (777, 5, torch.float32)])
def test_the_chain_in_the_interpreter(interpret_env, n, links, dtype):
    ok, err, same = dl.check(n, links, dtype, device="cpu")
    assert ok and same, err


def test_the_script_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script times instead")
    r = subprocess.run([sys.executable, "examples/dependent_launch.py"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr
    assert "PDL=True: launched as a dependent: True; ACQBULK (wait) 1, PREEXIT (trigger) 1" in r.stdout
    assert "interpreter: chain of 4 over 5000 elements ok" in r.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("n,links", [(1 << 20, 16), (100003, 8), (1, 4)])
def test_the_chain_on_the_gpu(n, links):
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    for dtype in (torch.bfloat16, torch.float32):
        ok, err, same = dl.check(n, links, dtype)
        assert ok and same, err
