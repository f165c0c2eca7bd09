"""The layering, read from the source: every import of a project module (at the top of a file or inside a
function; `if TYPE_CHECKING:` blocks excepted) goes down the pipeline, never back up, and no modules
import each other in a cycle.

    spec -> DSL/trace (language) -> IR -> passes -> backend -> runtime,   tuning and build on top

A module's allowed imports are the layers below it (LAYERS); its own package's modules are always allowed.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "gluon"

VOCABULARY = {"gluon.version", "gluon.dtypes", "gluon.types", "gluon.arch", "gluon.abi", "gluon.fsutil"}
CORE = VOCABULARY | {"gluon.ir", "gluon.frontend"}
COMPILER = CORE | {"gluon.passes", "gluon.language", "gluon.backend", "gluon.runtime", "gluon.cache", "gluon.jit"}

# module (or package) -> the project modules/packages it may import
LAYERS: dict[str, set[str]] = {
    "gluon.version": set(),
    "gluon.dtypes": set(),
    "gluon.arch": set(),
    "gluon.fsutil": set(),
    "gluon.frontend": set(),
    "gluon.types": {"gluon.dtypes"},
    "gluon.abi": {"gluon.dtypes", "gluon.types", "gluon.arch"},
    "gluon.ir": {"gluon.types", "gluon.dtypes", "gluon.arch", "gluon.ir_types", "gluon.ir_verify", "gluon.ir_print"},
    # gluon.ir's parts (the types, the per-op verifiers, the printer): below it, reached through it by everyone else
    "gluon.ir_types": {"gluon.types", "gluon.dtypes"},
    "gluon.ir_verify": {"gluon.ir_types", "gluon.types", "gluon.dtypes"},
    "gluon.ir_print": {"gluon.ir_types"},
    "gluon.passes": {"gluon.ir", "gluon.types", "gluon.dtypes", "gluon.arch"},
    "gluon.language": CORE - {"gluon.abi"},
    "gluon.cache": {"gluon.fsutil"},
    "gluon.backend": VOCABULARY | {"gluon.ir", "gluon.cache"},
    "gluon.runtime": {"gluon.abi", "gluon.dtypes", "gluon.types", "gluon.arch"},
    "gluon.jit": COMPILER,
    "gluon.kernels": COMPILER,
    "gluon.interpret": COMPILER,          # the CPU interpreter: traces through the JIT, installs itself there
    "gluon.dsl": CORE | {"gluon.language", "gluon.jit"},
    "gluon.tuning": COMPILER | {"gluon.kernels"},
    "gluon.loader": COMPILER | {"gluon.tuning"},
    "gluon.cli": COMPILER | {"gluon.kernels", "gluon.tuning", "gluon.loader"},
    "gluon.__main__": {"gluon.cli"},
}
TOP = "gluon"   # the package root may import anything; nothing may import it


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = list(f.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


MODULES = _modules()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def _imports(mod: str) -> list[tuple[str, int, bool]]:
    """(imported project module, line, inside a function) for every import statement of `mod`."""
    f = MODULES[mod]
    tree = ast.parse(f.read_text())
    skip = _type_checking_nodes(tree)
    pkg = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
    funcs = {id(n) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(fn)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[:len(pkg.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names]
        else:
            names = [a.name for a in node.names]
        for name in names:
            if name.split(".")[0] != "gluon":
                continue
            while name not in MODULES and "." in name:
                name = name.rpartition(".")[0]
            if name != mod:
                out.append((name, node.lineno, id(node) in funcs))
    return out


def _layer(mod: str) -> str | None:
    """The LAYERS key governing `mod` (the longest prefix)."""
    best = None
    for key in LAYERS:
        if (mod == key or mod.startswith(key + ".")) and (best is None or len(key) > len(best)):
            best = key
    return best


def _allowed(mod: str, target: str) -> bool:
    layer = _layer(mod)
    if target == TOP:
        return mod == TOP
    if layer is None or target.startswith(layer + ".") or target == layer:
        return True
    return any(target == a or target.startswith(a + ".") for a in LAYERS[layer])


def test_every_module_has_a_layer():
    assert [m for m in MODULES if m != TOP and _layer(m) is None] == []


@pytest.mark.parametrize("mod", sorted(m for m in MODULES if m != TOP))
def test_imports_go_down_the_layers(mod):
    bad = [f"{MODULES[mod].relative_to(ROOT.parent)}:{line} imports {t}" + (" (in a function)" if local else "")
           for t, line, local in _imports(mod) if not _allowed(mod, t)]
    assert bad == [], f"{mod} ({_layer(mod)}) may import only {sorted(LAYERS[_layer(mod)])}:\n" + "\n".join(bad)


def test_no_import_cycles():
    graph = {m: {t for t, _, _ in _imports(m)} for m in MODULES}
    # Tarjan's strongly connected components
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    assert sccs == []


def test_the_rules_catch_a_back_edge():
    """The check itself: the runtime importing the backend, or a kernel importing the tuner, is refused."""
    assert not _allowed("gluon.runtime.launcher", "gluon.backend.binary")
    assert not _allowed("gluon.kernels.gemm_sm90", "gluon.tuning.template")
    assert not _allowed("gluon.backend.compile", TOP)
    assert not _allowed("gluon.ir", "gluon.language.core")
    assert _allowed("gluon.tuning.templates.gemm_sm90", "gluon.kernels.gemm_sm90")


# Function-local imports of project modules hide the graph; they are kept where a module defers a heavy
# third-party dependency (pydantic, optuna, pandas, matplotlib behind the spec and results modules) or a
# CLI subcommand, so that `import gluon` and `gluon --help` stay fast.
# gluon.interpret: `import gluon` installs its entry in gluon.jit; its modules (numpy) load on the first use.
LOCAL_IMPORTS_ALLOWED = {"gluon.cli", "gluon.loader", "gluon.tuning", "gluon.interpret"}


def test_function_local_imports_only_where_they_defer_heavy_dependencies():
    bad = [f"{m}:{line} imports {t}" for m in MODULES for t, line, local in _imports(m)
           if local and not any(m == p or m.startswith(p + ".") for p in LOCAL_IMPORTS_ALLOWED)]
    assert bad == []


def test_no_module_is_over_800_lines():
    long = {str(f.relative_to(ROOT.parent)): n for f in ROOT.rglob("*.py")
            if (n := len(f.read_text().splitlines())) > 800}
    assert long == {}
