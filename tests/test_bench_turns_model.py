"""bench/turns_model.py: the queueing model of warpgroup turns runs, writes its rows, and says what the kernels'
turn placement rests on (a turn handed on at the issue changes nothing where the tensor cores serve the GEMMs in
flight together; one held through the GEMM spreads three warpgroups apart)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.turns_model import busy_share, busy_share_overlapped  # noqa: E402


def test_turns_held_through_the_gemm_spread_shared_tensor_cores():
    base = busy_share(3, 256, 256, 528, 100, (), False)
    assert abs(base - 0.49) < 0.02                                  # lockstep: GEMMs and softmaxes in sequence
    assert busy_share(3, 256, 256, 528, 100, ("S",), False) == base  # handed on at the issue: no change
    assert busy_share(3, 256, 256, 528, 100, ("PV",), True) > 0.9
    assert busy_share(3, 256, 256, 528, 100, (), False, "fifo") > 0.95   # in issue order they spread alone


def test_the_overlapped_ping_pong_pays_only_with_its_turn_held_until_s_is_done():
    """D128's loop (two warpgroups, 512-cycle GEMMs): about what the default reads (63% of peak) with the turn
    handed on at the issue, the tensor cores busy throughout with it held."""
    issue = busy_share_overlapped(2, 512, 512, 528, 100, "issue")
    assert abs(issue - busy_share_overlapped(2, 512, 512, 528, 100, "none")) < 1e-9 and 0.6 < issue < 0.7
    assert busy_share_overlapped(2, 512, 512, 528, 100, "held") > 0.95


def test_the_script_prints_and_writes_every_row(tmp_path):
    out = tmp_path / "rows.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "turns_model.py"), "--warpgroups", "3",
                        "--softmax", "528", "--blocks", "50", "--json", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(x["tensor"], x["warpgroups"], x.get("loop", "serial")) for x in rows] == [
        ("shared", 3, "serial"), ("fifo", 3, "serial"), ("shared", 3, "overlapped")]
    assert "P V turns held" in r.stdout and "turns held (S done)" in r.stdout
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "turns_model.py"), "--gemm", "256"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "exactly two" in bad.stderr
