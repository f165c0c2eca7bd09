"""The diagnostics suite itself (issue 20, "Done when"): at least 60 wrong kernels, and every code that
docs/DIAGNOSTICS.md lists is exercised by a test here.

A wrong kernel is one call of `expect_error` / `expect_warning` (each checks the code and the line, and
that nothing but that diagnostic comes out: no traceback, no silent acceptance); a parametrized test counts
once per parameter. A code is exercised when a test module of this folder holds it as a string literal
("GL101" or "[GL405]"), which is how the tests name the code they expect."""
import inspect
import io
import pathlib
import re
import importlib
import tokenize

HERE = pathlib.Path(__file__).parent
DOC = HERE.parent.parent / "docs" / "DIAGNOSTICS.md"
MODULES = sorted(p for p in HERE.glob("test_*.py") if p.name != pathlib.Path(__file__).name)
CALL = re.compile(r"\bexpect_(?:error|warning)\(")


def _wrong_kernels() -> dict[str, int]:
    counts = {}
    for path in MODULES:
        mod = importlib.import_module(path.stem)
        n = 0
        for name, fn in vars(mod).items():
            if not (name.startswith("test_") and inspect.isfunction(fn)):
                continue
            calls = len(CALL.findall(inspect.getsource(fn)))
            for mark in getattr(fn, "pytestmark", []):
                if mark.name == "parametrize":
                    calls *= len(mark.args[1])
            n += calls
        counts[path.name] = n
    return counts


def _codes_in_tests() -> set[str]:
    found = set()
    for path in MODULES:
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if tok.type == tokenize.STRING:
                m = re.fullmatch(r"[rfbu]*(['\"])\[?(GL\d{3})\]?\1", tok.string)
                if m:
                    found.add(m.group(2))
    return found


def _documented_codes() -> set[str]:
    return set(re.findall(r"^\| (GL\d{3}) \|", DOC.read_text(), re.M))


def test_at_least_60_wrong_kernels():
    counts = _wrong_kernels()
    assert sum(counts.values()) >= 60, counts


def test_every_documented_code_is_exercised():
    documented = _documented_codes()
    assert len(documented) >= 40, sorted(documented)
    missing = documented - _codes_in_tests()
    assert not missing, f"codes in docs/DIAGNOSTICS.md no test in tests/diagnostics/ expects: {sorted(missing)}"


def test_every_expected_code_is_documented():
    assert _codes_in_tests() <= _documented_codes(), sorted(_codes_in_tests() - _documented_codes())
