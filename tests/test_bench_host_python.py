"""bench/host_python.py runs on the CPU (its backend launches nothing) and writes a row per path."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_python_per_call_bench_runs_without_a_gpu(tmp_path):
    out = tmp_path / "rows.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "host_python.py"), "--calls", "20", "--repeats",
                        "1", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(out.read_text())
    paths = [row["path"] for row in data["rows"]]
    assert "JIT kernel[grid](...)" in paths and "declared call (gluon.load's)" in paths and data["meta"]["complete"]
    assert "gluon.load's callable (a, b, scales)" in paths             # the fp8 block-scaled loaded call
    assert all(row["us"] > 0 for row in data["rows"]) and "us/call" in r.stdout


def test_a_bad_count_is_one_line_and_exit_2():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "host_python.py"), "--calls", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "positive count" in r.stderr and "Traceback" not in r.stderr
