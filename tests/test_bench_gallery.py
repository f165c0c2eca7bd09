"""bench/gallery.py on the CPU: its argument parsing and case selection, the bytes each case moves, the
configs it reports, `--list`, and each kernel's inputs, launch and check (`bind`) run on small cases through
the interpreter (the transpose excepted: the interpreter does not run shared memory yet). The timing itself
needs a GPU."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import gallery  # noqa: E402


def test_every_kernel_has_two_or_three_sizes_and_quick_takes_the_first():
    assert set(gallery.KERNELS) == {"softmax", "layernorm", "rmsnorm", "transpose", "row_sum", "cumsum", "histogram",
                                    "fp8_quantize"}
    for k in gallery.KERNELS:
        assert 2 <= sum(c.kernel == k for c in gallery.CASES) <= 3, k
    quick = gallery.parse_args(["--quick"]).cases
    assert [c.kernel for c in quick] == list(gallery.KERNELS)
    assert all(c == next(d for d in gallery.CASES if d.kernel == c.kernel) for c in quick)


def test_sizes_off_the_tiles_are_among_the_cases():
    """Each row kernel has a row length that is not a power of two (or a 16-byte multiple), the transpose
    a shape off its 64 x 64 tile, the histogram a length off the vector and a bin count off a power of two."""
    def odd(n):
        return n & (n - 1) != 0
    for k in ("softmax", "layernorm", "rmsnorm", "row_sum", "cumsum", "fp8_quantize"):
        assert any(odd(c.shape[1]) for c in gallery.CASES if c.kernel == k), k
    assert any(c.shape[0] % 64 and c.shape[1] % 64 for c in gallery.CASES if c.kernel == "transpose")
    hist = [c for c in gallery.CASES if c.kernel == "histogram"]
    assert any(c.shape[0] % 4 for c in hist) and any(odd(c.bins) for c in hist)
    assert gallery.config(gallery.Case("softmax", (65536, 128), "fp16"))["ROWS_PER_PROGRAM"] > 1   # multi-row


def test_only_selects_kernels_and_names_a_bad_one(capsys):
    args = gallery.parse_args(["--only", "transpose, histogram", "--json", "out.json"])
    assert {c.kernel for c in args.cases} == {"transpose", "histogram"} and args.json == "out.json"
    with pytest.raises(SystemExit) as e:
        gallery.parse_args(["--only", "softmx"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--only 'softmx': not a gallery kernel" in err and "softmax, layernorm" in err


@pytest.mark.parametrize("argv,what", [(["--repeats", "0"], "--repeats 0"), (["--round-ms", "-5"], "--round-ms -5")])
def test_non_positive_counts_are_usage_errors(capsys, argv, what):
    with pytest.raises(SystemExit) as e:
        gallery.parse_args(argv)
    assert e.value.code == 2 and what in capsys.readouterr().err


def test_defaults():
    args = gallery.parse_args([])
    assert args.repeats == 5 and args.round_ms == 200 and not args.quick and args.json is None
    assert args.cases == gallery.CASES


def test_bytes_moved():
    C = gallery.Case
    assert gallery.nbytes(C("softmax", (8192, 4096), "fp16")) == 2 * 8192 * 4096 * 2
    assert gallery.nbytes(C("layernorm", (10, 100), "fp32")) == 2 * 1000 * 4 + 2 * 100 * 4
    assert gallery.nbytes(C("rmsnorm", (10, 100), "bf16")) == 2 * 1000 * 2 + 100 * 2
    assert gallery.nbytes(C("row_sum", (10, 100), "fp16")) == 1000 * 2 + 10 * 8
    assert gallery.nbytes(C("histogram", (1000,), "int32", 7)) == 4000 + 28
    assert gallery.nbytes(C("fp8_quantize", (10, 100), "bf16")) == 2000 + 1000 + 40
    assert gallery.nbytes(C("transpose", (3, 5), "fp32")) == 120 and gallery.nbytes(C("cumsum", (3, 5), "fp16")) == 60


def test_list_runs_without_a_gpu():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gallery.py"), "--list", "--quick"],
                         capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONPATH=ROOT)).stdout
    lines = out.splitlines()
    assert len(lines) == len(gallery.KERNELS) and "transpose 8192x8192 fp16" in out and "SWIZZLE=True" in out


SMALL = [
    gallery.Case("softmax", (5, 100), "fp32"), gallery.Case("softmax", (16, 24), "fp16"),
    gallery.Case("layernorm", (6, 96), "bf16"), gallery.Case("rmsnorm", (3, 33), "fp32"),
    gallery.Case("row_sum", (5, 100), "fp16"), gallery.Case("cumsum", (5, 300), "fp32"),
    gallery.Case("histogram", (5003,), "int32", 100), gallery.Case("histogram", (3001,), "fp32", 37),
    gallery.Case("fp8_quantize", (7, 200), "bf16"),
]


@pytest.mark.parametrize("case", SMALL, ids=lambda c: c.label)
def test_bind_checks_what_ours_writes_and_refuses_the_poison(interpret_env, case):
    """The check passes once ours has run, and fails on the poisoned outputs alone: it reads what ours wrote."""
    b = gallery.bind(case, device="cpu")
    b.poison()
    assert b.check() is not None
    b.ours()
    assert b.check() is None
    b.theirs()                                  # the torch side runs on these inputs too
