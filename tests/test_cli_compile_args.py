"""`gluon compile` arguments as users write them: arch names, every missing argument at once, an emit the
target cannot produce refused."""
import json
import os

import pytest

from gluon.arch import CDNA3, SM80, SM90, SM100, arch_by_name
from gluon.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPY = os.path.join(ROOT, "examples", "copy_kernel.py") + ":copy_kernel"
ARGS = ["--block", "2048", "--arg", "dst_ptr=ptr:f32", "--arg", "src_ptr=ptr:f32", "--arg", "n_elements=i32",
        "--const", "XBLOCK=2048"]


@pytest.mark.parametrize("name,arch", [("sm90", SM90), ("sm_90", SM90), ("SM_90", SM90), ("90", SM90),
                                       ("sm90a", SM90), ("compute_90", SM90), ("cuda:90", SM90), ("hopper", SM90),
                                       ("H200", SM90), ("sm_80", SM80), ("ampere", SM80), ("sm100a", SM100),
                                       ("blackwell", SM100), ("gfx942", CDNA3), ("cdna3", CDNA3), ("mi300x", CDNA3)])
def test_arch_names(name, arch):
    assert arch_by_name(name) is arch


def test_an_unknown_arch_is_one_usage_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["compile", COPY, "--arch", "volta", *ARGS])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown arch 'volta'" in err and "sm90" in err and "Traceback" not in err


def test_every_missing_argument_is_named_at_once(capsys):
    assert main(["compile", COPY, "--block", "2048", "--arg", "dst_ptr=ptr:f32", "--const", "XBLOCK=2048"]) == 2
    assert "missing 2 required arguments: 'src_ptr', 'n_elements'" in capsys.readouterr().err


@pytest.mark.parametrize("arch,emit", [("sm_90", "amdgcn"), ("gfx942", "ptx"), ("gfx942", "sass")])
def test_an_emit_the_target_cannot_produce_is_refused(arch, emit, capsys):
    assert main(["compile", COPY, "--arch", arch, "--emit", emit, *ARGS]) == 2
    err = capsys.readouterr().err
    assert f"--emit {emit}" in err and "produces" in err


def test_a_scalar_with_its_value_compiles_as_a_launch_does(capsys):
    """i32 alone: any value (and a note saying so); i32=VALUE: divisible by 16 where the value is, as a launch."""
    base = ["compile", COPY, "--block", "2048", "--arg", "dst_ptr=ptr:f32", "--arg", "src_ptr=ptr:f32",
            "--const", "XBLOCK=2048", "--json"]
    regs = {}
    for arg in ("n_elements=i32", "n_elements=i32=1048576", "n_elements=i32=1000"):
        assert main([*base, "--arg", arg]) == 0
        cap = capsys.readouterr()
        regs[arg] = json.loads(cap.out)["registers"]
        assert ("compiled for any value" in cap.err) == (arg == "n_elements=i32")
    assert regs["n_elements=i32=1000"] == regs["n_elements=i32"] != regs["n_elements=i32=1048576"]
    assert main([*base, "--arg", "n_elements=f32=3"]) == 2
    assert "integer scalars only" in capsys.readouterr().err
