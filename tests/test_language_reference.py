"""docs/LANGUAGE.md documents every public name of gluon.language, names nothing that does not exist,
and prints each callable's signature exactly as `inspect.signature` gives it (so it cannot drift).

The public names are `dir(gluon.language)` without names starting with `_` and without modules (the
submodules `core`, `memory`, ..., `nvidia`, `amd`). gluon/language/__init__.py re-exports no stdlib or
typing names (it imports only its own submodules and gluon.types), so modules are the only exclusion;
`test_public_names_are_gluons_own` keeps that true (a name whose object comes from outside gluon, say a
`typing.Sequence` or `builtins.range`, would fail it and must then be excluded here explicitly).

The doc's conventions, checked exactly:
* a name is documented by a heading line `### \\`gl.NAME\\`` (`####` for the `gl.Layout.*` constructors)
  or by a Markdown table row whose first cell is `\\`gl.NAME\\`` (the dtype aliases);
* every callable public name has a heading, and every heading of a callable (enum classes excepted:
  their members are listed instead) is followed, on the next non-blank line, by the line
  `\\`gl.NAME<signature>\\`` where `<signature>` is `str(inspect.signature(obj))`;
* every `gl.A` or `gl.A.B...` the doc mentions anywhere resolves by attribute lookup on gluon.language
  (`gl.NAME`, the placeholder of the doc's conventions paragraph, excepted).
"""
import enum
import inspect
import os
import re
import types

import gluon
import gluon.language as gl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC_PATH = os.path.join(ROOT, "docs", "LANGUAGE.md")
DOC = open(DOC_PATH).read()
LINES = DOC.splitlines()

HEADING = re.compile(r"^#{3,4} `gl\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)`$")
TABLE_ROW = re.compile(r"^\| `gl\.([A-Za-z_]\w*)` \|")
MENTION = re.compile(r"(?<![\w.])gl\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")


def public_names() -> list[str]:
    return sorted(n for n in dir(gl) if not n.startswith("_") and not isinstance(getattr(gl, n), types.ModuleType))


def _resolve(dotted: str):
    obj = gl
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _needs_signature(obj) -> bool:
    if isinstance(obj, type) and issubclass(obj, enum.Enum):
        return False
    return callable(obj)


def headings() -> dict[str, int]:
    """dotted name -> line index of its heading."""
    out = {}
    for i, line in enumerate(LINES):
        m = HEADING.match(line)
        if m:
            assert m.group(1) not in out, f"gl.{m.group(1)} has two headings"
            out[m.group(1)] = i
    return out


def table_names() -> set[str]:
    return {m.group(1) for line in LINES if (m := TABLE_ROW.match(line))}


def _signature_line(i: int) -> str | None:
    for line in LINES[i + 1:]:
        if line.strip():
            return line.strip()
    return None


def test_public_names_are_gluons_own():
    foreign = []
    for n in public_names():
        obj = getattr(gl, n)
        mod = getattr(obj, "__module__", None) or type(obj).__module__
        if not mod.startswith("gluon."):
            foreign.append(f"{n} ({mod})")
    assert not foreign, f"re-exported non-gluon names (exclude them in this test's rule): {foreign}"


def test_every_public_name_is_documented():
    documented = set(headings()) | table_names()
    missing = [n for n in public_names() if n not in documented]
    assert not missing, (f"docs/LANGUAGE.md lacks {len(missing)} public name(s) of gluon.language: {missing}; add a "
                         "'### `gl.NAME`' heading (with the signature line under it for a callable)")


def test_callables_have_headings_not_just_table_rows():
    hs = headings()
    only_rows = [n for n in public_names() if _needs_signature(getattr(gl, n)) and n not in hs]
    assert not only_rows, f"callables documented without a heading (so without a signature): {only_rows}"


def test_no_stale_names():
    # `gl.NAME` is the placeholder the doc's own conventions paragraph uses
    stale = sorted({m.group(1) for m in MENTION.finditer(DOC) if m.group(1) != "NAME" and not _resolves(m.group(1))})
    assert not stale, f"docs/LANGUAGE.md mentions names gluon.language does not have: {stale}"


def _resolves(dotted: str) -> bool:
    try:
        _resolve(dotted)
    except AttributeError:
        return False
    return True


def test_signatures_match_inspect():
    wrong = []
    for name, i in headings().items():
        obj = _resolve(name)
        if not _needs_signature(obj):
            continue
        want = f"`gl.{name}{inspect.signature(obj)}`"
        got = _signature_line(i)
        if got != want:
            wrong.append(f"gl.{name}:\n    doc:     {got}\n    inspect: {want}")
    assert not wrong, "signature lines differ from inspect.signature:\n" + "\n".join(wrong)


def test_the_rule_would_catch_a_new_name(monkeypatch):
    monkeypatch.setattr(gl, "brand_new_builtin", lambda x: x, raising=False)
    documented = set(headings()) | table_names()
    assert "brand_new_builtin" in public_names() and "brand_new_builtin" not in documented


def test_layout_is_the_package_layout():
    assert gl.Layout is gluon.Layout


def test_linked_from_readme_and_links_atomics():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "| `docs/LANGUAGE.md` |" in readme
    assert "](ATOMICS.md)" in DOC and os.path.exists(os.path.join(ROOT, "docs", "ATOMICS.md"))
