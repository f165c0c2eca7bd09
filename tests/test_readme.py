"""README.md's code runs as written: every ```python block and every `python -c '...'` line parses and uses
no name it does not define (what left `grid`, `a` and `b` undefined before); on a GPU each block runs."""
import ast
import builtins
import os
import re
import shlex

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = open(os.path.join(ROOT, "README.md")).read()


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, re.S)


def _one_liners() -> list[str]:
    out = []
    for line in README.splitlines():
        line = line.strip()
        if line.startswith(("python -c ", "python3 -c ")):
            out.append(shlex.split(line)[2])
    return out


def _undefined(code: str) -> set[str]:
    tree = ast.parse(code)
    bound, used = set(dir(builtins)), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return used - bound


def test_the_readme_has_code_to_check():
    assert len(_python_blocks()) >= 2 and _one_liners()


CODE = _python_blocks() + _one_liners()


@pytest.mark.parametrize("code", CODE, ids=[f"code{i}" for i in range(len(CODE))])
def test_readme_code_defines_every_name_it_uses(code):
    assert _undefined(code) == set()


@pytest.mark.gpu
@pytest.mark.parametrize("code", _python_blocks(), ids=[f"block{i}" for i in range(len(_python_blocks()))])
def test_readme_blocks_run_on_the_gpu(code, tmp_path):
    """Each block saved as a file and run by python, as a user would (gluon.jit reads the kernel's source)."""
    import subprocess
    import sys
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    script = tmp_path / "readme_block.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]


def test_the_interpreter_block_runs_on_the_cpu():
    """The README's interpreter block needs no GPU: it runs here, in the CPU suite."""
    pytest.importorskip("torch")
    (block,) = [b for b in _python_blocks() if "set_enabled(True)" in b]
    exec(compile(block, "README.md", "exec"), {})
